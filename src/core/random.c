/* Random numbers: generators and the random ops' entry points.
 *
 * A generator is a seed and a 64-bit counter offset (see core/philox_impl.h). Each call reserves
 * the counters it needs under the generator's mutex, on the host, and passes seed and first
 * counter to the kernel, which computes element i from counter offset + i / per alone. So values
 * depend only on the seed, the order of calls and the element index: never on the thread count
 * or the device. A generator is not tied to a device: the same one can drive CPU and CUDA ops.
 */
#include <pthread.h>
#include <stdlib.h>

#include "autograd/autograd_impl.h"
#include "core/philox_impl.h"

/* PyTorch's default seed (c10::default_rng_seed_val). */
#define NB_DEFAULT_SEED 67280421310721ull
#define NB_MAX_CUDA_GENERATORS 64

struct nb_generator {
    pthread_mutex_t mu;
    uint64_t seed;
    uint64_t offset; /* the next unused Philox counter */
};

#define DEFAULT_GEN {PTHREAD_MUTEX_INITIALIZER, NB_DEFAULT_SEED, 0}
static nb_generator g_cpu_default = DEFAULT_GEN;
/* One per CUDA device, created on first use (a device index beyond the table shares the last). */
static nb_generator g_cuda_default[NB_MAX_CUDA_GENERATORS];
static pthread_once_t g_cuda_once = PTHREAD_ONCE_INIT;

static void init_cuda_defaults(void)
{
    for (int i = 0; i < NB_MAX_CUDA_GENERATORS; i++) {
        pthread_mutex_init(&g_cuda_default[i].mu, NULL);
        g_cuda_default[i].seed = NB_DEFAULT_SEED;
        g_cuda_default[i].offset = 0;
    }
}

static nb_generator *default_generator(nb_device d)
{
    if (d.type == NB_DEVICE_CPU) return &g_cpu_default;
    pthread_once(&g_cuda_once, init_cuda_defaults);
    int i = d.index < 0 ? 0 : d.index >= NB_MAX_CUDA_GENERATORS ? NB_MAX_CUDA_GENERATORS - 1 : d.index;
    return &g_cuda_default[i];
}

nb_generator *nb_generator_create(uint64_t seed)
{
    nb_generator *g = malloc(sizeof *g);
    if (!g) return nb__err_null(NB_ERR_OOM, "generator_create: out of host memory");
    if (pthread_mutex_init(&g->mu, NULL) != 0) {
        free(g);
        return nb__err_null(NB_ERR_INTERNAL, "generator_create: pthread_mutex_init failed");
    }
    g->seed = seed;
    g->offset = 0;
    return g;
}

void nb_generator_free(nb_generator *g)
{
    if (!g) return;
    pthread_mutex_destroy(&g->mu);
    free(g);
}

void nb_generator_manual_seed(nb_generator *g, uint64_t seed)
{
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->seed = seed;
    g->offset = 0;
    pthread_mutex_unlock(&g->mu);
}

void nb_manual_seed(uint64_t seed)
{
    nb_generator_manual_seed(&g_cpu_default, seed);
    pthread_once(&g_cuda_once, init_cuda_defaults);
    for (int i = 0; i < NB_MAX_CUDA_GENERATORS; i++) nb_generator_manual_seed(&g_cuda_default[i], seed);
}

/* Reserves `counters` counters of g: fills the kernel's seed and first counter. */
static void reserve(nb_generator *g, uint64_t counters, nb_kargs *a)
{
    pthread_mutex_lock(&g->mu);
    a->seed = g->seed;
    a->offset = g->offset;
    g->offset += counters;
    pthread_mutex_unlock(&g->mu);
}

static bool wide_elements(nb_op op, nb_dtype dt)
{
    return op == NB_OP_RANDINT || dt == NB_FLOAT64;
}

/* Reserves the counters for out's elements and runs op's kernel. Inside a CUDA graph capture it
 * refuses before reserving, so that the generator is left as it was. */
static nb_status generate(nb_op op, nb_tensor *out, nb_generator *g, nb_kargs *a)
{
    int64_t n = nb__numel(out->shape, out->ndim);
    if (n == 0) return NB_OK;
    if (nb__device_capturing(out->storage->device))
        return nb__device_capture_refuse(out->storage->device, nb__op_name(op),
                                         "random numbers drawn in a capture would be the same at every replay "
                                         "(not supported yet)");
    uint64_t per = (uint64_t)nb__philox_per_counter(wide_elements(op, out->dtype));
    reserve(g ? g : default_generator(out->storage->device), ((uint64_t)n + per - 1) / per, a);
    a->out = out;
    return nb__dispatch(op, a);
}

/* The shape errors named after the op (nb__tensor_new would call them "empty"). */
static nb_status check_shape(const char *op, const int64_t *shape, int ndim)
{
    if (ndim < 0 || ndim > NB_MAX_DIMS)
        return nb__err(NB_ERR_INVALID_ARG, "%s: %d dims (at most %d)", op, ndim, NB_MAX_DIMS);
    if (ndim > 0 && !shape) return nb__err(NB_ERR_INVALID_ARG, "%s: NULL shape with %d dims", op, ndim);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            char s[NB_SHAPE_STR_MAX];
            return nb__err(NB_ERR_SHAPE, "%s: negative size in shape %s", op, nb__shape_str(shape, ndim, s));
        }
    }
    return NB_OK;
}

/* rand / randn / randint: checks, allocates, fills and finishes (requires_grad, scope). */
static nb_tensor *random_new(nb_op op, const int64_t *shape, int ndim, const nb_tensor_params *p,
                             nb_kargs *a)
{
    const char *name = nb__op_name(op);
    if (check_shape(name, shape, ndim) != NB_OK) return NULL;
    if (nb_device_check(p->device) != NB_OK) return NULL;
    if (p->requires_grad && !nb_dtype_is_floating(p->dtype))
        return nb__err_null(NB_ERR_DTYPE, "%s: only floating tensors can require grad, not %s", name,
                            nb_dtype_name(p->dtype));
    nb_tensor *t = nb__tensor_new(shape, ndim, p->dtype, p->device);
    if (!t) return NULL;
    if (generate(op, t, p->generator, a) != NB_OK) {
        nb__release(t);
        return NULL;
    }
    t->requires_grad = p->requires_grad;
    return nb__track(t);
}

static nb_status check_float(const char *op, nb_dtype dt)
{
    if ((unsigned)dt >= NB_DTYPE_COUNT) return nb__err(NB_ERR_DTYPE, "%s: invalid dtype %d", op, (int)dt);
    if (!nb_dtype_is_floating(dt))
        return nb__err(NB_ERR_DTYPE, "%s: needs a floating dtype, not %s", op, nb_dtype_name(dt));
    return NB_OK;
}

nb_tensor *nb_rand(const int64_t *shape, int ndim, const nb_tensor_params *pp)
{
    nb_tensor_params p = pp ? *pp : nb_tensor_params_default();
    if (check_float("rand", p.dtype) != NB_OK) return NULL;
    nb_kargs a = {0};
    return random_new(NB_OP_RAND, shape, ndim, &p, &a);
}

nb_tensor *nb_randn(const int64_t *shape, int ndim, const nb_tensor_params *pp)
{
    nb_tensor_params p = pp ? *pp : nb_tensor_params_default();
    if (check_float("randn", p.dtype) != NB_OK) return NULL;
    nb_kargs a = {0};
    return random_new(NB_OP_RANDN, shape, ndim, &p, &a);
}

/* The largest integer every value up to which the dtype holds exactly, and its smallest. */
static void dtype_int_range(nb_dtype dt, double *lo, double *hi)
{
    switch (dt) {
    case NB_INT32: *lo = -2147483648.0, *hi = 2147483647.0; break;
    case NB_UINT8: *lo = 0, *hi = 255; break;
    case NB_BOOL: *lo = 0, *hi = 1; break;
    case NB_FLOAT32: *lo = -16777216.0, *hi = 16777216.0; break;
    case NB_FLOAT16: *lo = -2048, *hi = 2048; break;
    case NB_BFLOAT16: *lo = -256, *hi = 256; break;
    case NB_FLOAT64: *lo = -9007199254740992.0, *hi = 9007199254740992.0; break;
    default: *lo = -9223372036854775808.0, *hi = 9223372036854775807.0; break;
    }
}

nb_tensor *nb_randint(int64_t low, int64_t high, const int64_t *shape, int ndim, const nb_tensor_params *pp)
{
    nb_tensor_params p = pp ? *pp : nb_tensor_params_default();
    if (!pp) p.dtype = NB_INT64;
    if ((unsigned)p.dtype >= NB_DTYPE_COUNT)
        return nb__err_null(NB_ERR_DTYPE, "randint: invalid dtype %d", (int)p.dtype);
    if (low >= high)
        return nb__err_null(NB_ERR_INVALID_ARG, "randint: low (%lld) must be less than high (%lld)",
                            (long long)low, (long long)high);
    double lo, hi;
    dtype_int_range(p.dtype, &lo, &hi);
    /* high is exclusive: the largest value drawn is high - 1 */
    if ((double)low < lo || (double)(high - 1) > hi)
        return nb__err_null(NB_ERR_INVALID_ARG, "randint: range [%lld, %lld) does not fit in %s", (long long)low,
                            (long long)high, nb_dtype_name(p.dtype));
    nb_kargs a = {.i0 = low, .i1 = high};
    return random_new(NB_OP_RANDINT, shape, ndim, &p, &a);
}

static nb_tensor *like(const nb_tensor *t, nb_tensor *(*fn)(const int64_t *, int, const nb_tensor_params *),
                       const char *op)
{
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "%s: NULL tensor", op);
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = t->dtype;
    p.device = t->storage->device;
    if (!nb_dtype_is_floating(t->dtype))
        return nb__err_null(NB_ERR_DTYPE, "%s: needs a floating tensor, not %s", op, nb_dtype_name(t->dtype));
    return fn(t->shape, t->ndim, &p);
}

nb_tensor *nb_rand_like(const nb_tensor *t) { return like(t, nb_rand, "rand_like"); }
nb_tensor *nb_randn_like(const nb_tensor *t) { return like(t, nb_randn, "randn_like"); }

/* out[i] = u_i < probs[i] with u_i uniform on [0, 1); out has probs' shape and dtype. The kernel
 * checks that every probability lies in [0, 1]. Differentiable like PyTorch's: the gradient
 * with respect to probs is zero (rules_random.c). */
nb_tensor *nb_bernoulli(const nb_tensor *probs, nb_generator *g)
{
    if (!probs) return nb__err_null(NB_ERR_INVALID_ARG, "bernoulli: NULL probs");
    if (!nb_dtype_is_floating(probs->dtype))
        return nb__err_null(NB_ERR_DTYPE, "bernoulli: probs must be a floating tensor, not %s",
                            nb_dtype_name(probs->dtype));
    nb_tensor *out = nb__tensor_new(probs->shape, probs->ndim, probs->dtype, probs->storage->device);
    if (!out) return NULL;
    nb_kargs a = {.in = {probs}};
    if (generate(NB_OP_BERNOULLI, out, g, &a) != NB_OK) {
        nb__release(out);
        return NULL;
    }
    nb_status st = NB_OK;
    nb__record(NB_OP_BERNOULLI, out, &probs, 1, NULL, 0, &st);
    if (st != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return nb__track(out);
}
