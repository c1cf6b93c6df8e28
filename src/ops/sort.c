/* Sorting: sort and topk along one dim, with int64 indices (rules in src/autograd/rules_index.c). */
#include <string.h>

#include "autograd/autograd_impl.h"

/* t, or a 0-dim t viewed as [1]. Caller-owned. */
static nb_tensor *as_1d(const nb_tensor *t)
{
    if (t->ndim > 0) return nb_tensor_retain((nb_tensor *)t);
    int64_t one = 1;
    return nb__tensor_alias(t, &one, &one, 1, t->offset);
}

/* Runs op (SORT or TOPK) giving values and indices of `shape`, and records it. */
static nb_tensor *sort_common(nb_op op, const nb_tensor *t, const int64_t *shape, int64_t dim, int64_t k, bool flag,
                              nb_tensor **indices)
{
    nb_device dev = t->storage->device;
    nb_tensor *vals = nb__tensor_new(shape, t->ndim, t->dtype, dev);
    nb_tensor *idx = vals ? nb__tensor_new(shape, t->ndim, NB_INT64, dev) : NULL;
    nb_tensor *v1 = idx ? as_1d(vals) : NULL, *i1 = v1 ? as_1d(idx) : NULL, *t1 = i1 ? as_1d(t) : NULL;
    nb_status st = t1 ? nb__dispatch(op, &(nb_kargs){.out = v1, .out2 = i1, .in = {t1}, .i0 = dim, .i1 = k, .flag = flag})
                      : nb_last_status();
    nb__release(v1);
    nb__release(i1);
    nb__release(t1);
    if (st == NB_OK) {
        nb_node *node = nb__record(op, vals, &t, 1, (const nb_tensor *const[]){idx}, 1, &st);
        if (node) node->i0 = dim;
    }
    if (st != NB_OK) {
        nb__release(vals);
        nb__release(idx);
        return NULL;
    }
    if (indices) *indices = nb__track(idx);
    else nb__release(idx);
    return nb__track(vals);
}

nb_tensor *nb_sort(const nb_tensor *t, int64_t dim, bool descending, nb_tensor **indices)
{
    if (indices) *indices = NULL;
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "sort: NULL tensor");
    int64_t d;
    if (nb__wrap_dim("sort", dim, t->ndim, &d) != NB_OK) return NULL;
    return sort_common(NB_OP_SORT, t, t->shape, d, 0, descending, indices);
}

nb_tensor *nb_topk(const nb_tensor *t, int64_t k, int64_t dim, bool largest, bool sorted, nb_tensor **indices)
{
    (void)sorted; /* the result is always sorted: a valid order for sorted = false too */
    if (indices) *indices = NULL;
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "topk: NULL tensor");
    int64_t d;
    if (nb__wrap_dim("topk", dim, t->ndim, &d) != NB_OK) return NULL;
    int64_t size = t->ndim ? t->shape[d] : 1;
    if (k < 0 || k > size)
        return nb__err_null(NB_ERR_INVALID_ARG, "topk: k (%lld) is out of range for dim %lld of size %lld",
                            (long long)k, (long long)d, (long long)size);
    int64_t shape[NB_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    if (t->ndim) shape[d] = k;
    return sort_common(NB_OP_TOPK, t, shape, d, k, largest, indices);
}
