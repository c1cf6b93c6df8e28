/* Printing tensors the way PyTorch does (torch/_tensor_str.py, default print options: precision
 * 4, threshold 1000, edgeitems 3, linewidth 80).
 *
 * One formatter for the whole tensor (over the elements shown, when summarised) picks the mode:
 *   integer dtypes: "%lld", bool: True / False;
 *   floating: among the nonzero finite values, if all are integers: "1." (or scientific when
 *   max / min > 1000 or max > 1e8); otherwise "%.4f" (or scientific "%.4e" when max / min > 1000,
 *   max > 1e8 or min < 1e-4); nan and inf print as Python prints them.
 * Every element is right-aligned to the widest. Rows wrap at 80 columns; above 1000 elements
 * only the first and last 3 along each dim are shown, with "...". Suffixes follow for a device
 * other than the CPU, a dtype other than float32 / int64 / bool, the grad_fn or requires_grad.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"

#define PRECISION 4
#define THRESHOLD 1000
#define EDGEITEMS 3
#define LINEWIDTH 80

/* ---- a growing string ------------------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_putn(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_puts(sbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }

static void sb_spaces(sbuf *b, int n)
{
    for (int i = 0; i < n; i++) sb_putn(b, " ", 1);
}

/* ---- reading elements ------------------------------------------------------------------- */

typedef struct src {
    const char *base; /* element 0 */
    nb_dtype dt;
    int ndim;
    const int64_t *shape;
    int64_t strides[NB_MAX_DIMS]; /* elements */
} src;

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v;
    if (e == 0) v = ldexpf((float)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexpf((float)(m | 0x400), (int)e - 25);
    return sign ? -v : v;
}

static double get_f(const src *s, int64_t off)
{
    const char *p = s->base + off * (int64_t)nb_dtype_size(s->dt);
    uint16_t h;
    uint32_t u;
    float f;
    switch (s->dt) {
    case NB_FLOAT32: return *(const float *)p;
    case NB_FLOAT64: return *(const double *)p;
    case NB_FLOAT16: memcpy(&h, p, 2); return half_to_float(h);
    case NB_BFLOAT16:
        memcpy(&h, p, 2);
        u = (uint32_t)h << 16;
        memcpy(&f, &u, 4);
        return f;
    default: return 0;
    }
}

static int64_t get_i(const src *s, int64_t off)
{
    const char *p = s->base + off * (int64_t)nb_dtype_size(s->dt);
    switch (s->dt) {
    case NB_INT64: return *(const int64_t *)p;
    case NB_INT32: return *(const int32_t *)p;
    case NB_UINT8: return *(const uint8_t *)p;
    case NB_BOOL: return *(const bool *)p;
    default: return 0;
    }
}

/* Calls fn on the element offset of every element shown (all, or the edges when summarised). */
typedef void (*visit_fn)(void *ctx, const src *s, int64_t off);

static void visit(const src *s, int d, int64_t off, bool summarize, visit_fn fn, void *ctx)
{
    if (d == s->ndim) {
        fn(ctx, s, off);
        return;
    }
    int64_t n = s->shape[d];
    bool cut = summarize && n > 2 * EDGEITEMS;
    for (int64_t i = 0; i < n; i++) {
        if (cut && i == EDGEITEMS) i = n - EDGEITEMS;
        visit(s, d + 1, off + i * s->strides[d], summarize, fn, ctx);
    }
}

/* ---- the formatter ------------------------------------------------------------------------ */

typedef struct formatter {
    bool floating, int_mode, sci_mode;
    int width;
    /* scan state */
    int64_t n_nonzero;
    double amin, amax;
} formatter;

/* Python's formatting of one value in the formatter's mode, unpadded; returns the length. */
static int format_value(const formatter *f, const src *s, int64_t off, char *out, size_t size)
{
    if (!f->floating) {
        if (s->dt == NB_BOOL) return snprintf(out, size, "%s", get_i(s, off) ? "True" : "False");
        return snprintf(out, size, "%lld", (long long)get_i(s, off));
    }
    double v = get_f(s, off);
    if (isnan(v)) return snprintf(out, size, "nan"); /* C may write "-nan" */
    if (isinf(v)) return snprintf(out, size, v < 0 ? "-inf" : "inf");
    if (f->sci_mode) return snprintf(out, size, "%.*e", PRECISION, v);
    if (f->int_mode) return snprintf(out, size, "%.0f.", v);
    return snprintf(out, size, "%.*f", PRECISION, v);
}

static void scan_range(void *ctx, const src *s, int64_t off)
{
    formatter *f = ctx;
    double v = get_f(s, off);
    if (!isfinite(v) || v == 0) return;
    double a = fabs(v);
    if (f->n_nonzero++ == 0) f->amin = f->amax = a;
    if (a < f->amin) f->amin = a;
    if (a > f->amax) f->amax = a;
    if (v != ceil(v)) f->int_mode = false;
}

static void scan_width(void *ctx, const src *s, int64_t off)
{
    formatter *f = ctx;
    if (f->floating) { /* widths come from the nonzero finite values only */
        double v = get_f(s, off);
        if (!isfinite(v) || v == 0) return;
    }
    char buf[64];
    int w = format_value(f, s, off, buf, sizeof buf);
    if (w > f->width) f->width = w;
}

static void formatter_init(formatter *f, const src *s, bool summarize)
{
    *f = (formatter){.floating = nb_dtype_is_floating(s->dt), .int_mode = true, .width = 1};
    if (f->floating) {
        visit(s, 0, 0, summarize, scan_range, f);
        if (f->n_nonzero == 0) return;
        double ratio = f->amax / f->amin;
        f->sci_mode = ratio > 1000.0 || f->amax > 1.0e8 || (!f->int_mode && f->amin < 1.0e-4);
    }
    visit(s, 0, 0, summarize, scan_width, f);
}

static void put_value(sbuf *b, const formatter *f, const src *s, int64_t off)
{
    char buf[64];
    int w = format_value(f, s, off, buf, sizeof buf);
    sb_spaces(b, f->width - w);
    sb_puts(b, buf);
}

/* ---- layout ----------------------------------------------------------------------------- */

static void put_vector(sbuf *b, const formatter *f, const src *s, int64_t off, int indent, bool summarize)
{
    int64_t n = s->shape[s->ndim - 1], st = s->strides[s->ndim - 1];
    int per_line = (LINEWIDTH - indent) / (f->width + 2);
    if (per_line < 1) per_line = 1;
    bool cut = summarize && n > 2 * EDGEITEMS;
    int64_t item = 0;
    sb_puts(b, "[");
    for (int64_t i = 0; i < n; i++, item++) {
        if (item > 0) {
            if (item % per_line == 0) {
                sb_puts(b, ",\n");
                sb_spaces(b, indent + 1);
            } else {
                sb_puts(b, ", ");
            }
        }
        if (cut && i == EDGEITEMS) {
            sb_puts(b, " ...");
            i = n - EDGEITEMS - 1;
            continue;
        }
        put_value(b, f, s, off + i * st);
    }
    sb_puts(b, "]");
}

static void put_tensor(sbuf *b, const formatter *f, const src *s, int d, int64_t off, int indent, bool summarize)
{
    int dims = s->ndim - d;
    if (dims == 0) {
        put_value(b, f, s, off);
        return;
    }
    if (dims == 1) {
        put_vector(b, f, s, off, indent, summarize);
        return;
    }
    int64_t n = s->shape[d];
    bool cut = summarize && n > 2 * EDGEITEMS;
    sb_puts(b, "[");
    for (int64_t i = 0; i < n; i++) {
        if (i > 0) {
            sb_puts(b, ",");
            for (int k = 0; k < dims - 1; k++) sb_puts(b, "\n");
            sb_spaces(b, indent + 1);
        }
        if (cut && i == EDGEITEMS) {
            sb_puts(b, "...");
            i = n - EDGEITEMS - 1;
            continue;
        }
        put_tensor(b, f, s, d + 1, off + i * s->strides[d], indent + 1, summarize);
    }
    sb_puts(b, "]");
}

/* PyTorch's _add_suffixes: ", suffix" while the line stays within 80 columns, else a new line. */
static void put_suffixes(sbuf *b, char suffixes[][96], int n, int indent)
{
    if (b->oom) return;
    const char *nl = NULL;
    for (size_t i = b->len; i > 0; i--) {
        if (b->p[i - 1] == '\n') {
            nl = b->p + i - 1;
            break;
        }
    }
    int64_t last = (int64_t)b->len - (nl ? (int64_t)(nl - b->p) : -1) + 1;
    for (int i = 0; i < n; i++) {
        int64_t len = (int64_t)strlen(suffixes[i]);
        if (last + len + 2 > LINEWIDTH) {
            sb_puts(b, ",\n");
            sb_spaces(b, indent);
            last = indent + len;
        } else {
            sb_puts(b, ", ");
            last += len + 2;
        }
        sb_puts(b, suffixes[i]);
    }
    sb_puts(b, ")");
}

/* The values and suffixes of t into b; host is t's values on the host when t is on a device
 * (contiguous), else NULL. */
static void format_into(sbuf *b, const nb_tensor *t, const void *host)
{
    static const char prefix[] = "tensor(";
    const int indent = (int)sizeof prefix - 1;
    char suffixes[4][96];
    int ns = 0;
    int64_t numel = nb__numel(t->shape, t->ndim);
    nb_device dev = t->storage->device;
    if (dev.type != NB_DEVICE_CPU) {
        char d[48];
        nb_device_str(dev, d, sizeof d);
        snprintf(suffixes[ns++], 96, "device='%s'", d);
    }
    sb_puts(b, prefix);
    if (numel == 0) {
        sb_puts(b, "[]");
        if (t->ndim != 1) {
            int k = snprintf(suffixes[ns], 96, "size=(");
            for (int i = 0; i < t->ndim && k < 80; i++)
                k += snprintf(suffixes[ns] + k, (size_t)(96 - k), i ? ", %lld" : "%lld", (long long)t->shape[i]);
            snprintf(suffixes[ns] + k, (size_t)(96 - k), ")");
            ns++;
        }
        if (t->dtype != NB_FLOAT32) snprintf(suffixes[ns++], 96, "dtype=torch.%s", nb_dtype_name(t->dtype));
    } else {
        if (t->dtype != NB_FLOAT32 && t->dtype != NB_INT64 && t->dtype != NB_BOOL)
            snprintf(suffixes[ns++], 96, "dtype=torch.%s", nb_dtype_name(t->dtype));
        src s = {.base = host ? host : nb__data(t), .dt = t->dtype, .ndim = t->ndim, .shape = t->shape};
        if (host) nb__contiguous_strides(t->shape, t->ndim, s.strides);
        else memcpy(s.strides, t->strides, sizeof s.strides);
        bool summarize = numel > THRESHOLD;
        formatter f;
        formatter_init(&f, &s, summarize);
        put_tensor(b, &f, &s, 0, 0, indent, summarize);
    }
    const char *fn = nb_tensor_grad_fn_name(t);
    if (fn) snprintf(suffixes[ns++], 96, "grad_fn=<%s>", fn);
    else if (t->requires_grad) snprintf(suffixes[ns++], 96, "requires_grad=True");
    put_suffixes(b, suffixes, ns, indent);
}

/* The whole string, malloc'd; NULL with an error on failure. */
static char *format_alloc(const nb_tensor *t, size_t *len)
{
    void *host = NULL;
    if (t->storage->device.type != NB_DEVICE_CPU) {
        size_t nbytes = (size_t)nb__numel(t->shape, t->ndim) * nb_dtype_size(t->dtype);
        host = malloc(nbytes ? nbytes : 1);
        if (!host) return nb__err_null(NB_ERR_OOM, "tensor_format: out of host memory for %zu bytes", nbytes);
        if (nb_tensor_read(t, host, nbytes) != NB_OK) {
            free(host);
            return NULL;
        }
    }
    sbuf b = {0};
    format_into(&b, t, host);
    free(host);
    if (b.oom) {
        free(b.p);
        return nb__err_null(NB_ERR_OOM, "tensor_format: out of host memory");
    }
    *len = b.len;
    return b.p;
}

int nb_tensor_format(const nb_tensor *t, char *buf, size_t size)
{
    if (buf && size) buf[0] = 0;
    if (!t) return nb__err(NB_ERR_INVALID_ARG, "tensor_format: NULL tensor"), -1;
    if (!buf && size) return nb__err(NB_ERR_INVALID_ARG, "tensor_format: NULL buffer of size %zu", size), -1;
    size_t len = 0;
    char *s = format_alloc(t, &len);
    if (!s) return -1;
    if (size) {
        size_t n = len < size - 1 ? len : size - 1;
        memcpy(buf, s, n);
        buf[n] = 0;
    }
    free(s);
    return len > (size_t)INT32_MAX ? INT32_MAX : (int)len;
}

nb_status nb_tensor_print(const nb_tensor *t, FILE *f)
{
    if (!t || !f) return nb__err(NB_ERR_INVALID_ARG, "tensor_print: NULL %s", t ? "FILE" : "tensor");
    size_t len = 0;
    char *s = format_alloc(t, &len);
    if (!s) return nb_last_status();
    bool ok = fwrite(s, 1, len, f) == len && fputc('\n', f) != EOF;
    free(s);
    return ok ? NB_OK : nb__err(NB_ERR_IO, "tensor_print: write failed");
}
