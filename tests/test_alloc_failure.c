/* Out of host memory at every point of a training step: the step of a small CNN (convolutions,
 * batch norm + ReLU, max pooling, linear layers, dropout, cross entropy, AdamW) and of a stateful
 * two-layer LSTM language model (embedding, LSTM, linear decoder, cross entropy, gradient
 * clipping, SGD with momentum) is run once for each of its tensor allocations, that allocation
 * made to fail (nb__cpu_alloc_fail_after). Each run must return the out-of-memory error with its
 * message, crash nothing and leak nothing (the sanitizer run's leak check), and a step run
 * afterwards without the failure must succeed. A few allocations are a faster way's scratch (the
 * AMX product's packed operands, the LSTM's W_hh packed for gemm_avx2.c): where one fails, the op
 * runs another way and the step succeeds. */
#include <stdio.h>
#include <string.h>

#include "nbtest.h"
#include "cpu/cpu_impl.h" /* nb__cpu_alloc_fail_after */
#include "nabla/models.h"
#include "nabla/rnn.h"

typedef struct rig {
    bool lm;
    nb_module *net;
    nb_optim *opt;
    nb_tensor *x, *y;
    nb_tensor *ps[64];
    int np;
} rig;

static void rig_make(rig *r, bool lm)
{
    nb_manual_seed(3);
    r->lm = lm;
    nb_tensor_params ip = nb_tensor_params_default();
    ip.dtype = NB_INT64;
    if (lm) {
        r->net = NBT_CHECK(nb_lstm_lm_create(50, 8, 12, 2, NULL));
        NBT_OK(nb_lstm_lm_set_stateful(r->net, true));
        r->np = nb_module_parameters(r->net, r->ps, 64);
        assert_true(r->np > 0 && r->np < 64);
        nb_sgd_params sp = nb_sgd_params_default();
        sp.momentum = 0.9;
        r->opt = NBT_CHECK(nb_optim_sgd(r->ps, r->np, &sp));
        /* no scope is open: these are the caller's references */
        r->x = NBT_CHECK(nb_randint(0, 50, (int64_t[]){3, 9}, 2, &ip));
        r->y = NBT_CHECK(nb_randint(0, 50, (int64_t[]){27}, 1, &ip));
        return;
    }
    r->net = NBT_CHECK(nb_model_create("cnn", 1, 12, 12, 5, NULL));
    r->np = nb_module_parameters(r->net, r->ps, 64);
    assert_true(r->np > 0 && r->np < 64);
    r->opt = NBT_CHECK(nb_optim_adamw(r->ps, r->np, NULL));
    r->x = NBT_CHECK(nb_randn((int64_t[]){3, 1, 12, 12}, 4, NULL));
    r->y = NBT_CHECK(nb_randint(0, 5, (int64_t[]){3}, 1, &ip));
}

static void rig_free(rig *r)
{
    nb_tensor_free(r->x);
    nb_tensor_free(r->y);
    nb_optim_free(r->opt);
    nb_module_free(r->net);
}

/* zero_grad, forward, loss, backward, (LM: clipping,) step, the loss read: the first failure's
 * status */
static nb_status step(rig *r)
{
    nb_scope *s = nb_scope_begin();
    if (!s) return nb_last_status();
    nb_status st = nb_optim_zero_grad(r->opt);
    nb_tensor *out = st == NB_OK ? nb_module_forward(r->net, r->x) : NULL;
    if (out && r->lm) out = nb_reshape(out, (int64_t[]){27, 50}, 2);
    nb_tensor *loss = out ? nb_cross_entropy(out, r->y, NULL) : NULL;
    if (st == NB_OK && !loss) st = nb_last_status();
    if (st == NB_OK) st = nb_backward(loss, NULL, 0);
    double norm = 0;
    if (st == NB_OK && r->lm) st = nb_clip_grad_norm_(r->ps, r->np, 0.5, 2, &norm);
    if (st == NB_OK) st = nb_optim_step(r->opt);
    double v = 0;
    if (st == NB_OK) st = nb_item(loss, &v);
    nb_scope_end(s);
    return st;
}

static void every_allocation_fails_once(bool lm)
{
    int64_t k = 0, other_way = 0;
    for (;; k++) {
        rig r;
        rig_make(&r, lm);
        assert_int_equal(step(&r), NB_OK); /* the first step makes the optimizer's state */
        nb_clear_error();
        nb__cpu_alloc_fail_after(k);
        nb_status st = step(&r);
        bool failed = nb__cpu_alloc_fail_after(-1) < 0;
        if (!failed) { /* k is past the step's last allocation */
            assert_int_equal(st, NB_OK);
            rig_free(&r);
            break;
        }
        if (st == NB_OK)
            other_way++;
        else if (st != NB_ERR_OOM || !strstr(nb_last_error(), "out of host memory"))
            fail_msg("allocation %lld failed: status %d, message '%s'", (long long)k, (int)st, nb_last_error());
        /* what the failed step left behind still trains */
        if (step(&r) != NB_OK) fail_msg("allocation %lld: the next step failed: %s", (long long)k, nb_last_error());
        rig_free(&r);
    }
    print_message("%s: a training step's %lld allocations each failed once (%lld with another way)\n",
                  lm ? "LSTM LM" : "CNN", (long long)k, (long long)other_way);
    assert_true(k > 30);
    /* only the AMX product and, on CPUs with AVX2 but not AVX-512, the LSTM's product on W_hh
     * packed once a run (gemm_avx2.c: the pack's two allocations, for each of the two layers'
     * forward and backward) have another way; elsewhere every failure must be reported */
    bool avx2_pack = lm && !nb_cpu_avx512() && nb_cpu_avx2_fma();
    if (!nb_cpu_amx_enabled()) assert_int_equal(other_way, avx2_pack ? 2 * 2 * 2 : 0);
}

static void test_cnn_step(void **state)
{
    (void)state;
    every_allocation_fails_once(false);
}

static void test_lstm_lm_step(void **state)
{
    (void)state;
    every_allocation_fails_once(true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cnn_step), cmocka_unit_test(test_lstm_lm_step)};
    return NBT_RUN(tests);
}
