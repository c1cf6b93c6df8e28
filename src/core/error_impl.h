/* Internal: setting the per-thread error. */
#ifndef NB_ERROR_IMPL_H
#define NB_ERROR_IMPL_H

#include <stdio.h>
#include <stdlib.h>

#include "nabla/core.h"

/* Sets the calling thread's error and returns status, so a failing path reads
 * `return nb__err(NB_ERR_SHAPE, "matmul: ...", ...);`. */
nb_status nb__err(nb_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same, returning NULL for functions that return a pointer. */
void *nb__err_null(nb_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Re-raises the thread's error with "<prefix>: " in front of its message (unless the message
 * already begins so) and returns its status (NB_ERR_INTERNAL when none was set): a caller names
 * itself in front of the error of a call it made. */
nb_status nb__err_prefix(const char *prefix);

/* An internal invariant: a failure is a bug in nabla, never something a caller can cause. */
#define NB_ASSERT(cond)                                                                          \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "nabla: internal error: %s (%s:%d)\n", #cond, __FILE__, __LINE__);  \
            abort();                                                                             \
        }                                                                                        \
    } while (0)

/* Propagates a failing status. */
#define NB_TRY(expr)                                                                             \
    do {                                                                                         \
        nb_status nb__s = (expr);                                                                \
        if (nb__s != NB_OK) return nb__s;                                                        \
    } while (0)

#endif
