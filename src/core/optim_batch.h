/* Internal: a fused optimizer step over many parameters of one device and dtype, as a device
 * backend receives it (nb_backend.fused_optim). Plain C, also read by the CUDA kernels. */
#ifndef NB_OPTIM_BATCH_H
#define NB_OPTIM_BATCH_H

#include <stdbool.h>
#include <stdint.h>

/* One parameter: its data, gradient (contiguous, the parameter's dtype) and state buffers (NULL
 * where unused), with the per-parameter scalars of its step. */
typedef struct nb_optim_entry {
    void *p;
    const void *g;
    void *buf[3];
    int64_t n;
    double step_size, bias2_sqrt; /* Adam(W): lr / (1 - beta1^t), sqrt(1 - beta2^t) */
    bool first;                   /* SGD: the momentum buffer starts from this gradient */
} nb_optim_entry;

enum { NB_OPTIM_SGD = 0, NB_OPTIM_ADAM, NB_OPTIM_ADAMW, NB_OPTIM_RMSPROP };

typedef struct nb_optim_batch {
    int kind;  /* NB_OPTIM_* */
    int dtype; /* nb_dtype: float32 or float64 */
    const nb_optim_entry *e;
    int count;
    double lr, momentum, dampening, weight_decay, beta1, beta2, eps, alpha;
    bool nesterov, centered;
} nb_optim_batch;

#endif
