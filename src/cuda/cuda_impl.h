/* Internal: the CUDA device. C files of the backend include this; kernels (.cu, compiled as
 * CUDA C++) see only kernels.h, which has no C11-only headers. */
#ifndef NB_CUDA_IMPL_H
#define NB_CUDA_IMPL_H

#include <cuda_runtime.h>

#include "core/devpool_impl.h"
#include "core/dispatch_impl.h"
#include "core/error_impl.h"
#include "cuda/kernels.h"
#include "nabla/cuda.h"

#define NB_CUDA_MAX_DEVICES 16

struct nb_stream {
    cudaStream_t handle; /* NULL: the legacy default stream */
    int device;
    bool owned;
    nb_stream *next_spare; /* graph.c's pool of capture streams */
};

/* Sets the error for a failed CUDA call: "what: <CUDA's message> (<error name>)"; out-of-memory
 * errors become NB_ERR_OOM, the rest NB_ERR_DEVICE. Clears CUDA's sticky last error. */
nb_status nb__cuda_err(cudaError_t e, const char *what);
#define NB_CUDA_TRY(call, what)                                                                  \
    do {                                                                                         \
        cudaError_t nb__e = (call);                                                              \
        if (nb__e != cudaSuccess) return nb__cuda_err(nb__e, what);                              \
    } while (0)

/* Device count, cached after the first call (0 when there is no driver or no GPU). */
int nb__cuda_count(void);
/* NB_OK when index names a present device, else NB_ERR_DEVICE naming it ("what: ..."). */
nb_status nb__cuda_check_index(int index, const char *what);
/* The calling thread's current stream of a device (a valid index). */
nb_stream *nb__cuda_stream(int index);
/* Makes index current on the calling thread for a backend call; returns the previous device. */
int nb__cuda_enter(int index);
void nb__cuda_leave(int prev);

/* The caching pool of a device (created on first use; NULL with an error when out of memory). */
nb_devpool *nb__cuda_pool(int index);
/* CUDA graph capture (src/cuda/graph.c). Whether the calling thread is capturing device index. */
bool nb__cuda_capturing(int index);
/* The device the calling thread is capturing, or -1. */
int nb__cuda_capturing_any(void);
/* An NB_ERR_UNSUPPORTED error "op: cuda:N is capturing a CUDA graph, and <why>", which also
 * spoils the capture (capture_end reports it). */
nb_status nb__cuda_capture_refuse(int index, const char *op, const char *why);
/* While capturing: n bytes of pinned host memory kept for the graph's life, for a captured copy
 * from the host (it is read again at every replay). */
void *nb__cuda_graph_host_buffer(int index, size_t n);
/* While capturing: the device verdict slot (lowest bad position) of an index check of op over
 * idx against [0, size) along dim, reported after a replay by nb_cuda_graph_check. */
unsigned long long *nb__cuda_graph_check_slot(int index, nb_op op, int64_t size, int64_t dim,
                                              unsigned long long **sticky);
/* While capturing: fn(ctx) runs at capture_end before the capture closes, then drop(ctx). */
nb_status nb__cuda_capture_defer(int index, nb_status (*fn)(void *ctx), void (*drop)(void *ctx), void *ctx);
/* cudaMalloc in relaxed capture mode (allowed while a capture runs; not captured). */
void *nb__cuda_relaxed_malloc(size_t n, cudaError_t *err);

/* The caching allocator of a device (created on first use). */
void *nb__cuda_alloc(int index, size_t nbytes);
void nb__cuda_free(int index, void *p, size_t nbytes);
nb_status nb__cuda_memory_stats(int index, nb_memory_stats *out);
void nb__cuda_reset_peak_stats(int index);
/* Returns the idle pinned host blocks whose copies have completed (src/cuda/pinned.c). */
void nb__cuda_pinned_empty_cache(void);

/* A kernel-side description of a tensor whose strides follow out's shape (0 where broadcast). */
nb_cuda_desc nb__cuda_desc(const nb_tensor *t, const nb_tensor *like);

#endif
