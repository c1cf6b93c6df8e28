/* Internal: what src/cpu/ops/batchnorm.c's channels-last path and its AVX-512 loops
 * (src/cpu/ops/batchnorm_vec.c) share. */
#ifndef NB_BATCHNORM_IMPL_H
#define NB_BATCHNORM_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What the sums add: v and v w per element, v = x - ref and w = v (SUMS_DEV, the statistics),
 * or v = g' and w = x - ref, g' = g where it counts (SUMS_GRAD: everywhere; SUMS_RELU: where x fa
 * + fc > 0; SUMS_RES: where (x fa + fc) + res > 0, g' then written to gr). The second passes
 * take the same modes (SUMS_DEV: the plain forward; AFFINE_ADD: the residual added, no ReLU). */
enum { SUMS_DEV, SUMS_GRAD, SUMS_RELU, SUMS_RES, AFFINE_ADD /* the forward's residual, no ReLU */ };

/* The float operands of one call, as [M, C] rows (ref, fa and fc: per channel). */
typedef struct cl_vec_in {
    const float *g, *x, *res, *ref, *fa, *fc;
    float *gr;
} cl_vec_in;

/* Whether the vectorised loops take a channels-last call of C channels of tsize bytes. */
bool nb__bn_cl_vec(int64_t c, size_t tsize);

/* Whether an output of M x C floats at y is written with streaming stores. */
bool nb__bn_cl_stream(const void *y, int64_t m, int64_t c);

/* The passes over rows [r0, r1), when vec (nb__bn_cl_vec) says the vectorised loops take the
 * call; each returns whether it ran. The sums add into s and q; the forward's second pass writes
 * y = OUT(ADD(x a + k)) from x (and res); the backward's, gx = (a g' + b x) + k from in. */
bool nb__bn_cl_vec_sums(bool vec, int mode, const cl_vec_in *in, int64_t r0, int64_t r1, int64_t c, double *s,
                         double *q);
bool nb__bn_cl_vec_affine(bool vec, int mode, const void *x, const void *res, int64_t r0, int64_t r1, int64_t c,
                           const void *a, const void *k, void *y, bool stream);
bool nb__bn_cl_vec_affine2(bool vec, int mode, const cl_vec_in *in, int64_t r0, int64_t r1, int64_t c,
                            const void *a, const void *b, const void *k, void *y, bool stream);

#endif
