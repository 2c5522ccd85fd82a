/* The open step of a sync job: which ranks committed, which are excluded, and the order in which
 * their bundles may be accumulated. A commit of rank r is handed out for accumulation only once
 * every rank below r has been handed out or excluded, so the sum is added in rank order whatever
 * the arrival order; bundles of later ranks wait here. Pure state, loop thread only. */
#ifndef GA_STEP_H
#define GA_STEP_H

#include <stdbool.h>
#include <stdint.h>

#include "bundle/bundle.h"
#include "ga_status.h"

typedef enum ga_slot {
    GA_SLOT_OPEN = 0,      /* no commit yet */
    GA_SLOT_COMMITTED = 1, /* committed, bundle held here */
    GA_SLOT_HANDED = 2,    /* committed, bundle handed out for accumulation */
    GA_SLOT_EXCLUDED = 3   /* left, or missing when the step closed */
} ga_slot;

typedef struct ga_step {
    uint64_t step; /* the open step */
    uint32_t world;
    uint8_t *slot;      /* [world] ga_slot */
    ga_push **held;     /* [world] bundles of GA_SLOT_COMMITTED ranks */
    uint32_t next;      /* every rank below is handed out or excluded */
    uint32_t handed_to; /* 1 + the highest rank handed out; 0 when none */
    uint32_t committed; /* ranks committed (held or handed) */
    uint32_t weight;    /* the committed pushes' weights (bundle.h): what a mean divides by */
    /* The step's learning rate: that of its lowest committed rank, lr_rank (set by the core at
     * each commit); lr_mixed: two commits named different ones. */
    float lr;
    uint32_t lr_rank;
    bool lr_mixed;
    bool deadline_fired;
    /* Nothing is handed out while fewer ranks committed (an elastic job's minimum): until then a
     * rank that joins may still take part, whatever its rank. Kept across steps. */
    uint32_t hold_below;
} ga_step;

/* GA_E_NOMEM or GA_OK; opens step 0. */
ga_status ga_step_init(ga_step *s, uint32_t world);
/* Frees the held bundles and the arrays. */
void ga_step_free(ga_step *s);

/* Opens `step` with every rank open. The previous step must have been closed and drained
 * (ga_step_next returned NULL after ga_step_exclude_missing). */
void ga_step_open(ga_step *s, uint64_t step);
/* Records rank's commit (takes push). The rank's slot must be GA_SLOT_OPEN. */
void ga_step_commit(ga_step *s, uint32_t rank, ga_push *push);
/* An open rank that will not commit (it left): excluded. No-op for other slots. */
void ga_step_exclude(ga_step *s, uint32_t rank);
/* Reopens an excluded rank when no later rank was handed out yet, so it may still commit
 * without breaking rank order. Returns whether it is open now. */
bool ga_step_reinclude(ga_step *s, uint32_t rank);
/* Closing: every rank still open is excluded. Returns how many were. */
uint32_t ga_step_exclude_missing(ga_step *s);
/* The next bundle to accumulate in rank order, handed out (returns owned, *rank set), or NULL
 * while the next rank is still open, fewer than hold_below committed, or all are done. */
ga_push *ga_step_next(ga_step *s, uint32_t *rank);
/* Every rank committed or excluded. */
bool ga_step_complete(const ga_step *s);
/* Rank committed to this step (held or handed). */
bool ga_step_has(const ga_step *s, uint32_t rank);

#endif
