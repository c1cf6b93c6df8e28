/* nabla_layer_time: one layer's forward and backward alone, on channels-last float32 activations,
 * timed per op by the host profiler (what docs/BENCHMARKS.md's session-10 figures for single
 * layers come from).
 *
 * usage: nabla_layer_time pool [THREADS [REPS]]
 *          AlexNet-R's two max pools ([1024, 32, 32, 32] and [1024, 32, 15, 15], 3x3 stride 2),
 *          each as max_pool2d, relu(max_pool2d) and max_pool2d_relu
 *        nabla_layer_time conv [THREADS [REPS [KERNEL]]]
 *          ResNet-50's convolutions at batch 16 (every distinct layer; with KERNEL 1 or 3 only
 *          the stride-2 ones of that kernel), forward, input gradient and weight gradient
 *        nabla_layer_time alexnet [THREADS [REPS]]
 *          AlexNet-S's convolutions at batch 16 and AlexNet-R's at batch 1024, as conv
 *        nabla_layer_time bn [THREADS [REPS]]
 *          ResNet-50's batch norms at batch 16 (every distinct shape), training mode, as
 *          batch_norm, batch_norm_relu and batch_norm_add_relu, forward and backward, with the
 *          GB/s of the passes' minimal traffic (forward: x read twice, y written, a residual
 *          read once; backward: g and x read twice, gx written, the residual's gradient written)
 *        nabla_layer_time lstm [THREADS [REPS]]
 *          DLBench's LSTM layers alone: nb_lstm over [32, 128, 256] (T, B, in), hidden 256, 2
 *          layers with biases, forward and backward (upstream gradient ones), per op: the
 *          cell kernels (their step products with W_hh inside) and the BMMs around them
 * Prints, per layer and op, the mean ms per call over REPS (default 5) after one warm-up, and
 * for convolutions the GFLOP/s of the direct algorithm's 2 N OH OW OC C KH KW. The upstream
 * gradient is channels-last ones; one nb_scope per repetition frees what it made. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/autograd.h"
#include "nabla/core.h"
#include "nabla/nn.h"
#include "nabla/ops.h"
#include "nabla/profiler.h"
#include "nabla/rnn.h"
#include "nabla/tensor.h"

#define MAX_ENTRIES 32

static void die(const char *what)
{
    fprintf(stderr, "layer_time: %s failed: %s\n", what, nb_last_error());
    exit(1);
}

static nb_tensor *cl_randn(int64_t n, int64_t c, int64_t h, int64_t w)
{
    nb_tensor *t = nb_randn((int64_t[]){n, c, h, w}, 4, NULL);
    nb_tensor *r = t ? nb_contiguous_format(t, NB_CHANNELS_LAST) : NULL;
    if (!r) die("randn");
    return r;
}

/* The profiler's mean ms per call of op (0 when it did not run). */
static double ms_per_call(const char *op)
{
    nb_profile_entry e[MAX_ENTRIES];
    int n = nb_profiler_entries(e, MAX_ENTRIES);
    for (int i = 0; i < n; i++)
        if (!strcmp(e[i].name, op)) return e[i].calls ? e[i].total_ms / (double)e[i].calls : 0;
    return 0;
}

/* Backward of y with channels-last ones, then the leaves' gradients dropped. */
static void backward(nb_tensor *y, nb_tensor **leaves, int n)
{
    nb_tensor *g = nb_ones_like(y);
    nb_tensor *gc = g ? nb_contiguous_format(g, NB_CHANNELS_LAST) : NULL;
    if (!gc || nb_backward(y, gc, NB_BACKWARD_DEFAULT) != NB_OK) die("backward");
    for (int i = 0; i < n; i++) nb_tensor_set_grad(leaves[i], NULL);
}

static void time_pools(int reps)
{
    const int64_t k[2] = {3, 3}, s[2] = {2, 2};
    const int64_t sides[2] = {32, 15};
    const char *forms[3] = {"max_pool2d", "relu(max_pool2d)", "max_pool2d_relu"};
    for (int p = 0; p < 2; p++)
        for (int f = 0; f < 3; f++) {
            nb_scope *outer = nb_scope_begin();
            nb_tensor *x = cl_randn(1024, 32, sides[p], sides[p]);
            nb_tensor_set_requires_grad(x, true);
            for (int r = 0; r <= reps; r++) {
                if (r == 1 && nb_profiler_start(NB_PROFILE_HOST) != NB_OK) die("profiler");
                nb_scope *sc = nb_scope_begin();
                nb_tensor *y = f == 2 ? nb_max_pool2d_relu(x, k, s, NULL, false) : nb_max_pool2d(x, k, s, NULL, false);
                if (y && f == 1) y = nb_relu(y);
                if (!y) die(forms[f]);
                backward(y, &x, 1);
                nb_scope_end(sc);
            }
            nb_profiler_stop();
            printf("pool [1024, 32, %lld, %lld] %-16s: forward %.2f ms, backward %.2f ms", (long long)sides[p],
                   (long long)sides[p], forms[f], ms_per_call("max_pool2d"), ms_per_call("max_pool2d_backward"));
            if (f == 1) printf(" (+ relu %.2f, threshold_backward %.2f)", ms_per_call("relu"), ms_per_call("threshold_backward"));
            printf("\n");
            nb_scope_end(outer);
        }
}

/* ResNet-50's distinct convolutions at 224x224: input channels, input side, output channels,
 * kernel, stride (the stride in the 3x3, as DLBENCH.md's canonical Torch net). */
static const int64_t RESNET50[][5] = {
    {3, 224, 64, 7, 2},      {64, 56, 64, 1, 1},     {64, 56, 64, 3, 1},    {64, 56, 256, 1, 1},
    {256, 56, 64, 1, 1},     {256, 56, 128, 1, 1},   {128, 56, 128, 3, 2},  {128, 28, 512, 1, 1},
    {256, 56, 512, 1, 2},    {512, 28, 128, 1, 1},   {128, 28, 128, 3, 1},  {512, 28, 256, 1, 1},
    {256, 28, 256, 3, 2},    {256, 14, 1024, 1, 1},  {512, 28, 1024, 1, 2}, {1024, 14, 256, 1, 1},
    {256, 14, 256, 3, 1},    {1024, 14, 512, 1, 1},  {512, 14, 512, 3, 2},  {512, 7, 2048, 1, 1},
    {1024, 14, 2048, 1, 2},  {2048, 7, 512, 1, 1},   {512, 7, 512, 3, 1},
};

/* AlexNet-S's convolutions (batch 16) and AlexNet-R's (batch 1024): batch, input channels, input
 * side, output channels, kernel, stride, padding. */
static const int64_t ALEXNET[][7] = {
    {16, 3, 224, 96, 11, 4, 2}, {16, 96, 27, 256, 5, 1, 2},  {16, 256, 13, 384, 3, 1, 1},
    {16, 384, 13, 384, 3, 1, 1}, {16, 384, 13, 256, 3, 1, 1}, {1024, 3, 32, 32, 5, 1, 2},
    {1024, 32, 15, 32, 5, 1, 2}, {1024, 32, 7, 64, 5, 1, 2},
};

/* One convolution layer's three ops, timed. */
static void time_conv(int reps, int64_t n, int64_t c, int64_t h, int64_t oc, int64_t k, int64_t st, int64_t pad)
{
    const char *ops[3] = {"conv2d", "conv2d_backward_input", "conv2d_backward_weight"};
    const char *label[3] = {"forward", "input grad", "weight grad"};
    nb_scope *outer = nb_scope_begin();
    nb_tensor *x = cl_randn(n, c, h, h);
    nb_tensor *w = nb_randn((int64_t[]){oc, c, k, k}, 4, NULL);
    if (!w) die("randn");
    nb_tensor_set_requires_grad(x, c > 3); /* the stem's input gradient is never needed */
    nb_tensor_set_requires_grad(w, true);
    nb_conv2d_params p = nb_conv2d_params_default();
    p.stride[0] = p.stride[1] = st;
    p.padding[0] = p.padding[1] = pad;
    for (int r = 0; r <= reps; r++) {
        if (r == 1 && nb_profiler_start(NB_PROFILE_HOST) != NB_OK) die("profiler");
        nb_scope *sc = nb_scope_begin();
        nb_tensor *y = nb_conv2d(x, w, NULL, &p);
        if (!y) die("conv2d");
        backward(y, (nb_tensor *[]){x, w}, 2);
        nb_scope_end(sc);
    }
    nb_profiler_stop();
    int64_t oh = (h + 2 * pad - k) / st + 1;
    double flops = 2.0 * (double)(n * oh * oh * oc * c * k * k);
    printf("conv %4lld -> %4lld at %3lldx%-3lld k%lld s%lld n%lld:", (long long)c, (long long)oc, (long long)h,
           (long long)h, (long long)k, (long long)st, (long long)n);
    for (int i = 0; i < 3; i++) {
        double ms = ms_per_call(ops[i]);
        if (ms > 0) printf("  %s %.2f ms (%.0f GFLOP/s)", label[i], ms, flops / ms / 1e6);
    }
    printf("\n");
    nb_scope_end(outer);
}

static void time_convs(int reps, int only_kernel)
{
    for (size_t l = 0; l < sizeof RESNET50 / sizeof RESNET50[0]; l++) {
        int64_t k = RESNET50[l][3], st = RESNET50[l][4];
        if (only_kernel && (k != only_kernel || st == 1)) continue;
        time_conv(reps, 16, RESNET50[l][0], RESNET50[l][1], RESNET50[l][2], k, st, k / 2);
    }
}

static void time_alexnet_convs(int reps)
{
    for (size_t l = 0; l < sizeof ALEXNET / sizeof ALEXNET[0]; l++)
        time_conv(reps, ALEXNET[l][0], ALEXNET[l][1], ALEXNET[l][2], ALEXNET[l][3], ALEXNET[l][4], ALEXNET[l][5],
                  ALEXNET[l][6]);
}

/* ResNet-50's distinct batch-norm shapes at batch 16: channels, side. */
static const int64_t RESNET50_BN[][2] = {
    {64, 112}, {64, 56}, {256, 56}, {128, 56}, {128, 28}, {512, 28},
    {256, 28}, {256, 14}, {1024, 14}, {512, 14}, {512, 7}, {2048, 7},
};

static void time_bns(int reps)
{
    const int64_t n = 16;
    const char *forms[3] = {"batch_norm", "batch_norm_relu", "batch_norm_add_relu"};
    for (size_t l = 0; l < sizeof RESNET50_BN / sizeof RESNET50_BN[0]; l++) {
        int64_t c = RESNET50_BN[l][0], h = RESNET50_BN[l][1];
        double mb = (double)(n * c * h * h) * 4 / 1e6;
        printf("bn %4lld at %3lldx%-3lld (%6.1f MB):", (long long)c, (long long)h, (long long)h, mb);
        for (int f = 0; f < 3; f++) {
            nb_scope *outer = nb_scope_begin();
            nb_tensor *x = cl_randn(n, c, h, h), *res = f == 2 ? cl_randn(n, c, h, h) : NULL;
            nb_tensor *w = nb_randn((int64_t[]){c}, 1, NULL), *b = nb_randn((int64_t[]){c}, 1, NULL);
            if (!w || !b) die("randn");
            nb_tensor *leaves[4] = {x, w, b, res};
            for (int i = 0; i < (res ? 4 : 3); i++) nb_tensor_set_requires_grad(leaves[i], true);
            for (int r = 0; r <= reps; r++) {
                if (r == 1 && nb_profiler_start(NB_PROFILE_HOST) != NB_OK) die("profiler");
                nb_scope *sc = nb_scope_begin();
                nb_tensor *y = f == 0   ? nb_batch_norm(x, NULL, NULL, w, b, true, 0.1, 1e-5)
                               : f == 1 ? nb_batch_norm_relu(x, NULL, NULL, w, b, true, 0.1, 1e-5)
                                        : nb_batch_norm_add_relu(x, res, NULL, NULL, w, b, true, 0.1, 1e-5);
                if (!y) die(forms[f]);
                backward(y, leaves, res ? 4 : 3);
                nb_scope_end(sc);
            }
            nb_profiler_stop();
            double fwd = ms_per_call("batch_norm"), bwd = ms_per_call("batch_norm_backward");
            printf("  %s %.2f / %.2f ms (%.0f / %.0f GB/s)", f == 0 ? "plain" : f == 1 ? "relu" : "add_relu", fwd, bwd,
                   mb * (3 + (f == 2)) / fwd, mb * (5 + (f == 2)) / bwd);
            nb_scope_end(outer);
        }
        printf("\n");
    }
}

static void time_lstm(int reps)
{
    nb_scope *outer = nb_scope_begin();
    nb_lstm_params lp = nb_lstm_params_default();
    lp.hidden_size = 256;
    nb_tensor *w[8];
    if (nb_lstm_init_weights(256, 2, &lp, NULL, w) != NB_OK) die("lstm weights");
    nb_tensor *x = nb_randn((int64_t[]){32, 128, 256}, 3, NULL);
    if (!x) die("randn");
    for (int r = 0; r <= reps; r++) {
        if (r == 1 && nb_profiler_start(NB_PROFILE_HOST) != NB_OK) die("profiler");
        nb_scope *sc = nb_scope_begin();
        nb_tensor *y = nb_lstm(x, NULL, NULL, w, 8, 2, &lp, NULL, NULL);
        nb_tensor *g = y ? nb_ones_like(y) : NULL;
        if (!g || nb_backward(y, g, NB_BACKWARD_DEFAULT) != NB_OK) die("lstm");
        for (int i = 0; i < 8; i++) nb_tensor_set_grad(w[i], NULL);
        nb_scope_end(sc);
    }
    nb_profiler_stop();
    const char *ops[] = {"lstm_cell", "lstm_cell_backward", "bmm"};
    printf("lstm [32, 128, 256], hidden 256, 2 layers:");
    for (int i = 0; i < 3; i++) printf("  %s %.3f ms/call", ops[i], ms_per_call(ops[i]));
    printf("\n");
    nb_scope_end(outer);
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "pool") && strcmp(argv[1], "conv") && strcmp(argv[1], "bn") &&
                     strcmp(argv[1], "alexnet") && strcmp(argv[1], "lstm"))) {
        fprintf(stderr, "usage: nabla_layer_time pool|conv|alexnet|bn|lstm [THREADS [REPS [KERNEL]]]\n");
        return 2;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 1, reps = argc > 3 ? atoi(argv[3]) : 5;
    int only = argc > 4 ? atoi(argv[4]) : 0;
    if (threads < 1 || reps < 1 || nb_set_num_threads(threads) != NB_OK) {
        fprintf(stderr, "layer_time: bad thread count %d or repetitions %d\n", threads, reps);
        return 2;
    }
    printf("# nabla_layer_time %s, %d thread(s), mean of %d after 1 warm-up\n", argv[1], threads, reps);
    if (!strcmp(argv[1], "pool")) time_pools(reps);
    else if (!strcmp(argv[1], "bn")) time_bns(reps);
    else if (!strcmp(argv[1], "alexnet")) time_alexnet_convs(reps);
    else if (!strcmp(argv[1], "lstm")) time_lstm(reps);
    else time_convs(reps, only);
    return 0;
}
