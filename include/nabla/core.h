/* nabla/core.h: status codes, errors, dtypes, devices, threads and scopes.
 *
 * Conventions that hold across the whole API (read these once):
 *  - Functions that create a tensor return `nb_tensor *`: a NEW reference on success and NULL on
 *    failure. On failure nb_last_error() holds a message naming the op and the values involved.
 *  - Functions that do not create a tensor return an nb_status (NB_OK == 0 on success).
 *  - Ownership: a returned reference belongs to the innermost open scope of the calling thread
 *    (nb_scope_begin), which releases it at nb_scope_end. With no scope open it belongs to the
 *    caller, who releases it with nb_tensor_free(). nb_tensor_retain() always gives a reference the
 *    caller owns, whether a scope is open or not: use it to keep a tensor past a scope's end.
 *  - Input tensors are borrowed: a function never releases the tensors passed to it.
 *  - Every destructor accepts NULL. Every out-parameter is set (to NULL on failure).
 *  - Thread safety: distinct tensors may be used from distinct threads. Errors, scopes and the
 *    grad mode are per thread. The thread count is process-wide.
 */
#ifndef NABLA_CORE_H
#define NABLA_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define NB_API
#else
#define NB_API __attribute__((visibility("default")))
#endif

#define NB_VERSION_MAJOR 0
#define NB_VERSION_MINOR 1
#define NB_VERSION_PATCH 0
#define NB_MAX_DIMS 8

/* ---- status and errors ------------------------------------------------------------------- */

typedef enum nb_status {
    NB_OK = 0,
    NB_ERR_INVALID_ARG, /* a bad argument: NULL, out-of-range dim, bad value */
    NB_ERR_SHAPE,       /* shapes that do not fit together */
    NB_ERR_DTYPE,       /* a dtype the op does not accept */
    NB_ERR_DEVICE,      /* a device not built in, not present, or two devices mixed */
    NB_ERR_OOM,         /* out of host or device memory */
    NB_ERR_IO,          /* a file could not be read or written */
    NB_ERR_FORMAT,      /* a file's contents are malformed */
    NB_ERR_UNSUPPORTED, /* the op has no kernel for this device or dtype */
    NB_ERR_AUTOGRAD,    /* a misuse of autograd (second backward, modified saved tensor...) */
    NB_ERR_INTERNAL,    /* a bug in nabla */
    NB_ERR_COMM         /* a collective across processes failed, or the ranks disagree (nabla/dist.h) */
} nb_status;

/* The message of the last failure on the calling thread ("" if none). Valid until the next
 * failing call on this thread. */
NB_API const char *nb_last_error(void);
/* The status of the last failure on the calling thread (NB_OK if none). */
NB_API nb_status nb_last_status(void);
NB_API void nb_clear_error(void);
NB_API const char *nb_status_name(nb_status s);
NB_API const char *nb_version(void);

/* ---- dtypes -------------------------------------------------------------------------------- */

typedef enum nb_dtype {
    NB_FLOAT32 = 0,
    NB_FLOAT64,
    NB_INT64,
    NB_INT32,
    NB_UINT8,
    NB_BOOL,
    NB_FLOAT16,  /* reserved for the CUDA backend; CPU ops reject it */
    NB_BFLOAT16, /* reserved for the CUDA backend; CPU ops reject it */
    NB_DTYPE_COUNT
} nb_dtype;

NB_API size_t nb_dtype_size(nb_dtype dt);
/* PyTorch's name: "float32", "int64", "bool"... ("?" for an invalid value). */
NB_API const char *nb_dtype_name(nb_dtype dt);
NB_API bool nb_dtype_is_floating(nb_dtype dt);
/* The dtype PyTorch's type promotion gives for an op on tensors of dtypes a and b. */
NB_API nb_dtype nb_promote_types(nb_dtype a, nb_dtype b);

/* ---- devices ------------------------------------------------------------------------------- */

typedef enum nb_device_type { NB_DEVICE_CPU = 0, NB_DEVICE_CUDA = 1, NB_DEVICE_TYPE_COUNT } nb_device_type;

typedef struct nb_device {
    nb_device_type type;
    int index; /* 0 for the CPU */
} nb_device;

/* Parses "cpu", "cuda", "cuda:N" or "auto" (a GPU when one is present, else the CPU). Fails with
 * NB_ERR_DEVICE when the device is not built in or not present; *out is the CPU then. */
NB_API nb_status nb_device_parse(const char *s, nb_device *out);
NB_API nb_device nb_cpu(void);
NB_API bool nb_device_equal(nb_device a, nb_device b);
/* Writes "cpu" or "cuda:N" into buf (snprintf semantics); returns the length. */
NB_API int nb_device_str(nb_device d, char *buf, size_t size);
/* NB_OK when the device is built in and present, else NB_ERR_DEVICE with a message. */
NB_API nb_status nb_device_check(nb_device d);
NB_API bool nb_cuda_is_available(void);
NB_API int nb_cuda_device_count(void);
/* Waits for all queued work on the device (a no-op on the CPU). */
NB_API nb_status nb_device_synchronize(nb_device d);

/* ---- threads ------------------------------------------------------------------------------- */

/* One thread count for all CPU work: nabla's kernels, OpenBLAS and oneDNN. The default is
 * NABLA_NUM_THREADS, else OMP_NUM_THREADS, else the number of cores. n < 1 is an error. */
NB_API nb_status nb_set_num_threads(int n);
NB_API int nb_get_num_threads(void);

/* ---- AMX (CPU) ------------------------------------------------------------------------------ */

/* Whether float32 products on the CPU may run on nabla's AMX kernel: Intel's bfloat16 tiles, each
 * float32 element split into three bfloat16s and six of their products summed, which keeps
 * float32's accuracy (docs/ARCHITECTURE.md, "float32 products on AMX"). True where the CPU has
 * AMX-BF16 and AVX512-BF16, Linux grants the tiles' state, and neither NABLA_AMX=0 nor
 * NABLA_MAX_CPU_ISA=avx2 turned it off; the products' tuner then times it beside the libraries'
 * sgemm and keeps the faster for each shape. */
NB_API bool nb_cpu_amx_enabled(void);

/* ---- convolution algorithm (CPU) ---------------------------------------------------------- */

/* How float32 convolutions on the CPU (oneDNN) pick their algorithm.
 * - NB_CONV_ALGO_AUTO, the default: Winograd's F(4x4, 3x3) for the convolutions where oneDNN has
 *   it (3x3 kernel, stride 1, no dilation, no groups, channels in and out multiples of 16; CPUs
 *   with AVX-512) and where it is measured to be faster than the direct kernels (at least 32
 *   output tiles of 4x4 over the batch, and for channels-last activations, which it must
 *   reorder, 32 channels in and out); direct elsewhere. Winograd does a 3x3 convolution in about 2.25x fewer multiplications, and rounds
 *   differently: its results differ from the direct sums by a relative 1e-6 to 1e-5 of the
 *   output's scale (its gradients alike), where the direct kernels differ from float64 by 1e-7.
 *   5x5 convolutions with stride 1 and padding 2 on channels-last float32 activations (channels
 *   in and out multiples of 16, CPUs with AVX-512) run nabla's own Winograd F(2x2, 5x5), 2.8x
 *   fewer multiplications, under auto from 32 channels in and out, at most 65,536 channel
 *   pairs and 256 output tiles of 2x2 over the batch; its results are within about 1e-5 of
 *   the output's (and gradients') scale from float64.
 * - NB_CONV_ALGO_DIRECT: direct kernels only (the algorithm of PyTorch's CPU convolutions).
 * - NB_CONV_ALGO_WINOGRAD: Winograd wherever oneDNN or nabla has it, direct elsewhere.
 * The default is read once from NABLA_CONV_ALGO ("auto", "direct" or "winograd"; another value
 * counts as unset), else auto.
 * The choice applies to convolutions started after the call; it is not meant to be changed
 * while other threads run convolutions. CUDA convolutions (cuDNN) do not follow it. */
typedef enum nb_conv_algo { NB_CONV_ALGO_AUTO = 0, NB_CONV_ALGO_DIRECT, NB_CONV_ALGO_WINOGRAD } nb_conv_algo;
/* Fails with NB_ERR_INVALID_ARG for a value that is none of the three. */
NB_API nb_status nb_set_conv_algo(nb_conv_algo algo);
NB_API nb_conv_algo nb_get_conv_algo(void);
/* The algorithm's name ("auto", "direct", "winograd"); "?" for a value that is none. */
NB_API const char *nb_conv_algo_name(nb_conv_algo algo);
/* The algorithm of that name into *out; NB_ERR_INVALID_ARG (and *out untouched) for another name. */
NB_API nb_status nb_conv_algo_parse(const char *name, nb_conv_algo *out);

/* ---- tuning by timing (CPU) --------------------------------------------------------------- */

/* How many calls so far ran on nabla's CPU tuners' schedules. Where the tuners are on (by default
 * on CPUs without AVX-512; NABLA_GEMM_TUNE and NABLA_CONV_TUNE = 0 or 1 force them), the first
 * calls of each large float32 matrix product shape (up to 7) and convolution (up to 9), per
 * thread count, run on each of the ways that could serve it, timed, and every later call on the
 * fastest. A call on the schedule may be slower than the problem will be: a benchmark warms up
 * until an iteration adds nothing to this count (nabla bench does). */
NB_API unsigned long long nb_cpu_tuning_steps(void);

/* Deterministic mode (default off; NABLA_DETERMINISTIC=1 turns it on at start, as
 * torch.use_deterministic_algorithms): while on, the CPU ops choose their kernels by rules alone,
 * never by timing (the tuners above are not consulted, and nb_cpu_tuning_steps stays put), so a
 * program run again with the same inputs and thread count gives the same bits, and a training run
 * resumed in a new process equals an uninterrupted one. Off, the tuners' first calls of a problem
 * in each process run each of its ways, which round differently. A different thread count may
 * still round differently (reductions split by thread). CUDA convolutions still choose cuDNN's
 * algorithm by timing. `nabla train` turns it on unless NABLA_DETERMINISTIC is set. */
NB_API void nb_set_deterministic(bool on);
NB_API bool nb_get_deterministic(void);

/* ---- scopes -------------------------------------------------------------------------------- */

typedef struct nb_scope nb_scope;

/* Opens a scope on the calling thread: every tensor reference returned to this thread until the
 * matching nb_scope_end belongs to it. Scopes nest. Returns NULL only when out of memory. */
NB_API nb_scope *nb_scope_begin(void);
/* Releases every reference the scope owns and closes it (and any scope opened inside it and
 * not yet closed). NULL is a no-op. */
NB_API void nb_scope_end(nb_scope *s);
/* Like nb_scope_end, but `keep` (a tensor the scope owns or any live tensor) survives: one
 * reference to it moves to the enclosing scope, or to the caller when there is none. Returns
 * keep. */
struct nb_tensor;
NB_API struct nb_tensor *nb_scope_end_keep(nb_scope *s, struct nb_tensor *keep);

/* ---- host memory ----------------------------------------------------------------------------- */

/* The CPU keeps freed buffers of 64 KiB and more for reuse (freeing them to the OS every step
 * costs page faults). This returns the cached ones to the OS. */
NB_API void nb_cpu_empty_cache(void);

typedef struct nb_memory_stats {
    size_t allocated;      /* bytes in live tensors' storage */
    size_t reserved;       /* allocated plus cached */
    size_t peak_allocated; /* the largest `allocated` seen */
    uint64_t n_allocs;     /* allocations that reached the system allocator */
} nb_memory_stats;

NB_API nb_status nb_memory_stats_get(nb_device d, nb_memory_stats *out);
/* torch.cuda.reset_peak_memory_stats: peak_allocated of device d starts again from what is
 * allocated now, so that a later nb_memory_stats_get gives the peak of the work in between. */
NB_API nb_status nb_memory_reset_peak_stats(nb_device d);

#ifdef __cplusplus
}
#endif
#endif
