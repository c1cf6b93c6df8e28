/* Devices: parsing, checking, and the per-device tables. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dispatch_impl.h"

nb_device nb_cpu(void) { return (nb_device){NB_DEVICE_CPU, 0}; }

bool nb_device_equal(nb_device a, nb_device b) { return a.type == b.type && a.index == b.index; }

int nb_device_str(nb_device d, char *buf, size_t size)
{
    switch (d.type) {
    case NB_DEVICE_CPU: return snprintf(buf, size, "cpu");
    case NB_DEVICE_CUDA: return snprintf(buf, size, "cuda:%d", d.index);
    default: return snprintf(buf, size, "device(type=%d, index=%d)", (int)d.type, d.index);
    }
}

bool nb_cuda_is_available(void) { return nb_cuda_device_count() > 0; }

int nb_cuda_device_count(void)
{
#ifdef NB_HAVE_CUDA
    return nb__cuda_backend.device_count();
#else
    return 0;
#endif
}

const nb_backend *nb__backend(nb_device d)
{
    char name[48];
    nb_device_str(d, name, sizeof name);
    switch (d.type) {
    case NB_DEVICE_CPU:
        if (d.index != 0) return nb__err_null(NB_ERR_DEVICE, "device cpu:%d: the CPU has only index 0", d.index);
        return &nb__cpu_backend;
    case NB_DEVICE_CUDA:
#ifdef NB_HAVE_CUDA
        if (d.index < 0 || d.index >= nb__cuda_backend.device_count())
            return nb__err_null(NB_ERR_DEVICE, "device %s is not present (%d CUDA device(s))", name,
                                nb__cuda_backend.device_count());
        return &nb__cuda_backend;
#else
        return nb__err_null(NB_ERR_DEVICE, "device %s: nabla was built without CUDA", name);
#endif
    default: return nb__err_null(NB_ERR_DEVICE, "%s: unknown device type", name);
    }
}

nb_status nb_device_check(nb_device d) { return nb__backend(d) ? NB_OK : nb_last_status(); }

nb_status nb_device_parse(const char *s, nb_device *out)
{
    nb_device cpu = nb_cpu();
    if (out) *out = cpu;
    if (!s || !out) return nb__err(NB_ERR_INVALID_ARG, "device_parse: NULL argument");
    if (strcmp(s, "cpu") == 0) return NB_OK;
    if (strcmp(s, "auto") == 0) {
        if (nb_cuda_device_count() > 0) *out = (nb_device){NB_DEVICE_CUDA, 0};
        return NB_OK;
    }
    if (strncmp(s, "cuda", 4) == 0) {
        nb_device d = {NB_DEVICE_CUDA, 0};
        if (s[4] == ':') {
            char *end;
            long idx = strtol(s + 5, &end, 10);
            if (s[5] == '\0' || *end != '\0' || idx < 0 || idx > 1024)
                return nb__err(NB_ERR_DEVICE, "device_parse: bad device index in \"%s\"", s);
            d.index = (int)idx;
        } else if (s[4] != '\0') {
            return nb__err(NB_ERR_DEVICE,
                           "device_parse: unknown device \"%s\" (expected cpu, cuda, cuda:N or auto)", s);
        }
        if (!nb__backend(d)) return nb_last_status();
        *out = d;
        return NB_OK;
    }
    return nb__err(NB_ERR_DEVICE, "device_parse: unknown device \"%s\" (expected cpu, cuda, cuda:N or auto)",
                   s);
}

nb_status nb_device_synchronize(nb_device d)
{
    const nb_backend *be = nb__backend(d);
    if (!be) return nb_last_status();
    return be->synchronize ? be->synchronize(d.index) : NB_OK;
}

nb_status nb_memory_stats_get(nb_device d, nb_memory_stats *out)
{
    if (!out) return nb__err(NB_ERR_INVALID_ARG, "memory_stats_get: NULL out");
    memset(out, 0, sizeof *out);
    const nb_backend *be = nb__backend(d);
    if (!be) return nb_last_status();
    return be->memory_stats(d.index, out);
}

nb_status nb_memory_reset_peak_stats(nb_device d)
{
    const nb_backend *be = nb__backend(d);
    if (!be) return nb_last_status();
    be->reset_peak_stats(d.index);
    return NB_OK;
}

nb_status nb__device_capture_defer(nb_device d, nb_status (*fn)(void *ctx), void (*drop)(void *ctx), void *ctx)
{
    const nb_backend *be = d.type == NB_DEVICE_CPU ? NULL : nb__backend(d);
    if (!be || !be->capture_defer) {
        drop(ctx);
        return nb__err(NB_ERR_UNSUPPORTED, "capture_defer: the device is not capturing a graph");
    }
    return be->capture_defer(d.index, fn, drop, ctx);
}

nb_status nb__device_capture_refuse(nb_device d, const char *op, const char *why)
{
    const nb_backend *be = d.type == NB_DEVICE_CPU ? NULL : nb__backend(d);
    if (!be || !be->capture_refuse) return nb__err(NB_ERR_UNSUPPORTED, "%s: %s", op, why);
    return be->capture_refuse(d.index, op, why);
}

bool nb__device_capturing(nb_device d)
{
    if (d.type == NB_DEVICE_CPU) return false;
    const nb_backend *be = nb__backend(d);
    if (!be) {
        nb_clear_error();
        return false;
    }
    return be->is_capturing && be->is_capturing(d.index);
}
