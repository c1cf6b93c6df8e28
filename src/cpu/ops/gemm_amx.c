/* nabla's float32 product on Intel's AMX tiles: C = alpha op(A) op(B) (+ a bias row), row-major,
 * op N or T, computed to float32's accuracy from bfloat16 products ("bf16x6").
 *
 * Why. A core with AMX (Sapphire Rapids and later) multiplies bfloat16 tiles at 1024 flops a
 * cycle against AVX-512's 64 float32 flops: the 2-vCPU Xeon this was written on measured 3.1
 * TFLOP/s of TDPBF16PS against an sgemm peak of 163-196 GFLOP/s on one core. Every float32 x is
 * exactly x0 + x1 + x2 with three bfloat16s (8 significant bits each, rounded to nearest:
 * |x1| <= 2^-8 |x|, |x2| <= 2^-16 |x|), and the product of two bfloat16s is exact in float32. So
 *     a b = a0 b0 + (a0 b1 + a1 b0) + (a0 b2 + a1 b1 + a2 b0) + [a1 b2 + a2 b1 + a2 b2]
 * and the first six terms, each exact, accumulated in float32 on the tiles, leave out the
 * bracket, each of its terms at most 2^-24 |a b| (float32's rounding of one product); the sums
 * then round as an sgemm's do. tests/test_gemm_amx.c checks the error against a float64
 * product, beside OpenBLAS's sgemm's, and it measures below sgemm's. cuBLAS offers the nine
 * products as an emulated float32 (BF16x9); six cost two thirds of that.
 * A finite x that would round to a bfloat16 infinity is truncated instead. An infinity or a NaN
 * cannot keep float32's result (inf x1 with x1 = 0 is a NaN): the packing notes them and the
 * product then reports that it did not run, and the caller runs another way (C is overwritten:
 * beta is 0). What AMX flushes: inputs and products below float32's smallest normal (2^-126),
 * as the denormals-are-zero mode does.
 *
 * How (the GotoBLAS loops): for each block of nc columns and KC of the inner dimension, the
 * threads convert B's block into tiles (three bfloat16 pieces in the VNNI layout the B operand
 * takes, pairs of k side by side) and each thread then takes its share of blocks of mc rows,
 * converting each block of A into its three pieces (16 rows x 32 k per tile) and running the
 * 32 x 32 kernel over the block: four tiles of C, two of A, two of B, and 24 TDPBF16PS per 32
 * k's. The block of B stays in L2, A's in L2. While the kernel runs, it brings the stored lines
 * of the thread's next block of A into L2 (a 4096 x 10000 A, packed without that, took longer
 * than its products). With more than one block of columns, each block of A is packed once, at
 * the first, and kept (M x K x 3 bfloat16s). KC = 512 rather than 256: the kernel's time
 * between its C tile stores doubles, and C is read and added to half as often; on the DLBench
 * LSTM's decoder products the two and the prefetch took 4096x256x10000 NN from 165 to 91 ms at
 * one thread, 4096x10000x256 NT from 89 to 85 and 10000x256x4096 TN from 116 to 101 (below
 * OpenBLAS's 145, 125 and 142). Edges are padded with zeros in the
 * packed pieces; C's edge blocks go through a 32 x 32 scratch. alpha scales A as it is packed.
 * Each K block's sums start from zero (the first from the bias row, loaded with a stride of 0)
 * and are added to C.
 * An AMX kernel: it runs where nb_cpu_amx() (the CPU has AMX-BF16 and AVX512-BF16, Linux grants
 * the tiles' state, nabla's AVX-512 kernels are on). gemm.c offers it as a way of the tuner;
 * NABLA_AMX=0 turns it off. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/blas_impl.h"
#include "cpu/cpu_impl.h"

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <omp.h>

#include "cpu/ops/gemm_own_impl.h"

#define AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")))

#define TK 32         /* k per tile row (bfloat16s) */
#define TILE 512      /* bfloat16s per tile: 16 rows of 32 */
#define PIECES 3      /* x0, x1, x2 */
#define KC 512        /* k per block: 16 tiles' worth */
#define B_BLOCK (384 * 512 * 6) /* bytes of a block of B: 1.2 MB, in L2 beside A's (nc_for) */
#define MC 64         /* rows per block of A, at most: 64 x 512 x 3 x 2 = 192 KB */
#define SLOT ((MC / 16) * (KC / TK) * PIECES * TILE) /* bfloat16s of one packed block of A */
#define WHOLE_A_MAX ((size_t)64 << 20) /* bytes: A packed once for all column blocks up to this */

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static atomic_int g_state = -1; /* -1 unknown, 0 off, 1 on */
static _Thread_local unsigned tl_nonfinite; /* split3 met an infinity or a NaN on this thread */

/* AMX-TILE and AMX-BF16. libgcc knows their names (GCC 11 on); clang's builtin before clang 16
 * does not (scripts/fuzz.sh builds with Debian's clang 14), so there they are CPUID leaf 7's EDX
 * bits 24 and 22. */
static bool cpu_has_amx(void)
{
#if defined(__clang__) && __clang_major__ < 16
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1) && (d >> 22 & 1);
#else
    return __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16");
#endif
}

static bool amx_probe(void)
{
    const char *e = getenv("NABLA_AMX");
    if ((e && e[0] == '0') || !nb_cpu_avx512()) return false;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bf16") || !__builtin_cpu_supports("avx512bw") || !cpu_has_amx()) return false;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

bool nb_cpu_amx(void)
{
    int s = atomic_load(&g_state);
    if (s < 0) {
        s = amx_probe() ? 1 : 0;
        atomic_store(&g_state, s);
    }
    return s == 1;
}

void nb_cpu_amx_set_enabled(bool on)
{
    atomic_store(&g_state, on && amx_probe() ? 1 : 0);
}

bool nb_cpu_amx_enabled(void) { return nb_cpu_amx(); }

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

/* Eight tiles of 16 rows of 64 bytes. A constant, not filled in on the stack: GCC 12 at -O2 drops
 * the stores to a local configuration before ldtilecfg (it faulted). */
static const tilecfg k_tiles = {.palette = 1,
                                .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
                                .rows = {16, 16, 16, 16, 16, 16, 16, 16}};

static AMX void tiles_on(void) { _tile_loadconfig(&k_tiles); }
/* A function of its own, as tiles_on: clang does not give an OpenMP region's body its function's
 * target attribute, and clang 14 cannot emit the instruction there. */
static AMX void tiles_off(void) { _tile_release(); }

/* The three bfloat16 pieces of 16 floats v, each as 16 bits in the low half of 32-bit lanes. */
static AMX inline void split3(__m512 v, __m512i out[PIECES])
{
    const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
    __mmask16 nonfinite = _mm512_fpclass_ps_mask(v, 0x99); /* NaN, +-inf */
    tl_nonfinite |= nonfinite;
    __m512i x0 = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(v));
    /* a finite v that rounds to infinity: truncated instead */
    __m512i mag = _mm512_and_si512(x0, _mm512_set1_epi32(0x7FFF));
    __mmask16 over = _mm512_mask_cmpeq_epi32_mask((__mmask16)~nonfinite, mag, _mm512_set1_epi32(0x7F80));
    x0 = _mm512_mask_srli_epi32(x0, over, _mm512_castps_si512(v), 16);
    __m512 r1 = _mm512_maskz_sub_ps((__mmask16)~nonfinite, v, _mm512_castsi512_ps(_mm512_slli_epi32(x0, 16)));
    __m512i x1 = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(r1));
    __m512 r2 = _mm512_sub_ps(r1, _mm512_castsi512_ps(_mm512_slli_epi32(x1, 16)));
    /* r2 has at most 8 significant bits: exact in a bfloat16 (its low half is zero) */
    __m512i x2 = _mm512_srli_epi32(_mm512_and_si512(_mm512_castps_si512(r2), hi), 16);
    out[0] = x0;
    out[1] = x1;
    out[2] = x2;
}

/* 16 x 16 32-bit transpose in place. */
static AMX void transpose16(__m512i r[16])
{
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 16; i += 8)
        for (int j = 0; j < 4; j++) {
            t[i + j] = _mm512_shuffle_i32x4(r[i + j], r[i + j + 4], 0x88);
            t[i + j + 4] = _mm512_shuffle_i32x4(r[i + j], r[i + j + 4], 0xDD);
        }
    for (int j = 0; j < 8; j++) {
        r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
        r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xDD);
    }
}

/* The 16 lines i (of which `lines` are valid) of 32 k (of which `kv` are valid), element (i, k)
 * at src[i * ld + k], as bfloat16 pieces: out[p][i] holds line i's 32 k's (16 pairs of 32 bits). */
static AMX void lines_of_k(const float *src, int64_t ld, int lines, int kv, float alpha, __m512i out[PIECES][16])
{
    __mmask16 m0 = nb__lanes_left(kv), m1 = nb__lanes_left(kv - 16);
    __m512 al = _mm512_set1_ps(alpha);
    for (int i = 0; i < 16; i++) {
        if (i >= lines) {
            for (int p = 0; p < PIECES; p++) out[p][i] = _mm512_setzero_si512();
            continue;
        }
        const float *s = src + i * ld;
        __m512i lo[PIECES], hi[PIECES];
        split3(_mm512_mul_ps(al, _mm512_maskz_loadu_ps(m0, s)), lo);
        split3(_mm512_mul_ps(al, _mm512_maskz_loadu_ps(m1, s + 16)), hi);
        for (int p = 0; p < PIECES; p++) /* 32 bfloat16s in k order */
            out[p][i] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(lo[p])),
                                           _mm512_cvtepi32_epi16(hi[p]), 1);
    }
}

/* The 16 pairs of k (of `kv` valid k's) of 16 items i (of which `items` are valid), element
 * (k, i) at src[k * ld + i], as bfloat16 pieces: out[p][q] holds, for each i, k = 2q and 2q + 1
 * side by side. */
static AMX void pairs_of_k(const float *src, int64_t ld, int items, int kv, float alpha, __m512i out[PIECES][16])
{
    __mmask16 m = nb__lanes_left(items);
    __m512 al = _mm512_set1_ps(alpha);
    for (int q = 0; q < 16; q++) {
        __m512i e[PIECES], o[PIECES];
        int k = 2 * q;
        __m512 ve = k < kv ? _mm512_maskz_loadu_ps(m, src + k * ld) : _mm512_setzero_ps();
        __m512 vo = k + 1 < kv ? _mm512_maskz_loadu_ps(m, src + (k + 1) * ld) : _mm512_setzero_ps();
        split3(_mm512_mul_ps(al, ve), e);
        split3(_mm512_mul_ps(al, vo), o);
        for (int p = 0; p < PIECES; p++) out[p][q] = _mm512_or_si512(e[p], _mm512_slli_epi32(o[p], 16));
    }
}

static AMX void store_tiles(__m512i v[PIECES][16], uint16_t *dst)
{
    for (int p = 0; p < PIECES; p++)
        for (int r = 0; r < 16; r++) _mm512_storeu_si512((void *)(dst + p * TILE + r * 32), v[p][r]);
}

/* One operand, row-major with leading dimension ld: element (r, c) of op(X) at p[r * ld + c], or
 * with trans at p[c * ld + r]. */
typedef struct {
    const float *p;
    int64_t ld;
    bool trans; /* op(X) = X^T: element (r, c) at p[c * ld + r] */
} operand;

/* A's tile (16 rows from r0, 32 k from k0) into dst: the rows i of op(A), 32 k's each. */
static AMX void pack_a_tile(operand a, int64_t rows, int64_t k, int64_t r0, int64_t k0, float alpha, uint16_t *dst)
{
    __m512i v[PIECES][16];
    int lines = rows - r0 < 16 ? (int)(rows - r0) : 16, kv = k - k0 < TK ? (int)(k - k0) : TK;
    if (!a.trans) {
        lines_of_k(a.p + r0 * a.ld + k0, a.ld, lines, kv, alpha, v);
    } else { /* stored [K, M]: pairs of k of 16 rows, transposed */
        pairs_of_k(a.p + k0 * a.ld + r0, a.ld, lines, kv, alpha, v);
        for (int p = 0; p < PIECES; p++) transpose16(v[p]);
    }
    store_tiles(v, dst);
}

/* B's tile (32 k from k0, 16 columns from c0) into dst, in the VNNI layout: row q holds, for
 * each column, k = 2q and 2q + 1. */
static AMX void pack_b_tile(operand b, int64_t cols, int64_t k, int64_t k0, int64_t c0, uint16_t *dst)
{
    __m512i v[PIECES][16];
    int items = cols - c0 < 16 ? (int)(cols - c0) : 16, kv = k - k0 < TK ? (int)(k - k0) : TK;
    if (!b.trans) {
        pairs_of_k(b.p + k0 * b.ld + c0, b.ld, items, kv, 1.0f, v);
    } else { /* stored [N, K]: each column's 32 k's, transposed */
        lines_of_k(b.p + c0 * b.ld + k0, b.ld, items, kv, 1.0f, v);
        for (int p = 0; p < PIECES; p++) transpose16(v[p]);
    }
    store_tiles(v, dst);
}

/* The product's shape and C. */
typedef struct {
    int64_t m, n, k;
    operand a, b;
    float alpha;
    float *c;
    int64_t ldc;
    const float *bias;
    int64_t mc;  /* rows per block of A: 64 where A is stored [K, M] (longer runs to read), else 32 */
    int64_t nc;  /* columns per block of B: nc_for(k) */
    bool whole;  /* A is packed once, by blocks of mc x KC, and kept for all column blocks */
} amx_job;

/* Tiles 0-3 at the start of a K block of C's 32 x 32 block at (i0, j0): the bias (the first K
 * block of a whole block; an edge block's goes through scratch), else zeros: each K block's sums
 * start from zero and c_store adds them to C, so that rounding grows with the block's k's, not
 * with all of K (as an sgemm's kernel sums a block of K in registers). */
static AMX void c_start(const amx_job *j, int64_t i0, int64_t j0, bool first, float *scratch)
{
    if (!first || !j->bias) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        return;
    }
    const float *src = j->bias + j0;
    int64_t s = 0;
    if (j0 + 32 > j->n) {
        memset(scratch, 0, 32 * sizeof(float));
        memcpy(scratch, src, (size_t)(j->n - j0) * sizeof(float));
        src = scratch;
    }
    _tile_loadd(0, src, s);
    _tile_loadd(1, src + 16, s);
    _tile_loadd(2, src, s);
    _tile_loadd(3, src + 16, s);
}

/* Tiles 0-3 into C's block at (i0, j0): stored in the first K block, else added to C; an edge
 * block's valid part through scratch. */
static AMX void c_store(const amx_job *j, int64_t i0, int64_t j0, bool first, float *scratch)
{
    float *c = j->c + i0 * j->ldc + j0;
    bool set = first;
    if (set && i0 + 32 <= j->m && j0 + 32 <= j->n) {
        int64_t s = j->ldc * (int64_t)sizeof(float);
        _tile_stored(0, c, s);
        _tile_stored(1, c + 16, s);
        _tile_stored(2, c + 16 * j->ldc, s);
        _tile_stored(3, c + 16 * j->ldc + 16, s);
        return;
    }
    _tile_stored(0, scratch, 128);
    _tile_stored(1, scratch + 16, 128);
    _tile_stored(2, scratch + 16 * 32, 128);
    _tile_stored(3, scratch + 16 * 32 + 16, 128);
    int64_t rows = j->m - i0 < 32 ? j->m - i0 : 32, cols = j->n - j0 < 32 ? j->n - j0 : 32;
    __mmask16 m0 = nb__lanes_left(cols), m1 = nb__lanes_left(cols - 16);
    for (int64_t r = 0; r < rows; r++) {
        float *cr = c + r * j->ldc;
        __m512 v0 = _mm512_maskz_loadu_ps(m0, scratch + r * 32), v1 = _mm512_maskz_loadu_ps(m1, scratch + r * 32 + 16);
        if (!set) {
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, cr));
            v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, cr + 16));
        }
        _mm512_mask_storeu_ps(cr, m0, v0);
        _mm512_mask_storeu_ps(cr + 16, m1, v1);
    }
}

/* The cache lines of the next block of A, brought into L2 a few at a time while the kernel works
 * on this one: `rows` runs of `per` lines, ld bytes apart. Without it the packing of A waits on
 * memory where A's rows are long (a 4096 x 10000 A took longer to pack than to multiply). */
typedef struct {
    const char *p;
    int64_t ld, rows, per, next;
} ahead;

static void ahead_some(ahead *h, int64_t count)
{
    if (!h->p) return;
    int64_t end = h->next + count < h->rows * h->per ? h->next + count : h->rows * h->per;
    for (; h->next < end; h->next++)
        _mm_prefetch(h->p + h->next / h->per * h->ld + h->next % h->per * 64, _MM_HINT_T1);
}

/* Tiles 0-3 += the six products of the pieces over nkt tiles of k: a0, a1 the packed A tiles of
 * the two row halves (strided by PIECES * TILE per k tile), b0, b1 the B ones; `each` lines of h
 * fetched a k tile. */
static AMX void kernel(const uint16_t *a0, const uint16_t *a1, const uint16_t *b0, const uint16_t *b1, int nkt,
                       ahead *h, int64_t each)
{
#define LA(p)                                  \
    _tile_loadd(4, a0 + (p) * TILE, 64);       \
    _tile_loadd(5, a1 + (p) * TILE, 64)
#define LB(p)                                  \
    _tile_loadd(6, b0 + (p) * TILE, 64);       \
    _tile_loadd(7, b1 + (p) * TILE, 64)
#define DP4                   \
    _tile_dpbf16ps(0, 4, 6);  \
    _tile_dpbf16ps(1, 4, 7);  \
    _tile_dpbf16ps(2, 5, 6);  \
    _tile_dpbf16ps(3, 5, 7)
    for (int t = 0; t < nkt; t++) {
        /* (a2 b0), (a1 b0), (a1 b1), (a0 b1), (a0 b0), (a0 b2): 14 tile loads for 24 products */
        LA(2);
        LB(0);
        DP4;
        LA(1);
        DP4;
        ahead_some(h, each);
        LB(1);
        DP4;
        LA(0);
        DP4;
        LB(0);
        DP4;
        LB(2);
        DP4;
        a0 += PIECES * TILE;
        a1 += PIECES * TILE;
        b0 += PIECES * TILE;
        b1 += PIECES * TILE;
    }
#undef LA
#undef LB
#undef DP4
}

static int64_t up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

/* Columns per block of B: B_BLOCK's worth at the block's k (384 from K = 512 up, 768 at K = 256),
 * a multiple of 32. A larger block, 512 x 512, left the kernel's loads waiting on L2 misses
 * (NT 1024x4096x2048 79 ms against 70 at 384); a smaller one where K is short means more passes
 * over A (NT 4096x10000x256 157 ms at 256 columns against 94 at 512). */
static int64_t nc_for(int64_t k)
{
    int64_t kc = up(k < KC ? k : KC, TK), nc = B_BLOCK / (kc * PIECES * 2) / 32 * 32;
    return nc < 128 ? 128 : nc > 2048 ? 2048 : nc;
}

/* A's block of up to mc rows from ic, k from pc (nkt tiles), into ap as [16-row tile][k tile]
 * [piece]; a whole tile past the rows is zeros. */
static AMX void pack_a_block(const amx_job *j, int64_t ic, int64_t pc, int64_t nmt, int64_t nkt, uint16_t *ap)
{
    /* along A's rows as it is stored: stored [M, K], a row tile's k tiles one after another;
     * stored [K, M], the row tiles of a k tile side by side */
    for (int64_t q = 0; q < nmt * nkt; q++) {
        int64_t kt = j->a.trans ? q / nmt : q % nkt, mt = j->a.trans ? q % nmt : q / nkt;
        uint16_t *dst = ap + (mt * nkt + kt) * PIECES * TILE;
        int64_t r0 = ic + 16 * mt;
        if (r0 >= j->m)
            memset(dst, 0, PIECES * TILE * sizeof(uint16_t));
        else
            pack_a_tile(j->a, j->m, j->k, r0, pc + TK * kt, j->alpha, dst);
    }
}

/* The lines of A's stored block of rows from ic, k from pc; none past A. */
static ahead ahead_of(const amx_job *j, int64_t ic, int64_t pc)
{
    ahead h = {0};
    if (ic >= j->m || pc >= j->k) return h;
    int64_t mc = j->m - ic < j->mc ? j->m - ic : j->mc, kc = j->k - pc < KC ? j->k - pc : KC;
    int64_t ld = j->a.ld * (int64_t)sizeof(float);
    if (!j->a.trans)
        h = (ahead){(const char *)(j->a.p + ic * j->a.ld + pc), ld, mc, (kc + 15) / 16, 0};
    else
        h = (ahead){(const char *)(j->a.p + pc * j->a.ld + ic), ld, kc, (mc + 15) / 16, 0};
    return h;
}

/* Tile q of B's block of columns from jc and k from pc (ntn column tiles, nkt k tiles) into bp,
 * the block's tiles as [16-column tile][k tile][piece]. q runs along B's rows as they are stored:
 * stored [K, N], the tiles of a k tile side by side; stored [N, K], a column tile's k tiles one
 * after another. */
static AMX void pack_b_at(const amx_job *j, int64_t jc, int64_t pc, int64_t ntn, int64_t nkt, int64_t q, uint16_t *bp)
{
    int64_t kt = j->b.trans ? q % nkt : q / ntn, nt16 = j->b.trans ? q / nkt : q % ntn;
    int64_t c0 = jc + 16 * nt16;
    uint16_t *dst = bp + (nt16 * nkt + kt) * PIECES * TILE;
    if (c0 >= j->n)
        memset(dst, 0, PIECES * TILE * sizeof(uint16_t));
    else
        pack_b_tile(j->b, j->n, j->k, pc + TK * kt, c0, dst);
}

/* Where B's block (jc, pc) starts in a B packed whole: the column blocks one after another, each
 * its k blocks one after another. */
static int64_t whole_b_at(int64_t k, int64_t jc, int64_t pc, int64_t ntn)
{
    return ((jc / 16) * (up(k, TK) / TK) + ntn * (pc / TK)) * PIECES * TILE;
}

/* Whether any input was an infinity or a NaN. ap_all: a block of A per thread, or all of A; bp:
 * a block of B, packed here, or (bwhole) all of B, packed before. */
static AMX bool run(const amx_job *j, int nt, uint16_t *bp, uint16_t *ap_all, bool bwhole)
{
    atomic_int nonfinite = 0;
#pragma omp parallel num_threads(nt)
    {
        tl_nonfinite = 0;
        int t = omp_get_thread_num();
        uint16_t *ap = j->whole ? ap_all : ap_all + (size_t)t * SLOT;
        float scratch[32 * 32];
        tiles_on();
        for (int64_t jc = 0; jc < j->n; jc += j->nc) {
            int64_t ntn = up(j->n - jc < j->nc ? j->n - jc : j->nc, 32) / 16; /* 16-column tiles, even */
            for (int64_t pc = 0; pc < j->k; pc += KC) {
                int64_t nkt = up(j->k - pc < KC ? j->k - pc : KC, TK) / TK;
                /* B's block, by all threads (the loop's end is their barrier) */
                const uint16_t *bb = bwhole ? bp + whole_b_at(j->k, jc, pc, ntn) : bp;
                if (!bwhole) {
#pragma omp for schedule(static)
                    for (int64_t q = 0; q < ntn * nkt; q++) pack_b_at(j, jc, pc, ntn, nkt, q, bp);
                }
                /* the blocks of rows, split among the threads; the next block of A fetched
                 * during this one's kernels: the thread's next block of rows, else its first at
                 * the next pc; from the packed copy once A is whole */
                int64_t nblocks = (j->m + j->mc - 1) / j->mc, npc = (j->k + KC - 1) / KC;
                int64_t b_lo = nblocks * t / nt, b_hi = nblocks * (t + 1) / nt;
                for (int64_t blk = b_lo; blk < b_hi; blk++) {
                    int64_t ic = blk * j->mc;
                    int64_t nmt = up(j->m - ic < j->mc ? j->m - ic : j->mc, 32) / 16;
                    bool last = blk + 1 == b_hi;
                    int64_t nb = last ? b_lo : blk + 1, np = last ? pc / KC + 1 : pc / KC;
                    if (j->whole) ap = ap_all + (size_t)(blk * npc + pc / KC) * SLOT;
                    if (!j->whole || jc == 0) pack_a_block(j, ic, pc, nmt, nkt, ap);
                    ahead h = {0};
                    if (!j->whole || jc == 0)
                        h = ahead_of(j, nb * j->mc, np * KC);
                    else if (np < npc)
                        h = (ahead){(const char *)(ap_all + (size_t)(nb * npc + np) * SLOT), 0, 1,
                                    SLOT * (int64_t)sizeof(uint16_t) / 64, 0};
                    int64_t calls = (ntn / 2) * (nmt / 2) * nkt, each = (h.rows * h.per + calls - 1) / calls;
                    for (int64_t jt = 0; jt < ntn; jt += 2)
                        for (int64_t mt = 0; mt < nmt; mt += 2) {
                            int64_t i0 = ic + 16 * mt, j0 = jc + 16 * jt;
                            c_start(j, i0, j0, pc == 0, scratch);
                            const uint16_t *a0 = ap + mt * nkt * PIECES * TILE;
                            const uint16_t *b0 = bb + jt * nkt * PIECES * TILE;
                            kernel(a0, a0 + nkt * PIECES * TILE, b0, b0 + nkt * PIECES * TILE, (int)nkt, &h, each);
                            c_store(j, i0, j0, pc == 0, scratch);
                        }
                }
#pragma omp barrier
            }
        }
        tiles_off();
        if (tl_nonfinite) atomic_store(&nonfinite, 1);
    }
    return atomic_load(&nonfinite) != 0;
}

bool nb_cpu_gemm_amx(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                     const float *b, int64_t ldb, float *c, int64_t ldc, const float *bias)
{
    if (m < 1 || n < 1 || k < 1 || !nb_cpu_amx()) return false;
    amx_job j = {.m = m, .n = n, .k = k, .a = {a, lda, ta == 'T'}, .b = {b, ldb, tb == 'T'},
                 .alpha = alpha, .c = c, .ldc = ldc, .bias = bias, .mc = ta == 'T' ? 64 : 32, .nc = nc_for(k)};
    int64_t nblocks = (m + j.mc - 1) / j.mc;
    int nt = nb_cpu_threads_for(m * n * k, 1 << 20);
    if (nt > nblocks) nt = (int)nblocks;
    if (nt < 1) nt = 1;
    int64_t ntn = up(n < j.nc ? n : j.nc, 32) / 16, nkt = up(k < KC ? k : KC, TK) / TK;
    size_t bbytes = (size_t)(ntn * nkt) * PIECES * TILE * sizeof(uint16_t);
    /* more than one column block: A packed once (M x K x 3 pieces) rather than once a block */
    size_t wbytes = (size_t)nblocks * (size_t)((k + KC - 1) / KC) * SLOT * sizeof(uint16_t);
    j.whole = n > j.nc && wbytes <= WHOLE_A_MAX;
    size_t abytes = j.whole ? wbytes : (size_t)nt * SLOT * sizeof(uint16_t);
    uint16_t *bp = nb_cpu_alloc(bbytes), *ap = bp ? nb_cpu_alloc(abytes) : NULL;
    if (!ap) {
        if (bp) nb_cpu_free(bp, bbytes);
        return false;
    }
    bool nonfinite = run(&j, nt, bp, ap, false);
    nb_cpu_free(ap, abytes);
    nb_cpu_free(bp, bbytes);
    return !nonfinite;
}

struct nb_cpu_amx_b {
    int64_t n, k;
    size_t bytes;
    uint16_t *tiles; /* B's blocks as run() takes them, packed whole */
};

nb_cpu_amx_b *nb_cpu_amx_pack_b(char tb, int64_t n, int64_t k, const float *b, int64_t ldb)
{
    if (n < 1 || k < 1 || !nb_cpu_amx()) return NULL;
    nb_cpu_amx_b *p = nb_cpu_alloc(sizeof *p);
    if (!p) return NULL;
    int64_t nc = nc_for(k), cols = (n / nc) * nc + up(n % nc, 32); /* each block's tiles, an even count */
    p->n = n, p->k = k, p->bytes = (size_t)(cols / 16) * (size_t)(up(k, TK) / TK) * PIECES * TILE * sizeof(uint16_t);
    p->tiles = nb_cpu_alloc(p->bytes);
    if (!p->tiles) {
        nb_cpu_free(p, sizeof *p);
        return NULL;
    }
    amx_job j = {.n = n, .k = k, .b = {b, ldb, tb == 'T'}, .nc = nc};
    int nt = nb_cpu_threads_for(n * k, 1 << 16);
    int nonfinite = 0;
    for (int64_t jc = 0; jc < n; jc += nc) {
        int64_t ntn = up(n - jc < nc ? n - jc : nc, 32) / 16;
        for (int64_t pc = 0; pc < k; pc += KC) {
            int64_t nkt = up(k - pc < KC ? k - pc : KC, TK) / TK;
            uint16_t *dst = p->tiles + whole_b_at(k, jc, pc, ntn);
#pragma omp parallel for num_threads(nt) schedule(static) reduction(| : nonfinite)
            for (int64_t q = 0; q < ntn * nkt; q++) {
                tl_nonfinite = 0;
                pack_b_at(&j, jc, pc, ntn, nkt, q, dst);
                nonfinite |= tl_nonfinite != 0;
            }
        }
    }
    if (nonfinite) {
        nb_cpu_amx_b_free(p);
        return NULL;
    }
    return p;
}

void nb_cpu_amx_b_free(nb_cpu_amx_b *p)
{
    if (!p) return;
    nb_cpu_free(p->tiles, p->bytes);
    nb_cpu_free(p, sizeof *p);
}

bool nb_cpu_gemm_amx_packed(char ta, int64_t m, float alpha, const float *a, int64_t lda, const nb_cpu_amx_b *b,
                            float *c, int64_t ldc, const float *bias)
{
    if (m < 1 || !b || !nb_cpu_amx()) return false;
    amx_job j = {.m = m, .n = b->n, .k = b->k, .a = {a, lda, ta == 'T'}, .alpha = alpha, .c = c, .ldc = ldc,
                 .bias = bias, .mc = ta == 'T' ? 64 : 32, .nc = nc_for(b->k)};
    int64_t nblocks = (m + j.mc - 1) / j.mc;
    int nt = omp_in_parallel() ? 1 : nb_cpu_threads_for(m * j.n * j.k, 1 << 20);
    if (nt > nblocks) nt = (int)nblocks;
    if (nt < 1) nt = 1;
    size_t wbytes = (size_t)nblocks * (size_t)((j.k + KC - 1) / KC) * SLOT * sizeof(uint16_t);
    j.whole = j.n > j.nc && wbytes <= WHOLE_A_MAX;
    size_t abytes = j.whole ? wbytes : (size_t)nt * SLOT * sizeof(uint16_t);
    uint16_t *ap = nb_cpu_alloc(abytes);
    if (!ap) return false;
    bool nonfinite = run(&j, nt, b->tiles, ap, true);
    nb_cpu_free(ap, abytes);
    return !nonfinite;
}

#else

bool nb_cpu_amx(void) { return false; }

void nb_cpu_amx_set_enabled(bool on) { (void)on; }

bool nb_cpu_amx_enabled(void) { return false; }

bool nb_cpu_gemm_amx(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                     const float *b, int64_t ldb, float *c, int64_t ldc, const float *bias)
{
    (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb;
    (void)c, (void)ldc, (void)bias;
    return false;
}

nb_cpu_amx_b *nb_cpu_amx_pack_b(char tb, int64_t n, int64_t k, const float *b, int64_t ldb)
{
    (void)tb, (void)n, (void)k, (void)b, (void)ldb;
    return NULL;
}

void nb_cpu_amx_b_free(nb_cpu_amx_b *p) { (void)p; }

bool nb_cpu_gemm_amx_packed(char ta, int64_t m, float alpha, const float *a, int64_t lda, const nb_cpu_amx_b *b,
                            float *c, int64_t ldc, const float *bias)
{
    (void)ta, (void)m, (void)alpha, (void)a, (void)lda, (void)b, (void)c, (void)ldc, (void)bias;
    return false;
}

#endif
