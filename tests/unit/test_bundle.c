/* Push and init bundles (service/bundle/bundle.c): every stateless check returns its own status with a
 * message naming the value, frees the refused chunk and leaves the bundle as it was. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "test_memory.h"

#include "bundle/bundle.h"
#include "fake_call.h"
#include "ga_alloc.h"
#include "ga_wire.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ---- push chunks ---- */

typedef struct push_spec {
    const char *job;
    uint32_t rank;
    uint64_t incarnation, step;
    const char *tensor;
    uint64_t offset, count;
    Gradagg__V1__Codec codec;
    bool no_codec;
    const void *payload;
    size_t len;
    bool has_lr;
    float lr;
} push_spec;

static Gradagg__V1__PushChunk *push_chunk(const push_spec *s)
{
    Gradagg__V1__PushChunk c = GRADAGG__V1__PUSH_CHUNK__INIT;
    Gradagg__V1__Codec codec = s->codec;
    c.job = (char *)s->job;
    c.rank = s->rank;
    c.incarnation = s->incarnation;
    c.step = s->step;
    c.tensor = (char *)s->tensor;
    c.offset = s->offset;
    c.count = s->count;
    c.codec = s->no_codec ? NULL : &codec;
    c.has_lr = s->has_lr;
    c.lr = s->lr;
    c.payload.data = (uint8_t *)s->payload;
    c.payload.len = s->len;
    return (Gradagg__V1__PushChunk *)fake_wire_copy(&c.base);
}

static float ones[64] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

static push_spec good_push(void)
{
    push_spec s = {"job", 1, 7, 3, "w", 0, 16, GRADAGG__V1__CODEC__INIT, false, ones, 64, true, 0.05f};
    return s;
}

typedef struct push_bad {
    const char *what;
    void (*mutate)(push_spec *s);
    ga_status want;
    const char *says; /* a piece of the message */
} push_bad;

static void m_job_empty(push_spec *s) { s->job = ""; }
static void m_inc0(push_spec *s) { s->incarnation = 0; }
static void m_job_other(push_spec *s) { s->job = "other"; }
static void m_rank_other(push_spec *s) { s->rank = 2; }
static void m_inc_other(push_spec *s) { s->incarnation = 8; }
static void m_step_other(push_spec *s) { s->step = 5; }
static void m_lr_other(push_spec *s) { s->lr = 0.025f; }
static void m_lr_none(push_spec *s) { s->has_lr = false; }
static void m_lr_nan(push_spec *s) { s->lr = NAN; }
static void m_lr_negative(push_spec *s) { s->lr = -0.1f; }
static void m_tensor_empty(push_spec *s) { s->tensor = ""; }
static void m_count0(push_spec *s) { s->count = 0, s->len = 0; }
static void m_overflow(push_spec *s) { s->offset = UINT64_MAX - 3; }
static void m_codec_unknown(push_spec *s) { s->codec.id = 9; }
static void m_threshold(push_spec *s)
{
    s->codec.id = GRADAGG__V1__CODEC_ID__CODEC_2BIT;
    s->codec.threshold = -1.0f;
    s->len = 4;
}
static void m_ratio(push_spec *s)
{
    s->codec.id = GRADAGG__V1__CODEC_ID__CODEC_TOPK;
    s->codec.ratio = 2.0f;
    s->codec.sample_fraction = 0.5f;
}
static void m_topk_values(push_spec *s)
{
    s->codec.id = GRADAGG__V1__CODEC_ID__CODEC_TOPK;
    s->codec.ratio = 0.5f;
    s->codec.sample_fraction = 0.5f;
    s->codec.topk_values = 2;
}
static void m_length(push_spec *s) { s->len = 60; }
static float nan_payload[16] = {1, 2, NAN};
static void m_nan(push_spec *s) { s->payload = nan_payload; }
static uint16_t f16_inf[16] = {0x3C00, 0x7C00};
static void m_fp16_inf(push_spec *s)
{
    s->codec.id = GRADAGG__V1__CODEC_ID__CODEC_FP16;
    s->payload = f16_inf;
    s->len = 32;
}
/* top-k, two pairs, indices 7 then 3 */
static const uint32_t topk_bad_order[] = {2, 0x3F800000u, 0x40000000u, 7, 3};
static void m_topk_order(push_spec *s)
{
    s->codec.id = GRADAGG__V1__CODEC_ID__CODEC_TOPK;
    s->codec.ratio = 0.5f;
    s->codec.sample_fraction = 0.5f;
    s->payload = topk_bad_order;
    s->len = sizeof topk_bad_order;
}

static const push_bad push_bads[] = {
    {"empty job", m_job_empty, GA_E_INVAL, "job name is empty"},
    {"incarnation 0", m_inc0, GA_E_INVAL, "incarnation is 0"},
    {"other job", m_job_other, GA_E_STREAM_MIXED, "job 'other'"},
    {"other rank", m_rank_other, GA_E_STREAM_MIXED, "rank 2"},
    {"other incarnation", m_inc_other, GA_E_STREAM_MIXED, "incarnation 8"},
    {"other step", m_step_other, GA_E_STREAM_MIXED, "step 5"},
    {"other lr", m_lr_other, GA_E_STREAM_MIXED, "has lr 0.025"},
    {"no lr", m_lr_none, GA_E_STREAM_MIXED, "has no lr, the stream began with lr 0.05"},
    {"nan lr", m_lr_nan, GA_E_OPTIM, "lr nan"},
    {"negative lr", m_lr_negative, GA_E_OPTIM, "lr -0.1"},
    {"empty tensor", m_tensor_empty, GA_E_INVAL, "tensor name is empty"},
    {"count 0", m_count0, GA_E_INVAL, "count is 0"},
    {"offset overflow", m_overflow, GA_E_INVAL, "overflows"},
    {"unknown codec", m_codec_unknown, GA_E_CODEC, "codec id 9"},
    {"2bit threshold", m_threshold, GA_E_THRESHOLD, "threshold -1"},
    {"topk ratio", m_ratio, GA_E_RATIO, "ratio 2"},
    {"topk values", m_topk_values, GA_E_INVAL, "topk_values 2"},
    {"length", m_length, GA_E_LENGTH, "payload of 60 bytes"},
    {"nan", m_nan, GA_E_NONFINITE, "non-finite"},
    {"fp16 inf", m_fp16_inf, GA_E_NONFINITE, "fp16"},
    {"topk order", m_topk_order, GA_E_INDEX_ORDER, "topk"},
};

static void test_push_checks(void **state)
{
    (void)state;
    uint64_t mem0 = ga_mem_in_use(GA_MEM_HOST);
    /* A bundle with one good chunk; every bad second chunk leaves it as it was. */
    ga_push *b = NULL;
    char why[256];
    push_spec s = good_push();
    assert_int_equal(ga_push_add(&b, push_chunk(&s), 1 << 20, NULL, why, sizeof why), GA_OK);
    assert_non_null(b);
    assert_string_equal(b->job, "job");
    assert_int_equal(b->rank, 1);
    assert_int_equal(b->incarnation, 7);
    assert_int_equal(b->step, 3);
    assert_true(b->has_lr);
    assert_true(b->lr == 0.05f);
    assert_int_equal(b->count, 1);
    assert_int_equal(b->bytes.payload_bytes, 64);
    assert_int_equal(b->parts[0].codec, GA_CODEC_NONE);
    assert_int_equal((uintptr_t)b->parts[0].chunk->payload.data % 4, 0);
    uint64_t mem1 = ga_mem_in_use(GA_MEM_HOST);
    for (size_t k = 0; k < COUNT(push_bads); k++) {
        push_spec bad = good_push();
        bad.tensor = "v";
        push_bads[k].mutate(&bad);
        why[0] = 0;
        ga_push *before = b;
        ga_status rc = ga_push_add(&b, push_chunk(&bad), 1 << 20, NULL, why, sizeof why);
        if (rc != push_bads[k].want || !strstr(why, push_bads[k].says))
            fail_msg("%s: got %s '%s', want %s with '%s'", push_bads[k].what, ga_status_name(rc), why,
                     ga_status_name(push_bads[k].want), push_bads[k].says);
        assert_ptr_equal(b, before);
        assert_int_equal(b->count, 1);
        assert_int_equal(b->bytes.payload_bytes, 64);
        assert_int_equal(ga_mem_in_use(GA_MEM_HOST), mem1); /* the refused chunk was freed */
        /* The same chunk as the first of a stream: refused too (header checks aside), no bundle made. */
        if (push_bads[k].want != GA_E_STREAM_MIXED) {
            ga_push *fresh = NULL;
            assert_int_equal(ga_push_add(&fresh, push_chunk(&bad), 1 << 20, NULL, why, sizeof why), push_bads[k].want);
            assert_null(fresh);
            assert_int_equal(ga_mem_in_use(GA_MEM_HOST), mem1);
        }
    }
    /* The stream limit counts payloads and chunk headers. */
    size_t one = b->bytes.held_bytes; /* the first chunk: 64 payload bytes and its header */
    assert_true(one > 64 + sizeof(Gradagg__V1__PushChunk));
    push_spec more = good_push();
    more.tensor = "v"; /* a header as long as the first chunk's */
    char says[64];
    snprintf(says, sizeof says, "over the limit of %zu", 2 * one - 1);
    assert_int_equal(ga_push_add(&b, push_chunk(&more), 2 * one - 1, NULL, why, sizeof why), GA_E_LIMIT);
    assert_non_null(strstr(why, says));
    assert_int_equal(ga_push_add(&b, push_chunk(&more), 2 * one, NULL, why, sizeof why), GA_OK);
    assert_int_equal(b->count, 2);
    assert_int_equal(b->bytes.payload_bytes, 128);
    assert_int_equal(b->bytes.held_bytes, 2 * one);
    /* No codec message reads as codec none. */
    more.no_codec = true;
    more.tensor = "u";
    assert_int_equal(ga_push_add(&b, push_chunk(&more), 1 << 20, NULL, why, sizeof why), GA_OK);
    assert_int_equal(b->parts[2].codec, GA_CODEC_NONE);
    /* A NULL chunk. */
    assert_int_equal(ga_push_add(&b, NULL, 1 << 20, NULL, why, sizeof why), GA_E_INVAL);
    ga_push_free(b);
    ga_push_free(NULL);
    assert_int_equal(ga_mem_in_use(GA_MEM_HOST), mem0);
}

/* Codec parameters arrive bit for bit; the reverse gives the same wire fields. */
static void test_codec_wire(void **state)
{
    (void)state;
    Gradagg__V1__Codec w = GRADAGG__V1__CODEC__INIT;
    w.id = GRADAGG__V1__CODEC_ID__CODEC_TOPK;
    w.ratio = 0x1.99999ap-4f;
    w.sample_fraction = 0.25f;
    w.adapt_rounds = 3;
    w.seed = 99;
    w.topk_values = 1;
    w.topk_indices = 1;
    ga_codec_id id;
    ga_codec_params p;
    char why[128];
    assert_int_equal(ga_codec_from_wire(&w, "x", &id, &p, why, sizeof why), GA_OK);
    assert_int_equal(id, GA_CODEC_TOPK);
    assert_memory_equal(&p.ratio, &w.ratio, 4);
    assert_int_equal(p.adapt_rounds, 3);
    assert_int_equal(p.seed, 99);
    assert_int_equal(p.topk_values, 1);
    assert_int_equal(p.topk_indices, 1);
    Gradagg__V1__Codec back;
    ga_codec_to_wire(id, &p, &back);
    assert_int_equal(back.id, w.id);
    assert_memory_equal(&back.ratio, &w.ratio, 4);
    assert_int_equal(back.seed, 99);
    w.adapt_rounds = GA_TOPK_MAX_ROUNDS + 1;
    assert_int_equal(ga_codec_from_wire(&w, "x", &id, &p, why, sizeof why), GA_E_INVAL);
    assert_non_null(strstr(why, "adapt_rounds 65"));
    w.adapt_rounds = 3;
    w.topk_indices = 2;
    assert_int_equal(ga_codec_from_wire(&w, "x", &id, &p, why, sizeof why), GA_E_INVAL);
    assert_int_equal(ga_codec_from_wire(NULL, "x", &id, &p, why, sizeof why), GA_OK);
    assert_int_equal(id, GA_CODEC_NONE);
}

/* ---- init chunks ---- */

typedef struct init_spec {
    const char *job;
    uint32_t rank;
    uint64_t incarnation;
    const char *tensor;
    uint64_t shape[3];
    size_t ndim;
    uint64_t offset, count;
    const void *values;
    size_t len;
    bool await_values;
} init_spec;

static Gradagg__V1__InitChunk *init_chunk(const init_spec *s)
{
    Gradagg__V1__InitChunk c = GRADAGG__V1__INIT_CHUNK__INIT;
    uint64_t shape[3];
    memcpy(shape, s->shape, sizeof shape);
    c.job = (char *)s->job;
    c.rank = s->rank;
    c.incarnation = s->incarnation;
    c.tensor = (char *)s->tensor;
    c.n_shape = s->ndim;
    c.shape = shape;
    c.offset = s->offset;
    c.count = s->count;
    c.values.data = (uint8_t *)s->values;
    c.values.len = s->len;
    c.await_values = s->await_values;
    return (Gradagg__V1__InitChunk *)fake_wire_copy(&c.base);
}

static init_spec good_init(void)
{
    init_spec s = {"job", 0, 5, "w", {4, 8}, 2, 16, 16, ones, 64, false};
    return s;
}

typedef struct init_bad {
    const char *what;
    void (*mutate)(init_spec *s);
    ga_status want;
    const char *says;
} init_bad;

static void i_job_empty(init_spec *s) { s->job = ""; }
static void i_inc0(init_spec *s) { s->incarnation = 0; }
static void i_rank_other(init_spec *s) { s->rank = 1; }
static void i_tensor_empty(init_spec *s) { s->tensor = ""; }
static void i_no_shape(init_spec *s) { s->ndim = 0; }
static void i_zero_dim(init_spec *s) { s->shape[1] = 0; }
static void i_huge(init_spec *s) { s->shape[0] = 1ull << 40, s->shape[1] = 1ull << 40; }
static void i_other_shape(init_spec *s) { s->shape[1] = 9; }
static void i_outside(init_spec *s) { s->offset = 20; }
static void i_length(init_spec *s) { s->len = 60; }
static void i_nan(init_spec *s) { s->values = nan_payload; }
static void i_await_values(init_spec *s) { s->await_values = true; }
static void i_await_later(init_spec *s) { s->await_values = true, s->values = NULL, s->len = 0; }

static const init_bad init_bads[] = {
    {"empty job", i_job_empty, GA_E_INVAL, "job name is empty"},
    {"incarnation 0", i_inc0, GA_E_INVAL, "incarnation is 0"},
    {"other rank", i_rank_other, GA_E_STREAM_MIXED, "rank 1"},
    {"empty tensor", i_tensor_empty, GA_E_INVAL, "tensor name is empty"},
    {"no shape", i_no_shape, GA_E_INVAL, "0 dimensions"},
    {"zero dimension", i_zero_dim, GA_E_INVAL, "[4, 0] has a zero dimension"},
    {"too many elements", i_huge, GA_E_INVAL, "too many elements"},
    {"shape changes", i_other_shape, GA_E_SHAPE, "shape [4, 9]"},
    {"outside", i_outside, GA_E_COVERAGE, "[20, 20 + 16) outside its 32 elements"},
    {"values length", i_length, GA_E_LENGTH, "60 bytes of values for count 16"},
    {"nan", i_nan, GA_E_NONFINITE, "NaN or Inf"},
    {"await with values", i_await_values, GA_E_INVAL, "await_values true, chunk 0 had false"},
    {"await after values", i_await_later, GA_E_INVAL, "await_values true, chunk 0 had false"},
};

static void test_init_checks(void **state)
{
    (void)state;
    uint64_t mem0 = ga_mem_in_use(GA_MEM_HOST);
    ga_init *b = NULL;
    char why[256];
    init_spec s = good_init();
    s.offset = 0;
    assert_int_equal(ga_init_add(&b, init_chunk(&s), 1 << 20, NULL, why, sizeof why), GA_OK);
    assert_string_equal(b->job, "job");
    assert_int_equal(b->count, 1);
    uint64_t mem1 = ga_mem_in_use(GA_MEM_HOST);
    for (size_t k = 0; k < COUNT(init_bads); k++) {
        init_spec bad = good_init();
        init_bads[k].mutate(&bad);
        why[0] = 0;
        ga_status rc = ga_init_add(&b, init_chunk(&bad), 1 << 20, NULL, why, sizeof why);
        if (rc != init_bads[k].want || !strstr(why, init_bads[k].says))
            fail_msg("%s: got %s '%s', want %s with '%s'", init_bads[k].what, ga_status_name(rc), why,
                     ga_status_name(init_bads[k].want), init_bads[k].says);
        assert_int_equal(b->count, 1);
        assert_int_equal(b->bytes.payload_bytes, 64);
        assert_int_equal(ga_mem_in_use(GA_MEM_HOST), mem1);
    }
    /* The rest of w; a zeros tensor (no values, any count inside it); the limit, which counts
     * values and chunk headers ("y" has a header as long as "z"'s). */
    assert_int_equal(
        ga_init_add(&b, init_chunk(&(init_spec){"job", 0, 5, "w", {4, 8}, 2, 16, 16, ones, 64, false}), 1 << 20, NULL, why, sizeof why),
        GA_OK);
    size_t before_z = b->bytes.held_bytes;
    assert_int_equal(
        ga_init_add(&b, init_chunk(&(init_spec){"job", 0, 5, "z", {3}, 1, 0, 0, NULL, 0, false}), 1 << 20, NULL, why, sizeof why),
        GA_OK);
    size_t header = b->bytes.held_bytes - before_z, limit = b->bytes.held_bytes + 64 + header;
    assert_true(header > sizeof(Gradagg__V1__InitChunk));
    assert_int_equal(ga_init_add(&b, init_chunk(&(init_spec){"job", 0, 5, "y", {16}, 1, 0, 16, ones, 64, false}), limit - 1,
                                 NULL, why, sizeof why),
                     GA_E_LIMIT);
    assert_int_equal(b->count, 3);
    assert_int_equal(b->bytes.payload_bytes, 128);
    assert_int_equal(
        ga_init_add(&b, init_chunk(&(init_spec){"job", 0, 5, "y", {16}, 1, 0, 16, ones, 64, false}), limit, NULL, why, sizeof why),
        GA_OK);
    assert_int_equal(b->count, 4);
    assert_int_equal(b->bytes.held_bytes, limit);
    ga_init_free(b);
    ga_init_free(NULL);
    assert_int_equal(ga_mem_in_use(GA_MEM_HOST), mem0);
}

/* An awaiting init: names and shapes only, every chunk awaiting. */
static void test_init_await(void **state)
{
    (void)state;
    uint64_t mem0 = ga_mem_in_use(GA_MEM_HOST);
    ga_init *b = NULL;
    char why[256];
    init_spec s = {"job", 2, 5, "w", {4, 8}, 2, 0, 0, NULL, 0, true};
    assert_int_equal(ga_init_add(&b, init_chunk(&s), 1 << 20, NULL, why, sizeof why), GA_OK);
    assert_true(b->await_values);
    s.tensor = "b", s.ndim = 1, s.shape[0] = 8;
    assert_int_equal(ga_init_add(&b, init_chunk(&s), 1 << 20, NULL, why, sizeof why), GA_OK);
    assert_int_equal(b->bytes.payload_bytes, 0);
    s.values = ones, s.count = 8, s.len = 32;
    assert_int_equal(ga_init_add(&b, init_chunk(&s), 1 << 20, NULL, why, sizeof why), GA_E_INVAL);
    assert_non_null(strstr(why, "await_values with 32 bytes of values"));
    s.values = NULL, s.count = 0, s.len = 0, s.await_values = false;
    assert_int_equal(ga_init_add(&b, init_chunk(&s), 1 << 20, NULL, why, sizeof why), GA_E_INVAL);
    assert_non_null(strstr(why, "await_values false, chunk 0 had true"));
    assert_int_equal(b->count, 2);
    ga_init_free(b);
    assert_int_equal(ga_mem_in_use(GA_MEM_HOST), mem0);
}

/* A hostile stream of tiny chunks: each 4-byte payload carries a header of its own, and the
 * limit stops the stream once what it holds (headers included) reaches the limit, so the memory
 * it takes stays within the limit, far before its payloads alone would reach it. */
static void test_tiny_chunks_bounded(void **state)
{
    (void)state;
    const size_t limit = 64 << 10;
    uint64_t mem0 = ga_mem_in_use(GA_MEM_HOST);
    ga_push *b = NULL;
    char why[256];
    ga_status rc = GA_OK;
    size_t k = 0;
    for (; rc == GA_OK; k++) {
        push_spec s = good_push();
        s.offset = k, s.count = 1, s.len = 4;
        rc = ga_push_add(&b, push_chunk(&s), limit, NULL, why, sizeof why);
    }
    assert_int_equal(rc, GA_E_LIMIT);
    uint64_t taken = ga_mem_in_use(GA_MEM_HOST) - mem0;
    print_message("%zu chunks of 4 bytes: %zu payload bytes, %zu held, %llu bytes of memory (limit %zu)\n",
                  b->count, b->bytes.payload_bytes, b->bytes.held_bytes, (unsigned long long)taken, limit);
    assert_true(b->bytes.held_bytes <= limit);
    assert_true(b->bytes.payload_bytes * 20 < limit); /* headers, not payloads, reached the limit */
    assert_true(taken <= limit);
    ga_push_free(b);
    assert_int_equal(ga_mem_in_use(GA_MEM_HOST), mem0);
}

int main(void)
{
    test_memory_baseline();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_checks),
        cmocka_unit_test(test_codec_wire),
        cmocka_unit_test(test_init_checks),
        cmocka_unit_test(test_init_await),
        cmocka_unit_test(test_tiny_chunks_bounded),
        cmocka_unit_test(test_host_memory_returned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
