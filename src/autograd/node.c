/* Autograd nodes: creation, saved tensors, grad mode and the tensor-level accessors. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"

static _Thread_local bool tl_grad_disabled = false;

bool nb_set_grad_enabled(bool enabled)
{
    bool prev = !tl_grad_disabled;
    tl_grad_disabled = !enabled;
    return prev;
}

bool nb_is_grad_enabled(void) { return !tl_grad_disabled; }

bool nb__needs_grad(const nb_tensor *const *inputs, int n)
{
    if (tl_grad_disabled) return false;
    for (int i = 0; i < n; i++)
        if (inputs[i] && inputs[i]->requires_grad) return true;
    return false;
}

/* Frees a node whose last reference went, dropping its references to its inputs' nodes, leaves
 * and saved tensors (which may free more nodes: they join the list). */
static void node_free(nb_node *node)
{
    for (int i = 0; i < node->n_inputs; i++) {
        nb__node_release(node->next[i].fn);
        nb__release(node->next[i].leaf);
    }
    for (int i = 0; i < node->n_saved; i++) nb__release(node->saved[i].t);
    nb__node_release(node->inner);
    free(node->next);
    free(node->extra);
    free(node);
}

/* Nodes whose last reference went, waiting to be freed by the outermost release on this thread:
 * dropping a graph of a million chained ops is a loop, not a million nested calls. */
static _Thread_local nb_node *tl_dead;
static _Thread_local bool tl_freeing;

void nb__node_release(nb_node *node)
{
    if (!node || atomic_fetch_sub(&node->refcount, 1) != 1) return;
    node->dead_next = tl_dead;
    tl_dead = node;
    if (tl_freeing) return;
    tl_freeing = true;
    while (tl_dead) {
        nb_node *n = tl_dead;
        tl_dead = n->dead_next;
        node_free(n);
    }
    tl_freeing = false;
}

nb_node *nb__node_new(nb_op op, const nb_tensor *const *inputs, int n)
{
    nb_node *node = calloc(1, sizeof *node);
    nb_edge *next = calloc(n > 0 ? (size_t)n : 1, sizeof *next);
    if (!node || !next) {
        free(node);
        free(next);
        return nb__err_null(NB_ERR_OOM, "%s: out of memory recording the autograd graph", nb__op_name(op));
    }
    node->next = next;
    atomic_init(&node->refcount, 1);
    node->op = op;
    node->n_inputs = n;
    for (int i = 0; i < n; i++) {
        const nb_tensor *t = inputs[i];
        nb_edge *e = &node->next[i];
        if (!t) continue;
        e->ndim = t->ndim;
        memcpy(e->shape, t->shape, sizeof e->shape);
        e->dtype = t->dtype;
        e->device = t->storage->device;
        if (!t->requires_grad) continue;
        nb_node *fn = nb__view_refresh((nb_tensor *)t);
        if (fn) {
            atomic_fetch_add(&fn->refcount, 1);
            e->fn = fn;
            e->input_nr = t->output_nr;
        } else {
            e->leaf = nb_tensor_retain((nb_tensor *)t);
        }
    }
    return node;
}

bool nb__edge_needs_grad(const nb_node *node, int i)
{
    return i < node->n_inputs && (node->next[i].fn || node->next[i].leaf);
}

nb_tensor *nb__edge_sink(const nb_node *node, int i, const nb_tensor *x, const nb_tensor *y, double *alpha)
{
    nb_tensor *leaf = i < node->n_inputs ? node->next[i].leaf : NULL;
    if (!leaf || !leaf->bw_hook || !leaf->bw_hook->sink || leaf->bw_pending != 1 || leaf->grad ||
        leaf->storage == x->storage || leaf->storage == y->storage)
        return NULL;
    return leaf->bw_hook->sink(leaf->bw_owner, alpha) ? leaf : NULL;
}

nb_status nb__node_save(nb_node *node, int i, const nb_tensor *t)
{
    NB_ASSERT(i < NB_NODE_MAX_SAVED);
    if (i >= node->n_saved) node->n_saved = i + 1;
    if (!t) return NB_OK;
    nb_tensor *alias = nb__tensor_alias(t, t->shape, t->strides, t->ndim, t->offset);
    if (!alias) return nb_last_status();
    nb__release(alias->base);
    alias->base = NULL;
    node->saved[i].t = alias;
    node->saved[i].version = atomic_load(&t->storage->version);
    return NB_OK;
}

nb_tensor *nb__node_saved(nb_node *node, int i)
{
    if (node->released)
        return nb__err_null(NB_ERR_AUTOGRAD,
                            "backward: trying to backward through the graph a second time (through %s); "
                            "pass NB_RETAIN_GRAPH to the first backward",
                            nb__op_name(node->op));
    nb_saved *s = &node->saved[i];
    if (!s->t) return NULL;
    uint64_t v = atomic_load(&s->t->storage->version);
    if (v != s->version) {
        char sh[NB_SHAPE_STR_MAX];
        return nb__err_null(NB_ERR_AUTOGRAD,
                            "backward: a tensor of shape %s saved by %s for the gradient was modified by an "
                            "in-place operation (version %llu, expected %llu)",
                            nb__shape_str(s->t->shape, s->t->ndim, sh), nb__op_name(node->op),
                            (unsigned long long)v, (unsigned long long)s->version);
    }
    return s->t;
}

void nb__set_grad_fn(nb_tensor *out, nb_node *node)
{
    nb__node_release(out->grad_fn);
    out->grad_fn = node;
    out->output_nr = 0;
    out->requires_grad = true;
    out->view_version = atomic_load(&out->storage->version);
}

nb_node *nb__record(nb_op op, nb_tensor *out, const nb_tensor *const *inputs, int n,
                    const nb_tensor *const *save, int n_save, nb_status *status)
{
    *status = NB_OK;
    if (!nb__needs_grad(inputs, n)) return NULL;
    nb_node *node = nb__node_new(op, inputs, n);
    if (!node) {
        *status = nb_last_status();
        return NULL;
    }
    for (int i = 0; i < n_save; i++) {
        if (nb__node_save(node, i, save[i]) != NB_OK) {
            *status = nb_last_status();
            nb__node_release(node);
            return NULL;
        }
    }
    node->ndim_out = out->ndim;
    memcpy(node->shape_out, out->shape, sizeof node->shape_out);
    nb__set_grad_fn(out, node);
    return node;
}

/* ---- tensor accessors ---------------------------------------------------------------------- */

bool nb_tensor_requires_grad(const nb_tensor *t) { return t && t->requires_grad; }

bool nb_tensor_is_leaf(const nb_tensor *t) { return t && !t->grad_fn; }

nb_status nb_tensor_set_requires_grad(nb_tensor *t, bool requires_grad)
{
    if (!t) return nb__err(NB_ERR_INVALID_ARG, "set_requires_grad: NULL tensor");
    if (t->grad_fn) {
        if (requires_grad) return NB_OK;
        return nb__err(NB_ERR_AUTOGRAD,
                       "set_requires_grad: can only change requires_grad of leaf tensors (this one comes "
                       "from %s); use nb_detach",
                       nb__op_name(t->grad_fn->op));
    }
    if (requires_grad && !nb_dtype_is_floating(t->dtype))
        return nb__err(NB_ERR_DTYPE, "set_requires_grad: only floating tensors can require grad, not %s",
                       nb_dtype_name(t->dtype));
    t->requires_grad = requires_grad;
    return NB_OK;
}

nb_tensor *nb_tensor_grad(const nb_tensor *t)
{
    if (!t || !t->grad) return NULL;
    return nb__track(nb_tensor_retain(t->grad));
}

nb_status nb_tensor_set_grad(nb_tensor *t, const nb_tensor *grad)
{
    if (!t) return nb__err(NB_ERR_INVALID_ARG, "set_grad: NULL tensor");
    if (grad) {
        char a[NB_SHAPE_STR_MAX], b[NB_SHAPE_STR_MAX];
        if (grad->ndim != t->ndim || memcmp(grad->shape, t->shape, (size_t)t->ndim * sizeof(int64_t)) != 0)
            return nb__err(NB_ERR_SHAPE, "set_grad: gradient of shape %s for a tensor of shape %s",
                           nb__shape_str(grad->shape, grad->ndim, a), nb__shape_str(t->shape, t->ndim, b));
        NB_TRY(nb__check_inputs("set_grad", (const nb_tensor *const[]){t, grad}, 2));
    }
    nb__release(t->grad);
    t->grad = grad ? nb_tensor_retain((nb_tensor *)grad) : NULL;
    return NB_OK;
}

nb_status nb_tensor_retain_grad(nb_tensor *t)
{
    if (!t) return nb__err(NB_ERR_INVALID_ARG, "retain_grad: NULL tensor");
    if (!t->requires_grad)
        return nb__err(NB_ERR_AUTOGRAD, "retain_grad: the tensor does not require grad");
    if (t->grad_fn) {
        t->retains_grad = true;
        t->grad_fn->retain_target = t;
    }
    return NB_OK;
}

/* PyTorch's node names: "log_softmax" -> "LogSoftmaxBackward0". */
static char g_node_names[NB_OP_COUNT][48];
static pthread_once_t g_names_once = PTHREAD_ONCE_INIT;

static void make_node_names(void)
{
    for (int op = 0; op < NB_OP_COUNT; op++) {
        const char *s = nb__op_name((nb_op)op);
        char *o = g_node_names[op];
        size_t n = 0;
        bool up = true;
        for (; *s && n < 30; s++) {
            if (*s == '_') {
                up = true;
                continue;
            }
            o[n++] = up && *s >= 'a' && *s <= 'z' ? (char)(*s - 'a' + 'A') : *s;
            up = false;
        }
        memcpy(o + n, "Backward0", 10);
    }
}

const char *nb_tensor_grad_fn_name(const nb_tensor *t)
{
    if (!t || !t->grad_fn) return NULL;
    pthread_once(&g_names_once, make_node_names);
    return g_node_names[t->grad_fn->op];
}

nb_tensor *nb_detach(const nb_tensor *t)
{
    if (!t) return nb__err_null(NB_ERR_INVALID_ARG, "detach: NULL tensor");
    nb_tensor *d = nb__tensor_alias(t, t->shape, t->strides, t->ndim, t->offset);
    if (d) {
        nb__release(d->base); /* shares the storage and its version, not the history */
        d->base = NULL;
    }
    return nb__track(d);
}
