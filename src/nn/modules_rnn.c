/* The LSTM module (nabla/rnn.h): torch.nn.LSTM's parameters (names, order, initialisation) over
 * the functional nb_lstm. The options live in the module's user pointer; the weights are fetched
 * by name at each forward, so nb_module_to and load_state_dict (which may replace them) are seen. */
#include <stdlib.h>

#include "core/error_impl.h"
#include "core/tensor_impl.h"
#include "nabla/autograd.h"
#include "nabla/module.h"
#include "nabla/rnn.h"

typedef struct lstm_opts {
    int64_t input_size;
    int num_layers;
    nb_lstm_params p;
} lstm_opts;

static nb_tensor *lstm_forward(nb_module *self, nb_tensor *x)
{
    return nb_lstm_module_forward(self, x, NULL, NULL, NULL, NULL);
}

/* An object, not a literal: its address identifies modules made here (literals may be merged). */
static const char lstm_type[] = "LSTM";
static const nb_module_funcs lstm_funcs = {lstm_type, lstm_forward, free};

/* Registers freshly initialised weights under PyTorch's names. */
static nb_status add_weights(nb_module *m, const lstm_opts *o, const nb_tensor_params *p)
{
    int n = nb_lstm_num_weights(o->num_layers, &o->p), per = o->p.bias ? 4 : 2;
    nb_tensor **w = calloc((size_t)n, sizeof *w);
    if (!w) return nb__err(NB_ERR_OOM, "LSTM: out of memory");
    nb_scope *s = nb_scope_begin();
    nb_status st = s ? nb_lstm_init_weights(o->input_size, o->num_layers, &o->p, p, w)
                     : nb__err(NB_ERR_OOM, "LSTM: out of memory");
    char name[32];
    for (int i = 0; st == NB_OK && i < n; i++) {
        nb_lstm_weight_name(i / per, i % per, name, sizeof name);
        st = nb_module_register_parameter(m, name, w[i]);
    }
    nb_scope_end(s);
    free(w);
    return st;
}

nb_module *nb_lstm_module(int64_t input_size, int64_t hidden_size, int num_layers, bool batch_first, bool bias,
                          const nb_tensor_params *p)
{
    if (input_size < 1 || hidden_size < 1 || num_layers < 1)
        return nb__err_null(NB_ERR_INVALID_ARG,
                            "LSTM: sizes must be >= 1 (input_size %lld, hidden_size %lld, num_layers %d)",
                            (long long)input_size, (long long)hidden_size, num_layers);
    if (p && !nb_dtype_is_floating(p->dtype))
        return nb__err_null(NB_ERR_DTYPE, "LSTM: parameters must be floating (got %s)", nb_dtype_name(p->dtype));
    lstm_opts *o = malloc(sizeof *o);
    if (!o) return nb__err_null(NB_ERR_OOM, "LSTM: out of memory");
    o->input_size = input_size;
    o->num_layers = num_layers;
    o->p = nb_lstm_params_default();
    o->p.hidden_size = hidden_size;
    o->p.batch_first = batch_first;
    o->p.bias = bias;
    nb_module *m = nb_module_create(&lstm_funcs, o);
    if (!m) {
        free(o);
        return NULL;
    }
    if (add_weights(m, o, p) != NB_OK) {
        nb_module_free(m);
        return NULL;
    }
    return m;
}

/* Checks a state tensor against [layers, B, H]. */
static nb_status check_state(const nb_tensor *t, const char *what, const lstm_opts *o, int64_t batch)
{
    if (!t) return NB_OK;
    const int64_t want[3] = {o->num_layers, batch, o->p.hidden_size};
    int nd = nb_tensor_ndim(t);
    bool same = nd == 3;
    for (int i = 0; same && i < 3; i++) same = nb_tensor_shape(t)[i] == want[i];
    if (same) return NB_OK;
    char a[NB_SHAPE_STR_MAX], b[NB_SHAPE_STR_MAX];
    return nb__err(NB_ERR_SHAPE, "LSTM: %s has shape %s, expected %s (num_layers, batch, hidden_size)", what,
                   nb__shape_str(nb_tensor_shape(t), nd, a), nb__shape_str(want, 3, b));
}

static nb_status check_forward(const nb_module *m, const nb_tensor *x, const nb_tensor *h0, const nb_tensor *c0)
{
    if (!m) return nb__err(NB_ERR_INVALID_ARG, "LSTM forward: NULL module");
    if (nb_module_type_name(m) != lstm_type)
        return nb__err(NB_ERR_INVALID_ARG, "LSTM forward: module is a %s, not an LSTM", nb_module_type_name(m));
    const lstm_opts *o = nb_module_user(m);
    if (!x) return nb__err(NB_ERR_INVALID_ARG, "LSTM forward: NULL input");
    char a[NB_SHAPE_STR_MAX];
    int nd = nb_tensor_ndim(x);
    const int64_t *xs = nb_tensor_shape(x);
    if (nd != 3 || xs[2] != o->input_size)
        return nb__err(NB_ERR_SHAPE, "LSTM: input has shape %s, expected [%s, %lld] (input_size %lld)",
                       nb__shape_str(xs, nd, a), o->p.batch_first ? "B, T" : "T, B", (long long)o->input_size,
                       (long long)o->input_size);
    int64_t batch = xs[o->p.batch_first ? 0 : 1];
    NB_TRY(check_state(h0, "h0", o, batch));
    return check_state(c0, "c0", o, batch);
}

nb_tensor *nb_lstm_module_forward(nb_module *m, nb_tensor *x, nb_tensor *h0, nb_tensor *c0, nb_tensor **h_n,
                                  nb_tensor **c_n)
{
    if (h_n) *h_n = NULL;
    if (c_n) *c_n = NULL;
    if (check_forward(m, x, h0, c0) != NB_OK) return NULL;
    const lstm_opts *o = nb_module_user(m);
    int n = nb_lstm_num_weights(o->num_layers, &o->p), per = o->p.bias ? 4 : 2;
    nb_tensor **w = malloc((size_t)n * sizeof *w);
    if (!w) return nb__err_null(NB_ERR_OOM, "LSTM: out of memory");
    char name[32];
    for (int i = 0; i < n; i++) {
        nb_lstm_weight_name(i / per, i % per, name, sizeof name);
        w[i] = nb_module_get_parameter(m, name);
        if (!w[i]) {
            free(w);
            return nb__err_null(NB_ERR_INVALID_ARG, "LSTM: parameter %s is missing", name);
        }
    }
    nb_tensor *y = nb_lstm(x, h0, c0, w, n, o->num_layers, &o->p, h_n, c_n);
    free(w);
    return y;
}
