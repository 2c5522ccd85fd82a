/* Failed ranks (docs/protocol.md, "Failed ranks"): a rank that leaves as failed, or whose lease
 * lapses (a joined rank that makes no call, waits in none and sends no Heartbeat for
 * rank_lost_ms), fails its job: every incarnation that was a member then gets
 * GA_E_RANK_FAILED, naming the rank and why, for its waiting calls at once and for every later
 * call (ga_job_member_check). A worker restarted as a new incarnation is a member as before,
 * so a launcher that restarts the ranks (torchrun) resumes the job. A job whose straggler policy
 * closes steps without some ranks (a deadline and a quorum below the world size) goes on
 * instead, without the rank, and says so in the log and the metrics. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "core_internal.h"
#include "ga_alloc.h"
#include "ga_wire.h"

/* Every incarnation that is a member now (and rank's, which may have just left) gets
 * GA_E_RANK_FAILED with text from now on, its waiting calls at once. */
static void fail_members(ga_job *job, uint32_t rank, const char *text)
{
    uint64_t *inc = job->failed_incarnations ? job->failed_incarnations : ga_calloc(job->world, sizeof *inc);
    if (!inc) { /* cannot tell the incarnations apart: the whole job refuses work from now on */
        ga_core_job_fault(job, GA_E_RANK_FAILED, "%s", text);
        return;
    }
    for (uint32_t r = 0; r < job->world; r++) {
        const ga_member *m = &job->members[r];
        if (m->incarnation != 0 && (!m->left || r == rank)) inc[r] = m->incarnation;
    }
    job->failed_incarnations = inc;
    snprintf(job->rank_failure, sizeof job->rank_failure, "%s", text);
    ga_log(GA_LOG_ERROR, "%s", job->rank_failure);
    /* Every waiting call is an incarnation's that was a member: each gets the failure now. */
    ga_core_pulls_end(job, GA_E_RANK_FAILED, job->rank_failure);
    ga_core_inits_end(job, GA_E_RANK_FAILED, job->rank_failure);
}

bool ga_core_rank_goes_on(const ga_job *job)
{
    return !job->async && (job->min_world > 0 || (job->deadline_ms > 0 && job->quorum < job->world));
}

bool ga_core_rank_failed(ga_job *job, uint32_t rank, bool lost, const char *what)
{
    if (rank >= job->world) return false;
    if (lost) job->ranks_lost++;
    else job->ranks_failed++;
    if (job->min_world > 0) { /* elastic: the rank is gone, as after a Leave */
        ga_log(GA_LOG_WARN, "job '%s': rank %u %s; the elastic job goes on without it", job->name, rank, what);
        return true;
    }
    if (ga_core_rank_goes_on(job)) { /* its steps close at the deadline without the rank */
        ga_log(GA_LOG_WARN, "job '%s': rank %u %s; the job goes on without it (deadline %u ms, quorum %u of %u)",
               job->name, rank, what, job->deadline_ms, job->quorum, job->world);
        return true;
    }
    char text[sizeof job->rank_failure];
    /* A relay's job names the worker's rank in the whole job, as the worker knows it. */
    uint32_t shown = job->uplink ? rank + job->relay_place.node * job->relay_place.workers : rank;
    snprintf(text, sizeof text, "job '%.60s' failed: rank %u %s", job->name, shown, what);
    fail_members(job, rank, text);
    ga_core_relay_leave(job);
    return false;
}

void ga_core_job_failed_upstream(ga_job *job, const char *why)
{
    if (job->failed_incarnations) return; /* failed already: that failure is the one reported */
    char text[sizeof job->rank_failure];
    snprintf(text, sizeof text, "job '%.60s' failed: upstream %s", job->name, ga_job_failure_cause(why));
    fail_members(job, UINT32_MAX, text);
}

void ga_core_rank_replaced(ga_job *job)
{
    if (!job->failed_incarnations) return;
    for (uint32_t r = 0; r < job->world; r++) {
        const ga_member *m = &job->members[r];
        if (job->failed_incarnations[r] != 0 && !m->left && m->incarnation == job->failed_incarnations[r]) return;
    }
    ga_log(GA_LOG_INFO, "job '%s': every incarnation that saw its failure is gone; it goes on (%s)", job->name,
           job->rank_failure);
    ga_free(job->failed_incarnations);
    job->failed_incarnations = NULL;
    ga_core_relay_resume(job);
}

/* ---- the lease ---- */

/* A rank of an elastic job was lost: it leaves, its open step goes on without it, and the job
 * does not count as finished until its rank is taken again. Journaled first (a restart must
 * not wait for it); when the journal cannot take it, the next sweep tries again. */
static void elastic_lost(ga_job *job, uint32_t rank, const char *what)
{
    ga_member *m = &job->members[rank];
    char why[GA_WHY_CAP];
    ga_journal_member change = {rank, 2, m->incarnation};
    if (ga_persist_member(job, &change, why) != GA_OK) {
        ga_log(GA_LOG_ERROR, "job '%s': rank %u %s, but the journal cannot record it (%s): tried again", job->name,
               rank, what, why);
        return;
    }
    m->lost = m->incarnation;
    m->failed_left = true;
    job->last_leave_clean = false;
    ga_core_rank_failed(job, rank, true, what); /* logs and counts it */
    ga_core_member_gone(job, rank);
}

#define RESTORED_LEASE_MS 30000u

/* A server that received no bundle over a whole sweep period and holds none gives the heap's
 * free memory back, at every such sweep (base/heap.h: while it works, the arenas keep what a step
 * freed for the next). Not once per idle spell: what is freed later in it (a finished job removed,
 * gRPC's buffers of closed connections) goes back too, and a heap with nothing to give back costs
 * one walk of its free chunks. */
static void heap_idle(ga_core *c)
{
    if (c->adopted != c->adopted_swept) {
        c->adopted_swept = c->adopted;
        return;
    }
    if (!c->held_bytes) ga_heap_release();
}

static void sweep(uv_timer_t *timer)
{
    ga_core *c = timer->data;
    if (c->draining) return;
    heap_idle(c);
    ga_core_jobs_expire(c);
    uint64_t now = uv_now(c->loop), lease = c->opt.rank_lost_ms;
    /* A member restored at start-up keeps its rank until its worker reconnected: at least
     * RESTORED_LEASE_MS, whatever the lease (its channel's reconnection waits come first). */
    uint64_t restored = lease > RESTORED_LEASE_MS ? lease : RESTORED_LEASE_MS;
    for (size_t i = 0; i < c->njobs; i++) {
        ga_job *job = c->jobs[i];
        ga_core_pulls_reclaim(job, false);
        if (job->fault != GA_OK) continue;
        for (uint32_t r = 0; r < job->world; r++) {
            ga_member *m = &job->members[r];
            uint64_t limit = m->unseen ? restored : lease;
            if (m->incarnation == 0 || m->left || ga_member_waiting(m) || now - m->active_ms <= limit) continue;
            if (job->failed_incarnations && job->failed_incarnations[r] == m->incarnation) continue; /* told */
            if (m->lost == m->incarnation) continue; /* reported once (a job that goes on without it) */
            char what[200];
            snprintf(what, sizeof what,
                     "lost: incarnation %" PRIu64 " made no call and sent no heartbeat for %" PRIu64
                     " ms (--rank-lost-ms %" PRIu64 "%s)",
                     m->incarnation, now - m->active_ms, limit, m->unseen ? " since the server restarted" : "");
            if (job->min_world > 0) {
                elastic_lost(job, r, what);
                continue;
            }
            m->lost = m->incarnation;
            ga_core_rank_failed(job, r, true, what);
        }
    }
}

ga_status ga_core_lease_start(ga_core *c)
{
    uv_timer_t *t = ga_calloc(1, sizeof *t);
    if (!t) return GA_E_NOMEM;
    uv_timer_init(c->loop, t);
    t->data = c;
    uint64_t period = c->opt.rank_lost_ms / 4 ? c->opt.rank_lost_ms / 4 : 1;
    uv_timer_start(t, sweep, period, period);
    uv_unref((uv_handle_t *)t); /* the sweep alone does not keep the loop running */
    c->lease_timer = t;
    return GA_OK;
}

static void lease_timer_closed(uv_handle_t *h) { ga_free(h); }

void ga_core_lease_stop(ga_core *c)
{
    if (!c->lease_timer) return;
    uv_timer_stop(c->lease_timer);
    uv_close((uv_handle_t *)c->lease_timer, lease_timer_closed);
    c->lease_timer = NULL;
}

/* ---- Heartbeat ---- */

void ga_core_heartbeat(ga_core *c, ga_call *call, Gradagg__V1__HeartbeatRequest *req)
{
    char why[GA_WHY_CAP];
    ga_status st = GA_OK;
    ga_job *job = ga_core_job_named(c, req->job, &st, why);
    if (job && job->fault != GA_OK) {
        st = job->fault;
        snprintf(why, sizeof why, "%s", job->fault_why);
    } else if (job && (st = ga_job_member_check(job, req->rank, req->incarnation, why, sizeof why)) == GA_OK) {
        ga_core_touch(c, job, req->rank);
    }
    if (st == GA_OK) {
        Gradagg__V1__HeartbeatResponse resp = GRADAGG__V1__HEARTBEAT_RESPONSE__INIT;
        ga_call_finish(call, &resp.base, GA_OK, NULL);
    } else {
        ga_call_finish(call, NULL, st, "%s", why);
    }
    protobuf_c_message_free_unpacked(&req->base, &ga_wire_allocator);
}
