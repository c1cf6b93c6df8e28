/* Internal: the CPU device's helpers: strided iteration, threading, kernel declarations. */
#ifndef NB_CPU_IMPL_H
#define NB_CPU_IMPL_H

#include "core/dispatch_impl.h"

/* Below this many elements an op runs on one thread: splitting costs more than it gains. */
#define NB_CPU_GRAIN 32768

#define NB_ITER_MAX_OPS 4

/* Calls loop(ptrs, strides, n, ctx) over runs of elements. ptrs[k] is operand k's address for
 * the run's first element, strides[k] its stride in BYTES along the run (0 for a broadcast
 * operand), n the run's length. Operand 0 is out, operands 1.. are the inputs broadcast to out's
 * shape. A run is contiguous for an operand when its stride equals its element size: loops test
 * that to take a vectorisable path. */
typedef void (*nb_cpu_loop_fn)(char **ptrs, const int64_t *strides, int64_t n, void *ctx);
/* The same over `rows` runs at once: run r of operand k starts at ptrs[k] + r * outer[k] (bytes).
 * One call per stretch of runs instead of one per run, for iterators of short runs (a bias added
 * to channels-last activations: runs of the 32 channels). */
typedef void (*nb_cpu_loop2d_fn)(char **ptrs, const int64_t *strides, int64_t n, const int64_t *outer, int64_t rows,
                                 void *ctx);

typedef struct nb_cpu_iter {
    int nops;
    int ndim;                                 /* after coalescing; >= 1 */
    int64_t shape[NB_MAX_DIMS];               /* shape[ndim-1] is the run */
    int64_t strides[NB_ITER_MAX_OPS][NB_MAX_DIMS]; /* bytes */
    char *base[NB_ITER_MAX_OPS];
    int64_t numel;
} nb_cpu_iter;

/* Builds an iterator over `shape` for operands given by base address and byte strides (strides
 * already broadcast: 0 on expanded dims). Coalesces dims that are contiguous in every operand. */
void nb_cpu_iter_init(nb_cpu_iter *it, const int64_t *shape, int ndim, int nops, char *const *base,
                      const int64_t (*strides)[NB_MAX_DIMS]);
/* Builds the iterator for out and inputs broadcast to out's shape (dtypes may differ). */
void nb_cpu_iter_elementwise(nb_cpu_iter *it, nb_tensor *out, const nb_tensor *const *in, int n_in);
/* Runs loop over the iterator, in parallel when numel >= grain (grain 0: NB_CPU_GRAIN). */
void nb_cpu_iter_run(const nb_cpu_iter *it, nb_cpu_loop_fn loop, void *ctx, int64_t grain);
/* As nb_cpu_iter_run, calling a 2-D loop per stretch of consecutive runs along the dim outside
 * the run's (all of a thread's runs when the iterator has two dims). */
void nb_cpu_iter_run2d(const nb_cpu_iter *it, nb_cpu_loop2d_fn loop, void *ctx, int64_t grain);

/* The number of threads to use for `work` units of which `grain` are worth one thread. */
int nb_cpu_threads_for(int64_t work, int64_t grain);
/* The calling thread's number in its OpenMP team (0 outside a parallel region or without
 * OpenMP): per-thread scratch in kernels that split work with `omp for`. */
int nb_cpu_thread_num(void);
/* The calling thread's index *t in its OpenMP team of *n (0 of 1 outside a parallel region or
 * without OpenMP). */
void nb_cpu_thread_pos(int *t, int *n);
/* The calling thread's equal share [*lo, *hi) of `count` items in its OpenMP team (all of them
 * outside a parallel region or without OpenMP). */
void nb_cpu_thread_share(int64_t count, int64_t *lo, int64_t *hi);
/* Column sums made by nt threads, each into its own row (cross entropy's and the LSTM cell's
 * backward: a linear layer's bias gradient). d: nt rows of n doubles; f: for float32 sums, nt rows
 * of n floats more, where a thread adds a block of its rows before it adds them into d (float
 * adds over a few rows, then double, keep the rounding near float's own at float's speed). */
typedef struct nb_cpu_colsums {
    double *d;
    float *f;
    int nt;
    int64_t n;
    size_t bytes;
} nb_cpu_colsums;
/* Allocates and zeroes the rows (f only when f32); an out-of-memory error naming op otherwise. */
nb_status nb_cpu_colsums_init(nb_cpu_colsums *s, int nt, int64_t n, bool f32, const char *op);
/* Adds the threads' d rows into out (n values, float32 or float64 by f32), then frees the rows. */
void nb_cpu_colsums_finish(nb_cpu_colsums *s, void *out, bool f32);
/* Bytes an elementwise op must move before streaming (non-temporal) stores of its output pay:
 * half the last-level cache one core sees (from sysfs; 32 MiB when unknown), found once. */
int64_t nb_cpu_stream_threshold(void);
/* Whether an output of out_bytes is larger than the last-level cache (twice the threshold), so
 * that a kernel writing it once should stream it: a smaller one would stay in the cache for its
 * next reader ([4096, 1024] float32 written 0.39 ms plainly, 0.98 streamed, at 1 thread). */
bool nb_cpu_streams_output(int64_t out_bytes);
/* The shortest run (bytes) that binary.c's and copy.c's streaming loops stream; a shorter one
 * takes the plain loop. Each call ends with a store fence and writes its partial lines apart:
 * streamed, a channels-last [128, 32, 28, 28] plus a [1, C, 1, 1] bias (runs of 32 floats) took
 * 10.8 ms, plainly 1.2. */
#define NB_CPU_STREAM_MIN_RUN 4096
/* Whether nabla's own AVX-512 kernels may run: the CPU and the OS support AVX-512F (libgcc's
 * check) and the environment variable NABLA_MAX_CPU_ISA, read once, is not "avx2". With
 * NABLA_MAX_CPU_ISA=avx2 those kernels give way to their portable versions, whose compiler-made
 * clones still follow the CPU (target_clones), as do OpenBLAS and oneDNN (which read
 * OPENBLAS_CORETYPE and ONEDNN_MAX_CPU_ISA): the tests run so to check the portable paths on an
 * AVX-512 machine, and a user can compare the two. */
bool nb_cpu_avx512(void);
/* Whether the CPU and the OS support AVX2 and FMA (libgcc's check; false off x86-64 or without
 * GCC's builtins): the least nabla's generic-vector kernels (src/cpu/ops/wino.c, stem.c) and the
 * reductions' AVX2 kernels (reduce_vec.c) need. */
bool nb_cpu_avx2_fma(void);

/* n matrices of 4- or 8-byte (es) elements: out's [cols, rows] = in's [rows, cols] transposed,
 * rows ldi (in) and ldo (out) elements apart, matrices rows * ldi and cols * ldo apart; tiled and
 * threaded (copy.c). */
void nb_cpu_transpose(size_t es, const void *in, int64_t ldi, void *out, int64_t ldo, int64_t n, int64_t rows,
                      int64_t cols);

/* Host memory for tensors: a caching allocator (see alloc.c). */
void *nb_cpu_alloc(size_t nbytes);
void nb_cpu_free(void *p, size_t nbytes);
/* For tests: the n-th next nb_cpu_alloc on the calling thread (0: the very next) fails as if the
 * host were out of memory; -1 (the default) turns the injection off. Returns the count it
 * replaces: -1 once the failure it set has happened (or none was set). */
int64_t nb__cpu_alloc_fail_after(int64_t n);

/* The families' kernels (ops.def's third column), one file each in src/cpu/ops/. */
nb_status nb_cpu_k_copy(nb_op op, const nb_kargs *a);
nb_status nb_cpu_k_cat(nb_op op, const nb_kargs *a); /* in copy.c */
nb_status nb_cpu_k_fill(nb_op op, const nb_kargs *a);
nb_status nb_cpu_k_random(nb_op op, const nb_kargs *a);
nb_status nb_cpu_k_binary(nb_op op, const nb_kargs *a);
nb_status nb_cpu_k_unary(nb_op op, const nb_kargs *a);
nb_status nb_cpu_k_where(nb_op op, const nb_kargs *a);
nb_status nb_cpu_k_reduce(nb_op op, const nb_kargs *a);
nb_status nb_cpu_k_softmax(nb_op op, const nb_kargs *a);
nb_status nb_cpu_k_cumsum(nb_op op, const nb_kargs *a);
nb_status nb_cpu_k_gemm(nb_op op, const nb_kargs *a);
nb_status nb_cpu_k_index(nb_op op, const nb_kargs *a);
nb_status nb_cpu_k_sort(nb_op op, const nb_kargs *a);
nb_status nb_cpu_k_conv(nb_op op, const nb_kargs *a);
nb_status nb_cpu_k_pool(nb_op op, const nb_kargs *a);
nb_status nb_cpu_k_batchnorm(nb_op op, const nb_kargs *a);
/* The fused activation backward ops of the binary family (activation_backward.c). */
nb_status nb_cpu_activation_backward(nb_op op, const nb_kargs *a);

/* Generic per-dtype dispatch for kernels: expands BODY with `T` as the C type of dt. */
#define NB_CPU_DISPATCH_ALL(dt, BODY)                                                           \
    switch (dt) {                                                                                \
    case NB_FLOAT32: { typedef float T; BODY; } break;                                           \
    case NB_FLOAT64: { typedef double T; BODY; } break;                                          \
    case NB_INT64: { typedef int64_t T; BODY; } break;                                           \
    case NB_INT32: { typedef int32_t T; BODY; } break;                                           \
    case NB_UINT8: { typedef uint8_t T; BODY; } break;                                           \
    case NB_BOOL: { typedef bool T; BODY; } break;                                               \
    default: return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported on the CPU",           \
                            nb__op_name(op), nb_dtype_name(dt));                                 \
    }

#define NB_CPU_DISPATCH_FLOAT(dt, BODY)                                                         \
    switch (dt) {                                                                                \
    case NB_FLOAT32: { typedef float T; BODY; } break;                                           \
    case NB_FLOAT64: { typedef double T; BODY; } break;                                          \
    default: return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported (float32/float64 only)",\
                            nb__op_name(op), nb_dtype_name(dt));                                 \
    }

#endif
