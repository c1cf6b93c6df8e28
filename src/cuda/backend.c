/* The CUDA device's table: memory from the caching pools, copies to and from the host on the
 * current stream, and the kernel families built so far (the rest are NULL: dispatching them is an
 * NB_ERR_UNSUPPORTED error naming the op and the device). */
#include "cuda/cuda_impl.h"

#define FAMILY(f) nb_status nb_cuda_k_##f(nb_op op, const nb_kargs *a);
FAMILY(copy)
FAMILY(fill)
FAMILY(binary)
FAMILY(unary)
FAMILY(reduce)
FAMILY(gemm)
FAMILY(softmax)
FAMILY(cumsum)
FAMILY(where)
FAMILY(random)
FAMILY(index)
FAMILY(pool)
FAMILY(sort)
FAMILY(rnn)
FAMILY(batchnorm)
#ifdef NB_HAVE_CUDNN
FAMILY(conv)
#endif
#undef FAMILY

nb_status nb__cuda_fused_optim(int index, const nb_optim_batch *b);

static int cuda_count(void) { return nb__cuda_count(); }

/* Copies with pageable host memory: queued on the current stream, then waited for, since the
 * host buffer may be reused as soon as the call returns. */
static nb_status copy_sync(int index, void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                           const char *what)
{
    if (!n) return NB_OK;
    if (nb__cuda_capturing(index))
        return nb__cuda_capture_refuse(index, what, "a copy with pageable host memory must wait for the device "
                                       "(copy outside the capture, into a tensor the graph reads)");
    int prev = nb__cuda_enter(index);
    cudaStream_t s = nb__cuda_stream(index)->handle;
    cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    nb__cuda_leave(prev);
    return e == cudaSuccess ? NB_OK : nb__cuda_err(e, what);
}

static nb_status cuda_to_host(int index, void *dst, const void *src, size_t n)
{
    return copy_sync(index, dst, src, n, cudaMemcpyDeviceToHost, "copy to host");
}

static nb_status cuda_from_host(int index, void *dst, const void *src, size_t n)
{
    return copy_sync(index, dst, src, n, cudaMemcpyHostToDevice, "copy from host");
}

static nb_status cuda_sync(int index) { return nb_cuda_synchronize(index); }

static bool cuda_capturing(int index) { return nb__cuda_capturing(index); }

#define none NULL
#define copy nb_cuda_k_copy
#define cat NULL /* cat: src/ops/join.c copies each input into its slice */
#define fill nb_cuda_k_fill
#define random nb_cuda_k_random
#define binary nb_cuda_k_binary
#define unary nb_cuda_k_unary
#define where nb_cuda_k_where
#define reduce nb_cuda_k_reduce
#define softmax nb_cuda_k_softmax
#define cumsum nb_cuda_k_cumsum
#define gemm nb_cuda_k_gemm
#define index nb_cuda_k_index
#define sort nb_cuda_k_sort
#ifdef NB_HAVE_CUDNN
#define conv nb_cuda_k_conv
#else
#define conv NULL
#endif
#define pool nb_cuda_k_pool
#define batchnorm nb_cuda_k_batchnorm
#define rnn nb_cuda_k_rnn

const nb_backend nb__cuda_backend = {
    .name = "cuda",
    .device_count = cuda_count,
    .alloc = nb__cuda_alloc,
    .free = nb__cuda_free,
    .copy_to_host = cuda_to_host,
    .copy_from_host = cuda_from_host,
    .synchronize = cuda_sync,
    .memory_stats = nb__cuda_memory_stats,
    .reset_peak_stats = nb__cuda_reset_peak_stats,
    .fused_optim = nb__cuda_fused_optim,
    .is_capturing = cuda_capturing,
    .capture_defer = nb__cuda_capture_defer,
    .capture_refuse = nb__cuda_capture_refuse,
    .kernels = {
#define X(id, name, family) [NB_OP_##id] = family,
#include "core/ops.def"
#undef X
    },
};
