/* A relay's member of the upstream job (relay.h, docs/relay.md): one thread per relayed job
 * that drives a C SDK client, so the loop never waits on the upstream network. The loop hands
 * it one command at a time (init, then one step per local step, and at the end a leave) and
 * gets each result back on the loop thread through `done`. What the node does not send of its
 * sum stays in the SDK's error-feedback residual, as in any worker. */
#ifndef GA_UPLINK_H
#define GA_UPLINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "ga_codec.h"
#include "ga_methods.h"
#include "ga_status.h"
#include "gradagg.h"
#include "relay.h"

typedef struct ga_uplink ga_uplink;

typedef struct ga_uplink_tensor {
    const char *name;
    const uint64_t *shape;
    size_t ndim;
    uint64_t elements;
} ga_uplink_tensor;

typedef struct ga_uplink_result {
    bool step; /* the result of a step (else of an init or a rejoin) */
    ga_status st;
    const char *why;      /* with an error: what failed */
    uint64_t version;     /* the upstream version params hold */
    /* After an init: the newest step this member had committed upstream (counted false: none),
     * so a restarted relay knows which of its workers' steps reached the upstream sum. */
    bool counted;
    uint64_t counted_step;
    uint64_t bytes_pushed, bytes_pulled; /* payload bytes of this command's push and pulls */
    float *const *params; /* per tensor, the upstream's published copy; owned by the uplink, valid in done */
    /* Per tensor, the compressed deltas the pull that brought `params` applied (ndeltas[i] of
     * them, in arrival order; none when it came as fp32), payloads owned by the uplink, valid in
     * done: a relay serves them on to its workers byte for byte. */
    const ga_pull_delta *const *deltas;
    const size_t *ndeltas;
} ga_uplink_result;

/* Loop thread: the result of the last command. */
typedef void (*ga_uplink_done)(void *arg, const ga_uplink_result *res);

/* For job `job` (copied) of config cfg (the workers', read at the call): the upstream member
 * is rank place->node of place->nodes with the job's optimizer, mean, pull codec and deadline, a quorum
 * of ga_relay_upstream_quorum, and an incarnation derived from the job and the node, so a relay
 * restarted in place is the same member. Its calls carry token[0..token_len) (copied, wiped when
 * freed; NULL = none) as their bearer token, and use r's TLS settings. Starts the thread; nothing
 * is sent yet. */
ga_status ga_uplink_create(const ga_relay_options *r, const ga_relay_place *place, const char *job,
                           const Gradagg__V1__JobConfig *cfg, bool resume, const char *token, size_t token_len,
                           uv_loop_t *loop, ga_uplink_done done, void *arg, ga_uplink **out, char *why, size_t cap);
/* Joins upstream, registers the tensors (copied) and inits: values (node 0: each tensor's
 * initial values, copied) or NULL (await node 0's), then pulls the current version and asks
 * which step this member committed last. done gets both. GA_E_INVAL (nothing started) while a command runs. */
ga_status ga_uplink_init(ga_uplink *u, const ga_uplink_tensor *t, size_t n, const float *const *values);
/* Pushes sums (each tensor's sum of the node's step `step`, borrowed until done) as the push of
 * `weight` workers with the relay's codec, and pulls the next version. done gets it; a version
 * other than step + 1 is an error. GA_E_INVAL while a command runs. */
ga_status ga_uplink_step(ga_uplink *u, uint64_t step, uint32_t weight, const float *const *sums);
/* Leaves upstream once the running command (if any) returned: as failed with `reason`, or as
 * finished. No done. Steps are refused from then on, until a rejoin; a second leave before it
 * is a no-op. */
void ga_uplink_leave(ga_uplink *u, bool failed, const char *reason);
/* A leave was asked for and no rejoin since. Loop thread. */
bool ga_uplink_departed(const ga_uplink *u);
/* After a leave: joins upstream again as the same member (after the leave, in order) and inits
 * the tensors of the first init, with values (node 0: the values it holds now, copied) or NULL
 * (await), then pulls the current version; done gets it, as after ga_uplink_init. GA_E_INVAL
 * while a command runs, before a first init, or when it has not left. */
ga_status ga_uplink_rejoin(ga_uplink *u, const float *const *values);
/* Stops the thread without leaving (the member stays: a relay restarted in place takes it
 * back). A command still running finishes on its own and its result is dropped. Loop thread. */
void ga_uplink_destroy(ga_uplink *u);

#endif
