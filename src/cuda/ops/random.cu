// CUDA kernels: random numbers from Philox 4x32-10 with the CPU's layout (core/philox_impl.h,
// src/cpu/ops/random.c): element i takes counter offset + i / per and its words, so a seed gives
// the same values on the GPU as on the CPU (integers and uniforms bit for bit; normals up to the
// last bits of logf/sincosf, which differ between CUDA's and glibc's libm). One thread per
// counter. BERNOULLI records the first element whose probability is outside [0, 1] in *bad.
#include <stdint.h>

#include "core/philox_impl.h"
#include "cuda/kernels.h"

namespace {

enum { F32 = 0, F64, I64, I32, U8, BOOL };

__device__ __forceinline__ int64_t off_of(int64_t i, const nb_cuda_desc &d)
{
    int64_t off = 0;
    for (int k = d.ndim - 1; k >= 0; k--) {
        off += (i % d.shape[k]) * d.strides[k];
        i /= d.shape[k];
    }
    return off;
}

template <typename T> __device__ __forceinline__ void put(void *out, int64_t off, T v) { ((T *)out)[off] = v; }

__global__ void random_kernel(int op, nb_cuda_desc out, nb_cuda_desc probs, uint64_t seed, uint64_t offset, int per,
                              int64_t n, int64_t low, uint64_t range, unsigned long long *bad)
{
    int64_t counters = (n + per - 1) / per;
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < counters; c += (int64_t)gridDim.x * blockDim.x) {
        uint32_t r[4];
        nb__philox_at(seed, offset + (uint64_t)c, r);
        for (int j = 0; j < per; j++) {
            int64_t i = c * per + j;
            if (i >= n) break;
            int64_t o = off_of(i, out);
            if (op == NB_CUDA_OP_RANDINT) {
                uint64_t u = ((uint64_t)r[2 * j] << 32) | r[2 * j + 1];
                int64_t v = (int64_t)((uint64_t)low + __umul64hi(u, range));
                switch (out.dtype) {
                case F32: put<float>(out.data, o, (float)v); break;
                case F64: put<double>(out.data, o, (double)v); break;
                case I64: put<int64_t>(out.data, o, v); break;
                case I32: put<int32_t>(out.data, o, (int32_t)v); break;
                case U8: put<uint8_t>(out.data, o, (uint8_t)v); break;
                default: put<bool>(out.data, o, v != 0); break;
                }
                continue;
            }
            double v;
            if (out.dtype == F32) {
                if (op == NB_CUDA_OP_RANDN) {
                    int h = j / 2;
                    float u1 = 1.0f - nb__u32_to_unit_float(r[2 * h]), u2 = nb__u32_to_unit_float(r[2 * h + 1]);
                    float rad = sqrtf(-2.0f * logf(u1)), s, co;
                    sincosf(6.2831853071795864769f * u2, &s, &co);
                    v = (j & 1) ? rad * s : rad * co;
                } else {
                    v = nb__u32_to_unit_float(r[j]);
                }
            } else {
                if (op == NB_CUDA_OP_RANDN) {
                    double u1 = 1.0 - nb__u64_to_unit_double(r[0], r[1]), u2 = nb__u64_to_unit_double(r[2], r[3]);
                    double rad = sqrt(-2.0 * log(u1)), s, co;
                    sincos(6.2831853071795864769 * u2, &s, &co);
                    v = (j & 1) ? rad * s : rad * co;
                } else {
                    v = nb__u64_to_unit_double(r[2 * j], r[2 * j + 1]);
                }
            }
            if (op == NB_CUDA_OP_BERNOULLI) {
                int64_t po = off_of(i, probs);
                double p = out.dtype == F32 ? (double)((const float *)probs.data)[po] : ((const double *)probs.data)[po];
                if (!(p >= 0 && p <= 1)) atomicMin(bad, (unsigned long long)i);
                v = (out.dtype == F32 ? (double)(float)v : v) < p ? 1.0 : 0.0;
            }
            if (out.dtype == F32) put<float>(out.data, o, (float)v);
            else put<double>(out.data, o, v);
        }
    }
}

} // namespace

extern "C" cudaError_t nb_cuda_launch_random(int op, const nb_cuda_desc *out, const nb_cuda_desc *probs, uint64_t seed,
                                             uint64_t offset, int per, int64_t n, int64_t low, uint64_t range,
                                             unsigned long long *bad, cudaStream_t s)
{
    int64_t counters = (n + per - 1) / per;
    if (counters == 0) return cudaSuccess;
    unsigned g = (unsigned)((counters + 255) / 256 < 65535 * 8 ? (counters + 255) / 256 : 65535 * 8);
    nb_cuda_desc none = {};
    random_kernel<<<g, 256, 0, s>>>(op, *out, probs ? *probs : none, seed, offset, per, n, low, range, bad);
    return cudaGetLastError();
}
