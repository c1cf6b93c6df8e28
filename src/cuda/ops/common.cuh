// Device helpers shared by the CUDA kernel files.
#ifndef NB_CUDA_COMMON_CUH
#define NB_CUDA_COMMON_CUH

#include <stdint.h>

#include "cuda/kernels.h"

// The sum of v over the block, returned to every thread; sh holds blockDim.x doubles
// (blockDim.x a power of two).
__device__ inline double nb_block_sum(double v, double *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

// The offset of line l of operand k of a line geometry (nb_cuda_lines).
__device__ inline int64_t nb_line_offset(int64_t l, const nb_cuda_lines &p, int k)
{
    int64_t off = 0;
    for (int d = p.nd - 1; d >= 0; d--) {
        off += (l % p.shape[d]) * p.st[k][d];
        l /= p.shape[d];
    }
    return off;
}

#endif
