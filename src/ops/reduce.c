/* Reductions: sum, mean, prod, var, std, logsumexp, norm, all, any, max, min (over everything or
 * along a dim), argmax, argmin. Each validates its dims, allocates the output in keepdim form for
 * the kernel, drops the reduced dims afterwards unless keepdim, and records autograd. */
#include <math.h>
#include <string.h>

#include "autograd/autograd_impl.h"

/* A reduction's geometry. */
typedef struct red {
    uint32_t mask;              /* reduced dims of the input */
    int ndim;                   /* the input's */
    int64_t keep[NB_MAX_DIMS];  /* keepdim shape */
    int nfinal;
    int64_t shape[NB_MAX_DIMS]; /* the result's shape */
    int64_t n;                  /* elements reduced into each output */
} red;

/* Validates dims (ndims == 0: every dim) and fills r. */
static nb_status red_init(const char *op, const nb_tensor *t, const int64_t *dims, int ndims, bool keepdim,
                          red *r)
{
    if (!t) return nb__err(NB_ERR_INVALID_ARG, "%s: NULL tensor", op);
    if (ndims < 0) return nb__err(NB_ERR_INVALID_ARG, "%s: ndims is %d (must be >= 0)", op, ndims);
    if (ndims > 0 && !dims) return nb__err(NB_ERR_INVALID_ARG, "%s: dims is NULL but ndims is %d", op, ndims);
    memset(r, 0, sizeof *r);
    uint32_t seen = 0;
    for (int i = 0; i < ndims; i++) {
        int64_t d;
        NB_TRY(nb__wrap_dim(op, dims[i], t->ndim, &d));
        if (seen >> d & 1)
            return nb__err(NB_ERR_INVALID_ARG, "%s: dim %lld appears multiple times in the list of dims", op,
                           (long long)d);
        seen |= 1u << d;
    }
    r->ndim = t->ndim;
    r->mask = ndims == 0 ? (uint32_t)((1u << t->ndim) - 1) : t->ndim ? seen : 0;
    r->n = 1;
    for (int d = 0; d < t->ndim; d++) {
        bool red_d = r->mask >> d & 1;
        r->keep[d] = red_d ? 1 : t->shape[d];
        if (red_d) r->n *= t->shape[d];
        if (!red_d || keepdim) r->shape[r->nfinal++] = r->keep[d];
    }
    return NB_OK;
}

/* Gives a fresh contiguous tensor the given shape (same number of elements, size-1 dims gone). */
static void set_shape(nb_tensor *t, const int64_t *shape, int ndim)
{
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    nb__contiguous_strides(t->shape, ndim, t->strides);
}

/* Runs the kernel for op into a new tensor of dtype odt (and int64 indices into *idx when idx is
 * not NULL); the results have r's final shape. Caller-owned, untracked. */
static nb_tensor *run(nb_op op, const nb_tensor *t, const red *r, nb_dtype odt, nb_kargs a, nb_tensor **idx)
{
    nb_device dev = t->storage->device;
    nb_tensor *out = nb__tensor_new(r->keep, r->ndim, odt, dev);
    nb_tensor *o2 = idx ? nb__tensor_new(r->keep, r->ndim, NB_INT64, dev) : NULL;
    if (!out || (idx && !o2)) goto fail;
    a.out = out;
    a.out2 = o2;
    a.in[0] = t;
    a.dim_mask = r->mask;
    if (nb__dispatch(op, &a) != NB_OK) goto fail;
    set_shape(out, r->shape, r->nfinal);
    if (o2) set_shape(o2, r->shape, r->nfinal);
    if (idx) *idx = o2;
    return out;
fail:
    nb__release(out);
    nb__release(o2);
    return NULL;
}

/* Records op for out (saving up to two tensors) and hands out to the scope. */
static nb_tensor *finish(nb_op op, nb_tensor *out, const nb_tensor *t, const red *r, bool keepdim,
                         const nb_tensor *s0, const nb_tensor *s1, nb_kargs a)
{
    nb_status st;
    const nb_tensor *save[2] = {s0, s1};
    nb_node *node = nb__record(op, out, &t, 1, save, s1 ? 2 : s0 ? 1 : 0, &st);
    if (st != NB_OK) {
        nb__release(out);
        return NULL;
    }
    if (node) {
        node->dim_mask = r->mask;
        node->flag = keepdim;
        node->i0 = a.i0;
        node->i1 = a.i1;
        node->s0 = a.s0;
    }
    return nb__track(out);
}

static nb_status need_float(const char *op, const nb_tensor *t)
{
    if (nb_dtype_is_floating(t->dtype)) return NB_OK;
    return nb__err(NB_ERR_DTYPE, "%s: input dtype must be floating point, got %s", op, nb_dtype_name(t->dtype));
}

/* The common shape of most reductions: validate, run, record. save_in / save_out pick what the
 * backward rule reads (slot 0 the input, then the output). */
static nb_tensor *reduce(nb_op op, const char *name, const nb_tensor *t, const int64_t *dims, int ndims,
                         bool keepdim, nb_dtype odt, nb_kargs a, bool save_in, bool save_out)
{
    red r;
    if (red_init(name, t, dims, ndims, keepdim, &r) != NB_OK) return NULL;
    nb_tensor *out = run(op, t, &r, odt, a, NULL);
    if (!out) return NULL;
    if (!nb_dtype_is_floating(odt)) return nb__track(out);
    const nb_tensor *s0 = save_in ? t : save_out ? out : NULL, *s1 = save_in && save_out ? out : NULL;
    return finish(op, out, t, &r, keepdim, s0, s1, a);
}

static nb_dtype int_to_int64(const nb_tensor *t) { return nb_dtype_is_floating(t->dtype) ? t->dtype : NB_INT64; }

nb_tensor *nb_sum(const nb_tensor *t, const int64_t *dims, int ndims, bool keepdim)
{
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "sum: NULL tensor");
    return reduce(NB_OP_SUM, "sum", t, dims, ndims, keepdim, int_to_int64(t), (nb_kargs){0}, false, false);
}

nb_tensor *nb_mean(const nb_tensor *t, const int64_t *dims, int ndims, bool keepdim)
{
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "mean: NULL tensor");
    if (need_float("mean", t) != NB_OK) return NULL;
    return reduce(NB_OP_MEAN, "mean", t, dims, ndims, keepdim, t->dtype, (nb_kargs){0}, false, false);
}

nb_tensor *nb_prod(const nb_tensor *t, const int64_t *dims, int ndims, bool keepdim)
{
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "prod: NULL tensor");
    return reduce(NB_OP_PROD, "prod", t, dims, ndims, keepdim, int_to_int64(t), (nb_kargs){0}, true, false);
}

nb_tensor *nb_var(const nb_tensor *t, const int64_t *dims, int ndims, int64_t correction, bool keepdim)
{
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "var: NULL tensor");
    if (need_float("var", t) != NB_OK) return NULL;
    nb_kargs a = {.i0 = correction};
    return reduce(NB_OP_VAR, "var", t, dims, ndims, keepdim, t->dtype, a, true, false);
}

/* std is the VAR kernel with its square-root flag; it records one StdBackward node. */
nb_tensor *nb_std(const nb_tensor *t, const int64_t *dims, int ndims, int64_t correction, bool keepdim)
{
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "std: NULL tensor");
    if (need_float("std", t) != NB_OK) return NULL;
    red r;
    if (red_init("std", t, dims, ndims, keepdim, &r) != NB_OK) return NULL;
    nb_kargs a = {.i0 = correction, .flag = true};
    nb_tensor *out = run(NB_OP_VAR, t, &r, t->dtype, a, NULL);
    return out ? finish(NB_OP_STD, out, t, &r, keepdim, t, out, a) : NULL;
}

nb_tensor *nb_logsumexp(const nb_tensor *t, const int64_t *dims, int ndims, bool keepdim)
{
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "logsumexp: NULL tensor");
    nb_dtype odt = nb_dtype_is_floating(t->dtype) ? t->dtype : NB_FLOAT32;
    return reduce(NB_OP_LOGSUMEXP, "logsumexp", t, dims, ndims, keepdim, odt, (nb_kargs){0}, true, true);
}

nb_tensor *nb_norm(const nb_tensor *t, double p, const int64_t *dims, int ndims, bool keepdim)
{
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "norm: NULL tensor");
    if (need_float("norm", t) != NB_OK) return NULL;
    if (isnan(p)) return nb__err_null(NB_ERR_INVALID_ARG, "norm: p is NaN");
    nb_kargs a = {.s0 = p};
    return reduce(NB_OP_NORM, "norm", t, dims, ndims, keepdim, t->dtype, a, true, true);
}

/* all / any give bool, or uint8 for uint8 input (PyTorch keeps uint8 there). */
nb_tensor *nb_all(const nb_tensor *t, const int64_t *dims, int ndims, bool keepdim)
{
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "all: NULL tensor");
    nb_dtype odt = t->dtype == NB_UINT8 ? NB_UINT8 : NB_BOOL;
    return reduce(NB_OP_ALL, "all", t, dims, ndims, keepdim, odt, (nb_kargs){0}, false, false);
}

nb_tensor *nb_any(const nb_tensor *t, const int64_t *dims, int ndims, bool keepdim)
{
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "any: NULL tensor");
    nb_dtype odt = t->dtype == NB_UINT8 ? NB_UINT8 : NB_BOOL;
    return reduce(NB_OP_ANY, "any", t, dims, ndims, keepdim, odt, (nb_kargs){0}, false, false);
}

/* ---- max / min / argmax / argmin ------------------------------------------------------------- */

/* Over every element: i1 = 0 tells the rule to share the gradient among ties. */
static nb_tensor *extreme_all(nb_op op, const char *name, const nb_tensor *t)
{
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "%s: NULL tensor", name);
    if (nb_tensor_numel(t) == 0)
        return nb__err_null(NB_ERR_INVALID_ARG,
                            "%s: the tensor is empty (a reduction over all elements needs at least one; "
                            "specify a dim)", name);
    red r;
    if (red_init(name, t, NULL, 0, false, &r) != NB_OK) return NULL;
    nb_tensor *out = run(op, t, &r, t->dtype, (nb_kargs){0}, NULL);
    if (!out) return NULL;
    return nb_dtype_is_floating(t->dtype) ? finish(op, out, t, &r, false, t, out, (nb_kargs){0}) : nb__track(out);
}

nb_tensor *nb_max(const nb_tensor *t) { return extreme_all(NB_OP_MAX, "max", t); }
nb_tensor *nb_min(const nb_tensor *t) { return extreme_all(NB_OP_MIN, "min", t); }

static nb_status check_dim_nonempty(const char *name, const nb_tensor *t, int64_t d)
{
    if (t->ndim == 0 || t->shape[d] > 0) return NB_OK;
    char sh[NB_SHAPE_STR_MAX];
    return nb__err(NB_ERR_INVALID_ARG, "%s: dim %lld of shape %s has size 0 (nothing to reduce)", name, (long long)d,
                   nb__shape_str(t->shape, t->ndim, sh));
}

/* Along dim: i0 = dim, i1 = 1; the rule scatters the gradient to the saved indices. */
static nb_tensor *extreme_dim(nb_op op, const char *name, const nb_tensor *t, int64_t dim, bool keepdim,
                              nb_tensor **indices)
{
    if (indices) *indices = NULL;
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "%s: NULL tensor", name);
    int64_t d;
    red r;
    if (nb__wrap_dim(name, dim, t->ndim, &d) != NB_OK || check_dim_nonempty(name, t, d) != NB_OK ||
        red_init(name, t, &d, 1, keepdim, &r) != NB_OK)
        return NULL;
    nb_tensor *idx = NULL;
    nb_kargs a = {.i0 = d, .i1 = 1};
    nb_tensor *out = run(op, t, &r, t->dtype, a, &idx);
    if (!out) return NULL;
    if (nb_dtype_is_floating(t->dtype)) out = finish(op, out, t, &r, keepdim, idx, NULL, a);
    else out = nb__track(out);
    if (out && indices) *indices = nb__track(idx);
    else nb__release(idx);
    return out;
}

nb_tensor *nb_max_dim(const nb_tensor *t, int64_t dim, bool keepdim, nb_tensor **indices)
{
    return extreme_dim(NB_OP_MAX, "max", t, dim, keepdim, indices);
}

nb_tensor *nb_min_dim(const nb_tensor *t, int64_t dim, bool keepdim, nb_tensor **indices)
{
    return extreme_dim(NB_OP_MIN, "min", t, dim, keepdim, indices);
}

static nb_tensor *arg_extreme(nb_op op, const char *name, const nb_tensor *t, int64_t dim, bool keepdim)
{
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "%s: NULL tensor", name);
    if (t->dtype == NB_BOOL) return nb__err_null(NB_ERR_DTYPE, "%s: bool input is not supported", name);
    red r;
    if (dim == NB_DIM_NONE) {
        if (nb_tensor_numel(t) == 0)
            return nb__err_null(NB_ERR_INVALID_ARG, "%s: the tensor is empty (specify a dim)", name);
        if (red_init(name, t, NULL, 0, false, &r) != NB_OK) return NULL;
    } else {
        int64_t d;
        if (nb__wrap_dim(name, dim, t->ndim, &d) != NB_OK || check_dim_nonempty(name, t, d) != NB_OK ||
            red_init(name, t, &d, 1, keepdim, &r) != NB_OK)
            return NULL;
    }
    return nb__track(run(op, t, &r, NB_INT64, (nb_kargs){0}, NULL));
}

nb_tensor *nb_argmax(const nb_tensor *t, int64_t dim, bool keepdim)
{
    return arg_extreme(NB_OP_ARGMAX, "argmax", t, dim, keepdim);
}

nb_tensor *nb_argmin(const nb_tensor *t, int64_t dim, bool keepdim)
{
    return arg_extreme(NB_OP_ARGMIN, "argmin", t, dim, keepdim);
}
