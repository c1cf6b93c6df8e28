/* Creating tensors: from host data, filled, ranges, identity. */
#include <math.h>
#include <string.h>

#include "autograd/autograd_impl.h"

nb_tensor_params nb_tensor_params_default(void)
{
    return (nb_tensor_params){.dtype = NB_FLOAT32, .device = {NB_DEVICE_CPU, 0}, .requires_grad = false, .generator = NULL};
}

static nb_tensor_params params_or_default(const nb_tensor_params *p)
{
    return p ? *p : nb_tensor_params_default();
}

/* Finishes a new tensor: requires_grad when asked, then into the scope. */
static nb_tensor *finish(nb_tensor *t, const nb_tensor_params *p, const char *op)
{
    if (t && p->requires_grad) {
        if (!nb_dtype_is_floating(t->dtype)) {
            nb__release(t);
            return nb__err_null(NB_ERR_DTYPE, "%s: only floating tensors can require grad, not %s", op,
                                nb_dtype_name(p->dtype));
        }
        t->requires_grad = true;
    }
    return nb__track(t);
}

nb_tensor *nb_tensor_from_data(const void *data, const int64_t *shape, int ndim, const nb_tensor_params *pp)
{
    nb_tensor_params p = params_or_default(pp);
    nb_tensor *t = nb__tensor_new_named("tensor_from_data", shape, ndim, p.dtype, p.device);
    if (!t) return NULL;
    size_t nbytes = t->storage->nbytes;
    if (nbytes && !data) {
        nb__release(t);
        return nb__err_null(NB_ERR_INVALID_ARG, "tensor_from_data: NULL data for %zu bytes", nbytes);
    }
    if (nbytes) {
        const nb_backend *be = nb__backend(p.device);
        nb_status st = be->copy_from_host(p.device.index, t->storage->data, data, nbytes);
        if (st != NB_OK) {
            nb__release(t);
            return NULL;
        }
    }
    return finish(t, &p, "tensor_from_data");
}

nb_tensor *nb_empty(const int64_t *shape, int ndim, const nb_tensor_params *pp)
{
    nb_tensor_params p = params_or_default(pp);
    return finish(nb__tensor_new(shape, ndim, p.dtype, p.device), &p, "empty");
}

static nb_tensor *filled(const int64_t *shape, int ndim, double value, const nb_tensor_params *pp, const char *op)
{
    nb_tensor_params p = params_or_default(pp);
    nb_tensor *t = nb__tensor_new_named(op, shape, ndim, p.dtype, p.device);
    if (!t) return NULL;
    nb_kargs a = {.out = t, .s0 = value};
    if (nb__dispatch(NB_OP_FILL, &a) != NB_OK) {
        nb__release(t);
        return NULL;
    }
    return finish(t, &p, op);
}

nb_tensor *nb_zeros(const int64_t *shape, int ndim, const nb_tensor_params *p) { return filled(shape, ndim, 0, p, "zeros"); }
nb_tensor *nb_ones(const int64_t *shape, int ndim, const nb_tensor_params *p) { return filled(shape, ndim, 1, p, "ones"); }
nb_tensor *nb_full(const int64_t *shape, int ndim, double v, const nb_tensor_params *p) { return filled(shape, ndim, v, p, "full"); }
nb_tensor *nb_scalar_tensor(double v, const nb_tensor_params *p) { return filled(NULL, 0, v, p, "scalar_tensor"); }

static nb_tensor_params like(const nb_tensor *t)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = t->dtype;
    p.device = t->storage->device;
    return p;
}

#define LIKE_CHECK(t, op)                                                                        \
    if (!(t)) return nb__err_null(NB_ERR_INVALID_ARG, op ": NULL tensor")

nb_tensor *nb_empty_like(const nb_tensor *t) { LIKE_CHECK(t, "empty_like"); nb_tensor_params p = like(t); return nb_empty(t->shape, t->ndim, &p); }
nb_tensor *nb_zeros_like(const nb_tensor *t) { LIKE_CHECK(t, "zeros_like"); nb_tensor_params p = like(t); return nb_zeros(t->shape, t->ndim, &p); }
nb_tensor *nb_ones_like(const nb_tensor *t) { LIKE_CHECK(t, "ones_like"); nb_tensor_params p = like(t); return nb_ones(t->shape, t->ndim, &p); }
nb_tensor *nb_full_like(const nb_tensor *t, double v) { LIKE_CHECK(t, "full_like"); nb_tensor_params p = like(t); return nb_full(t->shape, t->ndim, v, &p); }

/* Computes values on the host in float64 and converts them on the way to the device. */
static nb_tensor *from_f64(const double *v, int64_t n, const nb_tensor_params *pp, const char *op)
{
    nb_tensor_params p = params_or_default(pp);
    nb_tensor_params host = nb_tensor_params_default();
    host.dtype = NB_FLOAT64;
    nb_tensor *h = nb__tensor_new(&n, 1, NB_FLOAT64, host.device);
    if (!h) return NULL;
    if (n) memcpy(h->storage->data, v, (size_t)n * sizeof *v);
    nb_tensor *t = nb__tensor_new(&n, 1, p.dtype, p.device);
    if (!t) {
        nb__release(h);
        return NULL;
    }
    nb_status st = nb_copy_(t, h);
    nb__release(h);
    if (st != NB_OK) {
        nb__release(t);
        return NULL;
    }
    return finish(t, &p, op);
}

nb_tensor *nb_arange(double start, double end, double step, const nb_tensor_params *p)
{
    if (step == 0 || !isfinite(start) || !isfinite(end) || !isfinite(step))
        return nb__err_null(NB_ERR_INVALID_ARG, "arange: bad range start=%g end=%g step=%g", start, end, step);
    if ((step > 0 && end < start) || (step < 0 && end > start))
        return nb__err_null(NB_ERR_INVALID_ARG, "arange: step %g goes away from end (start=%g end=%g)", step, start, end);
    double len = ceil((end - start) / step);
    if (len > 1e12) return nb__err_null(NB_ERR_OOM, "arange: %g elements is too many", len);
    int64_t n = (int64_t)len;
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) return nb__err_null(NB_ERR_OOM, "arange: out of memory for %lld elements", (long long)n);
    for (int64_t i = 0; i < n; i++) v[i] = start + (double)i * step;
    nb_tensor *t = from_f64(v, n, p, "arange");
    free(v);
    return t;
}

nb_tensor *nb_linspace(double start, double end, int64_t steps, const nb_tensor_params *p)
{
    if (steps < 0 || steps > ((int64_t)1 << 40))
        return nb__err_null(NB_ERR_INVALID_ARG, "linspace: steps %lld must be >= 0", (long long)steps);
    double *v = malloc((size_t)(steps ? steps : 1) * sizeof *v);
    if (!v) return nb__err_null(NB_ERR_OOM, "linspace: out of memory");
    double step = steps > 1 ? (end - start) / (double)(steps - 1) : 0;
    /* PyTorch fills the two halves from each end, so the last value is exactly `end`. */
    int64_t half = steps / 2;
    for (int64_t i = 0; i < steps; i++)
        v[i] = i < half ? start + step * (double)i : end - step * (double)(steps - i - 1);
    nb_tensor *t = from_f64(v, steps, p, "linspace");
    free(v);
    return t;
}

nb_tensor *nb_eye(int64_t n, int64_t m, const nb_tensor_params *pp)
{
    if (m < 0) m = n;
    if (n < 0) return nb__err_null(NB_ERR_INVALID_ARG, "eye: n = %lld must be >= 0", (long long)n);
    nb_tensor_params p = params_or_default(pp);
    bool rg = p.requires_grad;
    p.requires_grad = false;
    int64_t shape[2] = {n, m};
    nb_tensor *z = nb_zeros(shape, 2, &p);
    if (!z) return NULL;
    int64_t k = n < m ? n : m;
    int64_t st[1] = {m + 1};
    nb_tensor *diag = nb__tensor_alias(z, &k, st, 1, 0);
    if (!diag) return NULL;
    nb_kargs a = {.out = diag, .s0 = 1};
    nb_status s = nb__dispatch(NB_OP_FILL, &a);
    nb__release(diag);
    if (s != NB_OK) return NULL;
    if (rg) {
        p.requires_grad = true;
        return nb_tensor_set_requires_grad(z, true) == NB_OK ? z : NULL;
    }
    return z;
}
