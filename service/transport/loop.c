/* The control loop (see loop.h): a libuv loop, and a mutex-protected FIFO of posted (fn, arg)
 * that one uv_async_t drains on the loop thread. */
#include "loop.h"

#include <stdbool.h>

#include "base/base.h"
#include "ga_alloc.h"

typedef struct post_item {
    struct post_item *next;
    void (*fn)(void *arg);
    void *arg;
} post_item;

struct ga_loop {
    uv_loop_t uv;
    uv_async_t wake;
    uv_mutex_t mu;      /* guards head, tail and closed: the only state other threads touch */
    post_item *head, *tail;
    bool closed;        /* ga_loop_stop ran: posts are refused, wake is closing */
    bool stopped;       /* wake's close callback ran: ga_loop_run may return */
};

/* Takes the whole queue under the lock and runs it without the lock, so a callback may post. */
static void drain(ga_loop *l)
{
    for (;;) {
        uv_mutex_lock(&l->mu);
        post_item *it = l->head;
        l->head = l->tail = NULL;
        uv_mutex_unlock(&l->mu);
        if (!it) return;
        while (it) {
            post_item *next = it->next;
            it->fn(it->arg);
            ga_free(it);
            it = next;
        }
    }
}

static void on_wake(uv_async_t *h)
{
    drain(h->data);
}

static void on_wake_closed(uv_handle_t *h)
{
    ga_loop *l = h->data;
    drain(l); /* what was posted before ga_loop_stop still runs */
    l->stopped = true;
    uv_stop(&l->uv);
}

ga_status ga_loop_create(ga_loop **out)
{
    ga_loop *l = ga_calloc(1, sizeof *l);
    if (!l) return GA_E_NOMEM;
    if (uv_loop_init(&l->uv) != 0) goto fail_free;
    if (uv_mutex_init(&l->mu) != 0) goto fail_loop;
    if (uv_async_init(&l->uv, &l->wake, on_wake) != 0) goto fail_mutex;
    l->wake.data = l;
    *out = l;
    return GA_OK;

fail_mutex:
    uv_mutex_destroy(&l->mu);
fail_loop:
    uv_loop_close(&l->uv);
fail_free:
    ga_free(l);
    return GA_E_NOMEM;
}

uv_loop_t *ga_loop_uv(ga_loop *l)
{
    return &l->uv;
}

ga_status ga_loop_post(ga_loop *l, void (*fn)(void *arg), void *arg)
{
    post_item *it = ga_malloc(sizeof *it);
    if (!it) return GA_E_NOMEM;
    it->next = NULL;
    it->fn = fn;
    it->arg = arg;
    uv_mutex_lock(&l->mu);
    if (l->closed) {
        /* After ga_loop_stop nothing runs any more; wake may already be closed, so it is not
         * touched. Callers post only while the loop runs (the server stops it last), so this is
         * a late straggler being told that fn will not run. */
        uv_mutex_unlock(&l->mu);
        ga_free(it);
        return GA_E_DRAINING;
    }
    if (l->tail) l->tail->next = it;
    else l->head = it;
    l->tail = it;
    /* Sent under the lock so ga_loop_stop cannot close wake between the check and the send. */
    uv_async_send(&l->wake);
    uv_mutex_unlock(&l->mu);
    return GA_OK;
}

/* Closes what the owners left open, so the loop can be closed; each one is a leak by its owner. */
static void close_leftover(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (uv_is_closing(h)) return;
    ga_log(GA_LOG_WARN, "loop: closing a %s handle left open at stop", uv_handle_type_name(uv_handle_get_type(h)));
    uv_close(h, NULL);
}

void ga_loop_run(ga_loop *l)
{
    while (!l->stopped) uv_run(&l->uv, UV_RUN_DEFAULT);
    /* Close callbacks of handles closed together with wake, and anything left open. */
    uv_walk(&l->uv, close_leftover, NULL);
    uv_run(&l->uv, UV_RUN_DEFAULT);
}

void ga_loop_stop(ga_loop *l)
{
    uv_mutex_lock(&l->mu);
    bool was_closed = l->closed;
    l->closed = true;
    uv_mutex_unlock(&l->mu);
    if (!was_closed) uv_close((uv_handle_t *)&l->wake, on_wake_closed);
}

void ga_loop_destroy(ga_loop *l)
{
    if (!l) return;
    if (!l->closed) {
        /* Never run (a start that failed before its thread began): what was posted is dropped
         * unrun, as a loop that never ran promised nothing. */
        uv_mutex_lock(&l->mu);
        l->closed = true;
        post_item *it = l->head;
        l->head = l->tail = NULL;
        uv_mutex_unlock(&l->mu);
        while (it) {
            post_item *next = it->next;
            ga_free(it);
            it = next;
        }
        uv_close((uv_handle_t *)&l->wake, NULL);
        uv_run(&l->uv, UV_RUN_DEFAULT);
    }
    int rc = uv_loop_close(&l->uv);
    if (rc != 0) ga_log(GA_LOG_ERROR, "loop: uv_loop_close: %s", uv_strerror(rc));
    uv_mutex_destroy(&l->mu);
    ga_free(l);
}
