/* Backward rules of the elementwise binary ops and where (recorded by src/ops/binary.c).
 * Saved slots: 0 = a, 1 = b (both in the computation's dtype), 2 = the result (pow); s0 = the
 * scalar of the _scalar forms, which have one input. Gradients come back in the broadcast
 * shape; the engine sums them down to each input's shape and casts them to its dtype. */
#include "autograd/autograd_impl.h"

static bool is_scalar_form(const nb_node *node) { return node->n_inputs == 1; }

/* The saved tensor of slot i, or NULL with the error set (modified in place, or freed). */
#define SAVED(var, i)                                                                            \
    nb_tensor *var = nb__node_saved(node, i);                                                    \
    if (!var) return nb_last_status()

/* A tensor from an op, or return the op's error (no NULL is passed on to the next op, which
 * would replace the message). */
#define TRY_T(var, expr)                                                                         \
    nb_tensor *var = (expr);                                                                     \
    if (!var) return nb_last_status()

/* A 0-dim zero of g's dtype and device, for where(). */
static nb_tensor *zero_like_scalar(const nb_tensor *g)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = nb_tensor_dtype(g);
    p.device = nb_tensor_device(g);
    return nb_scalar_tensor(0.0, &p);
}

nb_status nb__bw_ADD(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    grad_in[0] = g;
    if (!is_scalar_form(node)) grad_in[1] = g;
    return NB_OK;
}

nb_status nb__bw_SUB(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    grad_in[0] = g;
    if (!is_scalar_form(node) && nb__edge_needs_grad(node, 1)) {
        grad_in[1] = nb_mul_scalar(g, -1.0);
        if (!grad_in[1]) return nb_last_status();
    }
    return NB_OK;
}

nb_status nb__bw_MUL(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    if (is_scalar_form(node)) {
        grad_in[0] = nb_mul_scalar(g, node->s0);
        return grad_in[0] ? NB_OK : nb_last_status();
    }
    if (nb__edge_needs_grad(node, 0)) {
        SAVED(b, 1);
        if (!(grad_in[0] = nb_mul(g, b))) return nb_last_status();
    }
    if (nb__edge_needs_grad(node, 1)) {
        SAVED(a, 0);
        if (!(grad_in[1] = nb_mul(g, a))) return nb_last_status();
    }
    return NB_OK;
}

/* d(a/b)/da = 1/b; d(a/b)/db = -(a/b)/b, in PyTorch's order of operations. */
nb_status nb__bw_DIV(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    if (is_scalar_form(node)) {
        grad_in[0] = nb_div_scalar(g, node->s0);
        return grad_in[0] ? NB_OK : nb_last_status();
    }
    SAVED(b, 1);
    if (nb__edge_needs_grad(node, 0) && !(grad_in[0] = nb_div(g, b))) return nb_last_status();
    if (nb__edge_needs_grad(node, 1)) {
        SAVED(a, 0);
        TRY_T(ab, nb_div(a, b));
        TRY_T(q, nb_div(ab, b));
        TRY_T(gq, nb_mul(g, q));
        if (!(grad_in[1] = nb_mul_scalar(gq, -1.0))) return nb_last_status();
    }
    return NB_OK;
}

/* d(a^e)/da = e a^(e-1), and 0 where e == 0 (so that 0^0 has gradient 0, as in PyTorch). */
static nb_status pow_grad_base(nb_node *node, nb_tensor *g, nb_tensor *a, nb_tensor **out)
{
    if (is_scalar_form(node)) {
        double e = node->s0;
        if (e == 0.0) {
            *out = nb_zeros_like(g);
            return *out ? NB_OK : nb_last_status();
        }
        TRY_T(p, nb_pow_scalar(a, e - 1.0));
        TRY_T(d, nb_mul_scalar(p, e));
        *out = nb_mul(g, d);
        return *out ? NB_OK : nb_last_status();
    }
    SAVED(e, 1);
    TRY_T(em1, nb_sub_scalar(e, 1.0));
    TRY_T(p, nb_pow(a, em1));
    TRY_T(d, nb_mul(e, p));
    TRY_T(gd, nb_mul(g, d));
    TRY_T(zero, zero_like_scalar(g));
    TRY_T(e0, nb_eq_scalar(e, 0.0));
    *out = nb_where(e0, zero, gd);
    return *out ? NB_OK : nb_last_status();
}

/* d(a^e)/de = a^e log(a), and 0 where a == 0 and e >= 0 (PyTorch's convention). */
static nb_status pow_grad_exponent(nb_node *node, nb_tensor *g, nb_tensor *a, nb_tensor **out)
{
    SAVED(e, 1);
    SAVED(r, 2);
    TRY_T(zero, zero_like_scalar(g));
    TRY_T(a0, nb_eq_scalar(a, 0.0));
    TRY_T(e0, nb_ge_scalar(e, 0.0));
    TRY_T(cond, nb_mul(a0, e0)); /* bool * bool: and */
    TRY_T(la, nb_log(a));
    TRY_T(d, nb_mul(r, la));
    TRY_T(w, nb_where(cond, zero, d));
    *out = nb_mul(g, w);
    return *out ? NB_OK : nb_last_status();
}

nb_status nb__bw_POW(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    SAVED(a, 0);
    if (nb__edge_needs_grad(node, 0)) NB_TRY(pow_grad_base(node, g, a, &grad_in[0]));
    if (!is_scalar_form(node) && nb__edge_needs_grad(node, 1)) NB_TRY(pow_grad_exponent(node, g, a, &grad_in[1]));
    return NB_OK;
}

/* maximum/minimum: the gradient goes to the input that won; ties split it half and half, and a
 * NaN (which wins against anything) passes it to both, as in PyTorch. lose_a(a, b) is where a
 * lost: a < b for maximum, a > b for minimum. */
static nb_status minmax_backward(nb_node *node, nb_tensor *g, nb_tensor **grad_in,
                                 nb_tensor *(*lose_a)(const nb_tensor *, const nb_tensor *),
                                 nb_tensor *(*lose_b)(const nb_tensor *, const nb_tensor *))
{
    SAVED(a, 0);
    SAVED(b, 1);
    TRY_T(zero, zero_like_scalar(g));
    TRY_T(half, nb_mul_scalar(g, 0.5));
    TRY_T(tie, nb_eq(a, b));
    TRY_T(shared, nb_where(tie, half, g));
    if (nb__edge_needs_grad(node, 0)) {
        TRY_T(lost, lose_a(a, b));
        if (!(grad_in[0] = nb_where(lost, zero, shared))) return nb_last_status();
    }
    if (nb__edge_needs_grad(node, 1)) {
        TRY_T(lost, lose_b(a, b));
        if (!(grad_in[1] = nb_where(lost, zero, shared))) return nb_last_status();
    }
    return NB_OK;
}

nb_status nb__bw_MAXIMUM(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    return minmax_backward(node, g, grad_in, nb_lt, nb_gt);
}

nb_status nb__bw_MINIMUM(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    return minmax_backward(node, g, grad_in, nb_gt, nb_lt);
}

/* inputs: 0 = cond (never differentiable), 1 = a, 2 = b; slot 0 = cond. */
nb_status nb__bw_WHERE(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    SAVED(cond, 0);
    TRY_T(zero, zero_like_scalar(g));
    if (nb__edge_needs_grad(node, 1) && !(grad_in[1] = nb_where(cond, g, zero))) return nb_last_status();
    if (nb__edge_needs_grad(node, 2) && !(grad_in[2] = nb_where(cond, zero, g))) return nb_last_status();
    return NB_OK;
}
