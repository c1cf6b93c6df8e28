/* tools/nabla.c: the `nabla` command's entry point, option parsing and shared helpers. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_impl.h"

static const char *const usage_text =
    "usage: nabla <command> [options]\n"
    "commands:\n"
    "  train --model NAME --data fashion-mnist [--data-dir DIR] [--epochs N] [--batch-size N]\n"
    "        [--lr X] [--optimizer sgd|adam|adamw] [--device auto|cpu|cuda[:N]] [--threads N]\n"
    "        [--seed N] [--save FILE] [--resume FILE] [--metrics FILE.jsonl] [--limit N]\n"
    "        [--schedule none|cosine] [--stop-after N] [--conv-algo auto|direct|winograd]\n"
    "        [--memory-format auto|contiguous|channels_last]\n"
    "        (cosine: the rate anneals to 0 over all --epochs; --stop-after N ends this run after N\n"
    "        epochs, e.g. to resume it later; --conv-algo as for bench; --memory-format: the image\n"
    "        batches' layout, auto = channels_last on the CPU (its layers keep it: faster), else\n"
    "        contiguous; --save and --resume files ending in .pt or .pth are PyTorch's format\n"
    "        (torch.save, torch.load), others safetensors)\n"
    "        [--dist auto|mpi|off]: data parallel, as torch's DistributedDataParallel: started as\n"
    "        `mpiexec -n R nabla train ...`, R processes each train on 1/R of every epoch's samples\n"
    "        and average their gradients (--dist auto: when so launched and nabla has MPI; mpi:\n"
    "        always; off: never). --batch-size is per process (the global batch is R times it);\n"
    "        the test set is split between the processes, its numbers are the whole set's; only\n"
    "        rank 0 prints and writes --metrics and --save. Without --threads (nor\n"
    "        NABLA_NUM_THREADS, OMP_NUM_THREADS) each process runs cores / (processes on its\n"
    "        machine, OMPI_COMM_WORLD_LOCAL_SIZE) threads\n"
    "  train --model lstm --data ptb --data-dir DIR [--epochs N] [--batch-size N] [--bptt N]\n"
    "        [--lr X] [--clip X] [--optimizer sgd|adam|adamw] [--limit N] [--device D] [--threads N]\n"
    "        [--seed N] [--save FILE] [--resume FILE] [--metrics FILE.jsonl] [--stop-after N]\n"
    "        the word-level language model (DLBench's LSTM: embedding and hidden 256, 2 layers) on\n"
    "        DIR/ptb.train.txt, ptb.valid.txt and ptb.test.txt (Penn Treebank's, or any text in their\n"
    "        form), trained as PyTorch's word_language_model example trains: batches of 20 rows x 35\n"
    "        steps with the state carried, plain SGD at lr 20, the gradients' norm clipped to 0.25,\n"
    "        the rate divided by 4 after an epoch whose validation loss is not the best; each\n"
    "        epoch's validation perplexity, the test perplexity at the end (--limit N: the first N\n"
    "        training words)\n"
    "  eval  --model NAME --data fashion-mnist --load FILE [--data-dir DIR] [--device D]\n"
    "        [--threads N] [--memory-format auto|contiguous|channels_last] (FILE: a train --save checkpoint, .pt/.pth or safetensors; --model lstm\n"
    "        --data ptb: the test text's loss and perplexity)\n"
    "  info  the version, backends, devices and thread count\n"
    "  bench [--model a,b,...] [--device cpu|cuda[:N]|auto] [--threads 1,2,...] [--batch-size N]\n"
    "        [--warmup N] [--iters N] [--format table|csv|json] [--seed N] [--data synthetic|real]\n"
    "        [--data-dir DIR] [--profile host|sync] [--memory-format contiguous|channels_last]\n"
    "        [--conv-algo auto|direct|winograd] [--step-in-backward on|off|auto]\n"
    "        [--cuda-graph on|off]\n"
    "        (real: Fashion-MNIST for fcn-r and cnn, CIFAR-10 in DIR for alexnet-r, resnet-56 and\n"
    "        resnet20, Penn Treebank's ptb.train.txt in DIR for lstm; --profile: after each\n"
    "        network, its time per op over the timed iterations\n"
    "        on stderr; sync waits for the GPU after each op; channels_last: the image batch is\n"
    "        converted in each step, and the CPU's layers keep that layout; --conv-algo: the CPU\n"
    "        convolutions' algorithm, auto = Winograd F(4x4,3x3) where it is faster;\n"
    "        --step-in-backward on: each parameter's update runs in backward, as soon as its\n"
    "        gradient is whole, not in a separate step (nb_optim_step_in_backward); auto: on for\n"
    "        the networks that do not clip their gradients (all but lstm);\n"
    "        --cuda-graph on: on a GPU, the step is captured once as a CUDA graph and replayed)\n"
    "        times training iterations on synthetic data; models: fcn-s alexnet-s resnet-50 fcn-r\n"
    "        alexnet-r resnet-56 lstm (the default: all seven), cnn, resnet20, sgemm\n";

static bool is_torch_file(const char *path)
{
    size_t n = strlen(path);
    return (n >= 3 && !strcmp(path + n - 3, ".pt")) || (n >= 4 && !strcmp(path + n - 4, ".pth"));
}

nb_status cli_checkpoint_save(const nb_tensor_map *m, const char *path)
{
    return is_torch_file(path) ? nb_torch_save(m, path) : nb_safetensors_save(m, path);
}

nb_status cli_checkpoint_load(const char *path, nb_tensor_map **out)
{
    return is_torch_file(path) ? nb_torch_load(path, nb_cpu(), out) : nb_safetensors_load(path, nb_cpu(), out);
}

int cli_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("nabla: ", stderr);
    if (cli_rank >= 0) fprintf(stderr, "rank %d: ", cli_rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

int cli_fail_nb(int code, const char *what)
{
    const char *e = nb_last_error();
    return cli_fail(code, "%s: %s", what, e && *e ? e : "unknown error");
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int parse_int(const char *flag, const char *s, int64_t lo, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < lo)
        return cli_fail(CLI_USAGE, "%s: expected an integer >= %lld, got \"%s\"", flag, (long long)lo, s);
    *out = (int64_t)v;
    return CLI_OK;
}

static int parse_double(const char *flag, const char *s, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v < 0)
        return cli_fail(CLI_USAGE, "%s: expected a non-negative number, got \"%s\"", flag, s);
    *out = v;
    return CLI_OK;
}

static bool flag_allowed(const char *allowed, const char *flag)
{
    size_t n = strlen(flag);
    for (const char *p = strstr(allowed, flag); p; p = strstr(p + 1, flag))
        if ((p == allowed || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return true;
    return false;
}

/* Stores the value of one flag; CLI_USAGE on a bad value. A comma in --threads is left to
 * commands that take a list (bench reads threads_arg). */
static int set_opt(cli_opts *o, const char *f, const char *v, bool lists)
{
    int64_t n = 0;
    int rc = CLI_OK;
    if (!strcmp(f, "--model")) o->model = v;
    else if (!strcmp(f, "--data")) {
        o->data = v;
        o->data_given = true;
    } else if (!strcmp(f, "--data-dir")) {
        o->data_dir = v;
        o->data_dir_given = true;
    }
    else if (!strcmp(f, "--optimizer")) {
        o->optimizer = v;
        o->optimizer_given = true;
    }
    else if (!strcmp(f, "--schedule")) {
        o->schedule = v;
        o->schedule_given = true;
    }
    else if (!strcmp(f, "--device")) o->device = v;
    else if (!strcmp(f, "--dist")) o->dist = v;
    else if (!strcmp(f, "--save")) o->save = v;
    else if (!strcmp(f, "--resume")) o->resume = v;
    else if (!strcmp(f, "--metrics")) o->metrics = v;
    else if (!strcmp(f, "--load")) o->load = v;
    else if (!strcmp(f, "--epochs")) rc = parse_int(f, v, 1, &o->epochs);
    else if (!strcmp(f, "--format")) o->format = v;
    else if (!strcmp(f, "--profile")) o->profile = v;
    else if (!strcmp(f, "--memory-format")) o->memory_format = v;
    else if (!strcmp(f, "--conv-algo")) o->conv_algo = v;
    else if (!strcmp(f, "--step-in-backward")) o->step_in_backward = v;
    else if (!strcmp(f, "--cuda-graph")) o->cuda_graph = v;
    else if (!strcmp(f, "--batch-size")) {
        rc = parse_int(f, v, 1, &o->batch_size);
        o->batch_size_given = true;
    } else if (!strcmp(f, "--warmup")) rc = parse_int(f, v, 0, &o->warmup);
    else if (!strcmp(f, "--iters")) rc = parse_int(f, v, 1, &o->iters);
    else if (!strcmp(f, "--limit")) rc = parse_int(f, v, 1, &o->limit);
    else if (!strcmp(f, "--stop-after")) rc = parse_int(f, v, 1, &o->stop_after);
    else if (!strcmp(f, "--threads")) {
        o->threads_arg = v;
        if (!lists || !strchr(v, ',')) rc = parse_int(f, v, 1, &o->threads);
    }
    else if (!strcmp(f, "--lr")) rc = parse_double(f, v, &o->lr);
    else if (!strcmp(f, "--clip")) rc = parse_double(f, v, &o->clip);
    else if (!strcmp(f, "--bptt")) rc = parse_int(f, v, 1, &o->bptt);
    else if (!strcmp(f, "--seed")) {
        rc = parse_int(f, v, 0, &n);
        o->seed = (uint64_t)n;
        o->seed_given = true;
    }
    return rc;
}

int cli_parse(int argc, char **argv, int first, const char *cmd, const char *allowed, cli_opts *o)
{
    *o = (cli_opts){.data = "fashion-mnist", .data_dir = CLI_DEFAULT_DATA_DIR, .optimizer = "adam",
                    .schedule = "none", .device = "auto", .format = "table", .epochs = 1, .batch_size = 64, .warmup = 2,
                    .iters = 10, .lr = -1, .clip = -1};
    bool lists = !strcmp(cmd, "bench");
    for (int i = first; i < argc; i++) {
        char flag[64];
        const char *a = argv[i], *v = NULL, *eq = strchr(a, '=');
        size_t n = eq ? (size_t)(eq - a) : strlen(a);
        if (strncmp(a, "--", 2) != 0 || n >= sizeof flag)
            return cli_fail(CLI_USAGE, "%s: unexpected argument \"%s\" (see nabla --help)", cmd, a);
        memcpy(flag, a, n);
        flag[n] = '\0';
        if (!flag_allowed(allowed, flag))
            return cli_fail(CLI_USAGE, "%s: unknown option %s (see nabla --help)", cmd, flag);
        if (eq) v = eq + 1;
        else if (i + 1 < argc) v = argv[++i];
        else return cli_fail(CLI_USAGE, "%s: option %s needs a value", cmd, flag);
        if (set_opt(o, flag, v, lists) != CLI_OK) return CLI_USAGE;
    }
    if (strcmp(o->optimizer, "sgd") && strcmp(o->optimizer, "adam") && strcmp(o->optimizer, "adamw"))
        return cli_fail(CLI_USAGE, "%s: unknown optimizer \"%s\" (expected sgd, adam or adamw)", cmd, o->optimizer);
    if (strcmp(o->schedule, "none") && strcmp(o->schedule, "cosine"))
        return cli_fail(CLI_USAGE, "%s: unknown schedule \"%s\" (expected none or cosine)", cmd, o->schedule);
    if (lists) { /* bench: synthetic or real inputs */
        if (o->data_given && strcmp(o->data, "synthetic") && strcmp(o->data, "real"))
            return cli_fail(CLI_USAGE, "%s: unknown --data \"%s\" (expected synthetic or real)", cmd, o->data);
    } else if (strcmp(o->data, "fashion-mnist") && strcmp(o->data, "mnist") && strcmp(o->data, "ptb"))
        return cli_fail(CLI_USAGE, "%s: unknown data set \"%s\" (expected fashion-mnist, mnist or ptb)", cmd, o->data);
    return CLI_OK;
}

int cli_check_memory_format(const char *cmd, const cli_opts *o)
{
    const char *mf = o->memory_format;
    if (mf && strcmp(mf, "auto") && strcmp(mf, "contiguous") && strcmp(mf, "channels_last"))
        return cli_fail(CLI_USAGE, "%s: unknown --memory-format \"%s\" (expected auto, contiguous or channels_last)", cmd,
                        mf);
    return CLI_OK;
}

bool cli_channels_last(const cli_opts *o, nb_device dev)
{
    const char *mf = o->memory_format ? o->memory_format : "auto";
    return !strcmp(mf, "channels_last") || (!strcmp(mf, "auto") && dev.type == NB_DEVICE_CPU);
}

nb_tensor *cli_batch_layout(nb_tensor *x, bool cl)
{
    return cl && nb_tensor_ndim(x) == 4 ? nb_contiguous_format(x, NB_CHANNELS_LAST) : x;
}

int cli_set_conv_algo(const char *cmd, const char *name)
{
    nb_conv_algo algo;
    if (!name) return CLI_OK;
    if (nb_conv_algo_parse(name, &algo) != NB_OK)
        return cli_fail(CLI_USAGE, "%s: unknown --conv-algo \"%s\" (expected auto, direct or winograd)", cmd, name);
    if (nb_set_conv_algo(algo) != NB_OK) return cli_fail_nb(CLI_RUNTIME, cmd);
    return CLI_OK;
}

int cli_check_model(const char *name)
{
    const char *names[32];
    int n = nb_model_names(names, 32);
    char list[512] = "";
    for (int i = 0; i < n && i < 32; i++) {
        if (!strcmp(names[i], name)) return CLI_OK;
        size_t len = strlen(list);
        snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", names[i]);
    }
    return cli_fail(CLI_USAGE, "unknown model \"%s\" (known: %s, %s)", name, list, CLI_LM_MODEL);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage_text, stderr);
        return CLI_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        fputs(usage_text, stdout);
        return CLI_OK;
    }
    if (!strcmp(cmd, "--version")) {
        printf("nabla %s\n", nb_version());
        return CLI_OK;
    }
    if (!strcmp(cmd, "train")) return cmd_train(argc, argv);
    if (!strcmp(cmd, "eval")) return cmd_eval(argc, argv);
    if (!strcmp(cmd, "info")) return cmd_info(argc, argv);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc, argv);
    return cli_fail(CLI_USAGE, "unknown command \"%s\" (expected train, eval, info or bench)", cmd);
}
