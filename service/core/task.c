/* The per-job FIFO of store tasks on libuv's thread pool (task.h). */
#include "task.h"

#include <stddef.h>

static void start_head(ga_taskq *q);

static void run_work(uv_work_t *req)
{
    ga_task *t = req->data;
    t->work(t);
}

static void after_work(uv_work_t *req, int status)
{
    (void)status; /* UV_ECANCELED is impossible: nothing cancels these requests */
    ga_task *t = req->data;
    ga_taskq *q = t->queue;
    q->head = t->next;
    if (!q->head) q->tail = NULL;
    /* Still marked running: done may queue more without starting a second task meanwhile. */
    t->done(t);
    q->running = false;
    if (q->head)
        start_head(q);
    else if (q->idle)
        q->idle(q->idle_arg);
}

static void start_head(ga_taskq *q)
{
    ga_task *t = q->head;
    q->running = true;
    t->req.data = t;
    uv_queue_work(q->loop, &t->req, run_work, after_work);
}

void ga_taskq_init(ga_taskq *q, uv_loop_t *loop, void (*idle)(void *arg), void *arg)
{
    *q = (ga_taskq){.loop = loop, .idle = idle, .idle_arg = arg};
}

void ga_taskq_push(ga_taskq *q, ga_task *t)
{
    if (q->run_inline && !q->running && !q->head) {
        t->queue = q;
        t->work(t);
        t->done(t);
        return;
    }
    t->next = NULL;
    t->queue = q;
    if (q->tail)
        q->tail->next = t;
    else
        q->head = t;
    q->tail = t;
    if (!q->running) start_head(q);
}

bool ga_taskq_idle(const ga_taskq *q) { return !q->running && !q->head; }
