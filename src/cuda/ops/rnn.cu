// CUDA kernels: the pointwise part of one LSTM step, forward and backward, with the CPU kernel's
// layout and formulas (src/cpu/ops/rnn.c): Y [2, T+1, B, H] holds h and c for t = 0 .. T, act
// [T, B, 4H] the activated gates (i, f, g, o), dgates [T, B, 4H], dhc [2, B, H]. One thread per
// (batch row, hidden unit) of the step.
#include <math.h>
#include <stdint.h>

#include "cuda/kernels.h"

namespace {

template <typename T> __device__ __forceinline__ T sigm(T z) { return T(1) / (T(1) + exp(-z)); }

template <typename T>
__global__ void cell_fwd(int64_t T_, int64_t B, int64_t H, int64_t t, bool flag, const T *xp, T *act, T *Y)
{
    int64_t BH = B * H, n = BH;
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x) {
        int64_t b = k / H, j = k % H;
        const T *x = xp + (t * B + b) * 4 * H;
        T *a = act + (t * B + b) * 4 * H;
        T zi = x[j] + (flag ? a[j] : T(0)), zf = x[H + j] + (flag ? a[H + j] : T(0));
        T zg = x[2 * H + j] + (flag ? a[2 * H + j] : T(0)), zo = x[3 * H + j] + (flag ? a[3 * H + j] : T(0));
        T i = sigm(zi), f = sigm(zf), g = tanh(zg), o = sigm(zo);
        a[j] = i, a[H + j] = f, a[2 * H + j] = g, a[3 * H + j] = o;
        const T *cp = Y + (T_ + 1) * BH + t * BH + b * H;
        T c = f * cp[j] + i * g;
        Y[(T_ + 1 + t + 1) * BH + b * H + j] = c;
        Y[(t + 1) * BH + b * H + j] = o * tanh(c);
    }
}

template <typename T>
__global__ void cell_bwd(int64_t T_, int64_t B, int64_t H, int64_t t, const T *G, const T *Y, const T *act, T *dg,
                         T *dhc)
{
    int64_t BH = B * H, S = (T_ + 1) * BH;
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < BH; k += (int64_t)gridDim.x * blockDim.x) {
        int64_t b = k / H, j = k % H;
        const T *a = act + (t * B + b) * 4 * H;
        T *d = dg + (t * B + b) * 4 * H, *dh = dhc + b * H, *dc = dh + BH;
        T i = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j];
        T c = Y[S + (t + 1) * BH + b * H + j], cp = Y[S + t * BH + b * H + j];
        T h = dh[j] + G[(t + 1) * BH + b * H + j], tc = tanh(c);
        T cc = dc[j] + G[S + (t + 1) * BH + b * H + j] + h * o * (T(1) - tc * tc);
        d[j] = cc * g * i * (T(1) - i);
        d[H + j] = cc * cp * f * (T(1) - f);
        d[2 * H + j] = cc * i * (T(1) - g * g);
        d[3 * H + j] = h * tc * o * (T(1) - o);
        dc[j] = cc * f;
    }
}

unsigned grid_for(int64_t n)
{
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 65535 * 8 ? b : 65535 * 8);
}

} // namespace

extern "C" cudaError_t nb_cuda_launch_lstm_cell(bool backward, int dtype, int64_t T, int64_t B, int64_t H, int64_t t,
                                                bool flag, const void *in0, const void *in1, void *act, void *out,
                                                void *out2, cudaStream_t s)
{
    unsigned g = grid_for(B * H);
    if (!backward) {
        if (dtype == 1) cell_fwd<double><<<g, 256, 0, s>>>(T, B, H, t, flag, (const double *)in0, (double *)act, (double *)out);
        else cell_fwd<float><<<g, 256, 0, s>>>(T, B, H, t, flag, (const float *)in0, (float *)act, (float *)out);
    } else {
        if (dtype == 1)
            cell_bwd<double><<<g, 256, 0, s>>>(T, B, H, t, (const double *)in0, (const double *)in1,
                                                (const double *)act, (double *)out, (double *)out2);
        else
            cell_bwd<float><<<g, 256, 0, s>>>(T, B, H, t, (const float *)in0, (const float *)in1, (const float *)act,
                                               (float *)out, (float *)out2);
    }
    return cudaGetLastError();
}
