/* Tests of the DLBench networks of the model zoo (src/nn/models_dlbench.c) against their PyTorch
 * twins (bench/dlbench/torch_models.py, values from tests/ref/cases_dlbench.py):
 *  - at reduced sizes: parameter count, ordered state-dict names and shapes, the eval-mode output
 *    after loading the twin's weights, and in training mode the loss, a few parameters' gradients
 *    and the BatchNorm buffers' update. Big nets get their weights from a recipe both sides
 *    compute (sin of the flat index, in float64), so the reference file stays small;
 *  - at the spec's sizes: the parameter counts of DLBENCH.md (nabla's and PyTorch's) and the
 *    spatial sizes of the paper's layer tables;
 *  - names and errors for sizes a net cannot take.
 * The comparison with PyTorch runs on the direct convolutions and again on Winograd. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbtest.h"
#include "cpu/dnnl_impl.h"
#include "nabla/layers.h"
#include "nabla/models.h"

/* train_rtol: the training-mode loss's; gradients get 20 times as much. Deep nets in training
 * mode divide by batch statistics of few values: there float32 itself differs from float64 by
 * ~1e-5 (ResNet-50 at 64x64, batch 4: 2e-5 in torch; its deep gradients by a few %, so
 * cases_dlbench.py lists only the head's there). */
typedef struct dl_case {
    const char *ref, *name;
    int64_t c, h, w, classes;
    double train_rtol;
} dl_case;

static const dl_case cases[] = {
    {"fcn_s", "fcn-s", 1, 1, 64, 32, 1e-5},          {"fcn_r", "fcn-r", 1, 28, 28, 10, 1e-5},
    {"alexnet_s", "alexnet-s", 3, 95, 95, 10, 1e-5}, {"alexnet_r", "alexnet-r", 3, 32, 32, 10, 1e-5},
    {"alexnet_r_28", "alexnet-r", 1, 28, 28, 7, 1e-5}, {"resnet_50", "resnet-50", 3, 64, 64, 10, 1e-4},
    {"resnet_56", "resnet-56", 3, 32, 32, 10, 1e-5},
};

/* The newline-joined uint8 list <prefix>/<key>, split; returns the malloc'd buffer the names
 * point into (NULL and *count 0 when the list is absent). */
static char *ref_list(const nb_tensor_map *m, const char *prefix, const char *key, char **names, int cap,
                      int *count)
{
    *count = 0;
    nb_tensor *t = nbt_ref(m, prefix, key);
    if (!t) return NULL;
    size_t n = (size_t)nb_tensor_numel(t);
    char *buf = malloc(n + 1);
    assert_non_null(buf);
    NBT_OK(nb_tensor_read(t, buf, n));
    buf[n] = 0;
    for (char *tok = strtok(buf, "\n"); tok && *count < cap; tok = strtok(NULL, "\n")) names[(*count)++] = tok;
    return buf;
}

/* The reference's recipe weight: float32(sin(((o + 1) (i + 1)) freq + phase) scale + offset) at
 * [o, i] of the weight seen as [shape[0], rest] ([1, n] for vectors), in float64 as the reference
 * computes it. Returns an owned reference (made in its own scope: the float64 temporaries of the
 * big layers are released at once). */
static nb_tensor *recipe_weight(const nb_tensor *recipe, const int64_t *shape, int ndim)
{
    double r[4];
    NBT_OK(nb_tensor_read(recipe, r, sizeof r));
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= shape[i];
    int64_t rows = ndim >= 2 ? shape[0] : 1, o_shape[2] = {rows, 1}, i_shape[2] = {1, numel / rows};
    nb_scope *s = nb_scope_begin();
    nb_tensor_params tp = nb_tensor_params_default();
    tp.dtype = NB_FLOAT64;
    nb_tensor *o = NBT_CHECK(nb_reshape(NBT_CHECK(nb_arange(1, (double)rows + 1, 1, &tp)), o_shape, 2));
    nb_tensor *i = NBT_CHECK(nb_reshape(NBT_CHECK(nb_arange(1, (double)(numel / rows) + 1, 1, &tp)), i_shape, 2));
    nb_tensor *k = NBT_CHECK(nb_mul(o, i));
    NBT_OK(nb_mul_scalar_(k, r[2]));
    NBT_OK(nb_add_scalar_(k, r[3]));
    nb_tensor *v = NBT_CHECK(nb_sin(k));
    NBT_OK(nb_mul_scalar_(v, r[1]));
    NBT_OK(nb_add_scalar_(v, r[0]));
    nb_tensor *w = NBT_CHECK(nb_reshape(NBT_CHECK(nb_to_dtype(v, NB_FLOAT32)), shape, ndim));
    nb_tensor_retain(w);
    nb_scope_end(s);
    return w;
}

/* Checks nabla's state dict against the twin's names and shapes and loads the twin's weights. */
static void load_twin(nb_module *net, const nb_tensor_map *ref, const char *prefix)
{
    enum { CAP = 512 };
    char *want[CAP], key[256];
    int nwant = 0;
    char *buf = ref_list(ref, prefix, "names", want, CAP, &nwant);
    assert_true(nwant > 0 && nwant < CAP);
    nb_tensor_map *sd = NBT_CHECK(nb_tensor_map_create());
    NBT_OK(nb_module_state_dict(net, sd));
    assert_int_equal(nb_tensor_map_size(sd), nwant);
    nb_tensor_map *in = NBT_CHECK(nb_tensor_map_create());
    for (int i = 0; i < nwant; i++) {
        if (strcmp(nb_tensor_map_name(sd, i), want[i]))
            fail_msg("%s: key %d is %s, torch has %s", prefix, i, nb_tensor_map_name(sd, i), want[i]);
        nb_tensor *mine = nb_tensor_map_get(sd, want[i]);
        snprintf(key, sizeof key, "shape/%s", want[i]);
        nb_tensor *shape_t = NBT_CHECK(nbt_ref(ref, prefix, key));
        int ndim = (int)nb_tensor_numel(shape_t);
        int64_t shape[8] = {0};
        assert_true(ndim <= 8);
        if (ndim) NBT_OK(nb_tensor_read(shape_t, shape, (size_t)ndim * sizeof *shape));
        if (nb_tensor_ndim(mine) != ndim || memcmp(nb_tensor_shape(mine), shape, (size_t)ndim * sizeof *shape))
            fail_msg("%s: %s has another shape than torch's", prefix, want[i]);
        snprintf(key, sizeof key, "sd/%s", want[i]);
        nb_tensor *t = nbt_ref(ref, prefix, key);
        if (t) {
            assert_int_equal(nb_tensor_dtype(mine), nb_tensor_dtype(t));
            NBT_OK(nb_tensor_map_set(in, want[i], t));
        } else {
            snprintf(key, sizeof key, "recipe/%s", want[i]);
            nb_tensor *w = recipe_weight(NBT_CHECK(nbt_ref(ref, prefix, key)), shape, ndim);
            NBT_OK(nb_tensor_map_set(in, want[i], w));
            nb_tensor_free(w);
        }
    }
    NBT_OK(nb_module_load_state_dict(net, in, true));
    nb_tensor_map_free(in);
    nb_tensor_map_free(sd);
    free(buf);
}

/* |got - want| <= rtol (|want| + max |want|): gradients mix values of very different sizes. */
static void assert_close_scaled(const nb_tensor *got, const nb_tensor *want, double rtol, const char *what)
{
    double peak = 0;
    NBT_OK(nb_item(NBT_CHECK(nb_max(NBT_CHECK(nb_abs(want)))), &peak));
    assert_true(peak > 0);
    nbt_assert_close(got, want, rtol, rtol * peak, what);
}

/* Compares the tensors listed in <prefix>/<list> (parameters' gradients, or buffers) by name. */
static void check_named(nb_module *net, const nb_tensor_map *ref, const char *prefix, const char *list,
                        bool grads, double rtol)
{
    enum { CAP = 1024 };
    static const char *names[CAP];
    static nb_tensor *ts[CAP];
    char *want[16], key[256], what[300];
    int nwant = 0;
    char *buf = ref_list(ref, prefix, list, want, 16, &nwant);
    if (!nwant) return; /* nets without BatchNorm list no buffers */
    int n = grads ? nb_module_named_parameters(net, names, ts, CAP) : nb_module_named_buffers(net, names, ts, CAP);
    assert_true(n > 0 && n < CAP);
    for (int i = 0; i < nwant; i++) {
        int j = 0;
        while (j < n && strcmp(names[j], want[i])) j++;
        if (j == n) fail_msg("%s: no %s in nabla's net", prefix, want[i]);
        snprintf(key, sizeof key, "%s/%s", grads ? "grad" : "post", want[i]);
        snprintf(what, sizeof what, "%s %s", prefix, key);
        nb_tensor *got = grads ? nb_tensor_grad(ts[j]) : ts[j];
        if (!got) fail_msg("%s: no gradient", what);
        assert_close_scaled(got, NBT_CHECK(nbt_ref(ref, prefix, key)), rtol, what);
    }
    free(buf);
}

/* One case; k scales every tolerance (1: the direct convolutions'). */
static void run_case(const nb_tensor_map *ref, const dl_case *dc, double k)
{
    nb_scope *s = nb_scope_begin();
    nb_module *net = nb_model_create(dc->name, dc->c, dc->h, dc->w, dc->classes, NULL);
    if (!net) fail_msg("%s: %s", dc->ref, nb_last_error());
    int64_t count = 0;
    NBT_OK(nb_item_int64(NBT_CHECK(nbt_ref(ref, dc->ref, "num_parameters")), &count));
    assert_int_equal(nb_module_num_parameters(net), count);
    load_twin(net, ref, dc->ref);
    nb_tensor *x = NBT_CHECK(nbt_ref(ref, dc->ref, "in0"));

    nb_module_train(net, false);
    bool prev = nb_set_grad_enabled(false);
    nb_tensor *y = NBT_CHECK(nb_module_forward(net, x));
    nb_set_grad_enabled(prev);
    char what[64];
    snprintf(what, sizeof what, "%s eval", dc->ref);
    assert_close_scaled(y, NBT_CHECK(nbt_ref(ref, dc->ref, "out")), k * 1e-4, what);

    nb_module_train(net, true);
    y = NBT_CHECK(nb_module_forward(net, x));
    nb_tensor *loss = NBT_CHECK(nb_cross_entropy(y, NBT_CHECK(nbt_ref(ref, dc->ref, "target")), NULL));
    snprintf(what, sizeof what, "%s loss", dc->ref);
    nbt_assert_close(loss, NBT_CHECK(nbt_ref(ref, dc->ref, "loss")), k * dc->train_rtol, 0, what);
    NBT_OK(nb_backward(loss, NULL, 0));
    check_named(net, ref, dc->ref, "gradnames", true, k * 20 * dc->train_rtol);
    check_named(net, ref, dc->ref, "postnames", false, k * 1e-5);
    nb_module_free(net);
    nb_scope_end(s);
}

/* On the direct convolutions, the algorithm behind PyTorch's float32 values. */
static void test_dlbench_pytorch(void **state)
{
    (void)state;
    nb_tensor_map *ref = nbt_load_ref("dlbench");
    NBT_OK(nb_set_conv_algo(NB_CONV_ALGO_DIRECT));
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(ref, &cases[i], 1);
    NBT_OK(nb_set_conv_algo(NB_CONV_ALGO_AUTO));
    nb_tensor_map_free(ref);
}

/* The same with Winograd wherever oneDNN has it (the 3x3 layers of AlexNet-S and the ResNets;
 * nb_set_conv_algo's auto uses a subset of those). Its rounding differs from the direct sums,
 * and the deepest gradients carry it through every layer: ResNet-56's conv1.weight (55 layers,
 * batch norm over 2 images) needed 1.5x the direct tolerances in Release builds, so this allows
 * 3x. On a CPU without oneDNN's Winograd kernels (no AVX-512) this repeats the direct run. */
static void test_dlbench_pytorch_winograd(void **state)
{
    (void)state;
    nb_tensor_map *ref = nbt_load_ref("dlbench");
    NBT_OK(nb_set_conv_algo(NB_CONV_ALGO_WINOGRAD));
    unsigned long long before = nb__dnnl_winograd_runs();
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(ref, &cases[i], 3);
    if (nb__dnnl_winograd_available()) assert_true(nb__dnnl_winograd_runs() > before);
    NBT_OK(nb_set_conv_algo(NB_CONV_ALGO_AUTO));
    nb_tensor_map_free(ref);
}

/* ---- the spec's sizes ------------------------------------------------------------------------ */

static void assert_shape(const nb_tensor *t, int64_t n0, int64_t n1, int64_t n2, int64_t n3, const char *what)
{
    int64_t want[4] = {n0, n1, n2, n3};
    int nd = n2 < 0 ? 2 : 4;
    if (nb_tensor_ndim(t) != nd || memcmp(nb_tensor_shape(t), want, (size_t)nd * sizeof *want))
        fail_msg("%s: got shape [%lld, %lld, ...] of %d dims", what, (long long)nb_tensor_shape(t)[0],
                 (long long)(nb_tensor_ndim(t) > 1 ? nb_tensor_shape(t)[1] : -1), nb_tensor_ndim(t));
}

static nb_tensor *child(nb_module *net, const char *name, nb_tensor *x)
{
    nb_module *m = nb_module_get_module(net, name);
    if (!m) fail_msg("no child %s", name);
    return NBT_CHECK(nb_module_forward(m, x));
}

/* The stages' outputs at 224x224 (ResNet-50) and 32x32 (ResNet-56), as the spec's tables give. */
static void check_resnet_sizes(nb_module *net, bool r50)
{
    static const int64_t want50[4][2] = {{256, 56}, {512, 28}, {1024, 14}, {2048, 7}};
    static const int64_t want56[3][2] = {{16, 32}, {32, 16}, {64, 8}};
    static const char *const layers[4] = {"layer1", "layer2", "layer3", "layer4"};
    static const int64_t k3[2] = {3, 3}, s2[2] = {2, 2}, p1[2] = {1, 1};
    int64_t side = r50 ? 224 : 32, shape[4] = {1, 3, side, side};
    nb_tensor *h = child(net, "conv1", NBT_CHECK(nb_randn(shape, 4, NULL)));
    assert_shape(h, 1, r50 ? 64 : 16, r50 ? 112 : 32, r50 ? 112 : 32, "conv1");
    h = NBT_CHECK(nb_relu(child(net, "bn1", h)));
    if (r50) {
        h = NBT_CHECK(nb_max_pool2d(h, k3, s2, p1, false));
        assert_shape(h, 1, 64, 56, 56, "resnet-50 maxpool");
    }
    for (int i = 0; i < (r50 ? 4 : 3); i++) {
        h = child(net, layers[i], h);
        const int64_t *wv = r50 ? want50[i] : want56[i];
        assert_shape(h, 1, wv[0], wv[1], wv[1], layers[i]);
    }
}

static void check_spec_sizes(nb_module *net, const char *name)
{
    if (!strcmp(name, "resnet-50") || !strcmp(name, "resnet-56")) {
        check_resnet_sizes(net, !strcmp(name, "resnet-50"));
        return;
    }
    bool fc = !strcmp(name, "fcn-s") || !strcmp(name, "fcn-r");
    bool big = !strcmp(name, "alexnet-s");
    int64_t shape[4] = {1, fc ? 1 : 3, !strcmp(name, "fcn-s") ? 1 : big ? 224 : fc ? 28 : 32,
                        !strcmp(name, "fcn-s") ? 26752 : big ? 224 : fc ? 28 : 32};
    nb_tensor *x = NBT_CHECK(nb_randn(shape, 4, NULL));
    int64_t classes = !strcmp(name, "fcn-s") ? 26752 : big ? 1000 : 10;
    if (!fc) {
        /* pool5 256x6x6 = 9216 (alexnet-s), pool3 64x3x3 = 576 (alexnet-r) */
        nb_tensor *f = child(net, "features", x);
        assert_shape(f, 1, big ? 256 : 64, big ? 6 : 3, big ? 6 : 3, name);
    }
    assert_shape(NBT_CHECK(nb_module_forward(net, x)), 1, classes, -1, -1, name);
}

static void test_dlbench_spec(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int64_t c, h, w, classes, params;
    } spec[] = {
        {"fcn-s", 1, 1, 26752, 26752, 117997696}, {"alexnet-s", 3, 224, 224, 1000, 62378344},
        {"resnet-50", 3, 224, 224, 1000, 25557032}, {"fcn-r", 1, 28, 28, 10, 14205962},
        {"alexnet-r", 3, 32, 32, 10, 85098},        {"resnet-56", 3, 32, 32, 10, 855050},
    };
    nb_tensor_map *ref = nbt_load_ref("dlbench");
    for (size_t i = 0; i < sizeof spec / sizeof *spec; i++) {
        nb_scope *s = nb_scope_begin();
        char prefix[64];
        snprintf(prefix, sizeof prefix, "spec/%s", spec[i].name);
        int64_t torch_count = 0;
        NBT_OK(nb_item_int64(NBT_CHECK(nbt_ref(ref, prefix, "num_parameters")), &torch_count));
        assert_int_equal(torch_count, spec[i].params);
        nb_module *net = NBT_CHECK(nb_model_create(spec[i].name, spec[i].c, spec[i].h, spec[i].w,
                                                   spec[i].classes, NULL));
        if (nb_module_num_parameters(net) != spec[i].params)
            fail_msg("%s: %lld parameters, the spec has %lld", spec[i].name,
                     (long long)nb_module_num_parameters(net), (long long)spec[i].params);
        nb_module_train(net, false);
        bool prev = nb_set_grad_enabled(false);
        check_spec_sizes(net, spec[i].name);
        nb_set_grad_enabled(prev);
        nb_module_free(net);
        nb_scope_end(s);
    }
    nb_tensor_map_free(ref);
}

/* ---- names and errors ------------------------------------------------------------------------ */

static void test_dlbench_names_and_errors(void **state)
{
    (void)state;
    static const char *const mine[6] = {"fcn-s", "alexnet-s", "resnet-50", "fcn-r", "alexnet-r", "resnet-56"};
    const char *names[32];
    int n = nb_model_names(names, 32);
    assert_true(n >= 11 && n <= 32);
    for (int i = 0; i < 6; i++) {
        int j = 0;
        while (j < n && strcmp(names[j], mine[i])) j++;
        if (j == n) fail_msg("%s is not in nb_model_names", mine[i]);
    }
    NBT_FAILS(nb_model_create("resnet-57", 3, 32, 32, 10, NULL) == NULL, NB_ERR_INVALID_ARG, "unknown model",
              "resnet-57", "alexnet-s", "resnet-56", NULL);
    NBT_FAILS(nb_model_create("alexnet-s", 3, 62, 224, 1000, NULL) == NULL, NB_ERR_SHAPE, "alexnet-s", "62x224",
              "too small", "63x63", NULL);
    NBT_FAILS(nb_model_create("alexnet-s", 3, 224, 10, 1000, NULL) == NULL, NB_ERR_SHAPE, "224x10", NULL);
    NBT_FAILS(nb_model_create("alexnet-r", 3, 32, 14, 10, NULL) == NULL, NB_ERR_SHAPE, "alexnet-r", "32x14",
              "too small", "15x15", NULL);
    NBT_FAILS(nb_model_create("fcn-s", (int64_t)1 << 30, (int64_t)1 << 30, (int64_t)1 << 30, 10, NULL) == NULL,
              NB_ERR_INVALID_ARG, "fcn-s", "1073741824x1073741824x1073741824", "too large", NULL);
    NBT_FAILS(nb_model_create("fcn-r", 1, 28, 28, 0, NULL) == NULL, NB_ERR_INVALID_ARG, "fcn-r", "classes 0", NULL);
    NBT_FAILS(nb_model_create("resnet-50", 0, 224, 224, 10, NULL) == NULL, NB_ERR_INVALID_ARG, "resnet-50",
              "channels 0", NULL);
    /* the smallest sizes each net takes, and ResNets on odd sizes */
    static const struct {
        const char *name;
        int64_t c, h, w;
    } ok[] = {{"alexnet-s", 3, 63, 63}, {"alexnet-r", 3, 15, 15}, {"resnet-56", 1, 7, 5}, {"resnet-50", 1, 9, 3}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        nb_scope *s = nb_scope_begin();
        nb_module *net = NBT_CHECK(nb_model_create(ok[i].name, ok[i].c, ok[i].h, ok[i].w, 5, NULL));
        int64_t shape[4] = {2, ok[i].c, ok[i].h, ok[i].w};
        nb_tensor *y = NBT_CHECK(nb_module_forward(net, NBT_CHECK(nb_randn(shape, 4, NULL))));
        assert_shape(y, 2, 5, -1, -1, ok[i].name);
        nb_module_free(net);
        nb_scope_end(s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dlbench_pytorch),
        cmocka_unit_test(test_dlbench_pytorch_winograd),
        cmocka_unit_test(test_dlbench_spec),
        cmocka_unit_test(test_dlbench_names_and_errors),
    };
    return NBT_RUN(tests);
}
