/* What the benchmark programs share: a monotonic clock and the comparison qsort needs to take
 * medians of timings. Header-only (each program is one file). */
#ifndef NB_BENCH_UTIL_H
#define NB_BENCH_UTIL_H

#include <time.h>

/* Seconds on CLOCK_MONOTONIC. */
static inline double bench_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* qsort's comparison for doubles, ascending. */
static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
