/* batch_norm's entry point: one BATCH_NORM kernel call (statistics and normalisation), a node
 * saving x (0), weight (1) and the [3, C] statistics used (2; mean, biased var, and the weight or
 * 1, which the kernel writes for the backward), eps in s0, training in flag, whether there is a
 * weight in i0. In training the running statistics are then updated in place by a second
 * BATCH_NORM call (i0 = 1: one small kernel for both), outside autograd. On the CPU a
 * channels-last x goes to the kernel as it is and the output is channels-last too; any other x
 * is made contiguous. nb_batch_norm_relu on the CPU is the same with the kernel's ReLU flag (i1),
 * elsewhere batch_norm then relu; nb_batch_norm_add_relu on the CPU also passes the residual
 * (in[3], laid out as x; the node's fourth input and saved tensor), elsewhere, or when the
 * residual's shape is not x's, it is batch_norm, add and relu; nb_batch_norm_add is the same
 * without the ReLU (the node's i1 clear: the residual's gradient is the upstream one, and the
 * residual is not saved). Rule in src/autograd/rules_nn.c. */
#include <string.h>

#include "autograd/autograd_impl.h"
#include "nabla/nn.h"

#define SHAPE(t) nb__shape_str((t)->shape, (t)->ndim, (char[NB_SHAPE_STR_MAX]){0})

static nb_status check_param(const char *op, const nb_tensor *x, const nb_tensor *t, const char *name)
{
    if (!t) return NB_OK;
    if (t->dtype != x->dtype)
        return nb__err(NB_ERR_DTYPE, "%s: %s has dtype %s but input has %s", op, name, nb_dtype_name(t->dtype),
                       nb_dtype_name(x->dtype));
    if (t->ndim != 1 || t->shape[0] != x->shape[1])
        return nb__err(NB_ERR_SHAPE, "%s: %s %s does not match the input's %lld channels (input %s)", op, name,
                       SHAPE(t), (long long)x->shape[1], SHAPE(x));
    return NB_OK;
}

/* The checks of every batch-norm entry point; op names it in the messages. r: the residual of
 * the fused add (x's shape and dtype, checked by the caller) or NULL. */
static nb_status check_args(const char *op, const nb_tensor *x, const nb_tensor *r, const nb_tensor *rm,
                            const nb_tensor *rv, const nb_tensor *w, const nb_tensor *b, bool training)
{
    if (!x) return nb__err(NB_ERR_INVALID_ARG, "%s: input must not be NULL", op);
    const nb_tensor *all[6] = {x};
    int n = 1;
    const nb_tensor *opt[5] = {rm, rv, w, b, r};
    for (int i = 0; i < 5; i++)
        if (opt[i]) all[n++] = opt[i];
    NB_TRY(nb__check_inputs(op, all, n));
    if (x->dtype != NB_FLOAT32 && x->dtype != NB_FLOAT64)
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported (float32/float64 only)", op,
                       nb_dtype_name(x->dtype));
    if (x->ndim < 2) return nb__err(NB_ERR_SHAPE, "%s: expected an input of 2 or more dims (got %s)", op, SHAPE(x));
    NB_TRY(check_param(op, x, rm, "running_mean"));
    NB_TRY(check_param(op, x, rv, "running_var"));
    NB_TRY(check_param(op, x, w, "weight"));
    NB_TRY(check_param(op, x, b, "bias"));
    if (!training && (!rm || !rv))
        return nb__err(NB_ERR_INVALID_ARG, "%s: evaluation needs running_mean and running_var", op);
    if (training && (!rm) != (!rv))
        return nb__err(NB_ERR_INVALID_ARG, "%s: give both running_mean and running_var, or neither", op);
    if (training && nb__numel(x->shape, x->ndim) / x->shape[1] <= 1)
        return nb__err(NB_ERR_SHAPE, "%s: expected more than 1 value per channel when training (input %s)", op,
                       SHAPE(x));
    return NB_OK;
}

/* rm = (1 - m) rm + m mean, rv = (1 - m) rv + m count / (count - 1) var (the unbiased variance,
 * as PyTorch's), in one kernel call: not an autograd op, so the versions are bumped here. */
static nb_status update_running(nb_tensor *rm, nb_tensor *rv, const nb_tensor *stats, double m, double count)
{
    nb_kargs k = {.out = rm, .out2 = rv, .in = {stats}, .s0 = m, .s1 = m * (count / (count - 1)), .i0 = 1};
    NB_TRY(nb__dispatch(NB_OP_BATCH_NORM, &k));
    nb__bump_version(rm);
    nb__bump_version(rv);
    return NB_OK;
}

/* Validated operands (x contiguous or, on the CPU, channels-last; the others contiguous; r, the
 * residual or NULL, laid out as x): the kernel and the node. stats [3, C] is filled (rows 0 and
 * 1 when training, else they hold the running stats; row 2 always); with relu (CPU only) it is
 * [5, C], rows 3 and 4 the forward's coefficients, which the backward recomputes the ReLU's mask
 * from (with x and r). Caller-owned output, laid out as x. */
static nb_tensor *bn_run(const nb_tensor *x, const nb_tensor *w, const nb_tensor *b, const nb_tensor *r,
                         nb_tensor *stats, bool training, double eps, bool relu)
{
    nb_tensor *out = nb__tensor_new_as("batch_norm", x->shape, x->ndim, x->dtype, x->storage->device, &x, 1);
    if (!out) return NULL;
    nb_kargs k = {.out = out, .out2 = stats, .in = {x, w, b, r}, .s0 = eps, .flag = training, .i1 = relu};
    nb_status st = nb__dispatch(NB_OP_BATCH_NORM, &k);
    nb_node *node = NULL;
    if (st == NB_OK) {
        const nb_tensor *in[4] = {x, w, b, r}, *save[4] = {x, w, stats, r};
        node = nb__record(NB_OP_BATCH_NORM, out, in, r ? 4 : 3, save, r && relu ? 4 : 3, &st);
    }
    if (st != NB_OK) {
        nb__release(out);
        return NULL;
    }
    if (node) node->s0 = eps, node->flag = training, node->i0 = w != NULL, node->i1 = relu;
    return out;
}

static nb_tensor *batch_norm(const nb_tensor *x, const nb_tensor *residual, nb_tensor *running_mean,
                             nb_tensor *running_var, const nb_tensor *weight, const nb_tensor *bias, bool training,
                             double momentum, double eps, bool relu)
{
    const char *op = residual ? (relu ? "batch_norm_add_relu" : "batch_norm_add") : relu ? "batch_norm_relu"
                                                                                        : "batch_norm";
    if (check_args(op, x, residual, running_mean, running_var, weight, bias, training) != NB_OK) return NULL;
    int64_t c = x->shape[1];
    nb_scope *s = nb_scope_begin();
    if (!s) return NULL;
    bool cl = nb__keeps_channels_last(x);
    nb_tensor *xc = cl ? nb_contiguous_format(x, NB_CHANNELS_LAST) : nb_contiguous(x);
    nb_tensor *wc = weight ? nb_contiguous(weight) : NULL;
    nb_tensor *bc = bias ? nb_contiguous(bias) : NULL, *y = NULL;
    nb_tensor *rc = !residual ? NULL : cl ? nb_contiguous_format(residual, NB_CHANNELS_LAST) : nb_contiguous(residual);
    nb_tensor_params tp = nb_tensor_params_default();
    tp.dtype = x->dtype;
    tp.device = x->storage->device;
    nb_tensor *stats = nb_empty((int64_t[]){relu ? 5 : 3, c}, 2, &tp);
    bool ok = xc && (wc || !weight) && (bc || !bias) && (rc || !residual) && stats;
    if (ok && !training) {
        nb_tensor *mean = nb_select(stats, 0, 0), *var = mean ? nb_select(stats, 0, 1) : NULL;
        nb_kargs k0 = {.out = mean, .in = {running_mean}}, k1 = {.out = var, .in = {running_var}};
        ok = var && nb__dispatch(NB_OP_COPY, &k0) == NB_OK && nb__dispatch(NB_OP_COPY, &k1) == NB_OK;
    }
    nb_tensor *out = ok ? bn_run(xc, wc, bc, rc, stats, training, eps, relu) : NULL;
    if (out) y = nb__track(out);
    if (y && training && running_mean) {
        double count = (double)(nb__numel(x->shape, x->ndim) / c);
        if (update_running(running_mean, running_var, stats, momentum, count) != NB_OK) y = NULL;
    }
    return nb_scope_end_keep(s, y);
}

nb_tensor *nb_batch_norm(const nb_tensor *x, nb_tensor *running_mean, nb_tensor *running_var, const nb_tensor *weight,
                         const nb_tensor *bias, bool training, double momentum, double eps)
{
    return batch_norm(x, NULL, running_mean, running_var, weight, bias, training, momentum, eps, false);
}

nb_tensor *nb_batch_norm_relu(const nb_tensor *x, nb_tensor *running_mean, nb_tensor *running_var,
                              const nb_tensor *weight, const nb_tensor *bias, bool training, double momentum,
                              double eps)
{
    if (x && x->storage->device.type == NB_DEVICE_CPU)
        return batch_norm(x, NULL, running_mean, running_var, weight, bias, training, momentum, eps, true);
    nb_scope *s = nb_scope_begin();
    if (!s) return NULL;
    nb_tensor *y = nb_batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps);
    return nb_scope_end_keep(s, y ? nb_relu(y) : NULL);
}

/* nb_batch_norm_add_relu (relu) and nb_batch_norm_add. */
static nb_tensor *batch_norm_add(const nb_tensor *x, const nb_tensor *residual, nb_tensor *running_mean,
                                 nb_tensor *running_var, const nb_tensor *weight, const nb_tensor *bias, bool training,
                                 double momentum, double eps, bool relu)
{
    if (!residual)
        return nb__err_null(NB_ERR_INVALID_ARG, "%s: residual must not be NULL",
                            relu ? "batch_norm_add_relu" : "batch_norm_add");
    /* the fused kernel takes a residual of x's shape and dtype (another device: its check's error) */
    bool fused = x && x->storage->device.type == NB_DEVICE_CPU && residual->ndim == x->ndim &&
                 residual->dtype == x->dtype &&
                 memcmp(residual->shape, x->shape, (size_t)x->ndim * sizeof(int64_t)) == 0;
    if (fused)
        return batch_norm(x, residual, running_mean, running_var, weight, bias, training, momentum, eps, relu);
    nb_scope *s = nb_scope_begin();
    if (!s) return NULL;
    nb_tensor *y = nb_batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps);
    y = y ? nb_add(y, residual) : NULL;
    return nb_scope_end_keep(s, y && relu ? nb_relu(y) : y);
}

nb_tensor *nb_batch_norm_add_relu(const nb_tensor *x, const nb_tensor *residual, nb_tensor *running_mean,
                                  nb_tensor *running_var, const nb_tensor *weight, const nb_tensor *bias, bool training,
                                  double momentum, double eps)
{
    return batch_norm_add(x, residual, running_mean, running_var, weight, bias, training, momentum, eps, true);
}

nb_tensor *nb_batch_norm_add(const nb_tensor *x, const nb_tensor *residual, nb_tensor *running_mean,
                             nb_tensor *running_var, const nb_tensor *weight, const nb_tensor *bias, bool training,
                             double momentum, double eps)
{
    return batch_norm_add(x, residual, running_mean, running_var, weight, bias, training, momentum, eps, false);
}
