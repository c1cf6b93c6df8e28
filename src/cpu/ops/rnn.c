/* Kernels of the rnn family: the pointwise part of one LSTM step, forward and backward, and on
 * the CPU optionally the step's product with W_hh as well (else the products around them are BMM
 * calls made by src/nn/lstm.c and rules_rnn.c).
 *   LSTM_CELL           out Y [2, T+1, B, H] (Y[0] = h, Y[1] = c; t = 0 the initial state),
 *                       out2 act [T, B, 4H], in[0] xp [T, B, 4H]; step t = i0. With flag, act[t]
 *                       holds h_{t-1} W_hh^T on entry (else that product counts as 0). Gates
 *                       z = xp[t] + act[t] in PyTorch's order (i, f, g, o); writes
 *                       act[t] = (sigmoid(z_i), sigmoid(z_f), tanh(z_g), sigmoid(z_o)),
 *                       c_t = f c_{t-1} + i g into Y[1, t+1] and h_t = o tanh(c_t) into Y[0, t+1].
 *                       With in[1] = W_hh^T [H, 4H] (contiguous) and flag, the kernel makes
 *                       act[t] = h_{t-1} W_hh^T itself first. With i1 > 1, steps i0 to
 *                       i0 + i1 - 1 in turn, flag for the first (the later ones have it).
 *   LSTM_CELL_BACKWARD  out dgates [T, B, 4H], out2 dhc [2, B, H], in = (gY, Y, act), step i0.
 *                       On entry dhc holds the gradients reaching h_t (from step t+1's gates) and
 *                       c_t; gY[., t+1] is added to them. Writes the gate gradients dgates[t] and
 *                       dhc[1] = dc f (for c_{t-1}); dhc[0] is left for the caller's BMM, or,
 *                       with in[3] = W_hh [4H, H] (contiguous), made here: dgates[t] W_hh (at
 *                       t = 0 only with flag). With i1 > 1, steps i0 down to i0 - i1 + 1. With
 *                       out3 [4H], also the sums of dgates' columns over the steps run and the
 *                       rows (a linear layer's bias gradient: src/autograd/rules_rnn.c), each
 *                       thread summing its rows of each step while they are still in cache.
 * All operands contiguous, one dtype (float32 or float64). float32 on AVX-512 runs 16 lanes with
 * an exp accurate to about 1 ulp (sigmoid and tanh from it: tanh(x) = 1 - 2 / (exp(2x) + 1));
 * float32 with AVX2 and FMA but not AVX-512 runs the same arithmetic on 8 lanes (about 2 ulp;
 * 35-45% less time a cell than the portable loops on Zen 3); float32 elsewhere runs loops the
 * compiler vectorises with the branch-free sigmoid and tanh of unary_math_impl.h (2 ulp); float64
 * is a plain loop calling libm. Rows of
 * the batch are split across threads, one per 2^13 cells of a step; with the product, each thread
 * multiplies its own rows (one sgemm on one thread each; float32 runs of steps use W_hh packed
 * once for the run: on AMX for nb_cpu_gemm_amx_packed, and without AVX-512 for gemm_avx2.c's
 * kernel, where oneDNN's sgemm on a thread's 64 rows of [64, 256] x [256, 1024] took 0.72 ms a
 * step on Zen 3 and this kernel 0.37) before or after their cells, and takes
 * them through every step of a run (i1) in one OpenMP region: a row's step reads only that row's
 * state, so the threads need no barrier between steps. On the Intel Xeon with 2 threads and
 * OMP_WAIT_POLICY=PASSIVE the second thread sleeps between regions, and waking it cost as much as
 * splitting a step's cells saved (docs/BENCHMARKS.md, sessions 25 and 26). A run needs the
 * product: without it the caller's product comes between steps. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "cpu/blas_impl.h"
#include "cpu/cpu_impl.h"
#include "cpu/ops/exp256_impl.h"
#include "cpu/ops/exp512_impl.h"
#include "cpu/ops/unary_math_impl.h"

typedef struct cell_ptrs {
    int64_t B, H;
    const char *xp, *g;        /* xp[t] (forward) or gY (backward) */
    char *act, *y, *out, *dhc; /* act[t], Y, dgates[t], dhc */
    const char *w;             /* W_hh^T (forward) or W_hh (backward) for the step's product, or NULL */
    const nb_cpu_amx_b *wp;    /* w packed for the AMX product (float32, a run of steps), or NULL */
    const nb_cpu_avx2_b *wv;   /* w packed for gemm_avx2.c's product (the same, without AVX-512), or NULL */
    int64_t t, T;
    bool flag;
} cell_ptrs;

/* ---- float64 rows -------------------------------------------------------------------------- */

static void fwd_row_f64(const cell_ptrs *p, int64_t b)
{
    int64_t H = p->H, BH = p->B * H;
    const double *x = (const double *)p->xp + b * 4 * H;
    double *a = (double *)p->act + b * 4 * H, *Y = (double *)p->y;
    const double *cp = Y + (p->T + 1) * BH + p->t * BH + b * H;
    double *hn = Y + (p->t + 1) * BH + b * H, *cn = Y + (p->T + 1 + p->t + 1) * BH + b * H;
    for (int64_t j = 0; j < 4 * H; j++) {
        double z = x[j] + (p->flag ? a[j] : 0);
        a[j] = j >= 2 * H && j < 3 * H ? tanh(z) : 1 / (1 + exp(-z));
    }
    for (int64_t j = 0; j < H; j++) {
        double c = a[H + j] * cp[j] + a[j] * a[2 * H + j];
        cn[j] = c;
        hn[j] = a[3 * H + j] * tanh(c);
    }
}

/* ---- float32 rows without AVX-512 ------------------------------------------------------------ */

/* unary_math_impl.h's branch-free sigmoid and tanh (2 ulp) in loops the compiler vectorises, with
 * AVX2 and AVX-512 clones picked at load time: libm's expf and tanhf are scalar calls (the
 * DLBench LSTM's cell took 1.3 ms a step so on Zen 3). Each iteration touches index j of each
 * row only, so the loops carry no dependence (omp simd). */
NB_VEC_CLONES static void fwd_row_f32(const cell_ptrs *p, int64_t b)
{
    int64_t H = p->H, BH = p->B * H;
    const float *x = (const float *)p->xp + b * 4 * H;
    float *a = (float *)p->act + b * 4 * H, *Y = (float *)p->y;
    const float *cp = Y + (p->T + 1) * BH + p->t * BH + b * H;
    float *hn = Y + (p->t + 1) * BH + b * H, *cn = Y + (p->T + 1 + p->t + 1) * BH + b * H;
    if (p->flag) /* act holds h W_hh^T: z = xp + act */
        for (int64_t j = 0; j < 4 * H; j++) a[j] += x[j];
    else
        memcpy(a, x, (size_t)(4 * H) * sizeof(float));
#pragma omp simd
    for (int64_t j = 0; j < 2 * H; j++) a[j] = nb_vsigmoidf(a[j]);
#pragma omp simd
    for (int64_t j = 2 * H; j < 3 * H; j++) a[j] = nb_vtanhf(a[j]);
#pragma omp simd
    for (int64_t j = 3 * H; j < 4 * H; j++) a[j] = nb_vsigmoidf(a[j]);
#pragma omp simd
    for (int64_t j = 0; j < H; j++) {
        float c = a[H + j] * cp[j] + a[j] * a[2 * H + j];
        cn[j] = c;
        hn[j] = a[3 * H + j] * nb_vtanhf(c);
    }
}

/* The backward row, float64 with libm's tanh and float32 with the vectorised one (ATTR: the
 * float32 row's clones). */
#define BWD_ROW(NAME, T_, TANH, ATTR)                                                             \
    ATTR static void NAME(const cell_ptrs *p, int64_t b)                                          \
    {                                                                                             \
        int64_t H = p->H, BH = p->B * H, S = (p->T + 1) * BH;                                     \
        const T_ *a = (const T_ *)p->act + b * 4 * H, *Y = (const T_ *)p->y, *G = (const T_ *)p->g; \
        const T_ *c = Y + S + (p->t + 1) * BH + b * H, *cp = Y + S + p->t * BH + b * H;           \
        const T_ *gh = G + (p->t + 1) * BH + b * H, *gc = G + S + (p->t + 1) * BH + b * H;        \
        T_ *d = (T_ *)p->out + b * 4 * H, *dh = (T_ *)p->dhc + b * H, *dc = dh + BH;              \
        _Pragma("omp simd") for (int64_t j = 0; j < H; j++)                                       \
        {                                                                                         \
            T_ i = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j];                        \
            T_ h = dh[j] + gh[j], tc = TANH(c[j]);                                                \
            T_ cc = dc[j] + gc[j] + h * o * (1 - tc * tc);                                        \
            d[j] = cc * g * i * (1 - i);                                                          \
            d[H + j] = cc * cp[j] * f * (1 - f);                                                  \
            d[2 * H + j] = cc * i * (1 - g * g);                                                  \
            d[3 * H + j] = h * tc * o * (1 - o);                                                  \
            dc[j] = cc * f;                                                                       \
        }                                                                                         \
    }
BWD_ROW(bwd_row_f64, double, tanh, )
BWD_ROW(bwd_row_f32, float, nb_vtanhf, NB_VEC_CLONES)

/* ---- float32 rows with AVX-512 --------------------------------------------------------------- */

#if defined(__x86_64__)
/* exp (exp512_impl.h), the argument clamped to [-87, 87]: sigmoid and tanh saturate long
 * before. NaN passes through (max/min return their second operand then). */
__attribute__((target("avx512f"))) static inline __m512 vexp(__m512 x)
{
    return nb_exp512(_mm512_min_ps(_mm512_set1_ps(87.0f), _mm512_max_ps(_mm512_set1_ps(-87.0f), x)));
}

/* 1 / d for d >= 1 (or NaN): rcp14's estimate (relative error below 2^-14) and one Newton step,
 * r + r (1 - d r), which squares that error, so within about an ulp of the quotient. vdivps on a
 * zmm is a long, unpipelined instruction; the forward cell made five a vector (1 / ... in each
 * sigmoid, 2 / ... in each tanh), which were half its arithmetic. */
__attribute__((target("avx512f"))) static inline __m512 vrcp(__m512 d)
{
    __m512 r = _mm512_rcp14_ps(d);
    return _mm512_fmadd_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(1.0f)), r);
}

__attribute__((target("avx512f"))) static inline __m512 vsigmoid(__m512 z)
{
    return vrcp(_mm512_add_ps(_mm512_set1_ps(1.0f), vexp(_mm512_sub_ps(_mm512_setzero_ps(), z))));
}

/* tanh(z) = 1 - 2 / (exp(2z) + 1); for |z| < 2^-4 the odd series z - z^3/3 + 2z^5/15 keeps the
 * relative error small where the first form cancels. */
__attribute__((target("avx512f"))) static inline __m512 vtanh(__m512 z)
{
    __m512 one = _mm512_set1_ps(1.0f);
    __m512 t = _mm512_fnmadd_ps(_mm512_set1_ps(2.0f), vrcp(_mm512_add_ps(vexp(_mm512_add_ps(z, z)), one)), one);
    __m512 z2 = _mm512_mul_ps(z, z);
    __m512 s = _mm512_fmadd_ps(z2, _mm512_set1_ps(2.0f / 15.0f), _mm512_set1_ps(-1.0f / 3.0f));
    s = _mm512_fmadd_ps(_mm512_mul_ps(s, z2), z, z);
    __mmask16 small = _mm512_cmp_ps_mask(_mm512_abs_ps(z), _mm512_set1_ps(0.0625f), _CMP_LT_OQ);
    return _mm512_mask_mov_ps(t, small, s);
}

__attribute__((target("avx512f"))) static void fwd_row_avx512(const cell_ptrs *p, int64_t b)
{
    int64_t H = p->H, BH = p->B * H;
    const float *x = (const float *)p->xp + b * 4 * H;
    float *a = (float *)p->act + b * 4 * H, *Y = (float *)p->y;
    const float *cp = Y + (p->T + 1) * BH + p->t * BH + b * H;
    float *hn = Y + (p->t + 1) * BH + b * H, *cn = Y + (p->T + 1 + p->t + 1) * BH + b * H;
    for (int64_t j = 0; j < H; j += 16) {
        __mmask16 k = H - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (H - j)) - 1);
        __m512 z[4];
        for (int q = 0; q < 4; q++) {
            z[q] = _mm512_maskz_loadu_ps(k, x + q * H + j);
            if (p->flag) z[q] = _mm512_add_ps(z[q], _mm512_maskz_loadu_ps(k, a + q * H + j));
        }
        __m512 i = vsigmoid(z[0]), f = vsigmoid(z[1]), g = vtanh(z[2]), o = vsigmoid(z[3]);
        __m512 c = _mm512_fmadd_ps(f, _mm512_maskz_loadu_ps(k, cp + j), _mm512_mul_ps(i, g));
        _mm512_mask_storeu_ps(a + j, k, i);
        _mm512_mask_storeu_ps(a + H + j, k, f);
        _mm512_mask_storeu_ps(a + 2 * H + j, k, g);
        _mm512_mask_storeu_ps(a + 3 * H + j, k, o);
        _mm512_mask_storeu_ps(cn + j, k, c);
        _mm512_mask_storeu_ps(hn + j, k, _mm512_mul_ps(o, vtanh(c)));
    }
}

__attribute__((target("avx512f"))) static void bwd_row_avx512(const cell_ptrs *p, int64_t b)
{
    int64_t H = p->H, BH = p->B * H, S = (p->T + 1) * BH;
    const float *a = (const float *)p->act + b * 4 * H, *Y = (const float *)p->y, *G = (const float *)p->g;
    const float *c = Y + S + (p->t + 1) * BH + b * H, *cp = Y + S + p->t * BH + b * H;
    const float *gh = G + (p->t + 1) * BH + b * H, *gc = G + S + (p->t + 1) * BH + b * H;
    float *d = (float *)p->out + b * 4 * H, *dh = (float *)p->dhc + b * H, *dc = dh + BH;
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t j = 0; j < H; j += 16) {
        __mmask16 k = H - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (H - j)) - 1);
        __m512 i = _mm512_maskz_loadu_ps(k, a + j), f = _mm512_maskz_loadu_ps(k, a + H + j);
        __m512 g = _mm512_maskz_loadu_ps(k, a + 2 * H + j), o = _mm512_maskz_loadu_ps(k, a + 3 * H + j);
        __m512 h = _mm512_add_ps(_mm512_maskz_loadu_ps(k, dh + j), _mm512_maskz_loadu_ps(k, gh + j));
        __m512 tc = vtanh(_mm512_maskz_loadu_ps(k, c + j));
        __m512 cc = _mm512_add_ps(_mm512_maskz_loadu_ps(k, dc + j), _mm512_maskz_loadu_ps(k, gc + j));
        cc = _mm512_fmadd_ps(_mm512_mul_ps(h, o), _mm512_fnmadd_ps(tc, tc, one), cc);
        __m512 di = _mm512_mul_ps(_mm512_mul_ps(cc, g), _mm512_mul_ps(i, _mm512_sub_ps(one, i)));
        __m512 df = _mm512_mul_ps(_mm512_mul_ps(cc, _mm512_maskz_loadu_ps(k, cp + j)),
                                  _mm512_mul_ps(f, _mm512_sub_ps(one, f)));
        __m512 dg = _mm512_mul_ps(_mm512_mul_ps(cc, i), _mm512_fnmadd_ps(g, g, one));
        __m512 dO = _mm512_mul_ps(_mm512_mul_ps(h, tc), _mm512_mul_ps(o, _mm512_sub_ps(one, o)));
        _mm512_mask_storeu_ps(d + j, k, di);
        _mm512_mask_storeu_ps(d + H + j, k, df);
        _mm512_mask_storeu_ps(d + 2 * H + j, k, dg);
        _mm512_mask_storeu_ps(d + 3 * H + j, k, dO);
        _mm512_mask_storeu_ps(dc + j, k, _mm512_mul_ps(cc, f));
    }
}

/* ---- float32 rows with AVX2 and FMA (no AVX-512) ---------------------------------------------- */

/* The AVX-512 rows' arithmetic on eight lanes: exp256_impl.h's exp with the argument clamped to
 * at most 87 (it clamps below at -88; NaN passes through), 1 / d from rcp's 12-bit estimate and
 * one Newton step (about 2^-22), and tanh's odd series below 2^-4. The portable rows' loops, which
 * GCC vectorises with a division a sigmoid, took 2.8 cycles an element on Zen 3. */
__attribute__((target("avx2,fma"))) static inline __m256 vexp8(__m256 x)
{
    return nb_exp256_nonpos(_mm256_min_ps(_mm256_set1_ps(87.0f), x));
}

__attribute__((target("avx2,fma"))) static inline __m256 vrcp8(__m256 d)
{
    __m256 r = _mm256_rcp_ps(d);
    return _mm256_fmadd_ps(r, _mm256_fnmadd_ps(d, r, _mm256_set1_ps(1.0f)), r);
}

__attribute__((target("avx2,fma"))) static inline __m256 vsigmoid8(__m256 z)
{
    return vrcp8(_mm256_add_ps(_mm256_set1_ps(1.0f), vexp8(_mm256_sub_ps(_mm256_setzero_ps(), z))));
}

__attribute__((target("avx2,fma"))) static inline __m256 vtanh8(__m256 z)
{
    __m256 one = _mm256_set1_ps(1.0f);
    __m256 t = _mm256_fnmadd_ps(_mm256_set1_ps(2.0f), vrcp8(_mm256_add_ps(vexp8(_mm256_add_ps(z, z)), one)), one);
    __m256 z2 = _mm256_mul_ps(z, z);
    __m256 s = _mm256_fmadd_ps(z2, _mm256_set1_ps(2.0f / 15.0f), _mm256_set1_ps(-1.0f / 3.0f));
    s = _mm256_fmadd_ps(_mm256_mul_ps(s, z2), z, z);
    __m256 az = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), z);
    return _mm256_blendv_ps(t, s, _mm256_cmp_ps(az, _mm256_set1_ps(0.0625f), _CMP_LT_OQ));
}

/* Eight floats at p, or where tail only the lanes of k (masked: Zen 3's masked store is
 * microcoded, so whole vectors go without). */
#define AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) static inline
AVX2_INLINE __m256 ld8(const float *p, __m256i k, bool tail)
{
    return tail ? _mm256_maskload_ps(p, k) : _mm256_loadu_ps(p);
}

AVX2_INLINE void st8(float *p, __m256i k, bool tail, __m256 v)
{
    if (tail) _mm256_maskstore_ps(p, k, v);
    else _mm256_storeu_ps(p, v);
}

/* Columns [j, j + 8) of the forward row: x, a, cp, cn and hn at the row's start (fwd_row_avx2). */
AVX2_INLINE void fwd8(const float *x, float *a, const float *cp, float *cn, float *hn, int64_t H, int64_t j,
                      bool flag, __m256i k, bool tail)
{
    __m256 z[4];
    for (int q = 0; q < 4; q++) {
        z[q] = ld8(x + q * H + j, k, tail);
        if (flag) z[q] = _mm256_add_ps(z[q], ld8(a + q * H + j, k, tail));
    }
    __m256 i = vsigmoid8(z[0]), f = vsigmoid8(z[1]), g = vtanh8(z[2]), o = vsigmoid8(z[3]);
    __m256 c = _mm256_fmadd_ps(f, ld8(cp + j, k, tail), _mm256_mul_ps(i, g));
    st8(a + j, k, tail, i);
    st8(a + H + j, k, tail, f);
    st8(a + 2 * H + j, k, tail, g);
    st8(a + 3 * H + j, k, tail, o);
    st8(cn + j, k, tail, c);
    st8(hn + j, k, tail, _mm256_mul_ps(o, vtanh8(c)));
}

__attribute__((target("avx2,fma"))) static void fwd_row_avx2(const cell_ptrs *p, int64_t b)
{
    int64_t H = p->H, BH = p->B * H, j = 0;
    const float *x = (const float *)p->xp + b * 4 * H;
    float *a = (float *)p->act + b * 4 * H, *Y = (float *)p->y;
    const float *cp = Y + (p->T + 1) * BH + p->t * BH + b * H;
    float *hn = Y + (p->t + 1) * BH + b * H, *cn = Y + (p->T + 1 + p->t + 1) * BH + b * H;
    __m256i all = _mm256_set1_epi32(-1);
    for (; j + 8 <= H; j += 8) fwd8(x, a, cp, cn, hn, H, j, p->flag, all, false);
    if (j < H) fwd8(x, a, cp, cn, hn, H, j, p->flag, nb_lanes256(H - j), true);
}

/* Columns [j, j + 8) of the backward row (bwd_row_avx2's pointers). */
AVX2_INLINE void bwd8(const float *a, const float *c, const float *cp, const float *gh, const float *gc, float *d,
                      float *dh, float *dc, int64_t H, int64_t j, __m256i k, bool tail)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 i = ld8(a + j, k, tail), f = ld8(a + H + j, k, tail);
    __m256 g = ld8(a + 2 * H + j, k, tail), o = ld8(a + 3 * H + j, k, tail);
    __m256 h = _mm256_add_ps(ld8(dh + j, k, tail), ld8(gh + j, k, tail));
    __m256 tc = vtanh8(ld8(c + j, k, tail));
    __m256 cc = _mm256_add_ps(ld8(dc + j, k, tail), ld8(gc + j, k, tail));
    cc = _mm256_fmadd_ps(_mm256_mul_ps(h, o), _mm256_fnmadd_ps(tc, tc, one), cc);
    st8(d + j, k, tail, _mm256_mul_ps(_mm256_mul_ps(cc, g), _mm256_mul_ps(i, _mm256_sub_ps(one, i))));
    st8(d + H + j, k, tail,
        _mm256_mul_ps(_mm256_mul_ps(cc, ld8(cp + j, k, tail)), _mm256_mul_ps(f, _mm256_sub_ps(one, f))));
    st8(d + 2 * H + j, k, tail, _mm256_mul_ps(_mm256_mul_ps(cc, i), _mm256_fnmadd_ps(g, g, one)));
    st8(d + 3 * H + j, k, tail, _mm256_mul_ps(_mm256_mul_ps(h, tc), _mm256_mul_ps(o, _mm256_sub_ps(one, o))));
    st8(dc + j, k, tail, _mm256_mul_ps(cc, f));
}

__attribute__((target("avx2,fma"))) static void bwd_row_avx2(const cell_ptrs *p, int64_t b)
{
    int64_t H = p->H, BH = p->B * H, S = (p->T + 1) * BH, j = 0;
    const float *a = (const float *)p->act + b * 4 * H, *Y = (const float *)p->y, *G = (const float *)p->g;
    const float *c = Y + S + (p->t + 1) * BH + b * H, *cp = Y + S + p->t * BH + b * H;
    const float *gh = G + (p->t + 1) * BH + b * H, *gc = G + S + (p->t + 1) * BH + b * H;
    float *d = (float *)p->out + b * 4 * H, *dh = (float *)p->dhc + b * H, *dc = dh + BH;
    __m256i all = _mm256_set1_epi32(-1);
    for (; j + 8 <= H; j += 8) bwd8(a, c, cp, gh, gc, d, dh, dc, H, j, all, false);
    if (j < H) bwd8(a, c, cp, gh, gc, d, dh, dc, H, j, nb_lanes256(H - j), true);
}

#endif

/* ---- the step's product ---------------------------------------------------------------------- */

/* Rows [b0, b1) of the step's product on the calling thread (inside the kernel's OpenMP region the
 * libraries run on one thread): forward act[t] = h_{t-1} W_hh^T ([rows, H] x [H, 4H]), backward
 * dhc[0] = dgates[t] W_hh ([rows, 4H] x [4H, H]). Nonzero when oneDNN's sgemm failed. */
static int step_product(const cell_ptrs *p, nb_dtype dt, bool fwd, int64_t b0, int64_t b1, bool tuned)
{
    int64_t H = p->H, m = b1 - b0, n = fwd ? 4 * H : H, k = fwd ? H : 4 * H;
    size_t es = nb_dtype_size(dt);
    /* forward: h_{t-1} is Y[0, t]; backward: dgates[t] is p->out, dh is dhc[0] */
    const char *x = fwd ? p->y + (size_t)((p->t * p->B + b0) * H) * es : p->out + (size_t)(b0 * k) * es;
    char *c = fwd ? p->act + (size_t)(b0 * n) * es : p->dhc + (size_t)(b0 * n) * es;
    if (dt == NB_FLOAT64) {
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0, (const double *)x,
                    (int)k, (const double *)p->w, (int)n, 0.0, (double *)c, (int)n);
        return 0;
    }
    /* the same W_hh in every step: on AMX, packed once for the run (the tuner's AMX way packs B
     * at each call, which cost as much as the step's products) */
    if (p->wp && nb_cpu_gemm_amx_packed('N', m, 1.0f, (const float *)x, k, p->wp, (float *)c, n, NULL)) return 0;
    if (p->wv) {
        nb_cpu_gemm_avx2_packed(m, (const float *)x, k, p->wv, (float *)c, n);
        return 0;
    }
    if (tuned) /* outside a region: the gemm kernel's way for the shape, on all the threads */
        return nb_cpu_sgemm('N', 'N', m, n, k, 1.0f, (const float *)x, k, (const float *)p->w, n, 0.0f, (float *)c,
                            n) != dnnl_success;
    return dnnl_sgemm('N', 'N', m, n, k, 1.0f, (const float *)x, k, (const float *)p->w, n, 0.0f, (float *)c, n) !=
           dnnl_success;
}

/* ---- entry ----------------------------------------------------------------------------------- */

typedef void (*row_fn)(const cell_ptrs *p, int64_t b);

static row_fn pick(bool fwd, nb_dtype dt)
{
    if (dt == NB_FLOAT64) return fwd ? fwd_row_f64 : bwd_row_f64;
#if defined(__x86_64__)
    if (nb_cpu_avx512()) return fwd ? fwd_row_avx512 : bwd_row_avx512;
    if (nb_cpu_avx2_fma()) return fwd ? fwd_row_avx2 : bwd_row_avx2;
#endif
    return fwd ? fwd_row_f32 : bwd_row_f32;
}

static nb_status check(nb_op op, const nb_kargs *a, int64_t *T, int64_t *B, int64_t *H)
{
    const nb_tensor *y = op == NB_OP_LSTM_CELL ? a->out : a->in[1];
    const nb_tensor *act = op == NB_OP_LSTM_CELL ? a->out2 : a->in[2];
    const nb_tensor *ops[5] = {a->out, a->out2, a->in[0], a->in[1], a->in[2]};
    int n = op == NB_OP_LSTM_CELL ? 3 : 5;
    if (!y || !act || y->ndim != 4 || act->ndim != 3)
        return nb__err(NB_ERR_INTERNAL, "%s: bad operands", nb__op_name(op));
    *T = act->shape[0], *B = act->shape[1], *H = y->shape[3];
    if (a->out->dtype != NB_FLOAT32 && a->out->dtype != NB_FLOAT64)
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported (float32/float64 only)", nb__op_name(op),
                       nb_dtype_name(a->out->dtype));
    for (int k = 0; k < n; k++)
        if (!ops[k] || ops[k]->dtype != a->out->dtype || !nb__is_contiguous(ops[k]))
            return nb__err(NB_ERR_INTERNAL, "%s: operand %d missing, of another dtype or not contiguous",
                           nb__op_name(op), k);
    int64_t last = a->i0 + (op == NB_OP_LSTM_CELL ? 1 : -1) * (a->i1 > 1 ? a->i1 - 1 : 0);
    if (a->i0 < 0 || a->i0 >= *T || last < 0 || last >= *T || y->shape[1] != *T + 1 || act->shape[2] != 4 * *H)
        return nb__err(NB_ERR_INTERNAL, "%s: steps %lld to %lld or shapes out of range", nb__op_name(op),
                       (long long)a->i0, (long long)last);
    return NB_OK;
}

/* Step k of a's run, t = i0 + k forward and i0 - k backward: its pointers (cell_ptrs.t and the
 * step's rows of act, xp and dgates), and in *product whether it makes the step's product. Forward,
 * flag (the recurrent product) holds for every step but the run's first, which takes the caller's;
 * backward, the product follows every step but one at t = 0, which makes it only with flag. */
static cell_ptrs run_step(const cell_ptrs *base, const nb_kargs *a, bool fwd, int64_t k, size_t es, bool *product)
{
    cell_ptrs p = *base;
    p.t = fwd ? a->i0 + k : a->i0 - k;
    p.flag = !fwd || k > 0 || a->flag;
    *product = p.w && (fwd ? p.flag : p.t > 0 || a->flag);
    int64_t row = p.t * p.B * 4 * p.H * (int64_t)es; /* byte offset of step t in act / xp / dgates */
    p.act += row;
    if (p.xp) p.xp += row;
    if (p.out) p.out += row;
    return p;
}

/* sums += the n columns' sums over rows of d (float32: summed in f first, which is left zero) */
NB_VEC_CLONES static void sum_rows_f32(const float *d, int64_t rows, int64_t n, float *f, double *sums)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *dr = d + r * n;
#pragma omp simd
        for (int64_t j = 0; j < n; j++) f[j] += dr[j];
    }
#pragma omp simd
    for (int64_t j = 0; j < n; j++) sums[j] += f[j], f[j] = 0;
}

static void sum_rows_f64(const double *d, int64_t rows, int64_t n, double *sums)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) sums[j] += d[r * n + j];
}

/* Rows [b0, b1) through every step of a's run: each step's product (tuned: outside a region, on
 * the gemm kernel's way; else on the calling thread) and cells, and (backward, sums not NULL) the
 * step's dgates rows added into sums [4H] (f: float32's scratch, zero). Nonzero when a product
 * failed. */
static int run_rows(const cell_ptrs *base, const nb_kargs *a, bool fwd, row_fn fn, int64_t b0, int64_t b1,
                    bool tuned, double *sums, float *f)
{
    nb_dtype dt = a->out->dtype;
    size_t es = nb_dtype_size(dt);
    int64_t steps = a->i1 > 1 ? a->i1 : 1, n = 4 * base->H;
    for (int64_t k = 0; b1 > b0 && k < steps; k++) {
        bool product;
        cell_ptrs p = run_step(base, a, fwd, k, es, &product);
        if (fwd && product && step_product(&p, dt, true, b0, b1, tuned)) return 1;
        for (int64_t b = b0; b < b1; b++) fn(&p, b);
        if (sums && dt == NB_FLOAT32) sum_rows_f32((const float *)p.out + b0 * n, b1 - b0, n, f, sums);
        else if (sums) sum_rows_f64((const double *)p.out + b0 * n, b1 - b0, n, sums);
        if (!fwd && product && step_product(&p, dt, false, b0, b1, tuned)) return 1;
    }
    return 0;
}

nb_status nb_cpu_k_rnn(nb_op op, const nb_kargs *a)
{
    if (op != NB_OP_LSTM_CELL && op != NB_OP_LSTM_CELL_BACKWARD)
        return nb__err(NB_ERR_INTERNAL, "rnn kernel: unexpected op %s", nb__op_name(op));
    int64_t T = 0, B = 0, H = 0;
    NB_TRY(check(op, a, &T, &B, &H));
    bool fwd = op == NB_OP_LSTM_CELL;
    nb_dtype dt = a->out->dtype;
    cell_ptrs base = {.B = B, .H = H, .T = T};
    if (fwd) {
        base.xp = (const char *)nb__data(a->in[0]);
        base.act = nb__data(a->out2);
        base.y = nb__data(a->out);
    } else {
        base.g = nb__data(a->in[0]);
        base.y = nb__data(a->in[1]);
        base.act = nb__data(a->in[2]);
        base.out = nb__data(a->out);
        base.dhc = nb__data(a->out2);
    }
    const nb_tensor *w = a->in[fwd ? 1 : 3];
    if (w) {
        int64_t want[2] = {fwd ? H : 4 * H, fwd ? 4 * H : H};
        if (w->ndim != 2 || w->shape[0] != want[0] || w->shape[1] != want[1] || w->dtype != dt ||
            !nb__is_contiguous(w))
            return nb__err(NB_ERR_INTERNAL, "%s: the product's weight is not a contiguous [%lld, %lld] %s",
                           nb__op_name(op), (long long)want[0], (long long)want[1], nb_dtype_name(dt));
        base.w = nb__data(w);
    } else if (a->i1 > 1) {
        return nb__err(NB_ERR_INTERNAL, "%s: a run of %lld steps without the product's weight", nb__op_name(op),
                       (long long)a->i1);
    }
    nb_tensor *bsum = fwd ? NULL : a->out3;
    if (bsum && (bsum->dtype != dt || nb_tensor_numel(bsum) != 4 * H || !nb__is_contiguous(bsum)))
        return nb__err(NB_ERR_INTERNAL, "%s: the column sums are not a contiguous %lld-value %s tensor",
                       nb__op_name(op), (long long)(4 * H), nb_dtype_name(dt));
    row_fn fn = pick(fwd, dt);
    /* Steps from 2^13 cells per thread split across the threads. The step's GEMM just before
     * ran on all of them, so its output lies in several cores' caches: run on one thread, the
     * DLBench LSTM's step (B * H = 32768) took 0.10 ms alone but 0.16 ms (backward 0.15) with 2
     * threads set; split, 0.05-0.12 ms (backward 0.07-0.08), and the whole training step
     * 0.507-0.539 -> 0.481-0.504 s (`nabla bench --model lstm --threads 2`, Zen 4, two cores). */
    int nt = nb_cpu_threads_for(B * H, 1 << 13), failed = 0;
    nb_cpu_colsums cs = {0};
    if (bsum) NB_TRY(nb_cpu_colsums_init(&cs, nt, 4 * H, dt == NB_FLOAT32, nb__op_name(op)));
    /* W_hh packed once for a run's products, [wk, wn] (NULL: the sgemm at each step, as before) */
    bool run = dt == NB_FLOAT32 && base.w && a->i1 > 1;
    int64_t wk = fwd ? H : 4 * H, wn = fwd ? 4 * H : H;
    const float *w32 = (const float *)base.w;
    nb_cpu_amx_b *wp = run ? nb_cpu_amx_pack_b('N', wn, wk, w32, wn) : NULL; /* no AMX, B not finite, memory */
    nb_cpu_avx2_b *wv = run && !wp && !nb_cpu_avx512() ? nb_cpu_avx2_pack_b(wk, wn, w32, wn) : NULL;
    base.wp = wp, base.wv = wv;
    if (nt == 1) { /* no region to share: each product as the BMM kernel would make it */
        failed = run_rows(&base, a, fwd, fn, 0, B, true, cs.d, cs.f);
    } else {
#pragma omp parallel num_threads(nt) reduction(| : failed)
        {
            int64_t b0, b1;
            nb_cpu_thread_share(B, &b0, &b1);
            size_t id = (size_t)nb_cpu_thread_num();
            failed |= run_rows(&base, a, fwd, fn, b0, b1, false, cs.d ? cs.d + id * (size_t)(4 * H) : NULL,
                               cs.f ? cs.f + id * (size_t)(4 * H) : NULL);
        }
    }
    nb_cpu_amx_b_free(wp);
    nb_cpu_avx2_b_free(wv);
    if (bsum) nb_cpu_colsums_finish(&cs, nb__data(bsum), dt == NB_FLOAT32);
    if (failed) return nb__err(NB_ERR_INTERNAL, "%s: the step's product failed in oneDNN's sgemm", nb__op_name(op));
    return NB_OK;
}
