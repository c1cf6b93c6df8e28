/* Kernels: elementwise unary ops and activations (the `unary` family of ops.def).
 *   out[...] = f(in[0][...]), in[0] broadcast to out's shape (any strides)
 *   dtypes: out and in[0] share one dtype, except LOGICAL_NOT (any input, bool out). Float
 *   functions take float32/float64 (the entry point converts integer inputs); NEG ABS SIGN RELU
 *   CLAMP also take int64/int32/uint8, SIGN bool.
 *   params: LEAKY_RELU s0 = slope; GELU i0 = nb_gelu_approx; SOFTPLUS s0 = beta, s1 = threshold;
 *   CLAMP s0 = min, s1 = max (-inf/inf for none; min > max gives max, as PyTorch).
 * Each (op, dtype) has one element expression, run by one loop: a vectorised clone (AVX-512,
 * AVX2, baseline) on contiguous runs, and on strided runs gathered into blocks (VEC_LOOP), or a
 * plain loop for libm calls (LIBM_LOOP). Results never depend on layout or thread count. The
 * float64 expressions call libm and are the reference the float32 polynomials
 * (unary_math_impl.h) are tested against. */
#include <math.h>

#include "cpu/cpu_impl.h"
#include "cpu/ops/unary_math_impl.h"

/* The op's parameters: s for float loops, q (bounds already in the type's range) for integer
 * ones; each loop converts them once to its type. */
typedef struct uparams {
    double s0, s1;
    int64_t q0, q1;
} uparams;

/* Strided runs are gathered into blocks of this many elements and run through the contiguous
 * loop: the values are the same as on contiguous data (one code path, one rounding) and the
 * arithmetic stays vectorised. */
#define BLOCK 256

/* A loop over a vectorisable expression of `x` (and of `s0`, `s1`: the parameters as T, read
 * from the fields PF0 and PF1 of uparams). */
#define VEC_LOOP(name, T, expr) VEC_LOOP_P(name, T, s0, s1, expr)
#define VEC_LOOP_P(name, T, PF0, PF1, expr)                                                      \
    static NB_VEC_CLONES void name##_contig(T *restrict o, const T *restrict in, int64_t n,     \
                                            T s0, T s1)                                          \
    {                                                                                            \
        (void)s0;                                                                                \
        (void)s1;                                                                                \
        _Pragma("omp simd") for (int64_t k = 0; k < n; k++)                                     \
        {                                                                                        \
            const T x = in[k];                                                                   \
            o[k] = (expr);                                                                       \
        }                                                                                        \
    }                                                                                            \
    static void name(char **p, const int64_t *s, int64_t n, void *ctx)                          \
    {                                                                                            \
        const uparams *prm = ctx;                                                                \
        const T s0 = (T)prm->PF0, s1 = (T)prm->PF1;                                              \
        if (s[1] == sizeof(T) && s[0] == sizeof(T)) {                                            \
            name##_contig((T *)p[0], (const T *)p[1], n, s0, s1);                                \
            return;                                                                              \
        }                                                                                        \
        T bi[BLOCK], bo[BLOCK];                                                                  \
        for (int64_t k0 = 0; k0 < n; k0 += BLOCK) {                                              \
            int64_t m = n - k0 < BLOCK ? n - k0 : BLOCK;                                         \
            for (int64_t k = 0; k < m; k++) bi[k] = *(const T *)(p[1] + (k0 + k) * s[1]);        \
            name##_contig(bo, bi, m, s0, s1);                                                    \
            for (int64_t k = 0; k < m; k++) *(T *)(p[0] + (k0 + k) * s[0]) = bo[k];             \
        }                                                                                        \
    }

/* The same for expressions that call libm (scalar calls: no clones, no simd). */
#define LIBM_LOOP(name, T, expr)                                                                 \
    static void name(char **p, const int64_t *s, int64_t n, void *ctx)                          \
    {                                                                                            \
        const uparams *prm = ctx;                                                                \
        const T s0 = (T)prm->s0, s1 = (T)prm->s1;                                                \
        (void)s0;                                                                                \
        (void)s1;                                                                                \
        if (s[0] == sizeof(T) && s[1] == sizeof(T)) {                                            \
            T *restrict o = (T *)p[0];                                                           \
            const T *restrict in = (const T *)p[1];                                              \
            for (int64_t k = 0; k < n; k++) {                                                    \
                const T x = in[k];                                                               \
                o[k] = (expr);                                                                   \
            }                                                                                    \
            return;                                                                              \
        }                                                                                        \
        for (int64_t k = 0; k < n; k++) {                                                        \
            const T x = *(const T *)(p[1] + k * s[1]);                                           \
            *(T *)(p[0] + k * s[0]) = (expr);                                                    \
        }                                                                                        \
    }

/* ---- float32 ------------------------------------------------------------------------------- */

VEC_LOOP(neg_f32, float, -x)
VEC_LOOP(abs_f32, float, fabsf(x))
VEC_LOOP(sign_f32, float, (float)((0.0f < x) - (x < 0.0f)))
VEC_LOOP(exp_f32, float, nb_vexpf(x))
VEC_LOOP(log_f32, float, nb_vlogf(x))
VEC_LOOP(log1p_f32, float, nb_vlog1pf(x))
LIBM_LOOP(sqrt_f32, float, nb_sqrtf(x))
LIBM_LOOP(rsqrt_f32, float, 1.0f / nb_sqrtf(x))
LIBM_LOOP(sin_f32, float, sinf(x))
LIBM_LOOP(cos_f32, float, cosf(x))
VEC_LOOP(tanh_f32, float, nb_vtanhf(x))
VEC_LOOP(sigmoid_f32, float, nb_vsigmoidf(x))
VEC_LOOP(relu_f32, float, x < 0.0f ? 0.0f : x)
VEC_LOOP(leaky_relu_f32, float, x > 0.0f ? x : x * s0)
VEC_LOOP(gelu_f32, float, nb_gelu_f32(x))
VEC_LOOP(gelu_tanh_f32, float, nb_gelu_tanh_f32(x))
VEC_LOOP(silu_f32, float, x / (1.0f + nb_vexpf(-x)))
VEC_LOOP(softplus_f32, float, nb_softplus_f32(x, s0, s1))
VEC_LOOP(clamp_f32, float, (x < s0 ? s0 : x) > s1 ? s1 : (x < s0 ? s0 : x))

/* ---- float64 (libm: the reference) --------------------------------------------------------- */

VEC_LOOP(neg_f64, double, -x)
VEC_LOOP(abs_f64, double, fabs(x))
VEC_LOOP(sign_f64, double, (double)((0.0 < x) - (x < 0.0)))
LIBM_LOOP(exp_f64, double, exp(x))
LIBM_LOOP(log_f64, double, log(x))
LIBM_LOOP(log1p_f64, double, log1p(x))
LIBM_LOOP(sqrt_f64, double, nb_sqrt_d(x))
LIBM_LOOP(rsqrt_f64, double, 1.0 / nb_sqrt_d(x))
LIBM_LOOP(sin_f64, double, sin(x))
LIBM_LOOP(cos_f64, double, cos(x))
LIBM_LOOP(tanh_f64, double, tanh(x))
LIBM_LOOP(sigmoid_f64, double, 1.0 / (1.0 + exp(-x)))
VEC_LOOP(relu_f64, double, x < 0.0 ? 0.0 : x)
VEC_LOOP(leaky_relu_f64, double, x > 0.0 ? x : x * s0)
LIBM_LOOP(gelu_f64, double, nb_gelu_f64(x))
LIBM_LOOP(gelu_tanh_f64, double, nb_gelu_tanh_f64(x))
LIBM_LOOP(silu_f64, double, x / (1.0 + exp(-x)))
LIBM_LOOP(softplus_f64, double, x * s0 > s1 ? x : log1p(exp(x * s0)) / s0)
VEC_LOOP(clamp_f64, double, (x < s0 ? s0 : x) > s1 ? s1 : (x < s0 ? s0 : x))

/* ---- integers: negation wraps (two's complement, through the unsigned type) --------------- */

#define INT_LOOPS(sfx, T, UT)                                                                    \
    VEC_LOOP_P(neg_##sfx, T, q0, q1, (T)((UT)0 - (UT)x))                                         \
    VEC_LOOP_P(abs_##sfx, T, q0, q1, x < 0 ? (T)((UT)0 - (UT)x) : x)                             \
    VEC_LOOP_P(sign_##sfx, T, q0, q1, (T)((0 < x) - (x < 0)))                                    \
    VEC_LOOP_P(relu_##sfx, T, q0, q1, x < 0 ? (T)0 : x)                                          \
    VEC_LOOP_P(clamp_##sfx, T, q0, q1, (x < s0 ? s0 : x) > s1 ? s1 : (x < s0 ? s0 : x))

INT_LOOPS(i64, int64_t, uint64_t)
INT_LOOPS(i32, int32_t, uint32_t)
VEC_LOOP_P(neg_u8, uint8_t, q0, q1, (uint8_t)(0u - x))
VEC_LOOP_P(abs_u8, uint8_t, q0, q1, x)
VEC_LOOP_P(sign_u8, uint8_t, q0, q1, (uint8_t)(x != 0))
VEC_LOOP_P(relu_u8, uint8_t, q0, q1, x)
VEC_LOOP_P(clamp_u8, uint8_t, q0, q1, (x < s0 ? s0 : x) > s1 ? s1 : (x < s0 ? s0 : x))
VEC_LOOP_P(sign_b8, bool, q0, q1, x)

/* LOGICAL_NOT: any input dtype, bool out. */
#define NOT_LOOP(sfx, T)                                                                         \
    static void not_##sfx(char **p, const int64_t *s, int64_t n, void *ctx)                      \
    {                                                                                            \
        (void)ctx;                                                                               \
        for (int64_t k = 0; k < n; k++)                                                          \
            *(bool *)(p[0] + k * s[0]) = !*(const T *)(p[1] + k * s[1]);                         \
    }
NOT_LOOP(f32, float)
NOT_LOOP(f64, double)
NOT_LOOP(i64, int64_t)
NOT_LOOP(i32, int32_t)
NOT_LOOP(u8, uint8_t)
NOT_LOOP(b8, bool)

/* ---- dispatch ------------------------------------------------------------------------------ */

/* The loops of one op, by dtype (NULL: the op does not take that dtype). */
typedef struct uloops {
    nb_cpu_loop_fn f32, f64, i64, i32, u8, b8;
} uloops;

static nb_cpu_loop_fn pick(const uloops *l, nb_dtype dt)
{
    switch (dt) {
    case NB_FLOAT32: return l->f32;
    case NB_FLOAT64: return l->f64;
    case NB_INT64: return l->i64;
    case NB_INT32: return l->i32;
    case NB_UINT8: return l->u8;
    case NB_BOOL: return l->b8;
    default: return NULL;
    }
}

#define FLOATS(name) {name##_f32, name##_f64, NULL, NULL, NULL, NULL}
#define NUMBERS(name) {name##_f32, name##_f64, name##_i64, name##_i32, name##_u8, NULL}

static const uloops *loops_for(nb_op op, int64_t i0)
{
    static const uloops neg = NUMBERS(neg), abs_ = NUMBERS(abs), relu = NUMBERS(relu),
                        clamp = NUMBERS(clamp), exp_ = FLOATS(exp), log_ = FLOATS(log),
                        log1p_ = FLOATS(log1p), sqrt_ = FLOATS(sqrt), rsqrt = FLOATS(rsqrt),
                        sin_ = FLOATS(sin), cos_ = FLOATS(cos), tanh_ = FLOATS(tanh),
                        sigmoid = FLOATS(sigmoid), leaky = FLOATS(leaky_relu), gelu = FLOATS(gelu),
                        gelu_tanh = FLOATS(gelu_tanh), silu = FLOATS(silu),
                        softplus = FLOATS(softplus),
                        sign = {sign_f32, sign_f64, sign_i64, sign_i32, sign_u8, sign_b8},
                        not_ = {not_f32, not_f64, not_i64, not_i32, not_u8, not_b8};
    switch (op) {
    case NB_OP_NEG: return &neg;
    case NB_OP_ABS: return &abs_;
    case NB_OP_SIGN: return &sign;
    case NB_OP_EXP: return &exp_;
    case NB_OP_LOG: return &log_;
    case NB_OP_LOG1P: return &log1p_;
    case NB_OP_SQRT: return &sqrt_;
    case NB_OP_RSQRT: return &rsqrt;
    case NB_OP_SIN: return &sin_;
    case NB_OP_COS: return &cos_;
    case NB_OP_TANH: return &tanh_;
    case NB_OP_SIGMOID: return &sigmoid;
    case NB_OP_RELU: return &relu;
    case NB_OP_LEAKY_RELU: return &leaky;
    case NB_OP_GELU: return i0 == NB_GELU_TANH ? &gelu_tanh : &gelu;
    case NB_OP_SILU: return &silu;
    case NB_OP_SOFTPLUS: return &softplus;
    case NB_OP_CLAMP: return &clamp;
    case NB_OP_LOGICAL_NOT: return &not_;
    default: return NULL;
    }
}

nb_status nb_cpu_k_unary(nb_op op, const nb_kargs *a)
{
    const uloops *l = loops_for(op, a->i0);
    if (!l) return nb__err(NB_ERR_INTERNAL, "%s: not a unary op", nb__op_name(op));
    nb_dtype dt = a->in[0]->dtype;
    if (op != NB_OP_LOGICAL_NOT && a->out->dtype != dt)
        return nb__err(NB_ERR_INTERNAL, "%s: output dtype %s differs from input dtype %s",
                       nb__op_name(op), nb_dtype_name(a->out->dtype), nb_dtype_name(dt));
    if (op == NB_OP_LOGICAL_NOT && a->out->dtype != NB_BOOL)
        return nb__err(NB_ERR_INTERNAL, "logical_not: output dtype %s is not bool",
                       nb_dtype_name(a->out->dtype));
    nb_cpu_loop_fn loop = pick(l, dt);
    if (!loop)
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported on the CPU", nb__op_name(op),
                       nb_dtype_name(dt));
    uparams prm = {a->s0, a->s1, 0, 0};
    if (op == NB_OP_CLAMP && !nb_dtype_is_floating(dt)) {
        prm.q0 = nb__int_bound(a->s0, dt);
        prm.q1 = nb__int_bound(a->s1, dt);
    }
    /* transcendental functions cost 1-5 ns an element: worth a thread at a quarter of the grain
     * of a plain copy */
    bool cheap = op == NB_OP_NEG || op == NB_OP_ABS || op == NB_OP_SIGN || op == NB_OP_RELU ||
                 op == NB_OP_LEAKY_RELU || op == NB_OP_CLAMP || op == NB_OP_LOGICAL_NOT;
    nb_cpu_iter it;
    nb_cpu_iter_elementwise(&it, a->out, &a->in[0], 1);
    nb_cpu_iter_run(&it, loop, &prm, cheap ? NB_CPU_GRAIN : NB_CPU_GRAIN / 4);
    return NB_OK;
}
