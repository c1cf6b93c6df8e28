/* Kernels: the fused activation gradients of ops.def (family `binary`: nb_cpu_k_binary forwards
 * these ops here).
 *   out[...] = f(g, x) with g = in[0] (the gradient of the activation's output) and x = in[1]
 *   (the activation's input, or its output y for SIGMOID_BACKWARD, TANH_BACKWARD, and for
 *   THRESHOLD_BACKWARD when the caller saved relu's output: y > 0 exactly where x > 0), both
 *   broadcast to out's shape. float32/float64; out, g and x share one dtype.
 *   THRESHOLD_BACKWARD   x <= 0 ? 0 : g     (0 also where g is inf or NaN, as PyTorch)
 *   LEAKY_RELU_BACKWARD  x > 0 ? g : g s0
 *   SIGMOID_BACKWARD     g (1 - y) y
 *   TANH_BACKWARD        g (1 - y^2)
 *   GELU_BACKWARD        g gelu'(x), i0 = nb_gelu_approx
 *   SILU_BACKWARD        g s (1 + x (1 - s)), s = sigmoid(x)
 *   SOFTPLUS_BACKWARD    x s0 > s1 ? g : g z / (z + 1), z = e^{x s0}   (s0 = beta, s1 = threshold)
 * The formulas are PyTorch's (its CPU kernels in aten/src/ATen/native/cpu). Contiguous runs go
 * through vectorised clones; the float64 loops call libm and are the float32 ones' reference. */
#include <math.h>

#include "cpu/cpu_impl.h"
#include "cpu/ops/unary_math_impl.h"

nb_status nb_cpu_activation_backward(nb_op op, const nb_kargs *a);

typedef struct bparams {
    double s0, s1;
} bparams;

#define BW_BODY(T, expr)                                                                         \
    const bparams *prm = ctx;                                                                    \
    const T s0 = (T)prm->s0, s1 = (T)prm->s1;                                                    \
    (void)s0;                                                                                    \
    (void)s1;                                                                                    \
    for (int64_t k = 0; k < n; k++) {                                                            \
        const T g = *(const T *)(p[1] + k * s[1]);                                               \
        const T x = *(const T *)(p[2] + k * s[2]);                                               \
        *(T *)(p[0] + k * s[0]) = (expr);                                                        \
    }

/* Strided runs are gathered into blocks and run through the contiguous loop (as in unary.c). */
#define BLOCK 256

/* A loop over a vectorisable expression of g, x and the parameters s0, s1. (Its name differs from
 * unary.c's loops: clang 14 gives a static target_clones function a global resolver symbol.) */
#define BW_VEC_LOOP(name, T, expr)                                                               \
    static NB_VEC_CLONES void name##_grad_contig(T *restrict o, const T *restrict gp,            \
                                            const T *restrict xp, int64_t n, T s0, T s1)         \
    {                                                                                            \
        (void)s0;                                                                                \
        (void)s1;                                                                                \
        _Pragma("omp simd") for (int64_t k = 0; k < n; k++)                                     \
        {                                                                                        \
            const T g = gp[k], x = xp[k];                                                        \
            o[k] = (expr);                                                                       \
        }                                                                                        \
    }                                                                                            \
    static void name(char **p, const int64_t *s, int64_t n, void *ctx)                          \
    {                                                                                            \
        const bparams *prm = ctx;                                                                \
        const T s0 = (T)prm->s0, s1 = (T)prm->s1;                                                \
        if (s[0] == sizeof(T) && s[1] == sizeof(T) && s[2] == sizeof(T)) {                       \
            name##_grad_contig((T *)p[0], (const T *)p[1], (const T *)p[2], n, s0, s1);          \
            return;                                                                              \
        }                                                                                        \
        T bg[BLOCK], bx[BLOCK], bo[BLOCK];                                                       \
        for (int64_t k0 = 0; k0 < n; k0 += BLOCK) {                                              \
            int64_t m = n - k0 < BLOCK ? n - k0 : BLOCK;                                         \
            for (int64_t k = 0; k < m; k++) {                                                    \
                bg[k] = *(const T *)(p[1] + (k0 + k) * s[1]);                                    \
                bx[k] = *(const T *)(p[2] + (k0 + k) * s[2]);                                    \
            }                                                                                    \
            name##_grad_contig(bo, bg, bx, m, s0, s1);                                           \
            for (int64_t k = 0; k < m; k++) *(T *)(p[0] + (k0 + k) * s[0]) = bo[k];             \
        }                                                                                        \
    }

/* The same for expressions that call libm. */
#define BW_LIBM_LOOP(name, T, expr)                                                              \
    static void name(char **p, const int64_t *s, int64_t n, void *ctx) { BW_BODY(T, expr) }

/* PyTorch's silu and softplus gradients. */
static inline float silu_grad_f32(float g, float x)
{
    float sg = nb_vsigmoidf(x);
    return g * sg * (1.0f + x * (1.0f - sg));
}

static inline double silu_grad_f64(double g, double x)
{
    double sg = 1.0 / (1.0 + exp(-x));
    return g * sg * (1.0 + x * (1.0 - sg));
}

static inline float softplus_grad_f32(float g, float x, float beta, float threshold)
{
    float z = nb_vexpf(x * beta);
    return x * beta > threshold ? g : g * z / (z + 1.0f);
}

static inline double softplus_grad_f64(double g, double x, double beta, double threshold)
{
    if (x * beta > threshold) return g;
    double z = exp(x * beta);
    return g * z / (z + 1.0);
}

BW_VEC_LOOP(threshold_f32, float, x <= 0.0f ? 0.0f : g)
BW_VEC_LOOP(leaky_f32, float, x > 0.0f ? g : g * s0)
BW_VEC_LOOP(sigmoid_f32, float, g * (1.0f - x) * x)
BW_VEC_LOOP(tanh_f32, float, g * (1.0f - x * x))
BW_VEC_LOOP(gelu_f32, float, g * nb_gelu_grad_f32(x))
BW_VEC_LOOP(gelu_tanh_f32, float, g * nb_gelu_tanh_grad_f32(x))
BW_VEC_LOOP(silu_f32, float, silu_grad_f32(g, x))
BW_VEC_LOOP(softplus_f32, float, softplus_grad_f32(g, x, s0, s1))

BW_VEC_LOOP(threshold_f64, double, x <= 0.0 ? 0.0 : g)
BW_VEC_LOOP(leaky_f64, double, x > 0.0 ? g : g * s0)
BW_VEC_LOOP(sigmoid_f64, double, g * (1.0 - x) * x)
BW_VEC_LOOP(tanh_f64, double, g * (1.0 - x * x))
BW_LIBM_LOOP(gelu_f64, double, g * nb_gelu_grad_f64(x))
BW_LIBM_LOOP(gelu_tanh_f64, double, g * nb_gelu_tanh_grad_f64(x))
BW_LIBM_LOOP(silu_f64, double, silu_grad_f64(g, x))
BW_LIBM_LOOP(softplus_f64, double, softplus_grad_f64(g, x, s0, s1))

nb_status nb_cpu_activation_backward(nb_op op, const nb_kargs *a)
{
    nb_cpu_loop_fn f32 = NULL, f64 = NULL;
    switch (op) {
    case NB_OP_THRESHOLD_BACKWARD: f32 = threshold_f32, f64 = threshold_f64; break;
    case NB_OP_LEAKY_RELU_BACKWARD: f32 = leaky_f32, f64 = leaky_f64; break;
    case NB_OP_SIGMOID_BACKWARD: f32 = sigmoid_f32, f64 = sigmoid_f64; break;
    case NB_OP_TANH_BACKWARD: f32 = tanh_f32, f64 = tanh_f64; break;
    case NB_OP_GELU_BACKWARD:
        if (a->i0 == NB_GELU_TANH) f32 = gelu_tanh_f32, f64 = gelu_tanh_f64;
        else f32 = gelu_f32, f64 = gelu_f64;
        break;
    case NB_OP_SILU_BACKWARD: f32 = silu_f32, f64 = silu_f64; break;
    case NB_OP_SOFTPLUS_BACKWARD: f32 = softplus_f32, f64 = softplus_f64; break;
    default: return nb__err(NB_ERR_INTERNAL, "%s: not an activation backward op", nb__op_name(op));
    }
    nb_dtype dt = a->out->dtype;
    if (a->in[0]->dtype != dt || a->in[1]->dtype != dt)
        return nb__err(NB_ERR_INTERNAL, "%s: dtypes differ (out %s, grad %s, input %s)",
                       nb__op_name(op), nb_dtype_name(dt), nb_dtype_name(a->in[0]->dtype),
                       nb_dtype_name(a->in[1]->dtype));
    nb_cpu_loop_fn loop = dt == NB_FLOAT32 ? f32 : dt == NB_FLOAT64 ? f64 : NULL;
    if (!loop)
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported (float32/float64 only)",
                       nb__op_name(op), nb_dtype_name(dt));
    bparams prm = {a->s0, a->s1};
    /* gelu, silu and softplus evaluate exp/erfc: worth a thread at a quarter of the grain */
    bool cheap = op != NB_OP_GELU_BACKWARD && op != NB_OP_SILU_BACKWARD &&
                 op != NB_OP_SOFTPLUS_BACKWARD;
    nb_cpu_iter it;
    nb_cpu_iter_elementwise(&it, a->out, a->in, 2);
    nb_cpu_iter_run(&it, loop, &prm, cheap ? NB_CPU_GRAIN : NB_CPU_GRAIN / 4);
    return NB_OK;
}
