/* nabla/io.h: checkpoints in the safetensors format (the one PyTorch users share weights in) and
 * in PyTorch's own format (what torch.save writes and torch.load reads).
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

/* ---- PyTorch's format (torch.save since PyTorch 1.6: a zip archive holding a pickle) ----------
 *
 * nb_torch_save writes the map as torch.save(state_dict) does: a collections.OrderedDict of the
 * tensors in the map's order, followed by the map's metadata as string values (a map without
 * metadata is exactly a state_dict: model.load_state_dict(torch.load(path, weights_only=True))
 * takes it). Tensors are copied to the host. Names whose tensors share storage (tied weights: the
 * same tensor twice, or views of one, such as a weight and its transpose) are written as torch
 * writes them: one storage that each views with its own offset and strides, so torch.load gives
 * tensors sharing memory; the storage written is the part of it those tensors reach. Any other
 * tensor is written contiguous, with a storage of its own. Every dtype nabla has is written.
 * Storages are aligned at 64 bytes in the archive (torch.load(mmap=True) maps them), and entries
 * or offsets past 4 GiB take zip64's forms. Atomic as nb_safetensors_save; a metadata key equal
 * to a tensor's name is NB_ERR_INVALID_ARG.
 *
 * nb_torch_load reads a file torch.save wrote (torch 1.6 to 2.x) whose object is a dict of
 * tensors; the map lists them in the file's order, on device. Nested containers are flattened:
 *  - a dict inside a dict adds its keys after a '.': {"model": {"fc.weight": w}, "epoch": 3}
 *    gives the tensor "model.fc.weight" and the metadata "epoch" = "3"; int keys (an optimizer's
 *    state) are written in decimal ("state.0.exp_avg");
 *  - a list or tuple holding only numbers, strings, None and bools becomes one metadata string in
 *    Python's repr ("param_groups.0.params" = "[0, 1, 2]", "betas" = "(0.9, 0.999)"); any other
 *    list or tuple is flattened by index ("layers.0", "layers.1"...);
 *  - numbers, bools, None and strings anywhere become metadata: ints in decimal, floats in
 *    Python's repr ("0.001", "1e-08"), True/False, None; a string is itself; an empty dict "{}".
 * Views are honoured: each tensor is copied out of its storage by its offset and strides (two
 * tensors sharing a storage load as two tensors). An OrderedDict's attributes (a state_dict's
 * `_metadata`, module versions) are skipped.
 * Only what torch.load(weights_only=True) accepts is read, and nothing in the file is executed:
 * any other global (a class of the user's) is NB_ERR_UNSUPPORTED naming it, as are dtypes nabla
 * lacks (int16, int8, complex...: naming the tensor and its storage type), TorchScript archives,
 * big-endian files and torch.save's pre-1.6 format. A malformed archive or pickle (truncated, bad
 * CRC, unknown opcode, a tensor reaching past its storage, a storage whose entry is missing or of
 * the wrong size, names that collide after flattening) is NB_ERR_FORMAT naming the entry, the
 * opcode and its offset in data.pkl, or the tensor. Memory is bounded by the file's size. *out is
 * NULL after any failure. */
NB_API nb_status nb_torch_save(const nb_tensor_map *m, const char *path);
NB_API nb_status nb_torch_load(const char *path, nb_device device, nb_tensor_map **out);

#ifdef __cplusplus
}
#endif
#endif
