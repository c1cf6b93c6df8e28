/* The LSTM language model (nabla/rnn.h): encoder (Embedding) -> rnn (LSTM, batch-first) ->
 * decoder (Linear), the names of bench/dlbench/torch_lm.py's LSTMLM. In stateful mode the module
 * keeps its own references to the last forward's detached final states (h, c), outside the
 * parameter and buffer lists (torch keeps them outside the state_dict too), and starts the next
 * forward from them. Inside a CUDA graph capture the carried state stays where it is (the graph
 * reads it at every replay) and the final state is copied into it at the end of the capture,
 * after backward has read the old one, so each replay starts from the previous replay's state. */
#include <stdlib.h>

#include "core/dispatch_impl.h"
#include "core/error_impl.h"
#include "core/tensor_impl.h"
#include "nabla/autograd.h"
#include "nabla/module.h"
#include "nabla/rnn.h"

typedef struct lm_state {
    bool stateful;
    nb_tensor *h, *c; /* owned; NULL when there is no carried state */
} lm_state;

static void lm_clear(lm_state *u)
{
    nb_tensor_free(u->h);
    nb_tensor_free(u->c);
    u->h = u->c = NULL;
}

static void lm_free(void *user)
{
    if (!user) return;
    lm_clear(user);
    free(user);
}

/* The carried state to start from, moved to the model's device when nb_module_to moved the model;
 * NULL (start from zeros) when there is none or it does not fit this batch. */
static nb_status carried(lm_state *u, const nb_tensor *emb, int64_t batch, nb_tensor **h0, nb_tensor **c0)
{
    *h0 = *c0 = NULL;
    if (!u->stateful || !u->h) return NB_OK;
    if (nb_tensor_shape(u->h)[1] != batch || nb_tensor_dtype(u->h) != nb_tensor_dtype(emb)) {
        lm_clear(u);
        return NB_OK;
    }
    nb_device dev = nb_tensor_device(emb);
    if (nb_device_equal(nb_tensor_device(u->h), dev)) {
        *h0 = u->h;
        *c0 = u->c;
        return NB_OK;
    }
    *h0 = nb_to(u->h, dev);
    *c0 = *h0 ? nb_to(u->c, dev) : NULL;
    return *c0 ? NB_OK : nb_last_status();
}

/* The end-of-capture copy of the final states into the carried ones. */
typedef struct state_copy {
    nb_tensor *dst[2], *src[2];
} state_copy;

static nb_status copy_state(void *ctx)
{
    state_copy *k = ctx;
    bool prev = nb_set_grad_enabled(false);
    nb_status st = nb_copy_(k->dst[0], k->src[0]);
    if (st == NB_OK) st = nb_copy_(k->dst[1], k->src[1]);
    nb_set_grad_enabled(prev);
    return st;
}

static void drop_state_copy(void *ctx)
{
    state_copy *k = ctx;
    for (int i = 0; i < 2; i++) {
        nb_tensor_free(k->dst[i]);
        nb_tensor_free(k->src[i]);
    }
    free(k);
}

static nb_status carry_captured(lm_state *u, nb_tensor *hn, nb_tensor *cn, nb_device dev)
{
    state_copy *k = calloc(1, sizeof *k);
    nb_tensor *h = nb_detach(hn), *c = h ? nb_detach(cn) : NULL;
    if (!k || !c) {
        free(k);
        return k ? nb_last_status() : nb__err(NB_ERR_OOM, "LSTMLM: out of memory");
    }
    *k = (state_copy){{nb_tensor_retain(u->h), nb_tensor_retain(u->c)}, {nb_tensor_retain(h), nb_tensor_retain(c)}};
    return nb__device_capture_defer(dev, copy_state, drop_state_copy, k);
}

/* Keeps detached copies of the final states for the next forward. */
static nb_status carry(lm_state *u, nb_tensor *hn, nb_tensor *cn)
{
    nb_tensor *h = nb_detach(hn), *c = h ? nb_detach(cn) : NULL;
    if (!c) return nb_last_status();
    lm_clear(u);
    u->h = nb_tensor_retain(h);
    u->c = nb_tensor_retain(c);
    return NB_OK;
}

static nb_tensor *lm_forward(nb_module *self, nb_tensor *tokens)
{
    lm_state *u = nb_module_user(self);
    char a[NB_SHAPE_STR_MAX];
    int nd = nb_tensor_ndim(tokens);
    if (nd != 2 || nb_dtype_is_floating(nb_tensor_dtype(tokens)) || nb_tensor_dtype(tokens) == NB_BOOL)
        return nb__err_null(NB_ERR_SHAPE, "LSTMLM: tokens must be integer [B, T], got %s %s",
                            nb_dtype_name(nb_tensor_dtype(tokens)), nb__shape_str(nb_tensor_shape(tokens), nd, a));
    nb_tensor *emb = nb_module_forward(nb_module_get_module(self, "encoder"), tokens);
    if (!emb) return NULL;
    nb_tensor *h0, *c0, *hn = NULL, *cn = NULL;
    if (carried(u, emb, nb_tensor_shape(tokens)[0], &h0, &c0) != NB_OK) return NULL;
    nb_device dev = nb_tensor_device(emb);
    bool captured = u->stateful && nb__device_capturing(dev);
    if (captured && (!h0 || h0 != u->h)) {
        nb__device_capture_refuse(dev, "LSTMLM", "a stateful model needs a carried state of this batch size on "
                                  "this device (take one step before capturing)");
        return NULL;
    }
    nb_tensor *out = nb_lstm_module_forward(nb_module_get_module(self, "rnn"), emb, h0, c0, u->stateful ? &hn : NULL,
                                            u->stateful ? &cn : NULL);
    if (!out) return NULL;
    if (u->stateful && (captured ? carry_captured(u, hn, cn, dev) : carry(u, hn, cn)) != NB_OK) return NULL;
    return nb_module_forward(nb_module_get_module(self, "decoder"), out);
}

/* An object, not a literal: its address identifies modules made here. */
static const char lm_type[] = "LSTMLM";
static const nb_module_funcs lm_funcs = {lm_type, lm_forward, lm_free};

nb_module *nb_lstm_lm_create(int64_t vocab_size, int64_t embed_size, int64_t hidden_size, int num_layers,
                             const nb_tensor_params *p)
{
    if (vocab_size < 1 || embed_size < 1 || hidden_size < 1 || num_layers < 1)
        return nb__err_null(NB_ERR_INVALID_ARG,
                            "LSTMLM: sizes must be >= 1 (vocab_size %lld, embed_size %lld, hidden_size %lld, "
                            "num_layers %d)",
                            (long long)vocab_size, (long long)embed_size, (long long)hidden_size, num_layers);
    if (p && !nb_dtype_is_floating(p->dtype))
        return nb__err_null(NB_ERR_DTYPE, "LSTMLM: parameters must be floating (got %s)", nb_dtype_name(p->dtype));
    lm_state *u = calloc(1, sizeof *u);
    if (!u) return nb__err_null(NB_ERR_OOM, "LSTMLM: out of memory");
    nb_module *m = nb_module_create(&lm_funcs, u);
    if (!m) {
        free(u);
        return NULL;
    }
    /* constructed in torch's order, so one generator gives torch's draw order */
    static const char *const names[3] = {"encoder", "rnn", "decoder"};
    nb_module *kids[3];
    kids[0] = nb_embedding_module(vocab_size, embed_size, p);
    kids[1] = kids[0] ? nb_lstm_module(embed_size, hidden_size, num_layers, true, true, p) : NULL;
    kids[2] = kids[1] ? nb_linear_module(hidden_size, vocab_size, true, p) : NULL;
    nb_status st = NB_OK;
    for (int i = 0; i < 3; i++) {
        if (st == NB_OK) st = kids[i] ? nb_module_register_module(m, names[i], kids[i]) : nb_last_status();
        else nb_module_free(kids[i]);
    }
    if (st != NB_OK) {
        nb_module_free(m);
        return NULL;
    }
    return m;
}

static lm_state *lm_user(nb_module *m, const char *fn)
{
    if (!m) return nb__err_null(NB_ERR_INVALID_ARG, "%s: NULL module", fn);
    if (nb_module_type_name(m) != lm_type)
        return nb__err_null(NB_ERR_INVALID_ARG, "%s: module is a %s, not an LSTMLM", fn, nb_module_type_name(m));
    return nb_module_user(m);
}

nb_status nb_lstm_lm_set_stateful(nb_module *m, bool stateful)
{
    lm_state *u = lm_user(m, "lstm_lm_set_stateful");
    if (!u) return nb_last_status();
    u->stateful = stateful;
    if (!stateful) lm_clear(u);
    return NB_OK;
}

nb_status nb_lstm_lm_reset_state(nb_module *m)
{
    lm_state *u = lm_user(m, "lstm_lm_reset_state");
    if (!u) return nb_last_status();
    lm_clear(u);
    return NB_OK;
}
