/* Internal: the tensor and storage structs, and the helpers every op file uses. */
#ifndef NB_TENSOR_IMPL_H
#define NB_TENSOR_IMPL_H

#include <stdatomic.h>

#include "nabla.h"
#include "core/error_impl.h"

struct nb_node;
struct nb_backend;

/* Host memory that does not come from the CPU allocator: page-locked ("pinned") memory from the
 * CUDA backend (src/cuda/pinned.c). Storage over it is CPU storage for every op; it is released
 * through `free`, and a copy from it to a device may be queued without the host waiting. */
typedef struct nb_host_mem {
    const char *name; /* "pinned" */
    void *(*alloc)(size_t nbytes); /* NULL with the error set */
    void (*free)(void *data, size_t nbytes);
    /* Queues the copy of nbytes from src (inside a block of this memory) to dst on device d, on
     * the calling thread's current stream of d, and keeps src's block from being reused (after
     * it is freed) until the copy has completed. Returns at once. */
    nb_status (*copy_to_device_async)(nb_device d, void *dst, const void *src, size_t nbytes);
} nb_host_mem;

/* The CUDA backend's pinned host memory, or NULL with an NB_ERR_DEVICE error naming op when
 * nabla was built without CUDA or no GPU is present (src/cuda/pinned.c, src/core/nocuda.c). */
const nb_host_mem *nb__pinned_mem(const char *op);

/* Memory shared by a tensor and its views. The version counter lives here, so that every view
 * sees in-place changes made through any other. */
typedef struct nb_storage {
    atomic_int refcount;
    void *data;
    size_t nbytes;
    nb_device device;
    atomic_uint_fast64_t version;
    bool borrowed; /* data is not ours to free (never set today; room for from_blob) */
    const nb_host_mem *host; /* CPU storage from special host memory (pinned), else NULL */
} nb_storage;

struct nb_tensor {
    atomic_int refcount;
    nb_dtype dtype;
    int ndim;
    int64_t shape[NB_MAX_DIMS];
    int64_t strides[NB_MAX_DIMS]; /* in elements */
    int64_t offset;               /* in elements */
    nb_storage *storage;

    /* autograd */
    bool requires_grad;  /* leaves: set by the user; others: true when grad_fn is set */
    bool retains_grad;   /* a non-leaf asked to keep its grad */
    nb_tensor *grad;     /* owned */
    struct nb_node *grad_fn; /* owned reference; NULL for leaves */
    int output_nr;       /* which output of grad_fn this is */
    /* For views: the tensor they view (owned; itself never a view), and the storage version at
     * which grad_fn was last (re)built, so that an in-place change through the base or another
     * view makes the view's history be rebuilt from the base's. */
    nb_tensor *base;
    uint64_t view_version;
    /* A leaf with a gradient hook (nb__leaf_hook): the hook's table and owner (weak: the owner
     * clears them before it is freed), this tensor's index among the owner's tensors; and the
     * engine's count, during one backward, of the graph's edges into it still to run (0 outside). */
    const struct nb__leaf_hook *bw_hook;
    void *bw_owner;
    int bw_index, bw_pending;
};

/* What the backward engine calls for a leaf whose owner watches its gradient: an optimizer that
 * steps in backward (nb_optim_step_in_backward) or a data-parallel wrapper that reduces gradients
 * as they are ready (nb_ddp). A leaf has at most one. */
typedef struct nb__leaf_hook {
    /* The leaf's gradient is whole for this backward (every edge of the graph into it has run;
     * its grad may be NULL when none carried a gradient). */
    nb_status (*ready)(void *owner, int index);
    /* Whether the owner's use of the gradient is p += alpha * grad (plain SGD), so that a rule may
     * add the gradient's product straight into the leaf (nb__edge_sink). NULL: never. */
    bool (*sink)(const void *owner, double *alpha);
    /* Names the owner in errors ("optimizer", "DistributedDataParallel"). */
    const char *name;
} nb__leaf_hook;

/* ---- construction (internal: these return caller-owned references, never scope-tracked) --- */

nb_storage *nb__storage_new(size_t nbytes, nb_device device); /* error set on failure */
/* CPU storage from special host memory (e.g. nb__pinned_mem); error set on failure. */
nb_storage *nb__storage_new_host(size_t nbytes, const nb_host_mem *host);
void nb__storage_release(nb_storage *s);
/* A contiguous tensor with fresh, uninitialised storage. */
nb_tensor *nb__tensor_new(const int64_t *shape, int ndim, nb_dtype dtype, nb_device device);
/* The same, naming op in the error message of a bad shape. */
nb_tensor *nb__tensor_new_named(const char *op, const int64_t *shape, int ndim, nb_dtype dtype, nb_device device);
/* A fresh tensor, channels-last (a 4-D shape) when cl, else contiguous. */
nb_tensor *nb__tensor_new_format(const char *op, const int64_t *shape, int ndim, nb_dtype dtype, nb_device device,
                                 bool cl);
/* A fresh tensor for an op's result shaped [shape], laid out like its inputs: channels-last when
 * on the CPU some ref of the same 4-D shape is channels-last (nb__is_channels_last), else
 * contiguous. NULL refs are skipped. */
nb_tensor *nb__tensor_new_as(const char *op, const int64_t *shape, int ndim, nb_dtype dtype, nb_device device,
                             const nb_tensor *const *refs, int nrefs);
/* A contiguous CPU tensor in special host memory (pinned), naming op in errors. */
nb_tensor *nb__tensor_new_host(const char *op, const int64_t *shape, int ndim, nb_dtype dtype, const nb_host_mem *host);
/* A tensor struct over t's storage with the given geometry (a view: base set, no autograd). */
nb_tensor *nb__tensor_alias(const nb_tensor *t, const int64_t *shape, const int64_t *strides,
                            int ndim, int64_t offset);
/* nb_clone, always contiguous (for code that addresses the copy by contiguous strides). */
nb_tensor *nb__clone_contiguous(const nb_tensor *t); /* scope-tracked, as nb_clone */
/* Registers a new reference in the current scope (if any) and returns it: every public function
 * returning a tensor ends with `return nb__track(t);`. NULL passes through. */
nb_tensor *nb__track(nb_tensor *t);
/* Drops a reference obtained from an internal (untracked) constructor. */
void nb__release(nb_tensor *t);

/* ---- geometry ----------------------------------------------------------------------------- */

int64_t nb__numel(const int64_t *shape, int ndim);
void nb__contiguous_strides(const int64_t *shape, int ndim, int64_t *strides);
bool nb__is_contiguous(const nb_tensor *t);
/* Channels-last strides for a 4-D shape ([H*W*C, 1, W*C, C], size-1 dims as nb__contiguous_strides). */
void nb__channels_last_strides(const int64_t *shape, int64_t *strides);
/* A 4-D tensor dense in the channels-last layout, size-1 dims ignored (it may be contiguous too:
 * one channel, or a 1x1 plane). */
bool nb__is_dense_channels_last(const nb_tensor *t);
/* A 4-D tensor dense in the channels-last layout and not also contiguous, or dense in both with
 * exactly the channels-last strides (size-1 dims included) and not the row-major ones. */
bool nb__is_channels_last(const nb_tensor *t);
/* The layers' rule (see nb_memory_format): on the CPU, a channels-last t is kept so, and results
 * and gradients follow it; anywhere else it is made contiguous. */
bool nb__keeps_channels_last(const nb_tensor *t);
/* Wraps a possibly negative dim into [0, ndim); sets an error naming op on failure. ndim 0
 * accepts -1 and 0, as PyTorch does for scalars. */
nb_status nb__wrap_dim(const char *op, int64_t dim, int ndim, int64_t *out);
/* The broadcast shape of a and b; error naming op on a mismatch. */
nb_status nb__broadcast_shapes(const char *op, const int64_t *a, int na, const int64_t *b, int nb,
                               int64_t *out, int *nout);
/* Strides of t viewed as `shape` by broadcasting (0 for expanded dims). */
void nb__broadcast_strides(const nb_tensor *t, const int64_t *shape, int ndim, int64_t *strides);
/* Formats "[2, 3]" into buf (a small static-size buffer is enough: NB_SHAPE_STR_MAX). */
#define NB_SHAPE_STR_MAX 200
const char *nb__shape_str(const int64_t *shape, int ndim, char *buf);
/* The address of the first element (CPU). */
static inline char *nb__data(const nb_tensor *t)
{
    return (char *)t->storage->data + t->offset * (int64_t)nb_dtype_size(t->dtype);
}

/* ---- checks shared by ops ------------------------------------------------------------------- */

/* All n tensors non-NULL and on one device; error names op and both devices otherwise. */
nb_status nb__check_inputs(const char *op, const nb_tensor *const *ts, int n);
/* The storage version bump every in-place change does. */
static inline void nb__bump_version(nb_tensor *t)
{
    atomic_fetch_add(&t->storage->version, 1);
}

#endif
