/* A push or an init stream as received: chunks assembled and checked on a completion-queue
 * thread (everything that needs no job state), then handed whole to the core, which commits it
 * or refuses it as one.
 *
 * bundle/ has no job state: the transport's queue threads build bundles (api/), the core commits
 * them (core/), the journal writes and replays them (persist/).
 * May use: base (the budget); kernels/ (codecs), proto/ (the chunks). */
#ifndef GA_BUNDLE_H
#define GA_BUNDLE_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "ga_codec.h"
#include "ga_methods.h"

/* The most workers one push may sum (PushChunk.weight). */
#define GA_PUSH_MAX_WEIGHT 65536u

typedef struct ga_push_chunk {
    Gradagg__V1__PushChunk *chunk; /* owned; chunk->payload.data is 4-byte aligned */
    ga_codec_id codec;             /* parsed from chunk->codec and validated */
    ga_codec_params params;
    uint32_t tensor;               /* the job's tensor index: set by the core when it accepts the push */
} ga_push_chunk;

/* What a bundle holds, and what of it is taken from the server's memory budget (push and init
 * bundles alike). */
typedef struct ga_bundle_bytes {
    size_t payload_bytes; /* the chunks' payloads (push) or values (init) */
    size_t held_bytes;    /* payloads plus each chunk's header (its unpacked message, strings
                             and part entry) */
    ga_budget *budget;    /* where held_bytes were taken from as the chunks came (NULL: none) */
    size_t budgeted;      /* of held_bytes, what is still taken: given back when freed */
} ga_bundle_bytes;

/* One rank's gradients for one step. Header fields come from the first chunk; every later
 * chunk must agree (GA_E_STREAM_MIXED). */
typedef struct ga_push {
    char *job;
    uint32_t rank;
    uint64_t incarnation;
    uint64_t step;
    bool has_lr; /* the step's learning rate (PushChunk.has_lr / lr); else the job's */
    float lr;    /* once the core accepted the push: the lr it names for its step (the job's without has_lr) */
    /* Set by the core when it accepts the push: the version its rank last pulled, from which
     * the gradients were computed (has_base false: none since the server started). */
    bool has_base;
    uint64_t base_version;
    uint32_t weight;      /* workers summed in this push (PushChunk.weight; 0 there = 1), >= 1 */
    ga_push_chunk *parts;
    size_t count, cap;
    ga_bundle_bytes bytes;
    struct ga_push *next; /* the core's lists: bundles lent to the store, pushes ahead (job.h) */
} ga_push;

typedef struct ga_init_part {
    Gradagg__V1__InitChunk *chunk; /* owned; values are `count` finite fp32 (or none) */
} ga_init_part;

typedef struct ga_init {
    char *job;
    uint32_t rank;
    uint64_t incarnation;
    ga_init_part *parts;
    size_t count, cap;
    ga_bundle_bytes bytes;
    bool await_values;    /* every chunk's await_values: creates nothing, carries no values */
} ga_init;

/* Both add functions run on a completion-queue thread; the bundles then belong to the core
 * (loop thread), which frees them. */

/* Checks one chunk without job state and appends it. Takes chunk (freed on error too).
 * *push may be NULL (a new bundle is created). On error writes a specific message to
 * why[0..why_cap) and leaves the bundle as it was. Checks: job non-empty, incarnation nonzero,
 * header agrees with earlier chunks, tensor name non-empty and at most 1024 bytes, count > 0, offset + count does not overflow, codec known and
 * its parameters valid, payload length and contents valid for `count` elements
 * (ga_codec_check_payload), bundle bytes.held_bytes within max_bytes (GA_E_LIMIT), and, when budget
 * is not NULL, the chunk's bytes taken from it (GA_E_BUSY when the server's memory is full). A
 * bundle's budget is the first chunk's. */
ga_status ga_push_add(ga_push **push, Gradagg__V1__PushChunk *chunk, size_t max_bytes, ga_budget *budget, char *why,
                      size_t why_cap);
void ga_push_free(ga_push *push); /* NULL is a no-op; gives back what is still budgeted */
/* The bundle's budget reservation handed to the caller (who gives it back once it accounts the
 * bundle itself): returns it and leaves the bundle with none. NULL: 0. */
size_t ga_push_unbudget(ga_push *push);

/* The same for init chunks: tensor name non-empty, shape non-empty with no zero dimension and a
 * product that fits, the same tensor always with the same shape, offset + count <= elements,
 * values empty or exactly 4 * count bytes of finite floats. */
ga_status ga_init_add(ga_init **init, Gradagg__V1__InitChunk *chunk, size_t max_bytes, ga_budget *budget, char *why,
                      size_t why_cap);
void ga_init_free(ga_init *init);
size_t ga_init_unbudget(ga_init *init);

/* A wire Codec as (id, params): NULL reads as codec none. Errors with a message naming `what`:
 * GA_E_CODEC (unknown id), GA_E_INVAL (topk_values/topk_indices/adapt_rounds out of range),
 * GA_E_THRESHOLD, GA_E_RATIO. Any thread. */
ga_status ga_codec_from_wire(const Gradagg__V1__Codec *w, const char *what, ga_codec_id *id, ga_codec_params *p,
                             char *why, size_t why_cap);
/* "[3, 4]" into buf[0..cap); returns buf. */
const char *ga_shape_text(const uint64_t *shape, size_t n, char *buf, size_t cap);

#endif
