/* nabla_conv5: one 5x5 "same" convolution (stride 1, padding 2, channels-last float32), timed in
 * its three directions on oneDNN's direct kernels and on nabla's Winograd F(2x2, 5x5)
 * (src/cpu/ops/wino5.c), each the median of 5 runs after 2 warm-ups, in ms; and each
 * direction's largest difference between the two, relative to the direct result's largest
 * value. The evidence for nb_set_conv_algo's auto rule on 5x5 layers (docs/BENCHMARKS.md).
 *
 * usage: nabla_conv5 N C H OC   (square H x H images)
 * e.g.   OMP_NUM_THREADS=1 build-bench/bench/nabla_conv5 1024 32 15 32   (AlexNet-R's conv2) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cpu/dnnl_impl.h"
#include "cpu/wino5_impl.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Uniform in [-0.5, 0.5); leaked (the program is short-lived). */
static float *rnd(size_t n)
{
    float *p = malloc(n * sizeof *p);
    if (!p) {
        fprintf(stderr, "conv5: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) p[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    return p;
}

static double diff(const float *a, const float *b, size_t n)
{
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)a[i] - (double)b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? e / m : e;
}

typedef struct job {
    const nb_conv_geom *g;
    const float *x, *w, *b, *gy;
    float *out;
    float *gb;
    int dir;   /* 0 forward, 1 input gradient, 2 weight gradient */
    int wino;  /* 1: Winograd, 0: oneDNN's direct kernels */
} job;

static nb_status run(const job *j)
{
    switch (j->dir) {
    case 0:
        return j->wino ? nb__wino5_forward(j->g, j->x, j->w, j->b, false, j->out)
                       : nb__dnnl_conv_forward(j->g, j->x, j->w, j->b, false, j->out);
    case 1:
        return j->wino ? nb__wino5_backward_data(j->g, j->gy, j->w, j->out)
                       : nb__dnnl_conv_backward_data(j->g, j->gy, j->w, j->out);
    default:
        return j->wino ? nb__wino5_backward_weights(j->g, j->gy, j->x, j->out, j->gb)
                       : nb__dnnl_conv_backward_weights(j->g, j->gy, j->x, j->out, j->gb, false);
    }
}

static double time_ms(const job *j)
{
    double t[7];
    for (int r = 0; r < 7; r++) {
        double t0 = now();
        if (run(j) != NB_OK) {
            fprintf(stderr, "conv5: %s\n", nb_last_error());
            exit(1);
        }
        t[r] = (now() - t0) * 1e3;
    }
    qsort(t + 2, 5, sizeof t[0], cmp);
    return t[4];
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: nabla_conv5 N C H OC\n");
        return 2;
    }
    int64_t n = atoll(argv[1]), c = atoll(argv[2]), h = atoll(argv[3]), oc = atoll(argv[4]);
    if (n < 1 || c < 16 || h < 1 || oc < 16 || c % 16 || oc % 16) {
        fprintf(stderr, "conv5: N and H must be positive, C and OC multiples of 16\n");
        return 2;
    }
    nb_conv_geom g = {.n = n, .c = c, .h = h, .w = h, .oc = oc, .kh = 5, .kw = 5, .oh = h, .ow = h, .sh = 1,
                      .sw = 1, .ph = 2, .pw = 2, .dh = 1, .dw = 1, .groups = 1, .cl = 1};
    if (!nb__wino5_applies(&g, NB_CONV_ALGO_WINOGRAD)) {
        fprintf(stderr, "conv5: this CPU has no AVX-512F: the Winograd kernels do not run here\n");
        return 1;
    }
    size_t nx = (size_t)(n * c * h * h), ny = (size_t)(n * oc * h * h), nw = (size_t)(oc * c * 25);
    const float *x = rnd(nx), *w = rnd(nw), *b = rnd((size_t)oc), *gy = rnd(ny);
    size_t sizes[3] = {ny, nx, nw};
    static const char *const names[3] = {"forward", "input gradient", "weight gradient"};
    printf("N %lld, C %lld -> OC %lld, %lldx%lld, 5x5 (auto picks Winograd: %s)\n", (long long)n, (long long)c,
           (long long)oc, (long long)h, (long long)h, nb__wino5_applies(&g, NB_CONV_ALGO_AUTO) ? "yes" : "no");
    for (int d = 0; d < 3; d++) {
        float *o[2] = {rnd(sizes[d]), rnd(sizes[d])}, *gb[2] = {rnd((size_t)oc), rnd((size_t)oc)};
        double ms[2];
        for (int k = 0; k < 2; k++) {
            job j = {.g = &g, .x = x, .w = w, .b = b, .gy = gy, .out = o[k], .gb = gb[k], .dir = d, .wino = k};
            ms[k] = time_ms(&j);
        }
        printf("  %-16s direct %8.2f ms  winograd %8.2f ms  (%.2fx)  difference %.2g\n", names[d], ms[0], ms[1],
               ms[0] / ms[1], diff(o[1], o[0], sizes[d]));
    }
    return 0;
}
