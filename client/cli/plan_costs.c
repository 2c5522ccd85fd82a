/* The measured costs the planner's model runs on (docs/scaling.md, "The cost model"). Each
 * figure names its benchmark; rerun them on the target machines and replace the rows to plan for
 * other hardware. */
#include <math.h>

#include "plan_model.h"

/* CPU columns: bench/scalebench.py on one shard, W = 4, 16 (and 64 for 2bit/2bit) ranks x 256K,
 * 1M and 4M elements per codec pair in three rounds and 16M in one (`bench/modelrun calib`), fitted by
 * bench/costfit.py to each configuration's median (2026-11-28, the 2-vCPU VM: Intel Xeon, 2
 * vCPUs, 24 GiB; clients and server on the same two cores, so the per-byte costs include loopback
 * TCP on both ends). topk at its default ratio 0.001.
 * GPU columns (NAN: not measured): the H200's bench_codecs (25M floats: encode, decode_add) and
 * bench_store --backend cuda (W = 8, n = 100M, SGD) of 2026-11-27, with 55 GB/s over PCIe both
 * ways (docs/benchmarks.md, "GPU"). worker_gpu_ns = encode + the pull's decode (or its fp32 copy
 * in) + the push payload out; cuda_push_ns = the store's step ÷ (8 x 100M); cuda_step_ns = the
 * pull's 2bit encode (the store's step holds the optimizer and the publication). */
static const plan_pair_costs pairs[] = {
    /* push, pull, step_ms, push_ms, step_ns, push_ns, call_ms, worker_ns, worker_gpu_ns, cuda_push_ns, cuda_step_ns */
    {GA_CODEC_NONE, GA_CODEC_NONE, 4.61, 1.311, 2.66, 7.27, 1.19, 6.50, 0.156, 0.161, 0.0},
    {GA_CODEC_FP16, GA_CODEC_NONE, 2.46, 0.143, 0.00, 5.70, 0.65, 5.49, 0.118, 0.100, 0.0},
    {GA_CODEC_2BIT, GA_CODEC_NONE, 2.91, 0.266, 1.49, 2.45, 0.74, 5.44, 0.101, 0.0525, 0.0},
    {GA_CODEC_2BIT, GA_CODEC_2BIT, 3.55, 0.341, 6.02, 0.87, 0.35, 2.98, 0.036, 0.0525, 0.025},
    {GA_CODEC_TOPK, GA_CODEC_2BIT, 1.99, 0.483, 4.79, 0.25, 0.31, 2.92, 0.100, 0.0738, 0.025},
    {GA_CODEC_INT8, GA_CODEC_INT8, 1.90, 0.479, 7.13, 2.66, 0.33, 4.99, NAN, NAN, NAN},
};

const plan_costs plan_costs_measured = {
    .measured = "2026-11-28, 2-vCPU Xeon VM (CPU); H200 (GPU kernels and store)",
    .pairs = pairs,
    .npairs = sizeof pairs / sizeof pairs[0],
    /* none/none acked against --durability checkpoint, per byte pushed (bench/costfit.py: the
     * median of eight configurations, 0.14 to 1.71) */
    .journal_ns_per_byte = 0.47,
    /* bench_codecs, one thread, 25M floats (2026-11-21): sgd_momentum 10-11.7 ms, adam 14.8-15.9 ms */
    .optimizer_ns = {0.0, 0.43, 0.61},
    /* netbench's TCP probe: 0.959 Gbit/s through a 1 Gbit/s tbf link */
    .link_efficiency = 0.96,
    /* bench/costfit.py: the median over the calibration runs (0.55 to 0.87) */
    .shared_busy = 0.70,
    /* bench/costfit.py over the same runs' peak RSS */
    .base_mib = 23.4,
    .held_factor = 1.55,
    .rank_mib = 0.0,
};
