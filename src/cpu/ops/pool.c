/* The pool kernel family: 2-D max, average and adaptive average pooling and their backward
 * (parameters packed as ops.def says), on NCHW contiguous operands or, when the input (gx for the
 * backwards) is channels-last, on channels-last ones (NHWC in memory; the second half of the
 * file). NCHW loops over (n, c) planes, one plane per thread at a time. Max pooling keeps
 * PyTorch's indices (h * W + w in the input plane, in either layout; the first maximum wins, NaN
 * counts as the maximum), which its backward scatters through; its NCHW forward is branch-free
 * and vectorised (below), several times faster than PyTorch's on the DLBench shapes; on
 * channels-last float32 with channels a multiple of 16 both directions run on AVX-512 kernels,
 * and float32 global average pools on AVX2 ones (both in pool_vec.c); oneDNN's pooling would
 * need its own workspace instead of the indices. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_impl.h"
#include "cpu/pool_impl.h"

static pool_geom geom(const nb_tensor *x, const nb_tensor *y, const nb_kargs *a)
{
    pool_geom g = {
        .n = x->shape[0], .c = x->shape[1], .planes = x->shape[0] * x->shape[1], .h = x->shape[2], .w = x->shape[3],
        .oh = y->shape[2], .ow = y->shape[3],
        .kh = a->i0 & 0xffff, .kw = (a->i0 >> 16) & 0xffff, .sh = (a->i0 >> 32) & 0xffff,
        .sw = (a->i0 >> 48) & 0xffff, .ph = a->i1 & 0xffff, .pw = (a->i1 >> 16) & 0xffff,
        .count_include_pad = a->flag,
    };
    return g;
}

#define PLANES_FOR(g) \
    _Pragma("omp parallel for num_threads(nb_cpu_threads_for((g).planes * (g).h * (g).w, NB_CPU_GRAIN))") \
    for (int64_t p = 0; p < (g).planes; p++)

/* Hot loops get an AVX-512 and an AVX2 clone beside the baseline one (picked at load time). */
#if defined(__x86_64__) && !defined(__clang__)
#define HOT __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HOT
#endif

/* Max pooling, one output row at a time: each window's taps are visited in the reference's order
 * (input row, then column) and a tap replaces the running maximum when it is the first, greater,
 * or a NaN over a number, so the first maximum wins and NaN counts as the maximum. With the ReLU
 * fused, the output is relu's (m < 0 ? 0 : m) and the index -1 where relu's backward gives 0
 * (m <= 0; a NaN passes, as threshold_backward's). The select is
 * branch-free (bitwise, not short-circuit): on real data the comparison goes either way, and a
 * branch on it mispredicts about every other tap. The columns' clipped windows [xlo, xhi) are
 * computed once per call. */
#define MAX_ROW(T)                                                                                 \
    HOT static void max_row_##T(const pool_geom *g, const T *xp, int64_t oy, int64_t oxa, int64_t oxb, \
                                const int64_t *xlo, const int64_t *xhi, T *yr, int64_t *ir)        \
    {                                                                                              \
        int64_t y0 = oy * g->sh - g->ph, y1 = y0 + g->kh < g->h ? y0 + g->kh : g->h;               \
        y0 = y0 < 0 ? 0 : y0;                                                                      \
        int64_t w = g->w;                                                                          \
        for (int64_t ox = oxa; ox < oxb; ox++) {                                                   \
            T m = (T)-INFINITY;                                                                    \
            int64_t bi = -1;                                                                       \
            for (int64_t iy = y0; iy < y1; iy++) {                                                 \
                const T *xr = xp + iy * w;                                                         \
                for (int64_t ix = xlo[ox]; ix < xhi[ox]; ix++) {                                   \
                    T v = xr[ix];                                                                  \
                    int take = (bi < 0) | (v > m) | ((v != v) & (m == m));                         \
                    m = take ? v : m;                                                              \
                    bi = take ? iy * w + ix : bi;                                                  \
                }                                                                                  \
            }                                                                                      \
            yr[ox] = g->relu && m < 0 ? 0 : m;                                                     \
            ir[ox] = g->relu && m <= 0 ? -1 : bi;                                                  \
        }                                                                                          \
    }

MAX_ROW(float)
MAX_ROW(double)

#define PLANE_CHUNK 512

/* The same for outputs whose windows are not clipped: a run of outputs, base[i] the input index
 * of run element i's window corner, ypos[i] its output's index in the plane, toff the taps'
 * offsets from the corner in window order. Each tap is one pass over the run (a gather, which
 * vectorises). */
#define MAX_PLANE(T)                                                                               \
    HOT static void max_plane_##T(const T *xp, const int32_t *base, const int32_t *ypos, int64_t nout, \
                                  const int32_t *toff, int64_t ntaps, bool relu, T *y, int64_t *idx) \
    {                                                                                              \
        T m[PLANE_CHUNK];                                                                          \
        int32_t bi[PLANE_CHUNK];                                                                   \
        for (int64_t c0 = 0; c0 < nout; c0 += PLANE_CHUNK) {                                       \
            int64_t n = nout - c0 < PLANE_CHUNK ? nout - c0 : PLANE_CHUNK;                         \
            const int32_t *b = base + c0;                                                          \
            for (int64_t i = 0; i < n; i++) bi[i] = b[i] + toff[0], m[i] = xp[b[i] + toff[0]];     \
            for (int64_t t = 1; t < ntaps; t++) {                                                  \
                int32_t off = toff[t];                                                             \
                for (int64_t i = 0; i < n; i++) {                                                  \
                    int32_t j = b[i] + off;                                                        \
                    T v = xp[j], cur = m[i];                                                       \
                    int take = (v > cur) | ((v != v) & (cur == cur));                              \
                    m[i] = take ? v : cur;                                                         \
                    bi[i] = take ? j : bi[i];                                                      \
                }                                                                                  \
            }                                                                                      \
            for (int64_t i = 0; i < n; i++) {                                                      \
                y[ypos[c0 + i]] = relu && m[i] < 0 ? 0 : m[i];                                     \
                idx[ypos[c0 + i]] = relu && m[i] <= 0 ? -1 : bi[i];                                \
            }                                                                                      \
        }                                                                                          \
    }

MAX_PLANE(float)
MAX_PLANE(double)

/* The outputs whose windows lie inside the input, along one axis of input size n, output size
 * on: [*lo, *hi) (empty when none). */
static void interior(int64_t n, int64_t on, int64_t k, int64_t s, int64_t p, int64_t *lo, int64_t *hi)
{
    int64_t a = (p + s - 1) / s, b = on;                 /* first o with o s - p >= 0 */
    while (b > a && (b - 1) * s - p + k > n) b--;         /* last o with o s - p + k <= n */
    *lo = a < on ? a : on;
    *hi = b > *lo ? b : *lo;
}

/* Column ox's window clipped to the input: [xlo, xhi). */
static void col_windows(const pool_geom *g, int64_t *xlo, int64_t *xhi)
{
    for (int64_t ox = 0; ox < g->ow; ox++) {
        int64_t x0 = ox * g->sw - g->pw, x1 = x0 + g->kw < g->w ? x0 + g->kw : g->w;
        xlo[ox] = x0 < 0 ? 0 : x0;
        xhi[ox] = x1;
    }
}

/* Scratch of max_fwd: the interior's window corners and output positions (2 x its size, int32)
 * and the taps' offsets (kh kw int32), then the clipped column windows (2 ow int64). */
static size_t max_scratch_bytes(const pool_geom *g, int64_t nin)
{
    size_t n32 = (size_t)(2 * nin + g->kh * g->kw);
    return (n32 + 1) / 2 * 2 * sizeof(int32_t) + (size_t)(2 * g->ow) * sizeof(int64_t);
}

/* The interior rectangle of g: rows [r[0], r[1]) x columns [r[2], r[3]) (empty when a plane's
 * indices do not fit in 32 bits); returns its size. */
static int64_t max_interior(const pool_geom *g, int64_t *r)
{
    interior(g->h, g->oh, g->kh, g->sh, g->ph, &r[0], &r[1]);
    interior(g->w, g->ow, g->kw, g->sw, g->pw, &r[2], &r[3]);
    if (g->h * g->w > INT32_MAX) r[1] = r[0], r[3] = r[2];
    return (r[1] - r[0]) * (r[3] - r[2]);
}

/* Per plane: the outputs whose windows are inside the input (the interior rectangle r of
 * max_interior) in one max_plane run, the border ones (padding, or a window past the edge) through max_row. */
#define MAX_FWD(T)                                                                                 \
    static void max_fwd_##T(pool_geom g, const T *x, T *y, int64_t *idx, const int64_t *r, void *scratch) \
    {                                                                                              \
        int64_t nout = g.oh * g.ow, nin = (r[1] - r[0]) * (r[3] - r[2]);                           \
        int32_t *base = scratch, *ypos = base + nin, *toff = ypos + nin;                           \
        size_t n32 = (size_t)(2 * nin + g.kh * g.kw);                                              \
        int64_t *cols = (int64_t *)(void *)(base + (n32 + 1) / 2 * 2);                             \
        for (int64_t oy = r[0], i = 0; oy < r[1]; oy++)                                            \
            for (int64_t ox = r[2]; ox < r[3]; ox++, i++) {                                        \
                base[i] = (int32_t)((oy * g.sh - g.ph) * g.w + ox * g.sw - g.pw);                  \
                ypos[i] = (int32_t)(oy * g.ow + ox);                                               \
            }                                                                                      \
        for (int64_t ky = 0; ky < g.kh; ky++)                                                      \
            for (int64_t kx = 0; kx < g.kw; kx++) toff[ky * g.kw + kx] = (int32_t)(ky * g.w + kx);  \
        col_windows(&g, cols, cols + g.ow);                                                        \
        PLANES_FOR(g) {                                                                            \
            const T *xp = x + p * g.h * g.w;                                                       \
            T *yp = y + p * nout;                                                                  \
            int64_t *ip = idx + p * nout;                                                          \
            if (nin) max_plane_##T(xp, base, ypos, nin, toff, g.kh * g.kw, g.relu, yp, ip);        \
            for (int64_t oy = 0; oy < g.oh; oy++) {                                                \
                int64_t o = oy * g.ow;                                                             \
                if (oy < r[0] || oy >= r[1] || !nin) {                                             \
                    max_row_##T(&g, xp, oy, 0, g.ow, cols, cols + g.ow, yp + o, ip + o);           \
                    continue;                                                                      \
                }                                                                                  \
                max_row_##T(&g, xp, oy, 0, r[2], cols, cols + g.ow, yp + o, ip + o);               \
                max_row_##T(&g, xp, oy, r[3], g.ow, cols, cols + g.ow, yp + o, ip + o);            \
            }                                                                                      \
        }                                                                                          \
    }

#define MAX_BWD(T)                                                                                 \
    static void max_bwd_##T(pool_geom g, const T *gy, const int64_t *idx, T *gx)                  \
    {                                                                                              \
        PLANES_FOR(g) {                                                                            \
            T *gp = gx + p * g.h * g.w;                                                            \
            memset(gp, 0, (size_t)(g.h * g.w) * sizeof(T));                                        \
            for (int64_t i = p * g.oh * g.ow; i < (p + 1) * g.oh * g.ow; i++)                     \
                if (idx[i] >= 0) gp[idx[i]] += gy[i];                                              \
        }                                                                                          \
    }

/* The window of output (oy, ox) clipped to the input, and PyTorch's divisor. */
#define AVG_WINDOW(g)                                                                              \
    int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;                                          \
    int64_t y1 = y0 + g.kh < g.h + g.ph ? y0 + g.kh : g.h + g.ph;                                  \
    int64_t x1 = x0 + g.kw < g.w + g.pw ? x0 + g.kw : g.w + g.pw;                                  \
    int64_t div = (y1 - y0) * (x1 - x0);                                                           \
    y0 = y0 < 0 ? 0 : y0, x0 = x0 < 0 ? 0 : x0;                                                    \
    y1 = y1 > g.h ? g.h : y1, x1 = x1 > g.w ? g.w : x1;                                            \
    if (!g.count_include_pad) div = (y1 - y0) * (x1 - x0)

/* PyTorch's adaptive windows: [floor(o * in / out), ceil((o + 1) * in / out)). */
#define ADAPT_WINDOW(g)                                                                            \
    int64_t y0 = oy * g.h / g.oh, y1 = ((oy + 1) * g.h + g.oh - 1) / g.oh;                         \
    int64_t x0 = ox * g.w / g.ow, x1 = ((ox + 1) * g.w + g.ow - 1) / g.ow;                         \
    int64_t div = (y1 - y0) * (x1 - x0)

/* Average pooling, fixed or adaptive: the two differ only in their WINDOW (which sets y0, y1, x0,
 * x1 and div for output (oy, ox)). Eight planes at a time: each output's window is summed in
 * the same order as one plane alone and as the channels-last kernels sum it (the results are
 * the same to the bit), but eight sums run side by side instead of each add waiting on the one
 * before. A global average pool ([128, 32, 28, 28] to 1 x 1) took 2.7 ms at 1 thread with one
 * plane at a time, PyTorch 0.21 (Zen 4). */
#define MEAN_SUMS(T, NP)                                                                           \
    for (int64_t iy = y0; iy < y1; iy++)                                                           \
        for (int64_t ix = x0; ix < x1; ix++) {                                                     \
            const T *q = xp + iy * g.w + ix;                                                       \
            for (int64_t k = 0; k < (NP); k++) s[k] += q[k * hw];                                  \
        }
#define MEAN_FWD(T, name, WINDOW)                                                                  \
    static void name##_##T(pool_geom g, const T *x, T *y)                                         \
    {                                                                                              \
        int64_t hw = g.h * g.w, ohw = g.oh * g.ow, groups = (g.planes + 7) / 8;                    \
        int nt = nb_cpu_threads_for(g.planes * hw, NB_CPU_GRAIN);                                  \
        _Pragma("omp parallel for num_threads(nt)")                                                \
        for (int64_t pg = 0; pg < groups; pg++) {                                                  \
            int64_t p0 = pg * 8, np = g.planes - p0 < 8 ? g.planes - p0 : 8;                       \
            const T *xp = x + p0 * hw;                                                             \
            for (int64_t oy = 0; oy < g.oh; oy++)                                                  \
                for (int64_t ox = 0; ox < g.ow; ox++) {                                            \
                    WINDOW(g);                                                                     \
                    T s[8] = {0};                                                                  \
                    if (np == 8) MEAN_SUMS(T, 8) else MEAN_SUMS(T, np)                             \
                    for (int64_t k = 0; k < np; k++) y[(p0 + k) * ohw + oy * g.ow + ox] = s[k] / (T)div; \
                }                                                                                  \
        }                                                                                          \
    }

#define MEAN_BWD(T, name, WINDOW)                                                                  \
    static void name##_##T(pool_geom g, const T *gy, T *gx)                                       \
    {                                                                                              \
        PLANES_FOR(g) {                                                                            \
            T *gp = gx + p * g.h * g.w;                                                            \
            memset(gp, 0, (size_t)(g.h * g.w) * sizeof(T));                                        \
            for (int64_t oy = 0; oy < g.oh; oy++)                                                  \
                for (int64_t ox = 0; ox < g.ow; ox++) {                                            \
                    WINDOW(g);                                                                     \
                    T v = gy[p * g.oh * g.ow + oy * g.ow + ox] / (T)div;                           \
                    for (int64_t iy = y0; iy < y1; iy++)                                           \
                        for (int64_t ix = x0; ix < x1; ix++) gp[iy * g.w + ix] += v;               \
                }                                                                                  \
        }                                                                                          \
    }

MAX_FWD(float)
MAX_FWD(double)
MAX_BWD(float)
MAX_BWD(double)
MEAN_FWD(float, avg_fwd, AVG_WINDOW)
MEAN_FWD(double, avg_fwd, AVG_WINDOW)
MEAN_BWD(float, avg_bwd, AVG_WINDOW)
MEAN_BWD(double, avg_bwd, AVG_WINDOW)
MEAN_FWD(float, adapt_fwd, ADAPT_WINDOW)
MEAN_FWD(double, adapt_fwd, ADAPT_WINDOW)
MEAN_BWD(float, adapt_bwd, ADAPT_WINDOW)
MEAN_BWD(double, adapt_bwd, ADAPT_WINDOW)

/* ---- channels-last --------------------------------------------------------------------------
 * x [N, H, W, C] and y [N, OH, OW, C] in memory (max's indices as y, still h * W + w): a pixel's
 * channels are adjacent, so each window tap is one vectorised pass over the C channels of the
 * output pixel, with the same taps in the same order per channel as the NCHW loops above (the
 * results are bitwise the same). The forwards run over output rows in parallel; the backwards
 * scatter into gx, so each thread owns an image (or, with fewer images than threads, a block of
 * its channels) and nothing is written by two threads. */

/* Max pooling of output pixel (oy, ox) of one image xn, NHWC_CHUNK channels at a time, with the
 * running maxima and their indices (of type I: int32_t where a plane's indices fit) in local
 * arrays: they start at -inf with the first tap's index (what the first tap would set), and a
 * tap replaces them when greater or a NaN over a number. The index of tap (iy, ix) is jb + iy jr
 * + ix: the plane index (jb 0, jr w), or with tap set its place in the window (jr kw, jb less the
 * window corner's), stored as uint8. The fused ReLU as for max_row. The tap's update is a loop of
 * its own: gcc vectorises it there, not inside the window's loops. */
#define NHWC_CHUNK 64
#define MAX_PIX_NHWC(T, I)                                                                         \
    static inline void max_tap_##T##_##I(const T *restrict xt, T *restrict m, I *restrict bi, I j, int64_t nc) \
    {                                                                                              \
        for (int64_t i = 0; i < nc; i++) {                                                         \
            T v = xt[i], cur = m[i];                                                               \
            int take = (v > cur) | ((v != v) & (cur == cur));                                      \
            m[i] = take ? v : cur;                                                                 \
            bi[i] = take ? j : bi[i];                                                              \
        }                                                                                          \
    }                                                                                              \
    HOT static void max_pix_nhwc_##T##_##I(const pool_geom *g, const T *restrict xn, int64_t oy, int64_t ox, \
                                           T *restrict yp, void *restrict ip, bool tap)            \
    {                                                                                              \
        int64_t wy = oy * g->sh - g->ph, wx = ox * g->sw - g->pw, c = g->c, w = g->w;              \
        int64_t y1 = wy + g->kh < g->h ? wy + g->kh : g->h, x1 = wx + g->kw < w ? wx + g->kw : w;  \
        int64_t y0 = wy < 0 ? 0 : wy, x0 = wx < 0 ? 0 : wx;                                        \
        int64_t jr = tap ? g->kw : w, jb = tap ? -(wy * g->kw + wx) : 0;                           \
        T m[NHWC_CHUNK];                                                                           \
        I bi[NHWC_CHUNK];                                                                          \
        for (int64_t c0 = 0; c0 < c; c0 += NHWC_CHUNK) {                                           \
            int64_t nc = c - c0 < NHWC_CHUNK ? c - c0 : NHWC_CHUNK;                                \
            for (int64_t i = 0; i < nc; i++) m[i] = (T)-INFINITY, bi[i] = (I)(jb + y0 * jr + x0);  \
            for (int64_t iy = y0; iy < y1; iy++)                                                   \
                for (int64_t ix = x0; ix < x1; ix++)                                               \
                    max_tap_##T##_##I(xn + (iy * w + ix) * c + c0, m, bi, (I)(jb + iy * jr + ix), nc); \
            for (int64_t i = 0; i < nc; i++) {                                                     \
                bool keep = !g->relu || !(m[i] <= 0);                                              \
                yp[c0 + i] = g->relu && m[i] < 0 ? 0 : m[i];                                       \
                if (tap) ((uint8_t *)ip)[c0 + i] = keep ? (uint8_t)bi[i] : NO_TAP;                 \
                else ((int64_t *)ip)[c0 + i] = keep ? bi[i] : -1;                                  \
            }                                                                                      \
        }                                                                                          \
    }

/* Average pooling, fixed or adaptive (WINDOW as for MEAN_FWD). */
#define MEAN_PIX_NHWC(T, name, WINDOW)                                                             \
    HOT static void name##_pix_nhwc_##T(pool_geom g, const T *restrict xn, int64_t oy, int64_t ox, T *restrict yp) \
    {                                                                                              \
        WINDOW(g);                                                                                 \
        int64_t c = g.c;                                                                           \
        for (int64_t ch = 0; ch < c; ch++) yp[ch] = 0;                                             \
        for (int64_t iy = y0; iy < y1; iy++)                                                       \
            for (int64_t ix = x0; ix < x1; ix++) {                                                 \
                const T *restrict xt = xn + (iy * g.w + ix) * c;                                   \
                for (int64_t ch = 0; ch < c; ch++) yp[ch] += xt[ch];                               \
            }                                                                                      \
        for (int64_t ch = 0; ch < c; ch++) yp[ch] /= (T)div;                                       \
    }

/* The forwards: PIX(g, x of image n, oy, ox, y of the pixel[, indices of the pixel]), over
 * ROWS_NHWC_FOR's output rows (pool_impl.h). */

#define MAX_FWD_NHWC(T)                                                                            \
    static void max_fwd_nhwc_##T(pool_geom g, const T *x, T *y, void *idx, bool tap)              \
    {                                                                                              \
        bool narrow = tap || g.h * g.w <= INT32_MAX;                                               \
        size_t isz = tap ? 1 : sizeof(int64_t);                                                    \
        ROWS_NHWC_FOR(g) {                                                                         \
            int64_t n = r / g.oh, oy = r % g.oh, o = r * g.ow * g.c;                               \
            const T *xn = x + n * g.h * g.w * g.c;                                                 \
            for (int64_t ox = 0; ox < g.ow; ox++) {                                                \
                void *ip = (char *)idx + (size_t)(o + ox * g.c) * isz;                             \
                if (narrow) max_pix_nhwc_##T##_int32_t(&g, xn, oy, ox, y + o + ox * g.c, ip, tap); \
                else max_pix_nhwc_##T##_int64_t(&g, xn, oy, ox, y + o + ox * g.c, ip, tap);        \
            }                                                                                      \
        }                                                                                          \
    }

#define MEAN_FWD_NHWC(T, name)                                                                     \
    static void name##_fwd_nhwc_##T(pool_geom g, const T *x, T *y)                                \
    {                                                                                              \
        ROWS_NHWC_FOR(g) {                                                                         \
            int64_t n = r / g.oh, oy = r % g.oh, o = r * g.ow * g.c;                               \
            for (int64_t ox = 0; ox < g.ow; ox++)                                                  \
                name##_pix_nhwc_##T(g, x + n * g.h * g.w * g.c, oy, ox, y + o + ox * g.c);         \
        }                                                                                          \
    }

/* The backwards' work units: image u / nblk, channels [c0, c1) of block u % nblk. */
typedef struct cblocks {
    int nt;
    int64_t nblk, blk;
} cblocks;

static cblocks channel_blocks(const pool_geom *g)
{
    cblocks b = {.nt = nb_cpu_threads_for(g->planes * g->h * g->w, NB_CPU_GRAIN), .nblk = 1, .blk = g->c};
    if (g->n < b.nt) {
        int64_t per = (b.nt + g->n - 1) / g->n;
        b.blk = ((g->c + per - 1) / per + 15) / 16 * 16;
        b.nblk = (g->c + b.blk - 1) / b.blk;
    }
    return b;
}

#define BLOCKS_NHWC_FOR(g, b)                                                                      \
    _Pragma("omp parallel for num_threads((b).nt)")                                                \
    for (int64_t u = 0; u < (g).n * (b).nblk; u++)

/* Zeroes channels [c0, c1) of image gn's h w pixels. */
#define ZERO_BLOCK(g, gn, c0, c1)                                                                  \
    do {                                                                                           \
        if (c0 == 0 && c1 == g.c) memset(gn, 0, (size_t)(g.h * g.w * g.c) * sizeof *gn);           \
        else                                                                                       \
            for (int64_t i = 0; i < g.h * g.w; i++) memset(gn + i * g.c + c0, 0, (size_t)(c1 - c0) * sizeof *gn); \
    } while (0)

/* Max pooling's backward scatters each output's gradient to its index, per image (or channel
 * block of one): the sums the NCHW loop makes, in the same order (indices -1 and NO_TAP, the
 * fused ReLU's zeros, take nothing). uint8 taps become plane offsets from the window's corner
 * through toff (tap t: (t / kw) w + t % kw). */
#define MAX_BWD_NHWC(T)                                                                            \
    static void max_bwd_nhwc_##T(pool_geom g, const T *gy, const void *idx, bool tap, T *gx)      \
    {                                                                                              \
        cblocks b = channel_blocks(&g);                                                            \
        int64_t toff[NO_TAP];                                                                      \
        for (int64_t t = 0; tap && t < g.kh * g.kw; t++) toff[t] = t / g.kw * g.w + t % g.kw;      \
        BLOCKS_NHWC_FOR(g, b) {                                                                    \
            int64_t n = u / b.nblk, c0 = u % b.nblk * b.blk, c1 = c0 + b.blk < g.c ? c0 + b.blk : g.c; \
            T *gn = gx + n * g.h * g.w * g.c;                                                      \
            ZERO_BLOCK(g, gn, c0, c1);                                                             \
            for (int64_t oy = 0, o = n * g.oh * g.ow; oy < g.oh; oy++)                             \
                for (int64_t ox = 0; ox < g.ow; ox++, o++) {                                       \
                    const T *go = gy + o * g.c;                                                    \
                    if (tap) {                                                                     \
                        const uint8_t *io = (const uint8_t *)idx + o * g.c;                        \
                        int64_t corner = (oy * g.sh - g.ph) * g.w + ox * g.sw - g.pw;              \
                        for (int64_t ch = c0; ch < c1; ch++)                                       \
                            if (io[ch] != NO_TAP) gn[(corner + toff[io[ch]]) * g.c + ch] += go[ch]; \
                    } else {                                                                       \
                        const int64_t *io = (const int64_t *)idx + o * g.c;                        \
                        for (int64_t ch = c0; ch < c1; ch++)                                       \
                            if (io[ch] >= 0) gn[io[ch] * g.c + ch] += go[ch];                      \
                    }                                                                              \
                }                                                                                  \
        }                                                                                          \
    }

/* Each output's gradient over its divisor, PLANE_CHUNK channels at a time, added to its window. */
#define MEAN_BWD_NHWC(T, name, WINDOW)                                                             \
    static void name##_bwd_nhwc_##T(pool_geom g, const T *gy, T *gx)                              \
    {                                                                                              \
        cblocks b = channel_blocks(&g);                                                            \
        BLOCKS_NHWC_FOR(g, b) {                                                                    \
            int64_t n = u / b.nblk, cb0 = u % b.nblk * b.blk, cb1 = cb0 + b.blk < g.c ? cb0 + b.blk : g.c; \
            T *gn = gx + n * g.h * g.w * g.c, v[PLANE_CHUNK];                                      \
            ZERO_BLOCK(g, gn, cb0, cb1);                                                           \
            for (int64_t oy = 0; oy < g.oh; oy++)                                                  \
                for (int64_t ox = 0; ox < g.ow; ox++) {                                            \
                    WINDOW(g);                                                                     \
                    const T *go = gy + ((n * g.oh + oy) * g.ow + ox) * g.c;                        \
                    for (int64_t c0 = cb0; c0 < cb1; c0 += PLANE_CHUNK) {                          \
                        int64_t nc = cb1 - c0 < PLANE_CHUNK ? cb1 - c0 : PLANE_CHUNK;              \
                        for (int64_t i = 0; i < nc; i++) v[i] = go[c0 + i] / (T)div;               \
                        for (int64_t iy = y0; iy < y1; iy++)                                       \
                            for (int64_t ix = x0; ix < x1; ix++) {                                 \
                                T *restrict gt = gn + (iy * g.w + ix) * g.c + c0;                  \
                                for (int64_t i = 0; i < nc; i++) gt[i] += v[i];                    \
                            }                                                                      \
                    }                                                                              \
                }                                                                                  \
        }                                                                                          \
    }


MAX_PIX_NHWC(float, int32_t)
MAX_PIX_NHWC(double, int32_t)
MAX_PIX_NHWC(float, int64_t)
MAX_PIX_NHWC(double, int64_t)
MEAN_PIX_NHWC(float, avg, AVG_WINDOW)
MEAN_PIX_NHWC(double, avg, AVG_WINDOW)
MEAN_PIX_NHWC(float, adapt, ADAPT_WINDOW)
MEAN_PIX_NHWC(double, adapt, ADAPT_WINDOW)
MAX_FWD_NHWC(float)
MAX_FWD_NHWC(double)
MEAN_FWD_NHWC(float, avg)
MEAN_FWD_NHWC(double, avg)
MEAN_FWD_NHWC(float, adapt)
MEAN_FWD_NHWC(double, adapt)
MAX_BWD_NHWC(float)
MAX_BWD_NHWC(double)
MEAN_BWD_NHWC(float, avg, AVG_WINDOW)
MEAN_BWD_NHWC(double, avg, AVG_WINDOW)
MEAN_BWD_NHWC(float, adapt, ADAPT_WINDOW)
MEAN_BWD_NHWC(double, adapt, ADAPT_WINDOW)

#define CALL(name, ...)                                                                            \
    do {                                                                                           \
        if (dt == NB_FLOAT32) name##_float(__VA_ARGS__);                                           \
        else name##_double(__VA_ARGS__);                                                           \
    } while (0)

/* Channels-last when the input (forward) or gx (backward) is (nb__is_channels_last): the other
 * operands must then be dense channels-last too (the ops and rules allocate them so). */
static nb_status check_nhwc(nb_op op, const nb_kargs *a, bool *cl)
{
    bool bwd = op != NB_OP_MAX_POOL2D && op != NB_OP_AVG_POOL2D && op != NB_OP_ADAPTIVE_AVG_POOL2D;
    const nb_tensor *ops[3] = {a->out, a->in[0], op == NB_OP_MAX_POOL2D ? a->out2 : a->in[1]};
    *cl = nb__is_channels_last(bwd ? a->out : a->in[0]);
    for (int i = 0; i < 3; i++) {
        const nb_tensor *t = ops[i];
        if (t && !(*cl ? nb_tensor_is_contiguous_format(t, NB_CHANNELS_LAST) : nb__is_contiguous(t)))
            return nb__err(NB_ERR_INTERNAL, "%s: operand %d is not dense in the %s layout", nb__op_name(op), i,
                           *cl ? "channels-last" : "contiguous");
    }
    return NB_OK;
}

/* Max pooling's indices: int64, or uint8 taps (ops.def) on channels-last with fewer than NO_TAP
 * taps a window. */
static nb_status check_index(nb_op op, const pool_geom *g, const nb_tensor *idx, bool cl, bool *tap)
{
    *tap = idx->dtype == NB_UINT8;
    if (idx->dtype != NB_INT64 && !(*tap && cl && g->kh * g->kw < NO_TAP))
        return nb__err(NB_ERR_INTERNAL, "%s: indices of dtype %s for a %lldx%lld window (%s)", nb__op_name(op),
                       nb_dtype_name(idx->dtype), (long long)g->kh, (long long)g->kw, cl ? "channels-last" : "contiguous");
    return NB_OK;
}

nb_status nb_cpu_k_pool(nb_op op, const nb_kargs *a)
{
    nb_dtype dt = a->out->dtype;
    if (dt != NB_FLOAT32 && dt != NB_FLOAT64)
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported (float32/float64 only)", nb__op_name(op),
                       nb_dtype_name(dt));
    bool cl;
    NB_TRY(check_nhwc(op, a, &cl));
    void *out = nb__data(a->out), *in0 = nb__data(a->in[0]);
    switch (op) {
    case NB_OP_MAX_POOL2D: {
        pool_geom g = geom(a->in[0], a->out, a);
        g.relu = a->flag;
        bool tap;
        NB_TRY(check_index(op, &g, a->out2, cl, &tap));
        if (cl && dt == NB_FLOAT32 && nb__pool_max_nhwc_vec(&g)) {
            nb__pool_max_fwd_nhwc_vec(g, in0, out, nb__data(a->out2), tap);
            break;
        }
        if (cl) {
            CALL(max_fwd_nhwc, g, in0, out, nb__data(a->out2), tap);
            break;
        }
        int64_t r[4];
        size_t bytes = max_scratch_bytes(&g, max_interior(&g, r));
        void *scratch = malloc(bytes);
        if (!scratch) return nb__err(NB_ERR_OOM, "%s: out of memory (%zu bytes of offsets)", nb__op_name(op), bytes);
        CALL(max_fwd, g, in0, out, (int64_t *)nb__data(a->out2), r, scratch);
        free(scratch);
        break;
    }
    case NB_OP_MAX_POOL2D_BACKWARD: {
        const void *idx = nb__data(a->in[1]);
        pool_geom g = geom(a->out, a->in[0], a);
        bool tap;
        NB_TRY(check_index(op, &g, a->in[1], cl, &tap));
        if (cl && dt == NB_FLOAT32 && nb__pool_max_nhwc_vec(&g)) {
            int64_t *ox = malloc((size_t)(2 * g.w) * sizeof *ox);
            if (!ox) return nb__err(NB_ERR_OOM, "%s: out of memory (%lld column ranges)", nb__op_name(op), (long long)g.w);
            nb__pool_max_bwd_nhwc_vec(g, in0, idx, tap, out, ox);
            free(ox);
        } else if (cl)
            CALL(max_bwd_nhwc, g, in0, idx, tap, out);
        else CALL(max_bwd, g, in0, idx, out);
        break;
    }
    case NB_OP_AVG_POOL2D:
        if (cl) CALL(avg_fwd_nhwc, geom(a->in[0], a->out, a), in0, out);
        else CALL(avg_fwd, geom(a->in[0], a->out, a), in0, out);
        break;
    case NB_OP_AVG_POOL2D_BACKWARD:
        if (cl) CALL(avg_bwd_nhwc, geom(a->out, a->in[0], a), in0, out);
        else CALL(avg_bwd, geom(a->out, a->in[0], a), in0, out);
        break;
    case NB_OP_ADAPTIVE_AVG_POOL2D: {
        pool_geom g = geom(a->in[0], a->out, a);
        if (dt == NB_FLOAT32 && nb__pool_global_mean_vec(&g, cl)) {
            /* the planes (NCHW) or images (channels-last) the vector kernel leaves, as below */
            int64_t done = nb__pool_global_mean_f32(g, in0, out, cl);
            pool_geom rest = g;
            if (cl) rest.n = g.n - done, rest.planes = rest.n * g.c;
            else rest.planes = g.planes - done;
            const float *xr = (const float *)in0 + done * (cl ? g.c : 1) * g.h * g.w;
            float *yr = (float *)out + done * (cl ? g.c : 1);
            if (rest.planes && cl) adapt_fwd_nhwc_float(rest, xr, yr);
            else if (rest.planes) adapt_fwd_float(rest, xr, yr);
        } else if (cl) CALL(adapt_fwd_nhwc, g, in0, out);
        else CALL(adapt_fwd, g, in0, out);
        break;
    }
    case NB_OP_ADAPTIVE_AVG_POOL2D_BACKWARD:
        if (cl) CALL(adapt_bwd_nhwc, geom(a->out, a->in[0], a), in0, out);
        else CALL(adapt_bwd, geom(a->out, a->in[0], a), in0, out);
        break;
    default: return nb__err(NB_ERR_INTERNAL, "pool: op %s is not in this family", nb__op_name(op));
    }
    return NB_OK;
}
