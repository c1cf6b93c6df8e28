/* The generic module: named parameters, buffers and children, training mode, state dicts. */
#include <stdlib.h>
#include <string.h>

#include "core/error_impl.h"
#include "nabla/autograd.h"
#include "nabla/module.h"

enum { K_PARAM, K_BUFFER, K_CHILD, K_COUNT };

typedef struct entry {
    char *name;
    nb_tensor *t;     /* K_PARAM, K_BUFFER: the module's own reference */
    nb_module *child; /* K_CHILD */
} entry;

typedef struct entry_list {
    entry *items;
    int n, cap;
} entry_list;

struct nb_module {
    const nb_module_funcs *funcs;
    void *user;
    bool training;
    bool has_parent;
    entry_list lists[K_COUNT];
    char **names; /* the cache behind nb_module_named_*: full names of the last call */
    int n_names;
};

static const char *const kind_name[K_COUNT] = {"parameter", "buffer", "module"};

static void free_names(nb_module *m)
{
    for (int i = 0; i < m->n_names; i++) free(m->names[i]);
    free(m->names);
    m->names = NULL;
    m->n_names = 0;
}

nb_module *nb_module_create(const nb_module_funcs *funcs, void *user)
{
    if (!funcs) return nb__err_null(NB_ERR_INVALID_ARG, "module_create: NULL funcs");
    nb_module *m = calloc(1, sizeof *m);
    if (!m) return nb__err_null(NB_ERR_OOM, "module_create: out of memory");
    m->funcs = funcs;
    m->user = user;
    m->training = true;
    return m;
}

void nb_module_free(nb_module *m)
{
    if (!m) return;
    for (int k = 0; k < K_COUNT; k++) {
        for (int i = 0; i < m->lists[k].n; i++) {
            entry *e = &m->lists[k].items[i];
            free(e->name);
            nb_tensor_free(e->t);
            nb_module_free(e->child);
        }
        free(m->lists[k].items);
    }
    free_names(m);
    if (m->funcs->free_user) m->funcs->free_user(m->user);
    free(m);
}

void *nb_module_user(const nb_module *m) { return m ? m->user : NULL; }

const char *nb_module_type_name(const nb_module *m)
{
    return m && m->funcs->type_name ? m->funcs->type_name : "Module";
}

/* ---- registration ---------------------------------------------------------------------------- */

static entry *find(const nb_module *m, int kind, const char *name)
{
    const entry_list *l = &m->lists[kind];
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->items[i].name, name)) return &l->items[i];
    return NULL;
}

static nb_status check_name(const nb_module *m, int kind, const char *name)
{
    const char *op = kind_name[kind];
    if (!m) return nb__err(NB_ERR_INVALID_ARG, "register_%s: NULL module", op);
    if (!name || !*name) return nb__err(NB_ERR_INVALID_ARG, "register_%s: empty name", op);
    if (strchr(name, '.'))
        return nb__err(NB_ERR_INVALID_ARG, "register_%s: name \"%s\" contains '.'", op, name);
    for (int k = 0; k < K_COUNT; k++)
        if (k != kind && find(m, k, name))
            return nb__err(NB_ERR_INVALID_ARG, "register_%s: \"%s\" is already a %s of %s", op, name,
                           kind_name[k], nb_module_type_name(m));
    return NB_OK;
}

/* Adds (or replaces) an entry; takes over t's / child's reference on success only. */
static nb_status add_entry(nb_module *m, int kind, const char *name, nb_tensor *t, nb_module *child)
{
    entry *e = find(m, kind, name);
    if (e) {
        nb_tensor_free(e->t);
        nb_module_free(e->child);
        e->t = t;
        e->child = child;
        return NB_OK;
    }
    entry_list *l = &m->lists[kind];
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 4;
        entry *items = realloc(l->items, (size_t)cap * sizeof *items);
        if (!items) return nb__err(NB_ERR_OOM, "register_%s: out of memory", kind_name[kind]);
        l->items = items;
        l->cap = cap;
    }
    char *copy = strdup(name);
    if (!copy) return nb__err(NB_ERR_OOM, "register_%s: out of memory", kind_name[kind]);
    l->items[l->n++] = (entry){copy, t, child};
    return NB_OK;
}

nb_status nb_module_register_parameter(nb_module *m, const char *name, nb_tensor *t)
{
    NB_TRY(check_name(m, K_PARAM, name));
    if (!t) return nb__err(NB_ERR_INVALID_ARG, "register_parameter: NULL tensor for \"%s\"", name);
    if (!nb_dtype_is_floating(nb_tensor_dtype(t)))
        return nb__err(NB_ERR_DTYPE, "register_parameter: \"%s\" must be floating (got %s)", name,
                       nb_dtype_name(nb_tensor_dtype(t)));
    if (!nb_tensor_is_leaf(t))
        return nb__err(NB_ERR_INVALID_ARG, "register_parameter: \"%s\" is not a leaf tensor (detach it)", name);
    NB_TRY(nb_tensor_set_requires_grad(t, true));
    nb_tensor *ref = nb_tensor_retain(t);
    nb_status s = add_entry(m, K_PARAM, name, ref, NULL);
    if (s != NB_OK) nb_tensor_free(ref);
    return s;
}

nb_status nb_module_register_buffer(nb_module *m, const char *name, nb_tensor *t)
{
    NB_TRY(check_name(m, K_BUFFER, name));
    if (!t) return nb__err(NB_ERR_INVALID_ARG, "register_buffer: NULL tensor for \"%s\"", name);
    nb_tensor *ref = nb_tensor_retain(t);
    nb_status s = add_entry(m, K_BUFFER, name, ref, NULL);
    if (s != NB_OK) nb_tensor_free(ref);
    return s;
}

nb_status nb_module_register_module(nb_module *m, const char *name, nb_module *child)
{
    nb_status s = check_name(m, K_CHILD, name);
    if (s == NB_OK && !child) s = nb__err(NB_ERR_INVALID_ARG, "register_module: NULL module for \"%s\"", name);
    if (s == NB_OK && (child == m || child->has_parent))
        s = nb__err(NB_ERR_INVALID_ARG, "register_module: \"%s\" already has a parent", name);
    if (s == NB_OK) s = add_entry(m, K_CHILD, name, NULL, child);
    if (s != NB_OK) {
        if (child && child != m && !child->has_parent) nb_module_free(child);
        return s;
    }
    child->has_parent = true;
    return NB_OK;
}

nb_tensor *nb_module_get_parameter(const nb_module *m, const char *name)
{
    const entry *e = m && name ? find(m, K_PARAM, name) : NULL;
    return e ? e->t : NULL;
}

nb_tensor *nb_module_get_buffer(const nb_module *m, const char *name)
{
    const entry *e = m && name ? find(m, K_BUFFER, name) : NULL;
    return e ? e->t : NULL;
}

nb_module *nb_module_get_module(const nb_module *m, const char *name)
{
    const entry *e = m && name ? find(m, K_CHILD, name) : NULL;
    return e ? e->child : NULL;
}

/* ---- forward and mode ------------------------------------------------------------------------ */

nb_tensor *nb_module_forward(nb_module *m, nb_tensor *x)
{
    if (!m) return nb__err_null(NB_ERR_INVALID_ARG, "module_forward: NULL module");
    if (!m->funcs->forward)
        return nb__err_null(NB_ERR_UNSUPPORTED, "module_forward: %s has no forward function",
                            nb_module_type_name(m));
    if (!x) return nb__err_null(NB_ERR_INVALID_ARG, "module_forward: NULL input to %s", nb_module_type_name(m));
    nb_scope *s = nb_scope_begin();
    if (!s) return nb__err_null(NB_ERR_OOM, "module_forward: out of memory");
    nb_tensor *y = m->funcs->forward(m, x);
    return nb_scope_end_keep(s, y);
}

void nb_module_train(nb_module *m, bool training)
{
    if (!m) return;
    m->training = training;
    for (int i = 0; i < m->lists[K_CHILD].n; i++) nb_module_train(m->lists[K_CHILD].items[i].child, training);
}

bool nb_module_is_training(const nb_module *m) { return m && m->training; }

/* ---- walking the tree ------------------------------------------------------------------------ */

/* Calls fn for each parameter (want_params) and buffer (want_buffers) of m's tree in state-dict
 * order, with the full name (only built when with_names). Stops at the first non-OK status. */
typedef nb_status (*visit_fn)(void *ctx, const char *name, nb_tensor **slot, bool is_param);

static char *join(const char *prefix, const char *name)
{
    size_t a = strlen(prefix), b = strlen(name);
    char *s = malloc(a + b + 2);
    if (!s) return NULL;
    memcpy(s, prefix, a);
    if (a) s[a++] = '.';
    memcpy(s + a, name, b + 1);
    return s;
}

static nb_status walk(const nb_module *m, const char *prefix, bool params, bool buffers, visit_fn fn,
                      void *ctx)
{
    for (int k = K_PARAM; k <= K_CHILD; k++) {
        if ((k == K_PARAM && !params) || (k == K_BUFFER && !buffers)) continue;
        for (int i = 0; i < m->lists[k].n; i++) {
            entry *e = &m->lists[k].items[i];
            char *full = prefix ? join(prefix, e->name) : NULL;
            if (prefix && !full) return nb__err(NB_ERR_OOM, "module: out of memory");
            nb_status s = k == K_CHILD ? walk(e->child, full, params, buffers, fn, ctx)
                                       : fn(ctx, full, &e->t, k == K_PARAM);
            free(full);
            if (s != NB_OK) return s;
        }
    }
    return NB_OK;
}

typedef struct collect_ctx {
    nb_tensor **out;
    char **names; /* owned copies, or NULL when not collecting names */
    int cap, n;
    int64_t numel;
} collect_ctx;

static nb_status collect(void *ctx, const char *name, nb_tensor **slot, bool is_param)
{
    (void)is_param;
    collect_ctx *c = ctx;
    if (c->n < c->cap && c->out) c->out[c->n] = *slot;
    if (c->names) {
        c->names[c->n] = strdup(name ? name : "");
        if (!c->names[c->n]) return nb__err(NB_ERR_OOM, "module: out of memory");
    }
    c->numel += nb_tensor_numel(*slot);
    c->n++;
    return NB_OK;
}

static int list_tensors(const nb_module *m, bool params, nb_tensor **out, int cap)
{
    if (!m) return nb__err(NB_ERR_INVALID_ARG, "module_parameters: NULL module"), -1;
    collect_ctx c = {out, NULL, cap, 0, 0};
    return walk(m, NULL, params, !params, collect, &c) == NB_OK ? c.n : -1;
}

int nb_module_parameters(const nb_module *m, nb_tensor **out, int cap) { return list_tensors(m, true, out, cap); }
int nb_module_buffers(const nb_module *m, nb_tensor **out, int cap) { return list_tensors(m, false, out, cap); }

int64_t nb_module_num_parameters(const nb_module *m)
{
    if (!m) return 0;
    collect_ctx c = {NULL, NULL, 0, 0, 0};
    walk(m, NULL, true, false, collect, &c);
    return c.numel;
}

static int list_named(nb_module *m, bool params, const char **names, nb_tensor **out, int cap)
{
    if (!m) return nb__err(NB_ERR_INVALID_ARG, "module_named_parameters: NULL module"), -1;
    int total = list_tensors(m, params, NULL, 0);
    free_names(m);
    m->names = calloc((size_t)total + 1, sizeof *m->names);
    if (!m->names) return nb__err(NB_ERR_OOM, "module_named_parameters: out of memory"), -1;
    collect_ctx c = {out, m->names, cap, 0, 0};
    nb_status s = walk(m, "", params, !params, collect, &c);
    m->n_names = c.n;
    if (s != NB_OK) return -1;
    for (int i = 0; names && i < c.n && i < cap; i++) names[i] = m->names[i];
    return c.n;
}

int nb_module_named_parameters(nb_module *m, const char **names, nb_tensor **out, int cap)
{
    return list_named(m, true, names, out, cap);
}

int nb_module_named_buffers(nb_module *m, const char **names, nb_tensor **out, int cap)
{
    return list_named(m, false, names, out, cap);
}

/* ---- state dicts ----------------------------------------------------------------------------- */

static nb_status put_detached(void *ctx, const char *name, nb_tensor **slot, bool is_param)
{
    (void)is_param;
    nb_scope *s = nb_scope_begin();
    if (!s) return nb__err(NB_ERR_OOM, "state_dict: out of memory");
    nb_tensor *d = nb_detach(*slot);
    nb_status st = d ? nb_tensor_map_set(ctx, name, d) : nb_last_status();
    nb_scope_end(s);
    return st;
}

nb_status nb_module_state_dict(const nb_module *m, nb_tensor_map *out)
{
    if (!m || !out) return nb__err(NB_ERR_INVALID_ARG, "state_dict: NULL %s", m ? "map" : "module");
    return walk(m, "", true, true, put_detached, out);
}

typedef struct load_ctx {
    const nb_tensor_map *in;
    bool strict, copy;
    int found;
} load_ctx;

static void shape_str(const nb_tensor *t, char *buf, size_t size)
{
    int n = snprintf(buf, size, "[");
    for (int i = 0; i < nb_tensor_ndim(t) && n < (int)size; i++)
        n += snprintf(buf + n, size - (size_t)n, "%s%lld", i ? ", " : "", (long long)nb_tensor_shape(t)[i]);
    if (n < (int)size) snprintf(buf + n, size - (size_t)n, "]");
}

static nb_status load_one(void *ctx, const char *name, nb_tensor **slot, bool is_param)
{
    (void)is_param;
    load_ctx *c = ctx;
    if (!nb_tensor_map_contains(c->in, name)) {
        if (c->strict) return nb__err(NB_ERR_INVALID_ARG, "load_state_dict: missing key \"%s\"", name);
        return NB_OK;
    }
    c->found++;
    nb_scope *s = nb_scope_begin();
    if (!s) return nb__err(NB_ERR_OOM, "load_state_dict: out of memory");
    nb_tensor *src = nb_tensor_map_get(c->in, name);
    nb_status st = src ? NB_OK : nb_last_status();
    bool same = src && nb_tensor_ndim(src) == nb_tensor_ndim(*slot) &&
                !memcmp(nb_tensor_shape(src), nb_tensor_shape(*slot), (size_t)nb_tensor_ndim(src) * sizeof(int64_t));
    if (src && !same) {
        char a[256], b[256];
        shape_str(src, a, sizeof a);
        shape_str(*slot, b, sizeof b);
        st = nb__err(NB_ERR_SHAPE, "load_state_dict: size mismatch for \"%s\": copying a tensor of shape %s, "
                     "the module's has shape %s", name, a, b);
    }
    if (st == NB_OK && c->copy) {
        bool prev = nb_set_grad_enabled(false);
        st = nb_copy_(*slot, src);
        nb_set_grad_enabled(prev);
    }
    nb_scope_end(s);
    return st;
}

nb_status nb_module_load_state_dict(nb_module *m, const nb_tensor_map *in, bool strict)
{
    if (!m || !in) return nb__err(NB_ERR_INVALID_ARG, "load_state_dict: NULL %s", m ? "map" : "module");
    load_ctx c = {in, strict, false, 0};
    NB_TRY(walk(m, "", true, true, load_one, &c));
    if (strict && c.found != nb_tensor_map_size(in)) {
        /* some key of in is not the module's: find the first to name it */
        nb_tensor_map *mine = nb_tensor_map_create();
        if (!mine) return nb__err(NB_ERR_OOM, "load_state_dict: out of memory");
        nb_status st = nb_module_state_dict(m, mine);
        for (int i = 0; st == NB_OK && i < nb_tensor_map_size(in); i++)
            if (!nb_tensor_map_contains(mine, nb_tensor_map_name(in, i)))
                st = nb__err(NB_ERR_INVALID_ARG, "load_state_dict: unexpected key \"%s\" in the state dict of %s",
                             nb_tensor_map_name(in, i), nb_module_type_name(m));
        nb_tensor_map_free(mine);
        NB_TRY(st);
    }
    c.copy = true;
    return walk(m, "", true, true, load_one, &c);
}

static nb_status move_one(void *ctx, const char *name, nb_tensor **slot, bool is_param)
{
    (void)name;
    nb_device dev = *(const nb_device *)ctx;
    if (nb_device_equal(nb_tensor_device(*slot), dev)) return NB_OK;
    nb_scope *s = nb_scope_begin();
    if (!s) return nb__err(NB_ERR_OOM, "module_to: out of memory");
    bool prev = nb_set_grad_enabled(false);
    nb_tensor *moved = nb_to(*slot, dev);
    nb_set_grad_enabled(prev);
    nb_status st = moved ? NB_OK : nb_last_status();
    nb_tensor *kept = moved ? nb_tensor_retain(moved) : NULL;
    nb_scope_end(s);
    if (st == NB_OK && is_param) st = nb_tensor_set_requires_grad(kept, true);
    if (st != NB_OK) {
        nb_tensor_free(kept);
        return st;
    }
    nb_tensor_free(*slot);
    *slot = kept;
    return NB_OK;
}

nb_status nb_module_to(nb_module *m, nb_device device)
{
    if (!m) return nb__err(NB_ERR_INVALID_ARG, "module_to: NULL module");
    NB_TRY(nb_device_check(device));
    return walk(m, NULL, true, true, move_one, &device);
}
