/* nabla/rnn.h: recurrent layers as functions (torch.nn.LSTM's semantics, gate order and
 * parameter names). Built from nabla's ops, so autograd comes with them.
 * Unidirectional only; no dropout between layers; no projection (proj_size); batched 3-D input
 * only (no unbatched 2-D input). */
#ifndef NABLA_RNN_H
#define NABLA_RNN_H

#include "nabla/module.h"
#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nb_lstm_params {
    int64_t hidden_size; /* H >= 1 (no default: 0 is an error) */
    bool batch_first;    /* input and output [B, T, ...] instead of [T, B, ...] (default false) */
    bool bias;           /* the weights include bias_ih / bias_hh (default true) */
} nb_lstm_params;

NB_API nb_lstm_params nb_lstm_params_default(void);

/* The number of weight tensors nb_lstm takes: 4 per layer with bias, 2 without. */
NB_API int nb_lstm_num_weights(int num_layers, const nb_lstm_params *p);

/* PyTorch's name of weight `index` (0 .. 3) of `layer`: weight_ih_l{k}, weight_hh_l{k},
 * bias_ih_l{k}, bias_hh_l{k}. Writes it into buf (snprintf semantics); returns its length, or -1
 * (with an error) for a bad layer or index. */
NB_API int nb_lstm_weight_name(int layer, int index, char *buf, size_t size);

/* Multi-layer LSTM. For each layer k and step t, with gates in PyTorch's order (i, f, g, o):
 *   i, f, g, o = split(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh, 4)
 *   c_t = sigmoid(f) c_{t-1} + sigmoid(i) tanh(g);   h_t = sigmoid(o) tanh(c_t)
 * x: [T, B, in] ([B, T, in] with batch_first), T >= 1. h0, c0: [num_layers, B, H], or NULL for
 * zeros. weights: n_weights == nb_lstm_num_weights(num_layers, p) tensors, per layer in
 * PyTorch's order: weight_ih_l{k} [4H, in_k] (in_0 = in, else H), weight_hh_l{k} [4H, H], then
 * with p->bias bias_ih_l{k} [4H] and bias_hh_l{k} [4H]. p NULL is an error (hidden_size has no
 * default). Returns the last layer's h_t for every step, [T, B, H] ([B, T, H] with batch_first);
 * h_n and c_n (each may be NULL) get the final states [num_layers, B, H] (NULL on failure).
 * The input projection of a layer is one GEMM over all steps; each step then costs one GEMM
 * with W_hh and the elementwise gate math. */
NB_API nb_tensor *nb_lstm(const nb_tensor *x, const nb_tensor *h0, const nb_tensor *c0, nb_tensor *const *weights,
                          int n_weights, int num_layers, const nb_lstm_params *p, nb_tensor **h_n, nb_tensor **c_n);

/* Creates the weights of an LSTM with PyTorch's initialisation: every tensor uniform on
 * [-1/sqrt(H), 1/sqrt(H)), drawn in the order above from tp->generator (NULL: the default
 * generator), dtype and device from tp (NULL: float32 on the CPU). Writes
 * nb_lstm_num_weights(num_layers, p) leaves that require grad into weights (references owned
 * like any returned tensor: by the open scope, else by the caller); on failure all are NULL. */
NB_API nb_status nb_lstm_init_weights(int64_t input_size, int num_layers, const nb_lstm_params *p,
                                      const nb_tensor_params *tp, nb_tensor **weights);

/* ---- modules (nabla/module.h) ------------------------------------------------------------------ */

/* torch.nn.LSTM(input_size, hidden_size, num_layers, bias, batch_first) as a module, type name
 * "LSTM". Parameters, in PyTorch's names and order: weight_ih_l{k} [4H, in_k], weight_hh_l{k}
 * [4H, H], and with bias bias_ih_l{k} [4H], bias_hh_l{k} [4H], for k = 0 .. num_layers-1, all
 * uniform on [-1/sqrt(H), 1/sqrt(H)) (nb_lstm_init_weights) with dtype, device and generator from
 * p (may be NULL: float32 on the CPU, the default generator). nb_module_forward(m, x) returns the
 * output sequence (nb_lstm's result) from zero initial states. NULL with an error naming "LSTM"
 * for sizes < 1 or a non-floating dtype. Free with nb_module_free. */
NB_API nb_module *nb_lstm_module(int64_t input_size, int64_t hidden_size, int num_layers, bool batch_first,
                                 bool bias, const nb_tensor_params *p);

/* The forward of an LSTM module with states: x [T, B, input_size] ([B, T, input_size] with
 * batch_first); h0, c0 [num_layers, B, H] or NULL (zeros), borrowed. Returns the output sequence
 * (as nb_lstm) and sets *h_n, *c_n (each pointer may be NULL) to the final states
 * [num_layers, B, H]: new references like any returned tensor (scope-owned when a scope is open).
 * Errors (NULL, *h_n and *c_n NULL): m NULL or not made by nb_lstm_module, x NULL, x not 3-D or
 * its feature size not input_size, h0 / c0 of another shape, dtype mismatches; messages name
 * "LSTM" and the shapes. */
NB_API nb_tensor *nb_lstm_module_forward(nb_module *m, nb_tensor *x, nb_tensor *h0, nb_tensor *c0, nb_tensor **h_n,
                                         nb_tensor **c_n);

/* A word-level LSTM language model (DLBench's PTB LSTM; bench/dlbench/torch_lm.py is the same
 * model in PyTorch, with equal state_dict names and shapes), type name "LSTMLM". Children, in
 * order: "encoder" = Embedding(vocab_size, embed_size), "rnn" = LSTM(embed_size, hidden_size,
 * num_layers, batch_first = true, bias = true), "decoder" = Linear(hidden_size, vocab_size), each
 * with PyTorch's default initialisation drawn from p (may be NULL). Parameter count:
 * V E + L (4H (in_k + H) + 8H) + H V + V, two bias vectors per LSTM layer as in PyTorch/cuDNN.
 * nb_module_forward(m, tokens): integer tokens [B, T] in [0, vocab_size) -> logits [B, T, V].
 * NULL with an error naming "LSTMLM" for sizes < 1 or a non-floating dtype. */
NB_API nb_module *nb_lstm_lm_create(int64_t vocab_size, int64_t embed_size, int64_t hidden_size, int num_layers,
                                    const nb_tensor_params *p);
/* Stateful mode (default off: every forward starts from zero states). When on, each forward
 * starts from the final (h, c) of the previous forward, detached from its graph (truncated BPTT,
 * as DLBench carries state between consecutive mini-batches), in training and in eval mode. The
 * carried state is dropped (the next forward starts from zeros) when the batch size or the dtype
 * changes, on nb_lstm_lm_reset_state, and when stateful mode is switched off; it follows the
 * module to another device (nb_module_to) at the next forward, and is freed with the module.
 * Errors: m NULL or not made by nb_lstm_lm_create. */
NB_API nb_status nb_lstm_lm_set_stateful(nb_module *m, bool stateful);
NB_API nb_status nb_lstm_lm_reset_state(nb_module *m);

#ifdef __cplusplus
}
#endif

#endif
