/* The planner's cost model (client/cli/plan_model.h) and search (plan.h): the textbook costs it
 * must reproduce (ring all-reduce, the parameter-server bound), its phases against hand-computed
 * values, the shares, the memory, its refusals, and the search's rules. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "plan.h"

#define GBIT 1e9 / 8.0

static void assert_close(double got, double want)
{
    if (fabs(got - want) > 1e-9 * fmax(1.0, fabs(want))) fail_msg("got %.12g, want %.12g", got, want);
}

/* A cost table where only the wire costs: every CPU and device cost zero, every link at its rate. */
static plan_pair_costs free_pairs[] = {
    {GA_CODEC_NONE, GA_CODEC_NONE, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {GA_CODEC_2BIT, GA_CODEC_2BIT, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
};
static plan_costs free_costs = {"test", free_pairs, 2, 0, {0, 0, 0}, 1.0, 1.0, 0, 1.0, 0, 0, 0, 0, 0, 0};

static uint64_t one_tensor[1] = {64u << 20};

static plan_setup wire_only(uint32_t world, uint32_t shards)
{
    plan_setup s = {0};
    s.tensors = one_tensor, s.ntensors = 1;
    s.world = world, s.ranks_per_node = 1;
    s.link_gbit = 10, s.server_link_gbit = 10;
    s.server_cores = 1, s.shards = shards, s.lanes = 1;
    s.push = s.pull = GA_CODEC_NONE;
    return s;
}

static void ring_is_the_textbook_cost(void **state)
{
    (void)state;
    assert_close(plan_ring_allreduce_s(1e9, 4, 1e9, 0), 2.0 * 3 / 4);
    assert_close(plan_ring_allreduce_s(1e9, 4, 1e9, 1e-3), 1.5 + 6e-3);
    assert_close(plan_ring_allreduce_s(1e9, 1, 1e9, 1e-3), 0);
    assert_close(plan_ring_allreduce_s(8e9, 1024, 12.5e9, 0), 2.0 * 1023 / 1024 * 8e9 / 12.5e9);
}

static void ps_bound_is_bytepss(void **state)
{
    (void)state;
    /* S = M servers with the workers' rate: the model once per link, half the ring's 2 (M-1)/M. */
    assert_close(plan_ps_bound_s(1e9, 16, 16, 1e9, 1e9), 1.0);
    assert_close(plan_ps_bound_s(1e9, 16, 16, 1e9, 1e9) * 2.0 * 15 / 16, plan_ring_allreduce_s(1e9, 16, 1e9, 0));
    /* One server: M models through its link. */
    assert_close(plan_ps_bound_s(1e9, 16, 1, 1e9, 1e9), 16.0);
    /* Servers with twice the rate need half as many. */
    assert_close(plan_ps_bound_s(1e9, 16, 8, 1e9, 2e9), 1.0);
}

/* BytePS's colocated servers with fp32 push then pull: every link carries the ring's bytes. */
static void colocated_fp32_is_the_ring(void **state)
{
    (void)state;
    for (uint32_t w = 2; w <= 64; w *= 2) {
        plan_setup s = wire_only(w, w);
        s.colocate = true;
        plan_estimate e;
        char msg[128];
        assert_int_equal(plan_estimate_step(&s, &free_costs, &e, msg, sizeof msg), 0);
        double bytes = (double)one_tensor[0] * 4;
        assert_close(e.step_s, plan_ring_allreduce_s(bytes, w, 10 * GBIT, 0));
        assert_close(e.ring_s, e.step_s);
    }
}

/* Shards on their own nodes: push then pull is twice the parameter-server bound; lanes overlap
 * all but a window's share (max(2, a quarter of the lanes)) of the shorter phase. */
static void own_shards_are_twice_the_ps_bound(void **state)
{
    (void)state;
    plan_setup s = wire_only(32, 4);
    plan_estimate e;
    char msg[128];
    assert_int_equal(plan_estimate_step(&s, &free_costs, &e, msg, sizeof msg), 0);
    double bytes = (double)one_tensor[0] * 4;
    double ps = plan_ps_bound_s(bytes, 32, 4, 10 * GBIT, 10 * GBIT);
    assert_close(e.ps_bound_s, ps);
    assert_close(e.step_s, 2 * ps);
    assert_int_equal(e.bound, PLAN_BOUND_SHARD_LINK);
    assert_close(e.shard_link_mb, 32 * bytes / 4 / 1e6);
    s.lanes = 16;
    assert_int_equal(plan_estimate_step(&s, &free_costs, &e, msg, sizeof msg), 0);
    assert_close(e.step_s, ps * (1 + 4.0 / 16));
    s.lanes = 4; /* the window is at least 2 lanes: half of the shorter phase stays exposed */
    assert_int_equal(plan_estimate_step(&s, &free_costs, &e, msg, sizeof msg), 0);
    assert_close(e.step_s, ps * (1 + 2.0 / 4));
    s.lanes = 2; /* no more lanes than the window: push, then pull */
    assert_int_equal(plan_estimate_step(&s, &free_costs, &e, msg, sizeof msg), 0);
    assert_close(e.step_s, 2 * ps);
    s.lanes = 32; /* 4 shards x 32 lanes: more streams than a client holds */
    assert_int_equal(plan_estimate_step(&s, &free_costs, &e, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "at most 64"));
    /* 2bit both ways: a sixteenth of the bytes. */
    s.lanes = 1, s.push = s.pull = GA_CODEC_2BIT;
    assert_int_equal(plan_estimate_step(&s, &free_costs, &e, msg, sizeof msg), 0);
    assert_close(e.step_s, 2 * ps / 16);
}

static void shares_cut_large_tensors_and_balance_small_ones(void **state)
{
    (void)state;
    uint64_t t[] = {4u << 20, 1000, 900, 800, 700};
    assert_int_equal(plan_share_elements(t, 5, 1), (4u << 20) + 3400);
    /* the large tensor in 4 equal ranges; the small ones on the least loaded shard, largest first */
    assert_int_equal(plan_share_elements(t, 5, 4), (1u << 20) + 1000);
    uint64_t odd[] = {(1u << 20) + 3};
    assert_int_equal(plan_share_elements(odd, 1, 2), (1u << 19) + 2);
}

/* The CPU terms as plan_pair_costs states them, on the most loaded shard. */
static void cpu_terms_follow_the_formula(void **state)
{
    (void)state;
    plan_pair_costs pair = {GA_CODEC_2BIT, GA_CODEC_2BIT, 2.0, 0.5, 3.0, 1.0, 1.0, 0.0, 0.25, 2.0,
                            NAN, NAN, NAN, NAN, NAN, 0};
    plan_costs c = {"test", &pair, 1, 0, {0, 0.5, 0.75}, 1.0, 1.0, 0, 1.0, 0, 0, 0, 0, 0, 0};
    plan_setup s = wire_only(8, 2);
    s.push = s.pull = GA_CODEC_2BIT;
    s.link_gbit = s.server_link_gbit = 0; /* unlimited */
    s.server_cores = 4;
    s.optimizer = PLAN_OPT_SGD;
    plan_estimate e;
    char msg[128];
    assert_int_equal(plan_estimate_step(&s, &c, &e, msg, sizeof msg), 0);
    double n = (double)(one_tensor[0] / 2), N = (double)one_tensor[0];
    double push = 8 * (0.5e-3 + n * 1.0e-9), step = 2.0e-3 + n * (3.0 + 0.5) * 1e-9;
    assert_close(e.shard_cpu_s, push + step);
    assert_close(e.push_s, push / 4);
    assert_close(e.close_s, step / 4);
    /* a rank: a call per shard (2), then its encode and decode of the whole model */
    assert_close(e.worker_s, 2 * 0.25e-3 + N * 2.0e-9);
    assert_close(e.rank_cpu_s, e.worker_s);
    assert_close(e.step_s, e.worker_s + e.push_s + e.close_s + e.pull_s);
    /* four lanes: each a job of its own, so the fixed parts count four times, the per-element
     * parts once; the rank makes a call per shard and lane */
    s.lanes = 4;
    assert_int_equal(plan_estimate_step(&s, &c, &e, msg, sizeof msg), 0);
    assert_close(e.shard_cpu_s, push + 8 * 3 * 0.5e-3 + step + 3 * 2.0e-3);
    assert_close(e.rank_cpu_s, 8 * 0.25e-3 + N * 2.0e-9);
    s.lanes = 1;
    /* relays of 4 ranks: a rank calls its relay only; the relay receives its node's pushes and
     * closes its step as a shard does (no optimizer), over the whole model, and calls the 2
     * shards and encodes as a rank does */
    s.ranks_per_node = 4, s.relays = true;
    assert_int_equal(plan_estimate_step(&s, &c, &e, msg, sizeof msg), 0);
    assert_close(e.rank_cpu_s, 0.25e-3 + N * 2.0e-9);
    assert_close(e.relay_cpu_s, 2.0e-3 + 4 * 0.5e-3 + N * (4 * 1.0 + 3.0) * 1e-9 + 2 * 0.25e-3 + N * 2.0e-9);
    assert_close(e.shard_cpu_s, 2 * (0.5e-3 + n * 1.0e-9) + step);
    /* with the relay's own terms measured, they replace the step close and the uplink */
    pair.relay_ms = 7.0, pair.relay_ns = 5.0;
    assert_int_equal(plan_estimate_step(&s, &c, &e, msg, sizeof msg), 0);
    assert_close(e.relay_cpu_s, 4 * 0.5e-3 + N * 4 * 1.0e-9 + 7.0e-3 + N * 5.0e-9);
    pair.relay_ms = pair.relay_ns = NAN;
    s.ranks_per_node = 1, s.relays = false;
    /* twice the ranks: twice the per-push part */
    s.world = 16;
    assert_int_equal(plan_estimate_step(&s, &c, &e, msg, sizeof msg), 0);
    assert_close(e.shard_cpu_s, 2 * push + step);
    /* no GPU cost measured for this pair: refused with the reason */
    s.worker_gpu = true;
    assert_int_equal(plan_estimate_step(&s, &c, &e, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "GPU"));
}

/* The terms past a linear shard: U pushes cost as U^a lone ones up to the knee and the knee-th's
 * each beyond it; a share's elements past cache_elements cost 1 + cache_factor times; S shards
 * on shared cores each cost 1 + shard_contention * (S - 1) times one alone there; bytes pushed
 * through a link cost link_ns_per_byte. */
static void sublinear_pushes_caches_and_contention(void **state)
{
    (void)state;
    assert_close(plan_pushes(64, 1.0, 256), 64);
    assert_close(plan_pushes(64, 0.8, 256), pow(64, 0.8));
    assert_close(plan_pushes(64, 0.8, 0), pow(64, 0.8));
    assert_close(plan_pushes(1024, 0.8, 256), pow(256, 0.8) + 0.8 * pow(256, -0.2) * 768);
    /* continuous at the knee, and each push past it costs what the knee-th did */
    assert_close(plan_pushes(256, 0.8, 256), pow(256, 0.8));
    assert_close(plan_pushes(1025, 0.8, 256) - plan_pushes(1024, 0.8, 256), 0.8 * pow(256, -0.2));

    plan_pair_costs pair = {GA_CODEC_2BIT, GA_CODEC_2BIT, 2.0, 0.5, 3.0, 1.0, 0.8, 0.5, 0.25, 2.0,
                            NAN, NAN, NAN, NAN, NAN, 0};
    plan_costs c = {"test", &pair, 1, 0, {0, 0.5, 0.75}, 1.0, 1.0, 0, 1.0, 0, 0, 0, 0, 0, 0};
    c.cache_elements = 1u << 20, c.sublinear_ranks = 256;
    plan_setup s = wire_only(8, 2);
    s.push = s.pull = GA_CODEC_2BIT;
    s.link_gbit = s.server_link_gbit = 0;
    s.server_cores = 4;
    s.optimizer = PLAN_OPT_SGD;
    plan_estimate e;
    char msg[128];
    assert_int_equal(plan_estimate_step(&s, &c, &e, msg, sizeof msg), 0);
    double n = (double)(one_tensor[0] / 2), m = n + 0.5 * (n - (1u << 20)), P = pow(8, 0.8);
    double push = P * (0.5e-3 + m * 1.0e-9), step = 2.0e-3 + m * 3.0e-9 + n * 0.5e-9; /* the optimizer per element */
    assert_close(e.shard_cpu_s, push + step);
    /* a share within the caches: every element at the fitted cost */
    c.cache_elements = 64u << 20;
    assert_int_equal(plan_estimate_step(&s, &c, &e, msg, sizeof msg), 0);
    assert_close(e.shard_cpu_s, P * (0.5e-3 + n * 1.0e-9) + 2.0e-3 + n * 3.5e-9);
    /* relays of 4: the relay receives 4^a pushes of the whole model */
    s.ranks_per_node = 4, s.relays = true;
    assert_int_equal(plan_estimate_step(&s, &c, &e, msg, sizeof msg), 0);
    double N = (double)one_tensor[0];
    assert_close(e.relay_cpu_s, pow(4, 0.8) * (0.5e-3 + N * 1.0e-9) + 2.0e-3 + N * 3.0e-9 + 2 * 0.25e-3 + N * 2.0e-9);
    s.ranks_per_node = 1, s.relays = false;
    /* contention counts only where the shards share the cores */
    c.shard_contention = 0.25;
    assert_int_equal(plan_estimate_step(&s, &c, &e, msg, sizeof msg), 0);
    assert_close(e.shard_cpu_s, P * (0.5e-3 + n * 1.0e-9) + 2.0e-3 + n * 3.5e-9);
    s.shared_cores = 8;
    assert_int_equal(plan_estimate_step(&s, &c, &e, msg, sizeof msg), 0);
    assert_close(e.shard_cpu_s, 1.25 * (P * (0.5e-3 + n * 1.0e-9) + 2.0e-3 + n * 3.5e-9));
    s.shared_cores = 0, c.shard_contention = 0;

    /* the bytes pushed to a shard through a link cost it link_ns_per_byte each; none through
     * loopback (no link rate), and a colocated shard's own node's push comes through loopback */
    c.link_ns_per_byte = 2.0;
    double alone = P * (0.5e-3 + n * 1.0e-9) + 2.0e-3 + n * 3.5e-9;
    assert_int_equal(plan_estimate_step(&s, &c, &e, msg, sizeof msg), 0);
    assert_close(e.shard_cpu_s, alone);
    s.link_gbit = s.server_link_gbit = 10;
    assert_int_equal(plan_estimate_step(&s, &c, &e, msg, sizeof msg), 0);
    double pushed = e.shard_link_mb * 1e6; /* 8 pushes of the share, 2bit both ways */
    assert_close(e.shard_cpu_s, alone + pushed * 2.0e-9);
    s.shards = 8, s.colocate = true;
    assert_int_equal(plan_estimate_step(&s, &c, &e, msg, sizeof msg), 0);
    double n8 = (double)(one_tensor[0] / 8), P8 = pow(8, 0.8);
    assert_close(e.shard_cpu_s, P8 * (0.5e-3 + n8 * 1.0e-9) + 2.0e-3 + n8 * 3.5e-9 + 7 * n8 * (pushed / 8 / n) * 2.0e-9);
}

/* One machine of K cores for everything: the iteration is at least the compute over the cores,
 * then the step's CPU over the cores kept busy; the idle share (1 - busy with one shard) comes from
 * each shard's serial task queue, and S shards run theirs side by side on up to K cores; a relayed
 * step keeps them relay_busy busy, a journaled one its pair's shared_busy where measured. */
static void shared_cores_floor_the_iteration(void **state)
{
    (void)state;
    plan_pair_costs pair = {GA_CODEC_2BIT, GA_CODEC_2BIT, 2.0, 0.5, 3.0, 1.0, 1.0, 0.0, 0.25, 2.0,
                            NAN, NAN, NAN, NAN, NAN, 0};
    plan_costs c = {"test", &pair, 1, 0, {0, 0, 0}, 1.0, 0.6, 0, 1.0, 0, 0, 0, 0, 0, 0};
    plan_setup s = wire_only(4, 1);
    s.push = s.pull = GA_CODEC_2BIT;
    s.link_gbit = s.server_link_gbit = 0;
    s.server_cores = 2, s.shared_cores = 2;
    plan_estimate e;
    char msg[128];
    for (uint32_t shards = 1; shards <= 4; shards *= 2) {
        s.shards = shards;
        assert_int_equal(plan_estimate_step(&s, &c, &e, msg, sizeof msg), 0);
        double X = 4 * e.rank_cpu_s + shards * e.shard_cpu_s;
        double busy = 1.0 - 0.4 / (shards < 2 ? shards : 2);
        assert_close(e.cpu_floor_s, X / (2 * busy));
        assert_close(e.iteration_s, e.cpu_floor_s);
        assert_int_equal(e.bound, PLAN_BOUND_CORES);
    }
    /* relayed: relay_busy in place of shared_busy (shared_busy while it is not measured), the
     * relays' CPU counted with the rest */
    s.shards = 1, s.ranks_per_node = 2, s.relays = true;
    for (int measured = 0; measured <= 1; measured++) {
        c.relay_busy = measured ? 0.5 : 0.0;
        assert_int_equal(plan_estimate_step(&s, &c, &e, msg, sizeof msg), 0);
        double X = 4 * e.rank_cpu_s + e.shard_cpu_s + 2 * e.relay_cpu_s;
        assert_close(e.cpu_floor_s, X / (2 * (measured ? 0.5 : 0.6)));
    }
    s.ranks_per_node = 1, s.relays = false;
    /* the pair's own busy where it has one, with every push journaled; the machine's without */
    pair.shared_busy = 0.5;
    for (int journal = 0; journal <= 1; journal++) {
        s.journal = journal;
        assert_int_equal(plan_estimate_step(&s, &c, &e, msg, sizeof msg), 0);
        assert_close(e.cpu_floor_s, (4 * e.rank_cpu_s + e.shard_cpu_s) / (2 * (journal ? 0.5 : 0.6)));
    }
    s.journal = false, pair.shared_busy = 0;
    /* compute: every rank waits for the synchronous step, so the compute does not fill the step's
     * idle share; the floor is the compute on the cores, then the step at busy_S */
    s.shards = 1, s.compute_ms = 1000;
    assert_int_equal(plan_estimate_step(&s, &c, &e, msg, sizeof msg), 0);
    assert_close(e.cpu_floor_s, 4 * 1.0 / 2 + (4 * e.rank_cpu_s + e.shard_cpu_s) / (2 * 0.6));
    assert_close(e.iteration_s, e.cpu_floor_s);
}

/* The journal's disk bounds the push phase when it is the slowest part of it. */
static void journal_disk_bounds_pushes(void **state)
{
    (void)state;
    plan_setup s = wire_only(4, 1);
    s.journal = true;
    s.disk_gbyte_s = 0.1;
    plan_estimate e;
    char msg[128];
    assert_int_equal(plan_estimate_step(&s, &free_costs, &e, msg, sizeof msg), 0);
    assert_close(e.push_s, 4 * (double)one_tensor[0] * 4 / 0.1e9);
    assert_int_equal(e.bound, PLAN_BOUND_DISK);
    s.journal = false; /* --durability checkpoint */
    assert_int_equal(plan_estimate_step(&s, &free_costs, &e, msg, sizeof msg), 0);
    assert_int_not_equal(e.bound, PLAN_BOUND_DISK);
}

static void relays_cut_the_upstream_ranks(void **state)
{
    (void)state;
    plan_setup s = wire_only(64, 2);
    s.ranks_per_node = 8;
    plan_estimate flat, relayed;
    char msg[128];
    assert_int_equal(plan_estimate_step(&s, &free_costs, &flat, msg, sizeof msg), 0);
    s.relays = true;
    assert_int_equal(plan_estimate_step(&s, &free_costs, &relayed, msg, sizeof msg), 0);
    assert_int_equal(flat.upstream_ranks, 64);
    assert_int_equal(relayed.upstream_ranks, 8);
    assert_close(relayed.shard_link_mb * 8, flat.shard_link_mb);
    /* flat: a node's 8 ranks share its link; relayed: one push leaves the node */
    assert_close(flat.worker_link_mb, 8 * relayed.worker_link_mb);
    assert_int_equal(relayed.streams_per_job, 8);
}

static void memory_is_the_accounted_bytes(void **state)
{
    (void)state;
    plan_costs c = free_costs;
    c.base_mib = 20, c.held_factor = 1.5;
    plan_setup s = wire_only(16, 4);
    s.push = s.pull = GA_CODEC_2BIT;
    s.optimizer = PLAN_OPT_ADAM;
    plan_estimate e;
    char msg[128];
    assert_int_equal(plan_estimate_step(&s, &c, &e, msg, sizeof msg), 0);
    double n = (double)(one_tensor[0] / 4), MiB = 1 << 20;
    /* parameters and published copy, Adam's two moments, 16 held 2bit pushes of the share */
    assert_close(e.shard_budget_mib, (n * (8 + 8) + 16 * n / 4) / MiB);
    assert_close(e.shard_rss_mib, 20 + (n * 16 + 1.5 * 16 * n / 4) / MiB);
    s.pull = GA_CODEC_NONE; /* fp32 pulls: one fp32 copy */
    c.pairs = (plan_pair_costs[]){{GA_CODEC_2BIT, GA_CODEC_NONE, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}};
    c.npairs = 1;
    assert_int_equal(plan_estimate_step(&s, &c, &e, msg, sizeof msg), 0);
    assert_close(e.shard_budget_mib, (n * (4 + 8) + 16 * n / 4) / MiB);
}

static void refusals_name_the_reason(void **state)
{
    (void)state;
    plan_setup s = wire_only(10, 1);
    plan_estimate e;
    memset(&e, 0xAB, sizeof e);
    plan_estimate before = e;
    char msg[160];
    s.ranks_per_node = 4;
    assert_int_equal(plan_estimate_step(&s, &free_costs, &e, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "multiple"));
    s.ranks_per_node = 1, s.colocate = true, s.shards = 3;
    assert_int_equal(plan_estimate_step(&s, &free_costs, &e, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "colocated"));
    s.colocate = false, s.push = GA_CODEC_INT8;
    assert_int_equal(plan_estimate_step(&s, &free_costs, &e, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "int8"));
    s.ntensors = 0;
    assert_int_equal(plan_estimate_step(&s, &free_costs, &e, msg, sizeof msg), -1);
    assert_memory_equal(&e, &before, sizeof e); /* untouched on failure */
}

/* The search: the fewest shards that meet a target, else within 10 % of the fastest; a target out
 * of reach gives the fastest and says so. */
static void search_takes_the_fewest_shards_that_do(void **state)
{
    (void)state;
    const plan_pair_costs *pairs[] = {&free_pairs[0]};
    plan_space space = {0, 64, 0, 1, pairs, 1, 0};
    plan_setup base = wire_only(64, 1), best;
    plan_estimate e, check;
    char msg[128];
    /* wire only: the step halves with each doubling of S until the worker link binds at S = 64 */
    assert_int_equal(plan_recommend(&base, &space, &free_costs, &best, &e, msg, sizeof msg), 0);
    assert_int_equal(best.shards, 64);
    base.shards = 8;
    assert_int_equal(plan_estimate_step(&base, &free_costs, &check, msg, sizeof msg), 0);
    space.target_step_s = check.step_s * 1.01; /* 8 shards meet it, 4 do not */
    assert_int_equal(plan_recommend(&base, &space, &free_costs, &best, &e, msg, sizeof msg), 0);
    assert_int_equal(best.shards, 8);
    assert_close(e.step_s, check.step_s);
    space.target_step_s = 1e-9;
    assert_int_equal(plan_recommend(&base, &space, &free_costs, &best, &e, msg, sizeof msg), 1);
    assert_int_equal(best.shards, 64);
    /* a pinned choice is kept */
    space.target_step_s = 0, space.shards = 2;
    assert_int_equal(plan_recommend(&base, &space, &free_costs, &best, &e, msg, sizeof msg), 0);
    assert_int_equal(best.shards, 2);
}

/* The shipped table: every pair with finite, non-negative CPU costs. */
static void measured_costs_are_whole(void **state)
{
    (void)state;
    const plan_costs *c = &plan_costs_measured;
    assert_true(c->npairs >= 5);
    for (size_t i = 0; i < c->npairs; i++) {
        const plan_pair_costs *p = &c->pairs[i];
        double cpu[] = {p->step_ms, p->push_ms, p->step_ns, p->push_ns, p->call_ms, p->worker_ns};
        for (size_t k = 0; k < sizeof cpu / sizeof cpu[0]; k++) assert_true(isfinite(cpu[k]) && cpu[k] >= 0);
        assert_ptr_equal(plan_costs_pair(c, p->push, p->pull), p);
        assert_true(p->shared_busy >= 0 && p->shared_busy <= 1); /* 0: not measured */
    }
    assert_true(c->link_efficiency > 0 && c->link_efficiency <= 1);
    assert_true(c->shared_busy > 0 && c->shared_busy <= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ring_is_the_textbook_cost),
        cmocka_unit_test(ps_bound_is_bytepss),
        cmocka_unit_test(colocated_fp32_is_the_ring),
        cmocka_unit_test(own_shards_are_twice_the_ps_bound),
        cmocka_unit_test(shares_cut_large_tensors_and_balance_small_ones),
        cmocka_unit_test(cpu_terms_follow_the_formula),
        cmocka_unit_test(sublinear_pushes_caches_and_contention),
        cmocka_unit_test(shared_cores_floor_the_iteration),
        cmocka_unit_test(journal_disk_bounds_pushes),
        cmocka_unit_test(relays_cut_the_upstream_ranks),
        cmocka_unit_test(memory_is_the_accounted_bytes),
        cmocka_unit_test(refusals_name_the_reason),
        cmocka_unit_test(search_takes_the_fewest_shards_that_do),
        cmocka_unit_test(measured_costs_are_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
