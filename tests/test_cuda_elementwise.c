/* The CUDA elementwise kernels (binary, comparisons, activation gradients, unary) against the
 * CPU's results for the same inputs: contiguous, strided and broadcast operands, the scalar forms,
 * every dtype each op takes, and autograd through them on the device. On a machine without a GPU
 * it exits 77 (ctest: Skipped). The tolerances allow for CUDA's libm differing from the CPU's
 * vectorised float32 functions by a few ulp; float64 and integer results must agree closely or
 * exactly. */
#include <stdio.h>

#include "nbtest.h"
#include "nabla/cuda.h"

static nb_tensor *host(const nb_tensor *t) { return NBT_CHECK(nb_to(t, nb_cpu())); }

/* Random values of dtype dt in [-scale, scale] (integers: truncated; bool: nonzero). */
static nb_tensor *rnd(const int64_t *shape, int nd, nb_dtype dt, double scale)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_FLOAT64;
    nb_tensor *x = NBT_CHECK(nb_mul_scalar(NBT_CHECK(nb_sub_scalar(NBT_CHECK(nb_rand(shape, nd, &p)), 0.5)), 2 * scale));
    if (dt == NB_UINT8) x = NBT_CHECK(nb_abs(x)); /* a negative double has no uint8 value */
    return NBT_CHECK(nb_to_dtype(x, dt));
}

typedef nb_tensor *(*bin_fn)(const nb_tensor *, const nb_tensor *);

static void test_binary(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        bin_fn f;
        bool ints, boolean;
    } ops[] = {
        {"add", nb_add, true, true},  {"sub", nb_sub, true, false},       {"mul", nb_mul, true, true},
        {"div", nb_div, true, false}, {"maximum", nb_maximum, true, true}, {"minimum", nb_minimum, true, true},
        {"eq", nb_eq, true, true},    {"ne", nb_ne, true, true},           {"lt", nb_lt, true, true},
        {"le", nb_le, true, true},    {"gt", nb_gt, true, true},           {"ge", nb_ge, true, true},
        {"pow", nb_pow, true, false},
    };
    const nb_dtype dts[] = {NB_FLOAT32, NB_FLOAT64, NB_INT64, NB_INT32, NB_UINT8, NB_BOOL};
    int64_t sa[3] = {5, 7, 9}, sb[2] = {1, 9}; /* b broadcasts over a */
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
        nb_scope *s = nb_scope_begin();
        bool fl = dts[d] <= NB_FLOAT64;
        nb_tensor *a = rnd(sa, 3, dts[d], dts[d] == NB_UINT8 ? 200 : 4), *b = rnd(sb, 2, dts[d], fl ? 4 : 3);
        nb_tensor *at = NBT_CHECK(nb_transpose(a, 0, 2)); /* strided */
        nb_tensor *bt = NBT_CHECK(nb_transpose(NBT_CHECK(nb_expand(b, sa, 3)), 0, 2));
        for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
            if ((!fl && !ops[k].ints) || (dts[d] == NB_BOOL && !ops[k].boolean)) continue;
            if (ops[k].f == nb_pow && fl) b = NBT_CHECK(nb_abs(b)); /* real powers of positive bases */
            char what[64];
            snprintf(what, sizeof what, "%s %s", ops[k].name, nb_dtype_name(dts[d]));
            double rtol = dts[d] == NB_FLOAT32 ? 2e-6 : dts[d] == NB_FLOAT64 ? 1e-14 : 0;
            nb_tensor *want = ops[k].f(a, b);
            if (!want) { /* an op the CPU rejects for this dtype must fail on CUDA too */
                assert_null(ops[k].f(nbt_to_cuda(a), nbt_to_cuda(b)));
                continue;
            }
            nbt_assert_close_host(NBT_CHECK(ops[k].f(nbt_to_cuda(a), nbt_to_cuda(b))), want, rtol, what);
            nbt_assert_close_host(NBT_CHECK(ops[k].f(nbt_to_cuda(at), nbt_to_cuda(bt))), NBT_CHECK(ops[k].f(at, bt)), rtol, what);
        }
        nb_scope_end(s);
    }
    /* scalar forms, special powers, in place */
    nb_scope *s = nb_scope_begin();
    int64_t sh[1] = {1000};
    nb_tensor *x = rnd(sh, 1, NB_FLOAT32, 3);
    nbt_assert_close_host(NBT_CHECK(nb_add_scalar(nbt_to_cuda(x), 1.5)), NBT_CHECK(nb_add_scalar(x, 1.5)), 0, "add_scalar");
    nbt_assert_close_host(NBT_CHECK(nb_mul_scalar(nbt_to_cuda(x), -2)), NBT_CHECK(nb_mul_scalar(x, -2)), 0, "mul_scalar");
    nbt_assert_close_host(NBT_CHECK(nb_pow_scalar(nbt_to_cuda(x), 2)), NBT_CHECK(nb_pow_scalar(x, 2)), 1e-6, "pow 2");
    nbt_assert_close_host(NBT_CHECK(nb_gt_scalar(nbt_to_cuda(x), 0.25)), NBT_CHECK(nb_gt_scalar(x, 0.25)), 0, "gt_scalar");
    nb_tensor *xd = NBT_CHECK(nb_clone(nbt_to_cuda(x)));
    NBT_OK(nb_mul_scalar_(xd, 3));
    nbt_assert_close_host(xd, NBT_CHECK(nb_mul_scalar(x, 3)), 0, "mul_scalar_");
    nb_scope_end(s);
}

typedef nb_tensor *(*un_fn)(const nb_tensor *);
static nb_tensor *leaky(const nb_tensor *x) { return nb_leaky_relu(x, 0.1); }
static nb_tensor *gelu_e(const nb_tensor *x) { return nb_gelu(x, NB_GELU_NONE); }
static nb_tensor *gelu_t(const nb_tensor *x) { return nb_gelu(x, NB_GELU_TANH); }
static nb_tensor *softplus(const nb_tensor *x) { return nb_softplus(x, 2, 3); }
static nb_tensor *clampf(const nb_tensor *x) { return nb_clamp(x, -0.5, 1.25); }

static void test_unary_and_grads(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        un_fn f;
        bool ints, positive, grad;
    } ops[] = {
        {"neg", nb_neg, true, false, true},      {"abs", nb_abs, true, false, true},
        {"sign", nb_sign, true, false, false},   {"exp", nb_exp, false, false, true},
        {"log", nb_log, false, true, true},      {"log1p", nb_log1p, false, true, true},
        {"sqrt", nb_sqrt, false, true, true},    {"rsqrt", nb_rsqrt, false, true, true},
        {"sin", nb_sin, false, false, true},     {"cos", nb_cos, false, false, true},
        {"tanh", nb_tanh, false, false, true},   {"sigmoid", nb_sigmoid, false, false, true},
        {"relu", nb_relu, true, false, true},    {"leaky_relu", leaky, false, false, true},
        {"gelu", gelu_e, false, false, true},    {"gelu_tanh", gelu_t, false, false, true},
        {"silu", nb_silu, false, false, true},   {"softplus", softplus, false, false, true},
        {"clamp", clampf, true, false, true},    {"logical_not", nb_logical_not, true, false, false},
    };
    const nb_dtype dts[] = {NB_FLOAT32, NB_FLOAT64, NB_INT64, NB_INT32};
    int64_t sh[2] = {33, 65};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
        for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
            bool fl = dts[d] <= NB_FLOAT64;
            if (!fl && !ops[k].ints) continue;
            nb_scope *s = nb_scope_begin();
            nb_tensor *x = rnd(sh, 2, dts[d], 4);
            if (ops[k].positive) x = NBT_CHECK(nb_add_scalar(NBT_CHECK(nb_abs(x)), 0.01));
            char what[64];
            snprintf(what, sizeof what, "%s %s", ops[k].name, nb_dtype_name(dts[d]));
            double rtol = dts[d] == NB_FLOAT32 ? 1e-5 : dts[d] == NB_FLOAT64 ? 1e-13 : 0;
            nbt_assert_close_host(NBT_CHECK(ops[k].f(nbt_to_cuda(x))), NBT_CHECK(ops[k].f(x)), rtol, what);
            nb_tensor *xt = NBT_CHECK(nb_t(x));
            nbt_assert_close_host(NBT_CHECK(ops[k].f(nbt_to_cuda(xt))), NBT_CHECK(ops[k].f(xt)), rtol, what);
            if (fl && ops[k].grad) { /* backward on the device: the fused gradient kernels */
                nb_tensor *g = rnd(sh, 2, dts[d], 1);
                nb_tensor *xc = nbt_leaf(x), *xg = NBT_CHECK(nb_tensor_retain(nbt_to_cuda(x)));
                NBT_OK(nb_tensor_set_requires_grad(xg, true));
                NBT_OK(nb_backward(NBT_CHECK(ops[k].f(xc)), g, 0));
                NBT_OK(nb_backward(NBT_CHECK(ops[k].f(xg)), nbt_to_cuda(g), 0));
                nbt_assert_close_host(nb_tensor_grad(xg), nb_tensor_grad(xc), rtol * 10, what);
                nb_tensor_free(xg);
            }
            nb_scope_end(s);
        }
    }
}

static void test_half(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t sh[1] = {4096};
    nb_tensor *x = rnd(sh, 1, NB_FLOAT32, 2), *y = rnd(sh, 1, NB_FLOAT32, 2);
    const nb_dtype hs[] = {NB_FLOAT16, NB_BFLOAT16};
    for (int i = 0; i < 2; i++) {
        /* rounded inputs, computed in float32, rounded once: the CPU's float32 result of the
         * rounded inputs, rounded to the half type, is the same value */
        nb_tensor *xh = NBT_CHECK(nb_to_dtype(nbt_to_cuda(x), hs[i])), *yh = NBT_CHECK(nb_to_dtype(nbt_to_cuda(y), hs[i]));
        nb_tensor *xr = host(NBT_CHECK(nb_to_dtype(xh, NB_FLOAT32))), *yr = host(NBT_CHECK(nb_to_dtype(yh, NB_FLOAT32)));
        nb_tensor *got = host(NBT_CHECK(nb_to_dtype(NBT_CHECK(nb_mul(xh, yh)), NB_FLOAT32)));
        nb_tensor *want = host(NBT_CHECK(nb_to_dtype(NBT_CHECK(nb_to_dtype(nbt_to_cuda(NBT_CHECK(nb_mul(xr, yr))), hs[i])), NB_FLOAT32)));
        nbt_assert_close(got, want, 0, 0, "half mul");
        got = host(NBT_CHECK(nb_to_dtype(NBT_CHECK(nb_relu(xh)), NB_FLOAT32)));
        nbt_assert_close(got, NBT_CHECK(nb_relu(xr)), 0, 0, "half relu");
    }
    nb_scope_end(s);
}

/* The vectorised path (16 bytes per operand per step when the output is contiguous and 16-byte
 * aligned, the inputs contiguous, one value or a repeated row) and its fallbacks: lengths around
 * the vector width (the one-by-one tail), a misaligned view (a slice from element 1), rows whose
 * length is or is not a multiple of the vector width, a long tensor; every dtype it runs for. */
static void test_vector_paths(void **state)
{
    (void)state;
    const nb_dtype dts[] = {NB_FLOAT32, NB_FLOAT64, NB_INT32, NB_INT64, NB_UINT8, NB_BOOL};
    const int64_t lens[] = {1, 3, 4, 15, 16, 17, 33, 1000003};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
        bool fl = dts[d] <= NB_FLOAT64;
        double rtol = dts[d] == NB_FLOAT32 ? 1e-5 : dts[d] == NB_FLOAT64 ? 1e-13 : 0;
        char what[96];
        for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
            nb_scope *s = nb_scope_begin();
            int64_t n1[1] = {lens[l] + 1};
            nb_tensor *a = rnd(n1, 1, dts[d], 4), *b = rnd(n1, 1, dts[d], 4);
            /* aligned (from element 0) and misaligned (from element 1) views of the same data */
            for (int off = 0; off < 2; off++) {
                nb_tensor *av = NBT_CHECK(nb_slice(a, 0, off, off + lens[l], 1));
                nb_tensor *bv = NBT_CHECK(nb_slice(b, 0, 1 - off, 1 - off + lens[l], 1));
                nb_tensor *ad = NBT_CHECK(nb_slice(nbt_to_cuda(a), 0, off, off + lens[l], 1));
                nb_tensor *bd = NBT_CHECK(nb_slice(nbt_to_cuda(b), 0, 1 - off, 1 - off + lens[l], 1));
                snprintf(what, sizeof what, "add %s n=%lld off=%d", nb_dtype_name(dts[d]), (long long)lens[l], off);
                nbt_assert_close_host(NBT_CHECK(nb_add(ad, bd)), NBT_CHECK(nb_add(av, bv)), rtol, what);
                nbt_assert_close_host(NBT_CHECK(nb_mul(ad, ad)), NBT_CHECK(nb_mul(av, av)), rtol, what);
                if (dts[d] != NB_BOOL) {
                    nbt_assert_close_host(NBT_CHECK(nb_add_scalar(ad, 2)), NBT_CHECK(nb_add_scalar(av, 2)), rtol, what);
                    nbt_assert_close_host(NBT_CHECK(nb_neg(ad)), NBT_CHECK(nb_neg(av)), rtol, what);
                }
                if (fl) {
                    nbt_assert_close_host(NBT_CHECK(nb_exp(ad)), NBT_CHECK(nb_exp(av)), rtol, what);
                    nb_tensor *xc = nbt_leaf(av), *xg = NBT_CHECK(nb_tensor_retain(nbt_to_cuda(av)));
                    NBT_OK(nb_tensor_set_requires_grad(xg, true));
                    NBT_OK(nb_backward(NBT_CHECK(nb_tanh(xc)), bv, 0));
                    NBT_OK(nb_backward(NBT_CHECK(nb_tanh(xg)), bd, 0));
                    nbt_assert_close_host(nb_tensor_grad(xg), nb_tensor_grad(xc), rtol * 10, what);
                    nb_tensor_free(xg);
                }
            }
            nb_scope_end(s);
        }
        /* a row repeated over leading dims: lengths 8, 12, 16 and 2, against each dtype's width */
        const int64_t rows[] = {8, 12, 16, 2};
        for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
            nb_scope *s = nb_scope_begin();
            int64_t sm[3] = {3, 5, rows[r]}, sr[1] = {rows[r]};
            nb_tensor *m = rnd(sm, 3, dts[d], 4), *row = rnd(sr, 1, dts[d], 4);
            snprintf(what, sizeof what, "add row %s len=%lld", nb_dtype_name(dts[d]), (long long)rows[r]);
            nbt_assert_close_host(NBT_CHECK(nb_add(nbt_to_cuda(m), nbt_to_cuda(row))), NBT_CHECK(nb_add(m, row)), rtol, what);
            nbt_assert_close_host(NBT_CHECK(nb_mul(nbt_to_cuda(row), nbt_to_cuda(m))), NBT_CHECK(nb_mul(row, m)), rtol, what);
            nb_scope_end(s);
        }
    }
}

int main(void)
{
    if (nbt_cuda_missing()) return 77;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_binary), cmocka_unit_test(test_unary_and_grads),
                                       cmocka_unit_test(test_half), cmocka_unit_test(test_vector_paths)};
    return NBT_RUN(tests);
}
