/* Internal: Philox 4x32-10, the counter-based generator of Salmon, Moraes, Dror and Shaw,
 * "Parallel random numbers: as easy as 1, 2, 3" (SC 2011), the one PyTorch's CUDA generator and
 * cuRAND use. A pure function of a 128-bit counter and a 64-bit key: any thread on any device
 * can compute the numbers of any element without touching shared state, which is what makes
 * nabla's random ops give the same values for a seed whatever the device or thread count.
 *
 * How nabla's random ops use it (src/core/random.c, src/cpu/ops/random.c, and later the CUDA
 * kernels, which must follow the same layout):
 *   key     = {seed low 32 bits, seed high 32 bits}
 *   counter = {c low, c high, 0, 0} with c = offset + element_index / per, where offset is the
 *             generator's counter when the call starts and `per` the elements one counter's
 *             four words feed (nb__philox_per_counter)
 *   the generator's offset then advances by ceil(numel / per) counters.
 * This header is plain C99 with no includes beyond <stdint.h>, usable from CUDA (__host__
 * __device__ there).
 */
#ifndef NB_PHILOX_IMPL_H
#define NB_PHILOX_IMPL_H

#include <stdint.h>

#ifdef __CUDACC__
#define NB_PHILOX_FN static inline __host__ __device__
#else
#define NB_PHILOX_FN static inline
#endif

#define NB_PHILOX_M0 0xD2511F53u /* round multipliers */
#define NB_PHILOX_M1 0xCD9E8D57u
#define NB_PHILOX_W0 0x9E3779B9u /* Weyl key increments: golden ratio, sqrt(3) - 1 */
#define NB_PHILOX_W1 0xBB67AE85u

/* out = Philox4x32-10(ctr, key). */
NB_PHILOX_FN void nb__philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)NB_PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)NB_PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += NB_PHILOX_W0;
        k1 += NB_PHILOX_W1;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* The four words for counter c (64-bit) under seed. */
NB_PHILOX_FN void nb__philox_at(uint64_t seed, uint64_t c, uint32_t out[4])
{
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    const uint32_t ctr[4] = {(uint32_t)c, (uint32_t)(c >> 32), 0, 0};
    nb__philox(ctr, key, out);
}

/* Uniform float on [0, 1) from the top 24 bits of a word: every value a multiple of 2^-24, so
 * exactly representable and never rounded up to 1. */
NB_PHILOX_FN float nb__u32_to_unit_float(uint32_t x)
{
    return (float)(x >> 8) * 0x1p-24f;
}

/* Uniform double on [0, 1) from the top 53 bits of two words. */
NB_PHILOX_FN double nb__u64_to_unit_double(uint32_t hi, uint32_t lo)
{
    uint64_t x = ((uint64_t)hi << 32) | lo;
    return (double)(int64_t)(x >> 11) * 0x1p-53; /* signed: one instruction, same value */
}

/* How many elements one counter (four 32-bit words) feeds, by what an element needs:
 *   rand / bernoulli float32: one word each                       -> 4
 *   rand / bernoulli float64: two words (53 bits)                  -> 2
 *   randn float32: Box-Muller turns two words into two normals     -> 4
 *   randn float64: two 53-bit uniforms (four words) give two normals -> 2
 *   randint: 64 bits each (two words), any dtype                   -> 2
 * `wide` is true for float64 output (rand, randn, bernoulli) and for randint. */
NB_PHILOX_FN int nb__philox_per_counter(int wide)
{
    return wide ? 2 : 4;
}

#endif
