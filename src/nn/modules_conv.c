/* Built-in modules over nabla/nn.h: Conv2d, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d,
 * BatchNorm1d/2d, and LocalResponseNorm written with elementwise ops. PyTorch's names, defaults
 * and initial values. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error_impl.h"
#include "nabla/autograd.h"
#include "nabla/layers.h"
#include "nabla/ops.h"
#include "nn/models_impl.h"

/* The settings of a module, kept in its user pointer. */
typedef struct layer_opts {
    nb_conv2d_params conv;
    int64_t k[2], stride[2], pad[2]; /* pooling window, or adaptive output size in k */
    double alpha, beta, kk;          /* LocalResponseNorm */
} layer_opts;

static const layer_opts *opts(const nb_module *m) { return nb_module_user(m); }

static nb_module *with_opts(const nb_module_funcs *funcs, layer_opts o)
{
    layer_opts *u = malloc(sizeof *u);
    if (!u) return nb__err_null(NB_ERR_OOM, "%s: out of memory", funcs->type_name);
    *u = o;
    nb_module *m = nb_module_create(funcs, u);
    if (!m) free(u);
    return m;
}

/* A new tensor of shape filled with U(-bound, bound) (uniform) or `value`, registered as a
 * parameter (param) or buffer of m. dtype overrides p's dtype when >= 0. */
static nb_status add_tensor(nb_module *m, const char *name, const int64_t *shape, int ndim, bool uniform,
                            double value, bool param, int dtype, const nb_tensor_params *p)
{
    nb_tensor_params q = p ? *p : nb_tensor_params_default();
    q.requires_grad = false;
    if (dtype >= 0) q.dtype = (nb_dtype)dtype;
    nb_scope *s = nb_scope_begin();
    if (!s) return nb__err(NB_ERR_OOM, "%s: out of memory", nb_module_type_name(m));
    nb_tensor *t = uniform ? nb_empty(shape, ndim, &q) : nb_full(shape, ndim, value, &q);
    nb_status st = !t ? nb_last_status() : uniform ? nb_init_uniform_(t, -value, value, q.generator) : NB_OK;
    if (st == NB_OK)
        st = param ? nb_module_register_parameter(m, name, t) : nb_module_register_buffer(m, name, t);
    nb_scope_end(s);
    return st;
}

static nb_status check_float(const char *op, const nb_tensor_params *p)
{
    if (p && !nb_dtype_is_floating(p->dtype))
        return nb__err(NB_ERR_DTYPE, "%s: parameters must be floating (got %s)", op, nb_dtype_name(p->dtype));
    return NB_OK;
}

/* ---- Conv2d ---------------------------------------------------------------------------------- */

static nb_tensor *conv_forward(nb_module *self, nb_tensor *x)
{
    return nb_conv2d(x, nb_module_get_parameter(self, "weight"), nb_module_get_parameter(self, "bias"),
                     &opts(self)->conv);
}

/* A named array, not a literal: its address is this module type's alone (identical literals may
 * be merged by the linker), so Sequential can recognise a Conv2d by it. */
static const char conv_type_name[] = "Conv2d";
static const nb_module_funcs conv_funcs = {conv_type_name, conv_forward, free};

/* Conv2d's forward with the following ReLU fused in (one CONV2D node). */
static nb_tensor *conv_relu_forward(nb_module *m, nb_tensor *x)
{
    nb_conv2d_params c = opts(m)->conv;
    c.relu = true;
    nb_scope *s = nb_scope_begin();
    if (!s) return nb__err_null(NB_ERR_OOM, "Conv2d: out of memory");
    nb_tensor *y = nb_conv2d(x, nb_module_get_parameter(m, "weight"), nb_module_get_parameter(m, "bias"), &c);
    return nb_scope_end_keep(s, y);
}

nb_module *nb_conv2d_module(int64_t in_channels, int64_t out_channels, int64_t kh, int64_t kw,
                            const nb_conv2d_params *cp, bool bias, const nb_tensor_params *p)
{
    layer_opts o = {0};
    o.conv = cp ? *cp : nb_conv2d_params_default();
    int64_t g = o.conv.groups;
    if (in_channels < 1 || out_channels < 1 || kh < 1 || kw < 1 || g < 1 || in_channels % g || out_channels % g)
        return nb__err_null(NB_ERR_INVALID_ARG,
                            "Conv2d: bad sizes (in %lld, out %lld, kernel %lldx%lld, groups %lld)",
                            (long long)in_channels, (long long)out_channels, (long long)kh, (long long)kw,
                            (long long)g);
    for (int i = 0; i < 2; i++)
        if (o.conv.stride[i] < 1 || o.conv.padding[i] < 0 || o.conv.dilation[i] < 1)
            return nb__err_null(NB_ERR_INVALID_ARG, "Conv2d: bad stride %lld, padding %lld or dilation %lld",
                                (long long)o.conv.stride[i], (long long)o.conv.padding[i],
                                (long long)o.conv.dilation[i]);
    if (check_float("Conv2d", p) != NB_OK) return NULL;
    nb_module *m = with_opts(&conv_funcs, o);
    if (!m) return NULL;
    double bound = 1.0 / sqrt((double)(in_channels / g * kh * kw));
    int64_t wshape[4] = {out_channels, in_channels / g, kh, kw};
    nb_status s = add_tensor(m, "weight", wshape, 4, true, bound, true, -1, p);
    if (s == NB_OK && bias) s = add_tensor(m, "bias", &out_channels, 1, true, bound, true, -1, p);
    if (s != NB_OK) {
        nb_module_free(m);
        return NULL;
    }
    return m;
}

/* ---- pooling --------------------------------------------------------------------------------- */

static nb_tensor *maxpool_forward(nb_module *self, nb_tensor *x)
{
    const layer_opts *o = opts(self);
    return nb_max_pool2d(x, o->k, o->stride, o->pad, false);
}

static nb_tensor *avgpool_forward(nb_module *self, nb_tensor *x)
{
    const layer_opts *o = opts(self);
    return nb_avg_pool2d(x, o->k, o->stride, o->pad, false, true);
}

static nb_tensor *adaptive_forward(nb_module *self, nb_tensor *x)
{
    return nb_adaptive_avg_pool2d(x, opts(self)->k[0], opts(self)->k[1]);
}

static nb_tensor *maxpool_relu_forward(nb_module *self, nb_tensor *x)
{
    const layer_opts *o = opts(self);
    return nb_max_pool2d_relu(x, o->k, o->stride, o->pad, false);
}

static const char maxpool_type_name[] = "MaxPool2d"; /* an address of its own, as conv_type_name */
static const nb_module_funcs maxpool_funcs = {maxpool_type_name, maxpool_forward, free};
static const nb_module_funcs avgpool_funcs = {"AvgPool2d", avgpool_forward, free};
static const nb_module_funcs adaptive_funcs = {"AdaptiveAvgPool2d", adaptive_forward, free};

static nb_module *pool_module(const nb_module_funcs *funcs, int64_t kernel, int64_t stride, int64_t padding)
{
    if (stride == 0) stride = kernel;
    if (kernel < 1 || stride < 1 || padding < 0 || padding > kernel / 2)
        return nb__err_null(NB_ERR_INVALID_ARG, "%s: bad kernel %lld, stride %lld or padding %lld", funcs->type_name,
                            (long long)kernel, (long long)stride, (long long)padding);
    layer_opts o = {0};
    o.k[0] = o.k[1] = kernel;
    o.stride[0] = o.stride[1] = stride;
    o.pad[0] = o.pad[1] = padding;
    return with_opts(funcs, o);
}

nb_module *nb_max_pool2d_module(int64_t kernel, int64_t stride, int64_t padding)
{
    return pool_module(&maxpool_funcs, kernel, stride, padding);
}

nb_module *nb_avg_pool2d_module(int64_t kernel, int64_t stride, int64_t padding)
{
    return pool_module(&avgpool_funcs, kernel, stride, padding);
}

nb_module *nb_adaptive_avg_pool2d_module(int64_t out_h, int64_t out_w)
{
    if (out_h < 1 || out_w < 1)
        return nb__err_null(NB_ERR_INVALID_ARG, "AdaptiveAvgPool2d: bad output size %lldx%lld", (long long)out_h,
                            (long long)out_w);
    layer_opts o = {0};
    o.k[0] = out_h;
    o.k[1] = out_w;
    return with_opts(&adaptive_funcs, o);
}

/* ---- BatchNorm ------------------------------------------------------------------------------- */

/* The module's batch norm of x; with relu, relu of it; with a residual r, that + r, then the ReLU
 * when relu is set (nb_batch_norm_add, nb_batch_norm_add_relu). */
static nb_tensor *bn_run(nb_module *self, nb_tensor *x, bool relu, const nb_tensor *r)
{
    bool training = nb_module_is_training(self);
    nb_tensor *rm = nb_module_get_buffer(self, "running_mean"), *rv = nb_module_get_buffer(self, "running_var");
    nb_tensor *w = nb_module_get_parameter(self, "weight"), *b = nb_module_get_parameter(self, "bias"), *y;
    if (r) y = (relu ? nb_batch_norm_add_relu : nb_batch_norm_add)(x, r, rm, rv, w, b, training, 0.1, 1e-5);
    else y = (relu ? nb_batch_norm_relu : nb_batch_norm)(x, rm, rv, w, b, training, 0.1, 1e-5);
    if (y && training) {
        /* an int64 one, so that the counter stays int64 (a double scalar would promote) */
        nb_tensor *count = nb_module_get_buffer(self, "num_batches_tracked");
        nb_tensor_params q = nb_tensor_params_default();
        q.dtype = NB_INT64;
        q.device = nb_tensor_device(count);
        nb_tensor *one = nb_scalar_tensor(1, &q);
        bool prev = nb_set_grad_enabled(false);
        nb_status s = one ? nb_add_(count, one) : nb_last_status();
        nb_set_grad_enabled(prev);
        if (s != NB_OK) return NULL;
    }
    return y;
}

/* BatchNorm2d's forward (relu and r as bn_run's), after its input check. */
static nb_tensor *bn2d_run(nb_module *self, nb_tensor *x, bool relu, const nb_tensor *r)
{
    if (x && nb_tensor_ndim(x) != 4)
        return nb__err_null(NB_ERR_SHAPE, "BatchNorm2d: expected 4D input (got %dD input)", nb_tensor_ndim(x));
    return bn_run(self, x, relu, r);
}

static nb_tensor *bn2d_forward(nb_module *self, nb_tensor *x) { return bn2d_run(self, x, false, NULL); }

static nb_tensor *bn1d_forward(nb_module *self, nb_tensor *x)
{
    if (x && nb_tensor_ndim(x) != 2 && nb_tensor_ndim(x) != 3)
        return nb__err_null(NB_ERR_SHAPE, "BatchNorm1d: expected 2D or 3D input (got %dD input)", nb_tensor_ndim(x));
    if (!x || nb_tensor_ndim(x) == 3) return bn_run(self, x, false, NULL);
    const int64_t *sh = nb_tensor_shape(x);
    int64_t s4[4] = {sh[0], sh[1], 1, 1};
    nb_tensor *y = bn_run(self, nb_reshape(x, s4, 4), false, NULL);
    return y ? nb_reshape(y, sh, 2) : NULL;
}

static const nb_module_funcs bn2d_funcs = {"BatchNorm2d", bn2d_forward, NULL};
static const nb_module_funcs bn1d_funcs = {"BatchNorm1d", bn1d_forward, NULL};

bool nb__is_batch_norm2d_module(const nb_module *m) { return m && nb_module_type_name(m) == bn2d_funcs.type_name; }

/* nb__zoo_bn_relu, nb__zoo_bn_add_relu (r set) and nb__zoo_bn_add (r set, relu clear). */
static nb_tensor *zoo_bn(const char *fn, nb_module *bn, nb_tensor *x, const nb_tensor *r, bool relu)
{
    if (!nb__is_batch_norm2d_module(bn))
        return nb__err_null(NB_ERR_INTERNAL, "%s: %s is not a BatchNorm2d", fn, bn ? nb_module_type_name(bn) : "NULL");
    if (!x) return nb__err_null(NB_ERR_INVALID_ARG, "%s: NULL input to BatchNorm2d", fn);
    nb_scope *s = nb_scope_begin();
    if (!s) return NULL;
    return nb_scope_end_keep(s, bn2d_run(bn, x, relu, r));
}

nb_tensor *nb__zoo_bn_relu(nb_module *bn, nb_tensor *x) { return zoo_bn("zoo_bn_relu", bn, x, NULL, true); }

nb_tensor *nb__zoo_bn_add_relu(nb_module *bn, nb_tensor *x, const nb_tensor *r)
{
    if (!r) return nb__err_null(NB_ERR_INVALID_ARG, "zoo_bn_add_relu: NULL residual");
    return zoo_bn("zoo_bn_add_relu", bn, x, r, true);
}

nb_tensor *nb__zoo_bn_add(nb_module *bn, nb_tensor *x, const nb_tensor *r)
{
    if (!r) return nb__err_null(NB_ERR_INVALID_ARG, "zoo_bn_add: NULL residual");
    return zoo_bn("zoo_bn_add", bn, x, r, false);
}

bool nb__fuses_relu(const nb_module *m)
{
    const char *t = m ? nb_module_type_name(m) : NULL;
    return t && (t == conv_type_name || t == maxpool_type_name || nb__is_batch_norm2d_module(m));
}

nb_tensor *nb__relu_forward(nb_module *m, nb_tensor *x)
{
    if (!nb__fuses_relu(m))
        return nb__err_null(NB_ERR_INTERNAL, "relu_forward: %s has no fused ReLU", m ? nb_module_type_name(m) : "NULL");
    const char *t = nb_module_type_name(m);
    if (t == conv_type_name) return conv_relu_forward(m, x);
    if (t == maxpool_type_name) return maxpool_relu_forward(m, x);
    return nb__zoo_bn_relu(m, x);
}

static nb_module *bn_module(const nb_module_funcs *funcs, int64_t c, const nb_tensor_params *p)
{
    if (c < 1)
        return nb__err_null(NB_ERR_INVALID_ARG, "%s: num_features must be >= 1 (got %lld)", funcs->type_name,
                            (long long)c);
    if (check_float(funcs->type_name, p) != NB_OK) return NULL;
    nb_module *m = nb_module_create(funcs, NULL);
    if (!m) return NULL;
    nb_status s = add_tensor(m, "weight", &c, 1, false, 1.0, true, -1, p);
    if (s == NB_OK) s = add_tensor(m, "bias", &c, 1, false, 0.0, true, -1, p);
    if (s == NB_OK) s = add_tensor(m, "running_mean", &c, 1, false, 0.0, false, -1, p);
    if (s == NB_OK) s = add_tensor(m, "running_var", &c, 1, false, 1.0, false, -1, p);
    if (s == NB_OK) s = add_tensor(m, "num_batches_tracked", NULL, 0, false, 0.0, false, NB_INT64, p);
    if (s != NB_OK) {
        nb_module_free(m);
        return NULL;
    }
    return m;
}

nb_module *nb_batch_norm2d_module(int64_t num_features, const nb_tensor_params *p)
{
    return bn_module(&bn2d_funcs, num_features, p);
}

nb_module *nb_batch_norm1d_module(int64_t num_features, const nb_tensor_params *p)
{
    return bn_module(&bn1d_funcs, num_features, p);
}

/* ---- LocalResponseNorm ----------------------------------------------------------------------- */

/* As torch.nn.functional.local_response_norm: the squares are zero-padded by size/2 channels in
 * front and (size-1)/2 behind, summed over each window of size channels, scaled by alpha / size. */
static nb_tensor *lrn_forward(nb_module *self, nb_tensor *x)
{
    const layer_opts *o = opts(self);
    int64_t size = o->k[0];
    if (!x) return nb__err_null(NB_ERR_INVALID_ARG, "LocalResponseNorm: NULL input");
    int nd = nb_tensor_ndim(x);
    if (nd < 3)
        return nb__err_null(NB_ERR_SHAPE, "LocalResponseNorm: expected 3D or higher input (got %dD)", nd);
    const int64_t *sh = nb_tensor_shape(x);
    int64_t c = sh[1];
    nb_tensor_params q = nb_tensor_params_default();
    q.dtype = nb_tensor_dtype(x);
    q.device = nb_tensor_device(x);
    int64_t zs[NB_MAX_DIMS];
    memcpy(zs, sh, (size_t)nd * sizeof *zs);
    nb_tensor *parts[3];
    int np = 0;
    zs[1] = size / 2;
    if (zs[1] > 0) parts[np++] = nb_zeros(zs, nd, &q);
    parts[np++] = nb_mul(x, x);
    zs[1] = (size - 1) / 2;
    if (zs[1] > 0) parts[np++] = nb_zeros(zs, nd, &q);
    for (int i = 0; i < np; i++)
        if (!parts[i]) return NULL;
    nb_tensor *padded = np > 1 ? nb_cat(parts, np, 1) : parts[0];
    nb_tensor *acc = padded ? nb_narrow(padded, 1, 0, c) : NULL;
    for (int64_t i = 1; acc && i < size; i++) acc = nb_add(acc, nb_narrow(padded, 1, i, c));
    nb_tensor *div = acc ? nb_add_scalar(nb_mul_scalar(acc, o->alpha / (double)size), o->kk) : NULL;
    div = div ? nb_pow_scalar(div, o->beta) : NULL;
    return div ? nb_div(x, div) : NULL;
}

static const nb_module_funcs lrn_funcs = {"LocalResponseNorm", lrn_forward, free};

nb_module *nb_local_response_norm_module(int64_t size, double alpha, double beta, double k)
{
    if (size < 1)
        return nb__err_null(NB_ERR_INVALID_ARG, "LocalResponseNorm: size must be >= 1 (got %lld)", (long long)size);
    layer_opts o = {0};
    o.k[0] = size;
    o.alpha = alpha;
    o.beta = beta;
    o.kk = k;
    return with_opts(&lrn_funcs, o);
}
