/* Kernels: elementwise binary ops (ops.def's `binary` family).
 *   out[i] = op(x[i], y[i])   x = in[0], y = in[1], both broadcast to out's shape
 *   out[i] = op(x[i], s0)     when in[1] == NULL (the scalar form; s0 is converted to x's dtype)
 * in[0] and in[1] share one dtype, the compute dtype (the entry points convert mixed inputs);
 * out has that dtype for ADD..MINIMUM and is bool for the comparisons EQ..GE. out may be in[0]
 * itself (in-place ops), element for element.
 *
 * Results C leaves undefined are defined here:
 *  - integer ADD, SUB, MUL and POW wrap around (two's complement), as PyTorch's do;
 *  - integer DIV (never reached through nb_div, which divides in floating point) truncates
 *    toward zero, gives 0 for x / 0 and wraps INT_MIN / -1 to INT_MIN;
 *  - integer POW with a negative exponent gives 1 for base 1, +-1 for base -1 and 0 otherwise
 *    (PyTorch's rule for integer tensor exponents).
 * bool: ADD is or, MUL is and, MAXIMUM is or, MINIMUM is and; SUB, DIV and POW are dtype errors,
 * as in PyTorch. MAXIMUM and MINIMUM propagate NaN.
 *
 * The fused activation-backward ops of the family (THRESHOLD_BACKWARD..SOFTPLUS_BACKWARD) live in
 * activation_backward.c.
 *
 * Each loop has a contiguous fast path, fast paths for one operand broadcast along the run
 * (a scalar, a row or a column), and the plain strided path that is the reference for them.
 * Float add/sub/mul/div on operands too large for the last-level cache write with streaming
 * (non-temporal) stores: the output does not pass through the caches, which saves reading it
 * first and nearly doubles one thread's throughput on large tensors. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>

#include "cpu/cpu_impl.h"

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#define NB_STREAM 1
#endif


#if defined(__x86_64__) && !defined(__clang__)
#define NB_HOT __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define NB_HOT
#endif

typedef float f32;
typedef double f64;
typedef int64_t i64;
typedef int32_t i32;
typedef uint8_t u8;
typedef bool b8;

/* Integer helpers with the defined results above. */
#define IDIV(NAME, T, UT)                                                                  \
    static inline T NAME(T a, T b)                                                               \
    {                                                                                            \
        if (b == 0) return 0;                                                                    \
        if (b == -1) return (T)(0 - (UT)a);                                                      \
        return (T)(a / b);                                                                       \
    }
IDIV(idiv_i64, i64, uint64_t)
IDIV(idiv_i32, i32, uint32_t)
static inline u8 idiv_u8(u8 a, u8 b) { return b ? (u8)(a / b) : 0; }

#define IPOW(NAME, T, UT)                                                                        \
    static inline T NAME(T a, T b)                                                               \
    {                                                                                            \
        if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;                         \
        UT r = 1, x = (UT)a;                                                                     \
        for (; b; b >>= 1, x *= x)                                                               \
            if (b & 1) r *= x;                                                                   \
        return (T)r;                                                                             \
    }
IPOW(ipow_i64, i64, uint64_t)
IPOW(ipow_i32, i32, uint32_t)
static inline u8 ipow_u8(u8 a, u8 b)
{
    unsigned r = 1, x = a;
    for (; b; b >>= 1, x = (x * x) & 0xffu)
        if (b & 1) r = (r * x) & 0xffu;
    return (u8)r;
}

/* One loop per (op, dtype), in two forms: NAME over one run (nb_cpu_loop_fn) and NAME##_2d over
 * a stretch of runs (nb_cpu_loop2d_fn), both the inlined body NAME##_run (BIN_LOOP_1D: the first
 * alone, for the scalar exponents' loops). EXPR computes the
 * result from `a` and `b` of type TI; the result is stored as TO. */
#define BIN_LOOP_1D(NAME, TO, TI, EXPR)                                                          \
    static inline __attribute__((always_inline)) void NAME##_run(char **p, const int64_t *s, int64_t n) \
    {                                                                                            \
        const int64_t so = sizeof(TO), si = sizeof(TI);                                          \
        TO *o = (TO *)p[0];                                                                      \
        const TI *x = (const TI *)p[1], *y = (const TI *)p[2];                                   \
        if (s[0] == so && s[1] == si && s[2] == si) {                                            \
            _Pragma("omp simd") for (int64_t k = 0; k < n; k++)                                  \
            {                                                                                    \
                TI a = x[k], b = y[k];                                                           \
                (void)b;                                                                         \
                o[k] = (TO)(EXPR);                                                               \
            }                                                                                    \
        } else if (s[0] == so && s[1] == si && s[2] == 0) {                                      \
            const TI b = *y;                                                                     \
            (void)b;                                                                             \
            _Pragma("omp simd") for (int64_t k = 0; k < n; k++)                                  \
            {                                                                                    \
                TI a = x[k];                                                                     \
                o[k] = (TO)(EXPR);                                                               \
            }                                                                                    \
        } else if (s[0] == so && s[1] == 0 && s[2] == si) {                                      \
            const TI a = *x;                                                                     \
            _Pragma("omp simd") for (int64_t k = 0; k < n; k++)                                  \
            {                                                                                    \
                TI b = y[k];                                                                     \
                (void)b;                                                                         \
                o[k] = (TO)(EXPR);                                                               \
            }                                                                                    \
        } else {                                                                                 \
            for (int64_t k = 0; k < n; k++) {                                                    \
                TI a = *(const TI *)(p[1] + k * s[1]), b = *(const TI *)(p[2] + k * s[2]);       \
                (void)b;                                                                         \
                *(TO *)(p[0] + k * s[0]) = (TO)(EXPR);                                           \
            }                                                                                    \
        }                                                                                        \
    }                                                                                            \
    NB_HOT static void NAME(char **p, const int64_t *s, int64_t n, void *ctx)                    \
    {                                                                                            \
        (void)ctx;                                                                               \
        NAME##_run(p, s, n);                                                                     \
    }
#define BIN_LOOP(NAME, TO, TI, EXPR)                                                             \
    BIN_LOOP_1D(NAME, TO, TI, EXPR)                                                              \
    NB_HOT static void NAME##_2d(char **p, const int64_t *s, int64_t n, const int64_t *os, int64_t rows, void *ctx) \
    {                                                                                            \
        (void)ctx;                                                                               \
        char *q[3] = {p[0], p[1], p[2]};                                                         \
        for (int64_t r = 0; r < rows; r++, q[0] += os[0], q[1] += os[1], q[2] += os[2]) NAME##_run(q, s, n); \
    }

#define CMP_LOOPS(SUF, T)                                                                        \
    BIN_LOOP(eq_##SUF, b8, T, a == b)                                                            \
    BIN_LOOP(ne_##SUF, b8, T, a != b)                                                            \
    BIN_LOOP(lt_##SUF, b8, T, a < b)                                                             \
    BIN_LOOP(le_##SUF, b8, T, a <= b)                                                            \
    BIN_LOOP(gt_##SUF, b8, T, a > b)                                                             \
    BIN_LOOP(ge_##SUF, b8, T, a >= b)

CMP_LOOPS(f32, f32)
CMP_LOOPS(f64, f64)
CMP_LOOPS(i64, i64)
CMP_LOOPS(i32, i32)
CMP_LOOPS(u8, u8)
CMP_LOOPS(b8, b8)

/* Arithmetic through the unsigned type UT wraps instead of overflowing (UT is the type itself
 * for floats; uint8 arithmetic happens in int and is truncated back). */
#define ARITH_LOOPS(SUF, T, UT)                                                                  \
    BIN_LOOP(add_##SUF, T, T, (UT)a + (UT)b)                                                     \
    BIN_LOOP(sub_##SUF, T, T, (UT)a - (UT)b)                                                     \
    BIN_LOOP(mul_##SUF, T, T, (UT)a * (UT)b)
ARITH_LOOPS(f32, f32, f32)
ARITH_LOOPS(f64, f64, f64)
ARITH_LOOPS(i64, i64, uint64_t)
ARITH_LOOPS(i32, i32, uint32_t)
ARITH_LOOPS(u8, u8, u8)
BIN_LOOP(add_b8, b8, b8, a | b)
BIN_LOOP(mul_b8, b8, b8, a & b)

BIN_LOOP(div_f32, f32, f32, a / b)
BIN_LOOP(div_f64, f64, f64, a / b)
BIN_LOOP(div_i64, i64, i64, idiv_i64(a, b))
BIN_LOOP(div_i32, i32, i32, idiv_i32(a, b))
BIN_LOOP(div_u8, u8, u8, idiv_u8(a, b))

BIN_LOOP(pow_f32, f32, f32, powf(a, b))
BIN_LOOP(pow_f64, f64, f64, pow(a, b))
BIN_LOOP(pow_i64, i64, i64, ipow_i64(a, b))
BIN_LOOP(pow_i32, i32, i32, ipow_i32(a, b))
BIN_LOOP(pow_u8, u8, u8, ipow_u8(a, b))
/* pow with a scalar exponent of 2 or 0.5, as PyTorch special-cases them */
BIN_LOOP_1D(sq_f32, f32, f32, a * a)
BIN_LOOP_1D(sq_f64, f64, f64, a * a)
BIN_LOOP_1D(sqrt_f32, f32, f32, sqrtf(a))
BIN_LOOP_1D(sqrt_f64, f64, f64, sqrt(a))

#define MINMAX_LOOPS_F(SUF, T)                                                                   \
    BIN_LOOP(max_##SUF, T, T, (isnan(a) || a > b) ? a : b)                                        \
    BIN_LOOP(min_##SUF, T, T, (isnan(a) || a < b) ? a : b)
#define MINMAX_LOOPS_I(SUF, T)                                                                   \
    BIN_LOOP(max_##SUF, T, T, a > b ? a : b)                                                     \
    BIN_LOOP(min_##SUF, T, T, a < b ? a : b)
MINMAX_LOOPS_F(f32, f32)
MINMAX_LOOPS_F(f64, f64)
MINMAX_LOOPS_I(i64, i64)
MINMAX_LOOPS_I(i32, i32)
MINMAX_LOOPS_I(u8, u8)
MINMAX_LOOPS_I(b8, b8)

#define ROW(p) {p##_f32, p##_f64, p##_i64, p##_i32, p##_u8, p##_b8}
#define ROW_NO_BOOL(p) {p##_f32, p##_f64, p##_i64, p##_i32, p##_u8, NULL}
#define ROW2(p) {p##_f32_2d, p##_f64_2d, p##_i64_2d, p##_i32_2d, p##_u8_2d, p##_b8_2d}
#define ROW2_NO_BOOL(p) {p##_f32_2d, p##_f64_2d, p##_i64_2d, p##_i32_2d, p##_u8_2d, NULL}
/* The ops in order from NB_OP_ADD, with the row macros for those defined on bool and not. */
#define OP_TABLE(R, RNB)                                                                         \
    {R(add), RNB(sub), R(mul), RNB(div), RNB(pow), R(max), R(min), R(eq), R(ne), R(lt), R(le), R(gt), R(ge)}
/* Indexed by op - NB_OP_ADD and by dtype (NB_FLOAT32..NB_BOOL); NULL: not defined for it. */
static const nb_cpu_loop_fn LOOPS[NB_OP_GE - NB_OP_ADD + 1][NB_BOOL + 1] = OP_TABLE(ROW, ROW_NO_BOOL);
static const nb_cpu_loop2d_fn LOOPS2D[NB_OP_GE - NB_OP_ADD + 1][NB_BOOL + 1] = OP_TABLE(ROW2, ROW2_NO_BOOL);
#undef OP_TABLE
#undef ROW
#undef ROW_NO_BOOL
#undef ROW2
#undef ROW2_NO_BOOL

/* ---- streaming stores ----------------------------------------------------------------------- */

#ifdef NB_STREAM
/* The regular loop, for runs that are not contiguous (a broadcast row's outer dims, say). */
typedef struct stream_ctx {
    nb_cpu_loop_fn plain;
} stream_ctx;

/* out = x op y with out and x contiguous and y contiguous or a scalar (stride 0); 16-byte vectors
 * (SSE2, every x86-64) are enough to saturate memory. Unaligned heads and tails are scalar. Any
 * other run, and a run shorter than NB_CPU_STREAM_MIN_RUN, takes the plain loop. */
#define STREAM_LOOP(NAME, T, VT, W, LOADU, SET1, STREAM, VOP, SOP)                              \
    static void NAME(char **p, const int64_t *s, int64_t n, void *ctx)                           \
    {                                                                                            \
        const int64_t es = sizeof(T);                                                            \
        if (s[0] != es || s[1] != es || (s[2] != es && s[2] != 0) || n * es < NB_CPU_STREAM_MIN_RUN) { \
            ((const stream_ctx *)ctx)->plain(p, s, n, NULL);                                     \
            return;                                                                              \
        }                                                                                        \
        T *o = (T *)p[0];                                                                        \
        const T *x = (const T *)p[1], *y = (const T *)p[2];                                      \
        const int64_t ys = s[2] ? 1 : 0;                                                         \
        int64_t k = 0;                                                                           \
        for (; k < n && ((uintptr_t)(o + k) & 15); k++) o[k] = x[k] SOP y[k * ys];               \
        if (ys) {                                                                                \
            for (; k + 2 * W <= n; k += 2 * W) {                                                 \
                STREAM(o + k, VOP(LOADU(x + k), LOADU(y + k)));                                  \
                STREAM(o + k + W, VOP(LOADU(x + k + W), LOADU(y + k + W)));                      \
            }                                                                                    \
        } else {                                                                                 \
            const VT b = SET1(*y);                                                               \
            for (; k + 2 * W <= n; k += 2 * W) {                                                 \
                STREAM(o + k, VOP(LOADU(x + k), b));                                             \
                STREAM(o + k + W, VOP(LOADU(x + k + W), b));                                     \
            }                                                                                    \
        }                                                                                        \
        for (; k < n; k++) o[k] = x[k] SOP y[k * ys];                                            \
        _mm_sfence();                                                                            \
    }

#define STREAM_F32(NAME, VOP, SOP) STREAM_LOOP(NAME, f32, __m128, 4, _mm_loadu_ps, _mm_set1_ps, _mm_stream_ps, VOP, SOP)
#define STREAM_F64(NAME, VOP, SOP) STREAM_LOOP(NAME, f64, __m128d, 2, _mm_loadu_pd, _mm_set1_pd, _mm_stream_pd, VOP, SOP)
STREAM_F32(add_nt_f32, _mm_add_ps, +)
STREAM_F32(sub_nt_f32, _mm_sub_ps, -)
STREAM_F32(mul_nt_f32, _mm_mul_ps, *)
STREAM_F32(div_nt_f32, _mm_div_ps, /)
STREAM_F64(add_nt_f64, _mm_add_pd, +)
STREAM_F64(sub_nt_f64, _mm_sub_pd, -)
STREAM_F64(mul_nt_f64, _mm_mul_pd, *)
STREAM_F64(div_nt_f64, _mm_div_pd, /)

static const nb_cpu_loop_fn STREAM_LOOPS[4][2] = {
    {add_nt_f32, add_nt_f64}, {sub_nt_f32, sub_nt_f64}, {mul_nt_f32, mul_nt_f64}, {div_nt_f32, div_nt_f64}};

/* The streaming loop for op on dt when the op moves enough bytes, else NULL. */
static nb_cpu_loop_fn stream_loop(nb_op op, nb_dtype dt, const nb_kargs *a)
{
    if (op < NB_OP_ADD || op > NB_OP_DIV || (dt != NB_FLOAT32 && dt != NB_FLOAT64)) return NULL;
    int64_t bytes = nb_tensor_numel(a->out) * (int64_t)nb_dtype_size(dt) * (a->in[1] ? 3 : 2);
    if (bytes < nb_cpu_stream_threshold()) return NULL;
    return STREAM_LOOPS[op - NB_OP_ADD][dt == NB_FLOAT64];
}
#endif

/* s0 in the compute dtype: integers saturate (NaN gives 0) instead of C's undefined cast. */
typedef union scalar_value {
    f32 f;
    f64 d;
    i64 l;
    i32 i;
    u8 u;
    b8 b;
} scalar_value;

/* v rounded toward zero and clamped to [lo, hi] (NaN gives 0), without C's undefined cast. */
static int64_t clamp_to_int(double v, int64_t lo, int64_t hi)
{
    if (isnan(v)) return 0;
    if (v <= (double)lo) return lo;
    if (v >= (double)hi) return hi; /* (double)INT64_MAX rounds up to 2^63: below it, the cast fits */
    return (int64_t)v;
}

static scalar_value to_scalar(double v, nb_dtype dt)
{
    scalar_value sv = {0};
    switch (dt) {
    case NB_FLOAT32: sv.f = (f32)v; break;
    case NB_FLOAT64: sv.d = v; break;
    case NB_INT64: sv.l = clamp_to_int(v, INT64_MIN, INT64_MAX); break;
    case NB_INT32: sv.i = (i32)clamp_to_int(v, INT32_MIN, INT32_MAX); break;
    case NB_UINT8: sv.u = (u8)clamp_to_int(v, 0, 255); break;
    case NB_BOOL: sv.b = v != 0; break;
    default: break;
    }
    return sv;
}

/* The loop for pow with a scalar exponent: x*x and sqrt for 2 and 0.5 on floats. */
static nb_cpu_loop_fn pow_scalar_loop(nb_dtype dt, double e)
{
    if (dt == NB_FLOAT32 && e == 2.0) return sq_f32;
    if (dt == NB_FLOAT64 && e == 2.0) return sq_f64;
    if (dt == NB_FLOAT32 && e == 0.5) return sqrt_f32;
    if (dt == NB_FLOAT64 && e == 0.5) return sqrt_f64;
    return LOOPS[NB_OP_POW - NB_OP_ADD][dt];
}

nb_status nb_cpu_k_binary(nb_op op, const nb_kargs *a)
{
    if (op >= NB_OP_THRESHOLD_BACKWARD && op <= NB_OP_SOFTPLUS_BACKWARD) {
        return nb_cpu_activation_backward(op, a);
    }
    if (op < NB_OP_ADD || op > NB_OP_GE)
        return nb__err(NB_ERR_INTERNAL, "binary kernel: %s is not a binary op", nb__op_name(op));
    const nb_tensor *x = a->in[0], *y = a->in[1];
    nb_dtype dt = x->dtype, want = op >= NB_OP_EQ ? NB_BOOL : dt;
    if ((y && y->dtype != dt) || a->out->dtype != want)
        return nb__err(NB_ERR_INTERNAL, "%s: kernel called with dtypes %s, %s -> %s", nb__op_name(op),
                       nb_dtype_name(dt), y ? nb_dtype_name(y->dtype) : "scalar", nb_dtype_name(a->out->dtype));
    if ((unsigned)dt > NB_BOOL)
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported on the CPU", nb__op_name(op), nb_dtype_name(dt));
    nb_cpu_loop_fn loop = LOOPS[op - NB_OP_ADD][dt];
    if (!loop) return nb__err(NB_ERR_DTYPE, "%s: not implemented for %s", nb__op_name(op), nb_dtype_name(dt));
    nb_cpu_iter it;
    scalar_value sv;
    if (y) {
        nb_cpu_iter_elementwise(&it, a->out, a->in, 2);
    } else {
        /* the scalar is a third operand of stride 0 everywhere */
        sv = to_scalar(a->s0, dt);
        nb_cpu_iter_elementwise(&it, a->out, a->in, 1);
        it.nops = 3;
        it.base[2] = (char *)&sv;
        if (op == NB_OP_POW) loop = pow_scalar_loop(dt, a->s0);
    }
    /* two operands and short runs (which the streaming loops leave to the plain ones): one call
     * per stretch of runs. A channels-last [32, 32, 28, 28] float32 plus a [1, C, 1, 1] bias, runs
     * of 32, at 1 thread on Zen 3: 0.23-0.40 -> 0.10-0.16 ms (PyTorch 0.13-0.14) */
    int64_t run_bytes = it.shape[it.ndim - 1] * (int64_t)nb_dtype_size(dt);
    if (y && it.ndim >= 2 && run_bytes < NB_CPU_STREAM_MIN_RUN) {
        nb_cpu_iter_run2d(&it, LOOPS2D[op - NB_OP_ADD][dt], NULL, op == NB_OP_POW ? NB_CPU_GRAIN / 16 : 0);
        return NB_OK;
    }
    void *ctx = NULL;
#ifdef NB_STREAM
    stream_ctx sc = {loop};
    nb_cpu_loop_fn nt = stream_loop(op, dt, a);
    if (nt) {
        loop = nt;
        ctx = &sc;
    }
#endif
    /* pow costs tens of cycles an element: worth threads sooner */
    nb_cpu_iter_run(&it, loop, ctx, op == NB_OP_POW ? NB_CPU_GRAIN / 16 : 0);
    return NB_OK;
}
