/* The CUDA index kernels against the CPU's results: index_select, gather, scatter (tensor and
 * scalar), scatter_add and index_add with repeated indices, masked_fill, one_hot, embedding with
 * its backward, cross entropy with its backward (targets kept on the device), and the
 * out-of-range errors. Exits 77 (ctest:
 * Skipped) on a machine without a GPU. */
#include <math.h>
#include <stdio.h>

#include "nbtest.h"
#include "nabla/cuda.h"


static nb_tensor *randn(const int64_t *shape, int nd)
{
    return NBT_CHECK(nb_randn(shape, nd, NULL));
}

static nb_tensor *randint(int64_t hi, const int64_t *shape, int nd, nb_dtype dt)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = dt;
    return NBT_CHECK(nb_randint(0, hi, shape, nd, &p));
}

static void test_index_ops(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t sx[3] = {6, 9, 5}, si[1] = {12}, sg[3] = {6, 4, 5};
    nb_tensor *x = randn(sx, 3), *xd = nbt_to_cuda(x);
    for (int k = 0; k < 2; k++) {
        nb_dtype it = k ? NB_INT32 : NB_INT64;
        nb_tensor *i1 = randint(9, si, 1, it), *ig = randint(9, sg, 3, it);
        nbt_assert_close_host(NBT_CHECK(nb_index_select(xd, 1, nbt_to_cuda(i1))), NBT_CHECK(nb_index_select(x, 1, i1)), 0, "index_select");
        nbt_assert_close_host(NBT_CHECK(nb_index_select(NBT_CHECK(nb_transpose(xd, 0, 2)), 1, nbt_to_cuda(i1))),
                 NBT_CHECK(nb_index_select(NBT_CHECK(nb_transpose(x, 0, 2)), 1, i1)), 0, "index_select strided");
        nbt_assert_close_host(NBT_CHECK(nb_gather(xd, 1, nbt_to_cuda(ig))), NBT_CHECK(nb_gather(x, 1, ig)), 0, "gather");
        nb_tensor *src = randn(sg, 3);
        /* scatter with repeated indices keeps one of the written values: compare only where
         * every write agrees, i.e. scatter a constant-per-position source */
        nb_tensor *ones = NBT_CHECK(nb_ones_like(src));
        nbt_assert_close_host(NBT_CHECK(nb_scatter(xd, 1, nbt_to_cuda(ig), nbt_to_cuda(ones))), NBT_CHECK(nb_scatter(x, 1, ig, ones)), 0,
                 "scatter");
        nbt_assert_close_host(NBT_CHECK(nb_scatter_add(xd, 1, nbt_to_cuda(ig), nbt_to_cuda(src))), NBT_CHECK(nb_scatter_add(x, 1, ig, src)), 1e-6,
                 "scatter_add");
    }
    nb_tensor *mask = NBT_CHECK(nb_gt_scalar(x, 0.5));
    nbt_assert_close_host(NBT_CHECK(nb_masked_fill(xd, nbt_to_cuda(mask), -7)), NBT_CHECK(nb_masked_fill(x, mask, -7)), 0, "masked_fill");
    int64_t so[2] = {3, 4};
    nb_tensor *io = randint(6, so, 2, NB_INT64);
    nbt_assert_close_host(NBT_CHECK(nb_one_hot(nbt_to_cuda(io), 6)), NBT_CHECK(nb_one_hot(io, 6)), 0, "one_hot");
    /* errors name the op, the value, the dim and its size */
    int64_t sb[1] = {2};
    nb_tensor_params pd = nb_tensor_params_default();
    pd.dtype = NB_INT64;
    pd.device = NBT_CUDA0;
    nb_tensor *badi = NBT_CHECK(nb_full(sb, 1, 9, &pd));
    NBT_FAILS(nb_index_select(xd, 1, badi) == NULL, NB_ERR_INVALID_ARG, "index_select", "index 9", "dim 1", "size 9",
              NULL);
    NBT_FAILS(nb_one_hot(badi, 4) == NULL, NB_ERR_INVALID_ARG, "one_hot", "index 9", "num_classes 4", NULL);
    nb_scope_end(s);
}

/* embedding and cross entropy forward and backward (index_add, gather, scatter underneath) */
static void test_embedding_and_loss(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t sw[2] = {50, 8}, st[2] = {7, 11}, sl[2] = {40, 13}, sy[1] = {40};
    nb_tensor *w = randn(sw, 2), *tok = randint(50, st, 2, NB_INT64);
    nb_tensor *wh = nbt_leaf(w), *wd = NBT_CHECK(nb_tensor_retain(nbt_to_cuda(w)));
    NBT_OK(nb_tensor_set_requires_grad(wd, true));
    nb_tensor *eh = NBT_CHECK(nb_embedding(wh, tok)), *ed = NBT_CHECK(nb_embedding(wd, nbt_to_cuda(tok)));
    nbt_assert_close_host(ed, eh, 0, "embedding");
    nb_tensor *g = randn(nb_tensor_shape(eh), 3);
    NBT_OK(nb_backward(eh, g, 0));
    NBT_OK(nb_backward(ed, nbt_to_cuda(g), 0));
    nbt_assert_close_host(nb_tensor_grad(wd), nb_tensor_grad(wh), 1e-6, "embedding backward");
    nb_tensor_free(wd);
    nb_tensor *lg = randn(sl, 2), *y = randint(13, sy, 1, NB_INT64);
    nb_tensor *lh = nbt_leaf(lg), *ld = NBT_CHECK(nb_tensor_retain(nbt_to_cuda(lg)));
    NBT_OK(nb_tensor_set_requires_grad(ld, true));
    nb_cross_entropy_params cp = nb_cross_entropy_params_default();
    cp.label_smoothing = 0.1;
    nb_tensor *ch = NBT_CHECK(nb_cross_entropy(lh, y, &cp)), *cd = NBT_CHECK(nb_cross_entropy(ld, nbt_to_cuda(y), &cp));
    nbt_assert_close_host(cd, ch, 1e-6, "cross_entropy");
    NBT_OK(nb_backward(ch, NULL, 0));
    NBT_OK(nb_backward(cd, NULL, 0));
    nbt_assert_close_host(nb_tensor_grad(ld), nb_tensor_grad(lh), 1e-5, "cross_entropy backward");
    nb_tensor_free(ld);
    nb_scope_end(s);
}

/* Class-index losses on CUDA keep their targets on the device (nothing read back): ignore_index,
 * class weights, int32 targets, the three reductions and label smoothing against the CPU's host
 * path, values and gradients; a bad target is an error naming the loss, the value and the class
 * count; the backward's trusted scatter_add gives the checked op's result. */
static void test_loss_targets_on_device(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t sl[2] = {40, 13}, sy[1] = {40}, sw[1] = {13};
    nb_tensor *lg = randn(sl, 2), *y = randint(13, sy, 1, NB_INT64);
    nb_tensor *ignored = NBT_CHECK(nb_lt_scalar(NBT_CHECK(nb_rand(sy, 1, NULL)), 0.25));
    y = NBT_CHECK(nb_where(ignored, NBT_CHECK(nb_full_like(y, -100)), y));
    nb_tensor *w = NBT_CHECK(nb_add_scalar(NBT_CHECK(nb_rand(sw, 1, NULL)), 0.5));
    const nb_reduction red[3] = {NB_REDUCE_MEAN, NB_REDUCE_SUM, NB_REDUCE_NONE};
    for (int k = 0; k < 12; k++) {
        nb_cross_entropy_params ph = nb_cross_entropy_params_default(), pd = ph;
        ph.reduction = pd.reduction = red[k % 3];
        if (k & 4) ph.weight = w, pd.weight = nbt_to_cuda(w);
        if (k & 8) ph.label_smoothing = pd.label_smoothing = 0.1;
        nb_tensor *yt = (k / 3) % 2 ? NBT_CHECK(nb_to_dtype(y, NB_INT32)) : y;
        nb_tensor *lh = nbt_leaf(lg), *ld = NBT_CHECK(nb_tensor_retain(nbt_to_cuda(lg)));
        NBT_OK(nb_tensor_set_requires_grad(ld, true));
        nb_tensor *ch = NBT_CHECK(nb_cross_entropy(lh, yt, &ph)), *cd = NBT_CHECK(nb_cross_entropy(ld, nbt_to_cuda(yt), &pd));
        nbt_assert_close_host(cd, ch, 1e-5, "cross_entropy, targets on the device");
        nb_tensor *g = NBT_CHECK(nb_ones_like(ch));
        NBT_OK(nb_backward(ch, g, 0));
        NBT_OK(nb_backward(cd, nbt_to_cuda(g), 0));
        nbt_assert_close_host(nb_tensor_grad(ld), nb_tensor_grad(lh), 1e-5, "cross_entropy backward, targets on the device");
        nb_tensor_free(ld);
    }
    nb_tensor_params pd = nb_tensor_params_default();
    pd.dtype = NB_INT64;
    pd.device = NBT_CUDA0;
    nb_tensor *bad = NBT_CHECK(nb_full(sy, 1, 13, &pd));
    NBT_FAILS(nb_cross_entropy(nbt_to_cuda(lg), bad, NULL) == NULL, NB_ERR_INVALID_ARG, "cross_entropy: ", "index 13",
              "size 13", NULL);
    NBT_FAILS(nb_nll_loss(nbt_to_cuda(lg), NBT_CHECK(nb_full(sy, 1, -2, &pd)), NULL) == NULL, NB_ERR_INVALID_ARG,
              "nll_loss: ", "index -2", NULL);
    nb_scope_end(s);
}

/* sort and topk: stable, NaN the largest, along every dim, against the CPU */
static void test_sort(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t sh[3] = {4, 37, 5};
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_FLOAT64;
    /* few distinct values (ties) and some NaNs */
    nb_tensor *x = NBT_CHECK(nb_to_dtype(NBT_CHECK(nb_randint(-3, 4, sh, 3, NULL)), NB_FLOAT64));
    nb_tensor *nan = NBT_CHECK(nb_full(sh, 3, NAN, &p));
    x = NBT_CHECK(nb_where(NBT_CHECK(nb_gt_scalar(NBT_CHECK(nb_rand(sh, 3, &p)), 0.9)), nan, x));
    nb_tensor *no_nan = NBT_CHECK(nb_where(NBT_CHECK(nb_ne(x, x)), NBT_CHECK(nb_zeros_like(x)), x));
    const nb_dtype dts[] = {NB_FLOAT64, NB_FLOAT32, NB_INT64, NB_INT32};
    for (int k = 0; k < 4; k++) {
        nb_tensor *xt = NBT_CHECK(nb_to_dtype(k < 2 ? x : no_nan, dts[k]));
        for (int64_t dim = 0; dim < 3; dim++)
            for (int desc = 0; desc < 2; desc++) {
                nb_tensor *ih, *id;
                nbt_assert_close_host(NBT_CHECK(nb_sort(nbt_to_cuda(xt), dim, desc, &id)), NBT_CHECK(nb_sort(xt, dim, desc, &ih)), 0, "sort");
                nbt_assert_close_host(id, ih, 0, "sort indices (stable)");
                nbt_assert_close_host(NBT_CHECK(nb_topk(nbt_to_cuda(xt), 3, dim, desc, true, &id)), NBT_CHECK(nb_topk(xt, 3, dim, desc, true, &ih)),
                         0, "topk");
            }
    }
    nb_scope_end(s);
}

int main(void)
{
    if (nbt_cuda_missing()) return 77;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_index_ops), cmocka_unit_test(test_embedding_and_loss),
                                       cmocka_unit_test(test_loss_targets_on_device), cmocka_unit_test(test_sort)};
    return NBT_RUN(tests);
}
