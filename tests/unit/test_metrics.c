/* The Prometheus text writer (service/metrics/metrics.h): exact text for a small registry, label and
 * HELP escaping (job names are user input), invalid UTF-8, cumulative histogram buckets, number
 * spellings, the call counters and their reasons. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "test_memory.h"

#include "metrics/metrics.h"

static void small_registry_exact_text(void **state)
{
    (void)state;
    ga_metrics_text t = GA_METRICS_TEXT_INIT;
    ga_metrics_family(&t, "gradagg_jobs", "gauge", "Jobs on this server.");
    ga_metrics_u64(&t, "gradagg_jobs", NULL, 0, 2);
    ga_metrics_family(&t, "gradagg_steps_total", "counter", "Versions published.");
    ga_label a = {"job", "a"}, b = {"job", "b"};
    ga_metrics_u64(&t, "gradagg_steps_total", &a, 1, 18446744073709551615ull);
    ga_metrics_u64(&t, "gradagg_steps_total", &b, 1, 0);
    ga_metrics_family(&t, "gradagg_checkpoint_age_seconds", "gauge", "Age.");
    ga_label two[2] = {{"job", "a"}, {"codec", "2bit"}};
    ga_metrics_double(&t, "gradagg_checkpoint_age_seconds", two, 2, 0.1);
    ga_metrics_double(&t, "gradagg_checkpoint_age_seconds", &a, 1, 1.5e-7);
    ga_metrics_double(&t, "gradagg_checkpoint_age_seconds", &b, 1, 3);
    ga_metrics_double(&t, "x", NULL, 0, INFINITY);
    ga_metrics_double(&t, "x", NULL, 0, -INFINITY);
    ga_metrics_double(&t, "x", NULL, 0, NAN);
    assert_false(t.failed);
    assert_string_equal(t.data,
                        "# HELP gradagg_jobs Jobs on this server.\n"
                        "# TYPE gradagg_jobs gauge\n"
                        "gradagg_jobs 2\n"
                        "# HELP gradagg_steps_total Versions published.\n"
                        "# TYPE gradagg_steps_total counter\n"
                        "gradagg_steps_total{job=\"a\"} 18446744073709551615\n"
                        "gradagg_steps_total{job=\"b\"} 0\n"
                        "# HELP gradagg_checkpoint_age_seconds Age.\n"
                        "# TYPE gradagg_checkpoint_age_seconds gauge\n"
                        "gradagg_checkpoint_age_seconds{job=\"a\",codec=\"2bit\"} 0.1\n"
                        "gradagg_checkpoint_age_seconds{job=\"a\"} 1.5e-07\n"
                        "gradagg_checkpoint_age_seconds{job=\"b\"} 3\n"
                        "x +Inf\n"
                        "x -Inf\n"
                        "x NaN\n");
    assert_int_equal(t.len, strlen(t.data));
    ga_metrics_text_free(&t);
    assert_null(t.data);
    assert_int_equal(t.len, 0);
}

/* Label values escape backslash, double quote and newline, in that spelling; HELP escapes
 * backslash and newline but leaves quotes. */
static void escaping(void **state)
{
    (void)state;
    ga_metrics_text t = GA_METRICS_TEXT_INIT;
    ga_metrics_family(&t, "m", "gauge", "a \"quoted\" back\\slash\nnewline");
    ga_label l = {"job", "a\"b\\c\nd"};
    ga_metrics_u64(&t, "m", &l, 1, 1);
    assert_string_equal(t.data,
                        "# HELP m a \"quoted\" back\\\\slash\\nnewline\n"
                        "# TYPE m gauge\n"
                        "m{job=\"a\\\"b\\\\c\\nd\"} 1\n");
    ga_metrics_text_free(&t);
}

/* A job name is whatever a client sent: bytes that are not UTF-8 become U+FFFD, valid
 * multi-byte characters pass unchanged, so the scrape always parses. */
static void invalid_utf8_replaced(void **state)
{
    (void)state;
    ga_metrics_text t = GA_METRICS_TEXT_INIT;
    ga_label l[4] = {
        {"a", "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"}, /* é € 😀 */
        {"b", "x\xFFy"},                                    /* a stray byte */
        {"c", "\xC0\xAF"},                                  /* an overlong '/' */
        {"d", "\xED\xA0\x80\xE2\x82"},                      /* a surrogate, then a cut sequence */
    };
    ga_metrics_u64(&t, "m", l, 4, 7);
    assert_string_equal(t.data, "m{a=\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\","
                                "b=\"x\xEF\xBF\xBDy\","
                                "c=\"\xEF\xBF\xBD\xEF\xBF\xBD\","
                                "d=\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"} 7\n");
    ga_metrics_text_free(&t);
}

/* Buckets are cumulative, a value equal to a bound falls in that bound's bucket, +Inf is last
 * and equals _count. */
static void histogram_cumulative(void **state)
{
    (void)state;
    static const double bounds[] = {0.001, 0.01, 1, 60};
    ga_histogram h;
    ga_histogram_init(&h, bounds, 4);
    ga_histogram_observe(&h, 0.001);
    ga_histogram_observe(&h, 0.0005);
    ga_histogram_observe(&h, 0.5);
    ga_histogram_observe(&h, 0.25);
    ga_histogram_observe(&h, 100);
    assert_int_equal(h.count, 5);
    ga_metrics_text t = GA_METRICS_TEXT_INIT;
    ga_label l = {"job", "j"};
    ga_metrics_histogram(&t, "gradagg_step_duration_seconds", &l, 1, &h);
    ga_metrics_histogram(&t, "bare_seconds", NULL, 0, &h);
    assert_string_equal(t.data,
                        "gradagg_step_duration_seconds_bucket{job=\"j\",le=\"0.001\"} 2\n"
                        "gradagg_step_duration_seconds_bucket{job=\"j\",le=\"0.01\"} 2\n"
                        "gradagg_step_duration_seconds_bucket{job=\"j\",le=\"1\"} 4\n"
                        "gradagg_step_duration_seconds_bucket{job=\"j\",le=\"60\"} 4\n"
                        "gradagg_step_duration_seconds_bucket{job=\"j\",le=\"+Inf\"} 5\n"
                        "gradagg_step_duration_seconds_sum{job=\"j\"} 100.7515\n"
                        "gradagg_step_duration_seconds_count{job=\"j\"} 5\n"
                        "bare_seconds_bucket{le=\"0.001\"} 2\n"
                        "bare_seconds_bucket{le=\"0.01\"} 2\n"
                        "bare_seconds_bucket{le=\"1\"} 4\n"
                        "bare_seconds_bucket{le=\"60\"} 4\n"
                        "bare_seconds_bucket{le=\"+Inf\"} 5\n"
                        "bare_seconds_sum 100.7515\n"
                        "bare_seconds_count 5\n");
    ga_metrics_text_free(&t);
}

/* The step bounds cover 1 ms .. 60 s, ascending, within the fixed table. */
static void step_bounds(void **state)
{
    (void)state;
    assert_true(ga_metrics_step_nbounds <= GA_HISTOGRAM_MAX_BOUNDS);
    assert_true(ga_metrics_step_bounds[0] == 0.001);
    assert_true(ga_metrics_step_bounds[ga_metrics_step_nbounds - 1] == 60);
    for (size_t i = 1; i < ga_metrics_step_nbounds; i++)
        assert_true(ga_metrics_step_bounds[i] > ga_metrics_step_bounds[i - 1]);
}

/* Large output grows the buffer; the text stays exact. */
static void grows(void **state)
{
    (void)state;
    ga_metrics_text t = GA_METRICS_TEXT_INIT;
    char name[300];
    memset(name, 'j', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    ga_label l = {"job", name};
    for (int i = 0; i < 200; i++) ga_metrics_u64(&t, "m", &l, 1, (uint64_t)i);
    assert_false(t.failed);
    size_t line = strlen("m{job=\"\"} ") + 299 + 1;
    size_t want = 0;
    for (int i = 0; i < 200; i++) want += line + (i < 10 ? 1 : i < 100 ? 2 : 3);
    assert_int_equal(t.len, want);
    assert_non_null(strstr(t.data, "\"} 199\n"));
    ga_metrics_text_free(&t);
}

static void reasons(void **state)
{
    (void)state;
    char buf[64];
    assert_string_equal(ga_metrics_reason(GA_E_STEP_CLOSED, buf, sizeof buf), "step_closed");
    assert_string_equal(ga_metrics_reason(GA_E_LIMIT, buf, sizeof buf), "limit");
    assert_string_equal(ga_metrics_reason(GA_E_SHAPE, buf, sizeof buf), "shape");
    assert_string_equal(ga_metrics_reason(GA_E_STEP_CLOSED, buf, 5), "step");
}

/* Process-wide counters: this is the only test that counts, so the values are exact. */
static void call_counters(void **state)
{
    (void)state;
    ga_metrics_text t = GA_METRICS_TEXT_INIT;
    ga_metrics_write_calls(&t);
    assert_string_equal(t.data,
                        "# HELP gradagg_rpcs_total Finished RPCs by method and gRPC status code.\n"
                        "# TYPE gradagg_rpcs_total counter\n"
                        "# HELP gradagg_rejected_requests_total Requests refused, by reason (the gradagg status, "
                        "lower case, without E_).\n"
                        "# TYPE gradagg_rejected_requests_total counter\n");
    ga_metrics_text_free(&t);
    ga_metrics_count_call(GA_METHOD_PUSH, GA_OK);
    ga_metrics_count_call(GA_METHOD_PUSH, GA_OK);
    ga_metrics_count_call(GA_METHOD_PUSH, GA_E_STEP_CLOSED);
    ga_metrics_count_call(GA_METHOD_JOIN, GA_E_SHAPE);
    ga_metrics_count_call(GA_METHOD_INIT, GA_E_SHAPE);
    ga_metrics_count_call(GA_METHODS, GA_E_UNIMPLEMENTED); /* a method the server does not know */
    ga_metrics_count_call(-3, GA_E_UNIMPLEMENTED);
    ga_metrics_count_call(GA_METHOD_HEALTH_WATCH, (ga_status)-999); /* not in the table */
    ga_metrics_write_calls(&t);
    assert_string_equal(t.data,
                        "# HELP gradagg_rpcs_total Finished RPCs by method and gRPC status code.\n"
                        "# TYPE gradagg_rpcs_total counter\n"
                        "gradagg_rpcs_total{method=\"Join\",code=\"FAILED_PRECONDITION\"} 1\n"
                        "gradagg_rpcs_total{method=\"InitTensors\",code=\"FAILED_PRECONDITION\"} 1\n"
                        "gradagg_rpcs_total{method=\"Push\",code=\"OK\"} 2\n"
                        "gradagg_rpcs_total{method=\"Push\",code=\"ABORTED\"} 1\n"
                        "gradagg_rpcs_total{method=\"Watch\",code=\"UNKNOWN\"} 1\n"
                        "gradagg_rpcs_total{method=\"unknown\",code=\"UNIMPLEMENTED\"} 2\n"
                        "# HELP gradagg_rejected_requests_total Requests refused, by reason (the gradagg status, "
                        "lower case, without E_).\n"
                        "# TYPE gradagg_rejected_requests_total counter\n"
                        "gradagg_rejected_requests_total{reason=\"unimplemented\"} 2\n"
                        "gradagg_rejected_requests_total{reason=\"shape\"} 2\n"
                        "gradagg_rejected_requests_total{reason=\"step_closed\"} 1\n");
    ga_metrics_text_free(&t);
}

int main(void)
{
    test_memory_baseline();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(small_registry_exact_text),
        cmocka_unit_test(escaping),
        cmocka_unit_test(invalid_utf8_replaced),
        cmocka_unit_test(histogram_cumulative),
        cmocka_unit_test(step_bounds),
        cmocka_unit_test(grows),
        cmocka_unit_test(reasons),
        cmocka_unit_test(call_counters),
        cmocka_unit_test(test_host_memory_returned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
