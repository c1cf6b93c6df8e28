/* The autograd engine: accumulation, retain_graph, no-grad, detach, leaves, version counters,
 * in-place ops on views, and memory across steps. Expected gradients are hand-computed. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "nbtest.h"

static const nb_tensor_params F64 = {NB_FLOAT64, {NB_DEVICE_CPU, 0}, false, NULL};

static nb_tensor *leaf(const double *v, const int64_t *shape, int nd)
{
    nb_tensor_params p = F64;
    p.requires_grad = true;
    return NBT_CHECK(nb_tensor_from_data(v, shape, nd, &p));
}

static void assert_grad(const nb_tensor *t, const double *want, int64_t n, const char *what)
{
    nb_tensor *g = NBT_CHECK(nb_tensor_grad(t));
    nb_tensor *w = NBT_CHECK(nb_tensor_from_data(want, nb_tensor_shape(g), nb_tensor_ndim(g), &F64));
    assert_int_equal(nb_tensor_numel(g), n);
    nbt_assert_close(g, w, 1e-12, 1e-12, what);
}

static void test_chain_and_accumulation(void **state)
{
    nb_scope *s = nb_scope_begin();
    /* y = sum(x * x + 3 x) ; dy/dx = 2x + 3 */
    nb_tensor *x = leaf((double[]){1, -2, 0.5}, (int64_t[]){3}, 1);
    nb_tensor *y = NBT_CHECK(nb_sum(nb_add(nb_mul(x, x), nb_mul_scalar(x, 3)), NULL, 0, false));
    assert_string_equal(nb_tensor_grad_fn_name(y), "SumBackward0");
    assert_true(nb_tensor_is_leaf(x) && !nb_tensor_is_leaf(y));
    NBT_OK(nb_backward(y, NULL, NB_RETAIN_GRAPH));
    assert_grad(x, (double[]){5, -1, 4}, 3, "first backward");
    /* a second backward with the graph retained accumulates */
    NBT_OK(nb_backward(y, NULL, NB_BACKWARD_DEFAULT));
    assert_grad(x, (double[]){10, -2, 8}, 3, "accumulated");
    /* the graph was freed: a third backward is an error */
    NBT_FAILS(nb_backward(y, NULL, NB_BACKWARD_DEFAULT) != NB_OK, NB_ERR_AUTOGRAD, "second time", "NB_RETAIN_GRAPH", NULL);
    NBT_OK(nb_tensor_set_grad(x, NULL));
    assert_null(nb_tensor_grad(x));
    nb_scope_end(s);
}

static void test_diamond_and_explicit_grad(void **state)
{
    nb_scope *s = nb_scope_begin();
    /* a = 2x; b = a * a; c = a + b; backward with grad g: dc/dx = g * (2 + 8x) */
    nb_tensor *x = leaf((double[]){1, 2}, (int64_t[]){2}, 1);
    nb_tensor *a = NBT_CHECK(nb_mul_scalar(x, 2));
    NBT_OK(nb_tensor_retain_grad(a));
    nb_tensor *c = NBT_CHECK(nb_add(a, nb_mul(a, a)));
    nb_tensor *g = NBT_CHECK(nb_tensor_from_data((double[]){1, 0.5}, (int64_t[]){2}, 1, &F64));
    NBT_FAILS(nb_backward(c, NULL, 0) != NB_OK, NB_ERR_SHAPE, "implicitly created only for one-element", "[2]", NULL);
    NBT_OK(nb_backward(c, g, 0));
    assert_grad(x, (double[]){10, 0.5 * 18}, 2, "diamond");
    assert_grad(a, (double[]){1 + 2 * 2, 0.5 * (1 + 2 * 4)}, 2, "retained non-leaf grad");
    nb_scope_end(s);
}

static void test_broadcast_gradient(void **state)
{
    nb_scope *s = nb_scope_begin();
    /* y = sum(m + b) with m [2,3], b [3]: db = 2 per element (summed over the broadcast dim) */
    nb_tensor *m = leaf((double[]){1, 2, 3, 4, 5, 6}, (int64_t[]){2, 3}, 2);
    nb_tensor *b = leaf((double[]){0, 0, 0}, (int64_t[]){3}, 1);
    nb_tensor *y = NBT_CHECK(nb_sum(nb_mul(nb_add(m, b), b), NULL, 0, false)); /* d/db = sum_i m_i + 2b */
    NBT_OK(nb_backward(y, NULL, 0));
    assert_grad(b, (double[]){5, 7, 9}, 3, "bias gradient over a broadcast dim");
    assert_grad(m, (double[]){0, 0, 0, 0, 0, 0}, 6, "m gradient");
    nb_scope_end(s);
}

static void test_no_grad_and_detach(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *x = leaf((double[]){1, 2}, (int64_t[]){2}, 1);
    bool prev = nb_set_grad_enabled(false);
    nb_tensor *y = NBT_CHECK(nb_mul(x, x));
    assert_false(nb_tensor_requires_grad(y));
    nb_set_grad_enabled(prev);
    assert_true(nb_is_grad_enabled());
    nb_tensor *d = NBT_CHECK(nb_detach(x));
    assert_false(nb_tensor_requires_grad(d));
    NBT_FAILS(nb_backward(d, NULL, 0) != NB_OK, NB_ERR_AUTOGRAD, "does not require grad", NULL);
    /* in-place on a leaf that requires grad is an error, allowed under no-grad */
    NBT_FAILS(nb_fill_(x, 0) != NB_OK, NB_ERR_AUTOGRAD, "leaf tensor that requires grad", NULL);
    NBT_FAILS(nb_fill_(NBT_CHECK(nb_select(x, 0, 0)), 0) != NB_OK, NB_ERR_AUTOGRAD, "view of a leaf", NULL);
    prev = nb_set_grad_enabled(false);
    NBT_OK(nb_fill_(x, 3));
    nb_set_grad_enabled(prev);
    /* requires_grad only on floating leaves */
    nb_tensor *i = NBT_CHECK(nb_zeros((int64_t[]){2}, 1, &(nb_tensor_params){NB_INT64, {NB_DEVICE_CPU, 0}, false, NULL}));
    NBT_FAILS(nb_tensor_set_requires_grad(i, true) != NB_OK, NB_ERR_DTYPE, "only floating", "int64", NULL);
    nb_tensor *z = NBT_CHECK(nb_mul_scalar(x, 2));
    NBT_FAILS(nb_tensor_set_requires_grad(z, false) != NB_OK, NB_ERR_AUTOGRAD, "leaf", NULL);
    nb_scope_end(s);
}

static void test_version_counter(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *x = leaf((double[]){1, 2}, (int64_t[]){2}, 1);
    nb_tensor *y = NBT_CHECK(nb_mul_scalar(x, 1));
    nb_tensor *z = NBT_CHECK(nb_mul(y, y)); /* saves y */
    NBT_OK(nb_add_scalar_(y, 1));           /* y changed: z's saved y is stale */
    NBT_FAILS(nb_backward(nb_sum(z, NULL, 0, false), NULL, 0) != NB_OK, NB_ERR_AUTOGRAD,
              "modified by an in-place operation", "mul", NULL);
    nb_scope_end(s);
}

static void test_inplace_history(void **state)
{
    nb_scope *s = nb_scope_begin();
    /* y = 2x; y *= 3 (in place); loss = sum(y * y) = sum(36 x^2): dx = 72 x */
    nb_tensor *x = leaf((double[]){1, -1, 2}, (int64_t[]){3}, 1);
    nb_tensor *y = NBT_CHECK(nb_mul_scalar(x, 2));
    NBT_OK(nb_mul_scalar_(y, 3));
    NBT_OK(nb_backward(nb_sum(nb_mul(y, y), NULL, 0, false), NULL, 0));
    assert_grad(x, (double[]){72, -72, 144}, 3, "in-place on a non-leaf");
    /* in place on a view of a non-leaf: y = x * 1; y[1:3] *= 5; loss = sum(y) -> dx = [1, 5, 5] */
    nb_tensor *x2 = leaf((double[]){1, 2, 3}, (int64_t[]){3}, 1);
    nb_tensor *y2 = NBT_CHECK(nb_mul_scalar(x2, 1));
    nb_tensor *v = NBT_CHECK(nb_narrow(y2, 0, 1, 2));
    NBT_OK(nb_mul_scalar_(v, 5));
    assert_string_equal(nb_tensor_grad_fn_name(y2), "CopySlicesBackward0");
    NBT_OK(nb_backward(nb_sum(y2, NULL, 0, false), NULL, 0));
    assert_grad(x2, (double[]){1, 5, 5}, 3, "in-place on a view: through the base");
    /* copy_ into a view: the overwritten region gets no gradient, the source does */
    nb_tensor *x3 = leaf((double[]){1, 2, 3, 4}, (int64_t[]){4}, 1);
    nb_tensor *src = leaf((double[]){7, 8}, (int64_t[]){2}, 1);
    nb_tensor *y3 = NBT_CHECK(nb_mul_scalar(x3, 2));
    NBT_OK(nb_copy_(NBT_CHECK(nb_narrow(y3, 0, 0, 2)), src));
    nb_tensor *w = NBT_CHECK(nb_tensor_from_data((double[]){1, 2, 3, 4}, (int64_t[]){4}, 1, &F64));
    NBT_OK(nb_backward(nb_sum(nb_mul(y3, w), NULL, 0, false), NULL, 0));
    assert_grad(x3, (double[]){0, 0, 6, 8}, 4, "copy_ into a view: overwritten region");
    assert_grad(src, (double[]){1, 2}, 2, "copy_ into a view: source");
    /* a view taken before an in-place change of its base sees the new history */
    nb_tensor *x4 = leaf((double[]){1, 2}, (int64_t[]){2}, 1);
    nb_tensor *y4 = NBT_CHECK(nb_mul_scalar(x4, 1));
    nb_tensor *v4 = NBT_CHECK(nb_select(y4, 0, 1));
    NBT_OK(nb_mul_scalar_(y4, 10));
    NBT_OK(nb_backward(v4, NULL, 0));
    assert_grad(x4, (double[]){0, 10}, 2, "stale view refreshed from its base");
    nb_scope_end(s);
}

/* A leaf's first gradient is the rule's fresh result, taken without a copy when nobody else holds
 * it; a gradient that another leaf, a node or the caller can see is copied, so no two grads share
 * memory and the caller's tensor is never the leaf's grad. */
static void test_first_grad_ownership(void **state)
{
    nb_scope *s = nb_scope_begin();
    /* y = 3x: the rule's output becomes x.grad; no copy kernel runs in backward */
    nb_tensor *x = leaf((double[]){1, 2, 3}, (int64_t[]){3}, 1);
    nb_tensor *y = NBT_CHECK(nb_sum(nb_mul_scalar(x, 3), NULL, 0, false));
    NBT_OK(nb_profiler_start(NB_PROFILE_HOST));
    NBT_OK(nb_backward(y, NULL, 0));
    nb_profiler_stop();
    assert_grad(x, (double[]){3, 3, 3}, 3, "3x");
    assert_int_equal(nbt_profiled_calls("copy"), 0);
    /* y = a + b: both leaves get the same upstream gradient; each must own its own */
    nb_tensor *a = leaf((double[]){1, 2}, (int64_t[]){2}, 1), *b = leaf((double[]){3, 4}, (int64_t[]){2}, 1);
    nb_tensor *z = NBT_CHECK(nb_mul_scalar(nb_add(a, b), 2));
    NBT_OK(nb_backward(z, NBT_CHECK(nb_tensor_from_data((double[]){1, -1}, (int64_t[]){2}, 1, &F64)), 0));
    assert_ptr_not_equal(nb_tensor_data_ptr(nb_tensor_grad(a)), nb_tensor_data_ptr(nb_tensor_grad(b)));
    NBT_OK(nb_mul_scalar_(nb_tensor_grad(a), 10));
    assert_grad(a, (double[]){20, -20}, 2, "a's grad, scaled in place");
    assert_grad(b, (double[]){2, -2}, 2, "b's grad, untouched by a's");
    /* backward on a leaf with the caller's gradient: the grad is a copy of it */
    nb_tensor *w = leaf((double[]){5, 6}, (int64_t[]){2}, 1);
    nb_tensor *g = NBT_CHECK(nb_tensor_from_data((double[]){0.5, 0.25}, (int64_t[]){2}, 1, &F64));
    NBT_OK(nb_backward(w, g, 0));
    NBT_OK(nb_mul_scalar_(g, 4));
    assert_grad(w, (double[]){0.5, 0.25}, 2, "leaf root's grad, caller's tensor changed after");
    /* a stolen first grad still accumulates in place on the next backward */
    nb_tensor *y2 = NBT_CHECK(nb_sum(nb_mul_scalar(x, 3), NULL, 0, false));
    NBT_OK(nb_backward(y2, NULL, 0));
    assert_grad(x, (double[]){6, 6, 6}, 3, "accumulated onto a stolen grad");
    nb_scope_end(s);
}

/* 100000 chained ops on a thread with a 512 KB stack: backward through the chain, then the
 * chain dropped with its last tensor. Releasing a graph recursively took several MB of stack
 * there (a 300000-op chain crashed on an 8 MB main thread); it is a loop now. */
static void *long_chain(void *arg)
{
    (void)arg;
    nb_tensor_params p = F64;
    p.requires_grad = true;
    nb_tensor *x = nb_ones((int64_t[]){1}, 1, &p);
    nb_tensor *y = x ? nb_tensor_retain(x) : NULL;
    for (int i = 0; y && i < 100000; i++) {
        nb_tensor *z = nb_mul_scalar(y, i % 2 ? 2.0 : 0.5);
        nb_tensor_free(y);
        y = z;
    }
    double g = 0;
    bool ok = y && nb_backward(y, NULL, NB_RETAIN_GRAPH) == NB_OK;
    nb_tensor *gx = ok ? nb_tensor_grad(x) : NULL; /* a new reference: no scope is open here */
    ok = gx && nb_item(gx, &g) == NB_OK;
    nb_tensor_free(gx);
    nb_tensor_free(y); /* the whole chain goes here */
    ok = ok && g == 1.0;
    nb_tensor_free(x);
    return ok ? arg : NULL;
}

static void test_long_graph_release(void **state)
{
    pthread_attr_t a;
    assert_int_equal(pthread_attr_init(&a), 0);
    assert_int_equal(pthread_attr_setstacksize(&a, 512 * 1024), 0);
    pthread_t t;
    int token = 1;
    assert_int_equal(pthread_create(&t, &a, long_chain, &token), 0);
    void *r = NULL;
    assert_int_equal(pthread_join(t, &r), 0);
    pthread_attr_destroy(&a);
    assert_ptr_equal(r, &token);
}

static void test_memory_does_not_grow(void **state)
{
    nb_tensor_params p = F64;
    p.requires_grad = true;
    nb_tensor *w = NBT_CHECK(nb_ones((int64_t[]){256, 256}, 2, &p));
    nb_memory_stats st;
    size_t first = 0;
    for (int step = 0; step < 20; step++) {
        nb_scope *s = nb_scope_begin();
        nb_tensor *y = NBT_CHECK(nb_sum(nb_mul(nb_mul(w, w), w), NULL, 0, false));
        NBT_OK(nb_backward(y, NULL, 0));
        nb_scope_end(s);
        NBT_OK(nb_tensor_set_grad(w, NULL));
        NBT_OK(nb_memory_stats_get(nb_cpu(), &st));
        if (step == 1) first = st.allocated;
        if (step > 1) assert_true(st.allocated == first);
    }
    nb_tensor_free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_and_accumulation), cmocka_unit_test(test_diamond_and_explicit_grad),
        cmocka_unit_test(test_broadcast_gradient),     cmocka_unit_test(test_no_grad_and_detach),
        cmocka_unit_test(test_version_counter),        cmocka_unit_test(test_inplace_history),
        cmocka_unit_test(test_memory_does_not_grow),     cmocka_unit_test(test_first_grad_ownership),
        cmocka_unit_test(test_long_graph_release),
    };
    return NBT_RUN(tests);
}
