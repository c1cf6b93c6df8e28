/* The vector kernels of the float32 reductions (src/cpu/reduce_impl.h): AVX-512F's and AVX2's,
 * each summing in double what it first adds in float32 a few floats at a time (at most eight, as
 * a tree: a rounding error of at most 3 x 2^-24 of their magnitudes, a bound that does not grow
 * with n as the one of PyTorch's float32 cascade sum does). AVX2 converts four floats to a vector
 * of doubles where AVX-512 converts eight, and it has no mask registers: its tails are a scalar
 * loop or, for the narrow columns' last vector, a masked move (vmaskmovps), which does not touch
 * the lanes it leaves. */
#include <math.h>
#include <stdbool.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "cpu/cpu_impl.h"
#include "cpu/reduce_impl.h"

#if defined(__x86_64__)

#define AVX512 __attribute__((target("avx512f")))
#define AVX2 __attribute__((target("avx2")))

/* ---- AVX-512F --------------------------------------------------------------------------- */

/* The low and high eight floats of v, as doubles. */
#define LO8(v) _mm512_cvtps_pd(_mm512_castps512_ps256(v))
#define HI8(v) _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)))

/* float32 sum: each lane adds four floats in float32, (x0 + x1) + (x2 + x3), and their sum goes
 * into double accumulators; converting every float to double took a conversion per eight floats
 * and held [128, 32, 28, 28]'s 12.8 MB to 0.225 ms at 1 thread on Zen 4 (PyTorch 0.16-0.18). Four
 * accumulators of eight lanes keep the adds independent, and the tail is one masked load. Named
 * registers, not an array: GCC kept an array of eight on the stack, zeroed with rep stos on every
 * call, which was most of a 32-element run's cost. */
AVX512 static double sum_f32_avx512(const float *x, int64_t n)
{
#define LD(k) _mm512_loadu_ps(x + i + 16 * (k))
    __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 128 <= n; i += 128) {
        __m512 s = _mm512_add_ps(_mm512_add_ps(LD(0), LD(1)), _mm512_add_ps(LD(2), LD(3)));
        __m512 t = _mm512_add_ps(_mm512_add_ps(LD(4), LD(5)), _mm512_add_ps(LD(6), LD(7)));
        a0 = _mm512_add_pd(a0, LO8(s));
        a1 = _mm512_add_pd(a1, HI8(s));
        a2 = _mm512_add_pd(a2, LO8(t));
        a3 = _mm512_add_pd(a3, HI8(t));
    }
    for (; i + 16 <= n; i += 16) {
        __m512 v = LD(0);
        a0 = _mm512_add_pd(a0, LO8(v));
        a1 = _mm512_add_pd(a1, HI8(v));
    }
#undef LD
    if (i < n) {
        __m512 t = _mm512_maskz_loadu_ps((__mmask16)((1u << (n - i)) - 1), x + i);
        a2 = _mm512_add_pd(a2, LO8(t));
        a3 = _mm512_add_pd(a3, HI8(t));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
}

/* float32 max / min (sign 1 / -1) of n >= 1 elements; any NaN gives NaN. */
AVX512 static double extreme_f32_avx512(const float *x, int64_t n, int sign)
{
    __m512 a0 = _mm512_set1_ps(x[0]), a1 = a0;
    __mmask16 nan = 0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
        nan |= _mm512_cmp_ps_mask(v0, v1, _CMP_UNORD_Q);
        a0 = sign > 0 ? _mm512_max_ps(a0, v0) : _mm512_min_ps(a0, v0);
        a1 = sign > 0 ? _mm512_max_ps(a1, v1) : _mm512_min_ps(a1, v1);
    }
    for (; i + 16 <= n; i += 16) {
        __m512 v0 = _mm512_loadu_ps(x + i);
        nan |= _mm512_cmp_ps_mask(v0, v0, _CMP_UNORD_Q);
        a0 = sign > 0 ? _mm512_max_ps(a0, v0) : _mm512_min_ps(a0, v0);
    }
    a0 = sign > 0 ? _mm512_max_ps(a0, a1) : _mm512_min_ps(a0, a1);
    double r = sign > 0 ? _mm512_reduce_max_ps(a0) : _mm512_reduce_min_ps(a0);
    for (; i < n; i++) {
        if (x[i] != x[i]) nan = 1;
        r = sign > 0 ? (x[i] > r ? x[i] : r) : (x[i] < r ? x[i] : r);
    }
    return nan ? NAN : r;
}

/* The first position of the max (sign 1) or min (-1) of n >= 1 floats, or of the first NaN: the
 * extreme by the vector pass above, then the first element equal to it (-0 and +0 are equal, so
 * the first of either is found, as the reference's strict comparison finds it). */
AVX512 static int64_t first_extreme_f32_avx512(const float *x, int64_t n, int sign)
{
    float m = (float)extreme_f32_avx512(x, n, sign);
    __m512 mv = _mm512_set1_ps(m);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 live = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(live, x + i);
        __mmask16 hit = m != m ? _mm512_mask_cmp_ps_mask(live, v, v, _CMP_UNORD_Q)
                               : _mm512_mask_cmp_ps_mask(live, v, mv, _CMP_EQ_OQ);
        if (hit) return i + __builtin_ctz(hit);
    }
    return 0; /* not reached: m is one of the n */
}

/* out[o os] = (sum of the L <= 256 floats at x + o xs) / div for o in [0, count), in double:
 * one loop over the outputs, which the core overlaps, instead of a call and a horizontal sum
 * waiting on each other per output (the sum over the 32 channels of a channels-last
 * [128, 32, 28, 28]: 100352 outputs). */
AVX512 static void short_rows_f32_avx512(float *out, int64_t os, const float *x, int64_t xs, int64_t count,
                                         int64_t L, double div)
{
    int64_t nv = L / 8;
    __mmask16 tail = (__mmask16)((1u << (L % 8)) - 1);
    for (int64_t o = 0; o < count; o++) {
        const float *q = x + o * xs;
        __m512d a = _mm512_setzero_pd(), b = a;
        int64_t v = 0;
#define PAIR8(k) _mm512_cvtps_pd(_mm256_add_ps(_mm256_loadu_ps(q + 8 * (k)), _mm256_loadu_ps(q + 8 * (k) + 8)))
        for (; v + 4 <= nv; v += 4) { /* pairs of eight added in float32 */
            a = _mm512_add_pd(a, PAIR8(v));
            b = _mm512_add_pd(b, PAIR8(v + 2));
        }
        for (; v + 2 <= nv; v += 2) a = _mm512_add_pd(a, PAIR8(v));
#undef PAIR8
        if (v < nv) a = _mm512_add_pd(a, _mm512_cvtps_pd(_mm256_loadu_ps(q + 8 * v)));
        if (tail)
            b = _mm512_add_pd(b, _mm512_cvtps_pd(_mm512_castps512_ps256(_mm512_maskz_loadu_ps(tail, q + 8 * nv))));
        out[o * os] = (float)(_mm512_reduce_add_pd(_mm512_add_pd(a, b)) / div);
    }
}

/* acc[j] += the nrows rows' x[j], in double: the outer mode's inner loop for float32 sums. */
AVX512 static void rows_add_f32_avx512(double *acc, const float *const *rows, int nrows, int64_t n)
{
    int64_t j = 0;
#define LD(r) _mm512_loadu_ps(rows[r] + j)
    if (nrows == 8) /* a tree of adds in float32 (short dependency chains), then double */
        for (; j + 16 <= n; j += 16) {
            __m512 s0 = _mm512_add_ps(LD(0), LD(1)), s1 = _mm512_add_ps(LD(2), LD(3));
            __m512 s2 = _mm512_add_ps(LD(4), LD(5)), s3 = _mm512_add_ps(LD(6), LD(7));
            __m512 t = _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3));
            _mm512_storeu_pd(acc + j, _mm512_add_pd(_mm512_loadu_pd(acc + j), LO8(t)));
            _mm512_storeu_pd(acc + j + 8, _mm512_add_pd(_mm512_loadu_pd(acc + j + 8), HI8(t)));
        }
#undef LD
    for (; j + 16 <= n; j += 16) {
        __m512d a0 = _mm512_loadu_pd(acc + j), a1 = _mm512_loadu_pd(acc + j + 8);
        for (int r = 0; r < nrows; r++) {
            a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm256_loadu_ps(rows[r] + j)));
            a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_loadu_ps(rows[r] + j + 8)));
        }
        _mm512_storeu_pd(acc + j, a0);
        _mm512_storeu_pd(acc + j + 8, a1);
    }
    for (; j < n; j++)
        for (int r = 0; r < nrows; r++) acc[j] += rows[r][j];
}

/* acc[0 .. K) += the R rows of K <= 64 float32 columns, rows rst elements apart, in double,
 * with the accumulators in registers over all the rows (NV vectors of eight, the last masked):
 * the sum over (0, 2, 3) of a channels-last [128, 32, 28, 28], 100352 rows of 32, took 0.6-0.9
 * ms at 1 thread reading and writing acc every eight rows, against 0.3 for the NCHW one. Four
 * rows are added in float32, (r0 + r1) + (r2 + r3), before each conversion to double, and the
 * next four go into a second set: a conversion per eight floats held that sum to 0.25 ms on Zen 4
 * (PyTorch 0.16). */
#define NLD(q, v) \
    ((v) < NVEC - 1 ? _mm256_loadu_ps((q) + 8 * (v)) \
                  : _mm256_castsi256_ps(_mm512_castsi512_si256(_mm512_maskz_loadu_epi32(last, (q) + 8 * (v)))))
#define NQUAD(q, v) \
    _mm512_cvtps_pd(_mm256_add_ps(_mm256_add_ps(NLD(q, v), NLD((q) + rst, v)), \
                                  _mm256_add_ps(NLD((q) + 2 * rst, v), NLD((q) + 3 * rst, v))))
#define NARROW_FN(NV)                                                                            \
    AVX512 static void narrow_add_avx512_##NV(double *acc, const float *x, int64_t rst, \
                                                                   int64_t R, int64_t K)         \
    {                                                                                            \
        enum { NVEC = NV };                                                                      \
        __m512d a[NV], b[NV];                                                                    \
        __mmask8 last = (__mmask8)(K - 8 * (NV - 1) >= 8 ? 0xff : (1u << (K - 8 * (NV - 1))) - 1); \
        for (int v = 0; v < NV; v++) a[v] = b[v] = _mm512_setzero_pd();                          \
        int64_t r = 0;                                                                           \
        for (; r + 8 <= R; r += 8) { /* two sets of four rows: independent adds */              \
            const float *q = x + r * rst, *q2 = q + 4 * rst;                                     \
            for (int v = 0; v < NV; v++) {                                                       \
                a[v] = _mm512_add_pd(a[v], NQUAD(q, v));                                         \
                b[v] = _mm512_add_pd(b[v], NQUAD(q2, v));                                        \
            }                                                                                    \
        }                                                                                        \
        for (; r < R; r++) {                                                                     \
            const float *q = x + r * rst;                                                        \
            for (int v = 0; v < NV; v++) a[v] = _mm512_add_pd(a[v], _mm512_cvtps_pd(NLD(q, v))); \
        }                                                                                        \
        for (int v = 0; v < NV - 1; v++)                                                         \
            _mm512_storeu_pd(acc + 8 * v, _mm512_add_pd(_mm512_loadu_pd(acc + 8 * v), _mm512_add_pd(a[v], b[v]))); \
        _mm512_mask_storeu_pd(acc + 8 * (NV - 1), last,                                          \
                              _mm512_add_pd(_mm512_maskz_loadu_pd(last, acc + 8 * (NV - 1)),     \
                                            _mm512_add_pd(a[NV - 1], b[NV - 1])));               \
    }
NARROW_FN(1)
NARROW_FN(2)
NARROW_FN(3)
NARROW_FN(4)
NARROW_FN(5)
NARROW_FN(6)
NARROW_FN(7)
NARROW_FN(8)

#undef NLD
#undef NQUAD
#undef LO8
#undef HI8

static void narrow_add_avx512(double *acc, const float *x, int64_t rst, int64_t R, int64_t K)
{
    static void (*const fn[8])(double *, const float *, int64_t, int64_t, int64_t) = {
        narrow_add_avx512_1, narrow_add_avx512_2, narrow_add_avx512_3, narrow_add_avx512_4,
        narrow_add_avx512_5, narrow_add_avx512_6, narrow_add_avx512_7, narrow_add_avx512_8};
    fn[(K + 7) / 8 - 1](acc, x, rst, R, K);
}

/* ---- AVX2 ------------------------------------------------------------------------------- */

AVX2 static inline double hsum_avx2(__m256d v)
{
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

#define CVT4(p) _mm256_cvtps_pd(_mm_loadu_ps(p))

/* The low and high four floats of v, as doubles. */
#define LO4(v) _mm256_cvtps_pd(_mm256_castps256_ps128(v))
#define HI4(v) _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))

/* As sum_f32_avx512: each lane adds four floats in float32, (x0 + x1) + (x2 + x3), before
 * double; four accumulators of four doubles keep the adds independent. */
AVX2 static double sum_f32_avx2(const float *x, int64_t n)
{
#define LD(k) _mm256_loadu_ps(x + i + 8 * (k))
    __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m256 s = _mm256_add_ps(_mm256_add_ps(LD(0), LD(1)), _mm256_add_ps(LD(2), LD(3)));
        __m256 t = _mm256_add_ps(_mm256_add_ps(LD(4), LD(5)), _mm256_add_ps(LD(6), LD(7)));
        a0 = _mm256_add_pd(a0, LO4(s));
        a1 = _mm256_add_pd(a1, HI4(s));
        a2 = _mm256_add_pd(a2, LO4(t));
        a3 = _mm256_add_pd(a3, HI4(t));
    }
    for (; i + 8 <= n; i += 8) {
        __m256 v = LD(0);
        a0 = _mm256_add_pd(a0, LO4(v));
        a1 = _mm256_add_pd(a1, HI4(v));
    }
#undef LD
    double t = 0;
    for (; i < n; i++) t += x[i];
    return hsum_avx2(_mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3))) + t;
}

/* Two vectors of eight floats compared side by side; the NaNs are flagged apart, since vmaxps
 * returns its second operand when either is a NaN. */
AVX2 static double extreme_f32_avx2(const float *x, int64_t n, int sign)
{
    __m256 a0 = _mm256_set1_ps(x[0]), a1 = a0, nan = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v0, v1, _CMP_UNORD_Q));
        a0 = sign > 0 ? _mm256_max_ps(a0, v0) : _mm256_min_ps(a0, v0);
        a1 = sign > 0 ? _mm256_max_ps(a1, v1) : _mm256_min_ps(a1, v1);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 v0 = _mm256_loadu_ps(x + i);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v0, v0, _CMP_UNORD_Q));
        a0 = sign > 0 ? _mm256_max_ps(a0, v0) : _mm256_min_ps(a0, v0);
    }
    a0 = sign > 0 ? _mm256_max_ps(a0, a1) : _mm256_min_ps(a0, a1);
    float lane[8];
    _mm256_storeu_ps(lane, a0);
    float r = lane[0];
    for (int k = 1; k < 8; k++) r = sign > 0 ? (lane[k] > r ? lane[k] : r) : (lane[k] < r ? lane[k] : r);
    bool any_nan = _mm256_movemask_ps(nan) != 0;
    for (; i < n; i++) {
        if (x[i] != x[i]) any_nan = true;
        r = sign > 0 ? (x[i] > r ? x[i] : r) : (x[i] < r ? x[i] : r);
    }
    return any_nan ? NAN : r;
}

/* As first_extreme_f32_avx512: the extreme, then the first element equal to it. */
AVX2 static int64_t first_extreme_f32_avx2(const float *x, int64_t n, int sign)
{
    float m = (float)extreme_f32_avx2(x, n, sign);
    __m256 mv = _mm256_set1_ps(m);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        int hit = _mm256_movemask_ps(m != m ? _mm256_cmp_ps(v, v, _CMP_UNORD_Q) : _mm256_cmp_ps(v, mv, _CMP_EQ_OQ));
        if (hit) return i + __builtin_ctz((unsigned)hit);
    }
    for (; i < n; i++)
        if (m != m ? x[i] != x[i] : x[i] == m) return i;
    return 0; /* not reached: m is one of the n */
}

/* As short_rows_f32_avx512, four floats to a vector and the last L % 4 added one by one. */
AVX2 static void short_rows_f32_avx2(float *out, int64_t os, const float *x, int64_t xs, int64_t count, int64_t L,
                                     double div)
{
    int64_t nv = L / 4;
    for (int64_t o = 0; o < count; o++) {
        const float *q = x + o * xs;
        __m256d a = _mm256_setzero_pd(), b = a;
        int64_t v = 0;
#define PAIR4(k) _mm256_cvtps_pd(_mm_add_ps(_mm_loadu_ps(q + 4 * (k)), _mm_loadu_ps(q + 4 * (k) + 4)))
        for (; v + 4 <= nv; v += 4) { /* pairs of four added in float32 */
            a = _mm256_add_pd(a, PAIR4(v));
            b = _mm256_add_pd(b, PAIR4(v + 2));
        }
        for (; v + 2 <= nv; v += 2) a = _mm256_add_pd(a, PAIR4(v));
#undef PAIR4
        if (v < nv) a = _mm256_add_pd(a, CVT4(q + 4 * v));
        double t = 0;
        for (int64_t j = 4 * nv; j < L; j++) t += q[j];
        out[o * os] = (float)((hsum_avx2(_mm256_add_pd(a, b)) + t) / div);
    }
}

/* As rows_add_f32_avx512, four columns to a vector. */
AVX2 static void rows_add_f32_avx2(double *acc, const float *const *rows, int nrows, int64_t n)
{
    int64_t j = 0;
#define LD(r) _mm256_loadu_ps(rows[r] + j)
    if (nrows == 8) /* a tree of adds in float32 (short dependency chains), then double */
        for (; j + 8 <= n; j += 8) {
            __m256 s0 = _mm256_add_ps(LD(0), LD(1)), s1 = _mm256_add_ps(LD(2), LD(3));
            __m256 s2 = _mm256_add_ps(LD(4), LD(5)), s3 = _mm256_add_ps(LD(6), LD(7));
            __m256 t = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
            _mm256_storeu_pd(acc + j, _mm256_add_pd(_mm256_loadu_pd(acc + j), LO4(t)));
            _mm256_storeu_pd(acc + j + 4, _mm256_add_pd(_mm256_loadu_pd(acc + j + 4), HI4(t)));
        }
#undef LD
    for (; j + 8 <= n; j += 8) {
        __m256d a0 = _mm256_loadu_pd(acc + j), a1 = _mm256_loadu_pd(acc + j + 4);
        for (int r = 0; r < nrows; r++) {
            a0 = _mm256_add_pd(a0, CVT4(rows[r] + j));
            a1 = _mm256_add_pd(a1, CVT4(rows[r] + j + 4));
        }
        _mm256_storeu_pd(acc + j, a0);
        _mm256_storeu_pd(acc + j + 4, a1);
    }
    for (; j < n; j++)
        for (int r = 0; r < nrows; r++) acc[j] += rows[r][j];
}

/* As narrow_add_avx512, for K <= 32 columns: NV vectors of four doubles in registers over all
 * the rows, the last one's 1 to 4 columns moved under a mask. Named accumulators, not arrays
 * (GCC kept arrays on the stack, storing them every row, and zeroed them with rep stos): a0..a7,
 * those past NV dead code. Two rows are added in float32 before each conversion to double (four
 * for 32 whole columns). Up to four vectors, alternate pairs of rows go into a second set
 * (b0..b3); from five the NV chains are independent enough alone, and two sets would not fit
 * AVX2's 16 registers. */
#define NLD(q, k) ((k) < NVEC - 1 || FULL ? _mm_loadu_ps((q) + 4 * (k)) : _mm_maskload_ps((q) + 4 * (k), m4))
#define NADD(acc, q, k)                                                                          \
    if ((k) < NVEC) acc = _mm256_add_pd(acc, _mm256_cvtps_pd(NLD(q, k)))
#define NADD2(acc, q, k) /* rows q and q + rst, added in float32 first */                         \
    if ((k) < NVEC) acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm_add_ps(NLD(q, k), NLD((q) + rst, k))))
#define NADD4(lo, hi, q, j) /* rows q .. q + 3 rst at columns j .. j + 7: (r0 + r1) + (r2 + r3) */ \
    do {                                                                                         \
        __m256 s4 = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps((q) + (j)), _mm256_loadu_ps((q) + rst + (j))), \
                                  _mm256_add_ps(_mm256_loadu_ps((q) + 2 * rst + (j)),           \
                                                _mm256_loadu_ps((q) + 3 * rst + (j))));          \
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(s4)));                     \
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(s4, 1)));                   \
    } while (0)
#define NPUT(k, sum)                                                                             \
    if ((k) < NVEC - 1) _mm256_storeu_pd(acc + 4 * (k), _mm256_add_pd(_mm256_loadu_pd(acc + 4 * (k)), sum)); \
    else if ((k) == NVEC - 1)                                                                      \
    _mm256_maskstore_pd(acc + 4 * (k), m8, _mm256_add_pd(_mm256_maskload_pd(acc + 4 * (k), m8), sum))
#define NARROW2_FN(NV)                                                                           \
    AVX2 static void narrow_add_avx2_##NV(double *acc, const float *x, int64_t rst, int64_t R, int64_t K) \
    {                                                                                            \
        enum { NVEC = NV };                                                                      \
        __m128i m4 = _mm_cmpgt_epi32(_mm_set1_epi32((int)(K - 4 * (NV - 1))), _mm_setr_epi32(0, 1, 2, 3)); \
        __m256i m8 = _mm256_cvtepi32_epi64(m4);                                                  \
        __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0; \
        __m256d b0 = a0, b1 = a0, b2 = a0, b3 = a0;                                              \
        if (K == 4 * NV) {                                                                       \
            enum { FULL = 1 };                                                                   \
            NARROW2_ROWS(NV);                                                                    \
        } else {                                                                                 \
            enum { FULL = 0 };                                                                   \
            NARROW2_ROWS(NV);                                                                    \
        }                                                                                        \
        NPUT(0, _mm256_add_pd(a0, b0)); NPUT(1, _mm256_add_pd(a1, b1));                          \
        NPUT(2, _mm256_add_pd(a2, b2)); NPUT(3, _mm256_add_pd(a3, b3));                          \
        NPUT(4, a4); NPUT(5, a5); NPUT(6, a6); NPUT(7, a7);                                      \
    }
/* the rows' loop of narrow_add_avx2_NV; FULL: the last vector's four columns all there, loaded
 * without a mask (vmaskmovps is the slower load on Zen 3). With that, four rows per conversion,
 * and reduce.c's finish without its division by 1, the sums over dims 0 and 1 of an NCHW
 * [32, 32, 28, 28] float32 at 1 thread on Zen 3 went 0.103-0.116 -> 0.082-0.084 and 0.098-0.111
 * -> 0.073-0.083 ms (least of 300 calls; PyTorch, timed from Python, 0.077-0.081 and
 * 0.067-0.069), and at [128, 32, 28, 28] 0.36 -> 0.30-0.31 and 0.63-0.64 -> 0.33-0.44 (PyTorch
 * 0.33 and 0.29). */
#define NARROW2_ROWS(NV)                                                                         \
    do {                                                                                         \
        int64_t r = 0;                                                                           \
        if (NV == 8 && FULL) /* 32 columns: four rows added in float32 per conversion */         \
            for (; r + 4 <= R; r += 4) {                                                         \
                const float *q = x + r * rst;                                                    \
                NADD4(a0, a1, q, 0); NADD4(a2, a3, q, 8);                                        \
                NADD4(a4, a5, q, 16); NADD4(a6, a7, q, 24);                                      \
            }                                                                                    \
        if (NV <= 4)                                                                             \
            for (; r + 4 <= R; r += 4) {                                                         \
                const float *q = x + r * rst, *q2 = q + 2 * rst;                                 \
                NADD2(a0, q, 0); NADD2(a1, q, 1); NADD2(a2, q, 2); NADD2(a3, q, 3);              \
                NADD2(b0, q2, 0); NADD2(b1, q2, 1); NADD2(b2, q2, 2); NADD2(b3, q2, 3);          \
            }                                                                                    \
        else                                                                                     \
            for (; r + 2 <= R; r += 2) {                                                         \
                const float *q = x + r * rst;                                                    \
                NADD2(a0, q, 0); NADD2(a1, q, 1); NADD2(a2, q, 2); NADD2(a3, q, 3);              \
                NADD2(a4, q, 4); NADD2(a5, q, 5); NADD2(a6, q, 6); NADD2(a7, q, 7);              \
            }                                                                                    \
        for (; r < R; r++) {                                                                     \
            const float *q = x + r * rst;                                                        \
            NADD(a0, q, 0); NADD(a1, q, 1); NADD(a2, q, 2); NADD(a3, q, 3);                      \
            NADD(a4, q, 4); NADD(a5, q, 5); NADD(a6, q, 6); NADD(a7, q, 7);                      \
        }                                                                                        \
    } while (0)
NARROW2_FN(1)
NARROW2_FN(2)
NARROW2_FN(3)
NARROW2_FN(4)
NARROW2_FN(5)
NARROW2_FN(6)
NARROW2_FN(7)
NARROW2_FN(8)
#undef NLD
#undef NADD
#undef NADD2
#undef NADD4
#undef NPUT
#undef NARROW2_ROWS
#undef CVT4
#undef LO4
#undef HI4

static void narrow_add_avx2(double *acc, const float *x, int64_t rst, int64_t R, int64_t K)
{
    static void (*const fn[8])(double *, const float *, int64_t, int64_t, int64_t) = {
        narrow_add_avx2_1, narrow_add_avx2_2, narrow_add_avx2_3, narrow_add_avx2_4,
        narrow_add_avx2_5, narrow_add_avx2_6, narrow_add_avx2_7, narrow_add_avx2_8};
    fn[(K + 3) / 4 - 1](acc, x, rst, R, K);
}

#endif

const nb_reduce_vec *nb__reduce_vec(void)
{
#if defined(__x86_64__)
    static const nb_reduce_vec avx512 = {sum_f32_avx512,        extreme_f32_avx512, first_extreme_f32_avx512,
                                         short_rows_f32_avx512, rows_add_f32_avx512, narrow_add_avx512,
                                         64};
    static const nb_reduce_vec avx2 = {sum_f32_avx2,        extreme_f32_avx2, first_extreme_f32_avx2,
                                       short_rows_f32_avx2, rows_add_f32_avx2, narrow_add_avx2,
                                       32};
    if (nb_cpu_avx512()) return &avx512;
    if (nb_cpu_avx2_fma()) return &avx2;
#endif
    return NULL;
}
