/* Security and limits against the real server (in-process, gRPC on 127.0.0.1:0), with a PKI the
 * openssl CLI makes at test time (a CA, an unrelated CA, a server certificate for 127.0.0.1 and
 * localhost, a client certificate from each CA). On a mutual-TLS server with bearer tokens every
 * refusal (plaintext, the wrong CA, no client certificate, a client certificate from the wrong
 * CA, no token, a malformed header, an unknown token, another job's token) gets its exact status
 * on every method and changes nothing; then the SDK runs real steps over TLS + mTLS + its token.
 * Also: TLS without client certificates, the target name override, health without a token, bad
 * files refused at server start and at SDK create with messages naming the setting and the
 * file, and one row per limit (message size, jobs, tensors, memory, elements). */
#define _GNU_SOURCE /* mkdtemp */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_dirs.h"

#include "test_memory.h"

#include "api/health.h"
#include "base/log.h"
#include "ga_alloc.h"
#include "ga_wire.h"
#include "gradagg.h"
#include "rpc_client.h"
#include "server/config.h"
#include "server/security.h"
#include "server/server.h"
#include "test_inproc_server.h"

#define TIMEOUT_MS 10000u
#define MSG_LIMIT (64u << 20)
#define TOK_A "alpha-0123456789abcdef"
#define TOK_B "beta-0123456789abcdef0"
#define TOK_C "gamma-0123456789abcdef"
#define N 64

/* ---- the PKI and files, made once ---- */

static char dir[64];
static struct {
    char ca[128], ca2[128], server_cert[128], server_key[128], client_cert[128], client_key[128];
    char rogue_cert[128], rogue_key[128], garbage[128], enc_key[128], tokens[128], bad_tokens[128];
    char missing[128], data[128];
} F;

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    if (rc != 0) fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
    return rc;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

#define PATH(field, name) snprintf(F.field, sizeof F.field, "%s/%s", dir, name)

static int make_pki(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/gradagg-sec-XXXXXX");
    if (!mkdtemp(dir)) return -1;
    PATH(ca, "ca.pem");
    PATH(ca2, "ca2.pem");
    PATH(server_cert, "server.pem");
    PATH(server_key, "server.key");
    PATH(client_cert, "client.pem");
    PATH(client_key, "client.key");
    PATH(rogue_cert, "rogue.pem");
    PATH(rogue_key, "rogue.key");
    PATH(garbage, "garbage.pem");
    PATH(enc_key, "enc.key");
    PATH(tokens, "tokens");
    PATH(bad_tokens, "bad-tokens");
    PATH(missing, "no-such-file.pem");
    PATH(data, "data");
    char path[160];
    snprintf(path, sizeof path, "%s/server.ext", dir);
    write_file(path, "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n");
    snprintf(path, sizeof path, "%s/client.ext", dir);
    write_file(path, "extendedKeyUsage=clientAuth\n");
    write_file(F.garbage, "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n");
    write_file(F.tokens, "# test tokens\nalpha " TOK_A "\nbeta " TOK_B "\ngamma " TOK_C "\n");
    write_file(F.bad_tokens, "alpha " TOK_A "\nbeta short\n");
    /* P-256 keys: fast to make. Each leaf is signed by its CA with the extensions above. */
    const char *key = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
    int rc = sh("cd '%s' && exec >/dev/null 2>&1 && "
                "openssl req -x509 %s -keyout ca.key -out ca.pem -days 2 -subj /CN=gradagg-test-ca && "
                "openssl req -x509 %s -keyout ca2.key -out ca2.pem -days 2 -subj /CN=unrelated-ca && "
                "openssl req %s -keyout server.key -out server.csr -subj /CN=localhost && "
                "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 "
                "-extfile server.ext && "
                "openssl req %s -keyout client.key -out client.csr -subj /CN=worker && "
                "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 2 "
                "-extfile client.ext && "
                "openssl req %s -keyout rogue.key -out rogue.csr -subj /CN=rogue && "
                "openssl x509 -req -in rogue.csr -CA ca2.pem -CAkey ca2.key -CAcreateserial -out rogue.pem -days 2 "
                "-extfile client.ext && "
                "openssl pkey -in client.key -aes256 -passout pass:secret -out enc.key",
                dir, key, key, key, key, key);
    return rc == 0 ? 0 : -1;
}

static int remove_pki(void **state)
{
    (void)state;
    if (dir[0]) sh("rm -rf '%s'", dir);
    return 0;
}

/* ---- servers and channels ---- */

typedef struct srv {
    ga_server *s;
    char target[64];
} srv;

static void base_config(ga_config *cfg)
{
    ga_test_config_defaults(cfg);
    snprintf(cfg->listen, sizeof cfg->listen, "127.0.0.1:0");
    ga_test_fresh_dir(cfg->data_dir, sizeof cfg->data_dir, F.data); /* nothing restored from an earlier server */
    cfg->admin_listen[0] = '\0'; /* another port would clash between servers */
    cfg->log_level = GA_LOG_ERROR;
}

static void secure_config(ga_config *cfg, bool mtls, bool tokens)
{
    base_config(cfg);
    snprintf(cfg->tls_cert, sizeof cfg->tls_cert, "%s", F.server_cert);
    snprintf(cfg->tls_key, sizeof cfg->tls_key, "%s", F.server_key);
    if (mtls) snprintf(cfg->tls_client_ca, sizeof cfg->tls_client_ca, "%s", F.ca);
    if (tokens) snprintf(cfg->auth_tokens, sizeof cfg->auth_tokens, "%s", F.tokens);
}

static void srv_start(srv *v, const ga_config *cfg)
{
    assert_int_equal(ga_server_start(cfg, &v->s), GA_OK);
    snprintf(v->target, sizeof v->target, "127.0.0.1:%d", ga_server_port(v->s));
}

static void srv_stop(srv *v) { ga_server_destroy(v->s); }

static ga_channel *chan(const srv *v, const char *ca, const char *cert, const char *key, const char *authz)
{
    ga_channel_security sec = {ca, cert, key, NULL, authz, 0};
    ga_channel *ch = NULL;
    char why[512] = "";
    ga_status st = ga_channel_create_secure(v->target, MSG_LIMIT, &sec, &ch, why, sizeof why);
    if (st != GA_OK) fail_msg("channel: %s", why);
    return ch;
}

/* A channel that passes every check for `authz`. */
static ga_channel *good_chan(const srv *v, const char *authz)
{
    return chan(v, F.ca, F.client_cert, F.client_key, authz);
}

/* ---- raw calls: each returns the call's status, its message in why ---- */

static ga_status unary(ga_channel *ch, ga_method_id m, const ProtobufCMessage *req, ProtobufCMessage **out, char *why,
                       size_t cap)
{
    ProtobufCMessage *resp = NULL;
    ga_status st = ga_call_unary(ch, m, req, TIMEOUT_MS, &resp, why, cap);
    if (out) *out = resp;
    else if (resp) protobuf_c_message_free_unpacked(resp, &ga_wire_allocator);
    return st;
}

static ga_status do_join(ga_channel *ch, const char *job, uint32_t rank, uint64_t inc, char *why, size_t cap)
{
    Gradagg__V1__Optimizer opt = GRADAGG__V1__OPTIMIZER__INIT;
    Gradagg__V1__Straggler str = GRADAGG__V1__STRAGGLER__INIT;
    Gradagg__V1__Codec pull = GRADAGG__V1__CODEC__INIT;
    Gradagg__V1__JobConfig cfg = GRADAGG__V1__JOB_CONFIG__INIT;
    cfg.world_size = 1;
    cfg.optimizer = &opt;
    cfg.straggler = &str;
    cfg.pull_codec = &pull;
    Gradagg__V1__JoinRequest req = GRADAGG__V1__JOIN_REQUEST__INIT;
    req.job = (char *)job;
    req.rank = rank;
    req.incarnation = inc;
    req.config = &cfg;
    return unary(ch, GA_METHOD_JOIN, &req.base, NULL, why, cap);
}

static ga_status do_leave(ga_channel *ch, const char *job, uint32_t rank, uint64_t inc, char *why, size_t cap)
{
    Gradagg__V1__LeaveRequest req = GRADAGG__V1__LEAVE_REQUEST__INIT;
    req.job = (char *)job;
    req.rank = rank;
    req.incarnation = inc;
    return unary(ch, GA_METHOD_LEAVE, &req.base, NULL, why, cap);
}

/* Reads a client stream's answer to its end. */
static ga_status finish_stream(ga_stream *s, ga_status st, const ProtobufCMessageDescriptor *resp, char *why,
                               size_t cap)
{
    if (st == GA_OK) st = ga_stream_close_send(s);
    ProtobufCMessage *m = NULL;
    /* After a failed send the status is already known: recv returns it with its message. */
    ga_status end = ga_stream_recv(s, resp, &m, why, cap);
    while (m) {
        protobuf_c_message_free_unpacked(m, &ga_wire_allocator);
        m = NULL;
        end = ga_stream_recv(s, resp, &m, why, cap);
    }
    ga_stream_destroy(s);
    return st == GA_OK || end != GA_OK ? end : st;
}

typedef struct tensor_init {
    const char *name;
    uint64_t n;
    const float *values; /* NULL: zeros, no payload */
} tensor_init;

static ga_status do_init(ga_channel *ch, const char *job, uint64_t inc, const tensor_init *t, int count, char *why,
                         size_t cap)
{
    ga_stream *s = NULL;
    ga_status st = ga_stream_open(ch, GA_METHOD_INIT, TIMEOUT_MS, &s);
    if (st != GA_OK) return st;
    for (int i = 0; i < count && st == GA_OK; i++) {
        uint64_t shape[1] = {t[i].n};
        Gradagg__V1__InitChunk c = GRADAGG__V1__INIT_CHUNK__INIT;
        c.job = (char *)job;
        c.rank = 0;
        c.incarnation = inc;
        c.tensor = (char *)t[i].name;
        c.n_shape = 1;
        c.shape = shape;
        c.count = t[i].n;
        st = ga_stream_send(s, &c.base, t[i].values, t[i].values ? t[i].n * sizeof(float) : 0);
    }
    return finish_stream(s, st, &gradagg__v1__init_response__descriptor, why, cap);
}

static ga_status do_push(ga_channel *ch, const char *job, uint64_t inc, uint64_t step, const float *g, char *why,
                         size_t cap)
{
    ga_stream *s = NULL;
    ga_status st = ga_stream_open(ch, GA_METHOD_PUSH, TIMEOUT_MS, &s);
    if (st != GA_OK) return st;
    Gradagg__V1__Codec codec = GRADAGG__V1__CODEC__INIT;
    Gradagg__V1__PushChunk c = GRADAGG__V1__PUSH_CHUNK__INIT;
    c.job = (char *)job;
    c.rank = 0;
    c.incarnation = inc;
    c.step = step;
    c.tensor = "w";
    c.count = N;
    c.codec = &codec;
    st = ga_stream_send(s, &c.base, g, N * sizeof(float));
    return finish_stream(s, st, &gradagg__v1__push_response__descriptor, why, cap);
}

static ga_status do_pull(ga_channel *ch, const char *job, uint64_t inc, char *why, size_t cap)
{
    Gradagg__V1__PullRequest req = GRADAGG__V1__PULL_REQUEST__INIT;
    req.job = (char *)job;
    req.incarnation = inc;
    ga_stream *s = NULL;
    ga_status st = ga_stream_open(ch, GA_METHOD_PULL, TIMEOUT_MS, &s);
    if (st != GA_OK) return st;
    st = ga_stream_send(s, &req.base, NULL, 0);
    return finish_stream(s, st, &gradagg__v1__pull_chunk__descriptor, why, cap);
}

typedef struct snap {
    uint64_t version, open_step, steps, duplicates;
    uint32_t committed;
    size_t nmembers, ntensors;
    struct {
        uint32_t rank;
        uint64_t incarnation, last_step;
        bool joined, pushed;
    } m[4];
    uint64_t elements[8];
} snap;

static ga_status do_status(ga_channel *ch, const char *job, snap *out, char *why, size_t cap)
{
    Gradagg__V1__StatusRequest req = GRADAGG__V1__STATUS_REQUEST__INIT;
    req.job = (char *)job;
    ProtobufCMessage *resp = NULL;
    ga_status st = unary(ch, GA_METHOD_STATUS, &req.base, &resp, why, cap);
    if (st != GA_OK || !out) {
        if (resp) protobuf_c_message_free_unpacked(resp, &ga_wire_allocator);
        return st;
    }
    const Gradagg__V1__StatusResponse *r = (const Gradagg__V1__StatusResponse *)resp;
    memset(out, 0, sizeof *out);
    out->version = r->version;
    out->open_step = r->open_step;
    out->steps = r->steps;
    out->duplicates = r->duplicate_pushes;
    out->committed = r->committed;
    out->nmembers = r->n_members;
    for (size_t i = 0; i < r->n_members && i < 4; i++) {
        out->m[i].rank = r->members[i]->rank;
        out->m[i].incarnation = r->members[i]->incarnation;
        out->m[i].last_step = r->members[i]->last_step;
        out->m[i].joined = r->members[i]->joined;
        out->m[i].pushed = r->members[i]->has_pushed;
    }
    out->ntensors = r->n_tensors;
    for (size_t i = 0; i < r->n_tensors && i < 8; i++) out->elements[i] = r->tensors[i]->elements;
    protobuf_c_message_free_unpacked(resp, &ga_wire_allocator);
    return GA_OK;
}

static bool snap_equal(const snap *a, const snap *b)
{
    if (a->version != b->version || a->open_step != b->open_step || a->steps != b->steps ||
        a->duplicates != b->duplicates || a->committed != b->committed || a->nmembers != b->nmembers ||
        a->ntensors != b->ntensors)
        return false;
    for (size_t i = 0; i < a->nmembers && i < 4; i++)
        if (a->m[i].rank != b->m[i].rank || a->m[i].incarnation != b->m[i].incarnation ||
            a->m[i].last_step != b->m[i].last_step || a->m[i].joined != b->m[i].joined ||
            a->m[i].pushed != b->m[i].pushed)
            return false;
    for (size_t i = 0; i < a->ntensors && i < 8; i++)
        if (a->elements[i] != b->elements[i]) return false;
    return true;
}

static snap status_of(ga_channel *ch, const char *job)
{
    snap s;
    char why[512] = "";
    ga_status st = do_status(ch, job, &s, why, sizeof why);
    if (st != GA_OK) fail_msg("status of %s: %s: %s", job, ga_status_name(st), why);
    return s;
}

/* ---- the SDK ---- */

static ga_client_options sdk_options(const srv *v, const char *job)
{
    ga_client_options o = GA_CLIENT_OPTIONS_INIT;
    o.server = v->target;
    o.job = job;
    o.world_size = 1;
    o.optimizer = GA_SERVER_OPTIM_SGD;
    o.sgd.lr = 0.5f;
    o.call_timeout_ms = TIMEOUT_MS;
    o.step_timeout_ms = TIMEOUT_MS;
    o.max_retries = 1;
    o.backoff_ms = 5;
    o.backoff_max_ms = 10;
    o.threads = 1;
    return o;
}

typedef struct worker {
    ga_client *c;
    float params[N], grads[N];
} worker;

/* Creates, registers "w", inits; GA_OK or the failing status with its message in msg. */
static ga_status worker_open(worker *w, const ga_client_options *o, char *msg, size_t cap)
{
    memset(w, 0, sizeof *w);
    for (int i = 0; i < N; i++) w->params[i] = (float)i * 0.25f;
    ga_status st = ga_client_create(o, &w->c, msg, cap);
    if (st != GA_OK) return st;
    uint64_t shape[1] = {N};
    assert_int_equal(ga_client_add_tensor(w->c, "w", shape, 1, w->params, NULL, NULL), GA_OK);
    st = ga_client_init(w->c);
    if (st != GA_OK) snprintf(msg, cap, "%s", ga_client_error(w->c));
    return st;
}

/* One SGD step with gradient 1 everywhere: every parameter moves by -lr. */
static void worker_step(worker *w)
{
    float before[N];
    memcpy(before, w->params, sizeof before);
    for (int i = 0; i < N; i++) w->grads[i] = 1.0f;
    const float *g[1] = {w->grads};
    ga_status st = ga_client_step(w->c, g);
    if (st != GA_OK) fail_msg("step: %s", ga_client_error(w->c));
    for (int i = 0; i < N; i++) assert_true(w->params[i] == before[i] - 0.5f);
}

/* ---- the refusals on a mutual-TLS server with tokens ---- */

typedef struct refusal {
    const char *what;
    const char *ca, *cert, *key, *authz;
    ga_status want;
} refusal;

/* Every method, each of which would change the job (or create one) if it were let through. */
static void expect_refused_everywhere(const refusal *r, ga_channel *ch, uint64_t inc, uint64_t step)
{
    char why[512];
    float g[N];
    for (int i = 0; i < N; i++) g[i] = 1.0f;
    tensor_init extra = {"extra", 8, NULL};
    struct {
        const char *call;
        ga_status got;
    } calls[7];
    int n = 0;
    calls[n].call = "Join with a new incarnation";
    calls[n++].got = do_join(ch, "alpha", 0, 777, why, sizeof why);
    calls[n].call = "Join creating job gamma";
    calls[n++].got = do_join(ch, "gamma", 0, 1, why, sizeof why);
    calls[n].call = "Leave";
    calls[n++].got = do_leave(ch, "alpha", 0, inc, why, sizeof why);
    calls[n].call = "InitTensors";
    calls[n++].got = do_init(ch, "alpha", inc, &extra, 1, why, sizeof why);
    calls[n].call = "Push";
    calls[n++].got = do_push(ch, "alpha", inc, step, g, why, sizeof why);
    calls[n].call = "Pull";
    calls[n++].got = do_pull(ch, "alpha", inc, why, sizeof why);
    calls[n].call = "Status";
    calls[n++].got = do_status(ch, "alpha", NULL, why, sizeof why);
    for (int i = 0; i < n; i++)
        if (calls[i].got != r->want)
            fail_msg("%s: %s got %s, want %s", r->what, calls[i].call, ga_status_name(calls[i].got),
                     ga_status_name(r->want));
    /* A token is never echoed back. */
    assert_null(strstr(why, TOK_A));
    assert_null(strstr(why, TOK_B));
}

static void test_mtls_and_tokens_refuse_and_change_nothing(void **state)
{
    (void)state;
    ga_config cfg;
    secure_config(&cfg, true, true);
    srv v;
    srv_start(&v, &cfg);

    /* The positive path first: TLS + client certificate + the job's token run a real step. */
    ga_client_options o = sdk_options(&v, "alpha");
    o.tls_ca_file = F.ca;
    o.tls_cert_file = F.client_cert;
    o.tls_key_file = F.client_key;
    o.auth_token = TOK_A;
    static worker w;
    char msg[512] = "";
    if (worker_open(&w, &o, msg, sizeof msg) != GA_OK) fail_msg("open: %s", msg);
    worker_step(&w);
    assert_int_equal(ga_client_version(w.c), 1);

    ga_channel *obs_a = good_chan(&v, "Bearer " TOK_A);
    ga_channel *obs_c = good_chan(&v, "Bearer " TOK_C);
    snap before = status_of(obs_a, "alpha");
    assert_int_equal(before.version, 1);
    assert_int_equal(before.nmembers, 1);
    uint64_t inc = before.m[0].incarnation;

    static const char bad_scheme[] = "Basic " TOK_A;
    static const refusal rows[] = {
        {"plaintext client to a TLS server", NULL, NULL, NULL, "Bearer " TOK_A, GA_E_UNAVAILABLE},
        {"client trusting the wrong CA", NULL, NULL, NULL, "Bearer " TOK_A, GA_E_UNAVAILABLE},
        {"no client certificate", NULL, NULL, NULL, "Bearer " TOK_A, GA_E_UNAVAILABLE},
        {"client certificate from the wrong CA", NULL, NULL, NULL, "Bearer " TOK_A, GA_E_UNAVAILABLE},
        {"no token", NULL, NULL, NULL, NULL, GA_E_UNAUTHENTICATED},
        {"malformed authorization header", NULL, NULL, NULL, bad_scheme, GA_E_UNAUTHENTICATED},
        {"a token no job has", NULL, NULL, NULL, "Bearer no-job-has-this-token-42", GA_E_UNAUTHENTICATED},
        {"another job's token", NULL, NULL, NULL, "Bearer " TOK_B, GA_E_PERMISSION_DENIED},
    };
    /* Paths are only known at run time: fill the TLS columns here. */
    refusal table[sizeof rows / sizeof rows[0]];
    memcpy(table, rows, sizeof rows);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        table[i].ca = F.ca;
        table[i].cert = F.client_cert;
        table[i].key = F.client_key;
    }
    table[0].ca = table[0].cert = table[0].key = NULL; /* plaintext */
    table[1].ca = F.ca2;
    table[2].cert = table[2].key = NULL;
    table[3].cert = F.rogue_cert;
    table[3].key = F.rogue_key;

    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        ga_channel *ch = chan(&v, table[i].ca, table[i].cert, table[i].key, table[i].authz);
        expect_refused_everywhere(&table[i], ch, inc, before.open_step);
        ga_channel_destroy(ch);
        snap after = status_of(obs_a, "alpha");
        if (!snap_equal(&before, &after)) fail_msg("%s changed job alpha", table[i].what);
        char why[256];
        ga_status st = do_status(obs_c, "gamma", NULL, why, sizeof why);
        if (st != GA_E_UNKNOWN_JOB) fail_msg("%s: job gamma: %s", table[i].what, ga_status_name(st));
    }

    /* The SDK with a wrong or missing token: refused at once, not retried (one retry would take
     * 5 s with this backoff; a refusal under valgrind takes about 1 s). */
    ga_client_options bad = o;
    bad.max_retries = 5;
    bad.backoff_ms = 5000;
    bad.backoff_max_ms = 5000;
    const char *tokens[2] = {NULL, TOK_B};
    const ga_status want[2] = {GA_E_UNAUTHENTICATED, GA_E_PERMISSION_DENIED};
    for (int i = 0; i < 2; i++) {
        bad.auth_token = tokens[i];
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        ga_client *c = NULL;
        ga_status st = ga_client_create(&bad, &c, msg, sizeof msg);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        assert_int_equal(st, want[i]);
        assert_null(c);
        assert_non_null(strstr(msg, i == 0 ? "E_UNAUTHENTICATED" : "E_PERMISSION_DENIED"));
        assert_null(strstr(msg, TOK_B));
        double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        assert_true(s < 4.0);
    }
    snap after = status_of(obs_a, "alpha");
    assert_true(snap_equal(&before, &after));

    /* Health needs no token (probes carry none), even here. */
    ga_channel *probe = good_chan(&v, NULL);
    Grpc__Health__V1__HealthCheckRequest hreq = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    hreq.service = "";
    ProtobufCMessage *hresp = NULL;
    char why[256];
    assert_int_equal(unary(probe, GA_METHOD_HEALTH_CHECK, &hreq.base, &hresp, why, sizeof why), GA_OK);
    assert_int_equal(((Grpc__Health__V1__HealthCheckResponse *)hresp)->status, GA_SERVING);
    protobuf_c_message_free_unpacked(hresp, &ga_wire_allocator);
    ga_channel_destroy(probe);

    /* Still working for the rightful worker after all of it. */
    worker_step(&w);
    assert_int_equal(ga_client_version(w.c), 2);
    after = status_of(obs_a, "alpha");
    assert_int_equal(after.version, 2);
    assert_int_equal(after.steps, before.steps + 1);

    ga_client_destroy(w.c);
    ga_channel_destroy(obs_a);
    ga_channel_destroy(obs_c);
    srv_stop(&v);
}

/* ---- TLS without client certificates ---- */

static void test_tls_without_client_certificates(void **state)
{
    (void)state;
    ga_config cfg;
    secure_config(&cfg, false, false);
    srv v;
    srv_start(&v, &cfg);
    char msg[512] = "";
    static worker w;

    /* The CA alone is enough; the certificate's DNS name works through the override. */
    ga_client_options o = sdk_options(&v, "tls");
    o.tls_ca_file = F.ca;
    o.tls_target_name = "localhost";
    if (worker_open(&w, &o, msg, sizeof msg) != GA_OK) fail_msg("open: %s", msg);
    worker_step(&w);
    ga_client_destroy(w.c);

    /* A name the certificate does not carry fails the handshake, as does plaintext. */
    o.job = "tls2";
    o.tls_target_name = "wrong.example";
    assert_int_equal(worker_open(&w, &o, msg, sizeof msg), GA_E_UNAVAILABLE);
    o.tls_target_name = NULL;
    o.tls_ca_file = NULL;
    assert_int_equal(worker_open(&w, &o, msg, sizeof msg), GA_E_UNAVAILABLE);
    /* Nothing of them arrived: job tls2 does not exist. */
    ga_channel *ch = chan(&v, F.ca, NULL, NULL, NULL);
    char why[256];
    assert_int_equal(do_status(ch, "tls2", NULL, why, sizeof why), GA_E_UNKNOWN_JOB);
    assert_int_equal(status_of(ch, "tls").version, 1);
    ga_channel_destroy(ch);
    srv_stop(&v);
}

/* ---- bad files ---- */

/* A relay's upstream TLS files (--relay-tls-*), all valid. */
static void relay_files(ga_config *cfg)
{
    snprintf(cfg->relay_tls_ca, sizeof cfg->relay_tls_ca, "%s", F.ca);
    snprintf(cfg->relay_tls_cert, sizeof cfg->relay_tls_cert, "%s", F.client_cert);
    snprintf(cfg->relay_tls_key, sizeof cfg->relay_tls_key, "%s", F.client_key);
}

static void test_server_refuses_bad_files(void **state)
{
    (void)state;
    ga_config cfg;
    const struct {
        const char *what;
        size_t field;
        const char *path;
        ga_status want;
        const char *flag, *words;
    } rows[] = {
        {"missing certificate", offsetof(ga_config, tls_cert), F.missing, GA_E_IO, "--tls-cert", "cannot open"},
        {"certificate that is not PEM", offsetof(ga_config, tls_cert), F.garbage, GA_E_CONFIG, "--tls-cert",
         "holds no PEM certificate"},
        {"a key given as the certificate", offsetof(ga_config, tls_cert), F.server_key, GA_E_CONFIG, "--tls-cert",
         "no PEM certificate"},
        {"key that is not PEM", offsetof(ga_config, tls_key), F.garbage, GA_E_CONFIG, "--tls-key", "no PEM private key"},
        {"encrypted key", offsetof(ga_config, tls_key), F.enc_key, GA_E_CONFIG, "--tls-key", "unencrypted"},
        {"key of another certificate", offsetof(ga_config, tls_key), F.client_key, GA_E_CONFIG, "--tls-key",
         "is not the private key of --tls-cert"},
        {"missing client CA", offsetof(ga_config, tls_client_ca), F.missing, GA_E_IO, "--tls-client-ca", "cannot open"},
        {"client CA that is not PEM", offsetof(ga_config, tls_client_ca), F.garbage, GA_E_CONFIG, "--tls-client-ca",
         "holds no PEM certificate"},
        {"missing token file", offsetof(ga_config, auth_tokens), F.missing, GA_E_IO, "--auth-tokens", "cannot open"},
        {"malformed token file", offsetof(ga_config, auth_tokens), F.bad_tokens, GA_E_CONFIG, "--auth-tokens",
         ":2: token of job 'beta' has 5 characters"},
        /* A relay's upstream files, checked the same way. */
        {"missing upstream CA", offsetof(ga_config, relay_tls_ca), F.missing, GA_E_IO, "--relay-tls-ca", "cannot open"},
        {"upstream CA that is not PEM", offsetof(ga_config, relay_tls_ca), F.garbage, GA_E_CONFIG, "--relay-tls-ca",
         "holds no PEM certificate"},
        {"missing relay certificate", offsetof(ga_config, relay_tls_cert), F.missing, GA_E_IO, "--relay-tls-cert",
         "cannot open"},
        {"relay key of another certificate", offsetof(ga_config, relay_tls_key), F.server_key, GA_E_CONFIG,
         "--relay-tls-key", "is not the private key of --relay-tls-cert"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        secure_config(&cfg, true, true);
        relay_files(&cfg);
        snprintf((char *)&cfg + rows[i].field, GA_CONFIG_PATH_MAX, "%s", rows[i].path);
        ga_security sec;
        char why[2048] = "";
        ga_status st = ga_security_load(&cfg, &sec, why, sizeof why);
        if (st != rows[i].want) fail_msg("%s: got %s (%s)", rows[i].what, ga_status_name(st), why);
        if (!strstr(why, rows[i].flag) || !strstr(why, rows[i].path) || !strstr(why, rows[i].words))
            fail_msg("%s: message '%s' lacks %s, %s or '%s'", rows[i].what, why, rows[i].flag, rows[i].path,
                     rows[i].words);
        ga_server *s = NULL;
        assert_int_equal(ga_server_start(&cfg, &s), rows[i].want);
        assert_null(s);
    }
    /* The same files in their right places pass, the relay's too; the server's start. */
    secure_config(&cfg, true, true);
    relay_files(&cfg);
    ga_security sec;
    char why[2048] = "";
    if (ga_security_load(&cfg, &sec, why, sizeof why) != GA_OK) fail_msg("valid files refused: %s", why);
    ga_security_free(&sec);
    secure_config(&cfg, true, true);
    srv v;
    srv_start(&v, &cfg);
    srv_stop(&v);
}

static void test_sdk_refuses_bad_files(void **state)
{
    (void)state;
    const struct {
        const char *what;
        const char *ca, *cert, *key, *token;
        ga_status want;
        const char *words;
    } rows[] = {
        {"missing CA file", F.missing, NULL, NULL, NULL, GA_E_IO, "tls_ca_file: cannot open"},
        {"CA file that is not PEM", F.garbage, NULL, NULL, NULL, GA_E_CONFIG, "tls_ca_file"},
        {"certificate without a key", F.ca, F.client_cert, NULL, NULL, GA_E_CONFIG, "go together"},
        {"certificate without a CA", NULL, F.client_cert, F.client_key, NULL, GA_E_CONFIG, "need tls_ca_file"},
        {"missing certificate", F.ca, F.missing, F.client_key, NULL, GA_E_IO, "tls_cert_file: cannot open"},
        {"encrypted key", F.ca, F.client_cert, F.enc_key, NULL, GA_E_CONFIG, "tls_key_file"},
        {"key of another certificate", F.ca, F.client_cert, F.rogue_key, NULL, GA_E_CONFIG,
         "is not the private key of tls_cert_file"},
        {"token with a space", NULL, NULL, NULL, "two words-0123456789", GA_E_CONFIG, "auth_token byte 3"},
    };
    srv v = {NULL, "127.0.0.1:1"}; /* never reached: every row fails before connecting */
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        ga_client_options o = sdk_options(&v, "files");
        o.tls_ca_file = rows[i].ca;
        o.tls_cert_file = rows[i].cert;
        o.tls_key_file = rows[i].key;
        o.auth_token = rows[i].token;
        ga_client *c = NULL;
        char msg[1024] = "";
        ga_status st = ga_client_create(&o, &c, msg, sizeof msg);
        if (st != rows[i].want) fail_msg("%s: got %s (%s)", rows[i].what, ga_status_name(st), msg);
        if (!strstr(msg, rows[i].words)) fail_msg("%s: message '%s' lacks '%s'", rows[i].what, msg, rows[i].words);
        assert_null(strstr(msg, "0123456789")); /* the token is never echoed */
        assert_null(c);
    }
}

/* ---- limits ---- */

typedef struct limit_row {
    const char *what;
    void (*tighten)(ga_config *cfg);
    ga_status (*exceed)(ga_channel *ch, uint64_t inc, char *why, size_t cap);
    const char *words; /* in the message; NULL: gRPC's own */
    ga_status (*within)(ga_channel *ch, uint64_t inc, char *why, size_t cap); /* NULL: none */
} limit_row;

static void tight_message(ga_config *c) { c->max_message_mb = 1; }
static void tight_jobs(ga_config *c) { c->max_jobs = 1; }
static void tight_tensors(ga_config *c) { c->max_tensors = 2; }
static void tight_memory(ga_config *c) { c->max_memory_mb = 16; }
static void tight_elements(ga_config *c) { c->max_elements = 1024; }

static ga_status big_message(ga_channel *ch, uint64_t inc, char *why, size_t cap)
{
    enum { BIGN = 512 * 1024 }; /* 2 MiB of values in one message */
    float *v = ga_calloc(BIGN, sizeof(float));
    tensor_init t = {"big", BIGN, v};
    ga_status st = do_init(ch, "lim", inc, &t, 1, why, cap);
    ga_free(v);
    return st;
}

static ga_status second_job(ga_channel *ch, uint64_t inc, char *why, size_t cap)
{
    (void)inc;
    return do_join(ch, "other", 0, 1, why, cap);
}

static ga_status two_more_tensors(ga_channel *ch, uint64_t inc, char *why, size_t cap)
{
    tensor_init t[2] = {{"b", 8, NULL}, {"c", 8, NULL}};
    return do_init(ch, "lim", inc, t, 2, why, cap);
}

static ga_status one_more_tensor(ga_channel *ch, uint64_t inc, char *why, size_t cap)
{
    tensor_init t = {"b", 8, NULL};
    return do_init(ch, "lim", inc, &t, 1, why, cap);
}

static ga_status huge_tensor(ga_channel *ch, uint64_t inc, char *why, size_t cap)
{
    tensor_init t = {"huge", 8u << 20, NULL}; /* 32 MiB of parameters alone */
    return do_init(ch, "lim", inc, &t, 1, why, cap);
}

static ga_status elements_over(ga_channel *ch, uint64_t inc, char *why, size_t cap)
{
    tensor_init t = {"b", 25, NULL}; /* 1000 + 25 > 1024 */
    return do_init(ch, "lim", inc, &t, 1, why, cap);
}

static ga_status elements_exact(ga_channel *ch, uint64_t inc, char *why, size_t cap)
{
    tensor_init t = {"b", 24, NULL}; /* 1000 + 24 = 1024 */
    return do_init(ch, "lim", inc, &t, 1, why, cap);
}

static void test_limits_answer_resource_exhausted(void **state)
{
    (void)state;
    static const limit_row rows[] = {
        {"message over --max-message-mb", tight_message, big_message, NULL, NULL},
        {"jobs over --max-jobs", tight_jobs, second_job, "(max_jobs)", NULL},
        {"tensors over --max-tensors", tight_tensors, two_more_tensors, "(max_tensors)", one_more_tensor},
        {"memory over --max-memory-mb", tight_memory, huge_tensor, "of its limit of 16777216", NULL},
        {"elements over --max-elements", tight_elements, elements_over, "over the limit of 1024 (max_elements)",
         elements_exact},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        ga_config cfg;
        base_config(&cfg);
        rows[i].tighten(&cfg);
        srv v;
        srv_start(&v, &cfg);
        ga_channel *ch = chan(&v, NULL, NULL, NULL, NULL);
        char why[512] = "";
        assert_int_equal(do_join(ch, "lim", 0, 9, why, sizeof why), GA_OK);
        tensor_init a = {"a", 1000, NULL};
        assert_int_equal(do_init(ch, "lim", 9, &a, 1, why, sizeof why), GA_OK);
        snap before = status_of(ch, "lim");

        ga_status st = rows[i].exceed(ch, 9, why, sizeof why);
        if (st != GA_E_LIMIT) fail_msg("%s: got %s (%s)", rows[i].what, ga_status_name(st), why);
        assert_int_equal(ga_wire_grpc_code(st), GRPC_STATUS_RESOURCE_EXHAUSTED);
        if (rows[i].words && !strstr(why, rows[i].words))
            fail_msg("%s: message '%s' lacks '%s'", rows[i].what, why, rows[i].words);
        snap after = status_of(ch, "lim");
        if (!snap_equal(&before, &after)) fail_msg("%s changed the job", rows[i].what);
        assert_int_equal(do_status(ch, "other", NULL, why, sizeof why), GA_E_UNKNOWN_JOB);
        /* Right at the limit is allowed. */
        if (rows[i].within) {
            st = rows[i].within(ch, 9, why, sizeof why);
            if (st != GA_OK) fail_msg("%s: at the limit: %s (%s)", rows[i].what, ga_status_name(st), why);
            assert_int_equal(status_of(ch, "lim").ntensors, 2);
        }
        ga_channel_destroy(ch);
        srv_stop(&v);
    }
}

int main(void)
{
    ga_log_set_level(GA_LOG_WARN); /* the refusals, not every start and drain */
    test_memory_baseline();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mtls_and_tokens_refuse_and_change_nothing),
        cmocka_unit_test(test_tls_without_client_certificates),
        cmocka_unit_test(test_server_refuses_bad_files),
        cmocka_unit_test(test_sdk_refuses_bad_files),
        cmocka_unit_test(test_limits_answer_resource_exhausted),
        cmocka_unit_test(test_host_memory_returned),
    };
    return cmocka_run_group_tests(tests, make_pki, remove_pki);
}
