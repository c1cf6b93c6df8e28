/* The backward-rule table, built from ops.def. Every op may have a rule nb__bw_<ID> in one of
 * the rules_*.c files; the references are weak so that an op without one has a NULL slot
 * (backward through it is an error naming it). Weak references do not pull an object out of a
 * static library, so rules_anchor.c holds a strong reference into each rules file, and this file
 * references the anchor. */
#include "autograd/autograd_impl.h"

#define X(id, name, family)                                                                      \
    __attribute__((weak, visibility("hidden"))) nb_status nb__bw_##id(nb_node *node, nb_tensor *g, nb_tensor **grad_in);
#include "core/ops.def"
#undef X

static const nb_backward_fn rules[NB_OP_COUNT] = {
#define X(id, name, family) [NB_OP_##id] = nb__bw_##id,
#include "core/ops.def"
#undef X
};

extern const void *const nb__rules_anchor[];

nb_backward_fn nb__backward_rule(nb_op op)
{
    /* keeps the anchor (and so every rules file) in a static link */
    __asm__ volatile("" : : "r"(nb__rules_anchor));
    return (unsigned)op < NB_OP_COUNT ? rules[op] : NULL;
}
