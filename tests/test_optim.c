/* Optimizers, lr schedules and gradient clipping against PyTorch (tests/ref/cases_optim.py);
 * state save/load for exact resumption; error paths. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nbtest.h"
#include "nabla/optim.h"
#include "nabla/profiler.h"
#include "optim/optim_impl.h"

#define STEPS 5
#define NPARAM 2

static nb_tensor_map *g_ref;

static double hp_at(const char *case_name, int i)
{
    nb_tensor *hp = NBT_CHECK(nbt_ref(g_ref, case_name, "hp"));
    double v[8];
    assert_true(nb_tensor_numel(hp) <= 8);
    NBT_OK(nb_tensor_read(hp, v, (size_t)nb_tensor_numel(hp) * sizeof(double)));
    return v[i];
}

/* The optimizer a reference case describes (its kind is the case name's first word). */
static nb_optim *make_optim(const char *c, nb_tensor **params)
{
    if (!strncmp(c, "sgd", 3)) {
        nb_sgd_params p = nb_sgd_params_default();
        p.lr = hp_at(c, 0), p.momentum = hp_at(c, 1), p.dampening = hp_at(c, 2);
        p.weight_decay = hp_at(c, 3), p.nesterov = hp_at(c, 4) != 0;
        return nb_optim_sgd(params, NPARAM, &p);
    }
    if (!strncmp(c, "adam", 4)) {
        nb_adam_params p = nb_adam_params_default();
        p.lr = hp_at(c, 0), p.beta1 = hp_at(c, 1), p.beta2 = hp_at(c, 2), p.eps = hp_at(c, 3);
        p.weight_decay = hp_at(c, 4), p.amsgrad = hp_at(c, 5) != 0;
        return !strncmp(c, "adamw", 5) ? nb_optim_adamw(params, NPARAM, &p) : nb_optim_adam(params, NPARAM, &p);
    }
    nb_rmsprop_params p = nb_rmsprop_params_default();
    p.lr = hp_at(c, 0), p.alpha = hp_at(c, 1), p.eps = hp_at(c, 2), p.weight_decay = hp_at(c, 3);
    p.momentum = hp_at(c, 4), p.centered = hp_at(c, 5) != 0;
    return nb_optim_rmsprop(params, NPARAM, &p);
}

static bool is_optim_case(const char *c)
{
    return !strncmp(c, "sgd", 3) || !strncmp(c, "adam", 4) || !strncmp(c, "rmsprop", 7);
}

/* Sets the grads of step s (NULL where the reference has none); noncontig lays them out strided. */
static void set_grads(const char *c, nb_tensor **params, int s, bool noncontig)
{
    for (int i = 0; i < NPARAM; i++) {
        char k[32];
        snprintf(k, sizeof k, "g%d_%d", s, i);
        nb_tensor *g = nbt_ref(g_ref, c, k);
        if (g && noncontig) g = nbt_noncontig(g);
        NBT_OK(nb_tensor_set_grad(params[i], g));
    }
}

static void fresh_params(const char *c, nb_tensor **params)
{
    for (int i = 0; i < NPARAM; i++) {
        char k[8];
        snprintf(k, sizeof k, "p%d", i);
        params[i] = nbt_leaf(NBT_CHECK(nbt_ref(g_ref, c, k)));
    }
}

static void run_case(const char *c, bool noncontig)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor *params[NPARAM];
    fresh_params(c, params);
    nb_optim *opt = NBT_CHECK(make_optim(c, params));
    bool f64 = nb_tensor_dtype(params[0]) == NB_FLOAT64;
    for (int s = 0; s < STEPS; s++) {
        set_grads(c, params, s, noncontig);
        uint64_t v0 = nb_tensor_version(params[0]);
        NBT_OK(nb_optim_step(opt));
        assert_true(nb_tensor_version(params[0]) > v0);
        assert_true(nb_tensor_is_leaf(params[0]));
        for (int i = 0; i < NPARAM; i++) {
            char k[32], what[160];
            snprintf(k, sizeof k, "out%d_%d", s, i);
            snprintf(what, sizeof what, "%s step %d param %d%s", c, s, i, noncontig ? " (strided grads)" : "");
            nbt_assert_close(params[i], NBT_CHECK(nbt_ref(g_ref, c, k)), f64 ? 1e-12 : 1e-5, f64 ? 1e-14 : 1e-6, what);
        }
    }
    nb_optim_free(opt);
    nb_scope_end(sc);
}

static void test_optim_reference(void **state)
{
    char **names;
    int n = nbt_case_names(g_ref, &names), count = 0;
    for (int i = 0; i < n; i++) {
        if (!is_optim_case(names[i])) continue;
        run_case(names[i], false);
        run_case(names[i], true);
        count++;
    }
    nbt_free_names(names, n);
    assert_int_equal(count, 28);
}

/* ---- schedulers -------------------------------------------------------------------------- */

static nb_lr_scheduler *make_sched(const char *name, nb_optim *o)
{
    if (!strcmp(name, "sched_step")) return nb_lr_step(o, 7, 0.5);
    if (!strcmp(name, "sched_multistep")) {
        int64_t ms[] = {5, 12, 12, 20};
        return nb_lr_multistep(o, ms, 4, 0.3);
    }
    if (!strcmp(name, "sched_cosine")) return nb_lr_cosine(o, 10, 0.01);
    if (!strcmp(name, "sched_linear")) return nb_lr_linear(o, 0.25, 1.0, 8);
    if (!strcmp(name, "sched_onecycle_cos")) {
        nb_onecycle_params p = nb_onecycle_params_default(1.0, 31);
        return nb_lr_onecycle(o, &p);
    }
    nb_onecycle_params p = nb_onecycle_params_default(0.5, 40);
    p.pct_start = 0.25, p.anneal = NB_ANNEAL_LINEAR, p.div_factor = 10, p.final_div_factor = 100;
    return nb_lr_onecycle(o, &p);
}

static void test_sched_reference(void **state)
{
    const char *names[] = {"sched_step", "sched_multistep", "sched_cosine", "sched_linear", "sched_onecycle_cos",
                           "sched_onecycle_linear"};
    for (size_t c = 0; c < sizeof names / sizeof *names; c++) {
        nb_scope *sc = nb_scope_begin();
        nb_tensor *p = nbt_leaf(NBT_CHECK(nb_zeros((int64_t[]){1}, 1, NULL)));
        nb_sgd_params sp = nb_sgd_params_default();
        sp.lr = 0.1;
        nb_optim *o = NBT_CHECK(nb_optim_sgd(&p, 1, &sp));
        nb_lr_scheduler *s = NBT_CHECK(make_sched(names[c], o));
        double want[31];
        NBT_OK(nb_tensor_read(NBT_CHECK(nbt_ref(g_ref, names[c], "lrs")), want, sizeof want));
        for (int e = 0; e <= 30; e++) {
            if (e > 0) NBT_OK(nb_lr_scheduler_step(s));
            double got = nb_lr_scheduler_get_last_lr(s);
            if (fabs(got - want[e]) > 1e-12 * fabs(want[e]) + 1e-15)
                fail_msg("%s epoch %d: lr %.17g, torch %.17g", names[c], e, got, want[e]);
            assert_true(nb_optim_get_lr(o) == got);
        }
        nb_lr_scheduler_free(s);
        nb_optim_free(o);
        nb_scope_end(sc);
    }
}

static void test_onecycle_past_end(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor *p = nbt_leaf(NBT_CHECK(nb_zeros((int64_t[]){1}, 1, NULL)));
    nb_optim *o = NBT_CHECK(nb_optim_sgd(&p, 1, NULL));
    nb_onecycle_params op = nb_onecycle_params_default(1.0, 3);
    nb_lr_scheduler *s = NBT_CHECK(nb_lr_onecycle(o, &op));
    for (int i = 0; i < 3; i++) NBT_OK(nb_lr_scheduler_step(s));
    NBT_FAILS(nb_lr_scheduler_step(s) != NB_OK, NB_ERR_INVALID_ARG, "one-cycle", "total_steps is 3", NULL);
    NBT_FAILS(nb_lr_onecycle(o, NULL) == NULL, NB_ERR_INVALID_ARG, "lr_onecycle", NULL);
    op.pct_start = 1.5;
    NBT_FAILS(nb_lr_onecycle(o, &op) == NULL, NB_ERR_INVALID_ARG, "pct_start 1.5", NULL);
    NBT_FAILS(nb_lr_step(o, 0, 0.1) == NULL, NB_ERR_INVALID_ARG, "lr_step", "step_size 0", NULL);
    NBT_FAILS(nb_lr_cosine(o, 0, 0) == NULL, NB_ERR_INVALID_ARG, "lr_cosine", "T_max 0", NULL);
    NBT_FAILS(nb_lr_linear(o, 0, 1, 5) == NULL, NB_ERR_INVALID_ARG, "lr_linear", NULL);
    NBT_FAILS(nb_lr_multistep(NULL, NULL, 0, 0.1) == NULL, NB_ERR_INVALID_ARG, "optimizer is NULL", NULL);
    nb_lr_scheduler_free(s);
    nb_optim_free(o);
    nb_scope_end(sc);
}

/* ---- clipping -------------------------------------------------------------------------------- */

static void test_clip_reference(void **state)
{
    char **names;
    int n = nbt_case_names(g_ref, &names), count = 0;
    for (int c = 0; c < n; c++) {
        bool by_norm = !strncmp(names[c], "clipnorm_", 9);
        if (!by_norm && strncmp(names[c], "clipvalue", 9)) continue;
        nb_scope *sc = nb_scope_begin();
        nb_tensor *params[NPARAM];
        for (int i = 0; i < NPARAM; i++) {
            char k[8];
            snprintf(k, sizeof k, "g%d", i);
            nb_tensor *g = NBT_CHECK(nbt_ref(g_ref, names[c], k));
            params[i] = nbt_leaf(NBT_CHECK(nb_zeros_like(g)));
            NBT_OK(nb_tensor_set_grad(params[i], NBT_CHECK(nb_clone(g))));
        }
        bool f64 = nb_tensor_dtype(params[0]) == NB_FLOAT64;
        if (by_norm) {
            double total = -1, want;
            NBT_OK(nb_clip_grad_norm_(params, NPARAM, hp_at(names[c], 0), hp_at(names[c], 1), &total));
            NBT_OK(nb_item(NBT_CHECK(nbt_ref(g_ref, names[c], "total")), &want));
            if (fabs(total - want) > (f64 ? 1e-12 : 1e-5) * want) fail_msg("%s: total %.17g, torch %.17g", names[c], total, want);
        } else {
            NBT_OK(nb_clip_grad_value_(params, NPARAM, 0.5));
        }
        for (int i = 0; i < NPARAM; i++) {
            char k[8], what[128];
            snprintf(k, sizeof k, "out%d", i);
            snprintf(what, sizeof what, "%s grad %d", names[c], i);
            nbt_assert_close(NBT_CHECK(nb_tensor_grad(params[i])), NBT_CHECK(nbt_ref(g_ref, names[c], k)),
                             f64 ? 1e-12 : 1e-5, f64 ? 1e-15 : 1e-7, what);
        }
        count++;
        nb_scope_end(sc);
    }
    nbt_free_names(names, n);
    assert_int_equal(count, 18);
}

/* clip_grad_norm_ over float32 gradients large enough for its chunked sum of squares (65536 to a
 * chunk, on the threads): the norm against a float64 loop here, the same bits at 1 and 2 threads,
 * the gradients scaled by max_norm / norm, and a NaN anywhere making the norm NaN. */
static void test_clip_large(void **state)
{
    enum { N0 = 300001, N1 = 70000 };
    nb_scope *sc = nb_scope_begin();
    float *x = malloc(sizeof(float) * (N0 + N1));
    assert_non_null(x);
    double want = 0;
    for (int i = 0; i < N0 + N1; i++) {
        x[i] = (float)((i % 1009) - 504) / 97.0f;
        want += (double)x[i] * x[i];
    }
    want = sqrt(want);
    int prev = nb_get_num_threads();
    double totals[2];
    for (int t = 1; t <= 2; t++) {
        NBT_OK(nb_set_num_threads(t));
        nb_tensor *ps[2] = {nbt_leaf(NBT_CHECK(nb_zeros((int64_t[]){N0}, 1, NULL))),
                            nbt_leaf(NBT_CHECK(nb_zeros((int64_t[]){N1}, 1, NULL)))};
        NBT_OK(nb_tensor_set_grad(ps[0], NBT_CHECK(nb_tensor_from_data(x, (int64_t[]){N0}, 1, NULL))));
        NBT_OK(nb_tensor_set_grad(ps[1], NBT_CHECK(nb_tensor_from_data(x + N0, (int64_t[]){N1}, 1, NULL))));
        NBT_OK(nb_clip_grad_norm_(ps, 2, 1.0, 2.0, &totals[t - 1]));
        if (fabs(totals[t - 1] - want) > 1e-12 * want) fail_msg("norm %.17g, want %.17g", totals[t - 1], want);
        const float *g = nb_tensor_data_ptr(NBT_CHECK(nb_tensor_grad(ps[0])));
        for (int i = 0; i < N0; i += 997) {
            double w = x[i] * (1.0 / (want + 1e-6));
            if (fabs(g[i] - w) > 1e-6 * (fabs(w) + 1e-6)) fail_msg("grad[%d] = %g, want %g", i, (double)g[i], w);
        }
    }
    assert_memory_equal(&totals[0], &totals[1], sizeof(double));
    /* a NaN in the last chunk of the second gradient */
    x[N0 + N1 - 3] = NAN;
    nb_tensor *p = nbt_leaf(NBT_CHECK(nb_zeros((int64_t[]){N0 + N1}, 1, NULL)));
    NBT_OK(nb_tensor_set_grad(p, NBT_CHECK(nb_tensor_from_data(x, (int64_t[]){N0 + N1}, 1, NULL))));
    double total = 0;
    NBT_OK(nb_clip_grad_norm_(&p, 1, 1.0, 2.0, &total));
    assert_true(isnan(total));
    NBT_OK(nb_set_num_threads(prev));
    free(x);
    nb_scope_end(sc);
}

static void test_clip_edge_cases(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor *p = nbt_leaf(NBT_CHECK(nb_zeros((int64_t[]){2}, 1, NULL)));
    double total = -1;
    NBT_OK(nb_clip_grad_norm_(&p, 1, 1.0, 2.0, &total)); /* no grad: nothing to do, norm 0 */
    assert_true(total == 0);
    NBT_FAILS(nb_clip_grad_norm_(&p, 1, -1.0, 2.0, &total) != NB_OK, NB_ERR_INVALID_ARG, "clip_grad_norm_",
              "max_norm -1", NULL);
    NBT_FAILS(nb_clip_grad_norm_(&p, 1, 1.0, 0.0, NULL) != NB_OK, NB_ERR_INVALID_ARG, "norm_type 0", NULL);
    NBT_FAILS(nb_clip_grad_value_(&p, 1, -0.5) != NB_OK, NB_ERR_INVALID_ARG, "clip_grad_value_", "-0.5", NULL);
    nb_tensor *null_p = NULL;
    NBT_FAILS(nb_clip_grad_value_(&null_p, 1, 0.5) != NB_OK, NB_ERR_INVALID_ARG, "params[0] is NULL", NULL);
    nb_scope_end(sc);
}

/* The device-side coefficient (nb__clip_coef, what clip_grad_norm_ uses on device gradients when
 * no norm is asked for), here on CPU tensors, against min(1, max_norm / (total + 1e-6)) by hand. */
static void test_clip_coef(void **state)
{
    (void)state;
    nb_scope *sc = nb_scope_begin();
    /* acc = sum |g|^p (max |g| for p = inf), p, max_norm, the coefficient */
    static const double cases[][4] = {
        {100, 2, 5, 5 / (10 + 1e-6)},   /* norm 10: clipped */
        {4, 2, 5, 1},                   /* norm 2: not */
        {0, 2, 5, 1},                   /* no gradient at all */
        {27, 3, 1, 1 / (3 + 1e-6)},     /* p = 3: norm 27^(1/3) = 3 */
        {8, INFINITY, 2, 2 / (8 + 1e-6)}, /* max-abs 8 */
        {INFINITY, 2, 5, 0},            /* an infinite gradient zeroes them all */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        nb_tensor_params tp = nb_tensor_params_default();
        tp.dtype = NB_FLOAT64;
        nb_tensor *acc = NBT_CHECK(nb_full(NULL, 0, cases[i][0], &tp));
        nb_tensor *c = NBT_CHECK(nb__clip_coef(acc, cases[i][1], cases[i][2]));
        double got = 0;
        NBT_OK(nb_item(c, &got));
        if (!(fabs(got - cases[i][3]) <= 1e-12 * fabs(cases[i][3])))
            fail_msg("clip coefficient case %zu: %.17g, expected %.17g", i, got, cases[i][3]);
    }
    nb_tensor_params tp = nb_tensor_params_default();
    tp.dtype = NB_FLOAT64;
    double got = 0;
    NBT_OK(nb_item(NBT_CHECK(nb__clip_coef(NBT_CHECK(nb_full(NULL, 0, NAN, &tp)), 2, 5)), &got));
    assert_true(isnan(got)); /* NaN stays NaN, as on the host path */
    nb_scope_end(sc);
}

/* ---- state: save, load, resume ------------------------------------------------------------ */

/* Runs steps [from, to) of case c on params. */
static void run_steps(const char *c, nb_optim *o, nb_tensor **params, int from, int to)
{
    for (int s = from; s < to; s++) {
        set_grads(c, params, s, false);
        NBT_OK(nb_optim_step(o));
    }
}

static void assert_bit_identical(nb_tensor *a, nb_tensor *b, const char *what)
{
    size_t nbytes = (size_t)nb_tensor_numel(a) * nb_dtype_size(nb_tensor_dtype(a));
    assert_int_equal(nb_tensor_numel(a), nb_tensor_numel(b));
    if (memcmp(nb_tensor_data_ptr(a), nb_tensor_data_ptr(b), nbytes) != 0) fail_msg("%s: not bit-identical", what);
}

static void resume_case(const char *c, const char *path)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor *full[NPARAM], *part[NPARAM], *resumed[NPARAM];
    fresh_params(c, full);
    fresh_params(c, part);
    nb_optim *o_full = NBT_CHECK(make_optim(c, full));
    nb_optim *o_part = NBT_CHECK(make_optim(c, part));
    run_steps(c, o_full, full, 0, STEPS);
    run_steps(c, o_part, part, 0, 3);
    /* the checkpoint: parameters and optimizer state in one file */
    nb_tensor_map *m = NBT_CHECK(nb_tensor_map_create());
    NBT_OK(nb_optim_state_dict(o_part, m, "optim."));
    for (int i = 0; i < NPARAM; i++) {
        char k[16];
        snprintf(k, sizeof k, "model.%d", i);
        NBT_OK(nb_tensor_map_set(m, k, part[i]));
    }
    char key[64];
    snprintf(key, sizeof key, "optim.state.0.%s", !strncmp(c, "sgd", 3) ? "momentum_buffer"
                                                : !strncmp(c, "adam", 4) ? "exp_avg" : "square_avg");
    assert_true(nb_tensor_map_contains(m, key));
    NBT_OK(nb_safetensors_save(m, path));
    nb_optim_free(o_part);
    nb_tensor_map_free(m);

    nb_tensor_map *ld = NULL;
    NBT_OK(nb_safetensors_load(path, nb_cpu(), &ld));
    for (int i = 0; i < NPARAM; i++) {
        char k[16];
        snprintf(k, sizeof k, "model.%d", i);
        resumed[i] = nbt_leaf(NBT_CHECK(nb_tensor_map_get(ld, k)));
    }
    nb_optim *o_res = NBT_CHECK(make_optim(c, resumed));
    NBT_OK(nb_optim_load_state_dict(o_res, ld, "optim."));
    nb_tensor_map_free(ld);
    run_steps(c, o_res, resumed, 3, STEPS);
    for (int i = 0; i < NPARAM; i++) {
        char what[128];
        snprintf(what, sizeof what, "%s resumed param %d", c, i);
        assert_bit_identical(resumed[i], full[i], what);
    }
    nb_optim_free(o_full);
    nb_optim_free(o_res);
    nb_scope_end(sc);
}

static void test_state_roundtrip(void **state)
{
    char path[] = "/tmp/test_optim.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    const char *cases[] = {"sgd_momentum/f32", "sgd_nesterov/f64", "adam_amsgrad/f64", "adamw/f32",
                           "rmsprop_all/f64", "rmsprop_centered/f32"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) resume_case(cases[i], path);
    unlink(path);
}

static void test_sched_state(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor *p = nbt_leaf(NBT_CHECK(nb_zeros((int64_t[]){1}, 1, NULL)));
    nb_optim *a = NBT_CHECK(nb_optim_sgd(&p, 1, NULL)), *b = NBT_CHECK(nb_optim_sgd(&p, 1, NULL));
    nb_lr_scheduler *sa = NBT_CHECK(nb_lr_cosine(a, 7, 0.001)), *sb = NBT_CHECK(nb_lr_cosine(b, 7, 0.001));
    for (int i = 0; i < 4; i++) NBT_OK(nb_lr_scheduler_step(sa));
    nb_tensor_map *m = NBT_CHECK(nb_tensor_map_create());
    NBT_OK(nb_optim_state_dict(a, m, "o."));
    NBT_OK(nb_lr_scheduler_state_dict(sa, m, "s."));
    NBT_OK(nb_optim_load_state_dict(b, m, "o."));
    NBT_OK(nb_lr_scheduler_load_state_dict(sb, m, "s."));
    assert_true(nb_lr_scheduler_get_last_lr(sb) == nb_lr_scheduler_get_last_lr(sa));
    for (int i = 0; i < 12; i++) {
        NBT_OK(nb_lr_scheduler_step(sa));
        NBT_OK(nb_lr_scheduler_step(sb));
        assert_true(nb_lr_scheduler_get_last_lr(sa) == nb_lr_scheduler_get_last_lr(sb));
    }
    NBT_FAILS(nb_lr_scheduler_load_state_dict(sb, m, "x.") != NB_OK, NB_ERR_FORMAT, "missing entry", "x.last_epoch",
              NULL);
    /* counts that are not whole numbers a step can reach (1e30 overflowed the conversion to an
     * integer, found by tests/fuzz), and learning rates no optimizer takes; each leaves sb as it was */
    const struct { const char *key; double v; const char *want; } bad[] = {
        {"s.last_epoch", 1e30, "'s.last_epoch' is 1e+30, not a count in [-1, 2^62]"},
        {"s.last_epoch", NAN, "'s.last_epoch' is nan"},
        {"s.last_epoch", -2, "not a count in [-1, 2^62]"},
        {"s.step_count", 2.5, "'s.step_count' is 2.5, not a count in [0, 2^62]"},
        {"s.base_lr", -0.1, "'s.base_lr' is -0.1, not a learning rate"},
        {"s.base_lr", NAN, "not a learning rate"},
    };
    double before = nb_lr_scheduler_get_last_lr(sb);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        nb_tensor_map *mb = NBT_CHECK(nb_tensor_map_create());
        NBT_OK(nb_lr_scheduler_state_dict(sa, mb, "s."));
        NBT_OK(nb_tensor_map_set(mb, bad[i].key, NBT_CHECK(nb_scalar_tensor(bad[i].v, NULL))));
        NBT_FAILS(nb_lr_scheduler_load_state_dict(sb, mb, "s.") != NB_OK, NB_ERR_FORMAT, "lr_scheduler load_state_dict",
                  bad[i].want, NULL);
        nb_tensor_map_free(mb);
    }
    NBT_OK(nb_lr_scheduler_step(sb));
    NBT_OK(nb_lr_scheduler_step(sa));
    assert_true(nb_lr_scheduler_get_last_lr(sa) == nb_lr_scheduler_get_last_lr(sb) && before > 0);
    nb_tensor_map_free(m);
    nb_lr_scheduler_free(sa);
    nb_lr_scheduler_free(sb);
    nb_optim_free(a);
    nb_optim_free(b);
    nb_scope_end(sc);
}

/* ---- errors and small behaviours ---------------------------------------------------------- */

static void test_bad_params(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor *leaf = nbt_leaf(NBT_CHECK(nb_ones((int64_t[]){3}, 1, NULL)));
    nb_tensor *nonleaf = NBT_CHECK(nb_mul_scalar(leaf, 2.0));
    NBT_FAILS(nb_optim_sgd(&nonleaf, 1, NULL) == NULL, NB_ERR_INVALID_ARG, "optim sgd", "params[0]", "not a leaf", NULL);
    nb_tensor_params ip = nb_tensor_params_default();
    ip.dtype = NB_INT64;
    nb_tensor *ints = NBT_CHECK(nb_zeros((int64_t[]){3}, 1, &ip));
    nb_tensor *two[2] = {leaf, ints};
    NBT_FAILS(nb_optim_adam(two, 2, NULL) == NULL, NB_ERR_DTYPE, "optim adam", "params[1]", "int64", NULL);
    nb_tensor *nograd = NBT_CHECK(nb_zeros((int64_t[]){3}, 1, NULL));
    NBT_FAILS(nb_optim_rmsprop(&nograd, 1, NULL) == NULL, NB_ERR_INVALID_ARG, "does not require grad", NULL);
    NBT_FAILS(nb_optim_sgd(NULL, 0, NULL) == NULL, NB_ERR_INVALID_ARG, "at least one parameter", NULL);
    nb_sgd_params sp = nb_sgd_params_default();
    sp.lr = -0.1;
    NBT_FAILS(nb_optim_sgd(&leaf, 1, &sp) == NULL, NB_ERR_INVALID_ARG, "invalid learning rate -0.1", NULL);
    sp = nb_sgd_params_default();
    sp.nesterov = true;
    NBT_FAILS(nb_optim_sgd(&leaf, 1, &sp) == NULL, NB_ERR_INVALID_ARG, "nesterov requires", NULL);
    nb_adam_params ap = nb_adam_params_default();
    ap.beta1 = 1.0;
    NBT_FAILS(nb_optim_adam(&leaf, 1, &ap) == NULL, NB_ERR_INVALID_ARG, "invalid beta1 1", NULL);
    ap = nb_adamw_params_default();
    ap.beta2 = -0.5;
    NBT_FAILS(nb_optim_adamw(&leaf, 1, &ap) == NULL, NB_ERR_INVALID_ARG, "optim adamw", "invalid beta2 -0.5", NULL);
    ap.beta2 = 0.999;
    ap.eps = -1;
    NBT_FAILS(nb_optim_adamw(&leaf, 1, &ap) == NULL, NB_ERR_INVALID_ARG, "invalid epsilon", NULL);
    nb_rmsprop_params rp = nb_rmsprop_params_default();
    rp.alpha = 1.5;
    NBT_FAILS(nb_optim_rmsprop(&leaf, 1, &rp) == NULL, NB_ERR_INVALID_ARG, "invalid alpha 1.5", NULL);
    nb_optim *o = NBT_CHECK(nb_optim_sgd(&leaf, 1, NULL));
    NBT_FAILS(nb_optim_set_lr(o, -1) != NB_OK, NB_ERR_INVALID_ARG, "invalid learning rate -1", NULL);
    NBT_OK(nb_optim_set_lr(o, 0.5));
    assert_true(nb_optim_get_lr(o) == 0.5);
    NBT_FAILS(nb_optim_step(NULL) != NB_OK, NB_ERR_INVALID_ARG, "optimizer is NULL", NULL);
    nb_optim_free(o);
    nb_optim_free(NULL);
    nb_scope_end(sc);
}

/* zero_grad clears grads; a parameter without grad is left untouched; the optimizer keeps its
 * own reference to the parameters. */
static void test_zero_grad_and_refs(void **state)
{
    nb_tensor *p = nb_ones((int64_t[]){4}, 1, NULL); /* caller-owned: no scope */
    NBT_OK(nb_tensor_set_requires_grad(p, true));
    nb_sgd_params sp = nb_sgd_params_default();
    sp.lr = 0.5;
    nb_optim *o = NBT_CHECK(nb_optim_sgd(&p, 1, &sp));
    nb_scope *sc = nb_scope_begin();
    NBT_OK(nb_tensor_set_grad(p, NBT_CHECK(nb_full((int64_t[]){4}, 1, 2.0, NULL))));
    NBT_OK(nb_optim_zero_grad(o));
    assert_null(nb_tensor_grad(p));
    NBT_OK(nb_optim_step(o)); /* no grad: skipped */
    float v[4];
    NBT_OK(nb_tensor_read(p, v, sizeof v));
    assert_true(v[0] == 1.0f && v[3] == 1.0f);
    NBT_OK(nb_tensor_set_grad(p, NBT_CHECK(nb_full((int64_t[]){4}, 1, 2.0, NULL))));
    nb_scope_end(sc);
    nb_tensor *keep = nb_tensor_retain(p);
    nb_tensor_free(p); /* the optimizer still holds p */
    NBT_OK(nb_optim_step(o));
    NBT_OK(nb_tensor_read(keep, v, sizeof v));
    assert_true(v[0] == 0.0f && v[2] == 0.0f); /* 1 - 0.5 * 2 */
    nb_optim_free(o);
    nb_tensor_free(keep);
}

/* A map from a 2-step Adam run, for corrupting. */
static nb_tensor_map *adam_state(nb_tensor *p, bool amsgrad)
{
    nb_adam_params ap = nb_adam_params_default();
    ap.amsgrad = amsgrad;
    nb_optim *o = NBT_CHECK(nb_optim_adam(&p, 1, &ap));
    NBT_OK(nb_tensor_set_grad(p, NBT_CHECK(nb_full((int64_t[]){2, 3}, 2, 0.5, NULL))));
    NBT_OK(nb_optim_step(o));
    nb_tensor_map *m = NBT_CHECK(nb_tensor_map_create());
    NBT_OK(nb_optim_state_dict(o, m, "opt/"));
    nb_optim_free(o);
    return m;
}

static void test_bad_state_dicts(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor *p = nbt_leaf(NBT_CHECK(nb_ones((int64_t[]){2, 3}, 2, NULL)));
    nb_optim *o = NBT_CHECK(nb_optim_adam(&p, 1, NULL));
    nb_tensor_map *good = adam_state(p, false);
    NBT_FAILS(nb_optim_load_state_dict(o, good, "nope/") != NB_OK, NB_ERR_FORMAT, "missing entry",
              "nope/param_groups.0.lr", NULL);

    nb_tensor_map *m = adam_state(p, false);
    NBT_OK(nb_tensor_map_set(m, "opt/state.0.exp_avg", NBT_CHECK(nb_zeros((int64_t[]){3, 2}, 2, NULL))));
    NBT_FAILS(nb_optim_load_state_dict(o, m, "opt/") != NB_OK, NB_ERR_SHAPE, "opt/state.0.exp_avg", "[3, 2]",
              "[2, 3]", NULL);
    nb_tensor_map_free(m);

    m = adam_state(p, false);
    NBT_OK(nb_tensor_map_set(m, "opt/state.1.step", NBT_CHECK(nb_scalar_tensor(1, NULL))));
    NBT_FAILS(nb_optim_load_state_dict(o, m, "opt/") != NB_OK, NB_ERR_FORMAT, "opt/state.1.step",
              "names no parameter", NULL);
    nb_tensor_map_free(m);

    m = adam_state(p, true); /* amsgrad's state into a plain Adam */
    NBT_FAILS(nb_optim_load_state_dict(o, m, "opt/") != NB_OK, NB_ERR_INVALID_ARG, "opt/param_groups.0.amsgrad", NULL);
    nb_tensor_map_free(m);

    /* a step count without its buffers: build the map by hand */
    m = NBT_CHECK(nb_tensor_map_create());
    const char *hyper[] = {"lr", "eps", "weight_decay", "amsgrad"};
    for (int i = 0; i < 4; i++) {
        char k[64];
        snprintf(k, sizeof k, "param_groups.0.%s", hyper[i]);
        NBT_OK(nb_tensor_map_set(m, k, NBT_CHECK(nb_scalar_tensor(i == 0 ? 1e-3 : 0, NULL))));
    }
    NBT_FAILS(nb_optim_load_state_dict(o, m, NULL) != NB_OK, NB_ERR_FORMAT, "missing entry", "param_groups.0.betas", NULL);
    NBT_OK(nb_tensor_map_set(m, "param_groups.0.betas", NBT_CHECK(nb_zeros((int64_t[]){3}, 1, NULL))));
    NBT_FAILS(nb_optim_load_state_dict(o, m, NULL) != NB_OK, NB_ERR_SHAPE, "param_groups.0.betas", "3 values", NULL);
    NBT_OK(nb_tensor_map_set(m, "param_groups.0.betas", NBT_CHECK(nb_full((int64_t[]){2}, 1, 0.5, NULL))));
    NBT_OK(nb_tensor_map_set(m, "state.0.step", NBT_CHECK(nb_scalar_tensor(2, NULL))));
    NBT_FAILS(nb_optim_load_state_dict(o, m, NULL) != NB_OK, NB_ERR_FORMAT, "missing entry", "state.0.exp_avg", NULL);
    nb_tensor_map_free(m);

    /* values the constructors refuse, and step counts that are not whole numbers a run reaches
     * (1e30 overflowed the conversion to an integer, found by tests/fuzz) */
    const struct { const char *key; int64_t n; double v0, v1; const char *want; } bad[] = {
        {"opt/state.0.step", 0, 1e30, 0, "'opt/state.0.step' is 1e+30, not a step count"},
        {"opt/state.0.step", 0, 2.5, 0, "'opt/state.0.step' is 2.5, not a step count"},
        {"opt/state.0.step", 0, NAN, 0, "not a step count"},
        {"opt/param_groups.0.lr", 0, -1, 0, "'opt/param_groups.0.lr' is -1: lr must be >= 0"},
        {"opt/param_groups.0.eps", 0, NAN, 0, "eps must be >= 0"},
        {"opt/param_groups.0.betas", 2, 0.9, 1.5, "'opt/param_groups.0.betas' is 1.5: betas must be in [0, 1)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        m = adam_state(p, false);
        nb_tensor *v = bad[i].n ? NBT_CHECK(nb_tensor_from_data((double[]){bad[i].v0, bad[i].v1}, &bad[i].n, 1,
                                                                &(nb_tensor_params){.dtype = NB_FLOAT64}))
                                : NBT_CHECK(nb_scalar_tensor(bad[i].v0, NULL));
        NBT_OK(nb_tensor_map_set(m, bad[i].key, v));
        NBT_FAILS(nb_optim_load_state_dict(o, m, "opt/") != NB_OK, NB_ERR_FORMAT, bad[i].want, NULL);
        nb_tensor_map_free(m);
    }
    nb_sgd_params nest = nb_sgd_params_default();
    nest.momentum = 0.9;
    nest.nesterov = true;
    nb_optim *sn = NBT_CHECK(nb_optim_sgd(&p, 1, &nest));
    m = NBT_CHECK(nb_tensor_map_create());
    NBT_OK(nb_optim_state_dict(sn, m, NULL));
    NBT_OK(nb_tensor_map_set(m, "param_groups.0.dampening", NBT_CHECK(nb_scalar_tensor(0.5, NULL))));
    NBT_FAILS(nb_optim_load_state_dict(sn, m, NULL) != NB_OK, NB_ERR_FORMAT, "dampening' is 0.5, but nesterov needs 0",
              NULL);
    nb_tensor_map_free(m);
    nb_optim_free(sn);

    nb_optim *s = NBT_CHECK(nb_optim_sgd(&p, 1, NULL));
    NBT_FAILS(nb_optim_load_state_dict(s, good, "opt/") != NB_OK, NB_ERR_INVALID_ARG, "adam optimizer", "sgd", NULL);
    NBT_FAILS(nb_optim_load_state_dict(o, NULL, "opt/") != NB_OK, NB_ERR_INVALID_ARG, "map is NULL", NULL);
    /* a failed load changed nothing: the good map still loads, and the lr comes from it */
    NBT_OK(nb_optim_set_lr(o, 0.25));
    NBT_OK(nb_optim_load_state_dict(o, good, "opt/"));
    assert_true(nb_optim_get_lr(o) == 1e-3);
    nb_tensor_map_free(good);
    nb_optim_free(s);
    nb_optim_free(o);
    nb_scope_end(sc);
}

static int load_ref(void **state)
{
    g_ref = nbt_load_ref("optim");
    return g_ref ? 0 : -1;
}

/* ---- the step in backward ------------------------------------------------------------------ */

enum { BW_NP = 10 };

/* A small graph over params p: linear weight p0 and bias p1; p2 the right operand of an mm; p3 the
 * left matrix of an addmm whose input is p4 (broadcast); p5 used twice (matmul, 3-D by 2-D); p6
 * the left operand of an mm; p7 reached through a view (a transpose); p8 @ p9, both leaves. The
 * loss is a sum of squares. `alias`: the linear's input is p0 itself (detached), so its weight gradient reads the
 * weight. */
static nb_tensor *bw_loss(nb_tensor **p, const nb_tensor *x, bool alias)
{
    nb_tensor *h = alias ? nb_linear(nb_detach(p[0]), p[0], p[1]) : nb_linear(x, p[0], p[1]); /* [4, 4] */
    h = nb_tanh(h);
    h = nb_mm(h, p[2]);                           /* [4, 3] */
    h = nb_addmm(p[4], p[3], h, 0.5, 0.75);       /* [2, 3] */
    int64_t s3[3] = {1, 2, 3};
    h = nb_reshape(nb_sigmoid(h), s3, 3);
    h = nb_matmul(nb_matmul(h, p[5]), p[5]);      /* [1, 2, 3] */
    int64_t s2[2] = {2, 3};
    h = nb_mm(p[6], nb_reshape(h, s2, 2));        /* [3, 3] */
    h = nb_mm(h, nb_transpose(p[7], 0, 1));       /* [3, 2] */
    nb_tensor *h2 = nb_mm(p[8], p[9]);           /* [2, 2] */
    return nb_add(nb_sum(nb_mul(h, h), NULL, 0, false), nb_sum(nb_mul(h2, h2), NULL, 0, false));
}

static nb_optim *bw_optim(int kind, nb_tensor **p)
{
    if (kind == 2) {
        nb_adam_params ap = nb_adam_params_default();
        ap.lr = 0.05, ap.weight_decay = 0.01;
        return nb_optim_adam(p, BW_NP, &ap);
    }
    nb_sgd_params sp = nb_sgd_params_default();
    sp.lr = 0.1;
    if (kind == 1) sp.momentum = 0.9, sp.weight_decay = 0.01, sp.nesterov = true;
    return nb_optim_sgd(p, BW_NP, &sp);
}

/* Three steps of an optimizer that steps in backward against the same optimizer stepping after
 * backward (whose updates are checked against PyTorch above), from the same values. kind: 0 plain
 * SGD (the products go straight into p0, p2, p3, p6 and p8), 1 SGD with momentum, weight decay and
 * Nesterov, 2 Adam. */
static void bw_case(int kind, nb_dtype dt, bool alias)
{
    nb_scope *sc = nb_scope_begin();
    static const int64_t shapes[BW_NP][2] = {{4, 5}, {4, 0}, {4, 3}, {2, 4}, {3, 0},
                                             {3, 3}, {3, 2}, {2, 3}, {2, 3}, {3, 2}};
    nb_tensor_params tp = nb_tensor_params_default();
    tp.dtype = dt;
    nb_manual_seed(7);
    nb_tensor *x = NBT_CHECK(nb_randn((int64_t[]){4, 5}, 2, &tp)), *a[BW_NP], *b[BW_NP];
    for (int i = 0; i < BW_NP; i++) {
        int nd = shapes[i][1] ? 2 : 1;
        nb_tensor *v = NBT_CHECK(nb_randn(shapes[i], nd, &tp));
        a[i] = nbt_leaf(nb_mul_scalar(v, 0.5));
        b[i] = nbt_leaf(a[i]);
    }
    if (alias) a[0] = nbt_leaf(NBT_CHECK(nb_randn((int64_t[]){4, 4}, 2, &tp))), b[0] = nbt_leaf(a[0]);
    nb_optim *oa = NBT_CHECK(bw_optim(kind, a)), *ob = NBT_CHECK(bw_optim(kind, b));
    NBT_OK(nb_optim_step_in_backward(ob, true));
    for (int s = 0; s < 3; s++) {
        NBT_OK(nb_backward(NBT_CHECK(bw_loss(a, x, alias)), NULL, 0));
        NBT_OK(nb_optim_step(oa));
        NBT_OK(nb_optim_zero_grad(oa));
        uint64_t v0 = nb_tensor_version(b[0]);
        NBT_OK(nb_profiler_start(NB_PROFILE_HOST));
        NBT_OK(nb_backward(NBT_CHECK(bw_loss(b, x, alias)), NULL, 0));
        nb_profiler_stop();
        /* every parameter had its update in backward, and no gradient is left */
        int64_t general = kind == 0 ? (alias ? 6 : 5) : BW_NP;
        assert_int_equal(nbt_profiled_calls("optimizer_step"), general);
        assert_true(nb_tensor_version(b[0]) > v0);
        for (int i = 0; i < BW_NP; i++) assert_null(nb_tensor_grad(b[i]));
        NBT_OK(nb_optim_step(ob)); /* no grads: nothing */
        for (int i = 0; i < BW_NP; i++) {
            char what[96];
            snprintf(what, sizeof what, "step in backward, kind %d%s, step %d, param %d", kind,
                     alias ? " (aliased input)" : "", s, i);
            nbt_assert_close(b[i], a[i], dt == NB_FLOAT64 ? 1e-12 : 2e-5, dt == NB_FLOAT64 ? 1e-13 : 1e-6, what);
        }
    }
    nb_optim_free(oa);
    nb_optim_free(ob);
    nb_scope_end(sc);
}

static void test_step_in_backward(void **state)
{
    for (int kind = 0; kind < 3; kind++) {
        bw_case(kind, NB_FLOAT64, false);
        bw_case(kind, NB_FLOAT32, false);
    }
    bw_case(0, NB_FLOAT64, true);
}

/* Turning it off, a parameter in two such optimizers, a grad already set, a kept graph. */
static void test_step_in_backward_rules(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor *w = nbt_leaf(NBT_CHECK(nb_full((int64_t[]){2, 2}, 2, 1.0, NULL)));
    nb_tensor *x = NBT_CHECK(nb_full((int64_t[]){1, 2}, 2, 1.0, NULL));
    nb_sgd_params sp = nb_sgd_params_default();
    sp.lr = 0.5;
    nb_optim *o = NBT_CHECK(nb_optim_sgd(&w, 1, &sp)), *o2 = NBT_CHECK(nb_optim_sgd(&w, 1, &sp));
    NBT_OK(nb_optim_step_in_backward(o, true));
    NBT_OK(nb_optim_step_in_backward(o, true)); /* again: no change */
    NBT_FAILS(nb_optim_step_in_backward(o2, true) != NB_OK, NB_ERR_INVALID_ARG, "step_in_backward", "params[0]",
              "another optimizer", NULL);
    NBT_FAILS(nb_optim_step_in_backward(NULL, true) != NB_OK, NB_ERR_INVALID_ARG, "NULL", NULL);
    nb_tensor *u = nbt_leaf(x), *two[2] = {u, u};
    nb_optim *o3 = NBT_CHECK(nb_optim_sgd(two, 2, &sp));
    NBT_FAILS(nb_optim_step_in_backward(o3, true) != NB_OK, NB_ERR_INVALID_ARG, "params[1] is params[0]", NULL);
    nb_optim_free(o3);

    /* sum(x @ w^T) has d/dw = 1 everywhere: with a grad of 1 already set, w steps by 2 * 0.5 */
    NBT_OK(nb_tensor_set_grad(w, NBT_CHECK(nb_full((int64_t[]){2, 2}, 2, 1.0, NULL))));
    NBT_OK(nb_backward(NBT_CHECK(nb_sum(nb_linear(x, w, NULL), NULL, 0, false)), NULL, 0));
    float v[4];
    NBT_OK(nb_tensor_read(w, v, sizeof v));
    assert_true(v[0] == 0.0f && v[3] == 0.0f);
    assert_null(nb_tensor_grad(w));

    /* a kept graph that saved w cannot run again once w has stepped */
    nb_tensor *loss = NBT_CHECK(nb_sum(nb_linear(w, w, NULL), NULL, 0, false));
    NBT_OK(nb_backward(loss, NULL, NB_RETAIN_GRAPH));
    NBT_FAILS(nb_backward(loss, NULL, 0) != NB_OK, NB_ERR_AUTOGRAD, "modified by an in-place operation",
              "shape [2, 2]", "saved by linear", "version 2, expected 1", NULL);

    /* backward's own gradient is a weight's storage (detached): the product reads it, so it cannot
     * be written into the weight (large enough that the GEMM reads its operands block by block,
     * after writing some of the result); the update is still u - lr g^T x with the old u as g */
    nb_manual_seed(3);
    nb_tensor *u6 = nbt_leaf(NBT_CHECK(nb_randn((int64_t[]){600, 600}, 2, NULL)));
    nb_tensor *x6 = NBT_CHECK(nb_randn((int64_t[]){600, 600}, 2, NULL));
    nb_optim *ov = NBT_CHECK(nb_optim_sgd(&u6, 1, &sp));
    NBT_OK(nb_optim_step_in_backward(ov, true));
    nb_tensor *u0 = NBT_CHECK(nb_clone(nb_detach(u6)));
    nb_tensor *want = NBT_CHECK(nb_sub(u0, nb_mul_scalar(nb_mm(nb_transpose(u0, 0, 1), x6), 0.5)));
    NBT_OK(nb_backward(NBT_CHECK(nb_linear(x6, u6, NULL)), nb_detach(u6), 0));
    nbt_assert_close(u6, want, 1e-4, 1e-3, "step in backward with the gradient in the weight's storage");
    nb_optim_free(ov);

    /* off: backward leaves the grad, and the step is nb_optim_step's again */
    NBT_OK(nb_optim_step_in_backward(o, false));
    NBT_OK(nb_tensor_read(w, v, sizeof v));
    NBT_OK(nb_backward(NBT_CHECK(nb_sum(nb_linear(x, w, NULL), NULL, 0, false)), NULL, 0));
    assert_non_null(nb_tensor_grad(w));
    float v2[4];
    NBT_OK(nb_tensor_read(w, v2, sizeof v2));
    assert_true(v2[0] == v[0]);
    NBT_OK(nb_optim_step(o));
    NBT_OK(nb_tensor_read(w, v2, sizeof v2));
    assert_true(v2[0] == v[0] - 0.5f);

    /* freeing an optimizer lets another one take the parameter */
    NBT_OK(nb_optim_step_in_backward(o, true));
    nb_optim_free(o);
    NBT_OK(nb_optim_step_in_backward(o2, true));
    nb_optim_free(o2);
    nb_scope_end(sc);
}

static int free_ref(void **state)
{
    nb_tensor_map_free(g_ref);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_optim_reference), cmocka_unit_test(test_sched_reference),
        cmocka_unit_test(test_onecycle_past_end), cmocka_unit_test(test_clip_reference),
        cmocka_unit_test(test_clip_edge_cases), cmocka_unit_test(test_clip_large), cmocka_unit_test(test_clip_coef),
        cmocka_unit_test(test_state_roundtrip),
        cmocka_unit_test(test_sched_state), cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_zero_grad_and_refs), cmocka_unit_test(test_bad_state_dicts),
        cmocka_unit_test(test_step_in_backward), cmocka_unit_test(test_step_in_backward_rules),
    };
    return NBT_RUN_GROUP(tests, load_ref, free_ref);
}
