/* Shared by the libFuzzer targets: each input is written to a file under /dev/shm (the loaders
 * take paths), and every failure must leave a message that names the op. */
#ifndef NB_FUZZ_COMMON_H
#define NB_FUZZ_COMMON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/json_impl.h"
#include "nabla/core.h"
#include "nabla/io.h"
#include "nabla/module.h"
#include "nabla/tensor.h"

/* path_out gets "/dev/shm/nb-fuzz-<tag>-<pid><suffix>". */
static inline void fuzz_path(char *path_out, size_t cap, const char *tag, const char *suffix)
{
    snprintf(path_out, cap, "/dev/shm/nb-fuzz-%s-%d%s", tag, (int)getpid(), suffix);
}

/* A target's LLVMFuzzerInitialize: one thread (the harness is about memory safety, not speed) and
 * its input file's path. */
static inline void fuzz_init(char *path_out, size_t cap, const char *tag, const char *suffix)
{
    nb_set_num_threads(1);
    fuzz_path(path_out, cap, tag, suffix);
}

static inline void fuzz_write(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        fprintf(stderr, "fuzz: cannot write %s\n", path);
        abort();
    }
}

/* A failed call must set a status and a message beginning with the op's name. */
static inline void fuzz_check_error(nb_status st, const char *op)
{
    const char *msg = nb_last_error();
    if (st == NB_OK || nb_last_status() != st || !msg || strncmp(msg, op, strlen(op)) != 0) {
        fprintf(stderr, "fuzz: %s failed with status %d, last status %d, message '%s'\n", op, (int)st,
                (int)nb_last_status(), msg ? msg : "(null)");
        abort();
    }
}

#define FUZZ_ASSERT(cond)                                                                        \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "fuzz: %s:%d: %s\n", __FILE__, __LINE__, #cond);                     \
            abort();                                                                             \
        }                                                                                        \
    } while (0)

/* The small model whose load_state_dict a checkpoint target exercises: Linear(4, 3), ReLU,
 * Linear(3, 2), as a sequential ("0.weight", "0.bias", "2.weight", "2.bias"). */
static inline nb_module *fuzz_small_model(void)
{
    nb_module *children[3] = {nb_linear_module(4, 3, true, NULL), nb_relu_module(), nb_linear_module(3, 2, true, NULL)};
    nb_module *m = nb_sequential(children, 3);
    FUZZ_ASSERT(m);
    return m;
}

/* a and b hold the same tensors (names, dtypes, shapes, bytes); with `ordered`, also in the same
 * order and with the same metadata, in order. */
static inline void fuzz_check_same_maps(const nb_tensor_map *a, const nb_tensor_map *b, bool ordered)
{
    FUZZ_ASSERT(nb_tensor_map_size(a) == nb_tensor_map_size(b));
    for (int i = 0; i < nb_tensor_map_size(a); i++) {
        const char *name = nb_tensor_map_name(a, i);
        FUZZ_ASSERT(!ordered || strcmp(name, nb_tensor_map_name(b, i)) == 0);
        nb_tensor *x = nb_tensor_map_get(a, name), *y = nb_tensor_map_get(b, name);
        FUZZ_ASSERT(x && y);
        FUZZ_ASSERT(nb_tensor_dtype(x) == nb_tensor_dtype(y) && nb_tensor_ndim(x) == nb_tensor_ndim(y));
        for (int d = 0; d < nb_tensor_ndim(x); d++) FUZZ_ASSERT(nb_tensor_shape(x)[d] == nb_tensor_shape(y)[d]);
        size_t nbytes = (size_t)nb_tensor_numel(x) * nb_dtype_size(nb_tensor_dtype(x));
        FUZZ_ASSERT(nbytes == 0 || memcmp(nb_tensor_data_ptr(x), nb_tensor_data_ptr(y), nbytes) == 0);
    }
    if (!ordered) return;
    FUZZ_ASSERT(nb__tensor_map_metadata_count(a) == nb__tensor_map_metadata_count(b));
    for (int i = 0; i < nb__tensor_map_metadata_count(a); i++) {
        const char *k, *v, *k2, *v2;
        nb__tensor_map_metadata_at(a, i, &k, &v);
        nb__tensor_map_metadata_at(b, i, &k2, &v2);
        FUZZ_ASSERT(strcmp(k, k2) == 0 && strcmp(v, v2) == 0);
    }
}

#endif
