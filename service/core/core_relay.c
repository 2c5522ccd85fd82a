/* A node relay's jobs (relay.h, docs/relay.md): the local job sums its workers' pushes (a REDUCE
 * store without mean), and its uplink (uplink.h) takes each step's sums upstream and brings the
 * upstream version back, which the job publishes to its workers as its own. Loop thread. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "core_internal.h"
#include "ga_alloc.h"
#include "ga_wire.h"
#include "relay.h"
#include "uplink.h"

static void uplink_done(void *arg, const ga_uplink_result *res);
static void hand_sums(ga_job *job);
static void sums_release(ga_job *job);
static bool publish_values(ga_job *job, const ga_uplink_result *res, bool deltas);

ga_status ga_core_relay_attach(ga_job *job, ga_call *call, const Gradagg__V1__JoinRequest *req, char *why)
{
    /* The job's upstream calls carry the bearer token of the Join that created it here (one
     * authorization entry; none otherwise). */
    const char *value, *token = NULL;
    size_t len, token_len = 0;
    if (ga_call_metadata(call, GA_WIRE_AUTH_KEY, &value, &len) != 1 || !ga_wire_bearer(value, len, &token, &token_len))
        token = NULL, token_len = 0;
    return ga_uplink_create(job->core->opt.relay, &job->relay_place, job->name, req->config, req->resume, token,
                            token_len, job->core->loop, uplink_done, job, &job->uplink, why, GA_WHY_CAP);
}

/* ---- ranks ---- */

ga_status ga_core_relay_map_rank(ga_core *c, const char *name, uint32_t *rank, char *why, size_t cap)
{
    ga_job *job = ga_core_job(c, name);
    return job && job->uplink ? ga_relay_map_rank(&job->relay_place, rank, why, cap) : GA_OK;
}

ga_status ga_core_relay_map(ga_core *c, ga_method_id m, void *payload, char *why, size_t cap)
{
    switch (m) {
    case GA_METHOD_JOIN: {
        Gradagg__V1__JoinRequest *q = payload;
        if (q->any_rank)
            return ga_status_fail(GA_E_CONFIG, why, cap,
                                  "a relay does not pick ranks: an elastic job does not pass a relay (docs/relay.md)");
        ga_job *job = q->job ? ga_core_job(c, q->job) : NULL;
        if (job && job->uplink)
            c->relay_join_place = job->relay_place;
        else if (q->config)
            GA_CHECK(ga_relay_place_of(c->opt.relay, q->rank, q->config->world_size, &c->relay_join_place, why, cap));
        else
            return GA_OK; /* the Join is refused for its missing config */
        return ga_relay_map_rank(&c->relay_join_place, &q->rank, why, cap);
    }
    case GA_METHOD_LEAVE: {
        Gradagg__V1__LeaveRequest *q = payload;
        return ga_core_relay_map_rank(c, q->job, &q->rank, why, cap);
    }
    case GA_METHOD_PULL: {
        Gradagg__V1__PullRequest *q = payload;
        return ga_core_relay_map_rank(c, q->job, &q->rank, why, cap);
    }
    case GA_METHOD_HEARTBEAT: {
        Gradagg__V1__HeartbeatRequest *q = payload;
        return ga_core_relay_map_rank(c, q->job, &q->rank, why, cap);
    }
    case GA_METHOD_PUSH: {
        ga_push *push = payload;
        return ga_core_relay_map_rank(c, push->job, &push->rank, why, cap);
    }
    case GA_METHOD_INIT: {
        ga_init *init = payload;
        return ga_core_relay_map_rank(c, init->job, &init->rank, why, cap);
    }
    default: return GA_OK;
    }
}

/* ---- init ---- */

/* The tensors an init names, in the order it first names them, and (with values) each one's
 * values assembled from its chunks (check_init checked that they cover it once). */
typedef struct init_specs {
    ga_uplink_tensor *t;
    float **values;
    size_t n;
} init_specs;

static void specs_free(init_specs *s)
{
    for (size_t i = 0; s->values && i < s->n; i++) ga_free(s->values[i]);
    ga_free(s->values), ga_free(s->t);
}

static long spec_find(const init_specs *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->t[i].name, name) == 0) return (long)i;
    return -1;
}

static ga_status specs_of(const ga_init *init, bool values, init_specs *s)
{
    *s = (init_specs){ga_calloc(init->count + 1, sizeof *s->t), NULL, 0};
    if (!s->t) return GA_E_NOMEM;
    for (size_t i = 0; i < init->count; i++) {
        const Gradagg__V1__InitChunk *ch = init->parts[i].chunk;
        if (spec_find(s, ch->tensor) >= 0) continue;
        uint64_t n = 1;
        for (size_t d = 0; d < ch->n_shape; d++) n *= ch->shape[d];
        s->t[s->n++] = (ga_uplink_tensor){ch->tensor, ch->shape, ch->n_shape, n};
    }
    if (!values) return GA_OK;
    if (!(s->values = ga_calloc(s->n + 1, sizeof *s->values))) return GA_E_NOMEM;
    for (size_t i = 0; i < s->n; i++)
        if (!(s->values[i] = ga_calloc(s->t[i].elements ? s->t[i].elements : 1, sizeof(float)))) return GA_E_NOMEM;
    for (size_t i = 0; i < init->count; i++) {
        const Gradagg__V1__InitChunk *ch = init->parts[i].chunk;
        if (ch->values.len) memcpy(s->values[spec_find(s, ch->tensor)] + ch->offset, ch->values.data, ch->values.len);
    }
    return GA_OK;
}

/* Starts the upstream init with the tensors of `init`, registering them in the job. */
static ga_status start_upstream(ga_job *job, const ga_init *init, char *why)
{
    bool values = job->relay_place.node == 0;
    init_specs s;
    ga_status st = specs_of(init, values, &s);
    for (size_t i = 0; st == GA_OK && i < s.n; i++)
        if (ga_job_tensor_add(job, s.t[i].name, s.t[i].shape, s.t[i].ndim, s.t[i].elements) < 0) st = GA_E_NOMEM;
    if (st == GA_OK) st = ga_uplink_init(job->uplink, s.t, s.n, values ? (const float *const *)s.values : NULL);
    specs_free(&s);
    if (st != GA_OK) {
        ga_job_tensor_truncate(job, 0);
        snprintf(why, GA_WHY_CAP, "job '%s': starting the upstream init: %s", job->name, ga_strerror(st));
        return st;
    }
    job->relay_started = true;
    return GA_OK;
}

void ga_core_relay_init(ga_job *job, ga_call *call, ga_init *init)
{
    /* Node 0 holds the job's rank 0, whose init carries the values the upstream job starts from;
     * the other nodes await them upstream, so any init of theirs names the tensors. */
    bool starts = !job->relay_started && (job->relay_place.node != 0 || !init->await_values);
    if (starts) {
        char why[GA_WHY_CAP];
        ga_status st = start_upstream(job, init, why);
        if (st != GA_OK) {
            ga_call_finish(call, NULL, st, "%s", why);
            ga_init_free(init);
            return;
        }
    }
    ga_core_init_park(job, call, init);
}

/* The upstream version of the tensors: created in the store as their initial values. */
typedef struct create_task {
    ga_task t;
    ga_job *job;
    float *const *values; /* the uplink's: unchanged until its next command, which waits for this */
    uint64_t version;
    bool counted;
    uint64_t counted_step;
    ga_published *pubs;
    size_t created;
    ga_status rc;
} create_task;

static void create_work(ga_task *t)
{
    create_task *ct = (create_task *)t;
    ga_job *job = ct->job;
    ct->rc = GA_OK;
    for (size_t i = 0; i < job->ntensors && ct->rc == GA_OK; i++) {
        uint32_t index;
        ct->rc = ga_store_add_tensor(job->store, (size_t)job->tensors[i].elements, ct->values[i], &index, &ct->pubs[i]);
        if (ct->rc == GA_OK) ct->created = i + 1;
    }
}

static void create_done(ga_task *t)
{
    create_task *ct = (create_task *)t;
    ga_job *job = ct->job;
    for (size_t i = 0; i < ct->created; i++) {
        job->tensors[i].pub = ct->pubs[i];
        job->tensors[i].ready = true;
    }
    job->store_bytes = ga_store_bytes(job->store);
    if (ct->rc != GA_OK) {
        ga_core_job_fault(job, ct->rc, "creating the upstream version's tensors: %s", ga_strerror(ct->rc));
    } else {
        job->version = job->target = ct->version;
        ga_step_open(&job->step, ct->version);
        job->relay_first_step = ct->version;
        job->relay_counted = ct->counted;
        job->relay_counted_step = ct->counted_step;
        job->relay_ready = true;
        ga_log(GA_LOG_INFO, "job '%s': relayed from version %" PRIu64 " upstream (%zu tensors)", job->name,
               ct->version, job->ntensors);
        ga_core_inits_wake(job->core, job);
        ga_core_pulls_serve(job);
    }
    ga_free(ct->pubs);
    ga_free(ct);
}

/* A job that joined upstream again (ga_core_relay_resume): its tensors take the upstream's
 * version, which the node's workers get once their inits are answered. That version is the
 * node's, or the one after it when the step whose sums the node holds closed upstream (counted
 * this member's push) but the failure reached the node before the version did: then it is that
 * step's result, and the sums are let go. */
static void rejoined(ga_job *job, const ga_uplink_result *res)
{
    bool held_step_closed = job->relay_sums && job->relay_step == job->version && res->version == job->version + 1 &&
                            res->counted && res->counted_step == job->relay_step;
    if (res->version != job->version && !held_step_closed) {
        ga_core_job_fault(job, GA_E_VERSION,
                          "joined upstream again at version %" PRIu64 ", but this node holds version %" PRIu64
                          ": the upstream job went on without it",
                          res->version, job->version);
        return;
    }
    if (held_step_closed) sums_release(job);
    if (!publish_values(job, res, false)) return;
    if (held_step_closed) {
        ga_log(GA_LOG_INFO, "job '%s': upstream closed step %" PRIu64 " with this node's sums before it failed",
               job->name, job->version);
        job->version = res->version;
        job->steps++;
    }
    job->relay_ready = true;
    ga_log(GA_LOG_INFO, "job '%s': relayed again from version %" PRIu64, job->name, job->version);
    if (job->relay_sums) hand_sums(job); /* the step the failure interrupted */
    ga_core_inits_wake(job->core, job);
    ga_core_pulls_serve(job);
}

static void init_returned(ga_job *job, const ga_uplink_result *res)
{
    if (job->ntensors && job->tensors[0].ready) {
        rejoined(job, res);
        return;
    }
    create_task *ct = ga_calloc(1, sizeof *ct);
    ga_published *pubs = ga_calloc(job->ntensors + 1, sizeof *pubs);
    if (!ct || !pubs) {
        ga_free(ct), ga_free(pubs);
        ga_core_job_fault(job, GA_E_NOMEM, "out of memory taking the upstream version");
        return;
    }
    *ct = (create_task){.job = job, .values = res->params, .version = res->version, .counted = res->counted,
                        .counted_step = res->counted_step, .pubs = pubs};
    ct->t.work = create_work;
    ct->t.done = create_done;
    ga_taskq_push(&job->tasks, &ct->t);
}

/* ---- steps ---- */

bool ga_core_relay_counted(const ga_job *job, uint64_t step)
{
    return job->uplink && step < job->relay_first_step && job->relay_counted && step <= job->relay_counted_step;
}

/* Hands the held sums of step job->relay_step to the uplink. */
static void hand_sums(ga_job *job)
{
    job->relay_handed_ns = uv_hrtime();
    ga_status st = ga_uplink_step(job->uplink, job->relay_step, job->relay_weight, job->relay_ptrs);
    if (st != GA_OK) ga_core_job_fault(job, st, "relaying step %" PRIu64 " upstream: %s", job->relay_step,
                                       ga_strerror(st));
}

void ga_core_relay_step(ga_job *job, uint64_t step, uint32_t weight, ga_published *out, size_t n, uint64_t start_ns)
{
    const float **ptrs = ga_calloc(n + 1, sizeof *ptrs);
    ga_status st = ptrs ? GA_OK : GA_E_NOMEM;
    if (st == GA_OK && job->relay_sums) st = GA_E_INVAL; /* the workers pull before they push: never */
    if (st != GA_OK) {
        for (size_t i = 0; i < n; i++) ga_published_clear(&out[i]);
        ga_free(out), ga_free(ptrs);
        ga_core_job_fault(job, st, "relaying step %" PRIu64 " upstream: %s", step, ga_strerror(st));
        return;
    }
    for (size_t i = 0; i < n; i++) ptrs[i] = (const float *)out[i].full->data;
    job->relay_sums = out;
    job->relay_nsums = n;
    job->relay_ptrs = ptrs;
    job->relay_step = step;
    job->relay_weight = weight;
    job->relay_step_start_ns = start_ns;
    /* A member that left (its job failed upstream) takes them once it has joined again. */
    if (!ga_uplink_departed(job->uplink)) hand_sums(job);
}

static void sums_release(ga_job *job)
{
    for (size_t i = 0; i < job->relay_nsums; i++) ga_published_clear(&job->relay_sums[i]);
    ga_free(job->relay_sums), ga_free(job->relay_ptrs);
    job->relay_sums = NULL;
    job->relay_ptrs = NULL;
    job->relay_nsums = 0;
}

static int delta_order(const void *x, const void *y)
{
    const ga_pull_delta *a = *(const ga_pull_delta *const *)x, *b = *(const ga_pull_delta *const *)y;
    return a->offset < b->offset ? -1 : a->offset > b->offset;
}

/* The upstream's deltas of tensor i, taking it from the job's version to res->version, as
 * pieces of pub (store.h: piece_at, delta_params), so a worker that holds the job's version
 * gets them byte for byte. Nothing when they do not cover the tensor once in one codec (it came
 * as fp32, a copy failed): the worker then gets fp32. Out of memory: the same. */
static void pass_deltas(const ga_job *job, const ga_uplink_result *res, size_t i, ga_published *pub)
{
    size_t nd = res->ndeltas[i], n = (size_t)job->tensors[i].elements, bytes = 0, at = 0;
    if (nd == 0) return;
    const ga_pull_delta **d = ga_malloc(nd * sizeof *d);
    if (!d) return;
    for (size_t k = 0; k < nd; k++) d[k] = &res->deltas[i][k];
    qsort(d, nd, sizeof *d, delta_order);
    for (size_t k = 0; k < nd; k++) {
        if (d[k]->offset != at || d[k]->version != res->version || d[k]->base_version != job->version ||
            d[k]->codec != d[0]->codec) {
            ga_free(d);
            return;
        }
        at += (size_t)d[k]->count;
        bytes += d[k]->len;
    }
    pub->piece_at = at == n ? ga_malloc((nd + 1) * sizeof *pub->piece_at) : NULL;
    pub->delta_off = pub->piece_at ? ga_malloc((nd + 1) * sizeof *pub->delta_off) : NULL;
    pub->delta_params = pub->delta_off ? ga_malloc(nd * sizeof *pub->delta_params) : NULL;
    pub->delta = pub->delta_params ? ga_blob_create(bytes ? bytes : 4) : NULL;
    if (!pub->delta) {
        ga_free(pub->piece_at), ga_free(pub->delta_off), ga_free(pub->delta_params);
        pub->piece_at = pub->delta_off = NULL;
        pub->delta_params = NULL;
        ga_free(d);
        return;
    }
    size_t off = 0;
    for (size_t k = 0; k < nd; k++) {
        pub->piece_at[k] = (size_t)d[k]->offset;
        pub->delta_off[k] = off;
        pub->delta_params[k] = d[k]->params;
        memcpy(pub->delta->data + off, d[k]->payload, d[k]->len);
        off += d[k]->len;
    }
    pub->delta_off[nd] = off;
    pub->piece_at[nd] = n;
    pub->npieces = nd;
    pub->delta_codec = d[0]->codec;
    ga_free(d);
}

/* The upstream's values (res->params) published as the job's, with the upstream's delta pieces
 * passed on when `deltas`. Each tensor's values go into the blob it publishes now when nothing
 * else holds that blob (no pull is sending it; only the loop, which runs this, hands out
 * references), else into a new one: a relay's versions then land in pages already in memory,
 * where a new blob every version cost a relay most of its CPU in first-touch page faults.
 * Every blob is had before any value is written. False (the job failed) out of memory. */
static bool publish_values(ga_job *job, const ga_uplink_result *res, bool deltas)
{
    ga_blob **full = ga_calloc(job->ntensors + 1, sizeof *full);
    size_t had = 0;
    for (; full && had < job->ntensors; had++) {
        size_t bytes = (size_t)job->tensors[had].elements * sizeof(float);
        ga_blob *now = job->tensors[had].pub.full;
        full[had] = now && now->size == bytes && ga_blob_refs(now) == 1 ? ga_blob_ref(now) : ga_blob_create(bytes);
        if (!full[had]) break;
    }
    if (!full || had < job->ntensors) {
        for (size_t i = 0; full && i < had; i++) ga_blob_unref(full[i]);
        ga_free(full);
        ga_core_job_fault(job, GA_E_NOMEM, "out of memory taking upstream version %" PRIu64, res->version);
        return false;
    }
    for (size_t i = 0; i < job->ntensors; i++) {
        memcpy(full[i]->data, res->params[i], full[i]->size);
        ga_published next = {.full = full[i]};
        if (deltas) pass_deltas(job, res, i, &next);
        ga_published *old = &job->tensors[i].pub;
        if (old->full != next.full) ga_blob_retire(old->full, &job->core->pinned);
        if (old->delta) ga_blob_retire(old->delta, &job->core->pinned);
        ga_published_clear(old);
        *old = next;
    }
    ga_free(full);
    job->store_bytes = ga_store_bytes(job->store);
    return true;
}

/* The upstream's next version, published as the job's. */
static void step_returned(ga_job *job, const ga_uplink_result *res)
{
    if (!publish_values(job, res, true)) return;
    job->version = res->version;
    job->steps++;
    ga_histogram_observe(&job->relay_upstream_seconds, (double)(uv_hrtime() - job->relay_handed_ns) * 1e-9);
    job->relay_pushed_bytes += res->bytes_pushed;
    job->relay_pulled_bytes += res->bytes_pulled;
    if (job->relay_step_start_ns)
        ga_histogram_observe(&job->step_seconds, (double)(uv_hrtime() - job->relay_step_start_ns) * 1e-9);
    ga_core_pulls_serve(job);
    ga_core_pulls_reclaim(job, false);
}

static void uplink_done(void *arg, const ga_uplink_result *res)
{
    ga_job *job = arg;
    bool step = res->step;
    if (res->st == GA_E_RANK_FAILED) {
        /* The upstream job failed (a rank of another node, or its relay): as a rank failure
         * here, which restarting the node's workers gets over, as on a server; this member saw
         * the failure, so it leaves (the upstream job goes on once every such member has). A
         * step's sums stay held: the upstream did not count them, and the member pushes them
         * once it has joined again (the workers' pushes again of that step are duplicates). */
        ga_core_job_failed_upstream(job, res->why);
        ga_uplink_leave(job->uplink, false, NULL);
        return;
    }
    if (res->st != GA_OK) {
        if (step) sums_release(job);
        ga_core_job_fault(job, res->st, "%s", res->why);
        ga_core_relay_leave(job);
        return;
    }
    if (step) {
        sums_release(job);
        if (job->fault == GA_OK) step_returned(job, res);
    } else if (job->fault == GA_OK) {
        init_returned(job, res);
    }
}

/* ---- the end ---- */

void ga_core_relay_leave(ga_job *job)
{
    if (!job->uplink || ga_uplink_departed(job->uplink)) return;
    const char *failure = job->fault != GA_OK ? job->fault_why : job->failed_incarnations ? job->rank_failure : NULL;
    if (failure)
        ga_uplink_leave(job->uplink, true, ga_job_failure_cause(failure)); /* the upstream names the job */
    else if (job->finished_ms)
        ga_uplink_leave(job->uplink, false, NULL);
}

void ga_core_relay_resume(ga_job *job)
{
    if (!job->uplink || !ga_uplink_departed(job->uplink) || job->fault != GA_OK || job->finished_ms) return;
    /* Node 0 offers the values its workers hold, as its first init did (a no-op upstream, where
     * the tensors exist); the others await. */
    const float **values = job->relay_place.node == 0 ? ga_calloc(job->ntensors + 1, sizeof *values) : NULL;
    for (size_t i = 0; values && i < job->ntensors; i++) values[i] = (const float *)job->tensors[i].pub.full->data;
    ga_status st = job->relay_place.node == 0 && !values ? GA_E_NOMEM
                                                         : ga_uplink_rejoin(job->uplink, (const float *const *)values);
    ga_free(values);
    if (st != GA_OK) {
        ga_core_job_fault(job, st, "joining upstream again: %s", ga_strerror(st));
        return;
    }
    job->relay_ready = false; /* inits wait for the upstream version */
    ga_log(GA_LOG_INFO, "job '%s': every worker that saw the failure was replaced; joining upstream again", job->name);
}

void ga_core_relay_detach(ga_job *job)
{
    if (!job->uplink) return;
    ga_uplink_destroy(job->uplink);
    job->uplink = NULL;
    sums_release(job);
}
