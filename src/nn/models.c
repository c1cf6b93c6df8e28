/* The model zoo (nabla/models.h): mlp, lenet5, cnn, resnet20, resnet56, built from modules with
 * the state-dict names of the PyTorch definitions in tests/ref/cases_models.py; and the DLBench
 * networks fcn-s, alexnet-s, resnet-50, fcn-r, alexnet-r, resnet-56 (models_dlbench.c).
 *
 * cnn (the `nabla train` default, for 28x28 Fashion-MNIST):
 *   features: conv(C,32,3,p1) BN ReLU maxpool2 conv(32,64,3,p1) BN ReLU maxpool2
 *   classifier: Flatten Linear(64*H/4*W/4, 128) ReLU Dropout(0.25) Linear(128, classes)
 *   (422k parameters. A second conv(32,32) at full resolution was measured ~2x slower per epoch
 *   on 2 cores for little gain; this one reaches >= 91% test accuracy in 2-3 epochs of Adam.)
 * resnet20/56: He et al.'s CIFAR ResNet, 3 stages of n = 3 / 9 basic blocks (16, 32, 64
 * channels), conv3x3-BN-ReLU-conv3x3-BN plus the shortcut, ReLU after the add; when the shape
 * changes the shortcut is option B: 1x1 conv (stride 2, no bias) + BN, named shortcut.0/1.
 * Then global average pooling and fc = Linear(64, classes). Convolutions have no bias. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error_impl.h"
#include "nn/models_impl.h"
#include "nabla/layers.h"
#include "nabla/models.h"
#include "nabla/ops.h"

static const char *const model_names[] = {"mlp",       "lenet5",    "cnn",       "resnet20",
                                          "resnet56",  "fcn-s",     "alexnet-s", "resnet-50",
                                          "fcn-r",     "alexnet-r", "resnet-56"};
#define N_MODELS ((int)(sizeof model_names / sizeof *model_names))

int nb_model_names(const char **out, int cap)
{
    for (int i = 0; out && i < cap && i < N_MODELS; i++) out[i] = model_names[i];
    return N_MODELS;
}

static nb_conv2d_params conv_p(int64_t stride, int64_t pad)
{
    nb_conv2d_params c = nb_conv2d_params_default();
    c.stride[0] = c.stride[1] = stride;
    c.padding[0] = c.padding[1] = pad;
    return c;
}

nb_module *nb__zoo_conv(int64_t cin, int64_t cout, int64_t k, int64_t stride, int64_t pad, bool bias,
                       const nb_tensor_params *p)
{
    nb_conv2d_params c = conv_p(stride, pad);
    return nb_conv2d_module(cin, cout, k, k, &c, bias, p);
}

nb_module *nb__zoo_container(const nb_module_funcs *funcs, const char *const *names, nb_module **kids, int n)
{
    nb_module *m = nb_module_create(funcs, NULL);
    for (int i = 0; i < n; i++) {
        if (m && !kids[i]) {
            nb_module_free(m);
            m = NULL;
        }
        if (!m) {
            nb_module_free(kids[i]);
            continue;
        }
        if (nb_module_register_module(m, names[i], kids[i]) != NB_OK) {
            nb_module_free(m);
            m = NULL;
        }
    }
    return m;
}

/* ---- features + classifier nets (lenet5, cnn) ------------------------------------------------ */

static nb_tensor *net_forward(nb_module *self, nb_tensor *x)
{
    nb_tensor *h = nb_module_forward(nb_module_get_module(self, "features"), x);
    return h ? nb_module_forward(nb_module_get_module(self, "classifier"), h) : NULL;
}

static const nb_module_funcs net_funcs = {"Net", net_forward, NULL};

static nb_module *two_part(nb_module *features, nb_module *classifier)
{
    static const char *const names[2] = {"features", "classifier"};
    nb_module *kids[2] = {features, classifier};
    return nb__zoo_container(&net_funcs, names, kids, 2);
}

static nb_module *mlp(int64_t c, int64_t h, int64_t w, int64_t classes, const nb_tensor_params *p)
{
    nb_module *k[4] = {nb_flatten_module(1, -1), nb_linear_module(c * h * w, 256, true, p), nb_relu_module(),
                       nb_linear_module(256, classes, true, p)};
    return nb_sequential(k, 4);
}

static nb_module *lenet5(int64_t c, int64_t h, int64_t w, int64_t classes, const nb_tensor_params *p)
{
    /* conv5 pad 2 keeps the size; pool 2; conv5 -4; pool 2 */
    int64_t oh = (h / 2 - 4) / 2, ow = (w / 2 - 4) / 2;
    if (h / 2 < 5 || w / 2 < 5)
        return nb__err_null(NB_ERR_SHAPE, "model lenet5: input %lldx%lld too small (needs at least 10x10)",
                            (long long)h, (long long)w);
    nb_module *f[6] = {nb__zoo_conv(c, 6, 5, 1, 2, true, p), nb_relu_module(), nb_max_pool2d_module(2, 0, 0),
                       nb__zoo_conv(6, 16, 5, 1, 0, true, p), nb_relu_module(), nb_max_pool2d_module(2, 0, 0)};
    nb_module *cl[6] = {nb_flatten_module(1, -1), nb_linear_module(16 * oh * ow, 120, true, p), nb_relu_module(),
                        nb_linear_module(120, 84, true, p), nb_relu_module(), nb_linear_module(84, classes, true, p)};
    return two_part(nb_sequential(f, 6), nb_sequential(cl, 6));
}

static nb_module *cnn(int64_t c, int64_t h, int64_t w, int64_t classes, const nb_tensor_params *p)
{
    if (h < 4 || w < 4)
        return nb__err_null(NB_ERR_SHAPE, "model cnn: input %lldx%lld too small (needs at least 4x4)", (long long)h,
                            (long long)w);
    nb_module *f[8] = {nb__zoo_conv(c, 32, 3, 1, 1, true, p),  nb_batch_norm2d_module(32, p), nb_relu_module(),
                       nb_max_pool2d_module(2, 0, 0),  nb__zoo_conv(32, 64, 3, 1, 1, true, p),
                       nb_batch_norm2d_module(64, p),  nb_relu_module(),
                       nb_max_pool2d_module(2, 0, 0)};
    nb_module *cl[5] = {nb_flatten_module(1, -1), nb_linear_module(64 * (h / 4) * (w / 4), 128, true, p),
                        nb_relu_module(), nb_dropout_module(0.25), nb_linear_module(128, classes, true, p)};
    return two_part(nb_sequential(f, 8), nb_sequential(cl, 5));
}

/* ---- ResNet ---------------------------------------------------------------------------------- */

static nb_tensor *block_forward(nb_module *self, nb_tensor *x)
{
    nb_tensor *h = nb_module_forward(nb_module_get_module(self, "conv1"), x);
    h = h ? nb__zoo_bn_relu(nb_module_get_module(self, "bn1"), h) : NULL;
    h = h ? nb_module_forward(nb_module_get_module(self, "conv2"), h) : NULL;
    nb_module *sc = nb_module_get_module(self, "shortcut");
    nb_tensor *s = !h ? NULL : sc ? nb_module_forward(sc, x) : x;
    return s ? nb__zoo_bn_add_relu(nb_module_get_module(self, "bn2"), h, s) : NULL; /* relu(bn2(h) + s) */
}

static const nb_module_funcs block_funcs = {"BasicBlock", block_forward, NULL};

static nb_module *block(int64_t cin, int64_t cout, int64_t stride, const nb_tensor_params *p)
{
    static const char *const names[5] = {"conv1", "bn1", "conv2", "bn2", "shortcut"};
    nb_module *k[5] = {nb__zoo_conv(cin, cout, 3, stride, 1, false, p), nb_batch_norm2d_module(cout, p),
                       nb__zoo_conv(cout, cout, 3, 1, 1, false, p), nb_batch_norm2d_module(cout, p), NULL};
    bool proj = stride != 1 || cin != cout;
    if (proj) {
        nb_module *s[2] = {nb__zoo_conv(cin, cout, 1, stride, 0, false, p), nb_batch_norm2d_module(cout, p)};
        k[4] = nb_sequential(s, 2);
    }
    return nb__zoo_container(&block_funcs, names, k, proj ? 5 : 4);
}

static nb_tensor *resnet_forward(nb_module *self, nb_tensor *x)
{
    static const char *const order[5] = {"conv1", "bn1", "layer1", "layer2", "layer3"};
    nb_tensor *h = x;
    for (int i = 0; h && i < 5; i++) {
        nb_module *m = nb_module_get_module(self, order[i]);
        h = i == 1 ? nb__zoo_bn_relu(m, h) : nb_module_forward(m, h); /* bn1, then its ReLU */
    }
    h = h ? nb_adaptive_avg_pool2d(h, 1, 1) : NULL;
    h = h ? nb_flatten(h, 1, -1) : NULL;
    return h ? nb_module_forward(nb_module_get_module(self, "fc"), h) : NULL;
}

static const nb_module_funcs resnet_funcs = {"ResNet", resnet_forward, NULL};

static nb_module *resnet(int n, int64_t c, int64_t classes, const nb_tensor_params *p)
{
    static const char *const names[6] = {"conv1", "bn1", "layer1", "layer2", "layer3", "fc"};
    nb_module *k[6] = {nb__zoo_conv(c, 16, 3, 1, 1, false, p), nb_batch_norm2d_module(16, p), NULL, NULL, NULL,
                       nb_linear_module(64, classes, true, p)};
    int64_t cin = 16;
    for (int s = 0; s < 3; s++) {
        int64_t cout = 16 << s;
        nb_module *blocks[9];
        for (int b = 0; b < n; b++) {
            blocks[b] = block(cin, cout, b == 0 && s > 0 ? 2 : 1, p);
            cin = cout;
        }
        k[2 + s] = nb_sequential(blocks, n);
    }
    return nb__zoo_container(&resnet_funcs, names, k, 6);
}

nb_module *nb_model_create(const char *name, int64_t in_channels, int64_t height, int64_t width,
                           int64_t num_classes, const nb_tensor_params *p)
{
    if (!name) return nb__err_null(NB_ERR_INVALID_ARG, "model_create: NULL name");
    if (in_channels < 1 || height < 1 || width < 1 || num_classes < 1)
        return nb__err_null(NB_ERR_INVALID_ARG,
                            "model %s: bad sizes (channels %lld, height %lld, width %lld, classes %lld)", name,
                            (long long)in_channels, (long long)height, (long long)width, (long long)num_classes);
    if (p && !nb_dtype_is_floating(p->dtype))
        return nb__err_null(NB_ERR_DTYPE, "model %s: parameters must be floating (got %s)", name,
                            nb_dtype_name(p->dtype));
    if (!strcmp(name, "mlp")) return mlp(in_channels, height, width, num_classes, p);
    if (!strcmp(name, "lenet5")) return lenet5(in_channels, height, width, num_classes, p);
    if (!strcmp(name, "cnn")) return cnn(in_channels, height, width, num_classes, p);
    if (!strcmp(name, "resnet20")) return resnet(3, in_channels, num_classes, p);
    if (!strcmp(name, "resnet56")) return resnet(9, in_channels, num_classes, p);
    bool known = false;
    nb_module *m = nb__model_dlbench(name, in_channels, height, width, num_classes, p, &known);
    if (known) return m;
    char list[256] = "";
    for (int i = 0; i < N_MODELS; i++) {
        size_t len = strlen(list);
        snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", model_names[i]);
    }
    return nb__err_null(NB_ERR_INVALID_ARG, "model_create: unknown model '%s' (known: %s)", name, list);
}
