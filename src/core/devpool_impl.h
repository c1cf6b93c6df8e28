/* Internal: a caching pool for device memory, the design of PyTorch's CUDA caching allocator,
 * written without any device API so that its bookkeeping runs (and is tested) on any machine.
 *
 * - Sizes are rounded up to 512 bytes. Requests up to 1 MiB ("small") are cut from 2 MiB
 *   segments; larger ones from segments of 20 MiB (requests under 10 MiB) or of the request
 *   rounded up to 2 MiB.
 * - A free block is reused for a later request of the same stream that fits (best fit), and split
 *   when the rest is worth keeping (512 bytes small, over 1 MiB large). Freed neighbours in a
 *   segment merge again.
 * - Stream safety: a block belongs to the stream it was allocated on; work on that stream is
 *   ordered, so its memory is reusable as soon as it is freed. A block also used on other streams
 *   (nb__devpool_record_stream) is reused only after an event recorded on each of those streams
 *   at free time has completed.
 * - When the device refuses memory, the pool releases its cached whole segments and tries once
 *   more; then the request fails with an out-of-memory error that names the size asked for and
 *   what is in use. The pool and every live block survive it.
 * - Private pools (nb__devpool_private_begin): the memory of a captured CUDA graph, kept apart
 *   from everything else until the graph is released.
 * Thread-safe (one mutex). */
#ifndef NB_DEVPOOL_IMPL_H
#define NB_DEVPOOL_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nabla/core.h"

typedef struct nb_devpool_ops {
    const char *device_name; /* "cuda:0": in error messages */
    void *ctx;
    /* The device's own allocation: NULL when it has no memory (no error set). */
    void *(*raw_alloc)(void *ctx, size_t nbytes);
    void (*raw_free)(void *ctx, void *p, size_t nbytes);
    /* Cross-stream reuse: an event recorded now on `stream`, whether it has completed, and its
     * release. May be NULL when streams are never recorded. */
    void *(*event_record)(void *ctx, void *stream);
    bool (*event_done)(void *ctx, void *event);
    void (*event_free)(void *ctx, void *event);
    /* Optional: the device's free and total memory, for the out-of-memory message. */
    bool (*mem_info)(void *ctx, size_t *free_bytes, size_t *total_bytes);
} nb_devpool_ops;

typedef struct nb_devpool_stats {
    size_t allocated;          /* bytes in blocks handed out (rounded sizes) */
    size_t reserved;           /* bytes in segments obtained from the device */
    size_t peak_allocated, peak_reserved;
    uint64_t n_allocs, n_frees; /* calls to nb__devpool_alloc / free that succeeded */
    uint64_t n_raw_allocs, n_raw_frees;
    uint64_t n_ooms;           /* requests that failed for lack of memory */
    size_t private_reserved;   /* of `reserved`, bytes in segments of private pools (capturing or
                                * ended) not yet released */
} nb_devpool_stats;

typedef struct nb_devpool nb_devpool;

#define NB_DEVPOOL_ROUND ((size_t)512)
#define NB_DEVPOOL_SMALL ((size_t)1 << 20)
#define NB_DEVPOOL_SMALL_SEGMENT ((size_t)2 << 20)
#define NB_DEVPOOL_LARGE_SEGMENT ((size_t)20 << 20)
#define NB_DEVPOOL_MIN_LARGE_ALLOC ((size_t)10 << 20)

/* ops is copied. NULL when out of host memory (error set). */
nb_devpool *nb__devpool_create(const nb_devpool_ops *ops);
/* Returns every segment to the device (live blocks included: call it at shutdown only). */
void nb__devpool_destroy(nb_devpool *pool);
/* A block of at least nbytes for work on `stream` (an opaque key; NULL is a stream too). NULL
 * with NB_ERR_OOM set when the device has no memory left. */
void *nb__devpool_alloc(nb_devpool *pool, size_t nbytes, void *stream);
/* Returns a block. NB_ERR_INVALID_ARG for a pointer the pool did not hand out. */
nb_status nb__devpool_free(nb_devpool *pool, void *p);
/* Marks block p (live) as used by work queued on `stream` too. */
nb_status nb__devpool_record_stream(nb_devpool *pool, void *p, void *stream);
/* Returns every cached whole segment to the device. */
void nb__devpool_empty_cache(nb_devpool *pool);
void nb__devpool_stats(nb_devpool *pool, nb_devpool_stats *out);
/* The peaks start again from what is allocated and reserved now. */
void nb__devpool_reset_peak(nb_devpool *pool);
/* Private pools, for CUDA graph capture (PyTorch's graph memory pools). Between begin and end,
 * every allocation on `stream` is served from the private pool's own segments (new ones are
 * obtained for it), and its blocks freed return to it only: a private pool's free blocks are
 * never given to any other allocation, so the memory a captured graph uses stays its own for as
 * long as the graph lives, and replays find it where the capture left it. While any private pool
 * is between begin and end ("capturing"), the pool calls nothing of the device but raw_alloc:
 * no event is recorded, queried or freed, and nothing is returned to the device (a request the
 * device refuses fails at once with the usual out-of-memory error, less the device's free memory,
 * which mem_info is not asked for; nb__devpool_empty_cache does nothing). A block freed then that
 * other streams used (record_stream) is set aside and goes through the usual event-guarded path
 * at end. Returns the private pool's id (> 0), or 0 with
 * an error set (out of host memory; `stream` already has a private pool between begin and end). */
int nb__devpool_private_begin(nb_devpool *pool, void *stream);
/* Ends the routing of id's stream; its blocks and segments stay the private pool's.
 * NB_ERR_INVALID_ARG for an unknown id, or one already ended. */
nb_status nb__devpool_private_end(nb_devpool *pool, int id);
/* The graph is gone: id's whole free segments are returned to the device, and its other
 * segments become ordinary cached memory of their stream (their live blocks, tensors made
 * during the capture that are still alive, are freed as any other). While another private pool
 * is capturing, the whole free segments too become ordinary cached memory instead (nothing is
 * returned to the device then). NB_ERR_INVALID_ARG for an unknown id, or one still between
 * begin and end. */
nb_status nb__devpool_private_release(nb_devpool *pool, int id);
/* The rounded size a request of nbytes occupies. */
size_t nb__devpool_round(size_t nbytes);

#endif
