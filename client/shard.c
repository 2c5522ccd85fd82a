/* The shards of a client: the address list times the lanes, one thread per shard after the
 * first (which runs on the caller), the task generation that runs a step's pushes and pulls on
 * all of them at once, the lanes' turns, and the first error. */
#include <stdio.h>
#include <string.h>

#include "client_internal.h"
#include "ga_alloc.h"
#include "ga_lane.h"

/* Sets sh to lane `lane` of the address addr[0..len) (shard index = address * lanes + lane). */
static ga_status shard_set(ga_client *c, ga_shard *sh, const char *addr, size_t len, uint32_t lane)
{
    char job[512];
    if ((size_t)ga_lane_job_name(c->job, lane, job, sizeof job) >= sizeof job)
        return ga_client_fail(c, GA_E_INVAL, "options: job name of %zu bytes is too long", strlen(c->job));
    sh->client = c;
    sh->lane = lane;
    if (!(sh->addr = ga_malloc(len + 1)) || !(sh->job = ga_strdup(job)))
        return ga_client_fail(c, GA_E_NOMEM, "create: out of memory");
    memcpy(sh->addr, addr, len);
    sh->addr[len] = '\0';
    return GA_OK;
}

/* A step keeps a quarter of an address's lanes (at least 2) between their push and their pull:
 * lane k's step closes only once every rank's lane-k push is in, so a rank that ran further
 * ahead would take the shard's link from the pushes the next close waits on (docs/sdk.md,
 * "Lanes"). */
static uint32_t lane_window(uint32_t lanes)
{
    uint32_t quarter = (lanes + 3) / 4;
    return quarter > 2 ? quarter : 2;
}

ga_status ga_shards_parse(ga_client *c, const char *list, uint32_t lanes)
{
    uint32_t naddr = 1;
    for (const char *p = list; *p; p++) naddr += *p == ',';
    if (naddr * (uint64_t)lanes > GA_PLACEMENT_MAX_SHARDS)
        return ga_client_fail(c, GA_E_INVAL, "options: %u server addresses x %u lanes, at most %u in all", naddr,
                              lanes, GA_PLACEMENT_MAX_SHARDS);
    uint32_t n = naddr * lanes;
    c->lane_window = lane_window(lanes);
    if (!(c->shards = ga_calloc(n, sizeof *c->shards))) return ga_client_fail(c, GA_E_NOMEM, "create: out of memory");
    c->nshards = n;
    const char *p = list;
    for (uint32_t a = 0; a < naddr; a++) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0) return ga_client_fail(c, GA_E_INVAL, "options: server address %u of '%s' is empty", a, list);
        for (uint32_t l = 0; l < lanes; l++) {
            ga_shard *sh = &c->shards[a * lanes + l];
            sh->index = a * lanes + l;
            ga_status st = shard_set(c, sh, p, len, l);
            if (st != GA_OK) return st;
        }
        p = end ? end + 1 : p + len;
    }
    return GA_OK;
}

static void *shard_main(void *arg)
{
    ga_shard *sh = arg;
    ga_client *c = sh->client;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->quit && sh->seen == c->gen) pthread_cond_wait(&c->go, &c->mu);
        if (c->quit) break;
        sh->seen = c->gen;
        if (!sh->active) continue;
        ga_shard_fn fn = c->task;
        pthread_mutex_unlock(&c->mu);
        ga_status st = fn(c, sh);
        pthread_mutex_lock(&c->mu);
        sh->st = st;
        if (--c->pending == 0) pthread_cond_signal(&c->done);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

ga_status ga_shards_start(ga_client *c)
{
    if (c->nshards < 2) return GA_OK;
    if (pthread_mutex_init(&c->mu, NULL) != 0) goto fail;
    if (pthread_cond_init(&c->go, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        goto fail;
    }
    if (pthread_cond_init(&c->done, NULL) != 0) {
        pthread_cond_destroy(&c->go);
        pthread_mutex_destroy(&c->mu);
        goto fail;
    }
    if (pthread_cond_init(&c->turn, NULL) != 0) {
        pthread_cond_destroy(&c->done);
        pthread_cond_destroy(&c->go);
        pthread_mutex_destroy(&c->mu);
        goto fail;
    }
    c->pool = true;
    for (uint32_t i = 1; i < c->nshards; i++) {
        ga_shard *sh = &c->shards[i];
        if (pthread_create(&sh->thread, NULL, shard_main, sh) != 0)
            return ga_client_fail(c, GA_E_NOMEM, "create: cannot start the thread of shard %s", sh->addr);
        sh->has_thread = true;
    }
    return GA_OK;
fail:
    return ga_client_fail(c, GA_E_NOMEM, "create: cannot make the shards' lock");
}

void ga_shards_run(ga_client *c, ga_shard_fn fn)
{
    uint32_t others = 0;
    for (uint32_t i = 0; i < c->nshards; i++) {
        ga_shard *sh = &c->shards[i];
        sh->st = GA_OK;
        sh->err[0] = '\0';
        others += sh->active && i > 0;
    }
    if (others) {
        pthread_mutex_lock(&c->mu);
        c->task = fn;
        c->pending = others;
        c->gen++;
        pthread_cond_broadcast(&c->go);
        pthread_mutex_unlock(&c->mu);
    }
    if (c->shards[0].active) c->shards[0].st = fn(c, &c->shards[0]);
    if (others) {
        pthread_mutex_lock(&c->mu);
        while (c->pending) pthread_cond_wait(&c->done, &c->mu);
        pthread_mutex_unlock(&c->mu);
    }
    for (uint32_t i = 0; i < c->nshards; i++) {
        ga_shard *sh = &c->shards[i];
        c->stats.retries += sh->retries;
        c->stats.rejoins += sh->rejoins;
        c->stats.versions_lost += sh->versions_lost;
        sh->retries = sh->rejoins = sh->versions_lost = 0;
    }
}

void ga_shard_turn_wait(ga_client *c, ga_shard *sh, ga_turn t)
{
    uint32_t back = t == GA_TURN_PULLED ? c->lane_window : 1;
    if (sh->lane < back || !c->pool) return;
    const ga_shard *prev = &c->shards[sh->index - back];
    if (!prev->active) return;
    pthread_mutex_lock(&c->mu);
    while (prev->turn[t] != c->gen) pthread_cond_wait(&c->turn, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

void ga_shard_turn_pass(ga_client *c, ga_shard *sh, ga_turn t)
{
    if (!c->pool) return;
    pthread_mutex_lock(&c->mu);
    if (sh->turn[t] != c->gen) {
        sh->turn[t] = c->gen;
        pthread_cond_broadcast(&c->turn);
    }
    pthread_mutex_unlock(&c->mu);
}

ga_status ga_shards_error(ga_client *c)
{
    for (uint32_t i = 0; i < c->nshards; i++) {
        ga_shard *sh = &c->shards[i];
        if (!sh->active || sh->st == GA_OK) continue;
        if (c->nshards == 1) return ga_client_fail(c, sh->st, "%s", sh->err);
        return ga_client_fail(c, sh->st, "shard %u (%s): %s", i, sh->addr, sh->err);
    }
    return GA_OK;
}

void ga_shards_free(ga_client *c)
{
    if (c->pool) {
        pthread_mutex_lock(&c->mu);
        c->quit = true;
        pthread_cond_broadcast(&c->go);
        pthread_mutex_unlock(&c->mu);
    }
    for (uint32_t i = 0; i < c->nshards; i++) {
        ga_shard *sh = &c->shards[i];
        if (sh->has_thread) pthread_join(sh->thread, NULL);
        if (sh->lane == 0) ga_channel_destroy(sh->ch); /* the other lanes borrow it */
        ga_free(sh->addr);
        ga_free(sh->job);
        ga_free(sh->pieces);
    }
    if (c->pool) {
        pthread_cond_destroy(&c->turn);
        pthread_cond_destroy(&c->done);
        pthread_cond_destroy(&c->go);
        pthread_mutex_destroy(&c->mu);
    }
    ga_free(c->shards);
    c->shards = NULL;
    c->nshards = 0;
}

uint64_t ga_shards_version(const ga_client *c)
{
    uint64_t v = UINT64_MAX;
    for (uint32_t i = 0; i < c->nshards; i++)
        if (c->shards[i].used && c->shards[i].version < v) v = c->shards[i].version;
    if (v == UINT64_MAX) /* before init: the versions found at join */
        for (uint32_t i = 0; i < c->nshards; i++)
            if (c->shards[i].version < v) v = c->shards[i].version;
    return v == UINT64_MAX ? 0 : v;
}
