/* A caching pool for device memory (see devpool_impl.h for the policy). Blocks are kept in
 * address order within their segment (prev/next), free blocks on one list per pool kind (small,
 * large), live blocks in a pointer-keyed hash table, and blocks waiting for other streams' events
 * on a pending list. Every block carries the id of the private pool its segment belongs to (0:
 * the general pool); all blocks of a segment share it, so merging never mixes pools. A private
 * pool links its segments' first blocks (which live as long as the segment: a merge keeps the
 * lower block). Blocks freed during a capture that wait for other streams are parked on a list
 * until the capture ends. */
#include <limits.h>
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
    int pool_id;           /* the private pool of the segment; 0: the general pool */
    dp_block *seg_next;    /* on a private segment's first block: the pool's next segment */
    bool live, small;
    bool parked;           /* freed during a capture, waiting for its end (on pool->parked) */
};

typedef struct dp_event {
    void *event;
    dp_block *block;
} dp_event;

typedef struct dp_private {
    int id;
    void *stream;
    bool capturing;    /* between begin and end: allocations on stream are routed here */
    dp_block *segments; /* first blocks of its segments, through seg_next */
} dp_private;

struct nb_devpool {
    nb_devpool_ops ops;
    pthread_mutex_t lock;
    dp_block *free_small, *free_large;
    dp_block **table; /* live blocks by ptr: open addressing, NULL empty, TOMB removed */
    size_t table_cap, table_n, table_used;
    dp_event *events;
    size_t n_events, cap_events, reserved_events; /* reserved: one per recorded use of a live block */
    dp_private *privs;
    int n_privs, cap_privs, last_id;
    int n_capturing; /* private pools between begin and end: no device call but raw_alloc */
    dp_block *parked; /* through fnext */
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

static bool is_free(const dp_block *b) { return b && !b->live && !b->parked && b->pending == 0; }

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

static void raw_free_segment(nb_devpool *pool, dp_block *b)
{
    pool->ops.raw_free(pool->ops.ctx, b->ptr, b->size);
    pool->stats.reserved -= b->size;
    pool->stats.n_raw_frees++;
    free(b->uses);
    free(b);
}

/* Returns every whole free segment of the general pool to the device. */
static void release_cached(nb_devpool *pool)
{
    for (int s = 0; s < 2; s++) {
        dp_block **pp = free_list(pool, s == 0);
        while (*pp) {
            dp_block *b = *pp;
            if (b->prev || b->next || b->pool_id) {
                pp = &b->fnext;
                continue;
            }
            *pp = b->fnext;
            raw_free_segment(pool, b);
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
    /* Collect one block per segment (the heads), from the free lists, the live table, the blocks
     * waiting for events and the parked ones, then free each segment's block chain once. */
    size_t cap = 16, n = 0;
    dp_block **heads = malloc(cap * sizeof *heads);
    for (int pass = 0; pass < 4 && heads; pass++) {
        size_t count = pass == 0 ? 2 : pass == 1 ? pool->table_cap : pass == 2 ? pool->n_events : 1;
        for (size_t i = 0; i < count; i++) {
            dp_block *b = pass == 0   ? *free_list(pool, i == 0)
                          : pass == 1 ? pool->table[i]
                          : pass == 2 ? pool->events[i].block
                                      : pool->parked;
            for (; b && b != TOMB; b = pass == 0 || pass == 3 ? b->fnext : NULL) {
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
    free(pool->privs);
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
    if (pool->ops.mem_info && !pool->n_capturing && pool->ops.mem_info(pool->ops.ctx, &f, &t)) {
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

/* The best-fitting free block of `stream` and private pool `id` for size, taken off its list;
 * NULL when none. */
static dp_block *take_fit(nb_devpool *pool, size_t size, bool small, void *stream, int id)
{
    dp_block **best = NULL;
    for (dp_block **pp = free_list(pool, small); *pp; pp = &(*pp)->fnext) {
        dp_block *b = *pp;
        if (b->stream == stream && b->pool_id == id && b->size >= size && (!best || b->size < (*best)->size))
            best = pp;
    }
    if (!best) return NULL;
    dp_block *b = *best;
    *best = b->fnext;
    b->fnext = NULL;
    return b;
}

static dp_private *find_private(nb_devpool *pool, int id)
{
    for (int i = 0; i < pool->n_privs; i++)
        if (pool->privs[i].id == id) return &pool->privs[i];
    return NULL;
}

/* The private pool that allocations on `stream` are routed to; NULL: the general pool. */
static dp_private *routed(nb_devpool *pool, void *stream)
{
    for (int i = 0; pool->n_capturing && i < pool->n_privs; i++)
        if (pool->privs[i].capturing && pool->privs[i].stream == stream) return &pool->privs[i];
    return NULL;
}

/* A new segment for `priv` (NULL: the general pool). The block is made before the device is
 * asked, so that no failure after it has to give the memory back (a device call). */
static dp_block *new_segment(nb_devpool *pool, size_t size, bool small, void *stream, dp_private *priv)
{
    size_t seg = segment_size(size);
    dp_block *b = calloc(1, sizeof *b);
    if (!b) return nb__err_null(NB_ERR_OOM, "%s: out of host memory", pool->ops.device_name);
    void *p = pool->ops.raw_alloc(pool->ops.ctx, seg);
    if (!p && !pool->n_capturing) {
        release_cached(pool);
        p = pool->ops.raw_alloc(pool->ops.ctx, seg);
    }
    if (!p) {
        free(b);
        return oom(pool, size);
    }
    b->ptr = p;
    b->size = seg;
    b->stream = stream;
    b->small = small;
    if (priv) {
        b->pool_id = priv->id;
        b->seg_next = priv->segments;
        priv->segments = b;
        pool->stats.private_reserved += seg;
    }
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
    r->pool_id = b->pool_id;
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
    if (pool->n_events && !pool->n_capturing) process_events(pool);
    dp_private *priv = routed(pool, stream);
    dp_block *b = take_fit(pool, size, small, stream, priv ? priv->id : 0);
    if (!b) b = new_segment(pool, size, small, stream, priv);
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

/* A freed block: reusable now, or once an event recorded on each stream that used it has
 * completed. */
static void retire(nb_devpool *pool, dp_block *b)
{
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
    if (b->n_uses && pool->n_capturing) {
        b->parked = true;
        b->fnext = pool->parked;
        pool->parked = b;
    } else {
        retire(pool, b);
    }
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
    if (!pool->n_capturing) {
        if (pool->n_events) process_events(pool);
        release_cached(pool);
    }
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

/* ---- private pools -------------------------------------------------------------------------- */

int nb__devpool_private_begin(nb_devpool *pool, void *stream)
{
    pthread_mutex_lock(&pool->lock);
    dp_private *on = routed(pool, stream);
    if (on) {
        int id = on->id;
        pthread_mutex_unlock(&pool->lock);
        nb__err(NB_ERR_INVALID_ARG, "%s: private_begin: stream %p already has private pool %d between begin and end",
                pool->ops.device_name, stream, id);
        return 0;
    }
    if (pool->n_privs == pool->cap_privs) {
        int cap = pool->cap_privs ? 2 * pool->cap_privs : 4;
        dp_private *g = realloc(pool->privs, (size_t)cap * sizeof *g);
        if (!g) {
            pthread_mutex_unlock(&pool->lock);
            nb__err(NB_ERR_OOM, "%s: private_begin: out of host memory", pool->ops.device_name);
            return 0;
        }
        pool->privs = g;
        pool->cap_privs = cap;
    }
    if (pool->last_id == INT_MAX) {
        pthread_mutex_unlock(&pool->lock);
        nb__err(NB_ERR_OOM, "%s: private_begin: out of private pool ids", pool->ops.device_name);
        return 0;
    }
    int id = ++pool->last_id;
    pool->privs[pool->n_privs++] = (dp_private){id, stream, true, NULL};
    pool->n_capturing++;
    pthread_mutex_unlock(&pool->lock);
    return id;
}

nb_status nb__devpool_private_end(nb_devpool *pool, int id)
{
    pthread_mutex_lock(&pool->lock);
    dp_private *priv = find_private(pool, id);
    if (!priv || !priv->capturing) {
        pthread_mutex_unlock(&pool->lock);
        return nb__err(NB_ERR_INVALID_ARG, "%s: private_end: private pool %d %s", pool->ops.device_name, id,
                       priv ? "has already ended" : "does not exist (never begun, or released)");
    }
    priv->capturing = false;
    /* the last capture ended: the parked blocks take the usual path, their events recorded now */
    if (--pool->n_capturing == 0) {
        while (pool->parked) {
            dp_block *b = pool->parked;
            pool->parked = b->fnext;
            b->fnext = NULL;
            b->parked = false;
            retire(pool, b);
        }
    }
    pthread_mutex_unlock(&pool->lock);
    return NB_OK;
}

nb_status nb__devpool_private_release(nb_devpool *pool, int id)
{
    pthread_mutex_lock(&pool->lock);
    dp_private *priv = find_private(pool, id);
    if (!priv || priv->capturing) {
        pthread_mutex_unlock(&pool->lock);
        return nb__err(NB_ERR_INVALID_ARG, "%s: private_release: private pool %d %s", pool->ops.device_name, id,
                       priv ? "is still capturing (between begin and end)"
                            : "does not exist (never begun, or released)");
    }
    for (dp_block *h = priv->segments, *next; h; h = next) {
        next = h->seg_next;
        h->seg_next = NULL;
        size_t total = 0;
        for (dp_block *b = h; b; b = b->next) {
            total += b->size;
            b->pool_id = 0;
        }
        pool->stats.private_reserved -= total;
        if (!h->next && is_free(h) && !pool->n_capturing) {
            list_remove(pool, h);
            raw_free_segment(pool, h);
        }
    }
    *priv = pool->privs[--pool->n_privs];
    pthread_mutex_unlock(&pool->lock);
    return NB_OK;
}
