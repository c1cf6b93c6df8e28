/* nabla_conv5: one channels-last float32 convolution timed on oneDNN's direct kernels and on
 * nabla's own, each the median of 5 runs after 2 warm-ups, in ms, with each direction's largest
 * difference between the two, relative to oneDNN's result's largest value:
 *   - with C a multiple of 16: a 5x5 "same" convolution (stride 1, padding 2) in its three
 *     directions against nabla's Winograd F(2x2, 5x5) (src/cpu/ops/wino.c), the evidence for
 *     nb_set_conv_algo's auto rule on 5x5 layers;
 *   - with C from 1 to 4: the weight gradient of a K x K convolution (stride S, padding P)
 *     against nabla's few-channel kernel (src/cpu/ops/stem.c).
 * (docs/BENCHMARKS.md.)
 *
 * usage: nabla_conv5 N C H OC [K S P]   (square H x H images; K S P default 5 1 2, only with C <= 4)
 * e.g.   OMP_NUM_THREADS=1 build-bench/bench/nabla_conv5 1024 32 15 32       (AlexNet-R's conv2)
 *        OMP_NUM_THREADS=1 build-bench/bench/nabla_conv5 16 3 224 64 7 2 3   (ResNet-50's stem) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cpu/dnnl_impl.h"
#include "cpu/stem_impl.h"
#include "cpu/wino_impl.h"
#include "bench_util.h"

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
    int own;   /* 1: nabla's kernels, 0: oneDNN's direct kernels */
    int stem;  /* nabla's: 1 the few-channel weight gradient, 0 Winograd */
} job;

static nb_status run(const job *j)
{
    switch (j->dir) {
    case 0:
        return j->own ? nb__wino_forward(j->g, j->x, j->w, j->b, false, j->out)
                      : nb__dnnl_conv_forward(j->g, j->x, j->w, j->b, false, j->out);
    case 1:
        return j->own ? nb__wino_backward_data(j->g, j->gy, j->w, j->out)
                      : nb__dnnl_conv_backward_data(j->g, j->gy, j->w, j->out);
    default:
        if (!j->own) return nb__dnnl_conv_backward_weights(j->g, j->gy, j->x, j->out, j->gb, false);
        return j->stem ? nb__stem_backward_weights(j->g, j->gy, j->x, j->out, j->gb)
                       : nb__wino_backward_weights(j->g, j->gy, j->x, j->out, j->gb);
    }
}

static double time_ms(const job *j)
{
    double t[7];
    for (int r = 0; r < 7; r++) {
        double t0 = bench_now();
        if (run(j) != NB_OK) {
            fprintf(stderr, "conv5: %s\n", nb_last_error());
            exit(1);
        }
        t[r] = (bench_now() - t0) * 1e3;
    }
    qsort(t + 2, 5, sizeof t[0], bench_cmp_double);
    return t[4];
}

int main(int argc, char **argv)
{
    if (argc != 5 && argc != 8) {
        fprintf(stderr, "usage: nabla_conv5 N C H OC [K S P]\n");
        return 2;
    }
    int64_t n = atoll(argv[1]), c = atoll(argv[2]), h = atoll(argv[3]), oc = atoll(argv[4]);
    int64_t k = argc == 8 ? atoll(argv[5]) : 5, s = argc == 8 ? atoll(argv[6]) : 1, p = argc == 8 ? atoll(argv[7]) : 2;
    bool stem = c <= 4;
    if (n < 1 || c < 1 || h < 1 || oc < 16 || oc % 16 || (!stem && (c % 16 || argc == 8)) || k < 1 || s < 1 ||
        p < 0 || h + 2 * p < k) {
        fprintf(stderr, "conv5: N, H, K and S must be positive, C from 1 to 4 or a multiple of 16 (then no K S P), "
                        "OC a multiple of 16, and H + 2P >= K\n");
        return 2;
    }
    int64_t oh = (h + 2 * p - k) / s + 1;
    nb_conv_geom g = {.n = n, .c = c, .h = h, .w = h, .oc = oc, .kh = k, .kw = k, .oh = oh, .ow = oh, .sh = s,
                      .sw = s, .ph = p, .pw = p, .dh = 1, .dw = 1, .groups = 1, .cl = 1};
    if (stem ? !nb__stem_fits(&g) : !nb__wino_applies(&g, NB_CONV_ALGO_WINOGRAD)) {
        fprintf(stderr, "conv5: this CPU lacks the instructions nabla's kernel needs here (%s)\n",
                stem ? "AVX2 and FMA" : "AVX-512F");
        return 1;
    }
    size_t nx = (size_t)(n * c * h * h), ny = (size_t)(n * oc * oh * oh), nw = (size_t)(oc * c * k * k);
    const float *x = rnd(nx), *w = rnd(nw), *b = rnd((size_t)oc), *gy = rnd(ny);
    size_t sizes[3] = {ny, nx, nw};
    static const char *const names[3] = {"forward", "input gradient", "weight gradient"};
    if (stem)
        printf("N %lld, C %lld -> OC %lld, %lldx%lld, %lldx%lld stride %lld padding %lld (few-channel weight gradient)\n",
               (long long)n, (long long)c, (long long)oc, (long long)h, (long long)h, (long long)k, (long long)k,
               (long long)s, (long long)p);
    else
        printf("N %lld, C %lld -> OC %lld, %lldx%lld, 5x5 (auto picks Winograd: %s)\n", (long long)n, (long long)c,
               (long long)oc, (long long)h, (long long)h, nb__wino_applies(&g, NB_CONV_ALGO_AUTO) ? "yes" : "no");
    for (int d = 0; d < 3; d++) {
        if (stem && d < 2) continue; /* the forward and input gradient stay on oneDNN */
        float *o[2] = {rnd(sizes[d]), rnd(sizes[d])}, *gb[2] = {rnd((size_t)oc), rnd((size_t)oc)};
        double ms[2];
        for (int r = 0; r < 2; r++) {
            job j = {.g = &g, .x = x, .w = w, .b = b, .gy = gy, .out = o[r], .gb = gb[r], .dir = d, .own = r,
                     .stem = stem};
            ms[r] = time_ms(&j);
        }
        printf("  %-16s direct %8.2f ms  %s %8.2f ms  (%.2fx)  difference %.2g\n", names[d], ms[0],
               stem ? "nabla's" : "winograd", ms[1], ms[0] / ms[1], diff(o[1], o[0], sizes[d]));
    }
    return 0;
}
