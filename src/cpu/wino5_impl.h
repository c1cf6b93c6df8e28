/* Internal: nabla's own Winograd F(2x2, 5x5) convolutions (src/cpu/ops/wino5.c): float32, 5x5
 * kernels, stride 1, padding 2, channels-last activations, channels in and out multiples of 16,
 * on CPUs with AVX-512F. */
#ifndef NB_WINO5_IMPL_H
#define NB_WINO5_IMPL_H

#include "cpu/dnnl_impl.h"

/* Whether the convolution g runs on these kernels under algo: never under direct; under
 * winograd whenever its geometry fits; under auto when it also has from 32 channels in and out,
 * at most 65,536 (input, output) channel pairs and at least 256 output tiles of 2x2 over the
 * batch (where it was measured faster in all three directions, see wino5.c). */
bool nb__wino5_applies(const nb_conv_geom *g, nb_conv_algo algo);

/* How many times one of the three below has run in this process (tests: which algorithm ran). */
unsigned long long nb__wino5_runs(void);

/* As nb__dnnl_conv_forward / _backward_data / _backward_weights (gb may be NULL). */
nb_status nb__wino5_forward(const nb_conv_geom *g, const float *x, const float *w, const float *b, bool relu,
                            float *y);
nb_status nb__wino5_backward_data(const nb_conv_geom *g, const float *gy, const float *w, float *gx);
nb_status nb__wino5_backward_weights(const nb_conv_geom *g, const float *gy, const float *x, float *gw, float *gb);

#endif
