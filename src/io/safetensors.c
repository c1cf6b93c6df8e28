/* safetensors checkpoints: an 8-byte little-endian header size N, N bytes of JSON describing
 * each tensor (dtype, shape, [begin, end) in the data buffer) plus an optional `__metadata__`
 * string map, then the data buffer (little-endian, row-major).
 *
 * Loading validates everything before reading any tensor data, as the reference (Rust) library
 * does: the buffer must be covered exactly by the tensors' ranges, with no overlap and no gap.
 * A loaded map lists tensors in file order (by data offset; ties between empty tensors in
 * header order).
 *
 * Saving writes what the reference library writes, byte for byte: `__metadata__` first, then
 * tensors ordered by dtype (I64, F64, F32, I32, BF16, F16, U8, BOOL: widest first, so that every
 * tensor's data is aligned to its element size) and by name within a dtype, with consecutive
 * ranges, and the header padded with spaces to a multiple of 8 bytes. The file is written to
 * `<path>.tmp.<pid>`, flushed and fsync'd, then renamed over path; on failure it is removed.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/dispatch_impl.h"
#include "io/fileio_impl.h"
#include "io/json_impl.h"

/* The reference library refuses headers larger than this. */
#define ST_MAX_HEADER 100000000ull

/* Indexed by nb_dtype. */
static const char *const st_codes[NB_DTYPE_COUNT] = {"F32", "F64", "I64", "I32", "U8", "BOOL", "F16", "BF16"};
/* Position in the reference library's dtype enum: it writes the highest first. */
static const int st_rank[NB_DTYPE_COUNT] = {5, 6, 7, 4, 1, 0, 2, 3};

/* ==== loading =============================================================================== */

typedef struct st_entry {
    const char *name; /* in the parsed header */
    nb_dtype dtype;
    int ndim;
    int64_t shape[NB_MAX_DIMS];
    uint64_t begin, end;
    size_t order; /* position in the header */
} st_entry;

typedef struct st_load {
    const char *path;
    FILE *f;
    uint64_t file_size, header_len, data_size;
    char *header;
    nb_json_doc *doc;
    const nb_json *metadata;
    st_entry *entries;
    size_t n;
} st_load;

static nb_status load_err(const st_load *c, nb_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static nb_status load_err(const st_load *c, nb_status st, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return nb__err(st, "safetensors_load: %s: %s", c->path, msg);
}

#define entry_err(c, name, fmt, ...) \
    load_err(c, NB_ERR_FORMAT, "tensor '%.200s': " fmt, name, __VA_ARGS__)

static nb_status read_err(const st_load *c, const char *what)
{
    if (ferror(c->f)) return load_err(c, NB_ERR_IO, "reading %s: %s", what, strerror(errno));
    return load_err(c, NB_ERR_IO, "reading %s: unexpected end of file (was it changed while being read?)",
                    what);
}

/* Opens the file, checks the header size against the file's and reads the header. */
static nb_status read_header(st_load *c)
{
    c->f = fopen(c->path, "rb");
    if (!c->f) return load_err(c, NB_ERR_IO, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fileno(c->f), &st) != 0) return load_err(c, NB_ERR_IO, "cannot stat: %s", strerror(errno));
    if (!S_ISREG(st.st_mode)) return load_err(c, NB_ERR_IO, "not a regular file");
    c->file_size = (uint64_t)st.st_size;
    if (c->file_size < 8)
        return load_err(c, NB_ERR_FORMAT, "the file is %llu bytes, shorter than the 8-byte header size",
                        (unsigned long long)c->file_size);
    unsigned char b[8];
    if (fread(b, 1, 8, c->f) != 8) return read_err(c, "the header size");
    uint64_t n = 0;
    for (int k = 7; k >= 0; k--) n = n << 8 | b[k];
    if (n > ST_MAX_HEADER)
        return load_err(c, NB_ERR_FORMAT, "header size %llu is larger than the limit of %llu bytes",
                        (unsigned long long)n, ST_MAX_HEADER);
    if (n > c->file_size - 8)
        return load_err(c, NB_ERR_FORMAT, "header size %llu runs past the end of the file (%llu bytes)",
                        (unsigned long long)n, (unsigned long long)c->file_size);
    c->header_len = n;
    c->data_size = c->file_size - 8 - n;
    c->header = malloc((size_t)n + 1);
    if (!c->header)
        return load_err(c, NB_ERR_OOM, "out of memory for a header of %llu bytes", (unsigned long long)n);
    if (fread(c->header, 1, (size_t)n, c->f) != n) return read_err(c, "the header");
    c->header[n] = '\0';
    return NB_OK;
}

/* The JSON text of v for messages: a number's literal, a short string, or the type's name. */
static const char *json_text(const nb_json *v, char *buf, size_t size)
{
    if (v->type == NB_JSON_INT || v->type == NB_JSON_NUMBER)
        snprintf(buf, size, "%.*s", (int)(v->str_len < 40 ? v->str_len : 40), v->str);
    else if (v->type == NB_JSON_STRING)
        snprintf(buf, size, "\"%.40s\"", v->str);
    else
        snprintf(buf, size, "%s", nb__json_type_name(v->type));
    return buf;
}

/* The member `key` of entry v, present once and of the given type. */
static nb_status field(const st_load *c, const nb_json *v, const char *key, nb_json_type type,
                       const nb_json **out)
{
    int count;
    *out = nb__json_get(v, key, &count);
    if (count == 0) return entry_err(c, v->key, "missing \"%s\"", key);
    if (count > 1) return entry_err(c, v->key, "\"%s\" appears %d times", key, count);
    if ((*out)->type != type)
        return entry_err(c, v->key, "\"%s\" must be %s, found %s", key, nb__json_type_name(type),
                         nb__json_type_name((*out)->type));
    return NB_OK;
}

static nb_status parse_dtype(const st_load *c, const nb_json *v, st_entry *e)
{
    const nb_json *dt;
    NB_TRY(field(c, v, "dtype", NB_JSON_STRING, &dt));
    for (int d = 0; d < NB_DTYPE_COUNT; d++) {
        if (strlen(st_codes[d]) == dt->str_len && memcmp(st_codes[d], dt->str, dt->str_len) == 0) {
            e->dtype = (nb_dtype)d;
            return NB_OK;
        }
    }
    char buf[64];
    return entry_err(c, v->key, "unknown or unsupported dtype %s (nabla reads F32, F64, I64, I32, U8, BOOL, F16 "
                     "and BF16)", json_text(dt, buf, sizeof buf));
}

static nb_status parse_shape(const st_load *c, const nb_json *v, st_entry *e)
{
    const nb_json *shape;
    char buf[64];
    NB_TRY(field(c, v, "shape", NB_JSON_ARRAY, &shape));
    if (shape->n > NB_MAX_DIMS)
        return entry_err(c, v->key, "shape has %zu dims (nabla supports at most %d)", shape->n, NB_MAX_DIMS);
    e->ndim = (int)shape->n;
    int k = 0;
    for (const nb_json *d = shape->child; d; d = d->next, k++) {
        if (d->type != NB_JSON_INT || d->i < 0)
            return entry_err(c, v->key, "shape must hold non-negative integers, found %s",
                             json_text(d, buf, sizeof buf));
        e->shape[k] = d->i;
    }
    /* The product of the non-zero sizes must fit, so strides never overflow. */
    int64_t numel = 1;
    for (k = 0; k < e->ndim; k++) {
        if (e->shape[k] && __builtin_mul_overflow(numel, e->shape[k], &numel)) {
            char s[NB_SHAPE_STR_MAX];
            return entry_err(c, v->key, "shape %s has too many elements", nb__shape_str(e->shape, e->ndim, s));
        }
    }
    return NB_OK;
}

static nb_status parse_offsets(const st_load *c, const nb_json *v, st_entry *e)
{
    const nb_json *off;
    char buf[64];
    NB_TRY(field(c, v, "data_offsets", NB_JSON_ARRAY, &off));
    if (off->n != 2)
        return entry_err(c, v->key, "data_offsets must be [begin, end], found %zu values", off->n);
    for (const nb_json *d = off->child; d; d = d->next)
        if (d->type != NB_JSON_INT || d->i < 0)
            return entry_err(c, v->key, "data_offsets must hold non-negative integers, found %s",
                             json_text(d, buf, sizeof buf));
    e->begin = (uint64_t)off->child->i;
    e->end = (uint64_t)off->child->next->i;
    if (e->begin > e->end)
        return entry_err(c, v->key, "data_offsets [%llu, %llu] end before they begin", (unsigned long long)e->begin,
                         (unsigned long long)e->end);
    return NB_OK;
}

static nb_status parse_entry(const st_load *c, const nb_json *v, st_entry *e)
{
    e->name = v->key;
    if (!v->key[0]) return load_err(c, NB_ERR_FORMAT, "a tensor has an empty name");
    if (v->type != NB_JSON_OBJECT)
        return entry_err(c, v->key, "expected an object with dtype, shape and data_offsets, found %s",
                         nb__json_type_name(v->type));
    NB_TRY(parse_dtype(c, v, e));
    NB_TRY(parse_shape(c, v, e));
    NB_TRY(parse_offsets(c, v, e));
    uint64_t numel = 1, nbytes;
    for (int k = 0; k < e->ndim; k++) numel *= (uint64_t)e->shape[k]; /* fits: checked above */
    char s[NB_SHAPE_STR_MAX];
    if (__builtin_mul_overflow(numel, (uint64_t)nb_dtype_size(e->dtype), &nbytes))
        return entry_err(c, v->key, "shape %s of %s is too large", nb__shape_str(e->shape, e->ndim, s),
                         st_codes[e->dtype]);
    if (nbytes != e->end - e->begin) {
        return entry_err(c, v->key, "data_offsets [%llu, %llu] do not match shape %s of %s (%llu bytes)",
                         (unsigned long long)e->begin, (unsigned long long)e->end,
                         nb__shape_str(e->shape, e->ndim, s), st_codes[e->dtype], (unsigned long long)nbytes);
    }
    if (e->end > c->data_size)
        return entry_err(c, v->key, "data_offsets [%llu, %llu] run past the end of the data buffer (%llu bytes)",
                         (unsigned long long)e->begin, (unsigned long long)e->end,
                         (unsigned long long)c->data_size);
    return NB_OK;
}

static int cmp_key(const void *a, const void *b)
{
    return strcmp((*(const nb_json *const *)a)->key, (*(const nb_json *const *)b)->key);
}

static nb_status check_metadata(const st_load *c, const nb_json *v)
{
    if (v->type != NB_JSON_OBJECT)
        return load_err(c, NB_ERR_FORMAT, "__metadata__ must be an object of strings, found %s",
                        nb__json_type_name(v->type));
    const nb_json **keys = malloc((v->n ? v->n : 1) * sizeof *keys);
    if (!keys) return load_err(c, NB_ERR_OOM, "out of memory for %zu metadata entries", v->n);
    size_t n = 0;
    for (const nb_json *m = v->child; m; m = m->next) {
        keys[n++] = m;
        nb_status st = NB_OK;
        if (m->type != NB_JSON_STRING)
            st = load_err(c, NB_ERR_FORMAT, "__metadata__ entry '%.200s' is %s, expected a string", m->key,
                          nb__json_type_name(m->type));
        else if (m->key_len != strlen(m->key) || m->str_len != strlen(m->str))
            st = load_err(c, NB_ERR_FORMAT, "__metadata__ entry '%.200s' holds a NUL character", m->key);
        if (st != NB_OK) {
            free(keys);
            return st;
        }
    }
    /* Sorted, duplicates are neighbours (a quadratic search would let a header stall us). */
    qsort(keys, n, sizeof *keys, cmp_key);
    const char *dup = NULL;
    for (size_t i = 1; i < n && !dup; i++)
        if (strcmp(keys[i - 1]->key, keys[i]->key) == 0) dup = keys[i]->key;
    free(keys);
    if (dup) return load_err(c, NB_ERR_FORMAT, "__metadata__ entry '%.200s' appears more than once", dup);
    return NB_OK;
}

/* Parses the header into c->entries and c->metadata. */
static nb_status parse_header(st_load *c)
{
    if (c->header_len == 0 || c->header[0] != '{')
        return load_err(c, NB_ERR_FORMAT, "the header does not start with '{' (not a safetensors file?)");
    nb_json_error err;
    c->doc = nb__json_parse(c->header, (size_t)c->header_len, &err);
    if (!c->doc && err.oom) return load_err(c, NB_ERR_OOM, "out of memory parsing the header");
    if (!c->doc)
        return load_err(c, NB_ERR_FORMAT, "the header is not valid JSON: %s (at byte %zu of the header)", err.msg,
                        err.pos);
    const nb_json *root = nb__json_root(c->doc);
    c->entries = calloc(root->n ? root->n : 1, sizeof *c->entries);
    if (!c->entries) return load_err(c, NB_ERR_OOM, "out of memory for %zu tensors", root->n);
    for (const nb_json *v = root->child; v; v = v->next) {
        if (v->key_len != strlen(v->key))
            return load_err(c, NB_ERR_FORMAT, "the tensor name '%.200s...' holds a NUL character", v->key);
        if (strcmp(v->key, "__metadata__") == 0) {
            if (c->metadata) return load_err(c, NB_ERR_FORMAT, "__metadata__ appears twice");
            NB_TRY(check_metadata(c, v));
            c->metadata = v;
            continue;
        }
        st_entry *e = &c->entries[c->n];
        NB_TRY(parse_entry(c, v, e));
        e->order = c->n++;
    }
    return NB_OK;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp((*(const st_entry *const *)a)->name, (*(const st_entry *const *)b)->name);
}

static int cmp_offset(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Names are unique, and the ranges cover the data buffer exactly; sorts entries by offset. */
static nb_status check_layout(st_load *c)
{
    if (c->n > 1) {
        const st_entry **byname = malloc(c->n * sizeof *byname);
        if (!byname) return load_err(c, NB_ERR_OOM, "out of memory for %zu tensors", c->n);
        for (size_t i = 0; i < c->n; i++) byname[i] = &c->entries[i];
        qsort(byname, c->n, sizeof *byname, cmp_name);
        const char *dup = NULL;
        for (size_t i = 1; i < c->n && !dup; i++)
            if (strcmp(byname[i - 1]->name, byname[i]->name) == 0) dup = byname[i]->name;
        free(byname);
        if (dup) return load_err(c, NB_ERR_FORMAT, "tensor '%.200s': the name appears twice in the header", dup);
    }
    qsort(c->entries, c->n, sizeof *c->entries, cmp_offset);
    uint64_t at = 0;
    const st_entry *prev = NULL;
    for (size_t i = 0; i < c->n; i++) {
        const st_entry *e = &c->entries[i];
        if (e->begin < at)
            return entry_err(c, e->name, "data_offsets [%llu, %llu] overlap those of tensor '%.200s' [%llu, %llu]",
                             (unsigned long long)e->begin, (unsigned long long)e->end, prev->name,
                             (unsigned long long)prev->begin, (unsigned long long)prev->end);
        if (e->begin > at)
            return load_err(c, NB_ERR_FORMAT,
                            "bytes [%llu, %llu) of the data buffer belong to no tensor (a gap before tensor "
                            "'%.200s')", (unsigned long long)at, (unsigned long long)e->begin, e->name);
        at = e->end;
        prev = e;
    }
    if (at != c->data_size)
        return load_err(c, NB_ERR_FORMAT, "bytes [%llu, %llu) at the end of the data buffer belong to no tensor",
                        (unsigned long long)at, (unsigned long long)c->data_size);
    return NB_OK;
}

/* Reads one tensor's data (the next bytes of the file) into a new CPU tensor; moves it to the
 * device and adds it to m. */
static nb_status load_tensor(const st_load *c, const st_entry *e, nb_device device, nb_tensor_map *m)
{
    nb_tensor *t = nb__tensor_new(e->shape, e->ndim, e->dtype, nb_cpu());
    if (!t) return nb__io_wrap_err("safetensors_load", c->path, e->name);
    size_t nbytes = (size_t)(e->end - e->begin);
    if (nbytes && fread(nb__data(t), 1, nbytes, c->f) != nbytes) {
        nb__release(t);
        char what[256];
        snprintf(what, sizeof what, "tensor '%.200s'", e->name);
        return read_err(c, what);
    }
    if (NB_IO_BIG_ENDIAN) nb__io_swap_elements(nb__data(t), nbytes, nb_dtype_size(e->dtype));
    nb_status st = NB_OK;
    if (device.type == NB_DEVICE_CPU) {
        st = nb_tensor_map_set(m, e->name, t);
    } else {
        nb_scope *s = nb_scope_begin();
        nb_tensor *d = s ? nb_to(t, device) : NULL;
        st = d ? nb_tensor_map_set(m, e->name, d) : nb_last_status();
        nb_scope_end(s);
    }
    nb__release(t);
    return st == NB_OK ? NB_OK : nb__io_wrap_err("safetensors_load", c->path, e->name);
}

static nb_status fill_map(const st_load *c, nb_device device, nb_tensor_map *m)
{
    for (size_t i = 0; i < c->n; i++) NB_TRY(load_tensor(c, &c->entries[i], device, m));
    if (c->metadata)
        for (const nb_json *v = c->metadata->child; v; v = v->next)
            if (nb__tensor_map_metadata_append(m, v->key, v->str) != NB_OK)
                return nb__io_wrap_err("safetensors_load", c->path, NULL);
    return NB_OK;
}

nb_status nb_safetensors_load(const char *path, nb_device device, nb_tensor_map **out)
{
    if (out) *out = NULL;
    if (!path || !out) return nb__err(NB_ERR_INVALID_ARG, "safetensors_load: NULL %s", path ? "out" : "path");
    if (nb_device_check(device) != NB_OK) return nb__io_wrap_err("safetensors_load", path, NULL);
    st_load c = {.path = path};
    nb_tensor_map *m = NULL;
    nb_status st = read_header(&c);
    if (st == NB_OK) st = parse_header(&c);
    if (st == NB_OK) st = check_layout(&c);
    if (st == NB_OK) {
        m = nb_tensor_map_create();
        st = m ? fill_map(&c, device, m) : nb__io_wrap_err("safetensors_load", path, NULL);
    }
    if (c.f) fclose(c.f);
    free(c.header);
    free(c.entries);
    nb__json_free(c.doc);
    if (st != NB_OK) {
        nb_tensor_map_free(m);
        return st;
    }
    *out = m;
    return NB_OK;
}

/* ==== saving ================================================================================ */

typedef struct st_item {
    const char *name;
    const nb_tensor *t;
    size_t nbytes;
} st_item;

static int cmp_item(const void *a, const void *b)
{
    const st_item *x = a, *y = b;
    if (x->t->dtype != y->t->dtype) return st_rank[y->t->dtype] - st_rank[x->t->dtype];
    return strcmp(x->name, y->name);
}

/* The map's tensors, checked and in the order they are written. */
static nb_status collect_items(const nb_tensor_map *m, const char *path, st_item **out)
{
    int n = nb_tensor_map_size(m);
    st_item *items = calloc(n ? (size_t)n : 1, sizeof *items);
    if (!items) return nb__err(NB_ERR_OOM, "safetensors_save: %s: out of memory", path);
    for (int i = 0; i < n; i++) {
        const char *name = nb_tensor_map_name(m, i);
        const nb_tensor *t = nb__tensor_map_at(m, i);
        const char *problem = nb__tensor_name_problem(name);
        if (problem || (unsigned)t->dtype >= NB_DTYPE_COUNT) {
            free(items);
            return nb__err(NB_ERR_INVALID_ARG, "safetensors_save: %s: tensor '%.200s': %s", path, name,
                           problem ? problem : "invalid dtype");
        }
        items[i] = (st_item){name, t, (size_t)nb__numel(t->shape, t->ndim) * nb_dtype_size(t->dtype)};
    }
    qsort(items, (size_t)n, sizeof *items, cmp_item);
    *out = items;
    return NB_OK;
}

/* The JSON header, padded with spaces to a multiple of 8 bytes. */
static nb_status build_header(const nb_tensor_map *m, const st_item *items, int n, const char *path,
                              nb_json_buf *b)
{
    nb__json_buf_append(b, "{", 1);
    int n_meta = nb__tensor_map_metadata_count(m);
    if (n_meta) {
        nb__json_buf_append(b, "\"__metadata__\":{", 16);
        for (int i = 0; i < n_meta; i++) {
            const char *k, *v;
            nb__tensor_map_metadata_at(m, i, &k, &v);
            if (i) nb__json_buf_append(b, ",", 1);
            nb__json_buf_string(b, k);
            nb__json_buf_append(b, ":", 1);
            nb__json_buf_string(b, v);
        }
        nb__json_buf_append(b, n ? "}," : "}", n ? 2 : 1);
    }
    size_t offset = 0;
    for (int i = 0; i < n; i++) {
        const nb_tensor *t = items[i].t;
        if (i) nb__json_buf_append(b, ",", 1);
        nb__json_buf_string(b, items[i].name);
        nb__json_buf_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", st_codes[t->dtype]);
        for (int d = 0; d < t->ndim; d++) nb__json_buf_printf(b, d ? ",%lld" : "%lld", (long long)t->shape[d]);
        nb__json_buf_printf(b, "],\"data_offsets\":[%zu,%zu]}", offset, offset + items[i].nbytes);
        offset += items[i].nbytes;
    }
    nb__json_buf_append(b, "}", 1);
    while (!b->oom && b->len % 8) nb__json_buf_append(b, " ", 1);
    if (b->oom) return nb__err(NB_ERR_OOM, "safetensors_save: %s: out of memory for the header", path);
    if (b->len > ST_MAX_HEADER)
        return nb__err(NB_ERR_INVALID_ARG, "safetensors_save: %s: the header would be %zu bytes, more than the %llu "
                       "readers accept", path, b->len, ST_MAX_HEADER);
    return NB_OK;
}

typedef struct st_save {
    const char *path;
    const nb_json_buf *header;
    const st_item *items;
    int n;
} st_save;

/* Writes the whole file: size, header, data (nb_io_write_fn). */
static nb_status write_file(FILE *f, const char *tmp, void *ctx)
{
    const st_save *c = ctx;
    unsigned char size[8];
    for (int k = 0; k < 8; k++) size[k] = (unsigned char)((uint64_t)c->header->len >> (8 * k));
    nb_status st = NB_OK;
    if (fwrite(size, 1, 8, f) != 8 || fwrite(c->header->data, 1, c->header->len, f) != c->header->len)
        st = nb__io_write_err("safetensors_save", c->path, tmp, "writing");
    char *scratch = NULL;
    size_t cap = 0;
    for (int i = 0; i < c->n && st == NB_OK; i++) {
        const st_item *it = &c->items[i];
        if (!it->nbytes) continue;
        nb_scope *s = nb_scope_begin();
        const char *bytes =
            s ? nb__io_host_bytes("safetensors_save", c->path, it->name, it->t, it->nbytes, &scratch, &cap) : NULL;
        if (!bytes) st = nb_last_status();
        else if (fwrite(bytes, 1, it->nbytes, f) != it->nbytes)
            st = nb__io_write_err("safetensors_save", c->path, tmp, "writing");
        nb_scope_end(s);
    }
    free(scratch);
    return st;
}

nb_status nb_safetensors_save(const nb_tensor_map *m, const char *path)
{
    if (!m || !path || !path[0])
        return nb__err(NB_ERR_INVALID_ARG, "safetensors_save: %s",
                       !m ? "NULL map" : !path ? "NULL path" : "empty path");
    st_item *items = NULL;
    NB_TRY(collect_items(m, path, &items));
    int n = nb_tensor_map_size(m);
    nb_json_buf header = {0};
    nb_status st = build_header(m, items, n, path, &header);
    if (st == NB_OK) {
        st_save c = {path, &header, items, n};
        st = nb__io_save_atomic("safetensors_save", path, write_file, &c);
    }
    free(items);
    nb__json_buf_free(&header);
    return st;
}
