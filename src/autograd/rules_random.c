/* Backward rules of the random ops. RAND, RANDN and RANDINT make leaves and record nothing.
 * BERNOULLI records a node, as PyTorch does (grad_fn=<BernoulliBackward0>), whose gradient with
 * respect to probs is zero: the samples are piecewise constant in probs. */
#include "autograd/autograd_impl.h"

nb_status nb__bw_BERNOULLI(nb_node *node, nb_tensor *g, nb_tensor **grad_in)
{
    if (!nb__edge_needs_grad(node, 0)) return NB_OK;
    grad_in[0] = nb_zeros_like(g);
    return grad_in[0] ? NB_OK : nb_last_status();
}
