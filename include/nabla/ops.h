/* nabla/ops.h: operations on tensors, named as in PyTorch.
 *
 * Every op returns a new tensor reference (NULL on failure, see nabla/core.h), broadcasts its
 * tensor arguments the way NumPy and PyTorch do, accepts non-contiguous inputs, promotes dtypes
 * as PyTorch does, and records itself for autograd when grad mode is on and an input requires
 * grad. All tensor arguments of one call must live on one device. In-place variants end in `_`,
 * return an nb_status, and bump the version counter of the tensor they change.
 *
 * A `double` scalar argument counts as a Python float in PyTorch's type promotion: an integer or
 * bool tensor with a scalar computes in float32 (so nb_mul_scalar_ on an int64 tensor is an error),
 * a float32 tensor stays float32. Among tensors, those with dims outrank 0-dim ones, as in PyTorch.
 *
 * Dims may be negative (counted from the end). A reduction's `dims`/`ndims` pair names the dims
 * to reduce; ndims == 0 reduces over every dim.
 */
#ifndef NABLA_OPS_H
#define NABLA_OPS_H

#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- elementwise arithmetic ---------------------------------------------------------------- */

NB_API nb_tensor *nb_add(const nb_tensor *a, const nb_tensor *b);
NB_API nb_tensor *nb_sub(const nb_tensor *a, const nb_tensor *b);
NB_API nb_tensor *nb_mul(const nb_tensor *a, const nb_tensor *b);
/* True division: integer inputs give float32. */
NB_API nb_tensor *nb_div(const nb_tensor *a, const nb_tensor *b);
NB_API nb_tensor *nb_add_scalar(const nb_tensor *a, double s);
NB_API nb_tensor *nb_sub_scalar(const nb_tensor *a, double s);
NB_API nb_tensor *nb_mul_scalar(const nb_tensor *a, double s);
NB_API nb_tensor *nb_div_scalar(const nb_tensor *a, double s);
/* In place: a op= b, with b broadcast to a's shape and the result cast to a's dtype (an error
 * when the promoted dtype cannot be cast to a's, as for an int tensor += a float one). */
NB_API nb_status nb_add_(nb_tensor *a, const nb_tensor *b);
NB_API nb_status nb_sub_(nb_tensor *a, const nb_tensor *b);
NB_API nb_status nb_mul_(nb_tensor *a, const nb_tensor *b);
NB_API nb_status nb_div_(nb_tensor *a, const nb_tensor *b);
NB_API nb_status nb_add_scalar_(nb_tensor *a, double s);
NB_API nb_status nb_sub_scalar_(nb_tensor *a, double s);
NB_API nb_status nb_mul_scalar_(nb_tensor *a, double s);
NB_API nb_status nb_div_scalar_(nb_tensor *a, double s);

NB_API nb_tensor *nb_pow(const nb_tensor *a, const nb_tensor *exponent);
NB_API nb_tensor *nb_pow_scalar(const nb_tensor *a, double exponent);
NB_API nb_tensor *nb_maximum(const nb_tensor *a, const nb_tensor *b);
NB_API nb_tensor *nb_minimum(const nb_tensor *a, const nb_tensor *b);
/* cond ? a : b elementwise; cond is bool. */
NB_API nb_tensor *nb_where(const nb_tensor *cond, const nb_tensor *a, const nb_tensor *b);

/* ---- elementwise functions (integer inputs give float32 where PyTorch does) ----------------- */

NB_API nb_tensor *nb_neg(const nb_tensor *a);
NB_API nb_tensor *nb_abs(const nb_tensor *a);
NB_API nb_tensor *nb_sign(const nb_tensor *a);
NB_API nb_tensor *nb_exp(const nb_tensor *a);
NB_API nb_tensor *nb_log(const nb_tensor *a);
NB_API nb_tensor *nb_log1p(const nb_tensor *a);
NB_API nb_tensor *nb_sqrt(const nb_tensor *a);
NB_API nb_tensor *nb_rsqrt(const nb_tensor *a);
NB_API nb_tensor *nb_sin(const nb_tensor *a);
NB_API nb_tensor *nb_cos(const nb_tensor *a);
NB_API nb_tensor *nb_tanh(const nb_tensor *a);
NB_API nb_tensor *nb_sigmoid(const nb_tensor *a);
NB_API nb_tensor *nb_relu(const nb_tensor *a);
NB_API nb_tensor *nb_leaky_relu(const nb_tensor *a, double negative_slope);

/* NB_GELU_NONE: x Phi(x) (exact, through erfc for accuracy at large negative x); NB_GELU_TANH:
 * PyTorch's tanh approximation. */
typedef enum nb_gelu_approx { NB_GELU_NONE = 0, NB_GELU_TANH } nb_gelu_approx;
NB_API nb_tensor *nb_gelu(const nb_tensor *a, nb_gelu_approx approximate);
NB_API nb_tensor *nb_silu(const nb_tensor *a);
/* log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (PyTorch: 1, 20). */
NB_API nb_tensor *nb_softplus(const nb_tensor *a, double beta, double threshold);
/* Bounds may be -INFINITY / INFINITY for none; NaN bounds are an error. An integer tensor keeps its
 * dtype when every finite bound is a whole number, else the result is float32. */
NB_API nb_tensor *nb_clamp(const nb_tensor *a, double min, double max);

/* ---- comparisons (bool results; not differentiable) ----------------------------------------- */

NB_API nb_tensor *nb_eq(const nb_tensor *a, const nb_tensor *b);
NB_API nb_tensor *nb_ne(const nb_tensor *a, const nb_tensor *b);
NB_API nb_tensor *nb_lt(const nb_tensor *a, const nb_tensor *b);
NB_API nb_tensor *nb_le(const nb_tensor *a, const nb_tensor *b);
NB_API nb_tensor *nb_gt(const nb_tensor *a, const nb_tensor *b);
NB_API nb_tensor *nb_ge(const nb_tensor *a, const nb_tensor *b);
NB_API nb_tensor *nb_eq_scalar(const nb_tensor *a, double s);
NB_API nb_tensor *nb_ne_scalar(const nb_tensor *a, double s);
NB_API nb_tensor *nb_lt_scalar(const nb_tensor *a, double s);
NB_API nb_tensor *nb_le_scalar(const nb_tensor *a, double s);
NB_API nb_tensor *nb_gt_scalar(const nb_tensor *a, double s);
NB_API nb_tensor *nb_ge_scalar(const nb_tensor *a, double s);
NB_API nb_tensor *nb_logical_not(const nb_tensor *a);

/* ---- reductions ---------------------------------------------------------------------------- */

NB_API nb_tensor *nb_sum(const nb_tensor *t, const int64_t *dims, int ndims, bool keepdim);
NB_API nb_tensor *nb_mean(const nb_tensor *t, const int64_t *dims, int ndims, bool keepdim);
NB_API nb_tensor *nb_prod(const nb_tensor *t, const int64_t *dims, int ndims, bool keepdim);
/* Variance with Bessel's `correction` (1 = unbiased, 0 = population). */
NB_API nb_tensor *nb_var(const nb_tensor *t, const int64_t *dims, int ndims, int64_t correction,
                         bool keepdim);
NB_API nb_tensor *nb_std(const nb_tensor *t, const int64_t *dims, int ndims, int64_t correction,
                         bool keepdim);
NB_API nb_tensor *nb_logsumexp(const nb_tensor *t, const int64_t *dims, int ndims, bool keepdim);
/* The p-norm (p = INFINITY for the max-abs norm). */
NB_API nb_tensor *nb_norm(const nb_tensor *t, double p, const int64_t *dims, int ndims, bool keepdim);
/* bool results (uint8 for uint8 input, as PyTorch 1.13). */
NB_API nb_tensor *nb_all(const nb_tensor *t, const int64_t *dims, int ndims, bool keepdim);
NB_API nb_tensor *nb_any(const nb_tensor *t, const int64_t *dims, int ndims, bool keepdim);
/* The max / min over all elements (a 0-dim tensor). */
NB_API nb_tensor *nb_max(const nb_tensor *t);
NB_API nb_tensor *nb_min(const nb_tensor *t);
/* The max / min along dim; *indices (may be NULL) receives the int64 positions. */
NB_API nb_tensor *nb_max_dim(const nb_tensor *t, int64_t dim, bool keepdim, nb_tensor **indices);
NB_API nb_tensor *nb_min_dim(const nb_tensor *t, int64_t dim, bool keepdim, nb_tensor **indices);
/* dim = NB_DIM_NONE: over the flattened tensor (keepdim ignored then). */
#define NB_DIM_NONE INT64_MIN
NB_API nb_tensor *nb_argmax(const nb_tensor *t, int64_t dim, bool keepdim);
NB_API nb_tensor *nb_argmin(const nb_tensor *t, int64_t dim, bool keepdim);
NB_API nb_tensor *nb_softmax(const nb_tensor *t, int64_t dim);
NB_API nb_tensor *nb_log_softmax(const nb_tensor *t, int64_t dim);
NB_API nb_tensor *nb_cumsum(const nb_tensor *t, int64_t dim);

/* ---- linear algebra ------------------------------------------------------------------------ */

/* torch.matmul: dot, matrix-vector, matrix-matrix and broadcast batched products. */
NB_API nb_tensor *nb_matmul(const nb_tensor *a, const nb_tensor *b);
NB_API nb_tensor *nb_mm(const nb_tensor *a, const nb_tensor *b);
NB_API nb_tensor *nb_bmm(const nb_tensor *a, const nb_tensor *b);
/* beta * input + alpha * (a @ b), input broadcast to the product's shape. */
NB_API nb_tensor *nb_addmm(const nb_tensor *input, const nb_tensor *a, const nb_tensor *b,
                           double beta, double alpha);
/* x @ weight^T + bias; weight is [out, in]; bias may be NULL. */
NB_API nb_tensor *nb_linear(const nb_tensor *x, const nb_tensor *weight, const nb_tensor *bias);

/* ---- joining, splitting and indexing ------------------------------------------------------- */

NB_API nb_tensor *nb_cat(nb_tensor *const *tensors, int n, int64_t dim);
NB_API nb_tensor *nb_stack(nb_tensor *const *tensors, int n, int64_t dim);
/* Splits into views of split_size along dim (the last may be smaller). Writes at most cap
 * pieces to out and returns how many there are (so a call with cap 0 counts); -1 on failure. */
NB_API int nb_split(const nb_tensor *t, int64_t split_size, int64_t dim, nb_tensor **out, int cap);
NB_API int nb_split_with_sizes(const nb_tensor *t, const int64_t *sizes, int nsizes, int64_t dim,
                               nb_tensor **out, int cap);
NB_API int nb_chunk(const nb_tensor *t, int64_t chunks, int64_t dim, nb_tensor **out, int cap);

/* index is a 1-D int64 (or int32) tensor of positions along dim. */
NB_API nb_tensor *nb_index_select(const nb_tensor *t, int64_t dim, const nb_tensor *index);
NB_API nb_tensor *nb_gather(const nb_tensor *t, int64_t dim, const nb_tensor *index);
NB_API nb_tensor *nb_scatter(const nb_tensor *t, int64_t dim, const nb_tensor *index,
                             const nb_tensor *src);
NB_API nb_tensor *nb_scatter_add(const nb_tensor *t, int64_t dim, const nb_tensor *index,
                                 const nb_tensor *src);
NB_API nb_status nb_scatter_(nb_tensor *t, int64_t dim, const nb_tensor *index, const nb_tensor *src);
NB_API nb_status nb_scatter_add_(nb_tensor *t, int64_t dim, const nb_tensor *index,
                                 const nb_tensor *src);
NB_API nb_tensor *nb_masked_fill(const nb_tensor *t, const nb_tensor *mask, double value);
NB_API nb_status nb_masked_fill_(nb_tensor *t, const nb_tensor *mask, double value);
/* int64 [..., num_classes]; num_classes < 0 means max(t) + 1. */
NB_API nb_tensor *nb_one_hot(const nb_tensor *t, int64_t num_classes);
/* weight [num, dim] looked up at integer indices of any shape: [..., dim]. */
NB_API nb_tensor *nb_embedding(const nb_tensor *weight, const nb_tensor *indices);

/* Sorted values along dim; *indices (may be NULL) receives int64 positions. Stable. */
NB_API nb_tensor *nb_sort(const nb_tensor *t, int64_t dim, bool descending, nb_tensor **indices);
NB_API nb_tensor *nb_topk(const nb_tensor *t, int64_t k, int64_t dim, bool largest, bool sorted,
                          nb_tensor **indices);

#ifdef __cplusplus
}
#endif
#endif
