// CUDA kernels: the index family (index_select, index_add, gather, scatter, scatter_add,
// masked_fill, one_hot) with the CPU kernels' semantics (src/cpu/ops/index.c), one thread per
// position of the iteration shape, and the range check of every index before anything is
// written. The adding ops use atomics (float32, float64, int64, int32), so duplicate indices
// accumulate correctly; their float sums are then order-dependent in the last bits, as PyTorch's.
#include <stdint.h>

#include "cuda/kernels.h"

namespace {

__device__ __forceinline__ int64_t read_idx(const void *p, int64_t off, bool i32)
{
    return i32 ? (int64_t)((const int32_t *)p)[off] : ((const int64_t *)p)[off];
}

// the first (lowest linear position) out-of-range index of a strided index tensor
__global__ void check_kernel(const void *idx, bool i32, nb_cuda_desc d, int64_t n, int64_t size, unsigned long long *bad)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off = 0, r = i;
        for (int k = d.ndim - 1; k >= 0; k--) {
            off += (r % d.shape[k]) * d.strides[k];
            r /= d.shape[k];
        }
        int64_t v = read_idx(idx, off, i32);
        if (v < 0 || v >= size) atomicMin(bad, (unsigned long long)i);
    }
}

// one thread: latches the first bad position of a capture's check and the value there
__global__ void latch_kernel(const void *idx, bool i32, nb_cuda_desc d, const unsigned long long *cur,
                             unsigned long long *sticky)
{
    unsigned long long i = *cur;
    if (i == ~0ULL || sticky[0] != ~0ULL) return;
    int64_t off = 0, r = (int64_t)i;
    for (int k = d.ndim - 1; k >= 0; k--) {
        off += (r % d.shape[k]) * d.strides[k];
        r /= d.shape[k];
    }
    sticky[0] = i;
    sticky[1] = (unsigned long long)read_idx(idx, off, i32);
}

template <typename E> __device__ __forceinline__ void add_at(E *p, E v);
template <> __device__ __forceinline__ void add_at<float>(float *p, float v) { atomicAdd(p, v); }
template <> __device__ __forceinline__ void add_at<double>(double *p, double v) { atomicAdd(p, v); }
template <> __device__ __forceinline__ void add_at<int64_t>(int64_t *p, int64_t v)
{
    atomicAdd((unsigned long long *)p, (unsigned long long)v);
}
template <> __device__ __forceinline__ void add_at<int32_t>(int32_t *p, int32_t v) { atomicAdd(p, v); }

// E: the element type (a same-size integer for the moving ops, the real type for the adding ones)
template <typename E, bool ADD> __global__ void index_kernel(nb_cuda_index_args a)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < a.n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t p[NB_CUDA_MAX_DIMS], r = i;
        for (int k = a.ndim - 1; k >= 0; k--) {
            p[k] = r % a.shape[k];
            r /= a.shape[k];
        }
        int64_t io = 0, oo = 0, ao = 0;
        if (a.idx_1d) io = p[a.dim] * a.st_idx[a.dim];
        else
            for (int k = 0; k < a.ndim; k++) io += p[k] * a.st_idx[k];
        if (a.mode == NB_CUDA_INDEX_MASK) { // masked_fill: the "index" is the bool mask
            for (int k = 0; k < a.ndim; k++) oo += p[k] * a.st_out[k];
            if (((const bool *)a.idx)[io]) ((E *)a.out)[oo] = *(const E *)&a.bits;
            continue;
        }
        int64_t v = read_idx(a.idx, io, a.idx_i32);
        if (v < 0 || v >= a.lim) continue; // checked by the caller, or after a graph replay
        for (int k = 0; k < a.ndim; k++) {
            oo += (k == a.dim && a.sub_out ? v : p[k]) * a.st_out[k];
            ao += (k == a.dim && a.sub_a ? v : p[k]) * a.st_a[k];
        }
        if (a.mode == NB_CUDA_INDEX_ONE_HOT) {
            ((int64_t *)a.out)[oo + v * a.st_last] = 1;
            continue;
        }
        E val = a.mode == NB_CUDA_INDEX_VALUE ? *(const E *)&a.bits : ((const E *)a.a)[ao];
        if constexpr (ADD) add_at<E>((E *)a.out + oo, val);
        else ((E *)a.out)[oo] = val;
    }
}

unsigned grid_for(int64_t n)
{
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 65535 * 8 ? b : 65535 * 8);
}

} // namespace

extern "C" cudaError_t nb_cuda_launch_index_check(const nb_cuda_desc *idx, int64_t n, int64_t size,
                                                  unsigned long long *bad, cudaStream_t s)
{
    if (n == 0) return cudaSuccess;
    check_kernel<<<grid_for(n), 256, 0, s>>>(idx->data, idx->dtype == 3 /* int32 */, *idx, n, size, bad);
    return cudaGetLastError();
}

extern "C" cudaError_t nb_cuda_launch_index_latch(const nb_cuda_desc *idx, const unsigned long long *cur,
                                                  unsigned long long *sticky, cudaStream_t s)
{
    latch_kernel<<<1, 1, 0, s>>>(idx->data, idx->dtype == 3 /* int32 */, *idx, cur, sticky);
    return cudaGetLastError();
}

extern "C" cudaError_t nb_cuda_launch_index(const nb_cuda_index_args *a, bool add, cudaStream_t s)
{
    if (a->n == 0) return cudaSuccess;
    unsigned g = grid_for(a->n);
    if (add) {
        switch (a->dtype) {
        case 0: index_kernel<float, true><<<g, 256, 0, s>>>(*a); break;
        case 1: index_kernel<double, true><<<g, 256, 0, s>>>(*a); break;
        case 2: index_kernel<int64_t, true><<<g, 256, 0, s>>>(*a); break;
        case 3: index_kernel<int32_t, true><<<g, 256, 0, s>>>(*a); break;
        default: return cudaErrorInvalidValue;
        }
    } else {
        switch (a->es) {
        case 1: index_kernel<uint8_t, false><<<g, 256, 0, s>>>(*a); break;
        case 2: index_kernel<uint16_t, false><<<g, 256, 0, s>>>(*a); break;
        case 4: index_kernel<uint32_t, false><<<g, 256, 0, s>>>(*a); break;
        case 8: index_kernel<uint64_t, false><<<g, 256, 0, s>>>(*a); break;
        default: return cudaErrorInvalidValue;
        }
    }
    return cudaGetLastError();
}
