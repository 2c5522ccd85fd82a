/* 2bit (MXNet) on CUDA: mirrors codec_2bit.c. Encode checks grad on the device first; then each
 * lane of a warp quantises one element with ga_2bit_quantize (coalesced), and each half-warp
 * ORs its 16 codes into the output word, which its first lane stores (no atomics, the same bytes
 * as the CPU); decode_add is one thread per element. */
#include "codec_internal.h"
#include "codec_math.h"
#include "cuda_check.h"

static __global__ void encode_kernel(const float *grad, float *residual, uint32_t *words, size_t n, float select,
                                     float t)
{
    const uint32_t lane = threadIdx.x & 31u;
    for (size_t base = ga_cuda_warp_first(); base < n; base += ga_cuda_warp_stride()) {
        size_t i = base + lane;
        uint32_t bits = 0;
        if (i < n) bits = ga_2bit_quantize(&residual[i], grad[i], select, t) << ga_2bit_shift(lane & 15u);
        bits = ga_cuda_group_or(bits, 16);
        if ((lane & 15u) == 0 && i < n) words[i / 16] = bits;
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
        GA_CHECK(ga_cuda_launch(ga_cuda_stream(ex), n, encode_kernel, grad, residual, (uint32_t *)out, n,
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
