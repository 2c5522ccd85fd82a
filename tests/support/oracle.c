/* The slow scalar oracle: one plain loop per codec, positions written the way the spec words
 * them (byte and slot inside a word, in memory order), rounding done in double precision. */
#include "oracle.h"

#include <math.h>
#include <string.h>

uint32_t oracle_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

float oracle_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void put_f32_le(uint8_t *p, float f)
{
    uint32_t u = oracle_f32_bits(f);
    for (int b = 0; b < 4; b++) p[b] = (uint8_t)(u >> (8 * b));
}

static float get_f32_le(const uint8_t *p)
{
    uint32_t u = 0;
    for (int b = 0; b < 4; b++) u |= (uint32_t)p[b] << (8 * b);
    return oracle_f32_from_bits(u);
}

static uint16_t get_u16_le(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static void put_u16_le(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* ---- fp16 ----
 * Every binary16 value is an integer multiple of a quantum that is 2^-24 below 2^-14 (the
 * subnormals) and 2^(e-10) in the binade [2^e, 2^(e+1)). Scaling |f| by the quantum is exact
 * in double, nearbyint rounds half to even, and scaling back gives the rounded value exactly. */
static uint16_t f16_bits_of_exact(double v) /* v >= 0, a binary16 value or >= 65536 */
{
    if (v >= 65536.0) return 0x7C00u;
    if (v < 0x1p-14) return (uint16_t)ldexp(v, 24); /* 1024 * 2^-24 = 2^-14 carries into 0x0400 */
    int e;
    double m = frexp(v, &e); /* v = m * 2^e, m in [0.5, 1) */
    return (uint16_t)(((unsigned)(e - 1 + 15) << 10) | (unsigned)(ldexp(m, 11) - 1024.0));
}

uint16_t oracle_f32_to_f16(float f)
{
    uint16_t sign = signbit(f) ? 0x8000u : 0;
    if (isnan(f)) return (uint16_t)(sign | 0x7E00u);
    if (isinf(f)) return (uint16_t)(sign | 0x7C00u);
    double a = fabs((double)f);
    int e;
    frexp(a, &e);
    int quantum_exp = a < 0x1p-14 ? -24 : (e - 1) - 10;
    double rounded = ldexp(nearbyint(ldexp(a, -quantum_exp)), quantum_exp);
    return (uint16_t)(sign | f16_bits_of_exact(rounded));
}

float oracle_f16_to_f32(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp(m, -24);
    else
        v = ldexp(1024 + m, e - 25);
    return (float)(h & 0x8000u ? -v : v);
}

/* ---- bf16 ----
 * The two bf16 neighbours of |f| are its truncation and the next bf16 up (2^128 past the
 * largest finite one); pick the closer by exact distance in double, the even one on a tie. */
static double bf16_magnitude(uint32_t bits_hi16)
{
    if (bits_hi16 >= 0x7F80u) return 0x1p128;
    return (double)oracle_f32_from_bits(bits_hi16 << 16);
}

uint16_t oracle_f32_to_bf16(float f)
{
    uint32_t u = oracle_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t lo = (u & 0x7FFFFFFFu) >> 16, hi = lo + 1;
    double a = fabs((double)f), d_lo = a - bf16_magnitude(lo), d_hi = bf16_magnitude(hi) - a;
    uint32_t pick = d_lo < d_hi ? lo : (d_hi < d_lo ? hi : ((lo & 1u) ? hi : lo));
    return (uint16_t)(sign | pick);
}

float oracle_bf16_to_f32(uint16_t b) { return oracle_f32_from_bits((uint32_t)b << 16); }

/* ---- sizes ---- */

size_t oracle_encoded_size(ga_codec_id codec, size_t n)
{
    switch (codec) {
    case GA_CODEC_NONE: return 4 * n;
    case GA_CODEC_FP16:
    case GA_CODEC_BF16: return 2 * n;
    case GA_CODEC_2BIT: return 4 * ((n + 15) / 16);
    case GA_CODEC_1BIT: return 4 * ((n + 31) / 32);
    case GA_CODEC_1BIT_SCALED: return 4 * ((n + 1023) / 1024) + 4 * ((n + 31) / 32);
    case GA_CODEC_INT8:
    case GA_CODEC_INT4: {
        size_t full = n / 64, rest = n % 64, bits = codec == GA_CODEC_INT8 ? 8 : 4;
        size_t tail = rest ? 4 + ((rest * bits + 7) / 8 + 3) / 4 * 4 : 0;
        return full * (4 + 64 * bits / 8) + tail;
    }
    default: return 0;
    }
}

/* ---- bit positions, as the spec words them ----
 * 2bit: element i is in 32-bit word i/16, byte (i%16)/4 of that word in memory order, slot
 * i%4 of the byte, slot 0 = bits 7:6 ... slot 3 = bits 1:0.
 * 1bit: element i is in word i/32, byte (i%32)/8, mask 0x80 >> (i%8). */
static size_t q2_byte(size_t i) { return (i / 16) * 4 + (i % 16) / 4; }
static unsigned q2_shift(size_t i) { return 6u - 2u * (unsigned)(i % 4); }
static size_t q1_byte(size_t i) { return (i / 32) * 4 + (i % 32) / 8; }
static unsigned q1_mask(size_t i) { return 0x80u >> (i % 8); }

static int all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

void oracle_encode_2bit(float select, float t, const float *g, float *r, size_t n, uint8_t *out)
{
    memset(out, 0, oracle_encoded_size(GA_CODEC_2BIT, n));
    for (size_t i = 0; i < n; i++) {
        float v = r[i] + g[i];
        unsigned code = 0; /* 00 */
        if (v >= select) {
            code = 3; /* 11 = +t */
            v = v - t;
        } else if (v <= -select) {
            code = 2; /* 10 = -t */
            v = v + t;
        }
        r[i] = v;
        out[q2_byte(i)] |= (uint8_t)(code << q2_shift(i));
    }
}

static void encode_1bit(float t, const float *g, float *r, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++) {
        float v = r[i] + g[i];
        if (v > t) {
            out[q1_byte(i)] |= (uint8_t)q1_mask(i);
            r[i] = v - 1.0f;
        } else {
            r[i] = v + 1.0f;
        }
    }
}

/* One scale per 1024 elements: mean |v| summed in 32 lanes (lane j takes elements j, j+32, ...
 * in order), lanes folded by halves (16, 8, 4, 2, 1), divided by the block length. */
static void encode_1bit_scaled(const float *g, float *r, size_t n, uint8_t *out)
{
    size_t blocks = (n + 1023) / 1024;
    uint8_t *words = out + 4 * blocks;
    for (size_t b = 0; b < blocks; b++) {
        size_t lo = b * 1024, len = n - lo < 1024 ? n - lo : 1024;
        float lane[32] = {0};
        for (size_t k = 0; k < len; k++) {
            r[lo + k] = r[lo + k] + g[lo + k];
            lane[k % 32] = lane[k % 32] + fabsf(r[lo + k]);
        }
        for (int half = 16; half >= 1; half /= 2)
            for (int j = 0; j < half; j++) lane[j] = lane[j] + lane[j + half];
        float scale = lane[0] / (float)len;
        put_f32_le(out + 4 * b, scale);
        for (size_t i = lo; i < lo + len; i++) {
            if (r[i] >= 0.0f) { /* -0 counts as non-negative */
                words[q1_byte(i)] |= (uint8_t)q1_mask(i);
                r[i] = r[i] - scale;
            } else {
                r[i] = r[i] + scale;
            }
        }
    }
}

/* int8 / int4: block b of 64 elements starts at byte b * (4 + 64 * bits / 8): its scale, then
 * element k's code at byte k (int8) or in nibble k % 2 (low first) of byte k / 2 (int4). */
static size_t int_block_start(int bits, size_t b) { return b * (size_t)(4 + 64 * bits / 8); }

/* Round half to even, written out. */
static double round_even(double d)
{
    double f = floor(d), frac = d - f;
    if (frac > 0.5) return f + 1.0;
    if (frac < 0.5) return f;
    return fmod(f, 2.0) == 0.0 ? f : f + 1.0;
}

static ga_status encode_int(int bits, const float *g, float *r, size_t n, uint8_t *out)
{
    const float levels = bits == 8 ? 127.0f : 7.0f;
    size_t blocks = (n + 63) / 64;
    for (size_t b = 0; b < blocks; b++) { /* every scale is checked before any residual moves */
        float amax = 0.0f;
        for (size_t i = b * 64; i < n && i < b * 64 + 64; i++) amax = fmaxf(amax, fabsf(r[i] + g[i]));
        if (!(amax / levels <= (bits == 8 ? 0x1p120f : 0x1p124f))) return GA_E_RANGE;
    }
    for (size_t b = 0; b < blocks; b++) {
        size_t lo = b * 64, len = n - lo < 64 ? n - lo : 64;
        float amax = 0.0f;
        for (size_t k = 0; k < len; k++) amax = fmaxf(amax, fabsf(r[lo + k] + g[lo + k]));
        float scale = amax / levels;
        uint8_t *blk = out + int_block_start(bits, b);
        put_f32_le(blk, scale);
        for (size_t k = 0; k < len; k++) {
            float v = r[lo + k] + g[lo + k];
            double q = scale == 0.0f ? 0.0 : round_even((double)(v / scale));
            q = q > levels ? levels : (q < -levels ? -levels : q);
            int code = (int)q;
            r[lo + k] = v - (float)code * scale;
            if (bits == 8) blk[4 + k] = (uint8_t)(code < 0 ? code + 256 : code);
            else blk[4 + k / 2] |= (uint8_t)((code < 0 ? code + 16 : code) << (4 * (k % 2)));
        }
    }
    return GA_OK;
}

static float int_decoded(int bits, const uint8_t *payload, size_t i)
{
    const uint8_t *blk = payload + int_block_start(bits, i / 64);
    size_t k = i % 64;
    int code = bits == 8 ? blk[4 + k] : (blk[4 + k / 2] >> (4 * (k % 2))) & 0xF;
    if (code >= (bits == 8 ? 128 : 8)) code -= bits == 8 ? 256 : 16;
    return (float)code * get_f32_le(blk);
}

ga_status oracle_encode(ga_codec_id codec, float threshold, const float *grad, float *residual, size_t n,
                        uint8_t *out)
{
    if (!all_finite(grad, n)) return GA_E_NONFINITE;
    size_t bytes = oracle_encoded_size(codec, n);
    memset(out, 0, bytes);
    switch (codec) {
    case GA_CODEC_NONE:
        for (size_t i = 0; i < n; i++) put_f32_le(out + 4 * i, grad[i]);
        return GA_OK;
    case GA_CODEC_FP16:
    case GA_CODEC_BF16: {
        int over = 0;
        for (size_t i = 0; i < n; i++) {
            uint16_t h = codec == GA_CODEC_FP16 ? oracle_f32_to_f16(grad[i]) : oracle_f32_to_bf16(grad[i]);
            float back = codec == GA_CODEC_FP16 ? oracle_f16_to_f32(h) : oracle_bf16_to_f32(h);
            over |= isinf(back);
            put_u16_le(out + 2 * i, h);
        }
        return over ? GA_E_RANGE : GA_OK;
    }
    case GA_CODEC_2BIT: oracle_encode_2bit(threshold, threshold, grad, residual, n, out); return GA_OK;
    case GA_CODEC_1BIT: encode_1bit(threshold, grad, residual, n, out); return GA_OK;
    case GA_CODEC_1BIT_SCALED: encode_1bit_scaled(grad, residual, n, out); return GA_OK;
    case GA_CODEC_INT8: return encode_int(8, grad, residual, n, out);
    case GA_CODEC_INT4: return encode_int(4, grad, residual, n, out);
    default: return GA_E_CODEC;
    }
}

ga_status oracle_decode_check(ga_codec_id codec, float threshold, const uint8_t *payload, size_t len, size_t n)
{
    if (codec == GA_CODEC_2BIT && !(isfinite(threshold) && threshold > 0.0f)) return GA_E_THRESHOLD;
    if (codec == GA_CODEC_1BIT && !isfinite(threshold)) return GA_E_THRESHOLD;
    if (codec < GA_CODEC_NONE || codec > GA_CODEC_INT4 || codec == GA_CODEC_TOPK) return GA_E_CODEC;
    if (len != oracle_encoded_size(codec, n)) return GA_E_LENGTH;
    for (size_t i = 0; i < n; i++) {
        switch (codec) {
        case GA_CODEC_NONE:
            if (!isfinite(get_f32_le(payload + 4 * i))) return GA_E_NONFINITE;
            break;
        case GA_CODEC_FP16:
            if (!isfinite(oracle_f16_to_f32(get_u16_le(payload + 2 * i)))) return GA_E_NONFINITE;
            break;
        case GA_CODEC_BF16:
            if (!isfinite(oracle_bf16_to_f32(get_u16_le(payload + 2 * i)))) return GA_E_NONFINITE;
            break;
        default: break;
        }
    }
    if (codec == GA_CODEC_1BIT_SCALED) {
        /* A scale is a mean of magnitudes: NaN, Inf or below zero cannot come from an encoder.
         * -0 compares equal to 0 and is accepted. */
        for (size_t b = 0; b < (n + 1023) / 1024; b++) {
            float s = get_f32_le(payload + 4 * b);
            if (!isfinite(s) || s < 0.0f) return GA_E_NONFINITE;
        }
    }
    if (codec == GA_CODEC_INT8 || codec == GA_CODEC_INT4) { /* a scale in [0, 2^120] or [0, 2^124] */
        for (size_t b = 0; b < (n + 63) / 64; b++) {
            float s = get_f32_le(payload + int_block_start(codec == GA_CODEC_INT8 ? 8 : 4, b));
            if (!(s >= 0.0f && s <= (codec == GA_CODEC_INT8 ? 0x1p120f : 0x1p124f))) return GA_E_NONFINITE;
        }
    }
    return GA_OK;
}

ga_status oracle_decode_add(ga_codec_id codec, float threshold, const uint8_t *payload, size_t len, size_t n,
                            float *sum)
{
    ga_status rc = oracle_decode_check(codec, threshold, payload, len, n);
    if (rc != GA_OK) return rc;
    size_t blocks = (n + 1023) / 1024;
    for (size_t i = 0; i < n; i++) {
        float d = 0.0f;
        switch (codec) {
        case GA_CODEC_NONE: d = get_f32_le(payload + 4 * i); break;
        case GA_CODEC_FP16: d = oracle_f16_to_f32(get_u16_le(payload + 2 * i)); break;
        case GA_CODEC_BF16: d = oracle_bf16_to_f32(get_u16_le(payload + 2 * i)); break;
        case GA_CODEC_2BIT: {
            unsigned code = (payload[q2_byte(i)] >> q2_shift(i)) & 3u;
            d = code == 3 ? threshold : (code == 2 ? -threshold : 0.0f); /* 01 is never written: 0 */
            break;
        }
        case GA_CODEC_1BIT: d = payload[q1_byte(i)] & q1_mask(i) ? 1.0f : -1.0f; break;
        case GA_CODEC_1BIT_SCALED: {
            float s = get_f32_le(payload + 4 * (i / 1024));
            d = payload[4 * blocks + q1_byte(i)] & q1_mask(i) ? s : -s;
            break;
        }
        case GA_CODEC_INT8: d = int_decoded(8, payload, i); break;
        case GA_CODEC_INT4: d = int_decoded(4, payload, i); break;
        default: break;
        }
        sum[i] = sum[i] + d;
    }
    return GA_OK;
}
