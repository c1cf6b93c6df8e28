/* The op profiler (include/nabla/profiler.h): per-slot call counts and nanoseconds in atomics, a
 * thread-local depth so that only a thread's outermost region counts, and the table. */
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "core/dispatch_impl.h"
#include "core/profiler_impl.h"

#define NSLOTS (NB_OP_COUNT + NB_PROF_EXTRA_COUNT)

atomic_int nb__prof_mode = -1; /* -1: stopped */
static atomic_llong g_ns[NSLOTS], g_calls[NSLOTS];
static atomic_llong g_start_ns, g_stop_ns;
static _Thread_local int t_depth;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static const char *slot_name(int slot)
{
    if (slot < NB_OP_COUNT) return nb__op_name((nb_op)slot);
    switch (slot - NB_OP_COUNT) {
    case NB_PROF_OPTIM_STEP: return "optimizer_step";
    default: return "?";
    }
}

int64_t nb__prof_begin_on(void)
{
    return t_depth++ == 0 ? now_ns() : -1;
}

void nb__prof_end(int slot, int64_t t0, nb_device dev)
{
    if (t0 == 0) return;
    if (--t_depth > 0 || t0 < 0) return;
    /* (no wait inside a CUDA graph capture: nothing runs there to wait for) */
    if (atomic_load(&nb__prof_mode) == NB_PROFILE_SYNC && dev.type != NB_DEVICE_CPU && !nb__device_capturing(dev)) {
        const nb_backend *be = nb__backend(dev);
        if (be && be->synchronize) be->synchronize(dev.index);
    }
    atomic_fetch_add(&g_ns[slot], now_ns() - t0);
    atomic_fetch_add(&g_calls[slot], 1);
}

nb_status nb_profiler_start(nb_profile_mode mode)
{
    if (mode != NB_PROFILE_HOST && mode != NB_PROFILE_SYNC)
        return nb__err(NB_ERR_INVALID_ARG, "profiler start: unknown mode %d (NB_PROFILE_HOST or NB_PROFILE_SYNC)",
                       (int)mode);
    atomic_store(&nb__prof_mode, -1);
    for (int i = 0; i < NSLOTS; i++) {
        atomic_store(&g_ns[i], 0);
        atomic_store(&g_calls[i], 0);
    }
    atomic_store(&g_stop_ns, 0);
    atomic_store(&g_start_ns, now_ns());
    atomic_store(&nb__prof_mode, (int)mode);
    return NB_OK;
}

void nb_profiler_stop(void)
{
    if (atomic_exchange(&nb__prof_mode, -1) >= 0) atomic_store(&g_stop_ns, now_ns());
}

double nb_profiler_wall_ms(void)
{
    int64_t t0 = atomic_load(&g_start_ns);
    if (!t0) return 0;
    int64_t t1 = atomic_load(&g_stop_ns);
    return (double)((t1 ? t1 : now_ns()) - t0) / 1e6;
}

static int cmp_entry(const void *a, const void *b)
{
    double x = ((const nb_profile_entry *)a)->total_ms, y = ((const nb_profile_entry *)b)->total_ms;
    return (x < y) - (x > y);
}

/* All rows with calls, sorted; *n set. NULL when out of memory (error set). */
static nb_profile_entry *collect(int *n)
{
    nb_profile_entry *all = malloc(NSLOTS * sizeof *all);
    if (!all) return nb__err_null(NB_ERR_OOM, "profiler: out of memory");
    int k = 0;
    for (int i = 0; i < NSLOTS; i++) {
        int64_t c = atomic_load(&g_calls[i]);
        if (c > 0) all[k++] = (nb_profile_entry){slot_name(i), c, (double)atomic_load(&g_ns[i]) / 1e6};
    }
    qsort(all, (size_t)k, sizeof *all, cmp_entry);
    *n = k;
    return all;
}

int nb_profiler_entries(nb_profile_entry *out, int max)
{
    int n = 0;
    nb_profile_entry *all = collect(&n);
    if (!all) return 0;
    for (int i = 0; i < n && i < max && out; i++) out[i] = all[i];
    free(all);
    return n;
}

nb_status nb_profiler_print(FILE *f)
{
    if (!f) return nb__err(NB_ERR_INVALID_ARG, "profiler print: f is NULL");
    int n = 0;
    nb_profile_entry *all = collect(&n);
    if (!all) return nb_last_status();
    double wall = nb_profiler_wall_ms(), sum = 0;
    fprintf(f, "%-34s %9s %12s %11s %7s\n", "op", "calls", "total ms", "ms/call", "%wall");
    for (int i = 0; i < n; i++) {
        sum += all[i].total_ms;
        fprintf(f, "%-34s %9lld %12.3f %11.4f %6.1f%%\n", all[i].name, (long long)all[i].calls, all[i].total_ms,
                all[i].total_ms / (double)all[i].calls, wall > 0 ? 100.0 * all[i].total_ms / wall : 0.0);
    }
    fprintf(f, "%-34s %9s %12.3f %11s %6.1f%%\n", "(not in ops)", "", wall - sum, "",
            wall > 0 ? 100.0 * (wall - sum) / wall : 0.0);
    fprintf(f, "%-34s %9s %12.3f\n", "wall", "", wall);
    free(all);
    return NB_OK;
}
