/* Pooling on channels-last inputs (the CPU's NHWC kernels): max_pool2d and max_pool2d_relu
 * (values, indices, gradient), avg_pool2d and adaptive_avg_pool2d against PyTorch run on torch.channels_last inputs
 * (tests/ref/cases_channels_last_pool.py), on a dense channels-last leaf and on a channels-last
 * view at an offset with a channels-last upstream gradient; the layouts of outputs, indices and
 * gradients; the NHWC kernels against the NCHW ones on the same data (bitwise: the same
 * operations in the same order), at several thread counts; gradients against finite differences
 * in float64; and the inputs that stay on the NCHW path. */
#include <stdio.h>
#include <string.h>

#include "nbtest.h"
#include "nabla/nn.h"
#include "autograd/autograd_impl.h"

enum { OP_MAXP = 1, OP_AVGP = 2, OP_ADAPT = 3 };

typedef struct spec {
    int op;
    int64_t params[9];
} spec;

static nb_tensor *apply(const spec *s, const nb_tensor *x)
{
    const int64_t *p = s->params;
    switch (s->op) {
    case OP_MAXP: return (p[8] ? nb_max_pool2d_relu : nb_max_pool2d)(x, p, p + 2, p + 4, p[6]);
    case OP_AVGP: return nb_avg_pool2d(x, p, p + 2, p + 4, p[6], p[7]);
    default: return nb_adaptive_avg_pool2d(x, p[0], p[1]);
    }
}

static void read_spec(const nb_tensor_map *m, const char *name, spec *s)
{
    memset(s, 0, sizeof *s);
    int64_t op;
    NBT_OK(nb_item_int64(NBT_CHECK(nbt_ref(m, name, "op")), &op));
    s->op = (int)op;
    nb_tensor *p = NBT_CHECK(nbt_ref(m, name, "params"));
    assert_true(nb_tensor_numel(p) <= 9);
    NBT_OK(nb_tensor_read(p, s->params, (size_t)nb_tensor_numel(p) * sizeof(int64_t)));
}

static nb_tensor *channels_last(const nb_tensor *t)
{
    return NBT_CHECK(nb_contiguous_format(t, NB_CHANNELS_LAST));
}

/* Dense channels-last and not also contiguous: the layout the NHWC kernels take and give (a
 * [N, C, 1, 1] result is both, so only the format is asked of it). */
static void assert_channels_last(const nb_tensor *t, const char *what)
{
    const int64_t *shape = nb_tensor_shape(t);
    bool both = shape[1] == 1 || shape[2] * shape[3] == 1;
    if (!nb_tensor_is_contiguous_format(t, NB_CHANNELS_LAST) || (!both && nb_tensor_is_contiguous(t)))
        fail_msg("%s: not channels-last (strides [%lld, %lld, %lld, %lld])", what,
                 (long long)nb_tensor_strides(t)[0], (long long)nb_tensor_strides(t)[1],
                 (long long)nb_tensor_strides(t)[2], (long long)nb_tensor_strides(t)[3]);
}

/* max_pool2d's indices as PyTorch gives them (int64 h * W + w in the input plane, W the input's
 * width; contiguous): from the tensor its node saved for the backward, which on a channels-last
 * input with a window of fewer than 255 taps holds uint8 taps in the window instead (ops.def:
 * tap t of the window with corner (oy sh - ph, ox sw - pw) is row t / kw, column t % kw of it;
 * 255 where a fused ReLU left no gradient, -1 here). */
static nb_tensor *saved_indices(const nb_tensor *out, const spec *s, int64_t w)
{
    nb_node *node = out->grad_fn;
    assert_non_null(node);
    assert_int_equal(node->op, NB_OP_MAX_POOL2D);
    nb_tensor *idx = nb__track(nb_tensor_retain(NBT_CHECK(nb__node_saved(node, 0))));
    const int64_t *p = s->params, *shape = nb_tensor_shape(idx);
    bool taps = nb_tensor_is_contiguous_format(out, NB_CHANNELS_LAST) && !nb_tensor_is_contiguous(out) &&
                p[0] * p[1] < 255;
    assert_int_equal(nb_tensor_dtype(idx), taps ? NB_UINT8 : NB_INT64);
    if (!taps) return idx;
    int64_t n = nb_tensor_numel(idx), oh = shape[2], ow = shape[3];
    uint8_t *t = test_malloc((size_t)n);
    int64_t *plane = test_malloc((size_t)n * sizeof *plane);
    NBT_OK(nb_tensor_read(NBT_CHECK(nb_contiguous(idx)), t, (size_t)n));
    for (int64_t i = 0; i < n; i++) {
        int64_t oy = i / ow % oh, ox = i % ow;
        plane[i] = t[i] == 255 ? -1 : (oy * p[2] - p[4] + t[i] / p[1]) * w + ox * p[3] - p[5] + t[i] % p[1];
    }
    nb_tensor_params tp = nb_tensor_params_default();
    tp.dtype = NB_INT64;
    nb_tensor *r = NBT_CHECK(nb_tensor_from_data(plane, shape, 4, &tp));
    test_free(t);
    test_free(plane);
    return r;
}

/* float64: 1e-10; float32: 1e-6 (the same operations as PyTorch's, summed in the same order). */
static void tolerances(nb_dtype dt, double *rtol, double *atol)
{
    *rtol = dt == NB_FLOAT64 ? 1e-10 : 1e-6;
    *atol = dt == NB_FLOAT64 ? 1e-12 : 1e-7;
}

/* offset false: the leaf is the channels-last input; the upstream gradient is PyTorch's
 * (contiguous). offset true: the input is the second half (along N) of a channels-last leaf
 * twice its batch (a view at an offset), and the upstream gradient is channels-last. */
static void run_case(const nb_tensor_map *m, const char *name, bool offset)
{
    nb_scope *sc = nb_scope_begin();
    const char *mode = offset ? "channels-last view" : "channels-last";
    spec s;
    read_spec(m, name, &s);
    nb_tensor *in = NBT_CHECK(nbt_ref(m, name, "in0")), *gout = NBT_CHECK(nbt_ref(m, name, "gout"));
    int64_t n = nb_tensor_shape(in)[0];
    nb_tensor *leaf = channels_last(offset ? NBT_CHECK(nb_cat((nb_tensor *[]){in, in}, 2, 0)) : in);
    NBT_OK(nb_tensor_set_requires_grad(leaf, true));
    nb_tensor *x = offset ? NBT_CHECK(nb_narrow(leaf, 0, n, n)) : leaf;
    if (offset) NBT_OK(nb_tensor_retain_grad(x));
    assert_true(!nb_tensor_is_contiguous(x) && nb_tensor_is_contiguous_format(x, NB_CHANNELS_LAST));
    nb_tensor *out = NBT_CHECK(apply(&s, x));
    double rtol, atol;
    tolerances(nb_tensor_dtype(out), &rtol, &atol);
    char what[256];
    snprintf(what, sizeof what, "%s (%s): out", name, mode);
    assert_channels_last(out, what);
    nbt_assert_close(out, nbt_ref(m, name, "out"), rtol, atol, what);
    if (s.op == OP_MAXP) {
        snprintf(what, sizeof what, "%s (%s): indices", name, mode);
        assert_channels_last(NBT_CHECK(nb__node_saved(out->grad_fn, 0)), what);
        nb_tensor *idx = saved_indices(out, &s, nb_tensor_shape(in)[3]);
        nbt_assert_close(idx, NBT_CHECK(nbt_ref(m, name, "idx")), 0, 0, what);
    }
    NBT_OK(nb_backward(out, offset ? channels_last(gout) : gout, NB_BACKWARD_DEFAULT));
    nb_tensor *g = NBT_CHECK(nb_tensor_grad(x)), *want = NBT_CHECK(nbt_ref(m, name, "grad0"));
    snprintf(what, sizeof what, "%s (%s): grad", name, mode);
    assert_channels_last(g, what);
    nbt_assert_close(g, want, rtol, atol, what);
    if (offset) {
        nb_tensor *gl = NBT_CHECK(nb_tensor_grad(leaf));
        nbt_assert_close(NBT_CHECK(nb_narrow(gl, 0, 0, n)), NBT_CHECK(nb_zeros_like(want)), 0, 0, what);
        nbt_assert_close(NBT_CHECK(nb_narrow(gl, 0, n, n)), want, rtol, atol, what);
    }
    nb_scope_end(sc);
}

static void test_pytorch_cases(void **state)
{
    nbt_run_reference("channels_last_pool", 40, run_case);
}

/* Every case's output, indices and gradient through the NHWC kernels equal the NCHW kernels'
 * exactly, at 1, 2 and 3 threads (3: the 50x50 cases have one image for three threads, which
 * the backwards split into channel blocks of 16, 16 and 8). */
static void test_nhwc_matches_nchw(void **state)
{
    nb_tensor_map *m = nbt_load_ref("channels_last_pool");
    char **names;
    int n = nbt_case_names(m, &names), prev = nb_get_num_threads();
    for (int nt = 1; nt <= 3; nt++) {
        NBT_OK(nb_set_num_threads(nt));
        for (int i = 0; i < n; i++) {
            nb_scope *sc = nb_scope_begin();
            spec s;
            read_spec(m, names[i], &s);
            nb_tensor *in = NBT_CHECK(nbt_ref(m, names[i], "in0")), *gout = NBT_CHECK(nbt_ref(m, names[i], "gout"));
            nb_tensor *out[2], *idx[2], *grad[2];
            for (int cl = 0; cl < 2; cl++) {
                nb_tensor *leaf = cl ? channels_last(in) : NBT_CHECK(nb_clone(in));
                NBT_OK(nb_tensor_set_requires_grad(leaf, true));
                out[cl] = NBT_CHECK(apply(&s, leaf));
                idx[cl] = s.op == OP_MAXP ? saved_indices(out[cl], &s, nb_tensor_shape(in)[3]) : NULL;
                NBT_OK(nb_backward(out[cl], gout, NB_BACKWARD_DEFAULT));
                grad[cl] = NBT_CHECK(nb_tensor_grad(leaf));
            }
            assert_true(nb_tensor_is_contiguous(out[0]) && nb_tensor_is_contiguous(grad[0]));
            nbt_assert_close(out[1], out[0], 0, 0, names[i]);
            if (idx[0]) nbt_assert_close(idx[1], idx[0], 0, 0, names[i]);
            nbt_assert_close(grad[1], grad[0], 0, 0, names[i]);
            nb_scope_end(sc);
        }
    }
    NBT_OK(nb_set_num_threads(prev));
    nbt_free_names(names, n);
    nb_tensor_map_free(m);
}

/* nb_max_pool2d_relu against nb_relu(nb_max_pool2d(...)) on every max case's input, shifted
 * down by 1 so that about half the maxima are negative, in both layouts: the same values and
 * gradients, bitwise. */
static void test_relu_fused_bitwise(void **state)
{
    nb_tensor_map *m = nbt_load_ref("channels_last_pool");
    char **names;
    int n = nbt_case_names(m, &names), checked = 0;
    for (int i = 0; i < n; i++) {
        nb_scope *sc = nb_scope_begin();
        spec s;
        read_spec(m, names[i], &s);
        if (s.op != OP_MAXP || s.params[8]) {
            nb_scope_end(sc);
            continue;
        }
        nb_tensor *in = NBT_CHECK(nb_sub_scalar(NBT_CHECK(nbt_ref(m, names[i], "in0")), 1.0));
        for (int cl = 0; cl < 2; cl++) {
            nb_tensor *out[2], *grad[2], *gout = NULL;
            for (int fused = 0; fused < 2; fused++) {
                nb_tensor *leaf = cl ? channels_last(in) : NBT_CHECK(nb_clone(in));
                NBT_OK(nb_tensor_set_requires_grad(leaf, true));
                const int64_t *p = s.params;
                out[fused] = fused ? NBT_CHECK(nb_max_pool2d_relu(leaf, p, p + 2, p + 4, p[6]))
                                   : NBT_CHECK(nb_relu(NBT_CHECK(nb_max_pool2d(leaf, p, p + 2, p + 4, p[6]))));
                if (!gout) gout = NBT_CHECK(nb_randn_like(out[0]));
                NBT_OK(nb_backward(out[fused], gout, NB_BACKWARD_DEFAULT));
                grad[fused] = NBT_CHECK(nb_tensor_grad(leaf));
            }
            nbt_assert_close(out[1], out[0], 0, 0, names[i]);
            nbt_assert_close(grad[1], grad[0], 0, 0, names[i]);
            if (cl) assert_channels_last(out[1], names[i]);
            checked++;
        }
        nb_scope_end(sc);
    }
    assert_true(checked >= 20);
    nbt_free_names(names, n);
    nb_tensor_map_free(m);
}

/* The pool of the channels-last copy of x: its output must be channels-last too. */
static nb_tensor *pool_cl_fn(nb_tensor *const *inputs, int n, void *ctx)
{
    nb_tensor *x = nb_contiguous_format(inputs[0], NB_CHANNELS_LAST);
    nb_tensor *y = x ? apply(ctx, x) : NULL;
    if (y) assert_true(nb_tensor_is_contiguous_format(y, NB_CHANNELS_LAST));
    return y;
}

/* The float64 cases of up to 5,000 elements against central differences (not the max cases with
 * ties or a NaN: not differentiable there). */
static void test_gradcheck(void **state)
{
    nb_tensor_map *m = nbt_load_ref("channels_last_pool");
    char **names;
    int n = nbt_case_names(m, &names), checked = 0;
    for (int i = 0; i < n; i++) {
        if (!strstr(names[i], "/f64") || strstr(names[i], "ties") || strstr(names[i], "nan")) continue;
        nb_scope *sc = nb_scope_begin();
        spec s;
        read_spec(m, names[i], &s);
        nb_tensor *in = NBT_CHECK(nbt_ref(m, names[i], "in0"));
        if (nb_tensor_numel(in) <= 5000) {
            nbt_gradcheck(pool_cl_fn, &s, &in, 1, 1e-6, 1e-7, 1e-5, names[i]);
            checked++;
        }
        nb_scope_end(sc);
    }
    assert_true(checked >= 10);
    nbt_free_names(names, n);
    nb_tensor_map_free(m);
}

/* The inputs that stay on the NCHW path give contiguous results: contiguous, one channel (both
 * layouts at once), a strided (not dense) one and a 3-D one; the global pool of a channels-last
 * input is [N, C, 1, 1] (both layouts) but its gradient is channels-last. */
static void test_layouts(void **state)
{
    nb_scope *sc = nb_scope_begin();
    int64_t k[2] = {2, 2}, shape[4] = {2, 5, 6, 8};
    nb_tensor *x = NBT_CHECK(nb_randn(shape, 4, NULL));
    nb_tensor *strided = NBT_CHECK(nb_narrow(channels_last(x), 3, 1, 6));
    assert_false(nb_tensor_is_contiguous_format(strided, NB_CHANNELS_LAST));
    nb_tensor *one = channels_last(NBT_CHECK(nb_narrow(x, 1, 0, 1)));
    nb_tensor *plane = NBT_CHECK(nb_select(channels_last(x), 0, 1));
    nb_tensor *inputs[4] = {x, one, strided, plane};
    for (int i = 0; i < 4; i++) {
        nb_tensor *outs[3] = {NBT_CHECK(nb_max_pool2d(inputs[i], k, NULL, NULL, false)),
                              NBT_CHECK(nb_avg_pool2d(inputs[i], k, NULL, NULL, false, true)),
                              NBT_CHECK(nb_adaptive_avg_pool2d(inputs[i], 3, 2))};
        for (int j = 0; j < 3; j++) assert_true(nb_tensor_is_contiguous(outs[j]));
    }
    nb_tensor *leaf = channels_last(x);
    NBT_OK(nb_tensor_set_requires_grad(leaf, true));
    nb_tensor *y = NBT_CHECK(nb_adaptive_avg_pool2d(leaf, 1, 1));
    assert_true(nb_tensor_is_contiguous_format(y, NB_CHANNELS_LAST) && nb_tensor_is_contiguous(y));
    NBT_OK(nb_backward(NBT_CHECK(nb_sum(y, NULL, 0, false)), NULL, NB_BACKWARD_DEFAULT));
    nb_tensor *g = NBT_CHECK(nb_tensor_grad(leaf));
    assert_channels_last(g, "global pool: grad");
    nbt_assert_close(g, NBT_CHECK(nb_full_like(x, 1.0 / 48)), 1e-6, 0, "global pool: grad");
    nb_scope_end(sc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pytorch_cases),
        cmocka_unit_test(test_nhwc_matches_nchw),
        cmocka_unit_test(test_relu_fused_bitwise),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_layouts),
    };
    return NBT_RUN(tests);
}
