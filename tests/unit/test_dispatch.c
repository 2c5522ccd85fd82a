/* Dispatch and health without a network: the handler table driven by hand with in-memory calls
 * (fake_call.c), the real control loop on its own thread, the real core. Checks that requests,
 * finished streams and cancels reach their owner on the loop, that health's Check and Watch
 * follow its status, and that every call is finished exactly once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "test_memory.h"

#include "api/dispatch.h"
#include "api/health.h"
#include "core/core.h"
#include "fake_call.h"
#include "ga_wire.h"
#include "transport/loop.h"

typedef struct fixture {
    ga_loop *loop;
    uv_thread_t thread;
    ga_core *core;
    ga_health *health;
    ga_dispatch *dispatch;
    const ga_rpc_handlers *h;
    uv_mutex_t mu;
    uv_cond_t cv;
    bool flag;
    bool seen; /* wait_until's copy of its flag, taken on the loop */
} fixture;

static fixture fx;

static void loop_thread(void *arg)
{
    (void)arg;
    ga_loop_run(fx.loop);
}

static void raise_flag(void *arg)
{
    (void)arg;
    uv_mutex_lock(&fx.mu);
    fx.flag = true;
    uv_cond_signal(&fx.cv);
    uv_mutex_unlock(&fx.mu);
}

/* Runs fn(arg) on the loop and waits until it and everything posted before it have run: then
 * this thread may read what the loop wrote. */
static void on_loop(void (*fn)(void *), void *arg)
{
    uv_mutex_lock(&fx.mu);
    fx.flag = false;
    uv_mutex_unlock(&fx.mu);
    if (fn) assert_int_equal(ga_loop_post(fx.loop, fn, arg), GA_OK);
    assert_int_equal(ga_loop_post(fx.loop, raise_flag, NULL), GA_OK);
    uv_mutex_lock(&fx.mu);
    while (!fx.flag) uv_cond_wait(&fx.cv, &fx.mu);
    uv_mutex_unlock(&fx.mu);
}

static void copy_flag(void *arg) { fx.seen = *(const bool *)arg; }

/* Until *flag (written on the loop) is true: the core's math runs on libuv's thread pool and
 * finishes a call a few loop turns later. The flag is read on the loop: the loop may write it
 * at any time after on_loop returns. */
static void wait_until(const bool *flag)
{
    for (int i = 0; i < 5000; i++) {
        on_loop(copy_flag, (void *)flag);
        if (fx.seen) return;
        uv_sleep(1);
    }
    fail_msg("the loop never got there");
}

static void set_serving(void *arg) { ga_health_set_all(fx.health, *(ga_serving *)arg); }
static void close_health(void *arg) { (void)arg; ga_health_close(fx.health, GA_E_DRAINING); }

static void drained(void *arg) { *(bool *)arg = true; }
static void drain_core(void *arg) { ga_core_drain(fx.core, drained, arg); }

static void teardown_on_loop(void *arg)
{
    (void)arg;
    ga_core_destroy(fx.core);
    ga_health_destroy(fx.health);
    ga_dispatch_destroy(fx.dispatch);
    ga_loop_stop(fx.loop);
}

static int setup(void **state)
{
    (void)state;
    memset(&fx, 0, sizeof fx);
    uv_mutex_init(&fx.mu);
    uv_cond_init(&fx.cv);
    assert_int_equal(ga_loop_create(&fx.loop), GA_OK);
    ga_core_options co = GA_CORE_OPTIONS_INIT;
    co.max_memory_bytes = 64u << 20;
    assert_int_equal(ga_core_create(&co, ga_loop_uv(fx.loop), &fx.core), GA_OK);
    assert_int_equal(ga_health_create(&fx.health), GA_OK);
    const ga_stream_limits limits = {64, 64, 64, NULL};
    assert_int_equal(ga_dispatch_create(fx.loop, fx.core, fx.health, 1u << 20, &limits, &fx.dispatch), GA_OK);
    fx.h = ga_dispatch_handlers(fx.dispatch);
    assert_int_equal(uv_thread_create(&fx.thread, loop_thread, NULL), 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bool done = false;
    on_loop(drain_core, &done);
    wait_until(&done);
    assert_int_equal(ga_loop_post(fx.loop, teardown_on_loop, NULL), GA_OK);
    uv_thread_join(&fx.thread);
    ga_loop_destroy(fx.loop);
    uv_cond_destroy(&fx.cv);
    uv_mutex_destroy(&fx.mu);
    return 0;
}

static ProtobufCMessage *health_req(const char *service)
{
    Grpc__Health__V1__HealthCheckRequest r = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    r.service = (char *)service;
    return fake_wire_copy(&r.base);
}

/* The serving status in message i of a watch, or in the response of a check (i = -1). */
static int serving_of(const ga_call *c, int i)
{
    const ProtobufCMessageDescriptor *d = &grpc__health__v1__health_check_response__descriptor;
    ProtobufCMessage *m = i < 0 ? fake_call_response(c, d) : fake_call_message(c, (size_t)i, d);
    assert_non_null(m);
    int v = ((Grpc__Health__V1__HealthCheckResponse *)m)->status;
    protobuf_c_message_free_unpacked(m, NULL);
    return v;
}

static void test_health_check_and_watch(void **state)
{
    (void)state;
    ga_call *check = fake_call_new();
    fx.h->on_request(fx.h->ctx, check, GA_METHOD_HEALTH_CHECK, health_req(""));
    on_loop(NULL, NULL);
    assert_true(check->finished);
    assert_int_equal(check->status, GA_OK);
    assert_int_equal(serving_of(check, -1), GA_NOT_SERVING); /* until the server says otherwise */

    ga_serving serving = GA_SERVING;
    on_loop(set_serving, &serving);
    ga_call *check2 = fake_call_new();
    fx.h->on_request(fx.h->ctx, check2, GA_METHOD_HEALTH_CHECK, health_req("gradagg.v1.Aggregator"));
    ga_call *unknown = fake_call_new();
    fx.h->on_request(fx.h->ctx, unknown, GA_METHOD_HEALTH_CHECK, health_req("nope"));
    on_loop(NULL, NULL);
    assert_int_equal(serving_of(check2, -1), GA_SERVING);
    assert_true(unknown->finished);
    assert_int_equal(unknown->status, GA_E_UNKNOWN_SERVICE);
    assert_int_equal(ga_wire_grpc_code(unknown->status), GRPC_STATUS_NOT_FOUND);
    assert_non_null(strstr(unknown->message, "'nope'"));

    /* Watches: the current status at once, then each change once. */
    ga_call *w_all = fake_call_new(), *w_svc = fake_call_new(), *w_unknown = fake_call_new();
    fx.h->on_request(fx.h->ctx, w_all, GA_METHOD_HEALTH_WATCH, health_req(""));
    fx.h->on_request(fx.h->ctx, w_svc, GA_METHOD_HEALTH_WATCH, health_req("gradagg.v1.Aggregator"));
    fx.h->on_request(fx.h->ctx, w_unknown, GA_METHOD_HEALTH_WATCH, health_req("nope"));
    on_loop(NULL, NULL);
    assert_int_equal(w_all->nmsgs, 1);
    assert_int_equal(serving_of(w_all, 0), GA_SERVING);
    assert_int_equal(serving_of(w_unknown, 0), GA_SERVICE_UNKNOWN);
    assert_false(w_unknown->finished); /* stays open */
    assert_int_equal(ga_health_watches(fx.health), 3);

    on_loop(set_serving, &serving); /* SERVING again: no change, nothing sent */
    assert_int_equal(w_all->nmsgs, 1);
    serving = GA_NOT_SERVING;
    on_loop(set_serving, &serving);
    assert_int_equal(w_all->nmsgs, 2);
    assert_int_equal(serving_of(w_all, 1), GA_NOT_SERVING);
    assert_int_equal(w_svc->nmsgs, 2);
    assert_int_equal(w_unknown->nmsgs, 1);

    /* The client of one watch goes: the cancel goes through the loop to health. */
    fx.h->on_cancel(fx.h->ctx, w_svc);
    on_loop(NULL, NULL);
    assert_true(w_svc->finished);
    assert_int_equal(w_svc->status, GA_E_CANCELLED);
    assert_int_equal(ga_health_watches(fx.health), 2);
    assert_false(w_all->finished);

    /* Close (the drain): every watch ends; a later watch gets the status and ends at once. */
    on_loop(close_health, NULL);
    assert_true(w_all->finished && w_unknown->finished);
    assert_int_equal(w_all->status, GA_E_DRAINING);
    ga_call *late = fake_call_new();
    fx.h->on_request(fx.h->ctx, late, GA_METHOD_HEALTH_WATCH, health_req(""));
    on_loop(NULL, NULL);
    assert_int_equal(late->nmsgs, 1);
    assert_int_equal(serving_of(late, 0), GA_NOT_SERVING);
    assert_true(late->finished);
    assert_int_equal(late->status, GA_E_DRAINING);

    ga_call *all[] = {check, check2, unknown, w_all, w_svc, w_unknown, late};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        assert_int_equal(all[i]->misuse, 0);
        fake_call_free(all[i]);
    }
}

static void test_core_calls_and_cancel(void **state)
{
    (void)state;
    Gradagg__V1__JobConfig jc = GRADAGG__V1__JOB_CONFIG__INIT;
    jc.world_size = 2;
    Gradagg__V1__JoinRequest jr = GRADAGG__V1__JOIN_REQUEST__INIT;
    jr.job = "j";
    jr.incarnation = 7;
    jr.config = &jc;
    ga_call *join = fake_call_new();
    fx.h->on_request(fx.h->ctx, join, GA_METHOD_JOIN, fake_wire_copy(&jr.base));

    Gradagg__V1__PullRequest pr = GRADAGG__V1__PULL_REQUEST__INIT;
    pr.job = "j";
    pr.incarnation = 7;
    pr.min_version = 1;
    ga_call *pull = fake_call_new();
    fx.h->on_request(fx.h->ctx, pull, GA_METHOD_PULL, fake_wire_copy(&pr.base));
    on_loop(NULL, NULL);
    assert_true(join->finished);
    assert_int_equal(join->status, GA_OK);
    assert_false(pull->finished); /* waits for version 1 */

    /* Its client goes: the cancel reaches the core, which finishes the pull. */
    fx.h->on_cancel(fx.h->ctx, pull);
    on_loop(NULL, NULL);
    assert_true(pull->finished);
    assert_int_equal(pull->status, GA_E_CANCELLED);
    /* A second cancel of a finished call is ignored by both owners. */
    fx.h->on_cancel(fx.h->ctx, pull);
    on_loop(NULL, NULL);
    assert_int_equal(pull->misuse, 0);

    /* A client-stream method never arrives as a request; if it did, it is refused. */
    Gradagg__V1__PushChunk pc = GRADAGG__V1__PUSH_CHUNK__INIT;
    ga_call *odd = fake_call_new();
    fx.h->on_request(fx.h->ctx, odd, GA_METHOD_PUSH, fake_wire_copy(&pc.base));
    assert_true(odd->finished);
    assert_int_equal(odd->status, GA_E_UNIMPLEMENTED);

    /* Streams: a bad chunk is refused on the calling thread with a message; an empty stream is
     * refused without reaching the core; a good one reaches the core at its end. */
    void *stream = NULL;
    char why[256] = "";
    ga_call *push = fake_call_new();
    assert_int_not_equal(fx.h->on_stream_message(fx.h->ctx, push, GA_METHOD_PUSH, fake_wire_copy(&pc.base), &stream,
                                                 why, sizeof why),
                         GA_OK);
    assert_true(strlen(why) > 0);
    assert_null(stream);
    fx.h->on_stream_abort(fx.h->ctx, push, GA_METHOD_PUSH, stream);
    ga_call *empty = fake_call_new();
    fx.h->on_stream_end(fx.h->ctx, empty, GA_METHOD_PUSH, NULL);
    assert_true(empty->finished);
    assert_int_equal(empty->status, GA_E_INVAL);

    uint64_t shape[] = {2};
    Gradagg__V1__InitChunk ic = GRADAGG__V1__INIT_CHUNK__INIT;
    ic.job = "j";
    ic.incarnation = 7;
    ic.tensor = "t";
    ic.n_shape = 1;
    ic.shape = shape;
    ic.count = 2;
    ga_call *init = fake_call_new();
    stream = NULL;
    assert_int_equal(fx.h->on_stream_message(fx.h->ctx, init, GA_METHOD_INIT, fake_wire_copy(&ic.base), &stream, why,
                                             sizeof why),
                     GA_OK);
    assert_non_null(stream);
    fx.h->on_stream_end(fx.h->ctx, init, GA_METHOD_INIT, stream);
    wait_until(&init->finished);
    assert_int_equal(init->status, GA_OK);

    /* A stream that breaks after a good chunk: its bundle is freed, nothing is committed. */
    ga_call *broken = fake_call_new();
    stream = NULL;
    assert_int_equal(fx.h->on_stream_message(fx.h->ctx, broken, GA_METHOD_INIT, fake_wire_copy(&ic.base), &stream,
                                             why, sizeof why),
                     GA_OK);
    fx.h->on_stream_abort(fx.h->ctx, broken, GA_METHOD_INIT, stream);

    /* A stream for a job that does not exist is refused at its first chunk, while it is still
     * open: the client learns at once, and the server holds none of it past the refusal. */
    float grad[2] = {1.0f, 2.0f};
    Gradagg__V1__PushChunk unknown = GRADAGG__V1__PUSH_CHUNK__INIT;
    unknown.job = "no-such-job";
    unknown.incarnation = 7;
    unknown.tensor = "t";
    unknown.count = 2;
    unknown.payload = (ProtobufCBinaryData){sizeof grad, (uint8_t *)grad};
    ga_call *early = fake_call_new();
    stream = NULL;
    assert_int_equal(fx.h->on_stream_message(fx.h->ctx, early, GA_METHOD_PUSH, fake_wire_copy(&unknown.base), &stream,
                                             why, sizeof why),
                     GA_OK);
    assert_non_null(stream);
    wait_until(&early->finished);
    assert_true(early->refused);
    assert_int_equal(early->status, GA_E_UNKNOWN_JOB);
    assert_non_null(strstr(early->message, "job 'no-such-job' does not exist"));
    fx.h->on_stream_abort(fx.h->ctx, early, GA_METHOD_PUSH, stream); /* what the transport does next */
    on_loop(NULL, NULL); /* every posted check has run: the calls may go */

    ga_call *all[] = {join, pull, odd, push, empty, init, broken, early};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        assert_int_equal(all[i]->misuse, 0);
        fake_call_free(all[i]);
    }
}

int main(void)
{
    test_memory_baseline();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_health_check_and_watch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_core_calls_and_cancel, setup, teardown),
        cmocka_unit_test(test_host_memory_returned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
