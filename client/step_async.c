/* Asynchronous steps (ga_client_step_start / _poll / _wait): ga_client_step run on the client's
 * own step thread, started at the first ga_client_step_start, so the caller goes on (with
 * backward, say) while the step encodes, pushes and pulls. The thread waits on c->async->cv
 * between steps; ga_client_destroy ends it. */
#include <string.h>

#include "client_internal.h"
#include "ga_alloc.h"

struct ga_async {
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* a step was queued, one ended, or quit */
    pthread_t thread;
    bool queued;           /* grads hold a step the thread has not taken yet */
    bool quit;
    const float **grads;   /* c->ntensors borrowed pointers, copied at start */
    ga_status st;          /* the last step's status */
};

static void *step_main(void *arg)
{
    ga_client *c = arg;
    ga_async *a = c->async;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->quit && !a->queued) pthread_cond_wait(&a->cv, &a->mu);
        if (a->quit) break;
        a->queued = false;
        pthread_mutex_unlock(&a->mu);
        ga_status st = ga_client_step_run(c, a->grads);
        pthread_mutex_lock(&a->mu);
        a->st = st;
        __atomic_store_n(&c->in_flight, false, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* Makes c->async and its thread; GA_E_NOMEM with nothing left behind when it cannot. */
static ga_status async_make(ga_client *c)
{
    ga_async *a = ga_calloc(1, sizeof *a);
    if (!a || !(a->grads = ga_calloc(c->ntensors ? c->ntensors : 1, sizeof *a->grads))) goto fail_alloc;
    if (pthread_mutex_init(&a->mu, NULL) != 0) goto fail_alloc;
    if (pthread_cond_init(&a->cv, NULL) != 0) goto fail_mu;
    c->async = a;
    if (pthread_create(&a->thread, NULL, step_main, c) != 0) {
        c->async = NULL;
        pthread_cond_destroy(&a->cv);
        goto fail_mu;
    }
    return GA_OK;
fail_mu:
    pthread_mutex_destroy(&a->mu);
fail_alloc:
    if (a) ga_free((void *)a->grads);
    ga_free(a);
    return GA_E_NOMEM;
}

ga_status ga_client_step_start(ga_client *c, const float *const *grads)
{
    if (!c) return GA_E_INVAL;
    if (ga_client_in_flight(c)) return GA_E_INVAL; /* ga_client_error says why */
    if (!c->inited) return ga_client_fail(c, GA_E_INVAL, "step_start: before init");
    if (!grads) return ga_client_fail(c, GA_E_INVAL, "step_start: grads is NULL");
    if (!c->async && async_make(c) != GA_OK)
        return ga_client_fail(c, GA_E_NOMEM, "step_start: cannot start the client's step thread");
    ga_async *a = c->async;
    pthread_mutex_lock(&a->mu);
    memcpy((void *)a->grads, grads, c->ntensors * sizeof *grads);
    a->queued = true;
    __atomic_store_n(&c->in_flight, true, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return GA_OK;
}

ga_status ga_client_step_poll(ga_client *c, bool *done)
{
    if (!c || !done) return GA_E_INVAL;
    *done = !ga_client_in_flight(c);
    return GA_OK;
}

ga_status ga_client_step_wait(ga_client *c)
{
    if (!c) return GA_E_INVAL;
    ga_async *a = c->async;
    if (!a) return GA_OK;
    pthread_mutex_lock(&a->mu);
    while (ga_client_in_flight(c)) pthread_cond_wait(&a->cv, &a->mu);
    ga_status st = a->st;
    pthread_mutex_unlock(&a->mu);
    return st;
}

void ga_client_async_free(ga_client *c)
{
    ga_async *a = c->async;
    if (!a) return;
    (void)ga_client_step_wait(c);
    pthread_mutex_lock(&a->mu);
    a->quit = true;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    ga_free((void *)a->grads);
    ga_free(a);
    c->async = NULL;
}
