/* tools/train_dist.c: data-parallel `nabla train` under mpiexec, as torchrun with
 * DistributedDataParallel: --dist auto|mpi|off, the thread count per process, the ranks' agreement
 * on failures met before training, sums across ranks, and the evaluation of a test set sharded
 * across the ranks. The training loop itself is cmd_train.c's, with nb_ddp_forward. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_impl.h"

int cli_rank = -1;

static int env_int(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : -1;
}

/* Whether a launcher started this process as one of several: Open MPI's mpiexec sets
 * OMPI_COMM_WORLD_SIZE, MPICH's (Hydra) and Slurm's PMI set PMI_SIZE; a PMIx launcher that sets
 * no size (PMIX_RANK alone) counts as a launch too, and MPI then says how many there are. */
static bool launched_by_mpi(void)
{
    int n = env_int("OMPI_COMM_WORLD_SIZE");
    if (n < 0) n = env_int("PMI_SIZE");
    if (n < 0 && getenv("PMIX_RANK")) return true;
    return n > 1;
}

/* Without --threads (nor NABLA_NUM_THREADS or OMP_NUM_THREADS, which nabla already obeys), the
 * cores are split between the ranks on this machine: OMPI_COMM_WORLD_LOCAL_SIZE (Open MPI) or
 * MPI_LOCALNRANKS (MPICH), else all the group's ranks are taken to be local. */
static int default_threads(const cli_opts *o, int size)
{
    if (o->threads > 0 || getenv("NABLA_NUM_THREADS") || getenv("OMP_NUM_THREADS")) return CLI_OK;
    int local = env_int("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (local < 1) local = env_int("MPI_LOCALNRANKS");
    if (local < 1) local = size;
    int n = nb_get_num_threads() / local;
    if (nb_set_num_threads(n > 1 ? n : 1) != NB_OK) return cli_fail_nb(CLI_RUNTIME, "train");
    return CLI_OK;
}

int cli_dist_init(const cli_opts *o, nb_process_group **pg)
{
    *pg = NULL;
    const char *mode = o->dist ? o->dist : "auto";
    bool mpi = !strcmp(mode, "mpi");
    if (!mpi && strcmp(mode, "auto") != 0 && strcmp(mode, "off") != 0)
        return cli_fail(CLI_USAGE, "train: unknown --dist \"%s\" (expected auto, mpi or off)", mode);
    if (!strcmp(mode, "auto") && launched_by_mpi()) {
        if (nb_dist_mpi_available()) mpi = true;
        else if (env_int("OMPI_COMM_WORLD_RANK") <= 0 && env_int("PMI_RANK") <= 0)
            fprintf(stderr, "nabla: warning: train: started by an MPI launcher, but nabla was built without MPI: "
                            "every process trains alone\n");
    }
    if (!mpi) return CLI_OK;
    if (!nb_dist_mpi_available())
        return cli_fail(CLI_USAGE, "train: --dist mpi: nabla was built without MPI (configure with -DNABLA_MPI=ON "
                                   "and an MPI installed, e.g. libopenmpi-dev)");
    if (!(*pg = nb_process_group_mpi())) return cli_fail_nb(CLI_RUNTIME, "train: --dist mpi");
    int size = nb_process_group_size(*pg);
    if (size > 1) cli_rank = nb_process_group_rank(*pg);
    return size > 1 ? default_threads(o, size) : CLI_OK;
}

/* v[0..n) (dtype float64 or int64) replaced by their sums over the ranks. */
static nb_status all_sum(nb_process_group *pg, void *v, int n, nb_dtype dtype)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = dtype;
    nb_tensor *t = nb_tensor_from_data(v, (int64_t[]){n}, 1, &p);
    nb_status st = t ? nb_all_reduce(pg, t, NB_REDUCE_OP_SUM) : nb_last_status();
    size_t esize = dtype == NB_FLOAT64 ? sizeof(double) : sizeof(int64_t);
    if (st == NB_OK) memcpy(v, nb_tensor_data_ptr(t), (size_t)n * esize);
    nb_scope_end(s);
    return st;
}

nb_status cli_dist_sum(nb_process_group *pg, double *v, int n)
{
    return pg ? all_sum(pg, v, n, NB_FLOAT64) : NB_OK;
}

int cli_dist_agree(nb_process_group *pg, int rc)
{
    if (!pg || nb_process_group_size(pg) < 2) return rc;
    int64_t v[CLI_USAGE + 1] = {0}; /* how many ranks ended with each code */
    v[rc >= 0 && rc <= CLI_USAGE ? rc : CLI_RUNTIME] = 1;
    if (all_sum(pg, v, CLI_USAGE + 1, NB_INT64) != NB_OK) return cli_fail_nb(CLI_RUNTIME, "train");
    if (rc != CLI_OK || v[CLI_OK] == nb_process_group_size(pg)) return rc;
    int worst = v[CLI_USAGE] > 0 ? CLI_USAGE : CLI_RUNTIME;
    if (nb_process_group_rank(pg) == 0)
        return cli_fail(worst, "train: %lld other rank(s) failed (their errors are above)",
                        (long long)(v[CLI_RUNTIME] + v[CLI_USAGE]));
    return worst;
}

int cli_dist_fail(nb_process_group *pg, int rc)
{
    if (pg && nb_process_group_size(pg) > 1) nb_process_group_abort(pg, rc);
    return rc;
}

/* ---- the test set's shard of one rank: global samples r, r + R, r + 2R, ... below N ---- */

typedef struct shard {
    nb_dataset *inner; /* borrowed */
    int64_t n;
    int rank, size;
} shard;

static int64_t shard_size(void *u) { return ((shard *)u)->n; }

static nb_status shard_get(void *u, int64_t i, float *x, int64_t *y)
{
    shard *s = u;
    return nb_dataset_get(s->inner, i * s->size + s->rank, x, y);
}

/* Each rank evaluates its shard with cli_evaluate; the loss sums, correct counts and sample
 * counts are summed over the ranks. Unlike the training loader's DistributedSampler, the shards
 * are not padded to equal sizes, so every test sample counts exactly once: the numbers are those
 * of one process evaluating the whole set (up to the order of the loss's sum). */
nb_status cli_dist_evaluate(nb_process_group *pg, nb_ddp *ddp, nb_module *m, nb_dataset *d, const cli_opts *o,
                            nb_device dev, double *loss, double *acc)
{
    int R = pg ? nb_process_group_size(pg) : 1, r = pg ? nb_process_group_rank(pg) : 0;
    if (R < 2) return cli_evaluate(m, d, o, dev, loss, acc);
    nb_status st = nb_ddp_broadcast_buffers(ddp); /* batch norm's statistics: rank 0's, as saved */
    int64_t N = nb_dataset_size(d), counts[2] = {0, 0};
    shard u = {d, N > r ? (N - r + R - 1) / R : 0, r, R}; /* outlives the dataset made over it */
    nb_dataset_funcs f = {.size = shard_size, .get = shard_get, .user = &u};
    const int64_t *shape = nb_dataset_sample_shape(d, &f.sample_ndim);
    memcpy(f.sample_shape, shape, (size_t)f.sample_ndim * sizeof *shape);
    double sum = 0, l = 0, a = 0;
    if (st == NB_OK && u.n > 0) {
        nb_dataset *sd = nb_dataset_create(&f);
        if (!sd) st = nb_last_status();
        else if ((st = cli_evaluate(m, sd, o, dev, &l, &a)) == NB_OK) {
            sum = l * (double)u.n;
            counts[0] = llround(a * (double)u.n);
            counts[1] = u.n;
        }
        nb_dataset_free(sd);
    }
    /* every rank takes part in the sums, also after a failure of its own, so none waits alone */
    nb_status st2 = all_sum(pg, &sum, 1, NB_FLOAT64);
    if (st2 == NB_OK) st2 = all_sum(pg, counts, 2, NB_INT64);
    *loss = counts[1] ? sum / (double)counts[1] : 0;
    *acc = counts[1] ? (double)counts[0] / (double)counts[1] : 0;
    return st != NB_OK ? st : st2;
}
