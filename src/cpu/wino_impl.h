/* Internal: nabla's own Winograd convolutions (src/cpu/ops/wino.c): F(4x4, 3x3) and F(2x2,
 * 5x5), float32, stride 1, "same" padding (1 and 2), channels-last activations, channels in and
 * out multiples of 16, on x86-64 CPUs with AVX2 and FMA (AVX-512F where there is one). */
#ifndef NB_WINO_IMPL_H
#define NB_WINO_IMPL_H

#include "cpu/dnnl_impl.h"

/* Whether g's geometry and this CPU fit these kernels at all. */
bool nb__wino_fits(const nb_conv_geom *g);

/* The rules (measured on AVX-512): whether the convolution g runs on these kernels under algo.
 * Never under direct; 5x5 layers on an AVX-512 CPU under winograd whenever they fit, under auto
 * when they also have from 32 channels in and out, at most 65,536 (input, output) channel pairs
 * and at least 256 output tiles of 2x2 over the batch (where they were measured faster in all
 * three directions, see wino.c). 3x3 layers go to oneDNN's Winograd there instead. On other CPUs
 * the route tuner of src/cpu/ops/conv.c times these kernels against the rules' instead. */
bool nb__wino_applies(const nb_conv_geom *g, nb_conv_algo algo);

/* How many times one of the three below has run in this process (tests: which algorithm ran). */
unsigned long long nb__wino_runs(void);

/* Tests: run the 16-float-vector kernels (those of AVX-512) compiled for AVX2, so that their
 * logic is checked on any CPU with AVX2; false: the CPU's own. Process-wide. */
void nb__wino_set_wide(bool on);

/* As nb__dnnl_conv_forward / _backward_data / _backward_weights (gb may be NULL); g must fit. */
nb_status nb__wino_forward(const nb_conv_geom *g, const float *x, const float *w, const float *b, bool relu,
                           float *y);
nb_status nb__wino_backward_data(const nb_conv_geom *g, const float *gy, const float *w, float *gx);
nb_status nb__wino_backward_weights(const nb_conv_geom *g, const float *gy, const float *x, float *gw, float *gb);

#endif
