/* Indexing: index_select, gather, scatter(_add)(_), masked_fill(_), one_hot, embedding.
 * Index tensors are int64 or int32. The kernels check every index before writing anything
 * (src/cpu/ops/index.c); the entry points check dtypes, devices and shapes. Rules in
 * src/autograd/rules_index.c. */
#include <string.h>

#include "autograd/autograd_impl.h"

/* t itself, or a 0-dim t viewed as [1] (the kernels index along a dim). Caller-owned. */
static nb_tensor *as_1d(const nb_tensor *t)
{
    if (t->ndim > 0) return nb_tensor_retain((nb_tensor *)t);
    int64_t one = 1;
    return nb__tensor_alias(t, &one, &one, 1, t->offset);
}

static int nonempty_ndim(const nb_tensor *t) { return t->ndim ? t->ndim : 1; }

static nb_status check_index_dtype(const char *op, const nb_tensor *index)
{
    if (index->dtype != NB_INT64 && index->dtype != NB_INT32)
        return nb__err(NB_ERR_DTYPE, "%s: index must be int64 or int32, got %s", op, nb_dtype_name(index->dtype));
    return NB_OK;
}

/* Dispatches op with out, in[0], in[1] seen as at least 1-D. */
static nb_status dispatch_1d(nb_op op, nb_tensor *out, const nb_tensor *in0, const nb_tensor *in1, int64_t dim,
                             double s0)
{
    nb_tensor *o = as_1d(out), *x0 = in0 ? as_1d(in0) : NULL, *x1 = in1 ? as_1d(in1) : NULL;
    nb_status st;
    if (!o || (in0 && !x0) || (in1 && !x1)) st = nb_last_status();
    else st = nb__dispatch(op, &(nb_kargs){.out = o, .in = {x0, x1}, .i0 = dim, .s0 = s0});
    nb__release(o);
    nb__release(x0);
    nb__release(x1);
    return st;
}

/* Records op with input t (and src when given), saving `save`; i0 = dim. Releases out on failure. */
static nb_tensor *finish(nb_op op, nb_tensor *out, const nb_tensor *t, const nb_tensor *src, const nb_tensor *save,
                         int64_t dim)
{
    nb_status st;
    const nb_tensor *inputs[2] = {t, src};
    nb_node *node = nb__record(op, out, inputs, src ? 2 : 1, &save, 1, &st);
    if (st != NB_OK) {
        nb__release(out);
        return NULL;
    }
    if (node) node->i0 = dim;
    return nb__track(out);
}

/* ---- index_select --------------------------------------------------------------------------- */

nb_tensor *nb_index_select(const nb_tensor *t, int64_t dim, const nb_tensor *index)
{
    if (nb__check_inputs("index_select", (const nb_tensor *const[]){t, index}, 2) != NB_OK) return NULL;
    if (check_index_dtype("index_select", index) != NB_OK) return NULL;
    char a[NB_SHAPE_STR_MAX];
    if (index->ndim > 1)
        return nb__err_null(NB_ERR_SHAPE, "index_select: index must be 0-D or 1-D, got shape %s",
                            nb__shape_str(index->shape, index->ndim, a));
    int64_t d, n = nb__numel(index->shape, index->ndim);
    if (nb__wrap_dim("index_select", dim, t->ndim, &d) != NB_OK) return NULL;
    if (t->ndim == 0 && n != 1)
        return nb__err_null(NB_ERR_SHAPE, "index_select: index of %lld elements for a 0-dim tensor", (long long)n);
    int64_t shape[NB_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    if (t->ndim) shape[d] = n;
    nb_tensor *out = nb__tensor_new(shape, t->ndim, t->dtype, t->storage->device);
    if (!out) return NULL;
    if (dispatch_1d(NB_OP_INDEX_SELECT, out, t, index, d, 0) != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return finish(NB_OP_INDEX_SELECT, out, t, NULL, index, d);
}

/* ---- gather and scatter --------------------------------------------------------------------- */

nb_tensor *nb_gather(const nb_tensor *t, int64_t dim, const nb_tensor *index)
{
    if (nb__check_inputs("gather", (const nb_tensor *const[]){t, index}, 2) != NB_OK) return NULL;
    if (check_index_dtype("gather", index) != NB_OK) return NULL;
    char a[NB_SHAPE_STR_MAX], b[NB_SHAPE_STR_MAX];
    int64_t d;
    if (nb__wrap_dim("gather", dim, t->ndim, &d) != NB_OK) return NULL;
    if (nonempty_ndim(index) != nonempty_ndim(t))
        return nb__err_null(NB_ERR_SHAPE, "gather: index of shape %s must have as many dims as the input of shape %s",
                            nb__shape_str(index->shape, index->ndim, a), nb__shape_str(t->shape, t->ndim, b));
    for (int i = 0; i < index->ndim; i++)
        if (i != d && index->shape[i] > t->shape[i])
            return nb__err_null(NB_ERR_SHAPE,
                                "gather: index of shape %s is larger than the input of shape %s at dim %d (only dim "
                                "%lld may be larger)",
                                nb__shape_str(index->shape, index->ndim, a), nb__shape_str(t->shape, t->ndim, b), i,
                                (long long)d);
    nb_tensor *out = nb__tensor_new(index->shape, index->ndim, t->dtype, t->storage->device);
    if (!out) return NULL;
    if (dispatch_1d(NB_OP_GATHER, out, t, index, d, 0) != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return finish(NB_OP_GATHER, out, t, NULL, index, d);
}

/* The checks of scatter and scatter_add (PyTorch's: none of the shape checks for an empty index). */
static nb_status scatter_check(const char *op, const nb_tensor *t, int64_t dim, const nb_tensor *index,
                               const nb_tensor *src, int64_t *d)
{
    NB_TRY(nb__check_inputs(op, (const nb_tensor *const[]){t, index, src}, 3));
    NB_TRY(check_index_dtype(op, index));
    if (src->dtype != t->dtype)
        return nb__err(NB_ERR_DTYPE, "%s: src dtype %s does not match self dtype %s", op, nb_dtype_name(src->dtype),
                       nb_dtype_name(t->dtype));
    NB_TRY(nb__wrap_dim(op, dim, t->ndim, d));
    if (nb__numel(index->shape, index->ndim) == 0) return NB_OK;
    char a[NB_SHAPE_STR_MAX], b[NB_SHAPE_STR_MAX], c[NB_SHAPE_STR_MAX];
    bool ok = nonempty_ndim(index) == nonempty_ndim(t) && nonempty_ndim(src) == nonempty_ndim(t);
    for (int i = 0; ok && i < index->ndim; i++)
        ok = index->shape[i] <= src->shape[i] && (i == *d || index->shape[i] <= t->shape[i]);
    if (!ok)
        return nb__err(NB_ERR_SHAPE,
                       "%s: index of shape %s does not fit self of shape %s and src of shape %s (the index needs "
                       "their number of dims, sizes <= src's, and <= self's except at dim %lld)",
                       op, nb__shape_str(index->shape, index->ndim, a), nb__shape_str(t->shape, t->ndim, b),
                       nb__shape_str(src->shape, src->ndim, c), (long long)*d);
    return NB_OK;
}

/* A contiguous copy of t without history. Caller-owned. */
static nb_tensor *plain_copy(const nb_tensor *t, const int64_t *shape, int ndim)
{
    nb_tensor *out = nb__tensor_new(shape, ndim, t->dtype, t->storage->device);
    if (out && nb__dispatch(NB_OP_COPY, &(nb_kargs){.out = out, .in = {t}}) != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return out;
}

static nb_tensor *scatter_out(nb_op op, const char *name, const nb_tensor *t, int64_t dim, const nb_tensor *index,
                              const nb_tensor *src)
{
    int64_t d;
    if (scatter_check(name, t, dim, index, src, &d) != NB_OK) return NULL;
    nb_tensor *out = plain_copy(t, t->shape, t->ndim);
    if (!out) return NULL;
    if (dispatch_1d(op, out, index, src, d, 0) != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return finish(op, out, t, src, index, d);
}

static nb_status scatter_inplace(nb_op op, const char *name, nb_tensor *t, int64_t dim, const nb_tensor *index,
                                 const nb_tensor *src)
{
    NB_TRY(nb__inplace_check(name, t));
    int64_t d;
    NB_TRY(scatter_check(name, t, dim, index, src, &d));
    if (nb__inplace_needs_grad(t, &src, 1)) {
        nb_scope *s = nb_scope_begin();
        if (!s) return nb_last_status();
        nb_tensor *r = scatter_out(op, name, t, dim, index, src);
        nb_status st = r ? nb__inplace_commit(t, r, true) : nb_last_status();
        nb_scope_end(s);
        return st;
    }
    NB_TRY(dispatch_1d(op, t, index, src, d, 0));
    nb__bump_version(t);
    return NB_OK;
}

nb_tensor *nb_scatter(const nb_tensor *t, int64_t dim, const nb_tensor *index, const nb_tensor *src)
{
    return scatter_out(NB_OP_SCATTER, "scatter", t, dim, index, src);
}

nb_tensor *nb_scatter_add(const nb_tensor *t, int64_t dim, const nb_tensor *index, const nb_tensor *src)
{
    return scatter_out(NB_OP_SCATTER_ADD, "scatter_add", t, dim, index, src);
}

nb_status nb_scatter_(nb_tensor *t, int64_t dim, const nb_tensor *index, const nb_tensor *src)
{
    return scatter_inplace(NB_OP_SCATTER, "scatter_", t, dim, index, src);
}

nb_status nb_scatter_add_(nb_tensor *t, int64_t dim, const nb_tensor *index, const nb_tensor *src)
{
    return scatter_inplace(NB_OP_SCATTER_ADD, "scatter_add_", t, dim, index, src);
}

/* ---- masked_fill ---------------------------------------------------------------------------- */

static nb_status mask_check(const char *op, const nb_tensor *t, const nb_tensor *mask)
{
    NB_TRY(nb__check_inputs(op, (const nb_tensor *const[]){t, mask}, 2));
    if (mask->dtype != NB_BOOL)
        return nb__err(NB_ERR_DTYPE, "%s: mask must be bool, got %s", op, nb_dtype_name(mask->dtype));
    return NB_OK;
}

nb_tensor *nb_masked_fill(const nb_tensor *t, const nb_tensor *mask, double value)
{
    if (mask_check("masked_fill", t, mask) != NB_OK) return NULL;
    int64_t shape[NB_MAX_DIMS];
    int nd;
    if (nb__broadcast_shapes("masked_fill", t->shape, t->ndim, mask->shape, mask->ndim, shape, &nd) != NB_OK)
        return NULL;
    nb_tensor *out = plain_copy(t, shape, nd);
    if (!out) return NULL;
    if (nb__dispatch(NB_OP_MASKED_FILL, &(nb_kargs){.out = out, .in = {mask}, .s0 = value}) != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return finish(NB_OP_MASKED_FILL, out, t, NULL, mask, 0);
}

nb_status nb_masked_fill_(nb_tensor *t, const nb_tensor *mask, double value)
{
    NB_TRY(nb__inplace_check("masked_fill_", t));
    NB_TRY(mask_check("masked_fill_", t, mask));
    int64_t shape[NB_MAX_DIMS];
    int nd;
    NB_TRY(nb__broadcast_shapes("masked_fill_", t->shape, t->ndim, mask->shape, mask->ndim, shape, &nd));
    if (nd != t->ndim || memcmp(shape, t->shape, (size_t)nd * sizeof *shape) != 0) {
        char a[NB_SHAPE_STR_MAX], b[NB_SHAPE_STR_MAX];
        return nb__err(NB_ERR_SHAPE, "masked_fill_: mask of shape %s does not broadcast to self's shape %s",
                       nb__shape_str(mask->shape, mask->ndim, a), nb__shape_str(t->shape, t->ndim, b));
    }
    if (nb__inplace_needs_grad(t, NULL, 0)) {
        nb_scope *s = nb_scope_begin();
        if (!s) return nb_last_status();
        nb_tensor *r = nb_masked_fill(t, mask, value);
        nb_status st = r ? nb__inplace_commit(t, r, true) : nb_last_status();
        nb_scope_end(s);
        return st;
    }
    NB_TRY(nb__dispatch(NB_OP_MASKED_FILL, &(nb_kargs){.out = t, .in = {mask}, .s0 = value}));
    nb__bump_version(t);
    return NB_OK;
}

/* ---- one_hot and embedding ------------------------------------------------------------------ */

static nb_status infer_classes(const nb_tensor *t, int64_t *classes)
{
    if (nb__numel(t->shape, t->ndim) == 0)
        return nb__err(NB_ERR_INVALID_ARG, "one_hot: cannot infer the number of classes from an empty tensor");
    nb_scope *s = nb_scope_begin();
    if (!s) return nb_last_status();
    nb_tensor *m = nb_max(t);
    nb_status st = m ? nb_item_int64(m, classes) : nb_last_status();
    nb_scope_end(s);
    *classes += 1;
    return st;
}

nb_tensor *nb_one_hot(const nb_tensor *t, int64_t num_classes)
{
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "one_hot: NULL tensor");
    if (check_index_dtype("one_hot", t) != NB_OK) return NULL;
    if (t->ndim >= NB_MAX_DIMS)
        return nb__err_null(NB_ERR_SHAPE, "one_hot: input of %d dims: the result would exceed %d dims", t->ndim,
                            NB_MAX_DIMS);
    if (num_classes < 0 && infer_classes(t, &num_classes) != NB_OK) return NULL;
    int64_t shape[NB_MAX_DIMS];
    memcpy(shape, t->shape, (size_t)t->ndim * sizeof *shape);
    shape[t->ndim] = num_classes;
    nb_tensor *out = nb__tensor_new(shape, t->ndim + 1, NB_INT64, t->storage->device);
    if (!out) return NULL;
    if (nb__dispatch(NB_OP_ONE_HOT, &(nb_kargs){.out = out, .in = {t}}) != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return nb__track(out);
}

/* Looks rows of weight [num, dim] up at flat indices [n] into out2 [n, dim]. */
static nb_status embedding_rows(nb_tensor *out2, const nb_tensor *weight, const nb_tensor *flat)
{
    nb_status st = nb__dispatch(NB_OP_INDEX_SELECT, &(nb_kargs){.out = out2, .in = {weight, flat}, .i0 = 0});
    const char *msg = nb_last_error(), *pre = "index_select: ";
    if (st != NB_OK && strncmp(msg, pre, strlen(pre)) == 0) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s", msg + strlen(pre));
        return nb__err(st, "embedding: %s", buf);
    }
    return st;
}

nb_tensor *nb_embedding(const nb_tensor *weight, const nb_tensor *indices)
{
    if (nb__check_inputs("embedding", (const nb_tensor *const[]){weight, indices}, 2) != NB_OK) return NULL;
    if (check_index_dtype("embedding", indices) != NB_OK) return NULL;
    char a[NB_SHAPE_STR_MAX];
    if (weight->ndim != 2)
        return nb__err_null(NB_ERR_SHAPE, "embedding: weight must be 2-D, got shape %s",
                            nb__shape_str(weight->shape, weight->ndim, a));
    if (indices->ndim >= NB_MAX_DIMS)
        return nb__err_null(NB_ERR_SHAPE, "embedding: indices of %d dims: the result would exceed %d dims",
                            indices->ndim, NB_MAX_DIMS);
    int64_t n = nb__numel(indices->shape, indices->ndim), one = 1, shape[NB_MAX_DIMS], flat2[2] = {n, weight->shape[1]};
    memcpy(shape, indices->shape, (size_t)indices->ndim * sizeof *shape);
    shape[indices->ndim] = weight->shape[1];
    nb_tensor *out = nb__tensor_new(shape, indices->ndim + 1, weight->dtype, weight->storage->device);
    nb_tensor *c = nb__is_contiguous(indices) ? nb_tensor_retain((nb_tensor *)indices)
                                              : plain_copy(indices, indices->shape, indices->ndim);
    nb_tensor *flat = c ? nb__tensor_alias(c, &n, &one, 1, c->offset) : NULL;
    nb__release(c);
    nb_tensor *out2 = out ? nb__tensor_alias(out, flat2, (int64_t[]){flat2[1], 1}, 2, 0) : NULL;
    nb_status st = out && flat && out2 ? embedding_rows(out2, weight, flat) : nb_last_status();
    nb_tensor *r = NULL;
    if (st == NB_OK) {
        nb_tensor_retain(out);
        r = finish(NB_OP_EMBEDDING, out, weight, NULL, flat, 0);
    }
    nb__release(out2);
    nb__release(flat);
    nb__release(out);
    return r;
}
