/* The open sync step's slots and rank-order hand-out (step.h). */
#include "step.h"

#include <string.h>

#include "ga_alloc.h"

ga_status ga_step_init(ga_step *s, uint32_t world)
{
    *s = (ga_step){.world = world};
    s->slot = ga_calloc(world, 1);
    s->held = ga_calloc(world, sizeof *s->held);
    if (!s->slot || !s->held) {
        ga_step_free(s);
        return GA_E_NOMEM;
    }
    return GA_OK;
}

void ga_step_free(ga_step *s)
{
    if (s->held)
        for (uint32_t r = 0; r < s->world; r++) ga_push_free(s->held[r]);
    ga_free(s->held);
    ga_free(s->slot);
    *s = (ga_step){0};
}

void ga_step_open(ga_step *s, uint64_t step)
{
    memset(s->slot, GA_SLOT_OPEN, s->world);
    s->step = step;
    s->next = 0;
    s->handed_to = 0;
    s->committed = 0;
    s->weight = 0;
    s->deadline_fired = false;
    s->lr_mixed = false;
}

void ga_step_commit(ga_step *s, uint32_t rank, ga_push *push)
{
    s->slot[rank] = GA_SLOT_COMMITTED;
    s->held[rank] = push;
    s->committed++;
    s->weight += push->weight;
}

void ga_step_exclude(ga_step *s, uint32_t rank)
{
    if (s->slot[rank] == GA_SLOT_OPEN) s->slot[rank] = GA_SLOT_EXCLUDED;
}

bool ga_step_reinclude(ga_step *s, uint32_t rank)
{
    if (s->slot[rank] == GA_SLOT_OPEN) return true;
    if (s->slot[rank] != GA_SLOT_EXCLUDED || s->handed_to > rank) return false;
    s->slot[rank] = GA_SLOT_OPEN;
    if (s->next > rank) s->next = rank;
    return true;
}

uint32_t ga_step_exclude_missing(ga_step *s)
{
    uint32_t missing = 0;
    for (uint32_t r = 0; r < s->world; r++)
        if (s->slot[r] == GA_SLOT_OPEN) s->slot[r] = GA_SLOT_EXCLUDED, missing++;
    return missing;
}

ga_push *ga_step_next(ga_step *s, uint32_t *rank)
{
    if (s->committed < s->hold_below) return NULL;
    while (s->next < s->world) {
        uint32_t r = s->next;
        if (s->slot[r] == GA_SLOT_OPEN) return NULL;
        s->next++;
        if (s->slot[r] != GA_SLOT_COMMITTED) continue;
        ga_push *p = s->held[r];
        s->held[r] = NULL;
        s->slot[r] = GA_SLOT_HANDED;
        s->handed_to = r + 1;
        *rank = r;
        return p;
    }
    return NULL;
}

bool ga_step_complete(const ga_step *s)
{
    for (uint32_t r = 0; r < s->world; r++)
        if (s->slot[r] == GA_SLOT_OPEN) return false;
    return true;
}

bool ga_step_has(const ga_step *s, uint32_t rank)
{
    return s->slot[rank] == GA_SLOT_COMMITTED || s->slot[rank] == GA_SLOT_HANDED;
}
