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
 *   CROSS_ENTROPY           x [N, C], targets t [N] (int64, in range): out[n] = lse(x[n]) - x[n, t],
 *                           out2[n] = lse(x[n]) (= max + log(sum(exp(x - max))), the sum in double);
 *                           with out3 q [N + i1, C] also the probabilities times s0 > 0,
 *                           q[n, c] = exp(x[n, c] - lse[n]) s0, and with i1 = 1 q's row N = the sums
 *                           of its N rows' columns, all in the same pass
 *   CROSS_ENTROPY_BACKWARD  in = (x, r [2, N] = (lse, upstream grad g), t):
 *                           out[n, c] = (exp(x[n, c] - lse[n]) - (c == t[n])) g[n], one pass per row;
 *                           with out2 [C] also out2[c] = sum over n of out[n, c], in the same pass
 *                           (float32 with AVX-512 and C a multiple of 16: four rows at a time, their
 *                           sum added once; 24 against 25 ms without the sums, and the engine's 11 ms
 *                           sum gone, on the LSTM's [4096, 10000] at 1 thread on the Xeon). With
 *                           flag, x is the forward's q (scale s0, N + i1 rows): out = q g / s0 -
 *                           onehot(t) g; when out is q's own first N rows (in place), every g must
 *                           be s0, only the targets' entries change, and out2 is q's row N (i1 = 1)
 *                           less s0 times each class's count: no pass over the rows at all
 * (all contiguous; float32 rows with AVX-512 or the portable loops, float64 in double). Without
 * AVX-512 but with AVX2 and FMA, cross entropy's forward over float32 rows takes softmax_avx2.c's
 * rows instead: one exp per logit, its exponentials waiting in a scratch row per thread for their
 * sum and then scaled into q (so q differs from the backward's exp(x - lse) g by rounding). */
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
/* exp of x <= 0 (x - max in a softmax; exp512_impl.h) clamped at -110, below which the result rounds to exactly 0, so that -inf
 * gives 0. NaN passes through (max/min return their second operand when it is NaN). */
__attribute__((target("avx512f"))) static inline __m512 exp_nonpos(__m512 x)
{
    return nb_exp512(_mm512_max_ps(_mm512_set1_ps(-110.0f), x));
}

__attribute__((target("avx512f"))) static inline __m512d lo_pd(__m512 v)
{
    return _mm512_cvtps_pd(_mm512_castps512_ps256(v));
}

__attribute__((target("avx512f"))) static inline __m512d hi_pd(__m512 v)
{
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

__attribute__((target("avx512f"))) static void row_f32_avx512(const float *x, float *y, int64_t D, bool lg)
{
    int64_t i;
    __mmask16 tail = (__mmask16)((1u << (D & 15)) - 1);
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 vm = ninf;
    for (i = 0; i + 16 <= D; i += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(x + i));
    if (tail) vm = _mm512_max_ps(vm, _mm512_mask_loadu_ps(ninf, tail, x + i));
    float m = _mm512_reduce_max_ps(vm);
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

#endif

#if defined(__x86_64__)
#define LSE_BLOCK 16

/* log(sum(exp(x - max))) + max of a float32 row, the sum in double over blocks of LSE_BLOCK
 * vectors summed in float (each lane's block adds 16 values of at most 1, so its rounding stays
 * near float's own; the conversions to double were a fifth of the loop's instructions: 15.9 ->
 * 14.4 ms an iteration at 1 thread on the LSTM's logits, session 27). next: the row to be read
 * after this one (or x), fetched into L2 a line per vector during the exponentials: the max
 * pass over a row streams it from memory while the exp pass is bound by arithmetic, so
 * overlapping the two saved a third of cross entropy's forward on the LSTM's [4096, 10000]
 * logits (19 -> 14 ms at 1 thread on the Xeon). Into L2, not L1: two such rows, 80 KB, do not fit
 * its 48 KB L1 together (18 -> 16 ms at 1 thread, session 27). */
__attribute__((target("avx512f"))) static double lse_f32_avx512(const float *x, int64_t D, const float *next)
{
    int64_t i;
    __mmask16 tail = (__mmask16)((1u << (D & 15)) - 1);
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 vm = ninf;
    for (i = 0; i + 16 <= D; i += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(x + i));
    if (tail) vm = _mm512_max_ps(vm, _mm512_mask_loadu_ps(ninf, tail, x + i));
    float m = _mm512_reduce_max_ps(vm);
    __m512 vmax = _mm512_set1_ps(m);
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (i = 0; i + 16 <= D;) {
        /* a block of LSE_BLOCK vectors summed in float, the blocks in double */
        __m512 fs = _mm512_setzero_ps();
        for (int v = 0; v < LSE_BLOCK && i + 16 <= D; v++, i += 16) {
            _mm_prefetch((const char *)(next + i), _MM_HINT_T1);
            fs = _mm512_add_ps(fs, exp_nonpos(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmax)));
        }
        s0 = _mm512_add_pd(s0, lo_pd(fs));
        s1 = _mm512_add_pd(s1, hi_pd(fs));
    }
    if (tail) {
        __m512 e = _mm512_maskz_mov_ps(tail, exp_nonpos(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + i), vmax)));
        s0 = _mm512_add_pd(s0, lo_pd(e));
        s1 = _mm512_add_pd(s1, hi_pd(e));
    }
    return (double)m + log(_mm512_reduce_add_pd(_mm512_add_pd(s0, s1)));
}

/* exp(x - lse) g at x[i .. i + 16) (the lanes of k), less g in the lane of the target t. */
__attribute__((target("avx512f"))) static inline __m512 ce_bwd_vec(const float *x, int64_t i, __mmask16 k, __m512 vl,
                                                                  __m512 vg, int64_t t)
{
    __m512 v = _mm512_mul_ps(exp_nonpos(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vl)), vg);
    return t >= i && t < i + 16 ? _mm512_mask_sub_ps(v, (__mmask16)(1u << (t - i)), v, vg) : v;
}

/* Rows of the backward the AVX-512 kernel takes at once where they share an alignment (C a
 * multiple of 16): four rows' exponentials in flight together, and with column sums their sum
 * goes into acc once per vector rather than once per row. */
#define CE_ROWS_MAX 4

/* o_r = (exp(x_r - lse[r]) - onehot(t[r])) * g[r] over R float32 rows (R <= CE_ROWS_MAX; row r is
 * x + r D and o + r D; t < 0: no one-hot), and acc += the rows' sum when acc is not NULL. Several
 * rows need D a multiple of 16, so that they share o's alignment. stream: the 64-byte-aligned
 * middle of each row is written with streaming stores (an output larger than the last-level
 * cache: the LSTM's [4096, 10000] logits' gradient). */
__attribute__((target("avx512f"))) static void ce_bwd_f32_avx512(const float *x, float *o, int64_t D, int R,
                                                                 const float *lse, const float *g, const int64_t *t,
                                                                 bool stream, float *acc)
{
    __m512 vl[CE_ROWS_MAX], vg[CE_ROWS_MAX];
    for (int r = 0; r < R; r++) vl[r] = _mm512_set1_ps(lse[r]), vg[r] = _mm512_set1_ps(g[r]);
    int64_t i = 0;
    /* the R rows' values at [i, i + 16) in the lanes of k, stored with STORE, summed into acc */
#define CE_VEC(k, STORE)                                                                              \
    do {                                                                                              \
        __m512 sum = _mm512_setzero_ps();                                                             \
        for (int r = 0; r < R; r++) {                                                                 \
            __m512 v = ce_bwd_vec(x + r * D, i, k, vl[r], vg[r], t[r]);                               \
            STORE;                                                                                    \
            sum = _mm512_add_ps(sum, v);                                                              \
        }                                                                                             \
        if (acc) _mm512_mask_storeu_ps(acc + i, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, acc + i), sum)); \
    } while (0)
    if (stream) {
        int64_t head = (int64_t)(((64 - ((uintptr_t)o & 63)) & 63) / sizeof(float));
        if (head > D) head = D;
        if (head) {
            __mmask16 k = (__mmask16)((1u << head) - 1);
            CE_VEC(k, _mm512_mask_storeu_ps(o + r * D + i, k, v));
        }
        for (i = head; i + 16 <= D; i += 16) CE_VEC(0xFFFF, _mm512_stream_ps(o + r * D + i, v));
    } else {
        for (; i + 16 <= D; i += 16) CE_VEC(0xFFFF, _mm512_storeu_ps(o + r * D + i, v));
    }
    if (i < D) {
        __mmask16 k = (__mmask16)((1u << (D - i)) - 1);
        CE_VEC(k, _mm512_mask_storeu_ps(o + r * D + i, k, v));
    }
#undef CE_VEC
    if (stream) _mm_sfence();
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

static double lse_f32_vec(const float *x, int64_t D)
{
    float m = row_max_f32(x, D);
    return (double)m + log(row_expsum_f32(x, NULL, D, m));
}

/* o = (exp(x - lse) - onehot(t)) * g over a float32 row (t < 0: no one-hot), and acc += o when
 * acc is not NULL. */
NB_VEC_CLONES static void ce_bwd_f32_vec(const float *x, float *o, int64_t D, float lse, float g, int64_t t,
                                         float *acc)
{
#pragma omp simd
    for (int64_t i = 0; i < D; i++) o[i] = nb_vexpf_nonpos(x[i] - lse) * g;
    if (t >= 0 && t < D) o[t] = o[t] - g;
    if (acc) {
#pragma omp simd
        for (int64_t i = 0; i < D; i++) acc[i] += o[i];
    }
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

/* ---- cross entropy over rows: x [N, C] contiguous, targets in range ---------------------------- */

static double ce_lse_ref(const char *x, int64_t C, bool f32)
{
    double m = -INFINITY, s = 0;
    for (int64_t i = 0; i < C; i++) {
        double v = f32 ? ((const float *)x)[i] : ((const double *)x)[i];
        if (!isnan(m) && (isnan(v) || v > m)) m = v;
    }
    for (int64_t i = 0; i < C; i++) s += exp((f32 ? ((const float *)x)[i] : ((const double *)x)[i]) - m);
    return m + log(s);
}

/* The operands of both ops: N = the targets' count; x has N rows, or N + i1 when it is the
 * forward's probabilities (flag, backward). */
static nb_status ce_check(nb_op op, const nb_kargs *a, int64_t *N, int64_t *C)
{
    bool fwd = op == NB_OP_CROSS_ENTROPY;
    const nb_tensor *x = a->in[0], *t = a->in[fwd ? 1 : 2], *o = a->out;
    const nb_tensor *r = fwd ? a->out2 : a->in[1], *q = fwd ? a->out3 : a->flag ? x : NULL;
    if (!x || !t || !r || x->ndim != 2 || t->dtype != NB_INT64 || !nb__is_contiguous(x) || !nb__is_contiguous(t) ||
        !nb__is_contiguous(o) || !nb__is_contiguous(r) || x->dtype != o->dtype || r->dtype != x->dtype)
        return nb__err(NB_ERR_INTERNAL, "%s: bad operands", nb__op_name(op));
    *N = nb_tensor_numel(t), *C = x->shape[1];
    int64_t rows = *N + (q && a->i1 ? 1 : 0);
    bool ok = x->shape[0] == (q == x ? rows : *N) && nb_tensor_numel(r) == (fwd ? 1 : 2) * *N &&
              nb_tensor_numel(o) == (fwd ? 1 : *C) * *N && (!q || a->s0 > 0);
    if (fwd && q)
        ok = ok && q->ndim == 2 && q->shape[0] == rows && q->shape[1] == *C && q->dtype == x->dtype &&
             nb__is_contiguous(q);
    if (!ok) return nb__err(NB_ERR_INTERNAL, "%s: operands of mismatched sizes", nb__op_name(op));
    return NB_OK;
}

/* Rows a thread sums in float32 before it adds them into its double column sums. */
#define CE_SUM_BLOCK 32

/* One pass of either op over the N rows of C classes (ce_run):
 *   forward (loss set): lse[n] and loss[n] from the logits x, and with o, o = softmax(x) scale;
 *   backward: o = (softmax(x) - onehot(t)) g from the logits x and lse;
 *   backward with probs: o = x g / scale - onehot(t) g, x being the forward's o;
 * and with sums, the sums of o's columns. g is the upstream gradient [N] (backward only). */
typedef struct ce_pass {
    int64_t N, C;
    bool f32, vec, avx2, stream, probs;
    const char *x, *g;
    const int64_t *t;
    char *lse, *loss, *o, *sums;
    double scale;
} ce_pass;

/* The forward's logsumexp and loss of row n. */
static void ce_lse_row(const ce_pass *p, int64_t n)
{
    const char *x = p->x + (size_t)(n * p->C) * (p->f32 ? 4 : 8);
    int64_t t = p->t[n];
    double xt = p->f32 ? ((const float *)x)[t] : ((const double *)x)[t];
#if defined(__x86_64__)
    const float *next = (const float *)x + (n + 1 < p->N ? p->C : 0);
    double lse = p->vec ? lse_f32_avx512((const float *)x, p->C, next)
                        : p->f32 ? lse_f32_vec((const float *)x, p->C) : ce_lse_ref(x, p->C, p->f32);
#else
    double lse = p->f32 ? lse_f32_vec((const float *)x, p->C) : ce_lse_ref(x, p->C, p->f32);
#endif
    if (p->f32) ((float *)p->lse)[n] = (float)lse, ((float *)p->loss)[n] = (float)(lse - xt);
    else ((double *)p->lse)[n] = lse, ((double *)p->loss)[n] = lse - xt;
}

/* The forward's row n with AVX2 (avx2: float32, no AVX-512): its logsumexp and loss, and with o
 * its probabilities (their exponentials waiting in e, C floats) added into acc when not NULL. */
static void ce_fwd_row_avx2(const ce_pass *p, int64_t n, float *e, float *acc)
{
    const float *x = (const float *)p->x + n * p->C, *next = x + (n + 1 < p->N ? p->C : 0);
    double lse = p->o ? nb__ce_probs_avx2(x, p->C, next, e, (float *)p->o + n * p->C, p->scale, p->stream, acc)
                      : nb__ce_lse_avx2(x, p->C, next);
    ((float *)p->lse)[n] = (float)lse, ((float *)p->loss)[n] = (float)(lse - x[p->t[n]]);
}

/* o = q f - onehot(t) g over a float32 row of the forward's probabilities q (f = g / scale), and
 * acc += o when acc is not NULL. */
NB_VEC_CLONES static void ce_probs_f32_vec(const float *q, float *o, int64_t D, float f, float g, int64_t t,
                                           float *acc)
{
#pragma omp simd
    for (int64_t i = 0; i < D; i++) o[i] = q[i] * f;
    if (t >= 0 && t < D) o[t] = o[t] - g;
    if (acc) {
#pragma omp simd
        for (int64_t i = 0; i < D; i++) acc[i] += o[i];
    }
}

/* Rows n .. n + R of o (R > 1 only for float32 with AVX-512, C a multiple of 16 and not probs),
 * acc += them when acc is not NULL (float for float32 rows, double for float64 ones). The forward
 * writes its probabilities as the backward's rows with g = scale and no one-hot. */
static void ce_out_rows(const ce_pass *p, int64_t n, int R, void *acc)
{
    size_t es = p->f32 ? 4 : 8, at = (size_t)(n * p->C) * es;
    bool fwd = p->loss != NULL;
    int64_t C = p->C;
#if defined(__x86_64__)
    if (p->vec && !p->probs) {
        float g[CE_ROWS_MAX];
        int64_t t[CE_ROWS_MAX];
        for (int r = 0; r < R; r++)
            g[r] = fwd ? (float)p->scale : ((const float *)p->g)[n + r], t[r] = fwd ? -1 : p->t[n + r];
        ce_bwd_f32_avx512((const float *)(p->x + at), (float *)(p->o + at), C, R, (const float *)p->lse + n, g, t,
                          p->stream, acc);
        return;
    }
#endif
    for (int r = 0; r < R; r++, at += (size_t)C * es) {
        int64_t m = n + r, t = fwd ? -1 : p->t[m];
        double g = fwd ? p->scale : p->f32 ? ((const float *)p->g)[m] : ((const double *)p->g)[m];
        double lse = p->probs ? 0 : p->f32 ? ((const float *)p->lse)[m] : ((const double *)p->lse)[m];
        if (p->f32 && p->probs) {
            ce_probs_f32_vec((const float *)(p->x + at), (float *)(p->o + at), C, (float)(g / p->scale), (float)g, t,
                             acc);
        } else if (p->f32) {
            ce_bwd_f32_vec((const float *)(p->x + at), (float *)(p->o + at), C, (float)lse, (float)g, t, acc);
        } else {
            const double *x = (const double *)(p->x + at);
            double *o = (double *)(p->o + at), f = g / p->scale;
            for (int64_t c = 0; c < C; c++) {
                double v = (p->probs ? x[c] * f : exp(x[c] - lse) * g) - (c == t ? g : 0);
                o[c] = v;
                if (acc) ((double *)acc)[c] += v;
            }
        }
    }
}

/* Runs p over the rows, split across the threads. With sums, each thread sums its rows (float32
 * ones in blocks of CE_SUM_BLOCK in float, added into double) and the threads' sums are added at
 * the end. The forward with probabilities makes a block of rows' logsumexps, then writes the
 * block's probabilities from the rows still in cache: one exp per logit more than keeping each
 * exponential in a row of scratch and scaling it, but faster (31.5 against 44 ms an iteration
 * on the DLBench LSTM at 1 thread on the Xeon; the scaling pass does nothing while it waits on
 * its stores, where the exp pass's arithmetic overlaps them). */
static nb_status ce_run(const ce_pass *p, nb_op op)
{
    int64_t N = p->N, C = p->C;
    int nt = nb_cpu_threads_for(N * C, 0);
    bool avx2_fwd = p->avx2 && p->loss;
    size_t scratch_bytes = avx2_fwd && p->o ? (size_t)nt * (size_t)C * sizeof(float) : 0;
    float *scratch = scratch_bytes ? nb_cpu_alloc(scratch_bytes) : NULL;
    if (scratch_bytes && !scratch)
        return nb__err(NB_ERR_OOM, "%s: out of host memory for %d threads' rows of %lld exponentials (%zu bytes)",
                       nb__op_name(op), nt, (long long)C, scratch_bytes);
    nb_cpu_colsums cs = {0};
    if (p->sums) {
        nb_status st = nb_cpu_colsums_init(&cs, nt, C, p->f32, nb__op_name(op));
        if (st != NB_OK) {
            if (scratch) nb_cpu_free(scratch, scratch_bytes);
            return st;
        }
    }
    int rows_at_once = p->vec && !p->probs && C % 16 == 0 ? CE_ROWS_MAX : 1;
#pragma omp parallel num_threads(nt)
    {
        int64_t n0, n1;
        nb_cpu_thread_share(N, &n0, &n1);
        size_t id = (size_t)nb_cpu_thread_num();
        double *da = cs.d ? cs.d + id * (size_t)C : NULL;
        float *fa = cs.f ? cs.f + id * (size_t)C : NULL;
        float *e = scratch ? scratch + id * (size_t)C : NULL;
        for (int64_t n = n0; n < n1;) {
            int64_t left = n1 - n, block = CE_SUM_BLOCK - (n - n0) % CE_SUM_BLOCK;
            int R = rows_at_once < left ? rows_at_once : (int)left;
            if (R > block) R = (int)block;
            if (avx2_fwd) {
                for (int r = 0; r < R; r++) ce_fwd_row_avx2(p, n + r, e, fa);
            } else {
                for (int r = 0; p->loss && r < R; r++) ce_lse_row(p, n + r);
                if (p->o) ce_out_rows(p, n, R, p->f32 ? (void *)fa : (void *)da);
            }
            n += R;
            if (fa && ((n - n0) % CE_SUM_BLOCK == 0 || n == n1))
                for (int64_t c = 0; c < C; c++) da[c] += fa[c], fa[c] = 0;
        }
    }
    if (p->sums) nb_cpu_colsums_finish(&cs, p->sums, p->f32);
    if (scratch) nb_cpu_free(scratch, scratch_bytes);
    return NB_OK;
}

/* The backward in place over the forward's probabilities q (out is q's first N rows), every g
 * being the scale s: o = q - onehot(t) s changes only the targets' entries, and the column sums
 * are q's (its row N, made by the forward) less s times each class's count. */
static nb_status ce_backward_in_place(const nb_kargs *a, int64_t N, int64_t C)
{
    bool f32 = a->out->dtype == NB_FLOAT32;
    double s = a->s0;
    const char *g = (const char *)nb__data(a->in[1]) + (size_t)N * (f32 ? 4 : 8);
    const int64_t *t = (const int64_t *)nb__data(a->in[2]);
    for (int64_t n = 0; n < N; n++)
        if ((f32 ? ((const float *)g)[n] : ((const double *)g)[n]) != (f32 ? (double)(float)s : s))
            return nb__err(NB_ERR_INTERNAL, "cross_entropy_backward: in place with a gradient other than the "
                           "probabilities' scale %g at row %lld", s, (long long)n);
    char *o = nb__data(a->out);
    for (int64_t n = 0; n < N; n++) {
        size_t at = (size_t)(n * C + t[n]);
        if (f32) ((float *)o)[at] -= (float)s;
        else ((double *)o)[at] -= s;
    }
    if (!a->out2) return NB_OK; /* its dtype, size and layout checked by cross_entropy */
    if (!a->i1) return nb__err(NB_ERR_INTERNAL, "cross_entropy_backward: column sums in place without q's row N");
    nb_cpu_colsums cs;
    NB_TRY(nb_cpu_colsums_init(&cs, 1, C, false, "cross_entropy_backward"));
    const char *row = o + (size_t)(N * C) * (f32 ? 4 : 8);
    for (int64_t c = 0; c < C; c++) cs.d[c] = f32 ? ((const float *)row)[c] : ((const double *)row)[c];
    for (int64_t n = 0; n < N; n++) cs.d[t[n]] -= s;
    nb_cpu_colsums_finish(&cs, nb__data(a->out2), f32);
    return NB_OK;
}

static nb_status cross_entropy(nb_op op, const nb_kargs *a)
{
    int64_t N = 0, C = 0;
    NB_TRY(ce_check(op, a, &N, &C));
    bool fwd = op == NB_OP_CROSS_ENTROPY, f32 = a->out->dtype == NB_FLOAT32;
    size_t es = f32 ? 4 : 8;
    nb_tensor *q = fwd ? a->out3 : NULL, *sums = fwd ? NULL : a->out2;
    if (sums && (sums->dtype != a->out->dtype || nb_tensor_numel(sums) != C || !nb__is_contiguous(sums)))
        return nb__err(NB_ERR_INTERNAL, "cross_entropy_backward: bad column sums");
    if (!fwd && a->flag && nb__data(a->out) == nb__data(a->in[0])) return ce_backward_in_place(a, N, C);
    ce_pass p = {.N = N, .C = C, .f32 = f32, .vec = f32 && nb_cpu_avx512(),
                 .avx2 = f32 && !nb_cpu_avx512() && nb_cpu_avx2_fma(), .probs = !fwd && a->flag,
                 .x = nb__data(a->in[0]), .t = (const int64_t *)nb__data(a->in[fwd ? 1 : 2]), .scale = a->s0};
    if (fwd) {
        p.lse = nb__data(a->out2), p.loss = nb__data(a->out);
        p.o = q ? nb__data(q) : NULL;
        p.sums = q && a->i1 ? p.o + (size_t)(N * C) * es : NULL;
    } else {
        p.lse = nb__data(a->in[1]), p.g = p.lse + (size_t)N * es;
        p.o = nb__data(a->out), p.sums = sums ? nb__data(sums) : NULL;
    }
    p.stream = p.o && nb_cpu_streams_output(N * C * (int64_t)es);
    return ce_run(&p, op);
}

nb_status nb_cpu_k_softmax(nb_op op, const nb_kargs *a)
{
    if (op == NB_OP_CROSS_ENTROPY || op == NB_OP_CROSS_ENTROPY_BACKWARD) {
        if (a->out->dtype != NB_FLOAT32 && a->out->dtype != NB_FLOAT64)
            return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported (float32/float64 only)", nb__op_name(op),
                           nb_dtype_name(a->out->dtype));
        return cross_entropy(op, a);
    }
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
