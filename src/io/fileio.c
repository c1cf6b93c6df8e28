/* The file plumbing the checkpoint formats share: atomic saves, a tensor's on-disk bytes, byte
 * swapping (see fileio_impl.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/dispatch_impl.h"
#include "io/fileio_impl.h"

void nb__io_swap_elements(char *p, size_t nbytes, size_t es)
{
    for (size_t i = 0; i + es <= nbytes; i += es)
        for (size_t a = i, b = i + es - 1; a < b; a++, b--) {
            char t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}

nb_status nb__io_wrap_err(const char *op, const char *path, const char *name)
{
    char prefix[768];
    if (name) snprintf(prefix, sizeof prefix, "%s: %s: tensor '%.200s'", op, path, name);
    else snprintf(prefix, sizeof prefix, "%s: %s", op, path);
    return nb__err_prefix(prefix);
}

const char *nb__io_host_bytes(const char *op, const char *path, const char *name, const nb_tensor *t,
                              size_t nbytes, char **scratch, size_t *cap)
{
    const char *bytes = NULL;
    if (t->storage->device.type == NB_DEVICE_CPU) {
        const nb_tensor *c = nb_contiguous(t);
        if (!c) return nb__io_wrap_err(op, path, name), NULL;
        bytes = nb__data(c);
        if (!NB_IO_BIG_ENDIAN) return bytes;
    }
    if (nbytes > *cap) {
        char *p = realloc(*scratch, nbytes);
        if (!p)
            return nb__err_null(NB_ERR_OOM, "%s: %s: tensor '%.200s': out of memory for %zu bytes", op, path, name,
                                nbytes);
        *scratch = p;
        *cap = nbytes;
    }
    if (bytes) memcpy(*scratch, bytes, nbytes);
    else if (nb_tensor_read(t, *scratch, nbytes) != NB_OK)
        return nb__io_wrap_err(op, path, name), NULL;
    if (NB_IO_BIG_ENDIAN) nb__io_swap_elements(*scratch, nbytes, nb_dtype_size(t->dtype));
    return *scratch;
}

nb_status nb__io_write_err(const char *op, const char *path, const char *tmp, const char *what)
{
    return nb__err(NB_ERR_IO, "%s: %s: %s %s: %s", op, path, what, tmp, strerror(errno));
}

/* Makes the rename durable: fsyncs the folder holding path (best effort). */
static void sync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

/* Creates tmp, runs write, flushes it to disk and closes it. */
static nb_status write_tmp(const char *op, const char *path, const char *tmp, nb_io_write_fn write, void *ctx)
{
    FILE *f = fopen(tmp, "wb");
    if (!f) return nb__io_write_err(op, path, tmp, "cannot create");
    nb_status st = write(f, tmp, ctx);
    if (st == NB_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0)) st = nb__io_write_err(op, path, tmp, "flushing");
    if (fclose(f) != 0 && st == NB_OK) st = nb__io_write_err(op, path, tmp, "closing");
    return st;
}

nb_status nb__io_save_atomic(const char *op, const char *path, nb_io_write_fn write, void *ctx)
{
    size_t len = strlen(path) + 32;
    char *tmp = malloc(len);
    if (!tmp) return nb__err(NB_ERR_OOM, "%s: %s: out of memory", op, path);
    snprintf(tmp, len, "%s.tmp.%ld", path, (long)getpid());
    nb_status st = write_tmp(op, path, tmp, write, ctx);
    if (st == NB_OK && rename(tmp, path) != 0)
        st = nb__err(NB_ERR_IO, "%s: %s: cannot rename %s to it: %s", op, path, tmp, strerror(errno));
    if (st == NB_OK) sync_dir(path);
    else unlink(tmp);
    free(tmp);
    return st;
}
