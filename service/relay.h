/* A node relay (docs/relay.md): a gradagg-server started with --relay-to serves the workers of
 * one node as if it were the server, sums their pushes in rank order, and takes part in the
 * upstream job as one member that pushes the node's sum (weighted by the workers in it) with its
 * own codec and error feedback, then serves the upstream version to its workers.
 *
 * This file is the relay's view of the job: which global ranks it serves, how a worker's job
 * config becomes the node's local job (K ranks, summed, no optimizer, fp32 pulls) and the
 * upstream member's (N ranks, the job's own optimizer and pull codec), and the rank mapping of
 * every request before the core sees it. The local job numbers its ranks 0..K-1: global rank
 * r is local rank r - node * K. Pure functions, any thread. */
#ifndef GA_RELAY_H
#define GA_RELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ga_codec.h"
#include "ga_methods.h"
#include "ga_status.h"

struct ga_job_settings;

typedef struct ga_relay_options {
    const char *upstream;   /* the upstream shards, "h:p[,h:p...]" or "shards://name:port"; NULL: no relay */
    uint32_t node;          /* this node's index in [0, nodes): its rank in the upstream job */
    uint32_t nodes;         /* relays in the job: the upstream job's world size */
    uint32_t workers;       /* workers on each node (K): the job's world size is nodes * workers */
    ga_codec_id codec;      /* the node's push upstream, every tensor */
    ga_codec_params params; /* its parameters (threshold, top-k ratio, ...) */
    const char *auth_token; /* bearer token for the upstream calls; NULL = none */
    uint32_t step_timeout_ms; /* how long an upstream pull waits for the other nodes */
} ga_relay_options;

/* "name[:param]" (--relay-codec): none, fp16, bf16, 1bit, 2bit[:threshold], topk[:ratio]; the
 * codec's defaults for what is not given. GA_E_CONFIG with the message otherwise. */
ga_status ga_relay_parse_codec(const char *text, ga_codec_id *codec, ga_codec_params *params, char *why, size_t cap);

/* Whether the options make a relay, and are consistent (node < nodes, workers >= 1, a codec
 * the SDK pushes). GA_E_CONFIG with the message otherwise. */
ga_status ga_relay_check(const ga_relay_options *r, char *why, size_t cap);

/* The first global rank this relay serves (node * workers). */
static inline uint32_t ga_relay_first_rank(const ga_relay_options *r) { return r->node * r->workers; }

/* Turns the settings a worker's config gives the job (job.h ga_job_settings_from) into the
 * node's local job: K ranks, the quorum scaled to them (ceil(q * K / W)), a sum without
 * optimizer (the step's sum is what goes upstream), fp32 pulls (the workers get the upstream
 * copy exactly). Refuses (GA_E_JOB_CONFIG) what a relay cannot carry: async, elastic or
 * bounded-staleness jobs, and a world size other than nodes * workers. */
ga_status ga_relay_localize(const ga_relay_options *r, struct ga_job_settings *s, char *why, size_t cap);

/* The quorum of relays the upstream job closes a step with at its deadline, from the job's
 * effective quorum q of W workers: ceil(q * N / W). */
uint32_t ga_relay_upstream_quorum(const ga_relay_options *r, uint32_t quorum);

/* Maps the global rank a request names to the local one, in place (JoinRequest, LeaveRequest,
 * PullRequest, HeartbeatRequest, a push or init bundle; other methods untouched). GA_E_INVAL
 * for a rank this node does not serve, GA_E_JOB_CONFIG for a Join asking the server to pick a
 * rank (elastic jobs do not pass a relay); the message says which. */
ga_status ga_relay_map_request(const ga_relay_options *r, ga_method_id m, void *payload, char *why, size_t cap);
/* The same for a stream's first chunk (its rank only). */
ga_status ga_relay_map_rank(const ga_relay_options *r, uint32_t *rank, char *why, size_t cap);

#endif
