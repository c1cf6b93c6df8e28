/* Internal: the optimizer struct shared by the optimizer files and the schedulers. */
#ifndef NB_OPTIM_IMPL_H
#define NB_OPTIM_IMPL_H

#include <math.h>

#include "core/optim_batch.h"
#include "core/tensor_impl.h"
#include "nabla/optim.h"

/* Whether v, read from a state dict, is a whole count in [lo, 2^62]: one a run reaches, and
 * safe to convert to int64_t. */
static inline bool nb__optim_count_ok(double v, double lo) { return v >= lo && v <= 0x1p62 && v == floor(v); }

#define NB_OPTIM_MAX_BUFS 3
#define NB_OPTIM_MAX_HYPER 8

typedef enum { NB__SGD, NB__ADAM, NB__ADAMW, NB__RMSPROP } nb__optim_kind;

/* One parameter's state: buffers are contiguous, in the parameter's dtype, NULL until needed. */
typedef struct nb__pstate {
    bool started;  /* the parameter has had a step (its state exists, as in torch's dict) */
    int64_t step;
    nb_tensor *buf[NB_OPTIM_MAX_BUFS];
} nb__pstate;

/* A hyper-parameter as the state dict names it; betas is the one pair. */
typedef struct nb__hyper {
    const char *name;
    double *v;
    int count; /* 1, or 2 for betas */
} nb__hyper;

struct nb_optim {
    nb__optim_kind kind;
    const char *name; /* "sgd", "adam"... */
    int n;
    nb_tensor **params; /* owned references */
    nb__pstate *st;
    double lr, momentum, dampening, weight_decay, nesterov;   /* SGD (nesterov as 0/1) */
    double betas[2], eps, amsgrad;                            /* Adam(W) */
    double alpha, centered;                                   /* RMSprop (+ momentum, eps) */
    bool has_step;                                            /* the state has a step count */
    int nbuf;
    const char *buf_names[NB_OPTIM_MAX_BUFS];
    bool buf_used[NB_OPTIM_MAX_BUFS]; /* configured: e.g. max_exp_avg_sq only with amsgrad */
    int nhyper;
    nb__hyper hyper[NB_OPTIM_MAX_HYPER];
    int batch_kind; /* NB_OPTIM_*: the fused device step's formula */
    /* The state work of one step of parameter i (buffers made, step counted) and its entry's
     * buffers and scalars; p, g and n are the caller's to fill. */
    nb_status (*prepare)(nb_optim *o, int i, nb_optim_entry *e);
    /* one update of parameter p (contiguous CPU) with grad g (contiguous, p's dtype) */
    nb_status (*update)(nb_optim *o, int i, nb_tensor *p, const nb_tensor *g);
};

/* Allocates the optimizer shell with validated, retained params (NULL + error on failure). */
nb_optim *nb__optim_new(const char *op, nb_tensor *const *params, int n);
void nb__optim_add_hyper(nb_optim *o, const char *name, double *v, int count);
/* Makes parameter i's buffer b (zero-filled) if it does not exist yet. */
nb_status nb__optim_ensure_buf(nb_optim *o, int i, int b);
/* The threads for a loop over n elements (1 below the grain). */
int nb__optim_threads(int64_t n);

/* clip_grad_norm_'s coefficient min(1, max_norm / (total + 1e-6)) as a 0-dim tensor on acc's
 * device and in its dtype, from acc = sum |g|^p (or max |g| when p is infinite), total = acc^(1/p):
 * computed there, with no host read, so queued device work runs on (as PyTorch's clip_grad_norm_).
 * NaN gives NaN, an infinite total 0. Scope-owned; NULL on failure. */
nb_tensor *nb__clip_coef(const nb_tensor *acc, double p, double max_norm);

#endif
