/* Tests of the module system (nabla/module.h): an MLP against PyTorch (tests/ref/cases_module.py:
 * loading torch's state dict, forward, every gradient, state-dict names and order, parameter
 * count), a nabla state dict read back by PyTorch, initialisation statistics, train/eval
 * propagation, a custom module written in C, and every error path.
 *
 * Tolerances: float32 rtol 1e-5 atol 1e-6 (sums of 16 products can cancel near 0), float64
 * rtol 1e-10 atol 1e-12. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nbtest.h"
#include "nabla/module.h" /* until nabla.h includes it */

static nb_module *make_mlp(nb_dtype dt)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = dt;
    nb_module *layers[3] = {nb_linear_module(8, 16, true, &p), nb_relu_module(), nb_linear_module(16, 4, true, &p)};
    return NBT_CHECK(nb_sequential(layers, 3));
}

/* The state-dict keys torch listed, split from the newline-joined uint8 tensor. */
static int ref_names(const nb_tensor_map *m, char *buf, size_t size, char **names, int cap)
{
    nb_tensor *t = NBT_CHECK(nbt_ref(m, "mlp", "names"));
    size_t n = (size_t)nb_tensor_numel(t);
    assert_true(n < size);
    NBT_OK(nb_tensor_read(t, buf, n));
    buf[n] = 0;
    int count = 0;
    for (char *tok = strtok(buf, "\n"); tok && count < cap; tok = strtok(NULL, "\n")) names[count++] = tok;
    return count;
}

/* ---- the MLP against PyTorch ----------------------------------------------------------------- */

static void run_mlp_case(const nb_tensor_map *ref, const char *tag, nb_dtype dt, bool noncontig)
{
    double rtol = dt == NB_FLOAT32 ? 1e-5 : 1e-10, atol = dt == NB_FLOAT32 ? 1e-6 : 1e-12;
    char prefix[64], key[128], what[256];
    snprintf(prefix, sizeof prefix, "mlp/%s", tag);
    nb_module *net = make_mlp(dt);
    nb_tensor_map *sd = NBT_CHECK(nb_tensor_map_create());
    const char *names[8];
    nb_tensor *params[8];
    int n = nb_module_named_parameters(net, names, params, 8);
    assert_int_equal(n, 4);
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "sd/%s", names[i]);
        NBT_OK(nb_tensor_map_set(sd, names[i], NBT_CHECK(nbt_ref(ref, prefix, key))));
    }
    NBT_OK(nb_module_load_state_dict(net, sd, true));
    nb_tensor *x = NBT_CHECK(nbt_ref(ref, prefix, "in0"));
    nb_tensor *xin = noncontig ? NBT_CHECK(nbt_noncontig(x)) : NBT_CHECK(nb_clone(x));
    assert_true(nb_tensor_is_contiguous(xin) != noncontig);
    NBT_OK(nb_tensor_set_requires_grad(xin, true));
    nb_tensor *y = NBT_CHECK(nb_module_forward(net, xin));
    snprintf(what, sizeof what, "%s%s out", prefix, noncontig ? " noncontig" : "");
    nbt_assert_close(y, nbt_ref(ref, prefix, "out"), rtol, atol, what);
    NBT_OK(nb_backward(y, nbt_ref(ref, prefix, "gout"), 0));
    snprintf(what, sizeof what, "%s grad0", prefix);
    nbt_assert_close(NBT_CHECK(nb_tensor_grad(xin)), nbt_ref(ref, prefix, "grad0"), rtol, atol, what);
    n = nb_module_named_parameters(net, names, params, 8);
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "grad/%s", names[i]);
        snprintf(what, sizeof what, "%s %s", prefix, key);
        nbt_assert_close(NBT_CHECK(nb_tensor_grad(params[i])), NBT_CHECK(nbt_ref(ref, prefix, key)), rtol, atol, what);
    }
    nb_tensor_map_free(sd);
    nb_module_free(net);
}

static void test_mlp_pytorch(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_tensor_map *ref = nbt_load_ref("module");
    run_mlp_case(ref, "f32", NB_FLOAT32, false);
    run_mlp_case(ref, "f64", NB_FLOAT64, false);
    run_mlp_case(ref, "f32", NB_FLOAT32, true);
    run_mlp_case(ref, "f64", NB_FLOAT64, true);
    nb_tensor_map_free(ref);
    nb_scope_end(s);
}

static void test_mlp_names_and_count(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_tensor_map *ref = nbt_load_ref("module");
    char buf[1024], *want[16];
    int nwant = ref_names(ref, buf, sizeof buf, want, 16);
    assert_int_equal(nwant, 4);
    nb_module *net = make_mlp(NB_FLOAT32);
    nb_tensor_map *sd = NBT_CHECK(nb_tensor_map_create());
    NBT_OK(nb_module_state_dict(net, sd));
    assert_int_equal(nb_tensor_map_size(sd), nwant);
    for (int i = 0; i < nwant; i++) assert_string_equal(nb_tensor_map_name(sd, i), want[i]);
    int64_t count = 0;
    NBT_OK(nb_item_int64(NBT_CHECK(nbt_ref(ref, "mlp", "num_parameters")), &count));
    assert_int_equal(nb_module_num_parameters(net), count);
    assert_int_equal(count, 8 * 16 + 16 + 16 * 4 + 4);
    /* snprintf-style counts */
    nb_tensor *two[2];
    assert_int_equal(nb_module_parameters(net, NULL, 0), 4);
    assert_int_equal(nb_module_parameters(net, two, 2), 4);
    assert_ptr_equal(two[0], nb_module_get_parameter(nb_module_get_module(net, "0"), "weight"));
    assert_ptr_equal(two[1], nb_module_get_parameter(nb_module_get_module(net, "0"), "bias"));
    assert_int_equal(nb_module_buffers(net, NULL, 0), 0);
    /* the state dict shares storage with the parameters, detached */
    nb_tensor *w = NBT_CHECK(nb_tensor_map_get(sd, "2.weight"));
    assert_false(nb_tensor_requires_grad(w));
    assert_ptr_equal(nb_tensor_data_ptr(w), nb_tensor_data_ptr(nb_module_get_parameter(nb_module_get_module(net, "2"), "weight")));
    nb_tensor_map_free(sd);
    nb_module_free(net);
    nb_tensor_map_free(ref);
    nb_scope_end(s);
}

/* ---- PyTorch reads nabla's state dict --------------------------------------------------------- */

static const char *interop_script =
    "import sys, torch\n"
    "from safetensors.torch import load_file\n"
    "sd, io = load_file(sys.argv[1]), load_file(sys.argv[2])\n"
    "m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))\n"
    "m.load_state_dict(sd)\n"
    "y = m(io['x'])\n"
    "ok = torch.allclose(y, io['y'], rtol=1e-5, atol=1e-6)\n"
    "print('interop: torch output', 'matches' if ok else 'differs: %s vs %s' % (y, io['y']))\n"
    "sys.exit(0 if ok else 1)\n";

static void test_pytorch_loads_nabla(void **state)
{
    (void)state;
    const char *py = getenv("NB_PYTHON"), *dir = getenv("NB_BUILD_DIR");
    if (!py || !dir) fail_msg("NB_PYTHON and NB_BUILD_DIR must be set: run this test through ctest");
    nb_scope *s = nb_scope_begin();
    nb_manual_seed(7);
    nb_module *net = make_mlp(NB_FLOAT32);
    int64_t shape[2] = {6, 8};
    nb_tensor *x = NBT_CHECK(nb_randn(shape, 2, NULL));
    nb_tensor *y = NBT_CHECK(nb_module_forward(net, x));
    nb_tensor_map *sd = NBT_CHECK(nb_tensor_map_create()), *io = NBT_CHECK(nb_tensor_map_create());
    NBT_OK(nb_module_state_dict(net, sd));
    NBT_OK(nb_tensor_map_set(io, "x", x));
    NBT_OK(nb_tensor_map_set(io, "y", NBT_CHECK(nb_detach(y))));
    char sd_path[4096], io_path[4096], script[4096], cmd[16384];
    snprintf(sd_path, sizeof sd_path, "%s/module_sd_%d.safetensors", dir, (int)getpid());
    snprintf(io_path, sizeof io_path, "%s/module_io_%d.safetensors", dir, (int)getpid());
    snprintf(script, sizeof script, "%s/module_check_%d.py", dir, (int)getpid());
    NBT_OK(nb_safetensors_save(sd, sd_path));
    NBT_OK(nb_safetensors_save(io, io_path));
    FILE *f = fopen(script, "w");
    assert_non_null(f);
    fputs(interop_script, f);
    fclose(f);
    assert_true(!strchr(py, '\'') && !strchr(dir, '\''));
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' '%s'", py, script, sd_path, io_path);
    int rc = system(cmd);
    remove(sd_path);
    remove(io_path);
    remove(script);
    if (rc != 0) fail_msg("PyTorch's check of nabla's state dict failed (status %d): %s", rc, cmd);
    nb_tensor_map_free(sd);
    nb_tensor_map_free(io);
    nb_module_free(net);
    nb_scope_end(s);
}

/* ---- initialisation -------------------------------------------------------------------------- */

static void stats(const nb_tensor *t, double *mean, double *sd, double *absmax)
{
    int64_t n = nb_tensor_numel(t);
    double *v = malloc((size_t)n * sizeof *v);
    assert_non_null(v);
    NBT_OK(nb_tensor_read(NBT_CHECK(nb_to_dtype(t, NB_FLOAT64)), v, (size_t)n * sizeof *v));
    double s = 0, s2 = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        s += v[i];
        m = fmax(m, fabs(v[i]));
    }
    *mean = s / (double)n;
    for (int64_t i = 0; i < n; i++) s2 += (v[i] - *mean) * (v[i] - *mean);
    *sd = sqrt(s2 / (double)(n - 1));
    *absmax = m;
    free(v);
}

static void test_init(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_manual_seed(1);
    nb_module *lin = NBT_CHECK(nb_linear_module(256, 256, true, NULL));
    nb_tensor *w = nb_module_get_parameter(lin, "weight"), *b = nb_module_get_parameter(lin, "bias");
    assert_true(nb_tensor_requires_grad(w) && nb_tensor_is_leaf(w) && nb_tensor_requires_grad(b));
    assert_int_equal(nb_tensor_dtype(w), NB_FLOAT32);
    double bound = 1.0 / 16.0, mean, sd, mx;
    stats(w, &mean, &sd, &mx);
    assert_true(mx <= bound);
    assert_true(mx > 0.99 * bound);
    /* U(-b, b): mean 0 (standard error b / sqrt(3 * 65536) = 0.0023 b), sd b / sqrt(3) */
    assert_true(fabs(mean) < 0.012 * bound);
    assert_true(fabs(sd / (bound / sqrt(3.0)) - 1.0) < 0.02);
    stats(b, &mean, &sd, &mx);
    assert_true(mx <= bound);
    nb_module *nobias = NBT_CHECK(nb_linear_module(4, 3, false, NULL));
    assert_null(nb_module_get_parameter(nobias, "bias"));
    assert_int_equal(nb_module_num_parameters(nobias), 12);
    nb_module_free(nobias);
    nb_module *emb = NBT_CHECK(nb_embedding_module(256, 256, NULL));
    stats(nb_module_get_parameter(emb, "weight"), &mean, &sd, &mx);
    assert_true(fabs(mean) < 0.02);
    assert_true(fabs(sd - 1.0) < 0.02);
    /* a seed gives the same weights */
    nb_manual_seed(1);
    nb_module *again = NBT_CHECK(nb_linear_module(256, 256, true, NULL));
    nbt_assert_close(nb_module_get_parameter(again, "weight"), w, 0, 0, "reseeded Linear weight");
    /* a generator in the params: the same values for the same seed, independent of the default */
    nb_tensor_params gp = nb_tensor_params_default();
    gp.dtype = NB_FLOAT64;
    gp.generator = nb_generator_create(42);
    nb_module *g1 = NBT_CHECK(nb_linear_module(5, 3, true, &gp));
    nb_generator_manual_seed(gp.generator, 42);
    nb_manual_seed(99);
    nb_module *g2 = NBT_CHECK(nb_linear_module(5, 3, true, &gp));
    assert_int_equal(nb_tensor_dtype(nb_module_get_parameter(g1, "bias")), NB_FLOAT64);
    nbt_assert_close(nb_module_get_parameter(g2, "bias"), nb_module_get_parameter(g1, "bias"), 0, 0, "generator bias");
    /* re-initialising a parameter in place (it requires grad: runs under no-grad) */
    nb_tensor *gw = nb_module_get_parameter(g1, "weight");
    NBT_OK(nb_init_uniform_(gw, 3.0, 3.5, NULL));
    stats(gw, &mean, &sd, &mx);
    assert_true(mean > 3.0 && mean < 3.5 && mx <= 3.5);
    assert_true(nb_tensor_is_leaf(gw) && nb_tensor_requires_grad(gw));
    NBT_OK(nb_init_normal_(gw, 0.0, 0.0, gp.generator));
    stats(gw, &mean, &sd, &mx);
    assert_true(mx == 0.0);
    NBT_FAILS(nb_init_uniform_(gw, 1.0, 0.0, NULL) != NB_OK, NB_ERR_INVALID_ARG, "init_uniform_", "low 1", NULL);
    NBT_FAILS(nb_init_normal_(gw, 0.0, -1.0, NULL) != NB_OK, NB_ERR_INVALID_ARG, "init_normal_", "std -1", NULL);
    int64_t three = 3;
    nb_tensor_params ip = nb_tensor_params_default();
    ip.dtype = NB_INT64;
    NBT_FAILS(nb_init_normal_(NBT_CHECK(nb_zeros(&three, 1, &ip)), 0, 1, NULL) != NB_OK, NB_ERR_DTYPE, "int64", NULL);
    nb_module_free(g1);
    nb_module_free(g2);
    nb_generator_free(gp.generator);
    nb_module_free(again);
    nb_module_free(emb);
    nb_module_free(lin);
    nb_scope_end(s);
}

/* ---- train / eval, Embedding, activations ------------------------------------------------------ */

static void test_train_eval(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_module *inner[2] = {nb_dropout_module(0.5), nb_tanh_module()};
    nb_module *layers[3] = {nb_linear_module(32, 64, true, NULL), nb_sequential(inner, 2), nb_gelu_module()};
    nb_module *net = NBT_CHECK(nb_sequential(layers, 3));
    nb_module *drop = nb_module_get_module(nb_module_get_module(net, "1"), "0");
    assert_string_equal(nb_module_type_name(drop), "Dropout");
    assert_true(nb_module_is_training(net) && nb_module_is_training(drop));
    int64_t shape[2] = {16, 32};
    nb_tensor *x = NBT_CHECK(nb_randn(shape, 2, NULL));
    nb_module *lin = nb_module_get_module(net, "0");
    nb_tensor *h = NBT_CHECK(nb_linear(x, nb_module_get_parameter(lin, "weight"), nb_module_get_parameter(lin, "bias")));
    nb_tensor *want = NBT_CHECK(nb_gelu(NBT_CHECK(nb_tanh(h)), NB_GELU_NONE));
    nb_module_train(net, false);
    assert_false(nb_module_is_training(drop));
    assert_false(nb_module_is_training(nb_module_get_module(net, "1")));
    nbt_assert_close(NBT_CHECK(nb_module_forward(net, x)), want, 1e-6, 1e-7, "eval forward");
    nb_module_train(net, true);
    assert_true(nb_module_is_training(drop));
    /* in training, about half of the dropout outputs are 0, so gelu(tanh(0)) = 0 there */
    nb_tensor *y = NBT_CHECK(nb_module_forward(net, x));
    float v[16 * 64];
    NBT_OK(nb_tensor_read(y, v, sizeof v));
    int zeros = 0;
    for (int i = 0; i < 16 * 64; i++) zeros += v[i] == 0.0f;
    assert_true(zeros > 400 && zeros < 624);
    nb_module_free(net);
    nb_scope_end(s);
}

static void test_small_modules(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    int64_t shape[4] = {2, 3, 4, 5};
    nb_tensor *x = NBT_CHECK(nb_randn(shape, 4, NULL));
    nb_module *fl = NBT_CHECK(nb_flatten_module(1, -1));
    nb_tensor *y = NBT_CHECK(nb_module_forward(fl, x));
    assert_int_equal(nb_tensor_ndim(y), 2);
    assert_int_equal(nb_tensor_shape(y)[1], 60);
    nb_module *acts[4] = {nb_relu_module(), nb_sigmoid_module(), nb_leaky_relu_module(0.2), nb_gelu_module()};
    nb_tensor *want[4] = {nb_relu(x), nb_sigmoid(x), nb_leaky_relu(x, 0.2), nb_gelu(x, NB_GELU_NONE)};
    for (int i = 0; i < 4; i++) {
        nbt_assert_close(NBT_CHECK(nb_module_forward(NBT_CHECK(acts[i]), x)), NBT_CHECK(want[i]), 0, 0,
                         nb_module_type_name(acts[i]));
        assert_int_equal(nb_module_num_parameters(acts[i]), 0);
        nb_module_free(acts[i]);
    }
    nb_module *emb = NBT_CHECK(nb_embedding_module(10, 3, NULL));
    int64_t idx[4] = {1, 9, 1, 0}, ishape[2] = {2, 2};
    nb_tensor_params ip = nb_tensor_params_default();
    ip.dtype = NB_INT64;
    nb_tensor *e = NBT_CHECK(nb_module_forward(emb, NBT_CHECK(nb_tensor_from_data(idx, ishape, 2, &ip))));
    assert_int_equal(nb_tensor_ndim(e), 3);
    nbt_assert_close(NBT_CHECK(nb_select(NBT_CHECK(nb_select(e, 0, 1)), 0, 1)),
                     NBT_CHECK(nb_select(nb_module_get_parameter(emb, "weight"), 0, 0)), 0, 0, "embedding row 0");
    NBT_OK(nb_backward(NBT_CHECK(nb_sum(e, NULL, 0, false)), NULL, 0));
    nb_tensor *g = NBT_CHECK(nb_tensor_grad(nb_module_get_parameter(emb, "weight")));
    double g1 = 0;
    NBT_OK(nb_item(NBT_CHECK(nb_select(NBT_CHECK(nb_select(g, 0, 1)), 0, 0)), &g1));
    assert_true(g1 == 2.0); /* index 1 is used twice */
    NBT_OK(nb_module_to(emb, nb_cpu()));
    nb_module_free(emb);
    nb_module_free(fl);
    nb_module_free(NULL);
    nb_scope_end(s);
}

/* ---- a custom module in C -------------------------------------------------------------------- */

static int g_freed;

/* y = x * scale + shift: scale a parameter [3], shift a buffer [3] */
static nb_tensor *affine_forward(nb_module *self, nb_tensor *x)
{
    int *calls = nb_module_user(self);
    (*calls)++;
    return nb_add(nb_mul(x, nb_module_get_parameter(self, "scale")), nb_module_get_buffer(self, "shift"));
}

static void affine_free(void *user)
{
    g_freed++;
    free(user);
}

static const nb_module_funcs affine_funcs = {"Affine", affine_forward, affine_free};

static nb_module *make_affine(void)
{
    int *calls = calloc(1, sizeof *calls);
    nb_module *m = NBT_CHECK(nb_module_create(&affine_funcs, calls));
    double sc[3] = {1, 2, 3}, sh[3] = {10, 20, 30};
    int64_t n = 3;
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_FLOAT64;
    NBT_OK(nb_module_register_parameter(m, "scale", NBT_CHECK(nb_tensor_from_data(sc, &n, 1, &p))));
    NBT_OK(nb_module_register_buffer(m, "shift", NBT_CHECK(nb_tensor_from_data(sh, &n, 1, &p))));
    return m;
}

static void test_custom_module(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    g_freed = 0;
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_FLOAT64;
    nb_module *layers[2] = {nb_linear_module(2, 3, true, &p), make_affine()};
    nb_module *net = NBT_CHECK(nb_sequential(layers, 2));
    const char *names[4];
    nb_tensor *ts[4];
    assert_int_equal(nb_module_named_parameters(net, names, ts, 4), 3);
    assert_string_equal(names[0], "0.weight");
    assert_string_equal(names[1], "0.bias");
    assert_string_equal(names[2], "1.scale");
    assert_int_equal(nb_module_named_buffers(net, names, ts, 4), 1);
    assert_string_equal(names[0], "1.shift");
    nb_tensor_map *sd = NBT_CHECK(nb_tensor_map_create());
    NBT_OK(nb_module_state_dict(net, sd));
    assert_int_equal(nb_tensor_map_size(sd), 4);
    assert_string_equal(nb_tensor_map_name(sd, 3), "1.shift");
    nb_tensor_map_free(sd);

    nb_module *aff = nb_module_get_module(net, "1");
    double xv[3] = {0.5, -1, 2};
    int64_t n = 3;
    nb_tensor *x = NBT_CHECK(nb_tensor_from_data(xv, &n, 1, &p));
    nb_tensor *y = NBT_CHECK(nb_module_forward(aff, x));
    double want[3] = {10.5, 18, 36}, got[3];
    NBT_OK(nb_tensor_read(y, got, sizeof got));
    for (int i = 0; i < 3; i++) assert_true(got[i] == want[i]);
    assert_int_equal(*(int *)nb_module_user(aff), 1);
    NBT_OK(nb_backward(NBT_CHECK(nb_sum(y, NULL, 0, false)), NULL, 0));
    NBT_OK(nb_tensor_read(NBT_CHECK(nb_tensor_grad(nb_module_get_parameter(aff, "scale"))), got, sizeof got));
    for (int i = 0; i < 3; i++) assert_true(got[i] == xv[i]); /* d(sum(x * scale)) / d scale = x */
    assert_false(nb_tensor_requires_grad(nb_module_get_buffer(aff, "shift")));
    /* the whole net: Linear then Affine, against the ops by hand */
    double xin[4] = {1, 2, 3, 4};
    int64_t xs[2] = {2, 2};
    nb_tensor *x2 = NBT_CHECK(nb_tensor_from_data(xin, xs, 2, &p));
    nb_module *lin = nb_module_get_module(net, "0");
    nb_tensor *h = nb_linear(x2, nb_module_get_parameter(lin, "weight"), nb_module_get_parameter(lin, "bias"));
    nb_tensor *w2 = nb_add(nb_mul(h, nb_module_get_parameter(aff, "scale")), nb_module_get_buffer(aff, "shift"));
    nbt_assert_close(NBT_CHECK(nb_module_forward(net, x2)), NBT_CHECK(w2), 0, 0, "Sequential(Linear, Affine)");
    nb_module_free(net);
    assert_int_equal(g_freed, 1);
    nb_scope_end(s);
}

/* ---- a training loop over a module's parameters ------------------------------------------------ */

static void test_training_steps(void **state)
{
    (void)state;
    nb_manual_seed(5);
    nb_module *net = make_mlp(NB_FLOAT32);
    int np = nb_module_parameters(net, NULL, 0);
    nb_tensor *params[8];
    assert_int_equal(nb_module_parameters(net, params, np), 4);
    nb_sgd_params sp = nb_sgd_params_default();
    sp.lr = 0.05;
    sp.momentum = 0.9;
    nb_optim *opt = NBT_CHECK(nb_optim_sgd(params, np, &sp));
    int64_t xs[2] = {32, 8}, ys[2] = {32, 4};
    nb_tensor *x = NBT_CHECK(nb_randn(xs, 2, NULL)), *y = NBT_CHECK(nb_randn(ys, 2, NULL));
    double first = 0, last = 0;
    for (int step = 0; step < 30; step++) {
        nb_scope *s = nb_scope_begin();
        nb_tensor *loss = NBT_CHECK(nb_mse_loss(nb_module_forward(net, x), y, NB_REDUCE_MEAN));
        NBT_OK(nb_item(loss, step ? &last : &first));
        NBT_OK(nb_optim_zero_grad(opt));
        NBT_OK(nb_backward(loss, NULL, 0));
        NBT_OK(nb_optim_step(opt));
        nb_scope_end(s);
    }
    assert_true(last < 0.8 * first);
    nb_optim_free(opt);
    nb_tensor_free(x);
    nb_tensor_free(y);
    nb_module_free(net);
}

/* ---- errors ---------------------------------------------------------------------------------- */

static void test_load_errors(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    nb_module *net = make_mlp(NB_FLOAT32);
    nb_module *other = make_mlp(NB_FLOAT32);
    nb_tensor_map *sd = NBT_CHECK(nb_tensor_map_create());
    NBT_OK(nb_module_state_dict(other, sd));
    nb_tensor *w0 = NBT_CHECK(nb_clone(nb_module_get_parameter(nb_module_get_module(net, "0"), "weight")));

    /* unexpected key */
    int64_t one = 1;
    NBT_OK(nb_tensor_map_set(sd, "3.weight", NBT_CHECK(nb_zeros(&one, 1, NULL))));
    NBT_FAILS(nb_module_load_state_dict(net, sd, true) != NB_OK, NB_ERR_INVALID_ARG, "unexpected key", "\"3.weight\"", NULL);
    nbt_assert_close(nb_module_get_parameter(nb_module_get_module(net, "0"), "weight"), w0, 0, 0, "unchanged after a failed load");
    NBT_OK(nb_module_load_state_dict(net, sd, false));
    nbt_assert_close(nb_module_get_parameter(nb_module_get_module(net, "2"), "bias"),
                     nb_module_get_parameter(nb_module_get_module(other, "2"), "bias"), 0, 0, "non-strict load");
    nb_tensor_map_free(sd);

    /* missing key */
    sd = NBT_CHECK(nb_tensor_map_create());
    NBT_OK(nb_tensor_map_set(sd, "0.weight", nb_module_get_parameter(nb_module_get_module(other, "0"), "weight")));
    NBT_FAILS(nb_module_load_state_dict(net, sd, true) != NB_OK, NB_ERR_INVALID_ARG, "missing key", "\"0.bias\"", NULL);
    NBT_OK(nb_module_load_state_dict(net, sd, false));
    nb_tensor_map_free(sd);

    /* shape mismatch, strict or not */
    sd = NBT_CHECK(nb_tensor_map_create());
    NBT_OK(nb_module_state_dict(other, sd));
    int64_t bad[2] = {16, 7};
    NBT_OK(nb_tensor_map_set(sd, "0.weight", NBT_CHECK(nb_zeros(bad, 2, NULL))));
    NBT_FAILS(nb_module_load_state_dict(net, sd, true) != NB_OK, NB_ERR_SHAPE, "size mismatch", "\"0.weight\"", "[16, 7]",
              "[16, 8]", NULL);
    NBT_FAILS(nb_module_load_state_dict(net, sd, false) != NB_OK, NB_ERR_SHAPE, "\"0.weight\"", NULL);
    NBT_FAILS(nb_module_load_state_dict(NULL, sd, true) != NB_OK, NB_ERR_INVALID_ARG, "load_state_dict", NULL);
    nb_tensor_map_free(sd);
    nb_module_free(other);
    nb_module_free(net);
    nb_scope_end(s);
}

static void test_errors(void **state)
{
    (void)state;
    nb_scope *s = nb_scope_begin();
    NBT_FAILS(nb_linear_module(0, 4, true, NULL) == NULL, NB_ERR_INVALID_ARG, "Linear", "in 0", NULL);
    nb_tensor_params ip = nb_tensor_params_default();
    ip.dtype = NB_INT64;
    NBT_FAILS(nb_linear_module(2, 4, true, &ip) == NULL, NB_ERR_DTYPE, "Linear", "int64", NULL);
    NBT_FAILS(nb_embedding_module(3, 0, NULL) == NULL, NB_ERR_INVALID_ARG, "Embedding", "dim 0", NULL);
    NBT_FAILS(nb_dropout_module(1.5) == NULL, NB_ERR_INVALID_ARG, "Dropout", "1.5", NULL);
    /* a failed constructor inside Sequential: its error survives, the other children are freed */
    NBT_FAILS(nb_sequential((nb_module *[]){nb_relu_module(), nb_linear_module(-1, 2, true, NULL), nb_tanh_module()}, 3) ==
                  NULL,
              NB_ERR_INVALID_ARG, "Sequential", "child 1", "Linear", NULL);
    NBT_FAILS(nb_module_create(NULL, NULL) == NULL, NB_ERR_INVALID_ARG, "module_create", NULL);

    nb_module *m = make_affine();
    int64_t n = 3;
    nb_tensor *t = NBT_CHECK(nb_zeros(&n, 1, NULL));
    NBT_FAILS(nb_module_register_parameter(m, "a.b", t) != NB_OK, NB_ERR_INVALID_ARG, "'.'", NULL);
    NBT_FAILS(nb_module_register_parameter(m, "", t) != NB_OK, NB_ERR_INVALID_ARG, "empty name", NULL);
    NBT_FAILS(nb_module_register_parameter(m, "shift", t) != NB_OK, NB_ERR_INVALID_ARG, "\"shift\"", "buffer", NULL);
    NBT_FAILS(nb_module_register_buffer(m, "scale", t) != NB_OK, NB_ERR_INVALID_ARG, "\"scale\"", "parameter", NULL);
    NBT_FAILS(nb_module_register_parameter(m, "idx", NBT_CHECK(nb_zeros(&n, 1, &ip))) != NB_OK, NB_ERR_DTYPE, "int64", NULL);
    nb_tensor *nonleaf = NBT_CHECK(nb_mul_scalar(nbt_leaf(t), 2.0));
    NBT_FAILS(nb_module_register_parameter(m, "w", nonleaf) != NB_OK, NB_ERR_INVALID_ARG, "leaf", NULL);
    NBT_FAILS(nb_module_register_module(m, "child", NULL) != NB_OK, NB_ERR_INVALID_ARG, "NULL module", NULL);
    /* re-registering replaces in place */
    NBT_OK(nb_module_register_parameter(m, "scale", t));
    assert_ptr_equal(nb_module_get_parameter(m, "scale"), t);
    assert_true(nb_tensor_requires_grad(t));
    nb_module *c = NBT_CHECK(nb_relu_module());
    NBT_OK(nb_module_register_module(m, "act", c));
    NBT_FAILS(nb_module_register_module(m, "again", c) != NB_OK, NB_ERR_INVALID_ARG, "already has a parent", NULL);
    nb_module *pure = NBT_CHECK(nb_module_create(&(nb_module_funcs){"Box", NULL, NULL}, NULL));
    NBT_FAILS(nb_module_forward(pure, t) == NULL, NB_ERR_UNSUPPORTED, "Box", "no forward", NULL);
    NBT_FAILS(nb_module_forward(m, NULL) == NULL, NB_ERR_INVALID_ARG, "NULL input", "Affine", NULL);
    assert_int_equal(nb_module_parameters(NULL, NULL, 0), -1);
    /* an op's error inside forward reaches the caller unchanged */
    nb_module *lin = NBT_CHECK(nb_linear_module(4, 2, true, NULL));
    NBT_FAILS(nb_module_forward(lin, t) == NULL, NB_ERR_SHAPE, "3", "4", NULL);
    nb_module_free(lin);
    nb_module_free(pure);
    nb_module_free(m);
    nb_scope_end(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_pytorch),  cmocka_unit_test(test_mlp_names_and_count),
        cmocka_unit_test(test_pytorch_loads_nabla), cmocka_unit_test(test_init),
        cmocka_unit_test(test_train_eval),   cmocka_unit_test(test_small_modules),
        cmocka_unit_test(test_custom_module), cmocka_unit_test(test_training_steps),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_errors),
    };
    return NBT_RUN(tests);
}
