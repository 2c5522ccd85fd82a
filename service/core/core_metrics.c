/* The core's metric families (core.h, docs/metrics.md), read at scrape time straight from the
 * jobs: the admin server scrapes on the loop thread, which owns this state, so nothing is copied
 * or locked. */
#include <stddef.h>
#include <time.h>

#include "core_internal.h"

/* Per-job uint64 fields, one family each: adding one is a row. */
static const struct job_family {
    const char *name, *type, *help;
    size_t field; /* offsetof(ga_job, a uint64_t field) */
} job_families[] = {
    {"gradagg_version", "gauge", "Published parameter version of the job.", offsetof(ga_job, version)},
    {"gradagg_steps_total", "counter", "Versions published (sync steps closed, async commits applied).",
     offsetof(ga_job, steps)},
    {"gradagg_deadline_closes_total", "counter", "Sync steps closed by the straggler deadline.",
     offsetof(ga_job, deadline_closes)},
    {"gradagg_stragglers_total", "counter", "Ranks missing from steps closed at the deadline.",
     offsetof(ga_job, stragglers)},
    {"gradagg_late_pushes_total", "counter", "Pushes refused because their step had closed.",
     offsetof(ga_job, late_pushes)},
    {"gradagg_duplicate_pushes_total", "counter", "Retried pushes acknowledged again and counted once.",
     offsetof(ga_job, duplicate_pushes)},
    {"gradagg_ranks_failed_total", "counter", "Ranks that left the job as failed (an exception, an error).",
     offsetof(ga_job, ranks_failed)},
    {"gradagg_ranks_lost_total", "counter",
     "Ranks lost: no call, wait or heartbeat for --rank-lost-ms.", offsetof(ga_job, ranks_lost)},
    {"gradagg_checkpoints_total", "counter", "Checkpoints written.", offsetof(ga_job, ckpt_count)},
    {"gradagg_checkpoint_failures_total", "counter", "Checkpoint writes that failed (the previous one was kept).",
     offsetof(ga_job, ckpt_failures)},
};

/* Per-job series are written for the first (oldest) GA_METRICS_MAX_JOBS jobs only: a scrape
 * stays small and fast however many jobs a server holds (gradagg_jobs counts them all, and
 * gradagg_metrics_jobs_omitted says how many have no series). */
#define GA_METRICS_MAX_JOBS 256u

static size_t series_jobs(const ga_core *c)
{
    return c->njobs < GA_METRICS_MAX_JOBS ? c->njobs : GA_METRICS_MAX_JOBS;
}

static uint64_t field_u64(const ga_job *job, size_t off)
{
    return *(const uint64_t *)(const void *)((const char *)job + off);
}

typedef enum worker_state { W_ACTIVE, W_IDLE, W_LEFT, W_ABSENT, W_STATES } worker_state;
static const char *const state_names[W_STATES] = {"active", "idle", "left", "absent"};

/* The lease is the same one Join uses to decide whether a rank is still held. */
static worker_state member_state(const ga_core *c, const ga_member *m, uint64_t now)
{
    if (m->incarnation == 0) return W_ABSENT;
    if (m->left) return W_LEFT;
    if (ga_member_waiting(m) || now - m->active_ms < c->opt.member_lease_ms) return W_ACTIVE;
    return W_IDLE;
}

static void write_workers(const ga_core *c, ga_metrics_text *t)
{
    ga_metrics_family(t, "gradagg_workers", "gauge",
                      "Ranks by state: active, idle (lease lapsed), left, absent (never joined).");
    uint64_t now = uv_now(c->loop);
    for (size_t i = 0; i < series_jobs(c); i++) {
        const ga_job *job = c->jobs[i];
        uint64_t n[W_STATES] = {0};
        for (uint32_t r = 0; r < job->world; r++) n[member_state(c, &job->members[r], now)]++;
        for (int s = 0; s < W_STATES; s++) {
            ga_label l[2] = {{"ga_job", job->name}, {"state", state_names[s]}};
            ga_metrics_u64(t, "gradagg_workers", l, 2, n[s]);
        }
    }
}

/* Only codecs a job has received: a series appears with its first committed push. */
static void write_received(const ga_core *c, ga_metrics_text *t, const char *name, const char *help, bool fp32)
{
    ga_metrics_family(t, name, "counter", help);
    for (size_t i = 0; i < series_jobs(c); i++) {
        const ga_job *job = c->jobs[i];
        for (int k = 0; k < GA_CODEC_COUNT; k++) {
            if (!job->received_fp32[k]) continue;
            ga_label l[2] = {{"ga_job", job->name}, {"codec", ga_codec_name((ga_codec_id)k)}};
            ga_metrics_u64(t, name, l, 2, fp32 ? job->received_fp32[k] : job->received_bytes[k]);
        }
    }
}

static void write_checkpoint_gauges(const ga_core *c, ga_metrics_text *t)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now_ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    ga_metrics_family(t, "gradagg_checkpoint_age_seconds", "gauge", "Seconds since the newest checkpoint was written.");
    for (size_t i = 0; i < series_jobs(c); i++) {
        const ga_job *job = c->jobs[i];
        if (!job->ckpt_unix_ms) continue;
        ga_label l = {"ga_job", job->name};
        uint64_t age = now_ms > job->ckpt_unix_ms ? now_ms - job->ckpt_unix_ms : 0;
        ga_metrics_double(t, "gradagg_checkpoint_age_seconds", &l, 1, (double)age / 1000.0);
    }
    ga_metrics_family(t, "gradagg_checkpoint_duration_seconds", "gauge",
                      "How long the newest checkpoint took to write.");
    for (size_t i = 0; i < series_jobs(c); i++) {
        const ga_job *job = c->jobs[i];
        if (!job->ckpt_unix_ms) continue;
        ga_label l = {"ga_job", job->name};
        ga_metrics_double(t, "gradagg_checkpoint_duration_seconds", &l, 1, job->ckpt_seconds);
    }
}

void ga_core_metrics(const ga_core *c, ga_metrics_text *t)
{
    ga_metrics_family(t, "gradagg_jobs", "gauge", "Jobs on this server.");
    ga_metrics_u64(t, "gradagg_jobs", NULL, 0, c->njobs);
    ga_metrics_family(t, "gradagg_metrics_jobs_omitted", "gauge",
                      "Jobs past the first 256 (the oldest), whose per-job series this scrape leaves out.");
    ga_metrics_u64(t, "gradagg_metrics_jobs_omitted", NULL, 0, c->njobs - series_jobs(c));
    for (size_t f = 0; f < sizeof job_families / sizeof job_families[0]; f++) {
        const struct job_family *jf = &job_families[f];
        ga_metrics_family(t, jf->name, jf->type, jf->help);
        for (size_t i = 0; i < series_jobs(c); i++) {
            ga_label l = {"ga_job", c->jobs[i]->name};
            ga_metrics_u64(t, jf->name, &l, 1, field_u64(c->jobs[i], jf->field));
        }
    }
    ga_metrics_family(t, "gradagg_step_duration_seconds", "histogram",
                      "A sync step's first commit to the publication of its version.");
    for (size_t i = 0; i < series_jobs(c); i++) {
        if (c->jobs[i]->async) continue;
        ga_label l = {"ga_job", c->jobs[i]->name};
        ga_metrics_histogram(t, "gradagg_step_duration_seconds", &l, 1, &c->jobs[i]->step_seconds);
    }
    ga_metrics_family(t, "gradagg_push_staleness", "histogram",
                      "Each push a sync step applied: its step minus the version its rank last pulled (0: fresh; "
                      "up to the job's staleness).");
    for (size_t i = 0; i < series_jobs(c); i++) {
        if (c->jobs[i]->async) continue;
        ga_label l = {"ga_job", c->jobs[i]->name};
        ga_metrics_histogram(t, "gradagg_push_staleness", &l, 1, &c->jobs[i]->staleness_hist);
    }
    ga_metrics_family(t, "gradagg_relay_upstream_seconds", "histogram",
                      "A node relay's exchange per step: its node's sum handed to the upstream member until the "
                      "upstream version came back (push, the other nodes, pull).");
    for (size_t i = 0; i < series_jobs(c); i++) {
        if (!c->jobs[i]->uplink) continue;
        ga_label l = {"ga_job", c->jobs[i]->name};
        ga_metrics_histogram(t, "gradagg_relay_upstream_seconds", &l, 1, &c->jobs[i]->relay_upstream_seconds);
    }
    ga_metrics_family(t, "gradagg_relay_upstream_bytes_total", "counter",
                      "A node relay's payload bytes to and from the upstream job, by direction (pushed, pulled).");
    for (size_t i = 0; i < series_jobs(c); i++) {
        if (!c->jobs[i]->uplink) continue;
        ga_label pushed[] = {{"ga_job", c->jobs[i]->name}, {"direction", "pushed"}};
        ga_label pulled[] = {{"ga_job", c->jobs[i]->name}, {"direction", "pulled"}};
        ga_metrics_u64(t, "gradagg_relay_upstream_bytes_total", pushed, 2, c->jobs[i]->relay_pushed_bytes);
        ga_metrics_u64(t, "gradagg_relay_upstream_bytes_total", pulled, 2, c->jobs[i]->relay_pulled_bytes);
    }
    write_received(c, t, "gradagg_received_bytes_total",
                   "Payload bytes of committed pushes as they came on the wire, by codec.", false);
    write_received(c, t, "gradagg_received_fp32_bytes_total",
                   "The same pushes as fp32 (4 bytes per element): received / fp32 = compression.", true);
    write_workers(c, t);
    write_checkpoint_gauges(c, t);
    ga_metrics_family(t, "gradagg_journal_write_seconds", "histogram",
                      "Each journal write before its ack (a record, and its sync per --journal-sync), all jobs.");
    ga_metrics_histogram(t, "gradagg_journal_write_seconds", NULL, 0, &c->journal_seconds);
    ga_metrics_family(t, "gradagg_held_bytes", "gauge", "Push and init bundles (payloads and chunk headers) buffered by open steps, queued tasks and the store until the step's apply, all jobs.");
    ga_metrics_u64(t, "gradagg_held_bytes", NULL, 0, c->held_bytes);
    ga_metrics_family(t, "gradagg_budget_bytes", "gauge",
                      "What --max-memory-mb counts: jobs and held bundles (core), unfinished streams' chunks and the "
                      "room for messages being received (streams).");
    ga_label core_part = {"part", "core"}, streams_part = {"part", "streams"};
    ga_metrics_u64(t, "gradagg_budget_bytes", &core_part, 1, ga_core_own_bytes(c));
    ga_metrics_u64(t, "gradagg_budget_bytes", &streams_part, 1, ga_budget_streams(&c->budget));
    ga_metrics_family(t, "gradagg_pinned_bytes", "gauge",
                      "Superseded versions that pulls still sending them hold (counted in --max-memory-mb).");
    ga_metrics_u64(t, "gradagg_pinned_bytes", NULL, 0, atomic_load_explicit(&c->pinned, memory_order_relaxed));
    ga_metrics_family(t, "gradagg_pulls_reclaimed_total", "counter",
                      "Pulls ended while sending a superseded version because the server needed the memory.");
    ga_metrics_u64(t, "gradagg_pulls_reclaimed_total", NULL, 0, c->pulls_reclaimed);
    ga_metrics_family(t, "gradagg_checkpoints_corrupt_total", "counter",
                      "Checkpoints skipped at start-up because they did not verify (an older one was used).");
    ga_metrics_u64(t, "gradagg_checkpoints_corrupt_total", NULL, 0, c->corrupt_checkpoints);
    ga_metrics_family(t, "gradagg_overflows_total", "counter",
                      "Steps not published because they left NaN or Inf in the parameters (their job failed).");
    ga_metrics_u64(t, "gradagg_overflows_total", NULL, 0, c->overflows);
    ga_metrics_family(t, "gradagg_journals_damaged", "gauge",
                      "Jobs refused at start-up because their journal is damaged where the restore needed it "
                      "(docs/reliability.md).");
    ga_metrics_u64(t, "gradagg_journals_damaged", NULL, 0, c->damaged_journals);
    ga_metrics_family(t, "gradagg_journal_records_from_copy", "gauge",
                      "Journal records the start-up restore could not read in their segment and read from its "
                      "second copy (--journal-copies 2): the disk damaged them (docs/reliability.md).");
    ga_metrics_u64(t, "gradagg_journal_records_from_copy", NULL, 0, c->journal_copy_reads);
}
