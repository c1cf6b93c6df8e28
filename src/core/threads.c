/* One thread count for all CPU work: our OpenMP kernels and OpenBLAS (OpenMP build). */
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/tensor_impl.h"

void openblas_set_num_threads(int n) __attribute__((weak));

static atomic_int g_threads = 0;

static int env_threads(const char *name)
{
    const char *s = getenv(name);
    if (!s || !*s) return 0;
    char *end;
    long v = strtol(s, &end, 10);
    return (*end == '\0' && v > 0 && v < 4096) ? (int)v : 0;
}

static void apply(int n)
{
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
    if (openblas_set_num_threads) openblas_set_num_threads(n);
}

int nb_get_num_threads(void)
{
    int n = atomic_load(&g_threads);
    if (n > 0) return n;
    n = env_threads("NABLA_NUM_THREADS");
    if (!n) n = env_threads("OMP_NUM_THREADS");
    if (!n) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    int expected = 0;
    if (atomic_compare_exchange_strong(&g_threads, &expected, n)) apply(n);
    return atomic_load(&g_threads);
}

nb_status nb_set_num_threads(int n)
{
    if (n < 1) return nb__err(NB_ERR_INVALID_ARG, "set_num_threads: %d threads (must be >= 1)", n);
    atomic_store(&g_threads, n);
    apply(n);
    return NB_OK;
}
