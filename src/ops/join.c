/* Joining and splitting: cat, stack, split, split_with_sizes, chunk.
 * cat fills a new output (channels-last when every input is, on the CPU, else contiguous) by the
 * device's CAT kernel, up to four inputs a call, or where it has none by the COPY kernel on the
 * slice of each input, and
 * records one CAT node with an edge per input; stack is cat of unsqueezed inputs; the splits
 * return views (nb_narrow), whose gradient is the slice rule. */
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"

/* PyTorch's legacy rule: 1-D empty tensors are skipped by cat whatever the other shapes. */
static bool cat_skips(const nb_tensor *t) { return t->ndim == 1 && t->shape[0] == 0; }

/* Checks the inputs and computes the output's shape and dtype; *first = the first input not
 * skipped (-1 when all are). */
static nb_status cat_shape(nb_tensor *const *ts, int n, int64_t dim, int64_t *shape, int *ndim, int64_t *wdim,
                           nb_dtype *dtype, int *first)
{
    if (n < 1 || !ts) return nb__err(NB_ERR_INVALID_ARG, "cat: expected a non-empty list of tensors, got %d", n);
    NB_TRY(nb__check_inputs("cat", (const nb_tensor *const *)ts, n));
    *first = -1;
    *dtype = ts[0]->dtype;
    for (int i = 0; i < n; i++) {
        if (ts[i]->ndim == 0)
            return nb__err(NB_ERR_SHAPE, "cat: zero-dimensional tensor (at position %d) cannot be concatenated", i);
        *dtype = nb_promote_types(*dtype, ts[i]->dtype);
        if (*first < 0 && !cat_skips(ts[i])) *first = i;
    }
    if (*first < 0) { /* every input is a legacy empty tensor: the result is one too */
        *ndim = 1;
        shape[0] = 0;
        *wdim = 0;
        return NB_OK;
    }
    const nb_tensor *f = ts[*first];
    NB_TRY(nb__wrap_dim("cat", dim, f->ndim, wdim));
    *ndim = f->ndim;
    memcpy(shape, f->shape, (size_t)f->ndim * sizeof *shape);
    shape[*wdim] = 0;
    char a[NB_SHAPE_STR_MAX], b[NB_SHAPE_STR_MAX];
    for (int i = 0; i < n; i++) {
        const nb_tensor *t = ts[i];
        if (cat_skips(t)) continue;
        if (t->ndim != f->ndim)
            return nb__err(NB_ERR_SHAPE,
                           "cat: tensors must have the same number of dims: tensor %d has shape %s, tensor %d has "
                           "shape %s",
                           *first, nb__shape_str(f->shape, f->ndim, a), i, nb__shape_str(t->shape, t->ndim, b));
        for (int d = 0; d < t->ndim; d++)
            if (d != *wdim && t->shape[d] != f->shape[d])
                return nb__err(NB_ERR_SHAPE,
                               "cat: sizes of tensors must match except in dim %lld: tensor %d has shape %s, tensor "
                               "%d has shape %s",
                               (long long)*wdim, *first, nb__shape_str(f->shape, f->ndim, a), i,
                               nb__shape_str(t->shape, t->ndim, b));
        shape[*wdim] += t->shape[*wdim];
    }
    return NB_OK;
}

/* Fills out: on a device with a CAT kernel, groups of up to four inputs at a time into their
 * slice of out (the CPU's writes a channels-last result in memory order); elsewhere each input
 * is copied into its own slice. Skipped and empty inputs take no part. */
static nb_status cat_fill(nb_tensor *out, nb_tensor *const *ts, int n, int64_t dim)
{
    const nb_backend *be = nb__backend(out->storage->device);
    if (!be) return nb_last_status();
    bool kernel = be->kernels[NB_OP_CAT] != NULL;
    int64_t pos = 0, shape[NB_MAX_DIMS];
    memcpy(shape, out->shape, sizeof shape);
    for (int i = 0; i < n;) {
        nb_kargs a = {.i0 = dim};
        int64_t width = 0;
        for (; i < n && a.i1 < (kernel ? 4 : 1); i++)
            if (!cat_skips(ts[i]) && ts[i]->shape[dim] > 0) {
                a.in[a.i1++] = ts[i];
                width += ts[i]->shape[dim];
            }
        if (!a.i1) continue;
        shape[dim] = width;
        a.out = nb__tensor_alias(out, shape, out->strides, out->ndim, out->offset + pos * out->strides[dim]);
        if (!a.out) return nb_last_status();
        nb_status st = nb__dispatch(kernel ? NB_OP_CAT : NB_OP_COPY, &a);
        nb__release(a.out);
        NB_TRY(st);
        pos += width;
    }
    return NB_OK;
}

/* The CAT node: extra = dim, then each input's size at dim (-1 for a skipped input). */
static nb_status cat_record(nb_tensor *out, nb_tensor *const *ts, int n, int64_t dim)
{
    nb_status st;
    nb_node *node = nb__record(NB_OP_CAT, out, (const nb_tensor *const *)ts, n, NULL, 0, &st);
    if (!node) return st;
    int64_t *x = malloc((size_t)(n + 1) * sizeof *x);
    if (!x) return nb__err(NB_ERR_OOM, "cat: out of memory recording the graph");
    x[0] = dim;
    for (int i = 0; i < n; i++) x[1 + i] = cat_skips(ts[i]) ? -1 : ts[i]->shape[dim];
    node->extra = x;
    node->i0 = dim;
    return NB_OK;
}

nb_tensor *nb_cat(nb_tensor *const *tensors, int n, int64_t dim)
{
    int64_t shape[NB_MAX_DIMS], d = 0;
    int ndim = 0, first = -1;
    nb_dtype dtype = NB_FLOAT32;
    if (cat_shape(tensors, n, dim, shape, &ndim, &d, &dtype, &first) != NB_OK) return NULL;
    /* channels-last inputs give a channels-last result (PyTorch's cat keeps the inputs' common
     * memory format), so that a network's layers after it stay on their channels-last kernels */
    bool cl = first >= 0 && ndim == 4;
    for (int i = 0; cl && i < n; i++) cl = cat_skips(tensors[i]) || nb__keeps_channels_last(tensors[i]);
    nb_tensor *out = nb__tensor_new_format("cat", shape, ndim, dtype, tensors[0]->storage->device, cl);
    if (!out) return NULL;
    nb_status st = first >= 0 ? cat_fill(out, tensors, n, d) : NB_OK;
    if (st == NB_OK) st = cat_record(out, tensors, n, first >= 0 ? d : -1);
    if (st != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return nb__track(out);
}

nb_tensor *nb_stack(nb_tensor *const *tensors, int n, int64_t dim)
{
    if (n < 1 || !tensors)
        return nb__err_null(NB_ERR_INVALID_ARG, "stack: expected a non-empty list of tensors, got %d", n);
    if (nb__check_inputs("stack", (const nb_tensor *const *)tensors, n) != NB_OK) return NULL;
    const nb_tensor *f = tensors[0];
    char a[NB_SHAPE_STR_MAX], b[NB_SHAPE_STR_MAX];
    for (int i = 1; i < n; i++) {
        const nb_tensor *t = tensors[i];
        if (t->ndim != f->ndim || memcmp(t->shape, f->shape, (size_t)f->ndim * sizeof(int64_t)) != 0)
            return nb__err_null(NB_ERR_SHAPE,
                                "stack: expects each tensor to be equal size, but got %s at entry 0 and %s at entry %d",
                                nb__shape_str(f->shape, f->ndim, a), nb__shape_str(t->shape, t->ndim, b), i);
    }
    int64_t d;
    if (nb__wrap_dim("stack", dim, f->ndim + 1, &d) != NB_OK) return NULL;
    nb_scope *s = nb_scope_begin();
    if (!s) return NULL;
    nb_tensor **u = malloc((size_t)n * sizeof *u);
    nb_tensor *out = NULL;
    bool ok = u != NULL;
    if (!u) nb__err(NB_ERR_OOM, "stack: out of memory");
    for (int i = 0; ok && i < n; i++) ok = (u[i] = nb_unsqueeze(tensors[i], d)) != NULL;
    if (ok) out = nb_cat(u, n, d);
    free(u);
    if (!out) {
        nb_scope_end(s);
        return NULL;
    }
    return nb_scope_end_keep(s, out);
}

/* ---- splitting into views ------------------------------------------------------------------- */

/* Makes the views of sizes[i] along dim; returns the count (all of them counted, at most cap
 * made) or -1. */
static int split_views(const char *op, const nb_tensor *t, const int64_t *sizes, int n, int64_t dim,
                       nb_tensor **out, int cap)
{
    int64_t start = 0;
    for (int i = 0; i < n && i < cap; i++) {
        out[i] = nb_narrow(t, dim, start, sizes[i]);
        if (!out[i]) {
            for (int j = 0; j < cap; j++) out[j] = NULL;
            return -1;
        }
        start += sizes[i];
    }
    return n;
}

/* Clears out[0..cap) and checks t, dim (wrapped into *d) and the out array. */
static nb_status split_check(const char *op, const nb_tensor *t, int64_t dim, nb_tensor **out, int cap, int64_t *d)
{
    if (cap < 0 || (cap > 0 && !out)) return nb__err(NB_ERR_INVALID_ARG, "%s: bad output array (cap %d)", op, cap);
    for (int i = 0; i < cap; i++) out[i] = NULL;
    if (!t) return nb__err(NB_ERR_INVALID_ARG, "%s: NULL tensor", op);
    if (t->ndim == 0) return nb__err(NB_ERR_SHAPE, "%s: expects at least a 1-dimensional tensor", op);
    return nb__wrap_dim(op, dim, t->ndim, d);
}

/* Sizes of pieces of `size` elements (the last smaller); n pieces. NULL on OOM. */
static int64_t *even_sizes(const char *op, int64_t total, int64_t size, int64_t n)
{
    int64_t *sizes = malloc((size_t)(n ? n : 1) * sizeof *sizes);
    if (!sizes) return nb__err_null(NB_ERR_OOM, "%s: out of memory", op);
    for (int64_t i = 0; i < n; i++) sizes[i] = total - i * size < size ? total - i * size : size;
    return sizes;
}

static int split_even(const char *op, const nb_tensor *t, int64_t size, int64_t pieces, int64_t d, nb_tensor **out,
                      int cap)
{
    if (pieces > INT32_MAX) {
        nb__err(NB_ERR_INVALID_ARG, "%s: %lld pieces are too many", op, (long long)pieces);
        return -1;
    }
    int64_t *sizes = even_sizes(op, t->shape[d], size, pieces);
    if (!sizes) return -1;
    int r = split_views(op, t, sizes, (int)pieces, d, out, cap);
    free(sizes);
    return r;
}

int nb_split(const nb_tensor *t, int64_t split_size, int64_t dim, nb_tensor **out, int cap)
{
    int64_t d;
    if (split_check("split", t, dim, out, cap, &d) != NB_OK) return -1;
    int64_t n = t->shape[d];
    if (split_size < 0 || (split_size == 0 && n != 0)) {
        nb__err(NB_ERR_INVALID_ARG, "split: split_size %lld is invalid for dim %lld of size %lld (it can be 0 only "
                "when the size is 0)", (long long)split_size, (long long)d, (long long)n);
        return -1;
    }
    int64_t pieces = split_size == 0 ? 1 : (n + split_size - 1) / split_size;
    if (pieces < 1) pieces = 1;
    return split_even("split", t, split_size, pieces, d, out, cap);
}

int nb_split_with_sizes(const nb_tensor *t, const int64_t *sizes, int nsizes, int64_t dim, nb_tensor **out, int cap)
{
    int64_t d;
    if (split_check("split_with_sizes", t, dim, out, cap, &d) != NB_OK) return -1;
    if (nsizes < 0 || (nsizes > 0 && !sizes)) {
        nb__err(NB_ERR_INVALID_ARG, "split_with_sizes: bad sizes argument (%d sizes)", nsizes);
        return -1;
    }
    int64_t sum = 0;
    for (int i = 0; i < nsizes; i++) {
        if (sizes[i] < 0) {
            nb__err(NB_ERR_INVALID_ARG, "split_with_sizes: size %d is negative (%lld)", i, (long long)sizes[i]);
            return -1;
        }
        sum += sizes[i];
    }
    if (sum != t->shape[d]) {
        char a[NB_SHAPE_STR_MAX];
        nb__err(NB_ERR_SHAPE, "split_with_sizes: sizes %s sum to %lld but dim %lld has size %lld",
                nb__shape_str(sizes, nsizes, a), (long long)sum, (long long)d, (long long)t->shape[d]);
        return -1;
    }
    return split_views("split_with_sizes", t, sizes, nsizes, d, out, cap);
}

int nb_chunk(const nb_tensor *t, int64_t chunks, int64_t dim, nb_tensor **out, int cap)
{
    int64_t d;
    if (split_check("chunk", t, dim, out, cap, &d) != NB_OK) return -1;
    if (chunks <= 0) {
        nb__err(NB_ERR_INVALID_ARG, "chunk: chunks must be greater than 0, got %lld", (long long)chunks);
        return -1;
    }
    int64_t n = t->shape[d];
    if (n == 0) return split_even("chunk", t, 0, chunks, d, out, cap); /* chunks empty pieces */
    int64_t size = (n + chunks - 1) / chunks;
    return split_even("chunk", t, size, (n + size - 1) / size, d, out, cap);
}
