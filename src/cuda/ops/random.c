/* CUDA kernels' C side for the random family: the CPU kernel's dtype checks and Philox layout,
 * one launch. BERNOULLI validates its probabilities as the CPU does; reading the verdict back
 * waits for the stream (an error must be reported by this call), so bernoulli is a sync point.
 * nb_dropout draws through it: on a GPU it should draw rand and compare instead (same values),
 * which needs no check (left for when this can be measured on a GPU). */
#include "core/philox_impl.h"
#include "core/tensor_impl.h"
#include "cuda/cuda_impl.h"

nb_status nb_cuda_k_random(nb_op op, const nb_kargs *a)
{
    nb_dtype dt = a->out->dtype;
    bool ok = op == NB_OP_RANDINT ? dt <= NB_BOOL : (dt == NB_FLOAT32 || dt == NB_FLOAT64);
    if (!ok) return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported on CUDA", nb__op_name(op), nb_dtype_name(dt));
    if (op == NB_OP_BERNOULLI && a->in[0]->dtype != dt)
        return nb__err(NB_ERR_DTYPE, "bernoulli: probs %s and out %s differ", nb_dtype_name(a->in[0]->dtype),
                       nb_dtype_name(dt));
    int64_t n = nb_tensor_numel(a->out);
    if (n == 0) return NB_OK;
    int per = nb__philox_per_counter(op == NB_OP_RANDINT || dt == NB_FLOAT64);
    int dev = a->out->storage->device.index;
    int prev = nb__cuda_enter(dev);
    cudaStream_t s = nb__cuda_stream(dev)->handle;
    nb_cuda_desc o = nb__cuda_desc(a->out, a->out), p;
    unsigned long long *bad = NULL, host_bad = ~0ULL;
    cudaError_t e = cudaSuccess;
    if (op == NB_OP_BERNOULLI) {
        p = nb__cuda_desc(a->in[0], a->out);
        bad = nb__cuda_alloc(dev, sizeof *bad);
        if (!bad) {
            nb__cuda_leave(prev);
            return nb_last_status();
        }
        e = cudaMemcpyAsync(bad, &host_bad, sizeof host_bad, cudaMemcpyHostToDevice, s);
    }
    if (e == cudaSuccess)
        e = nb_cuda_launch_random(op, &o, op == NB_OP_BERNOULLI ? &p : NULL, a->seed, a->offset, per, n, a->i0,
                                  (uint64_t)a->i1 - (uint64_t)a->i0, bad, s);
    if (bad) {
        if (e == cudaSuccess) e = cudaMemcpyAsync(&host_bad, bad, sizeof host_bad, cudaMemcpyDeviceToHost, s);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s);
        nb__cuda_free(dev, bad, sizeof *bad);
    }
    nb__cuda_leave(prev);
    if (e != cudaSuccess) return nb__cuda_err(e, nb__op_name(op));
    if (host_bad != ~0ULL)
        return nb__err(NB_ERR_INVALID_ARG, "bernoulli: probs must be in [0, 1], not at element %llu", host_bad);
    return NB_OK;
}
