/* Internal: the two layers under PyTorch's checkpoint format (src/io/torchfile.c, torchfile_save.c).
 *
 *  - zip.c: a minimal zip archive reader (stored and deflated entries, zip64, CRC-32 checked) and
 *    writer (stored entries, each entry's data aligned to 64 bytes as torch's writer does, zip64
 *    when an entry or an offset needs it).
 *  - pickle.c, pickle_globals.c, pickle_write.c: the subset of Python's pickle that torch.save
 *    writes: a reader that evaluates a pickle into a tree of values without ever calling anything
 *    (pickle.c), over an allow-list of torch's globals and its element types, as
 *    torch.load(weights_only=True) (pickle_globals.c, with pickle_impl.h), and the writer's
 *    opcodes (pickle_write.c).
 *
 * Errors are set without a prefix ("entry 'archive/data/0': ...", "data.pkl: unknown opcode 0xff
 * at offset 12"): torchfile.c puts "torch_load: <path>: " in front.
 */
#ifndef NB_IO_TORCHFILE_IMPL_H
#define NB_IO_TORCHFILE_IMPL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/tensor_impl.h"
#include "io/json_impl.h"

/* ==== zip ===================================================================================== */

typedef struct nb_zip_entry {
    const char *name; /* NUL-ended (names holding a NUL are refused) */
    size_t index;     /* position in the central directory */
    uint64_t size, comp_size, local_offset;
    uint32_t crc;
    uint16_t method; /* 0 stored, 8 deflated */
} nb_zip_entry;

typedef struct nb_zip {
    FILE *f;
    uint64_t file_size;
    uint64_t data_end;         /* where the central directory starts: entries' data lie before it */
    nb_zip_entry *entries;     /* sorted by name */
    size_t n;
    char *names;               /* the entries' names, one block */
} nb_zip;

/* Opens path and reads its central directory. On failure the error is set and z holds nothing
 * (nb__zip_close is still safe). */
nb_status nb__zip_open(nb_zip *z, const char *path);
void nb__zip_close(nb_zip *z);
/* The entry named name, or NULL. */
const nb_zip_entry *nb__zip_find(const nb_zip *z, const char *name);
/* Reads the whole entry (e->size bytes, inflated when deflated) into dst and checks its CRC-32. */
nb_status nb__zip_read(nb_zip *z, const nb_zip_entry *e, void *dst);

typedef struct nb_zip_writer {
    FILE *f;
    const char *tmp; /* the file's name, for messages */
    uint64_t offset;
    struct nb_zip_written *cd; /* what the central directory lists */
    size_t n, cap;
} nb_zip_writer;

/* Appends an entry holding data[0, size), stored, its data at a multiple of 64 bytes. */
nb_status nb__zip_add(nb_zip_writer *w, const char *name, const void *data, uint64_t size);
/* Writes the central directory and its end records. */
nb_status nb__zip_finish(nb_zip_writer *w);
void nb__zip_writer_free(nb_zip_writer *w);
/* Test hook: when set, the writer gives every entry and the end record their zip64 forms, as it
 * does for entries and offsets past 4 GiB, so that the tests exercise them on small files. */
extern _Thread_local bool nb__zip_force_zip64;
/* Fuzzing hook: when set, a CRC-32 that differs from the directory's is not an error, so that
 * mutated entries reach the pickle reader and the tensor checks (tests/fuzz/fuzz_torchfile.c). */
extern _Thread_local bool nb__zip_ignore_crc;

/* ==== pickle ================================================================================== */

/* Element types of torch's storages: a typed storage class (torch.FloatStorage) or a dtype
 * (torch.float32) names one. nb is -1 where nabla has no such dtype. */
typedef struct nb_torch_elem {
    const char *storage; /* "FloatStorage" */
    const char *dtype;   /* "float32" */
    int nb;              /* nb_dtype, or -1 */
    int size;            /* bytes per element */
} nb_torch_elem;

extern const nb_torch_elem nb__torch_elems[];
extern const int nb__torch_elem_count;
/* The element type of an nb_dtype. */
const nb_torch_elem *nb__torch_elem_of(nb_dtype dt);

typedef enum pk_kind {
    PK_NONE,
    PK_BOOL,
    PK_INT,
    PK_BIGINT, /* an int past 64 bits: its decimal text in str */
    PK_FLOAT,
    PK_STR,   /* UTF-8 */
    PK_BYTES,
    PK_TUPLE,
    PK_LIST,
    PK_SET,   /* set and frozenset: kept as a sequence */
    PK_DICT,  /* dict and OrderedDict: items[2i] is a key, items[2i + 1] its value */
    PK_GLOBAL, /* an allowed global used as a value: a dtype (torch.float32), a class */
    PK_STORAGE,
    PK_TENSOR
} pk_kind;

typedef struct pk_value pk_value;

typedef struct pk_storage {
    const char *key; /* NUL-ended: the entry <archive>/data/<key> */
    const nb_torch_elem *elem; /* NULL: an UntypedStorage (bytes), typed by the tensor */
    char type_name[64];        /* "torch.FloatStorage", for messages */
    int64_t numel;             /* in elements of elem (bytes when untyped) */
} pk_storage;

typedef struct pk_tensor {
    const pk_storage *storage;
    const nb_torch_elem *elem; /* the tensor's element type */
    int64_t offset;            /* in elements */
    int ndim;
    int64_t size[NB_MAX_DIMS], stride[NB_MAX_DIMS];
} pk_tensor;

struct pk_value {
    pk_kind kind;
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *s; /* not NUL-ended; may hold NULs */
            size_t len;
        } str;
        struct {
            pk_value **items;
            size_t n, cap;
        } seq;
        int global; /* an index into pickle.c's allow-list */
        pk_storage *storage;
        pk_tensor *tensor;
    } u;
};

typedef struct pk_doc pk_doc;

/* Evaluates the pickle data[0, n) (kept by the caller while the document lives). On success
 * *root is the pickled object. Limits: at most NB_PICKLE_MAX_VALUES values, stacks and memo
 * bounded by the data's size. */
#define NB_PICKLE_MAX_VALUES (1u << 24)
nb_status nb__pickle_load(const unsigned char *data, size_t n, pk_doc **doc, const pk_value **root);
void nb__pickle_free(pk_doc *doc);
/* The number of values the document holds (a bound on a walk over it). */
size_t nb__pickle_value_count(const pk_doc *doc);
/* "torch.float32", "torch.device"...: the qualified name of a PK_GLOBAL value. */
const char *nb__pickle_global_name(const pk_value *v);
/* "an int", "a list"... for messages. */
const char *nb__pickle_kind_name(pk_kind k);

/* Writing: opcodes of protocol 2, each appended to b (which records running out of memory). Only
 * the opcodes torch 1.13's weights_only loader accepts. */
void nb__pk_op(nb_json_buf *b, unsigned char op);
void nb__pk_int(nb_json_buf *b, int64_t v);
void nb__pk_str(nb_json_buf *b, const char *s);
void nb__pk_global(nb_json_buf *b, const char *module, const char *name);
void nb__pk_put(nb_json_buf *b, uint32_t memo);
void nb__pk_get(nb_json_buf *b, uint32_t memo);

enum {
    PK_OP_MARK = '(',
    PK_OP_STOP = '.',
    PK_OP_EMPTY_TUPLE = ')',
    PK_OP_TUPLE = 't',
    PK_OP_TUPLE1 = 0x85,
    PK_OP_TUPLE2 = 0x86,
    PK_OP_TUPLE3 = 0x87,
    PK_OP_REDUCE = 'R',
    PK_OP_SETITEMS = 'u',
    PK_OP_BINPERSID = 'Q',
    PK_OP_NEWFALSE = 0x89,
    PK_OP_PROTO = 0x80
};

#endif
