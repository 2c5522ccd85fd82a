/* The server assembled, over real gRPC on 127.0.0.1:0: grpc.health.v1 Check and Watch through
 * the drain, a port already in use, init/push/pull through dispatch and the core, pulls ended by
 * the drain or by their client, and the real binary: config errors exit 2, SIGTERM after a Join
 * exits 0 in time. */
#define _POSIX_C_SOURCE 200809L /* kill, mkdtemp, nanosleep, clock_gettime */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test_dirs.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_memory.h"

#include "api/health.h"
#include "ga_wire.h"
#include "rpc_client.h"
#include "server/server.h"
#include "test_inproc_server.h"

#ifndef GA_SERVER_BIN
#error "GA_SERVER_BIN (the gradagg-server binary) must be defined by the build"
#endif

#define TIMEOUT_MS 10000u
#define MSG_LIMIT (64u << 20)

static char data_dir[64];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static ga_server *start_server(uint32_t grace_ms)
{
    ga_config cfg;
    ga_test_config_defaults(&cfg);
    cfg.admin_listen[0] = '\0'; /* no admin port: tests run in parallel */
    snprintf(cfg.listen, sizeof cfg.listen, "127.0.0.1:0");
    ga_test_fresh_dir(cfg.data_dir, sizeof cfg.data_dir, data_dir);
    cfg.shutdown_grace_ms = grace_ms;
    ga_server *s = NULL;
    assert_int_equal(ga_server_start(&cfg, &s), GA_OK);
    assert_true(ga_server_port(s) > 0);
    return s;
}

static ga_channel *connect_to(int port)
{
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    ga_channel *ch = NULL;
    assert_int_equal(ga_channel_create(target, MSG_LIMIT, &ch), GA_OK);
    return ch;
}

/* Check(service): GA_OK and *serving, or the error with its message in why. */
static ga_status check(ga_channel *ch, const char *service, ga_serving *serving, char *why, size_t cap)
{
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    req.service = (char *)service;
    ProtobufCMessage *resp = NULL;
    ga_status st = ga_call_unary(ch, GA_METHOD_HEALTH_CHECK, &req.base, TIMEOUT_MS, &resp, why, cap);
    if (st == GA_OK) {
        *serving = ((Grpc__Health__V1__HealthCheckResponse *)resp)->status;
        protobuf_c_message_free_unpacked(resp, &ga_wire_allocator);
    }
    return st;
}

static ga_stream *watch(ga_channel *ch, const char *service)
{
    ga_stream *s = NULL;
    assert_int_equal(ga_stream_open(ch, GA_METHOD_HEALTH_WATCH, TIMEOUT_MS, &s), GA_OK);
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    req.service = (char *)service;
    assert_int_equal(ga_stream_send(s, &req.base, NULL, 0), GA_OK);
    assert_int_equal(ga_stream_close_send(s), GA_OK);
    return s;
}

/* The next status a watch receives; -1 when the stream ended (its status in *end). */
static int next_status(ga_stream *s, ga_status *end)
{
    ProtobufCMessage *msg = NULL;
    char why[256];
    ga_status st = ga_stream_recv(s, &grpc__health__v1__health_check_response__descriptor, &msg, why, sizeof why);
    if (!msg) {
        *end = st;
        return -1;
    }
    int v = ((Grpc__Health__V1__HealthCheckResponse *)msg)->status;
    protobuf_c_message_free_unpacked(msg, &ga_wire_allocator);
    return v;
}

static void test_health_check(void **state)
{
    (void)state;
    ga_server *srv = start_server(5000);
    ga_channel *ch = connect_to(ga_server_port(srv));
    ga_serving serving = 0;
    char why[256] = "";
    assert_int_equal(check(ch, "", &serving, why, sizeof why), GA_OK);
    assert_int_equal(serving, GA_SERVING);
    assert_int_equal(check(ch, "gradagg.v1.Aggregator", &serving, why, sizeof why), GA_OK);
    assert_int_equal(serving, GA_SERVING);

    /* An unknown service is NOT_FOUND on the wire, with a message naming it. */
    ga_status st = check(ch, "no.such.Service", &serving, why, sizeof why);
    assert_int_equal(st, GA_E_UNKNOWN_SERVICE);
    assert_int_equal(ga_wire_grpc_code(st), GRPC_STATUS_NOT_FOUND);
    assert_non_null(strstr(why, "no.such.Service"));

    ga_channel_destroy(ch);
    ga_server_drain(srv);
    ga_server_wait(srv);
    ga_server_destroy(srv);
}

static void test_watch_follows_the_drain(void **state)
{
    (void)state;
    /* A long grace: the drain must end the watches itself, not wait for the grace. */
    ga_server *srv = start_server(60000);
    ga_channel *ch = connect_to(ga_server_port(srv));
    ga_stream *all = watch(ch, "");
    ga_stream *svc = watch(ch, "gradagg.v1.Aggregator");
    ga_stream *unknown = watch(ch, "no.such.Service");
    ga_status end = GA_OK;
    assert_int_equal(next_status(all, &end), GA_SERVING);
    assert_int_equal(next_status(svc, &end), GA_SERVING);
    assert_int_equal(next_status(unknown, &end), GA_SERVICE_UNKNOWN);

    double t0 = now_s();
    ga_server_drain(srv);
    assert_int_equal(next_status(all, &end), GA_NOT_SERVING);
    assert_int_equal(next_status(svc, &end), GA_NOT_SERVING);
    /* Then the watches end: clients retry elsewhere. */
    assert_int_equal(next_status(all, &end), -1);
    assert_int_equal(end, GA_E_DRAINING);
    assert_int_equal(next_status(svc, &end), -1);
    assert_int_equal(end, GA_E_DRAINING);
    /* The unknown service's watch saw no change (nothing changed for it) and ends the same way. */
    assert_int_equal(next_status(unknown, &end), -1);
    assert_int_equal(end, GA_E_DRAINING);

    ga_server_wait(srv);
    assert_true(now_s() - t0 < 10.0);
    /* A Check after the server has gone fails at the transport. */
    ga_serving serving;
    char why[256];
    assert_int_not_equal(check(ch, "", &serving, why, sizeof why), GA_OK);
    ga_stream_destroy(all);
    ga_stream_destroy(svc);
    ga_stream_destroy(unknown);
    ga_channel_destroy(ch);
    ga_server_destroy(srv);
}

static void test_cancelled_watch_is_finished(void **state)
{
    (void)state;
    ga_server *srv = start_server(60000);
    ga_channel *ch = connect_to(ga_server_port(srv));
    ga_stream *w = watch(ch, "");
    ga_status end = GA_OK;
    assert_int_equal(next_status(w, &end), GA_SERVING);
    ga_stream_cancel(w);
    assert_int_equal(next_status(w, &end), -1);
    assert_int_equal(end, GA_E_CANCELLED);
    ga_stream_destroy(w);

    /* Still serving, and a second watch works after the first was cancelled. */
    ga_stream *w2 = watch(ch, "gradagg.v1.Aggregator");
    assert_int_equal(next_status(w2, &end), GA_SERVING);
    ga_stream_cancel(w2);
    ga_stream_destroy(w2);
    ga_channel_destroy(ch);

    double t0 = now_s();
    ga_server_destroy(srv); /* drains and waits */
    assert_true(now_s() - t0 < 10.0);
}

static void test_port_in_use(void **state)
{
    (void)state;
    ga_server *a = start_server(5000);
    ga_config cfg;
    ga_test_config_defaults(&cfg);
    cfg.admin_listen[0] = '\0'; /* no admin port: tests run in parallel */
    snprintf(cfg.listen, sizeof cfg.listen, "127.0.0.1:%d", ga_server_port(a));
    ga_test_fresh_dir(cfg.data_dir, sizeof cfg.data_dir, data_dir);
    static int sentinel;
    ga_server *b = (ga_server *)(void *)&sentinel; /* a failed start leaves it untouched */
    assert_int_equal(ga_server_start(&cfg, &b), GA_E_IO);
    assert_ptr_equal(b, (void *)&sentinel);
    /* The first server is unharmed. */
    ga_channel *ch = connect_to(ga_server_port(a));
    ga_serving serving = 0;
    char why[256];
    assert_int_equal(check(ch, "", &serving, why, sizeof why), GA_OK);
    assert_int_equal(serving, GA_SERVING);
    ga_channel_destroy(ch);
    ga_server_destroy(a);
}

/* ---- the data path through dispatch and the core ---- */

static ga_status join(ga_channel *ch, const char *job, uint32_t world)
{
    Gradagg__V1__JobConfig jc = GRADAGG__V1__JOB_CONFIG__INIT;
    jc.world_size = world;
    Gradagg__V1__JoinRequest req = GRADAGG__V1__JOIN_REQUEST__INIT;
    req.job = (char *)job;
    req.rank = 0;
    req.incarnation = 1;
    req.config = &jc;
    ProtobufCMessage *resp = NULL;
    char why[256] = "";
    ga_status st = ga_call_unary(ch, GA_METHOD_JOIN, &req.base, TIMEOUT_MS, &resp, why, sizeof why);
    if (resp) protobuf_c_message_free_unpacked(resp, &ga_wire_allocator);
    return st;
}

/* Sends the messages of a client stream and returns its final status (response freed). */
static ga_status client_stream(ga_channel *ch, ga_method_id m, const ProtobufCMessage *const *msgs, size_t n,
                               const float *payload, size_t len, char *why, size_t cap)
{
    ga_stream *s = NULL;
    assert_int_equal(ga_stream_open(ch, m, TIMEOUT_MS, &s), GA_OK);
    for (size_t i = 0; i < n; i++) assert_int_equal(ga_stream_send(s, msgs[i], payload, len), GA_OK);
    assert_int_equal(ga_stream_close_send(s), GA_OK);
    ProtobufCMessage *resp = NULL;
    ga_status st = ga_stream_recv(s, ga_methods[m].response, &resp, why, cap);
    if (resp) {
        protobuf_c_message_free_unpacked(resp, &ga_wire_allocator);
        ProtobufCMessage *end = NULL;
        st = ga_stream_recv(s, ga_methods[m].response, &end, why, cap);
        assert_null(end);
    }
    ga_stream_destroy(s);
    return st;
}

static ga_stream *open_pull(ga_channel *ch, const char *job, uint64_t min_version)
{
    ga_stream *s = NULL;
    assert_int_equal(ga_stream_open(ch, GA_METHOD_PULL, TIMEOUT_MS, &s), GA_OK);
    Gradagg__V1__PullRequest req = GRADAGG__V1__PULL_REQUEST__INIT;
    req.job = (char *)job;
    req.rank = 0;
    req.incarnation = 1;
    req.min_version = min_version;
    assert_int_equal(ga_stream_send(s, &req.base, NULL, 0), GA_OK);
    assert_int_equal(ga_stream_close_send(s), GA_OK);
    return s;
}

static void test_init_push_pull(void **state)
{
    (void)state;
    ga_server *srv = start_server(5000);
    ga_channel *ch = connect_to(ga_server_port(srv));
    assert_int_equal(join(ch, "data", 1), GA_OK);
    char why[256] = "";

    /* InitTensors and Push are assembled chunk by chunk on the transport's threads. */
    uint64_t shape[] = {4};
    const float init[4] = {1, 2, 3, 4};
    Gradagg__V1__InitChunk ic = GRADAGG__V1__INIT_CHUNK__INIT;
    ic.job = "data";
    ic.incarnation = 1;
    ic.tensor = "w";
    ic.n_shape = 1;
    ic.shape = shape;
    ic.count = 4;
    const ProtobufCMessage *im[] = {&ic.base};
    ga_status st = client_stream(ch, GA_METHOD_INIT, im, 1, init, sizeof init, why, sizeof why);
    if (st != GA_OK) fail_msg("InitTensors: %s: %s", ga_status_name(st), why);

    const float grad[4] = {0.5f, 1, -1, 2};
    Gradagg__V1__PushChunk pc = GRADAGG__V1__PUSH_CHUNK__INIT;
    pc.job = "data";
    pc.incarnation = 1;
    pc.step = 0;
    pc.tensor = "w";
    pc.count = 4;
    const ProtobufCMessage *pm[] = {&pc.base};
    st = client_stream(ch, GA_METHOD_PUSH, pm, 1, grad, sizeof grad, why, sizeof why);
    if (st != GA_OK) fail_msg("Push: %s: %s", ga_status_name(st), why);

    /* A client stream without a chunk has nothing to commit. */
    st = client_stream(ch, GA_METHOD_PUSH, NULL, 0, NULL, 0, why, sizeof why);
    assert_int_equal(st, GA_E_INVAL);
    assert_non_null(strstr(why, "without a chunk"));

    /* Optimizer none: version 1 holds init + grad. */
    ga_stream *pull = open_pull(ch, "data", 1);
    float got[4] = {0};
    size_t seen = 0;
    for (;;) {
        ProtobufCMessage *msg = NULL;
        st = ga_stream_recv(pull, &gradagg__v1__pull_chunk__descriptor, &msg, why, sizeof why);
        if (!msg) break;
        Gradagg__V1__PullChunk *c = (Gradagg__V1__PullChunk *)msg;
        assert_int_equal(c->version, 1);
        assert_int_equal(c->kind, GRADAGG__V1__PULL_KIND__PULL_FULL);
        assert_true(c->offset + c->count <= 4 && c->payload.len == 4 * c->count);
        memcpy(got + c->offset, c->payload.data, c->payload.len);
        seen += c->count;
        protobuf_c_message_free_unpacked(msg, &ga_wire_allocator);
    }
    if (st != GA_OK) fail_msg("Pull: %s: %s", ga_status_name(st), why);
    assert_int_equal(seen, 4);
    for (int i = 0; i < 4; i++) assert_true(got[i] == init[i] + grad[i]);
    ga_stream_destroy(pull);

    ga_channel_destroy(ch);
    ga_server_destroy(srv);
}

static void test_drain_ends_waiting_and_cancelled_pulls(void **state)
{
    (void)state;
    /* A long grace: only a pull that was never released would make the stop wait for it. */
    ga_server *srv = start_server(60000);
    ga_channel *ch = connect_to(ga_server_port(srv));
    assert_int_equal(join(ch, "wait", 1), GA_OK);
    ga_stream *waiting = open_pull(ch, "wait", 1); /* the next version: it waits for a push */
    ga_stream *gone = open_pull(ch, "wait", 1);
    /* Let both reach the core before one is cancelled: its cancel then goes through dispatch. */
    struct timespec ms = {0, 100000000};
    nanosleep(&ms, NULL);
    ga_stream_cancel(gone);
    ProtobufCMessage *msg = NULL;
    char why[256] = "";
    assert_int_equal(ga_stream_recv(gone, &gradagg__v1__pull_chunk__descriptor, &msg, why, sizeof why),
                     GA_E_CANCELLED);
    ga_stream_destroy(gone);

    double t0 = now_s();
    ga_server_drain(srv);
    ga_status st = ga_stream_recv(waiting, &gradagg__v1__pull_chunk__descriptor, &msg, why, sizeof why);
    assert_null(msg);
    assert_int_equal(st, GA_E_DRAINING);
    ga_stream_destroy(waiting);
    ga_server_wait(srv);
    assert_true(now_s() - t0 < 10.0);
    /* Refused after the drain began: new joins. (The server has stopped: the transport says so.) */
    assert_int_not_equal(join(ch, "late", 1), GA_OK);
    ga_channel_destroy(ch);
    ga_server_destroy(srv);
}

/* ---- the binary ---- */

typedef struct child {
    pid_t pid;
    int out; /* the read end of its stdout */
} child;

static child spawn(const char *const *args)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    char *argv[16] = {GA_SERVER_BIN};
    int n = 1;
    for (; args[n - 1]; n++) argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execv(GA_SERVER_BIN, argv);
        _exit(127);
    }
    close(fds[1]);
    return (child){pid, fds[0]};
}

/* Reads the child's stdout until a full line or EOF (at most cap - 1 bytes). */
static void read_line(child *c, char *buf, size_t cap, uint32_t timeout_ms)
{
    size_t n = 0;
    double end = now_s() + timeout_ms / 1000.0;
    while (n + 1 < cap && now_s() < end) {
        struct pollfd p = {c->out, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        ssize_t r = read(c->out, buf + n, 1);
        if (r <= 0) break;
        if (buf[n++] == '\n') break;
    }
    buf[n] = '\0';
}

/* The child's exit status, or -1 when it did not exit within timeout_ms (then it is killed). */
static int wait_exit(child *c, uint32_t timeout_ms)
{
    double end = now_s() + timeout_ms / 1000.0;
    int status = 0;
    for (;;) {
        pid_t r = waitpid(c->pid, &status, WNOHANG);
        if (r == c->pid) break;
        if (now_s() > end) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &status, 0);
            close(c->out);
            return -1;
        }
        struct timespec ms = {0, 10000000};
        nanosleep(&ms, NULL);
    }
    close(c->out);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void test_binary_config_errors_exit_2(void **state)
{
    (void)state;
    const char *bad[][3] = {{"--threads", "many", NULL}, {"--listen=nowhere", NULL, NULL}, {"--bogus", NULL, NULL}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        child c = spawn(bad[i]);
        assert_int_equal(wait_exit(&c, TIMEOUT_MS), 2);
    }
    const char *print[] = {"--print-config", "--cq-threads", "3", NULL};
    child c = spawn(print);
    char line[256];
    read_line(&c, line, sizeof line, TIMEOUT_MS);
    assert_non_null(strstr(line, "listen"));
    assert_int_equal(wait_exit(&c, TIMEOUT_MS), 0);
    /* --print-config checks what only the start reads besides: a relay's codec. */
    const char *relay[] = {"--print-config", "--relay-to", "127.0.0.1:1", "--relay-codec", "bogus", NULL};
    child r = spawn(relay);
    assert_int_equal(wait_exit(&r, TIMEOUT_MS), 2);
}

static void test_binary_sigterm_exits_0(void **state)
{
    (void)state;
    char dir_flag[128];
    snprintf(dir_flag, sizeof dir_flag, "--data-dir=%s", data_dir);
    const char *args[] = {"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", dir_flag, "--drain-delay-ms=200",
                          NULL};
    child c = spawn(args);
    char line[256];
    read_line(&c, line, sizeof line, TIMEOUT_MS);
    int port = 0;
    if (sscanf(line, "gradagg-server: listening on 127.0.0.1:%d", &port) != 1) {
        kill(c.pid, SIGKILL);
        wait_exit(&c, TIMEOUT_MS);
        fail_msg("no listening line, got '%s'", line);
    }
    assert_true(port > 0 && port < 65536);
    /* The second line names the admin port (scripts read the first one unchanged). */
    read_line(&c, line, sizeof line, TIMEOUT_MS);
    int admin_port = 0;
    assert_int_equal(sscanf(line, "gradagg-server: admin on 127.0.0.1:%d", &admin_port), 1);
    assert_true(admin_port > 0 && admin_port < 65536 && admin_port != port);

    ga_channel *ch = connect_to(port);
    Gradagg__V1__JobConfig jc = GRADAGG__V1__JOB_CONFIG__INIT;
    jc.world_size = 1;
    Gradagg__V1__JoinRequest req = GRADAGG__V1__JOIN_REQUEST__INIT;
    req.job = "sigterm";
    req.rank = 0;
    req.incarnation = 1;
    req.config = &jc;
    ProtobufCMessage *resp = NULL;
    char why[256] = "";
    ga_status st = ga_call_unary(ch, GA_METHOD_JOIN, &req.base, TIMEOUT_MS, &resp, why, sizeof why);
    if (st != GA_OK) fail_msg("Join: %s: %s", ga_status_name(st), why);
    assert_int_equal(((Gradagg__V1__JoinResponse *)resp)->world_size, 1);
    protobuf_c_message_free_unpacked(resp, &ga_wire_allocator);
    ga_channel_destroy(ch);

    double t0 = now_s();
    assert_int_equal(kill(c.pid, SIGTERM), 0);
    assert_int_equal(wait_exit(&c, TIMEOUT_MS), 0);
    assert_true(now_s() - t0 >= 0.2); /* the drain delay was kept */
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    snprintf(data_dir, sizeof data_dir, "/tmp/ga_server_XXXXXX");
    if (!mkdtemp(data_dir)) return 1;
    test_memory_baseline();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_health_check),
        cmocka_unit_test(test_watch_follows_the_drain),
        cmocka_unit_test(test_cancelled_watch_is_finished),
        cmocka_unit_test(test_port_in_use),
        cmocka_unit_test(test_init_push_pull),
        cmocka_unit_test(test_drain_ends_waiting_and_cancelled_pulls),
        cmocka_unit_test(test_binary_config_errors_exit_2),
        cmocka_unit_test(test_binary_sigterm_exits_0),
        cmocka_unit_test(test_host_memory_returned),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ga_test_remove_dir(data_dir);
    return rc;
}
