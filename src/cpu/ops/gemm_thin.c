/* nabla's own float32 TN product with a short inner dimension, C[M, N] = alpha A^T B + beta C,
 * A [K, M] and B [K, N] row-major with their leading dimensions, K up to GEMM_THIN_MAX_K: a fully
 * connected layer's weight gradient on a small batch (dW = dY^T X), where C, the size of the
 * weight, is large and each of its elements is a sum of only K products. The libraries' kernels
 * run these at 75-110 GFLOP/s a core on an Intel Xeon whose FMA peak is 241 (TN 26752x2048x64:
 * OpenBLAS 64 ms at 1 thread); this one at about 155.
 *
 * The threads split M (N where M is short). Each packs its rows of A^T, MB at a time, into groups
 * of 6 rows laid out [group][K][6] (A's rows read whole and in order, the groups then read in
 * order from L2); per block of 64 columns (B's K x 64, at most 16 KB, in L1) every group of 6
 * rows runs over all of K at once, its 6 x 4 vectors of sums in registers, and C is written once.
 * Where beta is 0 and C is larger than a core's L2, whole aligned vectors of C are written with
 * streaming stores: C is not read for ownership first, which on that Xeon halved the product's
 * time (26752x2048x64 at 2 threads: 22.8 ms against 34.1 with plain stores). An AVX-512 kernel:
 * gemm.c offers it as a way of the tuner only where nb_cpu_avx512(). */
#include <stdint.h>

#include "cpu/blas_impl.h"
#include "cpu/cpu_impl.h"

#if defined(__x86_64__)
#include "cpu/ops/gemm_own_impl.h"

#define MR 6 /* rows per group: 6 x 4 vectors of sums, 24 of the 32 registers */
#define MB 768 /* rows packed at a time: 768 x 64 floats, 192 KB, in L2 */
#define STREAM_BYTES ((int64_t)2 << 20) /* C past this is not kept in cache: streaming stores */

/* The group at pa ([K][6], zeros past the last row) times B's columns [j, j + 64) at b: C's rows
 * r < mr at c. mask[v]: vector v's valid lanes (all 16, fewer in the last, 0 past N). The loops
 * are unrolled so that the sums stay in registers. */
static V512 void thin_group(const float *pa, const float *b, int64_t ldb, float *c, int64_t ldc, int64_t k, int mr,
                            const __mmask16 *mask, float alpha, float beta, bool stream)
{
    __m512 acc[MR][4];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) acc[r][v] = _mm512_setzero_ps();
    for (int64_t p = 0; p < k; p++) {
        const float *bp = b + p * ldb, *ap = pa + p * MR;
        __m512 b0 = _mm512_maskz_loadu_ps(mask[0], bp), b1 = _mm512_maskz_loadu_ps(mask[1], bp + 16);
        __m512 b2 = _mm512_maskz_loadu_ps(mask[2], bp + 32), b3 = _mm512_maskz_loadu_ps(mask[3], bp + 48);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            __m512 x = _mm512_set1_ps(ap[r]);
            acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
            acc[r][2] = _mm512_fmadd_ps(x, b2, acc[r][2]);
            acc[r][3] = _mm512_fmadd_ps(x, b3, acc[r][3]);
        }
    }
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        if (r >= mr) break;
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            float *cp = c + r * ldc + 16 * v;
            if (beta != 0.0f) {
                __m512 old = _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(mask[v], cp));
                _mm512_mask_storeu_ps(cp, mask[v], _mm512_fmadd_ps(va, acc[r][v], old));
            } else if (stream && mask[v] == (__mmask16)0xFFFF && ((uintptr_t)cp & 63) == 0)
                _mm512_stream_ps(cp, _mm512_mul_ps(va, acc[r][v]));
            else
                _mm512_mask_storeu_ps(cp, mask[v], _mm512_mul_ps(va, acc[r][v]));
        }
    }
}

/* C's rows [i0, i1) and columns [j0, j1), with pa ((MB + MR) x K floats) to pack A^T into. */
static V512 void thin_part(int64_t k, float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                           float beta, float *c, int64_t ldc, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                           float *pa, bool stream)
{
    for (int64_t ib = i0; ib < i1; ib += MB) {
        int64_t ie = ib + MB < i1 ? ib + MB : i1, rows = ie - ib, groups = (rows + MR - 1) / MR;
        for (int64_t p = 0; p < k; p++) { /* A's row p, whole and in order, into each group's row p */
            const float *ar = a + p * lda + ib;
            for (int64_t i = 0; i < groups * MR; i++) pa[((i / MR) * k + p) * MR + i % MR] = i < rows ? ar[i] : 0.0f;
        }
        for (int64_t j = j0; j < j1; j += NCOL) {
            __mmask16 mask[4];
            nb__block_lanes(j, j1, mask);
            for (int64_t g = 0; g < groups; g++) {
                int64_t i = ib + g * MR;
                int mr = ie - i < MR ? (int)(ie - i) : MR;
                thin_group(pa + g * k * MR, b + j, ldb, c + i * ldc + j, ldc, k, mr, mask, alpha, beta, stream);
            }
        }
    }
    if (stream) _mm_sfence(); /* the streaming stores are seen before the threads' barrier */
}

bool nb_cpu_gemm_thin_k(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                        int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (!nb_cpu_avx512() || k > GEMM_THIN_MAX_K || m < 1 || n < 1) return false;
    int nt = nb_cpu_threads_for(m * n * (k ? k : 1), 1 << 18);
    bool by_rows = m >= 16 * MR * nt; /* else the threads split the columns, 64 at a time */
    int64_t blocks = (n + NCOL - 1) / NCOL;
    if (!by_rows && nt > blocks) nt = (int)blocks;
    if (nt < 1) nt = 1;
    size_t per = (size_t)(MB + MR) * (size_t)(k ? k : 1);
    float *pa = nb_cpu_alloc(per * sizeof(float) * (size_t)nt);
    if (!pa) return false;
    bool stream = m * n * (int64_t)sizeof(float) > STREAM_BYTES;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++) {
        float *mine = pa + (size_t)t * per;
        if (by_rows) {
            int64_t i0, i1;
            nb_cpu_gemm_share((m + MR - 1) / MR, MR, m, t, nt, &i0, &i1);
            if (i0 < i1) thin_part(k, alpha, a, lda, b, ldb, beta, c, ldc, i0, i1, 0, n, mine, stream);
        } else {
            int64_t j0, j1;
            nb_cpu_gemm_share(blocks, NCOL, n, t, nt, &j0, &j1);
            if (j0 < j1) thin_part(k, alpha, a, lda, b, ldb, beta, c, ldc, 0, m, j0, j1, mine, stream);
        }
    }
    nb_cpu_free(pa, per * sizeof(float) * (size_t)nt);
    return true;
}

#else

bool nb_cpu_gemm_thin_k(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                        int64_t ldb, float beta, float *c, int64_t ldc)
{
    (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb, (void)beta, (void)c, (void)ldc;
    return false;
}

#endif
