/* Internal: nabla's own weight gradient for convolutions with few input channels (src/cpu/ops/
 * stem.c), a network's first layer on RGB images: float32, channels-last activations, 1 to 4
 * channels in, output channels a multiple of 16, any kernel size, stride and padding, no
 * dilation or groups, on CPUs with AVX-512F. */
#ifndef NB_STEM_IMPL_H
#define NB_STEM_IMPL_H

#include "cpu/dnnl_impl.h"

/* Whether the weight gradient of g runs on these kernels (under every conv algo: they are a
 * direct convolution, and Winograd does not take layers this narrow). */
bool nb__stem_applies(const nb_conv_geom *g);

/* How many times the kernel below has run in this process (tests: which kernel ran). */
unsigned long long nb__stem_runs(void);

/* As nb__dnnl_conv_backward_weights (gb may be NULL). */
nb_status nb__stem_backward_weights(const nb_conv_geom *g, const float *gy, const float *x, float *gw, float *gb);

#endif
