// CUDA kernels: sort and topk along one dim, with the CPU's semantics (src/cpu/ops/sort.c):
// stable, NaN the largest value (last ascending, first descending), int64 positions. Every line
// becomes a segment of order-preserving unsigned keys, sorted with its positions by CUB's
// segmented radix sort (stable, both directions); the values are then gathered from the input
// through the sorted positions (so NaN payloads and -0.0 come back as they were).
#include <cub/cub.cuh>
#include <math.h>
#include <stdint.h>

#include "cuda/ops/common.cuh"

namespace {

enum { F32 = 0, F64, I64, I32, U8, BOOL };


// an unsigned key in the order of the values, NaN (any sign, any payload) above +inf
__device__ __forceinline__ uint64_t key_of(const void *base, int dtype, int64_t off)
{
    switch (dtype) {
    case F32: {
        float v = ((const float *)base)[off];
        uint32_t b = v != v ? 0x7fc00000u : __float_as_uint(v);
        return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    }
    case F64: {
        double v = ((const double *)base)[off];
        uint64_t b = v != v ? 0x7ff8000000000000ull : (uint64_t)__double_as_longlong(v);
        return (b & 0x8000000000000000ull) ? ~b : (b | 0x8000000000000000ull);
    }
    case I64: return (uint64_t)((const int64_t *)base)[off] ^ 0x8000000000000000ull;
    case I32: return (uint64_t)((uint32_t)((const int32_t *)base)[off] ^ 0x80000000u);
    case U8: return ((const uint8_t *)base)[off];
    default: return ((const bool *)base)[off] ? 1 : 0;
    }
}

// p.data[1] = input; keys/pos laid out [line, D] contiguous; offsets[l] = l D
__global__ void make_keys(nb_cuda_lines p, int dtype, uint64_t *keys, int64_t *pos, int *offsets)
{
    int64_t total = p.n * p.D;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t l = i / p.D, j = i % p.D;
        keys[i] = key_of(p.data[1], dtype, nb_line_offset(l, p, 1) + j * p.sd[1]);
        pos[i] = j;
        if (j == 0) offsets[l] = (int)i;
        if (i == total - 1) offsets[p.n] = (int)total;
    }
}

// out (p.data[0]) and out2 (idx, strides p.st[2] / p.sd[2]) get the first m sorted of each line
__global__ void gather(nb_cuda_lines p, int64_t m, int es, const int64_t *pos)
{
    int64_t total = p.n * m;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t l = i / m, j = i % m, src = pos[l * p.D + j];
        int64_t so = nb_line_offset(l, p, 1) + src * p.sd[1], oo = nb_line_offset(l, p, 0) + j * p.sd[0];
        switch (es) {
        case 1: ((uint8_t *)p.data[0])[oo] = ((const uint8_t *)p.data[1])[so]; break;
        case 4: ((uint32_t *)p.data[0])[oo] = ((const uint32_t *)p.data[1])[so]; break;
        default: ((uint64_t *)p.data[0])[oo] = ((const uint64_t *)p.data[1])[so]; break;
        }
        ((int64_t *)p.data[2])[nb_line_offset(l, p, 2) + j * p.sd[2]] = src;
    }
}

unsigned grid_for(int64_t n)
{
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 65535 * 8 ? b : 65535 * 8);
}

} // namespace

// scratch: NULL to ask for its size (*scratch_bytes); then a device buffer of that size
extern "C" cudaError_t nb_cuda_launch_sort(const nb_cuda_lines *p, int dtype, int es, int64_t m, bool descending,
                                           void *scratch, size_t *scratch_bytes, cudaStream_t s)
{
    int64_t total = p->n * p->D;
    size_t keys_b = (size_t)total * 8, pos_b = (size_t)total * 8, off_b = (size_t)(p->n + 1) * sizeof(int);
    size_t fixed = 2 * keys_b + 2 * pos_b + (off_b + 255) / 256 * 256, cub_b = 0;
    cudaError_t e = descending
                        ? cub::DeviceSegmentedRadixSort::SortPairsDescending(
                              nullptr, cub_b, (const uint64_t *)nullptr, (uint64_t *)nullptr, (const int64_t *)nullptr,
                              (int64_t *)nullptr, total, (int64_t)p->n, (const int *)nullptr, (const int *)nullptr, 0,
                              64, s)
                        : cub::DeviceSegmentedRadixSort::SortPairs(nullptr, cub_b, (const uint64_t *)nullptr,
                                                                   (uint64_t *)nullptr, (const int64_t *)nullptr,
                                                                   (int64_t *)nullptr, total, (int64_t)p->n,
                                                                   (const int *)nullptr, (const int *)nullptr, 0, 64, s);
    if (e != cudaSuccess) return e;
    if (!scratch) {
        *scratch_bytes = fixed + cub_b;
        return cudaSuccess;
    }
    char *c = (char *)scratch;
    uint64_t *k_in = (uint64_t *)c, *k_out = (uint64_t *)(c + keys_b);
    int64_t *p_in = (int64_t *)(c + 2 * keys_b), *p_out = (int64_t *)(c + 2 * keys_b + pos_b);
    int *offsets = (int *)(c + 2 * keys_b + 2 * pos_b);
    void *tmp = c + fixed;
    make_keys<<<grid_for(total), 256, 0, s>>>(*p, dtype, k_in, p_in, offsets);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    e = descending ? cub::DeviceSegmentedRadixSort::SortPairsDescending(tmp, cub_b, k_in, k_out, p_in, p_out, total,
                                                                        (int64_t)p->n, offsets, offsets + 1, 0, 64, s)
                   : cub::DeviceSegmentedRadixSort::SortPairs(tmp, cub_b, k_in, k_out, p_in, p_out, total, (int64_t)p->n,
                                                              offsets, offsets + 1, 0, 64, s);
    if (e != cudaSuccess) return e;
    gather<<<grid_for(p->n * m), 256, 0, s>>>(*p, m, es, p_out);
    return cudaGetLastError();
}
