/* gradagg: the operators' command line tool (docs/cli.md).
 *   gradagg [options] jobs | status JOB | delete JOB | health
 *   gradagg [--json] plan OPTIONS   (plan.h: needs no server)
 * Options (each also from the environment, docs/launch.md; a flag wins): --server ADDR[,ADDR...]
 * or shards://NAME:PORT (GRADAGG_SERVER, else 127.0.0.1:7070), --json, --timeout-ms N, --token T (GRADAGG_AUTH_TOKEN),
 * --tls-ca F, --tls-cert F, --tls-key F, --tls-target-name N (GRADAGG_TLS_*). */
#define _POSIX_C_SOURCE 200809L /* strdup, strtok_r */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "discover.h"
#include "ga_alloc.h"
#include "gradagg.h"
#include "plan.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gradagg [options] COMMAND\n"
            "commands:\n"
            "  jobs          every job on every shard: world size, ranks joined, version, open step, state\n"
            "  status JOB    a job's members (lagging and missing ranks), version, open step, commits,\n"
            "                tensors, bytes received by codec, counters\n"
            "  delete JOB    remove a job no rank is live in, on every shard\n"
            "  health        the gRPC health of every shard (\"\" and gradagg.v1.Aggregator)\n"
            "  plan ...      size a deployment for a job from the cost model (gradagg plan --help)\n"
            "options (the environment gives the defaults: docs/launch.md):\n"
            "  --server ADDR[,ADDR...]  the shards, or shards://NAME:PORT for a set found from one DNS name\n"
            "                           (GRADAGG_SERVER; default 127.0.0.1:7070)\n"
            "  --json                   JSON on stdout instead of tables\n"
            "  --timeout-ms N           each call's deadline (default 10000)\n"
            "  --token T                bearer token (GRADAGG_AUTH_TOKEN); jobs needs an operator token\n"
            "  --tls-ca F --tls-cert F --tls-key F --tls-target-name N   TLS (GRADAGG_TLS_*)\n"
            "exit status: 0 ok, 1 refused by a server (no such job, not SERVING, ...), 2 usage,\n"
            "             3 a server did not answer, 4 unauthenticated or permission denied\n");
}

/* Splits "a:1,b:2" into c->shards (addresses point into the copy `list`). */
static int split_shards(char *list, cli *c)
{
    size_t n = 1;
    for (const char *p = list; *p; p++) n += *p == ',';
    c->shards = calloc(n, sizeof *c->shards);
    if (!c->shards) return -1;
    for (char *save = NULL, *a = strtok_r(list, ",", &save); a; a = strtok_r(NULL, ",", &save))
        c->shards[c->nshards++].address = a;
    return c->nshards ? 0 : -1;
}

int main(int argc, char **argv)
{
    ga_client_options env = GA_CLIENT_OPTIONS_INIT;
    char msg[512];
    if (ga_client_options_from_env(&env, msg, sizeof msg) != GA_OK) {
        fprintf(stderr, "gradagg: %s\n", msg);
        return CLI_USAGE;
    }
    cli c = {NULL, 0, false, 10000};
    const char *server = env.server, *token = env.auth_token;
    ga_channel_security sec = {env.tls_ca_file, env.tls_cert_file, env.tls_key_file, env.tls_target_name, NULL, 0};
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(k, "--help") == 0) {
            usage(stdout);
            return CLI_OK;
        }
        if (strcmp(k, "--json") == 0) {
            c.json = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "gradagg: %s needs a value\n", k);
            return CLI_USAGE;
        }
        i++;
        if (strcmp(k, "--server") == 0) server = v;
        else if (strcmp(k, "--token") == 0) token = v;
        else if (strcmp(k, "--tls-ca") == 0) sec.ca_file = v;
        else if (strcmp(k, "--tls-cert") == 0) sec.cert_file = v;
        else if (strcmp(k, "--tls-key") == 0) sec.key_file = v;
        else if (strcmp(k, "--tls-target-name") == 0) sec.target_name = v;
        else if (strcmp(k, "--timeout-ms") == 0) {
            char *end;
            errno = 0;
            unsigned long t = strtoul(v, &end, 10);
            if (*end || errno || t == 0 || t > 3600000) {
                fprintf(stderr, "gradagg: --timeout-ms %s: expected an integer in [1, 3600000]\n", v);
                return CLI_USAGE;
            }
            c.timeout_ms = (uint32_t)t;
        } else {
            fprintf(stderr, "gradagg: unknown option %s\n", k);
            usage(stderr);
            return CLI_USAGE;
        }
    }
    const char *cmd = i < argc ? argv[i++] : NULL;
    if (cmd && strcmp(cmd, "plan") == 0) return cli_plan(argc - i, argv + i, c.json); /* no server */
    const char *job = i < argc ? argv[i++] : NULL;
    bool needs_job = cmd && (strcmp(cmd, "status") == 0 || strcmp(cmd, "delete") == 0);
    bool known = cmd && (needs_job || strcmp(cmd, "jobs") == 0 || strcmp(cmd, "health") == 0);
    if (!known || needs_job != (job != NULL) || i < argc) {
        fprintf(stderr, "gradagg: %s\n", !cmd ? "no command" : !known ? "unknown command"
                                          : needs_job && !job ? "this command needs a job name"
                                                              : "too many arguments");
        usage(stderr);
        return CLI_USAGE;
    }

    char *list = NULL;
    if (ga_discover_named(server)) { /* shards://NAME:PORT: the set's shards, in index order */
        char *found = NULL;
        ga_status st = ga_discover_shards(server, &sec, c.timeout_ms, c.timeout_ms, 100, 1000, &found, msg, sizeof msg);
        if (st != GA_OK) {
            fprintf(stderr, "gradagg: %s (%s)\n", msg, ga_status_name(st));
            return st == GA_E_INVAL ? CLI_USAGE : cli_exit_for(st);
        }
        list = strdup(found);
        ga_free(found);
    } else {
        list = strdup(server);
    }
    if (!list || split_shards(list, &c) != 0) {
        fprintf(stderr, "gradagg: --server '%s': no address\n", server);
        free(list);
        free(c.shards);
        return CLI_USAGE;
    }
    char auth[4200];
    if (token) {
        snprintf(auth, sizeof auth, "Bearer %s", token);
        sec.authorization = auth;
    }
    int rc = CLI_OK;
    for (size_t s = 0; s < c.nshards && rc == CLI_OK; s++) {
        ga_status st = ga_channel_create_secure(c.shards[s].address, 64u << 20, &sec, &c.shards[s].channel, msg,
                                                sizeof msg);
        if (st != GA_OK) {
            fprintf(stderr, "gradagg: %s: %s\n", c.shards[s].address, msg);
            rc = st == GA_E_IO || st == GA_E_CONFIG || st == GA_E_INVAL ? CLI_USAGE : cli_exit_for(st);
        }
    }
    if (rc == CLI_OK) {
        if (strcmp(cmd, "jobs") == 0) rc = cli_jobs(&c);
        else if (strcmp(cmd, "status") == 0) rc = cli_status(&c, job);
        else if (strcmp(cmd, "delete") == 0) rc = cli_delete(&c, job);
        else rc = cli_health(&c);
    }
    for (size_t s = 0; s < c.nshards; s++) ga_channel_destroy(c.shards[s].channel);
    free(c.shards);
    free(list);
    return rc;
}
