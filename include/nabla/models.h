/* nabla/models.h: the model zoo, built from nabla's modules (nabla/module.h).
 *
 * Names: "mlp" (784-256-10 style perceptron over the flattened image), "lenet5", "cnn" (a small
 * VGG-style network for 28x28 Fashion-MNIST: the `nabla train` default), "resnet20", "resnet56"
 * (He et al.'s CIFAR ResNets, for 32x32 images). Parameter counts and state_dict names equal the
 * same models written in PyTorch (tests/ref/cases_models.py defines those).
 *
 * The DLBench networks (Shi et al., ../shared/bench/DLBENCH.md; the Torch definitions), whose
 * PyTorch twins are bench/dlbench/torch_models.py; parameters at the spec's sizes in brackets:
 *   "fcn-s"     C*H*W -> 2048 -> 2048 -> 2048 -> classes, sigmoid (1x1x26752, 26752: 117,997,696)
 *   "alexnet-s" single-tower AlexNet, no LRN/dropout (3x224x224, 1000: 62,378,344); H, W >= 63
 *   "resnet-50" torchvision's resnet50 v1.5, stride in the 3x3 (3x224x224, 1000: 25,557,032)
 *   "fcn-r"     C*H*W -> 2048 -> 4096 -> 1024 -> classes, sigmoid (1x28x28, 10: 14,205,962)
 *   "alexnet-r" cuda-convnet CIFAR net, pools round down (3x32x32, 10: 85,098); H, W >= 15
 *   "resnet-56" DLBench's Torch CIFAR ResNet: convs with bias, option-A shortcuts (subsample +
 *               zero channels), no ReLU after the add (3x32x32, 10: 855,050). Not "resnet56".
 * The ResNets end in a global average pool and take any input size.
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
 * take (e.g. lenet5 on images smaller than 10x10, alexnet-s below 63x63). */
NB_API nb_module *nb_model_create(const char *name, int64_t in_channels, int64_t height, int64_t width,
                                  int64_t num_classes, const nb_tensor_params *p);
/* The known names, snprintf-style: writes at most cap, returns the count. */
NB_API int nb_model_names(const char **out, int cap);

#ifdef __cplusplus
}
#endif
#endif
