/* Elementwise unary ops and activations: argument checks, result dtypes, autograd recording
 * (rules in src/autograd/rules_unary.c, kernels in src/<device>/ops/unary.c).
 *
 * Result dtypes, as PyTorch 1.13:
 *   float functions (exp log log1p sqrt rsqrt sin cos tanh sigmoid): integer and bool inputs
 *     give float32; float inputs keep their dtype
 *   neg abs relu: keep integer dtypes; bool is an error (PyTorch rejects it too)
 *   sign: keeps every dtype; logical_not: bool
 *   leaky_relu gelu silu softplus: floating inputs only
 *   clamp: an integer input keeps its dtype when every finite bound is a whole number (a Python
 *     int bound in PyTorch), else float32 (a Python float bound); bool counts as int64 then */
#include <math.h>

#include "autograd/autograd_impl.h"

/* What an op keeps for its backward rule. */
typedef enum { SAVE_NONE, SAVE_INPUT, SAVE_OUTPUT } save_kind;

static save_kind saves(nb_op op)
{
    switch (op) {
    case NB_OP_EXP:
    case NB_OP_SQRT:
    case NB_OP_RSQRT:
    case NB_OP_TANH:
    case NB_OP_SIGMOID:
    case NB_OP_RELU: return SAVE_OUTPUT;
    case NB_OP_NEG:
    case NB_OP_SIGN:
    case NB_OP_LOGICAL_NOT: return SAVE_NONE;
    default: return SAVE_INPUT;
    }
}

static bool is_whole(double v) { return isinf(v) || v == floor(v); }

/* The dtype op computes in for an input of dtype dt (the result's dtype, except for
 * logical_not's bool), or an error. */
static nb_status compute_dtype(nb_op op, nb_dtype dt, double s0, double s1, nb_dtype *out)
{
    const char *name = nb__op_name(op);
    bool fl = nb_dtype_is_floating(dt);
    *out = dt;
    switch (op) {
    case NB_OP_EXP: case NB_OP_LOG: case NB_OP_LOG1P: case NB_OP_SQRT: case NB_OP_RSQRT:
    case NB_OP_SIN: case NB_OP_COS: case NB_OP_TANH: case NB_OP_SIGMOID:
        if (!fl) *out = NB_FLOAT32;
        return NB_OK;
    case NB_OP_LEAKY_RELU: case NB_OP_GELU: case NB_OP_SILU: case NB_OP_SOFTPLUS:
        if (!fl)
            return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported (floating tensors only)",
                           name, nb_dtype_name(dt));
        return NB_OK;
    case NB_OP_NEG:
        if (dt == NB_BOOL)
            return nb__err(NB_ERR_DTYPE, "neg: negation of a bool tensor is not supported; use "
                                         "nb_logical_not to invert a mask");
        return NB_OK;
    case NB_OP_ABS: case NB_OP_RELU:
        if (dt == NB_BOOL) return nb__err(NB_ERR_DTYPE, "%s: bool tensors are not supported", name);
        return NB_OK;
    case NB_OP_CLAMP:
        if (isnan(s0) || isnan(s1))
            return nb__err(NB_ERR_INVALID_ARG, "clamp: bounds must not be NaN (min %g, max %g)",
                           s0, s1);
        if (!fl) *out = is_whole(s0) && is_whole(s1) ? (dt == NB_BOOL ? NB_INT64 : dt) : NB_FLOAT32;
        return NB_OK;
    default: return NB_OK; /* sign, logical_not */
    }
}

/* A contiguous copy of t in dtype (no autograd: integer inputs carry no gradient). */
static nb_tensor *convert(const nb_tensor *t, nb_dtype dtype)
{
    nb_tensor *c = nb__tensor_new(t->shape, t->ndim, dtype, t->storage->device);
    nb_kargs a = {.out = c, .in = {t}};
    if (c && nb__dispatch(NB_OP_COPY, &a) != NB_OK) {
        nb__release(c);
        return NULL;
    }
    return c;
}

static nb_status record(nb_op op, nb_tensor *out, const nb_tensor *in, double s0, double s1,
                        int64_t i0)
{
    save_kind sk = saves(op);
    const nb_tensor *save = sk == SAVE_INPUT ? in : sk == SAVE_OUTPUT ? out : NULL;
    nb_status st;
    nb_node *node = nb__record(op, out, &in, 1, &save, save ? 1 : 0, &st);
    if (node) {
        node->s0 = s0;
        node->s1 = s1;
        node->i0 = i0;
    }
    return st;
}

/* Every op of the file: checks, converts an integer input where the op computes in float,
 * runs the kernel into a fresh tensor and records the node. */
static nb_tensor *unary(nb_op op, const nb_tensor *a, double s0, double s1, int64_t i0)
{
    if (nb__check_inputs(nb__op_name(op), &a, 1) != NB_OK) return NULL;
    nb_dtype cdt;
    if (compute_dtype(op, a->dtype, s0, s1, &cdt) != NB_OK) return NULL;
    nb_tensor *conv = NULL;
    if (cdt != a->dtype && !(conv = convert(a, cdt))) return NULL;
    const nb_tensor *x = conv ? conv : a;
    nb_dtype odt = op == NB_OP_LOGICAL_NOT ? NB_BOOL : cdt;
    nb_tensor *out = nb__tensor_new_as(nb__op_name(op), a->shape, a->ndim, odt, a->storage->device, &x, 1);
    nb_kargs k = {.out = out, .in = {x}, .s0 = s0, .s1 = s1, .i0 = i0};
    nb_status st = out ? nb__dispatch(op, &k) : nb_last_status();
    if (st == NB_OK && !conv && op != NB_OP_LOGICAL_NOT && nb_dtype_is_floating(odt))
        st = record(op, out, a, s0, s1, i0);
    nb__release(conv);
    if (st != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return nb__track(out);
}

nb_tensor *nb_neg(const nb_tensor *a) { return unary(NB_OP_NEG, a, 0, 0, 0); }
nb_tensor *nb_abs(const nb_tensor *a) { return unary(NB_OP_ABS, a, 0, 0, 0); }
nb_tensor *nb_sign(const nb_tensor *a) { return unary(NB_OP_SIGN, a, 0, 0, 0); }
nb_tensor *nb_exp(const nb_tensor *a) { return unary(NB_OP_EXP, a, 0, 0, 0); }
nb_tensor *nb_log(const nb_tensor *a) { return unary(NB_OP_LOG, a, 0, 0, 0); }
nb_tensor *nb_log1p(const nb_tensor *a) { return unary(NB_OP_LOG1P, a, 0, 0, 0); }
nb_tensor *nb_sqrt(const nb_tensor *a) { return unary(NB_OP_SQRT, a, 0, 0, 0); }
nb_tensor *nb_rsqrt(const nb_tensor *a) { return unary(NB_OP_RSQRT, a, 0, 0, 0); }
nb_tensor *nb_sin(const nb_tensor *a) { return unary(NB_OP_SIN, a, 0, 0, 0); }
nb_tensor *nb_cos(const nb_tensor *a) { return unary(NB_OP_COS, a, 0, 0, 0); }
nb_tensor *nb_tanh(const nb_tensor *a) { return unary(NB_OP_TANH, a, 0, 0, 0); }
nb_tensor *nb_sigmoid(const nb_tensor *a) { return unary(NB_OP_SIGMOID, a, 0, 0, 0); }
nb_tensor *nb_relu(const nb_tensor *a) { return unary(NB_OP_RELU, a, 0, 0, 0); }
nb_tensor *nb_silu(const nb_tensor *a) { return unary(NB_OP_SILU, a, 0, 0, 0); }
nb_tensor *nb_logical_not(const nb_tensor *a) { return unary(NB_OP_LOGICAL_NOT, a, 0, 0, 0); }

nb_tensor *nb_leaky_relu(const nb_tensor *a, double negative_slope)
{
    return unary(NB_OP_LEAKY_RELU, a, negative_slope, 0, 0);
}

nb_tensor *nb_gelu(const nb_tensor *a, nb_gelu_approx approximate)
{
    if (approximate != NB_GELU_NONE && approximate != NB_GELU_TANH)
        return nb__err_null(NB_ERR_INVALID_ARG,
                            "gelu: approximate must be NB_GELU_NONE or NB_GELU_TANH, not %d",
                            (int)approximate);
    return unary(NB_OP_GELU, a, 0, 0, approximate);
}

nb_tensor *nb_softplus(const nb_tensor *a, double beta, double threshold)
{
    return unary(NB_OP_SOFTPLUS, a, beta, threshold, 0);
}

nb_tensor *nb_clamp(const nb_tensor *a, double min, double max)
{
    return unary(NB_OP_CLAMP, a, min, max, 0);
}
