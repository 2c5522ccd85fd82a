/* Shard discovery (discover.h). */
#define _POSIX_C_SOURCE 200809L /* getaddrinfo, nanosleep */
#include "discover.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "ga_alloc.h"
#include "ga_wire.h"

#define MAX_ADDRESSES 4096 /* addresses of NAME asked; also the largest set (--shard-count) */
#define ASK_TIMEOUT_MS 5000u /* a ShardInfo that takes longer is one not answered */

bool ga_discover_named(const char *server)
{
    return server && strncmp(server, GA_DISCOVER_SCHEME, sizeof GA_DISCOVER_SCHEME - 1) == 0;
}

typedef struct answer {
    uint32_t count; /* 0: no answer */
    char *address;  /* owned */
} answer;

/* NAME and PORT of "NAME:PORT" ("[v6]:PORT"), into host[cap] and port[16]. */
static bool split(const char *target, char *host, size_t cap, char *port)
{
    const char *colon = strrchr(target, ':');
    if (!colon || colon == target || !colon[1] || strlen(colon + 1) > 5) return false;
    size_t len = (size_t)(colon - target);
    const char *h = target;
    if (h[0] == '[') {
        if (len < 3 || h[len - 1] != ']') return false;
        h++, len -= 2;
    }
    if (len >= cap) return false;
    memcpy(host, h, len);
    host[len] = '\0';
    for (const char *p = colon + 1; *p; p++)
        if (*p < '0' || *p > '9') return false;
    strcpy(port, colon + 1);
    return true;
}

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ShardInfo of one address "ip:port". GA_OK with *r filled, or the call's error. */
static ga_status ask(const char *target, const ga_channel_security *sec, uint32_t timeout_ms,
                     Gradagg__V1__ShardInfoResponse **r, char *why, size_t cap)
{
    ga_channel *ch = NULL;
    ga_status st = ga_channel_create_secure(target, 1u << 20, sec, &ch, why, cap);
    if (st != GA_OK) return st;
    Gradagg__V1__ShardInfoRequest req = GRADAGG__V1__SHARD_INFO_REQUEST__INIT;
    st = ga_call_unary(ch, GA_METHOD_SHARD_INFO, &req.base, timeout_ms, (ProtobufCMessage **)r, why, cap);
    ga_channel_destroy(ch);
    return st;
}

static void answers_clear(answer *answers, uint32_t *count)
{
    for (uint32_t i = 0; i < *count; i++) {
        ga_free(answers[i].address);
        answers[i] = (answer){0, NULL};
    }
    *count = 0;
}

/* One round: every address of host:port asked, answers[index] and *count filled afresh (a shard
 * replaced since the last round may advertise another address). GA_E_CONFIG / GA_E_NOMEM end
 * the discovery, GA_E_UNAVAILABLE asks for another round. */
static ga_status round_once(const char *host, const char *port, const ga_channel_security *sec, uint32_t timeout_ms,
                            answer *answers, uint32_t *count, char *why, size_t cap)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    answers_clear(answers, count);
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0)
        return ga_status_fail(GA_E_UNAVAILABLE, why, cap, "shards://%s:%s: %s does not resolve: %s", host, port, host,
                              gai_strerror(rc));
    ga_status st = GA_OK;
    size_t asked = 0;
    for (struct addrinfo *a = res; a && st == GA_OK && asked < MAX_ADDRESSES; a = a->ai_next) {
        char ip[INET6_ADDRSTRLEN], target[INET6_ADDRSTRLEN + 16];
        const void *raw = a->ai_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr
                                                   : (const void *)&((struct sockaddr_in *)a->ai_addr)->sin_addr;
        if ((a->ai_family != AF_INET && a->ai_family != AF_INET6) || !inet_ntop(a->ai_family, raw, ip, sizeof ip))
            continue;
        snprintf(target, sizeof target, a->ai_family == AF_INET6 ? "[%s]:%s" : "%s:%s", ip, port);
        asked++; /* an address listed twice answers the same twice: no conflict */
        Gradagg__V1__ShardInfoResponse *r = NULL;
        char one[256];
        if (ask(target, sec, timeout_ms, &r, one, sizeof one) != GA_OK) continue; /* restarting: next round */
        if (r->count == 0 || r->count > MAX_ADDRESSES || r->index >= r->count || !r->address || !r->address[0]) {
            st = ga_status_fail(GA_E_CONFIG, why, cap,
                                "shards://%s:%s: the server at %s is in no shard set (index %u, count %u, address "
                                "'%s'): start every shard with --shard-count, --shard-index and --advertise-address",
                                host, port, target, r->index, r->count, r->address ? r->address : "");
        } else if (*count && r->count != *count) {
            st = ga_status_fail(GA_E_CONFIG, why, cap,
                                "shards://%s:%s: the server at %s says the set has %u shards, another said %u", host,
                                port, target, r->count, *count);
        } else {
            *count = r->count;
            answer *x = &answers[r->index];
            if (x->count && strcmp(x->address, r->address) != 0)
                st = ga_status_fail(GA_E_CONFIG, why, cap,
                                    "shards://%s:%s: two servers say they are shard %u: %s and %s", host, port,
                                    r->index, x->address, r->address);
            else if (!x->count && !(x->address = ga_strdup(r->address)))
                st = ga_status_fail(GA_E_NOMEM, why, cap, "discovery: out of memory");
            else
                x->count = r->count;
        }
        protobuf_c_message_free_unpacked(&r->base, &ga_wire_allocator);
    }
    freeaddrinfo(res);
    return st;
}

ga_status ga_discover_shards(const char *server, const ga_channel_security *sec, uint32_t call_timeout_ms,
                             uint32_t budget_ms, uint32_t backoff_ms, uint32_t backoff_max_ms, char **out, char *why,
                             size_t cap)
{
    *out = NULL;
    const char *target = server + sizeof GA_DISCOVER_SCHEME - 1;
    char host[256], port[16];
    if (!ga_discover_named(server) || !split(target, host, sizeof host, port))
        return ga_status_fail(GA_E_INVAL, why, cap, "options: server '%s': expected shards://NAME:PORT", server);
    ga_channel_security s = *sec;
    if (!s.target_name || !s.target_name[0]) s.target_name = host;
    s.authorization = NULL; /* ShardInfo needs no token */
    uint32_t timeout = call_timeout_ms && call_timeout_ms < ASK_TIMEOUT_MS ? call_timeout_ms : ASK_TIMEOUT_MS;
    answer *answers = ga_calloc(MAX_ADDRESSES, sizeof *answers);
    if (!answers) return ga_status_fail(GA_E_NOMEM, why, cap, "discovery: out of memory");
    uint64_t deadline = now_ms() + budget_ms;
    uint32_t count = 0, wait = backoff_ms ? backoff_ms : 50;
    ga_status st;
    for (;;) {
        st = round_once(host, port, &s, timeout, answers, &count, why, cap);
        if (st == GA_E_CONFIG || st == GA_E_NOMEM) break;
        uint32_t missing = count ? 0 : 1;
        for (uint32_t i = 0; i < count; i++) missing += answers[i].count == 0;
        if (st == GA_OK && missing == 0) break;
        if (st == GA_OK) { /* resolved, but not every shard answered */
            if (!count) {
                snprintf(why, cap, "shards://%s:%s: no server behind %s answered ShardInfo", host, port, host);
            } else {
                size_t n = (size_t)snprintf(why, cap, "shards://%s:%s: no answer from shard", host, port);
                for (uint32_t i = 0; i < count && n < cap; i++)
                    if (!answers[i].count) n += (size_t)snprintf(why + n, cap - n, " %u", i);
                if (n < cap) snprintf(why + n, cap - n, " of %u", count);
            }
            st = GA_E_UNAVAILABLE;
        }
        if (now_ms() + wait > deadline) break;
        sleep_ms(wait);
        wait = wait * 2 > backoff_max_ms && backoff_max_ms ? backoff_max_ms : wait * 2;
    }
    if (st == GA_OK) {
        size_t len = 0;
        for (uint32_t i = 0; i < count; i++) len += strlen(answers[i].address) + 1;
        char *list = ga_malloc(len + 1);
        if (!list) {
            st = ga_status_fail(GA_E_NOMEM, why, cap, "discovery: out of memory");
        } else {
            size_t n = 0;
            for (uint32_t i = 0; i < count; i++)
                n += (size_t)sprintf(list + n, "%s%s", i ? "," : "", answers[i].address);
            *out = list;
        }
    }
    answers_clear(answers, &count);
    ga_free(answers);
    return st;
}
