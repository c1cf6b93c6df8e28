/* tools/cmd_eval.c: data sets, models and evaluation shared by train and eval; `nabla eval`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_impl.h"

/* ---- the first `limit` samples of a data set ---- */

typedef struct limited {
    nb_dataset *inner;
    int64_t n;
} limited;

static int64_t limited_size(void *u) { return ((limited *)u)->n; }

static nb_status limited_get(void *u, int64_t i, float *x, int64_t *y)
{
    return nb_dataset_get(((limited *)u)->inner, i, x, y);
}

static void limited_free(void *u)
{
    nb_dataset_free(((limited *)u)->inner);
    free(u);
}

nb_dataset *cli_dataset(const cli_opts *o, bool train, int64_t limit)
{
    nb_dataset *d = !strcmp(o->data, "mnist") ? nb_dataset_mnist(o->data_dir, train)
                                              : nb_dataset_fashion_mnist(o->data_dir, train);
    if (!d || limit <= 0 || limit >= nb_dataset_size(d)) return d;
    limited *u = malloc(sizeof *u);
    if (!u) {
        nb_dataset_free(d);
        return NULL;
    }
    *u = (limited){d, limit};
    nb_dataset_funcs f = {.size = limited_size, .get = limited_get, .free = limited_free, .user = u};
    const int64_t *shape = nb_dataset_sample_shape(d, &f.sample_ndim);
    memcpy(f.sample_shape, shape, (size_t)f.sample_ndim * sizeof *shape);
    nb_dataset *w = nb_dataset_create(&f);
    if (!w) limited_free(u);
    return w;
}

nb_data_loader_params cli_loader_params(const cli_opts *o, int64_t batch, bool shuffle, nb_device dev)
{
    nb_data_loader_params p = nb_data_loader_params_default();
    p.batch_size = batch;
    p.shuffle = shuffle;
    p.seed = o->seed;
    p.device = dev;
    p.pin_memory = dev.type == NB_DEVICE_CUDA; /* batches copied to the GPU in the background */
    p.norm_channels = 1;
    bool fashion = strcmp(o->data, "mnist") != 0;
    p.mean[0] = fashion ? 0.2860f : 0.1307f;
    p.std[0] = fashion ? 0.3530f : 0.3081f;
    return p;
}

nb_module *cli_model(const char *name, const nb_dataset *d, uint64_t seed, nb_device dev)
{
    int nd = 0;
    const int64_t *s = nb_dataset_sample_shape(d, &nd);
    if (nd != 3) {
        nb_clear_error();
        return NULL;
    }
    nb_generator *g = nb_generator_create(seed);
    if (!g) return NULL;
    nb_tensor_params p = nb_tensor_params_default();
    p.generator = g;
    nb_module *m = nb_model_create(name, s[0], s[1], s[2], 10, &p);
    nb_generator_free(g);
    if (m && nb_module_to(m, dev) != NB_OK) {
        nb_module_free(m);
        return NULL;
    }
    return m;
}

/* One batch: adds the summed loss and the correct count. */
static nb_status eval_batch(nb_module *m, nb_tensor *x, nb_tensor *y, bool cl, double *loss, int64_t *correct)
{
    nb_cross_entropy_params cp = nb_cross_entropy_params_default();
    cp.reduction = NB_REDUCE_SUM;
    if (!(x = cli_batch_layout(x, cl))) return nb_last_status();
    nb_tensor *logits = nb_module_forward(m, x);
    nb_tensor *l = logits ? nb_cross_entropy(logits, y, &cp) : NULL;
    nb_tensor *pred = logits ? nb_argmax(logits, 1, false) : NULL;
    nb_tensor *c = pred ? nb_sum(nb_eq(pred, y), NULL, 0, false) : NULL;
    double lv = 0;
    int64_t cv = 0;
    if (!l || !c || nb_item(l, &lv) != NB_OK || nb_item_int64(c, &cv) != NB_OK) return nb_last_status();
    *loss += lv;
    *correct += cv;
    return NB_OK;
}

nb_status cli_evaluate(nb_module *m, nb_dataset *d, const cli_opts *o, nb_device dev, double *loss,
                       double *acc)
{
    bool cl = cli_channels_last(o, dev);
    nb_data_loader_params p = cli_loader_params(o, 1000, false, dev);
    nb_data_loader *l = nb_data_loader_create(d, &p);
    if (!l) return nb_last_status();
    bool was_training = nb_module_is_training(m), prev = nb_set_grad_enabled(false);
    nb_module_train(m, false);
    double sum = 0;
    int64_t correct = 0, n = 0;
    nb_status st = NB_OK;
    for (bool done = false; st == NB_OK;) {
        nb_scope *s = nb_scope_begin();
        nb_tensor *x = NULL, *y = NULL;
        st = nb_data_loader_next(l, &x, &y, &done);
        if (st == NB_OK && !done) {
            n += nb_tensor_shape(y)[0];
            st = eval_batch(m, x, y, cl, &sum, &correct);
        }
        nb_scope_end(s);
        if (done) break;
    }
    nb_module_train(m, was_training);
    nb_set_grad_enabled(prev);
    nb_data_loader_free(l);
    *loss = n ? sum / (double)n : 0;
    *acc = n ? (double)correct / (double)n : 0;
    return st;
}

nb_status cli_load_model(nb_module *m, const nb_tensor_map *ck)
{
    nb_tensor_map *sub = nb_tensor_map_create();
    if (!sub) return nb_last_status();
    nb_scope *s = nb_scope_begin();
    nb_status st = NB_OK;
    for (int i = 0; i < nb_tensor_map_size(ck) && st == NB_OK; i++) {
        const char *name = nb_tensor_map_name(ck, i);
        if (strncmp(name, "model.", 6) != 0) continue;
        nb_tensor *t = nb_tensor_map_get(ck, name);
        st = t ? nb_tensor_map_set(sub, name + 6, t) : nb_last_status();
    }
    if (st == NB_OK) st = nb_module_load_state_dict(m, sub, true);
    nb_scope_end(s);
    nb_tensor_map_free(sub);
    return st;
}

nb_status cli_save_model(nb_module *m, nb_tensor_map *ck)
{
    nb_tensor_map *sd = nb_tensor_map_create();
    nb_scope *s = nb_scope_begin();
    nb_status st = sd ? nb_module_state_dict(m, sd) : nb_last_status();
    char name[1024];
    for (int i = 0; st == NB_OK && i < nb_tensor_map_size(sd); i++) {
        snprintf(name, sizeof name, "model.%s", nb_tensor_map_name(sd, i));
        nb_tensor *v = nb_tensor_map_get(sd, nb_tensor_map_name(sd, i));
        st = v ? nb_tensor_map_set(ck, name, v) : nb_last_status();
    }
    nb_scope_end(s);
    nb_tensor_map_free(sd);
    return st;
}

void cli_json_num(FILE *f, const char *key, double v, bool last)
{
    if (isfinite(v)) fprintf(f, "\"%s\": %.17g%s", key, v, last ? "" : ", ");
    else fprintf(f, "\"%s\": null%s", key, last ? "" : ", ");
}

int cmd_eval(int argc, char **argv)
{
    cli_opts o;
    int rc = cli_parse(argc, argv, 2, "eval", "--model --data --data-dir --load --device --threads --memory-format",
                       &o);
    if (rc != CLI_OK) return rc;
    if (!o.model) return cli_fail(CLI_USAGE, "eval: --model is required");
    if (!o.load) return cli_fail(CLI_USAGE, "eval: --load is required");
    if (!strcmp(o.model, CLI_LM_MODEL)) return cli_eval_lm(&o);
    if (!strcmp(o.data, "ptb"))
        return cli_fail(CLI_USAGE, "eval: --data ptb is a text, for the language model (--model %s)", CLI_LM_MODEL);
    if ((rc = cli_check_model(o.model)) != CLI_OK) return rc;
    nb_device dev;
    if (nb_device_parse(o.device, &dev) != NB_OK) return cli_fail_nb(CLI_USAGE, "eval");
    if ((rc = cli_check_memory_format("eval", &o)) != CLI_OK) return rc;
    if (o.threads > 0 && nb_set_num_threads((int)o.threads) != NB_OK) return cli_fail_nb(CLI_USAGE, "eval");
    nb_tensor_map *ck = NULL;
    if (cli_checkpoint_load(o.load, &ck) != NB_OK) return cli_fail_nb(CLI_RUNTIME, "eval");
    const char *saved = nb_tensor_map_metadata(ck, "model");
    nb_dataset *test = NULL;
    nb_module *m = NULL;
    if (saved && strcmp(saved, o.model) != 0)
        rc = cli_fail(CLI_RUNTIME, "eval: %s holds a \"%s\" model, not \"%s\"", o.load, saved, o.model);
    else if (!(test = cli_dataset(&o, false, 0)))
        rc = cli_fail_nb(CLI_RUNTIME, "eval");
    else if (!(m = cli_model(o.model, test, 0, nb_cpu())))
        rc = cli_fail_nb(CLI_RUNTIME, "eval");
    else if (cli_load_model(m, ck) != NB_OK || nb_module_to(m, dev) != NB_OK)
        rc = cli_fail_nb(CLI_RUNTIME, "eval");
    double loss = 0, acc = 0;
    if (rc == CLI_OK && cli_evaluate(m, test, &o, dev, &loss, &acc) != NB_OK)
        rc = cli_fail_nb(CLI_RUNTIME, "eval");
    if (rc == CLI_OK) printf("test loss %.6f accuracy %.6f\n", loss, acc);
    nb_module_free(m);
    nb_dataset_free(test);
    nb_tensor_map_free(ck);
    return rc;
}
