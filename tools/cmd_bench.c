/* tools/cmd_bench.c: `nabla bench`: times training iterations of the seven DLBench networks
 * (../shared/bench/DLBENCH.md, issue 5), of the `nabla train` CNN and of ResNet-20 (issue 3) on
 * synthetic data, the way bench/dlbench/torch_bench.py times PyTorch.
 *
 * One timed iteration = zero_grad, forward, cross-entropy loss, backward, (gradient clipping),
 * optimizer step, then the loss read back to the host (and the device synchronised), on inputs
 * built once (Gaussian images, uniform random labels; uniform random tokens for the LSTM). Each
 * (network, thread count) runs --warmup untimed iterations (on the CPU, with --warmup above 0, and
 * more while an iteration still runs calls on the tuners' schedules, nb_cpu_tuning_steps(), up to
 * TUNE_WARMUP_MAX, said on stderr), then --iters timed ones; the report
 * gives the median, quartiles, min and max of the wall-clock seconds per mini-batch, samples/s
 * (sequences/s for the LSTM), achieved GFLOP/s = 3 x forward FLOPs per sample x batch / median
 * (a training step costs about 3x the forward pass; the forward counts are DLBENCH.md's), the
 * process's peak resident set (getrusage ru_maxrss: the whole process so far, model building
 * included) and nabla's allocator peak over the timed iterations (nb_memory_stats peak_allocated
 * after nb_memory_reset_peak_stats: what the training step itself holds at most, the model,
 * optimizer state and batch included).
 * "sgemm" is no network: one 2048x2048x2048 float32 matmul per iteration, the machine's GEMM
 * ceiling for the GFLOP/s fractions bench/dlbench/compare.sh prints.
 * --data real (DLBench's "-R" runs): fcn-r and cnn read Fashion-MNIST, alexnet-r, resnet-56 and
 * resnet20 CIFAR-10 (its binary batches in --data-dir), through nabla's data loader (shuffled,
 * normalised, prefetched, drop_last), and each timed iteration includes taking its batch from the
 * loader, as the study's real-data runs include each tool's input pipeline; the LSTM reads Penn
 * Treebank's ptb.train.txt in --data-dir (nb_read_words: PyTorch's word_language_model reader,
 * at most the model's 10,000 words) and takes consecutive batches of 32 steps of its 128 rows
 * (nb_lm_batches, the state carried between them). The "-S" networks stay synthetic by
 * definition.
 * --memory-format channels_last converts the image batch to channels-last in each step (as
 * torch_bench.py's flag of the same name, which also converts the model). --conv-algo sets the
 * CPU convolutions' algorithm (nb_set_conv_algo; the default is NABLA_CONV_ALGO's, else auto);
 * the JSON records the one used. --step-in-backward on makes each optimizer step in backward
 * (nb_optim_step_in_backward; torch_bench.py's flag of the same name does PyTorch's recipe for it):
 * the timed iteration is the same, and its nb_optim_step finds nothing left to do. Networks that
 * clip their gradients (the LSTM) cannot run that way; --step-in-backward auto turns it on for
 * the networks that can (and off with --cuda-graph on), and the JSON records which ran so.
 * --cuda-graph on (a CUDA device only) warms up as usual, then takes one eager step on a CUDA
 * graph's stream and captures one step (nb_cuda_graph_capture_begin/end; torch_bench.py's flag of
 * the same name does PyTorch's whole-network capture); each timed iteration is then a replay and
 * the loss read back (with --data real, the loader's batch copied into the captured step's inputs
 * first). The LSTM's carried state is copied back at the end of each replay (its model does that
 * when captured). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli_impl.h"

typedef enum { OPT_NONE, OPT_SGD, OPT_ADAM } opt_kind;

typedef struct bench_spec {
    const char *name;
    const char *zoo;             /* nb_model_create's name; NULL: the LSTM language model; "": sgemm */
    int64_t c, h, w, classes;    /* input [B, c, h, w] (the LSTM: tokens [B, w]) */
    int64_t batch;               /* DLBench's Table-7 mini-batch size */
    double fwd_flops;            /* forward FLOPs per sample (per sequence for the LSTM) */
    opt_kind opt;
    double lr, momentum, wd, clip; /* clip > 0: clip the global L2 grad norm to it */
    bool nesterov, dlbench;      /* dlbench: one of the seven, run by default */
} bench_spec;

enum { LSTM_T = 32, LSTM_VOCAB = 10000, LSTM_EMBED = 256, LSTM_HIDDEN = 256, LSTM_LAYERS = 2, SGEMM_N = 2048 };

/* FLOPs: DLBENCH.md's table (2 x MACs of conv, FC, LSTM gates and output projection); cnn and
 * resnet20 counted the same way from src/nn/models.c (4,241,152 and 40,813,184 MACs). */
static const bench_spec specs[] = {
    {"fcn-s", "fcn-s", 1, 1, 26752, 26752, 64, 0.236e9, OPT_SGD, 0.01, 0, 0, 0, false, true},
    {"alexnet-s", "alexnet-s", 3, 224, 224, 1000, 16, 2.27e9, OPT_SGD, 0.01, 0, 0, 0, false, true},
    {"resnet-50", "resnet-50", 3, 224, 224, 1000, 16, 8.18e9, OPT_SGD, 0.1, 0.9, 1e-4, 0, true, true},
    {"fcn-r", "fcn-r", 1, 28, 28, 10, 1024, 28.4e6, OPT_SGD, 0.05, 0.9, 1e-4, 0, false, true},
    {"alexnet-r", "alexnet-r", 3, 32, 32, 10, 1024, 21.5e6, OPT_SGD, 0.01, 0.9, 0, 0, false, true},
    {"resnet-56", "resnet-56", 3, 32, 32, 10, 128, 0.251e9, OPT_SGD, 0.01, 0.9, 1e-4, 0, false, true},
    {"lstm", NULL, 1, 1, LSTM_T, LSTM_VOCAB, 128, 231e6, OPT_SGD, 0.1, 0, 0, 5, false, true},
    {"cnn", "cnn", 1, 28, 28, 10, 128, 8482304, OPT_ADAM, 1e-3, 0, 0, 0, false, false},
    {"resnet20", "resnet20", 3, 32, 32, 10, 128, 81626368, OPT_SGD, 0.1, 0.9, 1e-4, 0, false, false},
    {"sgemm", "", 1, SGEMM_N, SGEMM_N, 0, 1, 2.0 * SGEMM_N * SGEMM_N * SGEMM_N, OPT_NONE, 0, 0, 0, 0, false, false},
};
enum { N_SPECS = sizeof specs / sizeof specs[0], MAX_RUNS = 64, MAX_THREADS = 16 };
/* Warm-up iterations added while the CPU tuners time (a product called once per iteration needs up
 * to 13 calls, a convolution 9; the user's warm-up counts towards them). */
enum { TUNE_WARMUP_MAX = 14 };

typedef struct bench_result {
    const bench_spec *s;
    int threads;
    int64_t batch, params;
    double med, q1, q3, lo, hi, loss, rss_mb, alloc_mb;
    int64_t warmup_added; /* iterations added to --warmup while the CPU tuners timed */
    bool sib;             /* the optimizer stepped in backward */
    bool ok;
    char err[256];
} bench_result;

typedef struct bench {
    cli_opts o;
    nb_device dev;
    char dev_name[32];
    nb_profile_mode profile; /* with --profile (o.profile set) */
    bool channels_last;      /* --memory-format channels_last */
    enum { SIB_OFF, SIB_ON, SIB_AUTO } sib; /* --step-in-backward; auto: on where no clipping */
    bool cuda_graph;         /* --cuda-graph on */
    const bench_spec *models[MAX_RUNS];
    int n_models, threads[MAX_THREADS], n_threads;
    bench_result res[MAX_RUNS * MAX_THREADS];
    int n_res;
} bench;

/* One network ready to time: the model, its optimizer and the synthetic batch. */
typedef struct bench_net {
    const bench_spec *s;
    nb_module *m;
    nb_optim *opt;
    nb_tensor **params;
    int n_params;
    nb_tensor *x, *y; /* sgemm: the two operands */
    int64_t batch;
    nb_dataset *ds;   /* --data real */
    nb_data_loader *loader;
    nb_lm_batches *lm; /* --data real, the LSTM */
    nb_cuda_graph *graph; /* --cuda-graph on: the captured step, its loss and static inputs */
    nb_tensor *gloss, *gx, *gy;
    bool sib; /* the optimizer steps in backward (--step-in-backward on, or auto and no clipping) */
} bench_net;

static bool is_lstm(const bench_spec *s) { return !s->zoo; }
static bool is_gemm(const bench_spec *s) { return s->opt == OPT_NONE; }

static const bench_spec *find_spec(const char *name, size_t n)
{
    for (int i = 0; i < N_SPECS; i++)
        if (strlen(specs[i].name) == n && !strncmp(specs[i].name, name, n)) return &specs[i];
    return NULL;
}

static int parse_models(bench *b)
{
    if (!b->o.model) {
        for (int i = 0; i < N_SPECS; i++)
            if (specs[i].dlbench) b->models[b->n_models++] = &specs[i];
        return CLI_OK;
    }
    for (const char *p = b->o.model;;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        const bench_spec *s = find_spec(p, n);
        if (!s) {
            char known[256] = "";
            for (int i = 0; i < N_SPECS; i++)
                snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", specs[i].name);
            return cli_fail(CLI_USAGE, "bench: unknown model \"%.*s\" in --model %s (known: %s)", (int)n, p,
                            b->o.model, known);
        }
        if (b->n_models == MAX_RUNS) return cli_fail(CLI_USAGE, "bench: more than %d models", MAX_RUNS);
        b->models[b->n_models++] = s;
        if (!e) return CLI_OK;
        p = e + 1;
    }
}

static int parse_threads(bench *b)
{
    const char *a = b->o.threads_arg;
    if (!a) {
        int def = nb_get_num_threads();
        b->threads[b->n_threads++] = 1;
        if (def > 1) b->threads[b->n_threads++] = def;
        return CLI_OK;
    }
    for (const char *p = a;;) {
        char *end = NULL;
        long v = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',') || v < 1 || v > 4096 || b->n_threads == MAX_THREADS)
            return cli_fail(CLI_USAGE, "bench: --threads: expected up to %d comma-separated integers in [1, 4096], "
                            "got \"%s\"", MAX_THREADS, a);
        b->threads[b->n_threads++] = (int)v;
        if (!*end) return CLI_OK;
        p = end + 1;
    }
}

static int setup(bench *b)
{
    const char *f = b->o.format;
    if (strcmp(f, "table") && strcmp(f, "csv") && strcmp(f, "json"))
        return cli_fail(CLI_USAGE, "bench: unknown format \"%s\" (expected table, csv or json)", f);
    const char *p = b->o.profile;
    if (p && strcmp(p, "host") && strcmp(p, "sync"))
        return cli_fail(CLI_USAGE, "bench: unknown --profile \"%s\" (expected host or sync)", p);
    b->profile = p && !strcmp(p, "sync") ? NB_PROFILE_SYNC : NB_PROFILE_HOST;
    const char *mf = b->o.memory_format;
    if (mf && strcmp(mf, "contiguous") && strcmp(mf, "channels_last"))
        return cli_fail(CLI_USAGE, "bench: unknown --memory-format \"%s\" (expected contiguous or channels_last)", mf);
    b->channels_last = mf && !strcmp(mf, "channels_last");
    const char *sb = b->o.step_in_backward;
    if (sb && strcmp(sb, "on") && strcmp(sb, "off") && strcmp(sb, "auto"))
        return cli_fail(CLI_USAGE, "bench: unknown --step-in-backward \"%s\" (expected on, off or auto)", sb);
    b->sib = !sb || !strcmp(sb, "off") ? SIB_OFF : !strcmp(sb, "on") ? SIB_ON : SIB_AUTO;
    const char *cg = b->o.cuda_graph;
    if (cg && strcmp(cg, "on") && strcmp(cg, "off"))
        return cli_fail(CLI_USAGE, "bench: unknown --cuda-graph \"%s\" (expected on or off)", cg);
    b->cuda_graph = cg && !strcmp(cg, "on");
    int crc = cli_set_conv_algo("bench", b->o.conv_algo);
    if (crc != CLI_OK) return crc;
    int rc = parse_models(b);
    if (rc == CLI_OK) rc = parse_threads(b);
    if (rc != CLI_OK) return rc;
    if (nb_device_parse(b->o.device, &b->dev) != NB_OK) return cli_fail_nb(CLI_USAGE, "bench");
    nb_device_str(b->dev, b->dev_name, sizeof b->dev_name);
    if (b->dev.type != NB_DEVICE_CPU) { /* one column: the GPU; threads only feed the host side */
        b->n_threads = 1;
        b->threads[0] = nb_get_num_threads();
    }
    return CLI_OK;
}

static void net_free(bench_net *n)
{
    nb_tensor_free(n->gloss);
    nb_tensor_free(n->gx);
    nb_tensor_free(n->gy);
    nb_cuda_graph_free(n->graph);
    nb_data_loader_free(n->loader);
    nb_lm_batches_free(n->lm);
    nb_dataset_free(n->ds);
    nb_optim_free(n->opt);
    nb_module_free(n->m);
    free(n->params);
    nb_tensor_free(n->x);
    nb_tensor_free(n->y);
}

static nb_optim *make_optim(const bench_spec *s, nb_tensor **ps, int n)
{
    if (s->opt == OPT_ADAM) {
        nb_adam_params p = nb_adam_params_default();
        p.lr = s->lr;
        return nb_optim_adam(ps, n, &p);
    }
    nb_sgd_params p = nb_sgd_params_default();
    p.lr = s->lr;
    p.momentum = s->momentum;
    p.weight_decay = s->wd;
    p.nesterov = s->nesterov;
    return nb_optim_sgd(ps, n, &p);
}

static nb_module *make_model(const bench_spec *s, const nb_tensor_params *tp)
{
    if (!is_lstm(s)) return nb_model_create(s->zoo, s->c, s->h, s->w, s->classes, tp);
    nb_module *m = nb_lstm_lm_create(LSTM_VOCAB, LSTM_EMBED, LSTM_HIDDEN, LSTM_LAYERS, tp);
    if (m && nb_lstm_lm_set_stateful(m, true) != NB_OK) {
        nb_module_free(m);
        return NULL;
    }
    return m;
}

/* Moves a new CPU tensor to dev, replacing the reference. */
static nb_tensor *to_dev(nb_tensor *t, nb_device dev)
{
    if (!t || dev.type == NB_DEVICE_CPU) return t;
    nb_tensor *d = nb_to(t, dev);
    nb_tensor_free(t);
    return d;
}

/* The synthetic batch, drawn from g: Gaussian images and labels in [0, classes), or LSTM tokens
 * and next-token targets (both uniform), or sgemm's two Gaussian operands. */
static nb_status make_data(bench_net *n, nb_generator *g, nb_device dev)
{
    const bench_spec *s = n->s;
    nb_tensor_params fp = nb_tensor_params_default(), ip = fp;
    fp.generator = ip.generator = g;
    ip.dtype = NB_INT64;
    if (is_lstm(s)) {
        int64_t shape[2] = {n->batch, s->w};
        n->x = nb_randint(0, LSTM_VOCAB, shape, 2, &ip);
        n->y = nb_randint(0, LSTM_VOCAB, shape, 2, &ip);
    } else if (is_gemm(s)) {
        int64_t shape[2] = {s->h, s->w};
        n->x = nb_randn(shape, 2, &fp);
        n->y = nb_randn(shape, 2, &fp);
    } else {
        int64_t shape[4] = {n->batch, s->c, s->h, s->w};
        n->x = nb_randn(shape, 4, &fp);
        n->y = nb_randint(0, s->classes, shape, 1, &ip);
    }
    n->x = to_dev(n->x, dev);
    n->y = to_dev(n->y, dev);
    return n->x && n->y ? NB_OK : nb_last_status();
}

/* A failure of the bench itself (not of a nabla call) for the current row. */
static char g_err[200];

/* --data real for the LSTM: Penn Treebank's training text in --data-dir as batches of tokens. */
static bool make_lm_batches(bench_net *n, const cli_opts *o, nb_device dev, char *err, size_t cap)
{
    const bench_spec *s = n->s;
    if (!o->data_dir_given) {
        snprintf(err, cap, "%s: --data real needs --data-dir with Penn Treebank's ptb.train.txt", s->name);
        return false;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/ptb.train.txt", o->data_dir);
    nb_scope *sc = nb_scope_begin();
    nb_vocab *v = nb_vocab_create();
    nb_tensor *tok = v ? nb_read_words(path, v, true) : NULL;
    int64_t words = nb_vocab_size(v);
    bool ok = tok && words <= LSTM_VOCAB && (n->lm = nb_lm_batches_create(tok, n->batch, s->w, dev));
    if (!ok && tok && words > LSTM_VOCAB)
        snprintf(err, cap, "%s: ptb.train.txt in --data-dir has %lld words, more than the model's vocabulary of %d",
                 s->name, (long long)words, LSTM_VOCAB);
    else if (!ok)
        snprintf(err, cap, "%s: %s", s->name, nb_last_error());
    nb_vocab_free(v);
    nb_scope_end(sc);
    return ok;
}

/* --data real: the data set of n's network and its loader; false with the reason in err. The
 * "-S" networks keep their synthetic batch. */
static bool make_loader(bench_net *n, const cli_opts *o, uint64_t seed, nb_device dev, char *err, size_t cap)
{
    const bench_spec *s = n->s;
    bool fashion = !strcmp(s->name, "fcn-r") || !strcmp(s->name, "cnn");
    bool cifar = !strcmp(s->name, "alexnet-r") || !strcmp(s->name, "resnet-56") || !strcmp(s->name, "resnet20");
    if (is_lstm(s)) return make_lm_batches(n, o, dev, err, cap);
    if (!fashion && !cifar) return true;
    const char *dir = o->data_dir_given ? o->data_dir : fashion ? CLI_DEFAULT_DATA_DIR : NULL;
    if (!dir) {
        snprintf(err, cap, "%s: --data real needs --data-dir with the CIFAR-10 binary batches", s->name);
        return false;
    }
    n->ds = fashion ? nb_dataset_fashion_mnist(dir, true) : nb_dataset_cifar10(dir, true);
    if (n->ds && nb_dataset_size(n->ds) < n->batch) {
        snprintf(err, cap, "%s: the data set has %lld samples, fewer than a batch of %lld", s->name,
                 (long long)nb_dataset_size(n->ds), (long long)n->batch);
        return false;
    }
    nb_data_loader_params p = nb_data_loader_params_default();
    p.batch_size = n->batch;
    p.shuffle = true;
    p.seed = seed;
    p.drop_last = true;
    p.device = dev;
    p.pin_memory = dev.type == NB_DEVICE_CUDA;
    p.norm_channels = fashion ? 1 : 3;
    const float fm[1] = {0.2860f}, fs[1] = {0.3530f}, cm[3] = {0.4914f, 0.4822f, 0.4465f},
                cs[3] = {0.2470f, 0.2435f, 0.2616f};
    for (int c = 0; c < p.norm_channels; c++) p.mean[c] = fashion ? fm[c] : cm[c], p.std[c] = fashion ? fs[c] : cs[c];
    if (!n->ds || !(n->loader = nb_data_loader_create(n->ds, &p))) {
        snprintf(err, cap, "%s: %s", s->name, nb_last_error());
        return false;
    }
    return true;
}

static bool real_data(const bench_net *n) { return n->loader || n->lm; }

/* The next batch of the epoch from n's loader or the LSTM's batches (their `next` contracts are
 * the same). */
static nb_status source_next(bench_net *n, nb_tensor **x, nb_tensor **y, bool *done)
{
    return n->lm ? nb_lm_batches_next(n->lm, x, y, done) : nb_data_loader_next(n->loader, x, y, done);
}

/* The next real batch into n->x, n->y, starting a new epoch at the end of one (the LSTM's state
 * carries on across it, as from one batch to the next). */
static nb_status next_batch(bench_net *n)
{
    bool done = false;
    nb_tensor *x = NULL, *y = NULL;
    nb_status st = source_next(n, &x, &y, &done);
    if (st == NB_OK && done) st = source_next(n, &x, &y, &done);
    if (st != NB_OK) return st;
    if (done) { /* cannot happen: make_loader checked there is a whole batch */
        snprintf(g_err, sizeof g_err, "the loader gave no batch");
        return NB_ERR_INTERNAL;
    }
    nb_tensor_free(n->x);
    nb_tensor_free(n->y);
    n->x = nb_tensor_retain(x);
    n->y = nb_tensor_retain(y);
    return NB_OK;
}

/* Builds the model (on the CPU, from --seed; then moved to bench's device), its optimizer and the
 * batch. On failure writes the reason to err and returns false. */
static bool net_init(bench_net *n, const bench_spec *s, int64_t batch, const bench *b, char *err, size_t cap)
{
    const cli_opts *o = &b->o;
    uint64_t seed = o->seed;
    nb_device dev = b->dev;
    *n = (bench_net){.s = s, .batch = batch};
    nb_manual_seed(seed); /* dropout (cnn) draws from the default generator */
    nb_generator *g = nb_generator_create(seed);
    nb_tensor_params tp = nb_tensor_params_default();
    tp.generator = g;
    bool ok = g != NULL;
    if (ok && !is_gemm(s)) {
        ok = (n->m = make_model(s, &tp)) && nb_module_to(n->m, dev) == NB_OK;
        n->n_params = ok ? nb_module_parameters(n->m, NULL, 0) : 0;
        if (ok && (n->n_params < 1 || !(n->params = malloc((size_t)n->n_params * sizeof *n->params)))) {
            nb_generator_free(g);
            snprintf(err, cap, "%s: cannot list its %d parameters (out of memory)", s->name, n->n_params);
            return false;
        }
        if (ok) nb_module_parameters(n->m, n->params, n->n_params);
        ok = ok && (n->opt = make_optim(s, n->params, n->n_params));
        n->sib = b->sib == SIB_ON || (b->sib == SIB_AUTO && s->clip <= 0 && !b->cuda_graph);
        if (ok && n->sib) {
            if (s->clip > 0) {
                nb_generator_free(g);
                snprintf(err, cap, "%s clips its gradients' norm to %g after backward, which --step-in-backward on "
                         "leaves no gradients for", s->name, s->clip);
                return false;
            }
            ok = nb_optim_step_in_backward(n->opt, true) == NB_OK;
        }
        if (ok) nb_module_train(n->m, true);
    }
    ok = ok && make_data(n, g, dev) == NB_OK;
    if (ok && o->data_given && !strcmp(o->data, "real")) {
        nb_generator_free(g);
        return make_loader(n, o, seed, dev, err, cap);
    }
    if (!ok) snprintf(err, cap, "%s: %s", s->name, nb_last_error());
    nb_generator_free(g);
    return ok;
}

/* One training step on batch (x, y) without reading anything back: zero_grad, forward, loss,
 * backward, (clipping), optimizer step; *loss_out is the loss tensor (scope-owned). */
static nb_status train_step(bench_net *n, nb_tensor *x, nb_tensor *y, bool channels_last, nb_tensor **loss_out)
{
    const bench_spec *s = n->s;
    nb_status st = nb_optim_zero_grad(n->opt);
    /* --memory-format channels_last: an image batch is converted here, inside the step (a data
     * pipeline gives NCHW), and the layers keep the layout from there on */
    if (st == NB_OK && !(x = cli_batch_layout(x, channels_last))) st = nb_last_status();
    nb_tensor *out = st == NB_OK ? nb_module_forward(n->m, x) : NULL;
    if (out && is_lstm(s)) { /* logits [B, T, V] against next tokens [B, T] */
        int64_t flat[2] = {-1, LSTM_VOCAB}, fy[1] = {-1};
        out = nb_reshape(out, flat, 2);
        y = nb_reshape(y, fy, 1);
    }
    nb_tensor *loss = out && y ? nb_cross_entropy(out, y, NULL) : NULL;
    if (st == NB_OK && !loss) st = nb_last_status();
    if (st == NB_OK) st = nb_backward(loss, NULL, 0);
    if (st == NB_OK && s->clip > 0) st = nb_clip_grad_norm_(n->params, n->n_params, s->clip, 2.0, NULL);
    if (st == NB_OK) st = nb_optim_step(n->opt);
    *loss_out = loss;
    return st;
}

/* One timed unit: a training iteration (see the top of the file), or sgemm's matmul. */
static nb_status iterate(bench_net *n, nb_device dev, bool channels_last, double *loss_out)
{
    const bench_spec *s = n->s;
    nb_scope *sc = nb_scope_begin();
    nb_status st = NB_OK;
    if (is_gemm(s)) {
        nb_tensor *c = nb_matmul(n->x, n->y);
        st = c ? nb_device_synchronize(dev) : nb_last_status();
        *loss_out = 0;
        nb_scope_end(sc);
        return st;
    }
    if (real_data(n)) st = next_batch(n);
    nb_tensor *loss = NULL;
    if (st == NB_OK) st = train_step(n, n->x, n->y, channels_last, &loss);
    if (st == NB_OK) st = nb_item(loss, loss_out);
    if (st == NB_OK) st = nb_device_synchronize(dev);
    nb_scope_end(sc);
    return st;
}

/* --cuda-graph on: one timed unit is the batch copied into the captured step's static inputs
 * (the loader's next one with --data real, else the synthetic batch again, as a real loop and
 * torch_bench.py copy), one replay, the loss read. */
static nb_status replay(bench_net *n, nb_device dev, double *loss_out)
{
    nb_status st = real_data(n) ? next_batch(n) : NB_OK;
    if (st == NB_OK) st = nb_copy_(n->gx, n->x);
    if (st == NB_OK) st = nb_copy_(n->gy, n->y);
    if (st == NB_OK) st = nb_cuda_graph_replay(n->graph);
    if (st == NB_OK) st = nb_item(n->gloss, loss_out);
    if (st == NB_OK) st = nb_device_synchronize(dev);
    return st;
}

/* Captures one training step as a CUDA graph, after an eager step on the graph's own stream (its
 * libraries' lazy set-up happens outside the capture, as PyTorch's recipe warms up on a side
 * stream). On failure writes the reason to err. */
static nb_status capture(bench_net *n, const bench *b, char *err, size_t cap)
{
    const char *why = b->dev.type != NB_DEVICE_CUDA ? "cuda graphs need a CUDA device"
                      : n->sib ? "--cuda-graph on and --step-in-backward on are not supported together"
                               : NULL;
    if (why) {
        snprintf(err, cap, "%s", why);
        return NB_ERR_UNSUPPORTED;
    }
    double loss = 0;
    nb_status st = (n->graph = nb_cuda_graph_create(b->dev.index)) ? NB_OK : nb_last_status();
    nb_stream *prev = st == NB_OK ? nb_cuda_set_stream(nb_cuda_graph_stream(n->graph)) : NULL;
    if (st == NB_OK) st = iterate(n, b->dev, b->channels_last, &loss);
    if (prev) nb_cuda_set_stream(prev);
    n->gx = st == NB_OK ? nb_clone(n->x) : NULL; /* owned: no scope is open here */
    n->gy = n->gx ? nb_clone(n->y) : NULL;
    if (st == NB_OK && !n->gy) st = nb_last_status();
    if (st == NB_OK) st = nb_optim_zero_grad(n->opt);
    if (st == NB_OK) st = nb_cuda_graph_capture_begin(n->graph);
    if (st == NB_OK) {
        nb_scope *sc = nb_scope_begin();
        nb_tensor *l = NULL;
        nb_status cs = sc ? train_step(n, n->gx, n->gy, b->channels_last, &l) : nb_last_status();
        n->gloss = cs == NB_OK ? nb_tensor_retain(l) : NULL;
        nb_scope_end(sc);
        /* A refused op spoils the capture and capture_end reports it; a CUDA error inside the
         * step instead invalidates the capture, and capture_end's own message would hide it. */
        char first[512] = "";
        if (cs != NB_OK) snprintf(first, sizeof first, "%s", nb_last_error());
        st = nb_cuda_graph_capture_end(n->graph);
        if (st != NB_OK && cs != NB_OK && !strstr(nb_last_error(), first)) {
            snprintf(err, cap, "%s (first: %s)", nb_last_error(), first);
            return st;
        }
        if (st == NB_OK) st = cs;
    }
    if (st != NB_OK) snprintf(err, cap, "%s", nb_last_error());
    return st;
}


static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of sorted v[0..n), interpolating linearly (numpy's default, and torch_bench.py's). */
static double quantile(const double *v, int n, double q)
{
    double pos = q * (double)(n - 1);
    int i = (int)floor(pos);
    return i + 1 < n ? v[i] + (pos - (double)i) * (v[i + 1] - v[i]) : v[n - 1];
}

static double peak_rss_mb(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss / 1024.0 : NAN; /* KiB on Linux */
}

/* Warm-up, then the timed iterations of one (network, thread count) into r. */
static void time_net(bench *b, bench_net *n, int threads, bench_result *r)
{
    *r = (bench_result){.s = n->s, .threads = threads, .batch = n->batch, .loss = NAN, .sib = n->sib};
    r->params = n->m ? nb_module_num_parameters(n->m) : 0;
    int64_t iters = b->o.iters;
    double *t = malloc((size_t)iters * sizeof *t);
    nb_status st = t ? NB_OK : NB_ERR_OOM;
    if (st == NB_OK && b->dev.type == NB_DEVICE_CPU) st = nb_set_num_threads(threads);
    /* on the CPU, warm-up goes on while the last iteration still ran calls on the tuners'
     * schedules (up to TUNE_WARMUP_MAX more), so that no timed iteration runs one */
    unsigned long long s0 = 0, s1 = 0;
    for (int64_t i = 0; st == NB_OK && i < b->o.warmup; i++) {
        s0 = nb_cpu_tuning_steps();
        st = iterate(n, b->dev, b->channels_last, &r->loss);
        s1 = nb_cpu_tuning_steps();
    }
    int64_t extra = 0;
    for (; st == NB_OK && b->dev.type == NB_DEVICE_CPU && s1 != s0 && extra < TUNE_WARMUP_MAX; extra++) {
        s0 = s1;
        st = iterate(n, b->dev, b->channels_last, &r->loss);
        s1 = nb_cpu_tuning_steps();
    }
    if (extra > 0 && st == NB_OK)
        fprintf(stderr, "nabla bench: %s, %d thread%s: %lld more warm-up iteration%s while the CPU tuners timed\n",
                n->s->name, threads, threads == 1 ? "" : "s", (long long)extra, extra == 1 ? "" : "s");
    char gerr[sizeof g_err] = "";
    bool graph = b->cuda_graph && !is_gemm(n->s);
    if (st == NB_OK && graph && !n->graph && capture(n, b, gerr, sizeof gerr) != NB_OK) {
        snprintf(g_err, sizeof g_err, "%s", gerr);
        st = NB_ERR_UNSUPPORTED;
    }
    /* on a GPU, CUDA events bracket each iteration on the current stream: the time the device
     * took from the first queued kernel to the last, host gaps between launches included */
    bool gpu = b->dev.type == NB_DEVICE_CUDA;
    nb_event *e0 = NULL, *e1 = NULL;
    if (st == NB_OK && gpu && (!(e0 = nb_cuda_event_create(true)) || !(e1 = nb_cuda_event_create(true))))
        st = nb_last_status();
    /* the allocator's peak over the timed iterations only (model building and warm-up excluded) */
    if (st == NB_OK) st = nb_memory_reset_peak_stats(b->dev);
    if (st == NB_OK && b->o.profile)
        st = nb_profiler_start(b->profile);
    for (int64_t i = 0; st == NB_OK && i < iters; i++) {
        double t0 = cli_now();
        if (gpu) st = nb_cuda_event_record(e0, NULL);
        if (st == NB_OK) st = graph ? replay(n, b->dev, &r->loss) : iterate(n, b->dev, b->channels_last, &r->loss);
        if (st == NB_OK && gpu) st = nb_cuda_event_record(e1, NULL);
        if (st == NB_OK && gpu) st = nb_cuda_event_synchronize(e1);
        float ms = 0;
        if (st == NB_OK && gpu) st = nb_cuda_event_elapsed_ms(e0, e1, &ms);
        t[i] = gpu ? (double)ms / 1000.0 : cli_now() - t0;
    }
    nb_cuda_event_free(e0);
    nb_cuda_event_free(e1);
    if (st == NB_OK && graph) st = nb_cuda_graph_check(n->graph); /* a bad index met by a replay */
    if (b->o.profile) {
        nb_profiler_stop();
        fprintf(stderr, "\n%s, %d thread%s, %lld timed iterations (--profile %s):\n", n->s->name, threads,
                threads == 1 ? "" : "s", (long long)iters, b->o.profile);
        nb_profiler_print(stderr);
    }
    if (st != NB_OK) {
        snprintf(r->err, sizeof r->err, "%s: %s", n->s->name,
                 !t ? "out of memory" : g_err[0] ? g_err : nb_last_error());
    } else {
        qsort(t, (size_t)iters, sizeof *t, cmp_double);
        int k = (int)iters;
        *r = (bench_result){.s = n->s, .threads = threads, .batch = n->batch, .params = r->params,
                            .loss = r->loss, .ok = true, .warmup_added = extra, .sib = n->sib, .lo = t[0],
                            .hi = t[k - 1],
                            .med = quantile(t, k, 0.5), .q1 = quantile(t, k, 0.25), .q3 = quantile(t, k, 0.75),
                            .rss_mb = peak_rss_mb()};
        nb_memory_stats ms;
        r->alloc_mb = nb_memory_stats_get(b->dev, &ms) == NB_OK ? (double)ms.peak_allocated / 1048576.0 : NAN;
    }
    free(t);
}

/* ---- output ------------------------------------------------------------------------------------ */

static const char *const csv_header =
    "impl,model,device,threads,batch,iters,warmup,median_s,q1_s,q3_s,min_s,max_s,samples_per_s,gflops,"
    "fwd_flops_per_sample,params,peak_rss_mb,peak_alloc_mb,loss,error";

static double samples_per_s(const bench_result *r) { return (double)r->batch / r->med; }
static double gflops(const bench_result *r)
{ /* sgemm's count is the whole matmul; a training step is ~3 forwards */
    double per = is_gemm(r->s) ? r->s->fwd_flops : 3.0 * r->s->fwd_flops;
    return per * (double)r->batch / r->med * 1e-9;
}

static void json_str(const char *key, const char *v)
{
    printf("\"%s\": \"", key);
    for (const char *p = v; *p; p++) {
        if (*p == '"' || *p == '\\') printf("\\%c", *p);
        else if ((unsigned char)*p < 0x20) printf("\\u%04x", (unsigned char)*p);
        else putchar(*p);
    }
    printf("\", ");
}

static void json_num(const char *key, double v, bool last)
{
    if (isfinite(v)) printf("\"%s\": %.9g%s", key, v, last ? "" : ", ");
    else printf("\"%s\": null%s", key, last ? "" : ", ");
}

static void print_json(const bench *b, const bench_result *r)
{
    printf("{");
    json_str("impl", "nabla");
    json_str("model", r->s->name);
    json_str("device", b->dev_name);
    json_str("memory_format", b->channels_last ? "channels_last" : "contiguous");
    json_str("conv_algo", nb_conv_algo_name(nb_get_conv_algo()));
    printf("\"step_in_backward\": %s, ", r->sib ? "true" : "false");
    printf("\"cuda_graph\": %s, ", b->cuda_graph ? "true" : "false");
    printf("\"threads\": %d, \"batch\": %lld, \"iters\": %lld, \"warmup\": %lld, ", r->threads,
           (long long)r->batch, (long long)b->o.iters, (long long)b->o.warmup);
    printf("\"warmup_added\": %lld, ", (long long)r->warmup_added);
    if (!r->ok) {
        json_str("error", r->err);
        json_num("fwd_flops_per_sample", r->s->fwd_flops, true);
        printf("}\n");
        return;
    }
    json_num("median_s", r->med, false);
    json_num("q1_s", r->q1, false);
    json_num("q3_s", r->q3, false);
    json_num("min_s", r->lo, false);
    json_num("max_s", r->hi, false);
    json_num("samples_per_s", samples_per_s(r), false);
    json_num("gflops", gflops(r), false);
    json_num("fwd_flops_per_sample", r->s->fwd_flops, false);
    printf("\"params\": %lld, ", (long long)r->params);
    json_num("peak_rss_mb", r->rss_mb, false);
    json_num("peak_alloc_mb", r->alloc_mb, false);
    json_num("loss", r->loss, true);
    printf("}\n");
}

static void print_csv(const bench *b, const bench_result *r)
{
    printf("nabla,%s,%s,%d,%lld,%lld,%lld,", r->s->name, b->dev_name, r->threads, (long long)r->batch,
           (long long)b->o.iters, (long long)b->o.warmup);
    if (!r->ok) {
        char e[256];
        snprintf(e, sizeof e, "%s", r->err);
        for (char *p = e; *p; p++)
            if (*p == ',' || *p == '"' || *p == '\n') *p = ' ';
        printf(",,,,,,,%.6g,,,,,%s\n", r->s->fwd_flops, e);
        return;
    }
    printf("%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%lld,%.6g,%.6g,%.6g,\n", r->med, r->q1, r->q3, r->lo, r->hi,
           samples_per_s(r), gflops(r), r->s->fwd_flops, (long long)r->params, r->rss_mb, r->alloc_mb, r->loss);
}

static void print_table(const bench *b)
{
    printf("nabla bench: seconds per mini-batch (median of %lld after %lld warm-up), device %s\n",
           (long long)b->o.iters, (long long)b->o.warmup, b->dev_name);
    printf("%-10s %6s %12s", "network", "batch", "parameters");
    for (int j = 0; j < b->n_threads; j++) {
        char h[32];
        if (b->dev.type != NB_DEVICE_CPU) snprintf(h, sizeof h, "%s", b->dev_name);
        else snprintf(h, sizeof h, "%d thread%s", b->threads[j], b->threads[j] > 1 ? "s" : "");
        printf(" %11s", h);
    }
    printf("\n");
    for (int i = 0; i < b->n_models; i++) {
        const bench_result *row = &b->res[i * b->n_threads];
        printf("%-10s %6lld %12lld", row->s->name, (long long)row->batch, (long long)row->params);
        for (int j = 0; j < b->n_threads; j++) {
            if (row[j].ok) printf(" %11.4g", row[j].med);
            else printf(" %11s", "n/a");
        }
        printf("\n");
    }
    printf("\n%-10s %7s %10s %10s %10s %11s %9s %9s %10s\n", "network", "threads", "s/batch", "min", "max",
           "samples/s", "GFLOP/s", "RSS MiB", "alloc MiB");
    for (int i = 0; i < b->n_res; i++) {
        const bench_result *r = &b->res[i];
        if (!r->ok) {
            printf("%-10s %7d  not available: %s\n", r->s->name, r->threads, r->err);
            continue;
        }
        printf("%-10s %7d %10.4g %10.4g %10.4g %11.5g %9.4g %9.0f %10.0f\n", r->s->name, r->threads, r->med, r->lo,
               r->hi, samples_per_s(r), gflops(r), r->rss_mb, r->alloc_mb);
    }
}

static void emit(const bench *b, const bench_result *r)
{
    if (!strcmp(b->o.format, "json")) print_json(b, r);
    else if (!strcmp(b->o.format, "csv")) print_csv(b, r);
    fflush(stdout);
}

/* Every thread count of one network; a network that cannot be built fills its row with the
 * reason. Returns false when any setting failed. */
static bool run_model(bench *b, const bench_spec *s)
{
    bench_net n;
    char err[256] = "";
    int64_t batch = b->o.batch_size_given && !is_gemm(s) ? b->o.batch_size : s->batch;
    bool built = net_init(&n, s, batch, b, err, sizeof err), all = built;
    for (int j = 0; j < b->n_threads; j++) {
        bench_result *r = &b->res[b->n_res++];
        if (built) time_net(b, &n, b->threads[j], r);
        else *r = (bench_result){.s = s, .threads = b->threads[j], .batch = batch};
        if (!built) snprintf(r->err, sizeof r->err, "%s", err);
        if (!r->ok && (built || j == 0)) cli_fail(CLI_RUNTIME, "bench: %s", r->err);
        all = all && r->ok;
        emit(b, r);
    }
    net_free(&n);
    nb_cpu_empty_cache();
    return all;
}

int cmd_bench(int argc, char **argv)
{
    bench *b = calloc(1, sizeof *b);
    if (!b) return cli_fail(CLI_RUNTIME, "bench: out of memory");
    int rc = cli_parse(argc, argv, 2, "bench",
                       "--model --device --threads --batch-size --warmup --iters --format --seed --data --data-dir "
                       "--profile --memory-format --conv-algo --step-in-backward --cuda-graph",
                       &b->o);
    if (rc == CLI_OK) rc = setup(b);
    if (rc == CLI_OK) {
        if (!strcmp(b->o.format, "csv")) printf("%s\n", csv_header);
        bool all = true;
        for (int i = 0; i < b->n_models; i++) all = run_model(b, b->models[i]) && all;
        if (!strcmp(b->o.format, "table")) print_table(b);
        rc = all ? CLI_OK : CLI_RUNTIME;
    }
    free(b);
    return rc;
}
