/* The measured costs the planner's model runs on (docs/scaling.md, "The cost model"). Each
 * figure names its benchmark; rerun them on the target machines and replace the rows to plan for
 * other hardware. */
#include <math.h>

#include "plan_model.h"

/* CPU columns: bench/scalebench.py on one shard, W = 4 and 16 ranks x 256K, 1M, 4M and 16M
 * elements per codec pair and W = 64 at 256K and 1M, three rounds (`bench/modelrun calib`),
 * fitted by bench/costfit.py to each configuration's median (2026-11-29, the 2-vCPU VM: AMD EPYC,
 * 2 vCPUs, 24 GiB; clients and server on the same two cores, so the per-byte costs include
 * loopback TCP on both ends). topk at its default ratio 0.001. Measured before the applies'
 * scratch pool, which cut 2bit's shard CPU at W = 4 by 2.7-4.6x (docs/scaling.md, "Where the
 * design stops scaling"): the compressed pairs' step terms are high until recalibrated.
 * GPU columns (NAN: not measured): the H200's bench_codecs (25M floats: encode, decode_add) and
 * bench_store --backend cuda (W = 8, n = 100M, SGD) of 2026-11-27, with 55 GB/s over PCIe both
 * ways (docs/benchmarks.md, "GPU"). worker_gpu_ns = encode + the pull's decode (or its fp32 copy
 * in) + the push payload out; cuda_push_ns = the store's step ÷ (8 x 100M); cuda_step_ns = the
 * pull's 2bit encode (the store's step holds the optimizer and the publication). */
static const plan_pair_costs pairs[] = {
    /* push, pull, step_ms, push_ms, step_ns, push_ns, call_ms, worker_ns, worker_gpu_ns, cuda_push_ns, cuda_step_ns */
    {GA_CODEC_NONE, GA_CODEC_NONE, 17.93, 0.860, 20.41, 14.39, 1.64, 15.76, 0.156, 0.161, 0.0},
    {GA_CODEC_FP16, GA_CODEC_NONE, 5.70, 0.000, 16.05, 8.29, 2.04, 11.45, 0.118, 0.100, 0.0},
    {GA_CODEC_2BIT, GA_CODEC_NONE, 3.96, 0.355, 6.93, 2.24, 0.36, 14.07, 0.101, 0.0525, 0.0},
    {GA_CODEC_2BIT, GA_CODEC_2BIT, 15.12, 0.072, 6.01, 1.39, 0.51, 2.02, 0.036, 0.0525, 0.025},
    {GA_CODEC_TOPK, GA_CODEC_2BIT, 14.99, 0.278, 5.21, 0.22, 0.56, 1.95, 0.100, 0.0738, 0.025},
    {GA_CODEC_INT8, GA_CODEC_INT8, 13.23, 0.211, 13.40, 2.81, 0.32, 5.58, NAN, NAN, NAN},
};

const plan_costs plan_costs_measured = {
    .measured = "2026-11-29, 2-vCPU AMD EPYC VM (CPU); H200 (GPU kernels and store)",
    .pairs = pairs,
    .npairs = sizeof pairs / sizeof pairs[0],
    /* none/none acked against --durability checkpoint, per byte pushed (bench/costfit.py: the
     * median of eight configurations, -0.15, within their spread of -1.29 to 1.35: the journal's
     * write costs less than this machine's noise between runs, so it is held at 0) */
    .journal_ns_per_byte = 0.0,
    /* bench_codecs, one thread, 25M floats (2026-11-21): sgd_momentum 10-11.7 ms, adam 14.8-15.9 ms */
    .optimizer_ns = {0.0, 0.43, 0.61},
    /* netbench's TCP probe: 0.959 Gbit/s through a 1 Gbit/s tbf link */
    .link_efficiency = 0.96,
    /* bench/costfit.py: the median over the calibration runs (0.55 to 0.87) */
    .shared_busy = 0.66,
    /* bench/costfit.py over the same runs' peak RSS */
    .base_mib = 24.0,
    .held_factor = 1.46,
    .rank_mib = 0.0,
};
