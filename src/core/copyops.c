/* Copies: contiguous, clone, dtype and device conversion, copy_/fill_/zero_. */
#include <string.h>

#include "autograd/autograd_impl.h"

/* A contiguous copy of t with dtype (no autograd). Caller-owned. */
static nb_tensor *copy_as(const nb_tensor *t, nb_dtype dtype)
{
    nb_tensor *out = nb__tensor_new(t->shape, t->ndim, dtype, t->storage->device);
    if (!out) return NULL;
    nb_kargs a = {.out = out, .in = {t}};
    if (nb__dispatch(NB_OP_COPY, &a) != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return out;
}

static nb_tensor *record_unary(nb_op op, nb_tensor *out, const nb_tensor *t)
{
    nb_status st;
    nb__record(op, out, &t, 1, NULL, 0, &st);
    if (st != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return nb__track(out);
}

static nb_tensor *copy_channels_last(const nb_tensor *t);

/* As PyTorch's clone (memory_format=torch.preserve_format): a channels-last tensor's copy is
 * channels-last, any other copy contiguous. */
nb_tensor *nb_clone(const nb_tensor *t)
{
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "clone: NULL tensor");
    nb_tensor *out = nb__is_channels_last(t) ? copy_channels_last(t) : copy_as(t, t->dtype);
    return out ? record_unary(NB_OP_CLONE, out, t) : NULL;
}

nb_tensor *nb__clone_contiguous(const nb_tensor *t)
{
    nb_tensor *out = copy_as(t, t->dtype);
    return out ? record_unary(NB_OP_CLONE, out, t) : NULL;
}

nb_tensor *nb_contiguous(const nb_tensor *t)
{
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "contiguous: NULL tensor");
    if (nb__is_contiguous(t)) return nb__track(nb_tensor_retain((nb_tensor *)t));
    return nb__clone_contiguous(t);
}

bool nb_tensor_is_contiguous_format(const nb_tensor *t, nb_memory_format f)
{
    if (!t) return false;
    if (f == NB_CONTIGUOUS_FORMAT) return nb__is_contiguous(t);
    return f == NB_CHANNELS_LAST && nb__is_dense_channels_last(t);
}

/* A channels-last copy of 4-D t (no autograd), on any backend: the copy kernel writes a fresh
 * contiguous [N, H, W, C] buffer from t's [N, H, W, C]-permuted view, and the result then takes
 * the logical shape back. Caller-owned. */
static nb_tensor *copy_channels_last(const nb_tensor *t)
{
    static const int perm[4] = {0, 2, 3, 1};
    int64_t shape[4], strides[4];
    for (int i = 0; i < 4; i++) shape[i] = t->shape[perm[i]], strides[i] = t->strides[perm[i]];
    nb_tensor *out = nb__tensor_new_named("contiguous_format", shape, 4, t->dtype, t->storage->device);
    nb_tensor *src = out ? nb__tensor_alias(t, shape, strides, 4, t->offset) : NULL;
    nb_kargs a = {.out = out, .in = {src}};
    nb_status st = src ? nb__dispatch(NB_OP_COPY, &a) : nb_last_status();
    nb__release(src);
    if (st != NB_OK) {
        nb__release(out);
        return NULL;
    }
    memcpy(out->shape, t->shape, sizeof shape);
    nb__channels_last_strides(out->shape, out->strides);
    return out;
}

nb_tensor *nb_contiguous_format(const nb_tensor *t, nb_memory_format f)
{
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "contiguous_format: NULL tensor");
    if (f != NB_CONTIGUOUS_FORMAT && f != NB_CHANNELS_LAST)
        return nb__err_null(NB_ERR_INVALID_ARG, "contiguous_format: invalid memory format %d", (int)f);
    if (f == NB_CONTIGUOUS_FORMAT) return nb_contiguous(t);
    if (t->ndim != 4)
        return nb__err_null(NB_ERR_SHAPE, "contiguous_format: channels_last needs a 4-D tensor (got %s)",
                            nb__shape_str(t->shape, t->ndim, (char[NB_SHAPE_STR_MAX]){0}));
    if (nb_tensor_is_contiguous_format(t, f)) {
        /* dense in both layouts and strided row-major (a one-channel batch): a view with the
         * channels-last strides, as torch's x.to(memory_format=channels_last) gives it, so that
         * the layers keep it channels-last (nb__is_channels_last) */
        int64_t cl[4];
        nb__channels_last_strides(t->shape, cl);
        if (nb__is_channels_last(t) || !memcmp(cl, t->strides, sizeof cl) || nb__numel(t->shape, 4) == 0)
            return nb__track(nb_tensor_retain((nb_tensor *)t));
        return nb_as_strided(t, t->shape, cl, 4, t->offset);
    }
    nb_tensor *out = copy_channels_last(t);
    return out ? record_unary(NB_OP_CLONE, out, t) : NULL;
}

nb_tensor *nb_to_dtype(const nb_tensor *t, nb_dtype dtype)
{
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "to_dtype: NULL tensor");
    if ((unsigned)dtype >= NB_DTYPE_COUNT) return nb__err_null(NB_ERR_DTYPE, "to_dtype: invalid dtype %d", (int)dtype);
    if (t->dtype == dtype) return nb__track(nb_tensor_retain((nb_tensor *)t));
    nb_tensor *out = copy_as(t, dtype);
    if (!out) return NULL;
    if (!nb_dtype_is_floating(dtype)) return nb__track(out); /* integer results carry no grad */
    return record_unary(NB_OP_TO_DTYPE, out, t);
}

/* Copies a contiguous tensor's bytes to another device. non_blocking: a copy from pinned host
 * memory is only queued (the host memory's own hook keeps its block alive until it is done). */
static nb_status transfer(nb_tensor *dst, const nb_tensor *src, bool non_blocking)
{
    size_t n = src->storage->nbytes ? (size_t)nb_tensor_numel(src) * nb_dtype_size(src->dtype) : 0;
    if (!n) return NB_OK;
    nb_device sd = src->storage->device, dd = dst->storage->device;
    if (sd.type == NB_DEVICE_CPU) {
        const nb_host_mem *host = src->storage->host;
        if (non_blocking && host && host->copy_to_device_async)
            return host->copy_to_device_async(dd, nb__data(dst), nb__data(src), n);
        const nb_backend *be = nb__backend(dd);
        return be ? be->copy_from_host(dd.index, nb__data(dst), nb__data(src), n) : nb_last_status();
    }
    if (dd.type == NB_DEVICE_CPU) {
        const nb_backend *be = nb__backend(sd);
        return be ? be->copy_to_host(sd.index, nb__data(dst), nb__data(src), n) : nb_last_status();
    }
    /* device to device: through a host buffer */
    nb_tensor *h = nb__tensor_new(src->shape, src->ndim, src->dtype, nb_cpu());
    if (!h) return nb_last_status();
    nb_status st = transfer(h, src, false);
    if (st == NB_OK) st = transfer(dst, h, false);
    nb__release(h);
    return st;
}

static nb_tensor *to_device(const char *op, const nb_tensor *t, nb_device device, bool non_blocking)
{
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "%s: NULL tensor", op);
    if (!nb__backend(device)) return NULL;
    if (nb_device_equal(t->storage->device, device)) return nb__track(nb_tensor_retain((nb_tensor *)t));
    nb_tensor *src = nb__is_contiguous(t) ? nb_tensor_retain((nb_tensor *)t) : copy_as(t, t->dtype);
    if (!src) return NULL;
    nb_tensor *out = nb__tensor_new(t->shape, t->ndim, t->dtype, device);
    nb_status st = out ? transfer(out, src, non_blocking) : nb_last_status();
    nb__release(src);
    if (st != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return record_unary(NB_OP_TO_DEVICE, out, t);
}

nb_tensor *nb_to(const nb_tensor *t, nb_device device) { return to_device("to", t, device, false); }

nb_tensor *nb_to_non_blocking(const nb_tensor *t, nb_device device)
{
    return to_device("to_non_blocking", t, device, true);
}

nb_tensor *nb_tensor_pin_memory(const nb_tensor *t)
{
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "pin_memory: NULL tensor");
    if (t->storage->device.type != NB_DEVICE_CPU) {
        char d[32];
        nb_device_str(t->storage->device, d, sizeof d);
        return nb__err_null(NB_ERR_DEVICE, "pin_memory: the tensor is on %s; only CPU tensors can be pinned", d);
    }
    if (t->storage->host) return nb__track(nb_tensor_retain((nb_tensor *)t));
    const nb_host_mem *host = nb__pinned_mem("pin_memory");
    if (!host) return NULL;
    nb_tensor *out = nb__tensor_new_host("pin_memory", t->shape, t->ndim, t->dtype, host);
    if (!out) return NULL;
    nb_kargs a = {.out = out, .in = {t}};
    if (nb__dispatch(NB_OP_COPY, &a) != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return record_unary(NB_OP_CLONE, out, t);
}

nb_status nb_copy_(nb_tensor *dst, const nb_tensor *src)
{
    if (!dst || !src) return nb__err(NB_ERR_INVALID_ARG, "copy_: NULL tensor");
    NB_TRY(nb__inplace_check("copy_", dst));
    int64_t shape[NB_MAX_DIMS];
    int nd;
    NB_TRY(nb__broadcast_shapes("copy_", dst->shape, dst->ndim, src->shape, src->ndim, shape, &nd));
    if (nd != dst->ndim || memcmp(shape, dst->shape, (size_t)nd * sizeof *shape) != 0) {
        char a[NB_SHAPE_STR_MAX], b[NB_SHAPE_STR_MAX];
        return nb__err(NB_ERR_SHAPE, "copy_: source of shape %s does not broadcast to destination shape %s",
                       nb__shape_str(src->shape, src->ndim, a), nb__shape_str(dst->shape, dst->ndim, b));
    }
    nb_scope *s = nb_scope_begin();
    if (!s) return nb_last_status();
    nb_status st = NB_OK;
    const nb_tensor *from = src;
    if (!nb_device_equal(src->storage->device, dst->storage->device)) {
        from = nb_to(src, dst->storage->device);
        if (!from) st = nb_last_status();
    }
    if (st == NB_OK && nb__inplace_needs_grad(dst, &from, 1)) {
        nb_tensor *r = nb_expand(from, dst->shape, dst->ndim);
        if (r) r = nb_to_dtype(r, dst->dtype);
        if (r) r = nb_clone(r);
        st = r ? nb__inplace_commit(dst, r, false) : nb_last_status();
    } else if (st == NB_OK) {
        nb_kargs a = {.out = dst, .in = {from}};
        st = nb__dispatch(NB_OP_COPY, &a);
        if (st == NB_OK) nb__bump_version(dst);
    }
    nb_scope_end(s);
    return st;
}

nb_status nb_fill_(nb_tensor *t, double value)
{
    NB_TRY(nb__inplace_check("fill_", t));
    if (nb__inplace_needs_grad(t, NULL, 0)) {
        nb_scope *s = nb_scope_begin();
        if (!s) return nb_last_status();
        nb_tensor *r = nb_full_like(t, value);
        nb_status st = r ? nb__inplace_commit(t, r, false) : nb_last_status();
        nb_scope_end(s);
        return st;
    }
    nb_kargs a = {.out = t, .s0 = value};
    NB_TRY(nb__dispatch(NB_OP_FILL, &a));
    nb__bump_version(t);
    return NB_OK;
}

nb_status nb_zero_(nb_tensor *t) { return nb_fill_(t, 0); }
