/* dtypes: sizes, names and PyTorch's type promotion. */
#include "core/tensor_impl.h"

size_t nb_dtype_size(nb_dtype dt)
{
    static const size_t sizes[NB_DTYPE_COUNT] = {4, 8, 8, 4, 1, 1, 2, 2};
    return (unsigned)dt < NB_DTYPE_COUNT ? sizes[dt] : 0;
}

const char *nb_dtype_name(nb_dtype dt)
{
    static const char *names[NB_DTYPE_COUNT] = {"float32", "float64", "int64", "int32",
                                                "uint8",   "bool",    "float16", "bfloat16"};
    return (unsigned)dt < NB_DTYPE_COUNT ? names[dt] : "?";
}

bool nb_dtype_is_floating(nb_dtype dt)
{
    return dt == NB_FLOAT32 || dt == NB_FLOAT64 || dt == NB_FLOAT16 || dt == NB_BFLOAT16;
}

/* Rank in PyTorch's promotion lattice for the dtypes we have: bool < uint8 < int32 < int64 <
 * float16/bfloat16 < float32 < float64 (float16 with bfloat16 gives float32). */
static int rank(nb_dtype dt)
{
    switch (dt) {
    case NB_BOOL: return 0;
    case NB_UINT8: return 1;
    case NB_INT32: return 2;
    case NB_INT64: return 3;
    case NB_FLOAT16: return 4;
    case NB_BFLOAT16: return 4;
    case NB_FLOAT32: return 5;
    case NB_FLOAT64: return 6;
    default: return -1;
    }
}

nb_dtype nb_promote_types(nb_dtype a, nb_dtype b)
{
    if (a == b) return a;
    if ((a == NB_FLOAT16 && b == NB_BFLOAT16) || (a == NB_BFLOAT16 && b == NB_FLOAT16))
        return NB_FLOAT32;
    return rank(a) >= rank(b) ? a : b;
}
