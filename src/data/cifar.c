/* CIFAR-10 binary batches: records of 1 label byte and 3072 pixel bytes (3 planes of 32x32,
 * red, green, blue), no header. */
#include <errno.h>
#include <string.h>

#include "core/error_impl.h"
#include "core/tensor_impl.h"
#include "nabla/data.h"

#define CIFAR_PIXELS 3072
#define CIFAR_RECORD (1 + CIFAR_PIXELS)

/* The file's size; -1 with the error set when it cannot be read. */
static int64_t file_size(FILE *f, const char *path)
{
    if (fseek(f, 0, SEEK_END) != 0) return nb__err(NB_ERR_IO, "read_cifar10: %s: cannot seek: %s", path, strerror(errno)), -1;
    long n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0)
        return nb__err(NB_ERR_IO, "read_cifar10: %s: cannot seek: %s", path, strerror(errno)), -1;
    return n;
}

/* Splits n records of buf into images [n, 3, 32, 32] and labels [n]. */
static nb_status split_records(const uint8_t *buf, int64_t n, const char *path, nb_tensor *img, nb_tensor *lab)
{
    uint8_t *px = (uint8_t *)nb__data(img);
    int64_t *ly = (int64_t *)nb__data(lab);
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *rec = buf + i * CIFAR_RECORD;
        if (rec[0] > 9)
            return nb__err(NB_ERR_FORMAT, "read_cifar10: %s: record %lld has label %d (CIFAR-10 labels are 0..9)",
                           path, (long long)i, rec[0]);
        ly[i] = rec[0];
        memcpy(px + i * CIFAR_PIXELS, rec + 1, CIFAR_PIXELS);
    }
    return NB_OK;
}

nb_status nb_read_cifar10(const char *path, nb_tensor **images, nb_tensor **labels)
{
    if (images) *images = NULL;
    if (labels) *labels = NULL;
    if (!path || !images || !labels) return nb__err(NB_ERR_INVALID_ARG, "read_cifar10: NULL argument");
    FILE *f = fopen(path, "rb");
    if (!f) return nb__err(NB_ERR_IO, "read_cifar10: cannot open %s: %s", path, strerror(errno));
    int64_t size = file_size(f, path);
    if (size < 0) {
        fclose(f);
        return nb_last_status();
    }
    if (size == 0 || size % CIFAR_RECORD != 0) {
        fclose(f);
        return nb__err(NB_ERR_FORMAT, "read_cifar10: %s: size %lld bytes is not a positive multiple of the %d-byte record",
                       path, (long long)size, CIFAR_RECORD);
    }
    int64_t n = size / CIFAR_RECORD;
    uint8_t *buf = malloc((size_t)size);
    if (!buf) {
        fclose(f);
        return nb__err(NB_ERR_OOM, "read_cifar10: %s: cannot allocate %lld bytes", path, (long long)size);
    }
    size_t got = fread(buf, 1, (size_t)size, f);
    fclose(f);
    if ((int64_t)got != size) {
        free(buf);
        return nb__err(NB_ERR_IO, "read_cifar10: %s: read %zu of %lld bytes", path, got, (long long)size);
    }
    int64_t ishape[4] = {n, 3, 32, 32};
    nb_tensor *img = nb__tensor_new_named("read_cifar10", ishape, 4, NB_UINT8, nb_cpu());
    nb_tensor *lab = img ? nb__tensor_new_named("read_cifar10", &n, 1, NB_INT64, nb_cpu()) : NULL;
    nb_status s = lab ? split_records(buf, n, path, img, lab) : nb_last_status();
    free(buf);
    if (s != NB_OK) {
        nb__release(img);
        nb__release(lab);
        return s;
    }
    *images = nb__track(img);
    *labels = nb__track(lab);
    return NB_OK;
}
