/* Winograd F(2x2, 5x5): 5x5 stride-1 "same" convolutions (padding 2) on channels-last float32
 * activations, in all three directions. oneDNN has Winograd only for 3x3 kernels; its direct
 * 5x5 kernels are at the machine's peak, so a 5x5 layer with many channels (AlexNet-R's 32 -> 32
 * on 15x15, batch 1024) can only go faster by doing fewer multiplications: each 2x2 output tile
 * takes 36 products per (input, output) channel pair instead of 100.
 *
 * With d a 6x6 input tile, g a 5x5 filter and Y the 2x2 output tile (correlation, as PyTorch's
 * conv2d), Y = A^T [(G g G^T) . (B^T d B)] A, '.' elementwise, for the interpolation points 0,
 * 1, -1, 2, -2 and infinity (the matrices below; the same points as oneDNN's F(4x4, 3x3), so the
 * same rounding behaviour). Per block of tiles:
 *   V[xi][t][c]  = (B^T d_t,c B)[xi]           input transform, 16 channels per vector
 *   M[xi][t][o]  = sum_c V[xi][t][c] U[xi][c][o]   36 small matrix products
 *   Y_t,o        = A^T M_t,o A (+ bias, ReLU)   output transform
 * U = G g G^T is made once per call. The input gradient is the forward on the output gradient
 * with the filters flipped and in/out swapped. The weight gradient is that of the Winograd
 * forward, G^T [sum_t V_t . (A dY_t A^T)] G, which equals the convolution's.
 *
 * Requires AVX-512F (checked at run time), channels in and out multiples of 16. */
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_impl.h"
#include "cpu/wino5_impl.h"

static _Atomic unsigned long long g_runs;

unsigned long long nb__wino5_runs(void)
{
    return g_runs;
}

#if defined(__x86_64__)
#include <immintrin.h>

#define VL 16    /* floats per vector */
#define ROWS 12  /* tiles per micro-kernel step (rows of the products) */
#define NXI 36   /* 6 x 6 transformed points */

typedef struct wgeom {
    int64_t n, h, w, th, tw, tiles; /* th x tw tiles of 2x2 per image */
    int64_t ci, co;                 /* channels in and out of this pass */
    int64_t tb;                     /* tiles per block, a multiple of ROWS */
    int64_t vs, ms;                 /* floats between the 36 matrices of V (ci wide) and of M (co) */
} wgeom;

static wgeom wgeom_of(int64_t n, int64_t h, int64_t w, int64_t ci, int64_t co, int64_t min_tb)
{
    wgeom g = {.n = n, .h = h, .w = w, .th = (h + 1) / 2, .tw = (w + 1) / 2, .ci = ci, .co = co};
    g.tiles = n * g.th * g.tw;
    /* V and M of a block in about 512 KiB (half of Zen 4's L2) */
    int64_t tb = (512 * 1024) / (NXI * 4 * (ci + co)) / ROWS * ROWS;
    g.tb = tb < min_tb ? min_tb : tb > 16 * ROWS ? 16 * ROWS : tb;
    /* one cache line more than the matrix: tb * C * 4 bytes is often a multiple of 2 KiB, which
     * would put the 36 matrices' rows in the same few L1 sets */
    g.vs = g.tb * ci + VL;
    g.ms = g.tb * co + VL;
    return g;
}

/* ---- the transforms ---------------------------------------------------------------------- */

static const float G[6][5] = {
    {1.f / 4, 0, 0, 0, 0},
    {-1.f / 6, -1.f / 6, -1.f / 6, -1.f / 6, -1.f / 6},
    {-1.f / 6, 1.f / 6, -1.f / 6, 1.f / 6, -1.f / 6},
    {1.f / 24, 1.f / 12, 1.f / 6, 1.f / 3, 2.f / 3},
    {1.f / 24, -1.f / 12, 1.f / 6, -1.f / 3, 2.f / 3},
    {0, 0, 0, 0, 1},
};

/* U[xi][p][q] = (G g G^T)[xi] for the filter g that takes the pass's input channel p to its
 * output channel q: the forward's w[q][p] (pass = forward, p < c, q < oc), or, flipped, w[p][q]
 * rotated by 180 degrees (the input gradient's pass, p < oc, q < c). w is OIHW [oc][c][5][5]. The
 * c * oc filters are first laid out as wt[k][pair], pair = p * (pass outputs) + q, then
 * transformed 16 pairs to a vector (c * oc is a multiple of 256). */
__attribute__((target("avx512f"))) static void weight_transform(const float *w, int64_t c, int64_t oc, bool flipped,
                                                                float *wt, float *U)
{
    int64_t pairs = c * oc;
    int nt = nb_cpu_threads_for(pairs * 25 * 36, NB_CPU_GRAIN);
#pragma omp parallel num_threads(nt)
    {
#pragma omp for schedule(static)
        for (int64_t f = 0; f < pairs; f++) { /* f = w's pair, o * c + i */
            int64_t o = f / c, i = f % c, pair = flipped ? f : i * oc + o;
            for (int k = 0; k < 25; k++) wt[k * pairs + pair] = w[f * 25 + (flipped ? 24 - k : k)];
        }
#pragma omp for schedule(static)
        for (int64_t p0 = 0; p0 < pairs; p0 += VL) {
            __m512 g[25], t[6][5];
            for (int k = 0; k < 25; k++) g[k] = _mm512_loadu_ps(wt + k * pairs + p0);
            for (int a = 0; a < 6; a++)
                for (int x = 0; x < 5; x++) {
                    __m512 acc = _mm512_setzero_ps();
                    for (int y = 0; y < 5; y++)
                        if (G[a][y] != 0) acc = _mm512_fmadd_ps(_mm512_set1_ps(G[a][y]), g[y * 5 + x], acc);
                    t[a][x] = acc;
                }
            for (int a = 0; a < 6; a++)
                for (int b = 0; b < 6; b++) {
                    __m512 acc = _mm512_setzero_ps();
                    for (int x = 0; x < 5; x++)
                        if (G[b][x] != 0) acc = _mm512_fmadd_ps(_mm512_set1_ps(G[b][x]), t[a][x], acc);
                    _mm512_storeu_ps(U + (a * 6 + b) * pairs + p0, acc);
                }
        }
    }
}

/* B^T d for six vectors d[0..5] (stride ds), into r[0..5] (stride rs). */
#define BT6(d, ds, r, rs)                                                                          \
    do {                                                                                           \
        __m512 d0 = (d)[0], d1 = (d)[(ds)], d2 = (d)[2 * (ds)], d3 = (d)[3 * (ds)];                \
        __m512 d4 = (d)[4 * (ds)], d5 = (d)[5 * (ds)];                                             \
        __m512 f4 = _mm512_set1_ps(4.f), f5 = _mm512_set1_ps(5.f), f2 = _mm512_set1_ps(2.f);       \
        __m512 p_ = _mm512_sub_ps(d4, d2), q_ = _mm512_sub_ps(d3, d1);                              \
        (r)[0] = _mm512_fmadd_ps(f4, d0, _mm512_fnmadd_ps(f5, d2, d4));                            \
        (r)[1] = _mm512_fnmadd_ps(f4, _mm512_add_ps(d1, d2), _mm512_add_ps(d3, d4));               \
        (r)[2] = _mm512_fmadd_ps(f4, _mm512_sub_ps(d1, d2), _mm512_sub_ps(d4, d3));                \
        (r)[3] = _mm512_fmadd_ps(f2, q_, p_);                                                       \
        (r)[4] = _mm512_fnmadd_ps(f2, q_, p_);                                                       \
        (r)[5] = _mm512_fmadd_ps(f4, d1, _mm512_fnmadd_ps(f5, d3, d5));                            \
        (void)(rs);                                                                                \
    } while (0)

/* V[xi][row][c..c+15] for tile t (image b, tile row ty, column tx) of the [n, h, w, C] input;
 * points outside the image read from zeros (C zeros), so the loads take no branches. */
__attribute__((target("avx512f"))) static void input_tile(const wgeom *g, const float *x, const float *zeros,
                                                          int64_t t, float *V, int64_t row)
{
    int64_t per = g->th * g->tw, b = t / per, ty = t % per / g->tw, tx = t % g->tw;
    int64_t y0 = 2 * ty - 2, x0 = 2 * tx - 2, C = g->ci, stride = g->vs;
    const float *src[36];
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++) {
            int64_t y = y0 + i, xx = x0 + j;
            bool in = y >= 0 && y < g->h && xx >= 0 && xx < g->w;
            src[i * 6 + j] = in ? x + ((b * g->h + y) * g->w + xx) * C : zeros;
        }
    for (int64_t c = 0; c < C; c += VL) {
        __m512 tr[36]; /* B^T along y, column by column: tr[i * 6 + j] */
        for (int j = 0; j < 6; j++) {
            __m512 d[6], o[6];
            for (int i = 0; i < 6; i++) d[i] = _mm512_loadu_ps(src[i * 6 + j] + c);
            BT6(d, 1, o, 1);
            for (int i = 0; i < 6; i++) tr[i * 6 + j] = o[i];
        }
        for (int i = 0; i < 6; i++) { /* then along x, row by row */
            __m512 o[6];
            BT6(&tr[i * 6], 1, o, 1);
            for (int j = 0; j < 6; j++) _mm512_storeu_ps(V + (i * 6 + j) * stride + row * C + c, o[j]);
        }
    }
}

/* Zero rows [from, tb) of V (padding tiles of the last block). */
static void zero_rows(const wgeom *g, float *V, int64_t from, int64_t ch)
{
    if (from >= g->tb) return;
    for (int xi = 0; xi < NXI; xi++)
        memset(V + xi * g->vs + from * ch, 0, (size_t)((g->tb - from) * ch) * sizeof(float));
}

/* Y = A^T m A for the 2x2 tile t from M[xi][row][o..o+15], plus bias, ReLU; into y [n, h, w, co]. */
__attribute__((target("avx512f"))) static void output_tile(const wgeom *g, const float *M, int64_t row, int64_t t,
                                                           const float *bias, bool relu, float *y)
{
    int64_t per = g->th * g->tw, b = t / per, ty = t % per / g->tw, tx = t % g->tw;
    int64_t CO = g->co, stride = g->ms;
    bool r1 = 2 * ty + 1 < g->h, c1 = 2 * tx + 1 < g->w;
    float *out = y + ((b * g->h + 2 * ty) * g->w + 2 * tx) * CO;
    __m512 f2 = _mm512_set1_ps(2.f), zero = _mm512_setzero_ps();
    for (int64_t o = 0; o < CO; o += VL) {
        __m512 s[2][6];
        for (int j = 0; j < 6; j++) { /* A^T along y, per column j */
            __m512 m0 = _mm512_loadu_ps(M + (0 * 6 + j) * stride + row * CO + o);
            __m512 m1 = _mm512_loadu_ps(M + (1 * 6 + j) * stride + row * CO + o);
            __m512 m2 = _mm512_loadu_ps(M + (2 * 6 + j) * stride + row * CO + o);
            __m512 m3 = _mm512_loadu_ps(M + (3 * 6 + j) * stride + row * CO + o);
            __m512 m4 = _mm512_loadu_ps(M + (4 * 6 + j) * stride + row * CO + o);
            __m512 m5 = _mm512_loadu_ps(M + (5 * 6 + j) * stride + row * CO + o);
            __m512 a = _mm512_add_ps(m1, m2), d = _mm512_sub_ps(m1, m2);
            __m512 e = _mm512_add_ps(m3, m4), f = _mm512_sub_ps(m3, m4);
            s[0][j] = _mm512_add_ps(_mm512_add_ps(m0, a), e);
            s[1][j] = _mm512_add_ps(_mm512_fmadd_ps(f2, f, d), m5);
        }
        __m512 bv = bias ? _mm512_loadu_ps(bias + o) : zero;
        for (int i = 0; i < 2; i++) {
            if (i == 1 && !r1) break;
            __m512 a = _mm512_add_ps(s[i][1], s[i][2]), d = _mm512_sub_ps(s[i][1], s[i][2]);
            __m512 e = _mm512_add_ps(s[i][3], s[i][4]), f = _mm512_sub_ps(s[i][3], s[i][4]);
            __m512 v0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s[i][0], a), e), bv);
            __m512 v1 = _mm512_add_ps(_mm512_add_ps(_mm512_fmadd_ps(f2, f, d), s[i][5]), bv);
            if (relu) {
                v0 = _mm512_max_ps(v0, zero);
                v1 = _mm512_max_ps(v1, zero);
            }
            _mm512_storeu_ps(out + i * g->w * CO + o, v0);
            if (c1) _mm512_storeu_ps(out + (i * g->w + 1) * CO + o, v1);
        }
    }
}

/* M[r][o] = sum_c V[r][c] U[c][o] for rows [0, tb) (tb a multiple of ROWS), C = ci, O = co. */
__attribute__((target("avx512f"))) static void block_product(const float *V, const float *U, float *M, int64_t tb,
                                                             int64_t C, int64_t O)
{
    int64_t o = 0;
    for (; o + 2 * VL <= O; o += 2 * VL)
        for (int64_t r0 = 0; r0 < tb; r0 += ROWS) {
            __m512 acc[ROWS][2];
            for (int r = 0; r < ROWS; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
            const float *v = V + r0 * C;
            for (int64_t c = 0; c < C; c++) {
                __m512 u0 = _mm512_loadu_ps(U + c * O + o), u1 = _mm512_loadu_ps(U + c * O + o + VL);
                for (int r = 0; r < ROWS; r++) {
                    __m512 b = _mm512_set1_ps(v[r * C + c]);
                    acc[r][0] = _mm512_fmadd_ps(b, u0, acc[r][0]);
                    acc[r][1] = _mm512_fmadd_ps(b, u1, acc[r][1]);
                }
            }
            for (int r = 0; r < ROWS; r++) {
                _mm512_storeu_ps(M + (r0 + r) * O + o, acc[r][0]);
                _mm512_storeu_ps(M + (r0 + r) * O + o + VL, acc[r][1]);
            }
        }
    for (; o < O; o += VL)
        for (int64_t r0 = 0; r0 < tb; r0 += ROWS) {
            __m512 acc[ROWS];
            for (int r = 0; r < ROWS; r++) acc[r] = _mm512_setzero_ps();
            const float *v = V + r0 * C;
            for (int64_t c = 0; c < C; c++) {
                __m512 u0 = _mm512_loadu_ps(U + c * O + o);
                for (int r = 0; r < ROWS; r++) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(v[r * C + c]), u0, acc[r]);
            }
            for (int r = 0; r < ROWS; r++) _mm512_storeu_ps(M + (r0 + r) * O + o, acc[r]);
        }
}

/* The forward pass of g (ci -> co) with transformed filters U: y = conv(x) (+ bias, ReLU). */
static nb_status forward_pass(const wgeom *g, const float *x, const float *U, const float *bias, bool relu,
                              float *y)
{
    int64_t nblocks = (g->tiles + g->tb - 1) / g->tb;
    int nt = nb_cpu_threads_for(nblocks, 1);
    size_t per = (size_t)(NXI * (g->vs + g->ms)), bytes = (per * (size_t)nt + (size_t)g->ci) * sizeof(float);
    float *buf = nb_cpu_alloc(bytes);
    if (!buf) return nb__err(NB_ERR_OOM, "conv2d (Winograd 5x5): out of memory for %zu bytes of scratch", bytes);
    float *zeros = buf + per * (size_t)nt;
    memset(zeros, 0, (size_t)g->ci * sizeof(float));
#pragma omp parallel num_threads(nt)
    {
        int me = nb_cpu_thread_num();
        float *V = buf + per * (size_t)me, *M = V + NXI * g->vs;
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < nblocks; blk++) {
            int64_t t0 = blk * g->tb, nt_ = g->tiles - t0 < g->tb ? g->tiles - t0 : g->tb;
            for (int64_t r = 0; r < nt_; r++) input_tile(g, x, zeros, t0 + r, V, r);
            zero_rows(g, V, nt_, g->ci);
            for (int xi = 0; xi < NXI; xi++)
                block_product(V + xi * g->vs, U + xi * g->ci * g->co, M + xi * g->ms,
                              (nt_ + ROWS - 1) / ROWS * ROWS, g->ci, g->co);
            for (int64_t r = 0; r < nt_; r++) output_tile(g, M, r, t0 + r, bias, relu, y);
        }
    }
    nb_cpu_free(buf, bytes);
    return NB_OK;
}

/* dM[xi][row][o..] = (A dY A^T)[xi] for tile t of the output gradient gy [n, h, w, co] (values
 * outside the image are zero); adds the tile's gradient values to bsum (the bias gradient). */
__attribute__((target("avx512f"))) static void grad_tile(const wgeom *g, const float *gy, int64_t t, float *dM,
                                                         int64_t row, float *bsum)
{
    int64_t per = g->th * g->tw, b = t / per, ty = t % per / g->tw, tx = t % g->tw;
    int64_t CO = g->co, stride = g->ms;
    bool r1 = 2 * ty + 1 < g->h, c1 = 2 * tx + 1 < g->w;
    const float *in = gy + ((b * g->h + 2 * ty) * g->w + 2 * tx) * CO;
    __m512 f2 = _mm512_set1_ps(2.f), zero = _mm512_setzero_ps();
    for (int64_t o = 0; o < CO; o += VL) {
        __m512 y[2][2];
        y[0][0] = _mm512_loadu_ps(in + o);
        y[0][1] = c1 ? _mm512_loadu_ps(in + CO + o) : zero;
        y[1][0] = r1 ? _mm512_loadu_ps(in + g->w * CO + o) : zero;
        y[1][1] = r1 && c1 ? _mm512_loadu_ps(in + (g->w + 1) * CO + o) : zero;
        if (bsum)
            _mm512_storeu_ps(bsum + o, _mm512_add_ps(_mm512_loadu_ps(bsum + o),
                                                     _mm512_add_ps(_mm512_add_ps(y[0][0], y[0][1]),
                                                                   _mm512_add_ps(y[1][0], y[1][1]))));
        __m512 s[2][6]; /* A along x */
        for (int i = 0; i < 2; i++) {
            __m512 a = y[i][0], c = y[i][1];
            s[i][0] = a;
            s[i][1] = _mm512_add_ps(a, c);
            s[i][2] = _mm512_sub_ps(a, c);
            s[i][3] = _mm512_fmadd_ps(f2, c, a);
            s[i][4] = _mm512_fnmadd_ps(f2, c, a);
            s[i][5] = c;
        }
        for (int j = 0; j < 6; j++) { /* A along y */
            __m512 a = s[0][j], c = s[1][j], m[6];
            m[0] = a;
            m[1] = _mm512_add_ps(a, c);
            m[2] = _mm512_sub_ps(a, c);
            m[3] = _mm512_fmadd_ps(f2, c, a);
            m[4] = _mm512_fnmadd_ps(f2, c, a);
            m[5] = c;
            for (int i = 0; i < 6; i++) _mm512_storeu_ps(dM + (i * 6 + j) * stride + row * CO + o, m[i]);
        }
    }
}

/* dU[c][o] += sum_r V[r][c] dM[r][o] over rows [0, tb); C a multiple of 8. */
__attribute__((target("avx512f"))) static void block_product_t(const float *V, const float *dM, float *dU,
                                                               int64_t tb, int64_t C, int64_t O)
{
    for (int64_t c0 = 0; c0 < C; c0 += 8) {
        int64_t o = 0;
        for (; o + 2 * VL <= O; o += 2 * VL) {
            __m512 acc[8][2];
            for (int r = 0; r < 8; r++) {
                acc[r][0] = _mm512_loadu_ps(dU + (c0 + r) * O + o);
                acc[r][1] = _mm512_loadu_ps(dU + (c0 + r) * O + o + VL);
            }
            for (int64_t k = 0; k < tb; k++) {
                __m512 m0 = _mm512_loadu_ps(dM + k * O + o), m1 = _mm512_loadu_ps(dM + k * O + o + VL);
                const float *v = V + k * C + c0;
                for (int r = 0; r < 8; r++) {
                    __m512 b = _mm512_set1_ps(v[r]);
                    acc[r][0] = _mm512_fmadd_ps(b, m0, acc[r][0]);
                    acc[r][1] = _mm512_fmadd_ps(b, m1, acc[r][1]);
                }
            }
            for (int r = 0; r < 8; r++) {
                _mm512_storeu_ps(dU + (c0 + r) * O + o, acc[r][0]);
                _mm512_storeu_ps(dU + (c0 + r) * O + o + VL, acc[r][1]);
            }
        }
        for (; o < O; o += VL) {
            __m512 acc[8];
            for (int r = 0; r < 8; r++) acc[r] = _mm512_loadu_ps(dU + (c0 + r) * O + o);
            for (int64_t k = 0; k < tb; k++) {
                __m512 m0 = _mm512_loadu_ps(dM + k * O + o);
                const float *v = V + k * C + c0;
                for (int r = 0; r < 8; r++) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(v[r]), m0, acc[r]);
            }
            for (int r = 0; r < 8; r++) _mm512_storeu_ps(dU + (c0 + r) * O + o, acc[r]);
        }
    }
}

/* gw = G^T dU G per filter from the [36][ci][co] double sums dU (pair = i * co + o), 8 pairs to a
 * vector, through gt[k][pair] (scratch, 25 ci co doubles) into OIHW. */
__attribute__((target("avx512f"))) static void weight_grad_transform(const double *dU, int64_t ci, int64_t co,
                                                                     double *gt, float *gw)
{
    int64_t pairs = ci * co;
    int nt = nb_cpu_threads_for(pairs * 25 * 36, NB_CPU_GRAIN);
#pragma omp parallel num_threads(nt)
    {
#pragma omp for schedule(static)
        for (int64_t p0 = 0; p0 < pairs; p0 += 8) {
            __m512d t[5][6];
            for (int y = 0; y < 5; y++)
                for (int b = 0; b < 6; b++) {
                    __m512d acc = _mm512_setzero_pd();
                    for (int a = 0; a < 6; a++)
                        if (G[a][y] != 0)
                            acc = _mm512_fmadd_pd(_mm512_set1_pd((double)G[a][y]),
                                                  _mm512_loadu_pd(dU + (a * 6 + b) * pairs + p0), acc);
                    t[y][b] = acc;
                }
            for (int y = 0; y < 5; y++)
                for (int x = 0; x < 5; x++) {
                    __m512d acc = _mm512_setzero_pd();
                    for (int b = 0; b < 6; b++)
                        if (G[b][x] != 0) acc = _mm512_fmadd_pd(_mm512_set1_pd((double)G[b][x]), t[y][b], acc);
                    _mm512_storeu_pd(gt + (y * 5 + x) * pairs + p0, acc);
                }
        }
#pragma omp for schedule(static)
        for (int64_t f = 0; f < pairs; f++) { /* f = gw's pair, o * ci + i */
            int64_t o = f / ci, i = f % ci;
            for (int k = 0; k < 25; k++) gw[f * 25 + k] = (float)gt[k * pairs + i * co + o];
        }
    }
}

#define FLUSH 4

/* At least this many tiles per block in the weight gradient's pass, though V and dM then exceed
 * the 512 KiB: each block reads and writes the [36][ci][co] sums once, which for many channels
 * costs more than the block's products (16, 96 -> 256, 27x27, one thread: 98 ms with blocks of
 * 12, 89 with 48, 111 with 96; 1024, 32 -> 32, 15x15: 80, 76, 84). */
#define MIN_TB_WEIGHTS 48

/* tot += part; part = 0. */
__attribute__((target("avx512f"))) static void flush(double *restrict tot, float *restrict part, size_t n)
{
    size_t e = 0;
    for (; e + 8 <= n; e += 8) {
        __m256 p = _mm256_loadu_ps(part + e);
        _mm512_storeu_pd(tot + e, _mm512_add_pd(_mm512_loadu_pd(tot + e), _mm512_cvtps_pd(p)));
        _mm256_storeu_ps(part + e, _mm256_setzero_ps());
    }
    for (; e < n; e++) {
        tot[e] += (double)part[e];
        part[e] = 0;
    }
}

static nb_status weights_pass(const wgeom *g, const float *gy, const float *x, float *gw, float *gb)
{
    int64_t nblocks = (g->tiles + g->tb - 1) / g->tb;
    int nt = nb_cpu_threads_for(nblocks, 1);
    size_t nu = (size_t)(NXI * g->ci * g->co), acc = nu + (size_t)g->co; /* dU, then the bias sum */
    size_t per = (size_t)(NXI * (g->vs + g->ms)) + acc;
    size_t bytes = (per * (size_t)nt + (size_t)g->ci) * sizeof(float);
    size_t dbytes = (acc * (size_t)nt + 25 * nu / NXI) * sizeof(double); /* and gt */
    float *buf = nb_cpu_alloc(bytes);
    double *tot = buf ? nb_cpu_alloc(dbytes) : NULL;
    if (!tot) {
        if (buf) nb_cpu_free(buf, bytes);
        return nb__err(NB_ERR_OOM, "conv2d_backward_weight (Winograd 5x5): out of memory for %zu bytes of scratch",
                       bytes + dbytes);
    }
    float *zeros = buf + per * (size_t)nt;
    memset(zeros, 0, (size_t)g->ci * sizeof(float));
#pragma omp parallel num_threads(nt)
    {
        int me = nb_cpu_thread_num();
        float *dU = buf + per * (size_t)me, *bs = dU + nu;
        float *V = dU + acc, *dM = V + NXI * g->vs;
        double *my = tot + acc * (size_t)me;
        memset(my, 0, acc * sizeof(double));
        memset(dU, 0, acc * sizeof(float));
        int pending = 0;
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < nblocks; blk++) {
            int64_t t0 = blk * g->tb, n = g->tiles - t0 < g->tb ? g->tiles - t0 : g->tb;
            for (int64_t r = 0; r < n; r++) {
                input_tile(g, x, zeros, t0 + r, V, r);
                grad_tile(g, gy, t0 + r, dM, r, bs);
            }
            for (int xi = 0; xi < NXI; xi++)
                block_product_t(V + xi * g->vs, dM + xi * g->ms, dU + xi * g->ci * g->co, n, g->ci, g->co);
            if (++pending == FLUSH) {
                flush(my, dU, acc);
                pending = 0;
            }
        }
        if (pending) flush(my, dU, acc);
    }
    for (int k = 1; k < nt; k++) {
        const double *src = tot + acc * (size_t)k;
        for (size_t e = 0; e < acc; e++) tot[e] += src[e];
    }
    weight_grad_transform(tot, g->ci, g->co, tot + acc * (size_t)nt, gw);
    if (gb)
        for (int64_t o = 0; o < g->co; o++) gb[o] = (float)tot[nu + (size_t)o];
    nb_cpu_free(tot, dbytes);
    nb_cpu_free(buf, bytes);
    return NB_OK;
}

static nb_status with_filters(const nb_conv_geom *cg, const float *w, bool flipped, const float *in,
                              const float *bias, bool relu, float *out)
{
    g_runs++;
    int64_t ci = flipped ? cg->oc : cg->c, co = flipped ? cg->c : cg->oc;
    size_t bytes = (size_t)((NXI + 25) * ci * co) * sizeof(float);
    float *U = nb_cpu_alloc(bytes);
    if (!U) return nb__err(NB_ERR_OOM, "conv2d (Winograd 5x5): out of memory for %zu bytes of filters", bytes);
    weight_transform(w, cg->c, cg->oc, flipped, U + NXI * ci * co, U);
    wgeom g = wgeom_of(cg->n, cg->h, cg->w, ci, co, ROWS);
    nb_status st = forward_pass(&g, in, U, bias, relu, out);
    nb_cpu_free(U, bytes);
    return st;
}

nb_status nb__wino5_forward(const nb_conv_geom *g, const float *x, const float *w, const float *b, bool relu,
                            float *y)
{
    return with_filters(g, w, false, x, b, relu, y);
}

nb_status nb__wino5_backward_data(const nb_conv_geom *g, const float *gy, const float *w, float *gx)
{
    return with_filters(g, w, true, gy, NULL, false, gx);
}

nb_status nb__wino5_backward_weights(const nb_conv_geom *g, const float *gy, const float *x, float *gw, float *gb)
{
    g_runs++;
    wgeom wg = wgeom_of(g->n, g->h, g->w, g->c, g->oc, MIN_TB_WEIGHTS);
    return weights_pass(&wg, gy, x, gw, gb);
}

#else /* not x86-64: never chosen */

nb_status nb__wino5_forward(const nb_conv_geom *g, const float *x, const float *w, const float *b, bool relu,
                            float *y)
{
    (void)g, (void)x, (void)w, (void)b, (void)relu, (void)y;
    return nb__err(NB_ERR_UNSUPPORTED, "conv2d: Winograd 5x5 needs x86-64 with AVX-512");
}

nb_status nb__wino5_backward_data(const nb_conv_geom *g, const float *gy, const float *w, float *gx)
{
    (void)g, (void)gy, (void)w, (void)gx;
    return nb__err(NB_ERR_UNSUPPORTED, "conv2d_backward_input: Winograd 5x5 needs x86-64 with AVX-512");
}

nb_status nb__wino5_backward_weights(const nb_conv_geom *g, const float *gy, const float *x, float *gw, float *gb)
{
    (void)g, (void)gy, (void)x, (void)gw, (void)gb;
    return nb__err(NB_ERR_UNSUPPORTED, "conv2d_backward_weight: Winograd 5x5 needs x86-64 with AVX-512");
}

#endif

/* auto's bounds, from one thread's times of the three directions, direct (oneDNN) against these
 * kernels (`nabla_conv5 N C H OC`, ms; N, C -> OC, H x W): 1024, 32 -> 32, 15x15 92/94/99 against
 * 72/72/80; 16, 96 -> 256, 27x27 117/121/132 against 60/66/79; 16, 256 -> 256, 14x14 86/87/102
 * against 51/51/92; 8, 32 -> 32, 16x16 (512 tiles) 0.80/0.78/0.81 against 0.53/0.60/0.69; 16,
 * 64 -> 64, 8x8 (256 tiles) 1.45/1.39/1.76 against 1.17/1.39/1.64. Slower: with fewer tiles, where
 * the per-call filter transforms and the weight gradient's sums dominate (4, 64 -> 64, 8x8, 64
 * tiles: 0.36/0.37/0.37 against 0.46/0.73/0.68; 2, 32 -> 32, 16x16, 128 tiles: input gradient
 * 0.20 against 0.24), and with many channel pairs, whose 36 transformed filters per pair no longer
 * stay in cache beside a block (8, 512 -> 512, 7x7: 55/45/58 against 136/126/107). */
#define AUTO_MIN_TILES 256
#define AUTO_MAX_CHANNEL_PAIRS 65536

bool nb__wino5_applies(const nb_conv_geom *g, nb_conv_algo algo)
{
    if (algo == NB_CONV_ALGO_DIRECT || !g->cl || !nb_cpu_avx512()) return false;
    if (g->kh != 5 || g->kw != 5 || g->sh != 1 || g->sw != 1 || g->ph != 2 || g->pw != 2 || g->dh != 1 ||
        g->dw != 1 || g->groups != 1 || g->oh != g->h || g->ow != g->w)
        return false;
    if (g->c % 16 || g->oc % 16) return false;
    if (algo == NB_CONV_ALGO_WINOGRAD) return true;
    return g->c >= 32 && g->oc >= 32 && g->c * g->oc <= AUTO_MAX_CHANNEL_PAIRS &&
           g->n * ((g->h + 1) / 2) * ((g->w + 1) / 2) >= AUTO_MIN_TILES;
}
