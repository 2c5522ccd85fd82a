/* The measured costs the planner's model runs on (docs/scaling.md, "The cost model"). Each
 * figure names its benchmark; rerun them on the target machines and replace the rows to plan for
 * other hardware. */
#include <math.h>

#include "plan_model.h"

/* CPU columns: bench/scalebench.py on one shard, W = 4 and 16 ranks x 256K, 1M, 4M and 16M
 * elements per codec pair and W = 64 at 256K and 1M, six rounds (two runs of `bench/modelrun
 * all`), fitted by bench/costfit.py to each configuration's median (2026-11-29 14:57-15:24 and
 * 16:20-16:46 UTC, a
 * 2-vCPU VM: AMD EPYC, 2 vCPUs, 24 GiB, 32 MiB L3; clients and server on the same two cores, so
 * the per-byte costs include loopback TCP on both ends). topk at its default ratio 0.001. The
 * 2bit/2bit row also fits 16 lanes at 1M elements, W = 4 and 16, which give its per-lane terms
 * (step_ms, push_ms, call_ms); the other pairs have no lane runs. world_exp and cache_factor:
 * the grid point of the least relative squares; shard_contention: S = 2 and 4 at 4M elements
 * for none/none and 2bit/2bit, the same rounds.
 * GPU columns (NAN: not measured): the H200's bench_codecs (25M floats: encode, decode_add) and
 * bench_store --backend cuda (W = 8, n = 100M, SGD) of 2026-11-27, with 55 GB/s over PCIe both
 * ways (docs/benchmarks.md, "GPU"). worker_gpu_ns = encode + the pull's decode (or its fp32 copy
 * in) + the push payload out; cuda_push_ns = the store's step ÷ (8 x 100M); cuda_step_ns = the
 * pull's 2bit encode (the store's step holds the optimizer and the publication).
 * Relay columns (NAN: not measured): bench/relaybench.py's relays, 2 nodes x 4 workers pushing the
 * job's codec to their relay, at 1M and 4M elements, in the same six rounds, fitted by
 * bench/costfit.py to what their CPU leaves after the receive costed as the shard's (none/none's
 * receive alone is within 4 % of its relay's CPU: 0, 0). */
static const plan_pair_costs pairs[] = {
    /* push, pull, step_ms, push_ms, step_ns, push_ns, world_exp, cache_factor, call_ms, worker_ns, worker_gpu_ns, cuda_push_ns, cuda_step_ns,
     * relay_ms, relay_ns */
    {GA_CODEC_NONE, GA_CODEC_NONE, 1.00, 1.090, 0.29, 9.39, 0.92, 0.05, 0.82, 5.72, 0.156, 0.161, 0.0, 0.00, 0.00},
    {GA_CODEC_FP16, GA_CODEC_NONE, 0.21, 0.708, 2.94, 5.51, 0.94, 0.00, 0.84, 4.90, 0.118, 0.100, 0.0, 2.06, 4.83},
    {GA_CODEC_2BIT, GA_CODEC_NONE, 1.40, 0.473, 0.00, 2.96, 0.94, 0.00, 0.69, 5.31, 0.101, 0.0525, 0.0, NAN, NAN},
    {GA_CODEC_2BIT, GA_CODEC_2BIT, 0.78, 0.538, 3.30, 1.07, 0.90, 0.00, 0.63, 2.29, 0.036, 0.0525, 0.025, 0.79, 4.70},
    {GA_CODEC_TOPK, GA_CODEC_2BIT, 0.81, 0.584, 3.94, 0.30, 0.90, 0.00, 0.38, 2.44, 0.100, 0.0738, 0.025, 1.30, 4.35},
    {GA_CODEC_INT8, GA_CODEC_INT8, 0.74, 0.553, 6.00, 1.95, 1.00, 0.10, 0.53, 3.95, NAN, NAN, NAN, NAN, NAN},
};

const plan_costs plan_costs_measured = {
    .measured = "2026-11-29, 2-vCPU AMD EPYC VM (CPU); H200 (GPU kernels and store)",
    .pairs = pairs,
    .npairs = sizeof pairs / sizeof pairs[0],
        /* none/none acked against --durability checkpoint, per byte pushed (bench/costfit.py: the
     * median of eight configurations, 0.17 to 0.71) */
    .journal_ns_per_byte = 0.34,
    /* bench_codecs, one thread, 25M floats (2026-11-21): sgd_momentum 10-11.7 ms, adam 14.8-15.9 ms */
    .optimizer_ns = {0.0, 0.43, 0.61},
    /* netbench's TCP probe: 0.959 Gbit/s through a 1 Gbit/s tbf link */
    .link_efficiency = 0.96,
        /* bench/costfit.py: the median over the calibration runs (0.59 to 0.93) */
    .shared_busy = 0.74,
    /* bench/costfit.py over the same runs' peak RSS */
    .base_mib = 23.4,
    .held_factor = 1.39,
    .rank_mib = 0.000,
    /* 12 bytes an element of fp32 state outgrow the 32 MiB L3 past 2M elements; W = 256, the most
     * ranks the validation runs measured */
    .cache_elements = 2 << 20,
    .sublinear_ranks = 256,
        /* bench/costfit.py: eight S = 2 and 4 configurations, median 0.037, -0.066 to 0.118: not
     * resolved from the noise between runs, so 0 */
    .shard_contention = 0.0,
        /* bench/costfit.py: the median over the relaybench runs' relayed rows that the link does not
     * bound (48 runs, 0.55 to 0.78) */
    .relay_busy = 0.65,
        /* bench/costfit.py: relaybench's flat rows (W = 8 through a 1 Gbit link, 1M and 4M elements,
     * every codec, six rounds): their shards' CPU over the loopback-fitted terms, per byte pushed */
    .link_ns_per_byte = 1.58,
};
