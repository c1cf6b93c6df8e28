/* nabla's own float32 NN product for few rows, C[M, N] = alpha A[M, K] B[K, N] + beta C, every
 * matrix row-major with its leading dimension, M up to GEMM_ROWS_MAX_M: a fully connected
 * layer's input gradient on a small batch (dX = dY W), where B, the weight, is large and each of
 * its elements meets only M rows of A. The libraries' kernels read B at 10-17 GB/s there (an
 * Intel Xeon, 2 threads: NN 16x9216x4096 14.5 ms on oneDNN's sgemm, 8.9 on MKL); this one reads
 * each B element from memory once. The threads split N; each takes its columns 1024 at a time
 * (NCHUNK) and runs over K in blocks of KC, packing the block's rows of B (read whole and in
 * order), and within a block over its columns 64 at a time, the block of B (KC x 64, 16 KB)
 * staying in L1 while groups of up to 6 rows of C (6 x 4 vectors of accumulators) run over it;
 * C's rows of the chunk stay in L2 between K blocks. While a K block runs, the group kernels
 * prefetch the next block's rows of B into L2, a share each: every row of B is its own page, on
 * which the hardware's prefetchers start over (the Xeon, NN 64x2048x26752, 2 threads: 30.3 ms
 * without, 26.5 with; 16x9216x4096 at 1 thread, with the chunks: 24.7 to 16.9). The columns past
 * a multiple of 16 are masked.
 * An AVX-512 kernel: gemm.c offers it as a way of the tuner only where nb_cpu_avx512(). */
#include <stdint.h>

#include "cpu/blas_impl.h"
#include "cpu/cpu_impl.h"

#if defined(__x86_64__)
#include "cpu/ops/gemm_own_impl.h"

#define KC 64 /* K per block: B's block of 64 columns, 16 KB, stays in L1; a thread's packed K block in L2 */
#define NCHUNK 1024 /* columns a thread runs all of K over: a K block of them is 256 KB */

/* C[r][j0 .. j0 + 64) for rows r of one group, over k in [k0, k1): with first (the K block
 * starting at 0) C's old values enter as beta C (not read when beta is 0), otherwise the sums so
 * far; each block adds alpha A B. mask[v]: the vector v's valid lanes (all 16, fewer in the last,
 * 0 past N). */
#define ROWS_KERNEL(MR)                                                                                      \
    static V512 void rows_##MR(const float *a, int64_t lda, const float *b, float *c, int64_t ldc,              \
                               int64_t k0, int64_t k1, const __mmask16 *mask, float alpha, float beta, bool first, \
                               const char *pf, int npf)                                                     \
    {                                                                                                       \
        __m512 acc[MR][4];                                                                                  \
        for (int r = 0; r < MR; r++)                                                                        \
            for (int v = 0; v < 4; v++) acc[r][v] = _mm512_setzero_ps();                                    \
        for (int64_t k = k0; k < k1; k++) {                                                                 \
            if (k - k0 < npf) _mm_prefetch(pf + 64 * (k - k0), _MM_HINT_T1);                                \
            const float *bk = b + (k - k0) * NCOL;                                                          \
            __m512 b0 = _mm512_load_ps(bk), b1 = _mm512_load_ps(bk + 16);                                   \
            __m512 b2 = _mm512_load_ps(bk + 32), b3 = _mm512_load_ps(bk + 48);                              \
            for (int r = 0; r < MR; r++) {                                                                  \
                __m512 x = _mm512_set1_ps(a[r * lda + k]);                                                  \
                acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);                                              \
                acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);                                              \
                acc[r][2] = _mm512_fmadd_ps(x, b2, acc[r][2]);                                              \
                acc[r][3] = _mm512_fmadd_ps(x, b3, acc[r][3]);                                              \
            }                                                                                               \
        }                                                                                                   \
        __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);                                       \
        for (int r = 0; r < MR; r++)                                                                        \
            for (int v = 0; v < 4; v++) {                                                                   \
                float *cp = c + r * ldc + 16 * v;                                                           \
                __m512 old = first && beta == 0.0f ? _mm512_setzero_ps()                                    \
                             : first ? _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(mask[v], cp))                \
                                     : _mm512_maskz_loadu_ps(mask[v], cp);                                  \
                _mm512_mask_storeu_ps(cp, mask[v], _mm512_fmadd_ps(va, acc[r][v], old));                    \
            }                                                                                               \
    }

ROWS_KERNEL(1)
ROWS_KERNEL(2)
ROWS_KERNEL(3)
ROWS_KERNEL(4)
ROWS_KERNEL(5)
ROWS_KERNEL(6)

typedef void (*rows_fn)(const float *, int64_t, const float *, float *, int64_t, int64_t, int64_t, const __mmask16 *,
                        float, float, bool, const char *, int);

/* One thread's chunk of columns [j0, j1) of C, all rows, all of K, with pk (KC x (j1 - j0 rounded
 * up to 64) floats, 64-byte aligned) to pack each K block of B into: rows of B read whole and in order
 * (what the prefetchers follow), laid out as column blocks of KC x 64, zeros past N. */
static V512 void rows_columns(int64_t m, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                              int64_t ldb, float beta, float *c, int64_t ldc, int64_t j0, int64_t j1, float *pk)
{
    static const rows_fn fn[7] = {NULL, rows_1, rows_2, rows_3, rows_4, rows_5, rows_6};
    int64_t nblk = (j1 - j0 + NCOL - 1) / NCOL;
    for (int64_t k0 = 0; k0 == 0 || k0 < k; k0 += KC) {
        int64_t k1 = k0 + KC < k ? k0 + KC : k;
        for (int64_t kk = k0; kk < k1; kk++) {
            const float *row = b + kk * ldb + j0;
            for (int64_t blk = 0; blk < nblk; blk++) {
                float *dst = pk + (blk * KC + (kk - k0)) * NCOL;
                for (int v = 0; v < 4; v++) {
                    __mmask16 mk = nb__lanes_left(j1 - (j0 + blk * NCOL + 16 * v));
                    _mm512_store_ps(dst + 16 * v, _mm512_maskz_loadu_ps(mk, row + blk * NCOL + 16 * v));
                }
            }
        }
        /* the next K block's rows of B (this thread's columns) go into L2 while this one runs, a
         * share of their lines prefetched by each group's kernel: each row is its own page, on
         * which the hardware's prefetchers would start over when the packing reads it */
        int64_t line_row = (j1 - j0 + 15) / 16, pf_k = k1, pf_l = 0, pf_end = k1 + KC < k ? k1 + KC : k;
        int64_t calls = nblk * ((m + 5) / 6), quota = (line_row * (pf_end - k1) + calls - 1) / calls;
        if (quota > KC) quota = KC;
        for (int64_t blk = 0; blk < nblk; blk++) {
            int64_t j = j0 + blk * NCOL;
            __mmask16 mask[4];
            nb__block_lanes(j, j1, mask);
            /* groups of 6 rows, the last 1-6 */
            for (int64_t i = 0; i < m; i += 6) {
                int mr = m - i < 6 ? (int)(m - i) : 6;
                int npf = 0;
                const char *pf = NULL;
                if (pf_k < pf_end) {
                    npf = (int)(quota < line_row - pf_l ? quota : line_row - pf_l);
                    pf = (const char *)(b + pf_k * ldb + j0 + 16 * pf_l);
                    pf_l += npf;
                    if (pf_l == line_row) pf_k++, pf_l = 0;
                }
                fn[mr](a + i * lda, lda, pk + blk * KC * NCOL, c + i * ldc + j, ldc, k0, k1, mask, alpha, beta,
                       k0 == 0, pf, npf);
            }
        }
        if (k == 0) break;
    }
}

bool nb_cpu_gemm_rows(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                      int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (!nb_cpu_avx512() || m < 1 || m > GEMM_ROWS_MAX_M || n < 1) return false;
    /* the threads' columns: whole blocks of 64, as even as they go */
    int64_t blocks = (n + NCOL - 1) / NCOL;
    int nt = nb_cpu_gemm_threads(m, n, k, blocks);
    int64_t most = (blocks + nt - 1) / nt < NCHUNK / NCOL ? (blocks + nt - 1) / nt : NCHUNK / NCOL;
    size_t per = (size_t)most * KC * NCOL * sizeof(float); /* a thread's packed K block of a chunk */
    float *pk = nb_cpu_alloc(per * (size_t)nt);
    if (!pk) return false;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++) {
        int64_t j0, j1;
        nb_cpu_gemm_share(blocks, NCOL, n, t, nt, &j0, &j1);
        for (int64_t jc = j0; jc < j1; jc += NCHUNK) /* C's chunk stays in L2 over all of K */
            rows_columns(m, k, alpha, a, lda, b, ldb, beta, c, ldc, jc, jc + NCHUNK < j1 ? jc + NCHUNK : j1,
                         pk + (size_t)t * (per / sizeof(float)));
    }
    nb_cpu_free(pk, per * (size_t)nt);
    return true;
}

#else

bool nb_cpu_gemm_rows(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                      int64_t ldb, float beta, float *c, int64_t ldc)
{
    (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb, (void)beta, (void)c, (void)ldc;
    return false;
}

#endif
