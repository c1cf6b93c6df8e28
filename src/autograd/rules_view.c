/* Backward rules of views and copies. */
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"

static nb_tensor *zeros_for_edge(const nb_edge *e, const nb_tensor *g)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = g->dtype;
    p.device = g->storage->device;
    return nb_zeros(e->shape, e->ndim, &p);
}

nb_status nb__bw_VIEW(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    grad_in[0] = nb_reshape(g, node->next[0].shape, node->next[0].ndim);
    return grad_in[0] ? NB_OK : nb_last_status();
}

nb_status nb__bw_PERMUTE(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    const int64_t *perm = node->extra;
    int64_t inv[NB_MAX_DIMS];
    for (int i = 0; i < g->ndim; i++) inv[perm[i]] = i;
    grad_in[0] = nb_permute(g, inv, g->ndim);
    return grad_in[0] ? NB_OK : nb_last_status();
}

nb_status nb__bw_EXPAND(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    grad_in[0] = g; /* the engine sums a broadcast gradient down to the input's shape */
    return NB_OK;
}

/* The gradient of a view that takes [start, end) along dim d of the input (step 1; select: one
 * index, g without that dim): g there and zeros around it. Only the parts around the range are
 * zeroed, not the whole input before g is copied over most of it (the LSTM's output, a view of
 * its states, wrote its [T + 1, B, H] and [2, T + 1, B, H] gradients twice over). */
static nb_status embed_range(const nb_edge *e, nb_tensor *g, int64_t d, int64_t start, int64_t end, bool select,
                             nb_tensor **out)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = g->dtype;
    p.device = g->storage->device;
    nb_tensor *z = nb_empty(e->shape, e->ndim, &p);
    nb_tensor *v = !z ? NULL : select ? nb_select(z, d, start) : nb_narrow(z, d, start, end - start);
    if (!v) return nb_last_status();
    NB_TRY(nb_copy_(v, g));
    int64_t size = e->shape[d];
    nb_tensor *before = start > 0 ? nb_narrow(z, d, 0, start) : NULL;
    nb_tensor *after = end < size ? nb_narrow(z, d, end, size - end) : NULL;
    if ((start > 0 && !before) || (end < size && !after)) return nb_last_status();
    if (before) NB_TRY(nb_zero_(before));
    if (after) NB_TRY(nb_zero_(after));
    *out = z;
    return NB_OK;
}

nb_status nb__bw_SLICE(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    const int64_t *x = node->extra; /* dim, start, step */
    if (x[2] == 1) return embed_range(&node->next[0], g, x[0], x[1], x[1] + g->shape[x[0]], false, &grad_in[0]);
    nb_tensor *z = zeros_for_edge(&node->next[0], g);
    nb_tensor *v = z ? nb_slice(z, x[0], x[1], x[1] + g->shape[x[0]] * x[2], x[2]) : NULL;
    if (!v) return nb_last_status();
    NB_TRY(nb_copy_(v, g));
    grad_in[0] = z;
    return NB_OK;
}

nb_status nb__bw_SELECT(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    const int64_t *x = node->extra; /* dim, index */
    return embed_range(&node->next[0], g, x[0], x[1], x[1] + 1, true, &grad_in[0]);
}

/* The positions, in the input's row-major order, of every element of the view, found through
 * the storage offsets both address. */
static nb_status strided_index(const nb_node *node, int64_t **out, int64_t *n_out)
{
    const nb_edge *e = &node->next[0];
    const int64_t *in_geo = node->extra; /* input offset, input strides */
    int64_t in_n = nb__numel(e->shape, e->ndim), v_n = nb__numel(node->view_shape, node->view_ndim);
    int64_t lo = INT64_MAX, hi = -1, idx[NB_MAX_DIMS] = {0};
    for (int64_t k = 0; k < in_n; k++) {
        int64_t pos = in_geo[0];
        for (int d = 0; d < e->ndim; d++) pos += idx[d] * in_geo[1 + d];
        lo = pos < lo ? pos : lo;
        hi = pos > hi ? pos : hi;
        for (int d = e->ndim - 1; d >= 0 && ++idx[d] == e->shape[d]; d--) idx[d] = 0;
    }
    int64_t span = hi >= lo ? hi - lo + 1 : 0;
    int64_t *inv = malloc((size_t)(span ? span : 1) * sizeof *inv);
    int64_t *res = malloc((size_t)(v_n ? v_n : 1) * sizeof *res);
    if (!inv || !res) {
        free(inv);
        free(res);
        return nb__err(NB_ERR_OOM, "as_strided backward: out of memory");
    }
    for (int64_t k = 0; k < span; k++) inv[k] = -1;
    memset(idx, 0, sizeof idx);
    for (int64_t k = 0; k < in_n; k++) {
        int64_t pos = in_geo[0];
        for (int d = 0; d < e->ndim; d++) pos += idx[d] * in_geo[1 + d];
        inv[pos - lo] = k;
        for (int d = e->ndim - 1; d >= 0 && ++idx[d] == e->shape[d]; d--) idx[d] = 0;
    }
    memset(idx, 0, sizeof idx);
    nb_status st = NB_OK;
    for (int64_t k = 0; k < v_n && st == NB_OK; k++) {
        int64_t pos = node->view_offset;
        for (int d = 0; d < node->view_ndim; d++) pos += idx[d] * node->view_strides[d];
        res[k] = (pos >= lo && pos <= hi) ? inv[pos - lo] : -1;
        if (res[k] < 0)
            st = nb__err(NB_ERR_UNSUPPORTED, "as_strided backward: the view reaches storage outside its input");
        for (int d = node->view_ndim - 1; d >= 0 && ++idx[d] == node->view_shape[d]; d--) idx[d] = 0;
    }
    free(inv);
    if (st != NB_OK) {
        free(res);
        return st;
    }
    *out = res;
    *n_out = v_n;
    return NB_OK;
}

nb_status nb__bw_AS_STRIDED(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    const nb_edge *e = &node->next[0];
    int64_t *idx = NULL, n = 0;
    NB_TRY(strided_index(node, &idx, &n));
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_INT64;
    nb_tensor *it = nb_tensor_from_data(idx, &n, 1, &p);
    free(idx);
    if (!it) return nb_last_status();
    int64_t in_n = nb__numel(e->shape, e->ndim), minus1 = -1;
    p.dtype = g->dtype;
    nb_tensor *flat = nb_zeros(&in_n, 1, &p);
    nb_tensor *gi = it ? nb_to(it, g->storage->device) : NULL;
    nb_tensor *gf = nb_reshape(g, &minus1, 1);
    nb_tensor *r = (flat && gi && gf) ? nb_scatter_add(flat, 0, gi, gf) : NULL;
    grad_in[0] = r ? nb_reshape(r, e->shape, e->ndim) : NULL;
    return grad_in[0] ? NB_OK : nb_last_status();
}

nb_status nb__bw_COPY_SLICES(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    /* g is the gradient of the whole base after the in-place op on the view region R */
    nb_tensor *gb = nb__clone_contiguous(g);
    if (!gb) return nb_last_status();
    nb_tensor *region = nb_as_strided(gb, node->view_shape, node->view_strides, node->view_ndim,
                                      gb->offset + node->view_offset);
    nb_tensor *gr = region ? nb_clone(region) : NULL;
    if (!gr) return nb_last_status();
    nb_node *inner = node->inner;
    nb_tensor **inner_grads = calloc((size_t)inner->n_inputs + 1, sizeof *inner_grads);
    if (!inner_grads) return nb__err(NB_ERR_OOM, "backward: out of memory");
    nb_backward_fn rule = nb__backward_rule(inner->op);
    nb_status st = rule ? rule(inner, gr, inner_grads)
                        : nb__err(NB_ERR_AUTOGRAD, "backward: %s has no backward rule", nb__op_name(inner->op));
    /* the base's old values outside R pass through; inside R they reach the base only through
     * self's old value (input 0 of inner when flag is set) */
    if (st == NB_OK) {
        nb_tensor *self_grad = node->flag ? inner_grads[0] : NULL;
        if (self_grad && (self_grad->ndim != region->ndim ||
                          memcmp(self_grad->shape, region->shape, (size_t)region->ndim * sizeof(int64_t)) != 0)) {
            int64_t dims[NB_MAX_DIMS];
            int nd = 0;
            for (int d = 0; d < self_grad->ndim - region->ndim; d++) dims[nd++] = d;
            self_grad = nd ? nb_sum(self_grad, dims, nd, false) : self_grad;
            if (self_grad) self_grad = nb_expand(self_grad, region->shape, region->ndim);
        }
        st = self_grad ? nb_copy_(region, self_grad) : nb_zero_(region);
    }
    if (st == NB_OK) {
        grad_in[0] = gb;
        for (int i = 0; i < inner->n_inputs; i++)
            if (!(node->flag && i == 0)) grad_in[1 + i] = inner_grads[i];
    }
    free(inner_grads);
    return st;
}

nb_status nb__bw_CLONE(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    if (node->n_inputs > 0) grad_in[0] = g;
    return NB_OK;
}

nb_status nb__bw_TO_DTYPE(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    grad_in[0] = g; /* the engine casts it to the input's dtype */
    return NB_OK;
}

nb_status nb__bw_TO_DEVICE(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    grad_in[0] = nb_to(g, node->next[0].device);
    return grad_in[0] ? NB_OK : nb_last_status();
}
