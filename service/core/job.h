/* A job: its configuration, members, tensor table, sync step, waiting pulls, math queue and
 * counters. Loop thread only; the store inside is used through the job's task queue (task.h).
 * The core's request handlers (core*.c) read and write these fields directly. */
#ifndef GA_JOB_H
#define GA_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "core.h"
#include "metrics/metrics.h"
#include "relay.h"
#include "step.h"
#include "store/store.h"
#include "task.h"

#define GA_JOB_MAX_WORLD 4096u
/* The most steps a rank may push past the open one (JobConfig.staleness). */
#define GA_JOB_MAX_STALENESS 32u
/* Closed steps whose contributors a job remembers (Status recent_steps). */
#define GA_JOB_STEP_RECORDS 64u
/* Replaced incarnations remembered per rank, so their calls get GA_E_STALE. */
#define GA_JOB_REPLACED 4u

typedef struct ga_member {
    uint64_t incarnation;               /* 0: the rank never joined */
    uint64_t replaced[GA_JOB_REPLACED]; /* earlier incarnations, newest first */
    bool left;
    uint64_t active_ms;     /* uv_now of its last call */
    bool unseen;            /* restored at start-up, no call since: its lease is longer (core_ranks.c) */
    uint64_t lost;          /* the incarnation whose lease lapsed, reported once (core_ranks.c); 0: none */
    bool failed_left;       /* it left as failed (core_ranks.c): the job has not finished */
    uint32_t pulls_waiting; /* a worker blocked in a pull is active */
    uint32_t inits_waiting; /* ... and one blocked in an awaiting init */
    bool has_pushed;
    uint64_t last_step; /* last committed step */
    bool has_pulled;
    uint64_t pulled_version; /* the version its last answered pull sent: its pushes' base (SSP staleness) */
    /* Sync: bit i set = step last_step - i committed by this rank. Older steps count as not
     * committed (a retry 64 steps late is refused as closed). */
    uint64_t commit_mask;
} ga_member;

/* Blocked in a call that waits for others (a pull, an awaiting init): active, lease or not. */
static inline bool ga_member_waiting(const ga_member *m) { return m->pulls_waiting > 0 || m->inits_waiting > 0; }

typedef struct ga_tensor {
    char *name;
    uint64_t *shape;
    size_t ndim;
    uint64_t elements;
    bool ready;       /* created in the store; pub holds its publication */
    ga_published pub; /* the current version's publication */
} ga_tensor;

typedef struct ga_pull_wait ga_pull_wait;
struct ga_pull_wait {
    ga_call *call;
    struct ga_job *job;
    uint32_t rank;
    uint64_t min_version;
    bool has_version;
    uint64_t have_version;
    ga_pull_wait *prev, *next;
};

/* An init with await_values whose tensors do not all exist yet (core_init.c). */
typedef struct ga_init_wait ga_init_wait;
struct ga_init_wait {
    ga_call *call;
    struct ga_init *init; /* owned */
    ga_init_wait *next;
};

typedef struct ga_job {
    struct ga_core *core;
    char *name;
    Gradagg__V1__JobConfig *config; /* as the first Join sent it (owned, ga_wire_allocator) */
    uint32_t world;
    bool async;
    uint32_t deadline_ms, quorum; /* effective straggler policy; deadline 0 = none */
    /* Elastic (min_world > 0, docs/protocol.md "Elastic jobs"): world is the most ranks; ranks
     * that are not members are not waited for, and a step closes with at least min_world
     * contributors. */
    uint32_t min_world;
    uint32_t staleness; /* pushes may name steps up to this many past the open one (SSP) */
    /* Elastic: the last rank to leave left as finished (not failed, stopped or lost), which an
     * elastic job with no member left needs to count as finished (core_life.c). */
    bool last_leave_clean;
    /* Pushes for steps after the open one (staleness > 0), in arrival order: each is committed
     * to its step when the step opens (core_push.c). */
    ga_push *ahead;
    /* The last closed steps' contributors, a ring of GA_JOB_STEP_RECORDS (core_push.c). */
    struct ga_step_record {
        uint64_t step;
        uint32_t *ranks, nranks;
    } *records;
    uint32_t records_next, records_count;
    ga_store_config store_cfg;
    ga_store *store;
    uint64_t store_bytes; /* ga_store_bytes after the last task */
    ga_member *members;   /* [world] */

    ga_tensor *tensors;
    size_t ntensors, tensors_cap;
    uint32_t *index; /* open addressing: tensor index + 1, 0 = empty */
    size_t index_cap;

    uint64_t version;  /* published */
    uint64_t target;   /* the version queued work will have published */
    bool any_commit;   /* no new tensors after the first commit */
    bool lr_mixed_logged; /* a step's ranks named different lrs: said once */
    ga_step step;      /* sync */
    uv_timer_t *timer; /* straggler deadline (sync); freed by its close callback */
    ga_taskq tasks;
    ga_pull_wait *pulls; /* waiting pulls, oldest first */
    /* Pulls answered whose messages may still be going out (core_pull.c), oldest first: each
     * call held (ga_call_hold) with the version it sends, until it is sent or reclaimed. */
    struct ga_sending_pull {
        struct ga_call *call;
        uint64_t version;
    } *sending;
    size_t nsending, sending_cap;
    ga_init_wait *init_waits; /* parked awaiting inits, oldest first */
    /* A node relay's job (relay.h, core_relay.c); uplink NULL otherwise. Every init is parked
     * until the tensors hold the upstream version (relay_ready); a closed step's sums are held
     * (relay_sums, relay_nsums) while the uplink pushes them and pulls the next version. */
    struct ga_uplink *uplink;
    ga_relay_place relay_place;
    bool relay_started, relay_ready;
    ga_published *relay_sums;
    size_t relay_nsums;
    const float **relay_ptrs;
    uint64_t relay_step;   /* the step relay_sums hold */
    uint32_t relay_weight; /* the workers they sum */
    uint64_t relay_step_start_ns;
    uint64_t relay_handed_ns;           /* when the open exchange's sums went to the uplink */
    ga_histogram relay_upstream_seconds; /* each exchange: sums handed over to version back */
    uint64_t relay_pushed_bytes, relay_pulled_bytes; /* upstream payload bytes, all exchanges */
    /* The step the relay's job opened at, and whether (counted) the steps before it up to
     * relay_counted_step reached the upstream sum through this node (a relay restarted after
     * its push): a worker's push again of such a step is a duplicate, not a late push. */
    uint64_t relay_first_step;
    bool relay_counted;
    uint64_t relay_counted_step;
    ga_status fault;     /* a store call failed: the job refuses further work */
    char fault_why[320];
    /* A rank failed (core_ranks.c): the incarnation each rank had then (0: none or gone), every
     * one of which is refused from then on with GA_E_RANK_FAILED and rank_failure; NULL when no
     * rank failed, or once every one of them was replaced or left. */
    uint64_t *failed_incarnations;
    char rank_failure[320];
    uint64_t ranks_failed, ranks_lost; /* failed Leaves and lapsed leases, for the metrics */
    uint64_t finished_ms; /* uv_now when every rank had left as finished (core_life.c); 0: not finished */
    char creator[64];     /* the client host whose Join created the job ("" when restored) */
    uint64_t unused_since_ms; /* uv_now since which it has had no push ever and no live rank; 0: not so */

    uint64_t late_pushes, deadline_closes, duplicate_pushes, steps;
    double accumulate_seconds, apply_seconds;
    uint64_t held_bytes; /* push bundles (bundle.h held_bytes) held by the step, queued tasks or the store */
    /* Bundles whose payloads the store holds in place (ga_store_accumulate_lent) until the step's
     * apply returns; freed by that apply's done, or with the job. */
    ga_push *lent;

    /* Persistence (core_persist.c): the job's directory and journal; dir NULL = none. */
    char *dir;
    ga_journal journal;
    uint64_t ckpt_queued_ms; /* uv_now when the last checkpoint was queued */
    bool ckpt_soon;          /* checkpoint at the next version (its journal was read from a copy) */
    /* seq of a CLOSE record (a step closed short) that could not be written yet; 0 = none.
     * Until it is, the journal takes nothing else (core_persist.c). */
    uint64_t close_unjournaled;

    /* Checkpoints (checkpoint.c); read by the metrics. */
    uint64_t ckpt_count, ckpt_failures;
    uint64_t ckpt_version;    /* of the newest checkpoint written or restored */
    uint64_t ckpt_unix_ms;    /* when it was written; 0 = none yet */
    double ckpt_seconds;      /* how long the newest write took */

    /* Metrics only (core_metrics.c); the counters above are shared with Status. */
    uint64_t stragglers;                      /* ranks missing from steps closed at the deadline */
    uint64_t received_bytes[GA_CODEC_COUNT];  /* committed push payloads, by codec */
    uint64_t received_fp32[GA_CODEC_COUNT];   /* the same pushes as fp32 bytes */
    uint64_t step_start_ns;                   /* uv_hrtime of the open step's first commit */
    ga_histogram step_seconds;                /* first commit to publication, sync steps */
    ga_histogram staleness_hist;              /* each applied push: its step - the version it pulled */
} ga_job;

/* The job settings a config gives: checks world_size in [1, GA_JOB_MAX_WORLD], the enums,
 * quorum <= world_size, the pull codec; fills defaults (straggler from opt). Optimizer
 * hyper-parameters are checked by ga_store_create. Errors name the field and value in why. */
typedef struct ga_job_settings {
    uint32_t world;
    bool async;
    uint32_t deadline_ms, quorum;
    uint32_t min_world, staleness;
    ga_store_config store;
} ga_job_settings;
ga_status ga_job_settings_from(const Gradagg__V1__JobConfig *cfg, const ga_core_options *opt, ga_job_settings *out,
                               char *why, size_t cap);

/* The first field where two configs differ, comparing values (an absent message equals its
 * defaults, floats by bits), as its dotted path and both values, a's first:
 * "optimizer.lr (0.100000001, not 0.0500000007)"; NULL when they are the same. */
const char *ga_job_config_diff(const Gradagg__V1__JobConfig *a, const Gradagg__V1__JobConfig *b, char *path,
                               size_t cap);

/* Creates the job and its store (the store's errors pass through; GA_E_OPTIM's message lists
 * the hyper-parameters). Copies name and config. Returns owned (ga_job_destroy). */
ga_status ga_job_create(struct ga_core *core, uv_loop_t *loop, const char *name, const Gradagg__V1__JobConfig *cfg,
                        const ga_job_settings *set, ga_job **out, char *why, size_t cap);
/* Frees everything but the timer, then closes the timer, whose close callback frees the job:
 * the loop must run once more. The task queue must be idle and no pull may wait. */
void ga_job_destroy(ga_job *job);

/* FNV-1a of a name: the tensor index's hash, and the tag of a job's data directory (a stable
 * value: directories written by one version are found by the next). */
uint64_t ga_job_name_hash(const char *name);

/* The tensor named `name`, or -1. */
long ga_job_tensor_find(const ga_job *job, const char *name);
/* Appends a tensor (not ready yet); returns its index, or -1 when out of memory. */
long ga_job_tensor_add(ga_job *job, const char *name, const uint64_t *shape, size_t ndim, uint64_t elements);
/* Drops the tensors from index `from` on (a failed creation). */
void ga_job_tensor_truncate(ga_job *job, size_t from);

/* Whether (rank, incarnation) may act in the job: GA_E_RANK, GA_E_NOT_MEMBER (never joined,
 * left, or an unknown incarnation), GA_E_STALE (a replaced incarnation), GA_E_RANK_FAILED (an
 * incarnation that was a member when a rank failed). Message in why. */
ga_status ga_job_member_check(const ga_job *job, uint32_t rank, uint64_t incarnation, char *why, size_t cap);

/* Estimated bytes a job holds per element (parameters, sum, optimizer state, publications; a
 * relay's, also its upstream member's copies): what a new tensor is checked against. */
uint64_t ga_job_bytes_per_element(const ga_job *job);

/* What a failure message says after its "job '<name>' failed: " (the last such prefix, as a
 * relay's messages nest the upstream's), or the whole text without one. Borrows text. */
const char *ga_job_failure_cause(const char *text);

#endif
