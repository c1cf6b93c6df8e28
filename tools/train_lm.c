/* tools/train_lm.c: `nabla train --model lstm --data ptb` and its `nabla eval`. The model is
 * DLBench's LSTM (nb_lstm_lm_create: embedding and hidden 256, 2 layers; the vocabulary is the
 * training text's, 10,000 words on Penn Treebank), trained as a word-level language model on
 * DIR/ptb.{train,valid,test}.txt (nb_read_words) the way PyTorch's word_language_model example
 * trains: batches of rows x bptt steps (nb_lm_batches) with the LSTM's state carried from one to
 * the next (truncated BPTT) and each epoch starting from zero states, plain SGD at lr 20 with the
 * gradients' L2 norm clipped to 0.25, and the rate divided by 4 after an epoch whose validation
 * loss is not the best so far. Nothing in training is random but the initialisation (from the
 * seed), so a resumed run equals an uninterrupted one, bit for bit in deterministic mode (which
 * cmd_train.c turns on). A checkpoint holds the model ("model."),
 * the optimizer ("optim.") and metadata: model, data, epoch (done), epochs, seed, optimizer, lr
 * (the annealed rate for the next epoch), best_valid_loss, vocab (its size), batch_size, bptt and
 * clip. One process only: there is no data-parallel LM training. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_impl.h"

enum { LM_EMBED = 256, LM_HIDDEN = 256, LM_LAYERS = 2, LM_EVAL_BATCH = 10 };
#define LM_LR 20.0
#define LM_CLIP 0.25
#define LM_BATCH 20
#define LM_BPTT 35

typedef struct lm_run {
    cli_opts *o;
    const char *cmd;
    nb_device dev;
    nb_vocab *vocab;
    nb_tensor *tok[3]; /* train, valid, test tokens (test NULL when training without the file) */
    nb_lm_batches *batches[3];
    nb_module *m;
    nb_tensor **ps;
    int np;
    nb_optim *opt;
    nb_tensor_map *ck; /* --resume or --load */
    FILE *metrics;
    int64_t start_epoch;
    double lr, best; /* the rate of the next epoch, the best validation loss so far */
    bool tty;
} lm_run;

static const char *const split_name[3] = {"train", "valid", "test"};

static void lm_free(lm_run *r)
{
    for (int i = 0; i < 3; i++) {
        nb_lm_batches_free(r->batches[i]);
        nb_tensor_free(r->tok[i]);
    }
    nb_optim_free(r->opt);
    free(r->ps);
    nb_module_free(r->m);
    nb_vocab_free(r->vocab);
    nb_tensor_map_free(r->ck);
    if (r->metrics) fclose(r->metrics);
}

/* The options that make no sense for the language model; the device and the threads. */
static int lm_options(lm_run *r)
{
    cli_opts *o = r->o;
    if (o->data_given && strcmp(o->data, "ptb") != 0)
        return cli_fail(CLI_USAGE, "%s: --model lstm is a language model: it takes --data ptb, not \"%s\"", r->cmd,
                        o->data);
    o->data = "ptb";
    if (!o->data_dir_given)
        return cli_fail(CLI_USAGE, "%s: --data ptb needs --data-dir DIR (with ptb.train.txt, ptb.valid.txt and "
                                   "ptb.test.txt)",
                        r->cmd);
    if (o->schedule_given && strcmp(o->schedule, "none") != 0)
        return cli_fail(CLI_USAGE, "%s: --model lstm anneals its rate on the validation loss; --schedule %s is for "
                                   "the image models",
                        r->cmd, o->schedule);
    if (o->threads > 0 && nb_set_num_threads((int)o->threads) != NB_OK) return cli_fail_nb(CLI_USAGE, r->cmd);
    if (nb_device_parse(o->device, &r->dev) != NB_OK) return cli_fail_nb(CLI_USAGE, r->cmd);
    return CLI_OK;
}

/* DIR/ptb.<split>.txt into r->tok[i]: the training text grows the vocabulary, the others must use
 * its words. With optional, a missing file leaves r->tok[i] NULL. */
static int read_split(lm_run *r, int i, bool optional)
{
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/ptb.%s.txt", r->o->data_dir, split_name[i]);
    if (n < 0 || (size_t)n >= sizeof path) return cli_fail(CLI_USAGE, "%s: --data-dir is too long", r->cmd);
    if (optional && access(path, F_OK) != 0) return CLI_OK;
    if (!(r->tok[i] = nb_read_words(path, r->vocab, i == 0))) return cli_fail_nb(CLI_RUNTIME, r->cmd);
    return CLI_OK;
}

static int make_batches(lm_run *r, int i, int64_t batch)
{
    if (!r->tok[i]) return CLI_OK;
    if (!(r->batches[i] = nb_lm_batches_create(r->tok[i], batch, r->o->bptt, r->dev)))
        return cli_fail_nb(CLI_RUNTIME, r->cmd);
    return CLI_OK;
}

/* The model for r->vocab, from seed, on r->dev, stateful; r->ps its parameters. */
static int make_model(lm_run *r, uint64_t seed)
{
    nb_generator *g = nb_generator_create(seed);
    if (!g) return cli_fail_nb(CLI_RUNTIME, r->cmd);
    nb_tensor_params p = nb_tensor_params_default();
    p.generator = g;
    r->m = nb_lstm_lm_create(nb_vocab_size(r->vocab), LM_EMBED, LM_HIDDEN, LM_LAYERS, &p);
    nb_generator_free(g);
    if (!r->m || nb_lstm_lm_set_stateful(r->m, true) != NB_OK) return cli_fail_nb(CLI_RUNTIME, r->cmd);
    if (r->ck && cli_load_model(r->m, r->ck) != NB_OK) return cli_fail_nb(CLI_RUNTIME, r->cmd);
    if (nb_module_to(r->m, r->dev) != NB_OK) return cli_fail_nb(CLI_RUNTIME, r->cmd);
    r->np = nb_module_parameters(r->m, NULL, 0);
    if (!(r->ps = malloc((size_t)r->np * sizeof *r->ps))) return cli_fail(CLI_RUNTIME, "%s: out of memory", r->cmd);
    nb_module_parameters(r->m, r->ps, r->np);
    return CLI_OK;
}

static const char *meta(const lm_run *r, const char *key) { return nb_tensor_map_metadata(r->ck, key); }

/* A number in the checkpoint's metadata; CLI_RUNTIME naming the key when it is missing or bad. */
static int meta_num(const lm_run *r, const char *file, const char *key, double *out)
{
    const char *s = meta(r, key);
    char *end = NULL;
    *out = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || !isfinite(*out))
        return cli_fail(CLI_RUNTIME, "%s: %s is not a language-model checkpoint (metadata \"%s\" %s)", r->cmd, file,
                        key, s ? "is not a number" : "missing");
    return CLI_OK;
}

/* One setting of the checkpoint: a given option must equal it, an option not given takes it. */
static int adopt_int(const lm_run *r, const char *file, const char *key, const char *flag, bool given, int64_t *v)
{
    double x = 0;
    int rc = meta_num(r, file, key, &x);
    if (rc != CLI_OK) return rc;
    if (given && (double)*v != x)
        return cli_fail(CLI_USAGE, "%s: %s %lld differs from the checkpoint's %.0f", r->cmd, flag, (long long)*v, x);
    *v = (int64_t)x;
    return CLI_OK;
}

/* The checkpoint (--resume or --load) read and checked against this run: its model, its
 * vocabulary's size against the training text's, and its batch shape. */
static int read_checkpoint(lm_run *r, const char *file, bool resume)
{
    if (cli_checkpoint_load(file, &r->ck) != NB_OK) return cli_fail_nb(CLI_RUNTIME, r->cmd);
    const char *model = meta(r, "model");
    if (!model) return cli_fail(CLI_RUNTIME, "%s: %s is not a nabla training checkpoint (metadata missing)", r->cmd, file);
    if (strcmp(model, CLI_LM_MODEL) != 0)
        return cli_fail(CLI_RUNTIME, "%s: %s holds a \"%s\" model, not \"%s\"", r->cmd, file, model, CLI_LM_MODEL);
    double vocab = 0;
    int rc = meta_num(r, file, "vocab", &vocab);
    if (rc != CLI_OK) return rc;
    if ((int64_t)vocab != nb_vocab_size(r->vocab))
        return cli_fail(CLI_RUNTIME, "%s: %s was trained on a vocabulary of %.0f words; %s/ptb.train.txt has %lld",
                        r->cmd, file, vocab, r->o->data_dir, (long long)nb_vocab_size(r->vocab));
    cli_opts *o = r->o;
    if ((rc = adopt_int(r, file, "bptt", "--bptt", o->bptt > 0, &o->bptt)) != CLI_OK || !resume) return rc;
    int64_t seed = (int64_t)o->seed, epoch = 0;
    double clip = 0;
    if ((rc = adopt_int(r, file, "batch_size", "--batch-size", o->batch_size_given, &o->batch_size)) != CLI_OK ||
        (rc = adopt_int(r, file, "seed", "--seed", o->seed_given, &seed)) != CLI_OK ||
        (rc = adopt_int(r, file, "epoch", "epoch", false, &epoch)) != CLI_OK ||
        (rc = meta_num(r, file, "clip", &clip)) != CLI_OK || (rc = meta_num(r, file, "lr", &r->lr)) != CLI_OK ||
        (rc = meta_num(r, file, "best_valid_loss", &r->best)) != CLI_OK)
        return rc;
    if (o->clip >= 0 && o->clip != clip)
        return cli_fail(CLI_USAGE, "%s: --clip %g differs from the checkpoint's %g", r->cmd, o->clip, clip);
    const char *opt = meta(r, "optimizer");
    if (!opt) return cli_fail(CLI_RUNTIME, "%s: %s is not a nabla training checkpoint (metadata missing)", r->cmd, file);
    if (o->optimizer_given && strcmp(o->optimizer, opt) != 0)
        return cli_fail(CLI_USAGE, "%s: --optimizer %s differs from the checkpoint's %s", r->cmd, o->optimizer, opt);
    if (o->lr >= 0 && o->lr != r->lr)
        return cli_fail(CLI_USAGE, "%s: --lr %g differs from the checkpoint's annealed rate %.17g (leave it out)",
                        r->cmd, o->lr, r->lr);
    o->optimizer = opt;
    o->optimizer_given = true;
    o->clip = clip;
    o->seed = (uint64_t)seed;
    r->start_epoch = epoch;
    return CLI_OK;
}

static nb_optim *make_optim(lm_run *r)
{
    if (!strcmp(r->o->optimizer, "sgd")) { /* plain: the example's p -= lr grad */
        nb_sgd_params p = nb_sgd_params_default();
        p.lr = r->lr;
        return nb_optim_sgd(r->ps, r->np, &p);
    }
    bool w = !strcmp(r->o->optimizer, "adamw");
    nb_adam_params p = w ? nb_adamw_params_default() : nb_adam_params_default();
    p.lr = r->lr;
    return w ? nb_optim_adamw(r->ps, r->np, &p) : nb_optim_adam(r->ps, r->np, &p);
}

/* One epoch of b, from zero states: training (a clipped SGD step on each batch, progress on
 * stdout) or evaluation. *mean: the mean loss per token. */
static nb_status lm_epoch(lm_run *r, nb_lm_batches *b, bool train, int64_t epoch, double *mean)
{
    int64_t flat[2] = {-1, nb_vocab_size(r->vocab)}, fy[1] = {-1};
    int64_t nbatch = nb_lm_batches_len(b), k = 0, every = nbatch / 10 > 0 ? nbatch / 10 : 1;
    double sum = 0, t0 = cli_now(), last = 0;
    nb_module_train(r->m, train);
    nb_status st = nb_lstm_lm_reset_state(r->m);
    bool prev = nb_set_grad_enabled(train);
    for (bool done = false; st == NB_OK;) {
        nb_scope *sc = nb_scope_begin();
        nb_tensor *x = NULL, *y = NULL, *loss = NULL;
        double v = 0;
        st = nb_lm_batches_next(b, &x, &y, &done);
        if (st == NB_OK && !done) {
            nb_tensor *out = nb_module_forward(r->m, x);
            loss = out ? nb_cross_entropy(nb_reshape(out, flat, 2), nb_reshape(y, fy, 1), NULL) : NULL;
            if (!loss) st = nb_last_status();
            if (st == NB_OK && train) st = nb_backward(loss, NULL, 0);
            if (st == NB_OK && train) st = nb_clip_grad_norm_(r->ps, r->np, r->o->clip, 2.0, NULL);
            if (st == NB_OK && train) st = nb_optim_step(r->opt);
            if (st == NB_OK && train) st = nb_optim_zero_grad(r->opt);
            if (st == NB_OK) st = nb_item(loss, &v);
        }
        nb_scope_end(sc);
        if (st != NB_OK || done) break;
        sum += v, k++;
        double el = cli_now() - t0, rate = (double)(k * r->o->batch_size * r->o->bptt) / el;
        if (train && ((r->tty && el - last > 0.1) || (!r->tty && k % every == 0) || k == nbatch)) {
            printf(r->tty ? "\repoch %lld batch %lld/%lld loss %.4f (ppl %.1f) %.0f tokens/s ETA %.0fs  "
                          : "epoch %lld batch %lld/%lld loss %.4f (ppl %.1f) %.0f tokens/s ETA %.0fs\n",
                   (long long)epoch + 1, (long long)k, (long long)nbatch, sum / (double)k, exp(sum / (double)k),
                   rate, (double)(nbatch - k) * el / (double)k);
            fflush(stdout);
            last = el;
        }
    }
    if (train && r->tty) printf("\n");
    nb_set_grad_enabled(prev);
    *mean = k ? sum / (double)k : NAN;
    return st;
}

static nb_status set_num(nb_tensor_map *ck, const char *key, const char *fmt, double v)
{
    char num[64];
    snprintf(num, sizeof num, fmt, v);
    return nb_tensor_map_set_metadata(ck, key, num);
}

static nb_status lm_save(lm_run *r, int64_t epochs_done)
{
    const cli_opts *o = r->o;
    nb_tensor_map *ck = nb_tensor_map_create();
    nb_scope *s = nb_scope_begin();
    nb_status st = ck ? cli_save_model(r->m, ck) : nb_last_status();
    if (st == NB_OK) st = nb_optim_state_dict(r->opt, ck, "optim.");
    if (st == NB_OK) st = nb_tensor_map_set_metadata(ck, "model", CLI_LM_MODEL);
    if (st == NB_OK) st = nb_tensor_map_set_metadata(ck, "data", o->data);
    if (st == NB_OK) st = nb_tensor_map_set_metadata(ck, "optimizer", o->optimizer);
    if (st == NB_OK) st = set_num(ck, "epoch", "%.0f", (double)epochs_done);
    if (st == NB_OK) st = set_num(ck, "epochs", "%.0f", (double)o->epochs);
    if (st == NB_OK) st = set_num(ck, "seed", "%.0f", (double)o->seed);
    if (st == NB_OK) st = set_num(ck, "vocab", "%.0f", (double)nb_vocab_size(r->vocab));
    if (st == NB_OK) st = set_num(ck, "batch_size", "%.0f", (double)o->batch_size);
    if (st == NB_OK) st = set_num(ck, "bptt", "%.0f", (double)o->bptt);
    if (st == NB_OK) st = set_num(ck, "clip", "%.17g", o->clip);
    if (st == NB_OK) st = set_num(ck, "lr", "%.17g", r->lr);
    if (st == NB_OK) st = set_num(ck, "best_valid_loss", "%.17g", r->best);
    if (st == NB_OK) st = cli_checkpoint_save(ck, o->save);
    nb_scope_end(s);
    nb_tensor_map_free(ck);
    return st;
}

static int lm_report(lm_run *r, int64_t e, double tl, double vl, double lr, double secs, double rate)
{
    printf("epoch %lld/%lld train loss %.6f (ppl %.2f) valid loss %.6f perplexity %.4f lr %g (%.1f s, %.0f "
           "tokens/s)\n",
           (long long)e + 1, (long long)r->o->epochs, tl, exp(tl), vl, exp(vl), lr, secs, rate);
    fflush(stdout);
    if (!r->metrics) return CLI_OK;
    fprintf(r->metrics, "{\"epoch\": %lld, ", (long long)e + 1);
    cli_json_num(r->metrics, "train_loss", tl, false);
    cli_json_num(r->metrics, "valid_loss", vl, false);
    cli_json_num(r->metrics, "valid_perplexity", exp(vl), false);
    cli_json_num(r->metrics, "lr", lr, false);
    cli_json_num(r->metrics, "seconds", secs, false);
    cli_json_num(r->metrics, "tokens_per_second", rate, true);
    fprintf(r->metrics, "}\n");
    if (fflush(r->metrics) != 0) return cli_fail(CLI_RUNTIME, "train: cannot write %s", r->o->metrics);
    return CLI_OK;
}

/* The test text's loss, as train prints it at the end and eval prints it. */
static int lm_test(lm_run *r)
{
    double loss = 0;
    if (lm_epoch(r, r->batches[2], false, 0, &loss) != NB_OK) return cli_fail_nb(CLI_RUNTIME, r->cmd);
    printf("test loss %.6f perplexity %.4f\n", loss, exp(loss));
    return CLI_OK;
}

static int lm_setup(lm_run *r, bool train)
{
    int rc = lm_options(r);
    if (rc != CLI_OK) return rc;
    if (!(r->vocab = nb_vocab_create())) return cli_fail_nb(CLI_RUNTIME, r->cmd);
    if ((rc = read_split(r, 0, false)) != CLI_OK || (train && (rc = read_split(r, 1, false)) != CLI_OK) ||
        (rc = read_split(r, 2, train)) != CLI_OK)
        return rc;
    const char *ck = train ? r->o->resume : r->o->load;
    if (ck && (rc = read_checkpoint(r, ck, train)) != CLI_OK) return rc;
    cli_opts *o = r->o;
    if (!o->optimizer_given) o->optimizer = "sgd";
    if (!o->batch_size_given) o->batch_size = LM_BATCH;
    if (o->bptt <= 0) o->bptt = LM_BPTT;
    if (o->clip < 0) o->clip = LM_CLIP;
    if (!ck) {
        r->lr = o->lr >= 0 ? o->lr : !strcmp(o->optimizer, "sgd") ? LM_LR : nb_adam_params_default().lr;
        r->best = INFINITY;
    }
    if (train && o->limit > 0 && o->limit < nb_tensor_numel(r->tok[0])) {
        nb_tensor *head = nb_narrow(r->tok[0], 0, 0, o->limit);
        if (!head) return cli_fail_nb(CLI_RUNTIME, r->cmd);
        nb_tensor_free(r->tok[0]);
        r->tok[0] = head;
    }
    if ((train && ((rc = make_batches(r, 0, o->batch_size)) != CLI_OK ||
                   (rc = make_batches(r, 1, LM_EVAL_BATCH)) != CLI_OK)) ||
        (rc = make_batches(r, 2, LM_EVAL_BATCH)) != CLI_OK || (rc = make_model(r, o->seed)) != CLI_OK)
        return rc;
    if (!train) return CLI_OK;
    if (!(r->opt = make_optim(r))) return cli_fail_nb(CLI_RUNTIME, r->cmd);
    if (r->ck && (nb_optim_load_state_dict(r->opt, r->ck, "optim.") != NB_OK || nb_optim_set_lr(r->opt, r->lr) != NB_OK))
        return cli_fail_nb(CLI_RUNTIME, "train: resume");
    if (o->metrics && !(r->metrics = fopen(o->metrics, "a")))
        return cli_fail(CLI_RUNTIME, "train: cannot open %s for writing", o->metrics);
    r->tty = isatty(STDOUT_FILENO);
    return CLI_OK;
}

static int lm_epochs(lm_run *r)
{
    const cli_opts *o = r->o;
    int64_t end = o->epochs;
    if (o->stop_after > 0 && r->start_epoch + o->stop_after < end) end = r->start_epoch + o->stop_after;
    for (int64_t e = r->start_epoch; e < end; e++) {
        double t0 = cli_now(), tl = 0, vl = 0, lr = r->lr;
        if (lm_epoch(r, r->batches[0], true, e, &tl) != NB_OK) return cli_fail_nb(CLI_RUNTIME, "train");
        double secs = cli_now() - t0;
        double rate = secs > 0 ? (double)(nb_lm_batches_len(r->batches[0]) * o->batch_size * o->bptt) / secs : 0;
        if (lm_epoch(r, r->batches[1], false, e, &vl) != NB_OK) return cli_fail_nb(CLI_RUNTIME, "train");
        if (vl < r->best) {
            r->best = vl;
        } else { /* the example's annealing */
            r->lr /= 4;
            if (nb_optim_set_lr(r->opt, r->lr) != NB_OK) return cli_fail_nb(CLI_RUNTIME, "train");
        }
        int rc = lm_report(r, e, tl, vl, lr, secs, rate);
        if (rc != CLI_OK) return rc;
        if (o->save && lm_save(r, e + 1) != NB_OK) return cli_fail_nb(CLI_RUNTIME, "train: save");
    }
    return end == o->epochs && r->batches[2] ? lm_test(r) : CLI_OK;
}

int cli_train_lm(cli_opts *o)
{
    lm_run r = {.o = o, .cmd = "train"};
    nb_process_group *pg = NULL;
    double t0 = cli_now();
    int rc = cli_dist_init(o, &pg);
    if (rc == CLI_OK && pg) rc = cli_fail(CLI_USAGE, "train: --model lstm trains in one process (no --dist)");
    nb_process_group_free(pg);
    if (rc == CLI_OK) rc = lm_setup(&r, true);
    if (rc == CLI_OK) {
        char dev[32];
        nb_device_str(r.dev, dev, sizeof dev);
        printf("training lstm (%lld parameters) on ptb: %lld words, %lld training tokens in %lld batches of %lld x "
               "%lld, %s at lr %g, gradient norm clipped to %g, device %s, %d threads\n",
               (long long)nb_module_num_parameters(r.m), (long long)nb_vocab_size(r.vocab),
               (long long)nb_tensor_numel(r.tok[0]), (long long)nb_lm_batches_len(r.batches[0]),
               (long long)o->batch_size, (long long)o->bptt, o->optimizer, r.lr, o->clip, dev, nb_get_num_threads());
        if (r.start_epoch > 0) printf("resuming from %s after epoch %lld\n", o->resume, (long long)r.start_epoch);
        rc = lm_epochs(&r);
    }
    if (rc == CLI_OK) printf("total training time %.1f s\n", cli_now() - t0);
    lm_free(&r);
    return rc;
}

int cli_eval_lm(cli_opts *o)
{
    lm_run r = {.o = o, .cmd = "eval"};
    int rc = lm_setup(&r, false);
    if (rc == CLI_OK) rc = lm_test(&r);
    lm_free(&r);
    return rc;
}
