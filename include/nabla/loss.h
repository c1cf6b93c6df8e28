/* nabla/loss.h: loss functions and dropout, as torch.nn.functional (PyTorch 1.13).
 *
 * Every function returns a new tensor reference (NULL on failure, see nabla/core.h) and is built
 * from differentiable ops, so gradients flow to the input (and to a floating target where PyTorch
 * gives it one: mse_loss, binary_cross_entropy_with_logits). Class weights and pos_weight are
 * constants: no gradient reaches them (PyTorch does not differentiate nll_loss's weight either).
 * All tensor arguments of one call must live on one device. Thread-safety: as every op.
 */
#ifndef NABLA_LOSS_H
#define NABLA_LOSS_H

#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a loss reduces its per-element values. */
typedef enum nb_reduction {
    NB_REDUCE_NONE = 0, /* the per-element losses, in the target's shape */
    NB_REDUCE_MEAN,     /* their (weighted) mean: a 0-dim tensor */
    NB_REDUCE_SUM       /* their sum: a 0-dim tensor */
} nb_reduction;

/* Options of nb_cross_entropy, as torch.nn.functional.cross_entropy's keyword arguments. */
typedef struct nb_cross_entropy_params {
    const nb_tensor *weight; /* float [C] class weights, or NULL (all 1); borrowed */
    int64_t ignore_index;    /* targets equal to it add nothing, nor count in the mean; -100 */
    nb_reduction reduction;  /* NB_REDUCE_MEAN */
    double label_smoothing;  /* in [0, 1]; 0 */
} nb_cross_entropy_params;

NB_API nb_cross_entropy_params nb_cross_entropy_params_default(void);

/* Options of nb_nll_loss. */
typedef struct nb_nll_loss_params {
    const nb_tensor *weight; /* float [C] class weights, or NULL; borrowed */
    int64_t ignore_index;    /* -100 */
    nb_reduction reduction;  /* NB_REDUCE_MEAN */
} nb_nll_loss_params;

NB_API nb_nll_loss_params nb_nll_loss_params_default(void);

/* Cross entropy of unnormalised scores against class indices: log_softmax over dim 1, then
 * nll_loss (and PyTorch's label smoothing, which mixes in the mean over classes of -log p).
 *   logits: float [N, C] or [N, C, d1, ...] (or [C] with a 0-dim target)
 *   target: int64 (or int32) [N] or [N, d1, ...]: class indices in [0, C) or ignore_index
 * With NB_REDUCE_MEAN the sum is divided by the summed weights of the non-ignored targets (their
 * count without weights): all targets ignored gives NaN, as in PyTorch. p may be NULL for the
 * defaults. Errors: a target out of range ("cross_entropy: target 12 is out of bounds for 10
 * classes"), shapes that do not match, a non-float input, a weight not of shape [C],
 * label_smoothing outside [0, 1]. */
NB_API nb_tensor *nb_cross_entropy(const nb_tensor *logits, const nb_tensor *target,
                                   const nb_cross_entropy_params *p);
/* The negative log-likelihood of log-probabilities (same shapes and rules as nb_cross_entropy,
 * without the log_softmax and without label smoothing): -weight[t] * log_probs[n, t, ...]. */
NB_API nb_tensor *nb_nll_loss(const nb_tensor *log_probs, const nb_tensor *target,
                              const nb_nll_loss_params *p);
/* (input - target)^2, reduced; the two broadcast as in PyTorch (which warns about it). */
NB_API nb_tensor *nb_mse_loss(const nb_tensor *input, const nb_tensor *target, nb_reduction reduction);
/* Binary cross entropy of logits x against targets t in [0, 1] (same shape), in PyTorch's stable
 * form: (1 - t) x + l (log(exp(-m) + exp(-x - m)) + m), m = max(-x, 0), l = 1 + (pos_weight - 1) t.
 * weight (multiplies each element's loss) and pos_weight (the positive class's weight, usually
 * [classes] broadcast along the last dim) may be NULL; both must broadcast to x's shape. */
NB_API nb_tensor *nb_binary_cross_entropy_with_logits(const nb_tensor *input, const nb_tensor *target,
                                                      const nb_tensor *weight, const nb_tensor *pos_weight,
                                                      nb_reduction reduction);

/* Dropout: in training (and 0 < p < 1), each element is kept with probability 1 - p and scaled by
 * 1 / (1 - p) (a Bernoulli mask from `generator`, or the device's default generator when NULL, so
 * a seeded generator gives the same mask on every run); the gradient is the same scaled mask.
 * When not training or p == 0 it returns x itself (a new reference); p == 1 gives x * 0. p outside
 * [0, 1] and non-float inputs are errors. */
NB_API nb_tensor *nb_dropout(const nb_tensor *x, double p, bool training, nb_generator *generator);

#ifdef __cplusplus
}
#endif
#endif
