/* Internal: choosing among up to six ways of running a kernel by timing them (src/cpu/tune.c).
 * The gemm kernel chooses a BLAS library this way, the conv kernels a convolution route. */
#ifndef NB_TUNE_IMPL_H
#define NB_TUNE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define NB_TUNE_KEY 16    /* words of a problem's key (unused ones zero) */
#define NB_TUNE_SLOTS 512 /* problems a tuner remembers; later ones keep the rules */
#define NB_TUNE_MAX_CALLS 14
#define NB_TUNE_WAYS 6

typedef struct nb_tune_slot {
    int64_t key[NB_TUNE_KEY];
    int seen;    /* calls so far, up to the schedule's length + 1; 0: empty slot */
    double t[NB_TUNE_WAYS]; /* the best seconds timed on ways 1 to 6 (0: none yet) */
} nb_tune_slot;

/* One client's table. schedule[i] says how call i + 1 of a problem runs: 0 by the client's rules,
 * +w on way w (1 to 6) and timed, -w on that way untimed (a warm-up); steps on a way the problem
 * does not have are skipped. After the schedule, every call runs on the way with the shortest
 * best time: the best of a way's timed calls, since
 * what disturbs a timing (other processes, a cold cache) only ever lengthens it. env names the variable that switches
 * the tuner: "0" off (the rules everywhere), anything else on; unset, on everywhere when
 * all_cpus, else where the CPU has no AVX-512 (nb_cpu_avx512()), the machines the client's rules
 * were not measured on. NABLA_TUNE_LOG=1
 * prints each problem's key, best times and choice on stderr when it is first run on its choice. */
typedef struct nb_tuner {
    const char *env;
    bool all_cpus;
    int calls;
    signed char schedule[NB_TUNE_MAX_CALLS];
    pthread_mutex_t lock;
    atomic_int on; /* -1 until env is read */
    unsigned long long steps; /* calls that ran a step of their problem's schedule (under lock) */
    nb_tune_slot slots[NB_TUNE_SLOTS];
} nb_tuner;

#define NB_TUNER_INIT(ENV, ALL_CPUS, CALLS, ...)                                                             \
    {.env = (ENV), .all_cpus = (ALL_CPUS), .calls = (CALLS), .schedule = {__VA_ARGS__},                        \
     .lock = PTHREAD_MUTEX_INITIALIZER, .on = -1}

/* Whether the tuner is switched on. */
bool nb_cpu_tune_enabled(nb_tuner *t);

/* The way for this call of problem key: 0 = the rules (the tuner is off, its table is full, or
 * the schedule says so), else 1 to 6, one of the problem's ways (bit w - 1 of ways: it has way
 * w; the same for every call of a key). *timed: the way whose timings this call's seconds join,
 * less one (0 to 5), or -1 when the call is not timed. */
int nb_cpu_tune_pick(nb_tuner *t, const int64_t key[NB_TUNE_KEY], unsigned ways, int *timed);

/* Records sec as a timing of way timed + 1 of problem key. */
void nb_cpu_tune_record(nb_tuner *t, const int64_t key[NB_TUNE_KEY], int timed, double sec);

/* How many problems have finished their schedule (tests: the timed path ran). */
int nb_cpu_tune_settled(nb_tuner *t);
/* How many calls so far ran a step of a problem's schedule. */
unsigned long long nb_cpu_tune_steps(nb_tuner *t);

/* A monotonic clock in seconds. */
double nb_cpu_seconds(void);

#endif
