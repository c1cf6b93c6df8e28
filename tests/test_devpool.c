/* The device-memory caching pool (src/core/devpool.c), the bookkeeping under the CUDA allocator,
 * run on a fake device made of host memory with a fixed capacity: size rounding and segment
 * sizes, reuse, splitting and merging, per-stream pools, cross-stream reuse waiting for events,
 * out-of-memory recovery, statistics, bad frees, and a randomised property test (live blocks
 * never overlap, the statistics add up, everything returns to the device); then the private pools
 * of graph capture: routing, isolation, no device calls but raw_alloc while capturing, release,
 * misuse, and several pools at once. The expected sizes and addresses follow from the policy in
 * devpool_impl.h, worked out by hand. */
#include <stdlib.h>
#include <string.h>

#include "nbtest.h"
#include "core/devpool_impl.h"

#define MIB ((size_t)1 << 20)

typedef struct fake_dev {
    size_t capacity, used;
    int live_segments;
    int events_live;
    bool events_done; /* every event recorded so far has completed */
    int n_records;
    int n_raw_frees, n_dones, n_event_frees, n_infos; /* calls of each */
} fake_dev;

static void *fake_alloc(void *ctx, size_t n)
{
    fake_dev *d = ctx;
    if (d->used + n > d->capacity) return NULL;
    void *p = malloc(n);
    if (!p) return NULL;
    d->used += n;
    d->live_segments++;
    return p;
}

static void fake_free(void *ctx, void *p, size_t n)
{
    fake_dev *d = ctx;
    free(p);
    d->used -= n;
    d->live_segments--;
    d->n_raw_frees++;
}

typedef struct fake_event {
    fake_dev *dev;
    void *stream;
} fake_event;

static void *fake_record(void *ctx, void *stream)
{
    fake_dev *d = ctx;
    fake_event *e = malloc(sizeof *e);
    e->dev = d;
    e->stream = stream;
    d->events_live++;
    d->n_records++;
    return e;
}

static bool fake_done(void *ctx, void *ev)
{
    (void)ev;
    ((fake_dev *)ctx)->n_dones++;
    return ((fake_dev *)ctx)->events_done;
}

static void fake_event_free(void *ctx, void *ev)
{
    ((fake_dev *)ctx)->events_live--;
    ((fake_dev *)ctx)->n_event_frees++;
    free(ev);
}

static bool fake_info(void *ctx, size_t *f, size_t *t)
{
    fake_dev *d = ctx;
    d->n_infos++;
    *f = d->capacity - d->used;
    *t = d->capacity;
    return true;
}

static nb_devpool *make_pool(fake_dev *d, size_t capacity)
{
    memset(d, 0, sizeof *d);
    d->capacity = capacity;
    nb_devpool_ops ops = {"fake:0", d, fake_alloc, fake_free, fake_record, fake_done, fake_event_free, fake_info};
    return NBT_CHECK(nb__devpool_create(&ops));
}

static nb_devpool_stats stats(nb_devpool *p)
{
    nb_devpool_stats s;
    nb__devpool_stats(p, &s);
    return s;
}

static void test_rounding_and_segments(void **state)
{
    (void)state;
    assert_int_equal(nb__devpool_round(0), 512);
    assert_int_equal(nb__devpool_round(1), 512);
    assert_int_equal(nb__devpool_round(512), 512);
    assert_int_equal(nb__devpool_round(513), 1024);
    fake_dev d;
    nb_devpool *p = make_pool(&d, 1024 * MIB);
    void *a = NBT_CHECK(nb__devpool_alloc(p, 1, NULL));
    nb_devpool_stats s = stats(p);
    assert_int_equal(s.allocated, 512);
    assert_int_equal(s.reserved, 2 * MIB); /* small requests come from 2 MiB segments */
    void *b = NBT_CHECK(nb__devpool_alloc(p, 1000, NULL));
    assert_ptr_equal((char *)a + 512, b); /* cut from the same segment, right after a */
    assert_int_equal(stats(p).n_raw_allocs, 1);
    void *l1 = NBT_CHECK(nb__devpool_alloc(p, 5 * MIB, NULL)); /* large, < 10 MiB: a 20 MiB segment */
    void *l2 = NBT_CHECK(nb__devpool_alloc(p, 5 * MIB, NULL));
    assert_ptr_equal((char *)l1 + 5 * MIB, l2);
    assert_int_equal(stats(p).reserved, 22 * MIB);
    void *l3 = NBT_CHECK(nb__devpool_alloc(p, 11 * MIB + 1, NULL)); /* its own segment, rounded to 2 MiB */
    assert_int_equal(stats(p).reserved, 34 * MIB);
    assert_int_equal(stats(p).n_raw_allocs, 3);
    /* l3's block keeps the segment's last 511.5 KiB: a large block's rest is split off only when
     * it is over 1 MiB, and `allocated` counts blocks, as PyTorch's allocated_bytes does */
    assert_int_equal(stats(p).allocated, 512 + 1024 + 10 * MIB + 12 * MIB);
    NBT_OK(nb__devpool_free(p, a));
    NBT_OK(nb__devpool_free(p, b));
    NBT_OK(nb__devpool_free(p, l1));
    NBT_OK(nb__devpool_free(p, l2));
    NBT_OK(nb__devpool_free(p, l3));
    s = stats(p);
    assert_int_equal(s.allocated, 0);
    assert_int_equal(s.reserved, 34 * MIB); /* cached, not returned */
    assert_int_equal(s.peak_allocated, 512 + 1024 + 22 * MIB);
    assert_int_equal(s.peak_reserved, 34 * MIB);
    nb__devpool_reset_peak(p); /* the peaks start again from now: 0 allocated, 34 MiB reserved */
    a = NBT_CHECK(nb__devpool_alloc(p, 1, NULL));
    s = stats(p);
    assert_int_equal(s.peak_allocated, 512);
    assert_int_equal(s.peak_reserved, 34 * MIB);
    NBT_OK(nb__devpool_free(p, a));
    nb__devpool_empty_cache(p);
    assert_int_equal(stats(p).reserved, 0);
    assert_int_equal(d.live_segments, 0);
    assert_int_equal(stats(p).n_raw_frees, 3);
    nb__devpool_destroy(p);
}

static void test_reuse_split_merge(void **state)
{
    (void)state;
    fake_dev d;
    nb_devpool *p = make_pool(&d, 1024 * MIB);
    void *a = NBT_CHECK(nb__devpool_alloc(p, 4096, NULL));
    NBT_OK(nb__devpool_free(p, a));
    void *b = NBT_CHECK(nb__devpool_alloc(p, 4000, NULL));
    assert_ptr_equal(a, b); /* the freed block comes back */
    void *c = NBT_CHECK(nb__devpool_alloc(p, 4096, NULL));
    void *e = NBT_CHECK(nb__devpool_alloc(p, 4096, NULL));
    NBT_OK(nb__devpool_free(p, b));
    NBT_OK(nb__devpool_free(p, e));
    NBT_OK(nb__devpool_free(p, c)); /* c merges with both neighbours: the segment is whole again */
    void *whole = NBT_CHECK(nb__devpool_alloc(p, NB_DEVPOOL_SMALL, NULL));
    assert_ptr_equal(whole, a);
    assert_int_equal(stats(p).n_raw_allocs, 1);
    NBT_OK(nb__devpool_free(p, whole));
    /* best fit: of two free blocks, the smaller one that fits is taken */
    void *x = NBT_CHECK(nb__devpool_alloc(p, 8192, NULL));
    void *sep1 = NBT_CHECK(nb__devpool_alloc(p, 512, NULL));
    void *y = NBT_CHECK(nb__devpool_alloc(p, 2048, NULL));
    void *sep2 = NBT_CHECK(nb__devpool_alloc(p, 512, NULL));
    NBT_OK(nb__devpool_free(p, x));
    NBT_OK(nb__devpool_free(p, y));
    void *z = NBT_CHECK(nb__devpool_alloc(p, 2048, NULL));
    assert_ptr_equal(z, y);
    NBT_OK(nb__devpool_free(p, z));
    NBT_OK(nb__devpool_free(p, sep1));
    NBT_OK(nb__devpool_free(p, sep2));
    nb__devpool_destroy(p);
    assert_int_equal(d.live_segments, 0);
}

static void test_streams(void **state)
{
    (void)state;
    fake_dev d;
    nb_devpool *p = make_pool(&d, 1024 * MIB);
    int s1, s2;
    void *a = NBT_CHECK(nb__devpool_alloc(p, 4096, &s1));
    NBT_OK(nb__devpool_free(p, a));
    void *b = NBT_CHECK(nb__devpool_alloc(p, 4096, &s2)); /* another stream: not a's memory */
    assert_ptr_not_equal(a, b);
    assert_int_equal(stats(p).n_raw_allocs, 2);
    void *c = NBT_CHECK(nb__devpool_alloc(p, 4096, &s1));
    assert_ptr_equal(a, c);
    /* c used on s2 as well: after its free it waits for s2's event */
    NBT_OK(nb__devpool_record_stream(p, c, &s2));
    NBT_OK(nb__devpool_record_stream(p, c, &s2)); /* twice is once */
    NBT_OK(nb__devpool_record_stream(p, c, &s1)); /* its own stream: nothing to wait for */
    NBT_OK(nb__devpool_free(p, c));
    assert_int_equal(d.n_records, 1);
    void *e = NBT_CHECK(nb__devpool_alloc(p, 4096, &s1));
    assert_ptr_not_equal(e, a); /* s2 may still be using a */
    d.events_done = true;
    void *f = NBT_CHECK(nb__devpool_alloc(p, 4096, &s1));
    assert_ptr_equal(f, a); /* the event completed: reusable */
    assert_int_equal(d.events_live, 0);
    NBT_OK(nb__devpool_free(p, b));
    NBT_OK(nb__devpool_free(p, e));
    NBT_OK(nb__devpool_free(p, f));
    /* a block freed while its event is pending is still returned at destroy */
    d.events_done = false;
    void *g = NBT_CHECK(nb__devpool_alloc(p, 4096, &s1));
    NBT_OK(nb__devpool_record_stream(p, g, &s2));
    NBT_OK(nb__devpool_free(p, g));
    nb__devpool_destroy(p);
    assert_int_equal(d.live_segments, 0);
    assert_int_equal(d.events_live, 0);
}

static void test_out_of_memory(void **state)
{
    (void)state;
    fake_dev d;
    nb_devpool *p = make_pool(&d, 50 * MIB);
    void *a = NBT_CHECK(nb__devpool_alloc(p, 12 * MIB, NULL));
    NBT_OK(nb__devpool_free(p, a)); /* 12 MiB cached */
    void *big = NBT_CHECK(nb__devpool_alloc(p, 46 * MIB, NULL)); /* fits only once the cache is released */
    assert_int_equal(stats(p).reserved, 46 * MIB);
    NBT_FAILS(nb__devpool_alloc(p, 20 * MIB, NULL) == NULL, NB_ERR_OOM, "fake:0", "out of memory",
              "tried to allocate 20.00 MiB", "46.00 MiB in use", "4.00 MiB free of 50.00 MiB", NULL);
    assert_int_equal(stats(p).n_ooms, 1);
    memset(big, 7, 46 * MIB); /* the live block survived */
    NBT_OK(nb__devpool_free(p, big));
    void *c = NBT_CHECK(nb__devpool_alloc(p, 20 * MIB, NULL)); /* and the pool goes on */
    NBT_OK(nb__devpool_free(p, c));
    nb__devpool_destroy(p);
    assert_int_equal(d.live_segments, 0);
}

static void test_bad_free(void **state)
{
    (void)state;
    fake_dev d;
    nb_devpool *p = make_pool(&d, 64 * MIB);
    int x;
    NBT_FAILS(nb__devpool_free(p, &x) != NB_OK, NB_ERR_INVALID_ARG, "fake:0", "did not hand out", NULL);
    void *a = NBT_CHECK(nb__devpool_alloc(p, 100, NULL));
    NBT_OK(nb__devpool_free(p, a));
    NBT_FAILS(nb__devpool_free(p, a) != NB_OK, NB_ERR_INVALID_ARG, "freed twice", NULL);
    NBT_FAILS(nb__devpool_record_stream(p, a, &x) != NB_OK, NB_ERR_INVALID_ARG, "not a live block", NULL);
    NBT_OK(nb__devpool_free(p, NULL));
    nb__devpool_destroy(p);
    nb_devpool_ops none = {0};
    NBT_FAILS(nb__devpool_create(&none) == NULL, NB_ERR_INVALID_ARG, "raw_alloc", NULL);
}

/* Random allocations and frees on two streams, some used across streams: live blocks never
 * overlap (each is filled with its own byte and checked before its free), `allocated` is the sum
 * of the live rounded sizes, `reserved` is what the fake device handed out. */
static void test_random_property(void **state)
{
    (void)state;
    enum { N = 64, STEPS = 3000 };
    fake_dev d;
    nb_devpool *p = make_pool(&d, 512 * MIB);
    int streams[2];
    unsigned char *live[N] = {0};
    size_t sizes[N] = {0};
    uint64_t r = 12345;
    for (int step = 0; step < STEPS; step++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        int i = (int)((r >> 33) % N);
        d.events_done = (r >> 20) % 3 != 0;
        if (live[i]) {
            for (size_t k = 0; k < sizes[i]; k += 97) assert_int_equal(live[i][k], (unsigned char)i);
            assert_int_equal(live[i][sizes[i] - 1], (unsigned char)i);
            NBT_OK(nb__devpool_free(p, live[i]));
            live[i] = NULL;
        } else {
            uint64_t kind = (r >> 40) % 10;
            size_t n = kind < 7 ? 1 + (size_t)((r >> 8) % 20000) : 1 + (size_t)((r >> 8) % (24 * MIB));
            live[i] = NBT_CHECK(nb__devpool_alloc(p, n, &streams[(r >> 50) & 1]));
            sizes[i] = n;
            memset(live[i], i, n);
            if ((r >> 55) % 5 == 0) NBT_OK(nb__devpool_record_stream(p, live[i], &streams[((r >> 50) & 1) ^ 1]));
        }
        /* a small block is its rounded size; a large one may keep up to 1 MiB more */
        size_t want = 0, slack = 0;
        for (int k = 0; k < N; k++) {
            want += live[k] ? nb__devpool_round(sizes[k]) : 0;
            slack += live[k] && sizes[k] > NB_DEVPOOL_SMALL ? NB_DEVPOOL_SMALL : 0;
        }
        nb_devpool_stats s = stats(p);
        assert_true(s.allocated >= want && s.allocated <= want + slack);
        assert_int_equal(s.reserved, d.used);
    }
    d.events_done = true;
    for (int k = 0; k < N; k++) NBT_OK(nb__devpool_free(p, live[k]));
    nb__devpool_empty_cache(p);
    assert_int_equal(stats(p).allocated, 0);
    assert_int_equal(stats(p).reserved, 0);
    assert_int_equal(d.live_segments, 0);
    assert_int_equal(d.events_live, 0);
    nb__devpool_destroy(p);
}

/* ---- private pools (graph capture) ---------------------------------------------------------- */

/* Every device call but raw_alloc the fake device has seen. */
static int other_calls(const fake_dev *d)
{
    return d->n_raw_frees + d->n_records + d->n_dones + d->n_event_frees + d->n_infos;
}

static void test_private_routing(void **state)
{
    (void)state;
    fake_dev d;
    nb_devpool *p = make_pool(&d, 1024 * MIB);
    int s1, s2;
    void *g1 = NBT_CHECK(nb__devpool_alloc(p, 4096, &s1));
    void *g2 = NBT_CHECK(nb__devpool_alloc(p, 4096, &s2));
    NBT_OK(nb__devpool_free(p, g1)); /* both streams have a cached block that fits */
    NBT_OK(nb__devpool_free(p, g2));
    int id = nb__devpool_private_begin(p, &s1);
    assert_true(id > 0);
    void *a = NBT_CHECK(nb__devpool_alloc(p, 4096, &s1)); /* not g1: a segment of the private pool */
    assert_ptr_not_equal(a, g1);
    assert_int_equal(stats(p).n_raw_allocs, 3);
    assert_int_equal(stats(p).private_reserved, 2 * MIB);
    void *b = NBT_CHECK(nb__devpool_alloc(p, 4096, &s1));
    assert_ptr_equal((char *)a + 4096, b); /* cut from the same private segment */
    NBT_OK(nb__devpool_free(p, a));
    void *c = NBT_CHECK(nb__devpool_alloc(p, 4000, &s1));
    assert_ptr_equal(c, a); /* freed inside, reused inside */
    void *o = NBT_CHECK(nb__devpool_alloc(p, 4096, &s2)); /* another stream: the general pool */
    assert_ptr_equal(o, g2);
    void *l = NBT_CHECK(nb__devpool_alloc(p, 5 * MIB, &s1)); /* large: a 20 MiB private segment */
    nb_devpool_stats st = stats(p);
    assert_int_equal(st.n_raw_allocs, 4);
    assert_int_equal(st.private_reserved, 22 * MIB);
    assert_int_equal(st.reserved, 26 * MIB); /* private segments count as any other */
    assert_int_equal(st.allocated, 3 * 4096 + 5 * MIB);
    NBT_OK(nb__devpool_private_end(p, id));
    void *h = NBT_CHECK(nb__devpool_alloc(p, 4096, &s1)); /* routing ended: the general pool again */
    assert_ptr_equal(h, g1);
    assert_int_equal(stats(p).n_raw_allocs, 4);
    NBT_OK(nb__devpool_free(p, b));
    NBT_OK(nb__devpool_free(p, c));
    NBT_OK(nb__devpool_free(p, o));
    NBT_OK(nb__devpool_free(p, l));
    NBT_OK(nb__devpool_free(p, h));
    NBT_OK(nb__devpool_private_release(p, id));
    nb__devpool_destroy(p);
    assert_int_equal(d.live_segments, 0);
}

static void test_private_isolation(void **state)
{
    (void)state;
    fake_dev d;
    nb_devpool *p = make_pool(&d, 1024 * MIB);
    int s1;
    int id = nb__devpool_private_begin(p, &s1);
    void *a = NBT_CHECK(nb__devpool_alloc(p, 4096, &s1));
    void *l = NBT_CHECK(nb__devpool_alloc(p, 12 * MIB, &s1));
    NBT_OK(nb__devpool_private_end(p, id));
    NBT_OK(nb__devpool_free(p, a)); /* back to the private pool, not to s1's general one */
    NBT_OK(nb__devpool_free(p, l));
    void *g = NBT_CHECK(nb__devpool_alloc(p, 4096, &s1));
    void *gl = NBT_CHECK(nb__devpool_alloc(p, 12 * MIB, &s1));
    assert_ptr_not_equal(g, a);
    assert_ptr_not_equal(gl, l);
    assert_int_equal(stats(p).n_raw_allocs, 4);
    NBT_OK(nb__devpool_free(p, g));
    NBT_OK(nb__devpool_free(p, gl));
    nb__devpool_empty_cache(p); /* the general segments go; the private ones stay */
    nb_devpool_stats st = stats(p);
    assert_int_equal(st.private_reserved, 14 * MIB);
    assert_int_equal(st.reserved, 14 * MIB);
    assert_int_equal(st.n_raw_frees, 2);
    assert_int_equal(d.live_segments, 2);
    g = NBT_CHECK(nb__devpool_alloc(p, 4096, &s1)); /* and still not handed out */
    assert_ptr_not_equal(g, a);
    NBT_OK(nb__devpool_free(p, g));
    /* a later private pool on the same stream does not get them either */
    int id2 = nb__devpool_private_begin(p, &s1);
    assert_true(id2 > 0 && id2 != id);
    void *b = NBT_CHECK(nb__devpool_alloc(p, 4096, &s1));
    assert_ptr_not_equal(b, a);
    assert_int_equal(stats(p).private_reserved, 16 * MIB);
    NBT_OK(nb__devpool_private_end(p, id2));
    NBT_OK(nb__devpool_free(p, b));
    NBT_OK(nb__devpool_private_release(p, id));
    NBT_OK(nb__devpool_private_release(p, id2));
    assert_int_equal(stats(p).private_reserved, 0);
    nb__devpool_destroy(p);
    assert_int_equal(d.live_segments, 0);
}

static void test_private_capture_no_device_calls(void **state)
{
    (void)state;
    fake_dev d;
    nb_devpool *p = make_pool(&d, 30 * MIB);
    int s1, s2;
    void *big = NBT_CHECK(nb__devpool_alloc(p, 12 * MIB, NULL));
    NBT_OK(nb__devpool_free(p, big)); /* 12 MiB cached, which an OOM would normally release */
    void *x = NBT_CHECK(nb__devpool_alloc(p, 4096, &s2));
    NBT_OK(nb__devpool_record_stream(p, x, &s1));
    NBT_OK(nb__devpool_free(p, x)); /* an event pending from before the capture */
    int before = other_calls(&d);
    int id = nb__devpool_private_begin(p, &s1);
    void *a = NBT_CHECK(nb__devpool_alloc(p, 4096, &s1));
    NBT_OK(nb__devpool_record_stream(p, a, &s2));
    NBT_OK(nb__devpool_free(p, a)); /* parked: no event recorded */
    void *b = NBT_CHECK(nb__devpool_alloc(p, 4096, &s1));
    assert_ptr_not_equal(b, a); /* s2 may still use a */
    void *c = NBT_CHECK(nb__devpool_alloc(p, 4096, &s2)); /* general, beside x, which still waits */
    assert_ptr_equal(c, (char *)x + 4096);
    NBT_OK(nb__devpool_record_stream(p, c, &s1));
    NBT_OK(nb__devpool_free(p, c)); /* a general block is parked too */
    /* 16 MiB used of 30: a 20 MiB segment fits only if the cache were released, which it is not */
    NBT_FAILS(nb__devpool_alloc(p, 20 * MIB, &s1) == NULL, NB_ERR_OOM, "fake:0", "out of memory",
              "tried to allocate 20.00 MiB", NULL);
    nb__devpool_empty_cache(p); /* nothing */
    assert_int_equal(stats(p).reserved, 16 * MIB);
    assert_int_equal(other_calls(&d), before);
    assert_int_equal(d.n_raw_frees, 0);
    assert_int_equal(d.n_records, 1);
    NBT_OK(nb__devpool_private_end(p, id)); /* the parked blocks' events are recorded now */
    assert_int_equal(d.n_records, 3);
    void *e = NBT_CHECK(nb__devpool_alloc(p, 4096, &s2));
    assert_ptr_not_equal(e, c); /* the events have not completed */
    assert_ptr_not_equal(e, x);
    NBT_OK(nb__devpool_free(p, e));
    d.events_done = true;
    void *f = NBT_CHECK(nb__devpool_alloc(p, 4096, &s2)); /* they have now: x and c are reusable */
    assert_true(f == c || f == x);
    assert_int_equal(d.events_live, 0);
    NBT_OK(nb__devpool_private_release(p, id)); /* a's segment (b alive in it): general now */
    void *g = NBT_CHECK(nb__devpool_alloc(p, 4096, &s1));
    assert_ptr_equal(g, a); /* a's event completed: reusable */
    assert_int_equal(stats(p).n_raw_allocs, 3);
    NBT_OK(nb__devpool_free(p, b));
    NBT_OK(nb__devpool_free(p, f));
    NBT_OK(nb__devpool_free(p, g));
    /* destroy during a capture, with a block parked, still frees everything once */
    nb__devpool_private_begin(p, &s1);
    void *h = NBT_CHECK(nb__devpool_alloc(p, 4096, &s1));
    NBT_OK(nb__devpool_record_stream(p, h, &s2));
    NBT_OK(nb__devpool_free(p, h));
    nb__devpool_destroy(p);
    assert_int_equal(d.live_segments, 0);
    assert_int_equal(d.events_live, 0);
}

static void test_private_release(void **state)
{
    (void)state;
    fake_dev d;
    nb_devpool *p = make_pool(&d, 1024 * MIB);
    int s1;
    int id = nb__devpool_private_begin(p, &s1);
    void *a = NBT_CHECK(nb__devpool_alloc(p, 4096, &s1));    /* a 2 MiB segment */
    void *l = NBT_CHECK(nb__devpool_alloc(p, 12 * MIB, &s1)); /* a 12 MiB one */
    void *m = NBT_CHECK(nb__devpool_alloc(p, 5 * MIB, &s1));  /* a 20 MiB one */
    NBT_OK(nb__devpool_private_end(p, id));
    NBT_OK(nb__devpool_free(p, a));
    NBT_OK(nb__devpool_free(p, m));
    assert_int_equal(stats(p).private_reserved, 34 * MIB);
    NBT_OK(nb__devpool_private_release(p, id)); /* the two whole free segments go back */
    nb_devpool_stats st = stats(p);
    assert_int_equal(d.n_raw_frees, 2);
    assert_int_equal(st.n_raw_frees, 2);
    assert_int_equal(st.reserved, 12 * MIB);
    assert_int_equal(st.private_reserved, 0);
    assert_int_equal(st.allocated, 12 * MIB);
    memset(l, 3, 12 * MIB); /* still alive */
    NBT_OK(nb__devpool_free(p, l)); /* freed as any other block */
    void *g = NBT_CHECK(nb__devpool_alloc(p, 12 * MIB, &s1));
    assert_ptr_equal(g, l); /* ordinary cached memory of s1 now */
    assert_int_equal(stats(p).n_raw_allocs, 3);
    NBT_OK(nb__devpool_free(p, g));
    nb__devpool_empty_cache(p);
    assert_int_equal(stats(p).reserved, 0);
    assert_int_equal(d.live_segments, 0);
    nb__devpool_destroy(p);
}

static void test_private_errors(void **state)
{
    (void)state;
    fake_dev d;
    nb_devpool *p = make_pool(&d, 64 * MIB);
    int s1;
    int id = nb__devpool_private_begin(p, &s1);
    assert_true(id > 0);
    NBT_FAILS(nb__devpool_private_begin(p, &s1) == 0, NB_ERR_INVALID_ARG, "fake:0", "private_begin",
              "already has private pool", NULL);
    NBT_FAILS(nb__devpool_private_release(p, id) != NB_OK, NB_ERR_INVALID_ARG, "private_release",
              "still capturing", NULL);
    NBT_FAILS(nb__devpool_private_end(p, id + 7) != NB_OK, NB_ERR_INVALID_ARG, "private_end", "does not exist", NULL);
    NBT_FAILS(nb__devpool_private_release(p, 0) != NB_OK, NB_ERR_INVALID_ARG, "private_release", "does not exist",
              NULL);
    NBT_OK(nb__devpool_private_end(p, id));
    NBT_FAILS(nb__devpool_private_end(p, id) != NB_OK, NB_ERR_INVALID_ARG, "private_end", "already ended", NULL);
    NBT_OK(nb__devpool_private_release(p, id));
    NBT_FAILS(nb__devpool_private_release(p, id) != NB_OK, NB_ERR_INVALID_ARG, "private_release", "does not exist",
              NULL);
    NBT_FAILS(nb__devpool_private_end(p, id) != NB_OK, NB_ERR_INVALID_ARG, "private_end", "does not exist", NULL);
    int id2 = nb__devpool_private_begin(p, &s1); /* the stream is free again */
    assert_true(id2 > 0 && id2 != id);
    NBT_OK(nb__devpool_private_end(p, id2));
    NBT_OK(nb__devpool_private_release(p, id2));
    nb__devpool_destroy(p);
}

static void test_private_two_pools(void **state)
{
    (void)state;
    fake_dev d;
    nb_devpool *p = make_pool(&d, 1024 * MIB);
    int s1, s2;
    int id1 = nb__devpool_private_begin(p, &s1);
    int id2 = nb__devpool_private_begin(p, &s2);
    assert_true(id1 > 0 && id2 > 0 && id1 != id2);
    void *a1 = NBT_CHECK(nb__devpool_alloc(p, 4096, &s1));
    void *a2 = NBT_CHECK(nb__devpool_alloc(p, 4096, &s2));
    assert_int_equal(stats(p).n_raw_allocs, 2);
    NBT_OK(nb__devpool_private_end(p, id1));
    NBT_OK(nb__devpool_free(p, a1));
    void *b2 = NBT_CHECK(nb__devpool_alloc(p, 4096, &s2)); /* pool 2's segment, not pool 1's block */
    assert_ptr_equal(b2, (char *)a2 + 4096);
    NBT_OK(nb__devpool_free(p, a2));
    void *c2 = NBT_CHECK(nb__devpool_alloc(p, 4096, &s2));
    assert_ptr_equal(c2, a2);
    void *g1 = NBT_CHECK(nb__devpool_alloc(p, 4096, &s1)); /* s1 is general again: a new segment */
    assert_ptr_not_equal(g1, a1);
    assert_int_equal(stats(p).n_raw_allocs, 3);
    /* pool 2 still capturing: a block freed with a use elsewhere waits past pool 1's end */
    NBT_OK(nb__devpool_record_stream(p, g1, &s2));
    NBT_OK(nb__devpool_free(p, g1));
    assert_int_equal(d.n_records, 0);
    NBT_OK(nb__devpool_private_release(p, id1)); /* nothing returned while capturing */
    assert_int_equal(d.n_raw_frees, 0);
    assert_int_equal(stats(p).private_reserved, 2 * MIB);
    assert_int_equal(stats(p).reserved, 6 * MIB);
    NBT_OK(nb__devpool_private_end(p, id2));
    assert_int_equal(d.n_records, 1);
    NBT_OK(nb__devpool_free(p, b2));
    NBT_OK(nb__devpool_free(p, c2));
    NBT_OK(nb__devpool_private_release(p, id2));
    assert_int_equal(stats(p).private_reserved, 0);
    d.events_done = true;
    nb__devpool_empty_cache(p); /* all three segments are whole and general now */
    assert_int_equal(stats(p).reserved, 0);
    assert_int_equal(d.live_segments, 0);
    assert_int_equal(d.events_live, 0);
    nb__devpool_destroy(p);
}

/* The randomised test again, with private pools begun, ended and released at random on both
 * streams: live blocks never overlap, the statistics add up, nothing but raw_alloc is called
 * while a pool captures, and everything returns to the device. Memory held by private pools is
 * not released on demand, so a request may fail for lack of memory while any exists. */
static void test_private_random(void **state)
{
    (void)state;
    enum { N = 48, STEPS = 3000 };
    fake_dev d;
    nb_devpool *p = make_pool(&d, 1024 * MIB);
    int streams[2], ids[2] = {0, 0}, ended[3], n_ended = 0, calls = 0, ooms = 0;
    bool capturing[2] = {false, false};
    unsigned char *live[N] = {0};
    size_t sizes[N] = {0};
    uint64_t r = 777;
    for (int step = 0; step < STEPS; step++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        int i = (int)((r >> 33) % N), s = (int)((r >> 50) & 1);
        if (!capturing[0] && !capturing[1]) d.events_done = (r >> 20) % 3 != 0;
        if ((r >> 12) % 40 == 0) { /* begin, end or release */
            if (capturing[s]) {
                NBT_OK(nb__devpool_private_end(p, ids[s]));
                capturing[s] = false;
                if (n_ended < 3) ended[n_ended++] = ids[s];
                else NBT_OK(nb__devpool_private_release(p, ids[s]));
            } else if (n_ended && (r >> 25) & 1) {
                NBT_OK(nb__devpool_private_release(p, ended[--n_ended]));
            } else {
                if (!capturing[0] && !capturing[1]) calls = other_calls(&d);
                ids[s] = nb__devpool_private_begin(p, &streams[s]);
                assert_true(ids[s] > 0);
                capturing[s] = true;
            }
        } else if (live[i]) {
            for (size_t k = 0; k < sizes[i]; k += 97) assert_int_equal(live[i][k], (unsigned char)i);
            NBT_OK(nb__devpool_free(p, live[i]));
            live[i] = NULL;
        } else {
            size_t n = (r >> 40) % 10 < 7 ? 1 + (size_t)((r >> 8) % 20000) : 1 + (size_t)((r >> 8) % (16 * MIB));
            live[i] = nb__devpool_alloc(p, n, &streams[s]);
            if (!live[i]) {
                assert_int_equal(nb_last_status(), NB_ERR_OOM);
                assert_true(capturing[0] || capturing[1] || n_ended);
                ooms++;
                continue;
            }
            sizes[i] = n;
            memset(live[i], i, n);
            if ((r >> 55) % 5 == 0) NBT_OK(nb__devpool_record_stream(p, live[i], &streams[s ^ 1]));
        }
        size_t want = 0, slack = 0;
        for (int k = 0; k < N; k++) {
            want += live[k] ? nb__devpool_round(sizes[k]) : 0;
            slack += live[k] && sizes[k] > NB_DEVPOOL_SMALL ? NB_DEVPOOL_SMALL : 0;
        }
        nb_devpool_stats st = stats(p);
        assert_true(st.allocated >= want && st.allocated <= want + slack);
        assert_int_equal(st.reserved, d.used);
        assert_true(st.private_reserved <= st.reserved);
        if (capturing[0] || capturing[1]) assert_int_equal(other_calls(&d), calls);
    }
    assert_true(ooms < STEPS / 20);
    for (int s = 0; s < 2; s++)
        if (capturing[s]) NBT_OK(nb__devpool_private_end(p, ids[s]));
    while (n_ended) NBT_OK(nb__devpool_private_release(p, ended[--n_ended]));
    d.events_done = true;
    for (int k = 0; k < N; k++) NBT_OK(nb__devpool_free(p, live[k]));
    for (int s = 0; s < 2; s++)
        if (capturing[s]) NBT_OK(nb__devpool_private_release(p, ids[s]));
    nb__devpool_empty_cache(p);
    nb_devpool_stats st = stats(p);
    assert_int_equal(st.allocated, 0);
    assert_int_equal(st.reserved, 0);
    assert_int_equal(st.private_reserved, 0);
    assert_int_equal(d.live_segments, 0);
    assert_int_equal(d.events_live, 0);
    nb__devpool_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rounding_and_segments), cmocka_unit_test(test_reuse_split_merge),
        cmocka_unit_test(test_streams),               cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_bad_free),              cmocka_unit_test(test_random_property),
        cmocka_unit_test(test_private_routing),       cmocka_unit_test(test_private_isolation),
        cmocka_unit_test(test_private_capture_no_device_calls),
        cmocka_unit_test(test_private_release),       cmocka_unit_test(test_private_errors),
        cmocka_unit_test(test_private_two_pools),     cmocka_unit_test(test_private_random),
    };
    return NBT_RUN(tests);
}
