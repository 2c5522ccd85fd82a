/* The cost model of one synchronous step (docs/scaling.md, "The cost model"). */
#include "plan_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "placement.h"

#define MIB (1024.0 * 1024.0)

const char *plan_bound_name(plan_bound b)
{
    static const char *const names[] = {"worker link", "shard link", "shard CPU", "shard GPU", "journal disk",
                                        "worker encode/decode", "relay", "shared cores"};
    return (unsigned)b < sizeof names / sizeof names[0] ? names[b] : "?";
}

const plan_pair_costs *plan_costs_pair(const plan_costs *c, ga_codec_id push, ga_codec_id pull)
{
    for (size_t i = 0; i < c->npairs; i++)
        if (c->pairs[i].push == push && c->pairs[i].pull == pull) return &c->pairs[i];
    return NULL;
}

double plan_ring_allreduce_s(double bytes, uint32_t world, double link_bytes_s, double latency_s)
{
    if (world < 2) return 0.0;
    double hops = 2.0 * (world - 1);
    double wire = link_bytes_s > 0 ? hops / world * bytes / link_bytes_s : 0.0;
    return wire + hops * latency_s;
}

double plan_ps_bound_s(double bytes, uint32_t nodes, uint32_t shards, double worker_bytes_s, double server_bytes_s)
{
    double worker = worker_bytes_s > 0 ? bytes / worker_bytes_s : 0.0;
    double server = server_bytes_s > 0 && shards ? (double)nodes * bytes / ((double)shards * server_bytes_s) : 0.0;
    return fmax(worker, server);
}

double plan_pushes(double ranks, double world_exp, double knee)
{
    if (ranks <= knee || knee <= 0) return pow(ranks, world_exp);
    return pow(knee, world_exp) + world_exp * pow(knee, world_exp - 1.0) * (ranks - knee);
}

/* The elements a share of n costs as, its part past the caches at 1 + cache_factor. */
static double cached_elements(const plan_costs *c, const plan_pair_costs *pc, double n)
{
    return n + pc->cache_factor * fmax(0.0, n - c->cache_elements);
}

static int by_size_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

uint64_t plan_share_elements(const uint64_t *tensors, size_t ntensors, uint32_t shards)
{
    if (shards == 0) return 0;
    uint64_t load[64] = {0}, small[256];
    uint32_t s = shards < 64 ? shards : 64;
    size_t nsmall = 0;
    uint64_t rest = 0; /* small tensors past the sorted ones, spread evenly */
    for (size_t i = 0; i < ntensors; i++) {
        uint64_t t = tensors[i];
        if (t >= GA_PLAN_CUT_ELEMS || s == 1) {
            for (uint32_t k = 0; k < s; k++) load[k] += t / s + (k < t % s);
        } else if (nsmall < sizeof small / sizeof small[0]) {
            small[nsmall++] = t;
        } else {
            rest += t;
        }
    }
    qsort(small, nsmall, sizeof small[0], by_size_desc);
    for (size_t i = 0; i < nsmall; i++) { /* the largest first, each on the least loaded shard */
        uint32_t best = 0;
        for (uint32_t k = 1; k < s; k++)
            if (load[k] < load[best]) best = k;
        load[best] += small[i];
    }
    uint64_t most = 0;
    for (uint32_t k = 0; k < s; k++) most = load[k] > most ? load[k] : most;
    return most + (rest + s - 1) / s;
}

/* Payload bytes per element of a codec on n elements. */
static double bytes_per_element(ga_codec_id codec, float topk_ratio, uint64_t n)
{
    ga_codec_params p = ga_codec_params_default(codec);
    if (codec == GA_CODEC_TOPK && topk_ratio > 0) p.ratio = topk_ratio;
    size_t bytes = 0;
    if (n == 0 || ga_codec_encoded_size(codec, &p, (size_t)n, &bytes) != GA_OK) return 4.0;
    return (double)bytes / (double)n;
}

static double rate_bytes_s(double gbit, double efficiency)
{
    return gbit > 0 ? gbit * 1e9 / 8.0 * efficiency : 0.0;
}

static double over(double bytes, double rate)
{
    return rate > 0 ? bytes / rate : 0.0;
}

int plan_estimate_step(const plan_setup *s, const plan_costs *c, plan_estimate *e, char *msg, size_t cap)
{
    uint64_t N = 0;
    for (size_t i = 0; i < s->ntensors; i++) N += s->tensors[i];
    uint32_t G = s->ranks_per_node ? s->ranks_per_node : 1;
    if (N == 0 || s->world == 0 || s->shards == 0 || s->world % G) {
        snprintf(msg, cap, "%s", N == 0 ? "the model has no elements" : s->world == 0 ? "no ranks" : s->shards == 0 ? "no shards"
                                                                                  : "the ranks are not a multiple of the ranks per node");
        return -1;
    }
    uint32_t nodes = s->world / G, U = s->relays ? nodes : s->world;
    uint32_t lanes = s->lanes ? s->lanes : 1;
    if ((uint64_t)s->shards * lanes > GA_PLACEMENT_MAX_SHARDS) {
        snprintf(msg, cap, "%u shards x %u lanes: a client holds at most %u", s->shards, lanes, GA_PLACEMENT_MAX_SHARDS);
        return -1;
    }
    if (s->colocate && s->shards != nodes) {
        snprintf(msg, cap, "colocated shards: one per worker node (%u), not %u", nodes, s->shards);
        return -1;
    }
    const plan_pair_costs *pc = plan_costs_pair(c, s->push, s->pull);
    if (!pc) {
        snprintf(msg, cap, "no measured cost for pushing %s and pulling %s", ga_codec_name(s->push), ga_codec_name(s->pull));
        return -1;
    }
    if ((s->worker_gpu && isnan(pc->worker_gpu_ns)) || (s->server_gpu && (isnan(pc->cuda_push_ns) || isnan(pc->cuda_step_ns)))) {
        snprintf(msg, cap, "no measured %s cost for pushing %s and pulling %s", s->server_gpu ? "CUDA" : "GPU worker",
                 ga_codec_name(s->push), ga_codec_name(s->pull));
        return -1;
    }

    plan_estimate x = {0};
    x.elements = N;
    x.upstream_ranks = U;
    uint64_t n = plan_share_elements(s->tensors, s->ntensors, s->shards);
    x.share_elements = n;
    double bp = bytes_per_element(s->push, s->topk_ratio, N), bl = bytes_per_element(s->pull, 0, N);
    double eff = c->link_efficiency;
    double Lw = rate_bytes_s(s->link_gbit, eff), Ls = rate_bytes_s(s->server_link_gbit, eff);
    double Li = s->node_gbyte_s > 0 ? s->node_gbyte_s * 1e9 : 0.0;
    double rtt = s->rtt_ms / 1e3, cores = s->server_cores ? s->server_cores : 1;
    double relay_cores = s->relay_cores ? s->relay_cores : 1, rank_share = 1.0;
    if (s->shared_cores) { /* one machine: the processes of a phase split its cores */
        double K = s->shared_cores;
        cores = fmin(cores, K / s->shards);
        relay_cores = fmin(relay_cores, K / (s->relays ? nodes : 1));
        rank_share = fmin(1.0, K / s->world);
    }
    double unjournaled = s->journal ? 0.0 : c->journal_ns_per_byte * bp; /* off push_ns: checkpoint */
    double opt = c->optimizer_ns[s->optimizer];

    /* Every rank encodes its gradients and decodes the pull (with relays too: they push the codec),
     * and pushes to and pulls from each of its placements, a call each: the S x L shards and
     * lanes, or with relays its relay's L lanes (each lane a job the relay carries upstream). */
    double placements = (double)s->shards * lanes, call_s = pc->call_ms / 1e3;
    double coding_s = (double)N * pc->worker_ns / 1e9;
    double calls_s = (s->relays ? lanes : placements) * call_s;
    double worker_cpu = calls_s + coding_s;
    x.worker_s = s->worker_gpu ? calls_s + (double)N * pc->worker_gpu_ns / 1e9 : worker_cpu / rank_share;
    x.rank_cpu_s = s->worker_gpu ? calls_s : worker_cpu;

    /* Relays: the node's G ranks push the job's codec into it and take its pulls over the node's
     * own path; the relay receives and sums their pushes as a shard does, per lane, then closes
     * the node's step (no optimizer; its publication decodes the pulled version where a shard's
     * encodes it), encodes the node's sum, pulls and passes the pull on byte for byte: measured
     * as the pair's relay terms, or else costed as a shard's step close and a rank's uplink. */
    double relay_cpu = 0;
    if (s->relays) {
        double node_pushes = plan_pushes(G, pc->world_exp, c->sublinear_ranks), mN = cached_elements(c, pc, (double)N);
        relay_cpu = node_pushes * (lanes * pc->push_ms / 1e3 + mN * pc->push_ns / 1e9);
        if (isfinite(pc->relay_ms) && isfinite(pc->relay_ns))
            relay_cpu += lanes * pc->relay_ms / 1e3 + (double)N * pc->relay_ns / 1e9;
        else /* a shard's step close, and a rank of the upstream job */
            relay_cpu += lanes * pc->step_ms / 1e3 + mN * pc->step_ns / 1e9 + placements * call_s + coding_s;
        double inner_wire = over((double)G * N * bp, Li) + over((double)G * N * bl, Li);
        x.relay_s = fmax(inner_wire, relay_cpu / relay_cores);
        x.relay_cpu_s = relay_cpu;
    }

    /* Bytes on the links per step, each direction. */
    uint32_t per_node = s->relays ? 1 : G; /* pushes leaving one worker node */
    double w_push, w_pull, s_push, s_pull;
    if (s->colocate) {
        double away = (double)(s->shards - 1) / s->shards;
        w_push = fmax(per_node * N * bp * away, (double)(U - per_node) * n * bp);
        w_pull = fmax((double)(U - per_node) * n * bl, per_node * N * bl * away);
        s_push = w_push, s_pull = w_pull;
    } else {
        w_push = per_node * (double)N * bp, w_pull = per_node * (double)N * bl;
        s_push = (double)U * n * bp, s_pull = (double)U * n * bl;
    }
    double Ls_eff = s->colocate ? Lw : Ls;
    x.worker_link_mb = fmax(w_push, w_pull) / 1e6;
    x.shard_link_mb = fmax(s_push, s_pull) / 1e6;

    /* The shard: receiving, journaling, decoding and adding U pushes; then once per step the
     * optimizer, the publication and the pull's encode; then U pulls out. Each of its L lanes is
     * a job of its own: L pushes per rank and L step closes, each with its fixed cost. S shards on
     * one machine's cores each cost more than one alone there (shard_contention). */
    double pushes = plan_pushes(U, pc->world_exp, c->sublinear_ranks), m = cached_elements(c, pc, (double)n);
    double contention = s->shared_cores ? 1.0 + c->shard_contention * (s->shards - 1.0) : 1.0;
    /* the pushes that reach the shard through a link (a colocated shard's own node's through
     * loopback) cost it link_ns_per_byte more per byte than the loopback of the calibration */
    bool linked = s->colocate ? s->link_gbit > 0 : s->server_link_gbit > 0;
    double link_in = !linked ? 0.0 : s->colocate ? (double)(U - per_node) * n * bp : (double)U * n * bp;
    double push_cpu = contention * (pushes * (lanes * pc->push_ms / 1e3 + (m * pc->push_ns - (double)n * unjournaled) / 1e9) +
                                    link_in * c->link_ns_per_byte / 1e9);
    double step_cpu = contention * (lanes * pc->step_ms / 1e3 + (m * pc->step_ns + (double)n * opt) / 1e9);
    double push_dev = 0, step_dev = 0;
    if (s->server_gpu) {
        /* the receive and the journal stay on the host: push_cpu as measured on the CPU backend,
         * whose decode and sum (under a quarter of push_ns) it keeps as a margin */
        push_dev = (double)U * n * pc->cuda_push_ns / 1e9;
        step_dev = (double)n * pc->cuda_step_ns / 1e9;
        step_cpu = contention * lanes * pc->step_ms / 1e3;
    }
    x.shard_cpu_s = push_cpu + step_cpu;
    /* Every push is on the journal's disk before its ack; on one machine all shards share one. */
    double disk_bytes = s->journal ? s_push * (s->shared_cores ? s->shards : 1) : 0.0;
    double disk = over(disk_bytes, s->disk_gbyte_s * 1e9);
    double push_wire = fmax(over(w_push, Lw), over(s_push, Ls_eff));
    double pull_wire = fmax(over(w_pull, Lw), over(s_pull, Ls_eff));
    x.push_s = fmax(fmax(push_wire, push_cpu / cores), fmax(push_dev, disk)) + rtt;
    x.close_s = step_cpu / cores + step_dev;
    x.pull_s = pull_wire + rtt;

    double phases[5] = {x.worker_s, x.relay_s, x.push_s, x.close_s, x.pull_s};
    double sum = 0, most = 0;
    int which = 0;
    for (int i = 0; i < 5; i++) {
        sum += phases[i];
        if (phases[i] > most) most = phases[i], which = i;
    }
    /* Lanes overlap the phases: a lane pushes once the lane `window` before it has pulled, window =
     * max(2, ceil(lanes / 4)) (client/shard.c); with no more lanes than that they run as one. */
    double window = fmax(2.0, ceil(lanes / 4.0));
    x.step_s = window < lanes ? most + (sum - most) * window / lanes : sum;
    switch (which) {
    case 0: x.bound = PLAN_BOUND_WORKER; break;
    case 1: x.bound = PLAN_BOUND_RELAY; break;
    case 3: x.bound = s->server_gpu && step_dev > step_cpu / cores ? PLAN_BOUND_SHARD_GPU : PLAN_BOUND_SHARD_CPU; break;
    default: {
        double wire = which == 2 ? push_wire : pull_wire;
        double shard_wire = which == 2 ? over(s_push, Ls_eff) : over(s_pull, Ls_eff);
        if (which == 2 && disk > fmax(fmax(wire, push_cpu / cores), push_dev)) x.bound = PLAN_BOUND_DISK;
        else if (which == 2 && push_dev > fmax(wire, push_cpu / cores)) x.bound = PLAN_BOUND_SHARD_GPU;
        else if (which == 2 && push_cpu / cores > wire) x.bound = PLAN_BOUND_SHARD_CPU;
        else x.bound = shard_wire >= wire ? PLAN_BOUND_SHARD_LINK : PLAN_BOUND_WORKER_LINK;
    }
    }

    /* One machine for everything: the step cannot beat all its CPU over the cores, which its own
     * work keeps only busy_S busy (its phases wait on each other, the disk, the loopback). The
     * step is synchronous and follows the compute (every rank waits for it), so the ranks'
     * compute does not fill its gaps: the iteration is the compute on the cores, then the step. */
    x.iteration_s = s->compute_ms / 1e3 + x.step_s;
    if (s->shared_cores) {
        double compute_cpu = s->world * s->compute_ms / 1e3;
        double step_cpu_all = s->world * worker_cpu + s->shards * x.shard_cpu_s + (s->relays ? nodes * relay_cpu : 0);
        double K = s->shared_cores;
        /* shared_busy is one shard's: its pair's with every push journaled (the journal's writes
         * leave the cores idle), the machine's median without the journal or where the pair has
         * none, relay_busy with relays (a step's work passes through one more process); the idle
         * share comes from each shard's serial sections (a job's tasks run one at a time): S
         * shards run theirs side by side on up to K cores */
        double pair_busy = s->journal && pc->shared_busy > 0 ? pc->shared_busy : c->shared_busy;
        double one_shard = s->relays && c->relay_busy > 0 ? c->relay_busy : pair_busy;
        double busy = 1.0 - (1.0 - one_shard) / fmin(s->shards, K);
        double compute_wall = fmax(s->compute_ms / 1e3, compute_cpu / K);
        x.cpu_floor_s = compute_wall + step_cpu_all / (K * busy);
        x.iteration_s = compute_wall + x.step_s;
        if (x.cpu_floor_s > x.iteration_s) {
            x.iteration_s = x.cpu_floor_s;
            x.step_s = x.cpu_floor_s - compute_wall;
            x.bound = PLAN_BOUND_CORES;
        }
    }

    /* Memory: the parameters and the published copy (one fp32 copy with fp32 pulls), the
     * optimizer's state, and per pushing rank its held push and its streams. */
    double copies = s->pull == GA_CODEC_NONE ? 1.0 : 2.0, state = 4.0 * s->optimizer;
    double held = (double)U * n * bp * c->held_factor;
    x.shard_budget_mib = ((double)n * (4.0 * copies + state) + (double)U * n * bp) / MIB;
    x.shard_rss_mib = c->base_mib + ((double)n * (4.0 * copies + state) + held) / MIB + U * c->rank_mib;
    x.streams_per_job = U * lanes;

    x.ring_s = plan_ring_allreduce_s((double)N * 4.0, s->world, Lw, rtt / 2);
    x.ps_bound_s = plan_ps_bound_s((double)N * fmax(bp, bl), U, s->shards, Lw, Ls_eff);
    *e = x;
    return 0;
}
