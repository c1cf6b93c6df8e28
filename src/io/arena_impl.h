/* Internal: an arena for the parsed trees of src/io's readers (json.c, pickle.c): allocations
 * come from a few large blocks and are freed together. */
#ifndef NB_IO_ARENA_IMPL_H
#define NB_IO_ARENA_IMPL_H

#include <stddef.h>

typedef struct nb_io_arena {
    struct nb_io_block *blocks;
    size_t bytes; /* handed out so far, rounded as allocated */
} nb_io_arena;

/* n bytes aligned at 16, valid until nb__io_arena_free; NULL when out of memory. */
void *nb__io_arena_alloc(nb_io_arena *a, size_t n);
/* Frees every block; the arena is empty again. */
void nb__io_arena_free(nb_io_arena *a);

#endif
