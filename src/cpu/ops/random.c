/* Kernels: random numbers (RAND, RANDN, RANDINT, BERNOULLI) from Philox 4x32-10.
 *   out: any shape, filled in row-major element order (strides honoured)
 *   seed, offset: Philox key and first counter (core/philox_impl.h has the layout)
 *   RAND      out float: uniform on [0, 1): top 24 bits of a word (float32) or 53 of two (float64)
 *   RANDN     out float: Box-Muller on two uniforms u1 in (0, 1] and u2 in [0, 1):
 *             sqrt(-2 ln u1) * (cos, sin)(2 pi u2); u1 is 1 - u, so ln never sees 0
 *   RANDINT   out any dtype: low + floor(x * (high - low) / 2^64) for a 64-bit uniform x
 *             (i0 = low, i1 = high). This multiply-shift (Lemire 2019, without the rejection
 *             step) gives each value floor or ceil of 2^64 / range draws: a relative bias of at
 *             most range / 2^64, under 2^-32 for any range below 2^32, far below what any test
 *             could see, and with no data-dependent loop, so a GPU thread stays in step.
 *   BERNOULLI in[0] = probs (float, out's shape): out = (uniform < probs) as probs' dtype; fails
 *             when a probability is outside [0, 1] or NaN.
 * Element i uses counter offset + i / per, word (i % per) * (4 / per): the values depend only
 * on the element index, so they are identical for any thread count, and across devices.
 * The counters are made in batches laid out lane by lane (structure of arrays) so that the
 * compiler vectorises Philox's 32x32->64-bit multiplies across counters.
 */
#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/philox_impl.h"
#include "cpu/cpu_impl.h"

#define BATCH 16 /* counters per batch */

/* r[w][l] = word w of counter c0 + l, for l < BATCH. */
__attribute__((target_clones("avx512f", "avx2", "default"))) static void philox_batch(uint64_t seed, uint64_t c0, uint32_t r[4][BATCH])
{
    const uint32_t key0 = (uint32_t)seed, key1 = (uint32_t)(seed >> 32);
#pragma omp simd
    for (int l = 0; l < BATCH; l++) {
        uint64_t c = c0 + (uint64_t)l;
        uint32_t x0 = (uint32_t)c, x1 = (uint32_t)(c >> 32), x2 = 0, x3 = 0;
        uint32_t k0 = key0, k1 = key1;
        for (int round = 0; round < 10; round++) {
            uint64_t p0 = (uint64_t)NB_PHILOX_M0 * x0;
            uint64_t p1 = (uint64_t)NB_PHILOX_M1 * x2;
            uint32_t n0 = (uint32_t)(p1 >> 32) ^ x1 ^ k0;
            uint32_t n2 = (uint32_t)(p0 >> 32) ^ x3 ^ k1;
            x1 = (uint32_t)p1;
            x3 = (uint32_t)p0;
            x0 = n0;
            x2 = n2;
            k0 += NB_PHILOX_W0;
            k1 += NB_PHILOX_W1;
        }
        r[0][l] = x0, r[1][l] = x1, r[2][l] = x2, r[3][l] = x3;
    }
}

typedef struct rctx {
    nb_op op;
    uint64_t seed, offset;
    int per;         /* elements per counter */
    int64_t n;       /* elements */
    int64_t low;     /* randint */
    uint64_t range;  /* randint: high - low, modulo 2^64 */
} rctx;

/* The values of one batch, element (l * per + j) of the batch = element j of counter l. */
static void batch_f32(const rctx *x, uint32_t r[4][BATCH], float *v)
{
    if (x->op == NB_OP_RANDN) {
        for (int l = 0; l < BATCH; l++) {
            for (int h = 0; h < 2; h++) {
                float u1 = 1.0f - nb__u32_to_unit_float(r[2 * h][l]);
                float u2 = nb__u32_to_unit_float(r[2 * h + 1][l]);
                float rad = sqrtf(-2.0f * logf(u1)), c, s;
                sincosf(6.2831853071795864769f * u2, &s, &c);
                v[l * 4 + 2 * h] = rad * c;
                v[l * 4 + 2 * h + 1] = rad * s;
            }
        }
        return;
    }
    for (int l = 0; l < BATCH; l++)
        for (int j = 0; j < 4; j++) v[l * 4 + j] = nb__u32_to_unit_float(r[j][l]);
}

static void batch_f64(const rctx *x, uint32_t r[4][BATCH], double *v)
{
    if (x->op == NB_OP_RANDN) {
        for (int l = 0; l < BATCH; l++) {
            double u1 = 1.0 - nb__u64_to_unit_double(r[0][l], r[1][l]);
            double u2 = nb__u64_to_unit_double(r[2][l], r[3][l]);
            double rad = sqrt(-2.0 * log(u1)), c, s;
            sincos(6.2831853071795864769 * u2, &s, &c);
            v[l * 2] = rad * c;
            v[l * 2 + 1] = rad * s;
        }
        return;
    }
    for (int l = 0; l < BATCH; l++)
        for (int j = 0; j < 2; j++) v[l * 2 + j] = nb__u64_to_unit_double(r[2 * j][l], r[2 * j + 1][l]);
}

static void batch_int(const rctx *x, uint32_t r[4][BATCH], int64_t *v)
{
    for (int l = 0; l < BATCH; l++) {
        for (int j = 0; j < 2; j++) {
            uint64_t u = ((uint64_t)r[2 * j][l] << 32) | r[2 * j + 1][l];
            uint64_t k = (uint64_t)(((unsigned __int128)u * x->range) >> 64);
            v[l * 2 + j] = (int64_t)((uint64_t)x->low + k);
        }
    }
}

/* Walks a tensor's elements in row-major order from a given element. */
typedef struct walker {
    char *p;
    int ndim;
    bool contig;
    int64_t es;
    int64_t idx[NB_MAX_DIMS], shape[NB_MAX_DIMS], bstride[NB_MAX_DIMS];
} walker;

static void walker_init(walker *w, const nb_tensor *t, int64_t start)
{
    w->es = (int64_t)nb_dtype_size(t->dtype);
    w->ndim = t->ndim;
    w->contig = nb__is_contiguous(t);
    w->p = nb__data(t);
    if (w->contig) {
        w->p += start * w->es;
        return;
    }
    for (int d = t->ndim - 1; d >= 0; d--) {
        w->shape[d] = t->shape[d];
        w->bstride[d] = t->strides[d] * w->es;
        w->idx[d] = t->shape[d] ? start % t->shape[d] : 0;
        start = t->shape[d] ? start / t->shape[d] : 0;
        w->p += w->idx[d] * w->bstride[d];
    }
}

static inline void walker_next(walker *w)
{
    if (w->contig) {
        w->p += w->es;
        return;
    }
    for (int d = w->ndim - 1; d >= 0; d--) {
        w->p += w->bstride[d];
        if (++w->idx[d] < w->shape[d]) return;
        w->p -= w->idx[d] * w->bstride[d];
        w->idx[d] = 0;
    }
}

/* Stores batch values v[0..cnt) (of type TV) as elements of out (type T) through walker w. */
#define STORE(T, TV)                                                                             \
    static void store_##T##_##TV(walker *w, const TV *v, int64_t cnt)                           \
    {                                                                                            \
        if (w->contig) {                                                                         \
            T *o = (T *)w->p;                                                                    \
            for (int64_t k = 0; k < cnt; k++) o[k] = (T)v[k];                                    \
            w->p += cnt * (int64_t)sizeof(T);                                                    \
            return;                                                                              \
        }                                                                                        \
        for (int64_t k = 0; k < cnt; k++, walker_next(w)) *(T *)w->p = (T)v[k];                  \
    }
typedef float f32;
typedef double f64;
typedef int64_t i64;
typedef int32_t i32;
typedef uint8_t u8;
typedef bool b8;
STORE(f32, f32)
STORE(f64, f64)
STORE(f32, i64)
STORE(f64, i64)
STORE(i64, i64)
STORE(i32, i64)
STORE(u8, i64)
STORE(b8, i64)

/* BERNOULLI: out = v < probs, through walkers on out and probs; returns the first bad element
 * index (a probability outside [0, 1]) or -1. */
#define BERN(T)                                                                                  \
    static int64_t bern_##T(walker *wo, walker *wp, const T *v, int64_t cnt, int64_t first)      \
    {                                                                                            \
        int64_t bad = -1;                                                                        \
        for (int64_t k = 0; k < cnt; k++, walker_next(wo), walker_next(wp)) {                    \
            T p = *(const T *)wp->p;                                                             \
            if (!(p >= 0 && p <= 1) && bad < 0) bad = first + k;                                 \
            *(T *)wo->p = v[k] < p ? (T)1 : (T)0;                                                \
        }                                                                                        \
        return bad;                                                                              \
    }
BERN(f32)
BERN(f64)

/* Fills elements [c0 * per, c1 * per) of out (clipped to n); returns a bad bernoulli index or -1. */
static int64_t fill_range(const rctx *x, const nb_kargs *a, int64_t c0, int64_t c1)
{
    nb_dtype dt = a->out->dtype;
    walker wo, wp;
    walker_init(&wo, a->out, c0 * x->per);
    if (x->op == NB_OP_BERNOULLI) walker_init(&wp, a->in[0], c0 * x->per);
    uint32_t r[4][BATCH];
    union { float f[4 * BATCH]; double d[4 * BATCH]; int64_t i[4 * BATCH]; } v;
    int64_t bad = -1;
    for (int64_t c = c0; c < c1; c += BATCH) {
        philox_batch(x->seed, x->offset + (uint64_t)c, r);
        int64_t e0 = c * x->per, e1 = (c + BATCH < c1 ? c + BATCH : c1) * x->per;
        int64_t cnt = (e1 < x->n ? e1 : x->n) - e0;
        int64_t b = -1;
        if (x->op == NB_OP_RANDINT) {
            batch_int(x, r, v.i);
            switch (dt) {
            case NB_FLOAT32: store_f32_i64(&wo, v.i, cnt); break;
            case NB_FLOAT64: store_f64_i64(&wo, v.i, cnt); break;
            case NB_INT64: store_i64_i64(&wo, v.i, cnt); break;
            case NB_INT32: store_i32_i64(&wo, v.i, cnt); break;
            case NB_UINT8: store_u8_i64(&wo, v.i, cnt); break;
            default: store_b8_i64(&wo, v.i, cnt); break;
            }
        } else if (dt == NB_FLOAT32) {
            batch_f32(x, r, v.f);
            if (x->op == NB_OP_BERNOULLI) b = bern_f32(&wo, &wp, v.f, cnt, e0);
            else store_f32_f32(&wo, v.f, cnt);
        } else {
            batch_f64(x, r, v.d);
            if (x->op == NB_OP_BERNOULLI) b = bern_f64(&wo, &wp, v.d, cnt, e0);
            else store_f64_f64(&wo, v.d, cnt);
        }
        if (b >= 0 && bad < 0) bad = b;
    }
    return bad;
}

static nb_status check_dtype(nb_op op, nb_dtype dt)
{
    bool ok = op == NB_OP_RANDINT ? dt <= NB_BOOL : (dt == NB_FLOAT32 || dt == NB_FLOAT64);
    if (!ok)
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported on the CPU", nb__op_name(op), nb_dtype_name(dt));
    return NB_OK;
}

nb_status nb_cpu_k_random(nb_op op, const nb_kargs *a)
{
    NB_TRY(check_dtype(op, a->out->dtype));
    if (op == NB_OP_BERNOULLI && a->in[0]->dtype != a->out->dtype)
        return nb__err(NB_ERR_DTYPE, "bernoulli: probs %s and out %s differ", nb_dtype_name(a->in[0]->dtype),
                       nb_dtype_name(a->out->dtype));
    rctx x = {.op = op, .seed = a->seed, .offset = a->offset, .n = nb__numel(a->out->shape, a->out->ndim),
              .low = a->i0, .range = (uint64_t)a->i1 - (uint64_t)a->i0};
    x.per = nb__philox_per_counter(op == NB_OP_RANDINT || a->out->dtype == NB_FLOAT64);
    if (x.n == 0) return NB_OK;
    int64_t counters = (x.n + x.per - 1) / x.per;
    int nt = nb_cpu_threads_for(x.n, NB_CPU_GRAIN);
    int64_t bad = -1;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int t = 0, T = 1;
#ifdef _OPENMP
        t = omp_get_thread_num();
        T = omp_get_num_threads();
#endif
        /* whole batches per thread (values depend only on the element index in any case) */
        int64_t nb = (counters + BATCH - 1) / BATCH;
        int64_t c0 = nb * t / T * BATCH, c1 = nb * (t + 1) / T * BATCH;
        if (c1 > counters) c1 = counters;
        int64_t b = c0 < c1 ? fill_range(&x, a, c0, c1) : -1;
        if (b >= 0) {
#pragma omp critical(nb_random_bad)
            if (bad < 0 || b < bad) bad = b;
        }
    }
    if (bad >= 0) {
        double p = 0;
        walker w;
        walker_init(&w, a->in[0], bad);
        p = a->in[0]->dtype == NB_FLOAT32 ? *(const float *)w.p : *(const double *)w.p;
        return nb__err(NB_ERR_INVALID_ARG, "bernoulli: probs must be in [0, 1], got %g at element %lld", p,
                       (long long)bad);
    }
    return NB_OK;
}
