/* Random numbers: Philox known answers, the counter layout (recomputed here from the Philox
 * function, so that a CUDA kernel following core/philox_impl.h gives the same values), seeding
 * and generator state, thread-count independence, statistics with tolerances from the sample
 * size, strided outputs through the kernel, bernoulli's autograd, and every error path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nbtest.h"
#include "core/dispatch_impl.h"
#include "core/philox_impl.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static double *read_f64(const nb_tensor *t, int64_t *n)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *d = NBT_CHECK(nb_to_dtype(t, NB_FLOAT64));
    *n = nb_tensor_numel(d);
    double *v = malloc((size_t)(*n ? *n : 1) * sizeof *v);
    assert_non_null(v);
    NBT_OK(nb_tensor_read(d, v, (size_t)*n * sizeof *v));
    nb_scope_end(s);
    return v;
}

/* Asserts the bytes of a and b are equal (same dtype and shape). */
static void assert_same(const nb_tensor *a, const nb_tensor *b, const char *what)
{
    assert_int_equal(nb_tensor_dtype(a), nb_tensor_dtype(b));
    assert_int_equal(nb_tensor_numel(a), nb_tensor_numel(b));
    size_t nbytes = (size_t)nb_tensor_numel(a) * nb_dtype_size(nb_tensor_dtype(a));
    char *x = malloc(nbytes + 1), *y = malloc(nbytes + 1);
    NBT_OK(nb_tensor_read(a, x, nbytes));
    NBT_OK(nb_tensor_read(b, y, nbytes));
    if (memcmp(x, y, nbytes) != 0) {
        print_error("%s: values differ\n", what);
        fail();
    }
    free(x);
    free(y);
}

static bool differ(const nb_tensor *a, const nb_tensor *b)
{
    size_t nbytes = (size_t)nb_tensor_numel(a) * nb_dtype_size(nb_tensor_dtype(a));
    char *x = malloc(nbytes + 1), *y = malloc(nbytes + 1);
    NBT_OK(nb_tensor_read(a, x, nbytes));
    NBT_OK(nb_tensor_read(b, y, nbytes));
    bool d = memcmp(x, y, nbytes) != 0;
    free(x);
    free(y);
    return d;
}

static nb_tensor_params params(nb_dtype dt, nb_generator *g)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = dt;
    p.generator = g;
    return p;
}

/* ---- Philox known answers (Random123's kat_vectors for philox4x32_10) ---------------------- */

static void test_philox_kat(void **state)
{
    static const struct { uint32_t ctr[4], key[2], want[4]; } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}, {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t k = 0; k < sizeof kat / sizeof kat[0]; k++) {
        uint32_t out[4];
        nb__philox(kat[k].ctr, kat[k].key, out);
        for (int j = 0; j < 4; j++) assert_int_equal(out[j], kat[k].want[j]);
    }
}

/* ---- the counter layout ------------------------------------------------------------------- */

/* Element i of a call starting at counter `off`, recomputed from the Philox function. */
static double ref_value(nb_op op, nb_dtype dt, uint64_t seed, uint64_t off, int64_t i, int64_t low, int64_t high)
{
    uint32_t r[4];
    bool wide = op == NB_OP_RANDINT || dt == NB_FLOAT64;
    int per = wide ? 2 : 4;
    nb__philox_at(seed, off + (uint64_t)(i / per), r);
    int j = (int)(i % per);
    if (op == NB_OP_RANDINT) {
        uint64_t u = ((uint64_t)r[2 * j] << 32) | r[2 * j + 1];
        uint64_t range = (uint64_t)high - (uint64_t)low;
        return (double)(low + (int64_t)(((unsigned __int128)u * range) >> 64));
    }
    if (op == NB_OP_RAND && dt == NB_FLOAT32) return (r[j] >> 8) / 16777216.0;
    if (op == NB_OP_RAND) return (double)((((uint64_t)r[2 * j] << 32) | r[2 * j + 1]) >> 11) / 9007199254740992.0;
    if (dt == NB_FLOAT32) { /* Box-Muller on words (2h, 2h+1), in float as the kernel */
        int h = j / 2;
        float u1 = 1.0f - (float)(r[2 * h] >> 8) / 16777216.0f, u2 = (float)(r[2 * h + 1] >> 8) / 16777216.0f;
        float rad = sqrtf(-2.0f * logf(u1)), th = 6.2831853071795864769f * u2;
        return j % 2 ? rad * sinf(th) : rad * cosf(th);
    }
    double u1 = 1.0 - (double)((((uint64_t)r[0] << 32) | r[1]) >> 11) / 9007199254740992.0;
    double u2 = (double)((((uint64_t)r[2] << 32) | r[3]) >> 11) / 9007199254740992.0;
    double rad = sqrt(-2.0 * log(u1)), th = 6.2831853071795864769 * u2;
    return j ? rad * sin(th) : rad * cos(th);
}

static void check_layout(nb_op op, nb_dtype dt, int64_t n)
{
    nb_scope *s = nb_scope_begin();
    const uint64_t seed = 0x123456789abcdefull;
    nb_generator *g = NBT_CHECK(nb_generator_create(seed));
    nb_tensor_params p = params(dt, g);
    int64_t shape[2] = {n / 7, 7};
    int per = (op == NB_OP_RANDINT || dt == NB_FLOAT64) ? 2 : 4;
    uint64_t off = 0;
    for (int call = 0; call < 3; call++) {
        nb_tensor *t = op == NB_OP_RAND ? nb_rand(shape, 2, &p)
                     : op == NB_OP_RANDN ? nb_randn(shape, 2, &p)
                                         : nb_randint(-5, 1000003, shape, 2, &p);
        NBT_CHECK(t);
        int64_t m;
        double *v = read_f64(t, &m);
        for (int64_t i = 0; i < m; i++) {
            double want = ref_value(op, dt, seed, off, i, -5, 1000003);
            if (dt == NB_FLOAT32) want = (float)want;
            if (v[i] != want) {
                print_error("%s %s call %d element %lld: got %.17g, want %.17g\n", nb__op_name(op),
                            nb_dtype_name(dt), call, (long long)i, v[i], want);
                fail();
            }
        }
        free(v);
        off += (uint64_t)((m + per - 1) / per); /* the generator advanced by the counters used */
    }
    nb_generator_free(g);
    nb_scope_end(s);
}

static void test_layout(void **state)
{
    /* 70007 elements: more than NB_CPU_GRAIN, so several threads, and not a multiple of 4 or 16 */
    check_layout(NB_OP_RAND, NB_FLOAT32, 70007);
    check_layout(NB_OP_RAND, NB_FLOAT64, 70007);
    check_layout(NB_OP_RANDN, NB_FLOAT32, 70007);
    check_layout(NB_OP_RANDN, NB_FLOAT64, 70007);
    check_layout(NB_OP_RANDINT, NB_INT64, 70007);
    check_layout(NB_OP_RAND, NB_FLOAT32, 21);
}

/* ---- seeds and generator state ------------------------------------------------------------ */

static void test_seeding(void **state)
{
    nb_scope *s = nb_scope_begin();
    int64_t shape[] = {3, 5};
    nb_generator *g1 = NBT_CHECK(nb_generator_create(42)), *g2 = NBT_CHECK(nb_generator_create(42));
    nb_generator *g3 = NBT_CHECK(nb_generator_create(43));
    nb_tensor_params p1 = params(NB_FLOAT32, g1), p2 = params(NB_FLOAT32, g2), p3 = params(NB_FLOAT32, g3);
    nb_tensor *a = NBT_CHECK(nb_randn(shape, 2, &p1));
    nb_tensor *b = NBT_CHECK(nb_randn(shape, 2, &p2));
    nb_tensor *c = NBT_CHECK(nb_randn(shape, 2, &p3));
    assert_same(a, b, "same seed");
    assert_true(differ(a, c));
    nb_tensor *a2 = NBT_CHECK(nb_randn(shape, 2, &p1)); /* the generator advanced */
    assert_true(differ(a, a2));
    nb_generator_manual_seed(g1, 42); /* reseeding restarts the sequence */
    assert_same(a, NBT_CHECK(nb_randn(shape, 2, &p1)), "reseeded");
    assert_same(a2, NBT_CHECK(nb_randn(shape, 2, &p1)), "reseeded, second call");

    /* the default generator, through nb_manual_seed */
    nb_manual_seed(7);
    nb_tensor *d1 = NBT_CHECK(nb_rand(shape, 2, NULL));
    nb_tensor *d2 = NBT_CHECK(nb_rand(shape, 2, NULL));
    nb_manual_seed(7);
    assert_same(d1, NBT_CHECK(nb_rand(shape, 2, NULL)), "manual_seed");
    assert_same(d2, NBT_CHECK(nb_rand(shape, 2, NULL)), "manual_seed, second call");
    assert_true(differ(d1, d2));
    nb_manual_seed(7);
    nb_tensor *l = NBT_CHECK(nb_rand_like(d1));
    assert_same(d1, l, "rand_like uses the default generator");
    assert_int_equal(nb_tensor_dtype(NBT_CHECK(nb_randn_like(NBT_CHECK(nb_zeros(shape, 2, &p1))))), NB_FLOAT32);

    /* an empty tensor uses no counters */
    nb_generator_manual_seed(g1, 42);
    int64_t empty[] = {0, 4};
    assert_int_equal(nb_tensor_numel(NBT_CHECK(nb_randn(empty, 2, &p1))), 0);
    assert_same(a, NBT_CHECK(nb_randn(shape, 2, &p1)), "after an empty call");
    /* 0-dim */
    assert_int_equal(nb_tensor_ndim(NBT_CHECK(nb_rand(NULL, 0, &p1))), 0);
    nb_generator_free(g1);
    nb_generator_free(g2);
    nb_generator_free(g3);
    nb_generator_free(NULL);
    nb_generator_manual_seed(NULL, 1);
    nb_scope_end(s);
}

/* Every op and dtype at 1 and 2 threads: identical bytes. */
static void test_threads(void **state)
{
    nb_scope *s = nb_scope_begin();
    int prev = nb_get_num_threads();
    int64_t shape[] = {200003};
    nb_tensor *out[2][7];
    nb_tensor_params pf = params(NB_FLOAT64, NULL);
    nb_tensor *probs = NBT_CHECK(nb_rand(shape, 1, &pf));
    nb_tensor *probs_nc = nbt_noncontig(probs);
    for (int k = 0; k < 2; k++) {
        NBT_OK(nb_set_num_threads(k + 1));
        nb_generator *g = NBT_CHECK(nb_generator_create(99));
        nb_tensor_params p32 = params(NB_FLOAT32, g), p64 = params(NB_FLOAT64, g), pi = params(NB_INT64, g);
        out[k][0] = NBT_CHECK(nb_rand(shape, 1, &p32));
        out[k][1] = NBT_CHECK(nb_rand(shape, 1, &p64));
        out[k][2] = NBT_CHECK(nb_randn(shape, 1, &p32));
        out[k][3] = NBT_CHECK(nb_randn(shape, 1, &p64));
        out[k][4] = NBT_CHECK(nb_randint(-3, 17, shape, 1, &pi));
        out[k][5] = NBT_CHECK(nb_bernoulli(probs, g));
        out[k][6] = NBT_CHECK(nb_bernoulli(probs_nc, g));
        nb_generator_free(g);
    }
    NBT_OK(nb_set_num_threads(prev));
    for (int i = 0; i < 7; i++) assert_same(out[0][i], out[1][i], "1 vs 2 threads");
    nb_scope_end(s);
}

/* ---- statistics: tolerances are 5 standard errors of the estimate for the sample size ------ */

static void moments(const double *v, int64_t n, double *mean, double *var)
{
    double m = 0, q = 0;
    for (int64_t i = 0; i < n; i++) m += v[i];
    m /= (double)n;
    for (int64_t i = 0; i < n; i++) q += (v[i] - m) * (v[i] - m);
    *mean = m;
    *var = q / (double)(n - 1);
}

static void check_near(double got, double want, double se, const char *what)
{
    if (fabs(got - want) > 5 * se) {
        print_error("%s: %.6g, expected %.6g within 5 standard errors (%.3g)\n", what, got, want, 5 * se);
        fail();
    }
}

static void test_stats_rand_randn(void **state)
{
    nb_scope *s = nb_scope_begin();
    const int64_t n = 1000000;
    nb_generator *g = NBT_CHECK(nb_generator_create(2024));
    for (int k = 0; k < 2; k++) {
        nb_tensor_params p = params(k ? NB_FLOAT64 : NB_FLOAT32, g);
        int64_t m;
        double mean, var, *v = read_f64(NBT_CHECK(nb_rand(&n, 1, &p)), &m);
        moments(v, m, &mean, &var);
        for (int64_t i = 0; i < m; i++) assert_true(v[i] >= 0 && v[i] < 1);
        /* uniform: variance 1/12, fourth central moment 1/80 */
        check_near(mean, 0.5, sqrt(1.0 / 12 / (double)n), "rand mean");
        check_near(var, 1.0 / 12, sqrt((1.0 / 80 - 1.0 / 144) / (double)n), "rand variance");
        free(v);

        v = read_f64(NBT_CHECK(nb_randn(&n, 1, &p)), &m);
        moments(v, m, &mean, &var);
        check_near(mean, 0, sqrt(1.0 / (double)n), "randn mean");
        check_near(var, 1, sqrt(2.0 / (double)n), "randn variance");
        /* the shape of the distribution: P(|z| < 1) and P(z > 2) of a standard normal */
        double in1 = 0, above2 = 0, p1 = erf(1 / sqrt(2)), p2 = 0.5 * erfc(2 / sqrt(2));
        for (int64_t i = 0; i < m; i++) {
            assert_true(isfinite(v[i]));
            in1 += fabs(v[i]) < 1;
            above2 += v[i] > 2;
        }
        check_near(in1 / (double)n, p1, sqrt(p1 * (1 - p1) / (double)n), "randn P(|z| < 1)");
        check_near(above2 / (double)n, p2, sqrt(p2 * (1 - p2) / (double)n), "randn P(z > 2)");
        free(v);
    }
    nb_generator_free(g);
    nb_scope_end(s);
}

/* Chi-square of counts over k equally likely values: df = k - 1; 5 sigma of the chi-square
 * distribution (mean df, variance 2 df) is a bound a correct generator passes. */
static void check_uniform_counts(const double *v, int64_t n, int64_t low, int64_t k, const char *what)
{
    int64_t *cnt = calloc((size_t)k, sizeof *cnt);
    for (int64_t i = 0; i < n; i++) {
        if (!(v[i] >= (double)low && v[i] < (double)(low + k))) {
            print_error("%s: %g outside [%lld, %lld)\n", what, v[i], (long long)low, (long long)(low + k));
            fail();
        }
        cnt[(int64_t)v[i] - low]++;
    }
    double e = (double)n / (double)k, chi2 = 0;
    for (int64_t j = 0; j < k; j++) {
        assert_true(cnt[j] > 0); /* every value occurs */
        chi2 += ((double)cnt[j] - e) * ((double)cnt[j] - e) / e;
    }
    double df = (double)(k - 1);
    if (chi2 > df + 5 * sqrt(2 * df)) {
        print_error("%s: chi-square %.2f for %g degrees of freedom\n", what, chi2, df);
        fail();
    }
    free(cnt);
}

static void test_stats_randint(void **state)
{
    nb_scope *s = nb_scope_begin();
    const int64_t n = 1000000;
    nb_generator *g = NBT_CHECK(nb_generator_create(5));
    static const nb_dtype dts[] = {NB_INT64, NB_INT32, NB_FLOAT32, NB_FLOAT64};
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
        nb_tensor_params p = params(dts[k], g);
        nb_tensor *t = NBT_CHECK(nb_randint(-7, 30, &n, 1, &p));
        assert_int_equal(nb_tensor_dtype(t), dts[k]);
        int64_t m;
        double *v = read_f64(t, &m);
        check_uniform_counts(v, m, -7, 37, nb_dtype_name(dts[k]));
        free(v);
    }
    nb_tensor_params pu = params(NB_UINT8, g), pb = params(NB_BOOL, g);
    int64_t m;
    double *v = read_f64(NBT_CHECK(nb_randint(0, 256, &n, 1, &pu)), &m);
    check_uniform_counts(v, m, 0, 256, "uint8");
    free(v);
    v = read_f64(NBT_CHECK(nb_randint(0, 2, &n, 1, &pb)), &m);
    check_uniform_counts(v, m, 0, 2, "bool");
    free(v);
    /* NULL params: int64 */
    assert_int_equal(nb_tensor_dtype(NBT_CHECK(nb_randint(0, 3, &n, 1, NULL))), NB_INT64);
    /* the widest range: both halves of int64 occur */
    nb_tensor_params pi = params(NB_INT64, g);
    int64_t wide[1000], neg = 0;
    int64_t shape = 1000;
    NBT_OK(nb_tensor_read(NBT_CHECK(nb_randint(INT64_MIN, INT64_MAX, &shape, 1, &pi)), wide, sizeof wide));
    for (int i = 0; i < 1000; i++) neg += wide[i] < 0;
    check_near((double)neg / 1000, 0.5, sqrt(0.25 / 1000), "randint full range, fraction negative");
    nb_generator_free(g);
    nb_scope_end(s);
}

static void test_stats_bernoulli(void **state)
{
    nb_scope *s = nb_scope_begin();
    const int64_t n = 1000000;
    nb_generator *g = NBT_CHECK(nb_generator_create(11));
    for (int k = 0; k < 2; k++) {
        nb_tensor_params p = params(k ? NB_FLOAT64 : NB_FLOAT32, NULL);
        nb_tensor *probs = NBT_CHECK(nb_full(&n, 1, 0.3, &p));
        nb_tensor *b = NBT_CHECK(nb_bernoulli(probs, g));
        assert_int_equal(nb_tensor_dtype(b), p.dtype);
        int64_t m;
        double mean, var, *v = read_f64(b, &m);
        for (int64_t i = 0; i < m; i++) assert_true(v[i] == 0 || v[i] == 1);
        moments(v, m, &mean, &var);
        check_near(mean, 0.3, sqrt(0.3 * 0.7 / (double)n), "bernoulli(0.3) mean");
        free(v);
        /* p = 0 and p = 1 are certain */
        int64_t shape[] = {3, 1000};
        v = read_f64(NBT_CHECK(nb_bernoulli(NBT_CHECK(nb_zeros(shape, 2, &p)), g)), &m);
        for (int64_t i = 0; i < m; i++) assert_true(v[i] == 0);
        free(v);
        v = read_f64(NBT_CHECK(nb_bernoulli(NBT_CHECK(nb_ones(shape, 2, &p)), g)), &m);
        for (int64_t i = 0; i < m; i++) assert_true(v[i] == 1);
        free(v);
        /* per-element probabilities, non-contiguous: p = 0.9 in the first row, 0.1 in the second */
        int64_t sh2[] = {2, n / 2};
        nb_tensor *pr = NBT_CHECK(nb_full(sh2, 2, 0.1, &p));
        NBT_OK(nb_fill_(NBT_CHECK(nb_select(pr, 0, 0)), 0.9));
        nb_tensor *prt = NBT_CHECK(nb_t(NBT_CHECK(nb_contiguous(NBT_CHECK(nb_t(pr))))));
        assert_false(nb_tensor_is_contiguous(prt));
        v = read_f64(NBT_CHECK(nb_bernoulli(prt, g)), &m);
        double row[2] = {0, 0};
        for (int64_t i = 0; i < m; i++) row[i / (n / 2)] += v[i];
        check_near(row[0] / (double)(n / 2), 0.9, sqrt(0.09 / (double)(n / 2)), "bernoulli row p=0.9");
        check_near(row[1] / (double)(n / 2), 0.1, sqrt(0.09 / (double)(n / 2)), "bernoulli row p=0.1");
        free(v);
    }
    nb_generator_free(g);
    nb_scope_end(s);
}

/* The kernel on a strided out (entry points always allocate contiguous ones): element (i, j) of a
 * transposed view gets the value of row-major element i * cols + j. */
static void test_kernel_strided_out(void **state)
{
    nb_scope *s = nb_scope_begin();
    static const nb_op ops[] = {NB_OP_RAND, NB_OP_RANDN, NB_OP_RANDINT};
    for (size_t k = 0; k < 3; k++) {
        for (int w = 0; w < 2; w++) {
            nb_dtype dt = ops[k] == NB_OP_RANDINT ? (w ? NB_INT32 : NB_INT64) : (w ? NB_FLOAT64 : NB_FLOAT32);
            nb_tensor_params p = params(dt, NULL);
            int64_t shape[] = {301, 257};
            nb_tensor *base = NBT_CHECK(nb_zeros(shape, 2, &p));
            nb_tensor *outv = NBT_CHECK(nb_t(base)); /* [257, 301], strides (1, 257) */
            nb_tensor *outc = NBT_CHECK(nb_zeros(nb_tensor_shape(outv), 2, &p));
            nb_kargs a = {.out = outv, .seed = 77, .offset = 1000, .i0 = -100, .i1 = 100};
            NBT_OK(nb__dispatch(ops[k], &a));
            a.out = outc;
            NBT_OK(nb__dispatch(ops[k], &a));
            nbt_assert_close(outv, outc, 0, 0, "strided out");
        }
    }
    nb_scope_end(s);
}

/* ---- autograd ----------------------------------------------------------------------------- */

static void test_autograd(void **state)
{
    nb_scope *s = nb_scope_begin();
    int64_t shape[] = {4, 3};
    nb_tensor_params p = params(NB_FLOAT64, NULL);
    p.requires_grad = true;
    nb_tensor *r = NBT_CHECK(nb_rand(shape, 2, &p));
    assert_true(nb_tensor_requires_grad(r));
    assert_true(nb_tensor_is_leaf(r));
    nb_tensor *probs = NBT_CHECK(nb_full(shape, 2, 0.5, &p));
    nb_tensor *b = NBT_CHECK(nb_bernoulli(probs, NULL));
    assert_string_equal(nb_tensor_grad_fn_name(b), "BernoulliBackward0");
    NBT_OK(nb_backward(b, NBT_CHECK(nb_ones(shape, 2, NULL)), NB_BACKWARD_DEFAULT));
    nb_tensor *gr = NBT_CHECK(nb_tensor_grad(probs));
    int64_t m;
    double *v = read_f64(gr, &m);
    assert_int_equal(m, 12);
    for (int i = 0; i < 12; i++) assert_true(v[i] == 0);
    free(v);
    /* no grad mode: no node */
    bool prev = nb_set_grad_enabled(false);
    assert_null(nb_tensor_grad_fn_name(NBT_CHECK(nb_bernoulli(probs, NULL))));
    nb_set_grad_enabled(prev);
    nb_scope_end(s);
}

/* ---- errors ------------------------------------------------------------------------------- */

static void test_errors(void **state)
{
    nb_scope *s = nb_scope_begin();
    int64_t shape[] = {2, 3}, neg[] = {2, -3};
    nb_tensor_params pi = params(NB_INT64, NULL), pu = params(NB_UINT8, NULL);
    NBT_FAILS(nb_randint(5, 5, shape, 2, NULL) == NULL, NB_ERR_INVALID_ARG, "randint", "low (5)", "high (5)", NULL);
    NBT_FAILS(nb_randint(9, -2, shape, 2, NULL) == NULL, NB_ERR_INVALID_ARG, "randint", "9", "-2", NULL);
    NBT_FAILS(nb_randint(0, 300, shape, 2, &pu) == NULL, NB_ERR_INVALID_ARG, "randint", "[0, 300)", "uint8", NULL);
    NBT_FAILS(nb_randint(-1, 3, shape, 2, &pu) == NULL, NB_ERR_INVALID_ARG, "randint", "uint8", NULL);
    NBT_FAILS(nb_randint(0, 3, shape, 2, &(nb_tensor_params){.dtype = NB_INT64, .requires_grad = true}) == NULL,
              NB_ERR_DTYPE, "randint", "require grad", "int64", NULL);
    NBT_FAILS(nb_rand(shape, 2, &pi) == NULL, NB_ERR_DTYPE, "rand", "int64", NULL);
    NBT_FAILS(nb_randn(shape, 2, &pi) == NULL, NB_ERR_DTYPE, "randn", "int64", NULL);
    NBT_FAILS(nb_randn(neg, 2, NULL) == NULL, NB_ERR_SHAPE, "randn", "[2, -3]", NULL);
    NBT_FAILS(nb_rand(NULL, 2, NULL) == NULL, NB_ERR_INVALID_ARG, "rand", "NULL shape", NULL);
    NBT_FAILS(nb_randint(0, 2, shape, 9, NULL) == NULL, NB_ERR_INVALID_ARG, "randint", "9 dims", NULL);
    NBT_FAILS(nb_rand(shape, -1, NULL) == NULL, NB_ERR_INVALID_ARG, "rand", "-1 dims", NULL);
    nb_tensor *ints = NBT_CHECK(nb_zeros(shape, 2, &pi));
    NBT_FAILS(nb_rand_like(ints) == NULL, NB_ERR_DTYPE, "rand_like", "int64", NULL);
    NBT_FAILS(nb_randn_like(NULL) == NULL, NB_ERR_INVALID_ARG, "randn_like", NULL);
    NBT_FAILS(nb_bernoulli(NULL, NULL) == NULL, NB_ERR_INVALID_ARG, "bernoulli", NULL);
    NBT_FAILS(nb_bernoulli(ints, NULL) == NULL, NB_ERR_DTYPE, "bernoulli", "int64", NULL);
    nb_tensor *pr = NBT_CHECK(nb_full(shape, 2, 0.5, NULL));
    float *d = nb_tensor_data_ptr(pr);
    d[4] = 1.5f;
    NBT_FAILS(nb_bernoulli(pr, NULL) == NULL, NB_ERR_INVALID_ARG, "bernoulli", "[0, 1]", "1.5", "element 4", NULL);
    d[4] = -0.25f;
    NBT_FAILS(nb_bernoulli(pr, NULL) == NULL, NB_ERR_INVALID_ARG, "bernoulli", "-0.25", NULL);
    d[4] = NAN;
    NBT_FAILS(nb_bernoulli(pr, NULL) == NULL, NB_ERR_INVALID_ARG, "bernoulli", "nan", NULL);
    nb_device cuda = {NB_DEVICE_CUDA, 0};
    if (nb_device_check(cuda) != NB_OK) {
        nb_tensor_params pc = params(NB_FLOAT32, NULL);
        pc.device = cuda;
        NBT_FAILS(nb_rand(shape, 2, &pc) == NULL, NB_ERR_DEVICE, "cuda", NULL);
    }
    nb_scope_end(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_kat),       cmocka_unit_test(test_layout),
        cmocka_unit_test(test_seeding),          cmocka_unit_test(test_threads),
        cmocka_unit_test(test_stats_rand_randn), cmocka_unit_test(test_stats_randint),
        cmocka_unit_test(test_stats_bernoulli),  cmocka_unit_test(test_kernel_strided_out),
        cmocka_unit_test(test_autograd),         cmocka_unit_test(test_errors),
    };
    return NBT_RUN(tests);
}
