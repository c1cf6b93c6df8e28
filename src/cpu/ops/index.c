/* Kernels: indexing along one dim (i0 = dim). Index tensors are int64 or int32, any strides.
 *   INDEX_SELECT: in = (self, index [n]);  out = self with size n at dim:
 *                 out[.., i, ..] = self[.., index[i], ..]
 *   INDEX_ADD:    in = (index [n], src);   in place: out[.., index[i], ..] += src[.., i, ..]
 *   GATHER:       in = (self, index);      out has index's shape (index.ndim == self.ndim):
 *                 out[p] = self[p with p[dim] = index[p]]
 *   SCATTER:      in = (index, src or NULL for the scalar s0); in place:
 *                 out[p with p[dim] = index[p]] = src[p]   for p over index's shape
 *   SCATTER_ADD:  the same with +=
 *   MASKED_FILL:  in = (mask bool, broadcast to out);  in place: out[p] = s0 where mask[p]
 *   ONE_HOT:      in = (index [...]);      out int64 [..., C]: out[.., index[..]] = 1, else 0
 * Every index is checked before anything is written: out of range is an error naming the op,
 * the value, the dim and its size. The writes that add (INDEX_ADD, SCATTER_ADD) split work only
 * by the positions off `dim`, so that two threads never write one element. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_impl.h"

static inline int64_t read_index(const char *p, bool i32)
{
    return i32 ? (int64_t) * (const int32_t *)p : *(const int64_t *)p;
}

/* ---- range checks --------------------------------------------------------------------------- */

typedef struct range_ctx {
    int64_t size;
    bool i32;
    atomic_int found;
    int64_t bad;
} range_ctx;

static void range_loop(char **p, const int64_t *s, int64_t n, void *vctx)
{
    range_ctx *c = vctx;
    for (int64_t k = 0; k < n; k++) {
        int64_t v = read_index(p[0] + k * s[0], c->i32);
        if (v < 0 || v >= c->size) {
            int expect = 0;
            if (atomic_compare_exchange_strong(&c->found, &expect, 1)) c->bad = v;
            return;
        }
    }
}

/* Every value of idx in [0, size): else the op's error. */
static nb_status check_range(nb_op op, const nb_tensor *idx, int64_t size, int64_t dim)
{
    if (idx->dtype != NB_INT64 && idx->dtype != NB_INT32)
        return nb__err(NB_ERR_DTYPE, "%s: index must be int64 or int32, got %s", nb__op_name(op),
                       nb_dtype_name(idx->dtype));
    range_ctx c = {.size = size, .i32 = idx->dtype == NB_INT32, .bad = 0};
    atomic_init(&c.found, 0);
    nb_cpu_iter it;
    nb_cpu_iter_elementwise(&it, (nb_tensor *)idx, NULL, 0);
    nb_cpu_iter_run(&it, range_loop, &c, 0);
    if (!atomic_load(&c.found)) return NB_OK;
    if (op == NB_OP_ONE_HOT)
        return nb__err(NB_ERR_INVALID_ARG, "one_hot: index %lld is out of range for num_classes %lld",
                       (long long)c.bad, (long long)size);
    return nb__err(NB_ERR_INVALID_ARG, "%s: index %lld is out of range for dim %lld of size %lld", nb__op_name(op),
                   (long long)c.bad, (long long)dim, (long long)size);
}

/* A 1-D index as a malloc'd int64 array (checked against size). */
static nb_status index_array(nb_op op, const nb_tensor *idx, int64_t size, int64_t dim, int64_t **out)
{
    *out = NULL;
    NB_TRY(check_range(op, idx, size, dim));
    int64_t n = nb__numel(idx->shape, idx->ndim);
    int64_t *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) return nb__err(NB_ERR_OOM, "%s: out of memory", nb__op_name(op));
    const char *base = nb__data(idx);
    int64_t st = (idx->ndim ? idx->strides[0] : 0) * (int64_t)nb_dtype_size(idx->dtype);
    bool i32 = idx->dtype == NB_INT32;
    for (int64_t i = 0; i < n; i++) v[i] = read_index(base + i * st, i32);
    *out = v;
    return NB_OK;
}

/* ---- the strided walk over every position off `dim` ----------------------------------------- */

/* Operands of a walk: for each, base address, byte strides over `shape` (whose `dim` is
 * collapsed to 1), and the byte stride along dim. Loops get the run of positions off dim and
 * iterate over dim themselves, so parallel runs never share a destination. */
typedef struct walk_ctx {
    int64_t k;           /* positions along dim the loop visits: n (index_select/add) or index.size(dim) */
    int64_t dstride[3];  /* per operand: byte stride along dim */
    const int64_t *idx;  /* INDEX_SELECT / INDEX_ADD: the checked index */
    bool i32;            /* GATHER / SCATTER: the index dtype */
    size_t es;
    uint64_t bits;       /* SCATTER with a scalar: the value in out's dtype */
} walk_ctx;

static void walk(const int64_t *shape, int ndim, int64_t dim, int nops, const nb_tensor *const *ts,
                 nb_cpu_loop_fn loop, walk_ctx *c)
{
    int64_t sh[NB_MAX_DIMS], st[NB_ITER_MAX_OPS][NB_MAX_DIMS];
    char *base[NB_ITER_MAX_OPS];
    memcpy(sh, shape, (size_t)ndim * sizeof *sh);
    sh[dim] = 1;
    for (int k = 0; k < nops; k++) {
        int64_t es = (int64_t)nb_dtype_size(ts[k]->dtype);
        base[k] = nb__data(ts[k]);
        for (int d = 0; d < ndim; d++) st[k][d] = ts[k]->strides[d] * es;
        c->dstride[k] = ts[k]->strides[dim] * es;
    }
    nb_cpu_iter it;
    nb_cpu_iter_init(&it, sh, ndim, nops, base, (const int64_t(*)[NB_MAX_DIMS])st);
    if (c->k == 0 || it.numel == 0) return;
    int64_t grain = NB_CPU_GRAIN / c->k;
    nb_cpu_iter_run(&it, loop, c, grain > 0 ? grain : 1);
}

/* Moves elements as bits of their size: the copying ops need no per-dtype code. */
#define FOR_ES(es, BODY)                                                                         \
    switch (es) {                                                                                \
    case 1: { typedef uint8_t E; BODY; } break;                                                  \
    case 2: { typedef uint16_t E; BODY; } break;                                                 \
    case 4: { typedef uint32_t E; BODY; } break;                                                 \
    default: { typedef uint64_t E; BODY; } break;                                                \
    }

/* ops 0 = out, 1 = self */
static void index_select_loop(char **p, const int64_t *s, int64_t n, void *vctx)
{
    const walk_ctx *c = vctx;
    FOR_ES(c->es, {
        for (int64_t i = 0; i < c->k; i++) {
            char *o = p[0] + i * c->dstride[0];
            const char *x = p[1] + c->idx[i] * c->dstride[1];
            for (int64_t j = 0; j < n; j++) *(E *)(o + j * s[0]) = *(const E *)(x + j * s[1]);
        }
    });
}

/* ops 0 = out, 1 = self, 2 = index */
static void gather_loop(char **p, const int64_t *s, int64_t n, void *vctx)
{
    const walk_ctx *c = vctx;
    FOR_ES(c->es, {
        for (int64_t i = 0; i < c->k; i++) {
            char *o = p[0] + i * c->dstride[0];
            const char *ix = p[2] + i * c->dstride[2];
            for (int64_t j = 0; j < n; j++) {
                int64_t v = read_index(ix + j * s[2], c->i32);
                *(E *)(o + j * s[0]) = *(const E *)(p[1] + j * s[1] + v * c->dstride[1]);
            }
        }
    });
}

/* ops 0 = out, 1 = index, 2 = src */
static void scatter_loop(char **p, const int64_t *s, int64_t n, void *vctx)
{
    const walk_ctx *c = vctx;
    FOR_ES(c->es, {
        for (int64_t i = 0; i < c->k; i++) {
            const char *ix = p[1] + i * c->dstride[1];
            const char *x = p[2] + i * c->dstride[2];
            for (int64_t j = 0; j < n; j++) {
                int64_t v = read_index(ix + j * s[1], c->i32);
                *(E *)(p[0] + j * s[0] + v * c->dstride[0]) = *(const E *)(x + j * s[2]);
            }
        }
    });
}

/* SCATTER with a scalar: ops 0 = out, 1 = index; c->bits = the value in out's dtype */
static void scatter_value_loop(char **p, const int64_t *s, int64_t n, void *vctx)
{
    const walk_ctx *c = vctx;
    FOR_ES(c->es, {
        E val;
        memcpy(&val, &c->bits, sizeof val);
        for (int64_t i = 0; i < c->k; i++) {
            const char *ix = p[1] + i * c->dstride[1];
            for (int64_t j = 0; j < n; j++)
                *(E *)(p[0] + j * s[0] + read_index(ix + j * s[1], c->i32) * c->dstride[0]) = val;
        }
    });
}

#define ADD_LOOPS(T, name)                                                                       \
    /* INDEX_ADD, ops 0 = out, 1 = src */                                                        \
    static void index_add_##name(char **p, const int64_t *s, int64_t n, void *vctx)             \
    {                                                                                            \
        const walk_ctx *c = vctx;                                                                \
        bool contig = s[0] == sizeof(T) && s[1] == sizeof(T);                                    \
        for (int64_t i = 0; i < c->k; i++) {                                                     \
            char *o = p[0] + c->idx[i] * c->dstride[0];                                          \
            const char *x = p[1] + i * c->dstride[1];                                            \
            if (contig) {                                                                        \
                T *restrict ot = (T *)o;                                                         \
                const T *restrict xt = (const T *)x;                                             \
                for (int64_t j = 0; j < n; j++) ot[j] += xt[j];                                  \
            } else {                                                                             \
                for (int64_t j = 0; j < n; j++) *(T *)(o + j * s[0]) += *(const T *)(x + j * s[1]); \
            }                                                                                    \
        }                                                                                        \
    }                                                                                            \
    /* SCATTER_ADD, ops 0 = out, 1 = index, 2 = src */                                           \
    static void scatter_add_##name(char **p, const int64_t *s, int64_t n, void *vctx)           \
    {                                                                                            \
        const walk_ctx *c = vctx;                                                                \
        for (int64_t i = 0; i < c->k; i++) {                                                     \
            const char *ix = p[1] + i * c->dstride[1];                                           \
            const char *x = p[2] + i * c->dstride[2];                                            \
            for (int64_t j = 0; j < n; j++) {                                                    \
                int64_t v = read_index(ix + j * s[1], c->i32);                                   \
                *(T *)(p[0] + j * s[0] + v * c->dstride[0]) += *(const T *)(x + j * s[2]);       \
            }                                                                                    \
        }                                                                                        \
    }
ADD_LOOPS(float, f32)
ADD_LOOPS(double, f64)
ADD_LOOPS(int64_t, i64)
ADD_LOOPS(int32_t, i32)
ADD_LOOPS(uint8_t, u8)

static nb_status add_loops(nb_op op, nb_dtype dt, nb_cpu_loop_fn *index_add, nb_cpu_loop_fn *scatter_add)
{
    switch (dt) {
#define CASE(DT, name)                                                                           \
    case DT: *index_add = index_add_##name; *scatter_add = scatter_add_##name; return NB_OK;
        CASE(NB_FLOAT32, f32)
        CASE(NB_FLOAT64, f64)
        CASE(NB_INT64, i64)
        CASE(NB_INT32, i32)
        CASE(NB_UINT8, u8)
#undef CASE
    default:
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported on the CPU", nb__op_name(op), nb_dtype_name(dt));
    }
}

/* ---- the ops -------------------------------------------------------------------------------- */

/* The fast path for contiguous self and out, viewed as [outer, size, inner] -> [outer, n, inner]:
 * whole rows of `inner` elements, in parallel over (outer, n). */
static void index_select_rows(const nb_kargs *a, int64_t dim, const int64_t *idx, int64_t n)
{
    const nb_tensor *self = a->in[0];
    int64_t outer = nb__numel(self->shape, (int)dim), inner = nb__numel(self->shape + dim + 1, self->ndim - (int)dim - 1);
    int64_t size = self->shape[dim];
    size_t es = nb_dtype_size(self->dtype), row = (size_t)inner * es;
    char *out = nb__data(a->out);
    const char *x = nb__data(self);
    int nt = nb_cpu_threads_for(outer * n * inner, NB_CPU_GRAIN);
    if (row == 4) { /* one element a row: a typed gather */
        uint32_t *o = (uint32_t *)out;
        const uint32_t *xs = (const uint32_t *)x;
#pragma omp parallel for collapse(2) num_threads(nt) schedule(static)
        for (int64_t r = 0; r < outer; r++)
            for (int64_t i = 0; i < n; i++) o[r * n + i] = xs[r * size + idx[i]];
        return;
    }
    if (row == 8) {
        uint64_t *o = (uint64_t *)out;
        const uint64_t *xs = (const uint64_t *)x;
#pragma omp parallel for collapse(2) num_threads(nt) schedule(static)
        for (int64_t r = 0; r < outer; r++)
            for (int64_t i = 0; i < n; i++) o[r * n + i] = xs[r * size + idx[i]];
        return;
    }
#pragma omp parallel for collapse(2) num_threads(nt) schedule(static)
    for (int64_t r = 0; r < outer; r++)
        for (int64_t i = 0; i < n; i++)
            memcpy(out + (size_t)(r * n + i) * row, x + (size_t)(r * size + idx[i]) * row, row);
}

static nb_status index_select(nb_op op, const nb_kargs *a)
{
    const nb_tensor *self = a->in[0], *index = a->in[1];
    int64_t dim = a->i0, *idx;
    NB_TRY(index_array(op, index, self->shape[dim], dim, &idx));
    int64_t n = nb__numel(index->shape, index->ndim);
    if (nb__is_contiguous(self) && nb__is_contiguous(a->out)) {
        index_select_rows(a, dim, idx, n);
    } else {
        walk_ctx c = {.k = n, .idx = idx, .es = nb_dtype_size(self->dtype)};
        walk(a->out->shape, a->out->ndim, dim, 2, (const nb_tensor *const[]){a->out, self}, index_select_loop, &c);
    }
    free(idx);
    return NB_OK;
}

static nb_status index_add(nb_op op, const nb_kargs *a)
{
    const nb_tensor *index = a->in[0], *src = a->in[1];
    int64_t dim = a->i0, *idx;
    nb_cpu_loop_fn loop = NULL, unused = NULL;
    NB_TRY(add_loops(op, a->out->dtype, &loop, &unused));
    int64_t n = nb__numel(index->shape, index->ndim);
    if (src->ndim != a->out->ndim || src->shape[dim] != n)
        return nb__err(NB_ERR_INTERNAL, "index_add: src has %lld positions at dim %lld for an index of %lld",
                       (long long)(src->ndim > dim ? src->shape[dim] : -1), (long long)dim, (long long)n);
    NB_TRY(index_array(op, index, a->out->shape[dim], dim, &idx));
    walk_ctx c = {.k = n, .idx = idx};
    walk(src->shape, src->ndim, dim, 2, (const nb_tensor *const[]){a->out, src}, loop, &c);
    free(idx);
    return NB_OK;
}

static nb_status gather(nb_op op, const nb_kargs *a)
{
    const nb_tensor *self = a->in[0], *index = a->in[1];
    int64_t dim = a->i0;
    NB_TRY(check_range(op, index, self->shape[dim], dim));
    walk_ctx c = {.k = index->shape[dim], .i32 = index->dtype == NB_INT32, .es = nb_dtype_size(self->dtype)};
    walk(index->shape, index->ndim, dim, 3, (const nb_tensor *const[]){a->out, self, index}, gather_loop, &c);
    return NB_OK;
}

static nb_status scatter(nb_op op, const nb_kargs *a)
{
    const nb_tensor *index = a->in[0], *src = a->in[1];
    int64_t dim = a->i0;
    nb_cpu_loop_fn loop = scatter_loop, unused = NULL;
    if (op == NB_OP_SCATTER_ADD) NB_TRY(add_loops(op, a->out->dtype, &unused, &loop));
    if (!src && op == NB_OP_SCATTER) loop = scatter_value_loop;
    else if (!src) return nb__err(NB_ERR_INVALID_ARG, "scatter_add: no source tensor");
    NB_TRY(check_range(op, index, a->out->shape[dim], dim));
    walk_ctx c = {.k = index->shape[dim], .i32 = index->dtype == NB_INT32, .es = nb_dtype_size(a->out->dtype)};
    if (!src) NB_TRY(nb__value_bits(op, a->out->dtype, a->s0, &c.bits));
    const nb_tensor *ops[3] = {a->out, index, src};
    walk(index->shape, index->ndim, dim, src ? 3 : 2, ops, loop, &c);
    return NB_OK;
}

typedef struct fill_ctx {
    size_t es;
    uint64_t bits;
} fill_ctx;

/* ops 0 = out, 1 = mask */
static void masked_fill_loop(char **p, const int64_t *s, int64_t n, void *vctx)
{
    const fill_ctx *c = vctx;
    FOR_ES(c->es, {
        E v;
        memcpy(&v, &c->bits, sizeof v);
        if (s[0] == sizeof(E) && s[1] == 1) {
            E *restrict o = (E *)p[0];
            const bool *restrict m = (const bool *)p[1];
            for (int64_t k = 0; k < n; k++) o[k] = m[k] ? v : o[k];
        } else {
            for (int64_t k = 0; k < n; k++)
                if (*(const bool *)(p[1] + k * s[1])) *(E *)(p[0] + k * s[0]) = v;
        }
    });
}

static nb_status masked_fill(nb_op op, const nb_kargs *a)
{
    if (a->in[0]->dtype != NB_BOOL)
        return nb__err(NB_ERR_DTYPE, "masked_fill: mask must be bool, got %s", nb_dtype_name(a->in[0]->dtype));
    fill_ctx c = {.es = nb_dtype_size(a->out->dtype)};
    NB_TRY(nb__value_bits(op, a->out->dtype, a->s0, &c.bits));
    nb_cpu_iter it;
    nb_cpu_iter_elementwise(&it, a->out, &a->in[0], 1);
    nb_cpu_iter_run(&it, masked_fill_loop, &c, 0);
    return NB_OK;
}

/* ops 0 = out (its leading dims), 1 = index; c->dstride[0] = out's last stride in bytes */
static void one_hot_loop(char **p, const int64_t *s, int64_t n, void *vctx)
{
    const walk_ctx *c = vctx;
    for (int64_t k = 0; k < n; k++)
        *(int64_t *)(p[0] + k * s[0] + read_index(p[1] + k * s[1], c->i32) * c->dstride[0]) = 1;
}

static nb_status one_hot(nb_op op, const nb_kargs *a)
{
    const nb_tensor *index = a->in[0];
    nb_tensor *out = a->out;
    int64_t classes = out->shape[out->ndim - 1];
    if (out->dtype != NB_INT64) return nb__err(NB_ERR_DTYPE, "one_hot: output must be int64");
    NB_TRY(check_range(op, index, classes, 0));
    NB_TRY(nb_cpu_k_fill(NB_OP_FILL, &(nb_kargs){.out = out, .s0 = 0}));
    int nd = index->ndim;
    int64_t st[2][NB_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        st[0][d] = out->strides[d] * 8;
        st[1][d] = index->strides[d] * (int64_t)nb_dtype_size(index->dtype);
    }
    walk_ctx c = {.i32 = index->dtype == NB_INT32, .dstride = {out->strides[nd] * 8}};
    nb_cpu_iter it;
    nb_cpu_iter_init(&it, index->shape, nd, 2, (char *const[]){nb__data(out), nb__data(index)},
                     (const int64_t(*)[NB_MAX_DIMS])st);
    nb_cpu_iter_run(&it, one_hot_loop, &c, 0);
    return NB_OK;
}

nb_status nb_cpu_k_index(nb_op op, const nb_kargs *a)
{
    switch (op) {
    case NB_OP_INDEX_SELECT: return index_select(op, a);
    case NB_OP_INDEX_ADD: return index_add(op, a);
    case NB_OP_GATHER: return gather(op, a);
    case NB_OP_SCATTER:
    case NB_OP_SCATTER_ADD: return scatter(op, a);
    case NB_OP_MASKED_FILL: return masked_fill(op, a);
    case NB_OP_ONE_HOT: return one_hot(op, a);
    default: return nb__err(NB_ERR_INTERNAL, "index kernels: unexpected op %s", nb__op_name(op));
    }
}
