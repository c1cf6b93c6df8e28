/* The weight gradient of convolutions with 1 to 4 input channels: a network's first layer on
 * RGB images (AlexNet-R's 3 -> 32 5x5, ResNet-50's 3 -> 64 7x7 stride 2, AlexNet-S's 3 -> 96
 * 11x11 stride 4), on channels-last float32 activations. oneDNN's channels-last kernel runs it
 * well below the machine's peak, since a pixel's 3 channels fill a fifth of a vector (the
 * measurements are at the bottom); its forward kernels reach the peak on these layers, and the
 * input gradient of a first layer is seldom wanted, so both stay on oneDNN.
 *
 * gw[o][c][kh][kw] = sum over images and output pixels of x[iy][ix][c] gy[oy][ox][o], iy = oy sh -
 * ph + kh, ix = ox sw - pw + kw. The vectors run along the output channels, and each input value
 * is broadcast against them: per kernel row kh, a block of T consecutive taps (kw, c) x VB vectors
 * of output channels is T * VB accumulators in registers; per output pixel, VB gradient vectors
 * and T broadcasts. A block's sums over one band of output rows are added to double totals per
 * thread, so the float sums stay short however large the batch.
 *
 * Work items are bands of output rows of one image, their output gradient about 16 KiB (half of
 * L1). An item first copies the input rows it reads into a zero-padded buffer (rows x cols x C),
 * so that a pixel's taps along one kernel row are KW * C consecutive floats and no load takes a
 * branch.
 *
 * The inner kernels are one text in GCC's generic vectors (src/cpu/stem_kern_impl.h), built for
 * AVX-512 (16 lanes, blocks of 4 x 6 or 2 x 12 vectors by taps) and AVX2 with FMA (8 lanes, 2 x 6
 * or 1 x 12); the CPU picks one at run time. Output channels a multiple of 16. */
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_impl.h"
#include "cpu/stem_impl.h"

static _Atomic unsigned long long g_runs;

unsigned long long nb__stem_runs(void)
{
    return g_runs;
}

#define MAX_C 4

#if defined(__x86_64__)

#define MAX_T 12 /* taps per block, at most */

typedef struct sgeom {
    const nb_conv_geom *g;
    int64_t vl;     /* floats per vector: 16 (AVX-512) or 8 (AVX2) */
    int64_t vb;     /* vectors of output channels per block: 4, 2 or 1 */
    int64_t tmax;   /* taps per block, at most */
    int64_t band;   /* output rows per work item */
    int64_t nbands; /* per image */
    int64_t rows;   /* padded input rows per item, (band - 1) * sh + kh */
    int64_t cols;   /* padded input columns, as many as the output row reads */
    int64_t ld;     /* floats per padded row, cols * c */
    int64_t kwc;    /* taps per kernel row, kw * c */
} sgeom;

/* The block of vb vectors by tmax taps keeps its tmax vb accumulators, vb gradient vectors and
 * one broadcast in the regs vector registers (AVX-512: 32, so 4 x 6 or 2 x 12; AVX2: 16, so
 * 2 x 6 or 1 x 12), at most vbmax vectors wide. */
static sgeom sgeom_of(const nb_conv_geom *g, int64_t vl, int64_t regs, int64_t vbmax)
{
    sgeom s = {.g = g, .vl = vl, .kwc = g->kw * g->c};
    int64_t v = g->oc / vl;
    s.vb = v % 4 == 0 && vbmax >= 4 ? 4 : v % 2 == 0 && vbmax >= 2 ? 2 : 1;
    s.tmax = (regs - 1 - s.vb) / s.vb;
    if (s.tmax > MAX_T) s.tmax = MAX_T;
    /* a band's output gradient in about 16 KiB, half of L1 */
    int64_t band = 4096 / (g->ow * g->oc);
    s.band = band < 1 ? 1 : band > g->oh ? g->oh : band;
    s.nbands = (g->oh + s.band - 1) / s.band;
    s.rows = (s.band - 1) * g->sh + g->kh;
    s.cols = (g->ow - 1) * g->sw + g->kw;
    s.ld = s.cols * g->c;
    return s;
}

/* Input rows oy0 * sh - ph + r, r < rows, of image b of x [n, h, w, c] into buf [rows][cols][c],
 * column j holding input column j - pw; zeros outside the image. */
static void pad_band(const sgeom *s, const float *x, int64_t b, int64_t oy0, float *buf)
{
    const nb_conv_geom *g = s->g;
    int64_t C = g->c, left = g->pw < s->cols ? g->pw : s->cols;
    int64_t copy = s->cols - left < g->w ? s->cols - left : g->w;
    for (int64_t r = 0; r < s->rows; r++) {
        float *dst = buf + r * s->ld;
        int64_t iy = oy0 * g->sh - g->ph + r;
        if (iy < 0 || iy >= g->h) {
            memset(dst, 0, (size_t)s->ld * sizeof(float));
            continue;
        }
        memset(dst, 0, (size_t)(left * C) * sizeof(float));
        memcpy(dst + left * C, x + (b * g->h + iy) * g->w * C, (size_t)(copy * C) * sizeof(float));
        memset(dst + (left + copy) * C, 0, (size_t)((s->cols - left - copy) * C) * sizeof(float));
    }
}

/* ---- weight gradient ---------------------------------------------------------------------- */

#define WG_ARGS                                                                                    \
    const float *in, int64_t lrow, const float *gy, int64_t grow, int64_t noy, int64_t ow, int64_t step, \
        int64_t oc, double *tot
#define WG_CASE(T_, VB_)                                                                           \
    case T_: SK(wg_body)(in, lrow, gy, grow, noy, ow, step, oc, tot, T_, VB_); return
#define WG_CASES_6(VB_)                                                                            \
    WG_CASE(1, VB_);                                                                               \
    WG_CASE(2, VB_);                                                                               \
    WG_CASE(3, VB_);                                                                               \
    WG_CASE(4, VB_);                                                                               \
    WG_CASE(5, VB_);                                                                               \
    WG_CASE(6, VB_)
#define WG_CASES_12(VB_)                                                                           \
    WG_CASES_6(VB_);                                                                               \
    WG_CASE(7, VB_);                                                                               \
    WG_CASE(8, VB_);                                                                               \
    WG_CASE(9, VB_);                                                                               \
    WG_CASE(10, VB_);                                                                              \
    WG_CASE(11, VB_);                                                                              \
    WG_CASE(12, VB_)

#define SK(name) name##_avx512
#define SK_TARGET "avx512f,fma"
#define VL 16
#include "cpu/stem_kern_impl.h"

#define SK(name) name##_avx2
#define SK_TARGET "avx2,fma"
#define VL 8
#include "cpu/stem_kern_impl.h"

nb_status nb__stem_backward_weights(const nb_conv_geom *g, const float *gy, const float *x, float *gw, float *gb)
{
    g_runs++;
    bool wide = nb_cpu_avx512();
    sgeom s = wide ? sgeom_of(g, 16, 32, 4) : sgeom_of(g, 8, 16, 2);
    int64_t items = g->n * s.nbands, nw = g->kh * s.kwc * g->oc;
    int nt = nb_cpu_threads_for(items * s.band * g->ow * g->oc * g->kh * s.kwc, NB_CPU_GRAIN);
    size_t acc = (size_t)(nw + g->oc), per = (size_t)(s.rows * s.ld + s.vl);
    size_t bytes = per * (size_t)nt * sizeof(float), dbytes = acc * (size_t)nt * sizeof(double);
    float *bufs = nb_cpu_alloc(bytes);
    double *tot = bufs ? nb_cpu_alloc(dbytes) : NULL;
    if (!tot) {
        if (bufs) nb_cpu_free(bufs, bytes);
        return nb__err(NB_ERR_OOM, "conv2d_backward_weight (few-channel direct): out of memory for %zu bytes of scratch",
                       bytes + dbytes);
    }
#pragma omp parallel num_threads(nt)
    {
        int me = nb_cpu_thread_num();
        float *buf = bufs + per * (size_t)me;
        double *my = tot + acc * (size_t)me;
        memset(my, 0, acc * sizeof(double));
#pragma omp for schedule(static)
        for (int64_t it = 0; it < items; it++) {
            int64_t bi = it / s.nbands, oy0 = it % s.nbands * s.band;
            int64_t oy1 = oy0 + s.band < g->oh ? oy0 + s.band : g->oh;
            pad_band(&s, x, bi, oy0, buf);
            if (wide)
                weights_band_avx512(&s, buf, gy, bi, oy0, oy1, my, gb != NULL);
            else
                weights_band_avx2(&s, buf, gy, bi, oy0, oy1, my, gb != NULL);
        }
    }
    for (int k = 1; k < nt; k++) {
        const double *src = tot + acc * (size_t)k;
        for (size_t e = 0; e < acc; e++) tot[e] += src[e];
    }
    int64_t C = g->c, KH = g->kh, KW = g->kw, OC = g->oc;
    for (int64_t o = 0; o < OC; o++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t kh = 0; kh < KH; kh++)
                for (int64_t kw = 0; kw < KW; kw++)
                    gw[((o * C + c) * KH + kh) * KW + kw] = (float)tot[((kh * KW + kw) * C + c) * OC + o];
    if (gb)
        for (int64_t o = 0; o < OC; o++) gb[o] = (float)tot[nw + o];
    nb_cpu_free(tot, dbytes);
    nb_cpu_free(bufs, bytes);
    return NB_OK;
}

#else /* not x86-64: never chosen */

nb_status nb__stem_backward_weights(const nb_conv_geom *g, const float *gy, const float *x, float *gw, float *gb)
{
    (void)g, (void)gy, (void)x, (void)gw, (void)gb;
    return nb__err(NB_ERR_UNSUPPORTED, "conv2d_backward_weight: the few-channel kernels need x86-64 with AVX2 and FMA");
}

#endif

/* oneDNN's NHWC weight gradient against this one, ms, one thread / two (`nabla_conv5 N C H OC K S
 * P`): AlexNet-R's conv1 (1024, 3 -> 32, 32x32, 5x5) 60.1 / 35.5 against 52.8 / 28.4; ResNet-50's
 * stem (16, 3 -> 64, 224x224, 7x7 stride 2) 56.9 / 29.6 against 40.1 / 21.8; AlexNet-S's conv1
 * (16, 3 -> 96, 224x224, 11x11 stride 4) 39.9 / 23.3 against 39.3 / 24.2; small layers (64, 3 ->
 * 16, 32x32, 3x3) 0.79 against 0.65. The same scheme for the forward tied or lost (1.00x, 0.89x,
 * 0.95x on the first three). */
bool nb__stem_fits(const nb_conv_geom *g)
{
    return g->cl && nb_cpu_avx2_fma() && g->c <= MAX_C && g->oc % 16 == 0 && g->groups == 1 && g->dh == 1 && g->dw == 1;
}

bool nb__stem_applies(const nb_conv_geom *g)
{
    return nb_cpu_avx512() && nb__stem_fits(g);
}
