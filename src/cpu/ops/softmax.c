/* Kernels: softmax and log_softmax along dim i0, and their backward. float32 / float64.
 *   SOFTMAX               out = exp(x - max) / sum(exp(x - max))       along i0 of in[0]
 *   LOG_SOFTMAX           out = x - max - log(sum(exp(x - max)))
 *   SOFTMAX_BACKWARD      in = (g, y): out = y * (g - sum(g * y))
 *   LOG_SOFTMAX_BACKWARD  in = (g, y): out = g - exp(y) * sum(g)
 * All shapes equal out's (inputs may be expanded: stride 0). A "line" is the 1-D slice along i0
 * at one position of the other dims; lines are independent and split across threads.
 * Paths: the reference walks each line through strides and computes in double. Fast paths:
 * float32 rows (lines of unit stride on every operand: i0 the last dim of contiguous operands, or
 * the channels of channels-last ones) with AVX-512, three passes over a row that
 * stays in L1 (max; exp, store and sum in double; scale) with a float32 exp accurate to about
 * 1 ulp; and, for contiguous operands with i0 not the last dim, blocks of columns of [outer, D, inner] that run the
 * same passes down the columns while reading memory along rows. A NaN in a line makes the whole
 * line NaN, as in PyTorch. The backward takes an AVX-512 pass for contiguous float32 rows of
 * log_softmax (two passes: sum g; g - exp(y) sum), else the reference path. Without AVX-512
 * (nb_cpu_avx512) the float32 rows run the same passes as portable loops that the compiler
 * vectorises (target_clones, unary_math_impl.h's nb_vexpf_nonpos: its exp for the x <= 0 these
 * passes take, within 2 ulp down to float32's normal range, without the overflow side and the
 * subnormal rounding of nb_vexpf; 1.3-1.5x faster cross entropy over [4096, 10000] on Zen 3).
 * Cross entropy, whose forward and backward are this family's ops too, is cross_entropy.c's: it
 * shares the row passes through softmax_impl.h. */
#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "cpu/cpu_impl.h"
#include "cpu/ops/exp512_impl.h"
#include "cpu/ops/unary_math_impl.h"
#include "cpu/softmax_impl.h"

/* The lines of up to three operands (0 = out, 1.. = inputs): the other dims' shape and strides,
 * the length D along dim and each operand's stride along it (all in elements). */
typedef struct lines {
    int nd, nops;
    int64_t shape[NB_MAX_DIMS], st[3][NB_MAX_DIMS];
    int64_t D, sd[3], n;
} lines;

static void lines_init(lines *l, int64_t dim, nb_tensor *out, const nb_tensor *const *in, int n_in)
{
    memset(l, 0, sizeof *l);
    const nb_tensor *ops[3] = {out, n_in > 0 ? in[0] : NULL, n_in > 1 ? in[1] : NULL};
    l->nops = 1 + n_in;
    l->D = out->ndim ? out->shape[dim] : 1;
    l->n = 1;
    for (int d = 0; d < out->ndim; d++) {
        if (d == dim) {
            for (int k = 0; k < l->nops; k++) l->sd[k] = ops[k]->strides[d];
            continue;
        }
        l->shape[l->nd] = out->shape[d];
        for (int k = 0; k < l->nops; k++) l->st[k][l->nd] = ops[k]->strides[d];
        l->n *= out->shape[d];
        l->nd++;
    }
}

static int64_t line_off(const lines *l, int k, int64_t line)
{
    int64_t off = 0;
    for (int d = l->nd - 1; d >= 0; d--) {
        off += (line % l->shape[d]) * l->st[k][d];
        line /= l->shape[d];
    }
    return off;
}

/* ---- the reference: one line in double --------------------------------------------------- */

#define REF_FWD(NAME, T)                                                                         \
    static void NAME(const T *x, int64_t sx, T *y, int64_t sy, int64_t D, bool lg)               \
    {                                                                                            \
        double m = -INFINITY, s = 0;                                                             \
        for (int64_t i = 0; i < D; i++) {                                                        \
            double v = x[i * sx];                                                                \
            if (!isnan(m) && (isnan(v) || v > m)) m = v;                                         \
        }                                                                                        \
        for (int64_t i = 0; i < D; i++) {                                                        \
            double e = exp(x[i * sx] - m);                                                       \
            s += e;                                                                              \
            if (!lg) y[i * sy] = (T)e; /* stored once, scaled below */                           \
        }                                                                                        \
        double ls = log(s);                                                                      \
        for (int64_t i = 0; i < D; i++)                                                          \
            y[i * sy] = (T)(lg ? (x[i * sx] - m) - ls : y[i * sy] / s);                          \
    }
REF_FWD(ref_fwd_f32, float)
REF_FWD(ref_fwd_f64, double)

#define REF_BWD(NAME, T)                                                                         \
    static void NAME(const T *g, int64_t sg, const T *y, int64_t sy, T *o, int64_t so, int64_t D, \
                     bool lg)                                                                    \
    {                                                                                            \
        double s = 0;                                                                            \
        for (int64_t i = 0; i < D; i++) s += lg ? (double)g[i * sg] : (double)g[i * sg] * y[i * sy]; \
        for (int64_t i = 0; i < D; i++) {                                                        \
            double gi = g[i * sg], yi = y[i * sy];                                               \
            o[i * so] = (T)(lg ? gi - exp(yi) * s : yi * (gi - s));                              \
        }                                                                                        \
    }
REF_BWD(ref_bwd_f32, float)
REF_BWD(ref_bwd_f64, double)

/* ---- the fast path: contiguous float32 rows ---------------------------------------------- */

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static void row_f32_avx512(const float *x, float *y, int64_t D, bool lg)
{
    int64_t i;
    __mmask16 tail = (__mmask16)((1u << (D & 15)) - 1);
    float m = max_f32_avx512(x, D);
    __m512 vmax = _mm512_set1_ps(m);
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (i = 0; i + 16 <= D; i += 16) {
        __m512 e = exp_nonpos(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmax));
        if (!lg) _mm512_storeu_ps(y + i, e);
        s0 = _mm512_add_pd(s0, lo_pd(e));
        s1 = _mm512_add_pd(s1, hi_pd(e));
    }
    if (tail) {
        __m512 e = _mm512_maskz_mov_ps(tail, exp_nonpos(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + i), vmax)));
        if (!lg) _mm512_mask_storeu_ps(y + i, tail, e);
        s0 = _mm512_add_pd(s0, lo_pd(e));
        s1 = _mm512_add_pd(s1, hi_pd(e));
    }
    double s = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    if (lg) {
        __m512 ls = _mm512_set1_ps((float)log(s));
        for (i = 0; i + 16 <= D; i += 16)
            _mm512_storeu_ps(y + i, _mm512_sub_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmax), ls));
        if (tail)
            _mm512_mask_storeu_ps(y + i, tail,
                                  _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + i), vmax), ls));
        return;
    }
    __m512 inv = _mm512_set1_ps((float)(1.0 / s));
    for (i = 0; i + 16 <= D; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), inv));
    if (tail) _mm512_mask_storeu_ps(y + i, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, y + i), inv));
}

/* e[j] = exp(x[j] - m[j]) for a run of columns. */
__attribute__((target("avx512f"))) static void expsub_f32_avx512(float *e, const float *x, const float *m, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(e + i, exp_nonpos(_mm512_sub_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(m + i))));
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(e + i, k, exp_nonpos(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), _mm512_maskz_loadu_ps(k, m + i))));
    }
}

/* log_softmax backward of a float32 row: o = g - exp(y) * sum(g), the sum in double. */
__attribute__((target("avx512f"))) static void lsm_bwd_f32_avx512(const float *g, const float *y, float *o, int64_t D)
{
    int64_t i;
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (i = 0; i + 16 <= D; i += 16) {
        __m512 v = _mm512_loadu_ps(g + i);
        s0 = _mm512_add_pd(s0, lo_pd(v));
        s1 = _mm512_add_pd(s1, hi_pd(v));
    }
    __mmask16 k = (__mmask16)((1u << (D - i)) - 1);
    if (i < D) {
        __m512 v = _mm512_maskz_loadu_ps(k, g + i);
        s0 = _mm512_add_pd(s0, lo_pd(v));
        s1 = _mm512_add_pd(s1, hi_pd(v));
    }
    __m512 vs = _mm512_set1_ps((float)_mm512_reduce_add_pd(_mm512_add_pd(s0, s1)));
    for (i = 0; i + 16 <= D; i += 16)
        _mm512_storeu_ps(o + i, _mm512_fnmadd_ps(exp_nonpos(_mm512_loadu_ps(y + i)), vs, _mm512_loadu_ps(g + i)));
    if (i < D)
        _mm512_mask_storeu_ps(o + i, k, _mm512_fnmadd_ps(exp_nonpos(_mm512_maskz_loadu_ps(k, y + i)), vs,
                                                         _mm512_maskz_loadu_ps(k, g + i)));
}
#endif

/* ---- contiguous float32 rows without AVX-512 ------------------------------------------------ */

/* The same passes as the AVX-512 rows in loops the compiler vectorises, with AVX2 and AVX-512
 * clones picked at load time, and unary_math_impl.h's exp (2 ulp; 0 below -104, so that -inf
 * gives 0). A NaN is skipped by the max and then makes the sum, so the whole line, NaN. */
NB_VEC_CLONES static float row_max_f32(const float *x, int64_t D)
{
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t i = 0; i < D; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* sum(exp(x - m)) in double; e: where to store the exponentials, or NULL. The exponentials go
 * to memory (e, or a block in L1) and are summed by a second loop: GCC vectorises neither the exp
 * nor the float-to-double sum for AVX2 when they share one loop. */
#define EXPSUM_BLOCK 256
NB_VEC_CLONES static double row_expsum_f32(const float *x, float *e, int64_t D, float m)
{
    float buf[EXPSUM_BLOCK];
    double s = 0;
    for (int64_t i0 = 0; i0 < D; i0 += EXPSUM_BLOCK) {
        int64_t n = D - i0 < EXPSUM_BLOCK ? D - i0 : EXPSUM_BLOCK;
        float *o = e ? e + i0 : buf;
        const float *xi = x + i0;
#pragma omp simd
        for (int64_t i = 0; i < n; i++) o[i] = nb_vexpf_nonpos(xi[i] - m);
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < n; i++) s += o[i];
    }
    return s;
}

NB_VEC_CLONES static void row_f32_vec(const float *x, float *y, int64_t D, bool lg)
{
    float m = row_max_f32(x, D);
    double s = row_expsum_f32(x, lg ? NULL : y, D, m);
    if (lg) {
        float ls = (float)log(s);
#pragma omp simd
        for (int64_t i = 0; i < D; i++) y[i] = (x[i] - m) - ls;
        return;
    }
    float inv = (float)(1.0 / s);
#pragma omp simd
    for (int64_t i = 0; i < D; i++) y[i] = y[i] * inv;
}

/* max + log(sum(exp(x - max))) of a float32 row by the portable passes (softmax_impl.h). */
double nb__lse_f32_vec(const float *x, int64_t D)
{
    float m = row_max_f32(x, D);
    return (double)m + log(row_expsum_f32(x, NULL, D, m));
}

/* log_softmax backward of a float32 row: o = g - exp(y) * sum(g), the sum in double. */
NB_VEC_CLONES static void lsm_bwd_f32_vec(const float *g, const float *y, float *o, int64_t D)
{
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < D; i++) s += g[i];
    float vs = (float)s;
#pragma omp simd
    for (int64_t i = 0; i < D; i++) o[i] = g[i] - nb_vexpf_nonpos(y[i]) * vs;
}

/* ---- the fast path: contiguous [outer, D, inner], dim not last ------------------------------ */

#define COL_CW 256 /* columns handled together: their running max and sum stay in registers / L1 */

NB_VEC_CLONES static void expsub_f32_vec(float *e, const float *x, const float *m, int64_t n)
{
#pragma omp simd
    for (int64_t j = 0; j < n; j++) e[j] = nb_vexpf_nonpos(x[j] - m[j]);
}

static void expsub_f32(float *e, const float *x, const float *m, int64_t n)
{
#if defined(__x86_64__)
    if (nb_cpu_avx512()) {
        expsub_f32_avx512(e, x, m, n);
        return;
    }
#endif
    expsub_f32_vec(e, x, m, n);
}

static void expsub_f64(double *e, const double *x, const double *m, int64_t n)
{
    for (int64_t j = 0; j < n; j++) e[j] = exp(x[j] - m[j]);
}

/* Softmax down columns [0, cw) of x (rows D apart by `inner` elements) into y: the same three
 * passes as a row, over a block of columns at once so that memory is read along rows; softmax's
 * exponentials go straight to y. Compiled for each vector width (the max, sum and scale passes
 * were SSE2 code), the max without NaN's rules (a NaN makes its column's sum NaN, and so the
 * whole column), and the finish (log or reciprocal) rounded to T once per column: softmax over
 * the channels of an NCHW [128, 32, 28, 28] at 1 thread on Zen 3 12.2 -> 7.2 ms (PyTorch 11.5),
 * log_softmax 12.0 -> 8.2-8.7 (PyTorch 6.9-7.3). */
#define COLS_FN(NAME, T, EXPSUB)                                                                 \
    NB_VEC_CLONES static void NAME(const T *x, T *y, int64_t D, int64_t inner, int64_t cw, bool lg) \
    {                                                                                            \
        T m[COL_CW], e[COL_CW], f[COL_CW];                                                       \
        double s[COL_CW];                                                                        \
        for (int64_t j = 0; j < cw; j++) m[j] = (T)-INFINITY, s[j] = 0;                          \
        for (int64_t d = 0; d < D; d++) /* a NaN is skipped here and makes its sum NaN below */  \
            for (int64_t j = 0; j < cw; j++) {                                                   \
                T v = x[d * inner + j];                                                          \
                m[j] = v > m[j] ? v : m[j];                                                      \
            }                                                                                    \
        for (int64_t d = 0; d < D; d++) {                                                        \
            T *t = lg ? e : y + d * inner;                                                       \
            EXPSUB(t, x + d * inner, m, cw);                                                     \
            for (int64_t j = 0; j < cw; j++) s[j] += t[j];                                       \
        }                                                                                        \
        for (int64_t j = 0; j < cw; j++) f[j] = (T)(lg ? log(s[j]) : 1.0 / s[j]);                \
        if (lg)                                                                                  \
            for (int64_t d = 0; d < D; d++)                                                      \
                for (int64_t j = 0; j < cw; j++) y[d * inner + j] = (x[d * inner + j] - m[j]) - f[j]; \
        else                                                                                     \
            for (int64_t d = 0; d < D; d++)                                                      \
                for (int64_t j = 0; j < cw; j++) y[d * inner + j] *= f[j];                       \
    }
COLS_FN(cols_f32, float, expsub_f32)
COLS_FN(cols_f64, double, expsub_f64)

static void columns(const nb_tensor *in, nb_tensor *out, int64_t D, int64_t inner, bool lg, int nt)
{
    int64_t outer = nb_tensor_numel(out) / (D * inner), nch = (inner + COL_CW - 1) / COL_CW;
    bool f32 = out->dtype == NB_FLOAT32;
    const char *ib = nb__data(in);
    char *ob = nb__data(out);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t it = 0; it < outer * nch; it++) {
        int64_t o = it / nch, j0 = (it % nch) * COL_CW, cw = inner - j0 < COL_CW ? inner - j0 : COL_CW;
        int64_t off = o * D * inner + j0;
        if (f32) cols_f32((const float *)ib + off, (float *)ob + off, D, inner, cw, lg);
        else cols_f64((const double *)ib + off, (double *)ob + off, D, inner, cw, lg);
    }
}

/* ---- entry ----------------------------------------------------------------------------------- */

static nb_status forward(nb_op op, const nb_kargs *a)
{
    nb_tensor *out = a->out;
    const nb_tensor *in = a->in[0];
    bool lg = op == NB_OP_LOG_SOFTMAX;
    lines l;
    lines_init(&l, a->i0, out, &a->in[0], 1);
    if (l.n == 0 || l.D == 0) return NB_OK;
    int64_t inner = 1;
    for (int d = (int)a->i0 + 1; d < out->ndim; d++) inner *= out->shape[d];
    bool contig = nb__is_contiguous(in) && nb__is_contiguous(out);
    /* rows: every line runs with unit stride on both sides (the last dim of contiguous operands,
     * or the channels of channels-last ones), wherever the lines start */
    bool rows = l.sd[0] == 1 && l.sd[1] == 1;
    int nt = nb_cpu_threads_for(l.n * l.D, 0);
    if (contig && inner > 1) {
        columns(in, out, l.D, inner, lg, nt);
        return NB_OK;
    }
    char *ob = nb__data(out);
    const char *ib = nb__data(in);
    if (out->dtype == NB_FLOAT32 && rows) {
        bool v512 = nb_cpu_avx512();
        (void)v512; /* read on x86-64 only */
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t r = 0; r < l.n; r++) {
            const float *x = (const float *)ib + line_off(&l, 1, r);
            float *y = (float *)ob + line_off(&l, 0, r);
#if defined(__x86_64__)
            if (v512) {
                row_f32_avx512(x, y, l.D, lg);
                continue;
            }
#endif
            row_f32_vec(x, y, l.D, lg);
        }
        return NB_OK;
    }
    bool f32 = out->dtype == NB_FLOAT32;
    int64_t es = f32 ? 4 : 8;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < l.n; r++) {
        const char *x = ib + line_off(&l, 1, r) * es;
        char *y = ob + line_off(&l, 0, r) * es;
        if (f32) ref_fwd_f32((const float *)x, l.sd[1], (float *)y, l.sd[0], l.D, lg);
        else ref_fwd_f64((const double *)x, l.sd[1], (double *)y, l.sd[0], l.D, lg);
    }
    return NB_OK;
}

static nb_status backward(nb_op op, const nb_kargs *a)
{
    nb_tensor *out = a->out;
    bool lg = op == NB_OP_LOG_SOFTMAX_BACKWARD;
    lines l;
    lines_init(&l, a->i0, out, &a->in[0], 2);
    if (l.n == 0 || l.D == 0) return NB_OK;
    int nt = nb_cpu_threads_for(l.n * l.D, 0);
    char *ob = nb__data(out);
    const char *gb = nb__data(a->in[0]), *yb = nb__data(a->in[1]);
    bool f32 = out->dtype == NB_FLOAT32;
    bool rows = l.sd[0] == 1 && l.sd[1] == 1 && l.sd[2] == 1; /* unit-stride lines, as forward's */
    if (f32 && lg && rows) {
        bool v512 = nb_cpu_avx512();
        (void)v512; /* read on x86-64 only */
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t r = 0; r < l.n; r++) {
            const float *g = (const float *)gb + line_off(&l, 1, r), *y = (const float *)yb + line_off(&l, 2, r);
            float *o = (float *)ob + line_off(&l, 0, r);
#if defined(__x86_64__)
            if (v512) {
                lsm_bwd_f32_avx512(g, y, o, l.D);
                continue;
            }
#endif
            lsm_bwd_f32_vec(g, y, o, l.D);
        }
        return NB_OK;
    }
    int64_t es = f32 ? 4 : 8;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < l.n; r++) {
        const char *g = gb + line_off(&l, 1, r) * es, *y = yb + line_off(&l, 2, r) * es;
        char *o = ob + line_off(&l, 0, r) * es;
        if (f32)
            ref_bwd_f32((const float *)g, l.sd[1], (const float *)y, l.sd[2], (float *)o, l.sd[0], l.D, lg);
        else
            ref_bwd_f64((const double *)g, l.sd[1], (const double *)y, l.sd[2], (double *)o, l.sd[0], l.D, lg);
    }
    return NB_OK;
}

nb_status nb_cpu_k_softmax(nb_op op, const nb_kargs *a)
{
    if (op == NB_OP_CROSS_ENTROPY || op == NB_OP_CROSS_ENTROPY_BACKWARD) return nb__cpu_cross_entropy(op, a);
    if (a->out->dtype != NB_FLOAT32 && a->out->dtype != NB_FLOAT64)
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported (float32/float64 only)", nb__op_name(op),
                       nb_dtype_name(a->out->dtype));
    for (int k = 0; k < 2 && a->in[k]; k++)
        if (a->in[k]->dtype != a->out->dtype)
            return nb__err(NB_ERR_DTYPE, "%s: input dtype %s differs from the output's %s", nb__op_name(op),
                           nb_dtype_name(a->in[k]->dtype), nb_dtype_name(a->out->dtype));
    switch (op) {
    case NB_OP_SOFTMAX:
    case NB_OP_LOG_SOFTMAX: return forward(op, a);
    case NB_OP_SOFTMAX_BACKWARD:
    case NB_OP_LOG_SOFTMAX_BACKWARD: return backward(op, a);
    default: return nb__err(NB_ERR_INTERNAL, "softmax kernel: unexpected op %s", nb__op_name(op));
    }
}
