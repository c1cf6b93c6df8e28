/* Adam and AdamW, as torch.optim.Adam / AdamW (1.13, single-tensor path):
 *   AdamW: p *= 1 - lr wd          Adam: g += wd p
 *   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g g;   vmax = max(vmax, v) (amsgrad)
 *   p -= lr / (1 - beta1^t) * m / (sqrt(v or vmax) / sqrt(1 - beta2^t) + eps)
 * One fused pass per parameter in its dtype. */
#include <math.h>

#include "optim/optim_impl.h"

enum { EXP_AVG, EXP_AVG_SQ, MAX_EXP_AVG_SQ };

#define ADAM_LOOP(T)                                                                            \
    do {                                                                                        \
        T *p = (T *)pd, *m = (T *)md, *v = (T *)vd, *mx = (T *)xd;                              \
        const T *g = (const T *)gd;                                                             \
        const T decay = (T)(1 - o->lr * o->weight_decay), wd = (T)o->weight_decay;              \
        const T b1 = (T)o->betas[0], c1 = (T)(1 - o->betas[0]);                                 \
        const T b2 = (T)o->betas[1], c2 = (T)(1 - o->betas[1]);                                 \
        const T bc2s = (T)bias2_sqrt, eps = (T)o->eps, nstep = (T)(-step_size);                 \
        _Pragma("omp parallel for num_threads(nt)")                                             \
        for (int64_t i = 0; i < n; i++) {                                                       \
            T pi = p[i], gi = g[i];                                                             \
            if (decoupled) pi = pi * decay;                                                     \
            else if (use_wd) gi = gi + wd * pi;                                                 \
            T mi = m[i] * b1 + c1 * gi;                                                         \
            T vi = v[i] * b2 + c2 * gi * gi;                                                    \
            m[i] = mi;                                                                          \
            v[i] = vi;                                                                          \
            if (mx) {                                                                           \
                vi = mx[i] > vi ? mx[i] : vi;                                                   \
                mx[i] = vi;                                                                     \
            }                                                                                   \
            T den = (T)sqrt(vi) / bc2s + eps;                                                   \
            p[i] = pi + nstep * (mi / den);                                                     \
        }                                                                                       \
    } while (0)

static nb_status adam_prepare(nb_optim *o, int idx, nb_optim_entry *e)
{
    nb__pstate *s = &o->st[idx];
    for (int b = 0; b < 3; b++)
        if (o->buf_used[b]) NB_TRY(nb__optim_ensure_buf(o, idx, b));
    s->started = true;
    s->step++;
    double t = (double)s->step;
    e->step_size = o->lr / (1 - pow(o->betas[0], t));
    e->bias2_sqrt = sqrt(1 - pow(o->betas[1], t));
    for (int b = 0; b < 3; b++) e->buf[b] = s->buf[b] ? nb__data(s->buf[b]) : NULL;
    return NB_OK;
}

static nb_status adam_update(nb_optim *o, int idx, nb_tensor *param, const nb_tensor *grad)
{
    nb_optim_entry e = {0};
    NB_TRY(adam_prepare(o, idx, &e));
    double step_size = e.step_size, bias2_sqrt = e.bias2_sqrt;
    int64_t n = nb__numel(param->shape, param->ndim);
    int nt = nb__optim_threads(n);
    char *pd = nb__data(param), *md = e.buf[EXP_AVG], *vd = e.buf[EXP_AVG_SQ], *xd = e.buf[MAX_EXP_AVG_SQ];
    const char *gd = nb__data(grad);
    bool decoupled = o->kind == NB__ADAMW, use_wd = o->weight_decay != 0;
    if (param->dtype == NB_FLOAT32)
        ADAM_LOOP(float);
    else
        ADAM_LOOP(double);
    return NB_OK;
}

nb_adam_params nb_adam_params_default(void)
{
    return (nb_adam_params){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0, .amsgrad = false};
}

nb_adam_params nb_adamw_params_default(void)
{
    nb_adam_params p = nb_adam_params_default();
    p.weight_decay = 1e-2;
    return p;
}

static nb_optim *make(const char *op, nb_tensor *const *params, int n, const nb_adam_params *p, bool decoupled)
{
    if (!(p->lr >= 0)) return nb__err_null(NB_ERR_INVALID_ARG, "%s: invalid learning rate %g", op, p->lr);
    if (!(p->eps >= 0)) return nb__err_null(NB_ERR_INVALID_ARG, "%s: invalid epsilon %g", op, p->eps);
    if (!(p->beta1 >= 0 && p->beta1 < 1))
        return nb__err_null(NB_ERR_INVALID_ARG, "%s: invalid beta1 %g (must be in [0, 1))", op, p->beta1);
    if (!(p->beta2 >= 0 && p->beta2 < 1))
        return nb__err_null(NB_ERR_INVALID_ARG, "%s: invalid beta2 %g (must be in [0, 1))", op, p->beta2);
    if (!(p->weight_decay >= 0))
        return nb__err_null(NB_ERR_INVALID_ARG, "%s: invalid weight_decay %g", op, p->weight_decay);
    nb_optim *o = nb__optim_new(op, params, n);
    if (!o) return NULL;
    o->kind = decoupled ? NB__ADAMW : NB__ADAM;
    o->name = decoupled ? "adamw" : "adam";
    o->lr = p->lr;
    o->betas[0] = p->beta1;
    o->betas[1] = p->beta2;
    o->eps = p->eps;
    o->weight_decay = p->weight_decay;
    o->amsgrad = p->amsgrad;
    o->has_step = true;
    o->nbuf = 3;
    o->buf_names[EXP_AVG] = "exp_avg";
    o->buf_names[EXP_AVG_SQ] = "exp_avg_sq";
    o->buf_names[MAX_EXP_AVG_SQ] = "max_exp_avg_sq";
    o->buf_used[EXP_AVG] = o->buf_used[EXP_AVG_SQ] = true;
    o->buf_used[MAX_EXP_AVG_SQ] = p->amsgrad;
    nb__optim_add_hyper(o, "lr", &o->lr, 1);
    nb__optim_add_hyper(o, "betas", o->betas, 2);
    nb__optim_add_hyper(o, "eps", &o->eps, 1);
    nb__optim_add_hyper(o, "weight_decay", &o->weight_decay, 1);
    nb__optim_add_hyper(o, "amsgrad", &o->amsgrad, 1);
    o->update = adam_update;
    o->prepare = adam_prepare;
    o->batch_kind = decoupled ? NB_OPTIM_ADAMW : NB_OPTIM_ADAM;
    return o;
}

nb_optim *nb_optim_adam(nb_tensor *const *params, int n, const nb_adam_params *p)
{
    nb_adam_params d = nb_adam_params_default();
    return make("optim adam", params, n, p ? p : &d, false);
}

nb_optim *nb_optim_adamw(nb_tensor *const *params, int n, const nb_adam_params *p)
{
    nb_adam_params d = nb_adamw_params_default();
    return make("optim adamw", params, n, p ? p : &d, true);
}
