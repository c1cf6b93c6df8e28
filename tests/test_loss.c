/* Tests of the losses and dropout (nabla/loss.h): PyTorch's values and gradients
 * (tests/ref/cases_loss.py) on contiguous and non-contiguous inputs, finite differences in
 * float64, hand-computed values, dropout's mask statistics, scaling, seeding and gradient, and
 * every error path; the class losses' device-side targets (nn/loss_impl.h) against the host path.
 *
 * Tolerances: float32 rtol 1e-5 with atol 1e-6 (softmax - one-hot gradients cancel to values near
 * 0, where only an absolute bound is meaningful); float64 rtol 1e-10, atol 1e-12. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nbtest.h"
#include "nabla/loss.h" /* until nabla.h includes it */
#include "nn/loss_impl.h" /* nb__loss_device_targets */

/* ---- one reference case ---------------------------------------------------------------------- */

typedef struct lcase {
    char loss[8];              /* ce, nll, mse, bce */
    nb_tensor *weight, *pos_weight;
    nb_tensor *target;         /* the class targets of ce / nll, for finite differences */
    nb_reduction reduction;
    int64_t ignore_index;
    double smoothing;
} lcase;

static void read_case(const nb_tensor_map *m, const char *name, lcase *c)
{
    memset(c, 0, sizeof *c);
    size_t len = strcspn(name, "/");
    assert_true(len < sizeof c->loss);
    memcpy(c->loss, name, len);
    c->weight = nbt_ref(m, name, "weight");
    c->pos_weight = nbt_ref(m, name, "pos_weight");
    int64_t v = 1;
    NBT_OK(nb_item_int64(NBT_CHECK(nbt_ref(m, name, "reduction")), &v));
    c->reduction = (nb_reduction)v;
    c->ignore_index = -100;
    nb_tensor *t = nbt_ref(m, name, "ignore_index");
    if (t) NBT_OK(nb_item_int64(t, &c->ignore_index));
    t = nbt_ref(m, name, "smoothing");
    if (t) NBT_OK(nb_item(t, &c->smoothing));
}

static bool is(const lcase *c, const char *loss) { return strcmp(c->loss, loss) == 0; }

static nb_tensor *apply(const lcase *c, const nb_tensor *x, const nb_tensor *y)
{
    if (is(c, "ce")) {
        nb_cross_entropy_params p = nb_cross_entropy_params_default();
        p.weight = c->weight;
        p.ignore_index = c->ignore_index;
        p.reduction = c->reduction;
        p.label_smoothing = c->smoothing;
        return nb_cross_entropy(x, y, &p);
    }
    if (is(c, "nll")) {
        nb_nll_loss_params p = {c->weight, c->ignore_index, c->reduction};
        return nb_nll_loss(x, y, &p);
    }
    if (is(c, "mse")) return nb_mse_loss(x, y, c->reduction);
    if (is(c, "bce")) return nb_binary_cross_entropy_with_logits(x, y, c->weight, c->pos_weight, c->reduction);
    fail_msg("unknown loss %s", c->loss);
    return NULL;
}

/* Class losses differentiate the input only (the target is in the case); the others both. */
static nb_tensor *fd_fn(nb_tensor *const *in, int n, void *ctx)
{
    const lcase *c = ctx;
    return n == 1 ? apply(c, in[0], c->target) : apply(c, in[0], in[1]);
}

static void tolerances(nb_dtype dt, double *rtol, double *atol)
{
    *rtol = dt == NB_FLOAT32 ? 1e-5 : 1e-10;
    *atol = dt == NB_FLOAT32 ? 1e-6 : 1e-12;
}

static void check_grad(const nb_tensor *leaf, const nb_tensor *want, double rtol, double atol, const char *what)
{
    nb_tensor *g = nb_tensor_grad(leaf);
    if (!g) g = NBT_CHECK(nb_zeros_like(want)); /* no gradient reached it: zero */
    nbt_assert_close(g, want, rtol, atol, what);
}

static void run_case(const nb_tensor_map *m, const char *name, const lcase *c, bool noncontig)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *x0 = NBT_CHECK(nbt_ref(m, name, "in0")), *y0 = NBT_CHECK(nbt_ref(m, name, "in1"));
    nb_tensor *x = noncontig ? nbt_noncontig(x0) : NBT_CHECK(nb_clone(x0));
    nb_tensor *y = noncontig && nb_tensor_ndim(y0) > 0 ? nbt_noncontig(y0) : NBT_CHECK(nb_clone(y0));
    nb_tensor *want = NBT_CHECK(nbt_ref(m, name, "out")), *gout = NBT_CHECK(nbt_ref(m, name, "gout"));
    nb_tensor *g1 = nbt_ref(m, name, "grad1");
    NBT_OK(nb_tensor_set_requires_grad(x, true));
    if (g1) NBT_OK(nb_tensor_set_requires_grad(y, true));
    char what[300];
    snprintf(what, sizeof what, "%s (%s)", name, noncontig ? "non-contiguous" : "contiguous");
    nb_tensor *out = apply(c, x, y);
    if (!out) fail_msg("%s: %s", what, nb_last_error());
    if (nb_tensor_dtype(out) != nb_tensor_dtype(want)) fail_msg("%s: dtype %s", what, nb_dtype_name(nb_tensor_dtype(out)));
    double rtol, atol;
    tolerances(nb_tensor_dtype(want), &rtol, &atol);
    nbt_assert_close(out, want, rtol, atol, what);
    NBT_OK(nb_backward(out, gout, NB_BACKWARD_DEFAULT));
    snprintf(what, sizeof what, "%s input gradient (%s)", name, noncontig ? "non-contiguous" : "contiguous");
    check_grad(x, NBT_CHECK(nbt_ref(m, name, "grad0")), rtol, atol, what);
    if (g1) {
        snprintf(what, sizeof what, "%s target gradient (%s)", name, noncontig ? "non-contiguous" : "contiguous");
        check_grad(y, g1, rtol, atol, what);
    }
    nb_scope_end(s);
}

static void test_reference(void **state)
{
    (void)state;
    nb_tensor_map *m = nbt_load_ref("loss");
    char **names;
    int n = nbt_case_names(m, &names);
    assert_true(n > 300);
    int nfd = 0;
    for (int i = 0; i < n; i++) {
        nb_scope *s = nb_scope_begin();
        lcase c;
        read_case(m, names[i], &c);
        run_case(m, names[i], &c, false);
        run_case(m, names[i], &c, true);
        if (nbt_ref(m, names[i], "fd")) {
            nb_tensor *in[2] = {nbt_ref(m, names[i], "in0"), nbt_ref(m, names[i], "in1")};
            c.target = in[1];
            bool cls = is(&c, "ce") || is(&c, "nll");
            nbt_gradcheck(fd_fn, &c, in, cls ? 1 : 2, 1e-6, 1e-6, 1e-5, names[i]);
            nfd++;
        }
        nb_scope_end(s);
    }
    assert_true(nfd > 100);
    nbt_free_names(names, n);
    nb_tensor_map_free(m);
}

/* ---- hand-computed values -------------------------------------------------------------------- */

static nb_tensor *from(const void *data, const int64_t *shape, int nd, nb_dtype dt)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = dt;
    return NBT_CHECK(nb_tensor_from_data(data, shape, nd, &p));
}

static double item(const nb_tensor *t)
{
    double v;
    NBT_OK(nb_item(NBT_CHECK((nb_tensor *)t), &v));
    return v;
}

static void test_hand(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    /* equal logits over 4 classes: -log(1/4) per row, whatever the target */
    const double z[8] = {0, 0, 0, 0, 3, 3, 3, 3};
    const int64_t t2[2] = {1, 3}, ign[2] = {-100, 2};
    int64_t sh[2] = {2, 4}, n2 = 2;
    nb_tensor *x = from(z, sh, 2, NB_FLOAT64), *t = from(t2, &n2, 1, NB_INT64);
    assert_float_equal(item(nb_cross_entropy(x, t, NULL)), log(4.0), 1e-15);
    nb_cross_entropy_params p = nb_cross_entropy_params_default();
    p.reduction = NB_REDUCE_SUM;
    assert_float_equal(item(nb_cross_entropy(x, t, &p)), 2 * log(4.0), 1e-15);
    /* an ignored target drops out of the sum and of the mean's count */
    nb_tensor *ti = from(ign, &n2, 1, NB_INT64);
    assert_float_equal(item(nb_cross_entropy(x, ti, &p)), log(4.0), 1e-15);
    assert_float_equal(item(nb_cross_entropy(x, ti, NULL)), log(4.0), 1e-15);
    /* logits [0, log 3]: p = [1/4, 3/4]; target 1 gives log(4/3); smoothing 0.5 mixes in the
     * mean of -log p over classes: 0.5 log(4/3) + 0.25 (log 4 + log(4/3)) */
    const double z2[2] = {0, log(3.0)};
    int64_t c2 = 2;
    const int64_t one = 1;
    nb_tensor *x2 = from(z2, &c2, 1, NB_FLOAT64), *t0 = from(&one, NULL, 0, NB_INT64);
    assert_float_equal(item(nb_cross_entropy(x2, t0, NULL)), log(4.0 / 3), 1e-15);
    p = nb_cross_entropy_params_default();
    p.label_smoothing = 0.5;
    assert_float_equal(item(nb_cross_entropy(x2, t0, &p)), 0.5 * log(4.0 / 3) + 0.25 * (log(4.0) + log(4.0 / 3)),
                       1e-15);
    /* mse: ((1-0)^2 + (2-4)^2) / 2; bce of logit 0 is log 2 for any target */
    const float a[2] = {1, 2}, b[2] = {0, 4}, h[2] = {0.25f, 1};
    nb_tensor *fa = from(a, &n2, 1, NB_FLOAT32), *fb = from(b, &n2, 1, NB_FLOAT32);
    assert_float_equal(item(nb_mse_loss(fa, fb, NB_REDUCE_MEAN)), 2.5, 1e-7);
    assert_float_equal(item(nb_mse_loss(fa, fb, NB_REDUCE_SUM)), 5.0, 1e-7);
    nb_tensor *zl = NBT_CHECK(nb_zeros(&n2, 1, NULL));
    assert_float_equal(item(nb_binary_cross_entropy_with_logits(zl, from(h, &n2, 1, NB_FLOAT32), NULL, NULL,
                                                                NB_REDUCE_MEAN)),
                       log(2.0), 1e-7);
    /* int32 targets work like int64 ones */
    const int32_t t32[2] = {1, 3};
    p = nb_cross_entropy_params_default();
    assert_float_equal(item(nb_cross_entropy(x, from(t32, &n2, 1, NB_INT32), &p)), log(4.0), 1e-15);
    nb_scope_end(s);
}

/* ---- class-index targets on the device (nb__loss_device_targets) ----------------------------- */

/* The test's switch back off, also when an assertion left the test early. */
static int device_targets_off(void **state)
{
    (void)state;
    nb__loss_device_targets(false);
    return 0;
}

/* Input shapes: [6, 5] with targets [6]; [5] with a 0-dim target; [4, 5, 3] with targets [4, 3]. */
enum { K_ROWS, K_ONE, K_SPATIAL, K_COUNT };

/* The value and input gradient of c on x0 and t, with the switch as `device`; gout from a fixed
 * seed, so both paths get the same. */
static nb_tensor *loss_grad(const lcase *c, const nb_tensor *x0, const nb_tensor *t, bool device, nb_tensor **grad,
                            const char *what)
{
    nb_tensor *x = nbt_leaf(x0);
    nb__loss_device_targets(device);
    nb_tensor *out = apply(c, x, t);
    nb__loss_device_targets(false);
    if (!out) fail_msg("%s (%s path): %s", what, device ? "device" : "host", nb_last_error());
    nb_generator *g = nb_generator_create(11);
    nb_tensor_params p = {.dtype = nb_tensor_dtype(out), .generator = g};
    nb_tensor *gout = nb_randn(nb_tensor_shape(out), nb_tensor_ndim(out), &p);
    nb_generator_free(g);
    NBT_OK(nb_backward(out, NBT_CHECK(gout), NB_BACKWARD_DEFAULT));
    *grad = nb_tensor_grad(x);
    if (!*grad) *grad = NBT_CHECK(nb_zeros_like(x0));
    return out;
}

/* Host and device paths agree on c's value and input gradient; returns the device path's value. */
static nb_tensor *compare_paths(const lcase *c, const nb_tensor *x0, const nb_tensor *t, const char *what)
{
    double rtol, atol;
    tolerances(nb_tensor_dtype(x0), &rtol, &atol);
    nb_tensor *gh, *gd;
    nb_tensor *host = loss_grad(c, x0, t, false, &gh, what), *dev = loss_grad(c, x0, t, true, &gd, what);
    char msg[300];
    snprintf(msg, sizeof msg, "%s: device vs host value", what);
    nbt_assert_close(dev, host, rtol, atol, msg);
    snprintf(msg, sizeof msg, "%s: device vs host input gradient", what);
    nbt_assert_close(gd, gh, rtol, atol, msg);
    return dev;
}

/* Targets for kind k over C = 5 classes: (3 i + 1) mod 5 (classes 0..4, 3 among them), with every
 * third replaced by ignore_index when `ignored` (the single 0-dim target itself); `all`: every
 * target ignore_index. */
static nb_tensor *class_targets(int k, int64_t ignore_index, bool ignored, bool all, nb_dtype dt)
{
    int64_t v[12], shape[2] = {k == K_ROWS ? 6 : 4, 3};
    int nd = k == K_ONE ? 0 : k == K_ROWS ? 1 : 2, n = k == K_ONE ? 1 : k == K_ROWS ? 6 : 12;
    for (int i = 0; i < n; i++) {
        v[i] = k == K_ONE ? 2 : (3 * i + 1) % 5;
        if (all || (ignored && (k == K_ONE || i % 3 == 1))) v[i] = ignore_index;
    }
    return NBT_CHECK(nb_to_dtype(from(v, shape, nd, NB_INT64), dt));
}

static nb_tensor *class_input(int k, nb_dtype dt, bool log_probs)
{
    int64_t shapes[K_COUNT][3] = {{6, 5}, {5}, {4, 5, 3}};
    int nds[K_COUNT] = {2, 1, 3};
    nb_generator *g = nb_generator_create(5 + (uint64_t)k);
    nb_tensor_params p = {.dtype = dt, .generator = g};
    nb_tensor *x = NBT_CHECK(nb_randn(shapes[k], nds[k], &p));
    nb_generator_free(g);
    return log_probs ? NBT_CHECK(nb_log_softmax(x, k == K_ONE ? 0 : 1)) : x;
}

/* Every combination of loss, reduction, ignored targets (none; some with ignore_index -100; those
 * equal to ignore_index 3, a class), class weights, label smoothing, target and input dtypes and
 * input shapes: the device path gives the host path's values and gradients. */
static void test_device_targets(void **state)
{
    (void)state;
    const nb_reduction reds[3] = {NB_REDUCE_NONE, NB_REDUCE_MEAN, NB_REDUCE_SUM};
    const char *rname[3] = {"none", "mean", "sum"};
    const nb_dtype tdts[2] = {NB_INT64, NB_INT32}, xdts[2] = {NB_FLOAT64, NB_FLOAT32};
    int runs = 0;
    for (int loss = 0; loss < 2; loss++)
        for (int k = 0; k < K_COUNT; k++)
            for (int ig = 0; ig < 3; ig++)
                for (int wt = 0; wt < 2; wt++)
                    for (int sm = 0; sm < (loss == 0 ? 2 : 1); sm++)
                        for (int ty = 0; ty < 4; ty++)
                            for (int r = 0; r < 3; r++) {
                                nb_scope *s = nb_scope_begin();
                                nb_dtype xdt = xdts[ty / 2];
                                lcase c = {.reduction = reds[r], .ignore_index = ig == 2 ? 3 : -100,
                                           .smoothing = sm ? 0.2 : 0.0};
                                strcpy(c.loss, loss == 0 ? "ce" : "nll");
                                int64_t ncls = 5;
                                nb_tensor_params wp = {.dtype = xdt};
                                c.weight = wt ? NBT_CHECK(nb_add_scalar(nb_rand(&ncls, 1, &wp), 0.5)) : NULL;
                                nb_tensor *x = class_input(k, xdt, loss == 1);
                                nb_tensor *t = class_targets(k, c.ignore_index, ig == 1, false, tdts[ty % 2]);
                                char what[200];
                                snprintf(what, sizeof what, "%s kind %d ignore %d weight %d smoothing %g %s %s %s",
                                         c.loss, k, ig, wt, c.smoothing, nb_dtype_name(nb_tensor_dtype(t)),
                                         nb_dtype_name(xdt), rname[r]);
                                compare_paths(&c, x, t, what);
                                runs++;
                                nb_scope_end(s);
                            }
    assert_int_equal(runs, (2 + 1) * K_COUNT * 3 * 2 * 4 * 3); /* ce with 2 smoothings, nll with none */
    nb__loss_device_targets(false);
}

/* Every target ignored: PyTorch's mean is 0 / 0 = NaN (weighted too: no weight is summed), its sum
 * 0, its none all zeros, and the gradients zero; both paths give that. */
static void test_device_targets_all_ignored(void **state)
{
    (void)state;
    const nb_reduction reds[3] = {NB_REDUCE_NONE, NB_REDUCE_MEAN, NB_REDUCE_SUM};
    for (int loss = 0; loss < 2; loss++)
        for (int wt = 0; wt < 2; wt++)
            for (int sm = 0; sm < (loss == 0 ? 2 : 1); sm++)
                for (int r = 0; r < 3; r++) {
                    nb_scope *s = nb_scope_begin();
                    lcase c = {.reduction = reds[r], .ignore_index = -100, .smoothing = sm ? 0.3 : 0.0};
                    strcpy(c.loss, loss == 0 ? "ce" : "nll");
                    int64_t ncls = 5;
                    nb_tensor_params wp = {.dtype = NB_FLOAT64};
                    c.weight = wt ? NBT_CHECK(nb_add_scalar(nb_rand(&ncls, 1, &wp), 0.5)) : NULL;
                    nb_tensor *x = class_input(K_ROWS, NB_FLOAT64, loss == 1);
                    nb_tensor *t = class_targets(K_ROWS, -100, false, true, NB_INT64);
                    char what[120];
                    snprintf(what, sizeof what, "all ignored: %s weight %d smoothing %g reduction %d", c.loss, wt,
                             c.smoothing, r);
                    nb_tensor *v = compare_paths(&c, x, t, what), *g;
                    if (reds[r] == NB_REDUCE_MEAN) {
                        if (!isnan(item(v))) fail_msg("%s: %g, expected NaN", what, item(v));
                    } else {
                        nbt_assert_close(v, NBT_CHECK(nb_zeros_like(v)), 0, 0, what);
                    }
                    loss_grad(&c, x, t, true, &g, what);
                    nbt_assert_close(g, NBT_CHECK(nb_zeros_like(x)), 0, 0, what);
                    nb_scope_end(s);
                }
    nb__loss_device_targets(false);
}

/* ignore_index beyond 2^53 is matched exactly (int64_scalar): INT64_MAX - 1 ignores only itself,
 * not its float neighbour INT64_MAX; an int32 target never equals an ignore_index beyond int32. */
static void test_device_targets_large_ignore(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t n = 6;
    const int64_t big = INT64_MAX - 1, tv[6] = {1, big, 0, 4, big, 2};
    lcase c = {.loss = "ce", .reduction = NB_REDUCE_MEAN, .ignore_index = big};
    nb_tensor *x = class_input(K_ROWS, NB_FLOAT64, false);
    nb_tensor *v = compare_paths(&c, x, from(tv, &n, 1, NB_INT64), "ignore_index INT64_MAX - 1");
    const int64_t kept[4] = {1, 0, 4, 2}, rows[4] = {0, 2, 3, 5};
    int64_t n4 = 4;
    nb_tensor *xs = NBT_CHECK(nb_index_select(x, 0, from(rows, &n4, 1, NB_INT64)));
    nbt_assert_close(v, NBT_CHECK(nb_cross_entropy(xs, from(kept, &n4, 1, NB_INT64), NULL)), 1e-12, 1e-12,
                     "ignore_index INT64_MAX - 1: the mean over the 4 kept rows");
    c.ignore_index = INT64_C(1) << 40;
    compare_paths(&c, x, class_targets(K_ROWS, 0, false, false, NB_INT32), "int32 targets, ignore_index 2^40");
    nb__loss_device_targets(false);
    nb_scope_end(s);
}

/* A bad target on the device path is the gather's error, which names the value, with the loss's
 * name in front; its message is not the host path's, so this also shows that the device path does
 * not scan the targets. */
static void test_device_targets_errors(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t sh[2] = {3, 10}, n3 = 3, sh3[3] = {3, 10, 2}, t2[2] = {3, 2};
    nb_tensor *x = NBT_CHECK(nb_randn(sh, 2, NULL)), *x3 = NBT_CHECK(nb_randn(sh3, 3, NULL));
    const int64_t tv[3] = {1, 12, -100}, tn[3] = {1, -3, 0}, tsp[6] = {0, 1, 2, 10, -100, 4};
    const int32_t t32[3] = {0, 11, 9};
    nb_tensor *t12 = from(tv, &n3, 1, NB_INT64), *tneg = from(tn, &n3, 1, NB_INT64);
    nb_cross_entropy_params p = nb_cross_entropy_params_default();
    p.weight = NBT_CHECK(nb_ones(&sh[1], 1, NULL));
    nb__loss_device_targets(true);
    NBT_FAILS(nb_cross_entropy(x, t12, NULL) == NULL, NB_ERR_INVALID_ARG, "cross_entropy: gather: index 12 is out of range",
              "size 10", NULL);
    NBT_FAILS(nb_cross_entropy(x, t12, &p) == NULL, NB_ERR_INVALID_ARG, "cross_entropy: ", "index 12 is out of range", NULL);
    NBT_FAILS(nb_nll_loss(x, tneg, NULL) == NULL, NB_ERR_INVALID_ARG, "nll_loss: gather: index -3 is out of range", NULL);
    NBT_FAILS(nb_cross_entropy(x, from(t32, &n3, 1, NB_INT32), NULL) == NULL, NB_ERR_INVALID_ARG,
              "index 11 is out of range", NULL);
    NBT_FAILS(nb_cross_entropy(x3, from(tsp, t2, 2, NB_INT64), NULL) == NULL, NB_ERR_INVALID_ARG,
              "index 10 is out of range", NULL);
    nb__loss_device_targets(false);
    NBT_FAILS(nb_cross_entropy(x, t12, NULL) == NULL, NB_ERR_INVALID_ARG,
              "cross_entropy: target 12 is out of bounds for 10 classes", NULL);
    nb_scope_end(s);
}

/* ---- dropout --------------------------------------------------------------------------------- */

static void test_dropout_stats(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t n = 1000000;
    nb_tensor_params fp = nb_tensor_params_default();
    fp.dtype = NB_FLOAT64;
    nb_tensor *x = NBT_CHECK(nb_ones(&n, 1, &fp));
    nb_generator *g = nb_generator_create(1234);
    const double ps[3] = {0.1, 0.5, 0.9};
    for (int i = 0; i < 3; i++) {
        double p = ps[i];
        nb_tensor *out = NBT_CHECK(nb_dropout(x, p, true, g));
        nb_tensor *keep = NBT_CHECK(nb_to_dtype(NBT_CHECK(nb_ne_scalar(out, 0.0)), NB_FLOAT64));
        double kept = item(nb_mean(keep, NULL, 0, false));
        double se = sqrt(p * (1 - p) / (double)n);
        if (fabs(kept - (1 - p)) > 5 * se) fail_msg("dropout p=%g: kept fraction %.6f, expected %.6f +- %.6f", p, kept, 1 - p, 5 * se);
        /* and the scaled mask's mean estimates 1 */
        double mean = item(nb_mean(out, NULL, 0, false));
        if (fabs(mean - 1) > 5 * se / (1 - p)) fail_msg("dropout p=%g: mean %.6f", p, mean);
    }
    nb_generator_free(g);
    nb_scope_end(s);
}

/* Every output is 0 or exactly x / (1 - p) (1 - p a power of two: x * 2, x * 4 exactly). */
static void test_dropout_scaling(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t sh[2] = {64, 33};
    nb_generator *g = nb_generator_create(7);
    nb_tensor_params rp = nb_tensor_params_default();
    rp.generator = g;
    const double ps[3] = {0.5, 0.75, 0.3};
    for (int d = 0; d < 2; d++) {
        rp.dtype = d ? NB_FLOAT64 : NB_FLOAT32;
        nb_tensor *x = NBT_CHECK(nb_randn(sh, 2, &rp));
        for (int i = 0; i < 3; i++) {
            nb_tensor *out = NBT_CHECK(nb_to_dtype(NBT_CHECK(nb_dropout(x, ps[i], true, g)), NB_FLOAT64));
            nb_tensor *x64 = NBT_CHECK(nb_to_dtype(x, NB_FLOAT64));
            double xo[64 * 33], oo[64 * 33];
            NBT_OK(nb_tensor_read(x64, xo, sizeof xo));
            NBT_OK(nb_tensor_read(out, oo, sizeof oo));
            int zeros = 0;
            double tol = ps[i] == 0.3 ? (d ? 4e-16 : 2.5e-7) : 0; /* two roundings: 1/(1-p), then x * it */
            for (int k = 0; k < 64 * 33; k++) {
                if (oo[k] == 0) {
                    zeros++;
                    continue;
                }
                double want = xo[k] / (1 - ps[i]);
                if (fabs(oo[k] - want) > tol * fabs(want))
                    fail_msg("dropout p=%g %s: element %d is %.17g, expected 0 or %.17g", ps[i], d ? "f64" : "f32",
                             k, oo[k], want);
            }
            assert_true(zeros > 0 && zeros < 64 * 33);
        }
    }
    nb_generator_free(g);
    nb_scope_end(s);
}

static void test_dropout_seed_and_grad(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t sh[2] = {50, 40};
    nb_tensor *x = NBT_CHECK(nb_ones(sh, 2, NULL));
    nb_generator *g = nb_generator_create(99);
    nb_tensor *a = NBT_CHECK(nb_dropout(x, 0.5, true, g));
    nb_generator_manual_seed(g, 99);
    nb_tensor *b = NBT_CHECK(nb_dropout(nbt_noncontig(x), 0.5, true, g));
    nbt_assert_close(a, b, 0, 0, "dropout: same seed, same mask (also for a non-contiguous input)");
    nb_tensor *c = NBT_CHECK(nb_dropout(x, 0.5, true, g));
    assert_true(item(nb_sum(NBT_CHECK(nb_ne(a, c)), NULL, 0, false)) > 0); /* the stream moved on */
    nb_manual_seed(5);
    nb_tensor *d1 = NBT_CHECK(nb_dropout(x, 0.5, true, NULL));
    nb_manual_seed(5);
    nbt_assert_close(NBT_CHECK(nb_dropout(x, 0.5, true, NULL)), d1, 0, 0, "dropout: default generator seeded");
    /* gradient: gout * mask / (1 - p); with x = 1 the output is that scaled mask itself */
    nb_tensor *leaf = nbt_leaf(x);
    nb_generator_manual_seed(g, 3);
    nb_tensor *out = NBT_CHECK(nb_dropout(leaf, 0.5, true, g));
    nb_tensor_params rp = nb_tensor_params_default();
    rp.generator = g;
    nb_tensor *gout = NBT_CHECK(nb_randn(sh, 2, &rp));
    NBT_OK(nb_backward(out, gout, NB_BACKWARD_DEFAULT));
    nbt_assert_close(nb_tensor_grad(leaf), NBT_CHECK(nb_mul(gout, out)), 0, 0, "dropout gradient");
    nb_generator_free(g);
    nb_scope_end(s);
}

static void test_dropout_identity(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t sh[2] = {5, 6};
    nb_tensor *x = nbt_leaf(NBT_CHECK(nb_randn(sh, 2, NULL)));
    nbt_assert_close(NBT_CHECK(nb_dropout(x, 0.7, false, NULL)), x, 0, 0, "dropout eval");
    nbt_assert_close(NBT_CHECK(nb_dropout(x, 0.0, true, NULL)), x, 0, 0, "dropout p=0");
    nb_tensor *z = NBT_CHECK(nb_dropout(x, 1.0, true, NULL));
    nbt_assert_close(z, NBT_CHECK(nb_zeros(sh, 2, NULL)), 0, 0, "dropout p=1");
    NBT_OK(nb_backward(NBT_CHECK(nb_sum(z, NULL, 0, false)), NULL, NB_BACKWARD_DEFAULT));
    nbt_assert_close(nb_tensor_grad(x), NBT_CHECK(nb_zeros(sh, 2, NULL)), 0, 0, "dropout p=1 gradient");
    /* eval mode passes gradients through unchanged */
    nb_tensor *y = nbt_leaf(x);
    NBT_OK(nb_backward(NBT_CHECK(nb_sum(NBT_CHECK(nb_dropout(y, 0.3, false, NULL)), NULL, 0, false)), NULL,
                       NB_BACKWARD_DEFAULT));
    nbt_assert_close(nb_tensor_grad(y), NBT_CHECK(nb_ones(sh, 2, NULL)), 0, 0, "dropout eval gradient");
    nb_scope_end(s);
}

/* ---- errors ---------------------------------------------------------------------------------- */

/* float32 cross entropy along rows of W = 1, 3, 8, 13 and 37 classes (all tail, whole vectors,
 * both), forward (reduction none) and gradient (sum: the forward's probabilities), against the
 * same computed here in double: rows of finite logits, with -inf entries (probability exactly 0),
 * with a NaN, with +inf among finite values, and of -inf alone, the last three NaN throughout as in
 * PyTorch (its log_softmax gives NaN there: inf - inf and -inf + inf). */
static void test_ce_rows_nonfinite(void **state)
{
    (void)state;
    enum { K = 10, WMAX = 37 };
    const int64_t widths[] = {1, 3, 8, 13, 37};
    for (int wi = 0; wi < 5; wi++) {
        int64_t W = widths[wi], tv[K];
        float x[K][WMAX];
        double want[K], gwant[K][WMAX];
        for (int r = 0; r < K; r++) {
            for (int c = 0; c < W; c++) x[r][c] = (float)(round(sin(0.9 * c + 1.3 * r) * 6 * 256) / 256);
            int kind = r % 5; /* 0 finite, 1 -inf entries, 2 a NaN, 3 +inf, 4 all -inf */
            tv[r] = (r * 5) % W;
            if (kind == 1)
                for (int c = 1; c < W; c += 3) x[r][c] = c == tv[r] ? x[r][c] : -INFINITY;
            if (kind == 2) x[r][(r * 3) % W] = NAN;
            if (kind == 3) x[r][(r * 7) % W] = INFINITY;
            for (int c = 0; kind == 4 && c < W; c++) x[r][c] = -INFINITY;
            double m = -INFINITY, sum = 0;
            for (int c = 0; c < W; c++) m = x[r][c] > m ? x[r][c] : m;
            for (int c = 0; c < W; c++) sum += exp((double)x[r][c] - m);
            bool nan = kind >= 2;
            want[r] = nan ? NAN : m + log(sum) - x[r][tv[r]];
            for (int c = 0; c < W; c++)
                gwant[r][c] = nan ? NAN : exp((double)x[r][c] - m) / sum - (c == tv[r] ? 1 : 0);
        }
        nb_scope *s = nb_scope_begin();
        float xs[K * WMAX];
        double gw[K * WMAX];
        for (int r = 0; r < K; r++)
            for (int c = 0; c < W; c++) xs[r * W + c] = x[r][c], gw[r * W + c] = gwant[r][c];
        int64_t sh[2] = {K, W}, nk = K;
        nb_tensor *xt = from(xs, sh, 2, NB_FLOAT32), *t = from(tv, &nk, 1, NB_INT64);
        nb_cross_entropy_params cp = nb_cross_entropy_params_default();
        cp.reduction = NB_REDUCE_NONE;
        char what[80];
        snprintf(what, sizeof what, "float32 cross entropy of %lld classes, row losses", (long long)W);
        nbt_assert_close(NBT_CHECK(nb_to_dtype(NBT_CHECK(nb_cross_entropy(xt, t, &cp)), NB_FLOAT64)),
                         from(want, &nk, 1, NB_FLOAT64), 1e-6, 1e-6, what);
        cp.reduction = NB_REDUCE_SUM;
        nb_tensor *leaf = nbt_leaf(xt);
        NBT_OK(nb_backward(NBT_CHECK(nb_cross_entropy(leaf, t, &cp)), NULL, NB_BACKWARD_DEFAULT));
        snprintf(what, sizeof what, "float32 cross entropy of %lld classes, gradient", (long long)W);
        nbt_assert_close(NBT_CHECK(nb_to_dtype(NBT_CHECK(nb_tensor_grad(leaf)), NB_FLOAT64)), from(gw, sh, 2, NB_FLOAT64),
                         1e-6, 1e-7, what);
        /* -inf logits: probability exactly 0 */
        const float *g = nb_tensor_data_ptr(NBT_CHECK(nb_tensor_grad(leaf)));
        for (int c = 1; W > 1 && c < W; c += 3)
            if (c != tv[1]) assert_true(g[1 * W + c] == 0.0f);
        nb_scope_end(s);
    }
}

/* Cross entropy over logits larger than the last-level cache (32 MiB here): the row losses against
 * float64's (rtol 1e-6: the float32 losses are rounded to float, each near 13). Their gradient is
 * written with streaming stores (src/cpu/ops/softmax.c, softmax_avx2.c), each row of 10007 values
 * starting at another alignment: by the backward when a target is ignored, else as the forward's
 * probabilities. Either way it is bit for bit the gradient of the same rows taken 100 at a time
 * (outputs small enough for plain stores), with targets in a row's first lanes, its middle and its
 * last value; in the first round every 100 rows have an ignored target, in the second none does.
 * Sum reduction: each row's gradient is then its own. */
static void test_large_backward_streams(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t rows = 1000, cols = 10007, chunk = 100;
    nb_tensor_params p = nb_tensor_params_default();
    nb_tensor *x0 = NBT_CHECK(nb_mul_scalar(nb_randn((int64_t[]){rows, cols}, 2, &p), 3));
    int64_t *tv = malloc((size_t)rows * sizeof *tv);
    assert_non_null(tv);
    p.dtype = NB_INT64;
    for (int ignored = 1; ignored >= 0; ignored--) {
        for (int64_t r = 0; r < rows; r++) tv[r] = (r * 7919) % cols;
        tv[1] = 0, tv[2] = 3, tv[3] = cols - 1, tv[4] = cols - 5;
        for (int64_t r0 = 0; ignored && r0 < rows; r0 += chunk) tv[r0 + 5] = -100;
        nb_tensor *t = NBT_CHECK(nb_tensor_from_data(tv, (int64_t[]){rows}, 1, &p));
        nb_cross_entropy_params cp = nb_cross_entropy_params_default();
        /* the float32 row losses (the vector log-sum-exp, in blocks) against the float64 loop's on
         * the same values */
        cp.reduction = NB_REDUCE_NONE;
        nbt_assert_close(NBT_CHECK(nb_cross_entropy(x0, t, &cp)),
                         NBT_CHECK(nb_cross_entropy(NBT_CHECK(nb_to_dtype(x0, NB_FLOAT64)), t, &cp)), 1e-6, 1e-6,
                         "large cross entropy's row losses");
        cp.reduction = NB_REDUCE_SUM;
        nb_tensor *x = nbt_leaf(x0);
        NBT_OK(nb_backward(NBT_CHECK(nb_cross_entropy(x, t, &cp)), NULL, NB_BACKWARD_DEFAULT));
        nb_tensor *gx = NBT_CHECK(nb_tensor_grad(x));
        for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
            nb_tensor *xc = nbt_leaf(NBT_CHECK(nb_narrow(x0, 0, r0, chunk)));
            NBT_OK(nb_backward(NBT_CHECK(nb_cross_entropy(xc, NBT_CHECK(nb_narrow(t, 0, r0, chunk)), &cp)), NULL,
                               NB_BACKWARD_DEFAULT));
            nbt_assert_close(NBT_CHECK(nb_narrow(gx, 0, r0, chunk)), NBT_CHECK(nb_tensor_grad(xc)), 0, 0,
                             ignored ? "large cross entropy gradient (ignored targets), row by row"
                                     : "large cross entropy gradient (the forward's probabilities), row by row");
        }
    }
    free(tv);
    nb_scope_end(s);
}

/* ---- a linear layer's bias gradient made by cross entropy's backward ---------------------------- */

/* The loss of the logits [rows, C] (or, with `extra`, plus 0.01 sum(logits): the logits' gradient
 * then has a second part, so cross entropy's is no longer all of it). */
static nb_tensor *ce_loss(const nb_tensor *logits, const nb_tensor *t, bool extra)
{
    nb_tensor *l = nb_cross_entropy(logits, t, NULL);
    return extra && l ? nb_add(l, nb_mul_scalar(nb_sum(logits, NULL, 0, false), 0.01)) : l;
}

typedef struct lin_ce {
    const nb_tensor *t;
    int64_t rows, C;
} lin_ce;

/* loss(reshape(linear(x, w, b), [rows, C])) for finite differences */
static nb_tensor *lin_ce_fn(nb_tensor *const *in, int n, void *ctx)
{
    (void)n;
    const lin_ce *c = ctx;
    nb_tensor *y = nb_linear(in[0], in[1], in[2]);
    return y ? ce_loss(nb_reshape(y, (int64_t[]){c->rows, c->C}, 2), c->t, false) : NULL;
}

/* One case: x [B, 50, 8] through linear(8 -> C) (bias [C] or [1, C]), reshaped to 50 B rows, into
 * cross entropy; at `threads` threads (with 200 rows, 100 each at 2: three blocks of 32 rows of the
 * float32 sums and a part of one; C = 48 takes float32 rows four at a time on AVX-512, and 201
 * rows leave one over). The gradients of x, w and b against those from a copy of the logits
 * as a leaf of its own graph: its gradient gl, gl @ w, gl^T @ x and gl summed over rows by the
 * engine's nb_sum. The profiler tells whether the backward summed (only with `extra`). */
static void bias_ahead_case(nb_dtype dt, int threads, bool row_bias, bool extra, int64_t C, int64_t B)
{
    nb_scope *s = nb_scope_begin();
    int old_threads = nb_get_num_threads();
    NBT_OK(nb_set_num_threads(threads));
    nb_manual_seed(11);
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = dt;
    int64_t rows = B * 50, bshape[2] = {1, C};
    nb_tensor *x = nbt_leaf(NBT_CHECK(nb_randn((int64_t[]){B, 50, 8}, 3, &p)));
    nb_tensor *w = nbt_leaf(NBT_CHECK(nb_mul_scalar(nb_randn((int64_t[]){C, 8}, 2, &p), 2)));
    nb_tensor *b = nbt_leaf(NBT_CHECK(nb_randn(row_bias ? bshape : &C, row_bias ? 2 : 1, &p)));
    p.dtype = NB_INT64;
    nb_tensor *t = NBT_CHECK(nb_randint(0, C, &rows, 1, &p));
    nb_tensor *y = NBT_CHECK(nb_reshape(NBT_CHECK(nb_linear(x, w, b)), (int64_t[]){rows, C}, 2));
    nb_tensor *loss = NBT_CHECK(ce_loss(y, t, extra));
    NBT_OK(nb_profiler_start(NB_PROFILE_HOST));
    NBT_OK(nb_backward(loss, NULL, NB_BACKWARD_DEFAULT));
    nb_profiler_stop();
    int64_t sums = nbt_profiled_calls("sum");
    char what[96];
    snprintf(what, sizeof what, "%s, C %lld, %lld rows, %d threads, bias %s%s: sums in backward", nb_dtype_name(dt),
             (long long)C, (long long)rows, threads, row_bias ? "[1, C]" : "[C]", extra ? ", logits used twice" : "");
    if (extra ? sums < 1 : sums != 0) fail_msg("%s: %lld", what, (long long)sums);

    nb_tensor *yl = nbt_leaf(NBT_CHECK(nb_detach(y)));
    NBT_OK(nb_backward(NBT_CHECK(ce_loss(yl, t, extra)), NULL, NB_BACKWARD_DEFAULT));
    nb_tensor *gl = NBT_CHECK(nb_tensor_grad(yl)), *x2 = NBT_CHECK(nb_reshape(x, (int64_t[]){rows, 8}, 2));
    nb_tensor *db = NBT_CHECK(nb_sum(gl, (int64_t[]){0}, 1, row_bias));
    double rtol = dt == NB_FLOAT32 ? 1e-5 : 1e-12, atol = dt == NB_FLOAT32 ? 1e-6 : 1e-14;
    snprintf(what + strlen(what) - strlen("sums in backward"), 32, "bias gradient");
    nbt_assert_close(NBT_CHECK(nb_tensor_grad(b)), db, rtol, atol, what);
    nbt_assert_close(NBT_CHECK(nb_tensor_grad(w)), NBT_CHECK(nb_matmul(nb_t(gl), x2)), rtol, atol, "weight gradient");
    nbt_assert_close(NBT_CHECK(nb_reshape(nb_tensor_grad(x), (int64_t[]){rows, 8}, 2)), NBT_CHECK(nb_matmul(gl, w)),
                     rtol, atol, "input gradient");
    NBT_OK(nb_set_num_threads(old_threads));
    nb_scope_end(s);
}

/* A linear layer's bias gradient as cross entropy's backward sums the columns of the logits'
 * gradient while writing it (rules_rnn.c, nb__linear_below): the cases of bias_ahead_case, finite
 * differences in float64, and the same over logits larger than the last-level cache (streaming
 * stores, rows of 10007 values at every alignment). */
static void test_linear_bias_ahead(void **state)
{
    (void)state;
    for (int f = 0; f < 2; f++)
        for (int th = 1; th <= 2; th++)
            for (int rb = 0; rb < 2; rb++)
                for (int ex = 0; ex < 2; ex++) {
                    bias_ahead_case(f ? NB_FLOAT64 : NB_FLOAT32, th, rb, ex, 37, 4);
                    bias_ahead_case(f ? NB_FLOAT64 : NB_FLOAT32, th, rb, ex, 48, 4);
                }
    bias_ahead_case(NB_FLOAT32, 1, false, false, 48, 3);
    bias_ahead_case(NB_FLOAT32, 2, false, false, 48, 3);

    nb_scope *s = nb_scope_begin();
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_FLOAT64;
    nb_tensor *in[3] = {NBT_CHECK(nb_randn((int64_t[]){2, 3, 4}, 3, &p)), NBT_CHECK(nb_randn((int64_t[]){5, 4}, 2, &p)),
                        NBT_CHECK(nb_randn((int64_t[]){5}, 1, &p))};
    p.dtype = NB_INT64;
    lin_ce c = {NBT_CHECK(nb_randint(0, 5, (int64_t[]){6}, 1, &p)), 6, 5};
    nbt_gradcheck(lin_ce_fn, &c, in, 3, 1e-6, 1e-8, 1e-6, "linear + cross entropy, float64");

    for (int64_t C = 10000; C <= 10007; C += 7) { /* rows four at a time, and one at a time */
        int64_t rows = 1000;
        p.dtype = NB_FLOAT32;
        nb_tensor *x = nbt_leaf(NBT_CHECK(nb_randn((int64_t[]){rows, 3}, 2, &p)));
        nb_tensor *w = nbt_leaf(NBT_CHECK(nb_mul_scalar(nb_randn((int64_t[]){C, 3}, 2, &p), 3)));
        nb_tensor *b = nbt_leaf(NBT_CHECK(nb_randn(&C, 1, &p)));
        p.dtype = NB_INT64;
        nb_tensor *t = NBT_CHECK(nb_randint(0, C, &rows, 1, &p));
        nb_tensor *y = NBT_CHECK(nb_linear(x, w, b)), *loss = NBT_CHECK(nb_cross_entropy(y, t, NULL));
        NBT_OK(nb_profiler_start(NB_PROFILE_HOST));
        NBT_OK(nb_backward(loss, NULL, NB_BACKWARD_DEFAULT));
        nb_profiler_stop();
        assert_int_equal(nbt_profiled_calls("sum"), 0);
        nb_tensor *yl = nbt_leaf(NBT_CHECK(nb_detach(y)));
        NBT_OK(nb_backward(NBT_CHECK(nb_cross_entropy(yl, t, NULL)), NULL, NB_BACKWARD_DEFAULT));
        nbt_assert_close(NBT_CHECK(nb_tensor_grad(b)),
                         NBT_CHECK(nb_sum(nb_tensor_grad(yl), (int64_t[]){0}, 1, false)), 1e-5, 1e-7,
                         "bias gradient over streamed logits");
        nbt_assert_close(NBT_CHECK(nb_tensor_grad(w)), NBT_CHECK(nb_matmul(nb_t(nb_tensor_grad(yl)), x)), 1e-5, 1e-6,
                         "weight gradient over streamed logits");
    }
    nb_scope_end(s);
}

/* One case of the probabilities cross entropy saves (src/nn/loss.c, ce_rows): 130 rows of C
 * classes, straight or from linear(6 -> C), reduced by red and multiplied by mult; backward once,
 * or (retain) once keeping the graph and once more freeing it. The gradients against ones made
 * from nb_softmax and nb_one_hot: r = (softmax(y) - onehot(t)) k, k the gradient each row's loss
 * gets in all (mult, over the rows for a mean, twice with retain); then dy = r, and through the
 * linear layer dx = r @ w, dw = r^T @ x and db = r summed over rows (the absolute tolerance
 * scales with k). */
static void probs_case(nb_dtype dt, int threads, int64_t C, bool linear, nb_reduction red, double mult, bool retain)
{
    nb_scope *s = nb_scope_begin();
    int old_threads = nb_get_num_threads();
    NBT_OK(nb_set_num_threads(threads));
    nb_manual_seed(5);
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = dt;
    int64_t rows = 130;
    nb_tensor *x = nbt_leaf(NBT_CHECK(nb_randn((int64_t[]){rows, linear ? 6 : C}, 2, &p)));
    nb_tensor *w = linear ? nbt_leaf(NBT_CHECK(nb_mul_scalar(nb_randn((int64_t[]){C, 6}, 2, &p), 2))) : NULL;
    nb_tensor *b = linear ? nbt_leaf(NBT_CHECK(nb_randn(&C, 1, &p))) : NULL;
    p.dtype = NB_INT64;
    nb_tensor *t = NBT_CHECK(nb_randint(0, C, &rows, 1, &p));
    nb_tensor *y = linear ? NBT_CHECK(nb_linear(x, w, b)) : x;
    nb_cross_entropy_params cp = nb_cross_entropy_params_default();
    cp.reduction = red;
    nb_tensor *loss = NBT_CHECK(nb_cross_entropy(y, t, &cp));
    if (mult != 1) loss = NBT_CHECK(nb_mul_scalar(loss, mult));
    if (retain) NBT_OK(nb_backward(loss, NULL, NB_RETAIN_GRAPH));
    NBT_OK(nb_backward(loss, NULL, NB_BACKWARD_DEFAULT));

    double k = mult * (retain ? 2 : 1) / (red == NB_REDUCE_MEAN ? (double)rows : 1);
    nb_tensor *oh = NBT_CHECK(nb_to_dtype(nb_one_hot(t, C), dt));
    nb_tensor *r = NBT_CHECK(nb_mul_scalar(nb_sub(nb_softmax(nb_detach(y), 1), oh), k));
    char what[128];
    snprintf(what, sizeof what, "%s, C %lld, %d threads, %s, %s x %g%s", nb_dtype_name(dt), (long long)C, threads,
             linear ? "linear" : "leaf", red == NB_REDUCE_MEAN ? "mean" : "sum", mult, retain ? ", retained" : "");
    /* r's entries are at most k; products over its rows cancel to near 0 */
    double rtol = dt == NB_FLOAT32 ? 1e-5 : 1e-12, atol = k * (dt == NB_FLOAT32 ? 2e-5 : 1e-13);
    if (!linear) {
        nbt_assert_close(NBT_CHECK(nb_tensor_grad(x)), r, rtol, atol, what);
    } else {
        nbt_assert_close(NBT_CHECK(nb_tensor_grad(b)), NBT_CHECK(nb_sum(r, (int64_t[]){0}, 1, false)), rtol, atol,
                         what);
        nbt_assert_close(NBT_CHECK(nb_tensor_grad(w)), NBT_CHECK(nb_matmul(nb_t(r), x)), rtol, atol, what);
        nbt_assert_close(NBT_CHECK(nb_tensor_grad(x)), NBT_CHECK(nb_matmul(r, w)), rtol, atol, what);
    }
    NBT_OK(nb_set_num_threads(old_threads));
    nb_scope_end(s);
}

/* Cross entropy's saved probabilities: written in place into the gradient when each row's
 * gradient is their scale (a mean or a sum, backward once), scaled in a pass otherwise (the loss
 * multiplied, or a graph kept for a second backward, which must find them unchanged and then
 * writes in place). float32 and float64, 1 and 2 threads, C = 37 and 48 (a multiple of 16: the
 * AVX-512 rows four at a time), with and without a linear layer whose bias gradient comes from
 * the forward's column sums. */
static void test_ce_probabilities(void **state)
{
    (void)state;
    for (int f = 0; f < 2; f++)
        for (int th = 1; th <= 2; th++)
            for (int64_t C = 37; C <= 48; C += 11)
                for (int lin = 0; lin < 2; lin++) {
                    nb_dtype dt = f ? NB_FLOAT64 : NB_FLOAT32;
                    probs_case(dt, th, C, lin, NB_REDUCE_MEAN, 1, false);
                    probs_case(dt, th, C, lin, NB_REDUCE_SUM, 1, false);
                    probs_case(dt, th, C, lin, NB_REDUCE_MEAN, 3, false);
                    probs_case(dt, th, C, lin, NB_REDUCE_MEAN, 1, true);
                    probs_case(dt, th, C, lin, NB_REDUCE_SUM, 0.5, true);
                }
}

static void test_errors(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t sh[2] = {3, 10}, n3 = 3, c4 = 4, sh4[3] = {3, 10, 4}, bad[2] = {3, 5};
    nb_tensor *x = NBT_CHECK(nb_randn(sh, 2, NULL));
    const int64_t tv[3] = {1, 12, 0}, tn[3] = {1, -3, 0}, tok[3] = {1, 2, 3};
    nb_tensor *t12 = from(tv, &n3, 1, NB_INT64), *tneg = from(tn, &n3, 1, NB_INT64), *t = from(tok, &n3, 1, NB_INT64);
    NBT_FAILS(nb_cross_entropy(x, t12, NULL) == NULL, NB_ERR_INVALID_ARG,
              "cross_entropy: target 12 is out of bounds for 10 classes", NULL);
    NBT_FAILS(nb_cross_entropy(x, tneg, NULL) == NULL, NB_ERR_INVALID_ARG, "target -3 is out of bounds for 10", NULL);
    NBT_FAILS(nb_nll_loss(x, t12, NULL) == NULL, NB_ERR_INVALID_ARG, "nll_loss: target 12", "10 classes", NULL);
    NBT_FAILS(nb_cross_entropy(NULL, t, NULL) == NULL, NB_ERR_INVALID_ARG, "cross_entropy", NULL);
    NBT_FAILS(nb_cross_entropy(x, NBT_CHECK(nb_zeros(&n3, 1, NULL)), NULL) == NULL, NB_ERR_DTYPE, "cross_entropy",
              "int64", "float32", NULL);
    NBT_FAILS(nb_cross_entropy(NBT_CHECK(nb_randn(sh4, 3, NULL)), t, NULL) == NULL, NB_ERR_SHAPE, "cross_entropy",
              "[3]", "[3, 10, 4]", NULL);
    NBT_FAILS(nb_cross_entropy(x, NBT_CHECK(nb_zeros(bad, 2, &(nb_tensor_params){.dtype = NB_INT64})), NULL) == NULL,
              NB_ERR_SHAPE, "cross_entropy", "[3, 5]", "[3, 10]", NULL);
    NBT_FAILS(nb_cross_entropy(NBT_CHECK(nb_to_dtype(x, NB_INT64)), t, NULL) == NULL, NB_ERR_DTYPE, "cross_entropy",
              "input", "int64", NULL);
    nb_cross_entropy_params p = nb_cross_entropy_params_default();
    p.weight = NBT_CHECK(nb_ones(&c4, 1, NULL));
    NBT_FAILS(nb_cross_entropy(x, t, &p) == NULL, NB_ERR_SHAPE, "cross_entropy: weight of shape [4]", "[10]", NULL);
    p = nb_cross_entropy_params_default();
    p.label_smoothing = 1.5;
    NBT_FAILS(nb_cross_entropy(x, t, &p) == NULL, NB_ERR_INVALID_ARG, "label_smoothing", "1.5", NULL);
    p = nb_cross_entropy_params_default();
    p.reduction = (nb_reduction)7;
    NBT_FAILS(nb_cross_entropy(x, t, &p) == NULL, NB_ERR_INVALID_ARG, "cross_entropy: unknown reduction 7", NULL);
    NBT_FAILS(nb_mse_loss(x, NBT_CHECK(nb_randn(&c4, 1, NULL)), NB_REDUCE_MEAN) == NULL, NB_ERR_SHAPE, "mse_loss",
              "[3, 10]", "[4]", "10 vs 4", NULL);
    NBT_FAILS(nb_mse_loss(x, NULL, NB_REDUCE_MEAN) == NULL, NB_ERR_INVALID_ARG, "mse_loss", NULL);
    NBT_FAILS(nb_mse_loss(x, x, (nb_reduction)-1) == NULL, NB_ERR_INVALID_ARG, "mse_loss: unknown reduction", NULL);
    const char *bce = "binary_cross_entropy_with_logits";
    nb_tensor *row = NBT_CHECK(nb_rand(&sh[1], 1, NULL));
    NBT_FAILS(nb_binary_cross_entropy_with_logits(x, row, NULL, NULL, NB_REDUCE_MEAN) == NULL, NB_ERR_SHAPE, bce,
              "target size [10] must be the same as input size [3, 10]", NULL);
    NBT_FAILS(nb_binary_cross_entropy_with_logits(x, x, NBT_CHECK(nb_ones(&c4, 1, NULL)), NULL, NB_REDUCE_MEAN) == NULL,
              NB_ERR_SHAPE, bce, "weight of shape [4]", "[3, 10]", NULL);
    NBT_FAILS(nb_binary_cross_entropy_with_logits(x, x, NULL, NBT_CHECK(nb_ones(sh4, 3, NULL)), NB_REDUCE_MEAN) == NULL,
              NB_ERR_SHAPE, bce, "pos_weight of shape [3, 10, 4]", NULL);
    NBT_FAILS(nb_binary_cross_entropy_with_logits(x, t, NULL, NULL, NB_REDUCE_MEAN) == NULL, NB_ERR_DTYPE, bce,
              "target", "int64", NULL);
    NBT_FAILS(nb_dropout(x, 1.5, true, NULL) == NULL, NB_ERR_INVALID_ARG,
              "dropout: probability has to be between 0 and 1, but got 1.5", NULL);
    NBT_FAILS(nb_dropout(x, -0.1, false, NULL) == NULL, NB_ERR_INVALID_ARG, "dropout", "-0.1", NULL);
    NBT_FAILS(nb_dropout(x, NAN, true, NULL) == NULL, NB_ERR_INVALID_ARG, "dropout", "nan", NULL);
    NBT_FAILS(nb_dropout(t, 0.5, true, NULL) == NULL, NB_ERR_DTYPE, "dropout", "int64", NULL);
    NBT_FAILS(nb_dropout(NULL, 0.5, true, NULL) == NULL, NB_ERR_INVALID_ARG, "dropout: NULL", NULL);
    nb_scope_end(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_dropout_stats),
        cmocka_unit_test(test_dropout_scaling),
        cmocka_unit_test(test_dropout_seed_and_grad),
        cmocka_unit_test(test_dropout_identity),
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_large_backward_streams),
        cmocka_unit_test(test_linear_bias_ahead),
        cmocka_unit_test(test_ce_probabilities),
        cmocka_unit_test(test_ce_rows_nonfinite),
        cmocka_unit_test_teardown(test_device_targets, device_targets_off),
        cmocka_unit_test_teardown(test_device_targets_all_ignored, device_targets_off),
        cmocka_unit_test_teardown(test_device_targets_large_ignore, device_targets_off),
        cmocka_unit_test_teardown(test_device_targets_errors, device_targets_off),
    };
    return NBT_RUN(tests);
}
