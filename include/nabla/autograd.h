/* nabla/autograd.h: reverse-mode automatic differentiation on a dynamic graph.
 *
 * While grad mode is on (the default, per thread), every differentiable op whose input requires
 * grad records a node; the output's grad_fn points at it. nb_backward walks the graph from a
 * tensor back to the leaves and accumulates gradients into their `grad`. Saved tensors carry the
 * version of their storage: changing one in place before backward makes backward fail with
 * NB_ERR_AUTOGRAD instead of computing a wrong gradient. The graph's saved tensors are freed by
 * backward unless NB_RETAIN_GRAPH is given, so memory does not grow across training steps.
 */
#ifndef NABLA_AUTOGRAD_H
#define NABLA_AUTOGRAD_H

#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

NB_API bool nb_tensor_requires_grad(const nb_tensor *t);
/* Only leaves (tensors made by the user, not by a recorded op) may change it; only floating
 * tensors may require grad. */
NB_API nb_status nb_tensor_set_requires_grad(nb_tensor *t, bool requires_grad);
NB_API bool nb_tensor_is_leaf(const nb_tensor *t);
/* The accumulated gradient as a new reference, or NULL (without an error) when there is none. */
NB_API nb_tensor *nb_tensor_grad(const nb_tensor *t);
/* Replaces the gradient (NULL clears it, like PyTorch's zero_grad(set_to_none=True)). */
NB_API nb_status nb_tensor_set_grad(nb_tensor *t, const nb_tensor *grad);
/* Makes a non-leaf keep its gradient in `grad` during backward, as torch's retain_grad(). */
NB_API nb_status nb_tensor_retain_grad(nb_tensor *t);
/* The name of the node that made t ("MulBackward0"...), or NULL for a leaf. */
NB_API const char *nb_tensor_grad_fn_name(const nb_tensor *t);
/* A new tensor sharing t's storage, cut from the graph. */
NB_API nb_tensor *nb_detach(const nb_tensor *t);

enum {
    NB_BACKWARD_DEFAULT = 0,
    NB_RETAIN_GRAPH = 1 /* keep the saved tensors: backward may run through the graph again */
};
/* Backpropagates from t. grad is the gradient of t (NULL means 1 and requires a one-element t);
 * flags is NB_BACKWARD_DEFAULT or NB_RETAIN_GRAPH. */
NB_API nb_status nb_backward(nb_tensor *t, const nb_tensor *grad, int flags);

/* Turns grad mode on or off for the calling thread; returns the previous mode. A no-grad block:
 *   bool prev = nb_set_grad_enabled(false); ...; nb_set_grad_enabled(prev);                  */
NB_API bool nb_set_grad_enabled(bool enabled);
NB_API bool nb_is_grad_enabled(void);

#ifdef __cplusplus
}
#endif
#endif
