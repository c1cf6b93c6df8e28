/* Pinned host memory and non-blocking copies, on a machine with a GPU (elsewhere: exit 77,
 * reported SKIPPED by ctest): pin_memory's values, is_pinned and errors; a non-blocking copy
 * returns before the work queued ahead of it has run and work queued after it sees its values;
 * a pinned block freed right after its copy was queued is not handed out again before the copy
 * has run; and a CUDA loader with pin_memory gives exactly the CPU loader's batches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbtest.h"
#include "nabla/cuda.h"

static nb_tensor_params on(nb_device d, nb_dtype dt)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.device = d;
    p.dtype = dt;
    return p;
}

/* Queues n float32 products of 4096 x 4096 matrices on the current stream of cuda:0 (about 2 ms
 * each on an H100 without TF32): work that keeps the stream busy while the host goes on. */
static void busy(int n)
{
    nb_scope *s = nb_scope_begin();
    int64_t shape[2] = {4096, 4096};
    nb_tensor_params cp = on(NBT_CUDA0, NB_FLOAT32);
    nb_tensor *a = NBT_CHECK(nb_full(shape, 2, 1e-3, &cp));
    for (int i = 0; i < n; i++) {
        nb_scope *si = nb_scope_begin();
        NBT_CHECK(nb_matmul(a, a));
        nb_scope_end(si);
    }
    nb_scope_end(s);
}

static bool stream_busy(void) { return !nb_cuda_stream_query(nb_cuda_current_stream(0)); }

static void test_pin_memory(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t shape[3] = {3, 5, 7};
    nb_tensor_params dp = on(nb_cpu(), NB_FLOAT64);
    nb_tensor *x = NBT_CHECK(nb_randn(shape, 3, &dp));
    nb_tensor *p = NBT_CHECK(nb_tensor_pin_memory(x));
    assert_true(nb_tensor_is_pinned(p));
    assert_false(nb_tensor_is_pinned(x));
    assert_true(nb_device_equal(nb_tensor_device(p), nb_cpu()));
    assert_int_equal(nb_tensor_dtype(p), NB_FLOAT64);
    assert_ptr_not_equal(nb_tensor_data_ptr(p), nb_tensor_data_ptr(x));
    assert_memory_equal(nb_tensor_data_ptr(p), nb_tensor_data_ptr(x), sizeof(double) * 105);
    assert_ptr_equal(NBT_CHECK(nb_tensor_pin_memory(p)), p); /* already pinned: itself */
    assert_true(nb_tensor_is_pinned(NBT_CHECK(nb_select(p, 0, 1)))); /* views share the storage */
    /* CPU ops take pinned tensors */
    nbt_assert_close(NBT_CHECK(nb_add(p, p)), NBT_CHECK(nb_mul_scalar(x, 2.0)), 0, 0, "pinned add");
    /* a non-contiguous source gives a contiguous pinned copy */
    nb_tensor *tx = NBT_CHECK(nb_transpose(x, 0, 2));
    nb_tensor *tp = NBT_CHECK(nb_tensor_pin_memory(tx));
    assert_true(nb_tensor_is_pinned(tp));
    assert_memory_equal(nb_tensor_data_ptr(tp), nb_tensor_data_ptr(NBT_CHECK(nb_contiguous(tx))), sizeof(double) * 105);
    /* round trips, synchronous and not, in two dtypes */
    nb_tensor *back = NBT_CHECK(nb_to(NBT_CHECK(nb_to_non_blocking(p, NBT_CUDA0)), nb_cpu()));
    assert_memory_equal(nb_tensor_data_ptr(back), nb_tensor_data_ptr(x), sizeof(double) * 105);
    back = NBT_CHECK(nb_to(NBT_CHECK(nb_to(p, NBT_CUDA0)), nb_cpu()));
    assert_memory_equal(nb_tensor_data_ptr(back), nb_tensor_data_ptr(x), sizeof(double) * 105);
    nb_tensor_params ip = on(nb_cpu(), NB_INT64);
    nb_tensor *iv = NBT_CHECK(nb_arange(-50, 50, 1, &ip));
    nb_tensor *id = NBT_CHECK(nb_to_non_blocking(NBT_CHECK(nb_tensor_pin_memory(iv)), NBT_CUDA0));
    assert_true(nb_device_equal(nb_tensor_device(id), NBT_CUDA0));
    int64_t got[100];
    NBT_OK(nb_tensor_read(id, got, sizeof got));
    for (int i = 0; i < 100; i++) assert_int_equal(got[i], i - 50);
    /* autograd sees a copy */
    nb_tensor_params gp = on(nb_cpu(), NB_FLOAT32);
    gp.requires_grad = true;
    nb_tensor *w = NBT_CHECK(nb_ones(shape, 3, &gp));
    nb_tensor *wp = NBT_CHECK(nb_tensor_pin_memory(w));
    NBT_OK(nb_backward(NBT_CHECK(nb_sum(nb_mul_scalar(wp, 3.0), NULL, 0, false)), NULL, NB_BACKWARD_DEFAULT));
    nb_tensor *threes = NBT_CHECK(nb_full(shape, 3, 3.0, NULL));
    nbt_assert_close(NBT_CHECK(nb_tensor_grad(w)), threes, 0, 0, "grad through pin_memory");
    /* errors */
    nb_tensor *xd = NBT_CHECK(nb_to(x, NBT_CUDA0));
    NBT_FAILS(nb_tensor_pin_memory(xd) == NULL, NB_ERR_DEVICE, "pin_memory", "cuda:0", NULL);
    NBT_FAILS(nb_tensor_pin_memory(NULL) == NULL, NB_ERR_INVALID_ARG, "pin_memory", NULL);
    assert_false(nb_tensor_is_pinned(xd));
    nb_scope_end(s);
}

/* A non-blocking copy returns while the work queued before it still runs; work queued after it
 * sees its values; its source, freed at once, is not handed out again before the copy ran. */
static void test_non_blocking_copy(void **state)
{
    (void)state;
    const int64_t n = (int64_t)1 << 24; /* 64 MiB of float32: 0 .. 2^24 - 1, all exact */
    nb_tensor_params fp = on(nb_cpu(), NB_FLOAT32);
    nb_tensor *src = NBT_CHECK(nb_arange(0, (double)n, 1, &fp));
    nb_tensor *h = NBT_CHECK(nb_tensor_pin_memory(src));
    nb_tensor *twos = NBT_CHECK(nb_full(&n, 1, 2.0, &fp));
    void *old = nb_tensor_data_ptr(h);
    busy(60);
    nb_tensor *d = NBT_CHECK(nb_to_non_blocking(h, NBT_CUDA0));
    assert_true(stream_busy()); /* the host did not wait for the copy */
    nb_tensor_free(h);
    nb_tensor *h2 = NBT_CHECK(nb_tensor_pin_memory(twos)); /* the same size: h's block would fit */
    assert_true(stream_busy()); /* else this run proves nothing: more busy work is needed */
    assert_ptr_not_equal(nb_tensor_data_ptr(h2), old);

    nb_scope *s = nb_scope_begin();
    nb_tensor *sum = NBT_CHECK(nb_sum(NBT_CHECK(nb_mul_scalar(d, 2.0)), NULL, 0, false));
    double v = 0, want = (double)n * (double)(n - 1);
    NBT_OK(nb_item(sum, &v));
    assert_true(v > want * (1 - 1e-6) && v < want * (1 + 1e-6));
    float *buf = malloc(sizeof(float) * (size_t)n);
    assert_non_null(buf);
    NBT_OK(nb_tensor_read(d, buf, sizeof(float) * (size_t)n));
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += buf[i] != (float)i;
    assert_int_equal(bad, 0);
    free(buf);
    /* once the copy has run, the block is reused */
    NBT_OK(nb_cuda_synchronize(0));
    nb_tensor *h3 = NBT_CHECK(nb_tensor_pin_memory(twos));
    assert_ptr_equal(nb_tensor_data_ptr(h3), old);
    nb_scope_end(s); /* frees h3 */
    nb_tensor_free(h2);
    nb_tensor_free(d);
    nb_tensor_free(twos);
    nb_tensor_free(src);
}

/* Sixteen pinned tensors of one size, each freed right after its copy was queued behind busy
 * work: were a block reused before its copy ran, the later fills would show in earlier copies. */
static void test_pinned_reuse_waits(void **state)
{
    (void)state;
    const int64_t n = (int64_t)1 << 18;
    nb_tensor_params fp = on(nb_cpu(), NB_FLOAT32);
    nb_tensor *d[16];
    busy(60);
    for (int k = 0; k < 16; k++) {
        nb_tensor *f = NBT_CHECK(nb_full(&n, 1, (double)k, &fp));
        nb_tensor *h = NBT_CHECK(nb_tensor_pin_memory(f));
        d[k] = NBT_CHECK(nb_to_non_blocking(h, NBT_CUDA0));
        nb_tensor_free(h);
        nb_tensor_free(f);
    }
    assert_true(stream_busy()); /* the copies were all queued behind the busy work */
    float *buf = malloc(sizeof(float) * (size_t)n);
    assert_non_null(buf);
    for (int k = 0; k < 16; k++) {
        NBT_OK(nb_tensor_read(d[k], buf, sizeof(float) * (size_t)n));
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) bad += buf[i] != (float)k;
        if (bad) fail_msg("copy %d: %lld of %lld values are not %d", k, (long long)bad, (long long)n, k);
        nb_tensor_free(d[k]);
    }
    free(buf);
}

/* Images [n, 2, 4, 5] of distinct values, labels 0..n-1. */
static nb_dataset *image_dataset(int64_t n)
{
    nb_scope *s = nb_scope_begin();
    int64_t shape[4] = {n, 2, 4, 5};
    nb_tensor *x = NBT_CHECK(nb_reshape(NBT_CHECK(nb_arange(1, (double)(n * 40 + 1), 1, NULL)), shape, 4));
    nb_tensor_params pi = on(nb_cpu(), NB_INT64);
    nb_tensor *y = NBT_CHECK(nb_arange(0, (double)n, 1, &pi));
    nb_dataset *d = NBT_CHECK(nb_dataset_from_tensors(x, y));
    nb_scope_end(s);
    return d;
}

#define MAX_BATCHES 64

/* Three epochs of a shuffled, augmented, normalised loader; xs/ys get the batches on the host
 * (scope-owned). Between batches, busy work is queued on the caller's stream. */
static int collect(nb_dataset *d, nb_device dev, bool pin, int prefetch, nb_tensor **xs, nb_tensor **ys)
{
    nb_data_loader_params p = nb_data_loader_params_default();
    p.batch_size = 6;
    p.shuffle = p.random_crop = p.hflip = true;
    p.crop_padding = 1;
    p.seed = 1234;
    p.prefetch = prefetch;
    p.norm_channels = 2;
    p.mean[0] = 3.0f, p.mean[1] = -1.0f, p.std[0] = 2.0f, p.std[1] = 0.5f;
    p.device = dev;
    p.pin_memory = pin;
    nb_data_loader *l = NBT_CHECK(nb_data_loader_create(d, &p));
    int n = 0;
    for (int e = 0; e < 3; e++) {
        bool done = false;
        for (;;) {
            nb_tensor *x, *y;
            NBT_OK(nb_data_loader_next(l, &x, &y, &done));
            if (done) break;
            assert_true(n < MAX_BATCHES);
            assert_true(nb_device_equal(nb_tensor_device(x), dev));
            assert_true(nb_device_equal(nb_tensor_device(y), dev));
            if (dev.type == NB_DEVICE_CUDA) {
                assert_false(nb_tensor_is_pinned(x));
                busy(1); /* the caller's stream is busy while the loader copies the next batches */
            }
            xs[n] = NBT_CHECK(nb_to(x, nb_cpu()));
            ys[n] = NBT_CHECK(nb_to(y, nb_cpu()));
            n++;
        }
    }
    nb_data_loader_free(l);
    return n;
}

/* A CUDA loader with pin_memory gives exactly the CPU loader's batches: with and without the
 * background thread, from the default stream and from a stream of the caller's. */
static void test_loader_pinned(void **state)
{
    (void)state;
    nb_dataset *d = image_dataset(41);
    nb_scope *s = nb_scope_begin();
    nb_tensor *xs[MAX_BATCHES], *ys[MAX_BATCHES], *gx[MAX_BATCHES], *gy[MAX_BATCHES];
    int n = collect(d, nb_cpu(), false, 2, xs, ys);
    assert_int_equal(n, 3 * 7);
    nb_stream *user = NBT_CHECK(nb_cuda_stream_create(0));
    for (int variant = 0; variant < 4; variant++) {
        nb_stream *prev = variant >= 2 ? NBT_CHECK(nb_cuda_set_stream(user)) : NULL;
        int m = collect(d, NBT_CUDA0, true, variant % 2 ? 3 : 0, gx, gy);
        if (prev) nb_cuda_set_stream(prev);
        assert_int_equal(m, n);
        for (int i = 0; i < n; i++) {
            assert_int_equal(nb_tensor_numel(gx[i]), nb_tensor_numel(xs[i]));
            assert_int_equal(nb_tensor_numel(gy[i]), nb_tensor_numel(ys[i]));
            size_t nx = sizeof(float) * (size_t)nb_tensor_numel(xs[i]);
            size_t ny = sizeof(int64_t) * (size_t)nb_tensor_numel(ys[i]);
            assert_memory_equal(nb_tensor_data_ptr(gx[i]), nb_tensor_data_ptr(xs[i]), nx);
            assert_memory_equal(nb_tensor_data_ptr(gy[i]), nb_tensor_data_ptr(ys[i]), ny);
        }
    }
    NBT_OK(nb_cuda_synchronize(0));
    nb_cuda_stream_free(user);
    /* the CPU device with pin_memory: pinned CPU batches with the same values */
    nb_data_loader_params p = nb_data_loader_params_default();
    p.batch_size = 41;
    p.pin_memory = true;
    nb_data_loader *l = NBT_CHECK(nb_data_loader_create(d, &p));
    nb_tensor *x, *y;
    bool done;
    NBT_OK(nb_data_loader_next(l, &x, &y, &done));
    assert_true(nb_tensor_is_pinned(x) && nb_tensor_is_pinned(y));
    float want[41 * 40];
    for (int i = 0; i < 41 * 40; i++) want[i] = (float)(i + 1);
    assert_memory_equal(nb_tensor_data_ptr(x), want, sizeof want);
    nb_data_loader_free(l);
    nb_scope_end(s);
    nb_dataset_free(d);
}

int main(void)
{
    if (nbt_cuda_missing()) return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pin_memory),
        cmocka_unit_test(test_non_blocking_copy),
        cmocka_unit_test(test_pinned_reuse_waits),
        cmocka_unit_test(test_loader_pinned),
    };
    return NBT_RUN(tests);
}
