/* The relay's view of a job (service/core/relay.c): the --relay-codec text, a job's place from its
 * first Join, the local job's settings and the rank mapping; each refusal with its own status
 * and a message naming the value. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/job.h"
#include "core/relay.h"

static ga_relay_options options(void)
{
    ga_relay_options r = {.upstream = "10.0.0.1:7070", .workers = 4};
    r.codec = GA_CODEC_NONE;
    r.params = ga_codec_params_default(GA_CODEC_NONE);
    return r;
}

static void test_codec_texts(void **state)
{
    (void)state;
    ga_relay_options r = options();
    char why[200];
    assert_int_equal(ga_relay_parse_codec("2bit:0.25", &r, why, sizeof why), GA_OK);
    assert_int_equal(r.codec, GA_CODEC_2BIT);
    assert_true(r.params.threshold == 0.25f && !r.auto_threshold);
    assert_int_equal(ga_relay_parse_codec("2bit:auto", &r, why, sizeof why), GA_OK);
    assert_true(r.auto_threshold);
    assert_int_equal(ga_relay_parse_codec("topk:0.01", &r, why, sizeof why), GA_OK);
    assert_true(r.codec == GA_CODEC_TOPK && r.params.ratio == 0.01f && !r.auto_threshold);
    assert_int_equal(ga_relay_parse_codec("fp16", &r, why, sizeof why), GA_OK);
    assert_int_equal(r.codec, GA_CODEC_FP16);
    static const struct { const char *text, *says; } bad[] = {
        {"", "no codec name"}, {"zip", "unknown codec 'zip'"}, {"fp16:2", "take a value"},
        {"2bit:x", "take a value"}, {"topk:auto", "take a value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ga_relay_parse_codec(bad[i].text, &r, why, sizeof why), GA_E_CONFIG);
        if (!strstr(why, bad[i].says)) fail_msg("'%s': %s", bad[i].text, why);
    }
    assert_int_equal(ga_relay_parse_codec("2bit:-1", &r, why, sizeof why), GA_OK);
    assert_int_equal(ga_relay_check(&r, why, sizeof why), GA_E_CONFIG); /* the threshold, checked whole */
    assert_non_null(strstr(why, "--relay-codec 2bit"));
}

static void test_place_from_the_first_join(void **state)
{
    (void)state;
    ga_relay_options r = options();
    char why[200];
    ga_relay_place p;
    assert_int_equal(ga_relay_place_of(&r, 6, 8, &p, why, sizeof why), GA_OK); /* node = rank / K */
    assert_true(p.node == 1 && p.nodes == 2 && p.workers == 4);
    assert_int_equal(ga_relay_place_of(&r, 6, 10, &p, why, sizeof why), GA_E_CONFIG);
    assert_non_null(strstr(why, "world_size 10 is not a number of nodes x 4"));
    r.nodes = 3;
    assert_int_equal(ga_relay_place_of(&r, 6, 8, &p, why, sizeof why), GA_E_CONFIG);
    assert_non_null(strstr(why, "world_size 8 is not --relay-nodes x 4"));
    r.nodes = 0;
    r.node_given = true;
    r.node = 0;
    assert_int_equal(ga_relay_place_of(&r, 6, 8, &p, why, sizeof why), GA_E_RANK);
    assert_non_null(strstr(why, "rank 6 is not on this node: its relay serves ranks 0..3"));
    r.node = 2;
    assert_int_equal(ga_relay_place_of(&r, 9, 8, &p, why, sizeof why), GA_E_CONFIG);
    assert_non_null(strstr(why, "--relay-node 2 is not below the job's 2 nodes"));
}

static void test_rank_mapping(void **state)
{
    (void)state;
    ga_relay_place p = {1, 2, 4};
    char why[200];
    for (uint32_t g = 0; g < 12; g++) {
        uint32_t r = g;
        ga_status st = ga_relay_map_rank(&p, &r, why, sizeof why);
        if (g >= 4 && g < 8) {
            assert_int_equal(st, GA_OK);
            assert_int_equal(r, g - 4);
        } else {
            assert_int_equal(st, GA_E_RANK);
            assert_int_equal(r, g); /* unchanged */
        }
    }
}

static void test_local_settings(void **state)
{
    (void)state;
    ga_relay_place p = {0, 2, 4};
    char why[200];
    ga_job_settings s = {.world = 8, .quorum = 6};
    s.store.optim = GA_OPTIM_ADAM;
    s.store.mean = true;
    s.store.pull_codec = GA_CODEC_2BIT;
    assert_int_equal(ga_relay_localize(&p, &s, why, sizeof why), GA_OK);
    assert_int_equal(s.world, 4);
    assert_int_equal(s.quorum, 3); /* ceil(6 * 4 / 8) */
    assert_true(s.store.optim == GA_OPTIM_REDUCE && !s.store.mean && s.store.pull_codec == GA_CODEC_NONE);
    assert_int_equal(ga_relay_upstream_quorum(&p, 6), 2); /* ceil(6 * 2 / 8) */
    assert_int_equal(ga_relay_upstream_quorum(&p, 1), 1);
    static const struct { ga_job_settings s; const char *says; } bad[] = {
        {{.world = 8, .async = true}, "async"},
        {{.world = 8, .min_world = 2}, "elastic"},
        {{.world = 8, .staleness = 1}, "staleness 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ga_job_settings b = bad[i].s;
        assert_int_equal(ga_relay_localize(&p, &b, why, sizeof why), GA_E_CONFIG);
        if (!strstr(why, bad[i].says)) fail_msg("%s", why);
        assert_int_equal(b.world, 8); /* unchanged */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_texts),
        cmocka_unit_test(test_place_from_the_first_join),
        cmocka_unit_test(test_rank_mapping),
        cmocka_unit_test(test_local_settings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
