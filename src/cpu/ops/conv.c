/* The conv kernel family: 2-D convolution forward and its input and weight gradients (dense
 * operands: activations NCHW, or all channels-last when the input is, weights OIHW; PyTorch's
 * stride/padding/dilation/groups; parameters packed as ops.def says). float32 runs on oneDNN
 * (src/cpu/dnnl.c) with the bias, and the ReLU when the forward's flag asks for it, fused into
 * the forward primitive, except 5x5 "same" convolutions on channels-last activations, which
 * nb_set_conv_algo may send to nabla's own Winograd F(2x2, 5x5) (src/cpu/ops/wino.c), the
 * weight gradient of 1x1 channels-last convolutions, a matrix product (pointwise_weights), as are
 * their forward with fewer input than output channels and no bias or ReLU (pointwise_product)
 * and their input gradient with more (pointwise_input),
 * strided channels-last ones (1x1 forwards on a gathered copy of the pixels they read, weight
 * gradients as im2col products: strided_windows), and the weight gradient of channels-last
 * convolutions with 1 to 4 input channels (src/cpu/ops/stem.c); float64,
 * and float32 when oneDNN is switched off, run the reference loops below (in either layout),
 * which the oneDNN path is tested against. */
#include <stdatomic.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "cpu/blas_impl.h"
#include "cpu/cpu_impl.h"
#include "cpu/dnnl_impl.h"
#include "cpu/stem_impl.h"
#include "cpu/tune_impl.h"
#include "cpu/wino_impl.h"

static nb_conv_geom geom(const nb_tensor *x, const nb_tensor *w, const nb_tensor *y, int64_t i0, int64_t i1)
{
    nb_conv_geom g = {
        .n = x->shape[0], .c = x->shape[1], .h = x->shape[2], .w = x->shape[3],
        .oc = w->shape[0], .kh = w->shape[2], .kw = w->shape[3], .oh = y->shape[2], .ow = y->shape[3],
        .sh = i0 & 0xffff, .sw = (i0 >> 16) & 0xffff, .ph = (i0 >> 32) & 0xffff, .pw = (i0 >> 48) & 0xffff,
        .dh = i1 & 0xffff, .dw = (i1 >> 16) & 0xffff, .groups = i1 >> 32, .cl = nb__is_channels_last(x),
    };
    return g;
}

/* The activations' layout must agree: the ops layer hands this family channels-last tensors
 * together or not at all. */
static nb_status check_layout(nb_op op, const nb_conv_geom *g, const nb_tensor *y)
{
    bool ok = g->cl ? nb_tensor_is_contiguous_format(y, NB_CHANNELS_LAST) : nb__is_contiguous(y);
    if (ok) return NB_OK;
    return nb__err(NB_ERR_INTERNAL, "%s: the input is %s but the output (or its gradient) is not", nb__op_name(op),
                   g->cl ? "channels-last" : "contiguous");
}

/* Element strides (channel, row, column) of a dense [c, h, w] plane set in either layout. */
typedef struct plane_strides {
    int64_t c, y, x;
} plane_strides;

static plane_strides strides_of(int64_t c, int64_t h, int64_t w, bool cl)
{
    (void)h;
    return cl ? (plane_strides){1, w * c, c} : (plane_strides){h * w, w, 1};
}

/* Visits every (output position, kernel tap) pair of image n, output channel o, with the input
 * position it reads: BODY sees oi (output offset from yoff), ii (input offset from xoff), ci
 * (input channel within the group) and wi (weight index of the tap). */
#define FOR_TAPS(g, BODY)                                                                          \
    for (int64_t oy = 0; oy < (g)->oh; oy++)                                                       \
        for (int64_t ox = 0; ox < (g)->ow; ox++)                                                   \
            for (int64_t ci = 0; ci < cg; ci++)                                                    \
                for (int64_t ky = 0; ky < (g)->kh; ky++) {                                         \
                    int64_t iy = oy * (g)->sh - (g)->ph + ky * (g)->dh;                            \
                    if (iy < 0 || iy >= (g)->h) continue;                                          \
                    for (int64_t kx = 0; kx < (g)->kw; kx++) {                                     \
                        int64_t ix = ox * (g)->sw - (g)->pw + kx * (g)->dw;                        \
                        if (ix < 0 || ix >= (g)->w) continue;                                      \
                        int64_t oi = oy * ys.y + ox * ys.x, ii = ci * xs.c + iy * xs.y + ix * xs.x; \
                        int64_t wi = (ci * (g)->kh + ky) * (g)->kw + kx;                           \
                        BODY;                                                                      \
                    }                                                                              \
                }

/* Every output position of plane (n, o): BODY sees oi (output offset from yoff). */
#define FOR_PLANE(g, BODY)                                                                         \
    for (int64_t oy = 0; oy < (g)->oh; oy++)                                                       \
        for (int64_t ox = 0; ox < (g)->ow; ox++) {                                                 \
            int64_t oi = oy * ys.y + ox * ys.x;                                                    \
            BODY;                                                                                  \
        }

/* Plane (n, o): its input block (the group's channels of image n) and its weight block. */
#define PLANE_SETUP(g)                                                                             \
    int64_t cg = (g)->c / (g)->groups, og = (g)->oc / (g)->groups, grp = o / og;                   \
    plane_strides xs = strides_of((g)->c, (g)->h, (g)->w, (g)->cl);                                \
    plane_strides ys = strides_of((g)->oc, (g)->oh, (g)->ow, (g)->cl);                             \
    int64_t xoff = n * (g)->c * (g)->h * (g)->w + grp * cg * xs.c, woff = o * cg * (g)->kh * (g)->kw; \
    int64_t yoff = n * (g)->oc * (g)->oh * (g)->ow + o * ys.c

#define REF_FORWARD(T)                                                                             \
    static void ref_forward_##T(const nb_conv_geom *g, const T *x, const T *w, const T *b, T *y)  \
    {                                                                                              \
        int64_t work = g->n * g->oc * g->oh * g->ow * (g->c / g->groups) * g->kh * g->kw;         \
        _Pragma("omp parallel for collapse(2) num_threads(nb_cpu_threads_for(work, NB_CPU_GRAIN))") \
        for (int64_t n = 0; n < g->n; n++)                                                         \
            for (int64_t o = 0; o < g->oc; o++) {                                                  \
                PLANE_SETUP(g);                                                                    \
                T *yp = y + yoff;                                                                  \
                FOR_PLANE(g, yp[oi] = b ? b[o] : 0)                                                \
                FOR_TAPS(g, yp[oi] += x[xoff + ii] * w[woff + wi])                                 \
            }                                                                                      \
    }

/* The input gradient: images are independent, so each thread owns whole images. */
#define REF_BACKWARD_DATA(T)                                                                       \
    static void ref_backward_data_##T(const nb_conv_geom *g, const T *gy, const T *w, T *gx)      \
    {                                                                                              \
        int64_t work = g->n * g->oc * g->oh * g->ow * (g->c / g->groups) * g->kh * g->kw;         \
        memset(gx, 0, (size_t)(g->n * g->c * g->h * g->w) * sizeof(T));                           \
        _Pragma("omp parallel for num_threads(nb_cpu_threads_for(work, NB_CPU_GRAIN))")             \
        for (int64_t n = 0; n < g->n; n++)                                                         \
            for (int64_t o = 0; o < g->oc; o++) {                                                  \
                PLANE_SETUP(g);                                                                    \
                FOR_TAPS(g, gx[xoff + ii] += gy[yoff + oi] * w[woff + wi])                         \
            }                                                                                      \
    }

/* The weight (and bias) gradient: each thread owns whole output channels. */
#define REF_BACKWARD_WEIGHTS(T)                                                                    \
    static void ref_backward_weights_##T(const nb_conv_geom *g, const T *gy, const T *x, T *gw, T *gb) \
    {                                                                                              \
        int64_t work = g->n * g->oc * g->oh * g->ow * (g->c / g->groups) * g->kh * g->kw;         \
        memset(gw, 0, (size_t)(g->oc * (g->c / g->groups) * g->kh * g->kw) * sizeof(T));         \
        _Pragma("omp parallel for num_threads(nb_cpu_threads_for(work, NB_CPU_GRAIN))")             \
        for (int64_t o = 0; o < g->oc; o++) {                                                      \
            T bsum = 0;                                                                            \
            for (int64_t n = 0; n < g->n; n++) {                                                   \
                PLANE_SETUP(g);                                                                    \
                FOR_PLANE(g, bsum += gy[yoff + oi])                                                \
                FOR_TAPS(g, gw[woff + wi] += gy[yoff + oi] * x[xoff + ii])                         \
            }                                                                                      \
            if (gb) gb[o] = bsum;                                                                  \
        }                                                                                          \
    }

REF_FORWARD(float)
REF_FORWARD(double)
REF_BACKWARD_DATA(float)
REF_BACKWARD_DATA(double)
REF_BACKWARD_WEIGHTS(float)
REF_BACKWARD_WEIGHTS(double)

static void *ptr(const nb_tensor *t) { return t ? nb__data(t) : NULL; }

/* max(0, y) in place, NaN kept (as torch.relu). */
#define RELU_INPLACE(T)                                                                            \
    static void relu_inplace_##T(T *y, int64_t n)                                                  \
    {                                                                                              \
        _Pragma("omp parallel for num_threads(nb_cpu_threads_for(n, NB_CPU_GRAIN))")                 \
        for (int64_t i = 0; i < n; i++) y[i] = y[i] < 0 ? 0 : y[i];                                \
    }

RELU_INPLACE(float)
RELU_INPLACE(double)

/* A 1x1 stride-1 unpadded ungrouped convolution on channels-last activations is a matrix product
 * over the P = n h w pixels, so its weight gradient is gw [oc, c] = gy^T x (gy [P, oc], x [P, c]).
 * oneDNN's sgemm does that faster than its convolution: ResNet-50's 1x1 layers at batch 16, one
 * thread, ms, convolution -> sgemm (`nabla_conv_layout N C H OC 1 nhwc 1` against the same TN
 * product): 64 -> 256 at 56x56 33.5 -> 18.1; 256 -> 64 20.2 -> 17.7; 256 -> 512 at 28x28 41.7 ->
 * 35.0; 512 -> 128 17.5 -> 16.5; 1024 -> 256 at 14x14 17.6 -> 17.0; 256 -> 1024 20.9 -> 17.4;
 * 2048 -> 512 at 7x7 17.2 -> 16.1 (2 threads: 16.5 -> 11.0, 20.6 -> 16.6, 10.1 -> 8.8, 10.4 ->
 * 9.8). The forward and the input gradient stay on the convolution, which was as fast or faster
 * on most of these layers. */
static bool pointwise_cl(const nb_conv_geom *g)
{
    return g->cl && g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0 &&
           g->groups == 1 && g->oh == g->h && g->ow == g->w;
}

/* The forward of such a convolution is y [P, oc] = x w^T (w [oc, c]). With fewer input than
 * output channels (ResNet-50's expanding 1x1 layers, stride 1, or strided on the gathered pixels
 * below), and no bias or fused ReLU to apply, oneDNN's sgemm runs it faster than its 1x1
 * convolution; the contracting ones are as fast or faster on the convolution. Batch 16, ms,
 * convolution -> sgemm, three alternating runs each (`nabla_layer_time conv THREADS 3`, docs/
 * BENCHMARKS.md, session 11), 1 thread: 64 -> 256 at 56x56 17.8-25.8 -> 16.9-19.0; 512 -> 2048 at
 * 7x7 17.4-19.4 -> 15.1-15.8; 1024 -> 2048 at 14x14, stride 2, 38.2-39.4 -> 31.1-32.3; 2 threads:
 * 64 -> 256 11.1-12.2 -> 8.7-11.6, 256 -> 1024 at 14x14 8.4-9.0 -> 7.9-8.5. */
static bool pointwise_gemm_forward(const nb_conv_geom *g, const nb_kargs *a)
{
    return g->c < g->oc && !a->in[2] && !a->flag;
}

/* y = x w^T over the n h w pixels of g (x channels-last, possibly the gathered pixels). */
static nb_status pointwise_product(const nb_conv_geom *g, const float *x, const nb_kargs *a)
{
    int64_t P = g->n * g->h * g->w;
    return nb__dnnl_check("conv2d", "dnnl_sgemm",
                          nb_cpu_sgemm('N', 'T', P, g->oc, g->c, 1.0f, x, g->c, ptr(a->in[1]), g->c, 0.0f,
                                     ptr(a->out), g->oc));
}

/* The input gradient gx [P, c] = gy w, the same product the other way: where it widens the
 * channels (fewer output than input channels: the contracting 1x1 layers), sgemm again beats the
 * convolution. Batch 16, ms, as above, 1 thread: 256 -> 64 at 56x56 19.6-22.9 -> 17.4-17.5; 512
 * -> 128 at 28x28 16.8-18.6 -> 15.5-15.9; 256 -> 128 at 56x56 34.9-37.5 -> 32.7-33.5; 2 threads:
 * 512 -> 128 8.7-11.6 -> 7.9-9.3, 512 -> 256 16.5-17.6 -> 15.2-16.0. */
static nb_status pointwise_input(const nb_conv_geom *g, const nb_kargs *a)
{
    int64_t P = g->n * g->h * g->w;
    return nb__dnnl_check("conv2d_backward_input", "dnnl_sgemm",
                          nb_cpu_sgemm('N', 'N', P, g->c, g->oc, 1.0f, ptr(a->in[0]), g->oc, ptr(a->in[1]), g->c, 0.0f,
                                     ptr(a->out), g->c));
}

/* gb (a->out2, may be NULL) as the reduce family's sum of gy over all but its channel dim. */
static nb_status bias_grad(const nb_kargs *a, int64_t oc)
{
    if (!a->out2) return NB_OK;
    nb_tensor *gb = nb__tensor_alias(a->out2, (int64_t[]){1, oc, 1, 1}, (int64_t[]){oc, 1, 1, 1}, 4,
                                     a->out2->offset);
    if (!gb) return nb_last_status();
    nb_kargs k = {.out = gb, .in = {a->in[0]}, .dim_mask = 1u | 4u | 8u};
    nb_status st = nb_cpu_k_reduce(NB_OP_SUM, &k);
    nb__release(gb);
    return st;
}

/* gw by the product, and gb. */
static nb_status pointwise_weights(const nb_conv_geom *g, const nb_kargs *a)
{
    int64_t P = g->n * g->h * g->w, oc = g->oc;
    const float *gy = ptr(a->in[0]), *x = ptr(a->in[1]);
    NB_TRY(nb__dnnl_check("conv2d_backward_weight", "dnnl_sgemm",
                          nb_cpu_sgemm('T', 'N', oc, g->c, P, 1.0f, gy, oc, x, g->c, 0.0f, ptr(a->out), g->c)));
    return bias_grad(a, oc);
}

/* Strided channels-last convolutions. A 1x1 unpadded one reads pixels (oy sh, ox sw) of x
 * only: copied into a dense [n, oh, ow, c] buffer they make it a stride-1 convolution, which
 * oneDNN runs faster than its strided one (strided_pointwise_forward; the copy is a quarter of x
 * at stride 2). The weight gradient of those, and of the ungrouped ones with more than one tap
 * and at least 32 input channels, is one matrix product: gw [oc, (ky, kx, c)] = gy^T col, col
 * [pixels, (ky, kx, c)] holding each output pixel's window of x (zeros in the padding), built for
 * a few images at a time (about COL_FLOATS floats; buffers from the caching allocator, so a
 * training loop does not fault their pages in every step) and summed into by the next product, then
 * gw's taps and channels swapped into OIHW (im2col_weights). The input gradient stays on oneDNN.
 *
 * oneDNN's weight-gradient kernel for these runs at about half its forward's rate. Batch 16, one
 * thread, ms, before -> after, three alternating runs each (docs/BENCHMARKS.md, session 10):
 * ResNet-50's strided 1x1 layers, the middle run: forward 256 -> 512 at 56x56 33.1 -> 34.3, 512 ->
 * 1024 at 28x28 42.3 -> 34.5, 1024 -> 2048 at 14x14 38.5 -> 37.9; weight gradient 37.2 -> 33.5,
 * 36.7 -> 37.1, 43.1 -> 32.9. Its 3x3 stride-2 layers' weight gradients, the range: 128 channels
 * at 56x56 52-59 -> 41-45, 256 at 28x28 52-67 -> 39-43, 512 at 14x14 77-93 -> 40-43; ResNet-56's
 * 32 -> 64 at 16x16 (batch 128) 5.1-7.2 -> 4.2. With 16 channels (ResNet-56's 16 -> 32) the
 * windows' copies cost more than the product gains (4.1-6.6 -> 8.8-10.6), so oneDNN keeps those. */
#define COL_FLOATS ((int64_t)1 << 22)

static bool strided_pointwise(const nb_conv_geom *g)
{
    return g->cl && g->kh == 1 && g->kw == 1 && (g->sh > 1 || g->sw > 1) && g->ph == 0 && g->pw == 0 &&
           g->groups == 1;
}

static bool strided_windows(const nb_conv_geom *g)
{
    return strided_pointwise(g) ||
           (g->cl && g->groups == 1 && (g->sh > 1 || g->sw > 1) && g->kh * g->kw > 1 && g->c >= 32);
}

/* The windows of images [n0, n0 + nn) into col, one row of kh kw c values per output pixel. */
static void fill_windows(const nb_conv_geom *g, const float *x, int64_t n0, int64_t nn, float *col)
{
    int64_t c = g->c, kc = g->kh * g->kw * c;
    _Pragma("omp parallel for num_threads(nb_cpu_threads_for(nn * g->oh * g->ow * kc, NB_CPU_GRAIN))")
    for (int64_t r = 0; r < nn * g->oh; r++) {
        int64_t img = n0 + r / g->oh, oy = r % g->oh;
        for (int64_t ox = 0; ox < g->ow; ox++) {
            float *dst = col + (r * g->ow + ox) * kc;
            for (int64_t ky = 0; ky < g->kh; ky++) {
                int64_t iy = oy * g->sh - g->ph + ky * g->dh;
                for (int64_t kx = 0; kx < g->kw; kx++, dst += c) {
                    int64_t ix = ox * g->sw - g->pw + kx * g->dw;
                    if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w) memset(dst, 0, (size_t)c * sizeof(float));
                    else memcpy(dst, x + ((img * g->h + iy) * g->w + ix) * c, (size_t)c * sizeof(float));
                }
            }
        }
    }
}

static nb_status strided_pointwise_forward(const nb_conv_geom *g, const nb_kargs *a)
{
    size_t bytes = (size_t)(g->n * g->oh * g->ow * g->c) * sizeof(float);
    float *xs = nb_cpu_alloc(bytes);
    if (!xs) return nb__err(NB_ERR_OOM, "conv2d: out of memory (%zu bytes for the strided pixels)", bytes);
    fill_windows(g, ptr(a->in[0]), 0, g->n, xs);
    nb_conv_geom sub = *g;
    sub.h = g->oh, sub.w = g->ow, sub.sh = sub.sw = 1;
    nb_status st = pointwise_gemm_forward(&sub, a)
                       ? pointwise_product(&sub, xs, a)
                       : nb__dnnl_conv_forward(&sub, xs, ptr(a->in[1]), ptr(a->in[2]), a->flag, ptr(a->out));
    nb_cpu_free(xs, bytes);
    return st;
}

/* The products over the windows of x, built for a few images at a time (about COL_FLOATS floats
 * of col; a buffer from the caching allocator, so a training loop does not fault its pages in
 * every step). weights: gt [oc, kc] = gy^T col summed over the pieces, m = gy; otherwise the
 * forward, out [P, oc] = col m^T piece by piece, m = the weights [oc, kc]. */
static nb_status windows_products(const char *op, const nb_conv_geom *g, const float *x, const float *m, float *out,
                                  bool weights)
{
    int64_t oc = g->oc, kc = g->kh * g->kw * g->c, pix = g->oh * g->ow;
    int64_t per = COL_FLOATS / (pix * kc);
    per = per < 1 ? 1 : per > g->n ? g->n : per;
    size_t col_bytes = (size_t)(per * pix * kc) * sizeof(float);
    float *col = nb_cpu_alloc(col_bytes);
    if (!col) return nb__err(NB_ERR_OOM, "%s: out of memory (%zu bytes of windows)", op, col_bytes);
    nb_status st = NB_OK;
    for (int64_t n0 = 0; n0 < g->n && st == NB_OK; n0 += per) {
        int64_t nn = g->n - n0 < per ? g->n - n0 : per, rows = nn * pix;
        fill_windows(g, x, n0, nn, col);
        int r = weights ? nb_cpu_sgemm('T', 'N', oc, kc, rows, 1.0f, m + n0 * pix * oc, oc, col, kc, n0 ? 1.0f : 0.0f,
                                       out, kc)
                        : nb_cpu_sgemm('N', 'T', rows, oc, kc, 1.0f, col, kc, m, kc, 0.0f, out + n0 * pix * oc, oc);
        st = nb__dnnl_check(op, "dnnl_sgemm", r);
    }
    nb_cpu_free(col, col_bytes);
    return st;
}

static nb_status im2col_weights(const nb_conv_geom *g, const nb_kargs *a)
{
    const char *op = "conv2d_backward_weight";
    int64_t c = g->c, oc = g->oc, taps = g->kh * g->kw, kc = taps * c;
    size_t gt_bytes = (size_t)(oc * kc) * sizeof(float);
    float *gt = nb_cpu_alloc(gt_bytes);
    if (!gt) return nb__err(NB_ERR_OOM, "%s: out of memory (%zu bytes of gradient)", op, gt_bytes);
    nb_status st = windows_products(op, g, ptr(a->in[1]), ptr(a->in[0]), gt, true);
    float *gw = ptr(a->out);
    if (st == NB_OK) {
        _Pragma("omp parallel for num_threads(nb_cpu_threads_for(oc * kc, NB_CPU_GRAIN))")
        for (int64_t o = 0; o < oc; o++)
            for (int64_t t = 0; t < taps; t++)
                for (int64_t ci = 0; ci < c; ci++) gw[(o * c + ci) * taps + t] = gt[(o * taps + t) * c + ci];
    }
    nb_cpu_free(gt, gt_bytes);
    return st == NB_OK ? bias_grad(a, oc) : st;
}

/* ---- the forward and the input gradient as products over windows ---------------------------- */

/* The product over windows of x for the geometry t, y = col wt^T, then the bias and the ReLU,
 * with the weights w [t.oc, t.c, kh, kw] reordered to wt [t.oc, (ky, kx, t.c)] first; flip: w is [t.c, t.oc, kh, kw] instead, read with
 * its two channel axes swapped and its taps reversed (ky, kx -> kh - 1 - ky, kw - 1 - kx). */
static nb_status reordered_product(const char *op, const nb_conv_geom *t, const float *x, const float *w, bool flip,
                                   const float *bias, bool relu, float *y)
{
    int64_t rows = t->oc, cols = t->c, taps = t->kh * t->kw;
    size_t bytes = (size_t)(rows * taps * cols) * sizeof(float);
    float *wt = nb_cpu_alloc(bytes);
    if (!wt) return nb__err(NB_ERR_OOM, "%s: out of memory (%zu bytes of weights)", op, bytes);
    _Pragma("omp parallel for num_threads(nb_cpu_threads_for(rows * taps * cols, NB_CPU_GRAIN))")
    for (int64_t r = 0; r < rows; r++)
        for (int64_t tap = 0; tap < taps; tap++)
            for (int64_t j = 0; j < cols; j++)
                wt[(r * taps + tap) * cols + j] =
                    flip ? w[(j * rows + r) * taps + (taps - 1 - tap)] : w[(r * cols + j) * taps + tap];
    nb_status st = windows_products(op, t, x, wt, y, false);
    nb_cpu_free(wt, bytes);
    if (st != NB_OK || (!bias && !relu)) return st;
    int64_t pixels = t->n * t->oh * t->ow;
    _Pragma("omp parallel for num_threads(nb_cpu_threads_for(pixels * rows, NB_CPU_GRAIN))")
    for (int64_t p = 0; p < pixels; p++) {
        float *yp = y + p * rows;
        if (bias)
            for (int64_t o = 0; o < rows; o++) yp[o] += bias[o];
        if (relu)
            for (int64_t o = 0; o < rows; o++) yp[o] = yp[o] < 0 ? 0 : yp[o];
    }
    return NB_OK;
}

/* The forward: y = (windows of x) wt^T. */
static nb_status im2col_forward(const nb_conv_geom *g, const nb_kargs *a)
{
    return reordered_product("conv2d", g, ptr(a->in[0]), ptr(a->in[1]), false, ptr(a->in[2]), a->flag, ptr(a->out));
}

/* The input gradient of a stride-1 convolution is the forward convolution of gy with the kernel
 * turned half a circle and its two channel axes swapped, padded by (k - 1) d - p on each side:
 * gx = (windows of gy) wt^T, wt [c, (ky, kx, o)] = w [o, c, kh - 1 - ky, kw - 1 - kx]. */
static nb_status im2col_input(const nb_conv_geom *g, const nb_kargs *a)
{
    nb_conv_geom t = {
        .n = g->n, .c = g->oc, .h = g->oh, .w = g->ow, .oc = g->c, .kh = g->kh, .kw = g->kw, .oh = g->h, .ow = g->w,
        .sh = 1, .sw = 1, .ph = (g->kh - 1) * g->dh - g->ph, .pw = (g->kw - 1) * g->dw - g->pw, .dh = g->dh,
        .dw = g->dw, .groups = 1, .cl = 1,
    };
    return reordered_product("conv2d_backward_input", &t, ptr(a->in[0]), ptr(a->in[1]), true, NULL, false,
                             ptr(a->out));
}

/* ---- the rules: which kernel runs each float32 problem ------------------------------------- */

/* flag: the fused ReLU. */
static nb_status forward_rules(const nb_conv_geom *g, const nb_kargs *a)
{
    if (nb__wino_applies(g, nb_get_conv_algo()))
        return nb__wino_forward(g, ptr(a->in[0]), ptr(a->in[1]), ptr(a->in[2]), a->flag, ptr(a->out));
    if (strided_pointwise(g)) return strided_pointwise_forward(g, a);
    if (pointwise_cl(g) && pointwise_gemm_forward(g, a)) return pointwise_product(g, ptr(a->in[0]), a);
    return nb__dnnl_conv_forward(g, ptr(a->in[0]), ptr(a->in[1]), ptr(a->in[2]), a->flag, ptr(a->out));
}

static nb_status backward_data_rules(const nb_conv_geom *g, const nb_kargs *a)
{
    if (nb__wino_applies(g, nb_get_conv_algo()))
        return nb__wino_backward_data(g, ptr(a->in[0]), ptr(a->in[1]), ptr(a->out));
    if (pointwise_cl(g) && g->oc < g->c) return pointwise_input(g, a);
    return nb__dnnl_conv_backward_data(g, ptr(a->in[0]), ptr(a->in[1]), ptr(a->out));
}

/* flag: gy is the one the input gradient just read (oneDNN may reuse its reorder). */
static nb_status backward_weights_rules(const nb_conv_geom *g, const nb_kargs *a)
{
    if (nb__wino_applies(g, nb_get_conv_algo()))
        return nb__wino_backward_weights(g, ptr(a->in[0]), ptr(a->in[1]), ptr(a->out), ptr(a->out2));
    if (pointwise_cl(g)) return pointwise_weights(g, a);
    if (nb__stem_applies(g))
        return nb__stem_backward_weights(g, ptr(a->in[0]), ptr(a->in[1]), ptr(a->out), ptr(a->out2));
    if (strided_windows(g)) return im2col_weights(g, a);
    return nb__dnnl_conv_backward_weights(g, ptr(a->in[0]), ptr(a->in[1]), ptr(a->out), ptr(a->out2), a->flag);
}

/* ---- the route by timing, on CPUs without AVX-512 ------------------------------------------ */

/* The rules were measured with AVX-512 kernels. On an AVX2 CPU (Zen 3), oneDNN 2.6's
 * convolutions are slower than the product over the windows for many layers and faster for
 * others, in no simple pattern. Batch 16, one thread, ms, oneDNN against the windows, the range
 * of two alternating runs (`nabla_layer_time conv 1 3` and `nabla_layer_time alexnet 1 4`,
 * docs/BENCHMARKS.md, session 13): weight gradients of 3x3 stride-1 layers, 64 channels at 56x56
 * 91-118 against 59-68, 512 at 7x7 89-106 against 52-56, 384 -> 384 at 13x13 142-207 against
 * 96-107; forwards of 3x3 stride-2 layers, 128 at 56x56 102-114 against 68-74, 512 at 14x14
 * 67-101 against 56-58; but the 7x7 stem's forward 45-49 against 108-175, and most input
 * gradients 10-30% faster on oneDNN. So there each problem with a route that the rules do not
 * take, the windows or nabla's own kernel below (op, geometry, bias, ReLU, thread count, policy;
 * at least ROUTE_MIN_FLOPS), is timed on each of its ways by the schedule below (the windows'
 * products settle their own library choice in gemm.c during the untimed calls), and the way
 * with the shortest best time runs every later call in the process. NABLA_CONV_TUNE=0 turns this
 * off, =1 on for every CPU; by default it is on where nb_cpu_avx512() is false. Tests force a
 * way with nb__conv_set_route. */
#define ROUTE_MIN_FLOPS (1 << 25)

/* The ways: 1 the rules, 2 the windows, 3 nabla's own kernel: Winograd (src/cpu/ops/wino.c; 3x3
 * and 5x5 stride-1 "same" layers with channels multiples of 16, not under the direct policy), or
 * for the weight gradient of layers with 1 to 4 input channels the few-channel kernel
 * (src/cpu/ops/stem.c, which the rules take on AVX-512 CPUs only). With all
 * three, the schedule is the rules, then the windows and Winograd untimed, then rules, windows,
 * Winograd, Winograd, windows, rules timed; with two, the steps of the third are skipped. */
static nb_tuner g_route_tuner = NB_TUNER_INIT("NABLA_CONV_TUNE", false, 9, 0, -2, -3, 1, 2, 3, 3, 2, 1);
static atomic_int g_route;           /* an nb_conv_route */
static atomic_ullong g_windows_runs; /* executions of the windows routes */

void nb__conv_set_route(nb_conv_route r) { atomic_store(&g_route, (int)r); }
unsigned long long nb__conv_windows_runs(void) { return atomic_load(&g_windows_runs); }
bool nb__conv_tune_enabled(void) { return nb_cpu_tune_enabled(&g_route_tuner); }
int nb__conv_tuned_problems(void) { return nb_cpu_tune_settled(&g_route_tuner); }

unsigned long long nb__conv_tuning_steps(void) { return nb_cpu_tune_steps(&g_route_tuner); }

/* Whether op of g has a windows route that the rules do not take already: channels-last,
 * ungrouped, more than one tap; the input gradient at stride 1 only. */
static bool windows_route(nb_op op, const nb_conv_geom *g)
{
    if (!g->cl || g->groups != 1 || g->kh * g->kw == 1) return false;
    if (op == NB_OP_CONV2D_BACKWARD_INPUT) return g->sh == 1 && g->sw == 1;
    if (op == NB_OP_CONV2D_BACKWARD_WEIGHT) return !strided_windows(g) && !nb__stem_applies(g);
    return true;
}

/* Whether op of g runs on nabla's own kernel (way 3): the few-channel weight gradient
 * (src/cpu/ops/stem.c, any policy), else Winograd (src/cpu/ops/wino.c, not under direct). */
static bool own_is_stem(nb_op op, const nb_conv_geom *g)
{
    return op == NB_OP_CONV2D_BACKWARD_WEIGHT && nb__stem_fits(g);
}

/* Whether op of g has a route on nabla's own kernel that the rules do not take already. */
static bool own_route(nb_op op, const nb_conv_geom *g, nb_conv_algo algo)
{
    if (own_is_stem(op, g)) return !nb__stem_applies(g);
    return algo != NB_CONV_ALGO_DIRECT && nb__wino_fits(g) && !nb__wino_applies(g, algo);
}

/* A float32 problem on the route nb__conv_set_route forces, or the tuner's, or the rules'. */
static nb_status run_routed(nb_op op, const nb_conv_geom *g, const nb_kargs *a)
{
    nb_conv_algo algo = nb_get_conv_algo();
    int64_t key[NB_TUNE_KEY] = {op,    g->n,  g->c,  g->h,  g->w,
                                g->oc, g->kh, g->kw, a->i0, a->i1,
                                a->in[2] != NULL || a->out2 != NULL,  a->flag, nb_get_num_threads(), algo};
    int timed = -1, way = 0;
    nb_conv_route forced = (nb_conv_route)atomic_load(&g_route);
    double flops = 2.0 * (double)(g->n * g->oh * g->ow * g->oc * g->c * g->kh * g->kw);
    unsigned ways = 1u | (windows_route(op, g) ? 2u : 0u) | (own_route(op, g, algo) ? 4u : 0u);
    if (forced == NB_CONV_ROUTE_WINDOWS || forced == NB_CONV_ROUTE_OWN) {
        int w = forced == NB_CONV_ROUTE_WINDOWS ? 2 : 3;
        way = ways >> (w - 1) & 1u ? w : 0;
    } else if (forced == NB_CONV_ROUTE_AUTO && ways != 1u && flops >= ROUTE_MIN_FLOPS) {
        way = nb_cpu_tune_pick(&g_route_tuner, key, ways, &timed);
    }
    double t0 = timed >= 0 ? nb_cpu_seconds() : 0;
    nb_status st;
    if (way == 2) {
        atomic_fetch_add(&g_windows_runs, 1);
        st = op == NB_OP_CONV2D                  ? im2col_forward(g, a)
             : op == NB_OP_CONV2D_BACKWARD_INPUT ? im2col_input(g, a)
                                                 : im2col_weights(g, a);
    } else if (way == 3 && own_is_stem(op, g)) {
        st = nb__stem_backward_weights(g, ptr(a->in[0]), ptr(a->in[1]), ptr(a->out), ptr(a->out2));
    } else if (way == 3) {
        st = op == NB_OP_CONV2D ? nb__wino_forward(g, ptr(a->in[0]), ptr(a->in[1]), ptr(a->in[2]), a->flag,
                                                   ptr(a->out))
             : op == NB_OP_CONV2D_BACKWARD_INPUT
                 ? nb__wino_backward_data(g, ptr(a->in[0]), ptr(a->in[1]), ptr(a->out))
                 : nb__wino_backward_weights(g, ptr(a->in[0]), ptr(a->in[1]), ptr(a->out), ptr(a->out2));
    } else {
        st = op == NB_OP_CONV2D                  ? forward_rules(g, a)
             : op == NB_OP_CONV2D_BACKWARD_INPUT ? backward_data_rules(g, a)
                                                 : backward_weights_rules(g, a);
    }
    if (timed >= 0 && st == NB_OK) nb_cpu_tune_record(&g_route_tuner, key, timed, nb_cpu_seconds() - t0);
    return st;
}

/* ---- the kernels ------------------------------------------------------------------------------ */

/* flag: the fused ReLU (a oneDNN post-op, or a pass after the reference loops). */
static nb_status forward(const nb_kargs *a)
{
    nb_conv_geom g = geom(a->in[0], a->in[1], a->out, a->i0, a->i1);
    NB_TRY(check_layout(NB_OP_CONV2D, &g, a->out));
    int64_t n = g.n * g.oc * g.oh * g.ow;
    if (a->out->dtype == NB_FLOAT64) {
        ref_forward_double(&g, ptr(a->in[0]), ptr(a->in[1]), ptr(a->in[2]), ptr(a->out));
        if (a->flag) relu_inplace_double(ptr(a->out), n);
        return NB_OK;
    }
    if (nb__dnnl_enabled()) return run_routed(NB_OP_CONV2D, &g, a);
    ref_forward_float(&g, ptr(a->in[0]), ptr(a->in[1]), ptr(a->in[2]), ptr(a->out));
    if (a->flag) relu_inplace_float(ptr(a->out), n);
    return NB_OK;
}

static nb_status backward_data(const nb_kargs *a)
{
    nb_conv_geom g = geom(a->out, a->in[1], a->in[0], a->i0, a->i1);
    NB_TRY(check_layout(NB_OP_CONV2D_BACKWARD_INPUT, &g, a->in[0]));
    if (a->out->dtype == NB_FLOAT64) {
        ref_backward_data_double(&g, ptr(a->in[0]), ptr(a->in[1]), ptr(a->out));
        return NB_OK;
    }
    if (nb__dnnl_enabled()) return run_routed(NB_OP_CONV2D_BACKWARD_INPUT, &g, a);
    ref_backward_data_float(&g, ptr(a->in[0]), ptr(a->in[1]), ptr(a->out));
    return NB_OK;
}

static nb_status backward_weights(const nb_kargs *a)
{
    nb_conv_geom g = geom(a->in[1], a->out, a->in[0], a->i0, a->i1);
    NB_TRY(check_layout(NB_OP_CONV2D_BACKWARD_WEIGHT, &g, a->in[0]));
    if (a->out->dtype == NB_FLOAT64) {
        ref_backward_weights_double(&g, ptr(a->in[0]), ptr(a->in[1]), ptr(a->out), ptr(a->out2));
        return NB_OK;
    }
    if (nb__dnnl_enabled()) return run_routed(NB_OP_CONV2D_BACKWARD_WEIGHT, &g, a);
    ref_backward_weights_float(&g, ptr(a->in[0]), ptr(a->in[1]), ptr(a->out), ptr(a->out2));
    return NB_OK;
}

nb_status nb_cpu_k_conv(nb_op op, const nb_kargs *a)
{
    if (a->out->dtype != NB_FLOAT32 && a->out->dtype != NB_FLOAT64)
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported (float32/float64 only)", nb__op_name(op),
                       nb_dtype_name(a->out->dtype));
    switch (op) {
    case NB_OP_CONV2D: return forward(a);
    case NB_OP_CONV2D_BACKWARD_INPUT: return backward_data(a);
    case NB_OP_CONV2D_BACKWARD_WEIGHT: return backward_weights(a);
    default: return nb__err(NB_ERR_INTERNAL, "conv: op %s is not in this family", nb__op_name(op));
    }
}
