/* tools/cmd_train.c: `nabla train`: trains a zoo model, with progress, metrics, checkpoints and
 * resume. A checkpoint holds the model ("model.<name>"), the optimizer ("optim.<...>", see
 * nabla/optim.h) and metadata (epoch = epochs done, model, seed, optimizer, data). Every random
 * choice depends only on (seed, epoch): the loader's permutation, and the default generator
 * (dropout) which is reseeded at each epoch's start, and the CPU kernels are chosen by rules, not
 * timing (nb_set_deterministic, unless NABLA_DETERMINISTIC is set), so a run gives the same bits
 * each time and a resumed run equals an uninterrupted one. --model lstm is the language model's
 * loop (train_lm.c).
 * Under mpiexec (train_dist.c) every rank runs this loop on its shard of each epoch, through
 * nb_ddp; rank 0 alone prints and writes the metrics and checkpoints. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_impl.h"

typedef struct trainer {
    cli_opts o;
    nb_device dev;
    bool cl; /* the image batches made channels-last (cli_channels_last) */
    nb_dataset *train, *test;
    nb_module *m;
    nb_optim *opt;
    nb_lr_scheduler *sched; /* --schedule cosine; NULL for none */
    nb_data_loader *loader;
    nb_tensor_map *ck; /* the --resume checkpoint */
    int64_t start_epoch;
    FILE *metrics;
    bool tty;
    nb_process_group *pg; /* data parallel (--dist); NULL for one process */
    nb_ddp *ddp;
    int rank, size;       /* 0 and 1 without pg */
} trainer;

static void trainer_free(trainer *t)
{
    nb_data_loader_free(t->loader);
    nb_ddp_free(t->ddp);
    nb_lr_scheduler_free(t->sched);
    nb_optim_free(t->opt);
    nb_module_free(t->m);
    nb_dataset_free(t->train);
    nb_dataset_free(t->test);
    nb_tensor_map_free(t->ck);
    if (t->metrics) fclose(t->metrics);
    nb_process_group_free(t->pg); /* a collective: every rank gets here */
}

static nb_optim *make_optim(trainer *t)
{
    int n = nb_module_parameters(t->m, NULL, 0);
    nb_tensor **ps = n > 0 ? malloc((size_t)n * sizeof *ps) : NULL;
    if (!ps) return NULL;
    nb_module_parameters(t->m, ps, n);
    nb_optim *opt = NULL;
    if (!strcmp(t->o.optimizer, "sgd")) {
        nb_sgd_params p = nb_sgd_params_default();
        p.momentum = 0.9;
        p.lr = t->o.lr >= 0 ? t->o.lr : 0.01;
        opt = nb_optim_sgd(ps, n, &p);
    } else {
        bool w = !strcmp(t->o.optimizer, "adamw");
        nb_adam_params p = w ? nb_adamw_params_default() : nb_adam_params_default();
        if (t->o.lr >= 0) p.lr = t->o.lr;
        opt = w ? nb_optim_adamw(ps, n, &p) : nb_optim_adam(ps, n, &p);
    }
    free(ps);
    return opt;
}

/* Reads the --resume checkpoint's metadata: the epoch to start at, the seed and the optimizer. */
static int read_resume(trainer *t)
{
    if (cli_checkpoint_load(t->o.resume, &t->ck) != NB_OK) return cli_fail_nb(CLI_RUNTIME, "train");
    const char *model = nb_tensor_map_metadata(t->ck, "model"), *epoch = nb_tensor_map_metadata(t->ck, "epoch");
    const char *seed = nb_tensor_map_metadata(t->ck, "seed"), *opt = nb_tensor_map_metadata(t->ck, "optimizer");
    const char *sched = nb_tensor_map_metadata(t->ck, "schedule"), *total = nb_tensor_map_metadata(t->ck, "epochs");
    if (!model || !epoch || !seed || !opt)
        return cli_fail(CLI_RUNTIME, "train: %s is not a nabla training checkpoint (metadata missing)", t->o.resume);
    if (strcmp(model, t->o.model) != 0)
        return cli_fail(CLI_RUNTIME, "train: %s holds a \"%s\" model, not \"%s\"", t->o.resume, model, t->o.model);
    uint64_t s = strtoull(seed, NULL, 10);
    if (t->o.seed_given && s != t->o.seed)
        return cli_fail(CLI_USAGE, "train: --seed %llu differs from the checkpoint's seed %llu",
                        (unsigned long long)t->o.seed, (unsigned long long)s);
    t->o.seed = s;
    t->o.optimizer = opt;
    if (!sched) sched = "none"; /* checkpoints from before --schedule */
    if (t->o.schedule_given && strcmp(sched, t->o.schedule) != 0)
        return cli_fail(CLI_USAGE, "train: --schedule %s differs from the checkpoint's %s", t->o.schedule, sched);
    t->o.schedule = sched;
    /* a schedule spans the run's --epochs: a resumed run must plan the same number */
    if (strcmp(sched, "none") != 0 && total && strtoll(total, NULL, 10) != t->o.epochs)
        return cli_fail(CLI_USAGE, "train: the checkpoint's %s schedule spans %s epochs, not --epochs %lld", sched,
                        total, (long long)t->o.epochs);
    t->start_epoch = strtoll(epoch, NULL, 10);
    return CLI_OK;
}

static int setup(trainer *t)
{
    int rc = cli_check_model(t->o.model);
    if (rc != CLI_OK) return rc;
    if (nb_device_parse(t->o.device, &t->dev) != NB_OK) return cli_fail_nb(CLI_USAGE, "train");
    if (t->o.threads > 0 && nb_set_num_threads((int)t->o.threads) != NB_OK) return cli_fail_nb(CLI_USAGE, "train");
    if ((rc = cli_set_conv_algo("train", t->o.conv_algo)) != CLI_OK) return rc;
    t->cl = cli_channels_last(&t->o, t->dev);
    if (t->o.resume && (rc = read_resume(t)) != CLI_OK) return rc;
    if (t->rank == 0 && t->o.metrics && !(t->metrics = fopen(t->o.metrics, "a")))
        return cli_fail(CLI_RUNTIME, "train: cannot open %s for writing", t->o.metrics);
    if (!(t->train = cli_dataset(&t->o, true, t->o.limit)) || !(t->test = cli_dataset(&t->o, false, 0)))
        return cli_fail_nb(CLI_RUNTIME, "train");
    if (!(t->m = cli_model(t->o.model, t->train, t->o.seed, nb_cpu()))) return cli_fail_nb(CLI_RUNTIME, "train");
    if (t->ck && cli_load_model(t->m, t->ck) != NB_OK) return cli_fail_nb(CLI_RUNTIME, "train: resume");
    if (nb_module_to(t->m, t->dev) != NB_OK || !(t->opt = make_optim(t))) return cli_fail_nb(CLI_RUNTIME, "train");
    nb_data_loader_params lp = cli_loader_params(&t->o, t->o.batch_size, true, t->dev);
    lp.num_replicas = t->size; /* DistributedSampler: each rank its 1/size of the epoch's order */
    lp.rank = t->rank;
    if (!(t->loader = nb_data_loader_create(t->train, &lp))) return cli_fail_nb(CLI_RUNTIME, "train");
    /* the schedule takes its base rate before a resumed optimizer's current rate is loaded */
    int64_t steps = t->o.epochs * nb_data_loader_len(t->loader);
    if (!strcmp(t->o.schedule, "cosine") && !(t->sched = nb_lr_cosine(t->opt, steps > 0 ? steps : 1, 0)))
        return cli_fail_nb(CLI_RUNTIME, "train");
    if (t->ck && nb_optim_load_state_dict(t->opt, t->ck, "optim.") != NB_OK)
        return cli_fail_nb(CLI_RUNTIME, "train: resume");
    if (t->ck && t->sched && nb_lr_scheduler_load_state_dict(t->sched, t->ck, "sched.") != NB_OK)
        return cli_fail_nb(CLI_RUNTIME, "train: resume");
    t->tty = isatty(STDOUT_FILENO);
    return CLI_OK;
}

static void progress(const trainer *t, int64_t epoch, int64_t b, int64_t nb, double loss, double rate, double secs)
{
    double eta = rate > 0 ? (double)(nb - b) * (secs / (double)b) : 0;
    if (t->tty) {
        int width = 24, fill = (int)((double)width * (double)b / (double)nb);
        char bar[32];
        for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
        bar[width] = '\0';
        printf("\repoch %lld [%s] %lld/%lld loss %.4f %.0f samples/s ETA %.0fs  ", (long long)epoch + 1, bar,
               (long long)b, (long long)nb, loss, rate, eta);
    } else {
        printf("epoch %lld batch %lld/%lld loss %.4f %.0f samples/s ETA %.0fs\n", (long long)epoch + 1,
               (long long)b, (long long)nb, loss, rate, eta);
    }
    fflush(stdout);
}

/* One training step on (x, y): adds the batch's mean loss to *sum. */
static nb_status step(trainer *t, nb_tensor *x, nb_tensor *y, double *sum)
{
    if (!(x = cli_batch_layout(x, t->cl))) return nb_last_status();
    nb_tensor *logits = t->ddp ? nb_ddp_forward(t->ddp, x) : nb_module_forward(t->m, x);
    nb_tensor *loss = logits ? nb_cross_entropy(logits, y, NULL) : NULL;
    double v = 0;
    if (!loss || nb_backward(loss, NULL, 0) != NB_OK || nb_optim_step(t->opt) != NB_OK ||
        nb_optim_zero_grad(t->opt) != NB_OK || (t->sched && nb_lr_scheduler_step(t->sched) != NB_OK) ||
        nb_item(loss, &v) != NB_OK)
        return nb_last_status();
    *sum += v;
    return NB_OK;
}

static nb_status train_epoch(trainer *t, int64_t epoch, double *loss, int64_t *samples)
{
    nb_manual_seed(t->o.seed * 1000003u + (uint64_t)epoch);
    nb_status st = nb_data_loader_start_epoch(t->loader, epoch);
    int64_t nbatch = nb_data_loader_len(t->loader), b = 0, every = nbatch / 10 > 0 ? nbatch / 10 : 1;
    double sum = 0, t0 = cli_now(), last = 0;
    nb_module_train(t->m, true);
    *samples = 0;
    for (bool done = false; st == NB_OK && !done;) {
        nb_scope *s = nb_scope_begin();
        nb_tensor *x = NULL, *y = NULL;
        st = nb_data_loader_next(t->loader, &x, &y, &done);
        if (st == NB_OK && !done) {
            *samples += nb_tensor_shape(y)[0];
            st = step(t, x, y, &sum);
            b++;
        }
        nb_scope_end(s);
        double el = cli_now() - t0;
        bool due = (t->tty && el - last > 0.1) || (!t->tty && b % every == 0) || b == nbatch;
        if (st == NB_OK && !done && t->rank == 0 && due) {
            progress(t, epoch, b, nbatch, sum / (double)b, (double)(*samples * t->size) / el, el);
            last = el;
        }
    }
    if (t->tty && t->rank == 0) printf("\n");
    /* the epoch's numbers over all ranks: the mean of every rank's batch losses, all samples */
    double v[3] = {sum, (double)b, (double)*samples};
    if (st == NB_OK) st = cli_dist_sum(t->pg, v, 3);
    *loss = v[1] > 0 ? v[0] / v[1] : 0;
    *samples = (int64_t)v[2];
    return st;
}

static nb_status save(trainer *t, int64_t epochs_done)
{
    nb_tensor_map *ck = nb_tensor_map_create();
    nb_scope *s = nb_scope_begin();
    nb_status st = ck ? cli_save_model(t->m, ck) : nb_last_status();
    char num[32];
    if (st == NB_OK) st = nb_optim_state_dict(t->opt, ck, "optim.");
    if (st == NB_OK && t->sched) st = nb_lr_scheduler_state_dict(t->sched, ck, "sched.");
    if (st == NB_OK) st = nb_tensor_map_set_metadata(ck, "schedule", t->o.schedule);
    snprintf(num, sizeof num, "%lld", (long long)t->o.epochs);
    if (st == NB_OK) st = nb_tensor_map_set_metadata(ck, "epochs", num);
    snprintf(num, sizeof num, "%lld", (long long)epochs_done);
    if (st == NB_OK) st = nb_tensor_map_set_metadata(ck, "epoch", num);
    snprintf(num, sizeof num, "%llu", (unsigned long long)t->o.seed);
    if (st == NB_OK) st = nb_tensor_map_set_metadata(ck, "seed", num);
    if (st == NB_OK) st = nb_tensor_map_set_metadata(ck, "model", t->o.model);
    if (st == NB_OK) st = nb_tensor_map_set_metadata(ck, "optimizer", t->o.optimizer);
    if (st == NB_OK) st = nb_tensor_map_set_metadata(ck, "data", t->o.data);
    if (st == NB_OK) st = cli_checkpoint_save(ck, t->o.save);
    nb_scope_end(s);
    nb_tensor_map_free(ck);
    return st;
}

/* Rank 0's report of an epoch: the line on stdout and the --metrics line. */
static int report(trainer *t, int64_t e, double loss, double tl, double acc, double secs, double rate)
{
    printf("epoch %lld/%lld train loss %.6f test loss %.6f accuracy %.6f (%.1f s, %.0f samples/s)\n",
           (long long)e + 1, (long long)t->o.epochs, loss, tl, acc, secs, rate);
    fflush(stdout);
    if (!t->metrics) return CLI_OK;
    fprintf(t->metrics, "{\"epoch\": %lld, ", (long long)e + 1);
    cli_json_num(t->metrics, "train_loss", loss, false);
    cli_json_num(t->metrics, "test_loss", tl, false);
    cli_json_num(t->metrics, "test_accuracy", acc, false);
    cli_json_num(t->metrics, "seconds", secs, false);
    cli_json_num(t->metrics, "samples_per_second", rate, true);
    fprintf(t->metrics, "}\n");
    if (fflush(t->metrics) != 0) return cli_fail(CLI_RUNTIME, "train: cannot write %s", t->o.metrics);
    return CLI_OK;
}

static int run_epochs(trainer *t)
{
    int64_t end = t->o.epochs;
    if (t->o.stop_after > 0 && t->start_epoch + t->o.stop_after < end) end = t->start_epoch + t->o.stop_after;
    for (int64_t e = t->start_epoch; e < end; e++) {
        double t0 = cli_now(), loss = 0, tl = 0, acc = 0;
        int64_t n = 0;
        if (train_epoch(t, e, &loss, &n) != NB_OK) return cli_dist_fail(t->pg, cli_fail_nb(CLI_RUNTIME, "train"));
        double secs = cli_now() - t0, rate = secs > 0 ? (double)n / secs : 0;
        if (cli_dist_evaluate(t->pg, t->ddp, t->m, t->test, &t->o, t->dev, &tl, &acc) != NB_OK)
            return cli_dist_fail(t->pg, cli_fail_nb(CLI_RUNTIME, "train"));
        int rc = CLI_OK;
        if (t->rank == 0) rc = report(t, e, loss, tl, acc, secs, rate);
        if (rc == CLI_OK && t->rank == 0 && t->o.save && save(t, e + 1) != NB_OK)
            rc = cli_fail_nb(CLI_RUNTIME, "train: save");
        if ((rc = cli_dist_agree(t->pg, rc)) != CLI_OK) return rc; /* rank 0's failure stops every rank */
    }
    return CLI_OK;
}

/* The header: the model, data, optimizer, device and threads, and the data-parallel layout. */
static void header(const trainer *t)
{
    char dev[32];
    nb_device_str(t->dev, dev, sizeof dev);
    printf("training %s (%lld parameters) on %s: %lld samples, %s%s, device %s, %d threads, %s%s%s\n", t->o.model,
           (long long)nb_module_num_parameters(t->m), t->o.data, (long long)nb_dataset_size(t->train),
           t->o.optimizer, t->sched ? " with cosine schedule" : "", dev, nb_get_num_threads(),
           t->cl ? "channels-last" : "contiguous", t->dev.type == NB_DEVICE_CPU ? ", cpu convolutions " : "",
           t->dev.type == NB_DEVICE_CPU ? nb_conv_algo_name(nb_get_conv_algo()) : "");
    if (t->pg)
        printf("data parallel over %d process%s (MPI): batch %lld per process, global batch %lld, %lld samples per "
               "process per epoch\n",
               t->size, t->size == 1 ? "" : "es", (long long)t->o.batch_size, (long long)t->o.batch_size * t->size,
               (long long)((nb_dataset_size(t->train) + t->size - 1) / t->size));
    if (t->start_epoch > 0) printf("resuming from %s after epoch %lld\n", t->o.resume, (long long)t->start_epoch);
}

int cmd_train(int argc, char **argv)
{
    trainer t = {.size = 1};
    int rc = cli_parse(argc, argv, 2, "train",
                       "--model --data --data-dir --epochs --batch-size --lr --optimizer --device --threads "
                       "--seed --save --resume --metrics --limit --schedule --stop-after --conv-algo --memory-format --dist "
                       "--bptt --clip",
                       &t.o);
    if (rc != CLI_OK) return rc;
    if (!t.o.model) return cli_fail(CLI_USAGE, "train: --model is required");
    if ((rc = cli_check_memory_format("train", &t.o)) != CLI_OK) return rc;
    /* the same bits every run with the same settings, resumed or not (NABLA_DETERMINISTIC=0: the
     * CPU tuners may time their ways) */
    if (!getenv("NABLA_DETERMINISTIC")) nb_set_deterministic(true);
    if (!strcmp(t.o.model, CLI_LM_MODEL)) return cli_train_lm(&t.o);
    if (!strcmp(t.o.data, "ptb"))
        return cli_fail(CLI_USAGE, "train: --data ptb is a text, for the language model (--model %s)", CLI_LM_MODEL);
    if (t.o.bptt > 0 || t.o.clip >= 0)
        return cli_fail(CLI_USAGE, "train: --bptt and --clip are for the language model (--model %s)", CLI_LM_MODEL);
    double t0 = cli_now();
    if ((rc = cli_dist_init(&t.o, &t.pg)) != CLI_OK) return rc;
    if (t.pg) {
        t.rank = nb_process_group_rank(t.pg);
        t.size = nb_process_group_size(t.pg);
    }
    rc = cli_dist_agree(t.pg, setup(&t)); /* a rank that cannot read its data stops them all */
    /* after setup: the optimizer and the resumed state hold the parameters, which DDP sets in place */
    if (rc == CLI_OK && t.pg && !(t.ddp = nb_ddp_create(t.pg, t.m, NULL))) rc = cli_fail_nb(CLI_RUNTIME, "train");
    if (rc == CLI_OK) {
        if (t.rank == 0) header(&t);
        rc = run_epochs(&t);
    }
    if (rc == CLI_OK && t.rank == 0) printf("total training time %.1f s\n", cli_now() - t0);
    trainer_free(&t);
    return rc;
}
