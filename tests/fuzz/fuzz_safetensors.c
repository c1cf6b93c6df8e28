/* libFuzzer target: any bytes given to nb_safetensors_load, then to the three consumers of a
 * checkpoint (a module's, an optimizer's and a scheduler's load_state_dict), as `nabla train
 * --resume` and `nabla eval` use them.
 *
 * Properties checked, besides memory safety (built with ASan and UBSan):
 *  - a failed call sets a status and a message that begins with the op's name;
 *  - a loaded map saves and loads again to the same names, dtypes, shapes, bytes and metadata;
 *  - after any load, a forward, backward and optimizer step run (a loaded state of the wrong
 *    shape would fail here, not in the loader); when the optimizer's and the scheduler's loads
 *    failed and the parameters loaded are moderate, the step keeps them finite (a failed load
 *    left no state behind).
 *
 * NB_FUZZ_SEED_DIR=dir writes a valid checkpoint of the harness's model into dir and exits: the
 * corpus's first input (scripts/fuzz.sh does this). */
#include <math.h>

#include "fuzz_common.h"
#include "nabla/autograd.h"
#include "nabla/io.h"
#include "nabla/module.h"
#include "nabla/ops.h"
#include "nabla/optim.h"
#include "nabla/tensor.h"

static char in_path[128], out_path[128];

static nb_optim *make_optim(nb_module *m, int which)
{
    nb_tensor *p[8];
    int n = nb_module_parameters(m, p, 8);
    FUZZ_ASSERT(n == 4);
    if (which == 0) {
        nb_sgd_params sp = nb_sgd_params_default();
        sp.momentum = 0.9;
        return nb_optim_sgd(p, n, &sp);
    }
    nb_adam_params ap = nb_adamw_params_default();
    ap.amsgrad = which == 2;
    return nb_optim_adamw(p, n, &ap);
}

/* One forward, backward and step: must succeed. */
static void train_step(nb_module *m, nb_optim *opt)
{
    nb_scope *s = nb_scope_begin();
    int64_t shape[2] = {5, 4};
    nb_tensor *x = nb_ones(shape, 2, NULL);
    nb_tensor *y = x ? nb_module_forward(m, x) : NULL;
    nb_tensor *l = y ? nb_sum(y, NULL, 0, false) : NULL;
    FUZZ_ASSERT(l);
    FUZZ_ASSERT(nb_backward(l, NULL, 0) == NB_OK);
    if (opt) FUZZ_ASSERT(nb_optim_step(opt) == NB_OK);
    FUZZ_ASSERT(!opt || nb_optim_zero_grad(opt) == NB_OK);
    nb_scope_end(s);
}

/* Every value finite, and no larger than `most` in magnitude. */
static bool all_within(const nb_tensor *t, float most)
{
    if (nb_tensor_dtype(t) != NB_FLOAT32) return true;
    const float *d = nb_tensor_data_ptr(t);
    for (int64_t i = 0; i < nb_tensor_numel(t); i++)
        if (!(fabsf(d[i]) <= most)) return false;
    return true;
}

static bool params_within(nb_module *m, float most)
{
    nb_tensor *p[8];
    int n = nb_module_parameters(m, p, 8);
    for (int i = 0; i < n; i++)
        if (!all_within(p[i], most)) return false;
    return true;
}

static void write_seed(const char *dir)
{
    nb_scope *s = nb_scope_begin();
    nb_manual_seed(1);
    nb_module *m = fuzz_small_model();
    nb_optim *opt = make_optim(m, 1);
    nb_lr_scheduler *sched = nb_lr_cosine(opt, 10, 0.0);
    FUZZ_ASSERT(sched);
    train_step(m, opt);
    FUZZ_ASSERT(nb_lr_scheduler_step(sched) == NB_OK);
    nb_tensor_map *map = nb_tensor_map_create();
    FUZZ_ASSERT(map && nb_module_state_dict(m, map) == NB_OK);
    FUZZ_ASSERT(nb_optim_state_dict(opt, map, "optim.") == NB_OK);
    FUZZ_ASSERT(nb_lr_scheduler_state_dict(sched, map, "sched.") == NB_OK);
    FUZZ_ASSERT(nb_tensor_map_set_metadata(map, "format", "pt") == NB_OK);
    char path[512];
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", dir);
    FUZZ_ASSERT(nb_safetensors_save(map, path) == NB_OK);
    nb_tensor_map_free(map);
    nb_lr_scheduler_free(sched);
    nb_optim_free(opt);
    nb_module_free(m);
    nb_scope_end(s);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_init(in_path, sizeof in_path, "st-in", ".safetensors");
    fuzz_path(out_path, sizeof out_path, "st-out", ".safetensors");
    const char *seed = getenv("NB_FUZZ_SEED_DIR");
    if (seed) {
        write_seed(seed);
        exit(0);
    }
    return 0;
}

static void run_one(const uint8_t *data, size_t size);

/* Everything a call returns is owned by a scope (nb_tensor_map_get's references among them). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    nb_scope *s = nb_scope_begin();
    FUZZ_ASSERT(s);
    run_one(data, size);
    nb_scope_end(s);
    return 0;
}

static void run_one(const uint8_t *data, size_t size)
{
    fuzz_write(in_path, data, size);
    nb_tensor_map *map = NULL;
    nb_status st = nb_safetensors_load(in_path, nb_cpu(), &map);
    if (st != NB_OK) {
        fuzz_check_error(st, "safetensors_load");
        FUZZ_ASSERT(map == NULL);
        return;
    }
    /* save and load again: the same map */
    FUZZ_ASSERT(nb_safetensors_save(map, out_path) == NB_OK);
    nb_tensor_map *again = NULL;
    FUZZ_ASSERT(nb_safetensors_load(out_path, nb_cpu(), &again) == NB_OK);
    fuzz_check_same_maps(map, again, false);
    nb_tensor_map_free(again);
    unlink(out_path);

    /* the checkpoint's consumers */
    for (int which = 0; which < 3; which++) {
        nb_manual_seed(2);
        nb_module *m = fuzz_small_model();
        nb_status ms = nb_module_load_state_dict(m, map, which != 1);
        if (ms != NB_OK) fuzz_check_error(ms, "load_state_dict");
        bool moderate = params_within(m, 1e6f);
        nb_optim *opt = make_optim(m, which);
        FUZZ_ASSERT(opt);
        nb_status os = nb_optim_load_state_dict(opt, map, "optim.");
        if (os != NB_OK) fuzz_check_error(os, "optim load_state_dict");
        nb_lr_scheduler *sched = nb_lr_cosine(opt, 10, 0.0);
        FUZZ_ASSERT(sched);
        nb_status ss = nb_lr_scheduler_load_state_dict(sched, map, "sched.");
        if (ss != NB_OK) fuzz_check_error(ss, "lr_scheduler load_state_dict");
        train_step(m, opt);
        FUZZ_ASSERT(nb_lr_scheduler_step(sched) == NB_OK);
        /* loaded values of at most 1e6 and a default-state optimizer (its load failed, and the
         * scheduler's, so the default learning rate) give finite parameters after one step: a
         * failed load changed nothing */
        if (moderate && os != NB_OK && ss != NB_OK) FUZZ_ASSERT(params_within(m, 1e30f));
        nb_lr_scheduler_free(sched);
        nb_optim_free(opt);
        nb_module_free(m);
    }
    nb_tensor_map_free(map);
}
