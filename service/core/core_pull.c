/* Pulls: answered at once when the version exists and no apply is queued, parked until the next
 * version is published otherwise; answers stream every tensor piece by piece straight from the
 * published blobs. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core_internal.h"
#include "ga_alloc.h"
#include "ga_wire.h"

/* Streams the job's current version to call, then finishes it. A piece goes as a delta when the
 * worker holds the version before and the job publishes deltas; otherwise as fp32. Each send
 * hands the call a reference of its own to the blob, released once the bytes are out. */
static void remember_sending(ga_job *job, ga_call *call, uint64_t version);

static void answer(ga_job *job, ga_call *call, uint32_t rank, bool has_version, uint64_t have_version)
{
    uint64_t v = job->version;
    if (rank < job->world) { /* what its next push is computed from (SSP staleness) */
        job->members[rank].has_pulled = true;
        job->members[rank].pulled_version = v;
    }
    bool delta = has_version && v >= 1 && have_version == v - 1;
    size_t pe = job->store_cfg.piece_elems;
    Gradagg__V1__Codec codec;
    for (size_t i = 0; i < job->ntensors; i++) {
        const ga_tensor *t = &job->tensors[i];
        if (!t->ready) continue;
        const ga_published *p = &t->pub;
        /* A relay's pieces are the upstream's (store.h); the store's are uniform. */
        bool relayed = p->piece_at != NULL;
        size_t n = (size_t)t->elements, pieces = relayed ? p->npieces : (n + pe - 1) / pe;
        bool as_delta = delta && (relayed || job->store_cfg.pull_codec != GA_CODEC_NONE) && p->delta && p->delta_off &&
                        p->npieces == pieces;
        if (as_delta && !relayed) ga_codec_to_wire(job->store_cfg.pull_codec, &job->store_cfg.pull_params, &codec);
        for (size_t k = 0; k < pieces; k++) {
            Gradagg__V1__PullChunk chunk = GRADAGG__V1__PULL_CHUNK__INIT;
            size_t off = relayed ? p->piece_at[k] : k * pe;
            size_t count = relayed ? p->piece_at[k + 1] - off : (n - off < pe ? n - off : pe);
            chunk.version = v;
            chunk.tensor = t->name;
            chunk.offset = off;
            chunk.count = count;
            if (as_delta) {
                chunk.kind = GRADAGG__V1__PULL_KIND__PULL_DELTA;
                if (relayed)
                    ga_codec_to_wire(p->delta_codec, &p->delta_params[k], &codec); /* as the upstream sent it */
                else if (p->delta_level)
                    codec.threshold = p->delta_level[k]; /* the automatic pull threshold */
                chunk.codec = &codec;
                chunk.base_version = v - 1;
                ga_call_send(call, &chunk.base, ga_blob_ref(p->delta), p->delta_off[k],
                             p->delta_off[k + 1] - p->delta_off[k]);
            } else {
                chunk.kind = GRADAGG__V1__PULL_KIND__PULL_FULL;
                ga_call_send(call, &chunk.base, ga_blob_ref(p->full), 4 * off, 4 * count);
            }
        }
    }
    remember_sending(job, call, v);
    ga_call_finish(call, NULL, GA_OK, NULL);
}

/* Holds an answered call while its messages may still go out, so that a full server can end it
 * (ga_core_pulls_reclaim). Without memory for the entry the call is simply not tracked. */
static void remember_sending(ga_job *job, ga_call *call, uint64_t version)
{
    if (!call) return;
    if (job->nsending == job->sending_cap) {
        size_t ncap = job->sending_cap ? 2 * job->sending_cap : 8;
        struct ga_sending_pull *n = ga_malloc(ncap * sizeof *n);
        if (!n) return;
        if (job->nsending) memcpy(n, job->sending, job->nsending * sizeof *n);
        ga_free(job->sending);
        job->sending = n, job->sending_cap = ncap;
    }
    ga_call_hold(call);
    job->sending[job->nsending++] = (struct ga_sending_pull){call, version};
}

void ga_core_pulls_reclaim(ga_job *job, bool full)
{
    ga_core *c = job->core;
    size_t kept = 0;
    for (size_t i = 0; i < job->nsending; i++) {
        struct ga_sending_pull p = job->sending[i];
        if (!ga_call_sending(p.call)) {
            ga_call_release(p.call);
        } else if (p.version < job->version && (full || ga_core_bytes(c) > c->opt.max_memory_bytes)) {
            ga_call_cancel(p.call, GA_E_BUSY,
                           "this pull was still sending a superseded version, and the server needs the memory it "
                           "pinned (--max-memory-mb): pull again");
            ga_call_release(p.call);
            c->pulls_reclaimed++;
        } else {
            job->sending[kept++] = p;
        }
    }
    job->nsending = kept;
}

/* An apply is queued or running: it may rewrite the current blobs in place (store.h
 * ga_store_apply_in_place), so no pull may take a reference to them until its apply_done,
 * which publishes and then answers what waited (ga_core_pulls_serve). The task queue starts
 * the next task only after that done returns, so answers from a done callback are safe. */
static bool apply_queued(const ga_job *job)
{
    return job->target > job->version;
}

static void unlink_wait(ga_pull_wait *w)
{
    ga_job *job = w->job;
    if (w->prev)
        w->prev->next = w->next;
    else
        job->pulls = w->next;
    if (w->next) w->next->prev = w->prev;
    if (w->rank < job->world && job->members[w->rank].pulls_waiting) job->members[w->rank].pulls_waiting--;
    /* A worker that waited was active until now. */
    job->members[w->rank].active_ms = uv_now(job->core->loop);
}

void ga_core_pulls_serve(ga_job *job)
{
    for (ga_pull_wait *w = job->pulls, *next; w; w = next) {
        next = w->next;
        if (w->min_version > job->version) continue;
        unlink_wait(w);
        answer(job, w->call, w->rank, w->has_version, w->have_version);
        ga_free(w);
    }
}

void ga_core_pulls_end(ga_job *job, ga_status st, const char *why)
{
    /* A fault may come while an apply is queued (not from its done): answering would reference
     * blobs it may be rewriting, so then every waiting pull gets st. */
    bool answerable = !apply_queued(job);
    for (ga_pull_wait *w = job->pulls, *next; w; w = next) {
        next = w->next;
        unlink_wait(w);
        if (answerable && w->min_version <= job->version)
            answer(job, w->call, w->rank, w->has_version, w->have_version);
        else
            ga_call_finish(w->call, NULL, st, "%s", why);
        ga_free(w);
    }
}

bool ga_core_pull_cancel(ga_core *c, ga_call *call)
{
    for (size_t i = 0; i < c->njobs; i++)
        for (ga_pull_wait *w = c->jobs[i]->pulls; w; w = w->next)
            if (w->call == call) {
                unlink_wait(w);
                ga_call_finish(call, NULL, GA_E_CANCELLED, "the client went away while waiting for version %" PRIu64,
                               w->min_version);
                ga_free(w);
                return true;
            }
    return false;
}

void ga_core_pull(ga_core *c, ga_call *call, Gradagg__V1__PullRequest *req)
{
    char why[GA_WHY_CAP];
    ga_status st;
    ga_job *job = ga_core_job(c, req->job);
    if (!job) {
        st = GA_E_UNKNOWN_JOB;
        snprintf(why, sizeof why, "job '%s' does not exist (the first Join creates it)", req->job ? req->job : "");
        goto refuse;
    }
    GA_CHECK_GOTO(ga_job_member_check(job, req->rank, req->incarnation, why, sizeof why), st, refuse);
    ga_core_touch(c, job, req->rank);
    if (job->fault != GA_OK) {
        st = job->fault;
        snprintf(why, sizeof why, "%s", job->fault_why);
        goto refuse;
    }
    if (req->min_version <= job->version && !apply_queued(job)) {
        answer(job, call, req->rank, req->has_version, req->have_version);
        goto free;
    }
    /* Queued work may already promise later versions than the next one (async commits, or a
     * sync step closing while the next one fills). */
    uint64_t promised = job->target > job->version ? job->target : job->version;
    /* A pull parked for a version that exists (apply_queued) gets the next one: a drain lets the
     * queued applies finish, and min_version <= promised. */
    if (c->draining && req->min_version > promised) {
        st = GA_E_DRAINING;
        snprintf(why, sizeof why, "the server is shutting down: version %" PRIu64 " of job '%s' will not be published",
                 req->min_version, job->name);
        goto refuse;
    }
    if (req->min_version > promised + 1) {
        st = GA_E_VERSION;
        snprintf(why, sizeof why,
                 "min_version %" PRIu64 " of job '%s' is beyond the next version (%" PRIu64 " is published)",
                 req->min_version, job->name, job->version);
        goto refuse;
    }
    ga_pull_wait *w = ga_calloc(1, sizeof *w);
    if (!w) {
        st = GA_E_NOMEM;
        snprintf(why, sizeof why, "out of memory parking a pull");
        goto refuse;
    }
    *w = (ga_pull_wait){call, job, req->rank, req->min_version, req->has_version != 0, req->have_version, NULL, NULL};
    /* Appended: pulls are answered oldest first. */
    ga_pull_wait **tail = &job->pulls, *prev = NULL;
    while (*tail) prev = *tail, tail = &(*tail)->next;
    w->prev = prev;
    *tail = w;
    job->members[req->rank].pulls_waiting++;
    goto free;
refuse:
    ga_call_finish(call, NULL, st, "%s", why);
free:
    protobuf_c_message_free_unpacked(&req->base, &ga_wire_allocator);
}
