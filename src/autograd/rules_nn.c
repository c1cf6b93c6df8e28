/* Backward rules of the layers in src/ops/nn_*.c. Each runs the layer's backward kernel(s) on a
 * dense upstream gradient, laid out as the forward's input (contiguous, or channels-last on the
 * CPU), and gives the input gradient in that layout. conv2d: saved x (0) and weight (1), parameters in i0/i1; with a
 * fused ReLU (flag) also the output (2), whose mask (y > 0) is applied to the gradient first; the
 * input gradient is one CONV2D_BACKWARD_INPUT, weight and bias gradients one
 * CONV2D_BACKWARD_WEIGHT. max_pool2d: saved indices (0). avg pools: no saved tensors (the input's
 * shape is its edge's). batch_norm: saved x (0), weight (1, when i0), stats (2:
 * mean, var, and the weight or 1; with a fused ReLU, i1, also the forward's coefficients), and
 * nb_batch_norm_add_relu's residual (3, the node's fourth input); one BATCH_NORM_BACKWARD on the
 * stats gives the input gradient, both parameter gradients and the residual's (nb_batch_norm_add,
 * a fourth input without i1: the residual's gradient is g). */
#include "autograd/autograd_impl.h"

/* A new tensor shaped like input i of node (channels-last when cl), filled by kernel op from k
 * (out set here). */
static nb_tensor *grad_like_input(nb_node *node, int i, nb_op op, nb_kargs *k, bool cl)
{
    const nb_edge *e = &node->next[i];
    nb_tensor *out = nb__tensor_new_format(nb__op_name(op), e->shape, e->ndim, e->dtype, e->device, cl);
    if (!out) return NULL;
    k->out = out;
    if (nb__dispatch(op, k) != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return nb__track(out);
}

/* g * (y > 0) for a fused ReLU's saved output y (as ReLU's own rule: zero gradient at 0). */
static nb_tensor *relu_mask(nb_node *node, nb_tensor *g)
{
    nb_tensor *y = nb__node_saved(node, 2);
    if (!y) return NULL;
    nb_tensor *out = nb__tensor_new_as("conv2d_backward", y->shape, y->ndim, y->dtype, y->storage->device,
                                       (const nb_tensor *const[]){g, y}, 2);
    if (!out) return NULL;
    nb_kargs k = {.out = out, .in = {g, y}};
    if (nb__dispatch(NB_OP_THRESHOLD_BACKWARD, &k) != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return nb__track(out);
}

nb_status nb__bw_CONV2D(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *x = nb__node_saved(node, 0), *w = nb__node_saved(node, 1);
    if (!x || !w) return nb_last_status();
    /* the kernels take the gradients in the layout of x (the forward's, NCHW or channels-last) */
    bool cl = nb__is_channels_last(x);
    nb_tensor *gc = nb_contiguous_format(g, cl ? NB_CHANNELS_LAST : NB_CONTIGUOUS_FORMAT);
    if (gc && node->flag) gc = relu_mask(node, gc);
    if (!gc) return nb_last_status();
    if (nb__edge_needs_grad(node, 0)) {
        nb_kargs k = {.in = {gc, w}, .i0 = node->i0, .i1 = node->i1};
        if (!(grad_in[0] = grad_like_input(node, 0, NB_OP_CONV2D_BACKWARD_INPUT, &k, cl))) return nb_last_status();
    }
    bool gw_needed = nb__edge_needs_grad(node, 1), gb_needed = node->n_inputs > 2 && nb__edge_needs_grad(node, 2);
    if (!gw_needed && !gb_needed) return NB_OK;
    nb_device dev = x->storage->device;
    nb_tensor *gw = nb__tensor_new(w->shape, 4, w->dtype, dev);
    nb_tensor *gb = gb_needed ? nb__tensor_new(w->shape, 1, w->dtype, dev) : NULL;
    nb_status st = gw && (gb || !gb_needed) ? NB_OK : nb_last_status();
    /* flag: gc went to CONV2D_BACKWARD_INPUT just before, unchanged (a backend may reuse its
     * layout conversion of it) */
    nb_kargs k = {.out = gw, .out2 = gb, .in = {gc, x}, .i0 = node->i0, .i1 = node->i1,
                  .flag = grad_in[0] != NULL};
    if (st == NB_OK) st = nb__dispatch(NB_OP_CONV2D_BACKWARD_WEIGHT, &k);
    if (st != NB_OK) {
        nb__release(gw);
        nb__release(gb);
        return st;
    }
    if (gw_needed) grad_in[1] = nb__track(gw);
    else nb__release(gw);
    if (gb) grad_in[2] = nb__track(gb);
    return NB_OK;
}

/* POOL_CL (autograd_impl.h): the pool's input was channels-last, so the gradients are too, for
 * its NHWC backward kernel. */
static nb_tensor *pool_grad_out(const nb_node *node, nb_tensor *g)
{
    return node->i1 & POOL_CL ? nb_contiguous_format(g, NB_CHANNELS_LAST) : nb_contiguous(g);
}

nb_status nb__bw_MAX_POOL2D(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *idx = nb__node_saved(node, 0), *gc = pool_grad_out(node, g);
    if (!idx || !gc) return nb_last_status();
    nb_kargs k = {.in = {gc, idx}, .i0 = node->i0, .i1 = node->i1 & ~POOL_CL};
    grad_in[0] = grad_like_input(node, 0, NB_OP_MAX_POOL2D_BACKWARD, &k, node->i1 & POOL_CL);
    return grad_in[0] ? NB_OK : nb_last_status();
}

nb_status nb__bw_AVG_POOL2D(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *gc = pool_grad_out(node, g);
    if (!gc) return nb_last_status();
    nb_kargs k = {.in = {gc}, .i0 = node->i0, .i1 = node->i1 & ~POOL_CL, .flag = node->flag};
    grad_in[0] = grad_like_input(node, 0, NB_OP_AVG_POOL2D_BACKWARD, &k, node->i1 & POOL_CL);
    return grad_in[0] ? NB_OK : nb_last_status();
}

nb_status nb__bw_ADAPTIVE_AVG_POOL2D(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *gc = pool_grad_out(node, g);
    if (!gc) return nb_last_status();
    nb_kargs k = {.in = {gc}};
    grad_in[0] = grad_like_input(node, 0, NB_OP_ADAPTIVE_AVG_POOL2D_BACKWARD, &k, node->i1 & POOL_CL);
    return grad_in[0] ? NB_OK : nb_last_status();
}

nb_status nb__bw_BATCH_NORM(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *x = nb__node_saved(node, 0), *w = node->i0 ? nb__node_saved(node, 1) : NULL;
    nb_tensor *stats = nb__node_saved(node, 2);
    if (!x || (node->i0 && !w) || !stats) return nb_last_status();
    /* a channels-last x (CPU only: see nb_batch_norm) takes g and gives gx channels-last */
    bool cl = nb__keeps_channels_last(x);
    nb_tensor *gc = cl ? nb_contiguous_format(g, NB_CHANNELS_LAST) : nb_contiguous(g);
    if (!gc) return nb_last_status();
    nb_tensor_params tp = nb_tensor_params_default();
    tp.dtype = x->dtype;
    tp.device = x->storage->device;
    nb_tensor *gwb = nb_empty((int64_t[]){2, x->shape[1]}, 2, &tp);
    nb_tensor *gx = gwb && nb__edge_needs_grad(node, 0)
                        ? nb__track(nb__tensor_new_format("batch_norm_backward", x->shape, x->ndim, x->dtype,
                                                          tp.device, cl))
                        : NULL;
    if (!gwb || (nb__edge_needs_grad(node, 0) && !gx)) return nb_last_status();
    /* nb_batch_norm_add_relu's residual: the gradient that reaches it (made in any case: gx is
     * computed from it), laid out as x; nb_batch_norm_add's (no ReLU, nothing saved) is g */
    bool fused_relu_res = node->n_inputs == 4 && node->i1;
    nb_tensor *r = fused_relu_res ? nb__node_saved(node, 3) : NULL;
    if (fused_relu_res && !r) return nb_last_status();
    nb_tensor *gr = r ? nb__track(nb__tensor_new_format("batch_norm_backward", x->shape, x->ndim, x->dtype, tp.device,
                                                        cl))
                      : NULL;
    if (r && !gr) return nb_last_status();
    /* stats' third row is the weight (or 1) the forward saw, w's version checked above */
    nb_kargs k = {.out = gx, .out2 = gwb, .out3 = gr, .in = {gc, x, stats, r}, .s0 = node->s0, .flag = node->flag,
                  .i1 = node->i1};
    NB_TRY(nb__dispatch(NB_OP_BATCH_NORM_BACKWARD, &k));
    grad_in[0] = gx;
    if (r) grad_in[3] = gr;
    else if (node->n_inputs == 4) grad_in[3] = g;
    if (nb__edge_needs_grad(node, 1) && !(grad_in[1] = nb_select(gwb, 0, 0))) return nb_last_status();
    if (nb__edge_needs_grad(node, 2) && !(grad_in[2] = nb_select(gwb, 0, 1))) return nb_last_status();
    return NB_OK;
}
