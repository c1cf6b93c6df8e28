/* tools/cli_impl.h: shared parts of the `nabla` command (options, data, model, evaluation). */
#ifndef NABLA_CLI_IMPL_H
#define NABLA_CLI_IMPL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "nabla.h"

/* Exit codes: a usage error (bad flag, bad value, unknown model) and a runtime error. */
enum { CLI_OK = 0, CLI_RUNTIME = 1, CLI_USAGE = 2 };

#define CLI_DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"

typedef struct cli_opts {
    const char *model, *data, *data_dir, *optimizer, *device;
    const char *schedule; /* train: "none" or "cosine" (per-step annealing to 0) */
    bool schedule_given;
    bool data_given, data_dir_given; /* bench: --data synthetic|real, and where the data is */
    const char *save, *resume, *metrics, *load;
    const char *format;      /* bench: table | csv | json */
    const char *profile;     /* bench: NULL, "host" or "sync" (per-op table on stderr) */
    const char *memory_format; /* bench: "contiguous" (default) or "channels_last"; train, eval: also
                                * "auto" (the default: channels_last on the CPU) */
    const char *conv_algo;     /* bench, train: "auto", "direct" or "winograd" (NULL: nb_get_conv_algo's) */
    const char *cuda_graph;       /* bench: "on" or "off" (NULL: off), the step as a CUDA graph */
    const char *step_in_backward; /* bench: "on" or "off" (NULL: off), nb_optim_step_in_backward */
    const char *dist;        /* train: "auto" (NULL), "mpi" or "off" */
    const char *threads_arg; /* --threads as given (bench takes a comma-separated list) */
    int64_t epochs, batch_size, limit, threads;
    int64_t stop_after; /* train: end this run after that many epochs (0: run to --epochs) */ /* threads: 0 unless one number was given */
    int64_t warmup, iters;   /* bench */
    bool batch_size_given;
    uint64_t seed;
    double lr;          /* < 0: the optimizer's default */
    bool seed_given, optimizer_given;
    int64_t bptt;   /* train --model lstm: steps per batch (0: not given) */
    double clip;    /* train --model lstm: the gradients' largest L2 norm (< 0: not given) */
} cli_opts;

/* Parses argv[first..argc) into o (starting from the defaults); `allowed` lists the flags this
 * command takes, space-separated ("--model --data"). Prints a one-line error and returns
 * CLI_USAGE on a bad flag or value, CLI_OK otherwise. */
int cli_parse(int argc, char **argv, int first, const char *cmd, const char *allowed, cli_opts *o);
/* Prints "nabla: " + the message + newline on stderr and returns code. */
int cli_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same with nb_last_error() appended ("what: error"). */
int cli_fail_nb(int code, const char *what);
/* CLI_OK when name is in the model zoo, else a one-line error and CLI_USAGE. */
int cli_check_model(const char *name);
/* --conv-algo NAME (NULL: unchanged) through nb_set_conv_algo; a usage error for an unknown name. */
int cli_set_conv_algo(const char *cmd, const char *name);

/* train and eval's --memory-format: CLI_OK for NULL, "auto", "contiguous" or "channels_last",
 * else a one-line error and CLI_USAGE. */
int cli_check_memory_format(const char *cmd, const cli_opts *o);
/* Whether train and eval make the image batches channels-last on dev: channels_last, or auto
 * (the default) on the CPU, whose layers then keep that layout (CUDA makes such inputs
 * contiguous). */
bool cli_channels_last(const cli_opts *o, nb_device dev);
/* The batch x as the model takes it: made channels-last when cl and x is an image batch (4-D),
 * else x itself; NULL (nb_last_error set) on failure. Scope-owned. */
nb_tensor *cli_batch_layout(nb_tensor *x, bool cl);

/* The train or test split of the --data set; limit > 0 keeps the first limit samples. */
nb_dataset *cli_dataset(const cli_opts *o, bool train, int64_t limit);
/* Loader parameters for the data set (normalisation of --data). */
nb_data_loader_params cli_loader_params(const cli_opts *o, int64_t batch, bool shuffle, nb_device dev);
/* A model for the data set's samples, initialised from seed. */
nb_module *cli_model(const char *name, const nb_dataset *d, uint64_t seed, nb_device dev);
/* Mean cross-entropy and accuracy of m over the test set d (the batches channels-last as
 * cli_channels_last says). */
nb_status cli_evaluate(nb_module *m, nb_dataset *d, const cli_opts *o, nb_device dev, double *loss,
                       double *acc);
/* Loads the "model." entries of checkpoint map ck into m (strict). */
nb_status cli_load_model(nb_module *m, const nb_tensor_map *ck);
/* The other way: m's state dict into ck as "model.<name>" entries. */
nb_status cli_save_model(nb_module *m, nb_tensor_map *ck);
/* `"key": v, ` (without the comma when last) on f, null for a value that is not finite. */
void cli_json_num(FILE *f, const char *key, double v, bool last);
/* Checkpoints in the format their name says: a path ending in .pt or .pth is PyTorch's
 * (nb_torch_save / nb_torch_load, what torch.save writes), any other safetensors. */
nb_status cli_checkpoint_save(const nb_tensor_map *m, const char *path);
nb_status cli_checkpoint_load(const char *path, nb_tensor_map **out);
double cli_now(void);

/* ---- data-parallel training (train_dist.c) ---- */

/* In a data-parallel run of more than one process, this process's rank: cli_fail then starts its
 * messages with "rank N: ". -1 otherwise. */
extern int cli_rank;
/* --dist auto|mpi|off: *pg = the MPI process group (every rank of an mpiexec launch) when the run
 * is data parallel, else NULL. auto: when the environment shows a launch of more than one
 * process and nabla has MPI; mpi: always (a usage error without MPI). With more than one rank and
 * no thread count given, the cores are split between the ranks on this machine. */
int cli_dist_init(const cli_opts *o, nb_process_group **pg);
/* Every rank's exit code after a step that may fail on some ranks only (a collective): rc where
 * this rank failed, else the worst other rank's code (rank 0 says that others failed). */
int cli_dist_agree(nb_process_group *pg, int rc);
/* After this rank failed (its error printed) during training, where the other ranks would wait
 * for it in their next reduction: with more than one rank, ends the whole job with exit code rc
 * (nb_process_group_abort); otherwise returns rc. */
int cli_dist_fail(nb_process_group *pg, int rc);
/* v[0..n) replaced by their sums over the ranks (a no-op without pg). */
nb_status cli_dist_sum(nb_process_group *pg, double *v, int n);
/* cli_evaluate over the whole test set d, each rank evaluating 1/R of it after ddp's buffers
 * were sent from rank 0 (a collective; ddp NULL and pg NULL for one process). */
nb_status cli_dist_evaluate(nb_process_group *pg, nb_ddp *ddp, nb_module *m, nb_dataset *d, const cli_opts *o,
                            nb_device dev, double *loss, double *acc);

/* ---- the word-level language model (train_lm.c): --model lstm --data ptb ---- */

/* The zoo's language model: DLBench's LSTM (nb_lstm_lm_create: embedding and hidden 256, 2 layers). */
#define CLI_LM_MODEL "lstm"
/* `nabla train` and `nabla eval` of it, after cli_parse. */
int cli_train_lm(cli_opts *o);
int cli_eval_lm(cli_opts *o);

int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_bench(int argc, char **argv);

#endif
