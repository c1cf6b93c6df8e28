/* Internal: the op profiler's hooks (include/nabla/profiler.h). A timed region is
 *   int64_t t0 = nb__prof_begin();  ...work...  nb__prof_end(slot, t0, device);
 * slot is an nb_op, or NB_OP_COUNT + an nb__prof_extra for regions that are not kernels. */
#ifndef NB_PROFILER_IMPL_H
#define NB_PROFILER_IMPL_H

#include <stdint.h>

#include "nabla/core.h"
#include "nabla/profiler.h"

enum nb__prof_extra { NB_PROF_OPTIM_STEP, NB_PROF_EXTRA_COUNT };

/* 0 when the profiler is off (then nb__prof_end does nothing); otherwise the start time, or -1
 * inside another region of this thread. Every non-zero begin must be paired with an end. */
int64_t nb__prof_begin(void);
/* Ends a region begun by nb__prof_begin; dev: where its work runs (NB_PROFILE_SYNC waits for it). */
void nb__prof_end(int slot, int64_t t0, nb_device dev);

#endif
