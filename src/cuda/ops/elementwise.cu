// CUDA kernels: the elementwise families (binary with its fused activation gradients, unary),
// with the CPU kernels' semantics (src/cpu/ops/binary.c, unary.c, activation_backward.c):
// integer add/sub/mul/pow wrap, integer division by 0 gives 0, bool add/mul/max/min are
// or/and/or/and, maximum/minimum propagate NaN, float16/bfloat16 compute in float32.
// One thread per output element in a grid-stride loop. Each operand is contiguous (index i),
// one value (index 0) or strided (offset through the output's shape): the branch is the same
// for every thread, so it costs nothing against the memory traffic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "cuda/kernels.h"

namespace {

enum { F32 = 0, F64, I64, I32, U8, BOOL, F16, BF16 };
enum { MODE_CONTIG = 0, MODE_ONE, MODE_STRIDED };

struct Operand {
    const void *data;
    int mode;
    int ndim;
    int64_t shape[NB_CUDA_MAX_DIMS];
    int64_t strides[NB_CUDA_MAX_DIMS];
};

__device__ __forceinline__ int64_t index_of(int64_t i, const Operand &d)
{
    if (d.mode == MODE_CONTIG) return i;
    if (d.mode == MODE_ONE) return 0;
    int64_t off = 0;
    for (int k = d.ndim - 1; k >= 0; k--) {
        off += (i % d.shape[k]) * d.strides[k];
        i /= d.shape[k];
    }
    return off;
}

Operand operand(const nb_cuda_desc *d)
{
    Operand o;
    o.data = d ? d->data : nullptr;
    o.ndim = d ? d->ndim : 0;
    bool contig = true, one = true;
    int64_t expect = 1;
    for (int k = NB_CUDA_MAX_DIMS - 1; k >= 0; k--) {
        bool in = d && k < d->ndim;
        o.shape[k] = in ? d->shape[k] : 1;
        o.strides[k] = in ? d->strides[k] : 0;
        if (in && d->shape[k] != 1) {
            contig = contig && d->strides[k] == expect;
            one = one && d->strides[k] == 0;
            expect *= d->shape[k];
        }
    }
    o.mode = !d ? MODE_ONE : contig ? MODE_CONTIG : one ? MODE_ONE : MODE_STRIDED;
    return o;
}

// ---- storage types and their compute types ----------------------------------------------------
template <typename T> struct Comp { typedef T type; };
template <> struct Comp<__half> { typedef float type; };
template <> struct Comp<__nv_bfloat16> { typedef float type; };

template <typename T> __device__ __forceinline__ typename Comp<T>::type load(const T *p, int64_t i) { return p[i]; }
template <> __device__ __forceinline__ float load<__half>(const __half *p, int64_t i) { return __half2float(p[i]); }
template <> __device__ __forceinline__ float load<__nv_bfloat16>(const __nv_bfloat16 *p, int64_t i)
{
    return __bfloat162float(p[i]);
}
template <typename T> __device__ __forceinline__ T store_as(typename Comp<T>::type v) { return v; }
template <> __device__ __forceinline__ __half store_as<__half>(float v) { return __float2half(v); }
template <> __device__ __forceinline__ __nv_bfloat16 store_as<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

// ---- binary math --------------------------------------------------------------------------------
template <typename C> __device__ __forceinline__ C fpow(C a, C b) { return pow(a, b); }
template <> __device__ __forceinline__ float fpow<float>(float a, float b) { return powf(a, b); }

template <typename C> __device__ __forceinline__ C bin_float(int op, C a, C b)
{
    switch (op) {
    case NB_CUDA_OP_ADD: return a + b;
    case NB_CUDA_OP_SUB: return a - b;
    case NB_CUDA_OP_MUL: return a * b;
    case NB_CUDA_OP_DIV: return a / b;
    case NB_CUDA_OP_POW: return fpow(a, b);
    case NB_CUDA_OP_MAXIMUM: return a != a || b != b ? a + b : (a > b ? a : b);
    case NB_CUDA_OP_MINIMUM: return a != a || b != b ? a + b : (a < b ? a : b);
    default: return a;
    }
}

template <typename T> __device__ __forceinline__ bool negative(T v) { return v < 0; }
template <> __device__ __forceinline__ bool negative<uint8_t>(uint8_t) { return false; }

template <typename T, typename UT> __device__ __forceinline__ T ipow(T a, T b)
{
    if (negative(b)) {
        if (a == 1) return 1;
        if (a == (T)-1) return (b & 1) ? (T)-1 : (T)1;
        return 0;
    }
    UT r = 1, base = (UT)a;
    for (T e = b; e > 0; e >>= 1) {
        if (e & 1) r *= base;
        base *= base;
    }
    return (T)r;
}

template <typename T, typename UT> __device__ __forceinline__ T bin_int(int op, T a, T b)
{
    switch (op) {
    case NB_CUDA_OP_ADD: return (T)((UT)a + (UT)b);
    case NB_CUDA_OP_SUB: return (T)((UT)a - (UT)b);
    case NB_CUDA_OP_MUL: return (T)((UT)a * (UT)b);
    case NB_CUDA_OP_DIV:
        if (b == 0) return 0;
        if ((T)-1 < 0 && b == (T)-1) return (T)((UT)0 - (UT)a);
        return (T)(a / b);
    case NB_CUDA_OP_POW: return ipow<T, UT>(a, b);
    case NB_CUDA_OP_MAXIMUM: return a > b ? a : b;
    case NB_CUDA_OP_MINIMUM: return a < b ? a : b;
    default: return a;
    }
}

__device__ __forceinline__ bool bin_bool(int op, bool a, bool b)
{
    return op == NB_CUDA_OP_ADD || op == NB_CUDA_OP_MAXIMUM ? (a || b) : (a && b);
}

template <typename T> struct Bin {
    __device__ static typename Comp<T>::type f(int op, typename Comp<T>::type a, typename Comp<T>::type b)
    {
        return bin_float(op, a, b);
    }
};
template <> struct Bin<int64_t> {
    __device__ static int64_t f(int op, int64_t a, int64_t b) { return bin_int<int64_t, uint64_t>(op, a, b); }
};
template <> struct Bin<int32_t> {
    __device__ static int32_t f(int op, int32_t a, int32_t b) { return bin_int<int32_t, uint32_t>(op, a, b); }
};
template <> struct Bin<uint8_t> {
    __device__ static uint8_t f(int op, uint8_t a, uint8_t b) { return bin_int<uint8_t, uint8_t>(op, a, b); }
};
template <> struct Bin<bool> {
    __device__ static bool f(int op, bool a, bool b) { return bin_bool(op, a, b); }
};

template <typename C> __device__ __forceinline__ bool cmp(int op, C a, C b)
{
    switch (op) {
    case NB_CUDA_OP_EQ: return a == b;
    case NB_CUDA_OP_NE: return a != b;
    case NB_CUDA_OP_LT: return a < b;
    case NB_CUDA_OP_LE: return a <= b;
    case NB_CUDA_OP_GT: return a > b;
    default: return a >= b;
    }
}

// The scalar form: the second operand is s converted to T (the C side does it, as the CPU does).
template <typename T>
__global__ void binary_kernel(int op, T *out, Operand o, Operand x, Operand y, typename Comp<T>::type s, int64_t n)
{
    const T *px = (const T *)x.data, *py = (const T *)y.data;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        typename Comp<T>::type a = load(px, index_of(i, x)), b = py ? load(py, index_of(i, y)) : s;
        out[index_of(i, o)] = store_as<T>(Bin<T>::f(op, a, b));
    }
}

template <typename T>
__global__ void compare_kernel(int op, bool *out, Operand o, Operand x, Operand y, typename Comp<T>::type s, int64_t n)
{
    const T *px = (const T *)x.data, *py = (const T *)y.data;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        typename Comp<T>::type a = load(px, index_of(i, x)), b = py ? load(py, index_of(i, y)) : s;
        out[index_of(i, o)] = cmp(op, a, b);
    }
}

// ---- float math shared by unary ops and the activation gradients ---------------------------------
template <typename C> __device__ __forceinline__ C sigm(C x) { return C(1) / (C(1) + exp(-x)); }

#define GELU_SQRT1_2 0.70710678118654752440
#define GELU_PDF 0.39894228040143267794
#define GELU_BETA 0.79788456080286535588
#define GELU_KAPPA 0.044715

template <typename C> __device__ __forceinline__ C gelu(C x, int64_t approx)
{
    if (approx) {
        C inner = C(GELU_BETA) * (x + C(GELU_KAPPA) * x * x * x);
        return C(0.5) * x * (C(1) + tanh(inner));
    }
    double xd = x; // erfc in double: accurate where the result is tiny (large negative x)
    return (C)(0.5 * xd * erfc(-xd * GELU_SQRT1_2));
}

template <typename C> __device__ __forceinline__ C gelu_grad(C x, int64_t approx)
{
    if (approx) {
        C x_sq = x * x;
        C th = tanh(C(GELU_BETA) * (x + C(GELU_KAPPA) * x_sq * x));
        C du = C(GELU_BETA) * (C(1) + C(3) * C(GELU_KAPPA) * x_sq);
        return C(0.5) * (C(1) + th) + C(0.5) * x * (C(1) - th * th) * du;
    }
    double xd = x;
    return (C)(0.5 * erfc(-xd * GELU_SQRT1_2) + xd * GELU_PDF * exp(-0.5 * xd * xd));
}

template <typename C> __device__ __forceinline__ C act_backward(int op, C g, C x, C s0, C s1, int64_t i0)
{
    switch (op) {
    case NB_CUDA_OP_THRESHOLD_BACKWARD: return x <= C(0) ? C(0) : g;
    case NB_CUDA_OP_LEAKY_RELU_BACKWARD: return x > C(0) ? g : g * s0;
    case NB_CUDA_OP_SIGMOID_BACKWARD: return g * (C(1) - x) * x;
    case NB_CUDA_OP_TANH_BACKWARD: return g * (C(1) - x * x);
    case NB_CUDA_OP_GELU_BACKWARD: return g * gelu_grad(x, i0);
    case NB_CUDA_OP_SILU_BACKWARD: {
        C s = sigm(x);
        return g * s * (C(1) + x * (C(1) - s));
    }
    default: { // SOFTPLUS_BACKWARD
        if (x * s0 > s1) return g;
        C z = exp(x * s0);
        return g * z / (z + C(1));
    }
    }
}

template <typename T>
__global__ void act_backward_kernel(int op, T *out, Operand o, Operand gr, Operand x, double s0, double s1, int64_t i0,
                                    int64_t n)
{
    typedef typename Comp<T>::type C;
    const T *pg = (const T *)gr.data, *px = (const T *)x.data;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[index_of(i, o)] =
            store_as<T>(act_backward<C>(op, load(pg, index_of(i, gr)), load(px, index_of(i, x)), (C)s0, (C)s1, i0));
}

template <typename C> __device__ __forceinline__ C unary_float(int op, C x, C s0, C s1, int64_t i0)
{
    switch (op) {
    case NB_CUDA_OP_NEG: return -x;
    case NB_CUDA_OP_ABS: return fabs(x);
    case NB_CUDA_OP_SIGN: return (C)((C(0) < x) - (x < C(0)));
    case NB_CUDA_OP_EXP: return exp(x);
    case NB_CUDA_OP_LOG: return log(x);
    case NB_CUDA_OP_LOG1P: return log1p(x);
    case NB_CUDA_OP_SQRT: return sqrt(x);
    case NB_CUDA_OP_RSQRT: return C(1) / sqrt(x);
    case NB_CUDA_OP_SIN: return sin(x);
    case NB_CUDA_OP_COS: return cos(x);
    case NB_CUDA_OP_TANH: return tanh(x);
    case NB_CUDA_OP_SIGMOID: return sigm(x);
    case NB_CUDA_OP_RELU: return x < C(0) ? C(0) : x;
    case NB_CUDA_OP_LEAKY_RELU: return x > C(0) ? x : x * s0;
    case NB_CUDA_OP_GELU: return gelu(x, i0);
    case NB_CUDA_OP_SILU: return x / (C(1) + exp(-x));
    case NB_CUDA_OP_SOFTPLUS: return x * s0 > s1 ? x : log1p(exp(x * s0)) / s0;
    default: { // CLAMP: min > max gives max; NaN stays NaN
        C r = x < s0 ? s0 : x;
        return r > s1 ? s1 : r;
    }
    }
}

template <typename T, typename UT> __device__ __forceinline__ T unary_int(int op, T x, T q0, T q1)
{
    switch (op) {
    case NB_CUDA_OP_NEG: return (T)((UT)0 - (UT)x);
    case NB_CUDA_OP_ABS: return negative(x) ? (T)((UT)0 - (UT)x) : x;
    case NB_CUDA_OP_SIGN: return (T)((T(0) < x) - negative(x));
    case NB_CUDA_OP_RELU: return negative(x) ? (T)0 : x;
    default: { // CLAMP
        T r = x < q0 ? q0 : x;
        return r > q1 ? q1 : r;
    }
    }
}

template <typename T> struct Un {
    __device__ static typename Comp<T>::type f(int op, typename Comp<T>::type x, double s0, double s1, int64_t q0,
                                               int64_t q1, int64_t i0)
    {
        typedef typename Comp<T>::type C;
        return unary_float<C>(op, x, (C)s0, (C)s1, i0);
    }
};
#define UN_INT(T, UT)                                                                              \
    template <> struct Un<T> {                                                                     \
        __device__ static T f(int op, T x, double, double, int64_t q0, int64_t q1, int64_t)        \
        {                                                                                          \
            return unary_int<T, UT>(op, x, (T)q0, (T)q1);                                          \
        }                                                                                          \
    };
UN_INT(int64_t, uint64_t)
UN_INT(int32_t, uint32_t)
UN_INT(uint8_t, uint8_t)
template <> struct Un<bool> { // only SIGN reaches here (the C side checks)
    __device__ static bool f(int, bool x, double, double, int64_t, int64_t, int64_t) { return x; }
};

template <typename T>
__global__ void unary_kernel(int op, T *out, Operand o, Operand x, double s0, double s1, int64_t q0, int64_t q1,
                             int64_t i0, int64_t n)
{
    const T *px = (const T *)x.data;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[index_of(i, o)] = store_as<T>(Un<T>::f(op, load(px, index_of(i, x)), s0, s1, q0, q1, i0));
}

template <typename T> __global__ void not_kernel(bool *out, Operand o, Operand x, int64_t n)
{
    const T *px = (const T *)x.data;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[index_of(i, o)] = load(px, index_of(i, x)) == (typename Comp<T>::type)0;
}

unsigned grid_for(int64_t n)
{
    int64_t blocks = (n + 255) / 256;
    return (unsigned)(blocks < 65535 * 8 ? blocks : 65535 * 8);
}

// ---- the vectorised path ------------------------------------------------------------------------
// When the output is contiguous and each input is contiguous, one value, or a contiguous row
// repeated along the leading dims (a bias), each thread moves 16 bytes per operand at a time:
// V = 16 / sizeof(T) elements. The op's switch then runs once per V elements' worth of loads.
// The last n % V elements are done one by one.
template <typename T> struct alignas(16) Pack {
    T v[16 / sizeof(T)];
};
enum { V_CONTIG = 0, V_ONE, V_ROW };
struct VOp {
    const void *data;
    int mode;
    int64_t len; // V_ROW: the row's length, a multiple of V
};

template <typename T> __device__ __forceinline__ Pack<T> vload(const VOp &o, int64_t j)
{
    constexpr int V = 16 / sizeof(T);
    const T *d = (const T *)o.data;
    Pack<T> p;
    if (o.mode == V_CONTIG) p = ((const Pack<T> *)d)[j];
    else if (o.mode == V_ROW) p = ((const Pack<T> *)d)[j % (o.len / V)];
    else {
        T v = d[0];
#pragma unroll
        for (int k = 0; k < V; k++) p.v[k] = v;
    }
    return p;
}

template <typename T> __device__ __forceinline__ typename Comp<T>::type eload(const VOp &o, int64_t i)
{
    const T *d = (const T *)o.data;
    return load(d, o.mode == V_CONTIG ? i : o.mode == V_ROW ? i % o.len : 0);
}

template <typename T>
__global__ void binary_vec(int op, T *out, VOp x, VOp y, typename Comp<T>::type s, int64_t nvec, int64_t n)
{
    constexpr int V = 16 / sizeof(T);
    const int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    for (int64_t j = t; j < nvec; j += (int64_t)gridDim.x * blockDim.x) {
        Pack<T> a = vload<T>(x, j), r;
        if (y.data) {
            Pack<T> b = vload<T>(y, j);
#pragma unroll
            for (int k = 0; k < V; k++) r.v[k] = store_as<T>(Bin<T>::f(op, load(a.v, k), load(b.v, k)));
        } else {
#pragma unroll
            for (int k = 0; k < V; k++) r.v[k] = store_as<T>(Bin<T>::f(op, load(a.v, k), s));
        }
        ((Pack<T> *)out)[j] = r;
    }
    int64_t i = nvec * V + t;
    if (i < n) out[i] = store_as<T>(Bin<T>::f(op, eload<T>(x, i), y.data ? eload<T>(y, i) : s));
}

template <typename T>
__global__ void unary_vec(int op, T *out, VOp x, double s0, double s1, int64_t q0, int64_t q1, int64_t i0, int64_t nvec,
                          int64_t n)
{
    constexpr int V = 16 / sizeof(T);
    const int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    for (int64_t j = t; j < nvec; j += (int64_t)gridDim.x * blockDim.x) {
        Pack<T> a = vload<T>(x, j), r;
#pragma unroll
        for (int k = 0; k < V; k++) r.v[k] = store_as<T>(Un<T>::f(op, load(a.v, k), s0, s1, q0, q1, i0));
        ((Pack<T> *)out)[j] = r;
    }
    int64_t i = nvec * V + t;
    if (i < n) out[i] = store_as<T>(Un<T>::f(op, eload<T>(x, i), s0, s1, q0, q1, i0));
}

template <typename T>
__global__ void act_backward_vec(int op, T *out, VOp g, VOp x, double s0, double s1, int64_t i0, int64_t nvec, int64_t n)
{
    typedef typename Comp<T>::type C;
    constexpr int V = 16 / sizeof(T);
    const int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    for (int64_t j = t; j < nvec; j += (int64_t)gridDim.x * blockDim.x) {
        Pack<T> a = vload<T>(g, j), b = vload<T>(x, j), r;
#pragma unroll
        for (int k = 0; k < V; k++) r.v[k] = store_as<T>(act_backward<C>(op, load(a.v, k), load(b.v, k), (C)s0, (C)s1, i0));
        ((Pack<T> *)out)[j] = r;
    }
    int64_t i = nvec * V + t;
    if (i < n) out[i] = store_as<T>(act_backward<C>(op, eload<T>(g, i), eload<T>(x, i), (C)s0, (C)s1, i0));
}

// d as a vector operand (a NULL d: no operand, fine), or false when it needs the general path; g
// is operand(d), which the launcher has already made.
bool vop(const nb_cuda_desc *d, const Operand &g, size_t elsize, VOp *o)
{
    o->data = d ? d->data : nullptr, o->mode = V_ONE, o->len = 0;
    if (!d) return true;
    const int V = (int)(16 / elsize);
    bool aligned = ((uintptr_t)d->data & 15) == 0;
    if (g.mode == MODE_ONE) return true;
    if (g.mode == MODE_CONTIG) {
        o->mode = V_CONTIG;
        return aligned;
    }
    // a contiguous row over the trailing dims, repeated (stride 0) along the others
    int k = d->ndim - 1;
    int64_t len = 1;
    for (; k >= 0 && (d->shape[k] == 1 || d->strides[k] == len); k--) len *= d->shape[k];
    for (; k >= 0; k--)
        if (d->shape[k] != 1 && d->strides[k] != 0) return false;
    if (!aligned || len % V != 0) return false;
    o->mode = V_ROW, o->len = len;
    return true;
}

// The vector path's grid: nvec vectors, and a block for the tail when there are no vectors.
unsigned vgrid(int64_t nvec) { return grid_for(nvec > 0 ? nvec : 1); }

template <typename T> typename Comp<T>::type scalar_as(double s) { return (typename Comp<T>::type)s; }
template <> bool scalar_as<bool>(double s) { return s != 0.0; }

template <typename T>
cudaError_t launch_binary_t(int op, const nb_cuda_desc *out, const nb_cuda_desc *x, const nb_cuda_desc *y, double s,
                            int64_t n, cudaStream_t st)
{
    Operand o = operand(out), a = operand(x), b = operand(y);
    VOp vx, vy;
    bool cmp_op = op >= NB_CUDA_OP_EQ && op <= NB_CUDA_OP_GE;
    if (!cmp_op && o.mode == MODE_CONTIG && ((uintptr_t)out->data & 15) == 0 && vop(x, a, sizeof(T), &vx) &&
        vop(y, b, sizeof(T), &vy)) {
        int64_t nvec = n / (int64_t)(16 / sizeof(T));
        binary_vec<T><<<vgrid(nvec), 256, 0, st>>>(op, (T *)out->data, vx, vy, scalar_as<T>(s), nvec, n);
        return cudaGetLastError();
    }
    if (cmp_op)
        compare_kernel<T><<<grid_for(n), 256, 0, st>>>(op, (bool *)out->data, o, a, b, scalar_as<T>(s), n);
    else
        binary_kernel<T><<<grid_for(n), 256, 0, st>>>(op, (T *)out->data, o, a, b, scalar_as<T>(s), n);
    return cudaGetLastError();
}

} // namespace

#define BY_DTYPE(dt, CALL)                                                                         \
    switch (dt) {                                                                                  \
    case F32: return CALL(float);                                                                  \
    case F64: return CALL(double);                                                                 \
    case I64: return CALL(int64_t);                                                                \
    case I32: return CALL(int32_t);                                                                \
    case U8: return CALL(uint8_t);                                                                 \
    case BOOL: return CALL(bool);                                                                  \
    case F16: return CALL(__half);                                                                 \
    case BF16: return CALL(__nv_bfloat16);                                                         \
    default: return cudaErrorInvalidValue;                                                         \
    }

#define BY_FLOAT_DTYPE(dt, CALL)                                                                   \
    switch (dt) {                                                                                  \
    case F32: return CALL(float);                                                                  \
    case F64: return CALL(double);                                                                 \
    case F16: return CALL(__half);                                                                 \
    case BF16: return CALL(__nv_bfloat16);                                                         \
    default: return cudaErrorInvalidValue;                                                         \
    }

extern "C" cudaError_t nb_cuda_launch_binary(int op, const nb_cuda_desc *out, const nb_cuda_desc *x,
                                             const nb_cuda_desc *y, double s0, int64_t n, cudaStream_t st)
{
#define CALL(T) launch_binary_t<T>(op, out, x, y, s0, n, st)
    BY_DTYPE(x->dtype, CALL)
#undef CALL
}

extern "C" cudaError_t nb_cuda_launch_act_backward(int op, const nb_cuda_desc *out, const nb_cuda_desc *g,
                                                   const nb_cuda_desc *x, double s0, double s1, int64_t i0, int64_t n,
                                                   cudaStream_t st)
{
    Operand o = operand(out), a = operand(g), b = operand(x);
    VOp vg, vx;
    size_t el = out->dtype == F64 ? 8 : out->dtype == F32 ? 4 : 2;
    if (o.mode == MODE_CONTIG && ((uintptr_t)out->data & 15) == 0 && vop(g, a, el, &vg) && vop(x, b, el, &vx) && vx.data &&
        vg.data) {
        int64_t nvec = n / (int64_t)(16 / el);
#define CALL(T)                                                                                    \
    (act_backward_vec<T><<<vgrid(nvec), 256, 0, st>>>(op, (T *)out->data, vg, vx, s0, s1, i0, nvec, n), cudaGetLastError())
        BY_FLOAT_DTYPE(out->dtype, CALL)
#undef CALL
    }
#define CALL(T)                                                                                    \
    (act_backward_kernel<T><<<grid_for(n), 256, 0, st>>>(op, (T *)out->data, o, a, b, s0, s1, i0, n), cudaGetLastError())
    BY_FLOAT_DTYPE(out->dtype, CALL)
#undef CALL
}

extern "C" cudaError_t nb_cuda_launch_unary(int op, const nb_cuda_desc *out, const nb_cuda_desc *x, double s0,
                                            double s1, int64_t q0, int64_t q1, int64_t i0, int64_t n, cudaStream_t st)
{
    Operand o = operand(out), a = operand(x);
    if (op == NB_CUDA_OP_LOGICAL_NOT) {
#define CALL(T) (not_kernel<T><<<grid_for(n), 256, 0, st>>>((bool *)out->data, o, a, n), cudaGetLastError())
        BY_DTYPE(x->dtype, CALL)
#undef CALL
    }
    VOp vx;
    size_t el = x->dtype == F64 || x->dtype == I64 ? 8 : x->dtype == F32 || x->dtype == I32 ? 4
              : x->dtype == F16 || x->dtype == BF16 ? 2 : 1;
    if (out->dtype == x->dtype && o.mode == MODE_CONTIG && ((uintptr_t)out->data & 15) == 0 && vop(x, a, el, &vx) && vx.data) {
        int64_t nvec = n / (int64_t)(16 / el);
#define CALL(T)                                                                                    \
    (unary_vec<T><<<vgrid(nvec), 256, 0, st>>>(op, (T *)out->data, vx, s0, s1, q0, q1, i0, nvec, n), cudaGetLastError())
        BY_DTYPE(x->dtype, CALL)
#undef CALL
    }
#define CALL(T)                                                                                    \
    (unary_kernel<T><<<grid_for(n), 256, 0, st>>>(op, (T *)out->data, o, a, s0, s1, q0, q1, i0, n), cudaGetLastError())
    BY_DTYPE(x->dtype, CALL)
#undef CALL
}

namespace {
template <typename E> __global__ void where_kernel(E *out, Operand o, Operand c, Operand x, Operand y, int64_t n)
{
    const bool *pc = (const bool *)c.data;
    const E *px = (const E *)x.data, *py = (const E *)y.data;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[index_of(i, o)] = pc[index_of(i, c)] ? px[index_of(i, x)] : py[index_of(i, y)];
}
} // namespace

// Selection only moves bytes: one kernel per element size.
extern "C" cudaError_t nb_cuda_launch_where(const nb_cuda_desc *out, const nb_cuda_desc *cond, const nb_cuda_desc *x,
                                            const nb_cuda_desc *y, int elem_size, int64_t n, cudaStream_t st)
{
    Operand o = operand(out), c = operand(cond), a = operand(x), b = operand(y);
    switch (elem_size) {
    case 1: where_kernel<uint8_t><<<grid_for(n), 256, 0, st>>>((uint8_t *)out->data, o, c, a, b, n); break;
    case 2: where_kernel<uint16_t><<<grid_for(n), 256, 0, st>>>((uint16_t *)out->data, o, c, a, b, n); break;
    case 4: where_kernel<uint32_t><<<grid_for(n), 256, 0, st>>>((uint32_t *)out->data, o, c, a, b, n); break;
    case 8: where_kernel<uint64_t><<<grid_for(n), 256, 0, st>>>((uint64_t *)out->data, o, c, a, b, n); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
