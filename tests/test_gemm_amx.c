/* nabla's AMX product (src/cpu/ops/gemm_amx.c): float32 results from bfloat16 pieces, checked
 * against a float64 product of the same inputs and beside OpenBLAS's sgemm on them. On a CPU
 * without AMX (or with NABLA_AMX=0) the test reports itself skipped (exit 77). */
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "nbtest.h"
#include "cpu/blas_impl.h"

#define U 0x1p-24 /* float32's unit roundoff */
#define PAD 3     /* extra columns in every leading dimension */
#define SENTINEL 12345.0f

typedef struct {
    char ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    float alpha;
    float *a, *b, *bias;
} prob;

static float at(const float *x, int64_t ld, bool t, int64_t r, int64_t c) { return t ? x[c * ld + r] : x[r * ld + c]; }

/* Largest |c - ref| / scale over C, ref and scale (sum |alpha a b| + |bias|) in float64. */
static double worst(const prob *p, const float *c, double *bound_ratio)
{
    double w = 0, br = 0;
    for (int64_t i = 0; i < p->m; i++)
        for (int64_t j = 0; j < p->n; j++) {
            double s = p->bias ? p->bias[j] : 0, scale = p->bias ? fabs(p->bias[j]) : 0;
            for (int64_t q = 0; q < p->k; q++) {
                double v = (double)p->alpha * at(p->a, p->lda, p->ta == 'T', i, q) * at(p->b, p->ldb, p->tb == 'T', q, j);
                s += v;
                scale += fabs(v);
            }
            double e = fabs(c[i * p->ldc + j] - s);
            if (scale > 0 && e / scale > w) w = e / scale;
            /* the sums' worst case: 6 K roundings, and 2^-23 of each product left out */
            double bound = ((6.0 * (double)p->k + 4) * U) * scale;
            if (e > 0 && e / bound > br) br = e / bound;
            if (scale == 0) assert_true(e == 0);
        }
    *bound_ratio = br;
    return w;
}

static void sgemm_ref(const prob *p, float *c)
{
    for (int64_t i = 0; i < p->m; i++)
        for (int64_t j = 0; j < p->n; j++) c[i * p->ldc + j] = p->bias ? p->bias[j] : 0;
    cblas_sgemm(CblasRowMajor, p->ta == 'T' ? CblasTrans : CblasNoTrans, p->tb == 'T' ? CblasTrans : CblasNoTrans,
                (int)p->m, (int)p->n, (int)p->k, p->alpha, p->a, (int)p->lda, p->b, (int)p->ldb, 1.0f, c, (int)p->ldc);
}

/* One product on AMX against float64: within the worst-case bound, no worse than twice sgemm's
 * error on the same inputs, C's padding untouched. */
static void check(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, bool bias, unsigned seed)
{
    prob p = {ta, tb, m, n, k, (ta == 'T' ? m : k) + PAD, (tb == 'T' ? k : n) + PAD, n + PAD, alpha, NULL, NULL, NULL};
    /* some small elements: a range of exponents */
    p.a = nbt_filled_floats((ta == 'T' ? k : m) * p.lda, &seed, 1e-3f);
    p.b = nbt_filled_floats((tb == 'T' ? n : k) * p.ldb, &seed, 1e3f);
    p.bias = bias ? nbt_filled_floats(n, &seed, 1.0f) : NULL;
    float *c = NBT_CHECK(malloc((size_t)(m * p.ldc) * sizeof(float)));
    float *cs = NBT_CHECK(malloc((size_t)(m * p.ldc) * sizeof(float)));
    for (int64_t i = 0; i < m * p.ldc; i++) c[i] = SENTINEL;
    assert_true(nb_cpu_gemm_amx(ta, tb, m, n, k, alpha, p.a, p.lda, p.b, p.ldb, c, p.ldc, p.bias));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = n; j < p.ldc; j++) assert_true(c[i * p.ldc + j] == SENTINEL);
    sgemm_ref(&p, cs);
    double br, brs;
    double e = worst(&p, c, &br), es = worst(&p, cs, &brs);
    if (!(br <= 1.0 && e <= 2.0 * es + U))
        fail_msg("%c%c %ldx%ldx%ld alpha %g bias %d: error %.3g of the sums (sgemm %.3g), %.3g of the bound", ta, tb,
                 (long)m, (long)n, (long)k, alpha, bias, e, es, br);
    free(p.a), free(p.b), free(p.bias), free(c), free(cs);
}

static void test_accuracy(void **state)
{
    (void)state;
    /* the last two: several blocks of columns (A packed once and kept), of rows and of k */
    const int64_t shapes[][3] = {{1, 1, 1},    {16, 16, 32},  {33, 47, 65},  {100, 70, 300},
                                 {300, 40, 700}, {130, 96, 1100}, {64, 1030, 257}, {100, 600, 1100}};
    const char tr[][2] = {{'N', 'N'}, {'N', 'T'}, {'T', 'N'}, {'T', 'T'}};
    unsigned seed = 1;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int v = 0; v < 2; v++)
                check(tr[t][0], tr[t][1], shapes[s][0], shapes[s][1], shapes[s][2], v ? -0.75f : 1.0f, v == 1,
                      seed++);
}

/* Each element of C is one thread's, summed the same way whatever the number of threads. */
static void test_threads_same_bits(void **state)
{
    (void)state;
    const int64_t shapes[][3] = {{200, 96, 600}, {200, 600, 600}}; /* one block of columns; two */
    int was = nb_get_num_threads();
    for (int s = 0; s < 2; s++)
        for (int tr = 0; tr < 2; tr++) {
            int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            char ta = tr ? 'T' : 'N', tb = ta;
            unsigned seed = 7;
            float *a = nbt_filled_floats(m * k, &seed, 1.0f), *b = nbt_filled_floats(k * n, &seed, 1.0f);
            float *c1 = NBT_CHECK(malloc((size_t)(m * n) * sizeof(float)));
            float *c2 = NBT_CHECK(malloc((size_t)(m * n) * sizeof(float)));
            int64_t lda = tr ? m : k, ldb = tr ? k : n;
            nb_set_num_threads(1);
            assert_true(nb_cpu_gemm_amx(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, c1, n, NULL));
            nb_set_num_threads(2);
            assert_true(nb_cpu_gemm_amx(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, c2, n, NULL));
            assert_memory_equal(c1, c2, (size_t)(m * n) * sizeof(float));
            free(a), free(b), free(c1), free(c2);
        }
    nb_set_num_threads(was);
}

/* Finite values past bfloat16's largest (they would round to its infinity) keep float32's
 * product; an infinity or a NaN in either operand makes the kernel report that it did not run
 * (gemm.c then runs the product on OpenBLAS). */
static void test_special_values(void **state)
{
    (void)state;
    int64_t m = 20, n = 18, k = 40;
    unsigned seed = 3;
    float *a = nbt_filled_floats(m * k, &seed, 1.0f), *b = nbt_filled_floats(k * n, &seed, 1.0f);
    float *c = NBT_CHECK(malloc(sizeof(float) * m * n));
    a[0] = 3.3999e38f; /* rounds to a bfloat16 infinity */
    a[k + 1] = -FLT_MAX;
    for (int64_t q = 0; q < k; q++) b[q * n] = 1e-3f * (float)(q + 1) / (float)k;
    prob p = {'N', 'N', m, n, k, k, n, n, 1.0f, a, b, NULL};
    assert_true(nb_cpu_gemm_amx('N', 'N', m, n, k, 1.0f, a, k, b, n, c, n, NULL));
    double br, e = worst(&p, c, &br);
    assert_true(br <= 1.0);
    assert_true(e < 1e-6);
    assert_true(isfinite(c[0]) && isfinite(c[n]));
    a[5] = INFINITY;
    assert_false(nb_cpu_gemm_amx('N', 'N', m, n, k, 1.0f, a, k, b, n, c, n, NULL));
    a[5] = 0.5f;
    b[7] = NAN;
    assert_false(nb_cpu_gemm_amx('N', 'N', m, n, k, 1.0f, a, k, b, n, c, n, NULL));
    assert_false(nb_cpu_gemm_amx('N', 'N', 0, n, k, 1.0f, a, k, b, n, c, n, NULL));
    free(a), free(b), free(c);
}

/* B packed once (the LSTM's W_hh across a run's steps) gives the bits of the product that packs B
 * at each call (checked against float64 above): alone, and from inside an OpenMP region, each
 * thread its own rows on that thread. A B holding a NaN is not packed; an A holding an infinity
 * is not run. */
static void test_packed(void **state)
{
    (void)state;
    const int64_t shapes[][3] = {{128, 1024, 256}, {128, 256, 1024}, {70, 600, 1100}, {5, 40, 33}};
    unsigned seed = 11;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int tr = 0; tr < 4; tr++) {
            int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            char ta = tr & 1 ? 'T' : 'N', tb = tr & 2 ? 'T' : 'N';
            int64_t lda = ta == 'T' ? m : k, ldb = tb == 'T' ? k : n;
            float *a = nbt_filled_floats(m * k, &seed, 1e-3f), *b = nbt_filled_floats(k * n, &seed, 1e3f);
            float *bias = nbt_filled_floats(n, &seed, 1.0f);
            float *c1 = NBT_CHECK(malloc((size_t)(m * n) * sizeof(float)));
            float *c2 = NBT_CHECK(malloc((size_t)(m * n) * sizeof(float)));
            assert_true(nb_cpu_gemm_amx(ta, tb, m, n, k, -0.75f, a, lda, b, ldb, c1, n, bias));
            nb_cpu_amx_b *pb = nb_cpu_amx_pack_b(tb, n, k, b, ldb);
            assert_non_null(pb);
            memset(c2, 0, (size_t)(m * n) * sizeof(float));
            assert_true(nb_cpu_gemm_amx_packed(ta, m, -0.75f, a, lda, pb, c2, n, bias));
            assert_memory_equal(c1, c2, (size_t)(m * n) * sizeof(float));
            memset(c2, 0, (size_t)(m * n) * sizeof(float));
            int ok = 1;
#pragma omp parallel num_threads(2) reduction(& : ok)
            {
                int64_t t = omp_get_thread_num(), r0 = m * t / 2, r1 = m * (t + 1) / 2;
                const float *at0 = ta == 'T' ? a + r0 : a + r0 * lda;
                if (r1 > r0) ok &= nb_cpu_gemm_amx_packed(ta, r1 - r0, -0.75f, at0, lda, pb, c2 + r0 * n, n, bias);
            }
            assert_true(ok);
            assert_memory_equal(c1, c2, (size_t)(m * n) * sizeof(float));
            a[2] = INFINITY;
            assert_false(nb_cpu_gemm_amx_packed(ta, m, -0.75f, a, lda, pb, c2, n, bias));
            nb_cpu_amx_b_free(pb);
            b[3] = NAN;
            assert_null(nb_cpu_amx_pack_b(tb, n, k, b, ldb));
            free(a), free(b), free(bias), free(c1), free(c2);
        }
}

int main(void)
{
    if (!nb_cpu_amx()) {
        fprintf(stderr, "test_gemm_amx: skipped: no AMX here (the CPU, Linux or NABLA_AMX=0)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accuracy),
        cmocka_unit_test(test_threads_same_bits),
        cmocka_unit_test(test_special_values),
        cmocka_unit_test(test_packed),
    };
    return NBT_RUN(tests);
}
