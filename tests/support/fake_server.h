/* An in-process stand-in for client/rpc_client.h: a tiny single-job aggregator behind the same
 * calls, with injected faults, so the SDK's retry, fold-back and pull logic can be tested
 * deterministically without a network (tests/unit/test_sdk.c). Messages cross it packed, as on the
 * wire. Not the real server: it sums in arrival order and keeps no checkpoints.
 * Thread-safe: one lock; a pull waits on a condition variable. */
#ifndef GA_FAKE_SERVER_H
#define GA_FAKE_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ga_codec.h"

/* Faults for the next calls; each counter is consumed one call at a time. */
typedef struct fake_faults {
    int join_unavailable;  /* joins answered UNAVAILABLE */
    int join_deadline;     /* joins answered DEADLINE (past the call timeout), nothing joined */
    int push_unavailable;  /* push streams refused UNAVAILABLE, nothing committed */
    int push_ack_lost;     /* push streams committed, then answered UNAVAILABLE */
    int pull_break;        /* pulls that send one chunk, then fail UNAVAILABLE */
    int late_rank;         /* >= 0: this rank's pushes get E_STEP_CLOSED and steps close without it */
} fake_faults;

/* Resets the server: no job, no faults, pull chunks of pull_chunk elements, deltas with
 * pull_codec ("none" or any codec; GA_CODEC_COUNT = always fp32). */
void fake_server_reset(size_t pull_chunk, ga_codec_id pull_codec);
void fake_server_set_faults(const fake_faults *f);

typedef struct fake_counters {
    uint64_t version, commits, duplicates, late, pulls, pulls_with_version, full_chunks, delta_chunks;
} fake_counters;
fake_counters fake_server_counters(void);

/* Copies the server's parameters of a tensor (the published copy when pulls are deltas).
 * Returns false when there is no such tensor. */
bool fake_server_params(const char *tensor, float *out, size_t n);
/* The sum of every committed push of a tensor so far (decoded), for conservation checks. */
bool fake_server_pushed_sum(const char *tensor, float *out, size_t n);
/* Frees everything the server holds. */
void fake_server_clear(void);

#endif
