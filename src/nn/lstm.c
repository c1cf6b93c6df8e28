/* The LSTM (nabla/rnn.h). Per layer, one GEMM projects the inputs of all steps
 * (x [T*B, in] @ W_ih^T + (b_ih + b_hh)); the recurrence is then one autograd node, LSTM_LAYER:
 * each step runs one GEMM with W_hh (a BMM call) and the fused pointwise kernel LSTM_CELL, writing
 * h and c into one buffer Y [2, T+1, B, H] and the gate activations into act [T, B, 4H]. Its
 * backward (rules_rnn.c) walks the steps back with LSTM_CELL_BACKWARD and one GEMM each, writing
 * the gate gradients into one [T, B, 4H] buffer: that is the gradient of the projection, so the
 * input side costs one GEMM per layer, and W_hh's gradient is one GEMM over all steps. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "autograd/autograd_impl.h"
#include "core/error_impl.h"
#include "core/tensor_impl.h"
#include "nabla/autograd.h"
#include "nabla/ops.h"
#include "nabla/rnn.h"

nb_lstm_params nb_lstm_params_default(void)
{
    return (nb_lstm_params){.hidden_size = 0, .batch_first = false, .bias = true};
}

int nb_lstm_num_weights(int num_layers, const nb_lstm_params *p)
{
    return num_layers * (p && !p->bias ? 2 : 4);
}

static const char *const WEIGHT_KIND[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};

int nb_lstm_weight_name(int layer, int index, char *buf, size_t size)
{
    if (layer < 0 || index < 0 || index > 3) {
        nb__err(NB_ERR_INVALID_ARG, "lstm_weight_name: bad layer %d or index %d (0 .. 3)", layer, index);
        return -1;
    }
    return snprintf(buf, size, "%s_l%d", WEIGHT_KIND[index], layer);
}

/* ---- argument checks ------------------------------------------------------------------------- */

static nb_status check_tensor(const nb_tensor *t, const char *name, const int64_t *want, int nd, nb_dtype dt)
{
    char a[NB_SHAPE_STR_MAX], b[NB_SHAPE_STR_MAX];
    if (!t) return nb__err(NB_ERR_INVALID_ARG, "lstm: %s is NULL", name);
    if (t->dtype != dt)
        return nb__err(NB_ERR_DTYPE, "lstm: %s is %s but the input is %s", name, nb_dtype_name(t->dtype),
                       nb_dtype_name(dt));
    bool same = t->ndim == nd;
    for (int i = 0; same && i < nd; i++) same = t->shape[i] == want[i];
    if (!same)
        return nb__err(NB_ERR_SHAPE, "lstm: %s has shape %s, expected %s", name, nb__shape_str(t->shape, t->ndim, a),
                       nb__shape_str(want, nd, b));
    return NB_OK;
}

static nb_status check_weights(nb_tensor *const *w, int per, int layers, int64_t in, int64_t H, nb_dtype dt)
{
    char name[32];
    for (int l = 0; l < layers; l++) {
        int64_t shapes[4][2] = {{4 * H, l ? H : in}, {4 * H, H}, {4 * H}, {4 * H}};
        for (int k = 0; k < per; k++) {
            nb_lstm_weight_name(l, k, name, sizeof name);
            NB_TRY(check_tensor(w[l * per + k], name, shapes[k], k < 2 ? 2 : 1, dt));
        }
    }
    return NB_OK;
}

static nb_status check_args(const nb_tensor *x, const nb_tensor *h0, const nb_tensor *c0, nb_tensor *const *w,
                            int n_weights, int layers, const nb_lstm_params *p)
{
    char a[NB_SHAPE_STR_MAX];
    if (!x || !w || !p) return nb__err(NB_ERR_INVALID_ARG, "lstm: NULL %s", !x ? "input" : !w ? "weights" : "params");
    if (p->hidden_size < 1)
        return nb__err(NB_ERR_INVALID_ARG, "lstm: hidden_size must be >= 1 (got %lld)", (long long)p->hidden_size);
    if (layers < 1) return nb__err(NB_ERR_INVALID_ARG, "lstm: num_layers must be >= 1 (got %d)", layers);
    int want = nb_lstm_num_weights(layers, p);
    if (n_weights != want)
        return nb__err(NB_ERR_INVALID_ARG, "lstm: expected %d weights for %d layer%s %s bias, got %d", want, layers,
                       layers == 1 ? "" : "s", p->bias ? "with" : "without", n_weights);
    if (!nb_dtype_is_floating(x->dtype))
        return nb__err(NB_ERR_DTYPE, "lstm: input must be a floating tensor (got %s)", nb_dtype_name(x->dtype));
    if (x->ndim != 3 || x->shape[0] == 0 || x->shape[1] == 0)
        return nb__err(NB_ERR_SHAPE, "lstm: input must be 3-D [%s, in] with no empty dim, got %s",
                       p->batch_first ? "B, T" : "T, B", nb__shape_str(x->shape, x->ndim, a));
    int64_t H = p->hidden_size, B = x->shape[p->batch_first ? 0 : 1];
    NB_TRY(check_weights(w, p->bias ? 4 : 2, layers, x->shape[2], H, x->dtype));
    int64_t st[3] = {layers, B, H};
    if (h0) NB_TRY(check_tensor(h0, "h0", st, 3, x->dtype));
    if (c0) NB_TRY(check_tensor(c0, "c0", st, 3, x->dtype));
    return NB_OK;
}

/* ---- forward ------------------------------------------------------------------------------- */

/* BMM of one step: out[0] = a[0] @ b[0] (3-D views, each [1, ., .]). */
static nb_status bmm1(nb_tensor *out, const nb_tensor *a, const nb_tensor *b)
{
    nb_kargs k = {.out = out, .in = {a, b}, .s0 = 1.0, .s1 = 0.0};
    return nb__dispatch(NB_OP_BMM, &k);
}

/* The recurrence of one layer, without autograd: fills Y [2, T+1, B, H] and act [T, B, 4H] from
 * xp [T, B, 4H] (contiguous) and hc0 [2, B, H] (NULL: zeros). Runs in the caller's scope with
 * grad mode off. */
static nb_status recur(const nb_tensor *xp, const nb_tensor *whh, const nb_tensor *hc0, nb_tensor *y, nb_tensor *act)
{
    int64_t T = xp->shape[0];
    /* W_hh^T made contiguous once (1 MB for H = 256), so that each step's product is NN: in the
     * DLBench LSTM's training step (Intel Xeon, the tuner's log) 0.55-0.57 ms a step against 0.63-0.64
     * for the NT product on W_hh itself at 1 thread, 0.26-0.27 against 0.30 at 2 */
    nb_tensor *whht = nb_contiguous(nb_t(whh));
    nb_tensor *y0 = whht ? nb_select(y, 1, 0) : NULL, *wt = y0 ? nb_unsqueeze(whht, 0) : NULL;
    if (!y0 || !wt) return nb_last_status();
    NB_TRY(hc0 ? nb_copy_(y0, hc0) : nb_fill_(y0, 0.0));
    nb_tensor *hs = nb_select(y, 0, 0);
    if (!hs) return nb_last_status();
    /* on the CPU the cell kernel makes each step's product itself, each thread its own rows, and
     * runs all the steps in one call: one OpenMP region for the layer (src/cpu/ops/rnn.c) */
    if (xp->storage->device.type == NB_DEVICE_CPU) {
        nb_kargs k = {.out = y, .out2 = act, .in = {xp, whht}, .i0 = 0, .i1 = T, .flag = hc0 != NULL};
        return T ? nb__dispatch(NB_OP_LSTM_CELL, &k) : NB_OK;
    }
    for (int64_t t = 0; t < T; t++) {
        bool rec = t > 0 || hc0;
        if (rec) {
            nb_tensor *h = nb_narrow(hs, 0, t, 1), *a = h ? nb_narrow(act, 0, t, 1) : NULL;
            if (!a) return nb_last_status();
            NB_TRY(bmm1(a, h, wt));
        }
        nb_kargs k = {.out = y, .out2 = act, .in = {xp}, .i0 = t, .flag = rec};
        NB_TRY(nb__dispatch(NB_OP_LSTM_CELL, &k));
    }
    return NB_OK;
}

/* One layer as one autograd node (LSTM_LAYER, rule in rules_rnn.c): returns Y [2, T+1, B, H]
 * (h and c of every step, the initial state at t = 0). */
static nb_tensor *lstm_layer(const nb_tensor *xp, const nb_tensor *whh, const nb_tensor *hc0)
{
    int64_t T = xp->shape[0], B = xp->shape[1], H = whh->shape[1];
    nb_tensor *y = nb__tensor_new((int64_t[]){2, T + 1, B, H}, 4, xp->dtype, xp->storage->device);
    nb_tensor *act = y ? nb__tensor_new(xp->shape, 3, xp->dtype, xp->storage->device) : NULL;
    if (!act) {
        nb__release(y);
        return NULL;
    }
    bool prev = nb_set_grad_enabled(false);
    nb_scope *s = nb_scope_begin();
    nb_status st = s ? recur(xp, whh, hc0, y, act) : nb_last_status();
    nb_scope_end(s);
    nb_set_grad_enabled(prev);
    if (st == NB_OK) {
        const nb_tensor *in[3] = {xp, whh, hc0}, *save[3] = {whh, y, act};
        nb__record(NB_OP_LSTM_LAYER, y, in, 3, save, 3, &st);
    }
    nb__release(act);
    if (st != NB_OK) {
        nb__release(y);
        return NULL;
    }
    return nb__track(y);
}

/* The initial state of a layer as one [2, B, H] tensor, or NULL (no error) when both are zeros. */
static nb_status initial_state(const nb_tensor *h0, const nb_tensor *c0, int l, nb_tensor **hc)
{
    *hc = NULL;
    if (!h0 && !c0) return NB_OK;
    const nb_tensor *ref = h0 ? h0 : c0;
    nb_tensor *h = h0 ? nb_select(h0, 0, l) : NULL, *c = c0 ? nb_select(c0, 0, l) : NULL;
    nb_tensor_params tp = {.dtype = ref->dtype, .device = ref->storage->device};
    nb_tensor *z = !h || !c ? nb_zeros(ref->shape + 1, 2, &tp) : NULL;
    nb_tensor *two[2] = {h ? h : z, c ? c : z};
    if (!two[0] || !two[1]) return nb_last_status();
    *hc = nb_stack(two, 2, 0);
    return *hc ? NB_OK : nb_last_status();
}

/* One layer over the whole sequence `in` [T, B, in_k]: its output [T, B, H] and final states,
 * views of the layer's Y. Every tensor made here belongs to the caller's scope. */
static nb_status layer(nb_tensor *in, nb_tensor *const *w, bool bias, const nb_tensor *hc0, nb_tensor **out,
                       nb_tensor **hn, nb_tensor **cn)
{
    int64_t T = in->shape[0];
    nb_tensor *b = bias ? nb_add(w[2], w[3]) : NULL;
    if (bias && !b) return nb_last_status();
    nb_tensor *xp = nb_linear(in, w[0], b);
    if (xp && !nb__is_contiguous(xp)) xp = nb_contiguous(xp);
    nb_tensor *y = xp ? lstm_layer(xp, w[1], hc0) : NULL;
    /* Y [2, T + 1, B, H] as [2 (T + 1), B, H]: h_t is row t, c_t row T + 1 + t. The output is then
     * one narrow of a reshape, whose backward writes one gradient of Y's size (a select and a
     * narrow wrote two, one of half and one of all of it). */
    nb_tensor *ys = y ? nb_reshape(y, (int64_t[]){2 * (T + 1), y->shape[2], y->shape[3]}, 3) : NULL;
    *out = ys ? nb_narrow(ys, 0, 1, T) : NULL;
    *hn = *out ? nb_select(ys, 0, T) : NULL;
    *cn = *hn ? nb_select(ys, 0, 2 * T + 1) : NULL;
    return *cn ? NB_OK : nb_last_status();
}

static nb_status run_layers(const nb_tensor *x, const nb_tensor *h0, const nb_tensor *c0, nb_tensor *const *w,
                            int layers, const nb_lstm_params *p, nb_tensor **out, nb_tensor **hs, nb_tensor **cs)
{
    nb_tensor *in = p->batch_first ? nb_transpose(x, 0, 1) : (nb_tensor *)x; /* only read */
    if (!in) return nb_last_status();
    int per = p->bias ? 4 : 2;
    for (int l = 0; l < layers; l++) {
        nb_tensor *hc0;
        NB_TRY(initial_state(h0, c0, l, &hc0));
        NB_TRY(layer(in, w + l * per, p->bias, hc0, &in, &hs[l], &cs[l]));
    }
    *out = p->batch_first ? nb_transpose(in, 0, 1) : in; /* PyTorch's batch_first output is contiguous */
    if (p->batch_first && *out) *out = nb_contiguous(*out);
    return *out ? NB_OK : nb_last_status();
}

nb_tensor *nb_lstm(const nb_tensor *x, const nb_tensor *h0, const nb_tensor *c0, nb_tensor *const *weights,
                   int n_weights, int num_layers, const nb_lstm_params *p, nb_tensor **h_n, nb_tensor **c_n)
{
    if (h_n) *h_n = NULL;
    if (c_n) *c_n = NULL;
    if (check_args(x, h0, c0, weights, n_weights, num_layers, p) != NB_OK) return NULL;
    nb_tensor **hs = calloc(2 * (size_t)num_layers, sizeof *hs);
    if (!hs) return nb__err_null(NB_ERR_OOM, "lstm: out of memory");
    nb_tensor **cs = hs + num_layers, *out = NULL, *hn = NULL, *cn = NULL;
    nb_scope *s = nb_scope_begin();
    nb_status st = s ? run_layers(x, h0, c0, weights, num_layers, p, &out, hs, cs) : nb_last_status();
    if (st == NB_OK && h_n && !(hn = nb_stack(hs, num_layers, 0))) st = nb_last_status();
    if (st == NB_OK && c_n && !(cn = nb_stack(cs, num_layers, 0))) st = nb_last_status();
    free(hs);
    if (st != NB_OK) {
        nb_scope_end(s);
        return NULL;
    }
    hn = hn ? nb_tensor_retain(hn) : NULL;
    cn = cn ? nb_tensor_retain(cn) : NULL;
    out = nb_scope_end_keep(s, out);
    if (h_n) *h_n = nb__track(hn);
    if (c_n) *c_n = nb__track(cn);
    return out;
}

/* ---- initialisation ------------------------------------------------------------------------ */

static nb_tensor *uniform(const int64_t *shape, int nd, double k, const nb_tensor_params *tp)
{
    nb_tensor *t = nb_rand(shape, nd, tp);
    bool prev = nb_set_grad_enabled(false);
    nb_status st = t ? nb_mul_scalar_(t, 2 * k) : nb_last_status();
    if (st == NB_OK) st = nb_sub_scalar_(t, k);
    nb_set_grad_enabled(prev);
    if (st == NB_OK) st = nb_tensor_set_requires_grad(t, true);
    return st == NB_OK ? t : NULL;
}

nb_status nb_lstm_init_weights(int64_t input_size, int num_layers, const nb_lstm_params *p, const nb_tensor_params *tp,
                               nb_tensor **weights)
{
    if (!weights || !p) return nb__err(NB_ERR_INVALID_ARG, "lstm_init_weights: NULL %s", !p ? "params" : "weights");
    int n = nb_lstm_num_weights(num_layers, p), per = p->bias ? 4 : 2;
    for (int i = 0; i < n; i++) weights[i] = NULL;
    if (p->hidden_size < 1 || num_layers < 1 || input_size < 1)
        return nb__err(NB_ERR_INVALID_ARG, "lstm_init_weights: bad sizes (input %lld, hidden %lld, layers %d)",
                       (long long)input_size, (long long)p->hidden_size, num_layers);
    nb_tensor_params q = tp ? *tp : nb_tensor_params_default();
    q.requires_grad = false;
    int64_t H = p->hidden_size;
    double k = 1.0 / sqrt((double)H);
    nb_scope *s = nb_scope_begin();
    if (!s) return nb_last_status();
    for (int i = 0; i < n; i++) {
        int l = i / per, kind = i % per;
        int64_t shape[2] = {4 * H, kind == 0 ? (l ? H : input_size) : H};
        nb_tensor *t = uniform(shape, kind < 2 ? 2 : 1, k, &q);
        if (!t) {
            for (int j = 0; j < i; j++) nb_tensor_free(weights[j]);
            for (int j = 0; j < n; j++) weights[j] = NULL;
            nb_scope_end(s);
            return nb_last_status();
        }
        weights[i] = nb_tensor_retain(t);
    }
    nb_scope_end(s);
    for (int i = 0; i < n; i++) nb__track(weights[i]);
    return NB_OK;
}
