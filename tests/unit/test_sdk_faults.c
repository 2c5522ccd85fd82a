/* The SDK after a push whose fate it could not know, against the in-process fake server
 * (fake_server.h): the server counted the push but its answer was lost, the step failed with
 * GA_E_UNAVAILABLE (no retries), and the next call pushes the same step with new gradients.
 * The server answers that push as a duplicate; those gradients were not counted, so the SDK
 * must keep them (folded back, reported as a late push) and send them with the next step:
 * everything the caller got GA_OK for is counted exactly once. A duplicate that the call's own
 * retry caused (its first attempt was counted, its answer lost) is not folded back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "client_internal.h"
#include "fake_server.h"
#include "gradagg.h"
#include "test_memory.h"

#define N 3000

/* Small integers: every sum below is exact, whatever its order. */
static float grad(int call, size_t i) { return (float)((int)((i * 7 + (size_t)call * 13) % 9) - 4); }

typedef struct worker {
    ga_client *c;
    float p[N], g[N];
} worker;

static void open_worker(worker *w, ga_codec_id codec, uint32_t retries)
{
    memset(w, 0, sizeof *w);
    ga_client_options o = GA_CLIENT_OPTIONS_INIT;
    o.server = "fake";
    o.job = "job";
    o.world_size = 1;
    o.chunk_bytes = 4096;
    o.backoff_ms = 1;
    o.backoff_max_ms = 2;
    o.max_retries = retries;
    o.step_timeout_ms = 5000;
    o.threads = 1;
    char msg[256];
    assert_int_equal(ga_client_create(&o, &w->c, msg, sizeof msg), GA_OK);
    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    t.codec = codec;
    if (codec == GA_CODEC_2BIT) t.params.threshold = 1.0f;
    uint64_t shape[1] = {N};
    assert_int_equal(ga_client_add_tensor(w->c, "p", shape, 1, w->p, &t, NULL), GA_OK);
    assert_int_equal(ga_client_init(w->c), GA_OK);
}

static ga_status step(worker *w, int call)
{
    for (size_t i = 0; i < N; i++) w->g[i] = grad(call, i);
    const float *g[1] = {w->g};
    return ga_client_step(w->c, g);
}

/* The server's sum of committed pushes plus what the worker still holds back equals the sum of
 * the gradients of `calls` (a bitmask of call numbers). */
static void expect_counted_once(const worker *w, unsigned calls)
{
    static float pushed[N];
    assert_true(fake_server_pushed_sum("p", pushed, N));
    const ga_tensor *t = &w->c->tensors[0];
    const float *held = t->residual ? t->residual : t->late_pending ? t->late : NULL;
    for (size_t i = 0; i < N; i++) {
        float want = 0.0f;
        for (int k = 0; k < 16; k++)
            if (calls & (1u << k)) want += grad(k, i);
        float got = pushed[i] + (held ? held[i] : 0.0f);
        if (got != want) fail_msg("element %zu: counted + held %g, gradients %g", i, (double)got, (double)want);
    }
}

static void stale_duplicate_folded(ga_codec_id codec)
{
    fake_server_reset(1000, GA_CODEC_COUNT);
    static worker w;
    open_worker(&w, codec, 0);
    assert_int_equal(step(&w, 0), GA_OK);
    /* Call 1: counted, its answer lost, no retry: a status of unknown fate. */
    fake_faults f = {.push_ack_lost = 1, .late_rank = -1};
    fake_server_set_faults(&f);
    assert_int_equal(step(&w, 1), GA_E_UNAVAILABLE);
    /* Call 2 pushes the same step: a duplicate of call 1. */
    assert_int_equal(step(&w, 2), GA_OK);
    fake_counters k = fake_server_counters();
    assert_int_equal(k.commits, 2);
    assert_int_equal(k.duplicates, 1);
    ga_client_stats st;
    ga_client_get_stats(w.c, &st);
    assert_int_equal(st.late_pushes, 1); /* held back, not lost */
    expect_counted_once(&w, 0x7);
    /* Call 3 carries call 2's gradients with its own. */
    assert_int_equal(step(&w, 3), GA_OK);
    k = fake_server_counters();
    assert_int_equal(k.commits, 3);
    expect_counted_once(&w, 0xF);
    if (codec == GA_CODEC_NONE) assert_false(w.c->tensors[0].late_pending); /* all of it went out */
    ga_client_destroy(w.c);
}

static void stale_duplicate_none(void **state)
{
    (void)state;
    stale_duplicate_folded(GA_CODEC_NONE);
}

static void stale_duplicate_2bit(void **state)
{
    (void)state;
    stale_duplicate_folded(GA_CODEC_2BIT);
}

/* The call's own retry finds its first attempt counted: nothing is folded back. */
static void own_retry_not_folded(void **state)
{
    (void)state;
    fake_server_reset(1000, GA_CODEC_COUNT);
    static worker w;
    open_worker(&w, GA_CODEC_NONE, 3);
    assert_int_equal(step(&w, 0), GA_OK);
    fake_faults f = {.push_ack_lost = 1, .late_rank = -1};
    fake_server_set_faults(&f);
    assert_int_equal(step(&w, 1), GA_OK);
    fake_counters k = fake_server_counters();
    assert_int_equal(k.commits, 2);
    assert_int_equal(k.duplicates, 1);
    ga_client_stats st;
    ga_client_get_stats(w.c, &st);
    assert_int_equal(st.late_pushes, 0);
    assert_false(w.c->tensors[0].late_pending);
    expect_counted_once(&w, 0x3);
    ga_client_destroy(w.c);
}

static int teardown(void **state)
{
    (void)state;
    fake_server_clear();
    return 0;
}

int main(void)
{
    test_memory_baseline();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(stale_duplicate_none, teardown),
        cmocka_unit_test_teardown(stale_duplicate_2bit, teardown),
        cmocka_unit_test_teardown(own_retry_not_folded, teardown),
        cmocka_unit_test(test_host_memory_returned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
