/* Scopes: per-thread stacks of tensor references released together. */
#include <stdlib.h>

#include "core/tensor_impl.h"

struct nb_scope {
    nb_scope *parent;
    nb_tensor **items;
    size_t n, cap;
    bool failed; /* a tracked reference could not be recorded (OOM): released at once instead */
};

static _Thread_local nb_scope *tl_top = NULL;

nb_scope *nb_scope_begin(void)
{
    nb_scope *s = calloc(1, sizeof *s);
    if (!s) return nb__err_null(NB_ERR_OOM, "scope_begin: out of memory");
    s->parent = tl_top;
    tl_top = s;
    return s;
}

static void scope_close(nb_scope *s)
{
    for (size_t i = s->n; i-- > 0;) nb__release(s->items[i]);
    free(s->items);
    free(s);
}

static bool scope_is_open(nb_scope *s)
{
    for (nb_scope *p = tl_top; p; p = p->parent)
        if (p == s) return true;
    return false;
}

void nb_scope_end(nb_scope *s)
{
    if (!s || !scope_is_open(s)) return;
    while (tl_top != s) {
        nb_scope *inner = tl_top;
        tl_top = inner->parent;
        scope_close(inner);
    }
    tl_top = s->parent;
    scope_close(s);
}

nb_tensor *nb_scope_end_keep(nb_scope *s, nb_tensor *keep)
{
    nb_tensor *held = keep ? nb_tensor_retain(keep) : NULL;
    nb_scope_end(s);
    return nb__track(held);
}

nb_tensor *nb__track(nb_tensor *t)
{
    nb_scope *s = tl_top;
    if (!t || !s) return t;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        nb_tensor **items = realloc(s->items, cap * sizeof *items);
        if (!items) {
            /* Cannot record it: the caller cannot know, so keep it alive (leaked) rather than
             * hand out a dangling pointer. Out of memory here means bigger trouble anyway. */
            s->failed = true;
            return t;
        }
        s->items = items;
        s->cap = cap;
    }
    s->items[s->n++] = t;
    return t;
}
