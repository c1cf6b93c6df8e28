/* Kernels of the gemm family.
 *   BMM: out [B, M, N], in[0] [B, M, K], in[1] [B, K, N], each with any strides (a batch stride
 *        of 0 gives every batch the same matrix):
 *          out[b] = s1 * out[b] + s0 * in[0][b] @ in[1][b]
 *        s1 == 0 overwrites out: its old values (NaN included) are never read. out must not
 *        overlap the inputs. With in[2] (out's shape, any strides: a linear layer's bias as a
 *        view with strides 0 along B and M), s1 must be 0 and
 *          out[b] = s0 * in[0][b] @ in[1][b] + in[2][b]
 *        a float32 one of a single batch, a row (strides 0, 0, 1) into a row-major out, goes with
 *        the product (bias_fused); any other is first copied into out, the product then added.
 *        Integer dtypes need integral s0 and s1 and wrap around as C's unsigned arithmetic does
 *        (PyTorch's integer matmul gives the same bits).
 * float32/float64 go to OpenBLAS (float32 NN and TN products, and NT ones from 1024 rows, to
 * oneDNN's sgemm, see use_dnnl; NT ones of 16-64 rows to oneDNN's matmul primitive where it has
 * its AVX-512 kernels, see few_rows_matmul, elsewhere to oneDNN's sgemm as their transpose, see
 * small_m_nt; a large float32 product is timed on OpenBLAS, on oneDNN's sgemm, as its transpose
 * (on OpenBLAS, or small_m_nt's route for its shapes), on the matmul primitive and, NN of up to
 * 64 rows, TN with K up to 64 or NT of few rows, on nabla's own kernels (gemm_rows.c,
 * gemm_thin.c, gemm_dot.c), and the fastest kept, see tune_pick):
 * a matrix with a unit stride in one of its dims is passed as it is (the other stride as its
 * leading dimension, a transpose flag for column-major), any other is first copied to a
 * contiguous scratch. Integer dtypes take the reference loop, which float
 * tests check the BLAS path against (nb_cpu_gemm_reference). */
#include <cblas.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "cpu/blas_impl.h"
#include "cpu/dnnl_impl.h"
#include "cpu/tune_impl.h"

/* Below this many multiply-adds per matrix, batches run on separate threads with OpenBLAS on one
 * thread each (OpenBLAS runs single-threaded inside a parallel region); above, batches run one
 * after another on OpenBLAS's own threads. Measured with 2 threads (Zen 4, float32, best of 20):
 * 65 x 64^3: 205 vs 110 GFLOP/s; 8 x 256^3: 185 vs 98; 4 x 384^3: 150 vs 100; 4 x 512^3: 103 vs
 * 175 (there OpenBLAS's own split wins). */
#define BATCH_PARALLEL_MAX_MACS (1 << 26)

/* One operand: rows x cols per batch, strides in elements. */
typedef struct mat {
    char *p;
    int64_t sb, rows, cols, sr, sc;
} mat;

static mat mat_of(const nb_tensor *t)
{
    return (mat){nb__data(t), t->strides[0], t->shape[1], t->shape[2], t->strides[1], t->strides[2]};
}

static mat mat_t(mat m)
{
    return (mat){m.p, m.sb, m.cols, m.rows, m.sc, m.sr};
}

/* Whether m is row-major for BLAS (element (r, c) at r * ld + c); sets ld. */
static bool row_major(mat m, int *ld)
{
    if (m.cols > INT_MAX || m.rows > INT_MAX) return false;
    int64_t l = m.rows == 1 ? (m.cols > 1 ? m.cols : 1) : m.sr;
    if (!(m.cols == 1 || m.sc == 1) || l < 1 || l < m.cols || l > INT_MAX) return false;
    *ld = (int)l;
    return true;
}

/* How BLAS reads m: as it is (row-major) or transposed (its transpose is row-major). */
static bool blas_view(mat m, CBLAS_TRANSPOSE *tr, int *ld)
{
    if (row_major(m, ld)) {
        *tr = CblasNoTrans;
        return true;
    }
    if (row_major(mat_t(m), ld)) {
        *tr = CblasTrans;
        return true;
    }
    return false;
}

/* A contiguous copy [B', rows, cols] of t's matrices, B' = 1 when its batch stride is 0.
 * Caller-owned. */
static nb_tensor *pack(const nb_tensor *t, int64_t batch)
{
    int64_t shape[3] = {t->strides[0] == 0 ? 1 : batch, t->shape[1], t->shape[2]};
    nb_tensor *src = nb__tensor_alias(t, shape, t->strides, 3, t->offset);
    nb_tensor *dst = src ? nb__tensor_new(shape, 3, t->dtype, t->storage->device) : NULL;
    nb_kargs c = {.out = dst, .in = {src}};
    if (!dst || nb_cpu_k_copy(NB_OP_COPY, &c) != NB_OK) {
        nb__release(dst);
        dst = NULL;
    }
    nb__release(src);
    if (dst && shape[0] == 1) dst->strides[0] = 0;
    return dst;
}

typedef struct gemm_job {
    nb_dtype dt;
    CBLAS_TRANSPOSE ta, tb;
    int m, n, k, lda, ldb, ldc;
    mat a, b, c;
    double alpha, beta;
    const float *bias; /* float32, one batch: a row of n floats added to every row of C (beta 0) */
} gemm_job;

/* Whether a float32 product goes to oneDNN's sgemm rather than OpenBLAS's: when B is read as it
 * is (NN and TN, which a linear layer's backward gives: dX = dY @ W, dW = dY^T @ X), or as B^T
 * with A as it is (NT, a linear layer's forward x @ W^T) from 1024 rows of A, and the call is
 * not inside our own parallel loop over batches. Measured on Zen 4 (oneDNN 2.6, OpenBLAS 0.3.21
 * SkylakeX kernels; 2 threads, median of 15): NN 64x2048x26752 34 vs 52 ms, TN 26752x2048x64 36
 * vs 59 ms, NN 16x9216x4096 14 vs 18 ms, NN 4096x256x10000 102 vs 114 ms; at M = 1024 3-12%
 * faster; about even below 1 ms. NT: at M = 4096 (the LSTM's projections) 4096x10000x256 100 vs
 * 113 ms and 4096x1024x256 10.6 vs 12.8 ms (1 thread: 196 vs 214, 20.3 vs 23.3), at M = 1024
 * even to 4% faster; at small M oneDNN is up to 2.9x slower (16x4096x9216 59 vs 20 ms), so NT
 * below 1024 rows stays on OpenBLAS. Both follow BLAS's contract (beta 0: C is not read). */
static bool use_dnnl(const gemm_job *j, bool in_batch_loop)
{
    bool shape = j->tb == CblasNoTrans || (j->ta == CblasNoTrans && j->m >= 1024);
    return j->dt == NB_FLOAT32 && shape && !in_batch_loop && nb__dnnl_enabled();
}

/* Whether a float32 NT product with few rows of A (a linear layer's forward on a small batch:
 * 16-64 rows, N and K from about a thousand) goes as its transpose, C^T = B A^T, to oneDNN. Both
 * libraries' NT kernels run at 25-75% of the sgemm peak there, and this form at 75-92%: measured
 * on Zen 4 (oneDNN 2.6, OpenBLAS 0.3.21 SkylakeX kernels, median of 7, ms, 1 thread / 2 threads,
 * OpenBLAS NT -> this route with its transposes): FCN-S's 64x2048x26752 94 -> 76 / 48 -> 40,
 * 64x26752x2048 108 -> 87 / 56 -> 43, 64x2048x2048 9.0 -> 6.7 / 4.6 -> 3.6; AlexNet-S's
 * 16x4096x9216 48 -> 21 / 22 -> 11 and 16x4096x4096 18 -> 8.8 / 18 -> 7.9; 32x4096x4096 27 ->
 * 14 / 13 -> 6.9. At 128 rows OpenBLAS's NT is as fast or faster (128x4096x4096 at 2 threads 33
 * against 44), hence the bound of 64. */
static bool small_m_nt(const gemm_job *j, bool in_batch_loop)
{
    return j->dt == NB_FLOAT32 && !in_batch_loop && j->ta == CblasNoTrans && j->tb == CblasTrans &&
           j->m >= 16 && j->m <= 64 && j->n >= 1000 && j->k >= 1024 && nb__dnnl_enabled() &&
           !nb__dnnl_matmul_available();
}

/* C = alpha A B^T + beta C as C^T = alpha B A^T + beta C^T into scratch, transposed back. When K
 * is at least 4 N, oneDNN reads A^T straight from A (NT on [N, K] x [M, K]^T: 64x2048x26752 76
 * against 81 ms with A transposed first, 40 against 46 at 2 threads); otherwise A is transposed
 * to [K, M] first and the product is NN (64x26752x2048 87 against 102 ms). False (nothing
 * written) when scratch cannot be had or oneDNN fails: the caller takes the usual path. */
static bool gemm_small_m_nt(const gemm_job *j, const float *a, const float *b, float *c)
{
    int m = j->m, n = j->n, k = j->k;
    bool direct = (int64_t)k >= 4 * (int64_t)n;
    size_t at_bytes = direct ? 0 : (size_t)k * (size_t)m * sizeof(float);
    size_t ct_bytes = (size_t)n * (size_t)m * sizeof(float);
    float *at = direct ? NULL : nb_cpu_alloc(at_bytes), *ct = nb_cpu_alloc(ct_bytes);
    bool ok = ct && (direct || at);
    if (ok) {
        if (j->beta != 0) nb_cpu_transpose(sizeof(float), c, j->ldc, ct, m, 1, m, n);
        if (!direct) nb_cpu_transpose(sizeof(float), a, j->lda, at, m, 1, m, k);
        dnnl_status_t st = direct ? dnnl_sgemm('N', 'T', n, m, k, (float)j->alpha, b, j->ldb, a, j->lda,
                                               (float)j->beta, ct, m)
                                  : dnnl_sgemm('N', 'N', n, m, k, (float)j->alpha, b, j->ldb, at, m,
                                               (float)j->beta, ct, m);
        ok = st == dnnl_success;
        if (ok) nb_cpu_transpose(sizeof(float), ct, m, c, j->ldc, 1, n, m);
    }
    if (at) nb_cpu_free(at, at_bytes);
    if (ct) nb_cpu_free(ct, ct_bytes);
    return ok;
}

/* ---- choosing the library by timing ------------------------------------------------------- */

/* use_dnnl's rules were measured with AVX-512 kernels on Zen 4. Without AVX-512 both libraries
 * run their AVX2 kernels, and which is faster turns on the shape and the thread count in no
 * simple way:
 * on Zen 3, 1 thread / 2 threads, ms, OpenBLAS against oneDNN: TN 1024x256x4480 (an LSTM's
 * weight gradient) 33 / 15 against 69 / 31; NN 1024x2048x4096 203 / 143 against 221 / 124;
 * TN 26752x2048x64 132 / 87 against 94 / 50; NN 4480x256x1024 44 / 16 against 31 / 16.
 * A third way is OpenBLAS on the transposed product, C^T = op(B)^T op(A)^T, into scratch
 * transposed back (sgemm_transposed): OpenBLAS blocks and packs the two sides differently, and
 * for some shapes the other order is faster. Zen 3, best of 5, ms, 1 thread / 2 threads, as it
 * is against transposed: the LSTM's TN 1024x256x4096 35 / 23 against 34 / 15, NN 4096x256x1024
 * 35 / 18 against 30 / 18, NN 4096x256x10000 305 / 162 against 280 / 152; elsewhere even or
 * slower, and the order that wins moves between runs. It is offered where the transposes are
 * cheap beside the product: K of at least TRANSPOSED_MIN_K and C of at most TRANSPOSED_MAX_C
 * elements.
 * With AVX-512 the rules do not carry from one CPU to another either: on an Intel Xeon (2
 * threads, ms, OpenBLAS against oneDNN's sgemm) TN 2048x26752x64 runs 35 against 56, where
 * Zen 4 gave oneDNN the lead. A fourth way there is oneDNN's matmul primitive (brgemm kernels,
 * src/cpu/dnnl_matmul.c), the fastest on NT products of few rows (few_rows_matmul) and on some
 * NN ones (the Xeon: 64x2048x26752 at 2 threads, in a network, 33.9 against 36.8).
 * A fifth, with nabla's AVX-512 kernels, is its own NN kernel for up to 64 rows (gemm_rows.c),
 * which reads B once: on the Xeon at 2 threads, in the network, NN 16x9216x4096 (AlexNet-S's fc6
 * input gradient) 11.6 ms against 15.2 on the best library way, 64x2048x26752 (FCN-S's) 30.4
 * against 33.2; and its own TN kernel for K up to 64 (gemm_thin.c), a weight gradient on a small
 * batch, which keeps all of K in registers and writes C once with streaming stores; and its own NT
 * kernel for up to 32 rows (gemm_dot.c), a linear layer's forward on a small batch, dot products
 * along K that read the weight once. With AVX2 and FMA but not AVX-512 it is also the LSTM step's
 * kernel as a product of its own (gemm_avx2.c) for NN and NT products of many rows, up to 2048
 * columns and a short K (ResNet-50's 1x1 layers at 56x56, the convolutions' products over
 * windows): Zen 3, best of 9, ms, 1 / 2 threads, NN 50176x256x64 19.9 / 12.7 against 26.2 / 14.0
 * on the better library (oneDNN's), but NT 5194x64x800 9.3 against 7.8 at 1 thread.
 * So each shape (with its thread count) of at least TUNE_MIN_FLOPS is timed on each way, on
 * every CPU: its first call follows the rules (it warms the caches and the pages of C), the next
 * ones run OpenBLAS, oneDNN, transposed, matmul, own, own, matmul, transposed, oneDNN, OpenBLAS,
 * timed (the transposed ones only where that way is offered, the matmul ones only with oneDNN's
 * AVX-512 kernels, the own ones only for NN products of few rows and TN ones of short K with
 * nabla's AVX-512 kernels, NT ones of few rows with those or its AVX2 ones, and NN and NT ones
 * of many rows and short K with its AVX2 ones alone), and
 * the way with the shortest best time runs every later call in the process. No product is run
 * twice. Without the matmul way, NT products of 16-64 rows take their transposed route
 * (small_m_nt) as way 3 and by rule. On Zen 3 (no AVX-512) that route and nabla's own AVX2 kernel
 * (gemm_dot_avx2.c) split FCN-S's forward products; the own kernel runs its 64x26752x2048 in 89
 * ms at 1 thread against 111-121 on the library ways (bench/gemm_ways.c, best of 9). On the Xeon
 * the tuner took FCN-S's
 * training step (`nabla bench --model fcn-s`) from 0.245 to 0.215 s at 2 threads and from 0.470
 * to 0.410 s at 1, the rules alone (few_rows_matmul's) to 0.222 and 0.430. NABLA_GEMM_TUNE=0
 * turns it off (the rules everywhere); it is on by default (the table and the timing are
 * src/cpu/tune.c's). */
#define TUNE_MIN_FLOPS (1 << 25) /* 2 M N K: about 0.4 ms at 1 thread; smaller ones keep the rules */
#define TRANSPOSED_MIN_K 128
#define TRANSPOSED_MAX_C (1 << 24) /* elements of C: 64 MB of scratch */

/* ways: 1 = OpenBLAS, 2 = oneDNN's sgemm, 3 = the transposed product (OpenBLAS's, or oneDNN's
 * for small_m_nt's shapes: gemm_small_m_nt), 4 = oneDNN's matmul primitive, 5 = nabla's own
 * kernels (NN of few rows: gemm_rows.c; TN of short K: gemm_thin.c; NT of few rows: gemm_dot.c;
 * NN and NT of many rows and short K: gemm_avx2.c), 6 = nabla's AMX product (gemm_amx.c, where
 * nb_cpu_amx()) */
static nb_tuner g_tuner = NB_TUNER_INIT("NABLA_GEMM_TUNE", true, 13, 0, 1, 2, 3, 4, 5, 6, 6, 5, 4, 3, 2, 1);

static bool transposed_offered(const gemm_job *j)
{
    return j->k >= TRANSPOSED_MIN_K && (int64_t)j->m * j->n <= TRANSPOSED_MAX_C;
}

/* The matmul primitive is a way of its own only where it has its brgemm kernels (AVX-512);
 * elsewhere it runs dnnl_sgemm's. */
static bool matmul_offered(void) { return nb__dnnl_matmul_available(); }

/* Whether j is an NN or NT product gemm_avx2.c's kernel takes as the own way (many rows, short K). */
static bool avx2_short_k(const gemm_job *j)
{
    return j->ta == CblasNoTrans && nb_cpu_gemm_avx2_offered(j->m, j->n, j->k);
}

/* nabla's own kernels, for NN products of few rows (gemm_rows.c) and TN ones with a short inner
 * dimension (gemm_thin.c), run where its AVX-512 kernels do; NT ones of few rows (gemm_dot.c)
 * with AVX-512 or with AVX2 and FMA, up to the rows its kernel there takes; NN and NT ones of
 * many rows and a short inner dimension (gemm_avx2.c) with AVX2 and FMA but not AVX-512. */
static bool own_offered(const gemm_job *j)
{
    bool nn = j->ta == CblasNoTrans && j->tb == CblasNoTrans && j->m <= GEMM_ROWS_MAX_M;
    bool tn = j->ta == CblasTrans && j->tb == CblasNoTrans && j->k <= GEMM_THIN_MAX_K;
    bool nt = j->ta == CblasNoTrans && j->tb == CblasTrans && j->m <= nb_cpu_gemm_dot_max_m();
    return ((nn || tn) && nb_cpu_avx512()) || nt || avx2_short_k(j);
}

/* nabla's AMX product: where the CPU and Linux have AMX, for beta 0 (C overwritten). */
static bool amx_offered(const gemm_job *j) { return j->beta == 0 && nb_cpu_amx(); }

/* Way 6 for j (its bias included): false where it did not run (C then undefined, beta being 0: the
 * caller's next way overwrites it). */
static bool gemm_amx(const gemm_job *j, const float *a, const float *b, float *c)
{
    return nb_cpu_gemm_amx(j->ta == CblasTrans ? 'T' : 'N', j->tb == CblasTrans ? 'T' : 'N', j->m, j->n, j->k,
                           (float)j->alpha, a, j->lda, b, j->ldb, c, j->ldc, j->bias);
}

/* Way 5 for j: false (nothing written) where it does not run. */
static bool gemm_own(const gemm_job *j, const float *a, const float *b, float *c)
{
    if (avx2_short_k(j))
        return nb_cpu_gemm_avx2(j->tb == CblasTrans ? 'T' : 'N', j->m, j->n, j->k, (float)j->alpha, a, j->lda, b,
                                j->ldb, (float)j->beta, c, j->ldc);
    if (j->tb == CblasTrans)
        return nb_cpu_gemm_dot(j->m, j->n, j->k, (float)j->alpha, a, j->lda, b, j->ldb, (float)j->beta, c, j->ldc);
    if (j->ta == CblasTrans)
        return nb_cpu_gemm_thin_k(j->m, j->n, j->k, (float)j->alpha, a, j->lda, b, j->ldb, (float)j->beta, c, j->ldc);
    return nb_cpu_gemm_rows(j->m, j->n, j->k, (float)j->alpha, a, j->lda, b, j->ldb, (float)j->beta, c, j->ldc);
}

/* Whether a float32 NT product of few rows (a linear layer's forward on a small batch: 16-64
 * rows, N of at least 1000 and K of at least 1024, small_m_nt's shapes) goes to oneDNN's matmul
 * primitive by rule, where it has its brgemm kernels. There it is the fastest way on every such
 * shape measured: an Intel Xeon (AVX-512, oneDNN 2.6, OpenBLAS 0.3.21, best of 5, ms, 1 thread /
 * 2 threads; bench/gemm_ways.c), matmul against small_m_nt's route and the best sgemm call:
 * FCN-S's 64x2048x26752 51.3 / 24.9 against 75.8 / 35.9 and 61.2 / 29.2, 64x26752x2048 51.1 /
 * 25.9 against 75.9 / 34.6 and 63.3 / 33.5, 64x2048x2048 3.3 / 1.8 against 3.8 / 1.9 and 3.6 /
 * 2.2; AlexNet-S's 16x4096x9216 16.9 / 8.0 against 19.0 / 9.0 and 24.3 / 13.2, 16x4096x4096 6.3
 * / 3.0 against 7.0 / 2.9 and 8.9 / 5.4. On the NN products of few rows (the input gradients)
 * it wins some and loses some (64x26752x2048 50 against dnnl_sgemm's 22 at 2 threads), so those
 * keep the rules, and the tuner tries it. */
static bool few_rows_matmul(const gemm_job *j, bool in_batch_loop)
{
    bool shape = j->ta == CblasNoTrans && j->tb == CblasTrans && j->m >= 16 && j->m <= 64 && j->n >= 1000 &&
                 j->k >= 1024;
    return j->dt == NB_FLOAT32 && shape && !in_batch_loop && nb__dnnl_enabled() && matmul_offered();
}

/* The way the rules give a float32 product: 4 (the matmul primitive) for few_rows_matmul's
 * shapes, 3 (the transposed product, on oneDNN) for small_m_nt's, else 2 (oneDNN's sgemm) where
 * dnnl says so, else 1 (OpenBLAS). */
static int rule_way(const gemm_job *j, bool in_batch_loop, bool dnnl)
{
    return few_rows_matmul(j, in_batch_loop) ? 4 : small_m_nt(j, in_batch_loop) ? 3 : dnnl ? 2 : 1;
}

/* The way for this call of a product: 0 = the rules (not a product to tune, or its first
 * call), 1 = OpenBLAS, 2 = oneDNN, 3 = transposed, 4 = oneDNN's matmul, 5 = nabla's own
 * kernels, 6 = the AMX product; *timed as nb_cpu_tune_pick's. */
static int tune_pick(const gemm_job *j, bool in_batch_loop, int64_t key[NB_TUNE_KEY], int *timed)
{
    *timed = -1;
    if (j->dt != NB_FLOAT32 || in_batch_loop || !nb__dnnl_enabled() || 2.0 * j->m * j->n * j->k < TUNE_MIN_FLOPS)
        return 0;
    int64_t k[NB_TUNE_KEY] = {j->ta, j->tb, j->m, j->n, j->k, j->lda, j->ldb, j->ldc, nb_get_num_threads(),
                              j->bias != NULL};
    memcpy(key, k, sizeof k);
    unsigned ways = 3u | (transposed_offered(j) ? 4u : 0u) | (matmul_offered() ? 8u : 0u) |
                    (own_offered(j) ? 16u : 0u) | (amx_offered(j) ? 32u : 0u);
    return nb_cpu_tune_pick(&g_tuner, key, ways, timed);
}

int nb_cpu_gemm_tuned_shapes(void) { return nb_cpu_tune_settled(&g_tuner); }

unsigned long long nb_cpu_gemm_tuning_steps(void) { return nb_cpu_tune_steps(&g_tuner); }

static CBLAS_TRANSPOSE flip(CBLAS_TRANSPOSE t) { return t == CblasTrans ? CblasNoTrans : CblasTrans; }

/* C = alpha op(A) op(B) + beta C as C^T = alpha op(B)^T op(A)^T + beta C^T on OpenBLAS into
 * scratch ([N, M]; C is transposed into it first when beta is not 0), transposed back. False
 * (nothing written) when the scratch cannot be had. */
static bool sgemm_transposed(const gemm_job *j, const float *a, const float *b, float *c)
{
    size_t bytes = (size_t)j->m * (size_t)j->n * sizeof(float);
    float *ct = nb_cpu_alloc(bytes);
    if (!ct) return false;
    if (j->beta != 0) nb_cpu_transpose(sizeof(float), c, j->ldc, ct, j->m, 1, j->m, j->n);
    cblas_sgemm(CblasRowMajor, flip(j->tb), flip(j->ta), j->n, j->m, j->k, (float)j->alpha, b, j->ldb, a, j->lda,
                (float)j->beta, ct, j->m);
    nb_cpu_transpose(sizeof(float), ct, j->m, c, j->ldc, 1, j->n, j->m);
    nb_cpu_free(ct, bytes);
    return true;
}

/* j's bias copied into every row of c (m rows of n, leading dimension ldc); *tmp becomes j with
 * beta 1 and no bias, to run the product on c as it now is. */
static const gemm_job *bias_into_c(const gemm_job *j, float *c, gemm_job *tmp)
{
    int64_t m = j->m, n = j->n, ldc = j->ldc;
    const float *bias = j->bias;
    int nt = nb_cpu_threads_for(m * n, NB_CPU_GRAIN);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < m; r++) memcpy(c + r * ldc, bias, (size_t)n * sizeof(float));
    *tmp = *j;
    tmp->beta = 1;
    tmp->bias = NULL;
    return tmp;
}

/* op(X) of rows x k with one more column, `last` (NULL: ones) or, as X is stored, op(X)^T with
 * one more row, into new scratch of (k + 1) * rows floats: its leading dimension back in *ld. */
static float *widen(CBLAS_TRANSPOSE t, const float *x, int ldx, int rows, int k, const float *last, int *ld)
{
    size_t bytes = (size_t)(k + 1) * (size_t)rows * sizeof(float);
    float *w = nb_cpu_alloc(bytes);
    if (!w) return NULL;
    int nt = nb_cpu_threads_for((int64_t)rows * (k + 1), NB_CPU_GRAIN);
    if (t == CblasNoTrans) { /* [rows, k + 1] */
        *ld = k + 1;
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            memcpy(w + r * (k + 1), x + r * ldx, (size_t)k * sizeof(float));
            w[r * (k + 1) + k] = last ? last[r] : 1.0f;
        }
    } else { /* [k + 1, rows] */
        *ld = rows;
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t p = 0; p <= k; p++)
            for (int64_t r = 0; r < rows; r++)
                w[p * rows + r] = p < k ? x[p * ldx + r] : last ? last[r] : 1.0f;
    }
    return w;
}

/* Whether copying A and B into sgemm_widened's operands ((M + N) (K + 1) floats) costs less than
 * copying the bias into C (M N floats). */
static bool widen_pays(const gemm_job *j)
{
    return ((int64_t)j->m + j->n) * (j->k + 1) < (int64_t)j->m * j->n;
}

/* Way 2 with a bias: C = [op(A), 1] [op(B); bias] on oneDNN's sgemm with beta 0, the bias one
 * more step of the inner dimension. oneDNN's sgemm runs beta 0 faster than beta 1 (it never
 * reads C), and copying A and B (M + N rows of K) is far less than copying the bias into C (M
 * rows of N) where K is much below N: the LSTM's decoder, NT 4096x10000x256 (the Xeon, best of
 * 7, ms, 1 thread / 2 threads) 104.2 / 55.7 against 117.3 / 62.9 with the bias copied into C
 * first; the product alone takes 101.6 / 51.4. Where A and B are the larger (widen_pays), the
 * bias is copied. The dnnl_status_t of the call (dnnl_out_of_memory: no scratch, nothing
 * written). */
static int sgemm_widened(const gemm_job *j, const float *a, const float *b, float *c)
{
    int lda, ldb;
    float *aw = widen(j->ta, a, j->lda, j->m, j->k, NULL, &lda);
    float *bw = aw ? widen(j->tb == CblasTrans ? CblasNoTrans : CblasTrans, b, j->ldb, j->n, j->k, j->bias, &ldb)
                   : NULL;
    int st = bw ? dnnl_sgemm(j->ta == CblasTrans ? 'T' : 'N', j->tb == CblasTrans ? 'T' : 'N', j->m, j->n, j->k + 1,
                             (float)j->alpha, aw, lda, bw, ldb, 0.0f, c, j->ldc)
                : dnnl_out_of_memory;
    if (aw) nb_cpu_free(aw, (size_t)(j->k + 1) * (size_t)j->m * sizeof(float));
    if (bw) nb_cpu_free(bw, (size_t)(j->k + 1) * (size_t)j->n * sizeof(float));
    return st;
}

/* A float32 product on the way tune_pick gives for it, or, where it gives none, on way rule (1
 * OpenBLAS, 2 oneDNN's sgemm, 4 oneDNN's matmul; a matmul that fails runs on OpenBLAS); the
 * timed calls' seconds are recorded. A bias goes with the product on the matmul primitive and
 * on oneDNN's sgemm (sgemm_widened); on any other way, or where those fail, it is first copied
 * into C (inside the time), so that the tuner weighs each way with its bias. Returns
 * the dnnl_status_t of oneDNN's sgemm (dnnl_success when another way ran): on failure nothing
 * but the bias's copy ran. */
static int sgemm_run(const gemm_job *j, const float *a, const float *b, float *c, bool in_batch_loop, int rule)
{
    int64_t key[NB_TUNE_KEY];
    int timed, pick = tune_pick(j, in_batch_loop, key, &timed);
    if (pick == 0) pick = rule;
    double t0 = timed >= 0 ? nb_cpu_seconds() : 0;
    int st = dnnl_success;
    gemm_job plain;
    if (pick == 6) {
        if (gemm_amx(j, a, b, c)) {
            if (timed >= 0) nb_cpu_tune_record(&g_tuner, key, timed, nb_cpu_seconds() - t0);
            return dnnl_success;
        }
        pick = 1; /* not run, or met an infinity or NaN: OpenBLAS, and the time is not the way's */
        timed = -1;
    }
    if (j->bias && j->alpha == 1 && (pick == 4 || (pick == 2 && widen_pays(j)))) {
        bool done = pick == 4 ? nb__dnnl_matmul(j->ta == CblasTrans ? 'T' : 'N', j->tb == CblasTrans ? 'T' : 'N', j->m,
                                                j->n, j->k, 1.0f, a, j->lda, b, j->ldb, 0.0f, c, j->ldc,
                                                j->bias) == dnnl_success
                              : sgemm_widened(j, a, b, c) == dnnl_success;
        if (done) {
            if (timed >= 0) nb_cpu_tune_record(&g_tuner, key, timed, nb_cpu_seconds() - t0);
            return dnnl_success;
        }
        timed = -1; /* nothing written: the bias copied instead, and the time is not the way's */
    }
    if (j->bias) j = bias_into_c(j, c, &plain);
    if (pick == 3 && !(small_m_nt(j, in_batch_loop) ? gemm_small_m_nt(j, a, b, c) : sgemm_transposed(j, a, b, c))) {
        pick = 1; /* no scratch: OpenBLAS as it is, and this call's time is not the way's */
        timed = -1;
    }
    if (pick == 5 && !gemm_own(j, a, b, c)) {
        pick = 1; /* not run (nothing written): OpenBLAS, and the time is not the way's */
        timed = -1;
    }
    if (pick == 4 && nb__dnnl_matmul(j->ta == CblasTrans ? 'T' : 'N', j->tb == CblasTrans ? 'T' : 'N', j->m, j->n,
                                     j->k, (float)j->alpha, a, j->lda, b, j->ldb, (float)j->beta, c,
                                     j->ldc, NULL) != dnnl_success) {
        pick = 1; /* no primitive for the shape (nothing written): OpenBLAS, and the time is not the way's */
        timed = -1;
    }
    if (pick == 2)
        st = dnnl_sgemm(j->ta == CblasTrans ? 'T' : 'N', j->tb == CblasTrans ? 'T' : 'N', j->m, j->n, j->k,
                        (float)j->alpha, a, j->lda, b, j->ldb, (float)j->beta, c, j->ldc);
    else if (pick == 1)
        cblas_sgemm(CblasRowMajor, j->ta, j->tb, j->m, j->n, j->k, (float)j->alpha, a, j->lda, b, j->ldb,
                    (float)j->beta, c, j->ldc);
    if (timed >= 0 && st == dnnl_success) nb_cpu_tune_record(&g_tuner, key, timed, nb_cpu_seconds() - t0);
    return st;
}

int nb_cpu_sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                 const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX)
        return dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    nb_cpu_blas_init();
    gemm_job j = {.dt = NB_FLOAT32,
                  .ta = ta == 'T' ? CblasTrans : CblasNoTrans,
                  .tb = tb == 'T' ? CblasTrans : CblasNoTrans,
                  .m = (int)m, .n = (int)n, .k = (int)k, .lda = (int)lda, .ldb = (int)ldb, .ldc = (int)ldc,
                  .alpha = alpha, .beta = beta};
    return sgemm_run(&j, a, b, c, false, rule_way(&j, false, true));
}

static void gemm_one(const gemm_job *j, int64_t i, bool in_batch_loop)
{
    size_t es = nb_dtype_size(j->dt);
    const char *a = j->a.p + i * j->a.sb * (int64_t)es, *b = j->b.p + i * j->b.sb * (int64_t)es;
    char *c = j->c.p + i * j->c.sb * (int64_t)es;
    if (j->dt == NB_FLOAT32) {
        /* a failed oneDNN call (nothing written but the bias, in C now) falls back to OpenBLAS */
        if (sgemm_run(j, (const float *)a, (const float *)b, (float *)c, in_batch_loop,
                      rule_way(j, in_batch_loop, use_dnnl(j, in_batch_loop))) != dnnl_success)
            cblas_sgemm(CblasRowMajor, j->ta, j->tb, j->m, j->n, j->k, (float)j->alpha, (const float *)a, j->lda,
                        (const float *)b, j->ldb, j->bias ? 1.0f : (float)j->beta, (float *)c, j->ldc);
        return;
    }
    cblas_dgemm(CblasRowMajor, j->ta, j->tb, j->m, j->n, j->k, j->alpha, (const double *)a, j->lda,
                (const double *)b, j->ldb, j->beta, (double *)c, j->ldc);
}

static void gemm_batches(const gemm_job *j, int64_t batch)
{
    int64_t per = (int64_t)j->m * j->n * j->k;
    int nt = per < BATCH_PARALLEL_MAX_MACS ? nb_cpu_threads_for(batch * per, 1 << 18) : 1;
    if (nt > batch) nt = (int)batch;
    if (nt > 1) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t i = 0; i < batch; i++) gemm_one(j, i, true);
    } else {
        for (int64_t i = 0; i < batch; i++) gemm_one(j, i, false);
    }
}

/* Sets up the BLAS call for out = in0 @ in1 (swapping to out^T = in1^T @ in0^T when out is
 * column-major) and packs what BLAS cannot read. Scratch tensors go to tmp[] (caller releases). */
static nb_status plan(const nb_kargs *ka, gemm_job *j, nb_tensor **tmp, nb_tensor **cbuf)
{
    int64_t batch = ka->out->shape[0];
    mat a = mat_of(ka->in[0]), b = mat_of(ka->in[1]), c = mat_of(ka->out);
    int ld;
    const nb_tensor *at = ka->in[0], *bt = ka->in[1];
    bool swap = !row_major(c, &ld) && row_major(mat_t(c), &ld);
    if (!swap && !row_major(c, &ld)) {
        *cbuf = nb__tensor_new(ka->out->shape, 3, ka->out->dtype, ka->out->storage->device);
        if (!*cbuf) return nb_last_status();
        nb_kargs cp = {.out = *cbuf, .in = {ka->out}};
        if (ka->s1 != 0) NB_TRY(nb_cpu_k_copy(NB_OP_COPY, &cp));
        c = mat_of(*cbuf);
    }
    if (!blas_view(a, &j->ta, &j->lda)) {
        if (!(tmp[0] = pack(at, batch))) return nb_last_status();
        a = mat_of(tmp[0]);
    }
    if (!blas_view(b, &j->tb, &j->ldb)) {
        if (!(tmp[1] = pack(bt, batch))) return nb_last_status();
        b = mat_of(tmp[1]);
    }
    if (swap) {
        mat t = a;
        a = mat_t(b);
        b = mat_t(t);
        c = mat_t(c);
    }
    NB_ASSERT(blas_view(a, &j->ta, &j->lda) && blas_view(b, &j->tb, &j->ldb) && row_major(c, &j->ldc));
    j->a = a;
    j->b = b;
    j->c = c;
    j->m = (int)c.rows;
    j->n = (int)c.cols;
    j->k = (int)a.cols;
    return NB_OK;
}

/* Whether the BMM's in[2] goes with the product (gemm_job's bias): a float32 row (strides 0, 0,
 * 1) added to a single batch's row-major out. */
static bool bias_fused(const nb_kargs *ka)
{
    const nb_tensor *bias = ka->in[2], *out = ka->out;
    int ld;
    return bias && out->dtype == NB_FLOAT32 && out->shape[0] == 1 && bias->strides[1] == 0 &&
           (bias->strides[2] == 1 || out->shape[2] == 1) && row_major(mat_of(out), &ld);
}

static nb_status bmm_blas(const nb_kargs *ka)
{
    nb_cpu_blas_init();
    gemm_job j = {.dt = ka->out->dtype, .alpha = ka->s0, .beta = ka->s1};
    nb_tensor *tmp[2] = {NULL, NULL}, *cbuf = NULL;
    nb_status st = plan(ka, &j, tmp, &cbuf);
    if (ka->in[2]) j.bias = (const float *)nb__data(ka->in[2]);
    if (st == NB_OK) {
        gemm_batches(&j, ka->out->shape[0]);
        if (cbuf) {
            nb_kargs back = {.out = ka->out, .in = {cbuf}};
            st = nb_cpu_k_copy(NB_OP_COPY, &back);
        }
    }
    nb__release(tmp[0]);
    nb__release(tmp[1]);
    nb__release(cbuf);
    return st;
}

nb_status nb_cpu_k_gemm(nb_op op, const nb_kargs *a)
{
    if (op != NB_OP_BMM) return nb__err(NB_ERR_UNSUPPORTED, "%s: not a gemm-family op", nb__op_name(op));
    const nb_tensor *x = a->in[0], *y = a->in[1];
    nb_tensor *out = a->out;
    NB_ASSERT(out->ndim == 3 && x->ndim == 3 && y->ndim == 3);
    NB_ASSERT(x->shape[0] == out->shape[0] && y->shape[0] == out->shape[0]);
    NB_ASSERT(x->shape[1] == out->shape[1] && y->shape[2] == out->shape[2] && x->shape[2] == y->shape[1]);
    int64_t batch = out->shape[0], k = x->shape[2];
    if (batch == 0 || out->shape[1] == 0 || out->shape[2] == 0) return NB_OK;
    NB_ASSERT(x->dtype == out->dtype && y->dtype == out->dtype);
    /* K == 0 only scales out: the reference does that without BLAS's corner cases */
    bool blas = (out->dtype == NB_FLOAT32 || out->dtype == NB_FLOAT64) && k > 0 && k <= INT_MAX &&
                out->shape[1] <= INT_MAX && out->shape[2] <= INT_MAX;
    nb_kargs plain;
    if (a->in[2]) {
        const nb_tensor *bias = a->in[2];
        NB_ASSERT(a->s1 == 0 && bias->dtype == out->dtype && bias->ndim == 3);
        NB_ASSERT(bias->shape[0] == batch && bias->shape[1] == out->shape[1] && bias->shape[2] == out->shape[2]);
        if (!blas || !bias_fused(a)) {
            nb_kargs cp = {.out = out, .in = {bias}};
            NB_TRY(nb_cpu_k_copy(NB_OP_COPY, &cp));
            plain = *a;
            plain.in[2] = NULL;
            plain.s1 = 1;
            a = &plain;
        }
    }
    return blas ? bmm_blas(a) : nb_cpu_gemm_reference(a);
}

/* ---- the reference ------------------------------------------------------------------------ */

/* Floats accumulate in double; integers in uint64 (wrap-around without signed overflow). */
#define REF_FLOAT(T)                                                                             \
    _Pragma("omp parallel for collapse(2) num_threads(nt)")                                      \
    for (int64_t i = 0; i < batch; i++)                                                          \
        for (int64_t r = 0; r < m; r++)                                                          \
            for (int64_t q = 0; q < n; q++) {                                                    \
                double acc = 0;                                                                  \
                for (int64_t p = 0; p < k; p++)                                                  \
                    acc += (double)((const T *)A.p)[i * A.sb + r * A.sr + p * A.sc] *            \
                           (double)((const T *)B.p)[i * B.sb + p * B.sr + q * B.sc];             \
                T *o = (T *)C.p + i * C.sb + r * C.sr + q * C.sc;                                \
                *o = (T)(s1 == 0 ? s0 * acc : s1 * (double)*o + s0 * acc);                       \
            }

#define REF_INT(T)                                                                               \
    _Pragma("omp parallel for collapse(2) num_threads(nt)")                                      \
    for (int64_t i = 0; i < batch; i++)                                                          \
        for (int64_t r = 0; r < m; r++)                                                          \
            for (int64_t q = 0; q < n; q++) {                                                    \
                uint64_t acc = 0;                                                                \
                for (int64_t p = 0; p < k; p++)                                                  \
                    acc += (uint64_t)(int64_t)((const T *)A.p)[i * A.sb + r * A.sr + p * A.sc] * \
                           (uint64_t)(int64_t)((const T *)B.p)[i * B.sb + p * B.sr + q * B.sc];  \
                T *o = (T *)C.p + i * C.sb + r * C.sr + q * C.sc;                                \
                uint64_t v = (uint64_t)(int64_t)s0 * acc;                                        \
                if (s1 != 0) v += (uint64_t)(int64_t)s1 * (uint64_t)(int64_t)*o;                 \
                *o = (T)v;                                                                       \
            }

nb_status nb_cpu_gemm_reference(const nb_kargs *ka)
{
    nb_op op = NB_OP_BMM;
    mat A = mat_of(ka->in[0]), B = mat_of(ka->in[1]), C = mat_of(ka->out);
    int64_t batch = ka->out->shape[0], m = C.rows, n = C.cols, k = A.cols;
    double s0 = ka->s0, s1 = ka->s1;
    int nt = nb_cpu_threads_for(batch * m * n * (k ? k : 1), NB_CPU_GRAIN);
    switch (ka->out->dtype) {
    case NB_FLOAT32: { REF_FLOAT(float) } break;
    case NB_FLOAT64: { REF_FLOAT(double) } break;
    case NB_INT64: { REF_INT(int64_t) } break;
    case NB_INT32: { REF_INT(int32_t) } break;
    case NB_UINT8: { REF_INT(uint8_t) } break;
    default:
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported on the CPU", nb__op_name(op),
                       nb_dtype_name(ka->out->dtype));
    }
    return NB_OK;
}
