/* Golden bytes worked out by hand from the spec (MXNet 2-bit and 1-bit layouts, 1bit_scaled,
 * fp16, bf16), each byte derived in a comment. The library and the oracle must both produce
 * them, at every SIMD level, so a shared misreading of the spec cannot pass unnoticed. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "test_memory.h"

#include "ga_alloc.h"
#include "ga_codec.h"
#include "oracle.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static int simd_levels(ga_simd out[3])
{
    int count = 0;
    for (int s = GA_SIMD_SCALAR; s <= GA_SIMD_AVX512; s++)
        if (s <= (int)ga_cpu_simd()) out[count++] = (ga_simd)s;
    return count;
}

/* The payload buffer must be 4-byte aligned; copy literals into one. */
typedef union payload_buf {
    uint8_t b[256];
    uint32_t align;
} payload_buf;

/* Encodes grad (n values, residual starting from res_in) with the library at every SIMD level
 * and with the oracle; both must give want_bytes and want_res exactly. */
static void expect_encode(ga_codec_id codec, float t, const float *grad, const float *res_in, size_t n,
                          const uint8_t *want_bytes, size_t want_len, const float *want_res)
{
    ga_codec_params p = ga_codec_params_default(codec);
    p.threshold = t;
    bool has_res = ga_codec_has_residual(codec);
    float res[1100];
    payload_buf out;
    assert_true(n <= COUNT(res) && want_len <= sizeof out.b);
    ga_simd levels[3];
    int n_levels = simd_levels(levels);
    for (int l = 0; l <= n_levels; l++) {
        memset(out.b, 0xA5, sizeof out.b);
        if (has_res) memcpy(res, res_in, n * sizeof(float));
        if (l == n_levels) { /* the oracle */
            assert_int_equal(oracle_encode(codec, t, grad, res, n, out.b), GA_OK);
        } else {
            ga_exec ex = {GA_BACKEND_CPU, 1, levels[l], NULL};
            size_t out_len = 0;
            assert_int_equal(ga_codec_encode(&ex, codec, &p, grad, has_res ? res : NULL, n, out.b, sizeof out.b,
                                             &out_len),
                             GA_OK);
            assert_int_equal(out_len, want_len);
        }
        assert_memory_equal(out.b, want_bytes, want_len);
        if (has_res && want_res) assert_memory_equal(res, want_res, n * sizeof(float));
    }
}

/* Decodes a hand-written payload into sum_in with the library at every SIMD level and with
 * the oracle. sum has `total` elements; those past n must stay as they were. */
static void expect_decode(ga_codec_id codec, float t, const uint8_t *bytes, size_t len, size_t n,
                          const float *sum_in, size_t total, const float *want_sum)
{
    ga_codec_params p = ga_codec_params_default(codec);
    p.threshold = t;
    payload_buf in;
    float sum[1100];
    assert_true(len <= sizeof in.b && total <= COUNT(sum));
    memcpy(in.b, bytes, len);
    ga_simd levels[3];
    int n_levels = simd_levels(levels);
    for (int l = 0; l <= n_levels; l++) {
        memcpy(sum, sum_in, total * sizeof(float));
        if (l == n_levels) {
            assert_int_equal(oracle_decode_add(codec, t, in.b, len, n, sum), GA_OK);
        } else {
            ga_exec ex = {GA_BACKEND_CPU, 1, levels[l], NULL};
            assert_int_equal(ga_codec_decode_add(&ex, codec, &p, in.b, len, n, sum), GA_OK);
        }
        assert_memory_equal(sum, want_sum, total * sizeof(float));
    }
}

static const float zeros[1100];

/* ---- 2bit (MXNet), t = 0.5. Element i: word i/16, byte (i%16)/4 in memory order, slot i%4
 * with slot 0 = bits 7:6. Codes 11 = +t, 10 = -t, 00 = 0. Comparisons are inclusive. ---- */

static const float below_half = 0x1.fffffep-2f; /* 0.49999997, the float just below 0.5 */

static void test_2bit_encode(void **state)
{
    (void)state;
    const float g[17] = {
        0.75f, -0.625f, 0.25f, 0.5f,       /* 11 (r .25), 10 (r -.125), 00, 11 (v == t)     */
        -0.5f, 0.0f, 1.0f, -below_half,    /* 10 (v == -t), 00, 11 (r .5: one t a step), 00 */
        below_half, -2.0f, 3.0f, -0.0f,    /* 00, 10 (r -1.5), 11 (r 2.5), 00 (r = 0 + -0 = +0) */
        0.125f, 0.5f, -0.75f, 100.0f,      /* 00, 11, 10 (r -.25), 11 (r 99.5) */
        -1.0f,                             /* 10 (r -.5), alone in word 1 */
    };
    const uint8_t want1[8] = {
        0xE3, /* elements 0-3: 11 10 00 11 */
        0x8C, /* elements 4-7: 10 00 11 00 */
        0x2C, /* elements 8-11: 00 10 11 00 */
        0x3B, /* elements 12-15: 00 11 10 11 */
        0x80, /* element 16 in slot 0: 10, then nothing */
        0x00, 0x00, 0x00,
    };
    const float res1[17] = {0.25f, -0.125f, 0.25f, 0.0f, 0.0f, 0.0f, 0.5f, -below_half, below_half,
                            -1.5f, 2.5f,    0.0f,  0.125f, 0.0f, -0.25f, 99.5f, -0.5f};
    expect_encode(GA_CODEC_2BIT, 0.5f, g, zeros, 17, want1, 8, res1);

    /* Step 2, zero gradient: the residual alone is encoded. */
    const uint8_t want2[8] = {
        0x00, /* 0.25, -0.125, 0.25, 0: all inside (-t, t) */
        0x0C, /* 0, 0, 0.5 -> 11 (r 0), -0.49999997 -> 00 */
        0x2C, /* 0.49999997 -> 00, -1.5 -> 10 (r -1), 2.5 -> 11 (r 2), 0 -> 00 */
        0x03, /* 0.125, 0, -0.25 -> 00; 99.5 -> 11 (r 99) */
        0x80, /* -0.5 -> 10 (r +0) */
        0x00, 0x00, 0x00,
    };
    const float res2[17] = {0.25f, -0.125f, 0.25f, 0.0f, 0.0f, 0.0f, 0.0f, -below_half, below_half,
                            -1.0f, 2.0f,    0.0f,  0.125f, 0.0f, -0.25f, 99.0f, 0.0f};
    expect_encode(GA_CODEC_2BIT, 0.5f, zeros, res1, 17, want2, 8, res2);

    /* Decoding step 1's payload gives +-t per code. */
    const float dec1[17] = {0.5f, -0.5f, 0.0f, 0.5f, -0.5f, 0.0f, 0.5f, 0.0f, 0.0f,
                            -0.5f, 0.5f, 0.0f, 0.0f, 0.5f, -0.5f, 0.5f, -0.5f};
    expect_decode(GA_CODEC_2BIT, 0.5f, want1, 8, 17, zeros, 17, dec1);
}

static void test_2bit_decode_word(void **state)
{
    (void)state;
    /* t = 0.25; the word 0xFF00E41B (little-endian bytes 1B E4 00 FF):
     * 0x1B = 00 01 10 11: 0, 0 (01 is never written; it decodes to 0), -t, +t
     * 0xE4 = 11 10 01 00: +t, -t, 0, 0
     * 0x00: four zeros; 0xFF = 11 11 11 11: four +t. */
    const uint8_t word[4] = {0x1B, 0xE4, 0x00, 0xFF};
    float ones[16];
    for (int i = 0; i < 16; i++) ones[i] = 1.0f;
    const float want16[16] = {1.0f,  1.0f, 0.75f, 1.25f, 1.25f, 0.75f, 1.0f,  1.0f,
                              1.0f,  1.0f, 1.0f,  1.0f,  1.25f, 1.25f, 1.25f, 1.25f};
    expect_decode(GA_CODEC_2BIT, 0.25f, word, 4, 16, ones, 16, want16);
    /* n = 5: the same word, only elements 0-4 are added; the rest of the buffer is not touched. */
    const float want5[16] = {1.0f, 1.0f, 0.75f, 1.25f, 1.25f, 1.0f, 1.0f, 1.0f,
                             1.0f, 1.0f, 1.0f,  1.0f,  1.0f,  1.0f, 1.0f, 1.0f};
    expect_decode(GA_CODEC_2BIT, 0.25f, word, 4, 5, ones, 16, want5);
}

/* ---- 1bit (MXNet master). Element i: word i/32, byte (i%32)/8, mask 0x80 >> (i%8). Bit 1
 * when r + g > t (strict), then r -= 1; else r += 1. Decode: bit 1 = +1, bit 0 = -1. ---- */

static void test_1bit_encode(void **state)
{
    (void)state;
    const float g[40] = {
        1.0f, -1.0f, 0.0f, -0.0f, 0x1p-149f, -2.5f, 0.5f, 3.0f, /* 1 0 0 0 1 0 1 1 (0 and +0 are not > 0) */
        -0.5f, 0.25f, 0.25f, -0.25f, 7.0f, -7.0f, 0.0f, 1.5f,   /* 0 1 1 0 1 0 0 1 */
        0.125f, 0.125f, 0.125f, 0.125f, 0.125f, 0.125f, 0.125f, 0.125f, /* all 1 */
        -1.0f, -1.0f, -1.0f, -1.0f, -1.0f, -1.0f, -1.0f, 2.0f,  /* 0 0 0 0 0 0 0 1 */
        2.0f, -2.0f, 2.0f, -2.0f, 2.0f, -2.0f, 2.0f, -2.0f,      /* 1 0 1 0 1 0 1 0, in word 1 */
    };
    const uint8_t want[8] = {
        0x8B, /* 1000 1011 */
        0x69, /* 0110 1001 */
        0xFF, /* 1111 1111 */
        0x01, /* 0000 0001 */
        0xAA, /* 1010 1010: elements 32-39, byte 0 of word 1 */
        0x00, 0x00, 0x00, /* elements 40-63 do not exist: zero bits */
    };
    const float res[40] = {
        0.0f, 0.0f, 1.0f, 1.0f, -1.0f, -1.5f, -0.5f, 2.0f, /* 2^-149 - 1 rounds to -1 */
        0.5f, -0.75f, -0.75f, 0.75f, 6.0f, -6.0f, 1.0f, 0.5f,
        -0.875f, -0.875f, -0.875f, -0.875f, -0.875f, -0.875f, -0.875f, -0.875f,
        0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f,
        1.0f, -1.0f, 1.0f, -1.0f, 1.0f, -1.0f, 1.0f, -1.0f,
    };
    expect_encode(GA_CODEC_1BIT, 0.0f, g, zeros, 40, want, 8, res);

    /* t = 0.5: v == t is not above it. */
    const float g2[8] = {0.5f, 0x1.000002p-1f /* 0.5 + 2^-24 */, -3.0f, 0.75f, 0.375f, 100.0f, -0.0f, 0.5f};
    const uint8_t want2[4] = {0x54 /* 0 1 0 1 0 1 0 0 */, 0x00, 0x00, 0x00};
    const float res2[8] = {1.5f, -0x1.fffffcp-2f /* -0.5 + 2^-24 */, -2.0f, -0.25f, 1.375f, 99.0f, 1.0f, 1.5f};
    expect_encode(GA_CODEC_1BIT, 0.5f, g2, zeros, 8, want2, 4, res2);
}

static void test_1bit_decode_word(void **state)
{
    (void)state;
    /* 0xA5 = 1010 0101, 0x0F = 0000 1111, 0x80 = 1000 0000, 0x01 = 0000 0001; the threshold is
     * ignored by the decoder. */
    const uint8_t word[4] = {0xA5, 0x0F, 0x80, 0x01};
    const float want[32] = {
        1, -1, 1, -1, -1, 1, -1, 1, -1, -1, -1, -1, 1, 1, 1, 1,
        1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 1,
    };
    expect_decode(GA_CODEC_1BIT, 0.0f, word, 4, 32, zeros, 32, want);
    expect_decode(GA_CODEC_1BIT, 123.0f, word, 4, 32, zeros, 32, want);
}

/* ---- 1bit_scaled: one fp32 scale per 1024 elements (mean |v|, lane-ordered sum), then the
 * sign bits in the 1bit layout; bit 1 = v >= 0 = +scale. ---- */

static void test_1bit_scaled_encode(void **state)
{
    (void)state;
    /* |v| = 1, 2, 3, 4, .5, .5, 0, 0 in lanes 0-7; folding halves: lanes 0-3 take 4-7
     * (1.5, 2.5, 3, 4), lanes 0-1 take 2-3 (4.5, 6.5), lane 0 takes 1: 11. 11 / 8 = 1.375 =
     * 0x3FB00000. Signs (v >= 0, -0 + 0 = +0 included): 1 0 1 0 1 0 1 1 = 0xAB. */
    const float g[8] = {1.0f, -2.0f, 3.0f, -4.0f, 0.5f, -0.5f, 0.0f, -0.0f};
    const uint8_t want[8] = {0x00, 0x00, 0xB0, 0x3F, 0xAB, 0x00, 0x00, 0x00};
    const float res[8] = {-0.375f, -0.625f, 1.625f, -2.625f, -0.875f, 0.875f, -1.375f, -1.375f};
    expect_encode(GA_CODEC_1BIT_SCALED, 0.0f, g, zeros, 8, want, 8, res);

    /* The summation order is part of the format. 2^24 then 63 ones: lane 0 = 2^24 + 1 = 2^24
     * (tie, to even); lanes 1-31 = 2 each. Folds: 2^24 + 2, + 4, + 8, + 16, + 32 = 2^24 + 62
     * (all exact). Scale = (2^24 + 62) / 64 = 262144.96875 = 2^18 + 31 * 2^-5 = 0x4880001F
     * (a left-to-right sum would give 2^24 -> 0x48800000, the exact sum 2^24 + 64 after
     * rounding -> 0x48800020). All signs positive: two words of ones. */
    float g2[64];
    g2[0] = 0x1p24f;
    for (int i = 1; i < 64; i++) g2[i] = 1.0f;
    const uint8_t want2[12] = {0x1F, 0x00, 0x80, 0x48, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
    float res2[64];
    res2[0] = 16515071.0f; /* 2^24 - 262144.96875 = 16515071.03125, rounded to the unit ulp */
    for (int i = 1; i < 64; i++) res2[i] = -262143.96875f; /* exact: ulp 2^-6 there */
    expect_encode(GA_CODEC_1BIT_SCALED, 0.0f, g2, zeros, 64, want2, 12, res2);

    /* Two blocks: 1024 x 0.5 (scale 512 / 1024 = 0.5 = 0x3F000000, all bits 1) and one -3
     * (scale 3 / 1 = 3 = 0x40400000, bit 0). Scales come first, then 33 words. */
    static float g3[1025], res3[1025];
    for (int i = 0; i < 1024; i++) g3[i] = 0.5f;
    g3[1024] = -3.0f;
    uint8_t want3[140];
    const uint8_t scales3[8] = {0x00, 0x00, 0x00, 0x3F, 0x00, 0x00, 0x40, 0x40};
    memcpy(want3, scales3, 8);
    memset(want3 + 8, 0xFF, 128);  /* words 0-31 */
    memset(want3 + 136, 0x00, 4); /* word 32: element 1024 negative */
    memset(res3, 0, sizeof res3); /* 0.5 - 0.5 and -3 + 3 */
    expect_encode(GA_CODEC_1BIT_SCALED, 0.0f, g3, zeros, 1025, want3, 140, res3);
}

static void test_1bit_scaled_decode(void **state)
{
    (void)state;
    /* Scale 0.25 = 0x3E800000, then the word 0x00000081: bits of elements 0 and 7 set. */
    const uint8_t payload[8] = {0x00, 0x00, 0x80, 0x3E, 0x81, 0x00, 0x00, 0x00};
    float ones[12];
    for (int i = 0; i < 12; i++) ones[i] = 1.0f;
    const float want[12] = {1.25f, 0.75f, 0.75f, 0.75f, 0.75f, 0.75f, 0.75f, 1.25f, 0.75f, 0.75f, 1.0f, 1.0f};
    expect_decode(GA_CODEC_1BIT_SCALED, 0.0f, payload, 8, 10, ones, 12, want);
}

/* ---- fp16: IEEE binary16 (1 sign, 5 exponent bits biased by 15, 10 mantissa bits), round to
 * nearest, ties to even. ---- */

static void test_fp16(void **state)
{
    (void)state;
    const float in[16] = {
        1.0f,                 /* 0x3C00: exponent 15 */
        -2.0f,                /* 0xC000: sign, exponent 16 */
        65504.0f,             /* 0x7BFF: the largest half, 2^15 * (2 - 2^-10) */
        65519.99609375f,      /* 0x7BFF: below the 65520 tie (halfway to 65536) */
        1.0f + 0x1p-11f,      /* 0x3C00: tie between 0x3C00 and 0x3C01, to even */
        1.0f + 0x3p-11f,      /* 0x3C02: tie between 0x3C01 and 0x3C02, to even */
        0x1p-24f,             /* 0x0001: the smallest subnormal */
        0x1p-25f,             /* 0x0000: tie between 0 and 2^-24, to even */
        0x1.8p-25f,           /* 0x0001: above that tie */
        0x3p-25f,             /* 0x0002: tie between 0x0001 and 0x0002, to even */
        -0.0f,                /* 0x8000 */
        0x1p-14f,             /* 0x0400: the smallest normal */
        0x1p-14f - 0x1p-25f,  /* 0x0400: tie between 0x03FF and 0x0400, to even */
        0.1f,                 /* 0x2E66: 1.6 * 2^-4: exponent 11, mantissa .6 * 1024 = 614.4 -> 614 */
        -65504.0f,            /* 0xFBFF */
        -0x1p-149f,           /* 0x8000: a float subnormal underflows to -0 */
    };
    const uint8_t want[32] = {0x00, 0x3C, 0x00, 0xC0, 0xFF, 0x7B, 0xFF, 0x7B, 0x00, 0x3C, 0x02,
                              0x3C, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x02, 0x00, 0x00, 0x80,
                              0x00, 0x04, 0x00, 0x04, 0x66, 0x2E, 0xFF, 0xFB, 0x00, 0x80};
    expect_encode(GA_CODEC_FP16, 0.0f, in, NULL, 16, want, 32, NULL);
    /* 13 values: the vector paths handle a partial tail. */
    expect_encode(GA_CODEC_FP16, 0.0f, in, NULL, 13, want, 26, NULL);
    /* Five copies (80 values): whole vectors at every width. */
    float in5[80];
    uint8_t want5[160];
    for (int k = 0; k < 5; k++) memcpy(in5 + 16 * k, in, sizeof in), memcpy(want5 + 32 * k, want, sizeof want);
    expect_encode(GA_CODEC_FP16, 0.0f, in5, NULL, 80, want5, 160, NULL);

    /* Decoding: 0x3555 = 2^-2 * (1 + 341/1024) = 1365/4096; 0xC500 = -(2^2 * 1.25) = -5;
     * 0x03FF = 1023 * 2^-24; 0x0001 = 2^-24; 0x3C01 = 1 + 2^-10; 0x7BFF = 65504; 0x8000 = -0
     * (into a sum of -0 it stays -0). */
    const uint8_t halves[14] = {0x55, 0x35, 0x00, 0xC5, 0xFF, 0x03, 0x01, 0x00, 0x01, 0x3C, 0xFF, 0x7B, 0x00, 0x80};
    const float start[7] = {-0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f};
    const float dec[7] = {0.333251953125f, -5.0f, 0x3FFp-24f, 0x1p-24f, 1.0009765625f, 65504.0f, -0.0f};
    expect_decode(GA_CODEC_FP16, 0.0f, halves, 14, 7, start, 7, dec);
}

/* ---- bf16: the top 16 bits of the fp32 value, round to nearest even on the low 16 bits;
 * subnormals kept. ---- */

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_bf16(void **state)
{
    (void)state;
    const uint32_t in_bits[16] = {
        0x3F800000u, /* 1.0 -> 0x3F80 */
        0x3F808000u, /* 1 + 2^-8: tie, 0x3F80 is even -> 0x3F80 */
        0x3F818000u, /* tie between 0x3F81 and 0x3F82 -> 0x3F82 */
        0x3F808001u, /* above the tie -> 0x3F81 */
        0x80000000u, /* -0 -> 0x8000 */
        0x00008000u, /* subnormal tie between 0x0000 and 0x0001 -> 0x0000 */
        0x00018000u, /* subnormal tie between 0x0001 and 0x0002 -> 0x0002 */
        0x7F7F7FFFu, /* just below the tie under 2^128 -> 0x7F7F, the largest finite */
        0x40400000u, /* 3.0 -> 0x4040 */
        0x3DCCCCCDu, /* 0.1f: low half 0xCCCD > 0x8000 -> 0x3DCD */
        0xBFC00000u, /* -1.5 -> 0xBFC0 */
        0xC0007FFFu, /* below the tie -> 0xC000 (-2) */
        0x477FE000u, /* 65504: low half 0xE000 rounds up, carrying into the exponent -> 0x4780 */
        0x00000001u, /* 2^-149 -> 0x0000 */
        0x807F8000u, /* negative subnormal tie, 0x807F odd -> 0x8080 (-2^-126) */
        0x3F7FFFFFu, /* just below 1 -> 0x3F80 */
    };
    float in[16];
    for (int i = 0; i < 16; i++) in[i] = from_bits(in_bits[i]);
    const uint8_t want[32] = {0x80, 0x3F, 0x80, 0x3F, 0x82, 0x3F, 0x81, 0x3F, 0x00, 0x80, 0x00,
                              0x00, 0x02, 0x00, 0x7F, 0x7F, 0x40, 0x40, 0xCD, 0x3D, 0xC0, 0xBF,
                              0x00, 0xC0, 0x80, 0x47, 0x00, 0x00, 0x80, 0x80, 0x80, 0x3F};
    expect_encode(GA_CODEC_BF16, 0.0f, in, NULL, 16, want, 32, NULL);
    float in5[80];
    uint8_t want5[160];
    for (int k = 0; k < 5; k++) memcpy(in5 + 16 * k, in, sizeof in), memcpy(want5 + 32 * k, want, sizeof want);
    expect_encode(GA_CODEC_BF16, 0.0f, in5, NULL, 80, want5, 160, NULL);

    /* Decoding: 0xC2F7 = -(1 + 119/128) * 2^6 = -123.5; 0x0001 = 2^-133 (a float subnormal). */
    const uint8_t halves[6] = {0x80, 0x3F, 0xF7, 0xC2, 0x01, 0x00};
    const float start[3] = {1.0f, 0.5f, 0.0f};
    const float dec[3] = {2.0f, -123.0f, 0x1p-133f};
    expect_decode(GA_CODEC_BF16, 0.0f, halves, 6, 3, start, 3, dec);
}

/* ---- none: fp32 little-endian ---- */

static void test_none(void **state)
{
    (void)state;
    const float in[3] = {1.0f, -2.5f, -0.0f};
    const uint8_t want[12] = {0x00, 0x00, 0x80, 0x3F,  /* 0x3F800000 */
                              0x00, 0x00, 0x20, 0xC0,  /* 0xC0200000: -(1.25 * 2) */
                              0x00, 0x00, 0x00, 0x80}; /* -0 */
    expect_encode(GA_CODEC_NONE, 0.0f, in, NULL, 3, want, 12, NULL);
    const float start[3] = {0.5f, 0.5f, -0.0f};
    const float dec[3] = {1.5f, -2.0f, -0.0f};
    expect_decode(GA_CODEC_NONE, 0.0f, want, 12, 3, start, 3, dec);
}

/* ---- the worked examples of docs/wire-format.md ---- */

static void test_wire_format_examples(void **state)
{
    (void)state;
    const float dense[4] = {1.0f, -2.5f, 65504.0f, 1e-7f};
    /* 1e-7 = 0x33D6BF95; as fp16 1e-7 / 2^-24 = 1.68 rounds to the subnormal 0x0002. */
    const uint8_t none[16] = {0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x20, 0xC0,
                              0x00, 0xE0, 0x7F, 0x47, 0x95, 0xBF, 0xD6, 0x33};
    const uint8_t fp16[8] = {0x00, 0x3C, 0x00, 0xC1, 0xFF, 0x7B, 0x02, 0x00};
    expect_encode(GA_CODEC_NONE, 0.0f, dense, NULL, 4, none, 16, NULL);
    expect_encode(GA_CODEC_FP16, 0.0f, dense, NULL, 4, fp16, 8, NULL);
    /* pi = 0x40490FDB: low half 0x0FDB < 0x8000 rounds down. */
    const float bf[3] = {1.0f, -2.5f, 3.14159274f};
    const uint8_t bf16[6] = {0x80, 0x3F, 0x20, 0xC0, 0x49, 0x40};
    expect_encode(GA_CODEC_BF16, 0.0f, bf, NULL, 3, bf16, 6, NULL);

    /* 2bit, t = 0.5: codes 11 10 00 11 | 10 -> E3 80 00 00; residual as float arithmetic. */
    const float g2[5] = {0.7f, -0.6f, 0.2f, 0.5f, -1.3f};
    const uint8_t q2[4] = {0xE3, 0x80, 0x00, 0x00};
    const float r2[5] = {0.7f - 0.5f, -0.6f + 0.5f, 0.2f, 0.0f, -1.3f + 0.5f};
    expect_encode(GA_CODEC_2BIT, 0.5f, g2, zeros, 5, q2, 4, r2);

    /* 1bit, t = 0: bits 1001 0101 | 10 -> 95 80 00 00. 1bit_scaled: scale 6.15 / 10 summed in
     * lane order = 0x3F1D70A4, bits (v >= 0) 1011 0101 | 10. */
    const float g1[10] = {0.3f, -0.2f, 0.0f, 1.5f, -0.1f, 0.4f, -2.0f, 0.05f, 0.9f, -0.7f};
    const uint8_t q1[4] = {0x95, 0x80, 0x00, 0x00};
    expect_encode(GA_CODEC_1BIT, 0.0f, g1, zeros, 10, q1, 4, NULL);
    const uint8_t qs[8] = {0xA4, 0x70, 0x1D, 0x3F, 0xB5, 0x80, 0x00, 0x00};
    expect_encode(GA_CODEC_1BIT_SCALED, 0.0f, g1, zeros, 10, qs, 8, NULL);
}

int main(void)
{
    test_memory_baseline();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_2bit_encode),      cmocka_unit_test(test_2bit_decode_word),
        cmocka_unit_test(test_1bit_encode),      cmocka_unit_test(test_1bit_decode_word),
        cmocka_unit_test(test_1bit_scaled_encode), cmocka_unit_test(test_1bit_scaled_decode),
        cmocka_unit_test(test_fp16),             cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_none),             cmocka_unit_test(test_wire_format_examples),
        cmocka_unit_test(test_host_memory_returned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
