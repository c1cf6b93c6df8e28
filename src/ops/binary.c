/* Elementwise binary ops: add, sub, mul, div, pow, maximum, minimum, their scalar and in-place
 * forms, the comparisons, and where. Kernels: src/<device>/ops/binary.c and where.c; backward
 * rules: src/autograd/rules_binary.c.
 *
 * Type promotion is PyTorch's result_type: tensors with dims outrank 0-dim tensors, which
 * outrank scalars, and a lower-ranked operand only matters when its category (bool < integer <
 * floating) is higher. The `double` of the _scalar forms is a Python float: an integer or bool
 * tensor with it computes in float32 (PyTorch's default dtype), a floating tensor keeps its dtype.
 * div is true division (integers give float32), so no integer division (and no integer division
 * by zero) ever happens here. The inputs are converted to the computation's dtype before the
 * kernel runs; comparisons compare in it and give bool. */
#include <string.h>

#include "autograd/autograd_impl.h"

/* ---- type promotion -------------------------------------------------------------------------- */

#define RT_NONE (-1)

/* The promoted dtype of each priority class, RT_NONE while the class is empty. */
typedef struct rt_state {
    int dim, zero, wrapped;
} rt_state;

static int promote_skip(int a, int b)
{
    if (a == RT_NONE) return b;
    if (b == RT_NONE) return a;
    return (int)nb_promote_types((nb_dtype)a, (nb_dtype)b);
}

static void rt_add(rt_state *s, const nb_tensor *t)
{
    if (t->ndim == 0) s->zero = promote_skip(s->zero, t->dtype);
    else s->dim = promote_skip(s->dim, t->dtype);
}

/* PyTorch's combine_categories: the lower class wins only with a higher category. */
static int combine(int higher, int lower)
{
    if (higher == RT_NONE) return lower;
    if (nb_dtype_is_floating((nb_dtype)higher)) return higher;
    if (higher == NB_BOOL || (lower != RT_NONE && nb_dtype_is_floating((nb_dtype)lower)))
        return promote_skip(higher, lower);
    return higher;
}

/* The result type of a op b; b == NULL stands for a Python float. */
static nb_dtype result_type(const nb_tensor *a, const nb_tensor *b)
{
    rt_state s = {RT_NONE, RT_NONE, RT_NONE};
    rt_add(&s, a);
    if (b) rt_add(&s, b);
    else s.wrapped = NB_FLOAT32;
    return (nb_dtype)combine(s.dim, combine(s.zero, s.wrapped));
}

/* PyTorch's canCast: no floating to integral, no non-bool to bool. */
static bool can_cast(nb_dtype from, nb_dtype to)
{
    if (nb_dtype_is_floating(from) && !nb_dtype_is_floating(to)) return false;
    return !(from != NB_BOOL && to == NB_BOOL);
}

/* The dtype op computes in for a and b (b NULL: the scalar); errors name `name`. */
static nb_status compute_dtype(nb_op op, const char *name, const nb_tensor *a, const nb_tensor *b, nb_dtype *out)
{
    nb_dtype dt = result_type(a, b);
    if (op == NB_OP_DIV && !nb_dtype_is_floating(dt)) dt = NB_FLOAT32;
    if (dt == NB_BOOL && op == NB_OP_SUB)
        return nb__err(NB_ERR_DTYPE,
                       "%s: subtraction of two bool tensors is not supported; use logical_xor or "
                       "logical_not",
                       name);
    if (dt == NB_BOOL && op == NB_OP_POW) return nb__err(NB_ERR_DTYPE, "%s: not implemented for bool", name);
    *out = dt;
    return NB_OK;
}

/* ---- helpers --------------------------------------------------------------------------------- */

static bool same_geometry(const nb_tensor *a, const nb_tensor *b)
{
    return a->ndim == b->ndim && a->offset == b->offset &&
           memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof(int64_t)) == 0 &&
           memcmp(a->strides, b->strides, (size_t)a->ndim * sizeof(int64_t)) == 0;
}

/* t as dtype dt without autograd: t itself (a new reference) when it has dt and no copy is
 * forced, else a contiguous copy. Caller-owned; NULL on failure. */
static nb_tensor *converted(const nb_tensor *t, nb_dtype dt, bool force_copy)
{
    if (t->dtype == dt && !force_copy) return nb_tensor_retain((nb_tensor *)t);
    nb_tensor *c = nb__tensor_new(t->shape, t->ndim, dt, t->storage->device);
    if (!c) return NULL;
    nb_kargs k = {.out = c, .in = {t}};
    if (nb__dispatch(NB_OP_COPY, &k) != NB_OK) {
        nb__release(c);
        return NULL;
    }
    return c;
}

static bool is_comparison(nb_op op) { return op >= NB_OP_EQ && op <= NB_OP_GE; }

/* Records op on out when an input requires grad, saving what rules_binary.c reads: slot 0 the
 * (converted) a, slot 1 the (converted) b, slot 2 the result; s0 the scalar. The scalar forms
 * have one input. */
static nb_status record(nb_op op, nb_tensor *out, const nb_tensor *a, const nb_tensor *b, const nb_tensor *xa,
                        const nb_tensor *xb, double s)
{
    const nb_tensor *in[2] = {a, b};
    int n = b ? 2 : 1;
    if (is_comparison(op) || !nb_dtype_is_floating(out->dtype) || !nb__needs_grad(in, n)) return NB_OK;
    bool ga = a->requires_grad, gb = b && b->requires_grad;
    const nb_tensor *save[3] = {NULL, NULL, NULL};
    switch (op) {
    case NB_OP_MUL:
        save[0] = gb ? xa : NULL;
        save[1] = ga ? xb : NULL;
        break;
    case NB_OP_DIV:
        save[0] = gb ? xa : NULL;
        save[1] = xb;
        break;
    case NB_OP_POW:
        save[0] = xa;
        save[1] = xb;
        save[2] = gb ? out : NULL;
        break;
    case NB_OP_MAXIMUM:
    case NB_OP_MINIMUM:
        save[0] = xa;
        save[1] = xb;
        break;
    default: break;
    }
    nb_status st;
    nb_node *node = nb__record(op, out, in, n, save, 3, &st);
    if (node) node->s0 = s;
    return st;
}

/* Which inputs to copy before computing (in-place autograd keeps the values it saves). */
enum { COPY_NONE = 0, COPY_A = 1, COPY_B = 2 };

/* a op b, or a op s when scalar. A caller-owned result, NULL on failure. */
static nb_tensor *binary(nb_op op, const nb_tensor *a, const nb_tensor *b, bool scalar, double s, int copy)
{
    const char *name = nb__op_name(op);
    if (!a) return nb__err_null(NB_ERR_INVALID_ARG, "%s: tensor argument 0 is NULL", name);
    if (!scalar && nb__check_inputs(name, (const nb_tensor *const[]){a, b}, 2) != NB_OK) return NULL;
    int64_t shape[NB_MAX_DIMS];
    int nd = a->ndim;
    memcpy(shape, a->shape, sizeof shape);
    if (!scalar && nb__broadcast_shapes(name, a->shape, a->ndim, b->shape, b->ndim, shape, &nd) != NB_OK)
        return NULL;
    nb_dtype dt = NB_FLOAT32;
    if (compute_dtype(op, name, a, scalar ? NULL : b, &dt) != NB_OK) return NULL;
    nb_tensor *xa = converted(a, dt, copy & COPY_A);
    nb_tensor *xb = !scalar && xa ? converted(b, dt, copy & COPY_B) : NULL;
    nb_tensor *out = xa && (scalar || xb) ? nb__tensor_new_as(name, shape, nd, is_comparison(op) ? NB_BOOL : dt,
                                                              a->storage->device,
                                                              (const nb_tensor *const[]){xa, xb}, 2)
                                          : NULL;
    nb_status st = out ? NB_OK : nb_last_status();
    if (st == NB_OK) {
        nb_kargs k = {.out = out, .in = {xa, xb}, .s0 = s};
        st = nb__dispatch(op, &k);
    }
    if (st == NB_OK) st = record(op, out, a, scalar ? NULL : b, xa, xb, s);
    nb__release(xa);
    nb__release(xb);
    if (st != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return out;
}


nb_tensor *nb_add(const nb_tensor *a, const nb_tensor *b) { return nb__track(binary(NB_OP_ADD, a, b, false, 0, COPY_NONE)); }
nb_tensor *nb_sub(const nb_tensor *a, const nb_tensor *b) { return nb__track(binary(NB_OP_SUB, a, b, false, 0, COPY_NONE)); }
nb_tensor *nb_mul(const nb_tensor *a, const nb_tensor *b) { return nb__track(binary(NB_OP_MUL, a, b, false, 0, COPY_NONE)); }
nb_tensor *nb_div(const nb_tensor *a, const nb_tensor *b) { return nb__track(binary(NB_OP_DIV, a, b, false, 0, COPY_NONE)); }
nb_tensor *nb_pow(const nb_tensor *a, const nb_tensor *e) { return nb__track(binary(NB_OP_POW, a, e, false, 0, COPY_NONE)); }
nb_tensor *nb_maximum(const nb_tensor *a, const nb_tensor *b) { return nb__track(binary(NB_OP_MAXIMUM, a, b, false, 0, COPY_NONE)); }
nb_tensor *nb_minimum(const nb_tensor *a, const nb_tensor *b) { return nb__track(binary(NB_OP_MINIMUM, a, b, false, 0, COPY_NONE)); }
nb_tensor *nb_add_scalar(const nb_tensor *a, double s) { return nb__track(binary(NB_OP_ADD, a, NULL, true, s, COPY_NONE)); }
nb_tensor *nb_sub_scalar(const nb_tensor *a, double s) { return nb__track(binary(NB_OP_SUB, a, NULL, true, s, COPY_NONE)); }
nb_tensor *nb_mul_scalar(const nb_tensor *a, double s) { return nb__track(binary(NB_OP_MUL, a, NULL, true, s, COPY_NONE)); }
nb_tensor *nb_div_scalar(const nb_tensor *a, double s) { return nb__track(binary(NB_OP_DIV, a, NULL, true, s, COPY_NONE)); }
nb_tensor *nb_pow_scalar(const nb_tensor *a, double e) { return nb__track(binary(NB_OP_POW, a, NULL, true, e, COPY_NONE)); }

nb_tensor *nb_eq(const nb_tensor *a, const nb_tensor *b) { return nb__track(binary(NB_OP_EQ, a, b, false, 0, COPY_NONE)); }
nb_tensor *nb_ne(const nb_tensor *a, const nb_tensor *b) { return nb__track(binary(NB_OP_NE, a, b, false, 0, COPY_NONE)); }
nb_tensor *nb_lt(const nb_tensor *a, const nb_tensor *b) { return nb__track(binary(NB_OP_LT, a, b, false, 0, COPY_NONE)); }
nb_tensor *nb_le(const nb_tensor *a, const nb_tensor *b) { return nb__track(binary(NB_OP_LE, a, b, false, 0, COPY_NONE)); }
nb_tensor *nb_gt(const nb_tensor *a, const nb_tensor *b) { return nb__track(binary(NB_OP_GT, a, b, false, 0, COPY_NONE)); }
nb_tensor *nb_ge(const nb_tensor *a, const nb_tensor *b) { return nb__track(binary(NB_OP_GE, a, b, false, 0, COPY_NONE)); }
nb_tensor *nb_eq_scalar(const nb_tensor *a, double s) { return nb__track(binary(NB_OP_EQ, a, NULL, true, s, COPY_NONE)); }
nb_tensor *nb_ne_scalar(const nb_tensor *a, double s) { return nb__track(binary(NB_OP_NE, a, NULL, true, s, COPY_NONE)); }
nb_tensor *nb_lt_scalar(const nb_tensor *a, double s) { return nb__track(binary(NB_OP_LT, a, NULL, true, s, COPY_NONE)); }
nb_tensor *nb_le_scalar(const nb_tensor *a, double s) { return nb__track(binary(NB_OP_LE, a, NULL, true, s, COPY_NONE)); }
nb_tensor *nb_gt_scalar(const nb_tensor *a, double s) { return nb__track(binary(NB_OP_GT, a, NULL, true, s, COPY_NONE)); }
nb_tensor *nb_ge_scalar(const nb_tensor *a, double s) { return nb__track(binary(NB_OP_GE, a, NULL, true, s, COPY_NONE)); }

/* ---- in place ------------------------------------------------------------------------------ */

/* Whether op's backward reads self's old value, given which inputs need grad. */
static bool rule_reads_self(nb_op op, bool grad_b)
{
    switch (op) {
    case NB_OP_MUL:
    case NB_OP_DIV: return grad_b;
    case NB_OP_POW:
    case NB_OP_MAXIMUM:
    case NB_OP_MINIMUM: return true;
    default: return false;
    }
}

/* With autograd: the op out of place with its history, then committed into a. The values the
 * node saves are copies where the write would change them (a itself, or a b sharing a's
 * storage), so that backward finds them unchanged, as PyTorch's in-place ops do. */
static nb_status inplace_autograd(nb_op op, nb_tensor *a, const nb_tensor *b, bool scalar, double s)
{
    int copy = COPY_NONE;
    bool grad_b = !scalar && nb_tensor_requires_grad(b);
    if (rule_reads_self(op, grad_b)) copy |= COPY_A;
    if (!scalar && b->storage == a->storage) copy |= COPY_B;
    nb_scope *sc = nb_scope_begin();
    if (!sc) return nb_last_status();
    nb_tensor *r = nb__track(binary(op, a, b, scalar, s, copy));
    bool self_is_input0 = true;
    if (r && r->dtype != a->dtype) {
        r = nb_to_dtype(r, a->dtype); /* the cast's node has the result, not self, as input 0 */
        self_is_input0 = false;
    }
    nb_status st = r ? nb__inplace_commit(a, r, self_is_input0) : nb_last_status();
    nb_scope_end(sc);
    return st;
}

/* Without autograd: the kernel writes into a directly when the computation is in a's dtype
 * (b is converted first, or copied when it overlaps a otherwise than element for element);
 * else the result is computed aside and copied into a. */
static nb_status inplace_plain(nb_op op, nb_tensor *a, const nb_tensor *b, bool scalar, double s, nb_dtype dt)
{
    nb_status st;
    if (dt != a->dtype) {
        nb_tensor *r = binary(op, a, b, scalar, s, COPY_NONE);
        if (!r) return nb_last_status();
        nb_kargs k = {.out = a, .in = {r}};
        st = nb__dispatch(NB_OP_COPY, &k);
        nb__release(r);
    } else {
        nb_tensor *xb = NULL;
        if (!scalar) {
            bool overlap = b->storage == a->storage && !same_geometry(a, b);
            xb = converted(b, dt, overlap);
            if (!xb) return nb_last_status();
        }
        nb_kargs k = {.out = a, .in = {a, xb}, .s0 = s};
        st = nb__dispatch(op, &k);
        nb__release(xb);
    }
    if (st == NB_OK) nb__bump_version(a);
    return st;
}

static nb_status binary_(nb_op op, nb_tensor *a, const nb_tensor *b, bool scalar, double s)
{
    const char *name = op == NB_OP_ADD ? "add_" : op == NB_OP_SUB ? "sub_" : op == NB_OP_MUL ? "mul_" : "div_";
    if (!a) return nb__err(NB_ERR_INVALID_ARG, "%s: tensor argument 0 is NULL", name);
    if (!scalar) NB_TRY(nb__check_inputs(name, (const nb_tensor *const[]){a, b}, 2));
    NB_TRY(nb__inplace_check(name, a));
    if (!scalar) {
        int64_t shape[NB_MAX_DIMS];
        int nd;
        NB_TRY(nb__broadcast_shapes(name, a->shape, a->ndim, b->shape, b->ndim, shape, &nd));
        if (nd != a->ndim || memcmp(shape, a->shape, (size_t)nd * sizeof *shape) != 0) {
            char sa[NB_SHAPE_STR_MAX], sb[NB_SHAPE_STR_MAX];
            return nb__err(NB_ERR_SHAPE, "%s: output with shape %s doesn't match the broadcast shape %s", name,
                           nb__shape_str(a->shape, a->ndim, sa), nb__shape_str(shape, nd, sb));
        }
    }
    nb_dtype dt = NB_FLOAT32;
    NB_TRY(compute_dtype(op, name, a, scalar ? NULL : b, &dt));
    if (!can_cast(dt, a->dtype))
        return nb__err(NB_ERR_DTYPE, "%s: result type %s can't be cast to the desired output type %s", name,
                       nb_dtype_name(dt), nb_dtype_name(a->dtype));
    if (nb__inplace_needs_grad(a, (const nb_tensor *const[]){b}, scalar ? 0 : 1))
        return inplace_autograd(op, a, b, scalar, s);
    return inplace_plain(op, a, b, scalar, s, dt);
}

nb_status nb_add_(nb_tensor *a, const nb_tensor *b) { return binary_(NB_OP_ADD, a, b, false, 0); }
nb_status nb_sub_(nb_tensor *a, const nb_tensor *b) { return binary_(NB_OP_SUB, a, b, false, 0); }
nb_status nb_mul_(nb_tensor *a, const nb_tensor *b) { return binary_(NB_OP_MUL, a, b, false, 0); }
nb_status nb_div_(nb_tensor *a, const nb_tensor *b) { return binary_(NB_OP_DIV, a, b, false, 0); }
nb_status nb_add_scalar_(nb_tensor *a, double s) { return binary_(NB_OP_ADD, a, NULL, true, s); }
nb_status nb_sub_scalar_(nb_tensor *a, double s) { return binary_(NB_OP_SUB, a, NULL, true, s); }
nb_status nb_mul_scalar_(nb_tensor *a, double s) { return binary_(NB_OP_MUL, a, NULL, true, s); }
nb_status nb_div_scalar_(nb_tensor *a, double s) { return binary_(NB_OP_DIV, a, NULL, true, s); }

/* ---- where ----------------------------------------------------------------------------------- */

nb_tensor *nb_where(const nb_tensor *cond, const nb_tensor *a, const nb_tensor *b)
{
    const nb_tensor *in[3] = {cond, a, b};
    if (nb__check_inputs("where", in, 3) != NB_OK) return NULL;
    if (cond->dtype != NB_BOOL)
        return nb__err_null(NB_ERR_DTYPE, "where: expected the condition to be a bool tensor, got %s",
                            nb_dtype_name(cond->dtype));
    int64_t s1[NB_MAX_DIMS], shape[NB_MAX_DIMS];
    int n1, nd;
    if (nb__broadcast_shapes("where", cond->shape, cond->ndim, a->shape, a->ndim, s1, &n1) != NB_OK ||
        nb__broadcast_shapes("where", s1, n1, b->shape, b->ndim, shape, &nd) != NB_OK)
        return NULL;
    nb_dtype dt = result_type(a, b);
    nb_tensor *xa = converted(a, dt, false), *xb = converted(b, dt, false);
    nb_tensor *out = xa && xb ? nb__tensor_new_as("where", shape, nd, dt, a->storage->device,
                                                  (const nb_tensor *const[]){xa, xb}, 2)
                              : NULL;
    nb_status st = out ? NB_OK : nb_last_status();
    if (st == NB_OK) {
        nb_kargs k = {.out = out, .in = {cond, xa, xb}};
        st = nb__dispatch(NB_OP_WHERE, &k);
    }
    if (st == NB_OK && nb_dtype_is_floating(dt)) nb__record(NB_OP_WHERE, out, in, 3, &cond, 1, &st);
    nb__release(xa);
    nb__release(xb);
    if (st != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return nb__track(out);
}
