/* Dropout (nabla/loss.h) as PyTorch computes it on the CPU: noise = bernoulli(1 - p) / (1 - p),
 * out = x * noise, so the gradient is noise (the mask scaled by 1 / (1 - p)) through nb_mul's
 * rule. The Bernoulli draw reads a 0-dim probability expanded to x's shape: no N-element
 * probability tensor is written. On other devices the mask is rand < 1 - p: the same values
 * from the same generator (bernoulli compares the same uniforms), without bernoulli's check of
 * its probabilities, which would make the host wait for the device. */
#include <math.h>

#include "core/error_impl.h"
#include "core/tensor_impl.h"
#include "nabla/loss.h"
#include "nabla/ops.h"
#include "nabla/tensor.h"

nb_tensor *nb_dropout(const nb_tensor *x, double p, bool training, nb_generator *generator)
{
    if (!x) return nb__err_null(NB_ERR_INVALID_ARG, "dropout: NULL input");
    if (!(p >= 0.0 && p <= 1.0))
        return nb__err_null(NB_ERR_INVALID_ARG, "dropout: probability has to be between 0 and 1, but got %g", p);
    if (!nb_dtype_is_floating(x->dtype))
        return nb__err_null(NB_ERR_DTYPE, "dropout: input must be a floating tensor (got %s)", nb_dtype_name(x->dtype));
    if (!training || p == 0.0) return nb__track(nb_tensor_retain((nb_tensor *)x));
    if (p == 1.0) return nb_mul_scalar(x, 0.0);
    nb_scope *s = nb_scope_begin();
    if (!s) return NULL;
    nb_tensor *mask = NULL;
    if (x->storage->device.type == NB_DEVICE_CPU) {
        nb_tensor *q = nb_scalar_tensor(1.0 - p, &(nb_tensor_params){.dtype = x->dtype, .device = x->storage->device});
        nb_tensor *probs = q ? nb_expand(q, x->shape, x->ndim) : NULL;
        mask = probs ? nb_bernoulli(probs, generator) : NULL;
    } else {
        nb_tensor_params tp = {.dtype = x->dtype, .device = x->storage->device, .generator = generator};
        nb_tensor *u = nb_rand(x->shape, x->ndim, &tp);
        nb_tensor *keep = u ? nb_lt_scalar(u, 1.0 - p) : NULL;
        mask = keep ? nb_to_dtype(keep, x->dtype) : NULL;
    }
    nb_tensor *noise = mask ? nb_div_scalar(mask, 1.0 - p) : NULL;
    nb_tensor *out = noise ? nb_mul(x, noise) : NULL;
    return nb_scope_end_keep(s, out);
}
