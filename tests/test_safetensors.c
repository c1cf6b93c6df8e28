/* safetensors: reading the file PyTorch's safetensors library wrote (tests/ref/cases_io.py),
 * round trips of every dtype and of non-contiguous tensors, files nabla writes read back by
 * PyTorch, every kind of malformed file, atomic saves, the tensor map, and the JSON parser. */
#define _GNU_SOURCE
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nbtest.h"
#include "io/json_impl.h"

static char g_dir[2048];  /* a fresh folder for this run's files */
static char g_bad[2100];  /* where the malformed files go */

static char g_sentinel; /* *out starts pointing here: failures must set it to NULL */

static void path_in(char *buf, size_t size, const char *name) { snprintf(buf, size, "%s/%s", g_dir, name); }

/* ---- the cases of tests/ref/cases_io.py, recomputed here --------------------------------- */

#define ODD_NAME "odd \"name\" \\ \xc3\xa9\t\x01"

typedef struct io_case {
    const char *name;
    nb_dtype dtype;
    int ndim;
    int64_t shape[NB_MAX_DIMS];
} io_case;

/* In the order the safetensors library writes them: dtype (I64 F64 F32 I32 BF16 F16 U8 BOOL),
 * then name. */
static const io_case cases[] = {
    {"empty_int64", NB_INT64, 1, {0}},          {"int64", NB_INT64, 2, {4, 5}},
    {"int64_extremes", NB_INT64, 1, {4}},       {"dims8", NB_FLOAT64, 8, {2, 1, 2, 1, 2, 1, 2, 6}},
    {"float64", NB_FLOAT64, 2, {5, 7}},         {"empty", NB_FLOAT32, 2, {0, 3}},
    {"float32", NB_FLOAT32, 3, {2, 3, 4}},      {"scalar", NB_FLOAT32, 0, {0}},
    {"int32", NB_INT32, 2, {3, 4}},             {ODD_NAME, NB_INT32, 1, {2}},
    {"bfloat16", NB_BFLOAT16, 2, {2, 8}},       {"float16", NB_FLOAT16, 2, {4, 4}},
    {"float16_special", NB_FLOAT16, 1, {6}},    {"uint8", NB_UINT8, 2, {16, 16}},
    {"bool", NB_BOOL, 2, {3, 5}},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static int64_t case_numel(const io_case *c)
{
    int64_t n = 1;
    for (int d = 0; d < c->ndim; d++) n *= c->shape[d];
    return n;
}

/* The half with exactly the value f (a normal number or zero). */
static uint16_t half_exact(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    if ((x & 0x7fffffff) == 0) return sign;
    int e = (int)((x >> 23) & 0xff) - 127 + 15;
    assert_true(e > 0 && e < 31 && (x & 0x1fff) == 0);
    return (uint16_t)(sign | (uint32_t)e << 10 | ((x >> 13) & 0x3ff));
}

static double half_value(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return h & 0x8000 ? -v : v;
}

static uint16_t bf16_exact(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    assert_true((x & 0xffff) == 0);
    return (uint16_t)(x >> 16);
}

static float bf16_value(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* The values of a case, by the formulas of cases_io.py. */
static void case_values(const io_case *c, void *out)
{
    static const int64_t extremes[] = {INT64_MIN, INT64_MAX, -1, 0};
    static const uint16_t specials[] = {0x7c00, 0xfc00, 0x7e00, 0x0001, 0x7bff, 0x8000};
    const char *nm = c->name;
    for (int64_t i = 0, n = case_numel(c); i < n; i++) {
        if (!strcmp(nm, "float32")) ((float *)out)[i] = (float)i * 0.5f - 3.0f;
        else if (!strcmp(nm, "scalar")) ((float *)out)[i] = 42.5f;
        else if (!strcmp(nm, "float64")) ((double *)out)[i] = (double)i / 3.0;
        else if (!strcmp(nm, "dims8")) ((double *)out)[i] = (double)i;
        else if (!strcmp(nm, "int64")) ((int64_t *)out)[i] = (i - 10) * 1000000007LL * 1000000LL;
        else if (!strcmp(nm, "int64_extremes")) ((int64_t *)out)[i] = extremes[i];
        else if (!strcmp(nm, "int32")) ((int32_t *)out)[i] = (int32_t)((i - 6) * 100000007);
        else if (!strcmp(nm, ODD_NAME)) ((int32_t *)out)[i] = i ? -7 : 7;
        else if (!strcmp(nm, "uint8")) ((uint8_t *)out)[i] = (uint8_t)i;
        else if (!strcmp(nm, "bool")) ((uint8_t *)out)[i] = i % 3 == 0;
        else if (!strcmp(nm, "float16")) ((uint16_t *)out)[i] = half_exact((float)(i - 8) * 0.25f);
        else if (!strcmp(nm, "float16_special")) ((uint16_t *)out)[i] = specials[i];
        else if (!strcmp(nm, "bfloat16")) ((uint16_t *)out)[i] = bf16_exact((float)(i - 8) * 1.5f);
        else fail_msg("no formula for case '%s'", nm);
    }
}

static nb_tensor *case_tensor(const io_case *c)
{
    size_t nbytes = (size_t)case_numel(c) * nb_dtype_size(c->dtype);
    void *v = malloc(nbytes + 1);
    assert_non_null(v);
    case_values(c, v);
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = c->dtype;
    nb_tensor *t = NBT_CHECK(nb_tensor_from_data(v, c->shape, c->ndim, &p));
    free(v);
    return t;
}

/* Asserts that t has dtype, shape and exactly the bytes `want`. */
static void check_bytes(const nb_tensor *t, nb_dtype dtype, const int64_t *shape, int ndim, const void *want,
                        const char *what)
{
    assert_non_null(t);
    if (nb_tensor_dtype(t) != dtype || nb_tensor_ndim(t) != ndim ||
        (ndim && memcmp(nb_tensor_shape(t), shape, (size_t)ndim * sizeof *shape) != 0))
        fail_msg("%s: dtype %s, %d dims; expected %s, %d dims", what, nb_dtype_name(nb_tensor_dtype(t)),
                 nb_tensor_ndim(t), nb_dtype_name(dtype), ndim);
    size_t es = nb_dtype_size(dtype), nbytes = (size_t)nb_tensor_numel(t) * es;
    char *got = malloc(nbytes + 1);
    assert_non_null(got);
    NBT_OK(nb_tensor_read(t, got, nbytes));
    for (size_t i = 0; i < nbytes; i++)
        if (got[i] != ((const char *)want)[i]) {
            free(got);
            fail_msg("%s: element %zu differs", what, i / es);
        }
    free(got);
}

static void check_case(const nb_tensor_map *m, const io_case *c)
{
    nb_scope *s = nb_scope_begin();
    void *want = malloc((size_t)case_numel(c) * nb_dtype_size(c->dtype) + 1);
    assert_non_null(want);
    case_values(c, want);
    check_bytes(NBT_CHECK(nb_tensor_map_get(m, c->name)), c->dtype, c->shape, c->ndim, want, c->name);
    free(want);
    nb_scope_end(s);
}

static void ref_path(char *buf, size_t size)
{
    const char *dir = getenv("NB_REF_DIR");
    if (!dir) fail_msg("NB_REF_DIR is not set: run this test through ctest (the ref_gen fixture)");
    snprintf(buf, size, "%s/io.safetensors", dir);
}

/* (1) The file PyTorch's safetensors library wrote: every dtype, shape and value. */
static void test_load_reference(void **state)
{
    char path[4096];
    ref_path(path, sizeof path);
    nb_tensor_map *m = NULL;
    NBT_OK(nb_safetensors_load(path, nb_cpu(), &m));
    assert_int_equal(nb_tensor_map_size(m), N_CASES);
    for (int i = 0; i < N_CASES; i++) {
        assert_string_equal(nb_tensor_map_name(m, i), cases[i].name); /* file order */
        check_case(m, &cases[i]);
    }
    /* The half-precision values decoded independently of half_exact(). */
    nb_scope *s = nb_scope_begin();
    uint16_t h[16];
    NBT_OK(nb_tensor_read(nb_tensor_map_get(m, "float16"), h, sizeof h));
    for (int i = 0; i < 16; i++) assert_true(half_value(h[i]) == (i - 8) * 0.25);
    NBT_OK(nb_tensor_read(nb_tensor_map_get(m, "bfloat16"), h, sizeof h));
    for (int i = 0; i < 16; i++) assert_true(bf16_value(h[i]) == (float)(i - 8) * 1.5f);
    NBT_OK(nb_tensor_read(nb_tensor_map_get(m, "float16_special"), h, 6 * sizeof *h));
    assert_true(isinf(half_value(h[0])) && half_value(h[0]) > 0 && isnan(half_value(h[2])));
    assert_true(half_value(h[3]) == ldexp(1, -24) && half_value(h[4]) == 65504.0);
    assert_null(nb_tensor_map_metadata(m, "format"));
    nb_scope_end(s);
    nb_tensor_map_free(m);
}

/* ---- (2) round trips ------------------------------------------------------------------------ */

/* Non-contiguous views of the cases, with their values computed by hand. */
static void add_views(nb_tensor_map *m, nb_tensor_map *want)
{
    float f32[24], f32_t[24];
    uint16_t f16[16], f16_t[16], bf[16], bf_s[6];
    uint8_t b[15], b_t[15];
    int32_t i32[12], i32_s[3];
    int64_t ext[4], ext_e[12];
    case_values(&cases[6], f32);
    case_values(&cases[11], f16);
    case_values(&cases[10], bf);
    case_values(&cases[14], b);
    case_values(&cases[8], i32);
    case_values(&cases[2], ext);
    for (int a = 0; a < 4; a++)
        for (int k = 0; k < 3; k++)
            for (int c = 0; c < 2; c++) f32_t[(a * 3 + k) * 2 + c] = f32[c * 12 + k * 4 + a];
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++) f16_t[r * 4 + c] = f16[c * 4 + r];
    for (int r = 0; r < 2; r++)
        for (int j = 0; j < 3; j++) bf_s[r * 3 + j] = bf[r * 8 + 1 + 3 * j];
    for (int r = 0; r < 5; r++)
        for (int c = 0; c < 3; c++) b_t[r * 3 + c] = b[c * 5 + r];
    for (int r = 0; r < 3; r++) i32_s[r] = i32[r * 4 + 2];
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++) ext_e[r * 4 + c] = ext[c];
    nb_tensor *src[N_CASES];
    for (int i = 0; i < N_CASES; i++) src[i] = case_tensor(&cases[i]);
    int64_t sh_e[2] = {3, 4};
    struct { const char *name; nb_tensor *view; const void *values; } views[] = {
        {"v_float32_t", nb_transpose(src[6], 0, 2), f32_t},
        {"v_float16_t", nb_t(src[11]), f16_t},
        {"v_bfloat16_slice", nb_slice(src[10], 1, 1, 8, 3), bf_s},
        {"v_bool_t", nb_t(src[14]), b_t},
        {"v_int32_select", nb_select(src[8], 1, 2), i32_s},
        {"v_int64_expand", nb_expand(src[2], sh_e, 2), ext_e},
    };
    for (size_t i = 0; i < sizeof views / sizeof views[0]; i++) {
        nb_tensor *v = NBT_CHECK(views[i].view);
        assert_false(nb_tensor_is_contiguous(v));
        NBT_OK(nb_tensor_map_set(m, views[i].name, v));
        nb_tensor_params p = nb_tensor_params_default();
        p.dtype = nb_tensor_dtype(v);
        NBT_OK(nb_tensor_map_set(want, views[i].name,
                                 NBT_CHECK(nb_tensor_from_data(views[i].values, nb_tensor_shape(v), nb_tensor_ndim(v), &p))));
    }
    /* A strided copy from the test library, of float64 */
    NBT_OK(nb_tensor_map_set(m, "v_float64_noncontig", nbt_noncontig(src[4])));
    NBT_OK(nb_tensor_map_set(want, "v_float64_noncontig", src[4]));
    for (int i = 0; i < N_CASES; i++) {
        NBT_OK(nb_tensor_map_set(m, cases[i].name, src[i]));
        NBT_OK(nb_tensor_map_set(want, cases[i].name, src[i]));
    }
}

static void test_roundtrip(void **state)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor_map *m = NBT_CHECK(nb_tensor_map_create()), *want = NBT_CHECK(nb_tensor_map_create());
    add_views(m, want);
    NBT_OK(nb_tensor_map_set_metadata(m, "format", "pt"));
    NBT_OK(nb_tensor_map_set_metadata(m, "note", "tab\t quote\" back\\slash \xc3\xa9 \x01"));
    NBT_OK(nb_tensor_map_set_metadata(m, "empty", ""));
    char path[4096];
    path_in(path, sizeof path, "roundtrip.safetensors");
    NBT_OK(nb_safetensors_save(m, path));
    nb_tensor_map *got = NULL;
    NBT_OK(nb_safetensors_load(path, nb_cpu(), &got));
    assert_int_equal(nb_tensor_map_size(got), nb_tensor_map_size(want));
    for (int i = 0; i < nb_tensor_map_size(want); i++) {
        const char *name = nb_tensor_map_name(want, i);
        nb_tensor *w = nb_tensor_map_get(want, name), *g = NBT_CHECK(nb_tensor_map_get(got, name));
        assert_true(nb_tensor_is_contiguous(g));
        char *wb = malloc((size_t)nb_tensor_numel(w) * nb_dtype_size(nb_tensor_dtype(w)) + 1);
        assert_non_null(wb);
        NBT_OK(nb_tensor_read(w, wb, (size_t)nb_tensor_numel(w) * nb_dtype_size(nb_tensor_dtype(w))));
        check_bytes(g, nb_tensor_dtype(w), nb_tensor_shape(w), nb_tensor_ndim(w), wb, name);
        free(wb);
    }
    /* File order: dtype (widest first), then name: the reference cases keep their order. */
    for (int i = 0, k = 0; i < nb_tensor_map_size(got); i++)
        if (strncmp(nb_tensor_map_name(got, i), "v_", 2) != 0) assert_string_equal(nb_tensor_map_name(got, i), cases[k++].name);
    assert_string_equal(nb_tensor_map_metadata(got, "format"), "pt");
    assert_string_equal(nb_tensor_map_metadata(got, "note"), "tab\t quote\" back\\slash \xc3\xa9 \x01");
    assert_string_equal(nb_tensor_map_metadata(got, "empty"), "");
    /* The header: metadata first, padded to 8 bytes. */
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char head[24];
    assert_int_equal(fread(head, 1, sizeof head, f), sizeof head);
    fclose(f);
    assert_int_equal(head[0] % 8, 0);
    assert_memory_equal(head + 8, "{\"__metadata__\":{", 16);
    /* An empty map makes a valid file too. */
    nb_tensor_map *empty = NBT_CHECK(nb_tensor_map_create()), *back = NULL;
    NBT_OK(nb_safetensors_save(empty, path));
    NBT_OK(nb_safetensors_load(path, nb_cpu(), &back));
    assert_int_equal(nb_tensor_map_size(back), 0);
    nb_tensor_map_free(back);
    nb_tensor_map_free(empty);
    nb_tensor_map_free(got);
    nb_tensor_map_free(want);
    nb_tensor_map_free(m);
    nb_scope_end(s);
}

/* ---- (3) files nabla writes, read by PyTorch's safetensors library ------------------------ */

static const char *interop_script =
    "import json, os, struct, sys\n"
    "import torch\n"
    "from safetensors import safe_open\n"
    "from safetensors.torch import load_file, save_file\n"
    "path, refdir = sys.argv[1], sys.argv[2]\n"
    "sys.path.insert(0, refdir)\n"
    "import cases_io\n"
    "want = cases_io.build()\n"
    "want['float32_t'] = want['float32'].transpose(0, 2)\n"
    "want['float16_t'] = want['float16'].t()\n"
    "got = load_file(path)\n"
    "raw = lambda t: t.contiguous().reshape(-1).view(torch.uint8).tolist()\n"
    "errors = []\n"
    "if sorted(got) != sorted(want): errors.append('names %r != %r' % (sorted(got), sorted(want)))\n"
    "for k, w in want.items():\n"
    "    g = got.get(k)\n"
    "    if g is not None and (g.dtype != w.dtype or g.shape != w.shape or raw(g) != raw(w)):\n"
    "        errors.append('%r: %s %s, expected %s %s' % (k, g.dtype, tuple(g.shape), w.dtype, tuple(w.shape)))\n"
    "with safe_open(path, 'pt') as f:\n"
    "    meta = f.metadata()\n"
    "if meta != {'format': 'pt', 'note': 'tab\\tquote\"\\u00e9'}: errors.append('metadata %r' % meta)\n"
    "ref = path + '.ref'\n"
    "save_file({k: v.contiguous() for k, v in want.items()}, ref, metadata=meta)\n"
    "def split(p):\n"
    "    b = open(p, 'rb').read()\n"
    "    n = struct.unpack('<Q', b[:8])[0]\n"
    "    return n, json.loads(b[8:8 + n]), b[8 + n:]\n"
    "(na, ha, da), (nb, hb, db) = split(path), split(ref)\n"
    "os.remove(ref)\n"
    "if na != nb or ha != hb or list(ha) != list(hb) or da != db:\n"
    "    errors.append('not what safetensors writes: header %d vs %d bytes, same JSON %s, same data %s'\n"
    "                  % (na, nb, ha == hb, da == db))\n"
    "print('\\n'.join(errors) if errors else 'interop: PyTorch read the file nabla wrote')\n"
    "sys.exit(1 if errors else 0)\n";

static void test_interop_pytorch(void **state)
{
    const char *py = getenv("NB_PYTHON"), *src = getenv("NB_SOURCE_DIR");
    if (!py || !src) fail_msg("NB_PYTHON and NB_SOURCE_DIR must be set: run this test through ctest");
    nb_scope *s = nb_scope_begin();
    nb_tensor_map *m = NBT_CHECK(nb_tensor_map_create());
    nb_tensor *f32 = NULL, *f16 = NULL;
    for (int i = 0; i < N_CASES; i++) {
        nb_tensor *t = case_tensor(&cases[i]);
        NBT_OK(nb_tensor_map_set(m, cases[i].name, t));
        if (!strcmp(cases[i].name, "float32")) f32 = t;
        if (!strcmp(cases[i].name, "float16")) f16 = t;
    }
    NBT_OK(nb_tensor_map_set(m, "float32_t", NBT_CHECK(nb_transpose(f32, 0, 2))));
    NBT_OK(nb_tensor_map_set(m, "float16_t", NBT_CHECK(nb_t(f16))));
    NBT_OK(nb_tensor_map_set_metadata(m, "format", "pt"));
    NBT_OK(nb_tensor_map_set_metadata(m, "note", "tab\tquote\"\xc3\xa9"));
    char path[4096], script[4096], cmd[16384];
    path_in(path, sizeof path, "interop.safetensors");
    path_in(script, sizeof script, "interop_check.py");
    NBT_OK(nb_safetensors_save(m, path));
    FILE *f = fopen(script, "w");
    assert_non_null(f);
    fputs(interop_script, f);
    fclose(f);
    assert_true(!strchr(py, '\'') && !strchr(src, '\'') && !strchr(g_dir, '\''));
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' '%s/tests/ref'", py, script, path, src);
    int rc = system(cmd);
    if (rc != 0) fail_msg("PyTorch's check of %s failed (status %d): %s", path, rc, cmd);
    nb_tensor_map_free(m);
    nb_scope_end(s);
}

/* ---- (4) malformed files ------------------------------------------------------------------ */

static void write_raw(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* An 8-byte size (`size`, or the header's length when size is -1), the header, `data` zero bytes. */
static void write_st(const char *path, const char *header, size_t hlen, long long size, size_t data)
{
    size_t n = 8 + hlen + data;
    unsigned char *b = calloc(n, 1);
    assert_non_null(b);
    uint64_t v = size < 0 ? (uint64_t)hlen : (uint64_t)size;
    for (int k = 0; k < 8; k++) b[k] = (unsigned char)(v >> (8 * k));
    memcpy(b + 8, header, hlen);
    write_raw(path, b, n);
    free(b);
}

#define LOAD_FAILS(status, ...)                                                                  \
    do {                                                                                         \
        nb_tensor_map *m_ = (nb_tensor_map *)&g_sentinel;                                        \
        NBT_FAILS(nb_safetensors_load(g_bad, nb_cpu(), &m_) != NB_OK, status, __VA_ARGS__, NULL); \
        assert_null(m_);                                                                         \
    } while (0)
#define BAD(header, data, ...)                                                                   \
    do {                                                                                         \
        write_st(g_bad, header, strlen(header), -1, data);                                       \
        LOAD_FAILS(NB_ERR_FORMAT, g_bad, __VA_ARGS__);                                           \
    } while (0)
/* A one-tensor header {"w": {<entry>}}. */
#define W(entry) "{\"w\":{" entry "}}"
#define F32_2 "\"dtype\":\"F32\",\"shape\":[2],"

static void test_bad_sizes(void **state)
{
    write_raw(g_bad, "", 0);
    LOAD_FAILS(NB_ERR_FORMAT, g_bad, "0 bytes, shorter than the 8-byte header size");
    write_raw(g_bad, "\x10\0\0\0\0", 5);
    LOAD_FAILS(NB_ERR_FORMAT, g_bad, "5 bytes");
    write_st(g_bad, "{}", 2, 1LL << 40, 0);
    LOAD_FAILS(NB_ERR_FORMAT, g_bad, "header size 1099511627776 is larger than the limit");
    write_st(g_bad, "{}", 2, 100, 10);
    LOAD_FAILS(NB_ERR_FORMAT, g_bad, "header size 100 runs past the end of the file (20 bytes)");
    write_st(g_bad, "", 0, -1, 0);
    LOAD_FAILS(NB_ERR_FORMAT, g_bad, "does not start with '{'");
    char missing[4096];
    path_in(missing, sizeof missing, "no_such_file.safetensors");
    nb_tensor_map *m = (nb_tensor_map *)&g_sentinel;
    NBT_FAILS(nb_safetensors_load(missing, nb_cpu(), &m) != NB_OK, NB_ERR_IO, missing, "cannot open", NULL);
    assert_null(m);
    NBT_FAILS(nb_safetensors_load(g_dir, nb_cpu(), &m) != NB_OK, NB_ERR_IO, g_dir, "not a regular file", NULL);
    NBT_FAILS(nb_safetensors_load(NULL, nb_cpu(), &m) != NB_OK, NB_ERR_INVALID_ARG, "safetensors_load", NULL);
    NBT_FAILS(nb_safetensors_load(g_bad, nb_cpu(), NULL) != NB_OK, NB_ERR_INVALID_ARG, "safetensors_load", NULL);
}

static void test_bad_json(void **state)
{
    BAD("{\"a\":", 0, "not valid JSON", "expected a value");
    BAD("[1,2]", 0, "does not start with '{'");
    BAD(" {}", 0, "does not start with '{'");
    BAD("{} x", 0, "not valid JSON", "trailing characters");
    write_st(g_bad, "{}\0   ", 6, -1, 0);
    LOAD_FAILS(NB_ERR_FORMAT, g_bad, "not valid JSON", "trailing characters");
    BAD("{\"a\":1,}", 0, "not valid JSON", "expected a string key");
    BAD("{\"\\x\":1}", 0, "not valid JSON", "bad escape");
    BAD("{\"\\ud800\":1}", 0, "not valid JSON", "surrogate");
    BAD("{\"\xff\":1}", 0, "invalid UTF-8");
    BAD("{\"a\x01\":1}", 0, "control character");
    BAD("{\"abc", 0, "unterminated string");
    BAD("{\xff}", 0, "expected a string key, found byte 0xff");
    BAD(W(F32_2 "\"data_offsets\":[0,08]"), 8, "leading zero");
    char deep[300] = "{\"__metadata__\":";
    for (int i = 0; i < 100; i++) strcat(deep, "[");
    BAD(deep, 0, "nesting deeper than 64 levels");
    /* Trailing spaces (the writer's padding) are fine: an empty file. */
    write_st(g_bad, "{}      ", 8, -1, 0);
    nb_tensor_map *m = NULL;
    NBT_OK(nb_safetensors_load(g_bad, nb_cpu(), &m));
    assert_int_equal(nb_tensor_map_size(m), 0);
    nb_tensor_map_free(m);
}

static void test_bad_entries(void **state)
{
    BAD("{\"w\":5}", 0, "tensor 'w': expected an object with dtype, shape and data_offsets, found an integer");
    BAD(W("\"shape\":[2],\"data_offsets\":[0,8]"), 8, "tensor 'w': missing \"dtype\"");
    BAD(W("\"dtype\":\"F32\",\"data_offsets\":[0,8]"), 8, "tensor 'w': missing \"shape\"");
    BAD(W("\"dtype\":\"F32\",\"shape\":[2]"), 8, "tensor 'w': missing \"data_offsets\"");
    BAD(W(F32_2 "\"dtype\":\"F32\",\"data_offsets\":[0,8]"), 8, "\"dtype\" appears 2 times");
    BAD(W("\"dtype\":5,\"shape\":[2],\"data_offsets\":[0,8]"), 8, "\"dtype\" must be a string, found an integer");
    BAD(W("\"dtype\":\"F32\",\"shape\":\"x\",\"data_offsets\":[0,8]"), 8, "\"shape\" must be an array, found a string");
    BAD(W(F32_2 "\"data_offsets\":{}"), 8, "\"data_offsets\" must be an array, found an object");
    BAD(W("\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[0,4]"), 4, "tensor 'w'", "dtype \"I16\"");
    BAD(W("\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]"), 2, "dtype \"F8_E4M3\"");
    BAD(W("\"dtype\":\"F32\",\"shape\":[-1,3],\"data_offsets\":[0,8]"), 8, "non-negative integers, found -1");
    BAD(W("\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]"), 8, "non-negative integers, found 2.5");
    BAD(W("\"dtype\":\"F32\",\"shape\":[1e2],\"data_offsets\":[0,8]"), 8, "found 1e2");
    BAD(W("\"dtype\":\"F32\",\"shape\":[null],\"data_offsets\":[0,8]"), 8, "found null");
    BAD(W("\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]"), 4, "shape has 9 dims");
    BAD(W("\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],\"data_offsets\":[0,4]"), 4,
        "shape [4294967296, 4294967296, 4] has too many elements");
    BAD(W("\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,8]"), 8,
        "shape [4611686018427387904] of F64 is too large");
    BAD(W(F32_2 "\"data_offsets\":[0]"), 8, "data_offsets must be [begin, end], found 1 values");
    BAD(W(F32_2 "\"data_offsets\":[-4,4]"), 8, "data_offsets must hold non-negative integers, found -4");
    BAD(W(F32_2 "\"data_offsets\":[0,99999999999999999999]"), 8, "found 99999999999999999999");
    BAD(W(F32_2 "\"data_offsets\":[8,0]"), 8, "data_offsets [8, 0] end before they begin");
    BAD(W("\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,12]"), 12,
        "safetensors_load: ", ": tensor 'w': data_offsets [0, 12] do not match shape [2, 3] of F32 (24 bytes)");
    BAD(W("\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]"), 12,
        "tensor 'w': data_offsets [0, 24] run past the end of the data buffer (12 bytes)");
    BAD("{\"\":{" F32_2 "\"data_offsets\":[0,8]}}", 8, "empty name");
    BAD("{\"a\\u0000b\":{" F32_2 "\"data_offsets\":[0,8]}}", 8, "NUL character");
}

static void test_bad_layout(void **state)
{
    BAD("{\"a\":{" F32_2 "\"data_offsets\":[0,8]},\"b\":{" F32_2 "\"data_offsets\":[4,12]}}", 12,
        "tensor 'b': data_offsets [4, 12] overlap those of tensor 'a' [0, 8]");
    BAD("{\"a\":{" F32_2 "\"data_offsets\":[0,8]},\"b\":{" F32_2 "\"data_offsets\":[0,8]}}", 8, "overlap");
    BAD("{\"a\":{" F32_2 "\"data_offsets\":[0,8]},\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}", 8,
        "tensor 'e'", "overlap");
    BAD("{\"a\":{" F32_2 "\"data_offsets\":[0,8]},\"b\":{" F32_2 "\"data_offsets\":[12,20]}}", 20,
        "bytes [8, 12) of the data buffer belong to no tensor", "'b'");
    BAD("{\"a\":{" F32_2 "\"data_offsets\":[4,12]}}", 12, "bytes [0, 4) of the data buffer belong to no tensor");
    BAD("{\"a\":{" F32_2 "\"data_offsets\":[0,8]}}", 12, "bytes [8, 12) at the end of the data buffer belong to no tensor");
    BAD("{}", 3, "bytes [0, 3) at the end");
    BAD("{\"w\":{" F32_2 "\"data_offsets\":[0,8]},\"w\":{" F32_2 "\"data_offsets\":[8,16]}}", 16,
        "tensor 'w': the name appears twice");
    BAD("{\"__metadata__\":5}", 0, "__metadata__ must be an object of strings, found an integer");
    BAD("{\"__metadata__\":{\"k\":1}}", 0, "__metadata__ entry 'k' is an integer, expected a string");
    BAD("{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0, "__metadata__ entry 'k' appears more than once");
    BAD("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "__metadata__ appears twice");
}

/* Escapes, surrogate pairs, whitespace, unknown keys and metadata in a valid hand-written file. */
static void test_crafted_valid(void **state)
{
    const char *h = "{ \"\\u00e9\\ud83d\\ude00\\/\" : {\"shape\":[ 2 ], \"extra\": [1, {\"x\": null}],\n"
                    "  \"dtype\":\"U8\",\"data_offsets\":[2,4]},\r\n\t\"__metadata__\":{\"k\":\"v\\n\"},"
                    "\"first\":{\"dtype\":\"BOOL\",\"shape\":[1,2],\"data_offsets\":[0,2]}}   ";
    write_st(g_bad, h, strlen(h), -1, 4);
    nb_tensor_map *m = NULL;
    NBT_OK(nb_safetensors_load(g_bad, nb_cpu(), &m));
    assert_int_equal(nb_tensor_map_size(m), 2);
    assert_string_equal(nb_tensor_map_name(m, 0), "first"); /* file order, not header order */
    assert_string_equal(nb_tensor_map_name(m, 1), "\xc3\xa9\xf0\x9f\x98\x80/");
    assert_string_equal(nb_tensor_map_metadata(m, "k"), "v\n");
    nb_scope *s = nb_scope_begin();
    nb_tensor *t = NBT_CHECK(nb_tensor_map_get(m, "first"));
    assert_int_equal(nb_tensor_dtype(t), NB_BOOL);
    assert_int_equal(nb_tensor_ndim(t), 2);
    nb_scope_end(s);
    nb_tensor_map_free(m);
}

/* ---- (5) atomic saves ---------------------------------------------------------------------- */

static void test_atomic_save(void **state)
{
    nb_scope *s = nb_scope_begin();
    char dir[2200], path[4200], tmp_dir[2300];
    path_in(dir, sizeof dir, "atomic");
    assert_int_equal(mkdir(dir, 0755), 0);
    nb_tensor_map *m = NBT_CHECK(nb_tensor_map_create());
    NBT_OK(nb_tensor_map_set(m, "w", case_tensor(&cases[6])));
    int tmp;
    /* A missing folder, and a "folder" that is a file: clean failures that leave nothing. */
    snprintf(path, sizeof path, "%s/missing/x.safetensors", dir);
    NBT_FAILS(nb_safetensors_save(m, path) != NB_OK, NB_ERR_IO, "safetensors_save", path, "cannot create", NULL);
    snprintf(path, sizeof path, "%s/file", dir);
    write_raw(path, "x", 1);
    snprintf(path, sizeof path, "%s/file/x.safetensors", dir);
    NBT_FAILS(nb_safetensors_save(m, path) != NB_OK, NB_ERR_IO, path, NULL);
    assert_int_equal(nbt_dir_entries(dir, &tmp), 1);
    /* A folder without write permission (root ignores permissions: nothing to test then). */
    snprintf(tmp_dir, sizeof tmp_dir, "%s/readonly", dir);
    assert_int_equal(mkdir(tmp_dir, 0555), 0);
    if (geteuid() != 0) {
        snprintf(path, sizeof path, "%s/x.safetensors", tmp_dir);
        NBT_FAILS(nb_safetensors_save(m, path) != NB_OK, NB_ERR_IO, path, NULL);
    }
    assert_int_equal(nbt_dir_entries(tmp_dir, &tmp), 0);
    /* The target is a folder: the file is written, the rename fails, the temporary goes. */
    snprintf(path, sizeof path, "%s/adir", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    NBT_FAILS(nb_safetensors_save(m, path) != NB_OK, NB_ERR_IO, path, "rename", NULL);
    struct stat st;
    assert_true(stat(path, &st) == 0 && S_ISDIR(st.st_mode));
    assert_int_equal(nbt_dir_entries(path, &tmp), 0);
    assert_int_equal(nbt_dir_entries(dir, &tmp), 3);
    assert_int_equal(tmp, 0);
    /* Over an existing file: replaced, and no temporary left. */
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_raw(path, "old contents, not a checkpoint", 30);
    NBT_OK(nb_safetensors_save(m, path));
    assert_int_equal(nbt_dir_entries(dir, &tmp), 4);
    assert_int_equal(tmp, 0);
    nb_tensor_map *back = NULL;
    NBT_OK(nb_safetensors_load(path, nb_cpu(), &back));
    check_bytes(NBT_CHECK(nb_tensor_map_get(back, "w")), NB_FLOAT32, cases[6].shape, 3,
                nb_tensor_data_ptr(nb_tensor_map_get(m, "w")), "w");
    nb_tensor_map_free(back);
    /* Bad arguments. */
    NBT_FAILS(nb_safetensors_save(NULL, path) != NB_OK, NB_ERR_INVALID_ARG, "safetensors_save", NULL);
    NBT_FAILS(nb_safetensors_save(m, NULL) != NB_OK, NB_ERR_INVALID_ARG, "safetensors_save", NULL);
    NBT_FAILS(nb_safetensors_save(m, "") != NB_OK, NB_ERR_INVALID_ARG, "empty path", NULL);
    nb_tensor_map_free(m);
    nb_scope_end(s);
}

/* ---- the tensor map ------------------------------------------------------------------------ */

static void test_tensor_map(void **state)
{
    nb_tensor_map_free(NULL);
    assert_int_equal(nb_tensor_map_size(NULL), 0);
    assert_false(nb_tensor_map_contains(NULL, "a"));
    assert_null(nb_tensor_map_metadata(NULL, "a"));
    nb_tensor_map *m = NBT_CHECK(nb_tensor_map_create());
    float one = 1.0f, two = 2.0f, v;
    nb_tensor *a = NBT_CHECK(nb_tensor_from_data(&one, NULL, 0, NULL));
    nb_tensor *b = NBT_CHECK(nb_tensor_from_data(&two, NULL, 0, NULL));
    char name[32];
    for (int i = 0; i < 200; i++) { /* enough to grow the index a few times */
        snprintf(name, sizeof name, "t%03d", i);
        NBT_OK(nb_tensor_map_set(m, name, i % 2 ? a : b));
    }
    NBT_OK(nb_tensor_map_set(m, "t005", b)); /* replacing keeps the position */
    assert_int_equal(nb_tensor_map_size(m), 200);
    assert_string_equal(nb_tensor_map_name(m, 5), "t005");
    assert_string_equal(nb_tensor_map_name(m, 199), "t199");
    nb_tensor_free(a);
    nb_tensor_free(b); /* the map holds its own references */
    nb_scope *s = nb_scope_begin();
    NBT_OK(nb_tensor_read(NBT_CHECK(nb_tensor_map_get(m, "t005")), &v, sizeof v));
    assert_true(v == 2.0f);
    NBT_OK(nb_tensor_read(NBT_CHECK(nb_tensor_map_get(m, "t007")), &v, sizeof v));
    assert_true(v == 1.0f);
    nb_scope_end(s);
    nb_tensor *own = NBT_CHECK(nb_tensor_map_get(m, "t001")); /* no scope: the caller's */
    nb_tensor_free(own);
    assert_true(nb_tensor_map_contains(m, "t150"));
    assert_false(nb_tensor_map_contains(m, "t200"));
    NBT_FAILS(nb_tensor_map_get(m, "nope") == NULL, NB_ERR_INVALID_ARG, "tensor_map_get", "'nope'", NULL);
    NBT_FAILS(nb_tensor_map_name(m, 200) == NULL, NB_ERR_INVALID_ARG, "tensor_map_name", NULL);
    NBT_FAILS(nb_tensor_map_name(m, -1) == NULL, NB_ERR_INVALID_ARG, "tensor_map_name", NULL);
    nb_tensor *t = nb_tensor_map_get(m, "t000");
    NBT_FAILS(nb_tensor_map_set(m, "", t) != NB_OK, NB_ERR_INVALID_ARG, "empty name", NULL);
    NBT_FAILS(nb_tensor_map_set(m, "__metadata__", t) != NB_OK, NB_ERR_INVALID_ARG, "__metadata__", NULL);
    NBT_FAILS(nb_tensor_map_set(m, "\xff", t) != NB_OK, NB_ERR_INVALID_ARG, "UTF-8", NULL);
    NBT_FAILS(nb_tensor_map_set(m, NULL, t) != NB_OK, NB_ERR_INVALID_ARG, "NULL name", NULL);
    NBT_FAILS(nb_tensor_map_set(m, "x", NULL) != NB_OK, NB_ERR_INVALID_ARG, "NULL tensor", NULL);
    NBT_FAILS(nb_tensor_map_set(NULL, "x", t) != NB_OK, NB_ERR_INVALID_ARG, "NULL map", NULL);
    nb_tensor_free(t);
    NBT_OK(nb_tensor_map_set_metadata(m, "k", "v1"));
    NBT_OK(nb_tensor_map_set_metadata(m, "k", "v2"));
    assert_string_equal(nb_tensor_map_metadata(m, "k"), "v2");
    assert_null(nb_tensor_map_metadata(m, "absent"));
    NBT_FAILS(nb_tensor_map_set_metadata(m, "k", NULL) != NB_OK, NB_ERR_INVALID_ARG, "NULL value", NULL);
    NBT_FAILS(nb_tensor_map_set_metadata(m, "k", "\xc3") != NB_OK, NB_ERR_INVALID_ARG, "UTF-8", NULL);
    nb_tensor_map_free(m);
}

/* ---- devices ------------------------------------------------------------------------------- */

static void test_load_to_device(void **state)
{
    char path[4096];
    ref_path(path, sizeof path);
    nb_tensor_map *m = (nb_tensor_map *)&g_sentinel;
    if (!nb_cuda_is_available()) { /* without a GPU: the no-device error (test_cuda_* cover the GPU) */
        nb_device d = {NB_DEVICE_CUDA, 0};
        NBT_FAILS(nb_safetensors_load(path, d, &m) != NB_OK, NB_ERR_DEVICE, path, "cuda:0", NULL);
        assert_null(m);
        return;
    }
    nb_device cuda = {NB_DEVICE_CUDA, 0};
    NBT_OK(nb_safetensors_load(path, cuda, &m));
    nb_scope *s = nb_scope_begin();
    for (int i = 0; i < N_CASES; i++) {
        nb_tensor *t = NBT_CHECK(nb_tensor_map_get(m, cases[i].name));
        assert_true(nb_device_equal(nb_tensor_device(t), cuda));
        check_case(m, &cases[i]);
    }
    char out[4096];
    path_in(out, sizeof out, "from_cuda.safetensors");
    NBT_OK(nb_safetensors_save(m, out)); /* copied to the host on the way */
    nb_tensor_map *back = NULL;
    NBT_OK(nb_safetensors_load(out, nb_cpu(), &back));
    for (int i = 0; i < N_CASES; i++) check_case(back, &cases[i]);
    nb_tensor_map_free(back);
    nb_scope_end(s);
    nb_tensor_map_free(m);
}

/* ---- the JSON parser ------------------------------------------------------------------------ */

static nb_json_doc *parse(const char *s, size_t n)
{
    nb_json_error err;
    nb_json_doc *d = nb__json_parse(s, n, &err);
    if (!d) print_message("json: %s at %zu\n", err.msg, err.pos);
    return d;
}
#define PARSES(s) parse(s, sizeof(s) - 1)

static void test_json(void **state)
{
    nb_json_doc *d = PARSES(" {\"a\": [1, -2, 3.5, 1e3, true, false, null, \"s\"], \"b\": {}, \"a\": 0}\n");
    assert_non_null(d);
    const nb_json *r = nb__json_root(d), *a;
    int count;
    assert_int_equal(r->type, NB_JSON_OBJECT);
    assert_int_equal(r->n, 3);
    a = nb__json_get(r, "a", &count);
    assert_int_equal(count, 2);
    assert_int_equal(a->n, 8);
    static const nb_json_type types[] = {NB_JSON_INT,  NB_JSON_INT,   NB_JSON_NUMBER, NB_JSON_NUMBER,
                                         NB_JSON_TRUE, NB_JSON_FALSE, NB_JSON_NULL,   NB_JSON_STRING};
    int k = 0;
    for (const nb_json *v = a->child; v; v = v->next) assert_int_equal(v->type, types[k++]);
    assert_int_equal(a->child->next->i, -2);
    assert_memory_equal(a->child->next->next->str, "3.5", 3);
    assert_null(nb__json_get(r, "c", &count));
    nb__json_free(d);
    d = PARSES("[-9223372036854775808, 9223372036854775807, 9223372036854775808, -0]");
    a = nb__json_root(d)->child;
    assert_true(a->type == NB_JSON_INT && a->i == INT64_MIN);
    assert_true(a->next->type == NB_JSON_INT && a->next->i == INT64_MAX);
    assert_int_equal(a->next->next->type, NB_JSON_NUMBER);
    assert_true(a->next->next->next->type == NB_JSON_INT && a->next->next->next->i == 0);
    nb__json_free(d);
    d = PARSES("\"\\u00e9\\uD83D\\uDE00\\n\\/\\\"\\u0000\"");
    r = nb__json_root(d);
    assert_int_equal(r->str_len, 10);
    assert_memory_equal(r->str, "\xc3\xa9\xf0\x9f\x98\x80\n/\"\0", 10);
    nb__json_free(d);
    char deep[200] = "";
    for (int i = 0; i < 64; i++) strcat(deep, "[");
    for (int i = 0; i < 64; i++) strcat(deep, "]");
    d = parse(deep, strlen(deep));
    assert_non_null(d);
    nb__json_free(d);
    nb_json_error err;
    memmove(deep + 1, deep, strlen(deep) + 1);
    strcat(deep, "]");
    assert_null(nb__json_parse(deep, strlen(deep), &err)); /* 65 levels */
    assert_non_null(strstr(err.msg, "nesting deeper than 64"));
    /* Malformed documents and what their message must say (the text includes its last byte). */
#define R(s, what) {s, sizeof(s) - 1, what}
    static const struct { const char *text; size_t len; const char *what; } rejects[] = {
        R("", "expected a value"), R("nul", "expected a value"), R("[1 2]", "expected ',' or ']'"),
        R("{\"a\" 1}", "expected ':'"), R("{1:2}", "expected a string key"), R("-", "digit"),
        R("01", "leading zero"), R("1.", "after '.'"), R(".5", "expected a value"), R("1e", "exponent"),
        R("[1]\0", "trailing characters"), R("\"\\ud800\"", "high surrogate"),
        R("\"\\udc00\"", "lone low surrogate"), R("\"\\ud800\\u0041\"", "high surrogate"),
        R("\"\\u12\"", "4 hex digits"), R("\"\\u12G4\"", "4 hex digits"), R("\"a\nb\"", "control character"),
        R("\"\xc0\xaf\"", "invalid UTF-8"),         /* overlong */
        R("\"\xed\xa0\x80\"", "invalid UTF-8"),     /* a surrogate */
        R("\"\xf4\x90\x80\x80\"", "invalid UTF-8"), /* past U+10FFFF */
        R("\"\xe2\x82\"", "invalid UTF-8"),         /* cut short */
    };
#undef R
    for (size_t i = 0; i < sizeof rejects / sizeof rejects[0]; i++) {
        assert_null(nb__json_parse(rejects[i].text, rejects[i].len, &err));
        if (!strstr(err.msg, rejects[i].what))
            fail_msg("json: \"%s\" does not mention \"%s\"", err.msg, rejects[i].what);
    }
    assert_true(nb__utf8_valid("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 10));
    assert_false(nb__utf8_valid("\x80", 1));
    nb_json_buf b = {0};
    nb__json_buf_string(&b, "a\"b\\c\n\x01\x1f\xc3\xa9");
    assert_string_equal(b.data, "\"a\\\"b\\\\c\\n\\u0001\\u001f\xc3\xa9\"");
    nb__json_buf_free(&b);
}

/* Removes this run's folder. */
static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    remove(p);
    return 0; /* go on with the rest */
}

int main(void)
{
    const char *base = getenv("NB_BUILD_DIR");
    snprintf(g_dir, sizeof g_dir, "%s/test_safetensors.XXXXXX", base ? base : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror(g_dir);
        return 1;
    }
    snprintf(g_bad, sizeof g_bad, "%s/bad.safetensors", g_dir);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_reference), cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_interop_pytorch), cmocka_unit_test(test_bad_sizes),
        cmocka_unit_test(test_bad_json),        cmocka_unit_test(test_bad_entries),
        cmocka_unit_test(test_bad_layout),      cmocka_unit_test(test_crafted_valid),
        cmocka_unit_test(test_atomic_save),     cmocka_unit_test(test_tensor_map),
        cmocka_unit_test(test_load_to_device),  cmocka_unit_test(test_json),
    };
    int rc = NBT_RUN(tests);
    nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
