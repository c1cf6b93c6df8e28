/* Views: tensors over the same storage with other sizes, strides and offsets. Each records its
 * node for autograd (rules in src/autograd/rules_view.c). */
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"

/* Makes the view and records it. params: i0, i1, s0 and an extra block as each rule needs. */
static nb_tensor *make_view(nb_op op, const nb_tensor *t, const int64_t *shape, const int64_t *strides,
                            int ndim, int64_t offset, const int64_t *extra, int n_extra)
{
    nb_tensor *v = nb__tensor_alias(t, shape, strides, ndim, offset);
    if (!v) return NULL;
    nb_status st;
    nb_node *node = nb__record(op, v, &t, 1, NULL, 0, &st);
    if (st != NB_OK) {
        nb__release(v);
        return NULL;
    }
    if (node && n_extra) {
        node->extra = malloc((size_t)n_extra * sizeof(int64_t));
        if (!node->extra) {
            nb__release(v);
            return nb__err_null(NB_ERR_OOM, "%s: out of memory", nb__op_name(op));
        }
        memcpy(node->extra, extra, (size_t)n_extra * sizeof(int64_t));
    }
    return nb__track(v);
}

#define CHECK_T(t, op)                                                                           \
    if (!(t)) return nb__err_null(NB_ERR_INVALID_ARG, op ": NULL tensor")

/* Infers one -1 size; checks the element count. */
static nb_status infer_shape(const char *op, const nb_tensor *t, const int64_t *shape, int ndim, int64_t *out)
{
    if (ndim < 0 || ndim > NB_MAX_DIMS || (ndim && !shape))
        return nb__err(NB_ERR_INVALID_ARG, "%s: bad shape argument (%d dims)", op, ndim);
    int infer = -1;
    int64_t known = 1, numel = nb_tensor_numel(t);
    char a[NB_SHAPE_STR_MAX], b[NB_SHAPE_STR_MAX];
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == -1) {
            if (infer >= 0) return nb__err(NB_ERR_SHAPE, "%s: only one dimension can be -1 in %s", op, nb__shape_str(shape, ndim, a));
            infer = i;
        } else if (shape[i] < 0) {
            return nb__err(NB_ERR_SHAPE, "%s: invalid size in %s", op, nb__shape_str(shape, ndim, a));
        } else {
            known *= shape[i];
        }
        out[i] = shape[i];
    }
    if (infer >= 0) {
        if (known == 0 || numel % known != 0)
            return nb__err(NB_ERR_SHAPE, "%s: shape %s is invalid for input of size %lld", op,
                           nb__shape_str(shape, ndim, a), (long long)numel);
        out[infer] = numel / known;
    } else if (known != numel) {
        return nb__err(NB_ERR_SHAPE, "%s: shape %s is invalid for input of shape %s (%lld elements)", op,
                       nb__shape_str(shape, ndim, a), nb__shape_str(t->shape, t->ndim, b), (long long)numel);
    }
    return NB_OK;
}

/* Strides for viewing t as shape without copying, as PyTorch's computeStride; false if none. */
static bool view_strides(const nb_tensor *t, const int64_t *shape, int ndim, int64_t *strides)
{
    int64_t numel = nb_tensor_numel(t);
    if (numel == 0 || t->ndim == 0) {
        nb__contiguous_strides(shape, ndim, strides);
        return true;
    }
    int view_d = ndim - 1;
    int64_t chunk_base_stride = t->strides[t->ndim - 1];
    int64_t tensor_numel = 1, view_numel = 1;
    for (int td = t->ndim - 1; td >= 0; td--) {
        tensor_numel *= t->shape[td];
        if (td == 0 || (t->shape[td - 1] != 1 && t->strides[td - 1] != tensor_numel * chunk_base_stride)) {
            while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
                strides[view_d] = view_numel * chunk_base_stride;
                view_numel *= shape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) return false;
            if (td > 0) {
                chunk_base_stride = t->strides[td - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

nb_tensor *nb_view(const nb_tensor *t, const int64_t *shape, int ndim)
{
    CHECK_T(t, "view");
    int64_t s[NB_MAX_DIMS], st[NB_MAX_DIMS];
    if (infer_shape("view", t, shape, ndim, s) != NB_OK) return NULL;
    if (!view_strides(t, s, ndim, st)) {
        char a[NB_SHAPE_STR_MAX], b[NB_SHAPE_STR_MAX];
        return nb__err_null(NB_ERR_SHAPE,
                            "view: shape %s is not compatible with the input's size %s and strides %s; use "
                            "nb_reshape",
                            nb__shape_str(s, ndim, a), nb__shape_str(t->shape, t->ndim, b),
                            nb__shape_str(t->strides, t->ndim, (char[NB_SHAPE_STR_MAX]){0}));
    }
    return make_view(NB_OP_VIEW, t, s, st, ndim, t->offset, NULL, 0);
}

nb_tensor *nb_reshape(const nb_tensor *t, const int64_t *shape, int ndim)
{
    CHECK_T(t, "reshape");
    int64_t s[NB_MAX_DIMS], st[NB_MAX_DIMS];
    if (infer_shape("reshape", t, shape, ndim, s) != NB_OK) return NULL;
    if (view_strides(t, s, ndim, st)) return make_view(NB_OP_VIEW, t, s, st, ndim, t->offset, NULL, 0);
    nb_tensor *c = nb_contiguous(t);
    return c ? nb_view(c, s, ndim) : NULL;
}

nb_tensor *nb_permute(const nb_tensor *t, const int64_t *dims, int ndim)
{
    CHECK_T(t, "permute");
    if (ndim != t->ndim || (ndim && !dims))
        return nb__err_null(NB_ERR_INVALID_ARG, "permute: %d dims given for a tensor of %d dims", ndim, t->ndim);
    int64_t s[NB_MAX_DIMS], st[NB_MAX_DIMS], perm[NB_MAX_DIMS];
    bool used[NB_MAX_DIMS] = {0};
    for (int i = 0; i < ndim; i++) {
        int64_t d;
        if (nb__wrap_dim("permute", dims[i], ndim, &d) != NB_OK) return NULL;
        if (used[d]) return nb__err_null(NB_ERR_INVALID_ARG, "permute: dim %lld repeated", (long long)dims[i]);
        used[d] = true;
        perm[i] = d;
        s[i] = t->shape[d];
        st[i] = t->strides[d];
    }
    return make_view(NB_OP_PERMUTE, t, s, st, ndim, t->offset, perm, ndim);
}

nb_tensor *nb_transpose(const nb_tensor *t, int64_t d0, int64_t d1)
{
    CHECK_T(t, "transpose");
    int64_t a, b, perm[NB_MAX_DIMS];
    if (nb__wrap_dim("transpose", d0, t->ndim, &a) != NB_OK || nb__wrap_dim("transpose", d1, t->ndim, &b) != NB_OK)
        return NULL;
    if (t->ndim == 0) return make_view(NB_OP_VIEW, t, NULL, NULL, 0, t->offset, NULL, 0);
    for (int i = 0; i < t->ndim; i++) perm[i] = i;
    perm[a] = b;
    perm[b] = a;
    return nb_permute(t, perm, t->ndim);
}

nb_tensor *nb_t(const nb_tensor *t)
{
    CHECK_T(t, "t");
    if (t->ndim > 2) return nb__err_null(NB_ERR_SHAPE, "t: expects a tensor of at most 2 dims, not %d", t->ndim);
    if (t->ndim < 2) return make_view(NB_OP_VIEW, t, t->shape, t->strides, t->ndim, t->offset, NULL, 0);
    return nb_transpose(t, 0, 1);
}

nb_tensor *nb_slice(const nb_tensor *t, int64_t dim, int64_t start, int64_t end, int64_t step)
{
    CHECK_T(t, "slice");
    int64_t d;
    if (t->ndim == 0) return nb__err_null(NB_ERR_SHAPE, "slice: cannot slice a 0-dim tensor");
    if (nb__wrap_dim("slice", dim, t->ndim, &d) != NB_OK) return NULL;
    if (step <= 0) return nb__err_null(NB_ERR_INVALID_ARG, "slice: step %lld must be positive", (long long)step);
    int64_t n = t->shape[d];
    if (start < 0) start += n;
    if (end < 0) end += n;
    start = start < 0 ? 0 : start > n ? n : start;
    end = end < start ? start : end > n ? n : end;
    int64_t s[NB_MAX_DIMS], st[NB_MAX_DIMS];
    memcpy(s, t->shape, sizeof s);
    memcpy(st, t->strides, sizeof st);
    s[d] = (end - start + step - 1) / step;
    st[d] = t->strides[d] * step;
    int64_t extra[3] = {d, start, step};
    return make_view(NB_OP_SLICE, t, s, st, t->ndim, t->offset + start * t->strides[d], extra, 3);
}

nb_tensor *nb_narrow(const nb_tensor *t, int64_t dim, int64_t start, int64_t length)
{
    CHECK_T(t, "narrow");
    int64_t d;
    if (t->ndim == 0) return nb__err_null(NB_ERR_SHAPE, "narrow: cannot narrow a 0-dim tensor");
    if (nb__wrap_dim("narrow", dim, t->ndim, &d) != NB_OK) return NULL;
    int64_t n = t->shape[d];
    if (start < 0) start += n;
    if (start < 0 || length < 0 || start > n || start + length > n)
        return nb__err_null(NB_ERR_INVALID_ARG, "narrow: start %lld + length %lld exceeds dim %lld of size %lld",
                            (long long)start, (long long)length, (long long)d, (long long)n);
    return nb_slice(t, d, start, start + length, 1);
}

nb_tensor *nb_select(const nb_tensor *t, int64_t dim, int64_t index)
{
    CHECK_T(t, "select");
    int64_t d;
    if (t->ndim == 0) return nb__err_null(NB_ERR_SHAPE, "select: cannot select from a 0-dim tensor");
    if (nb__wrap_dim("select", dim, t->ndim, &d) != NB_OK) return NULL;
    int64_t n = t->shape[d];
    if (index < -n || index >= n)
        return nb__err_null(NB_ERR_INVALID_ARG, "select: index %lld out of range for dim %lld of size %lld",
                            (long long)index, (long long)d, (long long)n);
    if (index < 0) index += n;
    int64_t s[NB_MAX_DIMS], st[NB_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (i == d) continue;
        s[k] = t->shape[i];
        st[k++] = t->strides[i];
    }
    int64_t extra[2] = {d, index};
    return make_view(NB_OP_SELECT, t, s, st, t->ndim - 1, t->offset + index * t->strides[d], extra, 2);
}

nb_tensor *nb_squeeze(const nb_tensor *t)
{
    CHECK_T(t, "squeeze");
    int64_t s[NB_MAX_DIMS], st[NB_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 1) continue;
        s[k] = t->shape[i];
        st[k++] = t->strides[i];
    }
    return make_view(NB_OP_VIEW, t, s, st, k, t->offset, NULL, 0);
}

nb_tensor *nb_squeeze_dim(const nb_tensor *t, int64_t dim)
{
    CHECK_T(t, "squeeze_dim");
    int64_t d;
    if (nb__wrap_dim("squeeze_dim", dim, t->ndim, &d) != NB_OK) return NULL;
    if (t->ndim == 0 || t->shape[d] != 1) return make_view(NB_OP_VIEW, t, t->shape, t->strides, t->ndim, t->offset, NULL, 0);
    int64_t s[NB_MAX_DIMS], st[NB_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (i == d) continue;
        s[k] = t->shape[i];
        st[k++] = t->strides[i];
    }
    return make_view(NB_OP_VIEW, t, s, st, k, t->offset, NULL, 0);
}

nb_tensor *nb_unsqueeze(const nb_tensor *t, int64_t dim)
{
    CHECK_T(t, "unsqueeze");
    int64_t d;
    if (t->ndim >= NB_MAX_DIMS) return nb__err_null(NB_ERR_SHAPE, "unsqueeze: a tensor has at most %d dims", NB_MAX_DIMS);
    if (nb__wrap_dim("unsqueeze", dim, t->ndim + 1, &d) != NB_OK) return NULL;
    int64_t s[NB_MAX_DIMS], st[NB_MAX_DIMS];
    for (int i = 0, k = 0; i <= t->ndim; i++) {
        if (i == d) {
            s[i] = 1;
            st[i] = k < t->ndim ? t->strides[k] * t->shape[k] : 1;
            continue;
        }
        s[i] = t->shape[k];
        st[i] = t->strides[k++];
    }
    return make_view(NB_OP_VIEW, t, s, st, t->ndim + 1, t->offset, NULL, 0);
}

nb_tensor *nb_expand(const nb_tensor *t, const int64_t *shape, int ndim)
{
    CHECK_T(t, "expand");
    char a[NB_SHAPE_STR_MAX], b[NB_SHAPE_STR_MAX];
    if (ndim < t->ndim || ndim > NB_MAX_DIMS || (ndim && !shape))
        return nb__err_null(NB_ERR_SHAPE, "expand: cannot expand a tensor of %d dims to %d dims", t->ndim, ndim);
    int64_t s[NB_MAX_DIMS], st[NB_MAX_DIMS];
    int lead = ndim - t->ndim;
    for (int i = 0; i < ndim; i++) {
        int it = i - lead;
        int64_t want = shape[i];
        if (it < 0) {
            if (want < 0) return nb__err_null(NB_ERR_SHAPE, "expand: -1 is not allowed in a new leading dim (%s)", nb__shape_str(shape, ndim, a));
            s[i] = want;
            st[i] = 0;
        } else if (want == -1 || want == t->shape[it]) {
            s[i] = t->shape[it];
            st[i] = t->strides[it];
        } else if (t->shape[it] == 1 && want >= 0) {
            s[i] = want;
            st[i] = 0;
        } else {
            return nb__err_null(NB_ERR_SHAPE, "expand: the tensor of shape %s cannot be expanded to %s (dim %d)",
                                nb__shape_str(t->shape, t->ndim, a), nb__shape_str(shape, ndim, b), i);
        }
    }
    return make_view(NB_OP_EXPAND, t, s, st, ndim, t->offset, NULL, 0);
}

nb_tensor *nb_flatten(const nb_tensor *t, int64_t start_dim, int64_t end_dim)
{
    CHECK_T(t, "flatten");
    int64_t a, b;
    if (nb__wrap_dim("flatten", start_dim, t->ndim, &a) != NB_OK || nb__wrap_dim("flatten", end_dim, t->ndim, &b) != NB_OK)
        return NULL;
    if (t->ndim == 0) {
        int64_t one = 1;
        return nb_reshape(t, &one, 1);
    }
    if (a > b) return nb__err_null(NB_ERR_INVALID_ARG, "flatten: start_dim %lld comes after end_dim %lld", (long long)start_dim, (long long)end_dim);
    int64_t s[NB_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (i > a && i <= b) {
            s[k - 1] *= t->shape[i];
            continue;
        }
        s[k++] = t->shape[i];
    }
    return nb_reshape(t, s, k);
}

nb_tensor *nb_as_strided(const nb_tensor *t, const int64_t *shape, const int64_t *strides, int ndim, int64_t offset)
{
    CHECK_T(t, "as_strided");
    if (ndim < 0 || ndim > NB_MAX_DIMS || (ndim && (!shape || !strides)))
        return nb__err_null(NB_ERR_INVALID_ARG, "as_strided: bad shape argument (%d dims)", ndim);
    int64_t max_pos = offset, es = (int64_t)nb_dtype_size(t->dtype);
    if (offset < 0) return nb__err_null(NB_ERR_INVALID_ARG, "as_strided: negative offset %lld", (long long)offset);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || strides[i] < 0)
            return nb__err_null(NB_ERR_INVALID_ARG, "as_strided: negative size or stride at dim %d", i);
        if (shape[i] == 0) max_pos = -1;
        if (max_pos >= 0) max_pos += (shape[i] - 1) * strides[i];
    }
    if (max_pos >= 0 && (max_pos + 1) * es > (int64_t)t->storage->nbytes) {
        char a[NB_SHAPE_STR_MAX];
        return nb__err_null(NB_ERR_INVALID_ARG,
                            "as_strided: size %s with these strides and offset %lld needs %lld elements, the "
                            "storage has %lld",
                            nb__shape_str(shape, ndim, a), (long long)offset, (long long)(max_pos + 1),
                            (long long)(t->storage->nbytes / (size_t)es));
    }
    /* The rule needs the input's geometry (in extra) and the view's (in the node). */
    int64_t extra[1 + NB_MAX_DIMS];
    extra[0] = t->offset;
    memcpy(extra + 1, t->strides, (size_t)t->ndim * sizeof(int64_t));
    nb_tensor *v = make_view(NB_OP_AS_STRIDED, t, shape, strides, ndim, offset, extra, 1 + t->ndim);
    if (v && v->grad_fn) {
        nb_node *n = v->grad_fn;
        n->view_ndim = ndim;
        memcpy(n->view_shape, v->shape, sizeof n->view_shape);
        memcpy(n->view_strides, v->strides, sizeof n->view_strides);
        n->view_offset = offset;
    }
    return v;
}
