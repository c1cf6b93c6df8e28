/* Shared by the libFuzzer targets: each input is written to a file under /dev/shm (the loaders
 * take paths), and every failure must leave a message that names the op. */
#ifndef NB_FUZZ_COMMON_H
#define NB_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nabla/core.h"

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

#endif
