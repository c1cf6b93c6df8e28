/* Ops along one dim: softmax, log_softmax and cumsum. */
#include "autograd/autograd_impl.h"

static nb_tensor *softmax_like(nb_op op, const char *name, const nb_tensor *t, int64_t dim)
{
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "%s: NULL tensor", name);
    if (!nb_dtype_is_floating(t->dtype))
        return nb__err_null(NB_ERR_DTYPE, "%s: input dtype must be floating point, got %s (convert it first)", name,
                            nb_dtype_name(t->dtype));
    int64_t d;
    if (nb__wrap_dim(name, dim, t->ndim, &d) != NB_OK) return NULL;
    nb_tensor *out = nb__tensor_new_as(name, t->shape, t->ndim, t->dtype, t->storage->device, &t, 1);
    if (!out) return NULL;
    nb_kargs a = {.out = out, .in = {t}, .i0 = d};
    nb_status st = nb__dispatch(op, &a);
    if (st == NB_OK) {
        const nb_tensor *save = out;
        nb_node *node = nb__record(op, out, &t, 1, &save, 1, &st);
        if (node) node->i0 = d;
    }
    if (st != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return nb__track(out);
}

nb_tensor *nb_softmax(const nb_tensor *t, int64_t dim) { return softmax_like(NB_OP_SOFTMAX, "softmax", t, dim); }

nb_tensor *nb_log_softmax(const nb_tensor *t, int64_t dim)
{
    return softmax_like(NB_OP_LOG_SOFTMAX, "log_softmax", t, dim);
}

/* Integer and bool inputs give int64, as PyTorch. */
nb_tensor *nb_cumsum(const nb_tensor *t, int64_t dim)
{
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "cumsum: NULL tensor");
    int64_t d;
    if (nb__wrap_dim("cumsum", dim, t->ndim, &d) != NB_OK) return NULL;
    nb_dtype odt = nb_dtype_is_floating(t->dtype) ? t->dtype : NB_INT64;
    nb_tensor *out = nb__tensor_new(t->shape, t->ndim, odt, t->storage->device);
    if (!out) return NULL;
    nb_kargs a = {.out = out, .in = {t}, .i0 = d};
    nb_status st = nb__dispatch(NB_OP_CUMSUM, &a);
    if (st == NB_OK) {
        nb_node *node = nb__record(NB_OP_CUMSUM, out, &t, 1, NULL, 0, &st);
        if (node) node->i0 = d;
    }
    if (st != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return nb__track(out);
}
