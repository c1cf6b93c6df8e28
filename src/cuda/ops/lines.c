/* CUDA kernels' C side for the line families (softmax, cumsum) and for WHERE: the geometry from
 * the kernel arguments, the CPU kernels' dtype checks, one launch on the current stream. */
#include "core/tensor_impl.h"
#include "cuda/cuda_impl.h"

/* Lines along dim of out and up to two inputs (all of out's shape; inputs may have stride 0). */
static nb_cuda_lines lines_of(const nb_tensor *out, const nb_tensor *const *in, int nin, int dim)
{
    nb_cuda_lines p = {0};
    const nb_tensor *ops[3] = {out, nin > 0 ? in[0] : NULL, nin > 1 ? in[1] : NULL};
    p.n = 1;
    for (int k = 0; k < 3; k++) p.data[k] = ops[k] ? nb__data(ops[k]) : NULL;
    for (int d = 0; d < out->ndim; d++) {
        if (d == dim) {
            p.D = out->shape[d];
            for (int k = 0; k < 3; k++) p.sd[k] = ops[k] ? ops[k]->strides[d] : 0;
            continue;
        }
        p.shape[p.nd] = out->shape[d];
        for (int k = 0; k < 3; k++) p.st[k][p.nd] = ops[k] ? ops[k]->strides[d] : 0;
        p.nd++;
        p.n *= out->shape[d];
    }
    if (out->ndim == 0) p.D = 1;
    return p;
}

static nb_status done(cudaError_t e, nb_op op, int prev)
{
    nb__cuda_leave(prev);
    return e == cudaSuccess ? NB_OK : nb__cuda_err(e, nb__op_name(op));
}

nb_status nb_cuda_k_softmax(nb_op op, const nb_kargs *a)
{
    if (op != NB_OP_SOFTMAX && op != NB_OP_LOG_SOFTMAX && op != NB_OP_SOFTMAX_BACKWARD &&
        op != NB_OP_LOG_SOFTMAX_BACKWARD)
        return nb__err(NB_ERR_UNSUPPORTED, "%s: no CUDA kernel yet", nb__op_name(op));
    nb_dtype dt = a->out->dtype;
    if (dt != NB_FLOAT32 && dt != NB_FLOAT64)
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported (float32/float64 only)", nb__op_name(op),
                       nb_dtype_name(dt));
    for (int k = 0; k < 2 && a->in[k]; k++)
        if (a->in[k]->dtype != dt)
            return nb__err(NB_ERR_DTYPE, "%s: input dtype %s differs from the output's %s", nb__op_name(op),
                           nb_dtype_name(a->in[k]->dtype), nb_dtype_name(dt));
    bool back = op == NB_OP_SOFTMAX_BACKWARD || op == NB_OP_LOG_SOFTMAX_BACKWARD;
    nb_cuda_lines p = lines_of(a->out, a->in, back ? 2 : 1, (int)a->i0);
    int dev = a->out->storage->device.index;
    int prev = nb__cuda_enter(dev);
    return done(nb_cuda_launch_softmax(op, &p, (int)dt, nb__cuda_stream(dev)->handle), op, prev);
}

nb_status nb_cuda_k_cumsum(nb_op op, const nb_kargs *a)
{
    nb_dtype in = a->in[0]->dtype;
    if (in == NB_FLOAT16 || in == NB_BFLOAT16)
        return nb__err(NB_ERR_DTYPE, "cumsum: dtype %s is not supported", nb_dtype_name(in));
    nb_cuda_lines p = lines_of(a->out, a->in, 1, (int)a->i0);
    int dev = a->out->storage->device.index;
    int prev = nb__cuda_enter(dev);
    cudaError_t e = nb_cuda_launch_cumsum(&p, (int)in, (int)a->out->dtype, a->flag, nb__cuda_stream(dev)->handle);
    return done(e, op, prev);
}

nb_status nb_cuda_k_where(nb_op op, const nb_kargs *a)
{
    nb_tensor *out = a->out;
    int64_t n = nb_tensor_numel(out);
    if (n == 0) return NB_OK;
    nb_cuda_desc o = nb__cuda_desc(out, out), c = nb__cuda_desc(a->in[0], out), x = nb__cuda_desc(a->in[1], out),
                 y = nb__cuda_desc(a->in[2], out);
    int dev = out->storage->device.index;
    int prev = nb__cuda_enter(dev);
    cudaError_t e = nb_cuda_launch_where(&o, &c, &x, &y, (int)nb_dtype_size(out->dtype), n, nb__cuda_stream(dev)->handle);
    return done(e, op, prev);
}
