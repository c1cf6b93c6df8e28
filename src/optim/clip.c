/* Gradient clipping, as torch.nn.utils.clip_grad_norm_ / clip_grad_value_. */
#include <math.h>

#include "cpu/cpu_impl.h"
#include "optim/optim_impl.h"

/* max that lets NaN win, as the total norm does */
static double nan_max(double a, double b) { return a > b || isnan(a) ? a : b; }

/* sum g^2 over float32 x[0, n) in float64: chunks of a size that depends on n alone, each summed
 * on the vector units, on the threads, and the chunks' sums added in order, so the result does
 * not depend on the thread count. (One float64 sum in a loop ran at one add per 4 cycles: 8 ms
 * of the DLBench LSTM's 560 ms step at 1 thread.) */
#define SQ_CHUNKS 1024
static double sum_squares_f32(const float *x, int64_t n)
{
    int64_t chunk = (n + SQ_CHUNKS - 1) / SQ_CHUNKS;
    if (chunk < 65536) chunk = 65536;
    int64_t nc = (n + chunk - 1) / chunk;
    double part[SQ_CHUNKS];
    int nt = nb_cpu_threads_for(n, NB_CPU_GRAIN);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t c = 0; c < nc; c++) {
        const float *xc = x + c * chunk;
        int64_t len = n - c * chunk < chunk ? n - c * chunk : chunk;
        double acc = 0;
#pragma omp simd reduction(+ : acc)
        for (int64_t i = 0; i < len; i++) acc += (double)xc[i] * (double)xc[i];
        part[c] = acc;
    }
    double total = 0;
    for (int64_t c = 0; c < nc; c++) total += part[c];
    return total;
}

/* sum |g|^p (or max |g| when p is infinite) over a contiguous CPU tensor, in float64. */
static double accumulate(const nb_tensor *g, double p)
{
    int64_t n = nb__numel(g->shape, g->ndim);
    double acc = 0;
    if (g->dtype == NB_FLOAT32 && p == 2) return sum_squares_f32((const float *)nb__data(g), n);
    if (g->dtype == NB_FLOAT32) {
        const float *x = (const float *)nb__data(g);
        for (int64_t i = 0; i < n; i++) {
            double a = fabs((double)x[i]);
            acc = isinf(p) ? nan_max(a, acc) : acc + (p == 2 ? a * a : pow(a, p));
        }
    } else {
        const double *x = (const double *)nb__data(g);
        for (int64_t i = 0; i < n; i++) {
            double a = fabs(x[i]);
            acc = isinf(p) ? nan_max(a, acc) : acc + (p == 2 ? a * a : pow(a, p));
        }
    }
    return acc;
}

/* The same for device gradients, left on the device: each device's sum |g|^p (or max) builds up
 * in a float64 0-dim tensor, read back once per device after all gradients are queued (PyTorch's
 * clip_grad_norm_ waits once too). */
typedef struct dev_acc {
    nb_device dev;
    nb_tensor *acc; /* scope-owned */
} dev_acc;

static nb_status accumulate_on_device(const nb_tensor *g, double p, dev_acc *accs, int *n, int cap)
{
    nb_tensor *t = nb_norm(g, p, NULL, 0, false);
    t = t ? nb_to_dtype(t, NB_FLOAT64) : NULL;
    if (t && !isinf(p)) t = nb_pow_scalar(t, p);
    if (!t) return nb_last_status();
    int k = 0;
    while (k < *n && !nb_device_equal(accs[k].dev, g->storage->device)) k++;
    if (k == *n) {
        if (k == cap) return nb__err(NB_ERR_UNSUPPORTED, "clip_grad_norm_: gradients on more than %d devices", cap);
        accs[(*n)++] = (dev_acc){g->storage->device, t};
        return NB_OK;
    }
    /* maximum propagates NaN, as the CPU path's max does */
    accs[k].acc = isinf(p) ? nb_maximum(accs[k].acc, t) : nb_add(accs[k].acc, t);
    return accs[k].acc ? NB_OK : nb_last_status();
}

nb_tensor *nb__clip_coef(const nb_tensor *acc, double p, double max_norm)
{
    nb_tensor *t = isinf(p) ? nb_add_scalar(acc, 0) : p == 2 ? nb_sqrt(acc) : nb_pow_scalar(acc, 1 / p);
    t = t ? nb_add_scalar(t, 1e-6) : NULL;
    t = t ? nb_pow_scalar(t, -1) : NULL;
    t = t ? nb_mul_scalar(t, max_norm) : NULL;
    return t ? nb_clamp(t, -INFINITY, 1) : NULL;
}

/* Scales every grad by the coefficient made on the device from its one accumulator, without
 * reading anything back (the caller did not ask for the norm). */
static nb_status scale_on_device(nb_tensor *const *params, int n, const nb_tensor *acc, double p, double max_norm)
{
    nb_tensor *coef = nb__clip_coef(acc, p, max_norm), *as[2] = {NULL, NULL}; /* float32, float64 */
    if (!coef) return nb_last_status();
    for (int i = 0; i < n; i++) {
        nb_tensor *g = params[i]->grad;
        if (!g) continue;
        int k = g->dtype == NB_FLOAT64;
        if (!as[k] && !(as[k] = nb_to_dtype(coef, g->dtype))) return nb_last_status();
        NB_TRY(nb_mul_(g, as[k]));
    }
    return NB_OK;
}

/* Adds the devices' accumulators (read back) to total, the CPU grads' sum, takes the root, and
 * scales every grad by the coefficient; total becomes the norm. */
static nb_status scale_on_host(nb_tensor *const *params, int n, const dev_acc *accs, int naccs, double p,
                               double max_norm, double *total)
{
    for (int k = 0; k < naccs; k++) {
        double a = 0;
        NB_TRY(nb_item(accs[k].acc, &a));
        *total = isinf(p) ? nan_max(a, *total) : *total + a;
    }
    if (!isinf(p)) *total = p == 2 ? sqrt(*total) : pow(*total, 1 / p);
    double coef = max_norm / (*total + 1e-6);
    if (coef > 1) coef = 1;
    for (int i = 0; i < n; i++)
        if (params[i]->grad) NB_TRY(nb_mul_scalar_(params[i]->grad, coef));
    return NB_OK;
}

static nb_status check_grads(const char *op, nb_tensor *const *params, int n)
{
    if (n < 0 || (n > 0 && !params)) return nb__err(NB_ERR_INVALID_ARG, "%s: bad parameter list (n = %d)", op, n);
    for (int i = 0; i < n; i++) {
        if (!params[i]) return nb__err(NB_ERR_INVALID_ARG, "%s: params[%d] is NULL", op, i);
        const nb_tensor *g = params[i]->grad;
        if (!g) continue;
        if (g->dtype != NB_FLOAT32 && g->dtype != NB_FLOAT64)
            return nb__err(NB_ERR_DTYPE, "%s: the grad of params[%d] has dtype %s", op, i, nb_dtype_name(g->dtype));
    }
    return NB_OK;
}

nb_status nb_clip_grad_norm_(nb_tensor *const *params, int n, double max_norm, double norm_type,
                             double *total_norm_out)
{
    const char *op = "clip_grad_norm_";
    if (total_norm_out) *total_norm_out = 0;
    if (!(max_norm >= 0)) return nb__err(NB_ERR_INVALID_ARG, "%s: invalid max_norm %g", op, max_norm);
    if (!(norm_type > 0)) return nb__err(NB_ERR_INVALID_ARG, "%s: invalid norm_type %g", op, norm_type);
    NB_TRY(check_grads(op, params, n));
    bool prev = nb_set_grad_enabled(false);
    nb_scope *sc = nb_scope_begin();
    double total = 0;
    dev_acc accs[16];
    int naccs = 0;
    bool on_cpu = false;
    nb_status st = sc ? NB_OK : nb__err(NB_ERR_OOM, "%s: out of memory", op);
    for (int i = 0; i < n && st == NB_OK; i++) {
        if (!params[i]->grad) continue;
        nb_tensor *g = nb_contiguous(params[i]->grad);
        if (!g) {
            st = nb_last_status();
            break;
        }
        if (g->storage->device.type == NB_DEVICE_CPU) {
            on_cpu = true;
            double a = accumulate(g, norm_type);
            total = isinf(norm_type) ? nan_max(a, total) : total + a;
        } else {
            st = accumulate_on_device(g, norm_type, accs, &naccs, (int)(sizeof accs / sizeof *accs));
        }
    }
    if (st == NB_OK && !total_norm_out && !on_cpu && naccs == 1)
        st = scale_on_device(params, n, accs[0].acc, norm_type, max_norm); /* no host synchronisation */
    else if (st == NB_OK)
        st = scale_on_host(params, n, accs, naccs, norm_type, max_norm, &total);
    nb_scope_end(sc);
    nb_set_grad_enabled(prev);
    if (st == NB_OK && total_norm_out) *total_norm_out = total;
    return st;
}

nb_status nb_clip_grad_value_(nb_tensor *const *params, int n, double clip)
{
    const char *op = "clip_grad_value_";
    if (!(clip >= 0)) return nb__err(NB_ERR_INVALID_ARG, "%s: invalid clip value %g", op, clip);
    NB_TRY(check_grads(op, params, n));
    bool prev = nb_set_grad_enabled(false);
    nb_scope *sc = nb_scope_begin();
    nb_status st = sc ? NB_OK : nb__err(NB_ERR_OOM, "%s: out of memory", op);
    for (int i = 0; i < n && st == NB_OK; i++) {
        nb_tensor *g = params[i]->grad;
        if (!g) continue;
        nb_tensor *c = nb_clamp(g, -clip, clip);
        st = c ? nb_copy_(g, c) : nb_last_status();
    }
    nb_scope_end(sc);
    nb_set_grad_enabled(prev);
    return st;
}
