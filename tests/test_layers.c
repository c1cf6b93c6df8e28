/* Tests of the layer modules (nabla/layers.h) against PyTorch's modules
 * (tests/ref/cases_layers.py): weights loaded through nb_module_load_state_dict, forward and every
 * gradient in float32 and float64, contiguous and not; BatchNorm's running statistics after two
 * training forwards, num_batches_tracked and the eval output; PyTorch's initial values and the
 * constructors' errors.
 *
 * Tolerances: float32 rtol 1e-4 atol 1e-5 (convolution through oneDNN and batch-norm reductions
 * sum in another order than PyTorch), float64 rtol 1e-10 atol 1e-12. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nbtest.h"
#include "nabla/layers.h" /* until nabla.h includes it */

static nb_module *make(const char *name, nb_dtype dt)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = dt;
    if (!strcmp(name, "conv")) {
        nb_conv2d_params c = nb_conv2d_params_default();
        c.stride[0] = c.stride[1] = 2;
        c.padding[0] = c.padding[1] = 1;
        c.groups = 2;
        return nb_conv2d_module(4, 6, 3, 2, &c, true, &p);
    }
    if (!strcmp(name, "conv_nobias")) {
        nb_conv2d_params c = nb_conv2d_params_default();
        c.padding[0] = c.padding[1] = 1;
        return nb_conv2d_module(3, 5, 3, 3, &c, false, &p);
    }
    if (!strcmp(name, "maxpool")) return nb_max_pool2d_module(3, 2, 1);
    if (!strcmp(name, "avgpool")) return nb_avg_pool2d_module(3, 2, 1);
    if (!strcmp(name, "adaptive")) return nb_adaptive_avg_pool2d_module(3, 2);
    if (!strcmp(name, "bn2d")) return nb_batch_norm2d_module(3, &p);
    if (!strcmp(name, "bn1d")) return nb_batch_norm1d_module(5, &p);
    if (!strcmp(name, "lrn3")) return nb_local_response_norm_module(3, 0.1, 0.75, 2.0);
    if (!strcmp(name, "lrn4")) return nb_local_response_norm_module(4, 1e-4, 0.75, 1.0);
    if (!strcmp(name, "seq_conv_relu")) {
        nb_conv2d_params c = nb_conv2d_params_default();
        c.padding[0] = c.padding[1] = 1;
        nb_module *k[5] = {nb_conv2d_module(3, 4, 3, 3, &c, true, &p), nb_relu_module(), nb_max_pool2d_module(2, 0, 0),
                           nb_conv2d_module(4, 5, 3, 3, NULL, false, &p), nb_relu_module()};
        return nb_sequential(k, 5);
    }
    return NULL;
}

static void load(nb_module *m, const nb_tensor_map *ref, const char *prefix)
{
    enum { CAP = 8 };
    nb_tensor_map *sd = NBT_CHECK(nb_tensor_map_create());
    NBT_OK(nb_module_state_dict(m, sd));
    nb_tensor_map *in = NBT_CHECK(nb_tensor_map_create());
    char key[128];
    for (int i = 0; i < nb_tensor_map_size(sd); i++) {
        snprintf(key, sizeof key, "sd/%s", nb_tensor_map_name(sd, i));
        NBT_OK(nb_tensor_map_set(in, nb_tensor_map_name(sd, i), NBT_CHECK(nbt_ref(ref, prefix, key))));
    }
    NBT_OK(nb_module_load_state_dict(m, in, true));
    nb_tensor_map_free(in);
    nb_tensor_map_free(sd);
}

/* The BatchNorm extras: a second training forward, the running statistics, the counter, eval. */
static void check_bn(nb_module *m, const nb_tensor_map *ref, const char *prefix, double rtol, double atol)
{
    char what[256];
    NBT_CHECK(nb_module_forward(m, NBT_CHECK(nbt_ref(ref, prefix, "in1"))));
    snprintf(what, sizeof what, "%s running_mean", prefix);
    nbt_assert_close(nb_module_get_buffer(m, "running_mean"), nbt_ref(ref, prefix, "after/running_mean"), rtol, atol,
                     what);
    snprintf(what, sizeof what, "%s running_var", prefix);
    nbt_assert_close(nb_module_get_buffer(m, "running_var"), nbt_ref(ref, prefix, "after/running_var"), rtol, atol,
                     what);
    nb_tensor *count = nb_module_get_buffer(m, "num_batches_tracked");
    assert_int_equal(nb_tensor_dtype(count), NB_INT64);
    assert_int_equal(nb_tensor_ndim(count), 0);
    int64_t n = 0, start = 0; /* the loaded value (torch's module ran once before) + 2 */
    NBT_OK(nb_item_int64(NBT_CHECK(nbt_ref(ref, prefix, "sd/num_batches_tracked")), &start));
    NBT_OK(nb_item_int64(count, &n));
    assert_int_equal(n, start + 2);
    nb_module_train(m, false);
    nb_tensor *y = NBT_CHECK(nb_module_forward(m, NBT_CHECK(nbt_ref(ref, prefix, "in0"))));
    snprintf(what, sizeof what, "%s eval", prefix);
    nbt_assert_close(y, nbt_ref(ref, prefix, "eval_out"), rtol, atol, what);
    NBT_OK(nb_item_int64(count, &n));
    assert_int_equal(n, start + 2); /* eval mode does not count */
}

static void run_case(const nb_tensor_map *ref, const char *name, const char *tag, bool noncontig)
{
    nb_dtype dt = strcmp(tag, "f32") ? NB_FLOAT64 : NB_FLOAT32;
    double rtol = dt == NB_FLOAT32 ? 1e-4 : 1e-10, atol = dt == NB_FLOAT32 ? 1e-5 : 1e-12;
    char prefix[64], key[128], what[256];
    snprintf(prefix, sizeof prefix, "%s/%s", name, tag);
    nb_module *m = make(name, dt);
    if (!m) fail_msg("%s: %s", prefix, nb_last_error());
    load(m, ref, prefix);
    nb_tensor *x = NBT_CHECK(nbt_ref(ref, prefix, "in0"));
    nb_tensor *xin = noncontig ? NBT_CHECK(nbt_noncontig(x)) : NBT_CHECK(nb_clone(x));
    NBT_OK(nb_tensor_set_requires_grad(xin, true));
    nb_tensor *y = NBT_CHECK(nb_module_forward(m, xin));
    snprintf(what, sizeof what, "%s%s out", prefix, noncontig ? " noncontig" : "");
    nbt_assert_close(y, nbt_ref(ref, prefix, "out"), rtol, atol, what);
    NBT_OK(nb_backward(y, nbt_ref(ref, prefix, "gout"), 0));
    snprintf(what, sizeof what, "%s grad0", prefix);
    nbt_assert_close(NBT_CHECK(nb_tensor_grad(xin)), nbt_ref(ref, prefix, "grad0"), rtol, atol, what);
    const char *names[8];
    nb_tensor *params[8];
    int n = nb_module_named_parameters(m, names, params, 8);
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "grad/%s", names[i]);
        snprintf(what, sizeof what, "%s %s", prefix, key);
        nbt_assert_close(NBT_CHECK(nb_tensor_grad(params[i])), NBT_CHECK(nbt_ref(ref, prefix, key)), rtol, atol,
                         what);
    }
    if (!strncmp(name, "bn", 2)) check_bn(m, ref, prefix, rtol, atol);
    nb_module_free(m);
}

static void test_layers_pytorch(void **state)
{
    (void)state;
    static const char *const names[] = {"conv", "conv_nobias", "maxpool", "avgpool", "adaptive",
                                        "bn2d", "bn1d",        "lrn3",    "lrn4",    "seq_conv_relu"};
    nb_scope *s = nb_scope_begin();
    nb_tensor_map *ref = nbt_load_ref("layers");
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        for (int nc = 0; nc < 2; nc++) {
            run_case(ref, names[i], "f32", nc);
            run_case(ref, names[i], "f64", nc);
        }
    nb_tensor_map_free(ref);
    nb_scope_end(s);
}

/* LocalResponseNorm in float64 against central differences. */
static nb_tensor *lrn_fn(nb_tensor *const *in, int n, void *ctx)
{
    (void)n;
    return nb_module_forward(ctx, in[0]);
}

static void test_lrn_gradcheck(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_module *m = NBT_CHECK(nb_local_response_norm_module(3, 0.5, 0.75, 1.0));
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_FLOAT64;
    int64_t shape[4] = {2, 4, 2, 3};
    nb_tensor *x = NBT_CHECK(nb_randn(shape, 4, &p));
    nbt_gradcheck(lrn_fn, m, &x, 1, 1e-6, 1e-7, 1e-5, "lrn");
    nb_module_free(m);
    nb_scope_end(s);
}

/* PyTorch's initial values: Conv2d ~ U(+-1/sqrt(fan_in)), BatchNorm 1 / 0 / 0 / 1 / 0. */
static void test_init(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_conv2d_params c = nb_conv2d_params_default();
    c.groups = 2;
    nb_module *conv = NBT_CHECK(nb_conv2d_module(8, 64, 3, 3, &c, true, NULL));
    double bound = 1.0 / sqrt(4 * 3 * 3), lo, hi, mean;
    nb_tensor *w = nb_module_get_parameter(conv, "weight");
    assert_int_equal(nb_tensor_shape(w)[1], 4);
    assert_true(nb_tensor_requires_grad(w));
    NBT_OK(nb_item(NBT_CHECK(nb_min(w)), &lo));
    NBT_OK(nb_item(NBT_CHECK(nb_max(w)), &hi));
    NBT_OK(nb_item(NBT_CHECK(nb_mean(w, NULL, 0, false)), &mean));
    assert_true(lo >= -bound && hi <= bound && lo < -0.9 * bound && hi > 0.9 * bound);
    assert_true(fabs(mean) < 0.02);
    nb_tensor *b = nb_module_get_parameter(conv, "bias");
    NBT_OK(nb_item(NBT_CHECK(nb_max(NBT_CHECK(nb_abs(b)))), &hi));
    assert_true(hi <= bound);
    assert_string_equal(nb_module_type_name(conv), "Conv2d");
    nb_module_free(conv);
    nb_module *bn = NBT_CHECK(nb_batch_norm2d_module(4, NULL));
    const char *names[8];
    assert_int_equal(nb_module_named_buffers(bn, names, NULL, 8), 3);
    assert_string_equal(names[0], "running_mean");
    assert_string_equal(names[1], "running_var");
    assert_string_equal(names[2], "num_batches_tracked");
    NBT_OK(nb_item(NBT_CHECK(nb_sum(nb_module_get_parameter(bn, "weight"), NULL, 0, false)), &hi));
    assert_true(hi == 4.0);
    NBT_OK(nb_item(NBT_CHECK(nb_sum(nb_module_get_buffer(bn, "running_var"), NULL, 0, false)), &hi));
    assert_true(hi == 4.0);
    NBT_OK(nb_item(NBT_CHECK(nb_sum(nb_module_get_buffer(bn, "running_mean"), NULL, 0, false)), &hi));
    assert_true(hi == 0.0);
    nb_module_free(bn);
    nb_scope_end(s);
}

/* x's and every parameter's gradient after backward of y with gout; grads reset to none after. */
static void grads_of(nb_module *m, nb_tensor *x, nb_tensor *y, const nb_tensor *gout, nb_tensor **out)
{
    NBT_OK(nb_backward(y, gout, 0));
    nb_tensor *params[4];
    int n = nb_module_parameters(m, params, 4);
    assert_int_equal(n, 3);
    out[0] = NBT_CHECK(nb_clone(NBT_CHECK(nb_tensor_grad(x))));
    for (int i = 0; i < n; i++) {
        out[1 + i] = NBT_CHECK(nb_clone(NBT_CHECK(nb_tensor_grad(params[i]))));
        NBT_OK(nb_tensor_set_grad(params[i], NULL));
    }
}

/* Sequential runs BatchNorm2d + ReLU as one op (nb_batch_norm_relu: the output's grad_fn is
 * batch norm's): bit for bit the output and gradients of running the children one by one, in
 * training, float32 and float64, NCHW and channels-last. */
static void test_sequential_bn_relu_fusion(void **state)
{
    (void)state;
    for (int mode = 0; mode < 4; mode++) {
        nb_scope *s = nb_scope_begin();
        nb_tensor_params p = nb_tensor_params_default();
        p.dtype = mode & 1 ? NB_FLOAT64 : NB_FLOAT32;
        nb_module *k[3] = {NBT_CHECK(nb_conv2d_module(3, 5, 3, 1, NULL, false, &p)),
                           NBT_CHECK(nb_batch_norm2d_module(5, &p)), NBT_CHECK(nb_relu_module())};
        nb_module *m = NBT_CHECK(nb_sequential(k, 3));
        nb_tensor *x = NBT_CHECK(nb_randn((int64_t[]){2, 3, 9, 7}, 4, &p));
        if (mode & 2) x = NBT_CHECK(nb_contiguous_format(x, NB_CHANNELS_LAST));
        NBT_OK(nb_tensor_set_requires_grad(x, true));
        nb_tensor *fused = NBT_CHECK(nb_module_forward(m, x)), *h = x;
        for (int i = 0; i < 3; i++) {
            char key[4] = {(char)('0' + i), 0};
            h = NBT_CHECK(nb_module_forward(nb_module_get_module(m, key), h));
        }
        assert_string_equal(nb_tensor_grad_fn_name(fused), "BatchNormBackward0");
        assert_string_equal(nb_tensor_grad_fn_name(h), nb_tensor_grad_fn_name(NBT_CHECK(nb_relu(x))));
        nbt_assert_close(fused, h, 0, 0, "Sequential BN + ReLU fused vs unfused: out");
        nb_tensor *gout = NBT_CHECK(nb_randn_like(h)), *ga[4], *gb[4];
        grads_of(m, x, fused, gout, ga);
        NBT_OK(nb_tensor_set_grad(x, NULL));
        grads_of(m, x, h, gout, gb);
        for (int i = 0; i < 4; i++) nbt_assert_close(ga[i], gb[i], 0, 0, "Sequential BN + ReLU fused vs unfused: grads");
        nb_module_free(m);
        nb_scope_end(s);
    }
}

/* A module typed "ReLU" that doubles its input: Sequential must not take it for a ReLU. */
static nb_tensor *twice_forward(nb_module *self, nb_tensor *x) { return (void)self, nb_mul_scalar(x, 2); }
static const nb_module_funcs twice_funcs = {"ReLU", twice_forward, NULL};

/* Sequential runs Conv2d + ReLU as one fused convolution (one node: the output's grad_fn is the
 * convolution's): the same output and gradients as running the children one by one, and the
 * same state_dict names. */
static void test_sequential_fusion(void **state)
{
    (void)state;
    for (int d = 0; d < 2; d++) {
        nb_scope *s = nb_scope_begin();
        nb_dtype dt = d ? NB_FLOAT64 : NB_FLOAT32;
        double tol = d ? 1e-12 : 1e-6;
        nb_module *m = NBT_CHECK(make("seq_conv_relu", dt));
        const char *names[4];
        assert_int_equal(nb_module_named_parameters(m, names, NULL, 4), 3);
        assert_string_equal(names[0], "0.weight");
        assert_string_equal(names[1], "0.bias");
        assert_string_equal(names[2], "3.weight");
        nb_tensor_params p = nb_tensor_params_default();
        p.dtype = dt;
        nb_tensor *x = NBT_CHECK(nb_randn((int64_t[]){2, 3, 8, 8}, 4, &p));
        NBT_OK(nb_tensor_set_requires_grad(x, true));
        nb_tensor *fused = NBT_CHECK(nb_module_forward(m, x));
        nb_tensor *h = x;
        for (int i = 0; i < 5; i++) {
            char key[4] = {(char)('0' + i), 0};
            h = NBT_CHECK(nb_module_forward(nb_module_get_module(m, key), h));
        }
        nb_tensor *w0 = nb_module_get_parameter(nb_module_get_module(m, "0"), "weight");
        nb_tensor *conv = NBT_CHECK(nb_conv2d(x, w0, NULL, NULL));
        assert_string_equal(nb_tensor_grad_fn_name(fused), nb_tensor_grad_fn_name(conv));
        assert_string_equal(nb_tensor_grad_fn_name(h), nb_tensor_grad_fn_name(NBT_CHECK(nb_relu(x))));
        nbt_assert_close(fused, h, tol, tol, "Sequential fused vs unfused: out");
        nb_tensor *gout = NBT_CHECK(nb_randn_like(h)), *ga[4], *gb[4];
        grads_of(m, x, fused, gout, ga);
        NBT_OK(nb_tensor_set_grad(x, NULL));
        grads_of(m, x, h, gout, gb);
        for (int i = 0; i < 4; i++) nbt_assert_close(ga[i], gb[i], tol, tol, "Sequential fused vs unfused: grads");
        nb_module_free(m);
        nb_scope_end(s);
    }
    nb_scope *s = nb_scope_begin();
    nb_module *conv = NBT_CHECK(nb_conv2d_module(2, 3, 3, 3, NULL, true, NULL));
    nb_module *k[2] = {conv, NBT_CHECK(nb_module_create(&twice_funcs, NULL))};
    nb_module *seq = NBT_CHECK(nb_sequential(k, 2));
    nb_tensor *x = NBT_CHECK(nb_randn((int64_t[]){1, 2, 5, 5}, 4, NULL));
    nb_tensor *want = NBT_CHECK(nb_mul_scalar(NBT_CHECK(nb_module_forward(conv, x)), 2));
    nbt_assert_close(NBT_CHECK(nb_module_forward(seq, x)), want, 0, 0, "Sequential with a custom \"ReLU\"");
    nb_module_free(seq);
    nb_scope_end(s);
}

static void test_errors(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    NBT_FAILS(nb_conv2d_module(3, 0, 3, 3, NULL, true, NULL) == NULL, NB_ERR_INVALID_ARG, "Conv2d", "out 0", NULL);
    nb_conv2d_params c = nb_conv2d_params_default();
    c.groups = 2;
    NBT_FAILS(nb_conv2d_module(3, 4, 3, 3, &c, true, NULL) == NULL, NB_ERR_INVALID_ARG, "Conv2d", "groups 2", NULL);
    c = nb_conv2d_params_default();
    c.stride[1] = 0;
    NBT_FAILS(nb_conv2d_module(3, 4, 3, 3, &c, true, NULL) == NULL, NB_ERR_INVALID_ARG, "Conv2d", "stride 0", NULL);
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_INT64;
    NBT_FAILS(nb_conv2d_module(3, 4, 3, 3, NULL, true, &p) == NULL, NB_ERR_DTYPE, "Conv2d", "int64", NULL);
    NBT_FAILS(nb_batch_norm2d_module(4, &p) == NULL, NB_ERR_DTYPE, "BatchNorm2d", "int64", NULL);
    NBT_FAILS(nb_batch_norm1d_module(0, NULL) == NULL, NB_ERR_INVALID_ARG, "BatchNorm1d", "got 0", NULL);
    NBT_FAILS(nb_max_pool2d_module(0, 0, 0) == NULL, NB_ERR_INVALID_ARG, "MaxPool2d", "kernel 0", NULL);
    NBT_FAILS(nb_avg_pool2d_module(2, 2, 2) == NULL, NB_ERR_INVALID_ARG, "AvgPool2d", "padding 2", NULL);
    NBT_FAILS(nb_adaptive_avg_pool2d_module(0, 2) == NULL, NB_ERR_INVALID_ARG, "AdaptiveAvgPool2d", "0x2", NULL);
    NBT_FAILS(nb_local_response_norm_module(0, 1e-4, 0.75, 1) == NULL, NB_ERR_INVALID_ARG, "LocalResponseNorm",
              "got 0", NULL);
    int64_t shape[3] = {2, 3, 4};
    nb_tensor *x3 = NBT_CHECK(nb_zeros(shape, 3, NULL));
    nb_tensor *x2 = NBT_CHECK(nb_zeros(shape, 2, NULL));
    nb_module *bn = NBT_CHECK(nb_batch_norm2d_module(3, NULL));
    NBT_FAILS(nb_module_forward(bn, x3) == NULL, NB_ERR_SHAPE, "BatchNorm2d", "4D", "3D", NULL);
    nb_module_free(bn);
    bn = NBT_CHECK(nb_batch_norm1d_module(3, NULL));
    NBT_FAILS(nb_module_forward(bn, nb_reshape(x3, (int64_t[]){24}, 1)) == NULL, NB_ERR_SHAPE, "BatchNorm1d", "1D",
              NULL);
    nb_module_free(bn);
    nb_module *lrn = NBT_CHECK(nb_local_response_norm_module(2, 1e-4, 0.75, 1));
    NBT_FAILS(nb_module_forward(lrn, x2) == NULL, NB_ERR_SHAPE, "LocalResponseNorm", "2D", NULL);
    nb_module_free(lrn);
    nb_scope_end(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layers_pytorch),
        cmocka_unit_test(test_lrn_gradcheck),
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_sequential_fusion),
        cmocka_unit_test(test_sequential_bn_relu_fusion),
        cmocka_unit_test(test_errors),
    };
    return NBT_RUN(tests);
}
