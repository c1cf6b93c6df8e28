/* Learning-rate schedules, as torch.optim.lr_scheduler (1.13): StepLR, MultiStepLR,
 * CosineAnnealingLR, LinearLR and OneCycleLR (cycle_momentum=False). Each get_lr follows
 * torch's own formula (the recursive ones are recursive here too), so that the sequences agree
 * to the last bits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim_impl.h"

typedef enum { SCHED_STEP, SCHED_MULTISTEP, SCHED_COSINE, SCHED_LINEAR, SCHED_ONECYCLE } sched_kind;

struct nb_lr_scheduler {
    sched_kind kind;
    nb_optim *opt;
    int64_t last_epoch, step_count;
    double base_lr, last_lr;
    double gamma;          /* step, multistep */
    int64_t step_size;     /* step */
    int64_t *milestones;   /* multistep (owned) */
    int nmilestones;
    int64_t t_max;         /* cosine */
    double eta_min;
    double start_factor, end_factor; /* linear */
    int64_t total_iters;
    nb_onecycle_params oc; /* onecycle */
    double oc_initial, oc_min;
};

static double cosine_lr(const nb_lr_scheduler *s, double lr)
{
    const double pi = 3.14159265358979323846;
    int64_t e = s->last_epoch, T = s->t_max;
    if (e == 0) return lr;
    if ((e - 1 - T) % (2 * T) == 0) return lr + (s->base_lr - s->eta_min) * (1 - cos(pi / (double)T)) / 2;
    return (1 + cos(pi * (double)e / (double)T)) / (1 + cos(pi * (double)(e - 1) / (double)T)) * (lr - s->eta_min) +
           s->eta_min;
}

static double onecycle_lr(const nb_lr_scheduler *s)
{
    const double pi = 3.14159265358979323846;
    double step = (double)s->last_epoch;
    double ends[2] = {s->oc.pct_start * (double)s->oc.total_steps - 1, (double)s->oc.total_steps - 1};
    double starts_lr[2] = {s->oc_initial, s->oc.max_lr}, ends_lr[2] = {s->oc.max_lr, s->oc_min};
    double start_step = 0;
    for (int i = 0; i < 2; i++) {
        if (step <= ends[i] || i == 1) {
            double pct = (step - start_step) / (ends[i] - start_step);
            if (s->oc.anneal == NB_ANNEAL_COS) return ends_lr[i] + (starts_lr[i] - ends_lr[i]) / 2.0 * (cos(pi * pct) + 1);
            return (ends_lr[i] - starts_lr[i]) * pct + starts_lr[i];
        }
        start_step = ends[i];
    }
    return s->oc_min;
}

/* torch's get_lr for the current last_epoch, from the optimizer's current lr. */
static double get_lr(const nb_lr_scheduler *s)
{
    double lr = s->opt->lr;
    int64_t e = s->last_epoch;
    switch (s->kind) {
    case SCHED_STEP: return (e == 0 || e % s->step_size != 0) ? lr : lr * s->gamma;
    case SCHED_MULTISTEP: {
        int hits = 0;
        for (int i = 0; i < s->nmilestones; i++) hits += s->milestones[i] == e;
        return hits ? lr * pow(s->gamma, hits) : lr;
    }
    case SCHED_COSINE: return cosine_lr(s, lr);
    case SCHED_LINEAR:
        if (e == 0) return lr * s->start_factor;
        if (e > s->total_iters) return lr;
        return lr * (1.0 + (s->end_factor - s->start_factor) /
                               ((double)s->total_iters * s->start_factor +
                                (double)(e - 1) * (s->end_factor - s->start_factor)));
    case SCHED_ONECYCLE: return onecycle_lr(s);
    }
    return lr;
}

nb_status nb_lr_scheduler_step(nb_lr_scheduler *s)
{
    if (!s) return nb__err(NB_ERR_INVALID_ARG, "lr_scheduler step: scheduler is NULL");
    if (s->kind == SCHED_ONECYCLE && s->last_epoch + 1 > s->oc.total_steps)
        return nb__err(NB_ERR_INVALID_ARG, "lr_scheduler step: one-cycle stepped %lld times, total_steps is %lld",
                       (long long)(s->last_epoch + 2), (long long)s->oc.total_steps);
    s->step_count++;
    s->last_epoch++;
    double lr = get_lr(s);
    s->opt->lr = lr;
    s->last_lr = lr;
    return NB_OK;
}

double nb_lr_scheduler_get_last_lr(const nb_lr_scheduler *s)
{
    return s ? s->last_lr : 0.0;
}

void nb_lr_scheduler_free(nb_lr_scheduler *s)
{
    if (!s) return;
    free(s->milestones);
    free(s);
}

static nb_lr_scheduler *sched_new(const char *op, nb_optim *opt, sched_kind kind)
{
    if (!opt) return nb__err_null(NB_ERR_INVALID_ARG, "%s: optimizer is NULL", op);
    nb_lr_scheduler *s = calloc(1, sizeof *s);
    if (!s) return nb__err_null(NB_ERR_OOM, "%s: out of memory", op);
    s->kind = kind;
    s->opt = opt;
    s->base_lr = opt->lr;
    s->last_epoch = -1;
    return s;
}

/* torch's constructor ends with an initial step: epoch 0. */
static nb_lr_scheduler *sched_start(nb_lr_scheduler *s)
{
    if (nb_lr_scheduler_step(s) != NB_OK) {
        nb_lr_scheduler_free(s);
        return NULL;
    }
    return s;
}

nb_lr_scheduler *nb_lr_step(nb_optim *opt, int64_t step_size, double gamma)
{
    if (step_size < 1) return nb__err_null(NB_ERR_INVALID_ARG, "lr_step: invalid step_size %lld", (long long)step_size);
    nb_lr_scheduler *s = sched_new("lr_step", opt, SCHED_STEP);
    if (!s) return NULL;
    s->step_size = step_size;
    s->gamma = gamma;
    return sched_start(s);
}

nb_lr_scheduler *nb_lr_multistep(nb_optim *opt, const int64_t *milestones, int n, double gamma)
{
    if (n < 0 || (n > 0 && !milestones))
        return nb__err_null(NB_ERR_INVALID_ARG, "lr_multistep: bad milestone list (n = %d)", n);
    nb_lr_scheduler *s = sched_new("lr_multistep", opt, SCHED_MULTISTEP);
    if (!s) return NULL;
    s->milestones = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    if (!s->milestones) {
        nb_lr_scheduler_free(s);
        return nb__err_null(NB_ERR_OOM, "lr_multistep: out of memory");
    }
    if (n > 0) memcpy(s->milestones, milestones, (size_t)n * sizeof(int64_t));
    s->nmilestones = n;
    s->gamma = gamma;
    return sched_start(s);
}

nb_lr_scheduler *nb_lr_cosine(nb_optim *opt, int64_t t_max, double eta_min)
{
    if (t_max < 1) return nb__err_null(NB_ERR_INVALID_ARG, "lr_cosine: invalid T_max %lld", (long long)t_max);
    nb_lr_scheduler *s = sched_new("lr_cosine", opt, SCHED_COSINE);
    if (!s) return NULL;
    s->t_max = t_max;
    s->eta_min = eta_min;
    return sched_start(s);
}

nb_lr_scheduler *nb_lr_linear(nb_optim *opt, double start_factor, double end_factor, int64_t total_iters)
{
    if (!(start_factor > 0 && start_factor <= 1) || !(end_factor >= 0 && end_factor <= 1))
        return nb__err_null(NB_ERR_INVALID_ARG, "lr_linear: factors must be in (0, 1] and [0, 1] (start %g, end %g)",
                            start_factor, end_factor);
    if (total_iters < 1)
        return nb__err_null(NB_ERR_INVALID_ARG, "lr_linear: invalid total_iters %lld", (long long)total_iters);
    nb_lr_scheduler *s = sched_new("lr_linear", opt, SCHED_LINEAR);
    if (!s) return NULL;
    s->start_factor = start_factor;
    s->end_factor = end_factor;
    s->total_iters = total_iters;
    return sched_start(s);
}

nb_onecycle_params nb_onecycle_params_default(double max_lr, int64_t total_steps)
{
    return (nb_onecycle_params){.max_lr = max_lr, .total_steps = total_steps, .pct_start = 0.3,
                                .anneal = NB_ANNEAL_COS, .div_factor = 25, .final_div_factor = 1e4};
}

nb_lr_scheduler *nb_lr_onecycle(nb_optim *opt, const nb_onecycle_params *p)
{
    const char *op = "lr_onecycle";
    if (!p) return nb__err_null(NB_ERR_INVALID_ARG, "%s: params are NULL (max_lr and total_steps are required)", op);
    if (!(p->max_lr > 0)) return nb__err_null(NB_ERR_INVALID_ARG, "%s: invalid max_lr %g", op, p->max_lr);
    if (p->total_steps < 2)
        return nb__err_null(NB_ERR_INVALID_ARG, "%s: invalid total_steps %lld", op, (long long)p->total_steps);
    if (!(p->pct_start >= 0 && p->pct_start <= 1))
        return nb__err_null(NB_ERR_INVALID_ARG, "%s: invalid pct_start %g (must be in [0, 1])", op, p->pct_start);
    if (!(p->div_factor > 0) || !(p->final_div_factor > 0))
        return nb__err_null(NB_ERR_INVALID_ARG, "%s: invalid div_factor %g or final_div_factor %g", op,
                            p->div_factor, p->final_div_factor);
    if (p->anneal != NB_ANNEAL_COS && p->anneal != NB_ANNEAL_LINEAR)
        return nb__err_null(NB_ERR_INVALID_ARG, "%s: invalid anneal strategy %d", op, (int)p->anneal);
    nb_lr_scheduler *s = sched_new(op, opt, SCHED_ONECYCLE);
    if (!s) return NULL;
    s->oc = *p;
    s->oc_initial = p->max_lr / p->div_factor;
    s->oc_min = s->oc_initial / p->final_div_factor;
    s->base_lr = s->oc_initial;
    return sched_start(s);
}

/* ---- state ----------------------------------------------------------------------------------- */

nb_status nb_lr_scheduler_state_dict(const nb_lr_scheduler *s, nb_tensor_map *m, const char *prefix)
{
    if (!s || !m) return nb__err(NB_ERR_INVALID_ARG, "lr_scheduler state_dict: scheduler or map is NULL");
    const char *names[3] = {"last_epoch", "step_count", "base_lr"};
    nb_tensor_params i64 = nb_tensor_params_default(), f64 = nb_tensor_params_default();
    i64.dtype = NB_INT64;
    f64.dtype = NB_FLOAT64;
    double vals[3] = {(double)s->last_epoch, (double)s->step_count, s->base_lr};
    nb_scope *sc = nb_scope_begin();
    nb_status st = sc ? NB_OK : nb__err(NB_ERR_OOM, "lr_scheduler state_dict: out of memory");
    for (int i = 0; i < 3 && st == NB_OK; i++) {
        char k[512];
        snprintf(k, sizeof k, "%s%s", prefix ? prefix : "", names[i]);
        nb_tensor *t = nb_scalar_tensor(vals[i], i < 2 ? &i64 : &f64);
        st = t ? nb_tensor_map_set(m, k, t) : nb_last_status();
    }
    nb_scope_end(sc);
    return st;
}

nb_status nb_lr_scheduler_load_state_dict(nb_lr_scheduler *s, const nb_tensor_map *m, const char *prefix)
{
    const char *op = "lr_scheduler load_state_dict";
    if (!s || !m) return nb__err(NB_ERR_INVALID_ARG, "%s: scheduler or map is NULL", op);
    const char *names[3] = {"last_epoch", "step_count", "base_lr"};
    double vals[3];
    nb_scope *sc = nb_scope_begin();
    nb_status st = sc ? NB_OK : nb__err(NB_ERR_OOM, "%s: out of memory", op);
    for (int i = 0; i < 3 && st == NB_OK; i++) {
        char k[512];
        snprintf(k, sizeof k, "%s%s", prefix ? prefix : "", names[i]);
        if (!nb_tensor_map_contains(m, k)) {
            st = nb__err(NB_ERR_FORMAT, "%s: missing entry '%s'", op, k);
            break;
        }
        nb_tensor *t = nb_tensor_map_get(m, k);
        if (!t || nb_item(t, &vals[i]) != NB_OK) st = nb__err(NB_ERR_FORMAT, "%s: '%s' is not a single number", op, k);
    }
    nb_scope_end(sc);
    /* whole counts a step can reach (no float-to-integer overflow), and a learning rate the
     * optimizers accept */
    for (int i = 0; i < 2 && st == NB_OK; i++)
        if (!nb__optim_count_ok(vals[i], i == 0 ? -1 : 0))
            st = nb__err(NB_ERR_FORMAT, "%s: '%s%s' is %g, not a count in [%d, 2^62]", op, prefix ? prefix : "",
                         names[i], vals[i], i == 0 ? -1 : 0);
    if (st == NB_OK && !(vals[2] >= 0))
        st = nb__err(NB_ERR_FORMAT, "%s: '%s%s' is %g, not a learning rate (>= 0)", op, prefix ? prefix : "", names[2],
                     vals[2]);
    if (st != NB_OK) return st;
    s->last_epoch = (int64_t)vals[0];
    s->step_count = (int64_t)vals[1];
    s->base_lr = vals[2];
    s->last_lr = s->opt->lr;
    return NB_OK;
}
