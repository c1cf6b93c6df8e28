/* The CUDA device's memory: one caching pool per device (core/devpool.c holds the policy and
 * the bookkeeping; this file gives it cudaMalloc, cudaFree and events). A block's stream is the
 * thread's current stream of the device when the tensor is made. */
#include <pthread.h>

#include "core/tensor_impl.h"
#include "cuda/cuda_impl.h"

typedef struct dev_ctx {
    int index;
    char name[16];
} dev_ctx;

static nb_devpool *g_pool[NB_CUDA_MAX_DEVICES];
static dev_ctx g_ctx[NB_CUDA_MAX_DEVICES];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static void *raw_alloc(void *ctx, size_t n)
{
    dev_ctx *d = ctx;
    int prev = nb__cuda_enter(d->index);
    cudaError_t e = cudaSuccess;
    void *p = nb__cuda_relaxed_malloc(n, &e); /* a graph capture may be running */
    nb__cuda_leave(prev);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void raw_free(void *ctx, void *p, size_t n)
{
    dev_ctx *d = ctx;
    int prev = nb__cuda_enter(d->index);
    if (cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
    nb__cuda_leave(prev);
}

static void *event_record(void *ctx, void *stream)
{
    dev_ctx *d = ctx;
    cudaEvent_t ev = NULL;
    int prev = nb__cuda_enter(d->index);
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(ev, (cudaStream_t)stream);
    nb__cuda_leave(prev);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (ev) cudaEventDestroy(ev);
        return NULL; /* the pool then never reuses the block: safe */
    }
    return ev;
}

static bool event_done(void *ctx, void *ev)
{
    cudaError_t e = cudaEventQuery((cudaEvent_t)ev);
    if (e != cudaSuccess) (void)cudaGetLastError(); /* NotReady too: else a later launch check sees it */
    return e == cudaSuccess;
}

static void event_free(void *ctx, void *ev)
{
    if (cudaEventDestroy((cudaEvent_t)ev) != cudaSuccess) (void)cudaGetLastError();
}

static bool mem_info(void *ctx, size_t *f, size_t *t)
{
    dev_ctx *d = ctx;
    int prev = nb__cuda_enter(d->index);
    cudaError_t e = cudaMemGetInfo(f, t);
    nb__cuda_leave(prev);
    if (e != cudaSuccess) (void)cudaGetLastError();
    return e == cudaSuccess;
}

static nb_devpool *pool_of(int index)
{
    pthread_mutex_lock(&g_lock);
    if (!g_pool[index]) {
        g_ctx[index].index = index;
        snprintf(g_ctx[index].name, sizeof g_ctx[index].name, "cuda:%d", index);
        nb_devpool_ops ops = {g_ctx[index].name, &g_ctx[index], raw_alloc, raw_free,
                              event_record,      event_done,     event_free, mem_info};
        g_pool[index] = nb__devpool_create(&ops);
    }
    nb_devpool *p = g_pool[index];
    pthread_mutex_unlock(&g_lock);
    return p;
}

nb_devpool *nb__cuda_pool(int index) { return pool_of(index); }

void *nb__cuda_alloc(int index, size_t nbytes)
{
    nb_devpool *p = pool_of(index);
    return p ? nb__devpool_alloc(p, nbytes, nb__cuda_stream(index)->handle) : NULL;
}

void nb__cuda_free(int index, void *ptr, size_t nbytes)
{
    nb_devpool *p = pool_of(index);
    if (p && nb__devpool_free(p, ptr) != NB_OK) NB_ASSERT(!"cuda free of a pointer the pool does not know");
}

nb_status nb__cuda_memory_stats(int index, nb_memory_stats *out)
{
    nb_devpool *p = pool_of(index);
    if (!p) return nb_last_status();
    nb_devpool_stats s;
    nb__devpool_stats(p, &s);
    out->allocated = s.allocated;
    out->reserved = s.reserved;
    out->peak_allocated = s.peak_allocated;
    out->n_allocs = s.n_raw_allocs;
    return NB_OK;
}

void nb__cuda_reset_peak_stats(int index)
{
    nb_devpool *p = pool_of(index);
    if (p) nb__devpool_reset_peak(p);
}

nb_status nb_cuda_empty_cache(void)
{
    for (int i = 0; i < nb__cuda_count(); i++) {
        pthread_mutex_lock(&g_lock);
        nb_devpool *p = g_pool[i];
        pthread_mutex_unlock(&g_lock);
        if (p) nb__devpool_empty_cache(p);
    }
    nb__cuda_pinned_empty_cache();
    return NB_OK;
}

nb_status nb_cuda_record_stream(const nb_tensor *t, nb_stream *s)
{
    if (!t || !s) return nb__err(NB_ERR_INVALID_ARG, "cuda_record_stream: NULL argument");
    nb_device d = t->storage->device;
    if (d.type != NB_DEVICE_CUDA || d.index != s->device) {
        char a[32];
        nb_device_str(d, a, sizeof a);
        return nb__err(NB_ERR_DEVICE, "cuda_record_stream: the tensor is on %s, the stream on cuda:%d", a, s->device);
    }
    nb_devpool *p = pool_of(d.index);
    return p ? nb__devpool_record_stream(p, t->storage->data, s->handle) : nb_last_status();
}
