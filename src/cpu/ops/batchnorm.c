/* The batchnorm kernel family: batch normalisation forward (batch statistics or given ones) and
 * its backward, on contiguous x viewed as [N, C, S]. One channel per thread at a time; sums in
 * double over fixed lanes (vectorised, deterministic). */
#include <math.h>

#include "cpu/cpu_impl.h"

/* Needs `int64_t work` in scope (the _Pragma text is not macro-expanded). */
#define CHANNELS_FOR(c)                                                                            \
    _Pragma("omp parallel for num_threads(nb_cpu_threads_for(work, NB_CPU_GRAIN))")                 \
    for (int64_t c = 0; c < c##_count; c++)

/* Hot loops get an AVX-512 and an AVX2 clone beside the baseline one (picked at load time). */
#if defined(__x86_64__) && !defined(__clang__)
#define HOT __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HOT
#endif

/* Sums in double over LANES independent partial sums, in a fixed order (so results do not depend
 * on the thread count): one accumulator chain would make the loop latency-bound and keeps the
 * compiler from vectorising it (it may not reassociate). */
#define LANES 16

/* out[0] += sum (p[j] - mean), out[1] += sum (p[j] - mean)^2 over j < s. */
#define DEV_SUMS(T)                                                                                \
    HOT static void dev_sums_##T(const T *p, int64_t s, double mean, double *out)                  \
    {                                                                                              \
        double a[LANES] = {0}, q[LANES] = {0};                                                     \
        int64_t j = 0;                                                                             \
        for (; j + LANES <= s; j += LANES)                                                         \
            for (int l = 0; l < LANES; l++) {                                                      \
                double d = (double)p[j + l] - mean;                                                \
                a[l] += d, q[l] += d * d;                                                          \
            }                                                                                      \
        for (; j < s; j++) {                                                                       \
            double d = (double)p[j] - mean;                                                        \
            a[0] += d, q[0] += d * d;                                                              \
        }                                                                                          \
        for (int l = 0; l < LANES; l++) out[0] += a[l], out[1] += q[l];                            \
    }

/* out[0] += sum g, out[1] += sum g (x - mean). */
#define GRAD_SUMS(T)                                                                               \
    HOT static void grad_sums_##T(const T *g, const T *x, int64_t s, double mean, double *out)     \
    {                                                                                              \
        double a[LANES] = {0}, q[LANES] = {0};                                                     \
        int64_t j = 0;                                                                             \
        for (; j + LANES <= s; j += LANES)                                                         \
            for (int l = 0; l < LANES; l++) {                                                      \
                double gv = (double)g[j + l];                                                      \
                a[l] += gv, q[l] += gv * ((double)x[j + l] - mean);                                \
            }                                                                                      \
        for (; j < s; j++) a[0] += (double)g[j], q[0] += (double)g[j] * ((double)x[j] - mean);     \
        for (int l = 0; l < LANES; l++) out[0] += a[l], out[1] += q[l];                            \
    }

/* y = a x + c, and y = a g + b x + c. */
#define AFFINE(T)                                                                                  \
    HOT static void affine_##T(const T *x, int64_t s, T a, T c, T *y)                              \
    {                                                                                              \
        for (int64_t j = 0; j < s; j++) y[j] = x[j] * a + c;                                       \
    }                                                                                              \
    HOT static void affine2_##T(const T *g, const T *x, int64_t s, T a, T b, T c, T *y)            \
    {                                                                                              \
        for (int64_t j = 0; j < s; j++) y[j] = a * g[j] + b * x[j] + c;                            \
    }

DEV_SUMS(float)
DEV_SUMS(double)
GRAD_SUMS(float)
GRAD_SUMS(double)
AFFINE(float)
AFFINE(double)

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
                /* one pass, shifted by the channel's first value (close to the mean, so the \
                 * difference of squares loses little) */                                          \
                double shift = (double)x[c * s], sum[2] = {0, 0}, m = (double)(n * s);             \
                for (int64_t i = 0; i < n; i++) dev_sums_##T(x + (i * c_count + c) * s, s, shift, sum); \
                mean = shift + sum[0] / m;                                                         \
                var = (sum[1] - sum[0] * sum[0] / m) / m;                                          \
                var = var < 0 ? 0 : var;                                                           \
                stats[c] = (T)mean;                                                                \
                stats[c_count + c] = (T)var;                                                       \
            }                                                                                      \
            double scale = (w ? w[c] : 1) / sqrt(var + eps), shift = (b ? b[c] : 0) - mean * scale; \
            for (int64_t i = 0; i < n; i++)                                                        \
                affine_##T(x + (i * c_count + c) * s, s, (T)scale, (T)shift, y + (i * c_count + c) * s); \
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
            double sums[2] = {0, 0}, m = (double)(n * s);                                          \
            for (int64_t i = 0; i < n; i++)                                                        \
                grad_sums_##T(g + (i * c_count + c) * s, x + (i * c_count + c) * s, s, mean, sums); \
            double sg = sums[0], sgx = sums[1];                                                    \
            gwb[c] = (T)(sgx * invstd);                                                            \
            gwb[c_count + c] = (T)sg;                                                              \
            if (!gx) continue;                                                                     \
            double k = w * invstd, a = k, bx = 0, c0 = 0;                                          \
            if (training) {                                                                        \
                bx = -k * invstd * invstd * sgx / m;                                               \
                c0 = -k * sg / m - bx * mean;                                                      \
            }                                                                                      \
            T ta = (T)a, tb = (T)bx, tc = (T)c0;                                                   \
            for (int64_t i = 0; i < n; i++)                                                        \
                affine2_##T(g + (i * c_count + c) * s, x + (i * c_count + c) * s, s, ta, tb, tc,   \
                            gx + (i * c_count + c) * s);                                           \
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
