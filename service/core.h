/* The core: every job, its members, steps, tensors and waiting pulls. Single-threaded: every
 * function here runs on the loop thread, so no lock guards this state. Heavy math (decode_add,
 * optimizer, delta encoding) runs through the store on libuv's thread pool, one task per job at a
 * time, and returns to the loop. Every call handed to the core is finished by it exactly once
 * (rpc.h). Semantics: DESIGN.md §4 and docs/protocol.md. */
#ifndef GA_CORE_H
#define GA_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "bundle.h"
#include "ga_exec.h"
#include "rpc.h"

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
} ga_core_options;
#define GA_CORE_OPTIONS_INIT \
    {sizeof(ga_core_options), GA_BACKEND_CPU, 0, 64, 4096, 16ull << 30, 1u << 20, 0, 0, 10000, 1ull << 32}

/* Borrows loop (must outlive the core). Errors: GA_E_CONFIG, GA_E_NO_CUDA, GA_E_NO_DEVICE,
 * GA_E_NOMEM. */
ga_status ga_core_create(const ga_core_options *opt, uv_loop_t *loop, ga_core **out);
/* After ga_core_drain's done ran (or before any call was handed in). NULL is a no-op. Closes
 * the jobs' timers: their close callbacks free the last of the core's memory, so run the loop
 * once more (uv_run) before uv_loop_close. */
void ga_core_destroy(ga_core *c);

/* Request handlers. Each takes the message or bundle and finishes the call (now or later). */
void ga_core_join(ga_core *c, ga_call *call, Gradagg__V1__JoinRequest *req);
void ga_core_leave(ga_core *c, ga_call *call, Gradagg__V1__LeaveRequest *req);
void ga_core_init(ga_core *c, ga_call *call, ga_init *init);
void ga_core_push(ga_core *c, ga_call *call, ga_push *push);
void ga_core_pull(ga_core *c, ga_call *call, Gradagg__V1__PullRequest *req);
void ga_core_status(ga_core *c, ga_call *call, Gradagg__V1__StatusRequest *req);
/* The client of `call` (a waiting pull or health watch) has gone: finish it
 * now. Unknown calls are ignored. */
void ga_core_cancel(ga_core *c, ga_call *call);

/* SIGTERM: refuse new joins, inits and pushes (GA_E_DRAINING), close every open sync step
 * that has at least one commit with what it has (nothing acknowledged is lost), answer the
 * pulls that can be answered and finish the rest with GA_E_DRAINING, then run done(arg) on the
 * loop thread once no math is in flight (before ga_core_drain returns when none is). Pulls
 * that arrive later are answered when their version exists, else refused with GA_E_DRAINING.
 * Once. */
void ga_core_drain(ga_core *c, void (*done)(void *arg), void *arg);

#endif
