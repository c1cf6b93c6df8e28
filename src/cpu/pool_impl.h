/* Internal: the pool family's geometry, shared by src/cpu/ops/pool.c (the loops, both layouts,
 * and the entry) and src/cpu/ops/pool_vec.c (its vector kernels). */
#ifndef NB_POOL_IMPL_H
#define NB_POOL_IMPL_H

#include <stdbool.h>
#include <stdint.h>

typedef struct pool_geom {
    int64_t n, c, planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw;
    bool count_include_pad, relu; /* relu: max's fused ReLU (ops.def) */
} pool_geom;

#define NO_TAP 255 /* a uint8 tap index with no gradient (the fused ReLU's zeros) */

/* The channels-last forwards' loop: output rows r of all the images (n = r / oh, oy = r % oh) in
 * parallel. */
#define ROWS_NHWC_FOR(g)                                                                           \
    _Pragma("omp parallel for num_threads(nb_cpu_threads_for((g).planes * (g).h * (g).w, NB_CPU_GRAIN))") \
    for (int64_t r = 0; r < (g).n * (g).oh; r++)

/* Max pooling of channels-last float32 on AVX-512: where it runs (channels a multiple of 16),
 * the forward (indices int64, or uint8 taps with tap) and the backward (cov: 2 w int64 of
 * scratch). */
bool nb__pool_max_nhwc_vec(const pool_geom *g);
void nb__pool_max_fwd_nhwc_vec(pool_geom g, const float *x, float *y, void *idx, bool tap);
void nb__pool_max_bwd_nhwc_vec(pool_geom g, const float *gy, const void *idx, bool tap, float *gx, int64_t *cov);

/* The global average pool of float32 (oh = ow = 1) on AVX2, NCHW or channels-last (cl): where
 * it runs, and the pool itself, which returns the planes (NCHW) or images (channels-last) it
 * did, the first ones; the caller pools the rest. */
bool nb__pool_global_mean_vec(const pool_geom *g, bool cl);
int64_t nb__pool_global_mean_f32(pool_geom g, const float *x, float *y, bool cl);

#endif
