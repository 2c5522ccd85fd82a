/* Shard discovery (docs/sdk.md, "Shard discovery"): the SDK's server option may name a
 * whole shard set by one DNS name, "shards://NAME:PORT" (a Kubernetes headless Service), and the
 * SDK finds every shard and its index from the servers behind it (their ShardInfo). */
#ifndef GA_DISCOVER_H
#define GA_DISCOVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ga_status.h"
#include "rpc_client.h"

#define GA_DISCOVER_SCHEME "shards://"

/* Whether server names a shard set (starts with GA_DISCOVER_SCHEME). */
bool ga_discover_named(const char *server);

/* Resolves NAME of server ("shards://NAME:PORT"; NAME a host name or [IPv6]) to every address it
 * has (getaddrinfo), asks each address ShardInfo over a channel of its own (sec, whose
 * target_name defaults to NAME: a TLS certificate must name the set's DNS name), and writes to
 * *out (owned, ga_free) the shards' advertised addresses in index order, comma-separated: the
 * server list the SDK then uses. In one round (NAME resolved, every address asked) every answer
 * must give the same count (>= 1) and each index below it one address. While a round leaves an
 * index without an answer (a shard restarting: its address gone from the name or not listening)
 * another round follows, backoff_ms doubling to backoff_max_ms, until
 * budget_ms have passed (0: once). Errors, with why[0..cap): GA_E_INVAL (not NAME:PORT),
 * GA_E_CONFIG (a server in no set: no --shard-count; counts that differ; two addresses for one
 * index), GA_E_UNAVAILABLE (NAME does not resolve, or the set was not complete in time: why names
 * the indices missing), GA_E_NOMEM. */
ga_status ga_discover_shards(const char *server, const ga_channel_security *sec, uint32_t call_timeout_ms,
                             uint32_t budget_ms, uint32_t backoff_ms, uint32_t backoff_max_ms, char **out, char *why,
                             size_t cap);

#endif
