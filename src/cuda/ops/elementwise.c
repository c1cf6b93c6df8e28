/* CUDA kernels' C side for the elementwise families `binary` (with the fused activation
 * gradients) and `unary`: the same dtype rules as the CPU kernels (src/cpu/ops/binary.c,
 * unary.c), then one launch of elementwise.cu on the current stream. */
#include "core/tensor_impl.h"
#include "cuda/cuda_impl.h"

static bool is_float(nb_dtype dt)
{
    return dt == NB_FLOAT32 || dt == NB_FLOAT64 || dt == NB_FLOAT16 || dt == NB_BFLOAT16;
}

static nb_status finish(cudaError_t e, nb_op op, int prev)
{
    nb__cuda_leave(prev);
    return e == cudaSuccess ? NB_OK : nb__cuda_err(e, nb__op_name(op));
}

nb_status nb_cuda_k_binary(nb_op op, const nb_kargs *a)
{
    const nb_tensor *x = a->in[0], *y = a->in[1];
    nb_tensor *out = a->out;
    int64_t n = nb_tensor_numel(out);
    bool act = op >= NB_OP_THRESHOLD_BACKWARD && op <= NB_OP_SOFTPLUS_BACKWARD;
    if (!act && (op < NB_OP_ADD || op > NB_OP_GE))
        return nb__err(NB_ERR_INTERNAL, "binary kernel: %s is not a binary op", nb__op_name(op));
    if (act ? !is_float(x->dtype) : x->dtype == NB_BOOL && (op == NB_OP_SUB || op == NB_OP_DIV || op == NB_OP_POW))
        return nb__err(NB_ERR_DTYPE, "%s: not implemented for %s", nb__op_name(op), nb_dtype_name(x->dtype));
    if (n == 0) return NB_OK;
    int dev = out->storage->device.index;
    int prev = nb__cuda_enter(dev);
    cudaStream_t s = nb__cuda_stream(dev)->handle;
    nb_cuda_desc o = nb__cuda_desc(out, out), dx = nb__cuda_desc(x, out), dy;
    if (y) dy = nb__cuda_desc(y, out);
    if (act) return finish(nb_cuda_launch_act_backward(op, &o, &dx, &dy, a->s0, a->s1, a->i0, n, s), op, prev);
    return finish(nb_cuda_launch_binary(op, &o, &dx, y ? &dy : NULL, a->s0, n, s), op, prev);
}

nb_status nb_cuda_k_unary(nb_op op, const nb_kargs *a)
{
    const nb_tensor *x = a->in[0];
    nb_tensor *out = a->out;
    nb_dtype dt = x->dtype;
    bool int_ok = op == NB_OP_NEG || op == NB_OP_ABS || op == NB_OP_SIGN || op == NB_OP_RELU || op == NB_OP_CLAMP;
    bool ok = op == NB_OP_LOGICAL_NOT || is_float(dt) || (dt == NB_BOOL ? op == NB_OP_SIGN : int_ok);
    if (!ok) return nb__err(NB_ERR_DTYPE, "%s: not implemented for %s", nb__op_name(op), nb_dtype_name(dt));
    int64_t n = nb_tensor_numel(out);
    if (n == 0) return NB_OK;
    int dev = out->storage->device.index;
    int prev = nb__cuda_enter(dev);
    nb_cuda_desc o = nb__cuda_desc(out, out), dx = nb__cuda_desc(x, out);
    int64_t q0 = is_float(dt) ? 0 : nb__int_bound(a->s0, dt), q1 = is_float(dt) ? 0 : nb__int_bound(a->s1, dt);
    cudaError_t e = nb_cuda_launch_unary(op, &o, &dx, a->s0, a->s1, q0, q1, a->i0, n, nb__cuda_stream(dev)->handle);
    return finish(e, op, prev);
}
