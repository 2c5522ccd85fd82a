/* ga_client_options_from_env: the options a launcher's environment gives (gradagg.h; the table of
 * variables is docs/launch.md, normative). */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "gradagg.h"

/* The first of names[] that is set and not empty (and not `unset_value` when that is given), or
 * NULL; *which names it. */
static const char *first_set(const char *const *names, size_t n, const char *unset_value, const char **which)
{
    for (size_t i = 0; i < n; i++) {
        const char *v = getenv(names[i]);
        if (v && v[0] && !(unset_value && strcmp(v, unset_value) == 0)) {
            *which = names[i];
            return v;
        }
    }
    return NULL;
}

/* A decimal integer in [lo, hi]: the whole value, no sign, no spaces. */
static ga_status parse_u32(const char *name, const char *v, uint32_t lo, char *msg, size_t cap, uint32_t *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long long x = v[0] >= '0' && v[0] <= '9' ? strtoull(v, &end, 10) : 0;
    if (!end || *end || errno || x < lo || x > UINT32_MAX)
        return ga_status_fail(GA_E_INVAL, msg, cap, "environment: %s=\"%s\" is not an integer in [%u, %u]", name, v,
                              lo, UINT32_MAX);
    *out = (uint32_t)x;
    return GA_OK;
}

ga_status ga_client_options_from_env(ga_client_options *opt, char *msg, size_t msg_cap)
{
    if (!opt) return ga_status_fail(GA_E_INVAL, msg, msg_cap, "ga_client_options_from_env: options are NULL");
    static const char *const server[] = {"GRADAGG_SERVER"};
    static const char *const job[] = {"GRADAGG_JOB", "TORCHELASTIC_RUN_ID"};
    static const char *const rank[] = {"GRADAGG_RANK", "RANK", "JOB_COMPLETION_INDEX"};
    static const char *const world[] = {"GRADAGG_WORLD_SIZE", "WORLD_SIZE"};
    static const char *const min_world[] = {"GRADAGG_MIN_WORLD_SIZE"};
    static const char *const restarts[] = {"TORCHELASTIC_RESTART_COUNT"};
    static const char *const token[] = {"GRADAGG_AUTH_TOKEN"};
    static const char *const ca[] = {"GRADAGG_TLS_CA_FILE"}, *const cert[] = {"GRADAGG_TLS_CERT_FILE"},
                             *const key[] = {"GRADAGG_TLS_KEY_FILE"}, *const target[] = {"GRADAGG_TLS_TARGET_NAME"};
#define N(a) (sizeof(a) / sizeof((a)[0]))
    const char *which = NULL, *v;
    uint32_t r = opt->rank, w = opt->world_size, m = opt->min_world_size, restarted = 0;
    ga_status st;
    if ((v = first_set(rank, N(rank), NULL, &which)) && strcmp(which, "GRADAGG_RANK") == 0 && strcmp(v, "any") == 0)
        r = GA_RANK_ANY; /* an elastic job's server picks it */
    else if (v && (st = parse_u32(which, v, 0, msg, msg_cap, &r)) != GA_OK)
        return st;
    if ((v = first_set(world, N(world), NULL, &which)) && (st = parse_u32(which, v, 1, msg, msg_cap, &w)) != GA_OK)
        return st;
    if ((v = first_set(min_world, N(min_world), NULL, &which)) &&
        (st = parse_u32(which, v, 1, msg, msg_cap, &m)) != GA_OK)
        return st;
    if ((v = first_set(restarts, N(restarts), NULL, &which)) &&
        (st = parse_u32(which, v, 0, msg, msg_cap, &restarted)) != GA_OK)
        return st;
    /* Nothing is written until every variable parsed. torchrun without --rdzv-id runs "none". */
    opt->rank = r;
    opt->world_size = w;
    opt->min_world_size = m;
    if (restarted > 0) opt->resume = true;
    if ((v = first_set(server, N(server), NULL, &which))) opt->server = v;
    if ((v = first_set(job, N(job), "none", &which))) opt->job = v;
    if ((v = first_set(token, N(token), NULL, &which))) opt->auth_token = v;
    if ((v = first_set(ca, N(ca), NULL, &which))) opt->tls_ca_file = v;
    if ((v = first_set(cert, N(cert), NULL, &which))) opt->tls_cert_file = v;
    if ((v = first_set(key, N(key), NULL, &which))) opt->tls_key_file = v;
    if ((v = first_set(target, N(target), NULL, &which))) opt->tls_target_name = v;
#undef N
    return GA_OK;
}
