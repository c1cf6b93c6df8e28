/* nabla/models.h: the model zoo, built from nabla's modules (nabla/module.h).
 *
 * Names: "mlp" (784-256-10 style perceptron over the flattened image), "lenet5", "cnn" (a small
 * VGG-style network for 28x28 Fashion-MNIST: the `nabla train` default), "resnet20", "resnet56"
 * (He et al.'s CIFAR ResNets, for 32x32 images). Parameter counts and state_dict names equal the
 * same models written in PyTorch (tests/ref/cases_models.py defines those).
 */
#ifndef NABLA_MODELS_H
#define NABLA_MODELS_H

#include "nabla/module.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A new model for images of in_channels x height x width and num_classes outputs, with PyTorch's
 * default initialisation from p's generator (p may be NULL). The caller frees it with
 * nb_module_free. NULL with an error naming the model for an unknown name or a shape it cannot
 * take (e.g. lenet5 on images smaller than 28x28). */
NB_API nb_module *nb_model_create(const char *name, int64_t in_channels, int64_t height, int64_t width,
                                  int64_t num_classes, const nb_tensor_params *p);
/* The known names, snprintf-style: writes at most cap, returns the count. */
NB_API int nb_model_names(const char **out, int cap);

#ifdef __cplusplus
}
#endif
#endif
