/* CUDA graphs (nabla/cuda.h, torch.cuda.CUDAGraph): a stream capture of the calling thread's work
 * on one device, instantiated once and replayed with one launch.
 *
 * - The capture runs on the graph's own non-blocking stream, made the thread's current stream of
 *   the device between begin and end, in CUDA's thread-local capture mode (the loader's threads
 *   may go on copying).
 * - Memory: every allocation of the capture comes from a private pool of the device's caching
 *   allocator (nb__devpool_private_begin), kept until the graph is freed, so that replays find
 *   their buffers where the capture put them and no other tensor is given that memory.
 * - What cannot be captured fails with an error that names the op (reading values back, pageable
 *   copies, waiting for the device, random numbers, an optimizer step whose scalars change every
 *   step); the capture is then spoilt and capture_end reports the first such error.
 * - Index checks cannot read their verdict back while capturing: each checking op gets a slot in
 *   the graph's device array of verdicts, which a captured memset clears at the start of every
 *   replay and a captured copy brings to pinned host memory at its end; nb_cuda_graph_check (and
 *   the next replay, once the previous one is done) reports a bad index with the op, the value
 *   and the size, as the eager check does. The index kernels skip an index out of range.
 * - Work deferred to the end of the capture (nb__cuda_capture_defer: a stateful model's copy of
 *   its final state into the tensor the next replay starts from) is queued just before it ends.
 * - Capture streams are never destroyed: a freed graph's stream goes back to a per-device pool
 *   and the next graph takes it, as PyTorch's capture streams come from its stream pool. The
 *   cached cuBLAS and cuDNN handles stay bound to the last stream they ran on until their next
 *   call, and cuBLAS keeps a workspace per stream it has run on; a destroyed stream would leave
 *   both pointing at a dead handle. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor_impl.h"
#include "cuda/cuda_impl.h"

enum { MAX_CHECKS = 256 };

typedef struct graph_defer {
    nb_status (*fn)(void *ctx);
    void (*drop)(void *ctx);
    void *ctx;
} graph_defer;

typedef struct graph_check {
    nb_op op;
    int64_t size, dim;
} graph_check;

struct nb_cuda_graph {
    int device;
    nb_stream *stream;
    nb_stream *prev_stream; /* the thread's current stream before begin */
    int pool_id;            /* the private pool; 0 when none */
    bool capturing, captured, spoilt;
    char spoilt_msg[512];
    nb_status spoilt_status;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaEvent_t done; /* recorded after each replay */
    bool replayed;
    /* index checks: slots, this replay's verdicts (lowest bad position, ~0 none), cleared at
     * its start; sticky, per check {first bad position, its value} since the last report, and
     * host_slots, sticky's pinned copy made at the end of every replay */
    unsigned long long *slots, *sticky, *host_slots;
    graph_check checks[MAX_CHECKS];
    int n_checks;
    /* pinned host buffers that captured copies read at every replay */
    void **keep;
    int n_keep, cap_keep;
    graph_defer *defers;
    int n_defers, cap_defers;
};

static _Thread_local nb_cuda_graph *t_capture[NB_CUDA_MAX_DEVICES];

/* Runs a call that CUDA calls "potentially unsafe" during capture (cudaMalloc, cudaHostAlloc,
 * cudaFree...) in relaxed mode, as PyTorch's allocator does: such calls are not captured, and the
 * capture does not depend on them being replayed. */
typedef struct relaxed {
    enum cudaStreamCaptureMode mode;
} relaxed;

static relaxed relax(void)
{
    relaxed r = {cudaStreamCaptureModeRelaxed};
    if (cudaThreadExchangeStreamCaptureMode(&r.mode) != cudaSuccess) (void)cudaGetLastError();
    return r;
}

static void unrelax(relaxed r)
{
    if (cudaThreadExchangeStreamCaptureMode(&r.mode) != cudaSuccess) (void)cudaGetLastError();
}

void *nb__cuda_relaxed_malloc(size_t n, cudaError_t *err)
{
    void *p = NULL;
    relaxed r = relax();
    *err = cudaMalloc(&p, n);
    unrelax(r);
    return *err == cudaSuccess ? p : NULL;
}

bool nb__cuda_capturing(int index)
{
    return index >= 0 && index < NB_CUDA_MAX_DEVICES && t_capture[index] != NULL;
}

int nb__cuda_capturing_any(void)
{
    for (int i = 0; i < NB_CUDA_MAX_DEVICES; i++)
        if (t_capture[i]) return i;
    return -1;
}

bool nb_cuda_is_capturing(int index)
{
    if (index == -1) index = nb_cuda_current_device();
    return nb__cuda_capturing(index);
}

nb_status nb__cuda_capture_refuse(int index, const char *op, const char *why)
{
    nb_cuda_graph *g = nb__cuda_capturing(index) ? t_capture[index] : NULL;
    nb_status st = nb__err(NB_ERR_UNSUPPORTED, "%s: cuda:%d is capturing a CUDA graph, and %s", op, index, why);
    if (g && !g->spoilt) {
        g->spoilt = true;
        g->spoilt_status = st;
        snprintf(g->spoilt_msg, sizeof g->spoilt_msg, "%s", nb_last_error());
    }
    return st;
}

void *nb__cuda_graph_host_buffer(int index, size_t n)
{
    nb_cuda_graph *g = t_capture[index];
    if (!g) return nb__err_null(NB_ERR_INTERNAL, "graph host buffer: cuda:%d is not capturing", index);
    if (g->n_keep == g->cap_keep) {
        int cap = g->cap_keep ? 2 * g->cap_keep : 16;
        void **k = realloc(g->keep, (size_t)cap * sizeof *k);
        if (!k) return nb__err_null(NB_ERR_OOM, "CUDA graph capture: out of host memory");
        g->keep = k;
        g->cap_keep = cap;
    }
    void *p = NULL;
    relaxed r = relax();
    cudaError_t e = cudaHostAlloc(&p, n ? n : 1, cudaHostAllocDefault);
    unrelax(r);
    if (e != cudaSuccess) {
        nb__cuda_err(e, "CUDA graph capture: pinned host memory");
        return NULL;
    }
    g->keep[g->n_keep++] = p;
    return p;
}

unsigned long long *nb__cuda_graph_check_slot(int index, nb_op op, int64_t size, int64_t dim,
                                              unsigned long long **sticky)
{
    nb_cuda_graph *g = t_capture[index];
    if (!g) return nb__err_null(NB_ERR_INTERNAL, "graph check slot: cuda:%d is not capturing", index);
    if (g->n_checks == MAX_CHECKS) {
        nb__cuda_capture_refuse(index, nb__op_name(op), "the graph already has the most index checks it can hold");
        return NULL;
    }
    g->checks[g->n_checks] = (graph_check){.op = op, .size = size, .dim = dim};
    *sticky = &g->sticky[2 * g->n_checks];
    return &g->slots[g->n_checks++];
}

nb_status nb__cuda_capture_defer(int index, nb_status (*fn)(void *ctx), void (*drop)(void *ctx), void *ctx)
{
    nb_cuda_graph *g = nb__cuda_capturing(index) ? t_capture[index] : NULL;
    if (g && g->n_defers == g->cap_defers) {
        int cap = g->cap_defers ? 2 * g->cap_defers : 4;
        graph_defer *d = realloc(g->defers, (size_t)cap * sizeof *d);
        if (d) g->defers = d, g->cap_defers = cap;
    }
    if (!g || g->n_defers == g->cap_defers) {
        drop(ctx);
        return g ? nb__err(NB_ERR_OOM, "CUDA graph capture: out of host memory")
                 : nb__err(NB_ERR_INVALID_ARG, "capture_defer: cuda:%d is not capturing", index);
    }
    g->defers[g->n_defers++] = (graph_defer){fn, drop, ctx};
    return NB_OK;
}

/* Runs (when run) and drops the deferred work; the first failure spoils the capture. */
static void run_defers(nb_cuda_graph *g, bool run)
{
    for (int i = 0; i < g->n_defers; i++) {
        graph_defer *d = &g->defers[i];
        if (run && !g->spoilt && d->fn(d->ctx) != NB_OK && !g->spoilt) {
            g->spoilt = true;
            g->spoilt_status = nb_last_status();
            snprintf(g->spoilt_msg, sizeof g->spoilt_msg, "%s", nb_last_error());
        }
        d->drop(d->ctx);
    }
    g->n_defers = 0;
}

/* Ends a capture that will not become a graph, keeping nothing of it. */
static void drop_capture(nb_cuda_graph *g)
{
    cudaGraph_t dropped = NULL;
    if (cudaStreamEndCapture(g->stream->handle, &dropped) == cudaSuccess && dropped) cudaGraphDestroy(dropped);
    (void)cudaGetLastError();
}

/* ---- the capture streams --------------------------------------------------------------------- */

static pthread_mutex_t g_spare_lock = PTHREAD_MUTEX_INITIALIZER;
static nb_stream *g_spare[NB_CUDA_MAX_DEVICES]; /* streams of freed graphs, per device: a list */

static nb_stream *capture_stream_take(int d)
{
    pthread_mutex_lock(&g_spare_lock);
    nb_stream *s = g_spare[d];
    if (s) g_spare[d] = s->next_spare;
    pthread_mutex_unlock(&g_spare_lock);
    return s ? s : nb_cuda_stream_create(d);
}

/* Back to the pool, no longer the calling thread's current stream. */
static void capture_stream_give(nb_stream *s)
{
    if (!s) return;
    int d = s->device;
    if (nb__cuda_stream(d) == s) nb_cuda_set_stream(nb_cuda_default_stream(d));
    pthread_mutex_lock(&g_spare_lock);
    s->next_spare = g_spare[d];
    g_spare[d] = s;
    pthread_mutex_unlock(&g_spare_lock);
}

/* ---- the graph's life ------------------------------------------------------------------------ */

nb_cuda_graph *nb_cuda_graph_create(int index)
{
    if (index == -1) index = nb_cuda_current_device();
    if (nb__cuda_check_index(index, "cuda_graph_create") != NB_OK) return NULL;
    int cap = nb__cuda_capturing_any();
    if (cap >= 0) /* its cudaMalloc would spoil the running capture */
        return nb__err_null(NB_ERR_INVALID_ARG, "cuda_graph_create: cuda:%d is capturing a CUDA graph", cap);
    nb_cuda_graph *g = calloc(1, sizeof *g);
    if (!g) return nb__err_null(NB_ERR_OOM, "cuda_graph_create: out of host memory");
    g->device = index;
    g->stream = capture_stream_take(index);
    int prev = nb__cuda_enter(index);
    cudaError_t e = g->stream ? cudaEventCreateWithFlags(&g->done, cudaEventDisableTiming) : cudaSuccess;
    if (g->stream && e == cudaSuccess) e = cudaMalloc((void **)&g->slots, 3 * MAX_CHECKS * sizeof *g->slots);
    if (g->stream && e == cudaSuccess) e = cudaMemset(g->slots, 0xff, 3 * MAX_CHECKS * sizeof *g->slots);
    if (g->stream && e == cudaSuccess) e = cudaDeviceSynchronize(); /* cudaMemset may return early */
    if (g->stream && e == cudaSuccess) e = cudaHostAlloc((void **)&g->host_slots, 2 * MAX_CHECKS * sizeof *g->host_slots, 0);
    nb__cuda_leave(prev);
    if (!g->stream || e != cudaSuccess) {
        if (e != cudaSuccess) nb__cuda_err(e, "cuda_graph_create");
        nb_cuda_graph_free(g);
        return NULL;
    }
    g->sticky = g->slots + MAX_CHECKS;
    memset(g->host_slots, 0xff, 2 * MAX_CHECKS * sizeof *g->host_slots);
    return g;
}

nb_stream *nb_cuda_graph_stream(nb_cuda_graph *g) { return g ? g->stream : NULL; }

nb_status nb_cuda_graph_capture_begin(nb_cuda_graph *g)
{
    const char *op = "cuda_graph_capture_begin";
    if (!g) return nb__err(NB_ERR_INVALID_ARG, "%s: NULL graph", op);
    if (g->capturing || g->captured || g->pool_id) /* a failed capture keeps its pool until free */
        return nb__err(NB_ERR_INVALID_ARG, "%s: the graph was already %s (make a new one)", op,
                       g->capturing ? "being captured" : "captured");
    int d = g->device, cap = nb__cuda_capturing_any();
    if (cap >= 0)
        return nb__err(NB_ERR_INVALID_ARG, "%s: this thread is already capturing another graph on cuda:%d", op, cap);
    /* earlier work on every stream completes first, as torch.cuda.graph does */
    NB_TRY(nb_cuda_synchronize(d));
    nb_devpool *pool = nb__cuda_pool(d);
    if (!pool) return nb_last_status();
    g->pool_id = nb__devpool_private_begin(pool, g->stream->handle);
    if (!g->pool_id) return nb_last_status();
    int prev = nb__cuda_enter(d);
    cudaError_t e = cudaStreamBeginCapture(g->stream->handle, cudaStreamCaptureModeThreadLocal);
    /* every replay starts with no bad index found */
    if (e == cudaSuccess) e = cudaMemsetAsync(g->slots, 0xff, MAX_CHECKS * sizeof *g->slots, g->stream->handle);
    nb__cuda_leave(prev);
    if (e != cudaSuccess) {
        drop_capture(g);
        nb__devpool_private_end(pool, g->pool_id);
        nb__devpool_private_release(pool, g->pool_id);
        g->pool_id = 0;
        return nb__cuda_err(e, op);
    }
    g->prev_stream = nb_cuda_set_stream(g->stream);
    g->capturing = true;
    t_capture[d] = g;
    return NB_OK;
}

nb_status nb_cuda_graph_capture_end(nb_cuda_graph *g)
{
    const char *op = "cuda_graph_capture_end";
    if (!g) return nb__err(NB_ERR_INVALID_ARG, "%s: NULL graph", op);
    if (!g->capturing) return nb__err(NB_ERR_INVALID_ARG, "%s: the graph is not being captured", op);
    if (t_capture[g->device] != g)
        return nb__err(NB_ERR_INVALID_ARG, "%s: the capture must end on the thread that began it", op);
    int d = g->device;
    run_defers(g, true); /* still capturing: their work is the graph's last */
    int prev = nb__cuda_enter(d);
    cudaStream_t s = g->stream->handle;
    /* the verdicts of the index checks go to the host at the end of every replay */
    cudaError_t e = g->n_checks ? cudaMemcpyAsync(g->host_slots, g->sticky, 2 * (size_t)g->n_checks * sizeof *g->sticky,
                                                  cudaMemcpyDeviceToHost, s)
                                : cudaSuccess;
    cudaGraph_t graph = NULL;
    cudaError_t e2 = cudaStreamEndCapture(s, &graph);
    if (e == cudaSuccess) e = e2;
    /* AutoFreeOnLaunch, as PyTorch's CUDAGraph: memory a library allocated inside the capture
     * (cuBLAS's workspace through cudaMallocAsync since CUDA 12.2) and did not free there is freed
     * at the next launch, which would otherwise fail; the upload makes the first replay's time
     * the same as the others'. */
    if (e == cudaSuccess && !g->spoilt)
        e = cudaGraphInstantiateWithFlags(&g->exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch);
    if (e == cudaSuccess && !g->spoilt) e = cudaGraphUpload(g->exec, s);
    nb__cuda_leave(prev);
    t_capture[d] = NULL;
    g->capturing = false;
    if (g->prev_stream) nb_cuda_set_stream(g->prev_stream);
    nb_devpool *pool = nb__cuda_pool(d);
    if (pool) nb__devpool_private_end(pool, g->pool_id);
    g->graph = graph;
    if (g->spoilt) {
        nb__err(g->spoilt_status, "%s: the capture failed: %s", op, g->spoilt_msg);
        return g->spoilt_status;
    }
    if (e != cudaSuccess) return nb__cuda_err(e, op);
    g->captured = true;
    return NB_OK;
}

/* Reports the first bad index met since the last report (the last replay has completed), and
 * clears the verdicts for the next replays. */
static nb_status report_checks(nb_cuda_graph *g)
{
    for (int k = 0; k < g->n_checks; k++) {
        if (g->host_slots[2 * k] == ~0ULL) continue;
        const graph_check *c = &g->checks[k];
        long long v = (long long)g->host_slots[2 * k + 1];
        memset(g->host_slots, 0xff, 2 * MAX_CHECKS * sizeof *g->host_slots);
        int prev = nb__cuda_enter(g->device);
        cudaStream_t s = nb__cuda_stream(g->device)->handle;
        cudaError_t e = cudaMemsetAsync(g->sticky, 0xff, 2 * MAX_CHECKS * sizeof *g->sticky, s);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s);
        nb__cuda_leave(prev);
        if (e != cudaSuccess) return nb__cuda_err(e, nb__op_name(c->op));
        if (c->op == NB_OP_ONE_HOT)
            return nb__err(NB_ERR_INVALID_ARG, "one_hot (in a CUDA graph replay): index %lld is out of range for "
                           "num_classes %lld", v, (long long)c->size);
        return nb__err(NB_ERR_INVALID_ARG, "%s (in a CUDA graph replay): index %lld is out of range for dim %lld of "
                       "size %lld", nb__op_name(c->op), v, (long long)c->dim, (long long)c->size);
    }
    return NB_OK;
}

nb_status nb_cuda_graph_replay(nb_cuda_graph *g)
{
    const char *op = "cuda_graph_replay";
    if (!g) return nb__err(NB_ERR_INVALID_ARG, "%s: NULL graph", op);
    if (!g->captured) return nb__err(NB_ERR_INVALID_ARG, "%s: the graph has not been captured", op);
    int cap = nb__cuda_capturing_any();
    if (cap >= 0) return nb__err(NB_ERR_INVALID_ARG, "%s: cuda:%d is capturing a CUDA graph", op, cap);
    if (g->replayed && g->n_checks) {
        cudaError_t q = cudaEventQuery(g->done);
        if (q == cudaSuccess) NB_TRY(report_checks(g));
        else if (q != cudaErrorNotReady) return nb__cuda_err(q, op);
        else (void)cudaGetLastError(); /* not an error, but the runtime keeps it as the last one */
    }
    int prev = nb__cuda_enter(g->device);
    cudaStream_t s = nb__cuda_stream(g->device)->handle;
    cudaError_t e = cudaGraphLaunch(g->exec, s);
    if (e == cudaSuccess) e = cudaEventRecord(g->done, s);
    nb__cuda_leave(prev);
    if (e != cudaSuccess) return nb__cuda_err(e, op);
    g->replayed = true;
    return NB_OK;
}

nb_status nb_cuda_graph_check(nb_cuda_graph *g)
{
    const char *op = "cuda_graph_check";
    if (!g) return nb__err(NB_ERR_INVALID_ARG, "%s: NULL graph", op);
    if (!g->replayed) return NB_OK;
    int cap = nb__cuda_capturing_any();
    if (cap >= 0) return nb__err(NB_ERR_INVALID_ARG, "%s: cuda:%d is capturing a CUDA graph", op, cap);
    NB_CUDA_TRY(cudaEventSynchronize(g->done), op);
    return report_checks(g);
}

/* Free on the thread that captures (a capture is ended by the thread that began it), and not
 * while this thread captures another graph (its cudaFree calls would spoil that capture). */
void nb_cuda_graph_free(nb_cuda_graph *g)
{
    if (!g) return;
    int d = g->device;
    if (g->capturing) { /* abandoned mid-capture: end it, keep nothing */
        run_defers(g, false);
        drop_capture(g);
        t_capture[d] = NULL;
        if (g->prev_stream) nb_cuda_set_stream(g->prev_stream);
        nb_devpool *pool = nb__cuda_pool(d);
        if (pool) nb__devpool_private_end(pool, g->pool_id);
    }
    int prev = nb__cuda_enter(d);
    if (g->replayed && cudaEventSynchronize(g->done) != cudaSuccess) (void)cudaGetLastError();
    if (g->exec) cudaGraphExecDestroy(g->exec);
    if (g->graph) cudaGraphDestroy(g->graph);
    if (g->done) cudaEventDestroy(g->done);
    if (g->slots) cudaFree(g->slots);
    if (g->host_slots) cudaFreeHost(g->host_slots);
    for (int i = 0; i < g->n_keep; i++) cudaFreeHost(g->keep[i]);
    (void)cudaGetLastError();
    nb__cuda_leave(prev);
    free(g->keep);
    free(g->defers);
    if (g->pool_id) {
        nb_devpool *pool = nb__cuda_pool(d);
        if (pool && nb__devpool_private_release(pool, g->pool_id) != NB_OK) nb_clear_error();
    }
    capture_stream_give(g->stream);
    free(g);
}
