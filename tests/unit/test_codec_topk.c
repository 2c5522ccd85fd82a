/* Top-k (DGC) codec on the CPU: payload and residual bytes against the slow oracle on every
 * thread count and SIMD level, sampling, relaxation, trimming and fallback paths, error
 * feedback, golden bytes, and every decode error leaving the sum untouched. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ga_alloc.h"
#include "ga_codec.h"
#include "oracle_topk.h"

/* ---- helpers ---- */

static uint64_t rng_state = 0x1234567u;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static float unit(void) { return (float)((double)(rnd() >> 11) / 9007199254740992.0); }

/* Roughly normal, with zeros and negative zeros mixed in. */
static void fill_gauss(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t u = rnd() % 100;
        if (u < 3) x[i] = 0.0f;
        else if (u < 5) x[i] = -0.0f;
        else x[i] = (unit() + unit() + unit() + unit() - 2.0f) * scale;
    }
}

/* Few distinct magnitudes: many ties at every threshold. */
static void fill_ties(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = (float)((int)(rnd() % 17) - 8) * 0.5f;
}

static ga_codec_params topk_params(float ratio, float sample, uint32_t rounds, uint64_t seed, int fp16, int varint)
{
    ga_codec_params p = ga_codec_params_default(GA_CODEC_TOPK);
    p.ratio = ratio;
    p.sample_fraction = sample;
    p.adapt_rounds = rounds;
    p.seed = seed;
    p.topk_values = (uint8_t)(fp16 ? GA_TOPK_VALUES_FP16 : GA_TOPK_VALUES_FP32);
    p.topk_indices = (uint8_t)(varint ? GA_TOPK_INDICES_VARINT : GA_TOPK_INDICES_INT32);
    return p;
}

static ga_exec cpu(int threads, ga_simd simd)
{
    ga_exec ex = GA_EXEC_CPU_INIT;
    ex.max_threads = threads;
    ex.simd = simd;
    return ex;
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}

static float *copy_floats(const float *x, size_t n)
{
    float *y = xmalloc(n * sizeof *y);
    if (n) memcpy(y, x, n * sizeof *y);
    return y;
}

/* Fails at the first differing byte, naming it. */
static void expect_same(const void *got, const void *want, size_t bytes, const char *what)
{
    const uint8_t *g = got, *w = want;
    for (size_t i = 0; i < bytes; i++) {
        if (g[i] != w[i]) {
            print_error("%s differs at byte %zu of %zu: got 0x%02x, want 0x%02x\n", what, i, bytes, g[i], w[i]);
            fail();
        }
    }
}

static size_t topk_cap(const ga_codec_params *p, size_t n)
{
    size_t cap;
    assert_int_equal(ga_codec_encoded_size(GA_CODEC_TOPK, p, n, &cap), GA_OK);
    return cap;
}

static const ga_simd simd_levels[] = {GA_SIMD_SCALAR, GA_SIMD_AVX2, GA_SIMD_AVX512};

/* Encodes grad into a copy of res (updated in place to the oracle's result) on every thread
 * count and SIMD level; each must match the oracle's payload and residual byte for byte.
 * Returns the payload's count and leaves the payload in *payload (free it). */
static uint32_t check_encode(const ga_codec_params *p, const float *grad, float *res, size_t n, uint8_t **payload,
                             size_t *payload_len)
{
    size_t cap = topk_cap(p, n);
    uint8_t *want = xmalloc(cap + 4);
    float *want_r = copy_floats(res, n);
    size_t want_len = 0;
    assert_int_equal(oracle_topk_encode(p, grad, want_r, n, want, &want_len), GA_OK);
    assert_true(want_len <= cap);
    uint8_t *got = xmalloc(cap + 4);
    for (int threads = 1; threads <= 2; threads++) {
        for (size_t s = 0; s < sizeof simd_levels / sizeof simd_levels[0]; s++) {
            ga_exec ex = cpu(threads, simd_levels[s]);
            float *r = copy_floats(res, n);
            size_t len = 0;
            memset(got, 0xAB, cap + 4);
            assert_int_equal(ga_codec_encode(&ex, GA_CODEC_TOPK, p, grad, r, n, got, cap, &len), GA_OK);
            if (len != want_len)
                print_error("n=%zu threads=%d simd=%s: len %zu, want %zu\n", n, threads, ga_simd_name(simd_levels[s]),
                            len, want_len);
            assert_int_equal(len, want_len);
            expect_same(got, want, len, "payload");
            expect_same(r, want_r, n * sizeof *r, "residual");
            free(r);
        }
    }
    uint32_t count;
    memcpy(&count, want, 4);
    memcpy(res, want_r, n * sizeof *res);
    free(want_r);
    free(got);
    if (payload) {
        *payload = want;
        *payload_len = want_len;
    } else {
        free(want);
    }
    return count;
}

/* ---- encode parity ---- */

static void test_parity_exact(void **state)
{
    (void)state;
    static const size_t sizes[] = {0, 1, 15, 16, 17, 33, 1000, 65536};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si];
        float *g = xmalloc(n * sizeof *g), *r = xmalloc(n * sizeof *r);
        for (int fmt = 0; fmt < 4; fmt++) {
            for (int data = 0; data < 2; data++) {
                if (data == 0) fill_gauss(g, n, 1.0f);
                else fill_ties(g, n);
                fill_gauss(r, n, 0.1f);
                float ratio = n < 100 ? 0.3f : 0.01f;
                ga_codec_params p = topk_params(ratio, 0.01f, 10, (uint64_t)si, fmt & 1, fmt >> 1);
                uint32_t count = check_encode(&p, g, r, n, NULL, NULL);
                size_t k = (size_t)ceil((double)n * (double)ratio);
                assert_true(count <= k);
                if (n >= 33) assert_int_equal(count, k); /* plenty of nonzeros */
            }
        }
        free(g);
        free(r);
    }
}

static void test_parity_sampled(void **state)
{
    (void)state;
    static const size_t sizes[] = {65537, 1000003};
    for (size_t si = 0; si < 2; si++) {
        size_t n = sizes[si];
        float *g = xmalloc(n * sizeof *g), *r = xmalloc(n * sizeof *r);
        for (int fmt = 0; fmt < 4; fmt++) {
            for (uint64_t seed = 0; seed < 3; seed++) {
                fill_gauss(g, n, 1.0f);
                fill_gauss(r, n, 0.3f);
                ga_codec_params p = topk_params(0.001f, 0.01f, 10, seed * 7919u, fmt & 1, fmt >> 1);
                check_encode(&p, g, r, n, NULL, NULL);
            }
            /* Ties: the sampled threshold lands on a level held by > 65536 elements, so the
             * histogram fallback picks the k among them by index. */
            fill_ties(g, n);
            memset(r, 0, n * sizeof *r);
            ga_codec_params p = topk_params(0.002f, 0.01f, 10, 5, fmt & 1, fmt >> 1);
            uint32_t count = check_encode(&p, g, r, n, NULL, NULL);
            assert_int_equal(count, (uint32_t)ceil((double)n * (double)p.ratio));
        }
        free(g);
        free(r);
    }
}

/* A larger ratio and sample fraction 1 (every element sampled). */
static void test_parity_dense_sample(void **state)
{
    (void)state;
    size_t n = 300007;
    float *g = xmalloc(n * sizeof *g), *r = xmalloc(n * sizeof *r);
    fill_gauss(g, n, 2.0f);
    fill_gauss(r, n, 1.0f);
    ga_codec_params p = topk_params(0.25f, 1.0f, 10, 3, 1, 1);
    check_encode(&p, g, r, n, NULL, NULL);
    p = topk_params(1.0f, 0.5f, 10, 4, 0, 0);
    check_encode(&p, g, r, n, NULL, NULL);
    /* A sample fraction so small the stride is clamped to n: one sample. */
    p = topk_params(0.01f, 1e-9f, 10, 99, 0, 1);
    check_encode(&p, g, r, n, NULL, NULL);
    free(g);
    free(r);
}

/* ---- paths ---- */

/* The sample overestimates: its top 20 values are [100, 101), the rest of it below 1, and
 * about 990 other elements sit at [60, 61). m = 10 or 11, so thr is about 100.5 and m are sent
 * with no relaxation; one or two relaxations (80.4, 64.3) reach the 20; the third (51.5) reaches
 * the 60s, count >= 0.8k, and the candidates are trimmed to k. */
static void test_adaptation(void **state)
{
    (void)state;
    size_t n = 1000003, start, stride;
    float *g = xmalloc(n * sizeof *g), *r = xmalloc(n * sizeof *r);
    uint32_t counts[5], m = 0;
    static const uint32_t rounds[5] = {0, 1, 2, 3, 10};
    for (int v = 0; v < 5; v++) {
        ga_codec_params p = topk_params(0.001f, 0.01f, rounds[v], 77, v & 1, v >> 1 & 1);
        oracle_topk_sample_plan(&p, n, &start, &stride);
        m = (uint32_t)ceil((double)((n - start + stride - 1) / stride) * (double)p.ratio);
        for (size_t i = 0; i < n; i++) g[i] = (unit() - 0.5f) * 2.0f;
        for (size_t i = 3; i < n; i += 997) g[i] = 60.0f + unit();
        for (size_t i = start, j = 0; i < n; i += stride, j++) g[i] = j < 20 ? 100.0f + unit() : unit() - 0.5f;
        memset(r, 0, n * sizeof *r);
        counts[v] = check_encode(&p, g, r, n, NULL, NULL);
    }
    assert_int_equal(counts[0], m);
    assert_int_equal(counts[1], 20);
    assert_int_equal(counts[2], 20);
    assert_int_equal(counts[3], 1001);
    assert_int_equal(counts[4], 1001);
    free(g);
    free(r);
}

/* The sample sees only small values and about 3000 others are large: count > 1.3k but under
 * the cap, so the candidates are trimmed exactly; the large values have 8 levels, so the k-th
 * key is tied and ties go to the lower indices. */
static void test_exact_trim(void **state)
{
    (void)state;
    size_t n = 500009, start, stride;
    float *g = xmalloc(n * sizeof *g), *r = xmalloc(n * sizeof *r);
    for (int fmt = 0; fmt < 4; fmt++) {
        ga_codec_params p = topk_params(0.002f, 0.01f, 10, 11 + (uint64_t)fmt, fmt & 1, fmt >> 1);
        oracle_topk_sample_plan(&p, n, &start, &stride);
        for (size_t i = 0; i < n; i++) g[i] = i % 157 == 5 ? 1.0f + (float)(rnd() % 8) * 0.125f : 0.5f * unit();
        for (size_t i = start; i < n; i += stride) g[i] = 0.5f * unit();
        memset(r, 0, n * sizeof *r);
        uint32_t count = check_encode(&p, g, r, n, NULL, NULL);
        assert_int_equal(count, (uint32_t)ceil((double)n * (double)p.ratio));
    }
    free(g);
    free(r);
}

/* The sample sees only zeros: thr = 0, every nonzero is a candidate (far over the cap), and
 * the histogram fallback finds the exact top-k. */
static void test_cap_fallback(void **state)
{
    (void)state;
    size_t n = 700001, start, stride;
    float *g = xmalloc(n * sizeof *g), *r = xmalloc(n * sizeof *r);
    for (int fmt = 0; fmt < 4; fmt++) {
        ga_codec_params p = topk_params(0.003f, 0.02f, 10, 1234 + (uint64_t)fmt, fmt & 1, fmt >> 1);
        oracle_topk_sample_plan(&p, n, &start, &stride);
        fill_gauss(g, n, 1.0f);
        for (size_t i = start; i < n; i += stride) g[i] = 0.0f;
        memset(r, 0, n * sizeof *r);
        uint32_t count = check_encode(&p, g, r, n, NULL, NULL);
        assert_int_equal(count, (uint32_t)ceil((double)n * (double)p.ratio));
    }
    /* All equal: the first k indices win. */
    for (size_t i = 0; i < n; i++) g[i] = (i & 1) ? -0.75f : 0.75f;
    memset(r, 0, n * sizeof *r);
    ga_codec_params p = topk_params(0.001f, 0.01f, 10, 8, 0, 0);
    uint8_t *payload;
    size_t len;
    uint32_t count = check_encode(&p, g, r, n, &payload, &len);
    assert_int_equal(count, 701);
    for (uint32_t j = 0; j < count; j++) {
        uint32_t idx;
        memcpy(&idx, payload + 4 + 4 * count + 4 * j, 4);
        assert_int_equal(idx, j);
    }
    free(payload);
    free(g);
    free(r);
}

/* Three steps with the residual carried over; each step matches the oracle. */
static void test_residual_carry(void **state)
{
    (void)state;
    size_t n = 200003;
    float *g = xmalloc(n * sizeof *g), *r = xmalloc(n * sizeof *r);
    for (int fmt = 0; fmt < 4; fmt++) {
        memset(r, 0, n * sizeof *r);
        for (uint64_t step = 0; step < 3; step++) {
            fill_gauss(g, n, fmt & 1 ? 3000.0f : 1.0f); /* fp16: residuals keep rounding errors */
            ga_codec_params p = topk_params(0.005f, 0.01f, 10, step, fmt & 1, fmt >> 1);
            check_encode(&p, g, r, n, NULL, NULL);
        }
    }
    free(g);
    free(r);
}

/* Error feedback loses nothing: sum of decoded payloads + final residual == sum of inputs. */
static void test_error_feedback_identity(void **state)
{
    (void)state;
    size_t n = 100003;
    float *g = xmalloc(n * sizeof *g), *r = xmalloc(n * sizeof *r), *sent = xmalloc(n * sizeof *sent);
    double *in = xmalloc(n * sizeof *in), *mag = xmalloc(n * sizeof *mag);
    for (int fmt = 0; fmt < 4; fmt++) {
        ga_exec ex = cpu(2, GA_SIMD_AUTO);
        memset(r, 0, n * sizeof *r);
        memset(sent, 0, n * sizeof *sent);
        memset(in, 0, n * sizeof *in);
        memset(mag, 0, n * sizeof *mag);
        ga_codec_params p = topk_params(0.01f, 0.01f, 10, 0, fmt & 1, fmt >> 1);
        size_t cap = topk_cap(&p, n);
        uint32_t *out = xmalloc(cap);
        for (uint64_t step = 0; step < 6; step++) {
            fill_gauss(g, n, 1.0f);
            for (size_t i = 0; i < n; i++) {
                in[i] += g[i];
                mag[i] += fabs(g[i]);
            }
            p.seed = step;
            size_t len;
            assert_int_equal(ga_codec_encode(&ex, GA_CODEC_TOPK, &p, g, r, n, out, cap, &len), GA_OK);
            assert_int_equal(ga_codec_decode_add(&ex, GA_CODEC_TOPK, &p, out, len, n, sent), GA_OK);
        }
        for (size_t i = 0; i < n; i++) {
            double err = fabs((double)sent[i] + (double)r[i] - in[i]);
            if (err > 1e-5 * mag[i] + 1e-30) {
                print_error("element %zu: sent %g + residual %g vs inputs %g\n", i, sent[i], r[i], in[i]);
                fail();
            }
        }
        free(out);
    }
    free(g);
    free(r);
    free(sent);
    free(in);
    free(mag);
}

static void test_nonfinite_grad(void **state)
{
    (void)state;
    size_t n = 70001;
    float *g = xmalloc(n * sizeof *g), *r = xmalloc(n * sizeof *r), *r0 = xmalloc(n * sizeof *r0);
    ga_codec_params p = topk_params(0.01f, 0.01f, 10, 0, 0, 0);
    size_t cap = topk_cap(&p, n);
    uint32_t *out = xmalloc(cap);
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    static const size_t where[3] = {0, 35000, 70000};
    for (int b = 0; b < 3; b++) {
        for (int w = 0; w < 3; w++) {
            ga_exec ex = cpu(1 + w % 2, simd_levels[b]);
            fill_gauss(g, n, 1.0f);
            fill_gauss(r0, n, 1.0f);
            memcpy(r, r0, n * sizeof *r);
            g[where[w]] = bad[b];
            size_t len = 12345;
            assert_int_equal(ga_codec_encode(&ex, GA_CODEC_TOPK, &p, g, r, n, out, cap, &len), GA_E_NONFINITE);
            assert_int_equal(len, 12345);
            expect_same(r, r0, n * sizeof *r, "residual after a rejected encode");
        }
    }
    free(g);
    free(r);
    free(r0);
    free(out);
}

/* Scratch is accounted and all freed. */
static void test_memory_returns(void **state)
{
    (void)state;
    size_t n = 700001;
    float *g = xmalloc(n * sizeof *g), *r = xmalloc(n * sizeof *r), *sum = xmalloc(n * sizeof *sum);
    fill_ties(g, n); /* the fallback path allocates the most */
    memset(r, 0, n * sizeof *r);
    memset(sum, 0, n * sizeof *sum);
    ga_codec_params p = topk_params(0.01f, 0.01f, 10, 0, 1, 1);
    size_t cap = topk_cap(&p, n), len;
    uint32_t *out = xmalloc(cap);
    ga_exec ex = cpu(2, GA_SIMD_AUTO);
    uint64_t before = ga_mem_in_use(GA_MEM_HOST);
    assert_int_equal(ga_codec_encode(&ex, GA_CODEC_TOPK, &p, g, r, n, out, cap, &len), GA_OK);
    assert_int_equal(ga_codec_decode_add(&ex, GA_CODEC_TOPK, &p, out, len, n, sum), GA_OK);
    assert_int_equal(ga_mem_in_use(GA_MEM_HOST), before);
    free(g);
    free(r);
    free(sum);
    free(out);
}

/* ---- golden bytes ---- */

static void golden(const ga_codec_params *p, const float *g, const float *r0, size_t n, const uint8_t *want,
                   size_t want_len, const float *want_r)
{
    uint32_t out[64];
    float r[512];
    assert_true(n <= 512);
    memcpy(r, r0, n * sizeof *r);
    size_t len = 0;
    ga_exec ex = cpu(1, GA_SIMD_AUTO);
    assert_int_equal(ga_codec_encode(&ex, GA_CODEC_TOPK, p, g, r, n, out, sizeof out, &len), GA_OK);
    assert_int_equal(len, want_len);
    expect_same(out, want, len, "golden payload");
    expect_same(r, want_r, n * sizeof *r, "golden residual");
    /* The oracle agrees with the hand-built bytes too. */
    uint8_t o[256];
    memcpy(r, r0, n * sizeof *r);
    assert_int_equal(oracle_topk_encode(p, g, r, n, o, &len), GA_OK);
    assert_int_equal(len, want_len);
    expect_same(o, want, len, "oracle golden payload");
}

static void test_golden(void **state)
{
    (void)state;
    /* n = 10, ratio 0.15 -> k = ceil(1.50000006) = 2. r = r0 + g = {0.5, -3, 0, 1, 3, -2.5, 0,
     * 0.25, 3, -0.125}: three magnitudes of 3 (indices 1, 4, 8), the tie goes to 1 and 4. */
    const float g[10] = {0.5f, -3.0f, 0.0f, 1.0f, 2.5f, -2.5f, -0.0f, 0.25f, 3.0f, -0.125f};
    const float r0[10] = {0, 0, 0, 0, 0.5f, 0, 0, 0, 0, 0};
    const float want_r[10] = {0.5f, 0.0f, 0.0f, 1.0f, 0.0f, -2.5f, 0.0f, 0.25f, 3.0f, -0.125f};
    const uint8_t fp32_int32[] = {2, 0, 0, 0, 0x00, 0x00, 0x40, 0xC0, 0x00, 0x00, 0x40, 0x40,
                                  1, 0, 0, 0, 4,    0,    0,    0};
    const uint8_t fp32_varint[] = {2, 0, 0, 0, 0x00, 0x00, 0x40, 0xC0, 0x00, 0x00, 0x40, 0x40, 0x01, 0x02};
    const uint8_t fp16_int32[] = {2, 0, 0, 0, 0x00, 0xC2, 0x00, 0x42, 1, 0, 0, 0, 4, 0, 0, 0};
    const uint8_t fp16_varint[] = {2, 0, 0, 0, 0x00, 0xC2, 0x00, 0x42, 0x01, 0x02};
    ga_codec_params p = topk_params(0.15f, 0.01f, 10, 0, 0, 0);
    golden(&p, g, r0, 10, fp32_int32, sizeof fp32_int32, want_r);
    p = topk_params(0.15f, 0.01f, 10, 0, 0, 1);
    golden(&p, g, r0, 10, fp32_varint, sizeof fp32_varint, want_r);
    p = topk_params(0.15f, 0.01f, 10, 0, 1, 0);
    golden(&p, g, r0, 10, fp16_int32, sizeof fp16_int32, want_r);
    p = topk_params(0.15f, 0.01f, 10, 0, 1, 1);
    golden(&p, g, r0, 10, fp16_varint, sizeof fp16_varint, want_r);

    /* n = 400, ratio 0.004 -> k = 2: multi-byte varints (200 = C8 01, 350 - 200 - 1 = 149 =
     * 95 01) and fp16 saturation (1e6 -> 0x7BFF, residual 1e6 - 65504; 0.1 -> 0x2E66,
     * residual 0.1 - 0.0999755859375). */
    float g2[400], r2[400], want_r2[400];
    memset(g2, 0, sizeof g2);
    memset(r2, 0, sizeof r2);
    g2[200] = 1e6f;
    g2[350] = -0.1f;
    g2[7] = 0.05f;
    memcpy(want_r2, g2, sizeof g2);
    want_r2[200] = 1e6f - 65504.0f;
    want_r2[350] = -0.1f - -0.0999755859375f;
    const uint8_t sat[] = {2, 0, 0, 0, 0xFF, 0x7B, 0x66, 0xAE, 0xC8, 0x01, 0x95, 0x01};
    p = topk_params(0.004f, 0.01f, 10, 0, 1, 1);
    golden(&p, g2, r2, 400, sat, sizeof sat, want_r2);
}

/* ---- decode ---- */

typedef struct bad_case {
    const char *name;
    int fp16, varint;
    size_t n;
    float ratio;
    uint8_t bytes[40];
    size_t len;
    int want;
} bad_case;

#define F32_1 0x00, 0x00, 0x80, 0x3F
#define F32_2 0x00, 0x00, 0x00, 0x40
#define F32_NAN 0x00, 0x00, 0xC0, 0x7F
#define F32_INF 0x00, 0x00, 0x80, 0x7F
#define U32(v) (v), 0, 0, 0

static const bad_case bad_cases[] = {
    {"empty", 0, 0, 10, 0.5f, {0}, 0, GA_E_LENGTH},
    {"short header", 0, 0, 10, 0.5f, {2, 0, 0}, 3, GA_E_LENGTH},
    {"count over k", 0, 0, 10, 0.5f, {U32(6), F32_1, F32_1, F32_1, F32_1, F32_1}, 24, GA_E_LENGTH},
    {"values cut", 0, 0, 10, 0.5f, {U32(5), F32_1, F32_1, F32_1, F32_1}, 20, GA_E_LENGTH},
    {"index missing", 0, 0, 10, 0.5f, {U32(2), F32_1, F32_2, U32(3)}, 16, GA_E_LENGTH},
    {"index extra", 0, 0, 10, 0.5f, {U32(2), F32_1, F32_2, U32(3), U32(7), U32(8)}, 24, GA_E_LENGTH},
    {"count 3 of 2 pairs", 0, 0, 10, 0.5f, {U32(3), F32_1, F32_2, U32(3), U32(7)}, 20, GA_E_LENGTH},
    {"decreasing", 0, 0, 10, 0.5f, {U32(2), F32_1, F32_2, U32(7), U32(3)}, 20, GA_E_INDEX_ORDER},
    {"duplicate", 0, 0, 10, 0.5f, {U32(2), F32_1, F32_2, U32(3), U32(3)}, 20, GA_E_INDEX_ORDER},
    {"order before range", 0, 0, 10, 0.5f, {U32(2), F32_1, F32_2, U32(10), U32(3)}, 20, GA_E_INDEX_ORDER},
    {"out of range", 0, 0, 10, 0.5f, {U32(2), F32_1, F32_2, U32(3), U32(10)}, 20, GA_E_INDEX_RANGE},
    {"range before nonfinite", 0, 0, 10, 0.5f, {U32(2), F32_NAN, F32_2, U32(3), U32(10)}, 20, GA_E_INDEX_RANGE},
    {"nan", 0, 0, 10, 0.5f, {U32(2), F32_1, F32_NAN, U32(3), U32(7)}, 20, GA_E_NONFINITE},
    {"inf", 0, 0, 10, 0.5f, {U32(2), F32_INF, F32_1, U32(3), U32(7)}, 20, GA_E_NONFINITE},
    {"fp16 inf", 1, 0, 10, 0.5f, {U32(2), 0x00, 0x3C, 0x00, 0x7C, U32(3), U32(7)}, 16, GA_E_NONFINITE},
    {"fp16 -inf", 1, 0, 10, 0.5f, {U32(1), 0x00, 0xFC, U32(3)}, 10, GA_E_NONFINITE},
    {"fp16 nan", 1, 1, 10, 0.5f, {U32(1), 0x01, 0x7E, 0x09}, 7, GA_E_NONFINITE},
    {"fp16 odd length", 1, 0, 10, 0.5f, {U32(1), 0x00, 0x3C, U32(3), 0}, 11, GA_E_LENGTH},
    {"varint cut", 0, 1, 10, 0.5f, {U32(2), F32_1, F32_2, 0x03, 0x83}, 14, GA_E_LENGTH},
    {"varint missing", 0, 1, 10, 0.5f, {U32(2), F32_1, F32_2, 0x03}, 13, GA_E_LENGTH},
    {"varint trailing", 0, 1, 10, 0.5f, {U32(2), F32_1, F32_2, 0x03, 0x03, 0x00}, 15, GA_E_LENGTH},
    {"varint non-canonical", 0, 1, 10, 0.5f, {U32(2), F32_1, F32_2, 0x03, 0x83, 0x00}, 15, GA_E_VARINT},
    {"varint zero group", 0, 1, 10, 0.5f, {U32(1), F32_1, 0x80, 0x00}, 10, GA_E_VARINT},
    {"varint six bytes", 0, 1, 10, 0.5f, {U32(1), F32_1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, 14, GA_E_VARINT},
    {"varint over 32 bits", 0, 1, 10, 0.5f, {U32(1), F32_1, 0xFF, 0xFF, 0xFF, 0xFF, 0x10}, 13, GA_E_VARINT},
    {"varint 2^32-1", 0, 1, 10, 0.5f, {U32(1), F32_1, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F}, 13, GA_E_INDEX_RANGE},
    {"varint range", 0, 1, 10, 0.5f, {U32(2), F32_1, F32_2, 0x03, 0x06}, 14, GA_E_INDEX_RANGE},
    {"varint first range", 0, 1, 10, 0.5f, {U32(1), F32_1, 0x0A}, 9, GA_E_INDEX_RANGE},
    {"varint before nonfinite", 0, 1, 10, 0.5f, {U32(2), F32_INF, F32_2, 0x03, 0x83, 0x00}, 15, GA_E_VARINT},
    {"empty with bytes", 0, 1, 10, 0.5f, {U32(0), 0x00}, 5, GA_E_LENGTH},
    {"n = 0, nonzero count", 0, 0, 0, 0.5f, {U32(1)}, 4, GA_E_LENGTH},
};

static void test_decode_errors(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof bad_cases / sizeof bad_cases[0]; c++) {
        const bad_case *b = &bad_cases[c];
        ga_codec_params p = topk_params(b->ratio, 0.01f, 10, 0, b->fp16, b->varint);
        uint32_t payload[16];
        memcpy(payload, b->bytes, sizeof b->bytes);
        float sum[16], sum0[16];
        fill_gauss(sum0, 16, 1.0f);
        memcpy(sum, sum0, sizeof sum);
        ga_exec ex = cpu(2, GA_SIMD_AUTO);
        int rc = ga_codec_decode_add(&ex, GA_CODEC_TOPK, &p, payload, b->len, b->n, sum);
        if (rc != b->want)
            print_error("case '%s': %s, want %s\n", b->name, ga_status_name(rc), ga_status_name(b->want));
        assert_int_equal(rc, b->want);
        expect_same(sum, sum0, sizeof sum, b->name);
        assert_int_equal(oracle_topk_decode_add(&p, (const uint8_t *)payload, b->len, b->n, sum), b->want);
    }
    /* The registry's checks: a misaligned payload, and more bytes than any encode makes. */
    ga_codec_params p = topk_params(0.5f, 0.01f, 10, 0, 0, 0);
    uint32_t payload[16] = {0};
    float sum[10] = {0};
    ga_exec ex = cpu(1, GA_SIMD_AUTO);
    assert_int_equal(ga_codec_decode_add(&ex, GA_CODEC_TOPK, &p, (uint8_t *)payload + 1, 4, 10, sum), GA_E_INVAL);
    assert_int_equal(ga_codec_decode_add(&ex, GA_CODEC_TOPK, &p, payload, 48, 10, sum), GA_E_LENGTH);
}

/* Valid payloads decode into the oracle's sum, in both index formats and with many pairs
 * (parallel scatter). */
static void test_decode_values(void **state)
{
    (void)state;
    size_t n = 1000003;
    float *g = xmalloc(n * sizeof *g), *r = xmalloc(n * sizeof *r), *sum = xmalloc(n * sizeof *sum),
          *want = xmalloc(n * sizeof *want);
    for (int fmt = 0; fmt < 4; fmt++) {
        fill_gauss(g, n, 1.0f);
        memset(r, 0, n * sizeof *r);
        ga_codec_params p = topk_params(0.1f, 0.01f, 10, 0, fmt & 1, fmt >> 1);
        uint8_t *payload;
        size_t len;
        check_encode(&p, g, r, n, &payload, &len);
        fill_gauss(want, n, 1.0f);
        memcpy(sum, want, n * sizeof *sum);
        assert_int_equal(oracle_topk_decode_add(&p, payload, len, n, want), GA_OK);
        for (int threads = 1; threads <= 2; threads++) {
            float *s = copy_floats(sum, n);
            ga_exec ex = cpu(threads, GA_SIMD_AUTO);
            assert_int_equal(ga_codec_decode_add(&ex, GA_CODEC_TOPK, &p, payload, len, n, s), GA_OK);
            expect_same(s, want, n * sizeof *s, "decoded sum");
            memcpy(s, sum, n * sizeof *s);
            assert_int_equal(ga_codec_decode_add_checked(&ex, GA_CODEC_TOPK, &p, payload, len, n, s), GA_OK);
            expect_same(s, want, n * sizeof *s, "decoded sum, checked");
            free(s);
        }
        free(payload);
    }
    /* A 4-byte varint gap. */
    ga_codec_params p = topk_params(0.5f, 0.01f, 10, 0, 0, 1);
    size_t big = 5000000;
    float *s = xmalloc(big * sizeof *s);
    memset(s, 0, big * sizeof *s);
    /* indices 2 and 4000002: 2, then gap 3999999 = 0x3D08FF -> FF 91 F4 01 */
    uint32_t payload[5];
    const uint8_t bytes[] = {2, 0, 0, 0, F32_1, F32_2, 0x02, 0xFF, 0x91, 0xF4, 0x01};
    memcpy(payload, bytes, sizeof bytes);
    ga_exec ex = cpu(1, GA_SIMD_AUTO);
    assert_int_equal(ga_codec_decode_add(&ex, GA_CODEC_TOPK, &p, payload, sizeof bytes, big, s), GA_OK);
    assert_true(s[2] == 1.0f && s[4000002] == 2.0f && s[4000001] == 0.0f && s[4000003] == 0.0f);
    free(s);
    free(g);
    free(r);
    free(sum);
    free(want);
}

/* Random corruptions of valid payloads: the codec returns the oracle's status and leaves the
 * oracle's sum. */
static void test_decode_fuzz(void **state)
{
    (void)state;
    uint32_t buf[160]; /* 4 + 60 * (4 + 5) bytes, and room to grow */
    uint8_t *bytes = (uint8_t *)buf;
    float sum[64], want[64];
    ga_exec ex = cpu(1, GA_SIMD_AUTO);
    for (int iter = 0; iter < 20000; iter++) {
        size_t n = 1 + rnd() % 60;
        int fp16 = rnd() & 1, varint = rnd() & 1;
        ga_codec_params p = topk_params(0.05f + 0.95f * unit(), 0.01f, 10, 0, fp16, varint);
        size_t k = (size_t)ceil((double)n * (double)p.ratio);
        if (k > n) k = n;
        size_t cap = topk_cap(&p, n);
        /* a valid payload: c sorted unique indices */
        size_t c = rnd() % (k + 1), pos = 4, vb = fp16 ? 2 : 4;
        uint32_t idx[64], last = 0;
        size_t chosen = 0;
        for (uint32_t i = 0; i < n && chosen < c; i++)
            if (rnd() % (n - i) < c - chosen) idx[chosen++] = i;
        memset(buf, 0, sizeof buf);
        uint32_t c32 = (uint32_t)c;
        memcpy(bytes, &c32, 4);
        for (size_t j = 0; j < c; j++, pos += vb) {
            float v = (unit() - 0.5f) * 8.0f;
            uint16_t h = (uint16_t)(rnd() & 0x7BFF);
            if (fp16) memcpy(bytes + pos, &h, 2);
            else memcpy(bytes + pos, &v, 4);
        }
        for (size_t j = 0; j < c; j++) {
            if (!varint) {
                memcpy(bytes + pos, &idx[j], 4);
                pos += 4;
                continue;
            }
            uint32_t d = j == 0 ? idx[0] : idx[j] - last - 1;
            do {
                bytes[pos++] = (uint8_t)((d & 0x7F) | (d > 0x7F ? 0x80 : 0));
                d >>= 7;
            } while (d);
            last = idx[j];
        }
        size_t len = pos;
        /* corrupt */
        int flips = (int)(rnd() % 3);
        for (int f = 0; f < flips && len > 0; f++) bytes[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
        uint64_t how = rnd() % 8;
        if (how == 0 && len > 0) len -= 1 + rnd() % len;
        if (how == 1) len += 1 + rnd() % 4;
        if (how == 2) {
            uint32_t c2 = (uint32_t)(rnd() % (k + 2));
            memcpy(bytes, &c2, 4);
        }
        if (len > cap || len > sizeof buf) continue;
        fill_gauss(sum, 64, 1.0f);
        memcpy(want, sum, sizeof sum);
        int want_rc = oracle_topk_decode_add(&p, bytes, len, n, want);
        int rc = ga_codec_decode_add(&ex, GA_CODEC_TOPK, &p, buf, len, n, sum);
        if (rc != want_rc) print_error("iter %d: %s, oracle %s\n", iter, ga_status_name(rc), ga_status_name(want_rc));
        assert_int_equal(rc, want_rc);
        expect_same(sum, want, sizeof sum, "fuzzed decode sum");
    }
}

/* ---- slices (ga_topk_slice) ---- */

/* A payload of grad (n elements) in p's formats, from a zero residual. */
static uint8_t *encode_once(const ga_codec_params *p, const float *grad, size_t n, size_t *len)
{
    uint8_t *out = xmalloc(topk_cap(p, n));
    float *r = xmalloc(n * sizeof *r);
    memset(r, 0, n * sizeof *r);
    ga_exec ex = cpu(1, GA_SIMD_AUTO);
    assert_int_equal(ga_codec_encode(&ex, GA_CODEC_TOPK, p, grad, r, n, out, topk_cap(p, n), len), GA_OK);
    free(r);
    return out;
}

/* Decodes the slices of [lo, hi) in blocks of `block`, every `stride`-th block only, into sum;
 * each slice is no longer than the payload. */
static void decode_in_slices(const ga_codec_params *p, const uint8_t *payload, size_t len, size_t n, size_t block,
                             size_t stride, float *sum)
{
    ga_exec ex = cpu(2, GA_SIMD_AUTO);
    ga_topk_cursor cur = {0};
    uint8_t *slice = xmalloc(len);
    size_t b = 0;
    for (size_t lo = 0; lo < n; lo += block, b++) {
        if (b % stride != 0) continue;
        size_t m = n - lo < block ? n - lo : block, slen = 0;
        ga_codec_params sp;
        assert_int_equal(ga_topk_slice(p, payload, len, n, lo, m, &cur, slice, len, &slen, &sp), GA_OK);
        assert_true(slen <= len);
        assert_int_equal(ga_codec_decode_add(&ex, GA_CODEC_TOPK, &sp, slice, slen, m, sum + lo), GA_OK);
    }
    free(slice);
}

/* Slices decoded block by block give the bits of one decode of the whole payload, in every
 * value and index format, for pairs spread over the tensor and for pairs all in one block
 * (many empty slices; a slice holding more than its ratio's share); blocks skipped leave their
 * elements alone. */
static void test_slices_decode_like_whole(void **state)
{
    (void)state;
    enum { N = 100003 };
    float *g = xmalloc(N * sizeof *g), *base = xmalloc(N * sizeof *base), *want = xmalloc(N * sizeof *want),
          *got = xmalloc(N * sizeof *got);
    static const size_t blocks[] = {1024, 5120, 65536, N};
    for (int clustered = 0; clustered < 2; clustered++) {
        fill_gauss(g, N, 1.0f);
        if (clustered) /* every pair in [40960, 41984) */
            for (size_t i = 0; i < N; i++)
                if (i < 40960 || i >= 41984) g[i] = 0.0f;
        for (int fmt = 0; fmt < 4; fmt++) {
            ga_codec_params p = topk_params(0.02f, 0.01f, 10, 3, fmt & 1, fmt >> 1);
            size_t len;
            uint8_t *payload = encode_once(&p, g, N, &len);
            uint32_t c;
            memcpy(&c, payload, 4);
            assert_true(c > 500);
            fill_gauss(base, N, 1.0f);
            memcpy(want, base, N * sizeof *want);
            ga_exec ex = cpu(1, GA_SIMD_AUTO);
            assert_int_equal(ga_codec_decode_add(&ex, GA_CODEC_TOPK, &p, payload, len, N, want), GA_OK);
            for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++) {
                memcpy(got, base, N * sizeof *got);
                decode_in_slices(&p, payload, len, N, blocks[b], 1, got);
                expect_same(got, want, N * sizeof *got, "sliced decode");
                memcpy(got, base, N * sizeof *got);
                decode_in_slices(&p, payload, len, N, blocks[b], 2, got);
                for (size_t lo = 0; lo < N; lo += blocks[b]) {
                    size_t m = N - lo < blocks[b] ? N - lo : blocks[b];
                    const float *w = (lo / blocks[b]) % 2 == 0 ? want : base;
                    expect_same(got + lo, w + lo, m * sizeof *got, "every other slice");
                }
            }
            free(payload);
        }
    }
    free(g), free(base), free(want), free(got);
}

/* Errors leave the cursor and the output as they were: a small output, a range before the
 * cursor or past n, a payload cut short. */
static void test_slice_errors(void **state)
{
    (void)state;
    enum { N = 4096 };
    float g[N];
    fill_gauss(g, N, 1.0f);
    for (int varint = 0; varint < 2; varint++) {
        ga_codec_params p = topk_params(0.1f, 0.01f, 10, 0, 0, varint), sp;
        size_t len, slen = 7;
        uint8_t *payload = encode_once(&p, g, N, &len), out[8 * N];
        ga_topk_cursor cur = {0}, was;
        memset(out, 0xAB, sizeof out);
        assert_int_equal(ga_topk_slice(&p, payload, len, N, 0, 2048, &cur, out, 8, &slen, &sp), GA_E_CAPACITY);
        assert_true(cur.pair == 0 && cur.byte == 0 && slen == 7 && out[0] == 0xAB);
        assert_int_equal(ga_topk_slice(&p, payload, len, N, 0, 2048, &cur, out, sizeof out, &slen, &sp), GA_OK);
        assert_true(cur.pair > 0 && cur.from == 2048 && sp.ratio == 1.0f);
        was = cur;
        assert_int_equal(ga_topk_slice(&p, payload, len, N, 1024, 1024, &cur, out, sizeof out, &slen, &sp), GA_E_INVAL);
        assert_int_equal(ga_topk_slice(&p, payload, len, N, 3072, 2048, &cur, out, sizeof out, &slen, &sp), GA_E_INVAL);
        assert_int_equal(ga_topk_slice(&p, payload, len - 1, N, 2048, 2048, &cur, out, sizeof out, &slen, &sp),
                         GA_E_LENGTH);
        assert_int_equal(ga_topk_slice(&p, payload, 3, N, 2048, 2048, &cur, out, sizeof out, &slen, &sp), GA_E_LENGTH);
        assert_memory_equal(&cur, &was, sizeof cur);
        assert_int_equal(ga_topk_slice(&p, payload, len, N, 2048, 2048, &cur, out, sizeof out, &slen, &sp), GA_OK);
        assert_int_equal(cur.byte, len); /* every pair passed */
        free(payload);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden),
        cmocka_unit_test(test_parity_exact),
        cmocka_unit_test(test_parity_sampled),
        cmocka_unit_test(test_parity_dense_sample),
        cmocka_unit_test(test_adaptation),
        cmocka_unit_test(test_exact_trim),
        cmocka_unit_test(test_cap_fallback),
        cmocka_unit_test(test_residual_carry),
        cmocka_unit_test(test_error_feedback_identity),
        cmocka_unit_test(test_nonfinite_grad),
        cmocka_unit_test(test_memory_returns),
        cmocka_unit_test(test_decode_errors),
        cmocka_unit_test(test_decode_values),
        cmocka_unit_test(test_decode_fuzz),
        cmocka_unit_test(test_slices_decode_like_whole),
        cmocka_unit_test(test_slice_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
