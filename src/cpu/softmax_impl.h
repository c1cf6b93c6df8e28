/* Internal: what the softmax family's files share. Cross entropy's forward rows with AVX2 and
 * FMA (src/cpu/ops/softmax_avx2.c), which src/cpu/ops/cross_entropy.c's pass over the rows runs
 * where nb_cpu_avx2_fma() holds and AVX-512 is not taken; cross entropy's entry, which
 * softmax.c's nb_cpu_k_softmax calls for its ops; softmax.c's portable logsumexp of a row; and the
 * AVX-512 helpers of softmax.c's and cross_entropy.c's rows (exp, widening, the row's max). */
#ifndef NB_SOFTMAX_IMPL_H
#define NB_SOFTMAX_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dispatch_impl.h"

/* lse(x) = max + log(sum(exp(x - max))) of a float32 row of D, the sum in double. next: the row
 * read after this one (or x), fetched into L2 during the exponentials. */
double nb__ce_lse_avx2(const float *x, int64_t D, const float *next);

/* lse(x) as nb__ce_lse_avx2, and q = exp(x - lse) scale written to q (streaming stores where
 * stream), acc += q when acc is not NULL. e: scratch of D floats, where the exponentials wait for
 * their sum (one exp per logit). */
double nb__ce_probs_avx2(const float *x, int64_t D, const float *next, float *e, float *q, double scale, bool stream,
                         float *acc);

/* Cross entropy's two ops (cross_entropy.c), which nb_cpu_k_softmax hands over. */
nb_status nb__cpu_cross_entropy(nb_op op, const nb_kargs *a);

/* max + log(sum(exp(x - max))) of a float32 row of D by softmax.c's portable passes (any CPU;
 * the sum in double). */
double nb__lse_f32_vec(const float *x, int64_t D);

#if defined(__x86_64__)
#include <immintrin.h>

#include "cpu/ops/exp512_impl.h"

/* exp of x <= 0 (x - max in a softmax; exp512_impl.h) clamped at -110, below which the result
 * rounds to exactly 0, so that -inf gives 0. NaN passes through (max/min return their second
 * operand when it is NaN). */
__attribute__((target("avx512f"))) static inline __m512 exp_nonpos(__m512 x)
{
    return nb_exp512(_mm512_max_ps(_mm512_set1_ps(-110.0f), x));
}

/* The largest of a float32 row of D (-inf for D = 0). A NaN may be lost here (max returns its
 * second operand where either is NaN); the row's exponentials then carry it into its sum. */
__attribute__((target("avx512f"))) static inline float max_f32_avx512(const float *x, int64_t D)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 vm = ninf;
    int64_t i = 0;
    for (; i + 16 <= D; i += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(x + i));
    if (i < D) vm = _mm512_max_ps(vm, _mm512_mask_loadu_ps(ninf, (__mmask16)((1u << (D - i)) - 1), x + i));
    return _mm512_reduce_max_ps(vm);
}

/* The lower and upper halves of v widened to double. */
__attribute__((target("avx512f"))) static inline __m512d lo_pd(__m512 v)
{
    return _mm512_cvtps_pd(_mm512_castps512_ps256(v));
}

__attribute__((target("avx512f"))) static inline __m512d hi_pd(__m512 v)
{
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
#endif

#endif
