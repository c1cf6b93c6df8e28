/* A minimal zip archive reader and writer, for PyTorch's checkpoint format (APPNOTE.TXT 6.3).
 *
 * Reading: the end of central directory record is searched for in the file's last 64 KiB, the
 * zip64 records used when a locator precedes it; the whole central directory is read (it lies in
 * the file, so its size is bounded by the file's) and every entry checked: not encrypted, stored
 * or deflated, its local header and data inside the file before the central directory, a deflated
 * entry's size within what its compressed bytes can inflate to. Reading an entry checks the
 * local header, inflates when needed, and compares the size and CRC-32 with the directory's.
 *
 * Writing: stored entries with their sizes and CRC-32 in the local header (no data descriptors),
 * each entry's data at a multiple of 64 bytes (padding in a local "FB" extra field, as torch's
 * writer does, so torch.load(mmap=True) maps aligned storages), and zip64 forms for an entry
 * whose size or offset reaches 4 GiB and for the end records when the directory needs them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "core/error_impl.h"
#include "io/torchfile_impl.h"

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_END 0x06054b50u
#define SIG_END64 0x06064b50u
#define SIG_LOCATOR64 0x07064b50u
#define LOCAL_SIZE 30
#define CENTRAL_SIZE 46
#define END_SIZE 22
#define END64_SIZE 56
#define LOCATOR64_SIZE 20
#define MAX_COMMENT 65535
#define ALIGN 64
/* deflate's best case: 258 bytes from 2 bits, about 1032:1; generous for the stream's framing */
#define MAX_INFLATE_RATIO 1040

_Thread_local bool nb__zip_force_zip64;
_Thread_local bool nb__zip_ignore_crc;

static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const unsigned char *p) { return (uint32_t)rd16(p) | (uint32_t)rd16(p + 2) << 16; }
static uint64_t rd64(const unsigned char *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static unsigned char *wr16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    return p + 2;
}
static unsigned char *wr32(unsigned char *p, uint32_t v) { return wr16(wr16(p, (uint16_t)v), (uint16_t)(v >> 16)); }
static unsigned char *wr64(unsigned char *p, uint64_t v) { return wr32(wr32(p, (uint32_t)v), (uint32_t)(v >> 32)); }

/* ==== reading ================================================================================= */

static nb_status read_at(nb_zip *z, uint64_t offset, void *dst, size_t n, const char *what)
{
    if (offset > z->file_size || n > z->file_size - offset)
        return nb__err(NB_ERR_FORMAT, "%s at offset %llu runs past the end of the file (%llu bytes)", what,
                       (unsigned long long)offset, (unsigned long long)z->file_size);
    if (fseeko(z->f, (off_t)offset, SEEK_SET) != 0 || fread(dst, 1, n, z->f) != n)
        return nb__err(NB_ERR_IO, "reading %s: %s", what,
                       ferror(z->f) ? strerror(errno) : "unexpected end of file (was it changed while being read?)");
    return NB_OK;
}

typedef struct zip_end {
    uint64_t n, cd_size, cd_offset, end_offset; /* end_offset: where the end records begin */
} zip_end;

/* Finds the end of central directory record (and the zip64 one when a locator precedes it). */
static nb_status find_end(nb_zip *z, zip_end *e)
{
    size_t tail_len = z->file_size < END_SIZE + MAX_COMMENT ? (size_t)z->file_size : END_SIZE + MAX_COMMENT;
    unsigned char *tail = malloc(tail_len ? tail_len : 1);
    if (!tail) return nb__err(NB_ERR_OOM, "out of memory");
    uint64_t base = z->file_size - tail_len;
    nb_status st = read_at(z, base, tail, tail_len, "the end of the file");
    size_t at = tail_len;
    bool found = false;
    for (size_t i = tail_len >= END_SIZE ? tail_len - END_SIZE + 1 : 0; st == NB_OK && i-- > 0;) {
        if (rd32(tail + i) == SIG_END && i + END_SIZE + rd16(tail + i + 20) <= tail_len) {
            at = i;
            found = true;
            break;
        }
    }
    if (st == NB_OK && !found)
        st = nb__err(NB_ERR_FORMAT, "no end of central directory record in the last %zu bytes (not a zip archive, "
                     "or a truncated one)", tail_len);
    if (st != NB_OK) {
        free(tail);
        return st;
    }
    const unsigned char *r = tail + at;
    if (rd16(r + 4) != 0 || rd16(r + 6) != 0 || rd16(r + 8) != rd16(r + 10)) {
        free(tail);
        return nb__err(NB_ERR_UNSUPPORTED, "the archive spans several disks");
    }
    e->n = rd16(r + 10);
    e->cd_size = rd32(r + 12);
    e->cd_offset = rd32(r + 16);
    e->end_offset = base + at;
    bool has_locator = at >= LOCATOR64_SIZE && rd32(r - LOCATOR64_SIZE) == SIG_LOCATOR64;
    uint64_t end64 = has_locator ? rd64(r - LOCATOR64_SIZE + 8) : 0;
    free(tail);
    if (!has_locator) return NB_OK;
    uint64_t locator = e->end_offset - LOCATOR64_SIZE;
    if (end64 > locator || locator - end64 < END64_SIZE)
        return nb__err(NB_ERR_FORMAT, "the zip64 end record's offset %llu is not before its locator at %llu",
                       (unsigned long long)end64, (unsigned long long)locator);
    unsigned char b[END64_SIZE];
    NB_TRY(read_at(z, end64, b, sizeof b, "the zip64 end of central directory record"));
    if (rd32(b) != SIG_END64)
        return nb__err(NB_ERR_FORMAT, "no zip64 end of central directory record at offset %llu",
                       (unsigned long long)end64);
    if (rd32(b + 16) != 0 || rd32(b + 20) != 0 || rd64(b + 24) != rd64(b + 32))
        return nb__err(NB_ERR_UNSUPPORTED, "the archive spans several disks");
    e->n = rd64(b + 32);
    e->cd_size = rd64(b + 40);
    e->cd_offset = rd64(b + 48);
    e->end_offset = end64;
    return NB_OK;
}

/* The zip64 extended information field of a central header: replaces the fields saturated at
 * 0xffffffff, in the order of the spec. */
static nb_status read_zip64_extra(const unsigned char *x, size_t len, nb_zip_entry *e, bool need[3])
{
    uint64_t *fields[3] = {&e->size, &e->comp_size, &e->local_offset};
    static const char *const names[3] = {"size", "compressed size", "local header offset"};
    while (len >= 4) {
        uint16_t id = rd16(x), sz = rd16(x + 2);
        if (sz > len - 4) break;
        if (id == 1) {
            const unsigned char *p = x + 4;
            size_t left = sz;
            for (int k = 0; k < 3; k++) {
                if (!need[k]) continue;
                if (left < 8)
                    return nb__err(NB_ERR_FORMAT, "entry '%.200s': its zip64 field lacks the %s", e->name, names[k]);
                *fields[k] = rd64(p);
                p += 8;
                left -= 8;
                need[k] = false;
            }
        }
        x += 4 + sz;
        len -= 4 + sz;
    }
    for (int k = 0; k < 3; k++)
        if (need[k]) return nb__err(NB_ERR_FORMAT, "entry '%.200s': no zip64 field for its %s", e->name, names[k]);
    return NB_OK;
}

/* Parses one central directory header at cd + *pos; advances *pos. */
static nb_status parse_central(nb_zip *z, const unsigned char *cd, size_t cd_size, size_t *pos, nb_zip_entry *e,
                               char **name_out)
{
    size_t at = *pos;
    if (cd_size - at < CENTRAL_SIZE || rd32(cd + at) != SIG_CENTRAL)
        return nb__err(NB_ERR_FORMAT, "central directory entry %zu: no header at its offset %zu", e->index, at);
    const unsigned char *h = cd + at;
    size_t name_len = rd16(h + 28), extra_len = rd16(h + 30), comment_len = rd16(h + 32);
    if (cd_size - at - CENTRAL_SIZE < name_len + extra_len + comment_len)
        return nb__err(NB_ERR_FORMAT, "central directory entry %zu runs past the directory's end", e->index);
    char *name = *name_out;
    memcpy(name, h + CENTRAL_SIZE, name_len);
    name[name_len] = '\0';
    *name_out += name_len + 1;
    e->name = name;
    if (memchr(name, '\0', name_len))
        return nb__err(NB_ERR_FORMAT, "central directory entry %zu: its name holds a NUL byte", e->index);
    uint16_t flags = rd16(h + 8);
    e->method = rd16(h + 10);
    e->crc = rd32(h + 16);
    e->comp_size = rd32(h + 20);
    e->size = rd32(h + 24);
    e->local_offset = rd32(h + 42);
    bool need[3] = {e->size == 0xffffffffu, e->comp_size == 0xffffffffu, e->local_offset == 0xffffffffu};
    if (need[0] || need[1] || need[2])
        NB_TRY(read_zip64_extra(h + CENTRAL_SIZE + name_len, extra_len, e, need));
    *pos = at + CENTRAL_SIZE + name_len + extra_len + comment_len;
    if (flags & 1) return nb__err(NB_ERR_UNSUPPORTED, "entry '%.200s' is encrypted", name);
    if (e->method != 0 && e->method != 8)
        return nb__err(NB_ERR_UNSUPPORTED, "entry '%.200s' uses compression method %u (nabla reads stored (0) "
                       "and deflated (8) entries)", name, e->method);
    if (e->method == 0 && e->comp_size != e->size)
        return nb__err(NB_ERR_FORMAT, "entry '%.200s' is stored but its size %llu differs from its compressed "
                       "size %llu", name, (unsigned long long)e->size, (unsigned long long)e->comp_size);
    if (e->method == 8 && e->size / MAX_INFLATE_RATIO > e->comp_size)
        return nb__err(NB_ERR_FORMAT, "entry '%.200s' declares %llu bytes, more than its %llu deflated bytes can "
                       "hold", name, (unsigned long long)e->size, (unsigned long long)e->comp_size);
    if (e->local_offset > z->data_end || z->data_end - e->local_offset < LOCAL_SIZE ||
        e->comp_size > z->data_end - e->local_offset - LOCAL_SIZE)
        return nb__err(NB_ERR_FORMAT, "entry '%.200s': its %llu bytes at offset %llu run past the start of the "
                       "central directory (%llu)", name, (unsigned long long)e->comp_size,
                       (unsigned long long)e->local_offset, (unsigned long long)z->data_end);
    return NB_OK;
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const nb_zip_entry *)a)->name, ((const nb_zip_entry *)b)->name);
}

/* Reads and parses the central directory; entries end up sorted by name, duplicates refused. */
static nb_status read_directory(nb_zip *z, const zip_end *end)
{
    if (end->cd_offset > end->end_offset || end->cd_size > end->end_offset - end->cd_offset)
        return nb__err(NB_ERR_FORMAT, "the central directory (%llu bytes at offset %llu) does not end before its "
                       "end record at %llu", (unsigned long long)end->cd_size, (unsigned long long)end->cd_offset,
                       (unsigned long long)end->end_offset);
    if (end->n > end->cd_size / CENTRAL_SIZE)
        return nb__err(NB_ERR_FORMAT, "the central directory claims %llu entries in %llu bytes",
                       (unsigned long long)end->n, (unsigned long long)end->cd_size);
    z->data_end = end->cd_offset;
    size_t cd_size = (size_t)end->cd_size, n = (size_t)end->n;
    unsigned char *cd = malloc(cd_size ? cd_size : 1);
    z->entries = calloc(n ? n : 1, sizeof *z->entries);
    z->names = malloc(cd_size + n + 1); /* each name and its NUL fit in its header's bytes */
    if (!cd || !z->entries || !z->names) {
        free(cd);
        return nb__err(NB_ERR_OOM, "out of memory for a central directory of %zu bytes", cd_size);
    }
    nb_status st = read_at(z, end->cd_offset, cd, cd_size, "the central directory");
    size_t pos = 0;
    char *names = z->names;
    for (size_t i = 0; i < n && st == NB_OK; i++) {
        z->entries[i].index = i;
        z->entries[i].name = "";
        st = parse_central(z, cd, cd_size, &pos, &z->entries[i], &names);
        z->n = i + 1;
    }
    free(cd);
    if (st != NB_OK) return st;
    qsort(z->entries, z->n, sizeof *z->entries, cmp_entry);
    for (size_t i = 1; i < z->n; i++)
        if (strcmp(z->entries[i - 1].name, z->entries[i].name) == 0)
            return nb__err(NB_ERR_FORMAT, "entry '%.200s' appears twice in the central directory", z->entries[i].name);
    return NB_OK;
}

static nb_status open_zip(nb_zip *z, const char *path)
{
    z->f = fopen(path, "rb");
    if (!z->f) return nb__err(NB_ERR_IO, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fileno(z->f), &st) != 0) return nb__err(NB_ERR_IO, "cannot stat: %s", strerror(errno));
    if (!S_ISREG(st.st_mode)) return nb__err(NB_ERR_IO, "not a regular file");
    z->file_size = (uint64_t)st.st_size;
    zip_end end = {0};
    NB_TRY(find_end(z, &end));
    return read_directory(z, &end);
}

nb_status nb__zip_open(nb_zip *z, const char *path)
{
    memset(z, 0, sizeof *z);
    nb_status st = open_zip(z, path);
    if (st != NB_OK) nb__zip_close(z);
    return st;
}

void nb__zip_close(nb_zip *z)
{
    if (z->f) fclose(z->f);
    free(z->entries);
    free(z->names);
    memset(z, 0, sizeof *z);
}

const nb_zip_entry *nb__zip_find(const nb_zip *z, const char *name)
{
    nb_zip_entry key = {.name = name};
    return z->n ? bsearch(&key, z->entries, z->n, sizeof *z->entries, cmp_entry) : NULL;
}

/* Inflates comp_size bytes at the file's position into dst[0, size). */
static nb_status inflate_entry(nb_zip *z, const nb_zip_entry *e, unsigned char *dst)
{
    enum { CHUNK = 1 << 16 };
    unsigned char *in = malloc(CHUNK);
    z_stream s = {0};
    if (!in || inflateInit2(&s, -MAX_WBITS) != Z_OK) {
        free(in);
        return nb__err(NB_ERR_OOM, "entry '%.200s': out of memory to inflate it", e->name);
    }
    uint64_t left_in = e->comp_size, left_out = e->size;
    int rc = Z_OK;
    nb_status st = NB_OK;
    while (rc != Z_STREAM_END && st == NB_OK) {
        if (s.avail_in == 0 && left_in) {
            size_t n = left_in < CHUNK ? (size_t)left_in : CHUNK;
            if (fread(in, 1, n, z->f) != n) {
                st = nb__err(NB_ERR_IO, "reading entry '%.200s': %s", e->name,
                             ferror(z->f) ? strerror(errno) : "unexpected end of file");
                break;
            }
            s.next_in = in;
            s.avail_in = (uInt)n;
            left_in -= n;
        }
        uInt room = left_out > (1u << 30) ? 1u << 30 : (uInt)left_out;
        unsigned char spill;
        s.next_out = room ? dst : &spill; /* room 0: any output is one byte too many */
        s.avail_out = room ? room : 1;
        rc = inflate(&s, Z_NO_FLUSH);
        size_t made = (size_t)(s.next_out - (room ? dst : &spill));
        if (!room && made) {
            st = nb__err(NB_ERR_FORMAT, "entry '%.200s' inflates to more than its declared %llu bytes", e->name,
                         (unsigned long long)e->size);
            break;
        }
        dst += made;
        left_out -= made;
        if (rc == Z_BUF_ERROR && s.avail_in == 0 && left_in == 0) rc = Z_DATA_ERROR; /* input ran out */
        if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
            st = rc == Z_MEM_ERROR ? nb__err(NB_ERR_OOM, "entry '%.200s': out of memory to inflate it", e->name)
                                   : nb__err(NB_ERR_FORMAT, "entry '%.200s': bad deflate data (%s)", e->name,
                                             s.msg ? s.msg : "truncated");
    }
    if (st == NB_OK && left_out)
        st = nb__err(NB_ERR_FORMAT, "entry '%.200s' inflates to %llu bytes, not its declared %llu", e->name,
                     (unsigned long long)(e->size - left_out), (unsigned long long)e->size);
    inflateEnd(&s);
    free(in);
    return st;
}

nb_status nb__zip_read(nb_zip *z, const nb_zip_entry *e, void *dst)
{
    unsigned char h[LOCAL_SIZE];
    char what[256];
    snprintf(what, sizeof what, "the local header of entry '%.200s'", e->name);
    NB_TRY(read_at(z, e->local_offset, h, sizeof h, what));
    if (rd32(h) != SIG_LOCAL)
        return nb__err(NB_ERR_FORMAT, "entry '%.200s': no local header at offset %llu", e->name,
                       (unsigned long long)e->local_offset);
    uint64_t data = e->local_offset + LOCAL_SIZE + rd16(h + 26) + rd16(h + 28);
    if (data > z->data_end || e->comp_size > z->data_end - data)
        return nb__err(NB_ERR_FORMAT, "entry '%.200s': its %llu bytes at offset %llu run past the start of the "
                       "central directory (%llu)", e->name, (unsigned long long)e->comp_size,
                       (unsigned long long)data, (unsigned long long)z->data_end);
    if (fseeko(z->f, (off_t)data, SEEK_SET) != 0)
        return nb__err(NB_ERR_IO, "reading entry '%.200s': %s", e->name, strerror(errno));
    if (e->method == 8) {
        NB_TRY(inflate_entry(z, e, dst));
    } else if (e->size && fread(dst, 1, (size_t)e->size, z->f) != e->size) {
        return nb__err(NB_ERR_IO, "reading entry '%.200s': %s", e->name,
                       ferror(z->f) ? strerror(errno) : "unexpected end of file (was it changed while being read?)");
    }
    uLong crc = crc32_z(0, Z_NULL, 0);
    crc = crc32_z(crc, dst, (z_size_t)e->size);
    if ((uint32_t)crc != e->crc && !nb__zip_ignore_crc)
        return nb__err(NB_ERR_FORMAT, "entry '%.200s': CRC-32 %08x differs from the directory's %08x (the data "
                       "is damaged)", e->name, (unsigned)crc, (unsigned)e->crc);
    return NB_OK;
}

/* ==== writing ================================================================================= */

struct nb_zip_written {
    char *name;
    uint32_t crc;
    uint64_t size, offset;
    bool zip64;
};

static nb_status put(nb_zip_writer *w, const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, w->f) != n) return nb__err(NB_ERR_IO, "writing %s: %s", w->tmp, strerror(errno));
    w->offset += n;
    return NB_OK;
}

nb_status nb__zip_add(nb_zip_writer *w, const char *name, const void *data, uint64_t size)
{
    size_t name_len = strlen(name);
    if (name_len > 0xffff) return nb__err(NB_ERR_INVALID_ARG, "entry name of %zu bytes is too long", name_len);
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        struct nb_zip_written *cd = realloc(w->cd, cap * sizeof *cd);
        if (!cd) return nb__err(NB_ERR_OOM, "out of memory");
        w->cd = cd;
        w->cap = cap;
    }
    struct nb_zip_written *e = &w->cd[w->n];
    e->name = strdup(name);
    if (!e->name) return nb__err(NB_ERR_OOM, "out of memory");
    w->n++;
    e->crc = (uint32_t)crc32_z(crc32_z(0, Z_NULL, 0), data, (z_size_t)size);
    e->size = size;
    e->offset = w->offset;
    e->zip64 = nb__zip_force_zip64 || size >= 0xffffffffu || w->offset >= 0xffffffffu;
    /* header, name, [zip64 field: size, compressed size], "FB" padding field */
    size_t z64 = e->zip64 ? 20 : 0;
    uint64_t unpadded = w->offset + LOCAL_SIZE + name_len + z64 + 4;
    size_t pad = (size_t)((ALIGN - unpadded % ALIGN) % ALIGN);
    unsigned char h[LOCAL_SIZE + 20 + 4 + ALIGN], *p = h;
    p = wr32(p, SIG_LOCAL);
    p = wr16(p, e->zip64 ? 45 : 20);
    p = wr16(p, 0);    /* flags */
    p = wr16(p, 0);    /* stored */
    p = wr16(p, 0);    /* time 00:00 */
    p = wr16(p, 0x21); /* date 1980-01-01 */
    p = wr32(p, e->crc);
    p = wr32(p, e->zip64 ? 0xffffffffu : (uint32_t)size);
    p = wr32(p, e->zip64 ? 0xffffffffu : (uint32_t)size);
    p = wr16(p, (uint16_t)name_len);
    p = wr16(p, (uint16_t)(z64 + 4 + pad));
    NB_TRY(put(w, h, (size_t)(p - h)));
    NB_TRY(put(w, name, name_len));
    p = h;
    if (e->zip64) {
        p = wr16(wr16(p, 1), 16);
        p = wr64(wr64(p, size), size);
    }
    p = wr16(wr16(p, 0x4246), (uint16_t)pad); /* "FB" */
    memset(p, 'Z', pad);
    NB_TRY(put(w, h, (size_t)(p - h) + pad));
    return put(w, data, (size_t)size);
}

static nb_status put_central(nb_zip_writer *w, const struct nb_zip_written *e)
{
    unsigned char h[CENTRAL_SIZE + 28], *p = h;
    size_t name_len = strlen(e->name);
    p = wr32(p, SIG_CENTRAL);
    p = wr16(p, e->zip64 ? 45 : 20); /* made by: MS-DOS, version 2.0 or 4.5 */
    p = wr16(p, e->zip64 ? 45 : 20);
    p = wr16(p, 0);
    p = wr16(p, 0);
    p = wr16(p, 0);
    p = wr16(p, 0x21);
    p = wr32(p, e->crc);
    p = wr32(p, e->zip64 ? 0xffffffffu : (uint32_t)e->size);
    p = wr32(p, e->zip64 ? 0xffffffffu : (uint32_t)e->size);
    p = wr16(p, (uint16_t)name_len);
    p = wr16(p, e->zip64 ? 28 : 0);
    p = wr16(p, 0); /* comment */
    p = wr16(p, 0); /* disk */
    p = wr16(p, 0); /* internal attributes */
    p = wr32(p, 0); /* external attributes */
    p = wr32(p, e->zip64 ? 0xffffffffu : (uint32_t)e->offset);
    NB_TRY(put(w, h, (size_t)(p - h)));
    NB_TRY(put(w, e->name, name_len));
    if (!e->zip64) return NB_OK;
    p = h;
    p = wr16(wr16(p, 1), 24);
    p = wr64(wr64(wr64(p, e->size), e->size), e->offset);
    return put(w, h, (size_t)(p - h));
}

nb_status nb__zip_finish(nb_zip_writer *w)
{
    uint64_t cd_offset = w->offset;
    for (size_t i = 0; i < w->n; i++) NB_TRY(put_central(w, &w->cd[i]));
    uint64_t cd_size = w->offset - cd_offset;
    bool zip64 = nb__zip_force_zip64 || w->n >= 0xffff || cd_offset >= 0xffffffffu || cd_size >= 0xffffffffu;
    unsigned char b[END64_SIZE + LOCATOR64_SIZE + END_SIZE], *p = b;
    if (zip64) {
        uint64_t end64 = w->offset;
        p = wr32(p, SIG_END64);
        p = wr64(p, END64_SIZE - 12);
        p = wr16(wr16(p, 45), 45);
        p = wr32(wr32(p, 0), 0);
        p = wr64(wr64(p, w->n), w->n);
        p = wr64(wr64(p, cd_size), cd_offset);
        p = wr32(p, SIG_LOCATOR64);
        p = wr32(p, 0);
        p = wr64(p, end64);
        p = wr32(p, 1);
    }
    p = wr32(p, SIG_END);
    p = wr32(p, 0); /* disks */
    uint16_t n16 = zip64 ? 0xffff : (uint16_t)w->n;
    p = wr16(wr16(p, n16), n16);
    p = wr32(p, zip64 ? 0xffffffffu : (uint32_t)cd_size);
    p = wr32(p, zip64 ? 0xffffffffu : (uint32_t)cd_offset);
    p = wr16(p, 0);
    return put(w, b, (size_t)(p - b));
}

void nb__zip_writer_free(nb_zip_writer *w)
{
    for (size_t i = 0; i < w->n; i++) free(w->cd[i].name);
    free(w->cd);
    w->cd = NULL;
    w->n = w->cap = 0;
}
