/* Template: the few-channel weight gradient's inner kernels (src/cpu/ops/stem.c) for one
 * instruction set. stem.c includes this file once per instance, having defined
 *   SK(name)   the instance's name for name (name##_avx2, ...),
 *   SK_TARGET  the target attribute its functions are compiled for,
 *   VL         floats per vector (8 or 16).
 * The vectors are GCC's generic vectors; a * b + c is contracted to FMA. The block shape (vb
 * vectors of output channels by up to tmax taps, all in registers) comes from the sgeom that
 * stem.c made for this instance's vector width and register count. The file undefines its
 * parameters at its end. */

typedef float SK(vf) __attribute__((vector_size(VL * 4), aligned(4), may_alias));
typedef float SK(vh) __attribute__((vector_size(VL * 2), aligned(4), may_alias)); /* VL / 2 floats */
typedef double SK(vd) __attribute__((vector_size(VL * 4), aligned(8), may_alias)); /* VL / 2 doubles */

#define V SK(vf)
#define SKF __attribute__((target(SK_TARGET)))

/* d[0 .. VL) += the VL floats of a, in double. */
SKF static inline __attribute__((always_inline)) void SK(add_double)(double *d, V a)
{
    const SK(vh) *h = (const SK(vh) *)&a;
    *(SK(vd) *)d += __builtin_convertvector(h[0], SK(vd));
    *(SK(vd) *)(d + VL / 2) += __builtin_convertvector(h[1], SK(vd));
}

/* tot[t * oc + v] += sum over noy rows and ow pixels of in[oy * lrow + ox * step + t] *
 * gy[oy * grow + ox * oc + v], for T taps and VB vectors of channels. */
SKF static inline __attribute__((always_inline)) void SK(wg_body)(const float *in, int64_t lrow, const float *gy,
                                                                   int64_t grow, int64_t noy, int64_t ow,
                                                                   int64_t step, int64_t oc, double *tot,
                                                                   const int T, const int VB)
{
    V acc[MAX_T][4];
    for (int t = 0; t < T; t++)
        for (int v = 0; v < VB; v++) acc[t][v] = (V){0};
    for (int64_t oy = 0; oy < noy; oy++) {
        const float *r = in + oy * lrow, *gr = gy + oy * grow;
        for (int64_t ox = 0; ox < ow; ox++) {
            V gv[4];
            for (int v = 0; v < VB; v++) gv[v] = *(const V *)(gr + ox * oc + v * VL);
            const float *xr = r + ox * step;
            for (int t = 0; t < T; t++) {
                V xb = xr[t] - (V){0}; /* a broadcast: x - 0 is x, so no add is emitted */
                for (int v = 0; v < VB; v++) acc[t][v] = xb * gv[v] + acc[t][v];
            }
        }
    }
    for (int t = 0; t < T; t++)
        for (int v = 0; v < VB; v++) SK(add_double)(tot + t * oc + v * VL, acc[t][v]);
}

SKF static void SK(wg_v4)(int T, WG_ARGS)
{
    switch (T) { WG_CASES_6(4); }
}
SKF static void SK(wg_v2)(int T, WG_ARGS)
{
    switch (T) { WG_CASES_12(2); }
}
SKF static void SK(wg_v1)(int T, WG_ARGS)
{
    switch (T) { WG_CASES_12(1); }
}

/* Adds the band [oy0, oy1) of image b to the thread's totals tot [kh][kw][c][oc] (+ [oc], the
 * bias gradient, when bias). */
SKF static void SK(weights_band)(const sgeom *s, const float *buf, const float *gy, int64_t b, int64_t oy0,
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
                    SK(wg_v4)(T, in + t0, g->sh * s->ld, gr + o, grow, hi - lo, g->ow, step, oc, d);
                else if (s->vb == 2)
                    SK(wg_v2)(T, in + t0, g->sh * s->ld, gr + o, grow, hi - lo, g->ow, step, oc, d);
                else
                    SK(wg_v1)(T, in + t0, g->sh * s->ld, gr + o, grow, hi - lo, g->ow, step, oc, d);
            }
            t0 += T;
        }
    }
    if (!bias) return;
    double *tb = tot + g->kh * s->kwc * oc;
    for (int64_t o = 0; o < oc; o += VL) {
        V sum = {0};
        for (int64_t p = 0; p < (oy1 - oy0) * g->ow; p++)
            sum += *(const V *)(gy + (b * g->oh + oy0) * grow + p * oc + o);
        SK(add_double)(tb + o, sum);
    }
}

#undef V
#undef SKF
#undef SK
#undef SK_TARGET
#undef VL
