/* The op profiler: counts per op name against the ops a program runs (counted by hand), the
 * optimizer step as one row with the ops inside it not counted twice, start/stop/reset, the
 * rows adding up to at most the wall time, the printed table and the bad-argument errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nbtest.h"

static int find(const nb_profile_entry *e, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(e[i].name, name)) return i;
    return -1;
}

static nb_tensor *ones(int64_t n, bool grad)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.requires_grad = grad;
    return NBT_CHECK(nb_ones((int64_t[]){n}, 1, &p));
}

static void test_counts_and_reset(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *a = ones(1000, false), *b = ones(1000, false);
    NBT_OK(nb_profiler_start(NB_PROFILE_HOST));
    for (int i = 0; i < 5; i++) NBT_CHECK(nb_add(a, b));
    for (int i = 0; i < 3; i++) NBT_CHECK(nb_mul(a, b));
    nb_profiler_stop();
    nb_profile_entry e[64];
    int n = nb_profiler_entries(e, 64);
    assert_int_equal(n, 2);
    assert_int_equal(nb_profiler_entries(NULL, 0), 2);
    int ia = find(e, n, "add"), im = find(e, n, "mul");
    assert_true(ia >= 0 && im >= 0);
    assert_int_equal(e[ia].calls, 5);
    assert_int_equal(e[im].calls, 3);
    /* sorted by total time, each row within the wall time and all rows together too */
    assert_true(e[0].total_ms >= e[1].total_ms);
    double wall = nb_profiler_wall_ms();
    assert_true(e[0].total_ms >= 0 && e[0].total_ms + e[1].total_ms <= wall);
    /* stopped: ops are not counted; the wall time stays fixed */
    NBT_CHECK(nb_add(a, b));
    assert_int_equal(nb_profiler_entries(e, 64), 2);
    ia = find(e, n, "add");
    assert_true(ia >= 0);
    assert_int_equal(e[ia].calls, 5);
    assert_true(nb_profiler_wall_ms() == wall);
    /* a new start clears the counters */
    NBT_OK(nb_profiler_start(NB_PROFILE_SYNC));
    NBT_CHECK(nb_sub(a, b));
    n = nb_profiler_entries(e, 64);
    nb_profiler_stop();
    assert_int_equal(n, 1);
    assert_string_equal(e[0].name, "sub");
    assert_int_equal(e[0].calls, 1);
    /* max smaller than the number of rows: only max are copied, the count is the total */
    NBT_OK(nb_profiler_start(NB_PROFILE_HOST));
    NBT_CHECK(nb_add(a, b));
    NBT_CHECK(nb_mul(a, b));
    nb_profile_entry one[2] = {{0}, {"sentinel", -7, -7}};
    assert_int_equal(nb_profiler_entries(one, 1), 2);
    assert_string_equal(one[1].name, "sentinel");
    nb_profiler_stop();
    nb_scope_end(s);
}

/* A time that an op certainly takes shows in its row: a 2^22-element add is at least a few
 * microseconds, and the rows of a step never exceed the wall time. */
static void test_times_are_plausible(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *a = ones(1 << 22, false), *b = ones(1 << 22, false);
    NBT_OK(nb_profiler_start(NB_PROFILE_HOST));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 4; i++) NBT_CHECK(nb_add(a, b));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    nb_profiler_stop();
    double outside = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    nb_profile_entry e[8];
    assert_int_equal(nb_profiler_entries(e, 8), 1);
    assert_true(e[0].total_ms > 0.001 && e[0].total_ms <= outside && outside <= nb_profiler_wall_ms());
    nb_scope_end(s);
}

/* The optimizer step is one row; the kernels it runs inside are part of it, not rows of their own. */
static void test_optimizer_step_row(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *w = ones(64, true);
    nb_sgd_params sp = nb_sgd_params_default();
    sp.momentum = 0.9;
    nb_optim *opt = NBT_CHECK(nb_optim_sgd(&w, 1, &sp));
    nb_tensor *loss = NBT_CHECK(nb_sum(nb_mul(w, w), NULL, 0, false));
    NBT_OK(nb_backward(loss, NULL, 0));
    NBT_OK(nb_profiler_start(NB_PROFILE_HOST));
    NBT_OK(nb_optim_step(opt));
    NBT_OK(nb_optim_step(opt));
    nb_profiler_stop();
    nb_profile_entry e[16];
    int n = nb_profiler_entries(e, 16);
    assert_int_equal(n, 1);
    assert_string_equal(e[0].name, "optimizer_step");
    assert_int_equal(e[0].calls, 2);
    nb_optim_free(opt);
    nb_scope_end(s);
}

static void test_print_and_errors(void **state)
{
    nb_scope *s = nb_scope_begin();
    NBT_FAILS(nb_profiler_start((nb_profile_mode)7) != NB_OK, NB_ERR_INVALID_ARG, "profiler start", "7", NULL);
    NBT_FAILS(nb_profiler_print(NULL) != NB_OK, NB_ERR_INVALID_ARG, "profiler print", NULL);
    NBT_OK(nb_profiler_start(NB_PROFILE_HOST));
    NBT_CHECK(nb_exp(ones(10, false)));
    nb_profiler_stop();
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    NBT_OK(nb_profiler_print(f));
    fclose(f);
    assert_non_null(strstr(buf, "op "));
    assert_non_null(strstr(buf, "\nexp "));
    assert_non_null(strstr(buf, "(not in ops)"));
    assert_non_null(strstr(buf, "wall"));
    free(buf);
    nb_scope_end(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_and_reset),
        cmocka_unit_test(test_times_are_plausible),
        cmocka_unit_test(test_optimizer_step_row),
        cmocka_unit_test(test_print_and_errors),
    };
    return NBT_RUN(tests);
}
