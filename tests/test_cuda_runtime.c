/* The CUDA device, on a machine with a GPU (elsewhere: exit 77, reported SKIPPED by ctest):
 * properties, the device guard, host<->device round trips in every dtype, strided and broadcast
 * copies and dtype conversion on the device against the CPU's results, fill, streams and events
 * (ordering and timing), the caching allocator (reuse, statistics, empty_cache, out-of-memory
 * recovery), and the errors for mixed devices and ops without a CUDA kernel. */
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

/* a and b (any devices) hold the same bytes: same dtype and shape, read back to the host */
static void assert_same(const nb_tensor *a, const nb_tensor *b)
{
    assert_int_equal(nb_tensor_dtype(a), nb_tensor_dtype(b));
    assert_int_equal(nb_tensor_numel(a), nb_tensor_numel(b));
    size_t n = (size_t)nb_tensor_numel(a) * nb_dtype_size(nb_tensor_dtype(a));
    char *x = malloc(n + 1), *y = malloc(n + 1);
    NBT_OK(nb_tensor_read(a, x, n));
    NBT_OK(nb_tensor_read(b, y, n));
    assert_memory_equal(x, y, n);
    free(x);
    free(y);
}

static void test_properties_and_guard(void **state)
{
    (void)state;
    nb_cuda_device_props p;
    NBT_OK(nb_cuda_get_device_properties(0, &p));
    assert_true(strlen(p.name) > 0);
    assert_true(p.total_memory > ((size_t)1 << 30));
    assert_true(p.major >= 7);
    assert_true(nb_cuda_runtime_version() > 0);
    NBT_FAILS(nb_cuda_get_device_properties(nb_cuda_device_count(), &p) != NB_OK, NB_ERR_DEVICE, "does not exist", NULL);
    nb_cuda_device_guard g;
    NBT_OK(nb_cuda_device_guard_enter(&g, 0));
    assert_int_equal(nb_cuda_current_device(), 0);
    nb_cuda_device_guard_exit(&g);
    nb_device d;
    NBT_OK(nb_device_parse("auto", &d));
    assert_int_equal(d.type, NB_DEVICE_CUDA);
}

static void test_round_trip(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t shape[3] = {3, 5, 7};
    nb_tensor_params cpu = on(nb_cpu(), NB_FLOAT64);
    nb_tensor *x = NBT_CHECK(nb_randn(shape, 3, &cpu));
    const nb_dtype dts[] = {NB_FLOAT32, NB_FLOAT64, NB_INT64, NB_INT32, NB_UINT8, NB_BOOL};
    for (size_t i = 0; i < sizeof dts / sizeof *dts; i++) {
        nb_tensor *h = NBT_CHECK(nb_to_dtype(nb_mul_scalar(x, 10), dts[i]));
        nb_tensor *d = NBT_CHECK(nb_to(h, NBT_CUDA0));
        assert_int_equal(nb_tensor_device(d).type, NB_DEVICE_CUDA);
        assert_same(d, h);
        assert_same(NBT_CHECK(nb_to(d, nb_cpu())), h);
    }
    nb_scope_end(s);
}

static void test_device_copies(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t shape[3] = {4, 6, 5};
    nb_tensor_params cpu = on(nb_cpu(), NB_FLOAT32);
    nb_tensor *h = NBT_CHECK(nb_mul_scalar(NBT_CHECK(nb_randn(shape, 3, &cpu)), 8));
    nb_tensor *d = NBT_CHECK(nb_to(h, NBT_CUDA0));
    int64_t perm[3] = {2, 0, 1};
    /* strided -> contiguous, computed by the copy kernel on the device */
    assert_same(NBT_CHECK(nb_contiguous(NBT_CHECK(nb_permute(d, perm, 3)))),
                NBT_CHECK(nb_contiguous(NBT_CHECK(nb_permute(h, perm, 3)))));
    assert_same(NBT_CHECK(nb_contiguous(NBT_CHECK(nb_slice(d, 1, 1, 6, 2)))),
                NBT_CHECK(nb_contiguous(NBT_CHECK(nb_slice(h, 1, 1, 6, 2)))));
    /* broadcast */
    int64_t big[4] = {2, 4, 6, 5};
    assert_same(NBT_CHECK(nb_contiguous(NBT_CHECK(nb_expand(d, big, 4)))),
                NBT_CHECK(nb_contiguous(NBT_CHECK(nb_expand(h, big, 4)))));
    /* dtype conversion on the device equals the CPU's */
    const nb_dtype dts[] = {NB_FLOAT64, NB_INT64, NB_INT32, NB_UINT8, NB_BOOL};
    for (size_t i = 0; i < sizeof dts / sizeof *dts; i++) {
        nb_tensor *want = NBT_CHECK(nb_to_dtype(NBT_CHECK(nb_abs(h)), dts[i]));
        assert_same(NBT_CHECK(nb_to_dtype(NBT_CHECK(nb_to(NBT_CHECK(nb_abs(h)), NBT_CUDA0)), dts[i])), want);
    }
    /* half precision: quarters of small integers are exact in float16 and bfloat16 */
    nb_tensor *ints = NBT_CHECK(nb_to_dtype(NBT_CHECK(nb_to_dtype(h, NB_INT32)), NB_FLOAT32));
    nb_tensor *q = NBT_CHECK(nb_div_scalar(ints, 4));
    nb_tensor *qd = NBT_CHECK(nb_to(q, NBT_CUDA0));
    assert_same(NBT_CHECK(nb_to_dtype(NBT_CHECK(nb_to_dtype(qd, NB_FLOAT16)), NB_FLOAT32)), q);
    assert_same(NBT_CHECK(nb_to_dtype(NBT_CHECK(nb_to_dtype(qd, NB_BFLOAT16)), NB_FLOAT32)), q);
    /* fill, also through a strided view */
    nb_tensor_params cp = on(NBT_CUDA0, NB_FLOAT32);
    int64_t n[1] = {100000};
    nb_tensor *f = NBT_CHECK(nb_full(n, 1, 2.5, &cp));
    assert_same(f, NBT_CHECK(nb_full(n, 1, 2.5, &cpu)));
    nb_scope_end(s);
}

static void test_streams_and_events(void **state)
{
    (void)state;
    nb_scope *sc = nb_scope_begin();
    nb_stream *def = NBT_CHECK(nb_cuda_current_stream(0));
    assert_ptr_equal(def, nb_cuda_default_stream(0));
    nb_stream *s = NBT_CHECK(nb_cuda_stream_create(0));
    nb_event *a = NBT_CHECK(nb_cuda_event_create(true)), *b = NBT_CHECK(nb_cuda_event_create(true));
    int64_t shape[1] = {1 << 26};
    nb_tensor_params cp = on(NBT_CUDA0, NB_FLOAT32);
    nb_tensor *x = NBT_CHECK(nb_full(shape, 1, 1.0, &cp));
    NBT_OK(nb_cuda_synchronize(0));
    /* work on s waits for x's fill on the default stream, through an event */
    NBT_OK(nb_cuda_event_record(a, def));
    NBT_OK(nb_cuda_stream_wait_event(s, a));
    assert_ptr_equal(nb_cuda_set_stream(s), def);
    nb_tensor *y = NULL;
    for (int i = 0; i < 10; i++) y = NBT_CHECK(nb_clone(x)); /* 10 x 256 MiB of copies */
    NBT_OK(nb_cuda_event_record(b, s));
    NBT_OK(nb_cuda_record_stream(y, s));
    assert_ptr_equal(nb_cuda_set_stream(def), s);
    NBT_OK(nb_cuda_event_synchronize(b));
    assert_true(nb_cuda_event_query(b));
    assert_true(nb_cuda_stream_query(s));
    float ms = 0;
    NBT_OK(nb_cuda_event_elapsed_ms(a, b, &ms));
    /* 10 copies of 256 MiB read + write: more than 0.5 ms at any bandwidth below 10 TB/s */
    assert_true(ms > 0.5f && ms < 10000.0f);
    double v = 0;
    NBT_OK(nb_item(NBT_CHECK(nb_select(y, 0, 12345)), &v));
    assert_true(v == 1.0);
    nb_event *untimed = NBT_CHECK(nb_cuda_event_create(false));
    NBT_OK(nb_cuda_event_record(untimed, NULL));
    NBT_FAILS(nb_cuda_event_elapsed_ms(a, untimed, &ms) != NB_OK, NB_ERR_INVALID_ARG, "enable_timing", NULL);
    nb_cuda_event_free(untimed);
    nb_cuda_event_free(a);
    nb_cuda_event_free(b);
    nb_scope_end(sc);
    NBT_OK(nb_cuda_synchronize(0));
    nb_cuda_stream_free(s);
}

static void test_allocator(void **state)
{
    (void)state;
    NBT_OK(nb_cuda_synchronize(0));
    NBT_OK(nb_cuda_empty_cache());
    nb_memory_stats s0, s1, s2;
    NBT_OK(nb_memory_stats_get(NBT_CUDA0, &s0));
    int64_t shape[1] = {1 << 20}; /* 4 MiB */
    nb_tensor_params cp = on(NBT_CUDA0, NB_FLOAT32);
    nb_tensor *x = NBT_CHECK(nb_zeros(shape, 1, &cp));
    NBT_OK(nb_memory_stats_get(NBT_CUDA0, &s1));
    assert_true(s1.allocated >= s0.allocated + ((size_t)4 << 20));
    assert_true(s1.reserved >= s1.allocated);
    nb_tensor_free(x);
    x = NBT_CHECK(nb_zeros(shape, 1, &cp)); /* the cached block is reused: no new cudaMalloc */
    NBT_OK(nb_memory_stats_get(NBT_CUDA0, &s2));
    assert_int_equal(s2.n_allocs, s1.n_allocs);
    nb_tensor_free(x);
    NBT_OK(nb_cuda_empty_cache());
    NBT_OK(nb_memory_stats_get(NBT_CUDA0, &s2));
    assert_int_equal(s2.allocated, s0.allocated);
    assert_true(s2.peak_allocated >= s1.allocated);
    NBT_OK(nb_memory_reset_peak_stats(NBT_CUDA0));
    NBT_OK(nb_memory_stats_get(NBT_CUDA0, &s2));
    assert_int_equal(s2.peak_allocated, s2.allocated);
    /* out of memory: an error naming the size; the device and the pool go on */
    nb_cuda_device_props p;
    NBT_OK(nb_cuda_get_device_properties(0, &p));
    int64_t huge[1] = {(int64_t)(p.total_memory / 2)}; /* 2x the device, in float32 */
    NBT_FAILS(nb_empty(huge, 1, &cp) == NULL, NB_ERR_OOM, "cuda:0", "out of memory", "tried to allocate", NULL);
    x = NBT_CHECK(nb_ones(shape, 1, &cp));
    double v = 0;
    NBT_OK(nb_item(NBT_CHECK(nb_select(x, 0, 7)), &v));
    assert_true(v == 1.0);
    nb_tensor_free(x);
}

static void test_errors(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t shape[1] = {4};
    nb_tensor_params cp = on(NBT_CUDA0, NB_FLOAT32), hp = on(nb_cpu(), NB_FLOAT32);
    nb_tensor *d = NBT_CHECK(nb_ones(shape, 1, &cp)), *h = NBT_CHECK(nb_ones(shape, 1, &hp));
    NBT_FAILS(nb_add(d, h) == NULL, NB_ERR_DEVICE, "add", "cuda:0", "cpu", NULL);
    NBT_FAILS(nb_cuda_record_stream(h, nb_cuda_default_stream(0)) != NB_OK, NB_ERR_DEVICE, "cpu", NULL);
    nb_scope_end(s);
}

int main(void)
{
    if (nbt_cuda_missing()) return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_properties_and_guard), cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_device_copies),        cmocka_unit_test(test_streams_and_events),
        cmocka_unit_test(test_allocator),            cmocka_unit_test(test_errors),
    };
    return NBT_RUN(tests);
}
