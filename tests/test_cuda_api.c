/* nabla/cuda.h where there is no GPU (or no CUDA in the build): no devices, `auto` is the CPU,
 * and every call that needs a device fails with NB_ERR_DEVICE and a message saying why. On a
 * machine with a GPU these paths do not apply: the test reports itself skipped (exit 77) and
 * test_cuda_runtime covers the device. */
#include <stdio.h>

#include "nbtest.h"
#include "nabla/cuda.h"

static const char *why(void) { return nb_cuda_is_built() ? "no CUDA device" : "built without CUDA"; }

static void test_no_device(void **state)
{
    (void)state;
    assert_int_equal(nb_cuda_device_count(), 0);
    assert_false(nb_cuda_is_available());
    nb_device d;
    NBT_OK(nb_device_parse("auto", &d));
    assert_int_equal(d.type, NB_DEVICE_CPU);
    NBT_FAILS(nb_device_parse("cuda", &d) != NB_OK, NB_ERR_DEVICE, "cuda", NULL);
    nb_cuda_device_props p;
    NBT_FAILS(nb_cuda_get_device_properties(0, &p) != NB_OK, NB_ERR_DEVICE, "cuda_get_device_properties", why(), NULL);
    NBT_FAILS(nb_cuda_set_device(0) != NB_OK, NB_ERR_DEVICE, "cuda_set_device", NULL);
    NBT_FAILS(nb_cuda_stream_create(0) == NULL, NB_ERR_DEVICE, "cuda_stream_create", why(), NULL);
    NBT_FAILS(nb_cuda_current_stream(-1) == NULL, NB_ERR_DEVICE, "cuda_current_stream", NULL);
    NBT_FAILS(nb_cuda_event_create(true) == NULL, NB_ERR_DEVICE, "cuda_event_create", NULL);
    NBT_FAILS(nb_cuda_synchronize(-1) != NB_OK, NB_ERR_DEVICE, "cuda_synchronize", NULL);
    NBT_FAILS(nb_cuda_graph_create(0) == NULL, NB_ERR_DEVICE, "cuda_graph_create", why(), NULL);
    assert_false(nb_cuda_is_capturing(-1));
    nb_cuda_graph_free(NULL);
    nb_cuda_device_guard g;
    NBT_OK(nb_cuda_device_guard_enter(&g, -1)); /* -1: stay where we are, which always works */
    nb_cuda_device_guard_exit(&g);
    NBT_FAILS(nb_cuda_device_guard_enter(&g, 0) != NB_OK, NB_ERR_DEVICE, "cuda_device_guard_enter", NULL);
    nb_cuda_device_guard_exit(&g); /* after a failed enter: a no-op */
    NBT_OK(nb_cuda_empty_cache());
    nb_tensor_params tp = nb_tensor_params_default();
    tp.device = (nb_device){NB_DEVICE_CUDA, 0};
    int64_t shape[1] = {4};
    NBT_FAILS(nb_zeros(shape, 1, &tp) == NULL, NB_ERR_DEVICE, "cuda:0", NULL);
}

int main(void)
{
    if (nb_cuda_device_count() > 0) {
        printf("SKIPPED: a CUDA device is present (test_cuda_runtime covers it)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_no_device)};
    return NBT_RUN(tests);
}
