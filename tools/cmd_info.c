/* tools/cmd_info.c: `nabla info`: version, backends, devices and threads. */
#include <stdio.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "cli_impl.h"

/* OpenBLAS's build description (declared here: its header's path differs between variants). */
char *openblas_get_config(void);

static const char *cpu_isa(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return "AVX-512";
    if (__builtin_cpu_supports("avx2")) return "AVX2";
    if (__builtin_cpu_supports("avx")) return "AVX";
    if (__builtin_cpu_supports("sse4.2")) return "SSE4.2";
    return "baseline x86-64";
}

/* oneDNN's instruction set here: from avx512_core on, its matmul primitive has the brgemm
 * kernels that nabla's products of few rows use (src/cpu/ops/gemm.c). */
static const char *dnnl_isa(void)
{
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "baseline";
    }
}

int cmd_info(int argc, char **argv)
{
    if (argc > 2) return cli_fail(CLI_USAGE, "info: unexpected argument \"%s\"", argv[2]);
    const dnnl_version_t *dv = dnnl_version();
    const char *blas = openblas_get_config();
    printf("nabla %s\n", nb_version());
    printf("backends:\n");
    printf("  cpu isa:  %s (kernels dispatch on it at run time)\n", cpu_isa());
    printf("  amx:      %s\n", nb_cpu_amx_enabled() ? "on (float32 products may run on nabla's AMX kernel)"
                                                    : "off (no AMX here, or NABLA_AMX=0)");
    printf("  blas:     %s\n", blas ? blas : "OpenBLAS (unknown configuration)");
    printf("  onednn:   %d.%d.%d%s%s, isa %s\n", dv->major, dv->minor, dv->patch,
           dv->hash && strcmp(dv->hash, "N/A") ? " " : "", dv->hash && strcmp(dv->hash, "N/A") ? dv->hash : "", dnnl_isa());
    if (nb_cuda_is_built()) {
        int rt = nb_cuda_runtime_version(), drv = nb_cuda_driver_version();
        printf("  cuda:     runtime %d.%d, driver %d.%d%s\n", rt / 1000, rt % 1000 / 10, drv / 1000, drv % 1000 / 10,
               drv ? "" : " (no driver)");
        int dnn = nb_cuda_cudnn_version();
        if (dnn >= 90000) printf("  cudnn:    %d.%d.%d\n", dnn / 10000, dnn % 10000 / 100, dnn % 100);
        else if (dnn) printf("  cudnn:    %d.%d.%d\n", dnn / 1000, dnn % 1000 / 100, dnn % 100);
        else printf("  cudnn:    not built (convolutions have no CUDA kernel)\n");
        printf("  tf32:     matrix products %s, convolutions %s\n", nb_cuda_get_allow_tf32() ? "on" : "off",
               nb_cuda_get_allow_tf32_conv() ? "on" : "off");
    } else {
        printf("  cuda:     not built\n");
    }
    printf("devices:\n  cpu\n");
    for (int i = 0; i < nb_cuda_device_count(); i++) {
        nb_cuda_device_props p;
        if (nb_cuda_get_device_properties(i, &p) == NB_OK)
            printf("  cuda:%d    %s, %.1f GiB, compute capability %d.%d, %d SMs\n", i, p.name,
                   (double)p.total_memory / (double)(1 << 30), p.major, p.minor, p.multi_processor_count);
        else
            printf("  cuda:%d    (properties unavailable: %s)\n", i, nb_last_error());
    }
    printf("threads: %d\n", nb_get_num_threads());
    printf("cpu convolutions: %s\n", nb_conv_algo_name(nb_get_conv_algo()));
    return CLI_OK;
}
