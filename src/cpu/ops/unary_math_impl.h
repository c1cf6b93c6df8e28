/* Internal: element functions of the unary and activation-backward kernels.
 *
 * The float32 ones are branch-free (selects, bit casts, polynomials) so that a loop calling them
 * vectorises; libm's expf/tanhf/erff are scalar calls that stop it. Each states its accuracy.
 * The float64 ones call libm and are the reference the float32 ones are tested against
 * (tests/test_unary.c compares float32 results with float64 results rounded to float32).
 * Special values follow IEEE and libm: exp(-inf) = 0, exp(inf) = inf, NaN in gives NaN out. */
#ifndef NB_UNARY_MATH_IMPL_H
#define NB_UNARY_MATH_IMPL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* AVX-512 and AVX2 versions of a hot loop, picked at load time (ifunc), besides the baseline.
 * The x86-64-v4/v3 levels include FMA for scalars too, so a loop's vector body and its scalar
 * remainder contract a * b + c alike: an element's value does not depend on where it falls. */
#if defined(__x86_64__) && defined(__GNUC__)
#define NB_VEC_CLONES                                                                            \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define NB_VEC_CLONES
#endif

static inline float nb_bits_f32(int32_t i)
{
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}

static inline int32_t nb_f32_bits(float f)
{
    int32_t i;
    memcpy(&i, &f, sizeof i);
    return i;
}

static inline double nb_bits_f64(int64_t i)
{
    double f;
    memcpy(&f, &i, sizeof f);
    return f;
}

static inline int64_t nb_f64_bits(double f)
{
    int64_t i;
    memcpy(&i, &f, sizeof i);
    return i;
}

/* The core of the float32 exps below (Cephes' expf polynomial after a Cody-Waite reduction x = n
 * ln2 + r, |r| <= ln2/2): e^r for xc in [-104, 89] (NaN gives NaN), and n as the low bits of *t
 * (xc log2(e) + 1.5 * 2^23): bits(*t) - bits(1.5 * 2^23) = n. */
static inline float nb_expf_core(float xc, float *t)
{
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer in low bits */
    *t = xc * 1.44269504088896341f + magic;
    float n = *t - magic;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    return p * (r * r) + r + 1.0f;
}

/* e^x in float32, within 2 ulp of the correctly rounded value. 2^n is applied in two halves so
 * that results in the subnormal range round once, and x > 88.73 gives inf. */
static inline float nb_vexpf(float x)
{
    float xc = x < -104.0f ? -104.0f : x;
    xc = xc > 89.0f ? 89.0f : xc;
    xc = x != x ? 0.0f : xc; /* keeps the bit arithmetic below defined */
    float t, p = nb_expf_core(xc, &t);
    int32_t ni = nb_f32_bits(t) - nb_f32_bits(12582912.0f);
    int32_t n1 = ni / 2, n2 = ni - n1;
    float y = p * nb_bits_f32((n1 + 127) << 23) * nb_bits_f32((n2 + 127) << 23);
    return x != x ? x : y;
}

/* e^x for x <= 0 (a softmax's x - max, cross entropy's x - lse, log-probabilities): nb_vexpf's
 * core without its overflow side, its NaN selects or its two-step scaling, for the softmax
 * family's passes over whole rows. x below -87.34 (e^x below 2^-126, where nb_vexpf rounds into
 * the subnormals) gives 0 or a value within 2^-126 of e^x; -inf gives 0; NaN gives NaN (through
 * the polynomial). Small positive x (rounding in x - lse) stays within 2 ulp up to x = 88. */
static inline float nb_vexpf_nonpos(float x)
{
    float xc = x < -88.0f ? -88.0f : x; /* then 2^n >= 2^-127, whose bits below are 0 */
    float t, p = nb_expf_core(xc, &t);
    uint32_t ni = (uint32_t)nb_f32_bits(t) - (uint32_t)nb_f32_bits(12582912.0f); /* n, mod 2^32 (NaN: any) */
    return p * nb_bits_f32((int32_t)((ni + 127u) << 23)); /* n = -127: 2^n's bits are 0, so 0 */
}

/* log(x) in float32, within 2 ulp (Cephes' logf polynomial on the mantissa in
 * [sqrt(1/2), sqrt(2))). Subnormals are scaled up first; log(0) = -inf, log(x < 0) = NaN. */
static inline float nb_vlogf(float x)
{
    int sub = x < 1.17549435e-38f;
    float xs = sub ? x * 8388608.0f : x; /* 2^23 */
    int32_t bits = nb_f32_bits(xs);
    int32_t e = ((bits >> 23) & 0xff) - 126;
    float m = nb_bits_f32((bits & 0x007fffff) | 0x3f000000); /* in [0.5, 1) */
    int lo = m < 0.707106781186547524f;
    e = lo ? e - 1 : e;
    float f = lo ? m + m - 1.0f : m - 1.0f;
    float fe = (float)e - (sub ? 23.0f : 0.0f);
    float z = f * f;
    float p = 7.0376836292e-2f;
    p = p * f - 1.1514610310e-1f;
    p = p * f + 1.1676998740e-1f;
    p = p * f - 1.2420140846e-1f;
    p = p * f + 1.4249322787e-1f;
    p = p * f - 1.6668057665e-1f;
    p = p * f + 2.0000714765e-1f;
    p = p * f - 2.4999993993e-1f;
    p = p * f + 3.3333331174e-1f;
    float y = p * f * z;
    y = y + fe * -2.12194440e-4f;
    y = y - 0.5f * z;
    y = f + y;
    y = y + fe * 0.693359375f;
    y = x == INFINITY ? x : y;
    y = x == 0.0f ? -INFINITY : y;
    y = x < 0.0f ? NAN : y;
    return x != x ? x : y;
}

/* log(1 + x) in float32, within 3 ulp: log(u) x / (u - 1) with u = 1 + x corrects the rounding
 * of u (Goldberg's method); tiny x gives x itself. */
static inline float nb_vlog1pf(float x)
{
    float u = 1.0f + x;
    float d = u - 1.0f;
    float y = nb_vlogf(u) * (x / (d == 0.0f ? 1.0f : d));
    y = d == 0.0f ? x : y;
    y = x == INFINITY ? x : y;
    return x != x ? x : y;
}

/* tanh(x) in float32, within 2 ulp: Cephes' odd polynomial for |x| < 0.625, else
 * 1 - 2 / (e^{2|x|} + 1) with x's sign. */
static inline float nb_vtanhf(float x)
{
    float ax = fabsf(x);
    float z = x * x;
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    float small = p * z * x + x;
    float big = 1.0f - 2.0f / (nb_vexpf(ax + ax) + 1.0f);
    big = copysignf(big, x);
    return ax < 0.625f ? small : big;
}

/* sqrt(x) as IEEE says (NaN for x < 0, sqrt(-0) = -0), without libm's errno path for negative
 * inputs (~20 ns each) and without a branch on the sign (mispredicted half the time on data of
 * mixed signs): the root of |x| with x's sign bit, or NaN. GCC does not vectorise sqrt unless
 * built with -fno-math-errno. */
static inline float nb_sqrtf(float x)
{
    int32_t r = nb_f32_bits(sqrtf(fabsf(x))) | (nb_f32_bits(x) & INT32_MIN);
    int32_t neg = -(int32_t)(x < 0.0f);
    return nb_bits_f32((r & ~neg) | (0x7fc00000 & neg));
}

static inline double nb_sqrt_d(double x)
{
    int64_t r = nb_f64_bits(sqrt(fabs(x))) | (nb_f64_bits(x) & INT64_MIN);
    int64_t neg = -(int64_t)(x < 0.0);
    return nb_bits_f64((r & ~neg) | (0x7ff8000000000000 & neg));
}

static inline float nb_vsigmoidf(float x) { return 1.0f / (1.0f + nb_vexpf(-x)); }

/* PyTorch's softplus: log(1 + e^{beta x}) / beta, and x where beta x > threshold. Both sides
 * are computed, so that the select vectorises. */
static inline float nb_softplus_f32(float x, float beta, float threshold)
{
    float y = nb_vlog1pf(nb_vexpf(x * beta)) / beta;
    return x * beta > threshold ? x : y;
}

/* e^x in float64 for the float32 functions computed in double (relative error below 1e-15;
 * x < -708 gives 0, x > 709 gives inf). */
static inline double nb_vexp_d(double x)
{
    double xc = x < -708.0 ? -708.0 : x;
    xc = xc > 709.0 ? 709.0 : xc;
    xc = x != x ? 0.0 : xc;
    const double magic = 6755399441055744.0; /* 1.5 * 2^52 */
    double t = xc * 1.4426950408889634074 + magic;
    double n = t - magic;
    int64_t ni = nb_f64_bits(t) - nb_f64_bits(magic);
    double r = xc - n * 6.93147180369123816490e-01;
    r = r - n * 1.90821492927058770002e-10;
    /* Taylor to degree 11: the remainder is below 7e-15 relative on |r| <= ln2/2 */
    double p = 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * (r * r) + r + 1.0;
    double y = p * nb_bits_f64((ni + 1023) << 52);
    y = x < -708.0 ? 0.0 : y;
    y = x > 709.0 ? INFINITY : y;
    return x != x ? x : y;
}

/* erfc(w) in float64 with relative error below 1.2e-7 for every w (Numerical Recipes' erfcc,
 * a Chebyshev fit of erfc(z) e^{z^2} in t = 1 / (1 + z/2)): enough for float32 results, and
 * relative also in the tail, where 1 + erf(x) = erfc(-x) would cancel. */
static inline double nb_verfc_d(double w)
{
    double z = fabs(w);
    double t = 1.0 / (1.0 + 0.5 * z);
    double p = 0.17087277;
    p = p * t - 0.82215223;
    p = p * t + 1.48851587;
    p = p * t - 1.13520398;
    p = p * t + 0.27886807;
    p = p * t - 0.18628806;
    p = p * t + 0.09678418;
    p = p * t + 0.37409196;
    p = p * t + 1.00002368;
    p = p * t - 1.26551223;
    double e = t * nb_vexp_d(p - z * z);
    return w < 0.0 ? 2.0 - e : e;
}

/* ---- GELU (PyTorch's formulas and constants) ------------------------------------------------
 * exact:  x Phi(x),  Phi(x) = (1 + erf(x / sqrt 2)) / 2 = erfc(-x / sqrt 2) / 2
 * tanh:   x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2
 * The float32 exact form runs in double through nb_verfc_d; the float64 one calls libm's erfc. */
#define NB_GELU_SQRT1_2 0.70710678118654752440
#define NB_GELU_PDF 0.39894228040143267794 /* 1 / sqrt(2 pi) */
#define NB_GELU_BETA 0.79788456080286535588 /* sqrt(2 / pi) */
#define NB_GELU_KAPPA 0.044715

static inline float nb_gelu_f32(float x)
{
    double xd = x;
    return (float)(0.5 * xd * nb_verfc_d(-xd * NB_GELU_SQRT1_2));
}

static inline double nb_gelu_f64(double x) { return 0.5 * x * erfc(-x * NB_GELU_SQRT1_2); }

static inline float nb_gelu_tanh_f32(float x)
{
    float inner = (float)NB_GELU_BETA * (x + (float)NB_GELU_KAPPA * (x * x * x));
    return 0.5f * x * (1.0f + nb_vtanhf(inner));
}

static inline double nb_gelu_tanh_f64(double x)
{
    double inner = NB_GELU_BETA * (x + NB_GELU_KAPPA * (x * x * x));
    return 0.5 * x * (1.0 + tanh(inner));
}

/* d gelu / dx = Phi(x) + x phi(x) */
static inline float nb_gelu_grad_f32(float x)
{
    double xd = x;
    double cdf = 0.5 * nb_verfc_d(-xd * NB_GELU_SQRT1_2);
    double pdf = NB_GELU_PDF * nb_vexp_d(-0.5 * xd * xd);
    return (float)(cdf + xd * pdf);
}

static inline double nb_gelu_grad_f64(double x)
{
    double cdf = 0.5 * erfc(-x * NB_GELU_SQRT1_2);
    double pdf = NB_GELU_PDF * exp(-0.5 * x * x);
    return cdf + x * pdf;
}

/* The tanh form's derivative, term by term as PyTorch writes it: with u = inner(x),
 * (1 + tanh u) / 2 + x/2 (1 - tanh^2 u) u'(x). */
static inline float nb_gelu_tanh_grad_f32(float x)
{
    float x_sq = x * x;
    float th = nb_vtanhf((float)NB_GELU_BETA * (x + (float)NB_GELU_KAPPA * x_sq * x));
    float du = (float)NB_GELU_BETA * (1.0f + 3.0f * (float)NB_GELU_KAPPA * x_sq);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

static inline double nb_gelu_tanh_grad_f64(double x)
{
    double x_sq = x * x;
    double th = tanh(NB_GELU_BETA * (x + NB_GELU_KAPPA * x_sq * x));
    double du = NB_GELU_BETA * (1.0 + 3.0 * NB_GELU_KAPPA * x_sq);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du;
}

#endif
