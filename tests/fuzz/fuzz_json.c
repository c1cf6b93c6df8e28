/* libFuzzer target: the JSON parser under safetensors headers (src/io/json.c).
 *
 * Properties: a failure fills the error with a position inside the input and a message; a parsed
 * document is a tree whose counts match its children, whose strings are valid UTF-8 of the given
 * length, and whose value positions lie inside the input. */
#include "fuzz_common.h"
#include "io/json_impl.h"

static size_t walk(const nb_json *v, size_t len, int depth)
{
    FUZZ_ASSERT(depth <= NB_JSON_MAX_DEPTH + 1);
    FUZZ_ASSERT(v->pos < len);
    size_t values = 1;
    switch (v->type) {
    case NB_JSON_STRING:
        FUZZ_ASSERT(v->str && v->str[v->str_len] == '\0');
        FUZZ_ASSERT(nb__utf8_valid(v->str, v->str_len));
        break;
    case NB_JSON_INT:
    case NB_JSON_NUMBER:
        FUZZ_ASSERT(v->str && v->str_len > 0 && v->str_len <= len);
        break;
    case NB_JSON_ARRAY:
    case NB_JSON_OBJECT: {
        size_t n = 0;
        for (const nb_json *c = v->child; c; c = c->next, n++) {
            if (v->type == NB_JSON_OBJECT) {
                FUZZ_ASSERT(c->key && c->key[c->key_len] == '\0');
                FUZZ_ASSERT(nb__utf8_valid(c->key, c->key_len));
            }
            values += walk(c, len, depth + 1);
        }
        FUZZ_ASSERT(n == v->n);
        break;
    }
    default:
        break;
    }
    return values;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    nb_json_error err;
    memset(&err, 0, sizeof err);
    nb_json_doc *doc = nb__json_parse((const char *)data, size, &err);
    if (!doc) {
        FUZZ_ASSERT(err.oom || (err.pos <= size && err.msg[0] != '\0'));
        return 0;
    }
    const nb_json *root = nb__json_root(doc);
    FUZZ_ASSERT(root);
    FUZZ_ASSERT(walk(root, size, 0) <= NB_JSON_MAX_VALUES);
    nb__json_free(doc);
    return 0;
}
