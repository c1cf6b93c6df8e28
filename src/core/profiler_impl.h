/* Internal: the op profiler's hooks (include/nabla/profiler.h). A timed region is
 *   int64_t t0 = nb__prof_begin();  ...work...  nb__prof_end(slot, t0, device);
 * slot is an nb_op, or NB_OP_COUNT + an nb__prof_extra for regions that are not kernels. */
#ifndef NB_PROFILER_IMPL_H
#define NB_PROFILER_IMPL_H

#include <stdatomic.h>
#include <stdint.h>

#include "nabla/core.h"
#include "nabla/profiler.h"

enum nb__prof_extra { NB_PROF_OPTIM_STEP, NB_PROF_EXTRA_COUNT };

/* The profiler's mode, -1 while it is stopped (src/core/profiler.c). */
extern atomic_int nb__prof_mode;
/* The start of a region while the profiler runs (src/core/profiler.c). */
int64_t nb__prof_begin_on(void);

/* 0 when the profiler is off (then nb__prof_end does nothing); otherwise the start time, or -1
 * inside another region of this thread. Every non-zero begin must be paired with an end. Off, it
 * costs one relaxed atomic load: it sits on every kernel call's path. */
static inline int64_t nb__prof_begin(void)
{
    return atomic_load_explicit(&nb__prof_mode, memory_order_relaxed) < 0 ? 0 : nb__prof_begin_on();
}
/* Ends a region begun by nb__prof_begin; dev: where its work runs (NB_PROFILE_SYNC waits for it). */
void nb__prof_end(int slot, int64_t t0, nb_device dev);

#endif
