/* A caching pool for device memory (see devpool_impl.h for the policy). Blocks are kept in
 * address order within their segment (prev/next), free blocks on one list per pool kind (small,
 * large), live blocks in a pointer-keyed hash table, and blocks waiting for other streams' events
 * on a pending list. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/devpool_impl.h"
#include "core/error_impl.h"

typedef struct dp_block dp_block;
struct dp_block {
    char *ptr;
    size_t size;
    void *stream;
    dp_block *prev, *next; /* neighbours in the segment, by address */
    dp_block *fnext;       /* the free list */
    void **uses;           /* other streams the block was used on (record_stream) */
    int n_uses, cap_uses;
    int pending;           /* events still to complete before reuse */
    bool live, small;
};

typedef struct dp_event {
    void *event;
    dp_block *block;
} dp_event;

struct nb_devpool {
    nb_devpool_ops ops;
    pthread_mutex_t lock;
    dp_block *free_small, *free_large;
    dp_block **table; /* live blocks by ptr: open addressing, NULL empty, TOMB removed */
    size_t table_cap, table_n, table_used;
    dp_event *events;
    size_t n_events, cap_events, reserved_events; /* reserved: one per recorded use of a live block */
    nb_devpool_stats stats;
};

static dp_block tomb_block;
#define TOMB (&tomb_block)

size_t nb__devpool_round(size_t n)
{
    if (n < NB_DEVPOOL_ROUND) return NB_DEVPOOL_ROUND;
    return (n + NB_DEVPOOL_ROUND - 1) / NB_DEVPOOL_ROUND * NB_DEVPOOL_ROUND;
}

static size_t segment_size(size_t size)
{
    if (size <= NB_DEVPOOL_SMALL) return NB_DEVPOOL_SMALL_SEGMENT;
    if (size < NB_DEVPOOL_MIN_LARGE_ALLOC) return NB_DEVPOOL_LARGE_SEGMENT;
    size_t r = NB_DEVPOOL_SMALL_SEGMENT;
    return (size + r - 1) / r * r;
}

/* ---- the table of live blocks --------------------------------------------------------------- */

static size_t hash_ptr(const void *p, size_t cap)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

static bool table_grow(nb_devpool *pool)
{
    size_t cap = pool->table_cap ? pool->table_cap * 2 : 64;
    dp_block **t = calloc(cap, sizeof *t);
    if (!t) return false;
    for (size_t i = 0; i < pool->table_cap; i++) {
        dp_block *b = pool->table[i];
        if (!b || b == TOMB) continue;
        size_t h = hash_ptr(b->ptr, cap);
        while (t[h]) h = (h + 1) & (cap - 1);
        t[h] = b;
    }
    free(pool->table);
    pool->table = t;
    pool->table_cap = cap;
    pool->table_used = pool->table_n;
    return true;
}

static bool table_insert(nb_devpool *pool, dp_block *b)
{
    if ((pool->table_used + 1) * 2 > pool->table_cap && !table_grow(pool)) return false;
    size_t h = hash_ptr(b->ptr, pool->table_cap);
    while (pool->table[h] && pool->table[h] != TOMB) h = (h + 1) & (pool->table_cap - 1);
    if (!pool->table[h]) pool->table_used++;
    pool->table[h] = b;
    pool->table_n++;
    return true;
}

/* Removes and returns the live block at p, or NULL. */
static dp_block *table_take(nb_devpool *pool, const void *p)
{
    if (!pool->table_cap) return NULL;
    size_t h = hash_ptr(p, pool->table_cap);
    for (dp_block *b; (b = pool->table[h]) != NULL; h = (h + 1) & (pool->table_cap - 1)) {
        if (b != TOMB && b->ptr == p) {
            pool->table[h] = TOMB;
            pool->table_n--;
            return b;
        }
    }
    return NULL;
}

static dp_block *table_find(nb_devpool *pool, const void *p)
{
    if (!pool->table_cap) return NULL;
    size_t h = hash_ptr(p, pool->table_cap);
    for (dp_block *b; (b = pool->table[h]) != NULL; h = (h + 1) & (pool->table_cap - 1))
        if (b != TOMB && b->ptr == p) return b;
    return NULL;
}

/* ---- free lists ----------------------------------------------------------------------------- */

static dp_block **free_list(nb_devpool *pool, bool small) { return small ? &pool->free_small : &pool->free_large; }

static void list_remove(nb_devpool *pool, dp_block *b)
{
    for (dp_block **pp = free_list(pool, b->small); *pp; pp = &(*pp)->fnext)
        if (*pp == b) {
            *pp = b->fnext;
            b->fnext = NULL;
            return;
        }
}

static void list_push(nb_devpool *pool, dp_block *b)
{
    dp_block **head = free_list(pool, b->small);
    b->fnext = *head;
    *head = b;
}

static bool is_free(const dp_block *b) { return b && !b->live && b->pending == 0; }

/* Puts a block that no stream uses any more back on its free list, merged with free neighbours. */
static void release_block(nb_devpool *pool, dp_block *b)
{
    b->live = false;
    b->n_uses = 0;
    if (is_free(b->prev)) {
        dp_block *p = b->prev;
        list_remove(pool, p);
        p->size += b->size;
        p->next = b->next;
        if (b->next) b->next->prev = p;
        free(b->uses);
        free(b);
        b = p;
    }
    if (is_free(b->next)) {
        dp_block *n = b->next;
        list_remove(pool, n);
        b->size += n->size;
        b->next = n->next;
        if (n->next) n->next->prev = b;
        free(n->uses);
        free(n);
    }
    list_push(pool, b);
}

/* Completes the pending events that are done; a block whose last event completed is released. */
static void process_events(nb_devpool *pool)
{
    size_t k = 0;
    for (size_t i = 0; i < pool->n_events; i++) {
        dp_event e = pool->events[i];
        if (!e.event || !pool->ops.event_done(pool->ops.ctx, e.event)) {
            pool->events[k++] = e;
            continue;
        }
        pool->ops.event_free(pool->ops.ctx, e.event);
        if (--e.block->pending == 0) release_block(pool, e.block);
    }
    pool->n_events = k;
}

/* Returns every whole free segment to the device. */
static void release_cached(nb_devpool *pool)
{
    for (int s = 0; s < 2; s++) {
        dp_block **pp = free_list(pool, s == 0);
        while (*pp) {
            dp_block *b = *pp;
            if (b->prev || b->next) {
                pp = &b->fnext;
                continue;
            }
            *pp = b->fnext;
            pool->ops.raw_free(pool->ops.ctx, b->ptr, b->size);
            pool->stats.reserved -= b->size;
            pool->stats.n_raw_frees++;
            free(b->uses);
            free(b);
        }
    }
}

/* ---- the pool ------------------------------------------------------------------------------- */

nb_devpool *nb__devpool_create(const nb_devpool_ops *ops)
{
    if (!ops || !ops->raw_alloc || !ops->raw_free)
        return nb__err_null(NB_ERR_INVALID_ARG, "devpool_create: raw_alloc and raw_free are required");
    nb_devpool *pool = calloc(1, sizeof *pool);
    if (!pool) return nb__err_null(NB_ERR_OOM, "devpool_create: out of host memory");
    pool->ops = *ops;
    pthread_mutex_init(&pool->lock, NULL);
    return pool;
}

static void free_segment_list(nb_devpool *pool, dp_block *b)
{
    while (b->prev) b = b->prev;
    size_t total = 0;
    char *base = b->ptr;
    while (b) {
        dp_block *n = b->next;
        total += b->size;
        free(b->uses);
        free(b);
        b = n;
    }
    pool->ops.raw_free(pool->ops.ctx, base, total);
}

void nb__devpool_destroy(nb_devpool *pool)
{
    if (!pool) return;
    for (size_t i = 0; i < pool->n_events; i++)
        if (pool->events[i].event) pool->ops.event_free(pool->ops.ctx, pool->events[i].event);
    /* Collect one block per segment (the heads), from the free lists, the live table and the
     * blocks waiting for events, then free each segment's block chain once. */
    size_t cap = 16, n = 0;
    dp_block **heads = malloc(cap * sizeof *heads);
    for (int pass = 0; pass < 3 && heads; pass++) {
        size_t count = pass == 0 ? 2 : pass == 1 ? pool->table_cap : pool->n_events;
        for (size_t i = 0; i < count; i++) {
            dp_block *b = pass == 0 ? *free_list(pool, i == 0) : pass == 1 ? pool->table[i] : pool->events[i].block;
            for (; b && b != TOMB; b = pass == 0 ? b->fnext : NULL) {
                dp_block *h = b;
                while (h->prev) h = h->prev;
                bool dup = false;
                for (size_t j = 0; j < n && !dup; j++) dup = heads[j] == h;
                if (dup) continue;
                if (n == cap) {
                    dp_block **g = realloc(heads, 2 * cap * sizeof *heads);
                    if (!g) break;
                    heads = g;
                    cap *= 2;
                }
                heads[n++] = h;
            }
        }
    }
    for (size_t i = 0; heads && i < n; i++) free_segment_list(pool, heads[i]);
    free(heads);
    free(pool->table);
    free(pool->events);
    pthread_mutex_destroy(&pool->lock);
    free(pool);
}

static void fmt_bytes(char *buf, size_t cap, size_t n)
{
    if (n >= ((size_t)1 << 30)) snprintf(buf, cap, "%.2f GiB", (double)n / (double)((size_t)1 << 30));
    else if (n >= ((size_t)1 << 20)) snprintf(buf, cap, "%.2f MiB", (double)n / (double)((size_t)1 << 20));
    else snprintf(buf, cap, "%zu bytes", n);
}

static void *oom(nb_devpool *pool, size_t nbytes)
{
    char want[32], used[32], res[32], fr[32] = "", tot[32] = "";
    pool->stats.n_ooms++;
    fmt_bytes(want, sizeof want, nbytes);
    fmt_bytes(used, sizeof used, pool->stats.allocated);
    fmt_bytes(res, sizeof res, pool->stats.reserved);
    size_t f = 0, t = 0;
    if (pool->ops.mem_info && pool->ops.mem_info(pool->ops.ctx, &f, &t)) {
        fmt_bytes(fr, sizeof fr, f);
        fmt_bytes(tot, sizeof tot, t);
        return nb__err_null(NB_ERR_OOM,
                            "%s: out of memory: tried to allocate %s; %s in use by tensors, %s reserved by nabla; "
                            "the device has %s free of %s",
                            pool->ops.device_name, want, used, res, fr, tot);
    }
    return nb__err_null(NB_ERR_OOM, "%s: out of memory: tried to allocate %s; %s in use by tensors, %s reserved by nabla",
                        pool->ops.device_name, want, used, res);
}

/* The best-fitting free block of `stream` for size, taken off its list; NULL when none. */
static dp_block *take_fit(nb_devpool *pool, size_t size, bool small, void *stream)
{
    dp_block **best = NULL;
    for (dp_block **pp = free_list(pool, small); *pp; pp = &(*pp)->fnext) {
        dp_block *b = *pp;
        if (b->stream == stream && b->size >= size && (!best || b->size < (*best)->size)) best = pp;
    }
    if (!best) return NULL;
    dp_block *b = *best;
    *best = b->fnext;
    b->fnext = NULL;
    return b;
}

static dp_block *new_segment(nb_devpool *pool, size_t size, bool small, void *stream)
{
    size_t seg = segment_size(size);
    void *p = pool->ops.raw_alloc(pool->ops.ctx, seg);
    if (!p) {
        release_cached(pool);
        p = pool->ops.raw_alloc(pool->ops.ctx, seg);
    }
    if (!p) return oom(pool, size);
    dp_block *b = calloc(1, sizeof *b);
    if (!b) {
        pool->ops.raw_free(pool->ops.ctx, p, seg);
        return nb__err_null(NB_ERR_OOM, "%s: out of host memory", pool->ops.device_name);
    }
    b->ptr = p;
    b->size = seg;
    b->stream = stream;
    b->small = small;
    pool->stats.reserved += seg;
    pool->stats.n_raw_allocs++;
    if (pool->stats.reserved > pool->stats.peak_reserved) pool->stats.peak_reserved = pool->stats.reserved;
    return b;
}

/* Splits the tail of b off when it is worth keeping; the tail goes to the free list. */
static void maybe_split(nb_devpool *pool, dp_block *b, size_t size)
{
    size_t rest = b->size - size;
    if (b->small ? rest < NB_DEVPOOL_ROUND : rest <= NB_DEVPOOL_SMALL) return;
    dp_block *r = calloc(1, sizeof *r);
    if (!r) return; /* keep the block whole */
    r->ptr = b->ptr + size;
    r->size = rest;
    r->stream = b->stream;
    r->small = b->small;
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = size;
    list_push(pool, r);
}

void *nb__devpool_alloc(nb_devpool *pool, size_t nbytes, void *stream)
{
    size_t size = nb__devpool_round(nbytes);
    if (size < nbytes) return nb__err_null(NB_ERR_OOM, "%s: cannot allocate %zu bytes", pool->ops.device_name, nbytes);
    bool small = size <= NB_DEVPOOL_SMALL;
    pthread_mutex_lock(&pool->lock);
    if (pool->n_events) process_events(pool);
    dp_block *b = take_fit(pool, size, small, stream);
    if (!b) b = new_segment(pool, size, small, stream);
    if (b) {
        maybe_split(pool, b, size);
        b->live = true;
        if (!table_insert(pool, b)) {
            release_block(pool, b);
            b = nb__err_null(NB_ERR_OOM, "%s: out of host memory", pool->ops.device_name);
        }
    }
    if (b) {
        pool->stats.allocated += b->size;
        pool->stats.n_allocs++;
        if (pool->stats.allocated > pool->stats.peak_allocated) pool->stats.peak_allocated = pool->stats.allocated;
    }
    pthread_mutex_unlock(&pool->lock);
    return b ? b->ptr : NULL;
}

nb_status nb__devpool_free(nb_devpool *pool, void *p)
{
    if (!p) return NB_OK;
    pthread_mutex_lock(&pool->lock);
    dp_block *b = table_take(pool, p);
    if (!b) {
        pthread_mutex_unlock(&pool->lock);
        return nb__err(NB_ERR_INVALID_ARG, "%s: free of %p, which the allocator did not hand out (or freed twice)",
                       pool->ops.device_name, p);
    }
    pool->stats.allocated -= b->size;
    pool->stats.n_frees++;
    b->live = false;
    /* record_stream reserved room for these entries. An event that cannot be recorded (the
     * device refused) is kept as NULL: that block is never reused, which is never unsafe. */
    for (int i = 0; i < b->n_uses; i++) {
        void *ev = pool->ops.event_record(pool->ops.ctx, b->uses[i]);
        pool->events[pool->n_events++] = (dp_event){ev, b};
        b->pending++;
    }
    pool->reserved_events -= (size_t)b->n_uses;
    b->n_uses = 0;
    if (b->pending == 0) release_block(pool, b);
    pthread_mutex_unlock(&pool->lock);
    return NB_OK;
}

/* Room for one more recorded use of b: in b's list and on the event list (filled at free). */
static bool reserve_use(nb_devpool *pool, dp_block *b)
{
    if (b->n_uses == b->cap_uses) {
        int cap = b->cap_uses ? 2 * b->cap_uses : 4;
        void **u = realloc(b->uses, (size_t)cap * sizeof *u);
        if (!u) return false;
        b->uses = u;
        b->cap_uses = cap;
    }
    size_t need = pool->n_events + pool->reserved_events + 1;
    if (need > pool->cap_events) {
        size_t cap = pool->cap_events ? 2 * pool->cap_events : 16;
        while (cap < need) cap *= 2;
        dp_event *e = realloc(pool->events, cap * sizeof *e);
        if (!e) return false;
        pool->events = e;
        pool->cap_events = cap;
    }
    pool->reserved_events++;
    return true;
}

nb_status nb__devpool_record_stream(nb_devpool *pool, void *p, void *stream)
{
    pthread_mutex_lock(&pool->lock);
    dp_block *b = table_find(pool, p);
    nb_status st = NB_OK;
    if (!b) {
        st = nb__err(NB_ERR_INVALID_ARG, "%s: record_stream on %p, which is not a live block", pool->ops.device_name, p);
    } else if (stream != b->stream) {
        bool known = false;
        for (int i = 0; i < b->n_uses && !known; i++) known = b->uses[i] == stream;
        if (!known && !pool->ops.event_record) {
            st = nb__err(NB_ERR_UNSUPPORTED, "%s: record_stream: this device has no events", pool->ops.device_name);
        } else if (!known) {
            if (!reserve_use(pool, b)) {
                pthread_mutex_unlock(&pool->lock);
                return nb__err(NB_ERR_OOM, "%s: record_stream: out of host memory", pool->ops.device_name);
            }
            b->uses[b->n_uses++] = stream;
        }
    }
    pthread_mutex_unlock(&pool->lock);
    return st;
}

void nb__devpool_empty_cache(nb_devpool *pool)
{
    pthread_mutex_lock(&pool->lock);
    if (pool->n_events) process_events(pool);
    release_cached(pool);
    pthread_mutex_unlock(&pool->lock);
}

void nb__devpool_stats(nb_devpool *pool, nb_devpool_stats *out)
{
    pthread_mutex_lock(&pool->lock);
    *out = pool->stats;
    pthread_mutex_unlock(&pool->lock);
}

void nb__devpool_reset_peak(nb_devpool *pool)
{
    pthread_mutex_lock(&pool->lock);
    pool->stats.peak_allocated = pool->stats.allocated;
    pool->stats.peak_reserved = pool->stats.reserved;
    pthread_mutex_unlock(&pool->lock);
}
