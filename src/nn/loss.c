/* Loss functions (nabla/loss.h), composed from differentiable ops so that autograd comes from
 * their rules: cross entropy of [N, C] logits on the CPU without label smoothing is one fused op
 * (CROSS_ENTROPY: one pass over the logits forward, one backward); otherwise it is log_softmax +
 * gather (never a one-hot of N x C); label smoothing adds one sum over the class dim.
 *
 * The class-index targets become a safe index (ignored -> 0) and an ignore mask in one of two ways:
 * by default in one host pass over the N targets, which also checks their range with the loss's
 * own message; or, while the device captures a graph (where a read back is impossible) or when a
 * test asks (nn/loss_impl.h), by ops on the targets' device, which read nothing back: the gather of
 * the safe index then does the range check, and the mean divides by a count tensor. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "core/dispatch_impl.h"
#include "core/error_impl.h"
#include "core/tensor_impl.h"
#include "nn/loss_impl.h"
#include "nabla/autograd.h"
#include "nabla/loss.h"
#include "nabla/ops.h"

nb_cross_entropy_params nb_cross_entropy_params_default(void)
{
    return (nb_cross_entropy_params){.weight = NULL, .ignore_index = -100, .reduction = NB_REDUCE_MEAN,
                                     .label_smoothing = 0.0};
}

nb_nll_loss_params nb_nll_loss_params_default(void)
{
    return (nb_nll_loss_params){.weight = NULL, .ignore_index = -100, .reduction = NB_REDUCE_MEAN};
}

static nb_status check_reduction(const char *op, nb_reduction r)
{
    if (r != NB_REDUCE_NONE && r != NB_REDUCE_MEAN && r != NB_REDUCE_SUM)
        return nb__err(NB_ERR_INVALID_ARG, "%s: unknown reduction %d", op, (int)r);
    return NB_OK;
}

static nb_status check_float(const char *op, const char *what, const nb_tensor *t)
{
    if (!nb_dtype_is_floating(t->dtype))
        return nb__err(NB_ERR_DTYPE, "%s: %s must be a floating tensor (got %s)", op, what, nb_dtype_name(t->dtype));
    return NB_OK;
}

/* ---- class-index losses ---------------------------------------------------------------------- */

/* What nll_core needs: the inputs and options of nll_loss / cross_entropy. */
typedef struct class_loss {
    const char *op;
    const nb_tensor *lp, *target, *weight;
    int64_t ignore_index;
    nb_reduction reduction;
    double smoothing;
} class_loss;

/* Shapes: input [C] with a 0-dim target, or [N, C, d...] with a target [N, d...]. */
static nb_status check_class_shapes(const class_loss *c)
{
    const nb_tensor *x = c->lp, *t = c->target;
    char a[NB_SHAPE_STR_MAX], b[NB_SHAPE_STR_MAX];
    bool ok = x->ndim == 1 ? t->ndim == 0 : x->ndim >= 2 && t->ndim == x->ndim - 1;
    for (int i = 0; ok && x->ndim >= 2 && i < t->ndim; i++) ok = t->shape[i] == x->shape[i == 0 ? 0 : i + 1];
    if (x->ndim == 0 || !ok)
        return nb__err(NB_ERR_SHAPE, "%s: target of shape %s does not fit input of shape %s (expected [C] with a 0-dim "
                       "target, or [N, C, d1, ...] with [N, d1, ...])", c->op, nb__shape_str(t->shape, t->ndim, a),
                       nb__shape_str(x->shape, x->ndim, b));
    if (t->dtype != NB_INT64 && t->dtype != NB_INT32)
        return nb__err(NB_ERR_DTYPE, "%s: target must hold int64 class indices (got %s)", c->op,
                       nb_dtype_name(t->dtype));
    int64_t ncls = x->shape[x->ndim == 1 ? 0 : 1];
    if (c->weight) {
        if (c->weight->ndim != 1 || c->weight->shape[0] != ncls)
            return nb__err(NB_ERR_SHAPE, "%s: weight of shape %s must be [%lld], one per class", c->op,
                           nb__shape_str(c->weight->shape, c->weight->ndim, a), (long long)ncls);
        NB_TRY(check_float(c->op, "weight", c->weight));
    }
    return NB_OK;
}

/* One host pass over the targets: fills safe (ignored -> 0) and keep (0 where ignored), checks
 * the range, and counts the kept ones. */
static nb_status scan_targets(const class_loss *c, int64_t ncls, int64_t *safe, bool *keep, int64_t *nkeep)
{
    int64_t n = nb__numel(c->target->shape, c->target->ndim);
    if (c->target->dtype == NB_INT32) {
        int32_t *t32 = malloc((size_t)(n ? n : 1) * sizeof *t32);
        if (!t32) return nb__err(NB_ERR_OOM, "%s: out of memory for %lld targets", c->op, (long long)n);
        nb_status st = nb_tensor_read(c->target, t32, (size_t)n * sizeof *t32);
        for (int64_t i = 0; st == NB_OK && i < n; i++) safe[i] = t32[i];
        free(t32);
        NB_TRY(st);
    } else {
        NB_TRY(nb_tensor_read(c->target, safe, (size_t)n * sizeof *safe));
    }
    *nkeep = 0;
    for (int64_t i = 0; i < n; i++) {
        keep[i] = safe[i] != c->ignore_index;
        if (!keep[i]) {
            safe[i] = 0;
            continue;
        }
        if (safe[i] < 0 || safe[i] >= ncls)
            return nb__err(NB_ERR_INVALID_ARG, "%s: target %lld is out of bounds for %lld classes", c->op,
                           (long long)safe[i], (long long)ncls);
        (*nkeep)++;
    }
    return NB_OK;
}

/* The targets as nll_from_safe reads them: safe, the class indices [N, d...] as int64 with the
 * ignored ones 0; keep, a bool mask of the non-ignored ones (from host_targets NULL when none is
 * ignored); and the number of kept targets, as count (a 0-dim tensor in the input's dtype, from
 * device_targets for a mean without weights) or else as nkeep (from host_targets). */
typedef struct safe_targets {
    nb_tensor *safe, *keep, *count;
    int64_t nkeep;
} safe_targets;

/* The host path: scan_targets over the targets read back, then safe and keep uploaded to dev.
 * Runs inside the caller's scope. */
static nb_status host_targets(const class_loss *c, nb_device dev, safe_targets *tg)
{
    int64_t ncls = c->lp->shape[c->lp->ndim == 1 ? 0 : 1];
    int64_t n = nb__numel(c->target->shape, c->target->ndim);
    int64_t *safe = malloc((size_t)(n ? n : 1) * sizeof *safe);
    bool *keep = malloc((size_t)(n ? n : 1) * sizeof *keep);
    nb_status st = safe && keep ? scan_targets(c, ncls, safe, keep, &tg->nkeep)
                                : nb__err(NB_ERR_OOM, "%s: out of memory for %lld targets", c->op, (long long)n);
    if (st == NB_OK) {
        int64_t tshape[NB_MAX_DIMS + 1] = {1};
        int tnd = c->target->ndim ? c->target->ndim : 1; /* a 0-dim target counts as [1] */
        if (c->target->ndim) memcpy(tshape, c->target->shape, (size_t)tnd * sizeof *tshape);
        tg->safe = nb_tensor_from_data(safe, tshape, tnd, &(nb_tensor_params){.dtype = NB_INT64, .device = dev});
        if (tg->safe && tg->nkeep != n)
            tg->keep = nb_tensor_from_data(keep, tshape, tnd, &(nb_tensor_params){.dtype = NB_BOOL, .device = dev});
        if (!tg->safe || (tg->nkeep != n && !tg->keep)) st = nb_last_status();
    }
    free(safe);
    free(keep);
    return st;
}

/* v as a 0-dim int64 tensor on dev, exactly: FILL takes a double, so beyond 2^53 v is built as
 * hi * 2^32 + lo (|hi| < 2^31, |lo| < 2^32: no overflow, even for INT64_MIN and INT64_MAX). */
static nb_tensor *int64_scalar(int64_t v, nb_device dev)
{
    const nb_tensor_params p = {.dtype = NB_INT64, .device = dev};
    const int64_t exact = INT64_C(1) << 53, base = INT64_C(1) << 32;
    if (v >= -exact && v <= exact) return nb_scalar_tensor((double)v, &p);
    nb_tensor *hi = nb_scalar_tensor((double)(v / base), &p), *b = nb_scalar_tensor((double)base, &p);
    nb_tensor *lo = nb_scalar_tensor((double)(v % base), &p);
    nb_tensor *hb = hi && b ? nb_mul(hi, b) : NULL;
    return hb && lo ? nb_add(hb, lo) : NULL;
}

/* The device path: safe, keep and (for a mean without weights) count by ops on the targets'
 * device; nothing is read back, so the range is not checked here: the gather (and index_select)
 * of safe does it. keep is always made (whether any target is ignored is not known on the host).
 * Runs inside the caller's scope. */
static nb_status device_targets(const class_loss *c, safe_targets *tg)
{
    nb_device dev = c->target->storage->device;
    nb_tensor *t = c->target->ndim ? (nb_tensor *)c->target : nb_unsqueeze(c->target, 0); /* 0-dim: [1] */
    if (t) t = nb_to_dtype(t, NB_INT64); /* int32 targets compare with ignore_index in int64 */
    nb_tensor *ignore = t ? int64_scalar(c->ignore_index, dev) : NULL;
    nb_tensor *zero = ignore ? nb_scalar_tensor(0.0, &(nb_tensor_params){.dtype = NB_INT64, .device = dev}) : NULL;
    tg->keep = zero ? nb_ne(t, ignore) : NULL;
    tg->safe = tg->keep ? nb_where(tg->keep, t, zero) : NULL;
    if (!tg->safe) return nb_last_status();
    if (c->reduction != NB_REDUCE_MEAN || c->weight) return NB_OK;
    nb_tensor *n = nb_sum(tg->keep, NULL, 0, false); /* int64 */
    tg->count = n ? nb_to_dtype(n, c->lp->dtype) : NULL;
    return tg->count ? NB_OK : nb_last_status();
}

/* The per-target weights w[target] (ignored targets read class 0: masked later), [N, d...]. */
static nb_tensor *target_weights(const nb_tensor *w, const nb_tensor *safe)
{
    nb_tensor *flat = nb_flatten(safe, 0, -1);
    nb_tensor *picked = flat ? nb_index_select(w, 0, flat) : NULL;
    return picked ? nb_reshape(picked, safe->shape, safe->ndim) : NULL;
}

/* Reduces per-element losses (ignored ones already 0): mean divides by denom, a tensor (the summed
 * weights of the kept targets, or tg's count of them), or else by tg's nkeep. */
static nb_tensor *reduce_loss(nb_tensor *per, nb_reduction r, const nb_tensor *denom, const safe_targets *tg)
{
    if (r == NB_REDUCE_NONE) return per;
    nb_tensor *s = nb_sum(per, NULL, 0, false);
    if (r == NB_REDUCE_SUM || !s) return s;
    if (!denom) denom = tg->count;
    return denom ? nb_div(s, denom) : nb_div_scalar(s, (double)tg->nkeep);
}

/* PyTorch's label smoothing term: -sum_c w_c lp[n, c, ...], zero where ignored, reduced like the
 * nll part (the weighted mean divides by the same summed target weights). */
static nb_tensor *smooth_term(const class_loss *c, const nb_tensor *lp, const nb_tensor *w, const safe_targets *tg,
                              const nb_tensor *zero, const nb_tensor *denom)
{
    int64_t one = 1;
    nb_tensor *prod = (nb_tensor *)lp;
    if (w) {
        int64_t shape[NB_MAX_DIMS];
        for (int i = 0; i < lp->ndim; i++) shape[i] = i == 1 ? lp->shape[1] : 1;
        nb_tensor *wv = nb_reshape(w, shape, lp->ndim);
        prod = wv ? nb_mul(lp, wv) : NULL;
    }
    nb_tensor *s = prod ? nb_sum(prod, &one, 1, false) : NULL;
    s = s ? nb_neg(s) : NULL;
    if (s && tg->keep) s = nb_where(tg->keep, s, zero);
    return s ? reduce_loss(s, c->reduction, denom, tg) : NULL;
}

/* The fused CROSS_ENTROPY op (kernel in the softmax family, rule in rules_rnn.c): per-row losses
 * logsumexp(x[n]) - x[n, t[n]] of logits x [N, C] with safe targets t [N], in one pass over x;
 * its backward is (softmax(x[n]) - onehot(t[n])) g[n], again one pass, from the saved row
 * logsumexps. With scale > 0 (the g[n] a mean or sum over the rows gives each row) and a graph
 * being recorded, the forward also writes the probabilities times scale, q, in the same pass,
 * and the node saves q in place of x. The backward then only subtracts scale at the targets, in
 * place, when every g[n] is scale: on the DLBench LSTM's [4096, 10000] logits that is one pass
 * over 164 MB fewer, and one exp per logit. When x is a linear layer's output, q gets a row N
 * more, its column sums: the layer's bias gradient less the targets' counts times scale.
 * Runs inside the caller's scope. */
static nb_tensor *ce_rows(const nb_tensor *logits, const nb_tensor *safe, double scale)
{
    nb_tensor *x = nb__is_contiguous(logits) ? (nb_tensor *)logits : nb_contiguous(logits);
    if (!x) return NULL;
    nb_device dev = x->storage->device;
    nb_tensor *out = nb__tensor_new(x->shape, 1, x->dtype, dev);
    nb_tensor *lse = out ? nb__tensor_new(x->shape, 1, x->dtype, dev) : NULL;
    nb_status st = lse ? NB_OK : nb_last_status();
    const nb_tensor *in = x;
    bool probs = st == NB_OK && scale > 0 && nb__needs_grad(&in, 1);
    bool sums = probs && nb__made_by_linear(x, x->shape[1], x->dtype);
    nb_tensor *q = NULL;
    if (probs) {
        q = nb__tensor_new_named("cross_entropy", (int64_t[]){x->shape[0] + sums, x->shape[1]}, 2, x->dtype, dev);
        if (!q) st = nb_last_status();
    }
    if (st == NB_OK) {
        nb_kargs k = {.out = out, .out2 = lse, .out3 = q, .in = {x, safe}, .s0 = scale, .i1 = sums};
        st = nb__dispatch(NB_OP_CROSS_ENTROPY, &k);
    }
    if (st == NB_OK) {
        const nb_tensor *save[3] = {probs ? q : x, lse, safe};
        nb_node *node = nb__record(NB_OP_CROSS_ENTROPY, out, &in, 1, save, 3, &st);
        if (node && probs) node->flag = true, node->s0 = scale, node->i1 = sums;
    }
    nb__release(q);
    nb__release(lse);
    if (st != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return nb__track(out);
}

/* The loss from log-probabilities lp [N, C, d...] (with `fused`: logits [N, C], smoothing 0) and
 * the targets tg. Runs inside the caller's scope. */
static nb_tensor *nll_from_safe(const class_loss *c, const nb_tensor *lp, const safe_targets *tg, bool fused)
{
    nb_tensor *zero = nb_scalar_tensor(0.0, &(nb_tensor_params){.dtype = lp->dtype, .device = lp->storage->device});
    nb_tensor *w = c->weight ? nb_detach(c->weight) : NULL;
    if (w && w->dtype != lp->dtype) w = nb_to_dtype(w, lp->dtype);
    if (!zero || (c->weight && !w)) return NULL;
    nb_tensor *per;
    if (fused) {
        /* the gradient each row's loss will get from the reduction, when all get the same */
        double scale = w || tg->keep || !tg->nkeep || c->reduction == NB_REDUCE_NONE ? 0
                       : c->reduction == NB_REDUCE_MEAN ? 1.0 / (double)tg->nkeep : 1.0;
        per = ce_rows(lp, tg->safe, scale);
    } else {
        nb_tensor *idx = nb_unsqueeze(tg->safe, 1);
        nb_tensor *picked = idx ? nb_gather(lp, 1, idx) : NULL;
        per = picked ? nb_neg(nb_squeeze_dim(picked, 1)) : NULL;
    }
    nb_tensor *wt = NULL, *denom = NULL;
    if (w && per) {
        wt = target_weights(w, tg->safe);
        per = wt ? nb_mul(per, wt) : NULL;
        if (wt && tg->keep) wt = nb_where(tg->keep, wt, zero);
        denom = wt ? nb_sum(wt, NULL, 0, false) : NULL;
        if (!denom) return NULL;
    }
    if (per && tg->keep) per = nb_where(tg->keep, per, zero);
    nb_tensor *loss = per ? reduce_loss(per, c->reduction, denom, tg) : NULL;
    if (!loss || c->smoothing == 0.0) return loss;
    nb_tensor *sm = smooth_term(c, lp, w, tg, zero, denom);
    double ncls = (double)lp->shape[1];
    nb_tensor *a = nb_mul_scalar(loss, 1.0 - c->smoothing);
    nb_tensor *b = sm ? nb_mul_scalar(sm, c->smoothing / ncls) : NULL;
    return a && b ? nb_add(a, b) : NULL;
}

static atomic_bool device_targets_forced;

void nb__loss_device_targets(bool on) { atomic_store(&device_targets_forced, on); }

/* Checks, then runs nll_from_safe on lp (log-probabilities, or logits when log_softmax is set).
 * On the CPU the targets are scanned on the host (a fused cross entropy when it applies); on
 * another device they stay there (device_targets), so the loss never waits for the device: a bad
 * target is then the gather's range error, with the loss named. */
static nb_tensor *class_loss_run(const class_loss *c, bool log_softmax)
{
    const nb_tensor *ins[3] = {c->lp, c->target, c->weight};
    if (nb__check_inputs(c->op, ins, c->weight ? 3 : 2) != NB_OK) return NULL;
    if (check_reduction(c->op, c->reduction) != NB_OK || check_float(c->op, "input", c->lp) != NB_OK ||
        check_class_shapes(c) != NB_OK)
        return NULL;
    if (!(c->smoothing >= 0.0 && c->smoothing <= 1.0))
        return nb__err_null(NB_ERR_INVALID_ARG, "%s: label_smoothing must be in [0, 1] (got %g)", c->op, c->smoothing);
    nb_scope *s = nb_scope_begin();
    if (!s) return NULL;
    nb_device dev = c->lp->storage->device;
    bool on_device = atomic_load(&device_targets_forced) || dev.type != NB_DEVICE_CPU;
    safe_targets tg = {0};
    nb_tensor *out = NULL;
    if ((on_device ? device_targets(c, &tg) : host_targets(c, dev, &tg)) == NB_OK) {
        nb_tensor *x = c->lp->ndim == 1 ? nb_unsqueeze(c->lp, 0) : (nb_tensor *)c->lp;
        bool fused = !on_device && log_softmax && c->smoothing == 0.0 && x && x->ndim == 2 &&
                     dev.type == NB_DEVICE_CPU;
        if (x && log_softmax && !fused) x = nb_log_softmax(x, 1);
        if (x) out = nll_from_safe(c, x, &tg, fused);
        if (out && c->lp->ndim == 1 && c->reduction == NB_REDUCE_NONE) out = nb_squeeze_dim(out, 0);
    }
    if (!out && on_device) (void)nb__err_prefix(c->op); /* a bad target: the gather's range error */
    return nb_scope_end_keep(s, out);
}

nb_tensor *nb_cross_entropy(const nb_tensor *logits, const nb_tensor *target, const nb_cross_entropy_params *p)
{
    nb_cross_entropy_params d = p ? *p : nb_cross_entropy_params_default();
    class_loss c = {"cross_entropy", logits, target, d.weight, d.ignore_index, d.reduction, d.label_smoothing};
    return class_loss_run(&c, true);
}

nb_tensor *nb_nll_loss(const nb_tensor *log_probs, const nb_tensor *target, const nb_nll_loss_params *p)
{
    nb_nll_loss_params d = p ? *p : nb_nll_loss_params_default();
    class_loss c = {"nll_loss", log_probs, target, d.weight, d.ignore_index, d.reduction, 0.0};
    return class_loss_run(&c, false);
}

/* ---- regression and binary losses ------------------------------------------------------------ */

nb_tensor *nb_mse_loss(const nb_tensor *input, const nb_tensor *target, nb_reduction reduction)
{
    if (nb__check_inputs("mse_loss", (const nb_tensor *const[]){input, target}, 2) != NB_OK) return NULL;
    if (check_reduction("mse_loss", reduction) != NB_OK || check_float("mse_loss", "input", input) != NB_OK ||
        check_float("mse_loss", "target", target) != NB_OK)
        return NULL;
    int64_t shape[NB_MAX_DIMS];
    int nd;
    if (nb__broadcast_shapes("mse_loss", input->shape, input->ndim, target->shape, target->ndim, shape, &nd) != NB_OK)
        return NULL;
    nb_scope *s = nb_scope_begin();
    if (!s) return NULL;
    nb_tensor *d = nb_sub(input, target);
    nb_tensor *sq = d ? nb_mul(d, d) : NULL;
    nb_tensor *out = sq;
    if (sq && reduction == NB_REDUCE_MEAN) out = nb_mean(sq, NULL, 0, false);
    if (sq && reduction == NB_REDUCE_SUM) out = nb_sum(sq, NULL, 0, false);
    return nb_scope_end_keep(s, out);
}

/* weight / pos_weight must broadcast to the input's shape (PyTorch applies them in place). */
static nb_status check_bce_extra(const nb_tensor *x, const nb_tensor *w, const char *what)
{
    if (!w) return NB_OK;
    const char *op = "binary_cross_entropy_with_logits";
    NB_TRY(check_float(op, what, w));
    int64_t shape[NB_MAX_DIMS];
    int nd;
    bool ok = nb__broadcast_shapes(op, x->shape, x->ndim, w->shape, w->ndim, shape, &nd) == NB_OK && nd == x->ndim;
    for (int i = 0; ok && i < nd; i++) ok = shape[i] == x->shape[i];
    if (!ok) {
        char a[NB_SHAPE_STR_MAX], b[NB_SHAPE_STR_MAX];
        return nb__err(NB_ERR_SHAPE, "%s: %s of shape %s does not broadcast to the input's shape %s", op, what,
                       nb__shape_str(w->shape, w->ndim, a), nb__shape_str(x->shape, x->ndim, b));
    }
    return NB_OK;
}

static nb_status check_bce(const nb_tensor *x, const nb_tensor *t, const nb_tensor *w, const nb_tensor *pw,
                           nb_reduction reduction)
{
    const char *op = "binary_cross_entropy_with_logits";
    const nb_tensor *ins[4] = {x, t};
    int n = 2;
    if (w) ins[n++] = w;
    if (pw) ins[n++] = pw;
    NB_TRY(nb__check_inputs(op, ins, n));
    NB_TRY(check_reduction(op, reduction));
    NB_TRY(check_float(op, "input", x));
    NB_TRY(check_float(op, "target", t));
    bool same = x->ndim == t->ndim;
    for (int i = 0; same && i < x->ndim; i++) same = x->shape[i] == t->shape[i];
    if (!same) {
        char a[NB_SHAPE_STR_MAX], b[NB_SHAPE_STR_MAX];
        return nb__err(NB_ERR_SHAPE, "%s: target size %s must be the same as input size %s", op,
                       nb__shape_str(t->shape, t->ndim, a), nb__shape_str(x->shape, x->ndim, b));
    }
    NB_TRY(check_bce_extra(x, w, "weight"));
    return check_bce_extra(x, pw, "pos_weight");
}

/* PyTorch's arithmetic, in its order, so float32 results agree to rounding:
 *   m = max(-x, 0), lse = log(exp(-m) + exp(-x - m))
 *   no pos_weight: (1 - t) x + m + lse
 *   pos_weight:    (1 - t) x + (1 + (pw - 1) t) (lse + m) */
static nb_tensor *bce_terms(const nb_tensor *x, const nb_tensor *t, const nb_tensor *pw)
{
    nb_tensor *negx = nb_neg(x);
    nb_tensor *m = negx ? nb_clamp(negx, 0.0, INFINITY) : NULL;
    nb_tensor *e1 = m ? nb_exp(nb_neg(m)) : NULL;
    nb_tensor *e2 = e1 ? nb_exp(nb_sub(negx, m)) : NULL;
    nb_tensor *lse = e2 ? nb_log(nb_add(e1, e2)) : NULL;
    nb_tensor *omt = lse ? nb_add_scalar(nb_neg(t), 1.0) : NULL;
    nb_tensor *lin = omt ? nb_mul(omt, x) : NULL;
    if (!lin) return NULL;
    if (!pw) {
        nb_tensor *a = nb_add(lin, m);
        return a ? nb_add(a, lse) : NULL;
    }
    nb_tensor *pwd = nb_detach(pw);
    nb_tensor *lw = pwd ? nb_add_scalar(nb_mul(nb_sub_scalar(pwd, 1.0), t), 1.0) : NULL;
    nb_tensor *sp = lw ? nb_mul(lw, nb_add(lse, m)) : NULL;
    return sp ? nb_add(lin, sp) : NULL;
}

nb_tensor *nb_binary_cross_entropy_with_logits(const nb_tensor *input, const nb_tensor *target, const nb_tensor *weight,
                                               const nb_tensor *pos_weight, nb_reduction reduction)
{
    if (check_bce(input, target, weight, pos_weight, reduction) != NB_OK) return NULL;
    nb_scope *s = nb_scope_begin();
    if (!s) return NULL;
    nb_tensor *loss = bce_terms(input, target, pos_weight);
    if (loss && weight) {
        nb_tensor *w = nb_detach(weight);
        loss = w ? nb_mul(loss, w) : NULL;
    }
    if (loss && reduction == NB_REDUCE_MEAN) loss = nb_mean(loss, NULL, 0, false);
    if (loss && reduction == NB_REDUCE_SUM) loss = nb_sum(loss, NULL, 0, false);
    return nb_scope_end_keep(s, loss);
}
