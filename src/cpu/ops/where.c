/* Kernel: WHERE.
 *   out[i] = cond[i] ? x[i] : y[i]   cond = in[0] (bool), x = in[1], y = in[2], all three
 *                                     broadcast to out's shape
 * x and y have out's dtype (the entry point converts them). Selection only moves bytes, so the
 * loops are per element size, not per dtype (float16 and bfloat16 are rejected, as by every CPU
 * op). A cond byte other than 0 counts as true. */
#include "cpu/cpu_impl.h"

#if defined(__x86_64__) && !defined(__clang__)
#define NB_HOT __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define NB_HOT
#endif

#define SELECT_LOOP(NAME, T)                                                                     \
    NB_HOT static void NAME(char **p, const int64_t *s, int64_t n, void *ctx)                    \
    {                                                                                            \
        (void)ctx;                                                                               \
        const int64_t es = sizeof(T);                                                            \
        if (s[0] == es && s[1] == 1 && s[2] == es && s[3] == es) {                               \
            T *o = (T *)p[0];                                                                    \
            const uint8_t *c = (const uint8_t *)p[1];                                            \
            const T *x = (const T *)p[2], *y = (const T *)p[3];                                  \
            _Pragma("omp simd") for (int64_t k = 0; k < n; k++) o[k] = c[k] ? x[k] : y[k];       \
            return;                                                                              \
        }                                                                                        \
        for (int64_t k = 0; k < n; k++) {                                                        \
            const char *src = *(const uint8_t *)(p[1] + k * s[1]) ? p[2] + k * s[2] : p[3] + k * s[3]; \
            *(T *)(p[0] + k * s[0]) = *(const T *)src;                                           \
        }                                                                                        \
    }

SELECT_LOOP(select_1, uint8_t)
SELECT_LOOP(select_4, uint32_t)
SELECT_LOOP(select_8, uint64_t)

nb_status nb_cpu_k_where(nb_op op, const nb_kargs *a)
{
    const nb_tensor *c = a->in[0], *x = a->in[1], *y = a->in[2];
    nb_dtype dt = a->out->dtype;
    if (c->dtype != NB_BOOL || x->dtype != dt || y->dtype != dt)
        return nb__err(NB_ERR_INTERNAL, "where: kernel called with dtypes %s, %s, %s -> %s",
                       nb_dtype_name(c->dtype), nb_dtype_name(x->dtype), nb_dtype_name(y->dtype),
                       nb_dtype_name(dt));
    nb_cpu_loop_fn loop = NULL;
    switch (nb_dtype_size(dt)) {
    case 1: loop = select_1; break;
    case 4: loop = select_4; break;
    case 8: loop = select_8; break;
    default: return nb__err(NB_ERR_DTYPE, "where: dtype %s is not supported on the CPU", nb_dtype_name(dt));
    }
    nb_cpu_iter it;
    nb_cpu_iter_elementwise(&it, a->out, a->in, 3);
    nb_cpu_iter_run(&it, loop, NULL, 0);
    return NB_OK;
}
