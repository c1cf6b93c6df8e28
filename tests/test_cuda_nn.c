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
static nb_tensor *maxp_relu_f(nb_tensor *const *in, void *ctx)
{
    int64_t k[2] = {3, 3}, st[2] = {2, 2}, pd[2] = {1, 1};
    return nb_max_pool2d_relu(in[0], k, st, pd, ctx != NULL);
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
        compare(maxp_relu_f, NULL, in, 1, rtol, "max_pool2d_relu (composed on the GPU, fused on the CPU)");
        compare(avgp_f, NULL, in, 1, rtol, "avg_pool2d");
        compare(avgp_f, (void *)1, in, 1, rtol, "avg_pool2d count_include_pad");
        compare(adapt_f, NULL, in, 1, rtol, "adaptive_avg_pool2d");
        /* bias gradients over several blocks per channel: long planes (22 x 22) and short ones
         * (4 x 4) shared out among a block's threads */
        const int64_t big[2][4] = {{96, 4, 24, 24}, {2048, 2, 6, 6}};
        for (int k = 0; k < 2; k++) {
            int64_t bw[4] = {3, big[k][1], 3, 3}, bb[1] = {3};
            nb_tensor *bin[3] = {randn(big[k], 4, t), randn(bw, 4, t), randn(bb, 1, t)};
            nb_conv2d_params q = nb_conv2d_params_default();
            compare(conv_f, &q, bin, 3, dt ? 1e-11 : 1e-4, "conv2d, bias gradient over many blocks");
        }
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

/* One batch-norm case: the layer on both devices, training (running statistics updated, then
 * compared) and evaluation with them. offset: x starts one element into its buffer (the kernels'
 * unaligned path: no vector loads). */
typedef struct bn_case {
    const char *what;
    nb_dtype dt;
    int nd;
    int64_t shape[4];
    bool affine, train, offset;
} bn_case;

typedef struct bn_ctx {
    const bn_case *c;
    nb_tensor *run[4]; /* running mean and var on the CPU, then on the device */
    bool training;
} bn_ctx;

static nb_tensor *bn_f(nb_tensor *const *in, void *ctx)
{
    bn_ctx *b = ctx;
    bool on_cuda = nb_tensor_device(in[0]).type == NB_DEVICE_CUDA;
    const nb_tensor *x = in[0];
    if (b->c->offset) x = nb_view(nb_narrow(x, 0, 1, nb_tensor_numel(x) - 1), b->c->shape, b->c->nd);
    return nb_batch_norm(x, b->run[on_cuda ? 2 : 0], b->run[on_cuda ? 3 : 1], in[1], in[2], b->training, 0.1, 1e-5);
}

static void bn_run_case(const bn_case *c)
{
    nb_scope *s = nb_scope_begin();
    double tol = c->dt == NB_FLOAT64 ? 1e-11 : 1e-5;
    int64_t ch = c->shape[1], numel = 1;
    for (int i = 0; i < c->nd; i++) numel *= c->shape[i];
    int64_t flat = numel + 1;
    nb_tensor *in[3] = {c->offset ? randn(&flat, 1, c->dt) : randn(c->shape, c->nd, c->dt), randn(&ch, 1, c->dt),
                        randn(&ch, 1, c->dt)};
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = c->dt;
    nb_tensor *rm = NBT_CHECK(nb_zeros(&ch, 1, &p)), *rv = NBT_CHECK(nb_ones(&ch, 1, &p));
    bn_ctx b = {.c = c, .run = {rm, rv, nbt_to_cuda(rm), nbt_to_cuda(rv)}};
    char what[160];
    printf("batch_norm %s\n", c->what);
    if (c->train) {
        b.training = true;
        snprintf(what, sizeof what, "batch_norm %s training", c->what);
        compare(bn_f, &b, in, c->affine ? 3 : 1, tol, what);
        snprintf(what, sizeof what, "batch_norm %s running mean", c->what);
        nbt_assert_close_host(b.run[2], rm, tol / 10, what);
        snprintf(what, sizeof what, "batch_norm %s running var", c->what);
        nbt_assert_close_host(b.run[3], rv, tol / 10, what);
    }
    b.training = false;
    snprintf(what, sizeof what, "batch_norm %s evaluation", c->what);
    compare(bn_f, &b, in, c->affine ? 3 : 1, tol, what);
    nb_scope_end(s);
}

/* x without a gradient: the backward gives the parameters' gradients alone (its sums, without
 * the elementwise pass) */
static void bn_params_only(void)
{
    nb_scope *s = nb_scope_begin();
    int64_t sx[4] = {6, 5, 9, 8}, sc[1] = {5};
    nb_tensor *x = randn(sx, 4, NB_FLOAT64), *w = randn(sc, 1, NB_FLOAT64), *b = randn(sc, 1, NB_FLOAT64);
    nb_tensor *hw = nbt_leaf(w), *hb = nbt_leaf(b), *dw = dev_leaf(w), *db = dev_leaf(b);
    nb_tensor *yh = NBT_CHECK(nb_batch_norm(x, NULL, NULL, hw, hb, true, 0.1, 1e-5));
    nb_tensor *yd = NBT_CHECK(nb_batch_norm(nbt_to_cuda(x), NULL, NULL, dw, db, true, 0.1, 1e-5));
    nbt_assert_close_host(yd, yh, 1e-11, "batch_norm, x without gradient");
    nb_tensor *g = randn(sx, 4, NB_FLOAT64);
    NBT_OK(nb_backward(yh, g, 0));
    NBT_OK(nb_backward(yd, nbt_to_cuda(g), 0));
    nbt_assert_close_host(nb_tensor_grad(dw), nb_tensor_grad(hw), 1e-10, "batch_norm weight gradient alone");
    nbt_assert_close_host(nb_tensor_grad(db), nb_tensor_grad(hb), 1e-10, "batch_norm bias gradient alone");
    nb_tensor_free(dw);
    nb_tensor_free(db);
    nb_scope_end(s);
}

/* relu(batch_norm) and relu(batch_norm + r) (nb_batch_norm_relu, nb_batch_norm_add_relu; in[3]
 * the residual when given): on the device the composed ops, on the CPU the fused kernel. */
static nb_tensor *bn_fused_f(nb_tensor *const *in, void *ctx)
{
    bool training = ctx != NULL;
    if (in[3]) return nb_batch_norm_add_relu(in[0], in[3], NULL, NULL, in[1], in[2], training, 0.1, 1e-5);
    return nb_batch_norm_relu(in[0], NULL, NULL, in[1], in[2], training, 0.1, 1e-5);
}

/* batch_norm + r (nb_batch_norm_add): the same, without the ReLU. */
static nb_tensor *bn_add_f(nb_tensor *const *in, void *ctx)
{
    return nb_batch_norm_add(in[0], in[3], NULL, NULL, in[1], in[2], ctx != NULL, 0.1, 1e-5);
}

/* The fused batch-norm ops against the CPU's fused kernel, float64, training; all four
 * gradients (x, weight, bias, the residual). */
static void test_batch_norm_fused(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t sx[4] = {4, 6, 7, 5}, sc[1] = {6};
    nb_tensor *in[4] = {randn(sx, 4, NB_FLOAT64), randn(sc, 1, NB_FLOAT64), randn(sc, 1, NB_FLOAT64),
                        randn(sx, 4, NB_FLOAT64)};
    compare(bn_fused_f, (void *)1, in, 3, 1e-11, "batch_norm_relu");
    compare(bn_fused_f, (void *)1, in, 4, 1e-11, "batch_norm_add_relu");
    compare(bn_add_f, (void *)1, in, 4, 1e-11, "batch_norm_add");
    nb_scope_end(s);
}

/* Batch norm against the CPU: float64 at 1e-11 and ResNet-like float32 shapes at 1e-5 (the
 * vector widths 4, 2 and 1, one and many blocks per channel), a single channel over a large
 * plane, 2-D and 3-D inputs, one value per channel in evaluation, no weight and bias, an
 * unaligned x, and running statistics after training. */
static void test_batch_norm(void **state)
{
    (void)state;
    static const bn_case cases[] = {
        {"[5,3,6,7] float64", NB_FLOAT64, 4, {5, 3, 6, 7}, true, true, false},
        {"[5,3,6,7] float64 without weight and bias", NB_FLOAT64, 4, {5, 3, 6, 7}, false, true, false},
        {"[64,16,32,32] float32", NB_FLOAT32, 4, {64, 16, 32, 32}, true, true, false},
        {"[8,256,14,14] float32", NB_FLOAT32, 4, {8, 256, 14, 14}, true, true, false},
        {"[16,32,7,7] float32", NB_FLOAT32, 4, {16, 32, 7, 7}, true, true, false},
        {"[4,6,2,3] float32 without weight and bias", NB_FLOAT32, 4, {4, 6, 2, 3}, false, true, false},
        {"[2,1,513,1031] float64 (one channel)", NB_FLOAT64, 4, {2, 1, 513, 1031}, true, true, false},
        {"[1,1,1024,1024] float32 (one image, one channel)", NB_FLOAT32, 4, {1, 1, 1024, 1024}, true, true, false},
        {"[2,5] float64", NB_FLOAT64, 2, {2, 5}, true, true, false},
        {"[3,4,5] float64", NB_FLOAT64, 3, {3, 4, 5}, true, true, false},
        {"[1,4,1,1] float64 (evaluation only)", NB_FLOAT64, 4, {1, 4, 1, 1}, true, false, false},
        {"[4,8,4,4] float32 unaligned", NB_FLOAT32, 4, {4, 8, 4, 4}, true, true, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) bn_run_case(&cases[i]);
    bn_params_only();
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
                                       cmocka_unit_test(test_batch_norm), cmocka_unit_test(test_batch_norm_fused),
                                       cmocka_unit_test(test_lstm), cmocka_unit_test(test_cnn)};
    return NBT_RUN(tests);
}
