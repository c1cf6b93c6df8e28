/* Data: the IDX and CIFAR-10 readers (against the real Fashion-MNIST files, with values computed
 * independently by pure Python, and against crafted files), their error paths, datasets, and the
 * loader (every sample once per epoch, reproducible shuffling, drop_last, normalisation, crop and
 * flip, prefetch == synchronous, shutdown in the middle of an epoch), DistributedSampler-style
 * sharding over replicas (against the unsharded order and torch's padding), pin_memory on a CPU
 * loader and pinned memory's errors without a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/error_impl.h"
#include "data/data_impl.h"
#include "nabla/data.h"
#include "nbtest.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

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

static char g_tmp[256];

static void write_file(const char *name, const void *data, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_tmp, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static const char *tmp_path(const char *name)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", g_tmp, name);
    return path;
}

/* A uint8 IDX file: header for dims, then n data bytes (pixel k = k % 251). */
static size_t make_idx(uint8_t *buf, const uint32_t *dims, int ndim, size_t n)
{
    buf[0] = buf[1] = 0;
    buf[2] = 0x08;
    buf[3] = (uint8_t)ndim;
    size_t o = 4;
    for (int i = 0; i < ndim; i++, o += 4) {
        buf[o] = (uint8_t)(dims[i] >> 24), buf[o + 1] = (uint8_t)(dims[i] >> 16);
        buf[o + 2] = (uint8_t)(dims[i] >> 8), buf[o + 3] = (uint8_t)dims[i];
    }
    for (size_t k = 0; k < n; k++) buf[o + k] = (uint8_t)(k % 251);
    return o + n;
}

/* ---- the real Fashion-MNIST files ---------------------------------------------------------- */

/* Counts, the first labels and a few pixel sums, computed by Python's gzip module alone. */
static const char *PY =
    "import gzip,struct\n"
    "d='" FMNIST_DIR "'\n"
    "for s in ('train','t10k'):\n"
    "  im=gzip.open(d+'/'+s+'-images-idx3-ubyte.gz').read()\n"
    "  lb=gzip.open(d+'/'+s+'-labels-idx1-ubyte.gz').read()\n"
    "  n,h,w=struct.unpack('>III',im[4:16]); m=struct.unpack('>I',lb[4:8])[0]\n"
    "  print(n,m,h,w,*lb[8:18])\n"
    "  print(*[sum(im[16+i*h*w:16+(i+1)*h*w]) for i in (0,1,2,n-1)])\n";

typedef struct fm_ref {
    long n, m, h, w, labels[10], sums[4];
} fm_ref;

static void python_ref(fm_ref ref[2])
{
    const char *py = getenv("NB_PYTHON");
    char cmd[1024], script[512];
    snprintf(script, sizeof script, "%s/fm_ref.py", g_tmp);
    write_file("fm_ref.py", PY, strlen(PY));
    snprintf(cmd, sizeof cmd, "%s %s", py && access(py, X_OK) == 0 ? py : "python3", script);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    for (int s = 0; s < 2; s++) {
        fm_ref *r = &ref[s];
        assert_int_equal(fscanf(p, "%ld %ld %ld %ld", &r->n, &r->m, &r->h, &r->w), 4);
        for (int i = 0; i < 10; i++) assert_int_equal(fscanf(p, "%ld", &r->labels[i]), 1);
        for (int i = 0; i < 4; i++) assert_int_equal(fscanf(p, "%ld", &r->sums[i]), 1);
    }
    assert_int_equal(pclose(p), 0);
}

static void test_fashion_mnist_files(void **state)
{
    if (access(FMNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) /* a failure, not a skip counted as a pass */
        fail_msg("Fashion-MNIST is not in " FMNIST_DIR ": scripts/setup.sh installs it");
    fm_ref ref[2];
    python_ref(ref);
    assert_int_equal(ref[0].n, 60000);
    assert_int_equal(ref[1].n, 10000);
    const char *names[2][2] = {{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"},
                               {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}};
    for (int s = 0; s < 2; s++) {
        nb_scope *sc = nb_scope_begin();
        char p[512];
        snprintf(p, sizeof p, FMNIST_DIR "/%s", names[s][0]);
        nb_tensor *im = NBT_CHECK(nb_read_idx(p));
        snprintf(p, sizeof p, FMNIST_DIR "/%s", names[s][1]);
        nb_tensor *lb = NBT_CHECK(nb_read_idx(p));
        assert_int_equal(nb_tensor_ndim(im), 3);
        assert_int_equal(nb_tensor_dtype(im), NB_UINT8);
        assert_int_equal(nb_tensor_size(im, 0), ref[s].n);
        assert_int_equal(nb_tensor_size(im, 1), ref[s].h);
        assert_int_equal(nb_tensor_size(im, 2), ref[s].w);
        assert_int_equal(nb_tensor_size(lb, 0), ref[s].m);
        const uint8_t *px = nb_tensor_data_ptr(im), *lab = nb_tensor_data_ptr(lb);
        for (int i = 0; i < 10; i++) assert_int_equal(lab[i], ref[s].labels[i]);
        long idx[4] = {0, 1, 2, ref[s].n - 1};
        for (int k = 0; k < 4; k++) {
            long sum = 0;
            for (long j = 0; j < 784; j++) sum += px[idx[k] * 784 + j];
            assert_int_equal(sum, ref[s].sums[k]);
        }
        /* the dataset gives the same samples in [0, 1] */
        nb_dataset *d = NBT_CHECK(nb_dataset_fashion_mnist(FMNIST_DIR, s == 0));
        assert_int_equal(nb_dataset_size(d), ref[s].n);
        int nd;
        const int64_t *shape = nb_dataset_sample_shape(d, &nd);
        assert_int_equal(nd, 3);
        assert_true(shape[0] == 1 && shape[1] == 28 && shape[2] == 28);
        float x[784];
        int64_t y;
        NBT_OK(nb_dataset_get(d, ref[s].n - 1, x, &y));
        double sum = 0;
        for (int j = 0; j < 784; j++) sum += x[j];
        assert_true(fabs(sum * 255 - (double)ref[s].sums[3]) < 1e-2);
        NBT_OK(nb_dataset_get(d, 1, x, &y));
        assert_int_equal(y, ref[s].labels[1]);
        nb_dataset_free(d);
        nb_scope_end(sc);
    }
}

/* Batches of 128 per second over one epoch of Fashion-MNIST, with and without prefetch. */
static void test_fashion_mnist_throughput(void **state)
{
    if (access(FMNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0)
        fail_msg("Fashion-MNIST is not in " FMNIST_DIR ": scripts/setup.sh installs it");
    nb_dataset *d = NBT_CHECK(nb_dataset_fashion_mnist(FMNIST_DIR, true));
    for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
        nb_data_loader_params p = nb_data_loader_params_default();
        p.batch_size = 128;
        p.shuffle = true;
        p.seed = 1;
        p.prefetch = prefetch;
        p.norm_channels = 1;
        p.mean[0] = 0.2860f;
        p.std[0] = 0.3530f;
        nb_data_loader *l = NBT_CHECK(nb_data_loader_create(d, &p));
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int64_t count = 0, samples = 0;
        bool done = false;
        for (;;) {
            nb_scope *s = nb_scope_begin();
            nb_tensor *x, *y;
            NBT_OK(nb_data_loader_next(l, &x, &y, &done));
            if (!done) {
                assert_int_equal(nb_tensor_size(x, 1), 1);
                assert_int_equal(nb_tensor_size(x, 2), 28);
                samples += nb_tensor_size(y, 0);
                count++;
            }
            nb_scope_end(s);
            if (done) break;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        assert_int_equal(count, 469);
        assert_int_equal(samples, 60000);
        printf("fashion-mnist loader, batch 128, prefetch %d: %.0f batches/s\n", prefetch, (double)count / sec);
        /* with 2 ms of (sleeping) work per batch, as a training step would take */
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < 100; i++) {
            nb_tensor *x, *y;
            NBT_OK(nb_data_loader_next(l, &x, &y, &done));
            nb_tensor_free(x);
            nb_tensor_free(y);
            usleep(2000);
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        printf("  with 2 ms of work per batch: %.0f batches/s (%.2f ms per batch)\n", 100 / sec, 10 * sec);
        nb_data_loader_free(l);
    }
    nb_dataset_free(d);
}

/* ---- crafted files: values and errors ------------------------------------------------------ */

static void test_idx_crafted(void **state)
{
    uint8_t buf[256];
    uint32_t dims[2] = {3, 5};
    write_file("ok.idx", buf, make_idx(buf, dims, 2, 15));
    nb_scope *s = nb_scope_begin();
    nb_tensor *t = NBT_CHECK(nb_read_idx(tmp_path("ok.idx")));
    assert_int_equal(nb_tensor_size(t, 0), 3);
    assert_int_equal(nb_tensor_size(t, 1), 5);
    assert_int_equal(((uint8_t *)nb_tensor_data_ptr(t))[14], 14);
    /* int32 elements are big-endian in the file */
    uint8_t ib[4 + 4 + 8] = {0, 0, 0x0C, 1, 0, 0, 0, 2, 0x01, 0x02, 0x03, 0x04, 0xff, 0xff, 0xff, 0xfe};
    write_file("int.idx", ib, sizeof ib);
    t = NBT_CHECK(nb_read_idx(tmp_path("int.idx")));
    assert_int_equal(nb_tensor_dtype(t), NB_INT32);
    assert_int_equal(((int32_t *)nb_tensor_data_ptr(t))[0], 0x01020304);
    assert_int_equal(((int32_t *)nb_tensor_data_ptr(t))[1], -2);
    /* the same file gzipped */
    gzFile g = gzopen(tmp_path("ok.idx.gz"), "wb");
    assert_non_null(g);
    size_t n = make_idx(buf, dims, 2, 15);
    assert_int_equal(gzwrite(g, buf, (unsigned)n), (int)n);
    gzclose(g);
    t = NBT_CHECK(nb_read_idx(tmp_path("ok.idx.gz")));
    assert_int_equal(((uint8_t *)nb_tensor_data_ptr(t))[7], 7);
    nb_scope_end(s);
}

static void test_idx_errors(void **state)
{
    uint8_t buf[4096];
    uint32_t dims[2] = {3, 5};
    NBT_FAILS(nb_read_idx(tmp_path("missing.idx")) == NULL, NB_ERR_IO, "missing.idx", "cannot open", NULL);
    size_t n = make_idx(buf, dims, 2, 15);
    buf[0] = 0x1f;
    write_file("magic.idx", buf, n);
    NBT_FAILS(nb_read_idx(tmp_path("magic.idx")) == NULL, NB_ERR_FORMAT, "magic.idx", "bad magic", NULL);
    n = make_idx(buf, dims, 2, 15);
    buf[2] = 0x0B;
    write_file("type.idx", buf, n);
    NBT_FAILS(nb_read_idx(tmp_path("type.idx")) == NULL, NB_ERR_FORMAT, "type.idx", "0x0b", NULL);
    write_file("short.idx", buf, make_idx(buf, dims, 2, 10));
    NBT_FAILS(nb_read_idx(tmp_path("short.idx")) == NULL, NB_ERR_FORMAT, "short.idx", "[3, 5]", "15 bytes", "has 10", NULL);
    write_file("long.idx", buf, make_idx(buf, dims, 2, 16));
    NBT_FAILS(nb_read_idx(tmp_path("long.idx")) == NULL, NB_ERR_FORMAT, "long.idx", "continues past", NULL);
    write_file("hdr.idx", buf, 6);
    NBT_FAILS(nb_read_idx(tmp_path("hdr.idx")) == NULL, NB_ERR_FORMAT, "hdr.idx", "truncated header", NULL);
    write_file("empty.idx", buf, 0);
    NBT_FAILS(nb_read_idx(tmp_path("empty.idx")) == NULL, NB_ERR_FORMAT, "empty.idx", "too short", NULL);
    /* a gzip stream cut in the middle */
    uint32_t big[2] = {40, 50};
    n = make_idx(buf, big, 2, 2000);
    uLongf zn = sizeof buf;
    uint8_t z[4096];
    gzFile g = gzopen(tmp_path("full.gz"), "wb");
    gzwrite(g, buf, (unsigned)n);
    gzclose(g);
    FILE *f = fopen(tmp_path("full.gz"), "rb");
    zn = fread(z, 1, sizeof z, f);
    fclose(f);
    write_file("cut.idx.gz", z, zn / 2);
    NBT_FAILS(nb_read_idx(tmp_path("cut.idx.gz")) == NULL, NB_ERR_FORMAT, "cut.idx.gz", "truncated gzip", NULL);
    /* a flipped byte near the end breaks the CRC */
    z[zn - 6] ^= 0xff;
    write_file("crc.idx.gz", z, zn);
    NBT_FAILS(nb_read_idx(tmp_path("crc.idx.gz")) == NULL, NB_ERR_FORMAT, "crc.idx.gz", "gzip", NULL);
    NBT_FAILS(nb_read_idx(NULL) == NULL, NB_ERR_INVALID_ARG, "read_idx", NULL);
    /* a short file announcing 2^39 elements is refused before 512 GB are allocated: a plain file
     * holds its size less the header; a gzip stream at most 1032 bytes per compressed byte */
    uint32_t huge[2] = {1u << 20, 1u << 19};
    n = make_idx(buf, huge, 2, 7);
    write_file("huge.idx", buf, n);
    NBT_FAILS(nb_read_idx(tmp_path("huge.idx")) == NULL, NB_ERR_FORMAT, "huge.idx", "[1048576, 524288]",
              "need 549755813888 bytes", "has 7", NULL);
    g = gzopen(tmp_path("huge.idx.gz"), "wb");
    assert_int_equal(gzwrite(g, buf, (unsigned)n), (int)n);
    assert_int_equal(gzclose(g), Z_OK);
    NBT_FAILS(nb_read_idx(tmp_path("huge.idx.gz")) == NULL, NB_ERR_FORMAT, "huge.idx.gz", "need 549755813888 bytes",
              "more than a gzip stream", NULL);
    /* an empty shape whose other sizes overflow the strides (found by tests/fuzz) */
    uint32_t wide[4] = {0, 0xbabababau, 0xbabababau, 0xbabababau};
    write_file("wide.idx", buf, make_idx(buf, wide, 4, 0));
    NBT_FAILS(nb_read_idx(tmp_path("wide.idx")) == NULL, NB_ERR_OOM, "read_idx", "[0, 3132799674, 3132799674, 3132799674]",
              "too large", NULL);
    /* a gzip stream that really expands 1000-fold is read (the bound is not too tight) */
    uint32_t runs[1] = {200000};
    static uint8_t zeros[4 + 4 + 200000];
    n = make_idx(zeros, runs, 1, 0);
    g = gzopen(tmp_path("runs.idx.gz"), "wb9");
    assert_int_equal(gzwrite(g, zeros, (unsigned)(n + 200000)), (int)(n + 200000));
    assert_int_equal(gzclose(g), Z_OK);
    f = fopen(tmp_path("runs.idx.gz"), "rb");
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long zsize = ftell(f);
    fclose(f);
    assert_true(zsize * 200 < 200000); /* compressed more than 200-fold */
    nb_scope *s = nb_scope_begin();
    nb_tensor *t = NBT_CHECK(nb_read_idx(tmp_path("runs.idx.gz")));
    assert_int_equal(nb_tensor_numel(t), 200000);
    assert_int_equal(((uint8_t *)nb_tensor_data_ptr(t))[199999], 0);
    nb_scope_end(s);
}

static void test_mnist_dir_errors(void **state)
{
    uint8_t buf[256];
    char dir[300];
    snprintf(dir, sizeof dir, "%s/mn", g_tmp);
    assert_int_equal(mkdir(dir, 0700), 0);
    NBT_FAILS(nb_dataset_mnist(dir, true) == NULL, NB_ERR_IO, "mn/train-images-idx3-ubyte", NULL);
    uint32_t idims[3] = {3, 2, 2}, ldims[1] = {2};
    write_file("mn/train-images-idx3-ubyte", buf, make_idx(buf, idims, 3, 12));
    NBT_FAILS(nb_dataset_mnist(dir, true) == NULL, NB_ERR_IO, "train-labels-idx1-ubyte", NULL);
    write_file("mn/train-labels-idx1-ubyte", buf, make_idx(buf, ldims, 1, 2));
    NBT_FAILS(nb_dataset_mnist(dir, true) == NULL, NB_ERR_FORMAT, "3 images", "2 labels", "train-labels-idx1-ubyte", NULL);
    ldims[0] = 3;
    write_file("mn/train-labels-idx1-ubyte", buf, make_idx(buf, ldims, 1, 3));
    nb_dataset *d = NBT_CHECK(nb_dataset_mnist(dir, true));
    float x[4];
    int64_t y;
    NBT_OK(nb_dataset_get(d, 2, x, &y));
    assert_int_equal(y, 2);
    assert_true(x[3] == 11.0f / 255.0f);
    NBT_FAILS(nb_dataset_get(d, 3, x, &y) != NB_OK, NB_ERR_INVALID_ARG, "index 3", "3 samples", NULL);
    nb_dataset_free(d);
}

/* CIFAR record r: label (r * 3) % 10, pixel p = (r * 7 + p) % 256. */
static void write_cifar(const char *name, int nrec, int first)
{
    uint8_t *buf = malloc((size_t)nrec * 3073);
    for (int r = 0; r < nrec; r++) {
        buf[r * 3073] = (uint8_t)(((first + r) * 3) % 10);
        for (int p = 0; p < 3072; p++) buf[r * 3073 + 1 + p] = (uint8_t)(((first + r) * 7 + p) % 256);
    }
    write_file(name, buf, (size_t)nrec * 3073);
    free(buf);
}

static void test_cifar(void **state)
{
    char dir[300];
    snprintf(dir, sizeof dir, "%s/cf", g_tmp);
    assert_int_equal(mkdir(dir, 0700), 0);
    write_cifar("cf/test_batch.bin", 4, 0);
    nb_scope *s = nb_scope_begin();
    nb_tensor *im, *lb;
    char path[512];
    snprintf(path, sizeof path, "%s/test_batch.bin", dir);
    NBT_OK(nb_read_cifar10(path, &im, &lb));
    assert_int_equal(nb_tensor_size(im, 0), 4);
    assert_int_equal(nb_tensor_size(im, 1), 3);
    assert_int_equal(nb_tensor_dtype(lb), NB_INT64);
    const uint8_t *px = nb_tensor_data_ptr(im);
    assert_int_equal(px[3 * 3072 + 1024 + 5], (3 * 7 + 1029) % 256); /* record 3, green, pixel (0, 5) */
    assert_int_equal(((int64_t *)nb_tensor_data_ptr(lb))[3], 9);
    nb_dataset *d = NBT_CHECK(nb_dataset_cifar10(dir, false));
    assert_int_equal(nb_dataset_size(d), 4);
    float *x = malloc(3072 * sizeof(float));
    int64_t y;
    NBT_OK(nb_dataset_get(d, 2, x, &y));
    assert_int_equal(y, 6);
    assert_true(x[2048 + 33] == (float)((14 + 2048 + 33) % 256) / 255.0f);
    nb_dataset_free(d);
    /* training batches 1..5, one record each, concatenated in order */
    NBT_FAILS(nb_dataset_cifar10(dir, true) == NULL, NB_ERR_IO, "data_batch_1.bin", NULL);
    for (int i = 1; i <= 5; i++) {
        char name[64];
        snprintf(name, sizeof name, "cf/data_batch_%d.bin", i);
        write_cifar(name, 1, i);
    }
    d = NBT_CHECK(nb_dataset_cifar10(dir, true));
    assert_int_equal(nb_dataset_size(d), 5);
    NBT_OK(nb_dataset_get(d, 4, x, &y));
    assert_int_equal(y, 5);
    assert_true(x[0] == 35.0f / 255.0f);
    nb_dataset_free(d);
    free(x);
    /* errors */
    uint8_t bad[3073 * 2 + 5] = {0};
    write_file("cf/odd.bin", bad, sizeof bad);
    snprintf(path, sizeof path, "%s/odd.bin", dir);
    NBT_FAILS(nb_read_cifar10(path, &im, &lb) != NB_OK, NB_ERR_FORMAT, "odd.bin", "6151", "3073", NULL);
    assert_null(im);
    bad[3073] = 12;
    write_file("cf/label.bin", bad, 3073 * 2);
    snprintf(path, sizeof path, "%s/label.bin", dir);
    NBT_FAILS(nb_read_cifar10(path, &im, &lb) != NB_OK, NB_ERR_FORMAT, "label.bin", "record 1", "label 12", NULL);
    write_file("cf/empty.bin", bad, 0);
    snprintf(path, sizeof path, "%s/empty.bin", dir);
    NBT_FAILS(nb_read_cifar10(path, &im, &lb) != NB_OK, NB_ERR_FORMAT, "empty.bin", NULL);
    NBT_FAILS(nb_read_cifar10(tmp_path("cf/none.bin"), &im, &lb) != NB_OK, NB_ERR_IO, "none.bin", NULL);
    nb_scope_end(s);
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

static int setup(void **state)
{
    snprintf(g_tmp, sizeof g_tmp, "%s/nbdataXXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fashion_mnist_files), cmocka_unit_test(test_idx_crafted),
        cmocka_unit_test(test_idx_errors),          cmocka_unit_test(test_mnist_dir_errors),
        cmocka_unit_test(test_cifar),               cmocka_unit_test(test_user_dataset),
        cmocka_unit_test(test_loader_epochs),       cmocka_unit_test(test_loader_normalise),
        cmocka_unit_test(test_transforms),          cmocka_unit_test(test_loader_augment),
        cmocka_unit_test(test_loader_prefetch_matches), cmocka_unit_test(test_loader_free_mid_epoch),
        cmocka_unit_test(test_loader_shards),       cmocka_unit_test(test_loader_shards_by_hand),
        cmocka_unit_test(test_loader_shards_augment),
        cmocka_unit_test(test_loader_pin_memory_cpu), cmocka_unit_test(test_pin_memory_without_gpu),
        cmocka_unit_test(test_fashion_mnist_throughput),
    };
    return NBT_RUN_GROUP(tests, setup, teardown);
}
