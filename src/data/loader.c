/* The data loader: batches of a dataset in a seeded order, augmented and normalised, prepared
 * by a background thread (a bounded queue of `prefetch` batches) while the caller trains.
 *
 * pin_memory with a CUDA device: batches are built in pinned host memory and their copies queued
 * (nb_to_non_blocking) on a stream of the loader's own from the background thread, followed by an
 * event; nb_data_loader_next makes the caller's current stream wait for that event and marks the
 * batch as used on it (nb_cuda_record_stream), so that the device memory, which belongs to the
 * loader's stream, is reused only after the caller's work on it. The pinned blocks are released
 * as soon as the copies are queued: the pinned allocator reuses them only after the copies ran.
 *
 * Reproducibility: the order of epoch e is a Fisher-Yates shuffle driven by hash(seed, e), and
 * the augmentation of the sample at global position g of epoch e by hash(seed, e, g); both are
 * independent of which thread builds a batch and when.
 *
 * Sharding (DistributedSampler): perm holds the epoch's order of all n samples on every rank; the
 * k-th sample of rank r is at global position g = k * R + r of that order padded by wrapping
 * (perm[g % n]), so neither the padded order nor the shard is stored. With R = 1, g = k. */
#include <pthread.h>
#include <string.h>

#include "core/error_impl.h"
#include "core/tensor_impl.h"
#include "data/data_impl.h"
#include "nabla/cuda.h"
#include "nabla/data.h"

#define MAX_PREFETCH 64

typedef struct batch {
    nb_tensor *x, *y; /* untracked references */
    nb_event *ready;  /* recorded after x and y were queued for the device (pinned, threaded) */
    nb_status status;
    char msg[512];
} batch;

struct nb_data_loader {
    nb_dataset *ds;
    nb_data_loader_params p;
    int64_t n, nbatches;
    int64_t replicas, shard_n; /* num_replicas (0 taken as 1); samples of this rank per epoch */
    int in_ndim, out_ndim;
    int64_t in_shape[NB_MAX_DIMS], out_shape[NB_MAX_DIMS + 1]; /* out_shape[0] is the batch */
    int64_t in_numel, out_numel;
    float *scratch; /* one input sample, for the crop */
    const nb_host_mem *pinned; /* batches built in pinned memory (pin_memory with a GPU), else NULL */
    nb_stream *stream;         /* the background thread's copies to a CUDA device (pinned only) */
    int64_t *perm;
    int64_t epoch, cons_pos;
    /* the background thread's state, under mu */
    bool threaded, quit, busy;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv_prod, cv_cons;
    batch queue[MAX_PREFETCH];
    int qhead, qcount;
    int64_t prod_pos;
    uint64_t gen;
};

nb_data_loader_params nb_data_loader_params_default(void)
{
    nb_data_loader_params p;
    memset(&p, 0, sizeof p);
    p.batch_size = 64;
    p.prefetch = 2;
    p.device = nb_cpu();
    p.pin_memory = false;
    p.num_replicas = 1;
    p.rank = 0;
    return p;
}

/* ---- transforms -------------------------------------------------------------------------- */

void nb__data_crop(const float *x, int64_t c, int64_t h, int64_t w, int64_t pad, int64_t dy, int64_t dx,
                   int64_t oh, int64_t ow, float *out)
{
    for (int64_t k = 0; k < c; k++)
        for (int64_t i = 0; i < oh; i++) {
            int64_t si = i + dy - pad;
            float *o = out + (k * oh + i) * ow;
            if (si < 0 || si >= h) {
                memset(o, 0, sizeof(float) * (size_t)ow);
                continue;
            }
            const float *row = x + (k * h + si) * w;
            for (int64_t j = 0; j < ow; j++) {
                int64_t sj = j + dx - pad;
                o[j] = sj >= 0 && sj < w ? row[sj] : 0.0f;
            }
        }
}

void nb__data_hflip(float *x, int64_t c, int64_t h, int64_t w)
{
    for (int64_t r = 0; r < c * h; r++) {
        float *row = x + r * w;
        for (int64_t a = 0, b = w - 1; a < b; a++, b--) {
            float t = row[a];
            row[a] = row[b];
            row[b] = t;
        }
    }
}

/* Crop, flip and normalise the k-th sample of this rank's shard of `epoch`, read from ds into
 * out. Its global position g keys the augmentation, so that the ranks' streams differ. */
static nb_status load_sample(nb_data_loader *l, int64_t epoch, int64_t k, float *out, int64_t *label)
{
    const nb_data_loader_params *p = &l->p;
    float *dst = p->random_crop ? l->scratch : out;
    int64_t g = k * l->replicas + p->rank;
    NB_TRY(nb_dataset_get(l->ds, l->perm[g % l->n], dst, label));
    uint64_t rng = nb__mix64(p->seed ^ nb__mix64((uint64_t)epoch * 2 + 1) ^ nb__mix64((uint64_t)g * 2 + 2));
    int64_t c = l->out_shape[1];
    if (p->random_crop) {
        int64_t h = l->in_shape[1], w = l->in_shape[2], oh = l->out_shape[2], ow = l->out_shape[3];
        int64_t dy = (int64_t)nb__rng_below(&rng, (uint64_t)(h + 2 * p->crop_padding - oh + 1));
        int64_t dx = (int64_t)nb__rng_below(&rng, (uint64_t)(w + 2 * p->crop_padding - ow + 1));
        nb__data_crop(dst, c, h, w, p->crop_padding, dy, dx, oh, ow, out);
    }
    if (p->hflip && (nb__rng_next(&rng) >> 63)) nb__data_hflip(out, c, l->out_shape[2], l->out_shape[3]);
    if (p->norm_channels > 0) {
        int64_t plane = l->out_numel / c;
        for (int64_t ch = 0; ch < c; ch++) {
            float m = p->mean[ch], inv = 1.0f / p->std[ch];
            float *o = out + ch * plane;
            for (int64_t j = 0; j < plane; j++) o[j] = (o[j] - m) * inv;
        }
    }
    return NB_OK;
}

static nb_tensor *host_tensor(const nb_data_loader *l, const int64_t *shape, int ndim, nb_dtype dtype)
{
    return l->pinned ? nb__tensor_new_host("data_loader", shape, ndim, dtype, l->pinned)
                     : nb__tensor_new_named("data_loader", shape, ndim, dtype, nb_cpu());
}

/* Queues the copies of a pinned batch to the CUDA device on the calling thread's current stream
 * (the loader's stream on the background thread), then an event on l->stream when there is one;
 * out then holds the device tensors. */
static nb_status queue_to_device(nb_data_loader *l, batch *out)
{
    /* a private scope: on the caller's thread (prefetch 0) a scope of the caller may be open */
    nb_scope *s = nb_scope_begin();
    if (!s) return nb_last_status();
    nb_tensor *dx = nb_to_non_blocking(out->x, l->p.device);
    nb_tensor *dy = dx ? nb_to_non_blocking(out->y, l->p.device) : NULL;
    nb_status st = dy ? NB_OK : nb_last_status();
    if (st == NB_OK && l->stream) {
        out->ready = nb_cuda_event_create(false);
        st = out->ready ? nb_cuda_event_record(out->ready, l->stream) : nb_last_status();
    }
    if (st == NB_OK) {
        nb__release(out->x); /* the pinned blocks wait for the copies before any reuse */
        nb__release(out->y);
        out->x = nb_tensor_retain(dx);
        out->y = nb_tensor_retain(dy);
    }
    nb_scope_end(s);
    return st;
}

/* Builds batch b of `epoch` into *out (on the loader's device when the batch is pinned and the
 * device is CUDA, else on the CPU); on failure out->status/msg hold the error. */
static void make_batch(nb_data_loader *l, int64_t epoch, int64_t b, batch *out)
{
    int64_t start = b * l->p.batch_size;
    int64_t bs = l->shard_n - start < l->p.batch_size ? l->shard_n - start : l->p.batch_size;
    int64_t shape[NB_MAX_DIMS + 1];
    memcpy(shape, l->out_shape, sizeof shape);
    shape[0] = bs;
    out->ready = NULL;
    out->x = host_tensor(l, shape, l->out_ndim, NB_FLOAT32);
    out->y = out->x ? host_tensor(l, &bs, 1, NB_INT64) : NULL;
    out->status = out->y ? NB_OK : nb_last_status();
    float *xs = out->y ? (float *)nb__data(out->x) : NULL;
    for (int64_t k = 0; k < bs && out->status == NB_OK; k++)
        out->status = load_sample(l, epoch, start + k, xs + k * l->out_numel, (int64_t *)nb__data(out->y) + k);
    if (out->status == NB_OK && l->pinned && l->p.device.type == NB_DEVICE_CUDA) out->status = queue_to_device(l, out);
    if (out->status != NB_OK) {
        snprintf(out->msg, sizeof out->msg, "%s", nb_last_error());
        nb__release(out->x);
        nb__release(out->y);
        nb_cuda_event_free(out->ready);
        out->x = out->y = NULL;
        out->ready = NULL;
    }
}

static void release_batch(batch *b)
{
    nb__release(b->x);
    nb__release(b->y);
    nb_cuda_event_free(b->ready);
    b->x = b->y = NULL;
    b->ready = NULL;
}

/* ---- the background thread ---------------------------------------------------------------- */

static void *producer(void *arg)
{
    nb_data_loader *l = arg;
    /* this thread's copies and device memory go to the loader's stream (create checked it) */
    if (l->stream) nb_cuda_set_stream(l->stream);
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->quit && (l->prod_pos >= l->nbatches || l->qcount == l->p.prefetch))
            pthread_cond_wait(&l->cv_prod, &l->mu);
        if (l->quit) break;
        int64_t b = l->prod_pos++, epoch = l->epoch;
        uint64_t gen = l->gen;
        l->busy = true;
        pthread_mutex_unlock(&l->mu);
        batch out;
        make_batch(l, epoch, b, &out);
        pthread_mutex_lock(&l->mu);
        l->busy = false;
        if (gen != l->gen) { /* the epoch was restarted meanwhile */
            release_batch(&out);
        } else {
            l->queue[(l->qhead + l->qcount) % l->p.prefetch] = out;
            l->qcount++;
        }
        pthread_cond_broadcast(&l->cv_cons);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void drain_queue(nb_data_loader *l)
{
    for (; l->qcount > 0; l->qcount--, l->qhead = (l->qhead + 1) % l->p.prefetch)
        release_batch(&l->queue[l->qhead]);
    l->qhead = 0;
}

static void make_perm(nb_data_loader *l)
{
    for (int64_t i = 0; i < l->n; i++) l->perm[i] = i;
    if (!l->p.shuffle) return;
    uint64_t rng = nb__mix64(l->p.seed ^ nb__mix64(UINT64_C(0x5eed) + (uint64_t)l->epoch));
    for (int64_t i = l->n - 1; i > 0; i--) {
        int64_t j = (int64_t)nb__rng_below(&rng, (uint64_t)i + 1);
        int64_t t = l->perm[i];
        l->perm[i] = l->perm[j];
        l->perm[j] = t;
    }
}

nb_status nb_data_loader_start_epoch(nb_data_loader *l, int64_t epoch)
{
    if (!l) return nb__err(NB_ERR_INVALID_ARG, "data_loader_start_epoch: loader is NULL");
    if (epoch < 0) return nb__err(NB_ERR_INVALID_ARG, "data_loader_start_epoch: epoch %lld is negative", (long long)epoch);
    if (l->threaded) {
        pthread_mutex_lock(&l->mu);
        l->gen++;
        l->prod_pos = l->nbatches; /* takes no new batch while we wait */
        while (l->busy) pthread_cond_wait(&l->cv_cons, &l->mu);
        drain_queue(l);
    }
    l->epoch = epoch;
    l->cons_pos = 0;
    make_perm(l);
    if (l->threaded) {
        l->prod_pos = 0;
        pthread_cond_signal(&l->cv_prod);
        pthread_mutex_unlock(&l->mu);
    }
    return NB_OK;
}

nb_status nb_data_loader_reset(nb_data_loader *l)
{
    if (!l) return nb__err(NB_ERR_INVALID_ARG, "data_loader_reset: loader is NULL");
    return nb_data_loader_start_epoch(l, l->epoch);
}

int64_t nb_data_loader_epoch(const nb_data_loader *l) { return l ? l->epoch : 0; }
int64_t nb_data_loader_len(const nb_data_loader *l) { return l ? l->nbatches : 0; }

/* ---- creation, batches, shutdown --------------------------------------------------------- */

static nb_status check_params(const nb_data_loader *l)
{
    const nb_data_loader_params *p = &l->p;
    if (p->batch_size < 1) return nb__err(NB_ERR_INVALID_ARG, "data_loader: batch_size %lld (must be >= 1)", (long long)p->batch_size);
    if (p->num_replicas < 0)
        return nb__err(NB_ERR_INVALID_ARG, "data_loader: num_replicas %d is negative (0 or 1: no sharding)", p->num_replicas);
    int replicas = p->num_replicas > 0 ? p->num_replicas : 1;
    if (p->rank < 0 || p->rank >= replicas)
        return nb__err(NB_ERR_INVALID_ARG, "data_loader: rank %d is out of range for %d replicas%s", p->rank, replicas,
                       p->num_replicas == 0 ? " (num_replicas 0 counts as 1)" : "");
    if (p->prefetch < 0 || p->prefetch > MAX_PREFETCH)
        return nb__err(NB_ERR_INVALID_ARG, "data_loader: prefetch %d (0 to %d)", p->prefetch, MAX_PREFETCH);
    if (p->norm_channels != 0 && (p->norm_channels != l->in_shape[0] || p->norm_channels > NB_DATA_MAX_CHANNELS))
        return nb__err(NB_ERR_INVALID_ARG, "data_loader: norm_channels %d but samples have %lld channels", p->norm_channels,
                       (long long)l->in_shape[0]);
    for (int c = 0; c < p->norm_channels; c++)
        if (!(p->std[c] > 0)) return nb__err(NB_ERR_INVALID_ARG, "data_loader: std[%d] is %g (must be > 0)", c, p->std[c]);
    if ((p->random_crop || p->hflip) && l->in_ndim != 3)
        return nb__err(NB_ERR_INVALID_ARG, "data_loader: crop and flip need [C, H, W] samples, these have %d dims", l->in_ndim);
    if (p->random_crop) {
        int64_t h = l->in_shape[1], w = l->in_shape[2];
        int64_t cs = p->crop_size;
        if (p->crop_padding < 0 || cs < 0 || cs > h + 2 * p->crop_padding || cs > w + 2 * p->crop_padding)
            return nb__err(NB_ERR_INVALID_ARG, "data_loader: crop_size %lld with padding %lld does not fit %lldx%lld images",
                           (long long)cs, (long long)p->crop_padding, (long long)h, (long long)w);
    }
    if (nb_device_check(p->device) != NB_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", nb_last_error());
        return nb__err(nb_last_status(), "data_loader: %s", msg);
    }
    return NB_OK;
}

static nb_status loader_init(nb_data_loader *l)
{
    const int64_t *shape = nb_dataset_sample_shape(l->ds, &l->in_ndim);
    memcpy(l->in_shape, shape, sizeof(int64_t) * (size_t)l->in_ndim);
    NB_TRY(check_params(l));
    l->n = nb_dataset_size(l->ds);
    l->replicas = l->p.num_replicas > 0 ? l->p.num_replicas : 1;
    l->shard_n = (l->n + l->replicas - 1) / l->replicas;
    l->nbatches = l->p.drop_last ? l->shard_n / l->p.batch_size : (l->shard_n + l->p.batch_size - 1) / l->p.batch_size;
    l->out_ndim = l->in_ndim + 1;
    memcpy(l->out_shape + 1, l->in_shape, sizeof(int64_t) * (size_t)l->in_ndim);
    if (l->p.random_crop && l->p.crop_size > 0) l->out_shape[2] = l->out_shape[3] = l->p.crop_size;
    l->in_numel = nb__numel(l->in_shape, l->in_ndim);
    l->out_numel = nb__numel(l->out_shape + 1, l->in_ndim);
    l->perm = malloc(sizeof(int64_t) * (size_t)(l->n ? l->n : 1));
    l->scratch = malloc(sizeof(float) * (size_t)l->in_numel);
    if (!l->perm || !l->scratch) return nb__err(NB_ERR_OOM, "data_loader: out of memory");
    make_perm(l);
    /* pin_memory without a GPU is ignored, as PyTorch's DataLoader does */
    if (l->p.pin_memory && nb_cuda_is_available()) {
        if (!(l->pinned = nb__pinned_mem("data_loader"))) return nb_last_status();
        if (l->p.device.type == NB_DEVICE_CUDA && l->p.prefetch > 0 &&
            !(l->stream = nb_cuda_stream_create(l->p.device.index)))
            return nb_last_status();
    }
    return NB_OK;
}

static void loader_destroy(nb_data_loader *l)
{
    if (l->stream) {
        /* the stream's handle may be reused by a later stream: its copies must be over first */
        if (nb_cuda_stream_synchronize(l->stream) != NB_OK) nb_clear_error();
        nb_cuda_stream_free(l->stream);
    }
    free(l->perm);
    free(l->scratch);
    free(l);
}

nb_data_loader *nb_data_loader_create(nb_dataset *dataset, const nb_data_loader_params *p)
{
    if (!dataset) return nb__err_null(NB_ERR_INVALID_ARG, "data_loader: dataset is NULL");
    nb_data_loader *l = calloc(1, sizeof *l);
    if (!l) return nb__err_null(NB_ERR_OOM, "data_loader: out of memory");
    l->ds = dataset;
    l->p = p ? *p : nb_data_loader_params_default();
    if (loader_init(l) != NB_OK) {
        loader_destroy(l);
        return NULL;
    }
    if (l->p.prefetch > 0) {
        pthread_mutex_init(&l->mu, NULL);
        pthread_cond_init(&l->cv_prod, NULL);
        pthread_cond_init(&l->cv_cons, NULL);
        if (pthread_create(&l->thread, NULL, producer, l) != 0) {
            pthread_mutex_destroy(&l->mu);
            pthread_cond_destroy(&l->cv_prod);
            pthread_cond_destroy(&l->cv_cons);
            loader_destroy(l);
            return nb__err_null(NB_ERR_INTERNAL, "data_loader: cannot start the prefetch thread");
        }
        l->threaded = true;
    }
    return l;
}

void nb_data_loader_free(nb_data_loader *l)
{
    if (!l) return;
    if (l->threaded) {
        pthread_mutex_lock(&l->mu);
        l->quit = true;
        pthread_cond_signal(&l->cv_prod);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->thread, NULL);
        drain_queue(l);
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->cv_prod);
        pthread_cond_destroy(&l->cv_cons);
    }
    loader_destroy(l);
}

/* The next prepared batch (waiting for the thread) or one built here. */
static void take_batch(nb_data_loader *l, batch *out)
{
    if (!l->threaded) {
        make_batch(l, l->epoch, l->cons_pos++, out);
        return;
    }
    pthread_mutex_lock(&l->mu);
    while (l->qcount == 0) pthread_cond_wait(&l->cv_cons, &l->mu);
    *out = l->queue[l->qhead];
    l->qhead = (l->qhead + 1) % l->p.prefetch;
    l->qcount--;
    l->cons_pos++;
    pthread_cond_signal(&l->cv_prod);
    pthread_mutex_unlock(&l->mu);
}

nb_status nb_data_loader_next(nb_data_loader *l, nb_tensor **x, nb_tensor **y, bool *done)
{
    if (x) *x = NULL;
    if (y) *y = NULL;
    if (done) *done = false;
    if (!l || !x || !y || !done) return nb__err(NB_ERR_INVALID_ARG, "data_loader_next: NULL argument");
    if (l->cons_pos >= l->nbatches) {
        *done = true;
        return nb_data_loader_start_epoch(l, l->epoch + 1);
    }
    batch b;
    take_batch(l, &b);
    if (b.status != NB_OK) return nb__err(b.status, "%s", b.msg);
    if (nb_device_equal(nb_tensor_device(b.x), l->p.device)) {
        if (b.ready) { /* copies queued on the loader's stream: the caller's stream waits for them */
            nb_stream *cs = nb_cuda_current_stream(l->p.device.index);
            nb_status st = cs ? nb_cuda_stream_wait_event(cs, b.ready) : nb_last_status();
            if (st == NB_OK) st = nb_cuda_record_stream(b.x, cs);
            if (st == NB_OK) st = nb_cuda_record_stream(b.y, cs);
            if (st != NB_OK) {
                release_batch(&b);
                return st;
            }
            nb_cuda_event_free(b.ready);
        }
        *x = nb__track(b.x);
        *y = nb__track(b.y);
        return NB_OK;
    }
    /* a private scope, so that a failure half-way leaks nothing whether or not one is open */
    nb_scope *s = nb_scope_begin();
    nb_tensor *dx = nb_to(b.x, l->p.device);
    nb_tensor *dy = dx ? nb_to(b.y, l->p.device) : NULL;
    nb__release(b.x);
    nb__release(b.y);
    if (dy) {
        dx = nb_tensor_retain(dx);
        dy = nb_tensor_retain(dy);
    }
    nb_scope_end(s);
    if (!dy) return nb_last_status();
    *x = nb__track(dx);
    *y = nb__track(dy);
    return NB_OK;
}
