/* nabla/dist.h: the MPI process group's collectives and DistributedDataParallel. ctest runs this
 * program alone (a group of one, MPI's singleton) and under mpiexec with 2 and 3 ranks.
 *
 * The collectives are checked against values computed by hand from each rank's known inputs.
 * DistributedDataParallel is checked against training without it: R ranks, each on its 1/R of
 * a batch, must end with the parameters of one process trained on the whole batch (float64, so
 * that only the order of the sums differs), whatever the bucket size. Without MPI the program
 * checks the "built without MPI" error and reports itself skipped (77). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nbtest.h"
#include "nabla/dist.h"

static nb_process_group *pg;
static int rank, size;

static nb_tensor_params f64(void)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_FLOAT64;
    return p;
}

static double at(const nb_tensor *t, int64_t i)
{
    nb_tensor *c = NBT_CHECK(nb_contiguous(NBT_CHECK(nb_to_dtype(t, NB_FLOAT64))));
    return ((const double *)nb_tensor_data_ptr(c))[i];
}

static nb_tensor *sum_all(const nb_tensor *t) { return nb_sum(t, NULL, 0, false); }

/* ---- collectives -------------------------------------------------------------------------------- */

static void test_group(void **state)
{
    (void)state;
    assert_true(size >= 1 && rank >= 0 && rank < size);
    nb_scope *s = nb_scope_begin();
    int64_t mine[2] = {rank, 10 * rank};
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_INT64;
    nb_tensor *x = NBT_CHECK(nb_tensor_from_data(mine, (int64_t[]){2}, 1, &p));
    nb_tensor *all = NBT_CHECK(nb_all_gather(pg, x));
    assert_int_equal(nb_tensor_ndim(all), 2);
    assert_int_equal(nb_tensor_shape(all)[0], size);
    assert_int_equal(nb_tensor_shape(all)[1], 2);
    for (int r = 0; r < size; r++) {
        assert_true(at(all, 2 * r) == r);
        assert_true(at(all, 2 * r + 1) == 10 * r);
    }
    NBT_OK(nb_barrier(pg));
    nb_scope_end(s);
}

/* Rank r holds x_r[i] = (r + 1) * (i + 1) - 2: every op's result is known in closed form. */
static void test_all_reduce_ops(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    const nb_dtype dts[] = {NB_FLOAT32, NB_FLOAT64, NB_INT32, NB_INT64};
    for (size_t k = 0; k < sizeof dts / sizeof *dts; k++)
        for (int op = NB_REDUCE_OP_SUM; op <= NB_REDUCE_OP_PRODUCT; op++) {
            if (op == NB_REDUCE_OP_AVG && !nb_dtype_is_floating(dts[k])) continue;
            nb_tensor_params p = f64();
            nb_tensor *x = NBT_CHECK(nb_arange(1, 6, 1, &p));
            x = NBT_CHECK(nb_add_scalar(NBT_CHECK(nb_mul_scalar(x, rank + 1)), -2.0));
            x = NBT_CHECK(nb_to_dtype(x, dts[k]));
            uint64_t v0 = nb_tensor_version(x);
            NBT_OK(nb_all_reduce(pg, x, (nb_reduce_op)op));
            assert_true(nb_tensor_version(x) > v0);
            assert_int_equal(nb_tensor_dtype(x), dts[k]);
            for (int i = 0; i < 5; i++) {
                double want = op == NB_REDUCE_OP_PRODUCT ? 1 : op == NB_REDUCE_OP_MAX ? -1e300
                              : op == NB_REDUCE_OP_MIN   ? 1e300 : 0;
                for (int r = 0; r < size; r++) {
                    double v = (r + 1.0) * (i + 1.0) - 2.0;
                    if (op == NB_REDUCE_OP_SUM || op == NB_REDUCE_OP_AVG) want += v;
                    else if (op == NB_REDUCE_OP_PRODUCT) want *= v;
                    else if (op == NB_REDUCE_OP_MAX) want = fmax(want, v);
                    else want = fmin(want, v);
                }
                if (op == NB_REDUCE_OP_AVG) want /= size;
                double got = at(x, i);
                if (fabs(got - want) > 1e-6 * fabs(want)) fail_msg("all_reduce %s op %d [%d]: %g, want %g",
                                                                   nb_dtype_name(dts[k]), op, i, got, want);
            }
        }
    nb_scope_end(s);
}

/* A strided view (every other element of a row) is reduced in place; the base's other elements
 * are left alone. A leaf that requires grad is reduced outside autograd. */
static void test_all_reduce_layouts(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_tensor_params p = f64();
    nb_tensor *base = NBT_CHECK(nb_full((int64_t[]){2, 6}, 2, rank + 1.0, &p));
    nb_tensor *v = NBT_CHECK(nb_slice(NBT_CHECK(nb_select(base, 0, 1)), 0, 0, 6, 2));
    NBT_OK(nb_all_reduce(pg, v, NB_REDUCE_OP_SUM));
    double tri = size * (size + 1) / 2.0;
    for (int j = 0; j < 6; j++) {
        assert_true(at(base, j) == rank + 1.0);
        assert_true(at(base, 6 + j) == (j % 2 == 0 ? tri : rank + 1.0));
    }
    nb_tensor *w = nbt_leaf(NBT_CHECK(nb_full((int64_t[]){3}, 1, 2.0 * rank, &p)));
    NBT_OK(nb_all_reduce(pg, w, NB_REDUCE_OP_MAX));
    assert_true(at(w, 2) == 2.0 * (size - 1));
    assert_true(nb_tensor_is_leaf(w) && nb_tensor_requires_grad(w));
    nb_scope_end(s);
}

static void test_broadcast(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int src = size - 1;
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_UINT8;
    nb_tensor *x = NBT_CHECK(nb_full((int64_t[]){4, 3}, 2, 7.0 + rank, &p));
    NBT_OK(nb_broadcast(pg, x, src));
    for (int i = 0; i < 12; i++) assert_true(at(x, i) == 7.0 + src);
    nb_tensor *y = NBT_CHECK(nb_full((int64_t[]){3, 4}, 2, rank, NULL));
    nb_tensor *yt = NBT_CHECK(nb_t(y)); /* non-contiguous */
    NBT_OK(nb_broadcast(pg, yt, 0));
    for (int i = 0; i < 12; i++) assert_true(at(y, i) == 0.0);
    nb_scope_end(s);
}

/* Every rank fails alike, with the values named, where MPI would hang or read past a buffer. */
static void test_collective_errors(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    NBT_FAILS(nb_all_reduce(NULL, NULL, NB_REDUCE_OP_SUM) != NB_OK, NB_ERR_INVALID_ARG, "all_reduce",
              "process group is NULL", NULL);
    nb_tensor_params pi = nb_tensor_params_default();
    pi.dtype = NB_INT64;
    nb_tensor *ix = NBT_CHECK(nb_zeros((int64_t[]){2}, 1, &pi));
    NBT_FAILS(nb_all_reduce(pg, ix, NB_REDUCE_OP_AVG) != NB_OK, NB_ERR_DTYPE, "all_reduce", "avg", "int64", NULL);
    NBT_FAILS(nb_broadcast(pg, ix, size) != NB_OK, NB_ERR_INVALID_ARG, "broadcast", "src rank", "out of range", NULL);
    nb_tensor *b = NBT_CHECK(nb_zeros((int64_t[]){2}, 1, &(nb_tensor_params){.dtype = NB_BOOL}));
    NBT_FAILS(nb_all_reduce(pg, b, NB_REDUCE_OP_SUM) != NB_OK, NB_ERR_DTYPE, "all_reduce", "bool", NULL);
    if (size > 1) {
        /* rank 0's shape differs from the others' */
        nb_tensor *x = NBT_CHECK(nb_zeros((int64_t[]){rank == 0 ? 3 : 4}, 1, NULL));
        NBT_FAILS(nb_all_reduce(pg, x, NB_REDUCE_OP_SUM) != NB_OK, NB_ERR_COMM, "all_reduce", "the ranks disagree",
                  "rank 0 calls all_reduce of float32 [3] (op sum)", "rank 1 calls all_reduce of float32 [4]", NULL);
        NBT_FAILS(nb_all_gather(pg, x) == NULL, NB_ERR_COMM, "all_gather", "[3]", "[4]", NULL);
        /* the last rank alone passes NULL: it names its own error, the others name it */
        nb_tensor *y = rank == size - 1 ? NULL : ix;
        if (rank == size - 1)
            NBT_FAILS(nb_broadcast(pg, y, 0) != NB_OK, NB_ERR_INVALID_ARG, "broadcast: tensor is NULL", NULL);
        else
            NBT_FAILS(nb_broadcast(pg, y, 0) != NB_OK, NB_ERR_COMM, "broadcast", "failed its own argument check", NULL);
        /* different collectives */
        nb_status st = rank == 0 ? nb_barrier(pg) : nb_all_reduce(pg, x, NB_REDUCE_OP_SUM);
        assert_int_equal(st, NB_ERR_COMM);
        assert_non_null(strstr(nb_last_error(), "rank 0 calls barrier"));
    }
    /* after all of that the group still works */
    nb_tensor *one = NBT_CHECK(nb_ones((int64_t[]){1}, 1, NULL));
    NBT_OK(nb_all_reduce(pg, one, NB_REDUCE_OP_SUM));
    assert_true(at(one, 0) == size);
    nb_scope_end(s);
}

/* ---- DistributedDataParallel ---------------------------------------------------------------------- */

#define NSTEP 3
#define PER_RANK 4
#define NIN 5
#define NOUT 3

/* A 5-16-16-3 tanh MLP in float64, its weights from `seed`. */
static nb_module *mlp(uint64_t seed)
{
    nb_generator *g = nb_generator_create(seed);
    nb_tensor_params p = f64();
    p.generator = g;
    nb_module *layers[5] = {nb_linear_module(NIN, 16, true, &p), nb_tanh_module(), nb_linear_module(16, 16, true, &p),
                            nb_tanh_module(), nb_linear_module(16, NOUT, true, &p)};
    nb_generator_free(g);
    return NBT_CHECK(nb_sequential(layers, 5));
}

/* Trains net for NSTEP SGD-with-momentum steps. Step t's global batch (size * PER_RANK rows, the
 * same on every rank) is drawn from seed 100 + t; with ddp, this rank takes rows [rank * PER_RANK,
 * (rank + 1) * PER_RANK) and the wrapper averages the gradients; without, the whole batch. */
static void train(nb_module *net, nb_ddp *ddp)
{
    int n = nb_module_parameters(net, NULL, 0);
    nb_tensor *params[16];
    assert_true(n <= 16);
    nb_module_parameters(net, params, n);
    nb_sgd_params sp = nb_sgd_params_default();
    sp.lr = 0.1;
    sp.momentum = 0.9;
    nb_optim *opt = NBT_CHECK(nb_optim_sgd(params, n, &sp));
    for (int t = 0; t < NSTEP; t++) {
        nb_scope *s = nb_scope_begin();
        nb_generator *g = nb_generator_create(100 + (uint64_t)t);
        nb_tensor_params p = f64();
        p.generator = g;
        nb_tensor *x = NBT_CHECK(nb_randn((int64_t[]){size * PER_RANK, NIN}, 2, &p));
        nb_tensor *y = NBT_CHECK(nb_randn((int64_t[]){size * PER_RANK, NOUT}, 2, &p));
        nb_generator_free(g);
        if (ddp) {
            x = NBT_CHECK(nb_narrow(x, 0, rank * PER_RANK, PER_RANK));
            y = NBT_CHECK(nb_narrow(y, 0, rank * PER_RANK, PER_RANK));
        }
        nb_tensor *out = ddp ? nb_ddp_forward(ddp, x) : nb_module_forward(net, x);
        nb_tensor *loss = NBT_CHECK(nb_mse_loss(NBT_CHECK(out), y, NB_REDUCE_MEAN));
        NBT_OK(nb_optim_zero_grad(opt));
        NBT_OK(nb_backward(loss, NULL, 0));
        NBT_OK(nb_optim_step(opt));
        nb_scope_end(s);
    }
    nb_optim_free(opt);
}

static void assert_same_params(nb_module *a, nb_module *b, double rtol, const char *what)
{
    nb_tensor *pa[16], *pb[16];
    int n = nb_module_parameters(a, pa, 16);
    assert_int_equal(n, nb_module_parameters(b, pb, 16));
    for (int i = 0; i < n; i++) nbt_assert_close(pa[i], pb[i], rtol, 1e-14, what);
}

/* Replicas that start from different weights (each rank its own seed) and each see a quarter of
 * the batch end with the weights of one process trained on the whole batch from rank 0's seed;
 * with one bucket, and with five buckets. */
static void test_ddp_matches_whole_batch(void **state)
{
    (void)state;
    nb_module *ref = mlp(7);
    train(ref, NULL);
    const double caps[] = {25.0, 0.0005};
    for (int c = 0; c < 2; c++) {
        nb_module *net = mlp(7 + (uint64_t)rank);
        nb_ddp_params dp = nb_ddp_params_default();
        dp.bucket_cap_mb = caps[c];
        nb_ddp *ddp = NBT_CHECK(nb_ddp_create(pg, net, &dp));
        /* float64 bytes, last first: 24 + 384 | 128 | 2048 | 128 | 640 at a cap of 524 */
        assert_int_equal(nb_ddp_num_buckets(ddp), c == 0 ? 1 : 5);
        assert_ptr_equal(nb_ddp_module(ddp), net);
        train(net, ddp);
        assert_same_params(net, ref, 1e-12, c == 0 ? "ddp, one bucket" : "ddp, five buckets");
        nb_ddp_free(ddp);
        nb_module_free(net);
    }
    nb_module_free(ref);
}

/* A module without forward that holds the n tensors as its parameters, under names. */
static nb_module *holder(const char *const *names, nb_tensor *const *ts, int n)
{
    static const nb_module_funcs funcs = {"Holder", NULL, NULL};
    nb_module *m = NBT_CHECK(nb_module_create(&funcs, NULL));
    for (int i = 0; i < n; i++) NBT_OK(nb_module_register_parameter(m, names[i], ts[i]));
    return m;
}

/* Two parameters; rank 0's loss uses both, the others' only the first: the second's gradient is
 * rank 0's over size (the others count as zeros), and it is set on every rank. */
static void test_ddp_unused_parameter(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_tensor_params p = f64();
    nb_tensor *a = NBT_CHECK(nb_full((int64_t[]){3}, 1, 2.0, &p)), *b = NBT_CHECK(nb_full((int64_t[]){2}, 1, 3.0, &p));
    nb_module *m = holder((const char *[]){"a", "b"}, (nb_tensor *[]){a, b}, 2);
    nb_ddp *ddp = NBT_CHECK(nb_ddp_create(pg, m, NULL));
    /* loss_r = (r + 1) * sum(a^2) (+ sum(b^3) on rank 0): d/da = 2 (r + 1) a, d/db = 3 b^2 */
    nb_tensor *loss = NBT_CHECK(nb_mul_scalar(NBT_CHECK(sum_all(NBT_CHECK(nb_mul(a, a)))), rank + 1.0));
    if (rank == 0) loss = NBT_CHECK(nb_add(loss, NBT_CHECK(sum_all(NBT_CHECK(nb_pow_scalar(b, 3.0))))));
    NBT_OK(nb_backward(loss, NULL, 0));
    nb_tensor *ga = NBT_CHECK(nb_tensor_grad(a)), *gb = NBT_CHECK(nb_tensor_grad(b));
    double mean_r1 = (size + 1) / 2.0; /* the mean of r + 1 over the ranks */
    for (int i = 0; i < 3; i++) assert_true(fabs(at(ga, i) - 2 * mean_r1 * 2.0) < 1e-12);
    for (int i = 0; i < 2; i++) assert_true(fabs(at(gb, i) - 3 * 9.0 / size) < 1e-12);
    nb_ddp_free(ddp);
    nb_module_free(m);
    nb_scope_end(s);
}

/* With sync off, gradients stay local and accumulate; the next synced backward reduces the sums,
 * as torch's no_sync() for gradient accumulation. */
static void test_ddp_no_sync(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_tensor_params p = f64();
    nb_tensor *w = NBT_CHECK(nb_full((int64_t[]){2}, 1, 1.0, &p));
    nb_module *m = holder((const char *[]){"w"}, &w, 1);
    nb_ddp *ddp = NBT_CHECK(nb_ddp_create(pg, m, NULL));
    NBT_OK(nb_ddp_set_sync(ddp, false));
    for (int k = 0; k < 2; k++) /* d/dw of (r + 1) * sum(w) is r + 1 */
        NBT_OK(nb_backward(NBT_CHECK(nb_mul_scalar(NBT_CHECK(sum_all(w)), rank + 1.0)), NULL, 0));
    nb_tensor *g = NBT_CHECK(nb_tensor_grad(w));
    assert_true(at(g, 0) == 2.0 * (rank + 1));
    NBT_OK(nb_ddp_set_sync(ddp, true));
    NBT_OK(nb_backward(NBT_CHECK(nb_mul_scalar(NBT_CHECK(sum_all(w)), rank + 1.0)), NULL, 0));
    g = NBT_CHECK(nb_tensor_grad(w));
    assert_true(fabs(at(g, 1) - 3.0 * (size + 1) / 2.0) < 1e-12);
    NBT_FAILS(nb_ddp_set_sync(NULL, true) != NB_OK, NB_ERR_INVALID_ARG, "ddp", "NULL", NULL);
    nb_ddp_free(ddp);
    nb_module_free(m);
    nb_scope_end(s);
}

/* Batch norm's running statistics: rank 0's reach every rank at each forward. */
static void test_ddp_buffers(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_module *bn = NBT_CHECK(nb_batch_norm2d_module(3, NULL));
    nb_ddp *ddp = NBT_CHECK(nb_ddp_create(pg, bn, NULL));
    nb_generator *g = nb_generator_create(50 + (uint64_t)rank); /* each rank its own batch */
    nb_tensor_params p = nb_tensor_params_default();
    p.generator = g;
    nb_tensor *x0 = NBT_CHECK(nb_randn((int64_t[]){4, 3, 2, 2}, 4, &p));
    NBT_CHECK(nb_ddp_forward(ddp, x0)); /* each rank's running mean moves by its own batch */
    nb_tensor *mean = nb_module_get_buffer(bn, "running_mean");
    nb_tensor *mine = NBT_CHECK(nb_clone(mean));
    nb_tensor *all = NBT_CHECK(nb_all_gather(pg, mine));
    NBT_CHECK(nb_ddp_forward(ddp, x0)); /* rank 0's statistics first, then this rank's batch */
    nb_generator_free(g);
    nb_tensor *after = NBT_CHECK(nb_all_gather(pg, NBT_CHECK(nb_clone(mean))));
    /* running = 0.9 * rank 0's + 0.1 * batch mean, on every rank: the difference from rank 0's
     * previous statistics is 0.1 * (batch mean - rank 0's) */
    for (int c = 0; c < 3; c++) {
        double r0 = at(all, c), now = at(after, rank * 3 + c), own = at(mine, c);
        /* own = 0.1 * batch mean (from zero): the batch is the same in both forwards */
        double want = 0.9 * r0 + own;
        if (fabs(now - want) > 1e-6) fail_msg("running_mean[%d] on rank %d: %g, want %g", c, rank, now, want);
    }
    /* before evaluating: every rank now holds rank 0's statistics, as rank 0 would save them */
    NBT_OK(nb_ddp_broadcast_buffers(ddp));
    for (int c = 0; c < 3; c++) assert_true(at(mean, c) == at(after, c));
    NBT_FAILS(nb_ddp_broadcast_buffers(NULL) != NB_OK, NB_ERR_INVALID_ARG, "ddp broadcast_buffers", "NULL", NULL);
    nb_ddp_free(ddp);
    nb_module_free(bn);
    nb_scope_end(s);
}

/* Module differences between ranks, and parameters with another owner. */
static void test_ddp_errors(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    NBT_FAILS(nb_ddp_create(NULL, NULL, NULL) == NULL, NB_ERR_INVALID_ARG, "ddp", "process group is NULL", NULL);
    nb_ddp_params bad = nb_ddp_params_default();
    bad.bucket_cap_mb = 0;
    nb_module *net = mlp(1);
    if (size > 1)
        NBT_FAILS(nb_ddp_create(pg, net, rank == 0 ? &bad : NULL) == NULL, rank == 0 ? NB_ERR_INVALID_ARG : NB_ERR_COMM,
                  rank == 0 ? "bucket_cap_mb 0" : "rank 0 failed its own argument check", NULL);
    else
        NBT_FAILS(nb_ddp_create(pg, net, &bad) == NULL, NB_ERR_INVALID_ARG, "ddp", "bucket_cap_mb 0", NULL);
    if (size > 1) {
        nb_tensor_params p = f64();
        nb_module *other = NBT_CHECK(nb_linear_module(NIN, rank == 1 ? 17 : 16, true, &p));
        NBT_FAILS(nb_ddp_create(pg, other, NULL) == NULL, NB_ERR_COMM, "ddp: parameter weight differs",
                  "rank 0 has float64 [16, 5], rank 1 has float64 [17, 5]", NULL);
        nb_module_free(other);
        nb_module *fewer = rank == 1 ? NBT_CHECK(nb_linear_module(NIN, 16, false, &p)) : mlp(1);
        NBT_FAILS(nb_ddp_create(pg, fewer, NULL) == NULL, NB_ERR_COMM, "ddp", "rank 0 has 6 parameters",
                  "rank 1 has 1 and", NULL);
        nb_module_free(fewer);
    }
    /* one owner per parameter: an optimizer stepping in backward, or another wrapper */
    nb_tensor *params[6];
    nb_module_parameters(net, params, 6);
    nb_optim *opt = NBT_CHECK(nb_optim_sgd(params, 6, NULL));
    NBT_OK(nb_optim_step_in_backward(opt, true));
    NBT_FAILS(nb_ddp_create(pg, net, NULL) == NULL, NB_ERR_INVALID_ARG, "ddp: parameter 0.weight", "optimizer", NULL);
    NBT_OK(nb_optim_step_in_backward(opt, false));
    nb_ddp *ddp = NBT_CHECK(nb_ddp_create(pg, net, NULL));
    NBT_FAILS(nb_optim_step_in_backward(opt, true) != NB_OK, NB_ERR_INVALID_ARG, "params[0]",
              "DistributedDataParallel", NULL);
    NBT_FAILS(nb_ddp_create(pg, net, NULL) == NULL, NB_ERR_INVALID_ARG, "ddp: parameter 0.weight",
              "another DistributedDataParallel", NULL);
    nb_ddp_free(ddp);
    /* freed: the parameters are free for the optimizer again */
    NBT_OK(nb_optim_step_in_backward(opt, true));
    nb_optim_free(opt);
    nb_module_free(net);
    nb_scope_end(s);
}

int main(void)
{
    pg = nb_process_group_mpi();
    if (!pg) {
        if (nb_dist_mpi_available() || nb_last_status() != NB_ERR_UNSUPPORTED ||
            !strstr(nb_last_error(), "built without MPI")) {
            fprintf(stderr, "test_dist: process_group_mpi failed: %s\n", nb_last_error());
            return 1;
        }
        printf("SKIPPED: nabla was built without MPI (%s)\n", nb_last_error());
        return 77;
    }
    rank = nb_process_group_rank(pg);
    size = nb_process_group_size(pg);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group),
        cmocka_unit_test(test_all_reduce_ops),
        cmocka_unit_test(test_all_reduce_layouts),
        cmocka_unit_test(test_broadcast),
        cmocka_unit_test(test_collective_errors),
        cmocka_unit_test(test_ddp_matches_whole_batch),
        cmocka_unit_test(test_ddp_unused_parameter),
        cmocka_unit_test(test_ddp_no_sync),
        cmocka_unit_test(test_ddp_buffers),
        cmocka_unit_test(test_ddp_errors),
    };
    int rc = NBT_RUN(tests);
    if (rc != 0) {
        /* the other ranks may be waiting in a collective this rank left: exit without MPI's
         * finalize (which would wait for them), so that mpiexec ends the whole job */
        fflush(stdout);
        fflush(stderr);
        _exit(1);
    }
    nb_process_group_free(pg);
    return 0;
}
