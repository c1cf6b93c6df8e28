/* nabla/cuda.h in a build without the CUDA backend: no devices, and every call that needs one
 * fails with NB_ERR_DEVICE, so that device-agnostic programs compile and run everywhere. */
#ifndef NB_HAVE_CUDA
#include "core/tensor_impl.h"

#define NOT_BUILT(fn) "%s: this nabla was built without CUDA (configure with -DNABLA_CUDA=ON)", fn

bool nb_cuda_is_built(void) { return false; }

nb_status nb_cuda_get_device_properties(int index, nb_cuda_device_props *out)
{
    return nb__err(NB_ERR_DEVICE, NOT_BUILT("cuda_get_device_properties"));
}

int nb_cuda_runtime_version(void) { return 0; }
void nb_cuda_set_allow_tf32(bool allow) { (void)allow; /* no GPU matmul to configure */ }
bool nb_cuda_get_allow_tf32(void) { return false; }
void nb_cuda_set_allow_tf32_conv(bool allow) { (void)allow; /* no GPU convolution to configure */ }
bool nb_cuda_get_allow_tf32_conv(void) { return false; }
int nb_cuda_driver_version(void) { return 0; }
int nb_cuda_cudnn_version(void) { return 0; }
int nb_cuda_current_device(void) { return 0; }
nb_status nb_cuda_set_device(int index) { return nb__err(NB_ERR_DEVICE, NOT_BUILT("cuda_set_device")); }

nb_status nb_cuda_device_guard_enter(nb_cuda_device_guard *g, int index)
{
    if (g) *g = (nb_cuda_device_guard){0, false};
    if (index == -1) return NB_OK;
    return nb__err(NB_ERR_DEVICE, NOT_BUILT("cuda_device_guard_enter"));
}

void nb_cuda_device_guard_exit(nb_cuda_device_guard *g) { (void)g; }
nb_status nb_cuda_synchronize(int index) { return nb__err(NB_ERR_DEVICE, NOT_BUILT("cuda_synchronize")); }
nb_stream *nb_cuda_stream_create(int index) { return nb__err_null(NB_ERR_DEVICE, NOT_BUILT("cuda_stream_create")); }
void nb_cuda_stream_free(nb_stream *s) { (void)s; }
nb_stream *nb_cuda_default_stream(int index) { return nb__err_null(NB_ERR_DEVICE, NOT_BUILT("cuda_default_stream")); }
nb_stream *nb_cuda_current_stream(int index) { return nb__err_null(NB_ERR_DEVICE, NOT_BUILT("cuda_current_stream")); }
nb_stream *nb_cuda_set_stream(nb_stream *s) { return nb__err_null(NB_ERR_DEVICE, NOT_BUILT("cuda_set_stream")); }
int nb_cuda_stream_device(const nb_stream *s) { return -1; }
nb_status nb_cuda_stream_synchronize(nb_stream *s) { return nb__err(NB_ERR_DEVICE, NOT_BUILT("cuda_stream_synchronize")); }
bool nb_cuda_stream_query(nb_stream *s) { return false; }
nb_event *nb_cuda_event_create(bool enable_timing) { return nb__err_null(NB_ERR_DEVICE, NOT_BUILT("cuda_event_create")); }
void nb_cuda_event_free(nb_event *e) { (void)e; }
nb_status nb_cuda_event_record(nb_event *e, nb_stream *s) { return nb__err(NB_ERR_DEVICE, NOT_BUILT("cuda_event_record")); }
nb_status nb_cuda_event_synchronize(nb_event *e) { return nb__err(NB_ERR_DEVICE, NOT_BUILT("cuda_event_synchronize")); }
bool nb_cuda_event_query(nb_event *e) { return false; }

nb_status nb_cuda_event_elapsed_ms(const nb_event *start, const nb_event *end, float *ms)
{
    return nb__err(NB_ERR_DEVICE, NOT_BUILT("cuda_event_elapsed_ms"));
}

nb_status nb_cuda_stream_wait_event(nb_stream *s, nb_event *e)
{
    return nb__err(NB_ERR_DEVICE, NOT_BUILT("cuda_stream_wait_event"));
}

nb_status nb_cuda_empty_cache(void) { return NB_OK; /* nothing is cached */ }

nb_status nb_cuda_record_stream(const nb_tensor *t, nb_stream *s)
{
    return nb__err(NB_ERR_DEVICE, NOT_BUILT("cuda_record_stream"));
}

nb_cuda_graph *nb_cuda_graph_create(int index) { return nb__err_null(NB_ERR_DEVICE, NOT_BUILT("cuda_graph_create")); }
nb_stream *nb_cuda_graph_stream(nb_cuda_graph *g) { return NULL; }
nb_status nb_cuda_graph_capture_begin(nb_cuda_graph *g) { return nb__err(NB_ERR_DEVICE, NOT_BUILT("cuda_graph_capture_begin")); }
nb_status nb_cuda_graph_capture_end(nb_cuda_graph *g) { return nb__err(NB_ERR_DEVICE, NOT_BUILT("cuda_graph_capture_end")); }
nb_status nb_cuda_graph_replay(nb_cuda_graph *g) { return nb__err(NB_ERR_DEVICE, NOT_BUILT("cuda_graph_replay")); }
nb_status nb_cuda_graph_check(nb_cuda_graph *g) { return nb__err(NB_ERR_DEVICE, NOT_BUILT("cuda_graph_check")); }
void nb_cuda_graph_free(nb_cuda_graph *g) { (void)g; }
bool nb_cuda_is_capturing(int index) { return false; }

/* No pinned memory: nb_tensor_pin_memory fails with this error, nb_tensor_is_pinned is false
 * and nb_to_non_blocking is nb_to (src/core/copyops.c, tensor.c). */
const nb_host_mem *nb__pinned_mem(const char *op) { return nb__err_null(NB_ERR_DEVICE, NOT_BUILT(op)); }
#endif
