/* Times a data-parallel training step: run under `mpiexec -n R`, each rank takes 1/R of the
 * global mini-batch, and DistributedDataParallel averages the gradients (nabla/dist.h). With
 * one process it times the plain step (no wrapper). bench/ddp_torch.py is the PyTorch twin
 * (DistributedDataParallel on gloo); bench/ddp_compare.sh runs both side by side.
 *
 *   mpiexec -n 2 build-bench/bench/nabla_ddp_step --model fcn-r --threads 1 --iters 10
 *
 * A step is: forward, cross entropy, zero_grad, backward (with the reductions), SGD step, on
 * synthetic inputs of the network's shape. Every rank starts a step together (a barrier) and a
 * step's time is the slowest rank's. Rank 0 prints one JSON line: the median and quartiles of
 * seconds per global mini-batch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nabla.h"
#include "bench_util.h"

typedef struct spec {
    const char *name;
    int64_t c, h, w, classes, batch;
    double lr, momentum, wd;
    bool nesterov;
} spec;

/* The DLBench image networks and the zoo's own (tools/cmd_bench.c's table). */
static const spec specs[] = {
    {"fcn-r", 1, 28, 28, 10, 1024, 0.05, 0.9, 1e-4, false},
    {"alexnet-r", 3, 32, 32, 10, 1024, 0.01, 0.9, 0, false},
    {"resnet-56", 3, 32, 32, 10, 128, 0.01, 0.9, 1e-4, false},
    {"cnn", 1, 28, 28, 10, 128, 0.01, 0.9, 0, false},
    {"resnet20", 3, 32, 32, 10, 128, 0.1, 0.9, 1e-4, false},
    {"fcn-s", 1, 1, 26752, 26752, 64, 0.01, 0, 0, false},
    {"alexnet-s", 3, 224, 224, 1000, 16, 0.01, 0, 0, false},
    {"resnet-50", 3, 224, 224, 1000, 16, 0.1, 0.9, 1e-4, true},
};

static int die(const char *what)
{
    fprintf(stderr, "nabla_ddp_step: %s: %s\n", what, nb_last_error());
    return 1;
}

typedef struct run {
    nb_module *net;
    nb_ddp *ddp;
    nb_optim *opt;
    nb_tensor *x, *y; /* this rank's share of the batch */
} run;

static nb_status step(run *r)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *out = r->ddp ? nb_ddp_forward(r->ddp, r->x) : nb_module_forward(r->net, r->x);
    nb_tensor *loss = out ? nb_cross_entropy(out, r->y, NULL) : NULL;
    nb_status st = loss ? nb_optim_zero_grad(r->opt) : nb_last_status();
    if (st == NB_OK) st = nb_backward(loss, NULL, 0);
    if (st == NB_OK) st = nb_optim_step(r->opt);
    nb_scope_end(s);
    return st;
}

int main(int argc, char **argv)
{
    const char *model = "fcn-r";
    int iters = 10, warmup = 3, threads = 1;
    bool channels_last = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--channels-last")) channels_last = true;
        else {
            fprintf(stderr, "usage: nabla_ddp_step [--model NAME] [--iters N] [--warmup N] [--threads N] "
                            "[--channels-last]\n");
            return 2;
        }
    }
    const spec *sp = NULL;
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++)
        if (!strcmp(specs[i].name, model)) sp = &specs[i];
    if (!sp || iters < 1 || warmup < 0 || threads < 1) {
        fprintf(stderr, "nabla_ddp_step: unknown model %s or bad counts\n", model);
        return 2;
    }
    nb_process_group *pg = nb_process_group_mpi();
    if (!pg) return die("process group");
    int rank = nb_process_group_rank(pg), size = nb_process_group_size(pg);
    if (sp->batch % size) {
        fprintf(stderr, "nabla_ddp_step: batch %lld does not split over %d ranks\n", (long long)sp->batch, size);
        return 2;
    }
    if (nb_set_num_threads(threads) != NB_OK) return die("threads");
    nb_manual_seed(1);
    run r = {0};
    r.net = nb_model_create(model, sp->c, sp->h, sp->w, sp->classes, NULL);
    if (!r.net) return die("model");
    if (size > 1 && !(r.ddp = nb_ddp_create(pg, r.net, NULL))) return die("ddp");
    int n = nb_module_parameters(r.net, NULL, 0);
    nb_tensor **ps = calloc((size_t)n, sizeof *ps);
    nb_module_parameters(r.net, ps, n);
    nb_sgd_params op = nb_sgd_params_default();
    op.lr = sp->lr;
    op.momentum = sp->momentum;
    op.weight_decay = sp->wd;
    op.nesterov = sp->nesterov;
    if (!(r.opt = nb_optim_sgd(ps, n, &op))) return die("optimizer");
    free(ps);
    int64_t b = sp->batch / size;
    nb_tensor *x = nb_randn((int64_t[]){b, sp->c, sp->h, sp->w}, 4, NULL);
    r.x = x && channels_last ? nb_contiguous_format(x, NB_CHANNELS_LAST) : x;
    r.y = nb_randint(0, sp->classes, (int64_t[]){b}, 1, NULL);
    if (!r.x || !r.y) return die("inputs");
    double *t = calloc((size_t)iters, sizeof *t);
    nb_tensor *slowest = nb_zeros((int64_t[]){1}, 1, &(nb_tensor_params){.dtype = NB_FLOAT64});
    for (int i = -warmup; i < iters; i++) {
        if (nb_barrier(pg) != NB_OK) return die("barrier");
        double t0 = bench_now();
        if (step(&r) != NB_OK) return die("step");
        *(double *)nb_tensor_data_ptr(slowest) = bench_now() - t0;
        if (nb_all_reduce(pg, slowest, NB_REDUCE_OP_MAX) != NB_OK) return die("all_reduce");
        if (i >= 0) t[i] = *(double *)nb_tensor_data_ptr(slowest);
    }
    qsort(t, (size_t)iters, sizeof *t, bench_cmp_double);
    double med = t[iters / 2];
    if (rank == 0)
        printf("{\"impl\": \"nabla\", \"model\": \"%s\", \"ranks\": %d, \"threads\": %d, \"batch\": %lld, "
               "\"iters\": %d, \"median_s\": %.6f, \"q1_s\": %.6f, \"q3_s\": %.6f, \"samples_per_s\": %.1f, "
               "\"buckets\": %d}\n",
               model, size, threads, (long long)sp->batch, iters, med, t[iters / 4], t[(3 * iters) / 4],
               (double)sp->batch / med, nb_ddp_num_buckets(r.ddp));
    free(t);
    nb_tensor_free(slowest);
    nb_tensor_free(r.x);
    if (r.x != x) nb_tensor_free(x);
    nb_tensor_free(r.y);
    nb_optim_free(r.opt);
    nb_ddp_free(r.ddp);
    nb_module_free(r.net);
    nb_process_group_free(pg);
    return 0;
}
