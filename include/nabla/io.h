/* nabla/io.h: checkpoints in the safetensors format (the one PyTorch users share weights in).
 *
 * A tensor map is an ordered map from names to tensors. Files are written to a temporary name in
 * the same folder and renamed, so a crash never leaves a half-written checkpoint. Loading
 * validates the header strictly: bad JSON, unknown dtypes, shapes that do not match the byte
 * ranges, ranges that overlap, leave gaps or run past the file, and absurd sizes are NB_ERR_FORMAT
 * errors naming the file and the tensor.
 */
#ifndef NABLA_IO_H
#define NABLA_IO_H

#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nb_tensor_map nb_tensor_map;

NB_API nb_tensor_map *nb_tensor_map_create(void);
NB_API void nb_tensor_map_free(nb_tensor_map *m);
/* Adds or replaces; the map keeps its own reference to t. */
NB_API nb_status nb_tensor_map_set(nb_tensor_map *m, const char *name, nb_tensor *t);
/* A new reference (scope-owned when a scope is open), or NULL with NB_ERR_INVALID_ARG. */
NB_API nb_tensor *nb_tensor_map_get(const nb_tensor_map *m, const char *name);
NB_API bool nb_tensor_map_contains(const nb_tensor_map *m, const char *name);
NB_API int nb_tensor_map_size(const nb_tensor_map *m);
/* The i-th name in insertion order (loaded maps keep the file's order); valid while m lives. */
NB_API const char *nb_tensor_map_name(const nb_tensor_map *m, int i);
/* The `__metadata__` string map of safetensors: set, and get (NULL when absent). */
NB_API nb_status nb_tensor_map_set_metadata(nb_tensor_map *m, const char *key, const char *value);
NB_API const char *nb_tensor_map_metadata(const nb_tensor_map *m, const char *key);

/* Writes every tensor (copied to the host, made contiguous) to path, atomically. */
NB_API nb_status nb_safetensors_save(const nb_tensor_map *m, const char *path);
/* Reads a file into a new map whose tensors live on device. *out is NULL on failure. */
NB_API nb_status nb_safetensors_load(const char *path, nb_device device, nb_tensor_map **out);

#ifdef __cplusplus
}
#endif
#endif
