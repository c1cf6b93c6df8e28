/* Choosing among the ways of running a problem by timing them: an open-addressed table of
 * problems behind one mutex per client (see tune_impl.h), and nb_cpu_tuning_steps over the two
 * clients, gemm.c's and conv.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/blas_impl.h"
#include "cpu/cpu_impl.h"
#include "cpu/dnnl_impl.h"
#include "cpu/tune_impl.h"

static atomic_int g_deterministic = -1; /* -1: NABLA_DETERMINISTIC not read yet */

void nb_set_deterministic(bool on) { atomic_store(&g_deterministic, on ? 1 : 0); }

bool nb_get_deterministic(void)
{
    int d = atomic_load(&g_deterministic);
    if (d < 0) { /* two threads may both read the environment: same answer */
        const char *e = getenv("NABLA_DETERMINISTIC");
        d = e && *e && strcmp(e, "0") != 0;
        int unset = -1;
        if (!atomic_compare_exchange_strong(&g_deterministic, &unset, d)) d = atomic_load(&g_deterministic);
    }
    return d != 0;
}

bool nb_cpu_tune_enabled(nb_tuner *t)
{
    if (nb_get_deterministic()) return false;
    int on = atomic_load_explicit(&t->on, memory_order_relaxed);
    if (on < 0) { /* two threads may both read the environment: same answer */
        const char *e = getenv(t->env);
        on = e && *e ? strcmp(e, "0") != 0 : t->all_cpus || !nb_cpu_avx512();
        atomic_store_explicit(&t->on, on, memory_order_relaxed);
    }
    return on != 0;
}

static uint32_t key_hash(const int64_t *k)
{
    uint32_t h = 2166136261u;
    for (int i = 0; i < NB_TUNE_KEY; i++) h = (h ^ (uint32_t)(k[i] ^ (k[i] >> 32))) * 16777619u;
    return h;
}

/* The slot of key (its own or the empty one where it belongs); NULL when the table is full.
 * Called with the lock held. */
static nb_tune_slot *slot_of(nb_tuner *t, const int64_t *k)
{
    uint32_t h = key_hash(k);
    for (int i = 0; i < NB_TUNE_SLOTS; i++) {
        nb_tune_slot *s = &t->slots[(h + (uint32_t)i) % NB_TUNE_SLOTS];
        if (!s->seen || memcmp(s->key, k, sizeof s->key) == 0) return s;
    }
    return NULL;
}

/* The way with the shortest best time among ways (a mask as nb_cpu_tune_pick's), else its first. */
static int choice(const nb_tune_slot *s, unsigned ways)
{
    int best = 0;
    for (int w = 1; w <= NB_TUNE_WAYS; w++) {
        if (!(ways >> (w - 1) & 1u)) continue;
        if (!best || (s->t[w - 1] > 0 && (s->t[best - 1] == 0 || s->t[w - 1] < s->t[best - 1]))) best = w;
    }
    return best ? best : 1;
}

/* NABLA_TUNE_LOG=1: each settled problem on stderr (its key, each way's best time, the choice). */
static void log_settled(const nb_tuner *t, const nb_tune_slot *s, unsigned ways)
{
    static atomic_int log_on = -1;
    int on = atomic_load_explicit(&log_on, memory_order_relaxed);
    if (on < 0) {
        const char *e = getenv("NABLA_TUNE_LOG");
        on = e && *e && strcmp(e, "0") != 0;
        atomic_store_explicit(&log_on, on, memory_order_relaxed);
    }
    if (!on) return;
    char key[NB_TUNE_KEY * 21 + 1];
    int len = 0, last = NB_TUNE_KEY;
    while (last > 1 && s->key[last - 1] == 0) last--;
    for (int i = 0; i < last && len < (int)sizeof key; i++)
        len += snprintf(key + len, sizeof key - (size_t)len, "%s%lld", i ? "," : "", (long long)s->key[i]);
    char times[NB_TUNE_WAYS * 32] = "";
    int tl = 0;
    for (int w = 1; w <= NB_TUNE_WAYS; w++)
        if (ways >> (w - 1) & 1u)
            tl += snprintf(times + tl, sizeof times - (size_t)tl, "way %d %.3f ms, ", w, 1e3 * s->t[w - 1]);
    fprintf(stderr, "nabla: %s tuned [%s]: %sway %d\n", t->env, key, times, choice(s, ways));
}

int nb_cpu_tune_pick(nb_tuner *t, const int64_t key[NB_TUNE_KEY], unsigned ways, int *timed)
{
    *timed = -1;
    if (!nb_cpu_tune_enabled(t)) return 0;
    pthread_mutex_lock(&t->lock);
    nb_tune_slot *s = slot_of(t, key);
    if (!s) {
        pthread_mutex_unlock(&t->lock);
        return 0;
    }
    if (!s->seen) memcpy(s->key, key, sizeof s->key);
    while (s->seen < t->calls) {
        int step = t->schedule[s->seen++], way = abs(step);
        if (way && !(ways >> (way - 1) & 1u)) continue; /* a way this problem does not have */
        if (step > 0) *timed = step - 1;
        t->steps++;
        pthread_mutex_unlock(&t->lock);
        return way;
    }
    if (s->seen == t->calls) { /* the first call after the schedule */
        s->seen++;
        log_settled(t, s, ways);
    }
    int pick = choice(s, ways);
    pthread_mutex_unlock(&t->lock);
    return pick;
}

void nb_cpu_tune_record(nb_tuner *t, const int64_t key[NB_TUNE_KEY], int timed, double sec)
{
    pthread_mutex_lock(&t->lock);
    nb_tune_slot *s = slot_of(t, key);
    if (s && s->seen && (s->t[timed] == 0 || sec < s->t[timed])) s->t[timed] = sec;
    pthread_mutex_unlock(&t->lock);
}

int nb_cpu_tune_settled(nb_tuner *t)
{
    int n = 0;
    pthread_mutex_lock(&t->lock);
    for (int i = 0; i < NB_TUNE_SLOTS; i++) n += t->slots[i].seen >= t->calls;
    pthread_mutex_unlock(&t->lock);
    return n;
}

unsigned long long nb_cpu_tune_steps(nb_tuner *t)
{
    pthread_mutex_lock(&t->lock);
    unsigned long long n = t->steps;
    pthread_mutex_unlock(&t->lock);
    return n;
}

unsigned long long nb_cpu_tuning_steps(void) { return nb_cpu_gemm_tuning_steps() + nb__conv_tuning_steps(); }

double nb_cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
