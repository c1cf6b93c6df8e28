// CUDA kernels: reductions, with the CPU reference's semantics (src/cpu/ops/reduce.c): float
// accumulation in double, integer sums and products in int64, NaN wins in max/min (and its first
// position), the first occurrence of an extreme, VAR in two passes, LOGSUMEXP shifted by the max.
// Shapes: in [d0, ..., dn-1] (any strides) reduced over some dims; the plan (reduce.c) has the
// kept dims (nout outputs) and the reduced dims (nred positions), size-1 dims dropped and dims
// that step as one merged. Three paths (choose() picks):
//   generic: one block per output, its threads striding over the reduced positions (PROD, and
//            whatever the other two do not take);
//   row:     few outputs (< 2 per multiprocessor) over many positions (> 16K): each output's
//            positions cut into chunks, a block per chunk, partials combined by a second kernel;
//            also many outputs over contiguous runs of >= 2048 positions, a block per output;
//   col:     the innermost kept dim contiguous in the input (sums over leading dims): a warp
//            covers 32 adjacent outputs so that its loads coalesce, chunked like row when the
//            outputs are too few.
// (A warp-per-output variant for many short rows is left for when it can be measured.)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

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


// The offset of reduced position r: one strided run (the plan merges what it can) needs no
// division.
__device__ __forceinline__ int64_t roff(int64_t r, const nb_cuda_reduce_plan &p)
{
    return p.nr == 1 ? r * p.rin[0] : offset(r, p.nr, p.rsize, p.rin);
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
                int64_t off = roff(r, p);
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
                int64_t off = roff(r, p);
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
                int64_t off = roff(r, p);
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
                bool nz = ld_d(b, roff(r, p)) != 0;
                hit |= op == NB_CUDA_OP_ALL ? !nz : nz;
            }
            hit = block_sum_i(hit, shi, false) != 0;
            iv = op == NB_CUDA_OP_ALL ? !hit : hit;
            res_int = true;
            break;
        }
        case NB_CUDA_OP_VAR: {
            double s = 0;
            for (int64_t r = threadIdx.x; r < n; r += blockDim.x) s += ld_d(b, roff(r, p));
            double mean = nb_block_sum(s, shd) / (double)n, ss = 0;
            for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
                double dv = ld_d(b, roff(r, p)) - mean;
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
                Ext c = {ld_d(b, roff(r, p)), 0, r};
                if (ext_better(c, e, false, 1)) e = c;
            }
            e = block_ext(e, false, 1, shd, shi, shx);
            double m = e.idx < 0 ? -INFINITY : e.d, shift = isinf(m) ? 0 : m, s = 0;
            for (int64_t r = threadIdx.x; r < n; r += blockDim.x) s += exp(ld_d(b, roff(r, p)) - shift);
            d = log(nb_block_sum(s, shd)) + shift;
            break;
        }
        default: { // NORM, s0 = p
            double pn = s0;
            if (isinf(pn)) {
                Ext e = {0, 0, -1};
                for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
                    Ext c = {fabs(ld_d(b, roff(r, p))), 0, r};
                    if (ext_better(c, e, false, pn > 0 ? 1 : -1)) e = c;
                }
                e = block_ext(e, false, pn > 0 ? 1 : -1, shd, shi, shx);
                d = e.idx < 0 ? 0 : e.d;
            } else {
                double s = 0;
                for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
                    double v = fabs(ld_d(b, roff(r, p)));
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

// ---- split and column reductions --------------------------------------------------------------
// Two layouts the one-block-per-output kernel serves badly (see choose() for when each engages):
//   row: few outputs over many elements (a full sum, the norm of gradient clipping): an output's
//        reduced positions are cut into P chunks, one block of THREADS per (output, chunk); a
//        contiguous range is read in 16-byte vectors.
//   col: the innermost kept dim is contiguous in the input (a bias gradient's sum over dim 0): a
//        block of CX x CY threads covers CX consecutive outputs, so a warp reads CX adjacent
//        elements of a row, and its CY rows of threads stride over the reduced positions; the
//        positions are cut into P chunks when there are too few outputs to fill the GPU.
// A block leaves one partial per output (an Ext: a double sum, an int64 sum, or an extreme and its
// position) in the workspace, [nout][P], and combine_kernel merges an output's P partials in a
// fixed order and finishes it; with P = 1 the block finishes the output itself. Extremes merge in
// any order to the reference's answer (NaN first, then the value, then the lower position). VAR
// and LOGSUMEXP keep the reference's two passes: the mean (the max) per output into the
// workspace, then the sum of squared deviations (of shifted exps).

enum { K_SUMD, K_SUMI, K_EXT };                                                  // partial kinds
enum { F_ID, F_ABS0, F_ABS1, F_ABS2, F_ABSP, F_SQDEV, F_EXP, F_NZ, F_Z, F_ABS }; // per element
constexpr int CX = 32, CY = 8, UNROLL = 4, COL_UNROLL = 8;

struct Pass {
    int kind, fn, sign; // sign: 1 max, -1 min (K_EXT)
    bool is_int;        // integer input: int64 sums and comparisons
    double pn;          // F_ABSP's p
    const double *shift; // second pass of VAR / LOGSUMEXP: the per-output mean / shift, else NULL
    double *shift_out;   // first pass of VAR / LOGSUMEXP: where it finishes, else NULL
    Ext *part;           // [nout][P] partials when P > 1
    int64_t P, chunk;    // chunk c covers positions [c * chunk, min((c + 1) * chunk, nred))
};

template <int KIND, typename T> __device__ __forceinline__ void visit(Ext &a, const Pass &ps, T t, int64_t r, double sh)
{
    if (KIND == K_SUMD) {
        double v = ld_d(&t, 0);
        switch (ps.fn) {
        case F_ABS0: v = fabs(v) != 0; break;
        case F_ABS1: v = fabs(v); break;
        case F_ABS2: v = v * v; break;
        case F_ABSP: v = pow(fabs(v), ps.pn); break;
        case F_SQDEV: v = (v - sh) * (v - sh); break;
        case F_EXP: v = exp(v - sh); break;
        default: break;
        }
        a.d += v;
    } else if (KIND == K_SUMI) {
        int64_t v = ps.fn == F_ID ? ld_i(&t, 0) : ps.fn == F_NZ ? ld_d(&t, 0) != 0 : !(ld_d(&t, 0) != 0);
        a.i = (int64_t)((uint64_t)a.i + (uint64_t)v);
    } else {
        double d = ld_d(&t, 0);
        Ext c = {ps.fn == F_ABS ? fabs(d) : d, ps.is_int ? ld_i(&t, 0) : 0, r};
        if (ext_better(c, a, ps.is_int, ps.sign)) a = c;
    }
}

// The 16 / sizeof(T) elements of a vector load, at positions r, r + 1, ...
template <int KIND, typename T> __device__ __forceinline__ void visit_vec(Ext &a, const Pass &ps, uint4 u, int64_t r, double sh)
{
    constexpr int V = 16 / sizeof(T);
    T t[V];
    memcpy(t, &u, sizeof u);
#pragma unroll
    for (int e = 0; e < V; e++) visit<KIND>(a, ps, t[e], r + e, sh);
}

template <int KIND> __device__ __forceinline__ void merge(Ext &a, const Ext &b, const Pass &ps)
{
    if (KIND == K_SUMD) a.d += b.d;
    else if (KIND == K_SUMI) a.i = (int64_t)((uint64_t)a.i + (uint64_t)b.i);
    else if (ext_better(b, a, ps.is_int, ps.sign)) a = b;
}

// Output o from its whole partial: the reference's finish and store (or a first pass's result).
__device__ void finish(int op, const Pass &ps, const Ext &a, int64_t o, const nb_cuda_reduce_plan &p, double s0,
                       int64_t i0, bool flag)
{
    const double n = (double)p.nred;
    if (ps.shift_out) {
        double m = a.idx < 0 ? -INFINITY : a.d;
        ps.shift_out[o] = op == NB_CUDA_OP_VAR ? a.d / n : isinf(m) ? 0 : m;
        return;
    }
    double d = a.d;
    int64_t iv = a.i;
    bool res_int = false;
    switch (op) {
    case NB_CUDA_OP_SUM:
    case NB_CUDA_OP_MAX:
    case NB_CUDA_OP_MIN: res_int = ps.is_int; break;
    case NB_CUDA_OP_MEAN:
        res_int = ps.is_int;
        d /= n;
        break;
    case NB_CUDA_OP_ALL:
    case NB_CUDA_OP_ANY:
        iv = op == NB_CUDA_OP_ALL ? iv == 0 : iv != 0; // iv: the count of zeros (ALL), nonzeros (ANY)
        res_int = true;
        break;
    case NB_CUDA_OP_VAR: {
        double dof = n - (double)i0;
        d /= dof > 0 ? dof : 0;
        if (flag) d = sqrt(d);
        break;
    }
    case NB_CUDA_OP_LOGSUMEXP: d = log(d) + ps.shift[o]; break;
    case NB_CUDA_OP_NORM:
        if (isinf(s0)) d = a.idx < 0 ? 0 : d;
        else if (s0 == 2) d = sqrt(d);
        else if (s0 != 0 && s0 != 1) d = pow(d, 1 / s0);
        break;
    default: break;
    }
    int64_t oo = offset(o, p.nk, p.ksize, p.kout);
    if (op == NB_CUDA_OP_ARGMAX || op == NB_CUDA_OP_ARGMIN) ((int64_t *)p.out)[oo] = a.idx;
    else store(p.out, p.out_dtype, oo, d, iv, res_int);
    if (p.out2) ((int64_t *)p.out2)[offset(o, p.nk, p.ksize, p.kout2)] = a.idx;
}

// Grid (nout, P), THREADS threads: block (o, c) reduces chunk c of output o.
template <int KIND, typename T>
__global__ void __launch_bounds__(THREADS)
    row_kernel(int op, const T *__restrict__ in, nb_cuda_reduce_plan p, Pass ps, double s0, int64_t i0, bool flag)
{
    __shared__ double shd[THREADS];
    __shared__ long long shi[THREADS], shx[THREADS];
    const int64_t o = blockIdx.x, c = blockIdx.y, tid = threadIdx.x;
    const int64_t r0 = c * ps.chunk, r1 = r0 + ps.chunk < p.nred ? r0 + ps.chunk : p.nred;
    const T *b = in + offset(o, p.nk, p.ksize, p.kin);
    const double sh = ps.shift ? ps.shift[o] : 0;
    Ext a = {0, 0, -1};
    if (p.nr == 1 && p.rin[0] == 1) {
        // a scalar head up to 16-byte alignment, vectors (UNROLL loads in flight), a scalar tail
        constexpr int64_t V = 16 / sizeof(T);
        const T *s = b + r0;
        int64_t len = r1 - r0, head = (int64_t)((16 - ((uintptr_t)s & 15)) & 15) / (int64_t)sizeof(T);
        if (head > len) head = len;
        if (tid < head) visit<KIND>(a, ps, s[tid], r0 + tid, sh);
        const int64_t nv = (len - head) / V, rv = r0 + head;
        const uint4 *vp = (const uint4 *)(s + head);
        int64_t k = tid;
        for (; k + (UNROLL - 1) * THREADS < nv; k += UNROLL * THREADS) {
            uint4 u[UNROLL];
#pragma unroll
            for (int m = 0; m < UNROLL; m++) u[m] = vp[k + m * THREADS];
#pragma unroll
            for (int m = 0; m < UNROLL; m++) visit_vec<KIND, T>(a, ps, u[m], rv + (k + m * THREADS) * V, sh);
        }
        for (; k < nv; k += THREADS) visit_vec<KIND, T>(a, ps, vp[k], rv + k * V, sh);
        for (int64_t r = rv + nv * V + tid; r < r1; r += THREADS) visit<KIND>(a, ps, b[r], r, sh);
    } else {
        int64_t r = r0 + tid;
        for (; r + (UNROLL - 1) * THREADS < r1; r += UNROLL * THREADS) {
            T t[UNROLL];
#pragma unroll
            for (int m = 0; m < UNROLL; m++) t[m] = b[roff(r + m * THREADS, p)];
#pragma unroll
            for (int m = 0; m < UNROLL; m++) visit<KIND>(a, ps, t[m], r + m * THREADS, sh);
        }
        for (; r < r1; r += THREADS) visit<KIND>(a, ps, b[roff(r, p)], r, sh);
    }
    if (KIND == K_SUMD) a.d = nb_block_sum(a.d, shd);
    else if (KIND == K_SUMI) a.i = block_sum_i(a.i, shi, false);
    else a = block_ext(a, ps.is_int, ps.sign, shd, shi, shx);
    if (tid == 0) {
        if (ps.P == 1) finish(op, ps, a, o, p, s0, i0, flag);
        else ps.part[o * ps.P + c] = a;
    }
}

// Grid (tiles, P), CX x CY threads; the kept dims are [Q..., K] with K = ksize[nk - 1] contiguous:
// tile t covers outputs q * K + j for q = t / ceil(K / CX), j = t % ceil(K / CX) * CX + threadIdx.x.
template <int KIND, typename T>
__global__ void __launch_bounds__(CX *CY)
    col_kernel(int op, const T *__restrict__ in, nb_cuda_reduce_plan p, Pass ps, double s0, int64_t i0, bool flag)
{
    __shared__ double shd[CY][CX];
    __shared__ long long shi[CY][CX], shx[CY][CX];
    const int64_t K = p.ksize[p.nk - 1], jt = (K + CX - 1) / CX, q = blockIdx.x / jt;
    const int64_t j = blockIdx.x % jt * CX + threadIdx.x, o = q * K + j, c = blockIdx.y;
    const int64_t r0 = c * ps.chunk, r1 = r0 + ps.chunk < p.nred ? r0 + ps.chunk : p.nred;
    Ext a = {0, 0, -1};
    if (j < K) {
        const T *b = in + offset(q, p.nk - 1, p.ksize, p.kin) + j;
        const double sh = ps.shift ? ps.shift[o] : 0;
        int64_t r = r0 + threadIdx.y;
        for (; r + (COL_UNROLL - 1) * CY < r1; r += COL_UNROLL * CY) {
            T t[COL_UNROLL];
#pragma unroll
            for (int m = 0; m < COL_UNROLL; m++) t[m] = b[roff(r + m * CY, p)];
#pragma unroll
            for (int m = 0; m < COL_UNROLL; m++) visit<KIND>(a, ps, t[m], r + m * CY, sh);
        }
        for (; r < r1; r += CY) visit<KIND>(a, ps, b[roff(r, p)], r, sh);
    }
    shd[threadIdx.y][threadIdx.x] = a.d;
    shi[threadIdx.y][threadIdx.x] = a.i;
    shx[threadIdx.y][threadIdx.x] = a.idx;
    __syncthreads();
    if (threadIdx.y == 0 && j < K) {
        for (int y = 1; y < CY; y++) merge<KIND>(a, Ext{shd[y][threadIdx.x], shi[y][threadIdx.x], shx[y][threadIdx.x]}, ps);
        if (ps.P == 1) finish(op, ps, a, o, p, s0, i0, flag);
        else ps.part[o * ps.P + c] = a;
    }
}

// One warp per output: its P partials, merged by a fixed tree, then finished.
template <int KIND> __global__ void combine_kernel(int op, nb_cuda_reduce_plan p, Pass ps, double s0, int64_t i0, bool flag)
{
    const int64_t o = (int64_t)blockIdx.x * (THREADS / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (o >= p.nout) return; // whole warps: the shuffles below see all 32 lanes
    Ext a = {0, 0, -1};
    for (int64_t c = lane; c < ps.P; c += 32) merge<KIND>(a, ps.part[o * ps.P + c], ps);
    for (int s = 16; s > 0; s >>= 1) {
        Ext b = {__shfl_down_sync(0xffffffffu, a.d, s), (int64_t)__shfl_down_sync(0xffffffffu, (long long)a.i, s),
                 (int64_t)__shfl_down_sync(0xffffffffu, (long long)a.idx, s)};
        merge<KIND>(a, b, ps);
    }
    if (lane == 0) finish(op, ps, a, o, p, s0, i0, flag);
}

enum { PATH_GENERIC, PATH_ROW, PATH_COL };
struct Cfg {
    int path;
    int64_t P, chunk, tiles;
    size_t ws; // bytes: partials [nout][P] when P > 1, then VAR's / LOGSUMEXP's nout doubles
};

bool splittable(int op)
{
    switch (op) {
    case NB_CUDA_OP_SUM:
    case NB_CUDA_OP_MEAN:
    case NB_CUDA_OP_MAX:
    case NB_CUDA_OP_MIN:
    case NB_CUDA_OP_ARGMAX:
    case NB_CUDA_OP_ARGMIN:
    case NB_CUDA_OP_ALL:
    case NB_CUDA_OP_ANY:
    case NB_CUDA_OP_VAR:
    case NB_CUDA_OP_LOGSUMEXP:
    case NB_CUDA_OP_NORM: return true;
    default: return false; // PROD: the generic kernel
    }
}

bool two_pass(int op) { return op == NB_CUDA_OP_VAR || op == NB_CUDA_OP_LOGSUMEXP; }

int sm_count()
{
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return nb_cuda_sm_count(dev);
}

// The path for a reduction on the current device. Blocks aimed at: 8 per multiprocessor. col:
// the innermost kept dim (K outputs) is contiguous, unless K < 16 and row applies; split when its
// tiles are fewer than that, each chunk at least 256 rows. row: fewer outputs than 2 per
// multiprocessor over more than 16K positions, each chunk at least 4096; or any number of outputs
// whose positions are one contiguous run of at least 2048 (one block each, for the vector loads).
// Chunks are multiples of 64 positions; none is empty.
Cfg choose(int op, const nb_cuda_reduce_plan *p)
{
    Cfg c = {PATH_GENERIC, 1, 0, 0, 0};
    const int64_t n = p->nred, sms = sm_count(), target = 8 * sms;
    if (!splittable(op) || n < 1 || p->nout < 1 || sms < 1) return c;
    const bool few = p->nout < 2 * sms && n > 16384;
    const int64_t K = p->nk >= 1 && p->kin[p->nk - 1] == 1 ? p->ksize[p->nk - 1] : 0;
    int64_t P;
    if (K >= CX / 2 || (K && !few)) {
        c.tiles = p->nout / K * ((K + CX - 1) / CX);
        if (c.tiles > INT32_MAX) return c;
        P = (target + c.tiles - 1) / c.tiles;
        if (P > n / 256) P = n / 256;
        c.path = PATH_COL;
    } else if (few) {
        P = (target + p->nout - 1) / p->nout;
        if (P > n / 4096) P = n / 4096;
        c.path = PATH_ROW;
    } else if (p->nr == 1 && p->rin[0] == 1 && n >= 2048) {
        P = 1; // many long contiguous rows (a sum over the last dim): a block per row, vector loads
        c.path = PATH_ROW;
    } else {
        return c;
    }
    if (P < 1) P = 1;
    if (P > 65535) P = 65535;
    c.chunk = ((n + P - 1) / P + 63) / 64 * 64;
    c.P = (n + c.chunk - 1) / c.chunk;
    c.ws = (c.P > 1 ? (size_t)p->nout * (size_t)c.P * sizeof(Ext) : 0) +
           (two_pass(op) ? (size_t)p->nout * sizeof(double) : 0);
    return c;
}

template <int KIND, typename T>
cudaError_t run_pass(int op, const nb_cuda_reduce_plan *p, const Pass &ps, const Cfg &c, double s0, int64_t i0, bool flag,
                     cudaStream_t s)
{
    const T *in = (const T *)p->in;
    if (c.path == PATH_COL)
        col_kernel<KIND, T><<<dim3((unsigned)c.tiles, (unsigned)c.P), dim3(CX, CY), 0, s>>>(op, in, *p, ps, s0, i0, flag);
    else
        row_kernel<KIND, T><<<dim3((unsigned)p->nout, (unsigned)c.P), THREADS, 0, s>>>(op, in, *p, ps, s0, i0, flag);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || c.P == 1) return e;
    const int64_t per = THREADS / 32;
    combine_kernel<KIND><<<(unsigned)((p->nout + per - 1) / per), THREADS, 0, s>>>(op, *p, ps, s0, i0, flag);
    return cudaGetLastError();
}

template <typename T>
cudaError_t run_pass(int op, const nb_cuda_reduce_plan *p, const Pass &ps, const Cfg &c, double s0, int64_t i0, bool flag,
                     cudaStream_t s)
{
    switch (ps.kind) {
    case K_SUMD: return run_pass<K_SUMD, T>(op, p, ps, c, s0, i0, flag, s);
    case K_SUMI: return run_pass<K_SUMI, T>(op, p, ps, c, s0, i0, flag, s);
    default: return run_pass<K_EXT, T>(op, p, ps, c, s0, i0, flag, s);
    }
}

template <typename T>
cudaError_t launch_split(int op, const nb_cuda_reduce_plan *p, double s0, int64_t i0, bool flag, const Cfg &c, void *ws,
                         cudaStream_t s)
{
    const bool is_int = !(p->in_dtype == F32 || p->in_dtype == F64 || p->in_dtype == F16 || p->in_dtype == BF16);
    const size_t nparts = c.P > 1 ? (size_t)p->nout * (size_t)c.P : 0;
    Pass ps = {K_SUMD, F_ID, 1, false, s0, nullptr, nullptr, c.P > 1 ? (Ext *)ws : nullptr, c.P, c.chunk};
    double *shifts = two_pass(op) ? (double *)((char *)ws + nparts * sizeof(Ext)) : nullptr;
    switch (op) {
    case NB_CUDA_OP_SUM:
    case NB_CUDA_OP_MEAN:
        ps.kind = is_int ? K_SUMI : K_SUMD;
        ps.is_int = is_int;
        break;
    case NB_CUDA_OP_MAX:
    case NB_CUDA_OP_MIN:
    case NB_CUDA_OP_ARGMAX:
    case NB_CUDA_OP_ARGMIN:
        ps.kind = K_EXT;
        ps.sign = op == NB_CUDA_OP_MAX || op == NB_CUDA_OP_ARGMAX ? 1 : -1;
        ps.is_int = is_int;
        break;
    case NB_CUDA_OP_ALL:
    case NB_CUDA_OP_ANY:
        ps.kind = K_SUMI;
        ps.fn = op == NB_CUDA_OP_ALL ? F_Z : F_NZ;
        break;
    case NB_CUDA_OP_VAR: ps.shift_out = shifts; break;
    case NB_CUDA_OP_LOGSUMEXP:
        ps.kind = K_EXT;
        ps.shift_out = shifts;
        break;
    default: // NORM
        if (isinf(s0)) {
            ps.kind = K_EXT;
            ps.fn = F_ABS;
            ps.sign = s0 > 0 ? 1 : -1;
        } else {
            ps.fn = s0 == 0 ? F_ABS0 : s0 == 1 ? F_ABS1 : s0 == 2 ? F_ABS2 : F_ABSP;
        }
        break;
    }
    cudaError_t e = run_pass<T>(op, p, ps, c, s0, i0, flag, s);
    if (e != cudaSuccess || !two_pass(op)) return e;
    Pass p2 = ps;
    p2.kind = K_SUMD;
    p2.fn = op == NB_CUDA_OP_VAR ? F_SQDEV : F_EXP;
    p2.sign = 1;
    p2.shift = shifts;
    p2.shift_out = nullptr;
    return run_pass<T>(op, p, p2, c, s0, i0, flag, s);
}

template <typename T>
cudaError_t launch(int op, const nb_cuda_reduce_plan *p, double s0, int64_t i0, bool flag, void *ws, cudaStream_t s)
{
    Cfg c = choose(op, p);
    if (c.path != PATH_GENERIC && (ws || !c.ws)) return launch_split<T>(op, p, s0, i0, flag, c, ws, s);
    int64_t blocks = p->nout < (1 << 20) ? p->nout : (1 << 20);
    reduce_kernel<T><<<(unsigned)blocks, THREADS, 0, s>>>(op, (const T *)p->in, *p, s0, i0, flag);
    return cudaGetLastError();
}

} // namespace

extern "C" size_t nb_cuda_reduce_workspace(int op, const nb_cuda_reduce_plan *p)
{
    return p->nout == 0 ? 0 : choose(op, p).ws;
}

extern "C" cudaError_t nb_cuda_launch_reduce(int op, const nb_cuda_reduce_plan *p, double s0, int64_t i0, bool flag,
                                             void *ws, cudaStream_t s)
{
    if (p->nout == 0) return cudaSuccess;
    switch (p->in_dtype) {
    case F32: return launch<float>(op, p, s0, i0, flag, ws, s);
    case F64: return launch<double>(op, p, s0, i0, flag, ws, s);
    case I64: return launch<int64_t>(op, p, s0, i0, flag, ws, s);
    case I32: return launch<int32_t>(op, p, s0, i0, flag, ws, s);
    case U8: return launch<uint8_t>(op, p, s0, i0, flag, ws, s);
    case BOOL: return launch<bool>(op, p, s0, i0, flag, ws, s);
    case F16: return launch<__half>(op, p, s0, i0, flag, ws, s);
    case BF16: return launch<__nv_bfloat16>(op, p, s0, i0, flag, ws, s);
    default: return cudaErrorInvalidValue;
    }
}
