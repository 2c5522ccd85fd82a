/* 1bit (MXNet master) and 1bit_scaled on the CPU. Both pack 32 elements per word, MSB of each
 * byte first; 1bit_scaled adds one fp32 scale per GA_1BIT_SCALED_BLOCK elements, summed in the
 * lane order fixed by codec_math.h. */
#include "codec_internal.h"
#include "codec_math.h"
#include "ga_parallel.h"

#if GA_X86
#include <immintrin.h>
#endif

typedef struct q1bit_ctx {
    const ga_exec *ex;
    const float *grad;
    float *residual;
    uint32_t *words;
    float *scales; /* 1bit_scaled only */
    float *sum;
    float t;
} q1bit_ctx;

/* ---- 1bit ---- */

static void encode_scalar(const q1bit_ctx *c, size_t lo, size_t hi)
{
    for (size_t w = lo / 32; w * 32 < hi; w++) {
        size_t base = w * 32, end = base + 32 < hi ? base + 32 : hi;
        uint32_t word = 0;
        for (size_t i = base; i < end; i++)
            word |= ga_1bit_quantize(&c->residual[i], c->grad[i], c->t) << ga_1bit_shift((uint32_t)(i - base));
        c->words[w] = word;
    }
}

static void decode_scalar(const q1bit_ctx *c, size_t lo, size_t hi)
{
    for (size_t w = lo / 32; w * 32 < hi; w++) {
        size_t base = w * 32, end = base + 32 < hi ? base + 32 : hi;
        uint32_t word = c->words[w];
        for (size_t i = base; i < end; i++)
            c->sum[i] = c->sum[i] + ((word >> ga_1bit_shift((uint32_t)(i - base))) & 1u ? 1.0f : -1.0f);
    }
}

#if GA_X86
/* Lane k of a 16-lane vector holds element k of a half word: its bit in the word. */
#define BIT_OF_LANE(k) ((int)(1u << (((k) & ~7) + 7 - ((k) & 7))))
#define LANE_BITS(base)                                                                                   \
    _mm512_set_epi32(BIT_OF_LANE(base + 15), BIT_OF_LANE(base + 14), BIT_OF_LANE(base + 13),             \
                     BIT_OF_LANE(base + 12), BIT_OF_LANE(base + 11), BIT_OF_LANE(base + 10),             \
                     BIT_OF_LANE(base + 9), BIT_OF_LANE(base + 8), BIT_OF_LANE(base + 7),                \
                     BIT_OF_LANE(base + 6), BIT_OF_LANE(base + 5), BIT_OF_LANE(base + 4),                \
                     BIT_OF_LANE(base + 3), BIT_OF_LANE(base + 2), BIT_OF_LANE(base + 1), BIT_OF_LANE(base))

GA_TARGET_AVX512 static size_t encode_avx512(const q1bit_ctx *c, size_t lo, size_t hi)
{
    const __m512 t = _mm512_set1_ps(c->t), one = _mm512_set1_ps(1.0f);
    size_t i = lo;
    for (; i + 32 <= hi; i += 32) {
        uint32_t mask = 0;
        for (int h = 0; h < 2; h++) {
            float *r = c->residual + i + 16 * h;
            __m512 v = _mm512_add_ps(_mm512_loadu_ps(r), _mm512_loadu_ps(c->grad + i + 16 * h));
            __mmask16 up = _mm512_cmp_ps_mask(v, t, _CMP_GT_OQ);
            _mm512_storeu_ps(r, _mm512_mask_blend_ps(up, _mm512_add_ps(v, one), _mm512_sub_ps(v, one)));
            mask |= (uint32_t)up << (16 * h);
        }
        c->words[i / 32] = ga_1bit_word_from_mask(mask);
    }
    return i;
}

GA_TARGET_AVX512 static size_t decode_avx512(const q1bit_ctx *c, size_t lo, size_t hi)
{
    const __m512i bits_lo = LANE_BITS(0), bits_hi = LANE_BITS(16);
    const __m512 one = _mm512_set1_ps(1.0f), minus_one = _mm512_set1_ps(-1.0f);
    size_t i = lo;
    for (; i + 32 <= hi; i += 32) {
        __m512i word = _mm512_set1_epi32((int)c->words[i / 32]);
        for (int h = 0; h < 2; h++) {
            __mmask16 set = _mm512_test_epi32_mask(word, h ? bits_hi : bits_lo);
            float *s = c->sum + i + 16 * h;
            _mm512_storeu_ps(s, _mm512_add_ps(_mm512_loadu_ps(s), _mm512_mask_blend_ps(set, minus_one, one)));
        }
    }
    return i;
}
#endif

static uint32_t encode_tile(void *vctx, size_t lo, size_t hi)
{
    const q1bit_ctx *c = vctx;
#if GA_X86
    if (ga_exec_simd(c->ex) == GA_SIMD_AVX512) lo = encode_avx512(c, lo, hi);
#endif
    encode_scalar(c, lo, hi);
    return 0;
}

static uint32_t decode_tile(void *vctx, size_t lo, size_t hi)
{
    const q1bit_ctx *c = vctx;
#if GA_X86
    if (ga_exec_simd(c->ex) == GA_SIMD_AVX512) lo = decode_avx512(c, lo, hi);
#endif
    decode_scalar(c, lo, hi);
    return 0;
}

ga_status ga_q1bit_encode_cpu(const ga_exec *ex, const ga_codec_params *p, const float *grad, float *residual,
                              size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
    (void)cap;
    q1bit_ctx c = {.ex = ex, .grad = grad, .residual = residual, .words = (uint32_t *)out, .t = p->threshold};
    ga_parallel_tiles(ex, n, 12.125, encode_tile, &c);
    *out_len = 4 * ((n + 31) / 32);
    return GA_OK;
}

ga_status ga_q1bit_decode_add_cpu(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload, size_t len,
                                  size_t n, float *sum)
{
    (void)p, (void)len;
    q1bit_ctx c = {.ex = ex, .words = (uint32_t *)payload, .sum = sum};
    ga_parallel_tiles(ex, n, 8.125, decode_tile, &c);
    return GA_OK;
}

/* ---- 1bit_scaled: per block, pass 1 stores v = r + g in r and sums |v| by lane; pass 2
 *      writes the sign bits and leaves v -+ scale in r. The block stays in L1 between passes. */

static float block_sum_scalar(float *r, const float *g, size_t len)
{
    float s[GA_1BIT_SCALED_LANES] = {0};
    for (size_t i = 0; i < len; i++) {
        float v = r[i] + g[i];
        r[i] = v;
        s[i % GA_1BIT_SCALED_LANES] += v < 0.0f ? -v : v;
    }
    ga_1bit_scaled_fold(s);
    return s[0];
}

/* Pass 2 over words [w_lo, w_hi) of a block starting at r (len elements). */
static void block_signs_scalar(float *r, size_t len, float scale, uint32_t *words, size_t w_lo)
{
    for (size_t w = w_lo; w * 32 < len; w++) {
        uint32_t word = 0;
        for (size_t k = 0; k < 32 && w * 32 + k < len; k++) {
            float v = r[w * 32 + k];
            uint32_t bit = ga_1bit_scaled_bit(v);
            r[w * 32 + k] = v - (bit ? scale : -scale);
            word |= bit << ga_1bit_shift((uint32_t)k);
        }
        words[w] = word;
    }
}

static void block_decode_scalar(float *sum, const uint32_t *words, size_t lo, size_t len, float scale)
{
    for (size_t i = lo; i < len; i++) {
        uint32_t bit = (words[i / 32] >> ga_1bit_shift((uint32_t)(i % 32))) & 1u;
        sum[i] = sum[i] + (bit ? scale : -scale);
    }
}

#if GA_X86
static __mmask16 lanes_below(size_t left) { return left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1u); }

GA_TARGET_AVX512 static float block_sum_avx512(float *r, const float *g, size_t len)
{
    __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    for (size_t i = 0; i < len; i += 32) {
        for (int h = 0; h < 2; h++) {
            size_t at = i + 16 * (size_t)h;
            __mmask16 m = at < len ? lanes_below(len - at) : 0;
            __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, r + at), _mm512_maskz_loadu_ps(m, g + at));
            _mm512_mask_storeu_ps(r + at, m, v);
            /* Masked-off lanes add +0, which leaves a lane sum (never -0) unchanged. */
            acc[h] = _mm512_add_ps(acc[h], _mm512_abs_ps(v));
        }
    }
    float s[GA_1BIT_SCALED_LANES];
    _mm512_storeu_ps(s, acc[0]);
    _mm512_storeu_ps(s + 16, acc[1]);
    ga_1bit_scaled_fold(s);
    return s[0];
}

/* Whole words only; returns the first word left for the scalar tail. */
GA_TARGET_AVX512 static size_t block_signs_avx512(float *r, size_t len, float scale, uint32_t *words)
{
    const __m512 zero = _mm512_setzero_ps(), pos = _mm512_set1_ps(scale), neg = _mm512_set1_ps(-scale);
    size_t w = 0;
    for (; (w + 1) * 32 <= len; w++) {
        uint32_t mask = 0;
        for (int h = 0; h < 2; h++) {
            float *x = r + w * 32 + 16 * (size_t)h;
            __m512 v = _mm512_loadu_ps(x);
            __mmask16 up = _mm512_cmp_ps_mask(v, zero, _CMP_GE_OQ);
            _mm512_storeu_ps(x, _mm512_sub_ps(v, _mm512_mask_blend_ps(up, neg, pos)));
            mask |= (uint32_t)up << (16 * h);
        }
        words[w] = ga_1bit_word_from_mask(mask);
    }
    return w;
}

GA_TARGET_AVX512 static size_t block_decode_avx512(float *sum, const uint32_t *words, size_t len, float scale)
{
    const __m512i bits_lo = LANE_BITS(0), bits_hi = LANE_BITS(16);
    const __m512 pos = _mm512_set1_ps(scale), neg = _mm512_set1_ps(-scale);
    size_t i = 0;
    for (; i + 32 <= len; i += 32) {
        __m512i word = _mm512_set1_epi32((int)words[i / 32]);
        for (int h = 0; h < 2; h++) {
            __mmask16 set = _mm512_test_epi32_mask(word, h ? bits_hi : bits_lo);
            float *s = sum + i + 16 * h;
            _mm512_storeu_ps(s, _mm512_add_ps(_mm512_loadu_ps(s), _mm512_mask_blend_ps(set, neg, pos)));
        }
    }
    return i;
}
#endif

static uint32_t scaled_encode_tile(void *vctx, size_t lo, size_t hi)
{
    const q1bit_ctx *c = vctx;
    int wide = GA_X86 && ga_exec_simd(c->ex) == GA_SIMD_AVX512;
    for (size_t b = lo; b < hi; b += GA_1BIT_SCALED_BLOCK) {
        size_t len = hi - b < GA_1BIT_SCALED_BLOCK ? hi - b : GA_1BIT_SCALED_BLOCK;
        float *r = c->residual + b;
        uint32_t *words = c->words + b / 32;
        float total, scale;
        size_t w_done = 0;
#if GA_X86
        if (wide) {
            total = block_sum_avx512(r, c->grad + b, len);
            scale = total / (float)len;
            w_done = block_signs_avx512(r, len, scale, words);
        } else
#endif
        {
            total = block_sum_scalar(r, c->grad + b, len);
            scale = total / (float)len;
        }
        block_signs_scalar(r, len, scale, words, w_done);
        c->scales[b / GA_1BIT_SCALED_BLOCK] = scale;
    }
    return 0;
}

static uint32_t scaled_decode_tile(void *vctx, size_t lo, size_t hi)
{
    const q1bit_ctx *c = vctx;
    int wide = GA_X86 && ga_exec_simd(c->ex) == GA_SIMD_AVX512;
    for (size_t b = lo; b < hi; b += GA_1BIT_SCALED_BLOCK) {
        size_t len = hi - b < GA_1BIT_SCALED_BLOCK ? hi - b : GA_1BIT_SCALED_BLOCK;
        float scale = c->scales[b / GA_1BIT_SCALED_BLOCK];
        const uint32_t *words = c->words + b / 32;
        size_t done = 0;
#if GA_X86
        if (wide) done = block_decode_avx512(c->sum + b, words, len, scale);
#endif
        block_decode_scalar(c->sum + b, words, done, len, scale);
    }
    return 0;
}

ga_status ga_q1bit_scaled_encode_cpu(const ga_exec *ex, const ga_codec_params *p, const float *grad,
                                     float *residual, size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
    (void)p, (void)cap;
    if (n == 0) { /* no buffers to offset into */
        *out_len = 0;
        return GA_OK;
    }
    size_t blocks = (n + GA_1BIT_SCALED_BLOCK - 1) / GA_1BIT_SCALED_BLOCK;
    q1bit_ctx c = {.ex = ex, .grad = grad, .residual = residual, .scales = (float *)out,
                   .words = (uint32_t *)(out + 4 * blocks)};
    ga_parallel_tiles(ex, n, 12.125, scaled_encode_tile, &c);
    *out_len = 4 * blocks + 4 * ((n + 31) / 32);
    return GA_OK;
}

ga_status ga_q1bit_scaled_decode_add_cpu(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload,
                                         size_t len, size_t n, float *sum)
{
    (void)p, (void)len;
    if (n == 0) return GA_OK; /* no buffers to offset into */
    size_t blocks = (n + GA_1BIT_SCALED_BLOCK - 1) / GA_1BIT_SCALED_BLOCK;
    const float *scales = (const float *)payload;
    for (size_t b = 0; b < blocks; b++) /* few: one per 1024 elements */
        if (!ga_f32_bits_finite(ga_f32_bits(scales[b])) || !(scales[b] >= 0.0f)) return GA_E_NONFINITE;
    q1bit_ctx c = {.ex = ex, .scales = (float *)payload, .words = (uint32_t *)(payload + 4 * blocks), .sum = sum};
    ga_parallel_tiles(ex, n, 8.125, scaled_decode_tile, &c);
    return GA_OK;
}
