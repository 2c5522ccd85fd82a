/* Dense codecs on the CPU: none (fp32), fp16 and bf16, plus the finite-value scan every codec
 * uses. Elementwise loops are left to the compiler's vectoriser (target clones per ISA); fp16
 * uses F16C/AVX-512 conversions, which round exactly as ga_f32_to_f16. */
#include <string.h>

#include "codec_internal.h"
#include "codec_math.h"
#include "ga_parallel.h"

#if GA_X86
#include <immintrin.h>
#endif

enum { FLAG_NONFINITE = 1u, FLAG_RANGE = 2u };

typedef struct dense_ctx {
    const ga_exec *ex;
    const float *in;
    const uint8_t *bytes; /* payload */
    float *out;           /* sum (decode) or fp32 payload (encode none) */
    uint16_t *half_out;   /* fp16/bf16 payload (encode) */
    bool stream;          /* write the payload with non-temporal stores (see wants_streaming) */
} dense_ctx;

/* A payload far larger than the caches is written with non-temporal stores: no read for
 * ownership of lines that are only written, a third less memory traffic for fp16/bf16. Every
 * tile starts GA_TILE elements from the last, so a 64-byte aligned payload keeps every tile's
 * vector stores aligned. */
#define STREAM_MIN_BYTES ((size_t)8 << 20)

static bool wants_streaming(const void *out, size_t bytes)
{
    return bytes >= STREAM_MIN_BYTES && (uintptr_t)out % 64 == 0;
}

static ga_status flags_status(uint32_t flags)
{
    if (flags & FLAG_NONFINITE) return GA_E_NONFINITE;
    if (flags & FLAG_RANGE) return GA_E_RANGE;
    return GA_OK;
}

/* ---- finite scan ---- */

GA_CLONES static uint32_t count_nonfinite_f32(const float *x, size_t n)
{
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) bad |= !ga_f32_bits_finite(ga_f32_bits(x[i]));
    return bad;
}

static uint32_t finite_tile(void *vctx, size_t lo, size_t hi)
{
    dense_ctx *c = vctx;
    return count_nonfinite_f32(c->in + lo, hi - lo) ? FLAG_NONFINITE : 0;
}

bool ga_all_finite_cpu(const ga_exec *ex, const float *x, size_t n)
{
    dense_ctx c = {.ex = ex, .in = x};
    return ga_parallel_tiles(ex, n, 4.0, finite_tile, &c) == 0;
}

/* ---- none: fp32 little-endian (this library only builds for little-endian hosts) ---- */

GA_CLONES static uint32_t copy_check_f32(float *dst, const float *src, size_t n)
{
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float v = src[i];
        bad |= !ga_f32_bits_finite(ga_f32_bits(v));
        dst[i] = v;
    }
    return bad;
}

static uint32_t none_encode_tile(void *vctx, size_t lo, size_t hi)
{
    dense_ctx *c = vctx;
    return copy_check_f32(c->out + lo, c->in + lo, hi - lo) ? FLAG_NONFINITE : 0;
}

ga_status ga_none_encode_cpu(const ga_exec *ex, const ga_codec_params *p, const float *grad, float *residual,
                             size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
    (void)p, (void)residual, (void)cap;
    dense_ctx c = {.ex = ex, .in = grad, .out = (float *)out};
    GA_CHECK(flags_status(ga_parallel_tiles(ex, n, 8.0, none_encode_tile, &c)));
    *out_len = 4 * n;
    return GA_OK;
}

GA_CLONES static void add_f32(float *sum, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) sum[i] = sum[i] + x[i];
}

static uint32_t none_decode_tile(void *vctx, size_t lo, size_t hi)
{
    dense_ctx *c = vctx;
    add_f32(c->out + lo, (const float *)c->bytes + lo, hi - lo);
    return 0;
}

ga_status ga_none_add_checked_cpu(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload, size_t len,
                                  size_t n, float *sum)
{
    (void)p, (void)len;
    dense_ctx c = {.ex = ex, .bytes = payload, .out = sum};
    ga_parallel_tiles(ex, n, 12.0, none_decode_tile, &c);
    return GA_OK;
}

ga_status ga_none_decode_add_cpu(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload, size_t len,
                                 size_t n, float *sum)
{
    if (!ga_all_finite_cpu(ex, (const float *)payload, n)) return GA_E_NONFINITE;
    return ga_none_add_checked_cpu(ex, p, payload, len, n, sum);
}

/* ---- bf16: integer rounding, vectorised by the compiler ---- */

GA_CLONES static uint32_t bf16_encode_span(uint16_t *dst, const float *src, size_t n)
{
    uint32_t bad = 0, over = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = ga_f32_bits(src[i]);
        uint16_t b = ga_f32_to_bf16(src[i]);
        bad |= !ga_f32_bits_finite(u);
        over |= !ga_bf16_finite(b);
        dst[i] = b;
    }
    return bad ? FLAG_NONFINITE : (over ? FLAG_RANGE : 0);
}

#if GA_X86
/* ga_f32_to_bf16 on 16 lanes: integer rounding, then vpmovdw packs the high halves. */
GA_TARGET_AVX512 static size_t bf16_encode_avx512(uint16_t *dst, const float *src, size_t n, bool stream,
                                                  uint32_t *flags)
{
    const __m512i exp32 = _mm512_set1_epi32(0x7F800000), exp16 = _mm512_set1_epi32(0x7F80);
    const __m512i bias = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1);
    __mmask16 bad = 0, over = 0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i u = _mm512_loadu_si512(src + i);
        bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(u, exp32), exp32);
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
        __m512i b = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), 16);
        over |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(b, exp16), exp16);
        __m256i h = _mm512_cvtepi32_epi16(b);
        if (stream) _mm256_stream_si256((__m256i *)(dst + i), h);
        else _mm256_storeu_si256((__m256i *)(dst + i), h);
    }
    if (stream) _mm_sfence();
    *flags = bad ? FLAG_NONFINITE : (over ? FLAG_RANGE : 0);
    return i;
}
#endif

static uint32_t bf16_encode_tile(void *vctx, size_t lo, size_t hi)
{
    dense_ctx *c = vctx;
    uint16_t *dst = c->half_out + lo;
    const float *src = c->in + lo;
    size_t n = hi - lo, done = 0;
    uint32_t flags = 0;
#if GA_X86
    if (ga_exec_simd(c->ex) == GA_SIMD_AVX512) done = bf16_encode_avx512(dst, src, n, c->stream, &flags);
#endif
    flags |= bf16_encode_span(dst + done, src + done, n - done);
    return flags & FLAG_NONFINITE ? FLAG_NONFINITE : flags;
}

ga_status ga_bf16_encode_cpu(const ga_exec *ex, const ga_codec_params *p, const float *grad, float *residual,
                             size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
    (void)p, (void)residual, (void)cap;
    dense_ctx c = {.ex = ex, .in = grad, .half_out = (uint16_t *)out, .stream = wants_streaming(out, 2 * n)};
    GA_CHECK(flags_status(ga_parallel_tiles(ex, n, 6.0, bf16_encode_tile, &c)));
    *out_len = 2 * n;
    return GA_OK;
}

GA_CLONES static uint32_t halves_nonfinite(const uint16_t *h, size_t n, uint16_t exp_mask)
{
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) bad |= (h[i] & exp_mask) == exp_mask;
    return bad;
}

static uint32_t bf16_check_tile(void *vctx, size_t lo, size_t hi)
{
    dense_ctx *c = vctx;
    return halves_nonfinite((const uint16_t *)c->bytes + lo, hi - lo, 0x7F80u) ? FLAG_NONFINITE : 0;
}

static uint32_t fp16_check_tile(void *vctx, size_t lo, size_t hi)
{
    dense_ctx *c = vctx;
    return halves_nonfinite((const uint16_t *)c->bytes + lo, hi - lo, 0x7C00u) ? FLAG_NONFINITE : 0;
}

GA_CLONES static void bf16_add_span(float *sum, const uint16_t *h, size_t n)
{
    for (size_t i = 0; i < n; i++) sum[i] = sum[i] + ga_bf16_to_f32(h[i]);
}

static uint32_t bf16_decode_tile(void *vctx, size_t lo, size_t hi)
{
    dense_ctx *c = vctx;
    bf16_add_span(c->out + lo, (const uint16_t *)c->bytes + lo, hi - lo);
    return 0;
}

ga_status ga_bf16_add_checked_cpu(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload, size_t len,
                                  size_t n, float *sum)
{
    (void)p, (void)len;
    dense_ctx c = {.ex = ex, .bytes = payload, .out = sum};
    ga_parallel_tiles(ex, n, 10.0, bf16_decode_tile, &c);
    return GA_OK;
}

ga_status ga_bf16_decode_add_cpu(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload, size_t len,
                                 size_t n, float *sum)
{
    dense_ctx c = {.ex = ex, .bytes = payload, .out = sum};
    if (ga_parallel_tiles(ex, n, 2.0, bf16_check_tile, &c)) return GA_E_NONFINITE;
    return ga_bf16_add_checked_cpu(ex, p, payload, len, n, sum);
}

/* ---- fp16: hardware conversion where the CPU has it, ga_f32_to_f16 elsewhere ---- */

static uint32_t fp16_encode_scalar(uint16_t *dst, const float *src, size_t n)
{
    uint32_t bad = 0, over = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t h = ga_f32_to_f16(src[i]);
        bad |= !ga_f32_bits_finite(ga_f32_bits(src[i]));
        over |= !ga_f16_finite(h);
        dst[i] = h;
    }
    return bad ? FLAG_NONFINITE : (over ? FLAG_RANGE : 0);
}

static void fp16_add_scalar(float *sum, const uint16_t *h, size_t n)
{
    for (size_t i = 0; i < n; i++) sum[i] = sum[i] + ga_f16_to_f32(h[i]);
}

#if GA_X86
/* The SIMD spans return how far they got; the caller finishes the tail with the scalar code.
 * (Ending in a call to a non-AVX function made GCC 12 drop the vzeroupper.) */
GA_TARGET_AVX512 static size_t fp16_encode_avx512(uint16_t *dst, const float *src, size_t n, bool stream,
                                                  uint32_t *flags)
{
    const __m512i exp32 = _mm512_set1_epi32(0x7F800000);
    const __m256i exp16 = _mm256_set1_epi16(0x7C00);
    __mmask16 bad = 0, over = 0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(src + i);
        __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(v), exp32), exp32);
        over |= _mm256_cmpeq_epi16_mask(_mm256_and_si256(h, exp16), exp16);
        if (stream) _mm256_stream_si256((__m256i *)(dst + i), h);
        else _mm256_storeu_si256((__m256i *)(dst + i), h);
    }
    if (stream) _mm_sfence();
    *flags = bad ? FLAG_NONFINITE : (over ? FLAG_RANGE : 0);
    return i;
}

GA_TARGET_AVX512 static size_t fp16_add_avx512(float *sum, const uint16_t *h, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + i)));
        _mm512_storeu_ps(sum + i, _mm512_add_ps(_mm512_loadu_ps(sum + i), v));
    }
    return i;
}

GA_TARGET_AVX2 static size_t fp16_encode_avx2(uint16_t *dst, const float *src, size_t n, uint32_t *flags)
{
    const __m256i exp32 = _mm256_set1_epi32(0x7F800000);
    const __m128i exp16 = _mm_set1_epi16(0x7C00);
    __m256i bad = _mm256_setzero_si256();
    __m128i over = _mm_setzero_si128();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(src + i);
        __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(v), exp32), exp32));
        over = _mm_or_si128(over, _mm_cmpeq_epi16(_mm_and_si128(h, exp16), exp16));
        _mm_storeu_si128((__m128i *)(dst + i), h);
    }
    *flags = !_mm256_testz_si256(bad, bad) ? FLAG_NONFINITE : (!_mm_testz_si128(over, over) ? FLAG_RANGE : 0);
    return i;
}

GA_TARGET_AVX2 static size_t fp16_add_avx2(float *sum, const uint16_t *h, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i)));
        _mm256_storeu_ps(sum + i, _mm256_add_ps(_mm256_loadu_ps(sum + i), v));
    }
    return i;
}
#endif

static uint32_t fp16_encode_tile(void *vctx, size_t lo, size_t hi)
{
    dense_ctx *c = vctx;
    uint16_t *dst = c->half_out + lo;
    const float *src = c->in + lo;
    size_t n = hi - lo, done = 0;
    uint32_t flags = 0;
    switch (ga_exec_simd(c->ex)) {
#if GA_X86
    case GA_SIMD_AVX512: done = fp16_encode_avx512(dst, src, n, c->stream, &flags); break;
    case GA_SIMD_AVX2: done = fp16_encode_avx2(dst, src, n, &flags); break;
#endif
    default: break;
    }
    flags |= fp16_encode_scalar(dst + done, src + done, n - done);
    /* A non-finite input outranks an overflow found in another part of the span. */
    return flags & FLAG_NONFINITE ? FLAG_NONFINITE : flags;
}

ga_status ga_fp16_encode_cpu(const ga_exec *ex, const ga_codec_params *p, const float *grad, float *residual,
                             size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
    (void)p, (void)residual, (void)cap;
    dense_ctx c = {.ex = ex, .in = grad, .half_out = (uint16_t *)out, .stream = wants_streaming(out, 2 * n)};
    GA_CHECK(flags_status(ga_parallel_tiles(ex, n, 6.0, fp16_encode_tile, &c)));
    *out_len = 2 * n;
    return GA_OK;
}

static uint32_t fp16_decode_tile(void *vctx, size_t lo, size_t hi)
{
    dense_ctx *c = vctx;
    const uint16_t *h = (const uint16_t *)c->bytes + lo;
    float *sum = c->out + lo;
    size_t n = hi - lo, done = 0;
    switch (ga_exec_simd(c->ex)) {
#if GA_X86
    case GA_SIMD_AVX512: done = fp16_add_avx512(sum, h, n); break;
    case GA_SIMD_AVX2: done = fp16_add_avx2(sum, h, n); break;
#endif
    default: break;
    }
    fp16_add_scalar(sum + done, h + done, n - done);
    return 0;
}

ga_status ga_fp16_add_checked_cpu(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload, size_t len,
                                  size_t n, float *sum)
{
    (void)p, (void)len;
    dense_ctx c = {.ex = ex, .bytes = payload, .out = sum};
    ga_parallel_tiles(ex, n, 10.0, fp16_decode_tile, &c);
    return GA_OK;
}

ga_status ga_fp16_decode_add_cpu(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload, size_t len,
                                 size_t n, float *sum)
{
    dense_ctx c = {.ex = ex, .bytes = payload, .out = sum};
    if (ga_parallel_tiles(ex, n, 2.0, fp16_check_tile, &c)) return GA_E_NONFINITE;
    return ga_fp16_add_checked_cpu(ex, p, payload, len, n, sum);
}
