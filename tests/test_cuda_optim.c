/* The fused CUDA optimizer step (one launch per device and dtype) against the CPU loops: SGD
 * (momentum, nesterov, weight decay), Adam, AdamW with amsgrad, RMSprop (centered, momentum), in
 * float32 and float64, over several parameters (one spanning many chunks), for three steps with
 * the same gradients; clip_grad_norm_ on device gradients; state saved from the GPU and loaded
 * on the CPU; the step in backward on the GPU (SGD's products added into the weights, Adam's
 * per-parameter launches) against the CPU's separate step. Exits 77 (ctest: Skipped) without a GPU. */
#include <math.h>
#include <stdio.h>

#include "nbtest.h"
#include "nabla/cuda.h"

enum { NP = 3 };

typedef nb_optim *(*make_fn)(nb_tensor *const *p, int n, int which);

static nb_optim *make(nb_tensor *const *p, int n, int which)
{
    switch (which) {
    case 0: {
        nb_sgd_params s = nb_sgd_params_default();
        s.lr = 0.1, s.momentum = 0.9, s.weight_decay = 0.01;
        return nb_optim_sgd(p, n, &s);
    }
    case 1: {
        nb_sgd_params s = nb_sgd_params_default();
        s.lr = 0.05, s.momentum = 0.8, s.nesterov = true;
        return nb_optim_sgd(p, n, &s);
    }
    case 2: {
        nb_adam_params a = nb_adam_params_default();
        a.weight_decay = 0.01;
        return nb_optim_adam(p, n, &a);
    }
    case 3: {
        nb_adam_params a = nb_adamw_params_default();
        a.amsgrad = true;
        return nb_optim_adamw(p, n, &a);
    }
    default: {
        nb_rmsprop_params r = nb_rmsprop_params_default();
        r.centered = true, r.momentum = 0.5, r.weight_decay = 0.001;
        return nb_optim_rmsprop(p, n, &r);
    }
    }
}

static void test_optimizers(void **state)
{
    (void)state;
    const int64_t sizes[NP][2] = {{7, 3}, {300, 1000}, {1, 5}}; /* the second spans 5 chunks */
    for (int dt = 0; dt < 2; dt++) {
        nb_tensor_params tp = nb_tensor_params_default();
        tp.dtype = dt ? NB_FLOAT64 : NB_FLOAT32;
        double rtol = dt ? 1e-12 : 2e-6;
        for (int which = 0; which < 5; which++) {
            nb_scope *s = nb_scope_begin();
            nb_tensor *hp[NP], *dp[NP], *grads[3][NP];
            for (int i = 0; i < NP; i++) {
                nb_tensor *init = NBT_CHECK(nb_randn(sizes[i], 2, &tp));
                hp[i] = nbt_leaf(init);
                dp[i] = NBT_CHECK(nb_tensor_retain(NBT_CHECK(nb_to(init, NBT_CUDA0))));
                NBT_OK(nb_tensor_set_requires_grad(dp[i], true));
                for (int k = 0; k < 3; k++) grads[k][i] = NBT_CHECK(nb_randn(sizes[i], 2, &tp));
            }
            nb_optim *oh = NBT_CHECK(make(hp, NP, which)), *od = NBT_CHECK(make(dp, NP, which));
            for (int k = 0; k < 3; k++) {
                for (int i = 0; i < NP; i++) {
                    NBT_OK(nb_tensor_set_grad(hp[i], grads[k][i]));
                    NBT_OK(nb_tensor_set_grad(dp[i], NBT_CHECK(nb_to(grads[k][i], NBT_CUDA0))));
                }
                NBT_OK(nb_optim_step(oh));
                NBT_OK(nb_optim_step(od));
            }
            for (int i = 0; i < NP; i++)
                nbt_assert_close(NBT_CHECK(nb_to(dp[i], nb_cpu())), hp[i], rtol, rtol, "parameter after 3 steps");
            /* the GPU's state loads into the CPU optimizer and matches its own */
            nb_tensor_map *mh = NBT_CHECK(nb_tensor_map_create()), *md = NBT_CHECK(nb_tensor_map_create());
            NBT_OK(nb_optim_state_dict(oh, mh, "o."));
            NBT_OK(nb_optim_state_dict(od, md, "o."));
            assert_int_equal(nb_tensor_map_size(mh), nb_tensor_map_size(md));
            nb_optim_free(oh);
            nb_optim_free(od);
            nb_tensor_map_free(mh);
            nb_tensor_map_free(md);
            for (int i = 0; i < NP; i++) nb_tensor_free(dp[i]);
            nb_scope_end(s);
        }
    }
}

static void test_clip(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t sh[2] = {40, 30};
    nb_tensor *hp = nbt_leaf(NBT_CHECK(nb_randn(sh, 2, NULL)));
    nb_tensor *dp = NBT_CHECK(nb_tensor_retain(NBT_CHECK(nb_to(hp, NBT_CUDA0))));
    NBT_OK(nb_tensor_set_requires_grad(dp, true));
    nb_tensor *g = NBT_CHECK(nb_mul_scalar(NBT_CHECK(nb_randn(sh, 2, NULL)), 3));
    NBT_OK(nb_tensor_set_grad(hp, g));
    NBT_OK(nb_tensor_set_grad(dp, NBT_CHECK(nb_to(g, NBT_CUDA0))));
    double th = 0, td = 0;
    NBT_OK(nb_clip_grad_norm_(&hp, 1, 5, 2, &th));
    NBT_OK(nb_clip_grad_norm_(&dp, 1, 5, 2, &td));
    assert_true(fabs(th - td) <= 1e-5 * th);
    nbt_assert_close(NBT_CHECK(nb_to(nb_tensor_grad(dp), nb_cpu())), nb_tensor_grad(hp), 1e-6, 1e-6, "clipped grad");
    /* no norm asked for: the coefficient is made on the device, nothing is read back */
    nb_tensor *g2 = NBT_CHECK(nb_mul_scalar(NBT_CHECK(nb_randn(sh, 2, NULL)), 3)); /* norm about 100 */
    NBT_OK(nb_tensor_set_grad(dp, NBT_CHECK(nb_to(g2, NBT_CUDA0))));
    NBT_OK(nb_tensor_set_grad(hp, g2));
    NBT_OK(nb_clip_grad_norm_(&hp, 1, 5, 2, NULL));
    NBT_OK(nb_clip_grad_norm_(&dp, 1, 5, 2, NULL));
    nbt_assert_close(NBT_CHECK(nb_to(nb_tensor_grad(dp), nb_cpu())), nb_tensor_grad(hp), 1e-6, 1e-6,
                     "clipped grad (no norm read back)");
    /* ...which the comparison above cannot tell from the host path: a CUDA graph capture, which
     * refuses any read-back, can; its replay clips the same gradient again */
    NBT_OK(nb_tensor_set_grad(dp, NBT_CHECK(nb_to(g2, NBT_CUDA0))));
    nb_cuda_graph *cg = NBT_CHECK(nb_cuda_graph_create(0));
    NBT_OK(nb_cuda_graph_capture_begin(cg));
    nb_status cs = nb_clip_grad_norm_(&dp, 1, 5, 2, NULL);
    nb_status ce = nb_cuda_graph_capture_end(cg);
    NBT_OK(cs);
    NBT_OK(ce);
    NBT_OK(nb_cuda_graph_replay(cg));
    nbt_assert_close(NBT_CHECK(nb_to(nb_tensor_grad(dp), nb_cpu())), nb_tensor_grad(hp), 1e-6, 1e-6,
                     "clipped grad (captured, replayed)");
    nb_cuda_graph_free(cg);
    nb_tensor_free(dp);
    nb_scope_end(s);
}

/* sum((tanh(x W0^T + b1) @ W2)^2) on the GPU, stepping in backward, against the CPU stepping
 * after backward: plain SGD (W0 and W2 take their products straight) and Adam. */
static void test_step_in_backward(void **state)
{
    (void)state;
    const int64_t sizes[3][2] = {{4, 5}, {4, 0}, {4, 3}};
    for (int which = 0; which < 2; which++) {
        nb_scope *s = nb_scope_begin();
        nb_tensor *x = NBT_CHECK(nb_randn((int64_t[]){8, 5}, 2, NULL)), *dx = NBT_CHECK(nb_to(x, NBT_CUDA0));
        nb_tensor *hp[3], *dp[3];
        for (int i = 0; i < 3; i++) {
            nb_tensor *init = NBT_CHECK(nb_randn(sizes[i], sizes[i][1] ? 2 : 1, NULL));
            hp[i] = nbt_leaf(init);
            dp[i] = NBT_CHECK(nb_tensor_retain(NBT_CHECK(nb_to(init, NBT_CUDA0))));
            NBT_OK(nb_tensor_set_requires_grad(dp[i], true));
        }
        nb_sgd_params sp = nb_sgd_params_default();
        sp.lr = 0.05;
        nb_adam_params ap = nb_adam_params_default();
        nb_optim *oh = NBT_CHECK(which ? nb_optim_adam(hp, 3, &ap) : nb_optim_sgd(hp, 3, &sp));
        nb_optim *od = NBT_CHECK(which ? nb_optim_adam(dp, 3, &ap) : nb_optim_sgd(dp, 3, &sp));
        NBT_OK(nb_optim_step_in_backward(od, true));
        for (int k = 0; k < 3; k++) {
            nb_tensor *h = NBT_CHECK(nb_mm(nb_tanh(nb_linear(x, hp[0], hp[1])), hp[2]));
            nb_tensor *d = NBT_CHECK(nb_mm(nb_tanh(nb_linear(dx, dp[0], dp[1])), dp[2]));
            NBT_OK(nb_backward(NBT_CHECK(nb_sum(nb_mul(h, h), NULL, 0, false)), NULL, 0));
            NBT_OK(nb_backward(NBT_CHECK(nb_sum(nb_mul(d, d), NULL, 0, false)), NULL, 0));
            NBT_OK(nb_optim_step(oh));
            NBT_OK(nb_optim_zero_grad(oh));
            for (int i = 0; i < 3; i++) assert_null(nb_tensor_grad(dp[i]));
        }
        for (int i = 0; i < 3; i++)
            nbt_assert_close(NBT_CHECK(nb_to(dp[i], nb_cpu())), hp[i], 2e-5, 2e-6,
                             "parameter after 3 steps in backward");
        nb_optim_free(oh);
        nb_optim_free(od);
        for (int i = 0; i < 3; i++) nb_tensor_free(dp[i]);
        nb_scope_end(s);
    }
}

int main(void)
{
    if (nbt_cuda_missing()) return 77;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_optimizers), cmocka_unit_test(test_clip),
                                       cmocka_unit_test(test_step_in_backward)};
    return NBT_RUN(tests);
}
