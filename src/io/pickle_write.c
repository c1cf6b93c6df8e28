/* The writer's side of the pickle subset (see torchfile_impl.h): opcodes of protocol 2, each
 * appended to a buffer, limited to those torch 1.13's weights_only loader accepts. torchfile_save.c
 * builds data.pkl from them; the tests build crafted pickles with them. */
#include <string.h>

#include "io/torchfile_impl.h"

void nb__pk_op(nb_json_buf *b, unsigned char op) { nb__json_buf_append(b, (const char *)&op, 1); }

static void put_le(nb_json_buf *b, uint64_t v, int k)
{
    char buf[8];
    for (int i = 0; i < k; i++) buf[i] = (char)(v >> (8 * i));
    nb__json_buf_append(b, buf, (size_t)k);
}

void nb__pk_int(nb_json_buf *b, int64_t v)
{
    if (v >= 0 && v < 256) {
        nb__pk_op(b, 'K');
        put_le(b, (uint64_t)v, 1);
    } else if (v >= 0 && v < 65536) {
        nb__pk_op(b, 'M');
        put_le(b, (uint64_t)v, 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        nb__pk_op(b, 'J');
        put_le(b, (uint64_t)v, 4);
    } else {
        /* LONG1: the shortest two's complement */
        int k = 8;
        while (k > 1 && ((v >> (8 * (k - 1) - 1)) == 0 || (v >> (8 * (k - 1) - 1)) == -1)) k--;
        nb__pk_op(b, 0x8a);
        put_le(b, (uint64_t)k, 1);
        put_le(b, (uint64_t)v, k);
    }
}

void nb__pk_str(nb_json_buf *b, const char *s)
{
    size_t n = strlen(s);
    nb__pk_op(b, 'X');
    put_le(b, n, 4);
    nb__json_buf_append(b, s, n);
}

void nb__pk_global(nb_json_buf *b, const char *module, const char *name)
{
    nb__pk_op(b, 'c');
    nb__json_buf_printf(b, "%s\n%s\n", module, name);
}

void nb__pk_put(nb_json_buf *b, uint32_t memo)
{
    nb__pk_op(b, memo < 256 ? 'q' : 'r');
    put_le(b, memo, memo < 256 ? 1 : 4);
}

void nb__pk_get(nb_json_buf *b, uint32_t memo)
{
    nb__pk_op(b, memo < 256 ? 'h' : 'j');
    put_le(b, memo, memo < 256 ? 1 : 4);
}
