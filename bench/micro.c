/* nabla_micro: the core micro-benchmark (sgemm, add, mul, sum, softmax, cross entropy, NCHW ->
 * channels-last copies on float32, CPU).
 *
 * Each case is warmed up, then timed over at least --min-reps runs (clock_gettime MONOTONIC, one
 * nb_scope per run so the result is released inside the timed loop, as a PyTorch loop frees it);
 * it prints the median and the min/max of the per-run rate. bench/micro_torch.py times the same
 * cases the same way and prints the same lines; bench/run_micro.sh puts the two side by side.
 *
 * Output, one CSV line per case after '#' comment lines:
 *   impl,op,size,threads,unit,median,min,max,reps,other_cpu
 * other_cpu is how many CPUs other processes kept busy, on average, while the case ran (from
 * /proc/stat less this process's own CPU time; -1 when unknown): on a shared machine it tells a
 * clean figure from a disturbed one.
 * Rates: sgemm GFLOP/s (2 n^3 per run), linear GFLOP/s (2 M N K); add/mul GB/s (3 arrays x 4 bytes x n); sum GB/s (input
 * plus output bytes); softmax and to_channels_last (nb_contiguous_format of an NCHW tensor, as
 * PyTorch's x.contiguous(memory_format=torch.channels_last)) GB/s (read + write, 2 x 4 bytes x n);
 * cross_entropy (the forward, mean reduction, of logits [N, C] that require grad, against N
 * random targets, as a training step's loss: each side also writes what its backward keeps, nabla
 * the probabilities and PyTorch log_softmax's output) GB/s (read + write, 2 x 4 bytes x N C). A case whose op fails prints
 * "nan" and the error on a '#' line, so a partial library still gives a table.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "nabla/autograd.h"
#include "nabla/core.h"
#include "nabla/loss.h"
#include "nabla/ops.h"
#include "nabla/tensor.h"
#include "bench_util.h"

/* OpenBLAS's own report of its version and the kernels it picked (weak: absent without it). */
extern char *openblas_get_config(void) __attribute__((weak));
extern char *openblas_get_corename(void) __attribute__((weak));

typedef enum { OP_MM, OP_LINEAR, OP_ADD, OP_MUL, OP_SUM_ALL, OP_SUM_LAST, OP_SOFTMAX, OP_CE, OP_TO_CL } op_kind;

typedef struct bench_case {
    op_kind kind;
    const char *op;   /* the name printed and matched by --ops */
    const char *size; /* printed; micro_torch.py prints the same string */
    int64_t shape[4];
    int ndim;
} bench_case;

static const bench_case CASES[] = {
    {OP_MM, "sgemm", "256", {256, 256}, 2},
    {OP_MM, "sgemm", "512", {512, 512}, 2},
    {OP_MM, "sgemm", "1024", {1024, 1024}, 2},
    {OP_MM, "sgemm", "2048", {2048, 2048}, 2},
    {OP_MM, "sgemm", "4096", {4096, 4096}, 2},
    /* a linear layer's forward without bias, x [M, K] @ W^T (W [N, K]), shape {M, N, K}: the
     * fully connected layers of FCN-S (batch 64) and AlexNet-S (batch 16) */
    {OP_LINEAR, "linear", "64x2048x26752", {64, 2048, 26752}, 3},
    {OP_LINEAR, "linear", "64x26752x2048", {64, 26752, 2048}, 3},
    {OP_LINEAR, "linear", "64x2048x2048", {64, 2048, 2048}, 3},
    {OP_LINEAR, "linear", "16x4096x9216", {16, 4096, 9216}, 3},
    {OP_LINEAR, "linear", "16x4096x4096", {16, 4096, 4096}, 3},
    {OP_ADD, "add", "2^22", {1 << 22}, 1},
    {OP_ADD, "add", "2^24", {1 << 24}, 1},
    {OP_MUL, "mul", "2^22", {1 << 22}, 1},
    {OP_MUL, "mul", "2^24", {1 << 24}, 1},
    {OP_SUM_ALL, "sum_all", "2^24", {1 << 24}, 1},
    {OP_SUM_LAST, "sum_lastdim", "4096x4096", {4096, 4096}, 2},
    {OP_SOFTMAX, "softmax", "4096x4096", {4096, 4096}, 2},
    {OP_SOFTMAX, "softmax", "65536x128", {65536, 128}, 2},
    {OP_CE, "cross_entropy", "4096x10000", {4096, 10000}, 2},
    {OP_TO_CL, "to_channels_last", "1024x3x32x32", {1024, 3, 32, 32}, 4},
    {OP_TO_CL, "to_channels_last", "16x3x224x224", {16, 3, 224, 224}, 4},
    {OP_TO_CL, "to_channels_last", "16x64x56x56", {16, 64, 56, 56}, 4},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

typedef struct options {
    int threads;
    int min_reps;      /* timed runs at least */
    int max_reps;      /* timed runs at most */
    double target_s;   /* timed runs until about this many seconds (within the two bounds) */
    double warmup_s;   /* warm-up runs until this many seconds, and at least 2 */
    const char *ops;   /* comma-separated op names, NULL = all */
} options;

/* CPU seconds spent by every process (all CPUs, not idle) since boot, or -1. */
static double machine_busy_s(void) {
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[8] = {0};
    int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                       &v[4], &v[5], &v[6], &v[7])
              : 0;
    if (f) fclose(f);
    if (n < 8) return -1.0;
    long hz = sysconf(_SC_CLK_TCK);
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)(hz > 0 ? hz : 100);
}

static double own_cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

/* One run of the case on its inputs; returns the result (scope-owned) or NULL on failure. */
static nb_tensor *run_op(const bench_case *c, nb_tensor *a, nb_tensor *b) {
    static const int64_t last[1] = {-1};
    switch (c->kind) {
    case OP_MM: return nb_mm(a, b);
    case OP_LINEAR: return nb_linear(a, b, NULL);
    case OP_ADD: return nb_add(a, b);
    case OP_MUL: return nb_mul(a, b);
    case OP_SUM_ALL: return nb_sum(a, NULL, 0, false);
    case OP_SUM_LAST: return nb_sum(a, last, 1, false);
    case OP_SOFTMAX: return nb_softmax(a, -1);
    case OP_CE: return nb_cross_entropy(a, b, NULL);
    case OP_TO_CL: return nb_contiguous_format(a, NB_CHANNELS_LAST);
    }
    return NULL;
}

/* Work per run: FLOPs for sgemm, bytes moved for the rest. */
static double work_per_run(const bench_case *c) {
    double n = 1.0;
    for (int i = 0; i < c->ndim; i++) n *= (double)c->shape[i];
    switch (c->kind) {
    case OP_MM: return 2.0 * (double)c->shape[0] * (double)c->shape[0] * (double)c->shape[0];
    case OP_LINEAR: return 2.0 * (double)c->shape[0] * (double)c->shape[1] * (double)c->shape[2];
    case OP_ADD:
    case OP_MUL: return 3.0 * 4.0 * n;
    case OP_SUM_ALL: return 4.0 * n + 4.0;
    case OP_SUM_LAST: return 4.0 * n + 4.0 * (double)c->shape[0];
    case OP_SOFTMAX:
    case OP_CE:
    case OP_TO_CL: return 2.0 * 4.0 * n;
    }
    return 0.0;
}

/* Times one run, scope included: begin, op, end. Returns seconds, or -1 on failure. */
static double time_once(const bench_case *c, nb_tensor *a, nb_tensor *b) {
    double t0 = bench_now();
    nb_scope *s = nb_scope_begin();
    nb_tensor *r = run_op(c, a, b);
    nb_scope_end(s);
    double t1 = bench_now();
    return r ? t1 - t0 : -1.0;
}

static void print_result(const bench_case *c, int threads, double med, double lo, double hi, int reps,
                         double other) {
    printf("nabla,%s,%s,%d,%s,%.4g,%.4g,%.4g,%d,%.2f\n", c->op, c->size, threads,
           c->kind == OP_MM || c->kind == OP_LINEAR ? "GFLOP/s" : "GB/s", med, lo, hi, reps, other);
    fflush(stdout);
}

static int bench_one(const bench_case *c, const options *o) {
    nb_scope *outer = nb_scope_begin();
    bool lin = c->kind == OP_LINEAR, two = c->kind == OP_MM || lin || c->kind == OP_ADD || c->kind == OP_MUL;
    nb_tensor *a = lin ? nb_rand((int64_t[]){c->shape[0], c->shape[2]}, 2, NULL) : nb_rand(c->shape, c->ndim, NULL);
    nb_tensor *b = lin   ? nb_rand((int64_t[]){c->shape[1], c->shape[2]}, 2, NULL)
                   : two ? nb_rand(c->shape, c->ndim, NULL)
                         : NULL;
    if (c->kind == OP_CE) {
        b = nb_randint(0, c->shape[1], c->shape, 1, NULL);
        if (a && nb_tensor_set_requires_grad(a, true) != NB_OK) a = NULL;
        two = true;
    }
    int ok = a && (b || !two);
    double *t = NULL;
    int reps = 0;
    double busy0 = machine_busy_s(), own0 = own_cpu_s(), wall0 = bench_now();
    if (ok) {
        double w0 = bench_now(), last = 0.0;
        for (int i = 0; ok && (i < 2 || bench_now() - w0 < o->warmup_s); i++) {
            last = time_once(c, a, b);
            ok = last >= 0.0;
        }
        if (ok) {
            reps = (int)ceil(o->target_s / (last > 1e-9 ? last : 1e-9));
            reps = reps < o->min_reps ? o->min_reps : reps > o->max_reps ? o->max_reps : reps;
            t = malloc((size_t)reps * sizeof *t);
            ok = t != NULL;
        }
        for (int i = 0; ok && i < reps; i++) {
            t[i] = time_once(c, a, b);
            ok = t[i] >= 0.0;
        }
    }
    double busy1 = machine_busy_s(), wall = bench_now() - wall0;
    double other = busy0 < 0 || busy1 < 0 || wall <= 0 ? -1.0
                                                       : (busy1 - busy0 - (own_cpu_s() - own0)) / wall;
    if (other < 0 && other > -0.05) other = 0.0; /* clock-tick rounding */
    if (!ok) {
        printf("# nabla %s %s: %s\n", c->op, c->size, nb_last_error());
        print_result(c, o->threads, NAN, NAN, NAN, 0, other);
    } else {
        qsort(t, (size_t)reps, sizeof *t, bench_cmp_double);
        double med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
        double w = work_per_run(c) * 1e-9;
        /* the fastest run gives the highest rate */
        print_result(c, o->threads, w / med, w / t[reps - 1], w / t[0], reps, other);
    }
    free(t);
    nb_scope_end(outer);
    nb_clear_error();
    return ok;
}

static int op_selected(const char *ops, const char *op) {
    if (!ops) return 1;
    size_t n = strlen(op);
    for (const char *p = ops; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, op, n) == 0) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: nabla_micro [--threads N]\n"
            "                   [--ops sgemm,linear,add,mul,sum_all,sum_lastdim,softmax,cross_entropy,to_channels_last]\n"
            "                   [--min-reps N] [--max-reps N] [--target-s S] [--warmup-s S]\n"
            "Prints impl,op,size,threads,unit,median,min,max,reps,other_cpu per case (bench/micro.c).\n");
}

static int parse_args(int argc, char **argv, options *o) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (options){.threads = ncpu > 0 ? (int)ncpu : 1, .min_reps = 10, .max_reps = 200,
                   .target_s = 0.5, .warmup_s = 0.25, .ops = NULL};
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            usage(stdout);
            exit(0);
        }
        if (!val) goto bad;
        if (strcmp(arg, "--threads") == 0) o->threads = atoi(val);
        else if (strcmp(arg, "--ops") == 0) o->ops = val;
        else if (strcmp(arg, "--min-reps") == 0) o->min_reps = atoi(val);
        else if (strcmp(arg, "--max-reps") == 0) o->max_reps = atoi(val);
        else if (strcmp(arg, "--target-s") == 0) o->target_s = atof(val);
        else if (strcmp(arg, "--warmup-s") == 0) o->warmup_s = atof(val);
        else goto bad;
        i++;
    }
    if (o->threads < 1 || o->min_reps < 1 || o->max_reps < o->min_reps) goto bad;
    return 0;
bad:
    usage(stderr);
    return -1;
}

int main(int argc, char **argv) {
    options o;
    if (parse_args(argc, argv, &o) != 0) return 2;
    if (nb_set_num_threads(o.threads) != NB_OK) {
        fprintf(stderr, "nabla_micro: %s\n", nb_last_error());
        return 1;
    }
    printf("# nabla %s, threads %d\n", nb_version(), nb_get_num_threads());
    if (openblas_get_config)
        printf("# openblas %s, core %s, OPENBLAS_CORETYPE=%s\n", openblas_get_config(),
               openblas_get_corename ? openblas_get_corename() : "?",
               getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "(unset)");
    printf("impl,op,size,threads,unit,median,min,max,reps,other_cpu\n");
    nb_manual_seed(0);
    int failed = 0;
    for (int i = 0; i < N_CASES; i++)
        if (op_selected(o.ops, CASES[i].op)) failed += !bench_one(&CASES[i], &o);
    return failed ? 1 : 0;
}
