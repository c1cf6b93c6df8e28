/* Internal: the vector kernels of the float32 reductions (src/cpu/ops/reduce_vec.c), one set for
 * AVX-512F and one for AVX2, which src/cpu/ops/reduce.c calls on its fast paths. All of them sum
 * in double, after adding at most eight floats at a time in float32 (reduce_vec.c). */
#ifndef NB_REDUCE_IMPL_H
#define NB_REDUCE_IMPL_H

#include <stdint.h>

typedef struct nb_reduce_vec {
    /* The sum of x[0 .. n). */
    double (*sum)(const float *x, int64_t n);
    /* The max (sign 1) or min (sign -1) of x[0 .. n), n >= 1; any NaN gives NaN. */
    double (*extreme)(const float *x, int64_t n, int sign);
    /* The first position of the max (sign 1) or min (-1) of x[0 .. n), n >= 1, or of its first
     * NaN. */
    int64_t (*first_extreme)(const float *x, int64_t n, int sign);
    /* out[o os] = (the sum of the L <= NB_REDUCE_SHORT_ROW floats at x + o xs) / div, o in
     * [0, count). */
    void (*short_rows)(float *out, int64_t os, const float *x, int64_t xs, int64_t count, int64_t L, double div);
    /* acc[j] += rows[r][j] for the nrows rows, j in [0, n). */
    void (*rows_add)(double *acc, const float *const *rows, int nrows, int64_t n);
    /* acc[0 .. K) += the R rows of K <= narrow_max columns at x, rows rst elements apart. */
    void (*narrow_add)(double *acc, const float *x, int64_t rst, int64_t R, int64_t K);
    int64_t narrow_max;
} nb_reduce_vec;

#define NB_REDUCE_SHORT_ROW 256

/* This CPU's kernels: AVX-512F's where nb_cpu_avx512(), else AVX2's where nb_cpu_avx2_fma(),
 * else NULL (the caller's portable loops). */
const nb_reduce_vec *nb__reduce_vec(void);

#endif
