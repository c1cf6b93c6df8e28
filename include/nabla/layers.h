/* nabla/layers.h: convolution, pooling and normalisation layers as modules (torch.nn.Conv2d,
 * MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, BatchNorm1d/2d, LocalResponseNorm), with PyTorch's
 * parameter names, defaults and initialisation. They wrap the functions of nabla/nn.h.
 *
 * Constructors return NULL with nb_last_error() on bad arguments; p (may be NULL) gives dtype,
 * device and generator for the parameters, as in nabla/module.h.
 */
#ifndef NABLA_LAYERS_H
#define NABLA_LAYERS_H

#include "nabla/module.h"
#include "nabla/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* weight [out, in / groups, kh, kw] and bias [out] (or none), both ~ U(-b, b) with
 * b = 1 / sqrt(in / groups * kh * kw) (torch's kaiming_uniform_(a = sqrt(5)) and bias init).
 * cp NULL = nb_conv2d_params_default(). */
NB_API nb_module *nb_conv2d_module(int64_t in_channels, int64_t out_channels, int64_t kh, int64_t kw,
                                   const nb_conv2d_params *cp, bool bias, const nb_tensor_params *p);
/* Square windows: kernel >= 1, stride 0 = kernel (PyTorch's default), padding >= 0, no ceil mode;
 * AvgPool2d counts the padding (count_include_pad true, PyTorch's default). */
NB_API nb_module *nb_max_pool2d_module(int64_t kernel, int64_t stride, int64_t padding);
NB_API nb_module *nb_avg_pool2d_module(int64_t kernel, int64_t stride, int64_t padding);
NB_API nb_module *nb_adaptive_avg_pool2d_module(int64_t out_h, int64_t out_w);
/* BatchNorm over [N, C, H, W] (2d) or [N, C] / [N, C, L] (1d) inputs: parameters weight = 1 and
 * bias = 0 [C]; buffers running_mean = 0, running_var = 1 [C] (dtype of p) and
 * num_batches_tracked (int64 scalar, +1 per training forward); momentum 0.1, eps 1e-5. Training
 * mode normalises with the batch statistics and updates the buffers; evaluation mode uses them. */
NB_API nb_module *nb_batch_norm2d_module(int64_t num_features, const nb_tensor_params *p);
NB_API nb_module *nb_batch_norm1d_module(int64_t num_features, const nb_tensor_params *p);
/* torch.nn.LocalResponseNorm(size, alpha, beta, k) over dim 1 of [N, C, ...]:
 * y = x / (k + alpha / size * sum of x^2 over channels c - size/2 .. c + (size-1)/2)^beta, the
 * window zero-padded at the edges. PyTorch's defaults: alpha 1e-4, beta 0.75, k 1. */
NB_API nb_module *nb_local_response_norm_module(int64_t size, double alpha, double beta, double k);

#ifdef __cplusplus
}
#endif
#endif
