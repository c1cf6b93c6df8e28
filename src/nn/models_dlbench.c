/* The six convolutional and fully-connected networks of DLBench (Shi, Wang, Xu & Chu,
 * ../shared/bench/DLBENCH.md sections 1-6, the Torch definitions), built from modules with the
 * state-dict names of their PyTorch twins in bench/dlbench/torch_models.py.
 *
 * fcn-s:     Sequential(Flatten, Linear(C*H*W, 2048), Sigmoid, Linear(2048, 2048), Sigmoid,
 *            Linear(2048, 2048), Sigmoid, Linear(2048, classes)); spec 1x1x26752 -> 26752.
 * fcn-r:     the same with hidden sizes 2048, 4096, 1024; spec 1x28x28 -> 10.
 * alexnet-s: features: nb__zoo_conv(C,96,11,s4,p2) ReLU maxpool3/2 nb__zoo_conv(96,256,5,p2) ReLU maxpool3/2
 *            nb__zoo_conv(256,384,3,p1) ReLU nb__zoo_conv(384,384,3,p1) ReLU nb__zoo_conv(384,256,3,p1) ReLU maxpool3/2;
 *            classifier: Flatten Linear(256*h*w, 4096) ReLU Linear(4096, 4096) ReLU
 *            Linear(4096, classes). At 224x224 pool5 gives 256x6x6; inputs from 63x63 on.
 * alexnet-r: features: nb__zoo_conv(C,32,5,p2) maxpool3/2 ReLU nb__zoo_conv(32,32,5,p2) ReLU maxpool3/2
 *            nb__zoo_conv(32,64,5,p2) ReLU avgpool3/2 (all pools round down); classifier: Flatten
 *            Linear(64*h*w, classes). At 32x32: 32 -> 15 -> 7 -> 3; inputs from 15x15 on.
 * resnet-50: torchvision's resnet50 (v1.5, fb.resnet.torch): conv7x7/2 BN ReLU maxpool3/2 p1,
 *            bottlenecks 3-4-6-3 (1x1, 3x3 with the stride, 1x1 x4; BN after each; ReLU after
 *            the add), projection "downsample" = 1x1 conv + BN in each stage's first block,
 *            global average pool, fc. Convolutions have no bias.
 * resnet-56: DLBench's Torch CIFAR ResNet (gcr/torch-residual-networks): conv3x3(C,16) BN ReLU,
 *            3 stages x 9 basic blocks (16, 32, 64 channels) conv-BN-ReLU-conv-BN + shortcut with
 *            NO ReLU after the add; the shortcut is option A: identity, or where the shape changes
 *            a stride-2 subsample with the new channels zero (no parameters). Convolutions have
 *            biases. Global average pool, fc. (The zoo's "resnet56" is He et al.'s, option B.)
 * The ResNets take any input size; the global pool makes the head size-independent. */
#include <stdbool.h>
#include <string.h>

#include "core/error_impl.h"
#include "nn/models_impl.h"
#include "nabla/layers.h"
#include "nabla/models.h"
#include "nabla/ops.h"

/* Output size of a conv or pool window that rounds down; 0 when the window does not fit. */
static int64_t out_size(int64_t n, int64_t k, int64_t stride, int64_t pad)
{
    return n + 2 * pad < k ? 0 : (n + 2 * pad - k) / stride + 1;
}

/* ---- fully connected ------------------------------------------------------------------------- */

static nb_module *fcn(const char *name, const int64_t hidden[3], int64_t c, int64_t h, int64_t w, int64_t classes,
                      const nb_tensor_params *p)
{
    int64_t in = 0;
    if (__builtin_mul_overflow(c, h, &in) || __builtin_mul_overflow(in, w, &in) || in > ((int64_t)1 << 40))
        return nb__err_null(NB_ERR_INVALID_ARG, "model %s: input %lldx%lldx%lld too large", name, (long long)c,
                            (long long)h, (long long)w);
    nb_module *k[8];
    int n = 0;
    k[n++] = nb_flatten_module(1, -1);
    for (int i = 0; i < 3; i++) {
        k[n++] = nb_linear_module(in, hidden[i], true, p);
        k[n++] = nb_sigmoid_module();
        in = hidden[i];
    }
    k[n++] = nb_linear_module(in, classes, true, p);
    return nb_sequential(k, n);
}

/* ---- AlexNets: features + classifier --------------------------------------------------------- */

static nb_tensor *net_forward(nb_module *self, nb_tensor *x)
{
    nb_tensor *y = nb_module_forward(nb_module_get_module(self, "features"), x);
    return y ? nb_module_forward(nb_module_get_module(self, "classifier"), y) : NULL;
}

static const nb_module_funcs net_funcs = {"Net", net_forward, NULL};

static nb_module *two_part(nb_module *features, nb_module *classifier)
{
    static const char *const names[2] = {"features", "classifier"};
    nb_module *kids[2] = {features, classifier};
    return nb__zoo_container(&net_funcs, names, kids, 2);
}

/* pool5's side for an alexnet-s input side n (0: too small). */
static int64_t alexnet_s_side(int64_t n)
{
    n = out_size(n, 11, 4, 2);
    for (int i = 0; i < 3 && n > 0; i++) n = out_size(n, 3, 2, 0);
    return n;
}

static nb_module *alexnet_s(int64_t c, int64_t h, int64_t w, int64_t classes, const nb_tensor_params *p)
{
    int64_t oh = alexnet_s_side(h), ow = alexnet_s_side(w);
    if (oh < 1 || ow < 1)
        return nb__err_null(NB_ERR_SHAPE, "model alexnet-s: input %lldx%lld too small (needs at least 63x63)",
                            (long long)h, (long long)w);
    nb_module *f[13] = {nb__zoo_conv(c, 96, 11, 4, 2, true, p),    nb_relu_module(),
                        nb_max_pool2d_module(3, 2, 0),     nb__zoo_conv(96, 256, 5, 1, 2, true, p),
                        nb_relu_module(),                  nb_max_pool2d_module(3, 2, 0),
                        nb__zoo_conv(256, 384, 3, 1, 1, true, p),  nb_relu_module(),
                        nb__zoo_conv(384, 384, 3, 1, 1, true, p),  nb_relu_module(),
                        nb__zoo_conv(384, 256, 3, 1, 1, true, p),  nb_relu_module(),
                        nb_max_pool2d_module(3, 2, 0)};
    nb_module *cl[6] = {nb_flatten_module(1, -1),          nb_linear_module(256 * oh * ow, 4096, true, p),
                        nb_relu_module(),                  nb_linear_module(4096, 4096, true, p),
                        nb_relu_module(),                  nb_linear_module(4096, classes, true, p)};
    return two_part(nb_sequential(f, 13), nb_sequential(cl, 6));
}

/* pool3's side for an alexnet-r input side n (the 5x5 pad 2 convs keep the size). */
static int64_t alexnet_r_side(int64_t n)
{
    for (int i = 0; i < 3 && n > 0; i++) n = out_size(n, 3, 2, 0);
    return n;
}

static nb_module *alexnet_r(int64_t c, int64_t h, int64_t w, int64_t classes, const nb_tensor_params *p)
{
    int64_t oh = alexnet_r_side(h), ow = alexnet_r_side(w);
    if (oh < 1 || ow < 1)
        return nb__err_null(NB_ERR_SHAPE, "model alexnet-r: input %lldx%lld too small (needs at least 15x15)",
                            (long long)h, (long long)w);
    nb_module *f[9] = {nb__zoo_conv(c, 32, 5, 1, 2, true, p),  nb_max_pool2d_module(3, 2, 0), nb_relu_module(),
                       nb__zoo_conv(32, 32, 5, 1, 2, true, p), nb_relu_module(),              nb_max_pool2d_module(3, 2, 0),
                       nb__zoo_conv(32, 64, 5, 1, 2, true, p), nb_relu_module(),              nb_avg_pool2d_module(3, 2, 0)};
    nb_module *cl[2] = {nb_flatten_module(1, -1), nb_linear_module(64 * oh * ow, classes, true, p)};
    return two_part(nb_sequential(f, 9), nb_sequential(cl, 2));
}

/* ---- ResNet-50 ------------------------------------------------------------------------------- */

/* conv then BN with the ReLU after it fused in (nb_batch_norm_relu). */
static nb_tensor *conv_bn_relu(nb_module *self, const char *conv_name, const char *bn_name, nb_tensor *x)
{
    nb_tensor *y = nb_module_forward(nb_module_get_module(self, conv_name), x);
    return y ? nb__zoo_bn_relu(nb_module_get_module(self, bn_name), y) : NULL;
}

/* relu(bn3(conv3(...)) + shortcut), the last three in one op (nb_batch_norm_add_relu). */
static nb_tensor *bottleneck_forward(nb_module *self, nb_tensor *x)
{
    nb_tensor *y = conv_bn_relu(self, "conv1", "bn1", x);
    y = y ? conv_bn_relu(self, "conv2", "bn2", y) : NULL;
    y = y ? nb_module_forward(nb_module_get_module(self, "conv3"), y) : NULL;
    nb_module *down = nb_module_get_module(self, "downsample");
    nb_tensor *s = !y ? NULL : down ? nb_module_forward(down, x) : x;
    return s ? nb__zoo_bn_add_relu(nb_module_get_module(self, "bn3"), y, s) : NULL;
}

static const nb_module_funcs bottleneck_funcs = {"Bottleneck", bottleneck_forward, NULL};

static nb_module *bottleneck(int64_t cin, int64_t n, int64_t stride, const nb_tensor_params *p)
{
    static const char *const names[7] = {"conv1", "bn1", "conv2", "bn2", "conv3", "bn3", "downsample"};
    nb_module *k[7] = {nb__zoo_conv(cin, n, 1, 1, 0, false, p),     nb_batch_norm2d_module(n, p),
                       nb__zoo_conv(n, n, 3, stride, 1, false, p),  nb_batch_norm2d_module(n, p),
                       nb__zoo_conv(n, 4 * n, 1, 1, 0, false, p),   nb_batch_norm2d_module(4 * n, p),
                       NULL};
    bool proj = stride != 1 || cin != 4 * n;
    if (proj) {
        nb_module *d[2] = {nb__zoo_conv(cin, 4 * n, 1, stride, 0, false, p), nb_batch_norm2d_module(4 * n, p)};
        k[6] = nb_sequential(d, 2);
    }
    return nb__zoo_container(&bottleneck_funcs, names, k, proj ? 7 : 6);
}

/* conv1 BN ReLU [maxpool] layer1..layerN, global average pool, fc (both ResNets). */
static nb_tensor *resnet_forward(nb_module *self, nb_tensor *x, int stages, bool maxpool)
{
    static const char *const layers[4] = {"layer1", "layer2", "layer3", "layer4"};
    static const int64_t k3[2] = {3, 3}, s2[2] = {2, 2}, p1[2] = {1, 1};
    nb_tensor *h = conv_bn_relu(self, "conv1", "bn1", x);
    if (h && maxpool) h = nb_max_pool2d(h, k3, s2, p1, false);
    for (int i = 0; h && i < stages; i++) h = nb_module_forward(nb_module_get_module(self, layers[i]), h);
    h = h ? nb_adaptive_avg_pool2d(h, 1, 1) : NULL;
    h = h ? nb_flatten(h, 1, -1) : NULL;
    return h ? nb_module_forward(nb_module_get_module(self, "fc"), h) : NULL;
}

static nb_tensor *resnet50_forward(nb_module *self, nb_tensor *x) { return resnet_forward(self, x, 4, true); }

static const nb_module_funcs resnet50_funcs = {"ResNet", resnet50_forward, NULL};

static nb_module *resnet50(int64_t c, int64_t classes, const nb_tensor_params *p)
{
    static const char *const names[7] = {"conv1", "bn1", "layer1", "layer2", "layer3", "layer4", "fc"};
    static const int blocks[4] = {3, 4, 6, 3};
    nb_module *k[7] = {nb__zoo_conv(c, 64, 7, 2, 3, false, p), nb_batch_norm2d_module(64, p), NULL, NULL, NULL, NULL,
                       nb_linear_module(2048, classes, true, p)};
    int64_t cin = 64;
    for (int s = 0; s < 4; s++) {
        int64_t n = (int64_t)64 << s;
        nb_module *b[6];
        for (int i = 0; i < blocks[s]; i++) {
            b[i] = bottleneck(cin, n, i == 0 && s > 0 ? 2 : 1, p);
            cin = 4 * n;
        }
        k[2 + s] = nb_sequential(b, blocks[s]);
    }
    return nb__zoo_container(&resnet50_funcs, names, k, 7);
}

/* ---- ResNet-56 (DLBench's Torch variant) ----------------------------------------------------- */

/* Option A: x subsampled with stride 2 where the block halves the size, then zero channels
 * appended up to the block's width (torch7 nn.Padding after the last channel). */
static nb_tensor *shortcut_a(nb_tensor *x, const nb_tensor *y)
{
    const int64_t *xs = nb_tensor_shape(x), *ys = nb_tensor_shape(y);
    nb_tensor *s = x;
    if (xs[2] != ys[2] || xs[3] != ys[3]) {
        s = nb_slice(s, 2, 0, xs[2], 2);
        s = s ? nb_slice(s, 3, 0, xs[3], 2) : NULL;
    }
    if (s && ys[1] > xs[1]) {
        nb_tensor_params tp = nb_tensor_params_default();
        tp.dtype = nb_tensor_dtype(x);
        tp.device = nb_tensor_device(x);
        int64_t zshape[4] = {xs[0], ys[1] - xs[1], nb_tensor_shape(s)[2], nb_tensor_shape(s)[3]};
        nb_tensor *z = nb_zeros(zshape, 4, &tp);
        nb_tensor *parts[2] = {s, z};
        s = z ? nb_cat(parts, 2, 1) : NULL;
    }
    return s;
}

/* bn2(conv2(...)) + shortcut, the add made by the batch norm (nb_batch_norm_add). */
static nb_tensor *block_a_forward(nb_module *self, nb_tensor *x)
{
    nb_tensor *y = conv_bn_relu(self, "conv1", "bn1", x);
    y = y ? nb_module_forward(nb_module_get_module(self, "conv2"), y) : NULL;
    nb_tensor *s = y ? shortcut_a(x, y) : NULL;
    return s ? nb__zoo_bn_add(nb_module_get_module(self, "bn2"), y, s) : NULL;
}

static const nb_module_funcs block_a_funcs = {"BlockA", block_a_forward, NULL};

static nb_module *block_a(int64_t cin, int64_t cout, int64_t stride, const nb_tensor_params *p)
{
    static const char *const names[4] = {"conv1", "bn1", "conv2", "bn2"};
    nb_module *k[4] = {nb__zoo_conv(cin, cout, 3, stride, 1, true, p), nb_batch_norm2d_module(cout, p),
                       nb__zoo_conv(cout, cout, 3, 1, 1, true, p), nb_batch_norm2d_module(cout, p)};
    return nb__zoo_container(&block_a_funcs, names, k, 4);
}

static nb_tensor *resnet56_forward(nb_module *self, nb_tensor *x) { return resnet_forward(self, x, 3, false); }

static const nb_module_funcs resnet56_funcs = {"ResNet56", resnet56_forward, NULL};

static nb_module *resnet56a(int64_t c, int64_t classes, const nb_tensor_params *p)
{
    static const char *const names[6] = {"conv1", "bn1", "layer1", "layer2", "layer3", "fc"};
    nb_module *k[6] = {nb__zoo_conv(c, 16, 3, 1, 1, true, p), nb_batch_norm2d_module(16, p), NULL, NULL, NULL,
                       nb_linear_module(64, classes, true, p)};
    int64_t cin = 16;
    for (int s = 0; s < 3; s++) {
        int64_t cout = (int64_t)16 << s;
        nb_module *b[9];
        for (int i = 0; i < 9; i++) {
            b[i] = block_a(cin, cout, i == 0 && s > 0 ? 2 : 1, p);
            cin = cout;
        }
        k[2 + s] = nb_sequential(b, 9);
    }
    return nb__zoo_container(&resnet56_funcs, names, k, 6);
}

nb_module *nb__model_dlbench(const char *name, int64_t c, int64_t h, int64_t w, int64_t classes,
                             const nb_tensor_params *p, bool *known)
{
    static const int64_t fcn_s[3] = {2048, 2048, 2048}, fcn_r[3] = {2048, 4096, 1024};
    *known = true;
    if (!strcmp(name, "fcn-s")) return fcn(name, fcn_s, c, h, w, classes, p);
    if (!strcmp(name, "fcn-r")) return fcn(name, fcn_r, c, h, w, classes, p);
    if (!strcmp(name, "alexnet-s")) return alexnet_s(c, h, w, classes, p);
    if (!strcmp(name, "alexnet-r")) return alexnet_r(c, h, w, classes, p);
    if (!strcmp(name, "resnet-50")) return resnet50(c, classes, p);
    if (!strcmp(name, "resnet-56")) return resnet56a(c, classes, p);
    *known = false;
    return NULL;
}
