/* DistributedDataParallel: gradients averaged across the ranks during backward.
 *
 * Each parameter carries a leaf hook (nb__leaf_hook): the engine calls it when the parameter's
 * gradient is whole. Parameters are grouped into buckets in reverse order (about the order
 * backward finishes them); when a bucket's last gradient is ready, the gradients are copied into
 * the bucket's flat host buffer and its sum over the ranks starts (MPI_Iallreduce) while backward
 * goes on. Buckets start strictly in order, so every rank issues the same sequence of
 * reductions whatever order its gradients come in. The first hook of a backward queues a
 * callback for the end of that backward, which starts the buckets still waiting (parameters that
 * backward did not reach count as zeros), waits for all of them, and writes sum / size into the
 * grads. After a failed backward it still starts and waits for every bucket, so that the other
 * ranks are not left waiting, and leaves the grads alone. */
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "dist/dist_impl.h"

typedef struct bucket {
    nb_dtype dtype;
    int first, count; /* parameters order[first .. first + count) */
    int64_t numel;
    int pending;      /* gradients still to come in this backward */
    nb_tensor *buf;   /* CPU, contiguous [numel] */
    nb__dist_req *req;
    bool done;        /* the reduction in flight has completed */
} bucket;

struct nb_ddp {
    nb_process_group *pg;
    nb_module *m;
    nb_ddp_params p;
    int n, nbuf;
    nb_tensor **params, **buffers; /* own references */
    int *order, *bucket_of;
    int64_t *offset;               /* a parameter's first element in its bucket */
    int nbuckets;
    bucket *b;
    size_t buffer_bytes;
    char *buffer_pack;             /* the buffers' bytes, for one broadcast */
    bool sync, in_iter;
    int next_launch;
};

nb_ddp_params nb_ddp_params_default(void) { return (nb_ddp_params){.bucket_cap_mb = 25.0, .broadcast_buffers = true}; }

/* ---- copies between tensors and host buffers ----------------------------------------------------- */

/* Copies t's values (any device and layout) into dst, as contiguous bytes of t's dtype. */
static nb_status pack(void *dst, const nb_tensor *t)
{
    bool direct;
    nb_tensor *h = nb__dist_host(t, &direct);
    if (!h) return nb_last_status();
    memcpy(dst, nb__data(h), nb__dist_nbytes(h));
    nb__release(h);
    return NB_OK;
}

/* Writes contiguous bytes of t's dtype at src into t (any device and layout), outside autograd. */
static nb_status unpack(nb_tensor *t, const void *src)
{
    if (nb__dist_host_dense(t)) {
        memcpy(nb__data(t), src, nb__dist_nbytes(t));
        return nb__dist_write_back(t, t, true);
    }
    nb_tensor *h = nb__tensor_new_named("ddp", t->shape, t->ndim, t->dtype, nb_cpu());
    if (!h) return nb_last_status();
    memcpy(nb__data(h), src, nb__dist_nbytes(h));
    nb_status st = nb__dist_write_back(t, h, false);
    nb__release(h);
    return st;
}

/* ---- buckets ------------------------------------------------------------------------------------ */

static nb_status launch(nb_ddp *d, int k)
{
    bucket *b = &d->b[k];
    size_t es = nb_dtype_size(b->dtype);
    nb_status st = NB_OK;
    for (int j = b->first; j < b->first + b->count && st == NB_OK; j++) {
        int i = d->order[j];
        char *dst = nb__data(b->buf) + (size_t)d->offset[i] * es;
        const nb_tensor *g = d->params[i]->grad;
        if (!g) memset(dst, 0, nb__dist_nbytes(d->params[i]));
        else st = pack(dst, g);
    }
    b->done = false;
    /* the reduction starts even when a copy failed, so that every rank issues the same ones */
    nb_status rst = nb__dist_iallreduce_sum(d->pg, nb__data(b->buf), b->numel, b->dtype, &b->req);
    return st != NB_OK ? st : rst;
}

/* MPI moves a non-blocking reduction on only inside its calls: test the ones in flight. */
static nb_status progress(nb_ddp *d)
{
    for (int k = 0; k < d->next_launch; k++)
        if (d->b[k].req && !d->b[k].done) NB_TRY(nb__dist_test(d->b[k].req, &d->b[k].done));
    return NB_OK;
}

/* Sets parameter i's grad to the bucket's sum at `sum` over the ranks' count: into the existing
 * grad when it is a dense CPU tensor of the parameter's dtype, else into a new one on the
 * parameter's device. */
static nb_status write_grad(nb_ddp *d, int i, const void *sum)
{
    nb_tensor *p = d->params[i], *g = p->grad;
    int64_t n = nb__numel(p->shape, p->ndim);
    bool in_place = g && nb__dist_host_dense(g) && g->dtype == p->dtype;
    nb_tensor *h = in_place ? g : nb__tensor_new_named("ddp", p->shape, p->ndim, p->dtype, nb_cpu());
    if (!h) return nb_last_status();
    int size = nb_process_group_size(d->pg);
    if (p->dtype == NB_FLOAT32) {
        const float *s = sum;
        float *o = (float *)nb__data(h);
        for (int64_t j = 0; j < n; j++) o[j] = s[j] / (float)size;
    } else {
        const double *s = sum;
        double *o = (double *)nb__data(h);
        for (int64_t j = 0; j < n; j++) o[j] = s[j] / (double)size;
    }
    if (in_place) {
        nb__bump_version(h);
        return NB_OK;
    }
    nb_tensor *on_dev = h;
    if (p->storage->device.type != NB_DEVICE_CPU) {
        on_dev = nb_tensor_retain(nb_to(h, p->storage->device));
        nb__release(h);
        if (!on_dev) return nb_last_status();
    }
    nb__release(p->grad);
    p->grad = on_dev;
    return NB_OK;
}

/* The end of a backward that reached the parameters: every bucket started, waited for, and (when
 * backward went well) written back as the mean. */
static nb_status finish(void *ctx, nb_status bw)
{
    nb_ddp *d = ctx;
    d->in_iter = false;
    nb_status st = NB_OK;
    while (d->next_launch < d->nbuckets) {
        nb_status lst = launch(d, d->next_launch++);
        if (st == NB_OK) st = lst;
    }
    for (int k = 0; k < d->nbuckets; k++) {
        nb_status wst = nb__dist_wait(d->b[k].req);
        d->b[k].req = NULL;
        if (st == NB_OK) st = wst;
    }
    if (bw != NB_OK || st != NB_OK) return st;
    bool prev = nb_set_grad_enabled(false);
    for (int k = 0; k < d->nbuckets && st == NB_OK; k++) {
        const bucket *b = &d->b[k];
        for (int j = b->first; j < b->first + b->count && st == NB_OK; j++) {
            int i = d->order[j];
            st = write_grad(d, i, nb__data(b->buf) + (size_t)d->offset[i] * nb_dtype_size(b->dtype));
        }
    }
    nb_set_grad_enabled(prev);
    return st;
}

/* The leaf hook: parameter i's gradient is whole. */
static nb_status grad_ready(void *owner, int i)
{
    nb_ddp *d = owner;
    if (!d->sync) return NB_OK;
    if (!d->in_iter) {
        NB_TRY(nb__backward_queue_callback(finish, d));
        d->in_iter = true;
        d->next_launch = 0;
        for (int k = 0; k < d->nbuckets; k++) d->b[k].pending = d->b[k].count;
    }
    bucket *b = &d->b[d->bucket_of[i]];
    if (b->pending > 0) b->pending--;
    while (d->next_launch < d->nbuckets && d->b[d->next_launch].pending == 0) NB_TRY(launch(d, d->next_launch++));
    return progress(d);
}

static const nb__leaf_hook ddp_hook = {grad_ready, NULL, "DistributedDataParallel"};

/* ---- construction ------------------------------------------------------------------------------- */

/* Groups the parameters into buckets, in reverse order, of one dtype and at most cap bytes (a
 * larger parameter gets a bucket of its own). */
static nb_status make_buckets(nb_ddp *d)
{
    double cap = d->p.bucket_cap_mb * 1024.0 * 1024.0;
    d->b = calloc((size_t)d->n, sizeof *d->b);
    if (!d->b) return nb__err(NB_ERR_OOM, "ddp: out of memory");
    bucket *cur = NULL;
    for (int j = 0; j < d->n; j++) {
        int i = d->n - 1 - j;
        const nb_tensor *p = d->params[i];
        int64_t numel = nb__numel(p->shape, p->ndim);
        if (!cur || cur->dtype != p->dtype || (double)(cur->numel + numel) * (double)nb_dtype_size(p->dtype) > cap) {
            cur = &d->b[d->nbuckets++];
            cur->dtype = p->dtype;
            cur->first = j;
        }
        d->order[j] = i;
        d->bucket_of[i] = (int)(cur - d->b);
        d->offset[i] = cur->numel;
        cur->numel += numel;
        cur->count++;
    }
    for (int k = 0; k < d->nbuckets; k++) {
        d->b[k].buf = nb__tensor_new_named("ddp", &d->b[k].numel, 1, d->b[k].dtype, nb_cpu());
        if (!d->b[k].buf) return nb_last_status();
    }
    return NB_OK;
}

/* This rank's own view of its arguments: the parameters and buffers, and their checks. */
static nb_status collect(nb_ddp *d, const char ***names)
{
    d->n = nb_module_parameters(d->m, NULL, 0);
    d->nbuf = nb_module_buffers(d->m, NULL, 0);
    if (d->n <= 0) return nb__err(NB_ERR_INVALID_ARG, "ddp: the module has no parameters");
    d->params = calloc((size_t)d->n, sizeof *d->params);
    d->buffers = calloc((size_t)d->nbuf + 1, sizeof *d->buffers);
    *names = calloc((size_t)d->n, sizeof **names);
    d->order = calloc((size_t)d->n, sizeof *d->order);
    d->bucket_of = calloc((size_t)d->n, sizeof *d->bucket_of);
    d->offset = calloc((size_t)d->n, sizeof *d->offset);
    if (!d->params || !d->buffers || !*names || !d->order || !d->bucket_of || !d->offset)
        return nb__err(NB_ERR_OOM, "ddp: out of memory");
    nb_module_named_parameters(d->m, *names, d->params, d->n);
    nb_module_buffers(d->m, d->buffers, d->nbuf);
    for (int i = 0; i < d->n; i++) nb_tensor_retain(d->params[i]);
    for (int i = 0; i < d->nbuf; i++) {
        nb_tensor_retain(d->buffers[i]);
        d->buffer_bytes += nb__dist_nbytes(d->buffers[i]);
    }
    for (int i = 0; i < d->n; i++) {
        const nb_tensor *p = d->params[i];
        char dev[32], dev0[32];
        if (p->dtype != NB_FLOAT32 && p->dtype != NB_FLOAT64)
            return nb__err(NB_ERR_DTYPE, "ddp: parameter %s is %s; gradients are reduced in float32 or float64",
                           (*names)[i], nb_dtype_name(p->dtype));
        if (!nb__is_contiguous(p))
            return nb__err(NB_ERR_INVALID_ARG, "ddp: parameter %s is not contiguous", (*names)[i]);
        if (!nb_device_equal(p->storage->device, d->params[0]->storage->device)) {
            nb_device_str(p->storage->device, dev, sizeof dev);
            nb_device_str(d->params[0]->storage->device, dev0, sizeof dev0);
            return nb__err(NB_ERR_DEVICE, "ddp: parameter %s is on %s and %s on %s", (*names)[i], dev, (*names)[0], dev0);
        }
        if (p->bw_hook)
            return nb__err(NB_ERR_INVALID_ARG, "ddp: parameter %s already has its gradient taken in backward by %s %s",
                           (*names)[i], p->bw_hook == &ddp_hook ? "another" : "an", p->bw_hook->name);
    }
    d->buffer_pack = malloc(d->buffer_bytes ? d->buffer_bytes : 1);
    return d->buffer_pack ? NB_OK : nb__err(NB_ERR_OOM, "ddp: out of memory");
}

enum { E_DTYPE, E_NDIM, E_SHAPE, E_LEN = E_SHAPE + NB_MAX_DIMS };

static void describe_entry(int64_t *e, const nb_tensor *t)
{
    memset(e, 0, E_LEN * sizeof *e);
    e[E_DTYPE] = t->dtype;
    e[E_NDIM] = t->ndim;
    memcpy(e + E_SHAPE, t->shape, (size_t)t->ndim * sizeof *t->shape);
}

/* Every rank must have the same parameters and buffers: the counts first (with each rank's own
 * check), then each entry's dtype and shape. All ranks return the same outcome. */
static nb_status agree(nb_ddp *d, nb_status local, const char **names)
{
    int size = nb_process_group_size(d->pg);
    int64_t head[3] = {local, local == NB_OK ? d->n : 0, local == NB_OK ? d->nbuf : 0};
    int64_t *heads = malloc((size_t)size * sizeof head);
    if (!heads) return nb__err(NB_ERR_OOM, "ddp: out of memory");
    nb_status st = nb__dist_allgather_i64(d->pg, head, 3, heads);
    if (st == NB_OK) st = local; /* a rank whose own check failed reports its own error */
    for (int r = 0; r < size && st == NB_OK; r++) {
        const int64_t *h = heads + 3 * r;
        if (h[0] != NB_OK)
            st = nb__err(NB_ERR_COMM, "ddp: rank %d failed its own argument check (%s), so every rank fails", r,
                         nb_status_name((nb_status)h[0]));
        else if (h[1] != heads[1] || h[2] != heads[2])
            st = nb__err(NB_ERR_COMM, "ddp: the ranks' modules differ: rank 0 has %lld parameters and %lld buffers, "
                         "rank %d has %lld and %lld", (long long)heads[1], (long long)heads[2], r, (long long)h[1],
                         (long long)h[2]);
    }
    free(heads);
    if (st != NB_OK) return st;
    int64_t cnt = (int64_t)(d->n + d->nbuf) * E_LEN;
    int64_t *mine = malloc((size_t)cnt * sizeof *mine), *all = malloc((size_t)cnt * (size_t)size * sizeof *all);
    if (!mine || !all) st = nb__err(NB_ERR_OOM, "ddp: out of memory");
    for (int i = 0; i < d->n + d->nbuf && st == NB_OK; i++)
        describe_entry(mine + (size_t)i * E_LEN, i < d->n ? d->params[i] : d->buffers[i - d->n]);
    if (st == NB_OK) st = nb__dist_allgather_i64(d->pg, mine, cnt, all);
    for (int r = 1; r < size && st == NB_OK; r++)
        for (int i = 0; i < d->n + d->nbuf && st == NB_OK; i++) {
            const int64_t *a = all + (size_t)i * E_LEN, *b = all + ((size_t)r * (size_t)cnt + (size_t)i * E_LEN);
            if (memcmp(a, b, E_LEN * sizeof *a) == 0) continue;
            char sa[NB_SHAPE_STR_MAX], sb[NB_SHAPE_STR_MAX];
            nb__shape_str(a + E_SHAPE, (int)a[E_NDIM], sa);
            nb__shape_str(b + E_SHAPE, (int)b[E_NDIM], sb);
            st = nb__err(NB_ERR_COMM, "ddp: %s %s differs: rank 0 has %s %s, rank %d has %s %s",
                         i < d->n ? "parameter" : "buffer", i < d->n ? names[i] : "",
                         nb_dtype_name((nb_dtype)a[E_DTYPE]), sa, r, nb_dtype_name((nb_dtype)b[E_DTYPE]), sb);
        }
    free(mine);
    free(all);
    return st;
}

/* Rank 0's buffers to every rank, in one broadcast. */
static nb_status sync_buffers(nb_ddp *d)
{
    if (!d->nbuf) return NB_OK;
    bool root = nb_process_group_rank(d->pg) == 0;
    size_t off = 0;
    nb_status st = NB_OK;
    for (int i = 0; i < d->nbuf && root && st == NB_OK; off += nb__dist_nbytes(d->buffers[i]), i++)
        st = pack(d->buffer_pack + off, d->buffers[i]);
    /* the broadcast runs even when packing failed, so that the other ranks are not left waiting */
    nb_status bst = nb__dist_bcast_bytes(d->pg, d->buffer_pack, d->buffer_bytes, 0);
    if (st != NB_OK || bst != NB_OK) return st != NB_OK ? st : bst;
    bool prev = nb_set_grad_enabled(false);
    off = 0;
    for (int i = 0; i < d->nbuf && !root && st == NB_OK; off += nb__dist_nbytes(d->buffers[i]), i++)
        st = unpack(d->buffers[i], d->buffer_pack + off);
    nb_set_grad_enabled(prev);
    return st;
}

/* Rank 0's parameters to every rank, one broadcast per bucket. */
static nb_status sync_params(nb_ddp *d)
{
    bool root = nb_process_group_rank(d->pg) == 0;
    nb_status st = NB_OK;
    bool prev = nb_set_grad_enabled(false);
    for (int k = 0; k < d->nbuckets && st == NB_OK; k++) {
        const bucket *b = &d->b[k];
        size_t es = nb_dtype_size(b->dtype);
        for (int j = b->first; j < b->first + b->count && root && st == NB_OK; j++)
            st = pack(nb__data(b->buf) + (size_t)d->offset[d->order[j]] * es, d->params[d->order[j]]);
        nb_status bst = nb__dist_bcast_bytes(d->pg, nb__data(b->buf), (size_t)b->numel * es, 0);
        if (st == NB_OK) st = bst;
        for (int j = b->first; j < b->first + b->count && !root && st == NB_OK; j++)
            st = unpack(d->params[d->order[j]], nb__data(b->buf) + (size_t)d->offset[d->order[j]] * es);
    }
    nb_set_grad_enabled(prev);
    return st;
}

nb_ddp *nb_ddp_create(nb_process_group *pg, nb_module *m, const nb_ddp_params *p)
{
    if (!pg) return nb__err_null(NB_ERR_INVALID_ARG, "ddp: process group is NULL");
    nb_ddp *d = calloc(1, sizeof *d);
    if (!d) return nb__err_null(NB_ERR_OOM, "ddp: out of memory");
    d->pg = pg;
    d->m = m;
    d->p = p ? *p : nb_ddp_params_default();
    d->sync = true;
    const char **names = NULL;
    nb_status local = NB_OK;
    if (!m) local = nb__err(NB_ERR_INVALID_ARG, "ddp: module is NULL");
    else if (!(d->p.bucket_cap_mb > 0))
        local = nb__err(NB_ERR_INVALID_ARG, "ddp: bucket_cap_mb %g is not positive", d->p.bucket_cap_mb);
    else local = collect(d, &names);
    nb_status st = agree(d, local, names);
    if (st == NB_OK) st = make_buckets(d);
    /* make_buckets fails alone only for want of memory; the broadcasts below would then wait */
    if (st == NB_OK) st = sync_params(d);
    if (st == NB_OK) st = sync_buffers(d);
    free(names);
    if (st != NB_OK) {
        nb_ddp_free(d);
        return NULL;
    }
    for (int i = 0; i < d->n; i++) {
        d->params[i]->bw_hook = &ddp_hook;
        d->params[i]->bw_owner = d;
        d->params[i]->bw_index = i;
    }
    return d;
}

void nb_ddp_free(nb_ddp *d)
{
    if (!d) return;
    for (int i = 0; i < d->n && d->params; i++) {
        nb_tensor *p = d->params[i];
        if (!p) continue;
        if (p->bw_owner == d) {
            p->bw_hook = NULL;
            p->bw_owner = NULL;
        }
        nb__release(p);
    }
    for (int i = 0; i < d->nbuf && d->buffers; i++) nb__release(d->buffers[i]);
    for (int k = 0; k < d->nbuckets; k++) {
        nb__dist_wait(d->b[k].req);
        nb__release(d->b[k].buf);
    }
    free(d->params);
    free(d->buffers);
    free(d->order);
    free(d->bucket_of);
    free(d->offset);
    free(d->b);
    free(d->buffer_pack);
    free(d);
}

nb_tensor *nb_ddp_forward(nb_ddp *d, nb_tensor *x)
{
    if (!d) return nb__err_null(NB_ERR_INVALID_ARG, "ddp forward: wrapper is NULL");
    if (d->p.broadcast_buffers && nb_ddp_broadcast_buffers(d) != NB_OK) return NULL;
    return nb_module_forward(d->m, x);
}

nb_status nb_ddp_broadcast_buffers(nb_ddp *d)
{
    if (!d) return nb__err(NB_ERR_INVALID_ARG, "ddp broadcast_buffers: wrapper is NULL");
    return nb_process_group_size(d->pg) > 1 ? sync_buffers(d) : NB_OK;
}

nb_status nb_ddp_set_sync(nb_ddp *d, bool sync)
{
    if (!d) return nb__err(NB_ERR_INVALID_ARG, "ddp set_sync: wrapper is NULL");
    d->sync = sync;
    return NB_OK;
}

nb_module *nb_ddp_module(const nb_ddp *d) { return d ? d->m : NULL; }
int nb_ddp_num_buckets(const nb_ddp *d) { return d ? d->nbuckets : 0; }
