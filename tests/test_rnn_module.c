/* Tests of the LSTM module and the LSTM language model (nabla/rnn.h) against PyTorch
 * (tests/ref/cases_rnn_module.py, torch 1.13; the LM is bench/dlbench/torch_lm.py's LSTMLM):
 *  - LSTM module: state_dict names and order, forward with and without initial states, final
 *    states and every gradient after loading torch's state_dict; the single-input forward;
 *  - LSTMLM: names, parameter count, logits, cross-entropy loss over B*T and all parameter
 *    gradients; stateful mode over two consecutive mini-batches against torch carrying the
 *    detached state; state reset on a batch-size change, on reset_state and when switched off;
 *  - DLBench's configuration's parameter count (no weights compared);
 *  - initialisation ranges, and every error path.
 * Tolerances: float32 rtol 1e-5 atol 1e-6 (1e-4 / 1e-6 for the LM, whose gradients sum over
 * B*T steps through a softmax); float64 rtol 1e-10 atol 1e-12. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbtest.h"
#include "nabla/rnn.h"

enum { MAXN = 64 };

/* torch's state-dict keys, split from the newline-joined uint8 tensor into buf (malloc'd). */
static char *ref_names(const nb_tensor_map *m, const char *prefix, char **names, int *count)
{
    nb_tensor *t = NBT_CHECK(nbt_ref(m, prefix, "names"));
    size_t n = (size_t)nb_tensor_numel(t);
    char *buf = malloc(n + 1);
    assert_non_null(buf);
    NBT_OK(nb_tensor_read(t, buf, n));
    buf[n] = 0;
    *count = 0;
    for (char *tok = strtok(buf, "\n"); tok && *count < MAXN; tok = strtok(NULL, "\n")) names[(*count)++] = tok;
    return buf;
}

/* Asserts m's state-dict keys equal torch's (order included) and, with load, loads sd:<key>. */
static void check_names_and_load(nb_module *m, const nb_tensor_map *ref, const char *prefix, bool load)
{
    char *want[MAXN];
    int nwant = 0;
    char *buf = ref_names(ref, prefix, want, &nwant);
    nb_tensor_map *sd = NBT_CHECK(nb_tensor_map_create());
    NBT_OK(nb_module_state_dict(m, sd));
    assert_int_equal(nb_tensor_map_size(sd), nwant);
    nb_tensor_map *in = NBT_CHECK(nb_tensor_map_create());
    for (int i = 0; i < nwant; i++) {
        if (strcmp(nb_tensor_map_name(sd, i), want[i]))
            fail_msg("%s: key %d is %s, torch has %s", prefix, i, nb_tensor_map_name(sd, i), want[i]);
        if (!load) continue;
        char key[160];
        snprintf(key, sizeof key, "sd:%s", want[i]);
        NBT_OK(nb_tensor_map_set(in, want[i], NBT_CHECK(nbt_ref(ref, prefix, key))));
    }
    if (load) NBT_OK(nb_module_load_state_dict(m, in, true));
    nb_tensor_map_free(in);
    nb_tensor_map_free(sd);
    free(buf);
}

static void check_grad(const nb_tensor *leaf, const nb_tensor *want, double rtol, double atol, const char *what)
{
    nb_tensor *g = nb_tensor_grad(leaf);
    if (!g) fail_msg("%s: no gradient", what);
    nbt_assert_close(g, want, rtol, atol, what);
}

/* Compares the gradient of every named parameter with <prefix>/<gkey><name>. */
static void check_param_grads(nb_module *m, const nb_tensor_map *ref, const char *prefix, const char *gkey,
                              double rtol, double atol)
{
    const char *names[MAXN];
    nb_tensor *ps[MAXN];
    int n = nb_module_named_parameters(m, names, ps, MAXN);
    assert_true(n > 0 && n <= MAXN);
    for (int i = 0; i < n; i++) {
        char key[160], what[200];
        snprintf(key, sizeof key, "%s%s", gkey, names[i]);
        snprintf(what, sizeof what, "%s %s", prefix, key);
        check_grad(ps[i], NBT_CHECK(nbt_ref(ref, prefix, key)), rtol, atol, what);
    }
}

static nb_tensor_params dtype_params(const nb_tensor *like)
{
    nb_tensor_params tp = nb_tensor_params_default();
    tp.dtype = nb_tensor_dtype(like);
    return tp;
}

/* ---- LSTM module ----------------------------------------------------------------------------- */

static nb_tensor *prep(nb_tensor *t, bool noncontig)
{
    return t ? nbt_leaf(noncontig ? NBT_CHECK(nbt_noncontig(t)) : t) : NULL;
}

/* sum(out * gout) + sum(hn * ghn) + sum(cn * gcn): its backward gives the gradients torch got. */
static nb_tensor *weighted(nb_tensor *out, nb_tensor *hn, nb_tensor *cn, nb_tensor *go, nb_tensor *gh, nb_tensor *gc)
{
    nb_tensor *a = NBT_CHECK(nb_sum(NBT_CHECK(nb_mul(out, go)), NULL, 0, false));
    nb_tensor *b = NBT_CHECK(nb_sum(NBT_CHECK(nb_mul(hn, gh)), NULL, 0, false));
    nb_tensor *c = NBT_CHECK(nb_sum(NBT_CHECK(nb_mul(cn, gc)), NULL, 0, false));
    return NBT_CHECK(nb_add(NBT_CHECK(nb_add(a, b)), c));
}

static void run_lstm(const nb_tensor_map *ref, const char *name, bool noncontig)
{
    int64_t cfg[5];
    NBT_OK(nb_tensor_read(NBT_CHECK(nbt_ref(ref, name, "config")), cfg, sizeof cfg));
    nb_tensor *x = prep(NBT_CHECK(nbt_ref(ref, name, "x")), noncontig);
    nb_tensor *h0 = prep(nbt_ref(ref, name, "h0"), noncontig), *c0 = prep(nbt_ref(ref, name, "c0"), noncontig);
    nb_tensor_params tp = dtype_params(x);
    nb_module *m = NBT_CHECK(nb_lstm_module(cfg[0], cfg[1], (int)cfg[2], cfg[3] != 0, cfg[4] != 0, &tp));
    assert_string_equal(nb_module_type_name(m), "LSTM");
    check_names_and_load(m, ref, name, true);
    bool f32 = nb_tensor_dtype(x) == NB_FLOAT32;
    double rtol = f32 ? 1e-5 : 1e-10, atol = f32 ? 1e-6 : 1e-12;
    nb_tensor *hn, *cn;
    nb_tensor *out = NBT_CHECK(nb_lstm_module_forward(m, x, h0, c0, &hn, &cn));
    char what[160];
    snprintf(what, sizeof what, "%s %s out", name, noncontig ? "noncontig" : "contig");
    nbt_assert_close(out, nbt_ref(ref, name, "out"), rtol, atol, what);
    nbt_assert_close(hn, nbt_ref(ref, name, "h_n"), rtol, atol, "h_n");
    nbt_assert_close(cn, nbt_ref(ref, name, "c_n"), rtol, atol, "c_n");
    if (!h0) /* the single-input forward: zero states */
        nbt_assert_close(NBT_CHECK(nb_module_forward(m, x)), out, 0, 0, "nb_module_forward");
    nb_tensor *loss =
        weighted(out, hn, cn, nbt_ref(ref, name, "gout"), nbt_ref(ref, name, "ghn"), nbt_ref(ref, name, "gcn"));
    NBT_OK(nb_backward(loss, NULL, NB_BACKWARD_DEFAULT));
    check_grad(x, nbt_ref(ref, name, "grad_x"), rtol, atol, "grad_x");
    if (h0) check_grad(h0, nbt_ref(ref, name, "grad_h0"), rtol, atol, "grad_h0");
    if (c0) check_grad(c0, nbt_ref(ref, name, "grad_c0"), rtol, atol, "grad_c0");
    check_param_grads(m, ref, name, "grad_", rtol, atol);
    nb_module_free(m);
}

/* ---- LSTMLM ---------------------------------------------------------------------------------- */

static void zero_grads(nb_module *m)
{
    nb_tensor *ps[MAXN];
    int n = nb_module_parameters(m, ps, MAXN);
    for (int i = 0; i < n; i++) NBT_OK(nb_tensor_set_grad(ps[i], NULL));
}

/* logits of tokens<i> compared with <want>; returns the logits. */
static nb_tensor *lm_step(nb_module *m, const nb_tensor_map *ref, const char *name, const char *tokens,
                          const char *want, bool noncontig, double rtol, double atol)
{
    nb_tensor *tok = NBT_CHECK(nbt_ref(ref, name, tokens));
    if (noncontig) tok = NBT_CHECK(nbt_noncontig(tok));
    nb_tensor *logits = NBT_CHECK(nb_module_forward(m, tok));
    char what[160];
    snprintf(what, sizeof what, "%s %s -> %s%s", name, tokens, want, noncontig ? " noncontig" : "");
    nbt_assert_close(logits, NBT_CHECK(nbt_ref(ref, name, want)), rtol, atol, what);
    return logits;
}

/* The mean cross entropy over B*T of logits [B, T, V] against targets<i>, checked against loss<i>;
 * backward, and every parameter gradient against grad<i>_<key>. */
static void lm_loss_and_grads(nb_module *m, const nb_tensor_map *ref, const char *name, nb_tensor *logits, int i,
                              double rtol, double atol)
{
    char key[32], gkey[32];
    const int64_t *s = nb_tensor_shape(logits);
    int64_t flat[2] = {s[0] * s[1], s[2]}, tflat = s[0] * s[1];
    snprintf(key, sizeof key, "targets%d", i);
    nb_tensor *tgt = NBT_CHECK(nb_reshape(NBT_CHECK(nbt_ref(ref, name, key)), &tflat, 1));
    nb_cross_entropy_params cp = nb_cross_entropy_params_default();
    nb_tensor *loss = NBT_CHECK(nb_cross_entropy(NBT_CHECK(nb_reshape(logits, flat, 2)), tgt, &cp));
    snprintf(key, sizeof key, "loss%d", i);
    nbt_assert_close(loss, NBT_CHECK(nbt_ref(ref, name, key)), rtol, atol, key);
    NBT_OK(nb_backward(loss, NULL, NB_BACKWARD_DEFAULT));
    snprintf(gkey, sizeof gkey, "grad%d_", i);
    check_param_grads(m, ref, name, gkey, rtol, atol);
}

static void run_lm(const nb_tensor_map *ref, const char *name, bool noncontig)
{
    int64_t cfg[6], count = 0;
    NBT_OK(nb_tensor_read(NBT_CHECK(nbt_ref(ref, name, "config")), cfg, sizeof cfg));
    nb_tensor_params tp = dtype_params(NBT_CHECK(nbt_ref(ref, name, "logits1")));
    nb_module *m = NBT_CHECK(nb_lstm_lm_create(cfg[0], cfg[1], cfg[2], (int)cfg[3], &tp));
    assert_string_equal(nb_module_type_name(m), "LSTMLM");
    NBT_OK(nb_item_int64(NBT_CHECK(nbt_ref(ref, name, "num_parameters")), &count));
    assert_int_equal(nb_module_num_parameters(m), count);
    check_names_and_load(m, ref, name, true);
    bool f32 = tp.dtype == NB_FLOAT32;
    double rtol = f32 ? 1e-4 : 1e-10, atol = f32 ? 1e-6 : 1e-12;
    /* default: stateless, every call from zeros */
    nb_tensor *l1 = lm_step(m, ref, name, "tokens1", "logits1", noncontig, rtol, atol);
    assert_int_equal(nb_tensor_ndim(l1), 3);
    assert_int_equal(nb_tensor_shape(l1)[2], cfg[0]);
    lm_loss_and_grads(m, ref, name, l1, 1, rtol, atol);
    lm_step(m, ref, name, "tokens2", "logits2_zero", noncontig, rtol, atol);
    /* stateful: the second mini-batch starts from the first's detached final state */
    zero_grads(m);
    NBT_OK(nb_lstm_lm_set_stateful(m, true));
    lm_step(m, ref, name, "tokens1", "logits1", noncontig, rtol, atol);
    zero_grads(m);
    nb_tensor *l2 = lm_step(m, ref, name, "tokens2", "logits2", noncontig, rtol, atol);
    lm_loss_and_grads(m, ref, name, l2, 2, rtol, atol);
    /* another batch size drops the state; so do reset_state and switching it off */
    lm_step(m, ref, name, "tokens3", "logits3", noncontig, rtol, atol);
    lm_step(m, ref, name, "tokens1", "logits1", noncontig, rtol, atol);
    NBT_OK(nb_lstm_lm_reset_state(m));
    lm_step(m, ref, name, "tokens2", "logits2_zero", noncontig, rtol, atol);
    NBT_OK(nb_lstm_lm_set_stateful(m, false));
    lm_step(m, ref, name, "tokens1", "logits1", noncontig, rtol, atol);
    lm_step(m, ref, name, "tokens2", "logits2_zero", noncontig, rtol, atol);
    /* eval mode and no-grad carry the state too; the module frees the last one */
    NBT_OK(nb_lstm_lm_set_stateful(m, true));
    nb_module_train(m, false);
    bool prev = nb_set_grad_enabled(false);
    lm_step(m, ref, name, "tokens1", "logits1", noncontig, rtol, atol);
    lm_step(m, ref, name, "tokens2", "logits2", noncontig, rtol, atol);
    NBT_OK(nb_module_to(m, nb_tensor_device(l1))); /* same device: the state stays usable */
    nb_tensor *again = NBT_CHECK(nb_module_forward(m, NBT_CHECK(nbt_ref(ref, name, "tokens1"))));
    double diff = 0;
    NBT_OK(nb_item(NBT_CHECK(nb_max(NBT_CHECK(nb_abs(NBT_CHECK(nb_sub(again, l1)))))), &diff));
    assert_true(diff > 1e-4); /* tokens1 from tokens2's final state, not from zeros */
    nb_set_grad_enabled(prev);
    nb_module_free(m);
}

/* DLBench's configuration: PyTorch's parameter count and names (weights are not compared).
 * PyTorch (and cuDNN) keep two bias vectors per LSTM layer: 6,182,672 parameters; DLBench's table
 * (one bias per layer, Torch FastLSTM / TF BasicLSTMCell) says 6,180,624 = 6,182,672 - 2 * 4 * 256. */
static void run_dlbench(const nb_tensor_map *ref, const char *name, bool noncontig)
{
    if (noncontig) return;
    int64_t count = 0;
    NBT_OK(nb_item_int64(NBT_CHECK(nbt_ref(ref, name, "num_parameters")), &count));
    assert_int_equal(count, 6182672);
    nb_module *m = NBT_CHECK(nb_lstm_lm_create(10000, 256, 256, 2, NULL));
    assert_int_equal(nb_module_num_parameters(m), count);
    assert_int_equal(nb_module_num_parameters(m) - 2 * 4 * 256, 6180624);
    check_names_and_load(m, ref, name, false);
    nb_module_free(m);
}

static void run_case(const nb_tensor_map *ref, const char *name, bool noncontig)
{
    if (!strncmp(name, "lstm_", 5)) run_lstm(ref, name, noncontig);
    else if (!strncmp(name, "lm/", 3)) run_lm(ref, name, noncontig);
    else if (!strncmp(name, "dlbench/", 8)) run_dlbench(ref, name, noncontig);
    else fail_msg("unknown case %s", name);
}

static void test_reference(void **state)
{
    (void)state;
    nbt_run_reference("rnn_module", 9, run_case);
}

/* ---- initialisation -------------------------------------------------------------------------- */

static void test_init(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_tensor_params tp = nb_tensor_params_default();
    tp.generator = NBT_CHECK(nb_generator_create(5));
    nb_module *m = NBT_CHECK(nb_lstm_module(7, 20, 2, false, true, &tp));
    nb_generator_manual_seed(tp.generator, 5);
    nb_module *m2 = NBT_CHECK(nb_lstm_module(7, 20, 2, false, true, &tp));
    const char *names[MAXN];
    nb_tensor *ps[MAXN], *ps2[MAXN];
    assert_int_equal(nb_module_named_parameters(m, names, ps, MAXN), 8);
    assert_int_equal(nb_module_parameters(m2, ps2, MAXN), 8);
    static const char *const want[8] = {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                                        "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1"};
    double k = 1.0 / sqrt(20.0);
    for (int i = 0; i < 8; i++) {
        assert_string_equal(names[i], want[i]);
        assert_int_equal(nb_tensor_shape(ps[i])[0], 80);
        if (i % 4 < 2) assert_int_equal(nb_tensor_shape(ps[i])[1], i == 0 ? 7 : 20);
        assert_true(nb_tensor_requires_grad(ps[i]) && nb_tensor_is_leaf(ps[i]));
        double mx, mn;
        NBT_OK(nb_item(NBT_CHECK(nb_max(ps[i])), &mx));
        NBT_OK(nb_item(NBT_CHECK(nb_min(ps[i])), &mn));
        assert_true(mx < k && mn >= -k && mx > 0.8 * k && mn < -0.8 * k); /* U(-k, k) spans the range */
        nbt_assert_close(ps2[i], ps[i], 0, 0, "same seed, same weights");
    }
    /* 4 H (in + H) + 8 H per layer */
    assert_int_equal(nb_module_num_parameters(m), 80 * 27 + 80 * 40 + 4 * 80);
    nb_module_free(m);
    nb_module_free(m2);
    m = NBT_CHECK(nb_lstm_module(3, 4, 3, true, false, NULL));
    assert_int_equal(nb_module_parameters(m, NULL, 0), 6);
    assert_int_equal(nb_tensor_dtype(nb_module_get_parameter(m, "weight_hh_l2")), NB_FLOAT32);
    assert_null(nb_module_get_parameter(m, "bias_ih_l0"));
    nb_module_free(m);
    /* the LM's float64 parameters and children */
    tp.dtype = NB_FLOAT64;
    m = NBT_CHECK(nb_lstm_lm_create(11, 3, 5, 1, &tp));
    assert_string_equal(nb_module_type_name(nb_module_get_module(m, "encoder")), "Embedding");
    assert_string_equal(nb_module_type_name(nb_module_get_module(m, "rnn")), "LSTM");
    assert_string_equal(nb_module_type_name(nb_module_get_module(m, "decoder")), "Linear");
    assert_int_equal(nb_module_num_parameters(m), 11 * 3 + 20 * 8 + 40 + 5 * 11 + 11);
    assert_int_equal(nb_tensor_dtype(nb_module_get_parameter(nb_module_get_module(m, "rnn"), "weight_ih_l0")),
                     NB_FLOAT64);
    nb_module_free(m);
    nb_generator_free(tp.generator);
    nb_scope_end(s);
}

/* ---- errors ---------------------------------------------------------------------------------- */

static void test_module_errors(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    NBT_FAILS(nb_lstm_module(0, 4, 1, false, true, NULL) == NULL, NB_ERR_INVALID_ARG, "LSTM", "input_size 0", NULL);
    NBT_FAILS(nb_lstm_module(3, 0, 1, false, true, NULL) == NULL, NB_ERR_INVALID_ARG, "hidden_size 0", NULL);
    NBT_FAILS(nb_lstm_module(3, 4, 0, false, true, NULL) == NULL, NB_ERR_INVALID_ARG, "num_layers 0", NULL);
    nb_tensor_params ip = nb_tensor_params_default();
    ip.dtype = NB_INT64;
    NBT_FAILS(nb_lstm_module(3, 4, 1, false, true, &ip) == NULL, NB_ERR_DTYPE, "LSTM", "int64", NULL);
    nb_module *m = NBT_CHECK(nb_lstm_module(3, 4, 2, true, true, NULL));
    nb_module *lin = NBT_CHECK(nb_linear_module(3, 4, true, NULL));
    int64_t xs[3] = {2, 5, 3}, bad[3] = {2, 5, 4}, ss[3] = {2, 2, 4}, sbad[3] = {2, 3, 4};
    nb_tensor *x = NBT_CHECK(nb_randn(xs, 3, NULL)), *h = NBT_CHECK(nb_zeros(ss, 3, NULL));
    nb_tensor *hn = x, *cn = x;
    NBT_FAILS(nb_lstm_module_forward(NULL, x, NULL, NULL, &hn, &cn) == NULL, NB_ERR_INVALID_ARG, "NULL module", NULL);
    assert_null(hn);
    assert_null(cn);
    NBT_FAILS(nb_lstm_module_forward(lin, x, NULL, NULL, NULL, NULL) == NULL, NB_ERR_INVALID_ARG, "Linear",
              "not an LSTM", NULL);
    NBT_FAILS(nb_lstm_module_forward(m, NULL, NULL, NULL, NULL, NULL) == NULL, NB_ERR_INVALID_ARG, "NULL input",
              NULL);
    NBT_FAILS(nb_lstm_module_forward(m, NBT_CHECK(nb_randn(bad, 3, NULL)), NULL, NULL, NULL, NULL) == NULL,
              NB_ERR_SHAPE, "LSTM: input has shape [2, 5, 4]", "input_size 3", NULL);
    NBT_FAILS(nb_module_forward(m, NBT_CHECK(nb_randn(xs, 2, NULL))) == NULL, NB_ERR_SHAPE, "[2, 5]", NULL);
    hn = x;
    NBT_FAILS(nb_lstm_module_forward(m, x, NBT_CHECK(nb_zeros(sbad, 3, NULL)), NULL, &hn, NULL) == NULL, NB_ERR_SHAPE,
              "h0 has shape [2, 3, 4]", "expected [2, 2, 4]", NULL);
    assert_null(hn);
    NBT_FAILS(nb_lstm_module_forward(m, x, h, NBT_CHECK(nb_zeros(ss, 2, NULL)), NULL, NULL) == NULL, NB_ERR_SHAPE,
              "c0 has shape [2, 2]", NULL);
    nb_tensor_params dp = nb_tensor_params_default();
    dp.dtype = NB_FLOAT64;
    NBT_FAILS(nb_lstm_module_forward(m, NBT_CHECK(nb_randn(xs, 3, &dp)), NULL, NULL, NULL, NULL) == NULL, NB_ERR_DTYPE,
              "float64", "float32", NULL);
    /* h0 alone and c0 alone are accepted (the other one zeros) */
    NBT_CHECK(nb_lstm_module_forward(m, x, h, NULL, NULL, NULL));
    NBT_CHECK(nb_lstm_module_forward(m, x, NULL, h, NULL, NULL));
    nb_module_free(m);
    nb_module_free(lin);
    nb_scope_end(s);
}

static void test_lm_errors(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    NBT_FAILS(nb_lstm_lm_create(0, 4, 4, 1, NULL) == NULL, NB_ERR_INVALID_ARG, "LSTMLM", "vocab_size 0", NULL);
    NBT_FAILS(nb_lstm_lm_create(5, 4, 4, 0, NULL) == NULL, NB_ERR_INVALID_ARG, "num_layers 0", NULL);
    nb_tensor_params ip = nb_tensor_params_default();
    ip.dtype = NB_INT32;
    NBT_FAILS(nb_lstm_lm_create(5, 4, 4, 1, &ip) == NULL, NB_ERR_DTYPE, "LSTMLM", "int32", NULL);
    nb_module *lm = NBT_CHECK(nb_lstm_lm_create(5, 4, 3, 1, NULL));
    nb_module *lstm = NBT_CHECK(nb_lstm_module(3, 4, 1, false, true, NULL));
    NBT_FAILS(nb_lstm_lm_set_stateful(NULL, true) != NB_OK, NB_ERR_INVALID_ARG, "lstm_lm_set_stateful", "NULL", NULL);
    NBT_FAILS(nb_lstm_lm_set_stateful(lstm, true) != NB_OK, NB_ERR_INVALID_ARG, "LSTM, not an LSTMLM", NULL);
    NBT_FAILS(nb_lstm_lm_reset_state(lstm) != NB_OK, NB_ERR_INVALID_ARG, "lstm_lm_reset_state", "not an LSTMLM",
              NULL);
    NBT_FAILS(nb_lstm_lm_reset_state(NULL) != NB_OK, NB_ERR_INVALID_ARG, "NULL module", NULL);
    NBT_FAILS(nb_lstm_module_forward(lm, NULL, NULL, NULL, NULL, NULL) == NULL, NB_ERR_INVALID_ARG, "LSTMLM",
              "not an LSTM", NULL);
    NBT_OK(nb_lstm_lm_set_stateful(lm, true));
    int64_t ts[2] = {2, 3}, t3[3] = {2, 3, 1};
    nb_tensor_params tk = nb_tensor_params_default();
    tk.dtype = NB_INT64;
    NBT_FAILS(nb_module_forward(lm, NBT_CHECK(nb_zeros(ts, 2, NULL))) == NULL, NB_ERR_SHAPE,
              "LSTMLM: tokens must be integer [B, T], got float32 [2, 3]", NULL);
    NBT_FAILS(nb_module_forward(lm, NBT_CHECK(nb_zeros(t3, 3, &tk))) == NULL, NB_ERR_SHAPE, "int64 [2, 3, 1]", NULL);
    nb_tensor *big = NBT_CHECK(nb_full(ts, 2, 5.0, &tk));
    NBT_FAILS(nb_module_forward(lm, big) == NULL, NB_ERR_INVALID_ARG, "embedding", "index 5 is out of range", NULL);
    /* a failed forward leaves the module usable */
    nb_tensor *y = NBT_CHECK(nb_module_forward(lm, NBT_CHECK(nb_zeros(ts, 2, &tk))));
    assert_int_equal(nb_tensor_shape(y)[2], 5);
    nb_module_free(lm);
    nb_module_free(lstm);
    nb_scope_end(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_module_errors),
        cmocka_unit_test(test_lm_errors),
    };
    return NBT_RUN(tests);
}
