/* CUDA graphs (nb_cuda_graph_*): a captured training step (embedding, linear layers, cross
 * entropy, SGD with momentum; and the stateful LSTM language model with clipping, whose carried
 * state must pass from replay to replay) replayed on new batches gives the parameters and losses
 * of the same steps run eagerly; an index out of range met by a replay is reported by nb_cuda_graph_check with
 * the op and the value, and the replay writes nothing out of bounds; what cannot be captured
 * (reading back, random numbers, Adam, SGD's first momentum step, pinning) fails naming the op and spoils
 * the capture; the graph's memory is returned when it is freed. Exits 77 (ctest: Skipped)
 * without a GPU. */
#include <math.h>
#include <stdio.h>

#include "nbtest.h"
#include "nabla/cuda.h"

enum { B = 16, V = 50, E = 12, H = 24, C = 5, STEPS = 4, NP = 5 };

typedef struct net {
    nb_tensor *p[NP]; /* embedding [V, E], W1 [H, E], b1 [H], W2 [C, H], b2 [C] */
} net;

static void make_net(net *n, const net *like)
{
    const int64_t shapes[NP][2] = {{V, E}, {H, E}, {H, 0}, {C, H}, {C, 0}};
    for (int i = 0; i < NP; i++) {
        int nd = shapes[i][1] ? 2 : 1;
        nb_tensor *t = like ? nb_clone(like->p[i])
                            : nbt_to_cuda(NBT_CHECK(nb_mul_scalar(NBT_CHECK(nb_randn(shapes[i], nd, NULL)), 0.3)));
        n->p[i] = nb_tensor_retain(NBT_CHECK(nb_detach(NBT_CHECK(t))));
        NBT_OK(nb_tensor_set_requires_grad(n->p[i], true));
    }
}

static void free_net(net *n)
{
    for (int i = 0; i < NP; i++) nb_tensor_free(n->p[i]);
}

/* tokens [B, 3] -> mean of their embeddings -> linear, relu, linear -> cross entropy with y [B] */
static nb_tensor *loss_of(const net *n, const nb_tensor *tok, const nb_tensor *y)
{
    int64_t flat[1] = {-1}, back[3] = {B, 3, E};
    nb_tensor *e = nb_embedding(n->p[0], NBT_CHECK(nb_reshape(tok, flat, 1)));
    e = e ? nb_reshape(e, back, 3) : NULL;
    e = e ? nb_mean(e, (int64_t[]){1}, 1, false) : NULL;
    nb_tensor *h = e ? nb_relu(nb_linear(e, n->p[1], n->p[2])) : NULL;
    nb_tensor *o = h ? nb_linear(h, n->p[3], n->p[4]) : NULL;
    return o ? nb_cross_entropy(o, y, NULL) : NULL;
}

static nb_status step(const net *n, nb_optim *opt, const nb_tensor *tok, const nb_tensor *y, nb_tensor **loss)
{
    nb_status st = nb_optim_zero_grad(opt);
    *loss = st == NB_OK ? loss_of(n, tok, y) : NULL;
    if (st == NB_OK && !*loss) st = nb_last_status();
    if (st == NB_OK) st = nb_backward(*loss, NULL, 0);
    return st == NB_OK ? nb_optim_step(opt) : st;
}

static nb_optim *sgd(const net *n)
{
    nb_sgd_params s = nb_sgd_params_default();
    s.lr = 0.1, s.momentum = 0.9, s.weight_decay = 1e-3, s.nesterov = true;
    return NBT_CHECK(nb_optim_sgd(n->p, NP, &s));
}

static void test_train_step(void **state)
{
    (void)state;
    nb_manual_seed(7);
    nb_scope *sc = nb_scope_begin();
    nb_tensor *tok[STEPS + 1], *y[STEPS + 1];
    nb_tensor_params ip = nb_tensor_params_default();
    ip.dtype = NB_INT64;
    for (int k = 0; k <= STEPS; k++) {
        tok[k] = nbt_to_cuda(NBT_CHECK(nb_randint(0, V, (int64_t[]){B, 3}, 2, &ip)));
        y[k] = nbt_to_cuda(NBT_CHECK(nb_randint(0, C, (int64_t[]){B}, 1, &ip)));
    }
    net a, g;
    make_net(&a, NULL);
    make_net(&g, &a);
    nb_optim *oa = sgd(&a), *og = sgd(&g);
    /* eager: STEPS + 1 steps */
    double eager_loss[STEPS + 1];
    for (int k = 0; k <= STEPS; k++) {
        nb_tensor *l = NULL;
        NBT_OK(step(&a, oa, tok[k], y[k], &l));
        NBT_OK(nb_item(l, &eager_loss[k]));
    }
    /* graph: the first step eagerly on the graph's stream (makes the momentum buffers), then a
     * captured step replayed on batches 1..STEPS copied into the static inputs */
    nb_cuda_graph *cg = NBT_CHECK(nb_cuda_graph_create(0));
    nb_stream *prev = NBT_CHECK(nb_cuda_set_stream(nb_cuda_graph_stream(cg)));
    nb_tensor *l0 = NULL;
    NBT_OK(step(&g, og, tok[0], y[0], &l0));
    double v = 0;
    NBT_OK(nb_item(l0, &v));
    assert_true(fabs(v - eager_loss[0]) <= 1e-6 * fabs(eager_loss[0]));
    NBT_CHECK(nb_cuda_set_stream(prev));
    nb_tensor *sx = nb_tensor_retain(NBT_CHECK(nb_clone(tok[0]))), *sy = nb_tensor_retain(NBT_CHECK(nb_clone(y[0])));
    NBT_OK(nb_optim_zero_grad(og));
    NBT_OK(nb_cuda_graph_capture_begin(cg));
    assert_true(nb_cuda_is_capturing(0));
    nb_scope *cs = nb_scope_begin();
    nb_tensor *cl = NULL;
    NBT_OK(step(&g, og, sx, sy, &cl));
    nb_tensor *gloss = nb_tensor_retain(cl);
    nb_scope_end(cs);
    NBT_OK(nb_cuda_graph_capture_end(cg));
    assert_false(nb_cuda_is_capturing(0));
    for (int k = 1; k <= STEPS; k++) {
        NBT_OK(nb_copy_(sx, tok[k]));
        NBT_OK(nb_copy_(sy, y[k]));
        NBT_OK(nb_cuda_graph_replay(cg));
        NBT_OK(nb_item(gloss, &v));
        if (!(fabs(v - eager_loss[k]) <= 1e-5 * fabs(eager_loss[k]) + 1e-6))
            fail_msg("replay %d: loss %.9g, eager %.9g", k, v, eager_loss[k]);
    }
    NBT_OK(nb_cuda_graph_check(cg));
    for (int i = 0; i < NP; i++) nbt_assert_close_host(g.p[i], a.p[i], 1e-5, "parameter after the replays");
    /* the graph's memory pool goes back once the graph and its tensors are freed */
    nb_tensor_free(gloss);
    NBT_OK(nb_optim_zero_grad(og));
    nb_cuda_graph_free(cg);
    NBT_OK(nb_cuda_synchronize(0));
    nb_tensor_free(sx);
    nb_tensor_free(sy);
    nb_optim_free(oa);
    nb_optim_free(og);
    free_net(&a);
    free_net(&g);
    nb_scope_end(sc);
}

/* The stateful LSTM language model with gradient clipping, as the DLBench LSTM: its carried
 * state goes from one replay to the next as from one eager step to the next. */
static nb_status lm_step(nb_module *m, nb_optim *opt, nb_tensor *const *ps, int np, const nb_tensor *tok,
                         const nb_tensor *y, nb_tensor **loss)
{
    int64_t flat[2] = {-1, V}, fy[1] = {-1};
    nb_status st = nb_optim_zero_grad(opt);
    nb_tensor *out = st == NB_OK ? nb_module_forward(m, (nb_tensor *)tok) : NULL;
    out = out ? nb_reshape(out, flat, 2) : NULL;
    *loss = out ? nb_cross_entropy(out, NBT_CHECK(nb_reshape(y, fy, 1)), NULL) : NULL;
    if (st == NB_OK && !*loss) st = nb_last_status();
    if (st == NB_OK) st = nb_backward(*loss, NULL, 0);
    if (st == NB_OK) st = nb_clip_grad_norm_(ps, np, 0.5, 2.0, NULL);
    return st == NB_OK ? nb_optim_step(opt) : st;
}

static void test_stateful_lm(void **state)
{
    (void)state;
    enum { T = 6, NPM = 16 };
    nb_scope *sc = nb_scope_begin();
    nb_module *m[2];
    nb_tensor *ps[2][NPM];
    nb_optim *opt[2];
    int np = 0;
    for (int k = 0; k < 2; k++) {
        nb_manual_seed(11); /* the same initial weights */
        m[k] = NBT_CHECK(nb_lstm_lm_create(V, E, H, 2, NULL));
        NBT_OK(nb_lstm_lm_set_stateful(m[k], true));
        NBT_OK(nb_module_to(m[k], NBT_CUDA0));
        np = nb_module_parameters(m[k], ps[k], NPM);
        assert_true(np > 0 && np <= NPM);
        nb_sgd_params s = nb_sgd_params_default();
        s.lr = 0.5, s.momentum = 0.9;
        opt[k] = NBT_CHECK(nb_optim_sgd(ps[k], np, &s));
    }
    nb_tensor_params ip = nb_tensor_params_default();
    ip.dtype = NB_INT64;
    nb_tensor *tok[STEPS + 1], *y[STEPS + 1];
    for (int k = 0; k <= STEPS; k++) {
        tok[k] = nbt_to_cuda(NBT_CHECK(nb_randint(0, V, (int64_t[]){B, T}, 2, &ip)));
        y[k] = nbt_to_cuda(NBT_CHECK(nb_randint(0, V, (int64_t[]){B, T}, 2, &ip)));
    }
    double eager[STEPS + 1], v = 0;
    for (int k = 0; k <= STEPS; k++) {
        nb_tensor *l = NULL;
        NBT_OK(lm_step(m[0], opt[0], ps[0], np, tok[k], y[k], &l));
        NBT_OK(nb_item(l, &eager[k]));
    }
    nb_cuda_graph *g = NBT_CHECK(nb_cuda_graph_create(0));
    nb_stream *prev = NBT_CHECK(nb_cuda_set_stream(nb_cuda_graph_stream(g)));
    nb_tensor *l0 = NULL;
    NBT_OK(lm_step(m[1], opt[1], ps[1], np, tok[0], y[0], &l0)); /* makes the state and the momentum */
    NBT_CHECK(nb_cuda_set_stream(prev));
    nb_tensor *sx = nb_tensor_retain(NBT_CHECK(nb_clone(tok[1]))), *sy = nb_tensor_retain(NBT_CHECK(nb_clone(y[1])));
    NBT_OK(nb_optim_zero_grad(opt[1]));
    NBT_OK(nb_cuda_graph_capture_begin(g));
    nb_scope *cs = nb_scope_begin();
    nb_tensor *cl = NULL;
    NBT_OK(lm_step(m[1], opt[1], ps[1], np, sx, sy, &cl));
    nb_tensor *gloss = nb_tensor_retain(cl);
    nb_scope_end(cs);
    NBT_OK(nb_cuda_graph_capture_end(g));
    for (int k = 1; k <= STEPS; k++) {
        NBT_OK(nb_copy_(sx, tok[k]));
        NBT_OK(nb_copy_(sy, y[k]));
        NBT_OK(nb_cuda_graph_replay(g));
        NBT_OK(nb_item(gloss, &v));
        if (!(fabs(v - eager[k]) <= 1e-4 * fabs(eager[k])))
            fail_msg("LM replay %d: loss %.9g, eager %.9g", k, v, eager[k]);
    }
    for (int i = 0; i < np; i++) nbt_assert_close_host(ps[1][i], ps[0][i], 1e-4, "LM parameter after the replays");
    nb_tensor_free(gloss);
    nb_cuda_graph_free(g);
    nb_tensor_free(sx);
    nb_tensor_free(sy);
    for (int k = 0; k < 2; k++) {
        nb_optim_free(opt[k]);
        nb_module_free(m[k]);
    }
    nb_scope_end(sc);
}

/* A bad index in a replay: skipped by the kernel (no write out of bounds), reported afterwards. */
static void test_bad_index(void **state)
{
    (void)state;
    nb_scope *sc = nb_scope_begin();
    nb_tensor *w = nbt_to_cuda(NBT_CHECK(nb_arange(0, 40, 1, NULL)));
    int64_t shape[2] = {10, 4};
    w = NBT_CHECK(nb_reshape(w, shape, 2));
    nb_tensor_params ip = nb_tensor_params_default();
    ip.dtype = NB_INT64;
    int64_t good[3] = {1, 9, 0}, bad[3] = {2, 10, 3}, n3 = 3;
    nb_tensor *idx = nb_tensor_retain(nbt_to_cuda(NBT_CHECK(nb_tensor_from_data(good, &n3, 1, &ip))));
    nb_tensor *out = NBT_CHECK(nb_zeros((int64_t[]){3, 4}, 2, &(nb_tensor_params){.dtype = NB_FLOAT32, .device = NBT_CUDA0}));
    nb_cuda_graph *g = NBT_CHECK(nb_cuda_graph_create(0));
    NBT_OK(nb_cuda_graph_capture_begin(g));
    nb_scope *cs = nb_scope_begin();
    NBT_OK(nb_copy_(out, NBT_CHECK(nb_index_select(w, 0, idx))));
    nb_scope_end(cs);
    NBT_OK(nb_cuda_graph_capture_end(g));
    NBT_OK(nb_cuda_graph_replay(g));
    NBT_OK(nb_cuda_graph_check(g));
    float host[12];
    NBT_OK(nb_tensor_read(out, host, sizeof host));
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++) assert_true(host[r * 4 + c] == (float)(good[r] * 4 + c));
    NBT_OK(nb_copy_(idx, NBT_CHECK(nb_tensor_from_data(bad, &n3, 1, &ip))));
    NBT_OK(nb_cuda_graph_replay(g));
    NBT_FAILS(nb_cuda_graph_check(g) != NB_OK, NB_ERR_INVALID_ARG, "index_select", "CUDA graph replay", "index 10",
              "size 10", NULL);
    NBT_OK(nb_tensor_read(out, host, sizeof host));
    for (int c = 0; c < 4; c++) assert_true(host[c] == (float)(2 * 4 + c) && host[8 + c] == (float)(3 * 4 + c));
    NBT_OK(nb_cuda_graph_check(g)); /* reported once */
    nb_cuda_graph_free(g);
    nb_tensor_free(idx);
    nb_scope_end(sc);
}

/* Each op that cannot be captured fails naming itself, and spoils the capture. */
static void test_refused(void **state)
{
    (void)state;
    nb_scope *sc = nb_scope_begin();
    nb_tensor *x = nbt_to_cuda(NBT_CHECK(nb_ones((int64_t[]){8}, 1, NULL)));
    nb_tensor *x1 = nbt_to_cuda(NBT_CHECK(nb_ones((int64_t[]){1}, 1, NULL))); /* nb_item needs one element */
    nb_tensor *host = NBT_CHECK(nb_ones((int64_t[]){8}, 1, NULL));
    for (int which = 0; which < 5; which++) {
        nb_cuda_graph *g = NBT_CHECK(nb_cuda_graph_create(0));
        nb_tensor *p = nb_tensor_retain(NBT_CHECK(nb_clone(x)));
        NBT_OK(nb_tensor_set_requires_grad(p, true));
        nb_optim *opt = NULL;
        if (which == 2 || which == 3) {
            if (which == 2) {
                opt = NBT_CHECK(nb_optim_adam(&p, 1, NULL));
            } else {
                nb_sgd_params s = nb_sgd_params_default();
                s.momentum = 0.9;
                opt = NBT_CHECK(nb_optim_sgd(&p, 1, &s));
            }
            NBT_OK(nb_backward(NBT_CHECK(nb_sum(NBT_CHECK(nb_mul(p, p)), NULL, 0, false)), NULL, 0));
        }
        NBT_OK(nb_cuda_graph_capture_begin(g));
        nb_scope *cs = nb_scope_begin();
        double v = 0;
        const char *op = which == 0 ? "copy to host" : which == 1 ? "rand" : which == 4 ? "pin_memory" : "optim step";
        nb_status st = which == 0 ? nb_item(x1, &v)
                     : which == 1 ? (nb_rand((int64_t[]){4}, 1, &(nb_tensor_params){.dtype = NB_FLOAT32, .device = NBT_CUDA0})
                                         ? NB_OK
                                         : nb_last_status())
                     : which == 4 ? (nb_tensor_pin_memory(host) ? NB_OK : nb_last_status())
                                  : nb_optim_step(opt);
        NBT_FAILS(st != NB_OK, NB_ERR_UNSUPPORTED, op, "capturing a CUDA graph", NULL);
        nb_scope_end(cs);
        NBT_FAILS(nb_cuda_graph_capture_end(g) != NB_OK, NB_ERR_UNSUPPORTED, "cuda_graph_capture_end", op, NULL);
        NBT_FAILS(nb_cuda_graph_replay(g) != NB_OK, NB_ERR_INVALID_ARG, "cuda_graph_replay", "not been captured", NULL);
        assert_false(nb_cuda_is_capturing(0));
        NBT_OK(nb_item(x1, &v)); /* the device goes on after a spoilt capture */
        assert_true(v == 1);
        nb_cuda_graph_free(g);
        nb_optim_free(opt);
        nb_tensor_free(p);
    }
    /* misuse */
    nb_cuda_graph *g = NBT_CHECK(nb_cuda_graph_create(0));
    NBT_FAILS(nb_cuda_graph_capture_end(g) != NB_OK, NB_ERR_INVALID_ARG, "not being captured", NULL);
    NBT_FAILS(nb_cuda_graph_replay(g) != NB_OK, NB_ERR_INVALID_ARG, "not been captured", NULL);
    nb_cuda_graph *h = NBT_CHECK(nb_cuda_graph_create(0)); /* before: create refuses while capturing */
    NBT_OK(nb_cuda_graph_capture_begin(g));
    NBT_FAILS(nb_cuda_graph_create(0) != NULL, NB_ERR_INVALID_ARG, "cuda_graph_create", "capturing", NULL);
    NBT_FAILS(nb_cuda_graph_capture_begin(h) != NB_OK, NB_ERR_INVALID_ARG, "already capturing", NULL);
    NBT_OK(nb_cuda_graph_capture_end(g)); /* an empty graph is a graph */
    NBT_OK(nb_cuda_graph_replay(g));
    NBT_FAILS(nb_cuda_graph_capture_begin(g) != NB_OK, NB_ERR_INVALID_ARG, "already", NULL);
    nb_cuda_graph_free(h);
    nb_cuda_graph_free(g);
    nb_scope_end(sc);
}

/* The graph's private pool: memory made in the capture is not given to other tensors while the
 * graph lives, and is returned when it is freed. */
static void test_memory(void **state)
{
    (void)state;
    NBT_OK(nb_cuda_synchronize(0));
    NBT_OK(nb_cuda_empty_cache());
    nb_memory_stats s0, s1, s2;
    NBT_OK(nb_memory_stats_get(NBT_CUDA0, &s0));
    nb_tensor_params cp = {.dtype = NB_FLOAT32, .device = NBT_CUDA0};
    nb_tensor *x = NBT_CHECK(nb_ones((int64_t[]){1 << 20}, 1, &cp));
    nb_cuda_graph *g = NBT_CHECK(nb_cuda_graph_create(0));
    NBT_OK(nb_cuda_graph_capture_begin(g));
    nb_tensor *y = NBT_CHECK(nb_mul_scalar(x, 2)); /* 4 MiB in the graph's pool, freed in the capture */
    void *yp = nb_tensor_data_ptr(y);
    nb_tensor_free(y);
    NBT_OK(nb_cuda_graph_capture_end(g));
    nb_tensor *z = NBT_CHECK(nb_empty((int64_t[]){1 << 20}, 1, &cp)); /* not the graph's block */
    assert_ptr_not_equal(nb_tensor_data_ptr(z), yp);
    NBT_OK(nb_cuda_graph_replay(g));
    NBT_OK(nb_cuda_graph_check(g));
    NBT_OK(nb_memory_stats_get(NBT_CUDA0, &s1));
    nb_cuda_graph_free(g);
    nb_tensor_free(z);
    nb_tensor_free(x);
    NBT_OK(nb_cuda_empty_cache());
    NBT_OK(nb_memory_stats_get(NBT_CUDA0, &s2));
    assert_true(s1.reserved > s0.reserved);
    assert_int_equal(s2.reserved, s0.reserved);
    assert_int_equal(s2.allocated, s0.allocated);
}

/* Capture streams are pooled, never destroyed: after a graph whose capture ran a cuBLAS product
 * is freed (the cached handle was last bound to its stream), eager products still run and are
 * right against the CPU's, the freed graph's stream is no longer current, and the next graph
 * takes that stream and captures and replays a product on it. */
static void test_streams(void **state)
{
    (void)state;
    nb_manual_seed(3);
    nb_scope *sc = nb_scope_begin();
    nb_tensor *ha = NBT_CHECK(nb_randn((int64_t[]){64, 48}, 2, NULL));
    nb_tensor *hb = NBT_CHECK(nb_randn((int64_t[]){48, 40}, 2, NULL));
    nb_tensor *want = NBT_CHECK(nb_mm(ha, hb));
    nb_tensor *a = nbt_to_cuda(ha), *b = nbt_to_cuda(hb);
    nb_stream *dflt = NBT_CHECK(nb_cuda_current_stream(0));
    nb_cuda_graph *g1 = NBT_CHECK(nb_cuda_graph_create(0));
    nb_stream *s1 = NBT_CHECK(nb_cuda_graph_stream(g1));
    NBT_CHECK(nb_cuda_set_stream(s1));
    nbt_assert_close_host(NBT_CHECK(nb_mm(a, b)), want, 1e-5, "product on the graph's stream");
    NBT_CHECK(nb_cuda_set_stream(dflt));
    NBT_OK(nb_cuda_graph_capture_begin(g1));
    nb_tensor *y1 = nb_tensor_retain(NBT_CHECK(nb_mm(a, b)));
    NBT_OK(nb_cuda_graph_capture_end(g1));
    NBT_OK(nb_cuda_graph_replay(g1));
    nbt_assert_close_host(y1, want, 1e-5, "replayed product");
    nb_tensor_free(y1);
    NBT_CHECK(nb_cuda_set_stream(s1)); /* current when freed: the default is current after */
    nb_cuda_graph_free(g1);
    assert_ptr_equal(nb_cuda_current_stream(0), dflt);
    nbt_assert_close_host(NBT_CHECK(nb_mm(a, b)), want, 1e-5, "eager product after the free");
    nb_cuda_graph *g2 = NBT_CHECK(nb_cuda_graph_create(0));
    assert_ptr_equal(nb_cuda_graph_stream(g2), s1);
    NBT_OK(nb_cuda_graph_capture_begin(g2));
    nb_tensor *y2 = nb_tensor_retain(NBT_CHECK(nb_mm(b, nb_transpose(b, 0, 1))));
    NBT_OK(nb_cuda_graph_capture_end(g2));
    NBT_OK(nb_cuda_graph_replay(g2));
    nbt_assert_close_host(y2, NBT_CHECK(nb_mm(hb, nb_transpose(hb, 0, 1))), 1e-5, "the next graph's product");
    nb_tensor_free(y2);
    nb_cuda_graph_free(g2);
    NBT_OK(nb_cuda_synchronize(0));
    nb_scope_end(sc);
}

int main(void)
{
    if (nbt_cuda_missing()) return 77;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_train_step), cmocka_unit_test(test_stateful_lm),
                                       cmocka_unit_test(test_bad_index),
                                       cmocka_unit_test(test_refused), cmocka_unit_test(test_memory),
                                       cmocka_unit_test(test_streams)};
    return NBT_RUN(tests);
}
