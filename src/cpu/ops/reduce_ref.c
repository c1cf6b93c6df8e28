/* The reductions' reference path (src/cpu/reduce_impl.h): every op of reduce.c and every dtype,
 * each output's reduced elements walked through their strides (FOR_REDUCED) and computed in
 * double, or int64 for integer SUM PROD and the extremes of integers; the outputs are shared out
 * among the threads. reduce.c runs it where no fast path applies. */
#include <math.h>
#include <stdbool.h>

#include "cpu/cpu_impl.h"
#include "cpu/reduce_impl.h"

static inline double ld_d(const char *p, nb_dtype dt)
{
    switch (dt) {
    case NB_FLOAT32: return *(const float *)p;
    case NB_FLOAT64: return *(const double *)p;
    case NB_INT64: return (double)*(const int64_t *)p;
    case NB_INT32: return *(const int32_t *)p;
    case NB_UINT8: return *(const uint8_t *)p;
    case NB_BOOL: return *(const bool *)p;
    default: return 0;
    }
}

static inline int64_t ld_i(const char *p, nb_dtype dt)
{
    switch (dt) {
    case NB_INT64: return *(const int64_t *)p;
    case NB_INT32: return *(const int32_t *)p;
    case NB_UINT8: return *(const uint8_t *)p;
    case NB_BOOL: return *(const bool *)p;
    default: return (int64_t)ld_d(p, dt);
    }
}

static inline void st_val(char *p, nb_dtype dt, double d, int64_t i, bool is_int)
{
    switch (dt) {
    case NB_FLOAT32: *(float *)p = (float)(is_int ? (double)i : d); break;
    case NB_FLOAT64: *(double *)p = is_int ? (double)i : d; break;
    case NB_INT64: *(int64_t *)p = is_int ? i : (int64_t)d; break;
    case NB_INT32: *(int32_t *)p = (int32_t)(is_int ? i : (int64_t)d); break;
    case NB_UINT8: *(uint8_t *)p = (uint8_t)(is_int ? i : (int64_t)d); break;
    case NB_BOOL: *(bool *)p = is_int ? i != 0 : d != 0; break;
    default: break;
    }
}

/* One output of the reference: the reduced elements of `in` at base offset `base` (elements). */
typedef struct rres {
    double d;
    int64_t i, idx;
    bool is_int;
} rres;

#define FOR_REDUCED(p, k, w, ...)                                                                \
    do {                                                                                         \
        walk w;                                                                                  \
        walk_seek(&w, (p)->nr, (p)->rs, (p)->rin, 0);                                            \
        for (int64_t k = 0; k < (p)->nred; k++, walk_next(&w)) { __VA_ARGS__; }                  \
    } while (0)

/* max (sign 1) or min (sign -1) with its first position; NaN wins. Integers compare as int64. */
static rres ref_extreme(const rplan *p, const char *b, nb_dtype dt, int sign)
{
    int64_t es = (int64_t)nb_dtype_size(dt);
    rres r = {.is_int = !nb_dtype_is_floating(dt), .idx = 0};
    r.d = ld_d(b, dt);
    r.i = ld_i(b, dt);
    FOR_REDUCED(p, k, w, {
        const char *q = b + w.off * es;
        if (r.is_int) {
            int64_t v = ld_i(q, dt);
            if (sign > 0 ? v > r.i : v < r.i) r.i = v, r.idx = k;
        } else {
            double v = ld_d(q, dt);
            if (!isnan(r.d) && (isnan(v) || (sign > 0 ? v > r.d : v < r.d))) r.d = v, r.idx = k;
        }
    });
    return r;
}

static double ref_norm(const rplan *p, const char *b, nb_dtype dt, double pn)
{
    int64_t es = (int64_t)nb_dtype_size(dt);
    double s = 0;
    if (isinf(pn)) {
        if (p->nred == 0) return 0;
        s = fabs(ld_d(b, dt));
        FOR_REDUCED(p, k, w, {
            double v = fabs(ld_d(b + w.off * es, dt));
            if (!isnan(s) && (isnan(v) || (pn > 0 ? v > s : v < s))) s = v;
        });
        return s;
    }
    FOR_REDUCED(p, k, w, {
        double v = fabs(ld_d(b + w.off * es, dt));
        s += pn == 0 ? (v != 0) : pn == 1 ? v : pn == 2 ? v * v : pow(v, pn);
    });
    return pn == 0 || pn == 1 ? s : pn == 2 ? sqrt(s) : pow(s, 1 / pn);
}

static rres ref_one(nb_op op, const nb_kargs *a, const rplan *p, const char *b)
{
    nb_dtype dt = a->in[0]->dtype;
    int64_t es = (int64_t)nb_dtype_size(dt), n = p->nred;
    bool is_int = !nb_dtype_is_floating(dt);
    rres r = {.is_int = false};
    switch (op) {
    case NB_OP_SUM:
    case NB_OP_MEAN:
        r.is_int = is_int;
        FOR_REDUCED(p, k, w, {
            if (is_int) r.i += ld_i(b + w.off * es, dt);
            else r.d += ld_d(b + w.off * es, dt);
        });
        if (op == NB_OP_MEAN) r.d /= (double)n;
        break;
    case NB_OP_PROD:
        r.is_int = is_int;
        r.d = 1;
        r.i = 1;
        FOR_REDUCED(p, k, w, {
            if (is_int) r.i *= ld_i(b + w.off * es, dt);
            else r.d *= ld_d(b + w.off * es, dt);
        });
        break;
    case NB_OP_MAX:
    case NB_OP_ARGMAX: return ref_extreme(p, b, dt, 1);
    case NB_OP_MIN:
    case NB_OP_ARGMIN: return ref_extreme(p, b, dt, -1);
    case NB_OP_ALL:
    case NB_OP_ANY:
        r.is_int = true;
        r.i = op == NB_OP_ALL;
        FOR_REDUCED(p, k, w, {
            bool nz = ld_d(b + w.off * es, dt) != 0;
            if (op == NB_OP_ALL ? !nz : nz) {
                r.i = op == NB_OP_ANY;
                break;
            }
        });
        break;
    case NB_OP_VAR: {
        double mean = 0, ss = 0, dof = (double)n - (double)a->i0;
        FOR_REDUCED(p, k, w, mean += ld_d(b + w.off * es, dt));
        mean /= (double)n;
        FOR_REDUCED(p, k, w, {
            double dv = ld_d(b + w.off * es, dt) - mean;
            ss += dv * dv;
        });
        r.d = ss / (dof > 0 ? dof : 0);
        if (a->flag) r.d = sqrt(r.d);
        break;
    }
    case NB_OP_LOGSUMEXP: {
        double m = -INFINITY, s = 0;
        FOR_REDUCED(p, k, w, {
            double v = ld_d(b + w.off * es, dt);
            if (!isnan(m) && (isnan(v) || v > m)) m = v;
        });
        double shift = isinf(m) ? 0 : m;
        FOR_REDUCED(p, k, w, s += exp(ld_d(b + w.off * es, dt) - shift));
        r.d = log(s) + shift;
        break;
    }
    case NB_OP_NORM: r.d = ref_norm(p, b, dt, a->s0); break;
    default: break;
    }
    return r;
}

void nb__reduce_reference(nb_op op, const nb_kargs *a, const rplan *p)
{
    const nb_tensor *in = a->in[0];
    nb_tensor *out = a->out, *o2 = a->out2;
    const char *ib = nb__data(in);
    char *ob = nb__data(out), *o2b = o2 ? nb__data(o2) : NULL;
    int64_t ies = (int64_t)nb_dtype_size(in->dtype), oes = (int64_t)nb_dtype_size(out->dtype);
    bool arg = op == NB_OP_ARGMAX || op == NB_OP_ARGMIN;
    int nt = nb_cpu_threads_for(p->nout * (p->nred > 0 ? p->nred : 1), 0);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t o = 0; o < p->nout; o++) {
        const char *b = ib + offset_of(o, p->nk, p->ks, p->kin) * ies;
        rres r = ref_one(op, a, p, b);
        char *dst = ob + offset_of(o, p->nk, p->ks, p->ko) * oes;
        if (arg) *(int64_t *)dst = r.idx;
        else st_val(dst, out->dtype, r.d, r.i, r.is_int);
        if (o2b) *(int64_t *)(o2b + offset_of(o, p->nk, p->ks, p->ko2) * 8) = r.idx;
    }
}
