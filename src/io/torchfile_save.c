/* Saving in PyTorch's checkpoint format (see torchfile.c for the format): what
 * torch.save(state_dict) writes, an OrderedDict of tensors, the map's metadata after them as
 * string values, entries aligned at 64 bytes; no .format_version (torch 2.x would then compute
 * storage offsets from miniz's own layout, which this writer does not follow).
 *
 * Storages: tensors of the map that share an nb storage (tied weights, a weight and its
 * transpose, slices of one buffer), with one dtype, are written as torch.save writes them: one
 * storage record (data/<key>) that each tensor references with its own offset, sizes and strides,
 * so that torch.load gives tensors sharing memory. The record holds the span of the nb storage
 * those tensors reach, from the lowest element any of them starts at to the highest any reaches
 * (torch.save writes its whole storage; bytes no saved tensor can see are left out). Any other
 * tensor gets a storage of its own, its elements contiguous at offset 0. Keys are "0", "1"... in
 * the order the map first refers to them.
 */
#include <stdlib.h>
#include <string.h>

#include "core/dispatch_impl.h"
#include "io/fileio_impl.h"
#include "io/torchfile_impl.h"

/* A storage record: data/<its index>. */
typedef struct tf_record {
    int first;   /* the map index of its first tensor: the source of its bytes, its name in errors */
    bool shared; /* true: elements [start, start + numel) of that tensor's nb storage, which several
                  * tensors view; false: the tensor's own numel elements, contiguous */
    int64_t start, numel;
} tf_record;

typedef struct tf_save {
    const nb_tensor_map *m;
    const char *path;
    nb_json_buf pkl;
    int *record_of; /* per tensor of the map, its record */
    tf_record *records;
    int n_records;
} tf_save;

/* One past the highest element t reaches (t has elements). */
static int64_t end_of(const nb_tensor *t)
{
    int64_t end = t->offset + 1;
    for (int d = 0; d < t->ndim; d++) end += (t->shape[d] - 1) * t->strides[d];
    return end;
}

typedef struct tf_key {
    const nb_storage *storage;
    nb_dtype dtype;
    int i;
} tf_key;

static int cmp_key(const void *a, const void *b)
{
    const tf_key *x = a, *y = b;
    if (x->storage != y->storage) return (uintptr_t)x->storage < (uintptr_t)y->storage ? -1 : 1;
    if (x->dtype != y->dtype) return x->dtype < y->dtype ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* Which record each tensor goes to: tensors with elements sorted by (storage, dtype), each run of
 * two or more one shared record over their span; records numbered in the map's order. */
static nb_status plan_records(tf_save *c)
{
    int n = nb_tensor_map_size(c->m);
    tf_key *keys = malloc((size_t)(n ? n : 1) * sizeof *keys);
    int *group = malloc((size_t)(n ? n : 1) * sizeof *group); /* per tensor: its run's first tensor, or -1 */
    c->record_of = malloc((size_t)(n ? n : 1) * sizeof *c->record_of);
    c->records = calloc((size_t)(n ? n : 1), sizeof *c->records);
    if (!keys || !group || !c->record_of || !c->records) {
        free(keys);
        free(group);
        return nb__err(NB_ERR_OOM, "torch_save: %s: out of memory", c->path);
    }
    int nk = 0;
    for (int i = 0; i < n; i++) {
        const nb_tensor *t = nb__tensor_map_at(c->m, i);
        group[i] = -1;
        if (nb__numel(t->shape, t->ndim)) keys[nk++] = (tf_key){t->storage, t->dtype, i};
    }
    qsort(keys, (size_t)nk, sizeof *keys, cmp_key);
    for (int a = 0, b; a < nk; a = b) {
        for (b = a + 1; b < nk && keys[b].storage == keys[a].storage && keys[b].dtype == keys[a].dtype; b++) continue;
        for (int k = a; b - a > 1 && k < b; k++) group[keys[k].i] = keys[a].i; /* the run's lowest index */
    }
    for (int i = 0; i < n; i++) {
        const nb_tensor *t = nb__tensor_map_at(c->m, i);
        int g = group[i];
        if (g >= 0 && g < i) { /* its run's record exists: widen its span */
            tf_record *r = &c->records[c->record_of[g]];
            int64_t lo = t->offset < r->start ? t->offset : r->start, hi = end_of(t);
            if (hi < r->start + r->numel) hi = r->start + r->numel;
            r->start = lo;
            r->numel = hi - lo;
            c->record_of[i] = c->record_of[g];
            continue;
        }
        if (g >= 0) c->records[c->n_records] = (tf_record){i, true, t->offset, end_of(t) - t->offset};
        else c->records[c->n_records] = (tf_record){i, false, 0, nb__numel(t->shape, t->ndim)};
        c->record_of[i] = c->n_records++;
    }
    free(keys);
    free(group);
    return NB_OK;
}

static void put_tuple(nb_json_buf *b, const int64_t *v, int n)
{
    if (!n) {
        nb__pk_op(b, PK_OP_EMPTY_TUPLE);
        return;
    }
    if (n > 3) nb__pk_op(b, PK_OP_MARK);
    for (int i = 0; i < n; i++) nb__pk_int(b, v[i]);
    nb__pk_op(b, n == 1 ? PK_OP_TUPLE1 : n == 2 ? PK_OP_TUPLE2 : n == 3 ? PK_OP_TUPLE3 : PK_OP_TUPLE);
}

/* One tensor: _rebuild_tensor_v2(('storage', <class>, key, 'cpu', numel), offset, size, stride,
 * False, OrderedDict()), its record r numbered key. Memo: 0 OrderedDict, 1 _rebuild_tensor_v2,
 * 2 + element type its storage class. */
static void put_tensor(nb_json_buf *b, const nb_tensor *t, int key, const tf_record *r, bool *memo_set)
{
    const nb_torch_elem *e = nb__torch_elem_of(t->dtype);
    int k = (int)(e - nb__torch_elems);
    if (memo_set[1]) {
        nb__pk_get(b, 1);
    } else {
        nb__pk_global(b, "torch._utils", "_rebuild_tensor_v2");
        nb__pk_put(b, 1);
        memo_set[1] = true;
    }
    nb__pk_op(b, PK_OP_MARK);
    nb__pk_op(b, PK_OP_MARK);
    nb__pk_str(b, "storage");
    if (memo_set[2 + k]) {
        nb__pk_get(b, (uint32_t)(2 + k));
    } else {
        nb__pk_global(b, "torch", e->storage);
        nb__pk_put(b, (uint32_t)(2 + k));
        memo_set[2 + k] = true;
    }
    char num[24];
    snprintf(num, sizeof num, "%d", key);
    nb__pk_str(b, num);
    nb__pk_str(b, "cpu");
    nb__pk_int(b, r->numel);
    nb__pk_op(b, PK_OP_TUPLE);
    nb__pk_op(b, PK_OP_BINPERSID);
    nb__pk_int(b, r->shared ? t->offset - r->start : 0);
    int64_t stride[NB_MAX_DIMS], s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        stride[d] = r->shared ? t->strides[d] : s;
        s *= t->shape[d] > 1 ? t->shape[d] : 1;
    }
    put_tuple(b, t->shape, t->ndim);
    put_tuple(b, stride, t->ndim);
    nb__pk_op(b, PK_OP_NEWFALSE);
    nb__pk_get(b, 0);
    nb__pk_op(b, PK_OP_EMPTY_TUPLE);
    nb__pk_op(b, PK_OP_REDUCE);
    nb__pk_op(b, PK_OP_TUPLE);
    nb__pk_op(b, PK_OP_REDUCE);
}

/* data.pkl: an OrderedDict of the tensors, then the metadata as strings, 1000 items per SETITEMS
 * as Python's pickler batches them. */
static nb_status build_pickle(tf_save *c)
{
    nb_json_buf *b = &c->pkl;
    bool memo_set[2 + 32] = {false};
    nb__pk_op(b, PK_OP_PROTO);
    nb__pk_op(b, 2);
    nb__pk_global(b, "collections", "OrderedDict");
    nb__pk_put(b, 0);
    nb__pk_op(b, PK_OP_EMPTY_TUPLE);
    nb__pk_op(b, PK_OP_REDUCE);
    int n = nb_tensor_map_size(c->m), n_meta = nb__tensor_map_metadata_count(c->m);
    for (int i = 0; i < n + n_meta; i++) {
        if (i % 1000 == 0) {
            if (i) nb__pk_op(b, PK_OP_SETITEMS);
            nb__pk_op(b, PK_OP_MARK);
        }
        if (i < n) {
            nb__pk_str(b, nb_tensor_map_name(c->m, i));
            int r = c->record_of[i];
            put_tensor(b, nb__tensor_map_at(c->m, i), r, &c->records[r], memo_set);
        } else {
            const char *k, *v;
            nb__tensor_map_metadata_at(c->m, i - n, &k, &v);
            nb__pk_str(b, k);
            nb__pk_str(b, v);
        }
    }
    if (n + n_meta) nb__pk_op(b, PK_OP_SETITEMS);
    nb__pk_op(b, PK_OP_STOP);
    if (b->oom) return nb__err(NB_ERR_OOM, "torch_save: %s: out of memory for data.pkl", c->path);
    return NB_OK;
}

/* The tensors and metadata can be written: names valid, dtypes known, metadata keys distinct
 * from the tensors' names (they share the dict). */
static nb_status check_map(const tf_save *c)
{
    int n = nb_tensor_map_size(c->m);
    for (int i = 0; i < n; i++) {
        const char *name = nb_tensor_map_name(c->m, i);
        const nb_tensor *t = nb__tensor_map_at(c->m, i);
        const char *problem = nb__tensor_name_problem(name);
        if (problem || (unsigned)t->dtype >= NB_DTYPE_COUNT)
            return nb__err(NB_ERR_INVALID_ARG, "torch_save: %s: tensor '%.200s': %s", c->path, name,
                           problem ? problem : "invalid dtype");
    }
    for (int i = 0; i < nb__tensor_map_metadata_count(c->m); i++) {
        const char *k, *v;
        nb__tensor_map_metadata_at(c->m, i, &k, &v);
        if (nb_tensor_map_contains(c->m, k))
            return nb__err(NB_ERR_INVALID_ARG, "torch_save: %s: metadata key '%.200s' is also a tensor's name (the "
                           "file keeps both in one dict)", c->path, k);
    }
    return NB_OK;
}

/* Record r's nbytes bytes, on the host, little-endian: its tensor's elements in row-major order,
 * or the span of the tensor's storage it holds. Valid until the caller's scope ends; NULL with the
 * error set. */
static const char *record_bytes(const tf_save *c, const tf_record *r, size_t nbytes, char **scratch, size_t *cap)
{
    const nb_tensor *t = nb__tensor_map_at(c->m, r->first);
    const char *name = nb_tensor_map_name(c->m, r->first);
    if (!nbytes) return "";
    if (!r->shared) return nb__io_host_bytes("torch_save", c->path, name, t, nbytes, scratch, cap);
    int64_t one = 1;
    nb_tensor *span = nb__tensor_alias(t, &r->numel, &one, 1, r->start);
    if (!span) return nb__io_wrap_err("torch_save", c->path, name), NULL;
    const char *bytes = nb__io_host_bytes("torch_save", c->path, name, span, nbytes, scratch, cap);
    nb__release(span); /* the storage lives on in t; a CPU span's bytes are the storage's own */
    return bytes;
}

static nb_status write_entries(nb_zip_writer *w, tf_save *c)
{
    NB_TRY(nb__zip_add(w, "archive/data.pkl", c->pkl.data, c->pkl.len));
    NB_TRY(nb__zip_add(w, "archive/byteorder", "little", 6));
    char *scratch = NULL, name[48];
    size_t cap = 0;
    nb_status st = NB_OK;
    for (int i = 0; i < c->n_records && st == NB_OK; i++) {
        const tf_record *r = &c->records[i];
        size_t nbytes = (size_t)r->numel * nb_dtype_size(nb__tensor_map_at(c->m, r->first)->dtype);
        nb_scope *s = nb_scope_begin();
        const char *bytes = s ? record_bytes(c, r, nbytes, &scratch, &cap) : NULL;
        snprintf(name, sizeof name, "archive/data/%d", i);
        st = bytes ? nb__zip_add(w, name, bytes, nbytes) : nb_last_status();
        nb_scope_end(s);
    }
    free(scratch);
    if (st == NB_OK) st = nb__zip_add(w, "archive/version", "3\n", 2);
    if (st == NB_OK) st = nb__zip_finish(w);
    return st;
}

static nb_status write_file(FILE *f, const char *tmp, void *ctx)
{
    tf_save *c = ctx;
    nb_zip_writer w = {.f = f, .tmp = tmp};
    nb_status st = write_entries(&w, c);
    nb__zip_writer_free(&w);
    return st == NB_OK ? NB_OK : nb__io_wrap_err("torch_save", c->path, NULL);
}

nb_status nb_torch_save(const nb_tensor_map *m, const char *path)
{
    if (!m || !path || !path[0])
        return nb__err(NB_ERR_INVALID_ARG, "torch_save: %s", !m ? "NULL map" : !path ? "NULL path" : "empty path");
    tf_save c = {.m = m, .path = path};
    nb_status st = check_map(&c);
    if (st == NB_OK) st = plan_records(&c);
    if (st == NB_OK) st = build_pickle(&c);
    if (st == NB_OK) st = nb__io_save_atomic("torch_save", path, write_file, &c);
    nb__json_buf_free(&c.pkl);
    free(c.record_of);
    free(c.records);
    return st;
}
