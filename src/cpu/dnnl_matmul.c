/* float32 products on oneDNN's matmul primitive (src/cpu/ops/gemm.c's fourth way). On CPUs with
 * AVX-512 oneDNN runs it on its brgemm kernels, which on products of few rows and a long inner
 * dimension (a linear layer on a small batch) reach more of the sgemm peak than any sgemm call:
 * measured on an Intel Xeon (AVX-512, 2 threads, oneDNN 2.6, best of 5, ms): NT 64x2048x26752
 * 24.7 against dnnl_sgemm's 29.8 and OpenBLAS's 31.6, NN 64x2048x26752 33.4 against 44.0 / 42.1.
 * A linear layer's bias goes into the primitive, which adds it as it writes C; any other way
 * first copies the bias into every row of C and then runs with beta 1, two more passes over C. On
 * the LSTM's decoder (NT 4096x10000x256, the Xeon, best of 7, ms, 1 thread / 2 threads) that is
 * 113.5 / 62.0 against 143.8 / 73.8, and the product alone takes 113.0 / 61.4.
 * A primitive is made for one shape (layouts, alpha, beta, bias and thread count included), which
 * takes about a millisecond, so the primitives live in a small cache like the convolutions'
 * (src/cpu/dnnl.c): a training loop makes each once. Each entry holds its memory objects, given
 * the caller's pointers at each call. Calls are serialised by one mutex (the entries' memory
 * objects and the stream are shared); oneDNN spreads each call over the OpenMP threads. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "cpu/dnnl_impl.h"

#define MM_CACHE_SIZE 32

typedef struct mm_key {
    char ta, tb;
    int m, n, k, lda, ldb, ldc;
    float alpha, beta;
    bool bias;
    int threads; /* oneDNN splits a primitive's work for the thread count it is made under */
} mm_key;

typedef struct mm_entry {
    bool used;
    dnnl_status_t status; /* dnnl_unimplemented: oneDNN has only its reference loops for it */
    mm_key key;
    dnnl_primitive_t p;
    dnnl_memory_t mem[4]; /* A, B, C and the bias, with no data until a call gives it */
} mm_entry;

static struct {
    pthread_once_t once;
    dnnl_status_t init_status;
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    pthread_mutex_t lock;
    mm_entry cache[MM_CACHE_SIZE];
    int next_evict;
} mm = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER};

static atomic_ullong runs;
static atomic_bool refuse; /* tests: every call fails as a shape without a primitive does */

unsigned long long nb__dnnl_matmul_runs(void) { return atomic_load(&runs); }

void nb__dnnl_matmul_set_refuse(bool on) { atomic_store(&refuse, on); }

static void init_once(void)
{
    mm.init_status = dnnl_engine_create(&mm.engine, dnnl_cpu, 0);
    if (mm.init_status == dnnl_success)
        mm.init_status = dnnl_stream_create(&mm.stream, mm.engine, dnnl_stream_default_flags);
}

bool nb__dnnl_matmul_available(void) { return nb__dnnl_winograd_available(); }

static void entry_clear(mm_entry *e)
{
    for (int i = 0; i < 4; i++)
        if (e->mem[i]) dnnl_memory_destroy(e->mem[i]);
    if (e->p) dnnl_primitive_destroy(e->p);
    memset(e, 0, sizeof *e);
}

/* The descriptor of op(X), rows x cols, X row-major with leading dimension ld: element (r, c) of
 * op(X) at r * ld + c, or at c * ld + r when t is 'T'. */
static dnnl_status_t md_of(dnnl_memory_desc_t *md, char t, int rows, int cols, int ld)
{
    dnnl_dims_t d = {rows, cols}, s = {t == 'T' ? 1 : ld, t == 'T' ? ld : 1};
    return dnnl_memory_desc_init_by_strides(md, 2, d, dnnl_f32, s);
}

/* The attributes for alpha (an output scale) and beta (a sum post-op, which reads C): NULL
 * attributes when alpha is 1 and beta 0. */
static dnnl_status_t attr_of(dnnl_primitive_attr_t *attr, float alpha, float beta)
{
    *attr = NULL;
    if (alpha == 1.0f && beta == 0.0f) return dnnl_success;
    dnnl_status_t s = dnnl_primitive_attr_create(attr);
    if (s == dnnl_success && alpha != 1.0f) s = dnnl_primitive_attr_set_output_scales(*attr, 1, 0, &alpha);
    if (s == dnnl_success && beta != 0.0f) {
        dnnl_post_ops_t po = NULL;
        s = dnnl_post_ops_create(&po);
        if (s == dnnl_success) s = dnnl_post_ops_append_sum(po, beta);
        if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(*attr, po);
        if (po) dnnl_post_ops_destroy(po);
    }
    return s;
}

static dnnl_status_t entry_init(mm_entry *e, const mm_key *k)
{
    dnnl_memory_desc_t md[4];
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t s = md_of(&md[0], k->ta, k->m, k->k, k->lda);
    if (s == dnnl_success) s = md_of(&md[1], k->tb, k->k, k->n, k->ldb);
    if (s == dnnl_success) s = md_of(&md[2], 'N', k->m, k->n, k->ldc);
    if (s == dnnl_success && k->bias) s = md_of(&md[3], 'N', 1, k->n, k->n);
    if (s == dnnl_success) s = dnnl_matmul_desc_init(&desc, &md[0], &md[1], k->bias ? &md[3] : NULL, &md[2]);
    if (s == dnnl_success) s = attr_of(&attr, k->alpha, k->beta);
    if (s == dnnl_success) s = dnnl_primitive_desc_create(&pd, &desc, attr, mm.engine, NULL);
    const char *impl = NULL;
    if (s == dnnl_success && dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
        impl && strncmp(impl, "ref", 3) == 0)
        s = dnnl_unimplemented; /* far slower than either sgemm: the caller takes another way */
    if (s == dnnl_success) s = dnnl_primitive_create(&e->p, pd);
    for (int i = 0; i < (k->bias ? 4 : 3) && s == dnnl_success; i++)
        s = dnnl_memory_create(&e->mem[i], &md[i], mm.engine, DNNL_MEMORY_NONE);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return s;
}

/* The cached entry for k, made on a miss (evicting round-robin). A failed making is cached too
 * (its status kept, no primitive), so that a shape oneDNN refuses costs one attempt. Call under
 * mm.lock. */
static mm_entry *lookup(const mm_key *k)
{
    for (int i = 0; i < MM_CACHE_SIZE; i++)
        if (mm.cache[i].used && memcmp(&mm.cache[i].key, k, sizeof *k) == 0) return &mm.cache[i];
    mm_entry *e = &mm.cache[mm.next_evict];
    mm.next_evict = (mm.next_evict + 1) % MM_CACHE_SIZE;
    entry_clear(e);
    dnnl_status_t s = entry_init(e, k);
    if (s != dnnl_success) entry_clear(e);
    e->used = true;
    e->status = s;
    e->key = *k;
    return e;
}

int nb__dnnl_matmul(char ta, char tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                    int ldb, float beta, float *c, int ldc, const float *bias)
{
    if (atomic_load(&refuse)) return dnnl_unimplemented;
    if (bias && (alpha != 1.0f || beta != 0.0f)) return dnnl_invalid_arguments;
    pthread_once(&mm.once, init_once);
    if (mm.init_status != dnnl_success) return mm.init_status;
    mm_key key;
    memset(&key, 0, sizeof key); /* the padding too: keys are compared bytewise */
    key.ta = ta == 'T' ? 'T' : 'N';
    key.tb = tb == 'T' ? 'T' : 'N';
    key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldc = ldc;
    key.alpha = alpha, key.beta = beta;
    key.bias = bias != NULL;
    key.threads = nb_get_num_threads();
    pthread_mutex_lock(&mm.lock);
    mm_entry *e = lookup(&key);
    dnnl_status_t s = e->status;
    if (s == dnnl_success) {
        void *ptr[4] = {(void *)a, (void *)b, c, (void *)bias};
        int nargs = bias ? 4 : 3;
        for (int i = 0; i < nargs && s == dnnl_success; i++) s = dnnl_memory_set_data_handle(e->mem[i], ptr[i]);
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, e->mem[0]},
                                   {DNNL_ARG_WEIGHTS, e->mem[1]},
                                   {DNNL_ARG_DST, e->mem[2]},
                                   {DNNL_ARG_BIAS, e->mem[3]}};
        if (s == dnnl_success) s = dnnl_primitive_execute(e->p, mm.stream, nargs, args);
        if (s == dnnl_success) s = dnnl_stream_wait(mm.stream);
        if (s == dnnl_success) atomic_fetch_add(&runs, 1);
    }
    pthread_mutex_unlock(&mm.lock);
    return s;
}
