/* The memory budget shared by the loop and the completion-queue threads (budget.h). */
#include "budget.h"

#include <inttypes.h>

void ga_budget_init(ga_budget *b, uint64_t max_bytes)
{
    b->max = max_bytes;
    atomic_init(&b->core, 0);
    atomic_init(&b->streams, 0);
    b->full = NULL;
    b->full_arg = NULL;
}

void ga_budget_on_full(ga_budget *b, void (*fn)(void *arg), void *arg)
{
    b->full = fn;
    b->full_arg = arg;
}

ga_status ga_budget_take(ga_budget *b, size_t n, const char *what, char *why, size_t why_cap)
{
    uint64_t streams = atomic_load_explicit(&b->streams, memory_order_relaxed);
    for (;;) {
        uint64_t core = atomic_load_explicit(&b->core, memory_order_relaxed);
        uint64_t used = core + streams;
        if ((used > b->max || n > b->max - used) && b->full) b->full(b->full_arg);
        if (used > b->max || n > b->max - used)
            return ga_status_fail(GA_E_BUSY, why, why_cap,
                                  "the server's memory is full: %" PRIu64 " bytes of jobs and held pushes, %" PRIu64
                                  " in unfinished streams and messages being received, and %s (%zu bytes) would "
                                  "pass --max-memory-mb (%" PRIu64 " bytes); retry later",
                                  core, streams, what, n, b->max);
        if (atomic_compare_exchange_weak_explicit(&b->streams, &streams, streams + n, memory_order_relaxed,
                                                  memory_order_relaxed))
            return GA_OK;
    }
}

void ga_budget_give(ga_budget *b, size_t n)
{
    atomic_fetch_sub_explicit(&b->streams, n, memory_order_relaxed);
}

void ga_budget_set_core(ga_budget *b, uint64_t bytes)
{
    atomic_store_explicit(&b->core, bytes, memory_order_relaxed);
}

uint64_t ga_budget_streams(const ga_budget *b)
{
    return atomic_load_explicit(&b->streams, memory_order_relaxed);
}
