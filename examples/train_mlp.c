/* Trains a two-layer perceptron on Fashion-MNIST with nabla's tensors and autograd: the main job
 * until the `nabla train` command lands. Usage:
 *   train_mlp [--data-dir DIR] [--epochs N] [--batch-size N] [--lr X] [--device D] [--seed N]
 * The data is Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "nabla.h"

typedef struct dataset {
    float *x;   /* n x 784, normalised */
    int64_t *y; /* n */
    int64_t n;
} dataset;

static uint32_t be32(const unsigned char *b) { return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3]; }

/* Reads a gzipped IDX file: magic, dims, then bytes. Returns the bytes (malloc'd) or NULL. */
static unsigned char *read_idx(const char *path, uint32_t want_magic, int ndim, uint32_t *dims)
{
    gzFile f = gzopen(path, "rb");
    if (!f) {
        fprintf(stderr, "train_mlp: cannot open %s\n", path);
        return NULL;
    }
    unsigned char hdr[16];
    int hlen = 4 + 4 * ndim;
    size_t total = 1;
    unsigned char *data = NULL;
    if (gzread(f, hdr, (unsigned)hlen) != hlen || be32(hdr) != want_magic) {
        fprintf(stderr, "train_mlp: %s: not an IDX file with magic 0x%08x\n", path, want_magic);
        goto done;
    }
    for (int i = 0; i < ndim; i++) {
        dims[i] = be32(hdr + 4 + 4 * i);
        total *= dims[i];
    }
    if (total == 0 || total > ((size_t)1 << 31)) {
        fprintf(stderr, "train_mlp: %s: bad dims\n", path);
        goto done;
    }
    data = malloc(total);
    if (data && gzread(f, data, (unsigned)total) != (int)total) {
        fprintf(stderr, "train_mlp: %s: truncated (expected %zu bytes of data)\n", path, total);
        free(data);
        data = NULL;
    }
done:
    gzclose(f);
    return data;
}

static int load(const char *dir, const char *prefix, dataset *d)
{
    char pi[4096], pl[4096];
    snprintf(pi, sizeof pi, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
    snprintf(pl, sizeof pl, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
    uint32_t di[3], dl[1];
    unsigned char *img = read_idx(pi, 0x803, 3, di), *lab = read_idx(pl, 0x801, 1, dl);
    int ok = img && lab && di[0] == dl[0] && di[1] == 28 && di[2] == 28;
    if (img && lab && !ok) fprintf(stderr, "train_mlp: %s: images and labels do not match\n", dir);
    if (ok) {
        d->n = di[0];
        d->x = malloc((size_t)d->n * 784 * sizeof *d->x);
        d->y = malloc((size_t)d->n * sizeof *d->y);
        ok = d->x && d->y;
        for (int64_t i = 0; ok && i < d->n * 784; i++) d->x[i] = ((float)img[i] / 255.0f - 0.2860f) / 0.3530f;
        for (int64_t i = 0; ok && i < d->n; i++) d->y[i] = lab[i];
    }
    free(img);
    free(lab);
    return ok ? 0 : -1;
}

typedef struct model {
    nb_tensor *w1, *b1, *w2, *b2;  /* parameters (leaves) */
    nb_tensor *v[4];               /* momentum buffers */
} model;

/* PyTorch's default Linear init: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias. */
static nb_tensor *uniform(const int64_t *shape, int nd, double bound, nb_device dev)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor_params p = nb_tensor_params_default();
    p.device = dev;
    nb_tensor *r = nb_rand(shape, nd, &p);
    nb_tensor *t = r ? nb_add_scalar(nb_mul_scalar(r, 2 * bound), -bound) : NULL;
    return nb_scope_end_keep(s, t); /* no enclosing scope: the caller owns it */
}

static nb_tensor *forward(const model *m, nb_tensor *x)
{
    return nb_linear(nb_relu(nb_linear(x, m->w1, m->b1)), m->w2, m->b2);
}

static nb_tensor *nll(nb_tensor *logits, nb_tensor *y)
{
    nb_tensor *lp = nb_log_softmax(logits, 1);
    nb_tensor *picked = nb_gather(lp, 1, nb_unsqueeze(y, 1));
    return nb_neg(nb_mean(picked, NULL, 0, false));
}

static int sgd_step(model *m, double lr)
{
    nb_tensor *ps[4] = {m->w1, m->b1, m->w2, m->b2};
    bool prev = nb_set_grad_enabled(false);
    int rc = 0;
    for (int i = 0; i < 4 && !rc; i++) {
        nb_tensor *g = nb_tensor_grad(ps[i]);
        rc = !g || nb_mul_scalar_(m->v[i], 0.9) || nb_add_(m->v[i], g) ||
             nb_sub_(ps[i], nb_mul_scalar(m->v[i], lr)) || nb_tensor_set_grad(ps[i], NULL);
    }
    nb_set_grad_enabled(prev);
    return rc;
}

static double evaluate(const model *m, const dataset *d, nb_device dev, double *loss_out)
{
    bool prev = nb_set_grad_enabled(false);
    int64_t correct = 0;
    double loss = 0;
    for (int64_t i = 0; i < d->n; i += 1000) {
        int64_t b = d->n - i < 1000 ? d->n - i : 1000;
        nb_scope *s = nb_scope_begin();
        nb_tensor_params pf = nb_tensor_params_default(), pl = pf;
        pf.device = pl.device = dev;
        pl.dtype = NB_INT64;
        nb_tensor *x = nb_tensor_from_data(d->x + i * 784, (int64_t[]){b, 784}, 2, &pf);
        nb_tensor *y = nb_tensor_from_data(d->y + i, (int64_t[]){b}, 1, &pl);
        nb_tensor *logits = forward(m, x);
        double l = NAN;
        int64_t c = 0;
        nb_item(nll(logits, y), &l);
        nb_item_int64(nb_sum(nb_eq(nb_argmax(logits, 1, false), y), NULL, 0, false), &c);
        loss += l * (double)b;
        correct += c;
        nb_scope_end(s);
    }
    nb_set_grad_enabled(prev);
    *loss_out = loss / (double)d->n;
    return (double)correct / (double)d->n;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    const char *dir = "/usr/share/datasets/fashion-mnist", *devname = "auto";
    int epochs = 5, bs = 128;
    double lr = 0.05;
    unsigned long seed = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "train_mlp: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--data-dir")) dir = v;
        else if (!strcmp(a, "--epochs")) epochs = atoi(v);
        else if (!strcmp(a, "--batch-size")) bs = atoi(v);
        else if (!strcmp(a, "--lr")) lr = atof(v);
        else if (!strcmp(a, "--device")) devname = v;
        else if (!strcmp(a, "--seed")) seed = strtoul(v, NULL, 10);
        else { fprintf(stderr, "train_mlp: unknown flag %s\n", a); return 2; }
        i++;
    }
    if (epochs < 1 || bs < 1 || !(lr > 0)) { fprintf(stderr, "train_mlp: bad --epochs/--batch-size/--lr\n"); return 2; }
    nb_device dev;
    if (nb_device_parse(devname, &dev) != NB_OK) { fprintf(stderr, "train_mlp: %s\n", nb_last_error()); return 2; }
    dataset train = {0}, test = {0};
    if (load(dir, "train", &train) || load(dir, "t10k", &test)) return 1;
    char dn[32];
    nb_device_str(dev, dn, sizeof dn);
    printf("train_mlp: Fashion-MNIST %lld train / %lld test, MLP 784-256-10, device %s, %d threads\n",
           (long long)train.n, (long long)test.n, dn, nb_get_num_threads());
    nb_manual_seed(seed);
    model m = {0};
    m.w1 = uniform((int64_t[]){256, 784}, 2, 1 / sqrt(784.0), dev);
    m.b1 = uniform((int64_t[]){256}, 1, 1 / sqrt(784.0), dev);
    m.w2 = uniform((int64_t[]){10, 256}, 2, 1 / sqrt(256.0), dev);
    m.b2 = uniform((int64_t[]){10}, 1, 1 / sqrt(256.0), dev);
    nb_tensor *ps[4] = {m.w1, m.b1, m.w2, m.b2};
    for (int i = 0; i < 4; i++) {
        if (!ps[i] || nb_tensor_set_requires_grad(ps[i], true)) { fprintf(stderr, "train_mlp: %s\n", nb_last_error()); return 1; }
        m.v[i] = nb_zeros_like(ps[i]);
    }
    int64_t *perm = malloc((size_t)train.n * sizeof *perm);
    float *xb = malloc((size_t)bs * 784 * sizeof *xb);
    int64_t *yb = malloc((size_t)bs * sizeof *yb);
    srand((unsigned)seed);
    double t0 = now();
    for (int ep = 1; ep <= epochs; ep++) {
        for (int64_t i = 0; i < train.n; i++) perm[i] = i;
        for (int64_t i = train.n - 1; i > 0; i--) {
            int64_t j = (int64_t)(((uint64_t)rand() << 16 ^ (uint64_t)rand()) % (uint64_t)(i + 1)), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        double te = now(), sum = 0;
        int64_t steps = 0;
        for (int64_t i = 0; i + bs <= train.n; i += bs, steps++) {
            for (int k = 0; k < bs; k++) {
                memcpy(xb + (size_t)k * 784, train.x + perm[i + k] * 784, 784 * sizeof *xb);
                yb[k] = train.y[perm[i + k]];
            }
            nb_scope *s = nb_scope_begin();
            nb_tensor_params pf = nb_tensor_params_default(), pl = pf;
            pf.device = pl.device = dev;
            pl.dtype = NB_INT64;
            nb_tensor *x = nb_tensor_from_data(xb, (int64_t[]){bs, 784}, 2, &pf);
            nb_tensor *y = nb_tensor_from_data(yb, (int64_t[]){bs}, 1, &pl);
            nb_tensor *loss = nll(forward(&m, x), y);
            double l;
            if (!loss || nb_backward(loss, NULL, 0) || sgd_step(&m, lr) || nb_item(loss, &l)) {
                fprintf(stderr, "train_mlp: step failed: %s\n", nb_last_error());
                return 1;
            }
            sum += l;
            nb_scope_end(s);
        }
        double test_loss, acc = evaluate(&m, &test, dev, &test_loss);
        double sec = now() - te;
        printf("epoch %d: train loss %.4f, test loss %.4f, test accuracy %.2f%%, %.1f s (%.0f samples/s)\n", ep,
               sum / (double)steps, test_loss, 100 * acc, sec, (double)(steps * bs) / sec);
        fflush(stdout);
    }
    printf("train_mlp: done in %.1f s\n", now() - t0);
    for (int i = 0; i < 4; i++) {
        nb_tensor_free(ps[i]);
        nb_tensor_free(m.v[i]);
    }
    free(perm); free(xb); free(yb);
    free(train.x); free(train.y); free(test.x); free(test.y);
    return 0;
}
