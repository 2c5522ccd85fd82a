/* Dense codecs on CUDA: none (fp32), fp16 and bf16, plus the finite-value scan every codec
 * uses; mirrors codec_dense.c over the same codec_math.h conversions, one thread per element.
 * Encode converts and raises flags in one pass; decode checks the whole payload before touching sum. */
#include "codec_internal.h"
#include "codec_math.h"
#include "cuda_check.h"

enum : unsigned { FLAG_NONFINITE = 1u, FLAG_RANGE = 2u };

/* A non-finite input outranks an overflow anywhere else, as on the CPU. */
static ga_status flags_status(unsigned flags)
{
    if (flags & FLAG_NONFINITE) return GA_E_NONFINITE;
    if (flags & FLAG_RANGE) return GA_E_RANGE;
    return GA_OK;
}

/* ---- finite scan ---- */

static __global__ void f32_check_kernel(const float *x, size_t n, unsigned *flag)
{
    unsigned bad = 0;
    for (size_t i = ga_cuda_tid(); i < n; i += ga_cuda_nthreads()) bad |= !ga_f32_bits_finite(ga_f32_bits(x[i]));
    if (bad) atomicOr(flag, FLAG_NONFINITE);
}

ga_status ga_all_finite_cuda(const ga_exec *ex, const float *x, size_t n, bool *finite)
{
    unsigned flags = 0;
    if (n > 0) GA_CHECK(ga_cuda_flags(ga_cuda_stream(ex), n, &flags, f32_check_kernel, x, n));
    *finite = flags == 0;
    return GA_OK;
}

/* ---- none: fp32 little-endian ---- */

static __global__ void none_encode_kernel(const float *g, float *out, size_t n, unsigned *flag)
{
    unsigned bad = 0;
    for (size_t i = ga_cuda_tid(); i < n; i += ga_cuda_nthreads()) {
        float v = g[i];
        bad |= !ga_f32_bits_finite(ga_f32_bits(v));
        out[i] = v;
    }
    if (bad) atomicOr(flag, FLAG_NONFINITE);
}

static __global__ void none_add_kernel(float *sum, const float *x, size_t n)
{
    for (size_t i = ga_cuda_tid(); i < n; i += ga_cuda_nthreads()) sum[i] = sum[i] + x[i];
}

ga_status ga_none_encode_cuda(const ga_exec *ex, const ga_codec_params *p, const float *grad, float *residual,
                              size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
    (void)p, (void)residual, (void)cap;
    unsigned flags = 0;
    if (n > 0) GA_CHECK(ga_cuda_flags(ga_cuda_stream(ex), n, &flags, none_encode_kernel, grad, (float *)out, n));
    GA_CHECK(flags_status(flags));
    *out_len = 4 * n;
    return GA_OK;
}

ga_status ga_none_add_checked_cuda(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload, size_t len,
                                   size_t n, float *sum)
{
    (void)p, (void)len;
    if (n == 0) return GA_OK;
    return ga_cuda_launch(ga_cuda_stream(ex), n, none_add_kernel, sum, (const float *)payload, n);
}

ga_status ga_none_decode_add_cuda(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload, size_t len,
                                  size_t n, float *sum)
{
    if (n == 0) return GA_OK;
    bool finite = false;
    GA_CHECK(ga_all_finite_cuda(ex, (const float *)payload, n, &finite));
    if (!finite) return GA_E_NONFINITE;
    return ga_none_add_checked_cuda(ex, p, payload, len, n, sum);
}

/* ---- fp16 and bf16: BF16 picks the wire type ---- */

template <bool BF16>
static __global__ void half_encode_kernel(const float *g, uint16_t *out, size_t n, unsigned *flag)
{
    unsigned bad = 0, over = 0;
    for (size_t i = ga_cuda_tid(); i < n; i += ga_cuda_nthreads()) {
        float v = g[i];
        uint16_t h = BF16 ? ga_f32_to_bf16(v) : ga_f32_to_f16(v);
        bad |= !ga_f32_bits_finite(ga_f32_bits(v));
        over |= BF16 ? !ga_bf16_finite(h) : !ga_f16_finite(h);
        out[i] = h;
    }
    unsigned f = (bad ? FLAG_NONFINITE : 0u) | (over ? FLAG_RANGE : 0u);
    if (f) atomicOr(flag, f);
}

/* exp_mask: 0x7C00 (fp16) or 0x7F80 (bf16); all exponent bits set = Inf or NaN. */
static __global__ void half_check_kernel(const uint16_t *h, size_t n, unsigned exp_mask, unsigned *flag)
{
    unsigned bad = 0;
    for (size_t i = ga_cuda_tid(); i < n; i += ga_cuda_nthreads()) bad |= (h[i] & exp_mask) == exp_mask;
    if (bad) atomicOr(flag, FLAG_NONFINITE);
}

template <bool BF16>
static __global__ void half_add_kernel(float *sum, const uint16_t *h, size_t n)
{
    for (size_t i = ga_cuda_tid(); i < n; i += ga_cuda_nthreads())
        sum[i] = sum[i] + (BF16 ? ga_bf16_to_f32(h[i]) : ga_f16_to_f32(h[i]));
}

template <bool BF16>
static ga_status half_encode(const ga_exec *ex, const float *grad, size_t n, uint8_t *out, size_t *out_len)
{
    unsigned flags = 0;
    if (n > 0)
        GA_CHECK(ga_cuda_flags(ga_cuda_stream(ex), n, &flags, half_encode_kernel<BF16>, grad, (uint16_t *)out, n));
    GA_CHECK(flags_status(flags));
    *out_len = 2 * n;
    return GA_OK;
}

/* check: the values are scanned first (decode_add); else they were checked (add_checked). */
template <bool BF16>
static ga_status half_decode_add(const ga_exec *ex, const uint8_t *payload, size_t n, float *sum, bool check)
{
    if (n == 0) return GA_OK;
    cudaStream_t s = ga_cuda_stream(ex);
    const uint16_t *h = (const uint16_t *)payload;
    unsigned flags = 0;
    if (check) GA_CHECK(ga_cuda_flags(s, n, &flags, half_check_kernel, h, n, BF16 ? 0x7F80u : 0x7C00u));
    if (flags) return GA_E_NONFINITE;
    return ga_cuda_launch(s, n, half_add_kernel<BF16>, sum, h, n);
}

ga_status ga_fp16_encode_cuda(const ga_exec *ex, const ga_codec_params *p, const float *grad, float *residual,
                              size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
    (void)p, (void)residual, (void)cap;
    return half_encode<false>(ex, grad, n, out, out_len);
}

ga_status ga_fp16_decode_add_cuda(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload, size_t len,
                                  size_t n, float *sum)
{
    (void)p, (void)len;
    return half_decode_add<false>(ex, payload, n, sum, true);
}

ga_status ga_fp16_add_checked_cuda(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload, size_t len,
                                   size_t n, float *sum)
{
    (void)p, (void)len;
    return half_decode_add<false>(ex, payload, n, sum, false);
}

ga_status ga_bf16_encode_cuda(const ga_exec *ex, const ga_codec_params *p, const float *grad, float *residual,
                              size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
    (void)p, (void)residual, (void)cap;
    return half_encode<true>(ex, grad, n, out, out_len);
}

ga_status ga_bf16_decode_add_cuda(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload, size_t len,
                                  size_t n, float *sum)
{
    (void)p, (void)len;
    return half_decode_add<true>(ex, payload, n, sum, true);
}

ga_status ga_bf16_add_checked_cuda(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload, size_t len,
                                   size_t n, float *sum)
{
    (void)p, (void)len;
    return half_decode_add<true>(ex, payload, n, sum, false);
}
