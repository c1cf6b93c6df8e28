/* oneDNN's convolution primitives with the activations in its blocked layout (format_tag_any,
 * which picks nChw16c: what src/cpu/dnnl.c uses) against channels-last (NHWC), on the same
 * problem: the evidence for keeping CNN activations channels-last (docs/BENCHMARKS.md, DLBench).
 * Each direction (forward training, backward data, backward weights with bias) is one primitive
 * timed alone on zero-filled buffers: the median of 7 runs after 2 warm-ups, in ms. Prints which
 * oneDNN implementation ran. "wino" asks for the Winograd algorithm (oneDNN's F(4x4, 3x3), on its
 * own layouts: what nb_set_conv_algo's auto and winograd run; the reorders of NCHW or NHWC
 * activations into them are not timed here).
 *
 * usage: nabla_conv_layout N C H OC STRIDE any|nhwc|wino [KSIZE]   (KSIZE x KSIZE kernel, default 3,
 *        padding KSIZE / 2, square H x H)
 * e.g.   OMP_NUM_THREADS=1 build-bench/bench/nabla_conv_layout 128 16 32 16 1 nhwc */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>

#include "bench_util.h"

#define CK(x)                                                                                      \
    do {                                                                                           \
        dnnl_status_t s_ = (x);                                                                    \
        if (s_ != dnnl_success) {                                                                  \
            fprintf(stderr, "conv_layout: %s failed (dnnl status %d)\n", #x, (int)s_);             \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static dnnl_engine_t eng;
static dnnl_stream_t str;

/* A zero-filled buffer for md (leaked: the program is short-lived). */
static dnnl_memory_t mem(const dnnl_memory_desc_t *md)
{
    size_t n = dnnl_memory_desc_get_size(md);
    void *p = aligned_alloc(64, (n + 63) / 64 * 64 + 64);
    if (!p) {
        fprintf(stderr, "conv_layout: out of memory\n");
        exit(1);
    }
    memset(p, 0, n);
    dnnl_memory_t m;
    CK(dnnl_memory_create(&m, md, eng, p));
    return m;
}

static const dnnl_memory_desc_t *md_of(const_dnnl_primitive_desc_t pd, dnnl_query_t q, int i)
{
    return dnnl_primitive_desc_query_md(pd, q, i);
}

/* Creates pd's primitive, times it on args, prints "name ms (impl)". */
static void run(const char *name, const_dnnl_primitive_desc_t pd, int na, dnnl_exec_arg_t *args)
{
    const char *impl = "?";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    dnnl_primitive_t p;
    CK(dnnl_primitive_create(&p, pd));
    double ts[7];
    for (int r = 0; r < 9; r++) {
        double t0 = bench_now();
        CK(dnnl_primitive_execute(p, str, na, args));
        CK(dnnl_stream_wait(str));
        if (r >= 2) ts[r - 2] = bench_now() - t0;
    }
    qsort(ts, 7, sizeof *ts, bench_cmp_double);
    printf(" %s %.2f (%s)", name, ts[3] * 1e3, impl);
    dnnl_primitive_destroy(p);
}

int main(int argc, char **argv)
{
    if ((argc != 7 && argc != 8) || (strcmp(argv[6], "any") && strcmp(argv[6], "nhwc") && strcmp(argv[6], "wino"))) {
        fprintf(stderr, "usage: nabla_conv_layout N C H OC STRIDE any|nhwc|wino [KSIZE]\n");
        return 2;
    }
    int64_t n = atoll(argv[1]), c = atoll(argv[2]), h = atoll(argv[3]), oc = atoll(argv[4]), s = atoll(argv[5]);
    if (n < 1 || c < 1 || h < 1 || oc < 1 || s < 1) {
        fprintf(stderr, "conv_layout: N, C, H, OC and STRIDE must be positive\n");
        return 2;
    }
    int64_t ks = argc == 8 ? atoll(argv[7]) : 3, pd = ks / 2;
    int64_t oh = (h + 2 * pd - ks) / s + 1;
    dnnl_format_tag_t act = strcmp(argv[6], "nhwc") ? dnnl_format_tag_any : dnnl_acdb;
    dnnl_alg_kind_t alg = strcmp(argv[6], "wino") ? dnnl_convolution_direct : dnnl_convolution_winograd;
    CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CK(dnnl_stream_create(&str, eng, dnnl_stream_default_flags));
    dnnl_dims_t xd = {n, c, h, h}, yd = {n, oc, oh, oh}, wd = {oc, c, ks, ks}, bd = {oc};
    dnnl_dims_t strides = {s, s}, dil = {0, 0}, pad = {pd, pd};
    dnnl_memory_desc_t x, y, w, b;
    CK(dnnl_memory_desc_init_by_tag(&x, 4, xd, dnnl_f32, act));
    CK(dnnl_memory_desc_init_by_tag(&y, 4, yd, dnnl_f32, act));
    CK(dnnl_memory_desc_init_by_tag(&w, 4, wd, dnnl_f32, dnnl_format_tag_any));
    CK(dnnl_memory_desc_init_by_tag(&b, 1, bd, dnnl_f32, dnnl_a));
    printf("%s N%lld C%lld H%lld OC%lld S%lld:", argv[6], (long long)n, (long long)c, (long long)h, (long long)oc,
           (long long)s);

    dnnl_convolution_desc_t fd, dd, wdsc;
    dnnl_primitive_desc_t fpd, dpd, wpd;
    CK(dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, alg, &x, &w, &b,
                                                  &y, strides, dil, pad, pad));
    CK(dnnl_primitive_desc_create(&fpd, &fd, NULL, eng, NULL));
    dnnl_exec_arg_t fa[4] = {{DNNL_ARG_SRC, mem(md_of(fpd, dnnl_query_src_md, 0))},
                             {DNNL_ARG_WEIGHTS, mem(md_of(fpd, dnnl_query_weights_md, 0))},
                             {DNNL_ARG_BIAS, mem(md_of(fpd, dnnl_query_weights_md, 1))},
                             {DNNL_ARG_DST, mem(md_of(fpd, dnnl_query_dst_md, 0))}};
    run("fwd", fpd, 4, fa);

    CK(dnnl_dilated_convolution_backward_data_desc_init(&dd, alg, &x, &w, &y, strides, dil, pad,
                                                        pad));
    CK(dnnl_primitive_desc_create(&dpd, &dd, NULL, eng, fpd));
    dnnl_exec_arg_t da[3] = {{DNNL_ARG_DIFF_DST, mem(md_of(dpd, dnnl_query_diff_dst_md, 0))},
                             {DNNL_ARG_WEIGHTS, mem(md_of(dpd, dnnl_query_weights_md, 0))},
                             {DNNL_ARG_DIFF_SRC, mem(md_of(dpd, dnnl_query_diff_src_md, 0))}};
    run("bwd_data", dpd, 3, da);

    CK(dnnl_dilated_convolution_backward_weights_desc_init(&wdsc, alg, &x, &w, &b, &y, strides,
                                                           dil, pad, pad));
    CK(dnnl_primitive_desc_create(&wpd, &wdsc, NULL, eng, fpd));
    dnnl_exec_arg_t wa[4] = {{DNNL_ARG_DIFF_DST, mem(md_of(wpd, dnnl_query_diff_dst_md, 0))},
                             {DNNL_ARG_SRC, mem(md_of(wpd, dnnl_query_src_md, 0))},
                             {DNNL_ARG_DIFF_WEIGHTS, mem(md_of(wpd, dnnl_query_diff_weights_md, 0))},
                             {DNNL_ARG_DIFF_BIAS, mem(md_of(wpd, dnnl_query_diff_weights_md, 1))}};
    run("bwd_weights", wpd, 4, wa);
    printf("\n");
    dnnl_primitive_desc_destroy(fpd);
    dnnl_primitive_desc_destroy(dpd);
    dnnl_primitive_desc_destroy(wpd);
    return 0;
}
