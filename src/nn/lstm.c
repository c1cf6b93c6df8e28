/* The LSTM (nabla/rnn.h) built from ops: per layer, one GEMM projects the inputs of all steps
 * (x [T*B, in] @ W_ih^T + (b_ih + b_hh)); each step adds h_{t-1} @ W_hh^T in one addmm and runs
 * the gate math elementwise. Autograd comes from the ops.
 *
 * The projection is cut into steps by a binary tree of narrows rather than T selects of the whole:
 * a view's backward writes its gradient into zeros of its base's size, so T selects of [T, B, 4H]
 * would cost T full-size zero-fills and additions in backward (quadratic in T); the tree costs
 * about 2 log2(T) of them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

/* out[0 .. n) = the n steps of t [n, B, G] as [B, G] views, through a binary tree of narrows. */
static nb_status split_steps(nb_tensor *t, int64_t n, nb_tensor **out)
{
    if (n <= 2) {
        for (int64_t i = 0; i < n; i++)
            if (!(out[i] = nb_select(t, 0, i))) return nb_last_status();
        return NB_OK;
    }
    int64_t half = n / 2;
    nb_tensor *a = nb_narrow(t, 0, 0, half), *b = a ? nb_narrow(t, 0, half, n - half) : NULL;
    if (!b) return nb_last_status();
    NB_TRY(split_steps(a, half, out));
    return split_steps(b, n - half, out + half);
}

/* One step: gates = xp_t (+ h W_hh^T); updates *h and *c (NULL = zeros). */
static nb_status step(nb_tensor *xp_t, const nb_tensor *whh_t, nb_tensor **h, nb_tensor **c)
{
    nb_tensor *gates = *h ? nb_addmm(xp_t, *h, whh_t, 1.0, 1.0) : xp_t, *q[4];
    if (!gates || nb_chunk(gates, 4, 1, q, 4) != 4) return nb_last_status();
    nb_tensor *i = nb_sigmoid(q[0]), *f = i ? nb_sigmoid(q[1]) : NULL;
    nb_tensor *g = f ? nb_tanh(q[2]) : NULL, *o = g ? nb_sigmoid(q[3]) : NULL;
    nb_tensor *ig = o ? nb_mul(i, g) : NULL;
    if (!ig) return nb_last_status();
    nb_tensor *fc = *c ? nb_mul(f, *c) : NULL;
    nb_tensor *cn = !*c ? ig : fc ? nb_add(fc, ig) : NULL;
    nb_tensor *tc = cn ? nb_tanh(cn) : NULL;
    nb_tensor *hn = tc ? nb_mul(o, tc) : NULL;
    if (!hn) return nb_last_status();
    *h = hn;
    *c = cn;
    return NB_OK;
}

/* One layer over the whole sequence `in` [T, B, in_k]; writes its output [T, B, H] and final
 * states. Every tensor made here belongs to the caller's scope. */
static nb_status layer(nb_tensor *in, nb_tensor *const *w, bool bias, nb_tensor *h, nb_tensor *c, nb_tensor **steps,
                       nb_tensor **out, nb_tensor **hn, nb_tensor **cn)
{
    int64_t T = in->shape[0];
    nb_tensor *b = bias ? nb_add(w[2], w[3]) : NULL;
    if (bias && !b) return nb_last_status();
    nb_tensor *xp = nb_linear(in, w[0], b);
    nb_tensor *whh_t = xp ? nb_t(w[1]) : NULL;
    if (!whh_t) return nb_last_status();
    NB_TRY(split_steps(xp, T, steps));
    for (int64_t t = 0; t < T; t++) {
        NB_TRY(step(steps[t], whh_t, &h, &c));
        steps[t] = h;
    }
    *out = nb_stack(steps, (int)T, 0);
    *hn = h;
    *cn = c;
    return *out ? NB_OK : nb_last_status();
}

static nb_status run_layers(const nb_tensor *x, const nb_tensor *h0, const nb_tensor *c0, nb_tensor *const *w,
                            int layers, const nb_lstm_params *p, nb_tensor **out, nb_tensor **hs, nb_tensor **cs)
{
    nb_tensor *in = p->batch_first ? nb_transpose(x, 0, 1) : (nb_tensor *)x; /* only read */
    if (!in) return nb_last_status();
    if (in->shape[0] > INT32_MAX) return nb__err(NB_ERR_SHAPE, "lstm: sequence too long (%lld)", (long long)in->shape[0]);
    nb_tensor **steps = malloc(sizeof *steps * (size_t)in->shape[0]);
    if (!steps) return nb__err(NB_ERR_OOM, "lstm: out of memory");
    nb_status st = NB_OK;
    int per = p->bias ? 4 : 2;
    for (int l = 0; l < layers && st == NB_OK; l++) {
        nb_tensor *h = h0 ? nb_select(h0, 0, l) : NULL, *c = c0 ? nb_select(c0, 0, l) : NULL;
        if ((h0 && !h) || (c0 && !c)) st = nb_last_status();
        if (st == NB_OK) st = layer(in, w + l * per, p->bias, h, c, steps, &in, &hs[l], &cs[l]);
    }
    free(steps);
    if (st != NB_OK) return st;
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
