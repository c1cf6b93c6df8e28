/* CUDA kernels' C side for the index family: the CPU kernels' checks (index dtype, every index in
 * range before anything is written: an error naming the op, the value, the dim and its size), then
 * one walk of index.cu. The range check reads its verdict back, so these ops wait for the stream;
 * a check that stays on the device (a deferred error) is left for when it can be measured. The
 * backward rules' index ops (index_add for index_select and embedding, scatter_add for gather)
 * pass trusted_index: their saved indices passed the forward op's check, so they do not wait. */
#include <string.h>

#include "core/tensor_impl.h"
#include "cuda/cuda_impl.h"

static nb_status check_range(nb_op op, const nb_kargs *a, const nb_tensor *idx, int64_t size, int64_t dim, int dev,
                             cudaStream_t s)
{
    if (idx->dtype != NB_INT64 && idx->dtype != NB_INT32)
        return nb__err(NB_ERR_DTYPE, "%s: index must be int64 or int32, got %s", nb__op_name(op),
                       nb_dtype_name(idx->dtype));
    int64_t n = nb_tensor_numel(idx);
    if (n == 0 || a->trusted_index) return NB_OK;
    nb_cuda_desc d = nb__cuda_desc(idx, idx);
    if (nb__cuda_capturing(dev)) { /* the verdict is read after a replay (nb_cuda_graph_check) */
        unsigned long long *sticky = NULL, *slot = nb__cuda_graph_check_slot(dev, op, size, dim, &sticky);
        if (!slot) return nb_last_status();
        cudaError_t e = nb_cuda_launch_index_check(&d, n, size, slot, s);
        if (e == cudaSuccess) e = nb_cuda_launch_index_latch(&d, slot, sticky, s);
        return e == cudaSuccess ? NB_OK : nb__cuda_err(e, nb__op_name(op));
    }
    unsigned long long *bad = nb__cuda_alloc(dev, sizeof *bad), host_bad = ~0ULL;
    if (!bad) return nb_last_status();
    cudaError_t e = cudaMemcpyAsync(bad, &host_bad, sizeof host_bad, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = nb_cuda_launch_index_check(&d, n, size, bad, s);
    if (e == cudaSuccess) e = cudaMemcpyAsync(&host_bad, bad, sizeof host_bad, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    nb__cuda_free(dev, bad, sizeof *bad);
    if (e != cudaSuccess) return nb__cuda_err(e, nb__op_name(op));
    if (host_bad == ~0ULL) return NB_OK;
    /* the offending value, for the message */
    int64_t off = 0, r = (int64_t)host_bad, v = 0;
    for (int k = idx->ndim - 1; k >= 0; k--) {
        off += (r % idx->shape[k]) * idx->strides[k];
        r /= idx->shape[k];
    }
    size_t es = nb_dtype_size(idx->dtype);
    int32_t v32 = 0;
    e = cudaMemcpy(es == 4 ? (void *)&v32 : (void *)&v, nb__data(idx) + off * (int64_t)es, es, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) return nb__cuda_err(e, nb__op_name(op));
    if (es == 4) v = v32;
    if (op == NB_OP_ONE_HOT)
        return nb__err(NB_ERR_INVALID_ARG, "one_hot: index %lld is out of range for num_classes %lld", (long long)v,
                       (long long)size);
    return nb__err(NB_ERR_INVALID_ARG, "%s: index %lld is out of range for dim %lld of size %lld", nb__op_name(op),
                   (long long)v, (long long)dim, (long long)size);
}

static void set_strides(int64_t *dst, const nb_tensor *t, int ndim)
{
    for (int k = 0; k < ndim; k++) dst[k] = t ? t->strides[k] : 0;
}

static nb_status run(nb_op op, const nb_kargs *a, int dev, cudaStream_t s)
{
    nb_tensor *out = a->out;
    nb_cuda_index_args x = {0};
    int64_t dim = a->i0;
    const nb_tensor *idx = NULL, *src = NULL, *shape_of = NULL;
    x.dtype = (int)out->dtype;
    x.es = (int)nb_dtype_size(out->dtype);
    x.dim = (int)dim;
    x.out = nb__data(out);
    bool add = op == NB_OP_INDEX_ADD || op == NB_OP_SCATTER_ADD;
    if (add && out->dtype != NB_FLOAT32 && out->dtype != NB_FLOAT64 && out->dtype != NB_INT64 && out->dtype != NB_INT32)
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported on CUDA", nb__op_name(op), nb_dtype_name(out->dtype));
    switch (op) {
    case NB_OP_INDEX_SELECT:
        src = a->in[0], idx = a->in[1], shape_of = out;
        x.lim = src->shape[dim];
        NB_TRY(check_range(op, a, idx, x.lim, dim, dev, s));
        x.idx_1d = x.sub_a = true;
        break;
    case NB_OP_INDEX_ADD:
        idx = a->in[0], src = a->in[1], shape_of = src;
        x.lim = out->shape[dim];
        NB_TRY(check_range(op, a, idx, x.lim, dim, dev, s));
        x.idx_1d = x.sub_out = true;
        break;
    case NB_OP_GATHER:
        src = a->in[0], idx = a->in[1], shape_of = idx;
        x.lim = src->shape[dim];
        NB_TRY(check_range(op, a, idx, x.lim, dim, dev, s));
        x.sub_a = true;
        break;
    case NB_OP_SCATTER:
    case NB_OP_SCATTER_ADD:
        idx = a->in[0], src = a->in[1], shape_of = idx;
        if (!src && op == NB_OP_SCATTER_ADD) return nb__err(NB_ERR_INVALID_ARG, "scatter_add: no source tensor");
        x.lim = out->shape[dim];
        NB_TRY(check_range(op, a, idx, x.lim, dim, dev, s));
        if (!src) {
            x.mode = NB_CUDA_INDEX_VALUE;
            NB_TRY(nb__value_bits(op, out->dtype, a->s0, &x.bits));
        }
        x.sub_out = true;
        break;
    case NB_OP_MASKED_FILL: {
        shape_of = out;
        x.mode = NB_CUDA_INDEX_MASK;
        NB_TRY(nb__value_bits(op, out->dtype, a->s0, &x.bits));
        nb_cuda_desc m = nb__cuda_desc(a->in[0], out); /* the mask broadcast to out's shape */
        x.idx = m.data;
        memcpy(x.st_idx, m.strides, sizeof x.st_idx);
        break;
    }
    case NB_OP_ONE_HOT: {
        idx = a->in[0], shape_of = idx;
        int64_t classes = out->shape[out->ndim - 1];
        x.lim = classes;
        NB_TRY(check_range(op, a, idx, classes, 0, dev, s));
        nb_cuda_desc o = nb__cuda_desc(out, out);
        cudaError_t e = nb_cuda_launch_fill(&o, 0, nb_tensor_numel(out), s);
        if (e != cudaSuccess) return nb__cuda_err(e, "one_hot");
        x.mode = NB_CUDA_INDEX_ONE_HOT;
        x.dim = -1;
        x.st_last = out->strides[out->ndim - 1];
        break;
    }
    default: return nb__err(NB_ERR_INTERNAL, "index kernels: unexpected op %s", nb__op_name(op));
    }
    x.ndim = shape_of->ndim;
    memcpy(x.shape, shape_of->shape, (size_t)x.ndim * sizeof *x.shape);
    x.n = nb_tensor_numel(shape_of);
    set_strides(x.st_out, out, x.ndim);
    set_strides(x.st_a, src, x.ndim);
    if (idx) {
        x.idx = nb__data(idx);
        x.idx_i32 = idx->dtype == NB_INT32;
        if (x.idx_1d) {
            for (int k = 0; k < x.ndim; k++) x.st_idx[k] = 0;
            x.st_idx[dim] = idx->ndim ? idx->strides[0] : 0;
        } else {
            set_strides(x.st_idx, idx, x.ndim);
        }
    }
    x.a = src ? nb__data(src) : NULL;
    cudaError_t e = nb_cuda_launch_index(&x, add, s);
    return e == cudaSuccess ? NB_OK : nb__cuda_err(e, nb__op_name(op));
}

nb_status nb_cuda_k_index(nb_op op, const nb_kargs *a)
{
    int dev = a->out->storage->device.index;
    int prev = nb__cuda_enter(dev);
    nb_status st = run(op, a, dev, nb__cuda_stream(dev)->handle);
    nb__cuda_leave(prev);
    return st;
}
