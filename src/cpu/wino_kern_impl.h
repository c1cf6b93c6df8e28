/* Template: the Winograd kernels of src/cpu/ops/wino.c for one instruction set. wino.c includes
 * this file once per instance, having defined
 *   WK(name)   the instance's name for name (name##_avx2, ...),
 *   WK_TARGET  the target attribute its functions are compiled for,
 *   VL         floats per vector (8 or 16): channels are taken VL at a time,
 *   ROWS       tiles per step of the forward's micro-kernel (divides TB_UNIT),
 *   CB         input channels per step of the weight gradient's micro-kernel (divides 16),
 *   BLOCK_BYTES  the budget of one block's V and M (a share of the core's L2).
 * The vectors are GCC's generic vectors, so one text serves every width; the arithmetic is
 * written as a * b + c, which GNU C contracts to FMA. Everything here is static: the instance's
 * entry points are WK(conv_forward) and WK(conv_weights), and wino.c holds the shared geometry
 * (wgeom), the transform matrices and the dispatch. The file undefines its parameters at its
 * end. */

typedef float WK(vf) __attribute__((vector_size(VL * 4), aligned(4), may_alias));
typedef float WK(vh) __attribute__((vector_size(VL * 2), aligned(4), may_alias));   /* VL / 2 floats */
typedef double WK(vd) __attribute__((vector_size(VL * 4), aligned(8), may_alias));  /* VL / 2 doubles */
typedef int WK(vi) __attribute__((vector_size(VL * 4)));

#define V WK(vf)
#define VD WK(vd)
#define WKF __attribute__((target(WK_TARGET)))
#define LD(p) (*(const V *)(p))
#define ST(p, v) (*(V *)(p) = (v))
#define LDD(p) (*(const VD *)(p))
#define STD(p, v) (*(VD *)(p) = (v))

/* U[xi][p][q] = (G g G^T)[xi] for the filter g (r x r) that takes the pass's input channel p to
 * its output channel q: the forward's w[q][p] (p < c, q < oc), or, flipped, w[p][q] rotated by
 * 180 degrees (the input gradient's pass, p < oc, q < c). w is OIHW [oc][c][r][r]. The c * oc
 * filters are first laid out as wt[k][pair], pair = p * (pass outputs) + q, then transformed VL
 * pairs to a vector (c * oc is a multiple of 256). */
WKF static void WK(weight_transform)(const float *w, int64_t c, int64_t oc, int r, bool flipped, float *wt,
                                     float *U)
{
    const float(*G)[5] = wino_g(r);
    int64_t pairs = c * oc;
    int rr = r * r;
    int nt = nb_cpu_threads_for(pairs * rr * NXI, NB_CPU_GRAIN);
#pragma omp parallel num_threads(nt)
    {
#pragma omp for schedule(static)
        for (int64_t f = 0; f < pairs; f++) { /* f = w's pair, o * c + i */
            int64_t o = f / c, i = f % c, pair = flipped ? f : i * oc + o;
            for (int k = 0; k < rr; k++) wt[k * pairs + pair] = w[f * rr + (flipped ? rr - 1 - k : k)];
        }
#pragma omp for schedule(static)
        for (int64_t p0 = 0; p0 < pairs; p0 += VL) {
            V g[25], t[6][5];
            for (int k = 0; k < rr; k++) g[k] = LD(wt + k * pairs + p0);
            for (int a = 0; a < 6; a++)
                for (int x = 0; x < r; x++) {
                    V acc = {0};
                    for (int y = 0; y < r; y++)
                        if (G[a][y] != 0) acc += G[a][y] * g[y * r + x];
                    t[a][x] = acc;
                }
            for (int a = 0; a < 6; a++)
                for (int b = 0; b < 6; b++) {
                    V acc = {0};
                    for (int x = 0; x < r; x++)
                        if (G[b][x] != 0) acc += G[b][x] * t[a][x];
                    ST(U + (a * 6 + b) * pairs + p0, acc);
                }
        }
    }
}

/* B^T d for the six vectors d[0..5], into o[0..5] (the points 0, 1, -1, 2, -2 and infinity). */
WKF static inline void WK(bt6)(const V *d, V *o)
{
    V p = d[4] - d[2], q = d[3] - d[1];
    o[0] = 4.f * d[0] - 5.f * d[2] + d[4];
    o[1] = d[3] + d[4] - 4.f * (d[1] + d[2]);
    o[2] = 4.f * (d[1] - d[2]) + (d[4] - d[3]);
    o[3] = 2.f * q + p;
    o[4] = p - 2.f * q;
    o[5] = 4.f * d[1] - 5.f * d[3] + d[5];
}

/* A^T m for the six vectors m[0..5], into s[0..mt-1] (mt = 2 or 4 outputs). */
WKF static inline void WK(at6)(const V *m, V *s, int mt)
{
    V a = m[1] + m[2], d = m[1] - m[2], e = m[3] + m[4], f = m[3] - m[4];
    s[0] = m[0] + a + e;
    if (mt == 2) {
        s[1] = 2.f * f + d + m[5];
    } else {
        s[1] = 2.f * f + d;
        s[2] = 4.f * e + a;
        s[3] = 8.f * f + d + m[5];
    }
}

/* A y for the mt vectors y[0..mt-1], into o[0..5] (the transpose of at6). */
WKF static inline void WK(a6)(const V *y, V *o, int mt)
{
    o[0] = y[0];
    if (mt == 2) {
        o[1] = y[0] + y[1];
        o[2] = y[0] - y[1];
        o[3] = 2.f * y[1] + y[0];
        o[4] = y[0] - 2.f * y[1];
        o[5] = y[1];
    } else {
        V e = y[0] + y[2], od = y[1] + y[3], e4 = 4.f * y[2] + y[0], o2 = 2.f * y[1] + 8.f * y[3];
        o[1] = e + od;
        o[2] = e - od;
        o[3] = e4 + o2;
        o[4] = e4 - o2;
        o[5] = y[3];
    }
}

/* V[xi][row][c..c+VL-1] for tile t of the [n, h, w, C] input; points outside the image read
 * from zeros (C zeros), so the loads take no branches. */
WKF static void WK(input_tile)(const wgeom *g, const float *x, const float *zeros, int64_t t, float *Vb, int64_t row)
{
    int64_t per = g->th * g->tw, b = t / per, ty = t % per / g->tw, tx = t % g->tw;
    int64_t y0 = g->m * ty - g->pad, x0 = g->m * tx - g->pad, C = g->ci, stride = g->vs;
    const float *src[NXI];
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++) {
            int64_t y = y0 + i, xx = x0 + j;
            bool in = y >= 0 && y < g->h && xx >= 0 && xx < g->w;
            src[i * 6 + j] = in ? x + ((b * g->h + y) * g->w + xx) * C : zeros;
        }
    for (int64_t c = 0; c < C; c += VL) {
        V tr[NXI]; /* B^T along y, column by column: tr[i * 6 + j] */
        for (int j = 0; j < 6; j++) {
            V d[6], o[6];
            for (int i = 0; i < 6; i++) d[i] = LD(src[i * 6 + j] + c);
            WK(bt6)(d, o);
            for (int i = 0; i < 6; i++) tr[i * 6 + j] = o[i];
        }
        for (int i = 0; i < 6; i++) { /* then along x, row by row */
            V o[6];
            WK(bt6)(&tr[i * 6], o);
            for (int j = 0; j < 6; j++) ST(Vb + (i * 6 + j) * stride + row * C + c, o[j]);
        }
    }
}

/* Y = A^T M A for tile t from M[xi][row][o..o+VL-1], plus bias, ReLU; into y [n, h, w, co]. */
WKF static void WK(output_tile)(const wgeom *g, const float *M, int64_t row, int64_t t, const float *bias, bool relu,
                                float *y)
{
    int64_t per = g->th * g->tw, b = t / per, ty = t % per / g->tw, tx = t % g->tw;
    int64_t CO = g->co, stride = g->ms;
    int mt = g->m;
    int nr = g->h - mt * ty < mt ? (int)(g->h - mt * ty) : mt, nc = g->w - mt * tx < mt ? (int)(g->w - mt * tx) : mt;
    float *out = y + ((b * g->h + mt * ty) * g->w + mt * tx) * CO;
    for (int64_t o = 0; o < CO; o += VL) {
        V s[6][4]; /* s[j][i]: A^T along y of column j */
        for (int j = 0; j < 6; j++) {
            V m[6];
            for (int i = 0; i < 6; i++) m[i] = LD(M + (i * 6 + j) * stride + row * CO + o);
            WK(at6)(m, s[j], mt);
        }
        V bv = {0};
        if (bias) bv = LD(bias + o);
        for (int i = 0; i < nr; i++) {
            V col[6], v[4];
            for (int j = 0; j < 6; j++) col[j] = s[j][i];
            WK(at6)(col, v, mt);
            for (int j = 0; j < nc; j++) {
                V u = v[j] + bv;
                if (relu) u = (V)((WK(vi))(u > 0) & (WK(vi))u);
                ST(out + (i * g->w + j) * CO + o, u);
            }
        }
    }
}

/* M[r][o] = sum_c V[r][c] U[c][o] for rows [0, tb) (tb a multiple of ROWS), C = ci, O = co. */
WKF static void WK(block_product)(const float *Vb, const float *U, float *M, int64_t tb, int64_t C, int64_t O)
{
    int64_t o = 0;
    for (; o + 2 * VL <= O; o += 2 * VL)
        for (int64_t r0 = 0; r0 < tb; r0 += ROWS) {
            V acc0[ROWS], acc1[ROWS];
            for (int r = 0; r < ROWS; r++) acc0[r] = acc1[r] = (V){0};
            const float *v = Vb + r0 * C;
            for (int64_t c = 0; c < C; c++) {
                V u0 = LD(U + c * O + o), u1 = LD(U + c * O + o + VL);
                for (int r = 0; r < ROWS; r++) {
                    float b = v[r * C + c];
                    acc0[r] += b * u0;
                    acc1[r] += b * u1;
                }
            }
            for (int r = 0; r < ROWS; r++) {
                ST(M + (r0 + r) * O + o, acc0[r]);
                ST(M + (r0 + r) * O + o + VL, acc1[r]);
            }
        }
    for (; o < O; o += VL)
        for (int64_t r0 = 0; r0 < tb; r0 += ROWS) {
            V acc[ROWS];
            for (int r = 0; r < ROWS; r++) acc[r] = (V){0};
            const float *v = Vb + r0 * C;
            for (int64_t c = 0; c < C; c++) {
                V u0 = LD(U + c * O + o);
                for (int r = 0; r < ROWS; r++) acc[r] += v[r * C + c] * u0;
            }
            for (int r = 0; r < ROWS; r++) ST(M + (r0 + r) * O + o, acc[r]);
        }
}

/* The forward pass of g (ci -> co) with transformed filters U: y = conv(x) (+ bias, ReLU). */
static nb_status WK(forward_pass)(const wgeom *g, const float *x, const float *U, const float *bias, bool relu,
                                  float *y)
{
    int64_t nblocks = (g->tiles + g->tb - 1) / g->tb;
    int nt = nb_cpu_threads_for(nblocks, 1);
    size_t per = (size_t)(NXI * (g->vs + g->ms)), bytes = (per * (size_t)nt + (size_t)g->ci) * sizeof(float);
    float *buf = nb_cpu_alloc(bytes);
    if (!buf) return nb__err(NB_ERR_OOM, "conv2d (Winograd): out of memory for %zu bytes of scratch", bytes);
    float *zeros = buf + per * (size_t)nt;
    memset(zeros, 0, (size_t)g->ci * sizeof(float));
#pragma omp parallel num_threads(nt)
    {
        int me = nb_cpu_thread_num();
        float *Vb = buf + per * (size_t)me, *M = Vb + NXI * g->vs;
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < nblocks; blk++) {
            int64_t t0 = blk * g->tb, n = g->tiles - t0 < g->tb ? g->tiles - t0 : g->tb;
            for (int64_t r = 0; r < n; r++) WK(input_tile)(g, x, zeros, t0 + r, Vb, r);
            wino_zero_rows(g, Vb, n, g->ci);
            for (int xi = 0; xi < NXI; xi++)
                WK(block_product)(Vb + xi * g->vs, U + xi * g->ci * g->co, M + xi * g->ms,
                                  (n + ROWS - 1) / ROWS * ROWS, g->ci, g->co);
            for (int64_t r = 0; r < n; r++) WK(output_tile)(g, M, r, t0 + r, bias, relu, y);
        }
    }
    nb_cpu_free(buf, bytes);
    return NB_OK;
}

/* dM[xi][row][o..] = (A dY A^T)[xi] for tile t of the output gradient gy [n, h, w, co] (values
 * outside the image are zero); adds the tile's gradient values to bsum (the bias gradient). */
WKF static void WK(grad_tile)(const wgeom *g, const float *gy, int64_t t, float *dM, int64_t row, float *bsum)
{
    int64_t per = g->th * g->tw, b = t / per, ty = t % per / g->tw, tx = t % g->tw;
    int64_t CO = g->co, stride = g->ms;
    int mt = g->m;
    int nr = g->h - mt * ty < mt ? (int)(g->h - mt * ty) : mt, nc = g->w - mt * tx < mt ? (int)(g->w - mt * tx) : mt;
    const float *in = gy + ((b * g->h + mt * ty) * g->w + mt * tx) * CO;
    for (int64_t o = 0; o < CO; o += VL) {
        V yv[4][4], sum = {0};
        for (int i = 0; i < mt; i++)
            for (int j = 0; j < mt; j++) {
                yv[i][j] = i < nr && j < nc ? LD(in + (i * g->w + j) * CO + o) : (V){0};
                sum += yv[i][j];
            }
        if (bsum) ST(bsum + o, LD(bsum + o) + sum);
        V s[6][4]; /* s[j][i]: A along x of row i */
        memset(s, 0, sizeof s); /* rows mt..3 unused; GCC cannot tell */
        for (int i = 0; i < mt; i++) {
            V r[6];
            WK(a6)(yv[i], r, mt);
            for (int j = 0; j < 6; j++) s[j][i] = r[j];
        }
        for (int j = 0; j < 6; j++) { /* then A along y, column by column */
            V m[6];
            WK(a6)(s[j], m, mt);
            for (int i = 0; i < 6; i++) ST(dM + (i * 6 + j) * stride + row * CO + o, m[i]);
        }
    }
}

/* dU[c][o] += sum_k V[k][c] dM[k][o] over rows [0, tb); C a multiple of CB. */
WKF static void WK(block_product_t)(const float *Vb, const float *dM, float *dU, int64_t tb, int64_t C, int64_t O)
{
    for (int64_t c0 = 0; c0 < C; c0 += CB) {
        int64_t o = 0;
        for (; o + 2 * VL <= O; o += 2 * VL) {
            V acc0[CB], acc1[CB];
            for (int r = 0; r < CB; r++) {
                acc0[r] = LD(dU + (c0 + r) * O + o);
                acc1[r] = LD(dU + (c0 + r) * O + o + VL);
            }
            for (int64_t k = 0; k < tb; k++) {
                V m0 = LD(dM + k * O + o), m1 = LD(dM + k * O + o + VL);
                const float *v = Vb + k * C + c0;
                for (int r = 0; r < CB; r++) {
                    acc0[r] += v[r] * m0;
                    acc1[r] += v[r] * m1;
                }
            }
            for (int r = 0; r < CB; r++) {
                ST(dU + (c0 + r) * O + o, acc0[r]);
                ST(dU + (c0 + r) * O + o + VL, acc1[r]);
            }
        }
        for (; o < O; o += VL) {
            V acc[CB];
            for (int r = 0; r < CB; r++) acc[r] = LD(dU + (c0 + r) * O + o);
            for (int64_t k = 0; k < tb; k++) {
                V m0 = LD(dM + k * O + o);
                const float *v = Vb + k * C + c0;
                for (int r = 0; r < CB; r++) acc[r] += v[r] * m0;
            }
            for (int r = 0; r < CB; r++) ST(dU + (c0 + r) * O + o, acc[r]);
        }
    }
}

/* gw = G^T dU G per filter from the [36][ci][co] double sums dU (pair = i * co + o), VL / 2
 * pairs to a vector, through gt[k][pair] (scratch, r * r * ci * co doubles) into OIHW. */
WKF static void WK(weight_grad_transform)(const double *dU, int64_t ci, int64_t co, int r, double *gt, float *gw)
{
    const float(*G)[5] = wino_g(r);
    int64_t pairs = ci * co;
    int rr = r * r;
    int nt = nb_cpu_threads_for(pairs * rr * NXI, NB_CPU_GRAIN);
#pragma omp parallel num_threads(nt)
    {
#pragma omp for schedule(static)
        for (int64_t p0 = 0; p0 < pairs; p0 += VL / 2) {
            VD t[5][6];
            for (int y = 0; y < r; y++)
                for (int b = 0; b < 6; b++) {
                    VD acc = {0};
                    for (int a = 0; a < 6; a++)
                        if (G[a][y] != 0) acc += (double)G[a][y] * LDD(dU + (a * 6 + b) * pairs + p0);
                    t[y][b] = acc;
                }
            for (int y = 0; y < r; y++)
                for (int x = 0; x < r; x++) {
                    VD acc = {0};
                    for (int b = 0; b < 6; b++)
                        if (G[b][x] != 0) acc += (double)G[b][x] * t[y][b];
                    STD(gt + (y * r + x) * pairs + p0, acc);
                }
        }
#pragma omp for schedule(static)
        for (int64_t f = 0; f < pairs; f++) { /* f = gw's pair, o * ci + i */
            int64_t o = f / ci, i = f % ci;
            for (int k = 0; k < rr; k++) gw[f * rr + k] = (float)gt[k * pairs + i * co + o];
        }
    }
}

/* tot += part; part = 0 (n a multiple of VL / 2). */
WKF static void WK(flush)(double *restrict tot, float *restrict part, size_t n)
{
    for (size_t e = 0; e < n; e += VL / 2) {
        WK(vh) p = *(const WK(vh) *)(part + e);
        STD(tot + e, LDD(tot + e) + __builtin_convertvector(p, VD));
        *(WK(vh) *)(part + e) = (WK(vh)){0};
    }
}

static nb_status WK(weights_pass)(const wgeom *g, const float *gy, const float *x, float *gw, float *gb)
{
    int64_t nblocks = (g->tiles + g->tb - 1) / g->tb;
    int nt = nb_cpu_threads_for(nblocks, 1);
    size_t nu = (size_t)(NXI * g->ci * g->co), acc = nu + (size_t)g->co; /* dU, then the bias sum */
    size_t per = (size_t)(NXI * (g->vs + g->ms)) + acc;
    size_t bytes = (per * (size_t)nt + (size_t)g->ci) * sizeof(float);
    size_t dbytes = (acc * (size_t)nt + (size_t)(g->r * g->r) * nu / NXI) * sizeof(double); /* and gt */
    float *buf = nb_cpu_alloc(bytes);
    double *tot = buf ? nb_cpu_alloc(dbytes) : NULL;
    if (!tot) {
        if (buf) nb_cpu_free(buf, bytes);
        return nb__err(NB_ERR_OOM, "conv2d_backward_weight (Winograd): out of memory for %zu bytes of scratch",
                       bytes + dbytes);
    }
    float *zeros = buf + per * (size_t)nt;
    memset(zeros, 0, (size_t)g->ci * sizeof(float));
#pragma omp parallel num_threads(nt)
    {
        int me = nb_cpu_thread_num();
        float *dU = buf + per * (size_t)me, *bs = dU + nu;
        float *Vb = dU + acc, *dM = Vb + NXI * g->vs;
        double *my = tot + acc * (size_t)me;
        memset(my, 0, acc * sizeof(double));
        memset(dU, 0, acc * sizeof(float));
        int pending = 0;
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < nblocks; blk++) {
            int64_t t0 = blk * g->tb, n = g->tiles - t0 < g->tb ? g->tiles - t0 : g->tb;
            for (int64_t r = 0; r < n; r++) {
                WK(input_tile)(g, x, zeros, t0 + r, Vb, r);
                WK(grad_tile)(g, gy, t0 + r, dM, r, bs);
            }
            for (int xi = 0; xi < NXI; xi++)
                WK(block_product_t)(Vb + xi * g->vs, dM + xi * g->ms, dU + xi * g->ci * g->co, n, g->ci, g->co);
            if (++pending == WINO_FLUSH) {
                WK(flush)(my, dU, acc);
                pending = 0;
            }
        }
        if (pending) WK(flush)(my, dU, acc);
    }
    for (int k = 1; k < nt; k++) {
        const double *src = tot + acc * (size_t)k;
        for (size_t e = 0; e < acc; e++) tot[e] += src[e];
    }
    WK(weight_grad_transform)(tot, g->ci, g->co, g->r, tot + acc * (size_t)nt, gw);
    if (gb)
        for (int64_t o = 0; o < g->co; o++) gb[o] = (float)tot[nu + (size_t)o];
    nb_cpu_free(tot, dbytes);
    nb_cpu_free(buf, bytes);
    return NB_OK;
}

/* The forward of cg (flipped: its input gradient, gy -> gx) on in, through filters transformed
 * once per call. */
static nb_status WK(conv_forward)(const nb_conv_geom *cg, bool flipped, const float *w, const float *in,
                                  const float *bias, bool relu, float *out)
{
    int64_t ci = flipped ? cg->oc : cg->c, co = flipped ? cg->c : cg->oc;
    int r = (int)cg->kh;
    size_t bytes = (size_t)((NXI + r * r) * ci * co) * sizeof(float);
    float *U = nb_cpu_alloc(bytes);
    if (!U) return nb__err(NB_ERR_OOM, "conv2d (Winograd): out of memory for %zu bytes of filters", bytes);
    WK(weight_transform)(w, cg->c, cg->oc, r, flipped, U + NXI * ci * co, U);
    wgeom g = wgeom_of(cg, ci, co, TB_UNIT, BLOCK_BYTES);
    nb_status st = WK(forward_pass)(&g, in, U, bias, relu, out);
    nb_cpu_free(U, bytes);
    return st;
}

static nb_status WK(conv_weights)(const nb_conv_geom *cg, const float *gy, const float *x, float *gw, float *gb)
{
    wgeom g = wgeom_of(cg, cg->c, cg->oc, MIN_TB_WEIGHTS, BLOCK_BYTES);
    return WK(weights_pass)(&g, gy, x, gw, gb);
}

#undef V
#undef VD
#undef WKF
#undef LD
#undef ST
#undef LDD
#undef STD

/* the instance's parameters, for the next one */
#undef WK
#undef WK_TARGET
#undef VL
#undef ROWS
#undef CB
#undef BLOCK_BYTES
