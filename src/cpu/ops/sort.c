/* Kernels: sorting along one dim (i0 = dim).
 *   SORT: in[0] [.., n, ..] -> out (values, same shape) and out2 (int64 positions along dim);
 *         flag = descending. Stable: equal values keep their order. NaN sorts as the largest
 *         value, as in PyTorch (last ascending, first descending).
 *   TOPK: the same with out/out2 of size k at dim (i1 = k): the k largest (flag) or smallest
 *         values, in sorted order.
 * Each line along dim is copied into a per-thread scratch array of (value, position) pairs,
 * ordered there, and written back. Lines run in parallel above the grain. Sorting is a stable
 * merge sort; a small top-k keeps a sorted buffer of the k best instead (n log k). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_impl.h"

/* Whether a goes strictly before b: ascending or descending, NaN (x != x) the largest. */
#define BEFORE_ASC(a, b) ((a) < (b) || ((b) != (b) && (a) == (a)))
#define BEFORE_DESC(a, b) ((a) > (b) || ((a) != (a) && (b) == (b)))

typedef struct line_geo {
    int64_t n;          /* the input's size at dim */
    int64_t m;          /* values written per line: n (sort) or k (topk) */
    int64_t in_ds, out_ds, idx_ds; /* element strides along dim */
} line_geo;

/* Generates, for element type T: pair type, insertion + merge sort, top-k selection, and the
 * per-line driver, for one direction (DIR = ASC or DESC). */
#define SORT_IMPL(T, name, DIR)                                                                  \
    typedef struct pair_##name##_##DIR {                                                         \
        T v;                                                                                     \
        int64_t i;                                                                               \
    } pair_##name##_##DIR;                                                                       \
    typedef pair_##name##_##DIR P_##name##_##DIR;                                                \
                                                                                                 \
    static void msort_##name##_##DIR(P_##name##_##DIR *a, P_##name##_##DIR *tmp, int64_t n)      \
    {                                                                                            \
        enum { RUN = 16 };                                                                       \
        for (int64_t lo = 0; lo < n; lo += RUN) { /* insertion sort of short runs */             \
            int64_t hi = lo + RUN < n ? lo + RUN : n;                                            \
            for (int64_t i = lo + 1; i < hi; i++) {                                              \
                P_##name##_##DIR x = a[i];                                                       \
                int64_t j = i;                                                                   \
                while (j > lo && BEFORE_##DIR(x.v, a[j - 1].v)) {                                \
                    a[j] = a[j - 1];                                                             \
                    j--;                                                                         \
                }                                                                                \
                a[j] = x;                                                                        \
            }                                                                                    \
        }                                                                                        \
        P_##name##_##DIR *src = a, *dst = tmp;                                                   \
        for (int64_t w = RUN; w < n; w *= 2) {                                                   \
            for (int64_t lo = 0; lo < n; lo += 2 * w) {                                          \
                int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;     \
                int64_t i = lo, j = mid, o = lo;                                                 \
                while (i < mid && j < hi) /* the left run wins ties: stable */                   \
                    dst[o++] = BEFORE_##DIR(src[j].v, src[i].v) ? src[j++] : src[i++];           \
                while (i < mid) dst[o++] = src[i++];                                             \
                while (j < hi) dst[o++] = src[j++];                                              \
            }                                                                                    \
            P_##name##_##DIR *t = src;                                                           \
            src = dst;                                                                           \
            dst = t;                                                                             \
        }                                                                                        \
        if (src != a) memcpy(a, src, (size_t)n * sizeof *a);                                     \
    }                                                                                            \
                                                                                                 \
    /* The first k of the line in order, keeping a sorted buffer (equal values: earlier first). */ \
    static void topk_small_##name##_##DIR(const char *x, int64_t xs, int64_t n, int64_t k,       \
                                          P_##name##_##DIR *buf)                                 \
    {                                                                                            \
        int64_t len = 0;                                                                         \
        for (int64_t i = 0; i < n; i++) {                                                        \
            T v = *(const T *)(x + i * xs);                                                      \
            if (len == k && !BEFORE_##DIR(v, buf[k - 1].v)) continue;                            \
            int64_t lo = 0, hi = len; /* first position whose value v goes before */             \
            while (lo < hi) {                                                                    \
                int64_t mid = (lo + hi) / 2;                                                     \
                if (BEFORE_##DIR(v, buf[mid].v)) hi = mid;                                       \
                else lo = mid + 1;                                                               \
            }                                                                                    \
            int64_t end = len < k ? len : k - 1;                                                 \
            memmove(buf + lo + 1, buf + lo, (size_t)(end - lo) * sizeof *buf);                   \
            buf[lo] = (P_##name##_##DIR){v, i};                                                  \
            if (len < k) len++;                                                                  \
        }                                                                                        \
    }                                                                                            \
                                                                                                 \
    static void line_##name##_##DIR(const char *x, char *out, int64_t *idx, const line_geo *g,   \
                                    void *scratch)                                               \
    {                                                                                            \
        P_##name##_##DIR *buf = scratch;                                                         \
        int64_t n = g->n, m = g->m;                                                              \
        if (m < n && m <= 64) {                                                                  \
            topk_small_##name##_##DIR(x, g->in_ds * (int64_t)sizeof(T), n, m, buf);              \
        } else {                                                                                 \
            for (int64_t i = 0; i < n; i++) buf[i] = (P_##name##_##DIR){((const T *)x)[i * g->in_ds], i}; \
            msort_##name##_##DIR(buf, buf + n, n);                                               \
        }                                                                                        \
        for (int64_t i = 0; i < m; i++) {                                                        \
            ((T *)out)[i * g->out_ds] = buf[i].v;                                                \
            idx[i * g->idx_ds] = buf[i].i;                                                       \
        }                                                                                        \
    }

typedef void (*line_fn)(const char *x, char *out, int64_t *idx, const line_geo *g, void *scratch);

#define SORT_BOTH(T, name) SORT_IMPL(T, name, ASC) SORT_IMPL(T, name, DESC)
SORT_BOTH(float, f32)
SORT_BOTH(double, f64)
SORT_BOTH(int64_t, i64)
SORT_BOTH(int32_t, i32)
SORT_BOTH(uint8_t, u8)
SORT_BOTH(bool, b8)

static line_fn pick_line(nb_dtype dt, bool desc, size_t *pair_size)
{
#define CASE(DT, name)                                                                           \
    case DT:                                                                                     \
        *pair_size = sizeof(P_##name##_ASC);                                                     \
        return desc ? line_##name##_DESC : line_##name##_ASC;
    switch (dt) {
        CASE(NB_FLOAT32, f32)
        CASE(NB_FLOAT64, f64)
        CASE(NB_INT64, i64)
        CASE(NB_INT32, i32)
        CASE(NB_UINT8, u8)
        CASE(NB_BOOL, b8)
    default: return NULL;
    }
#undef CASE
}

/* The element offsets of line l in each of the three tensors (dim skipped). */
static void line_offsets(int64_t l, const int64_t *shape, int ndim, int64_t dim, const nb_tensor *const *ts,
                         int64_t *off)
{
    off[0] = off[1] = off[2] = 0;
    for (int d = ndim - 1; d >= 0; d--) {
        if (d == dim) continue;
        int64_t i = l % shape[d];
        l /= shape[d];
        for (int k = 0; k < 3; k++) off[k] += i * ts[k]->strides[d];
    }
}

nb_status nb_cpu_k_sort(nb_op op, const nb_kargs *a)
{
    const nb_tensor *in = a->in[0];
    nb_tensor *out = a->out, *idx = a->out2;
    int64_t dim = a->i0;
    bool desc = a->flag; /* SORT: descending; TOPK: largest first */
    size_t ps;
    line_fn fn = pick_line(in->dtype, desc, &ps);
    if (!fn) return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported on the CPU", nb__op_name(op), nb_dtype_name(in->dtype));
    if (idx->dtype != NB_INT64) return nb__err(NB_ERR_INTERNAL, "%s: indices must be int64", nb__op_name(op));
    line_geo g = {.n = in->shape[dim], .m = out->shape[dim], .in_ds = in->strides[dim],
                  .out_ds = out->strides[dim], .idx_ds = idx->strides[dim]};
    int64_t numel = nb__numel(in->shape, in->ndim);
    if (numel == 0 || g.m == 0) return NB_OK;
    int64_t lines = numel / g.n;
    size_t es = nb_dtype_size(in->dtype);
    const nb_tensor *ts[3] = {in, out, idx};
    size_t scratch_bytes = 2 * (size_t)g.n * ps;
    int nt = nb_cpu_threads_for(numel, NB_CPU_GRAIN);
    int failed = 0;
#pragma omp parallel num_threads(nt) reduction(| : failed)
    {
        void *scratch = malloc(scratch_bytes);
        failed = scratch == NULL;
#pragma omp for schedule(static)
        for (int64_t l = 0; l < lines; l++) {
            if (!scratch) continue;
            int64_t off[3];
            line_offsets(l, in->shape, in->ndim, dim, ts, off);
            fn(nb__data(in) + off[0] * (int64_t)es, nb__data(out) + off[1] * (int64_t)es,
               (int64_t *)nb__data(idx) + off[2], &g, scratch);
        }
        free(scratch);
    }
    if (failed) return nb__err(NB_ERR_OOM, "%s: out of memory for the sort's scratch space", nb__op_name(op));
    return NB_OK;
}
