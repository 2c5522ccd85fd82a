/* 1bit (MXNet master) and 1bit_scaled on CUDA: mirrors codec_1bit.c. 1bit packs a warp's 32
 * elements, one a lane, into one word (ga_cuda_group_or: no atomics, the CPU's bytes);
 * 1bit_scaled packs one thread per output word, and gives each 1024-element block to one
 * warp, whose shuffle reduction is exactly the lane order of ga_1bit_scaled_fold. */
#include "codec_internal.h"
#include "codec_math.h"
#include "cuda_check.h"

#define FULL_WARP 0xFFFFFFFFu

/* ---- 1bit ---- */

static __global__ void encode_kernel(const float *grad, float *residual, uint32_t *words, size_t n, float t)
{
    const uint32_t lane = threadIdx.x & 31u;
    for (size_t base = ga_cuda_warp_first(); base < n; base += ga_cuda_warp_stride()) {
        size_t i = base + lane;
        uint32_t bits = i < n ? ga_1bit_quantize(&residual[i], grad[i], t) << ga_1bit_shift(lane) : 0u;
        bits = ga_cuda_group_or(bits, 32);
        if (lane == 0) words[base / 32] = bits;
    }
}

static __global__ void decode_kernel(const uint32_t *words, float *sum, size_t n)
{
    for (size_t i = ga_cuda_tid(); i < n; i += ga_cuda_nthreads()) {
        uint32_t bit = (words[i / 32] >> ga_1bit_shift((uint32_t)(i % 32))) & 1u;
        sum[i] = sum[i] + (bit ? 1.0f : -1.0f);
    }
}

ga_status ga_q1bit_encode_cuda(const ga_exec *ex, const ga_codec_params *p, const float *grad, float *residual,
                               size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
    (void)cap;
    size_t nwords = (n + 31) / 32;
    if (n > 0) {
        GA_CHECK(ga_cuda_launch(ga_cuda_stream(ex), n, encode_kernel, grad, residual, (uint32_t *)out, n,
                                p->threshold));
    }
    *out_len = 4 * nwords;
    return GA_OK;
}

ga_status ga_q1bit_decode_add_cuda(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload,
                                   size_t len, size_t n, float *sum)
{
    (void)p, (void)len;
    if (n == 0) return GA_OK;
    return ga_cuda_launch(ga_cuda_stream(ex), n, decode_kernel, (const uint32_t *)payload, sum, n);
}

/* ---- 1bit_scaled ---- */

/* One warp per block of GA_1BIT_SCALED_BLOCK elements (the loop bound is the same for every
 * lane of a warp, so the full-mask shuffles are safe). Pass 1: lane j stores v = r + g for
 * elements j, j+32, ... and sums |v| in that order from 0, as s[j] in codec_math.h; the
 * shuffles fold s[j] = s[j] + s[j+off] for off = 16..1, leaving s[0] in lane 0. Pass 2: lane w
 * packs word w of the block from the stored v, leaving v -+ scale in r. */
static __global__ void scaled_encode_kernel(const float *grad, float *residual, float *scales, uint32_t *words,
                                            size_t n)
{
    const uint32_t lane = threadIdx.x % GA_1BIT_SCALED_LANES;
    size_t blocks = (n + GA_1BIT_SCALED_BLOCK - 1) / GA_1BIT_SCALED_BLOCK;
    size_t first = ga_cuda_tid() / GA_1BIT_SCALED_LANES, stride = ga_cuda_nthreads() / GA_1BIT_SCALED_LANES;
    for (size_t b = first; b < blocks; b += stride) {
        size_t base = b * GA_1BIT_SCALED_BLOCK;
        uint32_t len = n - base < GA_1BIT_SCALED_BLOCK ? (uint32_t)(n - base) : GA_1BIT_SCALED_BLOCK;
        float *r = residual + base;
        const float *g = grad + base;

        float s = 0.0f;
        for (uint32_t i = lane; i < len; i += GA_1BIT_SCALED_LANES) {
            float v = r[i] + g[i];
            r[i] = v;
            s += v < 0.0f ? -v : v;
        }
        for (uint32_t off = GA_1BIT_SCALED_LANES / 2; off > 0; off >>= 1) s = s + __shfl_down_sync(FULL_WARP, s, off);
        float scale = __shfl_sync(FULL_WARP, s, 0) / (float)len;
        if (lane == 0) scales[b] = scale;
        __syncwarp(); /* pass 1's stores to r are visible to every lane of the warp */

        uint32_t lo = lane * 32;
        if (lo < len) {
            uint32_t end = lo + 32 < len ? lo + 32 : len;
            uint32_t word = 0;
            for (uint32_t i = lo; i < end; i++) {
                float v = r[i];
                uint32_t bit = ga_1bit_scaled_bit(v);
                r[i] = v - (bit ? scale : -scale);
                word |= bit << ga_1bit_shift(i - lo);
            }
            words[base / 32 + lane] = word;
        }
    }
}

static __global__ void scales_check_kernel(const float *scales, size_t blocks, unsigned *flag)
{
    unsigned bad = 0;
    for (size_t b = ga_cuda_tid(); b < blocks; b += ga_cuda_nthreads())
        bad |= !ga_f32_bits_finite(ga_f32_bits(scales[b])) || !(scales[b] >= 0.0f);
    if (bad) atomicOr(flag, 1u);
}

static __global__ void scaled_decode_kernel(const float *scales, const uint32_t *words, float *sum, size_t n)
{
    for (size_t i = ga_cuda_tid(); i < n; i += ga_cuda_nthreads()) {
        float scale = scales[i / GA_1BIT_SCALED_BLOCK];
        uint32_t bit = (words[i / 32] >> ga_1bit_shift((uint32_t)(i % 32))) & 1u;
        sum[i] = sum[i] + (bit ? scale : -scale);
    }
}

ga_status ga_q1bit_scaled_encode_cuda(const ga_exec *ex, const ga_codec_params *p, const float *grad,
                                      float *residual, size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
    (void)p, (void)cap;
    size_t blocks = (n + GA_1BIT_SCALED_BLOCK - 1) / GA_1BIT_SCALED_BLOCK;
    if (n > 0) {
        GA_CHECK(ga_cuda_launch(ga_cuda_stream(ex), blocks * GA_1BIT_SCALED_LANES, scaled_encode_kernel, grad,
                                residual, (float *)out, (uint32_t *)(out + 4 * blocks), n));
    }
    *out_len = 4 * blocks + 4 * ((n + 31) / 32);
    return GA_OK;
}

ga_status ga_q1bit_scaled_decode_add_cuda(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload,
                                          size_t len, size_t n, float *sum)
{
    (void)p, (void)len;
    if (n == 0) return GA_OK;
    cudaStream_t s = ga_cuda_stream(ex);
    size_t blocks = (n + GA_1BIT_SCALED_BLOCK - 1) / GA_1BIT_SCALED_BLOCK;
    const float *scales = (const float *)payload;
    unsigned flags = 0;
    GA_CHECK(ga_cuda_flags(s, blocks, &flags, scales_check_kernel, scales, blocks));
    if (flags) return GA_E_NONFINITE;
    return ga_cuda_launch(s, n, scaled_decode_kernel, scales, (const uint32_t *)(payload + 4 * blocks), sum, n);
}
