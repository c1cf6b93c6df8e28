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
 * Requires AVX-512F (checked at run time) and output channels a multiple of 16. */
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
#include <immintrin.h>

#define VL 16     /* floats per vector */
#define MAX_T 12  /* taps per block, at most */
#define TGT __attribute__((target("avx512f")))

typedef struct sgeom {
    const nb_conv_geom *g;
    int64_t vb;     /* vectors of output channels per block: 4, 2 or 1 */
    int64_t tmax;   /* taps per block, at most */
    int64_t band;   /* output rows per work item */
    int64_t nbands; /* per image */
    int64_t rows;   /* padded input rows per item, (band - 1) * sh + kh */
    int64_t cols;   /* padded input columns, as many as the output row reads */
    int64_t ld;     /* floats per padded row, cols * c */
    int64_t kwc;    /* taps per kernel row, kw * c */
} sgeom;

static sgeom sgeom_of(const nb_conv_geom *g)
{
    sgeom s = {.g = g, .kwc = g->kw * g->c};
    int64_t v = g->oc / VL;
    s.vb = v % 4 == 0 ? 4 : v % 2 == 0 ? 2 : 1;
    s.tmax = s.vb == 4 ? 6 : MAX_T;
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

/* tot[t * oc + v] += sum over noy rows and ow pixels of in[oy * lrow + ox * step + t] *
 * gy[oy * grow + ox * oc + v], for T taps and VB vectors of channels. */
static inline __attribute__((always_inline)) TGT void wg_body(const float *in, int64_t lrow, const float *gy,
                                                               int64_t grow, int64_t noy, int64_t ow,
                                                               int64_t step, int64_t oc, double *tot, const int T,
                                                               const int VB)
{
    __m512 acc[MAX_T][4];
    for (int t = 0; t < T; t++)
        for (int v = 0; v < VB; v++) acc[t][v] = _mm512_setzero_ps();
    for (int64_t oy = 0; oy < noy; oy++) {
        const float *r = in + oy * lrow, *gr = gy + oy * grow;
        for (int64_t ox = 0; ox < ow; ox++) {
            __m512 gv[4];
            for (int v = 0; v < VB; v++) gv[v] = _mm512_loadu_ps(gr + ox * oc + v * VL);
            const float *xr = r + ox * step;
            for (int t = 0; t < T; t++) {
                __m512 xb = _mm512_set1_ps(xr[t]);
                for (int v = 0; v < VB; v++) acc[t][v] = _mm512_fmadd_ps(xb, gv[v], acc[t][v]);
            }
        }
    }
    for (int t = 0; t < T; t++)
        for (int v = 0; v < VB; v++) {
            double *d = tot + t * oc + v * VL;
            __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(acc[t][v]));
            __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[t][v]), 1)));
            _mm512_storeu_pd(d, _mm512_add_pd(_mm512_loadu_pd(d), lo));
            _mm512_storeu_pd(d + 8, _mm512_add_pd(_mm512_loadu_pd(d + 8), hi));
        }
}

#define WG_ARGS                                                                                    \
    const float *in, int64_t lrow, const float *gy, int64_t grow, int64_t noy, int64_t ow, int64_t step, \
        int64_t oc, double *tot
#define WG_CASE(T_, VB_)                                                                           \
    case T_: wg_body(in, lrow, gy, grow, noy, ow, step, oc, tot, T_, VB_); return
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

static TGT void wg_v4(int T, WG_ARGS)
{
    switch (T) { WG_CASES_6(4); }
}
static TGT void wg_v2(int T, WG_ARGS)
{
    switch (T) { WG_CASES_12(2); }
}
static TGT void wg_v1(int T, WG_ARGS)
{
    switch (T) { WG_CASES_12(1); }
}

/* Adds the band [oy0, oy1) of image b to the thread's totals tot [kh][kw][c][oc] (+ [oc], the
 * bias gradient, when bias). */
static TGT void weights_band(const sgeom *s, const float *buf, const float *gy, int64_t b, int64_t oy0,
                             int64_t oy1, double *tot, bool bias)
{
    const nb_conv_geom *g = s->g;
    int64_t oc = g->oc, vw = s->vb * VL, step = g->sw * g->c, grow = g->ow * oc;
    int64_t nblk = (s->kwc + s->tmax - 1) / s->tmax;
    for (int64_t kh = 0; kh < g->kh; kh++) {
        /* the band's rows whose input row oy * sh - ph + kh is inside the image */
        int64_t lo = oy0, hi = oy1;
        while (lo < hi && lo * g->sh - g->ph + kh < 0) lo++;
        while (hi > lo && (hi - 1) * g->sh - g->ph + kh >= g->h) hi--;
        if (lo == hi) continue;
        const float *in = buf + ((lo - oy0) * g->sh + kh) * s->ld;
        const float *gr = gy + (b * g->oh + lo) * grow;
        for (int64_t blk = 0, t0 = 0; blk < nblk; blk++) {
            int T = (int)(s->kwc / nblk + (blk < s->kwc % nblk));
            for (int64_t o = 0; o < oc; o += vw) {
                double *d = tot + (kh * s->kwc + t0) * oc + o;
                if (s->vb == 4)
                    wg_v4(T, in + t0, g->sh * s->ld, gr + o, grow, hi - lo, g->ow, step, oc, d);
                else if (s->vb == 2)
                    wg_v2(T, in + t0, g->sh * s->ld, gr + o, grow, hi - lo, g->ow, step, oc, d);
                else
                    wg_v1(T, in + t0, g->sh * s->ld, gr + o, grow, hi - lo, g->ow, step, oc, d);
            }
            t0 += T;
        }
    }
    if (!bias) return;
    double *tb = tot + g->kh * s->kwc * oc;
    for (int64_t o = 0; o < oc; o += VL) {
        __m512 sum = _mm512_setzero_ps();
        for (int64_t p = 0; p < (oy1 - oy0) * g->ow; p++)
            sum = _mm512_add_ps(sum, _mm512_loadu_ps(gy + (b * g->oh + oy0) * grow + p * oc + o));
        __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(sum));
        __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sum), 1)));
        _mm512_storeu_pd(tb + o, _mm512_add_pd(_mm512_loadu_pd(tb + o), lo));
        _mm512_storeu_pd(tb + o + 8, _mm512_add_pd(_mm512_loadu_pd(tb + o + 8), hi));
    }
}

nb_status nb__stem_backward_weights(const nb_conv_geom *g, const float *gy, const float *x, float *gw, float *gb)
{
    g_runs++;
    sgeom s = sgeom_of(g);
    int64_t items = g->n * s.nbands, nw = g->kh * s.kwc * g->oc;
    int nt = nb_cpu_threads_for(items * s.band * g->ow * g->oc * g->kh * s.kwc, NB_CPU_GRAIN);
    size_t acc = (size_t)(nw + g->oc), per = (size_t)(s.rows * s.ld + VL);
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
            weights_band(&s, buf, gy, bi, oy0, oy1, my, gb != NULL);
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
    return nb__err(NB_ERR_UNSUPPORTED, "conv2d_backward_weight: the few-channel kernels need x86-64 with AVX-512");
}

#endif

/* oneDNN's NHWC weight gradient against this one, ms, one thread / two (`nabla_conv5 N C H OC K S
 * P`): AlexNet-R's conv1 (1024, 3 -> 32, 32x32, 5x5) 60.1 / 35.5 against 52.8 / 28.4; ResNet-50's
 * stem (16, 3 -> 64, 224x224, 7x7 stride 2) 56.9 / 29.6 against 40.1 / 21.8; AlexNet-S's conv1
 * (16, 3 -> 96, 224x224, 11x11 stride 4) 39.9 / 23.3 against 39.3 / 24.2; small layers (64, 3 ->
 * 16, 32x32, 3x3) 0.79 against 0.65. The same scheme for the forward tied or lost (1.00x, 0.89x,
 * 0.95x on the first three). */
bool nb__stem_applies(const nb_conv_geom *g)
{
    return g->cl && nb_cpu_avx512() && g->c <= MAX_C && g->oc % 16 == 0 && g->groups == 1 && g->dh == 1 &&
           g->dw == 1;
}
