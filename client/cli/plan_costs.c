/* The measured costs the planner's model runs on (docs/scaling.md, "The cost model"). Each
 * figure names its benchmark; rerun them on the target machines and replace the rows to plan for
 * other hardware. */
#include <math.h>

#include "plan_model.h"

/* CPU columns: bench/scalebench.py on one shard, W = 4 and 16 ranks x 256K, 1M, 4M and 16M
 * elements per codec pair and W = 64 at 256K and 1M, nine rounds (the calibrations of two runs of
 * `bench/modelrun all` and one of `bench/modelrun calib`), fitted by bench/costfit.py to each
 * configuration's median (2026-11-29 18:18-18:49, 19:08-19:37 and 20:54-21:19 UTC, a 2-vCPU VM:
 * AMD EPYC, 2 vCPUs, 24 GiB, 32 MiB L3; clients and server on the same two cores, so the per-byte
 * costs include loopback TCP on both ends). topk at its default ratio 0.001. The
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
 * job's codec to their relay, at 1M and 4M elements, in the same nine rounds, fitted by
 * bench/costfit.py to what their CPU leaves after the receive costed as the shard's.
 * shared_busy: bench/costfit.py, the median over the pair's calibration runs of their CPU (shard
 * and ranks) over the two cores and the step. */
static const plan_pair_costs pairs[] = {
    /* push, pull, step_ms, push_ms, step_ns, push_ns, world_exp, cache_factor, call_ms, worker_ns, worker_gpu_ns, cuda_push_ns, cuda_step_ns,
     * relay_ms, relay_ns, shared_busy */
    {GA_CODEC_NONE, GA_CODEC_NONE, 2.62, 0.374, 1.62, 4.94, 1.00, 0.00, 0.76, 5.69, 0.156, 0.161, 0.0, 4.50, 5.98, 0.53},
    {GA_CODEC_FP16, GA_CODEC_NONE, 1.07, 0.532, 0.00, 3.86, 0.96, 0.00, 0.76, 4.58, 0.118, 0.100, 0.0, 3.32, 6.06, 0.62},
    {GA_CODEC_2BIT, GA_CODEC_NONE, 0.63, 0.679, 0.00, 2.53, 0.90, 0.05, 0.59, 4.89, 0.101, 0.0525, 0.0, NAN, NAN, 0.78},
    {GA_CODEC_2BIT, GA_CODEC_2BIT, 0.70, 0.549, 2.54, 0.94, 0.90, 0.00, 0.56, 2.21, 0.036, 0.0525, 0.025, 0.76, 3.73, 0.81},
    {GA_CODEC_TOPK, GA_CODEC_2BIT, 1.62, 0.367, 3.22, 0.31, 0.92, 0.00, 0.24, 2.25, 0.100, 0.0738, 0.025, 0.69, 4.62, 0.80},
    {GA_CODEC_INT8, GA_CODEC_INT8, 1.03, 0.495, 4.74, 2.01, 0.98, 0.00, 0.42, 3.91, NAN, NAN, NAN, NAN, NAN, 0.68},
};

const plan_costs plan_costs_measured = {
    .measured = "2026-11-29, 2-vCPU AMD EPYC VM (CPU); H200 (GPU kernels and store)",
    .pairs = pairs,
    .npairs = sizeof pairs / sizeof pairs[0],
    /* none/none acked against --durability checkpoint, per byte pushed (bench/costfit.py: the
     * median of eight configurations, 0.20 to 0.63) */
    .journal_ns_per_byte = 0.30,
    /* bench_codecs, one thread, 25M floats (2026-11-21): sgd_momentum 10-11.7 ms, adam 14.8-15.9 ms */
    .optimizer_ns = {0.0, 0.43, 0.61},
    /* netbench's TCP probe: 0.959 Gbit/s through a 1 Gbit/s tbf link */
    .link_efficiency = 0.96,
    /* bench/costfit.py: the median over the calibration runs (0.49 to 0.92) */
    .shared_busy = 0.74,
    /* bench/costfit.py over the same runs' peak RSS */
    .base_mib = 25.6,
    .held_factor = 1.48,
    .rank_mib = 0.000,
    /* 12 bytes an element of fp32 state outgrow the 32 MiB L3 past 2M elements; W = 256, the most
     * ranks the validation runs measured */
    .cache_elements = 2 << 20,
    .sublinear_ranks = 256,
    /* bench/costfit.py: the median over eight S = 2 and 4 configurations (-0.041 to 0.161) */
    .shard_contention = 0.049,
    /* bench/costfit.py: the median over the relaybench runs' relayed rows that the link does not
     * bound (72 runs, 0.52 to 0.73) */
    .relay_busy = 0.65,
    /* bench/costfit.py: relaybench's flat rows (W = 8 through a 1 Gbit link, 1M and 4M elements,
     * every codec, nine rounds): their shards' CPU over the loopback-fitted terms, per byte pushed */
    .link_ns_per_byte = 1.52,
};
