/* nb_tensor_map: an ordered map from names to tensors (each holding one reference), with a hash
 * index for lookups, and the safetensors `__metadata__` string map. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor_impl.h"
#include "io/json_impl.h"

typedef struct meta_pair {
    char *key, *value;
} meta_pair;

struct nb_tensor_map {
    char **names;
    nb_tensor **tensors; /* owned references */
    int n, cap;
    int *slots;        /* open addressing: entry index + 1, 0 for an empty slot */
    size_t slot_count; /* a power of two, at least twice n (0 before the first insertion) */
    meta_pair *meta;
    int n_meta, cap_meta;
};

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int find(const nb_tensor_map *m, const char *name)
{
    if (!m->slot_count) return -1;
    size_t mask = m->slot_count - 1;
    for (size_t i = hash_name(name) & mask;; i = (i + 1) & mask) {
        int e = m->slots[i];
        if (!e) return -1;
        if (strcmp(m->names[e - 1], name) == 0) return e - 1;
    }
}

static void slot_insert(int *slots, size_t count, const char *name, int entry)
{
    size_t mask = count - 1;
    size_t i = hash_name(name) & mask;
    while (slots[i]) i = (i + 1) & mask;
    slots[i] = entry + 1;
}

/* Room for one more entry in the arrays and the index. */
static nb_status grow(nb_tensor_map *m)
{
    if (m->n == INT_MAX - 1) return nb__err(NB_ERR_INVALID_ARG, "tensor_map_set: the map is full");
    if (m->n == m->cap) {
        int cap = m->cap ? (m->cap > INT_MAX / 2 ? INT_MAX - 1 : m->cap * 2) : 16;
        char **names = realloc(m->names, (size_t)cap * sizeof *names);
        if (names) m->names = names;
        nb_tensor **tensors = names ? realloc(m->tensors, (size_t)cap * sizeof *tensors) : NULL;
        if (!tensors) return nb__err(NB_ERR_OOM, "tensor_map_set: out of memory");
        m->tensors = tensors;
        m->cap = cap;
    }
    if ((size_t)(m->n + 1) * 2 > m->slot_count) {
        size_t count = m->slot_count ? m->slot_count * 2 : 32;
        int *slots = calloc(count, sizeof *slots);
        if (!slots) return nb__err(NB_ERR_OOM, "tensor_map_set: out of memory");
        for (int e = 0; e < m->n; e++) slot_insert(slots, count, m->names[e], e);
        free(m->slots);
        m->slots = slots;
        m->slot_count = count;
    }
    return NB_OK;
}

nb_tensor_map *nb_tensor_map_create(void)
{
    nb_tensor_map *m = calloc(1, sizeof *m);
    if (!m) return nb__err_null(NB_ERR_OOM, "tensor_map_create: out of memory");
    return m;
}

void nb_tensor_map_free(nb_tensor_map *m)
{
    if (!m) return;
    for (int i = 0; i < m->n; i++) {
        free(m->names[i]);
        nb__release(m->tensors[i]);
    }
    for (int i = 0; i < m->n_meta; i++) {
        free(m->meta[i].key);
        free(m->meta[i].value);
    }
    free(m->names);
    free(m->tensors);
    free(m->slots);
    free(m->meta);
    free(m);
}

const char *nb__tensor_name_problem(const char *name)
{
    if (!name) return "NULL name";
    if (!name[0]) return "empty name";
    if (strcmp(name, "__metadata__") == 0) return "the name __metadata__ is reserved by safetensors";
    if (!nb__utf8_valid(name, strlen(name))) return "the name is not valid UTF-8";
    return NULL;
}

nb_status nb_tensor_map_set(nb_tensor_map *m, const char *name, nb_tensor *t)
{
    if (!m || !t) return nb__err(NB_ERR_INVALID_ARG, "tensor_map_set: NULL %s", m ? "tensor" : "map");
    const char *problem = nb__tensor_name_problem(name);
    if (problem) return nb__err(NB_ERR_INVALID_ARG, "tensor_map_set: %s", problem);
    int e = find(m, name);
    if (e >= 0) {
        nb_tensor *old = m->tensors[e];
        m->tensors[e] = nb_tensor_retain(t);
        nb__release(old);
        return NB_OK;
    }
    NB_TRY(grow(m));
    char *copy = strdup(name);
    if (!copy) return nb__err(NB_ERR_OOM, "tensor_map_set: out of memory");
    m->names[m->n] = copy;
    m->tensors[m->n] = nb_tensor_retain(t);
    slot_insert(m->slots, m->slot_count, copy, m->n);
    m->n++;
    return NB_OK;
}

nb_tensor *nb_tensor_map_get(const nb_tensor_map *m, const char *name)
{
    if (!m || !name) return nb__err_null(NB_ERR_INVALID_ARG, "tensor_map_get: NULL %s", m ? "name" : "map");
    int e = find(m, name);
    if (e < 0) return nb__err_null(NB_ERR_INVALID_ARG, "tensor_map_get: no tensor named '%.200s'", name);
    return nb__track(nb_tensor_retain(m->tensors[e]));
}

bool nb_tensor_map_contains(const nb_tensor_map *m, const char *name)
{
    return m && name && find(m, name) >= 0;
}

int nb_tensor_map_size(const nb_tensor_map *m) { return m ? m->n : 0; }

const char *nb_tensor_map_name(const nb_tensor_map *m, int i)
{
    if (!m || i < 0 || i >= m->n)
        return nb__err_null(NB_ERR_INVALID_ARG, "tensor_map_name: index %d out of range for %d tensors", i,
                            m ? m->n : 0);
    return m->names[i];
}

nb_tensor *nb__tensor_map_at(const nb_tensor_map *m, int i)
{
    return m && i >= 0 && i < m->n ? m->tensors[i] : NULL;
}

/* ---- metadata ---------------------------------------------------------------------------- */

nb_status nb__tensor_map_metadata_append(nb_tensor_map *m, const char *key, const char *value)
{
    if (m->n_meta == m->cap_meta) {
        int cap = m->cap_meta > INT_MAX / 2 ? 0 : m->cap_meta ? m->cap_meta * 2 : 8;
        meta_pair *meta = cap > m->cap_meta ? realloc(m->meta, (size_t)cap * sizeof *meta) : NULL;
        if (!meta) return nb__err(NB_ERR_OOM, "tensor_map_set_metadata: out of memory");
        m->meta = meta;
        m->cap_meta = cap;
    }
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return nb__err(NB_ERR_OOM, "tensor_map_set_metadata: out of memory");
    }
    m->meta[m->n_meta++] = (meta_pair){k, v};
    return NB_OK;
}

nb_status nb_tensor_map_set_metadata(nb_tensor_map *m, const char *key, const char *value)
{
    if (!m || !key || !value)
        return nb__err(NB_ERR_INVALID_ARG, "tensor_map_set_metadata: NULL %s", !m ? "map" : !key ? "key" : "value");
    if (!nb__utf8_valid(key, strlen(key)) || !nb__utf8_valid(value, strlen(value)))
        return nb__err(NB_ERR_INVALID_ARG, "tensor_map_set_metadata: key or value of '%.200s' is not valid UTF-8",
                       key);
    for (int i = 0; i < m->n_meta; i++) {
        if (strcmp(m->meta[i].key, key) != 0) continue;
        char *v = strdup(value);
        if (!v) return nb__err(NB_ERR_OOM, "tensor_map_set_metadata: out of memory");
        free(m->meta[i].value);
        m->meta[i].value = v;
        return NB_OK;
    }
    return nb__tensor_map_metadata_append(m, key, value);
}

const char *nb_tensor_map_metadata(const nb_tensor_map *m, const char *key)
{
    if (!m || !key) return NULL;
    for (int i = 0; i < m->n_meta; i++)
        if (strcmp(m->meta[i].key, key) == 0) return m->meta[i].value;
    return NULL;
}

int nb__tensor_map_metadata_count(const nb_tensor_map *m) { return m ? m->n_meta : 0; }

void nb__tensor_map_metadata_at(const nb_tensor_map *m, int i, const char **key, const char **value)
{
    *key = m->meta[i].key;
    *value = m->meta[i].value;
}
