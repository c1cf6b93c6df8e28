/* The pool kernel family: 2-D max, average and adaptive average pooling and their backward
 * (NCHW, contiguous operands; parameters packed as ops.def says). Plain loops over (n, c)
 * planes, one plane per thread at a time: these are the reference; oneDNN pooling is not used
 * yet. Max pooling keeps PyTorch's indices (h * W + w in the input plane; the first maximum wins,
 * NaN counts as the maximum). */
#include <math.h>
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

#define MAX_FWD(T)                                                                                 \
    static void max_fwd_##T(pool_geom g, const T *x, T *y, int64_t *idx)                          \
    {                                                                                              \
        PLANES_FOR(g) {                                                                            \
            const T *xp = x + p * g.h * g.w;                                                       \
            for (int64_t oy = 0; oy < g.oh; oy++)                                                  \
                for (int64_t ox = 0; ox < g.ow; ox++) {                                            \
                    int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw, best = -1;               \
                    T m = -INFINITY;                                                               \
                    for (int64_t iy = y0 < 0 ? 0 : y0; iy < y0 + g.kh && iy < g.h; iy++)           \
                        for (int64_t ix = x0 < 0 ? 0 : x0; ix < x0 + g.kw && ix < g.w; ix++) {     \
                            T v = xp[iy * g.w + ix];                                               \
                            if (best < 0 || v > m || (isnan(v) && !isnan(m))) m = v, best = iy * g.w + ix; \
                        }                                                                          \
                    int64_t o = p * g.oh * g.ow + oy * g.ow + ox;                                  \
                    y[o] = m;                                                                      \
                    idx[o] = best;                                                                 \
                }                                                                                  \
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
    case NB_OP_MAX_POOL2D: CALL(max_fwd, geom(a->in[0], a->out, a), in0, out, (int64_t *)nb__data(a->out2)); break;
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
