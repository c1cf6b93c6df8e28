/* Pinned (page-locked) host memory: a caching allocator over cudaHostAlloc, PyTorch's
 * CachingHostAllocator in small. Blocks are sized to a power of two (at least 512 bytes) and kept
 * when freed. Every copy queued from a block (nb_to_non_blocking) records an event on the copy's
 * stream; a freed block is handed out again only once all its events have completed, so a batch
 * freed right after its copy was queued is never overwritten before the GPU has read it. */
#include <pthread.h>
#include <stdlib.h>

#include "core/tensor_impl.h"
#include "cuda/cuda_impl.h"

#define PINNED_MIN ((size_t)512)
#define PINNED_MAX ((size_t)1 << 46)

typedef struct pblock {
    char *ptr;
    size_t size;
    bool in_use;
    cudaEvent_t *events; /* copies queued from the block that may still be running */
    int n_events, cap_events;
    struct pblock *next;
} pblock;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pblock *g_blocks;

/* Drops b's completed events; true when none is left. An event whose query fails is kept: the
 * block is then never reused, which is never unsafe. Lock held. */
static bool events_done(pblock *b)
{
    int k = 0;
    for (int i = 0; i < b->n_events; i++) {
        cudaError_t e = cudaEventQuery(b->events[i]);
        if (e == cudaSuccess) {
            if (cudaEventDestroy(b->events[i]) != cudaSuccess) (void)cudaGetLastError();
        } else {
            (void)cudaGetLastError(); /* not ready is not an error; a real error leaves it kept */
            b->events[k++] = b->events[i];
        }
    }
    b->n_events = k;
    return k == 0;
}

/* Returns every idle block whose copies have completed to the system. */
void nb__cuda_pinned_empty_cache(void)
{
    pthread_mutex_lock(&g_lock);
    for (pblock **pp = &g_blocks; *pp;) {
        pblock *b = *pp;
        if (b->in_use || !events_done(b)) {
            pp = &b->next;
            continue;
        }
        *pp = b->next;
        if (cudaFreeHost(b->ptr) != cudaSuccess) (void)cudaGetLastError();
        free(b->events);
        free(b);
    }
    pthread_mutex_unlock(&g_lock);
}

static void *pinned_alloc(size_t nbytes)
{
    if (nbytes > PINNED_MAX) return nb__err_null(NB_ERR_OOM, "pinned memory: %zu bytes is too large", nbytes);
    int cap = nb__cuda_capturing_any();
    if (cap >= 0) { /* cudaHostAlloc and the blocks' event queries are not allowed inside it */
        nb__cuda_capture_refuse(cap, "pin_memory", "page-locked memory cannot be handed out inside it");
        return NULL;
    }
    size_t size = PINNED_MIN;
    while (size < nbytes) size <<= 1;
    pblock *hit = NULL;
    pthread_mutex_lock(&g_lock);
    for (pblock *b = g_blocks; b && !hit; b = b->next)
        if (!b->in_use && b->size == size && events_done(b)) hit = b;
    if (hit) hit->in_use = true;
    pthread_mutex_unlock(&g_lock);
    if (hit) return hit->ptr;

    pblock *b = calloc(1, sizeof *b);
    if (!b) return nb__err_null(NB_ERR_OOM, "pinned memory: out of host memory");
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, size, cudaHostAllocDefault);
    if (e == cudaErrorMemoryAllocation) { /* give back what is cached, then try once more */
        (void)cudaGetLastError();
        nb__cuda_pinned_empty_cache();
        e = cudaHostAlloc(&p, size, cudaHostAllocDefault);
    }
    if (e != cudaSuccess) {
        free(b);
        char what[96];
        snprintf(what, sizeof what, "pinned memory: cudaHostAlloc of %zu bytes", size);
        nb__cuda_err(e, what);
        return NULL;
    }
    b->ptr = p;
    b->size = size;
    b->in_use = true;
    pthread_mutex_lock(&g_lock);
    b->next = g_blocks;
    g_blocks = b;
    pthread_mutex_unlock(&g_lock);
    return p;
}

static void pinned_free(void *p, size_t nbytes)
{
    (void)nbytes;
    if (!p) return;
    pthread_mutex_lock(&g_lock);
    pblock *b = g_blocks;
    while (b && b->ptr != p) b = b->next;
    NB_ASSERT(b && b->in_use); /* storage frees only what pinned_alloc handed out, once */
    b->in_use = false;
    pthread_mutex_unlock(&g_lock);
}

/* Attaches ev to the block holding p; false when it cannot (the caller then waits instead). */
static bool attach_event(const void *p, cudaEvent_t ev)
{
    const char *c = p;
    bool ok = false;
    pthread_mutex_lock(&g_lock);
    pblock *b = g_blocks;
    while (b && !(c >= b->ptr && c < b->ptr + b->size)) b = b->next;
    if (b) {
        events_done(b);
        if (b->n_events == b->cap_events) {
            int cap = b->cap_events ? 2 * b->cap_events : 4;
            cudaEvent_t *ne = realloc(b->events, (size_t)cap * sizeof *ne);
            if (ne) {
                b->events = ne;
                b->cap_events = cap;
            }
        }
        if (b->n_events < b->cap_events) {
            b->events[b->n_events++] = ev;
            ok = true;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return ok;
}

static nb_status pinned_copy_to_device(nb_device d, void *dst, const void *src, size_t n)
{
    if (d.type != NB_DEVICE_CUDA)
        return nb__err(NB_ERR_DEVICE, "to_non_blocking: pinned memory is copied without waiting only to a CUDA device");
    if (nb__cuda_capturing(d.index)) /* the copy's event would be a captured one, never queryable */
        return nb__cuda_capture_refuse(d.index, "to_non_blocking", "a copy from pinned memory must be made outside "
                                       "it (into a tensor the graph reads)");
    int prev = nb__cuda_enter(d.index);
    cudaStream_t s = nb__cuda_stream(d.index)->handle;
    cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) {
        cudaEvent_t ev = NULL;
        cudaError_t er = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
        if (er == cudaSuccess) er = cudaEventRecord(ev, s);
        if (er == cudaSuccess && !attach_event(src, ev)) er = cudaErrorMemoryAllocation;
        if (er != cudaSuccess) { /* no event to guard the block: wait for the copy instead */
            (void)cudaGetLastError();
            if (ev && cudaEventDestroy(ev) != cudaSuccess) (void)cudaGetLastError();
            e = cudaStreamSynchronize(s);
        }
    }
    nb__cuda_leave(prev);
    return e == cudaSuccess ? NB_OK : nb__cuda_err(e, "to_non_blocking: copy from pinned memory");
}

static const nb_host_mem g_pinned = {"pinned", pinned_alloc, pinned_free, pinned_copy_to_device};

const nb_host_mem *nb__pinned_mem(const char *op)
{
    if (nb__cuda_count() == 0)
        return nb__err_null(NB_ERR_DEVICE, "%s: no CUDA device is present (pinned memory needs one)", op);
    return &g_pinned;
}
