/* Distinct tensors on distinct threads (core.h's contract): four threads train the same small
 * network from the same seed at once, while provoking errors and switching grad mode, and each
 * must end with the parameters of the same run made alone on the main thread. Each thread's last
 * error, scopes and grad mode are its own: a failure on one thread is not seen by another, and
 * no_grad on one thread records nothing there while the others keep recording. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "nbtest.h"

#define NTHREADS 4
#define STEPS 200
#define NPARAM 4
#define MAXW 256

typedef struct job {
    int id;
    float w[NPARAM][MAXW]; /* the parameters after training */
    int64_t n[NPARAM];
    char failure[256]; /* empty when the thread's own checks passed */
} job;

#define JOB_CHECK(j, cond)                                                                       \
    do {                                                                                         \
        if (!(cond) && !(j)->failure[0])                                                         \
            snprintf((j)->failure, sizeof (j)->failure, "thread %d: %s:%d: %s (%s)", (j)->id,     \
                     __FILE__, __LINE__, #cond, nb_last_error());                                \
    } while (0)

/* Trains an 8-16-4 MLP (tanh) for STEPS SGD-with-momentum steps on a fixed batch; with `noisy`,
 * each step also fails a shape-mismatched add and runs a forward under no_grad. */
static void train(job *j, bool noisy)
{
    nb_scope *s = nb_scope_begin();
    nb_generator *g = nb_generator_create(42);
    JOB_CHECK(j, s && g);
    if (!s || !g) return;
    nb_tensor_params p = nb_tensor_params_default();
    p.generator = g;
    nb_module *layers[3] = {nb_linear_module(8, 16, true, &p), nb_tanh_module(), nb_linear_module(16, 4, true, &p)};
    nb_module *m = nb_sequential(layers, 3);
    JOB_CHECK(j, m);
    nb_tensor *params[NPARAM];
    int np = m ? nb_module_parameters(m, params, NPARAM) : 0;
    JOB_CHECK(j, np == NPARAM);
    nb_sgd_params sp = nb_sgd_params_default();
    sp.lr = 0.1;
    sp.momentum = 0.9;
    nb_optim *opt = np == NPARAM ? nb_optim_sgd(params, np, &sp) : NULL;
    JOB_CHECK(j, opt);
    nb_tensor *x = nb_randn((int64_t[]){32, 8}, 2, &p);
    nb_tensor_params ip = p;
    ip.dtype = NB_INT64;
    nb_tensor *y = nb_randint(0, 4, (int64_t[]){32}, 1, &ip);
    nb_tensor *wrong = nb_zeros((int64_t[]){5}, 1, NULL);
    JOB_CHECK(j, x && y && wrong);
    for (int step = 0; opt && x && y && wrong && step < STEPS && !j->failure[0]; step++) {
        nb_scope *ss = nb_scope_begin();
        JOB_CHECK(j, nb_optim_zero_grad(opt) == NB_OK);
        nb_tensor *loss = nb_cross_entropy(nb_module_forward(m, x), y, NULL);
        JOB_CHECK(j, loss);
        if (noisy) {
            /* this thread's error, with this thread's values */
            JOB_CHECK(j, nb_add(x, wrong) == NULL);
            JOB_CHECK(j, nb_last_status() == NB_ERR_SHAPE && strstr(nb_last_error(), "[32, 8]"));
            nb_clear_error();
            /* no_grad here records nothing; the other threads keep recording */
            bool prev = nb_set_grad_enabled(false);
            nb_tensor *out = nb_module_forward(m, x);
            JOB_CHECK(j, out && nb_tensor_grad_fn_name(out) == NULL);
            nb_set_grad_enabled(prev);
        }
        JOB_CHECK(j, loss && nb_tensor_grad_fn_name(loss) != NULL);
        JOB_CHECK(j, loss && nb_backward(loss, NULL, 0) == NB_OK);
        JOB_CHECK(j, nb_optim_step(opt) == NB_OK);
        /* no error is left on this thread by its own successful steps, whatever the others do */
        JOB_CHECK(j, nb_last_status() == NB_OK);
        nb_scope_end(ss);
    }
    for (int i = 0; i < np; i++) {
        j->n[i] = nb_tensor_numel(params[i]);
        JOB_CHECK(j, j->n[i] <= MAXW);
        if (j->n[i] <= MAXW) memcpy(j->w[i], nb_tensor_data_ptr(params[i]), (size_t)j->n[i] * sizeof(float));
    }
    nb_optim_free(opt);
    nb_module_free(m);
    nb_generator_free(g);
    nb_scope_end(s);
}

static void *thread_main(void *arg)
{
    job *j = arg;
    train(j, true);
    return NULL;
}

static void test_threads_train_alike(void **state)
{
    (void)state;
    static job alone, jobs[NTHREADS];
    alone.id = -1;
    train(&alone, false);
    assert_string_equal(alone.failure, "");
    pthread_t t[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].id = i;
        assert_int_equal(pthread_create(&t[i], NULL, thread_main, &jobs[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < NTHREADS; i++) {
        if (jobs[i].failure[0]) fail_msg("%s", jobs[i].failure);
        for (int k = 0; k < NPARAM; k++) {
            assert_int_equal(jobs[i].n[k], alone.n[k]);
            for (int64_t e = 0; e < alone.n[k]; e++) {
                /* the products may take another library on another thread (timed choice): to
                 * float32 rounding, over STEPS steps */
                float a = alone.w[k][e], b = jobs[i].w[k][e];
                if (!(fabsf(a - b) <= 1e-5f + 1e-4f * fabsf(a)))
                    fail_msg("thread %d, parameter %d[%lld]: %.9g, alone %.9g", i, k, (long long)e, b, a);
            }
        }
    }
    /* the training moved the parameters: the comparison is not of the untouched initial values
     * (the first layer's weight is the generator's first draw) */
    nb_scope *s = nb_scope_begin();
    nb_generator *g = NBT_CHECK(nb_generator_create(42));
    nb_tensor_params p = nb_tensor_params_default();
    p.generator = g;
    nb_module *l0 = NBT_CHECK(nb_linear_module(8, 16, true, &p));
    const float *w0 = nb_tensor_data_ptr(NBT_CHECK(nb_module_get_parameter(l0, "weight")));
    double moved = 0;
    for (int e = 0; e < 128; e++) moved += fabsf(w0[e] - alone.w[0][e]);
    assert_true(moved > 1e-2);
    nb_module_free(l0);
    nb_generator_free(g);
    nb_scope_end(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_threads_train_alike)};
    return NBT_RUN(tests);
}
