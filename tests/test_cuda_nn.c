/* The CUDA layers against the CPU's results: conv2d through cuDNN (bias, stride, padding,
 * dilation, groups, the fused ReLU; input, weight and bias gradients), max / average / adaptive pooling and
 * their gradients, batch norm in training (running statistics) and evaluation with gradients,
 * a 2-layer LSTM (the fused cell kernels), and the zoo's CNN: the same weights give the same loss and gradients on both devices, and
 * a few Adam steps on the GPU track the CPU's; convolutions on TF32 (the default) within TF32's
 * error of float64. The element-wise comparisons run with TF32 off. Exits 77 (ctest: Skipped)
 * without a GPU. */
#include <stdio.h>

#include "nbtest.h"
#include "nabla/cuda.h"


static nb_tensor *randn(const int64_t *shape, int nd, nb_dtype dt)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = dt;
    return NBT_CHECK(nb_randn(shape, nd, &p));
}

/* a leaf copy of t on the device */
static nb_tensor *dev_leaf(const nb_tensor *t)
{
    nb_tensor *d = NBT_CHECK(nb_tensor_retain(nbt_to_cuda(t)));
    NBT_OK(nb_tensor_set_requires_grad(d, true));
    return d;
}

typedef nb_tensor *(*layer_fn)(nb_tensor *const *in, void *ctx);

/* f on host leaves and on device leaves: outputs and every input's gradient agree */
static void compare(layer_fn f, void *ctx, nb_tensor *const *in, int n, double rtol, const char *what)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *h[4] = {NULL}, *d[4] = {NULL}; /* past n: NULL (conv2d without bias) */
    for (int i = 0; i < n; i++) h[i] = nbt_leaf(in[i]), d[i] = dev_leaf(in[i]);
    nb_tensor *yh = NBT_CHECK(f(h, ctx)), *yd = NBT_CHECK(f(d, ctx));
    nbt_assert_close_host(yd, yh, rtol, what);
    nb_tensor *g = randn(nb_tensor_shape(yh), nb_tensor_ndim(yh), nb_tensor_dtype(yh));
    NBT_OK(nb_backward(yh, g, 0));
    NBT_OK(nb_backward(yd, nbt_to_cuda(g), 0));
    for (int i = 0; i < n; i++) {
        nbt_assert_close_host(nb_tensor_grad(d[i]), nb_tensor_grad(h[i]), rtol * 10, what);
        nb_tensor_free(d[i]);
    }
    nb_scope_end(s);
}

static nb_tensor *conv_f(nb_tensor *const *in, void *ctx) { return nb_conv2d(in[0], in[1], in[2], ctx); }
static nb_tensor *maxp_f(nb_tensor *const *in, void *ctx)
{
    int64_t k[2] = {3, 3}, st[2] = {2, 2}, pd[2] = {1, 1};
    return nb_max_pool2d(in[0], k, st, pd, ctx != NULL);
}
static nb_tensor *avgp_f(nb_tensor *const *in, void *ctx)
{
    int64_t k[2] = {3, 2}, st[2] = {2, 1}, pd[2] = {1, 0};
    return nb_avg_pool2d(in[0], k, st, pd, true, ctx != NULL);
}
static nb_tensor *adapt_f(nb_tensor *const *in, void *ctx) { return nb_adaptive_avg_pool2d(in[0], 3, 4); }

static void test_conv_and_pool(void **state)
{
    (void)state;
    for (int dt = 0; dt < 2; dt++) {
        nb_dtype t = dt ? NB_FLOAT64 : NB_FLOAT32;
        double rtol = dt ? 1e-11 : 1e-4;
        int64_t sx[4] = {3, 4, 11, 13}, sw[4] = {6, 2, 3, 3}, sb[1] = {6};
        nb_tensor *in[3] = {randn(sx, 4, t), randn(sw, 4, t), randn(sb, 1, t)};
        nb_conv2d_params p = nb_conv2d_params_default();
        p.stride[0] = 2, p.padding[0] = p.padding[1] = 1, p.dilation[1] = 2, p.groups = 2;
        compare(conv_f, &p, in, 3, rtol, "conv2d");
        p.relu = true;
        compare(conv_f, &p, in, 3, rtol, "conv2d with fused relu");
        p = nb_conv2d_params_default();
        p.groups = 2; /* weight [6, 2, ...] over 4 channels */
        compare(conv_f, &p, in, 2, rtol, "conv2d without bias");
        compare(maxp_f, NULL, in, 1, rtol, "max_pool2d");
        compare(maxp_f, (void *)1, in, 1, rtol, "max_pool2d ceil");
        compare(avgp_f, NULL, in, 1, rtol, "avg_pool2d");
        compare(avgp_f, (void *)1, in, 1, rtol, "avg_pool2d count_include_pad");
        compare(adapt_f, NULL, in, 1, rtol, "adaptive_avg_pool2d");
    }
}

/* TF32 convolutions (the default, as PyTorch's cudnn.allow_tf32): each output and gradient
 * within TF32's error of the float64 result, ||err|| / ||ref|| about 3e-4 over 72-long sums; with
 * the switch off, within float32's. (TF32 permits tensor cores; cuDNN's search may still pick an
 * FMA algorithm for a shape, so a TF32-sized error is not required.) */
static void test_conv_tf32(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t sx[4] = {4, 8, 12, 12}, sw[4] = {16, 8, 3, 3}, sb[1] = {16};
    nb_tensor *x = randn(sx, 4, NB_FLOAT64), *w = randn(sw, 4, NB_FLOAT64), *b = randn(sb, 1, NB_FLOAT64);
    nb_conv2d_params p = nb_conv2d_params_default();
    p.padding[0] = p.padding[1] = 1;
    nb_tensor *in64[3] = {nbt_leaf(x), nbt_leaf(w), nbt_leaf(b)};
    nb_tensor *y64 = NBT_CHECK(nb_conv2d(in64[0], in64[1], in64[2], &p));
    nb_tensor *g = randn(nb_tensor_shape(y64), 4, NB_FLOAT64);
    NBT_OK(nb_backward(y64, g, 0));
    for (int tf32 = 1; tf32 >= 0; tf32--) {
        nb_cuda_set_allow_tf32_conv(tf32);
        nb_tensor *in[3];
        for (int i = 0; i < 3; i++)
            in[i] = dev_leaf(NBT_CHECK(nb_to_dtype((nb_tensor *[]){x, w, b}[i], NB_FLOAT32)));
        nb_tensor *y = NBT_CHECK(nb_conv2d(in[0], in[1], in[2], &p));
        NBT_OK(nb_backward(y, nbt_to_cuda(NBT_CHECK(nb_to_dtype(g, NB_FLOAT32))), 0));
        double e[4] = {nbt_rel_err_host(y, y64), nbt_rel_err_host(nb_tensor_grad(in[0]), nb_tensor_grad(in64[0])),
                       nbt_rel_err_host(nb_tensor_grad(in[1]), nb_tensor_grad(in64[1])),
                       nbt_rel_err_host(nb_tensor_grad(in[2]), nb_tensor_grad(in64[2]))};
        printf("conv2d %s: relative errors y %.3g, dx %.3g, dw %.3g, db %.3g\n", tf32 ? "tf32" : "fp32", e[0], e[1],
               e[2], e[3]);
        for (int i = 0; i < 3; i++) assert_true(e[i] < (tf32 ? 3e-3 : 1e-5));
        assert_true(e[3] < 1e-5); /* the bias gradient is a sum, no product */
        for (int i = 0; i < 3; i++) nb_tensor_free(in[i]);
    }
    nb_cuda_set_allow_tf32_conv(false);
    nb_scope_end(s);
}

static nb_tensor *bn_f(nb_tensor *const *in, void *ctx)
{
    nb_tensor **run = ctx; /* running mean, var of the device of in[0] */
    bool on_cuda = nb_tensor_device(in[0]).type == NB_DEVICE_CUDA;
    return nb_batch_norm(in[0], run[on_cuda ? 2 : 0], run[on_cuda ? 3 : 1], in[1], in[2], run[4] != NULL, 0.1, 1e-5);
}

static void test_batch_norm(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t sx[4] = {5, 3, 6, 7}, sc[1] = {3};
    nb_tensor *in[3] = {randn(sx, 4, NB_FLOAT64), randn(sc, 1, NB_FLOAT64), randn(sc, 1, NB_FLOAT64)};
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_FLOAT64;
    nb_tensor *rm = NBT_CHECK(nb_zeros(sc, 1, &p)), *rv = NBT_CHECK(nb_ones(sc, 1, &p));
    nb_tensor *run[5] = {rm, rv, nbt_to_cuda(rm), nbt_to_cuda(rv), rm /* training */};
    compare(bn_f, run, in, 3, 1e-11, "batch_norm training");
    nbt_assert_close_host(run[2], run[0], 1e-12, "running mean");
    nbt_assert_close_host(run[3], run[1], 1e-12, "running var");
    run[4] = NULL;
    compare(bn_f, run, in, 3, 1e-11, "batch_norm evaluation");
    nb_scope_end(s);
}

/* A 2-layer LSTM with given states: outputs, final states and every gradient (the fused cell
 * kernels and the cuBLAS products) */
static nb_tensor *lstm_f(nb_tensor *const *in, void *ctx)
{
    nb_lstm_params p = nb_lstm_params_default();
    p.hidden_size = 12;
    return nb_lstm(in[0], in[1], in[2], in + 3, 8, 2, &p, NULL, NULL);
}

static void test_lstm(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_lstm_params p = nb_lstm_params_default();
    p.hidden_size = 12;
    nb_tensor_params tp = nb_tensor_params_default();
    tp.dtype = NB_FLOAT64;
    nb_tensor *w[8];
    NBT_OK(nb_lstm_init_weights(7, 2, &p, &tp, w));
    int64_t sx[3] = {5, 3, 7}, sh[3] = {2, 3, 12};
    nb_tensor *in[11] = {randn(sx, 3, NB_FLOAT64), randn(sh, 3, NB_FLOAT64), randn(sh, 3, NB_FLOAT64)};
    for (int i = 0; i < 8; i++) in[3 + i] = NBT_CHECK(nb_detach(w[i]));
    nb_scope *t = nb_scope_begin();
    nb_tensor *h[11], *d[11];
    for (int i = 0; i < 11; i++) h[i] = nbt_leaf(in[i]), d[i] = dev_leaf(in[i]);
    nb_tensor *yh = NBT_CHECK(lstm_f(h, NULL)), *yd = NBT_CHECK(lstm_f(d, NULL));
    nbt_assert_close_host(yd, yh, 1e-11, "lstm output");
    nb_tensor *g = randn(nb_tensor_shape(yh), 3, NB_FLOAT64);
    NBT_OK(nb_backward(yh, g, 0));
    NBT_OK(nb_backward(yd, nbt_to_cuda(g), 0));
    for (int i = 0; i < 11; i++) {
        nbt_assert_close_host(nb_tensor_grad(d[i]), nb_tensor_grad(h[i]), 1e-10, "lstm gradient");
        nb_tensor_free(d[i]);
    }
    nb_scope_end(t);
    nb_scope_end(s);
}

/* The zoo CNN: same weights, same batch: loss and gradients agree; 5 Adam steps stay close. */
static void test_cnn(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_module *mh = NBT_CHECK(nb_model_create("cnn", 1, 28, 28, 10, NULL));
    nb_module *md = NBT_CHECK(nb_model_create("cnn", 1, 28, 28, 10, NULL));
    nb_tensor_map *sd = NBT_CHECK(nb_tensor_map_create());
    NBT_OK(nb_module_state_dict(mh, sd));
    NBT_OK(nb_module_load_state_dict(md, sd, true));
    NBT_OK(nb_module_to(md, NBT_CUDA0));
    nb_module_train(mh, false); /* dropout off: its masks differ by draw order, not by device */
    nb_module_train(md, false);
    int64_t sx[4] = {16, 1, 28, 28}, sy[1] = {16};
    nb_tensor_params pi = nb_tensor_params_default();
    pi.dtype = NB_INT64;
    nb_tensor *x = randn(sx, 4, NB_FLOAT32), *y = NBT_CHECK(nb_randint(0, 10, sy, 1, &pi));
    nb_tensor *ph[32], *pd[32];
    int np = nb_module_parameters(mh, ph, 32);
    assert_int_equal(nb_module_parameters(md, pd, 32), np);
    nb_optim *oh = NBT_CHECK(nb_optim_adam(ph, np, NULL)), *od = NBT_CHECK(nb_optim_adam(pd, np, NULL));
    for (int step = 0; step < 5; step++) {
        nb_scope *t = nb_scope_begin();
        nb_tensor *lh = NBT_CHECK(nb_cross_entropy(NBT_CHECK(nb_module_forward(mh, x)), y, NULL));
        nb_tensor *ld = NBT_CHECK(nb_cross_entropy(NBT_CHECK(nb_module_forward(md, nbt_to_cuda(x))), nbt_to_cuda(y), NULL));
        nbt_assert_close_host(ld, lh, 1e-4, "cnn loss");
        NBT_OK(nb_backward(lh, NULL, 0));
        NBT_OK(nb_backward(ld, NULL, 0));
        if (step == 0)
            for (int i = 0; i < np; i++) nbt_assert_close_host(nb_tensor_grad(pd[i]), nb_tensor_grad(ph[i]), 1e-3, "cnn grad");
        NBT_OK(nb_optim_step(oh));
        NBT_OK(nb_optim_step(od));
        NBT_OK(nb_optim_zero_grad(oh));
        NBT_OK(nb_optim_zero_grad(od));
        nb_scope_end(t);
    }
    nb_optim_free(oh);
    nb_optim_free(od);
    nb_tensor_map_free(sd);
    nb_module_free(mh);
    nb_module_free(md);
    nb_scope_end(s);
}

int main(void)
{
    if (nbt_cuda_missing()) return 77;
    nb_cuda_set_allow_tf32_conv(false); /* element-wise comparisons with the CPU's float32 */
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_conv_and_pool), cmocka_unit_test(test_conv_tf32),
                                       cmocka_unit_test(test_batch_norm),
                                       cmocka_unit_test(test_lstm), cmocka_unit_test(test_cnn)};
    return NBT_RUN(tests);
}
