/* OpenBLAS glue: making OpenBLAS run its AVX-512 kernels on CPUs it does not recognise.
 *
 * Why: OpenBLAS 0.3.21 (Debian 12) picks its kernels once, from the CPU's family and model, and
 * does not know AMD Zen 5: it falls back to the AVX2 (Haswell) kernels, which run sgemm at half
 * the speed of its AVX-512 (SkylakeX) kernels on that CPU (bench/CPU_NOTES.md, item 3). Its
 * documented switch is the environment variable OPENBLAS_CORETYPE, read once by
 * gotoblas_dynamic_init() from OpenBLAS's own constructor.
 *
 * How: a constructor of ours cannot set the variable in time. The dynamic loader runs a library's
 * constructors after those of the libraries it depends on, and a program's after every shared
 * library's, so OpenBLAS has chosen before any code of ours runs (checked: a priority-101
 * constructor setting it leaves OpenBLAS on its default choice, in a shared and a static build).
 * Loading OpenBLAS ourselves with dlopen() after setting it would work only while nothing else
 * in the process loaded OpenBLAS first, and would take every BLAS symbol through dlsym.
 * Instead, OpenBLAS's DYNAMIC_ARCH builds export the pair of functions that make the choice:
 * gotoblas_dynamic_quit() forgets it and gotoblas_dynamic_init() makes it again, reading
 * OPENBLAS_CORETYPE. At load time (before main, before any BLAS call of ours), when
 *   - the user did not set OPENBLAS_CORETYPE (a value set by the user always wins, so
 *     OPENBLAS_CORETYPE=Haswell turns this off),
 *   - the CPU and the OS support AVX-512 F/CD/BW/DQ/VL (the SkylakeX kernels' instructions), and
 *   - OpenBLAS chose a kernel set without AVX-512,
 * we set OPENBLAS_CORETYPE=SkylakeX, redo the choice, and restore the environment. With an
 * OpenBLAS that is not a DYNAMIC_ARCH build (the functions are absent: weak references) or one
 * that already chose AVX-512 kernels, nothing happens. OpenBLAS's buffers do not depend on the
 * kernel set (one BUFFER_SIZE for all), so the switch is what the environment variable does.
 * The two functions are exported internals of OpenBLAS rather than documented API, and the switch
 * must not race a BLAS call: at load time nothing of ours runs yet; a process that loads nabla
 * with dlopen() while other threads are inside OpenBLAS should set OPENBLAS_CORETYPE itself. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cpu/blas_impl.h"

char *openblas_get_corename(void) __attribute__((weak));
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));

const char *nb_cpu_blas_corename(void)
{
    const char *s = openblas_get_corename ? openblas_get_corename() : NULL;
    return s ? s : "unknown";
}

static bool is_avx512_core(const char *name)
{
    static const char *const cores[] = {"skylakex", "cooperlake", "sapphirerapids"};
    for (size_t i = 0; i < sizeof cores / sizeof *cores; i++)
        if (strcasecmp(name, cores[i]) == 0) return true;
    return false;
}

/* libgcc's checks include the OS's support for the AVX-512 register state (XGETBV). */
static bool cpu_has_avx512(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
#else
    return false;
#endif
}

nb_status nb_cpu_blas_select_core(const char *coretype)
{
    if (!coretype || !*coretype) return nb__err(NB_ERR_INVALID_ARG, "blas: empty core type");
    if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit)
        return nb__err(NB_ERR_UNSUPPORTED, "blas: this OpenBLAS cannot change its kernels (not a DYNAMIC_ARCH build)");
    const char *prev = getenv("OPENBLAS_CORETYPE");
    char *saved = prev ? strdup(prev) : NULL;
    if (prev && !saved) return nb__err(NB_ERR_OOM, "blas: out of memory");
    setenv("OPENBLAS_CORETYPE", coretype, 1);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    if (saved) setenv("OPENBLAS_CORETYPE", saved, 1);
    else unsetenv("OPENBLAS_CORETYPE");
    free(saved);
    const char *now = nb_cpu_blas_corename();
    if (strcasecmp(now, coretype) != 0)
        return nb__err(NB_ERR_UNSUPPORTED, "blas: OpenBLAS runs its %s kernels, not %s", now, coretype);
    return NB_OK;
}

static void pick_kernels(void)
{
    if (getenv("OPENBLAS_CORETYPE") || !cpu_has_avx512() || is_avx512_core(nb_cpu_blas_corename())) return;
    if (nb_cpu_blas_select_core("SkylakeX") != NB_OK) nb_clear_error();
}

static pthread_once_t g_picked = PTHREAD_ONCE_INIT;

void nb_cpu_blas_init(void)
{
    pthread_once(&g_picked, pick_kernels);
}

/* At load time: before main, so before any thread can be inside OpenBLAS. */
__attribute__((constructor)) static void blas_init_at_load(void)
{
    nb_cpu_blas_init();
}
