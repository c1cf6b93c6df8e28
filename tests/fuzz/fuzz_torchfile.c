/* libFuzzer target: any bytes given to nb_torch_load (PyTorch's checkpoint format: a zip archive
 * and the pickle in it), then to a module's load_state_dict as `nabla eval --load x.pt` does.
 *
 * CRC-32 mismatches are let through (nb__zip_ignore_crc), so that mutations reach the pickle
 * reader and the tensor checks rather than stopping at the checksum.
 *
 * Properties checked, besides memory safety (built with ASan and UBSan):
 *  - a failed call sets a status and a message that begins with "torch_load";
 *  - a loaded map saves with nb_torch_save and loads again to the same names, dtypes, shapes,
 *    bytes and metadata; and so does the map with every tensor also under a second name, as a
 *    view of it (its first and last dims swapped), which the writer puts in the tensor's storage
 *    record;
 *  - after any load a forward and backward of the model run (a failed or partial state dict
 *    leaves shapes alone).
 *
 * NB_FUZZ_SEED_DIR=dir writes valid seeds into dir and exits: a model's state dict with
 * metadata as nabla writes it, and a hand-made archive with views sharing one storage, nested
 * dicts, lists and scalars (scripts/fuzz.sh also adds files torch.save wrote, when it can). */
#include "fuzz_common.h"
#include "io/torchfile_impl.h"
#include "nabla/autograd.h"
#include "nabla/io.h"
#include "nabla/module.h"
#include "nabla/ops.h"
#include "nabla/tensor.h"

static char in_path[128], out_path[128];


/* {"0.weight": a [3, 4] view of storage "0" at offset 2 with strides (1, 3), "0.bias": the same
 * storage's first 3, "cfg": {"lr": 0.5, "layers": [1, 2]}, "n": None}. */
static void write_views_seed(const char *path)
{
    nb_json_buf b = {0};
    nb__json_buf_append(&b, "\x80\x02}(", 4);
    for (int t = 0; t < 2; t++) {
        nb__pk_str(&b, t ? "0.bias" : "0.weight");
        nb__pk_global(&b, "torch._utils", "_rebuild_tensor_v2");
        nb__json_buf_append(&b, "((", 2);
        nb__pk_str(&b, "storage");
        nb__pk_global(&b, "torch", "FloatStorage");
        nb__pk_str(&b, "0");
        nb__pk_str(&b, "cpu");
        nb__pk_int(&b, 16);
        nb__json_buf_append(&b, "tQ", 2);
        nb__pk_int(&b, t ? 0 : 2);
        nb__json_buf_append(&b, t ? "K\x03\x85K\x01\x85" : "K\x03K\x04\x86K\x01K\x03\x86", t ? 6 : 10);
        nb__json_buf_append(&b, "\x89", 1);
        nb__pk_global(&b, "collections", "OrderedDict");
        nb__json_buf_append(&b, ")RtR", 4);
    }
    nb__pk_str(&b, "cfg");
    nb__json_buf_append(&b, "}(", 2);
    nb__pk_str(&b, "lr");
    nb__json_buf_append(&b, "G?\xe0\x00\x00\x00\x00\x00\x00", 9);
    nb__pk_str(&b, "layers");
    nb__json_buf_append(&b, "](K\x01K\x02" "eu", 8);
    nb__pk_str(&b, "n");
    nb__json_buf_append(&b, "Nu.", 3);
    FUZZ_ASSERT(!b.oom);
    float data[16];
    for (int i = 0; i < 16; i++) data[i] = (float)i / 4;
    FILE *f = fopen(path, "wb");
    FUZZ_ASSERT(f);
    nb_zip_writer w = {.f = f, .tmp = path};
    FUZZ_ASSERT(nb__zip_add(&w, "seed/data.pkl", b.data, b.len) == NB_OK);
    FUZZ_ASSERT(nb__zip_add(&w, "seed/data/0", data, sizeof data) == NB_OK);
    FUZZ_ASSERT(nb__zip_add(&w, "seed/version", "3\n", 2) == NB_OK);
    FUZZ_ASSERT(nb__zip_finish(&w) == NB_OK);
    nb__zip_writer_free(&w);
    FUZZ_ASSERT(fclose(f) == 0);
    nb__json_buf_free(&b);
}

static void write_seeds(const char *dir)
{
    nb_scope *s = nb_scope_begin();
    nb_manual_seed(1);
    nb_module *m = fuzz_small_model();
    nb_tensor_map *map = nb_tensor_map_create();
    FUZZ_ASSERT(map && nb_module_state_dict(m, map) == NB_OK);
    FUZZ_ASSERT(nb_tensor_map_set_metadata(map, "epoch", "3") == NB_OK);
    char path[512];
    snprintf(path, sizeof path, "%s/state_dict.pt", dir);
    FUZZ_ASSERT(nb_torch_save(map, path) == NB_OK);
    snprintf(path, sizeof path, "%s/views.pt", dir);
    write_views_seed(path);
    nb_tensor_map_free(map);
    nb_module_free(m);
    nb_scope_end(s);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_init(in_path, sizeof in_path, "pt-in", ".pt");
    nb__zip_ignore_crc = true; /* mutated data.pkl reaches the pickle reader */
    fuzz_path(out_path, sizeof out_path, "pt-out", ".pt");
    const char *seed = getenv("NB_FUZZ_SEED_DIR");
    if (seed) {
        write_seeds(seed);
        exit(0);
    }
    return 0;
}

/* map, each tensor x also as "<name>.tied" = x with its first and last dims swapped (x itself
 * below 2 dims), saves as one storage per tensor and loads back the same values. */
static void check_tied(const nb_tensor_map *map)
{
    nb_tensor_map *tied = nb_tensor_map_create(), *again = NULL;
    FUZZ_ASSERT(tied);
    char name[4096];
    int n = nb_tensor_map_size(map), extra = 0, records = n; /* an empty view gets a record of its own */
    for (int i = 0; i < n; i++) {
        const char *k = nb_tensor_map_name(map, i);
        nb_tensor *x = nb_tensor_map_get(map, k);
        FUZZ_ASSERT(x && nb_tensor_map_set(tied, k, x) == NB_OK);
        snprintf(name, sizeof name, "%s.tied", k);
        if (strlen(k) + 5 >= sizeof name || nb_tensor_map_contains(map, name)) continue;
        int nd = nb_tensor_ndim(x);
        nb_tensor *v = nd >= 2 ? nb_transpose(x, 0, nd - 1) : x;
        FUZZ_ASSERT(v && nb_tensor_map_set(tied, name, v) == NB_OK);
        extra++;
        records += nb_tensor_numel(x) == 0;
    }
    if (nb_torch_save(tied, out_path) == NB_OK) {
        FUZZ_ASSERT(nb_torch_load(out_path, nb_cpu(), &again) == NB_OK);
        FUZZ_ASSERT(nb_tensor_map_size(again) == n + extra);
        nb_zip z;
        FUZZ_ASSERT(nb__zip_open(&z, out_path) == NB_OK);
        int found = 0;
        for (size_t i = 0; i < z.n; i++) found += strncmp(z.entries[i].name, "archive/data/", 13) == 0;
        nb__zip_close(&z);
        FUZZ_ASSERT(found == records);
        for (int i = 0; i < nb_tensor_map_size(tied); i++) {
            const char *k = nb_tensor_map_name(tied, i);
            nb_tensor *want = nb_contiguous(nb_tensor_map_get(tied, k)), *got = nb_tensor_map_get(again, k);
            FUZZ_ASSERT(want && got && nb_tensor_ndim(got) == nb_tensor_ndim(want));
            size_t nbytes = (size_t)nb_tensor_numel(want) * nb_dtype_size(nb_tensor_dtype(want));
            FUZZ_ASSERT((size_t)nb_tensor_numel(got) * nb_dtype_size(nb_tensor_dtype(got)) == nbytes);
            FUZZ_ASSERT(nbytes == 0 || memcmp(nb_tensor_data_ptr(want), nb_tensor_data_ptr(got), nbytes) == 0);
        }
        nb_tensor_map_free(again);
        unlink(out_path);
    }
    nb_tensor_map_free(tied);
}

static void run_one(const uint8_t *data, size_t size)
{
    fuzz_write(in_path, data, size);
    nb_tensor_map *map = NULL;
    nb_status st = nb_torch_load(in_path, nb_cpu(), &map);
    if (st != NB_OK) {
        fuzz_check_error(st, "torch_load");
        FUZZ_ASSERT(map == NULL);
        return;
    }
    /* save and load again: the same map (a name or metadata key the writer refuses is fine) */
    st = nb_torch_save(map, out_path);
    if (st == NB_OK) {
        nb_tensor_map *again = NULL;
        FUZZ_ASSERT(nb_torch_load(out_path, nb_cpu(), &again) == NB_OK);
        fuzz_check_same_maps(map, again, true);
        nb_tensor_map_free(again);
        unlink(out_path);
        check_tied(map);
    } else {
        fuzz_check_error(st, "torch_save");
        FUZZ_ASSERT(st == NB_ERR_INVALID_ARG);
    }
    /* the checkpoint's consumer */
    nb_manual_seed(2);
    nb_module *m = fuzz_small_model();
    nb_status ms = nb_module_load_state_dict(m, map, false);
    if (ms != NB_OK) fuzz_check_error(ms, "load_state_dict");
    int64_t shape[2] = {5, 4};
    nb_tensor *x = nb_ones(shape, 2, NULL);
    nb_tensor *y = x ? nb_module_forward(m, x) : NULL;
    nb_tensor *l = y ? nb_sum(y, NULL, 0, false) : NULL;
    FUZZ_ASSERT(l && nb_backward(l, NULL, 0) == NB_OK);
    nb_module_free(m);
    nb_tensor_map_free(map);
}

/* Everything a call returns is owned by a scope (nb_tensor_map_get's references among them). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    nb_scope *s = nb_scope_begin();
    FUZZ_ASSERT(s);
    run_one(data, size);
    nb_scope_end(s);
    return 0;
}
