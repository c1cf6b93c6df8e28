/* nabla/dist.h: data-parallel training across processes, as torch.distributed (the MPI backend)
 * and torch.nn.parallel.DistributedDataParallel.
 *
 * A job is N processes started together (`mpirun -np N program ...`); each is a rank 0..N-1 of
 * a process group. Each rank holds a replica of the model, reads its own shard of the data
 * (nb_data_loader_params.num_replicas and .rank, as torch's DistributedSampler) and runs the
 * same training step; nb_ddp averages the parameters' gradients across the ranks during
 * backward, so every replica takes the same optimizer step and the replicas stay equal:
 *
 *   nb_process_group *pg = nb_process_group_mpi();
 *   nb_ddp *ddp = nb_ddp_create(pg, net, NULL);      // rank 0's parameters sent to every rank
 *   ... loader params: num_replicas = nb_process_group_size(pg), rank = nb_process_group_rank(pg)
 *   loss = nb_cross_entropy(nb_ddp_forward(ddp, x), y, NULL);
 *   nb_backward(loss, NULL, 0);                      // gradients are the ranks' mean on return
 *   nb_optim_step(opt);
 *
 * Collectives (nb_all_reduce, nb_broadcast, nb_all_gather, nb_barrier) must be called by every
 * rank of the group, in the same order, as in MPI. They check first that the ranks agree on the
 * call (the same collective, dtype and shape, and root): a disagreement is an NB_ERR_COMM error
 * on every rank naming the ranks and the values, instead of the hang or the crash MPI gives. A
 * failure inside MPI is NB_ERR_COMM with MPI's own message. Tensors may be on any device: CUDA
 * tensors go through host memory (the MPI backend is not CUDA-aware).
 *
 * Without MPI (nabla built with -DNABLA_MPI=OFF, or no MPI found), nb_process_group_mpi fails with
 * NB_ERR_UNSUPPORTED. A program started without mpirun is a group of one (MPI's singleton).
 *
 * Thread safety: a group is used from one thread at a time; nb_ddp's reductions run on the thread
 * that runs backward.
 */
#ifndef NABLA_DIST_H
#define NABLA_DIST_H

#include "nabla/module.h"
#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nb_process_group nb_process_group;

/* torch.distributed.ReduceOp. AVG (the sum divided by the group's size) is for floating dtypes. */
typedef enum nb_reduce_op {
    NB_REDUCE_OP_SUM = 0,
    NB_REDUCE_OP_AVG,
    NB_REDUCE_OP_MAX,
    NB_REDUCE_OP_MIN,
    NB_REDUCE_OP_PRODUCT
} nb_reduce_op;

/* Whether nabla was built with MPI. */
NB_API bool nb_dist_mpi_available(void);

/* The group of all the job's processes (MPI_COMM_WORLD, duplicated, so that nabla's messages
 * never meet the program's own). Initialises MPI when the program has not (asking for
 * MPI_THREAD_SERIALIZED), and then finalises it at exit; a program that initialised MPI itself
 * keeps it. Every rank must call it (it is a collective). NULL on failure. */
NB_API nb_process_group *nb_process_group_mpi(void);
/* Releases the group (a collective: every rank frees it). NULL is a no-op. */
NB_API void nb_process_group_free(nb_process_group *pg);
/* Ends every process of the group's job with exit code `code` (MPI_Abort), for a rank that
 * failed where the others would wait for it in their next collective forever (PyTorch bounds
 * that wait with a timeout instead). Returns only when pg is NULL. */
NB_API void nb_process_group_abort(nb_process_group *pg, int code);
/* This process's rank and the number of processes; -1 when pg is NULL. */
NB_API int nb_process_group_rank(const nb_process_group *pg);
NB_API int nb_process_group_size(const nb_process_group *pg);

/* Replaces t's values, on every rank, with op over the ranks' values, element by element
 * (torch.distributed.all_reduce). t is written in place (its version bumps, as an in-place op's),
 * outside autograd: no graph is recorded. Dtypes: float32, float64, int32, int64, uint8 (AVG:
 * float32 and float64 only). */
NB_API nb_status nb_all_reduce(nb_process_group *pg, nb_tensor *t, nb_reduce_op op);
/* Replaces t's values on every rank with rank src's (torch.distributed.broadcast). Any dtype. */
NB_API nb_status nb_broadcast(nb_process_group *pg, nb_tensor *t, int src);
/* A new tensor [size, ...t's shape] on t's device whose row r is rank r's t (torch's
 * all_gather_into_tensor, stacked). Every rank's t must have the same dtype and shape. */
NB_API nb_tensor *nb_all_gather(nb_process_group *pg, const nb_tensor *t);
/* Returns on every rank once every rank has called it. */
NB_API nb_status nb_barrier(nb_process_group *pg);

/* ---- DistributedDataParallel -------------------------------------------------------------- */

typedef struct nb_ddp nb_ddp;

typedef struct nb_ddp_params {
    /* Gradients are reduced in buckets of about this many megabytes (MiB), filled in reverse
     * parameter order (about the order backward makes them): a bucket's reduction starts as soon
     * as its last gradient is ready, while backward goes on. Default 25, as torch's. */
    double bucket_cap_mb;
    /* Rank 0's buffers (batch norm's running statistics) are sent to every rank at each
     * nb_ddp_forward, as torch's broadcast_buffers. Default true. */
    bool broadcast_buffers;
} nb_ddp_params;

NB_API nb_ddp_params nb_ddp_params_default(void);

/* Wraps module m (borrowed: it must outlive the wrapper) for data-parallel training over pg
 * (borrowed too). Make it after moving m to its device (nb_module_to replaces the tensors). A collective: every rank calls it with the same architecture. It checks that
 * the ranks' parameters and buffers agree in number, names, dtypes and shapes (NB_ERR_COMM naming
 * the first that differs), then sends rank 0's parameters and buffers to every rank (torch does
 * the same), so replicas start equal. From then on, each backward that reaches m's parameters
 * ends with every parameter's grad set to the mean over the ranks of their gradients (a
 * parameter a rank's backward did not reach counts as zeros there). Parameters must be on one
 * device, contiguous, and not taken by an optimizer that steps in backward (one owner per
 * parameter). NULL on failure (p NULL: defaults). */
NB_API nb_ddp *nb_ddp_create(nb_process_group *pg, nb_module *m, const nb_ddp_params *p);
/* Detaches the wrapper from the parameters. NULL is a no-op. */
NB_API void nb_ddp_free(nb_ddp *d);
/* nb_module_forward on the wrapped module, after sending rank 0's buffers when
 * broadcast_buffers is set (a collective then). A new reference, or NULL. */
NB_API nb_tensor *nb_ddp_forward(nb_ddp *d, nb_tensor *x);
/* Sends rank 0's buffers to every rank now, in one message (a collective), as nb_ddp_forward
 * does before each forward: call it before evaluating or saving, so that every rank holds the
 * statistics rank 0 would save (each rank's last training forward moved its own). */
NB_API nb_status nb_ddp_broadcast_buffers(nb_ddp *d);
/* sync = false: backward leaves the gradients local (accumulating across backwards), as torch's
 * no_sync() for gradient accumulation; the next backward with sync = true reduces the sums.
 * Default true. */
NB_API nb_status nb_ddp_set_sync(nb_ddp *d, bool sync);
NB_API nb_module *nb_ddp_module(const nb_ddp *d);
/* The number of gradient buckets (for tests and tuning). */
NB_API int nb_ddp_num_buckets(const nb_ddp *d);

#ifdef __cplusplus
}
#endif
#endif
