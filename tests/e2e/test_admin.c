/* The admin HTTP server end to end. The server in-process (gRPC and admin on 127.0.0.1:0): two
 * SDK workers run sync steps with codecs none and 2bit, bad pushes are refused, and a scrape of
 * /metrics over a real socket has the exact steps, bytes per codec, workers, RPCs and
 * rejections, and passes `promtool check metrics` with no lint; /healthz, /readyz, 404, 405,
 * HEAD, keep-alive, 400 / 413 / 414 / 431 with the server still up, and /readyz 503 once the
 * drain begins. Then an admin server alone on its own loop: a slow client is cut off at the
 * request deadline and connections over the limit are closed. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "admin/admin.h"
#include "ga_alloc.h"
#include "ga_codec.h"
#include "ga_wire.h"
#include "gradagg.h"
#include "rpc_client.h"
#include "server/server.h"
#include "test_inproc_server.h"
#include "test_memory.h"

extern char **environ;

#define N 1000 /* elements of the one tensor: one chunk per push */
#define STEPS 3
#define TIMEOUT_MS 10000

static char data_dir[64];

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- a minimal HTTP client over a real socket ---- */

static int connect_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

static void send_all(int fd, const char *buf, size_t len)
{
    while (len) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        assert_true(n > 0);
        buf += n, len -= (size_t)n;
    }
}

/* Everything the server sends until it closes (or timeout_ms of silence). Returns owned
 * (free), NUL-terminated; *closed tells whether the server closed. */
static char *read_all(int fd, unsigned timeout_ms, size_t *len, bool *closed)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    *closed = false;
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)timeout_ms) <= 0) break;
        if (n + 4096 > cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        ssize_t r = recv(fd, buf + n, cap - n - 1, 0);
        if (r <= 0) {
            *closed = true;
            break;
        }
        n += (size_t)r;
    }
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

typedef struct reply {
    int status;
    char *raw;        /* the whole reply, owned */
    const char *body; /* into raw */
    size_t body_len;
    bool closed;
} reply;

/* Sends a raw request on a new connection and reads until the server closes it. */
static reply http(int port, const char *request, size_t len)
{
    int fd = connect_port(port);
    send_all(fd, request, len);
    reply r = {0};
    size_t n;
    r.raw = read_all(fd, TIMEOUT_MS, &n, &r.closed);
    close(fd);
    if (sscanf(r.raw, "HTTP/1.1 %d ", &r.status) != 1) r.status = -1;
    const char *sep = strstr(r.raw, "\r\n\r\n");
    r.body = sep ? sep + 4 : r.raw + n;
    r.body_len = (size_t)(r.raw + n - r.body);
    return r;
}

static reply get(int port, const char *method, const char *path)
{
    char req[512];
    int n = snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n", method, path);
    return http(port, req, (size_t)n);
}

/* The value of the sample `series` ("name{labels}" exactly as written) in a scrape; -1 when
 * absent. */
static double sample(const char *scrape, const char *series)
{
    size_t len = strlen(series);
    for (const char *p = scrape; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, series, len) == 0 && p[len] == ' ') return strtod(p + len + 1, NULL);
    return -1;
}

/* promtool check metrics < scrape: must exit 0 and print nothing (no lint either). Spawned,
 * not forked: this process runs gRPC threads. */
static void promtool_clean(const char *scrape, size_t len)
{
    char in[128], out[128];
    snprintf(in, sizeof in, "%s/scrape.txt", data_dir);
    snprintf(out, sizeof out, "%s/promtool.txt", data_dir);
    FILE *f = fopen(in, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(scrape, 1, len, f), len);
    fclose(f);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, in, O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    char *argv[] = {"promtool", "check", "metrics", NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, "promtool", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) fail_msg("cannot run promtool (%s): scripts/install-promtool installs it", strerror(rc));
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    f = fopen(out, "r");
    assert_non_null(f);
    char lint[4096] = "";
    size_t n = fread(lint, 1, sizeof lint - 1, f);
    lint[n] = '\0';
    fclose(f);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || n != 0)
        fail_msg("promtool check metrics: status %d, output:\n%s\nscrape:\n%s", status, lint, scrape);
}

/* ---- SDK workers ---- */

typedef struct worker {
    ga_client *c;
    uint32_t rank;
    float params[N], grads[N];
    ga_status st;
} worker;

static char address[64];

static void worker_open(worker *w, uint32_t rank, ga_codec_id codec)
{
    memset(w, 0, sizeof *w);
    w->rank = rank;
    ga_client_options o = GA_CLIENT_OPTIONS_INIT;
    o.server = address;
    o.job = "metrics \"e2e\"";
    o.rank = rank;
    o.world_size = 2;
    o.call_timeout_ms = TIMEOUT_MS;
    o.step_timeout_ms = 2 * TIMEOUT_MS;
    o.threads = 1;
    char msg[512];
    if (ga_client_create(&o, &w->c, msg, sizeof msg) != GA_OK) fail_msg("join rank %u: %s", rank, msg);
    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    t.codec = codec;
    if (codec == GA_CODEC_2BIT) t.params.threshold = 0.05f;
    uint64_t shape[1] = {N};
    assert_int_equal(ga_client_add_tensor(w->c, "w", shape, 1, w->params, &t, NULL), GA_OK);
}

static void *run_worker(void *arg)
{
    worker *w = arg;
    w->st = ga_client_init(w->c);
    for (int s = 0; s < STEPS && w->st == GA_OK; s++) {
        for (size_t i = 0; i < N; i++) w->grads[i] = (float)((int)((i * 7 + (size_t)s * 13 + w->rank) % 21) - 10) * 0.01f;
        const float *g[1] = {w->grads};
        w->st = ga_client_step(w->c, g);
    }
    if (w->st != GA_OK) fprintf(stderr, "rank %u: %s\n", w->rank, ga_client_error(w->c));
    return NULL;
}

/* One Push stream of one chunk; returns the call's status. */
static ga_status bad_push(const char *job, uint64_t incarnation)
{
    ga_channel *ch = NULL;
    assert_int_equal(ga_channel_create(address, 64u << 20, &ch), GA_OK);
    ga_stream *s = NULL;
    assert_int_equal(ga_stream_open(ch, GA_METHOD_PUSH, TIMEOUT_MS, &s), GA_OK);
    static const float payload[4] = {1, 2, 3, 4};
    Gradagg__V1__Codec codec;
    ga_codec_params p = ga_codec_params_default(GA_CODEC_NONE);
    ga_codec_to_wire(GA_CODEC_NONE, &p, &codec);
    Gradagg__V1__PushChunk c = GRADAGG__V1__PUSH_CHUNK__INIT;
    c.job = (char *)job;
    c.rank = 0;
    c.incarnation = incarnation;
    c.step = 0;
    c.tensor = "w";
    c.offset = 0;
    c.count = 4;
    c.codec = &codec;
    (void)ga_stream_send(s, &c.base, payload, sizeof payload);
    (void)ga_stream_close_send(s);
    ProtobufCMessage *resp = NULL;
    char why[256];
    ga_status st = ga_stream_recv(s, &gradagg__v1__push_response__descriptor, &resp, why, sizeof why);
    if (resp) {
        protobuf_c_message_free_unpacked(resp, &ga_wire_allocator);
        st = ga_stream_recv(s, &gradagg__v1__push_response__descriptor, &resp, why, sizeof why);
    }
    ga_stream_destroy(s);
    ga_channel_destroy(ch);
    return st;
}

#define JOB "ga_job=\"metrics \\\"e2e\\\"\""

static void scrape_after_steps(void **state)
{
    (void)state;
    ga_config cfg;
    ga_test_config_defaults(&cfg);
    snprintf(cfg.listen, sizeof cfg.listen, "127.0.0.1:0");
    snprintf(cfg.admin_listen, sizeof cfg.admin_listen, "127.0.0.1:0");
    snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", data_dir);
    cfg.drain_delay_ms = 2000; /* long enough to see /readyz 503 before the drain ends */
    cfg.log_level = GA_LOG_WARN;
    ga_server *srv = NULL;
    assert_int_equal(ga_server_start(&cfg, &srv), GA_OK);
    int port = ga_server_admin_port(srv);
    assert_true(port > 0 && port != ga_server_port(srv));
    snprintf(address, sizeof address, "127.0.0.1:%d", ga_server_port(srv));

    /* Before any job: ready, and already a clean scrape. */
    reply r = get(port, "GET", "/metrics");
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.raw, "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
    assert_true(sample(r.body, "gradagg_ready") == 1);
    assert_true(sample(r.body, "gradagg_jobs") == 0);
    promtool_clean(r.body, r.body_len);
    free(r.raw);

    static worker w[2];
    worker_open(&w[0], 0, GA_CODEC_NONE);
    worker_open(&w[1], 1, GA_CODEC_2BIT);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, run_worker, &w[i]), 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) assert_int_equal(w[i].st, GA_OK);

    /* Refused: one by the core (no such job), one by the stateless chunk checks (incarnation 0). */
    assert_int_equal(bad_push("no-such-job", 1), GA_E_UNKNOWN_JOB);
    assert_int_equal(bad_push("metrics", 0), GA_E_INVAL);

    r = get(port, "GET", "/metrics?x=1");
    assert_int_equal(r.status, 200);
    const char *m = r.body;
    size_t b2;
    assert_int_equal(ga_codec_encoded_size(GA_CODEC_2BIT, &(ga_codec_params){.threshold = 0.05f}, N, &b2), GA_OK);
    assert_true(sample(m, "gradagg_jobs") == 1);
    assert_true(sample(m, "gradagg_version{" JOB "}") == STEPS);
    assert_true(sample(m, "gradagg_steps_total{" JOB "}") == STEPS);
    assert_true(sample(m, "gradagg_step_duration_seconds_count{" JOB "}") == STEPS);
    assert_true(sample(m, "gradagg_step_duration_seconds_bucket{" JOB ",le=\"+Inf\"}") == STEPS);
    assert_true(sample(m, "gradagg_step_duration_seconds_sum{" JOB "}") > 0);
    /* A sync job: every push computed from the version just before its step (staleness 0). */
    assert_true(sample(m, "gradagg_push_staleness_count{" JOB "}") == 2 * STEPS);
    assert_true(sample(m, "gradagg_push_staleness_bucket{" JOB ",le=\"0\"}") == 2 * STEPS);
    assert_true(sample(m, "gradagg_push_staleness_sum{" JOB "}") == 0);
    assert_true(sample(m, "gradagg_received_bytes_total{" JOB ",codec=\"none\"}") == STEPS * N * 4);
    assert_true(sample(m, "gradagg_received_fp32_bytes_total{" JOB ",codec=\"none\"}") == STEPS * N * 4);
    assert_true(sample(m, "gradagg_received_bytes_total{" JOB ",codec=\"2bit\"}") == (double)(STEPS * b2));
    assert_true(sample(m, "gradagg_received_fp32_bytes_total{" JOB ",codec=\"2bit\"}") == STEPS * N * 4);
    assert_true(sample(m, "gradagg_received_bytes_total{" JOB ",codec=\"fp16\"}") == -1);
    assert_true(sample(m, "gradagg_workers{" JOB ",state=\"active\"}") == 2);
    assert_true(sample(m, "gradagg_workers{" JOB ",state=\"idle\"}") == 0);
    assert_true(sample(m, "gradagg_workers{" JOB ",state=\"left\"}") == 0);
    assert_true(sample(m, "gradagg_workers{" JOB ",state=\"absent\"}") == 0);
    /* Every push and every step close (--journal-sync step) is a timed journal write. */
    double writes = sample(m, "gradagg_journal_write_seconds_count");
    assert_true(writes >= 3 * STEPS);
    assert_true(sample(m, "gradagg_journal_write_seconds_bucket{le=\"+Inf\"}") == writes);
    assert_true(sample(m, "gradagg_journal_write_seconds_sum") > 0);
    assert_true(sample(m, "gradagg_late_pushes_total{" JOB "}") == 0);
    assert_true(sample(m, "gradagg_stragglers_total{" JOB "}") == 0);
    assert_true(sample(m, "gradagg_duplicate_pushes_total{" JOB "}") == 0);
    assert_true(sample(m, "gradagg_held_bytes") == 0);
    assert_true(sample(m, "gradagg_rpcs_total{method=\"Push\",code=\"OK\"}") == 2 * STEPS);
    assert_true(sample(m, "gradagg_rpcs_total{method=\"Join\",code=\"OK\"}") == 2);
    assert_true(sample(m, "gradagg_rpcs_total{method=\"Push\",code=\"NOT_FOUND\"}") == 1);
    assert_true(sample(m, "gradagg_rpcs_total{method=\"Push\",code=\"INVALID_ARGUMENT\"}") == 1);
    assert_true(sample(m, "gradagg_rejected_requests_total{reason=\"unknown_job\"}") == 1);
    assert_true(sample(m, "gradagg_rejected_requests_total{reason=\"inval\"}") == 1);
    char build_info[96];
    snprintf(build_info, sizeof build_info, "gradagg_build_info{version=\"0.1.0\",backend=\"%s\"}",
             ga_config_backend_name(ga_test_backend()));
    assert_true(sample(m, build_info) == 1);
    assert_true(sample(m, "gradagg_memory_bytes{device=\"host\"}") > 0);
    assert_true(sample(m, "gradagg_memory_peak_bytes{device=\"host\"}") >= sample(m, "gradagg_memory_bytes{device=\"host\"}"));
    assert_true(sample(m, "process_start_time_seconds") > 1.7e9);
    promtool_clean(r.body, r.body_len);
    free(r.raw);

    /* The workers leave. */
    ga_client_destroy(w[0].c);
    ga_client_destroy(w[1].c);
    r = get(port, "GET", "/metrics");
    assert_true(sample(r.body, "gradagg_workers{" JOB ",state=\"left\"}") == 2);
    assert_true(sample(r.body, "gradagg_workers{" JOB ",state=\"active\"}") == 0);
    assert_true(sample(r.body, "gradagg_rpcs_total{method=\"Leave\",code=\"OK\"}") == 2);
    free(r.raw);

    /* The other routes. */
    r = get(port, "GET", "/healthz");
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "ok\n");
    free(r.raw);
    r = get(port, "GET", "/readyz");
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "ready\n");
    free(r.raw);
    r = get(port, "GET", "/nope");
    assert_int_equal(r.status, 404);
    free(r.raw);
    r = get(port, "DELETE", "/metrics");
    assert_int_equal(r.status, 405);
    assert_non_null(strstr(r.raw, "\r\nAllow: GET, HEAD\r\n"));
    free(r.raw);
    r = get(port, "HEAD", "/metrics");
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body_len, 0);
    unsigned long clen = 0;
    const char *cl = strstr(r.raw, "Content-Length: ");
    assert_non_null(cl);
    clen = strtoul(cl + 16, NULL, 10);
    assert_true(clen > 1000);
    free(r.raw);

    /* Keep-alive: three pipelined requests on one connection, answered in order. */
    static const char pipelined[] = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
                                    "GET /nope HTTP/1.1\r\nHost: t\r\n\r\n"
                                    "GET /readyz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    r = http(port, pipelined, sizeof pipelined - 1);
    assert_true(r.closed);
    const char *a1 = strstr(r.raw, "HTTP/1.1 200 OK\r\n");
    const char *a2 = strstr(r.raw, "HTTP/1.1 404 Not Found\r\n");
    const char *a3 = a2 ? strstr(a2, "HTTP/1.1 200 OK\r\n") : NULL;
    assert_true(a1 == r.raw && a2 > a1 && a3 > a2);
    assert_non_null(strstr(a3, "\r\n\r\nready\n"));
    free(r.raw);

    /* Malformed and oversize requests: refused, the connection closed, the server unharmed. */
    static const char garbage[] = "GARBAGE\r\n\r\n";
    r = http(port, garbage, sizeof garbage - 1);
    assert_int_equal(r.status, 400);
    assert_true(r.closed);
    free(r.raw);
    static const char bad_version[] = "GET /healthz HTTP/9.Z\r\n\r\n";
    r = http(port, bad_version, sizeof bad_version - 1);
    assert_int_equal(r.status, 400);
    free(r.raw);
    char *big = malloc(20000);
    assert_non_null(big);
    int n = snprintf(big, 20000, "GET /healthz HTTP/1.1\r\nX-Big: %0*d\r\n\r\n", 10000, 0);
    r = http(port, big, (size_t)n);
    assert_int_equal(r.status, 431);
    free(r.raw);
    n = snprintf(big, 20000, "GET /%0*d HTTP/1.1\r\n\r\n", 3000, 0);
    r = http(port, big, (size_t)n);
    assert_int_equal(r.status, 414);
    free(r.raw);
    free(big);
    static const char large_body[] = "POST /metrics HTTP/1.1\r\nContent-Length: 100000\r\n\r\n";
    r = http(port, large_body, sizeof large_body - 1);
    assert_int_equal(r.status, 413);
    free(r.raw);
    r = get(port, "GET", "/healthz");
    assert_int_equal(r.status, 200);
    free(r.raw);

    /* The drain: /readyz 503 with the reason, /healthz still 200, gradagg_ready 0. */
    ga_server_drain(srv);
    for (int i = 0; i < 200; i++) {
        r = get(port, "GET", "/readyz");
        if (r.status == 503) break;
        free(r.raw);
        sleep_ms(5);
    }
    assert_int_equal(r.status, 503);
    assert_string_equal(r.body, "not ready: draining\n");
    free(r.raw);
    r = get(port, "GET", "/healthz");
    assert_int_equal(r.status, 200);
    free(r.raw);
    r = get(port, "GET", "/metrics");
    assert_true(sample(r.body, "gradagg_ready") == 0);
    free(r.raw);
    ga_server_destroy(srv);
}

/* Binding a port that is taken fails the start with GA_E_IO and leaves nothing running. */
static void admin_port_in_use(void **state)
{
    (void)state;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(fd, 1), 0);
    socklen_t sl = sizeof sa;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    ga_config cfg;
    ga_test_config_defaults(&cfg);
    snprintf(cfg.listen, sizeof cfg.listen, "127.0.0.1:0");
    snprintf(cfg.admin_listen, sizeof cfg.admin_listen, "127.0.0.1:%d", ntohs(sa.sin_port));
    snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", data_dir);
    ga_server *srv = NULL;
    assert_int_equal(ga_server_start(&cfg, &srv), GA_E_IO);
    assert_null(srv);
    close(fd);
}

/* ---- the admin server alone, with small limits ---- */

typedef struct lone {
    uv_loop_t loop;
    uv_async_t stop;
    ga_admin *admin;
    int port;
    pthread_t thread;
} lone;

static void on_stop(uv_async_t *h)
{
    lone *l = h->data;
    ga_admin_close(l->admin);
    uv_close((uv_handle_t *)h, NULL);
}

static void *lone_main(void *arg)
{
    lone *l = arg;
    uv_run(&l->loop, UV_RUN_DEFAULT);
    return NULL;
}

static void slow_clients_and_connection_limit(void **state)
{
    (void)state;
    static lone l;
    assert_int_equal(uv_loop_init(&l.loop), 0);
    assert_int_equal(uv_async_init(&l.loop, &l.stop, on_stop), 0);
    l.stop.data = &l;
    ga_admin_options o = GA_ADMIN_OPTIONS_INIT;
    o.max_connections = 2;
    o.request_timeout_ms = 300;
    char why[256];
    assert_int_equal(ga_admin_start(&l.loop, &o, &l.admin, &l.port, why, sizeof why), GA_OK);
    ga_admin_set_ready(l.admin, false, "restoring checkpoints");
    assert_int_equal(pthread_create(&l.thread, NULL, lone_main, &l), 0);

    /* Not ready yet: 503 with the reason; a scrape without a collector is still valid. */
    reply r = get(l.port, "GET", "/readyz");
    assert_int_equal(r.status, 503);
    assert_string_equal(r.body, "not ready: restoring checkpoints\n");
    free(r.raw);
    r = get(l.port, "GET", "/metrics");
    assert_string_equal(r.body, "# HELP gradagg_ready 1 when /readyz answers 200 (restored, not draining).\n"
                                "# TYPE gradagg_ready gauge\n"
                                "gradagg_ready 0\n");
    free(r.raw);

    /* A slow client: half a request line, then nothing; an idle one. Two connections are open
     * (the limit): a third, a probe, takes the slot of the one that waited longest (the slow
     * one, closed at once, unanswered) and is answered. */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int slow = connect_port(l.port);
    send_all(slow, "GET /hea", 8);
    sleep_ms(50);
    int idle = connect_port(l.port);
    sleep_ms(50);
    r = get(l.port, "GET", "/healthz");
    assert_int_equal(r.status, 200);
    free(r.raw);
    size_t n;
    bool closed;
    char *got = read_all(slow, 3000, &n, &closed);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_true(closed);
    assert_int_equal(n, 0);
    double waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    assert_true(waited < 0.25); /* made room: before its own deadline */
    free(got);
    close(slow);
    /* The idle one is cut off at its deadline, unanswered. */
    got = read_all(idle, 3000, &n, &closed);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_true(closed);
    assert_int_equal(n, 0);
    waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    assert_true(waited >= 0.3 && waited < 2.5);
    free(got);
    close(idle);
    /* Both slots are free again. */
    r = get(l.port, "GET", "/healthz");
    assert_int_equal(r.status, 200);
    free(r.raw);

    uv_async_send(&l.stop);
    pthread_join(l.thread, NULL);
    assert_int_equal(uv_loop_close(&l.loop), 0);
}

int main(void)
{
    snprintf(data_dir, sizeof data_dir, "/tmp/test_admin.XXXXXX");
    if (!mkdtemp(data_dir)) return 1;
    test_memory_baseline();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(scrape_after_steps),
        cmocka_unit_test(admin_port_in_use),
        cmocka_unit_test(slow_clients_and_connection_limit),
        cmocka_unit_test(test_host_memory_returned),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", data_dir);
    if (system(cmd) != 0) failed++;
    return failed;
}
