/* Internal to the pickle reader (pickle.c, pickle_globals.c): the allow-list of globals.
 *
 * A GLOBAL opcode names module.name; the reader accepts only the names listed here, those
 * torch.load(weights_only=True) accepts for a state dict, and keeps the index as a PK_GLOBAL
 * value. The fixed names come first; torch's typed storage classes (torch.FloatStorage) are
 * PK_G_STORAGE + their element type's index in nb__torch_elems, its dtypes (torch.float32)
 * PK_G_DTYPE + the same index. What a call to each does is pickle.c's REDUCE.
 */
#ifndef NB_IO_PICKLE_IMPL_H
#define NB_IO_PICKLE_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

enum {
    PK_G_ORDERED_DICT,
    PK_G_REBUILD_V2,
    PK_G_REBUILD_V3,
    PK_G_REBUILD_PARAMETER,
    PK_G_REBUILD_PARAMETER_STATE,
    PK_G_SIZE,
    PK_G_DEVICE,
    PK_G_SET,
    PK_G_FROZENSET,
    PK_G_CODECS_ENCODE,
    PK_G_UNTYPED_STORAGE,
    PK_G_FIXED_COUNT,
    PK_G_STORAGE = 64, /* + element type: torch.FloatStorage... */
    PK_G_DTYPE = 128   /* + element type: torch.float32... */
};

/* Whether s[0, n) is the string lit. */
static inline bool pk_eq(const char *s, size_t n, const char *lit)
{
    return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

/* The allow-list index of module.name (neither NUL-ended), or -1. */
int nb__pk_lookup_global(const char *mod, size_t mod_len, const char *name, size_t name_len);
/* "torch.float32", "collections.OrderedDict": global g's qualified name, written into buf. */
const char *nb__pk_global_qualname(int g, char *buf, size_t size);
/* "OrderedDict", "_rebuild_parameter": a fixed global's name without its module. */
const char *nb__pk_fixed_name(int g);

#endif
