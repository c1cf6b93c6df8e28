/* Backward rules of joining, indexing and sorting. */
#include <string.h>

#include "autograd/autograd_impl.h"

static nb_tensor *zeros_of(const int64_t *shape, int ndim, const nb_tensor *like)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = like->dtype;
    p.device = like->storage->device;
    return nb_zeros(shape, ndim, &p);
}

/* cat: each input's gradient is its slice of g (extra = dim, then sizes; -1 = skipped). */
nb_status nb__bw_CAT(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    const int64_t *x = node->extra;
    int64_t dim = x[0], pos = 0;
    for (int i = 0; i < node->n_inputs; i++) {
        int64_t len = x[1 + i];
        if (nb__edge_needs_grad(node, i)) {
            const nb_edge *e = &node->next[i];
            grad_in[i] = len < 0 ? zeros_of(e->shape, e->ndim, g) : nb_narrow(g, dim, pos, len);
            if (!grad_in[i]) return nb_last_status();
        }
        if (len > 0) pos += len;
    }
    return NB_OK;
}

/* zeros of the edge's shape with g's rows added at index along dim (index_select's adjoint). The
 * forward op checked the saved index's range (and the saved-tensor version check guards it since),
 * so the device is told not to check again (trusted_index: on CUDA that check waits). */
static nb_status index_add_zeros(const nb_edge *e, nb_tensor *g, int64_t dim, const nb_tensor *index,
                                 nb_tensor **out)
{
    if (e->ndim == 0) { /* a 0-dim input: its one element was selected */
        *out = g;
        return NB_OK;
    }
    nb_tensor *z = zeros_of(e->shape, e->ndim, g);
    if (!z) return nb_last_status();
    NB_TRY(nb__dispatch(NB_OP_INDEX_ADD, &(nb_kargs){.out = z, .in = {index, g}, .i0 = dim, .trusted_index = true}));
    *out = z;
    return NB_OK;
}

nb_status nb__bw_INDEX_SELECT(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *index = nb__node_saved(node, 0);
    if (!index) return nb_last_status();
    return index_add_zeros(&node->next[0], g, node->i0, index, &grad_in[0]);
}

nb_status nb__bw_EMBEDDING(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *flat = nb__node_saved(node, 0);
    if (!flat) return nb_last_status();
    const nb_edge *e = &node->next[0];
    int64_t shape[2] = {nb_tensor_numel(flat), e->shape[1]};
    nb_tensor *g2 = nb_reshape(g, shape, 2);
    if (!g2) return nb_last_status();
    return index_add_zeros(e, g2, 0, flat, &grad_in[0]);
}

/* g scattered-added into zeros of the edge's shape along dim (gather's adjoint), with the saved,
 * forward-checked index trusted as in index_add_zeros; a 0-dim operand takes the public op. */
static nb_tensor *scatter_add_zeros(const nb_edge *e, nb_tensor *g, int64_t dim, const nb_tensor *index)
{
    nb_tensor *z = zeros_of(e->shape, e->ndim, g);
    if (!z) return NULL;
    if (e->ndim == 0 || index->ndim == 0 || g->ndim == 0) return nb_scatter_add(z, dim, index, g);
    nb_kargs k = {.out = z, .in = {index, g}, .i0 = dim, .trusted_index = true};
    return nb__dispatch(NB_OP_SCATTER_ADD, &k) == NB_OK ? z : NULL;
}

nb_status nb__bw_GATHER(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *index = nb__node_saved(node, 0);
    if (!index) return nb_last_status();
    grad_in[0] = scatter_add_zeros(&node->next[0], g, node->i0, index);
    return grad_in[0] ? NB_OK : nb_last_status();
}

nb_status nb__bw_SORT(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    return nb__bw_GATHER(node, g, grad_in); /* values = gather(input, dim, indices) */
}

nb_status nb__bw_TOPK(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    return nb__bw_GATHER(node, g, grad_in);
}

/* src's gradient for scatter(_add): g gathered at index, placed in zeros of src's shape (src
 * may be larger than the index; those elements were not used). */
static nb_status scatter_src_grad(nb_node *node, nb_tensor *g, const nb_tensor *index, nb_tensor **out)
{
    const nb_edge *e = &node->next[1];
    int nd = nb_tensor_ndim(index);
    const int64_t *ish = nb_tensor_shape(index);
    if (nb_tensor_numel(index) == 0 || (nd == e->ndim && memcmp(ish, e->shape, (size_t)nd * sizeof *ish) == 0)) {
        *out = nb_tensor_numel(index) == 0 ? zeros_of(e->shape, e->ndim, g) : nb_gather(g, node->i0, index);
        return *out ? NB_OK : nb_last_status();
    }
    nb_tensor *gathered = nb_gather(g, node->i0, index);
    nb_tensor *z = gathered ? zeros_of(e->shape, e->ndim, g) : NULL;
    nb_tensor *region = z;
    for (int d = 0; d < nd && region; d++) region = nb_narrow(region, d, 0, ish[d]);
    if (!region) return nb_last_status();
    NB_TRY(nb_copy_(region, gathered));
    *out = z;
    return NB_OK;
}

/* g with the positions scatter overwrote set to 0 (the SCATTER kernel with a scalar). */
static nb_status scatter_zero(nb_tensor *g, int64_t dim, nb_tensor *index, nb_tensor **out)
{
    if (nb_tensor_ndim(g) == 0) { /* the one element was overwritten */
        *out = nb_zeros_like(g);
        return *out ? NB_OK : nb_last_status();
    }
    nb_tensor *c = nb__clone_contiguous(g);
    if (!c) return nb_last_status();
    if (nb_tensor_ndim(index) == 0) {
        int64_t one = 1;
        index = nb_reshape(index, &one, 1);
        if (!index) return nb_last_status();
    }
    NB_TRY(nb__dispatch(NB_OP_SCATTER, &(nb_kargs){.out = c, .in = {index, NULL}, .i0 = dim, .s0 = 0}));
    *out = c;
    return NB_OK;
}

nb_status nb__bw_SCATTER(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *index = nb__node_saved(node, 0);
    if (!index) return nb_last_status();
    if (nb__edge_needs_grad(node, 0)) {
        if (nb_tensor_numel(index) == 0) grad_in[0] = g;
        else NB_TRY(scatter_zero(g, node->i0, index, &grad_in[0]));
    }
    if (nb__edge_needs_grad(node, 1)) NB_TRY(scatter_src_grad(node, g, index, &grad_in[1]));
    return NB_OK;
}

nb_status nb__bw_SCATTER_ADD(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *index = nb__node_saved(node, 0);
    if (!index) return nb_last_status();
    grad_in[0] = g;
    if (nb__edge_needs_grad(node, 1)) NB_TRY(scatter_src_grad(node, g, index, &grad_in[1]));
    return NB_OK;
}

nb_status nb__bw_MASKED_FILL(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *mask = nb__node_saved(node, 0);
    if (!mask) return nb_last_status();
    grad_in[0] = nb_masked_fill(g, mask, 0.0);
    return grad_in[0] ? NB_OK : nb_last_status();
}
