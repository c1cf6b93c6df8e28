/* nabla_step_product: the LSTM cell kernel's step product (src/cpu/ops/rnn.c), C_t = A_t B for
 * T steps with one B, A_t [M, K], B [K, N], row-major, beta 0, timed on each way the kernel has
 * had: OpenBLAS's cblas_sgemm and oneDNN's dnnl_sgemm at each step (both pack B inside every
 * call), and nabla's AVX2 kernel with B packed once for the run (gemm_avx2.c; the pack inside the
 * time). With THREADS 2 or more the steps run inside one OpenMP region, each thread its share of
 * the rows on that thread alone, as the cell kernel runs them (the libraries then run on one
 * thread; with THREADS 1 all three run on one thread). Prints, per way, the best of R runs in ms
 * a step and GFLOP/s. In the network the cells run between the steps, and there oneDNN's call
 * lost more than here (docs/BENCHMARKS.md, session 43).
 *
 * usage: nabla_step_product [-r R] [-t THREADS] M N K [T]   (R default 9, THREADS 1, T 32)
 * e.g.   build-bench/bench/nabla_step_product -t 2 128 1024 256   (the DLBench LSTM's forward) */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include "bench_util.h"
#include "cpu/blas_impl.h"

enum { WAY_OPENBLAS, WAY_ONEDNN, WAY_OWN, WAYS };
static const char *NAMES[WAYS] = {"openblas", "onednn", "nabla avx2, B packed once"};

typedef struct job {
    int64_t m, n, k, T;
    const float *a, *b; /* a: T x [m, k] */
    float *c;           /* T x [m, n] */
} job;

/* The T steps on rows [r0, r1) on the calling thread; 0, or 1 when a library call failed. */
static int steps(const job *j, int way, int64_t r0, int64_t r1, const nb_cpu_avx2_b *pb)
{
    int64_t m = r1 - r0;
    for (int64_t t = 0; t < j->T && m > 0; t++) {
        const float *a = j->a + (t * j->m + r0) * j->k;
        float *c = j->c + (t * j->m + r0) * j->n;
        if (way == WAY_OPENBLAS)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)j->n, (int)j->k, 1.0f, a, (int)j->k,
                        j->b, (int)j->n, 0.0f, c, (int)j->n);
        else if (way == WAY_ONEDNN && dnnl_sgemm('N', 'N', m, j->n, j->k, 1.0f, a, j->k, j->b, j->n, 0.0f, c,
                                                 j->n) != dnnl_success)
            return 1;
        else if (way == WAY_OWN)
            nb_cpu_gemm_avx2_packed(m, a, j->k, pb, c, j->n);
    }
    return 0;
}

/* One run of the way over all rows (split across threads inside one region); seconds, < 0 when
 * the way does not run here. */
static double run(const job *j, int way, int threads)
{
    double t0 = bench_now();
    nb_cpu_avx2_b *pb = NULL;
    if (way == WAY_OWN && !(pb = nb_cpu_avx2_pack_b(j->k, j->n, j->b, j->n))) return -1;
    int failed = 0;
    if (threads == 1) {
        failed = steps(j, way, 0, j->m, pb);
    } else {
#pragma omp parallel num_threads(threads) reduction(| : failed)
        {
            int64_t id = omp_get_thread_num(), nt = omp_get_num_threads();
            failed |= steps(j, way, j->m * id / nt, j->m * (id + 1) / nt, pb);
        }
    }
    double dt = bench_now() - t0;
    nb_cpu_avx2_b_free(pb);
    return failed ? -1 : dt;
}

int main(int argc, char **argv)
{
    int reps = 9, threads = 1, i = 1;
    while (i + 1 < argc && argv[i][0] == '-') {
        if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else break;
        i += 2;
    }
    if (argc - i < 3 || reps < 1 || threads < 1) {
        fprintf(stderr, "usage: nabla_step_product [-r R] [-t THREADS] M N K [T]\n");
        return 2;
    }
    omp_set_num_threads(threads); /* oneDNN follows OpenMP's count; OpenBLAS keeps its own */
    openblas_set_num_threads(threads);
    job j = {atoll(argv[i]), atoll(argv[i + 1]), atoll(argv[i + 2]), argc - i > 3 ? atoll(argv[i + 3]) : 32, 0, 0, 0};
    if (j.m < 1 || j.n < 1 || j.k < 1 || j.T < 1) {
        fprintf(stderr, "step_product: sizes must be >= 1\n");
        return 2;
    }
    float *a = malloc(sizeof(float) * (size_t)(j.T * j.m * j.k)), *b = malloc(sizeof(float) * (size_t)(j.k * j.n));
    float *c = malloc(sizeof(float) * (size_t)(j.T * j.m * j.n));
    if (!a || !b || !c) {
        fprintf(stderr, "step_product: out of memory\n");
        return 1;
    }
    unsigned s = 12345u;
    for (int64_t q = 0; q < j.T * j.m * j.k; q++) s = s * 1664525u + 1013904223u, a[q] = (float)(s >> 8) * 0x1p-24f - 0.5f;
    for (int64_t q = 0; q < j.k * j.n; q++) s = s * 1664525u + 1013904223u, b[q] = (float)(s >> 8) * 0x1p-24f - 0.5f;
    memset(c, 0, sizeof(float) * (size_t)(j.T * j.m * j.n));
    j.a = a, j.b = b, j.c = c;
    printf("# [%lld, %lld] x [%lld, %lld], %lld steps, %d thread(s), best of %d, ms a step (GFLOP/s)\n",
           (long long)j.m, (long long)j.k, (long long)j.k, (long long)j.n, (long long)j.T, threads, reps);
    for (int way = 0; way < WAYS; way++) {
        double best = -1;
        for (int r = 0; r <= reps; r++) { /* the first run warms up */
            double t = run(&j, way, threads);
            if (t < 0) break;
            if (r > 0 && (best < 0 || t < best)) best = t;
        }
        if (best < 0) printf("%-28s does not run here\n", NAMES[way]);
        else
            printf("%-28s %8.3f ms (%5.1f)\n", NAMES[way], best / (double)j.T * 1e3,
                   2.0 * (double)(j.m * j.n * j.k) * (double)j.T / best * 1e-9);
    }
    free(a), free(b), free(c);
    return 0;
}
