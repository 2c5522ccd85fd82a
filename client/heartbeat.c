/* The heartbeat: threads of the client, one per address, that renew its member lease on every
 * shard between calls (client_internal.h; docs/protocol.md, "Failed ranks"). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, pthread_cond_timedwait */
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "client_internal.h"
#include "ga_alloc.h"
#include "ga_wire.h"
#include "rpc_client.h"

typedef struct beater {
    ga_heartbeat *h;
    uint32_t first, count; /* the shards of one address: [first, first + count) */
    uint32_t period_ms;    /* the least heartbeat_ms they announced */
    pthread_t thread;
    bool started;
} beater;

struct ga_heartbeat {
    ga_client *c;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    bool stop;
    beater *beaters;
    uint32_t nbeaters;
};

/* Waits ms, or less when stopped. Returns whether to go on. */
static bool pause_or_stop(ga_heartbeat *h, uint32_t ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    uint64_t ns = (uint64_t)until.tv_nsec + (uint64_t)ms * 1000000u;
    until.tv_sec += (time_t)(ns / 1000000000u);
    until.tv_nsec = (long)(ns % 1000000000u);
    pthread_mutex_lock(&h->mu);
    while (!h->stop && pthread_cond_timedwait(&h->wake, &h->mu, &until) != ETIMEDOUT) {
    }
    bool go_on = !h->stop;
    pthread_mutex_unlock(&h->mu);
    return go_on;
}

static void *beat(void *arg)
{
    beater *b = arg;
    ga_client *c = b->h->c;
    while (pause_or_stop(b->h, b->period_ms)) {
        for (uint32_t i = b->first; i < b->first + b->count; i++) {
            const ga_shard *sh = &c->shards[i];
            if (sh->heartbeat_ms == 0) continue;
            Gradagg__V1__HeartbeatRequest req = GRADAGG__V1__HEARTBEAT_REQUEST__INIT;
            req.job = sh->job;
            req.rank = c->opt.rank;
            req.incarnation = c->incarnation;
            ProtobufCMessage *resp = NULL;
            char why[64];
            if (ga_call_unary(sh->ch, GA_METHOD_HEARTBEAT, &req.base, b->period_ms, &resp, why, sizeof why) == GA_OK)
                protobuf_c_message_free_unpacked(resp, &ga_wire_allocator);
        }
    }
    return NULL;
}

ga_status ga_heartbeat_start(ga_client *c)
{
    if (c->heartbeat) return GA_OK;
    uint32_t lanes = c->opt.lanes ? c->opt.lanes : 1, naddr = c->nshards / lanes; /* ga_shards_parse */
    ga_heartbeat *h = ga_calloc(1, sizeof *h);
    beater *bs = ga_calloc(naddr ? naddr : 1, sizeof *bs);
    if (!h || !bs || pthread_mutex_init(&h->mu, NULL) != 0) {
        ga_free(h), ga_free(bs);
        return GA_E_NOMEM;
    }
    pthread_cond_init(&h->wake, NULL);
    h->c = c, h->beaters = bs, h->nbeaters = naddr;
    c->heartbeat = h;
    for (uint32_t a = 0; a < naddr; a++) {
        beater *b = &bs[a];
        b->h = h, b->first = a * lanes, b->count = lanes;
        for (uint32_t i = b->first; i < b->first + lanes; i++) {
            uint32_t ms = c->shards[i].heartbeat_ms;
            if (ms && (b->period_ms == 0 || ms < b->period_ms)) b->period_ms = ms;
        }
        if (b->period_ms == 0) continue; /* no shard of this address asked for one */
        if (pthread_create(&b->thread, NULL, beat, b) != 0) {
            ga_heartbeat_stop(c);
            return GA_E_NOMEM;
        }
        b->started = true;
    }
    return GA_OK;
}

void ga_heartbeat_stop(ga_client *c)
{
    ga_heartbeat *h = c->heartbeat;
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    h->stop = true;
    pthread_cond_broadcast(&h->wake);
    pthread_mutex_unlock(&h->mu);
    for (uint32_t a = 0; a < h->nbeaters; a++)
        if (h->beaters[a].started) pthread_join(h->beaters[a].thread, NULL);
    pthread_cond_destroy(&h->wake);
    pthread_mutex_destroy(&h->mu);
    ga_free(h->beaters);
    ga_free(h);
    c->heartbeat = NULL;
}
