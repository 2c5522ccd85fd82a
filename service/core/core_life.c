/* A job's life after training (docs/protocol.md, "A job's life"): a job is finished when every
 * rank joined and left as finished (not failed); it is removed --finished-job-retention-s later,
 * one that never got a push is removed --unused-job-expiry-s after its last live rank went,
 * at once when a rank joins it again without resume (a rerun starts a fresh job), or by an
 * authorized DeleteJob once none of its ranks is live. Removing a job frees its store and metric
 * series and deletes its directory (journal, checkpoints), or moves the directory aside with
 * --finished-jobs keep. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "core_internal.h"
#include "ga_alloc.h"
#include "ga_wire.h"
#include "persist/persist.h"

void ga_core_job_check_finished(ga_job *job)
{
    if (job->finished_ms) return;
    bool elastic = job->min_world > 0, any = false;
    if (elastic && !job->last_leave_clean) return; /* its workers were stopped or lost: they come back */
    for (uint32_t r = 0; r < job->world; r++) {
        const ga_member *m = &job->members[r];
        if (m->incarnation == 0 && elastic) continue; /* a rank nobody took */
        if (m->incarnation == 0 || !m->left || (m->failed_left && !elastic)) return;
        any = true;
    }
    if (!any) return;
    uint64_t now = uv_now(job->core->loop);
    job->finished_ms = now ? now : 1;
    ga_core_relay_leave(job);
    ga_log(GA_LOG_INFO, "job '%s' finished at version %" PRIu64 ": every rank left; removed in %u s", job->name,
           job->version, job->core->opt.finished_retention_s);
}

ga_status ga_core_job_remove(ga_core *c, ga_job *job, bool keep, const char *because, char *why)
{
    if (!ga_taskq_idle(&job->tasks) || job->pulls || job->init_waits) {
        snprintf(why, GA_WHY_CAP, "job '%.60s' is being put away (%s): try again", job->name, because);
        return GA_E_UNAVAILABLE;
    }
    char *dir = job->dir ? ga_strdup(job->dir) : NULL;
    if (job->dir && !dir) {
        snprintf(why, GA_WHY_CAP, "out of memory removing job '%.60s'", job->name);
        return GA_E_NOMEM;
    }
    ga_log(GA_LOG_INFO, "job '%s' removed at version %" PRIu64 " (%s)%s", job->name, job->version, because,
           dir ? (keep ? "; its directory is kept aside" : "; its directory is deleted") : "");
    ga_core_job_drop(c, job); /* closes its journal */
    ga_status st = GA_OK;
    if (dir && keep) {
        char aside[4200];
        st = ga_persist_put_aside(dir, "finished", aside, sizeof aside, why);
    } else if (dir) {
        st = ga_file_remove_dir(dir, why, GA_WHY_CAP);
    }
    if (st != GA_OK) ga_log(GA_LOG_ERROR, "job directory: %s", why);
    ga_free(dir);
    return st;
}

/* The first live rank of the job (joined, not left, not lost, not told of a failure), or -1. */
static long live_rank(const ga_job *job)
{
    for (uint32_t r = 0; r < job->world; r++) {
        const ga_member *m = &job->members[r];
        bool told = job->failed_incarnations && job->failed_incarnations[r] == m->incarnation;
        if (m->incarnation != 0 && !m->left && m->lost != m->incarnation && !told) return (long)r;
    }
    return -1;
}

/* A job nobody ever pushed to, with no live rank, for --unused-job-expiry-s: a launch that
 * never started, or Joins that only took a slot. */
static bool unused_expired(ga_job *job, uint64_t now)
{
    if (job->any_commit || job->finished_ms || live_rank(job) >= 0) {
        job->unused_since_ms = 0;
        return false;
    }
    if (!job->unused_since_ms) job->unused_since_ms = now ? now : 1;
    return now - job->unused_since_ms >= (uint64_t)job->core->opt.unused_job_expiry_s * 1000u;
}

void ga_core_jobs_expire(ga_core *c)
{
    uint64_t now = uv_now(c->loop), keep_ms = (uint64_t)c->opt.finished_retention_s * 1000u;
    for (size_t i = 0; i < c->njobs;) {
        ga_job *job = c->jobs[i];
        char why[GA_WHY_CAP];
        if (job->finished_ms && now - job->finished_ms >= keep_ms &&
            ga_core_job_remove(c, job, c->opt.keep_finished, "finished, past --finished-job-retention-s", why) !=
                GA_E_UNAVAILABLE)
            continue; /* removed: the next job is at i now */
        if (unused_expired(job, now) &&
            ga_core_job_remove(c, job, false, "never pushed to, and no live rank for --unused-job-expiry-s", why) !=
                GA_E_UNAVAILABLE)
            continue;
        i++;
    }
}

/* ---- DeleteJob ---- */

void ga_core_delete_job(ga_core *c, ga_call *call, Gradagg__V1__DeleteJobRequest *req)
{
    char why[GA_WHY_CAP];
    ga_status st = GA_OK;
    ga_job *job = ga_core_job_named(c, req->job, &st, why);
    if (!job) goto done;
    long r = live_rank(job);
    if (r >= 0) {
        st = GA_E_RANK_HELD;
        snprintf(why, sizeof why, "job '%.60s' has a live rank %ld (incarnation %" PRIu64 "): it is deleted once its ranks left",
                 job->name, r, job->members[r].incarnation);
        goto done;
    }
    st = ga_core_job_remove(c, job, false, "DeleteJob", why);
done:
    if (st == GA_OK) {
        Gradagg__V1__DeleteJobResponse resp = GRADAGG__V1__DELETE_JOB_RESPONSE__INIT;
        ga_call_finish(call, &resp.base, GA_OK, NULL);
    } else {
        ga_call_finish(call, NULL, st, "%s", why);
    }
    protobuf_c_message_free_unpacked(&req->base, &ga_wire_allocator);
}
