/* nabla's own float32 NN product on AVX2 and FMA with B packed once, C[M, N] = A[M, K] B[K, N]
 * (row-major, leading dimensions; C written, never read), for many products with one B on few
 * rows: the LSTM's step product with W_hh through a run of steps (src/cpu/ops/rnn.c) on CPUs
 * without AVX-512. There the libraries repack B at every call, and oneDNN's sgemm, which the cell
 * kernel calls on each thread's rows inside its OpenMP region, took 0.72 ms a step for
 * [64, 256] x [256, 1024] on Zen 3 (OpenBLAS 0.42, this kernel 0.37).
 *
 * B is packed in panels of 16 columns, each [K][16] (zeros past N). The loops are GotoBLAS's:
 * per group of 16 panels (256 columns) and per block of 256 k, at most 256 KB of B, kept in L2
 * while each group of 6 rows of A runs over the group's panels, its six rows (6 KB) in L1 and
 * read in place (a last group of fewer rows is copied with zero rows below; a first version that
 * packed every group and did not unroll k ran at 87 GFLOP/s where this one runs at 92). The
 * micro-kernel holds a 6 x 16 tile of C in 12 registers: per k two loads of B, six broadcasts of
 * A and twelve FMAs, six cycles on two FMA pipes. The first k block stores the tile, the later
 * ones add to it. Each element's sum is thus made the same way
 * whichever rows share its tile, so a thread's rows give the bits of the whole product. Alone, one
 * thread, best of 9 runs of 32 products on Zen 3: [128, 256] x [256, 1024] 0.73 ms (92 GFLOP/s;
 * OpenBLAS 0.80, oneDNN 1.45), [128, 1024] x [1024, 256] 0.75 (OpenBLAS 0.79, oneDNN 0.77). */
#include <stdint.h>
#include <string.h>

#include "cpu/blas_impl.h"
#include "cpu/cpu_impl.h"

#define MR 6    /* rows of a tile */
#define NR 16   /* columns of a panel: two vectors */
#define KC 256  /* k per block: a panel's block 16 KB, in L1 */
#define NG 16   /* panels per group: with KC, 256 KB of B in L2 */

struct nb_cpu_avx2_b {
    int64_t k, n, panels;
    size_t bytes;
    float *data; /* panels * k * NR floats */
};

void nb_cpu_avx2_b_free(nb_cpu_avx2_b *p)
{
    if (!p) return;
    nb_cpu_free(p->data, p->bytes);
    nb_cpu_free(p, sizeof *p);
}

#if defined(__x86_64__)
#include <immintrin.h>

nb_cpu_avx2_b *nb_cpu_avx2_pack_b(int64_t k, int64_t n, const float *b, int64_t ldb)
{
    if (!nb_cpu_avx2_fma() || k < 1 || n < 1) return NULL;
    nb_cpu_avx2_b *p = nb_cpu_alloc(sizeof *p);
    if (!p) return NULL;
    p->k = k, p->n = n, p->panels = (n + NR - 1) / NR;
    p->bytes = (size_t)p->panels * (size_t)k * NR * sizeof(float);
    p->data = nb_cpu_alloc(p->bytes);
    if (!p->data) {
        nb_cpu_free(p, sizeof *p);
        return NULL;
    }
    for (int64_t j = 0; j < p->panels; j++) {
        int64_t j0 = j * NR, nr = n - j0 < NR ? n - j0 : NR;
        float *d = p->data + j * k * NR;
        for (int64_t q = 0; q < k; q++) {
            memcpy(d + q * NR, b + q * ldb + j0, (size_t)nr * sizeof(float));
            memset(d + q * NR + nr, 0, (size_t)(NR - nr) * sizeof(float));
        }
    }
    return p;
}

/* The 6 x 16 tile at c (ldc) from kc steps of A's six rows at a (lda) and b ([kc][16]): stored
 * where first, else added to what c holds. */
__attribute__((target("avx2,fma"))) static void tile(int64_t kc, const float *restrict a, int64_t lda,
                                                     const float *restrict b, float *restrict c, int64_t ldc,
                                                     bool first)
{
    __m256 s[MR][2];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) s[r][0] = s[r][1] = _mm256_setzero_ps();
    const float *a3 = a + 3 * lda;
#pragma GCC unroll 4
    for (int64_t q = 0; q < kc; q++, b += NR) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            __m256 x = _mm256_broadcast_ss(r < 3 ? a + r * lda + q : a3 + (r - 3) * lda + q);
            s[r][0] = _mm256_fmadd_ps(x, b0, s[r][0]);
            s[r][1] = _mm256_fmadd_ps(x, b1, s[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        float *cr = c + r * ldc;
        if (first) {
            _mm256_storeu_ps(cr, s[r][0]);
            _mm256_storeu_ps(cr + 8, s[r][1]);
        } else {
            _mm256_storeu_ps(cr, _mm256_add_ps(_mm256_loadu_ps(cr), s[r][0]));
            _mm256_storeu_ps(cr + 8, _mm256_add_ps(_mm256_loadu_ps(cr + 8), s[r][1]));
        }
    }
}

void nb_cpu_gemm_avx2_packed(int64_t m, const float *a, int64_t lda, const nb_cpu_avx2_b *b, float *c, int64_t ldc)
{
    float pa[MR * KC] __attribute__((aligned(32))); /* the last rows, fewer than 6, with zero rows below */
    float part[MR * NR] __attribute__((aligned(32))); /* a tile cut by M's or N's end */
    int64_t k = b->k, n = b->n;
    for (int64_t g = 0; g < b->panels; g += NG) {
        int64_t g1 = g + NG < b->panels ? g + NG : b->panels;
        for (int64_t q0 = 0; q0 < k; q0 += KC) {
            int64_t kc = k - q0 < KC ? k - q0 : KC;
            bool first = q0 == 0;
            for (int64_t i = 0; i < m; i += MR) {
                int mr = m - i < MR ? (int)(m - i) : MR;
                const float *ai = a + i * lda + q0;
                int64_t la = lda;
                if (mr < MR) {
                    for (int r = 0; r < MR; r++)
                        for (int64_t q = 0; q < kc; q++) pa[r * KC + q] = r < mr ? ai[r * lda + q] : 0.0f;
                    ai = pa, la = KC;
                }
                for (int64_t j = g; j < g1; j++) {
                    const float *pb = b->data + j * k * NR + q0 * NR;
                    int64_t j0 = j * NR, nr = n - j0 < NR ? n - j0 : NR;
                    float *ct = c + i * ldc + j0;
                    if (mr == MR && nr == NR) {
                        tile(kc, ai, la, pb, ct, ldc, first);
                        continue;
                    }
                    tile(kc, ai, la, pb, part, NR, true);
                    for (int r = 0; r < mr; r++)
                        for (int64_t v = 0; v < nr; v++)
                            ct[r * ldc + v] = first ? part[r * NR + v] : ct[r * ldc + v] + part[r * NR + v];
                }
            }
        }
    }
}

#else

nb_cpu_avx2_b *nb_cpu_avx2_pack_b(int64_t k, int64_t n, const float *b, int64_t ldb)
{
    (void)k, (void)n, (void)b, (void)ldb;
    return NULL;
}

void nb_cpu_gemm_avx2_packed(int64_t m, const float *a, int64_t lda, const nb_cpu_avx2_b *b, float *c, int64_t ldc)
{
    (void)m, (void)a, (void)lda, (void)b, (void)c, (void)ldc;
}

#endif
