/* Elementwise unary ops and activations: every case of tests/ref/cases_unary.py against PyTorch
 * (forward, result dtype and gradient; contiguous and non-contiguous inputs and upstream
 * gradients), finite-difference gradients in float64, the float32 fast paths (polynomials,
 * vectorised clones) against the float64 libm reference over dense sweeps, layout and
 * thread-count independence, hand-computed integer semantics, and every error path.
 *
 * Tolerances: rtol 1e-5 (float32) / 1e-10 (float64), atol 0, except where noted at OP_TABLE. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbtest.h"

typedef nb_tensor *(*op_fn)(const nb_tensor *x, const double *prm);

#define WRAP(name, call)                                                                         \
    static nb_tensor *f_##name(const nb_tensor *x, const double *p)                             \
    {                                                                                            \
        (void)p;                                                                                 \
        return call;                                                                             \
    }
WRAP(neg, nb_neg(x))
WRAP(abs, nb_abs(x))
WRAP(sign, nb_sign(x))
WRAP(exp, nb_exp(x))
WRAP(log, nb_log(x))
WRAP(log1p, nb_log1p(x))
WRAP(sqrt, nb_sqrt(x))
WRAP(rsqrt, nb_rsqrt(x))
WRAP(sin, nb_sin(x))
WRAP(cos, nb_cos(x))
WRAP(tanh, nb_tanh(x))
WRAP(sigmoid, nb_sigmoid(x))
WRAP(relu, nb_relu(x))
WRAP(leaky_relu, nb_leaky_relu(x, p[0]))
WRAP(gelu, nb_gelu(x, p[2] != 0 ? NB_GELU_TANH : NB_GELU_NONE))
WRAP(silu, nb_silu(x))
WRAP(softplus, nb_softplus(x, p[0], p[1]))
WRAP(clamp, nb_clamp(x, p[0], p[1]))
WRAP(logical_not, nb_logical_not(x))

typedef struct op_entry {
    const char *name; /* as in the reference case names */
    op_fn fn;
    /* absolute tolerances against PyTorch: values and gradients, float32 and float64 */
    double atol32, gatol32, atol64, gatol64;
} op_entry;

/* OP_TABLE. Absolute tolerances where a formula cancels, in PyTorch's results and in ours:
 *  tanh, sigmoid: the gradient comes from the output, as PyTorch's does; 1 - y^2 and 1 - y
 *    cancel as y -> 1, so 1 ulp between two outputs becomes ~1 ulp of 1 in the gradient.
 *  silu: its gradient has x (1 - s) with s -> 1 likewise.
 *  gelu: PyTorch computes 1 + erf(x/sqrt2) and 1 + tanh(u) as written, which cancel for x < 0:
 *    in float32 its exact-form result at x = -5.5 is off by 100%, in float64 by 1e-8 relative.
 *    nabla's exact form goes through erfc, accurate in the tail (see test_fast_paths), so the
 *    two agree only to about 1 ulp of 1 absolute. Its gradient also crosses 0 at x = -0.75. */
static const op_entry OPS[] = {
    {"neg", f_neg, 0, 0, 0, 0},
    {"abs", f_abs, 0, 0, 0, 0},
    {"sign", f_sign, 0, 0, 0, 0},
    {"exp", f_exp, 0, 0, 0, 0},
    {"log", f_log, 0, 0, 0, 0},
    {"log1p", f_log1p, 0, 0, 0, 0},
    {"sqrt", f_sqrt, 0, 0, 0, 0},
    {"rsqrt", f_rsqrt, 0, 0, 0, 0},
    {"sin", f_sin, 0, 0, 0, 0},
    {"cos", f_cos, 0, 0, 0, 0},
    {"tanh", f_tanh, 0, 2e-7, 0, 4e-16},
    {"sigmoid", f_sigmoid, 0, 2e-7, 0, 4e-16},
    {"relu", f_relu, 0, 0, 0, 0},
    {"leaky_relu", f_leaky_relu, 0, 0, 0, 0},
    {"gelu", f_gelu, 2e-7, 5e-7, 2e-15, 2e-15},
    {"silu", f_silu, 0, 5e-7, 0, 4e-15},
    {"softplus", f_softplus, 0, 0, 0, 0},
    {"clamp", f_clamp, 0, 0, 0, 0},
    {"logical_not", f_logical_not, 0, 0, 0, 0},
};
#define N_OPS ((int)(sizeof OPS / sizeof OPS[0]))

static const op_entry *find_op(const char *name)
{
    size_t len = strcspn(name, "/");
    for (int i = 0; i < N_OPS; i++)
        if (strlen(OPS[i].name) == len && strncmp(OPS[i].name, name, len) == 0) return &OPS[i];
    return NULL;
}

static const nb_tensor_params F64 = {NB_FLOAT64, {NB_DEVICE_CPU, 0}, false, NULL};

static nb_tensor *make(nb_dtype dt, const double *v, int64_t n)
{
    nb_tensor *t = NBT_CHECK(nb_tensor_from_data(v, &n, 1, &F64));
    return NBT_CHECK(nb_to_dtype(t, dt));
}

#define NV(...) (sizeof((double[]){__VA_ARGS__}) / sizeof(double))
#define T1(dt, ...) make(dt, (double[]){__VA_ARGS__}, (int64_t)NV(__VA_ARGS__))

static void assert_values(const nb_tensor *got, nb_dtype dt, const double *want, int64_t n,
                          const char *what)
{
    assert_non_null(got);
    if (nb_tensor_dtype(got) != dt) {
        print_error("%s: dtype %s, expected %s\n", what, nb_dtype_name(nb_tensor_dtype(got)),
                    nb_dtype_name(dt));
        fail();
    }
    assert_int_equal(nb_tensor_numel(got), n);
    nbt_assert_close(got, make(NB_FLOAT64, want, n), 0, 0, what);
}

#define ASSERT_VALUES(got, dt, what, ...)                                                        \
    assert_values((got), (dt), (double[]){__VA_ARGS__}, (int64_t)NV(__VA_ARGS__), (what))

/* ---- PyTorch reference cases ------------------------------------------------------------- */

static void run_case(const nb_tensor_map *m, const char *name, bool noncontig)
{
    nb_scope *sc = nb_scope_begin();
    const op_entry *e = find_op(name);
    if (!e) {
        print_error("%s: no op for this reference case\n", name);
        fail();
    }
    char what[256];
    snprintf(what, sizeof what, "%s%s", name, noncontig ? " (non-contiguous)" : "");
    nb_tensor *in = NBT_CHECK(nbt_ref(m, name, "in0")), *want = NBT_CHECK(nbt_ref(m, name, "out"));
    nb_tensor *gout = nbt_ref(m, name, "gout"), *grad0 = nbt_ref(m, name, "grad0");
    double prm[3];
    NBT_OK(nb_tensor_read(NBT_CHECK(nbt_ref(m, name, "params")), prm, sizeof prm));
    bool f64 = nb_tensor_dtype(want) == NB_FLOAT64;
    double rtol = f64 ? 1e-10 : 1e-5, atol = f64 ? e->atol64 : e->atol32;
    double gatol = f64 ? e->gatol64 : e->gatol32;
    /* subnormal results carry a few significant bits: PyTorch's exp rounds them differently */
    atol = fmax(atol, f64 ? 2.3e-308 : 1.2e-38);
    gatol = fmax(gatol, f64 ? 2.3e-308 : 1.2e-38);
    /* a non-contiguous input is a strided view: a leaf of its own, so its gradient is read back
     * with the same layout */
    nb_tensor *x = noncontig ? nbt_noncontig(in) : NBT_CHECK(nb_clone(in));
    if (grad0) NBT_OK(nb_tensor_set_requires_grad(x, true));
    nb_tensor *y = NBT_CHECK(e->fn(x, prm));
    if (nb_tensor_dtype(y) != nb_tensor_dtype(want)) {
        print_error("%s: result dtype %s, PyTorch's %s\n", what, nb_dtype_name(nb_tensor_dtype(y)),
                    nb_dtype_name(nb_tensor_dtype(want)));
        fail();
    }
    nbt_assert_close(y, want, rtol, atol, what);
    if (grad0) {
        NBT_OK(nb_backward(y, noncontig ? nbt_noncontig(gout) : gout, NB_BACKWARD_DEFAULT));
        char gw[300];
        snprintf(gw, sizeof gw, "%s: gradient", what);
        nbt_assert_close(NBT_CHECK(nb_tensor_grad(x)), grad0, rtol, gatol, gw);
    } else {
        assert_false(nb_tensor_requires_grad(y));
    }
    nb_scope_end(sc);
}

static void test_reference_cases(void **state)
{
    nbt_run_reference("unary", 101, run_case);
}

/* An upstream gradient with a broadcast (stride 0) dim reaches the fused backward kernels'
 * strided path: it must give the values of the same gradient laid out densely. */
static void test_expanded_upstream_gradient(void **state)
{
    nb_scope *sc = nb_scope_begin();
    static const char *ops[] = {"relu", "leaky_relu", "sigmoid", "tanh", "gelu", "silu",
                                "softplus"};
    nb_tensor_params p = F64;
    nb_generator *gen = nb_generator_create(7);
    p.generator = gen;
    for (int d = 0; d < 2; d++) {
        nb_dtype dt = d ? NB_FLOAT64 : NB_FLOAT32;
        nb_tensor *xs = NBT_CHECK(nb_to_dtype(nb_randn((int64_t[]){5, 33}, 2, &p), dt));
        nb_tensor *row = NBT_CHECK(nb_to_dtype(nb_randn((int64_t[]){1, 33}, 2, &p), dt));
        nb_tensor *gexp = NBT_CHECK(nb_expand(row, (int64_t[]){5, 33}, 2));
        nb_tensor *gdense = NBT_CHECK(nb_contiguous(gexp));
        for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
            const op_entry *e = find_op(ops[i]);
            double prm[3] = {0.1, 20, 1};
            nb_tensor *a = nbt_leaf(xs), *b = nbt_leaf(xs);
            NBT_OK(nb_backward(NBT_CHECK(e->fn(a, prm)), gexp, 0));
            NBT_OK(nb_backward(NBT_CHECK(e->fn(b, prm)), gdense, 0));
            nbt_assert_close(nb_tensor_grad(a), nb_tensor_grad(b), 0, 0, ops[i]);
        }
    }
    nb_generator_free(gen);
    nb_scope_end(sc);
}

/* ---- finite differences (float64, inputs away from kinks and domain edges) ---------------- */

typedef struct fd_ctx {
    const op_entry *e;
    double prm[3];
} fd_ctx;

static nb_tensor *fd_fn(nb_tensor *const *in, int n, void *ctx)
{
    const fd_ctx *c = ctx;
    return c->e->fn(in[0], c->prm);
}

static void test_finite_differences(void **state)
{
    nb_scope *sc = nb_scope_begin();
    /* |x| in [0.3, 2.6]: no point within 0.1 of relu/abs/leaky's kink at 0 or clamp's bounds */
    double signed_v[] = {-2.6, -1.7, -1.2, -0.85, -0.45, -0.3, 0.3, 0.55, 0.7, 1.3, 1.9, 2.6};
    double pos_v[] = {0.2, 0.35, 0.5, 0.8, 1.1, 1.5, 2.0, 2.7, 3.3, 4.0, 5.5, 7.0};
    static const struct { const char *op; double prm[3]; bool positive; } cases[] = {
        {"neg", {0}, false},          {"abs", {0}, false},         {"sign", {0}, false},
        {"exp", {0}, false},          {"log", {0}, true},          {"log1p", {0}, true},
        {"sqrt", {0}, true},          {"rsqrt", {0}, true},        {"sin", {0}, false},
        {"cos", {0}, false},          {"tanh", {0}, false},        {"sigmoid", {0}, false},
        {"relu", {0}, false},         {"leaky_relu", {0.1}, false}, {"leaky_relu", {-0.3}, false},
        {"gelu", {0, 0, 0}, false},   {"gelu", {0, 0, 1}, false},  {"silu", {0}, false},
        {"softplus", {1, 20}, false}, {"softplus", {2, 3}, false}, /* 2x > 3 at x = 1.9, 2.6 */
        {"clamp", {-1, 1}, false},    {"clamp", {0.4, INFINITY}, false},
        {"clamp", {-INFINITY, -0.4}, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fd_ctx c = {find_op(cases[i].op), {0}};
        memcpy(c.prm, cases[i].prm, sizeof c.prm);
        nb_tensor *x = NBT_CHECK(nb_tensor_from_data(cases[i].positive ? pos_v : signed_v,
                                                     (int64_t[]){3, 4}, 2, &F64));
        char what[96];
        snprintf(what, sizeof what, "%s(%g, %g, %g)", cases[i].op, c.prm[0], c.prm[1], c.prm[2]);
        nbt_gradcheck(fd_fn, &c, &x, 1, 1e-6, 1e-8, 1e-6, what);
        nb_tensor *xt = NBT_CHECK(nb_transpose(x, 0, 1)); /* a strided input */
        nbt_gradcheck(fd_fn, &c, &xt, 1, 1e-6, 1e-8, 1e-6, what);
    }
    nb_scope_end(sc);
}

/* ---- the float32 fast paths against the float64 reference ---------------------------------- */

/* n float32 values spread over [lo, hi]: half uniform, half log-spaced magnitudes from mn up
 * (both signs where lo < 0). */
static nb_tensor *sweep(double lo, double hi, double mn, int64_t n)
{
    double *v = malloc((size_t)n * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) {
        double u = (double)i / (double)(n - 1);
        if (i % 2) {
            v[i] = lo + (hi - lo) * u;
        } else {
            double mx = fmax(fabs(lo), fabs(hi)), mag = mn * pow(mx / mn, u);
            v[i] = (i % 4 == 0 && lo < 0) ? -mag : mag;
            if (v[i] < lo || v[i] > hi) v[i] = lo + (hi - lo) * u;
        }
    }
    nb_tensor *t = NBT_CHECK(nb_tensor_from_data(v, &n, 1, &F64));
    free(v);
    return NBT_CHECK(nb_to_dtype(t, NB_FLOAT32));
}

/* f on float32 x against f on float64 x rounded to float32, values and gradients: a few ulp
 * (rtol 6e-7 = 5 ulp), plus atol where the float32 result is subnormal (exp's range ends at
 * different points) or where a formula cancels (noted per case). */
static void test_fast_paths(void **state)
{
    nb_scope *sc = nb_scope_begin();
    static const struct {
        const char *op;
        double prm[3], lo, hi, mn, atol, gatol;
    } cases[] = {
        {"exp", {0}, -110, 89, 1e-9, 1e-37, 1e-37},
        {"log", {0}, 0, 3e38, 1e-44, 0, 0},
        {"log1p", {0}, -1, 3e38, 1e-30, 0, 1e-37},
        {"sqrt", {0}, 0, 3e38, 1e-44, 0, 0},
        {"rsqrt", {0}, 1e-24, 3e38, 1e-24, 0, 1e-37}, /* the gradient y^3 overflows below */
        /* their gradients come from the float32 output, as PyTorch's: 1 - y^2 and 1 - y
         * cancel where y -> 1, to about 2 ulp of 1 */
        {"tanh", {0}, -60, 60, 1e-30, 0, 3e-7},
        {"sigmoid", {0}, -88.7, 100, 1e-9, 1e-37, 3e-7},
        {"silu", {0}, -88.7, 100, 1e-9, 1e-37, 2e-6}, /* x (1 - s), s -> 1, as tanh */
        {"softplus", {1, 20}, -100, 100, 1e-9, 1e-37, 1e-37},
        {"softplus", {0.5, 30}, -100, 100, 1e-9, 1e-37, 1e-37},
        {"leaky_relu", {0.01}, -1e6, 1e6, 1e-30, 0, 0},
        {"relu", {0}, -1e6, 1e6, 1e-30, 0, 0},
        /* gelu's gradient crosses 0 at x = -0.75: 3e-8 absolute there */
        {"gelu", {0, 0, 0}, -40, 40, 1e-9, 1e-37, 3e-8},
        /* PyTorch's tanh form computes 1 + tanh(u) as written: it cancels for x < 0 in float32 */
        {"gelu", {0, 0, 1}, -12, 40, 1e-9, 2e-7, 3e-6},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const op_entry *e = find_op(cases[i].op);
        /* more elements than one thread's grain: the threaded path */
        nb_tensor *x32 = sweep(cases[i].lo, cases[i].hi, cases[i].mn, 100003);
        nb_tensor *a = nbt_leaf(x32), *b = nbt_leaf(NBT_CHECK(nb_to_dtype(x32, NB_FLOAT64)));
        nb_tensor *ya = NBT_CHECK(e->fn(a, cases[i].prm)), *yb = NBT_CHECK(e->fn(b, cases[i].prm));
        char what[96];
        snprintf(what, sizeof what, "%s(%g, %g, %g) float32 vs float64", cases[i].op,
                 cases[i].prm[0], cases[i].prm[1], cases[i].prm[2]);
        nbt_assert_close(ya, NBT_CHECK(nb_to_dtype(yb, NB_FLOAT32)), 6e-7, cases[i].atol, what);
        nb_tensor *g = NBT_CHECK(nb_ones_like(ya));
        NBT_OK(nb_backward(ya, g, 0));
        NBT_OK(nb_backward(yb, NBT_CHECK(nb_to_dtype(g, NB_FLOAT64)), 0));
        strcat(what, " (gradient)");
        nb_tensor *gb = NBT_CHECK(nb_to_dtype(nb_tensor_grad(b), NB_FLOAT32));
        nbt_assert_close(nb_tensor_grad(a), gb, 6e-7, cases[i].gatol, what);
    }
    nb_scope_end(sc);
}

/* Results do not depend on layout (strided runs are gathered through the same vector loop) nor
 * on the thread count: bit for bit. */
static void test_layout_and_threads(void **state)
{
    nb_scope *sc = nb_scope_begin();
    int threads = nb_get_num_threads();
    nb_tensor *x = sweep(-30, 30, 1e-6, 70007);
    nb_tensor *x2 = NBT_CHECK(nb_reshape(x, (int64_t[]){7, 10001}, 2));
    nb_tensor *xs = nbt_noncontig(x2);
    for (int i = 0; i < N_OPS; i++) {
        double prm[3] = {0.5, 2, 1};
        if (strcmp(OPS[i].name, "clamp") == 0) prm[0] = -0.5;
        NBT_OK(nb_set_num_threads(1));
        nb_tensor *one = NBT_CHECK(OPS[i].fn(x2, prm));
        NBT_OK(nb_set_num_threads(2));
        nb_tensor *two = NBT_CHECK(OPS[i].fn(x2, prm));
        nb_tensor *strided = NBT_CHECK(OPS[i].fn(xs, prm));
        nbt_assert_close(two, one, 0, 0, OPS[i].name);
        nbt_assert_close(strided, one, 0, 0, OPS[i].name);
    }
    NBT_OK(nb_set_num_threads(threads));
    nb_scope_end(sc);
}

/* ---- hand-computed semantics --------------------------------------------------------------- */

static void test_integer_semantics(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor *u = T1(NB_UINT8, 0, 1, 7, 200, 255);
    ASSERT_VALUES(nb_clamp(u, -1, 300), NB_UINT8, "uint8 clamp, bounds past the range", 0, 1, 7,
                  200, 255);
    ASSERT_VALUES(nb_clamp(u, 2, 100), NB_UINT8, "uint8 clamp", 2, 2, 7, 100, 100);
    ASSERT_VALUES(nb_neg(u), NB_UINT8, "uint8 neg wraps", 0, 255, 249, 56, 1);
    ASSERT_VALUES(nb_sign(u), NB_UINT8, "uint8 sign", 0, 1, 1, 1, 1);
    nb_tensor *i = T1(NB_INT32, -2147483648.0, -3, 0, 3, 2147483647.0);
    ASSERT_VALUES(nb_clamp(i, -INFINITY, INFINITY), NB_INT32, "int32 clamp without bounds",
                  -2147483648.0, -3, 0, 3, 2147483647.0);
    ASSERT_VALUES(nb_clamp(i, -1e300, 1), NB_INT32, "int32 clamp, huge whole bound",
                  -2147483648.0, -3, 0, 1, 1);
    ASSERT_VALUES(nb_clamp(i, -2.5, INFINITY), NB_FLOAT32, "int32 clamp, fractional bound", -2.5,
                  -2.5, 0, 3, 2147483648.0); /* 2^31 - 1 rounded to float32 */
    ASSERT_VALUES(nb_relu(i), NB_INT32, "int32 relu", 0, 0, 0, 3, 2147483647.0);
    nb_tensor *l = T1(NB_INT64, -5, 9007199254740993.0, 4);
    ASSERT_VALUES(nb_clamp(l, 0, INFINITY), NB_INT64, "int64 clamp keeps large values", 0,
                  9007199254740993.0, 4);
    nb_tensor *b = T1(NB_BOOL, 0, 1, 1);
    ASSERT_VALUES(nb_sign(b), NB_BOOL, "bool sign", 0, 1, 1);
    ASSERT_VALUES(nb_logical_not(b), NB_BOOL, "bool logical_not", 1, 0, 0);
    ASSERT_VALUES(nb_clamp(b, 0, 0), NB_INT64, "bool clamp (whole bounds: int64)", 0, 0, 0);
    double s1 = (float)(1 / (1 + exp(-1.0)));
    ASSERT_VALUES(nb_sigmoid(b), NB_FLOAT32, "bool sigmoid", 0.5, s1, s1);
    /* a scalar and an empty tensor */
    nb_tensor *s = NBT_CHECK(nb_scalar_tensor(-2, &F64));
    nb_tensor *r = NBT_CHECK(nb_abs(s));
    assert_int_equal(nb_tensor_ndim(r), 0);
    double v;
    NBT_OK(nb_item(r, &v));
    assert_true(v == 2);
    nb_tensor *z = NBT_CHECK(nb_zeros((int64_t[]){0, 3}, 2, &F64));
    nb_tensor *ze = NBT_CHECK(nb_exp(z));
    assert_int_equal(nb_tensor_numel(ze), 0);
    assert_int_equal(nb_tensor_shape(ze)[1], 3);
    nb_scope_end(sc);
}

static void test_autograd_recording(void **state)
{
    nb_scope *sc = nb_scope_begin();
    nb_tensor *x = nbt_leaf(T1(NB_FLOAT64, -1, 0.5, 2));
    nb_tensor *y = NBT_CHECK(nb_exp(x));
    assert_string_equal(nb_tensor_grad_fn_name(y), "ExpBackward0");
    /* exp saves its output: changing it in place makes backward fail instead of being wrong */
    NBT_OK(nb_mul_scalar_(y, 2));
    NBT_FAILS(nb_backward(y, NBT_CHECK(nb_ones_like(y)), 0) != NB_OK, NB_ERR_AUTOGRAD,
              "modified by an in-place operation", "exp", NULL);
    /* relu saves its output, not its input: changing the input afterwards is fine */
    nb_tensor *h = NBT_CHECK(nb_mul_scalar(x, 1));
    nb_tensor *r = NBT_CHECK(nb_relu(h));
    NBT_OK(nb_add_scalar_(h, 5));
    NBT_OK(nb_backward(r, NBT_CHECK(nb_ones_like(r)), 0));
    ASSERT_VALUES(nb_tensor_grad(x), NB_FLOAT64, "relu gradient after input changed", 0, 1, 1);
    /* no grad mode, integer inputs: nothing recorded */
    bool prev = nb_set_grad_enabled(false);
    nb_tensor *q = NBT_CHECK(nb_tanh(x));
    nb_set_grad_enabled(prev);
    assert_false(nb_tensor_requires_grad(q));
    assert_null(nb_tensor_grad_fn_name(q));
    assert_false(nb_tensor_requires_grad(NBT_CHECK(nb_exp(T1(NB_INT64, 1, 2)))));
    nb_scope_end(sc);
}

/* ---- errors -------------------------------------------------------------------------------- */

static void test_errors(void **state)
{
    nb_scope *sc = nb_scope_begin();
    double prm[3] = {0.1, 20, 0};
    for (int i = 0; i < N_OPS; i++)
        NBT_FAILS(OPS[i].fn(NULL, prm) == NULL, NB_ERR_INVALID_ARG, OPS[i].name, "NULL", NULL);
    nb_tensor *b = T1(NB_BOOL, 0, 1);
    NBT_FAILS(nb_neg(b) == NULL, NB_ERR_DTYPE, "neg", "bool", "logical_not", NULL);
    NBT_FAILS(nb_abs(b) == NULL, NB_ERR_DTYPE, "abs", "bool", NULL);
    NBT_FAILS(nb_relu(b) == NULL, NB_ERR_DTYPE, "relu", "bool", NULL);
    nb_tensor *l = T1(NB_INT64, 1, 2);
    NBT_FAILS(nb_gelu(l, NB_GELU_NONE) == NULL, NB_ERR_DTYPE, "gelu", "int64", NULL);
    NBT_FAILS(nb_silu(T1(NB_INT32, 1)) == NULL, NB_ERR_DTYPE, "silu", "int32", NULL);
    NBT_FAILS(nb_softplus(T1(NB_UINT8, 1), 1, 20) == NULL, NB_ERR_DTYPE, "softplus", "uint8", NULL);
    NBT_FAILS(nb_leaky_relu(b, 0.01) == NULL, NB_ERR_DTYPE, "leaky_relu", "bool", NULL);
    nb_tensor *f = T1(NB_FLOAT32, 1, 2);
    NBT_FAILS(nb_gelu(f, (nb_gelu_approx)7) == NULL, NB_ERR_INVALID_ARG, "gelu", "7", NULL);
    NBT_FAILS(nb_clamp(f, NAN, 1) == NULL, NB_ERR_INVALID_ARG, "clamp", "NaN", NULL);
    NBT_FAILS(nb_clamp(f, 0, NAN) == NULL, NB_ERR_INVALID_ARG, "clamp", "NaN", NULL);
    /* float16 is reserved for CUDA: the CPU kernel refuses it */
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_FLOAT16;
    nb_tensor *h = NBT_CHECK(nb_empty((int64_t[]){2}, 1, &p));
    NBT_FAILS(nb_exp(h) == NULL, NB_ERR_DTYPE, "exp", "float16", NULL);
    NBT_FAILS(nb_relu(h) == NULL, NB_ERR_DTYPE, "relu", "float16", NULL);
    nb_scope_end(sc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_cases),
        cmocka_unit_test(test_expanded_upstream_gradient),
        cmocka_unit_test(test_finite_differences),
        cmocka_unit_test(test_fast_paths),
        cmocka_unit_test(test_layout_and_threads),
        cmocka_unit_test(test_integer_semantics),
        cmocka_unit_test(test_autograd_recording),
        cmocka_unit_test(test_errors),
    };
    return NBT_RUN(tests);
}
