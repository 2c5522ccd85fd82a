/* gradagg's transport handlers (see dispatch.h). Every call that reaches the loop is handed to
 * exactly one owner there (core or health), which finishes it; a call that cannot be posted is
 * finished here with the reason. */
#include "dispatch.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "auth.h"
#include "base/base.h"
#include "bundle/bundle.h"
#include "ga_alloc.h"
#include "ga_lane.h"
#include "ga_wire.h"
#include "stream_caps.h"

struct ga_dispatch {
    ga_rpc_handlers handlers; /* ctx = this */
    ga_loop *loop;
    ga_core *core;
    bool relay; /* a node relay's: ranks are mapped (ga_core_relay_map) before the core sees them */
    ga_health *health;
    size_t max_stream_bytes;
    ga_stream_caps *caps;        /* streams open per client host and per job */
    ga_budget *budget;           /* the core's; NULL without a core */
    const ga_auth *_Atomic auth; /* NULL: no tokens; replaced by a reload (SIGHUP) */
    /* ShardInfo's answer (loop thread): count 0 = in no shard set. */
    uint32_t shard_index, shard_count;
    char shard_address[GA_DISPATCH_ADDRESS_MAX];
};

/* One piece of work for the loop: a request message, a finished bundle, or a cancel. */
typedef struct job {
    ga_dispatch *d;
    ga_call *call;
    ga_method_id method;
    void *payload; /* ProtobufCMessage * (request), ga_push * / ga_init * (stream end), NULL (cancel) */
} job;

static void free_payload(ga_method_id m, void *payload)
{
    if (!payload) return;
    if (m == GA_METHOD_PUSH) ga_push_free(payload);
    else if (m == GA_METHOD_INIT) ga_init_free(payload);
    else protobuf_c_message_free_unpacked(payload, &ga_wire_allocator);
}

/* Posts fn(job) to the loop. When that fails the call is finished here (ga_call_finish is
 * any-thread) and the payload freed: the loop will never see it. */
static void post(ga_dispatch *d, ga_call *call, ga_method_id m, void *payload, void (*fn)(void *))
{
    job *j = ga_malloc(sizeof *j);
    ga_status st = GA_E_NOMEM;
    if (j) {
        *j = (job){d, call, m, payload};
        st = ga_loop_post(d->loop, fn, j);
        if (st == GA_OK) return;
        ga_free(j);
    }
    free_payload(m, payload);
    if (call) ga_call_finish(call, NULL, st, NULL);
}

/* A stream's first chunk, for the loop to check against the job (the stream's own bundle stays
 * on its queue thread). */
typedef struct stream_check {
    ga_dispatch *d;
    ga_call *call; /* held */
    char *job;
    uint32_t rank;
    uint64_t incarnation;
} stream_check;

/* ---- on the loop thread ---- */

static void shard_info(const ga_dispatch *d, ga_call *call, ProtobufCMessage *req)
{
    Gradagg__V1__ShardInfoResponse resp = GRADAGG__V1__SHARD_INFO_RESPONSE__INIT;
    resp.index = d->shard_index;
    resp.count = d->shard_count;
    resp.address = (char *)d->shard_address;
    ga_call_finish(call, &resp.base, GA_OK, NULL);
    protobuf_c_message_free_unpacked(req, &ga_wire_allocator);
}

void ga_dispatch_set_shard(ga_dispatch *d, uint32_t index, uint32_t count, const char *address)
{
    d->shard_index = index;
    d->shard_count = count;
    snprintf(d->shard_address, sizeof d->shard_address, "%s", address ? address : "");
}

static void run_request(void *arg)
{
    job *j = arg;
    ga_dispatch *d = j->d;
    char why[160];
    ga_status st = d->relay ? ga_core_relay_map(d->core, j->method, j->payload, why, sizeof why) : GA_OK;
    if (st != GA_OK) {
        free_payload(j->method, j->payload);
        ga_call_finish(j->call, NULL, st, "%s", why);
        ga_free(j);
        return;
    }
    switch (j->method) {
    case GA_METHOD_JOIN: ga_core_join(d->core, j->call, j->payload); break;
    case GA_METHOD_LEAVE: ga_core_leave(d->core, j->call, j->payload); break;
    case GA_METHOD_PULL: ga_core_pull(d->core, j->call, j->payload); break;
    case GA_METHOD_STATUS: ga_core_status(d->core, j->call, j->payload); break;
    case GA_METHOD_HEARTBEAT: ga_core_heartbeat(d->core, j->call, j->payload); break;
    case GA_METHOD_DELETE_JOB: ga_core_delete_job(d->core, j->call, j->payload); break;
    case GA_METHOD_LIST_JOBS: ga_core_list_jobs(d->core, j->call, j->payload); break;
    case GA_METHOD_SHARD_INFO: shard_info(d, j->call, j->payload); break;
    case GA_METHOD_HEALTH_CHECK: ga_health_check(d->health, j->call, j->payload); break;
    case GA_METHOD_HEALTH_WATCH: ga_health_watch(d->health, j->call, j->payload); break;
    case GA_METHOD_PUSH: ga_core_push(d->core, j->call, j->payload); break;
    case GA_METHOD_INIT: ga_core_init(d->core, j->call, j->payload); break;
    default:
        free_payload(j->method, j->payload);
        ga_call_finish(j->call, NULL, GA_E_UNIMPLEMENTED, NULL);
        break;
    }
    ga_free(j);
}

static void run_cancel(void *arg)
{
    job *j = arg;
    /* A posted cancel runs before any later request, so a call that was finished (and its
     * address perhaps reused) in between is simply unknown to both owners. */
    if (!ga_health_cancel(j->d->health, j->call)) ga_core_cancel(j->d->core, j->call);
    ga_free(j);
}

static void run_stream_check(void *arg)
{
    stream_check *k = arg;
    char why[160];
    uint32_t rank = k->rank;
    ga_status st = k->d->relay ? ga_core_relay_map_rank(k->d->core, k->job, &rank, why, sizeof why) : GA_OK;
    if (st != GA_OK)
        ga_call_refuse(k->call, st, "%s", why);
    else
        ga_core_stream_check(k->d->core, k->call, k->job, rank, k->incarnation);
    ga_call_release(k->call);
    ga_free(k->job);
    ga_free(k);
}

/* ---- on completion-queue threads ---- */

/* The scope of the bearer token a call for job carries, into buf: the job a token belongs to
 * (a lane's stream counts as its job's, auth.h); NULL with tokens off. */
static const char *token_scope(const ga_dispatch *d, const char *job, char *buf, size_t cap)
{
    if (!atomic_load_explicit(&d->auth, memory_order_acquire)) return NULL;
    snprintf(buf, cap, "%.*s", (int)ga_lane_base_len(job, strlen(job)), job);
    return buf;
}

/* A stream's slots in the caps: its client host's, its job's and its token's (stream_caps.h). */
static ga_status stream_open(ga_dispatch *d, const ga_call *call, const char *job, char *why, size_t cap)
{
    char host[64], token[GA_WIRE_JOB_MAX + 1];
    ga_call_peer_host(call, host, sizeof host);
    return ga_stream_caps_open(d->caps, host, job, token_scope(d, job, token, sizeof token), why, cap);
}

static void stream_close(ga_dispatch *d, const ga_call *call, const char *job)
{
    char host[64], token[GA_WIRE_JOB_MAX + 1];
    ga_call_peer_host(call, host, sizeof host);
    ga_stream_caps_close(d->caps, host, job, token_scope(d, job, token, sizeof token));
}

/* The job a stream's bundle names (its first chunk's). */
static const char *stream_job(ga_method_id m, const void *stream)
{
    return m == GA_METHOD_PUSH ? ((const ga_push *)stream)->job : ((const ga_init *)stream)->job;
}

/* The loop checks a stream's job and membership as its first chunk arrives
 * (ga_core_stream_check). Takes name. Without memory for it, the stream's end is checked all
 * the same. */
static void post_stream_check(ga_dispatch *d, ga_call *call, char *name, uint32_t rank, uint64_t incarnation)
{
    stream_check *k = name && d->core ? ga_malloc(sizeof *k) : NULL;
    if (!k) {
        ga_free(name);
        return;
    }
    *k = (stream_check){d, call, name, rank, incarnation};
    ga_call_hold(call);
    if (ga_loop_post(d->loop, run_stream_check, k) != GA_OK) {
        ga_call_release(call);
        ga_free(name), ga_free(k);
    }
}

/* Whether a method names a job, and which one this request or chunk names (NULL: every job).
 * Health and ShardInfo name none: probes and shard discovery carry no token. */
static bool names_job(ga_method_id m, const ProtobufCMessage *msg, const char **job)
{
    switch (m) {
    case GA_METHOD_JOIN: *job = ((const Gradagg__V1__JoinRequest *)msg)->job; return true;
    case GA_METHOD_LEAVE: *job = ((const Gradagg__V1__LeaveRequest *)msg)->job; return true;
    case GA_METHOD_INIT: *job = ((const Gradagg__V1__InitChunk *)msg)->job; return true;
    case GA_METHOD_PUSH: *job = ((const Gradagg__V1__PushChunk *)msg)->job; return true;
    case GA_METHOD_PULL: *job = ((const Gradagg__V1__PullRequest *)msg)->job; return true;
    case GA_METHOD_STATUS: *job = ((const Gradagg__V1__StatusRequest *)msg)->job; return true;
    case GA_METHOD_HEARTBEAT: *job = ((const Gradagg__V1__HeartbeatRequest *)msg)->job; return true;
    case GA_METHOD_DELETE_JOB: *job = ((const Gradagg__V1__DeleteJobRequest *)msg)->job; return true;
    case GA_METHOD_LIST_JOBS: *job = NULL; return true; /* every job */
    case GA_METHOD_SHARD_INFO:
    case GA_METHOD_HEALTH_CHECK:
    case GA_METHOD_HEALTH_WATCH:
    case GA_METHODS: break;
    }
    return false;
}

/* The bearer token check (auth.h). Stateless: runs before anything is posted, so a refused call
 * changes nothing. The message names the job and the peer, never the token. */
static ga_status authorize(const ga_dispatch *d, ga_call *call, ga_method_id m, const ProtobufCMessage *msg,
                           char *why, size_t cap)
{
    const char *job = NULL;
    const ga_auth *auth = atomic_load_explicit(&d->auth, memory_order_acquire);
    if (!auth || !names_job(m, msg, &job)) return GA_OK;
    const char *value;
    size_t len;
    size_t n = ga_call_metadata(call, GA_AUTH_METADATA_KEY, &value, &len);
    bool operators = m == GA_METHOD_STATUS || m == GA_METHOD_DELETE_JOB || m == GA_METHOD_LIST_JOBS;
    ga_status st = operators ? ga_auth_check_operator(auth, job, value, len, n, why, cap)
                             : ga_auth_check(auth, job, value, len, n, why, cap);
    if (st != GA_OK) ga_log(GA_LOG_WARN, "%s from %s refused: %s", ga_methods[m].name, ga_call_peer(call), why);
    return st;
}

static void on_request(void *ctx, ga_call *call, ga_method_id method, ProtobufCMessage *msg)
{
    if (method >= GA_METHODS || ga_methods[method].kind == GA_RPC_CLIENT_STREAM) {
        /* run_request reads a client stream's payload as a bundle, never as a message. */
        protobuf_c_message_free_unpacked(msg, &ga_wire_allocator);
        ga_call_finish(call, NULL, GA_E_UNIMPLEMENTED, NULL);
        return;
    }
    char why[256];
    ga_status st = authorize(ctx, call, method, msg, why, sizeof why);
    if (st != GA_OK) {
        protobuf_c_message_free_unpacked(msg, &ga_wire_allocator);
        ga_call_finish(call, NULL, st, "%s", why);
        return;
    }
    post(ctx, call, method, msg, run_request);
}

static ga_status on_stream_message(void *ctx, ga_call *call, ga_method_id method, ProtobufCMessage *msg,
                                   void **stream, char *why, size_t why_cap)
{
    ga_dispatch *d = ctx;
    if (method != GA_METHOD_PUSH && method != GA_METHOD_INIT) {
        protobuf_c_message_free_unpacked(msg, &ga_wire_allocator);
        snprintf(why, why_cap, "%s is not a client stream", ga_methods[method].path);
        return GA_E_UNIMPLEMENTED;
    }
    /* Later chunks must name the first one's job (bundle.c), so the first one decides. */
    bool first = !*stream;
    char *name = NULL;
    uint32_t rank = 0;
    uint64_t incarnation = 0;
    if (first) {
        const char *job;
        if (method == GA_METHOD_PUSH) {
            const Gradagg__V1__PushChunk *c = (const Gradagg__V1__PushChunk *)msg;
            job = c->job, rank = c->rank, incarnation = c->incarnation;
        } else {
            const Gradagg__V1__InitChunk *c = (const Gradagg__V1__InitChunk *)msg;
            job = c->job, rank = c->rank, incarnation = c->incarnation;
        }
        name = ga_strdup(job ? job : "");
        ga_status st = name ? authorize(d, call, method, msg, why, why_cap)
                            : ga_status_fail(GA_E_NOMEM, why, why_cap, "out of memory opening a stream");
        if (st == GA_OK) st = stream_open(d, call, name, why, why_cap);
        if (st != GA_OK) {
            protobuf_c_message_free_unpacked(msg, &ga_wire_allocator);
            ga_free(name);
            return st;
        }
    }
    ga_status rc = method == GA_METHOD_PUSH
                       ? ga_push_add((ga_push **)stream, (Gradagg__V1__PushChunk *)msg, d->max_stream_bytes,
                                     d->budget, why, why_cap)
                       : ga_init_add((ga_init **)stream, (Gradagg__V1__InitChunk *)msg, d->max_stream_bytes,
                                     d->budget, why, why_cap);
    if (first && rc != GA_OK) {
        stream_close(d, call, name); /* no stream state: on_stream_abort will not */
        ga_free(name);
    } else if (first) {
        post_stream_check(d, call, name, rank, incarnation);
    }
    return rc;
}

static void on_stream_end(void *ctx, ga_call *call, ga_method_id method, void *stream)
{
    if (stream) stream_close(ctx, call, stream_job(method, stream));
    if (!stream) {
        /* No chunk: no job, rank or step to commit against; nothing for the core to judge. */
        ga_call_finish(call, NULL, GA_E_INVAL, "%s stream ended without a chunk", ga_methods[method].name);
        return;
    }
    post(ctx, call, method, stream, run_request);
}

static void on_stream_abort(void *ctx, ga_call *call, ga_method_id method, void *stream)
{
    if (stream) stream_close(ctx, call, stream_job(method, stream));
    free_payload(method, stream);
}

static void on_cancel(void *ctx, ga_call *call)
{
    ga_dispatch *d = ctx;
    job *j = ga_malloc(sizeof *j);
    ga_status st = GA_E_NOMEM;
    if (j) {
        *j = (job){d, call, GA_METHODS, NULL};
        st = ga_loop_post(d->loop, run_cancel, j);
        if (st == GA_OK) return;
        ga_free(j);
    }
    /* The call stays with its owner, which finishes it when its wait ends (a pull's version,
     * a watch at shutdown); only the early release is lost. */
    ga_log(GA_LOG_WARN, "dispatch: cannot post a cancel: %s", ga_strerror(st));
}

ga_status ga_dispatch_create(ga_loop *loop, ga_core *core, ga_health *health, size_t max_stream_bytes,
                             const ga_stream_limits *limits, ga_dispatch **out)
{
    ga_dispatch *d = ga_calloc(1, sizeof *d);
    if (!d || !(d->caps = ga_stream_caps_create(limits))) {
        ga_free(d);
        return GA_E_NOMEM;
    }
    d->handlers = (ga_rpc_handlers){
        .ctx = d,
        .on_request = on_request,
        .on_stream_message = on_stream_message,
        .on_stream_end = on_stream_end,
        .on_stream_abort = on_stream_abort,
        .on_cancel = on_cancel,
    };
    d->loop = loop;
    d->core = core;
    d->health = health;
    d->max_stream_bytes = max_stream_bytes;
    d->budget = core ? ga_core_budget(core) : NULL;
    *out = d;
    return GA_OK;
}

void ga_dispatch_set_relay(ga_dispatch *d) { d->relay = true; }

void ga_dispatch_set_auth(ga_dispatch *d, const ga_auth *auth)
{
    atomic_store_explicit(&d->auth, auth, memory_order_release);
}

const ga_rpc_handlers *ga_dispatch_handlers(const ga_dispatch *d)
{
    return &d->handlers;
}

void ga_dispatch_destroy(ga_dispatch *d)
{
    if (!d) return;
    ga_stream_caps_destroy(d->caps);
    ga_free(d);
}
