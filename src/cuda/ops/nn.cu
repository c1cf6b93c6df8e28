// CUDA kernels: pooling (max with PyTorch's indices, average, adaptive average, and their
// backward) and batch normalisation (forward with batch or given statistics, backward), with the
// CPU kernels' semantics (src/cpu/ops/pool.c, batchnorm.c) on contiguous NCHW tensors. Pooling:
// one thread per output; the backward adds into a zeroed gradient with atomics (windows may
// overlap). Batch norm: one block per channel, sums in double.
#include <math.h>
#include <stdint.h>

#include "cuda/ops/common.cuh"

namespace {

constexpr int THREADS = 256;

__device__ __forceinline__ void window(const nb_cuda_pool &g, int64_t oy, int64_t ox, bool adaptive, int64_t *y0,
                                       int64_t *y1, int64_t *x0, int64_t *x1, int64_t *div)
{
    if (adaptive) {
        *y0 = oy * g.h / g.oh, *y1 = ((oy + 1) * g.h + g.oh - 1) / g.oh;
        *x0 = ox * g.w / g.ow, *x1 = ((ox + 1) * g.w + g.ow - 1) / g.ow;
        *div = (*y1 - *y0) * (*x1 - *x0);
        return;
    }
    int64_t a0 = oy * g.sh - g.ph, b0 = ox * g.sw - g.pw;
    int64_t a1 = a0 + g.kh < g.h + g.ph ? a0 + g.kh : g.h + g.ph;
    int64_t b1 = b0 + g.kw < g.w + g.pw ? b0 + g.kw : g.w + g.pw;
    *div = (a1 - a0) * (b1 - b0);
    a0 = a0 < 0 ? 0 : a0, b0 = b0 < 0 ? 0 : b0;
    a1 = a1 > g.h ? g.h : a1, b1 = b1 > g.w ? g.w : b1;
    if (!g.count_include_pad) *div = (a1 - a0) * (b1 - b0);
    *y0 = a0, *y1 = a1, *x0 = b0, *x1 = b1;
}

template <typename T> __global__ void max_fwd(nb_cuda_pool g, const T *x, T *y, int64_t *idx)
{
    int64_t n = g.planes * g.oh * g.ow;
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < n; o += (int64_t)gridDim.x * blockDim.x) {
        int64_t p = o / (g.oh * g.ow), oy = o / g.ow % g.oh, ox = o % g.ow;
        const T *xp = x + p * g.h * g.w;
        int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw, best = -1;
        T m = -INFINITY;
        for (int64_t iy = y0 < 0 ? 0 : y0; iy < y0 + g.kh && iy < g.h; iy++)
            for (int64_t ix = x0 < 0 ? 0 : x0; ix < x0 + g.kw && ix < g.w; ix++) {
                T v = xp[iy * g.w + ix];
                if (best < 0 || v > m || (v != v && m == m)) m = v, best = iy * g.w + ix;
            }
        y[o] = m;
        idx[o] = best;
    }
}

template <typename T> __global__ void max_bwd(nb_cuda_pool g, const T *gy, const int64_t *idx, T *gx)
{
    int64_t n = g.planes * g.oh * g.ow;
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < n; o += (int64_t)gridDim.x * blockDim.x) {
        int64_t p = o / (g.oh * g.ow);
        if (idx[o] >= 0) atomicAdd(gx + p * g.h * g.w + idx[o], gy[o]);
    }
}

template <typename T> __global__ void mean_fwd(nb_cuda_pool g, bool adaptive, const T *x, T *y)
{
    int64_t n = g.planes * g.oh * g.ow;
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < n; o += (int64_t)gridDim.x * blockDim.x) {
        int64_t p = o / (g.oh * g.ow), oy = o / g.ow % g.oh, ox = o % g.ow, y0, y1, x0, x1, div;
        window(g, oy, ox, adaptive, &y0, &y1, &x0, &x1, &div);
        const T *xp = x + p * g.h * g.w;
        T s = 0;
        for (int64_t iy = y0; iy < y1; iy++)
            for (int64_t ix = x0; ix < x1; ix++) s += xp[iy * g.w + ix];
        y[o] = s / (T)div;
    }
}

template <typename T> __global__ void mean_bwd(nb_cuda_pool g, bool adaptive, const T *gy, T *gx)
{
    int64_t n = g.planes * g.oh * g.ow;
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < n; o += (int64_t)gridDim.x * blockDim.x) {
        int64_t p = o / (g.oh * g.ow), oy = o / g.ow % g.oh, ox = o % g.ow, y0, y1, x0, x1, div;
        window(g, oy, ox, adaptive, &y0, &y1, &x0, &x1, &div);
        T v = gy[o] / (T)div, *gp = gx + p * g.h * g.w;
        for (int64_t iy = y0; iy < y1; iy++)
            for (int64_t ix = x0; ix < x1; ix++) atomicAdd(gp + iy * g.w + ix, v);
    }
}


// [N, C, S]: element (i, c, j) at (i C + c) S + j; k runs over the channel's N S elements
#define CH_AT(k) (((k) / s) * c_count + c) * s + (k) % s

template <typename T>
__global__ void bn_fwd(int64_t n, int64_t c_count, int64_t s, const T *x, const T *w, const T *b, T *y, T *stats,
                       double eps, bool training)
{
    __shared__ double sh[THREADS];
    int64_t m = n * s;
    for (int64_t c = blockIdx.x; c < c_count; c += gridDim.x) {
        double mean = stats[c], var = stats[c_count + c];
        if (training) {
            double sum = 0;
            for (int64_t k = threadIdx.x; k < m; k += blockDim.x) sum += x[CH_AT(k)];
            mean = nb_block_sum(sum, sh) / (double)m;
            double sq = 0;
            for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
                double d = x[CH_AT(k)] - mean;
                sq += d * d;
            }
            var = nb_block_sum(sq, sh) / (double)m;
            if (threadIdx.x == 0) stats[c] = (T)mean, stats[c_count + c] = (T)var;
        }
        double scale = (w ? (double)w[c] : 1) / sqrt(var + eps), shift = (b ? (double)b[c] : 0) - mean * scale;
        T sc = (T)scale, sf = (T)shift;
        for (int64_t k = threadIdx.x; k < m; k += blockDim.x) y[CH_AT(k)] = x[CH_AT(k)] * sc + sf;
    }
}

// aux rows: mean, var, weight; gwb = (sum g xhat, sum g); gx: training w invstd (g - sum g / M -
// xhat sum(g xhat) / M), evaluation w invstd g
template <typename T>
__global__ void bn_bwd(int64_t n, int64_t c_count, int64_t s, const T *g, const T *x, const T *aux, T *gx, T *gwb,
                       double eps, bool training)
{
    __shared__ double sh[THREADS];
    int64_t m = n * s;
    for (int64_t c = blockIdx.x; c < c_count; c += gridDim.x) {
        double mean = aux[c], invstd = 1 / sqrt((double)aux[c_count + c] + eps), w = aux[2 * c_count + c];
        double sg = 0, sgx = 0;
        for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
            double gv = g[CH_AT(k)];
            sg += gv;
            sgx += gv * ((double)x[CH_AT(k)] - mean);
        }
        sg = nb_block_sum(sg, sh);
        sgx = nb_block_sum(sgx, sh);
        if (threadIdx.x == 0) gwb[c] = (T)(sgx * invstd), gwb[c_count + c] = (T)sg;
        if (!gx) continue;
        double kk = w * invstd, bx = 0, c0 = 0;
        if (training) {
            bx = -kk * invstd * invstd * sgx / (double)m;
            c0 = -kk * sg / (double)m - bx * mean;
        }
        T ta = (T)kk, tb = (T)bx, tc = (T)c0;
        for (int64_t k = threadIdx.x; k < m; k += blockDim.x) gx[CH_AT(k)] = ta * g[CH_AT(k)] + tb * x[CH_AT(k)] + tc;
    }
}

unsigned grid_for(int64_t n)
{
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 65535 * 8 ? b : 65535 * 8);
}

template <typename T>
cudaError_t pool_t(int op, const nb_cuda_pool *g, const void *in0, const void *in1, void *out, void *out2, cudaStream_t s)
{
    int64_t n = g->planes * g->oh * g->ow;
    if (n == 0) return cudaSuccess;
    bool back = op == NB_CUDA_OP_MAX_POOL2D_BACKWARD || op == NB_CUDA_OP_AVG_POOL2D_BACKWARD ||
                op == NB_CUDA_OP_ADAPTIVE_AVG_POOL2D_BACKWARD;
    if (back) {
        cudaError_t e = cudaMemsetAsync(out, 0, (size_t)(g->planes * g->h * g->w) * sizeof(T), s);
        if (e != cudaSuccess) return e;
    }
    bool adaptive = op == NB_CUDA_OP_ADAPTIVE_AVG_POOL2D || op == NB_CUDA_OP_ADAPTIVE_AVG_POOL2D_BACKWARD;
    switch (op) {
    case NB_CUDA_OP_MAX_POOL2D: max_fwd<T><<<grid_for(n), 256, 0, s>>>(*g, (const T *)in0, (T *)out, (int64_t *)out2); break;
    case NB_CUDA_OP_MAX_POOL2D_BACKWARD:
        max_bwd<T><<<grid_for(n), 256, 0, s>>>(*g, (const T *)in0, (const int64_t *)in1, (T *)out);
        break;
    case NB_CUDA_OP_AVG_POOL2D:
    case NB_CUDA_OP_ADAPTIVE_AVG_POOL2D: mean_fwd<T><<<grid_for(n), 256, 0, s>>>(*g, adaptive, (const T *)in0, (T *)out); break;
    default: mean_bwd<T><<<grid_for(n), 256, 0, s>>>(*g, adaptive, (const T *)in0, (T *)out); break;
    }
    return cudaGetLastError();
}

} // namespace

extern "C" cudaError_t nb_cuda_launch_pool(int op, int dtype, const nb_cuda_pool *g, const void *in0, const void *in1,
                                           void *out, void *out2, cudaStream_t s)
{
    return dtype == 1 ? pool_t<double>(op, g, in0, in1, out, out2, s) : pool_t<float>(op, g, in0, in1, out, out2, s);
}

extern "C" cudaError_t nb_cuda_launch_batchnorm(bool backward, int dtype, int64_t n, int64_t c, int64_t sp,
                                                const void *a0, const void *a1, const void *a2, const void *a3,
                                                void *out, void *out2, double eps, bool training, cudaStream_t st)
{
    if (c == 0) return cudaSuccess;
    unsigned g = (unsigned)(c < 65535 * 8 ? c : 65535 * 8);
    if (!backward) {
        if (dtype == 1)
            bn_fwd<double><<<g, THREADS, 0, st>>>(n, c, sp, (const double *)a0, (const double *)a1, (const double *)a2,
                                                  (double *)out, (double *)out2, eps, training);
        else
            bn_fwd<float><<<g, THREADS, 0, st>>>(n, c, sp, (const float *)a0, (const float *)a1, (const float *)a2,
                                                 (float *)out, (float *)out2, eps, training);
    } else {
        if (dtype == 1)
            bn_bwd<double><<<g, THREADS, 0, st>>>(n, c, sp, (const double *)a0, (const double *)a1, (const double *)a3,
                                                  (double *)out, (double *)out2, eps, training);
        else
            bn_bwd<float><<<g, THREADS, 0, st>>>(n, c, sp, (const float *)a0, (const float *)a1, (const float *)a3,
                                                 (float *)out, (float *)out2, eps, training);
    }
    return cudaGetLastError();
}
