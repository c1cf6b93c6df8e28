/* nabla/cuda.h: NVIDIA GPUs, as torch.cuda gives them: devices and their properties, the current
 * device, streams and events, and the caching allocator.
 *
 * Work on a GPU is asynchronous: an op on CUDA tensors is queued on the current stream of the
 * tensors' device and returns at once. The host waits only when it must: reading values back
 * (nb_tensor_read, nb_item, nb_to a CPU device), nb_cuda_synchronize, a stream's or an event's
 * synchronize. Each device has a default stream (CUDA's legacy default stream, as PyTorch's);
 * streams made with nb_cuda_stream_create do not synchronise with it implicitly: order work
 * across streams with events (nb_cuda_stream_wait_event).
 *
 * Every function exists in every build. Without the CUDA backend built in (or without a GPU),
 * nb_cuda_device_count is 0 and the others fail with NB_ERR_DEVICE (nb_tensor_is_pinned is then
 * false, and nb_to_non_blocking is nb_to). */
#ifndef NABLA_CUDA_H
#define NABLA_CUDA_H

#include "nabla/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether this build has the CUDA backend (a GPU may still be absent). */
NB_API bool nb_cuda_is_built(void);

typedef struct nb_cuda_device_props {
    char name[256];
    size_t total_memory;      /* bytes */
    int major, minor;         /* compute capability */
    int multi_processor_count;
} nb_cuda_device_props;

NB_API nb_status nb_cuda_get_device_properties(int index, nb_cuda_device_props *out);
/* The CUDA runtime's and driver's versions (e.g. 13000 for 13.0); 0 when not available. */
NB_API int nb_cuda_runtime_version(void);
NB_API int nb_cuda_driver_version(void);
/* cuDNN's version as cudnnGetVersion gives it (e.g. 91000 for 9.10.0); 0 when nabla was built
 * without cuDNN (or without CUDA). */
NB_API int nb_cuda_cudnn_version(void);

/* The calling thread's current device (0 at first), and changing it. */
NB_API int nb_cuda_current_device(void);
NB_API nb_status nb_cuda_set_device(int index);

/* `with torch.cuda.device(i)`: enter makes index current and remembers the previous device; exit
 * restores it. Enter with index -1 leaves the current device unchanged (exit is then a no-op). */
typedef struct nb_cuda_device_guard {
    int prev;
    bool active;
} nb_cuda_device_guard;
NB_API nb_status nb_cuda_device_guard_enter(nb_cuda_device_guard *g, int index);
NB_API void nb_cuda_device_guard_exit(nb_cuda_device_guard *g);

/* Waits for all work queued on device index (-1: the current device). */
NB_API nb_status nb_cuda_synchronize(int index);

/* float32 matrix products on TF32 tensor cores (about 10 bits of mantissa in the products, much
 * faster): off by default, as torch.backends.cuda.matmul.allow_tf32. Process-wide. */
NB_API void nb_cuda_set_allow_tf32(bool allow);
NB_API bool nb_cuda_get_allow_tf32(void);
/* float32 convolutions (cuDNN) on TF32 tensor cores: on by default, as
 * torch.backends.cudnn.allow_tf32. Process-wide; the algorithm cache keeps the two apart. */
NB_API void nb_cuda_set_allow_tf32_conv(bool allow);
NB_API bool nb_cuda_get_allow_tf32_conv(void);

/* ---- streams ------------------------------------------------------------------------------- */

typedef struct nb_stream nb_stream;

/* A new stream on device index (-1: current). Freed with nb_cuda_stream_free after its work is
 * no longer needed (freeing waits for nothing; queued work still completes). */
NB_API nb_stream *nb_cuda_stream_create(int index);
NB_API void nb_cuda_stream_free(nb_stream *s);
/* The device's default stream (owned by nabla, never freed). */
NB_API nb_stream *nb_cuda_default_stream(int index);
/* The calling thread's current stream of the device (the default stream at first). */
NB_API nb_stream *nb_cuda_current_stream(int index);
/* Makes s the calling thread's current stream of s's device; returns the previous one, or NULL
 * with an error. `with torch.cuda.stream(s)` is prev = set(s); ...; set(prev). */
NB_API nb_stream *nb_cuda_set_stream(nb_stream *s);
NB_API int nb_cuda_stream_device(const nb_stream *s);
NB_API nb_status nb_cuda_stream_synchronize(nb_stream *s);
/* True when all work queued on s has completed (false also on error). */
NB_API bool nb_cuda_stream_query(nb_stream *s);

/* ---- events -------------------------------------------------------------------------------- */

typedef struct nb_event nb_event;

/* enable_timing: the event can be used with nb_cuda_event_elapsed_ms (slightly costlier). The
 * event belongs to the device current when it is first recorded. */
NB_API nb_event *nb_cuda_event_create(bool enable_timing);
NB_API void nb_cuda_event_free(nb_event *e);
/* Records e on s (NULL: the current stream of the current device). */
NB_API nb_status nb_cuda_event_record(nb_event *e, nb_stream *s);
NB_API nb_status nb_cuda_event_synchronize(nb_event *e);
/* True when the work before the event's record has completed (false also when not recorded). */
NB_API bool nb_cuda_event_query(nb_event *e);
/* Milliseconds of GPU time between two recorded, completed timing events. */
NB_API nb_status nb_cuda_event_elapsed_ms(const nb_event *start, const nb_event *end, float *ms);
/* Work queued on s after this call waits for e's record. */
NB_API nb_status nb_cuda_stream_wait_event(nb_stream *s, nb_event *e);

/* ---- memory -------------------------------------------------------------------------------- */

/* Tensor memory comes from a caching allocator (PyTorch's design: 2 MiB segments for requests up
 * to 1 MiB, larger segments split and merged, blocks reused per stream). nb_memory_stats_get gives
 * its counters for a cuda device; this returns the cached, unused segments to the device, and the
 * idle pinned host blocks (whose copies have completed) to the system. */
NB_API nb_status nb_cuda_empty_cache(void);
/* Marks t's memory as used by work on s (not t's allocation stream): when t is freed, the memory
 * is reused only after the work queued on s by then has completed. */
NB_API nb_status nb_cuda_record_stream(const struct nb_tensor *t, nb_stream *s);

/* ---- CUDA graphs ---------------------------------------------------------------------------- */

/* torch.cuda.CUDAGraph: the work a piece of code queues on one device, captured once and then
 * replayed with one launch, which removes the host's cost per kernel (a small network's training
 * step is hundreds of launches).
 *
 *   g = nb_cuda_graph_create(0);
 *   (warm up: run the step a few times eagerly, on nb_cuda_graph_stream(g) at least once, so
 *    that libraries' lazy set-up, cuDNN's algorithm search and optimizer state happen outside)
 *   nb_optim_zero_grad(opt);
 *   nb_cuda_graph_capture_begin(g);
 *   loss = step(static_x, static_y);          (forward, loss, backward, optimizer step)
 *   nb_cuda_graph_capture_end(g);
 *   for each batch: nb_copy_(static_x, x); nb_copy_(static_y, y); nb_cuda_graph_replay(g);
 *                   nb_item(loss, &v);        (the loss tensor made in the capture)
 *
 * begin waits for the device, then makes the graph's own stream the thread's current stream of
 * the device until end: the ops run nothing, they are recorded. Replays run on the current
 * stream at the time of the call and read and write the same memory the capture used: tensors
 * made during the capture (activations, gradients, the loss) live in a memory pool kept for the
 * graph until nb_cuda_graph_free, and a replay updates the ones still alive; tensors made before
 * (parameters, optimizer state, static inputs) must stay alive, at the same place, while the
 * graph is replayed. Every value fixed at capture stays fixed: shapes, the learning rate and other
 * hyperparameters, scalars.
 *
 * What cannot be captured fails with NB_ERR_UNSUPPORTED naming the op and "capturing a CUDA
 * graph", and spoils the capture (end then fails with that message): reading values to the host
 * (nb_item, nb_tensor_read, nb_to the CPU), copies from pageable or newly pinned host memory,
 * synchronizing, random numbers (dropout), an optimizer step other than SGD's, SGD's first step
 * with momentum, and a convolution shape or library handle not seen before (cuDNN's algorithm
 * search and handle creation run outside: warm up first). Other errors inside a capture are
 * returned as usual; end the capture and free the graph after one. Losses with class-index targets take a device-side path while capturing. Index ops
 * (gather, index_select: embeddings) cannot report a bad index at the call: a replay skips it,
 * and nb_cuda_graph_check (or the next replay, once the previous one has completed) reports it,
 * naming the op, the value and the size. */
typedef struct nb_cuda_graph nb_cuda_graph;

/* A graph for device index (-1: current), with its capture stream. */
NB_API nb_cuda_graph *nb_cuda_graph_create(int index);
/* The stream the capture runs on (for the warm-up). It belongs to the graph until
 * nb_cuda_graph_free, which gives it back to a pool that later graphs take their streams from
 * (capture streams are never destroyed, as PyTorch's come from its stream pool). */
NB_API nb_stream *nb_cuda_graph_stream(nb_cuda_graph *g);
NB_API nb_status nb_cuda_graph_capture_begin(nb_cuda_graph *g);
NB_API nb_status nb_cuda_graph_capture_end(nb_cuda_graph *g);
/* Queues the captured work on the current stream of the graph's device; returns at once. */
NB_API nb_status nb_cuda_graph_replay(nb_cuda_graph *g);
/* Waits for the last replay and reports a bad index it met (NB_ERR_INVALID_ARG). */
NB_API nb_status nb_cuda_graph_check(nb_cuda_graph *g);
/* Waits for the last replay, then frees the graph and its memory pool (tensors made in the
 * capture and still alive keep their memory until they are freed). Call it on the thread that
 * captured, and not while that thread captures another graph. */
NB_API void nb_cuda_graph_free(nb_cuda_graph *g);
/* torch.cuda.is_current_stream_capturing: whether the calling thread is capturing device index
 * (-1: current). */
NB_API bool nb_cuda_is_capturing(int index);

/* ---- pinned host memory and non-blocking copies ------------------------------------------ */

/* Tensor.pin_memory(): a copy of CPU tensor t (contiguous, same dtype and values) in page-locked
 * host memory (cudaHostAlloc), which the GPU reads by DMA, so that a copy from it to a device can
 * run while the host goes on (nb_to_non_blocking). t itself (a new reference) when it is already
 * pinned. The result is a CPU tensor like any other (every CPU op takes it); autograd sees a copy
 * (CloneBackward0). Pinned blocks are cached and reused (nb_cuda_empty_cache returns the idle
 * ones); a block is reused only after every copy queued from it has completed.
 * Errors: NB_ERR_DEVICE ("pin_memory: ...") when nabla was built without CUDA or no GPU is
 * present (as PyTorch raises), or when t is not on the CPU; NB_ERR_OOM when no page-locked memory
 * is left. */
NB_API struct nb_tensor *nb_tensor_pin_memory(const struct nb_tensor *t);
/* Whether t's memory is pinned host memory (views of a pinned tensor are pinned). False for NULL
 * and in every build without a GPU. */
NB_API bool nb_tensor_is_pinned(const struct nb_tensor *t);
/* t.to(device, non_blocking=True): nb_to, except that the copy of a contiguous pinned CPU tensor
 * to a CUDA device is queued on the current stream of that device and the call returns at once:
 * work queued later on that stream sees the values; the host must not write into t until the
 * copy has completed (synchronize the stream, or an event recorded after the call). The pinned
 * block is not reused by the allocator before the copy completes, even when t is freed at once.
 * Every other copy (pageable or non-contiguous source, device to host, device to device) is
 * synchronous, as nb_to. Errors: those of nb_to. */
NB_API struct nb_tensor *nb_to_non_blocking(const struct nb_tensor *t, nb_device device);

#ifdef __cplusplus
}
#endif
#endif
