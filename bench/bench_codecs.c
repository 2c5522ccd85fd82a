/* Codec, reduction and optimizer benchmark. Measures memory bandwidth (a += b) in the same run
 * and prints, per kernel on 25M floats, with one thread and with all threads: the median time
 * of several runs, GB/s of fp32 processed, and the fraction of the memory-bound floor (bytes
 * the kernel must move / bandwidth, divided by the time; the bandwidth is measured in runs
 * interleaved with the kernel's own, medians of both). Table on stdout, JSON to
 * --json FILE. With a CUDA device: the same kernels on the GPU, each against a device-to-device
 * copy of 100 MB measured in runs paired with its own.
 *
 * Usage: bench_codecs [--n N] [--reps R] [--json FILE] [--threads T] */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <math.h>
#include <stdbool.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ga_alloc.h"
#include "ga_codec.h"
#include "ga_optim.h"
#include "ga_reduce.h"

#include "bench_util.h"

/* ---- what is measured ---- */

typedef struct bench_buffers {
    size_t n;
    float *grad, *residual, *sum, *param, *state_a, *state_b, *inputs[4];
    uint8_t *payload;
    size_t payload_cap, payload_len;
    ga_codec_params params;
} bench_buffers;

typedef enum kernel_kind { K_ENCODE, K_DECODE, K_SGD, K_ADAM, K_REDUCE_SUM4, K_BANDWIDTH } kernel_kind;

typedef struct kernel_case {
    const char *name;
    kernel_kind kind;
    ga_codec_id codec;
    double floor_bytes_per_elem; /* bytes the kernel must move per element */
    double target;               /* issue target for the one-thread fraction; 0 = none */
} kernel_case;

/* Floors: encode reads grad (4) and, with a residual, reads and writes it (8), then writes the
 * payload; decode_add reads the payload and reads and writes the sum (8). */
static const kernel_case cases[] = {
    {"none.encode", K_ENCODE, GA_CODEC_NONE, 8.0, 0},
    {"none.decode_add", K_DECODE, GA_CODEC_NONE, 12.0, 0},
    {"fp16.encode", K_ENCODE, GA_CODEC_FP16, 6.0, 0.6},
    {"fp16.decode_add", K_DECODE, GA_CODEC_FP16, 10.0, 0},
    {"bf16.encode", K_ENCODE, GA_CODEC_BF16, 6.0, 0.6},
    {"bf16.decode_add", K_DECODE, GA_CODEC_BF16, 10.0, 0},
    {"2bit.encode", K_ENCODE, GA_CODEC_2BIT, 12.25, 0.5},
    {"2bit.decode_add", K_DECODE, GA_CODEC_2BIT, 8.25, 0.7},
    {"1bit.encode", K_ENCODE, GA_CODEC_1BIT, 12.125, 0},
    {"1bit.decode_add", K_DECODE, GA_CODEC_1BIT, 8.125, 0},
    {"1bit_scaled.encode", K_ENCODE, GA_CODEC_1BIT_SCALED, 12.129, 0},
    {"1bit_scaled.decode_add", K_DECODE, GA_CODEC_1BIT_SCALED, 8.129, 0},
    {"topk.encode", K_ENCODE, GA_CODEC_TOPK, 12.0, 0.4},
    {"int8.encode", K_ENCODE, GA_CODEC_INT8, 13.0625, 0},
    {"int8.decode_add", K_DECODE, GA_CODEC_INT8, 9.0625, 0},
    {"int4.encode", K_ENCODE, GA_CODEC_INT4, 12.5625, 0},
    {"int4.decode_add", K_DECODE, GA_CODEC_INT4, 8.5625, 0},
    {"sgd_momentum", K_SGD, GA_CODEC_NONE, 20.0, 0.8},
    {"adam", K_ADAM, GA_CODEC_NONE, 28.0, 0},
    {"reduce_sum_w4", K_REDUCE_SUM4, GA_CODEC_NONE, 20.0, 0},
};
#define CASES (sizeof cases / sizeof cases[0])

static int run_case(const kernel_case *kc, bench_buffers *bb, const ga_exec *ex, int rep)
{
    size_t n = bb->n;
    ga_status rc = GA_OK;
    switch (kc->kind) {
    case K_ENCODE:
        bb->params.seed = (uint64_t)rep;
        rc = ga_codec_encode(ex, kc->codec, &bb->params, bb->grad,
                             ga_codec_has_residual(kc->codec) ? bb->residual : NULL, n, bb->payload,
                             bb->payload_cap, &bb->payload_len);
        break;
    case K_DECODE:
        rc = ga_codec_decode_add(ex, kc->codec, &bb->params, bb->payload, bb->payload_len, n, bb->sum);
        break;
    case K_SGD: {
        ga_sgd_params hp = {.lr = 1e-3f, .momentum = 0.9f, .weight_decay = 0.0f, .nesterov = false};
        rc = ga_sgd_step(ex, &hp, bb->param, bb->state_a, bb->grad, n);
        break;
    }
    case K_ADAM: {
        ga_adam_params hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
        rc = ga_adam_step(ex, &hp, (uint64_t)rep + 1, bb->param, bb->state_a, bb->state_b, bb->grad, n);
        break;
    }
    case K_REDUCE_SUM4:
        rc = ga_reduce_sum(ex, (const float *const *)bb->inputs, 4, n, bb->sum);
        break;
    case K_BANDWIDTH:
        break;
    }
    return rc;
}

/* The comparison for small tensors: MXNet's 2-bit rule as a plain single-threaded loop. */
static void plain_2bit_encode(const float *g, float *r, size_t n, float t, uint8_t *out)
{
    memset(out, 0, 4 * ((n + 15) / 16));
    for (size_t i = 0; i < n; i++) {
        float v = r[i] + g[i];
        uint8_t code = 0;
        if (v >= t) code = 3, v -= t;
        else if (v <= -t) code = 2, v += t;
        r[i] = v;
        out[i >> 2] |= (uint8_t)(code << (6 - 2 * (i & 3)));
    }
}

/* ---- CUDA: every kernel against a device-to-device copy of 100 MB, paired run by run ---- */

/* Copies `bytes` device to device and waits: returns seconds (a copy moves 2 x bytes). */
static double run_device_copy(const ga_exec *ex, void *dst, const void *src, size_t bytes)
{
    double t0 = bench_now_s();
    if (ga_device_copy(ex, dst, src, bytes) != GA_OK || ga_exec_sync(ex) != GA_OK) return NAN;
    return bench_now_s() - t0;
}

/* Mirrors the host buffers on the device (dev->payload too); the device float buffers are also
 * listed in all[BENCH_FLOAT_BUFFERS] for freeing. Returns false, having freed what it made. */
#define BENCH_FLOAT_BUFFERS 10
static bool device_mirror(const bench_buffers *host, bench_buffers *dev, float *all[BENCH_FLOAT_BUFFERS])
{
    ga_exec ex = GA_EXEC_CUDA_INIT;
    *dev = *host;
    dev->payload = NULL;
    float **dst[BENCH_FLOAT_BUFFERS] = {&dev->grad,    &dev->residual,  &dev->sum,       &dev->param,
                                        &dev->state_a, &dev->state_b,   &dev->inputs[0], &dev->inputs[1],
                                        &dev->inputs[2], &dev->inputs[3]};
    size_t bytes = host->n * sizeof(float), made = 0;
    bool ok = true;
    for (; ok && made < BENCH_FLOAT_BUFFERS; made++) {
        void *p = NULL;
        if (ga_device_malloc(bytes, &p) != GA_OK) break;
        all[made] = p;
        ok = ga_device_copy(&ex, p, *dst[made], bytes) == GA_OK; /* *dst still holds the host buffer */
        *dst[made] = p;
    }
    void *payload = NULL;
    ok = ok && made == BENCH_FLOAT_BUFFERS && ga_device_malloc(host->payload_cap, &payload) == GA_OK &&
         ga_exec_sync(&ex) == GA_OK;
    if (!ok) {
        for (size_t i = 0; i < made; i++) ga_device_free(all[i]);
        ga_device_free(payload);
        return false;
    }
    dev->payload = payload;
    return true;
}

static void bench_cuda(const bench_buffers *host, int reps, FILE *json)
{
    if (ga_cuda_device_count() == 0) {
        printf("\nCUDA: %s: GPU section skipped\n", ga_cuda_built() ? "no device" : "built without CUDA");
        if (json) fprintf(json, ",\n  \"cuda\": null");
        return;
    }
    bench_buffers dev;
    float *all[BENCH_FLOAT_BUFFERS];
    if (!device_mirror(host, &dev, all)) {
        printf("\nCUDA: could not allocate the device buffers: GPU section skipped\n");
        if (json) fprintf(json, ",\n  \"cuda\": null");
        return;
    }
    ga_exec ex = GA_EXEC_CUDA_INIT;
    size_t bytes = dev.n * sizeof(float);
    double times[64], copy_times[64];
    printf("\nCUDA (device pointers, default stream): fraction of the device-to-device copy bandwidth\n");
    printf("%-24s %10s %10s %10s %12s\n", "kernel", "ms", "GB/s fp32", "copy GB/s", "copy frac");
    if (json) fprintf(json, ",\n  \"cuda\": [\n");
    for (size_t k = 0; k < CASES; k++) {
        const kernel_case *kc = &cases[k];
        int rc = GA_OK;
        if (kc->kind == K_DECODE) rc = run_case(&cases[k - 1], &dev, &ex, 0);
        if (rc == GA_OK) rc = run_case(kc, &dev, &ex, 0);
        if (rc == GA_OK) rc = ga_exec_sync(&ex);
        for (int r = 0; r < reps && rc == GA_OK; r++) {
            copy_times[r] = run_device_copy(&ex, dev.state_b, dev.inputs[3], bytes);
            double t0 = bench_now_s();
            rc = run_case(kc, &dev, &ex, r);
            if (rc == GA_OK) rc = ga_exec_sync(&ex);
            times[r] = bench_now_s() - t0;
        }
        if (rc != GA_OK) {
            printf("%-24s %10s (%s)\n", kc->name, "-", ga_status_name(rc));
            if (json) fprintf(json, "    {\"name\": \"%s\", \"status\": \"%s\"}%s\n", kc->name, ga_status_name(rc),
                              k + 1 < CASES ? "," : "");
            continue;
        }
        double t = bench_median(times, reps), copy_bw = 2.0 * (double)bytes / bench_median(copy_times, reps);
        double fraction = kc->floor_bytes_per_elem * (double)dev.n / copy_bw / t;
        printf("%-24s %10.3f %10.1f %10.1f %12.3f\n", kc->name, 1e3 * t, 4e-9 * (double)dev.n / t, 1e-9 * copy_bw,
               fraction);
        if (json)
            fprintf(json, "    {\"name\": \"%s\", \"status\": \"GA_OK\", \"ms\": %.4f, \"copy_gbps\": %.1f, "
                          "\"copy_fraction\": %.4f}%s\n",
                    kc->name, 1e3 * t, 1e-9 * copy_bw, fraction, k + 1 < CASES ? "," : "");
    }
    if (json) fprintf(json, "  ]");
    for (size_t i = 0; i < BENCH_FLOAT_BUFFERS; i++) ga_device_free(all[i]);
    ga_device_free(dev.payload);
}

typedef struct result {
    const char *name;
    int threads;
    double ms, gbps, fraction, target, bandwidth;
    const char *status;
} result;

int main(int argc, char **argv)
{
    size_t n = 25u * 1000u * 1000u;
    int reps = 7, all_threads = omp_get_max_threads();
    const char *json_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--n") && i + 1 < argc) n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) all_threads = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--n N] [--reps R] [--json FILE] [--threads T]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 5) reps = 5;
    if (all_threads < 1) all_threads = 1;

    bench_buffers bb = {.n = n, .params = ga_codec_params_default(GA_CODEC_TOPK)};
    ga_codec_params p2 = ga_codec_params_default(GA_CODEC_2BIT);
    bb.params.threshold = p2.threshold;
    bb.payload_cap = 4 * n + 64;
    float **bufs[] = {&bb.grad, &bb.residual, &bb.sum, &bb.param, &bb.state_a, &bb.state_b,
                      &bb.inputs[0], &bb.inputs[1], &bb.inputs[2], &bb.inputs[3]};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        *bufs[i] = ga_malloc(n * sizeof(float));
        if (!*bufs[i]) return fprintf(stderr, "out of memory\n"), 1;
        bench_fill(*bufs[i], n, (unsigned)i + 1, i == 0 ? 2.0f : 0.5f);
    }
    bb.payload = ga_malloc(bb.payload_cap);
    if (!bb.payload) return fprintf(stderr, "out of memory\n"), 1;
    memset(bb.payload, 0, bb.payload_cap);

    int thread_counts[2] = {1, all_threads};
    int configs = all_threads > 1 ? 2 : 1;
    result results[2 * CASES];
    int nres = 0;
    double bandwidth[2], times[64];
    if (reps > 64) reps = 64;

    printf("gradagg codec benchmark: n = %zu floats (%.1f MB fp32), median of %d runs, SIMD %s\n", n,
           4e-6 * (double)n, reps, ga_simd_name(ga_cpu_simd()));
    for (int c = 0; c < configs; c++) {
        int threads = thread_counts[c];
        for (int r = 0; r < reps; r++) times[r] = bench_host_bandwidth_run(bb.state_a, bb.state_b, n, threads);
        bandwidth[c] = 12.0 * (double)n / bench_median(times, reps);
        printf("\nthreads = %d: memory bandwidth (a += b) %.1f GB/s\n", threads, 1e-9 * bandwidth[c]);
        printf("%-24s %10s %10s %10s %12s %8s\n", "kernel", "ms", "GB/s fp32", "bw GB/s", "floor frac", "target");
        ga_exec ex = GA_EXEC_CPU_INIT;
        ex.max_threads = threads;
        for (size_t k = 0; k < CASES; k++) {
            const kernel_case *kc = &cases[k];
            int rc = GA_OK;
            /* A decode measures the payload its codec's encode just produced. */
            if (kc->kind == K_DECODE) rc = run_case(&cases[k - 1], &bb, &ex, 0);
            run_case(kc, &bb, &ex, 0); /* warm-up */
            /* Each kernel run is paired with a bandwidth run, so the ratio compares figures
             * taken within milliseconds of each other on this noisy machine. */
            double bw_times[64];
            for (int r = 0; r < reps && rc == GA_OK; r++) {
                if (kc->kind == K_ENCODE && kc->codec == GA_CODEC_TOPK) memset(bb.residual, 0, 4 * n);
                bw_times[r] = bench_host_bandwidth_run(bb.state_b, bb.inputs[3], n, threads);
                double t0 = bench_now_s();
                rc = run_case(kc, &bb, &ex, r);
                times[r] = bench_now_s() - t0;
            }
            result *res = &results[nres++];
            res->name = kc->name;
            res->threads = threads;
            res->target = c == 0 ? kc->target : 0;
            res->status = ga_status_name(rc);
            if (rc != GA_OK) {
                res->ms = res->gbps = res->fraction = NAN;
                printf("%-24s %10s (%s)\n", kc->name, "-", res->status);
                continue;
            }
            double t = bench_median(times, reps), bw = 12.0 * (double)n / bench_median(bw_times, reps);
            res->ms = 1e3 * t;
            res->gbps = 4e-9 * (double)n / t;
            res->bandwidth = bw;
            res->fraction = kc->floor_bytes_per_elem * (double)n / bw / t;
            char target[16] = "";
            if (res->target > 0)
                snprintf(target, sizeof target, "%s%.2f", res->fraction >= res->target ? ">=" : "MISS ", res->target);
            printf("%-24s %10.2f %10.1f %10.1f %12.3f %8s\n", kc->name, res->ms, res->gbps, 1e-9 * bw, res->fraction,
                   target);
        }
    }

    /* Small tensors: a 1 KB (256-float) 2bit encode through the library's size-based thread
     * choice, against the same encode pinned to one thread and against a plain loop. */
    size_t small = 256;
    ga_exec auto_ex = GA_EXEC_CPU_INIT, one_ex = GA_EXEC_CPU_INIT;
    one_ex.max_threads = 1;
    double small_ns[2];
    const ga_exec *small_exs[2] = {&auto_ex, &one_ex};
    for (int s = 0; s < 2; s++) {
        int iters = 20000;
        for (int r = 0; r < reps; r++) {
            double t0 = bench_now_s();
            for (int i = 0; i < iters; i++)
                ga_codec_encode(small_exs[s], GA_CODEC_2BIT, &p2, bb.grad, bb.residual, small, bb.payload,
                                bb.payload_cap, &bb.payload_len);
            times[r] = (bench_now_s() - t0) / iters;
        }
        small_ns[s] = 1e9 * bench_median(times, reps);
    }
    double plain_ns;
    {
        int iters = 20000;
        for (int r = 0; r < reps; r++) {
            double t0 = bench_now_s();
            for (int i = 0; i < iters; i++) plain_2bit_encode(bb.grad, bb.residual, small, p2.threshold, bb.payload);
            times[r] = (bench_now_s() - t0) / iters;
        }
        plain_ns = 1e9 * bench_median(times, reps);
    }
    printf("\nsmall tensor, 2bit encode of 1 KB: %.0f ns with all %d threads allowed, %.0f ns pinned to one thread, "
           "%.0f ns as a plain single-threaded loop (ratio to the plain loop %.2f, must be <= 1)\n",
           small_ns[0], all_threads, small_ns[1], plain_ns, small_ns[0] / plain_ns);

    FILE *f = NULL;
    if (json_path) {
        f = fopen(json_path, "w");
        if (!f) return perror(json_path), 1;
        fprintf(f, "{\n  \"n\": %zu,\n  \"reps\": %d,\n  \"simd\": \"%s\",\n", n, reps, ga_simd_name(ga_cpu_simd()));
        fprintf(f, "  \"bandwidth_gbps\": {\"1\": %.2f, \"%d\": %.2f},\n", 1e-9 * bandwidth[0], all_threads,
                1e-9 * bandwidth[configs - 1]);
        fprintf(f, "  \"small_2bit_encode_ns\": {\"auto\": %.1f, \"one_thread\": %.1f, \"plain_loop\": %.1f},\n",
                small_ns[0], small_ns[1], plain_ns);
        fprintf(f, "  \"kernels\": [\n");
        for (int i = 0; i < nres; i++) {
            result *r = &results[i];
            fprintf(f, "    {\"name\": \"%s\", \"threads\": %d, \"status\": \"%s\"", r->name, r->threads, r->status);
            if (!isnan(r->ms))
                fprintf(f, ", \"ms\": %.3f, \"gbps_fp32\": %.2f, \"bandwidth_gbps\": %.2f, \"floor_fraction\": %.4f",
                        r->ms, r->gbps, 1e-9 * r->bandwidth, r->fraction);
            if (r->target > 0) fprintf(f, ", \"target\": %.2f", r->target);
            fprintf(f, "}%s\n", i + 1 < nres ? "," : "");
        }
        fprintf(f, "  ]");
    }
    bench_cuda(&bb, reps, f);
    if (f) {
        fprintf(f, "\n}\n");
        fclose(f);
    }

    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ga_free(*bufs[i]);
    ga_free(bb.payload);
    return 0;
}
