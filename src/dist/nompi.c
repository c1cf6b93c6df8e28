/* nabla/dist.h in a build without MPI: no process group can be made, so that programs written
 * for data parallelism compile everywhere and fail with a clear error when asked for one. */
#ifndef NB_HAVE_MPI
#include "dist/dist_impl.h"

#define NOT_BUILT(fn) "%s: this nabla was built without MPI (install libopenmpi-dev, configure with -DNABLA_MPI=ON)", fn

struct nb_process_group {
    int unused;
};

bool nb_dist_mpi_available(void) { return false; }

nb_process_group *nb_process_group_mpi(void)
{
    return nb__err_null(NB_ERR_UNSUPPORTED, NOT_BUILT("process_group_mpi"));
}

void nb_process_group_free(nb_process_group *pg) { (void)pg; /* none can exist */ }
void nb_process_group_abort(nb_process_group *pg, int code) { (void)pg; /* none can exist */ }
int nb_process_group_rank(const nb_process_group *pg) { return -1; }
int nb_process_group_size(const nb_process_group *pg) { return -1; }

nb_status nb_all_reduce(nb_process_group *pg, nb_tensor *t, nb_reduce_op op)
{
    return nb__err(NB_ERR_UNSUPPORTED, NOT_BUILT("all_reduce"));
}

nb_status nb_broadcast(nb_process_group *pg, nb_tensor *t, int src)
{
    return nb__err(NB_ERR_UNSUPPORTED, NOT_BUILT("broadcast"));
}

nb_tensor *nb_all_gather(nb_process_group *pg, const nb_tensor *t)
{
    return nb__err_null(NB_ERR_UNSUPPORTED, NOT_BUILT("all_gather"));
}

nb_status nb_barrier(nb_process_group *pg) { return nb__err(NB_ERR_UNSUPPORTED, NOT_BUILT("barrier")); }

nb_status nb__dist_iallreduce_sum(nb_process_group *pg, void *buf, int64_t n, nb_dtype dt, nb__dist_req **req)
{
    *req = NULL;
    return nb__err(NB_ERR_UNSUPPORTED, NOT_BUILT("ddp"));
}

nb_status nb__dist_test(nb__dist_req *req, bool *done)
{
    *done = true;
    return nb__err(NB_ERR_UNSUPPORTED, NOT_BUILT("ddp"));
}

nb_status nb__dist_wait(nb__dist_req *req) { return req ? nb__err(NB_ERR_UNSUPPORTED, NOT_BUILT("ddp")) : NB_OK; }

nb_status nb__dist_bcast_bytes(nb_process_group *pg, void *buf, size_t nbytes, int src)
{
    return nb__err(NB_ERR_UNSUPPORTED, NOT_BUILT("broadcast"));
}

nb_status nb__dist_allgather_i64(nb_process_group *pg, const int64_t *in, int64_t n, int64_t *out)
{
    return nb__err(NB_ERR_UNSUPPORTED, NOT_BUILT("ddp"));
}
#endif
