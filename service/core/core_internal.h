/* What the core's files share: the core itself and the helpers between the request handlers
 * (core.c: join, leave, status, cancel, drain; core_push.c: pushes, steps and the math tasks;
 * core_init.c: tensor creation; core_pull.c: pulls). Loop thread only. */
#ifndef GA_CORE_INTERNAL_H
#define GA_CORE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"
#include "core.h"
#include "job.h"
#include "relay.h"

#define GA_WHY_CAP 320

struct ga_core {
    ga_core_options opt;
    uv_loop_t *loop;
    ga_job **jobs;
    size_t njobs, jobs_cap;
    uint64_t held_bytes; /* push and init bundles (held_bytes) held by steps and queued tasks, all jobs */
    ga_budget budget;    /* --max-memory-mb as the completion-queue threads see it (budget.h) */
    uv_check_t *accounting; /* publishes the core's bytes to the budget once per loop turn */
    uv_async_t *reclaim;    /* a take found the budget full: end the pulls pinning old versions */
    bool draining, drained;
    bool replaying;          /* ga_core_restore is replaying a journal: no member checks, no acks */
    uint64_t corrupt_checkpoints; /* skipped at restore */
    uint64_t damaged_journals;    /* jobs refused at restore for a damaged journal */
    uint64_t journal_copy_reads;  /* records the restore read from a segment's copy (journal.h) */
    _Atomic uint64_t pinned;      /* superseded blobs still held by pulls sending them (blob.h) */
    uint64_t pulls_reclaimed;     /* such pulls ended to take their memory back */
    uint64_t overflows;           /* jobs failed because a step overflowed (NaN or Inf) */
    void (*drain_done)(void *arg);
    void *drain_arg;
    uv_timer_t *lease_timer; /* core_ranks.c: lapsed member leases */
    uint64_t adopted;        /* bundles that reached the core (ga_core_adopt): the sweep's sign of work */
    uint64_t adopted_swept;  /* `adopted` at the previous sweep */
    ga_histogram journal_seconds; /* core_persist.c: each journal write (and its sync) before an ack */
    /* A relay (core_relay.c): the place of the job the Join being handled names, which
     * ga_core_relay_map worked out before the Join reached the core. */
    ga_relay_place relay_join_place;
};

ga_job *ga_core_job(ga_core *c, const char *name);
/* The ready tensors of job as TensorInfo messages into infos / ptrs (job->ntensors entries at
 * most), borrowing its names and shapes; *count of them (core_status.c). */
void ga_core_tensor_infos(const ga_job *job, Gradagg__V1__TensorInfo *infos, Gradagg__V1__TensorInfo **ptrs,
                          size_t *count);
/* ga_core_job, and when there is no such job: NULL with *st = GA_E_UNKNOWN_JOB and the message
 * in why[0..GA_WHY_CAP). */
ga_job *ga_core_job_named(ga_core *c, const char *name, ga_status *st, char *why);
/* Bytes held by every job's store, the bundles the core holds, the superseded versions pulls
 * still pin, and the store's scratch pool. */
uint64_t ga_core_own_bytes(const ga_core *c);
/* Those and what unfinished streams and messages being received hold (budget.h): what
 * --max-memory-mb bounds. */
uint64_t ga_core_bytes(const ga_core *c);
/* A stream's bundle reaches the core: its reservation (`taken`, budget.h) moves from the
 * budget's streams to the core's published bytes, so that the core's own checks do not count
 * it twice and the completion-queue threads never see it missing. */
void ga_core_adopt(ga_core *c, size_t taken);
/* Publishes the core's own bytes (stores and held bundles) to the budget. */
void ga_core_publish_bytes(ga_core *c);
/* The rank made a call now. */
void ga_core_touch(ga_core *c, ga_job *job, uint32_t rank);
/* A job's task queue went idle: finishes a drain once every queue is. */
void ga_core_job_idle(void *job);
/* A store call failed: the job refuses further work with `st` and this message; its waiting
 * pulls are finished with it. */
void ga_core_job_fault(ga_job *job, ga_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Rank `rank` is gone (a Leave, or lost under a policy that goes on without it): the open sync
 * step goes on without it. */
void ga_core_member_gone(ga_job *job, uint32_t rank);

/* Failed ranks (core_ranks.c). A rank failed (lost: its lease lapsed; else a failed Leave),
 * `what` says how: the job goes on without it when its straggler policy allows (returns true),
 * else every incarnation that is a member now gets GA_E_RANK_FAILED from now on, waiting calls
 * at once (returns false). */
bool ga_core_rank_failed(ga_job *job, uint32_t rank, bool lost, const char *what);
/* The job's straggler policy closes steps without some ranks (a deadline and a quorum below
 * the world size): it goes on without a failed rank. */
bool ga_core_rank_goes_on(const ga_job *job);
/* After a member change: forgets the failure once every incarnation it was reported to was
 * replaced or left (a relay's job then joins upstream again: ga_core_relay_resume). */
void ga_core_rank_replaced(ga_job *job);
/* A relay's upstream job failed (`why`, the upstream's message): every incarnation that is a
 * member here gets GA_E_RANK_FAILED, as after a rank of its own failed, until it is replaced. */
void ga_core_job_failed_upstream(ga_job *job, const char *why);
/* The periodic check of the members' leases (every rank_lost_ms / 4), and its end. */
ga_status ga_core_lease_start(ga_core *c);
void ga_core_lease_stop(ga_core *c);

/* A job's life (core_life.c). After a member change: the job finished when every rank joined
 * and left as finished (job->finished_ms); an elastic job, when every rank that joined did. */
void ga_core_job_check_finished(ga_job *job);
/* Removes a job now: its store, journal, checkpoints (its directory, or moved aside when keep)
 * and metric series; `because` is logged. GA_E_UNAVAILABLE (retryable) while a task of it runs
 * or a call waits in it; GA_E_IO when its directory cannot be removed (the job is gone then). */
ga_status ga_core_job_remove(ga_core *c, ga_job *job, bool keep, const char *because, char *why);
/* The lease sweep's other half: removes finished jobs past --finished-job-retention-s. */
void ga_core_jobs_expire(ga_core *c);

/* Sync steps (core_push.c). */
void ga_core_step_advance(ga_job *job);   /* hands out bundles that are next in rank order */
void ga_core_step_try_close(ga_job *job); /* closes the step when complete, or at the deadline with quorum */
void ga_core_step_close(ga_job *job, bool by_deadline); /* closes with what it has (>= 1 commit) */
/* Excludes from the open step the ranks that left and, in an elastic job, those that never joined. */
void ga_core_step_exclude_absent(ga_job *job);

/* Persistence (core_persist.c). Each append returns GA_E_IO with a message when the journal
 * cannot take the record: the caller refuses the request and changes nothing. No-ops without
 * a data dir or while replaying. */
/* Creates a job (limits, store, persistence) and adds it to the core; why names the cause. */
ga_status ga_core_job_create(ga_core *c, const char *name, const Gradagg__V1__JobConfig *cfg, ga_job **out, char *why);
/* Removes a job that has no call, task or pull (a failed restore) and destroys it. */
void ga_core_job_drop(ga_core *c, ga_job *job);
ga_status ga_persist_job(ga_job *job, char *why);                    /* a new job: its dir, journal, JOB record */
ga_status ga_persist_init(ga_job *job, const ga_init *init, char *why); /* before tensors are created */
ga_status ga_persist_commit(ga_job *job, uint64_t seq, const ga_push *push, char *why); /* before the ack */
void ga_persist_step_closed(ga_job *job, uint64_t step, bool complete); /* CLOSE record / STEP sync */
ga_status ga_persist_member(ga_job *job, const ga_journal_member *change, char *why); /* a Leave, a return */
/* Renames a job directory to "<dir>.<kind>-<unix ms>" (the name in aside[0..cap)), which no
 * restore reads; GA_E_IO with why when the rename fails. */
ga_status ga_persist_put_aside(const char *dir, const char *kind, char *aside, size_t cap, char *why);
/* Replays a MEMBER record as the live Leave or Join made it (core.c). */
ga_status ga_core_member_replay(ga_job *job, const ga_journal_member *change, char *why, size_t cap);
void ga_persist_applied(ga_job *job, uint64_t version);  /* queued the apply of version: checkpoint when due */
void ga_persist_final(ga_job *job);                      /* drain: the last checkpoint */

/* Pulls (core_pull.c). */
/* Answers waiting pulls whose version exists. Only where no apply runs (an apply's done, or the
 * job's queue idle): an answer takes references to the published blobs, which a running apply
 * may be rewriting in place (store.h ga_store_apply_in_place). */
void ga_core_pulls_serve(ga_job *job);
/* Answers or refuses every waiting pull of the job: answerable ones get their version,
 * the others `st` with the message. */
void ga_core_pulls_end(ga_job *job, ga_status st, const char *why);
bool ga_core_pull_cancel(ga_core *c, ga_call *call);
/* Forgets the answered pulls that are sent, and ends the ones still sending a superseded version
 * (GA_E_BUSY: they pull again), oldest first, while the server holds more than --max-memory-mb
 * or, with `full`, because a take found no room: what they pin is the first memory a full
 * server takes back. */
void ga_core_pulls_reclaim(ga_job *job, bool full);
/* core_init.c: the parked awaiting inits (await_values) finished with st, or the one of call
 * as cancelled (false: not parked). */
void ga_core_inits_end(ga_job *job, ga_status st, const char *why);
/* Parks an init until its tensors exist (takes init), and runs again every parked init whose
 * tensors are all registered now. */
void ga_core_init_park(ga_job *job, ga_call *call, ga_init *init);
void ga_core_inits_wake(ga_core *c, ga_job *job);

/* A node relay's job (core_relay.c, relay.h). */
/* After the first Join created the job: starts its upstream member. */
ga_status ga_core_relay_attach(ga_job *job, ga_call *call, const Gradagg__V1__JoinRequest *req, char *why);
/* An init of a relay job whose tensors do not hold the upstream version yet (checked whole,
 * check_init): parked; the first that can (node 0: one with values; else any) starts the
 * upstream init with its tensors, which are registered now. Takes init. */
void ga_core_relay_init(ga_job *job, ga_call *call, ga_init *init);
/* A closed step's sums (out[0..n), taken) go upstream as the push of `weight` workers; the
 * upstream's next version is published as version step + 1 when it comes back. */
void ga_core_relay_step(ga_job *job, uint64_t step, uint32_t weight, ga_published *out, size_t n, uint64_t start_ns);
/* A push of `step`, before the open one and not committed here, reached the upstream sum
 * through this node before the relay restarted: a duplicate (docs/relay.md, "Restart"). */
bool ga_core_relay_counted(const ga_job *job, uint64_t step);
/* The job finished or failed: its upstream member leaves so (once until it joins again). */
void ga_core_relay_leave(ga_job *job);
/* A relay's job whose failure was forgotten (every incarnation that saw it replaced): its
 * upstream member, which left, joins again as the same member; inits wait until the tensors
 * hold the upstream version again. No-op for a job that is not a relay's or did not leave. */
void ga_core_relay_resume(ga_job *job);
/* Before the job is destroyed: the uplink stops, without leaving (a restarted relay is the same member). */
void ga_core_relay_detach(ga_job *job);
bool ga_core_init_cancel(ga_core *c, ga_call *call);

#endif
