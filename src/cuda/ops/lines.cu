// CUDA kernels over lines (the 1-D slices along one dim): softmax and log_softmax with their
// backward (one block per line, double accumulation and the CPU's NaN rule: a NaN makes its line
// NaN; contiguous lines take a faster variant, below), and cumsum (one thread per line, a sequential scan in double / int64 as the CPU does).
#include <math.h>
#include <stdint.h>

#include "cuda/ops/common.cuh"

namespace {

enum { F32 = 0, F64, I64, I32, U8, BOOL };
constexpr int THREADS = 256;


__device__ double block_reduce(double v, double *sh, bool is_max)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            double a = sh[threadIdx.x], b = sh[threadIdx.x + s];
            sh[threadIdx.x] = is_max ? (a != a || b != b ? NAN : (a > b ? a : b)) : a + b;
        }
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

template <typename T> __global__ void softmax_fwd(nb_cuda_lines p, bool log_form)
{
    __shared__ double sh[THREADS];
    for (int64_t l = blockIdx.x; l < p.n; l += gridDim.x) {
        T *o = (T *)p.data[0] + nb_line_offset(l, p, 0);
        const T *x = (const T *)p.data[1] + nb_line_offset(l, p, 1);
        double m = -INFINITY;
        for (int64_t j = threadIdx.x; j < p.D; j += blockDim.x) {
            double v = x[j * p.sd[1]];
            m = m != m || v != v ? NAN : (v > m ? v : m);
        }
        m = block_reduce(m, sh, true);
        double shift = isinf(m) ? 0 : m, s = 0;
        for (int64_t j = threadIdx.x; j < p.D; j += blockDim.x) s += exp((double)x[j * p.sd[1]] - shift);
        s = block_reduce(s, sh, false);
        double ls = log(s);
        for (int64_t j = threadIdx.x; j < p.D; j += blockDim.x) {
            double v = (double)x[j * p.sd[1]] - shift;
            o[j * p.sd[0]] = (T)(log_form ? v - ls : exp(v) / s);
        }
    }
}

// SOFTMAX_BACKWARD: y (g - sum(g y)); LOG_SOFTMAX_BACKWARD: g - exp(y) sum(g)
template <typename T> __global__ void softmax_bwd(nb_cuda_lines p, bool log_form)
{
    __shared__ double sh[THREADS];
    for (int64_t l = blockIdx.x; l < p.n; l += gridDim.x) {
        T *o = (T *)p.data[0] + nb_line_offset(l, p, 0);
        const T *g = (const T *)p.data[1] + nb_line_offset(l, p, 1), *y = (const T *)p.data[2] + nb_line_offset(l, p, 2);
        double s = 0;
        for (int64_t j = threadIdx.x; j < p.D; j += blockDim.x) {
            double gv = g[j * p.sd[1]];
            s += log_form ? gv : gv * (double)y[j * p.sd[2]];
        }
        s = block_reduce(s, sh, false);
        for (int64_t j = threadIdx.x; j < p.D; j += blockDim.x) {
            double gv = g[j * p.sd[1]], yv = y[j * p.sd[2]];
            o[j * p.sd[0]] = (T)(log_form ? gv - exp(yv) * s : yv * (gv - s));
        }
    }
}

template <typename TI, typename TO, typename ACC> __global__ void cumsum_kernel(nb_cuda_lines p, bool reverse)
{
    for (int64_t l = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; l < p.n; l += (int64_t)gridDim.x * blockDim.x) {
        TO *o = (TO *)p.data[0] + nb_line_offset(l, p, 0);
        const TI *x = (const TI *)p.data[1] + nb_line_offset(l, p, 1);
        ACC acc = 0;
        for (int64_t k = 0; k < p.D; k++) {
            int64_t j = reverse ? p.D - 1 - k : k;
            acc += (ACC)x[j * p.sd[1]];
            o[j * p.sd[0]] = (TO)acc;
        }
    }
}

// ---- contiguous lines --------------------------------------------------------------------------
// When every operand's line is contiguous: reductions over the block by warp shuffles (two
// barriers, not eight), exp in float for float32 (the sums stay in double), and, when the line
// fits in 48 KiB, the forward reads it from memory once into shared memory.
__device__ __forceinline__ double nan_max(double a, double b) { return a != a || b != b ? NAN : (a > b ? a : b); }

__device__ __forceinline__ double warp_all(double v, bool is_max)
{
    for (int o = 16; o > 0; o >>= 1) {
        double w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? nan_max(v, w) : v + w;
    }
    return v;
}

// The max (NaN wins) or the sum of v over the block (blockDim.x a multiple of 32), to every
// thread; sh holds 32 doubles.
__device__ double block_all(double v, double *sh, bool is_max)
{
    v = warp_all(v, is_max);
    const int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    if (lane == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    v = warp_all(lane < nw ? sh[lane] : (is_max ? -INFINITY : 0.0), is_max);
    __syncthreads();
    return v;
}

template <typename T> __device__ __forceinline__ T fexp(T v) { return exp(v); }
template <> __device__ __forceinline__ float fexp<float>(float v) { return expf(v); }

template <typename T> __global__ void softmax_fwd_c(nb_cuda_lines p, bool log_form, bool stage)
{
    __shared__ double sh[32];
    extern __shared__ double line_sh[];
    T *buf = (T *)line_sh;
    for (int64_t l = blockIdx.x; l < p.n; l += gridDim.x) {
        T *o = (T *)p.data[0] + nb_line_offset(l, p, 0);
        const T *x = (const T *)p.data[1] + nb_line_offset(l, p, 1);
        const T *src = stage ? buf : x;
        double m = -INFINITY;
        for (int64_t j = threadIdx.x; j < p.D; j += blockDim.x) {
            T v = x[j];
            if (stage) buf[j] = v;
            m = nan_max(m, (double)v);
        }
        m = block_all(m, sh, true); // its barriers also publish buf
        const T shift = (T)(isinf(m) ? 0 : m);
        double s = 0;
        for (int64_t j = threadIdx.x; j < p.D; j += blockDim.x) s += (double)fexp<T>(src[j] - shift);
        s = block_all(s, sh, false);
        if (log_form) {
            const double ls = log(s);
            for (int64_t j = threadIdx.x; j < p.D; j += blockDim.x) o[j] = (T)((double)(src[j] - shift) - ls);
        } else {
            const T inv = (T)(1 / s);
            for (int64_t j = threadIdx.x; j < p.D; j += blockDim.x) o[j] = fexp<T>(src[j] - shift) * inv;
        }
        __syncthreads(); // buf is refilled for the next line
    }
}

template <typename T> __global__ void softmax_bwd_c(nb_cuda_lines p, bool log_form)
{
    __shared__ double sh[32];
    for (int64_t l = blockIdx.x; l < p.n; l += gridDim.x) {
        T *o = (T *)p.data[0] + nb_line_offset(l, p, 0);
        const T *g = (const T *)p.data[1] + nb_line_offset(l, p, 1), *y = (const T *)p.data[2] + nb_line_offset(l, p, 2);
        double s = 0;
        for (int64_t j = threadIdx.x; j < p.D; j += blockDim.x) s += log_form ? (double)g[j] : (double)g[j] * (double)y[j];
        s = block_all(s, sh, false);
        const T ts = (T)s;
        for (int64_t j = threadIdx.x; j < p.D; j += blockDim.x)
            o[j] = log_form ? (T)((double)g[j] - (double)fexp<T>(y[j]) * s) : y[j] * (g[j] - ts);
    }
}

unsigned blocks_for(int64_t n) { return (unsigned)(n < (1 << 20) ? n : (1 << 20)); }

} // namespace

extern "C" cudaError_t nb_cuda_launch_softmax(int op, const nb_cuda_lines *p, int dtype, cudaStream_t s)
{
    if (p->n == 0 || p->D == 0) return cudaSuccess;
    bool back = op == NB_CUDA_OP_SOFTMAX_BACKWARD || op == NB_CUDA_OP_LOG_SOFTMAX_BACKWARD;
    bool log_form = op == NB_CUDA_OP_LOG_SOFTMAX || op == NB_CUDA_OP_LOG_SOFTMAX_BACKWARD;
    unsigned g = blocks_for(p->n);
    const bool contig = p->sd[0] == 1 && p->sd[1] == 1 && (!back || p->sd[2] == 1);
    if (contig && (dtype == F32 || dtype == F64)) {
        const size_t es = dtype == F32 ? 4 : 8, line = (size_t)p->D * es;
        /* static (sh: 32 doubles) and dynamic shared memory together stay within 48 KiB */
        const bool stage = !back && line <= 48 * 1024 - 32 * sizeof(double);
        const size_t smem = stage ? line : 0;
        if (dtype == F32) {
            if (back) softmax_bwd_c<float><<<g, THREADS, 0, s>>>(*p, log_form);
            else softmax_fwd_c<float><<<g, THREADS, smem, s>>>(*p, log_form, stage);
        } else {
            if (back) softmax_bwd_c<double><<<g, THREADS, 0, s>>>(*p, log_form);
            else softmax_fwd_c<double><<<g, THREADS, smem, s>>>(*p, log_form, stage);
        }
        return cudaGetLastError();
    }
    if (dtype == F32) {
        if (back) softmax_bwd<float><<<g, THREADS, 0, s>>>(*p, log_form);
        else softmax_fwd<float><<<g, THREADS, 0, s>>>(*p, log_form);
    } else if (dtype == F64) {
        if (back) softmax_bwd<double><<<g, THREADS, 0, s>>>(*p, log_form);
        else softmax_fwd<double><<<g, THREADS, 0, s>>>(*p, log_form);
    } else {
        return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t nb_cuda_launch_cumsum(const nb_cuda_lines *p, int in_dtype, int out_dtype, bool reverse,
                                             cudaStream_t s)
{
    if (p->n == 0 || p->D == 0) return cudaSuccess;
    unsigned g = (unsigned)((p->n + 255) / 256 < 65535 * 8 ? (p->n + 255) / 256 : 65535 * 8);
    switch (in_dtype) {
    case F32: cumsum_kernel<float, float, double><<<g, 256, 0, s>>>(*p, reverse); break;
    case F64: cumsum_kernel<double, double, double><<<g, 256, 0, s>>>(*p, reverse); break;
    case I64: cumsum_kernel<int64_t, int64_t, int64_t><<<g, 256, 0, s>>>(*p, reverse); break;
    case I32: cumsum_kernel<int32_t, int64_t, int64_t><<<g, 256, 0, s>>>(*p, reverse); break;
    case U8: cumsum_kernel<uint8_t, int64_t, int64_t><<<g, 256, 0, s>>>(*p, reverse); break;
    case BOOL: cumsum_kernel<bool, int64_t, int64_t><<<g, 256, 0, s>>>(*p, reverse); break;
    default: return cudaErrorInvalidValue;
    }
    (void)out_dtype; // the entry allocates float outputs for float inputs, int64 for the rest
    return cudaGetLastError();
}
