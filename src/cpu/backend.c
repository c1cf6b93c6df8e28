/* The CPU device's table: memory, copies, and each op's kernel family from ops.def. */
#include <string.h>

#include "cpu/cpu_impl.h"

#define FAMILY(f) nb_status nb_cpu_k_##f(nb_op op, const nb_kargs *a);
FAMILY(copy)
FAMILY(fill)
FAMILY(random)
FAMILY(binary)
FAMILY(unary)
FAMILY(where)
FAMILY(reduce)
FAMILY(softmax)
FAMILY(cumsum)
FAMILY(gemm)
FAMILY(index)
FAMILY(sort)
FAMILY(conv)
FAMILY(pool)
FAMILY(batchnorm)
FAMILY(rnn)
#undef FAMILY

static int cpu_count(void) { return 1; }

static void *cpu_alloc(int index, size_t nbytes) { return nb_cpu_alloc(nbytes); }

static void cpu_free(int index, void *p, size_t nbytes) { nb_cpu_free(p, nbytes); }

static nb_status cpu_copy(int index, void *dst, const void *src, size_t nbytes)
{
    if (nbytes) memcpy(dst, src, nbytes);
    return NB_OK;
}

static nb_status cpu_sync(int index) { return NB_OK; }

nb_status nb_cpu_memory_stats(int index, nb_memory_stats *out);
void nb_cpu_reset_peak_stats(int index);

#define none NULL
#define copy nb_cpu_k_copy
#define cat nb_cpu_k_cat
#define fill nb_cpu_k_fill
#define random nb_cpu_k_random
#define binary nb_cpu_k_binary
#define unary nb_cpu_k_unary
#define where nb_cpu_k_where
#define reduce nb_cpu_k_reduce
#define softmax nb_cpu_k_softmax
#define cumsum nb_cpu_k_cumsum
#define gemm nb_cpu_k_gemm
#define index nb_cpu_k_index
#define sort nb_cpu_k_sort
#define conv nb_cpu_k_conv
#define pool nb_cpu_k_pool
#define batchnorm nb_cpu_k_batchnorm
#define rnn nb_cpu_k_rnn

const nb_backend nb__cpu_backend = {
    .name = "cpu",
    .device_count = cpu_count,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_to_host = cpu_copy,
    .copy_from_host = cpu_copy,
    .synchronize = cpu_sync,
    .memory_stats = nb_cpu_memory_stats,
    .reset_peak_stats = nb_cpu_reset_peak_stats,
    .kernels = {
#define X(id, name, family) [NB_OP_##id] = family,
#include "core/ops.def"
#undef X
    },
};
