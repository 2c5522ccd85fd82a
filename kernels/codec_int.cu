/* int8 and int4 on CUDA: mirrors codec_int.c. The encode is one thread per block in two
 * kernels (scales and their check first, so a refused encode leaves the residual as it was;
 * then the codes); the decode is one thread per element. The per-element math is codec_math.h's,
 * compiled without FMA contraction, so the bytes and sums are the CPU's. */
#include "codec_internal.h"
#include "codec_math.h"
#include "cuda_check.h"

static __global__ void scale_kernel(const float *grad, const float *residual, uint8_t *out, size_t n, uint32_t bits,
                                    unsigned *flag)
{
    size_t blocks = (n + GA_INT_BLOCK - 1) / GA_INT_BLOCK;
    int32_t levels = ga_int_levels(bits);
    unsigned bad = 0;
    for (size_t b = ga_cuda_tid(); b < blocks; b += ga_cuda_nthreads()) {
        size_t base = b * GA_INT_BLOCK, end = base + GA_INT_BLOCK < n ? base + GA_INT_BLOCK : n;
        float amax = 0.0f;
        for (size_t i = base; i < end; i++) {
            float v = residual[i] + grad[i];
            float a = v < 0.0f ? -v : v;
            amax = a > amax ? a : amax;
        }
        float scale = ga_int_scale(amax, levels);
        bad |= !ga_int_scale_ok(scale, bits);
        ga_int_put_scale(out, bits, b, scale);
    }
    if (bad) atomicOr(flag, 1u);
}

static __global__ void code_kernel(const float *grad, float *residual, uint8_t *out, size_t n, uint32_t bits)
{
    size_t blocks = (n + GA_INT_BLOCK - 1) / GA_INT_BLOCK;
    int32_t levels = ga_int_levels(bits);
    for (size_t b = ga_cuda_tid(); b < blocks; b += ga_cuda_nthreads()) {
        size_t base = b * GA_INT_BLOCK;
        uint32_t len = n - base < GA_INT_BLOCK ? (uint32_t)(n - base) : GA_INT_BLOCK;
        float scale = ga_int_get_scale(out, bits, b);
        int8_t code[GA_INT_BLOCK];
        for (uint32_t k = 0; k < len; k++) {
            float v = residual[base + k] + grad[base + k];
            int32_t q = ga_int_code(v, scale, levels);
            residual[base + k] = v - ga_int_value(q, scale);
            code[k] = (int8_t)q;
        }
        ga_int_pack_codes(ga_int_codes(out, bits, b), bits, code, len);
    }
}

static __global__ void check_kernel(const uint8_t *payload, size_t n, uint32_t bits, unsigned *flag)
{
    size_t blocks = (n + GA_INT_BLOCK - 1) / GA_INT_BLOCK;
    unsigned bad = 0;
    for (size_t b = ga_cuda_tid(); b < blocks; b += ga_cuda_nthreads())
        bad |= !ga_int_scale_ok(ga_int_get_scale(payload, bits, b), bits);
    if (bad) atomicOr(flag, 1u);
}

static __global__ void decode_kernel(const uint8_t *payload, float *sum, size_t n, uint32_t bits)
{
    for (size_t i = ga_cuda_tid(); i < n; i += ga_cuda_nthreads()) {
        size_t b = i / GA_INT_BLOCK;
        float scale = ga_int_get_scale(payload, bits, b);
        const uint8_t *codes = ga_int_codes((uint8_t *)payload, bits, b); /* read only */
        sum[i] = sum[i] + ga_int_value(ga_int_get_code(codes, bits, (uint32_t)(i % GA_INT_BLOCK)), scale);
    }
}

static ga_status encode(uint32_t bits, const ga_exec *ex, const float *grad, float *residual, size_t n,
                        uint8_t *out, size_t *out_len)
{
    if (n > 0) {
        cudaStream_t s = ga_cuda_stream(ex);
        size_t blocks = (n + GA_INT_BLOCK - 1) / GA_INT_BLOCK;
        unsigned flags = 0;
        GA_CHECK(ga_cuda_flags(s, blocks, &flags, scale_kernel, grad, (const float *)residual, out, n, bits));
        if (flags) return GA_E_RANGE;
        GA_CHECK(ga_cuda_launch(s, blocks, code_kernel, grad, residual, out, n, bits));
    }
    *out_len = ga_int_payload_bytes(bits, n);
    return GA_OK;
}

static ga_status decode_add(uint32_t bits, const ga_exec *ex, const uint8_t *payload, size_t n, float *sum)
{
    if (n == 0) return GA_OK;
    cudaStream_t s = ga_cuda_stream(ex);
    unsigned flags = 0;
    GA_CHECK(ga_cuda_flags(s, (n + GA_INT_BLOCK - 1) / GA_INT_BLOCK, &flags, check_kernel, payload, n, bits));
    if (flags) return GA_E_NONFINITE;
    return ga_cuda_launch(s, n, decode_kernel, payload, sum, n, bits);
}

ga_status ga_int8_encode_cuda(const ga_exec *ex, const ga_codec_params *p, const float *grad, float *residual,
                              size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
    (void)p, (void)cap;
    return encode(8, ex, grad, residual, n, out, out_len);
}

ga_status ga_int4_encode_cuda(const ga_exec *ex, const ga_codec_params *p, const float *grad, float *residual,
                              size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
    (void)p, (void)cap;
    return encode(4, ex, grad, residual, n, out, out_len);
}

ga_status ga_int8_decode_add_cuda(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload, size_t len,
                                  size_t n, float *sum)
{
    (void)p, (void)len;
    return decode_add(8, ex, payload, n, sum);
}

ga_status ga_int4_decode_add_cuda(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload, size_t len,
                                  size_t n, float *sum)
{
    (void)p, (void)len;
    return decode_add(4, ex, payload, n, sum);
}
