/* Strided, broadcasting iteration over several operands, split across OpenMP threads. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu/cpu_impl.h"

/* The last-level cache one core sees, from sysfs (sysconf's answer can be the whole host's in a
 * virtual machine: 320 MiB where the guest has 32); 32 MiB when unknown. */
static int64_t llc_bytes(void)
{
    long long kib = 0;
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    if (f) {
        if (fscanf(f, "%lld", &kib) != 1) kib = 0;
        fclose(f);
    }
    return kib > 0 ? (int64_t)kib << 10 : (int64_t)32 << 20;
}

int64_t nb_cpu_stream_threshold(void)
{
    static atomic_llong cached = 0;
    long long t = atomic_load_explicit(&cached, memory_order_relaxed);
    if (!t) {
        t = llc_bytes() / 2;
        atomic_store_explicit(&cached, t, memory_order_relaxed);
    }
    return t;
}

bool nb_cpu_streams_output(int64_t out_bytes) { return out_bytes >= 2 * nb_cpu_stream_threshold(); }

static bool g_avx512, g_avx2_fma;
static pthread_once_t g_isa_once = PTHREAD_ONCE_INIT;

static void isa_init(void)
{
    const char *cap = getenv("NABLA_MAX_CPU_ISA");
    bool capped = cap && strcasecmp(cap, "avx2") == 0;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    g_avx512 = !capped && __builtin_cpu_supports("avx512f");
    g_avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    (void)capped;
    g_avx512 = g_avx2_fma = false;
#endif
}

bool nb_cpu_avx2_fma(void)
{
    pthread_once(&g_isa_once, isa_init);
    return g_avx2_fma;
}

bool nb_cpu_avx512(void)
{
    pthread_once(&g_isa_once, isa_init);
    return g_avx512;
}

int nb_cpu_threads_for(int64_t work, int64_t grain)
{
    if (grain <= 0) grain = NB_CPU_GRAIN;
    int nt = nb_get_num_threads();
    int64_t useful = work / grain;
    if (useful < 1) useful = 1;
    return useful < nt ? (int)useful : nt;
}

int nb_cpu_thread_num(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

void nb_cpu_thread_pos(int *t, int *n)
{
#ifdef _OPENMP
    *t = omp_get_thread_num(), *n = omp_get_num_threads();
#else
    *t = 0, *n = 1;
#endif
}

void nb_cpu_thread_share(int64_t count, int64_t *lo, int64_t *hi)
{
    int t, n;
    nb_cpu_thread_pos(&t, &n);
    *lo = count * t / n;
    *hi = count * (t + 1) / n;
}

nb_status nb_cpu_colsums_init(nb_cpu_colsums *s, int nt, int64_t n, bool f32, const char *op)
{
    s->nt = nt, s->n = n;
    s->bytes = (size_t)nt * (size_t)n * (sizeof(double) + (f32 ? sizeof(float) : 0));
    s->d = nb_cpu_alloc(s->bytes);
    if (!s->d)
        return nb__err(NB_ERR_OOM, "%s: out of host memory for %d threads' sums of %lld columns (%zu bytes)", op, nt,
                       (long long)n, s->bytes);
    memset(s->d, 0, s->bytes);
    s->f = f32 ? (float *)(s->d + (size_t)nt * (size_t)n) : NULL;
    return NB_OK;
}

void nb_cpu_colsums_finish(nb_cpu_colsums *s, void *out, bool f32)
{
    for (int64_t j = 0; j < s->n; j++) {
        double v = 0;
        for (int k = 0; k < s->nt; k++) v += s->d[(size_t)k * (size_t)s->n + (size_t)j];
        if (f32) ((float *)out)[j] = (float)v;
        else ((double *)out)[j] = v;
    }
    nb_cpu_free(s->d, s->bytes);
    s->d = NULL, s->f = NULL;
}

void nb_cpu_iter_init(nb_cpu_iter *it, const int64_t *shape, int ndim, int nops, char *const *base,
                      const int64_t (*strides)[NB_MAX_DIMS])
{
    NB_ASSERT(nops <= NB_ITER_MAX_OPS && ndim <= NB_MAX_DIMS);
    memset(it, 0, sizeof *it);
    it->nops = nops;
    for (int k = 0; k < nops; k++) it->base[k] = base[k];
    /* Drop size-1 dims, then merge a dim into the next inner one when every operand steps
     * through both as one: stride[outer] == stride[inner] * shape[inner]. */
    int n = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1) continue;
        it->shape[n] = shape[d];
        for (int k = 0; k < nops; k++) it->strides[k][n] = strides[k][d];
        n++;
    }
    int m = 0;
    for (int d = 0; d < n; d++) {
        if (m > 0) {
            bool merge = true;
            for (int k = 0; k < nops && merge; k++)
                merge = it->strides[k][m - 1] == it->strides[k][d] * it->shape[d];
            if (merge) {
                it->shape[m - 1] *= it->shape[d];
                for (int k = 0; k < nops; k++) it->strides[k][m - 1] = it->strides[k][d];
                continue;
            }
        }
        it->shape[m] = it->shape[d];
        for (int k = 0; k < nops; k++) it->strides[k][m] = it->strides[k][d];
        m++;
    }
    if (m == 0) {
        it->shape[0] = 1;
        for (int k = 0; k < nops; k++) it->strides[k][0] = 0;
        m = 1;
    }
    for (int d = 0; d < ndim; d++)
        if (shape[d] == 0) it->shape[0] = 0;
    it->ndim = m;
    it->numel = nb__numel(it->shape, m);
}

void nb_cpu_iter_elementwise(nb_cpu_iter *it, nb_tensor *out, const nb_tensor *const *in, int n_in)
{
    char *base[NB_ITER_MAX_OPS];
    int64_t strides[NB_ITER_MAX_OPS][NB_MAX_DIMS];
    base[0] = nb__data(out);
    int64_t es = (int64_t)nb_dtype_size(out->dtype);
    for (int d = 0; d < out->ndim; d++) strides[0][d] = out->strides[d] * es;
    for (int k = 0; k < n_in; k++) {
        base[k + 1] = nb__data(in[k]);
        nb__broadcast_strides(in[k], out->shape, out->ndim, strides[k + 1]);
        int64_t ek = (int64_t)nb_dtype_size(in[k]->dtype);
        for (int d = 0; d < out->ndim; d++) strides[k + 1][d] *= ek;
    }
    int64_t shape[NB_MAX_DIMS];
    memcpy(shape, out->shape, (size_t)out->ndim * sizeof *shape);
    if (!nb__is_contiguous(out)) {
        /* Visit the output in memory order (a channels-last result, say): dims sorted by the
         * output's strides, outermost first, so that they merge and the inner loop runs along
         * its densest dim. Stable, so a contiguous output's order is kept. */
        int perm[NB_MAX_DIMS];
        for (int d = 0; d < out->ndim; d++) {
            int j = d;
            while (j > 0 && out->strides[perm[j - 1]] < out->strides[d]) perm[j] = perm[j - 1], j--;
            perm[j] = d;
        }
        int64_t tmp[NB_MAX_DIMS];
        for (int k = 0; k <= n_in; k++) {
            for (int d = 0; d < out->ndim; d++) tmp[d] = strides[k][perm[d]];
            memcpy(strides[k], tmp, (size_t)out->ndim * sizeof *tmp);
        }
        for (int d = 0; d < out->ndim; d++) shape[d] = out->shape[perm[d]];
    }
    nb_cpu_iter_init(it, shape, out->ndim, n_in + 1, base, (const int64_t(*)[NB_MAX_DIMS])strides);
}

/* Runs rows [r0, r1) of the iterator (ndim >= 2), a row being one run of the innermost dim,
 * through a 2-D loop: one call per stretch of consecutive rows along dim ndim - 2. */
static void run_rows(const nb_cpu_iter *it, int64_t r0, int64_t r1, nb_cpu_loop2d_fn loop, void *ctx)
{
    int nd = it->ndim, nops = it->nops;
    int64_t inner = it->shape[nd - 1], h = it->shape[nd - 2];
    int64_t idx[NB_MAX_DIMS] = {0}, rem = r0;
    for (int d = nd - 2; d >= 0; d--) {
        idx[d] = rem % it->shape[d];
        rem /= it->shape[d];
    }
    char *ptrs[NB_ITER_MAX_OPS];
    int64_t st[NB_ITER_MAX_OPS], os[NB_ITER_MAX_OPS];
    for (int k = 0; k < nops; k++) st[k] = it->strides[k][nd - 1], os[k] = it->strides[k][nd - 2];
    for (int64_t r = r0; r < r1;) {
        int64_t rows = h - idx[nd - 2] < r1 - r ? h - idx[nd - 2] : r1 - r;
        for (int k = 0; k < nops; k++) {
            char *p = it->base[k];
            for (int d = 0; d < nd - 1; d++) p += idx[d] * it->strides[k][d];
            ptrs[k] = p;
        }
        loop(ptrs, st, inner, os, rows, ctx);
        r += rows;
        idx[nd - 2] += rows;
        for (int d = nd - 2; d > 0 && idx[d] == it->shape[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

/* Elements [e0, e1) of a 1-dim iterator through a 2-D loop: one row. */
static void run_flat(const nb_cpu_iter *it, int64_t e0, int64_t e1, nb_cpu_loop2d_fn loop, void *ctx)
{
    char *ptrs[NB_ITER_MAX_OPS];
    int64_t st[NB_ITER_MAX_OPS], os[NB_ITER_MAX_OPS] = {0};
    for (int k = 0; k < it->nops; k++) {
        st[k] = it->strides[k][0];
        ptrs[k] = it->base[k] + e0 * st[k];
    }
    loop(ptrs, st, e1 - e0, os, 1, ctx);
}

/* Runs the iterator through a 2-D loop: nb_cpu_iter_run2d's, or one that calls a 1-D loop per
 * run (run_each). */
static void iter_run(const nb_cpu_iter *it, nb_cpu_loop2d_fn loop, void *ctx, int64_t grain)
{
    if (it->numel == 0) return;
    int nt = nb_cpu_threads_for(it->numel, grain);
    int64_t inner = it->shape[it->ndim - 1];
    int64_t rows = it->numel / inner;
    if (nt <= 1) {
        if (it->ndim == 1) run_flat(it, 0, inner, loop, ctx);
        else run_rows(it, 0, rows, loop, ctx);
        return;
    }
    if (it->ndim == 1) {
#pragma omp parallel num_threads(nt)
        {
#ifdef _OPENMP
            int t = omp_get_thread_num(), n = omp_get_num_threads();
#else
            int t = 0, n = 1;
#endif
            /* chunks aligned to 16 elements keep vector loops on whole cache lines */
            int64_t chunk = ((inner + n - 1) / n + 15) & ~(int64_t)15;
            int64_t e0 = t * chunk, e1 = e0 + chunk < inner ? e0 + chunk : inner;
            if (e0 < e1) run_flat(it, e0, e1, loop, ctx);
        }
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int64_t r0, r1;
        nb_cpu_thread_share(rows, &r0, &r1);
        if (r0 < r1) run_rows(it, r0, r1, loop, ctx);
    }
}

/* A 1-D loop over each run of a stretch: ctx is a one_loop. */
typedef struct one_loop {
    nb_cpu_loop_fn fn;
    void *ctx;
    int nops;
} one_loop;

static void run_each(char **ptrs, const int64_t *strides, int64_t n, const int64_t *outer, int64_t rows, void *ctx)
{
    const one_loop *l = ctx;
    char *p[NB_ITER_MAX_OPS];
    for (int64_t r = 0; r < rows; r++) {
        for (int k = 0; k < l->nops; k++) p[k] = ptrs[k] + r * outer[k]; /* fresh: a loop may move them */
        l->fn(p, strides, n, l->ctx);
    }
}

void nb_cpu_iter_run(const nb_cpu_iter *it, nb_cpu_loop_fn loop, void *ctx, int64_t grain)
{
    one_loop l = {loop, ctx, it->nops};
    iter_run(it, run_each, &l, grain);
}

void nb_cpu_iter_run2d(const nb_cpu_iter *it, nb_cpu_loop2d_fn loop, void *ctx, int64_t grain)
{
    iter_run(it, loop, ctx, grain);
}
