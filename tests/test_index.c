/* index_select, gather, scatter(_add)(_), masked_fill(_), one_hot, embedding: PyTorch's values
 * (tests/ref/cases_index.py) on contiguous and non-contiguous inputs, gradients against PyTorch
 * and finite differences, in-place variants with and without autograd, larger inputs that take
 * the parallel paths against plain loops, and every error path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nbtest.h"

static nb_tensor_map *g_ref;

/* A non-contiguous copy (nbt_noncontig); empty tensors as they are (nothing to lay out, and the
 * core calls a fresh empty tensor with a zero-size inner dim non-contiguous). */
static nb_tensor *strided(nb_tensor *t) { return nb_tensor_numel(t) ? nbt_noncontig(t) : t; }

static int64_t ref_int(const char *c, const char *key)
{
    int64_t v;
    NBT_OK(nb_item_int64(NBT_CHECK(nbt_ref(g_ref, c, key)), &v));
    return v;
}

static nb_tensor *i64(const int64_t *v, const int64_t *shape, int nd)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_INT64;
    return NBT_CHECK(nb_tensor_from_data(v, shape, nd, &p));
}

static nb_tensor *f64(const double *v, const int64_t *shape, int nd)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_FLOAT64;
    return NBT_CHECK(nb_tensor_from_data(v, shape, nd, &p));
}

/* One case: the op and its non-tensor arguments. */
typedef struct icase {
    char op[32];
    int64_t dim;
    nb_tensor *index, *mask;
    double value;
} icase;

static nb_tensor *apply(nb_tensor *const *in, int n, void *vctx)
{
    const icase *c = vctx;
    if (!strcmp(c->op, "index_select")) return nb_index_select(in[0], c->dim, c->index);
    if (!strcmp(c->op, "gather")) return nb_gather(in[0], c->dim, c->index);
    if (!strcmp(c->op, "scatter")) return nb_scatter(in[0], c->dim, c->index, in[1]);
    if (!strcmp(c->op, "scatter_add")) return nb_scatter_add(in[0], c->dim, c->index, in[1]);
    if (!strcmp(c->op, "masked_fill")) return nb_masked_fill(in[0], c->mask, c->value);
    if (!strcmp(c->op, "embedding")) return nb_embedding(in[0], c->index);
    fail_msg("unknown op %s", c->op);
    return NULL;
}

static void tolerances(nb_dtype dt, double *rtol, double *atol)
{
    *rtol = dt == NB_FLOAT32 ? 1e-5 : 1e-10;
    *atol = dt == NB_FLOAT32 ? 1e-6 : 1e-12;
}

/* Loads the case's inputs and parameters; noncontig: every tensor argument laid out strided. */
static int load_case(const char *name, icase *c, nb_tensor **in, bool noncontig)
{
    memset(c, 0, sizeof *c);
    size_t len = strcspn(name, "/");
    memcpy(c->op, name, len < sizeof c->op ? len : sizeof c->op - 1);
    int n = 0;
    for (; n < 2; n++) {
        char key[16];
        snprintf(key, sizeof key, "in%d", n);
        if (!(in[n] = nbt_ref(g_ref, name, key))) break;
    }
    if (nbt_ref(g_ref, name, "dim")) c->dim = ref_int(name, "dim");
    c->index = nbt_ref(g_ref, name, "index");
    c->mask = nbt_ref(g_ref, name, "mask");
    nb_tensor *v = nbt_ref(g_ref, name, "value");
    if (v) NBT_OK(nb_item(v, &c->value));
    if (noncontig) {
        if (c->index) c->index = strided(c->index);
        if (c->mask) c->mask = strided(c->mask);
    }
    return n;
}

static void run_case(const char *name, bool noncontig)
{
    nb_scope *s = nb_scope_begin();
    icase c;
    nb_tensor *in[2], *leaves[2];
    int n = load_case(name, &c, in, noncontig);
    nb_tensor *gout = nbt_ref(g_ref, name, "gout");
    double rtol, atol;
    tolerances(nb_tensor_dtype(in[0]), &rtol, &atol);
    char what[256];
    for (int i = 0; i < n; i++) {
        leaves[i] = gout ? nbt_leaf(in[i]) : in[i];
        in[i] = noncontig ? strided(leaves[i]) : leaves[i];
        if (noncontig && nb_tensor_numel(in[i]) > 1) assert_false(nb_tensor_is_contiguous(in[i]));
    }
    nb_tensor *out = apply(in, n, &c);
    snprintf(what, sizeof what, "%s%s: forward", name, noncontig ? " (non-contiguous)" : "");
    nbt_assert_close(NBT_CHECK(out), nbt_ref(g_ref, name, "out"), rtol, atol, what);
    assert_int_equal(nb_tensor_dtype(out), nb_tensor_dtype(nbt_ref(g_ref, name, "out")));
    if (gout) {
        NBT_OK(nb_backward(out, gout, NB_BACKWARD_DEFAULT));
        for (int i = 0; i < n; i++) {
            char key[16];
            snprintf(key, sizeof key, "grad%d", i);
            snprintf(what, sizeof what, "%s%s: gradient of input %d", name, noncontig ? " (non-contiguous)" : "", i);
            nbt_assert_close(nb_tensor_grad(leaves[i]), nbt_ref(g_ref, name, key), rtol, atol, what);
        }
        if (!noncontig && nb_tensor_dtype(in[0]) == NB_FLOAT64 && nb_tensor_numel(out) > 0 && isfinite(c.value)) {
            snprintf(what, sizeof what, "%s: finite differences", name);
            nbt_gradcheck(apply, &c, in, n, 1e-6, 1e-8, 1e-6, what);
        }
    }
    nb_scope_end(s);
}

static void test_reference(void **state)
{
    char **names;
    int n = nbt_case_names(g_ref, &names);
    assert_true(n > 50);
    for (int i = 0; i < n; i++) {
        if (!strncmp(names[i], "one_hot/", 8)) continue;
        run_case(names[i], false);
        run_case(names[i], true);
    }
    nbt_free_names(names, n);
}

static void test_one_hot(void **state)
{
    const char *cases[] = {"one_hot/vec/i64", "one_hot/mat/i64", "one_hot/scalar/i64", "one_hot/empty/i64"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        nb_scope *s = nb_scope_begin();
        nb_tensor *idx = nbt_ref(g_ref, cases[i], "index");
        int64_t classes = ref_int(cases[i], "classes");
        nb_tensor *want = nbt_ref(g_ref, cases[i], "out");
        nb_tensor *out = NBT_CHECK(nb_one_hot(idx, classes));
        assert_int_equal(nb_tensor_dtype(out), NB_INT64);
        nbt_assert_close(out, want, 0, 0, cases[i]);
        nbt_assert_close(NBT_CHECK(nb_one_hot(strided(idx), classes)), want, 0, 0, cases[i]);
        nbt_assert_close(NBT_CHECK(nb_one_hot(NBT_CHECK(nb_to_dtype(idx, NB_INT32)), classes)), want, 0, 0, cases[i]);
        nb_scope_end(s);
    }
}

/* int32 indices give what int64 ones give. */
static void test_int32_index(void **state)
{
    char **names;
    int n = nbt_case_names(g_ref, &names), checked = 0;
    for (int i = 0; i < n; i++) {
        if (strncmp(names[i], "gather/", 7) && strncmp(names[i], "scatter", 7)) continue;
        checked++;
        nb_scope *s = nb_scope_begin();
        icase c;
        nb_tensor *in[2];
        int k = load_case(names[i], &c, in, false);
        c.index = NBT_CHECK(nb_to_dtype(c.index, NB_INT32));
        nbt_assert_close(NBT_CHECK(apply(in, k, &c)), nbt_ref(g_ref, names[i], "out"), 0, 0, names[i]);
        nb_scope_end(s);
    }
    nbt_free_names(names, n);
    assert_true(checked >= 20); /* 32 cases now: renamed cases must not leave this testing nothing */
}

/* The in-place variants give the out-of-place results, without autograd and with it. */
static void test_inplace(void **state)
{
    const char *cases[] = {"scatter/dim1/f64", "scatter_add/small/f32", "masked_fill/bcast_mask/f64",
                           "scatter_add/ints/i64", "masked_fill/ints/i64"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        nb_scope *s = nb_scope_begin();
        icase c;
        nb_tensor *in[2];
        int n = load_case(cases[i], &c, in, false);
        nb_tensor *want = nbt_ref(g_ref, cases[i], "out");
        /* without autograd, on a non-contiguous tensor */
        nb_tensor *y = strided(in[0]);
        uint64_t v0 = nb_tensor_version(y);
        if (!strcmp(c.op, "scatter")) NBT_OK(nb_scatter_(y, c.dim, c.index, in[1]));
        else if (!strcmp(c.op, "scatter_add")) NBT_OK(nb_scatter_add_(y, c.dim, c.index, in[1]));
        else NBT_OK(nb_masked_fill_(y, c.mask, c.value));
        assert_true(nb_tensor_version(y) > v0);
        nbt_assert_close(y, want, 1e-6, 1e-7, cases[i]);
        nb_tensor *gout = nbt_ref(g_ref, cases[i], "gout");
        if (gout) { /* with autograd: on a non-leaf */
            nb_tensor *l0 = nbt_leaf(in[0]), *l1 = n > 1 ? nbt_leaf(in[1]) : NULL;
            nb_tensor *x = NBT_CHECK(nb_clone(l0));
            if (!strcmp(c.op, "scatter")) NBT_OK(nb_scatter_(x, c.dim, c.index, l1));
            else if (!strcmp(c.op, "scatter_add")) NBT_OK(nb_scatter_add_(x, c.dim, c.index, l1));
            else NBT_OK(nb_masked_fill_(x, c.mask, c.value));
            nbt_assert_close(x, want, 1e-6, 1e-7, cases[i]);
            NBT_OK(nb_backward(x, gout, NB_BACKWARD_DEFAULT));
            nbt_assert_close(nb_tensor_grad(l0), nbt_ref(g_ref, cases[i], "grad0"), 1e-6, 1e-7, cases[i]);
            if (l1) nbt_assert_close(nb_tensor_grad(l1), nbt_ref(g_ref, cases[i], "grad1"), 1e-6, 1e-7, cases[i]);
        }
        nb_scope_end(s);
    }
}

/* masked_fill_ on a view of a non-leaf: the base's gradient is zero where the view was filled. */
static void test_inplace_view(void **state)
{
    nb_scope *s = nb_scope_begin();
    double xv[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {2, 3}, mshape[1] = {3};
    nb_tensor *leaf = nbt_leaf(f64(xv, shape, 2));
    nb_tensor *base = NBT_CHECK(nb_clone(leaf));
    nb_tensor *row = NBT_CHECK(nb_select(base, 0, 1));
    bool mv[3] = {true, false, true};
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_BOOL;
    nb_tensor *mask = NBT_CHECK(nb_tensor_from_data(mv, mshape, 1, &p));
    NBT_OK(nb_masked_fill_(row, mask, -1));
    double want[6] = {1, 2, 3, -1, 5, -1}, gw[6] = {1, 1, 1, 0, 1, 0};
    nbt_assert_close(base, f64(want, shape, 2), 0, 0, "masked_fill_ on a view");
    NBT_OK(nb_backward(base, NBT_CHECK(nb_ones_like(base)), NB_BACKWARD_DEFAULT));
    nbt_assert_close(nb_tensor_grad(leaf), f64(gw, shape, 2), 0, 0, "masked_fill_ on a view: gradient");
    nb_scope_end(s);
}

/* Inputs above the grain (parallel paths) against plain loops: index_select and embedding by
 * rows, index_select along inner dims, gather, and scatter_add with many duplicates. */
static void test_large(void **state)
{
    nb_scope *s = nb_scope_begin();
    enum { R = 3000, C = 37, N = 5000 };
    int64_t wshape[2] = {R, C}, n = N;
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_FLOAT64;
    nb_tensor *w = NBT_CHECK(nb_randn(wshape, 2, &p));
    nb_tensor *idx = NBT_CHECK(nb_randint(0, R, &n, 1, NULL));
    assert_int_equal(nb_tensor_dtype(idx), NB_INT64);
    const double *wd = nb_tensor_data_ptr(w);
    const int64_t *id = nb_tensor_data_ptr(idx);
    double *want = malloc(sizeof(double) * N * C), *acc = calloc(R * C, sizeof(double));
    assert_non_null(want);
    assert_non_null(acc);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < C; j++) {
            want[i * C + j] = wd[id[i] * C + j];
            acc[id[i] * C + j] += wd[(i % R) * C + j];
        }
    int64_t oshape[2] = {N, C};
    nb_tensor *wt = f64(want, oshape, 2);
    nbt_assert_close(NBT_CHECK(nb_index_select(w, 0, idx)), wt, 0, 0, "index_select rows");
    nbt_assert_close(NBT_CHECK(nb_embedding(w, idx)), wt, 0, 0, "embedding rows");
    nb_tensor *wT = NBT_CHECK(nb_t(w)); /* [C, R]: select along the inner dim */
    nbt_assert_close(NBT_CHECK(nb_index_select(NBT_CHECK(nb_contiguous(wT)), 1, idx)), NBT_CHECK(nb_t(wt)), 0, 0,
                     "index_select inner dim");
    nbt_assert_close(NBT_CHECK(nb_index_select(wT, 1, idx)), NBT_CHECK(nb_t(wt)), 0, 0, "index_select strided");
    /* scatter_add of rows i % R of w into rows idx[i], as [N, C] with a broadcast index */
    int64_t ishape[2] = {N, 1};
    nb_tensor *idx2 = NBT_CHECK(nb_expand(NBT_CHECK(nb_reshape(idx, ishape, 2)), oshape, 2));
    nb_tensor *src = NBT_CHECK(nb_cat((nb_tensor *[]){w, w}, 2, 0));
    src = NBT_CHECK(nb_narrow(src, 0, 0, N));
    nb_tensor *z = NBT_CHECK(nb_zeros(wshape, 2, &p));
    nbt_assert_close(NBT_CHECK(nb_scatter_add(z, 0, idx2, src)), f64(acc, wshape, 2), 1e-12, 1e-12,
                     "scatter_add with duplicates");
    nbt_assert_close(NBT_CHECK(nb_gather(w, 0, idx2)), wt, 0, 0, "gather rows");
    free(want);
    free(acc);
    nb_scope_end(s);
}

static void test_errors(void **state)
{
    nb_scope *s = nb_scope_begin();
    int64_t shape5[1] = {5}, shape23[2] = {2, 3}, one = 1, two = 2;
    nb_tensor *x = NBT_CHECK(nb_zeros(shape5, 1, NULL));
    nb_tensor *m = NBT_CHECK(nb_zeros(shape23, 2, NULL));
    int64_t seven = 7, neg = -1, zero = 0, vals2[2] = {0, 2};
    nb_tensor *i7 = i64(&seven, &one, 1), *ineg = i64(&neg, &one, 1), *i0 = i64(&zero, &one, 1);
    NBT_FAILS(nb_index_select(x, 0, i7) == NULL, NB_ERR_INVALID_ARG,
              "index_select: index 7 is out of range for dim 0 of size 5", NULL);
    NBT_FAILS(nb_index_select(x, 0, ineg) == NULL, NB_ERR_INVALID_ARG, "index_select", "index -1", "size 5", NULL);
    NBT_FAILS(nb_index_select(x, 0, NBT_CHECK(nb_to_dtype(i7, NB_INT32))) == NULL, NB_ERR_INVALID_ARG, "index 7", NULL);
    NBT_FAILS(nb_index_select(x, 0, x) == NULL, NB_ERR_DTYPE, "index_select", "int64 or int32", "float32", NULL);
    NBT_FAILS(nb_index_select(x, 1, i0) == NULL, NB_ERR_INVALID_ARG, "index_select", "dim 1", "tensor of 1 dims", NULL);
    NBT_FAILS(nb_index_select(x, 0, NBT_CHECK(nb_zeros(shape23, 2, &(nb_tensor_params){.dtype = NB_INT64}))) == NULL,
              NB_ERR_SHAPE, "index_select", "[2, 3]", NULL);
    NBT_FAILS(nb_index_select(NULL, 0, i0) == NULL, NB_ERR_INVALID_ARG, "index_select", NULL);
    NBT_FAILS(nb_gather(x, 0, i7) == NULL, NB_ERR_INVALID_ARG, "gather: index 7 is out of range for dim 0 of size 5",
              NULL);
    NBT_FAILS(nb_gather(m, 0, i0) == NULL, NB_ERR_SHAPE, "gather", "[1]", "[2, 3]", NULL);
    int64_t big[2] = {2, 4};
    nb_tensor *ibig = NBT_CHECK(nb_zeros(big, 2, &(nb_tensor_params){.dtype = NB_INT64}));
    NBT_FAILS(nb_gather(m, 0, ibig) == NULL, NB_ERR_SHAPE, "gather", "[2, 4]", "[2, 3]", "dim 1", NULL);
    nb_tensor *src = NBT_CHECK(nb_ones(&one, 1, NULL));
    NBT_FAILS(nb_scatter_add(x, 0, i7, src) == NULL, NB_ERR_INVALID_ARG,
              "scatter_add: index 7 is out of range for dim 0 of size 5", NULL);
    NBT_FAILS(nb_scatter(x, 0, ineg, src) == NULL, NB_ERR_INVALID_ARG, "scatter: index -1", NULL);
    /* nothing is written before the check fails */
    nb_tensor *y = NBT_CHECK(nb_zeros(shape5, 1, NULL));
    int64_t bad2[2] = {1, 9};
    nb_tensor *ibad = i64(bad2, &two, 1);
    NBT_FAILS(nb_scatter_add_(y, 0, ibad, NBT_CHECK(nb_ones(&two, 1, NULL))) != NB_OK, NB_ERR_INVALID_ARG,
              "scatter_add", "index 9", NULL);
    nbt_assert_close(y, x, 0, 0, "scatter_add_ wrote nothing");
    NBT_FAILS(nb_scatter(x, 0, i0, NBT_CHECK(nb_to_dtype(src, NB_FLOAT64))) == NULL, NB_ERR_DTYPE, "scatter",
              "float64", "float32", NULL);
    NBT_FAILS(nb_scatter(x, 0, ibig, m) == NULL, NB_ERR_SHAPE, "scatter", "[2, 4]", NULL);
    NBT_FAILS(nb_scatter(x, 0, i64(vals2, &two, 1), src) == NULL, NB_ERR_SHAPE, "scatter", "[2]", "[1]", NULL);
    nb_tensor *leaf = nbt_leaf(x);
    NBT_FAILS(nb_scatter_(leaf, 0, i0, src) != NB_OK, NB_ERR_AUTOGRAD, "scatter_", "leaf", NULL);
    NBT_FAILS(nb_masked_fill_(leaf, NBT_CHECK(nb_gt_scalar(x, 0)), 1) != NB_OK, NB_ERR_AUTOGRAD, "masked_fill_", NULL);
    NBT_FAILS(nb_masked_fill(x, x, 1) == NULL, NB_ERR_DTYPE, "masked_fill", "bool", "float32", NULL);
    nb_tensor_params bp = {.dtype = NB_BOOL};
    nb_tensor *mask23 = NBT_CHECK(nb_zeros(shape23, 2, &bp)), *mask4 = NBT_CHECK(nb_zeros(&(int64_t){4}, 1, &bp));
    NBT_FAILS(nb_masked_fill(x, mask4, 1) == NULL, NB_ERR_SHAPE, "masked_fill", "[5]", "[4]", "5 vs 4", NULL);
    NBT_FAILS(nb_masked_fill_(NBT_CHECK(nb_zeros(&(int64_t){3}, 1, NULL)), mask23, 1) != NB_OK, NB_ERR_SHAPE,
              "masked_fill_", "[2, 3]", "[3]", NULL);
    nb_tensor *w = NBT_CHECK(nb_zeros(shape23, 2, NULL));
    NBT_FAILS(nb_embedding(w, i7) == NULL, NB_ERR_INVALID_ARG, "embedding: index 7 is out of range for dim 0 of size 2",
              NULL);
    NBT_FAILS(nb_embedding(x, i0) == NULL, NB_ERR_SHAPE, "embedding", "2-D", "[5]", NULL);
    NBT_FAILS(nb_embedding(w, w) == NULL, NB_ERR_DTYPE, "embedding", "float32", NULL);
    int64_t cls[2] = {1, 5};
    NBT_FAILS(nb_one_hot(i64(cls, &two, 1), 3) == NULL, NB_ERR_INVALID_ARG, "one_hot", "index 5", "3", NULL);
    NBT_FAILS(nb_one_hot(ineg, 3) == NULL, NB_ERR_INVALID_ARG, "one_hot", "index -1", NULL);
    NBT_FAILS(nb_one_hot(x, 3) == NULL, NB_ERR_DTYPE, "one_hot", "int64 or int32", "float32", NULL);
    NBT_FAILS(nb_one_hot(NBT_CHECK(nb_zeros(&zero, 1, &(nb_tensor_params){.dtype = NB_INT64})), -1) == NULL,
              NB_ERR_INVALID_ARG, "one_hot", "empty", NULL);
    nb_scope_end(s);
}

static int load(void **state)
{
    g_ref = nbt_load_ref("index");
    return 0;
}

static int unload(void **state)
{
    nb_tensor_map_free(g_ref);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference),  cmocka_unit_test(test_one_hot), cmocka_unit_test(test_int32_index),
        cmocka_unit_test(test_inplace),    cmocka_unit_test(test_inplace_view), cmocka_unit_test(test_large),
        cmocka_unit_test(test_errors),
    };
    return NBT_RUN_GROUP(tests, load, unload);
}
