/* cat, stack, split, split_with_sizes, chunk: PyTorch's values (tests/ref/cases_join.py) on
 * contiguous and non-contiguous inputs, gradients against PyTorch and finite differences, the
 * output-array conventions of the splits, and every error path. */
#include <stdlib.h>
#include <string.h>

#include "nbtest.h"

#define MAX_IN 8

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

typedef struct jcase {
    bool stack;
    int64_t dim;
} jcase;

static nb_tensor *apply(nb_tensor *const *in, int n, void *vctx)
{
    const jcase *c = vctx;
    return c->stack ? nb_stack(in, n, c->dim) : nb_cat(in, n, c->dim);
}

static void run_join(const char *name, bool noncontig)
{
    nb_scope *s = nb_scope_begin();
    jcase c = {.stack = !strncmp(name, "stack/", 6), .dim = ref_int(name, "dim")};
    nb_tensor *in[MAX_IN], *leaves[MAX_IN];
    int n = 0;
    for (; n < MAX_IN; n++) {
        char key[16];
        snprintf(key, sizeof key, "in%d", n);
        if (!(in[n] = nbt_ref(g_ref, name, key))) break;
    }
    nb_tensor *gout = nbt_ref(g_ref, name, "gout"), *want = nbt_ref(g_ref, name, "out");
    for (int i = 0; i < n; i++) {
        bool fl = nb_dtype_is_floating(nb_tensor_dtype(in[i]));
        leaves[i] = gout && fl ? nbt_leaf(in[i]) : in[i];
        in[i] = noncontig ? strided(leaves[i]) : leaves[i];
    }
    double rtol = nb_tensor_dtype(want) == NB_FLOAT32 ? 1e-6 : 0;
    char what[256];
    snprintf(what, sizeof what, "%s%s: forward", name, noncontig ? " (non-contiguous)" : "");
    nb_tensor *out = NBT_CHECK(apply(in, n, &c));
    nbt_assert_close(out, want, rtol, 0, what);
    assert_int_equal(nb_tensor_dtype(out), nb_tensor_dtype(want));
    if (gout) {
        if (!c.stack) assert_string_equal(nb_tensor_grad_fn_name(out), "CatBackward0");
        NBT_OK(nb_backward(out, gout, NB_BACKWARD_DEFAULT));
        for (int i = 0, k = 0; i < n; i++) {
            if (!nb_tensor_requires_grad(leaves[i])) continue;
            char key[16];
            snprintf(key, sizeof key, "grad%d", k++);
            snprintf(what, sizeof what, "%s%s: gradient of input %d", name, noncontig ? " (non-contiguous)" : "", i);
            nbt_assert_close(nb_tensor_grad(leaves[i]), nbt_ref(g_ref, name, key), 0, 0, what);
        }
        bool all64 = true; /* finite differences need float64 inputs */
        for (int i = 0; i < n; i++) all64 = all64 && nb_tensor_dtype(in[i]) == NB_FLOAT64;
        if (!noncontig && all64) {
            snprintf(what, sizeof what, "%s: finite differences", name);
            nbt_gradcheck(apply, &c, in, n, 1e-6, 1e-8, 1e-6, what);
        }
    }
    nb_scope_end(s);
}

/* The pieces of a split (views of t) against PyTorch's. */
static void run_split(const char *name, bool noncontig)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *x = nbt_ref(g_ref, name, "in0");
    if (noncontig) x = strided(x);
    int64_t dim = ref_int(name, "dim"), count = ref_int(name, "count");
    nb_tensor *pieces[16];
    int n;
    if (!strncmp(name, "split/", 6)) {
        n = nb_split(x, ref_int(name, "size"), dim, pieces, 16);
        assert_int_equal(nb_split(x, ref_int(name, "size"), dim, NULL, 0), count);
    } else if (!strncmp(name, "chunk/", 6)) {
        n = nb_chunk(x, ref_int(name, "chunks"), dim, pieces, 16);
    } else {
        nb_tensor *st = nbt_ref(g_ref, name, "sizes");
        int64_t sizes[16];
        int ns = (int)nb_tensor_numel(st);
        NBT_OK(nb_tensor_read(st, sizes, (size_t)ns * sizeof *sizes));
        n = nb_split_with_sizes(x, sizes, ns, dim, pieces, 16);
    }
    assert_int_equal(n, count);
    for (int i = 0; i < n; i++) {
        char key[16], what[256];
        snprintf(key, sizeof key, "out%d", i);
        snprintf(what, sizeof what, "%s%s: piece %d", name, noncontig ? " (non-contiguous)" : "", i);
        nbt_assert_close(pieces[i], nbt_ref(g_ref, name, key), 0, 0, what);
        if (nb_tensor_numel(pieces[i]) > 0) { /* a view: its first element lies in x's storage */
            const char *p = nb_tensor_data_ptr(pieces[i]), *b = nb_tensor_data_ptr(x);
            assert_true(p >= b && p < b + nb_tensor_numel(x) * 16);
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
        bool join = !strncmp(names[i], "cat/", 4) || !strncmp(names[i], "stack/", 6);
        for (int nc = 0; nc < 2; nc++) {
            if (join) run_join(names[i], nc);
            else run_split(names[i], nc);
        }
    }
    nbt_free_names(names, n);
}

/* Reverses the pieces of a split of in[0] and joins them again (differentiable through views). */
static nb_tensor *split_reverse(nb_tensor *const *in, int n, void *ctx)
{
    nb_tensor *p[8], *r[8];
    int k = *(const int *)ctx ? nb_chunk(in[0], 3, 1, p, 8) : nb_split(in[0], 2, 1, p, 8);
    if (k < 0) return NULL;
    for (int i = 0; i < k; i++) r[i] = p[k - 1 - i];
    return nb_cat(r, k, 1);
}

static void test_split_grad(void **state)
{
    nb_scope *s = nb_scope_begin();
    int64_t shape[2] = {3, 7};
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_FLOAT64;
    nb_tensor *x = NBT_CHECK(nb_randn(shape, 2, &p));
    for (int chunk = 0; chunk < 2; chunk++) {
        nbt_gradcheck(split_reverse, &chunk, &x, 1, 1e-6, 1e-8, 1e-6, chunk ? "chunk" : "split");
        nb_tensor *nc = nbt_noncontig(x);
        nbt_gradcheck(split_reverse, &chunk, &nc, 1, 1e-6, 1e-8, 1e-6, chunk ? "chunk strided" : "split strided");
    }
    nb_scope_end(s);
}

/* Output-array conventions: cap 0 counts, a smaller cap fills what fits, failures clear out. */
static void test_split_out(void **state)
{
    nb_scope *s = nb_scope_begin();
    int64_t shape[1] = {10};
    nb_tensor *x = NBT_CHECK(nb_arange(0, 10, 1, NULL));
    nb_tensor *p[4] = {x, x, x, x};
    assert_int_equal(nb_split(x, 3, 0, NULL, 0), 4);
    assert_int_equal(nb_split(x, 3, 0, p, 2), 4);
    assert_non_null(p[0]);
    assert_non_null(p[1]);
    assert_ptr_equal(p[2], x); /* beyond cap: untouched */
    assert_int_equal(nb_tensor_numel(p[1]), 3);
    assert_int_equal(nb_chunk(x, 4, 0, p, 4), 4); /* ceil(10/4) = 3: 3, 3, 3, 1 */
    assert_int_equal(nb_tensor_numel(p[3]), 1);
    assert_int_equal(nb_chunk(x, 6, 0, NULL, 0), 5); /* size 2: five pieces, fewer than asked */
    assert_int_equal(nb_split(x, 0, 0, p, 4), -1);
    for (int i = 0; i < 4; i++) assert_null(p[i]);
    (void)shape;
    nb_scope_end(s);
}

/* cat of only 1-D empty tensors is an empty 1-D tensor; an empty 2-D input joins normally. */
static void test_cat_edges(void **state)
{
    nb_scope *s = nb_scope_begin();
    int64_t zero = 0, shape[2] = {2, 3};
    nb_tensor *e = NBT_CHECK(nb_zeros(&zero, 1, NULL));
    nb_tensor *r = NBT_CHECK(nb_cat((nb_tensor *[]){e, e}, 2, 0));
    assert_int_equal(nb_tensor_ndim(r), 1);
    assert_int_equal(nb_tensor_numel(r), 0);
    nb_tensor *m = NBT_CHECK(nb_ones(shape, 2, NULL));
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_FLOAT64;
    nb_tensor *e64 = NBT_CHECK(nb_zeros(&zero, 1, &p));
    r = NBT_CHECK(nb_cat((nb_tensor *[]){e64, m, e64}, 3, 1)); /* skipped, but promotes */
    assert_int_equal(nb_tensor_dtype(r), NB_FLOAT64);
    assert_int_equal(nb_tensor_size(r, 1), 3);
    /* grad mode off: no history */
    nb_tensor *l = nbt_leaf(m);
    bool prev = nb_set_grad_enabled(false);
    r = NBT_CHECK(nb_cat((nb_tensor *[]){l, l}, 2, 0));
    nb_set_grad_enabled(prev);
    assert_false(nb_tensor_requires_grad(r));
    /* the same tensor twice: both gradients accumulate */
    r = NBT_CHECK(nb_stack((nb_tensor *[]){l, l, m}, 3, 0));
    NBT_OK(nb_backward(r, NBT_CHECK(nb_ones_like(r)), NB_BACKWARD_DEFAULT));
    nbt_assert_close(nb_tensor_grad(l), NBT_CHECK(nb_full(shape, 2, 2.0, NULL)), 0, 0, "stack of one leaf twice");
    nb_scope_end(s);
}

static void test_errors(void **state)
{
    nb_scope *s = nb_scope_begin();
    int64_t s23[2] = {2, 3}, s24[2] = {2, 4}, s231[3] = {2, 3, 1}, n5 = 5;
    nb_tensor *a = NBT_CHECK(nb_zeros(s23, 2, NULL)), *b = NBT_CHECK(nb_zeros(s24, 2, NULL));
    nb_tensor *c = NBT_CHECK(nb_zeros(s231, 3, NULL)), *sc = NBT_CHECK(nb_scalar_tensor(1, NULL));
    NBT_FAILS(nb_cat((nb_tensor *[]){a, b}, 2, 0) == NULL, NB_ERR_SHAPE, "cat", "dim 0", "[2, 3]", "[2, 4]", NULL);
    NBT_FAILS(nb_cat((nb_tensor *[]){a, c}, 2, 0) == NULL, NB_ERR_SHAPE, "cat", "number of dims", "[2, 3]",
              "[2, 3, 1]", NULL);
    NBT_FAILS(nb_cat((nb_tensor *[]){a, sc}, 2, 0) == NULL, NB_ERR_SHAPE, "cat", "zero-dimensional", "position 1",
              NULL);
    NBT_FAILS(nb_cat(NULL, 0, 0) == NULL, NB_ERR_INVALID_ARG, "cat", "non-empty", NULL);
    NBT_FAILS(nb_cat((nb_tensor *[]){a, NULL}, 2, 0) == NULL, NB_ERR_INVALID_ARG, "cat", "tensor argument 1 is NULL",
              NULL);
    NBT_FAILS(nb_cat((nb_tensor *[]){a, a}, 2, 2) == NULL, NB_ERR_INVALID_ARG, "cat", "dim 2", "tensor of 2 dims",
              NULL);
    NBT_FAILS(nb_stack((nb_tensor *[]){a, b}, 2, 0) == NULL, NB_ERR_SHAPE,
              "stack: expects each tensor to be equal size, but got [2, 3] at entry 0 and [2, 4] at entry 1", NULL);
    NBT_FAILS(nb_stack((nb_tensor *[]){a, a}, 2, 3) == NULL, NB_ERR_INVALID_ARG, "stack", "dim 3", "tensor of 3 dims",
              NULL);
    NBT_FAILS(nb_stack(NULL, 0, 0) == NULL, NB_ERR_INVALID_ARG, "stack", "non-empty", "got 0", NULL);
    nb_tensor *p[4];
    nb_tensor *x = NBT_CHECK(nb_zeros(&n5, 1, NULL));
    NBT_FAILS(nb_split(x, 0, 0, p, 4) < 0, NB_ERR_INVALID_ARG, "split", "0", "size 5", NULL);
    NBT_FAILS(nb_split(x, -2, 0, p, 4) < 0, NB_ERR_INVALID_ARG, "split", "-2", NULL);
    NBT_FAILS(nb_split(sc, 1, 0, p, 4) < 0, NB_ERR_SHAPE, "split", "1-dimensional", NULL);
    NBT_FAILS(nb_split(x, 1, 1, p, 4) < 0, NB_ERR_INVALID_ARG, "split", "dim 1", "tensor of 1 dims", NULL);
    NBT_FAILS(nb_split(NULL, 1, 0, p, 4) < 0, NB_ERR_INVALID_ARG, "split", "NULL tensor", NULL);
    int64_t sizes[2] = {2, 2}, negs[2] = {6, -1};
    NBT_FAILS(nb_split_with_sizes(x, sizes, 2, 0, p, 4) < 0, NB_ERR_SHAPE, "split_with_sizes", "[2, 2]", "4",
              "size 5", NULL);
    NBT_FAILS(nb_split_with_sizes(x, negs, 2, 0, p, 4) < 0, NB_ERR_INVALID_ARG, "split_with_sizes", "-1", NULL);
    NBT_FAILS(nb_chunk(x, 0, 0, p, 4) < 0, NB_ERR_INVALID_ARG, "chunk", "greater than 0", NULL);
    NBT_FAILS(nb_chunk(x, 2, 0, NULL, 3) < 0, NB_ERR_INVALID_ARG, "chunk", "bad output array", "cap 3", NULL);
    nb_scope_end(s);
}

static int load(void **state)
{
    g_ref = nbt_load_ref("join");
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
        cmocka_unit_test(test_reference), cmocka_unit_test(test_split_grad), cmocka_unit_test(test_split_out),
        cmocka_unit_test(test_cat_edges), cmocka_unit_test(test_errors),
    };
    return NBT_RUN_GROUP(tests, load, unload);
}
