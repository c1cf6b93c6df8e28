/* sort and topk: PyTorch's values and indices (tests/ref/cases_sort.py: stability on ties, NaN
 * as the largest value, int64 data) on contiguous and non-contiguous inputs, gradients against
 * PyTorch and finite differences, many lines in parallel against qsort, and the error paths. */
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

typedef struct scase {
    bool topk;
    int64_t dim, k;
    bool flag; /* descending / largest */
} scase;

static nb_tensor *apply_idx(nb_tensor *const *in, const scase *c, nb_tensor **idx)
{
    if (c->topk) return nb_topk(in[0], c->k, c->dim, c->flag, true, idx);
    return nb_sort(in[0], c->dim, c->flag, idx);
}

static nb_tensor *apply(nb_tensor *const *in, int n, void *vctx) { return apply_idx(in, vctx, NULL); }

static void run_case(const char *name, bool noncontig)
{
    nb_scope *s = nb_scope_begin();
    scase c = {.topk = !strncmp(name, "topk/", 5), .dim = ref_int(name, "dim")};
    c.flag = ref_int(name, c.topk ? "largest" : "descending") != 0;
    if (c.topk) c.k = ref_int(name, "k");
    nb_tensor *x = nbt_ref(g_ref, name, "in0"), *gout = nbt_ref(g_ref, name, "gout");
    nb_tensor *leaf = gout ? nbt_leaf(x) : x;
    nb_tensor *in = noncontig ? strided(leaf) : leaf, *idx;
    nb_tensor *out = NBT_CHECK(apply_idx(&in, &c, &idx));
    char what[256];
    const char *nc = noncontig ? " (non-contiguous)" : "";
    snprintf(what, sizeof what, "%s%s: values", name, nc);
    nbt_assert_close(out, nbt_ref(g_ref, name, "out"), 0, 0, what);
    snprintf(what, sizeof what, "%s%s: indices", name, nc);
    assert_int_equal(nb_tensor_dtype(NBT_CHECK(idx)), NB_INT64);
    nbt_assert_close(idx, nbt_ref(g_ref, name, "indices"), 0, 0, what);
    if (gout) {
        assert_string_equal(nb_tensor_grad_fn_name(out), c.topk ? "TopkBackward0" : "SortBackward0");
        NBT_OK(nb_backward(out, gout, NB_BACKWARD_DEFAULT));
        snprintf(what, sizeof what, "%s%s: gradient", name, nc);
        nbt_assert_close(nb_tensor_grad(leaf), nbt_ref(g_ref, name, "grad0"), 0, 0, what);
        if (!noncontig && nb_tensor_dtype(x) == NB_FLOAT64 && nb_tensor_numel(out) > 0) {
            snprintf(what, sizeof what, "%s: finite differences", name);
            /* piecewise linear with values 1/8 apart: a large step is exact, and keeps the
             * rounding of the 2000-term weighted sum out of the difference quotient */
            nbt_gradcheck(apply, &c, &in, 1, 1e-3, 1e-9, 1e-9, what);
        }
    }
    nb_scope_end(s);
}

static void test_reference(void **state)
{
    char **names;
    int n = nbt_case_names(g_ref, &names);
    assert_true(n > 30);
    for (int i = 0; i < n; i++) {
        run_case(names[i], false);
        run_case(names[i], true);
    }
    nbt_free_names(names, n);
}

static int cmp_asc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Many lines (above the grain: parallel) sorted along dim 0 and 1 against qsort; topk against
 * the sorted prefix; the indices gather the values back. */
static void test_many_lines(void **state)
{
    nb_scope *s = nb_scope_begin();
    enum { R = 400, C = 300 };
    int64_t shape[2] = {R, C};
    nb_tensor *x = NBT_CHECK(nb_randn(shape, 2, NULL));
    const float *xd = nb_tensor_data_ptr(x);
    float *want = malloc(sizeof(float) * R * C);
    assert_non_null(want);
    memcpy(want, xd, sizeof(float) * R * C);
    for (int r = 0; r < R; r++) qsort(want + r * C, C, sizeof(float), cmp_asc);
    nb_tensor *wt = NBT_CHECK(nb_tensor_from_data(want, shape, 2, NULL)), *idx;
    nb_tensor *v = NBT_CHECK(nb_sort(x, 1, false, &idx));
    nbt_assert_close(v, wt, 0, 0, "sort of many lines");
    nbt_assert_close(NBT_CHECK(nb_gather(x, 1, idx)), wt, 0, 0, "sort: indices gather the values");
    nb_tensor *xt = NBT_CHECK(nb_t(x)); /* [C, R] strided, sorted along dim 0 */
    v = NBT_CHECK(nb_sort(xt, 0, false, NULL));
    nbt_assert_close(v, NBT_CHECK(nb_t(wt)), 0, 0, "sort along dim 0, strided");
    for (int k = 1; k <= C; k += 37) { /* small k: the selection buffer; large k: a full sort */
        nb_tensor *tk = NBT_CHECK(nb_topk(x, k, 1, false, true, &idx));
        nbt_assert_close(tk, NBT_CHECK(nb_narrow(wt, 1, 0, k)), 0, 0, "topk smallest vs sort");
        nbt_assert_close(NBT_CHECK(nb_gather(x, 1, idx)), tk, 0, 0, "topk: indices gather the values");
        tk = NBT_CHECK(nb_topk(xt, k, 0, true, false, NULL));
        nb_tensor *desc = NBT_CHECK(nb_sort(xt, 0, true, NULL));
        nbt_assert_close(tk, NBT_CHECK(nb_narrow(desc, 0, 0, k)), 0, 0, "topk largest vs sort descending");
    }
    free(want);
    nb_scope_end(s);
}

/* Every supported dtype sorts; bool, uint8 and int32 against hand-computed orders. */
static void test_dtypes(void **state)
{
    nb_scope *s = nb_scope_begin();
    int64_t n = 6;
    nb_tensor_params p = nb_tensor_params_default();
    bool bv[6] = {true, false, true, false, false, true};
    int64_t bidx[6] = {1, 3, 4, 0, 2, 5};
    p.dtype = NB_BOOL;
    nb_tensor *b = NBT_CHECK(nb_tensor_from_data(bv, &n, 1, &p)), *idx;
    NBT_CHECK(nb_sort(b, 0, false, &idx));
    p.dtype = NB_INT64;
    nbt_assert_close(idx, NBT_CHECK(nb_tensor_from_data(bidx, &n, 1, &p)), 0, 0, "bool sort indices");
    int32_t iv[6] = {5, -3, 5, 100000, -3, 0}, isorted[6] = {100000, 5, 5, 0, -3, -3};
    int64_t iidx[6] = {3, 0, 2, 5, 1, 4};
    p.dtype = NB_INT32;
    nb_tensor *it = NBT_CHECK(nb_tensor_from_data(iv, &n, 1, &p));
    nb_tensor *sv = NBT_CHECK(nb_sort(it, 0, true, &idx));
    assert_int_equal(nb_tensor_dtype(sv), NB_INT32);
    nbt_assert_close(sv, NBT_CHECK(nb_tensor_from_data(isorted, &n, 1, &p)), 0, 0, "int32 sort");
    p.dtype = NB_INT64;
    nbt_assert_close(idx, NBT_CHECK(nb_tensor_from_data(iidx, &n, 1, &p)), 0, 0, "int32 sort indices (stable)");
    uint8_t uv[6] = {200, 3, 255, 0, 3, 7}, utop[2] = {0, 3};
    int64_t two = 2;
    p.dtype = NB_UINT8;
    nb_tensor *u = NBT_CHECK(nb_tensor_from_data(uv, &n, 1, &p));
    nbt_assert_close(NBT_CHECK(nb_topk(u, 2, 0, false, true, NULL)), NBT_CHECK(nb_tensor_from_data(utop, &two, 1, &p)),
                     0, 0, "uint8 topk");
    nb_scope_end(s);
}

static void test_errors(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *x = NBT_CHECK(nb_arange(0, 5, 1, NULL)), *idx = (nb_tensor *)1;
    NBT_FAILS(nb_topk(x, 6, 0, true, true, &idx) == NULL, NB_ERR_INVALID_ARG, "topk", "k (6)", "dim 0", "size 5", NULL);
    assert_null(idx);
    NBT_FAILS(nb_topk(x, -1, 0, true, true, NULL) == NULL, NB_ERR_INVALID_ARG, "topk", "-1", NULL);
    NBT_FAILS(nb_topk(x, 1, 1, true, true, NULL) == NULL, NB_ERR_INVALID_ARG, "topk", "dim 1", "tensor of 1 dims",
              NULL);
    NBT_FAILS(nb_sort(x, 2, false, NULL) == NULL, NB_ERR_INVALID_ARG, "sort", "dim 2", "tensor of 1 dims", NULL);
    NBT_FAILS(nb_sort(NULL, 0, false, &idx) == NULL, NB_ERR_INVALID_ARG, "sort", NULL);
    assert_null(idx);
    NBT_FAILS(nb_topk(NULL, 1, 0, true, true, NULL) == NULL, NB_ERR_INVALID_ARG, "topk", NULL);
    /* a 0-dim tensor sorts as itself */
    nb_tensor *sc = NBT_CHECK(nb_scalar_tensor(3, NULL));
    nb_tensor *v = NBT_CHECK(nb_sort(sc, 0, false, &idx));
    assert_int_equal(nb_tensor_ndim(v), 0);
    assert_int_equal(nb_tensor_ndim(idx), 0);
    nb_scope_end(s);
}

static int load(void **state)
{
    g_ref = nbt_load_ref("sort");
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
        cmocka_unit_test(test_reference), cmocka_unit_test(test_many_lines), cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_errors),
    };
    return NBT_RUN_GROUP(tests, load, unload);
}
