/* nabla/optim.h: optimizers, gradient clipping and learning-rate schedules (torch.optim).
 *
 * An optimizer holds its own references to a list of parameters (leaf tensors that require grad,
 * float32 or float64, contiguous, on the CPU) in one parameter group. nb_optim_step applies
 * exactly PyTorch 1.13's update (torch.optim's single-tensor path) to every parameter whose grad
 * is set, skipping those whose grad is NULL; it runs under no-grad and changes the parameters in
 * place (bumping their version). Per-parameter state (momentum and moment buffers) is created at
 * a parameter's first step, in the parameter's dtype.
 *
 * State save/load: nb_optim_state_dict writes PyTorch's state dict, flattened, into a tensor map:
 *   <prefix>state.<i>.step            float32 0-dim (Adam, AdamW, RMSprop)
 *   <prefix>state.<i>.<buffer>        momentum_buffer, exp_avg, exp_avg_sq, max_exp_avg_sq,
 *                                     square_avg, grad_avg (parameter i's shape and dtype)
 *   <prefix>param_groups.0.<hyper>    float64 0-dim (betas: float64 [2]; bools as 0/1)
 * and the metadata key "<prefix>optimizer" = "sgd" | "adam" | "adamw" | "rmsprop".
 * nb_optim_load_state_dict validates everything (kind, every hyper-parameter present, every
 * buffer present with the parameter's shape, no state for a parameter index that does not exist)
 * before changing anything; a failing load leaves the optimizer as it was.
 *
 * Thread safety: an optimizer and its scheduler are used from one thread at a time.
 */
#ifndef NABLA_OPTIM_H
#define NABLA_OPTIM_H

#include "nabla/io.h"
#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nb_optim nb_optim;

typedef struct nb_sgd_params {
    double lr;           /* default 0.01 (torch requires one; nabla picks a common value) */
    double momentum;     /* default 0 */
    double dampening;    /* default 0 */
    double weight_decay; /* default 0: L2 penalty added to the gradient */
    bool nesterov;       /* default false; needs momentum > 0 and dampening == 0 */
} nb_sgd_params;

typedef struct nb_adam_params {
    double lr;           /* default 1e-3 */
    double beta1, beta2; /* default 0.9, 0.999; each in [0, 1) */
    double eps;          /* default 1e-8 */
    double weight_decay; /* default 0 for Adam (L2 in the gradient), 1e-2 for AdamW (decoupled) */
    bool amsgrad;        /* default false: use the running max of the second moments */
} nb_adam_params;

typedef struct nb_rmsprop_params {
    double lr;           /* default 1e-2 */
    double alpha;        /* default 0.99: smoothing constant, in [0, 1] */
    double eps;          /* default 1e-8 */
    double weight_decay; /* default 0 */
    double momentum;     /* default 0 */
    bool centered;       /* default false: normalise by the estimated variance */
} nb_rmsprop_params;

NB_API nb_sgd_params nb_sgd_params_default(void);
/* Adam's defaults (weight_decay 0). */
NB_API nb_adam_params nb_adam_params_default(void);
/* AdamW's defaults (weight_decay 1e-2). */
NB_API nb_adam_params nb_adamw_params_default(void);
NB_API nb_rmsprop_params nb_rmsprop_params_default(void);

/* Constructors: params is an array of n >= 1 tensors (borrowed; the optimizer retains them);
 * p NULL means the defaults. NULL on failure: a NULL, non-leaf, non-float, non-contiguous, non-CPU
 * or not-requiring-grad parameter, or a hyper-parameter out of range (negative lr, eps,
 * momentum or weight decay; betas outside [0, 1); nesterov without momentum or with dampening). */
NB_API nb_optim *nb_optim_sgd(nb_tensor *const *params, int n, const nb_sgd_params *p);
NB_API nb_optim *nb_optim_adam(nb_tensor *const *params, int n, const nb_adam_params *p);
NB_API nb_optim *nb_optim_adamw(nb_tensor *const *params, int n, const nb_adam_params *p);
NB_API nb_optim *nb_optim_rmsprop(nb_tensor *const *params, int n, const nb_rmsprop_params *p);
NB_API void nb_optim_free(nb_optim *opt);

/* One update of every parameter that has a grad. */
NB_API nb_status nb_optim_step(nb_optim *opt);
/* Sets every parameter's grad to NULL (PyTorch 2's zero_grad(set_to_none=True)). */
NB_API nb_status nb_optim_zero_grad(nb_optim *opt);
/* on = true: the optimizer steps during nb_backward instead of in nb_optim_step, as PyTorch's
 * recipe with register_post_accumulate_grad_hook ("optimizer step in backward"). As soon as a
 * backward has given one of its parameters its whole gradient (from every use in the graph, added
 * to any grad already set), that parameter gets its update and its grad is set back to NULL. So
 * no parameter's gradient outlives its update (peak memory drops by up to the gradients' size),
 * and nb_optim_step finds no grad and does nothing. With plain SGD (no momentum, no weight
 * decay), a parameter used once, as the weight of nb_linear or an operand of a 2-D product
 * (nb_mm, nb_matmul, nb_addmm), gets no gradient tensor at all: the product is accumulated into
 * it (weight += -lr * g^T x, in one GEMM), which saves writing and reading the gradient.
 * Consequences, as in PyTorch's recipe: gradients cannot be clipped or read after backward; a
 * backward that fails part-way leaves the parameters it reached updated; a graph kept with
 * NB_RETAIN_GRAPH whose saved tensors include an updated parameter refuses a second backward.
 * A parameter can belong to one such optimizer at a time (an error names it otherwise).
 * on = false restores the usual behaviour. */
NB_API nb_status nb_optim_step_in_backward(nb_optim *opt, bool on);
NB_API double nb_optim_get_lr(const nb_optim *opt);
/* lr < 0 is an error. */
NB_API nb_status nb_optim_set_lr(nb_optim *opt, double lr);
NB_API int nb_optim_num_params(const nb_optim *opt);

NB_API nb_status nb_optim_state_dict(const nb_optim *opt, nb_tensor_map *m, const char *prefix);
NB_API nb_status nb_optim_load_state_dict(nb_optim *opt, const nb_tensor_map *m, const char *prefix);

/* ---- gradient clipping (torch.nn.utils) -------------------------------------------------- */

/* Scales the grads of params (those that have one) by min(1, max_norm / (total + 1e-6)), where
 * total is the norm_type-norm of all grads together (norm_type INFINITY: the max-abs). Writes the
 * total norm (before clipping) to *total_norm_out when it is not NULL (0 when no grad is set).
 * With total_norm_out NULL and every grad on one GPU, the coefficient is computed there and
 * nothing is read back: the call does not wait for the GPU (as PyTorch's). max_norm < 0 or
 * norm_type <= 0 is an error. */
NB_API nb_status nb_clip_grad_norm_(nb_tensor *const *params, int n, double max_norm,
                                    double norm_type, double *total_norm_out);
/* Clamps every grad into [-clip, clip]; clip < 0 is an error. */
NB_API nb_status nb_clip_grad_value_(nb_tensor *const *params, int n, double clip);

/* ---- learning-rate schedules (torch.optim.lr_scheduler) ---------------------------------- */

/* A schedule attached to an optimizer (borrowed: it must outlive the scheduler). Creating one
 * does torch's initial step: the optimizer's lr becomes the schedule's value at epoch 0.
 * nb_lr_scheduler_step advances one epoch (or one batch, for one-cycle) and sets the lr, with
 * torch's own (recursive where torch's is) formulas. */
typedef struct nb_lr_scheduler nb_lr_scheduler;

/* StepLR: lr * gamma every step_size epochs (step_size >= 1). */
NB_API nb_lr_scheduler *nb_lr_step(nb_optim *opt, int64_t step_size, double gamma);
/* MultiStepLR: lr * gamma at each milestone (n of them; repeats multiply again). */
NB_API nb_lr_scheduler *nb_lr_multistep(nb_optim *opt, const int64_t *milestones, int n, double gamma);
/* CosineAnnealingLR (T_max >= 1). */
NB_API nb_lr_scheduler *nb_lr_cosine(nb_optim *opt, int64_t t_max, double eta_min);
/* LinearLR: the factor goes linearly from start_factor (in (0, 1]) to end_factor (in [0, 1])
 * over total_iters (>= 1) steps, as torch's LinearLR (linear warm-up). */
NB_API nb_lr_scheduler *nb_lr_linear(nb_optim *opt, double start_factor, double end_factor,
                                     int64_t total_iters);

typedef enum nb_anneal { NB_ANNEAL_COS = 0, NB_ANNEAL_LINEAR = 1 } nb_anneal;
typedef struct nb_onecycle_params {
    double max_lr;           /* required (> 0) */
    int64_t total_steps;     /* required (>= 2) */
    double pct_start;        /* default 0.3, in [0, 1] */
    nb_anneal anneal;        /* default NB_ANNEAL_COS */
    double div_factor;       /* default 25: initial lr = max_lr / div_factor */
    double final_div_factor; /* default 1e4: min lr = initial lr / final_div_factor */
} nb_onecycle_params;
NB_API nb_onecycle_params nb_onecycle_params_default(double max_lr, int64_t total_steps);
/* OneCycleLR without momentum cycling (torch's cycle_momentum=False), two phases. Stepping past
 * total_steps is an error, as in torch. */
NB_API nb_lr_scheduler *nb_lr_onecycle(nb_optim *opt, const nb_onecycle_params *p);

NB_API void nb_lr_scheduler_free(nb_lr_scheduler *s);
NB_API nb_status nb_lr_scheduler_step(nb_lr_scheduler *s);
/* The lr the last step set (torch's get_last_lr()[0]). */
NB_API double nb_lr_scheduler_get_last_lr(const nb_lr_scheduler *s);
/* Writes <prefix>last_epoch, <prefix>step_count (int64 0-dim) and <prefix>base_lr (float64). */
NB_API nb_status nb_lr_scheduler_state_dict(const nb_lr_scheduler *s, nb_tensor_map *m, const char *prefix);
NB_API nb_status nb_lr_scheduler_load_state_dict(nb_lr_scheduler *s, const nb_tensor_map *m,
                                                 const char *prefix);

#ifdef __cplusplus
}
#endif
#endif
