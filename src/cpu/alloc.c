/* Host memory for tensors: a caching allocator. Buffers of 64 KiB and more are rounded up to a
 * size class (four per power of two) and kept on a free list when released, so a training loop
 * that frees and reallocates the same sizes every step does not pay page faults each time
 * (CPU_NOTES.md measured 1.5-4x on this machine). Small buffers go straight to malloc. Under
 * AddressSanitizer nothing is cached, so that use-after-free stays visible. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_impl.h"

#define NB_CACHE_MIN ((size_t)64 << 10)
#define NB_ALIGN 64
#define NB_CLASSES 256

#if defined(__SANITIZE_ADDRESS__)
#define NB_CACHE_ENABLED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NB_CACHE_ENABLED 0
#endif
#endif
#ifndef NB_CACHE_ENABLED
#define NB_CACHE_ENABLED 1
#endif

typedef struct free_list {
    void **items;
    size_t n, cap;
} free_list;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static free_list g_free[NB_CLASSES];
static nb_memory_stats g_stats;
static size_t g_cached;

/* The class of a large buffer and its rounded size: 2^k, 1.25 2^k, 1.5 2^k or 1.75 2^k. */
static int size_class(size_t n, size_t *rounded)
{
    int k = 63 - __builtin_clzll((unsigned long long)n);
    size_t base = (size_t)1 << k;
    for (int sub = 0; sub < 4; sub++) {
        size_t c = base + sub * (base >> 2);
        if (c >= n) {
            *rounded = c;
            return k * 4 + sub;
        }
    }
    *rounded = base << 1;
    return (k + 1) * 4;
}

static void *sys_alloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, NB_ALIGN, n ? n : NB_ALIGN) != 0) return NULL;
    return p;
}

static _Thread_local int64_t tl_fail_after = -1;

int64_t nb__cpu_alloc_fail_after(int64_t n)
{
    int64_t was = tl_fail_after;
    tl_fail_after = n < 0 ? -1 : n;
    return was;
}

void *nb_cpu_alloc(size_t nbytes)
{
    if (tl_fail_after >= 0 && tl_fail_after-- == 0)
        return nb__err_null(NB_ERR_OOM, "out of host memory allocating %zu bytes", nbytes);
    size_t rounded = nbytes;
    int cls = -1;
    if (NB_CACHE_ENABLED && nbytes >= NB_CACHE_MIN) cls = size_class(nbytes, &rounded);
    void *p = NULL;
    pthread_mutex_lock(&g_lock);
    if (cls >= 0 && cls < NB_CLASSES && g_free[cls].n > 0) {
        p = g_free[cls].items[--g_free[cls].n];
        g_cached -= rounded;
    }
    pthread_mutex_unlock(&g_lock);
    if (!p) {
        p = sys_alloc(rounded);
        if (!p) {
            nb_cpu_empty_cache();
            p = sys_alloc(rounded);
        }
        if (!p) return nb__err_null(NB_ERR_OOM, "out of host memory allocating %zu bytes", nbytes);
        pthread_mutex_lock(&g_lock);
        g_stats.n_allocs++;
        g_stats.reserved += rounded;
        pthread_mutex_unlock(&g_lock);
    }
    pthread_mutex_lock(&g_lock);
    g_stats.allocated += rounded;
    if (g_stats.allocated > g_stats.peak_allocated) g_stats.peak_allocated = g_stats.allocated;
    pthread_mutex_unlock(&g_lock);
    return p;
}

void nb_cpu_free(void *p, size_t nbytes)
{
    if (!p) return;
    size_t rounded = nbytes;
    int cls = -1;
    if (NB_CACHE_ENABLED && nbytes >= NB_CACHE_MIN) cls = size_class(nbytes, &rounded);
    pthread_mutex_lock(&g_lock);
    g_stats.allocated -= rounded;
    if (cls >= 0 && cls < NB_CLASSES) {
        free_list *fl = &g_free[cls];
        if (fl->n == fl->cap) {
            size_t cap = fl->cap ? fl->cap * 2 : 8;
            void **items = realloc(fl->items, cap * sizeof *items);
            if (items) {
                fl->items = items;
                fl->cap = cap;
            }
        }
        if (fl->n < fl->cap) {
            fl->items[fl->n++] = p;
            g_cached += rounded;
            p = NULL;
        }
    }
    if (p) g_stats.reserved -= rounded;
    pthread_mutex_unlock(&g_lock);
    free(p);
}

void nb_cpu_empty_cache(void)
{
    pthread_mutex_lock(&g_lock);
    for (int c = 0; c < NB_CLASSES; c++) {
        free_list *fl = &g_free[c];
        for (size_t i = 0; i < fl->n; i++) free(fl->items[i]);
        fl->n = 0;
        free(fl->items);
        fl->items = NULL;
        fl->cap = 0;
    }
    g_stats.reserved -= g_cached;
    g_cached = 0;
    pthread_mutex_unlock(&g_lock);
}

nb_status nb_cpu_memory_stats(int index, nb_memory_stats *out)
{
    pthread_mutex_lock(&g_lock);
    *out = g_stats;
    pthread_mutex_unlock(&g_lock);
    return NB_OK;
}

void nb_cpu_reset_peak_stats(int index)
{
    (void)index;
    pthread_mutex_lock(&g_lock);
    g_stats.peak_allocated = g_stats.allocated;
    pthread_mutex_unlock(&g_lock);
}

/* Hands cached buffers back at exit so leak checkers see a clean process. */
__attribute__((destructor)) static void cpu_alloc_fini(void) { nb_cpu_empty_cache(); }
