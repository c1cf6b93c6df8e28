/* Channels-last memory format: nb_contiguous_format's layout checked element by element against
 * the NHWC index formula, its gradient, the errors; elementwise results keeping a channels-last
 * input's layout with the values of the contiguous computation; conv2d on channels-last inputs
 * against PyTorch's values (tests/ref/cases_nn.py), on oneDNN's NHWC kernels, on the products
 * over windows and on the reference loops, with the result and the input gradient
 * channels-last; the windows routes in pieces, and the route tuner. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbtest.h"
#include "nabla/nn.h"
#include "cpu/dnnl_impl.h"
#include "cpu/wino_impl.h"

static nb_tensor *arange4(int64_t n, int64_t c, int64_t h, int64_t w)
{
    nb_tensor_params p = nb_tensor_params_default();
    nb_tensor *t = NBT_CHECK(nb_arange(0, (double)(n * c * h * w), 1, &p));
    return NBT_CHECK(nb_reshape(t, (int64_t[]){n, c, h, w}, 4));
}

static nb_tensor *randn4(int64_t n, int64_t c, int64_t h, int64_t w)
{
    nb_tensor_params p = nb_tensor_params_default();
    return NBT_CHECK(nb_randn((int64_t[]){n, c, h, w}, 4, &p));
}

static bool is_cl(const nb_tensor *t) { return nb_tensor_is_contiguous_format(t, NB_CHANNELS_LAST); }

/* The copy's memory holds element (n, c, h, w) at ((n H + h) W + w) C + c; strides say so. */
static void test_layout(void **state)
{
    nb_scope *s = nb_scope_begin();
    const int64_t N = 2, C = 3, H = 4, W = 5;
    nb_tensor *x = arange4(N, C, H, W), *y = NBT_CHECK(nb_contiguous_format(x, NB_CHANNELS_LAST));
    const int64_t *st = nb_tensor_strides(y);
    assert_int_equal(st[0], H * W * C);
    assert_int_equal(st[1], 1);
    assert_int_equal(st[2], W * C);
    assert_int_equal(st[3], C);
    assert_true(is_cl(y));
    assert_false(nb_tensor_is_contiguous(y));
    assert_false(is_cl(x));
    assert_true(nb_tensor_is_contiguous_format(x, NB_CONTIGUOUS_FORMAT));
    const float *d = nb_tensor_data_ptr(y);
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t w = 0; w < W; w++)
                    assert_true(d[((n * H + h) * W + w) * C + c] == (float)(((n * C + c) * H + h) * W + w));
    /* logical values unchanged, and back to NCHW */
    nbt_assert_close(y, x, 0, 0, "channels_last copy");
    nb_tensor *back = NBT_CHECK(nb_contiguous(y));
    assert_true(nb_tensor_is_contiguous(back));
    nbt_assert_close(back, x, 0, 0, "back to contiguous");
    /* already channels-last: the same tensor; so is a 1-channel tensor (both layouts at once) */
    nb_tensor *again = NBT_CHECK(nb_contiguous_format(y, NB_CHANNELS_LAST));
    assert_ptr_equal(nb_tensor_data_ptr(again), nb_tensor_data_ptr(y));
    nb_tensor *one = arange4(2, 1, 3, 3);
    assert_true(is_cl(one) && nb_tensor_is_contiguous(one));
    assert_ptr_equal(nb_tensor_data_ptr(NBT_CHECK(nb_contiguous_format(one, NB_CHANNELS_LAST))),
                     nb_tensor_data_ptr(one));
    /* a non-contiguous source (a transposed view) */
    nb_tensor *tv = NBT_CHECK(nb_transpose(x, 2, 3));
    nb_tensor *tc = NBT_CHECK(nb_contiguous_format(tv, NB_CHANNELS_LAST));
    assert_true(is_cl(tc));
    nbt_assert_close(tc, tv, 0, 0, "channels_last copy of a transposed view");
    nb_scope_end(s);
}

/* Element i of t's memory (from its data pointer), as a double. */
static double mem_at(const nb_tensor *t, int64_t i)
{
    const void *d = nb_tensor_data_ptr(t);
    switch (nb_tensor_dtype(t)) {
    case NB_FLOAT32: return ((const float *)d)[i];
    case NB_FLOAT64: return ((const double *)d)[i];
    case NB_INT64: return (double)((const int64_t *)d)[i];
    case NB_INT32: return ((const int32_t *)d)[i];
    default: fail_msg("mem_at: unexpected dtype"); return 0;
    }
}

/* The copies between NCHW and channels-last run as tiled transposes (src/cpu/ops/copy.c): every
 * element's place in memory checked against the index formulas, for 4- and 8-byte dtypes, shapes
 * with partial tiles and partial 8 x 8 blocks, three channels (interleaved eight at a time on
 * AVX2, with and without a remainder), size-1 dims and enough elements to be split across
 * threads; both ways, and
 * also the [N, H, W, C] copy of a permuted view (nb_contiguous of permute(x, 0, 2, 3, 1), how
 * nb_contiguous_format lays out its result) and back. */
static void test_transposing_copies(void **state)
{
    static const int64_t shapes[][4] = {{2, 3, 5, 7},  {3, 40, 33, 35}, {2, 1, 4, 4}, {2, 5, 1, 1},
                                        {1, 70, 3, 2}, {2, 21, 9, 11},  {1, 3, 4, 4}, {4, 3, 64, 65}};
    static const nb_dtype dts[] = {NB_FLOAT32, NB_FLOAT64, NB_INT64, NB_INT32};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (size_t di = 0; di < sizeof dts / sizeof *dts; di++) {
            nb_scope *s = nb_scope_begin();
            const int64_t *sh = shapes[si];
            int64_t N = sh[0], C = sh[1], H = sh[2], W = sh[3];
            nb_tensor *x = NBT_CHECK(nb_to_dtype(arange4(N, C, H, W), dts[di]));
            nb_tensor *y = NBT_CHECK(nb_contiguous_format(x, NB_CHANNELS_LAST));
            nb_tensor *p = NBT_CHECK(nb_contiguous(NBT_CHECK(nb_permute(x, (int64_t[]){0, 2, 3, 1}, 4))));
            nb_tensor *back = NBT_CHECK(nb_contiguous(y));
            nb_tensor *unp = NBT_CHECK(nb_contiguous(NBT_CHECK(nb_permute(p, (int64_t[]){0, 3, 1, 2}, 4))));
            assert_true(nb_tensor_is_contiguous(p) && nb_tensor_is_contiguous(back) && nb_tensor_is_contiguous(unp));
            for (int64_t n = 0; n < N; n++)
                for (int64_t c = 0; c < C; c++)
                    for (int64_t h = 0; h < H; h++)
                        for (int64_t w = 0; w < W; w++) {
                            double want = (double)(((n * C + c) * H + h) * W + w);
                            int64_t nhwc = ((n * H + h) * W + w) * C + c;
                            if (mem_at(y, nhwc) != want || mem_at(p, nhwc) != want ||
                                mem_at(back, (int64_t)want) != want || mem_at(unp, (int64_t)want) != want)
                                fail_msg("shape [%lld, %lld, %lld, %lld] %s: element (%lld, %lld, %lld, %lld) misplaced",
                                         (long long)N, (long long)C, (long long)H, (long long)W,
                                         nb_dtype_name(dts[di]), (long long)n, (long long)c, (long long)h, (long long)w);
                        }
            nb_scope_end(s);
        }
}

static void test_errors_and_grad(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor_params p = nb_tensor_params_default();
    nb_tensor *x3 = NBT_CHECK(nb_zeros((int64_t[]){2, 3, 4}, 3, &p));
    NBT_FAILS(nb_contiguous_format(x3, NB_CHANNELS_LAST) == NULL, NB_ERR_SHAPE, "contiguous_format", "4-D",
              "[2, 3, 4]", NULL);
    NBT_FAILS(nb_contiguous_format(x3, (nb_memory_format)7) == NULL, NB_ERR_INVALID_ARG, "memory format", "7",
              NULL);
    NBT_FAILS(nb_contiguous_format(NULL, NB_CHANNELS_LAST) == NULL, NB_ERR_INVALID_ARG, "NULL", NULL);
    assert_false(nb_tensor_is_contiguous_format(x3, NB_CHANNELS_LAST));
    assert_false(nb_tensor_is_contiguous_format(NULL, NB_CHANNELS_LAST));
    assert_false(nb_tensor_is_contiguous_format(x3, (nb_memory_format)7)); /* not a format */
    /* d/dx sum(cl(x) * w) = w */
    nb_tensor *x = NBT_CHECK(nbt_leaf(randn4(2, 3, 4, 5))), *w = randn4(2, 3, 4, 5);
    nb_tensor *y = NBT_CHECK(nb_mul(NBT_CHECK(nb_contiguous_format(x, NB_CHANNELS_LAST)), w));
    NBT_OK(nb_backward(NBT_CHECK(nb_sum(y, NULL, 0, false)), NULL, NB_BACKWARD_DEFAULT));
    nbt_assert_close(NBT_CHECK(nb_tensor_grad(x)), w, 0, 0, "gradient through contiguous_format");
    nb_scope_end(s);
}

/* Elementwise ops on channels-last operands: the result keeps the layout and has the values of
 * the same op on contiguous copies (exactly: the same arithmetic per element). */
static void test_elementwise_keeps_layout(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *a = randn4(3, 8, 5, 7), *b = randn4(3, 8, 5, 7), *bias = randn4(1, 8, 1, 1);
    nb_tensor *acl = NBT_CHECK(nb_contiguous_format(a, NB_CHANNELS_LAST));
    nb_tensor *bcl = NBT_CHECK(nb_contiguous_format(b, NB_CHANNELS_LAST));
    struct {
        const char *what;
        nb_tensor *got, *want;
    } c[] = {
        {"add(cl, cl)", nb_add(acl, bcl), nb_add(a, b)},
        {"add(cl, nchw)", nb_add(acl, b), nb_add(a, b)},
        {"mul(nchw, cl)", nb_mul(a, bcl), nb_mul(a, b)},
        {"add(cl, bias)", nb_add(acl, bias), nb_add(a, bias)},
        {"relu(cl)", nb_relu(acl), nb_relu(a)},
        {"exp(cl)", nb_exp(acl), nb_exp(a)},
        {"mul_scalar(cl)", nb_mul_scalar(acl, 3.5), nb_mul_scalar(a, 3.5)},
        {"where(cl)", nb_where(NBT_CHECK(nb_gt(acl, bcl)), acl, bcl), nb_where(NBT_CHECK(nb_gt(a, b)), a, b)},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        assert_non_null(c[i].got);
        if (!is_cl(c[i].got)) fail_msg("%s: the result is not channels-last", c[i].what);
        nbt_assert_close(c[i].got, c[i].want, 0, 0, c[i].what);
    }
    /* a broadcast result of another shape stays contiguous */
    nb_tensor *row = NBT_CHECK(nb_add(bias, NBT_CHECK(nb_zeros((int64_t[]){2, 8, 1, 1}, 4, NULL))));
    assert_true(nb_tensor_is_contiguous(row));
    /* ReLU's gradient follows the layout too, with the contiguous values */
    nb_tensor *x = NBT_CHECK(nbt_leaf(acl)), *g = randn4(3, 8, 5, 7);
    NBT_OK(nb_backward(NBT_CHECK(nb_relu(x)), g, NB_BACKWARD_DEFAULT));
    nb_tensor *gx = NBT_CHECK(nb_tensor_grad(x));
    assert_true(is_cl(gx));
    nb_tensor *want = NBT_CHECK(nb_mul(g, NBT_CHECK(nb_to_dtype(NBT_CHECK(nb_gt_scalar(a, 0)), NB_FLOAT32))));
    nbt_assert_close(gx, want, 0, 0, "relu gradient (cl)");
    nb_scope_end(s);
}

/* conv2d cases of tests/ref/cases_nn.py with the input made channels-last: PyTorch's output and
 * gradients, the output and the input's gradient channels-last. float32 runs both oneDNN's NHWC
 * kernels and the reference loops; float64 the reference loops. */
static int run_conv_cases(bool dnnl, nb_conv_route route)
{
    nb_tensor_map *m = nbt_load_ref("nn");
    char **names;
    int n = nbt_case_names(m, &names), checked = 0;
    nb__dnnl_set_enabled(dnnl);
    nb__conv_set_route(route);
    const char *how = !dnnl ? ", reference loops" : route == NB_CONV_ROUTE_WINDOWS ? ", windows" : "";
    for (int i = 0; i < n; i++) {
        if (!strstr(names[i], "conv")) continue;
        nb_scope *sc = nb_scope_begin();
        nb_tensor *in[3] = {0};
        int nin = 0;
        for (; nin < 3; nin++) {
            char key[16];
            snprintf(key, sizeof key, "in%d", nin);
            if (!(in[nin] = nbt_ref(m, names[i], key))) break;
        }
        nb_tensor *x = in[0];
        if (nb_tensor_ndim(x) != 4 || nb_tensor_size(x, 1) == 1) {
            nb_scope_end(sc);
            continue;
        }
        int64_t p[8] = {0};
        nb_tensor *pt = NBT_CHECK(nbt_ref(m, names[i], "params"));
        NBT_OK(nb_tensor_read(pt, p, (size_t)nb_tensor_numel(pt) * sizeof *p));
        nb_conv2d_params cp = {.stride = {p[0], p[1]}, .padding = {p[2], p[3]}, .dilation = {p[4], p[5]},
                               .groups = p[6], .relu = p[7] != 0};
        nb_tensor *leaves[3];
        leaves[0] = NBT_CHECK(nbt_leaf(NBT_CHECK(nb_contiguous_format(x, NB_CHANNELS_LAST))));
        assert_true(is_cl(leaves[0]));
        for (int k = 1; k < nin; k++) leaves[k] = NBT_CHECK(nbt_leaf(in[k]));
        nb_tensor *out = NBT_CHECK(nb_conv2d(leaves[0], leaves[1], nin > 2 ? leaves[2] : NULL, &cp));
        if (!is_cl(out) && !nb_tensor_is_contiguous(out)) fail_msg("%s: output not channels-last", names[i]);
        bool f64 = nb_tensor_dtype(out) == NB_FLOAT64;
        double rtol = f64 ? 1e-10 : 1e-4, atol = f64 ? 1e-12 : 1e-5;
        char what[256];
        snprintf(what, sizeof what, "%s (channels-last%s): out", names[i], how);
        nbt_assert_close(out, nbt_ref(m, names[i], "out"), rtol, atol, what);
        assert_true(is_cl(out));
        NBT_OK(nb_backward(out, NBT_CHECK(nbt_ref(m, names[i], "gout")), NB_BACKWARD_DEFAULT));
        for (int k = 0; k < nin; k++) {
            char key[16];
            snprintf(key, sizeof key, "grad%d", k);
            snprintf(what, sizeof what, "%s (channels-last%s): %s", names[i], how, key);
            nb_tensor *g = NBT_CHECK(nb_tensor_grad(leaves[k]));
            nbt_assert_close(g, NBT_CHECK(nbt_ref(m, names[i], key)), rtol, atol, what);
        }
        if (!is_cl(NBT_CHECK(nb_tensor_grad(leaves[0])))) fail_msg("%s: input gradient not channels-last", names[i]);
        checked++;
        nb_scope_end(sc);
    }
    nb__dnnl_set_enabled(true);
    nb__conv_set_route(NB_CONV_ROUTE_AUTO);
    nbt_free_names(names, n);
    nb_tensor_map_free(m);
    return checked;
}

/* Each case on oneDNN by the rules, on the products over windows (forward, input gradient at
 * stride 1, weight gradient, where the case is ungrouped with more than one tap), and on the
 * reference loops. */
static void test_conv_pytorch_cases(void **state)
{
    assert_true(run_conv_cases(true, NB_CONV_ROUTE_RULES) >= 10);
    unsigned long long before = nb__conv_windows_runs();
    assert_true(run_conv_cases(true, NB_CONV_ROUTE_WINDOWS) >= 10);
    unsigned long long runs = nb__conv_windows_runs() - before;
    if (runs < 10) fail_msg("the windows routes ran %llu times", runs);
    assert_true(run_conv_cases(false, NB_CONV_ROUTE_AUTO) >= 10);
}

/* Convolution layers chained on a channels-last input: every result stays channels-last, and
 * the loss and all gradients equal those of the same layers on the NCHW input. */
static void test_conv_chain_matches_nchw(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *x = randn4(4, 3, 12, 12), *w1 = randn4(16, 3, 3, 3), *w2 = randn4(32, 16, 3, 3);
    nb_tensor *w3 = randn4(32, 32, 1, 1), *b2 = NBT_CHECK(nb_randn((int64_t[]){32}, 1, NULL));
    nb_tensor *loss[2], *gx[2], *gw[2][3];
    for (int cl = 0; cl < 2; cl++) {
        nb_tensor *xi = NBT_CHECK(nbt_leaf(cl ? NBT_CHECK(nb_contiguous_format(x, NB_CHANNELS_LAST)) : x));
        nb_tensor *l1 = NBT_CHECK(nbt_leaf(w1)), *l2 = NBT_CHECK(nbt_leaf(w2)), *l3 = NBT_CHECK(nbt_leaf(w3));
        nb_conv2d_params p1 = {.stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 1, .relu = true};
        nb_conv2d_params p2 = {.stride = {2, 2}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 1};
        nb_conv2d_params p3 = nb_conv2d_params_default();
        nb_tensor *h1 = NBT_CHECK(nb_conv2d(xi, l1, NULL, &p1));
        nb_tensor *h2 = NBT_CHECK(nb_relu(NBT_CHECK(nb_conv2d(h1, l2, b2, &p2))));
        nb_tensor *h3 = NBT_CHECK(nb_add(NBT_CHECK(nb_conv2d(h2, l3, NULL, &p3)), h2));
        if (cl) assert_true(is_cl(h1) && is_cl(h2) && is_cl(h3));
        loss[cl] = NBT_CHECK(nb_sum(NBT_CHECK(nb_mul(h3, h3)), NULL, 0, false));
        NBT_OK(nb_backward(loss[cl], NULL, NB_BACKWARD_DEFAULT));
        gx[cl] = NBT_CHECK(nb_tensor_grad(xi));
        gw[cl][0] = NBT_CHECK(nb_tensor_grad(l1));
        gw[cl][1] = NBT_CHECK(nb_tensor_grad(l2));
        gw[cl][2] = NBT_CHECK(nb_tensor_grad(l3));
    }
    assert_true(is_cl(gx[1]));
    nbt_assert_close(loss[1], loss[0], 1e-4, 1e-4, "loss");
    nbt_assert_close(gx[1], gx[0], 1e-3, 1e-3, "input gradient");
    for (int k = 0; k < 3; k++) nbt_assert_close(gw[1][k], gw[0][k], 1e-3, 1e-3, "weight gradient");
    nb_scope_end(s);
}

/* A one-channel image batch (MNIST's) is dense in both layouts; as torch's x.to(memory_format=
 * channels_last), nb_contiguous_format gives it the channels-last strides [H W, 1, W, 1] (a view:
 * the same memory), and the layers then run channels-last, as PyTorch's do with such an input:
 * conv -> batch norm + ReLU -> max pooling, values and gradients against the NCHW run. */
static void test_one_channel_input(void **state)
{
    nb_scope *s = nb_scope_begin();
    const int64_t N = 4, H = 10, W = 10;
    nb_tensor *x = randn4(N, 1, H, W), *w = randn4(16, 1, 3, 3);
    nb_tensor *y = NBT_CHECK(nb_contiguous_format(x, NB_CHANNELS_LAST));
    const int64_t *st = nb_tensor_strides(y), want[4] = {H * W, 1, W, 1};
    for (int i = 0; i < 4; i++) assert_int_equal(st[i], want[i]);
    assert_ptr_equal(nb_tensor_data_ptr(y), nb_tensor_data_ptr(x));
    assert_true(nb_tensor_is_contiguous(y) && is_cl(y));
    nb_tensor *loss[2], *gx[2], *gw[2];
    for (int cl = 0; cl < 2; cl++) {
        nb_tensor *xi = NBT_CHECK(nbt_leaf(cl ? y : x)), *wi = NBT_CHECK(nbt_leaf(w));
        nb_conv2d_params p = {.stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 1};
        nb_tensor *h1 = NBT_CHECK(nb_conv2d(xi, wi, NULL, &p));
        nb_tensor *h2 = NBT_CHECK(nb_batch_norm_relu(h1, NULL, NULL, NULL, NULL, true, 0.1, 1e-5));
        nb_tensor *h3 = NBT_CHECK(nb_max_pool2d(h2, (int64_t[]){2, 2}, NULL, NULL, false));
        for (int k = 0; k < 3; k++) {
            nb_tensor *h = k == 0 ? h1 : k == 1 ? h2 : h3;
            assert_true(cl ? is_cl(h) && !nb_tensor_is_contiguous(h) : nb_tensor_is_contiguous(h));
        }
        loss[cl] = NBT_CHECK(nb_sum(NBT_CHECK(nb_mul(h3, h3)), NULL, 0, false));
        NBT_OK(nb_backward(loss[cl], NULL, NB_BACKWARD_DEFAULT));
        gx[cl] = NBT_CHECK(nb_tensor_grad(xi));
        gw[cl] = NBT_CHECK(nb_tensor_grad(wi));
    }
    st = nb_tensor_strides(gx[1]);
    for (int i = 0; i < 4; i++) assert_int_equal(st[i], want[i]);
    nbt_assert_close(loss[1], loss[0], 1e-4, 1e-4, "loss");
    nbt_assert_close(gx[1], gx[0], 1e-3, 1e-3, "input gradient");
    nbt_assert_close(gw[1], gw[0], 1e-3, 1e-3, "weight gradient");
    /* the view is differentiable: the gradient reaches x's own leaf */
    nb_tensor *xl = NBT_CHECK(nbt_leaf(x));
    nb_tensor *v = NBT_CHECK(nb_contiguous_format(xl, NB_CHANNELS_LAST));
    NBT_OK(nb_backward(NBT_CHECK(nb_sum(NBT_CHECK(nb_mul_scalar(v, 3)), NULL, 0, false)), NULL, NB_BACKWARD_DEFAULT));
    nbt_assert_close(NBT_CHECK(nb_tensor_grad(xl)), NBT_CHECK(nb_full_like(x, 3)), 0, 0, "gradient through the view");
    nb_scope_end(s);
}

/* softmax and log_softmax over the channels, their gradients, and cat along the channels keep a
 * channels-last input's layout (as PyTorch's do), with the values of the NCHW run: a network's
 * layers after them stay on their channels-last kernels. */
static void test_softmax_cat_keep_layout(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *x = randn4(3, 20, 5, 6), *y = randn4(3, 12, 5, 6), *w = randn4(3, 32, 5, 6);
    nb_tensor *val[2][3], *gx[2][2];
    for (int cl = 0; cl < 2; cl++) {
        nb_tensor *xi = NBT_CHECK(nbt_leaf(cl ? NBT_CHECK(nb_contiguous_format(x, NB_CHANNELS_LAST)) : x));
        nb_tensor *yi = NBT_CHECK(nbt_leaf(cl ? NBT_CHECK(nb_contiguous_format(y, NB_CHANNELS_LAST)) : y));
        nb_tensor *sm = NBT_CHECK(nb_softmax(xi, 1)), *lsm = NBT_CHECK(nb_log_softmax(xi, 1));
        nb_tensor *c = NBT_CHECK(nb_cat((nb_tensor *[]){xi, yi}, 2, 1));
        assert_true(cl ? !nb_tensor_is_contiguous(sm) && is_cl(sm) && !nb_tensor_is_contiguous(lsm) &&
                             !nb_tensor_is_contiguous(c) && is_cl(c)
                       : nb_tensor_is_contiguous(sm) && nb_tensor_is_contiguous(lsm) && nb_tensor_is_contiguous(c));
        val[cl][0] = sm, val[cl][1] = lsm, val[cl][2] = c;
        nb_tensor *l = NBT_CHECK(nb_add(NBT_CHECK(nb_sum(NBT_CHECK(nb_mul(sm, lsm)), NULL, 0, false)),
                                        NBT_CHECK(nb_sum(NBT_CHECK(nb_mul(c, w)), NULL, 0, false))));
        NBT_OK(nb_backward(l, NULL, NB_BACKWARD_DEFAULT));
        gx[cl][0] = NBT_CHECK(nb_tensor_grad(xi));
        gx[cl][1] = NBT_CHECK(nb_tensor_grad(yi));
        if (cl) assert_true(!nb_tensor_is_contiguous(gx[cl][0]) && is_cl(gx[cl][0]));
    }
    nbt_assert_close(val[1][0], val[0][0], 1e-6, 1e-6, "softmax");
    nbt_assert_close(val[1][1], val[0][1], 1e-6, 1e-6, "log_softmax");
    nbt_assert_close(val[1][2], val[0][2], 0, 0, "cat");
    nbt_assert_close(gx[1][0], gx[0][0], 1e-5, 1e-5, "softmax and cat gradient");
    nbt_assert_close(gx[1][1], gx[0][1], 0, 0, "cat gradient");
    nb_scope_end(s);
}

/* A strided convolution's weight gradient on channels-last activations large enough that its
 * windows are copied in two pieces (three images of 4,900 windows of 288 values, 1.4 M floats an
 * image: two images, then one), against the same gradient in float64 on the reference loops. */
static void test_strided_weight_grad_pieces(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *x = randn4(3, 32, 140, 140), *w = randn4(8, 32, 3, 3), *g[2];
    nb_conv2d_params p = {.stride = {2, 2}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 1};
    for (int f64 = 0; f64 < 2; f64++) {
        nb_tensor *xi = NBT_CHECK(nb_contiguous_format(f64 ? NBT_CHECK(nb_to_dtype(x, NB_FLOAT64)) : x, NB_CHANNELS_LAST));
        nb_tensor *wi = NBT_CHECK(nbt_leaf(f64 ? NBT_CHECK(nb_to_dtype(w, NB_FLOAT64)) : w));
        nb_tensor *y = NBT_CHECK(nb_conv2d(xi, wi, NULL, &p));
        assert_true(is_cl(y) && nb_tensor_shape(y)[2] == 70);
        NBT_OK(nb_backward(NBT_CHECK(nb_sum(NBT_CHECK(nb_mul(y, y)), NULL, 0, false)), NULL, NB_BACKWARD_DEFAULT));
        g[f64] = NBT_CHECK(nb_tensor_grad(wi));
    }
    nbt_assert_close(g[0], NBT_CHECK(nb_to_dtype(g[1], NB_FLOAT32)), 1e-4, 1e-2, "strided weight gradient in pieces");
    nb_scope_end(s);
}

/* One convolution's output and its three gradients (input, weight, bias), float32 channels-last
 * on the route given, or float64 on the reference loops; gy is the upstream gradient. */
static void conv_all(nb_tensor *x, nb_tensor *w, nb_tensor *b, nb_tensor *gy, const nb_conv2d_params *p, bool f64,
                     nb_tensor *out[4])
{
    nb_tensor *xi = NBT_CHECK(nbt_leaf(NBT_CHECK(nb_contiguous_format(f64 ? NBT_CHECK(nb_to_dtype(x, NB_FLOAT64)) : x,
                                                                      NB_CHANNELS_LAST))));
    nb_tensor *wi = NBT_CHECK(nbt_leaf(f64 ? NBT_CHECK(nb_to_dtype(w, NB_FLOAT64)) : w));
    nb_tensor *bi = NBT_CHECK(nbt_leaf(f64 ? NBT_CHECK(nb_to_dtype(b, NB_FLOAT64)) : b));
    nb_tensor *y = NBT_CHECK(nb_conv2d(xi, wi, bi, p));
    assert_true(is_cl(y));
    NBT_OK(nb_backward(y, f64 ? NBT_CHECK(nb_to_dtype(gy, NB_FLOAT64)) : gy, NB_BACKWARD_DEFAULT));
    nb_tensor *r[4] = {y, NBT_CHECK(nb_tensor_grad(xi)), NBT_CHECK(nb_tensor_grad(wi)), NBT_CHECK(nb_tensor_grad(bi))};
    assert_true(is_cl(r[1]));
    for (int k = 0; k < 4; k++) out[k] = f64 ? r[k] : NBT_CHECK(nb_to_dtype(r[k], NB_FLOAT64));
}

/* The windows routes on layers large enough that the windows are copied in pieces: x [3, 32,
 * 70, 70] and 48 output channels, 3x3, stride 1, padding 1 (and dilation 2, padding 2): the
 * forward's windows are 4,900 x 288 floats an image (two images, then one), the input
 * gradient's 4,900 x 432 (one at a time). Bias and fused ReLU included; against float64 on the
 * reference loops. */
static void test_windows_routes_in_pieces(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *x = randn4(3, 32, 70, 70), *w = randn4(48, 32, 3, 3);
    nb_tensor *b = NBT_CHECK(nb_randn((int64_t[]){48}, 1, NULL));
    const char *names[4] = {"out", "input gradient", "weight gradient", "bias gradient"};
    for (int dil = 1; dil <= 2; dil++) {
        nb_conv2d_params p = {
            .stride = {1, 1}, .padding = {dil, dil}, .dilation = {dil, dil}, .groups = 1, .relu = true};
        nb_tensor *gy = NBT_CHECK(nb_contiguous_format(randn4(3, 48, 70, 70), NB_CHANNELS_LAST));
        nb_tensor *want[4], *got[4];
        unsigned long long before = nb__conv_windows_runs();
        nb__conv_set_route(NB_CONV_ROUTE_WINDOWS);
        conv_all(x, w, b, gy, &p, false, got);
        nb__conv_set_route(NB_CONV_ROUTE_AUTO);
        assert_int_equal(nb__conv_windows_runs() - before, 3);
        /* the reference takes the fused ReLU's mask from the float32 output: an output within
         * rounding of 0 (one in a few of these 705,600) would otherwise be kept on one side and
         * cut on the other, and move the gradients by a whole term */
        nb_conv2d_params q = p;
        q.relu = false;
        nb_tensor *gym = NBT_CHECK(nb_mul(gy, NBT_CHECK(nb_gt_scalar(got[0], 0))));
        conv_all(x, w, b, gym, &q, true, want);
        want[0] = NBT_CHECK(nb_relu(want[0]));
        for (int k = 0; k < 4; k++) {
            char what[64];
            snprintf(what, sizeof what, "windows, dilation %d: %s", dil, names[k]);
            nbt_assert_close(got[k], want[k], 1e-4, k == 1 ? 1e-3 : 1e-2, what);
        }
    }
    nb_scope_end(s);
}

/* nabla's Winograd (src/cpu/ops/wino.c) on the route forced to it, F(4x4, 3x3) and F(2x2, 5x5):
 * images whose sides are not multiples of the tile (partial tiles at the right and bottom),
 * output channels not a multiple of 32 (the products' last, single vector of channels), blocks
 * of tiles that end part-way (the last block padded with zero rows), the 3x3 weight gradient
 * over 6 blocks (its float sums flushed into double twice), bias and fused ReLU; against float64
 * on the reference loops. Both the CPU's own kernels and, where it has AVX2, the 16-float
 * kernels of AVX-512 compiled for AVX2. */
static void test_winograd_routes(void **state)
{
    nb_scope *s = nb_scope_begin();
    struct {
        int64_t n, c, h, w, oc, k;
    } cases[] = {{21, 32, 13, 11, 48, 3}, {5, 16, 9, 10, 32, 5}, {2, 16, 8, 8, 16, 3}};
    const char *names[4] = {"out", "input gradient", "weight gradient", "bias gradient"};
    NBT_OK(nb_set_conv_algo(NB_CONV_ALGO_AUTO));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t k = cases[i].k;
        nb_tensor *x = randn4(cases[i].n, cases[i].c, cases[i].h, cases[i].w);
        nb_tensor *w = randn4(cases[i].oc, cases[i].c, k, k);
        nb_tensor *b = NBT_CHECK(nb_randn((int64_t[]){cases[i].oc}, 1, NULL));
        nb_tensor *gy = NBT_CHECK(
            nb_contiguous_format(randn4(cases[i].n, cases[i].oc, cases[i].h, cases[i].w), NB_CHANNELS_LAST));
        nb_conv2d_params p = {.stride = {1, 1}, .padding = {k / 2, k / 2}, .dilation = {1, 1}, .groups = 1,
                              .relu = i != 1};
        nb_tensor *want[4], *got[4];
        conv_all(x, w, b, gy, &p, true, want);
        for (int wide = 0; wide < 2; wide++) {
            unsigned long long before = nb__wino_runs();
            nb__wino_set_wide(wide);
            nb__conv_set_route(NB_CONV_ROUTE_OWN);
            conv_all(x, w, b, gy, &p, false, got);
            nb__conv_set_route(NB_CONV_ROUTE_AUTO);
            nb__wino_set_wide(false);
            nb_conv_geom g = {.n = 1, .c = 16, .h = 8, .w = 8, .oc = 16, .kh = k, .kw = k, .oh = 8, .ow = 8,
                              .sh = 1, .sw = 1, .ph = k / 2, .pw = k / 2, .dh = 1, .dw = 1, .groups = 1, .cl = 1};
            if (!nb__wino_fits(&g)) { /* a CPU without AVX2: the rules ran */
                assert_int_equal(nb__wino_runs() - before, 0);
                wide = 2;
            } else {
                assert_int_equal(nb__wino_runs() - before, 3);
            }
            for (int j = 0; j < 4; j++) {
                char what[96];
                snprintf(what, sizeof what, "Winograd %dx%d, case %zu%s: %s", (int)k, (int)k, i,
                         wide == 1 ? " (16-float kernels)" : "", names[j]);
                nbt_assert_close(got[j], want[j], 1e-4, j == 1 ? 1e-3 : 1e-2, what);
            }
        }
    }
    NBT_OK(nb_set_conv_algo(NB_CONV_ALGO_DIRECT));
    nb_scope_end(s);
}

/* The route tuner: where it is on (NABLA_CONV_TUNE=1 in the *_portable run, and by default on
 * CPUs without AVX-512), a layer's forward, input and weight gradients each settle after their
 * timed calls; every call, timed or not, on whichever route, gives the rules' values to float32
 * rounding. */
static void test_route_tuner(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *x = randn4(4, 32, 28, 28), *w = randn4(64, 32, 3, 3);
    nb_tensor *b = NBT_CHECK(nb_randn((int64_t[]){64}, 1, NULL));
    nb_tensor *gy = NBT_CHECK(nb_contiguous_format(randn4(4, 64, 28, 28), NB_CHANNELS_LAST));
    nb_conv2d_params p = {.stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 1};
    nb_tensor *want[4], *got[4];
    nb__conv_set_route(NB_CONV_ROUTE_RULES);
    conv_all(x, w, b, gy, &p, false, want);
    nb__conv_set_route(NB_CONV_ROUTE_AUTO);
    int settled = nb__conv_tuned_problems();
    unsigned long long before = nb__conv_windows_runs();
    for (int call = 0; call < 8; call++) {
        nb_scope *sc = nb_scope_begin();
        conv_all(x, w, b, gy, &p, false, got);
        for (int k = 0; k < 4; k++) nbt_assert_close(got[k], want[k], 1e-4, 1e-3, "tuned route against the rules");
        nb_scope_end(sc);
    }
    if (nb__conv_tune_enabled()) {
        assert_int_equal(nb__conv_tuned_problems() - settled, 3);
        /* each problem's second, fourth and fifth calls run the windows */
        assert_true(nb__conv_windows_runs() - before >= 9);
    } else {
        assert_int_equal(nb__conv_tuned_problems(), settled);
        assert_int_equal(nb__conv_windows_runs(), before);
    }
    nb_scope_end(s);
}

int main(void)
{
    /* the conv cases compare with PyTorch's float32 (direct) values element by element; Winograd
     * on channels-last inputs is checked against float64 in test_conv_algo.c */
    if (nb_set_conv_algo(NB_CONV_ALGO_DIRECT) != NB_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_transposing_copies),
        cmocka_unit_test(test_errors_and_grad),
        cmocka_unit_test(test_elementwise_keeps_layout),
        cmocka_unit_test(test_conv_pytorch_cases),
        cmocka_unit_test(test_conv_chain_matches_nchw),
        cmocka_unit_test(test_one_channel_input),
        cmocka_unit_test(test_softmax_cat_keep_layout),
        cmocka_unit_test(test_strided_weight_grad_pieces),
        cmocka_unit_test(test_windows_routes_in_pieces),
        cmocka_unit_test(test_winograd_routes),
        cmocka_unit_test(test_route_tuner),
    };
    return NBT_RUN(tests);
}
