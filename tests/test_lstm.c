/* Tests of the LSTM (nabla/rnn.h): torch.nn.LSTM's outputs, final states and gradients
 * (tests/ref/cases_lstm.py: 1 and 2 layers, batch_first, with and without bias and initial
 * states, a 24-step case) on contiguous and non-contiguous inputs, finite differences in float64,
 * the initialisation helper, parameter names, and every error path; properties of the fused
 * layer (one initial state given, threads agree) and its kernels' argument checks.
 *
 * Tolerances: float32 rtol 1e-5 with atol 1e-6 (gradients summed over steps can cancel to values
 * near 0); float64 rtol 1e-10, atol 1e-12. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbtest.h"
#include "core/dispatch_impl.h" /* the fused kernels' own checks */
#include "nabla/rnn.h" /* until nabla.h includes it */

#define MAXW 8

typedef struct lcase {
    nb_lstm_params p;
    int64_t in, layers;
    int nw;
    char names[MAXW][32];
} lcase;

static void read_case(const nb_tensor_map *m, const char *name, lcase *c)
{
    int64_t cfg[5];
    NBT_OK(nb_tensor_read(NBT_CHECK(nbt_ref(m, name, "config")), cfg, sizeof cfg));
    c->p = nb_lstm_params_default();
    c->in = cfg[0];
    c->p.hidden_size = cfg[1];
    c->layers = cfg[2];
    c->p.batch_first = cfg[3] != 0;
    c->p.bias = cfg[4] != 0;
    c->nw = nb_lstm_num_weights((int)c->layers, &c->p);
    assert_true(c->nw <= MAXW);
    int per = c->p.bias ? 4 : 2;
    for (int i = 0; i < c->nw; i++) assert_true(nb_lstm_weight_name(i / per, i % per, c->names[i], 32) > 0);
}

/* sum(out * gout) + sum(hn * ghn) + sum(cn * gcn): backward of it gives the gradients torch got. */
static nb_tensor *weighted(nb_tensor *out, nb_tensor *hn, nb_tensor *cn, nb_tensor *go, nb_tensor *gh, nb_tensor *gc)
{
    nb_tensor *a = nb_sum(NBT_CHECK(nb_mul(out, go)), NULL, 0, false);
    nb_tensor *b = nb_sum(NBT_CHECK(nb_mul(hn, gh)), NULL, 0, false);
    nb_tensor *c = nb_sum(NBT_CHECK(nb_mul(cn, gc)), NULL, 0, false);
    return NBT_CHECK(nb_add(NBT_CHECK(nb_add(NBT_CHECK(a), NBT_CHECK(b))), NBT_CHECK(c)));
}

static void check_grad(const nb_tensor *leaf, const nb_tensor *want, double rtol, double atol, const char *what)
{
    nb_tensor *g = nb_tensor_grad(leaf);
    if (!g) fail_msg("%s: no gradient", what);
    nbt_assert_close(g, want, rtol, atol, what);
}

static nb_tensor *prep(nb_tensor *t, bool noncontig)
{
    return t ? nbt_leaf(noncontig ? NBT_CHECK(nbt_noncontig(t)) : t) : NULL;
}

static void run_case(const nb_tensor_map *m, const char *name, bool noncontig)
{
    lcase c;
    read_case(m, name, &c);
    nb_tensor *x = prep(NBT_CHECK(nbt_ref(m, name, "x")), noncontig);
    nb_tensor *h0 = prep(nbt_ref(m, name, "h0"), noncontig), *c0 = prep(nbt_ref(m, name, "c0"), noncontig);
    nb_tensor *w[MAXW];
    for (int i = 0; i < c.nw; i++) w[i] = prep(NBT_CHECK(nbt_ref(m, name, c.names[i])), noncontig);
    nb_tensor *hn, *cn;
    nb_tensor *out = NBT_CHECK(nb_lstm(x, h0, c0, w, c.nw, (int)c.layers, &c.p, &hn, &cn));
    bool f32 = nb_tensor_dtype(x) == NB_FLOAT32;
    double rtol = f32 ? 1e-5 : 1e-10, atol = f32 ? 1e-6 : 1e-12;
    char what[160];
    const char *lay = noncontig ? "noncontig" : "contig";
    snprintf(what, sizeof what, "%s %s out", name, lay);
    nbt_assert_close(out, nbt_ref(m, name, "out"), rtol, atol, what);
    nbt_assert_close(hn, nbt_ref(m, name, "h_n"), rtol, atol, "h_n");
    nbt_assert_close(cn, nbt_ref(m, name, "c_n"), rtol, atol, "c_n");
    nb_tensor *loss = weighted(out, hn, cn, nbt_ref(m, name, "gout"), nbt_ref(m, name, "ghn"), nbt_ref(m, name, "gcn"));
    NBT_OK(nb_backward(loss, NULL, NB_BACKWARD_DEFAULT));
    snprintf(what, sizeof what, "%s %s grad_x", name, lay);
    check_grad(x, nbt_ref(m, name, "grad_x"), rtol, atol, what);
    if (h0) check_grad(h0, nbt_ref(m, name, "grad_h0"), rtol, atol, "grad_h0");
    if (c0) check_grad(c0, nbt_ref(m, name, "grad_c0"), rtol, atol, "grad_c0");
    for (int i = 0; i < c.nw; i++) {
        char key[48];
        snprintf(key, sizeof key, "grad_%s", c.names[i]);
        snprintf(what, sizeof what, "%s %s %s", name, lay, key);
        check_grad(w[i], NBT_CHECK(nbt_ref(m, name, key)), rtol, atol, what);
    }
}

static void test_reference(void **state)
{
    (void)state;
    nbt_run_reference("lstm", 14, run_case);
}

/* ---- finite differences ---------------------------------------------------------------------- */

typedef struct fdctx {
    nb_lstm_params p;
    int layers, nw;
} fdctx;

/* inputs: x, h0, c0, weights...; output: out, h_n and c_n flattened and joined. */
static nb_tensor *fd_fn(nb_tensor *const *in, int n, void *ctx)
{
    const fdctx *c = ctx;
    assert_int_equal(n, 3 + c->nw);
    nb_tensor *hn, *cn, *out = nb_lstm(in[0], in[1], in[2], in + 3, c->nw, c->layers, &c->p, &hn, &cn);
    if (!out) return NULL;
    nb_tensor *parts[3] = {nb_flatten(out, 0, -1), nb_flatten(hn, 0, -1), nb_flatten(cn, 0, -1)};
    return nb_cat(parts, 3, 0);
}

/* nbt_gradcheck takes at most 8 inputs: one layer with bias, or two without (x, h0, c0 + 4). */
static void gradcheck_case(int layers, bool bias, bool batch_first)
{
    nb_scope *s = nb_scope_begin();
    nb_manual_seed(7);
    fdctx c = {.p = nb_lstm_params_default(), .layers = layers};
    c.p.hidden_size = 3;
    c.p.bias = bias;
    c.p.batch_first = batch_first;
    c.nw = nb_lstm_num_weights(c.layers, &c.p);
    nb_tensor_params tp = nb_tensor_params_default();
    tp.dtype = NB_FLOAT64;
    nb_tensor *in[3 + MAXW];
    int64_t T = 3, B = 2, I = 2, xs[3] = {batch_first ? B : T, batch_first ? T : B, I}, ss[3] = {layers, B, 3};
    in[0] = NBT_CHECK(nb_randn(xs, 3, &tp));
    in[1] = NBT_CHECK(nb_randn(ss, 3, &tp));
    in[2] = NBT_CHECK(nb_randn(ss, 3, &tp));
    NBT_OK(nb_lstm_init_weights(I, c.layers, &c.p, &tp, in + 3));
    nbt_gradcheck(fd_fn, &c, in, 3 + c.nw, 1e-6, 1e-8, 1e-6, bias ? "lstm fd" : "lstm fd no bias");
    nb_scope_end(s);
}

static void test_gradcheck(void **state)
{
    (void)state;
    gradcheck_case(1, true, false);
    gradcheck_case(2, false, true);
}

/* ---- init, names, no-grad ------------------------------------------------------------------ */

static void test_init_and_names(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    char buf[32];
    assert_int_equal(nb_lstm_weight_name(1, 2, buf, sizeof buf), 10);
    assert_string_equal(buf, "bias_ih_l1");
    nb_lstm_weight_name(0, 0, buf, sizeof buf);
    assert_string_equal(buf, "weight_ih_l0");
    nb_lstm_weight_name(3, 1, buf, sizeof buf);
    assert_string_equal(buf, "weight_hh_l3");
    NBT_FAILS(nb_lstm_weight_name(0, 4, buf, sizeof buf) < 0, NB_ERR_INVALID_ARG, "index 4", NULL);
    nb_lstm_params p = nb_lstm_params_default();
    assert_true(p.bias && !p.batch_first);
    p.hidden_size = 20;
    nb_tensor *w[MAXW], *w2[MAXW];
    nb_tensor_params tp = nb_tensor_params_default();
    tp.generator = NBT_CHECK(nb_generator_create(3));
    NBT_OK(nb_lstm_init_weights(10, 2, &p, &tp, w));
    int64_t want[8][2] = {{80, 10}, {80, 20}, {80, 0}, {80, 0}, {80, 20}, {80, 20}, {80, 0}, {80, 0}};
    double k = 1.0 / sqrt(20.0);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(nb_tensor_ndim(w[i]), want[i][1] ? 2 : 1);
        assert_int_equal(nb_tensor_shape(w[i])[0], 80);
        if (want[i][1]) assert_int_equal(nb_tensor_shape(w[i])[1], want[i][1]);
        assert_true(nb_tensor_requires_grad(w[i]) && nb_tensor_is_leaf(w[i]));
        double mx, mn;
        NBT_OK(nb_item(NBT_CHECK(nb_max(w[i])), &mx));
        NBT_OK(nb_item(NBT_CHECK(nb_min(w[i])), &mn));
        assert_true(mx < k && mn >= -k && mx > 0.8 * k && mn < -0.8 * k); /* spans the range */
    }
    nb_generator_manual_seed(tp.generator, 3); /* the same seed gives the same weights */
    NBT_OK(nb_lstm_init_weights(10, 2, &p, &tp, w2));
    for (int i = 0; i < 8; i++) nbt_assert_close(w2[i], w[i], 0, 0, "same seed");
    nb_generator_free(tp.generator);
    p.bias = false;
    assert_int_equal(nb_lstm_num_weights(3, &p), 6);
    NBT_FAILS(nb_lstm_init_weights(0, 1, &p, NULL, w) != NB_OK, NB_ERR_INVALID_ARG, "input 0", NULL);
    assert_null(w[0]);
    nb_scope_end(s);
}

/* Under no-grad the outputs are the same and record nothing. */
static void test_no_grad(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_manual_seed(1);
    nb_lstm_params p = nb_lstm_params_default();
    p.hidden_size = 4;
    nb_tensor *w[MAXW], *hn;
    NBT_OK(nb_lstm_init_weights(3, 2, &p, NULL, w));
    nb_tensor *x = NBT_CHECK(nb_randn((int64_t[3]){5, 2, 3}, 3, NULL));
    nb_tensor *a = NBT_CHECK(nb_lstm(x, NULL, NULL, w, 8, 2, &p, NULL, NULL));
    assert_true(nb_tensor_requires_grad(a));
    bool prev = nb_set_grad_enabled(false);
    nb_tensor *b = NBT_CHECK(nb_lstm(x, NULL, NULL, w, 8, 2, &p, &hn, NULL));
    nb_set_grad_enabled(prev);
    assert_false(nb_tensor_requires_grad(b));
    nbt_assert_close(b, a, 0, 0, "no-grad output");
    /* the last step of the output is h_n's last layer */
    nbt_assert_close(NBT_CHECK(nb_select(b, 0, 4)), NBT_CHECK(nb_select(hn, 0, 1)), 0, 0, "h_n");
    nb_scope_end(s);
}

/* One state given: the other counts as zeros, in the outputs and the gradients. */
static void one_state_case(bool give_h)
{
    nb_scope *s = nb_scope_begin();
    nb_manual_seed(7);
    nb_lstm_params p = nb_lstm_params_default();
    p.hidden_size = 5;
    nb_tensor *w[MAXW];
    NBT_OK(nb_lstm_init_weights(3, 2, &p, NULL, w));
    nb_tensor *x = NBT_CHECK(nb_randn((int64_t[3]){4, 2, 3}, 3, NULL));
    nb_tensor *st = NBT_CHECK(nb_randn((int64_t[3]){2, 2, 5}, 3, NULL));
    nb_tensor *z = NBT_CHECK(nb_zeros((int64_t[3]){2, 2, 5}, 3, NULL));
    nb_tensor *res[2], *grads[2];
    for (int k = 0; k < 2; k++) {
        nb_tensor *sv = NBT_CHECK(nb_clone(st));
        NBT_OK(nb_tensor_set_requires_grad(sv, true));
        nb_tensor *other = k ? z : NULL, *cn;
        res[k] = NBT_CHECK(give_h ? nb_lstm(x, sv, other, w, 8, 2, &p, NULL, &cn)
                                  : nb_lstm(x, other, sv, w, 8, 2, &p, NULL, &cn));
        NBT_OK(nb_backward(NBT_CHECK(nb_add(nb_sum(res[k], NULL, 0, false), nb_sum(cn, NULL, 0, false))), NULL, 0));
        grads[k] = NBT_CHECK(nb_tensor_grad(sv));
    }
    nbt_assert_close(res[0], res[1], 0, 0, give_h ? "h0 only: output" : "c0 only: output");
    nbt_assert_close(grads[0], grads[1], 0, 0, give_h ? "h0 only: grad" : "c0 only: grad");
    nb_scope_end(s);
}

static void test_one_state(void **state)
{
    (void)state;
    one_state_case(true);
    one_state_case(false);
}

/* A batch large enough to split the cell kernels across threads gives the same values as one
 * thread (each row is computed the same way). */
/* Thread counts: the fused cell kernels split a step's rows across threads and must give the same
 * bits at 1 and 2 threads; the whole layer agrees to float32 rounding, since its matrix products
 * are the BLAS library's, whose sums may depend on how it splits the matrix (OpenBLAS's Haswell
 * and Zen kernels do at M = 512: the 1-thread call leaves an 8-row edge block that a 2-thread
 * split does not). */
static void test_threads(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_manual_seed(3);
    nb_lstm_params p = nb_lstm_params_default();
    p.hidden_size = 256;
    nb_tensor *w[MAXW], *out[2], *gx[2];
    NBT_OK(nb_lstm_init_weights(8, 1, &p, NULL, w));
    nb_tensor *x0 = NBT_CHECK(nb_randn((int64_t[3]){2, 512, 8}, 3, NULL)); /* B * H = 2^17 */
    /* The kernels alone, step 1 of 2 with a recurrent product: forward, then backward. */
    nb_tensor *xp = NBT_CHECK(nb_randn((int64_t[3]){2, 512, 1024}, 3, NULL));
    nb_tensor *act0 = NBT_CHECK(nb_randn((int64_t[3]){2, 512, 1024}, 3, NULL));
    nb_tensor *y0 = NBT_CHECK(nb_randn((int64_t[4]){2, 3, 512, 256}, 4, NULL));
    nb_tensor *gy = NBT_CHECK(nb_randn((int64_t[4]){2, 3, 512, 256}, 4, NULL));
    nb_tensor *dhc0 = NBT_CHECK(nb_randn((int64_t[3]){2, 512, 256}, 3, NULL));
    nb_tensor *y[2], *act[2], *dg[2], *dhc[2];
    int prev = nb_get_num_threads();
    for (int k = 0; k < 2; k++) {
        NBT_OK(nb_set_num_threads(k ? 2 : 1));
        nb_tensor *x = NBT_CHECK(nb_clone(x0));
        NBT_OK(nb_tensor_set_requires_grad(x, true));
        out[k] = NBT_CHECK(nb_lstm(x, NULL, NULL, w, 4, 1, &p, NULL, NULL));
        NBT_OK(nb_backward(NBT_CHECK(nb_sum(nb_mul(out[k], out[k]), NULL, 0, false)), NULL, 0));
        gx[k] = NBT_CHECK(nb_tensor_grad(x));
        y[k] = NBT_CHECK(nb_clone(y0));
        act[k] = NBT_CHECK(nb_clone(act0));
        nb_kargs f = {.out = y[k], .out2 = act[k], .in = {xp}, .i0 = 1, .flag = true};
        NBT_OK(nb__dispatch(NB_OP_LSTM_CELL, &f));
        dg[k] = NBT_CHECK(nb_zeros((int64_t[3]){2, 512, 1024}, 3, NULL));
        dhc[k] = NBT_CHECK(nb_clone(dhc0));
        nb_kargs b = {.out = dg[k], .out2 = dhc[k], .in = {gy, y[k], act[k]}, .i0 = 1};
        NBT_OK(nb__dispatch(NB_OP_LSTM_CELL_BACKWARD, &b));
    }
    NBT_OK(nb_set_num_threads(prev));
    nbt_assert_close(y[0], y[1], 0, 0, "threads: cell h and c");
    nbt_assert_close(act[0], act[1], 0, 0, "threads: cell gates");
    nbt_assert_close(dg[0], dg[1], 0, 0, "threads: cell gate gradients");
    nbt_assert_close(dhc[0], dhc[1], 0, 0, "threads: cell state gradients");
    nbt_assert_close(out[0], out[1], 1e-6, 1e-7, "threads: output");
    nbt_assert_close(gx[0], gx[1], 1e-6, 1e-7, "threads: input gradient");
    nb_scope_end(s);
}

/* The tolerance of a value that went through a step's product made in another order than
 * nb_matmul's (fused_product_case, fused_run_case): the gates' pre-activations sum H = 256 products
 * of size ~0.1 (|sum| ~ 1.6) and dh sums 4H = 1024, so float32 rounding leaves up to a few 1e-6
 * between the two orders (1.3e-6 on Zen 3's AVX2 kernels); a wrong row or a missing term is ~0.1 off */
#define FUSED_RTOL 1e-4
#define FUSED_ATOL 1e-5

/* On the CPU the cell kernels make the step's product with W_hh themselves, each thread its own
 * rows: against the plain kernels after a separate matrix product (nb_matmul), at 1 and 2 threads,
 * for a batch whose rows split across threads (B * H = 2^17) and one that does not. */
static void fused_product_case(int64_t B, int threads)
{
    nb_scope *s = nb_scope_begin();
    nb_manual_seed(11);
    int64_t H = 256, G = 4 * H;
    nb_tensor *whh = NBT_CHECK(nb_mul_scalar(nb_randn((int64_t[2]){G, H}, 2, NULL), 0.1));
    nb_tensor *wt = NBT_CHECK(nb_contiguous(nb_t(whh)));
    nb_tensor *xp = NBT_CHECK(nb_randn((int64_t[3]){2, B, G}, 3, NULL));
    nb_tensor *y0 = NBT_CHECK(nb_randn((int64_t[4]){2, 3, B, H}, 4, NULL));
    nb_tensor *act0 = NBT_CHECK(nb_randn((int64_t[3]){2, B, G}, 3, NULL));
    nb_tensor *gy = NBT_CHECK(nb_randn((int64_t[4]){2, 3, B, H}, 4, NULL));
    nb_tensor *dhc0 = NBT_CHECK(nb_randn((int64_t[3]){2, B, H}, 3, NULL));
    int prev = nb_get_num_threads();
    NBT_OK(nb_set_num_threads(threads));
    /* forward, step 1: act[1] = Y[0, 1] W_hh^T, then the cells */
    nb_tensor *y_f = NBT_CHECK(nb_clone(y0)), *act_f = NBT_CHECK(nb_clone(act0));
    nb_kargs f = {.out = y_f, .out2 = act_f, .in = {xp, wt}, .i0 = 1, .flag = true};
    NBT_OK(nb__dispatch(NB_OP_LSTM_CELL, &f));
    nb_tensor *y_p = NBT_CHECK(nb_clone(y0)), *act_p = NBT_CHECK(nb_clone(act0));
    nb_tensor *prod = NBT_CHECK(nb_matmul(nb_select(nb_select(y0, 0, 0), 0, 1), nb_t(whh)));
    NBT_OK(nb_copy_(nb_select(act_p, 0, 1), prod));
    nb_kargs fp = {.out = y_p, .out2 = act_p, .in = {xp}, .i0 = 1, .flag = true};
    NBT_OK(nb__dispatch(NB_OP_LSTM_CELL, &fp));
    nbt_assert_close(y_f, y_p, FUSED_RTOL, FUSED_ATOL, "fused forward: h and c");
    nbt_assert_close(act_f, act_p, FUSED_RTOL, FUSED_ATOL, "fused forward: gates");
    /* backward, step 1: the gate gradients, then dh = dgates[1] W_hh */
    nb_tensor *dg_f = NBT_CHECK(nb_zeros((int64_t[3]){2, B, G}, 3, NULL)), *dhc_f = NBT_CHECK(nb_clone(dhc0));
    nb_kargs b = {.out = dg_f, .out2 = dhc_f, .in = {gy, y_p, act_p, whh}, .i0 = 1};
    NBT_OK(nb__dispatch(NB_OP_LSTM_CELL_BACKWARD, &b));
    nb_tensor *dg_p = NBT_CHECK(nb_zeros((int64_t[3]){2, B, G}, 3, NULL)), *dhc_p = NBT_CHECK(nb_clone(dhc0));
    nb_kargs bp = {.out = dg_p, .out2 = dhc_p, .in = {gy, y_p, act_p}, .i0 = 1};
    NBT_OK(nb__dispatch(NB_OP_LSTM_CELL_BACKWARD, &bp));
    NBT_OK(nb_copy_(nb_select(dhc_p, 0, 0), NBT_CHECK(nb_matmul(nb_select(dg_p, 0, 1), whh))));
    NBT_OK(nb_set_num_threads(prev));
    nbt_assert_close(dg_f, dg_p, 0, 0, "fused backward: gate gradients");
    nbt_assert_close(dhc_f, dhc_p, FUSED_RTOL, FUSED_ATOL, "fused backward: dh and dc");
    nb_scope_end(s);
}

/* A run of T steps in one call of each cell kernel (i1 = T, as src/nn/lstm.c and rules_rnn.c make
 * them on the CPU) against the plain kernels one step at a time with each step's product by
 * nb_matmul: the forward with and without an initial state (flag), the backward with and without
 * the product at t = 0 (flag). */
static void fused_run_case(int64_t B, int threads, bool flag)
{
    nb_scope *s = nb_scope_begin();
    nb_manual_seed(12);
    int64_t T = 4, H = 256, G = 4 * H;
    nb_tensor *whh = NBT_CHECK(nb_mul_scalar(nb_randn((int64_t[2]){G, H}, 2, NULL), 0.1));
    nb_tensor *wt = NBT_CHECK(nb_contiguous(nb_t(whh)));
    nb_tensor *xp = NBT_CHECK(nb_randn((int64_t[3]){T, B, G}, 3, NULL));
    nb_tensor *y0 = NBT_CHECK(nb_randn((int64_t[4]){2, T + 1, B, H}, 4, NULL));
    nb_tensor *gy = NBT_CHECK(nb_randn((int64_t[4]){2, T + 1, B, H}, 4, NULL));
    nb_tensor *dhc0 = NBT_CHECK(nb_randn((int64_t[3]){2, B, H}, 3, NULL));
    int prev = nb_get_num_threads();
    NBT_OK(nb_set_num_threads(threads));
    nb_tensor *y_f = NBT_CHECK(nb_clone(y0)), *act_f = NBT_CHECK(nb_zeros((int64_t[3]){T, B, G}, 3, NULL));
    nb_kargs f = {.out = y_f, .out2 = act_f, .in = {xp, wt}, .i0 = 0, .i1 = T, .flag = flag};
    NBT_OK(nb__dispatch(NB_OP_LSTM_CELL, &f));
    nb_tensor *y_p = NBT_CHECK(nb_clone(y0)), *act_p = NBT_CHECK(nb_zeros((int64_t[3]){T, B, G}, 3, NULL));
    for (int64_t t = 0; t < T; t++) {
        bool rec = t > 0 || flag;
        if (rec) {
            nb_tensor *h = nb_select(nb_select(y_p, 0, 0), 0, t);
            NBT_OK(nb_copy_(nb_select(act_p, 0, t), NBT_CHECK(nb_matmul(h, nb_t(whh)))));
        }
        nb_kargs fp = {.out = y_p, .out2 = act_p, .in = {xp}, .i0 = t, .flag = rec};
        NBT_OK(nb__dispatch(NB_OP_LSTM_CELL, &fp));
    }
    char what[96];
    snprintf(what, sizeof what, "run of %lld steps, B %lld, %d threads, flag %d: forward", (long long)T,
             (long long)B, threads, flag);
    nbt_assert_close(y_f, y_p, FUSED_RTOL, FUSED_ATOL, what);
    nbt_assert_close(act_f, act_p, FUSED_RTOL, FUSED_ATOL, what);
    nb_tensor *dg_f = NBT_CHECK(nb_zeros((int64_t[3]){T, B, G}, 3, NULL)), *dhc_f = NBT_CHECK(nb_clone(dhc0));
    nb_kargs b = {.out = dg_f, .out2 = dhc_f, .in = {gy, y_p, act_p, whh}, .i0 = T - 1, .i1 = T, .flag = flag};
    NBT_OK(nb__dispatch(NB_OP_LSTM_CELL_BACKWARD, &b));
    nb_tensor *dg_p = NBT_CHECK(nb_zeros((int64_t[3]){T, B, G}, 3, NULL)), *dhc_p = NBT_CHECK(nb_clone(dhc0));
    for (int64_t t = T - 1; t >= 0; t--) {
        nb_kargs bp = {.out = dg_p, .out2 = dhc_p, .in = {gy, y_p, act_p}, .i0 = t};
        NBT_OK(nb__dispatch(NB_OP_LSTM_CELL_BACKWARD, &bp));
        if (t > 0 || flag)
            NBT_OK(nb_copy_(nb_select(dhc_p, 0, 0), NBT_CHECK(nb_matmul(nb_select(dg_p, 0, t), whh))));
    }
    NBT_OK(nb_set_num_threads(prev));
    snprintf(what, sizeof what, "run of %lld steps, B %lld, %d threads, flag %d: backward", (long long)T,
             (long long)B, threads, flag);
    nbt_assert_close(dg_f, dg_p, FUSED_RTOL, FUSED_ATOL, what);
    nbt_assert_close(dhc_f, dhc_p, FUSED_RTOL, FUSED_ATOL, what);
    nb_scope_end(s);
}

static void test_fused_product(void **state)
{
    (void)state;
    for (int threads = 1; threads <= 2; threads++) {
        fused_product_case(512, threads);
        fused_product_case(3, threads);
        for (int flag = 0; flag < 2; flag++) {
            fused_run_case(512, threads, flag);
            fused_run_case(3, threads, flag);
        }
    }
}

/* One case of the bias gradient the cell backward sums (rules_rnn.c, LSTM_LAYER): a 1-layer LSTM
 * with bias over x [5, B, 4], H = 32, and loss sum(out * r). Its bias gradients against those of
 * the same LSTM without bias whose input has a column of ones more and whose W_ih has b_ih + b_hh
 * as a column more: that column's gradient is the bias's, made by the weight gradient's product
 * dgates^T [x, 1]. The backward must run no `sum` (the engine's reduction over dgates). */
static void bias_case(nb_dtype dt, int threads, int64_t B)
{
    nb_scope *s = nb_scope_begin();
    int prev = nb_get_num_threads();
    NBT_OK(nb_set_num_threads(threads));
    nb_manual_seed(9);
    int64_t T = 5, I = 4, H = 32;
    nb_tensor_params tp = nb_tensor_params_default();
    tp.dtype = dt;
    nb_lstm_params p = nb_lstm_params_default();
    p.hidden_size = H;
    nb_tensor *w[4];
    NBT_OK(nb_lstm_init_weights(I, 1, &p, &tp, w));
    nb_tensor *x = NBT_CHECK(nb_randn((int64_t[3]){T, B, I}, 3, &tp));
    nb_tensor *r = NBT_CHECK(nb_randn((int64_t[3]){T, B, H}, 3, &tp));
    nb_tensor *out = NBT_CHECK(nb_lstm(x, NULL, NULL, w, 4, 1, &p, NULL, NULL));
    nb_tensor *loss = NBT_CHECK(nb_sum(nb_mul(out, r), NULL, 0, false));
    NBT_OK(nb_profiler_start(NB_PROFILE_HOST));
    NBT_OK(nb_backward(loss, NULL, NB_BACKWARD_DEFAULT));
    nb_profiler_stop();
    char what[96];
    snprintf(what, sizeof what, "%s, B %lld, %d threads", nb_dtype_name(dt), (long long)B, threads);
    int64_t sums = nbt_profiled_calls("sum");
    if (sums != 0) fail_msg("%s: %lld sums in the backward", what, (long long)sums);

    nb_tensor *xa[2] = {x, NBT_CHECK(nb_ones((int64_t[3]){T, B, 1}, 3, &tp))};
    nb_tensor *bcol = NBT_CHECK(nb_reshape(nb_add(nb_detach(w[2]), nb_detach(w[3])), (int64_t[2]){4 * H, 1}, 2));
    nb_tensor *wa[2] = {NBT_CHECK(nb_detach(w[0])), bcol};
    nb_tensor *w2[2] = {nbt_leaf(NBT_CHECK(nb_cat(wa, 2, 1))), nbt_leaf(NBT_CHECK(nb_detach(w[1])))};
    nb_lstm_params q = p;
    q.bias = false;
    nb_tensor *out2 = NBT_CHECK(nb_lstm(NBT_CHECK(nb_cat(xa, 2, 2)), NULL, NULL, w2, 2, 1, &q, NULL, NULL));
    NBT_OK(nb_backward(NBT_CHECK(nb_sum(nb_mul(out2, r), NULL, 0, false)), NULL, NB_BACKWARD_DEFAULT));
    nb_tensor *want = NBT_CHECK(nb_reshape(nb_narrow(nb_tensor_grad(w2[0]), 1, I, 1), (int64_t[1]){4 * H}, 1));
    double rtol = dt == NB_FLOAT32 ? 1e-5 : 1e-12, atol = dt == NB_FLOAT32 ? 1e-5 : 1e-12;
    nbt_assert_close(NBT_CHECK(nb_tensor_grad(w[2])), want, rtol, atol, what);
    nbt_assert_close(NBT_CHECK(nb_tensor_grad(w[3])), want, rtol, atol, what);
    NBT_OK(nb_set_num_threads(prev));
    nb_scope_end(s);
}

/* A layer's bias gradient summed by the cell backward as it writes dgates: float32 and float64,
 * 1 and 2 threads, a batch of 3 and of 600 (B H = 19200: the rows split across 2 threads). */
static void test_bias_ahead(void **state)
{
    (void)state;
    for (int f = 0; f < 2; f++)
        for (int th = 1; th <= 2; th++) {
            bias_case(f ? NB_FLOAT64 : NB_FLOAT32, th, 3);
            bias_case(f ? NB_FLOAT64 : NB_FLOAT32, th, 600);
        }
}

/* The fused kernels check their operands (callers inside nabla always pass good ones). */
static void test_kernel_checks(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_tensor *y = NBT_CHECK(nb_zeros((int64_t[4]){2, 3, 2, 4}, 4, NULL));
    nb_tensor *act = NBT_CHECK(nb_zeros((int64_t[3]){2, 2, 16}, 3, NULL));
    nb_tensor *xp = NBT_CHECK(nb_zeros((int64_t[3]){2, 2, 16}, 3, NULL));
    nb_tensor *xi = NBT_CHECK(nb_zeros((int64_t[3]){2, 2, 16}, 3, &(nb_tensor_params){.dtype = NB_INT64}));
    nb_kargs k = {.out = y, .out2 = act, .in = {xp}, .i0 = 0};
    NBT_OK(nb__dispatch(NB_OP_LSTM_CELL, &k));
    k.i0 = 2;
    NBT_FAILS(nb__dispatch(NB_OP_LSTM_CELL, &k) != NB_OK, NB_ERR_INTERNAL, "lstm_cell", "steps 2 to 2", NULL);
    k.i0 = 0;
    k.i1 = 3; /* a run past the last step */
    NBT_FAILS(nb__dispatch(NB_OP_LSTM_CELL, &k) != NB_OK, NB_ERR_INTERNAL, "lstm_cell", "steps 0 to 2", NULL);
    k.i1 = 2; /* a run needs the product's weight: the caller's product would come between steps */
    NBT_FAILS(nb__dispatch(NB_OP_LSTM_CELL, &k) != NB_OK, NB_ERR_INTERNAL, "lstm_cell", "run of 2 steps",
              "without the product's weight", NULL);
    k.i1 = 0;
    k.in[0] = xi;
    NBT_FAILS(nb__dispatch(NB_OP_LSTM_CELL, &k) != NB_OK, NB_ERR_INTERNAL, "lstm_cell", "operand 2", NULL);
    k.in[0] = NBT_CHECK(nb_transpose(xp, 0, 1));
    NBT_FAILS(nb__dispatch(NB_OP_LSTM_CELL, &k) != NB_OK, NB_ERR_INTERNAL, "lstm_cell", "not contiguous", NULL);
    nb_kargs b = {.out = xp, .out2 = y, .in = {y, y, NULL}};
    NBT_FAILS(nb__dispatch(NB_OP_LSTM_CELL_BACKWARD, &b) != NB_OK, NB_ERR_INTERNAL, "lstm_cell_backward",
              "bad operands", NULL);
    nb_tensor *yi = NBT_CHECK(nb_zeros((int64_t[4]){2, 3, 2, 4}, 4, &(nb_tensor_params){.dtype = NB_INT64}));
    nb_kargs w = {.out = y, .out2 = act, .in = {xp, act}, .i0 = 1, .flag = true};
    NBT_FAILS(nb__dispatch(NB_OP_LSTM_CELL, &w) != NB_OK, NB_ERR_INTERNAL, "lstm_cell", "product's weight",
              "contiguous [4, 16]", NULL);
    nb_kargs d = {.out = yi, .out2 = xi, .in = {xi}};
    NBT_FAILS(nb__dispatch(NB_OP_LSTM_CELL, &d) != NB_OK, NB_ERR_DTYPE, "lstm_cell", "int64", "float32/float64",
              NULL);
    nb_scope_end(s);
}

/* ---- errors ---------------------------------------------------------------------------------- */

static void test_errors(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_lstm_params p = nb_lstm_params_default();
    p.hidden_size = 4;
    nb_tensor *w[MAXW], *hn = (nb_tensor *)1, *cn = (nb_tensor *)1;
    NBT_OK(nb_lstm_init_weights(3, 2, &p, NULL, w));
    nb_tensor *x = NBT_CHECK(nb_randn((int64_t[3]){5, 2, 3}, 3, NULL));
    nb_tensor *x5 = NBT_CHECK(nb_randn((int64_t[3]){5, 2, 5}, 3, NULL));
    nb_tensor *h_bad = NBT_CHECK(nb_zeros((int64_t[3]){1, 2, 4}, 3, NULL));
    nb_tensor *c_bad = NBT_CHECK(nb_zeros((int64_t[3]){2, 3, 4}, 3, NULL));
    NBT_FAILS(nb_lstm(x5, NULL, NULL, w, 8, 2, &p, &hn, &cn) == NULL, NB_ERR_SHAPE, "weight_ih_l0", "[16, 3]",
              "expected [16, 5]", NULL);
    assert_null(hn);
    assert_null(cn);
    NBT_FAILS(nb_lstm(x, h_bad, NULL, w, 8, 2, &p, NULL, NULL) == NULL, NB_ERR_SHAPE, "h0", "[1, 2, 4]",
              "expected [2, 2, 4]", NULL);
    NBT_FAILS(nb_lstm(x, NULL, c_bad, w, 8, 2, &p, NULL, NULL) == NULL, NB_ERR_SHAPE, "c0", "[2, 3, 4]", NULL);
    NBT_FAILS(nb_lstm(x, NULL, NULL, w, 6, 2, &p, NULL, NULL) == NULL, NB_ERR_INVALID_ARG, "expected 8 weights",
              "2 layers with bias", "got 6", NULL);
    NBT_FAILS(nb_lstm(x, NULL, NULL, w, 4, 1, &(nb_lstm_params){4, false, false}, NULL, NULL) == NULL,
              NB_ERR_INVALID_ARG, "expected 2 weights", "without bias", "got 4", NULL);
    /* layer 1's weight_ih must be [4H, H]: pass layer 0's weights twice with input size != H */
    nb_tensor *ww[8] = {w[0], w[1], w[2], w[3], w[0], w[1], w[2], w[3]};
    NBT_FAILS(nb_lstm(x, NULL, NULL, ww, 8, 2, &p, NULL, NULL) == NULL, NB_ERR_SHAPE, "weight_ih_l1", "[16, 3]",
              "expected [16, 4]", NULL);
    nb_tensor *wn[8] = {w[0], w[1], NULL, w[3], w[4], w[5], w[6], w[7]};
    NBT_FAILS(nb_lstm(x, NULL, NULL, wn, 8, 2, &p, NULL, NULL) == NULL, NB_ERR_INVALID_ARG, "bias_ih_l0 is NULL",
              NULL);
    nb_tensor *x64 = NBT_CHECK(nb_to_dtype(x, NB_FLOAT64));
    NBT_FAILS(nb_lstm(x64, NULL, NULL, w, 8, 2, &p, NULL, NULL) == NULL, NB_ERR_DTYPE, "weight_ih_l0 is float32",
              "input is float64", NULL);
    nb_tensor *xi = NBT_CHECK(nb_zeros((int64_t[3]){5, 2, 3}, 3, &(nb_tensor_params){.dtype = NB_INT64}));
    NBT_FAILS(nb_lstm(xi, NULL, NULL, w, 8, 2, &p, NULL, NULL) == NULL, NB_ERR_DTYPE, "floating", "int64", NULL);
    nb_tensor *x2 = NBT_CHECK(nb_randn((int64_t[2]){5, 3}, 2, NULL));
    NBT_FAILS(nb_lstm(x2, NULL, NULL, w, 8, 2, &p, NULL, NULL) == NULL, NB_ERR_SHAPE, "3-D", "[5, 3]", NULL);
    nb_tensor *x0 = NBT_CHECK(nb_zeros((int64_t[3]){0, 2, 3}, 3, NULL));
    NBT_FAILS(nb_lstm(x0, NULL, NULL, w, 8, 2, &p, NULL, NULL) == NULL, NB_ERR_SHAPE, "[0, 2, 3]", NULL);
    NBT_FAILS(nb_lstm(x, NULL, NULL, w, 8, 0, &p, NULL, NULL) == NULL, NB_ERR_INVALID_ARG, "num_layers", "got 0",
              NULL);
    nb_lstm_params p0 = nb_lstm_params_default();
    NBT_FAILS(nb_lstm(x, NULL, NULL, w, 8, 2, &p0, NULL, NULL) == NULL, NB_ERR_INVALID_ARG, "hidden_size", "got 0",
              NULL);
    NBT_FAILS(nb_lstm(x, NULL, NULL, w, 8, 2, NULL, NULL, NULL) == NULL, NB_ERR_INVALID_ARG, "NULL params", NULL);
    NBT_FAILS(nb_lstm(NULL, NULL, NULL, w, 8, 2, &p, NULL, NULL) == NULL, NB_ERR_INVALID_ARG, "NULL input", NULL);
    nb_scope_end(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference), cmocka_unit_test(test_gradcheck), cmocka_unit_test(test_init_and_names),
        cmocka_unit_test(test_no_grad),   cmocka_unit_test(test_errors),        cmocka_unit_test(test_one_state),
        cmocka_unit_test(test_threads),   cmocka_unit_test(test_fused_product), cmocka_unit_test(test_kernel_checks),
        cmocka_unit_test(test_bias_ahead),
    };
    return NBT_RUN(tests);
}
