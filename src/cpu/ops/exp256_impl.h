/* Internal: what the AVX2 kernels of the softmax family and the LSTM cell share (softmax_avx2.c,
 * rnn.c): the mask of a vector's first n lanes, and exp of eight float32 lanes with AVX2 and FMA,
 * for x <= 0 (a softmax's x - max). The same Cephes expf as exp512_impl.h and
 * unary_math_impl.h's nb_vexpf_nonpos (Cody-Waite reduction by ln 2, a degree-6 polynomial, within
 * 2 ulp), with nb_vexpf_nonpos's range: x is clamped at -88, where 2^n's bits for n = -127 are 0,
 * so that x below about -87.3 gives 0 or a value within 2^-126 of e^x and -inf gives 0; NaN gives
 * NaN (max returns its second operand when it is NaN); small positive x stays within 2 ulp up to
 * 88. */
#ifndef NB_EXP256_IMPL_H
#define NB_EXP256_IMPL_H

#if defined(__x86_64__)
#include <immintrin.h>

/* The mask of lanes [0, n) for _mm256_maskload_ps / _mm256_maskstore_ps, n in [0, 8]. */
__attribute__((target("avx2,fma"))) static inline __m256i nb_lanes256(int64_t n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

__attribute__((target("avx2,fma"))) static inline __m256 nb_exp256_nonpos(__m256 x)
{
    const __m256 magic = _mm256_set1_ps(12582912.0f); /* 1.5 * 2^23: adding it rounds to an integer */
    __m256 xc = _mm256_max_ps(_mm256_set1_ps(-88.0f), x);
    __m256 t = _mm256_fmadd_ps(xc, _mm256_set1_ps(1.44269504088896341f), magic);
    __m256 n = _mm256_sub_ps(t, magic);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    /* 2^n from n's low bits in t (n = -127: the bits are 0, so 0) */
    __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_castps_si256(magic));
    __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(ni, _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(scale));
}
#endif

#endif
