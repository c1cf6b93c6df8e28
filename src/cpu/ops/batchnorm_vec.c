/* The batchnorm family's AVX-512 loops for channels-last float32 (src/cpu/batchnorm_impl.h): the
 * per-channel sums and the second passes of src/cpu/ops/batchnorm.c's channels-last path, on
 * [M, C] rows with C a multiple of 16. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "cpu/batchnorm_impl.h"
#include "cpu/cpu_impl.h"

/* batchnorm.c's channels-last loops run at 8-20 GB/s on ResNet-50's wide layers (64-2048
 * channels), where reading alone runs at 25-33 GB/s: they read rows four at a time (four streams,
 * which this machine's prefetchers follow badly) and load and store the double sums every four
 * rows. These read every tensor row after row, the rows' sums in float over CL_VEC_ROWS rows at a
 * time, added into the double sums of the block after each: for 16, 32, 64 or 128 channels they
 * stay in registers, else in a float row on the stack (loaded and stored each row, which still
 * beat splitting the rows between passes over channel groups: 17-20 against 10-12 GB/s at 256
 * channels). Every input is prefetched CL_VEC_AHEAD bytes ahead, and outputs of CL_VEC_STREAM
 * bytes or more are written with streaming stores (no line is read for ownership first;
 * ResNet-50's batch norms took 1.04 s over 3 steps against 1.11-1.21 s at a 16 MB threshold and
 * 1.13-1.32 s without). The plain, ReLU and residual variants share one body, as batchnorm.c's do,
 * so the fused ops give the plain ones' results bit for bit; the sums differ from batchnorm.c's
 * loops by the float partial sums (relative 1e-7 to 1e-5 on ResNet-50's shapes). */

#if defined(__x86_64__)
#define CL_VEC 1
#include <immintrin.h>

#define V512 __attribute__((target("avx512f")))
#define VINLINE V512 __attribute__((always_inline)) static inline
#define CL_VEC_ROWS 16
#define CL_VEC_MAX 4096
#define CL_VEC_AHEAD 2048
#define CL_VEC_STREAM ((int64_t)4 << 20)

/* d[0..16) += v, in double. */
VINLINE void add_to_double(double *d, __m512 v)
{
    __m256 lo = _mm512_castps512_ps256(v);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    _mm512_storeu_pd(d, _mm512_add_pd(_mm512_loadu_pd(d), _mm512_cvtps_pd(lo)));
    _mm512_storeu_pd(d + 8, _mm512_add_pd(_mm512_loadu_pd(d + 8), _mm512_cvtps_pd(hi)));
}

/* The fused ReLU's mask at element e (channel j) of x: the forward's value, recomputed as the
 * scalar loops do (product, then sum: no FMA), > 0. */
VINLINE __mmask16 relu_keep(int mode, const cl_vec_in *in, int64_t e, int64_t j)
{
    __m512 t = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(in->x + e), _mm512_loadu_ps(in->fa + j)),
                             _mm512_loadu_ps(in->fc + j));
    if (mode == SUMS_RES) t = _mm512_add_ps(t, _mm512_loadu_ps(in->res + e));
    return _mm512_cmp_ps_mask(t, _mm512_setzero_ps(), _CMP_GT_OQ);
}

/* v and w of the 16 elements at e (channel j). */
VINLINE void sum_terms(int mode, const cl_vec_in *in, int64_t e, int64_t j, __m512 *v, __m512 *w)
{
    __m512 d = _mm512_sub_ps(_mm512_loadu_ps(in->x + e), _mm512_loadu_ps(in->ref + j));
    *w = d;
    if (mode == SUMS_DEV) {
        *v = d;
        return;
    }
    __m512 g = _mm512_loadu_ps(in->g + e);
    if (mode != SUMS_GRAD) g = _mm512_maskz_mov_ps(relu_keep(mode, in, e, j), g);
    if (mode == SUMS_RES) _mm512_storeu_ps(in->gr + e, g);
    *v = g;
}

/* Prefetches the inputs CL_VEC_AHEAD bytes ahead of the row at element o, a line each 16 floats. */
VINLINE void prefetch_row(int mode, const cl_vec_in *in, int64_t o, int64_t c)
{
    for (int64_t j = 0; j < c; j += 16) {
        _mm_prefetch((const char *)(in->x + o + j) + CL_VEC_AHEAD, _MM_HINT_T0);
        if (mode != SUMS_DEV) _mm_prefetch((const char *)(in->g + o + j) + CL_VEC_AHEAD, _MM_HINT_T0);
        if (mode == SUMS_RES) _mm_prefetch((const char *)(in->res + o + j) + CL_VEC_AHEAD, _MM_HINT_T0);
    }
}

/* s[j] += sum v, q[j] += sum v w over rows [r0, r1) (elements r c + j), C = 16 NCH: the sums in
 * registers. */
VINLINE void sums_reg(int mode, int nch, const cl_vec_in *in, int64_t r0, int64_t r1, int64_t c, double *s,
                      double *q)
{
    for (int64_t b = r0; b < r1; b += CL_VEC_ROWS) {
        int64_t e = b + CL_VEC_ROWS < r1 ? b + CL_VEC_ROWS : r1;
        __m512 vs[8], vq[8];
        for (int k = 0; k < nch; k++) vs[k] = vq[k] = _mm512_setzero_ps();
        for (int64_t r = b; r < e; r++) {
            prefetch_row(mode, in, r * c, c);
            for (int k = 0; k < nch; k++) {
                __m512 v, w;
                sum_terms(mode, in, r * c + 16 * k, 16 * k, &v, &w);
                vs[k] = _mm512_add_ps(vs[k], v);
                vq[k] = _mm512_fmadd_ps(v, w, vq[k]);
            }
        }
        for (int k = 0; k < nch; k++) add_to_double(s + 16 * k, vs[k]), add_to_double(q + 16 * k, vq[k]);
    }
}

/* As sums_reg, for any C <= CL_VEC_MAX: the float sums in memory. */
VINLINE void sums_mem(int mode, const cl_vec_in *in, int64_t r0, int64_t r1, int64_t c, double *s, double *q)
{
    float fs[CL_VEC_MAX] __attribute__((aligned(64))), fq[CL_VEC_MAX] __attribute__((aligned(64)));
    for (int64_t b = r0; b < r1; b += CL_VEC_ROWS) {
        int64_t e = b + CL_VEC_ROWS < r1 ? b + CL_VEC_ROWS : r1;
        memset(fs, 0, (size_t)c * sizeof(float));
        memset(fq, 0, (size_t)c * sizeof(float));
        for (int64_t r = b; r < e; r++) {
            prefetch_row(mode, in, r * c, c);
            for (int64_t j = 0; j < c; j += 16) {
                __m512 v, w;
                sum_terms(mode, in, r * c + j, j, &v, &w);
                _mm512_store_ps(fs + j, _mm512_add_ps(_mm512_load_ps(fs + j), v));
                _mm512_store_ps(fq + j, _mm512_fmadd_ps(v, w, _mm512_load_ps(fq + j)));
            }
        }
        for (int64_t j = 0; j < c; j += 16)
            add_to_double(s + j, _mm512_load_ps(fs + j)), add_to_double(q + j, _mm512_load_ps(fq + j));
    }
}

#define SUMS_MODE(MODE, NAME)                                                                      \
    V512 static void NAME(const cl_vec_in *in, int64_t r0, int64_t r1, int64_t c, double *s, double *q) \
    {                                                                                              \
        switch (c) {                                                                               \
        case 16: sums_reg(MODE, 1, in, r0, r1, c, s, q); break;                                    \
        case 32: sums_reg(MODE, 2, in, r0, r1, c, s, q); break;                                    \
        case 64: sums_reg(MODE, 4, in, r0, r1, c, s, q); break;                                    \
        case 128: sums_reg(MODE, 8, in, r0, r1, c, s, q); break;                                   \
        default: sums_mem(MODE, in, r0, r1, c, s, q);                                              \
        }                                                                                          \
    }
SUMS_MODE(SUMS_DEV, vec_sums_dev)
SUMS_MODE(SUMS_GRAD, vec_sums_grad)
SUMS_MODE(SUMS_RELU, vec_sums_relu)
SUMS_MODE(SUMS_RES, vec_sums_res)

/* 16 results to y + e: a streaming store when stream (y + e then 64-byte aligned). */
VINLINE void put(float *y, int64_t e, __m512 v, bool stream)
{
    if (stream) _mm512_stream_ps(y + e, v);
    else _mm512_storeu_ps(y + e, v);
}

/* The forward's second pass over rows [r0, r1): y = OUT(ADD(x a + k)) as AFFINE_CL (mode
 * SUMS_DEV plain, SUMS_RELU with the ReLU, SUMS_RES with the residual and the ReLU; max(0, v)
 * keeps a NaN as RELU does). */
#define AFFINE_MODE(MODE, NAME)                                                                    \
    V512 static void NAME(const float *x, const float *res, int64_t r0, int64_t r1, int64_t c, const float *a, \
                          const float *k, float *y, bool stream)                                   \
    {                                                                                              \
        (void)res;                                                                                 \
        const bool add = MODE == SUMS_RES || MODE == AFFINE_ADD, relu = MODE == SUMS_RELU || MODE == SUMS_RES; \
        for (int64_t r = r0; r < r1; r++)                                                          \
            for (int64_t j = 0; j < c; j += 16) {                                                  \
                int64_t e = r * c + j;                                                             \
                _mm_prefetch((const char *)(x + e) + CL_VEC_AHEAD, _MM_HINT_T0);                   \
                if (add) _mm_prefetch((const char *)(res + e) + CL_VEC_AHEAD, _MM_HINT_T0);        \
                __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(x + e), _mm512_loadu_ps(a + j)), \
                                         _mm512_loadu_ps(k + j));                                  \
                if (add) v = _mm512_add_ps(v, _mm512_loadu_ps(res + e));                           \
                if (relu) v = _mm512_max_ps(_mm512_setzero_ps(), v);                               \
                put(y, e, v, stream);                                                              \
            }                                                                                      \
    }
AFFINE_MODE(SUMS_DEV, vec_affine)
AFFINE_MODE(SUMS_RELU, vec_affine_relu)
AFFINE_MODE(SUMS_RES, vec_affine_res)
AFFINE_MODE(AFFINE_ADD, vec_affine_add)

/* The backward's second pass: gx = (a g' + b x) + k as AFFINE2_CL, g' = g (SUMS_GRAD) or g where
 * the fused ReLU's value was > 0 (SUMS_RELU). */
#define AFFINE2_MODE(MODE, NAME)                                                                   \
    V512 static void NAME(const cl_vec_in *in, int64_t r0, int64_t r1, int64_t c, const float *a, const float *b, \
                          const float *k, float *y, bool stream)                                   \
    {                                                                                              \
        for (int64_t r = r0; r < r1; r++)                                                          \
            for (int64_t j = 0; j < c; j += 16) {                                                  \
                int64_t e = r * c + j;                                                             \
                _mm_prefetch((const char *)(in->x + e) + CL_VEC_AHEAD, _MM_HINT_T0);               \
                _mm_prefetch((const char *)(in->g + e) + CL_VEC_AHEAD, _MM_HINT_T0);               \
                __m512 g = _mm512_loadu_ps(in->g + e), xv = _mm512_loadu_ps(in->x + e);            \
                if (MODE == SUMS_RELU) g = _mm512_maskz_mov_ps(relu_keep(MODE, in, e, j), g);      \
                __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(a + j), g),                 \
                                         _mm512_mul_ps(_mm512_loadu_ps(b + j), xv));               \
                put(y, e, _mm512_add_ps(v, _mm512_loadu_ps(k + j)), stream);                       \
            }                                                                                      \
    }
AFFINE2_MODE(SUMS_GRAD, vec_affine2)
AFFINE2_MODE(SUMS_RELU, vec_affine2_relu)

#endif

/* Whether the vectorised loops take a channels-last call of C channels of tsize bytes. */
bool nb__bn_cl_vec(int64_t c, size_t tsize)
{
#ifdef CL_VEC
    return tsize == sizeof(float) && c % 16 == 0 && c <= CL_VEC_MAX && nb_cpu_avx512();
#else
    (void)c, (void)tsize;
    return false;
#endif
}

/* Whether an output of M x C floats at y is written with streaming stores. */
bool nb__bn_cl_stream(const void *y, int64_t m, int64_t c)
{
#ifdef CL_VEC
    return m * c * (int64_t)sizeof(float) >= CL_VEC_STREAM && (uintptr_t)y % 64 == 0;
#else
    (void)y, (void)m, (void)c;
    return false;
#endif
}

/* The passes over rows [r0, r1), when vec (cl_vec) says the vectorised loops take the call;
 * each returns whether it ran. The sums add into s and q; the forward's second pass writes y =
 * OUT(ADD(x a + k)) from x (and res); the backward's, gx = (a g' + b x) + k from in. */
bool nb__bn_cl_vec_sums(bool vec, int mode, const cl_vec_in *in, int64_t r0, int64_t r1, int64_t c, double *s,
                         double *q)
{
#ifdef CL_VEC
    if (!vec) return false;
    (mode == SUMS_DEV ? vec_sums_dev : mode == SUMS_GRAD ? vec_sums_grad : mode == SUMS_RELU ? vec_sums_relu
                                                                                              : vec_sums_res)(
        in, r0, r1, c, s, q);
    return true;
#else
    (void)vec, (void)mode, (void)in, (void)r0, (void)r1, (void)c, (void)s, (void)q;
    return false;
#endif
}

bool nb__bn_cl_vec_affine(bool vec, int mode, const void *x, const void *res, int64_t r0, int64_t r1, int64_t c,
                           const void *a, const void *k, void *y, bool stream)
{
#ifdef CL_VEC
    if (!vec) return false;
    (mode == SUMS_DEV    ? vec_affine
     : mode == SUMS_RELU ? vec_affine_relu
     : mode == SUMS_RES  ? vec_affine_res
                         : vec_affine_add)(x, res, r0, r1, c, a, k, y, stream);
    if (stream) _mm_sfence();
    return true;
#else
    (void)vec, (void)mode, (void)x, (void)res, (void)r0, (void)r1, (void)c, (void)a, (void)k, (void)y, (void)stream;
    return false;
#endif
}

bool nb__bn_cl_vec_affine2(bool vec, int mode, const cl_vec_in *in, int64_t r0, int64_t r1, int64_t c,
                            const void *a, const void *b, const void *k, void *y, bool stream)
{
#ifdef CL_VEC
    if (!vec) return false;
    (mode == SUMS_RELU ? vec_affine2_relu : vec_affine2)(in, r0, r1, c, a, b, k, y, stream);
    if (stream) _mm_sfence();
    return true;
#else
    (void)vec, (void)mode, (void)in, (void)r0, (void)r1, (void)c, (void)a, (void)b, (void)k, (void)y, (void)stream;
    return false;
#endif
}
