/* Dispatch: op names and the call through a device's kernel table. */
#include "core/dispatch_impl.h"
#include "core/profiler_impl.h"

static const char *const op_names[NB_OP_COUNT] = {
#define X(id, name, family) name,
#include "core/ops.def"
#undef X
};

const char *nb__op_name(nb_op op) { return (unsigned)op < NB_OP_COUNT ? op_names[op] : "?"; }

nb_status nb__dispatch(nb_op op, const nb_kargs *a)
{
    const nb_tensor *t = a->out ? a->out : a->in[0];
    NB_ASSERT(t != NULL);
    nb_device d = t->storage->device;
    const nb_backend *be = nb__backend(d);
    if (!be) return nb_last_status();
    nb_kernel_fn k = be->kernels[op];
    if (!k) {
        char dn[48];
        nb_device_str(d, dn, sizeof dn);
        return nb__err(NB_ERR_UNSUPPORTED, "%s: no kernel for device %s", nb__op_name(op), dn);
    }
    int64_t t0 = nb__prof_begin();
    nb_status st = k(op, a);
    nb__prof_end((int)op, t0, d);
    return st;
}
