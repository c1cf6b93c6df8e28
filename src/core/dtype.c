/* dtypes: sizes, names and PyTorch's type promotion. */
#include <string.h>

#include "core/dispatch_impl.h"
#include "core/error_impl.h"
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

int64_t nb__int_bound(double v, nb_dtype dt)
{
    double lo = -9223372036854775808.0, hi = 9223372036854775808.0; /* -2^63, 2^63 */
    if (dt == NB_INT32) lo = -2147483648.0, hi = 2147483647.0;
    if (dt == NB_UINT8) lo = 0, hi = 255;
    if (v < lo) return (int64_t)lo;
    if (v >= hi) return dt == NB_INT64 ? INT64_MAX : (int64_t)hi;
    return (int64_t)v;
}

nb_status nb__value_bits(nb_op op, nb_dtype dt, double value, uint64_t *bits)
{
    *bits = 0;
    switch (dt) {
    case NB_FLOAT32: { float v = (float)value; memcpy(bits, &v, sizeof v); return NB_OK; }
    case NB_FLOAT64: memcpy(bits, &value, sizeof value); return NB_OK;
    case NB_INT64: { int64_t v = (int64_t)value; memcpy(bits, &v, sizeof v); return NB_OK; }
    case NB_INT32: { int32_t v = (int32_t)value; memcpy(bits, &v, sizeof v); return NB_OK; }
    case NB_UINT8: { uint8_t v = (uint8_t)value; memcpy(bits, &v, sizeof v); return NB_OK; }
    case NB_BOOL: { bool v = value != 0; memcpy(bits, &v, sizeof v); return NB_OK; }
    default:
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported for a scalar value", nb__op_name(op),
                       nb_dtype_name(dt));
    }
}
