/* nabla/data.h: dataset readers (IDX for MNIST/Fashion-MNIST, CIFAR-10 binary, word-level text
 * corpora such as Penn Treebank, with language-model batches), datasets and a
 * data loader with batching, seeded shuffling, normalisation, augmentation and background
 * prefetching.
 *
 * Conventions of nabla/core.h hold: tensor-returning calls give a new reference (scope-owned when a
 * scope is open) or NULL; the others return an nb_status; out-parameters are set (NULL on
 * failure); destructors accept NULL. A file that is missing or malformed fails with NB_ERR_IO or
 * NB_ERR_FORMAT and a message naming the file and what is wrong with it.
 *
 * Thread safety: a dataset or a loader is used from one thread at a time. A loader calls its
 * dataset's callbacks from its background thread (never from two threads at once).
 */
#ifndef NABLA_DATA_H
#define NABLA_DATA_H

#include "nabla/core.h"
#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- readers ------------------------------------------------------------------------------- */

/* Reads an IDX file (the format of MNIST and Fashion-MNIST), gzipped or plain. The tensor has the
 * file's dims and its element type: uint8 (type 0x08), int32 (0x0C), float32 (0x0D) or float64
 * (0x0E). Errors: NB_ERR_IO (cannot open), NB_ERR_FORMAT (bad magic, unsupported type, dims that
 * do not match the data, truncated or corrupt gzip stream, trailing data). */
NB_API nb_tensor *nb_read_idx(const char *path);

/* Reads one CIFAR-10 binary batch file (records of 1 label byte and 3072 pixel bytes: 1024 red,
 * 1024 green, 1024 blue, row-major 32x32). *images: uint8 [N, 3, 32, 32]; *labels: int64 [N].
 * Errors: NB_ERR_IO, NB_ERR_FORMAT (empty, size not a multiple of 3073, label above 9). */
NB_API nb_status nb_read_cifar10(const char *path, nb_tensor **images, nb_tensor **labels);

/* ---- text corpora -------------------------------------------------------------------------- */

/* A vocabulary: words (non-empty byte strings without NUL) numbered 0, 1, 2, ... in the order
 * they were added. */
typedef struct nb_vocab nb_vocab;

/* An empty vocabulary; NULL (NB_ERR_OOM) when memory is short. */
NB_API nb_vocab *nb_vocab_create(void);
NB_API void nb_vocab_free(nb_vocab *v);
NB_API int64_t nb_vocab_size(const nb_vocab *v);
/* The id of word, added as the next id when it is new; -1 with NB_ERR_INVALID_ARG (NULL, an empty
 * word) or NB_ERR_OOM. */
NB_API int64_t nb_vocab_add(nb_vocab *v, const char *word);
/* The id of word, or -1 (no error set) when it is not in v. */
NB_API int64_t nb_vocab_id(const nb_vocab *v, const char *word);
/* The word of id (a string owned by v, valid while v lives), or NULL when id is out of range. */
NB_API const char *nb_vocab_word(const nb_vocab *v, int64_t id);

/* Reads a word-level text corpus (Penn Treebank's ptb.{train,valid,test}.txt, Mikolov's split) as
 * PyTorch's word_language_model example does: each line (ended by \n, \r\n or \r, or by the
 * file's end) becomes its words, split at white space as Python's str.split() splits (ASCII's
 * space, \t, \v, \f, \x1c-\x1f and Unicode's white space in UTF-8: U+0085, U+00A0, U+1680,
 * U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000), followed by "<eos>". Returns the
 * words' ids, int64 [n] on the CPU. With grow, words not yet in v are added to it (the training
 * text); without, every word must be in v already (the validation and test texts). Other bytes
 * are taken as they are (no UTF-8 check). Errors: NB_ERR_INVALID_ARG (NULL), NB_ERR_IO (cannot
 * open or read), NB_ERR_FORMAT (a NUL byte; without grow, a word not in v: the message names the
 * word and its line), NB_ERR_OOM; v keeps the words added before a failure. */
NB_API nb_tensor *nb_read_words(const char *path, nb_vocab *v, bool grow);

/* Language-model batches over a token stream, as the word_language_model example makes them
 * (batchify, then get_batch), batch first: the stream's first batch * L tokens, L = n / batch
 * (the rest dropped), as [batch, L] rows, each a run of the text; batch k of an epoch is
 * x = rows[:, k bptt : (k + 1) bptt] and y = x's next tokens, rows[:, k bptt + 1 : (k + 1) bptt + 1].
 * Every batch is [batch, bptt]: the example's shorter last batch is not made, so an epoch has
 * (L - 1) / bptt batches. Consecutive batches continue each row's text, as a stateful model
 * (nb_lstm_lm_set_stateful) expects. */
typedef struct nb_lm_batches nb_lm_batches;

/* Batches of tokens (1-D int64, on any device; copied, so the caller keeps its reference), moved
 * to device. Errors: NULL tokens, batch or bptt < 1, or too few tokens for one batch
 * (NB_ERR_INVALID_ARG, naming the counts), tokens not 1-D (NB_ERR_SHAPE) or not int64
 * (NB_ERR_DTYPE), a device not present (NB_ERR_DEVICE); messages name "lm_batches". */
NB_API nb_lm_batches *nb_lm_batches_create(const nb_tensor *tokens, int64_t batch, int64_t bptt, nb_device device);
NB_API void nb_lm_batches_free(nb_lm_batches *b);
/* Batches per epoch, (L - 1) / bptt. */
NB_API int64_t nb_lm_batches_len(const nb_lm_batches *b);
/* The next batch of the epoch: *x and *y int64 [batch, bptt], contiguous, on the device, new
 * references (scope-owned when a scope is open), and *done = false. After an epoch's last batch
 * it returns NB_OK with *x = *y = NULL and *done = true, and the next call starts the next epoch
 * at the first batch (as nb_data_loader_next). */
NB_API nb_status nb_lm_batches_next(nb_lm_batches *b, nb_tensor **x, nb_tensor **y, bool *done);

/* ---- datasets ------------------------------------------------------------------------------ */

typedef struct nb_dataset nb_dataset;

/* A dataset implemented by the caller. Every sample is a float32 array of shape sample_shape and
 * an int64 label. */
typedef struct nb_dataset_funcs {
    /* The number of samples; called once, by nb_dataset_create. */
    int64_t (*size)(void *user);
    /* Writes sample `index` (0 <= index < size) into x (numel(sample_shape) floats, row-major)
     * and its label into *y. Returns NB_OK, or a status with the error set (nb__err style: the
     * message is passed on to the loader's caller). */
    nb_status (*get)(void *user, int64_t index, float *x, int64_t *y);
    /* Releases user; called by nb_dataset_free (may be NULL). */
    void (*free)(void *user);
    void *user;
    int sample_ndim;                    /* 1..NB_MAX_DIMS; [C, H, W] for images */
    int64_t sample_shape[NB_MAX_DIMS];
} nb_dataset_funcs;

/* A dataset over the caller's callbacks (copied). Fails on a missing size/get, a bad shape or a
 * negative size; funcs->free is not called then. */
NB_API nb_dataset *nb_dataset_create(const nb_dataset_funcs *funcs);
/* Samples x [N, ...] (any real dtype; uint8 values are divided by 255, as torchvision's ToTensor,
 * others are converted to float32 as they are) and labels y [N] (an integer dtype). The dataset
 * keeps its own references to CPU copies. */
NB_API nb_dataset *nb_dataset_from_tensors(const nb_tensor *x, const nb_tensor *y);
/* MNIST / Fashion-MNIST from dir ({train,t10k}-{images-idx3,labels-idx1}-ubyte, with or without
 * .gz): samples [1, 28, 28] in [0, 1], labels 0..9. The two are the same format; both names are
 * given for readability. Fails when a file is missing or malformed, or when the image and label
 * counts differ. */
NB_API nb_dataset *nb_dataset_mnist(const char *dir, bool train);
NB_API nb_dataset *nb_dataset_fashion_mnist(const char *dir, bool train);
/* CIFAR-10 from dir (data_batch_1.bin .. data_batch_5.bin, or test_batch.bin): samples
 * [3, 32, 32] in [0, 1], labels 0..9. */
NB_API nb_dataset *nb_dataset_cifar10(const char *dir, bool train);

NB_API int64_t nb_dataset_size(const nb_dataset *d);
/* The shape of one sample (a pointer valid while d lives); *ndim receives its length. */
NB_API const int64_t *nb_dataset_sample_shape(const nb_dataset *d, int *ndim);
/* Sample `index` into x (numel(sample_shape) floats) and *y; checks index. */
NB_API nb_status nb_dataset_get(nb_dataset *d, int64_t index, float *x, int64_t *y);
NB_API void nb_dataset_free(nb_dataset *d);

/* ---- data loader --------------------------------------------------------------------------- */

typedef struct nb_data_loader nb_data_loader;

#define NB_DATA_MAX_CHANNELS 16

typedef struct nb_data_loader_params {
    int64_t batch_size; /* default 64 */
    bool shuffle;       /* default false; a fresh permutation per epoch from (seed, epoch) */
    uint64_t seed;      /* default 0; also seeds augmentation */
    bool drop_last;     /* default false: the last, smaller batch is kept */
    /* Per-channel normalisation x = (x - mean[c]) / std[c] over dim 0 of a sample, after the
     * augmentation; norm_channels 0 (the default) turns it off, otherwise it must equal C. */
    int norm_channels;
    float mean[NB_DATA_MAX_CHANNELS];
    float std[NB_DATA_MAX_CHANNELS];
    /* Augmentation of [C, H, W] samples, in torchvision's order (RandomCrop, then
     * RandomHorizontalFlip): random_crop pads the image by crop_padding zeros on each side and
     * takes a crop_size x crop_size window (crop_size 0: H x W) at a random offset; hflip
     * mirrors a sample with probability 1/2. Default off. The random choices depend only on
     * (seed, epoch, global position), so they are reproducible with or without prefetch. The
     * global position is the sample's place in the epoch's padded order over all replicas (see
     * num_replicas), not its place in this rank's shard: a sample gets the same crop and flip
     * as at that position of the unsharded loader, and two ranks never share a stream. */
    bool random_crop;
    int64_t crop_padding;
    int64_t crop_size;
    bool hflip;
    /* Batches prepared ahead by a background thread; 0 = prepare each batch in
     * nb_data_loader_next. Default 2. */
    int prefetch;
    /* Where batches are moved (nb_to) before they are returned. Default the CPU. A CUDA device
     * that nabla was not built with, or that is not present, fails nb_data_loader_create with
     * NB_ERR_DEVICE ("data_loader: device cuda:0 ..."). */
    nb_device device;
    /* PyTorch's pin_memory: default false; turn it on when training on a GPU. With a CUDA device,
     * each batch is built in pinned (page-locked) host memory and its copy to the device is
     * queued without waiting (nb_to_non_blocking) on a CUDA stream of the loader's own, by the
     * background thread (with prefetch 0: on the caller's current stream, in
     * nb_data_loader_next), so that the copy overlaps the caller's work; nb_data_loader_next
     * makes the caller's current stream wait for the copy and returns without blocking the host,
     * and the batch's device memory is not reused before the work queued on that stream by the
     * time it is freed has run. The batches' values are those of the same loader without it.
     * With the CPU device, batches are pinned CPU tensors (nb_tensor_is_pinned) for the caller's
     * own nb_to_non_blocking. When there is no GPU (or nabla was built without CUDA) pin_memory
     * is ignored, as PyTorch's DataLoader ignores it (with a warning) without an accelerator. */
    bool pin_memory;
    /* Data-parallel sharding, as PyTorch's DistributedSampler(num_replicas, rank, shuffle, seed,
     * drop_last=False) feeding a DataLoader. Each epoch, the order of all N samples is built as
     * without sharding (the same permutation of (seed, epoch) on every rank), padded to
     * total = ceil(N / num_replicas) * num_replicas by repeating it from its beginning (as many
     * times as needed when num_replicas > N), and rank r takes the positions r, r + num_replicas,
     * r + 2 num_replicas, ... (torch's indices[rank:total:num_replicas]): ceil(N / num_replicas)
     * samples, batched by batch_size and drop_last as above. Every rank must use the same seed,
     * shuffle and nb_data_loader_start_epoch calls (PyTorch's set_epoch). num_replicas: default
     * 1 (0, as in a zeroed struct, counts as 1); rank: default 0, 0 <= rank < num_replicas. A
     * negative num_replicas or a rank out of range fails nb_data_loader_create with
     * NB_ERR_INVALID_ARG ("data_loader: rank 2 is out of range for 2 replicas"). */
    int num_replicas;
    int rank;
} nb_data_loader_params;

NB_API nb_data_loader_params nb_data_loader_params_default(void);

/* A loader over dataset (borrowed: it must outlive the loader), at epoch 0 (p NULL: defaults).
 * With prefetch > 0 the background thread starts preparing epoch 0 at once. */
NB_API nb_data_loader *nb_data_loader_create(nb_dataset *dataset, const nb_data_loader_params *p);
/* Stops the background thread (also in the middle of an epoch) and releases prepared batches. */
NB_API void nb_data_loader_free(nb_data_loader *l);

/* The next batch of the current epoch: *x float32 [B, ...sample_shape], *y int64 [B], new
 * references (scope-owned when a scope is open), and *done = false. At the end of the epoch it
 * returns NB_OK with *x = *y = NULL and *done = true, and the loader moves on to the next epoch
 * (so `while (next(...) == NB_OK && !done)` loops over one epoch, and the same loop again over
 * the next). On failure (a dataset callback failed) *x = *y = NULL, *done = false, and the
 * dataset's error is returned; the loader skips that batch. */
NB_API nb_status nb_data_loader_next(nb_data_loader *l, nb_tensor **x, nb_tensor **y, bool *done);
/* Restarts at the first batch of epoch `epoch` (its permutation and augmentation depend on the
 * seed and the epoch number), dropping batches prepared ahead. */
NB_API nb_status nb_data_loader_start_epoch(nb_data_loader *l, int64_t epoch);
/* Restarts the current epoch at its first batch (same order as before). */
NB_API nb_status nb_data_loader_reset(nb_data_loader *l);
/* The current epoch number. */
NB_API int64_t nb_data_loader_epoch(const nb_data_loader *l);
/* Batches per epoch: ceil(S / batch_size), or floor with drop_last, where S is the number of
 * samples of this rank's shard, ceil(N / num_replicas) (N when not sharded). */
NB_API int64_t nb_data_loader_len(const nb_data_loader *l);

#ifdef __cplusplus
}
#endif
#endif
