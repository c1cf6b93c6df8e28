/* Kernels: copy with dtype conversion and broadcasting (COPY), and fill (FILL).
 *   COPY: out[...] = (out dtype) in[0][...], in[0] broadcast to out's shape
 *   FILL: out[...] = (out dtype) s0
 * A copy between a dense NCHW and a dense channels-last (NHWC) tensor of one dtype, both ways,
 * is a per-image matrix transpose done in tiles (copy_nchw_nhwc); the strided iterator would run
 * it with its inner loop along the channels (3 of them for an image batch) at 1-2 GB/s. */
#include <string.h>

#include "cpu/cpu_impl.h"

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#define NB_STREAM 1
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define NB_X86_SIMD 1
#endif


/* One loop per (destination, source) pair of dtypes. Converting to bool tests != 0, as C does. */
#define COPY_LOOP(TO, TI)                                                                        \
    static void copy_##TO##_##TI(char **p, const int64_t *s, int64_t n, void *ctx)               \
    {                                                                                            \
        (void)ctx;                                                                               \
        if (s[0] == sizeof(TO) && s[1] == sizeof(TI)) {                                          \
            TO *restrict o = (TO *)p[0];                                                         \
            const TI *restrict i = (const TI *)p[1];                                             \
            for (int64_t k = 0; k < n; k++) o[k] = (TO)i[k];                                     \
        } else {                                                                                 \
            for (int64_t k = 0; k < n; k++)                                                      \
                *(TO *)(p[0] + k * s[0]) = (TO) * (const TI *)(p[1] + k * s[1]);                 \
        }                                                                                        \
    }

typedef float f32;
typedef double f64;
typedef int64_t i64;
typedef int32_t i32;
typedef uint8_t u8;
typedef bool b8;

#define COPY_FROM(TO) COPY_LOOP(TO, f32) COPY_LOOP(TO, f64) COPY_LOOP(TO, i64) COPY_LOOP(TO, i32) \
    COPY_LOOP(TO, u8) COPY_LOOP(TO, b8)
COPY_FROM(f32)
COPY_FROM(f64)
COPY_FROM(i64)
COPY_FROM(i32)
COPY_FROM(u8)
COPY_FROM(b8)

static nb_cpu_loop_fn copy_loop(nb_dtype to, nb_dtype from)
{
#define ROW(TO) {copy_##TO##_f32, copy_##TO##_f64, copy_##TO##_i64, copy_##TO##_i32, copy_##TO##_u8, copy_##TO##_b8}
    static const nb_cpu_loop_fn table[6][6] = {ROW(f32), ROW(f64), ROW(i64), ROW(i32), ROW(u8), ROW(b8)};
#undef ROW
    if ((unsigned)to >= 6 || (unsigned)from >= 6) return NULL;
    return table[to][from];
}

/* Same dtype, both operands contiguous along the run: memcpy. */
static void copy_same(char **p, const int64_t *s, int64_t n, void *ctx)
{
    size_t es = *(const size_t *)ctx;
    if (s[0] == (int64_t)es && s[1] == (int64_t)es) {
        memcpy(p[0], p[1], (size_t)n * es);
        return;
    }
    for (int64_t k = 0; k < n; k++) memcpy(p[0] + k * s[0], p[1] + k * s[1], es);
}

#ifdef NB_STREAM
/* copy_same with streaming (non-temporal) stores where the run is contiguous on both sides: for
 * outputs too large for the last-level cache, which then are not read into the caches before
 * being written (as binary.c's arithmetic). A linear layer's bias broadcast into the LSTM's
 * [4096, 10000] output: 11.0 -> 6.5 ms at 1 thread (Zen 4). */
static void copy_same_nt(char **p, const int64_t *s, int64_t n, void *ctx)
{
    size_t es = *(const size_t *)ctx, bytes = (size_t)n * es, k = 0;
    if (s[0] != (int64_t)es || s[1] != (int64_t)es || bytes < NB_CPU_STREAM_MIN_RUN) {
        copy_same(p, s, n, ctx);
        return;
    }
    char *o = p[0];
    const char *i = p[1];
    size_t head = (16 - ((uintptr_t)o & 15)) & 15;
    if (head > bytes) head = bytes;
    memcpy(o, i, head);
    for (k = head; k + 32 <= bytes; k += 32) {
        __m128i a = _mm_loadu_si128((const __m128i *)(i + k)), b = _mm_loadu_si128((const __m128i *)(i + k + 16));
        _mm_stream_si128((__m128i *)(o + k), a);
        _mm_stream_si128((__m128i *)(o + k + 16), b);
    }
    memcpy(o + k, i + k, bytes - k);
    _mm_sfence();
}
#endif

/* Short contiguous runs a fixed distance apart on each side, as a 2-D copy in one loop: the
 * iterator's call per run costs more than a run of a few cache lines. Copying 32 channels
 * (128 bytes) per pixel of a channels-last [128, 32, 28, 28] float32 into every other slot of a
 * channels-last [128, 64, 28, 28] (what cat did, one input at a time): 2.2 -> 1.7 ms at 1 thread
 * (Zen 4). */
#define ROWS_MAX_RUN 4096
static bool copy_rows(const nb_cpu_iter *it, size_t es)
{
    if (it->ndim != 2 || it->strides[0][1] != (int64_t)es || it->strides[1][1] != (int64_t)es) return false;
    size_t bytes = (size_t)it->shape[1] * es;
    if (bytes > ROWS_MAX_RUN) return false;
    int64_t rows = it->shape[0], so = it->strides[0][0], si = it->strides[1][0];
    char *o = it->base[0];
    const char *in = it->base[1];
    int nt = nb_cpu_threads_for(rows * it->shape[1], 0);
#pragma omp parallel num_threads(nt)
    {
        int64_t r0, r1;
        nb_cpu_thread_share(rows, &r0, &r1);
        for (int64_t r = r0; r < r1; r++) memcpy(o + r * so, in + r * si, bytes);
    }
    return true;
}

/* Per image, dst[j ldo + i] = src[i ldi + j] for the [rows, cols] matrix src, in TILE x TILE
 * tiles (both sides touch whole cache lines); images (rows * ldi and cols * ldo elements apart)
 * and tile rows are split across threads. 4-byte elements on an AVX2 CPU: tiles of TILE_R rows
 * and TILE_C columns (a whole cache line of each destination row), their whole 8 x 8 blocks
 * transposed in registers (t8x8); three rows (an RGB image batch made channels-last) are
 * interleaved eight columns at a time (interleave3). To channels-last at 1 thread (Zen 4, GB/s
 * read + write, medians of 7 runs): [16, 64, 56, 56] 5.1 with the scalar 32 x 32 tiles, 9.1 with
 * t8x8 in them, 12.3 in 16 x 64 tiles (back to NCHW 8.7 -> 12.5); [16, 256, 28, 28] 12.7 -> 21.8;
 * [16, 3, 224, 224] 15.4 -> 35 with interleave3. */
#define TILE 32
#define TILE_R 16
#define TILE_C 64

#ifdef NB_X86_SIMD
#define AVX2 __attribute__((target("avx2")))

/* dst's rows 0..7 = src's columns 0..7 (of its rows 0..7). */
AVX2 static inline void t8x8(const uint32_t *src, int64_t ldi, uint32_t *dst, int64_t ldo)
{
    __m256 r[8], t[8], u[8];
    for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps((const float *)(src + k * ldi));
    for (int k = 0; k < 8; k += 2) {
        t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);     /* r[k][0] r[k+1][0] r[k][1] r[k+1][1] | 4 5 */
        t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]); /* columns 2 3 | 6 7 */
    }
    for (int k = 0; k < 8; k += 4) { /* u[k + c]: column c | c + 4 of rows k..k+3 */
        u[k] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int c = 0; c < 4; c++) {
        _mm256_storeu_ps((float *)(dst + c * ldo), _mm256_permute2f128_ps(u[c], u[c + 4], 0x20));
        _mm256_storeu_ps((float *)(dst + (c + 4) * ldo), _mm256_permute2f128_ps(u[c], u[c + 4], 0x31));
    }
}

/* Eight floats picked from three vectors: x permuted by ix, then the lanes of mask my from y
 * permuted by iy, then those of mz from z permuted by iz (the masks: blend immediates). */
#define PICK3(x, ix, y, iy, my, z, iz, mz)                                                                         \
    _mm256_blend_ps(_mm256_blend_ps(_mm256_permutevar8x32_ps(x, ix), _mm256_permutevar8x32_ps(y, iy), my),       \
                    _mm256_permutevar8x32_ps(z, iz), mz)

/* dst[3 j + i] = src[i ldi + j] for i < 3 and j < cols. */
AVX2 static void interleave3(const uint32_t *src, int64_t ldi, uint32_t *dst, int64_t cols)
{
    /* out0 = a0 b0 c0 a1 b1 c1 a2 b2, out1 = c2 a3 b3 c3 a4 b4 c4 a5, out2 = b5 c5 a6 b6 c6 a7 b7 c7 */
    const __m256i ia[3] = {_mm256_setr_epi32(0, 0, 0, 1, 0, 0, 2, 0), _mm256_setr_epi32(0, 3, 0, 0, 4, 0, 0, 5),
                           _mm256_setr_epi32(0, 0, 6, 0, 0, 7, 0, 0)};
    const __m256i ib[3] = {_mm256_setr_epi32(0, 0, 0, 0, 1, 0, 0, 2), _mm256_setr_epi32(0, 0, 3, 0, 0, 4, 0, 0),
                           _mm256_setr_epi32(5, 0, 0, 6, 0, 0, 7, 0)};
    const __m256i ic[3] = {_mm256_setr_epi32(0, 0, 0, 0, 0, 1, 0, 0), _mm256_setr_epi32(2, 0, 0, 3, 0, 0, 4, 0),
                           _mm256_setr_epi32(0, 5, 0, 0, 6, 0, 0, 7)};
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8) {
        __m256 a = _mm256_loadu_ps((const float *)(src + j)), b = _mm256_loadu_ps((const float *)(src + ldi + j));
        __m256 c = _mm256_loadu_ps((const float *)(src + 2 * ldi + j));
        float *o = (float *)(dst + 3 * j);
        _mm256_storeu_ps(o, PICK3(a, ia[0], b, ib[0], 0x92, c, ic[0], 0x24));
        _mm256_storeu_ps(o + 8, PICK3(a, ia[1], b, ib[1], 0x24, c, ic[1], 0x49));
        _mm256_storeu_ps(o + 16, PICK3(a, ia[2], b, ib[2], 0x49, c, ic[2], 0x92));
    }
    for (; j < cols; j++)
        for (int i = 0; i < 3; i++) dst[3 * j + i] = src[i * ldi + j];
}

/* The other way: dst[j ldo + i] = src[3 i + j] for j < 3 and i < rows. */
AVX2 static void deinterleave3(const uint32_t *src, uint32_t *dst, int64_t ldo, int64_t rows)
{
    /* from v0 = a0 b0 c0 a1 b1 c1 a2 b2, v1 = c2 a3 b3 c3 a4 b4 c4 a5, v2 = b5 c5 a6 b6 c6 a7 b7 c7 */
    const __m256i i0[3] = {_mm256_setr_epi32(0, 3, 6, 0, 0, 0, 0, 0), _mm256_setr_epi32(1, 4, 7, 0, 0, 0, 0, 0),
                           _mm256_setr_epi32(2, 5, 0, 0, 0, 0, 0, 0)};
    const __m256i i1[3] = {_mm256_setr_epi32(0, 0, 0, 1, 4, 7, 0, 0), _mm256_setr_epi32(0, 0, 0, 2, 5, 0, 0, 0),
                           _mm256_setr_epi32(0, 0, 0, 3, 6, 0, 0, 0)};
    const __m256i i2[3] = {_mm256_setr_epi32(0, 0, 0, 0, 0, 0, 2, 5), _mm256_setr_epi32(0, 0, 0, 0, 0, 0, 3, 6),
                           _mm256_setr_epi32(0, 0, 0, 0, 0, 1, 4, 7)};
    int64_t i = 0;
    for (; i + 8 <= rows; i += 8) {
        const float *p = (const float *)(src + 3 * i);
        __m256 v0 = _mm256_loadu_ps(p), v1 = _mm256_loadu_ps(p + 8), v2 = _mm256_loadu_ps(p + 16);
        _mm256_storeu_ps((float *)(dst + i), PICK3(v0, i0[0], v1, i1[0], 0x38, v2, i2[0], 0xc0));
        _mm256_storeu_ps((float *)(dst + ldo + i), PICK3(v0, i0[1], v1, i1[1], 0x18, v2, i2[1], 0xe0));
        _mm256_storeu_ps((float *)(dst + 2 * ldo + i), PICK3(v0, i0[2], v1, i1[2], 0x1c, v2, i2[2], 0xe0));
    }
    for (; i < rows; i++)
        for (int j = 0; j < 3; j++) dst[j * ldo + i] = src[3 * i + j];
}
#endif

/* dst[j ldo + i] = src[i ldi + j] for rows [i0, i1) and columns [j0, j1), element by element. */
#define TILE_LOOP(src, ldi, dst, ldo, i0, i1, j0, j1)                                            \
    for (int64_t j = (j0); j < (j1); j++)                                                        \
        for (int64_t i = (i0); i < (i1); i++) (dst)[j * (ldo) + i] = (src)[i * (ldi) + j]

/* Rows [i0, i1) of one image in tiles of TILE_C columns; with simd, each tile's whole 8 x 8 blocks
 * in registers and the rest element by element. */
static void tile_rows_4(const uint32_t *restrict src, int64_t ldi, uint32_t *restrict dst, int64_t ldo, int64_t i0,
                        int64_t i1, int64_t cols, bool simd)
{
    for (int64_t j0 = 0; j0 < cols; j0 += TILE_C) {
        int64_t j1 = j0 + TILE_C < cols ? j0 + TILE_C : cols, i8 = i0;
#ifdef NB_X86_SIMD
        if (simd) {
            int64_t j8 = j0 + (j1 - j0) / 8 * 8;
            i8 = i0 + (i1 - i0) / 8 * 8;
            for (int64_t i = i0; i < i8; i += 8)
                for (int64_t j = j0; j < j8; j += 8) t8x8(src + i * ldi + j, ldi, dst + j * ldo + i, ldo);
            TILE_LOOP(src, ldi, dst, ldo, i0, i8, j8, j1);
        }
#else
        (void)simd;
#endif
        TILE_LOOP(src, ldi, dst, ldo, i8, i1, j0, j1);
    }
}

static void transpose_4(const void *in, int64_t ldi, void *out, int64_t ldo, int64_t n, int64_t rows, int64_t cols)
{
#ifdef NB_X86_SIMD
    enum { TILES, INTERLEAVE3, DEINTERLEAVE3 } way = TILES;
    bool simd = nb_cpu_avx2_fma();
    if (simd && rows == 3 && ldo == 3) way = INTERLEAVE3; /* an image batch to channels-last */
    else if (simd && cols == 3 && ldi == 3) way = DEINTERLEAVE3; /* and back */
#else
    bool simd = false;
#endif
    int64_t rt = (rows + TILE_R - 1) / TILE_R;
    _Pragma("omp parallel for collapse(2) num_threads(nb_cpu_threads_for(n * rows * cols, NB_CPU_GRAIN))")
    for (int64_t b = 0; b < n; b++)
        for (int64_t ti = 0; ti < rt; ti++) {
            const uint32_t *src = (const uint32_t *)in + b * rows * ldi;
            uint32_t *dst = (uint32_t *)out + b * cols * ldo;
            int64_t i0 = ti * TILE_R, i1 = i0 + TILE_R < rows ? i0 + TILE_R : rows;
#ifdef NB_X86_SIMD
            if (way == INTERLEAVE3) interleave3(src, ldi, dst, cols); /* rows == 3: one tile */
            else if (way == DEINTERLEAVE3) deinterleave3(src + 3 * i0, dst + i0, ldo, i1 - i0);
            else
#endif
                tile_rows_4(src, ldi, dst, ldo, i0, i1, cols, simd);
        }
}

static void transpose_8(const void *in, int64_t ldi, void *out, int64_t ldo, int64_t n, int64_t rows, int64_t cols)
{
    int64_t rt = (rows + TILE - 1) / TILE;
    _Pragma("omp parallel for collapse(2) num_threads(nb_cpu_threads_for(n * rows * cols, NB_CPU_GRAIN))")
    for (int64_t b = 0; b < n; b++)
        for (int64_t ti = 0; ti < rt; ti++) {
            const uint64_t *restrict src = (const uint64_t *)in + b * rows * ldi;
            uint64_t *restrict dst = (uint64_t *)out + b * cols * ldo;
            int64_t i0 = ti * TILE, i1 = i0 + TILE < rows ? i0 + TILE : rows;
            for (int64_t j0 = 0; j0 < cols; j0 += TILE) {
                int64_t j1 = j0 + TILE < cols ? j0 + TILE : cols;
                TILE_LOOP(src, ldi, dst, ldo, i0, i1, j0, j1);
            }
        }
}

void nb_cpu_transpose(size_t es, const void *in, int64_t ldi, void *out, int64_t ldo, int64_t n, int64_t rows,
                      int64_t cols)
{
    NB_ASSERT(es == 4 || es == 8);
    (es == 4 ? transpose_4 : transpose_8)(in, ldi, out, ldo, n, rows, cols);
}

/* Whether t (4-D) is dense with its dims laid out in memory in the order ord, outermost first
 * (a dim of size 1 may have any stride). */
static bool dense_in_order(const nb_tensor *t, const int ord[4])
{
    int64_t st = 1;
    for (int k = 3; k >= 0; k--) {
        int d = ord[k];
        if (t->shape[d] != 1 && t->strides[d] != st) return false;
        st *= t->shape[d];
    }
    return true;
}

/* The copy as a transpose when it is one: same dtype of 4 or 8 bytes, both sides dense, dim 0
 * outermost on both, and the other three dims in memory as (1, 2, 3) on one side and either
 * (2, 3, 1) (NCHW <-> channels-last) or (3, 1, 2) (a [N, H, W, C] view of NCHW data, which is
 * how nb_contiguous_format makes channels-last) on the other. False: not such a copy. */
static bool copy_nchw_nhwc(const nb_kargs *a)
{
    const nb_tensor *in = a->in[0];
    nb_tensor *out = a->out;
    size_t es = nb_dtype_size(out->dtype);
    if (out->ndim != 4 || in->ndim != 4 || in->dtype != out->dtype || (es != 4 && es != 8)) return false;
    for (int d = 0; d < 4; d++)
        if (in->shape[d] != out->shape[d]) return false;
    static const int plain[4] = {0, 1, 2, 3}, last[4] = {0, 2, 3, 1}, first[4] = {0, 3, 1, 2};
    const int64_t *s = out->shape;
    int64_t rows, cols; /* per image, in's [rows, cols] becomes out's [cols, rows] */
    bool in_plain = dense_in_order(in, plain), out_plain = dense_in_order(out, plain);
    if (in_plain && !out_plain && dense_in_order(out, last)) {
        rows = s[1];
        cols = s[2] * s[3];
    } else if (out_plain && !in_plain && dense_in_order(in, last)) {
        rows = s[2] * s[3];
        cols = s[1];
    } else if (out_plain && !in_plain && dense_in_order(in, first)) {
        rows = s[3];
        cols = s[1] * s[2];
    } else if (in_plain && !out_plain && dense_in_order(out, first)) {
        rows = s[1] * s[2];
        cols = s[3];
    } else {
        return false;
    }
    nb_cpu_transpose(es, nb__data(in), cols, nb__data(out), rows, s[0], rows, cols);
    return true;
}

nb_status nb_cpu_k_copy(nb_op op, const nb_kargs *a)
{
    if (copy_nchw_nhwc(a)) return NB_OK;
    nb_cpu_iter it;
    nb_cpu_iter_elementwise(&it, a->out, &a->in[0], 1);
    size_t es = nb_dtype_size(a->out->dtype);
    if (a->out->dtype == a->in[0]->dtype) {
        if (copy_rows(&it, es)) return NB_OK;
        nb_cpu_loop_fn same = copy_same;
#ifdef NB_STREAM
        if (nb_cpu_streams_output(nb_tensor_numel(a->out) * (int64_t)es)) same = copy_same_nt;
#endif
        nb_cpu_iter_run(&it, same, &es, 0);
        return NB_OK;
    }
    nb_cpu_loop_fn loop = copy_loop(a->out->dtype, a->in[0]->dtype);
    if (!loop)
        return nb__err(NB_ERR_DTYPE, "copy: no conversion from %s to %s on the CPU",
                       nb_dtype_name(a->in[0]->dtype), nb_dtype_name(a->out->dtype));
    nb_cpu_iter_run(&it, loop, NULL, 0);
    return NB_OK;
}

/* memcpy, inline for short runs of whole 16-byte pieces (the call was a third of the time of a
 * cat of 128-byte chunks). The empty asm hides each piece's value from GCC, which otherwise
 * recognises the loop as a copy and calls memmove per chunk after all (half the cat's profile
 * on Zen 3). That cat, of two channels-last [32, 32, 28, 28] float32 at 1 thread, is bound by
 * memory there either way: 0.42-0.68 ms against 0.52-0.70 with the calls (PyTorch 0.54). */
static inline void copy_chunk(char *restrict d, const char *restrict q, size_t bytes)
{
#ifdef NB_STREAM
    if (bytes <= 512 && bytes % 16 == 0) {
        for (size_t k = 0; k < bytes; k += 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(q + k));
            __asm__("" : "+x"(v));
            _mm_storeu_si128((__m128i *)(d + k), v);
        }
        return;
    }
#endif
    memcpy(d, q, bytes);
}

/* CAT: in[0 .. i1) (i1 <= 4, none empty along the dim) joined along dim i0 into out, the slice
 * of the whole result they fill. Where out is dense from the dim inwards in its own memory order
 * and each input is dense the same way, the result is written in memory order: for each position
 * of the dims outside the dim, each input's chunk in turn. A channels-last cat over the channels
 * then writes one stream instead of every other 128 bytes once per input: 4.8 -> 1.9 ms for two
 * [128, 32, 28, 28] float32 at 1 thread (Zen 4; PyTorch 1.6). Otherwise, and for mixed dtypes,
 * each input is copied into its slice of out. */
static bool cat_in_order(const nb_kargs *a)
{
    const nb_tensor *out = a->out;
    int n = (int)a->i1, dim = (int)a->i0, nd = out->ndim;
    size_t es = nb_dtype_size(out->dtype);
    for (int i = 0; i < n; i++)
        if (a->in[i]->dtype != out->dtype) return false;
    int ord[NB_MAX_DIMS] = {0}, m = 0; /* out's dims of size > 1 and dim, outermost first, stable */
    for (int d = 0; d < nd; d++) {
        if (out->shape[d] == 1 && d != dim) continue;
        int j = m++;
        while (j > 0 && out->strides[ord[j - 1]] < out->strides[d]) ord[j] = ord[j - 1], j--;
        ord[j] = d;
    }
    int k = 0;
    while (ord[k] != dim) k++;
    int64_t inner = 1; /* elements per position of the dim, the same on every operand */
    for (int j = m - 1; j > k; j--) {
        if (out->strides[ord[j]] != inner) return false;
        for (int i = 0; i < n; i++)
            if (a->in[i]->strides[ord[j]] != inner) return false;
        inner *= out->shape[ord[j]];
    }
    if (out->strides[dim] != inner) return false;
    for (int i = 0; i < n; i++)
        if (a->in[i]->shape[dim] > 1 && a->in[i]->strides[dim] != inner) return false;
    /* the outer dims, merged where every operand steps through two as one */
    int64_t osh[NB_MAX_DIMS], ost[5][NB_MAX_DIMS], outer = 1;
    int no = 0;
    for (int j = 0; j < k; j++) {
        int d = ord[j];
        bool merge = no > 0 && ost[0][no - 1] == out->strides[d] * out->shape[d];
        for (int i = 0; i < n && merge; i++) merge = ost[1 + i][no - 1] == a->in[i]->strides[d] * out->shape[d];
        if (merge) {
            osh[no - 1] *= out->shape[d];
            ost[0][no - 1] = out->strides[d];
            for (int i = 0; i < n; i++) ost[1 + i][no - 1] = a->in[i]->strides[d];
        } else {
            osh[no] = out->shape[d];
            ost[0][no] = out->strides[d];
            for (int i = 0; i < n; i++) ost[1 + i][no] = a->in[i]->strides[d];
            no++;
        }
        outer *= out->shape[d];
    }
    if (outer < 16) return false; /* a few long chunks: the threaded copies do better */
    char *ob = nb__data(out);
    const char *ib[4];
    size_t chunk[4];
    int64_t at[4]; /* bytes per outer position, and the offset of each in out's */
    for (int i = 0, pos = 0; i < n; i++) {
        ib[i] = nb__data(a->in[i]);
        chunk[i] = (size_t)(a->in[i]->shape[dim] * inner) * es;
        at[i] = pos * inner * (int64_t)es;
        pos += (int)a->in[i]->shape[dim];
    }
    for (int j = 0; j < no; j++)
        for (int i = 0; i <= n; i++) ost[i][j] *= (int64_t)es;
    int nt = nb_cpu_threads_for(nb_tensor_numel(out), 0);
#pragma omp parallel num_threads(nt)
    {
        int64_t o0, o1, idx[NB_MAX_DIMS], off[5] = {0};
        nb_cpu_thread_share(outer, &o0, &o1);
        for (int64_t rem = o0, j = no - 1; j >= 0; j--) {
            idx[j] = rem % osh[j];
            rem /= osh[j];
            for (int i = 0; i <= n; i++) off[i] += idx[j] * ost[i][j];
        }
        for (int64_t o = o0; o < o1; o++) {
            for (int i = 0; i < n; i++) copy_chunk(ob + off[0] + at[i], ib[i] + off[1 + i], chunk[i]);
            for (int j = no - 1; j >= 0; j--) {
                for (int i = 0; i <= n; i++) off[i] += ost[i][j];
                if (++idx[j] < osh[j]) break;
                for (int i = 0; i <= n; i++) off[i] -= ost[i][j] * osh[j];
                idx[j] = 0;
            }
        }
    }
    return true;
}

nb_status nb_cpu_k_cat(nb_op op, const nb_kargs *a)
{
    (void)op;
    if (cat_in_order(a)) return NB_OK;
    const nb_tensor *out = a->out;
    int dim = (int)a->i0;
    int64_t shape[NB_MAX_DIMS], pos = 0;
    memcpy(shape, out->shape, sizeof shape);
    for (int i = 0; i < (int)a->i1; i++) {
        shape[dim] = a->in[i]->shape[dim];
        nb_tensor *v = nb__tensor_alias(out, shape, out->strides, out->ndim, out->offset + pos * out->strides[dim]);
        if (!v) return nb_last_status();
        nb_kargs c = {.out = v, .in = {a->in[i]}};
        nb_status st = nb_cpu_k_copy(NB_OP_COPY, &c);
        nb__release(v);
        NB_TRY(st);
        pos += shape[dim];
    }
    return NB_OK;
}

#define FILL_LOOP(T)                                                                             \
    static void fill_##T(char **p, const int64_t *s, int64_t n, void *ctx)                       \
    {                                                                                            \
        T v = *(const T *)ctx;                                                                   \
        if (s[0] == sizeof(T)) {                                                                 \
            T *restrict o = (T *)p[0];                                                           \
            for (int64_t k = 0; k < n; k++) o[k] = v;                                            \
        } else {                                                                                 \
            for (int64_t k = 0; k < n; k++) *(T *)(p[0] + k * s[0]) = v;                         \
        }                                                                                        \
    }
FILL_LOOP(f32)
FILL_LOOP(f64)
FILL_LOOP(i64)
FILL_LOOP(i32)
FILL_LOOP(u8)
FILL_LOOP(b8)

nb_status nb_cpu_k_fill(nb_op op, const nb_kargs *a)
{
    nb_cpu_iter it;
    nb_cpu_iter_elementwise(&it, a->out, NULL, 0);
    union { f32 f; f64 d; i64 l; i32 i; u8 u; b8 b; } v;
    nb_cpu_loop_fn loop = NULL;
    double x = a->s0;
    switch (a->out->dtype) {
    case NB_FLOAT32: v.f = (f32)x; loop = fill_f32; break;
    case NB_FLOAT64: v.d = x; loop = fill_f64; break;
    case NB_INT64: v.l = (i64)x; loop = fill_i64; break;
    case NB_INT32: v.i = (i32)x; loop = fill_i32; break;
    case NB_UINT8: v.u = (u8)x; loop = fill_u8; break;
    case NB_BOOL: v.b = x != 0; loop = fill_b8; break;
    default:
        return nb__err(NB_ERR_DTYPE, "fill: dtype %s is not supported on the CPU", nb_dtype_name(a->out->dtype));
    }
    nb_cpu_iter_run(&it, loop, &v, 0);
    return NB_OK;
}
