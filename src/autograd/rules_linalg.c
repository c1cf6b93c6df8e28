/* Backward rules of the matrix products (entry points in src/ops/linalg.c). Saved slots: 0 = the
 * left matrix (kept only when the right one needs a gradient), 1 = the right matrix (kept only
 * when the left one needs a gradient). Each matrix gradient is one GEMM; broadcast batch dims
 * and bias dims are summed by the engine. */
#include "autograd/autograd_impl.h"

/* x @ y for x, y both 2-D or both 3-D. */
static nb_tensor *mmb(const nb_tensor *x, const nb_tensor *y)
{
    return x->ndim == 3 ? nb_bmm(x, y) : nb_mm(x, y);
}

static nb_tensor *mT(const nb_tensor *t)
{
    return nb_transpose(t, -1, -2);
}

/* The gradient product of the one operand that takes it straight (nb__edge_sink), added into it
 * times alpha: g @ b^T into a (sink_a), or a^T @ g into b (sink_b); nothing when neither. */
static nb_status sink_product(nb_tensor *sink_a, nb_tensor *sink_b, const nb_tensor *a, const nb_tensor *b,
                              nb_tensor *g, double alpha)
{
    if (!sink_a && !sink_b) return NB_OK;
    nb_tensor *l = sink_a ? g : mT(a), *r = sink_a ? mT(b) : g;
    if (!l || !r) return nb_last_status();
    return nb__mm_accumulate(sink_a ? sink_a : sink_b, l, r, alpha);
}

/* out = a @ b (mm, bmm and matmul's product): grad_a = g @ b^T, grad_b = a^T @ g. In a 2-D
 * product, one input that can take its gradient straight (nb__edge_sink) gets it added into it,
 * after the other input's gradient, which reads it. */
nb_status nb__bw_BMM(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *a = nb__edge_needs_grad(node, 1) ? nb__node_saved(node, 0) : NULL;
    nb_tensor *b = nb__edge_needs_grad(node, 0) ? nb__node_saved(node, 1) : NULL;
    if ((nb__edge_needs_grad(node, 1) && !a) || (nb__edge_needs_grad(node, 0) && !b)) return nb_last_status();
    double alpha = 0;
    nb_tensor *sink_a = b && g->ndim == 2 ? nb__edge_sink(node, 0, b, g, &alpha) : NULL;
    nb_tensor *sink_b = a && g->ndim == 2 && !sink_a ? nb__edge_sink(node, 1, a, g, &alpha) : NULL;
    if (b && !sink_a && !(grad_in[0] = mmb(g, mT(b)))) return nb_last_status();
    if (a && !sink_b && !(grad_in[1] = mmb(mT(a), g))) return nb_last_status();
    return sink_product(sink_a, sink_b, a, b, g, alpha);
}

/* mm's node: the 2-D case of the rule above. */
nb_status nb__bw_MM(nb_node *node, nb_tensor *g, nb_tensor **grad_in) { return nb__bw_BMM(node, g, grad_in); }

/* alpha * x @ y in one GEMM (addmm ignores its input when beta is 0). */
static nb_tensor *scaled_mm(const nb_tensor *x, const nb_tensor *y, double alpha)
{
    if (alpha == 1) return nb_mm(x, y);
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = nb_tensor_dtype(x);
    p.device = nb_tensor_device(x);
    nb_tensor *zero = nb_scalar_tensor(0, &p);
    return zero ? nb_addmm(zero, x, y, 0, alpha) : NULL;
}

/* out = beta * input + alpha * a @ b (s0 = beta, s1 = alpha); input's gradient is returned in
 * the product's shape for the engine to reduce. One matrix that can take its gradient straight
 * (nb__edge_sink) gets it added into it (scaled by alpha as well), after the other matrix's
 * gradient, which reads it. */
nb_status nb__bw_ADDMM(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    if (nb__edge_needs_grad(node, 0)) {
        grad_in[0] = node->s0 == 1 ? g : nb_mul_scalar(g, node->s0);
        if (!grad_in[0]) return nb_last_status();
    }
    nb_tensor *a = nb__edge_needs_grad(node, 2) ? nb__node_saved(node, 0) : NULL;
    nb_tensor *b = nb__edge_needs_grad(node, 1) ? nb__node_saved(node, 1) : NULL;
    if ((nb__edge_needs_grad(node, 2) && !a) || (nb__edge_needs_grad(node, 1) && !b)) return nb_last_status();
    double alpha = 0;
    nb_tensor *sink_a = b ? nb__edge_sink(node, 1, b, g, &alpha) : NULL;
    nb_tensor *sink_b = a && !sink_a ? nb__edge_sink(node, 2, a, g, &alpha) : NULL;
    if (b && !sink_a && !(grad_in[1] = scaled_mm(g, mT(b), node->s1))) return nb_last_status();
    if (a && !sink_b && !(grad_in[2] = scaled_mm(mT(a), g, node->s1))) return nb_last_status();
    return sink_product(sink_a, sink_b, a, b, g, alpha * node->s1);
}

/* out [..., out] = x [..., in] @ weight^T + bias. With g2 = g as [rows, out] and x2 (saved) = x
 * as [rows, in]: dx = g2 @ weight, dweight = g2^T @ x2, dbias = g summed by the engine (or made
 * already by the rule that made g: nb__linear_bias_take). A weight that can take its gradient
 * straight (nb__edge_sink) gets g2^T @ x2 added into it, after dx, which reads it. */
nb_status nb__bw_LINEAR(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    int64_t flat[2] = {nb__numel(g->shape, g->ndim - 1), g->shape[g->ndim - 1]};
    nb_tensor *g2 = nb_reshape(g, flat, 2);
    if (!g2) return nb_last_status();
    if (nb__edge_needs_grad(node, 0)) {
        const nb_edge *e = &node->next[0];
        nb_tensor *w = nb__node_saved(node, 1);
        nb_tensor *dx = w ? nb_mm(g2, w) : NULL;
        if (!dx || !(grad_in[0] = nb_reshape(dx, e->shape, e->ndim))) return nb_last_status();
    }
    if (nb__edge_needs_grad(node, 1)) {
        nb_tensor *x2 = nb__node_saved(node, 0);
        if (!x2) return nb_last_status();
        double alpha = 0;
        nb_tensor *sink = nb__edge_sink(node, 1, x2, g2, &alpha);
        if (sink) NB_TRY(sink_product(NULL, sink, g2, NULL, x2, alpha)); /* g2^T @ x2, as a^T @ g */
        else if (!(grad_in[1] = nb_mm(mT(g2), x2))) return nb_last_status();
    }
    if (nb__edge_needs_grad(node, 2)) {
        grad_in[2] = nb__linear_bias_take(node, g); /* made by the rule that made g (cross entropy's) */
        if (!grad_in[2]) grad_in[2] = g;
    }
    return NB_OK;
}
