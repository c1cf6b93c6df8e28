/* Built-in modules without convolution: Linear, Sequential, activations, Flatten, Dropout,
 * Embedding. Each is a forward function over nabla's ops plus a constructor that registers the
 * parameters with PyTorch's names and initial values. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error_impl.h"
#include "nabla/autograd.h"
#include "nabla/loss.h"
#include "nabla/module.h"
#include "nabla/ops.h"
#include "nn/models_impl.h"

/* The options of a module with scalar settings (slope, dims, p), kept in its user pointer. */
typedef struct scalar_opts {
    double value;
    int64_t dims[2];
} scalar_opts;

static const scalar_opts *opts(const nb_module *m) { return nb_module_user(m); }

static nb_module *with_opts(const nb_module_funcs *funcs, scalar_opts o)
{
    scalar_opts *u = malloc(sizeof *u);
    if (!u) return nb__err_null(NB_ERR_OOM, "%s: out of memory", funcs->type_name);
    *u = o;
    nb_module *m = nb_module_create(funcs, u);
    if (!m) free(u);
    return m;
}

/* Fills t with rand (uniform) or randn (normal) values scaled to mul * r + add, under no-grad. */
static nb_status init_fill(nb_tensor *t, bool normal, double mul, double add, nb_generator *g, const char *op)
{
    if (!t) return nb__err(NB_ERR_INVALID_ARG, "%s: NULL tensor", op);
    if (!nb_dtype_is_floating(nb_tensor_dtype(t)))
        return nb__err(NB_ERR_DTYPE, "%s: tensor must be floating (got %s)", op, nb_dtype_name(nb_tensor_dtype(t)));
    nb_tensor_params q = nb_tensor_params_default();
    q.dtype = nb_tensor_dtype(t);
    q.device = nb_tensor_device(t);
    q.generator = g;
    nb_scope *s = nb_scope_begin();
    if (!s) return nb__err(NB_ERR_OOM, "%s: out of memory", op);
    bool prev = nb_set_grad_enabled(false);
    nb_tensor *r = normal ? nb_randn(nb_tensor_shape(t), nb_tensor_ndim(t), &q)
                          : nb_rand(nb_tensor_shape(t), nb_tensor_ndim(t), &q);
    nb_tensor *v = r ? nb_add_scalar(nb_mul_scalar(r, mul), add) : NULL;
    nb_status st = v ? nb_copy_(t, v) : nb_last_status();
    nb_set_grad_enabled(prev);
    nb_scope_end(s);
    return st;
}

nb_status nb_init_uniform_(nb_tensor *t, double low, double high, nb_generator *g)
{
    if (!(low <= high)) return nb__err(NB_ERR_INVALID_ARG, "init_uniform_: low %g > high %g", low, high);
    return init_fill(t, false, high - low, low, g, "init_uniform_");
}

nb_status nb_init_normal_(nb_tensor *t, double mean, double std, nb_generator *g)
{
    if (!(std >= 0)) return nb__err(NB_ERR_INVALID_ARG, "init_normal_: std %g < 0", std);
    return init_fill(t, true, std, mean, g, "init_normal_");
}

/* A new caller-owned tensor of shape (dtype, device from p) initialised by init_uniform_ (normal
 * false) or init_normal_ with (a, b), registered as parameter `name`. */
static nb_status add_init_parameter(nb_module *m, const char *name, const int64_t *shape, int ndim, bool normal,
                                    double a, double b, const nb_tensor_params *p)
{
    nb_tensor_params q = p ? *p : nb_tensor_params_default();
    q.requires_grad = false;
    nb_scope *s = nb_scope_begin();
    if (!s) return nb__err(NB_ERR_OOM, "%s: out of memory", nb_module_type_name(m));
    nb_tensor *t = nb_empty(shape, ndim, &q);
    nb_status st = !t       ? nb_last_status()
                   : normal ? nb_init_normal_(t, a, b, q.generator)
                            : nb_init_uniform_(t, a, b, q.generator);
    if (st == NB_OK) st = nb_module_register_parameter(m, name, t);
    nb_scope_end(s);
    return st;
}

/* ---- Linear ---------------------------------------------------------------------------------- */

static nb_tensor *linear_forward(nb_module *self, nb_tensor *x)
{
    return nb_linear(x, nb_module_get_parameter(self, "weight"), nb_module_get_parameter(self, "bias"));
}

static const nb_module_funcs linear_funcs = {"Linear", linear_forward, NULL};

nb_module *nb_linear_module(int64_t in_features, int64_t out_features, bool bias, const nb_tensor_params *p)
{
    if (in_features < 1 || out_features < 1)
        return nb__err_null(NB_ERR_INVALID_ARG, "Linear: features must be >= 1 (in %lld, out %lld)",
                            (long long)in_features, (long long)out_features);
    if (p && !nb_dtype_is_floating(p->dtype))
        return nb__err_null(NB_ERR_DTYPE, "Linear: parameters must be floating (got %s)", nb_dtype_name(p->dtype));
    nb_module *m = nb_module_create(&linear_funcs, NULL);
    if (!m) return NULL;
    /* kaiming_uniform_(a = sqrt(5)): gain sqrt(2 / 6), bound gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in);
     * the bias uses the same bound */
    double bound = 1.0 / sqrt((double)in_features);
    int64_t wshape[2] = {out_features, in_features};
    nb_status s = add_init_parameter(m, "weight", wshape, 2, false, -bound, bound, p);
    if (s == NB_OK && bias) s = add_init_parameter(m, "bias", &out_features, 1, false, -bound, bound, p);
    if (s != NB_OK) {
        nb_module_free(m);
        return NULL;
    }
    return m;
}

/* ---- Sequential ------------------------------------------------------------------------------ */

static const char relu_type_name[] = "ReLU"; /* an address of its own, see modules_conv.c */

static nb_module *child_at(nb_module *self, int i)
{
    char name[24];
    snprintf(name, sizeof name, "%d", i);
    return nb_module_get_module(self, name);
}

/* The children in order; a Conv2d, a BatchNorm2d or a MaxPool2d immediately followed by a ReLU
 * runs as one op with the ReLU fused (nb__relu_forward: the same values and gradients, one node
 * and one pass fewer). */
static nb_tensor *sequential_forward(nb_module *self, nb_tensor *x)
{
    nb_tensor *y = x;
    nb_module *child, *next;
    for (int i = 0; y && (child = child_at(self, i)); i++) {
        next = nb__fuses_relu(child) ? child_at(self, i + 1) : NULL;
        if (next && nb_module_type_name(next) == relu_type_name) {
            y = nb__relu_forward(child, y);
            i++;
        } else {
            y = nb_module_forward(child, y);
        }
    }
    return y;
}

static const nb_module_funcs sequential_funcs = {"Sequential", sequential_forward, NULL};

nb_module *nb_sequential(nb_module **children, int n)
{
    nb_status s = NB_OK;
    if (n < 0 || (n > 0 && !children))
        s = nb__err(NB_ERR_INVALID_ARG, "Sequential: bad child list (n %d, children %s)", n, children ? "set" : "NULL");
    for (int i = 0; s == NB_OK && i < n; i++)
        if (!children[i]) {
            char prev[512];
            snprintf(prev, sizeof prev, "%s", nb_last_error());
            s = nb__err(NB_ERR_INVALID_ARG, "Sequential: child %d is NULL (%s)", i, *prev ? prev : "no error set");
        }
    nb_module *m = s == NB_OK ? nb_module_create(&sequential_funcs, NULL) : NULL;
    char name[24];
    for (int i = 0; i < n && children; i++) {
        if (!m) {
            nb_module_free(children[i]);
            continue;
        }
        snprintf(name, sizeof name, "%d", i);
        if (nb_module_register_module(m, name, children[i]) != NB_OK) {
            nb_module_free(m);
            m = NULL;
        }
    }
    return m;
}

/* ---- activations, Flatten, Dropout ----------------------------------------------------------- */

static nb_tensor *relu_forward(nb_module *self, nb_tensor *x) { return (void)self, nb_relu(x); }
static nb_tensor *sigmoid_forward(nb_module *self, nb_tensor *x) { return (void)self, nb_sigmoid(x); }
static nb_tensor *tanh_forward(nb_module *self, nb_tensor *x) { return (void)self, nb_tanh(x); }
static nb_tensor *gelu_forward(nb_module *self, nb_tensor *x) { return (void)self, nb_gelu(x, NB_GELU_NONE); }
static nb_tensor *leaky_forward(nb_module *self, nb_tensor *x) { return nb_leaky_relu(x, opts(self)->value); }

static nb_tensor *flatten_forward(nb_module *self, nb_tensor *x)
{
    return nb_flatten(x, opts(self)->dims[0], opts(self)->dims[1]);
}

static nb_tensor *dropout_forward(nb_module *self, nb_tensor *x)
{
    return nb_dropout(x, opts(self)->value, nb_module_is_training(self), NULL);
}

static const nb_module_funcs relu_funcs = {relu_type_name, relu_forward, NULL};
static const nb_module_funcs sigmoid_funcs = {"Sigmoid", sigmoid_forward, NULL};
static const nb_module_funcs tanh_funcs = {"Tanh", tanh_forward, NULL};
static const nb_module_funcs gelu_funcs = {"GELU", gelu_forward, NULL};
static const nb_module_funcs leaky_funcs = {"LeakyReLU", leaky_forward, free};
static const nb_module_funcs flatten_funcs = {"Flatten", flatten_forward, free};
static const nb_module_funcs dropout_funcs = {"Dropout", dropout_forward, free};

nb_module *nb_relu_module(void) { return nb_module_create(&relu_funcs, NULL); }
nb_module *nb_sigmoid_module(void) { return nb_module_create(&sigmoid_funcs, NULL); }
nb_module *nb_tanh_module(void) { return nb_module_create(&tanh_funcs, NULL); }
nb_module *nb_gelu_module(void) { return nb_module_create(&gelu_funcs, NULL); }

nb_module *nb_leaky_relu_module(double negative_slope)
{
    return with_opts(&leaky_funcs, (scalar_opts){negative_slope, {0, 0}});
}

nb_module *nb_flatten_module(int64_t start_dim, int64_t end_dim)
{
    return with_opts(&flatten_funcs, (scalar_opts){0, {start_dim, end_dim}});
}

nb_module *nb_dropout_module(double p)
{
    if (!(p >= 0.0 && p <= 1.0))
        return nb__err_null(NB_ERR_INVALID_ARG, "Dropout: probability has to be between 0 and 1, but got %g", p);
    return with_opts(&dropout_funcs, (scalar_opts){p, {0, 0}});
}

/* ---- Embedding ------------------------------------------------------------------------------- */

static nb_tensor *embedding_forward(nb_module *self, nb_tensor *x)
{
    return nb_embedding(nb_module_get_parameter(self, "weight"), x);
}

static const nb_module_funcs embedding_funcs = {"Embedding", embedding_forward, NULL};

nb_module *nb_embedding_module(int64_t num_embeddings, int64_t embedding_dim, const nb_tensor_params *p)
{
    if (num_embeddings < 1 || embedding_dim < 1)
        return nb__err_null(NB_ERR_INVALID_ARG, "Embedding: sizes must be >= 1 (num %lld, dim %lld)",
                            (long long)num_embeddings, (long long)embedding_dim);
    if (p && !nb_dtype_is_floating(p->dtype))
        return nb__err_null(NB_ERR_DTYPE, "Embedding: weight must be floating (got %s)", nb_dtype_name(p->dtype));
    nb_module *m = nb_module_create(&embedding_funcs, NULL);
    if (!m) return NULL;
    int64_t shape[2] = {num_embeddings, embedding_dim};
    if (add_init_parameter(m, "weight", shape, 2, true, 0.0, 1.0, p) != NB_OK) {
        nb_module_free(m);
        return NULL;
    }
    return m;
}
