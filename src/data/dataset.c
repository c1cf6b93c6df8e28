/* Datasets: the caller's callbacks, and the built-in tensor datasets (from tensors, MNIST-style
 * IDX files, CIFAR-10 batches). */
#include <string.h>
#include <unistd.h>

#include "core/error_impl.h"
#include "core/tensor_impl.h"
#include "nabla/data.h"
#include "nabla/ops.h"

struct nb_dataset {
    nb_dataset_funcs f;
    int64_t n;
};

nb_dataset *nb_dataset_create(const nb_dataset_funcs *funcs)
{
    if (!funcs || !funcs->size || !funcs->get)
        return nb__err_null(NB_ERR_INVALID_ARG, "dataset_create: funcs, size and get must be given");
    if (funcs->sample_ndim < 1 || funcs->sample_ndim > NB_MAX_DIMS)
        return nb__err_null(NB_ERR_INVALID_ARG, "dataset_create: sample_ndim %d (1 to %d)", funcs->sample_ndim, NB_MAX_DIMS);
    for (int i = 0; i < funcs->sample_ndim; i++)
        if (funcs->sample_shape[i] < 1)
            return nb__err_null(NB_ERR_INVALID_ARG, "dataset_create: sample_shape[%d] is %lld", i,
                                (long long)funcs->sample_shape[i]);
    int64_t n = funcs->size(funcs->user);
    if (n < 0) return nb__err_null(NB_ERR_INVALID_ARG, "dataset_create: size() returned %lld", (long long)n);
    nb_dataset *d = calloc(1, sizeof *d);
    if (!d) return nb__err_null(NB_ERR_OOM, "dataset_create: out of memory");
    d->f = *funcs;
    d->n = n;
    return d;
}

void nb_dataset_free(nb_dataset *d)
{
    if (!d) return;
    if (d->f.free) d->f.free(d->f.user);
    free(d);
}

int64_t nb_dataset_size(const nb_dataset *d) { return d ? d->n : 0; }

const int64_t *nb_dataset_sample_shape(const nb_dataset *d, int *ndim)
{
    if (ndim) *ndim = d ? d->f.sample_ndim : 0;
    return d ? d->f.sample_shape : NULL;
}

nb_status nb_dataset_get(nb_dataset *d, int64_t index, float *x, int64_t *y)
{
    if (!d || !x || !y) return nb__err(NB_ERR_INVALID_ARG, "dataset_get: NULL argument");
    if (index < 0 || index >= d->n)
        return nb__err(NB_ERR_INVALID_ARG, "dataset_get: index %lld out of range for a dataset of %lld samples",
                       (long long)index, (long long)d->n);
    return d->f.get(d->f.user, index, x, y);
}

/* ---- tensor datasets -------------------------------------------------------------------- */

typedef struct tensor_ds {
    nb_tensor *x; /* CPU, contiguous, uint8 or float32 */
    nb_tensor *y; /* CPU, contiguous, int64 */
    int64_t n, sample_numel;
} tensor_ds;

static int64_t tds_size(void *user) { return ((tensor_ds *)user)->n; }

static nb_status tds_get(void *user, int64_t i, float *x, int64_t *y)
{
    const tensor_ds *t = user;
    int64_t m = t->sample_numel;
    if (t->x->dtype == NB_UINT8) {
        const uint8_t *src = (const uint8_t *)nb__data(t->x) + i * m;
        for (int64_t k = 0; k < m; k++) x[k] = src[k] * (1.0f / 255.0f);
    } else {
        memcpy(x, (const float *)nb__data(t->x) + i * m, (size_t)m * sizeof(float));
    }
    *y = ((const int64_t *)nb__data(t->y))[i];
    return NB_OK;
}

static void tds_free(void *user)
{
    tensor_ds *t = user;
    nb_tensor_free(t->x);
    nb_tensor_free(t->y);
    free(t);
}

static nb_status check_tensors(const nb_tensor *x, const nb_tensor *y)
{
    char a[NB_SHAPE_STR_MAX], b[NB_SHAPE_STR_MAX];
    if (!x || !y) return nb__err(NB_ERR_INVALID_ARG, "dataset_from_tensors: x and y must be given");
    if (x->ndim < 2 || y->ndim != 1 || x->shape[0] != y->shape[0])
        return nb__err(NB_ERR_SHAPE, "dataset_from_tensors: x %s must be [N, ...] and y %s [N]",
                       nb__shape_str(x->shape, x->ndim, a), nb__shape_str(y->shape, y->ndim, b));
    if (y->dtype != NB_INT64 && y->dtype != NB_INT32 && y->dtype != NB_UINT8)
        return nb__err(NB_ERR_DTYPE, "dataset_from_tensors: labels must be an integer dtype, got %s", nb_dtype_name(y->dtype));
    if (x->dtype == NB_FLOAT16 || x->dtype == NB_BFLOAT16 || x->dtype == NB_BOOL)
        return nb__err(NB_ERR_DTYPE, "dataset_from_tensors: x has dtype %s", nb_dtype_name(x->dtype));
    return NB_OK;
}

nb_dataset *nb_dataset_from_tensors(const nb_tensor *x, const nb_tensor *y)
{
    if (check_tensors(x, y) != NB_OK) return NULL;
    tensor_ds *t = calloc(1, sizeof *t);
    if (!t) return nb__err_null(NB_ERR_OOM, "dataset_from_tensors: out of memory");
    nb_scope *s = nb_scope_begin();
    nb_tensor *xc = nb_to(x, nb_cpu());
    if (xc && xc->dtype != NB_UINT8) xc = nb_to_dtype(xc, NB_FLOAT32);
    xc = xc ? nb_contiguous(xc) : NULL;
    nb_tensor *yc = nb_to(y, nb_cpu());
    yc = yc ? nb_contiguous(nb_to_dtype(yc, NB_INT64)) : NULL;
    if (xc && yc) {
        t->x = nb_tensor_retain(xc);
        t->y = nb_tensor_retain(yc);
    }
    nb_scope_end(s);
    if (!t->x) {
        free(t);
        return NULL;
    }
    t->n = x->shape[0];
    t->sample_numel = nb__numel(x->shape + 1, x->ndim - 1);
    nb_dataset_funcs f = {.size = tds_size, .get = tds_get, .free = tds_free, .user = t, .sample_ndim = x->ndim - 1};
    memcpy(f.sample_shape, x->shape + 1, sizeof(int64_t) * (size_t)(x->ndim - 1));
    nb_dataset *d = nb_dataset_create(&f);
    if (!d) tds_free(t);
    return d;
}

/* ---- MNIST / Fashion-MNIST ---------------------------------------------------------------- */

/* dir/name.gz when it exists, else dir/name. */
static void idx_path(char *out, size_t size, const char *dir, const char *name)
{
    snprintf(out, size, "%s/%s.gz", dir, name);
    if (access(out, F_OK) != 0) snprintf(out, size, "%s/%s", dir, name);
}

static nb_dataset *mnist_from(const nb_tensor *img, const nb_tensor *lab, const char *ip, const char *lp)
{
    char a[NB_SHAPE_STR_MAX];
    if (img->ndim != 3 || img->dtype != NB_UINT8)
        return nb__err_null(NB_ERR_FORMAT, "dataset_mnist: %s: expected uint8 images [N, H, W], got %s %s", ip,
                            nb_dtype_name(img->dtype), nb__shape_str(img->shape, img->ndim, a));
    if (lab->ndim != 1 || lab->dtype != NB_UINT8)
        return nb__err_null(NB_ERR_FORMAT, "dataset_mnist: %s: expected uint8 labels [N], got %s %s", lp,
                            nb_dtype_name(lab->dtype), nb__shape_str(lab->shape, lab->ndim, a));
    if (img->shape[0] != lab->shape[0])
        return nb__err_null(NB_ERR_FORMAT, "dataset_mnist: %s has %lld images but %s has %lld labels", ip,
                            (long long)img->shape[0], lp, (long long)lab->shape[0]);
    int64_t shape[4] = {img->shape[0], 1, img->shape[1], img->shape[2]};
    nb_tensor *x = nb_view(img, shape, 4);
    return x ? nb_dataset_from_tensors(x, lab) : NULL;
}

nb_dataset *nb_dataset_mnist(const char *dir, bool train)
{
    if (!dir) return nb__err_null(NB_ERR_INVALID_ARG, "dataset_mnist: dir is NULL");
    char ip[4096], lp[4096];
    idx_path(ip, sizeof ip, dir, train ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte");
    idx_path(lp, sizeof lp, dir, train ? "train-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte");
    nb_scope *s = nb_scope_begin();
    nb_tensor *img = nb_read_idx(ip);
    nb_tensor *lab = img ? nb_read_idx(lp) : NULL;
    nb_dataset *d = lab ? mnist_from(img, lab, ip, lp) : NULL;
    nb_scope_end(s);
    return d;
}

nb_dataset *nb_dataset_fashion_mnist(const char *dir, bool train) { return nb_dataset_mnist(dir, train); }

/* ---- CIFAR-10 ---------------------------------------------------------------------------- */

nb_dataset *nb_dataset_cifar10(const char *dir, bool train)
{
    if (!dir) return nb__err_null(NB_ERR_INVALID_ARG, "dataset_cifar10: dir is NULL");
    int nfiles = train ? 5 : 1;
    nb_tensor *imgs[5], *labs[5];
    nb_dataset *d = NULL;
    nb_scope *s = nb_scope_begin();
    int i = 0;
    for (; i < nfiles; i++) {
        char path[4096];
        if (train) snprintf(path, sizeof path, "%s/data_batch_%d.bin", dir, i + 1);
        else snprintf(path, sizeof path, "%s/test_batch.bin", dir);
        if (nb_read_cifar10(path, &imgs[i], &labs[i]) != NB_OK) break;
    }
    if (i == nfiles) {
        nb_tensor *x = nfiles == 1 ? imgs[0] : nb_cat(imgs, nfiles, 0);
        nb_tensor *y = nfiles == 1 ? labs[0] : nb_cat(labs, nfiles, 0);
        if (x && y) d = nb_dataset_from_tensors(x, y);
    }
    nb_scope_end(s);
    return d;
}
