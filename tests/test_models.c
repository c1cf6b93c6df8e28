/* Tests of the model zoo (nabla/models.h) against the PyTorch definitions in
 * tests/ref/cases_models.py: parameter count, the ordered state-dict names and shapes, and the
 * eval-mode output after loading PyTorch's weights (float32, rtol 1e-4 atol 1e-5: deep nets sum
 * thousands of float32 products in different orders); one training-mode step's loss, gradients
 * and buffers in float64; unknown names and too-small inputs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbtest.h"
#include "nabla/models.h" /* until nabla.h includes them */
#include "nabla/layers.h"

typedef struct model_case {
    const char *ref, *name;
    int64_t c, h, w, classes;
} model_case;

static const model_case cases[] = {
    {"mlp", "mlp", 1, 28, 28, 10},         {"lenet5", "lenet5", 1, 28, 28, 10},
    {"lenet5_rgb", "lenet5", 3, 32, 32, 7}, {"cnn", "cnn", 1, 28, 28, 10},
    {"resnet20", "resnet20", 3, 32, 32, 10}, {"resnet56", "resnet56", 3, 32, 32, 10},
};

/* torch's state-dict keys, split from the newline-joined uint8 tensor; returns a malloc'd buffer
 * that names point into. */
static char *ref_names(const nb_tensor_map *m, const char *prefix, char **names, int cap, int *count)
{
    nb_tensor *t = NBT_CHECK(nbt_ref(m, prefix, "names"));
    size_t n = (size_t)nb_tensor_numel(t);
    char *buf = malloc(n + 1);
    assert_non_null(buf);
    NBT_OK(nb_tensor_read(t, buf, n));
    buf[n] = 0;
    *count = 0;
    for (char *tok = strtok(buf, "\n"); tok && *count < cap; tok = strtok(NULL, "\n")) names[(*count)++] = tok;
    return buf;
}

static void run_case(const nb_tensor_map *ref, const model_case *mc)
{
    enum { CAP = 512 };
    char *want[CAP], key[256];
    int nwant = 0;
    char *buf = ref_names(ref, mc->ref, want, CAP, &nwant);
    assert_true(nwant > 0 && nwant < CAP);
    nb_module *net = nb_model_create(mc->name, mc->c, mc->h, mc->w, mc->classes, NULL);
    if (!net) fail_msg("%s: %s", mc->ref, nb_last_error());
    int64_t count = 0;
    NBT_OK(nb_item_int64(NBT_CHECK(nbt_ref(ref, mc->ref, "num_parameters")), &count));
    assert_int_equal(nb_module_num_parameters(net), count);
    /* names, order and shapes; then load torch's weights */
    nb_tensor_map *sd = NBT_CHECK(nb_tensor_map_create());
    NBT_OK(nb_module_state_dict(net, sd));
    assert_int_equal(nb_tensor_map_size(sd), nwant);
    nb_tensor_map *in = NBT_CHECK(nb_tensor_map_create());
    for (int i = 0; i < nwant; i++) {
        if (strcmp(nb_tensor_map_name(sd, i), want[i]))
            fail_msg("%s: key %d is %s, torch has %s", mc->ref, i, nb_tensor_map_name(sd, i), want[i]);
        snprintf(key, sizeof key, "sd/%s", want[i]);
        nb_tensor *t = NBT_CHECK(nbt_ref(ref, mc->ref, key));
        nb_tensor *mine = nb_tensor_map_get(sd, want[i]);
        assert_int_equal(nb_tensor_ndim(mine), nb_tensor_ndim(t));
        assert_memory_equal(nb_tensor_shape(mine), nb_tensor_shape(t), (size_t)nb_tensor_ndim(t) * sizeof(int64_t));
        assert_int_equal(nb_tensor_dtype(mine), nb_tensor_dtype(t));
        NBT_OK(nb_tensor_map_set(in, want[i], t));
    }
    NBT_OK(nb_module_load_state_dict(net, in, true));
    nb_module_train(net, false);
    bool prev = nb_set_grad_enabled(false);
    nb_tensor *y = NBT_CHECK(nb_module_forward(net, NBT_CHECK(nbt_ref(ref, mc->ref, "in0"))));
    nb_set_grad_enabled(prev);
    nbt_assert_close(y, NBT_CHECK(nbt_ref(ref, mc->ref, "out")), 1e-4, 1e-5, mc->ref);
    nb_tensor_map_free(in);
    nb_tensor_map_free(sd);
    nb_module_free(net);
    free(buf);
}

static void test_zoo_pytorch(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_tensor_map *ref = nbt_load_ref("models");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(ref, &cases[i]);
    nb_tensor_map_free(ref);
    nb_scope_end(s);
}

/* One training-mode step against PyTorch in float64 (tests/ref/cases_models.py, TRAIN): batch
 * norm on the batch's statistics, cross entropy, backward; the loss, every parameter's gradient
 * and every buffer afterwards (running statistics, num_batches_tracked). float64 leaves only the
 * summation order: rtol 1e-9. */
static void test_zoo_train_pytorch(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_tensor_map *ref = nbt_load_ref("models");
    int checked = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const model_case *mc = &cases[i];
        if (!strcmp(mc->ref, "cnn") || !strcmp(mc->ref, "resnet56")) continue; /* see cases_models.py */
        nb_tensor_params p = nb_tensor_params_default();
        p.dtype = NB_FLOAT64;
        nb_module *net = NBT_CHECK(nb_model_create(mc->name, mc->c, mc->h, mc->w, mc->classes, &p));
        nb_tensor_map *sd = NBT_CHECK(nb_tensor_map_create()), *in = NBT_CHECK(nb_tensor_map_create());
        NBT_OK(nb_module_state_dict(net, sd));
        char key[256], label[320];
        for (int j = 0; j < nb_tensor_map_size(sd); j++) {
            snprintf(key, sizeof key, "train/sd/%s", nb_tensor_map_name(sd, j));
            NBT_OK(nb_tensor_map_set(in, nb_tensor_map_name(sd, j), NBT_CHECK(nbt_ref(ref, mc->ref, key))));
        }
        NBT_OK(nb_module_load_state_dict(net, in, true));
        nb_module_train(net, true);
        nb_tensor *out = NBT_CHECK(nb_module_forward(net, NBT_CHECK(nbt_ref(ref, mc->ref, "train/in"))));
        nb_tensor *loss = NBT_CHECK(nb_cross_entropy(out, NBT_CHECK(nbt_ref(ref, mc->ref, "train/target")), NULL));
        snprintf(label, sizeof label, "%s: training-mode loss", mc->ref);
        nbt_assert_close(loss, NBT_CHECK(nbt_ref(ref, mc->ref, "train/loss")), 1e-10, 1e-12, label);
        NBT_OK(nb_backward(loss, NULL, 0));
        const char *names[512];
        nb_tensor *ts[512];
        int n = nb_module_named_parameters(net, names, ts, 512);
        assert_true(n > 0 && n < 512);
        for (int j = 0; j < n; j++) {
            snprintf(key, sizeof key, "train/grad/%s", names[j]);
            snprintf(label, sizeof label, "%s: gradient of %s", mc->ref, names[j]);
            nbt_assert_close(NBT_CHECK(nb_tensor_grad(ts[j])), NBT_CHECK(nbt_ref(ref, mc->ref, key)), 1e-9, 1e-11,
                             label);
            checked++;
        }
        n = nb_module_named_buffers(net, names, ts, 512);
        for (int j = 0; j < n; j++) {
            snprintf(key, sizeof key, "train/buf/%s", names[j]);
            snprintf(label, sizeof label, "%s: buffer %s after the step", mc->ref, names[j]);
            nbt_assert_close(ts[j], NBT_CHECK(nbt_ref(ref, mc->ref, key)), 1e-12, 1e-14, label);
        }
        nb_tensor_map_free(in);
        nb_tensor_map_free(sd);
        nb_module_free(net);
    }
    assert_true(checked > 60); /* resnet20 alone has 65 parameters */
    nb_tensor_map_free(ref);
    nb_scope_end(s);
}

/* Each model trains: one step's backward reaches every parameter (training mode, BatchNorm on
 * batch statistics), and the output has [N, classes]. */
static void test_zoo_backward(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const model_case *mc = &cases[i];
        if (!strcmp(mc->name, "resnet56")) continue; /* same code as resnet20, only deeper */
        nb_module *net = NBT_CHECK(nb_model_create(mc->name, mc->c, mc->h, mc->w, mc->classes, NULL));
        int64_t shape[4] = {2, mc->c, mc->h, mc->w};
        nb_tensor *y = NBT_CHECK(nb_module_forward(net, NBT_CHECK(nb_randn(shape, 4, NULL))));
        assert_int_equal(nb_tensor_ndim(y), 2);
        assert_int_equal(nb_tensor_shape(y)[0], 2);
        assert_int_equal(nb_tensor_shape(y)[1], mc->classes);
        NBT_OK(nb_backward(NBT_CHECK(nb_sum(y, NULL, 0, false)), NULL, 0));
        nb_tensor *ps[512];
        int n = nb_module_parameters(net, ps, 512);
        assert_true(n > 0 && n <= 512);
        for (int j = 0; j < n; j++) assert_non_null(nb_tensor_grad(ps[j]));
        nb_module_free(net);
    }
    nb_scope_end(s);
}

static void test_zoo_names_and_errors(void **state)
{
    (void)state;
    /* the five models of this file, then the six DLBench networks (test_dlbench_models.c) */
    const char *names[16];
    assert_int_equal(nb_model_names(NULL, 0), 11);
    assert_int_equal(nb_model_names(names, 2), 11);
    assert_string_equal(names[0], "mlp");
    assert_int_equal(nb_model_names(names, 16), 11);
    assert_string_equal(names[2], "cnn");
    assert_string_equal(names[4], "resnet56");
    for (int i = 0; i < 11; i++) {
        nb_clear_error();
        assert_true(nb_model_create(names[i], 1, 1, 0, 10, NULL) == NULL); /* every name is known: its */
        assert_null(strstr(nb_last_error(), "unknown model"));             /* error is about the size */
    }
    NBT_FAILS(nb_model_create("vgg99", 1, 28, 28, 10, NULL) == NULL, NB_ERR_INVALID_ARG, "unknown model", "vgg99",
              NULL);
    NBT_FAILS(nb_model_create(NULL, 1, 28, 28, 10, NULL) == NULL, NB_ERR_INVALID_ARG, "NULL name", NULL);
    NBT_FAILS(nb_model_create("lenet5", 1, 8, 28, 10, NULL) == NULL, NB_ERR_SHAPE, "lenet5", "8x28", "too small",
              NULL);
    NBT_FAILS(nb_model_create("cnn", 1, 28, 3, 10, NULL) == NULL, NB_ERR_SHAPE, "cnn", "28x3", "too small", NULL);
    NBT_FAILS(nb_model_create("mlp", 1, 28, 28, 0, NULL) == NULL, NB_ERR_INVALID_ARG, "mlp", "classes 0", NULL);
    NBT_FAILS(nb_model_create("resnet20", 0, 32, 32, 10, NULL) == NULL, NB_ERR_INVALID_ARG, "resnet20",
              "channels 0", NULL);
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_INT32;
    NBT_FAILS(nb_model_create("cnn", 1, 28, 28, 10, &p) == NULL, NB_ERR_DTYPE, "int32", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zoo_pytorch),
        cmocka_unit_test(test_zoo_backward),
        cmocka_unit_test(test_zoo_train_pytorch),
        cmocka_unit_test(test_zoo_names_and_errors),
    };
    return NBT_RUN(tests);
}
