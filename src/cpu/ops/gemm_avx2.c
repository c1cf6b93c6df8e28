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
 * OpenBLAS 0.80, oneDNN 1.45), [128, 1024] x [1024, 256] 0.75 (OpenBLAS 0.79, oneDNN 0.77).
 *
 * The same loops are also a product of their own (nb_cpu_gemm_avx2): op(B) of either layout
 * packed times alpha for the call, the rows split across the threads in groups of 6 that share
 * the panels, beta 1 by adding the first block too (another beta scales C first). The gemm tuner
 * (gemm.c) offers it for NN and NT products of many rows, up to 2048 columns and a short K, on
 * CPUs without AVX-512: each group of rows reads its A once, the panels stay in L2 and C is
 * written once, where the libraries pack A and run their edge cases for a K of 64 to 800. Zen 3,
 * best of 9, ms, 1 thread / 2 threads (bench/gemm_ways.c), this kernel against OpenBLAS and
 * oneDNN's sgemm: NT 50176x256x64 19.6 / 12.2 against 30.4 / 27.8 and 19.8 / 13.3, NN
 * 50176x256x64 19.9 / 12.7 against 28.2 / 24.6 and 26.2 / 14.0, NT 14336x32x288 5.4 / 2.6 against
 * 6.3 / 4.4 and 6.5 / 3.1; it loses some (NT 5194x64x800 9.3 against 7.8 on oneDNN at 1 thread),
 * hence the timing. With many columns a tile's six rows of C lie in more pages than the TLB
 * holds: NT 4096x10000x256 (the LSTM's decoder, with its bias) took 343 ms against oneDNN's 246. */
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

bool nb_cpu_gemm_avx2_offered(int64_t m, int64_t n, int64_t k)
{
    return m >= GEMM_AVX2_MIN_M && n <= GEMM_AVX2_MAX_N && k <= GEMM_AVX2_MAX_K && nb_cpu_avx2_fma() &&
           !nb_cpu_avx512();
}

#if defined(__x86_64__)
#include <immintrin.h>

/* op(B) [k, n] times alpha into panels: tb 'N', b is [k, n] (ldb); 'T', b is [n, k] (ldb), each
 * panel's 16 rows of b written down its columns. */
static nb_cpu_avx2_b *pack(char tb, int64_t k, int64_t n, float alpha, const float *b, int64_t ldb)
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
        if (tb == 'T') {
            if (nr < NR) memset(d, 0, (size_t)(k * NR) * sizeof(float));
            for (int64_t v = 0; v < nr; v++) {
                const float *row = b + (j0 + v) * ldb;
                for (int64_t q = 0; q < k; q++) d[q * NR + v] = alpha * row[q];
            }
            continue;
        }
        for (int64_t q = 0; q < k; q++) {
            if (alpha == 1.0f) memcpy(d + q * NR, b + q * ldb + j0, (size_t)nr * sizeof(float));
            else
                for (int64_t v = 0; v < nr; v++) d[q * NR + v] = alpha * b[q * ldb + j0 + v];
            memset(d + q * NR + nr, 0, (size_t)(NR - nr) * sizeof(float));
        }
    }
    return p;
}

nb_cpu_avx2_b *nb_cpu_avx2_pack_b(int64_t k, int64_t n, const float *b, int64_t ldb)
{
    return pack('N', k, n, 1.0f, b, ldb);
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

/* C [m, n] = A B with B packed, or with add C += A B. */
static void rows(int64_t m, const float *a, int64_t lda, const nb_cpu_avx2_b *b, float *c, int64_t ldc, bool add)
{
    float pa[MR * KC] __attribute__((aligned(32))); /* the last rows, fewer than 6, with zero rows below */
    float part[MR * NR] __attribute__((aligned(32))); /* a tile cut by M's or N's end */
    int64_t k = b->k, n = b->n;
    for (int64_t g = 0; g < b->panels; g += NG) {
        int64_t g1 = g + NG < b->panels ? g + NG : b->panels;
        for (int64_t q0 = 0; q0 < k; q0 += KC) {
            int64_t kc = k - q0 < KC ? k - q0 : KC;
            bool first = q0 == 0 && !add;
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

void nb_cpu_gemm_avx2_packed(int64_t m, const float *a, int64_t lda, const nb_cpu_avx2_b *b, float *c, int64_t ldc)
{
    rows(m, a, lda, b, c, ldc, false);
}

bool nb_cpu_gemm_avx2(char tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                      const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (!nb_cpu_avx2_fma()) return false;
    if (m < 1 || n < 1) return true;
    nb_cpu_avx2_b *p = k > 0 ? pack(tb, k, n, alpha, b, ldb) : NULL;
    if (k > 0 && !p) return false;
    /* the rows in groups of MR split across the threads, B's panels shared */
    int64_t groups = (m + MR - 1) / MR;
    int nt = nb_cpu_gemm_threads(m, n, k, groups);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++) {
        int64_t r0, r1;
        nb_cpu_gemm_share(groups, MR, m, t, nt, &r0, &r1);
        if (k == 0 || (beta != 0 && beta != 1)) /* C = beta C first (beta 0: never read) */
            for (int64_t r = r0; r < r1; r++)
                for (int64_t v = 0; v < n; v++) c[r * ldc + v] = beta == 0 ? 0.0f : beta * c[r * ldc + v];
        if (k > 0 && r1 > r0) rows(r1 - r0, a + r0 * lda, lda, p, c + r0 * ldc, ldc, beta != 0);
    }
    nb_cpu_avx2_b_free(p);
    return true;
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

bool nb_cpu_gemm_avx2(char tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                      const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb, (void)beta, (void)c,
        (void)ldc;
    return false;
}

#endif
