/* Internal: autograd nodes, how ops record them, and the backward-rule table. */
#ifndef NB_AUTOGRAD_IMPL_H
#define NB_AUTOGRAD_IMPL_H

#include "core/dispatch_impl.h"

#define NB_NODE_MAX_SAVED 4

/* A pool node's i1 bit (above the kernel's padding fields, set by src/ops/nn_pool.c): the input
 * was channels-last (src/autograd/rules_nn.c keeps the gradients so). */
#define POOL_CL ((int64_t)1 << 32)

/* Where one input's gradient goes: the node that made it, or the leaf that accumulates it. */
typedef struct nb_edge {
    struct nb_node *fn; /* owned reference; NULL when the input is a leaf or needs no grad */
    int input_nr;       /* which output of fn */
    nb_tensor *leaf;    /* owned reference to a leaf that requires grad */
    /* The input's metadata: the engine reduces a broadcast gradient to this shape and casts it
     * to this dtype before passing it on. */
    int ndim;
    int64_t shape[NB_MAX_DIMS];
    nb_dtype dtype;
    nb_device device;
} nb_edge;

typedef struct nb_saved {
    nb_tensor *t;     /* a detached alias (shares storage, no grad_fn: no cycles) */
    uint64_t version; /* the storage version when saved */
} nb_saved;

typedef struct nb_node {
    atomic_int refcount;
    nb_op op;
    int n_inputs;
    nb_edge *next; /* n_inputs edges */
    int n_saved;
    nb_saved saved[NB_NODE_MAX_SAVED];
    bool released; /* saved tensors freed by a backward without NB_RETAIN_GRAPH */
    /* op parameters for the rule */
    double s0, s1;
    int64_t i0, i1;
    uint32_t dim_mask;
    bool flag;
    int ndim_out;
    int64_t shape_out[NB_MAX_DIMS];
    /* op-specific extra data owned by the node (freed with free()) */
    void *extra;
    /* CopySlices: the node of the op applied to the view, and the view's geometry in the base's
     * storage. */
    struct nb_node *inner;
    int view_ndim;
    int64_t view_shape[NB_MAX_DIMS], view_strides[NB_MAX_DIMS], view_offset;
    /* The engine's per-backward state (a graph is walked by one backward at a time). */
    int deps;
    bool seen;
    bool keep_saved; /* this backward keeps the saved tensors (NB_RETAIN_GRAPH): a rule must not
                      * write into them */
    nb_tensor *grad_buf;
    /* A LINEAR node's bias gradient made ahead by the rule that made the gradient of its output
     * (nb__linear_bias_ahead), and that gradient (bias_ahead_of); both owned, dropped by the
     * engine once the node has run or the backward ends. */
    nb_tensor *bias_ahead, *bias_ahead_of;
    /* A non-leaf output that asked to keep its gradient (weak: cleared when it is freed). */
    nb_tensor *retain_target;
    /* nb__node_release's list of nodes to free (so that freeing a long chain is a loop) */
    struct nb_node *dead_next;
} nb_node;

/* A backward rule: given the gradient of the node's output, computes grad_in[i] for each input
 * i with node->next[i] needing one (others may be left NULL; grad_in has n_inputs slots). Rules are written with the public
 * ops (the engine runs them inside a scope with grad mode off, so they release nothing) and set
 * grad_in[i] to tensors from those ops. A gradient may have the broadcast shape of the forward
 * op: the engine sums it down to the input's shape. Failures return a status with the error set. */
typedef nb_status (*nb_backward_fn)(nb_node *node, nb_tensor *grad_out, nb_tensor **grad_in);

/* The rule table, keyed by op (NULL: not differentiable). Each rules_*.c file defines its rules
 * as nb__bw_<id> (e.g. nb__bw_ADD); the table is built from ops.def with weak references. */
nb_backward_fn nb__backward_rule(nb_op op);

/* ---- recording (used by op entry points) ------------------------------------------------- */

/* True when grad mode is on and any of the n inputs requires grad. */
bool nb__needs_grad(const nb_tensor *const *inputs, int n);
/* A node for op with edges to the n inputs (NULL inputs allowed: no edge). NULL on OOM. */
nb_node *nb__node_new(nb_op op, const nb_tensor *const *inputs, int n);
/* Saves t (may be NULL) in slot i: a detached alias and the storage's version. */
nb_status nb__node_save(nb_node *node, int i, const nb_tensor *t);
/* The saved tensor of slot i, checking the version; NULL with NB_ERR_AUTOGRAD when it was
 * modified in place since, or when the graph was already freed. Borrowed (owned by the node). */
nb_tensor *nb__node_saved(nb_node *node, int i);
/* Makes out the output of node (takes over the caller's reference to node). */
void nb__set_grad_fn(nb_tensor *out, nb_node *node);
void nb__node_release(nb_node *node);
bool nb__edge_needs_grad(const nb_node *node, int i);
/* For a rule (the optimizer step in backward): the leaf that input i is, when its gradient can
 * go straight into it as leaf += *alpha * gradient. That is when the leaf's optimizer steps in
 * backward with plain SGD (alpha = -lr), this edge is the last of the graph's edges into it still
 * to run, and it has no grad yet: so this gradient is its whole gradient, and the update is all
 * that would be done with it. x and y are the operands of the gradient's product: NULL when the
 * leaf shares storage with either (the product must not write into its own operand). A rule that
 * takes the leaf accumulates the product into it (nb__mm_accumulate) and gives no gradient for
 * input i. */
nb_tensor *nb__edge_sink(const nb_node *node, int i, const nb_tensor *x, const nb_tensor *y,
                         double *alpha);
/* For a rule: the LINEAR node that made this node's input i through reshapes (VIEW nodes, whose
 * gradients are reshapes of the same storage), when the gradient this rule makes for input i will
 * be the whole gradient of that LINEAR's output (no other node has given or will give the nodes on
 * the way one), its output's last dim is C and its bias needs a gradient of C values of dtype.
 * The sums of that gradient's columns over its other dims are then the bias's gradient, which
 * the rule may make as it writes the gradient and hand over with nb__linear_bias_ahead. NULL
 * otherwise. */
nb_node *nb__linear_below(const nb_node *node, int i, int64_t C, nb_dtype dtype);
/* For a forward op about to record its node: whether x was made by a LINEAR node through
 * reshapes (VIEW nodes) with its last dim C and a bias that needs a gradient of C values of dtype,
 * the case where nb__linear_below may later find it (if nothing else takes x by then). */
bool nb__made_by_linear(const nb_tensor *x, int64_t C, nb_dtype dtype);
/* Hands linear (from nb__linear_below) its bias gradient db (the bias's shape), made from the
 * gradient g the calling rule gives (new references are taken). */
void nb__linear_bias_ahead(nb_node *linear, nb_tensor *db, nb_tensor *g);
/* For the LINEAR rule: the bias gradient made ahead for its output's gradient g, now owned by the
 * current scope; NULL when there is none or g is not the gradient it was made from. */
nb_tensor *nb__linear_bias_take(nb_node *linear, const nb_tensor *g);

/* out += alpha * a @ b for 2-D tensors of one dtype and device (a GEMM with beta 1), with no
 * autograd, bumping out's version (src/ops/linalg.c). */
nb_status nb__mm_accumulate(nb_tensor *out, const nb_tensor *a, const nb_tensor *b, double alpha);


/* Queues fn(ctx, st) to run once the calling thread's current backward has walked its whole
 * graph, st being the backward's status so far; for a leaf hook (nb__leaf_hook.ready) with work
 * to finish after the last gradient (and to clean up after a failure). Callbacks run in the
 * order queued; the first failing status is backward's. Outside a backward: NB_ERR_INTERNAL. */
nb_status nb__backward_queue_callback(nb_status (*fn)(void *ctx, nb_status st), void *ctx);

/* Convenience for the common case: if grad is needed for inputs, makes a node for op, saves the
 * `n_save` tensors `save`, and attaches it to out. Returns the node (owned by out; may be used
 * to set parameters right after) or NULL when no grad is needed; on OOM returns NULL with
 * *status set. */
nb_node *nb__record(nb_op op, nb_tensor *out, const nb_tensor *const *inputs, int n,
                    const nb_tensor *const *save, int n_save, nb_status *status);

/* In-place autograd: after out-of-place `result` (with its history) was computed, copies result's
 * values into self and makes self's history continue from result's, including for a view
 * (CopySlices on its base). self_is_input0: result's node has self's old value as input 0 (as
 * for add_), not as for copy_. Call nb__inplace_check first. */
nb_status nb__inplace_commit(nb_tensor *self, nb_tensor *result, bool self_is_input0);
/* The errors an in-place op must raise before doing anything: a leaf that requires grad (or a
 * view of one) with grad mode on, or a tensor with overlapping (expanded) memory. */
nb_status nb__inplace_check(const char *op, const nb_tensor *self);
/* Whether an in-place op on self with these other inputs must go through autograd. */
bool nb__inplace_needs_grad(const nb_tensor *self, const nb_tensor *const *others, int n);
/* Refreshes a view's history when its base was changed in place since it was built; returns
 * t's grad_fn (NULL for a leaf). */
nb_node *nb__view_refresh(nb_tensor *t);
/* A node viewing `base` with t's geometry (as_strided), with an edge to base's history. */
nb_node *nb__as_strided_node(nb_tensor *base, const nb_tensor *view);

#endif
