/* Cross entropy's forward over float32 rows with AVX2 and FMA (declared in
 * src/cpu/softmax_impl.h): the max of the row; the exponentials into a scratch row, summed in
 * float over blocks of SUM_BLOCK vectors and the blocks in double, while the next row is fetched
 * into L2; then, with probabilities wanted, the scratch row scaled into them (and into the column
 * sums). One exp per logit, and the logits' row read from memory once while the exponentials
 * run: on the DLBench LSTM's [4096, 10000] logits on Zen 3 the forward took 84 ms a step at 1
 * thread with the portable loops (two exps per logit, the max pass waiting on memory) and 34 ms
 * with these (docs/BENCHMARKS.md, session 41). A tail of fewer
 * than 8 goes through the same vector code under a mask, so that a value does not depend on
 * where it falls. */
#include <math.h>

#include "cpu/softmax_impl.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "cpu/ops/exp256_impl.h"

#define AVX2 __attribute__((target("avx2,fma")))

/* Vectors of exponentials summed in float before their sum goes to double (each lane adds
 * values of at most 1, as lse_f32_avx512's blocks). */
#define SUM_BLOCK 16

AVX2 static inline float hmax(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

AVX2 static inline double hsum_pd(__m256d v)
{
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

/* The row's max, four vectors at a time. A NaN may be skipped (max returns its second operand);
 * it then makes the sum, and so the whole row, NaN. */
AVX2 static float row_max(const float *x, int64_t D)
{
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
    int64_t i = 0;
    for (; i + 32 <= D; i += 32) {
        m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
        m1 = _mm256_max_ps(m1, _mm256_loadu_ps(x + i + 8));
        m2 = _mm256_max_ps(m2, _mm256_loadu_ps(x + i + 16));
        m3 = _mm256_max_ps(m3, _mm256_loadu_ps(x + i + 24));
    }
    for (; i + 8 <= D; i += 8) m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
    if (i < D) {
        __m256i k = nb_lanes256(D - i);
        m1 = _mm256_max_ps(m1, _mm256_blendv_ps(ninf, _mm256_maskload_ps(x + i, k), _mm256_castsi256_ps(k)));
    }
    return hmax(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
}

/* sum(exp(x - m)) in double, the exponentials stored to e when it is not NULL; a line of next
 * fetched into L2 every two vectors. */
AVX2 static double exp_sum(const float *x, float *e, int64_t D, float m, const float *next)
{
    const __m256 vm = _mm256_set1_ps(m);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int64_t i = 0;
    while (i + 8 <= D) {
        __m256 fs = _mm256_setzero_ps();
        for (int v = 0; v < SUM_BLOCK && i + 8 <= D; v++, i += 8) {
            if (!(v & 1)) _mm_prefetch((const char *)(next + i), _MM_HINT_T1);
            __m256 y = nb_exp256_nonpos(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
            if (e) _mm256_storeu_ps(e + i, y);
            fs = _mm256_add_ps(fs, y);
        }
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(fs)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(fs, 1)));
    }
    if (i < D) {
        __m256i k = nb_lanes256(D - i);
        __m256 y = _mm256_and_ps(_mm256_castsi256_ps(k),
                                 nb_exp256_nonpos(_mm256_sub_ps(_mm256_maskload_ps(x + i, k), vm)));
        if (e) _mm256_maskstore_ps(e + i, k, y);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(y)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(y, 1)));
    }
    return hsum_pd(_mm256_add_pd(s0, s1));
}

/* q = e f over a row of D, acc += q when acc is not NULL; with stream, q's 32-byte-aligned
 * middle is written with streaming stores. */
AVX2 static void scale_row(const float *e, float *q, int64_t D, float f, bool stream, float *acc)
{
    const __m256 vf = _mm256_set1_ps(f);
    int64_t i = 0;
    if (stream) {
        int64_t head = (int64_t)(((32 - ((uintptr_t)q & 31)) & 31) / sizeof(float));
        if (head > D) head = D;
        if (head) {
            __m256i k = nb_lanes256(head);
            __m256 y = _mm256_mul_ps(_mm256_maskload_ps(e, k), vf);
            _mm256_maskstore_ps(q, k, y);
            if (acc) _mm256_maskstore_ps(acc, k, _mm256_add_ps(_mm256_maskload_ps(acc, k), y));
            i = head;
        }
        for (; i + 8 <= D; i += 8) {
            __m256 y = _mm256_mul_ps(_mm256_loadu_ps(e + i), vf);
            _mm256_stream_ps(q + i, y);
            if (acc) _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), y));
        }
    }
    for (; i + 8 <= D; i += 8) {
        __m256 y = _mm256_mul_ps(_mm256_loadu_ps(e + i), vf);
        _mm256_storeu_ps(q + i, y);
        if (acc) _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), y));
    }
    if (i < D) {
        __m256i k = nb_lanes256(D - i);
        __m256 y = _mm256_mul_ps(_mm256_maskload_ps(e + i, k), vf);
        _mm256_maskstore_ps(q + i, k, y);
        if (acc) _mm256_maskstore_ps(acc + i, k, _mm256_add_ps(_mm256_maskload_ps(acc + i, k), y));
    }
    if (stream) _mm_sfence();
}

AVX2 double nb__ce_lse_avx2(const float *x, int64_t D, const float *next)
{
    float m = row_max(x, D);
    return (double)m + log(exp_sum(x, NULL, D, m, next));
}

AVX2 double nb__ce_probs_avx2(const float *x, int64_t D, const float *next, float *e, float *q, double scale,
                              bool stream, float *acc)
{
    float m = row_max(x, D);
    double s = exp_sum(x, e, D, m, next);
    scale_row(e, q, D, (float)(scale / s), stream, acc);
    return (double)m + log(s);
}

#else

/* Off x86-64 nothing calls these (nb_cpu_avx2_fma() is false there). */
double nb__ce_lse_avx2(const float *x, int64_t D, const float *next)
{
    (void)x, (void)D, (void)next;
    return NAN;
}

double nb__ce_probs_avx2(const float *x, int64_t D, const float *next, float *e, float *q, double scale, bool stream,
                         float *acc)
{
    (void)x, (void)D, (void)next, (void)e, (void)q, (void)scale, (void)stream, (void)acc;
    return NAN;
}

#endif
