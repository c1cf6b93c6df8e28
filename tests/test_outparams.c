/* core.h's promise, for every public function with an out-parameter: after a failure each
 * out-parameter is set (tensors and maps to NULL, devices to the CPU), whatever it held before,
 * so a caller that frees or tests it never touches a stale pointer. Each case fills the
 * out-parameters with a sentinel, makes the call fail in a way the header names, and checks the
 * status, the message and every out-parameter. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nbtest.h"

/* A pointer no call returns: a failure must overwrite it. */
#define STALE ((nb_tensor *)(uintptr_t)0x10)

static nb_tensor *matrix(void) { return NBT_CHECK(nb_ones((int64_t[]){2, 3}, 2, NULL)); }

static void test_reductions_with_indices(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_tensor *m = matrix(), *idx = STALE;
    NBT_FAILS(nb_max_dim(m, 5, false, &idx) == NULL, NB_ERR_INVALID_ARG, "max", "5", NULL);
    assert_null(idx);
    idx = STALE;
    NBT_FAILS(nb_min_dim(NULL, 0, false, &idx) == NULL, NB_ERR_INVALID_ARG, "min", NULL);
    assert_null(idx);
    idx = STALE;
    NBT_FAILS(nb_sort(m, -3, false, &idx) == NULL, NB_ERR_INVALID_ARG, "sort", "-3", NULL);
    assert_null(idx);
    idx = STALE;
    NBT_FAILS(nb_topk(m, 4, 1, true, true, &idx) == NULL, NB_ERR_INVALID_ARG, "topk", "4", NULL);
    assert_null(idx);
    nb_scope_end(s);
}

static void test_lstm_states(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_module *lstm = NBT_CHECK(nb_lstm_module(4, 3, 1, false, true, NULL));
    nb_tensor *x = NBT_CHECK(nb_zeros((int64_t[]){2, 1, 5}, 3, NULL)); /* feature size 5, not 4 */
    nb_tensor *h = STALE, *c = STALE;
    NBT_FAILS(nb_lstm_module_forward(lstm, x, NULL, NULL, &h, &c) == NULL, NB_ERR_SHAPE, "LSTM", "5", NULL);
    assert_null(h);
    assert_null(c);
    h = c = STALE;
    NBT_FAILS(nb_lstm(x, NULL, NULL, NULL, 0, 1, NULL, &h, &c) == NULL, NB_ERR_INVALID_ARG, "lstm", NULL);
    assert_null(h);
    assert_null(c);
    nb_module_free(lstm);
    nb_scope_end(s);
}

static void test_files(void **state)
{
    (void)state;
    nb_tensor *img = STALE, *lab = STALE;
    NBT_FAILS(nb_read_cifar10("/nonexistent/data_batch_1.bin", &img, &lab) != NB_OK, NB_ERR_IO,
              "/nonexistent/data_batch_1.bin", NULL);
    assert_null(img);
    assert_null(lab);
    nb_tensor_map *map = (nb_tensor_map *)STALE;
    NBT_FAILS(nb_safetensors_load("/nonexistent/model.safetensors", nb_cpu(), &map) != NB_OK, NB_ERR_IO,
              "/nonexistent/model.safetensors", NULL);
    assert_null(map);
    map = (nb_tensor_map *)STALE;
    NBT_FAILS(nb_torch_load("/nonexistent/model.pt", nb_cpu(), &map) != NB_OK, NB_ERR_IO, "/nonexistent/model.pt", NULL);
    assert_null(map);
}

/* The loader's next: a dataset whose second sample fails. */
static int64_t two(void *u) { return 2; }

static nb_status get_fails_at_1(void *u, int64_t i, float *x, int64_t *y)
{
    if (i == 1) {
        nb_tensor *t = nb_zeros((int64_t[]){-1}, 1, NULL); /* a failing call sets the error */
        (void)t;
        return nb_last_status();
    }
    x[0] = 0;
    *y = 0;
    return NB_OK;
}

static void test_loader_next(void **state)
{
    (void)state;
    nb_dataset_funcs f = {.size = two, .get = get_fails_at_1, .sample_ndim = 1, .sample_shape = {1}};
    nb_dataset *d = NBT_CHECK(nb_dataset_create(&f));
    nb_data_loader_params p = nb_data_loader_params_default();
    p.batch_size = 1;
    p.prefetch = 0;
    nb_data_loader *l = NBT_CHECK(nb_data_loader_create(d, &p));
    nb_tensor *x = STALE, *y = STALE;
    bool done = true;
    NBT_OK(nb_data_loader_next(l, &x, &y, &done)); /* sample 0 */
    assert_false(done);
    nb_tensor_free(x);
    nb_tensor_free(y);
    x = y = STALE;
    done = true;
    NBT_FAILS(nb_data_loader_next(l, &x, &y, &done) != NB_OK, NB_ERR_SHAPE, "-1", NULL);
    assert_null(x);
    assert_null(y);
    assert_false(done);
    nb_data_loader_free(l);
    nb_dataset_free(d);
}

static void test_plain_values(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_device dev = {NB_DEVICE_CUDA, 7};
    NBT_FAILS(nb_device_parse("tpu:0", &dev) != NB_OK, NB_ERR_DEVICE, "tpu:0", NULL);
    assert_true(nb_device_equal(dev, nb_cpu())); /* "*out is the CPU then" */
    nb_conv_algo algo = (nb_conv_algo)77;
    NBT_FAILS(nb_conv_algo_parse("fft", &algo) != NB_OK, NB_ERR_INVALID_ARG, "fft", NULL);
    assert_int_equal(algo, 77); /* documented: *out untouched */
    double v = 1.5;
    NBT_FAILS(nb_item(matrix(), &v) != NB_OK, NB_ERR_SHAPE, "item", NULL);
    assert_true(isnan(v));
    int64_t iv = 3;
    NBT_FAILS(nb_item_int64(NULL, &iv) != NB_OK, NB_ERR_INVALID_ARG, "item_int64", NULL);
    assert_int_equal(iv, 0);
    nb_scope_end(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reductions_with_indices),
        cmocka_unit_test(test_lstm_states),
        cmocka_unit_test(test_files),
        cmocka_unit_test(test_loader_next),
        cmocka_unit_test(test_plain_values),
    };
    return NBT_RUN(tests);
}
