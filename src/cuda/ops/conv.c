/* CUDA kernels' C side for the conv family, through cuDNN (NCHW, contiguous operands, float32 or
 * float64): CONV2D (then the bias with cudnnAddTensor and, with the fused-ReLU flag, the ReLU in
 * place), CONV2D_BACKWARD_INPUT (backward data) and CONV2D_BACKWARD_WEIGHT (backward filter, and
 * the bias gradient with our channel sum, chansum.cu). Each (direction, shape, parameters, dtype, device, TF32 switch) has a plan:
 * its descriptors, made once, and the algorithm cuDNN's search (cudnnFind*, which times the
 * candidates) found fastest; NABLA_CUDNN_TRACE=1 prints the search's results. The workspace comes
 * from the caching allocator. float32 convolutions use TF32 tensor cores unless
 * nb_cuda_set_allow_tf32_conv(false) says not (CUDNN_FMA_MATH then): PyTorch's default, whose
 * torch.backends.cudnn.allow_tf32 is on while its matmul switch is off. */
#include <cudnn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor_impl.h"
#include "cuda/cuda_impl.h"

static cudnnHandle_t g_handle[NB_CUDA_MAX_DEVICES];

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static nb_status dnn_err(cudnnStatus_t s, const char *what)
{
    return nb__err(s == CUDNN_STATUS_ALLOC_FAILED ? NB_ERR_OOM : NB_ERR_DEVICE, "%s: cuDNN: %s", what,
                   cudnnGetErrorString(s));
}

#define DNN_TRY(call, what)                                                                      \
    do {                                                                                         \
        cudnnStatus_t nb__s = (call);                                                            \
        if (nb__s != CUDNN_STATUS_SUCCESS) {                                                     \
            st = dnn_err(nb__s, what);                                                           \
            goto done;                                                                           \
        }                                                                                        \
    } while (0)

/* ---- plans: descriptors and the algorithm, per shape ------------------------------------------ */

typedef struct conv_key {
    int dir, dev, dtype, tf32;
    int64_t n, c, h, w, o, kh, kw;
    int64_t i0, i1;
} conv_key;

typedef struct descs {
    cudnnTensorDescriptor_t x, y, b;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnActivationDescriptor_t act;
} descs;

/* What one (direction, shape, parameters, dtype, device, TF32 switch) needs: its descriptors, made
 * once, and the algorithm cuDNN's search found fastest, with its math type and workspace. */
typedef struct conv_plan {
    conv_key key;
    descs d;
    int algo;
    size_t wsz;
} conv_plan;

#define PLANS_MAX 1024
static conv_plan *g_plans[PLANS_MAX]; /* kept for the process's life; beyond: made per call */
static int g_nplans;

static void descs_free(descs *d)
{
    if (d->x) cudnnDestroyTensorDescriptor(d->x);
    if (d->y) cudnnDestroyTensorDescriptor(d->y);
    if (d->b) cudnnDestroyTensorDescriptor(d->b);
    if (d->w) cudnnDestroyFilterDescriptor(d->w);
    if (d->conv) cudnnDestroyConvolutionDescriptor(d->conv);
    if (d->act) cudnnDestroyActivationDescriptor(d->act);
}

/* Descriptors for input x [N, C, H, W], weight w [O, C/g, KH, KW], output y [N, O, OH, OW]. */
static nb_status descs_make(descs *d, const nb_tensor *x, const nb_tensor *w, const nb_tensor *y, int64_t i0,
                            int64_t i1, bool tf32)
{
    nb_status st = NB_OK;
    cudnnDataType_t ty = x->dtype == NB_FLOAT64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    int sh = (int)(i0 & 0xffff), sw = (int)(i0 >> 16 & 0xffff), ph = (int)(i0 >> 32 & 0xffff),
        pw = (int)(i0 >> 48 & 0xffff);
    int dh = (int)(i1 & 0xffff), dw = (int)(i1 >> 16 & 0xffff), groups = (int)(i1 >> 32);
    memset(d, 0, sizeof *d);
    DNN_TRY(cudnnCreateTensorDescriptor(&d->x), "conv2d");
    DNN_TRY(cudnnCreateTensorDescriptor(&d->y), "conv2d");
    DNN_TRY(cudnnCreateTensorDescriptor(&d->b), "conv2d");
    DNN_TRY(cudnnCreateFilterDescriptor(&d->w), "conv2d");
    DNN_TRY(cudnnCreateConvolutionDescriptor(&d->conv), "conv2d");
    DNN_TRY(cudnnCreateActivationDescriptor(&d->act), "conv2d");
    DNN_TRY(cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, ty, (int)x->shape[0], (int)x->shape[1],
                                       (int)x->shape[2], (int)x->shape[3]),
            "conv2d");
    DNN_TRY(cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NCHW, ty, (int)y->shape[0], (int)y->shape[1],
                                       (int)y->shape[2], (int)y->shape[3]),
            "conv2d");
    DNN_TRY(cudnnSetTensor4dDescriptor(d->b, CUDNN_TENSOR_NCHW, ty, 1, (int)y->shape[1], 1, 1), "conv2d");
    DNN_TRY(cudnnSetFilter4dDescriptor(d->w, ty, CUDNN_TENSOR_NCHW, (int)w->shape[0], (int)w->shape[1],
                                       (int)w->shape[2], (int)w->shape[3]),
            "conv2d");
    DNN_TRY(cudnnSetConvolution2dDescriptor(d->conv, ph, pw, sh, sw, dh, dw, CUDNN_CROSS_CORRELATION, ty), "conv2d");
    DNN_TRY(cudnnSetConvolutionGroupCount(d->conv, groups), "conv2d");
    /* TF32 as PyTorch asks for it (CUDNN_TENSOR_OP_MATH); never the conversion to half precision
     * that CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION would permit */
    DNN_TRY(cudnnSetConvolutionMathType(d->conv, ty == CUDNN_DATA_FLOAT && tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
            "conv2d");
    DNN_TRY(cudnnSetActivationDescriptor(d->act, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0), "conv2d");
done:
    return st;
}

static nb_status handle_of(int dev, cudnnHandle_t *h)
{
    pthread_mutex_lock(&g_lock);
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    if (!g_handle[dev] && nb__cuda_capturing(dev)) {
        pthread_mutex_unlock(&g_lock);
        return nb__cuda_capture_refuse(dev, "conv2d", "cuDNN's handle cannot be made inside it (run a convolution "
                                       "before capturing)");
    }
    if (!g_handle[dev]) s = cudnnCreate(&g_handle[dev]);
    *h = g_handle[dev];
    pthread_mutex_unlock(&g_lock);
    return s == CUDNN_STATUS_SUCCESS ? NB_OK : dnn_err(s, "conv2d");
}

static conv_key key_of(int dir, int dev, const nb_tensor *x, const nb_tensor *w, const nb_kargs *a)
{
    conv_key k;
    memset(&k, 0, sizeof k); /* padding bytes too: the key is compared with memcmp */
    k.dir = dir, k.dev = dev, k.dtype = (int)x->dtype, k.tf32 = nb_cuda_get_allow_tf32_conv();
    k.n = x->shape[0], k.c = x->shape[1], k.h = x->shape[2], k.w = x->shape[3];
    k.o = w->shape[0], k.kh = w->shape[2], k.kw = w->shape[3];
    k.i0 = a->i0, k.i1 = a->i1;
    return k;
}

/* One candidate of cuDNN's search, whichever the direction. */
typedef struct found {
    cudnnStatus_t status;
    int algo;
    cudnnMathType_t math;
    float ms;
    size_t memory;
} found;

#define FIND_MAX 8
#define COPY_FOUND(perf, n, out)                                                                          \
    for (int i = 0; i < (n); i++)                                                                         \
    (out)[i] = (found){(perf)[i].status, (int)(perf)[i].algo, (perf)[i].mathType, (perf)[i].time, (perf)[i].memory}

/* cuDNN's timed search for the plan's direction (cudnnFind*: it allocates what it tries); the
 * fastest successful candidate sets the plan's algorithm and the descriptor's math type.
 * NABLA_CUDNN_TRACE=1 prints the candidates on stderr. */
static nb_status plan_search(cudnnHandle_t h, conv_plan *p)
{
    nb_status st = NB_OK;
    found f[FIND_MAX];
    int n = 0;
    descs *d = &p->d;
    static const char *dirs[3] = {"forward", "backward data", "backward filter"};
    if (p->key.dir == 0) {
        cudnnConvolutionFwdAlgoPerf_t perf[FIND_MAX];
        DNN_TRY(cudnnFindConvolutionForwardAlgorithm(h, d->x, d->w, d->conv, d->y, FIND_MAX, &n, perf), "conv2d");
        COPY_FOUND(perf, n, f);
    } else if (p->key.dir == 1) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[FIND_MAX];
        DNN_TRY(cudnnFindConvolutionBackwardDataAlgorithm(h, d->w, d->y, d->conv, d->x, FIND_MAX, &n, perf),
                "conv2d backward");
        COPY_FOUND(perf, n, f);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[FIND_MAX];
        DNN_TRY(cudnnFindConvolutionBackwardFilterAlgorithm(h, d->x, d->y, d->conv, d->w, FIND_MAX, &n, perf),
                "conv2d backward");
        COPY_FOUND(perf, n, f);
    }
    int best = -1;
    for (int i = 0; i < n && best < 0; i++)
        if (f[i].status == CUDNN_STATUS_SUCCESS) best = i;
    const char *tr = getenv("NABLA_CUDNN_TRACE");
    if (tr && *tr && strcmp(tr, "0")) {
        const conv_key *k = &p->key;
        fprintf(stderr, "nabla: cudnn %s [%lld,%lld,%lld,%lld] x [%lld,%lld,%lld]%s:", dirs[k->dir], (long long)k->n,
                (long long)k->c, (long long)k->h, (long long)k->w, (long long)k->o, (long long)k->kh, (long long)k->kw,
                k->tf32 ? " tf32" : "");
        for (int i = 0, shown = 0; i < n && shown < 3; i++)
            if (f[i].status == CUDNN_STATUS_SUCCESS)
                fprintf(stderr, " algo %d%s %.3f ms %.1f MiB;", f[i].algo, f[i].math == CUDNN_FMA_MATH ? " fma" : "",
                        (double)f[i].ms, (double)f[i].memory / 1048576.0),
                    shown++;
        fprintf(stderr, "\n");
    }
    if (best < 0) {
        st = nb__err(NB_ERR_DEVICE, "conv2d %s: cuDNN found no algorithm for input [%lld, %lld, %lld, %lld]", dirs[p->key.dir],
                     (long long)p->key.n, (long long)p->key.c, (long long)p->key.h, (long long)p->key.w);
        goto done;
    }
    p->algo = f[best].algo;
    DNN_TRY(cudnnSetConvolutionMathType(d->conv, f[best].math), "conv2d");
    if (p->key.dir == 0)
        DNN_TRY(cudnnGetConvolutionForwardWorkspaceSize(h, d->x, d->w, d->conv, d->y, (cudnnConvolutionFwdAlgo_t)p->algo,
                                                        &p->wsz),
                "conv2d");
    else if (p->key.dir == 1)
        DNN_TRY(cudnnGetConvolutionBackwardDataWorkspaceSize(h, d->w, d->y, d->conv, d->x,
                                                             (cudnnConvolutionBwdDataAlgo_t)p->algo, &p->wsz),
                "conv2d backward");
    else
        DNN_TRY(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d->x, d->y, d->conv, d->w,
                                                               (cudnnConvolutionBwdFilterAlgo_t)p->algo, &p->wsz),
                "conv2d backward");
done:
    return st;
}

/* The plan for (dir, x, w, y): from the table, else made and searched now. *owned: the caller
 * frees it (the table was full). */
static nb_status plan_get(cudnnHandle_t h, int dir, int dev, const nb_tensor *x, const nb_tensor *w,
                          const nb_tensor *y, const nb_kargs *a, conv_plan **out, bool *owned)
{
    conv_key key = key_of(dir, dev, x, w, a);
    *out = NULL, *owned = false;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < g_nplans; i++)
        if (!memcmp(&g_plans[i]->key, &key, sizeof key)) {
            *out = g_plans[i];
            pthread_mutex_unlock(&g_lock);
            return NB_OK;
        }
    if (nb__cuda_capturing(dev)) { /* cudnnFind* allocates, times and waits: not inside a capture */
        pthread_mutex_unlock(&g_lock);
        return nb__cuda_capture_refuse(dev, dir == 0 ? "conv2d" : "conv2d backward",
                                       "cuDNN's algorithm search cannot run inside it (run this convolution once "
                                       "before capturing)");
    }
    /* made under the lock: a search runs once per shape, and two threads never search one shape */
    conv_plan *p = calloc(1, sizeof *p);
    nb_status st = p ? NB_OK : nb__err(NB_ERR_OOM, "conv2d: out of host memory for a cuDNN plan");
    if (st == NB_OK) {
        p->key = key;
        st = descs_make(&p->d, x, w, y, a->i0, a->i1, key.tf32);
        if (st == NB_OK) st = plan_search(h, p);
    }
    if (st == NB_OK && g_nplans < PLANS_MAX) g_plans[g_nplans++] = p;
    else if (st == NB_OK) *owned = true;
    pthread_mutex_unlock(&g_lock);
    if (st != NB_OK && p) {
        descs_free(&p->d);
        free(p);
        return st;
    }
    *out = p;
    return st;
}

static void plan_release(conv_plan *p, bool owned)
{
    if (p && owned) {
        descs_free(&p->d);
        free(p);
    }
}

/* ---- the three directions ----------------------------------------------------------------------- */

/* cuDNN's alpha = 1 and beta = 0 in the type the data type asks for (double for float64). */
static const double k_one = 1, k_zero = 0;
static const float k_onef = 1, k_zerof = 0;
#define ALPHA(dt) ((dt) == NB_FLOAT64 ? (const void *)&k_one : (const void *)&k_onef)
#define BETA(dt) ((dt) == NB_FLOAT64 ? (const void *)&k_zero : (const void *)&k_zerof)

/* The workspace of wsz bytes from the caching allocator (NULL for 0 bytes). */
static nb_status workspace(int dev, size_t wsz, void **ws)
{
    *ws = NULL;
    if (wsz && !(*ws = nb__cuda_alloc(dev, wsz))) return nb_last_status();
    return NB_OK;
}

static nb_status forward(cudnnHandle_t h, int dev, const nb_kargs *a)
{
    const nb_tensor *x = a->in[0], *w = a->in[1], *b = a->in[2];
    nb_tensor *y = a->out;
    conv_plan *p = NULL;
    bool owned = false;
    void *ws = NULL;
    nb_status st = plan_get(h, 0, dev, x, w, y, a, &p, &owned);
    if (st != NB_OK || (st = workspace(dev, p->wsz, &ws)) != NB_OK) goto done;
    const descs *d = &p->d;
    const void *al = ALPHA(x->dtype), *be = BETA(x->dtype);
    DNN_TRY(cudnnConvolutionForward(h, al, d->x, nb__data(x), d->w, nb__data(w), d->conv,
                                    (cudnnConvolutionFwdAlgo_t)p->algo, ws, p->wsz, be, d->y, nb__data(y)),
            "conv2d");
    if (b) DNN_TRY(cudnnAddTensor(h, al, d->b, nb__data(b), al, d->y, nb__data(y)), "conv2d");
    if (a->flag) DNN_TRY(cudnnActivationForward(h, d->act, al, d->y, nb__data(y), be, d->y, nb__data(y)), "conv2d");
done:
    if (ws) nb__cuda_free(dev, ws, p->wsz);
    plan_release(p, owned);
    return st;
}

static nb_status backward_input(cudnnHandle_t h, int dev, const nb_kargs *a)
{
    const nb_tensor *g = a->in[0], *w = a->in[1];
    nb_tensor *gx = a->out;
    conv_plan *p = NULL;
    bool owned = false;
    void *ws = NULL;
    nb_status st = plan_get(h, 1, dev, gx, w, g, a, &p, &owned);
    if (st != NB_OK || (st = workspace(dev, p->wsz, &ws)) != NB_OK) goto done;
    const descs *d = &p->d;
    const void *al = ALPHA(gx->dtype), *be = BETA(gx->dtype);
    DNN_TRY(cudnnConvolutionBackwardData(h, al, d->w, nb__data(w), d->y, nb__data(g), d->conv,
                                         (cudnnConvolutionBwdDataAlgo_t)p->algo, ws, p->wsz, be, d->x, nb__data(gx)),
            "conv2d backward");
done:
    if (ws) nb__cuda_free(dev, ws, p->wsz);
    plan_release(p, owned);
    return st;
}

/* The bias gradient, gb[c] = the sum of g [N, C, OH, OW] over all but c: our channel sum
 * (chansum.cu), 3x cudnnConvolutionBackwardBias's speed on AlexNet-R's first layer. */
static nb_status bias_grad(int dev, const nb_tensor *g, nb_tensor *gb)
{
    int sms = nb_cuda_sm_count(dev);
    int64_t n = g->shape[0], c = g->shape[1], hw = g->shape[2] * g->shape[3];
    int parts = nb_cuda_chansum_parts(n, c, hw, sms > 0 ? sms : 1);
    size_t bytes = (size_t)(c * parts) * sizeof(double);
    double *part = nb__cuda_alloc(dev, bytes);
    if (!part) return nb_last_status();
    cudaError_t e = nb_cuda_launch_chansum(g->dtype == NB_FLOAT64, n, c, hw, nb__data(g), nb__data(gb), part, parts,
                                           nb__cuda_stream(dev)->handle);
    nb__cuda_free(dev, part, bytes);
    return e == cudaSuccess ? NB_OK : nb__cuda_err(e, "conv2d backward (bias)");
}

static nb_status backward_weight(cudnnHandle_t h, int dev, const nb_kargs *a)
{
    const nb_tensor *g = a->in[0], *x = a->in[1];
    nb_tensor *gw = a->out, *gb = a->out2;
    conv_plan *p = NULL;
    bool owned = false;
    void *ws = NULL;
    nb_status st = plan_get(h, 2, dev, x, gw, g, a, &p, &owned);
    if (st != NB_OK || (st = workspace(dev, p->wsz, &ws)) != NB_OK) goto done;
    const descs *d = &p->d;
    const void *al = ALPHA(x->dtype), *be = BETA(x->dtype);
    DNN_TRY(cudnnConvolutionBackwardFilter(h, al, d->x, nb__data(x), d->y, nb__data(g), d->conv,
                                           (cudnnConvolutionBwdFilterAlgo_t)p->algo, ws, p->wsz, be, d->w, nb__data(gw)),
            "conv2d backward");
    if (gb) st = bias_grad(dev, g, gb);
done:
    if (ws) nb__cuda_free(dev, ws, p->wsz);
    plan_release(p, owned);
    return st;
}

nb_status nb_cuda_k_conv(nb_op op, const nb_kargs *a)
{
    nb_dtype dt = a->out->dtype;
    if (dt != NB_FLOAT32 && dt != NB_FLOAT64)
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported on CUDA", nb__op_name(op), nb_dtype_name(dt));
    if (nb_tensor_numel(a->out) == 0) return NB_OK;
    int dev = a->out->storage->device.index;
    int prev = nb__cuda_enter(dev);
    cudnnHandle_t h = NULL;
    nb_status st = handle_of(dev, &h);
    if (st == NB_OK) {
        cudnnStatus_t s = cudnnSetStream(h, nb__cuda_stream(dev)->handle);
        if (s != CUDNN_STATUS_SUCCESS) st = dnn_err(s, nb__op_name(op));
    }
    if (st == NB_OK) {
        switch (op) {
        case NB_OP_CONV2D: st = forward(h, dev, a); break;
        case NB_OP_CONV2D_BACKWARD_INPUT: st = backward_input(h, dev, a); break;
        case NB_OP_CONV2D_BACKWARD_WEIGHT: st = backward_weight(h, dev, a); break;
        default: st = nb__err(NB_ERR_INTERNAL, "conv kernel: unexpected op %s", nb__op_name(op));
        }
    }
    nb__cuda_leave(prev);
    return st;
}
