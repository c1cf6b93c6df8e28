/* Backward rules of reductions, softmax, log_softmax and cumsum. They follow PyTorch 1.13's
 * derivatives (tools/autograd/derivatives.yaml and FunctionsManual.cpp), including its choices at
 * ties, zeros and infinities. The reductions' nodes carry dim_mask (the reduced dims of input 0),
 * flag (keepdim) and the op's parameters; g arrives in the output's shape. */
#include <math.h>
#include <string.h>

#include "autograd/autograd_impl.h"

#define TRYP(x)                                                                                  \
    do {                                                                                         \
        if (!(x)) return nb_last_status();                                                       \
    } while (0)

/* The input's shape with the reduced dims set to 1. */
static int keep_shape(const nb_node *node, int64_t *shape)
{
    const nb_edge *e = &node->next[0];
    for (int d = 0; d < e->ndim; d++) shape[d] = node->dim_mask >> d & 1 ? 1 : e->shape[d];
    return e->ndim;
}

/* t (an output-shaped tensor) in keepdim form, ready to broadcast against the input. */
static nb_tensor *to_keep(const nb_node *node, const nb_tensor *t)
{
    if (node->flag) return (nb_tensor *)t;
    int64_t shape[NB_MAX_DIMS];
    int nd = keep_shape(node, shape);
    return nb_reshape(t, shape, nd);
}

static int mask_dims(const nb_node *node, int64_t *dims)
{
    int nd = 0;
    for (int d = 0; d < node->next[0].ndim; d++)
        if (node->dim_mask >> d & 1) dims[nd++] = d;
    return nd;
}

static nb_tensor *scalar_like(double v, const nb_tensor *t)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = nb_tensor_dtype(t);
    p.device = nb_tensor_device(t);
    return nb_scalar_tensor(v, &p);
}

static nb_status set_grad(nb_tensor **grad_in, nb_tensor *g)
{
    grad_in[0] = g;
    return g ? NB_OK : nb_last_status();
}

nb_status nb__bw_SUM(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *gk = to_keep(node, g);
    return set_grad(grad_in, gk ? nb_expand(gk, node->next[0].shape, node->next[0].ndim) : NULL);
}

nb_status nb__bw_MEAN(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    const nb_edge *e = &node->next[0];
    int64_t n = 1;
    for (int d = 0; d < e->ndim; d++)
        if (node->dim_mask >> d & 1) n *= e->shape[d];
    nb_tensor *gk = to_keep(node, g);
    nb_tensor *ge = gk ? nb_expand(gk, e->shape, e->ndim) : NULL;
    return set_grad(grad_in, ge ? nb_div_scalar(ge, (double)n) : NULL);
}

/* d prod / d x_i = the product of the others: result / x_i without zeros; with one zero in a
 * slice, the product of the rest at the zero and 0 elsewhere; with two or more, 0. */
nb_status nb__bw_PROD(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *x = nb__node_saved(node, 0);
    TRYP(x);
    int64_t dims[NB_MAX_DIMS];
    int nd = mask_dims(node, dims);
    nb_tensor *z = nb_eq_scalar(x, 0);
    TRYP(z);
    nb_tensor *nz = nb_sum(z, dims, nd, true);
    nb_tensor *xs = nb_masked_fill(x, z, 1.0);
    nb_tensor *pr = xs ? nb_prod(xs, dims, nd, true) : NULL; /* the product of the non-zeros */
    nb_tensor *zero = scalar_like(0, x);
    TRYP(nz && pr && zero);
    nb_tensor *at_zero = nb_where(z, pr, zero);
    nb_tensor *one_zero = at_zero ? nb_where(nb_eq_scalar(nz, 1), at_zero, zero) : NULL;
    nb_tensor *others = one_zero ? nb_where(nb_eq_scalar(nz, 0), nb_div(pr, xs), one_zero) : NULL;
    nb_tensor *gk = others ? to_keep(node, g) : NULL;
    return set_grad(grad_in, gk ? nb_mul(gk, others) : NULL);
}

/* max / min over everything: the gradient is shared evenly among the elements equal to the
 * result (or among the NaNs when it is NaN); along a dim: it goes to the index found. */
static nb_status extreme_backward(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    const nb_edge *e = &node->next[0];
    if (node->i1) {
        nb_tensor *idx = nb__node_saved(node, 0);
        TRYP(idx);
        if (e->ndim == 0) return set_grad(grad_in, g);
        nb_tensor_params p = nb_tensor_params_default();
        p.dtype = nb_tensor_dtype(g);
        p.device = nb_tensor_device(g);
        nb_tensor *zeros = nb_zeros(e->shape, e->ndim, &p);
        nb_tensor *ik = to_keep(node, idx), *gk = to_keep(node, g);
        TRYP(zeros && ik && gk);
        return set_grad(grad_in, nb_scatter(zeros, node->i0, ik, gk));
    }
    nb_tensor *x = nb__node_saved(node, 0), *res = nb__node_saved(node, 1);
    TRYP(x && res);
    double v;
    NB_TRY(nb_item(res, &v));
    nb_tensor *mask = isnan(v) ? nb_ne(x, x) : nb_eq(x, res);
    nb_tensor *count = mask ? nb_sum(mask, NULL, 0, false) : NULL;
    nb_tensor *share = count ? nb_div(g, count) : NULL;
    nb_tensor *zero = scalar_like(0, x);
    TRYP(share && zero);
    return set_grad(grad_in, nb_where(mask, share, zero));
}

nb_status nb__bw_MAX(nb_node *node, nb_tensor *g, nb_tensor **grad_in) { return extreme_backward(node, g, grad_in); }
nb_status nb__bw_MIN(nb_node *node, nb_tensor *g, nb_tensor **grad_in) { return extreme_backward(node, g, grad_in); }

/* var: 2 / (n - correction) * g * (x - mean); PyTorch's formula, so n - correction <= 0 gives
 * its infinities and NaNs. gk is the gradient of var in keepdim form. */
static nb_tensor *var_backward(nb_node *node, nb_tensor *x, nb_tensor *gk)
{
    int64_t dims[NB_MAX_DIMS];
    int nd = mask_dims(node, dims);
    const nb_edge *e = &node->next[0];
    int64_t n = 1;
    for (int d = 0; d < e->ndim; d++)
        if (node->dim_mask >> d & 1) n *= e->shape[d];
    double dof = (double)(n - node->i0);
    if (e->ndim == 0 && dof <= 0) return nb_mul_scalar(gk, INFINITY); /* PyTorch 1.13's special case */
    nb_tensor *mean = nb_mean(x, dims, nd, true);
    nb_tensor *xm = mean ? nb_sub(x, mean) : NULL;
    nb_tensor *gs = xm ? nb_mul_scalar(gk, 2.0 / dof) : NULL;
    return gs ? nb_mul(gs, xm) : NULL;
}

nb_status nb__bw_VAR(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *x = nb__node_saved(node, 0);
    TRYP(x);
    nb_tensor *gk = to_keep(node, g);
    return set_grad(grad_in, gk ? var_backward(node, x, gk) : NULL);
}

/* std = sqrt(var): g / (2 std), 0 where std is 0 (PyTorch's choice), then var's rule. */
nb_status nb__bw_STD(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *x = nb__node_saved(node, 0), *sd = nb__node_saved(node, 1);
    TRYP(x && sd);
    nb_tensor *sk = to_keep(node, sd), *gk = to_keep(node, g);
    TRYP(sk && gk);
    nb_tensor *gv = nb_div(gk, nb_mul_scalar(sk, 2.0));
    nb_tensor *z = nb_eq_scalar(sk, 0);
    nb_tensor *gm = gv && z ? nb_masked_fill(gv, z, 0.0) : NULL;
    return set_grad(grad_in, gm ? var_backward(node, x, gm) : NULL);
}

nb_status nb__bw_LOGSUMEXP(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *x = nb__node_saved(node, 0), *res = nb__node_saved(node, 1);
    TRYP(x && res);
    nb_tensor *rk = to_keep(node, res), *gk = to_keep(node, g);
    TRYP(rk && gk);
    nb_tensor *ex = nb_exp(nb_sub(x, rk));
    return set_grad(grad_in, ex ? nb_mul(gk, ex) : NULL);
}

/* PyTorch's norm_backward: p = 0 has no gradient; p = 1: sgn(x) g; p = 2: g x / norm; p = inf:
 * sgn(x) g shared among the elements with |x| = norm; other p through |x|^(p-1), every case 0
 * where the norm is 0. */
static nb_tensor *norm_general(double p, nb_tensor *x, nb_tensor *nk, nb_tensor *gk)
{
    nb_tensor *ax = nb_abs(x), *sg = nb_sign(x);
    if (!ax || !sg) return NULL;
    if (p < 1) {
        nb_tensor *sc = nb_mul(sg, nb_pow_scalar(ax, p - 1));
        sc = sc ? nb_masked_fill(sc, nb_eq_scalar(x, 0), 0.0) : NULL;
        nb_tensor *np = nb_pow_scalar(nk, 1 - p);
        return sc && np ? nb_mul(nb_mul(sc, gk), np) : NULL;
    }
    nb_tensor *sc = p < 2 ? nb_mul(sg, nb_pow_scalar(ax, p - 1)) : nb_mul(x, nb_pow_scalar(ax, p - 2));
    nb_tensor *scale = nb_div(gk, nb_pow_scalar(nk, p - 1));
    scale = scale ? nb_masked_fill(scale, nb_eq_scalar(nk, 0), 0.0) : NULL;
    return sc && scale ? nb_mul(sc, scale) : NULL;
}

nb_status nb__bw_NORM(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    double p = node->s0;
    if (p == 0) return NB_OK;
    nb_tensor *x = nb__node_saved(node, 0), *res = nb__node_saved(node, 1);
    TRYP(x && res);
    nb_tensor *nk = to_keep(node, res), *gk = to_keep(node, g);
    TRYP(nk && gk);
    if (p == 1) return set_grad(grad_in, nb_mul(nb_sign(x), gk));
    if (p == 2) {
        nb_tensor *q = nb_div(x, nk);
        q = q ? nb_masked_fill(q, nb_eq_scalar(nk, 0), 0.0) : NULL;
        return set_grad(grad_in, q ? nb_mul(gk, q) : NULL);
    }
    if (isinf(p)) {
        int64_t dims[NB_MAX_DIMS];
        int nd = mask_dims(node, dims);
        nb_tensor *ax = nb_abs(x);
        TRYP(ax);
        nb_tensor *m = nb_maximum(nb_to_dtype(nb_eq(ax, nk), x->dtype), nb_to_dtype(nb_ne(ax, ax), x->dtype));
        nb_tensor *cnt = m ? nb_sum(m, dims, nd, true) : NULL;
        nb_tensor *share = cnt ? nb_mul(nb_div(gk, cnt), m) : NULL;
        return set_grad(grad_in, share ? nb_mul(nb_sign(x), share) : NULL);
    }
    return set_grad(grad_in, norm_general(p, x, nk, gk));
}

/* ---- along one dim ---------------------------------------------------------------------------- */

/* The fused kernel op(g, y) into a new tensor of g's shape (scope-tracked). */
static nb_tensor *fused(nb_op op, nb_tensor *g, const nb_tensor *y, int64_t dim, bool flag)
{
    if (y && g->dtype != y->dtype) {
        g = nb_to_dtype(g, y->dtype);
        if (!g) return NULL;
    }
    const nb_tensor *refs[2] = {g, y}; /* the result laid out as they are (channels-last, say) */
    nb_tensor *out = nb__tensor_new_as(nb__op_name(op), g->shape, g->ndim, g->dtype, g->storage->device, refs, 2);
    if (!out) return NULL;
    nb_kargs a = {.out = out, .in = {g, y}, .i0 = dim, .flag = flag};
    if (nb__dispatch(op, &a) != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return nb__track(out);
}

nb_status nb__bw_SOFTMAX(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *y = nb__node_saved(node, 0);
    TRYP(y);
    return set_grad(grad_in, fused(NB_OP_SOFTMAX_BACKWARD, g, y, node->i0, false));
}

nb_status nb__bw_LOG_SOFTMAX(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    nb_tensor *y = nb__node_saved(node, 0);
    TRYP(y);
    return set_grad(grad_in, fused(NB_OP_LOG_SOFTMAX_BACKWARD, g, y, node->i0, false));
}

/* The gradient of a cumsum is the reversed cumsum of g (the CUMSUM kernel with flag set). */
nb_status nb__bw_CUMSUM(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    return set_grad(grad_in, fused(NB_OP_CUMSUM, g, NULL, node->i0, true));
}
