/* The test support library: reference values from PyTorch, tensor comparison, non-contiguous
 * copies, finite-difference gradient checks, and error checks. Tests use cmocka; include this
 * after <setjmp.h>, <stdarg.h>, <stddef.h> and <cmocka.h> (it includes them itself). */
#ifndef NBTEST_H
#define NBTEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "nabla.h"

/* Fails the test with nb_last_error() when x is NULL / not NB_OK. */
#define NBT_CHECK(x) nbt_check_ptr((x), #x, __FILE__, __LINE__)
#define NBT_OK(x) nbt_check_ok((x), #x, __FILE__, __LINE__)
void *nbt_check_ptr(void *p, const char *expr, const char *file, int line);
void nbt_check_ok(nb_status s, const char *expr, const char *file, int line);

/* Asserts that a call failed with `status` and that nb_last_error() contains every one of the
 * NULL-terminated substrings. Use: NBT_FAILS(nb_add(a, b) == NULL, NB_ERR_SHAPE, "add", "[2, 3]", NULL)
 * The error is cleared before the call, so a call that fails without setting one cannot pass on an
 * earlier call's message. */
#define NBT_FAILS(failed, status, ...)                                                            \
    (nb_clear_error(), nbt_fails((failed), (status), __FILE__, __LINE__, __VA_ARGS__))
void nbt_fails(int failed, nb_status status, const char *file, int line, ...);

/* The reference file $NB_REF_DIR/<family>.safetensors written by tests/ref/cases_<family>.py.
 * Fails the test (never skips) when it is missing: the ref_gen fixture must have made it. */
nb_tensor_map *nbt_load_ref(const char *family);
/* The tensor `<prefix>/<key>` of a reference map (NULL when absent). Scope-tracked. */
nb_tensor *nbt_ref(const nb_tensor_map *m, const char *prefix, const char *key);
/* Names of the cases in a map: the distinct prefixes before the last '/'. Returns the count and
 * fills out (malloc'd strings in a malloc'd array; free with nbt_free_names). */
int nbt_case_names(const nb_tensor_map *m, char ***out);
void nbt_free_names(char **names, int n);

/* A reference case runner: runs the case `name` of map m, on contiguous inputs or on
 * nbt_noncontig copies. */
typedef void (*nbt_case_fn)(const nb_tensor_map *m, const char *name, bool noncontig);
/* Runs fn on every case of <family>.safetensors, contiguous then non-contiguous, each inside its own
 * scope. Fails the test when the file holds fewer than min_cases cases (a catalogue that lost its
 * cases must not pass by testing nothing). */
void nbt_run_reference(const char *family, int min_cases, nbt_case_fn fn);

/* Asserts got and want have the same shape and |got - want| <= atol + rtol |want| everywhere
 * (values compared in float64; NaNs must match), and the same dtype unless want is float64 (a
 * hand-computed or float64 expectation may check any dtype's values; a float32 reference needs a
 * float32 result). `what` names the comparison in the failure. */
void nbt_assert_close(const nb_tensor *got, const nb_tensor *want, double rtol, double atol,
                      const char *what);
/* Same values and shape as t, laid out non-contiguously (a strided slice of a larger buffer). */
nb_tensor *nbt_noncontig(const nb_tensor *t);
/* t with requires_grad set (a new leaf: a copy). */
nb_tensor *nbt_leaf(const nb_tensor *t);

/* A function of n tensors for gradient checks. Returns a tensor (scope-tracked) or NULL. */
typedef nb_tensor *(*nbt_fn)(nb_tensor *const *inputs, int n, void *ctx);
/* Checks the gradient of every floating input of f (float64 inputs) against central finite
 * differences: sum(f(x) * w) for a fixed random w is differentiated analytically with nb_backward
 * and numerically with step eps. Fails the test when |analytic - numeric| > atol + rtol |numeric|. */
void nbt_gradcheck(nbt_fn f, void *ctx, nb_tensor *const *inputs, int n, double eps, double atol,
                   double rtol, const char *what);

/* ---- CUDA tests (skipped, exit 77, on a machine without a GPU) -------------------------------- */
#define NBT_CUDA0 ((nb_device){NB_DEVICE_CUDA, 0})
/* True, after printing "SKIPPED: no CUDA device (...)", when there is no CUDA device: main then
 * returns 77, which ctest reports as Skipped. With NB_REQUIRE_CUDA=1 (scripts/gpu-run.sh sets
 * it) a missing device is a failure instead: exit 1. */
bool nbt_cuda_missing(void);
/* t copied to cuda:0 (scope-owned like any op's result; the test fails on error). */
nb_tensor *nbt_to_cuda(const nb_tensor *t);
/* got, on any device, read back to the CPU: want's dtype and close to it (rtol and atol = tol). */
void nbt_assert_close_host(const nb_tensor *got, const nb_tensor *want, double tol, const char *what);
/* ||got - want|| / ||want|| over all elements (got on any device, both float), in float64 */
double nbt_rel_err_host(const nb_tensor *got, const nb_tensor *want);
/* max |got - want| / max |want| over all elements (both on the CPU, float, any layout), in
 * float64: the error relative to the tensor's scale */
double nbt_max_rel_err(const nb_tensor *got, const nb_tensor *want);

/* count floats uniform on [-1, 1) from the linear congruential generator at *seed (advanced),
 * every 7th (index 3 mod 7) times lo_scale, so that a matrix holds a range of exponents; malloc'd
 * (the test fails when memory is short). For the product kernels' tests (AMX, AVX2). */
float *nbt_filled_floats(int64_t count, unsigned *seed, float lo_scale);

/* Calls of the op named op in the profiler's table (0 when it has no row for it). */
int64_t nbt_profiled_calls(const char *op);

/* Entries of dir other than . and ..; *tmp counts those with ".tmp." in the name (what an
 * atomic save leaves behind when it fails to clean up). The test fails when dir cannot be read. */
int nbt_dir_entries(const char *dir, int *tmp);

/* Prints which CPU kernels this run tests: nabla's own AVX-512 ones, or the portable ones and
 * why. Exits 1 where nabla's choice disagrees with what the kernel reports of the CPU
 * (/proc/cpuinfo's avx512f; NABLA_MAX_CPU_ISA=avx2 turns them off on purpose), and where
 * NB_REQUIRE_ISA=avx512 (for a test machine meant to have AVX-512) finds no AVX-512: the
 * AVX-512 kernels would otherwise go untested while the suite reads as passed. */
void nbt_check_isa(void);

/* Runs the cmocka group, after nbt_check_isa; returns cmocka's status (0 when all pass). */
#define NBT_RUN(tests) (nbt_check_isa(), cmocka_run_group_tests(tests, NULL, NULL))
#define NBT_RUN_GROUP(tests, setup, teardown) (nbt_check_isa(), cmocka_run_group_tests(tests, setup, teardown))

#endif
