/* The shards of a client: the address list, one thread per shard after the first (which runs on
 * the caller), the task generation that runs a step's pushes and pulls on all of them at once,
 * and the first error. */
#include <stdio.h>
#include <string.h>

#include "client_internal.h"
#include "ga_alloc.h"

ga_status ga_shards_parse(ga_client *c, const char *list)
{
    uint32_t n = 1;
    for (const char *p = list; *p; p++) n += *p == ',';
    if (n > GA_PLACEMENT_MAX_SHARDS)
        return ga_client_fail(c, GA_E_INVAL, "options: %u server addresses, at most %u", n, GA_PLACEMENT_MAX_SHARDS);
    if (!(c->shards = ga_calloc(n, sizeof *c->shards))) return ga_client_fail(c, GA_E_NOMEM, "create: out of memory");
    c->nshards = n;
    const char *p = list;
    for (uint32_t i = 0; i < n; i++) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        ga_shard *sh = &c->shards[i];
        sh->client = c;
        sh->index = i;
        if (len == 0) return ga_client_fail(c, GA_E_INVAL, "options: server address %u of '%s' is empty", i, list);
        if (!(sh->addr = ga_malloc(len + 1))) return ga_client_fail(c, GA_E_NOMEM, "create: out of memory");
        memcpy(sh->addr, p, len);
        sh->addr[len] = '\0';
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
        sh->retries = sh->rejoins = 0;
    }
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
        ga_channel_destroy(sh->ch);
        ga_free(sh->addr);
        ga_free(sh->pieces);
    }
    if (c->pool) {
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
