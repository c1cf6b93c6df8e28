/* A small strict JSON parser for safetensors headers, and the escaping its writer needs. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/arena_impl.h"
#include "io/json_impl.h"

/* ---- the document: every node and string lives in its arena ------------------------------ */

struct nb_json_doc {
    nb_io_arena arena;
    nb_json *root;
};

static void *arena_alloc(nb_json_doc *d, size_t n) { return nb__io_arena_alloc(&d->arena, n); }

void nb__json_free(nb_json_doc *doc)
{
    if (!doc) return;
    nb__io_arena_free(&doc->arena);
    free(doc);
}

const nb_json *nb__json_root(const nb_json_doc *doc) { return doc ? doc->root : NULL; }

/* ---- UTF-8 ------------------------------------------------------------------------------- */

/* The length of the well-formed UTF-8 sequence at s (at most n bytes available), 0 if none. */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    uint32_t cp, min;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3, cp = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, cp = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len) return 0;
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

bool nb__utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq_len(u + i, n - i);
        if (!k) return false;
        i += k;
    }
    return true;
}

static size_t utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- the parser --------------------------------------------------------------------------- */

typedef struct parser {
    const char *s;
    size_t len, pos;
    size_t values;
    nb_json_doc *doc;
    nb_json_error *err;
} parser;

static void *fail(parser *p, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void *fail(parser *p, size_t pos, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err->msg, sizeof p->err->msg, fmt, ap);
    va_end(ap);
    p->err->pos = pos;
    return NULL;
}

static void *fail_oom(parser *p)
{
    p->err->oom = true;
    return fail(p, p->pos, "out of memory");
}

static int peek(const parser *p) { return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1; }

static void skip_ws(parser *p)
{
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

/* "'x'" for a printable character, "byte 0xNN" otherwise, "the end" past the input. */
static const char *describe(int c, char *buf, size_t size)
{
    if (c < 0) snprintf(buf, size, "the end of the input");
    else if (c >= 0x20 && c < 0x7F) snprintf(buf, size, "'%c'", c);
    else snprintf(buf, size, "byte 0x%02x", (unsigned)c);
    return buf;
}

static nb_json *new_value(parser *p, nb_json_type type)
{
    if (++p->values > NB_JSON_MAX_VALUES)
        return fail(p, p->pos, "more than %u values", (unsigned)NB_JSON_MAX_VALUES);
    nb_json *v = arena_alloc(p->doc, sizeof *v);
    if (!v) return fail_oom(p);
    memset(v, 0, sizeof *v);
    v->type = type;
    v->pos = p->pos;
    return v;
}

static int hex4(const char *s)
{
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Decodes the \uXXXX escape at s[*i] (pointing at the 'u'), with a following low surrogate
 * when it is a high one. Returns the code point or -1 (error set). */
static long decode_u(parser *p, size_t *i, size_t end)
{
    size_t at = *i - 1;
    int hi = *i + 4 < end ? hex4(p->s + *i + 1) : -1;
    if (hi < 0) return fail(p, at, "bad \\u escape (expected 4 hex digits)"), -1;
    *i += 5;
    if (hi >= 0xDC00 && hi <= 0xDFFF) return fail(p, at, "lone low surrogate \\u%04x", hi), -1;
    if (hi < 0xD800 || hi > 0xDBFF) return hi;
    int lo = *i + 5 < end && p->s[*i] == '\\' && p->s[*i + 1] == 'u' ? hex4(p->s + *i + 2) : -1;
    if (lo < 0xDC00 || lo > 0xDFFF)
        return fail(p, at, "high surrogate \\u%04x not followed by a low surrogate", hi), -1;
    *i += 6;
    return 0x10000 + (((long)hi - 0xD800) << 10) + (lo - 0xDC00);
}

/* Decodes s[start, end) (the inside of a string) into out; returns the decoded length or
 * (size_t)-1 on error. */
static size_t decode_string(parser *p, size_t start, size_t end, char *out)
{
    size_t n = 0;
    for (size_t i = start; i < end;) {
        unsigned char c = (unsigned char)p->s[i];
        if (c < 0x20)
            return fail(p, i, "control character 0x%02x in a string (must be escaped)", c), (size_t)-1;
        if (c >= 0x80) {
            size_t k = utf8_seq_len((const unsigned char *)p->s + i, end - i);
            if (!k) return fail(p, i, "invalid UTF-8 in a string"), (size_t)-1;
            memcpy(out + n, p->s + i, k);
            n += k, i += k;
            continue;
        }
        if (c != '\\') {
            out[n++] = (char)c, i++;
            continue;
        }
        static const char names[] = "\"\\/bfnrt", values[] = "\"\\/\b\f\n\r\t";
        char e = p->s[i + 1];
        const char *simple = e ? strchr(names, e) : NULL;
        if (simple) {
            out[n++] = values[simple - names];
            i += 2;
            continue;
        }
        if (e != 'u') {
            char d[24];
            describe((unsigned char)e, d, sizeof d);
            return fail(p, i, "bad escape '\\' followed by %s", d), (size_t)-1;
        }
        i++;
        long cp = decode_u(p, &i, end);
        if (cp < 0) return (size_t)-1;
        n += utf8_encode((uint32_t)cp, out + n);
    }
    return n;
}

/* Parses the string at p->pos (a '"'); its decoded text goes into the arena. */
static bool parse_string(parser *p, const char **out, size_t *out_len)
{
    size_t start = p->pos + 1, end = start;
    while (end < p->len && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->len) return fail(p, p->pos, "unterminated string"), false;
    /* Escapes only shrink: the raw length bounds the decoded one. */
    char *buf = arena_alloc(p->doc, end - start + 1);
    if (!buf) return fail_oom(p), false;
    size_t n = decode_string(p, start, end, buf);
    if (n == (size_t)-1) return false;
    buf[n] = '\0';
    *out = buf;
    *out_len = n;
    p->pos = end + 1;
    return true;
}

static bool is_digit(const parser *p, size_t i) { return i < p->len && p->s[i] >= '0' && p->s[i] <= '9'; }

static nb_json *parse_number(parser *p)
{
    size_t start = p->pos, i = start;
    bool neg = p->s[i] == '-', is_int = true;
    if (neg) i++;
    if (!is_digit(p, i)) return fail(p, i, "expected a digit in a number");
    if (p->s[i] == '0' && is_digit(p, i + 1)) return fail(p, i, "leading zero in a number");
    size_t digits = i;
    while (is_digit(p, i)) i++;
    size_t digits_end = i;
    if (i < p->len && p->s[i] == '.') {
        is_int = false;
        if (!is_digit(p, ++i)) return fail(p, i, "expected a digit after '.' in a number");
        while (is_digit(p, i)) i++;
    }
    if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
        is_int = false;
        i++;
        if (i < p->len && (p->s[i] == '+' || p->s[i] == '-')) i++;
        if (!is_digit(p, i)) return fail(p, i, "expected a digit in a number's exponent");
        while (is_digit(p, i)) i++;
    }
    nb_json *v = new_value(p, NB_JSON_NUMBER);
    if (!v) return NULL;
    v->str = p->s + start;
    v->str_len = i - start;
    p->pos = i;
    uint64_t mag = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (size_t k = digits; is_int && k < digits_end; k++) {
        unsigned d = (unsigned)(p->s[k] - '0');
        if (mag > (limit - d) / 10) is_int = false;
        else mag = mag * 10 + d;
    }
    if (is_int) {
        v->type = NB_JSON_INT;
        v->i = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    }
    return v;
}

static nb_json *parse_literal(parser *p, const char *word, nb_json_type type)
{
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return fail(p, p->pos, "unexpected text, expected a value");
    nb_json *v = new_value(p, type);
    if (v) p->pos += n;
    return v;
}

static nb_json *parse_value(parser *p, int depth);

/* An array or an object (at p->pos, the opening bracket). */
static nb_json *parse_container(parser *p, int depth, bool object)
{
    if (depth >= NB_JSON_MAX_DEPTH)
        return fail(p, p->pos, "nesting deeper than %d levels", NB_JSON_MAX_DEPTH);
    nb_json *c = new_value(p, object ? NB_JSON_OBJECT : NB_JSON_ARRAY);
    if (!c) return NULL;
    char close = object ? '}' : ']', d[24];
    nb_json **tail = &c->child;
    p->pos++;
    skip_ws(p);
    if (peek(p) == close) {
        p->pos++;
        return c;
    }
    for (;;) {
        const char *key = NULL;
        size_t key_len = 0;
        if (object) {
            skip_ws(p);
            if (peek(p) != '"')
                return fail(p, p->pos, "expected a string key, found %s", describe(peek(p), d, sizeof d));
            if (!parse_string(p, &key, &key_len)) return NULL;
            skip_ws(p);
            if (peek(p) != ':')
                return fail(p, p->pos, "expected ':' after an object key, found %s",
                            describe(peek(p), d, sizeof d));
            p->pos++;
        }
        nb_json *v = parse_value(p, depth + 1);
        if (!v) return NULL;
        v->key = key;
        v->key_len = key_len;
        *tail = v;
        tail = &v->next;
        c->n++;
        skip_ws(p);
        int ch = peek(p);
        p->pos++;
        if (ch == ',') continue;
        if (ch == close) return c;
        return fail(p, p->pos - 1, "expected ',' or '%c' in %s, found %s", close,
                    object ? "an object" : "an array", describe(ch, d, sizeof d));
    }
}

static nb_json *parse_value(parser *p, int depth)
{
    skip_ws(p);
    int c = peek(p);
    char d[24];
    switch (c) {
    case '{': return parse_container(p, depth, true);
    case '[': return parse_container(p, depth, false);
    case 't': return parse_literal(p, "true", NB_JSON_TRUE);
    case 'f': return parse_literal(p, "false", NB_JSON_FALSE);
    case 'n': return parse_literal(p, "null", NB_JSON_NULL);
    case '"': {
        nb_json *v = new_value(p, NB_JSON_STRING);
        if (!v || !parse_string(p, &v->str, &v->str_len)) return NULL;
        return v;
    }
    default:
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p);
        return fail(p, p->pos, "expected a value, found %s", describe(c, d, sizeof d));
    }
}

nb_json_doc *nb__json_parse(const char *text, size_t len, nb_json_error *err)
{
    nb_json_error local;
    if (!err) err = &local;
    memset(err, 0, sizeof *err);
    nb_json_doc *doc = calloc(1, sizeof *doc);
    parser p = {.s = text, .len = len, .doc = doc, .err = err};
    if (!doc) return fail_oom(&p);
    if (!text && len) {
        nb__json_free(doc);
        return fail(&p, 0, "NULL text");
    }
    nb_json *root = parse_value(&p, 0);
    if (root) {
        skip_ws(&p);
        if (p.pos != len) root = fail(&p, p.pos, "trailing characters after the JSON value");
    }
    if (!root) {
        nb__json_free(doc);
        return NULL;
    }
    doc->root = root;
    return doc;
}

const nb_json *nb__json_get(const nb_json *obj, const char *key, int *count)
{
    const nb_json *first = NULL;
    int n = 0;
    size_t klen = strlen(key);
    if (obj && obj->type == NB_JSON_OBJECT) {
        for (const nb_json *v = obj->child; v; v = v->next) {
            if (v->key_len != klen || memcmp(v->key, key, klen) != 0) continue;
            if (!first) first = v;
            n++;
        }
    }
    if (count) *count = n;
    return first;
}

const char *nb__json_type_name(nb_json_type t)
{
    switch (t) {
    case NB_JSON_NULL: return "null";
    case NB_JSON_FALSE:
    case NB_JSON_TRUE: return "a boolean";
    case NB_JSON_INT: return "an integer";
    case NB_JSON_NUMBER: return "a number";
    case NB_JSON_STRING: return "a string";
    case NB_JSON_ARRAY: return "an array";
    case NB_JSON_OBJECT: return "an object";
    }
    return "?";
}

/* ---- writing ------------------------------------------------------------------------------ */

static bool buf_reserve(nb_json_buf *b, size_t extra)
{
    if (b->oom) return false;
    if (b->cap - b->len > extra) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len <= extra) {
        if (cap > SIZE_MAX / 2) return b->oom = true, false;
        cap *= 2;
    }
    char *d = realloc(b->data, cap);
    if (!d) return b->oom = true, false;
    b->data = d;
    b->cap = cap;
    return true;
}

void nb__json_buf_append(nb_json_buf *b, const char *s, size_t n)
{
    if (!buf_reserve(b, n)) return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void nb__json_buf_printf(nb_json_buf *b, const char *fmt, ...)
{
    char small[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return;
    }
    if ((size_t)n < sizeof small) {
        nb__json_buf_append(b, small, (size_t)n);
        return;
    }
    if (!buf_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void nb__json_buf_string(nb_json_buf *b, const char *s)
{
    nb__json_buf_append(b, "\"", 1);
    for (const char *run = s;; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        nb__json_buf_append(b, run, (size_t)(s - run));
        run = s + 1;
        if (!c) break;
        switch (c) {
        case '"': nb__json_buf_append(b, "\\\"", 2); break;
        case '\\': nb__json_buf_append(b, "\\\\", 2); break;
        case '\b': nb__json_buf_append(b, "\\b", 2); break;
        case '\f': nb__json_buf_append(b, "\\f", 2); break;
        case '\n': nb__json_buf_append(b, "\\n", 2); break;
        case '\r': nb__json_buf_append(b, "\\r", 2); break;
        case '\t': nb__json_buf_append(b, "\\t", 2); break;
        default: nb__json_buf_printf(b, "\\u%04x", c); break;
        }
    }
    nb__json_buf_append(b, "\"", 1);
}

void nb__json_buf_free(nb_json_buf *b)
{
    if (!b) return;
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = false;
}
