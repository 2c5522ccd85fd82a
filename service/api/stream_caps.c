/* Stream caps per client host, per job and per token (stream_caps.h): small tables of counts. */
#include "stream_caps.h"

#include <pthread.h>
#include <string.h>

#include "ga_alloc.h"

/* Keys with at least one stream open, and how many. */
typedef struct counts {
    char **keys;
    uint32_t *open;
    size_t n, cap;
} counts;

struct ga_stream_caps {
    pthread_mutex_t mu;
    ga_stream_limits lim;
    counts hosts, jobs, tokens;
};

static ptrdiff_t find(const counts *t, const char *key)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->keys[i], key) == 0) return (ptrdiff_t)i;
    return -1;
}

/* The open count of key (0 when it has none). */
static uint32_t open_of(const counts *t, const char *key)
{
    ptrdiff_t i = find(t, key);
    return i < 0 ? 0 : t->open[i];
}

static ga_status take(counts *t, const char *key)
{
    ptrdiff_t i = find(t, key);
    if (i >= 0) {
        t->open[i]++;
        return GA_OK;
    }
    if (t->n == t->cap) {
        size_t ncap = t->cap ? 2 * t->cap : 16;
        char **keys = ga_malloc(ncap * sizeof *keys);
        uint32_t *open = ga_malloc(ncap * sizeof *open);
        if (!keys || !open) {
            ga_free(keys), ga_free(open);
            return GA_E_NOMEM;
        }
        if (t->n) memcpy(keys, t->keys, t->n * sizeof *keys), memcpy(open, t->open, t->n * sizeof *open);
        ga_free(t->keys), ga_free(t->open);
        t->keys = keys, t->open = open, t->cap = ncap;
    }
    if (!(t->keys[t->n] = ga_strdup(key))) return GA_E_NOMEM;
    t->open[t->n++] = 1;
    return GA_OK;
}

static void give(counts *t, const char *key)
{
    ptrdiff_t i = find(t, key);
    if (i < 0) return;
    if (--t->open[i] == 0) {
        ga_free(t->keys[i]);
        t->keys[i] = t->keys[t->n - 1], t->open[i] = t->open[t->n - 1];
        t->n--;
    }
    if (t->n == 0) { /* nothing kept at rest */
        ga_free(t->keys), ga_free(t->open);
        *t = (counts){0};
    }
}

ga_stream_caps *ga_stream_caps_create(const ga_stream_limits *limits)
{
    ga_stream_caps *c = ga_calloc(1, sizeof *c);
    if (!c) return NULL;
    c->lim = *limits;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

static void counts_free(counts *t)
{
    for (size_t i = 0; i < t->n; i++) ga_free(t->keys[i]);
    ga_free(t->keys), ga_free(t->open);
}

void ga_stream_caps_destroy(ga_stream_caps *c)
{
    if (!c) return;
    counts_free(&c->hosts), counts_free(&c->jobs), counts_free(&c->tokens);
    pthread_mutex_destroy(&c->mu);
    ga_free(c);
}

/* The host's key in the per-host table, or NULL for a trusted host (not capped per host). */
static const char *host_key(const ga_stream_caps *c, const char *host)
{
    return ga_host_set_has(c->lim.trusted, host) ? NULL : host;
}

static void give_all(ga_stream_caps *c, const char *host, const char *job, const char *token)
{
    if (host) give(&c->hosts, host);
    if (job) give(&c->jobs, job);
    if (token) give(&c->tokens, token);
}

ga_status ga_stream_caps_open(ga_stream_caps *c, const char *host, const char *job, const char *token, char *why,
                              size_t cap)
{
    ga_status st = GA_OK;
    const char *hk = host_key(c, host);
    pthread_mutex_lock(&c->mu);
    uint32_t from_host = hk ? open_of(&c->hosts, hk) : 0, of_job = open_of(&c->jobs, job),
             of_token = token ? open_of(&c->tokens, token) : 0;
    if (hk && from_host >= c->lim.per_host) {
        st = ga_status_fail(GA_E_BUSY, why, cap,
                            "client %s has %u streams open, the most --max-streams-per-client allows (a relay or a "
                            "NAT: --trusted-client-hosts); retry once one ends",
                            host, from_host);
    } else if (of_job >= c->lim.per_job) {
        st = ga_status_fail(GA_E_BUSY, why, cap,
                            "job '%.200s' has %u streams open, the most --max-streams-per-job allows; retry once one "
                            "ends",
                            job, of_job);
    } else if (token && of_token >= c->lim.per_token) {
        st = ga_status_fail(GA_E_BUSY, why, cap,
                            "the token of job '%.200s' has %u streams open (the job and its lanes), the most "
                            "--max-streams-per-token allows; retry once one ends",
                            token, of_token);
    } else if (hk && take(&c->hosts, hk) != GA_OK) {
        st = GA_E_NOMEM;
    } else if (take(&c->jobs, job) != GA_OK) {
        give_all(c, hk, NULL, NULL);
        st = GA_E_NOMEM;
    } else if (token && take(&c->tokens, token) != GA_OK) {
        give_all(c, hk, job, NULL);
        st = GA_E_NOMEM;
    }
    if (st == GA_E_NOMEM)
        ga_status_fail(GA_E_NOMEM, why, cap, "out of memory counting the streams of %s for job '%.200s'", host, job);
    pthread_mutex_unlock(&c->mu);
    return st;
}

void ga_stream_caps_close(ga_stream_caps *c, const char *host, const char *job, const char *token)
{
    const char *hk = host_key(c, host);
    pthread_mutex_lock(&c->mu);
    give_all(c, hk, job, token);
    pthread_mutex_unlock(&c->mu);
}
