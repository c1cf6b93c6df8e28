/* The optimizer shell: parameters, step driver, zero_grad, lr, and state save/load. The update
 * formulas live in sgd.c, adam.c and rmsprop.c. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/dispatch_impl.h"
#include "core/profiler_impl.h"
#include "cpu/cpu_impl.h"
#include "optim/optim_impl.h"

int nb__optim_threads(int64_t n)
{
    return nb_cpu_threads_for(n, NB_CPU_GRAIN);
}

static nb_status check_param(const char *op, const nb_tensor *t, int i)
{
    if (!t) return nb__err(NB_ERR_INVALID_ARG, "%s: params[%d] is NULL", op, i);
    if (!nb_tensor_is_leaf(t))
        return nb__err(NB_ERR_INVALID_ARG, "%s: params[%d] is not a leaf tensor (it has grad_fn %s)", op,
                       i, nb_tensor_grad_fn_name(t));
    if (t->dtype != NB_FLOAT32 && t->dtype != NB_FLOAT64)
        return nb__err(NB_ERR_DTYPE, "%s: params[%d] has dtype %s (float32 or float64 needed)", op, i,
                       nb_dtype_name(t->dtype));
    if (!t->requires_grad)
        return nb__err(NB_ERR_INVALID_ARG, "%s: params[%d] does not require grad", op, i);
    if (t->storage->device.type != NB_DEVICE_CPU) {
        const nb_backend *be = nb__backend(t->storage->device);
        if (!be) return nb_last_status();
        if (!be->fused_optim)
            return nb__err(NB_ERR_UNSUPPORTED, "%s: params[%d] is on %s, which has no optimizer kernels", op, i,
                           be->name);
    }
    if (!nb__is_contiguous(t))
        return nb__err(NB_ERR_INVALID_ARG, "%s: params[%d] is not contiguous", op, i);
    return NB_OK;
}

nb_optim *nb__optim_new(const char *op, nb_tensor *const *params, int n)
{
    if (!params || n < 1) return nb__err_null(NB_ERR_INVALID_ARG, "%s: needs at least one parameter (n = %d)", op, n);
    for (int i = 0; i < n; i++)
        if (check_param(op, params[i], i) != NB_OK) return NULL;
    nb_optim *o = calloc(1, sizeof *o);
    if (o) o->params = calloc((size_t)n, sizeof *o->params);
    if (o) o->st = calloc((size_t)n, sizeof *o->st);
    if (!o || !o->params || !o->st) {
        nb_optim_free(o);
        return nb__err_null(NB_ERR_OOM, "%s: out of memory", op);
    }
    o->n = n;
    for (int i = 0; i < n; i++) o->params[i] = nb_tensor_retain(params[i]);
    return o;
}

void nb__optim_add_hyper(nb_optim *o, const char *name, double *v, int count)
{
    NB_ASSERT(o->nhyper < NB_OPTIM_MAX_HYPER);
    o->hyper[o->nhyper++] = (nb__hyper){name, v, count};
}

nb_status nb__optim_ensure_buf(nb_optim *o, int i, int b)
{
    nb__pstate *s = &o->st[i];
    if (s->buf[b]) return NB_OK;
    const nb_tensor *p = o->params[i];
    s->buf[b] = nb__tensor_new(p->shape, p->ndim, p->dtype, p->storage->device);
    if (!s->buf[b]) return nb_last_status();
    if (p->storage->device.type == NB_DEVICE_CPU) {
        memset(nb__data(s->buf[b]), 0, (size_t)nb__numel(p->shape, p->ndim) * nb_dtype_size(p->dtype));
        return NB_OK;
    }
    nb_kargs k = {.out = s->buf[b], .s0 = 0};
    return nb__dispatch(NB_OP_FILL, &k);
}

void nb_optim_free(nb_optim *o)
{
    if (!o) return;
    for (int i = 0; i < o->n; i++) {
        if (o->params && o->params[i] && o->params[i]->bw_owner == o) {
            o->params[i]->bw_hook = NULL;
            o->params[i]->bw_owner = NULL;
        }
        if (o->params) nb_tensor_free(o->params[i]);
        if (o->st)
            for (int b = 0; b < NB_OPTIM_MAX_BUFS; b++) nb_tensor_free(o->st[i].buf[b]);
    }
    free(o->params);
    free(o->st);
    free(o);
}

/* The grad of p as a contiguous tensor of p's dtype (a new tracked reference), or NULL. */
static nb_tensor *grad_for_update(const nb_tensor *p)
{
    nb_tensor *g = p->grad;
    if (!nb_device_equal(g->storage->device, p->storage->device)) {
        char a[32], b[32];
        nb_device_str(g->storage->device, a, sizeof a);
        nb_device_str(p->storage->device, b, sizeof b);
        return nb__err_null(NB_ERR_DEVICE, "optim step: a gradient is on %s, its parameter on %s", a, b);
    }
    if (g->dtype != p->dtype) g = nb_to_dtype(g, p->dtype);
    return g ? nb_contiguous(g) : NULL;
}

/* The device parameters' entries, grouped into one fused launch per (device, dtype). */
typedef struct dev_group {
    nb_device dev;
    nb_dtype dtype;
    int count;
    nb_optim_entry *e;
} dev_group;

static nb_status run_groups(const nb_optim *o, dev_group *gr, int ng)
{
    for (int k = 0; k < ng; k++) {
        const nb_backend *be = nb__backend(gr[k].dev);
        if (!be) return nb_last_status();
        nb_optim_batch b = {.kind = o->batch_kind, .dtype = (int)gr[k].dtype, .e = gr[k].e, .count = gr[k].count,
                            .lr = o->lr, .momentum = o->momentum, .dampening = o->dampening,
                            .weight_decay = o->weight_decay, .beta1 = o->betas[0], .beta2 = o->betas[1],
                            .eps = o->eps, .alpha = o->alpha, .nesterov = o->nesterov != 0,
                            .centered = o->centered != 0};
        NB_TRY(be->fused_optim(gr[k].dev.index, &b));
    }
    return NB_OK;
}

/* Adds parameter i (on a device, grad g) to its group's batch. */
static nb_status add_to_group(nb_optim *o, int i, nb_tensor *p, nb_tensor *g, dev_group *gr, int *ng)
{
    int k = 0;
    while (k < *ng && !(nb_device_equal(gr[k].dev, p->storage->device) && gr[k].dtype == p->dtype)) k++;
    if (k == *ng) {
        gr[k] = (dev_group){p->storage->device, p->dtype, 0, calloc((size_t)o->n, sizeof(nb_optim_entry))};
        if (!gr[k].e) return nb__err(NB_ERR_OOM, "optim step: out of memory");
        (*ng)++;
    }
    nb_optim_entry *e = &gr[k].e[gr[k].count];
    *e = (nb_optim_entry){0};
    NB_TRY(o->prepare(o, i, e));
    e->p = nb__data(p);
    e->g = nb__data(g);
    e->n = nb__numel(p->shape, p->ndim);
    gr[k].count++;
    return NB_OK;
}

/* While a device captures a graph, what its step cannot capture is refused before any parameter's
 * state (buffers made by a captured fill that never runs, step counts) is touched. */
static nb_status capture_check(const nb_optim *o, int lo, int hi)
{
    for (int i = lo; i < hi; i++) {
        const nb_tensor *p = o->params[i];
        if (!p->grad || p->storage->device.type == NB_DEVICE_CPU || !nb__device_capturing(p->storage->device)) continue;
        const char *why = o->batch_kind != NB_OPTIM_SGD
                              ? "only SGD's step can be captured yet (Adam's bias correction changes at every step; "
                                "RMSprop's state would be made again by each replay)"
                          : o->momentum != 0 && !o->st[i].started
                              ? "SGD's first step makes the momentum buffers, which a replay would make again (take "
                                "one step before capturing)"
                              : NULL;
        if (why) return nb__device_capture_refuse(p->storage->device, "optim step", why);
    }
    return NB_OK;
}

/* The updates of parameters [lo, hi) that have a grad, timed as one "optimizer_step": the CPU's
 * at once, a device's in one fused launch per (device, dtype). */
static nb_status step_range(nb_optim *o, int lo, int hi)
{
    NB_TRY(capture_check(o, lo, hi));
    int64_t t0 = nb__prof_begin();
    bool prev = nb_set_grad_enabled(false);
    nb_scope *sc = nb_scope_begin();
    nb_status st = sc ? NB_OK : nb__err(NB_ERR_OOM, "optim step: out of memory");
    dev_group gr[2 * NB_DEVICE_TYPE_COUNT * 8];
    int ng = 0;
    for (int i = lo; i < hi && st == NB_OK; i++) {
        nb_tensor *p = o->params[i];
        if (!p->grad) continue;
        nb_tensor *g = grad_for_update(p);
        if (!g) {
            st = nb_last_status();
            break;
        }
        if (p->storage->device.type == NB_DEVICE_CPU) {
            st = o->update(o, i, p, g);
        } else if (ng == (int)(sizeof gr / sizeof *gr)) {
            st = nb__err(NB_ERR_UNSUPPORTED, "optim step: parameters on more than %d (device, dtype) groups", ng);
        } else {
            st = add_to_group(o, i, p, g, gr, &ng);
        }
        if (st == NB_OK) nb__bump_version(p);
    }
    /* the grads stay alive until the launches are queued; a device reuses their memory only
     * for work queued after them */
    if (st == NB_OK) st = run_groups(o, gr, ng);
    for (int k = 0; k < ng; k++) free(gr[k].e);
    nb_scope_end(sc);
    nb_set_grad_enabled(prev);
    nb__prof_end(NB_OP_COUNT + NB_PROF_OPTIM_STEP, t0, o->params[lo]->storage->device);
    return st;
}

nb_status nb_optim_step(nb_optim *o)
{
    if (!o) return nb__err(NB_ERR_INVALID_ARG, "optim step: optimizer is NULL");
    return step_range(o, 0, o->n);
}

/* ---- the step in backward ---------------------------------------------------------------- */

/* Parameter i's gradient is whole: its update from its grad (none when the grad is NULL), and
 * the grad is set back to NULL. */
static nb_status step_one(void *owner, int i)
{
    nb_optim *o = owner;
    nb_tensor *p = o->params[i];
    nb_status st = p->grad ? step_range(o, i, i + 1) : NB_OK;
    nb__release(p->grad);
    p->grad = NULL;
    return st;
}

/* Whether the update is p += alpha * grad (plain SGD: alpha = -lr). */
static bool sgd_sink(const void *owner, double *alpha)
{
    const nb_optim *o = owner;
    if (o->kind != NB__SGD || o->momentum != 0 || o->weight_decay != 0) return false;
    *alpha = -o->lr;
    return true;
}

static const nb__leaf_hook step_hook = {step_one, sgd_sink, "optimizer"};

nb_status nb_optim_step_in_backward(nb_optim *o, bool on)
{
    if (!o) return nb__err(NB_ERR_INVALID_ARG, "optim step_in_backward: optimizer is NULL");
    for (int i = 0; i < o->n && on; i++) {
        const nb_tensor *p = o->params[i];
        if (p->bw_hook && p->bw_owner != o)
            return nb__err(NB_ERR_INVALID_ARG, "optim step_in_backward: params[%d] already has its gradient taken in "
                           "backward by another %s", i, p->bw_hook->name);
        for (int j = 0; j < i; j++)
            if (o->params[j] == o->params[i])
                return nb__err(NB_ERR_INVALID_ARG, "optim step_in_backward: params[%d] is params[%d] again", i, j);
    }
    for (int i = 0; i < o->n; i++) {
        if (on) {
            o->params[i]->bw_hook = &step_hook;
            o->params[i]->bw_owner = o;
            o->params[i]->bw_index = i;
        } else if (o->params[i]->bw_owner == o) {
            o->params[i]->bw_hook = NULL;
            o->params[i]->bw_owner = NULL;
        }
    }
    return NB_OK;
}

nb_status nb_optim_zero_grad(nb_optim *o)
{
    if (!o) return nb__err(NB_ERR_INVALID_ARG, "optim zero_grad: optimizer is NULL");
    for (int i = 0; i < o->n; i++) NB_TRY(nb_tensor_set_grad(o->params[i], NULL));
    return NB_OK;
}

double nb_optim_get_lr(const nb_optim *o)
{
    return o ? o->lr : 0.0;
}

nb_status nb_optim_set_lr(nb_optim *o, double lr)
{
    if (!o) return nb__err(NB_ERR_INVALID_ARG, "optim set_lr: optimizer is NULL");
    if (!(lr >= 0)) return nb__err(NB_ERR_INVALID_ARG, "optim set_lr: invalid learning rate %g", lr);
    o->lr = lr;
    return NB_OK;
}

int nb_optim_num_params(const nb_optim *o)
{
    return o ? o->n : 0;
}

/* ---- state dict ------------------------------------------------------------------------------ */

#define NB_KEY_MAX 512

static nb_status key(char *buf, const char *op, const char *prefix, const char *fmt, int i, const char *name)
{
    int len = snprintf(buf, NB_KEY_MAX, "%s", prefix ? prefix : "");
    if (len < 0 || len >= NB_KEY_MAX) return nb__err(NB_ERR_INVALID_ARG, "%s: prefix too long", op);
    int l2 = snprintf(buf + len, (size_t)(NB_KEY_MAX - len), fmt, i, name);
    if (l2 < 0 || len + l2 >= NB_KEY_MAX) return nb__err(NB_ERR_INVALID_ARG, "%s: prefix too long", op);
    return NB_OK;
}

/* Puts t (scope-tracked: the scope drops our reference) into m under k; the map keeps its own. */
static nb_status put(nb_tensor_map *m, const char *k, nb_tensor *t)
{
    if (!t) return nb_last_status();
    return nb_tensor_map_set(m, k, t);
}

nb_status nb_optim_state_dict(const nb_optim *o, nb_tensor_map *m, const char *prefix)
{
    const char *op = "optim state_dict";
    if (!o || !m) return nb__err(NB_ERR_INVALID_ARG, "%s: optimizer or map is NULL", op);
    char k[NB_KEY_MAX];
    nb_scope *sc = nb_scope_begin();
    nb_status st = sc ? NB_OK : nb__err(NB_ERR_OOM, "%s: out of memory", op);
    nb_tensor_params f64 = nb_tensor_params_default();
    f64.dtype = NB_FLOAT64;
    for (int h = 0; h < o->nhyper && st == NB_OK; h++) {
        st = key(k, op, prefix, "param_groups.%d.%s", 0, o->hyper[h].name);
        int64_t two = 2;
        if (st == NB_OK)
            st = put(m, k, o->hyper[h].count == 1 ? nb_scalar_tensor(o->hyper[h].v[0], &f64)
                                                  : nb_tensor_from_data(o->hyper[h].v, &two, 1, &f64));
    }
    for (int i = 0; i < o->n && st == NB_OK; i++) {
        const nb__pstate *s = &o->st[i];
        if (!s->started) continue;
        if (o->has_step) {
            st = key(k, op, prefix, "state.%d.%s", i, "step");
            if (st == NB_OK) st = put(m, k, nb_scalar_tensor((double)s->step, NULL));
        }
        for (int b = 0; b < o->nbuf && st == NB_OK; b++) {
            if (!o->buf_used[b] || !s->buf[b]) continue;
            st = key(k, op, prefix, "state.%d.%s", i, o->buf_names[b]);
            if (st == NB_OK) st = put(m, k, nb_clone(s->buf[b]));
        }
    }
    if (st == NB_OK) {
        snprintf(k, sizeof k, "%soptimizer", prefix ? prefix : "");
        st = nb_tensor_map_set_metadata(m, k, o->name);
    }
    nb_scope_end(sc);
    return st;
}

/* Hyper-parameters that decide which buffers exist must match the optimizer's own. */
static bool structural(const char *name)
{
    return !strcmp(name, "amsgrad") || !strcmp(name, "centered") || !strcmp(name, "nesterov") ||
           !strcmp(name, "momentum");
}

/* What is wrong with value v of hyper-parameter `name`, as the constructors check it (NULL: fine;
 * the flags are checked against the optimizer's own, as structural). */
static const char *hyper_problem(const char *name, double v)
{
    if (!strcmp(name, "betas")) return v >= 0 && v < 1 ? NULL : "must be in [0, 1)";
    if (!strcmp(name, "alpha")) return v >= 0 && v <= 1 ? NULL : "must be in [0, 1]";
    if (!strcmp(name, "dampening")) return v == v ? NULL : "must be a number";
    if (!strcmp(name, "amsgrad") || !strcmp(name, "centered") || !strcmp(name, "nesterov")) return NULL;
    return v >= 0 ? NULL : "must be >= 0"; /* lr, eps, weight_decay, momentum */
}

/* Reads the hyper-parameters into vals (2 slots each). Runs inside the caller's scope. */
static nb_status load_hyper(const nb_optim *o, const nb_tensor_map *m, const char *prefix, double *vals)
{
    const char *op = "optim load_state_dict";
    char k[NB_KEY_MAX];
    for (int h = 0; h < o->nhyper; h++) {
        const nb__hyper *hy = &o->hyper[h];
        NB_TRY(key(k, op, prefix, "param_groups.%d.%s", 0, hy->name));
        if (!nb_tensor_map_contains(m, k)) return nb__err(NB_ERR_FORMAT, "%s: missing entry '%s'", op, k);
        nb_tensor *t = nb_tensor_map_get(m, k);
        if (!t) return nb_last_status();
        if (nb_tensor_numel(t) != hy->count)
            return nb__err(NB_ERR_SHAPE, "%s: '%s' has %" PRId64 " values, expected %d", op, k,
                           nb_tensor_numel(t), hy->count);
        double buf[2] = {0, 0};
        nb_tensor *d = nb_to_dtype(t, NB_FLOAT64);
        if (!d) return nb_last_status();
        NB_TRY(nb_tensor_read(d, buf, (size_t)hy->count * sizeof(double)));
        for (int c = 0; c < hy->count; c++) {
            double cur = hy->v[c];
            bool differ = !strcmp(hy->name, "momentum") ? ((buf[c] != 0) != (cur != 0)) : buf[c] != cur;
            if (structural(hy->name) && differ)
                return nb__err(NB_ERR_INVALID_ARG,
                               "%s: '%s' is %g but the optimizer has %g (its state would not fit)", op, k,
                               buf[c], cur);
            const char *bad = hyper_problem(hy->name, buf[c]);
            if (bad) return nb__err(NB_ERR_FORMAT, "%s: '%s' is %g: %s %s", op, k, buf[c], hy->name, bad);
            vals[2 * h + c] = buf[c];
        }
    }
    /* SGD's Nesterov momentum needs zero dampening, as its constructor says */
    for (int h = 0; h < o->nhyper; h++)
        if (!strcmp(o->hyper[h].name, "dampening") && o->kind == NB__SGD && o->nesterov != 0 && vals[2 * h] != 0)
            return nb__err(NB_ERR_FORMAT, "%s: '%sparam_groups.0.dampening' is %g, but nesterov needs 0", op,
                           prefix ? prefix : "", vals[2 * h]);
    return NB_OK;
}

/* Every "<prefix>state.<i>." entry must name an existing parameter. */
static nb_status check_indices(const nb_optim *o, const nb_tensor_map *m, const char *prefix)
{
    size_t pl = prefix ? strlen(prefix) : 0;
    for (int j = 0; j < nb_tensor_map_size(m); j++) {
        const char *nm = nb_tensor_map_name(m, j);
        if ((pl && strncmp(nm, prefix, pl) != 0) || strncmp(nm + pl, "state.", 6) != 0) continue;
        char *end = NULL;
        long idx = strtol(nm + pl + 6, &end, 10);
        if (end == nm + pl + 6 || *end != '.' || idx < 0 || idx >= o->n)
            return nb__err(NB_ERR_FORMAT, "optim load_state_dict: entry '%s' names no parameter (the optimizer has %d)",
                           nm, o->n);
    }
    return NB_OK;
}

/* Parameter i's state from m into s (new caller-owned buffers); s->started false when absent. */
static nb_status load_param(const nb_optim *o, const nb_tensor_map *m, const char *prefix, int i, nb__pstate *s)
{
    const char *op = "optim load_state_dict";
    char k[NB_KEY_MAX], a[NB_SHAPE_STR_MAX], b2[NB_SHAPE_STR_MAX];
    const nb_tensor *p = o->params[i];
    memset(s, 0, sizeof *s);
    bool any = false;
    if (o->has_step) {
        NB_TRY(key(k, op, prefix, "state.%d.%s", i, "step"));
        any = nb_tensor_map_contains(m, k);
        if (any) {
            nb_tensor *t = nb_tensor_map_get(m, k);
            double v = 0;
            if (!t || nb_item(t, &v) != NB_OK) return nb__err(NB_ERR_FORMAT, "%s: '%s' is not a single number", op, k);
            if (!nb__optim_count_ok(v, 0))
                return nb__err(NB_ERR_FORMAT, "%s: '%s' is %g, not a step count", op, k, v);
            s->step = (int64_t)v;
        }
    }
    for (int b = 0; b < o->nbuf; b++) {
        if (!o->buf_used[b]) continue;
        NB_TRY(key(k, op, prefix, "state.%d.%s", i, o->buf_names[b]));
        bool has = nb_tensor_map_contains(m, k);
        if (!has) {
            if (any) return nb__err(NB_ERR_FORMAT, "%s: missing entry '%s'", op, k);
            continue;
        }
        if (o->has_step && !any)
            return nb__err(NB_ERR_FORMAT, "%s: '%s' present without a step count", op, k);
        any = true;
        nb_tensor *t = nb_tensor_map_get(m, k);
        if (!t) return nb_last_status();
        if (t->ndim != p->ndim || memcmp(t->shape, p->shape, (size_t)p->ndim * sizeof(int64_t)) != 0)
            return nb__err(NB_ERR_SHAPE, "%s: '%s' has shape %s but parameter %d has shape %s", op, k,
                           nb__shape_str(t->shape, t->ndim, a), i, nb__shape_str(p->shape, p->ndim, b2));
        if (!nb_dtype_is_floating(t->dtype))
            return nb__err(NB_ERR_DTYPE, "%s: '%s' has dtype %s", op, k, nb_dtype_name(t->dtype));
        s->buf[b] = nb__tensor_new(p->shape, p->ndim, p->dtype, p->storage->device);
        if (!s->buf[b]) return nb_last_status();
        NB_TRY(nb_copy_(s->buf[b], t));
    }
    s->started = any;
    return NB_OK;
}

static void free_states(nb__pstate *ns, int n)
{
    for (int i = 0; i < n; i++)
        for (int b = 0; b < NB_OPTIM_MAX_BUFS; b++) nb_tensor_free(ns[i].buf[b]);
    free(ns);
}

nb_status nb_optim_load_state_dict(nb_optim *o, const nb_tensor_map *m, const char *prefix)
{
    const char *op = "optim load_state_dict";
    if (!o || !m) return nb__err(NB_ERR_INVALID_ARG, "%s: optimizer or map is NULL", op);
    char k[NB_KEY_MAX];
    snprintf(k, sizeof k, "%soptimizer", prefix ? prefix : "");
    const char *kind = nb_tensor_map_metadata(m, k);
    if (kind && strcmp(kind, o->name) != 0)
        return nb__err(NB_ERR_INVALID_ARG, "%s: the state is of a %s optimizer, this one is %s", op, kind, o->name);
    double vals[2 * NB_OPTIM_MAX_HYPER];
    nb__pstate *ns = calloc((size_t)o->n, sizeof *ns);
    if (!ns) return nb__err(NB_ERR_OOM, "%s: out of memory", op);
    bool prev = nb_set_grad_enabled(false);
    nb_scope *sc = nb_scope_begin();
    nb_status st = sc ? load_hyper(o, m, prefix, vals) : nb__err(NB_ERR_OOM, "%s: out of memory", op);
    if (st == NB_OK) st = check_indices(o, m, prefix);
    for (int i = 0; i < o->n && st == NB_OK; i++) st = load_param(o, m, prefix, i, &ns[i]);
    nb_scope_end(sc);
    nb_set_grad_enabled(prev);
    if (st != NB_OK) {
        free_states(ns, o->n);
        return st;
    }
    for (int h = 0; h < o->nhyper; h++)
        for (int c = 0; c < o->hyper[h].count; c++) o->hyper[h].v[c] = vals[2 * h + c];
    nb__pstate *old = o->st;
    o->st = ns;
    free_states(old, o->n);
    return NB_OK;
}
