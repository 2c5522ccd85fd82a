/* The gradagg command line tool's commands (main.c parses the arguments and connects). Each
 * command asks every shard and prints a table (or JSON with cli.json) on stdout; errors go to
 * stderr. Each returns its exit status (docs/cli.md): CLI_OK, or the worst of the shards'. */
#ifndef GA_CLI_COMMANDS_H
#define GA_CLI_COMMANDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rpc_client.h"

enum cli_exit {
    CLI_OK = 0,
    CLI_REFUSED = 1,     /* the server answered with an error (no such job, ...), or not SERVING */
    CLI_USAGE = 2,       /* the command line is wrong */
    CLI_UNREACHABLE = 3, /* no answer: unavailable, deadline, transport */
    CLI_DENIED = 4,      /* unauthenticated or permission denied */
};

typedef struct cli_shard {
    const char *address; /* "host:port" */
    ga_channel *channel;
} cli_shard;

typedef struct cli {
    cli_shard *shards;
    size_t nshards;
    bool json;
    uint32_t timeout_ms;
} cli;

/* The exit status a call's failure maps to. */
int cli_exit_for(ga_status st);

int cli_jobs(const cli *c);
int cli_status(const cli *c, const char *job);
int cli_delete(const cli *c, const char *job);
int cli_health(const cli *c);

#endif
