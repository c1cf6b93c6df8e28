/* Tensors: creation, metadata, views, copies, dtype conversion, devices, errors and scopes.
 * Expected values are hand-computed from the definitions. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nbtest.h"
#include "core/tensor_impl.h"

static const nb_tensor_params F64 = {NB_FLOAT64, {NB_DEVICE_CPU, 0}, false, NULL};
static const nb_tensor_params I64 = {NB_INT64, {NB_DEVICE_CPU, 0}, false, NULL};

/* The values of t as doubles in row-major order (malloc'd). */
static double *values(const nb_tensor *t)
{
    int64_t n = nb_tensor_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    assert_non_null(v);
    nb_scope *s = nb_scope_begin();
    NBT_OK(nb_tensor_read(NBT_CHECK(nb_to_dtype(t, NB_FLOAT64)), v, (size_t)n * sizeof *v));
    nb_scope_end(s);
    return v;
}

static void assert_values(const nb_tensor *t, const double *want, int64_t n)
{
    assert_int_equal(nb_tensor_numel(t), n);
    double *v = values(t);
    for (int64_t i = 0; i < n; i++)
        if (v[i] != want[i]) {
            print_error("element %lld: %g, expected %g\n", (long long)i, v[i], want[i]);
            free(v);
            fail();
        }
    free(v);
}

static void assert_shape(const nb_tensor *t, const int64_t *shape, int ndim)
{
    assert_int_equal(nb_tensor_ndim(t), ndim);
    for (int i = 0; i < ndim; i++) assert_int_equal(nb_tensor_shape(t)[i], shape[i]);
}

static void test_creation(void **state)
{
    nb_scope *s = nb_scope_begin();
    int64_t shape[2] = {2, 3};
    nb_tensor *z = NBT_CHECK(nb_zeros(shape, 2, NULL));
    assert_int_equal(nb_tensor_dtype(z), NB_FLOAT32);
    assert_int_equal(nb_tensor_numel(z), 6);
    assert_true(nb_tensor_is_contiguous(z));
    assert_int_equal(nb_tensor_strides(z)[0], 3);
    assert_int_equal(nb_tensor_strides(z)[1], 1);
    assert_values(z, (double[]){0, 0, 0, 0, 0, 0}, 6);
    assert_values(NBT_CHECK(nb_ones(shape, 2, &I64)), (double[]){1, 1, 1, 1, 1, 1}, 6);
    assert_values(NBT_CHECK(nb_full(shape, 2, 2.5, &F64)), (double[]){2.5, 2.5, 2.5, 2.5, 2.5, 2.5}, 6);
    float data[6] = {1, 2, 3, 4, 5, 6};
    nb_tensor *t = NBT_CHECK(nb_tensor_from_data(data, shape, 2, NULL));
    assert_values(t, (double[]){1, 2, 3, 4, 5, 6}, 6);
    float *p = nb_tensor_data_ptr(t);
    assert_true(p && p[5] == 6);
    nb_tensor *sc = NBT_CHECK(nb_scalar_tensor(7, &F64));
    assert_int_equal(nb_tensor_ndim(sc), 0);
    double d;
    NBT_OK(nb_item(sc, &d));
    assert_true(d == 7);
    /* arange: length ceil((end - start) / step), as torch.arange */
    assert_values(NBT_CHECK(nb_arange(0, 5, 1, &I64)), (double[]){0, 1, 2, 3, 4}, 5);
    assert_values(NBT_CHECK(nb_arange(1, 2, 0.25, &F64)), (double[]){1, 1.25, 1.5, 1.75}, 4);
    assert_values(NBT_CHECK(nb_arange(5, 0, -2, &F64)), (double[]){5, 3, 1}, 3);
    assert_values(NBT_CHECK(nb_linspace(0, 1, 5, &F64)), (double[]){0, 0.25, 0.5, 0.75, 1}, 5);
    assert_int_equal(nb_tensor_numel(NBT_CHECK(nb_linspace(0, 1, 0, NULL))), 0);
    assert_values(NBT_CHECK(nb_eye(2, 3, &F64)), (double[]){1, 0, 0, 0, 1, 0}, 6);
    assert_values(NBT_CHECK(nb_eye(3, -1, &I64)), (double[]){1, 0, 0, 0, 1, 0, 0, 0, 1}, 9);
    nb_tensor *e = NBT_CHECK(nb_zeros((int64_t[]){0, 4}, 2, NULL));
    assert_int_equal(nb_tensor_numel(e), 0);
    nb_tensor *zl = NBT_CHECK(nb_full_like(t, 3));
    assert_int_equal(nb_tensor_dtype(zl), NB_FLOAT32);
    assert_values(zl, (double[]){3, 3, 3, 3, 3, 3}, 6);
    nb_scope_end(s);
}

static void test_creation_errors(void **state)
{
    nb_scope *s = nb_scope_begin();
    NBT_FAILS(nb_zeros((int64_t[]){2, -1}, 2, NULL) == NULL, NB_ERR_SHAPE, "zeros", "negative size", "[2, -1]", NULL);
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    NBT_FAILS(nb_empty(nine, 9, NULL) == NULL, NB_ERR_INVALID_ARG, "9 dims", "at most 8", NULL);
    NBT_FAILS(nb_empty((int64_t[]){1 << 30, 1 << 30, 1 << 30}, 3, NULL) == NULL, NB_ERR_OOM, "too large", NULL);
    /* an empty tensor's other sizes still make its strides: they must not overflow (found by
     * tests/fuzz through read_idx) */
    NBT_FAILS(nb_empty((int64_t[]){0, INT64_C(1) << 40, INT64_C(1) << 40}, 3, NULL) == NULL, NB_ERR_OOM,
              "empty: shape [0, 1099511627776, 1099511627776] of float32 is too large", NULL);
    nb_tensor *e0 = NBT_CHECK(nb_empty((int64_t[]){0, 1 << 20, 1 << 10}, 3, NULL));
    assert_int_equal(nb_tensor_numel(e0), 0);
    assert_int_equal(nb_tensor_strides(e0)[0], INT64_C(1) << 30);
    NBT_FAILS(nb_arange(0, 1, 0, NULL) == NULL, NB_ERR_INVALID_ARG, "arange", "step=0", NULL);
    NBT_FAILS(nb_arange(0, 5, -1, NULL) == NULL, NB_ERR_INVALID_ARG, "arange", "away from end", NULL);
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_INT64;
    p.requires_grad = true;
    NBT_FAILS(nb_zeros((int64_t[]){2}, 1, &p) == NULL, NB_ERR_DTYPE, "only floating tensors can require grad", "int64", NULL);
    NBT_FAILS(nb_tensor_from_data(NULL, (int64_t[]){3}, 1, NULL) == NULL, NB_ERR_INVALID_ARG, "NULL data", NULL);
    nb_tensor *t = NBT_CHECK(nb_zeros((int64_t[]){2, 3}, 2, NULL));
    double d;
    NBT_FAILS(nb_item(t, &d) != NB_OK, NB_ERR_SHAPE, "item", "[2, 3]", "6 elements", NULL);
    float buf[5];
    NBT_FAILS(nb_tensor_read(t, buf, sizeof buf) != NB_OK, NB_ERR_INVALID_ARG, "tensor_read", "20 bytes", "24 bytes", NULL);
    nb_scope_end(s);
}

static void test_views(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *a = NBT_CHECK(nb_arange(0, 24, 1, &F64)); /* a[i] = i */
    nb_tensor *m = NBT_CHECK(nb_view(a, (int64_t[]){2, 3, 4}, 3));
    assert_shape(m, (int64_t[]){2, 3, 4}, 3);
    nb_tensor *r = NBT_CHECK(nb_reshape(a, (int64_t[]){4, -1}, 2));
    assert_shape(r, (int64_t[]){4, 6}, 2);
    /* permute (2,0,1): p[i][j][k] = m[j][k][i] = 12 j + 4 k + i */
    nb_tensor *p = NBT_CHECK(nb_permute(m, (int64_t[]){2, 0, 1}, 3));
    assert_shape(p, (int64_t[]){4, 2, 3}, 3);
    assert_false(nb_tensor_is_contiguous(p));
    double want[24];
    for (int i = 0, n = 0; i < 4; i++)
        for (int j = 0; j < 2; j++)
            for (int k = 0; k < 3; k++) want[n++] = 12 * j + 4 * k + i;
    assert_values(p, want, 24);
    nb_tensor *pc = NBT_CHECK(nb_contiguous(p));
    assert_true(nb_tensor_is_contiguous(pc));
    assert_values(pc, want, 24);
    /* view of a permuted tensor fails where strides don't allow it, reshape copies */
    NBT_FAILS(nb_view(p, (int64_t[]){24}, 1) == NULL, NB_ERR_SHAPE, "view", "nb_reshape", NULL);
    assert_values(NBT_CHECK(nb_reshape(p, (int64_t[]){24}, 1)), want, 24);
    /* transpose of a 2-D view: t[i][j] = r[j][i] = 6 j + i */
    nb_tensor *tt = NBT_CHECK(nb_t(r));
    assert_shape(tt, (int64_t[]){6, 4}, 2);
    double w2[24];
    for (int i = 0, n = 0; i < 6; i++)
        for (int j = 0; j < 4; j++) w2[n++] = 6 * j + i;
    assert_values(tt, w2, 24);
    /* narrow, slice with a step, select */
    assert_values(NBT_CHECK(nb_narrow(a, 0, 20, 4)), (double[]){20, 21, 22, 23}, 4);
    assert_values(NBT_CHECK(nb_slice(a, 0, 1, 10, 3)), (double[]){1, 4, 7}, 3);
    assert_values(NBT_CHECK(nb_slice(a, 0, -3, 100, 1)), (double[]){21, 22, 23}, 3);
    nb_tensor *sel = NBT_CHECK(nb_select(m, 1, -1)); /* m[:, 2, :] = 8 + 12 j + k */
    assert_shape(sel, (int64_t[]){2, 4}, 2);
    assert_values(sel, (double[]){8, 9, 10, 11, 20, 21, 22, 23}, 8);
    /* squeeze / unsqueeze / flatten / expand */
    nb_tensor *u = NBT_CHECK(nb_unsqueeze(sel, 1));
    assert_shape(u, (int64_t[]){2, 1, 4}, 3);
    assert_shape(NBT_CHECK(nb_unsqueeze(sel, -1)), (int64_t[]){2, 4, 1}, 3);
    assert_shape(NBT_CHECK(nb_squeeze(u)), (int64_t[]){2, 4}, 2);
    assert_shape(NBT_CHECK(nb_squeeze_dim(u, 1)), (int64_t[]){2, 4}, 2);
    assert_shape(NBT_CHECK(nb_squeeze_dim(u, 0)), (int64_t[]){2, 1, 4}, 3);
    assert_shape(NBT_CHECK(nb_flatten(m, 1, -1)), (int64_t[]){2, 12}, 2);
    nb_tensor *col = NBT_CHECK(nb_view(NBT_CHECK(nb_narrow(a, 0, 0, 3)), (int64_t[]){3, 1}, 2));
    nb_tensor *ex = NBT_CHECK(nb_expand(col, (int64_t[]){2, 3, -1}, 3));
    assert_shape(ex, (int64_t[]){2, 3, 1}, 3);
    ex = NBT_CHECK(nb_expand(col, (int64_t[]){3, 2}, 2));
    assert_values(ex, (double[]){0, 0, 1, 1, 2, 2}, 6);
    assert_int_equal(nb_tensor_strides(ex)[1], 0);
    /* as_strided: overlapping windows of 3 with step 2 */
    nb_tensor *w = NBT_CHECK(nb_as_strided(a, (int64_t[]){3, 3}, (int64_t[]){2, 1}, 2, 1));
    assert_values(w, (double[]){1, 2, 3, 3, 4, 5, 5, 6, 7}, 9);
    /* views share storage: writing through one is seen by the other */
    NBT_OK(nb_fill_(NBT_CHECK(nb_select(r, 0, 0)), -1));
    double v0;
    NBT_OK(nb_item(NBT_CHECK(nb_select(a, 0, 5)), &v0));
    assert_true(v0 == -1);
    nb_scope_end(s);
}

static void test_view_errors(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *a = NBT_CHECK(nb_zeros((int64_t[]){2, 3}, 2, NULL));
    NBT_FAILS(nb_view(a, (int64_t[]){4, 2}, 2) == NULL, NB_ERR_SHAPE, "view", "[4, 2]", "[2, 3]", NULL);
    NBT_FAILS(nb_reshape(a, (int64_t[]){-1, -1}, 2) == NULL, NB_ERR_SHAPE, "only one dimension can be -1", NULL);
    NBT_FAILS(nb_reshape(a, (int64_t[]){4, -1}, 2) == NULL, NB_ERR_SHAPE, "invalid for input of size 6", NULL);
    NBT_FAILS(nb_permute(a, (int64_t[]){0, 0}, 2) == NULL, NB_ERR_INVALID_ARG, "permute", "repeated", NULL);
    NBT_FAILS(nb_permute(a, (int64_t[]){0}, 1) == NULL, NB_ERR_INVALID_ARG, "permute", "1 dims", "2 dims", NULL);
    NBT_FAILS(nb_transpose(a, 0, 2) == NULL, NB_ERR_INVALID_ARG, "transpose", "dim 2 out of range", NULL);
    NBT_FAILS(nb_select(a, 1, 3) == NULL, NB_ERR_INVALID_ARG, "select", "index 3", "size 3", NULL);
    NBT_FAILS(nb_narrow(a, 1, 2, 2) == NULL, NB_ERR_INVALID_ARG, "narrow", "start 2 + length 2", NULL);
    NBT_FAILS(nb_slice(a, 0, 0, 2, 0) == NULL, NB_ERR_INVALID_ARG, "slice", "step 0", NULL);
    NBT_FAILS(nb_expand(a, (int64_t[]){4, 3}, 2) == NULL, NB_ERR_SHAPE, "expand", "[2, 3]", "[4, 3]", NULL);
    NBT_FAILS(nb_expand(a, (int64_t[]){3}, 1) == NULL, NB_ERR_SHAPE, "expand", "2 dims to 1 dims", NULL);
    NBT_FAILS(nb_as_strided(a, (int64_t[]){3, 3}, (int64_t[]){3, 1}, 2, 0) == NULL, NB_ERR_INVALID_ARG, "as_strided",
              "needs 9 elements", "has 6", NULL);
    NBT_FAILS(nb_t(NBT_CHECK(nb_zeros((int64_t[]){1, 2, 3}, 3, NULL))) == NULL, NB_ERR_SHAPE, "at most 2 dims", NULL);
    NBT_FAILS(nb_view(NULL, (int64_t[]){1}, 1) == NULL, NB_ERR_INVALID_ARG, "view", "NULL", NULL);
    nb_scope_end(s);
}

/* Copies with outputs larger than the last-level cache (32 MiB here: the streaming stores of
 * src/cpu/ops/copy.c), against paths that do not stream: a row broadcast into [1100, 10007]
 * float32 (rows of 40028 bytes, so each starts at another alignment) checked row by row with a
 * broadcasting subtraction, and contiguous copies of a tensor that starts one element into its
 * buffer, float32 and float64, against the same copy of a strided view of the values. */
static void test_large_copies(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor_params p = nb_tensor_params_default();
    int64_t rows = 1100, cols = 10007;
    nb_tensor *row = NBT_CHECK(nb_randn(&cols, 1, &p));
    nb_tensor *out = NBT_CHECK(nb_empty((int64_t[]){rows, cols}, 2, &p));
    NBT_OK(nb_copy_(out, row));
    double worst;
    NBT_OK(nb_item(NBT_CHECK(nb_max(nb_abs(nb_sub(out, row)))), &worst));
    assert_true(worst == 0);
    for (int d = 0; d < 2; d++) {
        p.dtype = d ? NB_FLOAT64 : NB_FLOAT32;
        int64_t n = ((int64_t)48 << 20) / (d ? 8 : 4) + 3;
        nb_tensor *a = NBT_CHECK(nb_narrow(NBT_CHECK(nb_randn(&n, 1, &p)), 0, 1, n - 1));
        nbt_assert_close(NBT_CHECK(nb_clone(a)), NBT_CHECK(nb_clone(nbt_noncontig(a))), 0, 0, "large copy");
    }
    nb_scope_end(s);
}

static void test_copy_and_dtype(void **state)
{
    nb_scope *s = nb_scope_begin();
    double d[4] = {-1.7, 0, 2.5, 300};
    nb_tensor *t = NBT_CHECK(nb_tensor_from_data(d, (int64_t[]){4}, 1, &F64));
    /* C's conversion rules, as PyTorch's: truncation toward zero; bool is != 0 */
    assert_values(NBT_CHECK(nb_to_dtype(t, NB_INT64)), (double[]){-1, 0, 2, 300}, 4);
    assert_values(NBT_CHECK(nb_to_dtype(t, NB_BOOL)), (double[]){1, 0, 1, 1}, 4);
    assert_values(NBT_CHECK(nb_to_dtype(t, NB_FLOAT32)), (double[]){(float)-1.7, 0, 2.5, 300}, 4);
    nb_tensor *c = NBT_CHECK(nb_clone(t));
    NBT_OK(nb_fill_(c, 9));
    assert_values(t, d, 4); /* the clone has its own storage */
    /* copy_ broadcasts and converts */
    nb_tensor *dst = NBT_CHECK(nb_zeros((int64_t[]){2, 4}, 2, &I64));
    NBT_OK(nb_copy_(dst, t));
    assert_values(dst, (double[]){-1, 0, 2, 300, -1, 0, 2, 300}, 8);
    NBT_FAILS(nb_copy_(t, dst) != NB_OK, NB_ERR_SHAPE, "copy_", "[2, 4]", "[4]", NULL);
    /* non-contiguous destination */
    nb_tensor *tr = NBT_CHECK(nb_t(dst));
    NBT_OK(nb_copy_(tr, NBT_CHECK(nb_view(nb_arange(0, 4, 1, &F64), (int64_t[]){4, 1}, 2))));
    assert_values(dst, (double[]){0, 1, 2, 3, 0, 1, 2, 3}, 8);
    /* writing into an expanded tensor is an error */
    nb_tensor *ex = NBT_CHECK(nb_expand(NBT_CHECK(nb_zeros((int64_t[]){1}, 1, NULL)), (int64_t[]){3}, 1));
    NBT_FAILS(nb_fill_(ex, 1) != NB_OK, NB_ERR_INVALID_ARG, "fill_", "single memory location", NULL);
    /* version counter: in-place writes bump it, through any view */
    uint64_t v = nb_tensor_version(dst);
    NBT_OK(nb_zero_(NBT_CHECK(nb_select(dst, 0, 1))));
    assert_true(nb_tensor_version(dst) == v + 1);
    nb_scope_end(s);
}

static void test_devices(void **state)
{
    nb_device d;
    NBT_OK(nb_device_parse("cpu", &d));
    assert_int_equal(d.type, NB_DEVICE_CPU);
    NBT_OK(nb_device_parse("auto", &d));
    assert_int_equal(d.type, nb_cuda_is_available() ? NB_DEVICE_CUDA : NB_DEVICE_CPU);
    char buf[32];
    nb_device_str(nb_cpu(), buf, sizeof buf);
    assert_string_equal(buf, "cpu");
    NBT_FAILS(nb_device_parse("tpu", &d) != NB_OK, NB_ERR_DEVICE, "unknown device \"tpu\"", NULL);
    NBT_FAILS(nb_device_parse("cuda:x", &d) != NB_OK, NB_ERR_DEVICE, "bad device index", NULL);
    assert_int_equal(d.type, NB_DEVICE_CPU);
    if (nb_cuda_device_count() == 0) {
        NBT_FAILS(nb_device_parse("cuda:0", &d) != NB_OK, NB_ERR_DEVICE, "cuda:0", NULL);
        nb_scope *s = nb_scope_begin();
        nb_tensor *t = NBT_CHECK(nb_zeros((int64_t[]){2}, 1, NULL));
        NBT_FAILS(nb_to(t, (nb_device){NB_DEVICE_CUDA, 0}) == NULL, NB_ERR_DEVICE, "cuda:0", NULL);
        nb_tensor_params p = nb_tensor_params_default();
        p.device = (nb_device){NB_DEVICE_CUDA, 1};
        NBT_FAILS(nb_zeros((int64_t[]){2}, 1, &p) == NULL, NB_ERR_DEVICE, "cuda:1", NULL);
        nb_scope_end(s);
    }
    nb_scope *s = nb_scope_begin();
    nb_tensor *t = NBT_CHECK(nb_ones((int64_t[]){3}, 1, NULL));
    assert_ptr_equal(NBT_CHECK(nb_to(t, nb_cpu())), t); /* same device: the tensor itself */
    nb_scope_end(s);
}

static void test_scopes_and_refcounts(void **state)
{
    nb_memory_stats before, after;
    NBT_OK(nb_memory_stats_get(nb_cpu(), &before));
    nb_tensor *kept;
    {
        nb_scope *outer = nb_scope_begin();
        nb_scope *s = nb_scope_begin();
        nb_tensor *a = NBT_CHECK(nb_zeros((int64_t[]){1024, 1024}, 2, NULL));
        nb_tensor *b = NBT_CHECK(nb_view(a, (int64_t[]){-1}, 1));
        kept = nb_scope_end_keep(s, b); /* b moves to `outer` */
        assert_int_equal(nb_tensor_numel(kept), 1 << 20);
        kept = nb_tensor_retain(kept); /* ours now */
        nb_scope_end(outer);
    }
    NBT_OK(nb_fill_(kept, 2)); /* still alive */
    nb_tensor_free(kept);
    nb_tensor_free(NULL);
    nb_scope_end(NULL);
    NBT_OK(nb_memory_stats_get(nb_cpu(), &after));
    assert_true(after.allocated == before.allocated);
    /* without a scope the caller owns the result */
    nb_tensor *x = NBT_CHECK(nb_zeros((int64_t[]){4}, 1, NULL));
    nb_tensor_free(x);
    /* ending an outer scope closes the inner ones still open */
    nb_scope *o = nb_scope_begin();
    nb_scope_begin();
    NBT_CHECK(nb_zeros((int64_t[]){4096}, 1, NULL));
    nb_scope_end(o);
    NBT_OK(nb_memory_stats_get(nb_cpu(), &after));
    assert_true(after.allocated == before.allocated);
    /* reset_peak_stats: the peak starts again from what is allocated now */
    nb_tensor *big = NBT_CHECK(nb_zeros((int64_t[]){1 << 20}, 1, NULL)); /* 4 MiB */
    nb_tensor_free(big);
    NBT_OK(nb_memory_stats_get(nb_cpu(), &after));
    assert_true(after.peak_allocated >= before.allocated + ((size_t)4 << 20));
    NBT_OK(nb_memory_reset_peak_stats(nb_cpu()));
    NBT_OK(nb_memory_stats_get(nb_cpu(), &after));
    assert_true(after.peak_allocated == after.allocated);
    nb_tensor *small = NBT_CHECK(nb_zeros((int64_t[]){1 << 18}, 1, NULL)); /* 1 MiB */
    NBT_OK(nb_memory_stats_get(nb_cpu(), &after));
    assert_true(after.peak_allocated >= after.allocated && after.peak_allocated < before.allocated + ((size_t)4 << 20));
    nb_tensor_free(small);
    NBT_FAILS(nb_memory_reset_peak_stats((nb_device){NB_DEVICE_CPU, 3}) != NB_OK, NB_ERR_DEVICE, "cpu:3", "only index 0", NULL);
}

static void test_threads(void **state)
{
    int n = nb_get_num_threads();
    assert_true(n >= 1);
    NBT_OK(nb_set_num_threads(1));
    assert_int_equal(nb_get_num_threads(), 1);
    NBT_FAILS(nb_set_num_threads(0) != NB_OK, NB_ERR_INVALID_ARG, "set_num_threads", "0 threads", NULL);
    NBT_OK(nb_set_num_threads(n));
}

static void test_dtype_helpers(void **state)
{
    assert_string_equal(nb_dtype_name(NB_BFLOAT16), "bfloat16");
    assert_int_equal(nb_dtype_size(NB_FLOAT64), 8);
    assert_int_equal(nb_promote_types(NB_INT64, NB_FLOAT32), NB_FLOAT32);
    assert_int_equal(nb_promote_types(NB_BOOL, NB_UINT8), NB_UINT8);
    assert_int_equal(nb_promote_types(NB_INT32, NB_INT64), NB_INT64);
    assert_int_equal(nb_promote_types(NB_FLOAT16, NB_BFLOAT16), NB_FLOAT32);
    assert_int_equal(nb_promote_types(NB_FLOAT64, NB_FLOAT32), NB_FLOAT64);
}

/* Ops on tensors of two devices fail before touching data, naming both devices. Without a GPU the
 * second device is simulated: a tensor struct whose storage claims to live on cuda:0. */
static void test_mixed_devices(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *a = NBT_CHECK(nb_ones((int64_t[]){2, 2}, 2, NULL));
    nb_tensor *idx = NBT_CHECK(nb_zeros((int64_t[]){2}, 1, &(nb_tensor_params){NB_INT64, {NB_DEVICE_CPU, 0}, false, NULL}));
    nb_storage fake_storage = *a->storage;
    fake_storage.device = (nb_device){NB_DEVICE_CUDA, 0};
    atomic_init(&fake_storage.refcount, 1 << 20); /* never freed through this struct */
    nb_tensor fake = *a;
    atomic_init(&fake.refcount, 1 << 20);
    fake.storage = &fake_storage;
    fake.base = NULL;
    fake.grad = NULL;
    fake.grad_fn = NULL;
    NBT_FAILS(nb_add(a, &fake) == NULL, NB_ERR_DEVICE, "add", "cpu (argument 0)", "cuda:0 (argument 1)", NULL);
    NBT_FAILS(nb_mul(&fake, a) == NULL, NB_ERR_DEVICE, "mul", "cuda:0 (argument 0)", "cpu (argument 1)", NULL);
    NBT_FAILS(nb_matmul(a, &fake) == NULL, NB_ERR_DEVICE, "cpu", "cuda:0", NULL);
    NBT_FAILS(nb_cat((nb_tensor *[]){a, &fake}, 2, 0) == NULL, NB_ERR_DEVICE, "cat", "cuda:0", NULL);
    NBT_FAILS(nb_where(NBT_CHECK(nb_gt_scalar(a, 0)), a, &fake) == NULL, NB_ERR_DEVICE, "where", "cuda:0", NULL);
    NBT_FAILS(nb_index_select(&fake, 0, idx) == NULL, NB_ERR_DEVICE, "index_select", "cuda:0", "cpu", NULL);
    NBT_FAILS(nb_add_(a, &fake) != NB_OK, NB_ERR_DEVICE, "cuda:0", NULL);
    nb_scope_end(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_creation),      cmocka_unit_test(test_creation_errors),
        cmocka_unit_test(test_views),         cmocka_unit_test(test_view_errors),
        cmocka_unit_test(test_copy_and_dtype), cmocka_unit_test(test_large_copies), cmocka_unit_test(test_devices),
        cmocka_unit_test(test_scopes_and_refcounts), cmocka_unit_test(test_threads),
        cmocka_unit_test(test_dtype_helpers), cmocka_unit_test(test_mixed_devices),
    };
    return NBT_RUN(tests);
}
