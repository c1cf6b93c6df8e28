/* Matrix products: matmul, mm, bmm, addmm, linear against PyTorch (tests/ref/cases_linalg.py) on
 * contiguous, non-contiguous and column-major operands, gradients against PyTorch and finite
 * differences, the BLAS path of the gemm kernel (OpenBLAS, and oneDNN's sgemm for float32 NN and
 * TN products) against its reference loop, the library chosen by timing, OpenBLAS's kernel
 * selection, and the error messages. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "nbtest.h"
#include "cpu/blas_impl.h"
#include "cpu/cpu_impl.h"
#include "cpu/dnnl_impl.h"

enum { OP_MATMUL, OP_MM, OP_BMM, OP_ADDMM, OP_LINEAR };

typedef struct spec {
    int op, n;
    int64_t tr[3];
    double beta, alpha;
} spec;

/* The op of a case on inputs x (the stored tensors; transposed here where tr says). */
static nb_tensor *apply(const spec *s, nb_tensor *const *x)
{
    nb_tensor *a[3] = {NULL, NULL, NULL};
    for (int i = 0; i < s->n; i++) a[i] = s->tr[i] ? nb_transpose(x[i], -1, -2) : x[i];
    switch (s->op) {
    case OP_MATMUL: return nb_matmul(a[0], a[1]);
    case OP_MM: return nb_mm(a[0], a[1]);
    case OP_BMM: return nb_bmm(a[0], a[1]);
    case OP_ADDMM: return nb_addmm(a[0], a[1], a[2], s->beta, s->alpha);
    default: return nb_linear(a[0], a[1], s->n > 2 ? a[2] : NULL);
    }
}

static nb_tensor *apply_fn(nb_tensor *const *inputs, int n, void *ctx)
{
    return apply(ctx, inputs);
}

static void read_spec(const nb_tensor_map *m, const char *name, spec *s)
{
    memset(s, 0, sizeof *s);
    int64_t op;
    NBT_OK(nb_item_int64(NBT_CHECK(nbt_ref(m, name, "op")), &op));
    s->op = (int)op;
    while (s->n < 3) {
        char key[16];
        snprintf(key, sizeof key, "in%d", s->n);
        if (!nbt_ref(m, name, key)) break;
        s->n++;
    }
    nb_tensor *tr = NBT_CHECK(nbt_ref(m, name, "tr"));
    NBT_OK(nb_tensor_read(tr, s->tr, (size_t)s->n * sizeof(int64_t)));
    nb_tensor *sc = nbt_ref(m, name, "scales");
    if (sc) {
        double v[2];
        NBT_OK(nb_tensor_read(sc, v, sizeof v));
        s->beta = v[0];
        s->alpha = v[1];
    }
}

/* float32: rtol 1e-5 with an atol of 1e-5 for outputs that cancel to near zero (enough up to
 * K = 300 with either of OpenBLAS's kernel sets); float64: 1e-10; integers: exact. */
static void tolerances(nb_dtype dt, double *rtol, double *atol)
{
    if (dt == NB_FLOAT64) {
        *rtol = 1e-10;
        *atol = 1e-12;
    } else if (dt == NB_FLOAT32) {
        *rtol = 1e-5;
        *atol = 1e-5;
    } else {
        *rtol = *atol = 0;
    }
}

static void run_case(const nb_tensor_map *m, const char *name, bool noncontig)
{
    nb_scope *sc = nb_scope_begin();
    spec s;
    read_spec(m, name, &s);
    nb_tensor *leaves[3];
    for (int i = 0; i < s.n; i++) {
        char key[16];
        snprintf(key, sizeof key, "in%d", i);
        nb_tensor *in = NBT_CHECK(nbt_ref(m, name, key));
        leaves[i] = noncontig ? nbt_noncontig(in) : NBT_CHECK(nb_clone(in));
        if (nb_dtype_is_floating(nb_tensor_dtype(in))) NBT_OK(nb_tensor_set_requires_grad(leaves[i], true));
    }
    nb_tensor *out = NBT_CHECK(apply(&s, leaves));
    double rtol, atol;
    tolerances(nb_tensor_dtype(out), &rtol, &atol);
    char what[256];
    snprintf(what, sizeof what, "%s (%s): out", name, noncontig ? "non-contiguous" : "contiguous");
    nbt_assert_close(out, nbt_ref(m, name, "out"), rtol, atol, what);
    nb_tensor *gout = nbt_ref(m, name, "gout");
    if (gout) {
        NBT_OK(nb_backward(out, gout, NB_BACKWARD_DEFAULT));
        for (int i = 0; i < s.n; i++) {
            char key[16];
            snprintf(key, sizeof key, "grad%d", i);
            snprintf(what, sizeof what, "%s (%s): %s", name, noncontig ? "non-contiguous" : "contiguous", key);
            nb_tensor *g = nb_tensor_grad(leaves[i]);
            nb_tensor *want = NBT_CHECK(nbt_ref(m, name, key));
            if (!g) g = NBT_CHECK(nb_zeros_like(want)); /* PyTorch gives zeros where nothing flowed */
            nbt_assert_close(g, want, rtol, atol, what);
        }
    }
    nb_scope_end(sc);
}

static void test_pytorch_cases(void **state)
{
    nbt_run_reference("linalg", 61, run_case);
}

static void test_gradcheck(void **state)
{
    nb_tensor_map *m = nbt_load_ref("linalg");
    char **names;
    int n = nbt_case_names(m, &names), checked = 0;
    for (int i = 0; i < n; i++) {
        if (!strstr(names[i], "/f64")) continue;
        nb_scope *sc = nb_scope_begin();
        spec s;
        read_spec(m, names[i], &s);
        nb_tensor *in[3];
        for (int k = 0; k < s.n; k++) {
            char key[16];
            snprintf(key, sizeof key, "in%d", k);
            in[k] = NBT_CHECK(nbt_ref(m, names[i], key));
        }
        nbt_gradcheck(apply_fn, &s, in, s.n, 1e-6, 1e-7, 1e-6, names[i]);
        nb_scope_end(sc);
        checked++;
    }
    assert_true(checked > 30);
    nbt_free_names(names, n);
    nb_tensor_map_free(m);
}

/* ---- the gemm kernel: BLAS path against the reference loop -------------------------------- */

static uint64_t g_rng = 88172645463325252ull;

static double urand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / (double)(1ull << 53) * 2 - 1;
}

static int64_t irand(int64_t n)
{
    return (int64_t)((urand() + 1) / 2 * (double)n) % n;
}

static nb_tensor *rand_tensor(const int64_t *shape, int nd, nb_dtype dt)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) v[i] = urand();
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_FLOAT64;
    nb_tensor *t = NBT_CHECK(nb_tensor_from_data(v, shape, nd, &p));
    free(v);
    return NBT_CHECK(nb_to_dtype(t, dt));
}

enum { L_ROW, L_COL, L_STRIDED, L_BCAST, L_COUNT, L_WIDE = L_COUNT };
static const char *const layout_names[] = {"row-major", "column-major", "strided", "batch-broadcast",
                                           "padded rows"};

/* A [b, r, c] operand laid out as `layout`: strided has no unit stride (BLAS cannot read it),
 * batch-broadcast has batch stride 0, padded rows are row-major with 3 elements between rows (a
 * leading dimension above the width). */
static nb_tensor *operand(int layout, int64_t b, int64_t r, int64_t c, nb_dtype dt)
{
    switch (layout) {
    case L_ROW: return rand_tensor((int64_t[]){b, r, c}, 3, dt);
    case L_COL: return NBT_CHECK(nb_transpose(rand_tensor((int64_t[]){b, c, r}, 3, dt), 1, 2));
    case L_STRIDED: {
        nb_tensor *t = rand_tensor((int64_t[]){b, 2 * r, 2 * c}, 3, dt);
        t = NBT_CHECK(nb_slice(t, 1, 0, 2 * r, 2));
        return NBT_CHECK(nb_slice(t, 2, 1, 2 * c, 2));
    }
    case L_WIDE: return NBT_CHECK(nb_slice(rand_tensor((int64_t[]){b, r, c + 3}, 3, dt), 2, 0, c, 1));
    default: return NBT_CHECK(nb_expand(rand_tensor((int64_t[]){1, r, c}, 3, dt), (int64_t[]){b, r, c}, 3));
    }
}

/* Runs the kernel and the reference on one problem; returns after comparing. */
static void compare_paths(int64_t b, int64_t m, int64_t n, int64_t k, const int *lay, double s0, double s1,
                          nb_dtype dt)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor *x = operand(lay[0], b, m, k, dt), *y = operand(lay[1], b, k, n, dt);
    nb_tensor *init = rand_tensor((int64_t[]){b, m, n}, 3, dt);
    nb_tensor *o1 = operand(lay[2], b, m, n, dt), *o2 = operand(lay[2], b, m, n, dt);
    NBT_OK(nb_copy_(o1, init));
    NBT_OK(nb_copy_(o2, init));
    nb_kargs a1 = {.out = o1, .in = {x, y}, .s0 = s0, .s1 = s1}, a2 = a1;
    a2.out = o2;
    NBT_OK(nb_cpu_k_gemm(NB_OP_BMM, &a1));
    NBT_OK(nb_cpu_gemm_reference(&a2));
    char what[256];
    snprintf(what, sizeof what, "gemm %s [%lld, %lld, %lld] K %lld, a %s, b %s, out %s, s0 %g, s1 %g",
             nb_dtype_name(dt), (long long)b, (long long)m, (long long)n, (long long)k, layout_names[lay[0]],
             layout_names[lay[1]], layout_names[lay[2]], s0, s1);
    double tol = dt == NB_FLOAT32 ? 1e-6 : 1e-14;
    nbt_assert_close(o1, o2, dt == NB_FLOAT32 ? 1e-5 : 1e-12, tol * (double)(k + 1), what);
    nb_scope_end(sc);
}

static void test_blas_vs_reference(void **state)
{
    static const int64_t dims[] = {0, 1, 1, 2, 3, 7, 16, 33, 64};
    static const double scales[] = {1, 0, 0.5, -2};
    for (int dti = 0; dti < 2; dti++) {
        nb_dtype dt = dti ? NB_FLOAT64 : NB_FLOAT32;
        for (int trial = 0; trial < 300; trial++) {
            int64_t b = 1 + irand(4), m = dims[irand(9)], n = dims[irand(9)], k = dims[irand(9)];
            int lay[3] = {(int)irand(L_COUNT), (int)irand(L_COUNT), (int)irand(L_STRIDED + 1)};
            compare_paths(b, m, n, k, lay, scales[irand(4)], scales[irand(4)], dt);
        }
        /* large enough for OpenBLAS's threads, and many small batches for ours */
        compare_paths(1, 300, 257, 190, (int[]){L_ROW, L_COL, L_ROW}, 1, 0, dt);
        compare_paths(2, 131, 129, 260, (int[]){L_COL, L_ROW, L_COL}, 1.5, 1, dt);
        compare_paths(64, 9, 17, 12, (int[]){L_BCAST, L_ROW, L_ROW}, 1, 0, dt);
        compare_paths(37, 1, 5, 40, (int[]){L_STRIDED, L_BCAST, L_COL}, -1, 0.5, dt);
        /* a linear layer's backward shapes (NN: dX = dY @ W, TN: dW = dY^T @ X), which float32
         * sends to oneDNN's sgemm, on its threads */
        compare_paths(1, 48, 700, 530, (int[]){L_ROW, L_ROW, L_ROW}, 1, 0, dt);
        compare_paths(1, 530, 700, 48, (int[]){L_COL, L_ROW, L_ROW}, 1, 1, dt);
        compare_paths(1, 530, 70, 48, (int[]){L_COL, L_ROW, L_COL}, -0.5, 0, dt);
        /* a linear layer's forward from 1024 rows (NT: x @ W^T), which float32 also sends to
         * oneDNN; with and without beta, and a column-major output (computed as its transpose) */
        compare_paths(1, 1100, 90, 70, (int[]){L_ROW, L_COL, L_ROW}, 1, 0, dt);
        compare_paths(1, 1030, 33, 260, (int[]){L_ROW, L_COL, L_ROW}, 0.5, -1, dt);
        compare_paths(1, 40, 1100, 70, (int[]){L_ROW, L_COL, L_COL}, 1, 0, dt);
        /* NT with 16-64 rows and large N, K, which float32 computes as its transpose on oneDNN:
         * A transposed first (K < 4N) or read as it is (K >= 4N), with beta, and with leading
         * dimensions above the widths */
        compare_paths(1, 64, 1000, 1024, (int[]){L_ROW, L_COL, L_ROW}, 1, 0, dt);
        compare_paths(1, 16, 1001, 1030, (int[]){L_WIDE, L_COL, L_WIDE}, -0.5, 2, dt);
        compare_paths(1, 37, 1000, 4100, (int[]){L_ROW, L_COL, L_ROW}, 1, 0, dt);
        compare_paths(1, 20, 1003, 4200, (int[]){L_WIDE, L_COL, L_WIDE}, 1.5, -1, dt);
    }
}

/* Products big enough for the library to be chosen by timing (gemm.c; on by default, off with
 * NABLA_GEMM_TUNE=0): every call
 * of a shape, the untimed first, the timed ones on OpenBLAS, oneDNN's sgemm, OpenBLAS on the
 * transposed product (K = 256 offers it) and, where it has its AVX-512 kernels, oneDNN's matmul
 * primitive (nabla's own kernel for few rows is not offered at 256 rows: test_gemm_rows), and the
 * ones after the choice, matches the reference, at 1 and 2 threads, with and
 * without beta on each way. */
static void test_gemm_tuned(void **state)
{
    int before = nb_cpu_gemm_tuned_shapes(), prev = nb_get_num_threads();
    static const int lays[3][3] = {{L_ROW, L_ROW, L_ROW}, {L_COL, L_ROW, L_ROW}, {L_ROW, L_COL, L_ROW}};
    for (int t = 1; t <= 2; t++) {
        NBT_OK(nb_set_num_threads(t));
        for (int call = 0; call < 13; call++) {
            for (int l = 0; l < 3; l++) /* NN, TN, NT: 2 M N K = 2^25; beta on calls 1 3 5 7 */
                compare_paths(1, 256, 256, 256, lays[l], 1, call % 2 == 1 ? 0.5 : 0, NB_FLOAT32);
            /* M != N: the transposed way's scratch is [N, M] */
            compare_paths(1, 384, 192, 256, lays[1], 1, call % 2 == 1 ? 0.5 : 0, NB_FLOAT32);
        }
    }
    NBT_OK(nb_set_num_threads(prev));
    /* nb_cpu_sgemm, the convolutions' entry: TN (a 1x1 layer's weight gradient) and NT, with a
     * leading dimension above the width, and beta on the odd calls, against a double loop */
    enum { D = 256, LD = 260 };
    float *a = malloc(sizeof(float) * D * LD), *b = malloc(sizeof(float) * D * LD), *c = malloc(sizeof(float) * D * LD),
          *c0 = malloc(sizeof(float) * D * LD);
    assert_true(a && b && c && c0);
    for (int i = 0; i < D * LD; i++) a[i] = (float)urand(), b[i] = (float)urand();
    for (int tr = 0; tr < 2; tr++)
        for (int call = 0; call < 13; call++) {
            char ta = tr ? 'N' : 'T', tb = tr ? 'T' : 'N';
            float beta = call % 2 == 1 ? 0.5f : 0.0f;
            memcpy(c0, c, sizeof(float) * D * LD);
            assert_int_equal(nb_cpu_sgemm(ta, tb, D, D, D, 1.0f, a, LD, b, LD, beta, c, LD), 0);
            for (int i = 0; i < D; i += 17)
                for (int j = 0; j < D; j += 13) {
                    double want = beta != 0 ? (double)beta * c0[i * LD + j] : 0;
                    for (int p = 0; p < D; p++)
                        want += (double)(tr ? a[i * LD + p] : a[p * LD + i]) * (double)(tr ? b[j * LD + p] : b[p * LD + j]);
                    if (fabs(c[i * LD + j] - want) > 1e-4 * (1 + fabs(want)))
                        fail_msg("nb_cpu_sgemm %c%c call %d: C[%d, %d] = %g, want %g", ta, tb, call, i, j,
                                 (double)c[i * LD + j], want);
                }
        }
    free(a), free(b), free(c), free(c0);
    /* the tuner is on unless NABLA_GEMM_TUNE is "0" */
    const char *e = getenv("NABLA_GEMM_TUNE");
    if (!(e && *e && strcmp(e, "0") == 0)) assert_int_equal(nb_cpu_gemm_tuned_shapes() - before, 10);
}

/* NT products of few rows, which float32 sends to oneDNN's matmul primitive by rule where it
 * has its AVX-512 kernels (gemm.c, few_rows_matmul): with leading dimensions above the widths,
 * alpha and beta, at 1 and 2 threads (a primitive per thread count), against the reference; and
 * that the primitive ran, where it is offered. */
static void test_few_rows_matmul(void **state)
{
    unsigned long long before = nb__dnnl_matmul_runs();
    int prev = nb_get_num_threads();
    for (int t = 1; t <= 2; t++) {
        NBT_OK(nb_set_num_threads(t));
        compare_paths(1, 64, 1024, 1024, (int[]){L_ROW, L_COL, L_ROW}, 1, 0, NB_FLOAT32);
        compare_paths(1, 16, 1030, 2050, (int[]){L_WIDE, L_COL, L_WIDE}, -0.5, 2, NB_FLOAT32);
        compare_paths(1, 40, 1000, 1024, (int[]){L_ROW, L_COL, L_ROW}, 1.5, 0.5, NB_FLOAT32);
    }
    NBT_OK(nb_set_num_threads(prev));
    if (nb__dnnl_matmul_available()) assert_true(nb__dnnl_matmul_runs() - before >= 6);
    /* where the primitive cannot be had, the product runs elsewhere, right: the kernel's path
     * and the convolutions' entry, nb_cpu_sgemm (which reports a failure to its caller) */
    nb__dnnl_matmul_set_refuse(true);
    before = nb__dnnl_matmul_runs();
    compare_paths(1, 48, 1024, 1100, (int[]){L_ROW, L_COL, L_ROW}, 1, 0, NB_FLOAT32);
    compare_paths(1, 32, 1000, 1024, (int[]){L_WIDE, L_COL, L_WIDE}, 0.5, 1, NB_FLOAT32);
    enum { M = 32, N = 1024, K = 1024 };
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * N * K), *c = malloc(sizeof(float) * M * N);
    assert_true(a && b && c);
    for (int i = 0; i < M * K; i++) a[i] = (float)urand();
    for (int i = 0; i < N * K; i++) b[i] = (float)urand();
    assert_int_equal(nb_cpu_sgemm('N', 'T', M, N, K, 1.0f, a, K, b, K, 0.0f, c, N), 0);
    for (int i = 0; i < M; i += 7)
        for (int j = 0; j < N; j += 61) {
            double want = 0;
            for (int p = 0; p < K; p++) want += (double)a[i * K + p] * (double)b[j * K + p];
            if (fabs(c[i * N + j] - want) > 1e-4 * (1 + fabs(want)))
                fail_msg("nb_cpu_sgemm NT refused matmul: C[%d, %d] = %g, want %g", i, j, (double)c[i * N + j], want);
        }
    free(a), free(b), free(c);
    nb__dnnl_matmul_set_refuse(false);
    assert_true(nb__dnnl_matmul_runs() == before);
}

/* A [b, m, n] bias for the gemm kernel's in[2]: kind 0 a row ([n], expanded: strides 0, 0, 1),
 * 1 a row with stride 2, 2 a full tensor, 3 a column ([m, 1], expanded: strides 0, 1, 0). */
static nb_tensor *bias_operand(int kind, int64_t b, int64_t m, int64_t n, nb_dtype dt)
{
    int64_t shape[3] = {b, m, n};
    switch (kind) {
    case 0: return NBT_CHECK(nb_expand(rand_tensor((int64_t[]){1, 1, n}, 3, dt), shape, 3));
    case 1: {
        nb_tensor *t = NBT_CHECK(nb_slice(rand_tensor((int64_t[]){1, 1, 2 * n}, 3, dt), 2, 0, 2 * n, 2));
        return NBT_CHECK(nb_expand(t, shape, 3));
    }
    case 2: return rand_tensor(shape, 3, dt);
    default: return NBT_CHECK(nb_expand(rand_tensor((int64_t[]){1, m, 1}, 3, dt), shape, 3));
    }
}

/* The gemm kernel with a bias (in[2]) against the reference run on out holding the bias, with
 * s1 1 (nb_cpu_gemm_reference adds the product to out). fail_at >= 0: that host allocation of
 * the kernel's fails (nb__cpu_alloc_fail_after). */
static void compare_bias_failing(int64_t b, int64_t m, int64_t n, int64_t k, const int *lay, int kind, double s0,
                                 nb_dtype dt, int fail_at)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor *x = operand(lay[0], b, m, k, dt), *y = operand(lay[1], b, k, n, dt);
    nb_tensor *bias = bias_operand(kind, b, m, n, dt);
    nb_tensor *o1 = operand(lay[2], b, m, n, dt), *o2 = operand(lay[2], b, m, n, dt);
    NBT_OK(nb_copy_(o2, bias));
    nb_kargs a1 = {.out = o1, .in = {x, y, bias}, .s0 = s0}, a2 = {.out = o2, .in = {x, y}, .s0 = s0, .s1 = 1};
    nb__cpu_alloc_fail_after(fail_at);
    nb_status st = nb_cpu_k_gemm(NB_OP_BMM, &a1);
    nb__cpu_alloc_fail_after(-1);
    NBT_OK(st);
    NBT_OK(nb_cpu_gemm_reference(&a2));
    char what[256];
    snprintf(what, sizeof what, "gemm with bias %d, %s [%lld, %lld, %lld] K %lld, a %s, b %s, out %s, s0 %g", kind,
             nb_dtype_name(dt), (long long)b, (long long)m, (long long)n, (long long)k, layout_names[lay[0]],
             layout_names[lay[1]], layout_names[lay[2]], s0);
    double tol = dt == NB_FLOAT32 ? 1e-6 : 1e-14;
    nbt_assert_close(o1, o2, dt == NB_FLOAT32 ? 1e-5 : 1e-12, tol * (double)(k + 1), what);
    nb_scope_end(sc);
}

static void compare_bias(int64_t b, int64_t m, int64_t n, int64_t k, const int *lay, int kind, double s0,
                         nb_dtype dt)
{
    compare_bias_failing(b, m, n, k, lay, kind, s0, dt, -1);
}

/* The gemm kernel's bias (a linear layer's, as nb_linear passes it on the CPU): a float32 row
 * into a row-major out of one batch goes with the product, on the matmul primitive in its
 * epilogue (by rule for NT products of few rows, or where the tuner picks it), on oneDNN's sgemm
 * as one more step of the inner dimension (by rule for NN products) or, on any other way,
 * copied into C inside the kernel; every other bias, layout, batch count and dtype is
 * copied into out first. Each against the reference. */
static void test_gemm_bias(void **state)
{
    static const int64_t dims[] = {0, 1, 2, 3, 7, 16, 33, 64};
    static const double scales[] = {1, 0.5, -2};
    for (int dti = 0; dti < 2; dti++)
        for (int trial = 0; trial < 200; trial++) {
            int64_t b = 1 + irand(2), m = dims[irand(8)], n = dims[irand(8)], k = dims[irand(8)];
            int lay[3] = {(int)irand(L_COUNT), (int)irand(L_COUNT), (int)irand(L_STRIDED + 1)};
            compare_bias(b, m, n, k, lay, (int)irand(4), scales[irand(3)], dti ? NB_FLOAT64 : NB_FLOAT32);
        }
    static const int nt[3] = {L_ROW, L_COL, L_ROW};
    int prev = nb_get_num_threads();
    for (int t = 1; t <= 2; t++) {
        NBT_OK(nb_set_num_threads(t));
        /* NT of few rows: the matmul primitive by rule, the bias in it where it has its kernels */
        unsigned long long before = nb__dnnl_matmul_runs();
        compare_bias(1, 32, 1000, 1024, nt, 0, 1, NB_FLOAT32);
        if (nb__dnnl_matmul_available()) assert_true(nb__dnnl_matmul_runs() - before == 1);
        compare_bias(1, 32, 1000, 1024, nt, 0, 0.5, NB_FLOAT32); /* alpha: the bias is copied first */
        compare_bias(1, 64, 1100, 1024, (int[]){L_WIDE, L_COL, L_WIDE}, 0, 1, NB_FLOAT32);
        /* a shape the tuner times (2 M N K = 2^25) on each of its ways, bias copied or fused */
        for (int call = 0; call < 13; call++) compare_bias(1, 128, 512, 256, nt, 0, 1, NB_FLOAT32);
    }
    NBT_OK(nb_set_num_threads(prev));
    /* oneDNN's sgemm with the bias as one more step of K (by rule: NN, TN, and NT from 1024 rows),
     * and a shape the tuner times where that pays */
    for (int l = 0; l < 3; l++) {
        static const int lays[3][3] = {{L_ROW, L_ROW, L_ROW}, {L_COL, L_ROW, L_ROW}, {L_ROW, L_COL, L_ROW}};
        compare_bias(1, l == 2 ? 1024 : 64, 64, 7, lays[l], 0, 1, NB_FLOAT32);
    }
    for (int call = 0; call < 13; call++) compare_bias(1, 512, 2048, 16, nt, 0, 1, NB_FLOAT32);
    /* no scratch for oneDNN's sgemm's widened operands (NN goes there by rule; K short beside M
     * and N, see widen_pays): the bias is copied */
    static const int nn[3] = {L_ROW, L_ROW, L_ROW};
    for (int f = 0; f < 2; f++) compare_bias_failing(1, 64, 64, 7, nn, 0, 1, NB_FLOAT32, f);
    /* no primitive for the shape: the bias is copied and the product runs elsewhere */
    nb__dnnl_matmul_set_refuse(true);
    compare_bias(1, 48, 1024, 1100, nt, 0, 1, NB_FLOAT32);
    nb__dnnl_matmul_set_refuse(false);
}

/* nb__dnnl_matmul itself against a double loop: more shapes than its cache holds, each called
 * twice (made, then found), every transpose pair, alpha and beta (C read only when beta is not
 * 0: a NaN in C survives beta 0 nowhere). */
static void test_dnnl_matmul_cache(void **state)
{
    enum { LD = 40 };
    float *a = malloc(sizeof(float) * LD * LD), *b = malloc(sizeof(float) * LD * LD);
    float *c = malloc(sizeof(float) * LD * LD), *c0 = malloc(sizeof(float) * LD * LD);
    assert_true(a && b && c && c0);
    for (int i = 0; i < LD * LD; i++) a[i] = (float)urand(), b[i] = (float)urand();
    for (int shape = 0; shape < 40; shape++)
        for (int call = 0; call < 2; call++) {
            int m = 1 + shape % 7 * 5, n = 1 + shape % 11 * 3, k = 1 + shape % 13 * 3;
            char ta = shape & 1 ? 'T' : 'N', tb = shape & 2 ? 'T' : 'N';
            float alpha = shape % 3 == 0 ? 1.0f : -0.75f, beta = shape % 4 == 0 ? 0.0f : 0.5f;
            for (int i = 0; i < LD * LD; i++) c[i] = beta != 0 ? (float)urand() : NAN;
            memcpy(c0, c, sizeof(float) * LD * LD);
            int st = nb__dnnl_matmul(ta, tb, m, n, k, alpha, a, LD, b, LD, beta, c, LD, NULL);
            if (st != 0) fail_msg("nb__dnnl_matmul %c%c %dx%dx%d: oneDNN status %d", ta, tb, m, n, k, st);
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    double want = beta != 0 ? (double)beta * c0[i * LD + j] : 0, s = 0;
                    for (int p = 0; p < k; p++)
                        s += (double)(ta == 'T' ? a[p * LD + i] : a[i * LD + p]) *
                             (double)(tb == 'T' ? b[j * LD + p] : b[p * LD + j]);
                    want += alpha * s;
                    if (!(fabs(c[i * LD + j] - want) <= 1e-5 * (1 + fabs(want))))
                        fail_msg("nb__dnnl_matmul %c%c %dx%dx%d alpha %g beta %g call %d: C[%d, %d] = %g, want %g", ta,
                                 tb, m, n, k, (double)alpha, (double)beta, call, i, j, (double)c[i * LD + j], want);
                }
        }
    free(a), free(b), free(c), free(c0);
}

/* nabla's own kernels (gemm_rows.c, gemm_thin.c, gemm_dot.c: ways of the gemm tuner where their
 * AVX-512 kernels run), each against a double loop over the sizes of its own case below, its
 * leading dimensions from lds, alpha, beta (0 with NaN in C: not read), at 1 and 2 threads; C
 * (rows 0 .. M + 5, ldc wide, 64-byte aligned) keeps its bits past M rows and N columns, and
 * where the kernel does not run it says so and writes nothing. A's element (i, p) is
 * a[p * lda + i] with ta, else a[i * lda + p]; B's (p, j) b[j * ldb + p] with tb, else
 * b[p * ldb + j]. */
typedef bool (*own_kernel)(int64_t, int64_t, int64_t, float, const float *, int64_t, const float *, int64_t, float,
                           float *, int64_t);
typedef struct own_case {
    const char *name;
    own_kernel fn;
    bool ta, tb;
    const int *ms, *ns, *ks;
    int nm, nn, nk;
    void (*lds)(int m, int n, int k, int trial, int *lda, int *ldb, int *ldc);
    int max_a, max_b, max_c; /* the operands' largest sizes in floats, C's with its 6 rows more */
    bool (*runs)(int m);     /* whether it runs here for M rows; NULL: where nb_cpu_avx512() */
} own_case;

static void check_own(const own_case *oc, const float *a, const float *b, int trial, int threads)
{
    int m = oc->ms[trial / (oc->nn * oc->nk) % oc->nm], n = oc->ns[trial / oc->nk % oc->nn], k = oc->ks[trial % oc->nk];
    int lda, ldb, ldc;
    oc->lds(m, n, k, trial, &lda, &ldb, &ldc);
    float alpha = trial % 3 ? 1.0f : -0.5f, beta = trial % 4 < 2 ? 0.0f : trial % 4 == 2 ? 1.0f : 0.25f;
    size_t span = (size_t)(m + 6) * ldc;
    assert_true(span <= (size_t)oc->max_c);
    float *c = aligned_alloc(64, (span * sizeof(float) + 63) / 64 * 64), *c0 = malloc(span * sizeof(float));
    assert_true(c && c0);
    for (size_t i = 0; i < span; i++) c[i] = beta != 0 ? (float)urand() : NAN;
    memcpy(c0, c, span * sizeof(float));
    bool ran = oc->fn(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    assert_int_equal(ran, oc->runs ? oc->runs(m) : nb_cpu_avx512());
    for (int i = 0; i < m + 6; i++)
        for (int j = 0; j < ldc; j++) {
            float got = c[i * ldc + j];
            if (!ran || i >= m || j >= n) { /* untouched: the same bits */
                if (memcmp(&got, &c0[i * ldc + j], sizeof got))
                    fail_msg("%s %dx%dx%d: C[%d, %d] written outside the product", oc->name, m, n, k, i, j);
                continue;
            }
            double want = beta != 0 ? (double)beta * c0[i * ldc + j] : 0, sum = 0;
            for (int p = 0; p < k; p++)
                sum += (double)(oc->ta ? a[p * lda + i] : a[i * lda + p]) *
                       (double)(oc->tb ? b[j * ldb + p] : b[p * ldb + j]);
            want += alpha * sum;
            if (!(fabs(got - want) <= 1e-5 * (1 + fabs(want)) * (1 + k / 64.0)))
                fail_msg("%s %dx%dx%d alpha %g beta %g, %d threads: C[%d, %d] = %g, want %g", oc->name, m, n, k,
                         (double)alpha, (double)beta, threads, i, j, (double)got, want);
        }
    free(c), free(c0);
}

static void run_own(const own_case *oc)
{
    float *a = malloc(sizeof(float) * oc->max_a), *b = malloc(sizeof(float) * oc->max_b);
    assert_true(a && b);
    for (int i = 0; i < oc->max_a; i++) a[i] = (float)urand();
    for (int i = 0; i < oc->max_b; i++) b[i] = (float)urand();
    int prev = nb_get_num_threads(), trials = oc->nm * oc->nn * oc->nk;
    for (int t = 1; t <= 2; t++) {
        NBT_OK(nb_set_num_threads(t));
        for (int trial = 0; trial < trials; trial++) check_own(oc, a, b, trial, t);
    }
    NBT_OK(nb_set_num_threads(prev));
    free(a), free(b);
}

#define COUNT(x) (int)(sizeof(x) / sizeof((x)[0]))

/* NN for few rows: M from 1 to 64 (each size of its last group of rows); N below, at and past its
 * blocks of 64 columns and its vectors of 16 and past a thread's chunk of 1024; K empty, below,
 * at and past its blocks of 64. Past its row bound it does not run. */
static void rows_lds(int m, int n, int k, int trial, int *lda, int *ldb, int *ldc)
{
    (void)m, (void)trial;
    *lda = k + 3, *ldb = n + 5, *ldc = n + 2;
}

static void test_gemm_rows(void **state)
{
    static const int ms[] = {1, 2, 3, 4, 5, 6, 7, 13, 16, 40, 64}, ns[] = {1, 15, 16, 17, 64, 70, 200, 1000, 2100},
                     ks[] = {0, 1, 63, 64, 65, 300};
    own_case oc = {"gemm_rows", nb_cpu_gemm_rows, false, false, ms, ns, ks, COUNT(ms), COUNT(ns), COUNT(ks),
                   rows_lds, 64 * 303, 300 * 2105, 70 * 2102, NULL};
    run_own(&oc);
    float x[16 * 16] = {0}, y[65 * 16];
    assert_false(nb_cpu_gemm_rows(65, 16, 16, 1.0f, x, 16, x, 16, 0.0f, y, 16));
}

/* TN for a short inner dimension (a weight gradient over a small batch), A [K, M], B [K, N]: M
 * below, at and past its groups of 6 rows, and past its threads' split by rows (96 a thread) and
 * its packed blocks of 768; N below, at and past its blocks of 64 columns and its vectors of 16; K
 * from 0 to its bound; C with a leading dimension of whole vectors on half the trials and larger
 * than 2 MB on some (its streaming stores). Past its bound on K it does not run. */
static void thin_lds(int m, int n, int k, int trial, int *lda, int *ldb, int *ldc)
{
    (void)k;
    *lda = m + 3, *ldb = n + 5, *ldc = trial % 2 ? n + 2 : (n + 15) / 16 * 16;
}

static void test_gemm_thin_k(void **state)
{
    static const int ms[] = {1, 5, 6, 7, 13, 100, 200, 1000}, ns[] = {1, 15, 16, 17, 64, 70, 200, 1000},
                     ks[] = {0, 1, 16, 63, 64};
    own_case oc = {"gemm_thin_k", nb_cpu_gemm_thin_k, true, false, ms, ns, ks, COUNT(ms), COUNT(ns), COUNT(ks),
                   thin_lds, 64 * 1003, 64 * 1005, 1006 * 1008, NULL};
    run_own(&oc);
    float x[65 * 16] = {0}, y[16 * 16];
    assert_false(nb_cpu_gemm_thin_k(16, 16, GEMM_THIN_MAX_K + 1, 1.0f, x, 16, x, 16, 0.0f, y, 16));
}

/* NT for few rows (a linear layer's forward on a small batch), A [M, K], B [N, K]: M below, at
 * and past its groups of rows (4 with AVX-512, 2 with AVX2) up to its bound (32 with AVX-512, 64
 * with AVX2: 40 and 64 run only there); N below, at and past its groups of 6, past a thread's
 * share and past the AVX2 kernel's chunks of 504 columns; K empty, below (7, 15: a lane short),
 * at and past its vectors of 8 and 16 and its blocks of 512. Past its bound on M it does not
 * run. */
static void dot_lds(int m, int n, int k, int trial, int *lda, int *ldb, int *ldc)
{
    (void)m;
    *lda = trial % 2 ? 1104 : k + 1, *ldb = k + 3, *ldc = n + 2;
}

static bool dot_runs(int m) { return m <= nb_cpu_gemm_dot_max_m(); }

static void test_gemm_dot(void **state)
{
    static const int ms[] = {1, 2, 3, 4, 5, 16, 32, 40, 64}, ns[] = {1, 5, 6, 7, 13, 200, 1000, 1100},
                     ks[] = {0, 1, 7, 15, 17, 512, 1100};
    own_case oc = {"gemm_dot", nb_cpu_gemm_dot, false, true, ms, ns, ks, COUNT(ms), COUNT(ns), COUNT(ks),
                   dot_lds, 64 * 1104, 1100 * 1103, 70 * 1102, dot_runs};
    run_own(&oc);
    int max = nb_cpu_gemm_dot_max_m();
    assert_true(max == (nb_cpu_avx512() ? GEMM_DOT_MAX_M : nb_cpu_avx2_fma() ? GEMM_DOT_AVX2_MAX_M : 0));
    float x[(GEMM_DOT_AVX2_MAX_M + 1) * 16] = {0}, y[(GEMM_DOT_AVX2_MAX_M + 1) * 16];
    assert_false(nb_cpu_gemm_dot(max + 1, 16, 16, 1.0f, x, 16, x, 16, 0.0f, y, 16));
    /* the AVX2 kernel's packed A out of memory: it says it did not run and writes nothing (the
     * caller then runs the product on OpenBLAS) */
    if (!nb_cpu_avx512() && max > 0) {
        for (int i = 0; i < 16 * 16; i++) y[i] = -3.0f;
        nb__cpu_alloc_fail_after(0);
        bool ran = nb_cpu_gemm_dot(16, 16, 16, 1.0f, x, 16, x, 16, 0.0f, y, 16);
        nb__cpu_alloc_fail_after(-1);
        assert_false(ran);
        for (int i = 0; i < 16 * 16; i++) assert_true(y[i] == -3.0f);
    }
}

/* NN and NT for many rows and a short inner dimension (gemm_avx2.c: the tuner's own way on CPUs
 * with AVX2 but not AVX-512), A [M, K], B [K, N] or [N, K]: M below, at and past its groups of 6
 * rows and split across 2 threads; N below, at and past its panels of 16 and past a group of 16
 * panels; K empty, below and past its blocks of 256. It runs wherever AVX2 and FMA are (its
 * offer to the tuner is narrower: nb_cpu_gemm_avx2_offered), and out of memory for B's panels
 * it says it did not run and writes nothing. */
static bool avx2_nn(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                    int64_t ldb, float beta, float *c, int64_t ldc)
{
    return nb_cpu_gemm_avx2('N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static bool avx2_nt(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                    int64_t ldb, float beta, float *c, int64_t ldc)
{
    return nb_cpu_gemm_avx2('T', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static bool avx2_runs(int m)
{
    (void)m;
    return nb_cpu_avx2_fma();
}

/* B [K, N] (NN) or [N, K] (NT): each leading dimension past its width */
static void nn_lds(int m, int n, int k, int trial, int *lda, int *ldb, int *ldc)
{
    (void)m, (void)trial;
    *lda = k + 3, *ldb = n + 5, *ldc = n + 2;
}

static void nt_lds(int m, int n, int k, int trial, int *lda, int *ldb, int *ldc)
{
    (void)m, (void)trial;
    *lda = k + 3, *ldb = k + 5, *ldc = n + 2;
}

static void test_gemm_avx2_short_k(void **state)
{
    static const int ms[] = {1, 5, 7, 13, 200}, ns[] = {1, 15, 17, 256, 300}, ks[] = {0, 1, 7, 257, 600};
    own_case nn = {"gemm_avx2 NN", avx2_nn, false, false, ms, ns, ks, COUNT(ms), COUNT(ns), COUNT(ks),
                   nn_lds, 200 * 603, 600 * 305, 206 * 302, avx2_runs};
    own_case nt = {"gemm_avx2 NT", avx2_nt, false, true, ms, ns, ks, COUNT(ms), COUNT(ns), COUNT(ks),
                   nt_lds, 200 * 603, 300 * 605, 206 * 302, avx2_runs};
    run_own(&nn);
    run_own(&nt);
    assert_true(nb_cpu_gemm_avx2_offered(GEMM_AVX2_MIN_M, GEMM_AVX2_MAX_N, GEMM_AVX2_MAX_K) ==
                (nb_cpu_avx2_fma() && !nb_cpu_avx512()));
    assert_false(nb_cpu_gemm_avx2_offered(GEMM_AVX2_MIN_M - 1, 16, 16));
    assert_false(nb_cpu_gemm_avx2_offered(GEMM_AVX2_MIN_M, GEMM_AVX2_MAX_N + 1, 16));
    assert_false(nb_cpu_gemm_avx2_offered(GEMM_AVX2_MIN_M, 16, GEMM_AVX2_MAX_K + 1));
    if (nb_cpu_avx2_fma()) {
        float x[16 * 16] = {0}, y[16 * 16];
        for (int i = 0; i < 16 * 16; i++) y[i] = -3.0f;
        nb__cpu_alloc_fail_after(0);
        bool ran = nb_cpu_gemm_avx2('T', 16, 16, 16, 1.0f, x, 16, x, 16, 0.0f, y, 16);
        nb__cpu_alloc_fail_after(-1);
        assert_false(ran);
        for (int i = 0; i < 16 * 16; i++) assert_true(y[i] == -3.0f);
    }
}

/* s1 == 0 never reads out (NaN stays out); K == 0 scales out by s1. */
static void test_overwrite_and_scale(void **state)
{
    nb_scope *sc = nb_scope_begin();
    for (int k = 0; k <= 3; k += 3) {
        for (int dti = 0; dti < 3; dti++) {
            nb_dtype dt = dti == 0 ? NB_FLOAT32 : dti == 1 ? NB_FLOAT64 : NB_INT64;
            nb_tensor_params p = nb_tensor_params_default();
            p.dtype = dt;
            nb_tensor *x = NBT_CHECK(nb_ones((int64_t[]){2, 2, k}, 3, &p));
            nb_tensor *y = NBT_CHECK(nb_ones((int64_t[]){2, k, 3}, 3, &p));
            nb_tensor *o = NBT_CHECK(nb_full((int64_t[]){2, 2, 3}, 3, dt == NB_INT64 ? 7 : NAN, &p));
            nb_kargs a = {.out = o, .in = {x, y}, .s0 = 2, .s1 = 0};
            NBT_OK(nb_cpu_k_gemm(NB_OP_BMM, &a));
            nbt_assert_close(o, NBT_CHECK(nb_full((int64_t[]){2, 2, 3}, 3, 2.0 * k, &p)), 0, 0, "s1 = 0 overwrites");
            a.s1 = 3;
            NBT_OK(nb_cpu_k_gemm(NB_OP_BMM, &a));
            nbt_assert_close(o, NBT_CHECK(nb_full((int64_t[]){2, 2, 3}, 3, 8.0 * k, &p)), 0, 0, "s1 = 3 scales");
        }
    }
    nb_scope_end(sc);
}

static bool is_avx512_core(const char *name)
{
    return !strcasecmp(name, "SkylakeX") || !strcasecmp(name, "Cooperlake") || !strcasecmp(name, "SapphireRapids");
}

/* The AVX-512 subsets OpenBLAS's SkylakeX kernels need. */
static bool cpu_avx512_core(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512cd");
}

/* At load time nabla moves OpenBLAS to AVX-512 kernels where the CPU has them. */
static void test_blas_core(void **state)
{
    (void)state;
    char orig[64];
    snprintf(orig, sizeof orig, "%s", nb_cpu_blas_corename());
    bool avx512 = cpu_avx512_core();
    print_message("OpenBLAS kernels: %s (AVX-512 %s, OPENBLAS_CORETYPE %s)\n", orig, avx512 ? "yes" : "no",
                  getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "unset");
    if (avx512 && !getenv("OPENBLAS_CORETYPE")) assert_true(is_avx512_core(orig));
    NBT_FAILS(nb_cpu_blas_select_core("") != NB_OK, NB_ERR_INVALID_ARG, "blas", NULL);
}

/* Switching OpenBLAS's kernels at run time (a DYNAMIC_ARCH build): both sets compute the same
 * products. Skipped, and reported so, where the library cannot switch. */
static void test_blas_core_switch(void **state)
{
    (void)state;
    char orig[64];
    snprintf(orig, sizeof orig, "%s", nb_cpu_blas_corename());
    bool avx512 = cpu_avx512_core();
    if (nb_cpu_blas_select_core("Haswell") != NB_OK) {
        print_message("OpenBLAS cannot switch kernels here (%s)\n", nb_last_error());
        skip();
    }
    assert_string_equal(nb_cpu_blas_corename(), "Haswell");
    for (int dti = 0; dti < 2; dti++)
        compare_paths(3, 70, 90, 50, (int[]){L_ROW, L_COL, L_ROW}, 1, 0.5, dti ? NB_FLOAT64 : NB_FLOAT32);
    if (avx512) {
        NBT_OK(nb_cpu_blas_select_core("SkylakeX"));
        compare_paths(3, 70, 90, 50, (int[]){L_COL, L_ROW, L_ROW}, 1, 0, NB_FLOAT32);
    }
    NBT_OK(nb_cpu_blas_select_core(orig));
    assert_string_equal(nb_cpu_blas_corename(), orig);
}

/* ---- hand-computed values and shapes ------------------------------------------------------ */

static nb_tensor *vals(const double *v, const int64_t *shape, int nd)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_FLOAT64;
    return NBT_CHECK(nb_to_dtype(NBT_CHECK(nb_tensor_from_data(v, shape, nd, &p)), NB_FLOAT32));
}

static void check_shape(nb_tensor *t, const int64_t *shape, int nd, const char *what)
{
    assert_non_null(t);
    if (nb_tensor_ndim(t) != nd || memcmp(nb_tensor_shape(t), shape, (size_t)nd * sizeof *shape) != 0) {
        print_error("%s: wrong shape (%d dims)\n", what, nb_tensor_ndim(t));
        fail();
    }
}

/* nb_linear's bias in each form it broadcasts from ([out], [1, out], [1], a single value, a
 * strided [out], a full [rows, out]), on float32 (a row goes into the product's kernel on the CPU)
 * and float64, against the product plus the bias by nb_add. */
static void test_linear_bias_forms(void **state)
{
    for (int dti = 0; dti < 2; dti++) {
        nb_scope *sc = nb_scope_begin();
        nb_dtype dt = dti ? NB_FLOAT64 : NB_FLOAT32;
        nb_tensor *x = rand_tensor((int64_t[]){3, 40, 300}, 3, dt), *w = rand_tensor((int64_t[]){130, 300}, 2, dt);
        nb_tensor *biases[6] = {
            rand_tensor((int64_t[]){130}, 1, dt),
            rand_tensor((int64_t[]){1, 130}, 2, dt),
            rand_tensor((int64_t[]){1}, 1, dt),
            rand_tensor(NULL, 0, dt),
            NBT_CHECK(nb_slice(rand_tensor((int64_t[]){260}, 1, dt), 0, 1, 260, 2)),
            rand_tensor((int64_t[]){40, 130}, 2, dt),
        };
        nb_tensor *prod = NBT_CHECK(nb_matmul(x, NBT_CHECK(nb_t(w))));
        for (int i = 0; i < 6; i++) {
            char what[64];
            snprintf(what, sizeof what, "linear %s, bias form %d", nb_dtype_name(dt), i);
            nbt_assert_close(nb_linear(x, w, biases[i]), NBT_CHECK(nb_add(prod, biases[i])), dti ? 1e-12 : 1e-5,
                             dti ? 1e-12 : 1e-4, what);
        }
        nb_scope_end(sc);
    }
}

static void test_hand_values(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor *a = vals((double[]){1, 2, 3, 4}, (int64_t[]){2, 2}, 2);
    nb_tensor *b = vals((double[]){5, 6, 7, 8}, (int64_t[]){2, 2}, 2);
    nb_tensor *want = vals((double[]){19, 22, 43, 50}, (int64_t[]){2, 2}, 2);
    nbt_assert_close(nb_mm(a, b), want, 0, 0, "mm 2x2");
    nbt_assert_close(nb_matmul(a, b), want, 0, 0, "matmul 2x2");
    nb_tensor *u = vals((double[]){1, 2, 3}, (int64_t[]){3}, 1), *v = vals((double[]){4, 5, 6}, (int64_t[]){3}, 1);
    nbt_assert_close(nb_matmul(u, v), vals((double[]){32}, NULL, 0), 0, 0, "dot");
    nb_tensor *w = vals((double[]){1, 0, 0, 1, 1, 1}, (int64_t[]){3, 2}, 2);
    nb_tensor *x = vals((double[]){1, 2}, (int64_t[]){1, 2}, 2);
    nb_tensor *bias = vals((double[]){1, 2, 3}, (int64_t[]){3}, 1);
    nbt_assert_close(nb_linear(x, w, bias), vals((double[]){2, 4, 6}, (int64_t[]){1, 3}, 2), 0, 0, "linear");
    nbt_assert_close(nb_addmm(bias, x, NBT_CHECK(nb_t(w)), 2, -1), vals((double[]){1, 2, 3}, (int64_t[]){1, 3}, 2), 0,
                     0, "addmm");
    nb_tensor_params p = nb_tensor_params_default();
    struct { int64_t a[4], b[4], out[4]; int na, nb, nout; } cases[] = {
        {{5}, {5}, {0}, 1, 1, 0},
        {{3, 5}, {5}, {3}, 2, 1, 1},
        {{5}, {5, 4}, {4}, 1, 2, 1},
        {{2, 3, 5}, {5}, {2, 3}, 3, 1, 2},
        {{5}, {2, 5, 4}, {2, 4}, 1, 3, 2},
        {{2, 1, 3, 4}, {5, 4, 2}, {2, 5, 3, 2}, 4, 3, 4},
        {{7, 1, 3, 4}, {1, 6, 4, 2}, {7, 6, 3, 2}, 4, 4, 4},
        {{0, 3, 4}, {4, 2}, {0, 3, 2}, 3, 2, 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        nb_tensor *ta = NBT_CHECK(nb_ones(cases[i].a, cases[i].na, &p));
        nb_tensor *tb = NBT_CHECK(nb_ones(cases[i].b, cases[i].nb, &p));
        nb_tensor *r = NBT_CHECK(nb_matmul(ta, tb));
        check_shape(r, cases[i].out, cases[i].nout, "matmul shape");
        nbt_assert_close(r, NBT_CHECK(nb_full(cases[i].out, cases[i].nout, (double)cases[i].a[cases[i].na - 1], &p)),
                         0, 0, "matmul of ones");
    }
    nb_scope_end(sc);
}

/* An operand is saved only when the other one needs a gradient, and is version-checked then. */
static void test_saved_operands(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor *a = nbt_leaf(rand_tensor((int64_t[]){3, 4}, 2, NB_FLOAT64));
    nb_tensor *b = rand_tensor((int64_t[]){4, 2}, 2, NB_FLOAT64);
    nb_tensor *out = NBT_CHECK(nb_mm(a, b));
    /* PyTorch's names: torch.mm(a, b).grad_fn is MmBackward0, torch.bmm's BmmBackward0 */
    assert_string_equal(nb_tensor_grad_fn_name(out), "MmBackward0");
    assert_string_equal(nb_tensor_grad_fn_name(NBT_CHECK(nb_matmul(a, b))), "MmBackward0");
    assert_string_equal(nb_tensor_grad_fn_name(NBT_CHECK(nb_bmm(NBT_CHECK(nb_unsqueeze(a, 0)), NBT_CHECK(nb_unsqueeze(b, 0))))),
                        "BmmBackward0");
    NBT_OK(nb_fill_(b, 1)); /* b is saved for a's gradient */
    NBT_FAILS(nb_backward(out, NBT_CHECK(nb_ones_like(out)), NB_BACKWARD_DEFAULT) != NB_OK, NB_ERR_AUTOGRAD,
              "modified by an in-place operation", "shape [4, 2]", "saved by mm", "version 1, expected 0", NULL);

    nb_tensor *a2 = rand_tensor((int64_t[]){3, 4}, 2, NB_FLOAT64);
    nb_tensor *b2 = nbt_leaf(rand_tensor((int64_t[]){4, 2}, 2, NB_FLOAT64));
    nb_tensor *out2 = NBT_CHECK(nb_matmul(a2, b2));
    NBT_OK(nb_fill_(a2, 1)); /* a2 is saved for b2's gradient */
    NBT_FAILS(nb_backward(out2, NBT_CHECK(nb_ones_like(out2)), NB_BACKWARD_DEFAULT) != NB_OK, NB_ERR_AUTOGRAD,
              "modified by an in-place operation", "shape [3, 4]", "saved by mm", "version 1, expected 0", NULL);

    /* b3 needs no gradient, so a3 is not saved: changing it leaves backward valid */
    nb_tensor *a3 = nbt_leaf(rand_tensor((int64_t[]){3, 4}, 2, NB_FLOAT64));
    nb_tensor *b3 = vals((double[]){1, 2, 3, 4, 5, 6, 7, 8}, (int64_t[]){4, 2}, 2);
    nb_tensor *out3 = NBT_CHECK(nb_mm(a3, NBT_CHECK(nb_to_dtype(b3, NB_FLOAT64))));
    bool prev = nb_set_grad_enabled(false);
    NBT_OK(nb_fill_(a3, 5));
    nb_set_grad_enabled(prev);
    NBT_OK(nb_backward(out3, NBT_CHECK(nb_ones_like(out3)), NB_BACKWARD_DEFAULT));
    nb_tensor *want = vals((double[]){3, 7, 11, 15, 3, 7, 11, 15, 3, 7, 11, 15}, (int64_t[]){3, 4}, 2);
    nbt_assert_close(nb_tensor_grad(a3), NBT_CHECK(nb_to_dtype(want, NB_FLOAT64)), 0, 0, "mm: grad of a = ones @ b^T");

    nb_tensor *x = nbt_leaf(rand_tensor((int64_t[]){3, 4}, 2, NB_FLOAT64));
    nb_tensor *w = rand_tensor((int64_t[]){2, 4}, 2, NB_FLOAT64);
    nb_tensor *y = NBT_CHECK(nb_linear(x, w, NULL));
    NBT_OK(nb_fill_(w, 0)); /* the weight is saved for x's gradient */
    NBT_FAILS(nb_backward(y, NBT_CHECK(nb_ones_like(y)), NB_BACKWARD_DEFAULT) != NB_OK, NB_ERR_AUTOGRAD,
              "modified by an in-place operation", "shape [2, 4]", "saved by linear", "version 1, expected 0", NULL);
    nb_scope_end(sc);
}

/* ---- errors ------------------------------------------------------------------------------- */

static void test_errors(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor_params p = nb_tensor_params_default();
#define T(...) NBT_CHECK(nb_zeros((int64_t[]){__VA_ARGS__}, sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), &p))
    nb_tensor *s0 = NBT_CHECK(nb_scalar_tensor(1, &p));
    NBT_FAILS(!nb_matmul(T(4, 784), T(128, 10)), NB_ERR_SHAPE, "matmul: inner dims differ (a [4, 784], b [128, 10])", NULL);
    NBT_FAILS(!nb_matmul(T(3), T(4)), NB_ERR_SHAPE, "matmul: inner dims differ", "[3]", "[4]", NULL);
    NBT_FAILS(!nb_matmul(T(2, 3, 4), T(5)), NB_ERR_SHAPE, "matmul: inner dims differ", "[2, 3, 4]", NULL);
    NBT_FAILS(!nb_matmul(s0, T(2, 3)), NB_ERR_SHAPE, "matmul", "at least 1 dim", "a []", "b [2, 3]", NULL);
    NBT_FAILS(!nb_matmul(T(3), s0), NB_ERR_SHAPE, "matmul", "at least 1 dim", NULL);
    NBT_FAILS(!nb_matmul(T(2, 3, 4), T(3, 4, 5)), NB_ERR_SHAPE, "matmul: batch dims do not broadcast",
              "a [2, 3, 4]", "b [3, 4, 5]", NULL);
    NBT_FAILS(!nb_mm(T(4, 784), T(128, 10)), NB_ERR_SHAPE, "mm: inner dims differ (a [4, 784], b [128, 10])", NULL);
    NBT_FAILS(!nb_mm(T(2, 3, 4), T(4, 2)), NB_ERR_SHAPE, "mm: expected 2-D", "[2, 3, 4]", NULL);
    NBT_FAILS(!nb_mm(s0, T(4, 2)), NB_ERR_SHAPE, "mm: expected 2-D", "a []", NULL);
    NBT_FAILS(!nb_bmm(T(2, 3, 4), T(3, 4, 5)), NB_ERR_SHAPE, "bmm: batch sizes differ (a [2, 3, 4], b [3, 4, 5])", NULL);
    NBT_FAILS(!nb_bmm(T(2, 3, 4), T(2, 5, 5)), NB_ERR_SHAPE, "bmm: inner dims differ (a [2, 3, 4], b [2, 5, 5])", NULL);
    NBT_FAILS(!nb_bmm(T(3, 4), T(4, 5)), NB_ERR_SHAPE, "bmm: expected 3-D", "a [3, 4]", NULL);
    NBT_FAILS(!nb_linear(T(4, 784), T(10, 128), NULL), NB_ERR_SHAPE,
              "linear: inner dims differ (x [4, 784], weight [10, 128])", NULL);
    NBT_FAILS(!nb_linear(T(4, 3), T(3), NULL), NB_ERR_SHAPE, "linear: weight must be 2-D", "[3]", NULL);
    NBT_FAILS(!nb_linear(s0, T(2, 1), NULL), NB_ERR_SHAPE, "linear: x must have at least 1 dim", NULL);
    NBT_FAILS(!nb_linear(T(4, 3), T(2, 3), T(3)), NB_ERR_SHAPE, "linear: bias [3] does not broadcast", "[4, 2]", NULL);
    NBT_FAILS(!nb_addmm(T(5), T(3, 4), T(4, 2), 1, 1), NB_ERR_SHAPE, "addmm: input [5] does not broadcast", "[3, 2]", NULL);
    NBT_FAILS(!nb_addmm(T(3, 2), T(3, 4), T(5, 2), 1, 1), NB_ERR_SHAPE, "addmm: inner dims differ", NULL);
    NBT_FAILS(!nb_addmm(T(3, 2), T(3), T(3, 2), 1, 1), NB_ERR_SHAPE, "addmm: expected 2-D", NULL);
    NBT_FAILS(!nb_matmul(NULL, T(2)), NB_ERR_INVALID_ARG, "matmul", "NULL", NULL);
    NBT_FAILS(!nb_linear(T(2), NULL, NULL), NB_ERR_INVALID_ARG, "linear", "NULL", NULL);
    NBT_FAILS(!nb_addmm(NULL, T(2, 2), T(2, 2), 1, 1), NB_ERR_INVALID_ARG, "addmm", "NULL", NULL);
    nb_tensor *d = NBT_CHECK(nb_to_dtype(T(3, 2), NB_FLOAT64));
    NBT_FAILS(!nb_mm(T(2, 3), d), NB_ERR_DTYPE, "mm: dtypes differ (a float32, b float64)", NULL);
    NBT_FAILS(!nb_linear(T(2, 2), T(3, 2), NBT_CHECK(nb_to_dtype(T(3), NB_FLOAT64))), NB_ERR_DTYPE,
              "linear: dtypes differ (x float32, bias float64)", NULL);
    nb_tensor *bl = NBT_CHECK(nb_to_dtype(T(2, 2), NB_BOOL));
    NBT_FAILS(!nb_matmul(bl, bl), NB_ERR_DTYPE, "matmul: dtype bool is not supported", NULL);
    nb_tensor *il = NBT_CHECK(nb_to_dtype(T(2, 2), NB_INT64));
    NBT_FAILS(!nb_addmm(il, il, il, 0.5, 1), NB_ERR_INVALID_ARG, "addmm: beta and alpha must be integers", "int64",
              NULL);
#undef T
    nb_scope_end(sc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pytorch_cases),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_blas_vs_reference),
        cmocka_unit_test(test_gemm_tuned),
        cmocka_unit_test(test_few_rows_matmul),
        cmocka_unit_test(test_gemm_bias),
        cmocka_unit_test(test_dnnl_matmul_cache),
        cmocka_unit_test(test_gemm_rows),
        cmocka_unit_test(test_gemm_thin_k),
        cmocka_unit_test(test_gemm_dot),
        cmocka_unit_test(test_gemm_avx2_short_k),
        cmocka_unit_test(test_overwrite_and_scale),
        cmocka_unit_test(test_blas_core), cmocka_unit_test(test_blas_core_switch),
        cmocka_unit_test(test_hand_values),
        cmocka_unit_test(test_linear_bias_forms),
        cmocka_unit_test(test_saved_operands),
        cmocka_unit_test(test_errors),
    };
    return NBT_RUN(tests);
}
