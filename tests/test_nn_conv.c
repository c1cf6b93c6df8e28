/* Layers of nabla/nn.h: conv2d, max/avg/adaptive-avg pooling and batch_norm against PyTorch
 * (tests/ref/cases_nn.py) on contiguous and non-contiguous inputs, forward, gradients and
 * batch norm's running statistics; gradients against finite differences in float64; the oneDNN
 * path of the conv kernels against their reference loops in float32; and the error messages. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbtest.h"
#include "nabla/nn.h"
#include "cpu/dnnl_impl.h"

enum { OP_CONV, OP_MAXP, OP_AVGP, OP_ADAPT, OP_BN };

typedef struct spec {
    int op, n;
    int64_t params[9];
    double momentum, eps;
    nb_tensor *rm, *rv; /* batch norm's running stats (the call updates them) */
} spec;

static nb_tensor *apply(const spec *s, nb_tensor *const *x)
{
    const int64_t *p = s->params;
    switch (s->op) {
    case OP_CONV: {
        nb_conv2d_params cp = {.stride = {p[0], p[1]}, .padding = {p[2], p[3]}, .dilation = {p[4], p[5]},
                               .groups = p[6], .relu = p[7] != 0};
        return nb_conv2d(x[0], x[1], s->n > 2 ? x[2] : NULL, &cp);
    }
    case OP_MAXP: return (p[8] ? nb_max_pool2d_relu : nb_max_pool2d)(x[0], p, p + 2, p + 4, p[6]);
    case OP_AVGP: return nb_avg_pool2d(x[0], p, p + 2, p + 4, p[6], p[7]);
    case OP_ADAPT: return nb_adaptive_avg_pool2d(x[0], p[0], p[1]);
    default: {
        /* p: training, relu, the residual's input index (0: none; after weight and bias) */
        int64_t ri = p[2], np = s->n - (ri ? 1 : 0);
        nb_tensor *w = np > 1 ? x[1] : NULL, *b = np > 2 ? x[2] : NULL;
        if (ri)
            return (p[1] ? nb_batch_norm_add_relu : nb_batch_norm_add)(x[0], x[ri], s->rm, s->rv, w, b, p[0],
                                                                       s->momentum, s->eps);
        return (p[1] ? nb_batch_norm_relu : nb_batch_norm)(x[0], s->rm, s->rv, w, b, p[0], s->momentum, s->eps);
    }
    }
}

static nb_tensor *apply_fn(nb_tensor *const *inputs, int n, void *ctx)
{
    return apply(ctx, inputs);
}

/* The case's op and parameters; batch norm's running stats are fresh copies (scope-tracked). */
static void read_spec(const nb_tensor_map *m, const char *name, spec *s)
{
    memset(s, 0, sizeof *s);
    int64_t op;
    NBT_OK(nb_item_int64(NBT_CHECK(nbt_ref(m, name, "op")), &op));
    s->op = (int)op;
    while (s->n < 4) {
        char key[16];
        snprintf(key, sizeof key, "in%d", s->n);
        if (!nbt_ref(m, name, key)) break;
        s->n++;
    }
    nb_tensor *p = NBT_CHECK(nbt_ref(m, name, "params"));
    assert_true(nb_tensor_numel(p) <= 9);
    NBT_OK(nb_tensor_read(p, s->params, (size_t)nb_tensor_numel(p) * sizeof(int64_t)));
    nb_tensor *sc = nbt_ref(m, name, "scalars");
    if (sc) {
        double v[2];
        NBT_OK(nb_tensor_read(sc, v, sizeof v));
        s->momentum = v[0];
        s->eps = v[1];
    }
    if (s->op == OP_BN) {
        s->rm = NBT_CHECK(nb_clone(NBT_CHECK(nbt_ref(m, name, "rm"))));
        s->rv = NBT_CHECK(nb_clone(NBT_CHECK(nbt_ref(m, name, "rv"))));
    }
}

/* float64: 1e-10. float32: rtol 1e-4 / atol 1e-5 for convolutions and batch norm: oneDNN sums a
 * convolution's products in another order than PyTorch's (im2col + GEMM) and batch norm's
 * statistics are reduced in another order, so float32 rounding differs by a few ulps of the
 * partial sums, more than 1e-5 of outputs near zero. Pooling: 1e-6 (the same operations). */
static void tolerances(const spec *s, nb_dtype dt, double *rtol, double *atol)
{
    if (dt == NB_FLOAT64) {
        *rtol = 1e-10;
        *atol = 1e-12;
    } else if (s->op == OP_CONV || s->op == OP_BN) {
        *rtol = 1e-4;
        *atol = 1e-5;
    } else {
        *rtol = 1e-6;
        *atol = 1e-7;
    }
}

static void check_grads(const nb_tensor_map *m, const char *name, nb_tensor *const *leaves, int n, double rtol,
                        double atol, const char *mode)
{
    char what[256], key[16];
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "grad%d", i);
        snprintf(what, sizeof what, "%s (%s): %s", name, mode, key);
        nb_tensor *g = NBT_CHECK(nb_tensor_grad(leaves[i]));
        nbt_assert_close(g, NBT_CHECK(nbt_ref(m, name, key)), rtol, atol, what);
    }
}

static void run_case(const nb_tensor_map *m, const char *name, bool noncontig)
{
    nb_scope *sc = nb_scope_begin();
    const char *mode = noncontig ? "non-contiguous" : "contiguous";
    spec s;
    read_spec(m, name, &s);
    nb_tensor *leaves[4];
    for (int i = 0; i < s.n; i++) {
        char key[16];
        snprintf(key, sizeof key, "in%d", i);
        nb_tensor *in = NBT_CHECK(nbt_ref(m, name, key));
        leaves[i] = noncontig ? nbt_noncontig(in) : NBT_CHECK(nb_clone(in));
        NBT_OK(nb_tensor_set_requires_grad(leaves[i], true));
    }
    nb_tensor *out = NBT_CHECK(apply(&s, leaves));
    double rtol, atol;
    tolerances(&s, nb_tensor_dtype(out), &rtol, &atol);
    char what[256];
    snprintf(what, sizeof what, "%s (%s): out", name, mode);
    nbt_assert_close(out, nbt_ref(m, name, "out"), rtol, atol, what);
    if (s.op == OP_BN) {
        snprintf(what, sizeof what, "%s (%s): running_mean", name, mode);
        nbt_assert_close(s.rm, nbt_ref(m, name, "rm_out"), rtol, atol, what);
        snprintf(what, sizeof what, "%s (%s): running_var", name, mode);
        nbt_assert_close(s.rv, nbt_ref(m, name, "rv_out"), rtol, atol, what);
    }
    NBT_OK(nb_backward(out, NBT_CHECK(nbt_ref(m, name, "gout")), NB_BACKWARD_DEFAULT));
    check_grads(m, name, leaves, s.n, rtol, atol, mode);
    nb_scope_end(sc);
}

static void test_pytorch_cases(void **state)
{
    nbt_run_reference("nn", 50, run_case);
}

/* The float64 cases' gradients against central differences, on cases with inputs of at most
 * 800 elements (larger ones take minutes and gather rounding noise in the differences), except
 * the max-pool cases with ties (not differentiable there: PyTorch's values check those). */
static void test_gradcheck(void **state)
{
    nb_tensor_map *m = nbt_load_ref("nn");
    char **names;
    int n = nbt_case_names(m, &names), checked = 0;
    for (int i = 0; i < n; i++) {
        if (!strstr(names[i], "/f64") || strstr(names[i], "ties")) continue;
        nb_scope *sc = nb_scope_begin();
        spec s;
        read_spec(m, names[i], &s);
        nb_tensor *in[4];
        bool small = true;
        for (int k = 0; k < s.n; k++) {
            char key[16];
            snprintf(key, sizeof key, "in%d", k);
            in[k] = NBT_CHECK(nbt_ref(m, names[i], key));
            small = small && nb_tensor_numel(in[k]) <= 800;
        }
        if (small) {
            nbt_gradcheck(apply_fn, &s, in, s.n, 1e-6, 1e-7, 1e-5, names[i]);
            checked++;
        }
        nb_scope_end(sc);
    }
    assert_true(checked >= 20);
    nbt_free_names(names, n);
    nb_tensor_map_free(m);
}

/* The oneDNN float32 path against the reference loops on the same data (conv cases), forward
 * and all three gradients. rtol 1e-4: the reference accumulates in float32 in its own order
 * (sums of up to 576 products here), oneDNN in blocks. */
static void test_dnnl_vs_reference(void **state)
{
    nb_tensor_map *m = nbt_load_ref("nn");
    char **names;
    int n = nbt_case_names(m, &names), checked = 0;
    for (int i = 0; i < n; i++) {
        if (!strstr(names[i], "conv") || !strstr(names[i], "/f32")) continue;
        nb_scope *sc = nb_scope_begin();
        spec s;
        read_spec(m, names[i], &s);
        nb_tensor *out[2], *grads[2][3];
        for (int path = 0; path < 2; path++) {
            nb__dnnl_set_enabled(path == 0);
            nb_tensor *leaves[3];
            for (int k = 0; k < s.n; k++) {
                char key[16];
                snprintf(key, sizeof key, "in%d", k);
                leaves[k] = NBT_CHECK(nbt_leaf(NBT_CHECK(nbt_ref(m, names[i], key))));
            }
            out[path] = NBT_CHECK(apply(&s, leaves));
            NBT_OK(nb_backward(out[path], NBT_CHECK(nbt_ref(m, names[i], "gout")), NB_BACKWARD_DEFAULT));
            for (int k = 0; k < s.n; k++) grads[path][k] = NBT_CHECK(nb_tensor_grad(leaves[k]));
        }
        nb__dnnl_set_enabled(true);
        nbt_assert_close(out[0], out[1], 1e-4, 1e-5, names[i]);
        for (int k = 0; k < s.n; k++) nbt_assert_close(grads[0][k], grads[1][k], 1e-4, 1e-5, names[i]);
        checked++;
        nb_scope_end(sc);
    }
    assert_true(checked >= 8);
    nbt_free_names(names, n);
    nb_tensor_map_free(m);
}

static nb_tensor *from(const double *v, const int64_t *shape, int nd, nb_dtype dt)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_FLOAT64;
    nb_tensor *t = NBT_CHECK(nb_tensor_from_data(v, shape, nd, &p));
    return dt == NB_FLOAT64 ? t : NBT_CHECK(nb_to_dtype(t, dt));
}

/* Values worked out by hand: a 2x2 all-ones kernel sums each window; 3-D (unbatched) input. */
static void test_hand_values(void **state)
{
    nb_scope *sc = nb_scope_begin();
    for (int d = 0; d < 2; d++) {
        nb_dtype dt = d ? NB_FLOAT64 : NB_FLOAT32;
        double xv[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, wv[4] = {1, 1, 1, 1}, bv[1] = {10};
        nb_tensor *x = from(xv, (int64_t[]){1, 3, 3}, 3, dt), *w = from(wv, (int64_t[]){1, 1, 2, 2}, 4, dt);
        nb_tensor *b = from(bv, (int64_t[]){1}, 1, dt);
        double want[4] = {22, 26, 34, 38};
        nbt_assert_close(NBT_CHECK(nb_conv2d(x, w, b, NULL)), from(want, (int64_t[]){1, 2, 2}, 3, dt), 0, 0,
                         "conv2d by hand");
        double mx[4] = {5, 6, 8, 9};
        nbt_assert_close(NBT_CHECK(nb_max_pool2d(x, (int64_t[]){2, 2}, (int64_t[]){1, 1}, NULL, false)),
                         from(mx, (int64_t[]){1, 2, 2}, 3, dt), 0, 0, "max_pool2d by hand");
        double av[1] = {5};
        nbt_assert_close(NBT_CHECK(nb_adaptive_avg_pool2d(x, 1, 1)), from(av, (int64_t[]){1, 1, 1}, 3, dt), 1e-7, 0,
                         "adaptive_avg_pool2d by hand");
    }
    nb_scope_end(sc);
}

/* Many shapes through one process: the primitive cache evicts and rebuilds without error, and
 * a repeated shape keeps giving the reference's values. */
static void test_cache_many_shapes(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor_params fp = nb_tensor_params_default();
    nb_tensor *w = NBT_CHECK(nb_randn((int64_t[]){3, 2, 3, 3}, 4, &fp));
    for (int rep = 0; rep < 2; rep++)
        for (int64_t h = 3; h < 43; h++) {
            nb_scope *in = nb_scope_begin();
            nb_tensor *x = NBT_CHECK(nb_randn((int64_t[]){2, 2, h, 5}, 4, &fp));
            nb_tensor *got = NBT_CHECK(nb_conv2d(x, w, NULL, NULL));
            nb__dnnl_set_enabled(false);
            nb_tensor *want = NBT_CHECK(nb_conv2d(x, w, NULL, NULL));
            nb__dnnl_set_enabled(true);
            nbt_assert_close(got, want, 1e-5, 1e-5, "conv2d across cache evictions");
            nb_scope_end(in);
        }
    nb_scope_end(sc);
}

/* One conv layer's forward and gradients at 1 and 2 threads (a primitive per thread count):
 * the same values up to float32 rounding. */
static void test_thread_counts(void **state)
{
    nb_scope *sc = nb_scope_begin();
    int prev = nb_get_num_threads();
    nb_tensor_params fp = nb_tensor_params_default();
    nb_tensor *x = NBT_CHECK(nb_randn((int64_t[]){8, 16, 12, 12}, 4, &fp));
    nb_tensor *w = NBT_CHECK(nb_randn((int64_t[]){16, 16, 3, 3}, 4, &fp));
    nb_tensor *b = NBT_CHECK(nb_randn((int64_t[]){16}, 1, &fp)), *res[2][4];
    nb_conv2d_params p = nb_conv2d_params_default();
    p.padding[0] = p.padding[1] = 1;
    for (int t = 0; t < 2; t++) {
        NBT_OK(nb_set_num_threads(t + 1));
        nb_tensor *l[3] = {nbt_leaf(x), nbt_leaf(w), nbt_leaf(b)};
        res[t][0] = NBT_CHECK(nb_conv2d(l[0], l[1], l[2], &p));
        NBT_OK(nb_backward(res[t][0], NBT_CHECK(nb_ones_like(res[t][0])), NB_BACKWARD_DEFAULT));
        for (int k = 0; k < 3; k++) res[t][k + 1] = NBT_CHECK(nb_tensor_grad(l[k]));
    }
    NBT_OK(nb_set_num_threads(prev));
    for (int k = 0; k < 4; k++) nbt_assert_close(res[1][k], res[0][k], 1e-4, 1e-4, "conv2d at 1 and 2 threads");
    nb_scope_end(sc);
}

static void test_errors(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor_params fp = nb_tensor_params_default();
    nb_tensor *x = NBT_CHECK(nb_randn((int64_t[]){2, 3, 8, 8}, 4, &fp));
    nb_tensor *w = NBT_CHECK(nb_randn((int64_t[]){8, 4, 3, 3}, 4, &fp));
    nb_tensor *w3 = NBT_CHECK(nb_randn((int64_t[]){8, 3, 3, 3}, 4, &fp));
    NBT_FAILS(nb_conv2d(x, w, NULL, NULL) == NULL, NB_ERR_SHAPE, "conv2d: input has 3 channels but weight expects 4",
              "[8, 4, 3, 3]", "groups 1", NULL);
    nb_conv2d_params p = nb_conv2d_params_default();
    p.groups = 3;
    NBT_FAILS(nb_conv2d(x, w3, NULL, &p) == NULL, NB_ERR_SHAPE, "conv2d", "groups 3 does not divide", "8", NULL);
    p = nb_conv2d_params_default();
    p.stride[1] = 0;
    NBT_FAILS(nb_conv2d(x, w3, NULL, &p) == NULL, NB_ERR_INVALID_ARG, "conv2d: stride", "[1, 0]", NULL);
    p.stride[1] = -2;
    NBT_FAILS(nb_conv2d(x, w3, NULL, &p) == NULL, NB_ERR_INVALID_ARG, "conv2d: stride", "[1, -2]", NULL);
    p = nb_conv2d_params_default();
    p.padding[0] = -1;
    NBT_FAILS(nb_conv2d(x, w3, NULL, &p) == NULL, NB_ERR_INVALID_ARG, "conv2d: padding", NULL);
    p = nb_conv2d_params_default();
    p.dilation[0] = 0;
    NBT_FAILS(nb_conv2d(x, w3, NULL, &p) == NULL, NB_ERR_INVALID_ARG, "conv2d: dilation", NULL);
    p = nb_conv2d_params_default();
    p.groups = 0;
    NBT_FAILS(nb_conv2d(x, w3, NULL, &p) == NULL, NB_ERR_INVALID_ARG, "conv2d: groups", NULL);
    nb_tensor *big = NBT_CHECK(nb_randn((int64_t[]){8, 3, 9, 3}, 4, &fp));
    NBT_FAILS(nb_conv2d(x, big, NULL, NULL) == NULL, NB_ERR_SHAPE, "conv2d: kernel size 9", "padded input size 8",
              NULL);
    p = nb_conv2d_params_default();
    p.dilation[0] = 4;
    NBT_FAILS(nb_conv2d(x, w3, NULL, &p) == NULL, NB_ERR_SHAPE, "conv2d: kernel size 3 (dilated 9)", NULL);
    nb_tensor *x2 = NBT_CHECK(nb_randn((int64_t[]){3, 8}, 2, &fp));
    NBT_FAILS(nb_conv2d(x2, w3, NULL, NULL) == NULL, NB_ERR_SHAPE, "conv2d: expected a 3-D or 4-D input", "[3, 8]",
              NULL);
    nb_tensor *b5 = NBT_CHECK(nb_randn((int64_t[]){5}, 1, &fp));
    NBT_FAILS(nb_conv2d(x, w3, b5, NULL) == NULL, NB_ERR_SHAPE, "conv2d: bias [5]", "8 output channels", NULL);
    nb_tensor *xd = NBT_CHECK(nb_to_dtype(x, NB_FLOAT64));
    NBT_FAILS(nb_conv2d(xd, w3, NULL, NULL) == NULL, NB_ERR_DTYPE, "conv2d: dtypes differ", "float64", "float32",
              NULL);
    nb_tensor *xi = NBT_CHECK(nb_to_dtype(x, NB_INT64));
    NBT_FAILS(nb_conv2d(xi, w3, NULL, NULL) == NULL, NB_ERR_DTYPE, "conv2d: dtype int64", NULL);
    NBT_FAILS(nb_conv2d(NULL, w3, NULL, NULL) == NULL, NB_ERR_INVALID_ARG, "conv2d", NULL);

    int64_t k3[2] = {3, 3}, k0[2] = {0, 2}, s0[2] = {1, 0}, pbig[2] = {2, 0}, k20[2] = {20, 2};
    NBT_FAILS(nb_max_pool2d(x, k0, NULL, NULL, false) == NULL, NB_ERR_INVALID_ARG, "max_pool2d: kernel size", NULL);
    NBT_FAILS(nb_max_pool2d(x, k3, s0, NULL, false) == NULL, NB_ERR_INVALID_ARG, "max_pool2d: stride", "[1, 0]",
              NULL);
    NBT_FAILS(nb_avg_pool2d(x, k3, NULL, pbig, false, true) == NULL, NB_ERR_INVALID_ARG, "avg_pool2d: padding",
              "[2, 0]", NULL);
    NBT_FAILS(nb_max_pool2d(x, k20, NULL, NULL, false) == NULL, NB_ERR_SHAPE, "max_pool2d", "larger than the padded",
              "[2, 3, 8, 8]", NULL);
    NBT_FAILS(nb_max_pool2d(x2, k3, NULL, NULL, false) == NULL, NB_ERR_SHAPE, "max_pool2d: expected a 3-D or 4-D",
              NULL);
    NBT_FAILS(nb_avg_pool2d(xi, k3, NULL, NULL, false, true) == NULL, NB_ERR_DTYPE, "avg_pool2d: dtype int64", NULL);
    NBT_FAILS(nb_max_pool2d_relu(x, k0, NULL, NULL, false) == NULL, NB_ERR_INVALID_ARG, "max_pool2d_relu: kernel size",
              NULL);
    NBT_FAILS(nb_max_pool2d_relu(x, k20, NULL, NULL, false) == NULL, NB_ERR_SHAPE, "max_pool2d_relu",
              "larger than the padded", NULL);
    NBT_FAILS(nb_max_pool2d_relu(xi, k3, NULL, NULL, false) == NULL, NB_ERR_DTYPE, "max_pool2d_relu: dtype int64",
              NULL);
    NBT_FAILS(nb_max_pool2d_relu(NULL, k3, NULL, NULL, false) == NULL, NB_ERR_INVALID_ARG, "max_pool2d_relu", NULL);
    NBT_FAILS(nb_adaptive_avg_pool2d(x, 0, 2) == NULL, NB_ERR_INVALID_ARG, "adaptive_avg_pool2d: output size",
              NULL);

    nb_tensor *c3 = NBT_CHECK(nb_ones((int64_t[]){3}, 1, &fp)), *c4 = NBT_CHECK(nb_ones((int64_t[]){4}, 1, &fp));
    NBT_FAILS(nb_batch_norm(x, c4, c3, NULL, NULL, true, 0.1, 1e-5) == NULL, NB_ERR_SHAPE,
              "batch_norm: running_mean [4]", "3 channels", NULL);
    NBT_FAILS(nb_batch_norm(x, NULL, NULL, NULL, NULL, false, 0.1, 1e-5) == NULL, NB_ERR_INVALID_ARG,
              "batch_norm: evaluation needs", NULL);
    nb_tensor *one = NBT_CHECK(nb_randn((int64_t[]){1, 3}, 2, &fp));
    NBT_FAILS(nb_batch_norm(one, NULL, NULL, NULL, NULL, true, 0.1, 1e-5) == NULL, NB_ERR_SHAPE,
              "more than 1 value per channel", "[1, 3]", NULL);
    NBT_FAILS(nb_batch_norm(xd, c3, c3, NULL, NULL, true, 0.1, 1e-5) == NULL, NB_ERR_DTYPE,
              "batch_norm: running_mean has dtype float32", NULL);
    /* the fused ops name themselves; a residual that does not broadcast is add's error */
    NBT_FAILS(nb_batch_norm_relu(x, c4, c3, NULL, NULL, true, 0.1, 1e-5) == NULL, NB_ERR_SHAPE,
              "batch_norm_relu: running_mean [4]", NULL);
    NBT_FAILS(nb_batch_norm_add_relu(x, x, c4, c3, NULL, NULL, true, 0.1, 1e-5) == NULL, NB_ERR_SHAPE,
              "batch_norm_add_relu: running_mean [4]", NULL);
    NBT_FAILS(nb_batch_norm_add_relu(x, NULL, NULL, NULL, NULL, NULL, true, 0.1, 1e-5) == NULL, NB_ERR_INVALID_ARG,
              "batch_norm_add_relu: residual must not be NULL", NULL);
    NBT_FAILS(nb_batch_norm_add_relu(x, c4, NULL, NULL, NULL, NULL, true, 0.1, 1e-5) == NULL, NB_ERR_SHAPE, "add",
              "[4]", NULL);
    NBT_FAILS(nb_batch_norm_add(x, x, c4, c3, NULL, NULL, true, 0.1, 1e-5) == NULL, NB_ERR_SHAPE,
              "batch_norm_add: running_mean [4]", NULL);
    NBT_FAILS(nb_batch_norm_add(x, NULL, NULL, NULL, NULL, NULL, true, 0.1, 1e-5) == NULL, NB_ERR_INVALID_ARG,
              "batch_norm_add: residual must not be NULL", NULL);
    NBT_FAILS(nb_batch_norm_add(x, c4, NULL, NULL, NULL, NULL, true, 0.1, 1e-5) == NULL, NB_ERR_SHAPE, "add", "[4]",
              NULL);
    nb_scope_end(sc);
}

/* oneDNN failures become nb statuses naming the op, the call and oneDNN's status. */
static void test_dnnl_error_mapping(void **state)
{
    assert_int_equal(nb__dnnl_check("conv2d", "dnnl_primitive_execute", 0), NB_OK);
    NBT_FAILS(nb__dnnl_check("conv2d", "dnnl_primitive_desc_create", 3) != NB_OK, NB_ERR_UNSUPPORTED,
              "conv2d: oneDNN call dnnl_primitive_desc_create failed", "unimplemented", NULL);
    NBT_FAILS(nb__dnnl_check("conv2d_backward_input", "dnnl_memory_create", 1) != NB_OK, NB_ERR_OOM,
              "conv2d_backward_input", "out_of_memory", NULL);
    NBT_FAILS(nb__dnnl_check("conv2d", "dnnl_stream_wait", 5) != NB_OK, NB_ERR_INTERNAL, "runtime_error", NULL);
}

int main(void)
{
    /* PyTorch's float32 values come from direct convolutions, and the element-wise tolerances
     * above are set for those; Winograd (nb_set_conv_algo's auto) rounds differently and is
     * checked against float64 in test_conv_algo.c. */
    if (nb_set_conv_algo(NB_CONV_ALGO_DIRECT) != NB_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pytorch_cases),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_dnnl_vs_reference),
        cmocka_unit_test(test_hand_values),
        cmocka_unit_test(test_cache_many_shapes),
        cmocka_unit_test(test_thread_counts),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_dnnl_error_mapping),
    };
    return NBT_RUN(tests);
}
