/* The backward engine: walks the graph from a tensor in dependency order and runs each node's
 * rule, accumulating gradients into leaves. */
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"

typedef struct node_list {
    nb_node **items;
    size_t n, cap;
} node_list;

static nb_status list_push(node_list *l, nb_node *n)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        nb_node **items = realloc(l->items, cap * sizeof *items);
        if (!items) return nb__err(NB_ERR_OOM, "backward: out of memory walking the graph");
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n++] = n;
    return NB_OK;
}

/* Collects every node reachable from root into `all` and counts, for each, the edges that point
 * at it from other reachable nodes. */
static nb_status collect(nb_node *root, node_list *all)
{
    node_list stack = {0};
    nb_status st = list_push(&stack, root);
    root->seen = true;
    root->deps = 0;
    while (st == NB_OK && stack.n) {
        nb_node *n = stack.items[--stack.n];
        st = list_push(all, n);
        for (int i = 0; i < n->n_inputs && st == NB_OK; i++) {
            nb_tensor *leaf = n->next[i].leaf;
            if (leaf && leaf->bw_hook) leaf->bw_pending++;
            nb_node *next = n->next[i].fn;
            if (!next) continue;
            if (!next->seen) {
                next->seen = true;
                next->deps = 0;
                st = list_push(&stack, next);
            }
            next->deps++;
        }
    }
    free(stack.items);
    return st;
}

/* Sums g down to shape (undoing broadcasting) and casts it to dtype. Scope-tracked result. */
static nb_tensor *fit_grad(nb_tensor *g, const nb_edge *e, nb_op op)
{
    if (g->ndim != e->ndim || memcmp(g->shape, e->shape, (size_t)e->ndim * sizeof(int64_t)) != 0) {
        int64_t dims[NB_MAX_DIMS];
        int nd = 0, lead = g->ndim - e->ndim;
        if (lead < 0) goto mismatch;
        for (int d = 0; d < g->ndim; d++) {
            if (d < lead) dims[nd++] = d;
            else if (e->shape[d - lead] == 1 && g->shape[d] != 1) dims[nd++] = d;
            else if (e->shape[d - lead] != g->shape[d]) goto mismatch;
        }
        if (nd) {
            g = nb_sum(g, dims, nd, true);
            if (!g) return NULL;
        }
        if (g->ndim != e->ndim) g = nb_reshape(g, e->shape, e->ndim);
        if (!g) return NULL;
    }
    if (g->dtype != e->dtype) g = nb_to_dtype(g, e->dtype);
    return g;
mismatch:;
    char a[NB_SHAPE_STR_MAX], b[NB_SHAPE_STR_MAX];
    return nb__err_null(NB_ERR_INTERNAL, "backward: %s gave a gradient of shape %s for an input of shape %s",
                        nb__op_name(op), nb__shape_str(g->shape, g->ndim, a), nb__shape_str(e->shape, e->ndim, b));
}

/* Whether a gradient a rule just made can become a leaf's .grad as it is, without a copy (as
 * PyTorch's AccumulateGrad steals a gradient nobody else holds): only the node's scope holds it
 * (so no other leaf, buffer or caller can see it), nothing else shares its storage, it is a plain
 * dense tensor of its own (contiguous or channels-last), and it has no history. */
static bool can_steal(const nb_tensor *g)
{
    return atomic_load(&g->refcount) == 1 && atomic_load(&g->storage->refcount) == 1 && !g->base &&
           g->offset == 0 && !g->grad_fn && !g->requires_grad &&
           (nb__is_contiguous(g) || nb__is_channels_last(g)) &&
           g->storage->nbytes == (size_t)nb__numel(g->shape, g->ndim) * nb_dtype_size(g->dtype);
}

/* steal: g is a rule's fresh result (not a caller's tensor), which can_steal may take as it is. */
static nb_status accumulate_leaf(nb_tensor *leaf, nb_tensor *g, bool steal)
{
    if (!leaf->grad && steal && can_steal(g)) {
        leaf->grad = nb_tensor_retain(g);
        return NB_OK;
    }
    if (!leaf->grad) {
        /* a channels-last leaf's first gradient is a channels-last copy (PyTorch's layout
         * contract: a dense leaf's grad has the leaf's strides), whatever view the rule gave */
        nb_tensor *c = NULL;
        if (nb__is_channels_last(leaf) && !nb__is_channels_last(g)) {
            nb_tensor *v = nb_contiguous_format(g, NB_CHANNELS_LAST);
            c = v && v->storage == g->storage ? nb_clone(v) : v; /* a view of g: copied */
        } else {
            c = nb_clone(g);
        }
        if (!c) return nb_last_status();
        leaf->grad = nb_tensor_retain(c);
        return NB_OK;
    }
    return nb_add_(leaf->grad, g);
}

static nb_status add_to_buffer(nb_node *next, nb_tensor *g)
{
    if (!next->grad_buf) {
        next->grad_buf = nb_tensor_retain(g);
        return NB_OK;
    }
    nb_tensor *sum = nb_add(next->grad_buf, g);
    if (!sum) return nb_last_status();
    nb__release(next->grad_buf);
    next->grad_buf = nb_tensor_retain(sum);
    return NB_OK;
}

static void release_saved(nb_node *n)
{
    for (int i = 0; i < n->n_saved; i++) {
        nb__release(n->saved[i].t);
        n->saved[i].t = NULL;
    }
    n->released = true;
    if (n->inner) release_saved(n->inner);
}

/* Tells the nodes n points at that one of their dependencies is done. */
static nb_status release_deps(nb_node *n, node_list *ready)
{
    for (int i = 0; i < n->n_inputs; i++) {
        nb_node *next = n->next[i].fn;
        if (next && --next->deps == 0) NB_TRY(list_push(ready, next));
    }
    return NB_OK;
}

/* One edge into a leaf with a gradient hook has run: after the last one, the leaf's gradient is
 * whole, and the hook's owner takes it. */
static nb_status leaf_edge_done(nb_tensor *leaf)
{
    if (!leaf || !leaf->bw_hook || --leaf->bw_pending > 0) return NB_OK;
    return leaf->bw_hook->ready(leaf->bw_owner, leaf->bw_index);
}

/* Whether n, reached through an edge of e's shape, is a LINEAR node whose output's last dim is C
 * and whose bias needs a gradient of C values of dtype. */
static bool linear_with_bias(const nb_node *n, int e_ndim, const int64_t *e_shape, nb_dtype e_dtype, int64_t C,
                             nb_dtype dtype)
{
    if (!n || n->op != NB_OP_LINEAR || n->n_inputs != 3 || e_ndim < 1 || e_shape[e_ndim - 1] != C ||
        e_dtype != dtype || !nb__edge_needs_grad(n, 2))
        return false;
    const nb_edge *b = &n->next[2];
    return b->dtype == dtype && b->ndim >= 1 && b->shape[b->ndim - 1] == C && nb__numel(b->shape, b->ndim) == C;
}

nb_node *nb__linear_below(const nb_node *node, int i, int64_t C, nb_dtype dtype)
{
    const nb_edge *e = &node->next[i];
    nb_node *n = e->fn;
    /* deps == 1: the calling node's edge is the only one into n still to run */
    while (n && n->op == NB_OP_VIEW && !n->grad_buf && n->deps == 1) {
        e = &n->next[0];
        n = e->fn;
    }
    return n && !n->grad_buf && n->deps == 1 && linear_with_bias(n, e->ndim, e->shape, e->dtype, C, dtype) ? n
                                                                                                        : NULL;
}

bool nb__made_by_linear(const nb_tensor *x, int64_t C, nb_dtype dtype)
{
    nb_node *n = x->grad_fn;
    int ndim = x->ndim;
    const int64_t *shape = x->shape;
    nb_dtype dt = x->dtype;
    while (n && n->op == NB_OP_VIEW && n->n_inputs >= 1) {
        const nb_edge *e = &n->next[0];
        ndim = e->ndim, shape = e->shape, dt = e->dtype;
        n = e->fn;
    }
    return linear_with_bias(n, ndim, shape, dt, C, dtype);
}

void nb__linear_bias_ahead(nb_node *linear, nb_tensor *db, nb_tensor *g)
{
    nb__release(linear->bias_ahead);
    nb__release(linear->bias_ahead_of);
    linear->bias_ahead = nb_tensor_retain(db);
    linear->bias_ahead_of = nb_tensor_retain(g);
}

nb_tensor *nb__linear_bias_take(nb_node *linear, const nb_tensor *g)
{
    const nb_tensor *of = linear->bias_ahead_of;
    if (!linear->bias_ahead || !of || g->storage != of->storage || g->offset != of->offset ||
        !nb__is_contiguous(g) || nb__numel(g->shape, g->ndim) != nb__numel(of->shape, of->ndim))
        return NULL;
    nb_tensor *db = linear->bias_ahead;
    linear->bias_ahead = NULL;
    return nb__track(db);
}

static void drop_ahead(nb_node *n)
{
    nb__release(n->bias_ahead);
    nb__release(n->bias_ahead_of);
    n->bias_ahead = n->bias_ahead_of = NULL;
}

/* Runs one node: its rule on its accumulated gradient, then passes the results on. A node that
 * received no gradient (all paths to it gave none) runs nothing. */
static nb_status run_node(nb_node *n, node_list *ready)
{
    nb_tensor *g = n->grad_buf;
    nb_status st = NB_OK;
    if (!g) {
        for (int i = 0; i < n->n_inputs && st == NB_OK; i++) st = leaf_edge_done(n->next[i].leaf);
        return st == NB_OK ? release_deps(n, ready) : st;
    }
    nb_backward_fn rule = nb__backward_rule(n->op);
    if (!rule)
        return nb__err(NB_ERR_AUTOGRAD, "backward: %s has no backward rule", nb__op_name(n->op));
    if (n->retain_target) {
        nb__release(n->retain_target->grad);
        n->retain_target->grad = nb_tensor_retain(g);
    }
    nb_tensor **grad_in = calloc(n->n_inputs > 0 ? (size_t)n->n_inputs : 1, sizeof *grad_in);
    if (!grad_in) return nb__err(NB_ERR_OOM, "backward: out of memory");
    /* a leaf that took its gradient as a product (nb__edge_sink) gets none here, and has had its
     * update: leaf_edge_done finds no grad to step with */
    st = rule(n, g, grad_in);
    for (int i = 0; i < n->n_inputs && st == NB_OK; i++) {
        nb_edge *e = &n->next[i];
        if (grad_in[i] && (e->fn || e->leaf)) {
            nb_tensor *gi = fit_grad(grad_in[i], e, n->op);
            if (!gi) st = nb_last_status();
            else if (e->leaf) st = accumulate_leaf(e->leaf, gi, true);
            else st = add_to_buffer(e->fn, gi);
        }
        if (st == NB_OK) st = leaf_edge_done(e->leaf);
    }
    free(grad_in);
    return st == NB_OK ? release_deps(n, ready) : st;
}

static nb_status run_graph(nb_node *root, nb_tensor *root_grad, int flags)
{
    node_list all = {0}, ready = {0};
    nb_status st = collect(root, &all);
    root->grad_buf = nb_tensor_retain(root_grad);
    if (st == NB_OK) st = list_push(&ready, root);
    while (st == NB_OK && ready.n) {
        nb_node *n = ready.items[--ready.n];
        nb_scope *s = nb_scope_begin();
        if (!s) {
            st = nb_last_status();
            break;
        }
        n->keep_saved = flags & NB_RETAIN_GRAPH;
        st = run_node(n, &ready);
        nb_scope_end(s);
        nb__release(n->grad_buf);
        n->grad_buf = NULL;
        drop_ahead(n);
        if (!(flags & NB_RETAIN_GRAPH)) release_saved(n);
    }
    for (size_t i = 0; i < all.n; i++) {
        for (int k = 0; k < all.items[i]->n_inputs; k++)
            if (all.items[i]->next[k].leaf) all.items[i]->next[k].leaf->bw_pending = 0;
        nb__release(all.items[i]->grad_buf);
        all.items[i]->grad_buf = NULL;
        drop_ahead(all.items[i]);
        all.items[i]->seen = false;
        all.items[i]->deps = 0;
    }
    free(all.items);
    free(ready.items);
    return st;
}

/* The callbacks queued during one backward (nb__backward_queue_callback). */
#define MAX_CALLBACKS 16
typedef struct callback_list {
    struct {
        nb_status (*fn)(void *ctx, nb_status st);
        void *ctx;
    } items[MAX_CALLBACKS];
    int n;
} callback_list;

static _Thread_local callback_list *tl_callbacks;

nb_status nb__backward_queue_callback(nb_status (*fn)(void *ctx, nb_status st), void *ctx)
{
    callback_list *l = tl_callbacks;
    if (!l) return nb__err(NB_ERR_INTERNAL, "backward: a callback was queued outside backward");
    if (l->n == MAX_CALLBACKS)
        return nb__err(NB_ERR_INTERNAL, "backward: more than %d callbacks queued", MAX_CALLBACKS);
    l->items[l->n].fn = fn;
    l->items[l->n].ctx = ctx;
    l->n++;
    return NB_OK;
}

/* Runs the graph (or a leaf root's accumulation) with a callback list of its own, then the
 * callbacks: each runs, also after a failure, so that it can clean up. */
static nb_status run_with_callbacks(nb_tensor *t, nb_node *root, nb_tensor *g, int flags)
{
    callback_list list = {.n = 0}, *outer = tl_callbacks;
    tl_callbacks = &list;
    nb_status st;
    if (root) {
        st = run_graph(root, g, flags);
    } else {
        st = accumulate_leaf(t, g, false);
        if (st == NB_OK && t->bw_hook) st = t->bw_hook->ready(t->bw_owner, t->bw_index);
    }
    tl_callbacks = outer;
    for (int i = 0; i < list.n; i++) {
        nb_status cst = list.items[i].fn(list.items[i].ctx, st);
        if (st == NB_OK) st = cst;
    }
    return st;
}

nb_status nb_backward(nb_tensor *t, const nb_tensor *grad, int flags)
{
    if (!t) return nb__err(NB_ERR_INVALID_ARG, "backward: NULL tensor");
    if (!t->requires_grad)
        return nb__err(NB_ERR_AUTOGRAD, "backward: the tensor does not require grad and has no grad_fn");
    char a[NB_SHAPE_STR_MAX], b[NB_SHAPE_STR_MAX];
    if (!grad && nb_tensor_numel(t) != 1)
        return nb__err(NB_ERR_SHAPE,
                       "backward: grad can be implicitly created only for one-element outputs, not shape %s",
                       nb__shape_str(t->shape, t->ndim, a));
    if (grad) {
        NB_TRY(nb__check_inputs("backward", (const nb_tensor *const[]){t, grad}, 2));
        if (grad->ndim != t->ndim || memcmp(grad->shape, t->shape, (size_t)t->ndim * sizeof(int64_t)) != 0)
            return nb__err(NB_ERR_SHAPE, "backward: grad of shape %s for an output of shape %s",
                           nb__shape_str(grad->shape, grad->ndim, a), nb__shape_str(t->shape, t->ndim, b));
    }
    bool prev = nb_set_grad_enabled(false);
    nb_scope *s = nb_scope_begin();
    nb_status st = s ? NB_OK : nb_last_status();
    nb_tensor *g = NULL;
    if (st == NB_OK) {
        g = grad ? nb_to_dtype(grad, t->dtype) : nb_ones_like(t);
        if (!g) st = nb_last_status();
    }
    nb_node *root = st == NB_OK ? nb__view_refresh(t) : NULL;
    if (st == NB_OK) st = run_with_callbacks(t, root, g, flags);
    nb_scope_end(s);
    nb_set_grad_enabled(prev);
    return st;
}
