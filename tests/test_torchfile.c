/* PyTorch's checkpoint format (nb_torch_save, nb_torch_load): files torch.save wrote read
 * bit-exactly (every dtype, views sharing storages, nested dicts, a module's and an optimizer's
 * state), files nabla writes read by torch.load(weights_only=True) (and mmap=True where torch has
 * it), names sharing a storage written as one storage that torch loads as shared memory, zip64
 * and deflated archives, a module checkpoint both ways, every kind of malformed file, and atomic
 * saves. PyTorch's side is tests/ref/torchfile_interop.py, run with NB_PYTHON (Debian's
 * torch 1.13 in CI; point NB_PYTHON at another interpreter to check another torch). */
#define _GNU_SOURCE
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nbtest.h"
#include "io/torchfile_impl.h"

static char g_dir[2048]; /* a fresh folder for this run's files */
static char g_bad[2100]; /* where the malformed files go */
static char g_sentinel;  /* *out starts pointing here: failures must set it to NULL */

static void path_in(char *buf, size_t size, const char *name) { snprintf(buf, size, "%s/%s", g_dir, name); }

/* Runs tests/ref/torchfile_interop.py with args; fails the test on a non-zero exit. */
static void interop(const char *args)
{
    const char *py = getenv("NB_PYTHON"), *src = getenv("NB_SOURCE_DIR");
    if (!py || !src) fail_msg("NB_PYTHON and NB_SOURCE_DIR must be set: run this test through ctest");
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "'%s' '%s/tests/ref/torchfile_interop.py' %s", py, src, args);
    int rc = system(cmd);
    if (rc != 0) fail_msg("PyTorch's side failed (status %d): %s", rc, cmd);
}

static void write_raw(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static unsigned char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

/* Asserts that got has want's dtype, shape and bytes. */
static void check_same(const nb_tensor *got, const nb_tensor *want, const char *what)
{
    assert_non_null(got);
    int nd = nb_tensor_ndim(want);
    if (nb_tensor_dtype(got) != nb_tensor_dtype(want) || nb_tensor_ndim(got) != nd ||
        (nd && memcmp(nb_tensor_shape(got), nb_tensor_shape(want), (size_t)nd * sizeof(int64_t)) != 0))
        fail_msg("%s: %s with %d dims, expected %s with %d", what, nb_dtype_name(nb_tensor_dtype(got)),
                 nb_tensor_ndim(got), nb_dtype_name(nb_tensor_dtype(want)), nd);
    size_t nbytes = (size_t)nb_tensor_numel(want) * nb_dtype_size(nb_tensor_dtype(want));
    char *a = malloc(nbytes + 1), *b = malloc(nbytes + 1);
    assert_true(a && b);
    NBT_OK(nb_tensor_read(got, a, nbytes));
    NBT_OK(nb_tensor_read(want, b, nbytes));
    int diff = memcmp(a, b, nbytes);
    free(a);
    free(b);
    if (diff) fail_msg("%s: the values differ", what);
}

/* Every tensor of want is in got, the same, and got has no others. */
static void check_maps(const nb_tensor_map *got, const nb_tensor_map *want)
{
    nb_scope *s = nb_scope_begin();
    assert_int_equal(nb_tensor_map_size(got), nb_tensor_map_size(want));
    for (int i = 0; i < nb_tensor_map_size(want); i++) {
        const char *name = nb_tensor_map_name(want, i);
        if (!nb_tensor_map_contains(got, name)) fail_msg("'%s' is missing", name);
        check_same(nb_tensor_map_get(got, name), nb_tensor_map_get(want, name), name);
    }
    nb_scope_end(s);
}

/* ---- (1) PyTorch writes, nabla reads ------------------------------------------------------- */

static void check_py_file(const char *file)
{
    char path[4096], ref[4096];
    path_in(path, sizeof path, file);
    path_in(ref, sizeof ref, "py_ref.safetensors");
    nb_tensor_map *got = NULL, *want = NULL;
    NBT_OK(nb_torch_load(path, nb_cpu(), &got));
    NBT_OK(nb_safetensors_load(ref, nb_cpu(), &want));
    check_maps(got, want);
    /* the file's order: the Python dict's, nested dicts in place */
    char *order = strdup(nb_tensor_map_metadata(want, "order"));
    int i = 0;
    for (char *save, *k = strtok_r(order, ",", &save); k; k = strtok_r(NULL, ",", &save), i++)
        assert_string_equal(nb_tensor_map_name(got, i), k);
    assert_int_equal(i, nb_tensor_map_size(got));
    free(order);
    assert_string_equal(nb_tensor_map_name(got, 0), "model.0.weight");
    assert_true(nb_tensor_map_contains(got, "model.1.num_batches_tracked"));
    assert_true(nb_tensor_map_contains(got, "optim.state.0.momentum_buffer"));
    assert_true(nb_tensor_map_contains(got, "layers.1"));
    static const char *const meta[][2] = {
        {"epoch", "3"}, {"lr", "0.001"}, {"tiny", "1e-08"}, {"big_int", "18446744073709551615"}, {"neg", "-7"},
        {"name", "run \"a\""}, {"flag", "True"}, {"nothing", "None"}, {"betas", "(0.9, 0.999)"},
        {"params", "[0, 1, 2]"}, {"empty_dict", "{}"}, {"dtype", "torch.float32"}, {"shape", "(2, 3)"},
        {"optim.param_groups.0.lr", "0.1"}, {"optim.param_groups.0.momentum", "0.9"},
        {"optim.param_groups.0.nesterov", "False"}, {"optim.param_groups.0.params", "[0, 1, 2, 3, 4, 5]"},
    };
    for (size_t k = 0; k < sizeof meta / sizeof meta[0]; k++) {
        const char *v = nb_tensor_map_metadata(got, meta[k][0]);
        if (!v || strcmp(v, meta[k][1]) != 0)
            fail_msg("%s: metadata '%s' is %s, expected %s", file, meta[k][0], v ? v : "absent", meta[k][1]);
    }
    assert_null(nb_tensor_map_metadata(got, "model._metadata")); /* the OrderedDict's attribute */
    nb_tensor_map_free(got);
    nb_tensor_map_free(want);
}

static void test_pytorch_writes(void **state)
{
    char args[4200];
    snprintf(args, sizeof args, "write '%s'", g_dir);
    interop(args); /* also the files of the later tests */
    check_py_file("py.pt");
    check_py_file("py_deflated.pt");
}

/* ---- (2) nabla writes, PyTorch reads -------------------------------------------------------- */

static nb_tensor *from(const void *data, nb_dtype dt, const int64_t *shape, int ndim)
{
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = dt;
    return NBT_CHECK(nb_tensor_from_data(data, shape, ndim, &p));
}

typedef struct named {
    const char *name;
    nb_tensor *t;
} named;

/* m with e's n tensors set under their names, listed in *keys (comma-separated). */
static nb_tensor_map *named_map(nb_tensor_map *m, const named *e, size_t n, char *keys, size_t cap)
{
    keys[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        NBT_OK(nb_tensor_map_set(m, e[i].name, e[i].t));
        if (i) strncat(keys, ",", cap - strlen(keys) - 1);
        strncat(keys, e[i].name, cap - strlen(keys) - 1);
    }
    return m;
}

/* Every dtype, a 0-d and an empty tensor, non-contiguous views; keys listed in *keys. */
static nb_tensor_map *nabla_map(char *keys, size_t cap)
{
    static const float f32[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e30f};
    static const double f64[3] = {1.0 / 3.0, -1e300, 4.9e-324};
    static const int64_t i64[4] = {INT64_MIN, INT64_MAX, -1, 0};
    static const int32_t i32[3] = {INT32_MIN, 7, INT32_MAX};
    static const uint8_t u8[4] = {0, 1, 128, 255}, b[3] = {1, 0, 1};
    static const uint16_t f16[4] = {0x3c00, 0x7c00, 0x7e00, 0x8001}, bf16[2] = {0x3f80, 0xc2f7};
    int64_t s23[2] = {2, 3}, s3[1] = {3}, s22[2] = {2, 2}, s4[1] = {4}, s2[1] = {2}, s03[2] = {0, 3};
    nb_tensor_map *m = NBT_CHECK(nb_tensor_map_create());
    nb_tensor *f = from(f32, NB_FLOAT32, s23, 2);
    named e[] = {
        {"layer.weight", f}, {"f64", from(f64, NB_FLOAT64, s3, 1)}, {"i64", from(i64, NB_INT64, s22, 2)},
        {"i32", from(i32, NB_INT32, s3, 1)}, {"u8", from(u8, NB_UINT8, s4, 1)}, {"bool", from(b, NB_BOOL, s3, 1)},
        {"f16", from(f16, NB_FLOAT16, s4, 1)}, {"bf16", from(bf16, NB_BFLOAT16, s2, 1)},
        {"scalar", from(f32 + 2, NB_FLOAT32, NULL, 0)}, {"empty", from(f32, NB_FLOAT32, s03, 2)},
        {"transposed", NBT_CHECK(nb_t(f))}, {"column", NBT_CHECK(nb_select(f, 1, 2))},
    };
    return named_map(m, e, sizeof e / sizeof e[0], keys, cap);
}

static void test_nabla_writes(void **state)
{
    nb_scope *s = nb_scope_begin();
    char keys[1024], path[4096], ref[4096], args[16384];
    nb_tensor_map *m = nabla_map(keys, sizeof keys);
    path_in(ref, sizeof ref, "nb.safetensors");
    NBT_OK(nb_safetensors_save(m, ref));
    for (int zip64 = 0; zip64 < 2; zip64++) {
        path_in(path, sizeof path, zip64 ? "nb64.pt" : "nb.pt");
        nb__zip_force_zip64 = zip64;
        NBT_OK(nb_torch_save(m, path));
        nb__zip_force_zip64 = false;
        snprintf(args, sizeof args, "check '%s' '%s' '%s'", path, ref, keys);
        interop(args);
        nb_tensor_map *back = NULL; /* and nabla reads its own file back */
        NBT_OK(nb_torch_load(path, nb_cpu(), &back));
        check_maps(back, m);
        for (int i = 0; i < nb_tensor_map_size(m); i++)
            assert_string_equal(nb_tensor_map_name(back, i), nb_tensor_map_name(m, i));
        nb_tensor_map_free(back);
    }
    /* storages at multiples of 64 bytes: each data/<key> entry's bytes */
    nb_zip z;
    path_in(path, sizeof path, "nb.pt");
    NBT_OK(nb__zip_open(&z, path));
    FILE *f = fopen(path, "rb");
    for (size_t i = 0; i < z.n; i++) {
        unsigned char h[30];
        assert_int_equal(fseek(f, (long)z.entries[i].local_offset, SEEK_SET), 0);
        assert_int_equal(fread(h, 1, 30, f), 30);
        uint64_t data = z.entries[i].local_offset + 30 + (h[26] | h[27] << 8) + (h[28] | h[29] << 8);
        if (data % 64) fail_msg("entry '%s' starts at %llu", z.entries[i].name, (unsigned long long)data);
    }
    fclose(f);
    assert_non_null(nb__zip_find(&z, "archive/byteorder"));
    assert_non_null(nb__zip_find(&z, "archive/version"));
    nb__zip_close(&z);
    nb_tensor_map_free(m);
    nb_scope_end(s);
}

/* The data/<key> entries of the archive at path, and their sizes in key order (up to 16). */
static int data_entries(const char *path, uint64_t *sizes)
{
    nb_zip z;
    NBT_OK(nb__zip_open(&z, path));
    int n = 0;
    for (size_t i = 0; i < z.n; i++) n += strncmp(z.entries[i].name, "archive/data/", 13) == 0;
    for (int k = 0; k < n && k < 16; k++) {
        char name[48];
        snprintf(name, sizeof name, "archive/data/%d", k);
        const nb_zip_entry *e = nb__zip_find(&z, name);
        if (!e) fail_msg("%s: no entry '%s' among its %d storages", path, name, n);
        sizes[k] = e->size;
    }
    nb__zip_close(&z);
    return n;
}

/* Tied weights: names sharing an nb storage (the same tensor twice, a transpose, slices) are
 * written as one storage each tensor views, as torch.save does, which torch.load gives back as
 * tensors sharing memory; the record holds the span those tensors reach. Made on dev. */
static nb_tensor_map *tied_map(nb_device dev, char *keys, size_t cap)
{
    nb_tensor_params p = nb_tensor_params_default();
    int64_t s46[2] = {4, 6}, s32[2] = {3, 2};
    nb_tensor *b = NBT_CHECK(nb_to(NBT_CHECK(nb_reshape(NBT_CHECK(nb_arange(0, 24, 1, &p)), s46, 2)), dev));
    nb_tensor *x = NBT_CHECK(nb_to(NBT_CHECK(nb_arange(100, 110, 1, &p)), dev));
    nb_tensor *other = NBT_CHECK(nb_to(NBT_CHECK(nb_reshape(NBT_CHECK(nb_arange(-6, 0, 1, &p)), s32, 2)), dev));
    p.dtype = NB_INT64;
    nb_tensor *w = NBT_CHECK(nb_to(NBT_CHECK(nb_arange(0, 5, 1, &p)), dev));
    named e[] = {
        {"embed.weight", b},                                  /* record 0: all of b's 24 floats */
        {"head.weight", NBT_CHECK(nb_t(b))},                  /* b's transpose */
        {"lonely", NBT_CHECK(nb_select(other, 0, 1))},        /* record 1: its 2 floats alone */
        {"cols", NBT_CHECK(nb_slice(b, 1, 1, 5, 2))},         /* b's columns 1 and 3: offset 1 */
        {"mid_a", NBT_CHECK(nb_slice(x, 0, 2, 5, 1))},        /* record 2: x[2:7], the 5 floats */
        {"mid_b", NBT_CHECK(nb_slice(x, 0, 4, 7, 1))},        /* the two reach; offset 2 in it */
        {"no_rows", NBT_CHECK(nb_narrow(b, 0, 0, 0))},        /* record 3: empty, alone */
        {"tied_a", w}, {"tied_b", w},                         /* record 4: one int64 tensor twice */
    };
    nb_tensor_map *m = NBT_CHECK(nb_tensor_map_create());
    return named_map(m, e, sizeof e / sizeof e[0], keys, cap);
}

static void test_shared_storages(void **state)
{
    static const uint64_t want[5] = {24 * 4, 2 * 4, 5 * 4, 0, 5 * 8};
    static const char groups[] = "embed.weight=head.weight=cols;lonely;mid_a=mid_b;no_rows;tied_a=tied_b";
    for (int gpu = 0; gpu < 2; gpu++) {
        if (gpu && !nb_cuda_is_available()) break; /* the CPU case alone, without a GPU */
        nb_scope *s = nb_scope_begin();
        char keys[1024], path[4096], ref[4096], args[16384];
        nb_tensor_map *m = tied_map(gpu ? NBT_CUDA0 : nb_cpu(), keys, sizeof keys), *back = NULL;
        path_in(path, sizeof path, "tied.pt");
        path_in(ref, sizeof ref, "tied.safetensors");
        NBT_OK(nb_torch_save(m, path));
        NBT_OK(nb_safetensors_save(m, ref));
        uint64_t sizes[16];
        assert_int_equal(data_entries(path, sizes), 5);
        for (int k = 0; k < 5; k++)
            if (sizes[k] != want[k])
                fail_msg("data/%d holds %llu bytes, expected %llu", k, (unsigned long long)sizes[k],
                         (unsigned long long)want[k]);
        NBT_OK(nb_torch_load(path, nb_cpu(), &back));
        check_maps(back, m);
        nb_tensor_map_free(back);
        snprintf(args, sizeof args, "shared '%s' '%s' '%s' '%s'", path, ref, keys, groups);
        interop(args);
        nb_tensor_map_free(m);
        nb_scope_end(s);
    }
}

/* ---- (3) nabla -> nabla: metadata, and an empty map --------------------------------------- */

static void test_roundtrip(void **state)
{
    nb_scope *s = nb_scope_begin();
    char keys[1024], path[4096];
    nb_tensor_map *m = nabla_map(keys, sizeof keys), *back = NULL;
    NBT_OK(nb_tensor_map_set_metadata(m, "epoch", "12"));
    NBT_OK(nb_tensor_map_set_metadata(m, "note", "tab\t quote\" \xc3\xa9"));
    NBT_OK(nb_tensor_map_set_metadata(m, "blank", ""));
    path_in(path, sizeof path, "roundtrip.pt");
    NBT_OK(nb_torch_save(m, path));
    NBT_OK(nb_torch_load(path, nb_cpu(), &back));
    check_maps(back, m);
    assert_string_equal(nb_tensor_map_metadata(back, "epoch"), "12");
    assert_string_equal(nb_tensor_map_metadata(back, "note"), "tab\t quote\" \xc3\xa9");
    assert_string_equal(nb_tensor_map_metadata(back, "blank"), "");
    nb_tensor_map_free(back);
    NBT_OK(nb_tensor_map_set_metadata(m, "i64", "clash"));
    NBT_FAILS(nb_torch_save(m, path) != NB_OK, NB_ERR_INVALID_ARG, "torch_save", "'i64' is also a tensor's name", NULL);
    nb_tensor_map_free(m);
    m = NBT_CHECK(nb_tensor_map_create());
    NBT_OK(nb_torch_save(m, path));
    NBT_OK(nb_torch_load(path, nb_cpu(), &back));
    assert_int_equal(nb_tensor_map_size(back), 0);
    nb_tensor_map_free(back);
    /* more than one SETITEMS batch, and memo indices past 255 are not needed: 2500 tensors */
    char name[32];
    nb_tensor *one = from((float[]){1.0f}, NB_FLOAT32, NULL, 0);
    for (int i = 0; i < 2500; i++) {
        snprintf(name, sizeof name, "t%d", i);
        NBT_OK(nb_tensor_map_set(m, name, one));
    }
    NBT_OK(nb_torch_save(m, path));
    NBT_OK(nb_torch_load(path, nb_cpu(), &back));
    check_maps(back, m);
    assert_string_equal(nb_tensor_map_name(back, 2499), "t2499");
    nb_tensor_map_free(back);
    nb_tensor_map_free(m);
    nb_scope_end(s);
}

/* ---- (4) malformed files -------------------------------------------------------------------- */

#define LOAD_FAILS(path, status, ...)                                                            \
    do {                                                                                         \
        nb_tensor_map *m_ = (nb_tensor_map *)&g_sentinel;                                        \
        NBT_FAILS(nb_torch_load(path, nb_cpu(), &m_) != NB_OK, status, "torch_load: ", __VA_ARGS__, NULL); \
        assert_null(m_);                                                                         \
    } while (0)

/* A failure of any kind, as long as it is one: a status, the op's message, *out NULL. */
static void load_fails_somehow(const char *path)
{
    nb_tensor_map *m = (nb_tensor_map *)&g_sentinel;
    nb_clear_error();
    nb_status st = nb_torch_load(path, nb_cpu(), &m);
    if (st == NB_OK) {
        nb_tensor_map_free(m);
        return;
    }
    assert_null(m);
    assert_int_equal(nb_last_status(), st);
    assert_true(strncmp(nb_last_error(), "torch_load: ", 12) == 0);
}

static void test_truncated_and_flipped(void **state)
{
    static const char *const files[] = {"nb.pt", "py_deflated.pt"};
    for (int k = 0; k < 2; k++) {
        char path[4096];
        path_in(path, sizeof path, files[k]);
        size_t n;
        unsigned char *b = read_all(path, &n);
        for (size_t len = 0; len < n; len += 1 + len / 64) {
            write_raw(g_bad, b, len);
            LOAD_FAILS(g_bad, NB_ERR_FORMAT, g_bad);
        }
        /* one byte flipped at a time (about 3000 of them): damage is found (CRC, structure) or
         * harmless (padding) */
        for (size_t i = 0; i < n; i += 1 + n / 3000) {
            b[i] ^= 0xa5;
            write_raw(g_bad, b, n);
            load_fails_somehow(g_bad);
            b[i] ^= 0xa5;
        }
        free(b);
    }
}

/* Files PyTorch wrote that nabla must refuse, each with what its message must say. */
static void test_refused_torch_files(void **state)
{
    static const struct { const char *file; nb_status st; const char *what[3]; } cases[] = {
        {"bad_int16.pt", NB_ERR_UNSUPPORTED, {"tensor 's'", "dtype int16", "torch.ShortStorage"}},
        {"bad_global.pt", NB_ERR_UNSUPPORTED, {"cannot load global mymodule.MyClass", "only dicts, lists, tuples, tensors and numbers", "GLOBAL"}},
        {"bad_top_tensor.pt", NB_ERR_UNSUPPORTED, {"holds a tensor, not a dict", NULL, NULL}},
        {"bad_legacy.pt", NB_ERR_UNSUPPORTED, {"legacy format", NULL, NULL}},
        {"bad_script.pt", NB_ERR_UNSUPPORTED, {"TorchScript", NULL, NULL}},
        {"bad_collide.pt", NB_ERR_FORMAT, {"the name 'a.b' appears twice", NULL, NULL}},
        {"bad_deflate_size.pt", NB_ERR_FORMAT, {"data/0' declares 4294967280 bytes", "deflated", NULL}},
    };
    char path[4096];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        path_in(path, sizeof path, cases[i].file);
        LOAD_FAILS(path, cases[i].st, path, cases[i].what[0], cases[i].what[1], cases[i].what[2]);
    }
    path_in(path, sizeof path, "nb.safetensors");
    LOAD_FAILS(path, NB_ERR_FORMAT, "looks like a safetensors file");
    path_in(path, sizeof path, "no_such_file.pt");
    LOAD_FAILS(path, NB_ERR_IO, path, "cannot open");
    LOAD_FAILS(g_dir, NB_ERR_IO, "not a regular file");
    nb_tensor_map *m = (nb_tensor_map *)&g_sentinel;
    NBT_FAILS(nb_torch_load(NULL, nb_cpu(), &m) != NB_OK, NB_ERR_INVALID_ARG, "torch_load: NULL path", NULL);
    assert_null(m);
    NBT_FAILS(nb_torch_load(path, nb_cpu(), NULL) != NB_OK, NB_ERR_INVALID_ARG, "torch_load: NULL out", NULL);
}

/* Loading onto a GPU when there is one; without, the no-device error. */
static void test_load_to_device(void **state)
{
    char path[4096], keys[1024];
    path_in(path, sizeof path, "nb.pt");
    nb_tensor_map *m = (nb_tensor_map *)&g_sentinel;
    if (!nb_cuda_is_available()) {
        NBT_FAILS(nb_torch_load(path, NBT_CUDA0, &m) != NB_OK, NB_ERR_DEVICE, "torch_load", path, "cuda:0", NULL);
        assert_null(m);
        return;
    }
    nb_scope *s = nb_scope_begin();
    nb_tensor_map *want = nabla_map(keys, sizeof keys);
    NBT_OK(nb_torch_load(path, NBT_CUDA0, &m));
    for (int i = 0; i < nb_tensor_map_size(m); i++)
        assert_true(nb_device_equal(nb_tensor_device(nb_tensor_map_get(m, nb_tensor_map_name(m, i))), NBT_CUDA0));
    check_maps(m, want);
    nb_tensor_map_free(m);
    nb_tensor_map_free(want);
    nb_scope_end(s);
}

/* ---- crafted archives ---------------------------------------------------------------------- */

typedef struct entry {
    const char *name;
    const void *data;
    size_t size;
} entry;

static void write_zip(const char *path, const entry *e, int n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    nb_zip_writer w = {.f = f, .tmp = path};
    for (int i = 0; i < n; i++) NBT_OK(nb__zip_add(&w, e[i].name, e[i].data, e[i].size));
    NBT_OK(nb__zip_finish(&w));
    nb__zip_writer_free(&w);
    assert_int_equal(fclose(f), 0);
}

/* A tensor w: _rebuild_tensor_v2 over storage `key` of `numel` elements of class cls. */
static void put_w_tensor(nb_json_buf *b, const char *cls, const char *key, int64_t numel, int64_t offset,
                      const int64_t *size, const int64_t *stride, int nd)
{
    nb__pk_global(b, "torch._utils", "_rebuild_tensor_v2");
    nb__pk_op(b, PK_OP_MARK);
    nb__pk_op(b, PK_OP_MARK);
    nb__pk_str(b, "storage");
    nb__pk_global(b, "torch", cls);
    nb__pk_str(b, key);
    nb__pk_str(b, "cpu");
    nb__pk_int(b, numel);
    nb__pk_op(b, PK_OP_TUPLE);
    nb__pk_op(b, PK_OP_BINPERSID);
    nb__pk_int(b, offset);
    for (int k = 0; k < 2; k++) {
        nb__pk_op(b, PK_OP_MARK);
        for (int d = 0; d < nd; d++) nb__pk_int(b, k ? stride[d] : size[d]);
        nb__pk_op(b, PK_OP_TUPLE);
    }
    nb__pk_op(b, PK_OP_NEWFALSE);
    nb__pk_global(b, "collections", "OrderedDict");
    nb__pk_op(b, PK_OP_EMPTY_TUPLE);
    nb__pk_op(b, PK_OP_REDUCE);
    nb__pk_op(b, PK_OP_TUPLE);
    nb__pk_op(b, PK_OP_REDUCE);
}

/* {"w": tensor} over a 16-byte storage "0" (4 floats: 0, 1, 2, 3), in archive folder `dir`. */
static void write_one_tensor(const char *dir, const char *cls, const char *key, int64_t numel, int64_t offset,
                             const int64_t *size, const int64_t *stride, int nd)
{
    nb_json_buf b = {0};
    nb__pk_op(&b, PK_OP_PROTO);
    nb__pk_op(&b, 2);
    nb__pk_op(&b, '}');
    nb__pk_str(&b, "w");
    put_w_tensor(&b, cls, key, numel, offset, size, stride, nd);
    nb__pk_op(&b, 's');
    nb__pk_op(&b, PK_OP_STOP);
    assert_false(b.oom);
    static const float data[4] = {0, 1, 2, 3};
    char pkl[64], st[64];
    snprintf(pkl, sizeof pkl, "%s/data.pkl", dir);
    snprintf(st, sizeof st, "%s/data/0", dir);
    entry e[] = {{pkl, b.data, b.len}, {st, data, sizeof data}};
    write_zip(g_bad, e, 2);
    nb__json_buf_free(&b);
}

/* An archive whose data.pkl is the given bytes (and a 16-byte storage "0"). */
static void write_pickle(const void *pkl, size_t n)
{
    static const float data[4] = {0};
    entry e[] = {{"archive/data.pkl", pkl, n}, {"archive/data/0", data, sizeof data}};
    write_zip(g_bad, e, 2);
}
#define PICKLE(s) write_pickle(s, sizeof(s) - 1)

static void test_crafted_tensors(void **state)
{
    int64_t s3[1] = {3}, st1[1] = {1}, s22[2] = {2, 2}, st31[2] = {3, 1}, st21[2] = {2, 1}, s4[1] = {4};
    /* a valid one in another folder name, viewing elements 1..3 */
    write_one_tensor("mystem", "FloatStorage", "0", 4, 1, s3, st1, 1);
    nb_tensor_map *m = NULL;
    NBT_OK(nb_torch_load(g_bad, nb_cpu(), &m));
    float v[3];
    nb_scope *sc = nb_scope_begin();
    NBT_OK(nb_tensor_read(nb_tensor_map_get(m, "w"), v, sizeof v));
    assert_true(v[0] == 1 && v[1] == 2 && v[2] == 3);
    nb_scope_end(sc);
    nb_tensor_map_free(m);
    write_one_tensor("archive", "FloatStorage", "0", 4, 2, s3, st1, 1);
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "tensor 'w': size [3] with stride [1] at offset 2 needs 20 bytes",
               "storage '0' (torch.FloatStorage) holds 16");
    write_one_tensor("archive", "FloatStorage", "0", 4, 0, s22, st31, 2);
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "size [2, 2] with stride [3, 1] at offset 0 needs 20 bytes");
    write_one_tensor("archive", "FloatStorage", "0", 4, 0, s22, st21, 2); /* exactly fits */
    NBT_OK(nb_torch_load(g_bad, nb_cpu(), &m));
    nb_tensor_map_free(m);
    write_one_tensor("archive", "FloatStorage", "7", 4, 0, s4, st1, 1);
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "storage '7' (torch.FloatStorage) has no entry 'archive/data/7'");
    write_one_tensor("archive", "FloatStorage", "0", 5, 0, s4, st1, 1);
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "entry 'archive/data/0' holds 16 bytes, but storage '0' declares 5 elements");
    write_one_tensor("archive", "DoubleStorage", "0", (int64_t)1 << 62, 0, s4, st1, 1);
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "declares 4611686018427387904 elements of torch.DoubleStorage");
    write_one_tensor("archive", "CharStorage", "0", 16, 0, s4, st1, 1);
    LOAD_FAILS(g_bad, NB_ERR_UNSUPPORTED, "tensor 'w': dtype int8", "torch.CharStorage");
    write_one_tensor("archive", "NotAStorage", "0", 4, 0, s4, st1, 1);
    LOAD_FAILS(g_bad, NB_ERR_UNSUPPORTED, "cannot load global torch.NotAStorage");
    int64_t huge[2] = {(int64_t)1 << 20, (int64_t)1 << 10}, st00[2] = {0, 0};
    write_one_tensor("archive", "FloatStorage", "0", 4, 0, huge, st00, 2); /* an expansion of one element */
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "more than 4 times their storages' 16");
}

static void test_crafted_pickles(void **state)
{
    PICKLE("\x80\x02\xff");
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "data.pkl: opcode (0xff) at offset 2", "unknown or unsupported opcode");
    PICKLE("\x80\x02}X\xf0\xff\xff\xff" "abc");
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "BINUNICODE (0x58) at offset 3", "a length of 4294967280 bytes runs past the end");
    PICKLE("\x80\x02}r\xff\xff\xff\xff.");
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "LONG_BINPUT", "memo index 4294967295 is far past");
    PICKLE("\x80\x02h\x05.");
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "BINGET", "memo entry 5 was never stored");
    PICKLE("\x80\x02}");
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "no STOP opcode");
    PICKLE("\x80\x02}}.");
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "2 values on the stack at the end");
    PICKLE("\x80\x02u.");
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "SETITEMS", "no MARK");
    PICKLE("\x80\x02]K\x01" "a.");
    LOAD_FAILS(g_bad, NB_ERR_UNSUPPORTED, "holds a list, not a dict");
    PICKLE("\x80\x02K\x01K\x01K\x02s.");
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "data.pkl: SETITEM", "expected a dict on the stack, found an int");
    PICKLE("\x80\x02}\x88K\x02s.");
    LOAD_FAILS(g_bad, NB_ERR_UNSUPPORTED, "a top-level dict key is a bool");
    PICKLE("\x80\x02" "cos\nsystem\n.");
    LOAD_FAILS(g_bad, NB_ERR_UNSUPPORTED, "cannot load global os.system");
    PICKLE("\x80\x02" "ctorch\nFloatStorage\n)R.");
    LOAD_FAILS(g_bad, NB_ERR_UNSUPPORTED, "calling torch.FloatStorage is not allowed");
    PICKLE("\x80\x02}X\x01\x00\x00\x00\xff)s.");
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "not valid UTF-8");
    /* a list that holds itself: the walk stops at the nesting bound */
    PICKLE("\x80\x02}X\x01\x00\x00\x00x]q\x00h\x00" "as.");
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "nesting deeper than 64 levels", "'x.0.0.0");
    /* lists sharing lists: 2^40 paths from 120 bytes */
    nb_json_buf b = {0};
    nb__json_buf_append(&b, "\x80\x02}X\x01\x00\x00\x00x]q\x00K\x01" "a0", 16);
    for (uint32_t i = 0; i < 40; i++) {
        nb__json_buf_append(&b, "](", 2);
        nb__pk_get(&b, i);
        nb__pk_get(&b, i);
        nb__json_buf_append(&b, "e", 1);
        nb__pk_put(&b, i + 1);
        if (i < 39) nb__json_buf_append(&b, "0", 1); /* POP: only the last stays */
    }
    nb__json_buf_append(&b, "s.", 2);
    write_pickle(b.data, b.len);
    nb__json_buf_free(&b);
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "shared too many times");
    /* byteorder and folder checks */
    static const char pkl[] = "\x80\x02}.";
    entry big[] = {{"archive/data.pkl", pkl, 4}, {"archive/byteorder", "big", 3}};
    write_zip(g_bad, big, 2);
    LOAD_FAILS(g_bad, NB_ERR_UNSUPPORTED, "'archive/byteorder' says \"big\"");
    entry odd[] = {{"archive/data.pkl", pkl, 4}, {"archive/byteorder", "middle", 6}};
    write_zip(g_bad, odd, 2);
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "holds \"middle\", expected \"little\"");
    entry none[] = {{"a/b/data.pkl", pkl, 4}, {"archive/version", "3\n", 2}};
    write_zip(g_bad, none, 2);
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "no '<archive>/data.pkl' entry");
    entry twice[] = {{"archive/data.pkl", pkl, 4}, {"archive/data.pkl", pkl, 4}};
    write_zip(g_bad, twice, 2);
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "entry 'archive/data.pkl' appears twice");
}

/* Damage to the zip structure itself. */
static void test_crafted_zips(void **state)
{
    char path[4096];
    path_in(path, sizeof path, "nb.pt");
    size_t n;
    unsigned char *b = read_all(path, &n);
    size_t eocd = n - 22, cd = b[eocd + 16] | b[eocd + 17] << 8 | (size_t)b[eocd + 18] << 16;
    unsigned char save[4], count = b[eocd + 10];
    memcpy(save, b + cd, 4);
    memcpy(b + cd, "XXXX", 4);
    write_raw(g_bad, b, n);
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "central directory entry 0: no header");
    memcpy(b + cd, save, 4);
    b[eocd + 19] = 0x7f; /* the directory's offset past the end */
    write_raw(g_bad, b, n);
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "does not end before its end record");
    b[eocd + 19] = 0;
    b[eocd + 10] = b[eocd + 8] = 0xff; /* more entries than the directory can hold */
    write_raw(g_bad, b, n);
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "claims 255 entries");
    b[eocd + 10] = b[eocd + 8] = count;
    b[cd + 8] = 1; /* encrypted */
    write_raw(g_bad, b, n);
    LOAD_FAILS(g_bad, NB_ERR_UNSUPPORTED, "entry 'archive/data.pkl' is encrypted");
    b[cd + 8] = 0;
    b[cd + 10] = 12; /* bzip2 */
    write_raw(g_bad, b, n);
    LOAD_FAILS(g_bad, NB_ERR_UNSUPPORTED, "compression method 12");
    b[cd + 10] = 0;
    b[200] ^= 1; /* inside data.pkl */
    write_raw(g_bad, b, n);
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "entry 'archive/data.pkl': CRC-32");
    free(b);
    write_raw(g_bad, "\x80\x02\x8a\x0alegacy-ish", 14);
    LOAD_FAILS(g_bad, NB_ERR_UNSUPPORTED, "legacy format");
    write_raw(g_bad, "", 0);
    LOAD_FAILS(g_bad, NB_ERR_FORMAT, "no end of central directory record");
}

/* ---- (5) atomic saves ---------------------------------------------------------------------- */

static void test_atomic_save(void **state)
{
    nb_scope *s = nb_scope_begin();
    char dir[2200], path[4200], keys[1024];
    path_in(dir, sizeof dir, "atomic");
    assert_int_equal(mkdir(dir, 0755), 0);
    nb_tensor_map *m = nabla_map(keys, sizeof keys), *back = NULL;
    int tmp;
    snprintf(path, sizeof path, "%s/missing/x.pt", dir);
    NBT_FAILS(nb_torch_save(m, path) != NB_OK, NB_ERR_IO, "torch_save", path, "cannot create", NULL);
    assert_int_equal(nbt_dir_entries(dir, &tmp), 0);
    snprintf(path, sizeof path, "%s/adir", dir); /* the rename fails: the temporary goes */
    assert_int_equal(mkdir(path, 0755), 0);
    NBT_FAILS(nb_torch_save(m, path) != NB_OK, NB_ERR_IO, "torch_save", "rename", NULL);
    assert_int_equal(nbt_dir_entries(dir, &tmp), 1);
    assert_int_equal(tmp, 0);
    snprintf(path, sizeof path, "%s/model.pt", dir);
    write_raw(path, "old contents, not a checkpoint", 30);
    NBT_OK(nb_torch_save(m, path));
    assert_int_equal(nbt_dir_entries(dir, &tmp), 2);
    assert_int_equal(tmp, 0);
    NBT_OK(nb_torch_load(path, nb_cpu(), &back));
    check_maps(back, m);
    nb_tensor_map_free(back);
    NBT_FAILS(nb_torch_save(NULL, path) != NB_OK, NB_ERR_INVALID_ARG, "torch_save: NULL map", NULL);
    NBT_FAILS(nb_torch_save(m, NULL) != NB_OK, NB_ERR_INVALID_ARG, "torch_save: NULL path", NULL);
    NBT_FAILS(nb_torch_save(m, "") != NB_OK, NB_ERR_INVALID_ARG, "empty path", NULL);
    nb_tensor_map_free(m);
    nb_scope_end(s);
}

/* ---- (6) module checkpoints both ways ------------------------------------------------------- */

/* nabla's cnn (conv, batch norm, linear; PyTorch's names) after two training-mode forwards, saved
 * with nb_torch_save: PyTorch loads it strictly into cases_models.cnn and gives the same output. */
static void test_module_to_torch(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_manual_seed(3);
    nb_module *net = NBT_CHECK(nb_model_create("cnn", 1, 28, 28, 10, NULL));
    int64_t shape[4] = {4, 1, 28, 28};
    for (int i = 0; i < 2; i++) NBT_CHECK(nb_module_forward(net, NBT_CHECK(nb_randn(shape, 4, NULL))));
    nb_module_train(net, false);
    nb_tensor *x = NBT_CHECK(nb_randn(shape, 4, NULL)), *y = NBT_CHECK(nb_module_forward(net, x));
    nb_tensor_map *sd = NBT_CHECK(nb_tensor_map_create()), *io = NBT_CHECK(nb_tensor_map_create());
    NBT_OK(nb_module_state_dict(net, sd));
    NBT_OK(nb_tensor_map_set(io, "x", x));
    NBT_OK(nb_tensor_map_set(io, "y", NBT_CHECK(nb_detach(y))));
    char path[4096], args[4200];
    path_in(path, sizeof path, "nb_module.pt");
    NBT_OK(nb_torch_save(sd, path));
    path_in(path, sizeof path, "nb_module_io.safetensors");
    NBT_OK(nb_safetensors_save(io, path));
    snprintf(args, sizeof args, "module '%s'", g_dir);
    interop(args);
    nb_tensor_map_free(sd);
    nb_tensor_map_free(io);
    nb_module_free(net);
    nb_scope_end(s);
}

/* PyTorch's Sequential(Conv2d, BatchNorm2d, ReLU, Flatten, Linear) state dict, saved by torch.save,
 * loads strictly into the same nabla module and gives PyTorch's output. */
static void test_module_from_torch(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_module *c[5] = {nb_conv2d_module(2, 4, 3, 3, NULL, true, NULL), nb_batch_norm2d_module(4, NULL),
                       nb_relu_module(), nb_flatten_module(1, -1), nb_linear_module(36, 3, true, NULL)};
    nb_module *net = NBT_CHECK(nb_sequential(c, 5));
    char path[4096];
    nb_tensor_map *sd = NULL, *io = NULL;
    path_in(path, sizeof path, "py_module.pt");
    NBT_OK(nb_torch_load(path, nb_cpu(), &sd));
    NBT_OK(nb_module_load_state_dict(net, sd, true));
    path_in(path, sizeof path, "py_module_io.safetensors");
    NBT_OK(nb_safetensors_load(path, nb_cpu(), &io));
    nb_module_train(net, false);
    nb_tensor *y = NBT_CHECK(nb_module_forward(net, NBT_CHECK(nb_tensor_map_get(io, "x"))));
    nbt_assert_close(y, nb_tensor_map_get(io, "y"), 1e-4, 1e-5, "the module's output");
    int64_t nbt;
    NBT_OK(nb_tensor_read(nb_module_get_buffer(nb_module_get_module(net, "1"), "num_batches_tracked"), &nbt, 8));
    assert_int_equal(nbt, 1);
    nb_tensor_map_free(sd);
    nb_tensor_map_free(io);
    nb_module_free(net);
    nb_scope_end(s);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    remove(p);
    return 0;
}

int main(void)
{
    const char *base = getenv("NB_BUILD_DIR");
    snprintf(g_dir, sizeof g_dir, "%s/test_torchfile.XXXXXX", base ? base : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror(g_dir);
        return 1;
    }
    snprintf(g_bad, sizeof g_bad, "%s/bad.pt", g_dir);
    /* in order: the first two write the files the others read */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pytorch_writes),        cmocka_unit_test(test_nabla_writes),
        cmocka_unit_test(test_shared_storages),       cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_truncated_and_flipped), cmocka_unit_test(test_refused_torch_files),
        cmocka_unit_test(test_crafted_tensors),       cmocka_unit_test(test_crafted_pickles),
        cmocka_unit_test(test_crafted_zips),          cmocka_unit_test(test_atomic_save),
        cmocka_unit_test(test_module_to_torch),       cmocka_unit_test(test_module_from_torch),
        cmocka_unit_test(test_load_to_device),
    };
    int rc = NBT_RUN(tests);
    if (!getenv("NB_KEEP_FILES")) nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
