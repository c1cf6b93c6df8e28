/* nabla_cuda_micro: the GPU micro-benchmark (float32 on cuda:0): sgemm in float32 and TF32, the
 * device-to-device copy that bounds every memory-bound op, elementwise ops, a broadcast add, a
 * transposed copy, reductions and softmax. bench/cuda_micro_torch.py times the same cases with
 * PyTorch the same way and prints the same lines.
 *
 * Timing: each case is warmed up (cuBLAS handles, allocator blocks, clocks), then timed with CUDA
 * events: --samples samples (default 20) of R back-to-back calls each, R chosen from the warm-up
 * so that a sample lasts about --target-ms (default 20 ms). Every call runs in its own nb_scope,
 * so its result is freed inside the timed loop (as a PyTorch loop frees the result it drops) and
 * the caching allocator hands the same block back to the next call. The figure is the median over
 * the samples of the sample's time / R.
 *
 * Rates: sgemm TFLOP/s (2 m n k per call); the rest GB/s (1e9 bytes), counting each input read once
 * and the output written once: copy, relu, exp, transpose_copy, softmax 2 x 4 n; add, mul 3 x 4 n;
 * add_row 4 n + 4 x 4096 + 4 n; sum_all 4 n + 4; sum_lastdim, sum_dim0 4 n + 4 x 8192.
 * of_copy is a memory-bound case's rate over the copy's (the copy runs first when selected).
 *
 * Output: '#' comment lines (versions, device), then one table row per case:
 *   case, shape, median ms [min-max], reps per sample, rate, unit, of_copy
 * and with --json, after each row, one JSON object:
 *   {"impl":"nabla","case":...,"shape":...,"median_ms":...,"rate":...,"unit":...}
 * Without a GPU (or without the CUDA backend) it prints one line saying so and exits 0; a failing
 * nabla call prints nb_last_error() and exits 1.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/core.h"
#include "nabla/cuda.h"
#include "nabla/ops.h"
#include "nabla/tensor.h"
#include "bench_util.h"

typedef enum {
    K_MM,
    K_COPY,
    K_ADD,
    K_MUL,
    K_RELU,
    K_EXP,
    K_ADD_ROW,
    K_T_COPY,
    K_SUM_ALL,
    K_SUM_LAST,
    K_SUM_0,
    K_SOFTMAX
} op_kind;

typedef struct bench_case {
    op_kind kind;
    const char *name;  /* printed and matched by --cases */
    const char *shape; /* printed; cuda_micro_torch.py prints the same string */
    int64_t dims[2];   /* sgemm: m = n = k = dims[0]; else the (first) input's shape */
    int ndim;
    bool tf32; /* sgemm: nb_cuda_set_allow_tf32 */
} bench_case;

#define N64M (INT64_C(1) << 26)
#define ROW 4096

static const bench_case CASES[] = {
    {K_MM, "sgemm_fp32", "4096x4096x4096", {4096}, 2, false},
    {K_MM, "sgemm_fp32", "8192x8192x8192", {8192}, 2, false},
    {K_MM, "sgemm_tf32", "4096x4096x4096", {4096}, 2, true},
    {K_MM, "sgemm_tf32", "8192x8192x8192", {8192}, 2, true},
    {K_COPY, "copy", "2^26", {N64M}, 1, false},
    {K_ADD, "add", "2^26", {N64M}, 1, false},
    {K_MUL, "mul", "2^26", {N64M}, 1, false},
    {K_RELU, "relu", "2^26", {N64M}, 1, false},
    {K_EXP, "exp", "2^26", {N64M}, 1, false},
    {K_ADD_ROW, "add_row", "16384x4096+4096", {N64M / ROW, ROW}, 2, false},
    {K_T_COPY, "transpose_copy", "8192x8192^T", {8192, 8192}, 2, false},
    {K_SUM_ALL, "sum_all", "2^26", {N64M}, 1, false},
    {K_SUM_LAST, "sum_lastdim", "8192x8192", {8192, 8192}, 2, false},
    {K_SUM_0, "sum_dim0", "8192x8192", {8192, 8192}, 2, false},
    {K_SOFTMAX, "softmax", "8192x8192", {8192, 8192}, 2, false},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

typedef struct options {
    bool json;
    int samples;
    double target_ms; /* GPU time of one sample, roughly */
    const char *cases; /* comma-separated case names, NULL = all */
} options;

/* The inputs of one case: a (and b for the binary ops and sgemm), owned by the case's scope. */
typedef struct inputs {
    nb_tensor *a, *b;
} inputs;

/* Prints the failed call and nb_last_error(); returns 1 (the exit status). c may be NULL. */
static int fail(const bench_case *c, const char *what) {
    if (c)
        fprintf(stderr, "nabla_cuda_micro: %s %s: %s failed: %s\n", c->name, c->shape, what,
                nb_last_error());
    else fprintf(stderr, "nabla_cuda_micro: %s failed: %s\n", what, nb_last_error());
    return 1;
}

/* FLOPs (sgemm) or bytes moved (the rest) per call. */
static double work_per_call(const bench_case *c) {
    double n = 1.0; /* the (first) input's elements, for the memory-bound cases */
    for (int i = 0; i < c->ndim && c->kind != K_MM; i++) n *= (double)c->dims[i];
    switch (c->kind) {
    case K_MM: return 2.0 * (double)c->dims[0] * (double)c->dims[0] * (double)c->dims[0];
    case K_ADD:
    case K_MUL: return 3.0 * 4.0 * n;
    case K_ADD_ROW: return 2.0 * 4.0 * n + 4.0 * (double)ROW;
    case K_SUM_ALL: return 4.0 * n + 4.0;
    case K_SUM_LAST: return 4.0 * n + 4.0 * (double)c->dims[0];
    case K_SUM_0: return 4.0 * n + 4.0 * (double)c->dims[1];
    case K_COPY:
    case K_RELU:
    case K_EXP:
    case K_T_COPY:
    case K_SOFTMAX: return 2.0 * 4.0 * n;
    }
    return 0.0;
}

/* Random normal inputs on cuda:0 (never all zeros, so no kernel can shortcut). */
static int make_inputs(const bench_case *c, inputs *in) {
    nb_tensor_params p = nb_tensor_params_default();
    p.device = (nb_device){NB_DEVICE_CUDA, 0};
    in->a = in->b = NULL;
    if (c->kind == K_MM) {
        int64_t sq[2] = {c->dims[0], c->dims[0]};
        in->a = nb_randn(sq, 2, &p);
        in->b = nb_randn(sq, 2, &p);
        return in->a && in->b ? 0 : fail(c, "randn");
    }
    in->a = nb_randn(c->dims, c->ndim, &p);
    if (!in->a) return fail(c, "randn");
    if (c->kind == K_ADD || c->kind == K_MUL) {
        in->b = nb_randn(c->dims, c->ndim, &p);
        if (!in->b) return fail(c, "randn");
    } else if (c->kind == K_ADD_ROW) {
        int64_t row[1] = {ROW};
        in->b = nb_randn(row, 1, &p);
        if (!in->b) return fail(c, "randn");
    } else if (c->kind == K_T_COPY) {
        in->a = nb_t(in->a); /* the strided view, made once outside the timed loop */
        if (!in->a) return fail(c, "t");
    }
    return 0;
}

/* One call of the case; returns the result (scope-owned) or NULL with the error set. */
static nb_tensor *run_op(const bench_case *c, const inputs *in) {
    static const int64_t last[1] = {-1}, first[1] = {0};
    switch (c->kind) {
    case K_MM: return nb_mm(in->a, in->b);
    case K_COPY: return nb_clone(in->a);
    case K_ADD:
    case K_ADD_ROW: return nb_add(in->a, in->b);
    case K_MUL: return nb_mul(in->a, in->b);
    case K_RELU: return nb_relu(in->a);
    case K_EXP: return nb_exp(in->a);
    case K_T_COPY: return nb_contiguous(in->a);
    case K_SUM_ALL: return nb_sum(in->a, NULL, 0, false);
    case K_SUM_LAST: return nb_sum(in->a, last, 1, false);
    case K_SUM_0: return nb_sum(in->a, first, 1, false);
    case K_SOFTMAX: return nb_softmax(in->a, -1);
    }
    return NULL;
}

/* GPU milliseconds of `reps` back-to-back calls, between two events on the current stream. */
static int time_batch(const bench_case *c, const inputs *in, int reps, nb_event *e0, nb_event *e1,
                      double *ms) {
    if (nb_cuda_event_record(e0, NULL) != NB_OK) return fail(c, "cuda_event_record");
    for (int i = 0; i < reps; i++) {
        nb_scope *s = nb_scope_begin();
        if (!s) return fail(c, "scope_begin");
        nb_tensor *r = run_op(c, in);
        nb_scope_end(s);
        if (!r) return fail(c, c->name);
    }
    if (nb_cuda_event_record(e1, NULL) != NB_OK) return fail(c, "cuda_event_record");
    if (nb_cuda_event_synchronize(e1) != NB_OK) return fail(c, "cuda_event_synchronize");
    float f = 0.0f;
    if (nb_cuda_event_elapsed_ms(e0, e1, &f) != NB_OK) return fail(c, "cuda_event_elapsed_ms");
    *ms = (double)f;
    return 0;
}

typedef struct result {
    double median_ms, min_ms, max_ms, rate;
    int reps;
} result;

/* Warm-up, choice of R, then the samples; *r gets per-call milliseconds. */
static int measure(const bench_case *c, const inputs *in, const options *o, nb_event *e0, nb_event *e1,
                   result *r) {
    double ms = 0.0;
    for (int i = 0; i < 2; i++)
        if (time_batch(c, in, 1, e0, e1, &ms)) return 1;
    if (time_batch(c, in, 3, e0, e1, &ms)) return 1;
    double per_call = ms / 3.0 > 1e-4 ? ms / 3.0 : 1e-4;
    double reps = ceil(o->target_ms / per_call);
    r->reps = reps < 1.0 ? 1 : reps > 10000.0 ? 10000 : (int)reps;
    double *t = malloc((size_t)o->samples * sizeof *t);
    if (!t) {
        fprintf(stderr, "nabla_cuda_micro: out of host memory\n");
        return 1;
    }
    for (int i = 0; i < o->samples; i++) {
        if (time_batch(c, in, r->reps, e0, e1, &ms)) {
            free(t);
            return 1;
        }
        t[i] = ms / r->reps;
    }
    qsort(t, (size_t)o->samples, sizeof *t, bench_cmp_double);
    int n = o->samples;
    r->median_ms = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    r->min_ms = t[0];
    r->max_ms = t[n - 1];
    r->rate = work_per_call(c) / (r->median_ms * 1e-3) / (c->kind == K_MM ? 1e12 : 1e9);
    free(t);
    return 0;
}

static void print_row(const bench_case *c, const result *r, double copy_rate, bool json) {
    const char *unit = c->kind == K_MM ? "TFLOP/s" : "GB/s";
    char frac[16] = "-";
    if (c->kind != K_MM && copy_rate > 0.0) snprintf(frac, sizeof frac, "%.2f", r->rate / copy_rate);
    printf("%-15s %-16s %9.4f [%.4f-%.4f] %6d %10.1f %-8s %7s\n", c->name, c->shape, r->median_ms,
           r->min_ms, r->max_ms, r->reps, r->rate, unit, frac);
    if (json)
        printf("{\"impl\":\"nabla\",\"case\":\"%s\",\"shape\":\"%s\",\"median_ms\":%.6g,\"rate\":%.6g,"
               "\"unit\":\"%s\"}\n",
               c->name, c->shape, r->median_ms, r->rate, unit);
    fflush(stdout);
}

/* One case in its own scope (its inputs freed at the end); updates *copy_rate after the copy. */
static int bench_one(const bench_case *c, const options *o, nb_event *e0, nb_event *e1, double *copy_rate) {
    nb_scope *s = nb_scope_begin();
    if (!s) return fail(c, "scope_begin");
    nb_cuda_set_allow_tf32(c->tf32);
    inputs in;
    result r = {0};
    int rc = make_inputs(c, &in);
    if (!rc && nb_cuda_synchronize(0) != NB_OK) rc = fail(c, "cuda_synchronize");
    if (!rc) rc = measure(c, &in, o, e0, e1, &r);
    nb_cuda_set_allow_tf32(false);
    nb_scope_end(s);
    if (rc) return rc;
    if (c->kind == K_COPY) *copy_rate = r.rate;
    print_row(c, &r, *copy_rate, o->json);
    return 0;
}

static bool case_selected(const char *list, const char *name) {
    if (!list) return true;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

static void usage(FILE *f) {
    fprintf(f, "usage: nabla_cuda_micro [--json] [--samples N] [--target-ms MS] [--cases a,b,...]\n"
               "cases: sgemm_fp32 sgemm_tf32 copy add mul relu exp add_row transpose_copy sum_all\n"
               "       sum_lastdim sum_dim0 softmax (bench/cuda_micro.c)\n");
}

static int parse_args(int argc, char **argv, options *o) {
    *o = (options){.json = false, .samples = 20, .target_ms = 20.0, .cases = NULL};
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(arg, "--json") == 0) {
            o->json = true;
            continue;
        }
        if (!val) goto bad;
        if (strcmp(arg, "--samples") == 0) o->samples = atoi(val);
        else if (strcmp(arg, "--target-ms") == 0) o->target_ms = atof(val);
        else if (strcmp(arg, "--cases") == 0) o->cases = val;
        else goto bad;
        i++;
    }
    if (o->samples < 1 || !(o->target_ms > 0.0)) goto bad;
    return 0;
bad:
    usage(stderr);
    return -1;
}

/* '#' lines: nabla's version and the device, so that a log says what it measured. */
static int print_header(void) {
    nb_cuda_device_props p;
    if (nb_cuda_get_device_properties(0, &p) != NB_OK) return fail(NULL, "cuda_get_device_properties");
    printf("# nabla %s, cuda:0 %s (sm_%d%d, %d SMs, %.1f GiB), CUDA runtime %d, driver %d\n",
           nb_version(), p.name, p.major, p.minor, p.multi_processor_count,
           (double)p.total_memory / (1024.0 * 1024.0 * 1024.0), nb_cuda_runtime_version(),
           nb_cuda_driver_version());
    printf("%-15s %-16s %9s %-15s %6s %10s %-8s %7s\n", "case", "shape", "median_ms", "[min-max]", "reps",
           "rate", "unit", "of_copy");
    return 0;
}

int main(int argc, char **argv) {
    options o;
    if (parse_args(argc, argv, &o) != 0) return 2;
    if (!nb_cuda_is_built()) {
        printf("nabla_cuda_micro: nabla was built without the CUDA backend: no GPU to measure, skipped\n");
        return 0;
    }
    if (nb_cuda_device_count() == 0) {
        printf("nabla_cuda_micro: no CUDA GPU is present: nothing to measure, skipped\n");
        return 0;
    }
    if (nb_cuda_set_device(0) != NB_OK) return fail(NULL, "cuda_set_device");
    if (print_header()) return 1;
    nb_manual_seed(0);
    nb_event *e0 = nb_cuda_event_create(true), *e1 = nb_cuda_event_create(true);
    if (!e0 || !e1) {
        nb_cuda_event_free(e0);
        nb_cuda_event_free(e1);
        return fail(NULL, "cuda_event_create");
    }
    double copy_rate = 0.0;
    int rc = 0;
    for (int i = 0; i < N_CASES && !rc; i++)
        if (case_selected(o.cases, CASES[i].name)) rc = bench_one(&CASES[i], &o, e0, e1, &copy_rate);
    nb_cuda_event_free(e0);
    nb_cuda_event_free(e1);
    if (!rc && nb_cuda_synchronize(0) != NB_OK) rc = fail(NULL, "cuda_synchronize");
    return rc ? 1 : 0;
}
