// CUDA kernels: the optimizers' updates as one fused launch per (device, dtype) group of
// parameters ("multi-tensor apply"): the parameters are cut into chunks, each block takes chunks,
// and every element runs the same formula as the CPU loops of src/optim/ (sgd.c, adam.c,
// rmsprop.c), in the parameter's dtype with the scalars rounded to it first.
#include <math.h>
#include <stdint.h>

#include "core/optim_batch.h"
#include "cuda/kernels.h"

namespace {

template <typename T> __device__ __forceinline__ T tsqrt(T x) { return sqrt(x); }
template <> __device__ __forceinline__ float tsqrt<float>(float x) { return sqrtf(x); }

template <typename T>
__global__ void optim_kernel(nb_optim_batch b, const nb_optim_entry *es, const nb_cuda_chunk *chunks, int64_t nchunks)
{
    for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
        const nb_optim_entry e = es[chunks[c].entry];
        int64_t start = chunks[c].start, end = start + NB_CUDA_OPTIM_CHUNK < e.n ? start + NB_CUDA_OPTIM_CHUNK : e.n;
        T *p = (T *)e.p;
        const T *g = (const T *)e.g;
        T *b0 = (T *)e.buf[0], *b1 = (T *)e.buf[1], *b2 = (T *)e.buf[2];
        const T wd = (T)b.weight_decay, nlr = (T)(-b.lr);
        for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
            T pi = p[i], gi = g[i];
            switch (b.kind) {
            case NB_OPTIM_SGD: {
                const T mom = (T)b.momentum, damp = (T)(1 - b.dampening);
                T d = b.weight_decay != 0 ? gi + wd * pi : gi;
                if (b0) {
                    T bi = e.first ? d : b0[i] * mom + damp * d;
                    b0[i] = bi;
                    d = b.nesterov ? d + mom * bi : bi;
                }
                p[i] = pi + nlr * d;
                break;
            }
            case NB_OPTIM_ADAM:
            case NB_OPTIM_ADAMW: {
                const T b1c = (T)b.beta1, c1 = (T)(1 - b.beta1), b2c = (T)b.beta2, c2 = (T)(1 - b.beta2);
                if (b.kind == NB_OPTIM_ADAMW) pi = pi * (T)(1 - b.lr * b.weight_decay);
                else if (b.weight_decay != 0) gi = gi + wd * pi;
                T mi = b0[i] * b1c + c1 * gi, vi = b1[i] * b2c + c2 * gi * gi;
                b0[i] = mi;
                b1[i] = vi;
                if (b2) {
                    vi = b2[i] > vi ? b2[i] : vi;
                    b2[i] = vi;
                }
                T den = tsqrt(vi) / (T)e.bias2_sqrt + (T)b.eps;
                p[i] = pi + (T)(-e.step_size) * (mi / den);
                break;
            }
            default: { // RMSPROP: buf 0 square_avg, 1 momentum_buffer, 2 grad_avg
                const T al = (T)b.alpha, c = (T)(1 - b.alpha);
                gi = b.weight_decay != 0 ? gi + wd * pi : gi;
                T si = b0[i] * al + c * gi * gi;
                b0[i] = si;
                T avg;
                if (b2) {
                    T ai = b2[i] * al + c * gi;
                    b2[i] = ai;
                    avg = tsqrt(si + (T)-1 * ai * ai);
                } else {
                    avg = tsqrt(si);
                }
                avg = avg + (T)b.eps;
                if (b1) {
                    T bi = b1[i] * (T)b.momentum + gi / avg;
                    b1[i] = bi;
                    p[i] = pi + nlr * bi;
                } else {
                    p[i] = pi + nlr * (gi / avg);
                }
                break;
            }
            }
        }
    }
}

} // namespace

extern "C" cudaError_t nb_cuda_launch_optim(const nb_optim_batch *b, const nb_optim_entry *dev_entries,
                                            const nb_cuda_chunk *dev_chunks, int64_t nchunks, cudaStream_t s)
{
    if (nchunks == 0) return cudaSuccess;
    unsigned g = (unsigned)(nchunks < 65535 * 8 ? nchunks : 65535 * 8);
    if (b->dtype == 0) optim_kernel<float><<<g, 256, 0, s>>>(*b, dev_entries, dev_chunks, nchunks);
    else optim_kernel<double><<<g, 256, 0, s>>>(*b, dev_entries, dev_chunks, nchunks);
    return cudaGetLastError();
}
