/* IDX files (MNIST, Fashion-MNIST), gzipped or plain, read through zlib (gzread passes plain
 * files through unchanged).
 *
 * Layout: 0x00 0x00 <type> <ndim>, then ndim big-endian uint32 sizes, then the elements,
 * big-endian, row-major. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "core/error_impl.h"
#include "core/tensor_impl.h"
#include "nabla/data.h"

/* Reads exactly n bytes; returns the count read, or -1 with *zerr set on a stream error. */
static int64_t gz_read_all(gzFile f, void *buf, int64_t n, const char **zerr)
{
    int64_t got = 0;
    while (got < n) {
        int64_t want = n - got;
        unsigned chunk = want > (1 << 30) ? (1u << 30) : (unsigned)want;
        int r = gzread(f, (char *)buf + got, chunk);
        if (r < 0) {
            int code = 0;
            *zerr = gzerror(f, &code);
            return -1;
        }
        if (r == 0) break;
        got += r;
    }
    /* a short read can be a truncated gzip stream: zlib reports it as an error */
    if (got < n) {
        int code = 0;
        const char *msg = gzerror(f, &code);
        if (code != Z_OK) {
            *zerr = msg;
            return -1;
        }
    }
    return got;
}

static bool idx_dtype(uint8_t type, nb_dtype *dt)
{
    switch (type) {
    case 0x08: *dt = NB_UINT8; return true;
    case 0x0C: *dt = NB_INT32; return true;
    case 0x0D: *dt = NB_FLOAT32; return true;
    case 0x0E: *dt = NB_FLOAT64; return true;
    default: return false;
    }
}

/* IDX elements are big-endian; this machine's tensors are little-endian. */
static void swap_bytes(void *data, int64_t n, size_t size)
{
    uint8_t *p = data;
    for (int64_t i = 0; i < n; i++, p += size)
        for (size_t a = 0, b = size - 1; a < b; a++, b--) {
            uint8_t t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}

/* The header: fills dtype, shape and ndim; error naming path on failure. */
static nb_status read_header(gzFile f, const char *path, nb_dtype *dt, int64_t *shape, int *ndim)
{
    uint8_t magic[4];
    const char *zerr = NULL;
    int64_t got = gz_read_all(f, magic, 4, &zerr);
    if (got < 0) return nb__err(NB_ERR_FORMAT, "read_idx: %s: corrupt or truncated gzip stream (%s)", path, zerr);
    if (got < 4) return nb__err(NB_ERR_FORMAT, "read_idx: %s: file too short for an IDX header (%lld bytes)", path, (long long)got);
    if (magic[0] != 0 || magic[1] != 0)
        return nb__err(NB_ERR_FORMAT, "read_idx: %s: bad magic 0x%02x%02x%02x%02x (an IDX file starts with 0x0000)",
                       path, magic[0], magic[1], magic[2], magic[3]);
    if (!idx_dtype(magic[2], dt))
        return nb__err(NB_ERR_FORMAT, "read_idx: %s: unsupported IDX element type 0x%02x", path, magic[2]);
    if (magic[3] < 1 || magic[3] > NB_MAX_DIMS)
        return nb__err(NB_ERR_FORMAT, "read_idx: %s: %d dims (1 to %d supported)", path, magic[3], NB_MAX_DIMS);
    *ndim = magic[3];
    uint8_t dims[4 * NB_MAX_DIMS];
    got = gz_read_all(f, dims, 4 * *ndim, &zerr);
    if (got < 0) return nb__err(NB_ERR_FORMAT, "read_idx: %s: corrupt or truncated gzip stream (%s)", path, zerr);
    if (got < 4 * *ndim) return nb__err(NB_ERR_FORMAT, "read_idx: %s: truncated header (%d dims announced)", path, *ndim);
    for (int i = 0; i < *ndim; i++) {
        const uint8_t *d = dims + 4 * i;
        shape[i] = ((int64_t)d[0] << 24) | ((int64_t)d[1] << 16) | ((int64_t)d[2] << 8) | d[3];
    }
    return NB_OK;
}

/* The file's size in bytes, or -1 when it cannot be known (not a regular file). */
static int64_t file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) ? (int64_t)sb.st_size : -1;
}

static nb_tensor *read_body(gzFile f, const char *path, nb_dtype dt, const int64_t *shape, int ndim)
{
    char sbuf[NB_SHAPE_STR_MAX];
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] != 0 && numel > (INT64_C(1) << 40) / shape[i])
            return nb__err_null(NB_ERR_FORMAT, "read_idx: %s: dims %s are too large", path, nb__shape_str(shape, ndim, sbuf));
        numel *= shape[i];
    }
    int64_t need = numel * (int64_t)nb_dtype_size(dt);
    /* refused before anything is allocated when the file cannot hold it: a plain file holds its
     * size less the header, a gzip stream at most 1032 bytes per compressed byte (deflate's
     * largest ratio) */
    int64_t size = file_size(path);
    if (size >= 0 && gzdirect(f) && need > size - 4 - 4 * (int64_t)ndim)
        return nb__err_null(NB_ERR_FORMAT, "read_idx: %s: dims %s need %lld bytes of data, the file has %lld", path,
                            nb__shape_str(shape, ndim, sbuf), (long long)need, (long long)(size - 4 - 4 * ndim));
    if (size >= 0 && !gzdirect(f) && size <= INT64_MAX / 1032 && need > size * 1032)
        return nb__err_null(NB_ERR_FORMAT,
                            "read_idx: %s: dims %s need %lld bytes of data, more than a gzip stream of %lld bytes can hold",
                            path, nb__shape_str(shape, ndim, sbuf), (long long)need, (long long)size);
    nb_tensor *t = nb__tensor_new_named("read_idx", shape, ndim, dt, nb_cpu());
    if (!t) return NULL;
    const char *zerr = NULL;
    int64_t got = gz_read_all(f, nb__data(t), need, &zerr);
    if (got >= 0 && got == need) {
        /* anything after the data (or a bad CRC at the stream's end) is an error too */
        uint8_t extra;
        int64_t more = gz_read_all(f, &extra, 1, &zerr);
        if (more > 0) {
            nb__release(t);
            return nb__err_null(NB_ERR_FORMAT, "read_idx: %s: data continues past the %lld bytes that dims %s need",
                                path, (long long)need, nb__shape_str(shape, ndim, sbuf));
        }
        got = more < 0 ? -1 : got;
    }
    if (got < 0) {
        nb__release(t);
        return nb__err_null(NB_ERR_FORMAT, "read_idx: %s: corrupt or truncated gzip stream (%s)", path, zerr);
    }
    if (got < need) {
        nb__release(t);
        return nb__err_null(NB_ERR_FORMAT, "read_idx: %s: dims %s need %lld bytes of data, the file has %lld",
                            path, nb__shape_str(shape, ndim, sbuf), (long long)need, (long long)got);
    }
    if (nb_dtype_size(dt) > 1) swap_bytes(nb__data(t), numel, nb_dtype_size(dt));
    return t;
}

nb_tensor *nb_read_idx(const char *path)
{
    if (!path) return nb__err_null(NB_ERR_INVALID_ARG, "read_idx: path is NULL");
    gzFile f = gzopen(path, "rb");
    if (!f) return nb__err_null(NB_ERR_IO, "read_idx: cannot open %s: %s", path, strerror(errno));
    gzbuffer(f, 1 << 17);
    nb_dtype dt = NB_UINT8;
    int64_t shape[NB_MAX_DIMS];
    int ndim = 0;
    nb_tensor *t = NULL;
    if (read_header(f, path, &dt, shape, &ndim) == NB_OK) t = read_body(f, path, dt, shape, ndim);
    gzclose_r(f);
    return nb__track(t);
}
