/* The relay's view of a job: settings, upstream quorum and rank mapping (relay.h). */
#include "relay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"

ga_status ga_relay_parse_codec(const char *text, ga_relay_options *r, char *why, size_t cap)
{
    ga_codec_id *codec = &r->codec;
    ga_codec_params *params = &r->params;
    r->auto_threshold = false;
    char name[32];
    const char *colon = strchr(text, ':');
    size_t len = colon ? (size_t)(colon - text) : strlen(text);
    if (len == 0 || len >= sizeof name)
        return ga_status_fail(GA_E_CONFIG, why, cap, "--relay-codec '%s': no codec name", text);
    memcpy(name, text, len);
    name[len] = '\0';
    if (ga_codec_from_name(name, codec) != GA_OK)
        return ga_status_fail(GA_E_CONFIG, why, cap, "--relay-codec '%s': unknown codec '%s'", text, name);
    *params = ga_codec_params_default(*codec);
    if (!colon) return GA_OK;
    if (*codec == GA_CODEC_2BIT && strcmp(colon + 1, "auto") == 0) {
        r->auto_threshold = true;
        return GA_OK;
    }
    char *end;
    float v = strtof(colon + 1, &end);
    if (end == colon + 1 || *end || (*codec != GA_CODEC_2BIT && *codec != GA_CODEC_TOPK))
        return ga_status_fail(GA_E_CONFIG, why, cap,
                              "--relay-codec '%s': only 2bit:<threshold>, 2bit:auto and topk:<ratio> take a value",
                              text);
    if (*codec == GA_CODEC_2BIT)
        params->threshold = v;
    else
        params->ratio = v;
    return GA_OK;
}

ga_status ga_relay_check(const ga_relay_options *r, char *why, size_t cap)
{
    if (!r->upstream || !r->upstream[0]) return ga_status_fail(GA_E_CONFIG, why, cap, "--relay-to names no upstream");
    if (r->workers < 1 || r->workers > GA_JOB_MAX_WORLD)
        return ga_status_fail(GA_E_CONFIG, why, cap, "--relay-workers %u outside [1, %u]", r->workers,
                              GA_JOB_MAX_WORLD);
    if (r->nodes && (uint64_t)r->workers * r->nodes > GA_JOB_MAX_WORLD)
        return ga_status_fail(GA_E_CONFIG, why, cap, "--relay-workers %u x --relay-nodes %u is over %u workers",
                              r->workers, r->nodes, GA_JOB_MAX_WORLD);
    if (r->node_given && r->nodes && r->node >= r->nodes)
        return ga_status_fail(GA_E_CONFIG, why, cap, "--relay-node %u outside [0, --relay-nodes %u)", r->node,
                              r->nodes);
    ga_status st = ga_codec_params_validate(r->codec, &r->params);
    if (st != GA_OK)
        return ga_status_fail(GA_E_CONFIG, why, cap, "--relay-codec %s: %s", ga_codec_name(r->codec), ga_strerror(st));
    return GA_OK;
}

ga_status ga_relay_place_of(const ga_relay_options *r, uint32_t rank, uint32_t world, ga_relay_place *out, char *why,
                            size_t cap)
{
    uint32_t k = r->workers;
    if (world == 0 || world % k != 0 || (r->nodes && world != r->nodes * k))
        return ga_status_fail(GA_E_CONFIG, why, cap,
                              "config.world_size %u is not %s x %u workers per node (--relay-workers): every worker "
                              "of a relayed job joins its node's relay (docs/relay.md)",
                              world, r->nodes ? "--relay-nodes" : "a number of nodes", k);
    ga_relay_place p = {r->node_given ? r->node : rank / k, world / k, k};
    if (p.node >= p.nodes)
        return ga_status_fail(GA_E_CONFIG, why, cap, "--relay-node %u is not below the job's %u nodes", p.node,
                              p.nodes);
    uint32_t local = rank;
    GA_CHECK(ga_relay_map_rank(&p, &local, why, cap));
    *out = p;
    return GA_OK;
}

static uint32_t scaled(uint32_t q, uint32_t part, uint32_t whole)
{
    uint64_t v = ((uint64_t)q * part + whole - 1) / whole;
    return v < 1 ? 1 : (uint32_t)v;
}

ga_status ga_relay_localize(const ga_relay_place *p, ga_job_settings *s, char *why, size_t cap)
{
    if (s->async)
        return ga_status_fail(GA_E_CONFIG, why, cap, "an async job does not pass a relay: its pushes apply one by one");
    if (s->min_world)
        return ga_status_fail(GA_E_CONFIG, why, cap, "an elastic job (min_world_size %u) does not pass a relay",
                              s->min_world);
    if (s->staleness)
        return ga_status_fail(GA_E_CONFIG, why, cap, "a job with staleness %u does not pass a relay", s->staleness);
    s->quorum = scaled(s->quorum, p->workers, s->world);
    s->world = p->workers;
    s->store.optim = GA_OPTIM_REDUCE;
    s->store.mean = false;
    s->store.pull_codec = GA_CODEC_NONE;
    s->store.pull_auto_bits = 0.0f;
    return GA_OK;
}

uint32_t ga_relay_upstream_quorum(const ga_relay_place *p, uint32_t quorum)
{
    return scaled(quorum, p->nodes, p->nodes * p->workers);
}

ga_status ga_relay_map_rank(const ga_relay_place *p, uint32_t *rank, char *why, size_t cap)
{
    uint32_t first = p->node * p->workers;
    if (*rank < first || *rank - first >= p->workers)
        return ga_status_fail(GA_E_RANK, why, cap, "rank %u is not on this node: its relay serves ranks %u..%u",
                              *rank, first, first + p->workers - 1);
    *rank -= first;
    return GA_OK;
}
