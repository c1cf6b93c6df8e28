/* libFuzzer target: CIFAR-10 binary batches through nb_read_cifar10.
 *
 * Properties: a failure names read_cifar10 and leaves both outputs NULL; a success splits the
 * file into n records of a label (0..9) and 3072 pixel bytes, exactly. */
#include "fuzz_common.h"
#include "nabla/data.h"
#include "nabla/tensor.h"

static char path[128];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_init(path, sizeof path, "cifar", ".bin");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_write(path, data, size);
    nb_tensor *images = NULL, *labels = NULL;
    nb_status st = nb_read_cifar10(path, &images, &labels);
    if (st != NB_OK) {
        fuzz_check_error(st, "read_cifar10");
        FUZZ_ASSERT(!images && !labels);
        return 0;
    }
    const size_t rec = 1 + 3072;
    FUZZ_ASSERT(size > 0 && size % rec == 0);
    int64_t n = (int64_t)(size / rec);
    FUZZ_ASSERT(nb_tensor_numel(labels) == n && nb_tensor_numel(images) == n * 3072);
    const int64_t *lab = nb_tensor_data_ptr(labels);
    const uint8_t *px = nb_tensor_data_ptr(images);
    for (int64_t i = 0; i < n; i++) {
        FUZZ_ASSERT(lab[i] == data[i * rec] && lab[i] <= 9);
        FUZZ_ASSERT(memcmp(px + i * 3072, data + i * rec + 1, 3072) == 0);
    }
    nb_tensor_free(images);
    nb_tensor_free(labels);
    return 0;
}
