/* CUDA kernels' C side for the reduce family: the plan (kept and reduced dims with their strides,
 * size-1 dims dropped and dims that step as one merged, as the CPU's plan), the dtype checks of
 * the CPU kernel, the workspace of a split reduction from the caching allocator, the launch. */
#include "core/tensor_impl.h"
#include "cuda/cuda_impl.h"

/* Appends a dim of n elements to the reduced (kept = false) or kept list of p, merging it into
 * the previous one when the two step as one in every operand. */
static void plan_add(nb_cuda_reduce_plan *p, bool kept, int64_t n, int64_t si, int64_t so, int64_t s2)
{
    if (!kept) {
        int r = p->nr;
        if (r && p->rin[r - 1] == si * n) {
            p->rsize[r - 1] *= n;
            p->rin[r - 1] = si;
        } else {
            p->rsize[r] = n;
            p->rin[p->nr++] = si;
        }
        return;
    }
    int k = p->nk;
    if (k && p->kin[k - 1] == si * n && p->kout[k - 1] == so * n && p->kout2[k - 1] == s2 * n) {
        p->ksize[k - 1] *= n;
        p->kin[k - 1] = si, p->kout[k - 1] = so, p->kout2[k - 1] = s2;
    } else {
        p->ksize[k] = n;
        p->kin[k] = si, p->kout[k] = so, p->kout2[k] = s2;
        p->nk++;
    }
}

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
        bool kept = !(a->dim_mask >> d & 1);
        int64_t n = in->shape[d];
        if (kept) p.nout *= n;
        else p.nred *= n;
        if (n > 1) /* size 0 makes nout or nred 0: no element is read */
            plan_add(&p, kept, n, in->strides[d], kept ? out->strides[d] : 0, kept && o2 ? o2->strides[d] : 0);
    }
    if (p.nout == 0) return NB_OK;
    bool extreme = op == NB_OP_MAX || op == NB_OP_MIN || op == NB_OP_ARGMAX || op == NB_OP_ARGMIN;
    if (extreme && p.nred == 0)
        return nb__err(NB_ERR_INVALID_ARG, "%s: cannot reduce over a dim of size 0", nb__op_name(op));
    int dev = out->storage->device.index;
    int prev = nb__cuda_enter(dev);
    size_t wsz = nb_cuda_reduce_workspace(op, &p);
    void *ws = wsz ? nb__cuda_alloc(dev, wsz) : NULL;
    cudaError_t e = cudaSuccess;
    if (!wsz || ws) e = nb_cuda_launch_reduce(op, &p, a->s0, a->i0, a->flag, ws, nb__cuda_stream(dev)->handle);
    if (ws) nb__cuda_free(dev, ws, wsz); /* reused only by work queued after these launches */
    nb__cuda_leave(prev);
    if (wsz && !ws) return nb_last_status();
    return e == cudaSuccess ? NB_OK : nb__cuda_err(e, nb__op_name(op));
}
