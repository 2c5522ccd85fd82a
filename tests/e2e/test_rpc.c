/* The gRPC transport end to end: a real server (service/transport/rpc.h) on 127.0.0.1:0 with a small
 * handler table, spoken to through the SDK's call layer (client/rpc_client.h). Unary calls,
 * client streams committed only at a clean end, cancellation, handler errors, zero-copy server
 * streams, unknown methods, malformed bytes, message limits, port conflicts, shutdown with an
 * open stream, and concurrent calls. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep */
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "test_memory.h"

#include "base/blob.h"
#include "ga_alloc.h"
#include "ga_methods.h"
#include "ga_wire.h"
#include "rpc_client.h"
#include "transport/rpc.h"

#define DEADLINE_MS 5000u
#define SERVER_LIMIT (4u << 20)

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void sleep_ms(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static uint64_t fnv(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}
#define FNV_START 0xcbf29ce484222325ull

/* ---- a stand-in for the control loop: one thread that runs posted work ---- */

typedef struct work {
    struct work *next;
    void (*fn)(void *arg);
    void *arg;
} work;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    work *head, *tail;
    bool stop;
    pthread_t thread;
} loop = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, false, 0};

static void *loop_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&loop.mu);
    for (;;) {
        while (!loop.head && !loop.stop) pthread_cond_wait(&loop.cv, &loop.mu);
        if (!loop.head) break;
        work *w = loop.head;
        loop.head = w->next;
        if (!loop.head) loop.tail = NULL;
        pthread_mutex_unlock(&loop.mu);
        w->fn(w->arg);
        free(w);
        pthread_mutex_lock(&loop.mu);
    }
    pthread_mutex_unlock(&loop.mu);
    return NULL;
}

static void loop_post(void (*fn)(void *), void *arg)
{
    work *w = malloc(sizeof *w);
    assert_non_null(w);
    *w = (work){NULL, fn, arg};
    pthread_mutex_lock(&loop.mu);
    if (loop.tail) loop.tail->next = w;
    else loop.head = w;
    loop.tail = w;
    pthread_cond_signal(&loop.cv);
    pthread_mutex_unlock(&loop.mu);
}

/* ---- the handler table under test ---- */

static struct {
    pthread_mutex_t mu;
    int committed, aborted, cancels;
    int last_chunks;
    uint64_t last_bytes, last_sum;
    ga_call *watch; /* an open Watch, finished by on_cancel */
} T = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, 0, 0, NULL};

static int counter(const int *c)
{
    pthread_mutex_lock(&T.mu);
    int v = *c;
    pthread_mutex_unlock(&T.mu);
    return v;
}

static bool wait_counter(const int *c, int want, int ms)
{
    for (int i = 0; i < ms; i++) {
        if (counter(c) >= want) return true;
        sleep_ms(1);
    }
    return counter(c) >= want;
}

static atomic_int handler_faults;

typedef struct push_stream {
    int chunks;
    uint64_t bytes, sum;
} push_stream;

typedef struct pull_job {
    ga_call *call;
    uint64_t chunks, chunk_bytes, version;
} pull_job;

#define PULL_BYTE(i) ((uint8_t)((i) * 7u + 3u))

/* On the "loop" thread: every chunk lent from one blob, then the end. */
static void pull_run(void *arg)
{
    pull_job *j = arg;
    size_t total = (size_t)(j->chunks * j->chunk_bytes);
    ga_blob *b = ga_blob_create(total);
    for (size_t i = 0; i < total; i++) b->data[i] = PULL_BYTE(i);
    for (uint64_t k = 0; k < j->chunks; k++) {
        Gradagg__V1__PullChunk c = GRADAGG__V1__PULL_CHUNK__INIT;
        c.version = j->version;
        c.tensor = "w";
        c.offset = k * j->chunk_bytes;
        c.count = j->chunk_bytes;
        ga_call_send(j->call, &c.base, ga_blob_ref(b), (size_t)c.offset, (size_t)j->chunk_bytes);
    }
    ga_blob_unref(b);
    ga_call_finish(j->call, NULL, GA_OK, NULL);
    free(j);
}

typedef struct join_job {
    ga_call *call;
    uint32_t rank;
} join_job;

static void join_run(void *arg)
{
    join_job *j = arg;
    Gradagg__V1__JoinResponse r = GRADAGG__V1__JOIN_RESPONSE__INIT;
    r.version = 2u * j->rank;
    r.world_size = j->rank;
    ga_call_finish(j->call, &r.base, GA_OK, NULL);
    free(j);
}

static void on_request(void *ctx, ga_call *call, ga_method_id method, ProtobufCMessage *msg)
{
    (void)ctx;
    /* cmocka asserts only on the test thread: handler threads count what went wrong. */
    if (strncmp(ga_call_peer(call), "ipv4:127.0.0.1:", 15) != 0) handler_faults++;
    switch (method) {
    case GA_METHOD_STATUS: {
        Gradagg__V1__StatusRequest *req = (Gradagg__V1__StatusRequest *)msg;
        if (strcmp(req->job, "fail") == 0) {
            ga_call_finish(call, NULL, GA_E_UNKNOWN_JOB, "no job %s here", req->job);
            break;
        }
        Gradagg__V1__StatusResponse r = GRADAGG__V1__STATUS_RESPONSE__INIT;
        r.job = req->job;
        r.version = strlen(req->job);
        r.open_step = 42;
        ga_call_finish(call, &r.base, GA_OK, NULL);
        break;
    }
    case GA_METHOD_JOIN: { /* finished from another thread, as the loop does */
        join_job *j = malloc(sizeof *j);
        *j = (join_job){call, ((Gradagg__V1__JoinRequest *)msg)->rank};
        loop_post(join_run, j);
        break;
    }
    case GA_METHOD_PULL: {
        Gradagg__V1__PullRequest *req = (Gradagg__V1__PullRequest *)msg;
        pull_job *j = malloc(sizeof *j);
        *j = (pull_job){call, req->min_version, req->have_version, req->min_version};
        loop_post(pull_run, j);
        break;
    }
    case GA_METHOD_HEALTH_CHECK: {
        Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
        r.status = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
        ga_call_finish(call, &r.base, GA_OK, NULL);
        break;
    }
    case GA_METHOD_HEALTH_WATCH: { /* stays open until the client goes */
        Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
        r.status = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
        pthread_mutex_lock(&T.mu);
        T.watch = call;
        pthread_mutex_unlock(&T.mu);
        ga_call_send(call, &r.base, NULL, 0, 0);
        break;
    }
    default: ga_call_finish(call, NULL, GA_E_UNIMPLEMENTED, "not in this test"); break;
    }
    protobuf_c_message_free_unpacked(msg, &ga_wire_allocator);
}

static ga_status on_stream_message(void *ctx, ga_call *call, ga_method_id method, ProtobufCMessage *msg,
                                   void **stream, char *why, size_t why_cap)
{
    (void)ctx;
    (void)call;
    if (method != GA_METHOD_PUSH) handler_faults++;
    Gradagg__V1__PushChunk *c = (Gradagg__V1__PushChunk *)msg;
    if (!*stream) *stream = ga_calloc(1, sizeof(push_stream));
    push_stream *ps = *stream;
    ga_status rc = GA_OK;
    if (strcmp(c->tensor, "bad") == 0) {
        snprintf(why, why_cap, "bad tensor at chunk %d", ps->chunks);
        rc = GA_E_SHAPE;
    } else {
        if (ps->chunks == 0) ps->sum = FNV_START;
        ps->chunks++;
        ps->bytes += c->payload.len;
        ps->sum = fnv(ps->sum, c->payload.data, c->payload.len);
    }
    protobuf_c_message_free_unpacked(msg, &ga_wire_allocator);
    return rc;
}

static void on_stream_end(void *ctx, ga_call *call, ga_method_id method, void *stream)
{
    (void)ctx;
    (void)method;
    push_stream *ps = stream;
    Gradagg__V1__PushResponse r = GRADAGG__V1__PUSH_RESPONSE__INIT;
    pthread_mutex_lock(&T.mu);
    T.committed++;
    T.last_chunks = ps ? ps->chunks : 0;
    T.last_bytes = ps ? ps->bytes : 0;
    T.last_sum = ps ? ps->sum : 0;
    r.step = (uint64_t)T.last_chunks;
    r.version = T.last_bytes;
    pthread_mutex_unlock(&T.mu);
    ga_free(ps);
    ga_call_finish(call, &r.base, GA_OK, NULL);
}

static void on_stream_abort(void *ctx, ga_call *call, ga_method_id method, void *stream)
{
    (void)ctx;
    (void)call;
    (void)method;
    ga_free(stream);
    pthread_mutex_lock(&T.mu);
    T.aborted++;
    pthread_mutex_unlock(&T.mu);
}

static void on_cancel(void *ctx, ga_call *call)
{
    (void)ctx;
    pthread_mutex_lock(&T.mu);
    T.cancels++;
    bool watch = call == T.watch;
    if (watch) T.watch = NULL;
    pthread_mutex_unlock(&T.mu);
    if (watch) ga_call_finish(call, NULL, GA_E_CANCELLED, NULL); /* a no-op that releases it */
}

static const ga_rpc_handlers handlers = {NULL, on_request, on_stream_message, on_stream_end, on_stream_abort,
                                         on_cancel};

/* ---- fixture: one server and one channel for most tests ---- */

static ga_rpc_server *srv;
static int port;
static ga_channel *ch;
static char target[64];

static int group_setup(void **state)
{
    (void)state;
    pthread_create(&loop.thread, NULL, loop_main, NULL);
    ga_rpc_options opt = GA_RPC_OPTIONS_INIT;
    opt.max_message_bytes = SERVER_LIMIT;
    if (ga_rpc_server_start(&opt, &handlers, &srv, &port) != GA_OK) return -1;
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    /* Larger than the server's limit, so an oversized message reaches the server. */
    return ga_channel_create(target, 2 * SERVER_LIMIT, &ch) == GA_OK ? 0 : -1;
}

static void set_flag(void *arg) { atomic_store((atomic_int *)arg, 1); }

static void stop_server(ga_rpc_server *s)
{
    atomic_int done = 0;
    ga_rpc_server_shutdown(s, set_flag, &done);
    for (int i = 0; i < 2000 && !atomic_load(&done); i++) sleep_ms(1);
    ga_rpc_server_cancel_all(s);
    ga_rpc_server_destroy(s);
}

/* A second server with opt on 127.0.0.1, and a channel to it that takes messages up to limit. */
static void start_extra(const ga_rpc_options *opt, size_t limit, ga_rpc_server **s, ga_channel **c)
{
    int p;
    assert_int_equal(ga_rpc_server_start(opt, &handlers, s, &p), GA_OK);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", p);
    assert_int_equal(ga_channel_create(addr, limit, c), GA_OK);
}

static int group_teardown(void **state)
{
    (void)state;
    ga_channel_destroy(ch);
    stop_server(srv);
    if (atomic_load(&handler_faults) != 0) {
        fprintf(stderr, "handler faults: %d\n", atomic_load(&handler_faults));
        return -1;
    }
    pthread_mutex_lock(&loop.mu);
    loop.stop = true;
    pthread_cond_signal(&loop.cv);
    pthread_mutex_unlock(&loop.mu);
    pthread_join(loop.thread, NULL);
    return 0;
}

/* Host memory once the calls of earlier tests have been released. */
static uint64_t settled_memory(void)
{
    uint64_t v = ga_mem_in_use(GA_MEM_HOST);
    for (int stable = 0, i = 0; stable < 50 && i < 5000; i++) {
        sleep_ms(1);
        uint64_t w = ga_mem_in_use(GA_MEM_HOST);
        stable = w == v ? stable + 1 : 0;
        v = w;
    }
    return v;
}

/* ---- tests ---- */

static ga_status status_call(ga_channel *c, const char *job, Gradagg__V1__StatusResponse **out, char *why,
                             size_t cap)
{
    Gradagg__V1__StatusRequest req = GRADAGG__V1__STATUS_REQUEST__INIT;
    req.job = (char *)job;
    ProtobufCMessage *resp = NULL;
    ga_status rc = ga_call_unary(c, GA_METHOD_STATUS, &req.base, DEADLINE_MS, &resp, why, cap);
    if (rc == GA_OK) *out = (Gradagg__V1__StatusResponse *)resp;
    return rc;
}

static void test_unary(void **state)
{
    (void)state;
    Gradagg__V1__StatusResponse *r = NULL;
    char why[256];
    assert_int_equal(status_call(ch, "abc", &r, why, sizeof why), GA_OK);
    assert_string_equal(r->job, "abc");
    assert_int_equal(r->version, 3);
    assert_int_equal(r->open_step, 42);
    protobuf_c_message_free_unpacked(&r->base, &ga_wire_allocator);

    /* A handler's error: the exact status and message. */
    r = NULL;
    assert_int_equal(status_call(ch, "fail", &r, why, sizeof why), GA_E_UNKNOWN_JOB);
    assert_null(r);
    assert_string_equal(why, "no job fail here");

    /* Health check, and Join finished from another thread. */
    Grpc__Health__V1__HealthCheckRequest hreq = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    assert_int_equal(ga_call_unary(ch, GA_METHOD_HEALTH_CHECK, &hreq.base, DEADLINE_MS, &resp, why, sizeof why),
                     GA_OK);
    assert_int_equal(((Grpc__Health__V1__HealthCheckResponse *)resp)->status,
                     GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
    protobuf_c_message_free_unpacked(resp, &ga_wire_allocator);
    Gradagg__V1__JoinRequest jreq = GRADAGG__V1__JOIN_REQUEST__INIT;
    jreq.job = "j";
    jreq.rank = 5;
    assert_int_equal(ga_call_unary(ch, GA_METHOD_JOIN, &jreq.base, DEADLINE_MS, &resp, why, sizeof why), GA_OK);
    assert_int_equal(((Gradagg__V1__JoinResponse *)resp)->version, 10);
    protobuf_c_message_free_unpacked(resp, &ga_wire_allocator);
}

static uint8_t *random_bytes(size_t n, uint64_t seed)
{
    uint8_t *p = malloc(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (uint8_t)(seed >> 56);
    }
    return p;
}

static void push_chunk(Gradagg__V1__PushChunk *c, const char *tensor, uint64_t off, uint64_t count)
{
    Gradagg__V1__PushChunk init = GRADAGG__V1__PUSH_CHUNK__INIT;
    *c = init;
    c->job = "j";
    c->rank = 1;
    c->incarnation = 7;
    c->step = 3;
    c->tensor = (char *)tensor;
    c->offset = off;
    c->count = count;
}

/* Streams `chunks` chunks of `bytes` on channel chan: nothing commits before the end, then every byte
 * arrives, in order. */
static void push_and_check(ga_channel *chan, int chunks, size_t bytes)
{
    uint8_t *data = random_bytes((size_t)chunks * bytes, 1);
    int committed = counter(&T.committed), aborted = counter(&T.aborted);
    ga_stream *s;
    assert_int_equal(ga_stream_open(chan, GA_METHOD_PUSH, DEADLINE_MS, &s), GA_OK);
    for (int k = 0; k < chunks; k++) {
        Gradagg__V1__PushChunk c;
        push_chunk(&c, "w", (uint64_t)k * bytes, bytes);
        assert_int_equal(ga_stream_send(s, &c.base, data + (size_t)k * bytes, bytes), GA_OK);
    }
    assert_int_equal(counter(&T.committed), committed); /* nothing before the end */
    assert_int_equal(ga_stream_close_send(s), GA_OK);
    ProtobufCMessage *m = NULL;
    char why[256];
    assert_int_equal(ga_stream_recv(s, &gradagg__v1__push_response__descriptor, &m, why, sizeof why), GA_OK);
    assert_non_null(m);
    assert_int_equal(((Gradagg__V1__PushResponse *)m)->step, chunks);
    assert_int_equal(((Gradagg__V1__PushResponse *)m)->version, (uint64_t)chunks * bytes);
    protobuf_c_message_free_unpacked(m, &ga_wire_allocator);
    assert_int_equal(ga_stream_recv(s, &gradagg__v1__push_response__descriptor, &m, why, sizeof why), GA_OK);
    assert_null(m);
    ga_stream_destroy(s);
    assert_int_equal(counter(&T.committed), committed + 1);
    assert_int_equal(counter(&T.aborted), aborted);
    pthread_mutex_lock(&T.mu);
    assert_int_equal(T.last_sum, fnv(FNV_START, data, (size_t)chunks * bytes)); /* every byte, in order */
    pthread_mutex_unlock(&T.mu);
    free(data);
}

static void test_push_committed_at_end(void **state)
{
    (void)state;
    push_and_check(ch, 16, 100 * 1024 + 7);
}

/* A fixed receive window far below a message (--stream-window-kb): flow control carries a
 * 12 MiB stream of 768 KiB messages through a 64 KiB window, whole and in order, without a
 * stall (a gRPC memory limit once stalled such pushes for good). */
static void test_push_through_small_window(void **state)
{
    (void)state;
    ga_rpc_options opt = GA_RPC_OPTIONS_INIT;
    opt.max_message_bytes = SERVER_LIMIT;
    opt.stream_window_bytes = 64 << 10;
    ga_rpc_server *small;
    ga_channel *c;
    start_extra(&opt, SERVER_LIMIT, &small, &c);
    push_and_check(c, 16, 768 * 1024);
    ga_channel_destroy(c);
    stop_server(small);
}

static void test_push_cancelled_aborts(void **state)
{
    (void)state;
    uint8_t *data = random_bytes(4096, 2);
    int committed = counter(&T.committed), aborted = counter(&T.aborted);
    ga_stream *s;
    assert_int_equal(ga_stream_open(ch, GA_METHOD_PUSH, DEADLINE_MS, &s), GA_OK);
    for (int k = 0; k < 3; k++) {
        Gradagg__V1__PushChunk c;
        push_chunk(&c, "w", 0, 4096);
        assert_int_equal(ga_stream_send(s, &c.base, data, 4096), GA_OK);
    }
    ga_stream_cancel(s);
    ProtobufCMessage *m = NULL;
    char why[256];
    assert_int_equal(ga_stream_recv(s, &gradagg__v1__push_response__descriptor, &m, why, sizeof why),
                     GA_E_CANCELLED);
    ga_stream_destroy(s);
    assert_true(wait_counter(&T.aborted, aborted + 1, 5000));

    /* A stream whose deadline passes looks the same to the server: aborted. */
    assert_int_equal(ga_stream_open(ch, GA_METHOD_PUSH, 500, &s), GA_OK);
    Gradagg__V1__PushChunk c;
    push_chunk(&c, "w", 0, 4096);
    ga_status rc = ga_stream_send(s, &c.base, data, 4096);
    assert_true(rc == GA_OK || rc == GA_E_DEADLINE); /* a very slow machine */
    sleep_ms(700);
    assert_int_equal(ga_stream_recv(s, &gradagg__v1__push_response__descriptor, &m, why, sizeof why),
                     GA_E_DEADLINE);
    ga_stream_destroy(s);
    assert_true(wait_counter(&T.aborted, aborted + 2, 5000));
    sleep_ms(50);
    assert_int_equal(counter(&T.committed), committed); /* never on_stream_end */
    free(data);
}

static void test_push_handler_error(void **state)
{
    (void)state;
    uint8_t *data = random_bytes(1024, 3);
    int committed = counter(&T.committed), aborted = counter(&T.aborted);
    ga_stream *s;
    assert_int_equal(ga_stream_open(ch, GA_METHOD_PUSH, DEADLINE_MS, &s), GA_OK);
    for (int k = 0; k < 6; k++) {
        Gradagg__V1__PushChunk c;
        push_chunk(&c, k == 2 ? "bad" : "w", 0, 1024);
        /* Sends after the server finished may fail with the final status. */
        ga_status rc = ga_stream_send(s, &c.base, data, 1024);
        assert_true(rc == GA_OK || (k >= 2 && rc == GA_E_SHAPE));
    }
    ga_status rc = ga_stream_close_send(s);
    assert_true(rc == GA_OK || rc == GA_E_SHAPE);
    ProtobufCMessage *m = NULL;
    char why[256];
    assert_int_equal(ga_stream_recv(s, &gradagg__v1__push_response__descriptor, &m, why, sizeof why), GA_E_SHAPE);
    assert_null(m);
    assert_string_equal(why, "bad tensor at chunk 2");
    ga_stream_destroy(s);
    assert_true(wait_counter(&T.aborted, aborted + 1, 5000));
    assert_int_equal(counter(&T.committed), committed);
    free(data);
}

static void test_pull_zero_copy(void **state)
{
    (void)state;
    enum { CHUNKS = 8, BYTES = 64 * 1024 + 13 };
    uint64_t mem0 = settled_memory();
    ga_stream *s;
    assert_int_equal(ga_stream_open(ch, GA_METHOD_PULL, DEADLINE_MS, &s), GA_OK);
    Gradagg__V1__PullRequest req = GRADAGG__V1__PULL_REQUEST__INIT;
    req.min_version = CHUNKS;
    req.have_version = BYTES;
    assert_int_equal(ga_stream_send(s, &req.base, NULL, 0), GA_OK);
    assert_int_equal(ga_stream_close_send(s), GA_OK);
    char why[256];
    for (int k = 0; k < CHUNKS; k++) {
        ProtobufCMessage *m = NULL;
        assert_int_equal(ga_stream_recv(s, &gradagg__v1__pull_chunk__descriptor, &m, why, sizeof why), GA_OK);
        assert_non_null(m);
        Gradagg__V1__PullChunk *c = (Gradagg__V1__PullChunk *)m;
        assert_int_equal(c->version, CHUNKS);
        assert_string_equal(c->tensor, "w");
        assert_int_equal(c->offset, (uint64_t)k * BYTES);
        assert_int_equal(c->payload.len, BYTES);
        for (size_t i = 0; i < BYTES; i++)
            if (c->payload.data[i] != PULL_BYTE(c->offset + i)) fail_msg("byte %zu of chunk %d", i, k);
        protobuf_c_message_free_unpacked(m, &ga_wire_allocator);
    }
    ProtobufCMessage *m = NULL;
    assert_int_equal(ga_stream_recv(s, &gradagg__v1__pull_chunk__descriptor, &m, why, sizeof why), GA_OK);
    assert_null(m);
    ga_stream_destroy(s);
    /* Every blob reference went back (gRPC may drop the last slice a little later). */
    for (int i = 0; i < 5000 && ga_mem_in_use(GA_MEM_HOST) != mem0; i++) sleep_ms(1);
    assert_int_equal(ga_mem_in_use(GA_MEM_HOST), mem0);
}

static void test_unknown_method(void **state)
{
    (void)state;
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    grpc_channel *raw = grpc_channel_create(target, creds, NULL);
    grpc_channel_credentials_release(creds);
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    gpr_timespec dl = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_seconds(10, GPR_TIMESPAN));
    grpc_call *call = grpc_channel_create_call(raw, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                               grpc_slice_from_static_string("/gradagg.v1.Aggregator/Nope"),
                                               NULL, dl, NULL);
    grpc_slice body = grpc_slice_from_static_string("\x0a\x01x");
    grpc_byte_buffer *out = grpc_raw_byte_buffer_create(&body, 1), *in = NULL;
    grpc_metadata_array imd, tmd;
    grpc_metadata_array_init(&imd);
    grpc_metadata_array_init(&tmd);
    grpc_status_code code;
    grpc_slice details;
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = out;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &imd;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &in;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &tmd;
    ops[5].data.recv_status_on_client.status = &code;
    ops[5].data.recv_status_on_client.status_details = &details;
    double t0 = now_s();
    assert_int_equal(grpc_call_start_batch(call, ops, 6, (void *)1, NULL), GRPC_CALL_OK);
    grpc_event ev = grpc_completion_queue_pluck(cq, (void *)1, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    double elapsed = now_s() - t0;
    assert_int_equal(ev.type, GRPC_OP_COMPLETE);
    assert_int_equal(code, GRPC_STATUS_UNIMPLEMENTED);
    assert_true(elapsed < 2.0); /* answered, not left to the 10 s deadline */
    const char *name = NULL;
    size_t name_len = 0;
    for (size_t i = 0; i < tmd.count; i++)
        if (grpc_slice_str_cmp(tmd.metadata[i].key, GA_WIRE_STATUS_KEY) == 0) {
            name = (const char *)GRPC_SLICE_START_PTR(tmd.metadata[i].value);
            name_len = GRPC_SLICE_LENGTH(tmd.metadata[i].value);
        }
    assert_int_equal(ga_wire_status_from(code, name, name_len), GA_E_UNIMPLEMENTED);
    char *text = grpc_slice_to_c_string(details);
    assert_non_null(strstr(text, "/gradagg.v1.Aggregator/Nope"));
    gpr_free(text);
    grpc_slice_unref(details);
    if (in) grpc_byte_buffer_destroy(in);
    grpc_byte_buffer_destroy(out);
    grpc_metadata_array_destroy(&imd);
    grpc_metadata_array_destroy(&tmd);
    grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    grpc_completion_queue_destroy(cq);
    grpc_channel_destroy(raw);
}

static void test_garbage_bytes(void **state)
{
    (void)state;
    uint8_t junk[32];
    memset(junk, 0xff, sizeof junk);
    char why[256];
    ProtobufCMessage *m = NULL;
    /* A unary request. */
    ga_stream *s;
    assert_int_equal(ga_stream_open(ch, GA_METHOD_STATUS, DEADLINE_MS, &s), GA_OK);
    assert_int_equal(ga_stream_send_raw(s, junk, sizeof junk), GA_OK);
    ga_status rc = ga_stream_close_send(s); /* the answer may be there first */
    assert_true(rc == GA_OK || rc == GA_E_PROTO);
    assert_int_equal(ga_stream_recv(s, &gradagg__v1__status_response__descriptor, &m, why, sizeof why), GA_E_PROTO);
    assert_string_equal(why, "malformed gradagg.v1.StatusRequest");
    ga_stream_destroy(s);

    /* A client stream: a good chunk, then garbage. Aborted, never committed. */
    int committed = counter(&T.committed), aborted = counter(&T.aborted);
    assert_int_equal(ga_stream_open(ch, GA_METHOD_PUSH, DEADLINE_MS, &s), GA_OK);
    Gradagg__V1__PushChunk c;
    push_chunk(&c, "w", 0, 3);
    assert_int_equal(ga_stream_send(s, &c.base, "abc", 3), GA_OK);
    rc = ga_stream_send_raw(s, junk, sizeof junk);
    assert_true(rc == GA_OK || rc == GA_E_PROTO);
    rc = ga_stream_close_send(s);
    assert_true(rc == GA_OK || rc == GA_E_PROTO);
    assert_int_equal(ga_stream_recv(s, &gradagg__v1__push_response__descriptor, &m, why, sizeof why), GA_E_PROTO);
    assert_string_equal(why, "malformed gradagg.v1.PushChunk");
    ga_stream_destroy(s);
    assert_true(wait_counter(&T.aborted, aborted + 1, 5000));
    assert_int_equal(counter(&T.committed), committed);
}

static void test_message_over_limit(void **state)
{
    (void)state;
    size_t n = SERVER_LIMIT + 1024;
    uint8_t *data = random_bytes(n, 4);
    int committed = counter(&T.committed);
    char why[256];
    ProtobufCMessage *m = NULL;
    ga_stream *s;
    assert_int_equal(ga_stream_open(ch, GA_METHOD_PUSH, DEADLINE_MS, &s), GA_OK);
    Gradagg__V1__PushChunk c;
    push_chunk(&c, "w", 0, n);
    ga_status rc = ga_stream_send(s, &c.base, data, n);
    assert_true(rc == GA_OK || rc == GA_E_LIMIT);
    if (rc == GA_OK) {
        rc = ga_stream_close_send(s);
        assert_true(rc == GA_OK || rc == GA_E_LIMIT);
    }
    assert_int_equal(ga_stream_recv(s, &gradagg__v1__push_response__descriptor, &m, why, sizeof why), GA_E_LIMIT);
    ga_stream_destroy(s);
    assert_int_equal(counter(&T.committed), committed);

    /* The client's own limit refuses before sending. */
    ga_channel *small;
    assert_int_equal(ga_channel_create(target, 1u << 20, &small), GA_OK);
    assert_int_equal(ga_stream_open(small, GA_METHOD_PUSH, DEADLINE_MS, &s), GA_OK);
    rc = ga_stream_send(s, &c.base, data, 2u << 20);
    assert_true(rc == GA_OK || rc == GA_E_LIMIT);
    ga_stream_close_send(s);
    assert_int_equal(ga_stream_recv(s, &gradagg__v1__push_response__descriptor, &m, why, sizeof why), GA_E_LIMIT);
    ga_stream_destroy(s);
    ga_channel_destroy(small);

    /* The server still serves. */
    Gradagg__V1__StatusResponse *r = NULL;
    assert_int_equal(status_call(ch, "after", &r, why, sizeof why), GA_OK);
    assert_int_equal(r->version, 5);
    protobuf_c_message_free_unpacked(&r->base, &ga_wire_allocator);
    free(data);
}

static void test_port_in_use(void **state)
{
    (void)state;
    ga_rpc_options opt = GA_RPC_OPTIONS_INIT;
    opt.listen = target;
    ga_rpc_server *second = (ga_rpc_server *)&opt; /* must stay untouched */
    int p2 = -1;
    assert_int_equal(ga_rpc_server_start(&opt, &handlers, &second, &p2), GA_E_IO);
    assert_ptr_equal(second, (ga_rpc_server *)&opt);
    assert_int_equal(p2, -1);
    /* Bad options. */
    opt.listen = "127.0.0.1:0";
    opt.threads = 0;
    assert_int_equal(ga_rpc_server_start(&opt, &handlers, &second, &p2), GA_E_CONFIG);
    Gradagg__V1__StatusResponse *r = NULL;
    char why[256];
    assert_int_equal(status_call(ch, "still", &r, why, sizeof why), GA_OK);
    protobuf_c_message_free_unpacked(&r->base, &ga_wire_allocator);
}

static void test_no_server(void **state)
{
    (void)state;
    /* Nothing listens on port 1: the call fails fast, not at its deadline. */
    ga_channel *c;
    assert_int_equal(ga_channel_create("127.0.0.1:1", 1u << 20, &c), GA_OK);
    Gradagg__V1__StatusResponse *r = NULL;
    char why[256] = "";
    double t0 = now_s();
    assert_int_equal(status_call(c, "x", &r, why, sizeof why), GA_E_UNAVAILABLE);
    assert_true(now_s() - t0 < 3.0);
    assert_null(r);
    assert_true(why[0] != '\0');
    ga_channel_destroy(c);
}

static void test_shutdown_idle_connection(void **state)
{
    (void)state;
    /* A connected client without calls does not hold the shutdown. */
    ga_rpc_options opt = GA_RPC_OPTIONS_INIT;
    ga_rpc_server *s3;
    ga_channel *c3;
    start_extra(&opt, 1u << 20, &s3, &c3);
    Gradagg__V1__StatusResponse *r = NULL;
    char why[256];
    assert_int_equal(status_call(c3, "idle", &r, why, sizeof why), GA_OK);
    protobuf_c_message_free_unpacked(&r->base, &ga_wire_allocator);
    atomic_int done = 0;
    double t0 = now_s();
    ga_rpc_server_shutdown(s3, set_flag, &done);
    for (int i = 0; i < 3000 && !atomic_load(&done); i++) sleep_ms(1);
    assert_int_equal(atomic_load(&done), 1);
    assert_true(now_s() - t0 < 2.0);
    /* New calls are refused once it is down. */
    assert_int_not_equal(status_call(c3, "late", &r, why, sizeof why), GA_OK);
    ga_rpc_server_destroy(s3);
    ga_channel_destroy(c3);
}

static void test_shutdown_with_open_watch(void **state)
{
    (void)state;
    ga_rpc_options opt = GA_RPC_OPTIONS_INIT;
    opt.threads = 3;
    ga_rpc_server *s2;
    ga_channel *c2;
    start_extra(&opt, 1u << 20, &s2, &c2);
    int cancels = counter(&T.cancels);

    ga_stream *w;
    assert_int_equal(ga_stream_open(c2, GA_METHOD_HEALTH_WATCH, 30000, &w), GA_OK);
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    assert_int_equal(ga_stream_send(w, &req.base, NULL, 0), GA_OK);
    assert_int_equal(ga_stream_close_send(w), GA_OK);
    ProtobufCMessage *m = NULL;
    char why[256];
    assert_int_equal(
        ga_stream_recv(w, &grpc__health__v1__health_check_response__descriptor, &m, why, sizeof why), GA_OK);
    assert_non_null(m);
    protobuf_c_message_free_unpacked(m, &ga_wire_allocator);

    atomic_int done = 0;
    double t0 = now_s();
    ga_rpc_server_shutdown(s2, set_flag, &done);
    sleep_ms(300);
    assert_int_equal(atomic_load(&done), 0); /* the open watch holds the shutdown */
    ga_rpc_server_cancel_all(s2);
    for (int i = 0; i < 5000 && !atomic_load(&done); i++) sleep_ms(1);
    assert_int_equal(atomic_load(&done), 1);
    assert_true(now_s() - t0 < 3.0);
    assert_true(wait_counter(&T.cancels, cancels + 1, 1000));
    ga_status rc = ga_stream_recv(w, &grpc__health__v1__health_check_response__descriptor, &m, why, sizeof why);
    assert_null(m);
    assert_true(rc == GA_E_CANCELLED || rc == GA_E_UNAVAILABLE);
    ga_stream_destroy(w);
    ga_rpc_server_destroy(s2);
    ga_channel_destroy(c2);
}

enum { WORKERS = 4, ROUNDS = 30 };

static void *concurrent_worker(void *arg)
{
    int id = (int)(intptr_t)arg, ok = 0;
    uint8_t payload[512];
    memset(payload, id, sizeof payload);
    for (int i = 0; i < ROUNDS; i++) {
        char job[32], why[256];
        snprintf(job, sizeof job, "w%d-%d", id, i);
        if (i % 3 == 0) {
            Gradagg__V1__StatusResponse *r = NULL;
            if (status_call(ch, job, &r, why, sizeof why) == GA_OK) {
                ok += r->version == strlen(job) && strcmp(r->job, job) == 0;
                protobuf_c_message_free_unpacked(&r->base, &ga_wire_allocator);
            }
        } else if (i % 3 == 1) {
            Gradagg__V1__JoinRequest req = GRADAGG__V1__JOIN_REQUEST__INIT;
            req.job = job;
            req.rank = (uint32_t)(id * 1000 + i);
            ProtobufCMessage *resp = NULL;
            if (ga_call_unary(ch, GA_METHOD_JOIN, &req.base, DEADLINE_MS, &resp, why, sizeof why) == GA_OK) {
                ok += ((Gradagg__V1__JoinResponse *)resp)->version == 2u * req.rank;
                protobuf_c_message_free_unpacked(resp, &ga_wire_allocator);
            }
        } else {
            ga_stream *s;
            if (ga_stream_open(ch, GA_METHOD_PUSH, DEADLINE_MS, &s) != GA_OK) continue;
            bool good = true;
            for (int k = 0; k < 4 && good; k++) {
                Gradagg__V1__PushChunk c;
                push_chunk(&c, "w", 0, sizeof payload);
                good = ga_stream_send(s, &c.base, payload, sizeof payload) == GA_OK;
            }
            good = good && ga_stream_close_send(s) == GA_OK;
            ProtobufCMessage *m = NULL;
            if (good && ga_stream_recv(s, &gradagg__v1__push_response__descriptor, &m, why, sizeof why) == GA_OK &&
                m) {
                ok += ((Gradagg__V1__PushResponse *)m)->version == 4 * sizeof payload;
                protobuf_c_message_free_unpacked(m, &ga_wire_allocator);
            }
            ga_stream_destroy(s);
        }
    }
    return (void *)(intptr_t)ok;
}

static void test_concurrent_calls(void **state)
{
    (void)state;
    pthread_t th[WORKERS];
    for (int i = 0; i < WORKERS; i++) pthread_create(&th[i], NULL, concurrent_worker, (void *)(intptr_t)i);
    int ok = 0;
    for (int i = 0; i < WORKERS; i++) {
        void *r;
        pthread_join(th[i], &r);
        ok += (int)(intptr_t)r;
    }
    assert_int_equal(ok, WORKERS * ROUNDS);
}

int main(void)
{
    grpc_init();
    test_memory_baseline();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unary),
        cmocka_unit_test(test_push_committed_at_end),
        cmocka_unit_test(test_push_through_small_window),
        cmocka_unit_test(test_push_cancelled_aborts),
        cmocka_unit_test(test_push_handler_error),
        cmocka_unit_test(test_pull_zero_copy),
        cmocka_unit_test(test_unknown_method),
        cmocka_unit_test(test_garbage_bytes),
        cmocka_unit_test(test_message_over_limit),
        cmocka_unit_test(test_port_in_use),
        cmocka_unit_test(test_no_server),
        cmocka_unit_test(test_shutdown_idle_connection),
        cmocka_unit_test(test_shutdown_with_open_watch),
        cmocka_unit_test(test_concurrent_calls),
    };
    int rc = cmocka_run_group_tests_name("rpc", tests, group_setup, group_teardown);
    /* After the servers are gone: every call state, message and blob was freed. */
    const struct CMUnitTest memory[] = {cmocka_unit_test(test_host_memory_returned)};
    rc += cmocka_run_group_tests_name("memory", memory, NULL, NULL);
    grpc_shutdown();
    return rc;
}
