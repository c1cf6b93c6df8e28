/* CUDA kernels' C side for the gemm family (BMM): out[b] = s1 out[b] + s0 in[0][b] @ in[1][b]
 * through cuBLAS's strided-batched GEMM. cuBLAS is column-major: a row-major product C = A B is
 * computed as C^T = B^T A^T. A matrix whose rows or columns are unit-stride goes to cuBLAS as it
 * is (a transpose flag and a leading dimension); any other layout is first copied to a contiguous
 * buffer on the device. float32 uses TF32 tensor cores only when nb_cuda_set_allow_tf32 says so
 * (off by default, as PyTorch's allow_tf32 for matmul); float16/bfloat16 accumulate in float32.
 * Integer dtypes have no CUDA matmul (an NB_ERR_DTYPE error). */
#include <cublas_v2.h>
#include <pthread.h>
#include <stdatomic.h>

#include "core/tensor_impl.h"
#include "cuda/cuda_impl.h"

static cublasHandle_t g_handle[NB_CUDA_MAX_DEVICES];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool g_tf32;

void nb_cuda_set_allow_tf32(bool allow) { atomic_store(&g_tf32, allow); }
bool nb_cuda_get_allow_tf32(void) { return atomic_load(&g_tf32); }

/* The convolutions' switch (conv.c reads it) lives here, beside the matmul one, so that it exists
 * in a build without cuDNN too. */
static atomic_bool g_tf32_conv = true;

void nb_cuda_set_allow_tf32_conv(bool allow) { atomic_store(&g_tf32_conv, allow); }
bool nb_cuda_get_allow_tf32_conv(void) { return atomic_load(&g_tf32_conv); }

static nb_status blas_err(cublasStatus_t s, const char *what)
{
    return nb__err(s == CUBLAS_STATUS_ALLOC_FAILED ? NB_ERR_OOM : NB_ERR_DEVICE, "%s: cuBLAS: %s (%s)", what,
                   cublasGetStatusString(s), cublasGetStatusName(s));
}

/* The device's handle (made once; the caller has made the device current). */
static nb_status handle_of(int dev, cublasHandle_t *out)
{
    pthread_mutex_lock(&g_lock);
    cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
    if (!g_handle[dev] && nb__cuda_capturing(dev)) {
        pthread_mutex_unlock(&g_lock);
        return nb__cuda_capture_refuse(dev, "bmm", "cuBLAS's handle cannot be made inside it (run a matmul before "
                                       "capturing)");
    }
    if (!g_handle[dev]) s = cublasCreate(&g_handle[dev]);
    *out = g_handle[dev];
    pthread_mutex_unlock(&g_lock);
    return s == CUBLAS_STATUS_SUCCESS ? NB_OK : blas_err(s, "bmm");
}

/* One operand, rows x cols per batch, as cuBLAS sees it: column-major storage of either the
 * matrix (colmajor) or of its transpose, with leading dimension ld and batch stride sb. */
typedef struct gmat {
    const nb_tensor *t;
    int64_t rows, cols, ld, sb;
    bool colmajor, ok;
} gmat;

static gmat gmat_of(const nb_tensor *t)
{
    gmat m = {t, t->shape[1], t->shape[2], 0, t->strides[0], false, true};
    int64_t sr = t->strides[1], sc = t->strides[2];
    if (m.cols == 1 || sc == 1) { /* row-major: element (r, c) at r ld + c */
        m.ld = m.rows == 1 ? m.cols : sr;
        m.ok = m.ld >= m.cols && m.ld >= 1;
    } else if (m.rows == 1 || sr == 1) {
        m.colmajor = true;
        m.ld = m.cols == 1 ? m.rows : sc;
        m.ok = m.ld >= m.rows && m.ld >= 1;
    } else {
        m.ok = false;
    }
    if (m.ld < 1) m.ld = 1;
    return m;
}

static cudaDataType_t cuda_type(nb_dtype dt)
{
    switch (dt) {
    case NB_FLOAT64: return CUDA_R_64F;
    case NB_FLOAT16: return CUDA_R_16F;
    case NB_BFLOAT16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
    }
}

/* C^T (N x M) = op(B^T) op(A^T) for row-major C; the operands' own layouts pick the ops. */
static nb_status gemm(cublasHandle_t h, nb_tensor *out, gmat a, gmat b, double s0, double s1, int64_t batch)
{
    nb_dtype dt = out->dtype;
    int64_t M = out->shape[1], N = out->shape[2], K = a.cols;
    int64_t ldc = M == 1 ? N : out->strides[1];
    if (ldc < N) ldc = N;
    /* B^T as stored: row-major B is B^T column-major (no transpose); column-major B needs T. */
    cublasOperation_t ob = b.colmajor ? CUBLAS_OP_T : CUBLAS_OP_N, oa = a.colmajor ? CUBLAS_OP_T : CUBLAS_OP_N;
    cudaDataType_t ty = cuda_type(dt);
    cublasComputeType_t ct = dt == NB_FLOAT64 ? CUBLAS_COMPUTE_64F
                             : dt == NB_FLOAT32 && nb_cuda_get_allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                            : CUBLAS_COMPUTE_32F;
    float af = (float)s0, bf = (float)s1;
    const void *alpha = dt == NB_FLOAT64 ? (const void *)&s0 : (const void *)&af;
    const void *beta = dt == NB_FLOAT64 ? (const void *)&s1 : (const void *)&bf;
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || batch > INT32_MAX)
        return nb__err(NB_ERR_UNSUPPORTED, "bmm: sizes beyond cuBLAS's 32-bit limits ([%lld, %lld, %lld] x %lld)",
                       (long long)M, (long long)N, (long long)K, (long long)batch);
    cublasStatus_t s = cublasGemmStridedBatchedEx(
        h, ob, oa, (int)N, (int)M, (int)K, alpha, nb__data(b.t), ty, (int)b.ld, b.sb, nb__data(a.t), ty, (int)a.ld,
        a.sb, beta, nb__data(out), ty, (int)ldc, out->strides[0], (int)batch, ct, CUBLAS_GEMM_DEFAULT);
    return s == CUBLAS_STATUS_SUCCESS ? NB_OK : blas_err(s, "bmm");
}

nb_status nb_cuda_k_gemm(nb_op op, const nb_kargs *a)
{
    nb_tensor *out = a->out;
    nb_dtype dt = out->dtype;
    if (dt != NB_FLOAT32 && dt != NB_FLOAT64 && dt != NB_FLOAT16 && dt != NB_BFLOAT16)
        return nb__err(NB_ERR_DTYPE, "bmm: %s is not supported on CUDA (floating dtypes only)", nb_dtype_name(dt));
    int64_t batch = out->shape[0];
    if (nb_tensor_numel(out) == 0) return NB_OK;
    bool out_ok = out->shape[2] == 1 || out->strides[2] == 1;
    if (!out_ok)
        return nb__err(NB_ERR_INTERNAL, "bmm: CUDA output must have unit column stride (strides [%lld, %lld, %lld])",
                       (long long)out->strides[0], (long long)out->strides[1], (long long)out->strides[2]);
    int dev = out->storage->device.index;
    int prev = nb__cuda_enter(dev);
    nb_tensor *tmp[2] = {NULL, NULL};
    gmat m[2];
    nb_status st = NB_OK;
    for (int i = 0; i < 2 && st == NB_OK; i++) {
        m[i] = gmat_of(a->in[i]);
        if (m[i].ok) continue;
        /* neither unit-stride: a contiguous copy (batch stride 0 stays shared) */
        const nb_tensor *t = a->in[i];
        int64_t shape[3] = {t->strides[0] == 0 ? 1 : t->shape[0], t->shape[1], t->shape[2]};
        tmp[i] = nb__tensor_new(shape, 3, t->dtype, t->storage->device);
        if (!tmp[i]) {
            st = nb_last_status();
            break;
        }
        nb_tensor src = *t;
        src.shape[0] = shape[0];
        nb_kargs ck = {.out = tmp[i], .in = {&src}};
        st = nb__dispatch(NB_OP_COPY, &ck);
        if (st == NB_OK) {
            m[i] = gmat_of(tmp[i]);
            if (t->strides[0] == 0) m[i].sb = 0;
        }
    }
    cublasHandle_t h = NULL;
    if (st == NB_OK) st = handle_of(dev, &h);
    if (st == NB_OK) {
        cublasStatus_t s = cublasSetStream(h, nb__cuda_stream(dev)->handle);
        if (s == CUBLAS_STATUS_SUCCESS)
            s = cublasSetMathMode(h, nb_cuda_get_allow_tf32() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
        st = s == CUBLAS_STATUS_SUCCESS ? gemm(h, out, m[0], m[1], a->s0, a->s1, batch) : blas_err(s, "bmm");
    }
    /* the copies' memory is freed now but reused only by later work on this stream */
    for (int i = 0; i < 2; i++) nb__release(tmp[i]);
    nb__cuda_leave(prev);
    return st;
}
