/* The core: every job, its members, steps, tensors and waiting pulls. Single-threaded: every
 * function here runs on the loop thread, so no lock guards this state. Heavy math (decode_add,
 * optimizer, delta encoding) runs through the store on libuv's thread pool, one task per job at a
 * time, and returns to the loop. Every call handed to the core is finished by it exactly once
 * (rpc.h). Semantics: docs/design.md, "Jobs, steps and versions", and docs/protocol.md.
 *
 * core/ is one module in several files: the request handlers and their helpers share
 * core_internal.h and job.h and call each other freely (core.c: join, leave, status, cancel,
 * drain; core_init.c: tensor creation; core_push.c: pushes, steps and math tasks; core_pull.c:
 * pulls; core_ranks.c: failed and lost ranks; core_life.c: a job's end; core_persist.c: journal,
 * checkpoints and restore; core_status.c, core_metrics.c: what it reports; core_relay.c with
 * relay.c and uplink.c: the node relay role). relay.h is public too (a relay's settings, parsed
 * by the server); step.h (a sync step's commit order) and task.h (a job's math queue) are the
 * core's private state machines.
 * May use: base, store, bundle, persist, metrics, transport (it finishes calls: rpc.h); kernels/,
 * proto/, client/ (a relay's upstream member is an SDK client), libuv. */
#ifndef GA_CORE_H
#define GA_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/base.h"
#include "bundle/bundle.h"
#include "ga_exec.h"
#include "metrics/metrics.h"
#include "persist/persist.h"
#include "relay.h"
#include "transport/transport.h"

typedef struct ga_core ga_core;

typedef struct ga_core_options {
    uint32_t version;           /* sizeof(ga_core_options) */
    ga_backend backend;         /* where parameters, sums and optimizer state live */
    int threads;                /* OpenMP threads for the math; 0 = all */
    uint32_t max_jobs;
    uint32_t max_tensors;       /* per job */
    uint64_t max_memory_bytes;  /* parameters, state and buffered payloads, all jobs */
    size_t pull_chunk_bytes;    /* payload bytes per PullChunk */
    uint32_t default_deadline_ms; /* straggler policy when a job's config gives none */
    uint32_t default_quorum;
    /* A rank's holder that made a call (or waited in a pull) within this many ms keeps the
     * rank against a Join with another incarnation (GA_E_RANK_HELD); after it, or once the
     * holder left, the new incarnation replaces it and the old one's calls get GA_E_STALE. */
    uint32_t member_lease_ms;
    uint64_t max_elements;      /* parameters per job, all its tensors together */
    /* Persistence (core_persist.c). data_dir NULL: none (unit tests). Else every job lives in
     * <data_dir>/job-<name>-<hash>/: a journal of everything acknowledged, and checkpoints every
     * checkpoint_steps versions or checkpoint_seconds (0 = not by that), of which the newest
     * checkpoint_keep are kept. Borrowed: must outlive the core. */
    const char *data_dir;
    uint32_t checkpoint_steps, checkpoint_seconds, checkpoint_keep;
    ga_journal_sync journal_sync;
    ga_durability durability; /* ACKED: every acknowledged push journaled; CHECKPOINT: none */
    /* A joined rank that makes no call, waits in none and sends no heartbeat this long is lost
     * (core_ranks.c): its job fails, or goes on without it by its straggler policy. Clients are
     * told to heartbeat every rank_lost_ms / 4. */
    uint32_t rank_lost_ms;
    /* A finished job (every rank left as finished) is removed this many seconds later, or when
     * a rank joins it again without resume (core_life.c); keep_finished moves its directory
     * aside (<dir>.finished-<unix ms>, not restored) instead of deleting it. */
    uint32_t finished_retention_s;
    bool keep_finished;
    /* A job that never got a push and has no live rank is removed this many seconds after its
     * last rank went (core_life.c); one client host may have created at most this many such jobs
     * (a Join creating one more: GA_E_LIMIT), a host in trusted_hosts any number. So job slots
     * cannot be taken for good. */
    uint32_t unused_job_expiry_s;
    uint32_t max_unused_jobs_per_client;
    uint32_t journal_copies; /* files each journal segment is written to: 1, or 2 (journal.h) */
    /* Descriptors the open journals may hold (fdlimit.h): a job whose journal would pass it is
     * not created (GA_E_LIMIT). 0 = no limit. */
    uint64_t journal_fds;
    /* A node relay (relay.h, docs/relay.md): every job is the node's part of an upstream job.
     * Borrowed: must outlive the core. NULL: a server. Needs data_dir NULL. */
    const struct ga_relay_options *relay;
    /* With bearer tokens on (tokens): the unused jobs one token's Joins may have created, a
     * token's scope being its job and the job's lanes (ga_lane.h). */
    bool tokens;
    uint32_t max_unused_jobs_per_token;
    /* Client hosts the per-host cap above does not apply to (a relay, a NAT). Borrowed; NULL: none. */
    const ga_host_set *trusted_hosts;
    /* Math tasks run at once (libuv's thread pool, the server's --math-tasks): the store's scratch
     * pool (store.h) holds what that many applies use, GA_STORE_SCRATCH_APPLY_BYTES each. 0 = the
     * pool's default. */
    uint32_t math_tasks;
} ga_core_options;
#define GA_CORE_OPTIONS_INIT \
    {sizeof(ga_core_options), GA_BACKEND_CPU, 0, 64, 4096, 16ull << 30, 1u << 20, 0, 0, 10000, 1ull << 32, NULL, \
     100, 300, 3, GA_JOURNAL_SYNC_STEP, GA_DURABILITY_ACKED, 10000, 3600, false, 60, 16, 1, 0, NULL, false, 16, NULL, 0}

/* Jobs refused at the restore for a damaged journal (core_persist.c). */
uint64_t ga_core_damaged_journals(const ga_core *c);

/* The memory budget the transport takes unfinished streams' chunks from (any thread; budget.h). */
ga_budget *ga_core_budget(ga_core *c);

/* Borrows loop (must outlive the core). Errors: GA_E_CONFIG, GA_E_NO_CUDA, GA_E_NO_DEVICE,
 * GA_E_NOMEM. */
ga_status ga_core_create(const ga_core_options *opt, uv_loop_t *loop, ga_core **out);
/* After ga_core_drain's done ran (or before any call was handed in). NULL is a no-op. Closes
 * the jobs' timers: their close callbacks free the last of the core's memory, so run the loop
 * once more (uv_run) before uv_loop_close. */
void ga_core_destroy(ga_core *c);

/* A node relay's core (ga_core_options.relay): maps the global rank a request names (Join,
 * Leave, Pull, Heartbeat, a push or init bundle) to its job's local one, in place, before the
 * handler below gets it; a Join of a new job also fixes the job's place (relay.h). GA_E_RANK
 * for a rank of another node, GA_E_CONFIG for a Join a relay cannot carry; a request of a job
 * that does not exist is left as it is (its handler refuses it). Loop thread. */
ga_status ga_core_relay_map(ga_core *c, ga_method_id m, void *payload, char *why, size_t cap);
/* The same for a stream's first chunk: its job's name and rank. */
ga_status ga_core_relay_map_rank(ga_core *c, const char *job, uint32_t *rank, char *why, size_t cap);

/* Request handlers. Each takes the message or bundle and finishes the call (now or later). */
void ga_core_join(ga_core *c, ga_call *call, Gradagg__V1__JoinRequest *req);
void ga_core_leave(ga_core *c, ga_call *call, Gradagg__V1__LeaveRequest *req);
void ga_core_init(ga_core *c, ga_call *call, ga_init *init);
void ga_core_push(ga_core *c, ga_call *call, ga_push *push);
/* The first chunk of a Push or InitTensors stream (whose end the core has not seen): refuses the
 * stream at once (ga_call_refuse) when its job does not exist, (rank, incarnation) is not a
 * member, the job failed or the server is draining, with the status and message its end would
 * get. Borrows job; the caller holds the call. */
void ga_core_stream_check(ga_core *c, ga_call *call, const char *job, uint32_t rank, uint64_t incarnation);
void ga_core_pull(ga_core *c, ga_call *call, Gradagg__V1__PullRequest *req);
void ga_core_status(ga_core *c, ga_call *call, Gradagg__V1__StatusRequest *req);       /* core_status.c */
void ga_core_list_jobs(ga_core *c, ga_call *call, Gradagg__V1__ListJobsRequest *req); /* core_status.c */
void ga_core_heartbeat(ga_core *c, ga_call *call, Gradagg__V1__HeartbeatRequest *req); /* core_ranks.c */
void ga_core_delete_job(ga_core *c, ga_call *call, Gradagg__V1__DeleteJobRequest *req); /* core_life.c */
/* The client of `call` (a waiting pull or health watch) has gone: finish it
 * now. Unknown calls are ignored. */
void ga_core_cancel(ga_core *c, ga_call *call);

/* Start-up, before any call: restores every job found under data_dir from its newest valid
 * checkpoint (corrupt ones are skipped, logged and counted) and replays its journal, so the
 * server holds exactly what it had acknowledged. Without data_dir a no-op. Errors (GA_E_IO,
 * GA_E_NOMEM) with a message; a job that cannot be restored is skipped with a log line. */
ga_status ga_core_restore(ga_core *c, char *why, size_t cap);

/* SIGTERM: refuse new joins, inits and pushes (GA_E_DRAINING). With persistence, the open step
 * stays open (its commits are in the journal; the restarted server goes on with it) and every
 * job gets a final checkpoint; without, every open sync step that has at least one commit
 * closes with what it has (but a node relay's: its workers push it again to the relay that
 * replaces this one, docs/relay.md). Then answer the pulls that can be answered and finish the rest with
 * GA_E_DRAINING, and run done(arg) on the loop thread once no math or checkpoint is in flight
 * (before ga_core_drain returns when none is). Pulls that arrive later are answered when their
 * version exists, else refused with GA_E_DRAINING. Once. */
void ga_core_drain(ga_core *c, void (*done)(void *arg), void *arg);

/* Appends the job families of docs/metrics.md (gradagg_jobs, per-job versions, steps and step
 * latency, received bytes per codec, workers by state, stragglers, late and duplicate pushes,
 * checkpoints, held bytes) to t. Borrows t. Loop thread (the admin server's scrape). */
void ga_core_metrics(const ga_core *c, ga_metrics_text *t);

#endif
