/* The CUDA reductions and matrix products against the CPU's results: every reduction over
 * several dim sets (strided input included), max/min with their positions, NaN handling; bmm and
 * matmul with transposed, strided and broadcast operands in float32/float64, the TF32 switch;
 * softmax, log_softmax (and backward), cumsum and where; random numbers equal to the CPU's for a
 * seed; and
 * autograd of a small network (linear, relu, mse) on the device equal to the CPU's gradients.
 * Exits 77 (ctest: Skipped) on a machine without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "nbtest.h"
#include "nabla/cuda.h"


static nb_tensor *randn(const int64_t *shape, int nd, nb_dtype dt)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = dt;
    return NBT_CHECK(nb_randn(shape, nd, &p));
}

static void test_reductions(void **state)
{
    (void)state;
    int64_t shape[3] = {6, 7, 300};
    const int64_t dsets[][3] = {{0, 0, 0}, {2, 0, 0}, {0, 2, 0}, {1, 0, 0}, {0, 1, 2}};
    const int nds[] = {1, 1, 2, 1, 3};
    const nb_dtype dts[] = {NB_FLOAT32, NB_FLOAT64, NB_INT64};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
        nb_scope *s = nb_scope_begin();
        nb_tensor *x = NBT_CHECK(nb_to_dtype(NBT_CHECK(nb_mul_scalar(randn(shape, 3, NB_FLOAT64), 3)), dts[d]));
        nb_tensor *xs = NBT_CHECK(nb_transpose(x, 0, 2)), *xd = nbt_to_cuda(x), *xsd = NBT_CHECK(nb_transpose(xd, 0, 2));
        bool fl = dts[d] != NB_INT64;
        double rtol = dts[d] == NB_FLOAT32 ? 1e-5 : 1e-12;
        for (int k = 0; k < 5; k++) {
            const int64_t *dm = dsets[k];
            int nd = nds[k];
            char w[64];
            snprintf(w, sizeof w, "%s set %d", nb_dtype_name(dts[d]), k);
            nbt_assert_close_host(NBT_CHECK(nb_sum(xd, dm, nd, false)), NBT_CHECK(nb_sum(x, dm, nd, false)), rtol, w);
            nbt_assert_close_host(NBT_CHECK(nb_sum(xsd, dm, nd, true)), NBT_CHECK(nb_sum(xs, dm, nd, true)), rtol, w);
            nbt_assert_close_host(NBT_CHECK(nb_all(xd, dm, nd, false)), NBT_CHECK(nb_all(x, dm, nd, false)), 0, w);
            nbt_assert_close_host(NBT_CHECK(nb_any(xsd, dm, nd, false)), NBT_CHECK(nb_any(xs, dm, nd, false)), 0, w);
            if (!fl) continue;
            nbt_assert_close_host(NBT_CHECK(nb_mean(xd, dm, nd, false)), NBT_CHECK(nb_mean(x, dm, nd, false)), rtol, w);
            nbt_assert_close_host(NBT_CHECK(nb_var(xsd, dm, nd, 1, false)), NBT_CHECK(nb_var(xs, dm, nd, 1, false)), rtol, w);
            nbt_assert_close_host(NBT_CHECK(nb_std(xd, dm, nd, 0, true)), NBT_CHECK(nb_std(x, dm, nd, 0, true)), rtol, w);
            nbt_assert_close_host(NBT_CHECK(nb_logsumexp(xd, dm, nd, false)), NBT_CHECK(nb_logsumexp(x, dm, nd, false)), rtol, w);
            nbt_assert_close_host(NBT_CHECK(nb_norm(xd, 2, dm, nd, false)), NBT_CHECK(nb_norm(x, 2, dm, nd, false)), rtol, w);
            nbt_assert_close_host(NBT_CHECK(nb_norm(xsd, INFINITY, dm, nd, false)), NBT_CHECK(nb_norm(xs, INFINITY, dm, nd, false)), 0, w);
            nbt_assert_close_host(NBT_CHECK(nb_norm(xd, 3, dm, nd, false)), NBT_CHECK(nb_norm(x, 3, dm, nd, false)), rtol * 10, w);
        }
        for (int64_t dim = 0; dim < 3; dim++) {
            nb_tensor *ih, *id;
            nbt_assert_close_host(NBT_CHECK(nb_max_dim(xsd, dim, false, &id)), NBT_CHECK(nb_max_dim(xs, dim, false, &ih)), 0, "max");
            nbt_assert_close_host(id, ih, 0, "max indices");
            nbt_assert_close_host(NBT_CHECK(nb_min_dim(xd, dim, true, &id)), NBT_CHECK(nb_min_dim(x, dim, true, &ih)), 0, "min");
            nbt_assert_close_host(id, ih, 0, "min indices");
            nbt_assert_close_host(NBT_CHECK(nb_argmax(xd, dim, false)), NBT_CHECK(nb_argmax(x, dim, false)), 0, "argmax");
        }
        nbt_assert_close_host(NBT_CHECK(nb_max(xd)), NBT_CHECK(nb_max(x)), 0, "max all");
        nb_scope_end(s);
    }
    /* NaN wins max, at its first position; ties give the first position */
    nb_scope *s = nb_scope_begin();
    double v[6] = {1, 5, NAN, 5, NAN, 0};
    int64_t n6[1] = {6};
    nb_tensor *h, *ih, *id;
    nb_tensor_params p64 = nb_tensor_params_default();
    p64.dtype = NB_FLOAT64;
    h = NBT_CHECK(nb_tensor_from_data(v, n6, 1, &p64));
    nbt_assert_close_host(NBT_CHECK(nb_max_dim(nbt_to_cuda(h), 0, false, &id)), NBT_CHECK(nb_max_dim(h, 0, false, &ih)), 0, "nan max");
    nbt_assert_close_host(id, ih, 0, "nan max index");
    nb_scope_end(s);
}

/* A device reduction against the CPU's for x on the host and xd (the same values and layout) on
 * the device. */
#define CMP(dev_call, host_call, tol, what) nbt_assert_close_host(NBT_CHECK(dev_call), NBT_CHECK(host_call), tol, what)

/* Every op of the split paths (reduce.cu: row, col) over the dims dm of x (float). */
static void cmp_float_ops(nb_tensor *x, nb_tensor *xd, const int64_t *dm, int nd, double rtol, const char *w)
{
    CMP(nb_sum(xd, dm, nd, false), nb_sum(x, dm, nd, false), rtol, w);
    CMP(nb_mean(xd, dm, nd, true), nb_mean(x, dm, nd, true), rtol, w);
    CMP(nb_var(xd, dm, nd, 1, false), nb_var(x, dm, nd, 1, false), rtol, w);
    CMP(nb_std(xd, dm, nd, 0, false), nb_std(x, dm, nd, 0, false), rtol, w);
    CMP(nb_logsumexp(xd, dm, nd, false), nb_logsumexp(x, dm, nd, false), rtol, w);
    const double ps[] = {0, 1, 2, 3, INFINITY, -INFINITY};
    nb_tensor *r = NBT_CHECK(nb_relu(x)), *rd = NBT_CHECK(nb_relu(xd)); /* zeros for p = 0 */
    for (int k = 0; k < 6; k++) {
        CMP(nb_norm(xd, ps[k], dm, nd, false), nb_norm(x, ps[k], dm, nd, false), ps[k] == 3 ? rtol * 10 : rtol, w);
        CMP(nb_norm(rd, ps[k], dm, nd, false), nb_norm(r, ps[k], dm, nd, false), ps[k] == 3 ? rtol * 10 : rtol, w);
    }
    CMP(nb_all(rd, dm, nd, false), nb_all(r, dm, nd, false), 0, w);
    CMP(nb_any(rd, dm, nd, false), nb_any(r, dm, nd, false), 0, w);
    CMP(nb_all(NBT_CHECK(nb_ne_scalar(xd, 100)), dm, nd, false), nb_all(NBT_CHECK(nb_ne_scalar(x, 100)), dm, nd, false), 0, w);
}

/* max, min and their positions along dim (NB_DIM_NONE: the whole tensor) */
static void cmp_extremes(nb_tensor *x, nb_tensor *xd, int64_t dim, const char *w)
{
    if (dim == NB_DIM_NONE) {
        CMP(nb_max(xd), nb_max(x), 0, w);
        CMP(nb_min(xd), nb_min(x), 0, w);
    } else {
        nb_tensor *ih, *id;
        CMP(nb_max_dim(xd, dim, false, &id), nb_max_dim(x, dim, false, &ih), 0, w);
        nbt_assert_close_host(id, ih, 0, w);
        CMP(nb_min_dim(xd, dim, true, &id), nb_min_dim(x, dim, true, &ih), 0, w);
        nbt_assert_close_host(id, ih, 0, w);
    }
    CMP(nb_argmax(xd, dim, false), nb_argmax(x, dim, false), 0, w);
    CMP(nb_argmin(xd, dim, false), nb_argmin(x, dim, false), 0, w);
}

/* The split and column paths of reduce.cu: few outputs over many elements (full reductions, 3
 * rows of 400000), many long rows ([300, 2500] over dim 1, aligned or not), reductions over
 * leading dims ([5000, 777] over dim 0, [400000, 3]), transposed and misaligned inputs, int64 sums and extremes with many ties, NaN at two positions. */
static void test_reductions_large(void **state)
{
    (void)state;
    const int64_t all2[2] = {0, 1}, d0[1] = {0}, d1[1] = {1};
    const nb_dtype fts[] = {NB_FLOAT32, NB_FLOAT64};
    for (int t = 0; t < 2; t++) {
        nb_scope *s = nb_scope_begin();
        double rtol = fts[t] == NB_FLOAT32 ? 1e-6 : 1e-12;
        char w[96];
        int64_t sb[2] = {1100, 1000}, sc[2] = {5000, 777}, st[2] = {777, 5000}, sr[2] = {3, 400000}, sk[2] = {400000, 3};
        nb_tensor *b = NBT_CHECK(nb_mul_scalar(randn(sb, 2, fts[t]), 3)), *bd = nbt_to_cuda(b);
        snprintf(w, sizeof w, "%s [1100, 1000] full", nb_dtype_name(fts[t]));
        cmp_float_ops(b, bd, NULL, 0, rtol, w);
        cmp_extremes(b, bd, NB_DIM_NONE, w);
        /* contiguous but one element off 16-byte alignment */
        int64_t nflat[1] = {1100 * 1000};
        nb_tensor *f = NBT_CHECK(nb_slice(NBT_CHECK(nb_reshape(b, nflat, 1)), 0, 1, nflat[0], 1));
        nb_tensor *fd = NBT_CHECK(nb_slice(NBT_CHECK(nb_reshape(bd, nflat, 1)), 0, 1, nflat[0], 1));
        snprintf(w, sizeof w, "%s misaligned full", nb_dtype_name(fts[t]));
        cmp_float_ops(f, fd, NULL, 0, rtol, w);
        cmp_extremes(f, fd, 0, w);

        nb_tensor *c = randn(sc, 2, fts[t]), *cd = nbt_to_cuda(c);
        snprintf(w, sizeof w, "%s [5000, 777] over dim 0", nb_dtype_name(fts[t]));
        cmp_float_ops(c, cd, d0, 1, rtol, w);
        cmp_extremes(c, cd, 0, w);
        snprintf(w, sizeof w, "%s [5000, 777] over dim 1", nb_dtype_name(fts[t]));
        cmp_float_ops(c, cd, d1, 1, rtol, w);
        /* a transposed input: [5000, 777] with strides [1, 5000] */
        nb_tensor *tr = randn(st, 2, fts[t]);
        nb_tensor *x = NBT_CHECK(nb_transpose(tr, 0, 1)), *xd = NBT_CHECK(nb_transpose(nbt_to_cuda(tr), 0, 1));
        for (int k = 0; k < 3; k++) {
            snprintf(w, sizeof w, "%s transposed, dims %d", nb_dtype_name(fts[t]), k);
            cmp_float_ops(x, xd, k == 2 ? all2 : k ? d1 : d0, k == 2 ? 2 : 1, rtol, w);
            if (k < 2) cmp_extremes(x, xd, k, w);
        }
        /* 3 long rows, read directly and through a transposed view; 3 long columns */
        nb_tensor *r = randn(sr, 2, fts[t]), *rd = nbt_to_cuda(r);
        snprintf(w, sizeof w, "%s [3, 400000] over dim 1", nb_dtype_name(fts[t]));
        cmp_float_ops(r, rd, d1, 1, rtol, w);
        cmp_extremes(r, rd, 1, w);
        snprintf(w, sizeof w, "%s [3, 400000] transposed over dim 0", nb_dtype_name(fts[t]));
        cmp_float_ops(NBT_CHECK(nb_transpose(r, 0, 1)), NBT_CHECK(nb_transpose(rd, 0, 1)), d0, 1, rtol, w);
        /* many long contiguous rows (a block per row): aligned, and one element off in every row */
        int64_t sl[2] = {300, 2501};
        nb_tensor *l = randn(sl, 2, fts[t]), *ld = nbt_to_cuda(l);
        for (int off = 0; off < 2; off++) {
            nb_tensor *lv = NBT_CHECK(nb_slice(l, 1, off, 2500 + off, 1));
            nb_tensor *ldv = NBT_CHECK(nb_slice(ld, 1, off, 2500 + off, 1));
            snprintf(w, sizeof w, "%s [300, 2500] over dim 1, offset %d", nb_dtype_name(fts[t]), off);
            cmp_float_ops(lv, ldv, d1, 1, rtol, w);
            cmp_extremes(lv, ldv, 1, w);
        }
        nb_tensor *k3 = randn(sk, 2, fts[t]), *k3d = nbt_to_cuda(k3);
        snprintf(w, sizeof w, "%s [400000, 3] over dim 0", nb_dtype_name(fts[t]));
        cmp_float_ops(k3, k3d, d0, 1, rtol, w);
        cmp_extremes(k3, k3d, 0, w);
        nb_scope_end(s);
    }
    /* int64: exact sums; extremes with many ties (the first position wins across chunks) */
    nb_scope *s = nb_scope_begin();
    nb_tensor_params pi = nb_tensor_params_default();
    pi.dtype = NB_INT64;
    int64_t sb[2] = {1100, 1000}, sc[2] = {5000, 777};
    nb_tensor *ib = NBT_CHECK(nb_randint(-1000000, 1000000, sb, 2, &pi)), *ibd = nbt_to_cuda(ib);
    CMP(nb_sum(ibd, NULL, 0, false), nb_sum(ib, NULL, 0, false), 0, "int64 full sum");
    CMP(nb_sum(ibd, d0, 1, false), nb_sum(ib, d0, 1, false), 0, "int64 sum over dim 0");
    nb_tensor *it = NBT_CHECK(nb_randint(-3, 3, sc, 2, &pi)), *itd = nbt_to_cuda(it);
    CMP(nb_sum(itd, d0, 1, true), nb_sum(it, d0, 1, true), 0, "int64 [5000, 777] sum over dim 0");
    cmp_extremes(it, itd, 0, "int64 ties over dim 0");
    cmp_extremes(it, itd, 1, "int64 ties over dim 1");
    cmp_extremes(it, itd, NB_DIM_NONE, "int64 ties full");
    int64_t sw[2] = {300, 2600};
    nb_tensor *iw = NBT_CHECK(nb_randint(-3, 3, sw, 2, &pi)), *iwd = nbt_to_cuda(iw);
    CMP(nb_sum(iwd, d1, 1, false), nb_sum(iw, d1, 1, false), 0, "int64 [300, 2600] sum over dim 1");
    cmp_extremes(iw, iwd, 1, "int64 ties over long rows");
    int64_t n1[1] = {5000 * 777};
    cmp_extremes(NBT_CHECK(nb_reshape(it, n1, 1)), NBT_CHECK(nb_reshape(itd, n1, 1)), 0, "int64 ties 1-D");
    /* NaN wins, at its first position, whichever chunk holds it */
    int64_t n = 1100 * 1000;
    double *v = malloc((size_t)n * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) v[i] = (double)((i * 7919) % 100003) - 50000.0;
    v[777777] = NAN;
    v[123457] = NAN;
    nb_tensor_params p64 = nb_tensor_params_default();
    p64.dtype = NB_FLOAT64;
    nb_tensor *h = NBT_CHECK(nb_tensor_from_data(v, sb, 2, &p64)), *hd = nbt_to_cuda(h);
    free(v);
    cmp_extremes(h, hd, NB_DIM_NONE, "nan full");
    cmp_extremes(h, hd, 0, "nan over dim 0");
    CMP(nb_sum(hd, NULL, 0, false), nb_sum(h, NULL, 0, false), 0, "nan sum");
    CMP(nb_norm(hd, INFINITY, NULL, 0, false), nb_norm(h, INFINITY, NULL, 0, false), 0, "nan inf-norm");
    CMP(nb_logsumexp(hd, d0, 1, false), nb_logsumexp(h, d0, 1, false), 1e-12, "nan logsumexp");
    nb_scope_end(s);
}

static void test_matmul(void **state)
{
    (void)state;
    const nb_dtype dts[] = {NB_FLOAT32, NB_FLOAT64};
    for (size_t d = 0; d < 2; d++) {
        nb_scope *s = nb_scope_begin();
        double rtol = dts[d] == NB_FLOAT32 ? 1e-4 : 1e-11;
        int64_t sa[3] = {3, 33, 17}, sb[3] = {3, 17, 40}, sbt[3] = {3, 40, 17}, sat[3] = {3, 17, 33};
        nb_tensor *a = randn(sa, 3, dts[d]), *b = randn(sb, 3, dts[d]);
        nb_tensor *at = NBT_CHECK(nb_transpose(randn(sat, 3, dts[d]), 1, 2));
        nb_tensor *bt = NBT_CHECK(nb_transpose(randn(sbt, 3, dts[d]), 1, 2));
        nbt_assert_close_host(NBT_CHECK(nb_bmm(nbt_to_cuda(a), nbt_to_cuda(b))), NBT_CHECK(nb_bmm(a, b)), rtol, "bmm");
        nbt_assert_close_host(NBT_CHECK(nb_bmm(nbt_to_cuda(NBT_CHECK(nb_contiguous(at))), nbt_to_cuda(b))), NBT_CHECK(nb_bmm(at, b)), rtol,
                 "bmm a contiguous copy");
        /* transposed operands stay transposed on the device */
        nb_tensor *atd = NBT_CHECK(nb_transpose(nbt_to_cuda(NBT_CHECK(nb_transpose(at, 1, 2))), 1, 2));
        nb_tensor *btd = NBT_CHECK(nb_transpose(nbt_to_cuda(NBT_CHECK(nb_transpose(bt, 1, 2))), 1, 2));
        nbt_assert_close_host(NBT_CHECK(nb_bmm(atd, btd)), NBT_CHECK(nb_bmm(at, bt)), rtol, "bmm transposed");
        /* a strided operand (every other column) and a broadcast one through matmul */
        int64_t sw[2] = {17, 80};
        nb_tensor *w = randn(sw, 2, dts[d]);
        nb_tensor *ws = NBT_CHECK(nb_slice(w, 1, 0, 80, 2)), *wsd = NBT_CHECK(nb_slice(nbt_to_cuda(w), 1, 0, 80, 2));
        nbt_assert_close_host(NBT_CHECK(nb_matmul(nbt_to_cuda(a), wsd)), NBT_CHECK(nb_matmul(a, ws)), rtol, "matmul strided");
        int64_t sv[1] = {17};
        nb_tensor *v = randn(sv, 1, dts[d]);
        nbt_assert_close_host(NBT_CHECK(nb_matmul(nbt_to_cuda(a), nbt_to_cuda(v))), NBT_CHECK(nb_matmul(a, v)), rtol, "matmul vector");
        nb_scope_end(s);
    }
    /* TF32: products of operands rounded to 10 bits of mantissa. Over 256-long sums of normal
     * values ||err|| / ||ref|| is about 3e-4 on TF32 and about 1e-7 on float32 (the products'
     * error grows with k; single elements near zero can be off by far more relative to themselves,
     * so the check is on norms). The switch must engage (an error far above float32's) on GPUs with
     * TF32 (compute capability 8.0 and later), and turn off again. */
    nb_scope *s = nb_scope_begin();
    int64_t sm[2] = {256, 256};
    nb_tensor *a = randn(sm, 2, NB_FLOAT32), *b = randn(sm, 2, NB_FLOAT32);
    nb_tensor *want = NBT_CHECK(nb_mm(NBT_CHECK(nb_to_dtype(a, NB_FLOAT64)), NBT_CHECK(nb_to_dtype(b, NB_FLOAT64))));
    nb_cuda_device_props props;
    NBT_OK(nb_cuda_get_device_properties(0, &props));
    nb_cuda_set_allow_tf32(true);
    assert_true(nb_cuda_get_allow_tf32());
    double e32 = nbt_rel_err_host(NBT_CHECK(nb_mm(nbt_to_cuda(a), nbt_to_cuda(b))), want);
    printf("tf32 mm: relative error %.3g\n", e32);
    assert_true(e32 < 2e-3);
    if (props.major >= 8) assert_true(e32 > 2e-5);
    nb_cuda_set_allow_tf32(false);
    double e = nbt_rel_err_host(NBT_CHECK(nb_mm(nbt_to_cuda(a), nbt_to_cuda(b))), want);
    printf("fp32 mm: relative error %.3g\n", e);
    assert_true(e < 2e-6);
    int64_t si[2] = {4, 4};
    nb_tensor_params pi = nb_tensor_params_default();
    pi.dtype = NB_INT64;
    pi.device = NBT_CUDA0;
    nb_tensor *ii = NBT_CHECK(nb_ones(si, 2, &pi));
    NBT_FAILS(nb_mm(ii, ii) == NULL, NB_ERR_DTYPE, "bmm", "int64", "CUDA", NULL);
    nb_scope_end(s);
}

/* softmax / log_softmax with their backward, cumsum, where: against the CPU */
static void test_lines_and_where(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t shape[3] = {5, 300, 7};
    for (int dt = 0; dt < 2; dt++) {
        nb_dtype t = dt ? NB_FLOAT64 : NB_FLOAT32;
        double rtol = dt ? 1e-12 : 1e-5;
        nb_tensor *x = randn(shape, 3, t), *g = randn(shape, 3, t);
        for (int64_t dim = 0; dim < 3; dim++) {
            nb_tensor *xh = nbt_leaf(x), *xd = NBT_CHECK(nb_tensor_retain(nbt_to_cuda(x)));
            NBT_OK(nb_tensor_set_requires_grad(xd, true));
            nb_tensor *yh = NBT_CHECK(nb_log_softmax(xh, dim)), *yd = NBT_CHECK(nb_log_softmax(xd, dim));
            nbt_assert_close_host(yd, yh, rtol, "log_softmax");
            nbt_assert_close_host(NBT_CHECK(nb_softmax(xd, dim)), NBT_CHECK(nb_softmax(xh, dim)), rtol, "softmax");
            NBT_OK(nb_backward(yh, g, 0));
            NBT_OK(nb_backward(yd, nbt_to_cuda(g), 0));
            nbt_assert_close_host(nb_tensor_grad(xd), nb_tensor_grad(xh), rtol, "log_softmax backward");
            nb_tensor_free(xd);
            nbt_assert_close_host(NBT_CHECK(nb_cumsum(nbt_to_cuda(x), dim)), NBT_CHECK(nb_cumsum(x, dim)), rtol, "cumsum");
        }
        /* contiguous lines (the shuffle-reduction variant): staged in shared memory (777) or
         * not (20000 float64 / float32 are over 48 KiB), both backward forms, a line with a NaN */
        const int64_t lines[2][2] = {{6, 777}, {3, 20000}};
        for (int k = 0; k < 2; k++) {
            nb_tensor *lx = randn(lines[k], 2, t), *lg = randn(lines[k], 2, t);
            double nan = NAN;
            nb_tensor *cell = NBT_CHECK(nb_narrow(NBT_CHECK(nb_narrow(lx, 0, 1, 1)), 1, 5, 1));
            NBT_OK(nb_fill_(cell, nan));
            for (int lf = 0; lf < 2; lf++) {
                nb_tensor *xh = nbt_leaf(lx), *xd = NBT_CHECK(nb_tensor_retain(nbt_to_cuda(lx)));
                NBT_OK(nb_tensor_set_requires_grad(xd, true));
                nb_tensor *yh = NBT_CHECK(lf ? nb_log_softmax(xh, 1) : nb_softmax(xh, 1));
                nb_tensor *yd = NBT_CHECK(lf ? nb_log_softmax(xd, 1) : nb_softmax(xd, 1));
                nbt_assert_close_host(yd, yh, rtol, lf ? "log_softmax, contiguous lines" : "softmax, contiguous lines");
                NBT_OK(nb_backward(yh, lg, 0));
                NBT_OK(nb_backward(yd, nbt_to_cuda(lg), 0));
                nbt_assert_close_host(nb_tensor_grad(xd), nb_tensor_grad(xh), rtol * 10,
                                      lf ? "log_softmax backward, contiguous lines" : "softmax backward, contiguous lines");
                nb_tensor_free(xd);
            }
        }
        nb_tensor *c = NBT_CHECK(nb_gt_scalar(x, 0.3));
        nbt_assert_close_host(NBT_CHECK(nb_where(nbt_to_cuda(c), nbt_to_cuda(x), nbt_to_cuda(g))), NBT_CHECK(nb_where(c, x, g)), 0, "where");
    }
    int64_t si[2] = {4, 9};
    nb_tensor_params pi = nb_tensor_params_default();
    pi.dtype = NB_INT32;
    nb_tensor *xi = NBT_CHECK(nb_randint(-5, 5, si, 2, &pi));
    nbt_assert_close_host(NBT_CHECK(nb_cumsum(nbt_to_cuda(xi), 1)), NBT_CHECK(nb_cumsum(xi, 1)), 0, "cumsum int32");
    nb_scope_end(s);
}

/* The same seed gives the same numbers on both devices (core/philox_impl.h's layout) */
static void test_random(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t shape[2] = {37, 53};
    const nb_dtype fts[] = {NB_FLOAT32, NB_FLOAT64};
    for (int k = 0; k < 2; k++) {
        nb_tensor_params ph = nb_tensor_params_default(), pd = ph;
        ph.dtype = pd.dtype = fts[k];
        pd.device = NBT_CUDA0;
        nb_manual_seed(7);
        nb_tensor *uh = NBT_CHECK(nb_rand(shape, 2, &ph)), *nh = NBT_CHECK(nb_randn(shape, 2, &ph));
        nb_manual_seed(7);
        nb_tensor *ud = NBT_CHECK(nb_rand(shape, 2, &pd)), *nd = NBT_CHECK(nb_randn(shape, 2, &pd));
        nbt_assert_close_host(ud, uh, 0, "rand: bit for bit");
        nbt_assert_close_host(nd, nh, fts[k] == NB_FLOAT32 ? 1e-5 : 1e-13, "randn: up to libm's last bits");
        nb_manual_seed(9);
        nb_tensor *bh = NBT_CHECK(nb_bernoulli(uh, NULL));
        nb_manual_seed(9);
        nbt_assert_close_host(NBT_CHECK(nb_bernoulli(ud, NULL)), bh, 0, "bernoulli");
    }
    nb_tensor_params pi = nb_tensor_params_default(), pid = pi;
    pi.dtype = pid.dtype = NB_INT64;
    pid.device = NBT_CUDA0;
    nb_manual_seed(3);
    nb_tensor *ih = NBT_CHECK(nb_randint(-1000, 1000, shape, 2, &pi));
    nb_manual_seed(3);
    nbt_assert_close_host(NBT_CHECK(nb_randint(-1000, 1000, shape, 2, &pid)), ih, 0, "randint");
    /* dropout draws the same mask on both devices (rand < 1 - p on the GPU, bernoulli here) */
    nb_tensor *xo = NBT_CHECK(nb_randn(shape, 2, NULL));
    nb_manual_seed(11);
    nb_tensor *dh = NBT_CHECK(nb_dropout(xo, 0.3, true, NULL));
    nb_manual_seed(11);
    nbt_assert_close_host(NBT_CHECK(nb_dropout(nbt_to_cuda(xo), 0.3, true, NULL)), dh, 0, "dropout");
    nb_tensor_params pf = nb_tensor_params_default();
    pf.device = NBT_CUDA0;
    nb_tensor *bad = NBT_CHECK(nb_full(shape, 2, 1.5, &pf));
    NBT_FAILS(nb_bernoulli(bad, NULL) == NULL, NB_ERR_INVALID_ARG, "bernoulli", "[0, 1]", NULL);
    nb_scope_end(s);
}

/* Linear -> relu -> linear -> mse: forward, loss and every gradient on the device equal the
 * CPU's. */
static void test_autograd_mlp(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t sx[2] = {64, 20}, s1[2] = {32, 20}, sb1[1] = {32}, s2[2] = {5, 32}, sb2[1] = {5}, sy[2] = {64, 5};
    nb_tensor *hp[6] = {randn(sx, 2, NB_FLOAT64), randn(s1, 2, NB_FLOAT64), randn(sb1, 1, NB_FLOAT64),
                        randn(s2, 2, NB_FLOAT64), randn(sb2, 1, NB_FLOAT64), randn(sy, 2, NB_FLOAT64)};
    nb_tensor *h[6], *d[6];
    for (int i = 0; i < 6; i++) {
        h[i] = nbt_leaf(hp[i]);
        d[i] = NBT_CHECK(nb_tensor_retain(nbt_to_cuda(hp[i])));
        NBT_OK(nb_tensor_set_requires_grad(d[i], true));
    }
    nb_tensor *lh = NBT_CHECK(nb_mse_loss(NBT_CHECK(nb_linear(NBT_CHECK(nb_relu(NBT_CHECK(nb_linear(h[0], h[1], h[2])))), h[3], h[4])), h[5], NB_REDUCE_MEAN));
    nb_tensor *ld = NBT_CHECK(nb_mse_loss(NBT_CHECK(nb_linear(NBT_CHECK(nb_relu(NBT_CHECK(nb_linear(d[0], d[1], d[2])))), d[3], d[4])), d[5], NB_REDUCE_MEAN));
    nbt_assert_close_host(ld, lh, 1e-12, "loss");
    NBT_OK(nb_backward(lh, NULL, 0));
    NBT_OK(nb_backward(ld, NULL, 0));
    for (int i = 0; i < 6; i++) {
        nbt_assert_close_host(nb_tensor_grad(d[i]), nb_tensor_grad(h[i]), 1e-11, "grad");
        nb_tensor_free(d[i]);
    }
    nb_scope_end(s);
}

int main(void)
{
    if (nbt_cuda_missing()) return 77;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_reductions), cmocka_unit_test(test_reductions_large),
                                       cmocka_unit_test(test_matmul),
                                       cmocka_unit_test(test_lines_and_where), cmocka_unit_test(test_random),
                                       cmocka_unit_test(test_autograd_mlp)};
    return NBT_RUN(tests);
}
