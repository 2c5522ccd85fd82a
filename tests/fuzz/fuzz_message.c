/* libFuzzer target for every request message the server reads (the request type of each row of
 * ga_methods: JoinRequest, LeaveRequest, InitChunk, PushChunk, PullRequest, StatusRequest and
 * grpc.health.v1's HealthCheckRequest for Check and Watch), through the code a received message
 * takes: ga_wire_unpack from a byte buffer in slices, the bearer-token check, then
 *  - InitChunk and PushChunk: the real dispatch handler (on_stream_message: token check on the
 *    first chunk, then ga_init_add / ga_push_add), as a first and as a later chunk;
 *  - Join, Leave, Pull and Status: the core's handler on a fresh in-process core holding one
 *    job (fuzz_core.h);
 *  - health Check and Watch: the health service.
 * Checks: unpacking fails only with GA_E_PROTO, fails where protobuf-c does, gives the same
 * message however the bytes are sliced and drops unknown fields; a message packs back to bytes that unpack to the same message; the zero-copy packing
 * of a chunk's payload gives the same message; the token check agrees with a model of it; an
 * accepted push chunk decodes with the kernels (what the core will do after accepting it); no
 * request but a Leave of the job's own member, or a Join of another job, changes the job, and
 * a valid push still works afterwards; every call is finished exactly once; no host memory is
 * kept. Findings of the protobuf-c parser itself show up as sanitizer reports.
 *
 * Input layout:
 *   [0]  method: ga_methods row, modulo GA_METHODS
 *   [1]  slicing of the byte buffer (fuzz_util.h): bits 0-1 the kind, bits 2-7 the split point
 *   [2]  authorization metadata: 0xFF = none; else its length L (the value ends at a NUL byte,
 *        as metadata cannot carry one)
 *   [3, 3 + L)  the metadata value; then the message bytes.
 * Tokens: job "fuzz-job" has FUZZ_TOKEN, job "other" OTHER_TOKEN.
 * Seeds: tests/fuzz/corpus/message/, written by the fuzz_gen_corpus program (make_corpus.sh). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/auth.h"
#include "api/dispatch.h"
#include "api/health.h"
#include "base/log.h"
#include "core/job.h"
#include "fuzz_core.h"
#include "ga_codec.h"
#include "store/store.h"

#define FUZZ_TOKEN "fuzz-token-0123456789"
#define OTHER_TOKEN "other-token-012345678"
#define OPERATOR_TOKEN "operator-token-0123456" /* the "*" line: Status, DeleteJob, ListJobs of any job */
#define MAX_DECODE_ELEMS (1u << 20)

static ga_auth *auth;
static ga_health *health;
static ga_dispatch *open_dispatch, *token_dispatch; /* without and with tokens */
static uint64_t mem_baseline;
static bool verbose; /* FUZZ_VERBOSE=1: each input's outcome on stderr (checking the seeds) */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    static const char tokens[] = "fuzz-job " FUZZ_TOKEN "\nother " OTHER_TOKEN "\n* " OPERATOR_TOKEN "\n";
    char why[256];
    FUZZ_CHECK(ga_auth_parse(tokens, sizeof tokens - 1, "fuzz", &auth, why, sizeof why) == GA_OK, "%s", why);
    FUZZ_CHECK(ga_health_create(&health) == GA_OK, "health");
    ga_health_set_all(health, GA_SERVING);
    /* Stream messages never reach the loop or the core: they are only stored here. */
    const ga_stream_limits limits = {64, 64, 64, NULL};
    FUZZ_CHECK(ga_dispatch_create(NULL, NULL, health, FUZZ_STREAM_BYTES, &limits, &open_dispatch) == GA_OK, "dispatch");
    FUZZ_CHECK(ga_dispatch_create(NULL, NULL, health, FUZZ_STREAM_BYTES, &limits, &token_dispatch) == GA_OK, "dispatch");
    ga_dispatch_set_auth(token_dispatch, auth);
    ga_log_set_level(GA_LOG_ERROR); /* refusals are the point here, not news */
    mem_baseline = ga_mem_in_use(GA_MEM_HOST);
    verbose = getenv("FUZZ_VERBOSE") != NULL;
    return 0;
}

static uint8_t *pack(const ProtobufCMessage *m, size_t *len)
{
    *len = protobuf_c_message_get_packed_size(m);
    uint8_t *b = ga_malloc(*len + 1);
    FUZZ_CHECK(b, "out of memory");
    FUZZ_CHECK(protobuf_c_message_pack(m, b) == *len, "pack length");
    return b;
}

static void free_msg(ProtobufCMessage *m)
{
    if (m) protobuf_c_message_free_unpacked(m, &ga_wire_allocator);
}

static bool same_packing(const ProtobufCMessage *a, const ProtobufCMessage *b)
{
    size_t na, nb;
    uint8_t *pa = pack(a, &na), *pb = pack(b, &nb);
    bool same = na == nb && memcmp(pa, pb, na) == 0;
    ga_free(pa);
    ga_free(pb);
    return same;
}

/* An owned copy of m (unpacked again from its packing): must exist and pack identically. */
static ProtobufCMessage *round_trip(const ProtobufCMessage *m)
{
    size_t n;
    uint8_t *p = pack(m, &n);
    ProtobufCMessage *copy = protobuf_c_message_unpack(m->descriptor, &ga_wire_allocator, n, p);
    ga_free(p);
    FUZZ_CHECK(copy, "%s does not unpack from its own packing", m->descriptor->name);
    FUZZ_CHECK(same_packing(m, copy), "%s packs differently after a round trip", m->descriptor->name);
    return copy;
}

static void release_count(void *ud) { ++*(int *)ud; }

/* A chunk's large bytes field sent the zero-copy way (ga_wire_pack appends it as field 15 after
 * the rest) unpacks to the same message. */
static void zero_copy_round_trip(const ProtobufCMessage *m, ProtobufCBinaryData *field)
{
    ProtobufCMessage *copy = round_trip(m);
    ProtobufCBinaryData *cf = (ProtobufCBinaryData *)((char *)copy + ((char *)field - (char *)m));
    ProtobufCBinaryData payload = *cf;
    *cf = (ProtobufCBinaryData){0, NULL};
    int released = 0;
    grpc_byte_buffer *bb = ga_wire_pack(copy, payload.data, payload.len, release_count, &released);
    *cf = payload;
    FUZZ_CHECK(bb, "ga_wire_pack");
    ProtobufCMessage *back = NULL;
    FUZZ_CHECK(ga_wire_unpack(m->descriptor, bb, &back) == GA_OK, "zero-copy packing does not unpack");
    grpc_byte_buffer_destroy(bb);
    /* Released exactly once when there was something to release (ga_wire.h). */
    FUZZ_CHECK(released == (payload.data != NULL), "payload released %d times", released);
    FUZZ_CHECK(same_packing(m, back), "zero-copy packing of %s changed it", m->descriptor->name);
    free_msg(back);
    free_msg(copy);
}

/* ---- the token check against a model ---- */

static const char *job_of(ga_method_id m, const ProtobufCMessage *msg)
{
    switch (m) {
    case GA_METHOD_JOIN: return ((const Gradagg__V1__JoinRequest *)msg)->job;
    case GA_METHOD_LEAVE: return ((const Gradagg__V1__LeaveRequest *)msg)->job;
    case GA_METHOD_INIT: return ((const Gradagg__V1__InitChunk *)msg)->job;
    case GA_METHOD_PUSH: return ((const Gradagg__V1__PushChunk *)msg)->job;
    case GA_METHOD_PULL: return ((const Gradagg__V1__PullRequest *)msg)->job;
    case GA_METHOD_STATUS: return ((const Gradagg__V1__StatusRequest *)msg)->job;
    case GA_METHOD_HEARTBEAT: return ((const Gradagg__V1__HeartbeatRequest *)msg)->job;
    case GA_METHOD_DELETE_JOB: return ((const Gradagg__V1__DeleteJobRequest *)msg)->job;
    default: return NULL;
    }
}

/* "Bearer", case-insensitive, one or more spaces, then exactly `token`. */
static bool carries(const char *v, const char *token)
{
    if (!v || strncasecmp(v, "Bearer ", 7) != 0) return false;
    v += 7;
    while (*v == ' ') v++;
    return strcmp(v, token) == 0;
}

/* The operators' methods, which an operator token grants for every job (auth.h). */
static bool operators_method(ga_method_id m)
{
    return m == GA_METHOD_STATUS || m == GA_METHOD_DELETE_JOB || m == GA_METHOD_LIST_JOBS;
}

/* job NULL: the method names every job (ListJobs). */
static ga_status auth_model(ga_method_id m, const char *job, const char *value)
{
    bool fuzz = carries(value, FUZZ_TOKEN), other = carries(value, OTHER_TOKEN), op = carries(value, OPERATOR_TOKEN);
    if (!fuzz && !other && !op) return GA_E_UNAUTHENTICATED;
    if (job && ((fuzz && strcmp(job, "fuzz-job") == 0) || (other && strcmp(job, "other") == 0))) return GA_OK;
    if (op && operators_method(m)) return GA_OK;
    return GA_E_PERMISSION_DENIED;
}

/* ---- per method ---- */

/* A push chunk's payload, as the core will decode it once it accepts the push. */
static void decodes(const Gradagg__V1__PushChunk *c)
{
    static const ga_exec cpu = {GA_BACKEND_CPU, 1, GA_SIMD_AUTO, NULL};
    if (c->count > MAX_DECODE_ELEMS) return;
    ga_codec_id id;
    ga_codec_params p;
    char why[256];
    FUZZ_CHECK(ga_codec_from_wire(c->codec, "fuzz", &id, &p, why, sizeof why) == GA_OK, "accepted codec: %s", why);
    float *sum = ga_calloc((size_t)c->count, sizeof *sum);
    FUZZ_CHECK(sum, "out of memory");
    ga_status st = ga_codec_decode_add(&cpu, id, &p, c->payload.data, c->payload.len, (size_t)c->count, sum);
    FUZZ_CHECK(st == GA_OK, "an accepted chunk does not decode: %s", ga_status_name(st));
    ga_free(sum);
}

/* Two copies of a stream chunk through dispatch: first chunk, then a later one. */
static void stream_chunk(ga_method_id m, ProtobufCMessage *msg, const char *authz)
{
    ProtobufCMessage *again = round_trip(msg), *tokened = round_trip(msg);
    if (m == GA_METHOD_PUSH) zero_copy_round_trip(msg, &((Gradagg__V1__PushChunk *)msg)->payload);
    else zero_copy_round_trip(msg, &((Gradagg__V1__InitChunk *)msg)->values);
    ga_status model = auth_model(m, job_of(m, msg), authz);
    ga_call *call = fake_call_new();
    call->authorization = authz;
    char why[256] = "";

    /* With tokens: refused exactly as the model says, or passed on to the chunk checks. */
    const ga_rpc_handlers *h = ga_dispatch_handlers(token_dispatch);
    void *stream = NULL;
    ga_status with = h->on_stream_message(h->ctx, call, m, tokened, &stream, why, sizeof why);
    if (model != GA_OK) FUZZ_CHECK(with == model && !stream, "token check %s, model %s", ga_status_name(with),
                                   ga_status_name(model));
    h->on_stream_abort(h->ctx, call, m, stream);

    h = ga_dispatch_handlers(open_dispatch);
    stream = NULL;
    why[0] = 0;
    ga_status st = h->on_stream_message(h->ctx, call, m, msg, &stream, why, sizeof why);
    if (verbose) fprintf(stderr, "%s: token %s, chunk %s %s\n", ga_methods[m].name, ga_status_name(with),
                         ga_status_name(st), why);
    if (model == GA_OK) FUZZ_CHECK(with == st, "with a token %s, without %s", ga_status_name(with), ga_status_name(st));
    if (st != GA_OK) {
        FUZZ_CHECK(!stream && why[0] && fuzz_client_fault(st), "refused %s '%s'", ga_status_name(st), why);
        free_msg(again);
    } else {
        FUZZ_CHECK(stream, "an accepted chunk made no bundle");
        if (m == GA_METHOD_PUSH) {
            const ga_push *p = stream;
            decodes(p->parts[0].chunk);
        }
        /* The same chunk again agrees with the first in every header field. */
        st = h->on_stream_message(h->ctx, call, m, again, &stream, why, sizeof why);
        FUZZ_CHECK(st == GA_OK, "the same chunk twice: %s '%s'", ga_status_name(st), why);
    }
    h->on_stream_abort(h->ctx, call, m, stream);
    FUZZ_CHECK(!call->finished, "a stream message finished the call");
    fake_call_free(call);
}

static void health_call(ga_method_id m, ProtobufCMessage *msg)
{
    const char *service = ((Grpc__Health__V1__HealthCheckRequest *)msg)->service;
    bool known = !service || !service[0] || strcmp(service, "gradagg.v1.Aggregator") == 0;
    ga_call *call = fake_call_new();
    if (m == GA_METHOD_HEALTH_CHECK) {
        ga_health_check(health, call, (Grpc__Health__V1__HealthCheckRequest *)msg);
        FUZZ_CHECK(call->finished && call->status == (known ? GA_OK : GA_E_UNKNOWN_SERVICE), "check: %s",
                   ga_status_name(call->status));
    } else {
        ga_health_watch(health, call, (Grpc__Health__V1__HealthCheckRequest *)msg);
        FUZZ_CHECK(!call->finished && call->nmsgs == 1, "watch: finished %d, %zu messages", call->finished,
                   call->nmsgs);
        FUZZ_CHECK(ga_health_cancel(health, call) && call->finished, "watch cancel");
        FUZZ_CHECK(ga_health_watches(health) == 0, "a watch left open");
    }
    FUZZ_CHECK(call->misuse == 0, "health misuse");
    fake_call_free(call);
}

/* Join, Leave, Pull, Status, Heartbeat, DeleteJob on a fresh core with the job. Two requests
 * may fail the job (docs/protocol.md, "Failed ranks"), and only before its first push: a Join
 * of its rank with another config, and its member's Leave as failed. */
static void core_call(ga_method_id m, ProtobufCMessage *msg)
{
    static fuzz_core h;
    static fuzz_snap before, after;
    fuzz_core_open(&h, false);
    fuzz_snap_take(&h, &before);
    const char *job = job_of(m, msg);
    bool own_job = job && strcmp(job, FUZZ_JOB) == 0;
    ga_call *call = fake_call_new();
    switch (m) {
    case GA_METHOD_JOIN: ga_core_join(h.core, call, (Gradagg__V1__JoinRequest *)msg); break;
    case GA_METHOD_LEAVE: ga_core_leave(h.core, call, (Gradagg__V1__LeaveRequest *)msg); break;
    case GA_METHOD_PULL: ga_core_pull(h.core, call, (Gradagg__V1__PullRequest *)msg); break;
    case GA_METHOD_STATUS: ga_core_status(h.core, call, (Gradagg__V1__StatusRequest *)msg); break;
    case GA_METHOD_HEARTBEAT: ga_core_heartbeat(h.core, call, (Gradagg__V1__HeartbeatRequest *)msg); break;
    case GA_METHOD_DELETE_JOB: ga_core_delete_job(h.core, call, (Gradagg__V1__DeleteJobRequest *)msg); break;
    case GA_METHOD_LIST_JOBS: ga_core_list_jobs(h.core, call, (Gradagg__V1__ListJobsRequest *)msg); break;
    default: FUZZ_CHECK(false, "not a core request");
    }
    fuzz_settle(&h);
    for (size_t i = 0; i < h.core->njobs; i++) /* a new job's work, if a Join made one */
        while (!ga_taskq_idle(&h.core->jobs[i]->tasks)) uv_run(&h.loop, UV_RUN_ONCE);
    if (m == GA_METHOD_PULL && !call->finished) {
        /* Waiting for the next version: the client goes away. */
        FUZZ_CHECK(h.job->pulls != NULL, "an unfinished pull that does not wait");
        ga_core_cancel(h.core, call);
    }
    if (verbose) fprintf(stderr, "%s: %s %s\n", ga_methods[m].name, ga_status_name(call->status), call->message);
    FUZZ_CHECK(call->finished && call->misuse == 0, "%s: finished %d misuse %d", ga_methods[m].name,
               call->finished, call->misuse);
    FUZZ_CHECK(call->status == GA_OK || fuzz_client_fault(call->status) || call->status == GA_E_CANCELLED,
               "%s refused with %s: %s", ga_methods[m].name, ga_status_name(call->status), call->message);
    FUZZ_CHECK(h.core->njobs <= 2, "%zu jobs", h.core->njobs);
    if (m != GA_METHOD_JOIN || own_job) FUZZ_CHECK(h.core->njobs == 1, "%s made a job", ga_methods[m].name);
    fuzz_snap_take(&h, &after);
    bool left = m == GA_METHOD_LEAVE && call->status == GA_OK && own_job;
    if (left) {
        FUZZ_CHECK(after.left, "an accepted Leave did not leave");
        after.left = before.left;
    }
    const char *d = fuzz_snap_diff(&before, &after);
    FUZZ_CHECK(!d, "%s (%s) changed the job: %s", ga_methods[m].name, ga_status_name(call->status), d);
    bool failed = h.job->failed_incarnations != NULL;
    if (failed)
        FUZZ_CHECK(!before.any_commit && ((m == GA_METHOD_JOIN && call->status == GA_E_JOB_CONFIG) || left),
                   "%s (%s) failed the job", ga_methods[m].name, ga_status_name(call->status));
    fake_call_free(call);
    if (!left && !failed) fuzz_probe(&h, 0);
    fuzz_core_close(&h);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3) return 0;
    ga_method_id m = (ga_method_id)(data[0] % GA_METHODS);
    const ProtobufCMessageDescriptor *desc = ga_methods[m].request;
    size_t pos = 3;
    char authz_buf[256];
    const char *authz = NULL;
    if (data[2] != 0xFF) {
        size_t l = data[2] < size - pos ? data[2] : size - pos;
        memcpy(authz_buf, data + pos, l);
        authz_buf[l] = 0;
        pos += l;
        authz = authz_buf;
    }
    const uint8_t *bytes = data + pos;
    size_t len = size - pos;

    grpc_byte_buffer *bb = fuzz_byte_buffer(bytes, len, data[1] & 3u, data[1] >> 2);
    ProtobufCMessage *msg = NULL;
    ga_status st = ga_wire_unpack(desc, bb, &msg);
    grpc_byte_buffer_destroy(bb);
    /* The slicing changes nothing: the same bytes in one slice give the same answer. */
    ProtobufCMessage *flat = NULL;
    bb = fuzz_byte_buffer(bytes, len, 0, 0);
    ga_status flat_st = ga_wire_unpack(desc, bb, &flat);
    grpc_byte_buffer_destroy(bb);
    FUZZ_CHECK(st == flat_st, "sliced %s, in one slice %s", ga_status_name(st), ga_status_name(flat_st));
    /* What protobuf-c refuses is refused; what is accepted is what protobuf-c reads. */
    ProtobufCMessage *raw = protobuf_c_message_unpack(desc, &ga_wire_allocator, len, bytes);
    FUZZ_CHECK(raw || st != GA_OK, "protobuf-c refuses what ga_wire_unpack accepted");
    free_msg(raw);
    if (st != GA_OK) {
        if (verbose) fprintf(stderr, "%s: unpack %s\n", ga_methods[m].name, ga_status_name(st));
        FUZZ_CHECK(st == GA_E_PROTO && !msg, "unpack failed with %s", ga_status_name(st));
        goto out;
    }
    FUZZ_CHECK(same_packing(msg, flat), "slicing changed the message");
    FUZZ_CHECK(msg->n_unknown_fields == 0, "unknown fields kept");
    free_msg(round_trip(msg));

    switch (m) {
    case GA_METHOD_INIT:
    case GA_METHOD_PUSH: stream_chunk(m, msg, authz); break;
    case GA_METHOD_HEALTH_CHECK:
    case GA_METHOD_HEALTH_WATCH: health_call(m, msg); break;
    case GA_METHOD_SHARD_INFO: free_msg(msg); break; /* the dispatch answers it from settings: no core */
    default: {
        char why[256];
        ga_status model = auth_model(m, job_of(m, msg), authz);
        size_t len = authz ? strlen(authz) : 0, n = authz ? 1 : 0;
        ga_status got = operators_method(m) ? ga_auth_check_operator(auth, job_of(m, msg), authz, len, n, why, sizeof why)
                                            : ga_auth_check(auth, job_of(m, msg), authz, len, n, why, sizeof why);
        FUZZ_CHECK(got == model, "token check %s, model %s", ga_status_name(got), ga_status_name(model));
        core_call(m, msg);
        break;
    }
    }
out:
    free_msg(flat);
    FUZZ_CHECK(ga_mem_in_use(GA_MEM_HOST) == mem_baseline, "host memory %llu after the input, %llu before",
               (unsigned long long)ga_mem_in_use(GA_MEM_HOST), (unsigned long long)mem_baseline);
    return 0;
}
