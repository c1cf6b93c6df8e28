/* Internal: switches of the losses (src/nn/loss.c) for tests. */
#ifndef NB_LOSS_IMPL_H
#define NB_LOSS_IMPL_H

#include <stdbool.h>

/* Whether nb_cross_entropy and nb_nll_loss turn class-index targets into their safe index, ignore
 * mask and count with ops on the targets' device (the path every non-CPU device takes: nothing is
 * read back to the host) on the CPU too, where they would otherwise scan the targets on the host.
 * On the CPU it also turns off the fused cross entropy op, so that the ops are those a GPU runs.
 * Process-wide (an atomic flag: any thread may set it; it then applies to every thread), default
 * off; for tests, which set it back to off when done. */
void nb__loss_device_targets(bool on);

#endif
