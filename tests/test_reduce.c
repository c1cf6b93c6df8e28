/* Tests of reductions, softmax, log_softmax and cumsum: hand-computed values, PyTorch's values and
 * gradients (tests/ref/cases_reduce.py) on contiguous and non-contiguous inputs, finite
 * differences, result dtypes, thread-count independence and every error path.
 *
 * Tolerances: float32 rtol 1e-5 with atol 1e-6 (gradients such as var's x - mean and softmax's
 * y (g - sum g y) cancel to values near 0, where only an absolute bound is meaningful); float64
 * rtol 1e-10, atol 1e-12; integer and bool results exactly. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbtest.h"

/* ---- one case: the op and its parameters ----------------------------------------------------- */

typedef struct params {
    char op[32];
    int64_t dims[NB_MAX_DIMS];
    int ndims;
    bool keepdim;
    int64_t correction;
    double p;
} params;

static int64_t ref_int(const nb_tensor_map *m, const char *name, const char *key, int64_t dflt)
{
    nb_tensor *t = nbt_ref(m, name, key);
    if (!t) return dflt;
    int64_t v;
    NBT_OK(nb_item_int64(t, &v));
    return v;
}

static void read_params(const nb_tensor_map *m, const char *name, params *pr)
{
    memset(pr, 0, sizeof *pr);
    size_t len = strcspn(name, "/");
    assert_true(len < sizeof pr->op);
    memcpy(pr->op, name, len);
    nb_tensor *d = nbt_ref(m, name, "dims");
    if (d) {
        pr->ndims = (int)nb_tensor_numel(d);
        assert_true(pr->ndims <= NB_MAX_DIMS && nb_tensor_dtype(d) == NB_INT64);
        NBT_OK(nb_tensor_read(d, pr->dims, (size_t)pr->ndims * sizeof(int64_t)));
    }
    pr->keepdim = ref_int(m, name, "keepdim", 0) != 0;
    pr->correction = ref_int(m, name, "correction", 1);
    nb_tensor *p = nbt_ref(m, name, "p");
    pr->p = 2;
    if (p) NBT_OK(nb_item(p, &pr->p));
}

static bool is(const params *pr, const char *op) { return strcmp(pr->op, op) == 0; }

/* Runs the case's op on x; *idx (may be NULL) receives max_dim / min_dim indices. */
static nb_tensor *apply(const params *pr, const nb_tensor *x, nb_tensor **idx)
{
    const int64_t *d = pr->dims;
    int nd = pr->ndims;
    bool k = pr->keepdim;
    if (is(pr, "sum")) return nb_sum(x, d, nd, k);
    if (is(pr, "mean")) return nb_mean(x, d, nd, k);
    if (is(pr, "prod")) return nb_prod(x, d, nd, k);
    if (is(pr, "logsumexp")) return nb_logsumexp(x, d, nd, k);
    if (is(pr, "all")) return nb_all(x, d, nd, k);
    if (is(pr, "any")) return nb_any(x, d, nd, k);
    if (is(pr, "var")) return nb_var(x, d, nd, pr->correction, k);
    if (is(pr, "std")) return nb_std(x, d, nd, pr->correction, k);
    if (is(pr, "norm")) return nb_norm(x, pr->p, d, nd, k);
    if (is(pr, "max")) return nb_max(x);
    if (is(pr, "min")) return nb_min(x);
    if (is(pr, "max_dim")) return nb_max_dim(x, d[0], k, idx);
    if (is(pr, "min_dim")) return nb_min_dim(x, d[0], k, idx);
    if (is(pr, "argmax")) return nb_argmax(x, nd ? d[0] : NB_DIM_NONE, k);
    if (is(pr, "argmin")) return nb_argmin(x, nd ? d[0] : NB_DIM_NONE, k);
    if (is(pr, "softmax")) return nb_softmax(x, d[0]);
    if (is(pr, "log_softmax")) return nb_log_softmax(x, d[0]);
    if (is(pr, "cumsum")) return nb_cumsum(x, d[0]);
    fail_msg("unknown op in case: %s", pr->op);
    return NULL;
}

static nb_tensor *fd_fn(nb_tensor *const *in, int n, void *ctx) { return apply(ctx, in[0], NULL); }

static void tolerances(nb_dtype dt, double *rtol, double *atol)
{
    *rtol = dt == NB_FLOAT32 ? 1e-5 : dt == NB_FLOAT64 ? 1e-10 : 0;
    *atol = dt == NB_FLOAT32 ? 1e-6 : dt == NB_FLOAT64 ? 1e-12 : 0;
}

static void check_dtype(const nb_tensor *got, const nb_tensor *want, const char *what)
{
    if (nb_tensor_dtype(got) != nb_tensor_dtype(want))
        fail_msg("%s: dtype %s, expected %s", what, nb_dtype_name(nb_tensor_dtype(got)),
                 nb_dtype_name(nb_tensor_dtype(want)));
}

/* One run of a case on x (contiguous or not): forward, indices, and the gradient. */
static void run_case(const nb_tensor_map *m, const char *name, const params *pr, const nb_tensor *x0, bool noncontig)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *x = noncontig ? nbt_noncontig(x0) : NBT_CHECK(nb_clone(x0));
    nb_tensor *want = NBT_CHECK(nbt_ref(m, name, "out")), *gout = nbt_ref(m, name, "gout");
    nb_tensor *wgrad = nbt_ref(m, name, "grad0"), *widx = nbt_ref(m, name, "indices");
    if (gout) NBT_OK(nb_tensor_set_requires_grad(x, true));
    char what[300];
    snprintf(what, sizeof what, "%s (%s)", name, noncontig ? "non-contiguous" : "contiguous");
    nb_tensor *idx = NULL;
    nb_tensor *out = NBT_CHECK(apply(pr, x, widx ? &idx : NULL));
    double rtol, atol;
    tolerances(nb_tensor_dtype(want), &rtol, &atol);
    check_dtype(out, want, what);
    nbt_assert_close(out, want, rtol, atol, what);
    if (widx) {
        check_dtype(NBT_CHECK(idx), widx, what);
        nbt_assert_close(idx, widx, 0, 0, what);
    }
    if (gout) {
        NBT_OK(nb_backward(out, gout, NB_BACKWARD_DEFAULT));
        nb_tensor *g = nb_tensor_grad(x);
        if (!g) g = NBT_CHECK(nb_zeros_like(wgrad)); /* no gradient (norm with p = 0) is zero */
        snprintf(what, sizeof what, "%s gradient (%s)", name, noncontig ? "non-contiguous" : "contiguous");
        nbt_assert_close(g, wgrad, rtol, atol, what);
    }
    nb_scope_end(s);
}

/* The bigsum cases: large inputs whose sums must not drift, through the fast paths. */
static void run_bigsum(const nb_tensor_map *m, const char *name)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *x = NBT_CHECK(nbt_ref(m, name, "in0"));
    nb_dtype dt = nb_tensor_dtype(x);
    double rtol = dt == NB_FLOAT32 ? 1e-5 : 1e-10;
    int64_t one = 1, zero = 0, shape[2] = {-1, 512};
    nb_tensor *mat = NBT_CHECK(nb_reshape(x, shape, 2));
    nbt_assert_close(nb_sum(x, NULL, 0, false), nbt_ref(m, name, "sum"), rtol, 0, "bigsum sum");
    /* double accumulation stays well inside float32's rounding of the exact sum */
    nbt_assert_close(nb_sum(x, NULL, 0, false), nbt_ref(m, name, "exact"), dt == NB_FLOAT32 ? 1e-7 : 1e-12, 0,
                     "bigsum sum vs the float64 sum");
    nbt_assert_close(nb_mean(x, NULL, 0, false), nbt_ref(m, name, "mean"), rtol, 0, "bigsum mean");
    /* PyTorch's own float32 norm drifts by 1.2e-5 on this input (it accumulates in float32):
     * compare with it at 2e-5 and with the float64 norm at float32's resolution */
    nbt_assert_close(nb_norm(x, 2, NULL, 0, false), nbt_ref(m, name, "norm"), dt == NB_FLOAT32 ? 2e-5 : rtol, 0,
                     "bigsum norm");
    nbt_assert_close(nb_norm(x, 2, NULL, 0, false), nbt_ref(m, name, "norm64"), dt == NB_FLOAT32 ? 1e-7 : 1e-12, 0,
                     "bigsum norm vs the float64 norm");
    nbt_assert_close(nb_max(x), nbt_ref(m, name, "max"), 0, 0, "bigsum max");
    nbt_assert_close(nb_sum(mat, &one, 1, false), nbt_ref(m, name, "rows"), rtol, 1e-4, "bigsum rows");
    nbt_assert_close(nb_sum(mat, &zero, 1, false), nbt_ref(m, name, "cols"), rtol, 1e-4, "bigsum cols");
    nb_scope_end(s);
}

static void test_reference(void **state)
{
    nb_tensor_map *m = nbt_load_ref("reduce");
    char **names;
    int n = nbt_case_names(m, &names);
    assert_true(n > 100);
    for (int i = 0; i < n; i++) {
        params pr;
        nb_scope *s = nb_scope_begin();
        read_params(m, names[i], &pr);
        if (is(&pr, "bigsum")) {
            run_bigsum(m, names[i]);
            nb_scope_end(s);
            continue;
        }
        nb_tensor *x = NBT_CHECK(nbt_ref(m, names[i], "in0"));
        run_case(m, names[i], &pr, x, false);
        run_case(m, names[i], &pr, x, true);
        if (nbt_ref(m, names[i], "fd")) nbt_gradcheck(fd_fn, &pr, &x, 1, 1e-6, 1e-5, 1e-5, names[i]);
        nb_scope_end(s);
    }
    nbt_free_names(names, n);
    nb_tensor_map_free(m);
}

/* ---- hand-computed values ------------------------------------------------------------------- */

static nb_tensor *from(const void *data, const int64_t *shape, int nd, nb_dtype dt)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = dt;
    return NBT_CHECK(nb_tensor_from_data(data, shape, nd, &p));
}

static void expect(const nb_tensor *got, const double *want, const int64_t *shape, int nd, const char *what)
{
    nb_tensor *w = from(want, shape, nd, NB_FLOAT64);
    if (!got) fail_msg("%s: %s", what, nb_last_error());
    double rtol = nb_tensor_dtype(got) == NB_FLOAT32 ? 1e-6 : 1e-12;
    nbt_assert_close(NBT_CHECK(nb_to_dtype(got, NB_FLOAT64)), w, rtol, 0, what);
}

static void test_hand(void **state)
{
    nb_scope *s = nb_scope_begin();
    const float v[6] = {1, 2, 3, 4, 5, 6};
    int64_t sh[2] = {2, 3}, d0 = 0, d1 = 1, n2 = 2, n3 = 3, n0[1] = {0}, k21[2] = {2, 1};
    nb_tensor *x = from(v, sh, 2, NB_FLOAT32);
    expect(nb_sum(x, &d0, 1, false), (double[]){5, 7, 9}, &n3, 1, "sum dim 0");
    expect(nb_sum(x, &d1, 1, true), (double[]){6, 15}, k21, 2, "sum dim 1 keepdim");
    expect(nb_sum(x, NULL, 0, false), (double[]){21}, NULL, 0, "sum all");
    expect(nb_mean(x, &d1, 1, false), (double[]){2, 5}, &n2, 1, "mean dim 1");
    expect(nb_prod(x, &d0, 1, false), (double[]){4, 10, 18}, &n3, 1, "prod dim 0");
    expect(nb_var(x, &d1, 1, 1, false), (double[]){1, 1}, &n2, 1, "var dim 1");
    expect(nb_var(x, NULL, 0, 0, false), (double[]){17.5 / 6}, NULL, 0, "var all, correction 0");
    expect(nb_std(x, &d0, 1, 1, false), (double[]){sqrt(4.5), sqrt(4.5), sqrt(4.5)}, &n3, 1, "std dim 0");
    expect(nb_norm(x, 1, NULL, 0, false), (double[]){21}, NULL, 0, "norm 1");
    expect(nb_norm(x, INFINITY, &d1, 1, false), (double[]){3, 6}, &n2, 1, "norm inf");
    expect(nb_norm(x, 0, NULL, 0, false), (double[]){6}, NULL, 0, "norm 0 counts non-zeros");
    expect(nb_max(x), (double[]){6}, NULL, 0, "max");
    expect(nb_min(x), (double[]){1}, NULL, 0, "min");
    expect(nb_argmax(x, NB_DIM_NONE, false), (double[]){5}, NULL, 0, "argmax flat");
    expect(nb_argmin(x, 1, false), (double[]){0, 0}, &n2, 1, "argmin dim 1");
    expect(nb_cumsum(x, 1), (double[]){1, 3, 6, 4, 9, 15}, sh, 2, "cumsum dim 1");
    expect(nb_cumsum(x, 0), (double[]){1, 2, 3, 5, 7, 9}, sh, 2, "cumsum dim 0");
    expect(nb_logsumexp(x, &d0, 1, false),
           (double[]){1 + log(1 + exp(3.0)), 2 + log(1 + exp(3.0)), 3 + log(1 + exp(3.0))}, &n3, 1, "logsumexp");
    const double lv[2] = {0, log(2.0)};
    nb_tensor *l = from(lv, &n2, 1, NB_FLOAT64);
    expect(nb_softmax(l, 0), (double[]){1.0 / 3, 2.0 / 3}, &n2, 1, "softmax");
    expect(nb_log_softmax(l, -1), (double[]){log(1.0 / 3), log(2.0 / 3)}, &n2, 1, "log_softmax");
    /* max along a dim: values and first-occurrence indices */
    const double tv[6] = {1, 7, 7, 2, 0, 2};
    nb_tensor *t = from(tv, sh, 2, NB_FLOAT64), *idx;
    expect(nb_max_dim(t, 1, false, &idx), (double[]){7, 2}, &n2, 1, "max_dim values");
    expect(idx, (double[]){1, 0}, &n2, 1, "max_dim indices");
    expect(nb_min_dim(t, 0, true, &idx), (double[]){1, 0, 2}, (int64_t[]){1, 3}, 2, "min_dim values");
    expect(idx, (double[]){0, 1, 1}, (int64_t[]){1, 3}, 2, "min_dim indices");
    NBT_CHECK(nb_max_dim(t, 0, false, NULL));
    /* down the columns (the rows compared a block of columns at a time): the first of equal
     * extremes, the first NaN, and a column of -inf */
    const double cv[12] = {1, NAN, -INFINITY, 5, 1, -INFINITY, 5, NAN, -INFINITY, 2, 9, -INFINITY};
    nb_tensor *cols = from(cv, (int64_t[]){4, 3}, 2, NB_FLOAT64);
    expect(nb_argmax(cols, 0, false), (double[]){1, 0, 0}, &n3, 1, "argmax down columns");
    expect(nb_argmin(cols, 0, false), (double[]){0, 0, 0}, &n3, 1, "argmin down columns");
    NBT_CHECK(nb_max_dim(cols, 0, false, &idx));
    expect(idx, (double[]){1, 0, 0}, &n3, 1, "max_dim indices down columns");
    /* along rows of unit stride (each row's first extreme, by a vector pass and then a search for
     * it): ties (the second in the row's tail, past 16), the first of two NaNs, a row of -inf,
     * and -0 before +0 (equal: the first is the answer), in both float dtypes */
    double rv[4][18];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 18; j++) rv[i][j] = i == 2 ? -INFINITY : -1 - 0.25 * j;
    rv[0][3] = rv[0][17] = 7, rv[0][5] = rv[0][16] = -20;
    rv[1][9] = rv[1][15] = NAN, rv[1][2] = 100;
    rv[3][4] = -0.0, rv[3][11] = 0.0;
    for (int f64 = 0; f64 < 2; f64++) {
        float rf[4][18];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 18; j++) rf[i][j] = (float)rv[i][j];
        nb_tensor *rows = from(f64 ? (const void *)rv : (const void *)rf, (int64_t[]){4, 18}, 2,
                               f64 ? NB_FLOAT64 : NB_FLOAT32);
        int64_t n4 = 4;
        expect(nb_argmax(rows, 1, false), (double[]){3, 9, 0, 4}, &n4, 1, "argmax along rows");
        expect(nb_argmin(rows, 1, false), (double[]){5, 9, 0, 17}, &n4, 1, "argmin along rows");
        nb_tensor *mv = NBT_CHECK(nb_max_dim(rows, 1, false, &idx));
        expect(mv, (double[]){7, NAN, -INFINITY, 0}, &n4, 1, "max_dim values along rows");
        expect(idx, (double[]){3, 9, 0, 4}, &n4, 1, "max_dim indices along rows");
        double z = f64 ? ((const double *)nb_tensor_data_ptr(mv))[3] : ((const float *)nb_tensor_data_ptr(mv))[3];
        assert_true(signbit(z)); /* the value at the first zero, -0 */
        nb_tensor *nv = NBT_CHECK(nb_min_dim(rows, 1, true, &idx));
        expect(nv, (double[]){-20, NAN, -INFINITY, -1 - 0.25 * 17}, (int64_t[]){4, 1}, 2, "min_dim values along rows");
        expect(idx, (double[]){5, 9, 0, 17}, (int64_t[]){4, 1}, 2, "min_dim indices along rows");
    }
    /* empty inputs: the identities, as PyTorch */
    float none[1];
    nb_tensor *e = from(none, n0, 1, NB_FLOAT32);
    expect(nb_sum(e, NULL, 0, false), (double[]){0}, NULL, 0, "sum of nothing");
    expect(nb_prod(e, NULL, 0, false), (double[]){1}, NULL, 0, "prod of nothing");
    expect(nb_mean(e, NULL, 0, false), (double[]){NAN}, NULL, 0, "mean of nothing");
    expect(nb_var(e, NULL, 0, 1, false), (double[]){NAN}, NULL, 0, "var of nothing");
    expect(nb_logsumexp(e, NULL, 0, false), (double[]){-INFINITY}, NULL, 0, "logsumexp of nothing");
    expect(nb_norm(e, 2, NULL, 0, false), (double[]){0}, NULL, 0, "norm of nothing");
    expect(nb_all(e, NULL, 0, false), (double[]){1}, NULL, 0, "all of nothing");
    expect(nb_any(e, NULL, 0, false), (double[]){0}, NULL, 0, "any of nothing");
    int64_t e2[2] = {2, 0}, e3[2] = {0, 3};
    nb_tensor *er = NBT_CHECK(nb_zeros(e2, 2, NULL)), *ec = NBT_CHECK(nb_zeros(e3, 2, NULL));
    expect(nb_sum(er, &d1, 1, false), (double[]){0, 0}, &n2, 1, "sum of empty rows");
    expect(nb_sum(ec, &d0, 1, false), (double[]){0, 0, 0}, &n3, 1, "sum of empty columns");
    nb_tensor *sm = NBT_CHECK(nb_softmax(er, 1));
    assert_int_equal(nb_tensor_numel(sm), 0);
    nb_tensor *mx = NBT_CHECK(nb_max_dim(ec, 1, false, &idx)); /* the reduced dim is not the empty one */
    assert_int_equal(nb_tensor_numel(mx), 0);
    assert_int_equal(nb_tensor_ndim(mx), 1);
    nb_scope_end(s);
}

/* Sums split across threads agree with the single-thread sums. */
static void test_threads(void **state)
{
    nb_scope *s = nb_scope_begin();
    int prev = nb_get_num_threads();
    int64_t shape[2] = {1 << 11, 1 << 9}, d0 = 0, d1 = 1;
    nb_tensor_params p = nb_tensor_params_default();
    nb_generator *g = nb_generator_create(7);
    p.generator = g;
    nb_tensor *x = NBT_CHECK(nb_randn(shape, 2, &p));
    /* columns split into blocks among the threads, and more columns than one block takes */
    nb_tensor *wide = NBT_CHECK(nb_randn((int64_t[]){64, 40000}, 2, &p));
    /* few outputs inside an outer reduced dim (NCHW's sum over (0, 2, 3)): runs in memory order,
     * shared out among the threads, against the reference path on a strided copy */
    nb_tensor *img = NBT_CHECK(nb_randn((int64_t[]){64, 40, 500}, 3, &p)), *img_s = nbt_noncontig(img);
    const int64_t d02[2] = {0, 2};
    nb_generator_free(g);
    nb_tensor *ref[5];
    for (int nt = 1; nt <= 3; nt++) {
        NBT_OK(nb_set_num_threads(nt));
        nb_tensor *r[5] = {nb_sum(x, NULL, 0, false), nb_sum(x, &d0, 1, false), nb_sum(x, &d1, 1, false),
                           nb_softmax(x, 1), nb_sum(wide, &d0, 1, false)};
        for (int k = 0; k < 5; k++) {
            NBT_CHECK(r[k]);
            if (nt == 1) ref[k] = r[k];
            else nbt_assert_close(r[k], ref[k], 1e-6, 1e-5, "a result across thread counts");
        }
        nbt_assert_close(nb_sum(img, d02, 2, false), nb_sum(img_s, d02, 2, false), 1e-6, 1e-5, "sum over (0, 2)");
        nbt_assert_close(nb_mean(img, d02, 2, true), nb_mean(img_s, d02, 2, true), 1e-6, 1e-6, "mean over (0, 2)");
        nbt_assert_close(nb_norm(img, 2, d02, 2, false), nb_norm(img_s, 2, d02, 2, false), 1e-6, 1e-5, "norm over (0, 2)");
    }
    NBT_OK(nb_set_num_threads(prev));
    nb_scope_end(s);
}

/* The first extreme of one long row, cut in pieces among the threads: equal maxima in the first
 * and the last piece (the first wins), then a NaN in the middle piece before a larger value and a
 * later NaN (the first NaN wins), at 1 to 3 threads; hand-placed, so the answers are known. */
static void test_threads_extreme(void **state)
{
    nb_scope *s = nb_scope_begin();
    int prev = nb_get_num_threads();
    enum { N = 100003 };
    float *v = malloc(N * sizeof *v);
    assert_non_null(v);
    for (int i = 0; i < N; i++) v[i] = (float)((i * 7919) % 1000) / 1000.0f;
    v[30000] = v[70000] = 5, v[20000] = v[99000] = -5;
    int64_t n = N, one = 1;
    nb_tensor *x = from(v, &n, 1, NB_FLOAT32);
    v[50000] = NAN, v[60000] = 9, v[80000] = NAN;
    nb_tensor *y = from(v, &n, 1, NB_FLOAT32);
    free(v);
    for (int nt = 1; nt <= 3; nt++) {
        NBT_OK(nb_set_num_threads(nt));
        expect(nb_argmax(x, NB_DIM_NONE, false), (double[]){30000}, NULL, 0, "argmax of a long row");
        expect(nb_argmin(x, NB_DIM_NONE, false), (double[]){20000}, NULL, 0, "argmin of a long row");
        nb_tensor *idx;
        expect(nb_max_dim(x, 0, true, &idx), (double[]){5}, &one, 1, "max_dim of a long row");
        expect(idx, (double[]){30000}, &one, 1, "max_dim index of a long row");
        expect(nb_argmax(y, NB_DIM_NONE, false), (double[]){50000}, NULL, 0, "argmax with NaNs");
        expect(nb_argmin(y, 0, false), (double[]){50000}, NULL, 0, "argmin with NaNs");
    }
    NBT_OK(nb_set_num_threads(prev));
    nb_scope_end(s);
}

/* The fast paths (contiguous inputs: inner and outer modes, with and without splitting the
 * reduction across threads) against the reference path (the same values laid out
 * non-contiguously), for every op that has a fast path. */
static void test_fast_vs_reference(void **state)
{
    static const struct {
        int nd;
        int64_t shape[3];
        int ndims;
        int64_t dims[2];
    } cases[] = {
        {2, {64, 1000}, 1, {1}}, {2, {64, 1000}, 1, {0}},   {2, {64, 1000}, 0, {0}},
        {3, {7, 300, 5}, 2, {0, 2}}, {3, {7, 300, 5}, 1, {1}}, {2, {20000, 3}, 1, {0}},
        {2, {3, 20000}, 1, {1}},     {1, {100003}, 0, {0}},
        /* outer mode over several column blocks (more than OUTER_CW columns; and a kept outer dim) */
        {2, {40, 40000}, 1, {0}},    {3, {3, 50, 5000}, 1, {1}},
        /* up to 64 columns down many rows, summed in registers: one to eight vectors of eight,
         * the last one masked, and an odd number of rows; on AVX2 up to 32 columns, one to eight
         * vectors of four (one set of accumulators from five), the last one masked, and 32
         * whole columns four rows at a time (999: three rows left over) */
        {2, {1001, 13}, 1, {0}},     {2, {999, 64}, 1, {0}},      {2, {777, 57}, 1, {0}},
        {2, {1003, 65}, 1, {0}},     {3, {3, 501, 8}, 1, {1}},    {2, {1001, 30}, 1, {0}},
        {2, {999, 32}, 1, {0}},      {2, {501, 19}, 1, {0}},      {2, {1000, 2}, 1, {0}},
        /* short rows of up to 256, one loop over the outputs: whole vectors, a masked tail, a
         * tail alone */
        {2, {1000, 37}, 1, {1}},     {2, {999, 8}, 1, {1}},       {2, {500, 256}, 1, {1}},
        {2, {300, 3}, 1, {1}},
    };
    nb_scope *s = nb_scope_begin();
    nb_generator *g = nb_generator_create(5);
    nb_tensor_params p = nb_tensor_params_default();
    p.generator = g;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int f64 = 0; f64 < 2; f64++) {
            p.dtype = f64 ? NB_FLOAT64 : NB_FLOAT32;
            nb_tensor *x = NBT_CHECK(nb_randn(cases[c].shape, cases[c].nd, &p)), *y = nbt_noncontig(x);
            const int64_t *d = cases[c].dims;
            int nd = cases[c].ndims;
            double rtol = f64 ? 1e-12 : 1e-6, mags;
            /* float32 sums add up to eight floats in float32 before double (reduce_vec.c): an
             * error of at most 3 x 2^-24 of the sum of the magnitudes, which cancellation can
             * make large beside the result itself (a sum of 1000 randn is ~30 and their
             * magnitudes ~800) */
            NBT_OK(nb_item(NBT_CHECK(nb_max(NBT_CHECK(nb_sum(NBT_CHECK(nb_abs(y)), d, nd, false)))), &mags));
            double sum_atol = f64 ? rtol : rtol + 3 * 0x1p-24 * mags;
            nbt_assert_close(nb_sum(x, d, nd, false), nb_sum(y, d, nd, false), rtol, sum_atol, "fast sum");
            nbt_assert_close(nb_mean(x, d, nd, true), nb_mean(y, d, nd, true), rtol, rtol, "fast mean");
            nbt_assert_close(nb_norm(x, 1, d, nd, false), nb_norm(y, 1, d, nd, false), rtol, rtol, "fast norm 1");
            nbt_assert_close(nb_norm(x, 2, d, nd, false), nb_norm(y, 2, d, nd, false), rtol, rtol, "fast norm 2");
            nbt_assert_close(nb_var(x, d, nd, 1, false), nb_var(y, d, nd, 1, false), rtol, rtol, "fast var");
            nbt_assert_close(nb_std(x, d, nd, 0, true), nb_std(y, d, nd, 0, true), rtol, rtol, "fast std");
            if (nd == 0) {
                nbt_assert_close(nb_max(x), nb_max(y), 0, 0, "fast max");
                nbt_assert_close(nb_min(x), nb_min(y), 0, 0, "fast min");
            }
        }
    }
    nb_generator_free(g);
    nb_scope_end(s);
}

/* A dense tensor laid out in another order than its dims (channels-last [N, C, H, W]: memory
 * order N, H, W, C) is reduced in memory order (dims sorted by stride; over dim 0 into a scratch
 * output in the input's order, then copied): sums, means,
 * norms, variances and extremes over several dims against the same values laid out row-major;
 * argmax / argmin over the flattened tensor keep the row-major position (the exact same
 * answer), as nb_max_dim's indices do. */
static void test_permuted_dense(void **state)
{
    static const int64_t sets[][4] = {{0, 1, 2, 3}, {0, 2, 3, -1}, {1, -1}, {0, -1}, {2, 3, -1}, {1, 2, 3, -1}};
    nb_scope *s = nb_scope_begin();
    nb_generator *g = nb_generator_create(9);
    nb_tensor_params p = nb_tensor_params_default();
    p.generator = g;
    for (int f64 = 0; f64 < 2; f64++) {
        p.dtype = f64 ? NB_FLOAT64 : NB_FLOAT32;
        nb_tensor *x = NBT_CHECK(nb_randn((int64_t[]){6, 5, 7, 9}, 4, &p));
        nb_tensor *y = NBT_CHECK(nb_contiguous_format(x, NB_CHANNELS_LAST));
        assert_false(nb_tensor_is_contiguous(y));
        double rtol = f64 ? 1e-12 : 1e-5;
        for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++) {
            int nd = 0;
            while (nd < 4 && sets[k][nd] >= 0) nd++;
            const int64_t *d = sets[k];
            nbt_assert_close(nb_sum(y, d, nd, false), nb_sum(x, d, nd, false), rtol, rtol, "permuted sum");
            nbt_assert_close(nb_mean(y, d, nd, true), nb_mean(x, d, nd, true), rtol, rtol, "permuted mean");
            nbt_assert_close(nb_norm(y, 2, d, nd, false), nb_norm(x, 2, d, nd, false), rtol, rtol, "permuted norm");
            nbt_assert_close(nb_var(y, d, nd, 1, false), nb_var(x, d, nd, 1, false), rtol, rtol, "permuted var");
        }
        nbt_assert_close(nb_max(y), nb_max(x), 0, 0, "permuted max");
        nbt_assert_close(nb_argmax(y, NB_DIM_NONE, false), nb_argmax(x, NB_DIM_NONE, false), 0, 0, "permuted argmax");
        nbt_assert_close(nb_argmin(y, NB_DIM_NONE, false), nb_argmin(x, NB_DIM_NONE, false), 0, 0, "permuted argmin");
        nb_tensor *iy = NULL, *ix = NULL;
        nbt_assert_close(NBT_CHECK(nb_max_dim(y, 1, false, &iy)), NBT_CHECK(nb_max_dim(x, 1, false, &ix)), 0, 0,
                         "permuted max_dim");
        nbt_assert_close(iy, ix, 0, 0, "permuted max_dim indices");
        nbt_assert_close(NBT_CHECK(nb_min_dim(y, 0, true, &iy)), NBT_CHECK(nb_min_dim(x, 0, true, &ix)), 0, 0,
                         "permuted min_dim");
        nbt_assert_close(iy, ix, 0, 0, "permuted min_dim indices");
        nbt_assert_close(nb_argmax(y, 1, false), nb_argmax(x, 1, false), 0, 0, "permuted argmax over dim 1");
        nbt_assert_close(nb_argmin(y, 0, false), nb_argmin(x, 0, false), 0, 0, "permuted argmin over dim 0");
        /* broadcast (stride-0) dims, outermost or inner, against the same values made whole */
        nb_tensor *r = NBT_CHECK(nb_randn((int64_t[]){1, 300}, 2, &p)), *c = NBT_CHECK(nb_randn((int64_t[]){40, 1}, 2, &p));
        nb_tensor *er = NBT_CHECK(nb_expand(r, (int64_t[]){40, 300}, 2)), *ec = NBT_CHECK(nb_expand(c, (int64_t[]){40, 300}, 2));
        nb_tensor *wr = NBT_CHECK(nb_contiguous(er)), *wc = NBT_CHECK(nb_contiguous(ec));
        for (int k = 0; k < 3; k++) {
            int64_t dk = k == 2 ? 0 : k;
            int nk = k == 2 ? 0 : 1;
            nbt_assert_close(nb_sum(er, &dk, nk, false), nb_sum(wr, &dk, nk, false), rtol, rtol, "broadcast row sum");
            nbt_assert_close(nb_sum(ec, &dk, nk, false), nb_sum(wc, &dk, nk, false), rtol, rtol, "broadcast column sum");
        }
    }
    nb_generator_free(g);
    nb_scope_end(s);
}

/* A softmax row's values sum to 1 and exp(log_softmax) is softmax, on long float32 rows that take
 * the vectorised path with and without a tail. */
static void test_softmax_properties(void **state)
{
    nb_scope *s = nb_scope_begin();
    int64_t shape[2] = {5, 1003}, d1 = 1;
    nb_tensor_params p = nb_tensor_params_default();
    nb_generator *g = nb_generator_create(11);
    p.generator = g;
    nb_tensor *x = NBT_CHECK(nb_mul_scalar(NBT_CHECK(nb_randn(shape, 2, &p)), 20));
    nb_generator_free(g);
    nb_tensor *sm = NBT_CHECK(nb_softmax(x, 1)), *ls = NBT_CHECK(nb_log_softmax(x, 1));
    nbt_assert_close(nb_sum(sm, &d1, 1, false), NBT_CHECK(nb_ones((int64_t[]){5}, 1, NULL)), 1e-6, 0,
                     "softmax rows sum to 1");
    nbt_assert_close(nb_exp(ls), sm, 1e-5, 1e-30, "exp(log_softmax) = softmax");
    nbt_assert_close(sm, NBT_CHECK(nb_softmax(nbt_noncontig(x), 1)), 1e-5, 1e-30,
                     "vectorised vs reference softmax");
    nb_scope_end(s);
}

/* The float32 softmax family (softmax, log_softmax and cross entropy, forward and backward, over
 * the last dim and over dim 0, which take the vectorised row and column passes and their exp of
 * non-positive arguments) against the same ops in float64 on the same values (libm's exp): a few
 * ulp, plus 2^-125 absolute where e^(x - max) falls below float32's normal range (rows spread
 * over about 250, so many entries do), and -inf entries giving exactly 0. */
static void test_softmax_f32_vs_f64(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_generator *g = nb_generator_create(17);
    nb_tensor_params p = nb_tensor_params_default();
    p.generator = g;
    p.dtype = NB_FLOAT64;
    enum { R = 6, C = 1003 };
    nb_tensor *x64 = NBT_CHECK(nb_mul_scalar(NBT_CHECK(nb_randn((int64_t[]){R, C}, 2, &p)), 40));
    /* multiples of 2^-10 below 2^13: x - max is exact in float32, so the float32 side's error is
     * its exp's and its sums' alone */
    double *xv = nb_tensor_data_ptr(x64);
    for (int i = 0; i < R * C; i++) xv[i] = round(xv[i] * 1024) / 1024;
    xv[5 * C + 7] = -INFINITY, xv[5 * C + 900] = -INFINITY;
    nb_tensor *x32 = NBT_CHECK(nb_to_dtype(x64, NB_FLOAT32));
    nb_tensor *w = NBT_CHECK(nb_randn((int64_t[]){R, C}, 2, &p));
    nb_tensor *t = NBT_CHECK(nb_randint(0, C, (int64_t[]){R}, 1, &(nb_tensor_params){.dtype = NB_INT64, .generator = g}));
    const double tiny = 2.4e-38; /* 2^-125 */
    for (int dim = 0; dim < 2; dim++) {
        /* over dim 0: the transpose made contiguous, so that dim 0 is the reduced one in memory */
        nb_tensor *a = dim ? x32 : NBT_CHECK(nb_contiguous(NBT_CHECK(nb_transpose(x32, 0, 1))));
        nb_tensor *wa = dim ? w : NBT_CHECK(nb_contiguous(NBT_CHECK(nb_transpose(w, 0, 1))));
        int64_t d = dim;
        for (int lg = 0; lg < 2; lg++) {
            nb_tensor *l32 = nbt_leaf(a), *l64 = nbt_leaf(NBT_CHECK(nb_to_dtype(a, NB_FLOAT64)));
            nb_tensor *y32 = NBT_CHECK(lg ? nb_log_softmax(l32, d) : nb_softmax(l32, d));
            nb_tensor *y64 = NBT_CHECK(lg ? nb_log_softmax(l64, d) : nb_softmax(l64, d));
            char what[64];
            snprintf(what, sizeof what, "%s over dim %d, float32 vs float64", lg ? "log_softmax" : "softmax", dim);
            /* log_softmax's (x - max) - log(sum) is exact to an ulp of its larger term, up to 250 */
            nbt_assert_close(y32, NBT_CHECK(nb_to_dtype(y64, NB_FLOAT32)), 1e-6, lg ? 3e-5 : tiny, what);
            NBT_OK(nb_backward(NBT_CHECK(nb_sum(NBT_CHECK(nb_mul(y32, wa)), NULL, 0, false)), NULL, 0));
            NBT_OK(nb_backward(NBT_CHECK(nb_sum(NBT_CHECK(nb_mul(y64, NBT_CHECK(nb_to_dtype(wa, NB_FLOAT64)))), NULL,
                                                0, false)),
                               NULL, 0));
            /* y (w - sum(w y)) and w - e^y sum(w) cancel: an ulp of |w| <= 5 (and of |sum(w)| <= 60)
             * absolute */
            strcat(what, " (gradient)");
            nbt_assert_close(nb_tensor_grad(l32), NBT_CHECK(nb_to_dtype(nb_tensor_grad(l64), NB_FLOAT32)), 1e-5,
                             lg ? 1e-5 : 5e-7, what);
        }
    }
    nb_tensor *l32 = nbt_leaf(x32), *l64 = nbt_leaf(NBT_CHECK(nb_to_dtype(x32, NB_FLOAT64)));
    nb_tensor *c32 = NBT_CHECK(nb_cross_entropy(l32, t, NULL)), *c64 = NBT_CHECK(nb_cross_entropy(l64, t, NULL));
    nbt_assert_close(c32, NBT_CHECK(nb_to_dtype(c64, NB_FLOAT32)), 1e-6, 0, "cross_entropy float32 vs float64");
    NBT_OK(nb_backward(c32, NULL, 0));
    NBT_OK(nb_backward(c64, NULL, 0));
    /* the gradient's exp(x - lse) takes lse rounded to float32: up to half an ulp of ~150 in its
     * argument, 4e-6 relative */
    nbt_assert_close(nb_tensor_grad(l32), NBT_CHECK(nb_to_dtype(nb_tensor_grad(l64), NB_FLOAT32)), 1e-5, tiny,
                     "cross_entropy float32 vs float64 (gradient)");
    /* -inf logits: probability exactly 0 */
    nb_tensor *sm = NBT_CHECK(nb_softmax(x32, 1));
    const float *sv = nb_tensor_data_ptr(sm);
    assert_true(sv[5 * C + 7] == 0.0f && sv[5 * C + 900] == 0.0f);
    nb_generator_free(g);
    nb_scope_end(s);
}

/* Lines with a NaN, with +inf among finite values, and of -inf alone are NaN throughout, as in
 * PyTorch (torch.softmax gives NaN for each: inf - inf and -inf + inf are NaN); finite lines
 * are the softmax computed here in double. Lines of 37 (whole vectors and a tail) down columns
 * (dim 0 of [37, 20]: the column blocks) and along rows (dim 1 of [20, 37]), softmax and
 * log_softmax, float32 and float64. */
static void test_softmax_nonfinite(void **state)
{
    enum { D = 37, K = 20 };
    double v[D][K], want[2][D][K];
    for (int c = 0; c < K; c++) {
        for (int d = 0; d < D; d++) v[d][c] = sin(0.7 * d + c) * 4;
        int kind = c % 4; /* 0 finite, 1 a NaN, 2 +inf, 3 all -inf */
        if (kind == 1) v[(c * 7) % D][c] = NAN;
        if (kind == 2) v[(c * 5) % D][c] = INFINITY;
        for (int d = 0; kind == 3 && d < D; d++) v[d][c] = -INFINITY;
        double m = -INFINITY, sum = 0;
        for (int d = 0; d < D; d++) m = v[d][c] > m ? v[d][c] : m;
        for (int d = 0; d < D; d++) sum += exp(v[d][c] - m);
        for (int d = 0; d < D; d++) {
            want[0][d][c] = kind ? NAN : exp(v[d][c] - m) / sum;
            want[1][d][c] = kind ? NAN : v[d][c] - m - log(sum);
        }
    }
    nb_scope *s = nb_scope_begin();
    int64_t sh[2] = {D, K};
    nb_tensor *x64 = from(v, sh, 2, NB_FLOAT64);
    for (int f32 = 0; f32 < 2; f32++) {
        nb_tensor *cols = f32 ? NBT_CHECK(nb_to_dtype(x64, NB_FLOAT32)) : x64;
        nb_tensor *rows = NBT_CHECK(nb_contiguous(NBT_CHECK(nb_transpose(cols, 0, 1))));
        for (int lg = 0; lg < 2; lg++) {
            nb_tensor *w = from(want[lg], sh, 2, NB_FLOAT64);
            nb_tensor *yc = NBT_CHECK(lg ? nb_log_softmax(cols, 0) : nb_softmax(cols, 0));
            nb_tensor *yr = NBT_CHECK(lg ? nb_log_softmax(rows, 1) : nb_softmax(rows, 1));
            double tol = f32 ? 1e-5 : 1e-12;
            char what[80];
            snprintf(what, sizeof what, "%s %s down columns", f32 ? "float32" : "float64", lg ? "log_softmax" : "softmax");
            nbt_assert_close(NBT_CHECK(nb_to_dtype(yc, NB_FLOAT64)), w, tol, tol, what);
            snprintf(what, sizeof what, "%s %s along rows", f32 ? "float32" : "float64", lg ? "log_softmax" : "softmax");
            nbt_assert_close(NBT_CHECK(nb_to_dtype(NBT_CHECK(nb_transpose(yr, 0, 1)), NB_FLOAT64)), w, tol, tol, what);
        }
    }
    nb_scope_end(s);
}

/* ---- errors ------------------------------------------------------------------------------------ */

static void test_errors(void **state)
{
    nb_scope *s = nb_scope_begin();
    int64_t sh[3] = {2, 3, 4}, d3 = 3, rep[2] = {1, -2}, n0 = 0, sh0[2] = {0, 3};
    nb_tensor *x = NBT_CHECK(nb_ones(sh, 3, NULL));
    NBT_FAILS(nb_sum(x, &d3, 1, false) == NULL, NB_ERR_INVALID_ARG, "sum", "dim 3 out of range", NULL);
    NBT_FAILS(nb_mean(x, (int64_t[]){-4}, 1, false) == NULL, NB_ERR_INVALID_ARG, "mean", "dim -4 out of range", NULL);
    NBT_FAILS(nb_sum(x, rep, 2, false) == NULL, NB_ERR_INVALID_ARG, "sum", "dim 1 appears multiple times", NULL);
    NBT_FAILS(nb_var(x, rep, 2, 1, false) == NULL, NB_ERR_INVALID_ARG, "var", "dim 1 appears multiple times", NULL);
    NBT_FAILS(nb_sum(NULL, NULL, 0, false) == NULL, NB_ERR_INVALID_ARG, "sum", "NULL", NULL);
    NBT_FAILS(nb_sum(x, NULL, 1, false) == NULL, NB_ERR_INVALID_ARG, "sum", "dims is NULL", NULL);
    NBT_FAILS(nb_sum(x, &d3, -1, false) == NULL, NB_ERR_INVALID_ARG, "sum", "ndims is -1", NULL);
    NBT_FAILS(nb_norm(x, NAN, NULL, 0, false) == NULL, NB_ERR_INVALID_ARG, "norm", "NaN", NULL);
    /* empty reductions with no identity */
    nb_tensor *e = NBT_CHECK(nb_zeros(&n0, 1, NULL)), *e2 = NBT_CHECK(nb_zeros(sh0, 2, NULL));
    NBT_FAILS(nb_max(e) == NULL, NB_ERR_INVALID_ARG, "max", "empty", NULL);
    NBT_FAILS(nb_min(e) == NULL, NB_ERR_INVALID_ARG, "min", "empty", NULL);
    NBT_FAILS(nb_argmax(e, NB_DIM_NONE, false) == NULL, NB_ERR_INVALID_ARG, "argmax", "empty", NULL);
    nb_tensor *idx = (nb_tensor *)1;
    NBT_FAILS(nb_max_dim(e2, 0, false, &idx) == NULL, NB_ERR_INVALID_ARG, "max", "dim 0", "size 0", NULL);
    assert_null(idx);
    NBT_FAILS(nb_argmin(e2, 0, false) == NULL, NB_ERR_INVALID_ARG, "argmin", "size 0", NULL);
    NBT_FAILS(nb_max_dim(x, 5, false, NULL) == NULL, NB_ERR_INVALID_ARG, "max", "dim 5 out of range", NULL);
    /* dtypes: float-only ops on integers, softmax on integers, argmax on bool */
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_INT32;
    nb_tensor *xi = NBT_CHECK(nb_ones(sh, 3, &p));
    NBT_FAILS(nb_mean(xi, NULL, 0, false) == NULL, NB_ERR_DTYPE, "mean", "floating", "int32", NULL);
    NBT_FAILS(nb_var(xi, NULL, 0, 1, false) == NULL, NB_ERR_DTYPE, "var", "int32", NULL);
    NBT_FAILS(nb_std(xi, NULL, 0, 1, false) == NULL, NB_ERR_DTYPE, "std", "int32", NULL);
    NBT_FAILS(nb_norm(xi, 2, NULL, 0, false) == NULL, NB_ERR_DTYPE, "norm", "int32", NULL);
    NBT_FAILS(nb_softmax(xi, 0) == NULL, NB_ERR_DTYPE, "softmax", "int32", NULL);
    NBT_FAILS(nb_log_softmax(xi, 0) == NULL, NB_ERR_DTYPE, "log_softmax", "int32", NULL);
    p.dtype = NB_BOOL;
    NBT_FAILS(nb_argmax(NBT_CHECK(nb_ones(sh, 3, &p)), 0, false) == NULL, NB_ERR_DTYPE, "argmax", "bool", NULL);
    /* dims along one dim */
    NBT_FAILS(nb_softmax(x, 3) == NULL, NB_ERR_INVALID_ARG, "softmax", "dim 3 out of range", NULL);
    NBT_FAILS(nb_log_softmax(x, -4) == NULL, NB_ERR_INVALID_ARG, "log_softmax", "dim -4 out of range", NULL);
    NBT_FAILS(nb_cumsum(x, 3) == NULL, NB_ERR_INVALID_ARG, "cumsum", "dim 3 out of range", NULL);
    NBT_FAILS(nb_softmax(NULL, 0) == NULL, NB_ERR_INVALID_ARG, "softmax", "NULL", NULL);
    NBT_FAILS(nb_cumsum(NULL, 0) == NULL, NB_ERR_INVALID_ARG, "cumsum", "NULL", NULL);
    /* a saved output changed in place before backward */
    nb_tensor *leaf = nbt_leaf(x);
    nb_tensor *y = NBT_CHECK(nb_softmax(leaf, 1));
    nb_tensor *z = NBT_CHECK(nb_sum(y, NULL, 0, false));
    NBT_OK(nb_mul_scalar_(y, 2));
    NBT_FAILS(nb_backward(z, NULL, NB_BACKWARD_DEFAULT) != NB_OK, NB_ERR_AUTOGRAD, "softmax", "modified", NULL);
    nb_scope_end(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_threads_extreme),
        cmocka_unit_test(test_softmax_properties),
        cmocka_unit_test(test_softmax_f32_vs_f64),
        cmocka_unit_test(test_softmax_nonfinite),
        cmocka_unit_test(test_fast_vs_reference),
        cmocka_unit_test(test_permuted_dense),
        cmocka_unit_test(test_reference),
    };
    return NBT_RUN(tests);
}
