/* Word-level text corpora (Penn Treebank) and language-model batches over them.
 *
 * The reader is the twin of PyTorch's word_language_model example (data.py: Dictionary, Corpus):
 * for each line of the text file, line.split() + ['<eos>'], ids in the order words first appear.
 * The vocabulary is an open-addressing hash table (FNV-1a, linear probing, at most half full) of
 * ids, each word NUL-terminated in the readers' arena (src/io/arena_impl.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/error_impl.h"
#include "core/tensor_impl.h"
#include "io/arena_impl.h"
#include "nabla/data.h"
#include "nabla/ops.h"

struct nb_vocab {
    nb_io_arena words; /* the words' bytes */
    char **word;       /* word id -> its NUL-terminated bytes in `words` */
    int64_t n, cap_ids;
    int64_t *slots; /* hash table: id, or -1 for an empty slot */
    int64_t nslots; /* a power of 2, at least 2 n */
};

static uint64_t hash_bytes(const char *w, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)w[i]) * 1099511628211ull;
    return h;
}

nb_vocab *nb_vocab_create(void)
{
    nb_vocab *v = calloc(1, sizeof *v);
    if (v) {
        v->nslots = 1024;
        v->slots = malloc((size_t)v->nslots * sizeof *v->slots);
    }
    if (!v || !v->slots) {
        free(v);
        return nb__err_null(NB_ERR_OOM, "vocab_create: out of host memory");
    }
    memset(v->slots, 0xff, (size_t)v->nslots * sizeof *v->slots); /* every slot -1 */
    return v;
}

void nb_vocab_free(nb_vocab *v)
{
    if (!v) return;
    nb__io_arena_free(&v->words);
    free(v->word);
    free(v->slots);
    free(v);
}

int64_t nb_vocab_size(const nb_vocab *v) { return v ? v->n : 0; }

const char *nb_vocab_word(const nb_vocab *v, int64_t id)
{
    return v && id >= 0 && id < v->n ? v->word[id] : NULL;
}

/* The slot holding the word w[0, len), or the empty slot where it would go. */
static int64_t find_slot(const nb_vocab *v, const char *w, size_t len)
{
    int64_t mask = v->nslots - 1, s = (int64_t)(hash_bytes(w, len) & (uint64_t)mask);
    for (;; s = (s + 1) & mask) {
        int64_t id = v->slots[s];
        if (id < 0) return s;
        const char *x = v->word[id];
        if (strncmp(x, w, len) == 0 && x[len] == '\0') return s;
    }
}

/* The id of w[0, len), or -1 when it is not in v. */
static int64_t lookup(const nb_vocab *v, const char *w, size_t len) { return v->slots[find_slot(v, w, len)]; }

static bool rehash(nb_vocab *v)
{
    int64_t ns = v->nslots * 2;
    int64_t *slots = malloc((size_t)ns * sizeof *slots);
    if (!slots) return false;
    memset(slots, 0xff, (size_t)ns * sizeof *slots);
    for (int64_t id = 0; id < v->n; id++) {
        const char *w = v->word[id];
        int64_t s = (int64_t)(hash_bytes(w, strlen(w)) & (uint64_t)(ns - 1));
        while (slots[s] >= 0) s = (s + 1) & (ns - 1);
        slots[s] = id;
    }
    free(v->slots);
    v->slots = slots;
    v->nslots = ns;
    return true;
}

/* The id of w[0, len) (no NUL inside), added when new; -1 with NB_ERR_OOM set. */
static int64_t vocab_add_n(nb_vocab *v, const char *w, size_t len, const char *op)
{
    int64_t s = find_slot(v, w, len);
    if (v->slots[s] >= 0) return v->slots[s];
    if (2 * (v->n + 1) > v->nslots) { /* kept at most half full: grown first, so a failure adds nothing */
        if (!rehash(v)) return nb__err(NB_ERR_OOM, "%s: out of host memory for the vocabulary's table", op), -1;
        s = find_slot(v, w, len);
    }
    if (v->n == v->cap_ids) {
        int64_t cap = v->cap_ids ? 2 * v->cap_ids : 1024;
        char **ws = realloc(v->word, (size_t)cap * sizeof *ws);
        if (!ws) return nb__err(NB_ERR_OOM, "%s: out of host memory for %lld words", op, (long long)cap), -1;
        v->word = ws;
        v->cap_ids = cap;
    }
    char *x = nb__io_arena_alloc(&v->words, len + 1);
    if (!x) return nb__err(NB_ERR_OOM, "%s: out of host memory for a word of %zu bytes", op, len), -1;
    memcpy(x, w, len);
    x[len] = '\0';
    v->word[v->n] = x;
    v->slots[s] = v->n;
    return v->n++;
}

int64_t nb_vocab_add(nb_vocab *v, const char *word)
{
    if (!v || !word) return nb__err(NB_ERR_INVALID_ARG, "vocab_add: NULL argument"), -1;
    if (!word[0]) return nb__err(NB_ERR_INVALID_ARG, "vocab_add: an empty word"), -1;
    return vocab_add_n(v, word, strlen(word), "vocab_add");
}

int64_t nb_vocab_id(const nb_vocab *v, const char *word)
{
    return v && word && word[0] ? lookup(v, word, strlen(word)) : -1;
}

/* ---- the reader ---------------------------------------------------------------------------- */

/* The length of the white space (as Python's str.isspace) starting at p, 0 if none; a line's end
 * (\n, \r) is not counted here. */
static size_t space_at(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    if (c == ' ' || c == '\t' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1f)) return 1;
    if (c < 0xc2 || end - p < 2) return 0;
    if (c == 0xc2) return p[1] == 0x85 || p[1] == 0xa0 ? 2 : 0; /* U+0085, U+00A0 */
    if (end - p < 3) return 0;
    if (c == 0xe1) return p[1] == 0x9a && p[2] == 0x80 ? 3 : 0; /* U+1680 */
    if (c == 0xe3) return p[1] == 0x80 && p[2] == 0x80 ? 3 : 0; /* U+3000 */
    if (c != 0xe2) return 0;
    if (p[1] == 0x80) /* U+2000-U+200A, U+2028, U+2029, U+202F */
        return p[2] <= 0x8a && p[2] >= 0x80 ? 3 : p[2] == 0xa8 || p[2] == 0xa9 || p[2] == 0xaf ? 3 : 0;
    return p[1] == 0x81 && p[2] == 0x9f ? 3 : 0; /* U+205F */
}

/* The whole file into *buf (*len bytes); NB_OK or the error. */
static nb_status slurp(const char *path, unsigned char **buf, size_t *len)
{
    *buf = NULL, *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return nb__err(NB_ERR_IO, "read_words: cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 20, n = 0;
    unsigned char *b = malloc(cap);
    for (;;) {
        if (!b) {
            fclose(f);
            return nb__err(NB_ERR_OOM, "read_words: %s: cannot allocate %zu bytes", path, cap);
        }
        n += fread(b + n, 1, cap - n, f);
        if (n < cap) break;
        unsigned char *nb = cap <= SIZE_MAX / 2 ? realloc(b, cap * 2) : NULL;
        if (!nb) free(b);
        b = nb, cap *= 2;
    }
    bool bad = ferror(f);
    int err = errno;
    fclose(f);
    if (bad) {
        free(b);
        return nb__err(NB_ERR_IO, "read_words: %s: read failed after %zu bytes: %s", path, n, strerror(err));
    }
    *buf = b, *len = n;
    return NB_OK;
}

/* The id of the word w[0, wl) on line `line`: added to v when grow, else looked up. -1 with the
 * error set when memory is short or (without grow) the word is not in v. */
static int64_t word_id(nb_vocab *v, bool grow, const char *w, size_t wl, const char *path, int64_t line)
{
    if (grow) return vocab_add_n(v, w, wl, "read_words");
    int64_t id = lookup(v, w, wl);
    if (id < 0)
        nb__err(NB_ERR_FORMAT, "read_words: %s: line %lld: the word '%.*s%s' is not in the vocabulary (%lld words)", path,
                (long long)line, wl > 40 ? 40 : (int)wl, w, wl > 40 ? "..." : "", (long long)v->n);
    return id;
}

/* One pass over the text: with ids NULL, counts the tokens into *count; else writes their ids
 * (adding words to v when grow). */
static nb_status scan(const unsigned char *t, size_t len, const char *path, nb_vocab *v, bool grow, int64_t *ids,
                      int64_t *count)
{
    const unsigned char *p = t, *end = t + len;
    int64_t n = 0, line = 1, eos = -1;
    while (p < end) {
        /* one line: its words, then <eos> */
        while (p < end && *p != '\n' && *p != '\r') {
            size_t sp = space_at(p, end);
            if (sp) {
                p += sp;
                continue;
            }
            const unsigned char *w = p;
            for (; p < end && *p != '\n' && *p != '\r' && !space_at(p, end); p++)
                if (*p == '\0')
                    return nb__err(NB_ERR_FORMAT, "read_words: %s: line %lld has a NUL byte (not a text file)", path,
                                   (long long)line);
            if (ids && (ids[n] = word_id(v, grow, (const char *)w, (size_t)(p - w), path, line)) < 0)
                return nb_last_status();
            n++;
        }
        if (ids) {
            if (eos < 0 && (eos = word_id(v, grow, "<eos>", 5, path, line)) < 0) return nb_last_status();
            ids[n] = eos;
        }
        n++;
        if (p < end && *p == '\r' && p + 1 < end && p[1] == '\n') p++;
        if (p < end) p++; /* past the line's end */
        line++;
    }
    *count = n;
    return NB_OK;
}

nb_tensor *nb_read_words(const char *path, nb_vocab *v, bool grow)
{
    if (!path || !v) return nb__err_null(NB_ERR_INVALID_ARG, "read_words: NULL argument");
    unsigned char *buf;
    size_t len;
    if (slurp(path, &buf, &len) != NB_OK) return NULL;
    int64_t n = 0;
    nb_status st = scan(buf, len, path, v, grow, NULL, &n);
    nb_tensor *t = st == NB_OK ? nb__tensor_new_named("read_words", &n, 1, NB_INT64, nb_cpu()) : NULL;
    if (t && scan(buf, len, path, v, grow, (int64_t *)nb__data(t), &n) != NB_OK) {
        nb__release(t);
        t = NULL;
    }
    free(buf);
    return t ? nb__track(t) : NULL;
}

/* ---- language-model batches ---------------------------------------------------------------- */

struct nb_lm_batches {
    nb_tensor *rows; /* [batch, L] on the device, owned */
    int64_t bptt, len, next;
};

nb_lm_batches *nb_lm_batches_create(const nb_tensor *tokens, int64_t batch, int64_t bptt, nb_device device)
{
    if (!tokens) return nb__err_null(NB_ERR_INVALID_ARG, "lm_batches: NULL tokens");
    if (nb_tensor_ndim(tokens) != 1)
        return nb__err_null(NB_ERR_SHAPE, "lm_batches: tokens must be 1-D (got %d dims)", nb_tensor_ndim(tokens));
    if (nb_tensor_dtype(tokens) != NB_INT64)
        return nb__err_null(NB_ERR_DTYPE, "lm_batches: tokens must be int64 (got %s)", nb_dtype_name(nb_tensor_dtype(tokens)));
    int64_t n = nb_tensor_size(tokens, 0);
    if (batch < 1 || bptt < 1)
        return nb__err_null(NB_ERR_INVALID_ARG, "lm_batches: batch %lld and bptt %lld must be at least 1", (long long)batch,
                            (long long)bptt);
    int64_t L = n / batch;
    if (L - 1 < bptt)
        return nb__err_null(NB_ERR_INVALID_ARG,
                            "lm_batches: %lld tokens in %lld rows of %lld give no batch of %lld steps and their next tokens",
                            (long long)n, (long long)batch, (long long)L, (long long)bptt);
    nb_lm_batches *b = calloc(1, sizeof *b);
    if (!b) return nb__err_null(NB_ERR_OOM, "lm_batches: out of host memory");
    /* a copy of the caller's data, in a scope of its own for the temporaries */
    nb_scope *sc = nb_scope_begin();
    int64_t shape[2] = {batch, L};
    nb_tensor *rows = nb_to(nb__clone_contiguous(nb_reshape(nb_narrow(tokens, 0, 0, batch * L), shape, 2)), device);
    b->rows = rows ? nb_tensor_retain(rows) : NULL;
    nb_scope_end(sc);
    if (!b->rows) {
        free(b);
        return NULL;
    }
    b->bptt = bptt;
    b->len = (L - 1) / bptt;
    return b;
}

void nb_lm_batches_free(nb_lm_batches *b)
{
    if (!b) return;
    nb_tensor_free(b->rows);
    free(b);
}

int64_t nb_lm_batches_len(const nb_lm_batches *b) { return b ? b->len : 0; }

nb_status nb_lm_batches_next(nb_lm_batches *b, nb_tensor **x, nb_tensor **y, bool *done)
{
    if (x) *x = NULL;
    if (y) *y = NULL;
    if (done) *done = false;
    if (!b || !x || !y || !done) return nb__err(NB_ERR_INVALID_ARG, "lm_batches_next: NULL argument");
    if (b->next == b->len) {
        b->next = 0;
        *done = true;
        return NB_OK;
    }
    int64_t at = b->next * b->bptt;
    nb_scope *sc = nb_scope_begin(); /* copies, not views: the caller may write into them */
    nb_tensor *xs = nb__clone_contiguous(nb_narrow(b->rows, 1, at, b->bptt));
    nb_tensor *ys = xs ? nb__clone_contiguous(nb_narrow(b->rows, 1, at + 1, b->bptt)) : NULL;
    if (ys) nb_tensor_retain(xs), nb_tensor_retain(ys);
    nb_scope_end(sc);
    if (!ys) return nb_last_status();
    b->next++;
    *x = nb__track(xs), *y = nb__track(ys);
    return NB_OK;
}
