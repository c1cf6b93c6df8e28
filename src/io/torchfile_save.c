/* Saving in PyTorch's checkpoint format (see torchfile.c for the format): what
 * torch.save(state_dict) writes, an OrderedDict of tensors, each with a storage of its own
 * (contiguous, offset 0), keys "0", "1"... in the map's order, the map's metadata after them as
 * string values, entries aligned at 64 bytes; no .format_version (torch 2.x would then compute
 * storage offsets from miniz's own layout, which this writer does not follow).
 */
#include <stdlib.h>
#include <string.h>

#include "core/dispatch_impl.h"
#include "io/fileio_impl.h"
#include "io/torchfile_impl.h"

typedef struct tf_save {
    const nb_tensor_map *m;
    const char *path;
    nb_json_buf pkl;
} tf_save;

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

/* One tensor: _rebuild_tensor_v2(('storage', <class>, key, 'cpu', numel), 0, size, stride, False,
 * OrderedDict()). Memo: 0 OrderedDict, 1 _rebuild_tensor_v2, 2 + element type its storage class. */
static void put_tensor(nb_json_buf *b, const nb_tensor *t, int key, bool *memo_set)
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
    nb__pk_int(b, nb__numel(t->shape, t->ndim));
    nb__pk_op(b, PK_OP_TUPLE);
    nb__pk_op(b, PK_OP_BINPERSID);
    nb__pk_int(b, 0);
    int64_t stride[NB_MAX_DIMS], s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        stride[d] = s;
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
            put_tensor(b, nb__tensor_map_at(c->m, i), i, memo_set);
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

static nb_status write_entries(nb_zip_writer *w, tf_save *c)
{
    const char *op = "torch_save";
    NB_TRY(nb__zip_add(w, "archive/data.pkl", c->pkl.data, c->pkl.len));
    NB_TRY(nb__zip_add(w, "archive/byteorder", "little", 6));
    char *scratch = NULL, name[48];
    size_t cap = 0;
    nb_status st = NB_OK;
    for (int i = 0; i < nb_tensor_map_size(c->m) && st == NB_OK; i++) {
        const nb_tensor *t = nb__tensor_map_at(c->m, i);
        size_t nbytes = (size_t)nb__numel(t->shape, t->ndim) * nb_dtype_size(t->dtype);
        nb_scope *s = nb_scope_begin();
        const char *bytes =
            !s ? NULL : nbytes ? nb__io_host_bytes(op, c->path, nb_tensor_map_name(c->m, i), t, nbytes, &scratch, &cap) : "";
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
    if (st == NB_OK) st = build_pickle(&c);
    if (st == NB_OK) st = nb__io_save_atomic("torch_save", path, write_file, &c);
    nb__json_buf_free(&c.pkl);
    return st;
}
