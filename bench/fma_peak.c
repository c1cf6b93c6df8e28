/* The CPU's arithmetic ceiling on one core, for docs/BENCHMARKS.md's bounds: float32 FMAs on
 * 512-bit and 256-bit vectors (12 independent chains each, enough to cover the latency of two
 * FMA pipes), and AVX512-BF16's VDPBF16PS where the CPU has it (a pair of bfloat16 products
 * summed into each float32 lane: 64 flops an instruction). GFLOP/s, best of 3 runs of about 0.5 s.
 *
 *   build-bench/bench/nabla_fma_peak
 *
 * Pinned to one core by the caller if wanted (taskset -c 0); it runs one thread. */
#include <stdio.h>

#include "bench_util.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define CHAINS 12

__attribute__((target("avx512f"))) static double fma512(long n)
{
    __m512 a[CHAINS], x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(0.9999999f);
    for (int j = 0; j < CHAINS; j++) a[j] = _mm512_set1_ps((float)j);
    double t = bench_now();
    for (long i = 0; i < n; i++)
#pragma GCC unroll 12 /* the chains in registers */
        for (int j = 0; j < CHAINS; j++) a[j] = _mm512_fmadd_ps(a[j], x, y);
    t = bench_now() - t;
    float s = 0;
    for (int j = 0; j < CHAINS; j++) s += _mm512_reduce_add_ps(a[j]);
    return s == 12345.f ? 0 : (double)n * CHAINS * 32 / t * 1e-9; /* s keeps the loop alive */
}

__attribute__((target("avx2,fma"))) static double fma256(long n)
{
    __m256 a[CHAINS], x = _mm256_set1_ps(1.0000001f), y = _mm256_set1_ps(0.9999999f);
    for (int j = 0; j < CHAINS; j++) a[j] = _mm256_set1_ps((float)j);
    double t = bench_now();
    for (long i = 0; i < n; i++)
#pragma GCC unroll 12
        for (int j = 0; j < CHAINS; j++) a[j] = _mm256_fmadd_ps(a[j], x, y);
    t = bench_now() - t;
    float o[8], s = 0;
    for (int j = 0; j < CHAINS; j++) {
        _mm256_storeu_ps(o, a[j]);
        for (int k = 0; k < 8; k++) s += o[k];
    }
    return s == 12345.f ? 0 : (double)n * CHAINS * 16 / t * 1e-9;
}

__attribute__((target("avx512f,avx512bf16"))) static double dpbf16(long n)
{
    __m512 a[CHAINS];
    __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = x; /* 1.0 in bfloat16 */
    for (int j = 0; j < CHAINS; j++) a[j] = _mm512_set1_ps((float)j);
    double t = bench_now();
    for (long i = 0; i < n; i++) {
#pragma GCC unroll 12
        for (int j = 0; j < CHAINS; j++) a[j] = _mm512_dpbf16_ps(a[j], x, y);
        __asm__ volatile("" : "+v"(x)); /* x is not a constant to fold */
    }
    t = bench_now() - t;
    float s = 0;
    for (int j = 0; j < CHAINS; j++) s += _mm512_reduce_add_ps(a[j]);
    return s == 12345.f ? 0 : (double)n * CHAINS * 64 / t * 1e-9;
}

static double best(double (*f)(long), long n)
{
    double b = 0;
    for (int r = 0; r < 3; r++) {
        double g = f(n);
        b = g > b ? g : b;
    }
    return b;
}

int main(void)
{
    __builtin_cpu_init();
    long n = 50000000;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        printf("fma ymm float32:   %6.1f GFLOP/s\n", best(fma256, n));
    if (__builtin_cpu_supports("avx512f")) printf("fma zmm float32:   %6.1f GFLOP/s\n", best(fma512, n));
    if (__builtin_cpu_supports("avx512bf16"))
        printf("vdpbf16ps zmm:     %6.1f GFLOP/s (bfloat16 products into float32)\n", best(dpbf16, n / 2));
    return 0;
}
#else
int main(void)
{
    puts("fma_peak: an x86-64 probe; nothing to measure here");
    return 0;
}
#endif
