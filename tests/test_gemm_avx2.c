/* nabla's own AVX2 product with B packed once (src/cpu/ops/gemm_avx2.c, the LSTM's step product
 * on CPUs without AVX-512), checked against a float64 product of the same inputs: tiles cut by
 * M's and N's ends, several groups of panels and blocks of k, leading dimensions past the
 * widths, C's prior contents never read, and the same bits from one call as from two threads
 * each running its own rows. On a CPU without AVX2 and FMA the test reports itself skipped
 * (exit 77). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "nbtest.h"
#include "cpu/blas_impl.h"

#define U 0x1p-24 /* float32's unit roundoff */
#define PAD 3     /* extra columns in every leading dimension */
#define SENTINEL 12345.0f

/* Every element of C [m, n] (ldc) against the float64 sum of A [m, k] (lda) B [k, n] (ldb): within
 * (k + 2) u of the sum of |a b|, the bound of a float32 sum of k products (each rounded once by
 * the FMA, and once more per block of k when the blocks' sums are added). */
static void check_close(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                        const float *c, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0, scale = 0;
            for (int64_t q = 0; q < k; q++) {
                double v = (double)a[i * lda + q] * b[q * ldb + j];
                s += v, scale += fabs(v);
            }
            double e = fabs(c[i * ldc + j] - s);
            if (!(e <= ((double)k + 2) * U * scale))
                fail_msg("%ldx%ldx%ld: C[%ld, %ld] = %.9g, float64 %.9g (error %.3g, bound %.3g)", (long)m, (long)n,
                         (long)k, (long)i, (long)j, c[i * ldc + j], s, e, ((double)k + 2) * U * scale);
        }
}

static void check(int64_t m, int64_t n, int64_t k, unsigned seed)
{
    int64_t lda = k + PAD, ldb = n + PAD, ldc = n + PAD;
    float *a = nbt_filled_floats(m * lda, &seed, 1e-3f), *b = nbt_filled_floats(k * ldb, &seed, 1e3f);
    float *c = NBT_CHECK(malloc((size_t)(m * ldc) * sizeof(float)));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldc; j++) c[i * ldc + j] = j < n ? NAN : SENTINEL; /* a read of C would show */
    nb_cpu_avx2_b *pb = nb_cpu_avx2_pack_b(k, n, b, ldb);
    assert_non_null(pb);
    nb_cpu_gemm_avx2_packed(m, a, lda, pb, c, ldc);
    check_close(m, n, k, a, lda, b, ldb, c, ldc);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = n; j < ldc; j++) assert_true(c[i * ldc + j] == SENTINEL);
    nb_cpu_avx2_b_free(pb);
    free(a), free(b), free(c);
}

static void test_accuracy(void **state)
{
    (void)state;
    /* rows: whole tiles of 6 and cut ones; columns: panels of 16 whole and cut, one group of 16
     * panels and several (300, 1030); k: one step, one block of 256 and several, cut or whole */
    const int64_t ms[] = {1, 5, 6, 7, 13, 64};
    const int64_t nks[][2] = {{1, 1}, {15, 7}, {16, 256}, {17, 257}, {40, 600}, {300, 33}, {1030, 256}, {256, 1024}};
    unsigned seed = 1;
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        for (size_t s = 0; s < sizeof nks / sizeof nks[0]; s++) check(ms[i], nks[s][0], nks[s][1], seed++);
}

/* The LSTM's shapes, and the bits of one call on all the rows against two threads each running
 * its own rows inside an OpenMP region (as the cell kernel does): each element's sum is made the
 * same way whichever tile holds its row. */
static void test_threads_same_bits(void **state)
{
    (void)state;
    const int64_t shapes[][3] = {{128, 1024, 256}, {128, 256, 1024}, {61, 40, 300}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        unsigned seed = 7 + (unsigned)s;
        float *a = nbt_filled_floats(m * k, &seed, 1.0f), *b = nbt_filled_floats(k * n, &seed, 1.0f);
        float *c1 = NBT_CHECK(malloc((size_t)(m * n) * sizeof(float)));
        float *c2 = NBT_CHECK(malloc((size_t)(m * n) * sizeof(float)));
        nb_cpu_avx2_b *pb = nb_cpu_avx2_pack_b(k, n, b, n);
        assert_non_null(pb);
        nb_cpu_gemm_avx2_packed(m, a, k, pb, c1, n);
        check_close(m, n, k, a, k, b, n, c1, n);
#pragma omp parallel num_threads(2)
        {
            int64_t t = omp_get_thread_num(), r0 = m * t / 2, r1 = m * (t + 1) / 2;
            if (r1 > r0) nb_cpu_gemm_avx2_packed(r1 - r0, a + r0 * k, k, pb, c2 + r0 * n, n);
        }
        assert_memory_equal(c1, c2, (size_t)(m * n) * sizeof(float));
        nb_cpu_avx2_b_free(pb);
        free(a), free(b), free(c1), free(c2);
    }
}

/* Infinities and NaNs go through as in any float32 product: a NaN in a row of A makes that row
 * of C NaN, an infinity in B gives +-inf or NaN in its column, and the other elements are
 * untouched by either. */
static void test_special_values(void **state)
{
    (void)state;
    int64_t m = 8, n = 20, k = 300;
    unsigned seed = 3;
    float *a = nbt_filled_floats(m * k, &seed, 1.0f), *b = nbt_filled_floats(k * n, &seed, 1.0f);
    float *c = NBT_CHECK(malloc((size_t)(m * n) * sizeof(float)));
    a[2 * k + 290] = NAN;                    /* row 2, in the second block of k */
    b[5 * n + 17] = INFINITY;                /* column 17 */
    nb_cpu_avx2_b *pb = nb_cpu_avx2_pack_b(k, n, b, n);
    assert_non_null(pb);
    nb_cpu_gemm_avx2_packed(m, a, k, pb, c, n);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            if (i == 2) assert_true(isnan(c[i * n + j]));
            else if (j == 17) assert_true(isinf(c[i * n + j]) && (c[i * n + j] > 0) == (a[i * k + 5] > 0));
            else assert_true(isfinite(c[i * n + j]));
        }
    nb_cpu_avx2_b_free(pb);
    nb_cpu_avx2_b_free(NULL);
    free(a), free(b), free(c);
}

int main(void)
{
    float one = 1.0f;
    nb_cpu_avx2_b *probe = nb_cpu_avx2_pack_b(1, 1, &one, 1);
    if (!probe) {
        fprintf(stderr, "test_gemm_avx2: skipped: no AVX2 and FMA on this CPU\n");
        return 77;
    }
    nb_cpu_avx2_b_free(probe);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accuracy),
        cmocka_unit_test(test_threads_same_bits),
        cmocka_unit_test(test_special_values),
    };
    return NBT_RUN(tests);
}
