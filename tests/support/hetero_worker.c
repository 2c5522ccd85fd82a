/* hetero_worker: one C rank of the heterogeneous-client test (client/python/tests/test_hetero.py),
 * where C and Python workers with different codecs train one job. Not a ctest of its own.
 *
 * The model is the one the Python workers implement (test_hetero.py, same integer hash, same
 * float32 operations): tensors w (16x12), b (12), v (300); rank r's loss is
 * sum_i 0.5 * a_ri * (p_i - c_ri)^2, so its gradient is a_ri * (p_i - c_ri), with a and c drawn
 * from a hash of (rank, tensor, element). The job: mean of the ranks, SGD on the server.
 *
 *   hetero_worker SERVER JOB RANK WORLD CODEC THRESHOLD RATIO LR STEPS OUT
 *
 * THRESHOLD and RATIO are the codec's parameters (0 = its default). At the end the parameters
 * are written to OUT as raw float32 (w, b, v) and `version <v>` is printed. The float math
 * matches numpy's because nothing contracts into an FMA (-ffp-contract=off, top CMakeLists). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradagg.h"

#define NT 3
static const char *const names[NT] = {"w", "b", "v"};
static const uint64_t shapes[NT][2] = {{16, 12}, {12, 0}, {300, 0}};
static const int ndims[NT] = {2, 1, 1};
static const size_t sizes[NT] = {16 * 12, 12, 300};

/* lowbias32 over (rank, tensor, element); identical to hetero_hash in test_hetero.py. */
static uint32_t hash3(uint32_t r, uint32_t k, uint32_t i)
{
    uint32_t x = r * 7919u + k * 104729u + i * 31u + 12345u;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* Curvature a in {0.25, 0.5, 0.75, 1} and target c in [-1, 1] of element i of tensor k. */
static float curv(uint32_t h) { return (float)(1 + h % 4u) * 0.25f; }
static float target(uint32_t h) { return (float)((int32_t)((h >> 8) % 2001u) - 1000) * 0.001f; }

int main(int argc, char **argv)
{
    if (argc != 11) {
        fprintf(stderr, "usage: hetero_worker SERVER JOB RANK WORLD CODEC THRESHOLD RATIO LR STEPS OUT\n");
        return 2;
    }
    uint32_t rank = (uint32_t)strtoul(argv[3], NULL, 10), world = (uint32_t)strtoul(argv[4], NULL, 10);
    uint32_t steps = (uint32_t)strtoul(argv[9], NULL, 10);
    ga_codec_id codec;
    if (ga_codec_from_name(argv[5], &codec) != GA_OK) {
        fprintf(stderr, "hetero_worker: unknown codec %s\n", argv[5]);
        return 2;
    }

    ga_client_options opt = GA_CLIENT_OPTIONS_INIT;
    opt.server = argv[1];
    opt.job = argv[2];
    opt.rank = rank;
    opt.world_size = world;
    opt.mean = true;
    opt.optimizer = GA_SERVER_OPTIM_SGD;
    opt.sgd.lr = strtof(argv[8], NULL);
    opt.sgd.momentum = 0.0f;
    opt.call_timeout_ms = 10000;
    opt.step_timeout_ms = 30000;
    opt.max_retries = 2;
    char msg[512];
    ga_client *cl = NULL;
    ga_status st = ga_client_create(&opt, &cl, msg, sizeof msg);
    if (st != GA_OK) {
        fprintf(stderr, "hetero_worker rank %u: %s\n", rank, msg);
        return 1;
    }

    float *params[NT] = {NULL}, *grads[NT] = {NULL};
    ga_tensor_options topt = GA_TENSOR_OPTIONS_INIT;
    topt.codec = codec;
    topt.params = ga_codec_params_default(codec);
    float threshold = strtof(argv[6], NULL), ratio = strtof(argv[7], NULL);
    if (threshold > 0.0f) topt.params.threshold = threshold;
    if (ratio > 0.0f) topt.params.ratio = ratio;
    int rc = 1;
    for (int k = 0; k < NT; k++) {
        params[k] = calloc(sizes[k], sizeof(float));
        grads[k] = calloc(sizes[k], sizeof(float));
        if (!params[k] || !grads[k]) {
            fprintf(stderr, "hetero_worker: out of memory\n");
            goto out;
        }
        /* The same start on every rank (rank 99's targets, scaled). */
        for (size_t i = 0; i < sizes[k]; i++) params[k][i] = target(hash3(99, (uint32_t)k, (uint32_t)i)) * 2.0f;
        if ((st = ga_client_add_tensor(cl, names[k], shapes[k], ndims[k], params[k], &topt, NULL)) != GA_OK)
            goto out;
    }
    if ((st = ga_client_init(cl)) != GA_OK) goto out;
    for (uint32_t s = 0; s < steps; s++) {
        for (int k = 0; k < NT; k++)
            for (size_t i = 0; i < sizes[k]; i++) {
                uint32_t h = hash3(rank, (uint32_t)k, (uint32_t)i);
                grads[k][i] = curv(h) * (params[k][i] - target(h));
            }
        if ((st = ga_client_step(cl, (const float *const *)grads)) != GA_OK) goto out;
    }
    FILE *f = fopen(argv[10], "wb");
    if (!f) {
        perror(argv[10]);
        goto out;
    }
    for (int k = 0; k < NT; k++) fwrite(params[k], sizeof(float), sizes[k], f);
    if (fclose(f) != 0) goto out;
    printf("version %llu\n", (unsigned long long)ga_client_version(cl));
    rc = 0;
out:
    if (rc != 0 && st != GA_OK) fprintf(stderr, "hetero_worker rank %u: %s\n", rank, ga_client_error(cl));
    ga_client_destroy(cl);
    for (int k = 0; k < NT; k++) {
        free(params[k]);
        free(grads[k]);
    }
    return rc;
}
