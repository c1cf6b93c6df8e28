/* The test support library (see nbtest.h). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <dirent.h>

#include "nbtest.h"
#include "cpu/cpu_impl.h"

void *nbt_check_ptr(void *p, const char *expr, const char *file, int line)
{
    if (!p) {
        print_error("%s:%d: %s failed: %s\n", file, line, expr, nb_last_error());
        _fail(file, line);
    }
    return p;
}

void nbt_check_ok(nb_status s, const char *expr, const char *file, int line)
{
    if (s != NB_OK) {
        print_error("%s:%d: %s returned %s: %s\n", file, line, expr, nb_status_name(s), nb_last_error());
        _fail(file, line);
    }
}

void nbt_fails(int failed, nb_status status, const char *file, int line, ...)
{
    if (!failed) {
        print_error("%s:%d: expected a failure (%s), the call succeeded\n", file, line, nb_status_name(status));
        _fail(file, line);
    }
    if (nb_last_status() != status) {
        print_error("%s:%d: expected status %s, got %s: %s\n", file, line, nb_status_name(status),
                    nb_status_name(nb_last_status()), nb_last_error());
        _fail(file, line);
    }
    va_list ap;
    va_start(ap, line);
    for (const char *sub = va_arg(ap, const char *); sub; sub = va_arg(ap, const char *)) {
        if (!strstr(nb_last_error(), sub)) {
            print_error("%s:%d: the message \"%s\" does not contain \"%s\"\n", file, line, nb_last_error(), sub);
            va_end(ap);
            _fail(file, line);
        }
    }
    va_end(ap);
}

nb_tensor_map *nbt_load_ref(const char *family)
{
    const char *dir = getenv("NB_REF_DIR");
    if (!dir) {
        print_error("NB_REF_DIR is not set: run the tests through ctest (the ref_gen fixture makes the files)\n");
        fail();
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, family);
    nb_tensor_map *m = NULL;
    if (nb_safetensors_load(path, nb_cpu(), &m) != NB_OK) {
        print_error("cannot load the reference values %s: %s\n", path, nb_last_error());
        fail();
    }
    return m;
}

nb_tensor *nbt_ref(const nb_tensor_map *m, const char *prefix, const char *key)
{
    char name[512];
    snprintf(name, sizeof name, "%s/%s", prefix, key);
    if (!nb_tensor_map_contains(m, name)) return NULL;
    return nb_tensor_map_get(m, name);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int nbt_case_names(const nb_tensor_map *m, char ***out)
{
    int n = nb_tensor_map_size(m), k = 0;
    char **names = calloc((size_t)n + 1, sizeof *names);
    assert_non_null(names);
    for (int i = 0; i < n; i++) {
        const char *full = nb_tensor_map_name(m, i);
        const char *slash = strrchr(full, '/');
        if (!slash) continue;
        size_t len = (size_t)(slash - full);
        bool dup = false;
        for (int j = 0; j < k && !dup; j++) dup = strlen(names[j]) == len && strncmp(names[j], full, len) == 0;
        if (dup) continue;
        names[k] = strndup(full, len);
        assert_non_null(names[k]);
        k++;
    }
    qsort(names, (size_t)k, sizeof *names, cmp_str);
    *out = names;
    return k;
}

void nbt_free_names(char **names, int n)
{
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

void nbt_run_reference(const char *family, int min_cases, nbt_case_fn fn)
{
    nb_tensor_map *m = nbt_load_ref(family);
    char **names;
    int n = nbt_case_names(m, &names);
    if (n < min_cases) {
        print_error("%s: %d reference cases, expected at least %d\n", family, n, min_cases);
        fail();
    }
    for (int i = 0; i < n; i++) {
        for (int nc = 0; nc < 2; nc++) {
            nb_scope *s = nb_scope_begin();
            fn(m, names[i], nc == 1);
            nb_scope_end(s);
        }
    }
    nbt_free_names(names, n);
    nb_tensor_map_free(m);
}

static double *read_f64(const nb_tensor *t)
{
    int64_t n = nb_tensor_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    assert_non_null(v);
    nb_scope *s = nb_scope_begin();
    nb_tensor *c = NBT_CHECK(nb_to_dtype(t, NB_FLOAT64));
    NBT_OK(nb_tensor_read(c, v, (size_t)n * sizeof *v));
    nb_scope_end(s);
    return v;
}

void nbt_assert_close(const nb_tensor *got, const nb_tensor *want, double rtol, double atol, const char *what)
{
    if (!got || !want) {
        print_error("%s: %s tensor is NULL (%s)\n", what, got ? "expected" : "computed", nb_last_error());
        fail();
    }
    int nd = nb_tensor_ndim(got);
    if (nd != nb_tensor_ndim(want) ||
        memcmp(nb_tensor_shape(got), nb_tensor_shape(want), (size_t)nd * sizeof(int64_t)) != 0) {
        char a[256] = "", b[256] = "";
        for (int i = 0; i < nd; i++) snprintf(a + strlen(a), sizeof a - strlen(a), "%lld,", (long long)nb_tensor_shape(got)[i]);
        for (int i = 0; i < nb_tensor_ndim(want); i++)
            snprintf(b + strlen(b), sizeof b - strlen(b), "%lld,", (long long)nb_tensor_shape(want)[i]);
        print_error("%s: shape [%s] but expected [%s]\n", what, a, b);
        fail();
    }
    /* a float64 expectation (hand-computed, or a float64 reference) may check any dtype's values;
     * otherwise the result has the expectation's dtype (a float32 reference: a float32 result) */
    if (nb_tensor_dtype(want) != NB_FLOAT64 && nb_tensor_dtype(got) != nb_tensor_dtype(want)) {
        print_error("%s: dtype %s but expected %s\n", what, nb_dtype_name(nb_tensor_dtype(got)),
                    nb_dtype_name(nb_tensor_dtype(want)));
        fail();
    }
    int64_t n = nb_tensor_numel(got);
    double *g = read_f64(got), *w = read_f64(want);
    int64_t bad = -1;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(w[i]) || isnan(g[i])) {
            if (isnan(w[i]) != isnan(g[i]) && bad < 0) bad = i;
            continue;
        }
        if (isinf(w[i]) || isinf(g[i])) {
            if (g[i] != w[i] && bad < 0) bad = i;
            continue;
        }
        double err = fabs(g[i] - w[i]), lim = atol + rtol * fabs(w[i]);
        if (err > lim && (bad < 0 || err - lim > worst)) {
            bad = i;
            worst = err - lim;
        }
    }
    if (bad >= 0) {
        print_error("%s: element %lld is %.10g, expected %.10g (rtol %g, atol %g; %lld elements)\n", what,
                    (long long)bad, g[bad], w[bad], rtol, atol, (long long)n);
        free(g);
        free(w);
        fail();
    }
    free(g);
    free(w);
}

nb_tensor *nbt_noncontig(const nb_tensor *t)
{
    int nd = nb_tensor_ndim(t);
    if (nd == 0) return NBT_CHECK(nb_clone(t));
    int64_t shape[NB_MAX_DIMS];
    memcpy(shape, nb_tensor_shape(t), (size_t)nd * sizeof *shape);
    /* reversed dims, the last doubled: then slice with step 2 and permute back */
    int64_t big[NB_MAX_DIMS], perm[NB_MAX_DIMS];
    for (int i = 0; i < nd; i++) big[i] = shape[nd - 1 - i];
    big[nd - 1] *= 2;
    for (int i = 0; i < nd; i++) perm[i] = nd - 1 - i;
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = nb_tensor_dtype(t);
    p.device = nb_tensor_device(t);
    nb_tensor *buf = NBT_CHECK(nb_full(big, nd, 12345.0, &p));
    nb_tensor *half = NBT_CHECK(nb_slice(buf, nd - 1, 1, big[nd - 1], 2));
    nb_tensor *v = NBT_CHECK(nb_permute(half, perm, nd));
    NBT_OK(nb_copy_(v, t));
    return v;
}

nb_tensor *nbt_leaf(const nb_tensor *t)
{
    bool prev = nb_set_grad_enabled(false);
    nb_tensor *c = NBT_CHECK(nb_clone(t));
    nb_set_grad_enabled(prev);
    NBT_OK(nb_tensor_set_requires_grad(c, true));
    return c;
}

/* f(inputs) reduced with the fixed weights w: sum(f * w) as a double. */
static double weighted(nbt_fn f, void *ctx, nb_tensor *const *inputs, int n, const nb_tensor *w)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *y = NBT_CHECK(f(inputs, n, ctx));
    nb_tensor *yw = NBT_CHECK(nb_mul(nb_to_dtype(y, NB_FLOAT64), w));
    nb_tensor *tot = NBT_CHECK(nb_sum(yw, NULL, 0, false));
    double v;
    NBT_OK(nb_item(tot, &v));
    nb_scope_end(s);
    return v;
}

void nbt_gradcheck(nbt_fn f, void *ctx, nb_tensor *const *inputs, int n, double eps, double atol, double rtol,
                   const char *what)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *leaves[8];
    assert_true(n <= 8);
    for (int i = 0; i < n; i++)
        leaves[i] = nb_dtype_is_floating(nb_tensor_dtype(inputs[i])) ? nbt_leaf(inputs[i]) : inputs[i];
    nb_tensor *y = NBT_CHECK(f(leaves, n, ctx));
    nb_tensor_params p = nb_tensor_params_default();
    p.dtype = NB_FLOAT64;
    nb_generator *gen = nb_generator_create(1234);
    p.generator = gen;
    nb_tensor *w = NBT_CHECK(nb_randn(nb_tensor_shape(y), nb_tensor_ndim(y), &p));
    nb_generator_free(gen);
    nb_tensor *loss = NBT_CHECK(nb_sum(nb_mul(nb_to_dtype(y, NB_FLOAT64), w), NULL, 0, false));
    NBT_OK(nb_backward(loss, NULL, NB_BACKWARD_DEFAULT));
    for (int i = 0; i < n; i++) {
        if (!nb_tensor_requires_grad(leaves[i])) continue;
        nb_tensor *grad = nb_tensor_grad(leaves[i]);
        int64_t m = nb_tensor_numel(leaves[i]);
        double *num = calloc((size_t)(m ? m : 1), sizeof *num);
        assert_non_null(num);
        bool prev = nb_set_grad_enabled(false);
        nb_tensor *x = nb_contiguous(leaves[i]);
        double *xd = x ? nb_tensor_data_ptr(x) : NULL;
        nb_tensor *args[8];
        memcpy(args, leaves, (size_t)n * sizeof *args);
        args[i] = x;
        for (int64_t k = 0; xd && nb_tensor_dtype(x) == NB_FLOAT64 && k < m; k++) {
            double orig = xd[k];
            xd[k] = orig + eps;
            double fp = weighted(f, ctx, args, n, w);
            xd[k] = orig - eps;
            double fm = weighted(f, ctx, args, n, w);
            xd[k] = orig;
            num[k] = (fp - fm) / (2 * eps);
        }
        nb_set_grad_enabled(prev); /* before any assertion: a failure must not leave grad mode off */
        assert_true(xd && nb_tensor_dtype(x) == NB_FLOAT64);
        nb_tensor *numt = NBT_CHECK(nb_tensor_from_data(num, nb_tensor_shape(x), nb_tensor_ndim(x), &p));
        free(num);
        char label[256];
        snprintf(label, sizeof label, "%s: gradient of input %d vs finite differences", what, i);
        if (!grad) grad = NBT_CHECK(nb_zeros_like(numt));
        nbt_assert_close(grad, numt, rtol, atol, label);
    }
    nb_scope_end(s);
}

/* ---- CUDA tests ---------------------------------------------------------------------------- */

bool nbt_cuda_missing(void)
{
    if (nb_cuda_device_count() > 0) return false;
    const char *req = getenv("NB_REQUIRE_CUDA");
    if (req && strcmp(req, "1") == 0) { /* a GPU machine: a broken driver must not read as "skipped" */
        printf("FAILED: NB_REQUIRE_CUDA=1 but no CUDA device (%s; %s)\n",
               nb_cuda_is_built() ? "built with CUDA" : "built without CUDA", nb_last_error());
        exit(1);
    }
    printf("SKIPPED: no CUDA device (%s)\n", nb_cuda_is_built() ? "built with CUDA" : "built without CUDA");
    return true;
}

nb_tensor *nbt_to_cuda(const nb_tensor *t) { return NBT_CHECK(nb_to(t, NBT_CUDA0)); }

void nbt_assert_close_host(const nb_tensor *got, const nb_tensor *want, double tol, const char *what)
{
    nb_tensor *g = NBT_CHECK(nb_to(got, nb_cpu()));
    assert_int_equal(nb_tensor_dtype(g), nb_tensor_dtype(want));
    nbt_assert_close(g, want, tol, tol, what);
}

double nbt_max_rel_err(const nb_tensor *got, const nb_tensor *want)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *g = NBT_CHECK(nb_contiguous(NBT_CHECK(nb_to_dtype(got, NB_FLOAT64))));
    nb_tensor *w = NBT_CHECK(nb_contiguous(NBT_CHECK(nb_to_dtype(want, NB_FLOAT64))));
    assert_int_equal(nb_tensor_numel(g), nb_tensor_numel(w));
    const double *a = nb_tensor_data_ptr(g), *b = nb_tensor_data_ptr(w);
    double num = 0, den = 0;
    for (int64_t i = 0; i < nb_tensor_numel(w); i++) {
        num = fmax(num, fabs(a[i] - b[i]));
        den = fmax(den, fabs(b[i]));
    }
    nb_scope_end(s);
    return num / den;
}

double nbt_rel_err_host(const nb_tensor *got, const nb_tensor *want)
{
    nb_scope *s = nb_scope_begin();
    nb_tensor *g = NBT_CHECK(nb_to_dtype(NBT_CHECK(nb_to(got, nb_cpu())), NB_FLOAT64));
    nb_tensor *w = NBT_CHECK(nb_to_dtype(NBT_CHECK(nb_to(want, nb_cpu())), NB_FLOAT64));
    assert_int_equal(nb_tensor_numel(g), nb_tensor_numel(w));
    size_t n = (size_t)nb_tensor_numel(g);
    double *x = malloc(2 * n * sizeof *x + 1), num = 0, den = 0;
    assert_non_null(x);
    NBT_OK(nb_tensor_read(g, x, n * sizeof *x));
    NBT_OK(nb_tensor_read(w, x + n, n * sizeof *x));
    for (size_t i = 0; i < n; i++) num += (x[i] - x[n + i]) * (x[i] - x[n + i]), den += x[n + i] * x[n + i];
    free(x);
    nb_scope_end(s);
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* ---- which CPU kernels a run tests ---------------------------------------------------------- */

/* 1 when the kernel's first "flags" line in /proc/cpuinfo names flag, 0 when not, -1 when there
 * is no such line (not Linux on x86). */
static int cpuinfo_has(const char *flag)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return -1;
    char line[8192];
    int found = -1;
    size_t n = strlen(flag);
    while (found < 0 && fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) != 0) continue;
        found = 0;
        for (const char *p = strstr(line, flag); p && !found; p = strstr(p + 1, flag))
            found = p[-1] == ' ' && (p[n] == ' ' || p[n] == '\n' || p[n] == '\0');
    }
    fclose(f);
    return found;
}

void nbt_check_isa(void)
{
    const char *cap = getenv("NABLA_MAX_CPU_ISA"), *req = getenv("NB_REQUIRE_ISA");
    bool capped = cap && strcasecmp(cap, "avx2") == 0, own = nb_cpu_avx512();
    int cpu = cpuinfo_has("avx512f");
    if (own)
        printf("CPU kernels: nabla's AVX-512 ones\n");
    else
        printf("CPU kernels: portable (%s)\n", capped ? "NABLA_MAX_CPU_ISA=avx2"
                                                : cpu == 0 ? "this CPU has no AVX-512F"
                                                           : "AVX-512F not found");
    if (cpu >= 0 && own != (cpu == 1 && !capped)) {
        printf("FAILED: /proc/cpuinfo %s avx512f%s, but nabla's AVX-512 kernels are %s\n", cpu ? "lists" : "lacks",
               capped ? " (NABLA_MAX_CPU_ISA=avx2)" : "", own ? "on" : "off");
        exit(1);
    }
    if (req && *req) {
        if (strcasecmp(req, "avx512") != 0) {
            printf("FAILED: NB_REQUIRE_ISA=%s: the one value is avx512\n", req);
            exit(1);
        }
        if (cpu != 1) {
            printf("FAILED: NB_REQUIRE_ISA=avx512, but /proc/cpuinfo %s: nabla's AVX-512 kernels cannot be tested "
                   "here\n", cpu == 0 ? "lacks avx512f" : "cannot be read");
            exit(1);
        }
    }
}

int64_t nbt_profiled_calls(const char *op)
{
    nb_profile_entry e[256];
    int n = nb_profiler_entries(e, 256);
    for (int i = 0; i < n && i < 256; i++)
        if (!strcmp(e[i].name, op)) return e[i].calls;
    return 0;
}

int nbt_dir_entries(const char *dir, int *tmp)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    *tmp = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        n++;
        if (strstr(e->d_name, ".tmp.")) ++*tmp;
    }
    closedir(d);
    return n;
}

float *nbt_filled_floats(int64_t count, unsigned *seed, float lo_scale)
{
    float *x = NBT_CHECK(malloc((size_t)count * sizeof(float)));
    for (int64_t i = 0; i < count; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        float u = (float)((*seed >> 8) * 0x1p-24) * 2.0f - 1.0f;
        x[i] = u * (i % 7 == 3 ? lo_scale : 1.0f);
    }
    return x;
}
