/* Internal: the file plumbing nabla's checkpoint formats share (safetensors.c, torchfile.c).
 *
 *  - The atomic save: the file is written to `<path>.tmp.<pid>` in the same folder, flushed and
 *    fsync'd, then renamed over path (and the folder fsync'd); on any failure the temporary is
 *    removed and path is left as it was.
 *  - A tensor's bytes as they go on disk: row-major, little-endian, copied to the host.
 *  - Byte swapping for big-endian hosts (both formats store little-endian data).
 * Errors are set with "<op>: <path>: ..." so that they read as the caller's own.
 */
#ifndef NB_IO_FILEIO_IMPL_H
#define NB_IO_FILEIO_IMPL_H

#include <stdio.h>

#include "core/tensor_impl.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define NB_IO_BIG_ENDIAN 1
#else
#define NB_IO_BIG_ENDIAN 0
#endif

/* Writes the file's contents to f (the temporary, named tmp for messages); returns a status with
 * the error set. */
typedef nb_status (*nb_io_write_fn)(FILE *f, const char *tmp, void *ctx);

/* Runs write into `<path>.tmp.<pid>` and renames it over path, as described above. op names the
 * caller in messages ("safetensors_save"). */
nb_status nb__io_save_atomic(const char *op, const char *path, nb_io_write_fn write, void *ctx);
/* The error of a failed write/flush to tmp: NB_ERR_IO, "<op>: <path>: <what> <tmp>: <strerror>". */
nb_status nb__io_write_err(const char *op, const char *path, const char *tmp, const char *what);

/* The nbytes bytes of t (the whole tensor, nbytes = numel * element size) in row-major
 * little-endian order, valid until the caller's scope ends: a CPU tensor's own memory
 * (nb_contiguous copies it first when it has to), or a copy in *scratch (grown as needed) for
 * other devices and on big-endian hosts. NULL with the error set ("<op>: <path>: tensor 'name':
 * ..."). Call inside an open scope. */
const char *nb__io_host_bytes(const char *op, const char *path, const char *name, const nb_tensor *t,
                              size_t nbytes, char **scratch, size_t *cap);

/* Reverses the bytes of each es-byte element of p[0, nbytes). */
void nb__io_swap_elements(char *p, size_t nbytes, size_t es);

/* Re-raises the thread's error with "<op>: <path>[: tensor 'name']" in front. */
nb_status nb__io_wrap_err(const char *op, const char *path, const char *name);

#endif
