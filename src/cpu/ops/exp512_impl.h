/* Internal: exp for sixteen float32 lanes with AVX-512, shared by the softmax and rnn kernels.
 * Cephes' expf: Cody-Waite reduction by ln 2, a degree-6 polynomial, about 1 ulp, for x in
 * [-110, 89] or NaN (callers clamp to the range they need). scalef scales by 2^n with overflow to
 * inf and gradual underflow. */
#ifndef NB_EXP512_IMPL_H
#define NB_EXP512_IMPL_H

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx512f"))) static inline __m512 nb_exp512(__m512 x)
{
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
    p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}
#endif

#endif
