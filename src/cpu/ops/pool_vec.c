/* The pool family's vector kernels (src/cpu/pool_impl.h): max pooling of channels-last float32 on
 * AVX-512, and the global average pool (adaptive to 1 x 1) of float32 on AVX2, NCHW and
 * channels-last. Each gives the bits of src/cpu/ops/pool.c's loops: the same taps in the same
 * order. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_impl.h"
#include "cpu/pool_impl.h"

/* Max pooling on channels-last float32 with channels a multiple of 16 (AlexNet-R's 32,
 * ResNet-50's 64), on AVX-512: the same taps in the same order, the running maxima and indices of
 * 16 channels in two registers, so an output pixel is a few instructions per tap rather than
 * pool.c's loops. A tap's update waits on the last (compare, mask, select: about 6 cycles), so
 * NCH = 2 or 4 groups of 16 channels run side by side, and the input rows the next output row
 * adds are prefetched a row ahead (AlexNet-R's pool2, [1024, 32, 15, 15], 5.9 -> 3.4 ms at 1
 * thread). The backward gathers instead of scattering: each input pixel's gradient is the sum,
 * over the windows that cover it in output order, of the gradients whose index is that pixel;
 * the sums of the scatter (which adds in output order into zeros), bitwise, but gx is written
 * once, with no zeroing pass, and each thread owns input rows. (Streaming stores for a gx larger
 * than the last-level cache made AlexNet-R's pool1 slower: 8.3 -> 13 ms.) */
#if defined(__x86_64__)
#include <immintrin.h>

#define V512 __attribute__((target("avx512f")))

bool nb__pool_max_nhwc_vec(const pool_geom *g)
{
    return g->c % 16 == 0 && g->h * g->w <= INT32_MAX && nb_cpu_avx512();
}

/* The channels [c0, c0 + 16 NCH) of one output pixel: the window's taps from xw (its clipped
 * corner (y0, x0)), rows x cols of them, w pixels a row; tap (iy, ix) of the clipped window has
 * index j0 + iy jr + ix. Stores the maxima to yp and the indices to ip (uint8 with tap, else
 * int64), with the fused ReLU as max_row's. */
#define MAX_PIX_VEC(NCH)                                                                           \
    V512 static inline void max_pix_vec##NCH(const float *xw, int64_t c, int64_t w, int64_t rows, int64_t cols, \
                                             int32_t j0, int32_t jr, bool relu, bool tap, float *yp, void *ip, \
                                             int64_t c0)                                           \
    {                                                                                              \
        __m512 m[NCH];                                                                             \
        __m512i bi[NCH];                                                                           \
        for (int k = 0; k < NCH; k++) m[k] = _mm512_set1_ps(-INFINITY), bi[k] = _mm512_set1_epi32(j0); \
        for (int64_t iy = 0; iy < rows; iy++)                                                      \
            for (int64_t ix = 0; ix < cols; ix++) {                                                \
                const float *xt = xw + (iy * w + ix) * c + c0;                                     \
                __m512i j = _mm512_set1_epi32(j0 + (int32_t)(iy * jr + ix));                       \
                for (int k = 0; k < NCH; k++) {                                                    \
                    __m512 v = _mm512_loadu_ps(xt + 16 * k);                                       \
                    __mmask16 take = _mm512_cmp_ps_mask(v, m[k], _CMP_GT_OQ) |                     \
                                     (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) &                     \
                                      _mm512_cmp_ps_mask(m[k], m[k], _CMP_ORD_Q));                 \
                    m[k] = _mm512_mask_mov_ps(m[k], take, v);                                      \
                    bi[k] = _mm512_mask_mov_epi32(bi[k], take, j);                                 \
                }                                                                                  \
            }                                                                                      \
        for (int k = 0; k < NCH; k++) {                                                            \
            int64_t ch = c0 + 16 * k;                                                              \
            if (relu) {                                                                            \
                __m512 z = _mm512_setzero_ps();                                                    \
                __mmask16 keep = _mm512_cmp_ps_mask(m[k], z, _CMP_NLE_UQ);                         \
                bi[k] = _mm512_mask_mov_epi32(_mm512_set1_epi32(tap ? NO_TAP : -1), keep, bi[k]);  \
                m[k] = _mm512_mask_mov_ps(m[k], _mm512_cmp_ps_mask(m[k], z, _CMP_LT_OQ), z);       \
            }                                                                                      \
            _mm512_storeu_ps(yp + ch, m[k]);                                                       \
            if (tap) {                                                                             \
                _mm_storeu_si128((__m128i *)((uint8_t *)ip + ch), _mm512_cvtepi32_epi8(bi[k]));    \
            } else {                                                                               \
                int64_t *i64 = (int64_t *)ip + ch;                                                 \
                _mm512_storeu_si512(i64, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(bi[k])));    \
                _mm512_storeu_si512(i64 + 8, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(bi[k], 1))); \
            }                                                                                      \
        }                                                                                          \
    }

MAX_PIX_VEC(1)
MAX_PIX_VEC(2)
MAX_PIX_VEC(4)

V512 void nb__pool_max_fwd_nhwc_vec(pool_geom g, const float *x, float *y, void *idx, bool tap)
{
    int64_t c = g.c, w = g.w, isz = tap ? 1 : (int64_t)sizeof(int64_t);
    int nch = c % 64 == 0 ? 4 : c % 32 == 0 ? 2 : 1;
    ROWS_NHWC_FOR(g) {
        int64_t n = r / g.oh, oy = r % g.oh;
        const float *xn = x + n * g.h * w * c;
        int64_t wy = oy * g.sh - g.ph, y1 = wy + g.kh < g.h ? wy + g.kh : g.h, y0 = wy < 0 ? 0 : wy;
        for (int64_t ox = 0; ox < g.ow; ox++) {
            int64_t wx = ox * g.sw - g.pw, x1 = wx + g.kw < w ? wx + g.kw : w, x0 = wx < 0 ? 0 : wx;
            /* the next output row's new input rows under this window's columns (those the
             * previous pixel's prefetch left out) */
            for (int64_t iy = y1; iy < y1 + g.sh && iy < g.h; iy++)
                for (int64_t ix = ox ? (x1 - g.sw > x0 ? x1 - g.sw : x0) : x0; ix < x1; ix++)
                    for (int64_t c0 = 0; c0 < c; c0 += 16)
                        _mm_prefetch((const char *)(xn + (iy * w + ix) * c + c0), _MM_HINT_T0);
            const float *xw = xn + (y0 * w + x0) * c;
            int32_t jr = (int32_t)(tap ? g.kw : w);
            int32_t j0 = (int32_t)(tap ? (y0 - wy) * g.kw + x0 - wx : y0 * w + x0);
            float *yp = y + (r * g.ow + ox) * c;
            void *ip = (char *)idx + (r * g.ow + ox) * c * isz;
            for (int64_t c0 = 0; c0 < c; c0 += 16 * nch) {
                if (nch == 4) max_pix_vec4(xw, c, w, y1 - y0, x1 - x0, j0, jr, g.relu, tap, yp, ip, c0);
                else if (nch == 2) max_pix_vec2(xw, c, w, y1 - y0, x1 - x0, j0, jr, g.relu, tap, yp, ip, c0);
                else max_pix_vec1(xw, c, w, y1 - y0, x1 - x0, j0, jr, g.relu, tap, yp, ip, c0);
            }
        }
    }
}

/* The outputs [*a, *b) along one axis whose windows cover input position i. */
static void covering(int64_t i, int64_t k, int64_t s, int64_t p, int64_t on, int64_t *a, int64_t *b)
{
    int64_t lo = i + p - k + 1;
    *a = lo <= 0 ? 0 : (lo + s - 1) / s;
    *b = (i + p) / s + 1 < on ? (i + p) / s + 1 : on;
}

/* The gradient of input pixel (iy, ix), channels [c0, c0 + 16 NCH), to gp: the sum over the
 * covering outputs [oya, oyb) x [oxa, oxb) of those whose index is the pixel's, NCH groups of 16
 * channels side by side (the window loops' short, varying trip counts mispredict: once a pixel,
 * not once a group). TAP: uint8 taps (pixel (iy, ix) is tap (iy - wy) kw + ix - wx of the window
 * with corner (wy, wx)), else int64. */
#define GATHER_VEC(NCH, TAP, sfx)                                                                  \
    V512 static inline void gather##NCH##_##sfx(const pool_geom *g, const float *gyn, const void *idxn, int64_t iy, \
                                                int64_t ix, const int64_t *ob, int64_t c0, float *gp)  \
    {                                                                                              \
        int64_t c = g->c;                                                                          \
        __m512 acc[NCH];                                                                           \
        for (int k = 0; k < NCH; k++) acc[k] = _mm512_setzero_ps();                                \
        for (int64_t oy = ob[0]; oy < ob[1]; oy++)                                                 \
            for (int64_t ox = ob[2]; ox < ob[3]; ox++) {                                           \
                int64_t o = (oy * g->ow + ox) * c + c0;                                            \
                __m512i j = TAP ? _mm512_set1_epi32((int32_t)((iy - oy * g->sh + g->ph) * g->kw + ix - ox * g->sw + g->pw)) \
                                : _mm512_set1_epi64(iy * g->w + ix);                               \
                for (int k = 0; k < NCH; k++) {                                                    \
                    __mmask16 m;                                                                   \
                    if (TAP) {                                                                     \
                        __m128i b = _mm_loadu_si128((const __m128i *)((const uint8_t *)idxn + o + 16 * k)); \
                        m = _mm512_cmpeq_epi32_mask(_mm512_cvtepu8_epi32(b), j);                   \
                    } else {                                                                       \
                        const int64_t *i64 = (const int64_t *)idxn + o + 16 * k;                   \
                        m = (__mmask16)(_mm512_cmpeq_epi64_mask(_mm512_loadu_si512(i64), j) |      \
                                        (_mm512_cmpeq_epi64_mask(_mm512_loadu_si512(i64 + 8), j) << 8)); \
                    }                                                                              \
                    acc[k] = _mm512_mask_add_ps(acc[k], m, acc[k], _mm512_loadu_ps(gyn + o + 16 * k)); \
                }                                                                                  \
            }                                                                                      \
        for (int k = 0; k < NCH; k++) _mm512_storeu_ps(gp + c0 + 16 * k, acc[k]);                 \
    }

GATHER_VEC(1, true, tap)
GATHER_VEC(2, true, tap)
GATHER_VEC(4, true, tap)
GATHER_VEC(1, false, i64)
GATHER_VEC(2, false, i64)
GATHER_VEC(4, false, i64)

/* cov [2 w]: each input column's covering outputs, made once per call (two divisions a pixel
 * cost as much as the rest of its work). */
V512 void nb__pool_max_bwd_nhwc_vec(pool_geom g, const float *gy, const void *idx, bool tap, float *gx, int64_t *cov)
{
    int64_t c = g.c, w = g.w, isz = tap ? 1 : (int64_t)sizeof(int64_t);
    int nch = c % 64 == 0 ? 4 : c % 32 == 0 ? 2 : 1;
    for (int64_t ix = 0; ix < w; ix++) covering(ix, g.kw, g.sw, g.pw, g.ow, &cov[2 * ix], &cov[2 * ix + 1]);
    _Pragma("omp parallel for num_threads(nb_cpu_threads_for(g.planes * g.h * g.w, NB_CPU_GRAIN))")
    for (int64_t r = 0; r < g.n * g.h; r++) {
        int64_t n = r / g.h, iy = r % g.h, ob[4];
        covering(iy, g.kh, g.sh, g.ph, g.oh, &ob[0], &ob[1]);
        const float *gyn = gy + n * g.oh * g.ow * c;
        const void *idxn = (const char *)idx + n * g.oh * g.ow * c * isz;
        for (int64_t ix = 0; ix < w; ix++) {
            ob[2] = cov[2 * ix], ob[3] = cov[2 * ix + 1];
            float *gp = gx + (r * w + ix) * c;
            for (int64_t c0 = 0; c0 < c; c0 += 16 * nch) {
                if (tap && nch == 4) gather4_tap(&g, gyn, idxn, iy, ix, ob, c0, gp);
                else if (tap && nch == 2) gather2_tap(&g, gyn, idxn, iy, ix, ob, c0, gp);
                else if (tap) gather1_tap(&g, gyn, idxn, iy, ix, ob, c0, gp);
                else if (nch == 4) gather4_i64(&g, gyn, idxn, iy, ix, ob, c0, gp);
                else if (nch == 2) gather2_i64(&g, gyn, idxn, iy, ix, ob, c0, gp);
                else gather1_i64(&g, gyn, idxn, iy, ix, ob, c0, gp);
            }
        }
    }
}

/* The global average pool of NCHW float32 (adaptive to 1 x 1: each plane's window is all of it)
 * on AVX2: the taps t .. t + 7 of eight planes are loaded as eight vectors and transposed, so
 * that each lane holds one plane and its taps are added in order, as MEAN_FWD and the
 * channels-last kernels add them (the results are the same to the bit); two groups of eight
 * planes side by side keep two chains of adds in flight. [32, 32, 28, 28] at 1 thread on Zen 3:
 * 0.15-0.19 -> 0.08-0.11 ms (PyTorch 0.085-0.10). Four groups side by side need more than
 * AVX2's 16 registers: [128, 32, 28, 28] on Zen 4 0.27-0.30 -> 0.34-0.87 ms. */
#define AVX2 __attribute__((target("avx2")))
AVX2 static inline void add_taps8(__m256 *s, const float *x, int64_t hw)
{
    __m256 r[8], t[8], u[8];
    for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps(x + k * hw);
    for (int k = 0; k < 4; k++) {
        t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 2; k++) { /* u[4k + i]: taps i and i + 4 of planes 4k .. 4k + 3 */
        u[4 * k] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0x44);
        u[4 * k + 1] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0xee);
        u[4 * k + 2] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
        u[4 * k + 3] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xee);
    }
    for (int i = 0; i < 4; i++) *s = _mm256_add_ps(*s, _mm256_permute2f128_ps(u[i], u[4 + i], 0x20));
    for (int i = 0; i < 4; i++) *s = _mm256_add_ps(*s, _mm256_permute2f128_ps(u[i], u[4 + i], 0x31));
}

/* The sums of the eight planes at xa and of the eight at xb (hw taps each) into sa and sb. */
AVX2 static void global_sums_avx2(const float *xa, const float *xb, int64_t hw, float *sa, float *sb)
{
    __m256 a = _mm256_setzero_ps(), b = a;
    int64_t t = 0;
    for (; t + 8 <= hw; t += 8) {
        add_taps8(&a, xa + t, hw);
        add_taps8(&b, xb + t, hw);
    }
    _mm256_storeu_ps(sa, a);
    _mm256_storeu_ps(sb, b);
    for (int k = 0; k < 8; k++)
        for (int64_t j = t; j < hw; j++) sa[k] += xa[k * hw + j], sb[k] += xb[k * hw + j];
}

/* The planes of NCHW x, eight at a time: returns how many (the caller pools the rest). */
static int64_t global_nchw(pool_geom g, const float *x, float *y)
{
    int64_t hw = g.h * g.w, groups = g.planes / 8, items = (groups + 1) / 2;
    int nt = nb_cpu_threads_for(g.planes * hw, NB_CPU_GRAIN);
#pragma omp parallel for num_threads(nt)
    for (int64_t it = 0; it < items; it++) {
        float s[16];
        const float *xa = x + it * 16 * hw;
        bool two = 2 * it + 1 < groups;
        global_sums_avx2(xa, two ? xa + 8 * hw : xa, hw, s, s + 8);
        for (int k = 0; k < (two ? 16 : 8); k++) y[it * 16 + k] = s[k] / (float)hw;
    }
    return groups * 8;
}

/* The global average pool of channels-last float32 with C a multiple of 8, up to CL_GLOBAL_MAX_C:
 * each channel's taps added in order from zero and the sum divided by the taps' count, as
 * MEAN_PIX_NHWC and the NCHW kernels do (the same bits). MEAN_PIX_NHWC keeps its sums in memory,
 * a store and a load between one tap's add and the next, so with few channels its chains of
 * adds wait on memory: [128, 32, 28, 28] took 0.27 ms at 1 thread on Zen 4 (PyTorch 0.15-0.19).
 * Here NV vectors of eight channels of two images are 2 NV registers, that many chains side by
 * side. With many channels each tap already has that many independent adds, and reading a block of
 * channels at a time would stride through the image, so those keep MEAN_PIX_NHWC. */
#define CL_GLOBAL_MAX_C 256
#define CL_GLOBAL_FN(NV)                                                                           \
    AVX2 static void global_cl_##NV(const float *xa, const float *xb, int64_t hw, int64_t c, float *ya, float *yb) \
    {                                                                                              \
        __m256 a[NV], b[NV];                                                                       \
        for (int v = 0; v < NV; v++) a[v] = b[v] = _mm256_setzero_ps();                            \
        for (int64_t t = 0; t < hw; t++)                                                           \
            for (int v = 0; v < NV; v++) {                                                         \
                a[v] = _mm256_add_ps(a[v], _mm256_loadu_ps(xa + t * c + 8 * v));                   \
                b[v] = _mm256_add_ps(b[v], _mm256_loadu_ps(xb + t * c + 8 * v));                   \
            }                                                                                      \
        __m256 d = _mm256_set1_ps((float)hw);                                                      \
        for (int v = 0; v < NV; v++) {                                                             \
            _mm256_storeu_ps(ya + 8 * v, _mm256_div_ps(a[v], d));                                  \
            _mm256_storeu_ps(yb + 8 * v, _mm256_div_ps(b[v], d));                                  \
        }                                                                                          \
    }
CL_GLOBAL_FN(1)
CL_GLOBAL_FN(2)
CL_GLOBAL_FN(3)
CL_GLOBAL_FN(4)

/* The images of channels-last x, two at a time (an odd last one with itself, into a scratch
 * row), channels in blocks of 32; returns the images done: all of them. */
static int64_t global_cl(pool_geom g, const float *x, float *y)
{
    static void (*const fn[4])(const float *, const float *, int64_t, int64_t, float *, float *) = {
        global_cl_1, global_cl_2, global_cl_3, global_cl_4};
    int64_t hw = g.h * g.w, c = g.c, nblk = (c + 31) / 32, pairs = (g.n + 1) / 2;
    int nt = nb_cpu_threads_for(g.planes * hw, NB_CPU_GRAIN);
#pragma omp parallel for num_threads(nt)
    for (int64_t it = 0; it < pairs * nblk; it++) {
        int64_t na = it / nblk * 2, c0 = it % nblk * 32, nc = c - c0 < 32 ? c - c0 : 32;
        bool two = na + 1 < g.n;
        float spare[32];
        const float *xa = x + na * hw * c + c0;
        fn[nc / 8 - 1](xa, two ? xa + hw * c : xa, hw, c, y + na * c + c0, two ? y + (na + 1) * c + c0 : spare);
    }
    return g.n;
}

bool nb__pool_global_mean_vec(const pool_geom *g, bool cl)
{
    bool fits = cl ? g->c % 8 == 0 && g->c <= CL_GLOBAL_MAX_C : true;
    return g->oh == 1 && g->ow == 1 && fits && nb_cpu_avx2_fma();
}

int64_t nb__pool_global_mean_f32(pool_geom g, const float *x, float *y, bool cl)
{
    return cl ? global_cl(g, x, y) : global_nchw(g, x, y);
}

#else

bool nb__pool_max_nhwc_vec(const pool_geom *g)
{
    (void)g;
    return false;
}

void nb__pool_max_fwd_nhwc_vec(pool_geom g, const float *x, float *y, void *idx, bool tap)
{
    (void)g, (void)x, (void)y, (void)idx, (void)tap;
}

void nb__pool_max_bwd_nhwc_vec(pool_geom g, const float *gy, const void *idx, bool tap, float *gx, int64_t *cov)
{
    (void)g, (void)gy, (void)idx, (void)tap, (void)gx, (void)cov;
}

bool nb__pool_global_mean_vec(const pool_geom *g, bool cl)
{
    (void)g, (void)cl;
    return false;
}

int64_t nb__pool_global_mean_f32(pool_geom g, const float *x, float *y, bool cl)
{
    (void)g, (void)x, (void)y, (void)cl;
    return 0;
}

#endif
