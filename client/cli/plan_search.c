/* The planner's search over shard counts, relays, lanes and codec pairs (plan.h). */
#include <math.h>
#include <stdio.h>

#include "plan.h"

/* Better under the tie rules: fewer shards, then no relays, then fewer lanes, then the step. */
static bool simpler(const plan_setup *a, const plan_estimate *ea, const plan_setup *b, const plan_estimate *eb)
{
    if (a->shards != b->shards) return a->shards < b->shards;
    if (a->relays != b->relays) return !a->relays;
    if (a->lanes != b->lanes) return a->lanes < b->lanes;
    return ea->step_s < eb->step_s;
}

int plan_recommend(const plan_setup *base, const plan_space *space, const plan_costs *c, plan_setup *best,
                   plan_estimate *e, char *msg, size_t cap)
{
    uint32_t G = base->ranks_per_node ? base->ranks_per_node : 1;
    uint32_t shard_list[8], nshard = 0;
    if (space->shards > 0) {
        shard_list[nshard++] = (uint32_t)space->shards;
    } else {
        for (uint32_t s = 1; s <= space->max_shards && nshard < 8; s *= 2) shard_list[nshard++] = s;
    }
    int relay_list[2] = {0, 1}, nrelay = 2;
    if (space->relays >= 0) relay_list[0] = space->relays, nrelay = 1;
    else if (G == 1) nrelay = 1;
    int lane_list[4] = {1, 4, 8, 16}, nlane = 4; /* those past 64 with the shards are refused */
    if (space->lanes > 0) lane_list[0] = space->lanes, nlane = 1;

    /* Pass 1: the fastest step of all; pass 2: the simplest candidate that is good enough. */
    double fastest = INFINITY;
    plan_setup fast_setup = *base;
    plan_estimate fast_est = {0};
    char why[256] = "no codec pair to choose from";
    for (int pass = 0; pass < 2; pass++) {
        bool found = false;
        double enough = space->target_step_s > 0 ? space->target_step_s : fastest * 1.10;
        for (size_t p = 0; p < space->npairs; p++)
            for (uint32_t si = 0; si < nshard; si++)
                for (int ri = 0; ri < nrelay; ri++)
                    for (int li = 0; li < nlane; li++) {
                        plan_setup s = *base;
                        s.push = space->pairs[p]->push, s.pull = space->pairs[p]->pull;
                        s.shards = shard_list[si], s.relays = relay_list[ri] != 0, s.lanes = (uint32_t)lane_list[li];
                        if (s.colocate) s.shards = s.world / G; /* colocated: one shard per node */
                        plan_estimate x;
                        if (plan_estimate_step(&s, c, &x, why, sizeof why) != 0) continue;
                        if (pass == 0) {
                            if (x.step_s < fastest) fastest = x.step_s, fast_setup = s, fast_est = x;
                        } else if (x.step_s <= enough && (!found || simpler(&s, &x, best, e))) {
                            *best = s, *e = x, found = true;
                        }
                    }
        if (pass == 0 && isinf(fastest)) {
            snprintf(msg, cap, "%s", why);
            return -1;
        }
        if (pass == 1 && !found) { /* the target is out of reach: the fastest, flagged */
            *best = fast_setup, *e = fast_est;
            return 1;
        }
    }
    return 0;
}
