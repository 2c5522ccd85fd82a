/* The measured costs the planner's model runs on (docs/scaling.md, "The cost model"). Each
 * figure names its benchmark; rerun them on the target machines and replace the rows to plan for
 * other hardware. */
#include <math.h>

#include "plan_model.h"

/* CPU columns: bench/scalebench.py on one shard, W = 4, 16 (and 64 for 2bit/2bit) ranks x 256K,
 * 1M and 4M elements per codec pair, fitted by bench/costfit.py (2026-11-27, the 2-vCPU VM:
 * Intel Xeon, 2 vCPUs, 24 GiB; clients and server on the same two cores, so the per-byte costs
 * include loopback TCP on both ends). topk at its default ratio 0.001.
 * GPU columns (NAN: not measured): the H200's bench_codecs (25M floats: encode, decode_add) and
 * bench_store --backend cuda (W = 8, n = 100M, SGD) of 2026-11-27, with 55 GB/s over PCIe both
 * ways (docs/benchmarks.md, "GPU"). worker_gpu_ns = encode + the pull's decode (or its fp32 copy
 * in) + the push payload out; cuda_push_ns = the store's step ÷ (8 x 100M); cuda_step_ns = the
 * pull's 2bit encode (the store's step holds the optimizer and the publication). */
static const plan_pair_costs pairs[] = {
    /* push, pull, step_ms, push_ms, step_ns, push_ns, call_ms, worker_ns, worker_gpu_ns, cuda_push_ns, cuda_step_ns */
    {GA_CODEC_NONE, GA_CODEC_NONE, 0.19, 1.262, 3.42, 7.61, 0.82, 6.48, 0.156, 0.161, 0.0},
    {GA_CODEC_FP16, GA_CODEC_NONE, 0.91, 0.501, 7.54, 4.59, 0.75, 5.05, 0.118, 0.100, 0.0},
    {GA_CODEC_2BIT, GA_CODEC_NONE, 2.03, 0.317, 2.63, 2.30, 0.60, 5.34, 0.101, 0.0525, 0.0},
    {GA_CODEC_2BIT, GA_CODEC_2BIT, 2.64, 0.311, 4.18, 0.81, 0.46, 2.27, 0.036, 0.0525, 0.025},
    {GA_CODEC_TOPK, GA_CODEC_2BIT, 2.68, 0.429, 4.73, 0.22, 0.32, 2.73, 0.100, 0.0738, 0.025},
    {GA_CODEC_INT8, GA_CODEC_INT8, 0.94, 0.630, 12.93, 1.37, 0.42, 4.46, NAN, NAN, NAN},
};

const plan_costs plan_costs_measured = {
    .measured = "2026-11-27, 2-vCPU Xeon VM (CPU); H200 (GPU kernels and store)",
    .pairs = pairs,
    .npairs = sizeof pairs / sizeof pairs[0],
    /* none/none acked against --durability checkpoint, per byte pushed (bench/costfit.py) */
    .journal_ns_per_byte = 0.23,
    /* bench_codecs, one thread, 25M floats (2026-11-21): sgd_momentum 10-11.7 ms, adam 14.8-15.9 ms */
    .optimizer_ns = {0.0, 0.43, 0.61},
    /* netbench's TCP probe: 0.959 Gbit/s through a 1 Gbit/s tbf link */
    .link_efficiency = 0.96,
    /* bench/costfit.py: the median over the calibration runs (0.60 to 0.88) */
    .shared_busy = 0.70,
    /* bench/costfit.py over the same runs' peak RSS */
    .base_mib = 22.5,
    .held_factor = 1.45,
    .rank_mib = 0.0,
};
