/* The subset of Python's pickle that torch.save writes (protocol 2, and the opcodes of later
 * protocols a re-saved file may use): the reader, which evaluates a pickle into a tree of values.
 * The allow-list of globals and torch's element types are pickle_globals.c; the writer's opcodes
 * pickle_write.c.
 *
 * The reader never calls anything: GLOBAL names are looked up in the allow-list (torch's tensor
 * rebuild functions, its storage classes and dtypes, OrderedDict, torch.Size, torch.device, set,
 * _codecs.encode for bytes), as torch.load(weights_only=True) does, and REDUCE applies the few
 * calls it knows to values. BINPERSID makes a storage reference from torch's persistent id
 * ('storage', <storage class>, <key>, <location>, <numel>); tensors keep their storage, offset,
 * sizes and strides, checked only for type and sign here (torchfile.c checks them against the
 * storage). Everything lives in one arena freed with the document; the number of values and the
 * arena's size are bounded (by NB_PICKLE_MAX_VALUES and a multiple of the pickle's size), and so
 * are the stacks and the memo (by the number of opcodes read), whatever the input.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/error_impl.h"
#include "io/arena_impl.h"
#include "io/pickle_impl.h"
#include "io/torchfile_impl.h"

const char *nb__pickle_kind_name(pk_kind k)
{
    static const char *const names[] = {"None", "a bool", "an int", "an int past 64 bits", "a float", "a string", "bytes", "a tuple",
                                        "a list", "a set", "a dict", "a global", "a storage", "a tensor"};
    return names[k];
}

/* ==== the document ============================================================================ */

struct pk_doc {
    nb_io_arena arena;
    size_t limit;    /* the bound on the arena's bytes */
    bool over_limit; /* an allocation was refused for the bound */
    size_t n_values;
};

void nb__pickle_free(pk_doc *doc)
{
    if (!doc) return;
    nb__io_arena_free(&doc->arena);
    free(doc);
}

size_t nb__pickle_value_count(const pk_doc *doc) { return doc ? doc->n_values : 0; }

static pk_value v_none = {PK_NONE, {0}}, v_true = {PK_BOOL, {.b = true}}, v_false = {PK_BOOL, {.b = false}};

/* ==== the machine ============================================================================= */

typedef struct vm {
    const unsigned char *p;
    size_t n, pos;
    size_t op_at; /* the current opcode's offset and value, for messages */
    unsigned char op;
    pk_doc *doc;
    pk_value **stack;
    size_t sp, stack_cap;
    size_t *marks;
    size_t n_marks, marks_cap;
    pk_value **memo;
    size_t memo_cap, memo_len, puts;
} vm;

/* The names of the opcodes read, for messages. */
static const char *op_name(unsigned char op)
{
    static const struct {
        unsigned char op;
        const char *name;
    } names[] = {
        {0x80, "PROTO"}, {0x95, "FRAME"}, {'.', "STOP"}, {'(', "MARK"}, {'0', "POP"}, {'1', "POP_MARK"},
        {'2', "DUP"}, {'}', "EMPTY_DICT"}, {']', "EMPTY_LIST"}, {')', "EMPTY_TUPLE"}, {0x8f, "EMPTY_SET"},
        {'t', "TUPLE"}, {0x85, "TUPLE1"}, {0x86, "TUPLE2"}, {0x87, "TUPLE3"}, {'l', "LIST"}, {'d', "DICT"},
        {0x91, "FROZENSET"}, {'a', "APPEND"}, {'e', "APPENDS"}, {0x90, "ADDITEMS"}, {'s', "SETITEM"},
        {'u', "SETITEMS"}, {'c', "GLOBAL"}, {0x93, "STACK_GLOBAL"}, {'R', "REDUCE"}, {'b', "BUILD"},
        {'Q', "BINPERSID"}, {'q', "BINPUT"}, {'r', "LONG_BINPUT"}, {0x94, "MEMOIZE"}, {'h', "BINGET"},
        {'j', "LONG_BINGET"}, {'J', "BININT"}, {'K', "BININT1"}, {'M', "BININT2"}, {0x8a, "LONG1"},
        {'G', "BINFLOAT"}, {'N', "NONE"}, {0x88, "NEWTRUE"}, {0x89, "NEWFALSE"}, {'X', "BINUNICODE"},
        {0x8c, "SHORT_BINUNICODE"}, {0x8d, "BINUNICODE8"}, {'U', "SHORT_BINSTRING"}, {'T', "BINSTRING"},
        {'C', "SHORT_BINBYTES"}, {'B', "BINBYTES"}, {0x8e, "BINBYTES8"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].op == op) return names[i].name;
    return NULL;
}

static nb_status vm_err(const vm *v, nb_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static nb_status vm_err(const vm *v, nb_status st, const char *fmt, ...)
{
    char msg[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *name = op_name(v->op);
    return nb__err(st, "data.pkl: %s (0x%02x) at offset %zu: %s", name ? name : "opcode", v->op, v->op_at, msg);
}

static void *vm_alloc(vm *v, size_t n)
{
    pk_doc *d = v->doc;
    size_t rounded = (n + 15) & ~(size_t)15; /* as the arena rounds it */
    if (rounded < n || rounded > d->limit - d->arena.bytes) {
        d->over_limit = true;
        return NULL;
    }
    return nb__io_arena_alloc(&d->arena, n);
}

static nb_status oom(const vm *v)
{
    if (v->doc->over_limit)
        return vm_err(v, NB_ERR_FORMAT, "the pickle builds more than %zu bytes of values, out of proportion to its "
                      "%zu bytes", v->doc->limit, v->n);
    return vm_err(v, NB_ERR_OOM, "out of memory");
}

static pk_value *new_value(vm *v, pk_kind kind)
{
    if (v->doc->n_values >= NB_PICKLE_MAX_VALUES) return NULL;
    pk_value *x = vm_alloc(v, sizeof *x);
    if (!x) return NULL;
    memset(x, 0, sizeof *x);
    x->kind = kind;
    v->doc->n_values++;
    return x;
}

static nb_status value_err(const vm *v)
{
    if (v->doc->n_values >= NB_PICKLE_MAX_VALUES)
        return vm_err(v, NB_ERR_FORMAT, "more than %u values", NB_PICKLE_MAX_VALUES);
    return oom(v);
}

/* Appends x to a sequence, doubling its array in the arena. */
static nb_status seq_push(vm *v, pk_value *s, pk_value *x)
{
    if (s->u.seq.n == s->u.seq.cap) {
        size_t cap = s->u.seq.cap ? s->u.seq.cap * 2 : 4;
        pk_value **items = vm_alloc(v, cap * sizeof *items);
        if (!items) return oom(v);
        if (s->u.seq.n) memcpy(items, s->u.seq.items, s->u.seq.n * sizeof *items);
        s->u.seq.items = items;
        s->u.seq.cap = cap;
    }
    s->u.seq.items[s->u.seq.n++] = x;
    return NB_OK;
}

static nb_status push(vm *v, pk_value *x)
{
    if (!x) return value_err(v);
    if (v->sp == v->stack_cap) {
        size_t cap = v->stack_cap ? v->stack_cap * 2 : 64;
        pk_value **s = realloc(v->stack, cap * sizeof *s);
        if (!s) return oom(v);
        v->stack = s;
        v->stack_cap = cap;
    }
    v->stack[v->sp++] = x;
    return NB_OK;
}

static size_t mark_base(const vm *v) { return v->n_marks ? v->marks[v->n_marks - 1] : 0; }

static nb_status pop(vm *v, pk_value **out)
{
    if (v->sp <= mark_base(v)) return vm_err(v, NB_ERR_FORMAT, "the stack is empty");
    *out = v->stack[--v->sp];
    return NB_OK;
}

static nb_status top(vm *v, pk_kind kind, pk_value **out)
{
    if (v->sp <= mark_base(v)) return vm_err(v, NB_ERR_FORMAT, "the stack is empty");
    *out = v->stack[v->sp - 1];
    if ((*out)->kind != kind)
        return vm_err(v, NB_ERR_FORMAT, "expected %s on the stack, found %s", nb__pickle_kind_name(kind),
                      nb__pickle_kind_name((*out)->kind));
    return NB_OK;
}

/* The items above the last mark: *items points into the stack, the mark is removed. */
static nb_status pop_mark(vm *v, pk_value ***items, size_t *n)
{
    if (!v->n_marks) return vm_err(v, NB_ERR_FORMAT, "no MARK before it");
    size_t base = v->marks[--v->n_marks];
    *items = v->stack + base;
    *n = v->sp - base;
    v->sp = base;
    return NB_OK;
}

static nb_status need(vm *v, size_t k)
{
    if (v->n - v->pos < k)
        return vm_err(v, NB_ERR_FORMAT, "needs %zu bytes, %zu left (the pickle is cut short)", k, v->n - v->pos);
    return NB_OK;
}

static uint64_t le(const unsigned char *p, int k)
{
    uint64_t x = 0;
    for (int i = k - 1; i >= 0; i--) x = x << 8 | p[i];
    return x;
}

/* Reads a k-byte little-endian length, then that many bytes (bounded by what is left). */
static nb_status read_counted(vm *v, int k, const char **s, size_t *len)
{
    NB_TRY(need(v, (size_t)k));
    uint64_t n = le(v->p + v->pos, k);
    v->pos += (size_t)k;
    if (n > v->n - v->pos)
        return vm_err(v, NB_ERR_FORMAT, "a length of %llu bytes runs past the end of the pickle (%zu bytes left)",
                      (unsigned long long)n, v->n - v->pos);
    *s = (const char *)v->p + v->pos;
    *len = (size_t)n;
    v->pos += (size_t)n;
    return NB_OK;
}

static nb_status push_str(vm *v, pk_kind kind, const char *s, size_t len)
{
    if (kind == PK_STR && !nb__utf8_valid(s, len)) return vm_err(v, NB_ERR_FORMAT, "the string is not valid UTF-8");
    pk_value *x = new_value(v, kind);
    if (x) x->u.str.s = s, x->u.str.len = len;
    return push(v, x);
}

static nb_status push_int(vm *v, int64_t i)
{
    pk_value *x = new_value(v, PK_INT);
    if (x) x->u.i = i;
    return push(v, x);
}

/* An int of n > 8 bytes (two's complement, little-endian) as decimal text: repeated division of
 * its magnitude, in 32-bit limbs, by 10^9. */
static nb_status push_bigint(vm *v, const unsigned char *p, size_t n)
{
    bool neg = p[n - 1] & 0x80;
    size_t nl = (n + 3) / 4;
    uint32_t limbs[64 + 1] = {0}; /* LONG1: at most 255 bytes */
    for (size_t i = 0; i < n; i++) limbs[i / 4] |= (uint32_t)(neg ? (unsigned char)~p[i] : p[i]) << (8 * (i % 4));
    if (neg) /* magnitude = ~x + 1 */
        for (size_t i = 0; i < nl && ++limbs[i] == 0; i++) continue;
    char digits[700], *d = digits + sizeof digits;
    *--d = '\0';
    for (;;) {
        uint64_t rem = 0;
        bool zero = true;
        for (size_t i = nl; i-- > 0;) {
            uint64_t cur = rem << 32 | limbs[i];
            limbs[i] = (uint32_t)(cur / 1000000000u);
            rem = cur % 1000000000u;
            zero &= limbs[i] == 0;
        }
        for (int k = 0; k < 9 && (!zero || rem); k++, rem /= 10) *--d = (char)('0' + rem % 10);
        if (zero) break;
    }
    if (!*d) *--d = '0';
    if (neg) *--d = '-';
    size_t len = strlen(d);
    char *s = vm_alloc(v, len);
    pk_value *x = s ? new_value(v, PK_BIGINT) : NULL;
    if (!x) return value_err(v);
    memcpy(s, d, len);
    x->u.str.s = s;
    x->u.str.len = len;
    return push(v, x);
}

/* A line ending in '\n' (GLOBAL's operands). */
static nb_status read_line(vm *v, const char **s, size_t *len)
{
    const unsigned char *nl = memchr(v->p + v->pos, '\n', v->n - v->pos);
    if (!nl) return vm_err(v, NB_ERR_FORMAT, "no end of line in its operand (the pickle is cut short)");
    *s = (const char *)v->p + v->pos;
    *len = (size_t)(nl - (v->p + v->pos));
    v->pos += *len + 1;
    return NB_OK;
}

static nb_status push_global(vm *v, const char *mod, size_t mod_len, const char *name, size_t name_len)
{
    int g = nb__pk_lookup_global(mod, mod_len, name, name_len);
    if (g < 0)
        return vm_err(v, NB_ERR_UNSUPPORTED, "cannot load global %.*s.%.*s: only dicts, lists, tuples, tensors and "
                      "numbers (and torch's storage classes, dtypes, Size and device)", (int)(mod_len > 120 ? 120 : mod_len),
                      mod, (int)(name_len > 120 ? 120 : name_len), name);
    pk_value *x = new_value(v, PK_GLOBAL);
    if (x) x->u.global = g;
    return push(v, x);
}

/* ---- memo ---------------------------------------------------------------------------------- */

static nb_status memo_put(vm *v, uint64_t idx)
{
    pk_value *x;
    if (v->sp <= mark_base(v)) return vm_err(v, NB_ERR_FORMAT, "the stack is empty");
    x = v->stack[v->sp - 1];
    /* picklers number memo entries in order: a far index is a hostile file, not a big one */
    if (idx > v->puts + 4096)
        return vm_err(v, NB_ERR_FORMAT, "memo index %llu is far past the %zu entries stored so far",
                      (unsigned long long)idx, v->memo_len);
    v->puts++;
    if (idx >= v->memo_cap) {
        size_t cap = v->memo_cap ? v->memo_cap : 64;
        while (cap <= idx) cap *= 2;
        pk_value **m = realloc(v->memo, cap * sizeof *m);
        if (!m) return oom(v);
        memset(m + v->memo_cap, 0, (cap - v->memo_cap) * sizeof *m);
        v->memo = m;
        v->memo_cap = cap;
    }
    if (!v->memo[idx]) v->memo_len++;
    v->memo[idx] = x;
    return NB_OK;
}

static nb_status memo_get(vm *v, uint64_t idx)
{
    if (idx >= v->memo_cap || !v->memo[idx])
        return vm_err(v, NB_ERR_FORMAT, "memo entry %llu was never stored", (unsigned long long)idx);
    return push(v, v->memo[idx]);
}

/* ---- REDUCE -------------------------------------------------------------------------------- */

/* A tuple of at most NB_MAX_DIMS non-negative ints into out. */
static nb_status int_tuple(vm *v, const char *fn, const char *what, const pk_value *t, int64_t *out, int *n)
{
    if (t->kind != PK_TUPLE)
        return vm_err(v, NB_ERR_FORMAT, "%s: %s must be a tuple, found %s", fn, what, nb__pickle_kind_name(t->kind));
    if (t->u.seq.n > NB_MAX_DIMS)
        return vm_err(v, NB_ERR_UNSUPPORTED, "%s: %s has %zu dims (nabla supports at most %d)", fn, what, t->u.seq.n,
                      NB_MAX_DIMS);
    for (size_t i = 0; i < t->u.seq.n; i++) {
        const pk_value *x = t->u.seq.items[i];
        if (x->kind != PK_INT || x->u.i < 0)
            return vm_err(v, NB_ERR_FORMAT, "%s: %s must hold non-negative ints, found %s", fn, what,
                          x->kind == PK_INT ? "a negative one" : nb__pickle_kind_name(x->kind));
        out[i] = x->u.i;
    }
    *n = (int)t->u.seq.n;
    return NB_OK;
}

/* _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]) and v3,
 * which adds the dtype after hooks and takes an UntypedStorage. */
static nb_status rebuild_tensor(vm *v, bool v3, pk_value **a, size_t n)
{
    const char *fn = v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2";
    size_t want = v3 ? 7 : 6;
    if (n != want && n != want + 1)
        return vm_err(v, NB_ERR_FORMAT, "%s takes %zu or %zu arguments, found %zu", fn, want, want + 1, n);
    if (a[0]->kind != PK_STORAGE)
        return vm_err(v, NB_ERR_FORMAT, "%s: its first argument must be a storage, found %s", fn,
                      nb__pickle_kind_name(a[0]->kind));
    if (a[1]->kind != PK_INT || a[1]->u.i < 0)
        return vm_err(v, NB_ERR_FORMAT, "%s: the storage offset must be a non-negative int", fn);
    if (a[4]->kind != PK_BOOL) return vm_err(v, NB_ERR_FORMAT, "%s: requires_grad must be a bool", fn);
    pk_tensor *t = vm_alloc(v, sizeof *t);
    pk_value *x = t ? new_value(v, PK_TENSOR) : NULL;
    if (!x) return value_err(v);
    memset(t, 0, sizeof *t);
    int nstride;
    NB_TRY(int_tuple(v, fn, "the size", a[2], t->size, &t->ndim));
    NB_TRY(int_tuple(v, fn, "the stride", a[3], t->stride, &nstride));
    if (nstride != t->ndim)
        return vm_err(v, NB_ERR_FORMAT, "%s: %d sizes but %d strides", fn, t->ndim, nstride);
    t->storage = a[0]->u.storage;
    t->offset = a[1]->u.i;
    if (v3) {
        if (a[6]->kind != PK_GLOBAL || a[6]->u.global < PK_G_DTYPE)
            return vm_err(v, NB_ERR_FORMAT, "%s: its dtype must be a torch dtype, found %s", fn,
                          nb__pickle_kind_name(a[6]->kind));
        if (t->storage->elem)
            return vm_err(v, NB_ERR_FORMAT, "%s: expects an UntypedStorage, found %s", fn, t->storage->type_name);
        t->elem = &nb__torch_elems[a[6]->u.global - PK_G_DTYPE];
    } else {
        if (!t->storage->elem) return vm_err(v, NB_ERR_FORMAT, "%s: expects a typed storage, found %s", fn,
                                             t->storage->type_name);
        t->elem = t->storage->elem;
    }
    x->u.tensor = t;
    return push(v, x);
}

/* _codecs.encode(str, 'latin1'): how protocol 2 pickles bytes. */
static nb_status codecs_encode(vm *v, pk_value **a, size_t n)
{
    if (n != 2 || a[0]->kind != PK_STR || a[1]->kind != PK_STR ||
        !(pk_eq(a[1]->u.str.s, a[1]->u.str.len, "latin1") || pk_eq(a[1]->u.str.s, a[1]->u.str.len, "latin-1")))
        return vm_err(v, NB_ERR_UNSUPPORTED, "_codecs.encode: only (str, 'latin1') is read");
    const unsigned char *s = (const unsigned char *)a[0]->u.str.s;
    size_t len = a[0]->u.str.len, k = 0;
    char *out = vm_alloc(v, len + 1);
    if (!out) return oom(v);
    for (size_t i = 0; i < len; i++) {
        if (s[i] < 0x80) out[k++] = (char)s[i];
        else if ((s[i] == 0xc2 || s[i] == 0xc3) && i + 1 < len) out[k++] = (char)((s[i] & 3) << 6 | (s[i + 1] & 0x3f)), i++;
        else return vm_err(v, NB_ERR_FORMAT, "_codecs.encode: a character past U+00FF in a latin1 string");
    }
    return push_str(v, PK_BYTES, out, k);
}

/* torch.device('cuda', 1) -> "cuda:1"; torch.device('cpu') -> "cpu". */
static nb_status make_device(vm *v, pk_value **a, size_t n)
{
    if (n < 1 || n > 2 || a[0]->kind != PK_STR || (n == 2 && a[1]->kind != PK_INT && a[1]->kind != PK_NONE))
        return vm_err(v, NB_ERR_FORMAT, "torch.device: expected (type[, index])");
    size_t len = a[0]->u.str.len + 24;
    char *s = vm_alloc(v, len);
    if (!s) return oom(v);
    int k = n == 2 && a[1]->kind == PK_INT
                ? snprintf(s, len, "%.*s:%lld", (int)a[0]->u.str.len, a[0]->u.str.s, (long long)a[1]->u.i)
                : snprintf(s, len, "%.*s", (int)a[0]->u.str.len, a[0]->u.str.s);
    return push_str(v, PK_STR, s, (size_t)k);
}

static nb_status reduce(vm *v)
{
    pk_value *args = NULL, *fn = NULL;
    NB_TRY(pop(v, &args));
    NB_TRY(pop(v, &fn));
    if (fn->kind != PK_GLOBAL) return vm_err(v, NB_ERR_FORMAT, "cannot call %s", nb__pickle_kind_name(fn->kind));
    if (args->kind != PK_TUPLE)
        return vm_err(v, NB_ERR_FORMAT, "the arguments must be a tuple, found %s", nb__pickle_kind_name(args->kind));
    pk_value **a = args->u.seq.items;
    size_t n = args->u.seq.n;
    int g = fn->u.global;
    switch (g) {
    case PK_G_ORDERED_DICT:
        if (n) return vm_err(v, NB_ERR_UNSUPPORTED, "collections.OrderedDict with arguments");
        return push(v, new_value(v, PK_DICT));
    case PK_G_REBUILD_V2:
    case PK_G_REBUILD_V3: return rebuild_tensor(v, g == PK_G_REBUILD_V3, a, n);
    case PK_G_REBUILD_PARAMETER:
    case PK_G_REBUILD_PARAMETER_STATE:
        if (n != (g == PK_G_REBUILD_PARAMETER ? 3u : 4u) || a[0]->kind != PK_TENSOR)
            return vm_err(v, NB_ERR_FORMAT, "%s: expected (tensor, requires_grad, hooks%s)",
                          nb__pk_fixed_name(g), g == PK_G_REBUILD_PARAMETER ? "" : ", state");
        return push(v, a[0]);
    case PK_G_SIZE:
        if (n != 1 || a[0]->kind != PK_TUPLE) return vm_err(v, NB_ERR_FORMAT, "torch.Size: expected a tuple");
        return push(v, a[0]);
    case PK_G_SET:
    case PK_G_FROZENSET: {
        pk_value *s = new_value(v, PK_SET);
        if (!s) return value_err(v);
        if (n > 1 || (n == 1 && a[0]->kind != PK_LIST && a[0]->kind != PK_TUPLE && a[0]->kind != PK_SET))
            return vm_err(v, NB_ERR_FORMAT, "%s: expected a list", nb__pk_fixed_name(g));
        for (size_t i = 0; n && i < a[0]->u.seq.n; i++) NB_TRY(seq_push(v, s, a[0]->u.seq.items[i]));
        return push(v, s);
    }
    case PK_G_DEVICE: return make_device(v, a, n);
    case PK_G_CODECS_ENCODE: return codecs_encode(v, a, n);
    default: {
        char buf[96];
        return vm_err(v, NB_ERR_UNSUPPORTED, "calling %s is not allowed", nb__pk_global_qualname(g, buf, sizeof buf));
    }
    }
}

/* BINPERSID: ('storage', storage class, key, location, numel). */
static nb_status persistent_load(vm *v)
{
    pk_value *pid = NULL;
    NB_TRY(pop(v, &pid));
    pk_value **a = pid->u.seq.items;
    if (pid->kind != PK_TUPLE || pid->u.seq.n != 5 || (a[0]->kind != PK_STR && a[0]->kind != PK_BYTES) ||
        !pk_eq(a[0]->u.str.s, a[0]->u.str.len, "storage"))
        return vm_err(v, NB_ERR_FORMAT, "a persistent id must be ('storage', class, key, location, numel)");
    if (a[1]->kind != PK_GLOBAL || (a[1]->u.global != PK_G_UNTYPED_STORAGE && a[1]->u.global < PK_G_STORAGE) ||
        a[1]->u.global >= PK_G_DTYPE)
        return vm_err(v, NB_ERR_FORMAT, "a persistent id's class must be a torch storage class, found %s",
                      a[1]->kind == PK_GLOBAL ? nb__pickle_global_name(a[1]) : nb__pickle_kind_name(a[1]->kind));
    if (a[2]->kind != PK_STR || a[2]->u.str.len == 0 || a[2]->u.str.len > 200 ||
        memchr(a[2]->u.str.s, '\0', a[2]->u.str.len))
        return vm_err(v, NB_ERR_FORMAT, "a storage key must be a short non-empty string");
    if (a[3]->kind != PK_STR) return vm_err(v, NB_ERR_FORMAT, "a storage location must be a string");
    if (a[4]->kind != PK_INT || a[4]->u.i < 0)
        return vm_err(v, NB_ERR_FORMAT, "a storage size must be a non-negative int");
    pk_storage *s = vm_alloc(v, sizeof *s);
    char *key = vm_alloc(v, a[2]->u.str.len + 1);
    pk_value *x = s && key ? new_value(v, PK_STORAGE) : NULL;
    if (!x) return value_err(v);
    memcpy(key, a[2]->u.str.s, a[2]->u.str.len);
    key[a[2]->u.str.len] = '\0';
    s->key = key;
    s->elem = a[1]->u.global == PK_G_UNTYPED_STORAGE ? NULL : &nb__torch_elems[a[1]->u.global - PK_G_STORAGE];
    nb__pk_global_qualname(a[1]->u.global, s->type_name, sizeof s->type_name);
    s->numel = a[4]->u.i;
    x->u.storage = s;
    return push(v, x);
}

/* ---- the loop ------------------------------------------------------------------------------ */

static nb_status collection(vm *v, pk_kind kind)
{
    pk_value **items = NULL;
    size_t n = 0;
    NB_TRY(pop_mark(v, &items, &n));
    if (kind == PK_DICT && n % 2) return vm_err(v, NB_ERR_FORMAT, "an odd number (%zu) of keys and values", n);
    pk_value *x = new_value(v, kind);
    if (!x) return value_err(v);
    for (size_t i = 0; i < n; i++) NB_TRY(seq_push(v, x, items[i]));
    return push(v, x);
}

/* APPENDS, ADDITEMS, SETITEMS: the items above the mark go into the container below it. */
static nb_status extend(vm *v, pk_kind kind)
{
    pk_value **items = NULL, *c = NULL;
    size_t n = 0;
    NB_TRY(pop_mark(v, &items, &n));
    NB_TRY(top(v, kind, &c));
    if (kind == PK_DICT && n % 2) return vm_err(v, NB_ERR_FORMAT, "an odd number (%zu) of keys and values", n);
    for (size_t i = 0; i < n; i++) NB_TRY(seq_push(v, c, items[i]));
    return NB_OK;
}

static nb_status small_tuple(vm *v, size_t k)
{
    if (v->sp - mark_base(v) < k) return vm_err(v, NB_ERR_FORMAT, "needs %zu items on the stack", k);
    pk_value *x = new_value(v, PK_TUPLE);
    if (!x) return value_err(v);
    for (size_t i = v->sp - k; i < v->sp; i++) NB_TRY(seq_push(v, x, v->stack[i]));
    v->sp -= k;
    return push(v, x);
}

static nb_status step(vm *v, bool *stop)
{
    const char *s = NULL, *s2 = NULL;
    size_t len = 0, len2 = 0;
    pk_value *x = NULL, *y = NULL, *c = NULL;
    switch (v->op) {
    case 0x80: NB_TRY(need(v, 1)); v->pos++; return NB_OK;
    case 0x95: NB_TRY(need(v, 8)); v->pos += 8; return NB_OK;
    case '.': *stop = true; return NB_OK;
    case '(':
        if (v->n_marks == v->marks_cap) {
            size_t cap = v->marks_cap ? v->marks_cap * 2 : 32;
            size_t *m = realloc(v->marks, cap * sizeof *m);
            if (!m) return oom(v);
            v->marks = m;
            v->marks_cap = cap;
        }
        v->marks[v->n_marks++] = v->sp;
        return NB_OK;
    case '0':
        if (v->sp > mark_base(v)) v->sp--;
        else if (v->n_marks) v->n_marks--;
        else return vm_err(v, NB_ERR_FORMAT, "the stack is empty");
        return NB_OK;
    case '1': {
        pk_value **items = NULL;
        return pop_mark(v, &items, &len);
    }
    case '2':
        if (v->sp <= mark_base(v)) return vm_err(v, NB_ERR_FORMAT, "the stack is empty");
        return push(v, v->stack[v->sp - 1]);
    case '}': return push(v, new_value(v, PK_DICT));
    case ']': return push(v, new_value(v, PK_LIST));
    case ')': return push(v, new_value(v, PK_TUPLE));
    case 0x8f: return push(v, new_value(v, PK_SET));
    case 't': return collection(v, PK_TUPLE);
    case 'l': return collection(v, PK_LIST);
    case 'd': return collection(v, PK_DICT);
    case 0x91: return collection(v, PK_SET);
    case 0x85: return small_tuple(v, 1);
    case 0x86: return small_tuple(v, 2);
    case 0x87: return small_tuple(v, 3);
    case 'a': NB_TRY(pop(v, &x)); NB_TRY(top(v, PK_LIST, &c)); return seq_push(v, c, x);
    case 'e': return extend(v, PK_LIST);
    case 0x90: return extend(v, PK_SET);
    case 's':
        NB_TRY(pop(v, &y));
        NB_TRY(pop(v, &x));
        NB_TRY(top(v, PK_DICT, &c));
        NB_TRY(seq_push(v, c, x));
        return seq_push(v, c, y);
    case 'u': return extend(v, PK_DICT);
    case 'c':
        NB_TRY(read_line(v, &s, &len));
        NB_TRY(read_line(v, &s2, &len2));
        return push_global(v, s, len, s2, len2);
    case 0x93:
        NB_TRY(pop(v, &y));
        NB_TRY(pop(v, &x));
        if (x->kind != PK_STR || y->kind != PK_STR) return vm_err(v, NB_ERR_FORMAT, "expects two strings");
        return push_global(v, x->u.str.s, x->u.str.len, y->u.str.s, y->u.str.len);
    case 'R': return reduce(v);
    case 'b':
        /* an OrderedDict's attributes (state_dict's _metadata: module versions) are not items */
        NB_TRY(pop(v, &y));
        NB_TRY(top(v, PK_DICT, &c));
        return NB_OK;
    case 'Q': return persistent_load(v);
    case 'q': NB_TRY(need(v, 1)); v->pos++; return memo_put(v, v->p[v->pos - 1]);
    case 'r': NB_TRY(need(v, 4)); v->pos += 4; return memo_put(v, le(v->p + v->pos - 4, 4));
    case 0x94: return memo_put(v, v->memo_len);
    case 'h': NB_TRY(need(v, 1)); v->pos++; return memo_get(v, v->p[v->pos - 1]);
    case 'j': NB_TRY(need(v, 4)); v->pos += 4; return memo_get(v, le(v->p + v->pos - 4, 4));
    case 'J': NB_TRY(need(v, 4)); v->pos += 4; return push_int(v, (int32_t)(uint32_t)le(v->p + v->pos - 4, 4));
    case 'K': NB_TRY(need(v, 1)); v->pos++; return push_int(v, v->p[v->pos - 1]);
    case 'M': NB_TRY(need(v, 2)); v->pos += 2; return push_int(v, (int64_t)le(v->p + v->pos - 2, 2));
    case 0x8a: {
        NB_TRY(need(v, 1));
        int k = v->p[v->pos++];
        NB_TRY(need(v, (size_t)k));
        if (k > 8) {
            v->pos += (size_t)k;
            return push_bigint(v, v->p + v->pos - k, (size_t)k);
        }
        uint64_t u = k ? le(v->p + v->pos, k) : 0;
        if (k && k < 8 && (v->p[v->pos + k - 1] & 0x80)) u |= ~(uint64_t)0 << (8 * k); /* sign */
        v->pos += (size_t)k;
        return push_int(v, (int64_t)u);
    }
    case 'G': {
        NB_TRY(need(v, 8));
        uint64_t u = 0;
        for (int i = 0; i < 8; i++) u = u << 8 | v->p[v->pos + i]; /* big-endian */
        v->pos += 8;
        x = new_value(v, PK_FLOAT);
        if (x) memcpy(&x->u.f, &u, 8);
        return push(v, x);
    }
    case 'N': return push(v, &v_none);
    case 0x88: return push(v, &v_true);
    case 0x89: return push(v, &v_false);
    case 'X': NB_TRY(read_counted(v, 4, &s, &len)); return push_str(v, PK_STR, s, len);
    case 0x8c: NB_TRY(read_counted(v, 1, &s, &len)); return push_str(v, PK_STR, s, len);
    case 0x8d: NB_TRY(read_counted(v, 8, &s, &len)); return push_str(v, PK_STR, s, len);
    case 'U': NB_TRY(read_counted(v, 1, &s, &len)); return push_str(v, PK_STR, s, len);
    case 'T':
        NB_TRY(need(v, 4));
        if (v->p[v->pos + 3] & 0x80) return vm_err(v, NB_ERR_FORMAT, "a negative length");
        NB_TRY(read_counted(v, 4, &s, &len));
        return push_str(v, PK_STR, s, len);
    case 'C': NB_TRY(read_counted(v, 1, &s, &len)); return push_str(v, PK_BYTES, s, len);
    case 'B': NB_TRY(read_counted(v, 4, &s, &len)); return push_str(v, PK_BYTES, s, len);
    case 0x8e: NB_TRY(read_counted(v, 8, &s, &len)); return push_str(v, PK_BYTES, s, len);
    default: return vm_err(v, NB_ERR_FORMAT, "unknown or unsupported opcode");
    }
}

nb_status nb__pickle_load(const unsigned char *data, size_t n, pk_doc **doc, const pk_value **root)
{
    *doc = NULL;
    *root = NULL;
    vm v = {.p = data, .n = n};
    v.doc = calloc(1, sizeof *v.doc);
    if (!v.doc) return nb__err(NB_ERR_OOM, "data.pkl: out of memory");
    /* a fixed multiple of the pickle's size: far more than any file torch writes needs */
    v.doc->limit = n > ((size_t)1 << 30) / 64 ? (size_t)1 << 30 : 64 * n + ((size_t)1 << 20);
    nb_status st = NB_OK;
    bool stop = false;
    while (st == NB_OK && !stop) {
        if (v.pos >= v.n) {
            v.op_at = v.pos;
            st = nb__err(NB_ERR_FORMAT, "data.pkl: no STOP opcode before its end (%zu bytes: cut short?)", n);
            break;
        }
        v.op_at = v.pos;
        v.op = v.p[v.pos++];
        st = step(&v, &stop);
    }
    if (st == NB_OK && v.sp != 1 + mark_base(&v))
        st = vm_err(&v, NB_ERR_FORMAT, "%zu values on the stack at the end, expected one", v.sp);
    if (st == NB_OK) *root = v.stack[v.sp - 1];
    free(v.stack);
    free(v.marks);
    free(v.memo);
    if (st != NB_OK) {
        nb__pickle_free(v.doc);
        *root = NULL;
        return st;
    }
    *doc = v.doc;
    return NB_OK;
}
