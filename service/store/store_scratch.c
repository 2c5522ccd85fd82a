/* The applies' scratch pool (store.h, ga_store_scratch_pool_limit): blocks of compute memory an
 * apply takes and gives back, kept warm between applies up to the pool's limit, so that a step
 * writes into pages already in memory rather than fresh mappings (the server maps every block of
 * 1 MiB or more on its own, main.c). One pool per process, shared by every store; its blocks are
 * counted in a store's bytes while it holds them and in ga_store_scratch_pooled() while pooled. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "store_internal.h"

enum { POOL_SLOTS = 32 };

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static ga_store_block pool[POOL_SLOTS]; /* oldest first */
static size_t pool_n;
static uint64_t pool_limit = GA_STORE_SCRATCH_POOL_BYTES;
static uint64_t live_stores;
static _Atomic uint64_t pool_bytes;

void ga_store_scratch_pool_limit(uint64_t bytes)
{
    pthread_mutex_lock(&pool_mu);
    pool_limit = bytes;
    pthread_mutex_unlock(&pool_mu);
}

uint64_t ga_store_scratch_pooled(void)
{
    return atomic_load(&pool_bytes);
}

/* Removes pool[i] (the lock held). */
static ga_store_block pool_remove(size_t i)
{
    ga_store_block b = pool[i];
    memmove(&pool[i], &pool[i + 1], (pool_n - i - 1) * sizeof *pool);
    pool_n--;
    atomic_fetch_sub(&pool_bytes, b.cap);
    return b;
}

ga_status ga_store_scratch_take(ga_store *s, ga_store_mem where, size_t need, void **out, size_t *cap)
{
    /* The smallest pooled block that fits and wastes at most its need again. */
    size_t best = POOL_SLOTS;
    pthread_mutex_lock(&pool_mu);
    for (size_t i = 0; i < pool_n; i++)
        if (pool[i].where == where && pool[i].cap >= need && pool[i].cap - need <= need &&
            (best == POOL_SLOTS || pool[i].cap < pool[best].cap))
            best = i;
    ga_store_block b = {0};
    if (best < POOL_SLOTS) b = pool_remove(best);
    pthread_mutex_unlock(&pool_mu);
    if (!b.p) {
        GA_CHECK(ga_store_mem_get(s, where, need, out));
        *cap = need;
        return GA_OK;
    }
    s->bytes += b.cap;
    *out = b.p;
    *cap = b.cap;
    return GA_OK;
}

void ga_store_scratch_give(ga_store *s, ga_store_mem where, void *p, size_t cap)
{
    if (!p) return;
    s->bytes -= cap;
    ga_store_block out[POOL_SLOTS + 1];
    size_t nout = 0;
    pthread_mutex_lock(&pool_mu);
    if (cap > pool_limit) {
        out[nout++] = (ga_store_block){p, cap, where};
    } else {
        while (pool_n == POOL_SLOTS || atomic_load(&pool_bytes) + cap > pool_limit) out[nout++] = pool_remove(0);
        pool[pool_n++] = (ga_store_block){p, cap, where};
        atomic_fetch_add(&pool_bytes, cap);
    }
    pthread_mutex_unlock(&pool_mu);
    for (size_t i = 0; i < nout; i++) ga_store_mem_free(out[i].where, out[i].p);
}

void ga_store_scratch_enter(void)
{
    pthread_mutex_lock(&pool_mu);
    live_stores++;
    pthread_mutex_unlock(&pool_mu);
}

void ga_store_scratch_leave(void)
{
    ga_store_block out[POOL_SLOTS];
    size_t nout = 0;
    pthread_mutex_lock(&pool_mu);
    if (--live_stores == 0)
        while (pool_n) out[nout++] = pool_remove(pool_n - 1);
    pthread_mutex_unlock(&pool_mu);
    for (size_t i = 0; i < nout; i++) ga_store_mem_free(out[i].where, out[i].p);
}
