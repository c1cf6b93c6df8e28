/* Matrix products: matmul, mm, bmm, addmm, linear. Every product runs as one BMM kernel call
 * (NB_OP_BMM: out[b] = s1 out[b] + s0 a[b] @ b[b], any strides). mm and 2-D matmul record an
 * MM node, bmm and batched matmul a BMM node (matmul's other steps are views, which record
 * their own); addmm and linear record
 * their own nodes so that their backward is one GEMM per matrix gradient. Rules in
 * src/autograd/rules_linalg.c. */
#include <math.h>
#include <string.h>

#include "autograd/autograd_impl.h"

#define SHAPE(t) nb__shape_str((t)->shape, (t)->ndim, (char[NB_SHAPE_STR_MAX]){0})

/* Same dtype (PyTorch does not promote in products), and one the kernels multiply. */
static nb_status check_dtypes(const char *op, const char *na, const nb_tensor *a, const char *nbn, const nb_tensor *b)
{
    if (a->dtype != b->dtype)
        return nb__err(NB_ERR_DTYPE, "%s: dtypes differ (%s %s, %s %s)", op, na, nb_dtype_name(a->dtype), nbn,
                       nb_dtype_name(b->dtype));
    if (a->dtype == NB_BOOL) return nb__err(NB_ERR_DTYPE, "%s: dtype bool is not supported", op);
    return NB_OK;
}

static nb_status check_pair(const char *op, const nb_tensor *a, const nb_tensor *b)
{
    const nb_tensor *in[2] = {a, b};
    NB_TRY(nb__check_inputs(op, in, 2));
    return check_dtypes(op, "a", a, "b", b);
}

/* A 3-D view of a 2-D or 3-D tensor (batch 1, stride 0). Caller-owned. */
static nb_tensor *as3(const nb_tensor *t)
{
    if (t->ndim == 3) return nb__tensor_alias(t, t->shape, t->strides, 3, t->offset);
    int64_t shape[3] = {1, t->shape[0], t->shape[1]}, strides[3] = {0, t->strides[0], t->strides[1]};
    return nb__tensor_alias(t, shape, strides, 3, t->offset);
}

/* out = beta * out + alpha * a @ b, for out, a, b all 2-D or all 3-D with one batch size.
 * beta == 0 ignores out's values. With bias (out's shape as 3-D, a broadcast view; beta 0):
 * out = alpha * a @ b + bias, which the kernel may add as it writes the product. */
static nb_status gemm_bias_into(nb_tensor *out, const nb_tensor *a, const nb_tensor *b, const nb_tensor *bias,
                                double beta, double alpha)
{
    nb_tensor *o3 = as3(out), *a3 = as3(a), *b3 = as3(b);
    nb_status st = (o3 && a3 && b3) ? NB_OK : nb_last_status();
    if (st == NB_OK) {
        nb_kargs k = {.out = o3, .in = {a3, b3, bias}, .s0 = alpha, .s1 = beta};
        st = nb__dispatch(NB_OP_BMM, &k);
    }
    nb__release(o3);
    nb__release(a3);
    nb__release(b3);
    return st;
}

static nb_status gemm_into(nb_tensor *out, const nb_tensor *a, const nb_tensor *b, double beta, double alpha)
{
    return gemm_bias_into(out, a, b, NULL, beta, alpha);
}

nb_status nb__mm_accumulate(nb_tensor *out, const nb_tensor *a, const nb_tensor *b, double alpha)
{
    NB_TRY(gemm_into(out, a, b, 1, alpha));
    nb__bump_version(out);
    return NB_OK;
}

/* A new [.., M, N] tensor: beta * init (broadcast; NULL or beta 0: none) + alpha * a @ b, for a
 * [.., M, K] and b [.., K, N] both 2-D or both 3-D with one batch size. Caller-owned. */
static nb_tensor *gemm_new(const nb_tensor *a, const nb_tensor *b, const nb_tensor *init, double beta, double alpha)
{
    int nd = a->ndim;
    int64_t shape[3] = {a->shape[0], a->shape[nd - 2], b->shape[nd - 1]};
    if (nd == 2) shape[0] = a->shape[0], shape[1] = b->shape[1];
    nb_tensor *out = nb__tensor_new(shape, nd, a->dtype, a->storage->device);
    if (!out) return NULL;
    nb_status st = NB_OK;
    if (init && beta != 0) {
        nb_kargs c = {.out = out, .in = {init}};
        st = nb__dispatch(NB_OP_COPY, &c);
    } else {
        beta = 0;
    }
    if (st == NB_OK) st = gemm_into(out, a, b, beta, alpha);
    if (st != NB_OK) {
        nb__release(out);
        return NULL;
    }
    return out;
}

/* Records node `op` for out with the saved tensors and parameters, and hands out to the scope.
 * Each matrix operand's gradient needs the other one only: save[] holds NULL where not needed. */
static nb_tensor *finish(nb_op op, nb_tensor *out, const nb_tensor *const *in, int n, const nb_tensor *const *save,
                         double s0, double s1)
{
    nb_status st;
    nb_node *node = nb__record(op, out, in, n, save, 2, &st);
    if (st != NB_OK) {
        nb__release(out);
        return NULL;
    }
    if (node) {
        node->s0 = s0;
        node->s1 = s1;
    }
    return nb__track(out);
}

/* a @ b for validated a, b both 2-D (an MM node, as PyTorch's mm) or both 3-D with one batch
 * size (a BMM node). */
static nb_tensor *product(const nb_tensor *a, const nb_tensor *b)
{
    nb_tensor *out = gemm_new(a, b, NULL, 0, 1);
    const nb_tensor *in[2] = {a, b};
    const nb_tensor *save[2] = {nb_tensor_requires_grad(b) ? a : NULL, nb_tensor_requires_grad(a) ? b : NULL};
    return out ? finish(a->ndim == 2 ? NB_OP_MM : NB_OP_BMM, out, in, 2, save, 0, 1) : NULL;
}

nb_tensor *nb_mm(const nb_tensor *a, const nb_tensor *b)
{
    if (check_pair("mm", a, b) != NB_OK) return NULL;
    if (a->ndim != 2 || b->ndim != 2)
        return nb__err_null(NB_ERR_SHAPE, "mm: expected 2-D matrices (a %s, b %s)", SHAPE(a), SHAPE(b));
    if (a->shape[1] != b->shape[0])
        return nb__err_null(NB_ERR_SHAPE, "mm: inner dims differ (a %s, b %s)", SHAPE(a), SHAPE(b));
    return product(a, b);
}

nb_tensor *nb_bmm(const nb_tensor *a, const nb_tensor *b)
{
    if (check_pair("bmm", a, b) != NB_OK) return NULL;
    if (a->ndim != 3 || b->ndim != 3)
        return nb__err_null(NB_ERR_SHAPE, "bmm: expected 3-D tensors (a %s, b %s)", SHAPE(a), SHAPE(b));
    if (a->shape[0] != b->shape[0])
        return nb__err_null(NB_ERR_SHAPE, "bmm: batch sizes differ (a %s, b %s)", SHAPE(a), SHAPE(b));
    if (a->shape[2] != b->shape[1])
        return nb__err_null(NB_ERR_SHAPE, "bmm: inner dims differ (a %s, b %s)", SHAPE(a), SHAPE(b));
    return product(a, b);
}

/* ---- matmul ------------------------------------------------------------------------------- */

/* Both at most 2-D: vectors become [1, K] / [K, 1], one mm, and the added dims go again. */
static nb_tensor *matmul_2d(const nb_tensor *a, const nb_tensor *b)
{
    nb_tensor *a2 = a->ndim == 1 ? nb_unsqueeze(a, 0) : (nb_tensor *)a;
    nb_tensor *b2 = b->ndim == 1 ? nb_unsqueeze(b, 1) : (nb_tensor *)b;
    nb_tensor *r = a2 && b2 ? product(a2, b2) : NULL;
    if (!r || (a->ndim == 2 && b->ndim == 2)) return r; /* the product itself, as PyTorch's (MmBackward0) */
    int64_t shape[2];
    int nd = 0;
    if (a->ndim == 2) shape[nd++] = a->shape[0];
    if (b->ndim == 2) shape[nd++] = b->shape[1];
    return nb_view(r, shape, nd);
}

/* a of 3+ dims, b of 1 or 2: a's batch and row dims fold into one, for one mm (as PyTorch). */
static nb_tensor *matmul_fold(const nb_tensor *a, const nb_tensor *b)
{
    int64_t k = a->shape[a->ndim - 1], rows = nb__numel(a->shape, a->ndim - 1);
    int64_t flat[2] = {rows, k}, shape[NB_MAX_DIMS];
    nb_tensor *a2 = nb_reshape(a, flat, 2);
    nb_tensor *b2 = b->ndim == 1 ? nb_unsqueeze(b, 1) : (nb_tensor *)b;
    nb_tensor *r = a2 && b2 ? product(a2, b2) : NULL;
    if (!r) return NULL;
    int nd = a->ndim - 1;
    memcpy(shape, a->shape, (size_t)nd * sizeof *shape);
    if (b->ndim == 2) shape[nd++] = b->shape[1];
    return nb_view(r, shape, nd);
}

/* t [..., r, c] as [nbatch, r, c] over the broadcast batch dims (views; expand only if needed). */
static nb_tensor *batch3(nb_tensor *t, const int64_t *batch, int nbat, int64_t r, int64_t c)
{
    int64_t e[NB_MAX_DIMS + 2];
    memcpy(e, batch, (size_t)nbat * sizeof *e);
    e[nbat] = r;
    e[nbat + 1] = c;
    bool same = t->ndim == nbat + 2 && memcmp(t->shape, e, (size_t)t->ndim * sizeof *e) == 0;
    nb_tensor *x = same ? t : nb_expand(t, e, nbat + 2);
    if (!x || nbat == 1) return x;
    return nb_reshape(x, (int64_t[3]){nb__numel(batch, nbat), r, c}, 3);
}

/* The general case: batch dims broadcast, each side expanded and flattened to one batch dim. */
static nb_tensor *matmul_batched(const nb_tensor *a, const nb_tensor *b)
{
    nb_tensor *a2 = a->ndim == 1 ? nb_unsqueeze(a, 0) : (nb_tensor *)a;
    nb_tensor *b2 = b->ndim == 1 ? nb_unsqueeze(b, 1) : (nb_tensor *)b;
    if (!a2 || !b2) return NULL;
    int64_t batch[NB_MAX_DIMS + 2];
    int nbat;
    if (nb__broadcast_shapes("matmul", a2->shape, a2->ndim - 2, b2->shape, b2->ndim - 2, batch, &nbat) != NB_OK)
        return nb__err_null(NB_ERR_SHAPE, "matmul: batch dims do not broadcast (a %s, b %s)", SHAPE(a), SHAPE(b));
    int64_t m = a2->shape[a2->ndim - 2], k = a2->shape[a2->ndim - 1], n = b2->shape[b2->ndim - 1];
    nb_tensor *a3 = batch3(a2, batch, nbat, m, k), *b3 = a3 ? batch3(b2, batch, nbat, k, n) : NULL;
    nb_tensor *r = b3 ? product(a3, b3) : NULL;
    if (!r) return NULL;
    int nd = nbat;
    if (a->ndim > 1) batch[nd++] = m;
    if (b->ndim > 1) batch[nd++] = n;
    return nb_view(r, batch, nd);
}

nb_tensor *nb_matmul(const nb_tensor *a, const nb_tensor *b)
{
    if (check_pair("matmul", a, b) != NB_OK) return NULL;
    if (a->ndim == 0 || b->ndim == 0)
        return nb__err_null(NB_ERR_SHAPE, "matmul: both arguments need at least 1 dim (a %s, b %s)", SHAPE(a),
                            SHAPE(b));
    int64_t ka = a->shape[a->ndim - 1], kb = b->shape[b->ndim == 1 ? 0 : b->ndim - 2];
    if (ka != kb) return nb__err_null(NB_ERR_SHAPE, "matmul: inner dims differ (a %s, b %s)", SHAPE(a), SHAPE(b));
    nb_scope *s = nb_scope_begin();
    if (!s) return NULL;
    nb_tensor *r;
    if (a->ndim <= 2 && b->ndim <= 2) r = matmul_2d(a, b);
    else if (b->ndim <= 2) r = matmul_fold(a, b);
    else r = matmul_batched(a, b);
    return nb_scope_end_keep(s, r);
}

/* ---- addmm and linear ---------------------------------------------------------------------- */

/* Integer products take integral scale factors only, as in PyTorch. */
static nb_status check_scales(const char *op, nb_dtype dt, double beta, double alpha)
{
    if (!nb_dtype_is_floating(dt) && (beta != trunc(beta) || alpha != trunc(alpha) || !isfinite(beta) || !isfinite(alpha)))
        return nb__err(NB_ERR_INVALID_ARG, "%s: beta and alpha must be integers for dtype %s (beta %g, alpha %g)", op,
                       nb_dtype_name(dt), beta, alpha);
    return NB_OK;
}

/* Whether t (shape `shape`, ndim dims) broadcasts to `shape` without growing. */
static bool broadcasts_to(const nb_tensor *t, const int64_t *shape, int ndim)
{
    if (t->ndim > ndim) return false;
    for (int i = 0; i < t->ndim; i++) {
        int64_t d = t->shape[t->ndim - 1 - i];
        if (d != 1 && d != shape[ndim - 1 - i]) return false;
    }
    return true;
}

nb_tensor *nb_addmm(const nb_tensor *input, const nb_tensor *a, const nb_tensor *b, double beta, double alpha)
{
    const nb_tensor *in[3] = {input, a, b};
    if (nb__check_inputs("addmm", in, 3) != NB_OK || check_dtypes("addmm", "a", a, "b", b) != NB_OK ||
        check_dtypes("addmm", "input", input, "a", a) != NB_OK || check_scales("addmm", a->dtype, beta, alpha) != NB_OK)
        return NULL;
    if (a->ndim != 2 || b->ndim != 2)
        return nb__err_null(NB_ERR_SHAPE, "addmm: expected 2-D matrices (a %s, b %s)", SHAPE(a), SHAPE(b));
    if (a->shape[1] != b->shape[0])
        return nb__err_null(NB_ERR_SHAPE, "addmm: inner dims differ (a %s, b %s)", SHAPE(a), SHAPE(b));
    int64_t shape[2] = {a->shape[0], b->shape[1]};
    if (!broadcasts_to(input, shape, 2))
        return nb__err_null(NB_ERR_SHAPE, "addmm: input %s does not broadcast to the product's shape %s", SHAPE(input),
                            nb__shape_str(shape, 2, (char[NB_SHAPE_STR_MAX]){0}));
    nb_tensor *out = gemm_new(a, b, input, beta, alpha);
    const nb_tensor *save[2] = {nb_tensor_requires_grad(b) ? a : NULL, nb_tensor_requires_grad(a) ? b : NULL};
    return out ? finish(NB_OP_ADDMM, out, in, 3, save, beta, alpha) : NULL;
}

/* x [..., in] as a [rows, in] matrix without copying when its leading dims merge into one
 * (else a contiguous copy). Caller-owned; no autograd. */
static nb_tensor *flatten_rows(const nb_tensor *x, int64_t rows)
{
    int nd = x->ndim;
    int64_t in = x->shape[nd - 1], stride = in, inner = -1;
    bool merge = true;
    for (int i = nd - 2; i >= 0; i--) {
        if (x->shape[i] == 1) continue;
        if (inner < 0) stride = x->strides[i];
        else if (x->strides[i] != x->strides[inner] * x->shape[inner]) merge = false;
        inner = i;
    }
    int64_t shape[2] = {rows, in}, strides[2] = {stride, nd ? x->strides[nd - 1] : 1};
    if (merge) return nb__tensor_alias(x, shape, strides, 2, x->offset);
    nb_tensor *c = nb__tensor_new(x->shape, x->ndim, x->dtype, x->storage->device);
    nb_kargs k = {.out = c, .in = {x}};
    if (!c || nb__dispatch(NB_OP_COPY, &k) != NB_OK) {
        nb__release(c);
        return NULL;
    }
    nb_tensor *v = nb__tensor_alias(c, shape, (int64_t[2]){in, 1}, 2, 0);
    nb__release(c);
    return v;
}

static nb_status check_linear(const nb_tensor *x, const nb_tensor *w, const nb_tensor *bias)
{
    const nb_tensor *in[3] = {x, w, bias};
    NB_TRY(nb__check_inputs("linear", in, bias ? 3 : 2));
    NB_TRY(check_dtypes("linear", "x", x, "weight", w));
    if (bias) NB_TRY(check_dtypes("linear", "x", x, "bias", bias));
    if (w->ndim != 2) return nb__err(NB_ERR_SHAPE, "linear: weight must be 2-D [out, in], not %s", SHAPE(w));
    if (x->ndim == 0) return nb__err(NB_ERR_SHAPE, "linear: x must have at least 1 dim, not %s", SHAPE(x));
    if (x->shape[x->ndim - 1] != w->shape[1])
        return nb__err(NB_ERR_SHAPE, "linear: inner dims differ (x %s, weight %s)", SHAPE(x), SHAPE(w));
    return NB_OK;
}

/* The bias of a linear layer on the CPU as a [1, rows, out] view for the product's kernel to add
 * (src/cpu/ops/gemm.c, which adds a float32 row as it writes the product): *row false (and
 * NULL) where the bias is not one row, [out] or [1, out] or a single value, or lives elsewhere,
 * and it is copied into the output first. NULL with *row true: out of memory. */
static nb_tensor *bias_row(const nb_tensor *bias, int64_t rows, int64_t outf, bool *row)
{
    int nd = bias->ndim;
    *row = bias->storage->device.type == NB_DEVICE_CPU;
    for (int i = 0; i < nd - 1; i++) *row = *row && bias->shape[i] == 1;
    if (!*row) return NULL;
    int64_t shape[3] = {1, rows, outf}, strides[3] = {0, 0, nd && bias->shape[nd - 1] > 1 ? bias->strides[nd - 1] : 0};
    return nb__tensor_alias(bias, shape, strides, 3, bias->offset);
}

nb_tensor *nb_linear(const nb_tensor *x, const nb_tensor *weight, const nb_tensor *bias)
{
    if (check_linear(x, weight, bias) != NB_OK) return NULL;
    int nd = x->ndim;
    int64_t shape[NB_MAX_DIMS], rows = nb__numel(x->shape, nd - 1), outf = weight->shape[0];
    memcpy(shape, x->shape, sizeof shape);
    shape[nd - 1] = outf;
    if (bias && !broadcasts_to(bias, shape, nd))
        return nb__err_null(NB_ERR_SHAPE, "linear: bias %s does not broadcast to the output's shape %s", SHAPE(bias),
                            nb__shape_str(shape, nd, (char[NB_SHAPE_STR_MAX]){0}));
    nb_tensor *out = nb__tensor_new(shape, nd, x->dtype, x->storage->device);
    nb_tensor *x2 = out ? flatten_rows(x, rows) : NULL;
    int64_t s2[2] = {rows, outf}, wts[2] = {weight->shape[1], outf}, wtst[2] = {weight->strides[1], weight->strides[0]};
    nb_tensor *o2 = x2 ? nb__tensor_alias(out, s2, (int64_t[2]){outf, 1}, 2, 0) : NULL;
    nb_tensor *wt = o2 ? nb__tensor_alias(weight, wts, wtst, 2, weight->offset) : NULL;
    bool row = false;
    nb_tensor *b3 = wt && bias ? bias_row(bias, rows, outf, &row) : NULL;
    nb_status st = wt && (b3 || !row) ? NB_OK : nb_last_status();
    if (st == NB_OK && bias && !row) {
        nb_kargs c = {.out = out, .in = {bias}};
        st = nb__dispatch(NB_OP_COPY, &c);
    }
    if (st == NB_OK) st = gemm_bias_into(o2, x2, wt, b3, bias && !row ? 1 : 0, 1);
    nb_tensor *res = NULL;
    if (st == NB_OK) {
        const nb_tensor *in[3] = {x, weight, bias};
        const nb_tensor *save[2] = {nb_tensor_requires_grad(weight) ? x2 : NULL,
                                    nb_tensor_requires_grad(x) ? weight : NULL};
        res = finish(NB_OP_LINEAR, out, in, 3, save, 0, 1);
        out = NULL;
    }
    nb__release(out);
    nb__release(x2);
    nb__release(o2);
    nb__release(wt);
    nb__release(b3);
    return res;
}
