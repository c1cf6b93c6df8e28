/* CUDA kernels' C side for the reduce family: the plan (kept and reduced dims with their strides)
 * from the kernel arguments, the dtype checks of the CPU kernel, one launch of reduce.cu. */
#include "core/tensor_impl.h"
#include "cuda/cuda_impl.h"

nb_status nb_cuda_k_reduce(nb_op op, const nb_kargs *a)
{
    const nb_tensor *in = a->in[0];
    nb_tensor *out = a->out, *o2 = a->out2;
    nb_cuda_reduce_plan p = {0};
    p.in = nb__data(in);
    p.out = nb__data(out);
    p.out2 = o2 ? nb__data(o2) : NULL;
    p.in_dtype = (int)in->dtype;
    p.out_dtype = (int)out->dtype;
    p.nout = p.nred = 1;
    for (int d = 0; d < in->ndim; d++) {
        if (a->dim_mask >> d & 1) {
            p.rsize[p.nr] = in->shape[d];
            p.rin[p.nr++] = in->strides[d];
            p.nred *= in->shape[d];
        } else {
            p.ksize[p.nk] = in->shape[d];
            p.kin[p.nk] = in->strides[d];
            p.kout[p.nk] = out->strides[d];
            p.kout2[p.nk++] = o2 ? o2->strides[d] : 0;
            p.nout *= in->shape[d];
        }
    }
    if (p.nout == 0) return NB_OK;
    bool extreme = op == NB_OP_MAX || op == NB_OP_MIN || op == NB_OP_ARGMAX || op == NB_OP_ARGMIN;
    if (extreme && p.nred == 0)
        return nb__err(NB_ERR_INVALID_ARG, "%s: cannot reduce over a dim of size 0", nb__op_name(op));
    int dev = out->storage->device.index;
    int prev = nb__cuda_enter(dev);
    cudaError_t e = nb_cuda_launch_reduce(op, &p, a->s0, a->i0, a->flag, nb__cuda_stream(dev)->handle);
    nb__cuda_leave(prev);
    return e == cudaSuccess ? NB_OK : nb__cuda_err(e, nb__op_name(op));
}
