/* The interface between the CUDA backend's C files and its kernels (.cu files, CUDA C++): plain
 * structs and extern "C" launchers, without nabla's internal C11 headers. */
#ifndef NB_CUDA_KERNELS_H
#define NB_CUDA_KERNELS_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NB_CUDA_MAX_DIMS 8

/* A strided view for a kernel: dtype is nb_dtype's value; strides in elements, laid out over the
 * OUTPUT's shape (broadcast dims have stride 0). */
typedef struct nb_cuda_desc {
    void *data;
    int dtype;
    int ndim;
    int64_t shape[NB_CUDA_MAX_DIMS];
    int64_t strides[NB_CUDA_MAX_DIMS];
} nb_cuda_desc;

/* out[i] = (out dtype) in[i]; both over out's shape. Returns the launch's error. */
cudaError_t nb_cuda_launch_copy(const nb_cuda_desc *out, const nb_cuda_desc *in, int64_t n, cudaStream_t s);
/* out[i] = (out dtype) value. */
cudaError_t nb_cuda_launch_fill(const nb_cuda_desc *out, double value, int64_t n, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
