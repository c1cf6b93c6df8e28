/* torch's element types and the allow-list of globals the pickle reader accepts (see
 * pickle_impl.h): the names torch.load(weights_only=True) allows for a state dict, and nothing
 * else. Only names are looked up here; what calling one does is pickle.c's REDUCE.
 */
#include <stdio.h>

#include "io/pickle_impl.h"
#include "io/torchfile_impl.h"

/* ==== element types =========================================================================== */

const nb_torch_elem nb__torch_elems[] = {
    {"FloatStorage", "float32", NB_FLOAT32, 4},
    {"DoubleStorage", "float64", NB_FLOAT64, 8},
    {"HalfStorage", "float16", NB_FLOAT16, 2},
    {"BFloat16Storage", "bfloat16", NB_BFLOAT16, 2},
    {"LongStorage", "int64", NB_INT64, 8},
    {"IntStorage", "int32", NB_INT32, 4},
    {"ShortStorage", "int16", -1, 2},
    {"CharStorage", "int8", -1, 1},
    {"ByteStorage", "uint8", NB_UINT8, 1},
    {"BoolStorage", "bool", NB_BOOL, 1},
    {"ComplexFloatStorage", "complex64", -1, 8},
    {"ComplexDoubleStorage", "complex128", -1, 16},
    {"ComplexHalfStorage", "complex32", -1, 4},
    /* dtypes without a typed storage class (torch 2.x writes them with _rebuild_tensor_v3) */
    {NULL, "uint16", -1, 2},
    {NULL, "uint32", -1, 4},
    {NULL, "uint64", -1, 8},
    {NULL, "float8_e4m3fn", -1, 1},
    {NULL, "float8_e5m2", -1, 1},
};
const int nb__torch_elem_count = (int)(sizeof nb__torch_elems / sizeof nb__torch_elems[0]);

const nb_torch_elem *nb__torch_elem_of(nb_dtype dt)
{
    for (int i = 0; i < nb__torch_elem_count; i++)
        if (nb__torch_elems[i].nb == (int)dt) return &nb__torch_elems[i];
    return NULL;
}

/* ==== the allow-list ========================================================================== */

static const struct {
    const char *module, *name;
} fixed_globals[PK_G_FIXED_COUNT] = {
    [PK_G_ORDERED_DICT] = {"collections", "OrderedDict"},
    [PK_G_REBUILD_V2] = {"torch._utils", "_rebuild_tensor_v2"},
    [PK_G_REBUILD_V3] = {"torch._utils", "_rebuild_tensor_v3"},
    [PK_G_REBUILD_PARAMETER] = {"torch._utils", "_rebuild_parameter"},
    [PK_G_REBUILD_PARAMETER_STATE] = {"torch._utils", "_rebuild_parameter_with_state"},
    [PK_G_SIZE] = {"torch", "Size"},
    [PK_G_DEVICE] = {"torch", "device"},
    [PK_G_SET] = {"builtins", "set"},
    [PK_G_FROZENSET] = {"builtins", "frozenset"},
    [PK_G_CODECS_ENCODE] = {"_codecs", "encode"},
    [PK_G_UNTYPED_STORAGE] = {"torch.storage", "UntypedStorage"},
};

int nb__pk_lookup_global(const char *mod, size_t mod_len, const char *name, size_t name_len)
{
    /* protocol 2 writes Python 3's builtins under their Python 2 name */
    if (pk_eq(mod, mod_len, "__builtin__")) mod = "builtins", mod_len = 8;
    for (int g = 0; g < PK_G_FIXED_COUNT; g++)
        if (pk_eq(mod, mod_len, fixed_globals[g].module) && pk_eq(name, name_len, fixed_globals[g].name)) return g;
    if (pk_eq(mod, mod_len, "torch") && pk_eq(name, name_len, "UntypedStorage")) return PK_G_UNTYPED_STORAGE;
    if (!pk_eq(mod, mod_len, "torch")) return -1;
    for (int i = 0; i < nb__torch_elem_count; i++) {
        if (nb__torch_elems[i].storage && pk_eq(name, name_len, nb__torch_elems[i].storage)) return PK_G_STORAGE + i;
        if (pk_eq(name, name_len, nb__torch_elems[i].dtype)) return PK_G_DTYPE + i;
    }
    return -1;
}

const char *nb__pk_global_qualname(int g, char *buf, size_t size)
{
    if (g < PK_G_FIXED_COUNT) snprintf(buf, size, "%s.%s", fixed_globals[g].module, fixed_globals[g].name);
    else if (g >= PK_G_DTYPE) snprintf(buf, size, "torch.%s", nb__torch_elems[g - PK_G_DTYPE].dtype);
    else snprintf(buf, size, "torch.%s", nb__torch_elems[g - PK_G_STORAGE].storage);
    return buf;
}

const char *nb__pk_fixed_name(int g) { return fixed_globals[g].name; }

const char *nb__pickle_global_name(const pk_value *v)
{
    static _Thread_local char buf[96];
    return nb__pk_global_qualname(v->u.global, buf, sizeof buf);
}
