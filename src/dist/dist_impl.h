/* Internal: the process group's raw collectives, for nb_ddp (src/dist/ddp.c). They move bytes or
 * typed elements between host buffers and do not check that the ranks agree: their callers check
 * once (nb__dist_agree) and then keep every rank on the same sequence of calls.
 * src/dist/mpi.c implements them with MPI; src/dist/nompi.c, when nabla is built without MPI,
 * fails each with NB_ERR_UNSUPPORTED (no group can be made there, so none is reached). */
#ifndef NB_DIST_IMPL_H
#define NB_DIST_IMPL_H

#include "core/error_impl.h"
#include "core/tensor_impl.h"
#include "nabla/dist.h"

/* ---- host staging (src/dist/stage.c) ---- */

/* Whether t is a contiguous CPU tensor, which MPI reads and writes in place. */
bool nb__dist_host_dense(const nb_tensor *t);
size_t nb__dist_nbytes(const nb_tensor *t);
/* A contiguous CPU tensor holding t's values (caller-owned): t itself when it is one (*direct),
 * else a copy made outside autograd. NULL with the error set on failure. */
nb_tensor *nb__dist_host(const nb_tensor *t, bool *direct);
/* After host was changed: writes it back into t outside autograd (nb_copy_), or, when host is t
 * itself (direct), bumps t's version as an in-place op does. */
nb_status nb__dist_write_back(nb_tensor *t, nb_tensor *host, bool direct);

/* ---- raw collectives (src/dist/mpi.c) ---- */

/* A reduction in flight. */
typedef struct nb__dist_req nb__dist_req;

/* Starts the in-place sum over the ranks of n elements of dtype dt at buf (host memory, left
 * alone until the request completes). *req is set (NULL on failure). */
nb_status nb__dist_iallreduce_sum(nb_process_group *pg, void *buf, int64_t n, nb_dtype dt, nb__dist_req **req);
/* Moves a request on without blocking (MPI progresses only inside its calls); *done tells
 * whether it completed. */
nb_status nb__dist_test(nb__dist_req *req, bool *done);
/* Waits for the request and frees it (NULL is a no-op returning NB_OK). */
nb_status nb__dist_wait(nb__dist_req *req);
/* Rank src's nbytes at buf replace every other rank's. */
nb_status nb__dist_bcast_bytes(nb_process_group *pg, void *buf, size_t nbytes, int src);
/* Every rank gives n int64 values; out (size * n values) receives rank r's at out + r * n. */
nb_status nb__dist_allgather_i64(nb_process_group *pg, const int64_t *in, int64_t n, int64_t *out);

#endif
