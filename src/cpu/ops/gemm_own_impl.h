/* Internal, x86-64 only: what nabla's own AVX-512 product kernels share (gemm_rows.c,
 * gemm_thin.c, gemm_dot.c; gemm.c offers them as a way of the tuner where nb_cpu_avx512()). */
#ifndef NB_GEMM_OWN_IMPL_H
#define NB_GEMM_OWN_IMPL_H

#include <immintrin.h>
#include <stdint.h>

#define V512 __attribute__((target("avx512f")))
#define NCOL 64 /* columns per block of C (gemm_rows.c, gemm_thin.c): four vectors */

/* The lanes of a vector of 16 floats of which `left` remain: all 16, fewer, or none. */
static inline __mmask16 nb__lanes_left(int64_t left)
{
    return left >= 16 ? (__mmask16)0xFFFF : left > 0 ? (__mmask16)((1u << left) - 1) : (__mmask16)0;
}

/* The four vectors' lanes of the block of NCOL columns starting at j, of columns up to end. */
static inline void nb__block_lanes(int64_t j, int64_t end, __mmask16 mask[4])
{
    for (int v = 0; v < 4; v++) mask[v] = nb__lanes_left(end - (j + 16 * v));
}

#endif
