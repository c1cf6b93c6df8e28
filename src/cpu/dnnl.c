/* The CPU's oneDNN context: one engine and one stream for the process (created once), a small
 * cache of convolution primitives keyed by geometry (layout included, and a fused ReLU post-op) so
 * that a training loop builds them once, and the mapping of oneDNN failures to nb statuses.
 * Execution is serialised by one mutex: the primitives share the library-managed scratchpad, and
 * oneDNN itself spreads each primitive over the OpenMP threads (nb_set_num_threads). For NCHW
 * activations, primitives are created with format_tag_any, so that oneDNN picks its blocked
 * layouts (nChw16c...) and its direct JIT kernels: each operand whose chosen layout differs from
 * the tensor's plain NCHW / OIHW is reordered into (or out of) a scratch buffer shared by all
 * primitives (execution is serialised). On the ResNet-style 16-channel 3x3 layer this is several
 * times faster than the GEMM kernels oneDNN picks for plain layouts, reorders included.
 * Channels-last activations (geometry's cl) go to oneDNN's NHWC kernels as they are; only the
 * weights are still reordered. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "core/error_impl.h"
#include "cpu/dnnl_impl.h"

#define CACHE_SIZE 32
#define MAX_ARGS 4

/* A primitive with, per argument, its oneDNN id, the layout it wants and the tensor's layout. */
typedef struct prim {
    dnnl_primitive_t p;
    bool wino; /* oneDNN's implementation is a Winograd one */
    int nargs;
    int arg[MAX_ARGS];
    bool out[MAX_ARGS];
    dnnl_memory_desc_t want[MAX_ARGS];
    const dnnl_memory_desc_t *user[MAX_ARGS];
} prim;

typedef struct conv_entry {
    bool used, bias, relu; /* relu: the forward applies max(0, .) as a post-op */
    int threads; /* oneDNN sizes some primitives' work split for the thread count at creation */
    nb_conv_algo algo; /* the policy the entry was built under */
    bool wino;         /* its primitives run Winograd F(4x4, 3x3) */
    nb_conv_geom g;
    dnnl_memory_desc_t x_md, w_md, b_md, y_md; /* the tensors' plain layouts */
    dnnl_memory_desc_t x_any, w_any, y_any;    /* format_tag_any: oneDNN's choice */
    dnnl_primitive_desc_t fwd_pd;
    prim fwd, bwd_data, bwd_weights;
} conv_entry;

static struct {
    pthread_once_t once;
    dnnl_status_t init_status;
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    pthread_mutex_t lock;
    conv_entry cache[CACHE_SIZE];
    int next_evict;
    void *scratch[MAX_ARGS]; /* reorder buffers, one per argument slot, grown on demand */
    size_t scratch_size[MAX_ARGS];
    /* What scratch[0] holds: the input at memo_ptr reordered to memo_md (when memo_valid). */
    bool memo_valid;
    const void *memo_ptr;
    dnnl_memory_desc_t memo_md;
} ctx = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER};

static atomic_bool enabled = true;
static atomic_ullong wino_runs; /* executions of Winograd primitives */

unsigned long long nb__dnnl_winograd_runs(void) { return atomic_load(&wino_runs); }

bool nb__dnnl_enabled(void) { return atomic_load(&enabled); }

void nb__dnnl_set_enabled(bool on) { atomic_store(&enabled, on); }

static const char *dnnl_status_str(dnnl_status_t s)
{
    switch (s) {
    case dnnl_success: return "success";
    case dnnl_out_of_memory: return "out_of_memory";
    case dnnl_invalid_arguments: return "invalid_arguments";
    case dnnl_unimplemented: return "unimplemented";
    case dnnl_iterator_ends: return "iterator_ends";
    case dnnl_runtime_error: return "runtime_error";
    case dnnl_not_required: return "not_required";
    default: return "unknown status";
    }
}

nb_status nb__dnnl_check(const char *op, const char *call, int status)
{
    dnnl_status_t s = (dnnl_status_t)status;
    if (s == dnnl_success) return NB_OK;
    nb_status st = s == dnnl_out_of_memory ? NB_ERR_OOM
                   : s == dnnl_unimplemented ? NB_ERR_UNSUPPORTED : NB_ERR_INTERNAL;
    return nb__err(st, "%s: oneDNN call %s failed: %s (dnnl status %d)", op, call, dnnl_status_str(s), (int)s);
}

#define DNNL_TRY(op, call) NB_TRY(nb__dnnl_check(op, #call, (call)))

static void init_once(void)
{
    ctx.init_status = dnnl_engine_create(&ctx.engine, dnnl_cpu, 0);
    if (ctx.init_status == dnnl_success)
        ctx.init_status = dnnl_stream_create(&ctx.stream, ctx.engine, dnnl_stream_default_flags);
}

static nb_status ensure_init(const char *op)
{
    pthread_once(&ctx.once, init_once);
    return nb__dnnl_check(op, "dnnl_engine_create/dnnl_stream_create", ctx.init_status);
}

static void entry_clear(conv_entry *e)
{
    if (e->fwd_pd) dnnl_primitive_desc_destroy(e->fwd_pd);
    if (e->fwd.p) dnnl_primitive_destroy(e->fwd.p);
    if (e->bwd_data.p) dnnl_primitive_destroy(e->bwd_data.p);
    if (e->bwd_weights.p) dnnl_primitive_destroy(e->bwd_weights.p);
    memset(e, 0, sizeof *e);
}

/* The convolution's oneDNN parameters: dilation counts the gaps (PyTorch's minus 1). */
typedef struct conv_dims {
    dnnl_dims_t strides, dilates, pad_l, pad_r;
} conv_dims;

static conv_dims dims_of(const nb_conv_geom *g)
{
    conv_dims d = {
        .strides = {g->sh, g->sw}, .dilates = {g->dh - 1, g->dw - 1}, .pad_l = {g->ph, g->pw},
        .pad_r = {g->ph, g->pw},
    };
    return d;
}

/* Makes pr from pd (which it then owns no more): the primitive and, per argument, the layout
 * pd chose (queried by `what`) beside the tensor's. */
static nb_status prim_make(const char *op, prim *pr, dnnl_primitive_desc_t pd, const int *arg, const bool *out,
                           const dnnl_query_t *what, const dnnl_memory_desc_t *const *user, int n)
{
    pr->nargs = n;
    for (int i = 0; i < n; i++) {
        pr->arg[i] = arg[i];
        pr->out[i] = out[i];
        pr->user[i] = user[i];
        const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, what[i], 0);
        pr->want[i] = md ? *md : *user[i];
    }
    const char *impl = NULL;
    pr->wino = dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
               strstr(impl, "wino");
    dnnl_status_t s = dnnl_primitive_create(&pr->p, pd);
    dnnl_primitive_desc_destroy(pd);
    return nb__dnnl_check(op, "dnnl_primitive_create", s);
}

/* The forward's primitive descriptor, with a ReLU post-op when relu: oneDNN's status. */
static dnnl_status_t fwd_pd_create(dnnl_primitive_desc_t *pd, const dnnl_convolution_desc_t *cd, bool relu)
{
    if (!relu) return dnnl_primitive_desc_create(pd, cd, NULL, ctx.engine, NULL);
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_status_t s = dnnl_post_ops_create(&po);
    if (s == dnnl_success) s = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
    if (s == dnnl_success) s = dnnl_primitive_attr_create(&attr);
    if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(attr, po);
    if (s == dnnl_success) s = dnnl_primitive_desc_create(pd, cd, attr, ctx.engine, NULL);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (po) dnnl_post_ops_destroy(po);
    return s;
}

/* ---- the algorithm ---- */

static atomic_int g_algo = -1; /* an nb_conv_algo; -1 until read from NABLA_CONV_ALGO */

const char *nb_conv_algo_name(nb_conv_algo a)
{
    switch (a) {
    case NB_CONV_ALGO_AUTO: return "auto";
    case NB_CONV_ALGO_DIRECT: return "direct";
    case NB_CONV_ALGO_WINOGRAD: return "winograd";
    }
    return "?";
}

nb_status nb_conv_algo_parse(const char *name, nb_conv_algo *out)
{
    static const nb_conv_algo all[] = {NB_CONV_ALGO_AUTO, NB_CONV_ALGO_DIRECT, NB_CONV_ALGO_WINOGRAD};
    for (size_t i = 0; name && out && i < sizeof all / sizeof *all; i++)
        if (strcmp(name, nb_conv_algo_name(all[i])) == 0) {
            *out = all[i];
            return NB_OK;
        }
    return nb__err(NB_ERR_INVALID_ARG, "conv_algo_parse: unknown algorithm \"%s\" (expected auto, direct or winograd)",
                   name ? name : "(null)");
}

nb_conv_algo nb_get_conv_algo(void)
{
    int a = atomic_load(&g_algo);
    if (a >= 0) return (nb_conv_algo)a;
    const char *env = getenv("NABLA_CONV_ALGO");
    nb_conv_algo want = NB_CONV_ALGO_AUTO;
    if (env && nb_conv_algo_parse(env, &want) != NB_OK) nb_clear_error(); /* unset, as documented */
    atomic_compare_exchange_strong(&g_algo, &a, (int)want);
    return (nb_conv_algo)atomic_load(&g_algo);
}

bool nb__dnnl_winograd_available(void)
{
    int isa = (int)dnnl_get_effective_cpu_isa();
    return (isa & (int)dnnl_cpu_isa_avx512_core) == (int)dnnl_cpu_isa_avx512_core;
}

nb_status nb_set_conv_algo(nb_conv_algo a)
{
    if (a != NB_CONV_ALGO_AUTO && a != NB_CONV_ALGO_DIRECT && a != NB_CONV_ALGO_WINOGRAD)
        return nb__err(NB_ERR_INVALID_ARG, "set_conv_algo: %d is no algorithm (auto %d, direct %d, winograd %d)",
                       (int)a, NB_CONV_ALGO_AUTO, NB_CONV_ALGO_DIRECT, NB_CONV_ALGO_WINOGRAD);
    atomic_store(&g_algo, (int)a);
    return NB_OK;
}

/* Whether the convolution g should be tried on oneDNN's Winograd F(4x4, 3x3) under algo (oneDNN
 * may still decline it, and then the direct kernels run). Its kernels take 3x3 stride-1 ungrouped
 * convolutions with channels in and out multiples of 16 (its vector width). Under auto, for
 * channels-last activations, which Winograd must reorder into its blocked layout (the direct
 * kernels take them as they are), only from 32 channels in and out: on ResNet-56's 16-channel
 * layer (batch 128, 32x32) the five reorders a training step adds cost more than Winograd saves.
 * And, under auto, only with at least 32 output tiles of 4x4 over the batch: each call also
 * transforms the weights, which on a single 14x14 image (16 tiles) with 256 channels made the
 * forward 1.2x slower than direct, while 2 such images were 1.3x faster (docs/BENCHMARKS.md,
 * "Winograd"). */
static bool wants_winograd(const nb_conv_geom *g, nb_conv_algo algo)
{
    if (algo == NB_CONV_ALGO_DIRECT) return false;
    if (g->kh != 3 || g->kw != 3 || g->sh != 1 || g->sw != 1 || g->dh != 1 || g->dw != 1 || g->groups != 1)
        return false;
    if (g->c % 16 || g->oc % 16) return false;
    if (algo == NB_CONV_ALGO_WINOGRAD) return true;
    int64_t tiles = g->n * ((g->oh + 3) / 4) * ((g->ow + 3) / 4);
    return tiles >= 32 && (!g->cl || (g->c >= 32 && g->oc >= 32));
}

/* The forward's descriptor and primitive descriptor on alg, activations in act_any. */
static dnnl_status_t fwd_try(conv_entry *e, dnnl_alg_kind_t alg, dnnl_format_tag_t act_any)
{
    const nb_conv_geom *g = &e->g;
    dnnl_dims_t xd = {g->n, g->c, g->h, g->w}, yd = {g->n, g->oc, g->oh, g->ow};
    dnnl_status_t s = dnnl_memory_desc_init_by_tag(&e->x_any, 4, xd, dnnl_f32, act_any);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_tag(&e->y_any, 4, yd, dnnl_f32, act_any);
    conv_dims d = dims_of(g);
    dnnl_convolution_desc_t cd;
    if (s == dnnl_success)
        s = dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_training, alg, &e->x_any, &e->w_any,
                                                       e->bias ? &e->b_md : NULL, &e->y_any, d.strides, d.dilates,
                                                       d.pad_l, d.pad_r);
    if (s == dnnl_success) s = fwd_pd_create(&e->fwd_pd, &cd, e->relu);
    return s;
}

/* Fills a fresh entry's memory descriptors and its forward primitive. */
static nb_status entry_init(conv_entry *e, const nb_conv_geom *g, bool bias, bool relu)
{
    const char *op = "conv2d";
    e->g = *g;
    e->bias = bias;
    e->relu = relu;
    e->threads = nb_get_num_threads();
    e->algo = nb_get_conv_algo();
    dnnl_dims_t xd = {g->n, g->c, g->h, g->w}, yd = {g->n, g->oc, g->oh, g->ow}, bd = {g->oc};
    dnnl_format_tag_t act = g->cl ? dnnl_acdb : dnnl_abcd;
    DNNL_TRY(op, dnnl_memory_desc_init_by_tag(&e->x_md, 4, xd, dnnl_f32, act));
    DNNL_TRY(op, dnnl_memory_desc_init_by_tag(&e->y_md, 4, yd, dnnl_f32, act));
    DNNL_TRY(op, dnnl_memory_desc_init_by_tag(&e->b_md, 1, bd, dnnl_f32, dnnl_a));
    if (g->groups == 1) {
        dnnl_dims_t wd = {g->oc, g->c, g->kh, g->kw};
        DNNL_TRY(op, dnnl_memory_desc_init_by_tag(&e->w_md, 4, wd, dnnl_f32, dnnl_abcd));
        DNNL_TRY(op, dnnl_memory_desc_init_by_tag(&e->w_any, 4, wd, dnnl_f32, dnnl_format_tag_any));
    } else {
        dnnl_dims_t wd = {g->groups, g->oc / g->groups, g->c / g->groups, g->kh, g->kw};
        DNNL_TRY(op, dnnl_memory_desc_init_by_tag(&e->w_md, 5, wd, dnnl_f32, dnnl_abcde));
        DNNL_TRY(op, dnnl_memory_desc_init_by_tag(&e->w_any, 5, wd, dnnl_f32, dnnl_format_tag_any));
    }
    /* Winograd runs on its own blocked layouts, so its activations are left to oneDNN's choice
     * whatever the tensors' layout. When oneDNN has no Winograd kernel for the case (no AVX-512,
     * a padding it does not take...), the direct kernels run. */
    e->wino = wants_winograd(g, e->algo) && fwd_try(e, dnnl_convolution_winograd, dnnl_format_tag_any) == dnnl_success;
    if (!e->wino) {
        /* Direct: channels-last activations are handed to oneDNN as they are (acdb: its NHWC
         * kernels, no reorder); NCHW ones are left to oneDNN's choice (its blocked layouts). */
        DNNL_TRY(op, fwd_try(e, dnnl_convolution_direct, g->cl ? dnnl_acdb : dnnl_format_tag_any));
    }
    dnnl_primitive_desc_t pd;
    DNNL_TRY(op, dnnl_primitive_desc_clone(&pd, e->fwd_pd));
    const int arg[] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST};
    const bool out[] = {false, false, false, true};
    const dnnl_query_t what[] = {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_weights_md, dnnl_query_dst_md};
    const dnnl_memory_desc_t *user[] = {&e->x_md, &e->w_md, &e->b_md, &e->y_md};
    NB_TRY(prim_make(op, &e->fwd, pd, arg, out, what, user, 4));
    /* the bias is the weights' second descriptor */
    const dnnl_memory_desc_t *bmd = dnnl_primitive_desc_query_md(e->fwd_pd, dnnl_query_weights_md, 1);
    if (bias && bmd) e->fwd.want[2] = *bmd;
    e->used = true;
    return NB_OK;
}

/* The cached entry for (g, bias, relu, thread count, algorithm), built on a miss (evicting round-robin).
 * Call under ctx.lock. */
static conv_entry *lookup(const nb_conv_geom *g, bool bias, bool relu, nb_status *st)
{
    int threads = nb_get_num_threads();
    nb_conv_algo algo = nb_get_conv_algo();
    for (int i = 0; i < CACHE_SIZE; i++) {
        conv_entry *e = &ctx.cache[i];
        if (e->used && e->bias == bias && e->relu == relu && e->threads == threads && e->algo == algo &&
            memcmp(&e->g, g, sizeof *g) == 0)
            return e;
    }
    conv_entry *e = &ctx.cache[ctx.next_evict];
    ctx.next_evict = (ctx.next_evict + 1) % CACHE_SIZE;
    entry_clear(e);
    *st = entry_init(e, g, bias, relu);
    if (*st != NB_OK) {
        entry_clear(e);
        return NULL;
    }
    return e;
}

/* A backward primitive descriptor (diff_weights: of the weight gradient, else of the input
 * gradient) for entry e: on Winograd when its forward is, falling back to the direct kernels
 * when oneDNN has no Winograd kernel for that direction. */
static dnnl_status_t bwd_pd_create(dnnl_primitive_desc_t *pd, const conv_entry *e, bool diff_weights)
{
    conv_dims d = dims_of(&e->g);
    dnnl_status_t s = dnnl_unimplemented;
    for (int wino = e->wino; wino >= 0 && s != dnnl_success; wino--) {
        dnnl_alg_kind_t alg = wino ? dnnl_convolution_winograd : dnnl_convolution_direct;
        dnnl_convolution_desc_t cd;
        s = diff_weights ? dnnl_dilated_convolution_backward_weights_desc_init(
                               &cd, alg, &e->x_any, &e->w_any, e->bias ? &e->b_md : NULL, &e->y_any, d.strides,
                               d.dilates, d.pad_l, d.pad_r)
                         : dnnl_dilated_convolution_backward_data_desc_init(&cd, alg, &e->x_any, &e->w_any,
                                                                            &e->y_any, d.strides, d.dilates,
                                                                            d.pad_l, d.pad_r);
        if (s == dnnl_success) s = dnnl_primitive_desc_create(pd, &cd, NULL, ctx.engine, e->fwd_pd);
    }
    return s;
}

static nb_status make_bwd_data(conv_entry *e)
{
    const char *op = "conv2d_backward_input";
    dnnl_primitive_desc_t pd;
    DNNL_TRY(op, bwd_pd_create(&pd, e, false));
    const int arg[] = {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC};
    const bool out[] = {false, false, true};
    const dnnl_query_t what[] = {dnnl_query_diff_dst_md, dnnl_query_weights_md, dnnl_query_diff_src_md};
    const dnnl_memory_desc_t *user[] = {&e->y_md, &e->w_md, &e->x_md};
    return prim_make(op, &e->bwd_data, pd, arg, out, what, user, 3);
}

static nb_status make_bwd_weights(conv_entry *e)
{
    const char *op = "conv2d_backward_weight";
    dnnl_primitive_desc_t pd;
    DNNL_TRY(op, bwd_pd_create(&pd, e, true));
    const dnnl_memory_desc_t *bmd = dnnl_primitive_desc_query_md(pd, dnnl_query_diff_weights_md, 1);
    dnnl_memory_desc_t bwant = bmd && e->bias ? *bmd : e->b_md;
    const int arg[] = {DNNL_ARG_DIFF_DST, DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_BIAS};
    const bool out[] = {false, false, true, true};
    const dnnl_query_t what[] = {dnnl_query_diff_dst_md, dnnl_query_src_md, dnnl_query_diff_weights_md,
                                 dnnl_query_diff_weights_md};
    const dnnl_memory_desc_t *user[] = {&e->y_md, &e->x_md, &e->w_md, &e->b_md};
    NB_TRY(prim_make(op, &e->bwd_weights, pd, arg, out, what, user, 4));
    e->bwd_weights.want[3] = bwant;
    return NB_OK;
}

/* Copies between layouts with a one-off reorder primitive. */
static nb_status reorder(const char *op, dnnl_memory_t from, const dnnl_memory_desc_t *from_md, dnnl_memory_t to,
                         const dnnl_memory_desc_t *to_md)
{
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t r;
    DNNL_TRY(op, dnnl_reorder_primitive_desc_create(&pd, from_md, ctx.engine, to_md, ctx.engine, NULL));
    dnnl_status_t s = dnnl_primitive_create(&r, pd);
    dnnl_primitive_desc_destroy(pd);
    NB_TRY(nb__dnnl_check(op, "dnnl_primitive_create(reorder)", s));
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    s = dnnl_primitive_execute(r, ctx.stream, 2, args);
    dnnl_primitive_destroy(r);
    return nb__dnnl_check(op, "dnnl_primitive_execute(reorder)", s);
}

/* Scratch slot i of at least n bytes (64-byte aligned); NULL with an error when out of memory. */
static void *scratch(const char *op, int i, size_t n)
{
    if (ctx.scratch_size[i] < n) {
        if (i == 0) ctx.memo_valid = false;
        free(ctx.scratch[i]);
        ctx.scratch_size[i] = 0;
        ctx.scratch[i] = aligned_alloc(64, (n + 63) / 64 * 64);
        if (!ctx.scratch[i]) return nb__err_null(NB_ERR_OOM, "%s: out of memory for a %zu-byte reorder buffer", op, n);
        ctx.scratch_size[i] = n;
    }
    return ctx.scratch[i];
}

/* Runs pr on the user's buffers (NULL: argument absent), reordering those whose layout differs
 * from the one pr wants, and waits. reuse0: argument 0 is the same, unchanged buffer as the
 * argument 0 of the previous call, so that when scratch[0] still holds it in the wanted layout
 * its reorder is skipped. Call under ctx.lock. */
static nb_status execute(const char *op, const prim *pr, void *const *ptr, bool reuse0)
{
    dnnl_exec_arg_t args[MAX_ARGS];
    dnnl_memory_t user[MAX_ARGS] = {0}, mem[MAX_ARGS] = {0};
    /* the memo survives only a call that says its argument 0 is the memo's unchanged buffer */
    bool keep = reuse0 && ctx.memo_valid && ctx.memo_ptr == ptr[0];
    if (!keep) ctx.memo_valid = false;
    int na = 0;
    nb_status st = NB_OK;
    for (int i = 0; i < pr->nargs && st == NB_OK; i++) {
        if (!ptr[i]) continue;
        st = nb__dnnl_check(op, "dnnl_memory_create", dnnl_memory_create(&user[i], pr->user[i], ctx.engine, ptr[i]));
        if (st != NB_OK) break;
        if (dnnl_memory_desc_equal(pr->user[i], &pr->want[i])) {
            args[na++] = (dnnl_exec_arg_t){pr->arg[i], user[i]};
            continue;
        }
        void *buf = scratch(op, i, dnnl_memory_desc_get_size(&pr->want[i]));
        st = buf ? nb__dnnl_check(op, "dnnl_memory_create", dnnl_memory_create(&mem[i], &pr->want[i], ctx.engine, buf))
                 : NB_ERR_OOM;
        bool held = i == 0 && keep && !pr->out[0] && ctx.memo_valid &&
                    dnnl_memory_desc_equal(&ctx.memo_md, &pr->want[0]);
        if (i == 0) ctx.memo_valid = false;
        if (st == NB_OK && !pr->out[i] && !held) st = reorder(op, user[i], pr->user[i], mem[i], &pr->want[i]);
        if (st == NB_OK && i == 0 && !pr->out[0]) {
            ctx.memo_valid = true;
            ctx.memo_ptr = ptr[0];
            ctx.memo_md = pr->want[0];
        }
        if (st == NB_OK) args[na++] = (dnnl_exec_arg_t){pr->arg[i], mem[i]};
    }
    if (st == NB_OK) st = nb__dnnl_check(op, "dnnl_primitive_execute", dnnl_primitive_execute(pr->p, ctx.stream, na, args));
    if (st == NB_OK && pr->wino) atomic_fetch_add(&wino_runs, 1);
    for (int i = 0; i < pr->nargs && st == NB_OK; i++)
        if (mem[i] && pr->out[i]) st = reorder(op, mem[i], &pr->want[i], user[i], pr->user[i]);
    if (st == NB_OK) st = nb__dnnl_check(op, "dnnl_stream_wait", dnnl_stream_wait(ctx.stream));
    for (int i = 0; i < MAX_ARGS; i++) {
        if (user[i]) dnnl_memory_destroy(user[i]);
        if (mem[i]) dnnl_memory_destroy(mem[i]);
    }
    return st;
}

nb_status nb__dnnl_conv_forward(const nb_conv_geom *g, const float *x, const float *w, const float *b, bool relu,
                                float *y)
{
    NB_TRY(ensure_init("conv2d"));
    nb_status st = NB_OK;
    pthread_mutex_lock(&ctx.lock);
    conv_entry *e = lookup(g, b != NULL, relu, &st);
    if (e) {
        void *ptr[] = {(void *)x, (void *)w, (void *)b, y};
        st = execute("conv2d", &e->fwd, ptr, false);
    }
    pthread_mutex_unlock(&ctx.lock);
    return st;
}

nb_status nb__dnnl_conv_backward_data(const nb_conv_geom *g, const float *gy, const float *w, float *gx)
{
    NB_TRY(ensure_init("conv2d_backward_input"));
    nb_status st = NB_OK;
    pthread_mutex_lock(&ctx.lock);
    conv_entry *e = lookup(g, false, false, &st);
    if (e && !e->bwd_data.p) st = make_bwd_data(e);
    if (e && st == NB_OK) {
        void *ptr[] = {(void *)gy, (void *)w, gx};
        st = execute("conv2d_backward_input", &e->bwd_data, ptr, false);
    }
    pthread_mutex_unlock(&ctx.lock);
    return st;
}

nb_status nb__dnnl_conv_backward_weights(const nb_conv_geom *g, const float *gy, const float *x, float *gw,
                                         float *gb, bool gy_again)
{
    NB_TRY(ensure_init("conv2d_backward_weight"));
    nb_status st = NB_OK;
    pthread_mutex_lock(&ctx.lock);
    conv_entry *e = lookup(g, gb != NULL, false, &st);
    if (e && !e->bwd_weights.p) st = make_bwd_weights(e);
    if (e && st == NB_OK) {
        void *ptr[] = {(void *)gy, (void *)x, gw, gb};
        st = execute("conv2d_backward_weight", &e->bwd_weights, ptr, gy_again);
    }
    pthread_mutex_unlock(&ctx.lock);
    return st;
}
