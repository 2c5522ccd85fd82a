/* A job's math queue: tasks that use the job's store run one at a time, in the order they were
 * queued, on libuv's thread pool; each task's result is applied on the loop thread before the
 * next one starts. So the store is touched by one thread at a time, and the loop may use it
 * whenever the queue is idle or from a task's done callback. */
#ifndef GA_TASK_H
#define GA_TASK_H

#include <stdbool.h>
#include <uv.h>

typedef struct ga_task ga_task;
typedef struct ga_taskq ga_taskq;

struct ga_task {
    void (*work)(ga_task *t); /* thread pool: the job's store and the task's own fields only */
    void (*done)(ga_task *t); /* loop thread: applies the result and frees the task */
    ga_task *next;            /* private to the queue */
    uv_work_t req;            /* private to the queue */
    ga_taskq *queue;          /* private to the queue */
};

struct ga_taskq {
    uv_loop_t *loop;
    ga_task *head, *tail; /* queued, head running when `running` */
    bool running;
    void (*idle)(void *arg); /* loop thread: runs whenever the queue has drained */
    void *idle_arg;
    /* Start-up replay (core_persist.c): tasks run on the calling thread, work then done, at
     * once, so the journal is replayed in order without running the loop. */
    bool run_inline;
};

/* Loop thread only, all of them. */
void ga_taskq_init(ga_taskq *q, uv_loop_t *loop, void (*idle)(void *arg), void *arg);
/* Takes t (its done callback frees it). Starts it at once when the queue is idle. */
void ga_taskq_push(ga_taskq *q, ga_task *t);
/* No task queued or running. */
bool ga_taskq_idle(const ga_taskq *q);

#endif
