/* Kernel: cumulative sum along dim i0.
 *   CUMSUM  out[..., i, ...] = sum_{j <= i} in[0][..., j, ...]   (flag set: sum_{j >= i}, the
 *           reversed cumsum the backward uses)
 *   in[0] any dtype and strides, out the same shape: float inputs give the same float dtype,
 *   integer and bool inputs int64 (the entry allocates it so). Floats accumulate in double and
 *   integers in int64, as PyTorch's CPU kernel does.
 * One path, plain and strided: each line along dim is scanned by one thread; lines are split
 * across threads, consecutive lines being neighbours in memory when dim is not the last. */
#include <string.h>

#include "cpu/cpu_impl.h"

static inline double ld_d(const char *p, nb_dtype dt)
{
    return dt == NB_FLOAT32 ? *(const float *)p : *(const double *)p;
}

static inline int64_t ld_i(const char *p, nb_dtype dt)
{
    switch (dt) {
    case NB_INT64: return *(const int64_t *)p;
    case NB_INT32: return *(const int32_t *)p;
    case NB_UINT8: return *(const uint8_t *)p;
    default: return *(const bool *)p;
    }
}

nb_status nb_cpu_k_cumsum(nb_op op, const nb_kargs *a)
{
    nb_tensor *out = a->out;
    const nb_tensor *in = a->in[0];
    nb_dtype it = in->dtype, ot = out->dtype;
    bool fl = nb_dtype_is_floating(it);
    if ((unsigned)it > NB_BOOL || (fl ? ot != it : ot != NB_INT64))
        return nb__err(NB_ERR_DTYPE, "cumsum: no CPU kernel from %s to %s", nb_dtype_name(it), nb_dtype_name(ot));
    int64_t dim = a->i0, D = out->ndim ? out->shape[dim] : 1;
    int64_t si = out->ndim ? in->strides[dim] : 0, so = out->ndim ? out->strides[dim] : 0;
    /* the other dims, for the lines' start offsets */
    int nd = 0;
    int64_t shape[NB_MAX_DIMS], sti[NB_MAX_DIMS], sto[NB_MAX_DIMS], nlines = 1;
    for (int d = 0; d < out->ndim; d++) {
        if (d == dim) continue;
        shape[nd] = out->shape[d];
        sti[nd] = in->strides[d];
        sto[nd] = out->strides[d];
        nlines *= shape[nd++];
    }
    if (nlines == 0 || D == 0) return NB_OK;
    int64_t ies = (int64_t)nb_dtype_size(it), oes = (int64_t)nb_dtype_size(ot);
    const char *ib = nb__data(in);
    char *ob = nb__data(out);
    int64_t i0 = a->flag ? D - 1 : 0, step = a->flag ? -1 : 1;
    int nt = nb_cpu_threads_for(nlines * D, 0);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t l = 0; l < nlines; l++) {
        int64_t oi = 0, oo = 0, rem = l;
        for (int d = nd - 1; d >= 0; d--) {
            oi += (rem % shape[d]) * sti[d];
            oo += (rem % shape[d]) * sto[d];
            rem /= shape[d];
        }
        double s = 0;
        int64_t si64 = 0;
        for (int64_t k = 0, i = i0; k < D; k++, i += step) {
            const char *src = ib + (oi + i * si) * ies;
            char *dst = ob + (oo + i * so) * oes;
            if (ot == NB_FLOAT32) *(float *)dst = (float)(s += ld_d(src, it));
            else if (ot == NB_FLOAT64) *(double *)dst = (s += ld_d(src, it));
            else *(int64_t *)dst = (si64 += ld_i(src, it));
        }
    }
    return NB_OK;
}
