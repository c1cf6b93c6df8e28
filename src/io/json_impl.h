/* Internal: what the files of src/io share.
 *
 *  - A small strict JSON parser (RFC 8259) for safetensors headers: a document tree in one arena,
 *    built by recursive descent bounded by NB_JSON_MAX_DEPTH nesting levels and
 *    NB_JSON_MAX_VALUES values, so that no input can exhaust the stack or blow memory up past a
 *    fixed multiple of its size. Strings must be valid UTF-8 (escapes included: lone surrogates
 *    are errors); duplicate object keys are kept (the caller decides). Numbers keep their text;
 *    integers that fit in int64 are also decoded.
 *  - A growable byte buffer with the JSON string escaping the safetensors writer needs.
 *  - The tensor map's internal accessors (borrowed references, metadata iteration).
 * Nothing here sets the thread's error: callers add the context (file, tensor) and report it.
 */
#ifndef NB_IO_JSON_IMPL_H
#define NB_IO_JSON_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nabla/io.h"

#define NB_JSON_MAX_DEPTH 64
#define NB_JSON_MAX_VALUES (4u << 20)

typedef enum nb_json_type {
    NB_JSON_NULL,
    NB_JSON_FALSE,
    NB_JSON_TRUE,
    NB_JSON_INT,    /* an integer literal (no fraction, no exponent) that fits in int64 */
    NB_JSON_NUMBER, /* any other number: only its text is kept */
    NB_JSON_STRING,
    NB_JSON_ARRAY,
    NB_JSON_OBJECT
} nb_json_type;

typedef struct nb_json nb_json;
struct nb_json {
    nb_json_type type;
    size_t pos;      /* byte offset of the value in the input (for messages) */
    const char *key; /* the member name when the value is inside an object (decoded, NUL-ended) */
    size_t key_len;  /* != strlen(key) when the name holds an escaped NUL */
    const char *str; /* STRING: decoded, NUL-ended; NUMBER/INT: the literal (not NUL-ended) */
    size_t str_len;
    int64_t i;       /* INT */
    size_t n;        /* ARRAY/OBJECT: number of elements / members */
    nb_json *child;  /* ARRAY/OBJECT: the first element / member */
    nb_json *next;   /* the next sibling */
};

typedef struct nb_json_doc nb_json_doc;

typedef struct nb_json_error {
    bool oom;      /* out of memory rather than bad input */
    size_t pos;    /* byte offset of the problem */
    char msg[160]; /* what is wrong, e.g. "expected ',' or '}' after an object member" */
} nb_json_error;

/* Parses text[0, len) (no NUL needed): one value, optionally surrounded by whitespace, nothing
 * else. NULL on failure with *err filled. */
nb_json_doc *nb__json_parse(const char *text, size_t len, nb_json_error *err);
void nb__json_free(nb_json_doc *doc);
const nb_json *nb__json_root(const nb_json_doc *doc);
/* The first member of obj named key (NULL when absent); *count, if given, says how many have it. */
const nb_json *nb__json_get(const nb_json *obj, const char *key, int *count);
/* "a string", "an integer", "an array"... for messages. */
const char *nb__json_type_name(nb_json_type t);
/* True when s[0, n) is well-formed UTF-8 (no overlong forms, surrogates or code points past
 * U+10FFFF). */
bool nb__utf8_valid(const char *s, size_t n);

/* ---- writing ------------------------------------------------------------------------------ */

typedef struct nb_json_buf {
    char *data; /* NUL-ended while not failed */
    size_t len, cap;
    bool oom; /* an append failed: the contents are incomplete */
} nb_json_buf;

void nb__json_buf_append(nb_json_buf *b, const char *s, size_t n);
void nb__json_buf_printf(nb_json_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a quoted JSON string, escaped as serde_json does (", \, and control characters;
 * other bytes as they are). */
void nb__json_buf_string(nb_json_buf *b, const char *s);
void nb__json_buf_free(nb_json_buf *b);

/* ---- tensor map internals (src/io/tensor_map.c) ------------------------------------------- */

/* The i-th tensor in insertion order, borrowed (owned by the map). */
nb_tensor *nb__tensor_map_at(const nb_tensor_map *m, int i);
int nb__tensor_map_metadata_count(const nb_tensor_map *m);
/* Adds a pair whose key the caller knows to be new (no search: loading n pairs is O(n)). */
nb_status nb__tensor_map_metadata_append(nb_tensor_map *m, const char *key, const char *value);
/* The i-th metadata pair in insertion order; borrowed. */
void nb__tensor_map_metadata_at(const nb_tensor_map *m, int i, const char **key, const char **value);
/* Checks a tensor name for nb_tensor_map_set and the safetensors writer: non-empty, valid UTF-8,
 * not "__metadata__". Returns a reason or NULL when fine. */
const char *nb__tensor_name_problem(const char *name);

#endif
