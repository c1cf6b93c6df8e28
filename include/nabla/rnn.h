/* nabla/rnn.h: recurrent layers as functions (torch.nn.LSTM's semantics, gate order and
 * parameter names). Built from nabla's ops, so autograd comes with them.
 * Unidirectional only; no dropout between layers; no projection (proj_size); batched 3-D input
 * only (no unbatched 2-D input). */
#ifndef NABLA_RNN_H
#define NABLA_RNN_H

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

#ifdef __cplusplus
}
#endif

#endif
