/* gemm_dot.c's NT product for few rows on AVX2 and FMA (no AVX-512): C[M, N] = alpha A[M, K]
 * B[N, K]^T + beta C, row-major with leading dimensions, M up to GEMM_DOT_AVX2_MAX_M. A fully
 * connected layer's forward on a small batch, Y = X W^T: FCN-S's at batch 64, where the libraries
 * pack the whole weight for only 64 rows.
 *
 * Each element of C is a dot product of two contiguous rows. A is packed once for all threads,
 * by blocks of KC of K, in pairs of rows ([step of 8][2][8], zeros past M and K). The
 * micro-kernel takes a pair against 6 rows of B over a block: per step, the pair's two vectors
 * and one of B at a time in registers, twelve FMAs into 12 vectors of partial sums (15 of the 16
 * registers), folded into C's 2 x 6 elements at the end of the block. The group's first pair
 * reads B's 6 rows where they are and packs them as it goes ([step][6][8], 12 KB, in L1 for the
 * other pairs). The threads split N, 6 rows of B at a time. Unlike the AVX-512 kernel (whose A of
 * up to 32 rows stays in L2 whole), A here may be larger than L2 (64 x 26752 floats is 6.8 MB),
 * so the loops keep a block of it there instead: each thread takes its columns JC at a time, and
 * for each block of K runs every group of 6 columns of the chunk over every pair (A's block, at
 * most 128 KB, in L2), adding into the chunk's C (M x JC, at most 126 KB, in L2). While one
 * group runs, its calls prefetch the next group's rows of the block into L2, a share each (each
 * row's block is on its own page).
 * On Zen 3, 1 thread, best of 9 (bench/gemm_ways.c), ms: NT 64x26752x2048 (FCN-S's last forward)
 * 89 against 111-121 on the libraries' ways, 64x2048x26752 86-94 against 88-117; the kernel alone
 * on blocks in L1 and L2 runs at 96-98 GFLOP/s (the FMA ceiling 101). Steps on the way there:
 * running all of K for each 6 columns, as the AVX-512 kernel does, read A from L3 for every 6
 * (41-45 GFLOP/s); B read in place hit 4 KB aliasing (its rows 8 KB apart at K = 2048); a
 * separate pass to pack B, and prefetch addresses found by division, cost a fifth of the time. */
#include <stdint.h>
#include <string.h>

#include "cpu/blas_impl.h"
#include "cpu/cpu_impl.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "cpu/ops/exp256_impl.h"

#define V256 __attribute__((target("avx2,fma")))
#define NR 6   /* rows of B (columns of C) at a time */
#define KC 512 /* K per block: B's 6 x 512 packed, 12 KB, in L1; A's 64 x 512 packed, 128 KB, in L2 */
#define JC 504 /* columns of C per chunk: 84 groups of 6, C's 64 x 504 (126 KB) in L2 */

/* The sums of four vectors of 8, one per lane of the result. */
static inline V256 __m128 sum4(__m256 a, __m256 b, __m256 c, __m256 d)
{
    __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

/* The vector v, also stored at dst (aligned). */
static inline V256 __m256 stored(__m256 v, float *dst)
{
    _mm256_store_ps(dst, v);
    return v;
}

/* One step of 8 of a pair of A's rows (a, packed [2][8]) against 6 rows of B, B's vector q being
 * LOADB(q), into acc[2][NR]. Each vector of B is loaded once into a register (the empty asm keeps
 * GCC from folding it into both FMAs as a second load: Zen 3 loads two vectors a cycle). */
#define DOT_STEP(LOADB)                                                                                        \
    do {                                                                                                       \
        __m256 a0 = _mm256_load_ps(a), a1 = _mm256_load_ps(a + 8);                                            \
        _Pragma("GCC unroll 6") for (int q = 0; q < NR; q++) {                                                 \
            __m256 bv = LOADB(q);                                                                              \
            __asm__("" : "+x"(bv));                                                                            \
            acc[0][q] = _mm256_fmadd_ps(a0, bv, acc[0][q]);                                                    \
            acc[1][q] = _mm256_fmadd_ps(a1, bv, acc[1][q]);                                                    \
        }                                                                                                      \
    } while (0)

/* s[r * 8 + q] = acc[r][q]'s 8 lanes summed; s[r * 8 + 6, 7] = 0. */
static inline V256 void store_sums(__m256 acc[2][NR], float *s)
{
    _Pragma("GCC unroll 2") for (int r = 0; r < 2; r++) {
        _mm_storeu_ps(s + r * 8, sum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
        _mm_storeu_ps(s + r * 8 + 4, sum4(acc[r][4], acc[r][5], _mm256_setzero_ps(), _mm256_setzero_ps()));
    }
}

/* s[r * 8 + q] = A's row r . B's row q over a block of `steps` steps of 8, for a pair of A's rows
 * packed [step][2][8] at a and 6 rows of B packed [step][6][8] at b. The first npf steps
 * prefetch a line each from pf into L2. */
static V256 void dot_pair(const float *a, const float *b, int64_t steps, float *s, const char *pf, int64_t npf)
{
    __m256 acc[2][NR];
    _Pragma("GCC unroll 6") for (int q = 0; q < NR; q++) acc[0][q] = acc[1][q] = _mm256_setzero_ps();
#define PACKED(q) _mm256_load_ps(b + (q) * 8)
    for (int64_t t = 0; t < steps; t++, a += 16, b += NR * 8) {
        if (t < npf) _mm_prefetch(pf + 64 * t, _MM_HINT_T1);
        DOT_STEP(PACKED);
    }
#undef PACKED
    store_sums(acc, s);
}

/* dot_pair for the group's first pair, reading B's 6 rows over [k0, k1) where they are (rows[q])
 * and packing them into b as it goes ([step][6][8], zeros past k1), so that the pack costs no
 * pass of its own and its loads from memory overlap the FMAs. */
static V256 void dot_pair_packing(const float *a, const float *const *rows, int64_t k0, int64_t k1, float *b,
                                  float *s, const char *pf, int64_t npf)
{
    __m256 acc[2][NR];
    _Pragma("GCC unroll 6") for (int q = 0; q < NR; q++) acc[0][q] = acc[1][q] = _mm256_setzero_ps();
    int64_t k = k0, t = 0;
#define COPIED(q) stored(_mm256_loadu_ps(rows[q] + k), b + (q) * 8)
#define COPIED_TAIL(q) stored(_mm256_maskload_ps(rows[q] + k, mk), b + (q) * 8)
    for (; k + 8 <= k1; k += 8, t++, a += 16, b += NR * 8) {
        if (t < npf) _mm_prefetch(pf + 64 * t, _MM_HINT_T1);
        DOT_STEP(COPIED);
    }
    if (k < k1) {
        __m256i mk = nb_lanes256(k1 - k);
        DOT_STEP(COPIED_TAIL);
    }
#undef COPIED
#undef COPIED_TAIL
    store_sums(acc, s);
}

/* c[0, nr) = alpha s + beta c (beta 0: c not read), as the first block of K writes C and the
 * later ones (beta 1) add to it. */
static inline void fold(float *c, const float *s, int nr, float alpha, float beta)
{
    __m128 va = _mm_set1_ps(alpha), vb = _mm_set1_ps(beta);
    if (nr == NR) {
        __m128 lo = _mm_mul_ps(va, _mm_loadu_ps(s)), hi = _mm_mul_ps(va, _mm_loadu_ps(s + 4));
        if (beta != 0.0f) {
            lo = _mm_add_ps(lo, _mm_mul_ps(vb, _mm_loadu_ps(c)));
            hi = _mm_add_ps(hi, _mm_mul_ps(vb, _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(c + 4)))));
        }
        _mm_storeu_ps(c, lo);
        _mm_storel_epi64((__m128i *)(c + 4), _mm_castps_si128(hi)); /* two floats, unaligned */
        return;
    }
    for (int q = 0; q < nr; q++) c[q] = beta != 0.0f ? alpha * s[q] + beta * c[q] : alpha * s[q];
}

/* Packs a pair of x's rows (the second when n > 1; else zeros) over [k0, k1) as [step][2][8],
 * zeros past k1 up to the block's steps of 8. */
static void pack_pair(const float *x, int64_t ld, int64_t n, int64_t k0, int64_t k1, float *out)
{
    int64_t steps = (k1 - k0 + 7) / 8;
    for (int r = 0; r < 2; r++) {
        const float *row = r < n ? x + r * ld : NULL;
        for (int64_t t = 0; t < steps; t++) {
            float *o = out + (t * 2 + r) * 8;
            int64_t k = k0 + 8 * t, w = k1 - k < 8 ? k1 - k : 8;
            if (row && w == 8) memcpy(o, row + k, 8 * sizeof(float));
            else
                for (int64_t e = 0; e < 8; e++) o[e] = row && e < w ? row[k + e] : 0.0f;
        }
    }
}

/* Where the block of K from kb starts in A packed whole: the blocks one after another, each its
 * pairs of rows [pair][step][2][8] (aligned as the allocation: every offset a multiple of 16). */
static size_t a_block(int64_t pairs, int64_t kb)
{
    return (size_t)(pairs * 16 * kb / 8);
}

/* One thread's columns [j0, j1) of C (rows of B), all of M and K, with A packed (ap) and a
 * scratch bp of KC / 8 * 48 floats for the 6 rows of B in use. */
static void dot_columns(int64_t m, int64_t k, float alpha, const float *ap, const float *b, int64_t ldb, float beta,
                        float *c, int64_t ldc, int64_t j0, int64_t j1, float *bp)
{
    float s[2 * 8];
    int64_t pairs = (m + 1) / 2;
    for (int64_t jc = j0; jc < j1; jc += JC) {
        int64_t je = jc + JC < j1 ? jc + JC : j1;
        for (int64_t kb = 0; kb == 0 || kb < k; kb += KC) {
            int64_t ke = kb + KC < k ? kb + KC : k, steps = (ke - kb + 7) / 8;
            const float *apk = ap + a_block(pairs, kb);
            /* lines of a row's block to prefetch, and how many each pair's call takes */
            int64_t lines = ((ke - kb) * (int64_t)sizeof(float) + 63) / 64 + 1, quota = (NR * lines + pairs - 1) / pairs;
            for (int64_t j = jc; j < je; j += NR) {
                int nr = je - j < NR ? (int)(je - j) : NR;
                const float *rows[NR];
                for (int q = 0; q < NR; q++) rows[q] = b + (j + (q < nr ? q : 0)) * ldb;
                /* the next group: the chunk's next 6, or its first 6 in the next block of K */
                bool more = j + NR < je || ke < k;
                int64_t nj = j + NR < je ? j + NR : jc, nkb = j + NR < je ? kb : ke;
                int64_t nn = more ? (je - nj < NR ? je - nj : NR) : 0, pr = 0, pl = 0; /* next row, line */
                for (int64_t i = 0; i < m; i += 2) {
                    /* this call's lines: up to quota, within one row */
                    int64_t npf = pr < nn ? (lines - pl < quota ? lines - pl : quota) : 0;
                    const char *pf = (const char *)(b + (nj + pr) * ldb + nkb) + 64 * pl;
                    if ((pl += npf) == lines) pl = 0, pr++;
                    if (i == 0) dot_pair_packing(apk, rows, kb, ke, bp, s, pf, npf);
                    else dot_pair(apk + i / 2 * steps * 16, bp, steps, s, pf, npf);
                    for (int64_t r = 0; r < 2 && i + r < m; r++)
                        fold(c + (i + r) * ldc + j, s + r * 8, nr, alpha, kb ? 1.0f : beta);
                }
            }
        }
    }
}

bool nb__cpu_gemm_dot_avx2(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                           int64_t ldb, float beta, float *c, int64_t ldc)
{
    int64_t sixes = (n + NR - 1) / NR, pairs = (m + 1) / 2, k8 = (k + 7) / 8 * 8;
    int nt = nb_cpu_gemm_threads(m, n, k, sixes);
    size_t a_floats = a_block(pairs, k8), b_floats = KC / 8 * NR * 8;
    size_t bytes = (a_floats + (size_t)nt * b_floats) * sizeof(float);
    float *ap = nb_cpu_alloc(bytes);
    if (!ap) return false;
    /* A's blocks packed by all threads at once, a block each in turn (its pairs [step][2][8]) */
    int64_t blocks = k ? (k + KC - 1) / KC : 0;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t x = 0; x < blocks * pairs; x++) {
        int64_t kb = x / pairs * KC, i = 2 * (x % pairs), ke = kb + KC < k ? kb + KC : k;
        pack_pair(a + i * lda, lda, m - i, kb, ke, ap + a_block(pairs, kb) + i / 2 * ((ke - kb + 7) / 8) * 16);
    }
    float *bp0 = ap + a_floats;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++) {
        int64_t j0, j1;
        nb_cpu_gemm_share(sixes, NR, n, t, nt, &j0, &j1);
        if (j0 < j1) dot_columns(m, k, alpha, ap, b, ldb, beta, c, ldc, j0, j1, bp0 + (size_t)t * b_floats);
    }
    nb_cpu_free(ap, bytes);
    return true;
}

#else

bool nb__cpu_gemm_dot_avx2(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                           int64_t ldb, float beta, float *c, int64_t ldc)
{
    (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb, (void)beta, (void)c, (void)ldc;
    return false;
}

#endif
