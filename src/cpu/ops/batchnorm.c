/* The batchnorm kernel family: batch normalisation forward (batch statistics or given ones) and
 * its backward, on contiguous x viewed as [N, C, S] (one channel per thread at a time; sums in
 * double over fixed lanes), or on a channels-last x viewed as a row-major [M = N*H*W, C] matrix
 * (rows split into blocks, each block's per-channel sums in double, the blocks added in order;
 * float32 with C a multiple of 16 on AVX-512 reads the rows in order, each block's sums in float
 * 16 rows at a time, and streams large outputs: see batchnorm_vec.c). Both are vectorised and give results
 * that do not depend on the thread count. BATCH_NORM with i0 set is the running statistics' update
 * (bn_running). i1 set fuses a ReLU into both directions (nb_batch_norm_relu): stats then has two
 * more rows, the forward's coefficients; with a residual r in in[3] (nb_batch_norm_add_relu) the
 * ReLU is applied to bn(x) + r, and the backward writes the gradient that reaches r into out3 and
 * goes on from it as the plain backward. A residual without i1 (nb_batch_norm_add) is only added
 * in the forward: its gradient is the upstream one, and the backward is the plain one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu/batchnorm_impl.h"
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

/* The hot loops' floating-point options. The fused ReLU's loops select on a comparison, which
 * gcc vectorises only when it may assume that comparisons raise no floating-point exception
 * flags (nabla never reads them). And no product is fused into an FMA: gcc fuses a x + b where
 * it sees fit, differently in a loop with a select than in one without, while the fused ReLU's
 * results must be the plain loops' bit for bit (these loops are memory-bound: an FMA saves
 * nothing here). */
#define FP_OPTS __attribute__((optimize("no-trapping-math", "fp-contract=off")))

/* A kernel macro instantiated for float and for double: BOTH_TYPES(MACRO, args...). */
#define BOTH_TYPES(M, ...) M(float, __VA_ARGS__) M(double, __VA_ARGS__)

/* Sums in double over LANES independent partial sums, in a fixed order (so results do not depend
 * on the thread count): one accumulator chain would make the loop latency-bound and keeps the
 * compiler from vectorising it (it may not reassociate). */
#define LANES 16

/* out[0] += sum (p[j] - mean), out[1] += sum (p[j] - mean)^2 over j < s. */
#define DEV_SUMS(T)                                                                                \
    HOT FP_OPTS static void dev_sums_##T(const T *p, int64_t s, double mean, double *out)                  \
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

/* out[0] += sum g, out[1] += sum g (x - mean) over the g that count: GRAD_SUMS(T, NAME, KEEP,
 * SAVE), KEEP(xv, e) whether the gradient at element e, of x value xv, counts: always
 * (grad_sums), where the fused ReLU's forward value xv fa + fc was > 0 (grad_sums_relu), or
 * where (xv fa + fc) + r[e] was (grad_sums_res, whose SAVE(e, v) also writes the kept value to
 * gr[e]: the residual's gradient). One body, so that the fused ops sum in the plain order. The
 * kept values are first made for a chunk of SUM_CHUNK (a multiple of LANES) in a loop of their
 * own, which gcc vectorises (a select inside the unrolled LANES loop kept it scalar); the sums
 * then run over the chunk in LANES blocks, the last s % LANES values going to lane 0 at the very
 * end, as in one pass over s. r and gr are read only by the residual's KEEP and SAVE. */
#define SUM_CHUNK 512
#define KEEP_ALL_S(xv, e) ((void)(xv), 1)
#define KEEP_RELU_S(xv, e) ((xv) * fa + fc > 0)
#define KEEP_RES_S(xv, e) (((xv) * fa + fc) + r[e] > 0)
#define SAVE_NONE(e, v) ((void)0)
#define SAVE_GR(e, v) (gr[e] = (v))
#define GRAD_SUMS(T, NAME, KEEP, SAVE)                                                             \
    HOT FP_OPTS static void NAME##_##T(const T *g, const T *x, const T *restrict r, T *restrict gr, int64_t s, \
                                       double mean, T fa, T fc, double *out)                       \
    {                                                                                              \
        (void)fa, (void)fc, (void)r, (void)gr;                                                     \
        double a[LANES] = {0}, q[LANES] = {0};                                                     \
        T gk[SUM_CHUNK];                                                                           \
        for (int64_t j0 = 0; j0 < s; j0 += SUM_CHUNK) {                                            \
            int64_t n = s - j0 < SUM_CHUNK ? s - j0 : SUM_CHUNK, full = n / LANES * LANES;         \
            const T *xc = x + j0, *gc = g + j0;                                                    \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T xv = xc[i], gl = gc[i], gm = KEEP(xv, j0 + i) ? gl : 0;                          \
                gk[i] = gm;                                                                        \
                SAVE(j0 + i, gm);                                                                  \
            }                                                                                      \
            for (int64_t i = 0; i < full; i += LANES)                                              \
                for (int l = 0; l < LANES; l++) {                                                  \
                    double gv = gk[i + l];                                                         \
                    a[l] += gv, q[l] += gv * ((double)xc[i + l] - mean);                           \
                }                                                                                  \
            for (int64_t i = full; i < n; i++) /* only in the last chunk */                        \
                a[0] += (double)gk[i], q[0] += (double)gk[i] * ((double)xc[i] - mean);             \
        }                                                                                          \
        for (int l = 0; l < LANES; l++) out[0] += a[l], out[1] += q[l];                            \
    }

/* y = OUT(ADD(a x + c)), and y = a g' + b x + c with g' = KEEP(x) ? g : 0: the plain passes
 * (OUT and ADD the value itself, KEEP_ALL_S) and the fused ReLU's (relu set in the kernel's i1),
 * with or without a residual r added first (ADD_RES: a x + c rounded, then + r, as batch_norm
 * then add). The fused forward writes max(0, that), NaN kept; the fused backward takes g where
 * the forward's value (recomputed from x with the same a and c, in the same precision, which
 * stats rows 3 and 4 keep) was > 0, else 0, as ReLU's own backward does with its output. One
 * body for all, with the sums' above, so the fused ops give the separate ops' results bit for
 * bit. */
#define SAME(v) (v)
#define RELU(v) ((v) < 0 ? 0 : (v))
#define ADD_NONE(v, e) (v)
#define ADD_RES(v, e) ((v) + r[e])
#define AFFINE(T, NAME, OUT, ADD)                                                                  \
    HOT FP_OPTS static void NAME##_##T(const T *x, const T *restrict r, int64_t s, T a, T c, T *y) \
    {                                                                                              \
        (void)r;                                                                                   \
        for (int64_t j = 0; j < s; j++) {                                                          \
            T v = x[j] * a + c;                                                                    \
            v = ADD(v, j);                                                                         \
            y[j] = OUT(v);                                                                         \
        }                                                                                          \
    }
#define AFFINE2(T, NAME, KEEP)                                                                     \
    HOT FP_OPTS static void NAME##_##T(const T *g, const T *x, int64_t s, T a, T b, T c, T fa, T fc, T *y) \
    {                                                                                              \
        (void)fa, (void)fc;                                                                        \
        for (int64_t j = 0; j < s; j++) {                                                          \
            T xv = x[j], gl = g[j], gm = KEEP(xv, j) ? gl : 0;                                     \
            y[j] = a * gm + b * xv + c;                                                            \
        }                                                                                          \
    }

DEV_SUMS(float)
DEV_SUMS(double)
BOTH_TYPES(GRAD_SUMS, grad_sums, KEEP_ALL_S, SAVE_NONE)
BOTH_TYPES(GRAD_SUMS, grad_sums_relu, KEEP_RELU_S, SAVE_NONE)
BOTH_TYPES(GRAD_SUMS, grad_sums_res, KEEP_RES_S, SAVE_GR)
BOTH_TYPES(AFFINE, affine, SAME, ADD_NONE)
BOTH_TYPES(AFFINE, affine_relu, RELU, ADD_NONE)
BOTH_TYPES(AFFINE, affine_res, RELU, ADD_RES)
BOTH_TYPES(AFFINE, affine_add, SAME, ADD_RES)
BOTH_TYPES(AFFINE2, affine2, KEEP_ALL_S)
BOTH_TYPES(AFFINE2, affine2_relu, KEEP_RELU_S)

/* training: stats rows 0 and 1 = (mean, biased var) of each channel, then y = (x - mean) /
 * sqrt(var + eps) * w + b; otherwise they are read. Row 2 = w (or 1), for the backward; with
 * relu, y = max(0, that (+ r when r is given)), and rows 3 and 4 = the coefficients a and c of
 * y = a x + c. */
#define BN_FWD(T)                                                                                  \
    static void bn_fwd_##T(int64_t n, int64_t c_count, int64_t s, const T *x, const T *w, const T *b, const T *r, \
                           T *y, T *stats, double eps, bool training, bool relu)                   \
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
            stats[2 * c_count + c] = w ? w[c] : 1;                                                 \
            if (relu) stats[3 * c_count + c] = (T)scale, stats[4 * c_count + c] = (T)shift;        \
            for (int64_t i = 0; i < n; i++) {                                                      \
                int64_t o = (i * c_count + c) * s;                                                 \
                if (r) (relu ? affine_res_##T : affine_add_##T)(x + o, r + o, s, (T)scale, (T)shift, y + o); \
                else (relu ? affine_relu_##T : affine_##T)(x + o, NULL, s, (T)scale, (T)shift, y + o); \
            }                                                                                      \
        }                                                                                          \
    }

/* aux rows: mean, var, weight (and, with relu, the forward's a and c: g is masked first; with
 * a residual r, the masked g is written to gr and the rest reads it as its g). gwb = (sum g
 * xhat, sum g). gx: training w invstd (g - sum g / M - xhat sum(g xhat) / M); evaluation w
 * invstd g. */
#define BN_BWD(T)                                                                                  \
    static void bn_bwd_##T(int64_t n, int64_t c_count, int64_t s, const T *g, const T *x, const T *aux, const T *r, \
                           T *gr, T *gx, T *gwb, double eps, bool training, bool relu)             \
    {                                                                                              \
        int64_t work = n * c_count * s;                                                            \
        CHANNELS_FOR(c) {                                                                          \
            double mean = aux[c], invstd = 1 / sqrt(aux[c_count + c] + eps), w = aux[2 * c_count + c]; \
            double sums[2] = {0, 0}, m = (double)(n * s);                                          \
            T fa = relu ? aux[3 * c_count + c] : 0, fc = relu ? aux[4 * c_count + c] : 0;          \
            for (int64_t i = 0; i < n; i++) {                                                      \
                int64_t o = (i * c_count + c) * s;                                                 \
                if (r) grad_sums_res_##T(g + o, x + o, r + o, gr + o, s, mean, fa, fc, sums);      \
                else if (relu) grad_sums_relu_##T(g + o, x + o, NULL, NULL, s, mean, fa, fc, sums); \
                else grad_sums_##T(g + o, x + o, NULL, NULL, s, mean, 0, 0, sums);                 \
            }                                                                                      \
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
            for (int64_t i = 0; i < n; i++) {                                                      \
                int64_t o = (i * c_count + c) * s;                                                 \
                if (r) affine2_##T(gr + o, x + o, s, ta, tb, tc, 0, 0, gx + o);                    \
                else if (relu) affine2_relu_##T(g + o, x + o, s, ta, tb, tc, fa, fc, gx + o);      \
                else affine2_##T(g + o, x + o, s, ta, tb, tc, 0, 0, gx + o);                       \
            }                                                                                      \
        }                                                                                          \
    }

BN_FWD(float)
BN_FWD(double)
BN_BWD(float)
BN_BWD(double)

/* ---- channels-last: x, y, g, gx are row-major [M, C] ------------------------------------------ */

/* The rows are cut into a number of blocks that depends on the shape alone (at most CL_BLOCKS,
 * of CL_BLOCK_MIN elements or more): each block's per-channel sums go to its own row of a
 * scratch table, which is then added up block after block, so the rounding is the same at any
 * thread count. Blocks are also the unit of work of the threads. */
#define CL_BLOCKS 64
#define CL_BLOCK_MIN 16384

static int64_t cl_blocks(int64_t m, int64_t c)
{
    int64_t nb = m * c / CL_BLOCK_MIN;
    return nb < 1 ? 1 : nb > CL_BLOCKS ? CL_BLOCKS : nb > m ? m : nb;
}

/* s[j] += sum_r v[r, j], q[j] += sum_r v[r, j] u[r, j] over rows r < rows of p (and g), where u
 * = p - ref and v = u (DEV_SUMS_CL: the shifted sums of the statistics) or v = g (GRAD_SUMS_CL:
 * the sums of the backward). The inner loop runs over the channels (vectorised); four rows are
 * added before they reach the accumulators, which cuts the load-add-store chain through s and
 * q by four when C is small. */
#define DEV_SUMS_CL(T)                                                                             \
    HOT FP_OPTS static void dev_sums_cl_##T(const T *restrict p, int64_t rows, int64_t c, const double *restrict ref, \
                                    double *restrict s, double *restrict q)                        \
    {                                                                                              \
        int64_t r = 0;                                                                             \
        for (; r + 4 <= rows; r += 4) {                                                            \
            const T *p0 = p + r * c, *p1 = p0 + c, *p2 = p1 + c, *p3 = p2 + c;                     \
            for (int64_t j = 0; j < c; j++) {                                                      \
                double d0 = (double)p0[j] - ref[j], d1 = (double)p1[j] - ref[j];                   \
                double d2 = (double)p2[j] - ref[j], d3 = (double)p3[j] - ref[j];                   \
                s[j] += (d0 + d1) + (d2 + d3);                                                     \
                q[j] += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3);                                 \
            }                                                                                      \
        }                                                                                          \
        for (; r < rows; r++)                                                                      \
            for (int64_t j = 0; j < c; j++) {                                                      \
                double d = (double)p[r * c + j] - ref[j];                                          \
                s[j] += d, q[j] += d * d;                                                          \
            }                                                                                      \
    }

/* The backward's sums, GRAD_SUMS_CL(T, NAME, KEEP, SAVE): KEEP(xv, j, e) says whether the
 * gradient at element e, of x value xv and channel j, counts: always (grad_sums_cl), where the
 * fused ReLU's forward value xv fa[j] + fc[j] was > 0 (grad_sums_relu_cl), or where (xv fa[j] +
 * fc[j]) + res[e] was (grad_sums_res_cl, whose SAVE(e, v) writes the kept value to gr[e]); fa,
 * fc, res and gr are read only where named. One body, so that the fused ops sum in the plain
 * order and give the separate ops' results bit for bit. */
#define KEEP_ALL(xv, j, e) ((void)(xv), 1)
#define KEEP_RELU(xv, j, e) ((xv) * fa[j] + fc[j] > 0)
#define KEEP_RES(xv, j, e) (((xv) * fa[j] + fc[j]) + res[e] > 0)
#define GRAD_SUMS_CL(T, NAME, KEEP, SAVE)                                                          \
    HOT FP_OPTS static void NAME##_##T(const T *restrict g, const T *restrict p, const T *restrict res,    \
                                       T *restrict gr, int64_t rows, int64_t c, const double *restrict ref, \
                                       const T *restrict fa, const T *restrict fc, double *restrict s, \
                                       double *restrict q)                                         \
    {                                                                                              \
        (void)fa, (void)fc, (void)res, (void)gr;                                                   \
        int64_t r = 0;                                                                             \
        for (; r + 4 <= rows; r += 4) {                                                            \
            const T *p0 = p + r * c, *p1 = p0 + c, *p2 = p1 + c, *p3 = p2 + c;                     \
            const T *g0 = g + r * c, *g1 = g0 + c, *g2 = g1 + c, *g3 = g2 + c;                     \
            for (int64_t j = 0; j < c; j++) {                                                      \
                int64_t e0 = r * c + j, e1 = e0 + c, e2 = e1 + c, e3 = e2 + c;                    \
                (void)e0, (void)e1, (void)e2, (void)e3;                                            \
                T x0 = p0[j], x1 = p1[j], x2 = p2[j], x3 = p3[j];                                  \
                T h0 = g0[j], h1 = g1[j], h2 = g2[j], h3 = g3[j];                                  \
                T m0 = KEEP(x0, j, e0) ? h0 : 0, m1 = KEEP(x1, j, e1) ? h1 : 0;                    \
                T m2 = KEEP(x2, j, e2) ? h2 : 0, m3 = KEEP(x3, j, e3) ? h3 : 0;                    \
                SAVE(e0, m0), SAVE(e1, m1), SAVE(e2, m2), SAVE(e3, m3);                            \
                double v0 = m0, v1 = m1, v2 = m2, v3 = m3;                                         \
                s[j] += (v0 + v1) + (v2 + v3);                                                     \
                q[j] += (v0 * ((double)x0 - ref[j]) + v1 * ((double)x1 - ref[j])) +               \
                        (v2 * ((double)x2 - ref[j]) + v3 * ((double)x3 - ref[j]));                 \
            }                                                                                      \
        }                                                                                          \
        for (; r < rows; r++)                                                                      \
            for (int64_t j = 0; j < c; j++) {                                                      \
                T xv = p[r * c + j], gl = g[r * c + j], gm = KEEP(xv, j, r * c + j) ? gl : 0;      \
                SAVE(r * c + j, gm);                                                               \
                double v = gm;                                                                     \
                s[j] += v, q[j] += v * ((double)xv - ref[j]);                                      \
            }                                                                                      \
    }

/* y = OUT(ADD(x a + k)), and y = a g' + b x + k with g' = KEEP(x, j) ? g : 0, with per-channel
 * a, b, k (and the fused ReLU's fa, fc): as AFFINE and AFFINE2 (ADD_RES_CL adds res). */
#define ADD_RES_CL(v, e) ((v) + res[e])
#define AFFINE_CL(T, NAME, OUT, ADD)                                                               \
    HOT FP_OPTS static void NAME##_##T(const T *restrict x, const T *restrict res, int64_t rows, int64_t c, \
                                       const T *restrict a, const T *restrict k, T *restrict y)    \
    {                                                                                              \
        (void)res;                                                                                 \
        for (int64_t r = 0; r < rows; r++)                                                         \
            for (int64_t j = 0; j < c; j++) {                                                      \
                T v = x[r * c + j] * a[j] + k[j];                                                  \
                v = ADD(v, r * c + j);                                                             \
                y[r * c + j] = OUT(v);                                                             \
            }                                                                                      \
    }
#define AFFINE2_CL(T, NAME, KEEP)                                                                  \
    HOT FP_OPTS static void NAME##_##T(const T *restrict g, const T *restrict x, int64_t rows, int64_t c, \
                                       const T *restrict a, const T *restrict b, const T *restrict k, \
                                       const T *restrict fa, const T *restrict fc, T *restrict y)  \
    {                                                                                              \
        (void)fa, (void)fc;                                                                        \
        for (int64_t r = 0; r < rows; r++)                                                         \
            for (int64_t j = 0; j < c; j++) {                                                      \
                T xv = x[r * c + j], gl = g[r * c + j], gm = KEEP(xv, j, 0) ? gl : 0;              \
                y[r * c + j] = a[j] * gm + b[j] * xv + k[j];                                       \
            }                                                                                      \
    }

DEV_SUMS_CL(float)
DEV_SUMS_CL(double)
BOTH_TYPES(GRAD_SUMS_CL, grad_sums_cl, KEEP_ALL, SAVE_NONE)
BOTH_TYPES(GRAD_SUMS_CL, grad_sums_relu_cl, KEEP_RELU, SAVE_NONE)
BOTH_TYPES(GRAD_SUMS_CL, grad_sums_res_cl, KEEP_RES, SAVE_GR)
BOTH_TYPES(AFFINE_CL, affine_cl, SAME, ADD_NONE)
BOTH_TYPES(AFFINE_CL, affine_relu_cl, RELU, ADD_NONE)
BOTH_TYPES(AFFINE_CL, affine_res_cl, RELU, ADD_RES_CL)
BOTH_TYPES(AFFINE_CL, affine_add_cl, SAME, ADD_RES_CL)
BOTH_TYPES(AFFINE2_CL, affine2_cl, KEEP_ALL)
BOTH_TYPES(AFFINE2_CL, affine2_relu_cl, KEEP_RELU)

/* Scratch of one channels-last call: the blocks' sums (2 C doubles each), the reference point of
 * the sums (C doubles) and three per-channel coefficient rows of T. */
typedef struct cl_scratch {
    double *part, *ref;
    void *coef;
} cl_scratch;

static nb_status cl_scratch_new(nb_op op, int64_t nblk, int64_t c, size_t tsize, cl_scratch *sc)
{
    size_t bytes = (size_t)(2 * nblk + 1) * (size_t)c * sizeof(double) + 3 * (size_t)c * tsize;
    sc->part = calloc(1, bytes);
    if (!sc->part) return nb__err(NB_ERR_OOM, "%s: out of memory for %zu bytes of scratch", nb__op_name(op), bytes);
    sc->ref = sc->part + 2 * nblk * c;
    sc->coef = sc->ref + c;
    return NB_OK;
}

/* Row range [*r0, *r1) of block b of nblk over m rows. */
static void cl_rows(int64_t b, int64_t nblk, int64_t m, int64_t *r0, int64_t *r1)
{
    *r0 = m * b / nblk;
    *r1 = m * (b + 1) / nblk;
}

/* The elementwise second pass runs over a thread's rows backwards, in pieces of about
 * CL_PIECE elements: the rows the first pass read last are still in the caches then. */
#define CL_PIECE 16384

/* This thread's rows [*r0, *r1) in a parallel region over m rows of nblk blocks: the blocks an
 * `omp for schedule(static)` gives it (as libgomp splits them), so that the passes of a call
 * meet the same rows on the same thread. */
static void cl_share(int64_t nblk, int64_t m, int64_t *r0, int64_t *r1)
{
#ifdef _OPENMP
    int64_t t = omp_get_thread_num(), n = omp_get_num_threads();
#else
    int64_t t = 0, n = 1;
#endif
    int64_t q = nblk / n, r = nblk % n, k0 = t * q + (t < r ? t : r), k1 = k0 + q + (t < r), e;
    *r0 = *r1 = 0;
    if (k0 >= k1) return;
    cl_rows(k0, nblk, m, r0, &e);
    cl_rows(k1 - 1, nblk, m, &e, r1);
}

/* Adds the blocks' sums in block order into part's first row pair (s in [0, C), q in [C, 2C)). */
static void cl_reduce(double *part, int64_t nblk, int64_t c)
{
    for (int64_t b = 1; b < nblk; b++)
        for (int64_t j = 0; j < 2 * c; j++) part[j] += part[b * 2 * c + j];
}

/* As bn_fwd, on [M, C]: the training statistics are the sums of x - x[0, :] (the first row:
 * close to the mean, so the one-pass difference of squares loses little). */
#define BN_FWD_CL(T)                                                                               \
    static nb_status bn_fwd_cl_##T(int64_t m, int64_t c_count, const T *x, const T *w, const T *b, const T *r, \
                                   T *y, T *stats, double eps, bool training, bool relu)           \
    {                                                                                              \
        int64_t nblk = cl_blocks(m, c_count), work = m * c_count;                                  \
        int nt = nb_cpu_threads_for(work, NB_CPU_GRAIN);                                           \
        cl_scratch sc;                                                                             \
        NB_TRY(cl_scratch_new(NB_OP_BATCH_NORM, nblk, c_count, sizeof(T), &sc));                   \
        T *scale = sc.coef, *shift = scale + c_count;                                              \
        bool vec = nb__bn_cl_vec(c_count, sizeof(T)), stream = vec && nb__bn_cl_stream(y, m, c_count); \
        cl_vec_in vin = {.x = (const void *)x, .ref = (const void *)x}; /* ref: row 0, as sc.ref */ \
        int mode = r ? (relu ? SUMS_RES : AFFINE_ADD) : relu ? SUMS_RELU : SUMS_DEV;               \
        if (training) {                                                                            \
            for (int64_t j = 0; j < c_count; j++) sc.ref[j] = (double)x[j];                        \
            _Pragma("omp parallel for num_threads(nt) schedule(static)")                           \
            for (int64_t k = 0; k < nblk; k++) {                                                   \
                int64_t r0, r1;                                                                    \
                cl_rows(k, nblk, m, &r0, &r1);                                                     \
                double *s = sc.part + k * 2 * c_count;                                             \
                if (!nb__bn_cl_vec_sums(vec, SUMS_DEV, &vin, r0, r1, c_count, s, s + c_count))      \
                    dev_sums_cl_##T(x + r0 * c_count, r1 - r0, c_count, sc.ref, s, s + c_count);  \
            }                                                                                      \
            cl_reduce(sc.part, nblk, c_count);                                                     \
        }                                                                                          \
        for (int64_t j = 0; j < c_count; j++) {                                                    \
            double mean = stats[j], var = stats[c_count + j];                                      \
            if (training) {                                                                        \
                double s = sc.part[j], q = sc.part[c_count + j], mm = (double)m;                   \
                mean = sc.ref[j] + s / mm;                                                         \
                var = (q - s * s / mm) / mm;                                                       \
                var = var < 0 ? 0 : var;                                                           \
                stats[j] = (T)mean;                                                                \
                stats[c_count + j] = (T)var;                                                       \
            }                                                                                      \
            double a = (w ? w[j] : 1) / sqrt(var + eps);                                           \
            stats[2 * c_count + j] = w ? w[j] : 1;                                                 \
            scale[j] = (T)a;                                                                       \
            shift[j] = (T)((b ? b[j] : 0) - mean * a);                                             \
            if (relu) stats[3 * c_count + j] = scale[j], stats[4 * c_count + j] = shift[j];        \
        }                                                                                          \
        int64_t piece = CL_PIECE / c_count > 0 ? CL_PIECE / c_count : 1;                           \
        _Pragma("omp parallel num_threads(nt)")                                                    \
        {                                                                                          \
            int64_t r0, r1;                                                                        \
            cl_share(nblk, m, &r0, &r1);                                                           \
            for (int64_t hi = r1; hi > r0; hi -= piece) {                                          \
                int64_t lo = hi - piece > r0 ? hi - piece : r0, o = lo * c_count;                  \
                if (nb__bn_cl_vec_affine(vec, mode, x, r, lo, hi, c_count, scale, shift, y, stream)) continue; \
                if (r) (relu ? affine_res_cl_##T : affine_add_cl_##T)(x + o, r + o, hi - lo, c_count, scale, shift, y + o); \
                else (relu ? affine_relu_cl_##T : affine_cl_##T)(x + o, NULL, hi - lo, c_count, scale, shift, y + o); \
            }                                                                                      \
        }                                                                                          \
        free(sc.part);                                                                             \
        return NB_OK;                                                                              \
    }

/* As bn_bwd, on [M, C]. */
#define BN_BWD_CL(T)                                                                               \
    static nb_status bn_bwd_cl_##T(int64_t m, int64_t c_count, const T *g, const T *x, const T *aux, const T *r, \
                                   T *gr, T *gx, T *gwb, double eps, bool training, bool relu)     \
    {                                                                                              \
        int64_t nblk = cl_blocks(m, c_count), work = m * c_count;                                  \
        int nt = nb_cpu_threads_for(work, NB_CPU_GRAIN);                                           \
        cl_scratch sc;                                                                             \
        NB_TRY(cl_scratch_new(NB_OP_BATCH_NORM_BACKWARD, nblk, c_count, sizeof(T), &sc));          \
        for (int64_t j = 0; j < c_count; j++) sc.ref[j] = aux[j];                                  \
        const T *fa = aux + 3 * c_count, *fc = aux + 4 * c_count; /* read only with relu */        \
        bool vec = nb__bn_cl_vec(c_count, sizeof(T)), stream = vec && gx && nb__bn_cl_stream(gx, m, c_count); \
        cl_vec_in vin = {.g = (const void *)g, .x = (const void *)x, .res = (const void *)r,        \
                         .ref = (const void *)aux, .fa = (const void *)fa, .fc = (const void *)fc, .gr = (void *)gr}; \
        int mode = r ? SUMS_RES : relu ? SUMS_RELU : SUMS_GRAD;                                    \
        _Pragma("omp parallel for num_threads(nt) schedule(static)")                               \
        for (int64_t k = 0; k < nblk; k++) {                                                       \
            int64_t r0, r1;                                                                        \
            cl_rows(k, nblk, m, &r0, &r1);                                                         \
            double *s = sc.part + k * 2 * c_count;                                                 \
            int64_t o = r0 * c_count;                                                              \
            if (nb__bn_cl_vec_sums(vec, mode, &vin, r0, r1, c_count, s, s + c_count)) continue;     \
            if (r)                                                                                 \
                grad_sums_res_cl_##T(g + o, x + o, r + o, gr + o, r1 - r0, c_count, sc.ref, fa, fc, s, s + c_count); \
            else if (relu)                                                                         \
                grad_sums_relu_cl_##T(g + o, x + o, NULL, NULL, r1 - r0, c_count, sc.ref, fa, fc, s, s + c_count); \
            else                                                                                   \
                grad_sums_cl_##T(g + o, x + o, NULL, NULL, r1 - r0, c_count, sc.ref, NULL, NULL, s, s + c_count); \
        }                                                                                          \
        cl_reduce(sc.part, nblk, c_count);                                                         \
        T *ta = sc.coef, *tb = ta + c_count, *tc = tb + c_count;                                   \
        for (int64_t j = 0; j < c_count; j++) {                                                    \
            double mean = aux[j], invstd = 1 / sqrt(aux[c_count + j] + eps), w = aux[2 * c_count + j]; \
            double sg = sc.part[j], sgx = sc.part[c_count + j], mm = (double)m;                    \
            gwb[j] = (T)(sgx * invstd);                                                            \
            gwb[c_count + j] = (T)sg;                                                              \
            double kk = w * invstd, bx = 0, c0 = 0;                                                \
            if (training) {                                                                        \
                bx = -kk * invstd * invstd * sgx / mm;                                             \
                c0 = -kk * sg / mm - bx * mean;                                                    \
            }                                                                                      \
            ta[j] = (T)kk, tb[j] = (T)bx, tc[j] = (T)c0;                                           \
        }                                                                                          \
        if (gx) {                                                                                  \
            int64_t piece = CL_PIECE / c_count > 0 ? CL_PIECE / c_count : 1;                       \
            cl_vec_in vres = {.g = (const void *)gr, .x = (const void *)x}; /* r: g' is gr */       \
            _Pragma("omp parallel num_threads(nt)")                                                \
            {                                                                                      \
                int64_t r0, r1;                                                                    \
                cl_share(nblk, m, &r0, &r1);                                                       \
                for (int64_t hi = r1; hi > r0; hi -= piece) {                                      \
                    int64_t lo = hi - piece > r0 ? hi - piece : r0, o = lo * c_count;              \
                    if (nb__bn_cl_vec_affine2(vec, r ? SUMS_GRAD : mode, r ? &vres : &vin, lo, hi, c_count, ta, tb, tc, \
                                       gx, stream))                                                \
                        continue;                                                                  \
                    if (r)                                                                         \
                        affine2_cl_##T(gr + o, x + o, hi - lo, c_count, ta, tb, tc, NULL, NULL, gx + o); \
                    else if (relu)                                                                 \
                        affine2_relu_cl_##T(g + o, x + o, hi - lo, c_count, ta, tb, tc, fa, fc, gx + o); \
                    else                                                                           \
                        affine2_cl_##T(g + o, x + o, hi - lo, c_count, ta, tb, tc, NULL, NULL, gx + o); \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        free(sc.part);                                                                             \
        return NB_OK;                                                                              \
    }

BN_FWD_CL(float)
BN_FWD_CL(double)
BN_BWD_CL(float)
BN_BWD_CL(double)

static void *ptr(const nb_tensor *t) { return t ? nb__data(t) : NULL; }


/* BATCH_NORM with i0 set: the running statistics, in place (out = running mean, out2 = running
 * var, any stride) from the stats in[0] (rows mean, biased var): r = (1 - s0) r + s0 mean and
 * (1 - s0) r + s1 var, in double, as the CUDA kernel. */
#define BN_RUNNING(T)                                                                              \
    static void bn_running_##T(const nb_kargs *a)                                                  \
    {                                                                                              \
        const T *st = ptr(a->in[0]);                                                               \
        T *rm = ptr(a->out), *rv = ptr(a->out2);                                                   \
        int64_t c_count = a->in[0]->shape[1], sm = a->out->strides[0], sv = a->out2->strides[0];   \
        for (int64_t c = 0; c < c_count; c++) {                                                    \
            rm[c * sm] = (T)((1 - a->s0) * (double)rm[c * sm] + a->s0 * (double)st[c]);            \
            rv[c * sv] = (T)((1 - a->s0) * (double)rv[c * sv] + a->s1 * (double)st[c_count + c]);  \
        }                                                                                          \
    }

BN_RUNNING(float)
BN_RUNNING(double)

/* The channels-last path: x channels-last, and then every other [N, C, H, W] operand must be too
 * (nb_batch_norm and its rule allocate them so). */
static nb_status bn_cl(nb_op op, const nb_kargs *a, const nb_tensor *x, const nb_tensor *r)
{
    static const char *const what[4] = {"the output", "the upstream gradient", "the residual",
                                        "the residual's gradient"};
    const nb_tensor *other[4] = {a->out, op == NB_OP_BATCH_NORM ? NULL : a->in[0], r, r ? a->out3 : NULL};
    for (int i = 0; i < 4; i++)
        if (other[i] && !nb__is_channels_last(other[i]))
            return nb__err(NB_ERR_INTERNAL, "%s: x is channels-last but %s is not", nb__op_name(op), what[i]);
    int64_t m = x->shape[0] * x->shape[2] * x->shape[3], c = x->shape[1];
    bool f32 = x->dtype == NB_FLOAT32, relu = a->i1 != 0;
    if (op == NB_OP_BATCH_NORM)
        return f32 ? bn_fwd_cl_float(m, c, ptr(x), ptr(a->in[1]), ptr(a->in[2]), ptr(r), ptr(a->out), ptr(a->out2),
                                     a->s0, a->flag, relu)
                   : bn_fwd_cl_double(m, c, ptr(x), ptr(a->in[1]), ptr(a->in[2]), ptr(r), ptr(a->out), ptr(a->out2),
                                      a->s0, a->flag, relu);
    return f32 ? bn_bwd_cl_float(m, c, ptr(a->in[0]), ptr(x), ptr(a->in[2]), ptr(r), ptr(a->out3), ptr(a->out),
                                 ptr(a->out2), a->s0, a->flag, relu)
               : bn_bwd_cl_double(m, c, ptr(a->in[0]), ptr(x), ptr(a->in[2]), ptr(r), ptr(a->out3), ptr(a->out),
                                  ptr(a->out2), a->s0, a->flag, relu);
}

nb_status nb_cpu_k_batchnorm(nb_op op, const nb_kargs *a)
{
    const nb_tensor *x = op == NB_OP_BATCH_NORM ? a->in[0] : a->in[1];
    nb_dtype dt = x->dtype;
    if (dt != NB_FLOAT32 && dt != NB_FLOAT64)
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported (float32/float64 only)", nb__op_name(op),
                       nb_dtype_name(dt));
    if (op != NB_OP_BATCH_NORM && op != NB_OP_BATCH_NORM_BACKWARD)
        return nb__err(NB_ERR_INTERNAL, "batchnorm: op %s is not in this family", nb__op_name(op));
    if (op == NB_OP_BATCH_NORM && a->i0) {
        if (dt == NB_FLOAT32) bn_running_float(a);
        else bn_running_double(a);
        return NB_OK;
    }
    /* the residual: x's shape, and its layout, as the residual's gradient (the backward takes one
     * with the fused ReLU only: without, the residual's gradient is the upstream one) */
    const nb_tensor *r = a->in[3];
    if (r && op == NB_OP_BATCH_NORM_BACKWARD && !a->i1)
        return nb__err(NB_ERR_INTERNAL, "%s: a residual without the fused ReLU has no backward kernel", nb__op_name(op));
    if (r && (r->ndim != x->ndim || memcmp(r->shape, x->shape, (size_t)x->ndim * sizeof(int64_t)) != 0 || r->dtype != dt || (op == NB_OP_BATCH_NORM_BACKWARD && !a->out3)))
        return nb__err(NB_ERR_INTERNAL, "%s: the residual must have x's shape and dtype (and a gradient output)",
                       nb__op_name(op));
    if (nb__is_channels_last(x)) return bn_cl(op, a, x, r);
    if (r && (!nb__is_contiguous(r) || (a->out3 && !nb__is_contiguous(a->out3))))
        return nb__err(NB_ERR_INTERNAL, "%s: x is contiguous but the residual or its gradient is not", nb__op_name(op));
    int64_t n = x->shape[0], c = x->shape[1], s = nb__numel(x->shape + 2, x->ndim - 2);
    bool relu = a->i1 != 0;
    if (op == NB_OP_BATCH_NORM) {
        if (dt == NB_FLOAT32)
            bn_fwd_float(n, c, s, ptr(x), ptr(a->in[1]), ptr(a->in[2]), ptr(r), ptr(a->out), ptr(a->out2), a->s0,
                         a->flag, relu);
        else
            bn_fwd_double(n, c, s, ptr(x), ptr(a->in[1]), ptr(a->in[2]), ptr(r), ptr(a->out), ptr(a->out2), a->s0,
                          a->flag, relu);
        return NB_OK;
    }
    if (dt == NB_FLOAT32)
        bn_bwd_float(n, c, s, ptr(a->in[0]), ptr(x), ptr(a->in[2]), ptr(r), ptr(a->out3), ptr(a->out), ptr(a->out2),
                     a->s0, a->flag, relu);
    else
        bn_bwd_double(n, c, s, ptr(a->in[0]), ptr(x), ptr(a->in[2]), ptr(r), ptr(a->out3), ptr(a->out), ptr(a->out2),
                      a->s0, a->flag, relu);
    return NB_OK;
}
