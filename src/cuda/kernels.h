/* The interface between the CUDA backend's C files and its kernels (.cu files, CUDA C++): plain
 * structs and extern "C" launchers, without nabla's internal C11 headers. */
#ifndef NB_CUDA_KERNELS_H
#define NB_CUDA_KERNELS_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NB_CUDA_MAX_DIMS 8

/* The op ids, equal to nb_op's values (both come from ops.def). */
enum nb_cuda_op {
#define X(id, name, family) NB_CUDA_OP_##id,
#include "core/ops.def"
#undef X
    NB_CUDA_OP_COUNT
};

/* A strided view for a kernel: dtype is nb_dtype's value; strides in elements, laid out over the
 * OUTPUT's shape (broadcast dims have stride 0). */
typedef struct nb_cuda_desc {
    void *data;
    int dtype;
    int ndim;
    int64_t shape[NB_CUDA_MAX_DIMS];
    int64_t strides[NB_CUDA_MAX_DIMS];
} nb_cuda_desc;

/* out[i] = (out dtype) in[i]; both over out's shape. Returns the launch's error. */
cudaError_t nb_cuda_launch_copy(const nb_cuda_desc *out, const nb_cuda_desc *in, int64_t n, cudaStream_t s);
/* out[i] = (out dtype) value. */
cudaError_t nb_cuda_launch_fill(const nb_cuda_desc *out, double value, int64_t n, cudaStream_t s);

/* A reduction's geometry: the kept dims (outputs) and the reduced dims, each with its sizes and
 * strides in elements (kin/rin: the input's; kout/kout2: out's and out2's). */
typedef struct nb_cuda_reduce_plan {
    const void *in;
    void *out, *out2; /* out2: int64 positions or NULL */
    int in_dtype, out_dtype;
    int nk, nr;
    int64_t ksize[NB_CUDA_MAX_DIMS], kin[NB_CUDA_MAX_DIMS], kout[NB_CUDA_MAX_DIMS], kout2[NB_CUDA_MAX_DIMS];
    int64_t rsize[NB_CUDA_MAX_DIMS], rin[NB_CUDA_MAX_DIMS];
    int64_t nout, nred;
} nb_cuda_reduce_plan;

/* The bytes of device workspace nb_cuda_launch_reduce needs for this reduction on the current
 * device (0: none): split reductions keep per-chunk partials (and VAR's means, LOGSUMEXP's
 * shifts) there. */
size_t nb_cuda_reduce_workspace(int op, const nb_cuda_reduce_plan *p);
/* The reduce family (SUM..NORM) with the CPU kernel's semantics. ws: the workspace asked for by
 * nb_cuda_reduce_workspace (valid until the launches on s have run); with ws NULL the launch
 * takes the generic path (one block per output). */
cudaError_t nb_cuda_launch_reduce(int op, const nb_cuda_reduce_plan *p, double s0, int64_t i0, bool flag, void *ws,
                                  cudaStream_t s);

/* Lines along one dim for up to 3 operands (0 = out, then inputs): the other dims' shape and
 * each operand's strides over them, the length D and each operand's stride along the dim. */
typedef struct nb_cuda_lines {
    void *data[3];
    int nd;
    int64_t shape[NB_CUDA_MAX_DIMS], st[3][NB_CUDA_MAX_DIMS];
    int64_t D, sd[3], n;
} nb_cuda_lines;

/* SOFTMAX, LOG_SOFTMAX (data = out, x), their backward (data = out, g, y); float32/float64. */
cudaError_t nb_cuda_launch_softmax(int op, const nb_cuda_lines *p, int dtype, cudaStream_t s);
/* CUMSUM (data = out, x); reverse: sums from the end. */
cudaError_t nb_cuda_launch_cumsum(const nb_cuda_lines *p, int in_dtype, int out_dtype, bool reverse, cudaStream_t s);
/* WHERE: out = cond ? x : y, all described over out's shape; elem_size: out's element size. */
cudaError_t nb_cuda_launch_where(const nb_cuda_desc *out, const nb_cuda_desc *cond, const nb_cuda_desc *x,
                                 const nb_cuda_desc *y, int elem_size, int64_t n, cudaStream_t s);

/* RAND, RANDN, RANDINT (low, range = high - low mod 2^64), BERNOULLI (probs of out's shape; the
 * first bad element index goes to the device word *bad by atomicMin): Philox with the CPU layout,
 * `per` elements per counter. */
cudaError_t nb_cuda_launch_random(int op, const nb_cuda_desc *out, const nb_cuda_desc *probs, uint64_t seed,
                                  uint64_t offset, int per, int64_t n, int64_t low, uint64_t range,
                                  unsigned long long *bad, cudaStream_t s);

/* The index family's walk: every position p of `shape`; v = the index at p (idx_1d: at p[dim]
 * of a 1-D index); out at p (with p[dim] = v when sub_out), a (self or src) at p (with
 * p[dim] = v when sub_a). mode: copy a, store the value `bits`, masked fill (idx is the bool
 * mask over shape), or one-hot (out[p, v] = 1, st_last = out's last stride). */
enum { NB_CUDA_INDEX_COPY = 0, NB_CUDA_INDEX_VALUE, NB_CUDA_INDEX_MASK, NB_CUDA_INDEX_ONE_HOT };
typedef struct nb_cuda_index_args {
    int mode, ndim, dim, dtype, es;
    bool idx_1d, idx_i32, sub_out, sub_a;
    int64_t shape[NB_CUDA_MAX_DIMS], st_out[NB_CUDA_MAX_DIMS], st_a[NB_CUDA_MAX_DIMS], st_idx[NB_CUDA_MAX_DIMS];
    int64_t st_last, n;
    int64_t lim; /* indices outside [0, lim) are skipped (a graph replay checks them afterwards) */
    void *out;
    const void *a, *idx;
    uint64_t bits;
} nb_cuda_index_args;

/* Writes into *bad (device) the lowest linear position of idx (int64/int32, strided, n elements)
 * holding a value outside [0, size). */
cudaError_t nb_cuda_launch_index_check(const nb_cuda_desc *idx, int64_t n, int64_t size, unsigned long long *bad,
                                       cudaStream_t s);
/* After an index check in a graph capture: when *cur holds a bad position and sticky[0] none yet,
 * sticky = {that position, the index value there} (kept across replays until reported). */
cudaError_t nb_cuda_launch_index_latch(const nb_cuda_desc *idx, const unsigned long long *cur,
                                       unsigned long long *sticky, cudaStream_t s);
/* add: the accumulating form (atomics; float32/float64/int64/int32). */
cudaError_t nb_cuda_launch_index(const nb_cuda_index_args *a, bool add, cudaStream_t s);

/* The fused optimizer step: chunks of NB_CUDA_OPTIM_CHUNK elements of the batch's entries, the
 * entries and chunks in device memory. */
#define NB_CUDA_OPTIM_CHUNK 65536
typedef struct nb_cuda_chunk {
    int32_t entry;
    int64_t start;
} nb_cuda_chunk;
struct nb_optim_batch;
struct nb_optim_entry;
cudaError_t nb_cuda_launch_optim(const struct nb_optim_batch *b, const struct nb_optim_entry *dev_entries,
                                 const nb_cuda_chunk *dev_chunks, int64_t nchunks, cudaStream_t s);

/* Pooling geometry (contiguous NCHW): planes = N C, input h x w, output oh x ow, kernel, stride,
 * padding; count_include_pad for average pooling. */
typedef struct nb_cuda_pool {
    int64_t planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw;
    bool count_include_pad;
} nb_cuda_pool;
/* The pool family: in0 = x (forward) or the output gradient (backward), in1 = max pooling's
 * indices (its backward), out2 = the indices (max forward); dtype 0 float32, 1 float64. */
cudaError_t nb_cuda_launch_pool(int op, int dtype, const nb_cuda_pool *g, const void *in0, const void *in1, void *out,
                                void *out2, cudaStream_t s);
/* Batch norm over x [n, c, sp] (contiguous). Forward: a0..a2 = x, weight, bias (NULL: 1, 0), out
 * = y, out2 = stats [3, c]: rows 0 and 1 (mean, biased var) computed from the batch when training,
 * read otherwise; row 2 written with the weight (or 1). Backward: a0 = g, a1 = x, a2 = the
 * forward's stats [3, c], out = gx or NULL, out2 = [2, c] (grad weight, grad bias). scratch:
 * nb_cuda_batchnorm_scratch's bytes of device memory of the stream st (NULL when 0). dtype 0
 * float32, 1 float64. Two launches (one in evaluation); the results do not depend on the GPU or
 * the run. */
size_t nb_cuda_batchnorm_scratch(bool backward, int64_t n, int64_t c, int64_t sp, bool training);
cudaError_t nb_cuda_launch_batchnorm(bool backward, int dtype, int64_t n, int64_t c, int64_t sp, const void *a0,
                                     const void *a1, const void *a2, void *out, void *out2, void *scratch, double eps,
                                     bool training, cudaStream_t st);
/* The running statistics, in place (strides in elements): rm = (1 - momentum) rm + momentum mean,
 * rv = (1 - momentum) rv + f var, from rows 0 and 1 of stats [>= 2, c], in double. */
cudaError_t nb_cuda_launch_batchnorm_running(int dtype, int64_t c, const void *stats, void *rm, int64_t rm_stride,
                                             void *rv, int64_t rv_stride, double momentum, double f, cudaStream_t st);

/* SORT / TOPK over lines (data = out, input, indices; D = the input's length along dim): the
 * first m of each sorted line go to out and the int64 indices. With scratch NULL, writes the
 * device scratch size needed into *scratch_bytes and launches nothing. es: the element size. */
cudaError_t nb_cuda_launch_sort(const nb_cuda_lines *p, int dtype, int es, int64_t m, bool descending, void *scratch,
                                size_t *scratch_bytes, cudaStream_t s);

/* One LSTM step (t) of the rnn family. Forward: in0 = xp [T, B, 4H], act [T, B, 4H] (holding
 * h W_hh^T at step t when flag), out = Y [2, T+1, B, H]. Backward: in0 = gY, in1 = Y, act, out =
 * dgates [T, B, 4H], out2 = dhc [2, B, H]. dtype 0 float32, 1 float64. */
cudaError_t nb_cuda_launch_lstm_cell(bool backward, int dtype, int64_t T, int64_t B, int64_t H, int64_t t, bool flag,
                                     const void *in0, const void *in1, void *act, void *out, void *out2,
                                     cudaStream_t s);

/* The binary family: ADD..MINIMUM (out in x's dtype), EQ..GE (bool out); y NULL: the scalar s0
 * (converted to x's dtype) is the second operand. */
cudaError_t nb_cuda_launch_binary(int op, const nb_cuda_desc *out, const nb_cuda_desc *x, const nb_cuda_desc *y,
                                  double s0, int64_t n, cudaStream_t s);
/* THRESHOLD_BACKWARD..SOFTPLUS_BACKWARD: out = f(g, x), floating dtypes. */
cudaError_t nb_cuda_launch_act_backward(int op, const nb_cuda_desc *out, const nb_cuda_desc *g, const nb_cuda_desc *x,
                                        double s0, double s1, int64_t i0, int64_t n, cudaStream_t s);
/* The unary family; q0, q1: CLAMP's bounds for integer dtypes, already in the type's range. */
cudaError_t nb_cuda_launch_unary(int op, const nb_cuda_desc *out, const nb_cuda_desc *x, double s0, double s1,
                                 int64_t q0, int64_t q1, int64_t i0, int64_t n, cudaStream_t s);

/* Device dev's multiprocessor count (read once, then cached); 0 when it cannot be read. */
int nb_cuda_sm_count(int dev);

/* Per-channel sums of an [n, c, s] contiguous float32/float64 tensor into out [c] (the conv bias
 * gradient): part holds c * parts doubles, parts from nb_cuda_chansum_parts. */
int nb_cuda_chansum_parts(int64_t n, int64_t c, int64_t s, int sm_count);
cudaError_t nb_cuda_launch_chansum(bool f64, int64_t n, int64_t c, int64_t s, const void *x, void *out, double *part,
                                   int parts, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
