/* A node relay (docs/relay.md): a gradagg-server started with --relay-to serves the workers of
 * one node as if it were the server, sums their pushes in rank order, and takes part in the
 * upstream job as one member that pushes the node's sum (weighted by the workers in it) with its
 * own codec and error feedback, then serves the upstream version to its workers.
 *
 * This file is the relay's view of a job: which global ranks it serves, how a worker's job
 * config becomes the node's local job (K ranks, summed, no optimizer, fp32 pulls) and the
 * upstream member's (N ranks, the job's own optimizer and pull codec), and the rank mapping.
 * The local job numbers its ranks 0..K-1: global rank r is local rank r - node * K. Pure
 * functions, any thread. */
#ifndef GA_RELAY_H
#define GA_RELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ga_codec.h"
#include "ga_status.h"

struct ga_job_settings;

typedef struct ga_relay_options {
    const char *upstream;   /* the upstream shards, "h:p[,h:p...]" or "shards://name:port"; NULL: no relay */
    uint32_t workers;       /* K, the workers on each node: a relayed job's world size W is a multiple */
    bool node_given;        /* node: this relay's node index, the same for every job; else each job's
                             * first Join tells it (its rank / K: torchrun's numbering) */
    uint32_t node;
    uint32_t nodes;         /* N, relays in every job (its W is then N * K); 0: each job's W / K */
    ga_codec_id codec;      /* the node's push upstream, every tensor */
    ga_codec_params params; /* its parameters (threshold, top-k ratio, ...) */
    bool auto_threshold;    /* 2bit: the SDK picks the threshold each step (docs/auto-threshold.md) */
    /* TLS upstream (the SDK's options, read at each upstream client's create); NULL: plaintext,
     * no client certificate, the address's host. */
    const char *tls_ca_file, *tls_cert_file, *tls_key_file, *tls_target_name;
} ga_relay_options;

/* A job's place in its relayed layout: this relay is node `node` of `nodes`, serving the global
 * ranks [node * K, (node + 1) * K) of W = nodes * K. */
typedef struct ga_relay_place {
    uint32_t node, nodes, workers;
} ga_relay_place;

/* "name[:param]" (--relay-codec): none, fp16, bf16, 1bit, 2bit[:threshold | :auto], topk[:ratio];
 * the codec's defaults for what is not given. Fills r's codec, params and auto_threshold.
 * GA_E_CONFIG with the message otherwise. */
ga_status ga_relay_parse_codec(const char *text, ga_relay_options *r, char *why, size_t cap);

/* Whether the options make a relay, and are consistent (workers >= 1, node < nodes when both
 * are given, a codec the SDK pushes). GA_E_CONFIG with the message otherwise. */
ga_status ga_relay_check(const ga_relay_options *r, char *why, size_t cap);

/* A new job's place from its first Join: rank (global) of a job of world_size W. GA_E_CONFIG
 * when W is not a multiple of K (or not N * K with N given), GA_E_RANK when the rank is not on
 * the given node; the message says which. */
ga_status ga_relay_place_of(const ga_relay_options *r, uint32_t rank, uint32_t world, ga_relay_place *out, char *why,
                            size_t cap);

/* Turns the settings a worker's config gives the job (job.h ga_job_settings_from) into the
 * node's local job: K ranks, the quorum scaled to them (ceil(q * K / W)), a sum without
 * optimizer (the step's sum is what goes upstream), fp32 pulls (the workers get the upstream
 * copy exactly). Refuses (GA_E_CONFIG) what a relay cannot carry: async, elastic or
 * bounded-staleness jobs. */
ga_status ga_relay_localize(const ga_relay_place *p, struct ga_job_settings *s, char *why, size_t cap);

/* The quorum of relays the upstream job closes a step with at its deadline, from the job's
 * effective quorum q of W workers: ceil(q * N / W). */
uint32_t ga_relay_upstream_quorum(const ga_relay_place *p, uint32_t quorum);

/* Maps a global rank to the place's local one (rank - node * K), in place. GA_E_RANK for a
 * rank of another node, naming the ranks this node serves. */
ga_status ga_relay_map_rank(const ga_relay_place *p, uint32_t *rank, char *why, size_t cap);

#endif
