/* CUDA kernels' C side for the rnn family (LSTM_CELL, LSTM_CELL_BACKWARD): the CPU kernel's
 * operand checks, one launch of rnn.cu for step i0. The matrix products around the step are BMM
 * calls of src/nn/lstm.c and rules_rnn.c, which cuBLAS runs. */
#include "core/tensor_impl.h"
#include "cuda/cuda_impl.h"

nb_status nb_cuda_k_rnn(nb_op op, const nb_kargs *a)
{
    bool fwd = op == NB_OP_LSTM_CELL;
    if (!fwd && op != NB_OP_LSTM_CELL_BACKWARD)
        return nb__err(NB_ERR_INTERNAL, "rnn kernel: unexpected op %s", nb__op_name(op));
    const nb_tensor *y = fwd ? a->out : a->in[1], *act = fwd ? a->out2 : a->in[2];
    const nb_tensor *ops[5] = {a->out, a->out2, a->in[0], fwd ? NULL : a->in[1], fwd ? NULL : a->in[2]};
    if (!y || !act || y->ndim != 4 || act->ndim != 3)
        return nb__err(NB_ERR_INTERNAL, "%s: bad operands", nb__op_name(op));
    nb_dtype dt = a->out->dtype;
    if (dt != NB_FLOAT32 && dt != NB_FLOAT64)
        return nb__err(NB_ERR_DTYPE, "%s: dtype %s is not supported (float32/float64 only)", nb__op_name(op),
                       nb_dtype_name(dt));
    for (int k = 0; k < 5; k++)
        if (ops[k] && (ops[k]->dtype != dt || !nb__is_contiguous(ops[k])))
            return nb__err(NB_ERR_INTERNAL, "%s: operand %d of another dtype or not contiguous", nb__op_name(op), k);
    int64_t T = act->shape[0], B = act->shape[1], H = y->shape[3];
    if (a->i1 > 1) /* runs of steps are the CPU kernel's (src/nn/lstm.c passes them there only) */
        return nb__err(NB_ERR_INTERNAL, "%s: a run of %lld steps in one call", nb__op_name(op), (long long)a->i1);
    if (a->i0 < 0 || a->i0 >= T || y->shape[1] != T + 1 || act->shape[2] != 4 * H)
        return nb__err(NB_ERR_INTERNAL, "%s: step %lld or shapes out of range", nb__op_name(op), (long long)a->i0);
    if (B * H == 0) return NB_OK;
    int dev = a->out->storage->device.index;
    int prev = nb__cuda_enter(dev);
    cudaError_t e = nb_cuda_launch_lstm_cell(!fwd, dt == NB_FLOAT64, T, B, H, a->i0, a->flag, nb__data(a->in[0]),
                                             fwd ? NULL : nb__data(a->in[1]), nb__data(act), nb__data(a->out),
                                             fwd ? NULL : nb__data(a->out2), nb__cuda_stream(dev)->handle);
    nb__cuda_leave(prev);
    return e == cudaSuccess ? NB_OK : nb__cuda_err(e, nb__op_name(op));
}
