/* 2bit (MXNet) on CUDA: mirrors codec_2bit.c. Encode checks grad on the device first, then one
 * thread per output word quantises its 16 elements with ga_2bit_quantize (no atomics, the same
 * bytes as the CPU); decode_add is one thread per element. */
#include "codec_internal.h"
#include "codec_math.h"
#include "cuda_check.h"

static __global__ void encode_kernel(const float *grad, float *residual, uint32_t *words, size_t n, float select,
                                     float t)
{
    size_t nwords = (n + 15) / 16;
    for (size_t w = ga_cuda_tid(); w < nwords; w += ga_cuda_nthreads()) {
        size_t base = w * 16, end = base + 16 < n ? base + 16 : n;
        uint32_t word = 0;
        for (size_t i = base; i < end; i++)
            word |= ga_2bit_quantize(&residual[i], grad[i], select, t) << ga_2bit_shift((uint32_t)(i - base));
        words[w] = word;
    }
}

static __global__ void decode_kernel(const uint32_t *words, float *sum, size_t n, float t)
{
    for (size_t i = ga_cuda_tid(); i < n; i += ga_cuda_nthreads()) {
        uint32_t code = (words[i / 16] >> ga_2bit_shift((uint32_t)(i % 16))) & 3u;
        sum[i] = sum[i] + ga_2bit_value(code, t);
    }
}

ga_status ga_q2bit_encode_cuda(const ga_exec *ex, const ga_codec_params *p, const float *grad, float *residual,
                               size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
    (void)cap;
    size_t nwords = (n + 15) / 16;
    if (n > 0) {
        GA_CHECK(ga_cuda_launch(ga_cuda_stream(ex), nwords, encode_kernel, grad, residual, (uint32_t *)out, n,
                                ga_2bit_select(p), p->threshold));
    }
    *out_len = 4 * nwords;
    return GA_OK;
}

ga_status ga_q2bit_decode_add_cuda(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload,
                                   size_t len, size_t n, float *sum)
{
    (void)len;
    if (n == 0) return GA_OK;
    return ga_cuda_launch(ga_cuda_stream(ex), n, decode_kernel, (const uint32_t *)payload, sum, n, p->threshold);
}
