/* Internal: the CPU's oneDNN context (one engine, one stream, a primitive cache) and the
 * convolution primitives the conv kernel family runs on float32. */
#ifndef NB_DNNL_IMPL_H
#define NB_DNNL_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "nabla/core.h"

/* One 2-D convolution's geometry (PyTorch's parameters): input [n, c, h, w] and output
 * [n, oc, oh, ow], both dense NCHW, or both channels-last (NHWC in memory) when cl; the weight
 * OIHW. */
typedef struct nb_conv_geom {
    int64_t n, c, h, w;     /* input */
    int64_t oc, kh, kw;     /* weight [oc, c / groups, kh, kw] */
    int64_t oh, ow;         /* output */
    int64_t sh, sw, ph, pw, dh, dw, groups;
    int64_t cl;             /* 1: input, output and their gradients are channels-last */
} nb_conv_geom;

/* Whether the conv kernels use oneDNN for float32 (default true). Tests switch it off to run the
 * reference loops on the same float32 data. Process-wide; not meant to be flipped while other
 * threads run convolutions. */
bool nb__dnnl_enabled(void);
void nb__dnnl_set_enabled(bool on);

/* How many times a Winograd primitive (any direction) has run in this process: tests use it to
 * see which algorithm nb_set_conv_algo led to. */
unsigned long long nb__dnnl_winograd_runs(void);
/* Which route the float32 conv kernels take where a product over the windows of the input or
 * nabla's own kernel (Winograd, src/cpu/ops/wino.c, or the few-channel weight gradient,
 * src/cpu/ops/stem.c) is one (src/cpu/ops/conv.c, "the route by timing"): AUTO the rules or,
 * where the route tuner is on, the fastest by timing; RULES always the rules; WINDOWS / OWN
 * always that route where the problem has it, else the rules. Tests force each
 * to check them against the reference. Process-wide, like nb__dnnl_set_enabled. */
typedef enum nb_conv_route {
    NB_CONV_ROUTE_AUTO,
    NB_CONV_ROUTE_RULES,
    NB_CONV_ROUTE_WINDOWS,
    NB_CONV_ROUTE_OWN
} nb_conv_route;
void nb__conv_set_route(nb_conv_route r);
/* How many times a windows route (forward, input or weight gradient) ran in this process. */
unsigned long long nb__conv_windows_runs(void);
/* Whether the route tuner is on (NABLA_CONV_TUNE, or by default on CPUs without AVX-512), and
 * how many problems it has timed both ways and settled so far. */
bool nb__conv_tune_enabled(void);
int nb__conv_tuned_problems(void);
/* How many calls so far ran a step of the route tuner's schedule. */
unsigned long long nb__conv_tuning_steps(void);

/* Whether this CPU has oneDNN's Winograd kernels (its avx512_core instruction set). */
bool nb__dnnl_winograd_available(void);

/* Whether oneDNN's matmul primitive has its brgemm kernels here (its avx512_core instruction
 * set); elsewhere it runs the same sgemm kernels as dnnl_sgemm. */
bool nb__dnnl_matmul_available(void);
/* C = alpha op(A) op(B) + beta C on oneDNN's matmul primitive (src/cpu/dnnl_matmul.c), every
 * matrix row-major with its leading dimension, op(X) = X^T where the flag is 'T': the
 * arguments as dnnl_sgemm's. beta 0 never reads C. With bias (n floats, else NULL), C = op(A)
 * op(B) + bias, the bias added to every row in the kernel's epilogue: alpha must be 1 and beta 0
 * (else dnnl_invalid_arguments). Returns oneDNN's status (a dnnl_status_t): on failure,
 * dnnl_unimplemented where oneDNN has only its reference loops for the shape, nothing was
 * written. */
int nb__dnnl_matmul(char ta, char tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                    int ldb, float beta, float *c, int ldc, const float *bias);
/* How many nb__dnnl_matmul calls have run in this process (tests: which way a product took). */
unsigned long long nb__dnnl_matmul_runs(void);
/* Tests: on, every nb__dnnl_matmul call fails with dnnl_unimplemented, as one for a shape oneDNN
 * has only its reference loops for does, so that the callers' fallback can be checked. */
void nb__dnnl_matmul_set_refuse(bool on);

/* Turns a failing oneDNN status into an nb status naming op and the call (NB_OK on success). */
nb_status nb__dnnl_check(const char *op, const char *call, int dnnl_status);

/* float32 convolution through cached oneDNN primitives; activations dense NCHW, or NHWC when
 * g->cl (then oneDNN's NHWC kernels run, with no reorder of them); weights dense OIHW.
 * b and gb may be NULL (no bias). relu: y = max(0, conv), fused as a oneDNN post-op. */
nb_status nb__dnnl_conv_forward(const nb_conv_geom *g, const float *x, const float *w, const float *b, bool relu,
                                float *y);
nb_status nb__dnnl_conv_backward_data(const nb_conv_geom *g, const float *gy, const float *w, float *gx);
/* gy_again: gy is the same, unchanged buffer as in the nb__dnnl_conv_backward_data call just
 * before, so its reorder into oneDNN's layout can be reused when nothing came in between. */
nb_status nb__dnnl_conv_backward_weights(const nb_conv_geom *g, const float *gy, const float *x, float *gw,
                                         float *gb, bool gy_again);

#endif
