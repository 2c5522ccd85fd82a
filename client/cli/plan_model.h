/* The cost model behind `gradagg plan` (docs/scaling.md, "The cost model"): one synchronous step
 * of one job, its phases, what bounds it, each shard's memory, and the textbook references (ring
 * all-reduce, the parameter-server bound), from a deployment and the measured per-byte and
 * per-element costs of plan_costs.c. Pure functions: no I/O, no allocation, any thread. */
#ifndef GA_CLI_PLAN_MODEL_H
#define GA_CLI_PLAN_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ga_codec.h"

/* What one codec pair costs (push codec, pull codec), measured by bench/scalebench.py and fitted
 * by bench/costfit.py. NAN where never measured: the model refuses that pair on that side. */
typedef struct plan_pair_costs {
    ga_codec_id push, pull;
    /* A shard's CPU seconds per step = L * (step_ms + u * push_ms) + m * (step_ns + u * push_ns),
     * with n the elements of its share, U the ranks pushing to it, L its lanes (each a job of its
     * own), every push journaled, and
     *   u = plan_pushes(U, world_exp, sublinear_ranks): U pushes cost as u lone ones (fitted over
     *       W = 4 ... 64: more pushes a step cost each less),
     *   m = n + cache_factor * max(0, n - cache_elements): the elements past what the caches hold
     *       cost 1 + cache_factor times as much. */
    double step_ms, push_ms, step_ns, push_ns, world_exp, cache_factor;
    /* A rank's CPU per step on one core: call_ms per placement (shard x lane) + N * worker_ns
     * (encode, the pull's decode, the SDK's copies), N the model's elements. */
    double call_ms, worker_ns;
    /* A GPU worker: encode and the pull's decode on the device, plus the payloads over PCIe, ns
     * per element of the model. */
    double worker_gpu_ns;
    /* The CUDA backend's device time per element of a push (decode, sum, and its share of the
     * optimizer and publication: bench_store's step ÷ W ÷ n), and once per step per element
     * (the pull's encode and the publication's copy to the host). */
    double cuda_push_ns, cuda_step_ns;
    /* A relay's CPU per step beyond receiving its node's pushes (which costs what a shard's receive
     * does: u(G) * (push_ms + m(N) * push_ns)): relay_ms per lane + N * relay_ns, its step close, the
     * encode of the node's sum, its pulls upstream and their passing on (bench/relaybench.py).
     * NAN: not measured; a shard's step close and a rank's calls and encode stand in. */
    double relay_ms, relay_ns;
    /* How busy the shared cores stay under this pair's step with one shard, (0, 1] (its journal
     * writes and transfers leave them idle: fp32 pushes more than compressed ones); 0: not
     * measured, plan_costs.shared_busy stands in. */
    double shared_busy;
} plan_pair_costs;

typedef struct plan_costs {
    const char *measured;        /* date and machine of the CPU figures */
    const plan_pair_costs *pairs;
    size_t npairs;
    double journal_ns_per_byte;  /* the part of push_ns that --durability checkpoint removes */
    double optimizer_ns[3];      /* per element per step, CPU, one core: none, sgd (momentum), adam */
    double link_efficiency;      /* TCP goodput ÷ link rate */
    double shared_busy;          /* how busy shared cores stay under a step's work with one shard (0, 1],
                                    where its pair has no figure of its own */
    /* Resident memory per shard: base_mib + n * 4 * (copies) + n * state + U * (n * push bytes *
     * held_factor + rank_mib). */
    double base_mib, held_factor, rank_mib;
    double cache_elements;       /* a share's elements past which each costs 1 + cache_factor times */
    double sublinear_ranks;      /* the most ranks world_exp holds to (0: no limit); each push beyond costs the last's */
    /* S shards on shared cores: each shard's CPU is (1 + shard_contention * (S - 1)) times what it
     * would be alone on them. */
    double shard_contention;
    /* As shared_busy, for a relayed step (ranks, relays and one shard on the shared cores); 0: not
     * measured, shared_busy stands in. */
    double relay_busy;
    /* A shard's CPU per byte pushed to it through a link rather than loopback (where the shard's
     * terms were measured): the receive of many small segments. */
    double link_ns_per_byte;
} plan_costs;

extern const plan_costs plan_costs_measured;

/* The pair's costs; NULL when the pair was never measured. */
const plan_pair_costs *plan_costs_pair(const plan_costs *c, ga_codec_id push, ga_codec_id pull);

typedef enum plan_optimizer { PLAN_OPT_NONE = 0, PLAN_OPT_SGD = 1, PLAN_OPT_ADAM = 2 } plan_optimizer;

/* A deployment and the job it carries. Rates: 0 = unlimited (loopback). */
typedef struct plan_setup {
    const uint64_t *tensors;   /* elements of each tensor (borrowed) */
    size_t ntensors;
    uint32_t world;            /* W ranks */
    uint32_t ranks_per_node;   /* G: ranks sharing one node and its link (W a multiple of it) */
    double compute_ms;         /* forward + backward of one rank on its own device or core */
    plan_optimizer optimizer;  /* the server's */
    double link_gbit;          /* each worker node's link, full duplex */
    double server_link_gbit;   /* each shard node's link */
    double node_gbyte_s;       /* inside a node, rank to relay (loopback, PCIe, NVLink) */
    double rtt_ms;             /* one call's round trip */
    double disk_gbyte_s;       /* each shard's journal disk, direct writes (shared_cores: one disk) */
    uint32_t server_cores;     /* cores (--threads) per shard */
    uint32_t relay_cores;      /* cores a node's relay may use */
    uint32_t shared_cores;     /* > 0: every rank, relay and shard on one machine of this many cores */
    bool server_gpu;           /* the shards run --backend cuda */
    bool worker_gpu;           /* the ranks encode on a GPU */
    uint32_t shards;           /* S */
    bool relays;               /* one relay per node: the node's ranks push to it, it pushes their sum */
    bool colocate;             /* shard k runs on worker node k (S = nodes) */
    uint32_t lanes;            /* per shard; 1 = push then pull; shards x lanes <= 64 (the SDK's) */
    ga_codec_id push, pull;
    float topk_ratio;          /* topk's keep ratio, for its payload size */
    bool journal;              /* --durability acked (every push journaled) */
} plan_setup;

typedef enum plan_bound {
    PLAN_BOUND_WORKER_LINK, PLAN_BOUND_SHARD_LINK, PLAN_BOUND_SHARD_CPU, PLAN_BOUND_SHARD_GPU,
    PLAN_BOUND_DISK, PLAN_BOUND_WORKER, PLAN_BOUND_RELAY, PLAN_BOUND_CORES
} plan_bound;

/* "worker link", "shard link", "shard CPU", ... */
const char *plan_bound_name(plan_bound b);

typedef struct plan_estimate {
    /* Phases of the step, seconds: the ranks' encode and the pull's decode, the exchange inside
     * a node through its relay (both ways, with the relay's own work), the push phase, the
     * step's close on the shard, the pull phase. */
    double worker_s, relay_s, push_s, close_s, pull_s;
    double step_s;             /* the step, compute excluded (lanes overlap its phases) */
    double cpu_floor_s;        /* shared_cores: the compute on the cores, then all CPU of the step ÷ (the cores x busy) */
    double iteration_s;        /* max(compute + step, cpu_floor) */
    plan_bound bound;          /* the largest phase, or PLAN_BOUND_CORES */
    uint32_t upstream_ranks;   /* U: ranks the shards see (nodes with relays) */
    uint64_t elements;         /* N */
    uint64_t share_elements;   /* n: the most loaded shard's elements */
    double shard_cpu_s;        /* the most loaded shard's CPU per step */
    double rank_cpu_s;         /* a rank's CPU per step on the host (CPU gradients; its calls only on a GPU) */
    double relay_cpu_s;        /* a relay's CPU per step (relays only) */
    double worker_link_mb;     /* per step, the busier direction of a worker node's link */
    double shard_link_mb;      /* per step, the busier direction of a shard's link */
    double shard_rss_mib;      /* the most loaded shard's resident memory, expected */
    double shard_budget_mib;   /* what that shard accounts against --max-memory-mb */
    uint32_t streams_per_job;  /* push streams one shard holds open for the job: U * lanes */
    double ring_s;             /* fp32 ring all-reduce of the model on the worker links (DDP) */
    double ps_bound_s;         /* the parameter-server bound of this codec pair and shard count */
} plan_estimate;

/* Estimates one step. Returns 0, or -1 with a reason in msg (an empty model, W not a multiple of
 * G, colocated shards other than the nodes, more than GA_PLACEMENT_MAX_SHARDS shards x lanes, a
 * codec pair with no measured cost on this side).
 * *e written only on success. */
int plan_estimate_step(const plan_setup *s, const plan_costs *c, plan_estimate *e, char *msg, size_t cap);

/* Ring all-reduce of `bytes` over W ranks, one ring whose every hop crosses a link of
 * `link_bytes_s`: 2 (W - 1) / W * bytes / rate + 2 (W - 1) * latency (Thakur et al.; 0 when W = 1). */
double plan_ring_allreduce_s(double bytes, uint32_t world, double link_bytes_s, double latency_s);

/* The parameter-server bound (BytePS, OSDI '20): M nodes each pushing and pulling `bytes` over
 * their links while S servers take M pushes of 1/S of it each, both directions at once:
 * max(bytes / worker rate, M * bytes / (S * server rate)). With S = M and equal links it is half
 * the ring's bandwidth term. */
double plan_ps_bound_s(double bytes, uint32_t nodes, uint32_t shards, double worker_bytes_s, double server_bytes_s);

/* What U pushes to one shard cost in lone pushes: U^a up to `knee` ranks, and beyond it each
 * further push what the knee-th did (the tangent: knee^a + a knee^(a-1) (U - knee)). U if a is 1. */
double plan_pushes(double ranks, double world_exp, double knee);

/* The most elements one of S shards holds: a tensor of at least GA_PLAN_CUT_ELEMS elements is cut
 * into S ranges (the SDK's rule), a smaller one lands whole on the shard with the fewest so far. */
#define GA_PLAN_CUT_ELEMS (1u << 20)
uint64_t plan_share_elements(const uint64_t *tensors, size_t ntensors, uint32_t shards);

#endif
