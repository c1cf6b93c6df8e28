/* Internal: helpers shared by the model zoo's files (models.c, models_dlbench.c). */
#ifndef NB_MODELS_IMPL_H
#define NB_MODELS_IMPL_H

#include <stdbool.h>

#include "nabla/module.h"

/* A square k x k Conv2d module with equal stride and padding on both axes. */
nb_module *nb__zoo_conv(int64_t cin, int64_t cout, int64_t k, int64_t stride, int64_t pad, bool bias,
                        const nb_tensor_params *p);
/* A module of type funcs with kids[i] registered under names[i]; takes ownership of every kid,
 * also on failure (NULL, with the error of the first failure). */
nb_module *nb__zoo_container(const nb_module_funcs *funcs, const char *const *names, nb_module **kids, int n);
/* Whether m is a BatchNorm2d module; relu(bn(x)) for one: nb_module_forward and nb_relu in one,
 * on nb_batch_norm_relu (one pass each way on the CPU). nb_sequential uses both too. */
bool nb__is_batch_norm2d_module(const nb_module *m);
nb_tensor *nb__zoo_bn_relu(nb_module *bn, nb_tensor *x);
/* relu(bn(x) + r) for a BatchNorm2d bn, on nb_batch_norm_add_relu (a residual block's end). */
nb_tensor *nb__zoo_bn_add_relu(nb_module *bn, nb_tensor *x, const nb_tensor *r);
/* bn(x) + r, no ReLU (nb_batch_norm_add: DLBench ResNet-56's block end). */
nb_tensor *nb__zoo_bn_add(nb_module *bn, nb_tensor *x, const nb_tensor *r);
/* For nb_sequential: whether m (a Conv2d, a BatchNorm2d or a MaxPool2d of modules_conv.c) has a
 * forward with a following ReLU fused in, and that forward: relu(m(x)) as one node and one pass
 * (nb_conv2d's relu, nb_batch_norm_relu, nb_max_pool2d_relu), the same values and gradients. */
bool nb__fuses_relu(const nb_module *m);
nb_tensor *nb__relu_forward(nb_module *m, nb_tensor *x);
/* The DLBench networks (models_dlbench.c), called by nb_model_create after its argument checks;
 * *known is false when name is not one of them. */
nb_module *nb__model_dlbench(const char *name, int64_t c, int64_t h, int64_t w, int64_t classes,
                             const nb_tensor_params *p, bool *known);

#endif
