/* 2bit (MXNet) on the CPU: threshold quantisation with a residual (selection at params->select,
 * the level sent params->threshold), and the fused decode_add.
 * Tiles are processed by output word; the SIMD paths compute lane masks with vector compares
 * and pack them with ga_2bit_word_from_masks, so every path writes the same bytes. */
#include "codec_internal.h"
#include "codec_math.h"
#include "ga_parallel.h"

#if GA_X86
#include <immintrin.h>
#endif

typedef struct q2bit_ctx {
    const ga_exec *ex;
    const float *grad;
    float *residual;
    uint32_t *words;
    float *sum;
    float t;      /* the level sent, +-t */
    float select; /* encode: |x| >= select is sent */
} q2bit_ctx;

/* Elements [lo, hi) with lo a multiple of 16: whole words, the last one maybe partial. */
static void encode_scalar(const q2bit_ctx *c, size_t lo, size_t hi)
{
    for (size_t w = lo / 16; w * 16 < hi; w++) {
        size_t base = w * 16, end = base + 16 < hi ? base + 16 : hi;
        uint32_t word = 0;
        for (size_t i = base; i < end; i++)
            word |= ga_2bit_quantize(&c->residual[i], c->grad[i], c->select, c->t) << ga_2bit_shift((uint32_t)(i - base));
        c->words[w] = word;
    }
}

static void decode_scalar(const q2bit_ctx *c, size_t lo, size_t hi)
{
    for (size_t w = lo / 16; w * 16 < hi; w++) {
        size_t base = w * 16, end = base + 16 < hi ? base + 16 : hi;
        uint32_t word = c->words[w];
        for (size_t i = base; i < end; i++)
            c->sum[i] = c->sum[i] + ga_2bit_value((word >> ga_2bit_shift((uint32_t)(i - base))) & 3u, c->t);
    }
}

#if GA_X86
/* Compares run on the lanes permuted into slot order (slot s of the little-endian word holds
 * element (s & ~3) | (3 - (s & 3))), so each mask bit lands in place with one pdep. pdep is
 * fast on every CPU with AVX-512; the AVX2 path, which also runs on CPUs where it is
 * microcoded, packs with ga_2bit_word_from_masks instead. */
GA_TARGET_AVX512 static size_t encode_avx512(const q2bit_ctx *c, size_t lo, size_t hi)
{
    const __m512 t = _mm512_set1_ps(c->t), sel = _mm512_set1_ps(c->select), neg_sel = _mm512_set1_ps(-c->select);
    const __m512i slot_order = _mm512_set_epi32(12, 13, 14, 15, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3);
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        __m512 v = _mm512_add_ps(_mm512_loadu_ps(c->residual + i), _mm512_loadu_ps(c->grad + i));
        __mmask16 pos = _mm512_cmp_ps_mask(v, sel, _CMP_GE_OQ);
        __mmask16 neg = _mm512_cmp_ps_mask(v, neg_sel, _CMP_LE_OQ);
        __m512 slots = _mm512_permutexvar_ps(slot_order, v);
        uint32_t slot_pos = _mm512_cmp_ps_mask(slots, sel, _CMP_GE_OQ);
        uint32_t slot_any = slot_pos | _mm512_cmp_ps_mask(slots, neg_sel, _CMP_LE_OQ);
        v = _mm512_mask_sub_ps(v, pos, v, t);
        v = _mm512_mask_add_ps(v, neg, v, t);
        _mm512_storeu_ps(c->residual + i, v);
        c->words[i / 16] = _pdep_u32(slot_any, 0xAAAAAAAAu) | _pdep_u32(slot_pos, 0x55555555u);
    }
    return i;
}

GA_TARGET_AVX512 static size_t decode_avx512(const q2bit_ctx *c, size_t lo, size_t hi)
{
    const __m512i shifts = _mm512_set_epi32(24, 26, 28, 30, 16, 18, 20, 22, 8, 10, 12, 14, 0, 2, 4, 6);
    const __m512i three = _mm512_set1_epi32(3), two = _mm512_set1_epi32(2);
    const __m512 t = _mm512_set1_ps(c->t), neg_t = _mm512_set1_ps(-c->t), zero = _mm512_setzero_ps();
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        __m512i code = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32((int)c->words[i / 16]), shifts), three);
        __m512 val = _mm512_mask_mov_ps(zero, _mm512_cmpeq_epi32_mask(code, three), t);
        val = _mm512_mask_mov_ps(val, _mm512_cmpeq_epi32_mask(code, two), neg_t);
        _mm512_storeu_ps(c->sum + i, _mm512_add_ps(_mm512_loadu_ps(c->sum + i), val));
    }
    return i;
}

/* Two 8-lane halves per word. */
GA_TARGET_AVX2 static size_t encode_avx2(const q2bit_ctx *c, size_t lo, size_t hi)
{
    const __m256 t = _mm256_set1_ps(c->t), sel = _mm256_set1_ps(c->select), neg_sel = _mm256_set1_ps(-c->select);
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        uint32_t pos = 0, any = 0;
        for (int h = 0; h < 2; h++) {
            float *r = c->residual + i + 8 * h;
            __m256 v = _mm256_add_ps(_mm256_loadu_ps(r), _mm256_loadu_ps(c->grad + i + 8 * h));
            __m256 p = _mm256_cmp_ps(v, sel, _CMP_GE_OQ), n = _mm256_cmp_ps(v, neg_sel, _CMP_LE_OQ);
            v = _mm256_blendv_ps(v, _mm256_sub_ps(v, t), p);
            v = _mm256_blendv_ps(v, _mm256_add_ps(v, t), n);
            _mm256_storeu_ps(r, v);
            pos |= (uint32_t)_mm256_movemask_ps(p) << (8 * h);
            any |= (uint32_t)_mm256_movemask_ps(_mm256_or_ps(p, n)) << (8 * h);
        }
        c->words[i / 16] = ga_2bit_word_from_masks(pos, any);
    }
    return i;
}

GA_TARGET_AVX2 static size_t decode_avx2(const q2bit_ctx *c, size_t lo, size_t hi)
{
    const __m256i shifts_lo = _mm256_set_epi32(8, 10, 12, 14, 0, 2, 4, 6);
    const __m256i shifts_hi = _mm256_set_epi32(24, 26, 28, 30, 16, 18, 20, 22);
    const __m256i three = _mm256_set1_epi32(3), two = _mm256_set1_epi32(2);
    const __m256 t = _mm256_set1_ps(c->t), neg_t = _mm256_set1_ps(-c->t);
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        __m256i word = _mm256_set1_epi32((int)c->words[i / 16]);
        for (int h = 0; h < 2; h++) {
            __m256i code = _mm256_and_si256(_mm256_srlv_epi32(word, h ? shifts_hi : shifts_lo), three);
            __m256 val = _mm256_or_ps(_mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(code, three)), t),
                                      _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(code, two)), neg_t));
            float *s = c->sum + i + 8 * h;
            _mm256_storeu_ps(s, _mm256_add_ps(_mm256_loadu_ps(s), val));
        }
    }
    return i;
}
#endif

static uint32_t encode_tile(void *vctx, size_t lo, size_t hi)
{
    const q2bit_ctx *c = vctx;
    switch (ga_exec_simd(c->ex)) {
#if GA_X86
    case GA_SIMD_AVX512: lo = encode_avx512(c, lo, hi); break;
    case GA_SIMD_AVX2: lo = encode_avx2(c, lo, hi); break;
#endif
    default: break;
    }
    encode_scalar(c, lo, hi);
    return 0;
}

static uint32_t decode_tile(void *vctx, size_t lo, size_t hi)
{
    const q2bit_ctx *c = vctx;
    switch (ga_exec_simd(c->ex)) {
#if GA_X86
    case GA_SIMD_AVX512: lo = decode_avx512(c, lo, hi); break;
    case GA_SIMD_AVX2: lo = decode_avx2(c, lo, hi); break;
#endif
    default: break;
    }
    decode_scalar(c, lo, hi);
    return 0;
}

ga_status ga_q2bit_encode_cpu(const ga_exec *ex, const ga_codec_params *p, const float *grad, float *residual,
                              size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
    (void)cap;
    q2bit_ctx c = {.ex = ex, .grad = grad, .residual = residual, .words = (uint32_t *)out, .t = p->threshold,
                   .select = ga_2bit_select(p)};
    ga_parallel_tiles(ex, n, 12.25, encode_tile, &c);
    *out_len = 4 * ((n + 15) / 16);
    return GA_OK;
}

ga_status ga_q2bit_decode_add_cpu(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload, size_t len,
                                  size_t n, float *sum)
{
    (void)len;
    q2bit_ctx c = {.ex = ex, .words = (uint32_t *)payload, .sum = sum, .t = p->threshold};
    ga_parallel_tiles(ex, n, 8.25, decode_tile, &c);
    return GA_OK;
}
