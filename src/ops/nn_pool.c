/* Pooling entry points: max_pool2d (and max_pool2d_relu, ReLU fused), avg_pool2d,
 * adaptive_avg_pool2d. Each validates, makes the input a contiguous 4-D tensor (or, for a 4-D
 * channels-last input on the CPU, keeps it as it is and makes the output and max's indices
 * channels-last too), runs its pool kernel and records a node (max: saved indices; avg:
 * parameters in i0/i1/flag as ops.def packs them; every pool: POOL_CL in i1 when channels-last,
 * for the rule to keep the gradient's layout). Rules in src/autograd/rules_nn.c.
 *
 * Max pooling's indices are int64 plane indices (h * W + w, PyTorch's), except on channels-last
 * inputs with windows of fewer than 255 taps, where they are uint8 taps within the window (ops.def,
 * MAX_POOL2D): a ninth of the bytes to write and read back. */
#include <string.h>

#include "autograd/autograd_impl.h"
#include "nabla/nn.h"

#define SHAPE(t) nb__shape_str((t)->shape, (t)->ndim, (char[NB_SHAPE_STR_MAX]){0})

typedef struct pool_args {
    const char *op;
    int64_t k[2], s[2], p[2];
    bool ceil_mode, count_include_pad, relu;
} pool_args;

static nb_status check_input(const char *op, const nb_tensor *x)
{
    if (!x) return nb__err(NB_ERR_INVALID_ARG, "%s: input must not be NULL", op);
    NB_TRY(nb__check_inputs(op, &x, 1));
    if (x->dtype != NB_FLOAT32 && x->dtype != NB_FLOAT64)
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported (float32/float64 only)", op,
                       nb_dtype_name(x->dtype));
    if (x->ndim != 3 && x->ndim != 4)
        return nb__err(NB_ERR_SHAPE, "%s: expected a 3-D or 4-D input (got %s)", op, SHAPE(x));
    for (int d = 0; d < x->ndim; d++)
        if (x->shape[d] == 0) return nb__err(NB_ERR_SHAPE, "%s: input %s has a zero-size dim", op, SHAPE(x));
    return NB_OK;
}

/* Fills a's parameters from the caller's (stride NULL = kernel, padding NULL = 0) and checks them. */
static nb_status pool_params(pool_args *a, const int64_t *kernel, const int64_t *stride, const int64_t *padding)
{
    if (!kernel) return nb__err(NB_ERR_INVALID_ARG, "%s: kernel must not be NULL", a->op);
    for (int i = 0; i < 2; i++) {
        a->k[i] = kernel[i];
        a->s[i] = stride ? stride[i] : kernel[i];
        a->p[i] = padding ? padding[i] : 0;
    }
    for (int i = 0; i < 2; i++) {
        if (a->k[i] < 1 || a->k[i] > 0xffff)
            return nb__err(NB_ERR_INVALID_ARG, "%s: kernel size must be in [1, 65535] (got [%lld, %lld])", a->op,
                           (long long)a->k[0], (long long)a->k[1]);
        if (a->s[i] < 1 || a->s[i] > 0xffff)
            return nb__err(NB_ERR_INVALID_ARG, "%s: stride must be in [1, 65535] (got [%lld, %lld])", a->op,
                           (long long)a->s[0], (long long)a->s[1]);
        if (a->p[i] < 0 || a->p[i] > a->k[i] / 2)
            return nb__err(NB_ERR_INVALID_ARG, "%s: padding must be in [0, kernel / 2] (got padding [%lld, %lld], "
                           "kernel [%lld, %lld])", a->op, (long long)a->p[0], (long long)a->p[1],
                           (long long)a->k[0], (long long)a->k[1]);
    }
    return NB_OK;
}

/* PyTorch's pooling_output_shape for one dim. */
static int64_t pooled_size(int64_t in, int64_t k, int64_t s, int64_t p, bool ceil_mode)
{
    int64_t num = in + 2 * p - (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
    int64_t out = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
    if (ceil_mode && (out - 1) * s >= in + p) out--;
    return out;
}

/* 4-D x, contiguous or channels-last (cl): the output (and max's indices) in x's layout, the
 * kernel, the node. Caller-owned. */
static nb_tensor *pool_run(nb_op op, const pool_args *a, const nb_tensor *x, bool cl)
{
    int64_t shape[4] = {x->shape[0], x->shape[1], 0, 0};
    for (int i = 0; i < 2; i++) {
        shape[2 + i] = pooled_size(x->shape[2 + i], a->k[i], a->s[i], a->p[i], a->ceil_mode);
        if (shape[2 + i] < 1)
            return nb__err_null(NB_ERR_SHAPE, "%s: kernel [%lld, %lld] with padding [%lld, %lld] is larger than the "
                                "padded input (input %s)", a->op, (long long)a->k[0], (long long)a->k[1],
                                (long long)a->p[0], (long long)a->p[1], SHAPE(x));
    }
    nb_device dev = x->storage->device;
    nb_tensor *out = nb__tensor_new_format(a->op, shape, 4, x->dtype, dev, cl);
    nb_dtype idt = cl && a->k[0] * a->k[1] < 255 ? NB_UINT8 : NB_INT64;
    nb_tensor *idx = op == NB_OP_MAX_POOL2D ? nb__tensor_new_format(a->op, shape, 4, idt, dev, cl) : NULL;
    nb_status st = out && (idx || op != NB_OP_MAX_POOL2D) ? NB_OK : nb_last_status();
    nb_kargs k = {.out = out, .out2 = idx, .in = {x}, .flag = op == NB_OP_MAX_POOL2D ? a->relu : a->count_include_pad};
    k.i0 = a->k[0] | (a->k[1] << 16) | (a->s[0] << 32) | (a->s[1] << 48);
    k.i1 = a->p[0] | (a->p[1] << 16);
    if (st == NB_OK) st = nb__dispatch(op, &k);
    nb_node *node = NULL;
    if (st == NB_OK) {
        const nb_tensor *save[1] = {idx};
        node = nb__record(op, out, &x, 1, save, idx ? 1 : 0, &st);
    }
    nb__release(idx);
    if (st != NB_OK) {
        nb__release(out);
        return NULL;
    }
    if (node) node->i0 = k.i0, node->i1 = k.i1 | (cl ? POOL_CL : 0), node->flag = k.flag;
    return out;
}

/* The shared frame: 3-D inputs gain and lose a batch dim, inputs are made contiguous unless
 * kept channels-last. */
static nb_tensor *pool_entry(nb_op op, const pool_args *a, const nb_tensor *x)
{
    nb_scope *s = nb_scope_begin();
    if (!s) return NULL;
    bool cl = nb__keeps_channels_last(x);
    nb_tensor *x4 = x->ndim == 4 ? (nb_tensor *)x : nb_unsqueeze(x, 0);
    nb_tensor *xc = x4 && !cl ? nb_contiguous(x4) : x4;
    nb_tensor *out = xc ? pool_run(op, a, xc, cl) : NULL;
    nb_tensor *r = out ? nb__track(out) : NULL;
    if (r && x->ndim == 3) r = nb_squeeze_dim(r, 0);
    return nb_scope_end_keep(s, r);
}

nb_tensor *nb_max_pool2d(const nb_tensor *x, const int64_t kernel[2], const int64_t *stride, const int64_t *padding,
                         bool ceil_mode)
{
    pool_args a = {.op = "max_pool2d", .ceil_mode = ceil_mode};
    if (check_input(a.op, x) != NB_OK || pool_params(&a, kernel, stride, padding) != NB_OK) return NULL;
    return pool_entry(NB_OP_MAX_POOL2D, &a, x);
}

/* The CPU's kernels apply the ReLU as they store each maximum, and save no index (-1, or 255 for
 * uint8 taps) where it gives no gradient (a maximum <= 0, as relu's backward; a NaN passes);
 * elsewhere max_pool2d and relu run as two ops. */
nb_tensor *nb_max_pool2d_relu(const nb_tensor *x, const int64_t kernel[2], const int64_t *stride,
                              const int64_t *padding, bool ceil_mode)
{
    pool_args a = {.op = "max_pool2d_relu", .ceil_mode = ceil_mode, .relu = true};
    if (check_input(a.op, x) != NB_OK || pool_params(&a, kernel, stride, padding) != NB_OK) return NULL;
    if (x->storage->device.type != NB_DEVICE_CPU) {
        nb_scope *s = nb_scope_begin();
        if (!s) return NULL;
        nb_tensor *y = nb_max_pool2d(x, kernel, stride, padding, ceil_mode);
        return nb_scope_end_keep(s, y ? nb_relu(y) : NULL);
    }
    return pool_entry(NB_OP_MAX_POOL2D, &a, x);
}

nb_tensor *nb_avg_pool2d(const nb_tensor *x, const int64_t kernel[2], const int64_t *stride, const int64_t *padding,
                         bool ceil_mode, bool count_include_pad)
{
    pool_args a = {.op = "avg_pool2d", .ceil_mode = ceil_mode, .count_include_pad = count_include_pad};
    if (check_input(a.op, x) != NB_OK || pool_params(&a, kernel, stride, padding) != NB_OK) return NULL;
    return pool_entry(NB_OP_AVG_POOL2D, &a, x);
}

static nb_tensor *adaptive_run(const nb_tensor *x, int64_t oh, int64_t ow, bool cl)
{
    int64_t shape[4] = {x->shape[0], x->shape[1], oh, ow};
    nb_tensor *out = nb__tensor_new_format("adaptive_avg_pool2d", shape, 4, x->dtype, x->storage->device, cl);
    if (!out) return NULL;
    nb_kargs k = {.out = out, .in = {x}};
    nb_status st = nb__dispatch(NB_OP_ADAPTIVE_AVG_POOL2D, &k);
    nb_node *node = st == NB_OK ? nb__record(NB_OP_ADAPTIVE_AVG_POOL2D, out, &x, 1, NULL, 0, &st) : NULL;
    if (node && cl) node->i1 = POOL_CL;
    if (st != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return out;
}

nb_tensor *nb_adaptive_avg_pool2d(const nb_tensor *x, int64_t out_h, int64_t out_w)
{
    const char *op = "adaptive_avg_pool2d";
    if (check_input(op, x) != NB_OK) return NULL;
    if (out_h < 1 || out_w < 1)
        return nb__err_null(NB_ERR_INVALID_ARG, "%s: output size must be positive (got [%lld, %lld])", op,
                            (long long)out_h, (long long)out_w);
    nb_scope *s = nb_scope_begin();
    if (!s) return NULL;
    bool cl = nb__keeps_channels_last(x);
    nb_tensor *x4 = x->ndim == 4 ? (nb_tensor *)x : nb_unsqueeze(x, 0);
    nb_tensor *xc = x4 && !cl ? nb_contiguous(x4) : x4;
    nb_tensor *out = xc ? adaptive_run(xc, out_h, out_w, cl) : NULL;
    nb_tensor *r = out ? nb__track(out) : NULL;
    if (r && x->ndim == 3) r = nb_squeeze_dim(r, 0);
    return nb_scope_end_keep(s, r);
}
