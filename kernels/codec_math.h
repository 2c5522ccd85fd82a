/* Per-element codec math shared by the CPU and CUDA implementations (one body, two launchers).
 * Everything here is exact IEEE arithmetic with no FMA contraction, so any loop over it gives
 * bit-identical results on any thread count or device. Byte layouts: docs/wire-format.md. */
#ifndef GA_CODEC_MATH_H
#define GA_CODEC_MATH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ga_codec.h"

#include "ga_hd.h"

GA_HD uint32_t ga_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

GA_HD float ga_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

GA_HD int ga_f32_bits_finite(uint32_t u) { return (u & 0x7F800000u) != 0x7F800000u; }

/* ---- fp16: IEEE binary16, round to nearest, ties to even (as vcvtps2ph imm 0 and
 *      __float2half_rn). Finite floats of magnitude >= 65520 round to Inf. ---- */
GA_HD uint16_t ga_f32_to_f16(float f)
{
    uint32_t x = ga_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);  /* NaN -> quiet NaN */
    if (ax >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* >= 65520 (or Inf) -> Inf */
    if (ax >= 0x38800000u) {                                  /* normal half */
        uint32_t r = ax - 0x38000000u;                        /* re-bias exponent 127 -> 15 */
        uint32_t q = r >> 13, rem = r & 0x1FFFu;
        q += (rem > 0x1000u) || (rem == 0x1000u && (q & 1u));
        return (uint16_t)(sign | q);
    }
    if (ax <= 0x33000000u) return (uint16_t)sign; /* <= 2^-25: the tie at 2^-25 goes to even 0 */
    /* Subnormal half: round the 24-bit significand to a multiple of 2^-24. */
    uint32_t e = ax >> 23;                 /* 102..112 */
    uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
    uint32_t shift = 126u - e;             /* 14..24 */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    q += (rem > half) || (rem == half && (q & 1u));
    return (uint16_t)(sign | q);
}

GA_HD float ga_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1Fu) return ga_f32_from_bits(sign | 0x7F800000u | (m << 13));
    if (e != 0) return ga_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
    if (m == 0) return ga_f32_from_bits(sign);
    e = 113u; /* subnormal: normalise */
    while (!(m & 0x400u)) {
        m <<= 1;
        e--;
    }
    return ga_f32_from_bits(sign | (e << 23) | ((m & 0x3FFu) << 13));
}

GA_HD int ga_f16_finite(uint16_t h) { return (h & 0x7C00u) != 0x7C00u; }

/* ---- bf16: the top 16 bits of fp32, round to nearest even (finite inputs; NaN excluded by
 *      the callers). Overflow rounds to Inf. Subnormals are kept (unlike vcvtneps2bf16). ---- */
GA_HD uint16_t ga_f32_to_bf16(float f)
{
    uint32_t u = ga_f32_bits(f);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

GA_HD float ga_bf16_to_f32(uint16_t b) { return ga_f32_from_bits((uint32_t)b << 16); }

GA_HD int ga_bf16_finite(uint16_t b) { return (b & 0x7F80u) != 0x7F80u; }

/* ---- 2bit (MXNet): element k of a 16-element word sits at bits shift(k)+1 : shift(k) of the
 *      little-endian word, most significant pair first inside each byte. ---- */
#define GA_2BIT_CODE_ZERO 0u
#define GA_2BIT_CODE_NEG 2u /* 10 */
#define GA_2BIT_CODE_POS 3u /* 11 */

GA_HD uint32_t ga_2bit_shift(uint32_t k) { return ((k >> 2) << 3) + 6u - 2u * (k & 3u); }

/* r += g; v = r is sent as +level when v >= select, as -level when v <= -select, and the level
 * sent leaves r: returns the code. Inclusive comparisons (MXNet, where select = level = t). */
GA_HD uint32_t ga_2bit_quantize(float *r, float g, float select, float level)
{
    float v = *r + g;
    if (v >= select) {
        *r = v - level;
        return GA_2BIT_CODE_POS;
    }
    if (v <= -select) {
        *r = v + level;
        return GA_2BIT_CODE_NEG;
    }
    *r = v;
    return GA_2BIT_CODE_ZERO;
}

/* Code 11 -> +t, 10 -> -t, 00 and the never-written 01 -> 0. */
GA_HD float ga_2bit_value(uint32_t code, float t)
{
    return code == GA_2BIT_CODE_POS ? t : (code == GA_2BIT_CODE_NEG ? -t : 0.0f);
}

/* Packs one word from 16-bit lane masks (bit k = element k): pos = code 11, any = 11 or 10.
 * Reverses the four 2-bit slots of each byte, then interleaves hi/lo code bits. Used by the
 * SIMD paths, which compute the masks with vector compares. */
GA_HD uint32_t ga_2bit_spread16(uint32_t m)
{
    m = ((m & 0x1111u) << 3) | ((m & 0x2222u) << 1) | ((m >> 1) & 0x2222u) | ((m >> 3) & 0x1111u);
    m = (m | (m << 8)) & 0x00FF00FFu;
    m = (m | (m << 4)) & 0x0F0F0F0Fu;
    m = (m | (m << 2)) & 0x33333333u;
    m = (m | (m << 1)) & 0x55555555u;
    return m;
}

GA_HD uint32_t ga_2bit_word_from_masks(uint32_t pos, uint32_t any)
{
    return (ga_2bit_spread16(any) << 1) | ga_2bit_spread16(pos);
}

/* ---- 1bit (MXNet master): element k of a 32-element word is bit (0x80 >> (k & 7)) of byte
 *      k >> 3 in memory order. ---- */
GA_HD uint32_t ga_1bit_shift(uint32_t k) { return ((k >> 3) << 3) + 7u - (k & 7u); }

/* Packs one word from a 32-bit lane mask (bit k = element k): reverses the bits of each byte. */
GA_HD uint32_t ga_1bit_word_from_mask(uint32_t m)
{
    m = ((m >> 1) & 0x55555555u) | ((m & 0x55555555u) << 1);
    m = ((m >> 2) & 0x33333333u) | ((m & 0x33333333u) << 2);
    return ((m >> 4) & 0x0F0F0F0Fu) | ((m & 0x0F0F0F0Fu) << 4);
}

/* r += g; bit 1 when r > t (strict), then r -= 1; else r += 1. */
GA_HD uint32_t ga_1bit_quantize(float *r, float g, float t)
{
    float v = *r + g;
    if (v > t) {
        *r = v - 1.0f;
        return 1u;
    }
    *r = v + 1.0f;
    return 0u;
}

/* ---- 1bit_scaled: same bit layout; bit 1 = +scale (v >= 0), bit 0 = -scale; one scale per
 *      GA_1BIT_SCALED_BLOCK elements = mean |v| over the block, summed in a fixed order:
 *      32 lanes, lane j adds |v[j]|, |v[j+32]|, ... in turn from 0; then lanes fold as
 *      s[j] += s[j+16], s[j] += s[j+8], s[j] += s[j+4], s[j] += s[j+2], s[j] += s[j+1];
 *      scale = s[0] / len. This is the order a CUDA warp reduces in. ---- */
#define GA_1BIT_SCALED_LANES 32u

GA_HD void ga_1bit_scaled_fold(float s[GA_1BIT_SCALED_LANES])
{
    for (uint32_t off = GA_1BIT_SCALED_LANES / 2; off > 0; off >>= 1)
        for (uint32_t j = 0; j < off; j++) s[j] = s[j] + s[j + off];
}

GA_HD float ga_1bit_scaled_scale(const float *v, uint32_t len)
{
    float s[GA_1BIT_SCALED_LANES];
    for (uint32_t j = 0; j < GA_1BIT_SCALED_LANES; j++) s[j] = 0.0f;
    for (uint32_t i = 0; i < len; i++) s[i % GA_1BIT_SCALED_LANES] += v[i] < 0.0f ? -v[i] : v[i];
    ga_1bit_scaled_fold(s);
    return s[0] / (float)len;
}

GA_HD uint32_t ga_1bit_scaled_bit(float v) { return v >= 0.0f ? 1u : 0u; }

/* ---- int8 / int4: blocks of GA_INT_BLOCK elements (the last may be shorter), each an fp32
 *      scale then one signed code per element: int8 a byte, int4 a nibble (element 2j the low
 *      nibble of byte j, 2j+1 the high one), the codes zero-padded to a multiple of 4 bytes.
 *      scale = max |v| over the block / L (L = 127 or 7, one IEEE division); code =
 *      rint(v / scale) (ties to even) clamped to [-L, L], 0 when scale is 0; the value sent is
 *      code * scale. A decoder reads any code of the type (int8 -128, int4 -8 included). ---- */
GA_HD int32_t ga_int_levels(uint32_t bits) { return bits == 8 ? 127 : 7; }

GA_HD float ga_int_scale(float amax, int32_t levels) { return amax / (float)levels; }

/* rint(x) for |x| <= 2^22, to nearest, ties to even: x + 1.5 * 2^23 lands in [2^23, 2^24), where
 * the float spacing is 1, so the add rounds x to an integer and the subtract is exact. */
GA_HD float ga_int_rint(float x) { return (x + 12582912.0f) - 12582912.0f; }

/* The code of v for a scale > 0, as a float: v / scale clamped to [-top, top] (top = L; rint
 * commutes with clamping at integers), then rounded. No branch: loops over it vectorise. */
GA_HD float ga_int_quantize(float v, float scale, float top)
{
    float q = v / scale;
    q = q > top ? top : q;
    q = q < -top ? -top : q;
    return ga_int_rint(q);
}

/* The code of v: ga_int_quantize, or 0 when scale is 0 (the block is all zeros). */
GA_HD int32_t ga_int_code(float v, float scale, int32_t levels)
{
    return scale == 0.0f ? 0 : (int32_t)ga_int_quantize(v, scale, (float)levels);
}

GA_HD float ga_int_value(int32_t code, float scale) { return (float)code * scale; }

/* A scale a decoder accepts: >= 0 and at most GA_INT8_MAX_SCALE / GA_INT4_MAX_SCALE (so not NaN
 * or Inf), so that any code of the type times it is finite. */
GA_HD int ga_int_scale_ok(float s, uint32_t bits)
{
    return s >= 0.0f && s <= (bits == 8 ? GA_INT8_MAX_SCALE : GA_INT4_MAX_SCALE);
}

/* Bytes of one block of len elements, and of a payload of n elements. */
GA_HD size_t ga_int_block_bytes(uint32_t bits, size_t len) { return 4 + (((len * bits + 7) / 8 + 3) & ~(size_t)3); }

GA_HD size_t ga_int_payload_bytes(uint32_t bits, size_t n)
{
    size_t full = n / GA_INT_BLOCK, rest = n % GA_INT_BLOCK;
    return full * ga_int_block_bytes(bits, GA_INT_BLOCK) + (rest ? ga_int_block_bytes(bits, rest) : 0);
}

GA_HD float ga_int_get_scale(const uint8_t *payload, uint32_t bits, size_t block)
{
    uint32_t u;
    memcpy(&u, payload + block * ga_int_block_bytes(bits, GA_INT_BLOCK), 4);
    return ga_f32_from_bits(u);
}

GA_HD void ga_int_put_scale(uint8_t *payload, uint32_t bits, size_t block, float scale)
{
    uint32_t u = ga_f32_bits(scale);
    memcpy(payload + block * ga_int_block_bytes(bits, GA_INT_BLOCK), &u, 4);
}

GA_HD uint8_t *ga_int_codes(uint8_t *payload, uint32_t bits, size_t block)
{
    return payload + block * ga_int_block_bytes(bits, GA_INT_BLOCK) + 4;
}

/* Packs the len codes of a block (each in [-8, 7] for int4) and zeroes the padding after them. */
GA_HD void ga_int_pack_codes(uint8_t *codes, uint32_t bits, const int8_t *code, uint32_t len)
{
    size_t used = ((size_t)len * bits + 7) / 8, end = ga_int_block_bytes(bits, len) - 4;
    if (bits == 8) {
        for (uint32_t k = 0; k < len; k++) codes[k] = (uint8_t)code[k];
    } else {
        for (uint32_t j = 0; j < len / 2; j++)
            codes[j] = (uint8_t)(((uint32_t)code[2 * j] & 0xFu) | ((uint32_t)code[2 * j + 1] & 0xFu) << 4);
        if (len % 2) codes[len / 2] = (uint8_t)((uint32_t)code[len - 1] & 0xFu);
    }
    for (size_t j = used; j < end; j++) codes[j] = 0;
}

/* The len codes of a block, sign-extended (a nibble n as (int8_t)(n << 4) >> 4). */
GA_HD void ga_int_unpack_codes(const uint8_t *codes, uint32_t bits, int8_t *code, uint32_t len)
{
    if (bits == 8) {
        for (uint32_t k = 0; k < len; k++) code[k] = (int8_t)codes[k];
    } else {
        for (uint32_t j = 0; j < len / 2; j++) {
            code[2 * j] = (int8_t)((int8_t)(uint8_t)(codes[j] << 4) >> 4);
            code[2 * j + 1] = (int8_t)((int8_t)codes[j] >> 4);
        }
        if (len % 2) code[len - 1] = (int8_t)((int8_t)(uint8_t)(codes[len / 2] << 4) >> 4);
    }
}

GA_HD int32_t ga_int_get_code(const uint8_t *codes, uint32_t bits, uint32_t k)
{
    if (bits == 8) return (int32_t)(int8_t)codes[k];
    return (int32_t)(((uint32_t)codes[k / 2] >> (4u * (k % 2)) & 0xFu) ^ 0x8u) - 8;
}

#endif
