/* nabla's own float32 NT product for few rows, C[M, N] = alpha A[M, K] B[N, K]^T + beta C, every
 * matrix row-major with its leading dimension, M up to GEMM_DOT_MAX_M: a fully connected layer's
 * forward on a small batch (Y = X W^T), where B, the weight, is large and is read once. Each
 * element of C is a dot product of two rows that are both contiguous in memory, so the kernel
 * runs along K: a group of up to 4 rows of A against 6 rows of B, 24 vectors of 16 partial sums,
 * folded into C's 4 x 6 elements at the end of each block of KC. The threads split N, 6 rows of B
 * at a time; for each 6, the blocks of K run in order (B's 6 x KC in L1, read from memory once)
 * and every group of A's rows (in L2) runs over each block. While one 6 runs, the kernels
 * prefetch the next 6 rows of B into L2, a share each: the rows are contiguous, but 36 KB long
 * (AlexNet-S's fc6) they cross pages, where the hardware's prefetchers start over.
 * On the Intel Xeon, 2 threads, NT 16x4096x9216 (fc6) 7.1 ms against 8.0 on oneDNN's matmul
 * primitive and 12.9 on OpenBLAS; 16x4096x4096 2.1 against 2.9 and 5.0. An AVX-512 kernel; with
 * AVX2 and FMA but no AVX-512 nb_cpu_gemm_dot runs gemm_dot_avx2.c's instead (up to
 * GEMM_DOT_AVX2_MAX_M rows). gemm.c offers either as a way of the tuner. */
#include <stdint.h>
#include <string.h>

#include "cpu/blas_impl.h"
#include "cpu/cpu_impl.h"

#if defined(__x86_64__)
#include "cpu/ops/gemm_own_impl.h"

#define NR 6 /* rows of B at a time */
#define KC 512 /* K per block: B's 6 x 512, 12 KB, in L1 */

/* x's two halves added (AVX-512F alone: the upper half taken as 4 doubles). */
static inline V512 __m256 half(__m512 x)
{
    return _mm256_add_ps(_mm512_castps512_ps256(x), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
}

/* The sums of four vectors, one per lane of the result. */
static inline V512 __m128 sum4(__m512 a, __m512 b, __m512 c, __m512 d)
{
    __m256 ab = _mm256_hadd_ps(half(a), half(b)), cd = _mm256_hadd_ps(half(c), half(d));
    __m256 abcd = _mm256_hadd_ps(ab, cd);
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

/* s[r * 8 + q] += A's row r . B's row q over [k0, k1), for MR rows of A and the 6 rows of B at
 * b[q] (a row past N repeats a valid one; its sums are not used). While it runs it prefetches npf
 * lines from pf into L2, two per step of 16. */
#define DOT_KERNEL(MR)                                                                                         \
    static V512 void dot_##MR(const float *a, int64_t lda, const float *const *b, int64_t k0, int64_t k1,     \
                              float *s, const char *pf, int64_t npf)                                          \
    {                                                                                                          \
        __m512 acc[MR][NR];                                                                                    \
        _Pragma("GCC unroll 4") for (int r = 0; r < MR; r++)                                                   \
            _Pragma("GCC unroll 6") for (int q = 0; q < NR; q++) acc[r][q] = _mm512_setzero_ps();              \
        const float *b0 = b[0], *b1 = b[1], *b2 = b[2], *b3 = b[3], *b4 = b[4], *b5 = b[5];                    \
        for (int64_t k = k0, l = 0; k < k1; k += 16, l += 2) {                                                 \
            if (l < npf) _mm_prefetch(pf + 64 * l, _MM_HINT_T1);                                               \
            if (l + 1 < npf) _mm_prefetch(pf + 64 * (l + 1), _MM_HINT_T1);                                     \
            __mmask16 mk = nb__lanes_left(k1 - k);                                                             \
            __m512 bv[NR] = {_mm512_maskz_loadu_ps(mk, b0 + k), _mm512_maskz_loadu_ps(mk, b1 + k),             \
                             _mm512_maskz_loadu_ps(mk, b2 + k), _mm512_maskz_loadu_ps(mk, b3 + k),             \
                             _mm512_maskz_loadu_ps(mk, b4 + k), _mm512_maskz_loadu_ps(mk, b5 + k)};            \
            _Pragma("GCC unroll 4") for (int r = 0; r < MR; r++) {                                             \
                __m512 av = _mm512_maskz_loadu_ps(mk, a + r * lda + k);                                        \
                _Pragma("GCC unroll 6") for (int q = 0; q < NR; q++)                                           \
                    acc[r][q] = _mm512_fmadd_ps(av, bv[q], acc[r][q]);                                         \
            }                                                                                                  \
        }                                                                                                      \
        _Pragma("GCC unroll 4") for (int r = 0; r < MR; r++) {                                                 \
            __m128 lo = sum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);                                      \
            __m128 hi = sum4(acc[r][4], acc[r][5], _mm512_setzero_ps(), _mm512_setzero_ps());                  \
            _mm_storeu_ps(s + r * 8, _mm_add_ps(_mm_loadu_ps(s + r * 8), lo));                                 \
            _mm_storeu_ps(s + r * 8 + 4, _mm_add_ps(_mm_loadu_ps(s + r * 8 + 4), hi));                         \
        }                                                                                                      \
    }

DOT_KERNEL(1)
DOT_KERNEL(2)
DOT_KERNEL(3)
DOT_KERNEL(4)

typedef void (*dot_fn)(const float *, int64_t, const float *const *, int64_t, int64_t, float *, const char *,
                       int64_t);

/* One thread's columns [j0, j1) of C (rows of B), all of M and K. */
static V512 void dot_columns(int64_t m, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                             int64_t ldb, float beta, float *c, int64_t ldc, int64_t j0, int64_t j1)
{
    static const dot_fn fn[5] = {NULL, dot_1, dot_2, dot_3, dot_4};
    float s[GEMM_DOT_MAX_M * 8];
    int64_t groups = (m + 3) / 4, calls = groups * ((k + KC - 1) / KC);
    for (int64_t j = j0; j < j1; j += NR) {
        int nr = j1 - j < NR ? (int)(j1 - j) : NR;
        const float *rows[NR];
        for (int q = 0; q < NR; q++) rows[q] = b + (j + (q < nr ? q : 0)) * ldb;
        memset(s, 0, sizeof(float) * 8 * (size_t)m);
        /* the next 6 rows of B, [j + 6, j + 12) up to j1, as lines from the first's start */
        int64_t next = j1 - (j + NR) < NR ? j1 - (j + NR) : NR;
        int64_t lines = next > 0 ? ((next - 1) * ldb + k) * (int64_t)sizeof(float) / 64 + 1 : 0, done = 0;
        int64_t quota = calls ? (lines + calls - 1) / calls : 0;
        const char *pf = (const char *)(b + (j + NR) * ldb);
        for (int64_t kb = 0; kb < k; kb += KC) {
            int64_t ke = kb + KC < k ? kb + KC : k, most = 2 * ((ke - kb + 15) / 16);
            for (int64_t i = 0; i < m; i += 4) {
                int mr = m - i < 4 ? (int)(m - i) : 4;
                int64_t npf = lines - done < quota ? lines - done : quota;
                if (npf > most) npf = most;
                fn[mr](a + i * lda, lda, rows, kb, ke, s + i * 8, pf + 64 * done, npf);
                done += npf;
            }
        }
        for (int64_t i = 0; i < m; i++)
            for (int q = 0; q < nr; q++) {
                float *cp = c + i * ldc + j + q;
                *cp = beta != 0.0f ? alpha * s[i * 8 + q] + beta * *cp : alpha * s[i * 8 + q];
            }
    }
}

int nb_cpu_gemm_dot_max_m(void)
{
    return nb_cpu_avx512() ? GEMM_DOT_MAX_M : nb_cpu_avx2_fma() ? GEMM_DOT_AVX2_MAX_M : 0;
}

bool nb_cpu_gemm_dot(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                     int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (m < 1 || m > nb_cpu_gemm_dot_max_m() || n < 1) return false;
    if (!nb_cpu_avx512()) return nb__cpu_gemm_dot_avx2(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    int64_t sixes = (n + NR - 1) / NR;
    int nt = nb_cpu_gemm_threads(m, n, k, sixes);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++) {
        int64_t j0, j1;
        nb_cpu_gemm_share(sixes, NR, n, t, nt, &j0, &j1);
        if (j0 < j1) dot_columns(m, k, alpha, a, lda, b, ldb, beta, c, ldc, j0, j1);
    }
    return true;
}

#else

int nb_cpu_gemm_dot_max_m(void) { return 0; }

bool nb_cpu_gemm_dot(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                     int64_t ldb, float beta, float *c, int64_t ldc)
{
    (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb, (void)beta, (void)c, (void)ldc;
    return false;
}

#endif
