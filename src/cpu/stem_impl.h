/* Internal: nabla's own weight gradient for convolutions with few input channels (src/cpu/ops/
 * stem.c), a network's first layer on RGB images: float32, channels-last activations, 1 to 4
 * channels in, output channels a multiple of 16, any kernel size, stride and padding, no
 * dilation or groups. */
#ifndef NB_STEM_IMPL_H
#define NB_STEM_IMPL_H

#include "cpu/dnnl_impl.h"

/* Whether the kernels take g's weight gradient: channels-last, 1 to 4 channels in, output
 * channels a multiple of 16, no dilation or groups, on a CPU with AVX-512F or AVX2 and FMA. */
bool nb__stem_fits(const nb_conv_geom *g);

/* Whether the rules send g's weight gradient here (under every conv algo: they are a direct
 * convolution, and Winograd does not take layers this narrow): g fits and the CPU has AVX-512,
 * where they were measured faster than oneDNN on every first layer. On AVX2 they lose on
 * AlexNet-S's 11x11 stride-4 layer, so there the conv tuner times them (src/cpu/ops/conv.c). */
bool nb__stem_applies(const nb_conv_geom *g);

/* How many times the kernel below has run in this process (tests: which kernel ran). */
unsigned long long nb__stem_runs(void);

/* As nb__dnnl_conv_backward_weights (gb may be NULL). */
nb_status nb__stem_backward_weights(const nb_conv_geom *g, const float *gy, const float *x, float *gw, float *gb);

#endif
