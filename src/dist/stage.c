/* Host staging for the collectives and DistributedDataParallel (dist_impl.h): MPI moves host
 * memory, so a tensor on another device or in another layout goes through a contiguous CPU
 * copy, and a contiguous CPU tensor is used in place. Built with or without MPI. */
#include <string.h>

#include "dist/dist_impl.h"

bool nb__dist_host_dense(const nb_tensor *t)
{
    return t->storage->device.type == NB_DEVICE_CPU && nb__is_contiguous(t);
}

size_t nb__dist_nbytes(const nb_tensor *t) { return (size_t)nb__numel(t->shape, t->ndim) * nb_dtype_size(t->dtype); }

nb_tensor *nb__dist_host(const nb_tensor *t, bool *direct)
{
    *direct = nb__dist_host_dense(t);
    if (*direct) return nb_tensor_retain((nb_tensor *)t);
    bool prev = nb_set_grad_enabled(false);
    nb_tensor *c = NULL;
    nb_scope *s = nb_scope_begin();
    if (s) {
        nb_tensor *h = nb_to(t, nb_cpu());
        if (h) c = nb_tensor_retain(nb__clone_contiguous(h)); /* a scope-tracked result */
        nb_scope_end(s);
    }
    nb_set_grad_enabled(prev);
    return c;
}

nb_status nb__dist_write_back(nb_tensor *t, nb_tensor *host, bool direct)
{
    if (direct) {
        nb__bump_version(t);
        return NB_OK;
    }
    bool prev = nb_set_grad_enabled(false);
    nb_status st = nb_copy_(t, host);
    nb_set_grad_enabled(prev);
    return st;
}
