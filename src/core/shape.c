/* Geometry helpers: numel, strides, dims, broadcasting, and the device check of op inputs. */
#include <stdio.h>
#include <string.h>

#include "core/tensor_impl.h"

int64_t nb__numel(const int64_t *shape, int ndim)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

void nb__contiguous_strides(const int64_t *shape, int ndim, int64_t *strides)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i] > 1 ? shape[i] : 1;
    }
}

bool nb__is_contiguous(const nb_tensor *t)
{
    if (nb__numel(t->shape, t->ndim) == 0) return true; /* as PyTorch: nothing to lay out */
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] == 1) continue;
        if (t->strides[i] != s) return false;
        s *= t->shape[i];
    }
    return true;
}

void nb__channels_last_strides(const int64_t *shape, int64_t *strides)
{
    static const int order[4] = {1, 3, 2, 0}; /* innermost first: C, W, H, N */
    int64_t s = 1;
    for (int k = 0; k < 4; k++) {
        strides[order[k]] = s;
        s *= shape[order[k]] > 1 ? shape[order[k]] : 1;
    }
}

bool nb__is_dense_channels_last(const nb_tensor *t)
{
    if (t->ndim != 4) return false;
    if (nb__numel(t->shape, 4) == 0) return true;
    int64_t want[4];
    nb__channels_last_strides(t->shape, want);
    for (int i = 0; i < 4; i++)
        if (t->shape[i] != 1 && t->strides[i] != want[i]) return false;
    return true;
}

/* A tensor dense in both layouts (one channel, or a 1x1 plane) is channels-last when its strides,
 * those of the size-1 dims too, are exactly the channels-last ones and not the row-major ones:
 * PyTorch's suggest_memory_format reads such strides the same way. */
bool nb__is_channels_last(const nb_tensor *t)
{
    if (!nb__is_dense_channels_last(t)) return false;
    if (!nb__is_contiguous(t)) return true;
    int64_t cl[4], rm[4];
    nb__channels_last_strides(t->shape, cl);
    nb__contiguous_strides(t->shape, 4, rm);
    return !memcmp(cl, t->strides, sizeof cl) && memcmp(rm, t->strides, sizeof rm);
}

bool nb__keeps_channels_last(const nb_tensor *t)
{
    return t->storage->device.type == NB_DEVICE_CPU && nb__is_channels_last(t);
}

nb_status nb__wrap_dim(const char *op, int64_t dim, int ndim, int64_t *out)
{
    int64_t n = ndim > 0 ? ndim : 1;
    if (dim < -n || dim >= n)
        return nb__err(NB_ERR_INVALID_ARG, "%s: dim %lld out of range for a tensor of %d dims", op,
                       (long long)dim, ndim);
    *out = dim < 0 ? dim + n : dim;
    return NB_OK;
}

const char *nb__shape_str(const int64_t *shape, int ndim, char *buf)
{
    size_t pos = 0;
    buf[pos++] = '[';
    for (int i = 0; i < ndim && pos < NB_SHAPE_STR_MAX - 24; i++)
        pos += (size_t)snprintf(buf + pos, NB_SHAPE_STR_MAX - pos, i ? ", %lld" : "%lld",
                                (long long)shape[i]);
    snprintf(buf + pos, NB_SHAPE_STR_MAX - pos, "]");
    return buf;
}

nb_status nb__broadcast_shapes(const char *op, const int64_t *a, int na, const int64_t *b, int nb,
                               int64_t *out, int *nout)
{
    int n = na > nb ? na : nb;
    int64_t res[NB_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        int ia = i - (n - na), ib = i - (n - nb);
        int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            char sa[NB_SHAPE_STR_MAX], sb[NB_SHAPE_STR_MAX];
            return nb__err(NB_ERR_SHAPE,
                           "%s: shapes %s and %s cannot be broadcast (dim %d: %lld vs %lld)", op,
                           nb__shape_str(a, na, sa), nb__shape_str(b, nb, sb), i, (long long)da,
                           (long long)db);
        }
        res[i] = da == 1 ? db : da;
    }
    memcpy(out, res, (size_t)n * sizeof *res);
    *nout = n;
    return NB_OK;
}

void nb__broadcast_strides(const nb_tensor *t, const int64_t *shape, int ndim, int64_t *strides)
{
    int off = ndim - t->ndim;
    for (int i = 0; i < ndim; i++) {
        int it = i - off;
        strides[i] = (it < 0 || (t->shape[it] == 1 && shape[i] != 1)) ? 0 : t->strides[it];
    }
}

nb_status nb__check_inputs(const char *op, const nb_tensor *const *ts, int n)
{
    for (int i = 0; i < n; i++)
        if (!ts[i]) return nb__err(NB_ERR_INVALID_ARG, "%s: tensor argument %d is NULL", op, i);
    for (int i = 1; i < n; i++) {
        if (!nb_device_equal(ts[i]->storage->device, ts[0]->storage->device)) {
            char d0[48], d1[48];
            nb_device_str(ts[0]->storage->device, d0, sizeof d0);
            nb_device_str(ts[i]->storage->device, d1, sizeof d1);
            return nb__err(NB_ERR_DEVICE,
                           "%s: expected all tensors on one device, but found %s (argument 0) and %s "
                           "(argument %d)",
                           op, d0, d1, i);
        }
    }
    return NB_OK;
}
