/* The batchnorm kernel family: batch normalisation forward (batch statistics or given ones) and
 * its backward, on contiguous x viewed as [N, C, S]. One channel per thread at a time; sums in
 * double. These plain loops are the reference (oneDNN's batch normalisation is not used yet). */
#include <math.h>

#include "cpu/cpu_impl.h"

/* Needs `int64_t work` in scope (the _Pragma text is not macro-expanded). */
#define CHANNELS_FOR(c)                                                                            \
    _Pragma("omp parallel for num_threads(nb_cpu_threads_for(work, NB_CPU_GRAIN))")                 \
    for (int64_t c = 0; c < c##_count; c++)

/* training: stats = (mean, biased var) of each channel, then y = (x - mean) / sqrt(var + eps) *
 * w + b; otherwise stats are read. */
#define BN_FWD(T)                                                                                  \
    static void bn_fwd_##T(int64_t n, int64_t c_count, int64_t s, const T *x, const T *w, const T *b, T *y, \
                           T *stats, double eps, bool training)                                    \
    {                                                                                              \
        int64_t work = n * c_count * s;                                                            \
        CHANNELS_FOR(c) {                                                                          \
            double mean = stats[c], var = stats[c_count + c];                                      \
            if (training) {                                                                        \
                double sum = 0, sq = 0;                                                            \
                for (int64_t i = 0; i < n; i++) {                                                  \
                    const T *xp = x + (i * c_count + c) * s;                                       \
                    for (int64_t j = 0; j < s; j++) sum += xp[j];                                  \
                }                                                                                  \
                mean = sum / (double)(n * s);                                                      \
                for (int64_t i = 0; i < n; i++) {                                                  \
                    const T *xp = x + (i * c_count + c) * s;                                       \
                    for (int64_t j = 0; j < s; j++) sq += (xp[j] - mean) * (xp[j] - mean);         \
                }                                                                                  \
                var = sq / (double)(n * s);                                                        \
                stats[c] = (T)mean;                                                                \
                stats[c_count + c] = (T)var;                                                       \
            }                                                                                      \
            double scale = (w ? w[c] : 1) / sqrt(var + eps), shift = (b ? b[c] : 0) - mean * scale; \
            for (int64_t i = 0; i < n; i++) {                                                      \
                const T *xp = x + (i * c_count + c) * s;                                           \
                T *yp = y + (i * c_count + c) * s, sc = (T)scale, sh = (T)shift;                   \
                for (int64_t j = 0; j < s; j++) yp[j] = xp[j] * sc + sh;                           \
            }                                                                                      \
        }                                                                                          \
    }

/* aux rows: mean, var, weight. gwb = (sum g xhat, sum g). gx: training w invstd (g - sum g / M -
 * xhat sum(g xhat) / M); evaluation w invstd g. */
#define BN_BWD(T)                                                                                  \
    static void bn_bwd_##T(int64_t n, int64_t c_count, int64_t s, const T *g, const T *x, const T *aux, T *gx, \
                           T *gwb, double eps, bool training)                                      \
    {                                                                                              \
        int64_t work = n * c_count * s;                                                            \
        CHANNELS_FOR(c) {                                                                          \
            double mean = aux[c], invstd = 1 / sqrt(aux[c_count + c] + eps), w = aux[2 * c_count + c]; \
            double sg = 0, sgx = 0, m = (double)(n * s);                                           \
            for (int64_t i = 0; i < n; i++) {                                                      \
                const T *gp = g + (i * c_count + c) * s, *xp = x + (i * c_count + c) * s;          \
                for (int64_t j = 0; j < s; j++) sg += gp[j], sgx += gp[j] * (xp[j] - mean);        \
            }                                                                                      \
            gwb[c] = (T)(sgx * invstd);                                                            \
            gwb[c_count + c] = (T)sg;                                                              \
            if (!gx) continue;                                                                     \
            double k = w * invstd, a = k, bx = 0, c0 = 0;                                          \
            if (training) {                                                                        \
                bx = -k * invstd * invstd * sgx / m;                                               \
                c0 = -k * sg / m - bx * mean;                                                      \
            }                                                                                      \
            T ta = (T)a, tb = (T)bx, tc = (T)c0;                                                   \
            for (int64_t i = 0; i < n; i++) {                                                      \
                const T *gp = g + (i * c_count + c) * s, *xp = x + (i * c_count + c) * s;          \
                T *op = gx + (i * c_count + c) * s;                                                \
                for (int64_t j = 0; j < s; j++) op[j] = ta * gp[j] + tb * xp[j] + tc;              \
            }                                                                                      \
        }                                                                                          \
    }

BN_FWD(float)
BN_FWD(double)
BN_BWD(float)
BN_BWD(double)

static void *ptr(const nb_tensor *t) { return t ? nb__data(t) : NULL; }

nb_status nb_cpu_k_batchnorm(nb_op op, const nb_kargs *a)
{
    const nb_tensor *x = op == NB_OP_BATCH_NORM ? a->in[0] : a->in[1];
    nb_dtype dt = x->dtype;
    if (dt != NB_FLOAT32 && dt != NB_FLOAT64)
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported (float32/float64 only)", nb__op_name(op),
                       nb_dtype_name(dt));
    int64_t n = x->shape[0], c = x->shape[1], s = nb__numel(x->shape + 2, x->ndim - 2);
    if (op == NB_OP_BATCH_NORM) {
        if (dt == NB_FLOAT32)
            bn_fwd_float(n, c, s, ptr(x), ptr(a->in[1]), ptr(a->in[2]), ptr(a->out), ptr(a->out2), a->s0, a->flag);
        else
            bn_fwd_double(n, c, s, ptr(x), ptr(a->in[1]), ptr(a->in[2]), ptr(a->out), ptr(a->out2), a->s0, a->flag);
        return NB_OK;
    }
    if (op != NB_OP_BATCH_NORM_BACKWARD)
        return nb__err(NB_ERR_INTERNAL, "batchnorm: op %s is not in this family", nb__op_name(op));
    if (dt == NB_FLOAT32)
        bn_bwd_float(n, c, s, ptr(a->in[0]), ptr(x), ptr(a->in[2]), ptr(a->out), ptr(a->out2), a->s0, a->flag);
    else
        bn_bwd_double(n, c, s, ptr(a->in[0]), ptr(x), ptr(a->in[2]), ptr(a->out), ptr(a->out2), a->s0, a->flag);
    return NB_OK;
}
