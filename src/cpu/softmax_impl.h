/* Internal: cross entropy's forward rows with AVX2 and FMA (src/cpu/ops/softmax_avx2.c), which
 * src/cpu/ops/softmax.c's pass over the rows runs where nb_cpu_avx2_fma() holds and AVX-512 is
 * not taken. */
#ifndef NB_SOFTMAX_IMPL_H
#define NB_SOFTMAX_IMPL_H

#include <stdbool.h>
#include <stdint.h>

/* lse(x) = max + log(sum(exp(x - max))) of a float32 row of D, the sum in double. next: the row
 * read after this one (or x), fetched into L2 during the exponentials. */
double nb__ce_lse_avx2(const float *x, int64_t D, const float *next);

/* lse(x) as nb__ce_lse_avx2, and q = exp(x - lse) scale written to q (streaming stores where
 * stream), acc += q when acc is not NULL. e: scratch of D floats, where the exponentials wait for
 * their sum (one exp per logit). */
double nb__ce_probs_avx2(const float *x, int64_t D, const float *next, float *e, float *q, double scale, bool stream,
                         float *acc);

#endif
