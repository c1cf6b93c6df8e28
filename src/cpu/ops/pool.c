/* The pool kernel family: 2-D max, average and adaptive average pooling and their backward
 * (NCHW, contiguous operands; parameters packed as ops.def says). Loops over (n, c) planes, one
 * plane per thread at a time. Max pooling keeps PyTorch's indices (h * W + w in the input plane;
 * the first maximum wins, NaN counts as the maximum), which its backward scatters through; its
 * forward is branch-free and vectorised (below), several times faster than PyTorch's on the
 * DLBench shapes; oneDNN's pooling would need its own workspace instead of the indices. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_impl.h"

typedef struct pool_geom {
    int64_t planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw;
    bool count_include_pad;
} pool_geom;

static pool_geom geom(const nb_tensor *x, const nb_tensor *y, const nb_kargs *a)
{
    pool_geom g = {
        .planes = x->shape[0] * x->shape[1], .h = x->shape[2], .w = x->shape[3],
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
 * or a NaN over a number, so the first maximum wins and NaN counts as the maximum. The select is
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
            yr[ox] = m;                                                                            \
            ir[ox] = bi;                                                                           \
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
                                  const int32_t *toff, int64_t ntaps, T *y, int64_t *idx)          \
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
            for (int64_t i = 0; i < n; i++) y[ypos[c0 + i]] = m[i], idx[ypos[c0 + i]] = bi[i];     \
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
            if (nin) max_plane_##T(xp, base, ypos, nin, toff, g.kh * g.kw, yp, ip);                \
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
 * x1 and div for output (oy, ox)). */
#define MEAN_FWD(T, name, WINDOW)                                                                  \
    static void name##_##T(pool_geom g, const T *x, T *y)                                         \
    {                                                                                              \
        PLANES_FOR(g) {                                                                            \
            const T *xp = x + p * g.h * g.w;                                                       \
            for (int64_t oy = 0; oy < g.oh; oy++)                                                  \
                for (int64_t ox = 0; ox < g.ow; ox++) {                                            \
                    WINDOW(g);                                                                     \
                    T s = 0;                                                                       \
                    for (int64_t iy = y0; iy < y1; iy++)                                           \
                        for (int64_t ix = x0; ix < x1; ix++) s += xp[iy * g.w + ix];               \
                    y[p * g.oh * g.ow + oy * g.ow + ox] = s / (T)div;                              \
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

#define CALL(name, ...)                                                                            \
    do {                                                                                           \
        if (dt == NB_FLOAT32) name##_float(__VA_ARGS__);                                           \
        else name##_double(__VA_ARGS__);                                                           \
    } while (0)

nb_status nb_cpu_k_pool(nb_op op, const nb_kargs *a)
{
    nb_dtype dt = a->out->dtype;
    if (dt != NB_FLOAT32 && dt != NB_FLOAT64)
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported (float32/float64 only)", nb__op_name(op),
                       nb_dtype_name(dt));
    void *out = nb__data(a->out), *in0 = nb__data(a->in[0]);
    switch (op) {
    case NB_OP_MAX_POOL2D: {
        pool_geom g = geom(a->in[0], a->out, a);
        int64_t r[4];
        size_t bytes = max_scratch_bytes(&g, max_interior(&g, r));
        void *scratch = malloc(bytes);
        if (!scratch) return nb__err(NB_ERR_OOM, "%s: out of memory (%zu bytes of offsets)", nb__op_name(op), bytes);
        CALL(max_fwd, g, in0, out, (int64_t *)nb__data(a->out2), r, scratch);
        free(scratch);
        break;
    }
    case NB_OP_MAX_POOL2D_BACKWARD:
        CALL(max_bwd, geom(a->out, a->in[0], a), in0, (const int64_t *)nb__data(a->in[1]), out);
        break;
    case NB_OP_AVG_POOL2D: CALL(avg_fwd, geom(a->in[0], a->out, a), in0, out); break;
    case NB_OP_AVG_POOL2D_BACKWARD: CALL(avg_bwd, geom(a->out, a->in[0], a), in0, out); break;
    case NB_OP_ADAPTIVE_AVG_POOL2D: CALL(adapt_fwd, geom(a->in[0], a->out, a), in0, out); break;
    case NB_OP_ADAPTIVE_AVG_POOL2D_BACKWARD: CALL(adapt_bwd, geom(a->out, a->in[0], a), in0, out); break;
    default: return nb__err(NB_ERR_INTERNAL, "pool: op %s is not in this family", nb__op_name(op));
    }
    return NB_OK;
}
