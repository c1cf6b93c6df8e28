/* nabla_layout_scan: each op once on a contiguous (NCHW) and once on a channels-last float32
 * [N, C, H, W] tensor, the median (or the least) ms of CALLS calls after 2 warm-ups (nb_scope
 * around each call, the result freed in it), and the ratio channels-last / NCHW, marked "<<<"
 * above 1.5: where a layer or a user's own code on channels-last activations would fall off a
 * fast path (docs/BENCHMARKS.md, session 33). On a host whose other tenants disturb single calls,
 * the least of many calls is the steadier figure.
 *
 * usage: nabla_layout_scan [THREADS [N C H W [CALLS [median|min]]]]
 *        (default 1 thread, [128, 32, 28, 28], 7 calls, the median) */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nabla.h"
#include "bench_util.h"

static const char *const NAMES[] = {
    "neg",        "exp",         "tanh",          "sigmoid",  "relu",     "add",        "mul",
    "div",        "maximum",     "gt",            "add bias [1,C,1,1]",   "mul_scalar", "sum all",
    "sum 0,2,3",  "sum 1",       "sum 0",         "mean 0,2,3",           "var 0,2,3",  "softmax 1",
    "log_softmax 1", "max",      "argmax 1",      "max_dim 1", "clone",   "contiguous", "cat 1",
    "where",      "clamp",       "adaptive_avg_pool 1x1", "avg_pool 2x2",
};
enum { N_OPS = sizeof NAMES / sizeof NAMES[0] };

static nb_tensor *run(int k, const nb_tensor *x, const nb_tensor *y, const nb_tensor *b)
{
    static const int64_t d023[3] = {0, 2, 3}, d1[1] = {1}, d0[1] = {0}, k2[2] = {2, 2};
    switch (k) {
    case 0: return nb_neg(x);
    case 1: return nb_exp(x);
    case 2: return nb_tanh(x);
    case 3: return nb_sigmoid(x);
    case 4: return nb_relu(x);
    case 5: return nb_add(x, y);
    case 6: return nb_mul(x, y);
    case 7: return nb_div(x, y);
    case 8: return nb_maximum(x, y);
    case 9: return nb_gt(x, y);
    case 10: return nb_add(x, b);
    case 11: return nb_mul_scalar(x, 2);
    case 12: return nb_sum(x, NULL, 0, false);
    case 13: return nb_sum(x, d023, 3, false);
    case 14: return nb_sum(x, d1, 1, false);
    case 15: return nb_sum(x, d0, 1, false);
    case 16: return nb_mean(x, d023, 3, true);
    case 17: return nb_var(x, d023, 3, 1, false);
    case 18: return nb_softmax(x, 1);
    case 19: return nb_log_softmax(x, 1);
    case 20: return nb_max(x);
    case 21: return nb_argmax(x, 1, false);
    case 22: return nb_max_dim(x, 1, false, NULL);
    case 23: return nb_clone(x);
    case 24: return nb_contiguous(x);
    case 25: return nb_cat((nb_tensor *const[]){(nb_tensor *)x, (nb_tensor *)y}, 2, 1);
    case 26: return nb_where(nb_gt(x, y), x, y);
    case 27: return nb_clamp(x, -0.5, 0.5);
    case 28: return nb_adaptive_avg_pool2d(x, 1, 1);
    default: return nb_avg_pool2d(x, k2, NULL, NULL, false, true);
    }
}

int main(int argc, char **argv)
{
    int64_t shape[4] = {128, 32, 28, 28};
    int calls = argc > 6 ? atoi(argv[6]) : 7;
    bool least = argc > 7 && strcmp(argv[7], "min") == 0;
    if ((argc != 1 && argc != 2 && argc < 6) || argc > 8 || calls < 1 || calls > 1000 ||
        (argc > 7 && !least && strcmp(argv[7], "median") != 0)) {
        fprintf(stderr, "usage: nabla_layout_scan [THREADS [N C H W [CALLS [median|min]]]]\n");
        return 2;
    }
    if (argc > 1 && nb_set_num_threads(atoi(argv[1])) != NB_OK) {
        fprintf(stderr, "layout_scan: %s\n", nb_last_error());
        return 2;
    }
    for (int i = 0; argc >= 6 && i < 4; i++) shape[i] = atoll(argv[2 + i]);
    double ms[2][N_OPS], *t = malloc((size_t)(calls + 2) * sizeof *t);
    if (!t) return 1;
    for (int cl = 0; cl < 2; cl++) {
        nb_scope *outer = nb_scope_begin();
        nb_manual_seed(1);
        nb_tensor *x = nb_randn(shape, 4, NULL), *y = nb_randn(shape, 4, NULL);
        nb_tensor *b = nb_randn((int64_t[]){1, shape[1], 1, 1}, 4, NULL);
        if (cl && x && y) {
            x = nb_contiguous_format(x, NB_CHANNELS_LAST);
            y = nb_contiguous_format(y, NB_CHANNELS_LAST);
        }
        if (!x || !y || !b) {
            fprintf(stderr, "layout_scan: %s\n", nb_last_error());
            return 1;
        }
        for (int k = 0; k < N_OPS; k++) {
            for (int r = 0; r < calls + 2; r++) {
                nb_scope *s = nb_scope_begin();
                double t0 = bench_now();
                nb_tensor *o = run(k, x, y, b);
                t[r] = bench_now() - t0;
                if (!o) {
                    fprintf(stderr, "layout_scan: %s: %s\n", NAMES[k], nb_last_error());
                    return 1;
                }
                nb_scope_end(s);
            }
            qsort(t + 2, (size_t)calls, sizeof t[0], bench_cmp_double);
            ms[cl][k] = (least ? t[2] : calls % 2 ? t[2 + calls / 2] : 0.5 * (t[1 + calls / 2] + t[2 + calls / 2])) * 1e3;
        }
        nb_scope_end(outer);
    }
    free(t);
    printf("# nabla_layout_scan, [%lld, %lld, %lld, %lld] float32, %d thread(s), %s ms of %d\n", (long long)shape[0],
           (long long)shape[1], (long long)shape[2], (long long)shape[3], nb_get_num_threads(),
           least ? "least" : "median", calls);
    printf("%-24s %9s %9s %8s\n", "op", "NCHW", "ch-last", "ratio");
    for (int k = 0; k < N_OPS; k++)
        printf("%-24s %9.3f %9.3f %8.2f%s\n", NAMES[k], ms[0][k], ms[1][k], ms[1][k] / ms[0][k],
               ms[1][k] > 1.5 * ms[0][k] ? "  <<<" : "");
    return 0;
}
