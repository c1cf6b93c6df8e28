/* conv2d's entry point: validation, output shape (laid out as a CPU input: NCHW or
 * channels-last), the CONV2D kernel (bias fused, and the ReLU
 * when p->relu: kernel and node flag) and the autograd node (saved: x, weight, and the output
 * when fused with ReLU, for its mask; parameters packed in i0/i1 as ops.def says). Backward rule
 * in src/autograd/rules_nn.c. */
#include <string.h>

#include "autograd/autograd_impl.h"
#include "nabla/nn.h"

#define SHAPE(t) nb__shape_str((t)->shape, (t)->ndim, (char[NB_SHAPE_STR_MAX]){0})

nb_conv2d_params nb_conv2d_params_default(void)
{
    nb_conv2d_params p = {.stride = {1, 1}, .padding = {0, 0}, .dilation = {1, 1}, .groups = 1};
    return p;
}

/* stride, padding, dilation within the 16 bits the kernel arguments pack them in. */
static nb_status check_params(const nb_conv2d_params *p)
{
    for (int i = 0; i < 2; i++) {
        if (p->stride[i] < 1 || p->stride[i] > 0xffff)
            return nb__err(NB_ERR_INVALID_ARG, "conv2d: stride must be in [1, 65535] (got [%lld, %lld])",
                           (long long)p->stride[0], (long long)p->stride[1]);
        if (p->padding[i] < 0 || p->padding[i] > 0xffff)
            return nb__err(NB_ERR_INVALID_ARG, "conv2d: padding must be in [0, 65535] (got [%lld, %lld])",
                           (long long)p->padding[0], (long long)p->padding[1]);
        if (p->dilation[i] < 1 || p->dilation[i] > 0xffff)
            return nb__err(NB_ERR_INVALID_ARG, "conv2d: dilation must be in [1, 65535] (got [%lld, %lld])",
                           (long long)p->dilation[0], (long long)p->dilation[1]);
    }
    if (p->groups < 1 || p->groups > INT32_MAX)
        return nb__err(NB_ERR_INVALID_ARG, "conv2d: groups must be positive (got %lld)", (long long)p->groups);
    return NB_OK;
}

static nb_status check_tensors(const nb_tensor *x, const nb_tensor *w, const nb_tensor *b, const nb_conv2d_params *p)
{
    const nb_tensor *in[3] = {x, w, b};
    NB_TRY(nb__check_inputs("conv2d", in, b ? 3 : 2));
    if (x->dtype != NB_FLOAT32 && x->dtype != NB_FLOAT64)
        return nb__err(NB_ERR_DTYPE, "conv2d: dtype %s is not supported (float32/float64 only)",
                       nb_dtype_name(x->dtype));
    if (w->dtype != x->dtype || (b && b->dtype != x->dtype))
        return nb__err(NB_ERR_DTYPE, "conv2d: dtypes differ (input %s, weight %s%s%s)", nb_dtype_name(x->dtype),
                       nb_dtype_name(w->dtype), b ? ", bias " : "", b ? nb_dtype_name(b->dtype) : "");
    if (x->ndim != 4)
        return nb__err(NB_ERR_SHAPE, "conv2d: expected a 3-D or 4-D input (got %s)", SHAPE(x));
    if (w->ndim != 4) return nb__err(NB_ERR_SHAPE, "conv2d: expected a 4-D weight (got %s)", SHAPE(w));
    if (w->shape[0] % p->groups)
        return nb__err(NB_ERR_SHAPE, "conv2d: groups %lld does not divide the %lld output channels (weight %s)",
                       (long long)p->groups, (long long)w->shape[0], SHAPE(w));
    if (x->shape[1] != w->shape[1] * p->groups)
        return nb__err(NB_ERR_SHAPE, "conv2d: input has %lld channels but weight expects %lld (weight %s, groups %lld)",
                       (long long)x->shape[1], (long long)(w->shape[1] * p->groups), SHAPE(w),
                       (long long)p->groups);
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))
        return nb__err(NB_ERR_SHAPE, "conv2d: bias %s does not match the %lld output channels", SHAPE(b),
                       (long long)w->shape[0]);
    return NB_OK;
}

/* The output's [N, O, OH, OW]; an error when the (dilated) kernel exceeds the padded input. */
static nb_status out_shape(const nb_tensor *x, const nb_tensor *w, const nb_conv2d_params *p, int64_t *shape)
{
    shape[0] = x->shape[0];
    shape[1] = w->shape[0];
    for (int i = 0; i < 2; i++) {
        int64_t padded = x->shape[2 + i] + 2 * p->padding[i], span = p->dilation[i] * (w->shape[2 + i] - 1) + 1;
        if (span > padded || w->shape[2 + i] < 1)
            return nb__err(NB_ERR_SHAPE, "conv2d: kernel size %lld (dilated %lld) is larger than the padded input "
                           "size %lld (input %s, weight %s)", (long long)w->shape[2 + i], (long long)span,
                           (long long)padded, SHAPE(x), SHAPE(w));
        shape[2 + i] = (padded - span) / p->stride[i] + 1;
    }
    return NB_OK;
}

static int64_t pack(int64_t a, int64_t b, int64_t c, int64_t d)
{
    return a | (b << 16) | (c << 32) | ((int64_t)((uint64_t)d << 48));
}

/* Validated dense 4-D operands (x contiguous or channels-last, the result then laid out as x):
 * runs the kernel and records the node. Caller-owned result. */
static nb_tensor *conv_run(const nb_tensor *x, const nb_tensor *w, const nb_tensor *b, const nb_conv2d_params *p,
                           const nb_tensor *const *orig)
{
    int64_t shape[4];
    if (out_shape(x, w, p, shape) != NB_OK) return NULL;
    nb_tensor *out = nb__tensor_new_format("conv2d", shape, 4, x->dtype, x->storage->device, nb__is_channels_last(x));
    if (!out) return NULL;
    nb_kargs k = {.out = out, .in = {x, w, b}, .flag = p->relu};
    k.i0 = pack(p->stride[0], p->stride[1], p->padding[0], p->padding[1]);
    k.i1 = p->dilation[0] | (p->dilation[1] << 16) | (p->groups << 32);
    nb_status st = nb__dispatch(NB_OP_CONV2D, &k);
    nb_node *node = NULL;
    if (st == NB_OK) {
        const nb_tensor *save[3] = {x, w, out};
        node = nb__record(NB_OP_CONV2D, out, orig, b ? 3 : 2, save, p->relu ? 3 : 2, &st);
    }
    if (st != NB_OK) {
        nb__release(out);
        return NULL;
    }
    if (node) node->i0 = k.i0, node->i1 = k.i1, node->flag = p->relu;
    return out;
}

nb_tensor *nb_conv2d(const nb_tensor *x, const nb_tensor *weight, const nb_tensor *bias, const nb_conv2d_params *p)
{
    nb_conv2d_params def = nb_conv2d_params_default();
    if (!p) p = &def;
    if (!x || !weight) return nb__err_null(NB_ERR_INVALID_ARG, "conv2d: input and weight must not be NULL");
    if (check_params(p) != NB_OK) return NULL;
    bool batched = x->ndim != 3;
    nb_scope *s = nb_scope_begin();
    if (!s) return NULL;
    nb_tensor *x4 = batched ? (nb_tensor *)x : nb_unsqueeze(x, 0);
    nb_tensor *out = NULL;
    if (x4 && check_tensors(x4, weight, bias, p) == NB_OK) {
        /* a channels-last input stays so on the CPU (and so does the result); on CUDA it is
         * made contiguous */
        bool cl = nb__keeps_channels_last(x4);
        nb_tensor *xc = cl ? nb__track(nb_tensor_retain(x4)) : nb_contiguous(x4);
        nb_tensor *wc = nb_contiguous(weight), *bc = bias ? nb_contiguous(bias) : NULL;
        const nb_tensor *orig[3] = {xc, wc, bc};
        if (xc && wc && (bc || !bias)) out = conv_run(xc, wc, bc, p, orig);
    }
    nb_tensor *r = out ? nb__track(out) : NULL;
    if (r && !batched) r = nb_squeeze_dim(r, 0);
    return nb_scope_end_keep(s, r);
}
