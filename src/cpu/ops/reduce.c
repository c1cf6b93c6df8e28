/* Kernels: reductions.
 *   in[0] [d0, ..., dn-1] (any strides) is reduced over the dims set in dim_mask into out, which
 *   has the keepdim shape (reduced dims of size 1). out2 (MAX, MIN; may be NULL) receives int64
 *   positions along the one reduced dim.
 *   SUM PROD      float: same dtype; integer and bool: int64
 *   MEAN VAR NORM float only (VAR: i0 = correction, divisor max(0, n - i0), flag set: the square
 *                 root, for std; NORM: s0 = p)
 *   LOGSUMEXP     float out (integer inputs give float32 in the entry)
 *   MAX MIN       same dtype; NaN wins; first occurrence of the extreme
 *   ARGMAX ARGMIN int64 out: the row-major position among the reduced elements
 *   ALL ANY       bool out (uint8 out for uint8 input, as PyTorch)
 * Paths: a plain reference that walks each output's reduced elements through strides (every op,
 * every dtype, computed in double / int64: reduce_ref.c), and fast paths for float32 / float64
 * SUM MEAN MAX MIN NORM(p = 1, 2) and VAR (two passes: the mean, then squared deviations) when
 * the innermost memory run is contiguous:
 *   inner: the run is reduced: each output sums whole runs (vectorised; float32 in double); few
 *          outputs inside an outer reduced dim visit the runs in memory order (inner_in_order);
 *   outer: the run is kept: input rows accumulate into a vector of outputs, so that a reduction
 *          over dim 0 of [N, C] reads memory in order instead of striding per output (up to 64
 *          float32 columns in registers, 32 on AVX2, and wider ones down few rows a strip of
 *          that many at a time: narrow_add).
 * The float32 sums' and extremes' vector kernels, AVX-512F's and AVX2's, are in reduce_vec.c.
 * Both split the reduction itself across threads when there are too few outputs to go round.
 * Positions (ARGMAX ARGMIN, MAX MIN with out2) over one dim: along a unit-stride run, a vector
 * pass for the extreme and a search for its first occurrence (extreme_inner); down columns, rows
 * compared a block of columns at a time in the columns' own type (extreme_outer). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_impl.h"
#include "cpu/reduce_impl.h"

/* The order dims are visited in, outermost first: by the input's stride, largest first, and a
 * broadcast dim (stride 0) outermost of all. */
static int64_t order_key(int64_t stride) { return stride == 0 ? INT64_MAX : llabs(stride); }

/* Sorts dims d[0..n) by order_key of the input's strides, largest first; stable. */
static void sort_dims(int *d, int n, const int64_t *strides)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && order_key(strides[d[j - 1]]) < order_key(strides[d[j]]); j--) {
            int t = d[j];
            d[j] = d[j - 1];
            d[j - 1] = t;
        }
}

/* The kept dims are taken in the input's memory order (each output is computed alone, so any
 * order gives the same results), and so are the reduced dims when any_order says the result does
 * not depend on the order the reduced elements are visited in (all but the positions of
 * ARGMAX/ARGMIN and of MAX/MIN's out2): a channels-last tensor's sum over all its dims is then
 * one contiguous run, not three strided ones (10 ms -> 0.5 ms on [128, 32, 28, 28]). */
static void plan_init(rplan *p, const nb_kargs *a, bool any_order)
{
    const nb_tensor *in = a->in[0], *out = a->out, *o2 = a->out2;
    memset(p, 0, sizeof *p);
    p->nout = p->nred = 1;
    int rd[NB_MAX_DIMS], kd[NB_MAX_DIMS], nrd = 0, nkd = 0; /* the dims of size > 1 */
    for (int d = 0; d < in->ndim; d++) {
        int64_t n = in->shape[d];
        if (a->dim_mask >> d & 1) {
            p->nred *= n;
            if (n > 1) rd[nrd++] = d; /* size 0: nred or nout is 0 and no loop runs */
        } else {
            p->nout *= n;
            if (n > 1) kd[nkd++] = d;
        }
    }
    sort_dims(kd, nkd, in->strides);
    if (any_order) sort_dims(rd, nrd, in->strides);
    for (int i = 0; i < nkd; i++) {
        int d = kd[i], k = p->nk;
        int64_t n = in->shape[d], si = in->strides[d], so = out->strides[d], s2 = o2 ? o2->strides[d] : 0;
        if (k && p->kin[k - 1] == si * n && p->ko[k - 1] == so * n && p->ko2[k - 1] == s2 * n) {
            p->ks[k - 1] *= n;
            p->kin[k - 1] = si;
            p->ko[k - 1] = so;
            p->ko2[k - 1] = s2;
        } else {
            p->ks[k] = n;
            p->kin[k] = si;
            p->ko[k] = so;
            p->ko2[k] = s2;
            p->nk++;
        }
    }
    for (int i = 0; i < nrd; i++) {
        int64_t n = in->shape[rd[i]], si = in->strides[rd[i]];
        int r = p->nr;
        if (r && p->rin[r - 1] == si * n) {
            p->rs[r - 1] *= n;
            p->rin[r - 1] = si;
        } else {
            p->rs[r] = n;
            p->rin[r] = si;
            p->nr++;
        }
    }
}

/* ---- fast paths: float32 / float64 runs ---------------------------------------------------- */

typedef enum fop { F_ADD, F_ADDSQ, F_ADDABS, F_MAX, F_MIN, F_SQDEV } fop; /* SQDEV: (x - shift)^2 */

static inline double f_identity(fop f) { return f == F_MAX ? -INFINITY : f == F_MIN ? INFINITY : 0; }

static inline double f_combine(fop f, double x, double y)
{
    if (f == F_MAX || f == F_MIN) {
        if (isnan(x) || isnan(y)) return NAN;
        return f == F_MAX ? (x > y ? x : y) : (x < y ? x : y);
    }
    return x + y;
}

/* The plain loops below are written for the vectoriser (8 independent partial results), and
 * compiled for AVX-512, AVX2 and the baseline, picked at load time. The float32 sums and extremes
 * take the vector kernels of reduce_vec.c instead where the CPU has them (nb__reduce_vec). */
#if defined(__x86_64__)
#define NB_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define NB_CLONES
#endif
#define RUN_FN(NAME, T)                                                                          \
    NB_CLONES static double NAME(fop f, const T *restrict x, int64_t n, double shift)            \
    {                                                                                            \
        double s[8];                                                                             \
        int64_t i = 0;                                                                           \
        for (int k = 0; k < 8; k++) s[k] = f_identity(f);                                        \
        if (f == F_MAX || f == F_MIN) {                                                          \
            int nan = 0;                                                                         \
            for (; i + 8 <= n; i += 8)                                                           \
                for (int k = 0; k < 8; k++) {                                                    \
                    double v = x[i + k];                                                         \
                    nan |= v != v;                                                               \
                    s[k] = (f == F_MAX) ? (v > s[k] ? v : s[k]) : (v < s[k] ? v : s[k]);         \
                }                                                                                \
            double r = f_identity(f);                                                            \
            for (int k = 0; k < 8; k++) r = f_combine(f, r, s[k]);                               \
            for (; i < n; i++) r = f_combine(f, r, x[i]);                                        \
            return nan ? NAN : r;                                                                \
        }                                                                                        \
        for (; i + 8 <= n; i += 8)                                                               \
            for (int k = 0; k < 8; k++) {                                                        \
                double v = f == F_SQDEV ? x[i + k] - shift : x[i + k];                           \
                s[k] += f == F_ADD ? v : f == F_ADDABS ? fabs(v) : v * v;                        \
            }                                                                                    \
        double r = 0;                                                                            \
        for (int k = 0; k < 8; k++) r += s[k];                                                   \
        for (; i < n; i++) {                                                                     \
            double v = f == F_SQDEV ? x[i] - shift : x[i];                                       \
            r += f == F_ADD ? v : f == F_ADDABS ? fabs(v) : v * v;                               \
        }                                                                                        \
        return r;                                                                                \
    }
RUN_FN(run_f32_generic, float)
RUN_FN(run_f64, double)

/* v: this CPU's vector kernels (nb__reduce_vec), or NULL. */
static double run_f32(const nb_reduce_vec *v, fop f, const float *x, int64_t n, double shift)
{
    if (v && f == F_ADD) return v->sum(x, n);
    if (v && (f == F_MAX || f == F_MIN) && n > 0) return v->extreme(x, n, f == F_MAX ? 1 : -1);
    return run_f32_generic(f, x, n, shift);
}

/* acc[j] (op)= x_r[j] for the nrows rows given; NaN propagates for MAX / MIN; F_SQDEV adds
 * (x_r[j] - sh[j])^2 (sh: the columns' means). */
#define ROWS_FN(NAME, T)                                                                         \
    NB_CLONES static void NAME(fop f, double *restrict acc, const T *const *rows, int nrows,     \
                               int64_t n, const double *restrict sh)                             \
    {                                                                                            \
        for (int r = 0; r < nrows; r++) {                                                        \
            const T *restrict x = rows[r];                                                       \
            switch (f) {                                                                         \
            case F_ADD: for (int64_t j = 0; j < n; j++) acc[j] += x[j]; break;                   \
            case F_ADDSQ: for (int64_t j = 0; j < n; j++) acc[j] += (double)x[j] * x[j]; break;  \
            case F_ADDABS: for (int64_t j = 0; j < n; j++) acc[j] += fabs((double)x[j]); break;  \
            case F_MAX:                                                                          \
                for (int64_t j = 0; j < n; j++) {                                                \
                    double v = x[j];                                                             \
                    acc[j] = (v > acc[j] || v != v) && acc[j] == acc[j] ? v : acc[j];            \
                }                                                                                \
                break;                                                                           \
            case F_MIN:                                                                          \
                for (int64_t j = 0; j < n; j++) {                                                \
                    double v = x[j];                                                             \
                    acc[j] = (v < acc[j] || v != v) && acc[j] == acc[j] ? v : acc[j];            \
                }                                                                                \
                break;                                                                           \
            case F_SQDEV:                                                                        \
                for (int64_t j = 0; j < n; j++) {                                                \
                    double v = (double)x[j] - sh[j];                                             \
                    acc[j] += v * v;                                                             \
                }                                                                                \
                break;                                                                           \
            }                                                                                    \
        }                                                                                        \
    }
ROWS_FN(rows_f32, float)
ROWS_FN(rows_f64, double)

typedef struct fast {
    fop f;
    nb_op op;
    bool f32, sqrt; /* sqrt: VAR computing std */
    int64_t correction;
    double shift;         /* F_SQDEV in inner mode: the mean of the output being reduced */
    const double *shifts; /* F_SQDEV in outer mode: the means of the block's columns */
    const char *in;
    char *out;
    int64_t es;
    const nb_reduce_vec *vec; /* float32: nb__reduce_vec(), looked up once per op */
} fast;

static double fast_run(const fast *c, int64_t off, int64_t n)
{
    return c->f32 ? run_f32(c->vec, c->f, (const float *)c->in + off, n, c->shift)
                  : run_f64(c->f, (const double *)c->in + off, n, c->shift);
}

/* The finish of MEAN, NORM(2) and VAR: the divisor (MEAN: the count, VAR: the degrees of freedom,
 * 0 when none: inf or NaN; else 1) and whether a square root follows. */
static double finish_div(const fast *c, const rplan *p, bool *root)
{
    *root = c->f == F_ADDSQ;
    if (c->op == NB_OP_MEAN) return (double)p->nred;
    if (c->op != NB_OP_VAR) return 1;
    double dof = (double)p->nred - (double)c->correction;
    *root = c->sqrt;
    return dof > 0 ? dof : 0;
}

/* o = acc / div (the square root of it with root), rounded to T, with the finish chosen once for
 * the row. Per output, GCC vectorised the store with the square root computed for every op and
 * blended away, which was a fifth of a float32 sum over dim 1 of NCHW [32, 32, 28, 28]. Compiled
 * for each vector width (the loop was SSE2 code, two divisions at a time), and no division when
 * div is 1 (a sum): the sum over dim 0 of an NCHW [32, 32, 28, 28] float32 at 1 thread spent 17%
 * of its time in this loop and the zeroing of its acc (Zen 3). */
#define STORE_ROW_FN(NAME, T)                                                                    \
    NB_CLONES static void NAME(T *restrict o, const double *restrict acc, int64_t n, double div, bool root) \
    {                                                                                            \
        if (root)                                                                                \
            for (int64_t j = 0; j < n; j++) o[j] = (T)sqrt(acc[j] / div);                        \
        else if (div == 1)                                                                       \
            for (int64_t j = 0; j < n; j++) o[j] = (T)acc[j];                                    \
        else                                                                                     \
            for (int64_t j = 0; j < n; j++) o[j] = (T)(acc[j] / div);                            \
    }
STORE_ROW_FN(store_row_f32, float)
STORE_ROW_FN(store_row_f64, double)

/* Stores the n outputs acc[0 .. n) at element offsets at, at + 1, ... of out, finished. */
static void fast_store_row(const fast *c, const rplan *p, int64_t at, const double *acc, int64_t n)
{
    bool root;
    double div = finish_div(c, p, &root);
    if (c->f32) store_row_f32((float *)c->out + at, acc, n, div, root);
    else store_row_f64((double *)c->out + at, acc, n, div, root);
}

/* One output, finished: inline, not a call through the clones' resolver per output. */
static void fast_store(const fast *c, const rplan *p, int64_t at, double v)
{
    bool root;
    double div = finish_div(c, p, &root);
    v = root ? sqrt(v / div) : v / div;
    if (c->f32) *((float *)c->out + at) = (float)v;
    else *((double *)c->out + at) = v;
}

/* Walks the outputs [o0, o1) in row-major order of the kept dims with wi.off, wo.off and w2.off
 * their offsets in the input, out and out2: one division per range instead of one per output
 * (the sum over the 32 channels of a channels-last [128, 32, 28, 28] spent half its 5 ms in
 * offset_of). */
#define FOR_KEPT(p, o0, o1, o, wi, wo, w2, ...)                                                   \
    do {                                                                                         \
        walk wi, wo, w2;                                                                         \
        walk_seek(&wi, (p)->nk, (p)->ks, (p)->kin, o0);                                          \
        walk_seek(&wo, (p)->nk, (p)->ks, (p)->ko, o0);                                           \
        walk_seek(&w2, (p)->nk, (p)->ks, (p)->ko2, o0);                                          \
        for (int64_t o = o0; o < o1; o++, walk_next(&wi), walk_next(&wo), walk_next(&w2)) {      \
            __VA_ARGS__;                                                                         \
        }                                                                                        \
    } while (0)

/* Inner mode: reduced positions [q0, q1) of one output, q = (outer reduced position) * L + j. */
static double inner_range(const fast *c, const rplan *p, int64_t base, int64_t q0, int64_t q1)
{
    int64_t L = p->rs[p->nr - 1];
    walk w;
    walk_seek(&w, p->nr - 1, p->rs, p->rin, q0 / L);
    double acc = f_identity(c->f);
    for (int64_t q = q0; q < q1;) {
        int64_t j = q % L, len = L - j < q1 - q ? L - j : q1 - q;
        acc = f_combine(c->f, acc, fast_run(c, base + w.off + j, len));
        q += len;
        walk_next(&w);
    }
    return acc;
}

/* One output's reduction with its run split across nt threads (few outputs, long runs). */
static double inner_split(const fast *c, const rplan *p, int64_t base, int nt)
{
    double part[256];
    if (nt > 256) nt = 256;
#pragma omp parallel num_threads(nt)
    {
        int t, n;
        nb_cpu_thread_pos(&t, &n);
        part[t] = inner_range(c, p, base, p->nred * t / n, p->nred * (t + 1) / n);
        if (t == 0)
            for (int k = n; k < nt; k++) part[k] = f_identity(c->f);
    }
    double acc = f_identity(c->f);
    for (int k = 0; k < nt; k++) acc = f_combine(c->f, acc, part[k]);
    return acc;
}

/* One output (its reduced elements from input offset base): a single pass, or for VAR the mean
 * and then the squared deviations from it. */
static double inner_output(const fast *c, const rplan *p, int64_t base, int nt)
{
    if (c->op != NB_OP_VAR) return nt > 1 ? inner_split(c, p, base, nt) : inner_range(c, p, base, 0, p->nred);
    fast m = *c;
    m.f = F_ADD;
    double sum = nt > 1 ? inner_split(&m, p, base, nt) : inner_range(&m, p, base, 0, p->nred);
    m.f = F_SQDEV;
    m.shift = sum / (double)p->nred;
    return nt > 1 ? inner_split(&m, p, base, nt) : inner_range(&m, p, base, 0, p->nred);
}

/* Inner mode in the input's memory order, for few outputs whose kept dims lie inside an outer
 * reduced dim (the sum over (0, 2, 3) of an NCHW [N, C, H, W], a bias's gradient: per output,
 * its N runs of H * W lie a whole image apart, and every run restarts the prefetchers). The
 * runs are visited in memory order, each one's result combined into its output's accumulator;
 * each thread takes a share of the runs into its own accumulators. [128, 32, 28, 28] float32 at
 * 1 thread: 0.63 ms per output, PyTorch 0.32 (Zen 4). Not VAR, whose second pass needs each
 * output's mean. *done: it did. */
#define INNER_ORDER_MAX_OUT 4096
static nb_status inner_in_order(const fast *c, const rplan *p, bool *done)
{
    *done = false;
    if (c->op == NB_OP_VAR || p->nout > INNER_ORDER_MAX_OUT || p->nr < 2) return NB_OK;
    int64_t kmin = INT64_MAX;
    for (int k = 0; k < p->nk; k++) kmin = p->kin[k] < kmin ? p->kin[k] : kmin;
    bool inside = false;
    for (int r = 0; r < p->nr - 1; r++) inside = inside || p->rin[r] > kmin;
    if (!inside) return NB_OK;
    /* the kept dims and the outer reduced dims, outermost in memory first; an output index
     * multiplier for each (0 for reduced dims) */
    int nd = 0, perm[2 * NB_MAX_DIMS];
    int64_t dsh[2 * NB_MAX_DIMS], dist[2 * NB_MAX_DIMS], dost[2 * NB_MAX_DIMS], mult = 1;
    for (int k = p->nk - 1; k >= 0; k--) { /* the kept dims, innermost first: row-major multipliers */
        dsh[nd] = p->ks[k], dist[nd] = p->kin[k], dost[nd++] = mult;
        mult *= p->ks[k];
    }
    for (int r = 0; r < p->nr - 1; r++) dsh[nd] = p->rs[r], dist[nd] = p->rin[r], dost[nd++] = 0;
    for (int i = 0; i < nd; i++) perm[i] = i;
    sort_dims(perm, nd, dist);
    int64_t sh[2 * NB_MAX_DIMS], ist[2 * NB_MAX_DIMS], ost[2 * NB_MAX_DIMS];
    for (int i = 0; i < nd; i++) sh[i] = dsh[perm[i]], ist[i] = dist[perm[i]], ost[i] = dost[perm[i]];
    int64_t L = p->rs[p->nr - 1], runs = p->nout * (p->nred / L);
    int nt = nb_cpu_threads_for(p->nout * p->nred, 0);
    double *acc = malloc((size_t)nt * (size_t)p->nout * sizeof *acc);
    if (!acc) return nb__err(NB_ERR_OOM, "%s: out of memory", nb__op_name(c->op));
    double init = f_identity(c->f);
    for (int64_t i = 0; i < (int64_t)nt * p->nout; i++) acc[i] = init;
#pragma omp parallel num_threads(nt)
    {
        int t, n;
        nb_cpu_thread_pos(&t, &n);
        double *a = acc + (int64_t)t * p->nout;
        walk wi, wo;
        int64_t q0 = runs * t / n, q1 = runs * (t + 1) / n;
        walk_seek(&wi, nd, sh, ist, q0);
        walk_seek(&wo, nd, sh, ost, q0);
        for (int64_t q = q0; q < q1; q++, walk_next(&wi), walk_next(&wo))
            a[wo.off] = f_combine(c->f, a[wo.off], fast_run(c, wi.off, L));
    }
    walk wo;
    walk_seek(&wo, p->nk, p->ks, p->ko, 0);
    for (int64_t o = 0; o < p->nout; o++, walk_next(&wo)) {
        double v = acc[o];
        for (int t = 1; t < nt; t++) v = f_combine(c->f, v, acc[(int64_t)t * p->nout + o]);
        fast_store(c, p, wo.off, v);
    }
    free(acc);
    *done = true;
    return NB_OK;
}

static nb_status inner_mode(const fast *c, const rplan *p)
{
    int nt = nb_cpu_threads_for(p->nout * p->nred, 0);
    if (p->nout >= nt) {
#pragma omp parallel num_threads(nt)
        {
            int t, n;
            nb_cpu_thread_pos(&t, &n);
            int64_t o0 = p->nout * t / n, o1 = p->nout * (t + 1) / n;
            if (c->vec && p->nr == 1 && p->nk == 1 && p->nred <= NB_REDUCE_SHORT_ROW && c->f == F_ADD)
                c->vec->short_rows((float *)c->out + o0 * p->ko[0], p->ko[0], (const float *)c->in + o0 * p->kin[0],
                              p->kin[0], o1 - o0, p->nred, c->op == NB_OP_MEAN ? (double)p->nred : 1.0);
            else if (p->nr == 1 && c->op != NB_OP_VAR) /* one run per output */
                FOR_KEPT(p, o0, o1, o, wi, wo, w2, fast_store(c, p, wo.off, fast_run(c, wi.off, p->nred)));
            else
                FOR_KEPT(p, o0, o1, o, wi, wo, w2, fast_store(c, p, wo.off, inner_output(c, p, wi.off, 1)));
        }
        return NB_OK;
    }
    /* few outputs: each one's reduction is split across the threads */
    FOR_KEPT(p, 0, p->nout, o, wi, wo, w2, fast_store(c, p, wo.off, inner_output(c, p, wi.off, nt)));
    return NB_OK;
}

/* Output columns per accumulator block: at most OUTER_CW (128 KiB of doubles, in L2), else as
 * wide as the columns shared out among the threads, and at least OUTER_CW_MIN. Narrow blocks read
 * each row in pieces, a strided pattern the prefetchers follow badly: the sum over dim 0 of
 * [4096, 10000] float32 (the LSTM's output bias gradient) took 13.7-15.6 ms at 1 thread with
 * blocks of 2048 columns, 7.5 with whole rows (Zen 4). */
#define OUTER_CW 16384
#define OUTER_CW_MIN 2048

/* Few rows of wide columns (the sum over the 32 channels of an NCHW [N, 32, 28, 28]: 784
 * columns down 32 rows per image) are summed a strip of narrow_add's columns at a time, each strip
 * in registers down all the rows, instead of a pass over acc per row: AVX2 (Zen 3), [32, 32, 28,
 * 28] at 1 thread, 0.27 -> 0.15 ms. */
#define OUTER_STRIP_ROWS 64

/* Outer mode: accumulates reduced positions [r0, r1) of the columns [c0, c0 + cw) of outer kept
 * position ko into acc. */
static void outer_block(const fast *c, const rplan *p, int64_t ko, int64_t c0, int64_t cw, int64_t r0,
                        int64_t r1, double *acc)
{
    int64_t base = offset_of(ko, p->nk - 1, p->ks, p->kin) + c0;
    const nb_reduce_vec *v = c->f == F_ADD ? c->vec : NULL;
    if (v && p->nr == 1 && (cw <= v->narrow_max || r1 - r0 <= OUTER_STRIP_ROWS)) {
        const float *x = (const float *)c->in + base + r0 * p->rin[0];
        for (int64_t j = 0; j < cw; j += v->narrow_max)
            v->narrow_add(acc + j, x + j, p->rin[0], r1 - r0, cw - j < v->narrow_max ? cw - j : v->narrow_max);
        return;
    }
    walk w;
    walk_seek(&w, p->nr, p->rs, p->rin, r0);
    const void *rows[8];
    /* Eight rows at a time halve the passes over acc, but interleave eight read streams: that
     * starves the prefetchers when each row is a fraction of a page and the eight are not one
     * short run (measured on [R, K] float32: K = 128..1024 reads twice as fast one row at a time) */
    int64_t rb = cw * c->es;
    int nrows = 0, maxrows = rb <= 256 || rb >= 8192 ? 8 : 1;
    for (int64_t r = r0; r < r1; r++, walk_next(&w)) {
        rows[nrows++] = c->in + (base + w.off) * c->es;
        if (nrows < maxrows && r + 1 < r1) continue;
        if (v) v->rows_add(acc, (const float *const *)rows, nrows, cw);
        else if (c->f32) rows_f32(c->f, acc, (const float *const *)rows, nrows, cw, c->shifts);
        else rows_f64(c->f, acc, (const double *const *)rows, nrows, cw, c->shifts);
        nrows = 0;
    }
}

static nb_status outer_mode(const fast *c, const rplan *p)
{
    bool var = c->op == NB_OP_VAR;
    int nt = nb_cpu_threads_for(p->nout * p->nred, 0);
    int64_t K = p->ks[p->nk - 1], nko = p->nout / K, bw = (K + nt - 1) / nt;
    bw = bw < OUTER_CW_MIN ? OUTER_CW_MIN : bw > OUTER_CW ? OUTER_CW : bw;
    int64_t nch = (K + bw - 1) / bw, items = nko * nch;
    double init = f_identity(c->f);
    if (items >= nt || p->nred < 2 * nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t it = 0; it < items; it++) {
            double acc[OUTER_CW], mean[OUTER_CW];
            int64_t ko = it / nch, c0 = (it % nch) * bw, cw = K - c0 < bw ? K - c0 : bw;
            fast m = *c;
            if (var) { /* the columns' means, then the squared deviations from them */
                m.f = F_ADD;
                for (int64_t j = 0; j < cw; j++) acc[j] = 0;
                outer_block(&m, p, ko, c0, cw, 0, p->nred, acc);
                for (int64_t j = 0; j < cw; j++) mean[j] = acc[j] / (double)p->nred;
                m.f = F_SQDEV;
                m.shifts = mean;
            }
            if (init == 0) memset(acc, 0, (size_t)cw * sizeof *acc); /* a sum's identity, +0 */
            else
                for (int64_t j = 0; j < cw; j++) acc[j] = init;
            outer_block(&m, p, ko, c0, cw, 0, p->nred, acc);
            fast_store_row(c, p, offset_of(ko, p->nk - 1, p->ks, p->ko) + c0, acc, cw);
        }
        return NB_OK;
    }
    /* few columns, many rows: each thread takes a share of the rows */
    double *part = malloc((size_t)(nt + 1) * OUTER_CW * sizeof *part);
    if (!part) return nb__err(NB_ERR_OOM, "%s: out of memory", nb__op_name(c->op));
    double *mean = part + (size_t)nt * OUTER_CW; /* after the check: no arithmetic on NULL */
    for (int64_t it = 0; it < items; it++) {
        int64_t ko = it / nch, c0 = (it % nch) * bw, cw = K - c0 < bw ? K - c0 : bw;
        for (int pass = var ? 0 : 1; pass < 2; pass++) { /* VAR: pass 0 the columns' means */
            fast m = *c;
            m.f = pass == 0 ? F_ADD : c->f;
            m.shifts = mean;
            double start = pass == 0 ? 0 : init;
            for (int k = 0; k < nt; k++) /* a thread the runtime does not give leaves its share at start */
                for (int64_t j = 0; j < cw; j++) part[(int64_t)k * OUTER_CW + j] = start;
#pragma omp parallel num_threads(nt)
            {
                int t, n;
                nb_cpu_thread_pos(&t, &n);
                outer_block(&m, p, ko, c0, cw, p->nred * t / n, p->nred * (t + 1) / n, part + (int64_t)t * OUTER_CW);
            }
            int64_t at = offset_of(ko, p->nk - 1, p->ks, p->ko) + c0;
            for (int64_t j = 0; j < cw; j++) {
                double acc = start;
                for (int k = 0; k < nt; k++) acc = f_combine(m.f, acc, part[(int64_t)k * OUTER_CW + j]);
                if (pass == 0) mean[j] = acc / (double)p->nred;
                else fast_store(c, p, at + j, acc);
            }
        }
    }
    free(part);
    return NB_OK;
}

/* Whether the input's unit-stride dim is kept (the kept dims are in memory order: it is the
 * last), which the outer mode needs, and whether the output steps through it by one too. */
static bool unit_kept(const rplan *p) { return p->nk > 0 && p->kin[p->nk - 1] == 1; }
static bool outer_fits(const rplan *p) { return unit_kept(p) && p->ko[p->nk - 1] == 1; }

/* Takes a fast path when one applies; *done tells whether it did. */
static nb_status try_fast(nb_op op, const nb_kargs *a, const rplan *p, bool *done)
{
    const nb_tensor *in = a->in[0];
    *done = false;
    if ((in->dtype != NB_FLOAT32 && in->dtype != NB_FLOAT64) || a->out->dtype != in->dtype) return NB_OK;
    if (p->nout == 0 || p->nred == 0 || a->out2) return NB_OK;
    fast c = {.op = op, .f32 = in->dtype == NB_FLOAT32, .in = nb__data(in), .out = nb__data(a->out),
              .vec = in->dtype == NB_FLOAT32 ? nb__reduce_vec() : NULL,
              .es = (int64_t)nb_dtype_size(in->dtype)};
    switch (op) {
    case NB_OP_SUM:
    case NB_OP_MEAN: c.f = F_ADD; break;
    case NB_OP_MAX: c.f = F_MAX; break;
    case NB_OP_MIN: c.f = F_MIN; break;
    case NB_OP_NORM:
        if (a->s0 != 1 && a->s0 != 2) return NB_OK;
        c.f = a->s0 == 1 ? F_ADDABS : F_ADDSQ;
        break;
    case NB_OP_VAR:
        c.f = F_SQDEV;
        c.correction = a->i0;
        c.sqrt = a->flag;
        break;
    default: return NB_OK;
    }
    if (p->nr > 0 && p->rin[p->nr - 1] == 1) {
        NB_TRY(inner_in_order(&c, p, done));
        if (*done) return NB_OK;
        *done = true;
        return inner_mode(&c, p);
    }
    if (outer_fits(p)) {
        *done = true;
        return outer_mode(&c, p);
    }
    return NB_OK;
}

/* The first extreme of each of cw columns down R rows rst elements apart, and its row: a NaN
 * sticks, and a later equal value does not replace the first. In the columns' own type (the
 * comparisons are exact) and compiled for each vector width. */
#define COLS_FN(NAME, T)                                                                         \
    NB_CLONES static void NAME(const T *x0, int64_t rst, int64_t R, int64_t cw, int sign, T *restrict best,   \
                               int64_t *restrict at)                                             \
    {                                                                                            \
        for (int64_t j = 0; j < cw; j++) best[j] = x0[j], at[j] = 0;                             \
        for (int64_t r = 1; r < R; r++) {                                                        \
            const T *restrict x = x0 + r * rst;                                                  \
            if (sign > 0)                                                                        \
                for (int64_t j = 0; j < cw; j++) {                                               \
                    T v = x[j], b = best[j];                                                     \
                    bool take = b == b && (v != v || v > b);                                     \
                    best[j] = take ? v : b;                                                      \
                    at[j] = take ? r : at[j];                                                    \
                }                                                                                \
            else                                                                                 \
                for (int64_t j = 0; j < cw; j++) {                                               \
                    T v = x[j], b = best[j];                                                     \
                    bool take = b == b && (v != v || v < b);                                     \
                    best[j] = take ? v : b;                                                      \
                    at[j] = take ? r : at[j];                                                    \
                }                                                                                \
        }                                                                                        \
    }
COLS_FN(cols_extreme_f32, float)
COLS_FN(cols_extreme_f64, double)

/* MAX / MIN with positions and ARGMAX / ARGMIN over one dim whose neighbour in memory is kept
 * (the channels of an NCHW [N, C, H, W]): the rows along the reduced dim are compared into a block
 * of columns at a time, with the reference's rules (the first extreme wins, and the first NaN).
 * max_dim over dim 1 of [128, 32, 28, 28] at 1 thread: 19.7 ms on the reference's strided walk
 * per output, 8.3 with the columns compared in double, 0.6-0.8 in their own type by
 * cols_extreme (PyTorch 7.5). *done: it did. */
#define EXTREME_CB 1024
static nb_status extreme_outer(nb_op op, const nb_kargs *a, const rplan *p, bool *done)
{
    const nb_tensor *in = a->in[0];
    bool arg = op == NB_OP_ARGMAX || op == NB_OP_ARGMIN;
    bool f32 = in->dtype == NB_FLOAT32;
    *done = false;
    if ((!f32 && in->dtype != NB_FLOAT64) || p->nr != 1 || !outer_fits(p) ||
        (!arg && (!a->out2 || p->ko2[p->nk - 1] != 1)))
        return NB_OK;
    int sign = op == NB_OP_MAX || op == NB_OP_ARGMAX ? 1 : -1;
    int64_t K = p->ks[p->nk - 1], nko = p->nout / K, nch = (K + EXTREME_CB - 1) / EXTREME_CB;
    int64_t R = p->rs[0], rst = p->rin[0], es = f32 ? 4 : 8;
    const char *ib = nb__data(in);
    char *ob = nb__data(a->out), *o2b = a->out2 ? nb__data(a->out2) : NULL;
    int nt = nb_cpu_threads_for(p->nout * R, 0);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t it = 0; it < nko * nch; it++) {
        float bestf[EXTREME_CB];
        double bestd[EXTREME_CB];
        int64_t at[EXTREME_CB];
        int64_t ko = it / nch, c0 = (it % nch) * EXTREME_CB, cw = K - c0 < EXTREME_CB ? K - c0 : EXTREME_CB;
        const char *x0 = ib + (offset_of(ko, p->nk - 1, p->ks, p->kin) + c0) * es;
        if (f32) cols_extreme_f32((const float *)x0, rst, R, cw, sign, bestf, at);
        else cols_extreme_f64((const double *)x0, rst, R, cw, sign, bestd, at);
        int64_t oo = offset_of(ko, p->nk - 1, p->ks, p->ko) + c0;
        if (arg) {
            for (int64_t j = 0; j < cw; j++) ((int64_t *)ob)[oo + j] = at[j];
            continue;
        }
        if (f32) memcpy((float *)ob + oo, bestf, (size_t)cw * sizeof(float));
        else memcpy((double *)ob + oo, bestd, (size_t)cw * sizeof(double));
        int64_t o2 = offset_of(ko, p->nk - 1, p->ks, p->ko2) + c0;
        for (int64_t j = 0; j < cw; j++) ((int64_t *)o2b)[o2 + j] = at[j];
    }
    *done = true;
    return NB_OK;
}

/* The first position of the extreme of n >= 1 elements (the first NaN wins), one pass. */
#define FIRST_FN(NAME, T)                                                                        \
    static int64_t NAME(const T *x, int64_t n, int sign)                                         \
    {                                                                                            \
        T b = x[0];                                                                              \
        int64_t at = 0;                                                                          \
        if (b != b) return 0;                                                                    \
        for (int64_t i = 1; i < n; i++) {                                                        \
            T v = x[i];                                                                          \
            if (v != v) return i;                                                                \
            if (sign > 0 ? v > b : v < b) b = v, at = i;                                         \
        }                                                                                        \
        return at;                                                                               \
    }
FIRST_FN(first_extreme_f32, float)
FIRST_FN(first_extreme_f64, double)

/* v: the vector kernels for float32 x (nb__reduce_vec), or NULL. */
static int64_t first_extreme(const nb_reduce_vec *v, bool f32, const char *x, int64_t n, int sign)
{
    if (v) return v->first_extreme((const float *)x, n, sign);
    return f32 ? first_extreme_f32((const float *)x, n, sign) : first_extreme_f64((const double *)x, n, sign);
}

/* MAX / MIN with positions and ARGMAX / ARGMIN over one run of unit stride per output (the
 * channels of a channels-last [N, C, H, W], the last dim of a row-major tensor): each output's
 * first extreme by first_extreme. With fewer outputs than threads each run is cut in pieces,
 * whose firsts are merged in order (a NaN first, then the larger, the earlier on ties). argmax
 * over the channels of a channels-last [128, 32, 28, 28] at 1 thread: 18-20 ms on the
 * reference's walk per output. *done: it did. */
static nb_status extreme_inner(nb_op op, const nb_kargs *a, const rplan *p, bool *done)
{
    const nb_tensor *in = a->in[0];
    bool arg = op == NB_OP_ARGMAX || op == NB_OP_ARGMIN, f32 = in->dtype == NB_FLOAT32;
    *done = false;
    if ((!f32 && in->dtype != NB_FLOAT64) || p->nr != 1 || p->rin[0] != 1 || (!arg && !a->out2)) return NB_OK;
    int sign = op == NB_OP_MAX || op == NB_OP_ARGMAX ? 1 : -1;
    int64_t L = p->rs[0], es = f32 ? 4 : 8;
    const nb_reduce_vec *vec = f32 ? nb__reduce_vec() : NULL;
    const char *ib = nb__data(in);
    char *ob = nb__data(a->out), *o2b = a->out2 ? nb__data(a->out2) : NULL;
    int nt = nb_cpu_threads_for(p->nout * L, 0);
    if (nt > 256) nt = 256;
#define PUT(o_off, o2_off, at, x)                                                                \
    do {                                                                                         \
        if (arg) {                                                                               \
            ((int64_t *)ob)[o_off] = (at);                                                       \
            break;                                                                               \
        }                                                                                        \
        if (f32) ((float *)ob)[o_off] = ((const float *)(x))[at];                                 \
        else ((double *)ob)[o_off] = ((const double *)(x))[at];                                  \
        ((int64_t *)o2b)[o2_off] = (at);                                                         \
    } while (0)
    if (p->nout >= nt) {
#pragma omp parallel num_threads(nt)
        {
            int t, n;
            nb_cpu_thread_pos(&t, &n);
            FOR_KEPT(p, p->nout * t / n, p->nout * (t + 1) / n, o, wi, wo, w2, {
                const char *x = ib + wi.off * es;
                int64_t at = first_extreme(vec, f32, x, L, sign);
                PUT(wo.off, w2.off, at, x);
            });
        }
    } else {
        for (int64_t o = 0; o < p->nout; o++) { /* few outputs: offset_of for each is cheap */
            const char *x = ib + offset_of(o, p->nk, p->ks, p->kin) * es;
            int64_t part[256];
            int used = nt;
#pragma omp parallel num_threads(nt)
            {
                int t, n;
                nb_cpu_thread_pos(&t, &n);
                int64_t q0 = L * t / n, q1 = L * (t + 1) / n;
                part[t] = q1 > q0 ? q0 + first_extreme(vec, f32, x + q0 * es, q1 - q0, sign) : -1;
                if (t == 0) used = n;
            }
            int64_t at = -1;
            for (int k = 0; k < used; k++) {
                if (part[k] < 0) continue;
                if (at < 0) {
                    at = part[k];
                    continue;
                }
                double b = f32 ? ((const float *)x)[at] : ((const double *)x)[at];
                double v = f32 ? ((const float *)x)[part[k]] : ((const double *)x)[part[k]];
                if (b == b && (v != v || (sign > 0 ? v > b : v < b))) at = part[k];
            }
            PUT(offset_of(o, p->nk, p->ks, p->ko), offset_of(o, p->nk, p->ks, p->ko2), at, x);
        }
    }
#undef PUT
    *done = true;
    return NB_OK;
}

/* When the input's innermost dim is kept but the output is laid out in another order (the sum
 * over dim 0 of a channels-last [N, C, H, W] into a contiguous [C, H, W]: 20-35 ms on the
 * reference path for [128, 32, 28, 28]), the outer mode runs into a scratch output laid out as
 * the input's kept dims are, which is then copied into out. *done: it did. */
static nb_status via_scratch(nb_op op, const nb_kargs *a, const rplan *p0, bool *done)
{
    const nb_tensor *in = a->in[0], *out = a->out;
    *done = false;
    int nd = out->ndim;
    if (a->out2 || nd != in->ndim || nd < 2 || !nb_dtype_is_floating(in->dtype) || out->dtype != in->dtype ||
        !unit_kept(p0))
        return NB_OK;
    int perm[NB_MAX_DIMS];
    int64_t pshape[NB_MAX_DIMS], st[NB_MAX_DIMS];
    for (int d = 0; d < nd; d++) perm[d] = d;
    sort_dims(perm, nd, in->strides);
    for (int k = 0; k < nd; k++) pshape[k] = out->shape[perm[k]];
    nb_tensor *buf = nb__tensor_new(pshape, nd, out->dtype, out->storage->device);
    if (!buf) return nb_last_status();
    for (int k = 0; k < nd; k++) st[perm[k]] = buf->strides[k];
    nb_tensor *tmp = nb__tensor_alias(buf, out->shape, st, nd, 0);
    nb_status rc = tmp ? NB_OK : nb_last_status();
    if (tmp) {
        nb_kargs b = *a;
        b.out = tmp;
        rplan p;
        plan_init(&p, &b, true);
        if (outer_fits(&p)) rc = try_fast(op, &b, &p, done);
        if (rc == NB_OK && *done) {
            nb_kargs c = {.out = a->out, .in = {tmp}};
            rc = nb_cpu_k_copy(NB_OP_COPY, &c);
        }
    }
    nb__release(tmp);
    nb__release(buf);
    return rc;
}

nb_status nb_cpu_k_reduce(nb_op op, const nb_kargs *a)
{
    const nb_tensor *in = a->in[0];
    if (in->dtype == NB_FLOAT16 || in->dtype == NB_BFLOAT16 || (unsigned)in->dtype >= NB_DTYPE_COUNT)
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported on the CPU", nb__op_name(op),
                       nb_dtype_name(in->dtype));
    rplan p;
    bool positions = op == NB_OP_ARGMAX || op == NB_OP_ARGMIN || a->out2;
    plan_init(&p, a, !positions);
    if (p.nout == 0) return NB_OK;
    bool extreme = op == NB_OP_MAX || op == NB_OP_MIN || op == NB_OP_ARGMAX || op == NB_OP_ARGMIN;
    if (extreme && p.nred == 0)
        return nb__err(NB_ERR_INVALID_ARG, "%s: cannot reduce over a dim of size 0", nb__op_name(op));
    bool done;
    NB_TRY(try_fast(op, a, &p, &done));
    if (!done && positions) NB_TRY(extreme_inner(op, a, &p, &done));
    if (!done && positions) NB_TRY(extreme_outer(op, a, &p, &done));
    if (!done && !positions) NB_TRY(via_scratch(op, a, &p, &done));
    if (!done) nb__reduce_reference(op, a, &p);
    return NB_OK;
}
