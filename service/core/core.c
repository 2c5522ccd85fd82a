/* The core's life cycle and its small handlers: create/destroy, Join, Leave, Status, cancel
 * and drain (core.h). Pushes, inits and pulls live in core_push.c, core_init.c, core_pull.c. */
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "core_internal.h"
#include "ga_alloc.h"
#include "ga_lane.h"
#include "ga_wire.h"
#include "relay.h"


/* ---- create / destroy ---- */

static void handle_closed(uv_handle_t *h) { ga_free(h); }

uint64_t ga_core_own_bytes(const ga_core *c)
{
    /* the scratch pool is the process's (store.h): one core per process in a server */
    uint64_t total = c->held_bytes + atomic_load_explicit(&c->pinned, memory_order_relaxed) + ga_store_scratch_pooled();
    for (size_t i = 0; i < c->njobs; i++) total += c->jobs[i]->store_bytes;
    return total;
}

/* Once per loop turn, after the callbacks that change what the core holds (requests, the math
 * tasks' ends, timers): the completion-queue threads' view of the budget. */
static void account(uv_check_t *h)
{
    ga_core_publish_bytes(h->data);
}

/* The budget was full for a take (any thread): the loop takes back what stale pulls pin. */
static void budget_full(void *arg)
{
    uv_async_send(arg);
}

static void reclaim(uv_async_t *h)
{
    ga_core *c = h->data;
    for (size_t i = 0; i < c->njobs; i++) ga_core_pulls_reclaim(c->jobs[i], true);
    ga_core_publish_bytes(c);
}

ga_status ga_core_create(const ga_core_options *opt, uv_loop_t *loop, ga_core **out)
{
    ga_core_options o = GA_CORE_OPTIONS_INIT;
    if (!opt || !loop || !out) return GA_E_INVAL;
    /* Callers built against an older, shorter struct keep the defaults of the newer fields. */
    size_t known = offsetof(ga_core_options, default_quorum) + sizeof o.default_quorum;
    if (opt->version < known) return GA_E_CONFIG;
    memcpy(&o, opt, opt->version < sizeof o ? opt->version : sizeof o);
    o.version = sizeof o;
    if (o.max_jobs == 0 || o.max_tensors == 0 || o.rank_lost_ms == 0 || o.max_elements == 0 || o.threads < 0 || o.pull_chunk_bytes < 4 * GA_STORE_PIECE_ALIGN ||
        o.pull_chunk_bytes > ((size_t)1 << 30))
        return GA_E_CONFIG;
    ga_exec ex = {o.backend, 0, GA_SIMD_AUTO, NULL};
    ga_status st = ga_exec_usable(&ex);
    if (st == GA_E_BACKEND || st == GA_E_INVAL) return GA_E_CONFIG;
    if (st != GA_OK) return st;
    ga_core *c = ga_calloc(1, sizeof *c);
    if (!c) return GA_E_NOMEM;
    c->opt = o;
    c->loop = loop;
    if (o.math_tasks) ga_store_scratch_pool_limit((uint64_t)o.math_tasks * GA_STORE_SCRATCH_APPLY_BYTES);
    ga_budget_init(&c->budget, o.max_memory_bytes);
    ga_histogram_init(&c->journal_seconds, ga_metrics_io_bounds, ga_metrics_io_nbounds);
    c->accounting = ga_calloc(1, sizeof *c->accounting);
    c->reclaim = ga_calloc(1, sizeof *c->reclaim);
    if (!c->accounting || !c->reclaim) {
        ga_free(c->accounting), ga_free(c->reclaim), ga_free(c);
        return GA_E_NOMEM;
    }
    uv_check_init(loop, c->accounting);
    c->accounting->data = c;
    uv_check_start(c->accounting, account);
    uv_unref((uv_handle_t *)c->accounting); /* it alone does not keep the loop running */
    uv_async_init(loop, c->reclaim, reclaim);
    c->reclaim->data = c;
    uv_unref((uv_handle_t *)c->reclaim);
    ga_budget_on_full(&c->budget, budget_full, c->reclaim);
    if ((st = ga_core_lease_start(c)) != GA_OK) {
        uv_close((uv_handle_t *)c->accounting, handle_closed);
        uv_close((uv_handle_t *)c->reclaim, handle_closed);
        ga_free(c);
        return st;
    }
    *out = c;
    return GA_OK;
}

void ga_core_destroy(ga_core *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->njobs; i++) {
        ga_job *job = c->jobs[i];
        /* Every call handed in is finished once, even one still waiting here. */
        ga_core_pulls_end(job, GA_E_DRAINING, "the server is shutting down");
        ga_core_inits_end(job, GA_E_DRAINING, "the server is shutting down");
        uv_timer_stop(job->timer);
        ga_core_relay_detach(job);
        ga_job_destroy(job);
    }
    ga_core_lease_stop(c);
    uv_check_stop(c->accounting);
    uv_close((uv_handle_t *)c->accounting, handle_closed);
    ga_budget_on_full(&c->budget, NULL, NULL);
    uv_close((uv_handle_t *)c->reclaim, handle_closed);
    ga_free(c->jobs);
    ga_free(c);
}

/* ---- helpers ---- */

ga_job *ga_core_job(ga_core *c, const char *name)
{
    if (!name) return NULL;
    for (size_t i = 0; i < c->njobs; i++)
        if (strcmp(c->jobs[i]->name, name) == 0) return c->jobs[i];
    return NULL;
}

ga_job *ga_core_job_named(ga_core *c, const char *name, ga_status *st, char *why)
{
    ga_job *job = ga_core_job(c, name);
    if (!job) {
        *st = GA_E_UNKNOWN_JOB;
        snprintf(why, GA_WHY_CAP, "job '%s' does not exist", name ? name : "");
    }
    return job;
}

uint64_t ga_core_bytes(const ga_core *c)
{
    return ga_core_own_bytes(c) + ga_budget_streams(&c->budget);
}

void ga_core_adopt(ga_core *c, size_t taken)
{
    ga_budget_set_core(&c->budget, ga_core_own_bytes(c) + taken);
    ga_budget_give(&c->budget, taken);
    c->adopted++;
}

void ga_core_publish_bytes(ga_core *c)
{
    ga_budget_set_core(&c->budget, ga_core_own_bytes(c));
}

uint64_t ga_core_damaged_journals(const ga_core *c)
{
    return c->damaged_journals;
}

ga_budget *ga_core_budget(ga_core *c)
{
    return &c->budget;
}

void ga_core_stream_check(ga_core *c, ga_call *call, const char *name, uint32_t rank, uint64_t incarnation)
{
    char why[GA_WHY_CAP];
    ga_status st = GA_OK;
    ga_job *job = ga_core_job(c, name);
    if (!job) {
        st = GA_E_UNKNOWN_JOB;
        snprintf(why, sizeof why, "job '%s' does not exist (the first Join creates it)", name);
    } else {
        st = ga_job_member_check(job, rank, incarnation, why, sizeof why);
    }
    if (st == GA_OK && c->draining) {
        st = GA_E_DRAINING;
        snprintf(why, sizeof why, "the server is shutting down");
    }
    if (st == GA_OK && job->fault != GA_OK) {
        st = job->fault;
        snprintf(why, sizeof why, "%s", job->fault_why);
    }
    if (st != GA_OK) ga_call_refuse(call, st, "%s (refused at the stream's first chunk)", why);
}

void ga_core_touch(ga_core *c, ga_job *job, uint32_t rank)
{
    if (rank < job->world) {
        job->members[rank].active_ms = uv_now(c->loop);
        job->members[rank].unseen = false;
    }
}

void ga_core_job_fault(ga_job *job, ga_status st, const char *fmt, ...)
{
    if (job->fault != GA_OK) return; /* the first failure is the one to report */
    char msg[240];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    job->fault = st;
    snprintf(job->fault_why, sizeof job->fault_why, "job '%.60s' failed: %s", job->name, msg);
    ga_core_pulls_end(job, st, job->fault_why);
    ga_core_inits_end(job, st, job->fault_why);
    ga_core_relay_leave(job);
}

static bool all_idle(const ga_core *c)
{
    for (size_t i = 0; i < c->njobs; i++)
        if (!ga_taskq_idle(&c->jobs[i]->tasks)) return false;
    return true;
}

static void drain_finish(ga_core *c)
{
    if (!c->draining || c->drained || !all_idle(c)) return;
    c->drained = true;
    for (size_t i = 0; i < c->njobs; i++)
        ga_core_pulls_end(c->jobs[i], GA_E_DRAINING, "the server is shutting down; this version will not be published");
    c->drain_done(c->drain_arg);
}

void ga_core_job_idle(void *arg)
{
    ga_job *job = arg;
    drain_finish(job->core);
}

/* ---- Join ---- */

/* A Join with any_rank names a job that is not elastic (min_world 0): GA_E_INVAL. */
static ga_status any_rank_allowed(const Gradagg__V1__JoinRequest *req, uint32_t min_world, char *why)
{
    if (!req->any_rank || min_world > 0) return GA_OK;
    snprintf(why, GA_WHY_CAP, "any_rank needs an elastic job (config.min_world_size > 0); job '%s' is not one",
             req->job);
    return GA_E_INVAL;
}

/* A job's settings from its config; a relay's local job (relay.h) as the relay makes it. */
static ga_status job_settings(const ga_core *c, const Gradagg__V1__JobConfig *cfg, ga_job_settings *set, char *why)
{
    GA_CHECK(ga_job_settings_from(cfg, &c->opt, set, why, GA_WHY_CAP));
    return c->opt.relay ? ga_relay_localize(&c->relay_join_place, set, why, GA_WHY_CAP) : GA_OK;
}

/* Whether jobs a and b fall under one bearer token's scope: the same job but for a lane suffix. */
static bool same_token_scope(const char *a, const char *b)
{
    size_t la = ga_lane_base_len(a, strlen(a)), lb = ga_lane_base_len(b, strlen(b));
    return la == lb && memcmp(a, b, la) == 0;
}

/* The caps on jobs that never got a push (core.h): per client host, unless trusted, and per
 * token with tokens on. GA_E_LIMIT naming the cap when creating `job` would pass one. */
static ga_status unused_jobs_allowed(const ga_core *c, const char *host, const char *job, char *why)
{
    bool per_host = !ga_host_set_has(c->opt.trusted_hosts, host);
    uint32_t of_host = 0, of_token = 0;
    for (size_t i = 0; i < c->njobs; i++) {
        const ga_job *j = c->jobs[i];
        if (j->any_commit) continue;
        of_host += per_host && strcmp(j->creator, host) == 0;
        of_token += c->opt.tokens && same_token_scope(j->name, job);
    }
    if (per_host && of_host >= c->opt.max_unused_jobs_per_client) {
        snprintf(why, GA_WHY_CAP,
                 "client %s created %u jobs that never got a push, the most --max-unused-jobs-per-client allows (a "
                 "relay or a NAT: --trusted-client-hosts); job '%s' not created (an unused job goes %u s after its "
                 "last rank)",
                 host, of_host, job, c->opt.unused_job_expiry_s);
        return GA_E_LIMIT;
    }
    if (c->opt.tokens && of_token >= c->opt.max_unused_jobs_per_token) {
        snprintf(why, GA_WHY_CAP,
                 "the token of job '%.*s' has %u jobs that never got a push (the job and its lanes), the most "
                 "--max-unused-jobs-per-token allows; job '%s' not created (an unused job goes %u s after its last "
                 "rank)",
                 (int)ga_lane_base_len(job, strlen(job)), job, of_token, job, c->opt.unused_job_expiry_s);
        return GA_E_LIMIT;
    }
    return GA_OK;
}

static ga_status create_job(ga_core *c, ga_call *call, Gradagg__V1__JoinRequest *req, ga_job **out, char *why)
{
    ga_job_settings set;
    GA_CHECK(job_settings(c, req->config, &set, why));
    GA_CHECK(any_rank_allowed(req, set.min_world, why)); /* before a job that is not elastic is created */
    if (!req->any_rank && req->rank >= set.world) {
        snprintf(why, GA_WHY_CAP, "rank %u outside [0, %u) of job '%s'", req->rank, set.world, req->job);
        return GA_E_RANK;
    }
    char host[sizeof((ga_job *)0)->creator];
    ga_call_peer_host(call, host, sizeof host);
    GA_CHECK(unused_jobs_allowed(c, host, req->job, why));
    GA_CHECK(ga_core_job_create(c, req->job, req->config, out, why));
    snprintf((*out)->creator, sizeof (*out)->creator, "%s", host);
    if (c->opt.relay) {
        ga_status st = ga_core_relay_attach(*out, call, req, why);
        if (st != GA_OK) {
            ga_core_job_drop(c, *out);
            *out = NULL;
            return st;
        }
    }
    return GA_OK;
}

void ga_core_job_drop(ga_core *c, ga_job *job)
{
    for (size_t i = 0; i < c->njobs; i++) {
        if (c->jobs[i] != job) continue;
        memmove(&c->jobs[i], &c->jobs[i + 1], (c->njobs - i - 1) * sizeof *c->jobs);
        c->njobs--;
        break;
    }
    c->held_bytes -= job->held_bytes; /* the open step's and the ahead pushes go with it */
    ga_core_relay_detach(job);
    ga_job_destroy(job);
}

ga_status ga_core_job_create(ga_core *c, const char *name, const Gradagg__V1__JobConfig *cfg, ga_job **out, char *why)
{
    ga_job_settings set;
    GA_CHECK(job_settings(c, cfg, &set, why));
    if (c->njobs >= c->opt.max_jobs) {
        snprintf(why, GA_WHY_CAP, "the server holds %zu jobs, the most it allows (max_jobs); job '%s' not created",
                 c->njobs, name);
        return GA_E_LIMIT;
    }
    uint64_t files = c->opt.data_dir ? (c->opt.journal_copies > 1 ? 2 : 1) : 0;
    if (c->opt.journal_fds && (c->njobs + 1) * files > c->opt.journal_fds) {
        snprintf(why, GA_WHY_CAP,
                 "the server holds %zu jobs with %" PRIu64 " open journal file(s) each, the most its file descriptor "
                 "limit leaves for journals (%" PRIu64 " of RLIMIT_NOFILE; the rest is kept for connections); job "
                 "'%s' not created: raise the limit (docs/operations.md, \"File descriptors\")",
                 c->njobs, files, c->opt.journal_fds, name);
        return GA_E_LIMIT;
    }
    if (c->njobs == c->jobs_cap) {
        size_t ncap = c->jobs_cap ? 2 * c->jobs_cap : 8;
        ga_job **jobs = ga_malloc(ncap * sizeof *jobs);
        if (!jobs) {
            snprintf(why, GA_WHY_CAP, "out of memory creating job '%s'", name);
            return GA_E_NOMEM;
        }
        if (c->njobs) memcpy(jobs, c->jobs, c->njobs * sizeof *jobs);
        ga_free(c->jobs);
        c->jobs = jobs;
        c->jobs_cap = ncap;
    }
    ga_job *job;
    GA_CHECK(ga_job_create(c, c->loop, name, cfg, &set, &job, why, GA_WHY_CAP));
    job->tasks.idle = ga_core_job_idle;
    job->tasks.idle_arg = job;
    job->tasks.run_inline = c->replaying;
    if (!job->async) ga_core_step_exclude_absent(job); /* elastic: nobody has joined yet */
    job->relay_place = c->relay_join_place;
    c->jobs[c->njobs++] = job;
    ga_status st = ga_persist_job(job, why);
    if (st != GA_OK) {
        ga_core_job_drop(c, job);
        return st;
    }
    *out = job;
    return GA_OK;
}

/* A rank joins a job every other rank of which has left as finished: the job resumes, and the
 * others are expected back as in a fresh job (absent, waited for by sync steps, never lost to
 * their lease) rather than left, whose steps would close without them; their old incarnations
 * stay refused. Decided from the members alone, so replaying the Join does the same. */
static void expect_the_others(ga_job *job, uint32_t rank)
{
    for (uint32_t r = 0; r < job->world; r++) {
        const ga_member *x = &job->members[r];
        if (r != rank && (!x->left || x->failed_left || x->incarnation == 0)) return;
    }
    for (uint32_t r = 0; r < job->world; r++) {
        ga_member *x = &job->members[r];
        if (r == rank) continue;
        memmove(&x->replaced[1], &x->replaced[0], (GA_JOB_REPLACED - 1) * sizeof x->replaced[0]);
        x->replaced[0] = x->incarnation;
        x->incarnation = 0;
        x->left = false;
        if (!job->async && job->min_world == 0) ga_step_reinclude(&job->step, r); /* elastic: not waited for */
    }
}

/* Rank `rank` is held by `incarnation` from now on, and takes part in steps again. */
static void member_take(ga_job *job, uint32_t rank, uint64_t incarnation)
{
    ga_member *m = &job->members[rank];
    if (m->left && !m->failed_left) expect_the_others(job, rank);
    if (m->incarnation != incarnation) {
        bool replaced = m->incarnation != 0;
        if (replaced) {
            /* A restarted worker: what its predecessor committed stays, what it had in flight
             * was discarded with its stream. */
            ga_log(GA_LOG_INFO, "job '%s': rank %u taken by incarnation %" PRIu64 ", replacing %" PRIu64 "%s",
                   job->name, rank, incarnation, m->incarnation, m->left ? " (which had left)" : "");
            memmove(&m->replaced[1], &m->replaced[0], (GA_JOB_REPLACED - 1) * sizeof m->replaced[0]);
            m->replaced[0] = m->incarnation;
        }
        m->incarnation = incarnation;
        /* Async duplicates are told apart by the worker's own step counter, which restarts with
         * a new worker. A rank restored from the journal without its membership keeps what it
         * committed: its worker is the same and may be retrying one of those commits. */
        if (job->async && replaced) m->has_pushed = false, m->last_step = 0, m->commit_mask = 0;
    }
    m->left = false; /* re-joining, or coming back after a Leave */
    m->failed_left = false;
    job->finished_ms = 0;
    if (!job->async && ga_step_reinclude(&job->step, rank)) ga_core_step_advance(job);
}

void ga_core_member_gone(ga_job *job, uint32_t rank)
{
    job->members[rank].left = true;
    if (!job->async && job->fault == GA_OK) {
        ga_step_exclude(&job->step, rank);
        ga_core_step_advance(job);
        ga_core_step_try_close(job);
    }
}

ga_status ga_core_member_replay(ga_job *job, const ga_journal_member *change, char *why, size_t cap)
{
    if (change->rank >= job->world)
        return ga_status_fail(GA_E_PROTO, why, cap, "journal: member change of rank %u in a world of %u", change->rank,
                              job->world);
    if (change->left == 2) { /* left as failed: its step waits for it, as it did live; elastic: lost */
        job->members[change->rank].incarnation = change->incarnation;
        job->members[change->rank].left = true;
        job->members[change->rank].failed_left = true;
        if (job->min_world > 0) ga_core_member_gone(job, change->rank);
        job->last_leave_clean = false;
    } else if (change->left) {
        job->last_leave_clean = true;
        job->members[change->rank].incarnation = change->incarnation;
        ga_core_member_gone(job, change->rank);
    } else {
        member_take(job, change->rank, change->incarnation);
    }
    return GA_OK;
}

/* any_rank (elastic jobs): req->rank becomes the rank this incarnation holds (a retried Join),
 * else the lowest rank nobody holds (never joined, left, or lost). GA_E_LIMIT when every rank is
 * held. */
static ga_status pick_rank(const ga_job *job, Gradagg__V1__JoinRequest *req, char *why)
{
    GA_CHECK(any_rank_allowed(req, job->min_world, why));
    for (uint32_t r = 0; r < job->world; r++)
        if (job->members[r].incarnation == req->incarnation && !job->members[r].left) {
            req->rank = r;
            return GA_OK;
        }
    for (uint32_t r = 0; r < job->world; r++)
        if (job->members[r].incarnation == 0 || job->members[r].left) {
            req->rank = r;
            return GA_OK;
        }
    snprintf(why, GA_WHY_CAP, "every rank of job '%s' is held (world_size %u, its most ranks): no rank for incarnation %"
             PRIu64, job->name, job->world, req->incarnation);
    return GA_E_LIMIT;
}

/* Takes rank for `incarnation`: GA_E_RANK_HELD while another live holder has it. */
static ga_status take_rank(ga_core *c, ga_job *job, uint32_t rank, uint64_t incarnation, char *why)
{
    ga_member *m = &job->members[rank];
    uint64_t now = uv_now(c->loop);
    if (m->incarnation != incarnation) {
        uint64_t idle = now - m->active_ms;
        if (m->incarnation != 0 && !m->left && (ga_member_waiting(m) || idle < c->opt.member_lease_ms)) {
            snprintf(why, GA_WHY_CAP,
                     "rank %u of job '%s' is held by incarnation %" PRIu64 ", active %" PRIu64
                     " ms ago (lease %u ms%s)",
                     rank, job->name, m->incarnation, ga_member_waiting(m) ? 0 : idle, c->opt.member_lease_ms,
                     m->pulls_waiting ? ", waiting in a pull" : m->inits_waiting ? ", waiting in an init" : "");
            return GA_E_RANK_HELD;
        }
    }
    if ((m->incarnation != 0 || job->min_world > 0) && (m->left || m->incarnation != incarnation)) {
        /* Back after a Leave, or a new worker for the rank: steps count it again, and a
         * restarted server must know it (it would hold the rank for the old incarnation). An
         * elastic job's first Join of a rank too: which step took it in depends on when. */
        ga_journal_member change = {rank, 0, incarnation};
        GA_CHECK(ga_persist_member(job, &change, why));
    }
    member_take(job, rank, incarnation);
    m->active_ms = now;
    return GA_OK;
}

void ga_core_join(ga_core *c, ga_call *call, Gradagg__V1__JoinRequest *req)
{
    char why[GA_WHY_CAP];
    ga_status st = GA_OK;
    ga_job *job = NULL;
    if (!req->job || !req->job[0]) {
        st = GA_E_INVAL;
        snprintf(why, sizeof why, "job name is empty");
    } else if (strlen(req->job) > GA_WIRE_JOB_MAX) {
        st = GA_E_INVAL;
        snprintf(why, sizeof why, "job name longer than %u bytes", GA_WIRE_JOB_MAX);
    } else if (req->incarnation == 0) {
        st = GA_E_INVAL;
        snprintf(why, sizeof why, "incarnation is 0 (must be nonzero; a restarted worker uses a new one)");
    } else if (c->draining) {
        st = GA_E_DRAINING;
        snprintf(why, sizeof why, "the server is shutting down: no new joins");
    }
    if (st != GA_OK) goto done;
    job = ga_core_job(c, req->job);
    if (job && job->finished_ms && !req->resume) { /* a rerun: a fresh job in place of the finished one */
        st = ga_core_job_remove(c, job, c->opt.keep_finished, "a rank joins it again without resume", why);
        if (st == GA_E_UNAVAILABLE || st == GA_E_NOMEM) goto done; /* else gone (a directory left is logged) */
        st = GA_OK;
        job = NULL;
    }
    if (!job) {
        GA_CHECK_GOTO(create_job(c, call, req, &job, why), st, done);
    } else {
        char path[200];
        if (ga_job_config_diff(job->config, req->config, path, sizeof path)) {
            st = GA_E_JOB_CONFIG;
            snprintf(why, sizeof why, "job '%.60s' exists with a different config: field %s differs", job->name, path);
            /* Before the job's first push, ranks that disagree on it are a broken launch: every
             * one fails now rather than waiting for this rank. Later, a running job is not
             * failed by a stray Join (a rerun under its name with other settings). */
            if (!job->any_commit && !req->any_rank && req->rank < job->world && job->fault == GA_OK) {
                char what[GA_WHY_CAP];
                snprintf(what, sizeof what, "joined with another config: field %s differs", path);
                ga_core_rank_failed(job, req->rank, false, what);
            }
            goto done;
        }
    }
    if (req->any_rank) GA_CHECK_GOTO(pick_rank(job, req, why), st, done);
    if (req->rank >= job->world) {
        st = GA_E_RANK;
        snprintf(why, sizeof why, "rank %u outside [0, %u) of job '%s'", req->rank, job->world, job->name);
        goto done;
    }
    if (job->fault != GA_OK) {
        st = job->fault;
        snprintf(why, sizeof why, "%s", job->fault_why);
        goto done;
    }
    if (job->failed_incarnations && job->failed_incarnations[req->rank] == req->incarnation) {
        st = GA_E_RANK_FAILED; /* it saw the failure: only a new incarnation comes back */
        snprintf(why, sizeof why, "%s", job->rank_failure);
        goto done;
    }
    GA_CHECK_GOTO(take_rank(c, job, req->rank, req->incarnation, why), st, done);
    ga_core_rank_replaced(job);

    Gradagg__V1__JoinResponse resp = GRADAGG__V1__JOIN_RESPONSE__INIT;
    Gradagg__V1__TensorInfo *infos = ga_malloc((job->ntensors + 1) * sizeof *infos);
    Gradagg__V1__TensorInfo **ptrs = ga_malloc((job->ntensors + 1) * sizeof *ptrs);
    if (!infos || !ptrs) {
        ga_free(infos), ga_free(ptrs);
        st = GA_E_NOMEM;
        snprintf(why, sizeof why, "out of memory answering the join");
        goto done;
    }
    resp.version = job->version;
    /* A rank the open step excluded (a later rank was already added into its sum) pushes the next. */
    resp.open_step = job->async ? job->version : job->step.step + (job->step.slot[req->rank] == GA_SLOT_EXCLUDED);
    resp.rank = req->rank;
    resp.world_size = job->world;
    resp.heartbeat_ms = c->opt.rank_lost_ms / 4 ? c->opt.rank_lost_ms / 4 : 1;
    resp.acked_durable = c->opt.data_dir && c->opt.durability == GA_DURABILITY_ACKED;
    ga_core_tensor_infos(job, infos, ptrs, &resp.n_tensors);
    resp.tensors = ptrs;
    ga_call_finish(call, &resp.base, GA_OK, NULL);
    ga_free(infos), ga_free(ptrs);
    protobuf_c_message_free_unpacked(&req->base, &ga_wire_allocator);
    return;
done:
    ga_call_finish(call, NULL, st, "%s", why);
    protobuf_c_message_free_unpacked(&req->base, &ga_wire_allocator);
}

/* ---- Leave ---- */

/* A worker's reason as a log line and a message may carry it: at most 200 bytes, printable
 * ASCII (anything else becomes '?'), "no reason given" when empty. Static buffer: loop thread. */
static const char *reason_text(const char *reason)
{
    static char out[201];
    size_t n = 0;
    for (; reason && reason[n] && n < sizeof out - 1; n++)
        out[n] = reason[n] >= 0x20 && reason[n] < 0x7f ? reason[n] : '?';
    out[n] = '\0';
    return n ? out : "no reason given";
}

void ga_core_leave(ga_core *c, ga_call *call, Gradagg__V1__LeaveRequest *req)
{
    char why[GA_WHY_CAP];
    ga_status st = GA_OK;
    ga_job *job = ga_core_job_named(c, req->job, &st, why);
    if (!job) goto done;
    bool saw_failure = false; /* an incarnation a rank's failure was reported to may still leave */
    if (req->rank < job->world) {
        ga_member *m = &job->members[req->rank];
        if (m->incarnation == req->incarnation && req->incarnation != 0 && m->left) goto ok; /* said twice */
        saw_failure = job->failed_incarnations && job->failed_incarnations[req->rank] == req->incarnation &&
                      m->incarnation == req->incarnation;
    }
    if (!saw_failure) GA_CHECK_GOTO(ga_job_member_check(job, req->rank, req->incarnation, why, sizeof why), st, done);
    /* A rank that fails, or one told of a failure, is gone, but its step waits for the rank (its
     * restart), unless the job goes on without failed ranks. */
    bool failing = req->failed && !saw_failure, waited = (failing && !ga_core_rank_goes_on(job)) || saw_failure;
    /* 2: left as failed (elastic: gone, and the job not finished), 1: gone */
    ga_journal_member change = {req->rank, waited || (failing && job->min_world > 0) ? 2 : 1, req->incarnation};
    GA_CHECK_GOTO(ga_persist_member(job, &change, why), st, done);
    ga_core_touch(c, job, req->rank);
    job->last_leave_clean = !failing && !saw_failure;
    if (failing || saw_failure) {
        job->members[req->rank].left = true;
        job->members[req->rank].failed_left = true;
    }
    if (failing) {
        char what[GA_WHY_CAP];
        snprintf(what, sizeof what, "failed: %s", reason_text(req->reason));
        if (ga_core_rank_failed(job, req->rank, false, what)) ga_core_member_gone(job, req->rank);
    } else if (!saw_failure) {
        ga_core_member_gone(job, req->rank);
    }
    ga_core_rank_replaced(job);
    ga_core_job_check_finished(job);
ok:;
    Gradagg__V1__LeaveResponse resp = GRADAGG__V1__LEAVE_RESPONSE__INIT;
    ga_call_finish(call, &resp.base, GA_OK, NULL);
    protobuf_c_message_free_unpacked(&req->base, &ga_wire_allocator);
    return;
done:
    ga_call_finish(call, NULL, st, "%s", why);
    protobuf_c_message_free_unpacked(&req->base, &ga_wire_allocator);
}

/* ---- cancel / drain ---- */

void ga_core_cancel(ga_core *c, ga_call *call)
{
    if (!ga_core_pull_cancel(c, call)) ga_core_init_cancel(c, call);
}

void ga_core_drain(ga_core *c, void (*done)(void *arg), void *arg)
{
    if (c->draining) return;
    c->draining = true;
    c->drain_done = done;
    c->drain_arg = arg;
    for (size_t i = 0; i < c->njobs; i++) {
        ga_job *job = c->jobs[i];
        uv_timer_stop(job->timer);
        /* Inits are refused from now on: no tensor an awaiting init waits for can come. */
        ga_core_inits_end(job, GA_E_DRAINING,
                          "the server is shutting down: the tensors this init awaits will not be created here");
        if (job->dir)
            ga_persist_final(job); /* the open step's commits are in the journal */
        else if (!job->async && job->fault == GA_OK && job->step.committed > 0 && !job->uplink)
            ga_core_step_close(job, false); /* a relay's stays open: its workers push it to the next relay */
    }
    drain_finish(c);
}
