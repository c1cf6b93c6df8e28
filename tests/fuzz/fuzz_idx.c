/* libFuzzer target: IDX files (MNIST), plain and gzipped, through nb_read_idx.
 *
 * An input whose first byte is odd (but not 0x1f) is written through zlib as a gzip stream of the
 * remaining bytes, so that the gzip path sees well-formed streams of any content; otherwise the
 * bytes are the file: raw IDX, or (from 0x1f 0x8b) a gzip stream as the fuzzer mutates it.
 *
 * Properties: a failure names read_idx; a success gives a tensor of the header's dtype and shape
 * whose elements are the file's, byte-swapped from big-endian. */
#include <zlib.h>

#include "fuzz_common.h"
#include "nabla/data.h"
#include "nabla/tensor.h"

static char path[128];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_init(path, sizeof path, "idx", ".idx");
    return 0;
}

static size_t elem_size(uint8_t type)
{
    switch (type) {
    case 0x08: return 1;
    case 0x0C: return 4;
    case 0x0D: return 4;
    case 0x0E: return 8;
    default: return 0;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *body = data;
    size_t n = size;
    if (size > 0 && (data[0] & 1) && data[0] != 0x1f) {
        body = data + 1;
        n = size - 1;
        gzFile g = gzopen(path, "wb");
        FUZZ_ASSERT(g);
        FUZZ_ASSERT(n == 0 || gzwrite(g, body, (unsigned)n) == (int)n);
        FUZZ_ASSERT(gzclose(g) == Z_OK);
    } else {
        fuzz_write(path, data, size);
    }
    nb_tensor *t = nb_read_idx(path);
    if (!t) {
        fuzz_check_error(nb_last_status(), "read_idx");
        return 0;
    }
    /* only a plain header can be checked here: a raw gzip input decompresses to unknown bytes */
    if (body != data || (size > 0 && data[0] != 0x1f)) {
        FUZZ_ASSERT(n >= 4 && body[0] == 0 && body[1] == 0);
        size_t es = elem_size(body[2]);
        int ndim = body[3];
        FUZZ_ASSERT(es == nb_dtype_size(nb_tensor_dtype(t)) && ndim == nb_tensor_ndim(t));
        FUZZ_ASSERT(n >= 4 + 4 * (size_t)ndim);
        size_t numel = 1;
        for (int i = 0; i < ndim; i++) {
            const uint8_t *d = body + 4 + 4 * i;
            int64_t dim = ((int64_t)d[0] << 24) | ((int64_t)d[1] << 16) | ((int64_t)d[2] << 8) | d[3];
            FUZZ_ASSERT(nb_tensor_shape(t)[i] == dim);
            numel *= (size_t)dim;
        }
        const uint8_t *src = body + 4 + 4 * (size_t)ndim;
        FUZZ_ASSERT(n == 4 + 4 * (size_t)ndim + numel * es);
        const uint8_t *got = nb_tensor_data_ptr(t);
        for (size_t i = 0; i < numel; i++)
            for (size_t b = 0; b < es; b++) FUZZ_ASSERT(got[i * es + b] == src[i * es + es - 1 - b]);
    }
    nb_tensor_free(t);
    return 0;
}
