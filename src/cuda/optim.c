/* The CUDA device's fused optimizer step (nb_backend.fused_optim): the batch's entries and a
 * chunk table go to the device in one copy, then one launch updates every parameter. */
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_impl.h"

nb_status nb__cuda_fused_optim(int index, const nb_optim_batch *b)
{
    if (b->dtype != NB_FLOAT32 && b->dtype != NB_FLOAT64)
        return nb__err(NB_ERR_DTYPE, "optim step: dtype %s on CUDA", nb_dtype_name((nb_dtype)b->dtype));
    int64_t nchunks = 0;
    for (int i = 0; i < b->count; i++) nchunks += (b->e[i].n + NB_CUDA_OPTIM_CHUNK - 1) / NB_CUDA_OPTIM_CHUNK;
    if (nchunks == 0) return NB_OK;
    size_t ebytes = (size_t)b->count * sizeof(nb_optim_entry), cbytes = (size_t)nchunks * sizeof(nb_cuda_chunk);
    size_t off = (ebytes + 15) / 16 * 16, total = off + cbytes;
    /* (what a capture cannot replay was refused by src/optim/optim.c before any state changed) a
     * captured copy reads its host buffer again at every replay: pinned, kept by the graph */
    bool capturing = nb__cuda_capturing(index);
    char *host = capturing ? nb__cuda_graph_host_buffer(index, total) : malloc(total);
    if (!host) return capturing ? nb_last_status() : nb__err(NB_ERR_OOM, "optim step: out of host memory");
    memcpy(host, b->e, ebytes);
    nb_cuda_chunk *ch = (nb_cuda_chunk *)(host + off);
    int64_t k = 0;
    for (int i = 0; i < b->count; i++)
        for (int64_t s = 0; s < b->e[i].n; s += NB_CUDA_OPTIM_CHUNK) ch[k++] = (nb_cuda_chunk){i, s};
    int prev = nb__cuda_enter(index);
    cudaStream_t st = nb__cuda_stream(index)->handle;
    char *dev = nb__cuda_alloc(index, total);
    cudaError_t e = cudaSuccess;
    if (dev) {
        /* from pageable memory: the call returns once `host` has been read */
        e = cudaMemcpyAsync(dev, host, total, cudaMemcpyHostToDevice, st);
        if (e == cudaSuccess)
            e = nb_cuda_launch_optim(b, (const nb_optim_entry *)dev, (const nb_cuda_chunk *)(dev + off), nchunks, st);
        nb__cuda_free(index, dev, total); /* reused only by work queued after this launch */
    }
    nb__cuda_leave(prev);
    if (!capturing) free(host);
    if (!dev) return nb_last_status();
    return e == cudaSuccess ? NB_OK : nb__cuda_err(e, "optim step");
}
