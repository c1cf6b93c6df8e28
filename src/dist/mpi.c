/* The process group on MPI: nabla/dist.h's collectives and dist_impl.h's raw ones.
 *
 * Every public collective first all-gathers a small description of the call from every rank (the
 * collective, the rank's own argument check, dtype, shape, op or root) and compares them, so that
 * ranks that disagree, or a rank whose arguments are bad, make every rank fail with the same
 * error instead of leaving the others waiting in MPI forever (or MPI reading past a buffer). */
#ifdef NB_HAVE_MPI
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist_impl.h"

struct nb_process_group {
    MPI_Comm comm;
    int rank, size;
};

struct nb__dist_req {
    MPI_Request req;
};

/* MPI's count arguments are ints: larger buffers go in pieces of this many elements. */
#define CHUNK ((int64_t)1 << 30)

bool nb_dist_mpi_available(void) { return true; }

static nb_status mpi_err(const char *op, const char *call, int rc)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error code %d", rc);
    return nb__err(NB_ERR_COMM, "%s: %s failed: %s", op, call, msg);
}

#define MPI_TRY(op, call)                                                                        \
    do {                                                                                         \
        int nb__rc = (call);                                                                     \
        if (nb__rc != MPI_SUCCESS) return mpi_err(op, #call, nb__rc);                            \
    } while (0)

/* ---- initialisation ------------------------------------------------------------------------ */

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

/* MPI initialised by nabla is finalised by nabla, at exit (it cannot be initialised twice). */
static void finalize_at_exit(void)
{
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
}

static nb_status ensure_init(void)
{
    pthread_mutex_lock(&init_lock);
    int inited = 0, finalized = 0, rc = MPI_SUCCESS;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited && !finalized) {
        int provided = 0;
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc == MPI_SUCCESS) atexit(finalize_at_exit);
    }
    pthread_mutex_unlock(&init_lock);
    if (finalized) return nb__err(NB_ERR_COMM, "process_group_mpi: MPI has already been finalized");
    if (rc != MPI_SUCCESS) return mpi_err("process_group_mpi", "MPI_Init_thread", rc);
    return NB_OK;
}

nb_process_group *nb_process_group_mpi(void)
{
    if (ensure_init() != NB_OK) return NULL;
    nb_process_group *pg = calloc(1, sizeof *pg);
    if (!pg) return nb__err_null(NB_ERR_OOM, "process_group_mpi: out of memory");
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &pg->comm);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(pg->comm, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(pg->comm, &pg->rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(pg->comm, &pg->size);
    if (rc != MPI_SUCCESS) {
        mpi_err("process_group_mpi", "MPI_Comm_dup", rc);
        free(pg);
        return NULL;
    }
    return pg;
}

void nb_process_group_free(nb_process_group *pg)
{
    if (!pg) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&pg->comm);
    free(pg);
}

void nb_process_group_abort(nb_process_group *pg, int code)
{
    if (!pg) return;
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(pg->comm, code);
    abort(); /* MPI_Abort does not return; if an implementation did, the caller still must not */
}

int nb_process_group_rank(const nb_process_group *pg) { return pg ? pg->rank : -1; }
int nb_process_group_size(const nb_process_group *pg) { return pg ? pg->size : -1; }

/* ---- agreement ----------------------------------------------------------------------------- */

enum { D_KIND, D_STATUS, D_ARG, D_DTYPE, D_NDIM, D_SHAPE, D_LEN = D_SHAPE + NB_MAX_DIMS };
enum { K_ALL_REDUCE = 1, K_BROADCAST, K_ALL_GATHER, K_BARRIER };

static const char *op_name(int64_t op)
{
    static const char *names[] = {"sum", "avg", "max", "min", "product"};
    return op >= 0 && op < 5 ? names[op] : "?";
}

static void describe(const int64_t *d, char *buf, size_t size)
{
    static const char *kinds[] = {"?", "all_reduce", "broadcast", "all_gather", "barrier"};
    const char *kind = d[D_KIND] >= 1 && d[D_KIND] <= 4 ? kinds[d[D_KIND]] : "?";
    if (d[D_KIND] == K_BARRIER) {
        snprintf(buf, size, "barrier");
        return;
    }
    char shape[NB_SHAPE_STR_MAX];
    int nd = d[D_NDIM] >= 0 && d[D_NDIM] <= NB_MAX_DIMS ? (int)d[D_NDIM] : 0;
    nb__shape_str(d + D_SHAPE, nd, shape);
    const char *dt = nb_dtype_name((nb_dtype)d[D_DTYPE]);
    if (d[D_KIND] == K_ALL_REDUCE)
        snprintf(buf, size, "%s of %s %s (op %s)", kind, dt, shape, op_name(d[D_ARG]));
    else if (d[D_KIND] == K_BROADCAST)
        snprintf(buf, size, "%s of %s %s from rank %lld", kind, dt, shape, (long long)d[D_ARG]);
    else
        snprintf(buf, size, "%s of %s %s", kind, dt, shape);
}

/* Gathers every rank's description d of this call and compares them. local is this rank's own
 * argument check (its error already set when not NB_OK). All ranks return the same outcome. */
static nb_status agree(nb_process_group *pg, const char *op, int64_t *d, nb_status local)
{
    d[D_STATUS] = local;
    int64_t *all = malloc((size_t)pg->size * D_LEN * sizeof *all);
    if (!all) return nb__err(NB_ERR_OOM, "%s: out of memory", op);
    int rc = MPI_Allgather(d, D_LEN, MPI_INT64_T, all, D_LEN, MPI_INT64_T, pg->comm);
    if (rc != MPI_SUCCESS) {
        free(all);
        return mpi_err(op, "MPI_Allgather", rc);
    }
    nb_status st = local; /* a rank whose own check failed reports its own error */
    for (int r = 0; r < pg->size && st == NB_OK; r++) {
        const int64_t *o = all + (size_t)r * D_LEN;
        if (o[D_STATUS] != NB_OK) {
            st = nb__err(NB_ERR_COMM, "%s: rank %d failed its own argument check (%s), so every rank fails", op, r,
                         nb_status_name((nb_status)o[D_STATUS]));
        } else if (memcmp(o, all, D_LEN * sizeof *o) != 0) {
            char a[NB_SHAPE_STR_MAX + 64], b[NB_SHAPE_STR_MAX + 64];
            describe(all, a, sizeof a);
            describe(o, b, sizeof b);
            st = nb__err(NB_ERR_COMM, "%s: the ranks disagree: rank 0 calls %s, rank %d calls %s", op, a, r, b);
        }
    }
    free(all);
    return st;
}

static void describe_tensor(int64_t *d, int kind, int64_t arg, const nb_tensor *t)
{
    memset(d, 0, D_LEN * sizeof *d);
    d[D_KIND] = kind;
    d[D_ARG] = arg;
    if (!t) return;
    d[D_DTYPE] = t->dtype;
    d[D_NDIM] = t->ndim;
    memcpy(d + D_SHAPE, t->shape, (size_t)t->ndim * sizeof *t->shape);
}

static MPI_Datatype mpi_type(nb_dtype dt)
{
    switch (dt) {
    case NB_FLOAT32: return MPI_FLOAT;
    case NB_FLOAT64: return MPI_DOUBLE;
    case NB_INT32: return MPI_INT32_T;
    case NB_INT64: return MPI_INT64_T;
    case NB_UINT8: return MPI_UINT8_T;
    default: return MPI_DATATYPE_NULL;
    }
}

static MPI_Op mpi_op(nb_reduce_op op)
{
    switch (op) {
    case NB_REDUCE_OP_MAX: return MPI_MAX;
    case NB_REDUCE_OP_MIN: return MPI_MIN;
    case NB_REDUCE_OP_PRODUCT: return MPI_PROD;
    default: return MPI_SUM;
    }
}

static nb_status allreduce_host(nb_process_group *pg, const char *op, void *buf, int64_t n, nb_dtype dt,
                                MPI_Op mop)
{
    size_t es = nb_dtype_size(dt);
    for (int64_t i = 0; i < n; i += CHUNK) {
        int cnt = (int)(n - i < CHUNK ? n - i : CHUNK);
        MPI_TRY(op, MPI_Allreduce(MPI_IN_PLACE, (char *)buf + (size_t)i * es, cnt, mpi_type(dt), mop, pg->comm));
    }
    return NB_OK;
}

/* ---- public collectives ------------------------------------------------------------------------ */

static nb_status check_reduce(const nb_tensor *t, nb_reduce_op op)
{
    if (!t) return nb__err(NB_ERR_INVALID_ARG, "all_reduce: tensor is NULL");
    if ((int)op < 0 || op > NB_REDUCE_OP_PRODUCT) return nb__err(NB_ERR_INVALID_ARG, "all_reduce: bad op %d", (int)op);
    if (mpi_type(t->dtype) == MPI_DATATYPE_NULL)
        return nb__err(NB_ERR_DTYPE, "all_reduce: dtype %s is not supported (float32, float64, int32, int64, uint8)",
                       nb_dtype_name(t->dtype));
    if (op == NB_REDUCE_OP_AVG && !nb_dtype_is_floating(t->dtype))
        return nb__err(NB_ERR_DTYPE, "all_reduce: op avg needs a floating dtype, not %s", nb_dtype_name(t->dtype));
    return NB_OK;
}

nb_status nb_all_reduce(nb_process_group *pg, nb_tensor *t, nb_reduce_op op)
{
    if (!pg) return nb__err(NB_ERR_INVALID_ARG, "all_reduce: process group is NULL");
    int64_t d[D_LEN];
    describe_tensor(d, K_ALL_REDUCE, op, t);
    NB_TRY(agree(pg, "all_reduce", d, check_reduce(t, op)));
    bool direct;
    nb_tensor *h = nb__dist_host(t, &direct);
    if (!h) return nb__err_prefix("all_reduce");
    int64_t n = nb__numel(h->shape, h->ndim);
    nb_status st = allreduce_host(pg, "all_reduce", nb__data(h), n, h->dtype, mpi_op(op));
    if (st == NB_OK && op == NB_REDUCE_OP_AVG) {
        if (h->dtype == NB_FLOAT32)
            for (float *p = (float *)nb__data(h), *e = p + n; p < e; p++) *p /= (float)pg->size;
        else
            for (double *p = (double *)nb__data(h), *e = p + n; p < e; p++) *p /= (double)pg->size;
    }
    if (st == NB_OK) st = nb__dist_write_back(t, h, direct);
    nb__release(h);
    return st;
}

nb_status nb_broadcast(nb_process_group *pg, nb_tensor *t, int src)
{
    if (!pg) return nb__err(NB_ERR_INVALID_ARG, "broadcast: process group is NULL");
    int64_t d[D_LEN];
    describe_tensor(d, K_BROADCAST, src, t);
    nb_status local = NB_OK;
    if (!t) local = nb__err(NB_ERR_INVALID_ARG, "broadcast: tensor is NULL");
    else if (src < 0 || src >= pg->size)
        local = nb__err(NB_ERR_INVALID_ARG, "broadcast: src rank %d is out of range for %d ranks", src, pg->size);
    NB_TRY(agree(pg, "broadcast", d, local));
    bool direct;
    nb_tensor *h = nb__dist_host(t, &direct);
    if (!h) return nb__err_prefix("broadcast");
    nb_status st = nb__dist_bcast_bytes(pg, nb__data(h), nb__dist_nbytes(h), src);
    if (st == NB_OK && pg->rank != src) st = nb__dist_write_back(t, h, direct);
    nb__release(h);
    return st;
}

nb_tensor *nb_all_gather(nb_process_group *pg, const nb_tensor *t)
{
    if (!pg) return nb__err_null(NB_ERR_INVALID_ARG, "all_gather: process group is NULL");
    int64_t d[D_LEN];
    describe_tensor(d, K_ALL_GATHER, 0, t);
    nb_status local = NB_OK;
    if (!t) local = nb__err(NB_ERR_INVALID_ARG, "all_gather: tensor is NULL");
    else if (t->ndim == NB_MAX_DIMS)
        local = nb__err(NB_ERR_SHAPE, "all_gather: a %d-dim tensor leaves no room for the ranks' dim", t->ndim);
    else if (nb__dist_nbytes(t) > INT_MAX)
        local = nb__err(NB_ERR_UNSUPPORTED, "all_gather: %zu bytes per rank is over MPI's count limit (%d)",
                        nb__dist_nbytes(t), INT_MAX);
    if (agree(pg, "all_gather", d, local) != NB_OK) return NULL;
    int64_t shape[NB_MAX_DIMS];
    shape[0] = pg->size;
    memcpy(shape + 1, t->shape, (size_t)t->ndim * sizeof *shape);
    bool direct;
    nb_tensor *h = nb__dist_host(t, &direct);
    if (!h) return nb__err_prefix("all_gather"), NULL;
    nb_tensor *out = nb__tensor_new_named("all_gather", shape, t->ndim + 1, t->dtype, nb_cpu());
    int nbytes = (int)nb__dist_nbytes(t);
    int rc = out ? MPI_Allgather(nb__data(h), nbytes, MPI_BYTE, nb__data(out), nbytes, MPI_BYTE, pg->comm) : MPI_SUCCESS;
    nb__release(h);
    if (!out) return NULL;
    if (rc != MPI_SUCCESS) {
        nb__release(out);
        mpi_err("all_gather", "MPI_Allgather", rc);
        return NULL;
    }
    nb_tensor *res = out;
    if (t->storage->device.type != NB_DEVICE_CPU) {
        res = nb_to(out, t->storage->device);
        nb__release(out);
        if (!res) return nb__err_prefix("all_gather"), NULL;
        return res;
    }
    return nb__track(res);
}

nb_status nb_barrier(nb_process_group *pg)
{
    if (!pg) return nb__err(NB_ERR_INVALID_ARG, "barrier: process group is NULL");
    int64_t d[D_LEN];
    describe_tensor(d, K_BARRIER, 0, NULL);
    NB_TRY(agree(pg, "barrier", d, NB_OK));
    MPI_TRY("barrier", MPI_Barrier(pg->comm));
    return NB_OK;
}

/* ---- raw collectives (dist_impl.h) ------------------------------------------------------------- */

nb_status nb__dist_iallreduce_sum(nb_process_group *pg, void *buf, int64_t n, nb_dtype dt, nb__dist_req **req)
{
    *req = NULL;
    if (n > INT_MAX) return nb__err(NB_ERR_UNSUPPORTED, "ddp: a bucket of %lld elements is over MPI's count limit", (long long)n);
    nb__dist_req *r = malloc(sizeof *r);
    if (!r) return nb__err(NB_ERR_OOM, "ddp: out of memory");
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(dt), MPI_SUM, pg->comm, &r->req);
    if (rc != MPI_SUCCESS) {
        free(r);
        return mpi_err("ddp", "MPI_Iallreduce", rc);
    }
    *req = r;
    return NB_OK;
}

nb_status nb__dist_test(nb__dist_req *r, bool *done)
{
    int flag = 0;
    MPI_TRY("ddp", MPI_Test(&r->req, &flag, MPI_STATUS_IGNORE));
    *done = flag != 0;
    return NB_OK;
}

nb_status nb__dist_wait(nb__dist_req *r)
{
    if (!r) return NB_OK;
    int rc = MPI_Wait(&r->req, MPI_STATUS_IGNORE);
    free(r);
    if (rc != MPI_SUCCESS) return mpi_err("ddp", "MPI_Wait", rc);
    return NB_OK;
}

nb_status nb__dist_bcast_bytes(nb_process_group *pg, void *buf, size_t nbytes, int src)
{
    for (size_t i = 0; i < nbytes; i += (size_t)CHUNK) {
        int cnt = (int)(nbytes - i < (size_t)CHUNK ? nbytes - i : (size_t)CHUNK);
        MPI_TRY("broadcast", MPI_Bcast((char *)buf + i, cnt, MPI_BYTE, src, pg->comm));
    }
    return NB_OK;
}

nb_status nb__dist_allgather_i64(nb_process_group *pg, const int64_t *in, int64_t n, int64_t *out)
{
    if (n > INT_MAX) return nb__err(NB_ERR_UNSUPPORTED, "ddp: %lld values are over MPI's count limit", (long long)n);
    MPI_TRY("ddp", MPI_Allgather(in, (int)n, MPI_INT64_T, out, (int)n, MPI_INT64_T, pg->comm));
    return NB_OK;
}
#endif
