/* The control loop: one libuv loop thread that owns all job, step and store state, the timers
 * and the signals. Other threads hand it work with ga_loop_post; nothing else crosses. */
#ifndef GA_LOOP_H
#define GA_LOOP_H

#include <uv.h>

#include "ga_status.h"

typedef struct ga_loop ga_loop;

/* Creates the loop (not yet running). Returns owned (ga_loop_destroy). */
ga_status ga_loop_create(ga_loop **out);
/* The libuv loop, for timers and uv_queue_work. Loop thread only. */
uv_loop_t *ga_loop_uv(ga_loop *l);
/* Runs fn(arg) on the loop thread, in posting order. Any thread; never blocks for long.
 * Returns GA_OK, or GA_E_NOMEM / GA_E_DRAINING (after ga_loop_stop): then fn will not run. */
ga_status ga_loop_post(ga_loop *l, void (*fn)(void *arg), void *arg);
/* Runs the loop on the calling thread until ga_loop_stop. */
void ga_loop_run(ga_loop *l);
/* Makes ga_loop_run return once the callbacks posted before it have run. Loop thread only. */
void ga_loop_stop(ga_loop *l);
/* Frees the loop after ga_loop_run returned. NULL is a no-op. */
void ga_loop_destroy(ga_loop *l);

#endif
