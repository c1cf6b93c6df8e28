/* Autograd for in-place ops: the leaf and overlap checks, moving history onto the changed
 * tensor, CopySlices for views, and refreshing views whose base changed. */
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"

nb_status nb__inplace_check(const char *op, const nb_tensor *self)
{
    if (!self) return nb__err(NB_ERR_INVALID_ARG, "%s: NULL tensor", op);
    for (int d = 0; d < self->ndim; d++)
        if (self->strides[d] == 0 && self->shape[d] > 1)
            return nb__err(NB_ERR_INVALID_ARG,
                           "%s: unsupported operation: more than one element of the written-to tensor refers "
                           "to a single memory location (an expanded tensor); clone it first",
                           op);
    if (!nb_is_grad_enabled()) return NB_OK;
    if (self->requires_grad && !self->grad_fn && !self->base)
        return nb__err(NB_ERR_AUTOGRAD, "%s: a leaf tensor that requires grad is being used in an in-place operation",
                       op);
    if (self->base && self->base->requires_grad && !self->base->grad_fn)
        return nb__err(NB_ERR_AUTOGRAD,
                       "%s: a view of a leaf tensor that requires grad is being used in an in-place operation", op);
    return NB_OK;
}

bool nb__inplace_needs_grad(const nb_tensor *self, const nb_tensor *const *others, int n)
{
    if (!nb_is_grad_enabled()) return false;
    if (self->requires_grad || (self->base && self->base->requires_grad)) return true;
    return nb__needs_grad(others, n);
}

nb_node *nb__as_strided_node(nb_tensor *base, const nb_tensor *view)
{
    nb_node *n = nb__node_new(NB_OP_AS_STRIDED, (const nb_tensor *const[]){base}, 1);
    if (!n) return NULL;
    int64_t *extra = malloc((1 + NB_MAX_DIMS) * sizeof *extra);
    if (!extra) {
        nb__node_release(n);
        return nb__err_null(NB_ERR_OOM, "as_strided: out of memory");
    }
    extra[0] = base->offset;
    memcpy(extra + 1, base->strides, (size_t)base->ndim * sizeof *extra);
    n->extra = extra;
    n->view_ndim = view->ndim;
    memcpy(n->view_shape, view->shape, sizeof n->view_shape);
    memcpy(n->view_strides, view->strides, sizeof n->view_strides);
    n->view_offset = view->offset;
    n->ndim_out = view->ndim;
    memcpy(n->shape_out, view->shape, sizeof n->shape_out);
    return n;
}

nb_node *nb__view_refresh(nb_tensor *t)
{
    uint64_t v = atomic_load(&t->storage->version);
    if (t->base && t->base->requires_grad && t->view_version != v) {
        nb_node *n = nb__as_strided_node(t->base, t);
        if (n) nb__set_grad_fn(t, n); /* on OOM the old history stays: the best we can do */
    }
    return t->grad_fn;
}

/* self is a view: its base's history becomes CopySlices(base's old history, inner), where inner
 * is the node that computed self's new value; self's own history becomes a view of the base. */
static nb_status copy_slices(nb_tensor *self, nb_node *inner, bool self_is_input0)
{
    nb_tensor *base = self->base;
    if (!nb__is_contiguous(base))
        return nb__err(NB_ERR_UNSUPPORTED,
                       "in-place operation on a view of a non-contiguous tensor that requires grad; make the "
                       "base contiguous first");
    nb_node *c = nb__node_new(NB_OP_COPY_SLICES, (const nb_tensor *const[]){base}, 1);
    nb_edge *edges = c ? calloc((size_t)inner->n_inputs + 1, sizeof *edges) : NULL;
    if (!edges) {
        nb__node_release(c);
        return nb__err(NB_ERR_OOM, "in-place op on a view: out of memory recording the graph");
    }
    edges[0] = c->next[0];
    free(c->next);
    c->next = edges;
    c->n_inputs = inner->n_inputs + 1;
    for (int i = 0; i < inner->n_inputs; i++) {
        if (self_is_input0 && i == 0) continue; /* self's old value flows through the base */
        nb_edge e = inner->next[i];
        if (e.fn) atomic_fetch_add(&e.fn->refcount, 1);
        if (e.leaf) nb_tensor_retain(e.leaf);
        c->next[1 + i] = e;
    }
    atomic_fetch_add(&inner->refcount, 1);
    c->inner = inner;
    c->flag = self_is_input0;
    c->view_ndim = self->ndim;
    memcpy(c->view_shape, self->shape, sizeof c->view_shape);
    memcpy(c->view_strides, self->strides, sizeof c->view_strides);
    c->view_offset = self->offset - base->offset;
    c->ndim_out = base->ndim;
    memcpy(c->shape_out, base->shape, sizeof c->shape_out);
    nb__set_grad_fn(base, c);
    nb_node *v = nb__as_strided_node(base, self);
    if (!v) return nb_last_status();
    nb__set_grad_fn(self, v);
    return NB_OK;
}

nb_status nb__inplace_commit(nb_tensor *self, nb_tensor *result, bool self_is_input0)
{
    nb_kargs a = {.out = self, .in = {result}};
    NB_TRY(nb__dispatch(NB_OP_COPY, &a));
    nb__bump_version(self);
    nb_node *n = result->grad_fn;
    if (!n) {
        if (!self->requires_grad && !(self->base && self->base->requires_grad)) return NB_OK;
        /* overwritten by values that need no grad: history with no inputs */
        n = nb__node_new(NB_OP_CLONE, NULL, 0);
        if (!n) return nb_last_status();
    } else {
        atomic_fetch_add(&n->refcount, 1);
    }
    if (!self->base) {
        nb__set_grad_fn(self, n); /* takes our reference */
        return NB_OK;
    }
    nb_status st = copy_slices(self, n, self_is_input0 && result->grad_fn != NULL);
    nb__node_release(n);
    return st;
}
