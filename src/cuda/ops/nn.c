/* CUDA kernels' C side for the pool and batchnorm families: the CPU kernels' dtype checks and
 * parameter unpacking (ops.def), the launches of nn.cu on the current stream (batch norm: with a
 * scratch block from the caching allocator for its partial sums). */
#include "core/tensor_impl.h"
#include "cuda/cuda_impl.h"

static void *ptr(const nb_tensor *t) { return t ? nb__data(t) : NULL; }

static nb_status check(nb_op op, nb_dtype dt)
{
    if (dt != NB_FLOAT32 && dt != NB_FLOAT64)
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported (float32/float64 only)", nb__op_name(op),
                       nb_dtype_name(dt));
    return NB_OK;
}

nb_status nb_cuda_k_pool(nb_op op, const nb_kargs *a)
{
    NB_TRY(check(op, a->out->dtype));
    if (op == NB_OP_MAX_POOL2D && a->flag) /* the front end runs max_pool2d_relu as two ops here */
        return nb__err(NB_ERR_INTERNAL, "max_pool2d: the CUDA kernel has no fused ReLU");
    bool back = op == NB_OP_MAX_POOL2D_BACKWARD || op == NB_OP_AVG_POOL2D_BACKWARD ||
                op == NB_OP_ADAPTIVE_AVG_POOL2D_BACKWARD;
    const nb_tensor *x = back ? a->out : a->in[0], *y = back ? a->in[0] : a->out;
    nb_cuda_pool g = {
        .planes = x->shape[0] * x->shape[1], .h = x->shape[2], .w = x->shape[3], .oh = y->shape[2], .ow = y->shape[3],
        .kh = a->i0 & 0xffff, .kw = (a->i0 >> 16) & 0xffff, .sh = (a->i0 >> 32) & 0xffff, .sw = (a->i0 >> 48) & 0xffff,
        .ph = a->i1 & 0xffff, .pw = (a->i1 >> 16) & 0xffff, .count_include_pad = a->flag,
    };
    int dev = a->out->storage->device.index;
    int prev = nb__cuda_enter(dev);
    cudaError_t e = nb_cuda_launch_pool(op, a->out->dtype == NB_FLOAT64, &g, ptr(a->in[0]), ptr(a->in[1]), ptr(a->out),
                                        ptr(a->out2), nb__cuda_stream(dev)->handle);
    nb__cuda_leave(prev);
    return e == cudaSuccess ? NB_OK : nb__cuda_err(e, nb__op_name(op));
}

/* BATCH_NORM with i0 set: the running statistics' update (out = running mean, out2 = running var,
 * in place; in[0] = the stats; s0 = momentum, s1 = the variance's factor). */
static nb_status bn_running(const nb_kargs *a)
{
    const nb_tensor *rm = a->out, *rv = a->out2, *st = a->in[0];
    NB_TRY(check(NB_OP_BATCH_NORM, st->dtype));
    int dev = rm->storage->device.index;
    int prev = nb__cuda_enter(dev);
    cudaError_t e = nb_cuda_launch_batchnorm_running(st->dtype == NB_FLOAT64, st->shape[1], ptr(st), ptr(rm),
                                                     rm->strides[0], ptr(rv), rv->strides[0], a->s0, a->s1,
                                                     nb__cuda_stream(dev)->handle);
    nb__cuda_leave(prev);
    return e == cudaSuccess ? NB_OK : nb__cuda_err(e, "batch_norm (running statistics)");
}

nb_status nb_cuda_k_batchnorm(nb_op op, const nb_kargs *a)
{
    bool back = op == NB_OP_BATCH_NORM_BACKWARD;
    if (!back && op != NB_OP_BATCH_NORM)
        return nb__err(NB_ERR_INTERNAL, "batchnorm: op %s is not in this family", nb__op_name(op));
    if (!back && a->i0) return bn_running(a);
    if (a->i1 || a->in[3] || a->out3) /* the front ends fuse ReLU and residual on the CPU only */
        return nb__err(NB_ERR_INTERNAL, "%s: the CUDA kernels have no fused ReLU or residual", nb__op_name(op));
    const nb_tensor *x = back ? a->in[1] : a->in[0];
    NB_TRY(check(op, x->dtype));
    const nb_tensor *dense[3] = {x, a->out, back ? a->in[0] : NULL};
    for (int i = 0; i < 3; i++)
        if (dense[i] && !nb__is_contiguous(dense[i]))
            return nb__err(NB_ERR_INTERNAL, "%s: the CUDA kernel takes contiguous tensors", nb__op_name(op));
    int64_t n = x->shape[0], c = x->shape[1], s = nb__numel(x->shape + 2, x->ndim - 2);
    int dev = x->storage->device.index;
    int prev = nb__cuda_enter(dev);
    size_t bytes = nb_cuda_batchnorm_scratch(back, n, c, s, a->flag);
    void *scratch = bytes ? nb__cuda_alloc(dev, bytes) : NULL;
    cudaError_t e = cudaSuccess;
    if (scratch || !bytes) {
        e = nb_cuda_launch_batchnorm(back, x->dtype == NB_FLOAT64, n, c, s, ptr(a->in[0]), ptr(a->in[1]),
                                     ptr(a->in[2]), ptr(a->out), ptr(a->out2), scratch, a->s0, a->flag,
                                     nb__cuda_stream(dev)->handle);
        /* stream-ordered: the block is reused only by later work on this stream */
        if (scratch) nb__cuda_free(dev, scratch, bytes);
    }
    nb__cuda_leave(prev);
    if (bytes && !scratch) return nb_last_status();
    return e == cudaSuccess ? NB_OK : nb__cuda_err(e, nb__op_name(op));
}
