/* RMSprop, as torch.optim.RMSprop (1.13, single-tensor path):
 *   g += wd p;  sq = alpha sq + (1 - alpha) g g;  ga = alpha ga + (1 - alpha) g (centered)
 *   avg = sqrt(sq - ga ga (centered) or sq) + eps
 *   momentum: buf = momentum buf + g / avg, p -= lr buf;  else p -= lr g / avg
 * One fused pass per parameter in its dtype. */
#include <math.h>

#include "optim/optim_impl.h"

enum { SQUARE_AVG, MOMENTUM_BUFFER, GRAD_AVG };

#define RMSPROP_LOOP(T, CENTERED, MOM)                                                          \
    do {                                                                                        \
        T *p = (T *)pd, *sq = (T *)sd, *bf = (T *)bd, *ga = (T *)ad;                            \
        const T *g = (const T *)gd;                                                             \
        const T wd = (T)o->weight_decay, al = (T)o->alpha, c = (T)(1 - o->alpha);               \
        const T eps = (T)o->eps, mom = (T)o->momentum, nlr = (T)(-o->lr), m1 = (T)-1;          \
        _Pragma("omp parallel for num_threads(nt)")                                             \
        for (int64_t i = 0; i < n; i++) {                                                       \
            T gi = g[i];                                                                        \
            gi = use_wd ? gi + wd * p[i] : gi;                                                  \
            T si = sq[i] * al + c * gi * gi;                                                    \
            sq[i] = si;                                                                         \
            T avg;                                                                              \
            if (CENTERED) {                                                                     \
                T ai = ga[i] * al + c * gi;                                                     \
                ga[i] = ai;                                                                     \
                avg = (T)sqrt(si + m1 * ai * ai);                                               \
            } else {                                                                            \
                avg = (T)sqrt(si);                                                              \
            }                                                                                   \
            avg = avg + eps;                                                                    \
            if (MOM) {                                                                          \
                T bi = bf[i] * mom + gi / avg;                                                  \
                bf[i] = bi;                                                                     \
                p[i] = p[i] + nlr * bi;                                                         \
            } else {                                                                            \
                p[i] = p[i] + nlr * (gi / avg);                                                 \
            }                                                                                   \
        }                                                                                       \
    } while (0)

/* The branches on the configuration become constants, so that each loop vectorises. */
#define RMSPROP_DISPATCH(T)                                                                     \
    do {                                                                                        \
        if (ad && bd)                                                                           \
            RMSPROP_LOOP(T, 1, 1);                                                              \
        else if (ad)                                                                            \
            RMSPROP_LOOP(T, 1, 0);                                                              \
        else if (bd)                                                                            \
            RMSPROP_LOOP(T, 0, 1);                                                              \
        else                                                                                    \
            RMSPROP_LOOP(T, 0, 0);                                                              \
    } while (0)

static nb_status rmsprop_prepare(nb_optim *o, int idx, nb_optim_entry *e)
{
    nb__pstate *s = &o->st[idx];
    for (int b = 0; b < 3; b++)
        if (o->buf_used[b]) NB_TRY(nb__optim_ensure_buf(o, idx, b));
    s->started = true;
    s->step++;
    for (int b = 0; b < 3; b++) e->buf[b] = s->buf[b] ? nb__data(s->buf[b]) : NULL;
    return NB_OK;
}

static nb_status rmsprop_update(nb_optim *o, int idx, nb_tensor *param, const nb_tensor *grad)
{
    nb_optim_entry e = {0};
    NB_TRY(rmsprop_prepare(o, idx, &e));
    int64_t n = nb__numel(param->shape, param->ndim);
    int nt = nb__optim_threads(n);
    char *pd = nb__data(param), *sd = e.buf[SQUARE_AVG], *bd = e.buf[MOMENTUM_BUFFER], *ad = e.buf[GRAD_AVG];
    const char *gd = nb__data(grad);
    bool use_wd = o->weight_decay != 0;
    if (param->dtype == NB_FLOAT32)
        RMSPROP_DISPATCH(float);
    else
        RMSPROP_DISPATCH(double);
    return NB_OK;
}

nb_rmsprop_params nb_rmsprop_params_default(void)
{
    return (nb_rmsprop_params){.lr = 1e-2, .alpha = 0.99, .eps = 1e-8, .weight_decay = 0, .momentum = 0, .centered = false};
}

nb_optim *nb_optim_rmsprop(nb_tensor *const *params, int n, const nb_rmsprop_params *pp)
{
    nb_rmsprop_params p = pp ? *pp : nb_rmsprop_params_default();
    const char *op = "optim rmsprop";
    if (!(p.lr >= 0)) return nb__err_null(NB_ERR_INVALID_ARG, "%s: invalid learning rate %g", op, p.lr);
    if (!(p.eps >= 0)) return nb__err_null(NB_ERR_INVALID_ARG, "%s: invalid epsilon %g", op, p.eps);
    if (!(p.momentum >= 0)) return nb__err_null(NB_ERR_INVALID_ARG, "%s: invalid momentum %g", op, p.momentum);
    if (!(p.weight_decay >= 0))
        return nb__err_null(NB_ERR_INVALID_ARG, "%s: invalid weight_decay %g", op, p.weight_decay);
    if (!(p.alpha >= 0 && p.alpha <= 1))
        return nb__err_null(NB_ERR_INVALID_ARG, "%s: invalid alpha %g (must be in [0, 1])", op, p.alpha);
    nb_optim *o = nb__optim_new(op, params, n);
    if (!o) return NULL;
    o->kind = NB__RMSPROP;
    o->name = "rmsprop";
    o->lr = p.lr;
    o->alpha = p.alpha;
    o->eps = p.eps;
    o->weight_decay = p.weight_decay;
    o->momentum = p.momentum;
    o->centered = p.centered;
    o->has_step = true;
    o->nbuf = 3;
    o->buf_names[SQUARE_AVG] = "square_avg";
    o->buf_names[MOMENTUM_BUFFER] = "momentum_buffer";
    o->buf_names[GRAD_AVG] = "grad_avg";
    o->buf_used[SQUARE_AVG] = true;
    o->buf_used[MOMENTUM_BUFFER] = p.momentum > 0;
    o->buf_used[GRAD_AVG] = p.centered;
    nb__optim_add_hyper(o, "lr", &o->lr, 1);
    nb__optim_add_hyper(o, "alpha", &o->alpha, 1);
    nb__optim_add_hyper(o, "eps", &o->eps, 1);
    nb__optim_add_hyper(o, "weight_decay", &o->weight_decay, 1);
    nb__optim_add_hyper(o, "momentum", &o->momentum, 1);
    nb__optim_add_hyper(o, "centered", &o->centered, 1);
    o->update = rmsprop_update;
    o->prepare = rmsprop_prepare;
    o->batch_kind = NB_OPTIM_RMSPROP;
    return o;
}
