/* Kernels of the softmax family (ops.def), cross entropy over rows; float32 / float64. The
 * family's entry (softmax.c's nb_cpu_k_softmax) hands these two ops here.
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
 * sum and then scaled into q (so q differs from the backward's exp(x - lse) g by rounding).
 * The float32 rows share their portable passes (nb__lse_f32_vec) and AVX-512 helpers with
 * softmax.c through softmax_impl.h. */
#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "cpu/cpu_impl.h"
#include "cpu/ops/unary_math_impl.h"
#include "cpu/softmax_impl.h"

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
    float m = max_f32_avx512(x, D);
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

#endif

/* ---- contiguous float32 rows without AVX-512 ------------------------------------------------ */

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

/* ---- the rows, split across the threads --------------------------------------------------- */

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
                        : p->f32 ? nb__lse_f32_vec((const float *)x, p->C) : ce_lse_ref(x, p->C, p->f32);
#else
    double lse = p->f32 ? nb__lse_f32_vec((const float *)x, p->C) : ce_lse_ref(x, p->C, p->f32);
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

nb_status nb__cpu_cross_entropy(nb_op op, const nb_kargs *a)
{
    if (a->out->dtype != NB_FLOAT32 && a->out->dtype != NB_FLOAT64)
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported (float32/float64 only)", nb__op_name(op),
                       nb_dtype_name(a->out->dtype));
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

