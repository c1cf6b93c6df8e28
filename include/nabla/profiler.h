/* nabla/profiler.h: where a program's time goes, op by op (torch.profiler's table, in small).
 *
 * Between nb_profiler_start and nb_profiler_stop, every kernel call is timed on the host's
 * monotonic clock and counted under its op's PyTorch name ("conv2d_backward_weight", "bmm",
 * "add"...), and every nb_optim_step (and each parameter's update in backward, with
 * nb_optim_step_in_backward) under "optimizer_step". Only the outermost timed region of a thread
 * counts (an op called inside an optimizer step is part of the step), so the rows add up to
 * at most the wall time between start and stop; the rest is the framework's own work (autograd
 * bookkeeping, allocation, views) and the caller's.
 *
 * On a GPU, kernels are queued and return at once, so by default a row holds the time to queue
 * them. NB_PROFILE_SYNC waits for the device after each call (as CUDA_LAUNCH_BLOCKING=1 does), so
 * that each row holds the kernel's own time, at the price of the overlap it removes.
 *
 * The counters are process-wide and safe to update from several threads (a data loader's
 * workers); with the profiler stopped, the cost per op is one atomic load. */
#ifndef NABLA_PROFILER_H
#define NABLA_PROFILER_H

#include <stdint.h>
#include <stdio.h>

#include "nabla/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nb_profile_mode {
    NB_PROFILE_HOST = 0, /* host time per call; GPU kernels are only queued */
    NB_PROFILE_SYNC = 1, /* wait for the device after each call on a GPU */
} nb_profile_mode;

/* One row: a name, how many calls, their total time. */
typedef struct nb_profile_entry {
    const char *name; /* static storage */
    int64_t calls;
    double total_ms;
} nb_profile_entry;

/* Clears the counters and starts timing. NB_ERR_INVALID_ARG on an unknown mode. */
NB_API nb_status nb_profiler_start(nb_profile_mode mode);
/* Stops timing; the counters keep their values until the next start. */
NB_API void nb_profiler_stop(void);
/* Wall time from start to stop (or to now, while running), in ms; 0 before any start. */
NB_API double nb_profiler_wall_ms(void);
/* Copies up to max rows with at least one call into out, the longest total first, and returns how
 * many rows there are in all (so a call with max 0 sizes the array). */
NB_API int nb_profiler_entries(nb_profile_entry *out, int max);
/* Prints the table: per row its name, calls, total ms, ms per call and share of the wall time,
 * then the untimed rest. NB_ERR_INVALID_ARG when f is NULL. */
NB_API nb_status nb_profiler_print(FILE *f);

#ifdef __cplusplus
}
#endif

#endif
