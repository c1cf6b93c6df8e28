/* nabla/module.h: modules, as torch.nn.Module: objects that own parameters, buffers and child
 * modules, each under a name, and compute a forward function.
 *
 * A module holds, in registration order:
 *  - parameters: leaf tensors with requires_grad (weights, biases);
 *  - buffers: tensors without grad (running statistics, counters);
 *  - children: modules (a Sequential's are named "0", "1", ...).
 * Full names are dotted paths, exactly PyTorch's state_dict keys: "features.0.weight",
 * "bn1.running_mean". The state dict lists a module's own parameters, then its own buffers, then
 * each child's entries in turn (PyTorch's order).
 *
 * Ownership: a module holds its own reference to each registered tensor and owns its children;
 * nb_module_free releases them all. Functions that hand out a module's tensors (nb_module_parameters,
 * nb_module_get...) give BORROWED pointers, valid while the module lives and the entry is not
 * replaced (nb_module_to to another device and re-registering a name replace entries): this is the
 * one exception to core.h's "a returned tensor is a new reference", as torch's parameters() yields
 * the module's own tensors. nb_module_forward follows core.h: a new reference.
 *
 * Extending: forward takes one input and returns one output. Modules with several inputs or
 * outputs (LSTM's states, attention) will get a second callback `forward_n(self, const nb_tensor
 * *const *in, int n_in, nb_tensor **out, int n_out)` in nb_module_funcs (new fields at the end,
 * zero = absent) and an nb_module_forward_n; the single-input path stays as it is.
 *
 * Thread safety: a module is used from one thread at a time.
 */
#ifndef NABLA_MODULE_H
#define NABLA_MODULE_H

#include "nabla/io.h"
#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nb_module nb_module;

/* What a module type does. All fields may be NULL except forward (NULL forward: calling
 * nb_module_forward is an NB_ERR_UNSUPPORTED error, for pure containers). */
typedef struct nb_module_funcs {
    /* PyTorch's class name ("Linear"), shown in errors and nb_module_type_name; NULL = "Module". */
    const char *type_name;
    /* Computes the output for input x (borrowed). Returns a tensor reference (any op's result, or
     * x itself) or NULL with nb_last_error() set. nb_module_forward runs it inside a scope, so the
     * temporaries it makes are released; it reads the training flag with nb_module_is_training. */
    nb_tensor *(*forward)(nb_module *self, nb_tensor *x);
    /* Releases `user` when the module is freed. */
    void (*free_user)(void *user);
} nb_module_funcs;

/* A module with no parameters. funcs is borrowed (usually a static const struct) and must outlive
 * the module; user is owned by the module when funcs->free_user is set. Starts in training mode.
 * NULL on failure (out of memory, funcs NULL). */
NB_API nb_module *nb_module_create(const nb_module_funcs *funcs, void *user);
/* Releases the module, its children and its references to its tensors. NULL is a no-op. */
NB_API void nb_module_free(nb_module *m);
NB_API void *nb_module_user(const nb_module *m);
NB_API const char *nb_module_type_name(const nb_module *m);

/* Registration. A name is a non-empty identifier without '.'; names are unique within a module
 * across parameters, buffers and children. Registering an existing name of the same kind replaces
 * the entry in place (keeping its position); a name of another kind is NB_ERR_INVALID_ARG.
 * Parameters must be floating leaf tensors; their requires_grad is set. t is retained. */
NB_API nb_status nb_module_register_parameter(nb_module *m, const char *name, nb_tensor *t);
/* A buffer: any dtype, no grad. t is retained. */
NB_API nb_status nb_module_register_buffer(nb_module *m, const char *name, nb_tensor *t);
/* Takes ownership of child, also on failure (then child is freed, unless it is m itself or already
 * a child of some module: a module has at most one parent, and that is an error). */
NB_API nb_status nb_module_register_module(nb_module *m, const char *name, nb_module *child);

/* Borrowed lookups of a module's own entries by their local name; NULL when absent (no error). */
NB_API nb_tensor *nb_module_get_parameter(const nb_module *m, const char *name);
NB_API nb_tensor *nb_module_get_buffer(const nb_module *m, const char *name);
NB_API nb_module *nb_module_get_module(const nb_module *m, const char *name);

/* Runs the forward function on x. A new reference (scope-owned when a scope is open). */
NB_API nb_tensor *nb_module_forward(nb_module *m, nb_tensor *x);

/* Sets training mode (true) or evaluation mode (false) on m and every descendant, as torch's
 * train() / eval(). It changes what Dropout and BatchNorm do. */
NB_API void nb_module_train(nb_module *m, bool training);
NB_API bool nb_module_is_training(const nb_module *m);

/* All parameters of m and its descendants, in state-dict order, as borrowed pointers. Writes at
 * most cap of them into out (out may be NULL when cap is 0) and returns the total count, as
 * snprintf: call with cap 0 to size the array. -1 on error (m NULL). */
NB_API int nb_module_parameters(const nb_module *m, nb_tensor **out, int cap);
NB_API int nb_module_buffers(const nb_module *m, nb_tensor **out, int cap);
/* The same with full dotted names. names[i] points into storage owned by m, valid until the next
 * nb_module_named_* call on m, a registration anywhere in m, or nb_module_free. names or out may
 * be NULL. */
NB_API int nb_module_named_parameters(nb_module *m, const char **names, nb_tensor **out, int cap);
NB_API int nb_module_named_buffers(nb_module *m, const char **names, nb_tensor **out, int cap);
/* Total element count of all parameters (torch: sum(p.numel() for p in m.parameters())). */
NB_API int64_t nb_module_num_parameters(const nb_module *m);

/* Adds every parameter and buffer to out under its full name, in PyTorch's order. The map gets
 * detached tensors that share storage with the module's (torch's state_dict()). */
NB_API nb_status nb_module_state_dict(const nb_module *m, nb_tensor_map *out);
/* Copies values from in into the module's existing tensors, under no-grad (converting dtype).
 * Every key is checked before anything is copied: a tensor whose shape differs is always an
 * NB_ERR_SHAPE error naming the key and both shapes; in strict mode a module key absent from in
 * ("missing key") and a key of in the module does not have ("unexpected key") are
 * NB_ERR_INVALID_ARG errors naming the key. Non-strict loading skips both. */
NB_API nb_status nb_module_load_state_dict(nb_module *m, const nb_tensor_map *in, bool strict);
/* Moves every parameter and buffer to device. Parameters stay leaves with requires_grad; entries
 * already on device are kept. On another device the tensors are replaced (borrowed pointers taken
 * before become stale: make the optimizer after moving the model). */
NB_API nb_status nb_module_to(nb_module *m, nb_device device);

/* ---- initialisation (torch.nn.init) ------------------------------------------------------------
 * Fill a floating tensor in place under no-grad (so parameters can be re-initialised), from g or,
 * when g is NULL, the default generator of t's device. A module constructor makes its tensors with
 * nb_empty, fills them with these, and registers them: Conv2d's weight and bias, for instance, are
 * nb_init_uniform_(t, -b, b, g) with b = 1 / sqrt(fan_in), fan_in = C / groups * KH * KW. */
NB_API nb_status nb_init_uniform_(nb_tensor *t, double low, double high, nb_generator *g);
NB_API nb_status nb_init_normal_(nb_tensor *t, double mean, double std, nb_generator *g);

/* ---- built-in modules (PyTorch's classes, defaults and initialisation) ----------------------
 * Constructors return NULL with nb_last_error() on bad arguments. p (may be NULL) gives dtype,
 * device and generator for the initial values; requires_grad is always set on parameters.
 * Random initial values come from p->generator, or the device's default (nb_manual_seed). */

/* y = x W^T + b: weight [out, in], bias [out] (or none), both ~ U(-1/sqrt(in), 1/sqrt(in)), i.e.
 * torch's kaiming_uniform_(a = sqrt(5)) and bias init. */
NB_API nb_module *nb_linear_module(int64_t in_features, int64_t out_features, bool bias,
                                   const nb_tensor_params *p);
/* Runs children in order; takes ownership of the n children, also on failure. A NULL child (a
 * constructor that failed) makes it fail, keeping that constructor's error in the message. A
 * Conv2d or BatchNorm2d child directly followed by a ReLU child runs as one op with the ReLU
 * fused (the same values and gradients). */
NB_API nb_module *nb_sequential(nb_module **children, int n);
NB_API nb_module *nb_relu_module(void);
NB_API nb_module *nb_sigmoid_module(void);
NB_API nb_module *nb_tanh_module(void);
/* GELU, exact (erf) form, as torch.nn.GELU(). */
NB_API nb_module *nb_gelu_module(void);
NB_API nb_module *nb_leaky_relu_module(double negative_slope);
/* nb_flatten(x, start_dim, end_dim); torch.nn.Flatten's defaults are (1, -1). */
NB_API nb_module *nb_flatten_module(int64_t start_dim, int64_t end_dim);
/* nb_dropout with the module's training flag and the default generator; p in [0, 1]. */
NB_API nb_module *nb_dropout_module(double p);
/* weight [num, dim] ~ N(0, 1); forward takes integer indices of any shape: [..., dim]. */
NB_API nb_module *nb_embedding_module(int64_t num_embeddings, int64_t embedding_dim,
                                      const nb_tensor_params *p);

#ifdef __cplusplus
}
#endif
#endif
