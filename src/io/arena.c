/* The readers' arena (arena_impl.h): blocks of 64 KiB, or one of its own for a larger request,
 * newest first. */
#include <stdlib.h>

#include "io/arena_impl.h"

#define ARENA_BLOCK (64u << 10)

struct nb_io_block {
    struct nb_io_block *next;
    size_t used, cap;
    max_align_t data[];
};

void *nb__io_arena_alloc(nb_io_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct nb_io_block *b = a->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = a->blocks;
        a->blocks = b;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    a->bytes += n;
    return p;
}

void nb__io_arena_free(nb_io_arena *a)
{
    for (struct nb_io_block *b = a->blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    a->blocks = NULL;
    a->bytes = 0;
}
