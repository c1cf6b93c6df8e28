/* Internal: the reductions' plan, shared by src/cpu/ops/reduce.c (the plan, the fast paths and
 * the entry) and src/cpu/ops/reduce_ref.c (the reference path), and the vector kernels of the
 * float32 reductions (src/cpu/ops/reduce_vec.c), one set for AVX-512F and one for AVX2, which
 * reduce.c calls on its fast paths. All of them sum in double, after adding at most eight floats
 * at a time in float32 (reduce_vec.c). */
#ifndef NB_REDUCE_IMPL_H
#define NB_REDUCE_IMPL_H

#include <stdint.h>

#include "cpu/cpu_impl.h"

/* The reduction's geometry after dropping size-1 dims and merging dims that step as one: kept
 * dims (outputs) and reduced dims, each in the tensor's order. Strides are in elements. */
typedef struct rplan {
    int nk, nr;
    int64_t ks[NB_MAX_DIMS], kin[NB_MAX_DIMS], ko[NB_MAX_DIMS], ko2[NB_MAX_DIMS];
    int64_t rs[NB_MAX_DIMS], rin[NB_MAX_DIMS];
    int64_t nout, nred;
} rplan;

/* The offset (elements) of row-major position lin in a shape with the given strides. */
static inline int64_t offset_of(int64_t lin, int nd, const int64_t *shape, const int64_t *strides)
{
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        off += (lin % shape[d]) * strides[d];
        lin /= shape[d];
    }
    return off;
}

/* Walks positions of a strided shape in row-major order, keeping the current offset. */
typedef struct walk {
    int nd;
    const int64_t *shape, *strides;
    int64_t idx[NB_MAX_DIMS];
    int64_t off;
} walk;

static inline void walk_seek(walk *w, int nd, const int64_t *shape, const int64_t *strides, int64_t lin)
{
    w->nd = nd;
    w->shape = shape;
    w->strides = strides;
    w->off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        w->idx[d] = lin % shape[d];
        w->off += w->idx[d] * strides[d];
        lin /= shape[d];
    }
}

static inline void walk_next(walk *w)
{
    for (int d = w->nd - 1; d >= 0; d--) {
        w->off += w->strides[d];
        if (++w->idx[d] < w->shape[d]) return;
        w->off -= w->strides[d] * w->shape[d];
        w->idx[d] = 0;
    }
}

/* The reference path: every op and dtype, each output's reduced elements walked through their
 * strides and computed in double / int64 (reduce_ref.c). */
void nb__reduce_reference(nb_op op, const nb_kargs *a, const rplan *p);

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
