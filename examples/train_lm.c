/* Trains a word-level LSTM language model on Penn Treebank, as PyTorch's word_language_model
 * example does (its defaults: embedding and hidden 200, 2 layers, batches of 20 rows x 35 steps,
 * SGD at lr 20 with the gradients' norm clipped to 0.25, lr divided by 4 when the validation loss
 * does not improve; this model has no dropout): ptb.train.txt and ptb.valid.txt read with
 * nb_read_words, batches from nb_lm_batches with the LSTM's state carried from one to the next
 * (nb_lstm_lm_set_stateful), each epoch's training loss and validation perplexity printed.
 *
 *   train_lm DATA_DIR [--epochs N] [--batch-size N] [--bptt N] [--lr X] [--clip X] [--size N]
 *            [--layers N] [--device cpu|cuda|auto] [--seed N]
 *
 * Any text in the same form works: DATA_DIR/ptb.train.txt and DATA_DIR/ptb.valid.txt, one
 * sentence a line, words split at white space. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nabla.h"

/* On failure: the message, exit status 1, and everything made so far freed (main's `done`). */
#define TRY(x)                                                                                   \
    do {                                                                                         \
        if (!(x)) {                                                                              \
            fprintf(stderr, "train_lm: %s: %s\n", #x, nb_last_error());                          \
            rc = 1;                                                                              \
            goto done;                                                                           \
        }                                                                                        \
    } while (0)

typedef struct opts {
    const char *dir, *device;
    int epochs, layers;
    int64_t batch, bptt, size;
    double lr, clip;
    uint64_t seed;
} opts;

static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){.device = "auto", .epochs = 6, .layers = 2, .batch = 20, .bptt = 35, .size = 200, .lr = 20,
                .clip = 0.25, .seed = 1111};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (a[0] != '-') {
            o->dir = a;
            continue;
        }
        if (!v) return fprintf(stderr, "train_lm: %s needs a value\n", a), 2;
        i++;
        if (!strcmp(a, "--epochs")) o->epochs = atoi(v);
        else if (!strcmp(a, "--batch-size")) o->batch = atoll(v);
        else if (!strcmp(a, "--bptt")) o->bptt = atoll(v);
        else if (!strcmp(a, "--size")) o->size = atoll(v);
        else if (!strcmp(a, "--layers")) o->layers = atoi(v);
        else if (!strcmp(a, "--lr")) o->lr = atof(v);
        else if (!strcmp(a, "--clip")) o->clip = atof(v);
        else if (!strcmp(a, "--device")) o->device = v;
        else if (!strcmp(a, "--seed")) o->seed = strtoull(v, NULL, 10);
        else return fprintf(stderr, "train_lm: unknown option %s\n", a), 2;
    }
    if (!o->dir) return fprintf(stderr, "usage: train_lm DATA_DIR [--epochs N] [--lr X] ... (see the source)\n"), 2;
    if (o->epochs < 1 || o->batch < 1 || o->bptt < 1 || o->size < 1 || o->layers < 1 || !(o->lr > 0))
        return fprintf(stderr, "train_lm: epochs, batch size, bptt, size, layers and lr must be positive\n"), 2;
    return 0;
}

/* The mean loss over the batches of one epoch of b: training (SGD step on each) or evaluation. */
static nb_status run_epoch(nb_module *m, nb_optim *opt, nb_tensor **ps, int np, nb_lm_batches *b, int64_t vocab,
                           double clip, bool train, double *mean)
{
    int64_t flat[2] = {-1, vocab}, fy[1] = {-1};
    double sum = 0;
    int64_t n = 0;
    nb_module_train(m, train);
    nb_status st = nb_lstm_lm_reset_state(m); /* each epoch starts from zero states, as the example's */
    if (st != NB_OK) return st;
    bool prev = nb_set_grad_enabled(train);
    for (;;) {
        nb_scope *sc = nb_scope_begin();
        nb_tensor *x, *y;
        bool done;
        st = nb_lm_batches_next(b, &x, &y, &done);
        if (st != NB_OK || done) {
            nb_scope_end(sc);
            break;
        }
        if (train) st = nb_optim_zero_grad(opt);
        nb_tensor *out = st == NB_OK ? nb_module_forward(m, x) : NULL;
        nb_tensor *loss = out ? nb_cross_entropy(nb_reshape(out, flat, 2), nb_reshape(y, fy, 1), NULL) : NULL;
        if (st == NB_OK && !loss) st = nb_last_status();
        if (st == NB_OK && train) st = nb_backward(loss, NULL, 0);
        if (st == NB_OK && train) st = nb_clip_grad_norm_(ps, np, clip, 2.0, NULL);
        if (st == NB_OK && train) st = nb_optim_step(opt);
        double v = 0;
        if (st == NB_OK) st = nb_item(loss, &v);
        nb_scope_end(sc);
        if (st != NB_OK) break;
        sum += v, n++;
    }
    nb_set_grad_enabled(prev);
    *mean = n ? sum / (double)n : NAN;
    return st;
}

int main(int argc, char **argv)
{
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    nb_vocab *v = NULL;
    nb_tensor *train_tok = NULL, *valid_tok = NULL, **ps = NULL;
    nb_lm_batches *train = NULL, *valid = NULL;
    nb_module *m = NULL;
    nb_optim *opt = NULL;
    nb_device dev;
    TRY(nb_device_parse(o.device, &dev) == NB_OK);
    nb_manual_seed(o.seed);
    char path[1024];
    TRY(v = nb_vocab_create());
    snprintf(path, sizeof path, "%s/ptb.train.txt", o.dir);
    TRY(train_tok = nb_read_words(path, v, true));
    snprintf(path, sizeof path, "%s/ptb.valid.txt", o.dir);
    TRY(valid_tok = nb_read_words(path, v, false)); /* the training text's words only */
    int64_t vocab = nb_vocab_size(v);
    TRY(train = nb_lm_batches_create(train_tok, o.batch, o.bptt, dev));
    TRY(valid = nb_lm_batches_create(valid_tok, 10, o.bptt, dev)); /* the example's eval batch */

    TRY(m = nb_lstm_lm_create(vocab, o.size, o.size, o.layers, NULL));
    TRY(nb_lstm_lm_set_stateful(m, true) == NB_OK);
    TRY(nb_module_to(m, dev) == NB_OK);
    int np = nb_module_parameters(m, NULL, 0);
    TRY(ps = malloc((size_t)np * sizeof *ps));
    nb_module_parameters(m, ps, np);
    nb_sgd_params sp = nb_sgd_params_default();
    sp.lr = o.lr;
    TRY(opt = nb_optim_sgd(ps, np, &sp));
    char ds[32];
    nb_device_str(dev, ds, sizeof ds);
    printf("train_lm: %lld words, %lld training batches of %lld x %lld, %d parameter tensors, on %s\n",
           (long long)vocab, (long long)nb_lm_batches_len(train), (long long)o.batch, (long long)o.bptt, np, ds);

    double best = INFINITY, lr = o.lr;
    for (int e = 1; e <= o.epochs; e++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        double tl, vl;
        TRY(run_epoch(m, opt, ps, np, train, vocab, o.clip, true, &tl) == NB_OK);
        TRY(run_epoch(m, opt, ps, np, valid, vocab, o.clip, false, &vl) == NB_OK);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        printf("epoch %d: train loss %.3f (ppl %.1f), valid loss %.3f (ppl %.2f), lr %g, %.1f s\n", e, tl, exp(tl), vl,
               exp(vl), lr, s);
        fflush(stdout);
        if (vl < best) {
            best = vl;
        } else { /* the example's annealing */
            lr /= 4;
            TRY(nb_optim_set_lr(opt, lr) == NB_OK);
        }
    }
done:
    nb_optim_free(opt);
    free(ps);
    nb_module_free(m);
    nb_lm_batches_free(train);
    nb_lm_batches_free(valid);
    nb_tensor_free(train_tok);
    nb_tensor_free(valid_tok);
    nb_vocab_free(v);
    return rc;
}
