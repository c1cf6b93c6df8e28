// CUDA kernels: reductions, with the CPU reference's semantics (src/cpu/ops/reduce.c): float
// accumulation in double, integer sums and products in int64, NaN wins in max/min (and its first
// position), the first occurrence of an extreme, VAR in two passes, LOGSUMEXP shifted by the max.
// One block per output: its threads stride over the reduced elements, then combine in shared
// memory. (A warp-per-output variant for short rows is left for when it can be measured.)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "cuda/ops/common.cuh"

namespace {

enum { F32 = 0, F64, I64, I32, U8, BOOL, F16, BF16 };
constexpr int THREADS = 256;

template <typename T> __device__ __forceinline__ double ld_d(const T *p, int64_t i) { return (double)p[i]; }
template <> __device__ __forceinline__ double ld_d<__half>(const __half *p, int64_t i) { return __half2float(p[i]); }
template <> __device__ __forceinline__ double ld_d<__nv_bfloat16>(const __nv_bfloat16 *p, int64_t i)
{
    return __bfloat162float(p[i]);
}
template <typename T> __device__ __forceinline__ int64_t ld_i(const T *p, int64_t i) { return (int64_t)p[i]; }
template <> __device__ __forceinline__ int64_t ld_i<__half>(const __half *p, int64_t i) { return (int64_t)__half2float(p[i]); }
template <> __device__ __forceinline__ int64_t ld_i<__nv_bfloat16>(const __nv_bfloat16 *p, int64_t i)
{
    return (int64_t)__bfloat162float(p[i]);
}

__device__ __forceinline__ int64_t offset(int64_t i, int n, const int64_t *sizes, const int64_t *strides)
{
    int64_t off = 0;
    for (int k = n - 1; k >= 0; k--) {
        off += (i % sizes[k]) * strides[k];
        i /= sizes[k];
    }
    return off;
}


__device__ int64_t block_sum_i(int64_t v, long long *sh, bool product)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            sh[threadIdx.x] = product ? (long long)((uint64_t)sh[threadIdx.x] * (uint64_t)sh[threadIdx.x + s])
                                      : (long long)((uint64_t)sh[threadIdx.x] + (uint64_t)sh[threadIdx.x + s]);
        __syncthreads();
    }
    int64_t r = sh[0];
    __syncthreads();
    return r;
}

__device__ double block_prod(double v, double *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] *= sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

// Extremes with positions. `better(a, b)`: a replaces b. NaN wins; among equals (or NaNs) the
// lower position wins; idx -1 marks "no element" (a thread with nothing to reduce).
struct Ext {
    double d;
    int64_t i, idx;
};

__device__ __forceinline__ bool ext_better(const Ext &a, const Ext &b, bool is_int, int sign)
{
    if (a.idx < 0) return false;
    if (b.idx < 0) return true;
    if (is_int) {
        if (a.i != b.i) return sign > 0 ? a.i > b.i : a.i < b.i;
        return a.idx < b.idx;
    }
    bool an = a.d != a.d, bn = b.d != b.d;
    if (an || bn) return an && (!bn || a.idx < b.idx);
    if (a.d != b.d) return sign > 0 ? a.d > b.d : a.d < b.d;
    return a.idx < b.idx;
}

__device__ Ext block_ext(Ext v, bool is_int, int sign, double *shd, long long *shi, long long *shx)
{
    shd[threadIdx.x] = v.d;
    shi[threadIdx.x] = v.i;
    shx[threadIdx.x] = v.idx;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            Ext a = {shd[threadIdx.x], shi[threadIdx.x], shx[threadIdx.x]};
            Ext b = {shd[threadIdx.x + s], shi[threadIdx.x + s], shx[threadIdx.x + s]};
            if (ext_better(b, a, is_int, sign)) {
                shd[threadIdx.x] = b.d;
                shi[threadIdx.x] = b.i;
                shx[threadIdx.x] = b.idx;
            }
        }
        __syncthreads();
    }
    Ext r = {shd[0], shi[0], shx[0]};
    __syncthreads();
    return r;
}

__device__ void store(void *out, int dtype, int64_t off, double d, int64_t i, bool is_int)
{
    switch (dtype) {
    case F32: ((float *)out)[off] = (float)(is_int ? (double)i : d); break;
    case F64: ((double *)out)[off] = is_int ? (double)i : d; break;
    case I64: ((int64_t *)out)[off] = is_int ? i : (int64_t)d; break;
    case I32: ((int32_t *)out)[off] = (int32_t)(is_int ? i : (int64_t)d); break;
    case U8: ((uint8_t *)out)[off] = (uint8_t)(is_int ? i : (int64_t)d); break;
    case BOOL: ((bool *)out)[off] = is_int ? i != 0 : d != 0; break;
    case F16: ((__half *)out)[off] = __float2half((float)(is_int ? (double)i : d)); break;
    case BF16: ((__nv_bfloat16 *)out)[off] = __float2bfloat16((float)(is_int ? (double)i : d)); break;
    default: break;
    }
}

template <typename T>
__global__ void reduce_kernel(int op, const T *in, nb_cuda_reduce_plan p, double s0, int64_t i0, bool flag)
{
    __shared__ double shd[THREADS];
    __shared__ long long shi[THREADS], shx[THREADS];
    const bool is_int = !(p.in_dtype == F32 || p.in_dtype == F64 || p.in_dtype == F16 || p.in_dtype == BF16);
    for (int64_t o = blockIdx.x; o < p.nout; o += gridDim.x) {
        const T *b = in + offset(o, p.nk, p.ksize, p.kin);
        int64_t oo = offset(o, p.nk, p.ksize, p.kout), n = p.nred;
        double d = 0;
        int64_t iv = 0, idx = 0;
        bool res_int = false;
        switch (op) {
        case NB_CUDA_OP_SUM:
        case NB_CUDA_OP_MEAN: {
            double sd = 0;
            int64_t si = 0;
            for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
                int64_t off = offset(r, p.nr, p.rsize, p.rin);
                if (is_int) si += ld_i(b, off);
                else sd += ld_d(b, off);
            }
            res_int = is_int;
            if (is_int) iv = block_sum_i(si, shi, false);
            else d = nb_block_sum(sd, shd);
            if (op == NB_CUDA_OP_MEAN) d /= (double)n;
            break;
        }
        case NB_CUDA_OP_PROD: {
            double pd = 1;
            int64_t pi = 1;
            for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
                int64_t off = offset(r, p.nr, p.rsize, p.rin);
                if (is_int) pi = (int64_t)((uint64_t)pi * (uint64_t)ld_i(b, off));
                else pd *= ld_d(b, off);
            }
            res_int = is_int;
            if (is_int) iv = block_sum_i(pi, shi, true);
            else d = block_prod(pd, shd);
            break;
        }
        case NB_CUDA_OP_MAX:
        case NB_CUDA_OP_MIN:
        case NB_CUDA_OP_ARGMAX:
        case NB_CUDA_OP_ARGMIN: {
            int sign = op == NB_CUDA_OP_MAX || op == NB_CUDA_OP_ARGMAX ? 1 : -1;
            Ext e = {0, 0, -1};
            for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
                int64_t off = offset(r, p.nr, p.rsize, p.rin);
                Ext c = {ld_d(b, off), ld_i(b, off), r};
                if (ext_better(c, e, is_int, sign)) e = c;
            }
            e = block_ext(e, is_int, sign, shd, shi, shx);
            d = e.d;
            iv = e.i;
            idx = e.idx;
            res_int = is_int;
            break;
        }
        case NB_CUDA_OP_ALL:
        case NB_CUDA_OP_ANY: {
            int64_t hit = 0; // ALL: a zero seen; ANY: a nonzero seen
            for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
                bool nz = ld_d(b, offset(r, p.nr, p.rsize, p.rin)) != 0;
                hit |= op == NB_CUDA_OP_ALL ? !nz : nz;
            }
            hit = block_sum_i(hit, shi, false) != 0;
            iv = op == NB_CUDA_OP_ALL ? !hit : hit;
            res_int = true;
            break;
        }
        case NB_CUDA_OP_VAR: {
            double s = 0;
            for (int64_t r = threadIdx.x; r < n; r += blockDim.x) s += ld_d(b, offset(r, p.nr, p.rsize, p.rin));
            double mean = nb_block_sum(s, shd) / (double)n, ss = 0;
            for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
                double dv = ld_d(b, offset(r, p.nr, p.rsize, p.rin)) - mean;
                ss += dv * dv;
            }
            double dof = (double)n - (double)i0;
            d = nb_block_sum(ss, shd) / (dof > 0 ? dof : 0);
            if (flag) d = sqrt(d);
            break;
        }
        case NB_CUDA_OP_LOGSUMEXP: {
            Ext e = {0, 0, -1};
            for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
                Ext c = {ld_d(b, offset(r, p.nr, p.rsize, p.rin)), 0, r};
                if (ext_better(c, e, false, 1)) e = c;
            }
            e = block_ext(e, false, 1, shd, shi, shx);
            double m = e.idx < 0 ? -INFINITY : e.d, shift = isinf(m) ? 0 : m, s = 0;
            for (int64_t r = threadIdx.x; r < n; r += blockDim.x) s += exp(ld_d(b, offset(r, p.nr, p.rsize, p.rin)) - shift);
            d = log(nb_block_sum(s, shd)) + shift;
            break;
        }
        default: { // NORM, s0 = p
            double pn = s0;
            if (isinf(pn)) {
                Ext e = {0, 0, -1};
                for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
                    Ext c = {fabs(ld_d(b, offset(r, p.nr, p.rsize, p.rin))), 0, r};
                    if (ext_better(c, e, false, pn > 0 ? 1 : -1)) e = c;
                }
                e = block_ext(e, false, pn > 0 ? 1 : -1, shd, shi, shx);
                d = e.idx < 0 ? 0 : e.d;
            } else {
                double s = 0;
                for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
                    double v = fabs(ld_d(b, offset(r, p.nr, p.rsize, p.rin)));
                    s += pn == 0 ? (v != 0) : pn == 1 ? v : pn == 2 ? v * v : pow(v, pn);
                }
                s = nb_block_sum(s, shd);
                d = pn == 0 || pn == 1 ? s : pn == 2 ? sqrt(s) : pow(s, 1 / pn);
            }
            break;
        }
        }
        if (threadIdx.x == 0) {
            bool arg = op == NB_CUDA_OP_ARGMAX || op == NB_CUDA_OP_ARGMIN;
            if (arg) ((int64_t *)p.out)[oo] = idx;
            else store(p.out, p.out_dtype, oo, d, iv, res_int);
            if (p.out2) ((int64_t *)p.out2)[offset(o, p.nk, p.ksize, p.kout2)] = idx;
        }
    }
}

template <typename T> cudaError_t launch(int op, const nb_cuda_reduce_plan *p, double s0, int64_t i0, bool flag, cudaStream_t s)
{
    int64_t blocks = p->nout < (1 << 20) ? p->nout : (1 << 20);
    reduce_kernel<T><<<(unsigned)blocks, THREADS, 0, s>>>(op, (const T *)p->in, *p, s0, i0, flag);
    return cudaGetLastError();
}

} // namespace

extern "C" cudaError_t nb_cuda_launch_reduce(int op, const nb_cuda_reduce_plan *p, double s0, int64_t i0, bool flag,
                                             cudaStream_t s)
{
    if (p->nout == 0) return cudaSuccess;
    switch (p->in_dtype) {
    case F32: return launch<float>(op, p, s0, i0, flag, s);
    case F64: return launch<double>(op, p, s0, i0, flag, s);
    case I64: return launch<int64_t>(op, p, s0, i0, flag, s);
    case I32: return launch<int32_t>(op, p, s0, i0, flag, s);
    case U8: return launch<uint8_t>(op, p, s0, i0, flag, s);
    case BOOL: return launch<bool>(op, p, s0, i0, flag, s);
    case F16: return launch<__half>(op, p, s0, i0, flag, s);
    case BF16: return launch<__nv_bfloat16>(op, p, s0, i0, flag, s);
    default: return cudaErrorInvalidValue;
    }
}
