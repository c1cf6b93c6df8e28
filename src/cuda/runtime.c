/* The CUDA device's runtime: device count and properties, the current device, streams, events. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_impl.h"
#ifdef NB_HAVE_CUDNN
#include <cudnn.h>
#endif

nb_status nb__cuda_err(cudaError_t e, const char *what)
{
    (void)cudaGetLastError(); /* clear the sticky error so later calls do not report it again */
    nb_status st = e == cudaErrorMemoryAllocation ? NB_ERR_OOM : NB_ERR_DEVICE;
    return nb__err(st, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

bool nb_cuda_is_built(void) { return true; }

static int g_count = -1;
static pthread_once_t g_count_once = PTHREAD_ONCE_INIT;

static void count_devices(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver, or no device: zero GPUs, not an error */
        n = 0;
    }
    g_count = n > NB_CUDA_MAX_DEVICES ? NB_CUDA_MAX_DEVICES : n;
}

int nb__cuda_count(void)
{
    pthread_once(&g_count_once, count_devices);
    return g_count;
}

nb_status nb__cuda_check_index(int index, const char *what)
{
    int n = nb__cuda_count();
    if (n == 0) return nb__err(NB_ERR_DEVICE, "%s: no CUDA device is present", what);
    if (index < 0 || index >= n)
        return nb__err(NB_ERR_DEVICE, "%s: cuda:%d does not exist (%d CUDA device%s)", what, index, n,
                       n == 1 ? "" : "s");
    return NB_OK;
}

int nb_cuda_runtime_version(void)
{
    int v = 0;
    return cudaRuntimeGetVersion(&v) == cudaSuccess ? v : 0;
}

int nb_cuda_sm_count(int dev)
{
    static atomic_int cache[NB_CUDA_MAX_DEVICES];
    if (dev < 0 || dev >= NB_CUDA_MAX_DEVICES) return 0;
    int n = atomic_load(&cache[dev]);
    if (n > 0) return n;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    atomic_store(&cache[dev], n);
    return n;
}

int nb_cuda_cudnn_version(void)
{
#ifdef NB_HAVE_CUDNN
    return (int)cudnnGetVersion();
#else
    return 0;
#endif
}

int nb_cuda_driver_version(void)
{
    int v = 0;
    if (cudaDriverGetVersion(&v) != cudaSuccess) (void)cudaGetLastError();
    return v;
}

nb_status nb_cuda_get_device_properties(int index, nb_cuda_device_props *out)
{
    if (!out) return nb__err(NB_ERR_INVALID_ARG, "cuda_get_device_properties: NULL output");
    NB_TRY(nb__cuda_check_index(index, "cuda_get_device_properties"));
    struct cudaDeviceProp p;
    NB_CUDA_TRY(cudaGetDeviceProperties(&p, index), "cuda_get_device_properties");
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->total_memory = p.totalGlobalMem;
    out->major = p.major;
    out->minor = p.minor;
    out->multi_processor_count = p.multiProcessorCount;
    return NB_OK;
}

/* ---- the current device ----------------------------------------------------------------------- */

int nb_cuda_current_device(void)
{
    int d = 0;
    if (nb__cuda_count() == 0 || cudaGetDevice(&d) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return d;
}

nb_status nb_cuda_set_device(int index)
{
    NB_TRY(nb__cuda_check_index(index, "cuda_set_device"));
    NB_CUDA_TRY(cudaSetDevice(index), "cuda_set_device");
    return NB_OK;
}

nb_status nb_cuda_device_guard_enter(nb_cuda_device_guard *g, int index)
{
    if (!g) return nb__err(NB_ERR_INVALID_ARG, "cuda_device_guard_enter: NULL guard");
    *g = (nb_cuda_device_guard){0, false};
    if (index == -1) return NB_OK;
    NB_TRY(nb__cuda_check_index(index, "cuda_device_guard_enter"));
    g->prev = nb_cuda_current_device();
    if (g->prev != index) NB_CUDA_TRY(cudaSetDevice(index), "cuda_device_guard_enter");
    g->active = true;
    return NB_OK;
}

void nb_cuda_device_guard_exit(nb_cuda_device_guard *g)
{
    if (g && g->active) {
        if (cudaSetDevice(g->prev) != cudaSuccess) (void)cudaGetLastError();
        g->active = false;
    }
}

int nb__cuda_enter(int index)
{
    int prev = nb_cuda_current_device();
    if (prev != index && cudaSetDevice(index) != cudaSuccess) (void)cudaGetLastError();
    return prev;
}

void nb__cuda_leave(int prev)
{
    int cur = 0;
    if (cudaGetDevice(&cur) == cudaSuccess && cur != prev && cudaSetDevice(prev) != cudaSuccess)
        (void)cudaGetLastError();
}

static nb_status resolve(int *index, const char *what)
{
    if (*index == -1) *index = nb_cuda_current_device();
    return nb__cuda_check_index(*index, what);
}

nb_status nb_cuda_synchronize(int index)
{
    NB_TRY(resolve(&index, "cuda_synchronize"));
    if (nb__cuda_capturing(index))
        return nb__cuda_capture_refuse(index, "cuda_synchronize", "the host cannot wait for the device inside it");
    int prev = nb__cuda_enter(index);
    cudaError_t e = cudaDeviceSynchronize();
    nb__cuda_leave(prev);
    return e == cudaSuccess ? NB_OK : nb__cuda_err(e, "cuda_synchronize");
}

/* ---- streams ----------------------------------------------------------------------------------- */

static nb_stream g_default[NB_CUDA_MAX_DEVICES];
static _Thread_local nb_stream *t_current[NB_CUDA_MAX_DEVICES];

nb_stream *nb__cuda_stream(int index)
{
    nb_stream *s = t_current[index];
    if (s) return s;
    g_default[index].device = index; /* idempotent: the same value from every thread */
    return &g_default[index];
}

nb_stream *nb_cuda_default_stream(int index)
{
    if (resolve(&index, "cuda_default_stream") != NB_OK) return NULL;
    g_default[index].device = index;
    return &g_default[index];
}

nb_stream *nb_cuda_current_stream(int index)
{
    if (resolve(&index, "cuda_current_stream") != NB_OK) return NULL;
    return nb__cuda_stream(index);
}

nb_stream *nb_cuda_stream_create(int index)
{
    if (resolve(&index, "cuda_stream_create") != NB_OK) return NULL;
    nb_stream *s = calloc(1, sizeof *s);
    if (!s) return nb__err_null(NB_ERR_OOM, "cuda_stream_create: out of host memory");
    int prev = nb__cuda_enter(index);
    cudaError_t e = cudaStreamCreateWithFlags(&s->handle, cudaStreamNonBlocking);
    nb__cuda_leave(prev);
    if (e != cudaSuccess) {
        free(s);
        nb__cuda_err(e, "cuda_stream_create");
        return NULL;
    }
    s->device = index;
    s->owned = true;
    return s;
}

void nb_cuda_stream_free(nb_stream *s)
{
    if (!s || !s->owned) return;
    if (t_current[s->device] == s) t_current[s->device] = NULL;
    if (cudaStreamDestroy(s->handle) != cudaSuccess) (void)cudaGetLastError();
    free(s);
}

nb_stream *nb_cuda_set_stream(nb_stream *s)
{
    if (!s) return nb__err_null(NB_ERR_INVALID_ARG, "cuda_set_stream: NULL stream");
    nb_stream *prev = nb__cuda_stream(s->device);
    t_current[s->device] = s == &g_default[s->device] ? NULL : s;
    return prev;
}

int nb_cuda_stream_device(const nb_stream *s) { return s ? s->device : -1; }

nb_status nb_cuda_stream_synchronize(nb_stream *s)
{
    if (!s) return nb__err(NB_ERR_INVALID_ARG, "cuda_stream_synchronize: NULL stream");
    if (nb__cuda_capturing(s->device))
        return nb__cuda_capture_refuse(s->device, "cuda_stream_synchronize", "the host cannot wait for the device inside it");
    NB_CUDA_TRY(cudaStreamSynchronize(s->handle), "cuda_stream_synchronize");
    return NB_OK;
}

bool nb_cuda_stream_query(nb_stream *s)
{
    if (!s) return false;
    cudaError_t e = cudaStreamQuery(s->handle);
    if (e != cudaSuccess) (void)cudaGetLastError(); /* NotReady too: else a later launch check sees it */
    return e == cudaSuccess;
}

/* ---- events ------------------------------------------------------------------------------------ */

struct nb_event {
    cudaEvent_t handle;
    int device;
    bool timing, created, recorded;
};

nb_event *nb_cuda_event_create(bool enable_timing)
{
    if (nb__cuda_count() == 0) return nb__err_null(NB_ERR_DEVICE, "cuda_event_create: no CUDA device is present");
    nb_event *e = calloc(1, sizeof *e);
    if (!e) return nb__err_null(NB_ERR_OOM, "cuda_event_create: out of host memory");
    e->timing = enable_timing;
    e->device = -1; /* created lazily on its stream's device at the first record */
    return e;
}

void nb_cuda_event_free(nb_event *e)
{
    if (!e) return;
    if (e->created && cudaEventDestroy(e->handle) != cudaSuccess) (void)cudaGetLastError();
    free(e);
}

nb_status nb_cuda_event_record(nb_event *e, nb_stream *s)
{
    if (!e) return nb__err(NB_ERR_INVALID_ARG, "cuda_event_record: NULL event");
    if (!s) s = nb__cuda_stream(nb_cuda_current_device());
    if (e->created && e->device != s->device)
        return nb__err(NB_ERR_DEVICE, "cuda_event_record: the event belongs to cuda:%d, the stream to cuda:%d",
                       e->device, s->device);
    int prev = nb__cuda_enter(s->device);
    cudaError_t err = cudaSuccess;
    if (!e->created) {
        err = cudaEventCreateWithFlags(&e->handle, e->timing ? cudaEventDefault : cudaEventDisableTiming);
        if (err == cudaSuccess) {
            e->created = true;
            e->device = s->device;
        }
    }
    if (err == cudaSuccess) err = cudaEventRecord(e->handle, s->handle);
    nb__cuda_leave(prev);
    if (err != cudaSuccess) return nb__cuda_err(err, "cuda_event_record");
    e->recorded = true;
    return NB_OK;
}

nb_status nb_cuda_event_synchronize(nb_event *e)
{
    if (!e) return nb__err(NB_ERR_INVALID_ARG, "cuda_event_synchronize: NULL event");
    if (!e->recorded) return NB_OK; /* as in CUDA: an event never recorded has nothing to wait for */
    if (nb__cuda_capturing(e->device))
        return nb__cuda_capture_refuse(e->device, "cuda_event_synchronize", "the host cannot wait for the device inside it");
    NB_CUDA_TRY(cudaEventSynchronize(e->handle), "cuda_event_synchronize");
    return NB_OK;
}

bool nb_cuda_event_query(nb_event *e)
{
    if (!e || !e->recorded) return e != NULL;
    cudaError_t r = cudaEventQuery(e->handle);
    if (r != cudaSuccess && r != cudaErrorNotReady) (void)cudaGetLastError();
    return r == cudaSuccess;
}

nb_status nb_cuda_event_elapsed_ms(const nb_event *start, const nb_event *end, float *ms)
{
    if (!start || !end || !ms) return nb__err(NB_ERR_INVALID_ARG, "cuda_event_elapsed_ms: NULL argument");
    if (!start->timing || !end->timing)
        return nb__err(NB_ERR_INVALID_ARG, "cuda_event_elapsed_ms: both events need enable_timing");
    if (!start->recorded || !end->recorded)
        return nb__err(NB_ERR_INVALID_ARG, "cuda_event_elapsed_ms: both events must be recorded first");
    NB_CUDA_TRY(cudaEventElapsedTime(ms, start->handle, end->handle), "cuda_event_elapsed_ms");
    return NB_OK;
}

nb_status nb_cuda_stream_wait_event(nb_stream *s, nb_event *e)
{
    if (!s || !e) return nb__err(NB_ERR_INVALID_ARG, "cuda_stream_wait_event: NULL argument");
    if (!e->recorded) return NB_OK;
    NB_CUDA_TRY(cudaStreamWaitEvent(s->handle, e->handle, 0), "cuda_stream_wait_event");
    return NB_OK;
}
