/* A whole training run in miniature against PyTorch (tests/ref/cases_train_mini.py): the zoo's
 * "cnn" for 1x12x12 images (conv, batch norm in training mode, ReLU, max pool, flatten, linear,
 * cross entropy), started from PyTorch's initial state dict loaded from the reference safetensors
 * file, trained for 20 steps on PyTorch's batches with SGD-with-momentum (plain, and nesterov with
 * weight decay), Adam and AdamW. Every step's loss agrees with PyTorch's to 1e-4 relative, at 1
 * and at 2 threads (measured: at most 1e-6); the final parameters and batch-norm buffers agree to
 * the tolerances explained at final_tolerance. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nbtest.h"
#include "nabla/models.h"

#define STEPS 20
#define LOSS_RTOL 1e-4
#define MAX_PARAMS 32

static nb_tensor_map *g_ref;

/* The entries of g_ref under prefix, with the prefix cut off (so "init/features.0.weight" becomes
 * "features.0.weight"). Call inside a scope. */
static nb_tensor_map *sub_map(const char *prefix)
{
    nb_tensor_map *m = NBT_CHECK(nb_tensor_map_create());
    size_t len = strlen(prefix);
    for (int i = 0; i < nb_tensor_map_size(g_ref); i++) {
        const char *k = nb_tensor_map_name(g_ref, i);
        if (!strncmp(k, prefix, len)) NBT_OK(nb_tensor_map_set(m, k + len, NBT_CHECK(nb_tensor_map_get(g_ref, k))));
    }
    assert_true(nb_tensor_map_size(m) > 0);
    return m;
}

/* The zoo's cnn with PyTorch's initial weights. Its Dropout(0.25) (classifier.3) is replaced by
 * Dropout(0), as in the Python side: the two libraries' random masks cannot match. */
static nb_module *make_net(void)
{
    nb_module *net = NBT_CHECK(nb_model_create("cnn", 1, 12, 12, 10, NULL));
    nb_module *cl = NBT_CHECK(nb_module_get_module(net, "classifier"));
    assert_string_equal(nb_module_type_name(NBT_CHECK(nb_module_get_module(cl, "3"))), "Dropout");
    NBT_OK(nb_module_register_module(cl, "3", NBT_CHECK(nb_dropout_module(0.0))));
    nb_tensor_map *init = sub_map("init/");
    NBT_OK(nb_module_load_state_dict(net, init, true));
    nb_tensor_map_free(init);
    return net;
}

static double hp_at(const char *run, int i)
{
    nb_tensor *hp = NBT_CHECK(nbt_ref(g_ref, run, "hp"));
    double v[4];
    assert_true(nb_tensor_numel(hp) > i && nb_tensor_numel(hp) <= 4);
    NBT_OK(nb_tensor_read(hp, v, (size_t)nb_tensor_numel(hp) * sizeof(double)));
    return v[i];
}

/* The optimizer of a run (kind: the run name's first word; hyper-parameters from `<run>/hp`). */
static nb_optim *make_optim(const char *run, nb_module *net)
{
    nb_tensor *ps[MAX_PARAMS];
    int n = nb_module_parameters(net, ps, MAX_PARAMS);
    assert_true(n > 0 && n <= MAX_PARAMS);
    if (!strncmp(run, "sgd", 3)) {
        nb_sgd_params p = nb_sgd_params_default();
        p.lr = hp_at(run, 0), p.momentum = hp_at(run, 1), p.weight_decay = hp_at(run, 2);
        p.nesterov = hp_at(run, 3) != 0;
        return NBT_CHECK(nb_optim_sgd(ps, n, &p));
    }
    bool adamw = !strncmp(run, "adamw", 5);
    nb_adam_params p = adamw ? nb_adamw_params_default() : nb_adam_params_default();
    p.lr = hp_at(run, 0), p.weight_decay = hp_at(run, 1);
    return NBT_CHECK(adamw ? nb_optim_adamw(ps, n, &p) : nb_optim_adam(ps, n, &p));
}

/* STEPS training steps on PyTorch's batches; writes each step's loss (before its update). */
static void train(nb_module *net, nb_optim *opt, double *losses)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor *x = NBT_CHECK(nbt_ref(g_ref, "data", "x")), *y = NBT_CHECK(nbt_ref(g_ref, "data", "y"));
    assert_int_equal(nb_tensor_shape(x)[0], STEPS);
    for (int s = 0; s < STEPS; s++) {
        nb_scope *st = nb_scope_begin();
        NBT_OK(nb_optim_zero_grad(opt));
        nb_tensor *logits = NBT_CHECK(nb_module_forward(net, NBT_CHECK(nb_select(x, 0, s))));
        nb_tensor *loss = NBT_CHECK(nb_cross_entropy(logits, NBT_CHECK(nb_select(y, 0, s)), NULL));
        NBT_OK(nb_item(loss, &losses[s]));
        NBT_OK(nb_backward(loss, NULL, 0));
        NBT_OK(nb_optim_step(opt));
        nb_scope_end(st);
    }
    nb_scope_end(sc);
}

/* Every step's loss within LOSS_RTOL of PyTorch's; prints the largest relative difference. */
static void check_losses(const char *run, int threads, const double *got)
{
    double want[STEPS], worst = 0;
    nb_tensor *w = NBT_CHECK(nbt_ref(g_ref, run, "loss"));
    assert_int_equal(nb_tensor_numel(w), STEPS);
    NBT_OK(nb_tensor_read(w, want, sizeof want));
    for (int s = 0; s < STEPS; s++) {
        double rel = fabs(got[s] - want[s]) / fabs(want[s]);
        if (!(rel <= LOSS_RTOL))
            fail_msg("%s (%d threads): step %d loss %.9g, PyTorch %.9g (relative difference %.3g > %g)", run,
                     threads, s, got[s], want[s], rel, LOSS_RTOL);
        worst = fmax(worst, rel);
    }
    print_message("%s (%d threads): %d losses %.6f .. %.6f, max relative difference %.2g\n", run, threads, STEPS,
                  got[0], got[STEPS - 1], worst);
}

/* The tolerance of the final state-dict entry `key` after a run, for |nabla - torch| <= atol +
 * rtol |torch|. SGD's step is proportional to the gradient, so float32 rounding stays small:
 * measured up to 2.4e-6 (a BN running mean of magnitude 2), hence rtol 1e-4, atol 1e-5.
 * Adam and AdamW divide each gradient coordinate by its own running RMS, so a coordinate whose
 * gradient is not much larger than its rounding error moves by up to about lr per step in a
 * direction that rounding decides (PyTorch in float64 and PyTorch in float32 differ just as much
 * as nabla and PyTorch do, measured for every entry):
 *  - the biases of the convolutions that feed batch norm (features.0.bias, features.4.bias) have
 *    a gradient that is exactly zero in exact arithmetic (batch norm subtracts the batch mean);
 *    computed, it is rounding noise (1e-17 in float64, 2e-8 in float32, against 1e-2 for the
 *    other weights), which Adam turns into steps of about +-lr. Their values, and the running means they enter (features.1 and
 *    features.5.running_mean), are set by rounding alone: nabla and torch differ by up to 5.9e-3
 *    (torch f64 against torch f32: 4.3e-3). Only the scale is checked: atol STEPS * lr (0.02).
 *  - everything else: up to 2.1e-5 (torch f64 against f32: 2.0e-5) where a gradient nearly
 *    cancels, e.g. in classifier.1.weight: atol lr / 10, rtol 1e-4. */
static void final_tolerance(const char *run, const char *key, double *rtol, double *atol)
{
    static const char *const noise[] = {"features.0.bias", "features.4.bias", "features.1.running_mean",
                                        "features.5.running_mean"};
    *rtol = 1e-4, *atol = 1e-5;
    if (strncmp(run, "adam", 4)) return;
    double lr = hp_at(run, 0);
    *atol = lr / 10;
    for (size_t i = 0; i < sizeof noise / sizeof *noise; i++)
        if (!strcmp(key, noise[i])) *rtol = 0, *atol = STEPS * lr;
}

/* The parameters and batch-norm buffers after the run against PyTorch's (same keys, shapes and
 * dtypes; num_batches_tracked exactly STEPS). */
static void check_final(const char *run, nb_module *net)
{
    nb_scope *sc = nb_scope_begin();
    char prefix[64], what[160];
    snprintf(prefix, sizeof prefix, "%s/final/", run);
    nb_tensor_map *want = sub_map(prefix), *got = NBT_CHECK(nb_tensor_map_create());
    NBT_OK(nb_module_state_dict(net, got));
    assert_int_equal(nb_tensor_map_size(got), nb_tensor_map_size(want));
    for (int i = 0; i < nb_tensor_map_size(want); i++) {
        const char *k = nb_tensor_map_name(want, i);
        if (!nb_tensor_map_contains(got, k)) fail_msg("%s: nabla's state dict has no %s", run, k);
        nb_tensor *w = NBT_CHECK(nb_tensor_map_get(want, k)), *g = NBT_CHECK(nb_tensor_map_get(got, k));
        assert_int_equal(nb_tensor_dtype(g), nb_tensor_dtype(w));
        double rtol, atol;
        final_tolerance(run, k, &rtol, &atol);
        snprintf(what, sizeof what, "%s: final %s", run, k);
        nbt_assert_close(g, w, rtol, atol, what);
        if (strstr(k, "num_batches_tracked")) {
            int64_t count = 0;
            NBT_OK(nb_item_int64(g, &count));
            assert_int_equal(count, STEPS);
        }
    }
    nb_tensor_map_free(want);
    nb_tensor_map_free(got);
    nb_scope_end(sc);
}

/* Trains the run at 1 thread (losses and final state) and at 2 threads (losses). */
static void run_case(const char *run)
{
    nb_scope *sc = nb_scope_begin();
    int threads0 = nb_get_num_threads();
    for (int threads = 1; threads <= 2; threads++) {
        NBT_OK(nb_set_num_threads(threads));
        nb_module *net = make_net();
        nb_optim *opt = make_optim(run, net);
        double losses[STEPS];
        train(net, opt, losses);
        check_losses(run, threads, losses);
        if (threads == 1) check_final(run, net);
        nb_optim_free(opt);
        nb_module_free(net);
    }
    NBT_OK(nb_set_num_threads(threads0));
    nb_scope_end(sc);
}

static void test_sgd_momentum(void **state)
{
    (void)state;
    run_case("sgd");
}

static void test_sgd_nesterov_weight_decay(void **state)
{
    (void)state;
    run_case("sgd_nesterov_wd");
}

static void test_adam(void **state)
{
    (void)state;
    run_case("adam");
}

static void test_adamw(void **state)
{
    (void)state;
    run_case("adamw");
}

int main(void)
{
    g_ref = nbt_load_ref("train_mini");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_momentum),
        cmocka_unit_test(test_sgd_nesterov_weight_decay),
        cmocka_unit_test(test_adam),
        cmocka_unit_test(test_adamw),
    };
    int rc = NBT_RUN(tests);
    nb_tensor_map_free(g_ref);
    return rc;
}
