/* Hostile bytes against the real server (in-process, gRPC on 127.0.0.1:0, bearer tokens for
 * jobs "alpha" and "beta", a 1 MiB message limit), sent as raw gRPC calls through the C core:
 * no SDK and no rpc_client in between, so any path, metadata and message bytes can be sent. One
 * table: for every RPC (Join, Leave, InitTensors, Push, Pull, Status, health Check) a truncated
 * message, a declared length of 2^31, a wrong wire type, unknown fields (ignored, proto3),
 * field number 0, a body that is not protobuf, an empty body, no message at all, a message over
 * the limit; streams whose second chunk names another job or is cut short; no token, another
 * job's token, malformed authorization headers (every job RPC); unknown method paths. Each row
 * gets its exact gRPC status code and, when the server sends one, its gradagg-status trailer;
 * after each the server answers valid calls and both jobs are byte-identical to before (Status
 * responses and pulled parameters). */
#define _GNU_SOURCE /* mkdtemp */
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test_dirs.h"

#include "base/log.h"
#include "ga_alloc.h"
#include "ga_methods.h"
#include "ga_wire.h"
#include "server/config.h"
#include "server/server.h"
#include "test_inproc_server.h"

#define TOK_A "alpha-0123456789abcdef"
#define TOK_B "beta-0123456789abcdef0"
#define TOK_OP "operator-0123456789abcdef" /* the token file's "*" line */
#define N 64
#define INC_A 11u
#define INC_B 22u
#define LIMIT_MB 1u
#define MAX_MSGS 16
#define DEADLINE_S 10

/* ---- bytes ---- */

typedef struct bytes {
    uint8_t *p;
    size_t n;
} bytes;

static bytes bytes_of(const void *p, size_t n)
{
    bytes b = {malloc(n + 1), n};
    assert_non_null(b.p);
    if (n) memcpy(b.p, p, n);
    return b;
}

static bytes packed(const ProtobufCMessage *m)
{
    bytes b = {malloc(protobuf_c_message_get_packed_size(m) + 1), 0};
    assert_non_null(b.p);
    b.n = protobuf_c_message_pack(m, b.p);
    return b;
}

static bytes cat(bytes a, const void *p, size_t n)
{
    a.p = realloc(a.p, a.n + n + 1);
    assert_non_null(a.p);
    memcpy(a.p + a.n, p, n);
    a.n += n;
    return a;
}

/* ---- raw calls ---- */

typedef struct reply {
    grpc_status_code code;
    char details[512];
    char ga[64]; /* the gradagg-status trailer; "" when none */
    bytes msgs[MAX_MSGS];
    size_t nmsgs;
} reply;

static void reply_free(reply *r)
{
    for (size_t i = 0; i < r->nmsgs; i++) free(r->msgs[i].p);
    r->nmsgs = 0;
}

static char target[64];
static grpc_channel *channel;

static void *tag(intptr_t t) { return (void *)t; }

static bool pluck(grpc_completion_queue *cq, intptr_t t)
{
    grpc_event ev = grpc_completion_queue_pluck(cq, tag(t), gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    assert_int_equal(ev.type, GRPC_OP_COMPLETE);
    return ev.success != 0;
}

static bytes flatten(grpc_byte_buffer *bb)
{
    grpc_byte_buffer_reader r;
    assert_true(grpc_byte_buffer_reader_init(&r, bb));
    grpc_slice s = grpc_byte_buffer_reader_readall(&r);
    bytes b = bytes_of(GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s));
    grpc_slice_unref(s);
    grpc_byte_buffer_reader_destroy(&r);
    return b;
}

/* One call on `path` with the given "authorization" values (nauth of them), sending msgs in
 * order, then half-closing; reads every response message and the final status. A send the
 * server has already refused fails quietly, as for any client. */
static void call(const char *path, const char *const *auth, size_t nauth, const bytes *msgs, size_t n, reply *r)
{
    memset(r, 0, sizeof *r);
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_slice method = grpc_slice_from_copied_string(path);
    gpr_timespec deadline = gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_seconds(DEADLINE_S, GPR_TIMESPAN));
    grpc_call *c = grpc_channel_create_call(channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq, method, NULL, deadline, NULL);
    assert_non_null(c);
    grpc_metadata md[4];
    assert_true(nauth <= 4);
    for (size_t i = 0; i < nauth; i++) {
        memset(&md[i], 0, sizeof md[i]);
        md[i].key = grpc_slice_from_static_string("authorization");
        md[i].value = grpc_slice_from_copied_string(auth[i]);
    }
    grpc_metadata_array initial, trailing;
    grpc_metadata_array_init(&initial);
    grpc_metadata_array_init(&trailing);
    grpc_slice details = grpc_empty_slice();
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = nauth;
    ops[0].data.send_initial_metadata.metadata = nauth ? md : NULL;
    ops[1].op = GRPC_OP_RECV_INITIAL_METADATA; /* trap 1: without it no message arrives */
    ops[1].data.recv_initial_metadata.recv_initial_metadata = &initial;
    ops[2].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[2].data.recv_status_on_client.trailing_metadata = &trailing;
    ops[2].data.recv_status_on_client.status = &r->code;
    ops[2].data.recv_status_on_client.status_details = &details;
    assert_int_equal(grpc_call_start_batch(c, ops, 3, tag(1), NULL), GRPC_CALL_OK);

    for (size_t i = 0; i < n; i++) {
        grpc_slice s = grpc_slice_from_copied_buffer((const char *)msgs[i].p, msgs[i].n);
        grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
        grpc_slice_unref(s);
        grpc_op op;
        memset(&op, 0, sizeof op);
        op.op = GRPC_OP_SEND_MESSAGE;
        op.data.send_message.send_message = bb;
        assert_int_equal(grpc_call_start_batch(c, &op, 1, tag(2), NULL), GRPC_CALL_OK);
        bool ok = pluck(cq, 2);
        grpc_byte_buffer_destroy(bb);
        if (!ok) break;
    }
    grpc_op close;
    memset(&close, 0, sizeof close);
    close.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    assert_int_equal(grpc_call_start_batch(c, &close, 1, tag(3), NULL), GRPC_CALL_OK);
    pluck(cq, 3);
    for (;;) {
        grpc_byte_buffer *bb = NULL;
        grpc_op op;
        memset(&op, 0, sizeof op);
        op.op = GRPC_OP_RECV_MESSAGE;
        op.data.recv_message.recv_message = &bb;
        assert_int_equal(grpc_call_start_batch(c, &op, 1, tag(4), NULL), GRPC_CALL_OK);
        bool ok = pluck(cq, 4);
        if (!ok || !bb) {
            if (bb) grpc_byte_buffer_destroy(bb);
            break;
        }
        assert_true(r->nmsgs < MAX_MSGS);
        r->msgs[r->nmsgs++] = flatten(bb);
        grpc_byte_buffer_destroy(bb);
    }
    pluck(cq, 1);
    snprintf(r->details, sizeof r->details, "%.*s", (int)GRPC_SLICE_LENGTH(details),
             (const char *)GRPC_SLICE_START_PTR(details));
    for (size_t i = 0; i < trailing.count; i++)
        if (grpc_slice_str_cmp(trailing.metadata[i].key, GA_WIRE_STATUS_KEY) == 0)
            snprintf(r->ga, sizeof r->ga, "%.*s", (int)GRPC_SLICE_LENGTH(trailing.metadata[i].value),
                     (const char *)GRPC_SLICE_START_PTR(trailing.metadata[i].value));
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&initial);
    grpc_metadata_array_destroy(&trailing);
    for (size_t i = 0; i < nauth; i++) grpc_slice_unref(md[i].value);
    grpc_call_unref(c);
    grpc_slice_unref(method);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type != GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
}

/* A call of method m with one token (NULL: none) and one message; must end OK. */
static void call_ok(ga_method_id m, const char *token, bytes msg, reply *r)
{
    char auth[128];
    snprintf(auth, sizeof auth, "Bearer %s", token ? token : "");
    const char *a[1] = {auth};
    call(ga_methods[m].path, a, token ? 1 : 0, &msg, 1, r);
    free(msg.p);
    if (r->code != GRPC_STATUS_OK) fail_msg("%s: %d %s (%s)", ga_methods[m].name, r->code, r->ga, r->details);
}

/* ---- the valid requests every row starts from (none changes either job) ---- */

static float init_a[N], init_b[N], grad[N];

static bytes join_req(const char *job, uint64_t inc)
{
    Gradagg__V1__Optimizer opt = GRADAGG__V1__OPTIMIZER__INIT;
    Gradagg__V1__Straggler str = GRADAGG__V1__STRAGGLER__INIT;
    Gradagg__V1__Codec pull = GRADAGG__V1__CODEC__INIT;
    Gradagg__V1__JobConfig cfg = GRADAGG__V1__JOB_CONFIG__INIT;
    cfg.world_size = 1;
    cfg.optimizer = &opt;
    cfg.straggler = &str;
    cfg.pull_codec = &pull;
    Gradagg__V1__JoinRequest r = GRADAGG__V1__JOIN_REQUEST__INIT;
    r.job = (char *)job;
    r.incarnation = inc;
    r.config = &cfg;
    return packed(&r.base);
}

static bytes leave_req(const char *job, uint64_t inc)
{
    Gradagg__V1__LeaveRequest r = GRADAGG__V1__LEAVE_REQUEST__INIT;
    r.job = (char *)job;
    r.incarnation = inc;
    return packed(&r.base);
}

/* values NULL: none (an existing tensor's no-op declaration). */
static bytes init_chunk(const char *job, uint64_t inc, const char *tensor, const float *values)
{
    uint64_t shape[1] = {N};
    Gradagg__V1__InitChunk c = GRADAGG__V1__INIT_CHUNK__INIT;
    c.job = (char *)job;
    c.incarnation = inc;
    c.tensor = (char *)tensor;
    c.n_shape = 1;
    c.shape = shape;
    c.count = N;
    if (values) {
        c.values.data = (uint8_t *)values;
        c.values.len = sizeof(float) * N;
    }
    return packed(&c.base);
}

/* with_payload false: the header fields only (the HUGE_LENGTH row appends its own field 15). */
static bytes push_chunk_of(const char *job, uint64_t inc, uint64_t step, bool with_payload)
{
    Gradagg__V1__Codec none = GRADAGG__V1__CODEC__INIT;
    Gradagg__V1__PushChunk c = GRADAGG__V1__PUSH_CHUNK__INIT;
    c.job = (char *)job;
    c.incarnation = inc;
    c.step = step;
    c.tensor = "w";
    c.count = N;
    c.codec = &none;
    if (with_payload) {
        c.payload.data = (uint8_t *)grad;
        c.payload.len = sizeof grad;
    }
    return packed(&c.base);
}

static bytes push_chunk(const char *job, uint64_t inc, uint64_t step) { return push_chunk_of(job, inc, step, true); }

static bytes pull_req(const char *job, uint64_t inc, uint64_t min_version)
{
    Gradagg__V1__PullRequest r = GRADAGG__V1__PULL_REQUEST__INIT;
    r.job = (char *)job;
    r.incarnation = inc;
    r.min_version = min_version;
    return packed(&r.base);
}

static bytes status_req(const char *job)
{
    Gradagg__V1__StatusRequest r = GRADAGG__V1__STATUS_REQUEST__INIT;
    r.job = (char *)job;
    return packed(&r.base);
}

static bytes heartbeat_req(const char *job, uint64_t inc)
{
    Gradagg__V1__HeartbeatRequest r = GRADAGG__V1__HEARTBEAT_REQUEST__INIT;
    r.job = (char *)job;
    r.incarnation = inc;
    return packed(&r.base);
}

static bytes delete_req(const char *job)
{
    Gradagg__V1__DeleteJobRequest r = GRADAGG__V1__DELETE_JOB_REQUEST__INIT;
    r.job = (char *)job;
    return packed(&r.base);
}

static bytes list_jobs_req(void)
{
    Gradagg__V1__ListJobsRequest r = GRADAGG__V1__LIST_JOBS_REQUEST__INIT;
    return packed(&r.base);
}

static bytes shard_info_req(void)
{
    Gradagg__V1__ShardInfoRequest r = GRADAGG__V1__SHARD_INFO_REQUEST__INIT;
    return packed(&r.base);
}

static bytes health_req(const char *service)
{
    Grpc__Health__V1__HealthCheckRequest r = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    r.service = (char *)service;
    return packed(&r.base);
}

/* The open step of alpha (a push for it would commit), set by setup. */
static uint64_t open_step;

/* The row's request when nothing is wrong with it: each answered without changing anything. */
static bytes valid(ga_method_id m)
{
    switch (m) {
    case GA_METHOD_JOIN: return join_req("alpha", INC_A);          /* the holder again: OK */
    case GA_METHOD_LEAVE: return leave_req("alpha", INC_A + 100);  /* not a member: refused */
    case GA_METHOD_INIT: return init_chunk("alpha", INC_A, "w", NULL); /* exists: OK */
    case GA_METHOD_PUSH: return push_chunk("alpha", INC_A, open_step + 5); /* future step: refused */
    case GA_METHOD_PULL: return pull_req("alpha", INC_A, 0);        /* OK */
    case GA_METHOD_STATUS: return status_req("alpha");              /* OK */
    case GA_METHOD_HEARTBEAT: return heartbeat_req("alpha", INC_A + 100); /* not a member: refused */
    case GA_METHOD_DELETE_JOB: return delete_req("alpha");          /* a live rank: refused */
    case GA_METHOD_LIST_JOBS: return list_jobs_req();               /* OK */
    case GA_METHOD_SHARD_INFO: return shard_info_req();             /* OK */
    case GA_METHOD_HEALTH_CHECK: return health_req("");             /* OK */
    default: fail_msg("no valid request for %s", ga_methods[m].name);
    }
    return (bytes){0};
}

/* ---- what must not change ---- */

typedef struct snapshot {
    bytes status[2]; /* Status of alpha and beta, as sent */
    bytes pulled[2]; /* every PullChunk of a Pull of each, concatenated */
} snapshot;

static void snapshot_take(snapshot *s)
{
    static const char *const jobs[2] = {"alpha", "beta"};
    static const char *const toks[2] = {TOK_A, TOK_B};
    static const uint64_t incs[2] = {INC_A, INC_B};
    for (int j = 0; j < 2; j++) {
        reply r;
        call_ok(GA_METHOD_STATUS, toks[j], status_req(jobs[j]), &r);
        assert_int_equal(r.nmsgs, 1);
        s->status[j] = r.msgs[0];
        r.nmsgs = 0;
        call_ok(GA_METHOD_PULL, toks[j], pull_req(jobs[j], incs[j], 0), &r);
        assert_true(r.nmsgs >= 1);
        s->pulled[j] = bytes_of(NULL, 0);
        for (size_t i = 0; i < r.nmsgs; i++) s->pulled[j] = cat(s->pulled[j], r.msgs[i].p, r.msgs[i].n);
        reply_free(&r);
    }
}

static void snapshot_free(snapshot *s)
{
    for (int j = 0; j < 2; j++) free(s->status[j].p), free(s->pulled[j].p);
}

static bool same(bytes a, bytes b) { return a.n == b.n && memcmp(a.p, b.p, a.n) == 0; }

/* ---- the table ---- */

typedef enum body {
    VALID,          /* the method's valid request */
    TRUNCATED,      /* cut inside its first field (the job or service string) */
    CUT_PAYLOAD,    /* a chunk that would commit, cut inside its payload field */
    HUGE_LENGTH,    /* a length-delimited field declaring 2^31 bytes (a chunk's payload field) */
    WRONG_WIRE,     /* field 1 (a string) sent as a varint */
    UNKNOWN_FIELDS, /* the valid request plus fields 99 (varint) and 100 (bytes): ignored */
    FIELD_ZERO,     /* the valid request plus field number 0 (tag 80 80 00) */
    NOT_PROTOBUF,   /* an HTTP request line */
    EMPTY,          /* one message of zero bytes: every field at its default */
    NO_MESSAGE,     /* half-close without any message */
    OVERSIZE,       /* the valid request plus 1 MiB of unknown field: over the message limit */
    MIXED_JOB,      /* a stream: a chunk that would commit for alpha, then one for beta */
    CUT_SECOND,     /* a stream: a chunk that would commit for alpha, then a truncated one */
    LONG_NAME,      /* a push chunk naming a tensor of 64 KiB (no tensor may have over 1024 bytes) */
} body;

typedef enum auth { OWN, NONE, OTHER_JOB, UNKNOWN_TOKEN, BASIC, BEARER_ONLY, TWO_ENTRIES, OPERATOR } auth;

typedef struct row {
    ga_method_id m;
    const char *path; /* NULL: the method's own */
    body body;
    auth auth;
    grpc_status_code code;
    const char *ga; /* the trailer, "" when the server sends none (OK, or gRPC's own refusal) */
} row;

/* A chunk that would commit alpha's open step, were its stream to end well. */
static bytes committing(ga_method_id m)
{
    return m == GA_METHOD_PUSH ? push_chunk("alpha", INC_A, open_step) : init_chunk("alpha", INC_A, "x", init_a);
}

static size_t body_messages(const row *w, bytes *out)
{
    static const uint8_t unknown[] = {0x98, 0x06, 0x2a, 0xa2, 0x06, 0x03, 'x', 'y', 'z'};
    static const uint8_t zero_field[] = {0x80, 0x80, 0x00, 0x01};
    static const uint8_t huge[] = {0x80, 0x80, 0x80, 0x80, 0x08}; /* varint 2^31 */
    static const char http[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    bool chunk = w->m == GA_METHOD_PUSH || w->m == GA_METHOD_INIT;
    bytes v = valid(w->m);
    switch (w->body) {
    case VALID: out[0] = v; return 1;
    case TRUNCATED:
        free(v.p);
        /* field 1 declares 5 or 21 bytes ("alpha", "gradagg.v1.Aggregator"); 2 follow */
        out[0] = w->m == GA_METHOD_HEALTH_CHECK ? bytes_of("\x0a\x15gr", 4) : bytes_of("\x0a\x05" "al", 4);
        return 1;
    case CUT_PAYLOAD:
        free(v.p);
        out[0] = committing(w->m);
        out[0].n -= 3; /* inside field 15, the last */
        return 1;
    case HUGE_LENGTH: {
        uint8_t tagb = chunk ? (GA_WIRE_PAYLOAD_FIELD << 3 | 2) : (1 << 3 | 2);
        if (w->m == GA_METHOD_PUSH) { /* the header without its payload, then the huge one */
            free(v.p);
            v = push_chunk_of("alpha", INC_A, open_step + 5, false);
        }
        if (!chunk) v.n = 0; /* only the field: its length comes first */
        v = cat(v, &tagb, 1);
        v = cat(v, huge, sizeof huge);
        out[0] = cat(v, "0123456789abcdef", 16);
        return 1;
    }
    case WRONG_WIRE: {
        bytes b = bytes_of("\x08\x01", 2);
        out[0] = cat(b, v.p, v.n);
        free(v.p);
        return 1;
    }
    case UNKNOWN_FIELDS: out[0] = cat(v, unknown, sizeof unknown); return 1;
    case FIELD_ZERO: out[0] = cat(v, zero_field, sizeof zero_field); return 1;
    case NOT_PROTOBUF: free(v.p); out[0] = bytes_of(http, sizeof http - 1); return 1;
    case EMPTY: free(v.p); out[0] = bytes_of(NULL, 0); return 1;
    case NO_MESSAGE: free(v.p); return 0;
    case OVERSIZE: {
        size_t big = (LIMIT_MB << 20) + 1024;
        uint8_t head[6] = {0xa2, 0x06}; /* field 100, length-delimited, then the length */
        size_t k = 2;
        for (size_t x = big; x; x >>= 7) head[k++] = (uint8_t)((x & 0x7f) | (x > 0x7f ? 0x80 : 0));
        v = cat(v, head, k);
        uint8_t *fill = calloc(big, 1);
        out[0] = cat(v, fill, big);
        free(fill);
        return 1;
    }
    case MIXED_JOB:
        free(v.p);
        out[0] = committing(w->m);
        out[1] = w->m == GA_METHOD_PUSH ? push_chunk("beta", INC_B, 0) : init_chunk("beta", INC_B, "x", init_b);
        return 2;
    case CUT_SECOND:
        free(v.p);
        out[0] = committing(w->m);
        out[1] = bytes_of("\x0a\x05" "al", 4);
        return 2;
    case LONG_NAME: {
        free(v.p);
        char *name = malloc(65536 + 1);
        memset(name, 'w', 65536);
        name[65536] = 0;
        Gradagg__V1__PushChunk c = GRADAGG__V1__PUSH_CHUNK__INIT;
        c.job = "alpha";
        c.incarnation = INC_A;
        c.step = open_step;
        c.tensor = name;
        c.count = N;
        c.payload.data = (uint8_t *)grad;
        c.payload.len = sizeof grad;
        out[0] = packed(&c.base);
        free(name);
        return 1;
    }
    }
    return 0;
}

static size_t auth_values(auth a, const char **out)
{
    switch (a) {
    case OWN: out[0] = "Bearer " TOK_A; return 1;
    case NONE: return 0;
    case OTHER_JOB: out[0] = "Bearer " TOK_B; return 1;
    case UNKNOWN_TOKEN: out[0] = "Bearer gamma-0123456789abcdef"; return 1;
    case BASIC: out[0] = "Basic " TOK_A; return 1;
    case BEARER_ONLY: out[0] = "Bearer"; return 1;
    case TWO_ENTRIES: out[0] = "Bearer " TOK_A, out[1] = "Bearer " TOK_A; return 2;
    case OPERATOR: out[0] = "Bearer " TOK_OP; return 1;
    }
    return 0;
}

static const char *const body_names[] = {"valid", "truncated", "payload cut short", "declared length 2^31",
                                         "wrong wire type", "unknown fields", "field number 0", "not protobuf",
                                         "empty body", "no message", "over the message limit",
                                         "second chunk for another job", "second chunk truncated",
                                         "tensor name of 64 KiB"};
static const char *const auth_names[] = {"own token", "no token", "another job's token", "unknown token",
                                         "Basic scheme", "Bearer without a token", "two authorization entries",
                                         "an operator token"};

#define INVALID GRPC_STATUS_INVALID_ARGUMENT
#define PROTO(m) {m, NULL, TRUNCATED, OWN, INVALID, "GA_E_PROTO"}, {m, NULL, HUGE_LENGTH, OWN, INVALID, "GA_E_PROTO"}, \
    {m, NULL, WRONG_WIRE, OWN, INVALID, "GA_E_PROTO"}, {m, NULL, FIELD_ZERO, OWN, INVALID, "GA_E_PROTO"},          \
    {m, NULL, NOT_PROTOBUF, OWN, INVALID, "GA_E_PROTO"},                                                           \
    {m, NULL, OVERSIZE, OWN, GRPC_STATUS_RESOURCE_EXHAUSTED, ""}
#define TOKENS(m) {m, NULL, VALID, NONE, GRPC_STATUS_UNAUTHENTICATED, "GA_E_UNAUTHENTICATED"},             \
    {m, NULL, VALID, OTHER_JOB, GRPC_STATUS_PERMISSION_DENIED, "GA_E_PERMISSION_DENIED"},                  \
    {m, NULL, VALID, UNKNOWN_TOKEN, GRPC_STATUS_UNAUTHENTICATED, "GA_E_UNAUTHENTICATED"},                  \
    {m, NULL, VALID, BASIC, GRPC_STATUS_UNAUTHENTICATED, "GA_E_UNAUTHENTICATED"},                          \
    {m, NULL, VALID, BEARER_ONLY, GRPC_STATUS_UNAUTHENTICATED, "GA_E_UNAUTHENTICATED"},                    \
    {m, NULL, VALID, TWO_ENTRIES, GRPC_STATUS_UNAUTHENTICATED, "GA_E_UNAUTHENTICATED"}

static const row rows[] = {
    /* Join: the holder joining again is a no-op. */
    {GA_METHOD_JOIN, NULL, VALID, OWN, GRPC_STATUS_OK, ""},
    {GA_METHOD_JOIN, NULL, UNKNOWN_FIELDS, OWN, GRPC_STATUS_OK, ""},
    PROTO(GA_METHOD_JOIN),
    /* No job named: "" has no token, and the token says nothing about a job that is not its own. */
    {GA_METHOD_JOIN, NULL, EMPTY, OWN, GRPC_STATUS_PERMISSION_DENIED, "GA_E_PERMISSION_DENIED"},
    {GA_METHOD_JOIN, NULL, NO_MESSAGE, OWN, INVALID, "GA_E_PROTO"},
    TOKENS(GA_METHOD_JOIN),
    /* Leave by an incarnation that is not the member. */
    {GA_METHOD_LEAVE, NULL, VALID, OWN, GRPC_STATUS_FAILED_PRECONDITION, "GA_E_NOT_MEMBER"},
    {GA_METHOD_LEAVE, NULL, UNKNOWN_FIELDS, OWN, GRPC_STATUS_FAILED_PRECONDITION, "GA_E_NOT_MEMBER"},
    PROTO(GA_METHOD_LEAVE),
    {GA_METHOD_LEAVE, NULL, EMPTY, OWN, GRPC_STATUS_PERMISSION_DENIED, "GA_E_PERMISSION_DENIED"},
    {GA_METHOD_LEAVE, NULL, NO_MESSAGE, OWN, INVALID, "GA_E_PROTO"},
    TOKENS(GA_METHOD_LEAVE),
    /* InitTensors declaring the existing tensor again: a no-op. */
    {GA_METHOD_INIT, NULL, VALID, OWN, GRPC_STATUS_OK, ""},
    {GA_METHOD_INIT, NULL, UNKNOWN_FIELDS, OWN, GRPC_STATUS_OK, ""},
    PROTO(GA_METHOD_INIT),
    {GA_METHOD_INIT, NULL, CUT_PAYLOAD, OWN, INVALID, "GA_E_PROTO"},
    {GA_METHOD_INIT, NULL, EMPTY, OWN, GRPC_STATUS_PERMISSION_DENIED, "GA_E_PERMISSION_DENIED"},
    {GA_METHOD_INIT, NULL, NO_MESSAGE, OWN, INVALID, "GA_E_INVAL"},
    {GA_METHOD_INIT, NULL, MIXED_JOB, OWN, INVALID, "GA_E_STREAM_MIXED"},
    {GA_METHOD_INIT, NULL, CUT_SECOND, OWN, INVALID, "GA_E_PROTO"},
    TOKENS(GA_METHOD_INIT),
    /* Push of a future step. */
    {GA_METHOD_PUSH, NULL, VALID, OWN, GRPC_STATUS_OUT_OF_RANGE, "GA_E_STEP_FUTURE"},
    {GA_METHOD_PUSH, NULL, UNKNOWN_FIELDS, OWN, GRPC_STATUS_OUT_OF_RANGE, "GA_E_STEP_FUTURE"},
    PROTO(GA_METHOD_PUSH),
    {GA_METHOD_PUSH, NULL, CUT_PAYLOAD, OWN, INVALID, "GA_E_PROTO"},
    {GA_METHOD_PUSH, NULL, EMPTY, OWN, GRPC_STATUS_PERMISSION_DENIED, "GA_E_PERMISSION_DENIED"},
    {GA_METHOD_PUSH, NULL, NO_MESSAGE, OWN, INVALID, "GA_E_INVAL"},
    {GA_METHOD_PUSH, NULL, MIXED_JOB, OWN, INVALID, "GA_E_STREAM_MIXED"},
    {GA_METHOD_PUSH, NULL, CUT_SECOND, OWN, INVALID, "GA_E_PROTO"},
    {GA_METHOD_PUSH, NULL, LONG_NAME, OWN, INVALID, "GA_E_INVAL"},
    TOKENS(GA_METHOD_PUSH),
    /* Pull of the published version. */
    {GA_METHOD_PULL, NULL, VALID, OWN, GRPC_STATUS_OK, ""},
    {GA_METHOD_PULL, NULL, UNKNOWN_FIELDS, OWN, GRPC_STATUS_OK, ""},
    PROTO(GA_METHOD_PULL),
    {GA_METHOD_PULL, NULL, EMPTY, OWN, GRPC_STATUS_PERMISSION_DENIED, "GA_E_PERMISSION_DENIED"},
    {GA_METHOD_PULL, NULL, NO_MESSAGE, OWN, INVALID, "GA_E_PROTO"},
    TOKENS(GA_METHOD_PULL),
    /* Status. */
    {GA_METHOD_STATUS, NULL, VALID, OWN, GRPC_STATUS_OK, ""},
    {GA_METHOD_STATUS, NULL, UNKNOWN_FIELDS, OWN, GRPC_STATUS_OK, ""},
    PROTO(GA_METHOD_STATUS),
    {GA_METHOD_STATUS, NULL, EMPTY, OWN, GRPC_STATUS_PERMISSION_DENIED, "GA_E_PERMISSION_DENIED"},
    {GA_METHOD_STATUS, NULL, NO_MESSAGE, OWN, INVALID, "GA_E_PROTO"},
    TOKENS(GA_METHOD_STATUS),
    /* Heartbeat of an incarnation that is not the member. */
    {GA_METHOD_HEARTBEAT, NULL, VALID, OWN, GRPC_STATUS_FAILED_PRECONDITION, "GA_E_NOT_MEMBER"},
    {GA_METHOD_HEARTBEAT, NULL, UNKNOWN_FIELDS, OWN, GRPC_STATUS_FAILED_PRECONDITION, "GA_E_NOT_MEMBER"},
    PROTO(GA_METHOD_HEARTBEAT),
    {GA_METHOD_HEARTBEAT, NULL, EMPTY, OWN, GRPC_STATUS_PERMISSION_DENIED, "GA_E_PERMISSION_DENIED"},
    {GA_METHOD_HEARTBEAT, NULL, NO_MESSAGE, OWN, INVALID, "GA_E_PROTO"},
    TOKENS(GA_METHOD_HEARTBEAT),
    /* DeleteJob of a job with a live rank: refused, nothing removed. */
    {GA_METHOD_DELETE_JOB, NULL, VALID, OWN, GRPC_STATUS_ALREADY_EXISTS, "GA_E_RANK_HELD"},
    {GA_METHOD_DELETE_JOB, NULL, UNKNOWN_FIELDS, OWN, GRPC_STATUS_ALREADY_EXISTS, "GA_E_RANK_HELD"},
    PROTO(GA_METHOD_DELETE_JOB),
    {GA_METHOD_DELETE_JOB, NULL, EMPTY, OWN, GRPC_STATUS_PERMISSION_DENIED, "GA_E_PERMISSION_DENIED"},
    {GA_METHOD_DELETE_JOB, NULL, NO_MESSAGE, OWN, INVALID, "GA_E_PROTO"},
    TOKENS(GA_METHOD_DELETE_JOB),
    /* ListJobs names every job: only an operator token grants it; that token grants the
     * operators' methods of any job (Status, DeleteJob) and no training method. */
    {GA_METHOD_LIST_JOBS, NULL, VALID, OPERATOR, GRPC_STATUS_OK, ""},
    {GA_METHOD_LIST_JOBS, NULL, UNKNOWN_FIELDS, OPERATOR, GRPC_STATUS_OK, ""},
    {GA_METHOD_LIST_JOBS, NULL, NOT_PROTOBUF, OPERATOR, INVALID, "GA_E_PROTO"},
    {GA_METHOD_LIST_JOBS, NULL, OVERSIZE, OPERATOR, GRPC_STATUS_RESOURCE_EXHAUSTED, ""},
    {GA_METHOD_LIST_JOBS, NULL, NO_MESSAGE, OPERATOR, INVALID, "GA_E_PROTO"},
    {GA_METHOD_LIST_JOBS, NULL, VALID, OWN, GRPC_STATUS_PERMISSION_DENIED, "GA_E_PERMISSION_DENIED"},
    {GA_METHOD_LIST_JOBS, NULL, VALID, NONE, GRPC_STATUS_UNAUTHENTICATED, "GA_E_UNAUTHENTICATED"},
    {GA_METHOD_LIST_JOBS, NULL, VALID, UNKNOWN_TOKEN, GRPC_STATUS_UNAUTHENTICATED, "GA_E_UNAUTHENTICATED"},
    {GA_METHOD_STATUS, NULL, VALID, OPERATOR, GRPC_STATUS_OK, ""},
    {GA_METHOD_DELETE_JOB, NULL, VALID, OPERATOR, GRPC_STATUS_ALREADY_EXISTS, "GA_E_RANK_HELD"},
    {GA_METHOD_JOIN, NULL, VALID, OPERATOR, GRPC_STATUS_PERMISSION_DENIED, "GA_E_PERMISSION_DENIED"},
    {GA_METHOD_PUSH, NULL, VALID, OPERATOR, GRPC_STATUS_PERMISSION_DENIED, "GA_E_PERMISSION_DENIED"},
    {GA_METHOD_PULL, NULL, VALID, OPERATOR, GRPC_STATUS_PERMISSION_DENIED, "GA_E_PERMISSION_DENIED"},
    /* ShardInfo needs no token (shard discovery); any token is ignored. */
    {GA_METHOD_SHARD_INFO, NULL, VALID, NONE, GRPC_STATUS_OK, ""},
    {GA_METHOD_SHARD_INFO, NULL, VALID, UNKNOWN_TOKEN, GRPC_STATUS_OK, ""},
    {GA_METHOD_SHARD_INFO, NULL, UNKNOWN_FIELDS, NONE, GRPC_STATUS_OK, ""},
    {GA_METHOD_SHARD_INFO, NULL, NOT_PROTOBUF, NONE, INVALID, "GA_E_PROTO"},
    {GA_METHOD_SHARD_INFO, NULL, NO_MESSAGE, NONE, INVALID, "GA_E_PROTO"},
    /* Health needs no token; an empty request asks for the whole server. */
    {GA_METHOD_HEALTH_CHECK, NULL, VALID, NONE, GRPC_STATUS_OK, ""},
    {GA_METHOD_HEALTH_CHECK, NULL, VALID, BASIC, GRPC_STATUS_OK, ""},
    {GA_METHOD_HEALTH_CHECK, NULL, UNKNOWN_FIELDS, NONE, GRPC_STATUS_OK, ""},
    {GA_METHOD_HEALTH_CHECK, NULL, EMPTY, NONE, GRPC_STATUS_OK, ""},
    PROTO(GA_METHOD_HEALTH_CHECK),
    {GA_METHOD_HEALTH_CHECK, NULL, NO_MESSAGE, NONE, INVALID, "GA_E_PROTO"},
    /* Paths no method has (with a valid Push body and token). */
    {GA_METHOD_PUSH, "/gradagg.v1.Aggregator/Pushh", VALID, OWN, GRPC_STATUS_UNIMPLEMENTED, "GA_E_UNIMPLEMENTED"},
    {GA_METHOD_PUSH, "/gradagg.v1.aggregator/Push", VALID, OWN, GRPC_STATUS_UNIMPLEMENTED, "GA_E_UNIMPLEMENTED"},
    {GA_METHOD_PUSH, "/gradagg.v2.Aggregator/Push", VALID, OWN, GRPC_STATUS_UNIMPLEMENTED, "GA_E_UNIMPLEMENTED"},
    {GA_METHOD_PUSH, "/Push", VALID, OWN, GRPC_STATUS_UNIMPLEMENTED, "GA_E_UNIMPLEMENTED"},
    {GA_METHOD_HEALTH_CHECK, "/grpc.health.v1.Health/Check/", VALID, NONE, GRPC_STATUS_UNIMPLEMENTED,
     "GA_E_UNIMPLEMENTED"},
};

/* ---- the test ---- */

static char base[64];
static ga_server *server;

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    snprintf(base, sizeof base, "/tmp/gradagg-malformed-XXXXXX");
    assert_non_null(mkdtemp(base));
    ga_config cfg;
    ga_test_config_defaults(&cfg);
    snprintf(cfg.listen, sizeof cfg.listen, "127.0.0.1:0");
    cfg.admin_listen[0] = '\0';
    ga_test_fresh_dir(cfg.data_dir, sizeof cfg.data_dir, base);
    cfg.log_level = GA_LOG_ERROR;
    cfg.max_message_mb = LIMIT_MB;
    snprintf(cfg.auth_tokens, sizeof cfg.auth_tokens, "%s/tokens", base);
    write_file(cfg.auth_tokens, "alpha " TOK_A "\nbeta " TOK_B "\n* " TOK_OP "\n");
    assert_int_equal(ga_server_start(&cfg, &server), GA_OK);
    snprintf(target, sizeof target, "127.0.0.1:%d", ga_server_port(server));
    grpc_init();
    /* The client may send more than the server takes: the oversize row is the server's to refuse. */
    grpc_arg args[] = {
        {GRPC_ARG_INTEGER, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, {.integer = 8 << 20}},
        {GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = 8 << 20}},
        {GRPC_ARG_INTEGER, GRPC_ARG_ENABLE_RETRIES, {.integer = 0}},
    };
    grpc_channel_args chargs = {sizeof args / sizeof args[0], args};
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    channel = grpc_channel_create(target, creds, &chargs);
    grpc_channel_credentials_release(creds);

    /* alpha: one step taken (version 1, step 1 open); beta: joined with its tensor. */
    for (int i = 0; i < N; i++) init_a[i] = (float)i * 0.25f, init_b[i] = -(float)i, grad[i] = 0.5f;
    reply r;
    call_ok(GA_METHOD_JOIN, TOK_A, join_req("alpha", INC_A), &r);
    reply_free(&r);
    call_ok(GA_METHOD_INIT, TOK_A, init_chunk("alpha", INC_A, "w", init_a), &r);
    reply_free(&r);
    call_ok(GA_METHOD_PUSH, TOK_A, push_chunk("alpha", INC_A, 0), &r);
    reply_free(&r);
    call_ok(GA_METHOD_PULL, TOK_A, pull_req("alpha", INC_A, 1), &r); /* waits for version 1 */
    reply_free(&r);
    open_step = 1;
    call_ok(GA_METHOD_JOIN, TOK_B, join_req("beta", INC_B), &r);
    reply_free(&r);
    call_ok(GA_METHOD_INIT, TOK_B, init_chunk("beta", INC_B, "w", init_b), &r);
    reply_free(&r);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    grpc_channel_destroy(channel);
    grpc_shutdown();
    ga_server_destroy(server);
    ga_test_remove_dir(base);
    return 0;
}

/* Every row: its exact status, then the server answers valid calls and neither job changed. */
static void test_malformed_rows(void **state)
{
    (void)state;
    snapshot before;
    snapshot_take(&before);
    /* The state is what setup made it: version 1 with w = init + grad. */
    Gradagg__V1__StatusResponse *st = gradagg__v1__status_response__unpack(NULL, before.status[0].n, before.status[0].p);
    assert_non_null(st);
    assert_int_equal(st->version, 1);
    assert_int_equal(st->open_step, open_step);
    protobuf_c_message_free_unpacked(&st->base, NULL);

    size_t nrows = sizeof rows / sizeof rows[0];
    for (size_t i = 0; i < nrows; i++) {
        const row *w = &rows[i];
        char what[256];
        snprintf(what, sizeof what, "row %zu: %s %s, %s, %s", i, ga_methods[w->m].name, w->path ? w->path : "",
                 body_names[w->body], auth_names[w->auth]);
        bytes msgs[2];
        size_t n = body_messages(w, msgs);
        const char *auth[2];
        size_t nauth = auth_values(w->auth, auth);
        reply r;
        call(w->path ? w->path : ga_methods[w->m].path, auth, nauth, msgs, n, &r);
        for (size_t k = 0; k < n; k++) free(msgs[k].p);
        if (r.code != w->code || strcmp(r.ga, w->ga) != 0)
            fail_msg("%s: got %d '%s' (%s), want %d '%s'", what, r.code, r.ga, r.details, w->code, w->ga);
        /* A successful unary call carries its one response; a refused one none. */
        if (w->code != GRPC_STATUS_OK) assert_int_equal(r.nmsgs, 0);
        else if (w->m != GA_METHOD_PULL) assert_int_equal(r.nmsgs, 1);
        reply_free(&r);

        reply h;
        call_ok(GA_METHOD_HEALTH_CHECK, NULL, health_req(""), &h);
        reply_free(&h);
        snapshot after;
        snapshot_take(&after);
        for (int j = 0; j < 2; j++) {
            if (!same(before.status[j], after.status[j])) fail_msg("%s: the Status of job %d changed", what, j);
            if (!same(before.pulled[j], after.pulled[j])) fail_msg("%s: the pulled parameters of job %d changed", what, j);
        }
        snapshot_free(&after);
    }
    printf("%zu malformed-request rows answered as expected; both jobs unchanged\n", nrows);

    /* Still a working server: the push every MIXED_JOB / CUT_SECOND row began commits now. */
    reply r;
    call_ok(GA_METHOD_PUSH, TOK_A, push_chunk("alpha", INC_A, open_step), &r);
    reply_free(&r);
    call_ok(GA_METHOD_PULL, TOK_A, pull_req("alpha", INC_A, 2), &r);
    assert_true(r.nmsgs >= 1);
    reply_free(&r);
    snapshot_free(&before);
}

int main(void)
{
    ga_log_set_level(GA_LOG_ERROR); /* every row is a refusal the server logs */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_malformed_rows),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
