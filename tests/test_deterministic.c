/* Deterministic mode (nb_set_deterministic), a property of the gemm tuner (forced on with
 * NABLA_GEMM_TUNE=1 before the first product): while the mode is off, a new large float32
 * product's first calls run on the tuner's schedule (nb_cpu_tuning_steps grows); while it is on,
 * none does, and every call of a new shape gives the first call's bits, which are right (against
 * the float64 product); switched off again, the tuner takes that shape up. */
#include <stdlib.h>
#include <string.h>

#include "nbtest.h"

enum { M = 384, K = 320, N = 288 }; /* 2 M N K = 71 M flops: above the tuner's floor */

static nb_tensor *randn(int64_t r, int64_t c)
{
    nb_tensor_params p = nb_tensor_params_default();
    return NBT_CHECK(nb_randn((int64_t[]){r, c}, 2, &p));
}

/* c against a b computed in float64 */
static double max_err_vs_f64(const nb_tensor *c, const nb_tensor *a, const nb_tensor *b)
{
    return nbt_max_rel_err(c, NBT_CHECK(nb_matmul(NBT_CHECK(nb_to_dtype(a, NB_FLOAT64)),
                                                 NBT_CHECK(nb_to_dtype(b, NB_FLOAT64)))));
}

static void test_mode(void **state)
{
    (void)state;
    nb_scope *sc = nb_scope_begin();
    nb_manual_seed(3);
    assert_false(nb_get_deterministic()); /* NABLA_DETERMINISTIC unset: off */

    /* off: a new shape's first calls are the tuner's */
    nb_tensor *a = randn(M, K), *b = randn(K, N);
    unsigned long long s0 = nb_cpu_tuning_steps();
    for (int i = 0; i < 3; i++) NBT_CHECK(nb_matmul(a, b));
    assert_true(nb_cpu_tuning_steps() > s0);

    /* on: another new shape; no call is the tuner's, and all give the first call's bits */
    nb_set_deterministic(true);
    assert_true(nb_get_deterministic());
    nb_tensor *a2 = randn(M + 32, K), *b2 = randn(K, N + 16);
    unsigned long long s1 = nb_cpu_tuning_steps();
    nb_tensor *first = NBT_CHECK(nb_matmul(a2, b2));
    assert_true(max_err_vs_f64(first, a2, b2) < 1e-5);
    for (int i = 0; i < 12; i++) {
        nb_tensor *c = NBT_CHECK(nb_matmul(a2, b2));
        assert_memory_equal(nb_tensor_data_ptr(c), nb_tensor_data_ptr(first), sizeof(float) * (size_t)nb_tensor_numel(c));
    }
    assert_true(nb_cpu_tuning_steps() == s1);

    /* off again: the tuner goes on with that shape's schedule */
    nb_set_deterministic(false);
    assert_false(nb_get_deterministic());
    for (int i = 0; i < 3; i++) NBT_CHECK(nb_matmul(a2, b2));
    assert_true(nb_cpu_tuning_steps() > s1);
    nb_scope_end(sc);
}

int main(void)
{
    setenv("NABLA_GEMM_TUNE", "1", 1); /* the tuner on, whatever this CPU's default */
    unsetenv("NABLA_DETERMINISTIC");
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_mode)};
    return NBT_RUN(tests);
}
