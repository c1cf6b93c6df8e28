/* Elementwise binary ops, comparisons, where and the in-place forms: every case of
 * tests/ref/cases_binary.py against PyTorch (forward and gradients, contiguous and
 * non-contiguous), finite-difference gradients in float64, hand-computed type promotion and
 * integer semantics, autograd through in-place ops, the fast kernel paths against the strided
 * reference path (and across thread counts), and every error path. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbtest.h"

typedef nb_tensor *(*bin_fn)(const nb_tensor *, const nb_tensor *);
typedef nb_tensor *(*scal_fn)(const nb_tensor *, double);
typedef nb_status (*ibin_fn)(nb_tensor *, const nb_tensor *);
typedef nb_status (*iscal_fn)(nb_tensor *, double);

typedef struct op_entry {
    const char *name; /* as in the reference case names */
    bin_fn bin;
    scal_fn scal;
    ibin_fn ibin;
    iscal_fn iscal;
} op_entry;

static const op_entry OPS[] = {
    {"add", nb_add, NULL, NULL, NULL},
    {"sub", nb_sub, NULL, NULL, NULL},
    {"mul", nb_mul, NULL, NULL, NULL},
    {"div", nb_div, NULL, NULL, NULL},
    {"pow", nb_pow, NULL, NULL, NULL},
    {"maximum", nb_maximum, NULL, NULL, NULL},
    {"minimum", nb_minimum, NULL, NULL, NULL},
    {"eq", nb_eq, NULL, NULL, NULL},
    {"ne", nb_ne, NULL, NULL, NULL},
    {"lt", nb_lt, NULL, NULL, NULL},
    {"le", nb_le, NULL, NULL, NULL},
    {"gt", nb_gt, NULL, NULL, NULL},
    {"ge", nb_ge, NULL, NULL, NULL},
    {"add_scalar", NULL, nb_add_scalar, NULL, NULL},
    {"sub_scalar", NULL, nb_sub_scalar, NULL, NULL},
    {"mul_scalar", NULL, nb_mul_scalar, NULL, NULL},
    {"div_scalar", NULL, nb_div_scalar, NULL, NULL},
    {"pow_scalar", NULL, nb_pow_scalar, NULL, NULL},
    {"eq_scalar", NULL, nb_eq_scalar, NULL, NULL},
    {"ne_scalar", NULL, nb_ne_scalar, NULL, NULL},
    {"lt_scalar", NULL, nb_lt_scalar, NULL, NULL},
    {"le_scalar", NULL, nb_le_scalar, NULL, NULL},
    {"gt_scalar", NULL, nb_gt_scalar, NULL, NULL},
    {"ge_scalar", NULL, nb_ge_scalar, NULL, NULL},
    {"add_", NULL, NULL, nb_add_, NULL},
    {"sub_", NULL, NULL, nb_sub_, NULL},
    {"mul_", NULL, NULL, nb_mul_, NULL},
    {"div_", NULL, NULL, nb_div_, NULL},
    {"add_scalar_", NULL, NULL, NULL, nb_add_scalar_},
    {"sub_scalar_", NULL, NULL, NULL, nb_sub_scalar_},
    {"mul_scalar_", NULL, NULL, NULL, nb_mul_scalar_},
    {"div_scalar_", NULL, NULL, NULL, nb_div_scalar_},
    {"where", NULL, NULL, NULL, NULL},
};
#define N_OPS ((int)(sizeof OPS / sizeof OPS[0]))

static const op_entry *find_op(const char *case_name)
{
    size_t len = strcspn(case_name, "/");
    for (int i = 0; i < N_OPS; i++)
        if (strlen(OPS[i].name) == len && strncmp(OPS[i].name, case_name, len) == 0) return &OPS[i];
    return NULL;
}

static const nb_tensor_params F64 = {NB_FLOAT64, {NB_DEVICE_CPU, 0}, false, NULL};

static nb_tensor *make(nb_dtype dt, const double *v, const int64_t *shape, int nd)
{
    nb_tensor *t = NBT_CHECK(nb_tensor_from_data(v, shape, nd, &F64));
    return NBT_CHECK(nb_to_dtype(t, dt));
}

#define T1(dt, ...) make(dt, (double[]){__VA_ARGS__}, (int64_t[]){sizeof((double[]){__VA_ARGS__}) / sizeof(double)}, 1)

static void assert_values(const nb_tensor *got, nb_dtype dt, const double *want, int64_t n, const char *what)
{
    assert_non_null(got);
    if (nb_tensor_dtype(got) != dt) {
        print_error("%s: dtype %s, expected %s\n", what, nb_dtype_name(nb_tensor_dtype(got)), nb_dtype_name(dt));
        fail();
    }
    assert_int_equal(nb_tensor_numel(got), n);
    nb_tensor *w = NBT_CHECK(nb_tensor_from_data(want, nb_tensor_shape(got), nb_tensor_ndim(got), &F64));
    nbt_assert_close(got, w, 0, 0, what);
}

/* ---- PyTorch reference cases ------------------------------------------------------------------ */

static nb_tensor *call_op(const op_entry *e, nb_tensor *const *x, double s)
{
    if (e->bin) return e->bin(x[0], x[1]);
    if (e->scal) return e->scal(x[0], s);
    return nb_where(x[0], x[1], x[2]);
}

static void run_inplace_case(const op_entry *e, nb_tensor *const *x, double s, const nb_tensor *want, double rtol,
                             double atol, const char *what)
{
    nb_tensor *self = NBT_CHECK(nb_clone(x[0]));
    if (!nb_tensor_is_contiguous(x[0])) self = x[0]; /* already a private non-contiguous copy */
    void *ptr = nb_tensor_data_ptr(self);
    uint64_t v0 = nb_tensor_version(self);
    NBT_OK(e->ibin ? e->ibin(self, x[1]) : e->iscal(self, s));
    assert_ptr_equal(nb_tensor_data_ptr(self), ptr);
    assert_true(nb_tensor_version(self) > v0);
    nbt_assert_close(self, want, rtol, atol, what);
}

static void run_case(const nb_tensor_map *m, const char *name, bool noncontig)
{
    nb_scope *sc = nb_scope_begin();
    const op_entry *e = find_op(name);
    if (!e) {
        print_error("%s: no op for this reference case\n", name);
        fail();
    }
    bool f64 = strstr(name, "/f64") != NULL;
    double rtol = f64 ? 1e-10 : 1e-5, atol = f64 ? 1e-12 : 1e-6;
    char what[256];
    snprintf(what, sizeof what, "%s%s", name, noncontig ? " (non-contiguous)" : "");
    nb_tensor *leaves[3] = {NULL, NULL, NULL}, *x[3] = {NULL, NULL, NULL};
    nb_tensor *gout = nbt_ref(m, name, "gout"), *want = NBT_CHECK(nbt_ref(m, name, "out"));
    nb_tensor *scalar = nbt_ref(m, name, "scalar");
    double s = 0;
    if (scalar) NBT_OK(nb_item(scalar, &s));
    for (int i = 0; i < 3; i++) {
        char key[8], gkey[8];
        snprintf(key, sizeof key, "in%d", i);
        snprintf(gkey, sizeof gkey, "grad%d", i);
        nb_tensor *in = nbt_ref(m, name, key);
        if (!in) continue;
        leaves[i] = gout && nbt_ref(m, name, gkey) ? nbt_leaf(in) : in;
        x[i] = noncontig ? nbt_noncontig(leaves[i]) : leaves[i];
    }
    if (e->ibin || e->iscal) {
        run_inplace_case(e, x, s, want, rtol, atol, what);
        nb_scope_end(sc);
        return;
    }
    nb_tensor *y = NBT_CHECK(call_op(e, x, s));
    nbt_assert_close(y, want, rtol, atol, what);
    if (gout) {
        NBT_OK(nb_backward(y, gout, NB_BACKWARD_DEFAULT));
        for (int i = 0; i < 3; i++) {
            char gkey[8], label[300];
            snprintf(gkey, sizeof gkey, "grad%d", i);
            nb_tensor *gw = nbt_ref(m, name, gkey);
            if (!gw) continue;
            snprintf(label, sizeof label, "%s: gradient of input %d", what, i);
            nbt_assert_close(nb_tensor_grad(leaves[i]), gw, rtol, atol, label);
        }
    }
    nb_scope_end(sc);
}

static void test_reference_cases(void **state)
{
    nbt_run_reference("binary", 101, run_case);
}

/* ---- finite differences ---------------------------------------------------------------------- */

typedef struct fd_ctx {
    const op_entry *e;
    double s;
} fd_ctx;

static nb_tensor *fd_op(nb_tensor *const *in, int n, void *ctx)
{
    const fd_ctx *c = ctx;
    return call_op(c->e, in, c->s);
}

/* Every differentiable case of the float64 references whose op is smooth at its inputs. */
static void test_gradcheck(void **state)
{
    nb_tensor_map *m = nbt_load_ref("binary");
    char **names;
    int n = nbt_case_names(m, &names), checked = 0;
    for (int i = 0; i < n; i++) {
        const char *name = names[i];
        /* ties of maximum/minimum and pow at 0 are where the ops are not differentiable */
        char gout[300];
        snprintf(gout, sizeof gout, "%s/gout", name);
        if (!strstr(name, "/f64") || strstr(name, "/ties/") || strstr(name, "/zeros/") || !nb_tensor_map_contains(m, gout))
            continue;
        nb_scope *sc = nb_scope_begin();
        fd_ctx c = {find_op(name), 0};
        nb_tensor *scalar = nbt_ref(m, name, "scalar");
        if (scalar) NBT_OK(nb_item(scalar, &c.s));
        nb_tensor *in[3];
        int k = 0;
        for (; k < 3; k++) {
            char key[8];
            snprintf(key, sizeof key, "in%d", k);
            if (!(in[k] = nbt_ref(m, name, key))) break;
        }
        nbt_gradcheck(fd_op, &c, in, k, 1e-6, 1e-6, 1e-6, name);
        checked++;
        nb_scope_end(sc);
    }
    assert_true(checked >= 30);
    nbt_free_names(names, n);
    nb_tensor_map_free(m);
}

/* in place on a view of a non-leaf: y = x * 1; y[1:3] *= 2; f = y */
static nb_tensor *f_view_scalar(nb_tensor *const *in, int n, void *ctx)
{
    nb_tensor *y = nb_mul_scalar(in[0], 1.0);
    nb_tensor *v = y ? nb_narrow(y, 0, 1, 2) : NULL;
    if (!v || nb_mul_scalar_(v, 2.0) != NB_OK) return NULL;
    return y;
}

/* y = 3 x; y *= w (w broadcast); y /= w2; y -= w; f = y: the saved self of mul_/div_ */
static nb_tensor *f_nonleaf_chain(nb_tensor *const *in, int n, void *ctx)
{
    nb_tensor *y = nb_mul_scalar(in[0], 3.0);
    if (!y || nb_mul_(y, in[1]) != NB_OK || nb_div_(y, in[2]) != NB_OK || nb_sub_(y, in[1]) != NB_OK) return NULL;
    return y;
}

/* y = x + 0; y[:, 0:2] += w * x[:, 1:3] (tensor other on a view); y = y * y */
static nb_tensor *f_view_tensor(nb_tensor *const *in, int n, void *ctx)
{
    nb_tensor *y = nb_add_scalar(in[0], 0.0);
    nb_tensor *v = y ? nb_narrow(y, 1, 0, 2) : NULL;
    nb_tensor *o = nb_mul(in[1], nb_narrow(in[0], 1, 1, 2));
    if (!v || !o || nb_add_(v, o) != NB_OK) return NULL;
    return nb_mul(y, y);
}

static void test_gradcheck_inplace(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_manual_seed(7);
    nb_tensor_params p = F64;
    nb_tensor *x = NBT_CHECK(nb_randn((int64_t[]){5}, 1, &p));
    nbt_gradcheck(f_view_scalar, NULL, &x, 1, 1e-6, 1e-7, 1e-6, "mul_scalar_ on a view of a non-leaf");
    nb_tensor *a = NBT_CHECK(nb_randn((int64_t[]){3, 4}, 2, &p));
    nb_tensor *w = NBT_CHECK(nb_randn((int64_t[]){4}, 1, &p));
    nb_tensor *w2 = NBT_CHECK(nb_add_scalar(nb_rand((int64_t[]){3, 1}, 2, &p), 0.5));
    nbt_gradcheck(f_nonleaf_chain, NULL, (nb_tensor *[]){a, w, w2}, 3, 1e-6, 1e-7, 1e-6, "mul_/div_/sub_ chain");
    nb_tensor *w3 = NBT_CHECK(nb_randn((int64_t[]){3, 2}, 2, &p));
    nbt_gradcheck(f_view_tensor, NULL, (nb_tensor *[]){a, w3}, 2, 1e-6, 1e-7, 1e-6, "add_ of a tensor on a view");
    nb_scope_end(sc);
}

/* ---- in-place autograd by hand ---------------------------------------------------------------- */

static void test_inplace_autograd_by_hand(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor_params p = F64;
    p.requires_grad = true;
    nb_tensor *x = NBT_CHECK(nb_tensor_from_data((double[]){1, 2, 3, 4, 5, 6}, (int64_t[]){6}, 1, &p));
    /* y = x * 1; y[2:5] *= 2; loss = sum(y): dloss/dx = [1, 1, 2, 2, 2, 1] */
    nb_tensor *y = NBT_CHECK(nb_mul_scalar(x, 1.0));
    nb_tensor *v = NBT_CHECK(nb_narrow(y, 0, 2, 3));
    uint64_t v0 = nb_tensor_version(y);
    NBT_OK(nb_mul_scalar_(v, 2.0));
    assert_true(nb_tensor_version(y) > v0 && nb_tensor_version(v) == nb_tensor_version(y));
    assert_values(y, NB_FLOAT64, (double[]){1, 2, 6, 8, 10, 6}, 6, "values after the in-place op on the view");
    NBT_OK(nb_backward(nb_sum(y, NULL, 0, false), NULL, 0));
    assert_values(nb_tensor_grad(x), NB_FLOAT64, (double[]){1, 1, 2, 2, 2, 1}, 6, "grad through the view");

    /* a non-leaf changed in place by a tensor that requires grad: z = (2x) * w; dz/dx = 2w, dz/dw = 2x */
    nb_tensor *w = NBT_CHECK(nb_tensor_from_data((double[]){-1, 0.5, 2, 1, 3, -2}, (int64_t[]){6}, 1, &p));
    NBT_OK(nb_tensor_set_grad(x, NULL));
    nb_tensor *z = NBT_CHECK(nb_mul_scalar(x, 2.0));
    NBT_OK(nb_mul_(z, w));
    assert_string_equal(nb_tensor_grad_fn_name(z), "MulBackward0");
    NBT_OK(nb_backward(nb_sum(z, NULL, 0, false), NULL, 0));
    assert_values(nb_tensor_grad(x), NB_FLOAT64, (double[]){-2, 1, 4, 2, 6, -4}, 6, "grad of x through mul_");
    assert_values(nb_tensor_grad(w), NB_FLOAT64, (double[]){2, 4, 6, 8, 10, 12}, 6, "grad of w through mul_");
    nb_scope_end(sc);
}

/* the in-place result is computed in float64 and cast back into float32 self, on a view */
static void test_inplace_autograd_cast(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor_params p = nb_tensor_params_default();
    p.requires_grad = true;
    nb_tensor *x = NBT_CHECK(nb_tensor_from_data((float[]){1, 2, 3, 4}, (int64_t[]){4}, 1, &p));
    p.dtype = NB_FLOAT64;
    nb_tensor *w = NBT_CHECK(nb_tensor_from_data((double[]){10, 20}, (int64_t[]){2}, 1, &p));
    nb_tensor *y = NBT_CHECK(nb_mul_scalar(x, 2.0));
    NBT_OK(nb_mul_(NBT_CHECK(nb_narrow(y, 0, 1, 2)), w));
    assert_values(y, NB_FLOAT32, (double[]){2, 40, 120, 8}, 4, "float32 view *= float64");
    NBT_OK(nb_backward(nb_sum(y, NULL, 0, false), NULL, 0));
    assert_values(nb_tensor_grad(x), NB_FLOAT32, (double[]){2, 20, 40, 2}, 4, "grad of x through the cast");
    assert_values(nb_tensor_grad(w), NB_FLOAT64, (double[]){4, 6}, 2, "grad of w through the cast");
    nb_scope_end(sc);
}

static void test_version_counter(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor_params p = F64;
    nb_tensor *y = NBT_CHECK(nb_tensor_from_data((double[]){1, 2, 3}, (int64_t[]){3}, 1, &p));
    p.requires_grad = true;
    nb_tensor *x = NBT_CHECK(nb_tensor_from_data((double[]){4, 5, 6}, (int64_t[]){3}, 1, &p));
    nb_tensor *z = NBT_CHECK(nb_mul(x, y)); /* saves y for x's gradient */
    uint64_t v0 = nb_tensor_version(y);
    NBT_OK(nb_add_scalar_(y, 1.0));
    assert_int_equal(nb_tensor_version(y), v0 + 1);
    NBT_FAILS(nb_backward(nb_sum(z, NULL, 0, false), NULL, 0) != NB_OK, NB_ERR_AUTOGRAD,
              "modified by an in-place operation", NULL);
    /* add saves nothing: changing y after it is fine */
    nb_tensor *z2 = NBT_CHECK(nb_add(x, y));
    NBT_OK(nb_mul_scalar_(y, 3.0));
    NBT_OK(nb_backward(nb_sum(z2, NULL, 0, false), NULL, 0));
    assert_values(nb_tensor_grad(x), NB_FLOAT64, (double[]){1, 1, 1}, 3, "add saves nothing");
    nb_scope_end(sc);
}

static void test_inplace_errors(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor_params p = F64;
    p.requires_grad = true;
    nb_tensor *leaf = NBT_CHECK(nb_ones((int64_t[]){3}, 1, &p));
    nb_tensor *other = NBT_CHECK(nb_ones((int64_t[]){3}, 1, &F64));
    NBT_FAILS(nb_add_(leaf, other) != NB_OK, NB_ERR_AUTOGRAD, "add_", "leaf", NULL);
    NBT_FAILS(nb_mul_scalar_(leaf, 2) != NB_OK, NB_ERR_AUTOGRAD, "mul_", "leaf", NULL);
    NBT_FAILS(nb_div_scalar_(nb_narrow(leaf, 0, 0, 2), 2) != NB_OK, NB_ERR_AUTOGRAD, "div_", "view of a leaf", NULL);
    /* with grad mode off a leaf may be changed (as under torch.no_grad) */
    bool prev = nb_set_grad_enabled(false);
    NBT_OK(nb_add_scalar_(leaf, 1.0));
    nb_set_grad_enabled(prev);
    assert_values(leaf, NB_FLOAT64, (double[]){2, 2, 2}, 3, "no-grad in-place on a leaf");
    assert_null(nb_tensor_grad_fn_name(leaf));

    nb_tensor *row = NBT_CHECK(nb_ones((int64_t[]){1, 3}, 2, &F64));
    nb_tensor *wide = NBT_CHECK(nb_expand(row, (int64_t[]){2, 3}, 2));
    NBT_FAILS(nb_add_(wide, other) != NB_OK, NB_ERR_INVALID_ARG, "add_", "expanded", NULL);
    NBT_FAILS(nb_sub_scalar_(wide, 1) != NB_OK, NB_ERR_INVALID_ARG, "sub_", "expanded", NULL);

    nb_tensor *small = NBT_CHECK(nb_ones((int64_t[]){3}, 1, &F64));
    nb_tensor *big = NBT_CHECK(nb_ones((int64_t[]){2, 3}, 2, &F64));
    NBT_FAILS(nb_add_(small, big) != NB_OK, NB_ERR_SHAPE, "add_: output with shape [3] doesn't match the broadcast shape [2, 3]", NULL);
    NBT_FAILS(nb_mul_(small, NBT_CHECK(nb_ones((int64_t[]){4}, 1, &F64))) != NB_OK, NB_ERR_SHAPE, "mul_", "[3]", "[4]", NULL);

    nb_tensor *ints = T1(NB_INT64, 1, 2, 3);
    NBT_FAILS(nb_add_(ints, T1(NB_FLOAT32, 1, 1, 1)) != NB_OK, NB_ERR_DTYPE,
              "add_: result type float32 can't be cast to the desired output type int64", NULL);
    NBT_FAILS(nb_div_(ints, T1(NB_INT64, 1, 1, 1)) != NB_OK, NB_ERR_DTYPE, "div_", "float32", "int64", NULL);
    NBT_FAILS(nb_mul_scalar_(ints, 2.0) != NB_OK, NB_ERR_DTYPE, "mul_", "can't be cast", NULL);
    NBT_FAILS(nb_add_(T1(NB_BOOL, 1, 0, 1), ints) != NB_OK, NB_ERR_DTYPE, "result type int64", "output type bool", NULL);
    NBT_FAILS(nb_add_(NULL, other) != NB_OK, NB_ERR_INVALID_ARG, "add_", NULL);
    NBT_FAILS(nb_add_(other, NULL) != NB_OK, NB_ERR_INVALID_ARG, "add_", NULL);
    NBT_FAILS(nb_mul_scalar_(NULL, 1) != NB_OK, NB_ERR_INVALID_ARG, "mul_", NULL);
    nb_scope_end(sc);
}

/* in place with dtypes that can be cast back, and with an operand overlapping self */
static void test_inplace_dtypes_and_overlap(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor *a = T1(NB_INT64, 1, 2, 3);
    NBT_OK(nb_add_(a, T1(NB_BOOL, 1, 0, 1)));
    assert_values(a, NB_INT64, (double[]){2, 2, 4}, 3, "int64 += bool");
    nb_tensor *b = T1(NB_INT32, 5, 6, 7);
    NBT_OK(nb_mul_(b, T1(NB_INT64, 2, -1, 3)));
    assert_values(b, NB_INT32, (double[]){10, -6, 21}, 3, "int32 *= int64");
    nb_tensor *f = T1(NB_FLOAT32, 1, 2, 3);
    NBT_OK(nb_div_(f, T1(NB_INT64, 2, 4, 0)));
    assert_values(f, NB_FLOAT32, (double[]){0.5, 0.5, INFINITY}, 3, "float32 /= int64");
    /* x[1:] += x[:-1] reads the old values (the operand is copied first, as it overlaps) */
    nb_tensor *x = T1(NB_FLOAT64, 1, 2, 3, 4);
    NBT_OK(nb_add_(nb_narrow(x, 0, 1, 3), nb_narrow(x, 0, 0, 3)));
    assert_values(x, NB_FLOAT64, (double[]){1, 3, 5, 7}, 4, "overlapping operand");
    /* x *= x: the same elements */
    NBT_OK(nb_mul_(x, x));
    assert_values(x, NB_FLOAT64, (double[]){1, 9, 25, 49}, 4, "x *= x");
    nb_scope_end(sc);
}

/* ---- type promotion and integer semantics (expected values from PyTorch 1.13 by hand) ------- */

static nb_tensor *scalar0(nb_dtype dt, double v)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = dt;
    return NBT_CHECK(nb_scalar_tensor(v, &p));
}

static void test_promotion(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor *i64 = T1(NB_INT64, 1, 2, 3), *i32 = T1(NB_INT32, 1, 2, 3);
    nb_tensor *f32 = T1(NB_FLOAT32, 0.5, 0.25, -1), *b = T1(NB_BOOL, 1, 0, 1), *b2 = T1(NB_BOOL, 1, 1, 0);
    assert_values(nb_add(i64, f32), NB_FLOAT32, (double[]){1.5, 2.25, 2}, 3, "int64 + float32");
    assert_values(nb_add_scalar(i64, 2.5), NB_FLOAT32, (double[]){3.5, 4.5, 5.5}, 3, "int64 + Python float");
    assert_values(nb_mul_scalar(b, 2), NB_FLOAT32, (double[]){2, 0, 2}, 3, "bool * Python float");
    assert_values(nb_add_scalar(f32, 1e-3), NB_FLOAT32, (double[]){0.5f + 1e-3f, 0.25f + 1e-3f, -1 + 1e-3f}, 3,
                  "float32 + scalar stays float32");
    assert_values(nb_add(i32, scalar0(NB_INT64, 5)), NB_INT32, (double[]){6, 7, 8}, 3, "int32 + 0-dim int64");
    assert_values(nb_add(i32, scalar0(NB_FLOAT64, 0.5)), NB_FLOAT64, (double[]){1.5, 2.5, 3.5}, 3,
                  "int32 + 0-dim float64");
    assert_values(nb_add(f32, scalar0(NB_FLOAT64, 1)), NB_FLOAT32, (double[]){1.5, 1.25, 0}, 3,
                  "float32 + 0-dim float64");
    assert_values(nb_add(b, scalar0(NB_INT64, 3)), NB_INT64, (double[]){4, 3, 4}, 3, "bool + 0-dim int64");
    assert_values(nb_add(scalar0(NB_INT64, 3), scalar0(NB_FLOAT64, 1)), NB_FLOAT64, (double[]){4}, 1, "0-dim + 0-dim");
    assert_values(nb_add(b, b2), NB_BOOL, (double[]){1, 1, 1}, 3, "bool + bool is or");
    assert_values(nb_mul(b, b2), NB_BOOL, (double[]){1, 0, 0}, 3, "bool * bool is and");
    assert_values(nb_maximum(b, b2), NB_BOOL, (double[]){1, 1, 1}, 3, "maximum of bools");
    assert_values(nb_minimum(b, b2), NB_BOOL, (double[]){1, 0, 0}, 3, "minimum of bools");
    assert_values(nb_div(b, b2), NB_FLOAT32, (double[]){1, 0, INFINITY}, 3, "bool / bool");
    assert_values(nb_div(i64, T1(NB_INT64, 2, 4, 0)), NB_FLOAT32, (double[]){0.5, 0.5, INFINITY}, 3,
                  "int64 / int64 is true division");
    assert_values(nb_div(T1(NB_INT32, -1, 0, 7), T1(NB_INT32, 0, 0, 2)), NB_FLOAT32, (double[]){-INFINITY, NAN, 3.5},
                  3, "integer division by zero");
    assert_values(nb_div(T1(NB_UINT8, 9), scalar0(NB_FLOAT64, 2)), NB_FLOAT64, (double[]){4.5}, 1, "uint8 / 0-dim f64");
    assert_values(nb_div_scalar(i64, 4), NB_FLOAT32, (double[]){0.25, 0.5, 0.75}, 3, "int64 / scalar");
    assert_values(nb_pow_scalar(i64, 2), NB_FLOAT32, (double[]){1, 4, 9}, 3, "int64 ** 2.0");
    assert_values(nb_pow_scalar(i64, -1), NB_FLOAT32, (double[]){1, 0.5, 1.0f / 3}, 3, "int64 ** -1.0");
    assert_values(nb_maximum(i64, f32), NB_FLOAT32, (double[]){1, 2, 3}, 3, "maximum(int64, float32)");
    nb_scope_end(sc);
}

static void test_integer_semantics(void **state)
{
    nb_scope *sc = nb_scope_begin();
    /* wrap-around, as PyTorch's: no undefined behaviour (the sanitizer build checks) */
    nb_tensor_params pi = nb_tensor_params_default();
    pi.dtype = NB_INT64;
    nb_tensor *big = NBT_CHECK(nb_tensor_from_data((int64_t[]){INT64_C(1) << 62, INT64_MAX, INT64_MIN}, (int64_t[]){3}, 1, &pi));
    int64_t r[3];
    NBT_OK(nb_tensor_read(nb_mul(big, T1(NB_INT64, 4, 1, 1)), r, sizeof r));
    assert_true(r[0] == 0 && r[1] == INT64_MAX && r[2] == INT64_MIN);
    NBT_OK(nb_tensor_read(nb_add(big, T1(NB_INT64, 0, 1, -1)), r, sizeof r));
    assert_true(r[0] == INT64_C(1) << 62 && r[1] == INT64_MIN && r[2] == INT64_MAX);
    NBT_OK(nb_tensor_read(nb_sub(big, T1(NB_INT64, 0, -1, 1)), r, sizeof r));
    assert_true(r[1] == INT64_MIN && r[2] == INT64_MAX);
    NBT_OK(nb_tensor_read(nb_pow(big, T1(NB_INT64, 2, 1, 2)), r, sizeof r));
    assert_true(r[0] == 0 && r[1] == INT64_MAX && r[2] == 0);
    assert_values(nb_add(T1(NB_UINT8, 250, 3), T1(NB_UINT8, 10, 4)), NB_UINT8, (double[]){4, 7}, 2, "uint8 add wraps");
    assert_values(nb_sub(T1(NB_UINT8, 1), T1(NB_UINT8, 2)), NB_UINT8, (double[]){255}, 1, "uint8 sub wraps");
    assert_values(nb_mul(T1(NB_INT32, 65536, -3), T1(NB_INT32, 65536, 7)), NB_INT32, (double[]){0, -21}, 2, "int32 mul");
    /* integer pow: PyTorch's rule for negative exponents, wrap-around for large results */
    assert_values(nb_pow(T1(NB_INT64, 1, -1, -1, 2, 0, 3, -2), T1(NB_INT64, -1, -1, -2, -1, -1, 4, 3)), NB_INT64,
                  (double[]){1, -1, 1, 0, 0, 81, -8}, 7, "int64 pow");
    assert_values(nb_pow(T1(NB_INT32, 2, 0), T1(NB_INT32, 31, 0)), NB_INT32, (double[]){-2147483648.0, 1}, 2,
                  "int32 pow wraps");
    assert_values(nb_pow(T1(NB_UINT8, 2, 3), T1(NB_UINT8, 9, 5)), NB_UINT8, (double[]){0, 243}, 2, "uint8 pow wraps");
    assert_values(nb_pow(T1(NB_FLOAT32, 2, 4), T1(NB_INT64, 3, -1)), NB_FLOAT32, (double[]){8, 0.25}, 2,
                  "float32 ** int64");
    nb_scope_end(sc);
}

static void test_comparisons(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor *i64 = T1(NB_INT64, 1, 2, 3), *f32 = T1(NB_FLOAT32, 1, 2.5, 2);
    assert_values(nb_eq(i64, f32), NB_BOOL, (double[]){1, 0, 0}, 3, "eq int64 float32");
    assert_values(nb_lt(i64, f32), NB_BOOL, (double[]){0, 1, 0}, 3, "lt");
    assert_values(nb_ge(i64, f32), NB_BOOL, (double[]){1, 0, 1}, 3, "ge");
    assert_values(nb_eq_scalar(i64, 2.5), NB_BOOL, (double[]){0, 0, 0}, 3, "int64 == 2.5");
    assert_values(nb_ne_scalar(i64, 2), NB_BOOL, (double[]){1, 0, 1}, 3, "int64 != 2.0");
    assert_values(nb_lt_scalar(T1(NB_BOOL, 1, 0), 0.5), NB_BOOL, (double[]){0, 1}, 2, "bool < 0.5");
    assert_values(nb_eq_scalar(T1(NB_FLOAT32, 0.1), 0.1), NB_BOOL, (double[]){1}, 1, "0.1f == 0.1 in float32");
    assert_values(nb_eq_scalar(T1(NB_FLOAT64, 0.1), 0.1), NB_BOOL, (double[]){1}, 1, "0.1 == 0.1");
    nb_tensor *nan = T1(NB_FLOAT64, NAN, 1, NAN);
    assert_values(nb_eq(nan, nan), NB_BOOL, (double[]){0, 1, 0}, 3, "NaN != NaN");
    assert_values(nb_ne(nan, nan), NB_BOOL, (double[]){1, 0, 1}, 3, "NaN ne");
    assert_values(nb_maximum(nan, T1(NB_FLOAT64, 0, NAN, 5)), NB_FLOAT64, (double[]){NAN, NAN, NAN}, 3, "maximum NaN");
    assert_values(nb_minimum(T1(NB_FLOAT32, 0, NAN, 2), T1(NB_FLOAT32, NAN, 1, 1)), NB_FLOAT32,
                  (double[]){NAN, NAN, 1}, 3, "minimum NaN");
    /* comparisons never record autograd */
    nb_tensor_params p = F64;
    p.requires_grad = true;
    nb_tensor *x = NBT_CHECK(nb_ones((int64_t[]){2}, 1, &p));
    nb_tensor *c = NBT_CHECK(nb_gt_scalar(x, 0));
    assert_false(nb_tensor_requires_grad(c));
    nb_scope_end(sc);
}

static void test_where(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor *cond = T1(NB_BOOL, 1, 0, 1);
    assert_values(nb_where(cond, T1(NB_INT64, 1, 2, 3), T1(NB_FLOAT32, -1, -2, -3)), NB_FLOAT32,
                  (double[]){1, -2, 3}, 3, "where(int64, float32)");
    assert_values(nb_where(cond, T1(NB_INT32, 1, 2, 3), scalar0(NB_INT64, 9)), NB_INT32, (double[]){1, 9, 3}, 3,
                  "where(int32, 0-dim int64)");
    assert_values(nb_where(cond, T1(NB_BOOL, 0, 0, 0), T1(NB_BOOL, 1, 1, 1)), NB_BOOL, (double[]){0, 1, 0}, 3,
                  "where of bools");
    assert_values(nb_where(cond, T1(NB_UINT8, 7), T1(NB_UINT8, 200)), NB_UINT8, (double[]){7, 200, 7}, 3,
                  "where uint8 broadcast");
    NBT_FAILS(nb_where(T1(NB_FLOAT32, 1, 0, 1), cond, cond) == NULL, NB_ERR_DTYPE, "where", "bool", "float32", NULL);
    NBT_FAILS(nb_where(NULL, cond, cond) == NULL, NB_ERR_INVALID_ARG, "where", NULL);
    NBT_FAILS(nb_where(cond, cond, NULL) == NULL, NB_ERR_INVALID_ARG, "where", NULL);
    NBT_FAILS(nb_where(cond, T1(NB_FLOAT32, 1, 2), cond) == NULL, NB_ERR_SHAPE, "where", "[3]", "[2]", NULL);
    nb_scope_end(sc);
}

static void test_errors(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor *a = NBT_CHECK(nb_ones((int64_t[]){2, 3}, 2, &F64));
    nb_tensor *b = NBT_CHECK(nb_ones((int64_t[]){4}, 1, &F64));
    NBT_FAILS(nb_add(a, b) == NULL, NB_ERR_SHAPE, "add: shapes [2, 3] and [4] cannot be broadcast", NULL);
    NBT_FAILS(nb_maximum(b, a) == NULL, NB_ERR_SHAPE, "maximum: shapes [4] and [2, 3]", NULL);
    NBT_FAILS(nb_lt(a, b) == NULL, NB_ERR_SHAPE, "lt", NULL);
    NBT_FAILS(nb_add(NULL, b) == NULL, NB_ERR_INVALID_ARG, "add", "NULL", NULL);
    NBT_FAILS(nb_pow(a, NULL) == NULL, NB_ERR_INVALID_ARG, "pow", "NULL", NULL);
    NBT_FAILS(nb_mul_scalar(NULL, 2) == NULL, NB_ERR_INVALID_ARG, "mul", "NULL", NULL);
    NBT_FAILS(nb_eq_scalar(NULL, 2) == NULL, NB_ERR_INVALID_ARG, "eq", "NULL", NULL);
    nb_tensor *bb = T1(NB_BOOL, 1, 0);
    NBT_FAILS(nb_sub(bb, bb) == NULL, NB_ERR_DTYPE, "sub", "bool", NULL);
    NBT_FAILS(nb_pow(bb, bb) == NULL, NB_ERR_DTYPE, "pow", "bool", NULL);
    assert_values(nb_sub_scalar(bb, 1), NB_FLOAT32, (double[]){0, -1}, 2, "bool - Python float is fine");
    /* empty tensors broadcast like any other */
    nb_tensor *e = NBT_CHECK(nb_zeros((int64_t[]){0, 3}, 2, &F64));
    nb_tensor *sum = NBT_CHECK(nb_add(e, NBT_CHECK(nb_ones((int64_t[]){3}, 1, &F64))));
    assert_true(nb_tensor_ndim(sum) == 2 && nb_tensor_shape(sum)[0] == 0 && nb_tensor_shape(sum)[1] == 3);
    NBT_OK(nb_mul_scalar_(e, 2.0));
    NBT_FAILS(nb_add(e, b) == NULL, NB_ERR_SHAPE, "add: shapes [0, 3] and [4]", NULL);
    nb_tensor_params h = nb_tensor_params_default();
    h.dtype = NB_FLOAT16;
    nb_tensor *half = nb_ones((int64_t[]){2}, 1, &h);
    if (half) NBT_FAILS(nb_add(half, half) == NULL, NB_ERR_DTYPE, "add", "float16", NULL);
    nb_scope_end(sc);
}

/* ---- fast paths against the strided reference path, and across thread counts ---------------- */

static nb_tensor *big_randn(const int64_t *shape, int nd, nb_dtype dt)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = dt;
    return NBT_CHECK(nb_randn(shape, nd, &p));
}

/* op on contiguous inputs (fast paths, several threads) equals op on non-contiguous copies (the
 * strided path), bit for bit: they do the same arithmetic. */
static void check_paths(nb_tensor *const *in, const char *what)
{
    for (int i = 0; i < N_OPS; i++) {
        const op_entry *e = &OPS[i];
        if (!e->bin && !e->scal && strcmp(e->name, "where") != 0) continue;
        nb_scope *sc = nb_scope_begin();
        nb_tensor *x[3] = {in[0], in[1], NULL}, *nc[3] = {nbt_noncontig(in[0]), nbt_noncontig(in[1]), NULL};
        if (!e->bin && !e->scal) {
            x[2] = x[1];
            x[1] = x[0];
            x[0] = NBT_CHECK(nb_gt(in[0], in[1]));
            nc[2] = nc[1];
            nc[1] = nc[0];
            nc[0] = nbt_noncontig(x[0]);
        }
        char label[200];
        snprintf(label, sizeof label, "%s: %s, fast paths vs strided path", what, e->name);
        nb_tensor *fast = NBT_CHECK(call_op(e, x, 0.75));
        nb_tensor *ref = NBT_CHECK(call_op(e, nc, 0.75));
        nbt_assert_close(fast, ref, 0, 0, label);
        nb_scope_end(sc);
    }
}

static void test_fast_vs_reference(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_manual_seed(11);
    int threads = nb_get_num_threads();
    NBT_OK(nb_set_num_threads(threads > 1 ? threads : 2));
    for (int d = 0; d < 2; d++) {
        nb_dtype dt = d ? NB_FLOAT64 : NB_FLOAT32;
        /* above the grain: several threads; an odd size leaves a tail */
        nb_tensor *a = big_randn((int64_t[]){100003}, 1, dt), *b = big_randn((int64_t[]){100003}, 1, dt);
        check_paths((nb_tensor *[]){nb_abs(a), b}, "same shape");
        /* a row, a column and a 0-dim tensor broadcast */
        nb_tensor *m = big_randn((int64_t[]){301, 257}, 2, dt);
        check_paths((nb_tensor *[]){m, big_randn((int64_t[]){257}, 1, dt)}, "row broadcast");
        check_paths((nb_tensor *[]){big_randn((int64_t[]){301, 1}, 2, dt), m}, "column broadcast");
        check_paths((nb_tensor *[]){big_randn(NULL, 0, dt), m}, "0-dim with a matrix");
        /* one thread gives the same values */
        nb_tensor *two = NBT_CHECK(nb_add(a, b));
        NBT_OK(nb_set_num_threads(1));
        nbt_assert_close(NBT_CHECK(nb_add(a, b)), two, 0, 0, "1 thread vs several");
        NBT_OK(nb_set_num_threads(threads > 1 ? threads : 2));
    }
    /* large enough for the streaming stores (more than half any last-level cache), starting one
     * element in so that the aligned part has a head and a tail */
    for (int d = 0; d < 2; d++) {
        nb_dtype dt = d ? NB_FLOAT64 : NB_FLOAT32;
        int64_t n = (int64_t)3 << 21;
        nb_tensor *a = NBT_CHECK(nb_narrow(big_randn(&n, 1, dt), 0, 1, n - 1));
        nb_tensor *b = NBT_CHECK(nb_narrow(big_randn(&n, 1, dt), 0, 0, n - 1));
        bin_fn fns[4] = {nb_add, nb_sub, nb_mul, nb_div};
        scal_fn sfns[4] = {nb_add_scalar, nb_sub_scalar, nb_mul_scalar, nb_div_scalar};
        nb_tensor *na = nbt_noncontig(a), *nbb = nbt_noncontig(b);
        for (int i = 0; i < 4; i++) {
            nb_scope *s2 = nb_scope_begin();
            nbt_assert_close(fns[i](a, b), fns[i](na, nbb), 0, 0, "large: streaming vs strided path");
            nbt_assert_close(sfns[i](a, -1.25), sfns[i](na, -1.25), 0, 0, "large scalar: streaming vs strided path");
            nb_scope_end(s2);
        }
        nb_tensor *c = NBT_CHECK(nb_clone(a));
        NBT_OK(nb_mul_(c, b));
        nbt_assert_close(c, nb_mul(na, nbb), 0, 0, "large in place: streaming vs strided path");
    }
    /* the scalar form and a 0-dim tensor operand agree */
    nb_tensor *x = big_randn((int64_t[]){40000}, 1, NB_FLOAT32);
    nbt_assert_close(nb_mul_scalar(x, 0.3), nb_mul(x, scalar0(NB_FLOAT32, 0.3)), 0, 0, "mul_scalar vs 0-dim");
    nbt_assert_close(nb_pow_scalar(nb_abs(x), 0.5), nb_pow(nb_abs(x), scalar0(NB_FLOAT32, 0.5)), 1e-6, 0,
                     "pow_scalar 0.5 vs 0-dim");
    /* integer dtypes through the fast paths vs the strided one */
    nb_tensor *ia = NBT_CHECK(nb_randint(-1000, 1000, (int64_t[]){70001}, 1, NULL));
    nb_tensor *ib = NBT_CHECK(nb_randint(-5, 5, (int64_t[]){70001}, 1, NULL));
    nbt_assert_close(nb_mul(ia, ib), nb_mul(nbt_noncontig(ia), nbt_noncontig(ib)), 0, 0, "int64 mul paths");
    nbt_assert_close(nb_maximum(ia, ib), nb_maximum(nbt_noncontig(ia), ib), 0, 0, "int64 maximum paths");
    NBT_OK(nb_set_num_threads(threads));
    nb_scope_end(sc);
}

/* Broadcasts whose runs are short and whose iterator keeps several dims (x [A, B, C, D] with
 * y [1, B, 1, D], and a channels-last x with a [1, C, 1, 1] bias): the loops over stretches of
 * runs, with the stretches cut across threads at any row, against the sums computed here from
 * the indices, at 1 to 3 threads. float32 add, float64 mul, int64 sub, and a comparison. */
static void test_short_runs_by_hand(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_manual_seed(5);
    int threads = nb_get_num_threads();
    enum { A = 200, B = 7, C = 50, D = 3 }; /* 210000 elements: three grains, so up to three threads */
    int64_t xs[4] = {A, B, C, D}, ys[4] = {1, B, 1, D};
    nb_tensor *x = big_randn(xs, 4, NB_FLOAT64), *y = big_randn(ys, 4, NB_FLOAT64);
    const double *xv = nb_tensor_data_ptr(x), *yv = nb_tensor_data_ptr(y);
    double *sum = malloc(sizeof(double) * A * B * C * D), *prod = malloc(sizeof(double) * A * B * C * D);
    assert_non_null(sum);
    assert_non_null(prod);
    for (int a = 0; a < A; a++)
        for (int b = 0; b < B; b++)
            for (int c = 0; c < C; c++)
                for (int d = 0; d < D; d++) {
                    int i = ((a * B + b) * C + c) * D + d, j = b * D + d;
                    sum[i] = xv[i] + yv[j];
                    prod[i] = xv[i] * yv[j];
                }
    nb_tensor_params p64 = nb_tensor_params_default();
    p64.dtype = NB_FLOAT64;
    nb_tensor *wsum = NBT_CHECK(nb_tensor_from_data(sum, xs, 4, &p64));
    nb_tensor *wprod = NBT_CHECK(nb_tensor_from_data(prod, xs, 4, &p64));
    nb_tensor_params pi = nb_tensor_params_default();
    pi.dtype = NB_INT64;
    nb_tensor *xi = NBT_CHECK(nb_to_dtype(NBT_CHECK(nb_mul_scalar(x, 1000)), NB_INT64));
    nb_tensor *yi = NBT_CHECK(nb_to_dtype(NBT_CHECK(nb_mul_scalar(y, 1000)), NB_INT64));
    const int64_t *xiv = nb_tensor_data_ptr(xi), *yiv = nb_tensor_data_ptr(yi);
    int64_t *diff = malloc(sizeof(int64_t) * A * B * C * D);
    uint8_t *gt = malloc((size_t)A * B * C * D);
    assert_non_null(diff);
    assert_non_null(gt);
    for (int i = 0; i < A * B * C * D; i++) {
        int j = (i / (C * D)) % B * D + i % D;
        diff[i] = xiv[i] - yiv[j];
        gt[i] = xv[i] > yv[j];
    }
    nb_tensor *wdiff = NBT_CHECK(nb_tensor_from_data(diff, xs, 4, &pi));
    nb_tensor_params pb = nb_tensor_params_default();
    pb.dtype = NB_BOOL;
    nb_tensor *wgt = NBT_CHECK(nb_tensor_from_data(gt, xs, 4, &pb));
    /* channels-last [32, 32, 14, 14] plus a [1, 32, 1, 1] bias: runs of the 32 channels */
    nb_tensor *img = big_randn((int64_t[]){32, 32, 14, 14}, 4, NB_FLOAT32), *bias = big_randn((int64_t[]){1, 32, 1, 1}, 4, NB_FLOAT32);
    nb_tensor *cl = NBT_CHECK(nb_contiguous_format(img, NB_CHANNELS_LAST));
    const float *iv = nb_tensor_data_ptr(img), *bv = nb_tensor_data_ptr(bias);
    float *ib = malloc(sizeof(float) * 32 * 32 * 14 * 14);
    assert_non_null(ib);
    for (int i = 0; i < 32 * 32 * 14 * 14; i++) ib[i] = iv[i] + bv[(i / (14 * 14)) % 32];
    nb_tensor *wib = NBT_CHECK(nb_tensor_from_data(ib, (int64_t[]){32, 32, 14, 14}, 4, NULL));
    nb_tensor *x32 = NBT_CHECK(nb_to_dtype(x, NB_FLOAT32)), *y32 = NBT_CHECK(nb_to_dtype(y, NB_FLOAT32));
    for (int nt = 1; nt <= 3; nt++) {
        NBT_OK(nb_set_num_threads(nt));
        nbt_assert_close(nb_add(x32, y32), wsum, 1e-6, 1e-6, "float32 [A, B, C, D] + [1, B, 1, D]");
        nbt_assert_close(nb_mul(x, y), wprod, 0, 0, "float64 [A, B, C, D] * [1, B, 1, D]");
        nbt_assert_close(nb_sub(xi, yi), wdiff, 0, 0, "int64 [A, B, C, D] - [1, B, 1, D]");
        nbt_assert_close(nb_gt(x, y), wgt, 0, 0, "[A, B, C, D] > [1, B, 1, D]");
        nb_tensor *o = NBT_CHECK(nb_add(cl, bias));
        nbt_assert_close(o, wib, 0, 0, "channels-last + [1, C, 1, 1]");
    }
    NBT_OK(nb_set_num_threads(threads));
    free(sum);
    free(prod);
    free(diff);
    free(gt);
    free(ib);
    nb_scope_end(sc);
}

/* the in-place kernel writes into self, also when self is not contiguous */
static void test_inplace_noncontig_and_large(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor *m = big_randn((int64_t[]){300, 200}, 2, NB_FLOAT32);
    nb_tensor *r = big_randn((int64_t[]){200}, 1, NB_FLOAT32);
    nb_tensor *want = NBT_CHECK(nb_add(m, r));
    nb_tensor *self = nbt_noncontig(m);
    NBT_OK(nb_add_(self, r));
    nbt_assert_close(self, want, 0, 0, "non-contiguous self += row");
    nb_tensor *c = NBT_CHECK(nb_clone(m));
    NBT_OK(nb_mul_scalar_(c, 3.0));
    nbt_assert_close(c, nb_mul_scalar(m, 3.0), 0, 0, "large self *= 3");
    nb_scope_end(sc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_promotion),
        cmocka_unit_test(test_integer_semantics),
        cmocka_unit_test(test_comparisons),
        cmocka_unit_test(test_where),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_inplace_errors),
        cmocka_unit_test(test_inplace_dtypes_and_overlap),
        cmocka_unit_test(test_inplace_autograd_by_hand),
        cmocka_unit_test(test_inplace_autograd_cast),
        cmocka_unit_test(test_version_counter),
        cmocka_unit_test(test_fast_vs_reference),
        cmocka_unit_test(test_short_runs_by_hand),
        cmocka_unit_test(test_inplace_noncontig_and_large),
        cmocka_unit_test(test_reference_cases),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_gradcheck_inplace),
    };
    return NBT_RUN(tests);
}
