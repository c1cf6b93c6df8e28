/* PyTorch's checkpoint format: what torch.save writes since PyTorch 1.6 ("zipfile
 * serialization") and torch.load reads.
 *
 * A file is a zip archive (zip.c) whose entries lie in one folder, `<archive>/` (the file's stem in
 * most versions, "archive" for buffers): data.pkl, the pickled object (pickle.c), whose tensors
 * refer to their storages by key; data/<key>, each storage's raw bytes (little-endian, of
 * numel * element size bytes); version ("3\n"); byteorder ("little", since 1.12ish; absent means
 * little); and in torch 2.x .format_version, .storage_alignment and .data/serialization_id.
 *
 * Loading reads data.pkl (allow-listed globals only), flattens the object into names (nested dicts
 * and lists joined with '.', see io.h), checks every tensor against its storage (the entry exists
 * and has the storage's size, the dtype is one nabla has, size, stride and offset stay inside the
 * storage) before reading any data, then reads each storage once: straight into the tensor when
 * one tensor covers it contiguously, else into a buffer the tensors copy their elements out of
 * (views, shared storages), freed after its last tensor.
 *
 * Saving is torchfile_save.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dispatch_impl.h"
#include "io/fileio_impl.h"
#include "io/torchfile_impl.h"

#define TF_MAX_PICKLE ((size_t)256 << 20)
#define TF_MAX_DEPTH 64
#define TF_MAX_NAME 65536
/* bounds on what the tensors may add up to beyond their storages (see check_tensors) */
#define TF_VIEW_RATIO 4
#define TF_VIEW_SLACK (64 << 20)
#define TF_NB_DTYPES "float32, float64, float16, bfloat16, int64, int32, uint8 and bool"

/* ==== loading: flattening the pickled object ================================================== */

typedef struct tf_item {
    char *name;
    const pk_tensor *tensor; /* NULL for a metadata entry */
    char *meta;
    size_t group; /* tensors: the index of their storage group */
} tf_item;

typedef struct tf_group {
    const pk_storage *storage; /* the first declaration of the key */
    const nb_zip_entry *entry;
    uint64_t nbytes;
    size_t uses;
    char *buf; /* the storage's bytes while tensors still need them */
} tf_group;

typedef struct tf_load {
    const char *path;
    nb_zip zip;
    char prefix[256]; /* "<archive>/" */
    unsigned char *pkl;
    size_t pkl_len;
    pk_doc *doc;
    tf_item *items;
    size_t n_items, cap_items;
    size_t visits_left, text_left; /* bounds on the walk: visits, and bytes of names and metadata */
    tf_group *groups;
    size_t n_groups;
} tf_load;

static nb_status add_item(tf_load *c, const char *name, const pk_tensor *t, nb_json_buf *meta)
{
    size_t len = strlen(name) + (meta ? meta->len : 0);
    if (len > c->text_left)
        return nb__err(NB_ERR_FORMAT, "data.pkl: its names and values come to more text than its size accounts "
                       "for (shared containers?)");
    c->text_left -= len;
    if (c->n_items == c->cap_items) {
        size_t cap = c->cap_items ? c->cap_items * 2 : 64;
        tf_item *items = realloc(c->items, cap * sizeof *items);
        if (!items) return nb__err(NB_ERR_OOM, "out of memory");
        c->items = items;
        c->cap_items = cap;
    }
    tf_item *it = &c->items[c->n_items];
    *it = (tf_item){strdup(name), t, NULL, 0};
    if (meta) {
        it->meta = meta->data; /* the item takes the buffer */
        meta->data = NULL;
        meta->len = meta->cap = 0;
    }
    c->n_items++;
    if (!it->name) return nb__err(NB_ERR_OOM, "out of memory");
    return NB_OK;
}

static bool is_scalar(const pk_value *v)
{
    return v->kind == PK_NONE || v->kind == PK_BOOL || v->kind == PK_INT || v->kind == PK_BIGINT || v->kind == PK_FLOAT ||
           v->kind == PK_STR || v->kind == PK_BYTES || v->kind == PK_GLOBAL;
}

/* Python's repr of a float: the shortest digits that read back the same. */
static void float_repr(nb_json_buf *b, double d)
{
    if (isnan(d) || isinf(d)) {
        nb__json_buf_printf(b, "%s", isnan(d) ? "nan" : d < 0 ? "-inf" : "inf");
        return;
    }
    char buf[64];
    int p = 1;
    for (; p < 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, d);
        if (strtod(buf, NULL) == d) break;
    }
    snprintf(buf, sizeof buf, "%.*e", p - 1, d);
    int exp = atoi(strchr(buf, 'e') + 1);
    if (exp < -4 || exp >= 16) {
        nb__json_buf_append(b, buf, strlen(buf));
        return;
    }
    snprintf(buf, sizeof buf, "%.*f", p - 1 - exp > 0 ? p - 1 - exp : 0, d);
    nb__json_buf_append(b, buf, strlen(buf));
    if (!strchr(buf, '.')) nb__json_buf_append(b, ".0", 2);
}

/* Python's repr of a str (UTF-8 kept) or bytes (ASCII with escapes). */
static void text_repr(nb_json_buf *b, const char *s, size_t n, bool bytes)
{
    bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    if (bytes) nb__json_buf_append(b, "b", 1);
    nb__json_buf_append(b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '\\' || ch == (unsigned char)q) nb__json_buf_printf(b, "\\%c", ch);
        else if (ch == '\n') nb__json_buf_append(b, "\\n", 2);
        else if (ch == '\r') nb__json_buf_append(b, "\\r", 2);
        else if (ch == '\t') nb__json_buf_append(b, "\\t", 2);
        else if (ch < 0x20 || ch == 0x7f || (bytes && ch >= 0x80)) nb__json_buf_printf(b, "\\x%02x", ch);
        else nb__json_buf_append(b, s + i, 1);
    }
    nb__json_buf_append(b, &q, 1);
}

/* The metadata text of a scalar or a sequence of scalars; a string at the top is itself. Stops
 * early once the text passes limit bytes (the caller refuses it then). */
static void repr(nb_json_buf *b, const pk_value *v, bool top, size_t limit)
{
    switch (v->kind) {
    case PK_NONE: nb__json_buf_append(b, "None", 4); break;
    case PK_BOOL: nb__json_buf_printf(b, "%s", v->u.b ? "True" : "False"); break;
    case PK_INT: nb__json_buf_printf(b, "%lld", (long long)v->u.i); break;
    case PK_BIGINT: nb__json_buf_append(b, v->u.str.s, v->u.str.len); break;
    case PK_FLOAT: float_repr(b, v->u.f); break;
    case PK_STR:
        if (top) nb__json_buf_append(b, v->u.str.s, v->u.str.len);
        else text_repr(b, v->u.str.s, v->u.str.len, false);
        break;
    case PK_BYTES: text_repr(b, v->u.str.s, v->u.str.len, true); break;
    case PK_GLOBAL: nb__json_buf_printf(b, "%s", nb__pickle_global_name(v)); break;
    default: {
        size_t n = v->u.seq.n;
        if (v->kind == PK_SET && !n) {
            nb__json_buf_append(b, "set()", 5);
            break;
        }
        nb__json_buf_append(b, v->kind == PK_LIST ? "[" : v->kind == PK_SET ? "{" : "(", 1);
        for (size_t i = 0; i < n && b->len <= limit; i++) {
            if (i) nb__json_buf_append(b, ", ", 2);
            repr(b, v->u.seq.items[i], false, limit);
        }
        if (v->kind == PK_TUPLE && n == 1) nb__json_buf_append(b, ",", 1);
        nb__json_buf_append(b, v->kind == PK_LIST ? "]" : v->kind == PK_SET ? "}" : ")", 1);
    }
    }
}

static nb_status add_meta(tf_load *c, const char *name, const pk_value *v)
{
    if (v->kind == PK_STR && memchr(v->u.str.s, '\0', v->u.str.len))
        return nb__err(NB_ERR_UNSUPPORTED, "'%.200s': the string holds a NUL character", name);
    nb_json_buf b = {0};
    repr(&b, v, true, c->text_left);
    if (!b.oom && !b.data) nb__json_buf_append(&b, "", 0);
    nb_status st = b.oom ? nb__err(NB_ERR_OOM, "out of memory") : add_item(c, name, NULL, &b);
    nb__json_buf_free(&b);
    return st;
}

/* name + "." + part (just part at the top) into a new buffer. */
static nb_status join(const char *name, const char *part, size_t part_len, char **out)
{
    size_t n = strlen(name);
    if (n + 1 + part_len >= TF_MAX_NAME)
        return nb__err(NB_ERR_FORMAT, "a name longer than %d bytes under '%.200s'", TF_MAX_NAME, name);
    char *s = malloc(n + part_len + 2);
    if (!s) return nb__err(NB_ERR_OOM, "out of memory");
    if (n) memcpy(s, name, n), s[n++] = '.';
    memcpy(s + n, part, part_len);
    s[n + part_len] = '\0';
    *out = s;
    return NB_OK;
}

static nb_status walk(tf_load *c, const pk_value *v, const char *name, int depth);

static nb_status walk_child(tf_load *c, const pk_value *v, const char *name, const char *part, size_t part_len,
                            int depth)
{
    char *child = NULL;
    NB_TRY(join(name, part, part_len, &child));
    nb_status st = walk(c, v, child, depth + 1);
    free(child);
    return st;
}

static nb_status walk_dict(tf_load *c, const pk_value *v, const char *name, int depth)
{
    static const pk_value empty = {PK_STR, {.str = {"{}", 2}}}; /* an empty dict inside: "{}" */
    if (!v->u.seq.n && depth) return add_meta(c, name, &empty);
    for (size_t i = 0; i < v->u.seq.n; i += 2) {
        const pk_value *k = v->u.seq.items[i];
        char num[32];
        const char *part = num;
        size_t len;
        if (k->kind == PK_STR) {
            part = k->u.str.s;
            len = k->u.str.len;
            if (memchr(part, '\0', len))
                return nb__err(NB_ERR_UNSUPPORTED, "a key under '%.200s' holds a NUL character", name);
        } else if (k->kind == PK_INT) {
            len = (size_t)snprintf(num, sizeof num, "%lld", (long long)k->u.i);
        } else {
            if (!depth)
                return nb__err(NB_ERR_UNSUPPORTED, "a top-level dict key is %s (nabla reads string and int keys)",
                               nb__pickle_kind_name(k->kind));
            return nb__err(NB_ERR_UNSUPPORTED, "a dict key under '%.200s' is %s (nabla reads string and int keys)",
                           name, nb__pickle_kind_name(k->kind));
        }
        NB_TRY(walk_child(c, v->u.seq.items[i + 1], name, part, len, depth));
    }
    return NB_OK;
}

static nb_status walk(tf_load *c, const pk_value *v, const char *name, int depth)
{
    if (depth > TF_MAX_DEPTH)
        return nb__err(NB_ERR_FORMAT, "nesting deeper than %d levels at '%.200s'", TF_MAX_DEPTH, name);
    if (!c->visits_left--)
        return nb__err(NB_ERR_FORMAT, "data.pkl's containers are shared too many times to flatten");
    switch (v->kind) {
    case PK_DICT: return walk_dict(c, v, name, depth);
    case PK_TENSOR: return add_item(c, name, v->u.tensor, NULL);
    case PK_STORAGE:
        return nb__err(NB_ERR_UNSUPPORTED, "'%.200s' is a bare storage (%s): nabla reads tensors", name,
                       v->u.storage->type_name);
    case PK_LIST:
    case PK_TUPLE:
    case PK_SET: {
        bool scalars = true;
        for (size_t i = 0; i < v->u.seq.n && scalars; i++) scalars = is_scalar(v->u.seq.items[i]);
        if (scalars) return add_meta(c, name, v);
        for (size_t i = 0; i < v->u.seq.n; i++) {
            char num[32];
            int len = snprintf(num, sizeof num, "%zu", i);
            NB_TRY(walk_child(c, v->u.seq.items[i], name, num, (size_t)len, depth));
        }
        return NB_OK;
    }
    default: return add_meta(c, name, v);
    }
}

static int cmp_item_name(const void *a, const void *b)
{
    return strcmp((*(const tf_item *const *)a)->name, (*(const tf_item *const *)b)->name);
}

/* The flattened names must be unique (a key "a.b" beside a dict "a" holding "b" collide). */
static nb_status check_unique(tf_load *c)
{
    if (c->n_items < 2) return NB_OK;
    const tf_item **s = malloc(c->n_items * sizeof *s);
    if (!s) return nb__err(NB_ERR_OOM, "out of memory");
    for (size_t i = 0; i < c->n_items; i++) s[i] = &c->items[i];
    qsort(s, c->n_items, sizeof *s, cmp_item_name);
    const char *dup = NULL;
    for (size_t i = 1; i < c->n_items && !dup; i++)
        if (strcmp(s[i - 1]->name, s[i]->name) == 0) dup = s[i]->name;
    nb_status st = dup ? nb__err(NB_ERR_FORMAT, "the name '%.200s' appears twice (nested names are joined with "
                                 "'.')", dup) : NB_OK;
    free(s);
    return st;
}

/* ==== loading: storages and tensors =========================================================== */

static int cmp_item_key(const void *a, const void *b)
{
    return strcmp((*(const tf_item *const *)a)->tensor->storage->key, (*(const tf_item *const *)b)->tensor->storage->key);
}

/* Groups the tensors by storage key, and checks each storage against its entry. */
static nb_status group_storages(tf_load *c)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n_items; i++) n += c->items[i].tensor != NULL;
    tf_item **t = malloc((n ? n : 1) * sizeof *t);
    c->groups = calloc(n ? n : 1, sizeof *c->groups);
    if (!t || !c->groups) {
        free(t);
        return nb__err(NB_ERR_OOM, "out of memory");
    }
    n = 0;
    for (size_t i = 0; i < c->n_items; i++)
        if (c->items[i].tensor) t[n++] = &c->items[i];
    qsort(t, n, sizeof *t, cmp_item_key);
    nb_status st = NB_OK;
    for (size_t i = 0; i < n && st == NB_OK; i++) {
        const pk_storage *s = t[i]->tensor->storage;
        tf_group *g = c->n_groups ? &c->groups[c->n_groups - 1] : NULL;
        if (!g || strcmp(g->storage->key, s->key) != 0) {
            g = &c->groups[c->n_groups++];
            g->storage = s;
        } else if (g->storage->elem != s->elem || g->storage->numel != s->numel) {
            st = nb__err(NB_ERR_FORMAT, "storage '%.200s' is declared as %s of %lld and as %s of %lld", s->key,
                         g->storage->type_name, (long long)g->storage->numel, s->type_name, (long long)s->numel);
        }
        g->uses++;
        t[i]->group = (size_t)(g - c->groups);
    }
    free(t);
    char name[512];
    for (size_t i = 0; i < c->n_groups && st == NB_OK; i++) {
        tf_group *g = &c->groups[i];
        const pk_storage *s = g->storage;
        snprintf(name, sizeof name, "%sdata/%s", c->prefix, s->key);
        g->entry = nb__zip_find(&c->zip, name);
        if (!g->entry) {
            st = nb__err(NB_ERR_FORMAT, "storage '%.200s' (%s) has no entry '%s'", s->key, s->type_name, name);
        } else if (__builtin_mul_overflow((uint64_t)s->numel, (uint64_t)(s->elem ? s->elem->size : 1), &g->nbytes) ||
                   g->nbytes != g->entry->size) {
            st = nb__err(NB_ERR_FORMAT, "entry '%s' holds %llu bytes, but storage '%.200s' declares %lld elements of %s",
                         name, (unsigned long long)g->entry->size, s->key, (long long)s->numel, s->type_name);
        }
    }
    return st;
}

/* The tensor's dtype is nabla's, and its elements lie inside its storage; *nbytes gets its size. */
static nb_status check_tensor(const tf_load *c, const tf_item *it, uint64_t *nbytes)
{
    const pk_tensor *t = it->tensor;
    const tf_group *g = &c->groups[it->group];
    if (t->elem->nb < 0)
        return nb__err(NB_ERR_UNSUPPORTED, "tensor '%.200s': dtype %s (storage '%.200s', %s) is not supported: nabla "
                       "reads " TF_NB_DTYPES, it->name, t->elem->dtype, t->storage->key, t->storage->type_name);
    int64_t numel = 1, last = t->offset;
    bool overflow = false;
    for (int d = 0; d < t->ndim; d++) overflow |= __builtin_mul_overflow(numel, t->size[d], &numel);
    for (int d = 0; d < t->ndim && numel; d++) {
        int64_t span;
        overflow |= __builtin_mul_overflow(t->size[d] - 1, t->stride[d], &span);
        overflow |= __builtin_add_overflow(last, span, &last);
    }
    char sz[NB_SHAPE_STR_MAX], st[NB_SHAPE_STR_MAX];
    uint64_t need = 0;
    if (!overflow && numel) overflow = __builtin_mul_overflow((uint64_t)last + 1, (uint64_t)t->elem->size, &need);
    if (!overflow) overflow = __builtin_mul_overflow((uint64_t)numel, (uint64_t)t->elem->size, nbytes);
    if (overflow || need > g->nbytes)
        return nb__err(NB_ERR_FORMAT, "tensor '%.200s': size %s with stride %s at offset %lld needs %s%llu bytes, "
                       "but storage '%.200s' (%s) holds %llu", it->name, nb__shape_str(t->size, t->ndim, sz),
                       nb__shape_str(t->stride, t->ndim, st), (long long)t->offset, overflow ? "more than " : "",
                       (unsigned long long)(overflow ? UINT64_MAX : need), t->storage->key, t->storage->type_name,
                       (unsigned long long)g->nbytes);
    return NB_OK;
}

/* Whether t is its whole storage, in order: read straight into the tensor. */
static bool covers_storage(const pk_tensor *t, uint64_t nbytes)
{
    int64_t expect = 1, numel = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->size[d] != 1 && t->stride[d] != expect) return false;
        expect *= t->size[d];
        numel *= t->size[d];
    }
    return t->offset == 0 && (uint64_t)numel * (uint64_t)t->elem->size == nbytes;
}

/* Copies t's elements, row-major, out of the storage's bytes. */
static void gather(char *dst, const char *src, const pk_tensor *t)
{
    size_t es = (size_t)t->elem->size;
    int nd = t->ndim;
    if (nd == 0) {
        memcpy(dst, src + (size_t)t->offset * es, es);
        return;
    }
    for (int d = 0; d < nd; d++)
        if (!t->size[d]) return;
    int64_t idx[NB_MAX_DIMS] = {0}, inner = t->size[nd - 1], is = t->stride[nd - 1];
    for (;;) {
        int64_t base = t->offset;
        for (int d = 0; d < nd - 1; d++) base += idx[d] * t->stride[d];
        if (is == 1) {
            memcpy(dst, src + (size_t)base * es, (size_t)inner * es);
            dst += (size_t)inner * es;
        } else {
            for (int64_t j = 0; j < inner; j++, dst += es) memcpy(dst, src + (size_t)(base + j * is) * es, es);
        }
        int d = nd - 2;
        while (d >= 0 && ++idx[d] == t->size[d]) idx[d--] = 0;
        if (d < 0) return;
    }
}

/* Makes the item's tensor (on the CPU). */
static nb_status make_tensor(tf_load *c, const tf_item *it, nb_tensor **out)
{
    const pk_tensor *t = it->tensor;
    tf_group *g = &c->groups[it->group];
    nb_tensor *x = nb__tensor_new(t->size, t->ndim, (nb_dtype)t->elem->nb, nb_cpu());
    if (!x) return nb_last_status();
    nb_status st = NB_OK;
    if (g->uses == 1 && !g->buf && covers_storage(t, g->nbytes)) {
        st = nb__zip_read(&c->zip, g->entry, nb__data(x));
    } else {
        if (!g->buf) {
            g->buf = malloc(g->nbytes ? (size_t)g->nbytes : 1);
            st = g->buf ? nb__zip_read(&c->zip, g->entry, g->buf)
                        : nb__err(NB_ERR_OOM, "out of memory for storage '%.200s' (%llu bytes)", g->storage->key,
                                  (unsigned long long)g->nbytes);
        }
        if (st == NB_OK) gather(nb__data(x), g->buf, t);
    }
    if (--g->uses == 0) {
        free(g->buf);
        g->buf = NULL;
    }
    if (st == NB_OK && NB_IO_BIG_ENDIAN)
        nb__io_swap_elements(nb__data(x), (size_t)nb__numel(t->size, t->ndim) * (size_t)t->elem->size,
                             (size_t)t->elem->size);
    if (st != NB_OK) {
        nb__release(x);
        return st;
    }
    *out = x;
    return NB_OK;
}

/* Every tensor checked; and since views are copied out (an expanded one can be far larger than
 * its storage, and many may share one), their total is bounded by the storages'. */
static nb_status check_tensors(const tf_load *c)
{
    uint64_t total = 0, stored = 0, nbytes = 0;
    for (size_t i = 0; i < c->n_items; i++) {
        if (!c->items[i].tensor) continue;
        NB_TRY(check_tensor(c, &c->items[i], &nbytes));
        total = total + nbytes < total ? UINT64_MAX : total + nbytes;
    }
    for (size_t i = 0; i < c->n_groups; i++) stored += c->groups[i].nbytes;
    if (total > TF_VIEW_RATIO * stored + TF_VIEW_SLACK)
        return nb__err(NB_ERR_FORMAT, "the tensors come to %llu bytes, more than %d times their storages' %llu (plus "
                       "%d MiB): nabla copies views out of their storages", (unsigned long long)total, TF_VIEW_RATIO,
                       (unsigned long long)stored, TF_VIEW_SLACK >> 20);
    return NB_OK;
}

static nb_status fill_map(tf_load *c, nb_device device, nb_tensor_map *m)
{
    NB_TRY(check_tensors(c));
    for (size_t i = 0; i < c->n_items; i++) {
        const tf_item *it = &c->items[i];
        if (!it->tensor) {
            if (nb__tensor_map_metadata_append(m, it->name, it->meta) != NB_OK) return nb_last_status();
            continue;
        }
        nb_tensor *t = NULL;
        nb_status st = make_tensor(c, it, &t);
        if (st == NB_OK && device.type == NB_DEVICE_CPU) {
            st = nb_tensor_map_set(m, it->name, t);
        } else if (st == NB_OK) {
            nb_scope *s = nb_scope_begin();
            nb_tensor *d = s ? nb_to(t, device) : NULL;
            st = d ? nb_tensor_map_set(m, it->name, d) : nb_last_status();
            nb_scope_end(s);
        }
        nb__release(t);
        if (st != NB_OK) {
            char prefix[300];
            snprintf(prefix, sizeof prefix, "tensor '%.200s'", it->name);
            return nb__err_prefix(prefix);
        }
    }
    return NB_OK;
}

/* ==== loading: the archive ==================================================================== */

/* Finds `<archive>/data.pkl` (the earliest such entry with a one-folder prefix). */
static nb_status find_archive(tf_load *c, const nb_zip_entry **pkl)
{
    *pkl = NULL;
    for (size_t i = 0; i < c->zip.n; i++) {
        const nb_zip_entry *e = &c->zip.entries[i];
        size_t len = strlen(e->name);
        const char *slash = strchr(e->name, '/');
        if (len > 9 && slash == e->name + len - 9 && strcmp(slash, "/data.pkl") == 0 &&
            len - 8 < sizeof c->prefix && (!*pkl || e->index < (*pkl)->index))
            *pkl = e;
    }
    if (!*pkl)
        return nb__err(NB_ERR_FORMAT, "no '<archive>/data.pkl' entry among the archive's %zu: not a file torch.save "
                       "wrote", c->zip.n);
    size_t plen = strlen((*pkl)->name) - 8;
    memcpy(c->prefix, (*pkl)->name, plen);
    c->prefix[plen] = '\0';
    char name[300];
    snprintf(name, sizeof name, "%sconstants.pkl", c->prefix);
    if (nb__zip_find(&c->zip, name))
        return nb__err(NB_ERR_UNSUPPORTED, "a TorchScript archive (torch.jit.save): nabla reads what torch.save "
                       "writes");
    return NB_OK;
}

static nb_status check_byteorder(tf_load *c)
{
    char name[300], text[16];
    snprintf(name, sizeof name, "%sbyteorder", c->prefix);
    const nb_zip_entry *e = nb__zip_find(&c->zip, name);
    if (!e) return NB_OK; /* written since torch 1.12ish; before, always little-endian */
    if (e->size >= sizeof text) return nb__err(NB_ERR_FORMAT, "'%s' holds %llu bytes, expected \"little\"", name,
                                               (unsigned long long)e->size);
    NB_TRY(nb__zip_read(&c->zip, e, text));
    text[e->size] = '\0';
    if (strcmp(text, "little") == 0) return NB_OK;
    if (strcmp(text, "big") == 0)
        return nb__err(NB_ERR_UNSUPPORTED, "'%s' says \"big\": written on a big-endian machine, nabla reads "
                       "little-endian files", name);
    return nb__err(NB_ERR_FORMAT, "'%s' holds \"%.*s\", expected \"little\"", name, (int)e->size, text);
}

static nb_status read_pickle(tf_load *c, const pk_value **root)
{
    const nb_zip_entry *e;
    NB_TRY(find_archive(c, &e));
    NB_TRY(check_byteorder(c));
    if (e->size > TF_MAX_PICKLE)
        return nb__err(NB_ERR_FORMAT, "'%s' is %llu bytes, more than the limit of %zu", e->name,
                       (unsigned long long)e->size, TF_MAX_PICKLE);
    c->pkl_len = (size_t)e->size;
    c->pkl = malloc(c->pkl_len ? c->pkl_len : 1);
    if (!c->pkl) return nb__err(NB_ERR_OOM, "out of memory for '%s' (%zu bytes)", e->name, c->pkl_len);
    NB_TRY(nb__zip_read(&c->zip, e, c->pkl));
    NB_TRY(nb__pickle_load(c->pkl, c->pkl_len, &c->doc, root));
    if ((*root)->kind != PK_DICT)
        return nb__err(NB_ERR_UNSUPPORTED, "the file holds %s, not a dict: nabla reads dicts of tensors (what "
                       "torch.save(model.state_dict()) writes)", nb__pickle_kind_name((*root)->kind));
    return NB_OK;
}

/* Explains a file that is not a zip archive when it is one of the formats a .pt may hold. */
static void hint_format(const char *path)
{
    unsigned char head[16] = {0};
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(head, 1, sizeof head, f) : 0;
    if (f) fclose(f);
    if (n >= 4 && head[0] == 0x80 && head[2] == 0x8a)
        nb__err(NB_ERR_UNSUPPORTED, "torch.save's legacy format (before PyTorch 1.6, or "
                "_use_new_zipfile_serialization=False): nabla reads the zip format (load it in PyTorch and save it "
                "again)");
    else if (n >= 9 && head[8] == '{' && !head[7] && !head[6])
        nb__err(NB_ERR_FORMAT, "not a zip archive: this looks like a safetensors file (nb_safetensors_load reads it)");
}

static void load_free(tf_load *c)
{
    nb__zip_close(&c->zip);
    free(c->pkl);
    nb__pickle_free(c->doc);
    for (size_t i = 0; i < c->n_items; i++) {
        free(c->items[i].name);
        free(c->items[i].meta);
    }
    free(c->items);
    for (size_t i = 0; i < c->n_groups; i++) free(c->groups[i].buf);
    free(c->groups);
}

nb_status nb_torch_load(const char *path, nb_device device, nb_tensor_map **out)
{
    if (out) *out = NULL;
    if (!path || !out) return nb__err(NB_ERR_INVALID_ARG, "torch_load: NULL %s", path ? "out" : "path");
    if (nb_device_check(device) != NB_OK) return nb__io_wrap_err("torch_load", path, NULL);
    tf_load c = {.path = path};
    nb_tensor_map *m = NULL;
    const pk_value *root = NULL;
    nb_status st = nb__zip_open(&c.zip, path);
    if (st == NB_ERR_FORMAT) hint_format(path);
    if (st == NB_OK) st = read_pickle(&c, &root);
    if (st == NB_OK) {
        c.visits_left = 2 * nb__pickle_value_count(c.doc) + 1024;
        c.text_left = 64 * c.pkl_len + ((size_t)1 << 20);
        st = walk(&c, root, "", 0);
    }
    if (st == NB_OK) st = check_unique(&c);
    if (st == NB_OK) st = group_storages(&c);
    if (st == NB_OK) st = (m = nb_tensor_map_create()) ? fill_map(&c, device, m) : nb_last_status();
    load_free(&c);
    if (st != NB_OK) {
        nb_tensor_map_free(m);
        return nb__io_wrap_err("torch_load", path, NULL);
    }
    *out = m;
    return NB_OK;
}
