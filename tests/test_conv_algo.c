/* The CPU convolution algorithm (nb_set_conv_algo): each policy, on NCHW and channels-last
 * inputs, against PyTorch's float64 values of the same float32 inputs
 * (tests/ref/cases_conv_algo.py), and which algorithm actually ran (oneDNN's implementation,
 * counted by nb__dnnl_winograd_runs): Winograd for the 3x3 stride-1 cases under "winograd" on a
 * CPU where oneDNN has it (AVX-512), never under "direct" nor for a stride-2 convolution, and
 * under "auto" by its rules (32 output tiles or more; on channels-last inputs, 32 channels).
 * The same for the 5x5 cases and nabla's own F(2x2, 5x5) (counted by nb__wino_runs): only on
 * channels-last inputs with padding 2, under "auto" from 32 channels and 256 tiles of 2x2. And
 * for layers with 1 to 4 input channels ("few_"), that nabla's own weight gradient (counted by
 * nb__stem_runs) ran on channels-last inputs under every policy, and never on NCHW ones. */
#include <stdio.h>
#include <string.h>

#include "nbtest.h"
#include "nabla/nn.h"
#include "cpu/cpu_impl.h"
#include "cpu/dnnl_impl.h"
#include "cpu/stem_impl.h"
#include "cpu/wino_impl.h"

/* Runs case `name` under algo, on an NCHW or channels-last input: checks the output and the
 * gradients against float64 within tol (relative to each tensor's largest value) and returns
 * how many Winograd primitive runs it took; *stem: how many runs of the few-channel kernel. */
static unsigned long long run_case(const nb_tensor_map *m, const char *name, nb_conv_algo algo, bool cl,
                                   double tol, double *worst, unsigned long long *stem)
{
    nb_scope *sc = nb_scope_begin();
    NBT_OK(nb_set_conv_algo(algo));
    int64_t p[3];
    nb_tensor *pt = NBT_CHECK(nbt_ref(m, name, "params"));
    NBT_OK(nb_tensor_read(pt, p, sizeof p));
    nb_tensor *leaves[3];
    int nin = 0;
    for (; nin < 3; nin++) {
        char key[8];
        snprintf(key, sizeof key, "in%d", nin);
        nb_tensor *in = nbt_ref(m, name, key);
        if (!in) break;
        if (nin == 0 && cl) in = NBT_CHECK(nb_contiguous_format(in, NB_CHANNELS_LAST));
        leaves[nin] = NBT_CHECK(nbt_leaf(in));
    }
    nb_conv2d_params cp = {.stride = {p[0], p[0]}, .padding = {p[1], p[1]}, .dilation = {1, 1}, .groups = 1,
                           .relu = p[2] != 0};
    unsigned long long before = nb__dnnl_winograd_runs() + nb__wino_runs(), stem0 = nb__stem_runs();
    nb_tensor *out = NBT_CHECK(nb_conv2d(leaves[0], leaves[1], nin > 2 ? leaves[2] : NULL, &cp));
    NBT_OK(nb_backward(out, NBT_CHECK(nbt_ref(m, name, "gout")), NB_BACKWARD_DEFAULT));
    unsigned long long runs = nb__dnnl_winograd_runs() + nb__wino_runs() - before;
    *stem = nb__stem_runs() - stem0;
    if (cl && !nb_tensor_is_contiguous_format(out, NB_CHANNELS_LAST))
        fail_msg("%s (%s, channels-last): the output is not channels-last", name, nb_conv_algo_name(algo));
    const char *keys[] = {"out", "grad0", "grad1", "grad2"};
    for (int k = 0; k <= nin; k++) {
        nb_tensor *got = k == 0 ? out : NBT_CHECK(nb_tensor_grad(leaves[k - 1]));
        double e = nbt_max_rel_err(got, NBT_CHECK(nbt_ref(m, name, keys[k])));
        if (e > *worst) *worst = e;
        if (!(e <= tol))
            fail_msg("%s (%s, %s): %s is %.3g of its scale from float64 (allowed %.1g)", name,
                     nb_conv_algo_name(algo), cl ? "channels-last" : "NCHW", keys[k], e, tol);
    }
    nb_scope_end(sc);
    return runs;
}

/* Every case under every policy and in both layouts: within tolerance of float64, and run on
 * the algorithm the policy implies. Measured here (AVX-512, oneDNN 2.6): the direct kernels are
 * up to 1.5e-6 of the tensor's scale from float64 (the weight gradient sums 1,600 products per
 * element in float32), Winograd up to 1.7e-6. 1e-5 leaves room for other CPUs' summation orders
 * and still fails a kernel that is wrong by one term (1e-2 and more of the scale here). nabla's
 * F(2x2, 5x5) measured up to 6.9e-6 (its transforms scale values by up to 100 before they
 * cancel), so it is allowed 3e-5. */
static void test_policies(void **state)
{
    (void)state;
    nb_tensor_map *m = nbt_load_ref("conv_algo");
    char **names;
    int n = nbt_case_names(m, &names);
    assert_true(n >= 5);
    /* oneDNN's Winograd (3x3) follows the CPU; nabla's own AVX-512 kernels (the 5x5 Winograd,
     * the few-channel weight gradient) also follow NABLA_MAX_CPU_ISA, which the *_portable run
     * sets to avx2: on an AVX-512 CPU that run has the first without the second. */
    bool dnnl512 = nb__dnnl_winograd_available(), own512 = nb_cpu_avx512();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); /* the few-channel kernel's */
    double worst[4] = {0}; /* direct, oneDNN's Winograd 3x3, nabla's 5x5, few-channel */
    int few_runs = 0;      /* cases the few-channel kernel ran */
    int auto_wino[2] = {0}; /* cases auto ran on Winograd, per layout */
    int auto_wino5 = 0;
    for (int i = 0; i < n; i++) {
        bool k5 = strncmp(names[i], "k5_", 3) == 0, few = strncmp(names[i], "few_", 4) == 0;
        /* 3x3: stride 2 is not; 5x5: padding 1 (not "same") is not; nor are layers too narrow
         * for a vector of channels */
        bool eligible = strstr(names[i], "stride2") == NULL && !(k5 && strstr(names[i], "pad1")) && !few;
        bool c16 = strstr(names[i], "c16_") != NULL;
        /* auto's size rule: at least 32 output tiles of 4x4 (3x3) or 256 of 2x2 (5x5) over the
         * batch (the 5x5 rule's bound on channel pairs is not reached by these cases) */
        nb_scope *sc = nb_scope_begin();
        const int64_t *os = nb_tensor_shape(NBT_CHECK(nbt_ref(m, names[i], "out")));
        bool big = k5 ? os[0] * ((os[2] + 1) / 2) * ((os[3] + 1) / 2) >= 256
                      : os[0] * ((os[2] + 3) / 4) * ((os[3] + 3) / 4) >= 32;
        nb_scope_end(sc);
        for (int a = 0; a < 3; a++) {
            nb_conv_algo algo = (nb_conv_algo[]){NB_CONV_ALGO_DIRECT, NB_CONV_ALGO_WINOGRAD, NB_CONV_ALGO_AUTO}[a];
            for (int cl = 0; cl < 2; cl++) {
                bool wino = (k5 ? own512 : dnnl512) && eligible && algo != NB_CONV_ALGO_DIRECT;
                if (k5)
                    wino = wino && cl && !(algo == NB_CONV_ALGO_AUTO && (!big || c16));
                else
                    wino = wino && !(algo == NB_CONV_ALGO_AUTO && (!big || (cl && c16)));
                if (wino && algo == NB_CONV_ALGO_AUTO) {
                    if (k5)
                        auto_wino5++;
                    else
                        auto_wino[cl]++;
                }
                double tol = wino && k5 ? 3e-5 : 1e-5;
                /* the weight gradient, under every policy: by the rules on AVX-512, else as the
                 * route tuner's third way, forced here */
                bool stem = few && cl && avx2;
                if (stem && !own512) nb__conv_set_route(NB_CONV_ROUTE_OWN);
                unsigned long long stem_runs;
                unsigned long long runs =
                    run_case(m, names[i], algo, cl, tol, &worst[stem ? 3 : wino ? 1 + k5 : 0], &stem_runs);
                nb__conv_set_route(NB_CONV_ROUTE_AUTO);
                /* forward, input gradient, weight gradient */
                if (runs != (wino ? 3u : 0u))
                    fail_msg("%s (%s, %s): %llu Winograd runs, expected %d", names[i], nb_conv_algo_name(algo),
                             cl ? "channels-last" : "NCHW", runs, wino ? 3 : 0);
                if (stem_runs != (stem ? 1u : 0u))
                    fail_msg("%s (%s, %s): %llu runs of the few-channel kernel, expected %d", names[i],
                             nb_conv_algo_name(algo), cl ? "channels-last" : "NCHW", stem_runs, stem ? 1 : 0);
                few_runs += stem;
            }
        }
    }
    printf("worst error relative to scale: direct %.3g, winograd 3x3 %.3g, 5x5 %.3g, few-channel %.3g "
           "(oneDNN AVX-512: %s, nabla's AVX-512 kernels: %s)\n", worst[0], worst[1], worst[2], worst[3],
           dnnl512 ? "yes" : "no", own512 ? "yes" : "no");
    /* the catalogue has cases on both sides of auto's rules, and six few-channel ones (three
     * policies each) */
    if (dnnl512) assert_true(auto_wino[0] == 2 && auto_wino[1] == 1);
    if (own512) assert_int_equal(auto_wino5, 1);
    if (avx2) assert_int_equal(few_runs, 18);
    NBT_OK(nb_set_conv_algo(NB_CONV_ALGO_AUTO));
    nbt_free_names(names, n);
    nb_tensor_map_free(m);
}

static void test_api(void **state)
{
    (void)state;
    NBT_OK(nb_set_conv_algo(NB_CONV_ALGO_WINOGRAD));
    assert_int_equal(nb_get_conv_algo(), NB_CONV_ALGO_WINOGRAD);
    NBT_FAILS(nb_set_conv_algo((nb_conv_algo)9) != NB_OK, NB_ERR_INVALID_ARG, "set_conv_algo", "9", NULL);
    assert_int_equal(nb_get_conv_algo(), NB_CONV_ALGO_WINOGRAD); /* unchanged by the failed call */
    NBT_OK(nb_set_conv_algo(NB_CONV_ALGO_DIRECT));
    assert_int_equal(nb_get_conv_algo(), NB_CONV_ALGO_DIRECT);
    assert_string_equal(nb_conv_algo_name(NB_CONV_ALGO_AUTO), "auto");
    assert_string_equal(nb_conv_algo_name(NB_CONV_ALGO_DIRECT), "direct");
    assert_string_equal(nb_conv_algo_name(NB_CONV_ALGO_WINOGRAD), "winograd");
    assert_string_equal(nb_conv_algo_name((nb_conv_algo)9), "?");
    nb_conv_algo a = NB_CONV_ALGO_DIRECT;
    NBT_OK(nb_conv_algo_parse("winograd", &a));
    assert_int_equal(a, NB_CONV_ALGO_WINOGRAD);
    NBT_OK(nb_conv_algo_parse("auto", &a));
    assert_int_equal(a, NB_CONV_ALGO_AUTO);
    NBT_OK(nb_conv_algo_parse("direct", &a));
    assert_int_equal(a, NB_CONV_ALGO_DIRECT);
    NBT_FAILS(nb_conv_algo_parse("fft", &a) != NB_OK, NB_ERR_INVALID_ARG, "conv_algo_parse", "\"fft\"", NULL);
    assert_int_equal(a, NB_CONV_ALGO_DIRECT); /* untouched by the failure */
    NBT_FAILS(nb_conv_algo_parse(NULL, &a) != NB_OK, NB_ERR_INVALID_ARG, "conv_algo_parse", NULL);
    NBT_OK(nb_set_conv_algo(NB_CONV_ALGO_AUTO));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api),
        cmocka_unit_test(test_policies),
    };
    return NBT_RUN(tests);
}
