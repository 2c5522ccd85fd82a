/* The measured costs the planner's model runs on (docs/scaling.md, "The cost model"). Each
 * figure names its benchmark; rerun them on the target machines and replace the rows to plan for
 * other hardware. */
#include <math.h>

#include "plan_model.h"

/* CPU columns: bench/scalebench.py on one shard, W = 4 and 16 ranks x 256K, 1M, 4M and 16M
 * elements per codec pair and W = 64 at 256K and 1M, three rounds (`bench/modelrun calib`),
 * fitted by bench/costfit.py to each configuration's median (2026-11-29 09:28-10:04 UTC, the
 * 2-vCPU VM: AMD EPYC, 2 vCPUs, 24 GiB; clients and server on the same two cores, so the
 * per-byte costs include loopback TCP on both ends). topk at its default ratio 0.001. The
 * 2bit/2bit row also fits three rounds of 16 lanes at 1M elements, W = 4 and 16 (13:40 UTC), which
 * give its per-lane terms (step_ms, push_ms, call_ms); the other pairs have no lane runs.
 * GPU columns (NAN: not measured): the H200's bench_codecs (25M floats: encode, decode_add) and
 * bench_store --backend cuda (W = 8, n = 100M, SGD) of 2026-11-27, with 55 GB/s over PCIe both
 * ways (docs/benchmarks.md, "GPU"). worker_gpu_ns = encode + the pull's decode (or its fp32 copy
 * in) + the push payload out; cuda_push_ns = the store's step ÷ (8 x 100M); cuda_step_ns = the
 * pull's 2bit encode (the store's step holds the optimizer and the publication).
 * Relay columns (NAN: not measured): bench/relaybench.py's relays, 2 nodes x 4 workers pushing the
 * job's codec to their relay, at 1M and 4M elements, three rounds (`bench/modelrun relays`, the
 * same machine, 10:45-10:55 UTC), fitted by bench/costfit.py to what their CPU leaves after the
 * receive costed as the shard's. */
static const plan_pair_costs pairs[] = {
    /* push, pull, step_ms, push_ms, step_ns, push_ns, call_ms, worker_ns, worker_gpu_ns, cuda_push_ns, cuda_step_ns,
     * relay_ms, relay_ns */
    {GA_CODEC_NONE, GA_CODEC_NONE, 6.25, 2.217, 19.72, 18.06, 1.77, 19.28, 0.156, 0.161, 0.0, 6.80, 32.03},
    {GA_CODEC_FP16, GA_CODEC_NONE, 0.00, 0.229, 13.53, 11.00, 2.84, 12.68, 0.118, 0.100, 0.0, 26.75, 17.37},
    {GA_CODEC_2BIT, GA_CODEC_NONE, 0.00, 0.525, 4.61, 2.46, 2.01, 14.16, 0.101, 0.0525, 0.0, NAN, NAN},
    {GA_CODEC_2BIT, GA_CODEC_2BIT, 0.43, 0.260, 5.74, 1.31, 0.59, 2.10, 0.036, 0.0525, 0.025, 0.00, 6.13},
    {GA_CODEC_TOPK, GA_CODEC_2BIT, 0.52, 0.365, 4.17, 0.19, 0.58, 1.80, 0.100, 0.0738, 0.025, 0.00, 6.87},
    {GA_CODEC_INT8, GA_CODEC_INT8, 0.00, 0.291, 23.13, 2.65, 0.38, 6.12, NAN, NAN, NAN, NAN, NAN},
};

const plan_costs plan_costs_measured = {
    .measured = "2026-11-29, 2-vCPU AMD EPYC VM (CPU); H200 (GPU kernels and store)",
    .pairs = pairs,
    .npairs = sizeof pairs / sizeof pairs[0],
    /* none/none acked against --durability checkpoint, per byte pushed (bench/costfit.py: the
     * median of eight configurations, 0.34, within their spread of -1.38 to 2.04: the journal's
     * write costs less than this machine's noise between runs, so it is held at 0) */
    .journal_ns_per_byte = 0.0,
    /* bench_codecs, one thread, 25M floats (2026-11-21): sgd_momentum 10-11.7 ms, adam 14.8-15.9 ms */
    .optimizer_ns = {0.0, 0.43, 0.61},
    /* netbench's TCP probe: 0.959 Gbit/s through a 1 Gbit/s tbf link */
    .link_efficiency = 0.96,
    /* bench/costfit.py: the median over the calibration runs (0.56 to 0.92) */
    .shared_busy = 0.71,
    /* bench/costfit.py over the same runs' peak RSS */
    .base_mib = 23.9,
    .held_factor = 1.48,
    .rank_mib = 0.0,
};
