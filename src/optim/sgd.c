/* SGD, as torch.optim.SGD (1.13, single-tensor path):
 *   d = g + wd p;  buf = d (first step) or momentum buf + (1 - dampening) d;
 *   d = nesterov ? d + momentum buf : buf;  p -= lr d
 * One fused pass over memory per parameter, in the parameter's dtype (scalars rounded to it
 * first, as PyTorch's CPU kernels do). */
#include "optim/optim_impl.h"

#define SGD_LOOP(T)                                                                             \
    do {                                                                                        \
        T *p = (T *)pd, *b = (T *)bd;                                                           \
        const T *g = (const T *)gd;                                                             \
        const T wd = (T)o->weight_decay, mom = (T)o->momentum, damp = (T)(1 - o->dampening);   \
        const T nlr = (T)(-o->lr);                                                              \
        _Pragma("omp parallel for num_threads(nt)")                                             \
        for (int64_t i = 0; i < n; i++) {                                                       \
            T d = g[i];                                                                         \
            if (use_wd) d = d + wd * p[i];                                                      \
            if (b) {                                                                            \
                T bi = first ? d : b[i] * mom + damp * d;                                       \
                b[i] = bi;                                                                      \
                d = nesterov ? d + mom * bi : bi;                                               \
            }                                                                                   \
            p[i] = p[i] + nlr * d;                                                              \
        }                                                                                       \
    } while (0)

static nb_status sgd_prepare(nb_optim *o, int idx, nb_optim_entry *e)
{
    nb__pstate *s = &o->st[idx];
    e->first = !s->started;
    if (o->momentum != 0) NB_TRY(nb__optim_ensure_buf(o, idx, 0));
    s->started = o->momentum != 0;
    e->buf[0] = s->buf[0] ? nb__data(s->buf[0]) : NULL;
    return NB_OK;
}

static nb_status sgd_update(nb_optim *o, int idx, nb_tensor *param, const nb_tensor *grad)
{
    nb_optim_entry e = {0};
    NB_TRY(sgd_prepare(o, idx, &e));
    bool first = e.first;
    int64_t n = nb__numel(param->shape, param->ndim);
    int nt = nb__optim_threads(n);
    char *pd = nb__data(param), *bd = e.buf[0];
    const char *gd = nb__data(grad);
    bool use_wd = o->weight_decay != 0, nesterov = o->nesterov != 0;
    if (param->dtype == NB_FLOAT32)
        SGD_LOOP(float);
    else
        SGD_LOOP(double);
    return NB_OK;
}

nb_sgd_params nb_sgd_params_default(void)
{
    return (nb_sgd_params){.lr = 0.01, .momentum = 0, .dampening = 0, .weight_decay = 0, .nesterov = false};
}

nb_optim *nb_optim_sgd(nb_tensor *const *params, int n, const nb_sgd_params *pp)
{
    nb_sgd_params p = pp ? *pp : nb_sgd_params_default();
    const char *op = "optim sgd";
    if (!(p.lr >= 0)) return nb__err_null(NB_ERR_INVALID_ARG, "%s: invalid learning rate %g", op, p.lr);
    if (!(p.momentum >= 0)) return nb__err_null(NB_ERR_INVALID_ARG, "%s: invalid momentum %g", op, p.momentum);
    if (!(p.weight_decay >= 0))
        return nb__err_null(NB_ERR_INVALID_ARG, "%s: invalid weight_decay %g", op, p.weight_decay);
    if (p.nesterov && (p.momentum <= 0 || p.dampening != 0))
        return nb__err_null(NB_ERR_INVALID_ARG, "%s: nesterov requires a momentum and zero dampening (momentum %g, dampening %g)",
                            op, p.momentum, p.dampening);
    nb_optim *o = nb__optim_new(op, params, n);
    if (!o) return NULL;
    o->kind = NB__SGD;
    o->name = "sgd";
    o->lr = p.lr;
    o->momentum = p.momentum;
    o->dampening = p.dampening;
    o->weight_decay = p.weight_decay;
    o->nesterov = p.nesterov;
    o->has_step = false;
    o->nbuf = 1;
    o->buf_names[0] = "momentum_buffer";
    o->buf_used[0] = p.momentum != 0;
    nb__optim_add_hyper(o, "lr", &o->lr, 1);
    nb__optim_add_hyper(o, "momentum", &o->momentum, 1);
    nb__optim_add_hyper(o, "dampening", &o->dampening, 1);
    nb__optim_add_hyper(o, "weight_decay", &o->weight_decay, 1);
    nb__optim_add_hyper(o, "nesterov", &o->nesterov, 1);
    o->update = sgd_update;
    o->prepare = sgd_prepare;
    o->batch_kind = NB_OPTIM_SGD;
    return o;
}
