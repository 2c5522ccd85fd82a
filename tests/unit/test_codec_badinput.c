/* Bad input to the CPU codecs none, fp16, bf16, 2bit, 1bit, 1bit_scaled, int8, int4: each case
 * returns its own status, and the residual, the sum and *out_len stay byte-identical to a copy
 * taken before the call. ga_codec_check_payload returns what decode_add returns for every payload here,
 * top-k's included. */
#include <float.h>
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

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const ga_codec_id codecs[] = {GA_CODEC_NONE, GA_CODEC_FP16,         GA_CODEC_BF16,
                                     GA_CODEC_2BIT, GA_CODEC_1BIT,         GA_CODEC_1BIT_SCALED,
                                     GA_CODEC_INT8, GA_CODEC_INT4};

static const size_t OUT_LEN_SENTINEL = 0xDEADBEEF;

static float f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void *xalloc(size_t bytes)
{
    void *p = ga_malloc(bytes);
    assert_non_null(p);
    return p;
}

/* Distinct finite values, with a -0 and a subnormal, so an untouched buffer is recognisable. */
static float *pattern(size_t n, uint32_t salt)
{
    float *x = xalloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (float)((i * 2654435761u + salt) % 1000u) * 0.001f - 0.5f;
    if (n > 2) x[1] = -0.0f, x[2] = 0x1p-140f;
    return x;
}

static int simd_levels(ga_simd out[3])
{
    int count = 0;
    for (int s = GA_SIMD_SCALAR; s <= GA_SIMD_AVX512; s++)
        if (s <= (int)ga_cpu_simd()) out[count++] = (ga_simd)s;
    return count;
}

enum res_mode { RES_AS_CODEC, RES_NULL, RES_GIVEN };

/* Calls ga_codec_encode with a fresh residual (per res_mode) and checks it returns `want`
 * and leaves the residual and *out_len alone. */
static void expect_encode_status(const ga_exec *ex, ga_codec_id codec, const ga_codec_params *p, const float *grad,
                                 size_t n, enum res_mode mode, void *out, size_t cap, ga_status want)
{
    bool give = mode == RES_GIVEN || (mode == RES_AS_CODEC && ga_codec_has_residual(codec));
    float *res = pattern(n, 7), *copy = pattern(n, 7);
    size_t out_len = OUT_LEN_SENTINEL;
    ga_status rc = ga_codec_encode(ex, codec, p, grad, give ? res : NULL, n, out, cap, &out_len);
    if (rc != want)
        fail_msg("%s encode: got %s, expected %s", ga_codec_name(codec) ? ga_codec_name(codec) : "?",
                 ga_status_name(rc), ga_status_name(want));
    if (want != GA_OK) {
        assert_memory_equal(res, copy, n * sizeof(float));
        assert_int_equal(out_len, OUT_LEN_SENTINEL);
    }
    ga_free(res), ga_free(copy);
}

/* Calls ga_codec_decode_add on a patterned sum and checks it returns `want` and, on error,
 * leaves the sum alone. */
static void expect_decode_status(const ga_exec *ex, ga_codec_id codec, const ga_codec_params *p, const void *payload,
                                 size_t len, size_t n, ga_status want)
{
    float *sum = pattern(n, 3), *copy = pattern(n, 3);
    ga_status rc = ga_codec_decode_add(ex, codec, p, payload, len, n, sum);
    if (rc != want)
        fail_msg("%s decode_add (len %zu, n %zu): got %s, expected %s",
                 ga_codec_name(codec) ? ga_codec_name(codec) : "?", len, n, ga_status_name(rc), ga_status_name(want));
    /* The receiver's check without a sum says exactly what the CPU decoder says. */
    if (ex && ex->backend == GA_BACKEND_CPU) {
        ga_status check = ga_codec_check_payload(codec, p, payload, len, n);
        if (check != want)
            fail_msg("%s check_payload (len %zu, n %zu): got %s, decode_add said %s",
                     ga_codec_name(codec) ? ga_codec_name(codec) : "?", len, n, ga_status_name(check),
                     ga_status_name(want));
    }
    if (want != GA_OK) assert_memory_equal(sum, copy, n * sizeof(float));
    ga_free(sum), ga_free(copy);
}

/* A valid payload of n elements (every value finite, every scale 0.5). */
static uint8_t *valid_payload(ga_codec_id codec, size_t n, size_t extra)
{
    ga_codec_params p = ga_codec_params_default(codec);
    size_t bytes = 0;
    assert_int_equal(ga_codec_encoded_size(codec, &p, n, &bytes), GA_OK);
    uint8_t *b = xalloc(bytes + extra + 8);
    memset(b, 0x11, bytes + extra + 8); /* 0x1111: finite as fp16 and bf16; a tiny float */
    if (codec == GA_CODEC_1BIT_SCALED)
        for (size_t k = 0; k < (n + 1023) / 1024; k++) memcpy(b + 4 * k, &(float){0.5f}, 4);
    if (codec == GA_CODEC_INT8 || codec == GA_CODEC_INT4)
        for (size_t k = 0; k < (n + GA_INT_BLOCK - 1) / GA_INT_BLOCK; k++)
            memcpy(b + (codec == GA_CODEC_INT8 ? 68 : 36) * k, &(float){0.5f}, 4);
    return b;
}

/* ---- GA_E_LENGTH ---- */

static void test_length(void **state)
{
    (void)state;
    ga_exec ex = GA_EXEC_CPU_INIT;
    static const size_t ns[] = {1, 17, 33, 1025, 70001};
    for (size_t c = 0; c < COUNT(codecs); c++) {
        ga_codec_params p = ga_codec_params_default(codecs[c]);
        for (size_t k = 0; k < COUNT(ns); k++) {
            size_t need = 0;
            assert_int_equal(ga_codec_encoded_size(codecs[c], &p, ns[k], &need), GA_OK);
            uint8_t *payload = valid_payload(codecs[c], ns[k], need + 8);
            expect_decode_status(&ex, codecs[c], &p, payload, need, ns[k], GA_OK); /* the control */
            const size_t bad[] = {0, need - 1, need - 2, need - 4, need + 1, need + 2, need + 4, 2 * need};
            for (size_t b = 0; b < COUNT(bad); b++)
                expect_decode_status(&ex, codecs[c], &p, payload, bad[b], ns[k], GA_E_LENGTH);
            ga_free(payload);
        }
        /* n = 0 takes an empty payload only. */
        uint32_t four[2] = {0, 0};
        expect_decode_status(&ex, codecs[c], &p, four, 0, 0, GA_OK);
        expect_decode_status(&ex, codecs[c], &p, four, 4, 0, GA_E_LENGTH);
    }
}

/* ---- GA_E_THRESHOLD ---- */

static void expect_threshold(ga_codec_id codec, float t, ga_status want)
{
    ga_exec ex = GA_EXEC_CPU_INIT;
    ga_codec_params p = ga_codec_params_default(codec);
    const size_t n = 40;
    size_t len = 0, bytes = 5;
    assert_int_equal(ga_codec_encoded_size(codec, &p, n, &len), GA_OK);
    p.threshold = t;
    float *grad = pattern(n, 1);
    uint8_t *payload = valid_payload(codec, n, 0), *out = xalloc(len);
    assert_int_equal(ga_codec_params_validate(codec, &p), want);
    assert_int_equal(ga_codec_encoded_size(codec, &p, n, &bytes), want);
    if (want != GA_OK) assert_int_equal(bytes, 5);
    expect_encode_status(&ex, codec, &p, grad, n, RES_AS_CODEC, out, len, want);
    expect_decode_status(&ex, codec, &p, payload, len, n, want);
    ga_free(grad), ga_free(payload), ga_free(out);
}

static void test_threshold(void **state)
{
    (void)state;
    /* 2bit: finite and > 0. */
    const float bad_2bit[] = {0.0f, -0.0f, -0.5f, -0x1p-149f, NAN, -NAN, INFINITY, -INFINITY};
    for (size_t k = 0; k < COUNT(bad_2bit); k++) expect_threshold(GA_CODEC_2BIT, bad_2bit[k], GA_E_THRESHOLD);
    expect_threshold(GA_CODEC_2BIT, 0x1p-149f, GA_OK);
    expect_threshold(GA_CODEC_2BIT, FLT_MAX, GA_OK);
    /* 1bit: finite (any sign). */
    const float bad_1bit[] = {NAN, -NAN, INFINITY, -INFINITY};
    for (size_t k = 0; k < COUNT(bad_1bit); k++) expect_threshold(GA_CODEC_1BIT, bad_1bit[k], GA_E_THRESHOLD);
    expect_threshold(GA_CODEC_1BIT, -3.0f, GA_OK);
    expect_threshold(GA_CODEC_1BIT, 0.0f, GA_OK);
    /* Codecs that do not read the threshold ignore it. */
    expect_threshold(GA_CODEC_1BIT_SCALED, NAN, GA_OK);
    expect_threshold(GA_CODEC_NONE, -INFINITY, GA_OK);
}

/* ---- GA_E_NONFINITE in dense payloads: checked before any element is added ---- */

static void test_nonfinite_payload(void **state)
{
    (void)state;
    const size_t n = 70001; /* three tiles: the bad value may sit in a tile another thread adds */
    const size_t where[] = {0, 32768, n - 1};
    static const uint32_t bad_f32[] = {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFFFFFFFu, 0x7F800001u};
    static const uint16_t bad_f16[] = {0x7C00u, 0xFC00u, 0x7E00u, 0x7C01u, 0xFFFFu};
    static const uint16_t bad_bf16[] = {0x7F80u, 0xFF80u, 0x7FC0u, 0x7F81u, 0xFFFFu};
    ga_simd levels[3];
    int n_levels = simd_levels(levels);
    for (size_t c = 0; c < 3; c++) {
        ga_codec_id codec = codecs[c];
        ga_codec_params p = ga_codec_params_default(codec);
        size_t width = codec == GA_CODEC_NONE ? 4 : 2;
        uint8_t *payload = valid_payload(codec, n, 0);
        for (size_t w = 0; w < COUNT(where); w++) {
            for (size_t b = 0; b < 5; b++) {
                uint8_t saved[4];
                memcpy(saved, payload + width * where[w], width);
                if (codec == GA_CODEC_NONE) memcpy(payload + 4 * where[w], &bad_f32[b], 4);
                else memcpy(payload + 2 * where[w], codec == GA_CODEC_FP16 ? &bad_f16[b] : &bad_bf16[b], 2);
                for (int threads = 1; threads <= 2; threads++)
                    for (int l = 0; l < n_levels; l++) {
                        ga_exec ex = {GA_BACKEND_CPU, threads, levels[l], NULL};
                        expect_decode_status(&ex, codec, &p, payload, width * n, n, GA_E_NONFINITE);
                    }
                memcpy(payload + width * where[w], saved, width);
            }
        }
        ga_exec ex = GA_EXEC_CPU_INIT;
        expect_decode_status(&ex, codec, &p, payload, width * n, n, GA_OK); /* restored: the control */
        ga_free(payload);
    }
}

/* ---- 1bit_scaled: a NaN, Inf or negative scale is GA_E_NONFINITE ---- */

static void test_bad_scale(void **state)
{
    (void)state;
    ga_exec ex = GA_EXEC_CPU_INIT;
    const ga_codec_id codec = GA_CODEC_1BIT_SCALED;
    ga_codec_params p = ga_codec_params_default(codec);
    const size_t n = 3000; /* three blocks, the last partial */
    size_t len = 0;
    assert_int_equal(ga_codec_encoded_size(codec, &p, n, &len), GA_OK);
    const float bad[] = {NAN, -NAN, INFINITY, -INFINITY, -1.0f, -0x1p-149f, -FLT_MAX, f32(0x7F800001u)};
    for (size_t block = 0; block < 3; block += 2) {
        for (size_t k = 0; k < COUNT(bad); k++) {
            uint8_t *payload = valid_payload(codec, n, 0);
            memcpy(payload + 4 * block, &bad[k], 4);
            expect_decode_status(&ex, codec, &p, payload, len, n, GA_E_NONFINITE);
            ga_free(payload);
        }
    }
    /* Chosen semantics: -0 compares equal to 0, so it is not "negative"; it is accepted. */
    uint8_t *payload = valid_payload(codec, n, 0);
    memcpy(payload + 4, &(float){-0.0f}, 4);
    expect_decode_status(&ex, codec, &p, payload, len, n, GA_OK);
    ga_free(payload);
}

/* ---- int8 / int4: a scale outside [0, 2^120] (int8) or [0, 2^124] (int4) is GA_E_NONFINITE on
 *      decode; a block that would need one is GA_E_RANGE on encode, the residual untouched ---- */

static void test_int_scale(void **state)
{
    (void)state;
    const size_t n = 70001; /* three tiles, the last block partial */
    const size_t blocks = (n + GA_INT_BLOCK - 1) / GA_INT_BLOCK, at_block[] = {0, 600, blocks - 1};
    for (uint32_t bits = 4; bits <= 8; bits += 4) {
        ga_codec_id codec = bits == 8 ? GA_CODEC_INT8 : GA_CODEC_INT4;
        size_t block_bytes = bits == 8 ? 68 : 36;
        float levels = bits == 8 ? 127.0f : 7.0f, top = bits == 8 ? 0x1p120f : 0x1p124f;
        const float bad[] = {NAN, INFINITY, -1.0f, -0x1p-149f, nextafterf(top, INFINITY), 2.0f * top, FLT_MAX};
        const float good[] = {0.0f, -0.0f, 0x1p-149f, top};
        ga_codec_params p = ga_codec_params_default(codec);
        size_t len = 0;
        assert_int_equal(ga_codec_encoded_size(codec, &p, n, &len), GA_OK);
        for (int threads = 1; threads <= 2; threads++) {
            ga_exec ex = {GA_BACKEND_CPU, threads, GA_SIMD_AUTO, NULL};
            for (size_t a = 0; a < COUNT(at_block); a++) {
                for (size_t k = 0; k < COUNT(bad); k++) {
                    uint8_t *payload = valid_payload(codec, n, 0);
                    memcpy(payload + block_bytes * at_block[a], &bad[k], 4);
                    expect_decode_status(&ex, codec, &p, payload, len, n, GA_E_NONFINITE);
                    ga_free(payload);
                }
                for (size_t k = 0; k < COUNT(good); k++) {
                    uint8_t *payload = valid_payload(codec, n, 0);
                    memcpy(payload + block_bytes * at_block[a], &good[k], 4);
                    expect_decode_status(&ex, codec, &p, payload, len, n, GA_OK);
                    ga_free(payload);
                }
            }
            /* The largest block that fits, max |v| = L * top, encodes; one above it does not. */
            float *grad = pattern(n, 5);
            uint8_t *out = xalloc(len);
            const size_t at[] = {0, 40000, n - 1};
            for (size_t a = 0; a < COUNT(at); a++) {
                float keep = grad[at[a]];
                grad[at[a]] = -levels * top;
                expect_encode_status(&ex, codec, &p, grad, n, RES_GIVEN, out, len, GA_OK);
                grad[at[a]] = nextafterf(levels * top, INFINITY);
                expect_encode_status(&ex, codec, &p, grad, n, RES_GIVEN, out, len, GA_E_RANGE);
                grad[at[a]] = -FLT_MAX;
                expect_encode_status(&ex, codec, &p, grad, n, RES_GIVEN, out, len, GA_E_RANGE);
                grad[at[a]] = keep;
            }
            /* r + g overflowing to Inf from two finite values is a range error too, not a NaN. */
            float *res = pattern(n, 7), *copy = pattern(n, 7);
            res[n - 1] = FLT_MAX, copy[n - 1] = FLT_MAX;
            grad[n - 1] = FLT_MAX;
            size_t out_len = OUT_LEN_SENTINEL;
            assert_int_equal(ga_codec_encode(&ex, codec, &p, grad, res, n, out, len, &out_len), GA_E_RANGE);
            assert_memory_equal(res, copy, n * sizeof(float));
            assert_int_equal(out_len, OUT_LEN_SENTINEL);
            ga_free(grad), ga_free(out), ga_free(res), ga_free(copy);
        }
    }
}

/* ---- GA_E_NONFINITE in grad on encode, every codec; the residual is not touched ---- */

static void test_nonfinite_grad(void **state)
{
    (void)state;
    const size_t n = 70001;
    const size_t where[] = {0, 40000, n - 1};
    const float bad[] = {NAN, INFINITY, -INFINITY};
    ga_simd levels[3];
    int n_levels = simd_levels(levels);
    for (size_t c = 0; c < COUNT(codecs); c++) {
        ga_codec_params p = ga_codec_params_default(codecs[c]);
        size_t cap = 0;
        assert_int_equal(ga_codec_encoded_size(codecs[c], &p, n, &cap), GA_OK);
        uint8_t *out = xalloc(cap);
        float *grad = pattern(n, 11);
        for (size_t w = 0; w < COUNT(where); w++) {
            for (size_t b = 0; b < COUNT(bad); b++) {
                float saved = grad[where[w]];
                grad[where[w]] = bad[b];
                for (int threads = 1; threads <= 2; threads++)
                    for (int l = 0; l < n_levels; l++) {
                        ga_exec ex = {GA_BACKEND_CPU, threads, levels[l], NULL};
                        expect_encode_status(&ex, codecs[c], &p, grad, n, RES_AS_CODEC, out, cap, GA_E_NONFINITE);
                    }
                grad[where[w]] = saved;
            }
        }
        ga_exec ex = GA_EXEC_CPU_INIT;
        expect_encode_status(&ex, codecs[c], &p, grad, n, RES_AS_CODEC, out, cap, GA_OK);
        ga_free(out), ga_free(grad);
    }
}

/* ---- GA_E_RANGE: a finite value that overflows fp16 or bf16 ---- */

static void expect_range(ga_codec_id codec, float value, size_t at, ga_status want)
{
    const size_t n = 70001;
    float *grad = pattern(n, 5);
    grad[at] = value;
    uint8_t *out = xalloc(2 * n);
    ga_codec_params p = ga_codec_params_default(codec);
    ga_simd levels[3];
    int n_levels = simd_levels(levels);
    for (int threads = 1; threads <= 2; threads++)
        for (int l = 0; l < n_levels; l++) {
            ga_exec ex = {GA_BACKEND_CPU, threads, levels[l], NULL};
            expect_encode_status(&ex, codec, &p, grad, n, RES_NULL, out, 2 * n, want);
        }
    ga_free(grad), ga_free(out);
}

static void test_range(void **state)
{
    (void)state;
    /* fp16: 65520 is the tie between 65504 and 65536 (Inf), so it and anything above overflows. */
    const float over_f16[] = {65520.0f, -65520.0f, 1e6f, FLT_MAX, -FLT_MAX};
    const size_t at[] = {0, 17, 70000};
    for (size_t k = 0; k < COUNT(over_f16); k++)
        for (size_t a = 0; a < COUNT(at); a++) expect_range(GA_CODEC_FP16, over_f16[k], at[a], GA_E_RANGE);
    expect_range(GA_CODEC_FP16, 65519.99609375f, 17, GA_OK);
    expect_range(GA_CODEC_FP16, -65504.0f, 17, GA_OK);
    /* bf16: 0x7F7F8000 is the tie between the largest bf16 (odd mantissa) and 2^128. */
    const float over_bf16[] = {f32(0x7F7F8000u), f32(0xFF7F8000u), FLT_MAX, -FLT_MAX};
    for (size_t k = 0; k < COUNT(over_bf16); k++)
        for (size_t a = 0; a < COUNT(at); a++) expect_range(GA_CODEC_BF16, over_bf16[k], at[a], GA_E_RANGE);
    expect_range(GA_CODEC_BF16, f32(0x7F7F7FFFu), 17, GA_OK);
    expect_range(GA_CODEC_BF16, 1e38f, 17, GA_OK);

    /* Chosen semantics: NaN/Inf outranks an overflow elsewhere, in either order and tile. */
    const ga_codec_id dense[] = {GA_CODEC_FP16, GA_CODEC_BF16};
    for (size_t c = 0; c < 2; c++) {
        const size_t n = 70001;
        float *grad = pattern(n, 9);
        uint8_t *out = xalloc(2 * n);
        ga_codec_params p = ga_codec_params_default(dense[c]);
        for (int order = 0; order < 2; order++) {
            grad[order ? 69000 : 3] = FLT_MAX;
            grad[order ? 3 : 69000] = NAN;
            for (int threads = 1; threads <= 2; threads++) {
                ga_exec ex = {GA_BACKEND_CPU, threads, GA_SIMD_AUTO, NULL};
                expect_encode_status(&ex, dense[c], &p, grad, n, RES_NULL, out, 2 * n, GA_E_NONFINITE);
            }
        }
        ga_free(grad), ga_free(out);
    }
}

/* ---- GA_E_CAPACITY ---- */

static void test_capacity(void **state)
{
    (void)state;
    ga_exec ex = GA_EXEC_CPU_INIT;
    const size_t n = 1025;
    for (size_t c = 0; c < COUNT(codecs); c++) {
        ga_codec_params p = ga_codec_params_default(codecs[c]);
        size_t need = 0;
        assert_int_equal(ga_codec_encoded_size(codecs[c], &p, n, &need), GA_OK);
        uint8_t *out = xalloc(need + 64);
        float *grad = pattern(n, 2);
        const size_t small[] = {0, 1, need - 4, need - 1};
        for (size_t k = 0; k < COUNT(small); k++)
            expect_encode_status(&ex, codecs[c], &p, grad, n, RES_AS_CODEC, out, small[k], GA_E_CAPACITY);
        /* A larger buffer is fine; the payload length is still exact. */
        float *res = pattern(n, 4);
        size_t out_len = 0;
        assert_int_equal(ga_codec_encode(&ex, codecs[c], &p, grad, ga_codec_has_residual(codecs[c]) ? res : NULL, n,
                                         out, need + 64, &out_len),
                         GA_OK);
        assert_int_equal(out_len, need);
        ga_free(out), ga_free(grad), ga_free(res);
    }
}

/* ---- GA_E_CODEC ---- */

static void test_unknown_codec(void **state)
{
    (void)state;
    ga_exec ex = GA_EXEC_CPU_INIT;
    const ga_codec_id bad[] = {GA_CODEC_COUNT, (ga_codec_id)99, (ga_codec_id)-1};
    ga_codec_params p = ga_codec_params_default(GA_CODEC_2BIT);
    float *grad = pattern(64, 1);
    uint32_t payload[64] = {0};
    for (size_t k = 0; k < COUNT(bad); k++) {
        size_t bytes = 3;
        assert_int_equal(ga_codec_params_validate(bad[k], &p), GA_E_CODEC);
        assert_int_equal(ga_codec_encoded_size(bad[k], &p, 16, &bytes), GA_E_CODEC);
        assert_int_equal(bytes, 3);
        assert_null(ga_codec_name(bad[k]));
        assert_false(ga_codec_has_residual(bad[k]));
        assert_false(ga_codec_fixed_size(bad[k]));
        expect_encode_status(&ex, bad[k], &p, grad, 64, RES_GIVEN, payload, sizeof payload, GA_E_CODEC);
        expect_encode_status(&ex, bad[k], &p, grad, 64, RES_NULL, payload, sizeof payload, GA_E_CODEC);
        expect_decode_status(&ex, bad[k], &p, payload, 16, 64, GA_E_CODEC);
    }
    ga_free(grad);
}

/* ---- GA_E_INVAL: NULL buffers, misaligned payloads, residual against the codec ---- */

static void test_inval(void **state)
{
    (void)state;
    ga_exec ex = GA_EXEC_CPU_INIT;
    const size_t n = 100;
    for (size_t c = 0; c < COUNT(codecs); c++) {
        ga_codec_id codec = codecs[c];
        ga_codec_params p = ga_codec_params_default(codec);
        size_t need = 0;
        assert_int_equal(ga_codec_encoded_size(codec, &p, n, &need), GA_OK);
        uint8_t *out = xalloc(need + 8);
        uint8_t *payload = valid_payload(codec, n, 8);
        float *grad = pattern(n, 1);

        expect_encode_status(NULL, codec, &p, grad, n, RES_AS_CODEC, out, need, GA_E_INVAL);
        expect_encode_status(&ex, codec, NULL, grad, n, RES_AS_CODEC, out, need, GA_E_INVAL);
        expect_encode_status(&ex, codec, &p, NULL, n, RES_AS_CODEC, out, need, GA_E_INVAL);
        expect_encode_status(&ex, codec, &p, grad, n, RES_AS_CODEC, NULL, need, GA_E_INVAL);
        for (size_t mis = 1; mis < 4; mis++)
            expect_encode_status(&ex, codec, &p, grad, n, RES_AS_CODEC, out + mis, need, GA_E_INVAL);
        {
            float *res = pattern(n, 7), *copy = pattern(n, 7);
            ga_status rc = ga_codec_encode(&ex, codec, &p, grad, ga_codec_has_residual(codec) ? res : NULL, n, out,
                                           need, NULL);
            assert_int_equal(rc, GA_E_INVAL);
            assert_memory_equal(res, copy, n * sizeof(float));
            ga_free(res), ga_free(copy);
        }
        /* A residual for a codec without one, or none for a codec with one. */
        expect_encode_status(&ex, codec, &p, grad, n, ga_codec_has_residual(codec) ? RES_NULL : RES_GIVEN, out, need,
                             GA_E_INVAL);

        expect_decode_status(NULL, codec, &p, payload, need, n, GA_E_INVAL);
        expect_decode_status(&ex, codec, NULL, payload, need, n, GA_E_INVAL);
        expect_decode_status(&ex, codec, &p, NULL, need, n, GA_E_INVAL);
        for (size_t mis = 1; mis < 4; mis++) expect_decode_status(&ex, codec, &p, payload + mis, need, n, GA_E_INVAL);
        assert_int_equal(ga_codec_decode_add(&ex, codec, &p, payload, need, n, NULL), GA_E_INVAL);

        /* Chosen semantics: n = 0 needs no buffers at all. */
        size_t out_len = OUT_LEN_SENTINEL;
        assert_int_equal(ga_codec_encode(&ex, codec, &p, NULL, NULL, 0, NULL, 0, &out_len), GA_OK);
        assert_int_equal(out_len, 0);
        assert_int_equal(ga_codec_decode_add(&ex, codec, &p, NULL, 0, 0, NULL), GA_OK);

        ga_free(out), ga_free(payload), ga_free(grad);
    }
}

/* ---- backends: CUDA without CUDA or without a device; an unknown backend ---- */

static void test_backend(void **state)
{
    (void)state;
    const size_t n = 64;
    for (size_t c = 0; c < COUNT(codecs); c++) {
        ga_codec_params p = ga_codec_params_default(codecs[c]);
        size_t need = 0;
        assert_int_equal(ga_codec_encoded_size(codecs[c], &p, n, &need), GA_OK);
        uint8_t *out = xalloc(need), *payload = valid_payload(codecs[c], n, 0);
        float *grad = pattern(n, 1);
        const ga_backend unknown[] = {GA_BACKENDS, (ga_backend)7, (ga_backend)-1};
        for (size_t k = 0; k < COUNT(unknown); k++) {
            ga_exec ex = {unknown[k], 0, GA_SIMD_AUTO, NULL};
            expect_encode_status(&ex, codecs[c], &p, grad, n, RES_AS_CODEC, out, need, GA_E_BACKEND);
            expect_decode_status(&ex, codecs[c], &p, payload, need, n, GA_E_BACKEND);
        }
        /* With a device these buffers would have to be device memory: only the error paths are
         * exercised here; the GPU tests cover the rest. */
        if (!ga_cuda_built() || ga_cuda_device_count() == 0) {
            ga_status want = ga_cuda_built() ? GA_E_NO_DEVICE : GA_E_NO_CUDA;
            ga_exec ex = GA_EXEC_CUDA_INIT;
            expect_encode_status(&ex, codecs[c], &p, grad, n, RES_AS_CODEC, out, need, want);
            expect_decode_status(&ex, codecs[c], &p, payload, need, n, want);
        }
        ga_free(out), ga_free(payload), ga_free(grad);
    }
    if (ga_cuda_built() && ga_cuda_device_count() > 0)
        fprintf(stderr, "note: a CUDA device is present; GA_E_NO_CUDA / GA_E_NO_DEVICE not reachable here\n");
}

/* ---- GA_E_RATIO through ga_codec_params_validate (top-k's own tests cover the codec) ---- */

static void test_topk_ratio(void **state)
{
    (void)state;
    const float bad[] = {0.0f, -0.0f, -0.5f, 0x1.000002p0f, 2.0f, NAN, INFINITY, -INFINITY};
    for (size_t k = 0; k < COUNT(bad); k++) {
        ga_codec_params p = ga_codec_params_default(GA_CODEC_TOPK);
        p.ratio = bad[k];
        assert_int_equal(ga_codec_params_validate(GA_CODEC_TOPK, &p), GA_E_RATIO);
        p = ga_codec_params_default(GA_CODEC_TOPK);
        p.sample_fraction = bad[k];
        assert_int_equal(ga_codec_params_validate(GA_CODEC_TOPK, &p), GA_E_RATIO);
    }
    const float good[] = {1.0f, 0.001f, 0x1p-149f};
    for (size_t k = 0; k < COUNT(good); k++) {
        ga_codec_params p = ga_codec_params_default(GA_CODEC_TOPK);
        p.ratio = good[k];
        assert_int_equal(ga_codec_params_validate(GA_CODEC_TOPK, &p), GA_OK);
    }
    /* Other codecs do not read the ratio. */
    ga_codec_params p = ga_codec_params_default(GA_CODEC_2BIT);
    p.ratio = NAN;
    assert_int_equal(ga_codec_params_validate(GA_CODEC_2BIT, &p), GA_OK);
    assert_int_equal(ga_codec_params_validate(GA_CODEC_TOPK, NULL), GA_E_INVAL);
}

/* ---- top-k payloads: ga_codec_check_payload against decode_add ---- */

#define F32_1 0x00, 0x00, 0x80, 0x3F
#define F32_2 0x00, 0x00, 0x00, 0x40
#define F32_NAN 0x00, 0x00, 0xC0, 0x7F
#define F32_INF 0x00, 0x00, 0x80, 0x7F
#define U32(v) (v), 0, 0, 0

typedef struct topk_case {
    int fp16, varint;
    size_t n;
    uint8_t bytes[24];
    size_t len;
    ga_status want;
} topk_case;

static const topk_case topk_cases[] = {
    {0, 0, 10, {U32(2), F32_1, F32_2, U32(3), U32(7)}, 20, GA_OK},
    {0, 1, 10, {U32(2), F32_1, F32_2, 0x03, 0x03}, 14, GA_OK},
    {1, 0, 10, {U32(2), 0x00, 0x3C, 0x00, 0x40, U32(3), U32(7)}, 16, GA_OK},
    {0, 0, 10, {U32(0)}, 4, GA_OK},
    {0, 0, 10, {0}, 0, GA_E_LENGTH},
    {0, 0, 10, {2, 0, 0}, 3, GA_E_LENGTH},
    {0, 0, 10, {U32(6), F32_1, F32_1, F32_1, F32_1, F32_1}, 24, GA_E_LENGTH},
    {0, 0, 10, {U32(2), F32_1, F32_2, U32(3)}, 16, GA_E_LENGTH},
    {0, 0, 10, {U32(2), F32_1, F32_2, U32(7), U32(3)}, 20, GA_E_INDEX_ORDER},
    {0, 0, 10, {U32(2), F32_1, F32_2, U32(3), U32(3)}, 20, GA_E_INDEX_ORDER},
    {0, 0, 10, {U32(2), F32_1, F32_2, U32(3), U32(10)}, 20, GA_E_INDEX_RANGE},
    {0, 0, 10, {U32(2), F32_1, F32_NAN, U32(3), U32(7)}, 20, GA_E_NONFINITE},
    {0, 0, 10, {U32(2), F32_INF, F32_1, U32(3), U32(7)}, 20, GA_E_NONFINITE},
    {1, 0, 10, {U32(1), 0x00, 0xFC, U32(3)}, 10, GA_E_NONFINITE},
    {0, 1, 10, {U32(2), F32_1, F32_2, 0x03, 0x83}, 14, GA_E_LENGTH},
    {0, 1, 10, {U32(2), F32_1, F32_2, 0x03, 0x83, 0x00}, 15, GA_E_VARINT},
    {0, 1, 10, {U32(1), F32_1, 0xFF, 0xFF, 0xFF, 0xFF, 0x10}, 13, GA_E_VARINT},
    {0, 1, 10, {U32(2), F32_1, F32_2, 0x03, 0x06}, 14, GA_E_INDEX_RANGE},
    {0, 0, 0, {U32(1)}, 4, GA_E_LENGTH},
    {0, 0, 10, {U32(2), F32_1, F32_2, U32(3), U32(7)}, 48, GA_E_LENGTH}, /* over the most an encode makes */
};

static ga_codec_params topk_params(int fp16, int varint)
{
    ga_codec_params p = ga_codec_params_default(GA_CODEC_TOPK);
    p.ratio = 0.5f;
    p.topk_values = (uint8_t)fp16;
    p.topk_indices = (uint8_t)varint;
    return p;
}

static void test_topk_check(void **state)
{
    (void)state;
    ga_exec ex = GA_EXEC_CPU_INIT;
    for (size_t c = 0; c < COUNT(topk_cases); c++) {
        const topk_case *t = &topk_cases[c];
        ga_codec_params p = topk_params(t->fp16, t->varint);
        uint32_t payload[16] = {0};
        memcpy(payload, t->bytes, sizeof t->bytes);
        expect_decode_status(&ex, GA_CODEC_TOPK, &p, payload, t->len, t->n, t->want);
    }
    /* Random corruptions of an encoded payload: whatever decode_add says, the check says too. */
    const size_t n = 300;
    float *grad = pattern(n, 21), *res = pattern(n, 0);
    memset(res, 0, n * sizeof *res);
    for (int fmt = 0; fmt < 4; fmt++) {
        ga_codec_params p = ga_codec_params_default(GA_CODEC_TOPK);
        p.ratio = 0.05f;
        p.topk_values = (uint8_t)(fmt & 1), p.topk_indices = (uint8_t)(fmt >> 1);
        size_t cap = 0, len = 0;
        assert_int_equal(ga_codec_encoded_size(GA_CODEC_TOPK, &p, n, &cap), GA_OK);
        uint8_t *good = xalloc(cap), *bad = xalloc(cap);
        assert_int_equal(ga_codec_encode(&ex, GA_CODEC_TOPK, &p, grad, res, n, good, cap, &len), GA_OK);
        uint32_t rng = 12345u + (uint32_t)fmt;
        for (int iter = 0; iter < 2000; iter++) {
            memcpy(bad, good, len);
            rng = rng * 1664525u + 1013904223u;
            size_t at = (rng >> 8) % len;
            bad[at] ^= (uint8_t)(1u << ((rng >> 4) & 7));
            size_t blen = (rng & 3) == 0 ? len - 1 : len;
            float *sum = pattern(n, 3);
            ga_status want = ga_codec_decode_add(&ex, GA_CODEC_TOPK, &p, bad, blen, n, sum);
            assert_int_equal(ga_codec_check_payload(GA_CODEC_TOPK, &p, bad, blen, n), want);
            ga_free(sum);
        }
        ga_free(good), ga_free(bad);
    }
    ga_free(grad), ga_free(res);
}

int main(void)
{
    test_memory_baseline();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_length),        cmocka_unit_test(test_threshold),
        cmocka_unit_test(test_nonfinite_payload), cmocka_unit_test(test_bad_scale),
        cmocka_unit_test(test_int_scale),
        cmocka_unit_test(test_nonfinite_grad), cmocka_unit_test(test_range),
        cmocka_unit_test(test_capacity),      cmocka_unit_test(test_unknown_codec),
        cmocka_unit_test(test_inval),         cmocka_unit_test(test_backend),
        cmocka_unit_test(test_topk_ratio),    cmocka_unit_test(test_topk_check),
        cmocka_unit_test(test_host_memory_returned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
