/* CUDA kernels' C side for the sort family (SORT, TOPK): lines of the input along dim (the
 * outputs' strides over the same other dims), a scratch buffer from the caching allocator, one
 * segmented sort (sort.cu). */
#include "core/tensor_impl.h"
#include "cuda/cuda_impl.h"

nb_status nb_cuda_k_sort(nb_op op, const nb_kargs *a)
{
    const nb_tensor *in = a->in[0];
    nb_tensor *out = a->out, *idx = a->out2;
    if ((unsigned)in->dtype > NB_BOOL)
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported on CUDA", nb__op_name(op), nb_dtype_name(in->dtype));
    int dim = (int)a->i0;
    nb_cuda_lines p = {0};
    p.data[0] = nb__data(out);
    p.data[1] = nb__data(in);
    p.data[2] = nb__data(idx);
    p.n = 1;
    for (int d = 0; d < in->ndim; d++) {
        if (d == dim) {
            p.D = in->shape[d];
            p.sd[0] = out->strides[d], p.sd[1] = in->strides[d], p.sd[2] = idx->strides[d];
            continue;
        }
        p.shape[p.nd] = in->shape[d];
        p.st[0][p.nd] = out->strides[d], p.st[1][p.nd] = in->strides[d], p.st[2][p.nd] = idx->strides[d];
        p.nd++;
        p.n *= in->shape[d];
    }
    if (in->ndim == 0) p.D = 1;
    int64_t m = op == NB_OP_TOPK ? a->i1 : p.D;
    if (p.n == 0 || p.D == 0 || m == 0) return NB_OK;
    if (p.n * p.D > INT32_MAX)
        return nb__err(NB_ERR_UNSUPPORTED, "%s: %lld elements exceed the CUDA sort's 32-bit segment offsets",
                       nb__op_name(op), (long long)(p.n * p.D));
    int dev = out->storage->device.index;
    int prev = nb__cuda_enter(dev);
    cudaStream_t s = nb__cuda_stream(dev)->handle;
    int es = (int)nb_dtype_size(in->dtype);
    size_t bytes = 0;
    cudaError_t e = nb_cuda_launch_sort(&p, (int)in->dtype, es, m, a->flag, NULL, &bytes, s);
    void *scratch = e == cudaSuccess ? nb__cuda_alloc(dev, bytes) : NULL;
    if (scratch) {
        e = nb_cuda_launch_sort(&p, (int)in->dtype, es, m, a->flag, scratch, &bytes, s);
        nb__cuda_free(dev, scratch, bytes);
    }
    nb__cuda_leave(prev);
    if (e == cudaSuccess && !scratch) return nb_last_status();
    return e == cudaSuccess ? NB_OK : nb__cuda_err(e, nb__op_name(op));
}
