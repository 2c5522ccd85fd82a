/* Codecs none, fp16, bf16, 2bit, 1bit, 1bit_scaled, int8 and int4 on the CPU against the slow scalar oracle
 * (oracle.c): payload bytes, residuals and decode_add sums compared with memcmp for every
 * length, thread cap and SIMD level; residual carry-over; the error-feedback identity;
 * thread-count determinism; exhaustive fp16/bf16 conversion sweeps. */
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
#include "oracle.h"

static const ga_codec_id codecs[] = {GA_CODEC_NONE, GA_CODEC_FP16,         GA_CODEC_BF16,
                                     GA_CODEC_2BIT, GA_CODEC_1BIT,         GA_CODEC_1BIT_SCALED,
                                     GA_CODEC_INT8, GA_CODEC_INT4};
#define N_CODECS (sizeof codecs / sizeof codecs[0])

static const size_t lengths[] = {0, 1, 15, 16, 17, 33, 1000003};
#define N_LENGTHS (sizeof lengths / sizeof lengths[0])

static const int thread_caps[] = {1, 2};

/* ---- helpers ---- */

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r) /* splitmix64 */
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_unit(rng *r) { return (double)(rng_next(r) >> 11) * 0x1p-53; }

/* Realistic values spread around +-t, mixed with the special values each codec must get right:
 * +-0, float subnormals, fp16 subnormals, exact fp16 and bf16 ties, |x| near 65504, exact +-t
 * and its neighbours. Always finite and below 65520 in magnitude (so fp16 never overflows). */
static float gen_value(rng *r, float t)
{
    static const float near_max[] = {65504.0f, 65519.99609375f, 65503.99609375f, 65488.0f, 65512.0f, 65519.0f};
    float span = t > 0.0f ? t : 1.0f;
    float sign = (rng_next(r) & 1) ? -1.0f : 1.0f;
    switch (rng_next(r) % 16) {
    case 6: return sign * (t != 0.0f ? fabsf(t) : 1.0f);
    case 7: return nextafterf(sign * fabsf(t), (rng_next(r) & 1) ? INFINITY : -INFINITY);
    case 8: return sign * 0.0f;
    case 9: return sign * oracle_f32_from_bits((uint32_t)(rng_next(r) % 0x7FFFFFu) + 1u);
    case 10: return sign * (float)ldexp((double)(rng_next(r) % 0xFFFFFFu + 1u), -38); /* (0, 2^-14) */
    case 11: { /* midway between two adjacent finite halves */
        uint16_t h = (uint16_t)(rng_next(r) % 0x7BFFu);
        return sign * (float)(((double)oracle_f16_to_f32(h) + (double)oracle_f16_to_f32((uint16_t)(h + 1))) / 2.0);
    }
    case 12: { /* low 16 bits exactly 0x8000: a bf16 tie; exponent up to the 2^14 binade */
        uint32_t e = (uint32_t)(rng_next(r) % 0x8Eu), m = (uint32_t)(rng_next(r) % 128u);
        return sign * oracle_f32_from_bits((e << 23) | (m << 16) | 0x8000u);
    }
    case 13: return sign * near_max[rng_next(r) % (sizeof near_max / sizeof near_max[0])];
    case 14: return sign * (float)ldexp(1.0 + rng_unit(r), (int)(rng_next(r) % 55u) - 40);
    case 15: return (float)((rng_unit(r) + rng_unit(r) + rng_unit(r) + rng_unit(r) - 2.0) * span);
    default: return (float)((rng_unit(r) * 6.0 - 3.0) * span);
    }
}

static void *xalloc(size_t bytes)
{
    void *p = ga_malloc(bytes);
    assert_non_null(p);
    return p;
}

static float *gen_array(uint64_t seed, size_t n, float t)
{
    rng r = {seed};
    float *x = xalloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = gen_value(&r, t);
    return x;
}

static void *dup(const void *src, size_t bytes)
{
    void *p = xalloc(bytes);
    if (bytes) memcpy(p, src, bytes);
    return p;
}

/* memcmp, and on a difference report the first differing byte and fail. */
#define assert_same_bytes(a, b, len, ...) same_bytes((a), (b), (len), __FILE__, __LINE__, __VA_ARGS__)
static void same_bytes(const void *a, const void *b, size_t len, const char *file, int line, const char *fmt, ...)
{
    if (len == 0 || memcmp(a, b, len) == 0) return;
    const uint8_t *x = a, *y = b;
    size_t i = 0;
    while (x[i] == y[i]) i++;
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    print_error("%s:%d: %s: first difference at byte %zu (float/u16 element %zu/%zu): got 0x%02x, expected "
                   "0x%02x\n",
                   file, line, what, i, i / 4, i / 2, x[i], y[i]);
    _fail(file, line);
}

static int simd_levels(ga_simd out[3])
{
    int count = 0;
    for (int s = GA_SIMD_SCALAR; s <= GA_SIMD_AVX512; s++)
        if (s <= (int)ga_cpu_simd()) out[count++] = (ga_simd)s;
    return count;
}

static ga_codec_params params_for(ga_codec_id codec, float t)
{
    ga_codec_params p = ga_codec_params_default(codec);
    p.threshold = t;
    return p;
}

/* Thresholds a codec is tried with: the MXNet defaults and a few others. */
static int thresholds_for(ga_codec_id codec, float out[3])
{
    switch (codec) {
    case GA_CODEC_2BIT:
        out[0] = 0.5f, out[1] = 0.0078125f, out[2] = 3e-3f;
        return 3;
    case GA_CODEC_1BIT:
        out[0] = 0.0f, out[1] = -0.25f, out[2] = 0.75f;
        return 3;
    default: out[0] = 0.5f; return 1;
    }
}

/* ---- every codec against the oracle ---- */

static void check_encode_decode(ga_codec_id codec, float t, size_t n, uint64_t seed)
{
    const char *name = ga_codec_name(codec);
    bool has_res = ga_codec_has_residual(codec);
    ga_codec_params p = params_for(codec, t);
    size_t bytes = oracle_encoded_size(codec, n);
    float *grad = gen_array(seed, n, t);
    float *res0 = gen_array(seed + 1, n, t);
    float *sum0 = gen_array(seed + 2, n, 1.0f);

    uint8_t *want_out = xalloc(bytes);
    float *want_res = dup(res0, n * sizeof(float));
    float *want_sum = dup(sum0, n * sizeof(float));
    assert_int_equal(oracle_encode(codec, t, grad, want_res, n, want_out), GA_OK);
    assert_int_equal(oracle_decode_add(codec, t, want_out, bytes, n, want_sum), GA_OK);

    uint8_t *out = xalloc(bytes);
    float *res = xalloc(n * sizeof(float));
    float *sum = xalloc(n * sizeof(float));
    ga_simd levels[3];
    int n_levels = simd_levels(levels);
    for (size_t tc = 0; tc < sizeof thread_caps / sizeof thread_caps[0]; tc++) {
        for (int l = 0; l < n_levels; l++) {
            ga_exec ex = {GA_BACKEND_CPU, thread_caps[tc], levels[l], NULL};
            if (n) memcpy(res, res0, n * sizeof(float));
            if (bytes) memset(out, 0xA5, bytes);
            size_t out_len = 12345;
            assert_int_equal(ga_codec_encode(&ex, codec, &p, grad, has_res ? res : NULL, n, out, bytes, &out_len),
                             GA_OK);
            assert_int_equal(out_len, bytes);
            assert_same_bytes(out, want_out, bytes, "%s encode payload, t=%g n=%zu threads=%d simd=%s", name, t, n,
                              thread_caps[tc], ga_simd_name(levels[l]));
            if (has_res)
                assert_same_bytes(res, want_res, n * sizeof(float), "%s residual, t=%g n=%zu threads=%d simd=%s",
                                  name, t, n, thread_caps[tc], ga_simd_name(levels[l]));

            if (n) memcpy(sum, sum0, n * sizeof(float));
            assert_int_equal(ga_codec_decode_add(&ex, codec, &p, want_out, bytes, n, sum), GA_OK);
            assert_same_bytes(sum, want_sum, n * sizeof(float), "%s decode_add sum, t=%g n=%zu threads=%d simd=%s",
                              name, t, n, thread_caps[tc], ga_simd_name(levels[l]));
        }
    }
    ga_free(grad), ga_free(res0), ga_free(sum0), ga_free(want_out), ga_free(want_res), ga_free(want_sum);
    ga_free(out), ga_free(res), ga_free(sum);
}

/* 2bit with a selection threshold apart from the level sent (the automatic threshold's mean
 * level): every SIMD path and thread count gives the oracle's bytes and residual, the payload
 * decodes to +-level, and select 0 is MXNet's encode. */
static void test_2bit_select(void **state)
{
    (void)state;
    static const float pairs[][2] = {{0.3f, 0.5f}, {0.5f, 0.3f}, {0.5f, 0.5f}, {1e-3f, 4.5e-3f}};
    static const size_t ns[] = {1, 15, 17, 33, 4099, 100003};
    ga_simd levels[3];
    int n_levels = simd_levels(levels);
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        float select = pairs[k][0], level = pairs[k][1];
        for (size_t l = 0; l < sizeof ns / sizeof ns[0]; l++) {
            size_t n = ns[l], bytes = oracle_encoded_size(GA_CODEC_2BIT, n);
            float *grad = gen_array(40 + l, n, select), *res0 = gen_array(50 + l, n, select);
            uint8_t *want = xalloc(bytes), *out = xalloc(bytes);
            float *want_res = dup(res0, n * sizeof(float)), *res = xalloc(n * sizeof(float));
            oracle_encode_2bit(select, level, grad, want_res, n, want);
            ga_codec_params p = params_for(GA_CODEC_2BIT, level);
            p.select = select;
            for (size_t tc = 0; tc < sizeof thread_caps / sizeof thread_caps[0]; tc++)
                for (int s = 0; s < n_levels; s++) {
                    ga_exec ex = {GA_BACKEND_CPU, thread_caps[tc], levels[s], NULL};
                    memcpy(res, res0, n * sizeof(float));
                    size_t len = 0;
                    assert_int_equal(ga_codec_encode(&ex, GA_CODEC_2BIT, &p, grad, res, n, out, bytes, &len), GA_OK);
                    assert_int_equal(len, bytes);
                    assert_same_bytes(out, want, bytes, "2bit select %g level %g n=%zu simd=%s", select, level, n,
                                      ga_simd_name(levels[s]));
                    assert_same_bytes(res, want_res, n * sizeof(float), "2bit select residual n=%zu simd=%s", n,
                                      ga_simd_name(levels[s]));
                }
            /* What was sent decodes to +-level, and residual + sent is what went in. */
            float *sum = xalloc(n * sizeof(float));
            memset(sum, 0, n * sizeof(float));
            assert_int_equal(ga_codec_decode_add(&(ga_exec){GA_BACKEND_CPU, 1, GA_SIMD_SCALAR, NULL}, GA_CODEC_2BIT, &p,
                                                 want, bytes, n, sum), GA_OK);
            size_t sent = 0;
            for (size_t i = 0; i < n; i++) {
                float v = res0[i] + grad[i];
                assert_true(sum[i] == 0.0f || fabsf(sum[i]) == level);
                assert_true(sum[i] == 0.0f ? fabsf(v) < select : fabsf(v) >= select && (sum[i] > 0) == (v > 0));
                assert_true(want_res[i] == v - sum[i]);
                sent += sum[i] != 0.0f;
            }
            if (n > 1000) assert_true(sent > 0 && sent < n);
            ga_free(grad), ga_free(res0), ga_free(want), ga_free(out), ga_free(want_res), ga_free(res), ga_free(sum);
        }
    }
    /* select 0 selects at the threshold: MXNet's bytes. */
    ga_codec_params p = params_for(GA_CODEC_2BIT, 0.5f), q = p;
    q.select = 0.5f;
    float g[40], r1[40] = {0}, r2[40] = {0};
    uint8_t a[12], b[12];
    for (int i = 0; i < 40; i++) g[i] = (float)(i - 20) * 0.05f;
    ga_exec ex = {GA_BACKEND_CPU, 1, GA_SIMD_SCALAR, NULL};
    size_t la, lb;
    assert_int_equal(ga_codec_encode(&ex, GA_CODEC_2BIT, &p, g, r1, 40, a, sizeof a, &la), GA_OK);
    assert_int_equal(ga_codec_encode(&ex, GA_CODEC_2BIT, &q, g, r2, 40, b, sizeof b, &lb), GA_OK);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_equal(r1, r2, sizeof r1);
    /* A select that is negative, NaN or infinite is refused. */
    static const float bad[] = {-0.5f, NAN, INFINITY};
    for (size_t k = 0; k < 3; k++) {
        q.select = bad[k];
        assert_int_equal(ga_codec_params_validate(GA_CODEC_2BIT, &q), GA_E_THRESHOLD);
        assert_int_equal(ga_codec_encode(&ex, GA_CODEC_2BIT, &q, g, r2, 40, b, sizeof b, &lb), GA_E_THRESHOLD);
    }
}

/* Random valid payloads, not only encoder output: every 2-bit code (01 included), stray bits
 * past n in the last word, any finite half, any finite non-negative scale. */
static void random_payload(ga_codec_id codec, size_t n, uint64_t seed, uint8_t *payload)
{
    rng r = {seed};
    size_t bytes = oracle_encoded_size(codec, n);
    for (size_t b = 0; b < bytes; b++) payload[b] = (uint8_t)rng_next(&r);
    if (codec == GA_CODEC_NONE) {
        for (size_t i = 0; i < n; i++) {
            float v = gen_value(&r, 1.0f);
            memcpy(payload + 4 * i, &v, 4);
        }
    } else if (codec == GA_CODEC_FP16 || codec == GA_CODEC_BF16) {
        uint16_t exp_mask = codec == GA_CODEC_FP16 ? 0x7C00u : 0x7F80u;
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            do h = (uint16_t)rng_next(&r);
            while ((h & exp_mask) == exp_mask); /* any finite pattern */
            payload[2 * i] = (uint8_t)h, payload[2 * i + 1] = (uint8_t)(h >> 8);
        }
    } else if (codec == GA_CODEC_1BIT_SCALED) {
        for (size_t b = 0; b < (n + 1023) / 1024; b++) {
            float s = fabsf(gen_value(&r, 1.0f));
            memcpy(payload + 4 * b, &s, 4);
        }
    } else if (codec == GA_CODEC_INT8 || codec == GA_CODEC_INT4) { /* every code, -128 / -8 included */
        size_t block_bytes = codec == GA_CODEC_INT8 ? 68 : 36;
        for (size_t b = 0; b < (n + 63) / 64; b++) {
            float s = fabsf(gen_value(&r, 1.0f));
            memcpy(payload + block_bytes * b, &s, 4);
        }
    }
}

static void check_decode_random(ga_codec_id codec, float t, size_t n, uint64_t seed)
{
    ga_codec_params p = params_for(codec, t);
    size_t bytes = oracle_encoded_size(codec, n);
    uint8_t *payload = xalloc(bytes);
    random_payload(codec, n, seed, payload);
    float *sum0 = gen_array(seed + 1, n, 1.0f);
    float *want = dup(sum0, n * sizeof(float));
    assert_int_equal(oracle_decode_add(codec, t, payload, bytes, n, want), GA_OK);
    float *sum = xalloc(n * sizeof(float));
    ga_simd levels[3];
    int n_levels = simd_levels(levels);
    for (size_t tc = 0; tc < sizeof thread_caps / sizeof thread_caps[0]; tc++) {
        for (int l = 0; l < n_levels; l++) {
            ga_exec ex = {GA_BACKEND_CPU, thread_caps[tc], levels[l], NULL};
            if (n) memcpy(sum, sum0, n * sizeof(float));
            assert_int_equal(ga_codec_decode_add(&ex, codec, &p, payload, bytes, n, sum), GA_OK);
            assert_same_bytes(sum, want, n * sizeof(float), "%s decode_add of a random payload, t=%g n=%zu "
                              "threads=%d simd=%s", ga_codec_name(codec), t, n, thread_caps[tc],
                              ga_simd_name(levels[l]));
            if (n) memcpy(sum, sum0, n * sizeof(float));
            assert_int_equal(ga_codec_decode_add_checked(&ex, codec, &p, payload, bytes, n, sum), GA_OK);
            assert_same_bytes(sum, want, n * sizeof(float), "%s decode_add_checked of a random payload, t=%g n=%zu "
                              "threads=%d simd=%s", ga_codec_name(codec), t, n, thread_caps[tc],
                              ga_simd_name(levels[l]));
        }
    }
    ga_free(payload), ga_free(sum0), ga_free(want), ga_free(sum);
}

static void test_oracle(void **state)
{
    ga_codec_id codec = *(const ga_codec_id *)*state;
    float ts[3];
    int n_ts = thresholds_for(codec, ts);
    for (int k = 0; k < n_ts; k++) {
        for (size_t l = 0; l < N_LENGTHS; l++) {
            /* Every length for the default threshold; the big one once per codec. */
            if (k > 0 && lengths[l] > 100000) continue;
            uint64_t seed = 1000u * (uint64_t)codec + 10u * l + (uint64_t)k;
            check_encode_decode(codec, ts[k], lengths[l], seed);
            check_decode_random(codec, ts[k], lengths[l], seed + 7);
        }
    }
    /* Block boundaries: a full block, one past it, a partial last block (odd for int4). */
    if (codec == GA_CODEC_1BIT_SCALED) {
        static const size_t block_edges[] = {1023, 1024, 1025, 2048 + 31, 32768 + 1024 + 5};
        for (size_t l = 0; l < sizeof block_edges / sizeof block_edges[0]; l++) {
            check_encode_decode(codec, 0.5f, block_edges[l], 777 + l);
            check_decode_random(codec, 0.5f, block_edges[l], 888 + l);
        }
    }
    if (codec == GA_CODEC_INT8 || codec == GA_CODEC_INT4) {
        static const size_t block_edges[] = {63, 64, 65, 64 * 3 + 3, 32768 + 64 + 7};
        for (size_t l = 0; l < sizeof block_edges / sizeof block_edges[0]; l++) {
            check_encode_decode(codec, 0.5f, block_edges[l], 777 + l);
            check_decode_random(codec, 0.5f, block_edges[l], 888 + l);
        }
    }
}

/* ---- residual carry-over: the residual persists across steps and equals the oracle's ---- */

static void test_residual_carry(void **state)
{
    (void)state;
    enum { STEPS = 5 };
    const size_t n = 70001; /* three tiles of 32768, the last partial */
    for (size_t c = 0; c < N_CODECS; c++) {
        ga_codec_id codec = codecs[c];
        if (!ga_codec_has_residual(codec)) continue;
        float t = codec == GA_CODEC_1BIT ? 0.0f : 0.5f;
        ga_codec_params p = params_for(codec, t);
        size_t bytes = oracle_encoded_size(codec, n);
        ga_exec runs[2] = {{GA_BACKEND_CPU, 2, GA_SIMD_AUTO, NULL}, {GA_BACKEND_CPU, 1, GA_SIMD_SCALAR, NULL}};
        for (int run = 0; run < 2; run++) {
            float *res = xalloc(n * sizeof(float)), *want_res = xalloc(n * sizeof(float));
            float *sum = xalloc(n * sizeof(float)), *want_sum = xalloc(n * sizeof(float));
            memset(res, 0, n * sizeof(float)), memset(want_res, 0, n * sizeof(float));
            memset(sum, 0, n * sizeof(float)), memset(want_sum, 0, n * sizeof(float));
            uint8_t *out = xalloc(bytes), *want_out = xalloc(bytes);
            for (int step = 0; step < STEPS; step++) {
                float *grad = gen_array(5000u + 10u * c + (uint64_t)step, n, t);
                size_t out_len = 0;
                assert_int_equal(ga_codec_encode(&runs[run], codec, &p, grad, res, n, out, bytes, &out_len), GA_OK);
                assert_int_equal(oracle_encode(codec, t, grad, want_res, n, want_out), GA_OK);
                assert_same_bytes(out, want_out, bytes, "%s payload at step %d", ga_codec_name(codec), step);
                assert_same_bytes(res, want_res, n * sizeof(float), "%s residual after step %d",
                                  ga_codec_name(codec), step);
                assert_int_equal(ga_codec_decode_add(&runs[run], codec, &p, out, out_len, n, sum), GA_OK);
                assert_int_equal(oracle_decode_add(codec, t, want_out, bytes, n, want_sum), GA_OK);
                assert_same_bytes(sum, want_sum, n * sizeof(float), "%s running sum after step %d",
                                  ga_codec_name(codec), step);
                ga_free(grad);
            }
            ga_free(res), ga_free(want_res), ga_free(sum), ga_free(want_sum), ga_free(out), ga_free(want_out);
        }
    }
}

/* ---- error feedback: sum of decoded outputs + final residual == sum of inputs ----
 * Exactly, each step does r' = (r + g) - d. In float, each step rounds twice: v = fl(r + g)
 * (error <= 2^-24 |v|) and r' = fl(v - d) (error <= 2^-24 |r'|), and |v| <= (|r| + |g|)(1 +
 * 2^-24). So per element |sum d + r_T - sum g| <= 2^-23 * sum over steps of (|r| + |g| + |r'|),
 * where sums of d and g are taken in double. The double sums themselves err by at most
 * STEPS * 2^-53 * (sum of magnitudes); 2^-48 covers that. This is a bound, not an estimate: a
 * residual that is dropped, doubled or not carried misses it by about t. */
static void test_error_feedback(void **state)
{
    (void)state;
    enum { STEPS = 8 };
    const size_t n = 4099; /* five 1bit_scaled blocks, the last partial */
    for (size_t c = 0; c < N_CODECS; c++) {
        ga_codec_id codec = codecs[c];
        if (!ga_codec_has_residual(codec)) continue;
        float t = codec == GA_CODEC_1BIT ? 0.0f : 0.5f;
        ga_codec_params p = params_for(codec, t);
        ga_exec ex = GA_EXEC_CPU_INIT;
        size_t bytes = oracle_encoded_size(codec, n);
        uint8_t *out = xalloc(bytes);
        float *res = xalloc(n * sizeof(float)), *dec = xalloc(n * sizeof(float)), *grad = xalloc(n * sizeof(float));
        double *sum_g = xalloc(n * sizeof(double)), *sum_d = xalloc(n * sizeof(double));
        double *tol = xalloc(n * sizeof(double)), *mag = xalloc(n * sizeof(double));
        for (size_t i = 0; i < n; i++) res[i] = 0.0f, sum_g[i] = sum_d[i] = tol[i] = mag[i] = 0.0;
        rng r = {9000u + c};
        for (int step = 0; step < STEPS; step++) {
            for (size_t i = 0; i < n; i++) /* roughly N(0, 1) times the codec's step size */
                grad[i] = (float)((rng_unit(&r) + rng_unit(&r) + rng_unit(&r) + rng_unit(&r) - 2.0) * 1.7 *
                                  (codec == GA_CODEC_2BIT ? t : 1.0));
            for (size_t i = 0; i < n; i++) tol[i] += fabs(res[i]) + fabs(grad[i]);
            size_t out_len = 0;
            assert_int_equal(ga_codec_encode(&ex, codec, &p, grad, res, n, out, bytes, &out_len), GA_OK);
            memset(dec, 0, n * sizeof(float));
            assert_int_equal(ga_codec_decode_add(&ex, codec, &p, out, out_len, n, dec), GA_OK);
            for (size_t i = 0; i < n; i++) {
                tol[i] += fabs(res[i]);
                sum_g[i] += grad[i];
                sum_d[i] += dec[i];
                mag[i] += fabs(grad[i]) + fabs(dec[i]);
            }
        }
        for (size_t i = 0; i < n; i++) {
            double gap = fabs(sum_d[i] + (double)res[i] - sum_g[i]);
            double bound = 0x1p-23 * tol[i] + 0x1p-48 * (mag[i] + fabs(res[i]));
            if (gap > bound) {
                print_error("%s element %zu: sum decoded %.17g + residual %.9g != sum inputs %.17g (gap %.3g > "
                               "bound %.3g)\n",
                               ga_codec_name(codec), i, sum_d[i], (double)res[i], sum_g[i], gap, bound);
                fail();
            }
        }
        ga_free(out), ga_free(res), ga_free(dec), ga_free(grad), ga_free(sum_g), ga_free(sum_d), ga_free(tol),
            ga_free(mag);
    }
}

/* ---- determinism: 1 000 003 elements encode to identical bytes on 1, 2 and all threads ---- */

static void test_thread_determinism(void **state)
{
    (void)state;
    const size_t n = 1000003;
    static const int caps[] = {1, 2, 0};
    for (size_t c = 0; c < N_CODECS; c++) {
        ga_codec_id codec = codecs[c];
        bool has_res = ga_codec_has_residual(codec);
        ga_codec_params p = ga_codec_params_default(codec);
        size_t bytes = oracle_encoded_size(codec, n);
        float *grad = gen_array(7000u + c, n, p.threshold);
        float *res0 = gen_array(7100u + c, n, p.threshold);
        uint8_t *first_out = NULL;
        float *first_res = NULL, *first_sum = NULL;
        for (size_t k = 0; k < sizeof caps / sizeof caps[0]; k++) {
            ga_exec ex = {GA_BACKEND_CPU, caps[k], GA_SIMD_AUTO, NULL};
            uint8_t *out = xalloc(bytes);
            float *res = dup(res0, n * sizeof(float));
            float *sum = gen_array(7200u + c, n, 1.0f);
            size_t out_len = 0;
            assert_int_equal(ga_codec_encode(&ex, codec, &p, grad, has_res ? res : NULL, n, out, bytes, &out_len),
                             GA_OK);
            assert_int_equal(out_len, bytes);
            assert_int_equal(ga_codec_decode_add(&ex, codec, &p, out, out_len, n, sum), GA_OK);
            if (k == 0) {
                first_out = out, first_res = res, first_sum = sum;
                continue;
            }
            assert_same_bytes(out, first_out, bytes, "%s payload, max_threads %d vs 1", ga_codec_name(codec), caps[k]);
            assert_same_bytes(res, first_res, n * sizeof(float), "%s residual, max_threads %d vs 1",
                              ga_codec_name(codec), caps[k]);
            assert_same_bytes(sum, first_sum, n * sizeof(float), "%s sum, max_threads %d vs 1", ga_codec_name(codec),
                              caps[k]);
            ga_free(out), ga_free(res), ga_free(sum);
        }
        ga_free(first_out), ga_free(first_res), ga_free(first_sum), ga_free(grad), ga_free(res0);
    }
}

/* ---- exhaustive fp16 / bf16 sweeps ---- */

/* Encodes x with the library at every thread cap and SIMD level; compares with the oracle. */
static void check_dense_encode(ga_codec_id codec, const float *x, size_t n, const char *what)
{
    size_t bytes = 2 * n;
    uint8_t *want = xalloc(bytes), *out = xalloc(bytes);
    assert_int_equal(oracle_encode(codec, 0.0f, x, NULL, n, want), GA_OK);
    ga_codec_params p = ga_codec_params_default(codec);
    ga_simd levels[3];
    int n_levels = simd_levels(levels);
    for (size_t tc = 0; tc < sizeof thread_caps / sizeof thread_caps[0]; tc++) {
        for (int l = 0; l < n_levels; l++) {
            ga_exec ex = {GA_BACKEND_CPU, thread_caps[tc], levels[l], NULL};
            size_t out_len = 0;
            assert_int_equal(ga_codec_encode(&ex, codec, &p, x, NULL, n, out, bytes, &out_len), GA_OK);
            assert_same_bytes(out, want, bytes, "%s %s, threads=%d simd=%s", ga_codec_name(codec), what,
                              thread_caps[tc], ga_simd_name(levels[l]));
        }
    }
    ga_free(want), ga_free(out);
}

/* Decodes every finite 16-bit pattern into a sum of -0 (so sum == decoded value, sign of zero
 * included) and compares with the oracle's conversion. */
static void check_dense_decode_all(ga_codec_id codec)
{
    uint16_t *h = xalloc(65536 * sizeof *h);
    float *want = xalloc(65536 * sizeof(float)), *sum = xalloc(65536 * sizeof(float));
    size_t n = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        float v = codec == GA_CODEC_FP16 ? oracle_f16_to_f32((uint16_t)b) : oracle_bf16_to_f32((uint16_t)b);
        if (!isfinite(v)) continue;
        h[n] = (uint16_t)b, want[n] = v, n++;
    }
    assert_int_equal(n, codec == GA_CODEC_FP16 ? 2 * 31 * 1024 : 2 * 255 * 128);
    ga_codec_params p = ga_codec_params_default(codec);
    ga_simd levels[3];
    int n_levels = simd_levels(levels);
    for (size_t tc = 0; tc < sizeof thread_caps / sizeof thread_caps[0]; tc++) {
        for (int l = 0; l < n_levels; l++) {
            ga_exec ex = {GA_BACKEND_CPU, thread_caps[tc], levels[l], NULL};
            for (size_t i = 0; i < n; i++) sum[i] = -0.0f;
            assert_int_equal(ga_codec_decode_add(&ex, codec, &p, h, 2 * n, n, sum), GA_OK);
            assert_same_bytes(sum, want, n * sizeof(float), "%s decode of every finite pattern, threads=%d simd=%s",
                              ga_codec_name(codec), thread_caps[tc], ga_simd_name(levels[l]));
        }
    }
    ga_free(h), ga_free(want), ga_free(sum);
}

/* Float bit patterns spread over the whole range: a prime stride through all 2^32. */
static size_t strided_floats(float *x, float limit)
{
    size_t n = 0;
    for (uint64_t u = 12345; u < 0x100000000ull; u += 65521) {
        float f = oracle_f32_from_bits((uint32_t)u);
        if (isfinite(f) && fabsf(f) < limit) x[n++] = f;
    }
    return n;
}

static void test_fp16_sweep(void **state)
{
    (void)state;
    /* The oracle itself: every finite half survives the round trip through float. */
    for (uint32_t b = 0; b < 65536; b++)
        if (((b >> 10) & 31) != 31) assert_int_equal(oracle_f32_to_f16(oracle_f16_to_f32((uint16_t)b)), b);
    check_dense_decode_all(GA_CODEC_FP16);

    /* Every finite half, every midpoint between neighbours (a tie) and the floats either side. */
    float *x = xalloc(6 * 0x7C00 * sizeof(float) + 70000 * sizeof(float));
    size_t n = 0;
    for (uint32_t b = 0; b < 0x7C00; b++) {
        double lo = oracle_f16_to_f32((uint16_t)b);
        for (int s = 0; s < 2; s++) {
            float sign = s ? -1.0f : 1.0f;
            x[n++] = sign * (float)lo;
            if (b == 0x7BFF) continue; /* the next one up is Inf */
            float mid = (float)((lo + (double)oracle_f16_to_f32((uint16_t)(b + 1))) / 2.0);
            x[n++] = sign * mid;
            x[n++] = sign * nextafterf(mid, 0.0f);
            x[n++] = sign * nextafterf(mid, INFINITY);
        }
    }
    check_dense_encode(GA_CODEC_FP16, x, n, "encode of halves, ties and their neighbours");
    n = strided_floats(x, 65520.0f);
    check_dense_encode(GA_CODEC_FP16, x, n, "encode of strided float patterns");
    ga_free(x);
}

static void test_bf16_sweep(void **state)
{
    (void)state;
    check_dense_decode_all(GA_CODEC_BF16);

    /* For every finite bf16 b: b itself, the tie above it (low half 0x8000) and the float either
     * side of that tie, and the largest float that truncates to b. The largest finite bf16 has
     * no finite tie above it. */
    float *x = xalloc(10 * 0x7F80 * sizeof(float) + 70000 * sizeof(float));
    size_t n = 0;
    static const uint32_t lows[] = {0x0000u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu};
    for (uint32_t b = 0; b < 0x7F80; b++) {
        for (size_t k = 0; k < sizeof lows / sizeof lows[0]; k++) {
            if (b == 0x7F7F && lows[k] >= 0x8000u) continue;
            float f = oracle_f32_from_bits((b << 16) | lows[k]);
            x[n++] = f;
            x[n++] = -f;
        }
    }
    check_dense_encode(GA_CODEC_BF16, x, n, "encode of bf16 values, ties and their neighbours");
    n = strided_floats(x, 3.0e38f);
    check_dense_encode(GA_CODEC_BF16, x, n, "encode of strided float patterns");
    ga_free(x);
}

/* ---- sizes ---- */

/* Payloads of 8 MiB and more are written with non-temporal stores (codec_dense.c): a size past
 * that threshold, whose tiles all take that path, must give the oracle's bytes too. */
static void test_dense_streaming(void **state)
{
    (void)state;
    size_t n = (9u << 20) / 2; /* 9 MiB of fp16/bf16 */
    float *x = xalloc(n * sizeof *x);
    rng r = {0x5eed5};
    for (size_t i = 0; i < n; i++) x[i] = (float)((rng_unit(&r) * 2.0 - 1.0) * 1000.0);
    check_dense_encode(GA_CODEC_FP16, x, n, "9 MiB payload");
    check_dense_encode(GA_CODEC_BF16, x, n, "9 MiB payload");
    ga_free(x);
}

static void test_encoded_size(void **state)
{
    (void)state;
    static const size_t ns[] = {0, 1, 15, 16, 17, 31, 32, 33, 1023, 1024, 1025, 1000003, (size_t)1 << 40};
    for (size_t c = 0; c < N_CODECS; c++) {
        ga_codec_params p = ga_codec_params_default(codecs[c]);
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            size_t bytes = 0;
            assert_int_equal(ga_codec_encoded_size(codecs[c], &p, ns[k], &bytes), GA_OK);
            assert_int_equal(bytes, oracle_encoded_size(codecs[c], ns[k]));
        }
        size_t bytes = 77;
        assert_int_equal(ga_codec_encoded_size(codecs[c], &p, SIZE_MAX, &bytes), GA_E_TOO_LARGE);
        assert_int_equal(bytes, 77);
        assert_int_equal(ga_codec_encoded_size(codecs[c], &p, 16, NULL), GA_E_INVAL);
        assert_true(ga_codec_fixed_size(codecs[c]));
    }
}

/* A range of an in-order codec's payload decodes to exactly that range of the whole decode (the
 * oracle's), for random payloads with stray bits past n; the codecs that keep their elements
 * elsewhere, unaligned starts and ranges past n are refused. */
/* ga_check_finite: NaN, both infinities and the extremes of the finite range, at the first, a
 * middle and the last element of inputs that span several SIMD blocks and both threads' tiles,
 * at every SIMD level; nothing else is written. */
static void test_check_finite(void **state)
{
    (void)state;
    enum { N = 3 * 4096 + 29 };
    static const float bad[] = {NAN, INFINITY, -INFINITY};
    static const float good[] = {FLT_MAX, -FLT_MAX, FLT_MIN, -0.0f, 1e-45f};
    float *x = xalloc(N * sizeof(float));
    for (size_t i = 0; i < N; i++) x[i] = (float)i - 1000.5f;
    ga_simd levels[3];
    int n_levels = simd_levels(levels);
    for (size_t tc = 0; tc < sizeof thread_caps / sizeof thread_caps[0]; tc++) {
        for (int l = 0; l < n_levels; l++) {
            ga_exec ex = {GA_BACKEND_CPU, thread_caps[tc], levels[l], NULL};
            assert_int_equal(ga_check_finite(&ex, x, N), GA_OK);
            assert_int_equal(ga_check_finite(&ex, NULL, 0), GA_OK);
            static const size_t at[] = {0, N / 2 + 3, N - 1};
            for (size_t a = 0; a < sizeof at / sizeof at[0]; a++) {
                float keep = x[at[a]];
                for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
                    x[at[a]] = bad[b];
                    assert_int_equal(ga_check_finite(&ex, x, N), GA_E_NONFINITE);
                    /* Not in the scanned range: not seen. */
                    if (at[a] == N - 1) assert_int_equal(ga_check_finite(&ex, x, N - 1), GA_OK);
                }
                for (size_t g = 0; g < sizeof good / sizeof good[0]; g++) {
                    x[at[a]] = good[g];
                    assert_int_equal(ga_check_finite(&ex, x, N), GA_OK);
                }
                x[at[a]] = keep;
            }
        }
    }
    assert_int_equal(ga_check_finite(&(ga_exec)GA_EXEC_CPU_INIT, NULL, 1), GA_E_INVAL);
    ga_free(x);
}

/* The checked decode skips the scan of a dense payload's values (a NaN is added, not refused),
 * and keeps the length check. */
static void test_decode_checked_skips_values(void **state)
{
    (void)state;
    enum { N = 1000 };
    static const ga_codec_id dense[] = {GA_CODEC_NONE, GA_CODEC_FP16, GA_CODEC_BF16};
    ga_exec ex = GA_EXEC_CPU_INIT;
    for (size_t c = 0; c < sizeof dense / sizeof dense[0]; c++) {
        ga_codec_params p = ga_codec_params_default(dense[c]);
        size_t bytes = oracle_encoded_size(dense[c], N);
        uint8_t *payload = xalloc(bytes);
        memset(payload, 0, bytes);
        memset(payload + bytes / 2, 0xFF, 4); /* NaN in any of the three */
        float *sum = xalloc(N * sizeof(float));
        memset(sum, 0, N * sizeof(float));
        assert_int_equal(ga_codec_decode_add(&ex, dense[c], &p, payload, bytes, N, sum), GA_E_NONFINITE);
        assert_int_equal(ga_codec_decode_add_checked(&ex, dense[c], &p, payload, bytes - 4, N, sum), GA_E_LENGTH);
        assert_int_equal(ga_codec_decode_add_checked(&ex, dense[c], &p, payload, bytes, N, sum), GA_OK);
        size_t nan = 0;
        for (size_t i = 0; i < N; i++) nan += isnan(sum[i]);
        assert_true(nan >= 1 && nan <= 2);
        ga_free(payload), ga_free(sum);
    }
}

static void test_payload_range(void **state)
{
    (void)state;
    enum { N = 5 * GA_CODEC_RANGE_ALIGN + 37 };
    static const size_t starts[] = {0, GA_CODEC_RANGE_ALIGN, 3 * GA_CODEC_RANGE_ALIGN};
    for (size_t c = 0; c < N_CODECS; c++) {
        ga_codec_id codec = codecs[c];
        ga_codec_params p = params_for(codec, 0.5f);
        size_t bytes = oracle_encoded_size(codec, N), off = 0, len = 0;
        if (!ga_codec_in_order(codec)) {
            assert_int_equal(codec, GA_CODEC_1BIT_SCALED);
            assert_int_equal(ga_codec_payload_range(codec, &p, N, 0, N, &off, &len), GA_E_INVAL);
            continue;
        }
        uint8_t *payload = xalloc(bytes);
        random_payload(codec, N, 40 + c, payload);
        float *want = xalloc(N * sizeof(float)), *got = xalloc(N * sizeof(float));
        memset(want, 0, N * sizeof(float));
        assert_int_equal(oracle_decode_add(codec, 0.5f, payload, bytes, N, want), GA_OK);
        for (size_t s = 0; s < sizeof starts / sizeof starts[0]; s++) {
            size_t lo = starts[s], m = N - lo - (s == 1 ? GA_CODEC_RANGE_ALIGN : 0); /* one ends before n */
            assert_int_equal(ga_codec_payload_range(codec, &p, N, lo, m, &off, &len), GA_OK);
            assert_true(off + len <= bytes);
            memset(got, 0, m * sizeof(float));
            const ga_exec cpu = GA_EXEC_CPU_INIT;
            assert_int_equal(ga_codec_decode_add(&cpu, codec, &p, payload + off, len, m, got), GA_OK);
            assert_same_bytes(got, want + lo, m * sizeof(float), "%s elements [%zu, %zu) of %d", ga_codec_name(codec),
                              lo, lo + m, N);
        }
        assert_int_equal(ga_codec_payload_range(codec, &p, N, 16, 32, &off, &len), GA_E_INVAL);
        assert_int_equal(ga_codec_payload_range(codec, &p, N, GA_CODEC_RANGE_ALIGN, N, &off, &len), GA_E_INVAL);
        assert_int_equal(ga_codec_payload_range(codec, &p, N, 2 * N, 0, &off, &len), GA_E_INVAL);
        ga_free(payload), ga_free(want), ga_free(got);
    }
    ga_codec_params topk = ga_codec_params_default(GA_CODEC_TOPK);
    size_t off, len;
    assert_false(ga_codec_in_order(GA_CODEC_TOPK));
    assert_int_equal(ga_codec_payload_range(GA_CODEC_TOPK, &topk, 4096, 0, 1024, &off, &len), GA_E_INVAL);
}

/* ---- group fixtures: the tests leave the accounted allocator where they found it ---- */

int main(void)
{
    test_memory_baseline();
    if (ga_cpu_simd() < GA_SIMD_AVX512)
        fprintf(stderr, "note: this CPU tops out at %s; higher SIMD levels are not tested\n",
                ga_simd_name(ga_cpu_simd()));
    const struct CMUnitTest tests[] = {
#define ORACLE_TEST(name, k) {"oracle_" name, test_oracle, NULL, NULL, (void *)&codecs[k]}
        ORACLE_TEST("none", 0), ORACLE_TEST("fp16", 1), ORACLE_TEST("bf16", 2),
        ORACLE_TEST("2bit", 3), ORACLE_TEST("1bit", 4), ORACLE_TEST("1bit_scaled", 5),
        ORACLE_TEST("int8", 6), ORACLE_TEST("int4", 7),
#undef ORACLE_TEST
        cmocka_unit_test(test_residual_carry),
        cmocka_unit_test(test_2bit_select),
        cmocka_unit_test(test_error_feedback),
        cmocka_unit_test(test_thread_determinism),
        cmocka_unit_test(test_fp16_sweep),
        cmocka_unit_test(test_bf16_sweep),
        cmocka_unit_test(test_dense_streaming),
        cmocka_unit_test(test_encoded_size),
        cmocka_unit_test(test_check_finite),
        cmocka_unit_test(test_payload_range),
        cmocka_unit_test(test_decode_checked_skips_values),
        cmocka_unit_test(test_host_memory_returned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
