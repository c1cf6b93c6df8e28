// CUDA kernels: pooling (max with PyTorch's indices, average, adaptive average, and their
// backward) and batch normalisation (forward with batch or given statistics, backward), with the
// CPU kernels' semantics (src/cpu/ops/pool.c, batchnorm.c) on contiguous NCHW tensors. Pooling:
// one thread per output; the backward adds into a zeroed gradient with atomics (windows may
// overlap). Batch norm: a grid of (chunk, channel) blocks, sums in double (see below), and the
// running statistics' update.
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


// ---- batch norm ---------------------------------------------------------------------------------
// x is [N, C, S] (contiguous): plane p = n C + c holds S contiguous elements. A block (q, c) of a
// grid (chunks, channels) takes the vectors [q chunk, (q + 1) chunk) of channel c's N sv vectors
// of V elements (sv = S / V, a vector never crosses a plane), its threads THREADS vectors apart:
// each thread walks from plane to plane with additions, without a division per element.
// Training: bn_stats writes per-block sums of x - shift and (x - shift)^2 in double (shift: the
// channel's first element, as the CPU kernel's one-pass sums), then every block of bn_fwd_apply
// adds its channel's partial sums in one warp, in a fixed order (every block gets the same
// statistics, and reruns the same bits), and writes y; block 0 of a channel writes its stats.
// The backward does the same with the sums of g and g (x - mean). The chunks depend on the shape
// and the vector width (the operands' alignment), not on the GPU.

namespace {

constexpr int BN_WARPS = THREADS / 32;
constexpr int BN_UNROLL = 4;          // vectors a thread loads before it uses them
constexpr int64_t BN_BLOCKS = 1024;   // blocks a launch aims at (about 8 per SM of an H100)
constexpr int64_t BN_CHUNK_MIN = 2048; // elements a block takes at least

struct bn_geo {
    int64_t c_count, s, m;     // channels, elements per plane, per channel (N S)
    int64_t sv, mv, chunk;     // vectors per plane, per channel, per block
    int64_t step_j, jump, wrap; // a thread's step of THREADS vectors: within a plane, in memory, to the next plane
    int nchunk;                 // blocks per channel
};

template <typename T, int V> struct alignas(sizeof(T) * V) bn_vec {
    T v[V];
};

// A thread's vectors of channel c in block q: off is the memory offset (in vectors) of the
// channel's vector k = n sv + j, i.e. (n C + c) sv + j.
struct bn_walk {
    int64_t k, end, j, off;
    __device__ bn_walk(const bn_geo &g, int64_t c, int64_t q)
    {
        int64_t k0 = q * g.chunk;
        end = k0 + g.chunk < g.mv ? k0 + g.chunk : g.mv;
        k = k0 + threadIdx.x;
        j = off = 0;
        if (k < end) {
            int64_t n = k / g.sv;
            j = k - n * g.sv;
            off = (n * g.c_count + c) * g.sv + j;
        }
    }
    __device__ bool more() const { return k < end; }
    __device__ void next(const bn_geo &g)
    {
        k += THREADS, j += g.step_j, off += g.jump;
        if (j >= g.sv) j -= g.sv, off += g.wrap;
    }
};

// (a, b) summed over the block, valid in thread 0; sh is reused by the next call only after a
// barrier, which the function ends with.
__device__ __forceinline__ void bn_block_sum2(double *a, double *b, double (*sh)[BN_WARPS])
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1)
        *a += __shfl_down_sync(0xffffffffu, *a, o), *b += __shfl_down_sync(0xffffffffu, *b, o);
    if (lane == 0) sh[0][warp] = *a, sh[1][warp] = *b;
    __syncthreads();
    if (warp == 0) {
        *a = lane < BN_WARPS ? sh[0][lane] : 0, *b = lane < BN_WARPS ? sh[1][lane] : 0;
        for (int o = BN_WARPS / 2; o > 0; o >>= 1)
            *a += __shfl_down_sync(0xffffffffu, *a, o), *b += __shfl_down_sync(0xffffffffu, *b, o);
    }
    __syncthreads();
}

// The sums of a channel's nchunk partial pairs, called by a whole warp: the same bits in every
// lane (each butterfly step adds the same two values in both lanes) and in every block.
__device__ __forceinline__ void bn_combine(const double *part, int nchunk, double *a, double *b)
{
    int lane = threadIdx.x & 31;
    double s = 0, q = 0;
    for (int i = lane; i < nchunk; i += 32) s += part[2 * i], q += part[2 * i + 1];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o), q += __shfl_xor_sync(0xffffffffu, q, o);
    *a = s, *b = q;
}

// part[c, q] = (sum (x - shift), sum (x - shift)^2) over block q's elements of channel c
template <typename T, int V> __global__ void __launch_bounds__(THREADS) bn_stats(bn_geo g, const T *x, double *part)
{
    __shared__ double sh[2][BN_WARPS];
    const bn_vec<T, V> *xv = (const bn_vec<T, V> *)x;
    for (int64_t c = blockIdx.y; c < g.c_count; c += gridDim.y) {
        double shift = (double)x[c * g.s], s1 = 0, s2 = 0;
        for (bn_walk w(g, c, blockIdx.x); w.more();) {
            bn_vec<T, V> v[BN_UNROLL];
            int cnt = 0;
#pragma unroll
            for (int u = 0; u < BN_UNROLL; u++)
                if (w.more()) v[u] = xv[w.off], w.next(g), cnt = u + 1;
#pragma unroll
            for (int u = 0; u < BN_UNROLL; u++)
#pragma unroll
                for (int l = 0; l < V; l++)
                    if (u < cnt) {
                        double d = (double)v[u].v[l] - shift;
                        s1 += d, s2 += d * d;
                    }
        }
        bn_block_sum2(&s1, &s2, sh);
        if (threadIdx.x == 0) {
            double *p = part + 2 * (c * g.nchunk + blockIdx.x);
            p[0] = s1, p[1] = s2;
        }
    }
}

// y = x scale + shift with scale = w / sqrt(var + eps), shift = b - mean scale; the statistics
// from part (training) or stats (evaluation). Block 0 of channel c writes stats[:, c] (mean and
// var when training; the weight, or 1, always: the backward's third row).
template <typename T, int V>
__global__ void __launch_bounds__(THREADS) bn_fwd_apply(bn_geo g, const T *x, const T *w, const T *b, T *y,
                                                        T *stats, const double *part, double eps)
{
    __shared__ T coef[2];
    const bn_vec<T, V> *xv = (const bn_vec<T, V> *)x;
    bn_vec<T, V> *yv = (bn_vec<T, V> *)y;
    for (int64_t c = blockIdx.y; c < g.c_count; c += gridDim.y) {
        if (threadIdx.x < 32) {
            double mean, var;
            if (part) {
                double s1, s2, m = (double)g.m, shift = (double)x[c * g.s];
                bn_combine(part + 2 * c * g.nchunk, g.nchunk, &s1, &s2);
                mean = shift + s1 / m;
                var = (s2 - s1 * s1 / m) / m;
                var = var < 0 ? 0 : var;
            } else {
                mean = stats[c], var = stats[g.c_count + c];
            }
            if (threadIdx.x == 0) {
                double wc = w ? (double)w[c] : 1, scale = wc / sqrt(var + eps);
                coef[0] = (T)scale, coef[1] = (T)((b ? (double)b[c] : 0) - mean * scale);
                if (blockIdx.x == 0) {
                    if (part) stats[c] = (T)mean, stats[g.c_count + c] = (T)var;
                    stats[2 * g.c_count + c] = (T)wc;
                }
            }
        }
        __syncthreads();
        T sc = coef[0], sf = coef[1];
        for (bn_walk it(g, c, blockIdx.x); it.more(); it.next(g)) {
            bn_vec<T, V> v = xv[it.off];
#pragma unroll
            for (int l = 0; l < V; l++) v.v[l] = v.v[l] * sc + sf;
            yv[it.off] = v;
        }
        __syncthreads();
    }
}

// part[c, q] = (sum g, sum g (x - mean)) over block q's elements of channel c
template <typename T, int V>
__global__ void __launch_bounds__(THREADS) bn_bwd_sums(bn_geo g, const T *gy, const T *x, const T *aux, double *part)
{
    __shared__ double sh[2][BN_WARPS];
    const bn_vec<T, V> *gv = (const bn_vec<T, V> *)gy, *xv = (const bn_vec<T, V> *)x;
    for (int64_t c = blockIdx.y; c < g.c_count; c += gridDim.y) {
        double mean = (double)aux[c], sg = 0, sgx = 0;
        for (bn_walk w(g, c, blockIdx.x); w.more();) {
            bn_vec<T, V> a[BN_UNROLL], b[BN_UNROLL];
            int cnt = 0;
#pragma unroll
            for (int u = 0; u < BN_UNROLL; u++)
                if (w.more()) a[u] = gv[w.off], b[u] = xv[w.off], w.next(g), cnt = u + 1;
#pragma unroll
            for (int u = 0; u < BN_UNROLL; u++)
#pragma unroll
                for (int l = 0; l < V; l++)
                    if (u < cnt) {
                        double d = (double)a[u].v[l];
                        sg += d, sgx += d * ((double)b[u].v[l] - mean);
                    }
        }
        bn_block_sum2(&sg, &sgx, sh);
        if (threadIdx.x == 0) {
            double *p = part + 2 * (c * g.nchunk + blockIdx.x);
            p[0] = sg, p[1] = sgx;
        }
    }
}

// aux rows: mean, var, weight. Block 0 of channel c writes gwb[:, c] = (sum g xhat, sum g); gx
// (when given): training w invstd (g - sum g / M - xhat sum(g xhat) / M), evaluation w invstd g,
// as a g + b x + c.
template <typename T, int V>
__global__ void __launch_bounds__(THREADS) bn_bwd_apply(bn_geo g, const T *gy, const T *x, const T *aux, T *gx,
                                                        T *gwb, const double *part, double eps, bool training)
{
    __shared__ T coef[3];
    const bn_vec<T, V> *gv = (const bn_vec<T, V> *)gy, *xv = (const bn_vec<T, V> *)x;
    bn_vec<T, V> *ov = (bn_vec<T, V> *)gx;
    for (int64_t c = blockIdx.y; c < g.c_count; c += gridDim.y) {
        if (threadIdx.x < 32) {
            double sg, sgx;
            bn_combine(part + 2 * c * g.nchunk, g.nchunk, &sg, &sgx);
            if (threadIdx.x == 0) {
                double mean = aux[c], invstd = 1 / sqrt((double)aux[g.c_count + c] + eps);
                double kk = (double)aux[2 * g.c_count + c] * invstd, bx = 0, c0 = 0, m = (double)g.m;
                if (blockIdx.x == 0) gwb[c] = (T)(sgx * invstd), gwb[g.c_count + c] = (T)sg;
                if (training) {
                    bx = -kk * invstd * invstd * sgx / m;
                    c0 = -kk * sg / m - bx * mean;
                }
                coef[0] = (T)kk, coef[1] = (T)bx, coef[2] = (T)c0;
            }
        }
        __syncthreads();
        T ta = coef[0], tb = coef[1], tc = coef[2];
        if (gx)
            for (bn_walk it(g, c, blockIdx.x); it.more(); it.next(g)) {
                bn_vec<T, V> a = gv[it.off], b = xv[it.off];
#pragma unroll
                for (int l = 0; l < V; l++) a.v[l] = ta * a.v[l] + tb * b.v[l] + tc;
                ov[it.off] = a;
            }
        __syncthreads();
    }
}

// rm = (1 - momentum) rm + momentum mean, rv = (1 - momentum) rv + f var (stats rows 0 and 1)
template <typename T>
__global__ void bn_running(int64_t c_count, const T *stats, T *rm, int64_t sm, T *rv, int64_t sv, double momentum,
                           double f)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < c_count; c += step) {
        rm[c * sm] = (T)((1 - momentum) * (double)rm[c * sm] + momentum * (double)stats[c]);
        rv[c * sv] = (T)((1 - momentum) * (double)rv[c * sv] + f * (double)stats[c_count + c]);
    }
}

// Blocks per channel: BN_CHUNK_MIN elements or more each, about BN_BLOCKS in all.
int64_t bn_chunks(int64_t n, int64_t c, int64_t s)
{
    int64_t want = BN_BLOCKS / c, by_size = (n * s + BN_CHUNK_MIN - 1) / BN_CHUNK_MIN;
    want = want < 1 ? 1 : want;
    by_size = by_size < 1 ? 1 : by_size;
    return by_size < want ? by_size : want;
}

bn_geo bn_plan(int64_t n, int64_t c, int64_t s, int v)
{
    bn_geo g = {};
    g.c_count = c, g.s = s, g.m = n * s, g.sv = s / v, g.mv = n * g.sv;
    int64_t nchunk = bn_chunks(n, c, s);
    g.chunk = (g.mv + nchunk - 1) / nchunk;
    g.chunk = g.chunk < 1 ? 1 : g.chunk;
    g.nchunk = (int)((g.mv + g.chunk - 1) / g.chunk);
    g.nchunk = g.nchunk < 1 ? 1 : g.nchunk;
    if (g.sv > 0) {
        int64_t step_n = THREADS / g.sv;
        g.step_j = THREADS % g.sv;
        g.jump = step_n * c * g.sv + g.step_j;
        g.wrap = (c - 1) * g.sv;
    }
    return g;
}

template <typename T, int V>
cudaError_t bn_launch(bool backward, int64_t n, int64_t c, int64_t sp, const void *a0, const void *a1, const void *a2,
                      void *out, void *out2, double *part, double eps, bool training, cudaStream_t st)
{
    bn_geo g = bn_plan(n, c, sp, V);
    dim3 grid((unsigned)g.nchunk, (unsigned)(c < 65535 ? c : 65535));
    const T *in0 = (const T *)a0, *in1 = (const T *)a1, *in2 = (const T *)a2;
    if (!backward) {
        if (training) {
            bn_stats<T, V><<<grid, THREADS, 0, st>>>(g, in0, part);
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) return e;
        }
        bn_fwd_apply<T, V><<<grid, THREADS, 0, st>>>(g, in0, in1, in2, (T *)out, (T *)out2, training ? part : NULL,
                                                     eps);
        return cudaGetLastError();
    }
    bn_bwd_sums<T, V><<<grid, THREADS, 0, st>>>(g, in0, in1, in2, part);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    if (!out) grid.x = 1; /* the parameter gradients only */
    bn_bwd_apply<T, V><<<grid, THREADS, 0, st>>>(g, in0, in1, in2, (T *)out, (T *)out2, part, eps, training);
    return cudaGetLastError();
}

// The widest vector (16 bytes at most) dividing a plane, to which every tensor is aligned.
template <typename T> int bn_width(int64_t sp, const void *const *p, int np)
{
    for (int v = 16 / (int)sizeof(T); v > 1; v /= 2) {
        bool ok = sp % v == 0;
        for (int i = 0; i < np; i++) ok = ok && (!p[i] || (uintptr_t)p[i] % (v * sizeof(T)) == 0);
        if (ok) return v;
    }
    return 1;
}

template <typename T>
cudaError_t bn_t(bool backward, int64_t n, int64_t c, int64_t sp, const void *a0, const void *a1, const void *a2,
                 void *out, void *out2, double *part, double eps, bool training, cudaStream_t st)
{
    /* the operands read and written as vectors: x and y, or g, x and gx */
    const void *vp[3] = {a0, backward ? a1 : out, backward ? out : NULL};
    constexpr int vmax = 16 / sizeof(T);
    int v = bn_width<T>(sp, vp, 3);
    if (v == vmax) return bn_launch<T, vmax>(backward, n, c, sp, a0, a1, a2, out, out2, part, eps, training, st);
    if (v == 2) return bn_launch<T, 2>(backward, n, c, sp, a0, a1, a2, out, out2, part, eps, training, st);
    return bn_launch<T, 1>(backward, n, c, sp, a0, a1, a2, out, out2, part, eps, training, st);
}

} // namespace

extern "C" size_t nb_cuda_batchnorm_scratch(bool backward, int64_t n, int64_t c, int64_t sp, bool training)
{
    if (c == 0 || (!backward && !training)) return 0;
    return (size_t)(c * bn_chunks(n, c, sp)) * 2 * sizeof(double);
}

extern "C" cudaError_t nb_cuda_launch_batchnorm(bool backward, int dtype, int64_t n, int64_t c, int64_t sp,
                                                const void *a0, const void *a1, const void *a2, void *out, void *out2,
                                                void *scratch, double eps, bool training, cudaStream_t st)
{
    if (c == 0) return cudaSuccess;
    double *part = (double *)scratch;
    return dtype == 1 ? bn_t<double>(backward, n, c, sp, a0, a1, a2, out, out2, part, eps, training, st)
                      : bn_t<float>(backward, n, c, sp, a0, a1, a2, out, out2, part, eps, training, st);
}

extern "C" cudaError_t nb_cuda_launch_batchnorm_running(int dtype, int64_t c, const void *stats, void *rm,
                                                        int64_t rm_stride, void *rv, int64_t rv_stride,
                                                        double momentum, double f, cudaStream_t st)
{
    if (c == 0) return cudaSuccess;
    unsigned blocks = (unsigned)((c + THREADS - 1) / THREADS < 1024 ? (c + THREADS - 1) / THREADS : 1024);
    if (dtype == 1)
        bn_running<double><<<blocks, THREADS, 0, st>>>(c, (const double *)stats, (double *)rm, rm_stride, (double *)rv,
                                                       rv_stride, momentum, f);
    else
        bn_running<float><<<blocks, THREADS, 0, st>>>(c, (const float *)stats, (float *)rm, rm_stride, (float *)rv,
                                                      rv_stride, momentum, f);
    return cudaGetLastError();
}
