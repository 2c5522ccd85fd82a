/* `gradagg plan`: sizes a deployment for one job from the cost model (plan_model.h) and prints
 * the recommendation, its step's breakdown, the alternatives and DDP's ring all-reduce, or writes
 * the matching kustomize overlay (docs/operations.md, "Size a deployment"; docs/cli.md). Needs no
 * server. */
#ifndef GA_CLI_PLAN_H
#define GA_CLI_PLAN_H

#include <stdbool.h>

#include "plan_model.h"

/* The most tensors --tensors reads. */
#define PLAN_MAX_TENSORS 1000000u

/* What the search may choose; a pinned choice is searched no further. */
typedef struct plan_space {
    int shards;          /* 0: search 1, 2, 4, ... max_shards */
    uint32_t max_shards;
    int relays;          /* -1: search (only with ranks_per_node > 1), 0 off, 1 on */
    int lanes;           /* 0: search 1, 4, 8, 16 (shards x lanes at most GA_PLACEMENT_MAX_SHARDS) */
    const plan_pair_costs *const *pairs; /* the codec pairs it may pick from */
    size_t npairs;
    double target_step_s; /* > 0: the fewest shards whose step meets it; else within 10 % of the fastest */
} plan_space;

/* The recommendation for `base` over `space`: *best (a copy of base with the choices filled in)
 * and its estimate. Ties go to fewer shards, then no relays, then fewer lanes. Returns 0, or -1
 * with the reason in msg when no candidate can be estimated. */
int plan_recommend(const plan_setup *base, const plan_space *space, const plan_costs *c, plan_setup *best,
                   plan_estimate *e, char *msg, size_t cap);

/* The command: argv after "plan" (argc of them). Returns its exit status (CLI_OK or CLI_USAGE). */
int cli_plan(int argc, char **argv, bool json);

#endif
