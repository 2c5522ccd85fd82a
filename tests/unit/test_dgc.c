/* The SDK's pure logic: chunk planning (alignment, coverage, payload size), the DGC warm-up
 * schedule, gradient clipping, and momentum correction with factor masking over several steps
 * against a scalar model of docs/sdk.md's DGC rules, bit for bit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chunks.h"
#include "dgc.h"
#include "ga_alloc.h"
#include "test_memory.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ---- chunk planning ---- */

static const size_t lengths[] = {1, 15, 1023, 1024, 1025, 4096, 5000, 65536, 1000003};
static const size_t chunk_bytes[] = {4096, 5000, 65536, 1u << 20};

static void expect_plan(size_t n, size_t elems)
{
    assert_true(elems >= GA_CHUNK_ALIGN);
    assert_int_equal(elems % GA_CHUNK_ALIGN, 0);
    size_t count = ga_chunks_count(n, elems);
    size_t next = 0;
    for (size_t i = 0; i < count; i++) {
        size_t off, cnt;
        ga_chunks_range(n, elems, i, &off, &cnt);
        assert_int_equal(off, next);               /* contiguous, in order */
        assert_int_equal(off % GA_CHUNK_ALIGN, 0); /* every chunk starts on a block */
        assert_true(cnt > 0 && cnt <= elems);
        if (i + 1 < count) assert_int_equal(cnt, elems); /* only the last is short */
        next = off + cnt;
    }
    assert_int_equal(next, n); /* covers [0, n) exactly once */
}

static void chunks_cover_aligned(void **state)
{
    (void)state;
    for (size_t b = 0; b < COUNT(chunk_bytes); b++)
        for (size_t i = 0; i < COUNT(lengths); i++) expect_plan(lengths[i], ga_chunks_elems(4096, chunk_bytes[b]));
    /* A block larger than a chunk still makes progress: one block per chunk. */
    assert_int_equal(ga_chunks_elems(8192, 4096), GA_CHUNK_ALIGN);
    assert_int_equal(ga_chunks_elems(4096, 4096), GA_CHUNK_ALIGN);
    assert_int_equal(ga_chunks_elems(4096, 3 * 4096 + 100), 3 * GA_CHUNK_ALIGN);
    assert_int_equal(ga_chunks_elems(256, 1u << 20), 4096 * GA_CHUNK_ALIGN);
}

/* Every codec: chunks of the planned size fit chunk_bytes, and the plan covers the tensor. */
static void chunks_fit_payload(void **state)
{
    (void)state;
    for (int codec = 0; codec < GA_CODEC_COUNT; codec++) {
        ga_codec_params p = ga_codec_params_default((ga_codec_id)codec);
        if (codec == GA_CODEC_TOPK) p.ratio = 0.01f;
        for (size_t b = 0; b < COUNT(chunk_bytes); b++) {
            size_t elems;
            assert_int_equal(ga_chunks_for_codec((ga_codec_id)codec, &p, chunk_bytes[b], &elems), GA_OK);
            size_t block, full;
            assert_int_equal(ga_codec_encoded_size((ga_codec_id)codec, &p, GA_CHUNK_ALIGN, &block), GA_OK);
            assert_int_equal(ga_codec_encoded_size((ga_codec_id)codec, &p, elems, &full), GA_OK);
            if (block <= chunk_bytes[b]) assert_true(full <= chunk_bytes[b]);
            /* Not wastefully small: one more block would not fit. */
            size_t more;
            assert_int_equal(ga_codec_encoded_size((ga_codec_id)codec, &p, elems + GA_CHUNK_ALIGN, &more), GA_OK);
            if (codec != GA_CODEC_TOPK && block <= chunk_bytes[b]) assert_true(more > chunk_bytes[b]);
            for (size_t i = 0; i < COUNT(lengths); i++) expect_plan(lengths[i], elems);
        }
    }
    /* none: 1 MiB = 256 Ki floats; 2bit: 256 bytes a block. */
    size_t elems;
    ga_codec_params none = ga_codec_params_default(GA_CODEC_NONE), q2 = ga_codec_params_default(GA_CODEC_2BIT);
    assert_int_equal(ga_chunks_for_codec(GA_CODEC_NONE, &none, 1u << 20, &elems), GA_OK);
    assert_int_equal(elems, 256 * 1024);
    assert_int_equal(ga_chunks_for_codec(GA_CODEC_2BIT, &q2, 1u << 20, &elems), GA_OK);
    assert_int_equal(elems, 16 * 256 * 1024);
}

/* ---- warm-up ---- */

static void warmup_schedule(void **state)
{
    (void)state;
    /* The keep ratios for ratio 0.001 over 5 warm-up epochs (docs/sdk.md, "Deep Gradient
     * Compression on the worker"). */
    const double want[] = {0.316227766, 0.1, 0.0316227766, 0.01, 0.00316227766, 0.001, 0.001, 0.001};
    for (uint32_t e = 0; e < COUNT(want); e++) {
        float r = ga_dgc_ratio(0.001f, 5, e);
        assert_true(fabs((double)r - want[e]) <= 1e-6 * want[e] + 1e-9);
    }
    /* Past the warm-up, and without one, exactly the base ratio. */
    assert_true(ga_dgc_ratio(0.001f, 5, 5) == 0.001f);
    assert_true(ga_dgc_ratio(0.001f, 0, 0) == 0.001f);
    assert_true(ga_dgc_ratio(0.25f, 0, 7) == 0.25f);
    /* max(coeff^(e+1), ratio): never below the base, decreasing. */
    float prev = 1.0f;
    for (uint32_t e = 0; e < 4; e++) {
        float r = ga_dgc_ratio(0.5f, 3, e);
        assert_true(r >= 0.5f && r < prev);
        assert_true(fabs((double)r - pow(pow(0.5, 1.0 / 4.0), e + 1.0)) < 1e-6 || r == 0.5f);
        prev = r;
    }
}

/* ---- clipping and finiteness ---- */

static void clip_by_norm(void **state)
{
    (void)state;
    const float g[] = {3.0f, 4.0f}; /* norm 5 */
    assert_true(ga_dgc_clip_coeff(g, 2, 0.0f) == 1.0f);
    assert_true(ga_dgc_clip_coeff(g, 2, 10.0f) == 1.0f);
    assert_true(ga_dgc_clip_coeff(g, 2, 5.0f) == (float)(5.0 / (5.0 + 1e-6)));
    float s = ga_dgc_clip_coeff(g, 2, 1.0f);
    assert_true(s == (float)(1.0 / (5.0 + 1e-6)));
    double norm = sqrt((double)(s * g[0]) * (s * g[0]) + (double)(s * g[1]) * (s * g[1]));
    assert_true(fabs(norm - 1.0) < 1e-6);
    /* Summed in double: a million 1e-3 has norm 1 exactly enough. */
    size_t n = 1000000;
    float *big = ga_malloc(n * sizeof *big);
    assert_non_null(big);
    for (size_t i = 0; i < n; i++) big[i] = 1e-3f;
    s = ga_dgc_clip_coeff(big, n, 0.5f);
    assert_true(fabs((double)s - 0.5 / (sqrt((double)n) * (double)1e-3f + 1e-6)) < 1e-7);
    ga_free(big);
}

/* ---- momentum correction and factor masking against a scalar reference ---- */

static uint64_t rng_state = 0x1234567ull;
static float rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0) * 2.0f - 1.0f;
}

/* DGC as docs/sdk.md states it, per element, with an exact top-k (largest |v|, ties to the lower
 * index, zeros never sent); sent[i] gets the value sent at i (0 elsewhere). */
static void reference_step(const ga_dgc_options *o, float ratio, float *u, float *v, const float *g, size_t n,
                           float *sent)
{
    float s = 1.0f;
    if (o->clip_norm > 0.0f) {
        double sum = 0.0;
        for (size_t i = 0; i < n; i++) sum += (double)g[i] * (double)g[i];
        double c = (double)o->clip_norm / (sqrt(sum) + 1e-6);
        if (c < 1.0) s = (float)c;
    }
    for (size_t i = 0; i < n; i++) {
        float gi = s * g[i];
        if (o->momentum == 0.0f) {
            v[i] = v[i] + gi;
        } else if (o->nesterov) {
            u[i] = (u[i] + gi) * o->momentum;
            v[i] = v[i] + (u[i] + gi);
        } else {
            u[i] = o->momentum * u[i] + gi;
            v[i] = v[i] + u[i];
        }
    }
    size_t k = (size_t)ceil((double)n * (double)ratio);
    memset(sent, 0, n * sizeof *sent);
    for (size_t picked = 0; picked < k; picked++) {
        size_t best = n;
        for (size_t i = 0; i < n; i++) {
            if (v[i] == 0.0f || sent[i] != 0.0f) continue;
            if (best == n || fabsf(v[i]) > fabsf(v[best])) best = i;
        }
        if (best == n) break;
        sent[best] = v[best];
    }
    for (size_t i = 0; i < n; i++) {
        if (sent[i] == 0.0f) continue;
        v[i] = 0.0f;
        if (o->factor_masking) u[i] = 0.0f;
    }
}

/* The SDK's sequence for one chunk (push.c): clip coefficient, correction, encode into the
 * residual v, masking from the payload. */
static void sdk_step(const ga_dgc_options *o, float ratio, float *u, float *v, float *work, float *scratch,
                     const float *g, size_t n, float *sent)
{
    ga_exec ex = GA_EXEC_CPU_INIT;
    ga_codec_params p = ga_codec_params_default(GA_CODEC_TOPK);
    p.ratio = ratio;
    size_t cap, len;
    assert_int_equal(ga_codec_encoded_size(GA_CODEC_TOPK, &p, n, &cap), GA_OK);
    uint8_t *buf = ga_malloc(cap);
    assert_non_null(buf);
    float s = ga_dgc_clip_coeff(g, n, o->clip_norm);
    const float *inc = ga_dgc_correct(o, u, g, s, work, n);
    assert_int_equal(ga_codec_encode(&ex, GA_CODEC_TOPK, &p, inc, v, n, buf, cap, &len), GA_OK);
    if (o->factor_masking && o->momentum != 0.0f)
        assert_int_equal(ga_dgc_mask(&ex, GA_CODEC_TOPK, &p, buf, len, n, u, scratch), GA_OK);
    memset(sent, 0, n * sizeof *sent);
    assert_int_equal(ga_codec_decode_add(&ex, GA_CODEC_TOPK, &p, buf, len, n, sent), GA_OK);
    ga_free(buf);
}

static void expect_bits(const float *got, const float *want, size_t n, const char *what, int step)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
            fail_msg("%s, step %d: element %zu is %a, reference %a", what, step, i, (double)got[i], (double)want[i]);
}

static void run_dgc_case(const ga_dgc_options *o, float ratio, size_t n, int steps)
{
    float *mem = ga_calloc(9 * n, sizeof(float));
    assert_non_null(mem);
    float *u = mem, *v = mem + n, *work = mem + 2 * n, *scratch = mem + 3 * n, *sent = mem + 4 * n;
    float *ru = mem + 5 * n, *rv = mem + 6 * n, *rsent = mem + 7 * n, *g = mem + 8 * n;
    for (int step = 0; step < steps; step++) {
        for (size_t i = 0; i < n; i++) g[i] = rnd() * (1.0f + (float)(i % 7));
        sdk_step(o, ratio, u, v, work, scratch, g, n, sent);
        reference_step(o, ratio, ru, rv, g, n, rsent);
        expect_bits(sent, rsent, n, "sent values", step);
        expect_bits(v, rv, n, "accumulation v", step);
        expect_bits(u, ru, n, "momentum u", step);
    }
    ga_free(mem);
}

static void dgc_momentum_masking(void **state)
{
    (void)state;
    ga_dgc_options o = {true, 0.9f, false, true, 0.0f, 0};
    run_dgc_case(&o, 0.05f, 1000, 6);
    run_dgc_case(&o, 0.01f, 3000, 4);
}

static void dgc_momentum_without_masking(void **state)
{
    (void)state;
    ga_dgc_options o = {true, 0.9f, false, false, 0.0f, 0};
    run_dgc_case(&o, 0.05f, 1000, 6);
}

static void dgc_nesterov_masking(void **state)
{
    (void)state;
    ga_dgc_options o = {true, 0.8f, true, true, 0.0f, 0};
    run_dgc_case(&o, 0.05f, 1000, 6);
}

static void dgc_clipped(void **state)
{
    (void)state;
    ga_dgc_options o = {true, 0.9f, false, true, 2.0f, 0};
    run_dgc_case(&o, 0.05f, 1000, 5);
    ga_dgc_options plain = {true, 0.0f, false, false, 2.0f, 0}; /* clipping alone: v += s*g */
    run_dgc_case(&plain, 0.1f, 500, 5);
}

/* Masking with a dense codec: 2bit sends +-t wherever |v| >= t. */
static void mask_2bit(void **state)
{
    (void)state;
    ga_exec ex = GA_EXEC_CPU_INIT;
    ga_codec_params p = ga_codec_params_default(GA_CODEC_2BIT);
    p.threshold = 0.5f;
    float g[40], r[40] = {0}, u[40], scratch[40];
    for (size_t i = 0; i < 40; i++) {
        g[i] = (i % 3 == 0) ? 0.75f : (i % 3 == 1 ? -0.6f : 0.1f);
        u[i] = 1.0f + (float)i;
    }
    uint32_t out[3];
    size_t len;
    assert_int_equal(ga_codec_encode(&ex, GA_CODEC_2BIT, &p, g, r, 40, out, sizeof out, &len), GA_OK);
    assert_int_equal(ga_dgc_mask(&ex, GA_CODEC_2BIT, &p, out, len, 40, u, scratch), GA_OK);
    for (size_t i = 0; i < 40; i++) {
        if (i % 3 == 2) assert_true(u[i] == 1.0f + (float)i);
        else assert_true(u[i] == 0.0f);
    }
    /* A bad payload changes nothing. */
    assert_int_equal(ga_dgc_mask(&ex, GA_CODEC_2BIT, &p, out, len - 4, 40, u, scratch), GA_E_LENGTH);
}

int main(void)
{
    test_memory_baseline();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chunks_cover_aligned),
        cmocka_unit_test(chunks_fit_payload),
        cmocka_unit_test(warmup_schedule),
        cmocka_unit_test(clip_by_norm),
        cmocka_unit_test(dgc_momentum_masking),
        cmocka_unit_test(dgc_momentum_without_masking),
        cmocka_unit_test(dgc_nesterov_masking),
        cmocka_unit_test(dgc_clipped),
        cmocka_unit_test(mask_2bit),
        cmocka_unit_test(test_host_memory_returned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
