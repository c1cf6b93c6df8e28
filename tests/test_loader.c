/* Datasets and the data loader: user datasets, every sample once per epoch, reproducible
 * shuffling, drop_last, normalisation, crop and flip, prefetch == synchronous, shutdown in the
 * middle of an epoch, DistributedSampler-style sharding over replicas (against the unsharded
 * order and torch's padding), pin_memory on a CPU loader and pinned memory's errors without a
 * GPU. The file readers are tests/test_data.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error_impl.h"
#include "data/data_impl.h"
#include "nabla/data.h"
#include "nbtest.h"

/* Starts epoch 1, takes one batch, and restarts the epoch: what follows must be epoch 1 whole. */
static void restart_epoch_1(nb_data_loader *l)
{
    nb_tensor *x, *y;
    bool done;
    NBT_OK(nb_data_loader_start_epoch(l, 1));
    NBT_OK(nb_data_loader_next(l, &x, &y, &done));
    nb_tensor_free(x);
    nb_tensor_free(y);
    NBT_OK(nb_data_loader_reset(l));
}

/* ---- datasets ------------------------------------------------------------------------------ */

/* x [n, 1, 2, 3]: sample i holds i * 100 + j; labels i. */
static nb_dataset *small_dataset(int64_t n)
{
    nb_scope *s = nb_scope_begin();
    float *xs = malloc(sizeof(float) * (size_t)n * 6);
    int64_t *ys = malloc(sizeof(int64_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        ys[i] = i;
        for (int j = 0; j < 6; j++) xs[i * 6 + j] = (float)(i * 100 + j);
    }
    int64_t xshape[4] = {n, 1, 2, 3};
    nb_tensor_params pi = nb_tensor_params_default();
    pi.dtype = NB_INT64;
    nb_tensor *x = NBT_CHECK(nb_tensor_from_data(xs, xshape, 4, NULL));
    nb_tensor *y = NBT_CHECK(nb_tensor_from_data(ys, &n, 1, &pi));
    nb_dataset *d = NBT_CHECK(nb_dataset_from_tensors(x, y));
    free(xs);
    free(ys);
    nb_scope_end(s);
    return d;
}

typedef struct user_ds {
    int64_t n, fail_at;
    int *freed;
} user_ds;

static int64_t user_size(void *u) { return ((user_ds *)u)->n; }
static nb_status user_get(void *u, int64_t i, float *x, int64_t *y)
{
    user_ds *d = u;
    if (i == d->fail_at) return nb__err(NB_ERR_IO, "user dataset: sample %lld is unreadable", (long long)i);
    x[0] = (float)i;
    x[1] = (float)-i;
    *y = i % 3;
    return NB_OK;
}
static void user_free(void *u) { *((user_ds *)u)->freed += 1; }

static void test_user_dataset(void **state)
{
    int freed = 0;
    user_ds u = {.n = 7, .fail_at = -1, .freed = &freed};
    nb_dataset_funcs f = {.size = user_size, .get = user_get, .free = user_free, .user = &u, .sample_ndim = 1,
                          .sample_shape = {2}};
    nb_dataset *d = NBT_CHECK(nb_dataset_create(&f));
    assert_int_equal(nb_dataset_size(d), 7);
    nb_data_loader_params p = nb_data_loader_params_default();
    p.batch_size = 4;
    nb_data_loader *l = NBT_CHECK(nb_data_loader_create(d, &p));
    assert_int_equal(nb_data_loader_len(l), 2);
    nb_scope *s = nb_scope_begin();
    nb_tensor *x, *y;
    bool done;
    NBT_OK(nb_data_loader_next(l, &x, &y, &done));
    NBT_OK(nb_data_loader_next(l, &x, &y, &done));
    assert_false(done);
    assert_int_equal(nb_tensor_size(x, 0), 3);
    assert_int_equal(nb_tensor_size(x, 1), 2);
    const float *xv = nb_tensor_data_ptr(x);
    assert_true(xv[2] == 5.0f && xv[3] == -5.0f);
    assert_int_equal(((int64_t *)nb_tensor_data_ptr(y))[2], 0);
    NBT_OK(nb_data_loader_next(l, &x, &y, &done));
    assert_true(done);
    assert_null(x);
    nb_scope_end(s);
    nb_data_loader_free(l);
    /* a failing callback: its error reaches the caller, with and without the thread */
    u.fail_at = 5;
    for (int prefetch = 0; prefetch <= 1; prefetch++) {
        p.prefetch = prefetch;
        l = NBT_CHECK(nb_data_loader_create(d, &p));
        NBT_OK(nb_data_loader_next(l, &x, &y, &done));
        nb_tensor_free(x);
        nb_tensor_free(y);
        NBT_FAILS(nb_data_loader_next(l, &x, &y, &done) != NB_OK, NB_ERR_IO, "sample 5 is unreadable", NULL);
        assert_null(x);
        assert_false(done);
        NBT_OK(nb_data_loader_next(l, &x, &y, &done));
        assert_true(done);
        nb_data_loader_free(l);
    }
    nb_dataset_free(d);
    assert_int_equal(freed, 1);
    f.get = NULL;
    NBT_FAILS(nb_dataset_create(&f) == NULL, NB_ERR_INVALID_ARG, "dataset_create", NULL);
    f.get = user_get;
    f.sample_shape[0] = 0;
    NBT_FAILS(nb_dataset_create(&f) == NULL, NB_ERR_INVALID_ARG, "sample_shape[0]", NULL);
    nb_tensor *bx = nb_zeros((int64_t[]){4, 2}, 2, NULL), *by = nb_zeros((int64_t[]){3}, 1, NULL);
    NBT_FAILS(nb_dataset_from_tensors(bx, by) == NULL, NB_ERR_SHAPE, "[4, 2]", "[3]", NULL);
    nb_tensor_free(bx);
    nb_tensor_free(by);
}

/* ---- the loader ---------------------------------------------------------------------------- */

/* One epoch's labels, in order (x checked against y: sample i holds i * 100 + j). Returns the
 * number of samples; *nb the number of batches. */
static int64_t epoch_labels(nb_data_loader *l, int64_t *labels, int64_t *nbatch)
{
    int64_t n = 0;
    *nbatch = 0;
    for (;;) {
        nb_scope *s = nb_scope_begin();
        nb_tensor *x, *y;
        bool done;
        NBT_OK(nb_data_loader_next(l, &x, &y, &done));
        if (done) {
            nb_scope_end(s);
            return n;
        }
        const float *xv = nb_tensor_data_ptr(x);
        const int64_t *yv = nb_tensor_data_ptr(y);
        for (int64_t b = 0; b < nb_tensor_size(y, 0); b++) {
            assert_true(xv[b * 6 + 4] == (float)(yv[b] * 100 + 4));
            labels[n++] = yv[b];
        }
        (*nbatch)++;
        nb_scope_end(s);
    }
}

static void test_loader_epochs(void **state)
{
    nb_dataset *d = small_dataset(10);
    for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
        nb_data_loader_params p = nb_data_loader_params_default();
        p.batch_size = 3;
        p.shuffle = true;
        p.seed = 42;
        p.prefetch = prefetch;
        nb_data_loader *l = NBT_CHECK(nb_data_loader_create(d, &p));
        assert_int_equal(nb_data_loader_len(l), 4);
        int64_t e0[10], e1[10], again[10], nbatch;
        assert_int_equal(epoch_labels(l, e0, &nbatch), 10);
        assert_int_equal(nbatch, 4);
        assert_int_equal(nb_data_loader_epoch(l), 1);
        assert_int_equal(epoch_labels(l, e1, &nbatch), 10);
        int seen[10] = {0}, seen1[10] = {0};
        for (int i = 0; i < 10; i++) seen[e0[i]]++, seen1[e1[i]]++;
        for (int i = 0; i < 10; i++) assert_true(seen[i] == 1 && seen1[i] == 1);
        assert_memory_not_equal(e0, e1, sizeof e0);
        int64_t ident[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
        assert_memory_not_equal(e0, ident, sizeof e0);
        /* the same seed and epoch give the same order, also when an epoch is resumed mid-way */
        restart_epoch_1(l);
        assert_int_equal(epoch_labels(l, again, &nbatch), 10);
        assert_memory_equal(e1, again, sizeof e1);
        nb_data_loader_free(l);
        p.drop_last = true;
        l = NBT_CHECK(nb_data_loader_create(d, &p));
        assert_int_equal(nb_data_loader_len(l), 3);
        assert_int_equal(epoch_labels(l, again, &nbatch), 9);
        assert_int_equal(nbatch, 3);
        assert_memory_equal(e0, again, 9 * sizeof(int64_t));
        nb_data_loader_free(l);
        p.seed = 43;
        l = NBT_CHECK(nb_data_loader_create(d, &p));
        epoch_labels(l, again, &nbatch);
        assert_memory_not_equal(e0, again, 9 * sizeof(int64_t));
        nb_data_loader_free(l);
        p.shuffle = false;
        l = NBT_CHECK(nb_data_loader_create(d, &p));
        epoch_labels(l, again, &nbatch);
        assert_memory_equal(ident, again, 9 * sizeof(int64_t));
        nb_data_loader_free(l);
    }
    nb_data_loader_params p = nb_data_loader_params_default();
    p.batch_size = 0;
    NBT_FAILS(nb_data_loader_create(d, &p) == NULL, NB_ERR_INVALID_ARG, "batch_size 0", NULL);
    p.batch_size = 2;
    p.norm_channels = 3;
    NBT_FAILS(nb_data_loader_create(d, &p) == NULL, NB_ERR_INVALID_ARG, "norm_channels 3", "1 channels", NULL);
    p.norm_channels = 1;
    NBT_FAILS(nb_data_loader_create(d, &p) == NULL, NB_ERR_INVALID_ARG, "std[0]", NULL);
    p.norm_channels = 0;
    p.random_crop = true;
    p.crop_size = 5;
    NBT_FAILS(nb_data_loader_create(d, &p) == NULL, NB_ERR_INVALID_ARG, "crop_size 5", "2x3", NULL);
    NBT_FAILS(nb_data_loader_create(NULL, &p) == NULL, NB_ERR_INVALID_ARG, "dataset", NULL);
    nb_dataset_free(d);
}

static void test_loader_normalise(void **state)
{
    nb_dataset *d = small_dataset(5);
    nb_data_loader_params p = nb_data_loader_params_default();
    p.batch_size = 5;
    p.norm_channels = 1;
    p.mean[0] = 100.0f;
    p.std[0] = 4.0f;
    nb_data_loader *l = NBT_CHECK(nb_data_loader_create(d, &p));
    nb_tensor *x, *y;
    bool done;
    NBT_OK(nb_data_loader_next(l, &x, &y, &done));
    const float *xv = nb_tensor_data_ptr(x);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 6; j++) assert_true(fabsf(xv[i * 6 + j] - ((float)(i * 100 + j) - 100.0f) / 4.0f) < 1e-5f);
    nb_tensor_free(x);
    nb_tensor_free(y);
    nb_data_loader_free(l);
    nb_dataset_free(d);
}

/* Images [n, 2, 4, 5] of distinct values; the same checks for prefetch 0 and 3. */
static nb_dataset *image_dataset(int64_t n)
{
    nb_scope *s = nb_scope_begin();
    int64_t shape[4] = {n, 2, 4, 5};
    nb_tensor *x = NBT_CHECK(nb_arange(1, (double)(n * 40 + 1), 1, NULL));
    x = NBT_CHECK(nb_reshape(x, shape, 4));
    nb_tensor_params pi = nb_tensor_params_default();
    pi.dtype = NB_INT64;
    nb_tensor *y = NBT_CHECK(nb_arange(0, (double)n, 1, &pi));
    nb_dataset *d = NBT_CHECK(nb_dataset_from_tensors(x, y));
    nb_scope_end(s);
    return d;
}

static void test_transforms(void **state)
{
    float img[2 * 3 * 4], a[24], b[40];
    for (int i = 0; i < 24; i++) img[i] = (float)i;
    memcpy(a, img, sizeof img);
    nb__data_hflip(a, 2, 3, 4);
    assert_true(a[0] == 3 && a[3] == 0 && a[13] == 14);
    nb__data_hflip(a, 2, 3, 4);
    assert_memory_equal(a, img, sizeof img);
    nb__data_crop(img, 2, 3, 4, 0, 0, 0, 3, 4, a);
    assert_memory_equal(a, img, sizeof img);
    /* padding 1, window at (0, 2) of the padded 5x6 image, size 4x5: row 0 is padding */
    nb__data_crop(img, 2, 3, 4, 1, 0, 2, 4, 5, b);
    assert_true(b[0] == 0 && b[4] == 0);
    assert_true(b[5] == 1 && b[6] == 2 && b[7] == 3 && b[8] == 0 && b[9] == 0);
    assert_true(b[20] == 0 && b[25] == 13);
}

/* out [c, s, s] is a window of x [c, h, w] padded by pad, possibly mirrored. */
static bool is_window(const float *x, const float *out, int64_t c, int64_t h, int64_t w, int64_t pad, int64_t sz,
                      bool *flipped)
{
    float *win = malloc(sizeof(float) * (size_t)(c * sz * sz));
    bool found = false;
    for (int64_t dy = 0; dy <= h + 2 * pad - sz && !found; dy++)
        for (int64_t dx = 0; dx <= w + 2 * pad - sz && !found; dx++)
            for (int f = 0; f < 2 && !found; f++) {
                for (int64_t k = 0; k < c; k++)
                    for (int64_t i = 0; i < sz; i++)
                        for (int64_t j = 0; j < sz; j++) {
                            int64_t si = i + dy - pad, sj = (f ? sz - 1 - j : j) + dx - pad;
                            win[(k * sz + i) * sz + j] = si >= 0 && si < h && sj >= 0 && sj < w ? x[(k * h + si) * w + sj] : 0;
                        }
                if (memcmp(win, out, sizeof(float) * (size_t)(c * sz * sz)) == 0) found = true, *flipped = f;
            }
    free(win);
    return found;
}

static void test_loader_augment(void **state)
{
    nb_dataset *d = image_dataset(64);
    nb_data_loader_params p = nb_data_loader_params_default();
    p.batch_size = 64;
    p.random_crop = true; /* padding 0, size = the image: the identity */
    p.crop_size = 0;
    nb_data_loader *l = NBT_CHECK(nb_data_loader_create(d, &p));
    nb_tensor *x, *y;
    bool done;
    NBT_OK(nb_data_loader_next(l, &x, &y, &done));
    assert_int_equal(nb_tensor_size(x, 2), 4);
    const float *xv = nb_tensor_data_ptr(x);
    for (int i = 0; i < 64 * 40; i++) assert_true(xv[i] == (float)(i + 1));
    nb_tensor_free(x);
    nb_tensor_free(y);
    nb_data_loader_free(l);
    p.crop_padding = 2;
    p.crop_size = 3;
    p.hflip = true;
    p.seed = 7;
    l = NBT_CHECK(nb_data_loader_create(d, &p));
    NBT_OK(nb_data_loader_next(l, &x, &y, &done));
    assert_int_equal(nb_tensor_size(x, 2), 3);
    assert_int_equal(nb_tensor_size(x, 3), 3);
    xv = nb_tensor_data_ptr(x);
    int nflip = 0;
    float src[40];
    for (int i = 0; i < 64; i++) {
        for (int k = 0; k < 40; k++) src[k] = (float)(i * 40 + k + 1);
        bool f = false;
        assert_true(is_window(src, xv + i * 18, 2, 4, 5, 2, 3, &f));
        nflip += f;
    }
    assert_true(nflip > 10 && nflip < 54); /* about half are mirrored */
    nb_tensor_free(x);
    nb_tensor_free(y);
    nb_data_loader_free(l);
    nb_dataset_free(d);
}

/* Two epochs of batches from a loader with shuffling, crop, flip and normalisation; *pinned:
 * whether every batch (x and y) was in pinned memory. */
static nb_tensor *all_batches(nb_dataset *d, int prefetch, bool pin, int64_t *count, bool *pinned)
{
    nb_data_loader_params p = nb_data_loader_params_default();
    p.pin_memory = pin;
    p.batch_size = 5;
    p.shuffle = p.random_crop = p.hflip = true;
    p.crop_padding = 1;
    p.seed = 99;
    p.prefetch = prefetch;
    p.norm_channels = 2;
    p.mean[0] = 3.0f, p.mean[1] = -1.0f, p.std[0] = 2.0f, p.std[1] = 0.5f;
    nb_data_loader *l = NBT_CHECK(nb_data_loader_create(d, &p));
    nb_tensor *parts[64];
    int n = 0;
    *pinned = true;
    for (int e = 0; e < 2; e++) {
        nb_tensor *x, *y;
        bool done = false;
        while (nb_data_loader_next(l, &x, &y, &done) == NB_OK && !done) {
            *pinned = *pinned && nb_tensor_is_pinned(x) && nb_tensor_is_pinned(y);
            parts[n++] = nb_flatten(x, 0, -1);
        }
    }
    *count = n;
    nb_data_loader_free(l);
    return nb_cat(parts, n, 0);
}

static void test_loader_prefetch_matches(void **state)
{
    nb_dataset *d = image_dataset(23);
    nb_scope *s = nb_scope_begin();
    int64_t n0, n3;
    bool pinned;
    nb_tensor *a = NBT_CHECK(all_batches(d, 0, false, &n0, &pinned));
    nb_tensor *b = NBT_CHECK(all_batches(d, 3, false, &n3, &pinned));
    assert_int_equal(n0, 10);
    assert_int_equal(n3, 10);
    assert_int_equal(nb_tensor_numel(a), nb_tensor_numel(b));
    assert_memory_equal(nb_tensor_data_ptr(a), nb_tensor_data_ptr(b), sizeof(float) * (size_t)nb_tensor_numel(a));
    nb_scope_end(s);
    nb_dataset_free(d);
}

/* Freeing a loader whose thread is mid-epoch, with a full queue or still working: nothing leaks
 * (the sanitizer build checks) and nothing hangs. */
static void test_loader_free_mid_epoch(void **state)
{
    nb_dataset *d = image_dataset(200);
    for (int k = 0; k < 20; k++) {
        nb_data_loader_params p = nb_data_loader_params_default();
        p.batch_size = 4;
        p.prefetch = 1 + k % 4;
        p.shuffle = true;
        nb_data_loader *l = NBT_CHECK(nb_data_loader_create(d, &p));
        for (int i = 0; i < k % 3; i++) {
            nb_tensor *x, *y;
            bool done;
            NBT_OK(nb_data_loader_next(l, &x, &y, &done));
            nb_tensor_free(x);
            nb_tensor_free(y);
        }
        if (k % 2) NBT_OK(nb_data_loader_start_epoch(l, 5));
        if (k % 5 == 0) usleep(1000);
        nb_data_loader_free(l);
    }
    nb_data_loader_free(NULL);
    nb_dataset_free(d);
}

/* ---- sharding over replicas (DistributedSampler) ------------------------------------------ */

static nb_data_loader *shard_loader(nb_dataset *d, bool shuffle, int replicas, int rank, int64_t bs, int prefetch)
{
    nb_data_loader_params p = nb_data_loader_params_default();
    p.batch_size = bs;
    p.shuffle = shuffle;
    p.seed = 5;
    p.prefetch = prefetch;
    p.num_replicas = replicas;
    p.rank = rank;
    return NBT_CHECK(nb_data_loader_create(d, &p));
}

/* For each N, R (also R > N), shuffle on and off: every rank's shard has ceil(N / R) samples in
 * len() batches; interleaved (position k of rank r at global position k R + r) the shards are the
 * unsharded loader's order of the epoch padded by wrapping, as torch's DistributedSampler pads; the
 * first N global positions hold every sample once. Two epochs each, also after start_epoch and a
 * reset in the middle of an epoch; prefetch on and off. */
static void test_loader_shards(void **state)
{
    const int64_t sizes[4] = {10, 7, 1, 3};
    for (int si = 0; si < 4; si++) {
        int64_t n = sizes[si];
        nb_dataset *d = small_dataset(n);
        for (int shuffle = 0; shuffle <= 1; shuffle++) {
            /* the unsharded order of epochs 0 and 1 */
            int64_t ref[2][10], nbatch;
            nb_data_loader *l = shard_loader(d, shuffle, 1, 0, 3, 0);
            for (int e = 0; e < 2; e++) assert_int_equal(epoch_labels(l, ref[e], &nbatch), n);
            nb_data_loader_free(l);
            if (n == 10 && shuffle) assert_memory_not_equal(ref[0], ref[1], sizeof ref[0]);
            for (int e = 0; e < 2 && !shuffle; e++)
                for (int64_t i = 0; i < n; i++) assert_int_equal(ref[e][i], i);
            for (int R = 1; R <= 4; R++) {
                int64_t per = (n + R - 1) / R, bs = 1 + (R + si) % 3;
                int64_t got[2][4][10];
                for (int r = 0; r < R; r++) {
                    int prefetch = (r + R) % 2 ? 2 : 0;
                    l = shard_loader(d, shuffle, R, r, bs, prefetch);
                    assert_int_equal(nb_data_loader_len(l), (per + bs - 1) / bs);
                    for (int e = 0; e < 2; e++) {
                        assert_int_equal(epoch_labels(l, got[e][r], &nbatch), per);
                        assert_int_equal(nbatch, nb_data_loader_len(l));
                    }
                    /* start_epoch and reset give the same shard again */
                    int64_t again[10];
                    restart_epoch_1(l);
                    assert_int_equal(epoch_labels(l, again, &nbatch), per);
                    assert_memory_equal(again, got[1][r], sizeof(int64_t) * (size_t)per);
                    NBT_OK(nb_data_loader_start_epoch(l, 0));
                    assert_int_equal(epoch_labels(l, again, &nbatch), per);
                    assert_memory_equal(again, got[0][r], sizeof(int64_t) * (size_t)per);
                    nb_data_loader_free(l);
                }
                for (int e = 0; e < 2; e++) {
                    int first[10] = {0};
                    for (int64_t k = 0; k < per; k++)
                        for (int r = 0; r < R; r++) {
                            int64_t g = k * R + r;
                            assert_int_equal(got[e][r][k], ref[e][g % n]);
                            if (g < n) first[got[e][r][k]]++;
                        }
                    for (int64_t i = 0; i < n; i++) assert_int_equal(first[i], 1);
                }
                /* the ranks see a new permutation each epoch */
                if (n == 10 && shuffle && R < 4) assert_memory_not_equal(got[0][0], got[1][0], sizeof(int64_t) * (size_t)per);
            }
        }
        nb_dataset_free(d);
    }
}

/* By hand: N = 5, R = 2, no shuffle: total 6, rank 0 takes 0, 2, 4 and rank 1 takes 1, 3 and the
 * padding 0. drop_last drops the shards' last short batch; a zeroed num_replicas counts as 1. */
static void test_loader_shards_by_hand(void **state)
{
    nb_dataset *d = small_dataset(5);
    const int64_t want[2][3] = {{0, 2, 4}, {1, 3, 0}};
    for (int r = 0; r < 2; r++) {
        nb_data_loader *l = shard_loader(d, false, 2, r, 2, r);
        int64_t got[3], nbatch;
        assert_int_equal(nb_data_loader_len(l), 2);
        assert_int_equal(epoch_labels(l, got, &nbatch), 3);
        assert_memory_equal(got, want[r], sizeof got);
        nb_data_loader_free(l);
        nb_data_loader_params p = nb_data_loader_params_default();
        p.batch_size = 2;
        p.drop_last = true;
        p.num_replicas = 2;
        p.rank = r;
        l = NBT_CHECK(nb_data_loader_create(d, &p));
        assert_int_equal(nb_data_loader_len(l), 1);
        assert_int_equal(epoch_labels(l, got, &nbatch), 2);
        assert_memory_equal(got, want[r], 2 * sizeof(int64_t));
        nb_data_loader_free(l);
    }
    nb_data_loader_params p = nb_data_loader_params_default();
    assert_int_equal(p.num_replicas, 1);
    assert_int_equal(p.rank, 0);
    p.num_replicas = 0;
    p.batch_size = 5;
    nb_data_loader *l = NBT_CHECK(nb_data_loader_create(d, &p));
    int64_t got[5], nbatch;
    assert_int_equal(epoch_labels(l, got, &nbatch), 5);
    assert_memory_equal(got, ((int64_t[]){0, 1, 2, 3, 4}), sizeof got);
    nb_data_loader_free(l);
    /* errors */
    p.num_replicas = -1;
    NBT_FAILS(nb_data_loader_create(d, &p) == NULL, NB_ERR_INVALID_ARG, "data_loader", "num_replicas -1", NULL);
    p.num_replicas = 2;
    p.rank = 2;
    NBT_FAILS(nb_data_loader_create(d, &p) == NULL, NB_ERR_INVALID_ARG, "data_loader: rank 2 is out of range for 2 replicas",
              NULL);
    p.rank = -1;
    NBT_FAILS(nb_data_loader_create(d, &p) == NULL, NB_ERR_INVALID_ARG, "data_loader", "rank -1", "2 replicas", NULL);
    p.num_replicas = 0;
    p.rank = 1;
    NBT_FAILS(nb_data_loader_create(d, &p) == NULL, NB_ERR_INVALID_ARG, "data_loader", "rank 1", "1 replicas",
              "num_replicas 0", NULL);
    nb_dataset_free(d);
}

/* Augmentation is keyed by the global position: a rank's sample k is cropped, flipped and
 * normalised exactly as the unsharded loader's sample at k R + r (for the positions before the
 * padding), so ranks draw different streams and sharding changes no sample. */
static void test_loader_shards_augment(void **state)
{
    const int64_t n = 23, sample = 40;
    nb_dataset *d = image_dataset(n);
    nb_data_loader_params p = nb_data_loader_params_default();
    p.batch_size = 4;
    p.shuffle = p.random_crop = p.hflip = true;
    p.crop_padding = 1;
    p.seed = 11;
    p.norm_channels = 2;
    p.mean[0] = 3.0f, p.mean[1] = -1.0f, p.std[0] = 2.0f, p.std[1] = 0.5f;
    for (int64_t epoch = 0; epoch < 2; epoch++) {
        nb_scope *s = nb_scope_begin();
        float *full = malloc(sizeof(float) * (size_t)(n * sample));
        int64_t lab[23];
        for (int R = 1; R <= 3; R++)
            for (int r = 0; r < R; r++) {
                nb_data_loader_params q = p;
                q.num_replicas = R;
                q.rank = r;
                q.prefetch = r % 2 ? 0 : 3;
                nb_data_loader *l = NBT_CHECK(nb_data_loader_create(d, &q));
                NBT_OK(nb_data_loader_start_epoch(l, epoch));
                int64_t k = 0;
                nb_tensor *x, *y;
                bool done;
                while (nb_data_loader_next(l, &x, &y, &done) == NB_OK && !done) {
                    const float *xv = nb_tensor_data_ptr(x);
                    const int64_t *yv = nb_tensor_data_ptr(y);
                    for (int64_t b = 0; b < nb_tensor_size(y, 0); b++, k++) {
                        int64_t g = k * R + r;
                        if (R == 1) {
                            memcpy(full + g * sample, xv + b * sample, sizeof(float) * (size_t)sample);
                            lab[g] = yv[b];
                        } else if (g < n) {
                            assert_int_equal(yv[b], lab[g]);
                            assert_memory_equal(xv + b * sample, full + g * sample, sizeof(float) * (size_t)sample);
                        }
                    }
                }
                assert_true(done);
                assert_int_equal(k, (n + R - 1) / R);
                nb_data_loader_free(l);
            }
        free(full);
        nb_scope_end(s);
    }
    nb_dataset_free(d);
}

/* pin_memory on a CPU loader: the same batches as without it; pinned CPU tensors when a GPU is
 * present, and ignored (as PyTorch's DataLoader ignores it) when there is none. */
static void test_loader_pin_memory_cpu(void **state)
{
    nb_dataset *d = image_dataset(23);
    nb_scope *s = nb_scope_begin();
    int64_t n[3];
    bool pinned[3];
    nb_tensor *a = NBT_CHECK(all_batches(d, 2, false, &n[0], &pinned[0]));
    nb_tensor *b = NBT_CHECK(all_batches(d, 2, true, &n[1], &pinned[1]));
    nb_tensor *c = NBT_CHECK(all_batches(d, 0, true, &n[2], &pinned[2]));
    for (int i = 0; i < 3; i++) assert_int_equal(n[i], 10);
    assert_false(pinned[0]);
    assert_int_equal(pinned[1], nb_cuda_is_available());
    assert_int_equal(pinned[2], nb_cuda_is_available());
    size_t nbytes = sizeof(float) * (size_t)nb_tensor_numel(a);
    assert_int_equal(nb_tensor_numel(a), 2 * 23 * 40); /* two epochs of 23 samples [2, 4, 5] */
    assert_int_equal(nb_tensor_numel(b), nb_tensor_numel(a));
    assert_int_equal(nb_tensor_numel(c), nb_tensor_numel(a));
    assert_memory_equal(nb_tensor_data_ptr(a), nb_tensor_data_ptr(b), nbytes);
    assert_memory_equal(nb_tensor_data_ptr(a), nb_tensor_data_ptr(c), nbytes);
    nb_scope_end(s);
    nb_dataset_free(d);
}

/* Pinned memory where there is no GPU: pin_memory fails naming the op, as PyTorch raises;
 * nothing is pinned; a non-blocking copy is nb_to. (With a GPU, test_cuda_pinned covers these.) */
static void test_pin_memory_without_gpu(void **state)
{
    nb_scope *s = nb_scope_begin();
    int64_t shape[2] = {2, 3};
    nb_tensor *t = NBT_CHECK(nb_ones(shape, 2, NULL));
    assert_false(nb_tensor_is_pinned(t));
    assert_false(nb_tensor_is_pinned(NULL));
    NBT_FAILS(nb_tensor_pin_memory(NULL) == NULL, NB_ERR_INVALID_ARG, "pin_memory", NULL);
    NBT_FAILS(nb_to_non_blocking(NULL, nb_cpu()) == NULL, NB_ERR_INVALID_ARG, "to_non_blocking", NULL);
    assert_ptr_equal(NBT_CHECK(nb_to_non_blocking(t, nb_cpu())), t);
    if (nb_cuda_is_available()) {
        printf("note: a GPU is present; pinned memory is checked by test_cuda_pinned\n");
        nb_scope_end(s);
        return;
    }
    const char *why = nb_cuda_is_built() ? "no CUDA device is present" : "built without CUDA";
    NBT_FAILS(nb_tensor_pin_memory(t) == NULL, NB_ERR_DEVICE, "pin_memory", why, NULL);
    nb_device cuda0 = {NB_DEVICE_CUDA, 0};
    NBT_FAILS(nb_to_non_blocking(t, cuda0) == NULL, NB_ERR_DEVICE, "cuda:0", NULL);
    /* a loader for a CUDA device fails at creation, pin_memory or not */
    nb_dataset *d = image_dataset(4);
    nb_data_loader_params p = nb_data_loader_params_default();
    p.device = cuda0;
    p.pin_memory = true;
    NBT_FAILS(nb_data_loader_create(d, &p) == NULL, NB_ERR_DEVICE, "data_loader", "cuda:0", NULL);
    p.pin_memory = false;
    NBT_FAILS(nb_data_loader_create(d, &p) == NULL, NB_ERR_DEVICE, "data_loader", "cuda:0", NULL);
    nb_dataset_free(d);
    nb_scope_end(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_user_dataset),
        cmocka_unit_test(test_loader_epochs),       cmocka_unit_test(test_loader_normalise),
        cmocka_unit_test(test_transforms),          cmocka_unit_test(test_loader_augment),
        cmocka_unit_test(test_loader_prefetch_matches), cmocka_unit_test(test_loader_free_mid_epoch),
        cmocka_unit_test(test_loader_shards),       cmocka_unit_test(test_loader_shards_by_hand),
        cmocka_unit_test(test_loader_shards_augment),
        cmocka_unit_test(test_loader_pin_memory_cpu), cmocka_unit_test(test_pin_memory_without_gpu),
    };
    return NBT_RUN(tests);
}
