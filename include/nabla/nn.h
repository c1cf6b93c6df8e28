/* nabla/nn.h: neural-network layers as functions on NCHW tensors (PyTorch's torch.nn.functional
 * names and defaults). float32 and float64; inputs of any layout (made contiguous inside).
 * Every function returns a new tensor (NULL + nb_last_error() on failure) and records autograd. */
#ifndef NABLA_NN_H
#define NABLA_NN_H

#include "nabla/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- convolution ---------------------------------------------------------------------------- */

typedef struct nb_conv2d_params {
    int64_t stride[2];   /* >= 1 (default 1, 1) */
    int64_t padding[2];  /* >= 0, zeros (default 0, 0) */
    int64_t dilation[2]; /* >= 1 (default 1, 1) */
    int64_t groups;      /* divides both channel counts (default 1) */
    bool relu;           /* apply max(0, .) to the output, fused into the convolution (default
                            false): as nb_relu(nb_conv2d(...)), in one autograd node */
} nb_conv2d_params;

NB_API nb_conv2d_params nb_conv2d_params_default(void);

/* x [N, C, H, W] (or [C, H, W]: one image), weight [O, C / groups, KH, KW], bias [O] or NULL;
 * p NULL means the defaults. Output [N, O, OH, OW] with OH = (H + 2 pad - dil (KH - 1) - 1) /
 * stride + 1. float32 runs on oneDNN with the bias (and p->relu's ReLU) fused. */
NB_API nb_tensor *nb_conv2d(const nb_tensor *x, const nb_tensor *weight, const nb_tensor *bias,
                            const nb_conv2d_params *p);

/* ---- pooling -------------------------------------------------------------------------------- */

/* x [N, C, H, W] or [C, H, W]. kernel [2] >= 1; stride NULL = kernel (PyTorch's default);
 * padding NULL = 0, at most half the kernel; ceil_mode rounds the output size up (a window must
 * still start inside the input or its left padding). */
NB_API nb_tensor *nb_max_pool2d(const nb_tensor *x, const int64_t kernel[2], const int64_t *stride,
                                const int64_t *padding, bool ceil_mode);
/* relu(max_pool2d(x, ...)): the same values and gradients, in one pass each way on the CPU. */
NB_API nb_tensor *nb_max_pool2d_relu(const nb_tensor *x, const int64_t kernel[2], const int64_t *stride,
                                     const int64_t *padding, bool ceil_mode);
/* count_include_pad: divide by the window size including padding (PyTorch's default true). */
NB_API nb_tensor *nb_avg_pool2d(const nb_tensor *x, const int64_t kernel[2], const int64_t *stride,
                                const int64_t *padding, bool ceil_mode, bool count_include_pad);
NB_API nb_tensor *nb_adaptive_avg_pool2d(const nb_tensor *x, int64_t out_h, int64_t out_w);

/* ---- normalisation -------------------------------------------------------------------------- */

/* x [N, C, ...]; running_mean, running_var, weight, bias [C], each may be NULL (weight 1, bias 0).
 * training: normalises with the batch's mean and biased variance, and (when given) updates the
 * running statistics in place, without autograd: r = (1 - momentum) r + momentum * batch stat,
 * with the unbiased variance for running_var (as PyTorch). Evaluation: normalises with the
 * running statistics (required). Gradients flow to x, weight and bias in both modes. */
NB_API nb_tensor *nb_batch_norm(const nb_tensor *x, nb_tensor *running_mean, nb_tensor *running_var,
                                const nb_tensor *weight, const nb_tensor *bias, bool training,
                                double momentum, double eps);
/* relu(nb_batch_norm(...)), the same arguments. On the CPU in one pass each way: the ReLU is
 * applied as the normalised values are written, and the backward recomputes its mask from x, so
 * neither a ReLU pass nor its backward pass over the tensor is made (the gradients are those of
 * the two ops); on other devices it is the two ops. */
NB_API nb_tensor *nb_batch_norm_relu(const nb_tensor *x, nb_tensor *running_mean, nb_tensor *running_var,
                                     const nb_tensor *weight, const nb_tensor *bias, bool training,
                                     double momentum, double eps);
/* relu(nb_batch_norm(x, ...) + residual), a residual block's end (ResNet's bn3, add, ReLU), the
 * other arguments as nb_batch_norm's; gradients flow to residual too. On the CPU, with residual
 * of x's shape and dtype, in one pass each way as nb_batch_norm_relu (the same values and
 * gradients as the three ops, bit for bit); otherwise the three ops, residual broadcast as
 * nb_add does. residual must not be NULL. */
NB_API nb_tensor *nb_batch_norm_add_relu(const nb_tensor *x, const nb_tensor *residual,
                                         nb_tensor *running_mean, nb_tensor *running_var,
                                         const nb_tensor *weight, const nb_tensor *bias, bool training,
                                         double momentum, double eps);
/* nb_batch_norm(x, ...) + residual, without a ReLU (a residual block that ends with the add, as
 * DLBench's ResNet-56), the same arguments as nb_batch_norm_add_relu. On the CPU, with residual
 * of x's shape and dtype, the add is made as the normalised values are written (no pass of its
 * own); the residual's gradient is the upstream one. Otherwise the two ops. */
NB_API nb_tensor *nb_batch_norm_add(const nb_tensor *x, const nb_tensor *residual, nb_tensor *running_mean,
                                    nb_tensor *running_var, const nb_tensor *weight, const nb_tensor *bias,
                                    bool training, double momentum, double eps);

#ifdef __cplusplus
}
#endif

#endif
