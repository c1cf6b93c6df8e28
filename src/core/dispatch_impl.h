/* Internal: the op enum, kernel arguments and the per-device table every op dispatches through. */
#ifndef NB_DISPATCH_IMPL_H
#define NB_DISPATCH_IMPL_H

#include "core/optim_batch.h"
#include "core/tensor_impl.h"

typedef enum nb_op {
#define X(id, name, family) NB_OP_##id,
#include "core/ops.def"
#undef X
    NB_OP_COUNT
} nb_op;

/* PyTorch's name of the op ("add"). */
const char *nb__op_name(nb_op op);

/* The arguments of one kernel call. Each family says in ops.def which fields it reads. Inputs
 * and outputs are on the backend's device; outputs are allocated by the caller with their final
 * shape and dtype. Elementwise kernels broadcast inputs to out's shape; reductions take `out` in
 * keepdim form (reduced dims of size 1). */
typedef struct nb_kargs {
    nb_tensor *out;
    nb_tensor *out2;
    nb_tensor *out3;           /* a third output (batch norm's backward: the residual's gradient) */
    const nb_tensor *in[4];
    double s0, s1;
    int64_t i0, i1;
    uint32_t dim_mask; /* reductions: bit d set = reduce dim d */
    bool flag;
    /* index ops: every index is known to be in range (a backward rule's saved indices, checked by
     * the forward op): a device may skip its range check, which on CUDA waits for the stream */
    bool trusted_index;
    uint64_t seed, offset; /* random: Philox key and the first counter */
} nb_kargs;

typedef nb_status (*nb_kernel_fn)(nb_op op, const nb_kargs *a);

/* A device's table. Slots left NULL are ops the device does not support: dispatching one is an
 * NB_ERR_UNSUPPORTED error naming the op and the device. */
typedef struct nb_backend {
    const char *name;
    int (*device_count)(void);
    void *(*alloc)(int index, size_t nbytes); /* NULL when out of memory (error set) */
    void (*free)(int index, void *p, size_t nbytes);
    /* Copies between this device and host memory, or within the device. */
    nb_status (*copy_to_host)(int index, void *dst, const void *src, size_t nbytes);
    nb_status (*copy_from_host)(int index, void *dst, const void *src, size_t nbytes);
    nb_status (*synchronize)(int index);
    nb_status (*memory_stats)(int index, nb_memory_stats *out);
    void (*reset_peak_stats)(int index);
    /* Whether the calling thread is capturing this device's work into a graph (NULL: never):
     * ops that would read device values back to the host must then take a device-side path. */
    bool (*is_capturing)(int index);
    /* While capturing: fn(ctx) runs at the end of the capture (its work is captured last), then
     * drop(ctx); drop(ctx) alone when the capture is abandoned. NULL: the device never captures. */
    nb_status (*capture_defer)(int index, nb_status (*fn)(void *ctx), void (*drop)(void *ctx), void *ctx);
    /* While capturing: an NB_ERR_UNSUPPORTED "op: ... capturing a CUDA graph, and why" that also
     * spoils the capture. NULL: the device never captures. */
    nb_status (*capture_refuse)(int index, const char *op, const char *why);
    /* One fused optimizer step over a batch of parameters (NULL: the CPU, whose optimizers run
     * their own loops in src/optim/). */
    nb_status (*fused_optim)(int index, const nb_optim_batch *b);
    nb_kernel_fn kernels[NB_OP_COUNT];
} nb_backend;

/* An integer clamp bound: the double bound limited to dt's range (so that -1 on uint8 is no
 * bound rather than 255; an infinite bound is the type's limit). */
int64_t nb__int_bound(double v, nb_dtype dt);
/* The bits of value converted to dt, as C converts (to bool: != 0), in the low bytes of *bits;
 * an NB_ERR_DTYPE error naming op for float16/bfloat16. */
nb_status nb__value_bits(nb_op op, nb_dtype dt, double value, uint64_t *bits);

/* The table of d's type, or NULL with an NB_ERR_DEVICE error when not built in or not present. */
const nb_backend *nb__backend(nb_device d);
/* The backend's is_capturing for d (false for a device that cannot capture, or is absent). */
bool nb__device_capturing(nb_device d);
/* The backend's capture_defer for d (NB_ERR_UNSUPPORTED where the device cannot capture; drop(ctx)
 * is then called at once). */
nb_status nb__device_capture_defer(nb_device d, nb_status (*fn)(void *ctx), void (*drop)(void *ctx), void *ctx);
/* The backend's capture_refuse for d (a plain NB_ERR_UNSUPPORTED where the device cannot capture). */
nb_status nb__device_capture_refuse(nb_device d, const char *op, const char *why);
/* Runs op's kernel on the device of a->out (or a->in[0] when there is no out). */
nb_status nb__dispatch(nb_op op, const nb_kargs *a);

extern const nb_backend nb__cpu_backend;
#ifdef NB_HAVE_CUDA
extern const nb_backend nb__cuda_backend;
#endif

#endif
