/* nabla_gemm_ways: one float32 product C[M, N] = op(A) op(B) (row-major, beta 0) timed on each
 * way the gemm tuner chooses among (src/cpu/ops/gemm.c) and on two it does not time, best of R
 * runs after one warm-up, in ms and GFLOP/s:
 *   openblas    cblas_sgemm as it is;
 *   onednn      dnnl_sgemm as it is;
 *   transposed  cblas_sgemm on C^T = op(B)^T op(A)^T, into scratch transposed back (the
 *               tuner's third way; the transposes are inside the time);
 *   t-onednn    dnnl_sgemm on C^T the same way: for NT products of few rows, the route gemm.c
 *               takes by rule where oneDNN's matmul has no AVX-512 kernels (small_m_nt);
 *   matmul      oneDNN's matmul primitive (its brgemm kernels on AVX-512; made before the
 *               timing), the tuner's fourth way there;
 *   own         nabla's own kernel for the shape where it has one here (the tuner's fifth way,
 *               src/cpu/ops/gemm.c's own_offered: NT of few rows gemm_dot.c, with AVX-512 or
 *               AVX2; NN of few rows gemm_rows.c and TN of short K gemm_thin.c, with AVX-512;
 *               NN and NT of many rows and short K gemm_avx2.c, with AVX2 and not AVX-512),
 *               "-" where it has none;
 *   halves      with 2 threads or more: M split in two halves, each a 1-thread cblas_sgemm on
 *               its own thread, at once. It tells whether two cores give more on a product
 *               than OpenBLAS's own split does (docs/BENCHMARKS.md, session 16: they do not).
 * The thread count is OMP_NUM_THREADS (OpenBLAS's OpenMP build and oneDNN follow it).
 *
 * usage: nabla_gemm_ways [-r R] TT M N K [TT M N K ...]   (TT: NN, NT, TN or TT; R default 5)
 * e.g.   OMP_NUM_THREADS=2 build-bench/bench/nabla_gemm_ways TN 10000 256 4096 NN 4096 256 10000 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/blas_impl.h"
#include "nabla/core.h"
#include <time.h>

#include <oneapi/dnnl/dnnl.h>

#include "bench_util.h"

static float *random_floats(size_t n)
{
    float *p = malloc(n * sizeof *p);
    if (!p) return NULL;
    uint32_t s = 12345u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    return p;
}

/* out [cols, rows] = in [rows, cols], row-major, leading dimensions ldi and ldo */
static void transpose(const float *in, int ldi, float *out, int ldo, int rows, int cols)
{
    enum { TB = 32 };
#pragma omp parallel for schedule(static)
    for (int r0 = 0; r0 < rows; r0 += TB)
        for (int c0 = 0; c0 < cols; c0 += TB)
            for (int r = r0; r < r0 + TB && r < rows; r++)
                for (int c = c0; c < c0 + TB && c < cols; c++) out[(size_t)c * ldo + r] = in[(size_t)r * ldi + c];
}

typedef struct prob {
    CBLAS_TRANSPOSE ta, tb;
    int m, n, k, lda, ldb;
    const float *a, *b;
    float *c, *ct;
    dnnl_primitive_t mm; /* oneDNN's matmul for this problem, or NULL */
    dnnl_memory_t mem[3];
    dnnl_stream_t stream;
} prob;

/* p->mm and its memory objects: C = op(A) op(B), each operand row-major with its strides. */
static bool make_matmul(prob *p, dnnl_engine_t eng)
{
    dnnl_dims_t ad = {p->m, p->k}, bd = {p->k, p->n}, cd = {p->m, p->n};
    dnnl_dims_t as = {p->ta == CblasTrans ? 1 : p->lda, p->ta == CblasTrans ? p->lda : 1};
    dnnl_dims_t bs = {p->tb == CblasTrans ? 1 : p->ldb, p->tb == CblasTrans ? p->ldb : 1};
    dnnl_dims_t cs = {p->n, 1};
    dnnl_memory_desc_t a, b, c;
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    if (dnnl_memory_desc_init_by_strides(&a, 2, ad, dnnl_f32, as) || dnnl_memory_desc_init_by_strides(&b, 2, bd, dnnl_f32, bs) ||
        dnnl_memory_desc_init_by_strides(&c, 2, cd, dnnl_f32, cs) || dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) ||
        dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL))
        return false;
    bool ok = dnnl_primitive_create(&p->mm, pd) == dnnl_success &&
              dnnl_memory_create(&p->mem[0], &a, eng, (void *)p->a) == dnnl_success &&
              dnnl_memory_create(&p->mem[1], &b, eng, (void *)p->b) == dnnl_success &&
              dnnl_memory_create(&p->mem[2], &c, eng, p->c) == dnnl_success;
    dnnl_primitive_desc_destroy(pd);
    return ok;
}

static void free_matmul(prob *p)
{
    for (int i = 0; i < 3; i++)
        if (p->mem[i]) dnnl_memory_destroy(p->mem[i]);
    if (p->mm) dnnl_primitive_destroy(p->mm);
}

static CBLAS_TRANSPOSE flip(CBLAS_TRANSPOSE t) { return t == CblasTrans ? CblasNoTrans : CblasTrans; }

/* way 5: nabla's own kernel for p; false where it has none that runs here */
static bool run_own(const prob *p)
{
    if (p->ta == CblasNoTrans && nb_cpu_gemm_avx2_offered(p->m, p->n, p->k))
        return nb_cpu_gemm_avx2(p->tb == CblasTrans ? 'T' : 'N', p->m, p->n, p->k, 1.0f, p->a, p->lda, p->b, p->ldb,
                                0.0f, p->c, p->n);
    if (p->ta == CblasNoTrans && p->tb == CblasTrans)
        return nb_cpu_gemm_dot(p->m, p->n, p->k, 1.0f, p->a, p->lda, p->b, p->ldb, 0.0f, p->c, p->n);
    if (p->ta == CblasNoTrans && p->tb == CblasNoTrans)
        return nb_cpu_gemm_rows(p->m, p->n, p->k, 1.0f, p->a, p->lda, p->b, p->ldb, 0.0f, p->c, p->n);
    if (p->ta == CblasTrans && p->tb == CblasNoTrans)
        return nb_cpu_gemm_thin_k(p->m, p->n, p->k, 1.0f, p->a, p->lda, p->b, p->ldb, 0.0f, p->c, p->n);
    return false;
}

/* way 0 openblas, 1 onednn, 2 transposed, 3 t-onednn, 4 matmul, 5 own, 6 halves */
static void run(const prob *p, int way)
{
    switch (way) {
    case 5: run_own(p); break;
    case 3:
        dnnl_sgemm(p->tb == CblasTrans ? 'N' : 'T', p->ta == CblasTrans ? 'N' : 'T', p->n, p->m, p->k, 1.0f, p->b,
                   p->ldb, p->a, p->lda, 0.0f, p->ct, p->m);
        transpose(p->ct, p->m, p->c, p->n, p->n, p->m);
        break;
    case 4: {
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, p->mem[0]}, {DNNL_ARG_WEIGHTS, p->mem[1]}, {DNNL_ARG_DST, p->mem[2]}};
        if (p->mm) dnnl_primitive_execute(p->mm, p->stream, 3, args), dnnl_stream_wait(p->stream);
        break;
    }
    case 0:
        cblas_sgemm(CblasRowMajor, p->ta, p->tb, p->m, p->n, p->k, 1.0f, p->a, p->lda, p->b, p->ldb, 0.0f, p->c, p->n);
        break;
    case 1:
        dnnl_sgemm(p->ta == CblasTrans ? 'T' : 'N', p->tb == CblasTrans ? 'T' : 'N', p->m, p->n, p->k, 1.0f, p->a,
                   p->lda, p->b, p->ldb, 0.0f, p->c, p->n);
        break;
    case 2:
        cblas_sgemm(CblasRowMajor, flip(p->tb), flip(p->ta), p->n, p->m, p->k, 1.0f, p->b, p->ldb, p->a, p->lda, 0.0f,
                    p->ct, p->m);
        transpose(p->ct, p->m, p->c, p->n, p->n, p->m);
        break;
    default: {
        int half = (p->m / 2 + 15) / 16 * 16;
#pragma omp parallel num_threads(2)
        {
            int id = omp_get_thread_num(), m0 = id ? half : 0, mm = id ? p->m - half : half;
            /* row m0 of op(A): A's row m0 (N) or its column m0 (T) */
            const float *a = p->ta == CblasNoTrans ? p->a + (size_t)m0 * p->lda : p->a + m0;
            if (mm > 0)
                cblas_sgemm(CblasRowMajor, p->ta, p->tb, mm, p->n, p->k, 1.0f, a, p->lda, p->b, p->ldb, 0.0f,
                            p->c + (size_t)m0 * p->n, p->n);
        }
    }
    }
}

int main(int argc, char **argv)
{
    int reps = 5, i = 1;
    if (argc > 2 && !strcmp(argv[1], "-r")) {
        reps = atoi(argv[2]);
        i = 3;
    }
    if (reps < 1 || argc - i < 4 || (argc - i) % 4) {
        fprintf(stderr, "usage: nabla_gemm_ways [-r R] TT M N K [TT M N K ...]\n");
        return 2;
    }
    int threads = omp_get_max_threads();
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) || dnnl_stream_create(&stream, eng, dnnl_stream_default_flags)) {
        fprintf(stderr, "nabla_gemm_ways: no oneDNN CPU engine\n");
        return 1;
    }
    if (nb_set_num_threads(threads) != NB_OK) {
        fprintf(stderr, "nabla_gemm_ways: %s\n", nb_last_error());
        return 1;
    }
    printf("# %d thread%s, best of %d, ms (GFLOP/s)\n# shape              openblas          onednn"
           "           transposed        t-onednn          matmul            own%s\n",
           threads, threads == 1 ? "" : "s", reps, threads >= 2 ? "        halves" : "");
    for (; i + 3 < argc; i += 4) {
        const char *tt = argv[i];
        int m = atoi(argv[i + 1]), n = atoi(argv[i + 2]), k = atoi(argv[i + 3]);
        if (strlen(tt) != 2 || !strchr("NT", tt[0]) || !strchr("NT", tt[1]) || m < 1 || n < 1 || k < 1) {
            fprintf(stderr, "nabla_gemm_ways: bad problem \"%s %s %s %s\"\n", tt, argv[i + 1], argv[i + 2],
                    argv[i + 3]);
            return 2;
        }
        prob p = {.ta = tt[0] == 'T' ? CblasTrans : CblasNoTrans, .tb = tt[1] == 'T' ? CblasTrans : CblasNoTrans,
                  .m = m, .n = n, .k = k, .stream = stream};
        p.lda = p.ta == CblasTrans ? m : k;
        p.ldb = p.tb == CblasTrans ? k : n;
        float *a = random_floats((size_t)m * k), *b = random_floats((size_t)k * n);
        p.a = a, p.b = b;
        p.c = malloc((size_t)m * n * sizeof(float));
        p.ct = malloc((size_t)m * n * sizeof(float));
        float *ref = malloc((size_t)m * n * sizeof(float));
        if (!a || !b || !p.c || !p.ct || !ref) {
            fprintf(stderr, "nabla_gemm_ways: out of memory for %s %d %d %d\n", tt, m, n, k);
            return 1;
        }
        if (!make_matmul(&p, eng)) fprintf(stderr, "nabla_gemm_ways: no oneDNN matmul for %s %d %d %d\n", tt, m, n, k);
        printf("%s %5d %5d %5d", tt, m, n, k);
        for (int way = 0; way < (threads >= 2 ? 7 : 6); way++) {
            /* the warm-up call, which for the own kernel also tells whether it runs here */
            bool has = way == 5 ? run_own(&p) : way != 4 || p.mm;
            if (has && way != 5) run(&p, way);
            if (!has) {
                printf("  %17s", "-");
                continue;
            }
            double best = 1e30;
            for (int r = 0; r < reps; r++) {
                double t0 = bench_now();
                run(&p, way);
                double t = bench_now() - t0;
                best = t < best ? t : best;
            }
            printf("  %8.2f (%5.1f)", best * 1e3, 2.0 * m * n * k / best * 1e-9);
            /* every way's C against OpenBLAS's, which way 0 copies into ref */
            if (way == 0) memcpy(ref, p.c, (size_t)m * n * sizeof(float));
            double err = 0, scale = 0;
            for (size_t e = 0; e < (size_t)m * n; e++) {
                double d = fabs((double)p.c[e] - ref[e]);
                err = d > err ? d : err;
                scale = fabs(ref[e]) > scale ? fabs(ref[e]) : scale;
            }
            if (err > 1e-4 * scale + 1e-6) printf(" [C differs from OpenBLAS's by %.3g of %.3g]", err, scale);
        }
        printf("\n");
        fflush(stdout);
        free_matmul(&p);
        free(a), free(b), free(p.c), free(p.ct), free(ref);
    }
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(eng);
    return 0;
}
