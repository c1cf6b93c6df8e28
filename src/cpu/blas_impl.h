/* Internal: OpenBLAS glue (which kernels OpenBLAS runs) and the gemm family's reference path. */
#ifndef NB_BLAS_IMPL_H
#define NB_BLAS_IMPL_H

#include "cpu/cpu_impl.h"

/* The name of the kernel set OpenBLAS runs ("SkylakeX", "Haswell"...; "unknown" when OpenBLAS
 * cannot say). */
const char *nb_cpu_blas_corename(void);

/* Picks OpenBLAS's kernels once (see blas.c); runs at load time from a constructor. The gemm
 * kernel calls it too: that reference is what links blas.c, and its constructor, into programs
 * that link libnabla.a (a static link takes only the objects something refers to). */
void nb_cpu_blas_init(void);

/* Makes OpenBLAS (a DYNAMIC_ARCH build) switch to the kernels of `coretype`, a name its
 * OPENBLAS_CORETYPE accepts. Not thread-safe: no BLAS call may run meanwhile. Fails with
 * NB_ERR_UNSUPPORTED when OpenBLAS cannot switch or did not take the name. nabla calls it once,
 * at load time, with "SkylakeX" on CPUs with AVX-512 that OpenBLAS 0.3.21 does not recognise
 * (see blas.c); tests call it to check both kernel sets. */
nb_status nb_cpu_blas_select_core(const char *coretype);

/* The gemm family's plain reference (strided loops, float accumulated in double): the same
 * contract as nb_cpu_k_gemm for NB_OP_BMM. Tests check the BLAS path against it. */
nb_status nb_cpu_gemm_reference(const nb_kargs *a);

/* A float32 product for kernels that call sgemm themselves (conv.c's 1x1 and im2col products):
 * C = alpha op(A) op(B) + beta C, row-major, ta/tb 'N' or 'T', on oneDNN's sgemm, or, where the
 * gemm kernel chooses libraries by timing (CPUs without AVX-512), on the one timed faster for the
 * shape. Returns a dnnl_status_t (dnnl_success when OpenBLAS ran). */
int nb_cpu_sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                 const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* How many product shapes the gemm kernel has so far given to a library by timing both (see
 * gemm.c, "choosing the library by timing"): tests check that the timed path ran. */
int nb_cpu_gemm_tuned_shapes(void);
/* How many calls so far ran a step of the tuner's schedule. */
unsigned long long nb_cpu_gemm_tuning_steps(void);

/* nabla's own float32 NN product for few rows (src/cpu/ops/gemm_rows.c): C = alpha A B + beta C,
 * row-major with leading dimensions, M from 1 to GEMM_ROWS_MAX_M; beta 0 never reads C. False
 * (nothing written) where it does not run: no AVX-512 kernels (nb_cpu_avx512()) or M, N out of
 * range. */
#define GEMM_ROWS_MAX_M 64
bool nb_cpu_gemm_rows(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                      int64_t ldb, float beta, float *c, int64_t ldc);
/* gemm_thin.c's float32 TN product with a short inner dimension (a weight gradient over a small
 * batch): C[M, N] = alpha A^T B + beta C, A [K, M] and B [K, N] row-major with leading dimensions,
 * K up to GEMM_THIN_MAX_K; beta 0 never reads C. False (nothing written) where it does not run. */
#define GEMM_THIN_MAX_K 64
bool nb_cpu_gemm_thin_k(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                        int64_t ldb, float beta, float *c, int64_t ldc);
/* gemm_dot.c's float32 NT product for few rows (a linear layer's forward on a small batch):
 * C[M, N] = alpha A[M, K] B[N, K]^T + beta C, row-major with leading dimensions, M up to
 * nb_cpu_gemm_dot_max_m(): GEMM_DOT_MAX_M with AVX-512, GEMM_DOT_AVX2_MAX_M with AVX2 and FMA
 * only, 0 (it never runs) without either; beta 0 never reads C. False (nothing written) where it
 * does not run. */
#define GEMM_DOT_MAX_M 32
#define GEMM_DOT_AVX2_MAX_M 64
int nb_cpu_gemm_dot_max_m(void);
/* gemm_dot_avx2.c's kernel for nb_cpu_gemm_dot where AVX2 and FMA are and AVX-512 is not: M from
 * 1 to GEMM_DOT_AVX2_MAX_M, N at least 1 (checked by the caller). False (nothing written) where
 * its packed copy of A cannot be had. */
bool nb__cpu_gemm_dot_avx2(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                           int64_t ldb, float beta, float *c, int64_t ldc);
bool nb_cpu_gemm_dot(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                     int64_t ldb, float beta, float *c, int64_t ldc);

/* gemm_amx.c: whether nabla's AMX product runs here (the CPU has AMX-BF16 and AVX512-BF16, Linux
 * grants the tiles, NABLA_AMX is not 0); tests turn it off and on again with set_enabled. */
bool nb_cpu_amx(void);
void nb_cpu_amx_set_enabled(bool on);
/* gemm_amx.c's float32 product on AMX tiles, to float32's accuracy (bfloat16 pieces, six
 * products): C = alpha op(A) op(B) (+ bias, a row of N added to every row; NULL: none), row-major,
 * ta/tb 'N' or 'T'; C is never read. False where it did not run (no AMX, no memory for its packed
 * blocks: nothing written) or where an input held an infinity or a NaN (C then undefined): the
 * caller runs the product another way. */
bool nb_cpu_gemm_amx(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                     const float *b, int64_t ldb, float *c, int64_t ldc, const float *bias);
/* B packed once for many AMX products with it (the LSTM's W_hh across a run's steps): op(B) [k, n].
 * NULL where the product does not run here, memory is short or B holds an infinity or a NaN. */
typedef struct nb_cpu_amx_b nb_cpu_amx_b;
nb_cpu_amx_b *nb_cpu_amx_pack_b(char tb, int64_t n, int64_t k, const float *b, int64_t ldb);
void nb_cpu_amx_b_free(nb_cpu_amx_b *p);
/* C [m, n] = alpha op(A) B (+ bias), as nb_cpu_gemm_amx, with B packed; inside an OpenMP region
 * on the calling thread alone. false: not run (as nb_cpu_gemm_amx; C may have been written). */
bool nb_cpu_gemm_amx_packed(char ta, int64_t m, float alpha, const float *a, int64_t lda, const nb_cpu_amx_b *b,
                            float *c, int64_t ldc, const float *bias);

/* The threads for one of nabla's own product kernels (gemm_rows.c, gemm_thin.c, gemm_dot.c,
 * gemm_dot_avx2.c, gemm_avx2.c): one per 2^18 multiply-adds of m n k (k 0 counted as 1), at
 * least 1 and at most `units`, the pieces the kernel splits among them. */
static inline int nb_cpu_gemm_threads(int64_t m, int64_t n, int64_t k, int64_t units)
{
    int nt = nb_cpu_threads_for(m * n * (k ? k : 1), 1 << 18);
    return nt > units ? (units > 1 ? (int)units : 1) : nt;
}

/* Thread t of nt's part of `units` pieces of `size` each, whole pieces as even as they go:
 * [*lo, *hi), *hi at most end. */
static inline void nb_cpu_gemm_share(int64_t units, int64_t size, int64_t end, int t, int nt, int64_t *lo,
                                     int64_t *hi)
{
    *lo = units * t / nt * size;
    *hi = units * (t + 1) / nt * size;
    if (*hi > end) *hi = end;
}

/* gemm_avx2.c: nabla's own float32 NN product on AVX2 and FMA with B [k, n] (row-major, ldb)
 * packed once, for many products with it on few rows (the LSTM's W_hh through a run of steps on
 * CPUs without AVX-512). The pack is NULL where the product does not run here (no AVX2 and FMA)
 * or memory is short. C [m, n] = A [m, k] B, A and C row-major with leading dimensions; C is
 * written, never read. On the calling thread (inside an OpenMP region, that thread alone). */
typedef struct nb_cpu_avx2_b nb_cpu_avx2_b;
nb_cpu_avx2_b *nb_cpu_avx2_pack_b(int64_t k, int64_t n, const float *b, int64_t ldb);
void nb_cpu_avx2_b_free(nb_cpu_avx2_b *p);
void nb_cpu_gemm_avx2_packed(int64_t m, const float *a, int64_t lda, const nb_cpu_avx2_b *b, float *c, int64_t ldc);
/* The same kernel as a product of its own, C = alpha A op(B) + beta C (tb 'N': B [k, n]; 'T': B
 * [n, k]; row-major, leading dimensions; beta 0 never reads C), B packed times alpha for the call
 * and the rows split across the threads: the gemm tuner's own way (gemm.c, way 5) for NN and NT
 * products of many rows and a short inner dimension on CPUs with AVX2 and FMA but not AVX-512
 * (nb_cpu_gemm_avx2_offered: M from GEMM_AVX2_MIN_M, N up to GEMM_AVX2_MAX_N, K up to
 * GEMM_AVX2_MAX_K), where the libraries spend much of such a product outside their inner loops
 * (ResNet-50's 1x1 layers at 56x56, a convolution's product over windows). False (nothing
 * written) where it does not run: no AVX2 and FMA, or no memory for B's panels. */
#define GEMM_AVX2_MIN_M 128
#define GEMM_AVX2_MAX_N 2048
#define GEMM_AVX2_MAX_K 1152
bool nb_cpu_gemm_avx2(char tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                      const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
bool nb_cpu_gemm_avx2_offered(int64_t m, int64_t n, int64_t k);

#endif
