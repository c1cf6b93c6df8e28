/* Backward rules of the elementwise unary ops and activations (entry points in
 * src/ops/unary.c, which say what each op saves: the input or the output in slot 0). The
 * activations go through their fused kernels (ops.def's *_BACKWARD); the rest are public ops,
 * as PyTorch's derivatives.yaml writes them. */
#include <math.h>

#include "autograd/autograd_impl.h"

/* The fused backward kernel op on (g, t) into a fresh tensor, owned by the engine's scope. */
static nb_tensor *fused(nb_op op, const nb_tensor *g, const nb_tensor *t, const nb_node *node)
{
    const char *name = nb__op_name(op);
    if (nb__check_inputs(name, (const nb_tensor *const[]){g, t}, 2) != NB_OK) return NULL;
    if (t->dtype != g->dtype && !(t = nb_to_dtype(t, g->dtype))) return NULL;
    int64_t shape[NB_MAX_DIMS];
    int nd;
    if (nb__broadcast_shapes(name, g->shape, g->ndim, t->shape, t->ndim, shape, &nd) != NB_OK)
        return NULL;
    nb_tensor *out = nb__tensor_new_as(name, shape, nd, g->dtype, g->storage->device,
                                       (const nb_tensor *const[]){g, t}, 2);
    if (!out) return NULL;
    nb_kargs a = {.out = out, .in = {g, t}, .s0 = node->s0, .s1 = node->s1, .i0 = node->i0};
    if (nb__dispatch(op, &a) != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return nb__track(out);
}

/* grad_in[0] = the fused kernel op on (g, saved slot 0). */
static nb_status fused_rule(nb_op op, nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    if (!nb__edge_needs_grad(node, 0)) return NB_OK;
    nb_tensor *t = nb__node_saved(node, 0);
    if (!t) return nb_last_status();
    grad_in[0] = fused(op, g, t, node);
    return grad_in[0] ? NB_OK : nb_last_status();
}

/* The saved tensor of slot 0, or NULL (return nb_last_status()). */
#define SAVED0(node) nb__node_saved((node), 0)
#define DONE(x) ((grad_in[0] = (x)) ? NB_OK : nb_last_status())

nb_status nb__bw_NEG(nb_node *node, nb_tensor *g, nb_tensor **grad_in) { return DONE(nb_neg(g)); }

nb_status nb__bw_ABS(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *x = SAVED0(node); /* sign(0) = 0: the gradient at the kink is 0, as PyTorch */
    nb_tensor *s = x ? nb_sign(x) : NULL;
    return s ? DONE(nb_mul(g, s)) : nb_last_status();
}

nb_status nb__bw_SIGN(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    return DONE(nb_zeros_like(g));
}

nb_status nb__bw_EXP(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *y = SAVED0(node);
    return y ? DONE(nb_mul(g, y)) : nb_last_status();
}

nb_status nb__bw_LOG(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *x = SAVED0(node);
    return x ? DONE(nb_div(g, x)) : nb_last_status();
}

nb_status nb__bw_LOG1P(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *x = SAVED0(node);
    nb_tensor *x1 = x ? nb_add_scalar(x, 1.0) : NULL;
    return x1 ? DONE(nb_div(g, x1)) : nb_last_status();
}

nb_status nb__bw_SQRT(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *y = SAVED0(node); /* g / (2 sqrt x) */
    nb_tensor *y2 = y ? nb_mul_scalar(y, 2.0) : NULL;
    return y2 ? DONE(nb_div(g, y2)) : nb_last_status();
}

nb_status nb__bw_RSQRT(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *y = SAVED0(node); /* -g y^3 / 2 */
    nb_tensor *y2 = y ? nb_mul(y, y) : NULL;
    nb_tensor *y3 = y2 ? nb_mul(y2, y) : NULL;
    nb_tensor *h = y3 ? nb_mul_scalar(g, -0.5) : NULL;
    return h ? DONE(nb_mul(h, y3)) : nb_last_status();
}

nb_status nb__bw_SIN(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *x = SAVED0(node);
    nb_tensor *c = x ? nb_cos(x) : NULL;
    return c ? DONE(nb_mul(g, c)) : nb_last_status();
}

nb_status nb__bw_COS(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *x = SAVED0(node);
    nb_tensor *s = x ? nb_sin(x) : NULL;
    nb_tensor *ns = s ? nb_neg(s) : NULL;
    return ns ? DONE(nb_mul(g, ns)) : nb_last_status();
}

nb_status nb__bw_TANH(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    return fused_rule(NB_OP_TANH_BACKWARD, node, g, grad_in); /* saved: the output */
}

nb_status nb__bw_SIGMOID(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    return fused_rule(NB_OP_SIGMOID_BACKWARD, node, g, grad_in); /* saved: the output */
}

nb_status nb__bw_RELU(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    /* saved: the output, as PyTorch: y > 0 exactly where x > 0, so the gradient at 0 is 0 */
    return fused_rule(NB_OP_THRESHOLD_BACKWARD, node, g, grad_in);
}

nb_status nb__bw_LEAKY_RELU(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    return fused_rule(NB_OP_LEAKY_RELU_BACKWARD, node, g, grad_in);
}

nb_status nb__bw_GELU(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    return fused_rule(NB_OP_GELU_BACKWARD, node, g, grad_in);
}

nb_status nb__bw_SILU(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    return fused_rule(NB_OP_SILU_BACKWARD, node, g, grad_in);
}

nb_status nb__bw_SOFTPLUS(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    return fused_rule(NB_OP_SOFTPLUS_BACKWARD, node, g, grad_in);
}

/* g where min <= x <= max (bounds included, as PyTorch), else 0; NaN inputs get 0. A select,
 * not a product with a mask, so that an inf or NaN g outside the range still gives 0. */
nb_status nb__bw_CLAMP(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *x = SAVED0(node);
    if (!x) return nb_last_status();
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = g->dtype;
    p.device = g->storage->device;
    nb_tensor *zero = nb_scalar_tensor(0.0, &p);
    nb_tensor *in_lo = nb_ge_scalar(x, node->s0), *in_hi = nb_le_scalar(x, node->s1);
    nb_tensor *r = zero && in_lo && in_hi ? nb_where(in_lo, g, zero) : NULL;
    return DONE(r ? nb_where(in_hi, r, zero) : NULL);
}
