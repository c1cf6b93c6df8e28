/* batch_norm on channels-last inputs on the CPU (the NHWC path of src/cpu/ops/batchnorm.c):
 * PyTorch's values (the 4-D batch_norm cases of tests/ref/cases_nn.py with the inputs made
 * channels-last, upstream gradients in both layouts); plain loops in double over shapes with
 * several row blocks, channel counts that are no multiple of a vector and row counts that are no
 * multiple of four, and over shapes that take the float32 AVX-512 loops (C a multiple of 16, the
 * sums in registers and in memory, streaming stores); finite differences in float64; the layout of
 * the output and of the input gradient; results bit for bit the same at 1 and 2 threads; the
 * shapes where channels-last and contiguous coincide (C = 1, H = W = 1); and nb_batch_norm_relu
 * (PyTorch's relu(batch_norm) among the reference cases, and bit for bit the two ops it fuses, in
 * both layouts). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbtest.h"
#include "nabla/nn.h"

#define MOMENTUM 0.1
#define EPS 1e-5

/* t copied channels-last; the copy must be channels-last and (for these shapes) not contiguous,
 * or the test would not reach the NHWC kernel. */
static nb_tensor *to_cl(const nb_tensor *t)
{
    nb_tensor *c = NBT_CHECK(nb_contiguous_format(t, NB_CHANNELS_LAST));
    assert_true(nb_tensor_is_contiguous_format(c, NB_CHANNELS_LAST));
    assert_false(nb_tensor_is_contiguous_format(c, NB_CONTIGUOUS_FORMAT));
    return c;
}

static void assert_cl(const nb_tensor *t, const char *what)
{
    if (!nb_tensor_is_contiguous_format(t, NB_CHANNELS_LAST) || nb_tensor_is_contiguous_format(t, NB_CONTIGUOUS_FORMAT)) {
        print_error("%s is not channels-last\n", what);
        fail();
    }
}

static nb_tensor *leaf_of(nb_tensor *t)
{
    NBT_OK(nb_tensor_set_requires_grad(t, true));
    return t;
}

/* ---- PyTorch's values ------------------------------------------------------------------------ */

/* float64 1e-10; float32 as tests/test_nn_conv.c (statistics reduced in another order). */
static void tolerances(nb_dtype dt, double *rtol, double *atol)
{
    *rtol = dt == NB_FLOAT64 ? 1e-10 : 1e-4;
    *atol = dt == NB_FLOAT64 ? 1e-12 : 1e-5;
}

static void run_ref_case(const nb_tensor_map *m, const char *name, bool gout_cl)
{
    nb_scope *sc = nb_scope_begin();
    char what[256];
    int64_t params[3] = {0}; /* training(, relu, the residual's input index) */
    double scalars[2];
    nb_tensor *pt = NBT_CHECK(nbt_ref(m, name, "params"));
    NBT_OK(nb_tensor_read(pt, params, (size_t)nb_tensor_numel(pt) * sizeof(int64_t)));
    NBT_OK(nb_tensor_read(NBT_CHECK(nbt_ref(m, name, "scalars")), scalars, sizeof scalars));
    /* the residual (nb_batch_norm_add_relu) comes after x, weight and bias; made channels-last
     * when the upstream gradient is not (the op lays it out as x in either case) */
    int ri = (int)params[2];
    bool affine = nbt_ref(m, name, ri == 1 ? "in2" : "in1") != NULL;
    nb_tensor *x = leaf_of(to_cl(NBT_CHECK(nbt_ref(m, name, "in0"))));
    nb_tensor *w = affine ? leaf_of(NBT_CHECK(nb_clone(nbt_ref(m, name, "in1")))) : NULL;
    nb_tensor *b = affine ? leaf_of(NBT_CHECK(nb_clone(nbt_ref(m, name, "in2")))) : NULL, *r = NULL;
    if (ri) {
        char key[16];
        snprintf(key, sizeof key, "in%d", ri);
        nb_tensor *r0 = NBT_CHECK(nbt_ref(m, name, key));
        r = leaf_of(gout_cl ? NBT_CHECK(nb_clone(r0)) : to_cl(r0));
    }
    nb_tensor *rm = NBT_CHECK(nb_clone(nbt_ref(m, name, "rm"))), *rv = NBT_CHECK(nb_clone(nbt_ref(m, name, "rv")));
    nb_tensor *y = NBT_CHECK(r ? (params[1] ? nb_batch_norm_add_relu : nb_batch_norm_add)(
                                     x, r, rm, rv, w, b, params[0] != 0, scalars[0], scalars[1])
                               : (params[1] ? nb_batch_norm_relu : nb_batch_norm)(x, rm, rv, w, b, params[0] != 0,
                                                                                  scalars[0], scalars[1]));
    double rtol, atol;
    tolerances(nb_tensor_dtype(y), &rtol, &atol);
    snprintf(what, sizeof what, "%s: out", name);
    assert_cl(y, what);
    nbt_assert_close(y, nbt_ref(m, name, "out"), rtol, atol, what);
    snprintf(what, sizeof what, "%s: running_mean", name);
    nbt_assert_close(rm, nbt_ref(m, name, "rm_out"), rtol, atol, what);
    snprintf(what, sizeof what, "%s: running_var", name);
    nbt_assert_close(rv, nbt_ref(m, name, "rv_out"), rtol, atol, what);
    nb_tensor *gout = NBT_CHECK(nbt_ref(m, name, "gout"));
    NBT_OK(nb_backward(y, gout_cl ? to_cl(gout) : gout, NB_BACKWARD_DEFAULT));
    /* the leaves in the order of the case's inputs */
    nb_tensor *leaves[4] = {x, w, b};
    int nin = affine ? 3 : 1;
    if (r) leaves[nin++] = r;
    for (int i = 0; i < nin; i++) {
        char key[16];
        snprintf(key, sizeof key, "grad%d", i);
        snprintf(what, sizeof what, "%s (upstream gradient %s): %s", name, gout_cl ? "channels-last" : "contiguous",
                 key);
        nb_tensor *g = NBT_CHECK(nb_tensor_grad(leaves[i]));
        if (i == 0) assert_cl(g, what);
        nbt_assert_close(g, NBT_CHECK(nbt_ref(m, name, key)), rtol, atol, what);
    }
    nb_scope_end(sc);
}

/* Every 4-D batch_norm case (training and evaluation, with and without affine parameters, a
 * channel far from zero, with the fused ReLU, with the fused residual and ReLU), float32 and
 * float64. */
static void test_pytorch_cases(void **state)
{
    nb_tensor_map *m = nbt_load_ref("nn");
    char **names;
    int n = nbt_case_names(m, &names), run = 0;
    bool seen_eval = false, seen_noaffine = false;
    for (int i = 0; i < n; i++) {
        if (strncmp(names[i], "bn_", 3) != 0) continue;
        nb_scope *sc = nb_scope_begin();
        bool four_d = nb_tensor_ndim(NBT_CHECK(nbt_ref(m, names[i], "in0"))) == 4;
        nb_scope_end(sc);
        if (!four_d) continue;
        run_ref_case(m, names[i], false);
        run_ref_case(m, names[i], true);
        seen_eval = seen_eval || strstr(names[i], "eval");
        seen_noaffine = seen_noaffine || strstr(names[i], "noaffine");
        run++;
    }
    nbt_free_names(names, n);
    nb_tensor_map_free(m);
    assert_true(run >= 16 && seen_eval && seen_noaffine);
}

/* ---- plain loops ----------------------------------------------------------------------------- */

typedef struct bn_ref {
    int64_t n, c, s; /* [N, C, S = H W] */
    double *x, *g, *w, *b, *rm, *rv; /* inputs (w, b NULL without affine); rm, rv updated */
    double *y, *gx, *gw, *gb;        /* outputs */
} bn_ref;

/* Batch norm and its backward by the definitions, in double with two-pass statistics. */
static void ref_run(bn_ref *r, bool training)
{
    int64_t n = r->n, c = r->c, s = r->s;
    double m = (double)(n * s);
    for (int64_t j = 0; j < c; j++) {
        double mean = r->rm[j], var = r->rv[j];
        if (training) {
            double sum = 0, sq = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t k = 0; k < s; k++) sum += r->x[(i * c + j) * s + k];
            mean = sum / m;
            for (int64_t i = 0; i < n; i++)
                for (int64_t k = 0; k < s; k++) sq += pow(r->x[(i * c + j) * s + k] - mean, 2);
            var = sq / m;
            r->rm[j] = (1 - MOMENTUM) * r->rm[j] + MOMENTUM * mean;
            r->rv[j] = (1 - MOMENTUM) * r->rv[j] + MOMENTUM * var * m / (m - 1);
        }
        double invstd = 1 / sqrt(var + EPS), w = r->w ? r->w[j] : 1, sg = 0, sgh = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t k = 0; k < s; k++) {
                int64_t e = (i * c + j) * s + k;
                double xh = (r->x[e] - mean) * invstd;
                r->y[e] = xh * w + (r->b ? r->b[j] : 0);
                sg += r->g[e], sgh += r->g[e] * xh;
            }
        r->gw[j] = sgh, r->gb[j] = sg;
        for (int64_t i = 0; i < n; i++)
            for (int64_t k = 0; k < s; k++) {
                int64_t e = (i * c + j) * s + k;
                double xh = (r->x[e] - mean) * invstd;
                r->gx[e] = training ? w * invstd * (r->g[e] - sg / m - xh * sgh / m) : w * invstd * r->g[e];
            }
    }
}

/* The values of t (any dtype) in logical order, as doubles: malloc'd. */
static double *values(const nb_tensor *t)
{
    int64_t k = nb_tensor_numel(t);
    double *v = malloc((size_t)k * sizeof *v);
    assert_non_null(v);
    NBT_OK(nb_tensor_read(NBT_CHECK(nb_to_dtype(t, NB_FLOAT64)), v, (size_t)k * sizeof *v));
    return v;
}

static nb_tensor *from_values(const double *v, const int64_t *shape, int ndim)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_FLOAT64;
    return NBT_CHECK(nb_tensor_from_data(v, shape, ndim, &p));
}

/* One configuration against ref_run: nabla on a channels-last copy of x (make_cl), or on x viewed
 * with the channels-last strides [H W C, 1, W C, C] taken literally (for the shapes where the
 * layouts coincide, whose size-1 dims then have strides no contiguous tensor has). */
static void check_vs_loops(const int64_t *shape, nb_dtype dt, bool training, bool affine, bool make_cl)
{
    nb_scope *sc = nb_scope_begin();
    char what[256];
    snprintf(what, sizeof what, "[%lld, %lld, %lld, %lld] %s %s %s", (long long)shape[0], (long long)shape[1],
             (long long)shape[2], (long long)shape[3], nb_dtype_name(dt), training ? "training" : "evaluation",
             affine ? "affine" : "no affine");
    int64_t c = shape[1], cs[1] = {c};
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = dt;
    /* far from zero, so that a statistic computed from the wrong elements cannot pass */
    nb_tensor *x0 = NBT_CHECK(nb_add_scalar(nb_mul_scalar(nb_randn(shape, 4, &p), 3), 5));
    nb_tensor *x = leaf_of(make_cl ? to_cl(x0) : x0);
    nb_tensor *g = NBT_CHECK(nb_randn(shape, 4, &p));
    nb_tensor *w = affine ? leaf_of(NBT_CHECK(nb_randn(cs, 1, &p))) : NULL;
    nb_tensor *b = affine ? leaf_of(NBT_CHECK(nb_randn(cs, 1, &p))) : NULL;
    nb_tensor *rm = NBT_CHECK(nb_randn(cs, 1, &p)), *rv = NBT_CHECK(nb_add_scalar(nb_rand(cs, 1, &p), 0.5));
    bn_ref r = {.n = shape[0], .c = c, .s = shape[2] * shape[3], .x = values(x), .g = values(g),
                .w = affine ? values(w) : NULL, .b = affine ? values(b) : NULL, .rm = values(rm), .rv = values(rv)};
    int64_t k = nb_tensor_numel(x);
    r.y = malloc((size_t)k * sizeof(double)), r.gx = malloc((size_t)k * sizeof(double));
    r.gw = malloc((size_t)c * sizeof(double)), r.gb = malloc((size_t)c * sizeof(double));
    assert_true(r.y && r.gx && r.gw && r.gb);
    ref_run(&r, training);

    int64_t st[4] = {shape[1] * shape[2] * shape[3], 1, shape[3] * shape[1], shape[1]};
    nb_tensor *xin = make_cl ? x : NBT_CHECK(nb_as_strided(x, shape, st, 4, 0));
    nb_tensor *y = NBT_CHECK(nb_batch_norm(xin, rm, rv, w, b, training, MOMENTUM, EPS));
    NBT_OK(nb_backward(y, make_cl ? to_cl(g) : g, NB_BACKWARD_DEFAULT));
    nb_tensor *gx = NBT_CHECK(nb_tensor_grad(x));
    assert_true(nb_tensor_is_contiguous_format(y, NB_CHANNELS_LAST));
    if (make_cl) {
        assert_cl(y, what);
        assert_cl(gx, what);
    } else {
        assert_true(nb_tensor_is_contiguous_format(y, NB_CONTIGUOUS_FORMAT));
    }
    double rtol = dt == NB_FLOAT64 ? 1e-9 : 1e-4, atol = dt == NB_FLOAT64 ? 1e-11 : 2e-5;
    char item[320];
    const struct {
        const char *name;
        const nb_tensor *got;
        const double *want;
        const int64_t *shape;
        int ndim;
    } cmp[] = {{"out", y, r.y, shape, 4},      {"running_mean", rm, r.rm, cs, 1}, {"running_var", rv, r.rv, cs, 1},
               {"grad x", gx, r.gx, shape, 4}, {"grad weight", affine ? nb_tensor_grad(w) : NULL, r.gw, cs, 1},
               {"grad bias", affine ? nb_tensor_grad(b) : NULL, r.gb, cs, 1}};
    for (size_t i = 0; i < sizeof cmp / sizeof *cmp; i++) {
        if (i >= 4 && !affine) continue;
        snprintf(item, sizeof item, "%s: %s", what, cmp[i].name);
        /* the parameter gradients are sums over N H W values: their float32 rounding grows with it */
        double at = i >= 4 && dt == NB_FLOAT32 ? atol * sqrt((double)(r.n * r.s)) : atol;
        nbt_assert_close(cmp[i].got, from_values(cmp[i].want, cmp[i].shape, cmp[i].ndim), rtol, at, item);
    }
    free(r.x), free(r.g), free(r.w), free(r.b), free(r.rm), free(r.rv);
    free(r.y), free(r.gx), free(r.gw), free(r.gb);
    nb_scope_end(sc);
}

/* Shapes: tiny (30 rows, two left after the four-row steps), one block with an odd C, several
 * blocks with C = 33, the block cap (64) reached with uneven blocks, and a wide C. Then the
 * float32 AVX-512 loops' (C a multiple of 16): sums in registers (C = 16, 64, 128) and in memory
 * (48, 272), row counts no multiple of their 16-row steps, and an output of 4 MB (written with
 * streaming stores). */
static void test_vs_loops(void **state)
{
    static const int64_t shapes[][4] = {{2, 8, 3, 5},     {3, 5, 7, 9},      {4, 33, 31, 17}, {4, 24, 110, 110},
                                        {2, 130, 9, 7},   {3, 16, 13, 11},   {2, 64, 31, 17}, {2, 128, 9, 7},
                                        {2, 48, 23, 21},  {1, 272, 15, 13},  {4, 64, 64, 64}};
    nb_manual_seed(11);
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int dt = 0; dt < 2; dt++)
            for (int mode = 0; mode < 4; mode++)
                check_vs_loops(shapes[i], dt ? NB_FLOAT64 : NB_FLOAT32, mode & 1, mode & 2, true);
}

/* C = 1 and H = W = 1: channels-last and contiguous are the same memory (nabla takes the
 * contiguous kernel); the results are still right and count as both layouts. */
static void test_layouts_coincide(void **state)
{
    static const int64_t shapes[][4] = {{4, 1, 5, 6}, {6, 5, 1, 1}};
    nb_manual_seed(12);
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int mode = 0; mode < 4; mode++) check_vs_loops(shapes[i], NB_FLOAT64, mode & 1, mode & 2, false);
    nb_scope *sc = nb_scope_begin();
    nb_tensor *x = NBT_CHECK(nb_randn((int64_t[]){6, 5, 1, 1}, 4, NULL));
    nb_tensor *xc = NBT_CHECK(nb_contiguous_format(x, NB_CHANNELS_LAST));
    assert_true(nb_tensor_is_contiguous_format(xc, NB_CONTIGUOUS_FORMAT));
    nb_tensor *y = NBT_CHECK(nb_batch_norm(xc, NULL, NULL, NULL, NULL, true, MOMENTUM, EPS));
    assert_true(nb_tensor_is_contiguous_format(y, NB_CHANNELS_LAST));
    assert_true(nb_tensor_is_contiguous_format(y, NB_CONTIGUOUS_FORMAT));
    nb_scope_end(sc);
}

/* ---- finite differences ---------------------------------------------------------------------- */

typedef struct gc_ctx {
    bool training;
    nb_tensor *rm, *rv;
} gc_ctx;

/* The input is made channels-last inside (a differentiable copy), so that the gradient check
 * goes through the NHWC kernel whatever layout its leaves have. */
static nb_tensor *bn_fn(nb_tensor *const *in, int n, void *ctx)
{
    const gc_ctx *c = ctx;
    nb_tensor *x = nb_contiguous_format(in[0], NB_CHANNELS_LAST);
    if (!x || nb_tensor_is_contiguous_format(x, NB_CONTIGUOUS_FORMAT)) return NULL;
    return nb_batch_norm(x, c->training ? NULL : c->rm, c->training ? NULL : c->rv, n > 1 ? in[1] : NULL,
                         n > 2 ? in[2] : NULL, c->training, MOMENTUM, EPS);
}

static void test_gradcheck(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_manual_seed(13);
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_FLOAT64;
    int64_t shape[4] = {3, 4, 5, 6}, cs[1] = {4};
    nb_tensor *in[3] = {NBT_CHECK(nb_add_scalar(nb_randn(shape, 4, &p), 2)), NBT_CHECK(nb_randn(cs, 1, &p)),
                        NBT_CHECK(nb_randn(cs, 1, &p))};
    gc_ctx ctx = {.rm = NBT_CHECK(nb_randn(cs, 1, &p)), .rv = NBT_CHECK(nb_add_scalar(nb_rand(cs, 1, &p), 0.5))};
    for (int mode = 0; mode < 4; mode++) {
        ctx.training = mode & 1;
        char what[64];
        snprintf(what, sizeof what, "batch_norm channels-last %s%s", ctx.training ? "training" : "evaluation",
                 mode & 2 ? " affine" : "");
        nbt_gradcheck(bn_fn, &ctx, in, mode & 2 ? 3 : 1, 1e-6, 1e-7, 1e-5, what);
    }
    nb_scope_end(sc);
}

/* ---- thread counts --------------------------------------------------------------------------- */

/* Everything batch_norm gives (output, running statistics, the three gradients), float32
 * training on shapes of many row blocks (C = 24, and C = 64 for the AVX-512 loops, with their
 * streaming stores), run at 1 and 2 threads: the same bits. */
static void thread_counts(const int64_t *shape)
{
    nb_scope *sc = nb_scope_begin();
    int prev = nb_get_num_threads();
    int64_t cs[1] = {shape[1]};
    nb_tensor *x = to_cl(NBT_CHECK(nb_add_scalar(nb_randn(shape, 4, NULL), 1)));
    nb_tensor *g = to_cl(NBT_CHECK(nb_randn(shape, 4, NULL)));
    nb_tensor *w = NBT_CHECK(nb_randn(cs, 1, NULL)), *b = NBT_CHECK(nb_randn(cs, 1, NULL)), *res[2][6];
    for (int t = 0; t < 2; t++) {
        NBT_OK(nb_set_num_threads(t + 1));
        nb_tensor *l[3] = {nbt_leaf(x), nbt_leaf(w), nbt_leaf(b)};
        res[t][1] = NBT_CHECK(nb_zeros(cs, 1, NULL));
        res[t][2] = NBT_CHECK(nb_ones(cs, 1, NULL));
        res[t][0] = NBT_CHECK(nb_batch_norm(l[0], res[t][1], res[t][2], l[1], l[2], true, MOMENTUM, EPS));
        assert_cl(res[t][0], "batch_norm's output");
        NBT_OK(nb_backward(res[t][0], g, NB_BACKWARD_DEFAULT));
        for (int k = 0; k < 3; k++) res[t][k + 3] = NBT_CHECK(nb_tensor_grad(l[k]));
    }
    NBT_OK(nb_set_num_threads(prev));
    for (int k = 0; k < 6; k++) nbt_assert_close(res[1][k], res[0][k], 0, 0, "batch_norm at 1 and 2 threads");
    nb_scope_end(sc);
}

static void test_thread_counts(void **state)
{
    nb_manual_seed(14);
    thread_counts((int64_t[]){4, 24, 110, 110});
    thread_counts((int64_t[]){4, 64, 64, 64});
}

/* ---- the fused ReLU ----------------------------------------------------------------------- */

/* nb_batch_norm_relu against nb_relu(nb_batch_norm(...)), and nb_batch_norm_add_relu against
 * nb_relu(nb_add(nb_batch_norm(...), r)), on the same data: the output, the running statistics
 * and the gradients (x, weight, bias and the residual's) the same bits, in both layouts, float32
 * and float64, training and evaluation (the fused backward recomputes the ReLU's mask from x
 * (and r) and sums in the plain kernels' order). The first shape has many row blocks, a channel
 * count that is no multiple of a vector and, channels-last, a row count that is no multiple of
 * four; the other two take the float32 AVX-512 loops (C = 32 and 48). x is centred so that
 * about half of the values are clipped. The residual is made in the other layout in half of the
 * runs (the fused op lays it out as x). Without relu: nb_batch_norm_add against nb_add(
 * nb_batch_norm(...), r), the residual's runs only. */
static void relu_fused_bitwise(const int64_t *shape, bool relu)
{
    int64_t cs[1] = {shape[1]};
    int runs = 0;
    for (int mode = relu ? 0 : 8; mode < 24; mode++) {
        nb_scope *sc = nb_scope_begin();
        bool cl = mode & 1, training = mode & 2, residual = mode >= 8, other_layout = mode >= 16;
        nb_tensor_params p = nb_tensor_params_default();
        p.dtype = mode & 4 ? NB_FLOAT64 : NB_FLOAT32;
        nb_tensor *x = NBT_CHECK(nb_randn(shape, 4, &p)), *g = NBT_CHECK(nb_randn(shape, 4, &p));
        nb_tensor *r = residual ? NBT_CHECK(nb_randn(shape, 4, &p)) : NULL;
        if (cl) x = to_cl(x), g = to_cl(g);
        if (r && cl != other_layout) r = to_cl(r);
        nb_tensor *w = NBT_CHECK(nb_randn(cs, 1, &p)), *b = NBT_CHECK(nb_randn(cs, 1, &p)), *res[2][8];
        nb_tensor *rm = NBT_CHECK(nb_randn(cs, 1, &p)), *rv = NBT_CHECK(nb_add_scalar(nb_rand(cs, 1, &p), 0.5));
        for (int fused = 0; fused < 2; fused++) {
            nb_tensor *l[4] = {nbt_leaf(x), nbt_leaf(w), nbt_leaf(b), r ? nbt_leaf(r) : NULL};
            res[fused][1] = NBT_CHECK(nb_clone(rm));
            res[fused][2] = NBT_CHECK(nb_clone(rv));
            if (fused && r)
                res[fused][0] = (relu ? nb_batch_norm_add_relu : nb_batch_norm_add)(
                    l[0], l[3], res[fused][1], res[fused][2], l[1], l[2], training, MOMENTUM, EPS);
            else if (fused)
                res[fused][0] = nb_batch_norm_relu(l[0], res[fused][1], res[fused][2], l[1], l[2], training, MOMENTUM,
                                                   EPS);
            else {
                nb_tensor *y = nb_batch_norm(l[0], res[fused][1], res[fused][2], l[1], l[2], training, MOMENTUM, EPS);
                y = r ? nb_add(y, l[3]) : y;
                res[fused][0] = relu ? nb_relu(y) : y;
            }
            NBT_CHECK(res[fused][0]);
            if (cl) assert_cl(res[fused][0], "the fused op's output");
            NBT_OK(nb_backward(res[fused][0], g, NB_BACKWARD_DEFAULT));
            for (int k = 0; k < 4; k++) res[fused][k + 3] = l[k] ? NBT_CHECK(nb_tensor_grad(l[k])) : NULL;
            if (cl) assert_cl(res[fused][3], "the fused op's input gradient");
        }
        /* the ReLU clipped about half of the outputs */
        res[0][7] = NBT_CHECK(nb_sum(nb_to_dtype(nb_gt_scalar(res[0][0], 0), NB_FLOAT64), NULL, 0, false));
        double kept;
        NBT_OK(nb_item(res[0][7], &kept));
        assert_true(!relu || (kept > 0.3 * (double)nb_tensor_numel(x) && kept < 0.7 * (double)nb_tensor_numel(x)));
        char what[160];
        snprintf(what, sizeof what, "%s against %s (%s, %s, %s%s)",
                 r ? (relu ? "batch_norm_add_relu" : "batch_norm_add") : "batch_norm_relu",
                 r ? (relu ? "relu(batch_norm + r)" : "batch_norm + r") : "relu(batch_norm)",
                 cl ? "channels-last" : "contiguous",
                 training ? "training" : "evaluation", nb_dtype_name(nb_tensor_dtype(x)),
                 other_layout ? ", r in the other layout" : "");
        for (int k = 0; k < (r ? 7 : 6); k++) nbt_assert_close(res[1][k], res[0][k], 0, 0, what);
        runs++;
        nb_scope_end(sc);
    }
    assert_int_equal(runs, relu ? 24 : 16);
}

static void test_relu_fused_bitwise(void **state)
{
    nb_manual_seed(15);
    for (int relu = 1; relu >= 0; relu--) { /* then nb_batch_norm_add against batch_norm + r */
        relu_fused_bitwise((int64_t[]){3, 19, 37, 31}, relu);
        relu_fused_bitwise((int64_t[]){3, 32, 37, 31}, relu); /* the AVX-512 loops, sums in registers */
        relu_fused_bitwise((int64_t[]){2, 48, 37, 31}, relu); /* and in memory */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pytorch_cases),
        cmocka_unit_test(test_vs_loops),
        cmocka_unit_test(test_layouts_coincide),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_thread_counts),
        cmocka_unit_test(test_relu_fused_bitwise),
    };
    return NBT_RUN(tests);
}
