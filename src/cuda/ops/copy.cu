// CUDA kernels: strided copy with dtype conversion, and fill. One thread per output element in
// a grid-stride loop; offsets come from the linear index through the output's shape.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "cuda/kernels.h"

namespace {

// nb_dtype's values (include/nabla/core.h)
enum { F32 = 0, F64, I64, I32, U8, BOOL, F16, BF16 };

struct Strided {
    int ndim;
    int64_t shape[NB_CUDA_MAX_DIMS];
    int64_t strides[NB_CUDA_MAX_DIMS];
};

__device__ __forceinline__ int64_t offset_of(int64_t i, const Strided &d)
{
    int64_t off = 0;
    for (int k = d.ndim - 1; k >= 0; k--) {
        int64_t sz = d.shape[k];
        off += (i % sz) * d.strides[k];
        i /= sz;
    }
    return off;
}

// Conversions as C's casts do them; to bool is != 0; half types go through float.
template <typename TO, typename TI> __device__ __forceinline__ TO conv(TI x) { return static_cast<TO>(x); }
template <> __device__ __forceinline__ bool conv<bool, float>(float x) { return x != 0.0f; }
template <> __device__ __forceinline__ bool conv<bool, double>(double x) { return x != 0.0; }
#define HALF_CONV(H, TOF, FROMF)                                                                  \
    template <> __device__ __forceinline__ H conv<H, float>(float x) { return TOF(x); }            \
    template <> __device__ __forceinline__ H conv<H, double>(double x) { return TOF((float)x); }   \
    template <> __device__ __forceinline__ H conv<H, int64_t>(int64_t x) { return TOF((float)x); } \
    template <> __device__ __forceinline__ H conv<H, int32_t>(int32_t x) { return TOF((float)x); } \
    template <> __device__ __forceinline__ H conv<H, uint8_t>(uint8_t x) { return TOF((float)x); } \
    template <> __device__ __forceinline__ H conv<H, bool>(bool x) { return TOF(x ? 1.0f : 0.0f); } \
    template <> __device__ __forceinline__ float conv<float, H>(H x) { return FROMF(x); }          \
    template <> __device__ __forceinline__ double conv<double, H>(H x) { return FROMF(x); }        \
    template <> __device__ __forceinline__ int64_t conv<int64_t, H>(H x) { return (int64_t)FROMF(x); } \
    template <> __device__ __forceinline__ int32_t conv<int32_t, H>(H x) { return (int32_t)FROMF(x); } \
    template <> __device__ __forceinline__ uint8_t conv<uint8_t, H>(H x) { return (uint8_t)FROMF(x); } \
    template <> __device__ __forceinline__ bool conv<bool, H>(H x) { return FROMF(x) != 0.0f; }     \
    template <> __device__ __forceinline__ H conv<H, H>(H x) { return x; }
HALF_CONV(__half, __float2half, __half2float)
HALF_CONV(__nv_bfloat16, __float2bfloat16, __bfloat162float)
template <> __device__ __forceinline__ __half conv<__half, __nv_bfloat16>(__nv_bfloat16 x)
{
    return __float2half(__bfloat162float(x));
}
template <> __device__ __forceinline__ __nv_bfloat16 conv<__nv_bfloat16, __half>(__half x)
{
    return __float2bfloat16(__half2float(x));
}

template <typename TO, typename TI>
__global__ void copy_kernel(TO *out, Strided o, const TI *in, Strided si, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[offset_of(i, o)] = conv<TO, TI>(in[offset_of(i, si)]);
}

template <typename TO> __global__ void fill_kernel(TO *out, Strided o, TO v, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[offset_of(i, o)] = v;
}

Strided strided(const nb_cuda_desc *d)
{
    Strided s;
    s.ndim = d->ndim;
    for (int k = 0; k < NB_CUDA_MAX_DIMS; k++) {
        s.shape[k] = k < d->ndim ? d->shape[k] : 1;
        s.strides[k] = k < d->ndim ? d->strides[k] : 0;
    }
    return s;
}

unsigned grid_for(int64_t n)
{
    int64_t blocks = (n + 255) / 256;
    return (unsigned)(blocks < 65535 * 8 ? blocks : 65535 * 8);
}

template <typename TO, typename TI>
cudaError_t launch_copy2(const nb_cuda_desc *o, const nb_cuda_desc *i, int64_t n, cudaStream_t s)
{
    copy_kernel<TO, TI><<<grid_for(n), 256, 0, s>>>((TO *)o->data, strided(o), (const TI *)i->data, strided(i), n);
    return cudaGetLastError();
}

template <typename TO> cudaError_t launch_copy1(const nb_cuda_desc *o, const nb_cuda_desc *i, int64_t n, cudaStream_t s)
{
    switch (i->dtype) {
    case F32: return launch_copy2<TO, float>(o, i, n, s);
    case F64: return launch_copy2<TO, double>(o, i, n, s);
    case I64: return launch_copy2<TO, int64_t>(o, i, n, s);
    case I32: return launch_copy2<TO, int32_t>(o, i, n, s);
    case U8: return launch_copy2<TO, uint8_t>(o, i, n, s);
    case BOOL: return launch_copy2<TO, bool>(o, i, n, s);
    case F16: return launch_copy2<TO, __half>(o, i, n, s);
    case BF16: return launch_copy2<TO, __nv_bfloat16>(o, i, n, s);
    default: return cudaErrorInvalidValue;
    }
}

template <typename TO> cudaError_t launch_fill1(const nb_cuda_desc *o, TO v, int64_t n, cudaStream_t s)
{
    fill_kernel<TO><<<grid_for(n), 256, 0, s>>>((TO *)o->data, strided(o), v, n);
    return cudaGetLastError();
}

} // namespace

extern "C" cudaError_t nb_cuda_launch_copy(const nb_cuda_desc *o, const nb_cuda_desc *i, int64_t n, cudaStream_t s)
{
    switch (o->dtype) {
    case F32: return launch_copy1<float>(o, i, n, s);
    case F64: return launch_copy1<double>(o, i, n, s);
    case I64: return launch_copy1<int64_t>(o, i, n, s);
    case I32: return launch_copy1<int32_t>(o, i, n, s);
    case U8: return launch_copy1<uint8_t>(o, i, n, s);
    case BOOL: return launch_copy1<bool>(o, i, n, s);
    case F16: return launch_copy1<__half>(o, i, n, s);
    case BF16: return launch_copy1<__nv_bfloat16>(o, i, n, s);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t nb_cuda_launch_fill(const nb_cuda_desc *o, double v, int64_t n, cudaStream_t s)
{
    switch (o->dtype) {
    case F32: return launch_fill1<float>(o, (float)v, n, s);
    case F64: return launch_fill1<double>(o, v, n, s);
    case I64: return launch_fill1<int64_t>(o, (int64_t)v, n, s);
    case I32: return launch_fill1<int32_t>(o, (int32_t)v, n, s);
    case U8: return launch_fill1<uint8_t>(o, (uint8_t)v, n, s);
    case BOOL: return launch_fill1<bool>(o, v != 0.0, n, s);
    case F16: return launch_fill1<__half>(o, __float2half((float)v), n, s);
    case BF16: return launch_fill1<__nv_bfloat16>(o, __float2bfloat16((float)v), n, s);
    default: return cudaErrorInvalidValue;
    }
}
