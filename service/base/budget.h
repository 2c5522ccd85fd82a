/* The server's memory budget (--max-memory-mb) as every thread sees it. The core (loop thread)
 * holds parameters, optimizer state, publications and the bundles its steps hold; it publishes
 * that figure here. Unfinished client streams hold chunks on completion-queue threads, before
 * the core ever sees them: each chunk is taken from the budget as it arrives, before it is kept,
 * and given back when its bundle is freed or the core takes the bundle over. So no client can
 * make the server hold more than the budget, whatever it sends and however long it waits
 * (docs/reliability.md, "Memory"). */
#ifndef GA_BUDGET_H
#define GA_BUDGET_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ga_status.h"

typedef struct ga_budget {
    uint64_t max;            /* bytes; set once by ga_budget_init */
    _Atomic uint64_t core;   /* the core's bytes as it last published them */
    _Atomic uint64_t streams; /* bytes taken by chunks of streams the core has not taken over,
                                 and the room of every message gRPC may be receiving */
    void (*full)(void *arg);  /* called (any thread) when a take finds no room: time to take memory back */
    void *full_arg;
} ga_budget;

void ga_budget_init(ga_budget *b, uint64_t max_bytes);
/* fn(arg) runs on the thread of every take that finds no room (it must only signal, e.g.
 * uv_async_send). Before any take. */
void ga_budget_on_full(ga_budget *b, void (*fn)(void *arg), void *arg);
/* Any thread. Takes n bytes (for `what`: "this chunk", ...) when core + streams + n <= max;
 * otherwise GA_E_BUSY (transient: a client retries once other calls ended) with a message
 * naming the figures and --max-memory-mb, and nothing taken. */
ga_status ga_budget_take(ga_budget *b, size_t n, const char *what, char *why, size_t why_cap);
/* Any thread. Gives back bytes ga_budget_take took. */
void ga_budget_give(ga_budget *b, size_t n);
/* Loop thread: what the core holds now. */
void ga_budget_set_core(ga_budget *b, uint64_t bytes);
uint64_t ga_budget_streams(const ga_budget *b);

#endif
