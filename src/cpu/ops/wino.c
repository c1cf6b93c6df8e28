/* Winograd F(4x4, 3x3) and F(2x2, 5x5): 3x3 and 5x5 stride-1 "same" convolutions (padding 1
 * and 2) on channels-last float32 activations, in all three directions. Both take a 6x6 input
 * tile to an m x m output tile (m = 4 and 2), for 36 products per tile and (input, output)
 * channel pair instead of 144 (3x3) or 100 (5x5). oneDNN has Winograd only for 3x3 kernels and
 * only with AVX-512; its direct 5x5 kernels are at the machine's peak, so a 5x5 layer with many
 * channels (AlexNet-R's 32 -> 32 on 15x15, batch 1024) can only go faster by doing fewer
 * multiplications, and on an AVX2 CPU the same holds for the 3x3 layers.
 *
 * With d a 6x6 input tile, g an r x r filter and Y the m x m output tile (correlation, as
 * PyTorch's conv2d), Y = A^T [(G g G^T) . (B^T d B)] A, '.' elementwise, for the interpolation
 * points 0, 1, -1, 2, -2 and infinity (the matrices below and in wino_kern_impl.h; B is the same
 * for both tile sizes, and the points are oneDNN's for F(4x4, 3x3), so the same rounding
 * behaviour). Per block of tiles:
 *   V[xi][t][c]  = (B^T d_t,c B)[xi]           input transform, a vector of channels at a time
 *   M[xi][t][o]  = sum_c V[xi][t][c] U[xi][c][o]   36 small matrix products
 *   Y_t,o        = A^T M_t,o A (+ bias, ReLU)   output transform
 * U = G g G^T is made once per call. The input gradient is the forward on the output gradient
 * with the filters flipped and in/out swapped. The weight gradient is that of the Winograd
 * forward, G^T [sum_t V_t . (A dY_t A^T)] G, which equals the convolution's; its sums are kept
 * in double.
 *
 * The kernels are one text, wino_kern_impl.h, in GCC's generic vectors, compiled here for
 * AVX-512F (16 floats per vector), for AVX2 with FMA (8), and, for tests, the 16-float logic for
 * AVX2 (nb__wino_set_wide). Channels in and out are multiples of 16. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_impl.h"
#include "cpu/wino_impl.h"

static _Atomic unsigned long long g_runs;
static atomic_bool g_wide;

unsigned long long nb__wino_runs(void) { return g_runs; }
void nb__wino_set_wide(bool on) { atomic_store(&g_wide, on); }

#if defined(__x86_64__) && defined(__GNUC__)

#define NXI 36     /* 6 x 6 transformed points */
#define TB_UNIT 12 /* tiles per block are a multiple of this (of every instance's ROWS) */
#define BIG_FILTER_BYTES (4 << 20)

typedef struct wgeom {
    int64_t n, h, w;                /* the pass's input (and output) images */
    int64_t m, r, pad;              /* m x m output tiles, r x r filters, padding (r - 1) / 2 */
    int64_t th, tw, tiles;          /* th x tw tiles per image */
    int64_t ci, co;                 /* channels in and out of this pass */
    int64_t tb;                     /* tiles per block, a multiple of TB_UNIT */
    int64_t vs, ms;                 /* floats between the 36 matrices of V (ci wide) and of M (co) */
} wgeom;

static wgeom wgeom_of(const nb_conv_geom *cg, int64_t ci, int64_t co, int64_t min_tb, int64_t block_bytes)
{
    int64_t r = cg->kh, m = 7 - r;
    wgeom g = {.n = cg->n, .h = cg->h, .w = cg->w, .m = m, .r = r, .pad = (r - 1) / 2, .ci = ci, .co = co};
    g.th = (g.h + m - 1) / m;
    g.tw = (g.w + m - 1) / m;
    g.tiles = g.n * g.th * g.tw;
    int64_t tb = block_bytes / (NXI * 4 * (ci + co)) / TB_UNIT * TB_UNIT;
    /* each block reads all 36 transformed filter matrices; where they are larger than L3 can
     * serve a block's products from, blocks of the most tiles (ResNet-50's 3x3 layers, batch 16,
     * one thread, AVX2, ms forward / input gradient / weight gradient: 256 -> 256 channels at
     * 14x14, 9.4 MB of filters, blocks of 12 tiles 52/52/53, of 192 27/25/42; but 128 -> 128 at
     * 28x28, 2.4 MB, 17/16/21 against 26/22/29) */
    if ((int64_t)NXI * 4 * ci * co > BIG_FILTER_BYTES) tb = 16 * TB_UNIT;
    tb = tb < min_tb ? min_tb : tb > 16 * TB_UNIT ? 16 * TB_UNIT : tb;
    /* as many blocks as a multiple of the threads, where there are few, and no larger than needed */
    int64_t blocks = (g.tiles + tb - 1) / tb, nt = nb_get_num_threads();
    if (blocks < 8 * nt) blocks = (blocks + nt - 1) / nt * nt;
    tb = ((g.tiles + blocks - 1) / blocks + TB_UNIT - 1) / TB_UNIT * TB_UNIT;
    g.tb = tb;
    /* one cache line more than the matrix: tb * C * 4 bytes is often a multiple of 2 KiB, which
     * would put the 36 matrices' rows in the same few L1 sets */
    g.vs = g.tb * ci + 16;
    g.ms = g.tb * co + 16;
    return g;
}

/* G (6 x r, zero-padded to 5 columns) of F(4x4, 3x3) and F(2x2, 5x5): row a holds the powers of
 * point a (scaled), the last row the point at infinity. */
static const float G3[6][5] = {
    {1.f / 4, 0, 0},
    {-1.f / 6, -1.f / 6, -1.f / 6},
    {-1.f / 6, 1.f / 6, -1.f / 6},
    {1.f / 24, 1.f / 12, 1.f / 6},
    {1.f / 24, -1.f / 12, 1.f / 6},
    {0, 0, 1},
};
static const float G5[6][5] = {
    {1.f / 4, 0, 0, 0, 0},
    {-1.f / 6, -1.f / 6, -1.f / 6, -1.f / 6, -1.f / 6},
    {-1.f / 6, 1.f / 6, -1.f / 6, 1.f / 6, -1.f / 6},
    {1.f / 24, 1.f / 12, 1.f / 6, 1.f / 3, 2.f / 3},
    {1.f / 24, -1.f / 12, 1.f / 6, -1.f / 3, 2.f / 3},
    {0, 0, 0, 0, 1},
};

static const float (*wino_g(int r))[5] { return r == 3 ? G3 : G5; }

/* Zero rows [from, tb) of V (padding tiles of the last block). */
static void wino_zero_rows(const wgeom *g, float *V, int64_t from, int64_t ch)
{
    if (from >= g->tb) return;
    for (int xi = 0; xi < NXI; xi++)
        memset(V + xi * g->vs + from * ch, 0, (size_t)((g->tb - from) * ch) * sizeof(float));
}

/* The weight gradient's blocks add their float sums into the thread's double totals every
 * WINO_FLUSH blocks. */
#define WINO_FLUSH 4

/* At least this many tiles per block in the weight gradient's pass, though V and dM then exceed
 * the L2 budget: each block reads and writes the [36][ci][co] sums once, which for many channels
 * costs more than the block's products (F(2x2, 5x5) on AVX-512, 16, 96 -> 256, 27x27, one
 * thread: 98 ms with blocks of 12, 89 with 48, 111 with 96; 1024, 32 -> 32, 15x15: 80, 76, 84). */
#define MIN_TB_WEIGHTS 48

#define WK(name) name##_avx512
#define WK_TARGET "avx512f,fma"
#define VL 16
#define ROWS 12
#define CB 8
#define BLOCK_BYTES (512 * 1024)
#include "cpu/wino_kern_impl.h"

#define WK(name) name##_avx2
#define WK_TARGET "avx2,fma"
#define VL 8
#define ROWS 6
#define CB 4
#define BLOCK_BYTES (256 * 1024)
#include "cpu/wino_kern_impl.h"

/* tests: AVX-512's logic in AVX2 code (GCC splits each 64-byte vector in two, through memory) */
#define WK(name) name##_wide
#define WK_TARGET "avx2,fma"
#define VL 16
#define ROWS 12
#define CB 8
#define BLOCK_BYTES (512 * 1024)
#include "cpu/wino_kern_impl.h"

typedef struct wino_isa {
    nb_status (*forward)(const nb_conv_geom *cg, bool flipped, const float *w, const float *in, const float *bias,
                         bool relu, float *out);
    nb_status (*weights)(const nb_conv_geom *cg, const float *gy, const float *x, float *gw, float *gb);
} wino_isa;

static const wino_isa *isa(void)
{
    static const wino_isa avx512 = {conv_forward_avx512, conv_weights_avx512};
    static const wino_isa avx2 = {conv_forward_avx2, conv_weights_avx2};
    static const wino_isa wide = {conv_forward_wide, conv_weights_wide};
    if (atomic_load(&g_wide)) return &wide;
    return nb_cpu_avx512() ? &avx512 : &avx2;
}

nb_status nb__wino_forward(const nb_conv_geom *g, const float *x, const float *w, const float *b, bool relu,
                           float *y)
{
    g_runs++;
    return isa()->forward(g, false, w, x, b, relu, y);
}

nb_status nb__wino_backward_data(const nb_conv_geom *g, const float *gy, const float *w, float *gx)
{
    g_runs++;
    return isa()->forward(g, true, w, gy, NULL, false, gx);
}

nb_status nb__wino_backward_weights(const nb_conv_geom *g, const float *gy, const float *x, float *gw, float *gb)
{
    g_runs++;
    return isa()->weights(g, gy, x, gw, gb);
}

#else /* not x86-64 with GCC's vectors: never chosen */

nb_status nb__wino_forward(const nb_conv_geom *g, const float *x, const float *w, const float *b, bool relu,
                           float *y)
{
    (void)g, (void)x, (void)w, (void)b, (void)relu, (void)y;
    return nb__err(NB_ERR_UNSUPPORTED, "conv2d: Winograd needs x86-64 with AVX2");
}

nb_status nb__wino_backward_data(const nb_conv_geom *g, const float *gy, const float *w, float *gx)
{
    (void)g, (void)gy, (void)w, (void)gx;
    return nb__err(NB_ERR_UNSUPPORTED, "conv2d_backward_input: Winograd needs x86-64 with AVX2");
}

nb_status nb__wino_backward_weights(const nb_conv_geom *g, const float *gy, const float *x, float *gw, float *gb)
{
    (void)g, (void)gy, (void)x, (void)gw, (void)gb;
    return nb__err(NB_ERR_UNSUPPORTED, "conv2d_backward_weight: Winograd needs x86-64 with AVX2");
}

#endif

bool nb__wino_fits(const nb_conv_geom *g)
{
    if (!nb_cpu_avx2_fma() || !g->cl || g->groups != 1 || g->kh != g->kw || (g->kh != 3 && g->kh != 5)) return false;
    if (g->sh != 1 || g->sw != 1 || g->ph != (g->kh - 1) / 2 || g->pw != g->ph || g->dh != 1 || g->dw != 1 ||
        g->oh != g->h || g->ow != g->w)
        return false;
    return g->c % 16 == 0 && g->oc % 16 == 0;
}

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

bool nb__wino_applies(const nb_conv_geom *g, nb_conv_algo algo)
{
    if (algo == NB_CONV_ALGO_DIRECT || g->kh != 5 || !nb_cpu_avx512() || !nb__wino_fits(g)) return false;
    if (algo == NB_CONV_ALGO_WINOGRAD) return true;
    return g->c >= 32 && g->oc >= 32 && g->c * g->oc <= AUTO_MAX_CHANNEL_PAIRS &&
           g->n * ((g->h + 1) / 2) * ((g->w + 1) / 2) >= AUTO_MIN_TILES;
}
