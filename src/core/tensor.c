/* Tensors and storage: lifetime, metadata and reading values back. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"

/* Larger than any tensor a machine can hold: catches overflowing shape products early. */
#define NB_MAX_BYTES ((size_t)1 << 46)

/* Storage from the device's allocator, or (host non-NULL) CPU storage from host's. */
static nb_storage *storage_new(size_t nbytes, nb_device device, const nb_host_mem *host)
{
    const nb_backend *be = host ? NULL : nb__backend(device);
    if (!host && !be) return NULL;
    nb_storage *s = calloc(1, sizeof *s);
    if (!s) return nb__err_null(NB_ERR_OOM, "out of host memory allocating a storage header");
    s->data = host ? host->alloc(nbytes) : be->alloc(device.index, nbytes);
    if (!s->data && (nbytes > 0 || host)) {
        free(s);
        return NULL;
    }
    atomic_init(&s->refcount, 1);
    atomic_init(&s->version, 0);
    s->nbytes = nbytes;
    s->device = device;
    s->host = host;
    return s;
}

nb_storage *nb__storage_new(size_t nbytes, nb_device device) { return storage_new(nbytes, device, NULL); }

nb_storage *nb__storage_new_host(size_t nbytes, const nb_host_mem *host)
{
    return storage_new(nbytes, nb_cpu(), host);
}

void nb__storage_release(nb_storage *s)
{
    if (!s || atomic_fetch_sub(&s->refcount, 1) != 1) return;
    if (s->host) {
        s->host->free(s->data, s->nbytes);
    } else if (!s->borrowed) {
        const nb_backend *be = nb__backend(s->device);
        if (be) be->free(s->device.index, s->data, s->nbytes);
    }
    free(s);
}

static nb_status check_shape(const char *op, const int64_t *shape, int ndim, nb_dtype dtype,
                             size_t *nbytes)
{
    if (ndim < 0 || ndim > NB_MAX_DIMS)
        return nb__err(NB_ERR_INVALID_ARG, "%s: %d dims (at most %d)", op, ndim, NB_MAX_DIMS);
    if (ndim > 0 && !shape) return nb__err(NB_ERR_INVALID_ARG, "%s: NULL shape with %d dims", op, ndim);
    if ((unsigned)dtype >= NB_DTYPE_COUNT)
        return nb__err(NB_ERR_DTYPE, "%s: invalid dtype %d", op, (int)dtype);
    /* The product of the sizes (a 0 counted as 1) bounds the strides as well as the bytes: an
     * empty tensor's other sizes must not overflow its strides either. */
    size_t n = nb_dtype_size(dtype);
    bool empty = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            char s[NB_SHAPE_STR_MAX];
            return nb__err(NB_ERR_SHAPE, "%s: negative size in shape %s", op, nb__shape_str(shape, ndim, s));
        }
        size_t d = shape[i] > 1 ? (size_t)shape[i] : 1;
        if (n > NB_MAX_BYTES / d) {
            char s[NB_SHAPE_STR_MAX];
            return nb__err(NB_ERR_OOM, "%s: shape %s of %s is too large", op,
                           nb__shape_str(shape, ndim, s), nb_dtype_name(dtype));
        }
        n *= d;
        empty = empty || shape[i] == 0;
    }
    *nbytes = empty ? 0 : n;
    return NB_OK;
}

nb_tensor *nb__tensor_new(const int64_t *shape, int ndim, nb_dtype dtype, nb_device device)
{
    return nb__tensor_new_named("empty", shape, ndim, dtype, device);
}

static nb_tensor *tensor_new(const char *op, const int64_t *shape, int ndim, nb_dtype dtype, nb_device device,
                             const nb_host_mem *host)
{
    size_t nbytes;
    if (check_shape(op, shape, ndim, dtype, &nbytes) != NB_OK) return NULL;
    nb_tensor *t = calloc(1, sizeof *t);
    if (!t) return nb__err_null(NB_ERR_OOM, "out of host memory allocating a tensor");
    t->storage = storage_new(nbytes, device, host);
    if (!t->storage) {
        free(t);
        return NULL;
    }
    atomic_init(&t->refcount, 1);
    t->dtype = dtype;
    t->ndim = ndim;
    if (ndim) memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    nb__contiguous_strides(t->shape, ndim, t->strides);
    return t;
}

nb_tensor *nb__tensor_new_named(const char *op, const int64_t *shape, int ndim, nb_dtype dtype, nb_device device)
{
    return tensor_new(op, shape, ndim, dtype, device, NULL);
}

nb_tensor *nb__tensor_new_format(const char *op, const int64_t *shape, int ndim, nb_dtype dtype, nb_device device,
                                 bool cl)
{
    nb_tensor *t = tensor_new(op, shape, ndim, dtype, device, NULL);
    if (t && cl && ndim == 4) nb__channels_last_strides(shape, t->strides);
    return t;
}

nb_tensor *nb__tensor_new_as(const char *op, const int64_t *shape, int ndim, nb_dtype dtype, nb_device device,
                             const nb_tensor *const *refs, int nrefs)
{
    bool cl = false;
    for (int i = 0; i < nrefs && ndim == 4 && device.type == NB_DEVICE_CPU && !cl; i++) {
        const nb_tensor *r = refs[i];
        cl = r && r->ndim == 4 && memcmp(r->shape, shape, 4 * sizeof *shape) == 0 && nb__keeps_channels_last(r);
    }
    return nb__tensor_new_format(op, shape, ndim, dtype, device, cl);
}

nb_tensor *nb__tensor_new_host(const char *op, const int64_t *shape, int ndim, nb_dtype dtype, const nb_host_mem *host)
{
    return tensor_new(op, shape, ndim, dtype, nb_cpu(), host);
}

bool nb_tensor_is_pinned(const nb_tensor *t) { return t && t->storage->host; }

nb_tensor *nb__tensor_alias(const nb_tensor *src, const int64_t *shape, const int64_t *strides,
                            int ndim, int64_t offset)
{
    nb_tensor *t = calloc(1, sizeof *t);
    if (!t) return nb__err_null(NB_ERR_OOM, "out of host memory allocating a tensor");
    atomic_init(&t->refcount, 1);
    t->dtype = src->dtype;
    t->ndim = ndim;
    if (ndim) {
        memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
        memcpy(t->strides, strides, (size_t)ndim * sizeof *strides);
    }
    t->offset = offset;
    t->storage = src->storage;
    atomic_fetch_add(&t->storage->refcount, 1);
    nb_tensor *base = src->base ? src->base : (nb_tensor *)src;
    t->base = nb_tensor_retain(base);
    t->view_version = atomic_load(&t->storage->version);
    return t;
}

void nb__release(nb_tensor *t)
{
    if (!t || atomic_fetch_sub(&t->refcount, 1) != 1) return;
    if (t->grad_fn && t->grad_fn->retain_target == t) t->grad_fn->retain_target = NULL;
    nb__storage_release(t->storage);
    nb__release(t->grad);
    nb__node_release(t->grad_fn);
    nb__release(t->base);
    free(t);
}

nb_tensor *nb_tensor_retain(nb_tensor *t)
{
    if (t) atomic_fetch_add(&t->refcount, 1);
    return t;
}

void nb_tensor_free(nb_tensor *t) { nb__release(t); }

/* ---- metadata ---------------------------------------------------------------------------- */

int nb_tensor_ndim(const nb_tensor *t) { return t ? t->ndim : 0; }
const int64_t *nb_tensor_shape(const nb_tensor *t) { return t ? t->shape : NULL; }
const int64_t *nb_tensor_strides(const nb_tensor *t) { return t ? t->strides : NULL; }
int64_t nb_tensor_offset(const nb_tensor *t) { return t ? t->offset : 0; }
int64_t nb_tensor_numel(const nb_tensor *t) { return t ? nb__numel(t->shape, t->ndim) : 0; }
nb_dtype nb_tensor_dtype(const nb_tensor *t) { return t ? t->dtype : NB_FLOAT32; }
nb_device nb_tensor_device(const nb_tensor *t) { return t ? t->storage->device : nb_cpu(); }
bool nb_tensor_is_contiguous(const nb_tensor *t) { return t && nb__is_contiguous(t); }
uint64_t nb_tensor_version(const nb_tensor *t) { return t ? atomic_load(&t->storage->version) : 0; }

int64_t nb_tensor_size(const nb_tensor *t, int64_t dim)
{
    int64_t d;
    if (!t || nb__wrap_dim("size", dim, t->ndim, &d) != NB_OK) return -1;
    return t->ndim ? t->shape[d] : 1;
}

void *nb_tensor_data_ptr(const nb_tensor *t)
{
    if (!t || t->storage->device.type != NB_DEVICE_CPU) return NULL;
    return nb__data(t);
}

/* ---- reading ----------------------------------------------------------------------------- */

nb_status nb_tensor_read(const nb_tensor *t, void *buf, size_t nbytes)
{
    if (!t || (!buf && nbytes)) return nb__err(NB_ERR_INVALID_ARG, "tensor_read: NULL argument");
    size_t need = (size_t)nb_tensor_numel(t) * nb_dtype_size(t->dtype);
    if (nbytes != need)
        return nb__err(NB_ERR_INVALID_ARG, "tensor_read: buffer of %zu bytes for %lld %s values (%zu bytes)",
                       nbytes, (long long)nb_tensor_numel(t), nb_dtype_name(t->dtype), need);
    if (need == 0) return NB_OK;
    nb_scope *s = nb_scope_begin();
    if (!s) return nb_last_status();
    nb_status st = NB_OK;
    nb_tensor *c = nb_contiguous(t);
    if (!c) {
        st = nb_last_status();
    } else if (c->storage->device.type == NB_DEVICE_CPU) {
        memcpy(buf, nb__data(c), need);
    } else {
        const nb_backend *be = nb__backend(c->storage->device);
        st = be ? be->copy_to_host(c->storage->device.index, buf, nb__data(c), need) : nb_last_status();
    }
    nb_scope_end(s);
    return st;
}

static nb_status item_check(const nb_tensor *t, const char *op)
{
    if (!t) return nb__err(NB_ERR_INVALID_ARG, "%s: NULL tensor", op);
    if (nb_tensor_numel(t) != 1) {
        char s[NB_SHAPE_STR_MAX];
        return nb__err(NB_ERR_SHAPE, "%s: a tensor of shape %s has %lld elements, not 1", op,
                       nb__shape_str(t->shape, t->ndim, s), (long long)nb_tensor_numel(t));
    }
    return NB_OK;
}

nb_status nb_item(const nb_tensor *t, double *out)
{
    if (out) *out = NAN;
    if (!out) return nb__err(NB_ERR_INVALID_ARG, "item: NULL out");
    NB_TRY(item_check(t, "item"));
    double v;
    nb_scope *s = nb_scope_begin();
    if (!s) return nb_last_status();
    nb_tensor *c = nb_to_dtype(t, NB_FLOAT64);
    nb_status st = c ? nb_tensor_read(c, &v, sizeof v) : nb_last_status();
    nb_scope_end(s);
    if (st == NB_OK) *out = v;
    return st;
}

nb_status nb_item_int64(const nb_tensor *t, int64_t *out)
{
    if (out) *out = 0;
    if (!out) return nb__err(NB_ERR_INVALID_ARG, "item_int64: NULL out");
    NB_TRY(item_check(t, "item_int64"));
    int64_t v;
    nb_scope *s = nb_scope_begin();
    if (!s) return nb_last_status();
    nb_tensor *c = nb_to_dtype(t, NB_INT64);
    nb_status st = c ? nb_tensor_read(c, &v, sizeof v) : nb_last_status();
    nb_scope_end(s);
    if (st == NB_OK) *out = v;
    return st;
}
