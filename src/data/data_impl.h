/* Internal: the loader's random numbers and per-sample transforms (shared with the tests). */
#ifndef NB_DATA_IMPL_H
#define NB_DATA_IMPL_H

#include <stdint.h>

/* splitmix64's finaliser: a well-mixed 64-bit hash (and, stepped, a generator). */
static inline uint64_t nb__mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* The next value of a splitmix64 stream. */
static inline uint64_t nb__rng_next(uint64_t *state)
{
    *state += UINT64_C(0x9e3779b97f4a7c15);
    return nb__mix64(*state);
}

/* Uniform in [0, n) (Lemire's multiply-shift; the bias is below 2^-40 for n < 2^24). */
static inline uint64_t nb__rng_below(uint64_t *state, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)nb__rng_next(state) * n) >> 64);
}

/* x [c, h, w] padded by `pad` zeros on each side, then the window [dy, dy+oh) x [dx, dx+ow) of
 * the padded image written to out [c, oh, ow]. */
void nb__data_crop(const float *x, int64_t c, int64_t h, int64_t w, int64_t pad, int64_t dy, int64_t dx,
                   int64_t oh, int64_t ow, float *out);
/* Mirrors x [c, h, w] left-right in place. */
void nb__data_hflip(float *x, int64_t c, int64_t h, int64_t w);

#endif
