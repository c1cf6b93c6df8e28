/* Data files: the IDX and CIFAR-10 readers (against the real Fashion-MNIST files, with values
 * computed independently by pure Python, and against crafted files) and their error paths. The
 * datasets and the loader are tests/test_loader.c. */
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
        cmocka_unit_test(test_cifar),               cmocka_unit_test(test_fashion_mnist_throughput),
    };
    return NBT_RUN_GROUP(tests, setup, teardown);
}
