/* Backward rules of the fused recurrent and loss ops: LSTM_LAYER (src/nn/lstm.c) and
 * CROSS_ENTROPY (src/nn/loss.c). */
#include "autograd/autograd_impl.h"
#include "nabla/autograd.h"
#include "nabla/ops.h"

/* The steps of LSTM_LAYER backward, last first: LSTM_CELL_BACKWARD writes dgates[t] and carries
 * dc; one BMM gives the gradient reaching h_{t-1}, dhc[0] = dgates[t] @ W_hh. On the CPU the
 * cell kernel makes that product itself, each thread its own rows, and runs all the steps in one
 * call (src/cpu/ops/rnn.c). */
static nb_status lstm_steps(const nb_tensor *g, nb_tensor *y, nb_tensor *act, const nb_tensor *whh, nb_tensor *dg,
                            nb_tensor *dhc, bool need_h0, nb_tensor *db)
{
    int64_t T = act->shape[0];
    if (act->storage->device.type == NB_DEVICE_CPU) {
        nb_tensor *w = nb_contiguous(whh);
        if (!w) return nb_last_status();
        nb_kargs k = {.out = dg, .out2 = dhc, .out3 = db, .in = {g, y, act, w}, .i0 = T - 1, .i1 = T, .flag = need_h0};
        return T ? nb__dispatch(NB_OP_LSTM_CELL_BACKWARD, &k) : NB_OK;
    }
    nb_tensor *dh = nb_narrow(dhc, 0, 0, 1), *w = nb_unsqueeze(whh, 0);
    if (!dh || !w) return nb_last_status();
    for (int64_t t = T - 1; t >= 0; t--) {
        nb_kargs k = {.out = dg, .out2 = dhc, .in = {g, y, act}, .i0 = t};
        NB_TRY(nb__dispatch(NB_OP_LSTM_CELL_BACKWARD, &k));
        if (t == 0 && !need_h0) break;
        nb_tensor *d = nb_narrow(dg, 0, t, 1);
        if (!d) return nb_last_status();
        nb_kargs m = {.out = dh, .in = {d, w}, .s0 = 1.0, .s1 = 0.0};
        NB_TRY(nb__dispatch(NB_OP_BMM, &m));
    }
    return NB_OK;
}

/* Inputs (xp [T, B, 4H], w_hh [4H, H], hc0 [2, B, H] or NULL); saved (w_hh, Y, act). On the CPU,
 * when xp is the output of a linear layer that takes no other gradient (the layer's own input
 * projection), the cell kernel also sums dgates' columns, which the LINEAR rule takes as its
 * bias's gradient (nb__linear_below, as for cross entropy's): no pass over dgates [T B, 4H]. */
nb_status nb__bw_LSTM_LAYER(nb_node *node, nb_tensor *grad, nb_tensor **grad_in)
{
    nb_tensor *whh = nb__node_saved(node, 0), *y = nb__node_saved(node, 1), *act = nb__node_saved(node, 2);
    if (!whh || !y || !act) return nb_last_status();
    int64_t T = act->shape[0], B = act->shape[1], H = y->shape[3];
    nb_tensor_params tp = {.dtype = y->dtype, .device = y->storage->device};
    nb_tensor *g = nb_contiguous(grad);
    nb_tensor *dg = g ? nb_empty(act->shape, 3, &tp) : NULL;
    nb_tensor *dhc = dg ? nb_zeros((int64_t[]){2, B, H}, 3, &tp) : NULL;
    if (!dhc) return nb_last_status();
    bool need_h0 = nb__edge_needs_grad(node, 2);
    nb_node *lin = nb__edge_needs_grad(node, 0) && y->storage->device.type == NB_DEVICE_CPU
                       ? nb__linear_below(node, 0, 4 * H, y->dtype)
                       : NULL;
    nb_tensor *db = lin ? nb_empty(lin->next[2].shape, lin->next[2].ndim, &tp) : NULL;
    if (lin && !db) return nb_last_status();
    NB_TRY(lstm_steps(g, y, act, whh, dg, dhc, need_h0, db));
    if (lin) nb__linear_bias_ahead(lin, db, dg);
    if (nb__edge_needs_grad(node, 0)) grad_in[0] = dg;
    if (nb__edge_needs_grad(node, 1)) {
        nb_tensor *hs = nb_narrow(nb_select(y, 0, 0), 0, 0, T);
        nb_tensor *h2 = hs ? nb_reshape(hs, (int64_t[]){T * B, H}, 2) : NULL;
        nb_tensor *d2 = h2 ? nb_reshape(dg, (int64_t[]){T * B, 4 * H}, 2) : NULL;
        if (!d2 || !(grad_in[1] = nb_matmul(nb_t(d2), h2))) return nb_last_status();
    }
    if (need_h0 && !(grad_in[2] = nb_add(dhc, nb_select(g, 1, 0)))) return nb_last_status();
    return NB_OK;
}

/* Input x [N, C] (the target needs no gradient); saved (x, lse [N], target); grad [N]. When x is
 * a linear layer's output (through reshapes) that nothing else takes, the kernel also sums the
 * gradient's columns as it writes them, and the LINEAR rule takes that as its bias's gradient
 * (nb__linear_below): the engine's sum over the gradient would read all of it again.
 * With flag (src/nn/loss.c), saved slot 0 is instead the forward's probabilities times s0,
 * q [N + i1, C] (i1 = 1: row N holds their column sums). When every g[n] is s0 (the mean's or
 * the sum's gradient, as a loss's backward gives it) and this backward frees the saved tensors
 * after, the gradient is q itself, less s0 at the targets: the kernel writes N values. */
nb_status nb__bw_CROSS_ENTROPY(nb_node *node, nb_tensor *grad, nb_tensor **grad_in)
{
    nb_tensor *x = nb__node_saved(node, 0), *lse = nb__node_saved(node, 1), *tgt = nb__node_saved(node, 2);
    if (!x || !lse || !tgt) return nb_last_status();
    nb_tensor *two[2] = {lse, nb_contiguous(nb_expand(grad, lse->shape, 1))};
    nb_tensor *rows = two[1] ? nb_stack(two, 2, 0) : NULL;
    if (!rows) return nb_last_status();
    int64_t N = lse->shape[0], C = x->shape[1];
    bool probs = node->flag, sums_ahead = probs && node->i1 == 1;
    bool in_place = probs && !node->keep_saved && x->storage->device.type == NB_DEVICE_CPU;
    for (int64_t n = 0; in_place && n < N; n++) /* g, the second row of rows, against the scale */
        in_place = (x->dtype == NB_FLOAT32 ? (double)((const float *)nb__data(rows))[N + n]
                                           : ((const double *)nb__data(rows))[N + n]) ==
                   (x->dtype == NB_FLOAT32 ? (double)(float)node->s0 : node->s0);
    nb_tensor_params p = {.dtype = x->dtype, .device = x->storage->device};
    nb_tensor *gx = in_place ? nb_narrow(x, 0, 0, N) : nb_empty((int64_t[]){N, C}, 2, &p);
    if (!gx) return nb_last_status();
    /* in place, the sums come from q's row N: none without it */
    nb_node *lin = !in_place || sums_ahead ? nb__linear_below(node, 0, C, x->dtype) : NULL;
    const nb_edge *b = lin ? &lin->next[2] : NULL;
    nb_tensor *db = b ? nb_empty(b->shape, b->ndim, &p) : NULL;
    if (b && !db) return nb_last_status();
    nb_kargs k = {.out = gx, .out2 = db, .in = {x, rows, tgt}, .flag = probs, .s0 = node->s0, .i1 = node->i1};
    NB_TRY(nb__dispatch(NB_OP_CROSS_ENTROPY_BACKWARD, &k));
    if (lin) nb__linear_bias_ahead(lin, db, gx);
    grad_in[0] = gx;
    return NB_OK;
}
