/* The gradagg command line tool's commands (commands.h): ListJobs, Status, DeleteJob and the
 * gRPC health check, asked of every shard, printed as tables or JSON (docs/cli.md). */
#include "commands.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ga_codec.h"
#include "ga_text.h"
#include "ga_wire.h"
#include "json.h"

int cli_exit_for(ga_status st)
{
    switch (st) {
    case GA_OK: return CLI_OK;
    case GA_E_UNAVAILABLE:
    case GA_E_DEADLINE:
    case GA_E_TRANSPORT:
    case GA_E_CANCELLED: return CLI_UNREACHABLE;
    case GA_E_UNAUTHENTICATED:
    case GA_E_PERMISSION_DENIED: return CLI_DENIED;
    default: return CLI_REFUSED;
    }
}

static int worst(int a, int b) { return a > b ? a : b; }

/* A client string (a job name, a failure's reason) for a line of text: escaped (ga_text.h) into
 * buf, cut to fit. */
typedef struct shown {
    char s[1024];
} shown;
static const char *show(shown *buf, const char *s)
{
    ga_text_escape(buf->s, sizeof buf->s, s ? s : "", s ? strlen(s) : 0);
    return buf->s;
}

/* One unary call to shard s; on failure prints it (stderr, or into the JSON as "error"). */
static ga_status call(const cli *c, const cli_shard *s, ga_method_id m, const ProtobufCMessage *req,
                      ProtobufCMessage **resp, json *j)
{
    char msg[512] = "";
    ga_status st = ga_call_unary(s->channel, m, req, c->timeout_ms, resp, msg, sizeof msg);
    if (st == GA_OK) return GA_OK;
    shown text;
    fprintf(stderr, "gradagg: %s: %s: %s (%s)\n", s->address, ga_methods[m].name, show(&text, msg),
            ga_status_name(st));
    if (j) {
        json_begin_object(j, "error");
        json_string(j, "status", ga_status_name(st));
        json_string(j, "message", msg);
        json_end_object(j);
    }
    return st;
}

static void free_msg(ProtobufCMessage *m)
{
    if (m) protobuf_c_message_free_unpacked(m, &ga_wire_allocator);
}

/* ---- jobs ---- */

static const char *job_state(const Gradagg__V1__JobSummary *s, char *buf, size_t cap)
{
    if (s->failure && s->failure[0]) return "failed";
    if (s->finished) return "finished";
    if (s->joined < s->world_size) {
        snprintf(buf, cap, "waiting %" PRIu32 "/%" PRIu32, s->joined, s->world_size);
        return buf;
    }
    return "training";
}

/* What a command prints for one shard's answer: resp is NULL when the call failed (already
 * reported), i is the shard's position, job the job named (NULL for jobs). */
typedef void (*show_fn)(const cli *c, const char *job, size_t i, const ProtobufCMessage *resp, json *j);

/* The loop of jobs, status and delete: asks every shard the unary method m with req, calls show
 * for each, and returns the worst exit status. JSON: {["job": job,] "shards": [{"server", ...}]}. */
static int per_shard(const cli *c, const char *job, ga_method_id m, const ProtobufCMessage *req, show_fn show)
{
    int rc = CLI_OK;
    json j = {stdout, 0, {false}};
    if (c->json) {
        json_begin_object(&j, NULL);
        if (job) json_string(&j, "job", job);
        json_begin_array(&j, "shards");
    }
    for (size_t i = 0; i < c->nshards; i++) {
        ProtobufCMessage *resp = NULL;
        if (c->json) {
            json_begin_object(&j, NULL);
            json_string(&j, "server", c->shards[i].address);
        }
        rc = worst(rc, cli_exit_for(call(c, &c->shards[i], m, req, &resp, c->json ? &j : NULL)));
        show(c, job, i, resp, &j);
        if (c->json) json_end_object(&j);
        free_msg(resp);
    }
    if (c->json) {
        json_end_array(&j);
        json_end_object(&j);
        json_finish(&j);
    }
    return rc;
}

static void jobs_show(const cli *c, const char *job, size_t i, const ProtobufCMessage *resp, json *j)
{
    (void)job;
    const Gradagg__V1__ListJobsResponse *r = (const Gradagg__V1__ListJobsResponse *)resp;
    if (!r) return;
    if (c->json) json_begin_array(j, "jobs");
    for (size_t k = 0; k < r->n_jobs; k++) {
        const Gradagg__V1__JobSummary *x = r->jobs[k];
        bool failed = x->failure && x->failure[0];
        char buf[64], committed[32];
        const char *state = job_state(x, buf, sizeof buf);
        if (c->json) {
            json_begin_object(j, NULL);
            json_string(j, "job", x->job);
            json_string(j, "mode", x->async ? "async" : "sync");
            json_uint(j, "world_size", x->world_size);
            json_uint(j, "joined", x->joined);
            json_uint(j, "version", x->version);
            json_uint(j, "open_step", x->open_step);
            json_uint(j, "committed", x->committed);
            json_bool(j, "finished", x->finished);
            json_string(j, "failure", x->failure);
            json_string(j, "state", failed        ? "failed"
                                    : x->finished ? "finished"
                                    : x->joined < x->world_size ? "waiting"
                                                                : "training");
            json_end_object(j);
            continue;
        }
        if (x->async) snprintf(committed, sizeof committed, "async");
        else snprintf(committed, sizeof committed, "%" PRIu32 "/%" PRIu32, x->committed, x->world_size);
        if (c->nshards > 1) printf("%-22s ", c->shards[i].address);
        shown name, why;
        printf("%-24s %7" PRIu32 " %7" PRIu32 " %10" PRIu64 " %10" PRIu64 " %11s  %s%s%s\n", show(&name, x->job),
               x->world_size, x->joined, x->version, x->open_step, committed, state, failed ? ": " : "",
               failed ? show(&why, x->failure) : "");
    }
    if (c->json) json_end_array(j);
}

int cli_jobs(const cli *c)
{
    if (!c->json)
        printf("%s%-24s %7s %7s %10s %10s %11s  %s\n", c->nshards > 1 ? "SERVER                 " : "", "JOB", "WORLD",
               "JOINED", "VERSION", "OPEN_STEP", "COMMITTED", "STATE");
    Gradagg__V1__ListJobsRequest req = GRADAGG__V1__LIST_JOBS_REQUEST__INIT;
    return per_shard(c, NULL, GA_METHOD_LIST_JOBS, &req.base, jobs_show);
}

/* ---- status ---- */

typedef enum member_state {
    MEMBER_COMMITTED,
    MEMBER_LAGGING,
    MEMBER_IDLE,
    MEMBER_LEFT,
    MEMBER_MISSING,
    MEMBER_FREE
} member_state;
static const char *const member_state_names[] = {"committed", "lagging", "idle", "left", "missing", "free"};

/* A member of a sync job: committed to the open step, lagging (others committed to it, this
 * rank has not), idle (no rank has), left, missing (never joined), or free (an elastic job's
 * rank nobody took: not waited for). Async: idle when joined. */
static member_state member_state_of(const Gradagg__V1__StatusResponse *r, const Gradagg__V1__MemberStatus *m)
{
    if (m->incarnation == 0) return r->config && r->config->min_world_size ? MEMBER_FREE : MEMBER_MISSING;
    if (!m->joined) return MEMBER_LEFT;
    bool async = r->config && r->config->mode == GRADAGG__V1__MODE__MODE_ASYNC;
    if (async) return MEMBER_IDLE;
    if (m->has_pushed && m->last_step >= r->open_step) return MEMBER_COMMITTED;
    return r->committed > 0 ? MEMBER_LAGGING : MEMBER_IDLE;
}

static void ranks_in_state(const Gradagg__V1__StatusResponse *r, member_state want, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; i < r->n_members && n + 12 < cap; i++)
        if (member_state_of(r, r->members[i]) == want)
            n += (size_t)snprintf(out + n, cap - n, "%s%" PRIu32, n ? "," : "", r->members[i]->rank);
}

static void status_json(json *j, const Gradagg__V1__StatusResponse *r)
{
    bool async = r->config && r->config->mode == GRADAGG__V1__MODE__MODE_ASYNC;
    json_string(j, "job", r->job);
    json_string(j, "mode", async ? "async" : "sync");
    json_uint(j, "world_size", r->config ? r->config->world_size : r->n_members);
    json_uint(j, "version", r->version);
    json_uint(j, "open_step", r->open_step);
    json_uint(j, "committed", r->committed);
    json_uint(j, "steps", r->steps);
    json_bool(j, "finished", r->finished);
    json_string(j, "failure", r->failure);
    json_uint(j, "min_world_size", r->config ? r->config->min_world_size : 0);
    json_uint(j, "staleness", r->config ? r->config->staleness : 0);
    json_string(j, "waiting", r->waiting);
    json_begin_array(j, "recent_steps");
    for (size_t i = 0; i < r->n_recent_steps; i++) {
        json_begin_object(j, NULL);
        json_uint(j, "step", r->recent_steps[i]->step);
        json_begin_array(j, "ranks");
        for (size_t k = 0; k < r->recent_steps[i]->n_ranks; k++) json_uint(j, NULL, r->recent_steps[i]->ranks[k]);
        json_end_array(j);
        json_end_object(j);
    }
    json_end_array(j);
    json_begin_array(j, "members");
    for (size_t i = 0; i < r->n_members; i++) {
        const Gradagg__V1__MemberStatus *m = r->members[i];
        json_begin_object(j, NULL);
        json_uint(j, "rank", m->rank);
        json_uint(j, "incarnation", m->incarnation);
        json_bool(j, "joined", m->joined);
        json_bool(j, "has_pushed", m->has_pushed);
        json_uint(j, "last_step", m->last_step);
        json_string(j, "state", member_state_names[member_state_of(r, m)]);
        json_end_object(j);
    }
    json_end_array(j);
    static const struct { const char *key; member_state s; } lists[] = {{"lagging", MEMBER_LAGGING},
                                                                         {"missing", MEMBER_MISSING}};
    for (size_t l = 0; l < 2; l++) {
        json_begin_array(j, lists[l].key);
        for (size_t i = 0; i < r->n_members; i++)
            if (member_state_of(r, r->members[i]) == lists[l].s) json_uint(j, NULL, r->members[i]->rank);
        json_end_array(j);
    }
    json_begin_array(j, "tensors");
    for (size_t i = 0; i < r->n_tensors; i++) {
        json_begin_object(j, NULL);
        json_string(j, "name", r->tensors[i]->name);
        json_begin_array(j, "shape");
        for (size_t d = 0; d < r->tensors[i]->n_shape; d++) json_uint(j, NULL, r->tensors[i]->shape[d]);
        json_end_array(j);
        json_uint(j, "elements", r->tensors[i]->elements);
        json_end_object(j);
    }
    json_end_array(j);
    json_begin_array(j, "received");
    for (size_t i = 0; i < r->n_received; i++) {
        json_begin_object(j, NULL);
        json_string(j, "codec", ga_codec_name((ga_codec_id)r->received[i]->codec));
        json_uint(j, "bytes", r->received[i]->bytes);
        json_uint(j, "fp32_bytes", r->received[i]->fp32_bytes);
        json_end_object(j);
    }
    json_end_array(j);
    json_uint(j, "late_pushes", r->late_pushes);
    json_uint(j, "duplicate_pushes", r->duplicate_pushes);
    json_uint(j, "deadline_closes", r->deadline_closes);
    json_double(j, "accumulate_seconds", r->accumulate_seconds);
    json_double(j, "apply_seconds", r->apply_seconds);
}

static void status_table(const cli_shard *s, const Gradagg__V1__StatusResponse *r)
{
    bool async = r->config && r->config->mode == GRADAGG__V1__MODE__MODE_ASYNC;
    uint32_t world = r->config ? r->config->world_size : (uint32_t)r->n_members;
    shown text;
    printf("job %s on %s: %s, world %" PRIu32 ", version %" PRIu64 ", open step %" PRIu64, show(&text, r->job),
           s->address, async ? "async" : "sync", world, r->version, r->open_step);
    if (!async) printf(", committed %" PRIu32 "/%" PRIu32, r->committed, world);
    printf(", steps %" PRIu64 "%s\n", r->steps, r->finished ? ", finished" : "");
    if (r->failure && r->failure[0]) printf("failed: %s\n", show(&text, r->failure));
    if (r->config && r->config->min_world_size)
        printf("elastic: %" PRIu32 " to %" PRIu32 " ranks\n", r->config->min_world_size, world);
    if (r->config && r->config->staleness) printf("staleness: %" PRIu32 " steps\n", r->config->staleness);
    if (r->waiting && r->waiting[0]) printf("%s\n", show(&text, r->waiting));
    char lagging[256], missing[256];
    ranks_in_state(r, MEMBER_LAGGING, lagging, sizeof lagging);
    ranks_in_state(r, MEMBER_MISSING, missing, sizeof missing);
    printf("lagging ranks: %s; missing ranks: %s\n", lagging[0] ? lagging : "none", missing[0] ? missing : "none");
    printf("%6s %20s %7s %10s  %s\n", "RANK", "INCARNATION", "JOINED", "LAST_STEP", "STATE");
    for (size_t i = 0; i < r->n_members; i++) {
        const Gradagg__V1__MemberStatus *m = r->members[i];
        char last[24] = "-";
        if (m->has_pushed) snprintf(last, sizeof last, "%" PRIu64, m->last_step);
        printf("%6" PRIu32 " %20" PRIu64 " %7s %10s  %s\n", m->rank, m->incarnation, m->joined ? "yes" : "no", last,
               member_state_names[member_state_of(r, m)]);
    }
    uint64_t elements = 0;
    for (size_t i = 0; i < r->n_tensors; i++) elements += r->tensors[i]->elements;
    printf("tensors: %zu, %" PRIu64 " elements\n", r->n_tensors, elements);
    if (r->n_received) printf("%-12s %16s %16s %8s\n", "CODEC", "BYTES_RECEIVED", "AS_FP32", "RATIO");
    for (size_t i = 0; i < r->n_received; i++) {
        const Gradagg__V1__CodecBytes *b = r->received[i];
        printf("%-12s %16" PRIu64 " %16" PRIu64 " %8.2f\n", ga_codec_name((ga_codec_id)b->codec), b->bytes,
               b->fp32_bytes, b->bytes ? (double)b->fp32_bytes / (double)b->bytes : 0.0);
    }
    printf("pushes: late %" PRIu64 ", duplicate %" PRIu64 "; steps closed at the deadline: %" PRIu64 "\n",
           r->late_pushes, r->duplicate_pushes, r->deadline_closes);
    printf("server time: accumulate %.3f s, apply %.3f s\n", r->accumulate_seconds, r->apply_seconds);
}

static void status_show(const cli *c, const char *job, size_t i, const ProtobufCMessage *resp, json *j)
{
    (void)job;
    const Gradagg__V1__StatusResponse *r = (const Gradagg__V1__StatusResponse *)resp;
    if (!r) return;
    if (c->json) {
        status_json(j, r);
        return;
    }
    if (i > 0) printf("\n");
    status_table(&c->shards[i], r);
}

int cli_status(const cli *c, const char *job)
{
    Gradagg__V1__StatusRequest req = GRADAGG__V1__STATUS_REQUEST__INIT;
    req.job = (char *)job;
    return per_shard(c, job, GA_METHOD_STATUS, &req.base, status_show);
}

/* ---- delete ---- */

static void delete_show(const cli *c, const char *job, size_t i, const ProtobufCMessage *resp, json *j)
{
    if (c->json) json_bool(j, "deleted", resp != NULL);
    else if (resp) {
        shown name;
        printf("deleted job %s on %s\n", show(&name, job), c->shards[i].address);
    }
}

int cli_delete(const cli *c, const char *job)
{
    Gradagg__V1__DeleteJobRequest req = GRADAGG__V1__DELETE_JOB_REQUEST__INIT;
    req.job = (char *)job;
    return per_shard(c, job, GA_METHOD_DELETE_JOB, &req.base, delete_show);
}

/* ---- health ---- */

static const char *serving_name(int s)
{
    switch (s) {
    case GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING: return "SERVING";
    case GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING: return "NOT_SERVING";
    case GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN: return "SERVICE_UNKNOWN";
    default: return "UNKNOWN";
    }
}

int cli_health(const cli *c)
{
    static const char *const services[] = {"", "gradagg.v1.Aggregator"};
    int rc = CLI_OK;
    json j = {stdout, 0, {false}};
    if (c->json) {
        json_begin_object(&j, NULL);
        json_begin_array(&j, "shards");
    } else {
        printf("%-24s %-16s %s\n", "SERVER", "SERVER_STATUS", "AGGREGATOR_STATUS");
    }
    for (size_t i = 0; i < c->nshards; i++) {
        const cli_shard *s = &c->shards[i];
        const char *answer[2] = {"", ""};
        if (c->json) {
            json_begin_object(&j, NULL);
            json_string(&j, "server", s->address);
        }
        for (size_t k = 0; k < 2; k++) {
            Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
            req.service = (char *)services[k];
            ProtobufCMessage *m = NULL;
            ga_status st = call(c, s, GA_METHOD_HEALTH_CHECK, &req.base, &m, NULL);
            if (st != GA_OK) {
                answer[k] = ga_status_name(st);
                rc = worst(rc, cli_exit_for(st));
            } else {
                answer[k] = serving_name(((const Grpc__Health__V1__HealthCheckResponse *)m)->status);
                if (strcmp(answer[k], "SERVING") != 0) rc = worst(rc, CLI_REFUSED);
            }
            free_msg(m);
        }
        if (c->json) {
            json_string(&j, "status", answer[0]);
            json_string(&j, "aggregator", answer[1]);
            json_end_object(&j);
        } else {
            printf("%-24s %-16s %s\n", s->address, answer[0], answer[1]);
        }
    }
    if (c->json) {
        json_end_array(&j);
        json_end_object(&j);
        json_finish(&j);
    }
    return rc;
}
