/* CUDA kernels' C side: COPY (with dtype conversion and broadcasting) and FILL. Contiguous
 * same-dtype copies are one cudaMemcpyAsync; the rest launch the strided kernels of copy.cu. */
#include "core/tensor_impl.h"
#include "cuda/cuda_impl.h"

nb_cuda_desc nb__cuda_desc(const nb_tensor *t, const nb_tensor *like)
{
    nb_cuda_desc d = {0};
    d.data = nb__data(t);
    d.dtype = (int)t->dtype;
    d.ndim = like->ndim;
    int off = like->ndim - t->ndim; /* t is broadcast to like's shape: align the trailing dims */
    for (int i = 0; i < like->ndim; i++) {
        int j = i - off;
        d.shape[i] = like->shape[i];
        d.strides[i] = j >= 0 && t->shape[j] != 1 ? t->strides[j] : 0;
    }
    return d;
}

static bool contiguous(const nb_tensor *t)
{
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != s) return false;
        s *= t->shape[i];
    }
    return true;
}

nb_status nb_cuda_k_copy(nb_op op, const nb_kargs *a)
{
    const nb_tensor *in = a->in[0];
    nb_tensor *out = a->out;
    int64_t n = nb_tensor_numel(out);
    if (n == 0) return NB_OK;
    int dev = out->storage->device.index;
    int prev = nb__cuda_enter(dev);
    cudaStream_t s = nb__cuda_stream(dev)->handle;
    cudaError_t e;
    if (in->dtype == out->dtype && nb_tensor_numel(in) == n && in->ndim == out->ndim && contiguous(in) &&
        contiguous(out)) {
        e = cudaMemcpyAsync(nb__data(out), nb__data(in), (size_t)n * nb_dtype_size(out->dtype),
                            cudaMemcpyDeviceToDevice, s);
    } else {
        nb_cuda_desc o = nb__cuda_desc(out, out), i = nb__cuda_desc(in, out);
        e = nb_cuda_launch_copy(&o, &i, n, s);
    }
    nb__cuda_leave(prev);
    return e == cudaSuccess ? NB_OK : nb__cuda_err(e, "copy");
}

nb_status nb_cuda_k_fill(nb_op op, const nb_kargs *a)
{
    int64_t n = nb_tensor_numel(a->out);
    if (n == 0) return NB_OK;
    int dev = a->out->storage->device.index;
    int prev = nb__cuda_enter(dev);
    nb_cuda_desc o = nb__cuda_desc(a->out, a->out);
    cudaError_t e = nb_cuda_launch_fill(&o, a->s0, n, nb__cuda_stream(dev)->handle);
    nb__cuda_leave(prev);
    return e == cudaSuccess ? NB_OK : nb__cuda_err(e, "fill");
}
