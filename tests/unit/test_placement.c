/* Placement of tensors over shards (client/placement.h): one shard is the identity; a split
 * covers every element exactly once in ranges of whole units on distinct shards, as even as whole
 * units allow; topk ranges are whole push chunks, so piece-local chunking is the tensor's own;
 * small tensors spread over the shards by name; the names pieces carry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "chunks.h"
#include "placement.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const size_t lengths[] = {1, 1023, 1024, 1025, 2048, 2049, 5000, 65536, 1000003, 3u << 20};
static const size_t units[] = {1024, 5 * 1024, 47 * 1024, 4096 * 1024};
static const uint64_t splits[] = {0, 1, 2048, 65536, 1u << 20};

static void one_shard_is_the_identity(void **state)
{
    (void)state;
    ga_placement_piece p[GA_PLACEMENT_MAX_SHARDS];
    for (size_t i = 0; i < COUNT(lengths); i++)
        for (size_t s = 0; s < COUNT(splits); s++) {
            memset(p, 0xff, sizeof p);
            assert_int_equal(ga_placement_plan("w", lengths[i], 1024, splits[s], 1, p), 1);
            assert_int_equal(p[0].shard, 0);
            assert_int_equal(p[0].off, 0);
            assert_int_equal(p[0].count, lengths[i]);
        }
    char name[32];
    assert_int_equal(ga_placement_piece_name("layer.w", 0, 1, name, sizeof name), 7);
    assert_string_equal(name, "layer.w");
}

/* Checks one plan: order, coverage, alignment, distinct shards, balance, and when it splits. */
static void expect_plan(const char *name, size_t n, size_t unit, uint64_t split, uint32_t nshards)
{
    ga_placement_piece p[GA_PLACEMENT_MAX_SHARDS], again[GA_PLACEMENT_MAX_SHARDS];
    memset(p, 0, sizeof p); /* padding too: the plans are compared byte for byte */
    memset(again, 0, sizeof again);
    uint32_t np = ga_placement_plan(name, n, unit, split, nshards, p);
    size_t nunits = n / unit + (n % unit != 0);
    bool splits_it = split != 0 && n >= split && nunits >= 2;
    uint32_t h = (uint32_t)(ga_placement_hash(name) % nshards);
    assert_int_equal(np, splits_it ? (nunits < nshards ? nunits : nshards) : 1);
    bool seen[GA_PLACEMENT_MAX_SHARDS] = {false};
    size_t next = 0, least = SIZE_MAX, most = 0;
    for (uint32_t j = 0; j < np; j++) {
        assert_int_equal(p[j].off, next); /* contiguous, in element order */
        assert_true(p[j].count > 0);
        assert_int_equal(p[j].off % unit, 0); /* every cut on a unit */
        assert_true(p[j].shard < nshards);
        assert_false(seen[p[j].shard]); /* one piece per shard */
        seen[p[j].shard] = true;
        assert_int_equal(p[j].shard, (h + j) % nshards);
        size_t u = p[j].count / unit + (p[j].count % unit != 0);
        if (u < least) least = u;
        if (u > most) most = u;
        next += p[j].count;
    }
    assert_int_equal(next, n); /* exactly once */
    assert_true(most - least <= 1);
    /* Pure: the same inputs give the same plan. */
    assert_int_equal(ga_placement_plan(name, n, unit, split, nshards, again), np);
    assert_memory_equal(again, p, np * sizeof p[0]);
}

static void splits_cover_aligned_ranges(void **state)
{
    (void)state;
    const char *names[] = {"w", "fc1.weight", "embedding"};
    for (size_t a = 0; a < COUNT(names); a++)
        for (size_t i = 0; i < COUNT(lengths); i++)
            for (size_t u = 0; u < COUNT(units); u++)
                for (size_t s = 0; s < COUNT(splits); s++)
                    for (uint32_t ns = 2; ns <= 9; ns++) expect_plan(names[a], lengths[i], units[u], splits[s], ns);
    expect_plan("w", (size_t)64 * 1024 * 1024 + 5, 1024, 1, GA_PLACEMENT_MAX_SHARDS);
    /* The expected shapes: 3 shards, 10 units of 1024 and a partial one: cuts at floor(11 j / 3). */
    ga_placement_piece p[GA_PLACEMENT_MAX_SHARDS];
    assert_int_equal(ga_placement_plan("w", 10 * 1024 + 7, 1024, 1, 3, p), 3);
    assert_int_equal(p[0].count, 3 * 1024);
    assert_int_equal(p[1].off, 3 * 1024);
    assert_int_equal(p[1].count, 4 * 1024);
    assert_int_equal(p[2].off, 7 * 1024);
    assert_int_equal(p[2].count, 3 * 1024 + 7);
    /* Below the threshold, or one unit only: whole. */
    assert_int_equal(ga_placement_plan("w", 4095, 1024, 4096, 3, p), 1);
    assert_int_equal(ga_placement_plan("w", 1u << 20, 1u << 20, 1, 3, p), 1);
    assert_int_equal(ga_placement_plan("w", 1u << 20, 1024, 0, 3, p), 1);
    assert_int_equal(p[0].count, 1u << 20);
}

static void units_are_codec_blocks_or_topk_chunks(void **state)
{
    (void)state;
    const size_t chunk_bytes[] = {4096, 65536, 1u << 20};
    for (int codec = 0; codec < GA_CODEC_COUNT; codec++) {
        ga_codec_params p = ga_codec_params_default((ga_codec_id)codec);
        if (codec == GA_CODEC_TOPK) p.ratio = 0.01f;
        for (size_t b = 0; b < COUNT(chunk_bytes); b++) {
            size_t unit = 0, elems = 0;
            assert_int_equal(ga_placement_unit((ga_codec_id)codec, &p, chunk_bytes[b], &unit), GA_OK);
            /* A whole number of every codec's block (2bit 16, 1bit 32, 1bit_scaled 1024). */
            assert_int_equal(unit % GA_1BIT_SCALED_BLOCK, 0);
            assert_int_equal(unit % 32, 0);
            assert_int_equal(ga_chunks_push_elems((ga_codec_id)codec, &p, chunk_bytes[b], &elems), GA_OK);
            if (codec == GA_CODEC_TOPK) assert_int_equal(unit, elems);
            else assert_int_equal(unit, GA_CHUNK_ALIGN);
        }
    }
    size_t unit = 7;
    ga_codec_params zero = {0};
    assert_int_equal(ga_placement_unit((ga_codec_id)GA_CODEC_COUNT, &zero, 4096, &unit), GA_E_CODEC);
    assert_int_equal(unit, 7);
}

/* topk: chunking each piece on its own gives the whole tensor's chunks, in its order. */
static void topk_pieces_keep_the_tensor_chunks(void **state)
{
    (void)state;
    ga_codec_params p = ga_codec_params_default(GA_CODEC_TOPK);
    p.ratio = 0.01f;
    size_t elems;
    assert_int_equal(ga_chunks_push_elems(GA_CODEC_TOPK, &p, 4096, &elems), GA_OK);
    const size_t ns[] = {3 * elems, 5 * elems + 17, 11 * elems - 1000, 2 * elems + 1};
    for (size_t i = 0; i < COUNT(ns); i++) {
        for (uint32_t nshards = 2; nshards <= 4; nshards++) {
            ga_placement_piece pc[GA_PLACEMENT_MAX_SHARDS];
            uint32_t np = ga_placement_plan("t", ns[i], elems, 1, nshards, pc);
            assert_true(np >= 2);
            size_t global = 0;
            for (uint32_t j = 0; j < np; j++) {
                for (size_t k = 0; k < ga_chunks_count(pc[j].count, elems); k++, global++) {
                    size_t off, count, goff, gcount;
                    ga_chunks_range(pc[j].count, elems, k, &off, &count);
                    ga_chunks_range(ns[i], elems, global, &goff, &gcount);
                    assert_int_equal(pc[j].off + off, goff);
                    assert_int_equal(count, gcount);
                }
            }
            assert_int_equal(global, ga_chunks_count(ns[i], elems));
        }
    }
}

static void small_tensors_spread_by_name(void **state)
{
    (void)state;
    /* FNV-1a 64 test vectors. */
    assert_true(ga_placement_hash("") == 0xcbf29ce484222325ull);
    assert_true(ga_placement_hash("a") == 0xaf63dc4c8601ec8cull);
    assert_true(ga_placement_hash("foobar") == 0x85944171f73967e8ull);
    const uint32_t shard_counts[] = {2, 3, 4, 8};
    enum { NAMES = 2000 };
    for (size_t s = 0; s < COUNT(shard_counts); s++) {
        uint32_t ns = shard_counts[s], load[8] = {0};
        for (int i = 0; i < NAMES; i++) {
            char name[64];
            snprintf(name, sizeof name, "layer%d.%s", i / 2, i % 2 ? "bias" : "weight");
            ga_placement_piece p[GA_PLACEMENT_MAX_SHARDS];
            assert_int_equal(ga_placement_plan(name, 100, 1024, 1u << 20, ns, p), 1);
            assert_int_equal(p[0].shard, ga_placement_hash(name) % ns);
            load[p[0].shard]++;
        }
        for (uint32_t k = 0; k < ns; k++) { /* within 20% of an even share */
            assert_true(load[k] * ns * 10 >= NAMES * 8);
            assert_true(load[k] * ns * 10 <= NAMES * 12);
        }
    }
}

static void piece_names(void **state)
{
    (void)state;
    char buf[32];
    assert_int_equal(ga_placement_piece_name("w", 2, 3, buf, sizeof buf), 5);
    assert_string_equal(buf, "w@2/3");
    assert_int_equal(ga_placement_piece_name("fc.weight", 0, 12, buf, sizeof buf), 14);
    assert_string_equal(buf, "fc.weight@0/12");
    /* The length it needs, whatever the room. */
    assert_int_equal(ga_placement_piece_name("fc.weight", 10, 12, NULL, 0), 15);
    assert_int_equal(ga_placement_piece_name("fc.weight", 10, 12, buf, 4), 15);
    assert_string_equal(buf, "fc.");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_shard_is_the_identity),
        cmocka_unit_test(splits_cover_aligned_ranges),
        cmocka_unit_test(units_are_codec_blocks_or_topk_chunks),
        cmocka_unit_test(topk_pieces_keep_the_tensor_chunks),
        cmocka_unit_test(small_tensors_spread_by_name),
        cmocka_unit_test(piece_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
