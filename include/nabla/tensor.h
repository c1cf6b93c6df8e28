/* nabla/tensor.h: tensors, their creation, views and copies.
 *
 * A tensor is metadata (shape, strides in elements, offset, dtype, device) over reference-counted
 * storage that views share. Ownership rules are in nabla/core.h: every nb_tensor * returned here
 * is a new reference (scope-owned when a scope is open), inputs are borrowed, NULL means failure.
 */
#ifndef NABLA_TENSOR_H
#define NABLA_TENSOR_H

#include <stdio.h>

#include "nabla/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nb_tensor nb_tensor;
typedef struct nb_generator nb_generator;

/* Options for creating a tensor: what PyTorch takes as dtype=, device=, requires_grad=. */
typedef struct nb_tensor_params {
    nb_dtype dtype;          /* default NB_FLOAT32 */
    nb_device device;        /* default the CPU */
    bool requires_grad;      /* default false */
    nb_generator *generator; /* random ops: NULL = the device's default generator */
} nb_tensor_params;

NB_API nb_tensor_params nb_tensor_params_default(void);

/* ---- lifetime ------------------------------------------------------------------------------ */

/* A new reference owned by the caller (never by a scope). */
NB_API nb_tensor *nb_tensor_retain(nb_tensor *t);
/* Releases one reference; NULL is a no-op. Never call it on a scope-owned reference. */
NB_API void nb_tensor_free(nb_tensor *t);

/* ---- creation (params may be NULL for the defaults) ----------------------------------------- */

/* Copies numel(shape) elements of `dtype` from host memory `data`. */
NB_API nb_tensor *nb_tensor_from_data(const void *data, const int64_t *shape, int ndim,
                                      const nb_tensor_params *p);
NB_API nb_tensor *nb_empty(const int64_t *shape, int ndim, const nb_tensor_params *p);
NB_API nb_tensor *nb_zeros(const int64_t *shape, int ndim, const nb_tensor_params *p);
NB_API nb_tensor *nb_ones(const int64_t *shape, int ndim, const nb_tensor_params *p);
NB_API nb_tensor *nb_full(const int64_t *shape, int ndim, double value, const nb_tensor_params *p);
/* A 0-dim tensor. */
NB_API nb_tensor *nb_scalar_tensor(double value, const nb_tensor_params *p);
/* [start, end) by step, as torch.arange (length ceil((end-start)/step)). */
NB_API nb_tensor *nb_arange(double start, double end, double step, const nb_tensor_params *p);
NB_API nb_tensor *nb_linspace(double start, double end, int64_t steps, const nb_tensor_params *p);
/* An n x m identity (m < 0 means m = n). */
NB_API nb_tensor *nb_eye(int64_t n, int64_t m, const nb_tensor_params *p);
NB_API nb_tensor *nb_empty_like(const nb_tensor *t);
NB_API nb_tensor *nb_zeros_like(const nb_tensor *t);
NB_API nb_tensor *nb_ones_like(const nb_tensor *t);
NB_API nb_tensor *nb_full_like(const nb_tensor *t, double value);

/* ---- random numbers (Philox 4x32-10, counter-based: a seed gives the same values on every
 * device and thread count) ----------------------------------------------------------------- */

NB_API nb_generator *nb_generator_create(uint64_t seed);
NB_API void nb_generator_free(nb_generator *g);
NB_API void nb_generator_manual_seed(nb_generator *g, uint64_t seed);
/* Seeds the default generator of every device. */
NB_API void nb_manual_seed(uint64_t seed);
/* Uniform on [0, 1). */
NB_API nb_tensor *nb_rand(const int64_t *shape, int ndim, const nb_tensor_params *p);
/* Standard normal. */
NB_API nb_tensor *nb_randn(const int64_t *shape, int ndim, const nb_tensor_params *p);
/* Uniform integers in [low, high). With p == NULL the dtype is int64; otherwise p->dtype is used
 * as given (nb_tensor_params_default() says float32: set p->dtype = NB_INT64 for integers). */
NB_API nb_tensor *nb_randint(int64_t low, int64_t high, const int64_t *shape, int ndim,
                             const nb_tensor_params *p);
/* 1 with probability `probs` (elementwise, in [0,1]), else 0; same dtype as probs. */
NB_API nb_tensor *nb_bernoulli(const nb_tensor *probs, nb_generator *g);
NB_API nb_tensor *nb_rand_like(const nb_tensor *t);
NB_API nb_tensor *nb_randn_like(const nb_tensor *t);

/* ---- metadata ------------------------------------------------------------------------------ */

NB_API int nb_tensor_ndim(const nb_tensor *t);
/* A pointer to ndim sizes, valid while t lives. */
NB_API const int64_t *nb_tensor_shape(const nb_tensor *t);
/* A pointer to ndim strides (in elements), valid while t lives. */
NB_API const int64_t *nb_tensor_strides(const nb_tensor *t);
/* The size of dim (negative dims count from the end); -1 on a bad dim. */
NB_API int64_t nb_tensor_size(const nb_tensor *t, int64_t dim);
NB_API int64_t nb_tensor_offset(const nb_tensor *t);
NB_API int64_t nb_tensor_numel(const nb_tensor *t);
NB_API nb_dtype nb_tensor_dtype(const nb_tensor *t);
NB_API nb_device nb_tensor_device(const nb_tensor *t);
NB_API bool nb_tensor_is_contiguous(const nb_tensor *t);
/* The first element's address for a CPU tensor (NULL for other devices). */
NB_API void *nb_tensor_data_ptr(const nb_tensor *t);
/* The storage's version counter: bumped by every in-place change of it or of any view of it. */
NB_API uint64_t nb_tensor_version(const nb_tensor *t);

/* ---- reading values ------------------------------------------------------------------------ */

/* Copies the values, in row-major order and t's dtype, into host memory; nbytes must be
 * numel * dtype size. Waits for queued device work. */
NB_API nb_status nb_tensor_read(const nb_tensor *t, void *buf, size_t nbytes);
/* The value of a one-element tensor as a double / int64 (on failure *out is NaN / 0). */
NB_API nb_status nb_item(const nb_tensor *t, double *out);
NB_API nb_status nb_item_int64(const nb_tensor *t, int64_t *out);
/* Formats the tensor the way PyTorch prints it (values; device, dtype and grad_fn when they are
 * not the defaults). snprintf semantics: returns the full length, writes at most size bytes. */
NB_API int nb_tensor_format(const nb_tensor *t, char *buf, size_t size);
/* nb_tensor_format returns -1 (error set) for a NULL t, or a NULL buf with a nonzero size.
 * nb_tensor_print writes the same text and a newline, as Python's print. */
NB_API nb_status nb_tensor_print(const nb_tensor *t, FILE *f);

/* ---- views (share storage; differentiable) ------------------------------------------------- */

/* One size may be -1. view fails when the strides do not allow it; reshape copies then. */
NB_API nb_tensor *nb_view(const nb_tensor *t, const int64_t *shape, int ndim);
NB_API nb_tensor *nb_reshape(const nb_tensor *t, const int64_t *shape, int ndim);
NB_API nb_tensor *nb_permute(const nb_tensor *t, const int64_t *dims, int ndim);
NB_API nb_tensor *nb_transpose(const nb_tensor *t, int64_t dim0, int64_t dim1);
/* Transpose of a tensor of at most 2 dims, as torch.t. */
NB_API nb_tensor *nb_t(const nb_tensor *t);
NB_API nb_tensor *nb_narrow(const nb_tensor *t, int64_t dim, int64_t start, int64_t length);
/* t[start:end:step] along dim (Python's clamping of start and end; step > 0). */
NB_API nb_tensor *nb_slice(const nb_tensor *t, int64_t dim, int64_t start, int64_t end, int64_t step);
NB_API nb_tensor *nb_select(const nb_tensor *t, int64_t dim, int64_t index);
/* Removes every dim of size 1. */
NB_API nb_tensor *nb_squeeze(const nb_tensor *t);
NB_API nb_tensor *nb_squeeze_dim(const nb_tensor *t, int64_t dim);
NB_API nb_tensor *nb_unsqueeze(const nb_tensor *t, int64_t dim);
/* -1 keeps a size; new leading dims may be added. */
NB_API nb_tensor *nb_expand(const nb_tensor *t, const int64_t *shape, int ndim);
NB_API nb_tensor *nb_flatten(const nb_tensor *t, int64_t start_dim, int64_t end_dim);
/* A view with arbitrary sizes, strides and storage offset (torch.as_strided). */
NB_API nb_tensor *nb_as_strided(const nb_tensor *t, const int64_t *shape, const int64_t *strides,
                                int ndim, int64_t offset);

/* ---- copies -------------------------------------------------------------------------------- */

/* t itself (a new reference) when contiguous, else a contiguous copy. */
NB_API nb_tensor *nb_contiguous(const nb_tensor *t);

/* How a dense 4-D [N, C, H, W] tensor lays its elements out (torch.memory_format):
 * NB_CONTIGUOUS_FORMAT is row-major NCHW; NB_CHANNELS_LAST keeps the logical shape but strides
 * [H*W*C, 1, W*C, C], so that a pixel's channels are adjacent (NHWC in memory). On the CPU,
 * convolution, batch norm, pooling, softmax, cat and the elementwise ops keep a channels-last input's layout in
 * their results and gradients, and the float32 convolution then runs oneDNN's NHWC kernels with
 * no layout conversion between layers. Other ops (and the CUDA backend) accept it as any strided
 * tensor. */
typedef enum nb_memory_format { NB_CONTIGUOUS_FORMAT = 0, NB_CHANNELS_LAST = 1 } nb_memory_format;

/* t.contiguous(memory_format=f): t itself (a new reference) when already dense in format f,
 * else a copy in that layout (differentiable). NB_CHANNELS_LAST needs a 4-D tensor. A tensor
 * dense in both layouts (one channel, as an MNIST batch, or a 1x1 plane) with row-major strides
 * comes back as a view with the channels-last strides [H*W*C, 1, W*C, C] (as torch's
 * x.to(memory_format=torch.channels_last) does), which the layers then keep channels-last. */
NB_API nb_tensor *nb_contiguous_format(const nb_tensor *t, nb_memory_format f);
/* t.is_contiguous(memory_format=f); size-1 dims are ignored, as PyTorch does. */
NB_API bool nb_tensor_is_contiguous_format(const nb_tensor *t, nb_memory_format f);
/* A copy (differentiable): channels-last when t is, else contiguous (torch's preserve_format). */
NB_API nb_tensor *nb_clone(const nb_tensor *t);
/* A copy converted to dtype (t itself when it already has that dtype). */
NB_API nb_tensor *nb_to_dtype(const nb_tensor *t, nb_dtype dtype);
/* A copy on device (t itself when it already lives there). */
NB_API nb_tensor *nb_to(const nb_tensor *t, nb_device device);
/* Copies src into dst in place, broadcasting src and converting its dtype; dst and src may be on
 * different devices. */
NB_API nb_status nb_copy_(nb_tensor *dst, const nb_tensor *src);
NB_API nb_status nb_fill_(nb_tensor *t, double value);
NB_API nb_status nb_zero_(nb_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
