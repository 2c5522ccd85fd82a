/* The automatic 2bit threshold end to end: two workers against the real server (in-process,
 * gRPC on 127.0.0.1:0, a fresh data dir), rank 0 with the automatic threshold and rank 1 with a
 * fixed one, train a noisy quadratic with server-side SGD: the server accepts every chunk (each
 * carries its own threshold), both ranks hold identical parameters, the loss falls, and
 * ga_client_tensor_threshold reports an adapted threshold and, once the residual has built up,
 * a density near the budget's. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_inproc_server.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auto_threshold.h"
#include "ga_alloc.h"
#include "gradagg.h"

#define N 100000
#define STEPS 16

static char data_dir[64];

typedef struct worker {
    ga_client *c;
    uint32_t rank;
    float *w, *g;
    const float *target, *curv;
    ga_status st;
    float threshold[STEPS], density[STEPS];
} worker;

static float noise(uint32_t rank, int step, size_t i)
{
    uint64_t x = ((uint64_t)i * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)step << 40) ^ ((uint64_t)rank << 56);
    x = (x ^ (x >> 31)) * 0xBF58476D1CE4E5B9ull;
    return (float)((double)(x >> 40) / 16777216.0 - 0.5) * 0.02f;
}

static double loss(const float *w, const float *target, const float *curv)
{
    double s = 0.0;
    for (size_t i = 0; i < N; i++) s += 0.5 * curv[i] * ((double)w[i] - target[i]) * ((double)w[i] - target[i]);
    return s;
}

static void *run_worker(void *arg)
{
    worker *wk = arg;
    wk->st = ga_client_init(wk->c);
    for (int s = 0; s < STEPS && wk->st == GA_OK; s++) {
        for (size_t i = 0; i < N; i++) wk->g[i] = wk->curv[i] * (wk->w[i] - wk->target[i]) + noise(wk->rank, s, i);
        const float *g[1] = {wk->g};
        wk->st = ga_client_step(wk->c, g);
        if (wk->st == GA_OK) wk->st = ga_client_tensor_threshold(wk->c, 0, &wk->threshold[s], &wk->density[s]);
    }
    if (wk->st != GA_OK) fprintf(stderr, "rank %u: %s\n", wk->rank, ga_client_error(wk->c));
    return NULL;
}

static void auto_and_fixed_train(void **state)
{
    (void)state;
    ga_server *server = NULL;
    char address[64];
    assert_int_equal(ga_test_server_start(data_dir, &server, address, sizeof address), GA_OK);

    float *target = ga_malloc(N * sizeof(float)), *curv = ga_malloc(N * sizeof(float));
    assert_true(target && curv);
    for (size_t i = 0; i < N; i++) {
        target[i] = (float)((int)(i % 201) - 100) * 0.01f;
        curv[i] = 0.5f + (float)(i % 7) * 0.1f;
    }
    static worker w[2];
    for (uint32_t r = 0; r < 2; r++) {
        worker *wk = &w[r];
        memset(wk, 0, sizeof *wk);
        wk->rank = r;
        wk->target = target;
        wk->curv = curv;
        wk->w = ga_calloc(N, sizeof(float));
        wk->g = ga_malloc(N * sizeof(float));
        assert_true(wk->w && wk->g);
        ga_client_options o = GA_CLIENT_OPTIONS_INIT;
        o.server = address;
        o.job = "auto";
        o.rank = r;
        o.world_size = 2;
        o.mean = true;
        o.optimizer = GA_SERVER_OPTIM_SGD;
        o.sgd.lr = 0.1f;
        o.chunk_bytes = 4096; /* several chunks, each with its own codec params */
        o.call_timeout_ms = 10000;
        o.step_timeout_ms = 20000;
        o.threads = 1;
        char msg[512];
        if (ga_client_create(&o, &wk->c, msg, sizeof msg) != GA_OK) fail_msg("create rank %u: %s", r, msg);
        ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
        t.codec = GA_CODEC_2BIT;
        if (r == 0) t.auto_threshold = (ga_auto_threshold){true, 1.0f, 0.5f, 0.0f, GA_AUTO_LEVEL_MEAN};
        else t.params.threshold = 0.05f;
        uint64_t shape[2] = {250, 400};
        assert_int_equal(ga_client_add_tensor(wk->c, "w", shape, 2, wk->w, &t, NULL), GA_OK);
    }
    double start = loss(w[0].w, target, curv);
    pthread_t th[2];
    for (int r = 0; r < 2; r++) assert_int_equal(pthread_create(&th[r], NULL, run_worker, &w[r]), 0);
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < 2; r++) assert_int_equal(w[r].st, GA_OK);

    assert_int_equal(ga_client_version(w[0].c), STEPS);
    assert_memory_equal(w[0].w, w[1].w, N * sizeof(float));
    double end = loss(w[0].w, target, curv);
    if (!(end < 0.5 * start)) fail_msg("loss %g -> %g", start, end);

    const double rho = ga_auto_density_for_bits(1.0);
    for (int s = 0; s < STEPS; s++) {
        assert_true(w[0].threshold[s] > 0.0f && isfinite(w[0].threshold[s]));
        /* The first steps send more: the residual builds up and the smoothed threshold lags it. */
        if (s >= STEPS / 2 && fabs(w[0].density[s] - rho) > 0.15 * rho)
            fail_msg("step %d: density %g, target %g (threshold %g)", s, (double)w[0].density[s], rho,
                     (double)w[0].threshold[s]);
        assert_true(w[1].threshold[s] == 0.05f); /* the fixed rank keeps its own */
        assert_true(w[1].density[s] >= 0.0f && w[1].density[s] <= 1.0f);
    }
    /* Adapted: the first from the first sample (not the codec's 0.5), then moving with |residual + g|. */
    assert_true(w[0].threshold[0] != 0.5f);
    assert_true(w[0].threshold[STEPS / 2] > w[0].threshold[0]);
    ga_client_stats st;
    ga_client_get_stats(w[0].c, &st);
    assert_int_equal(st.steps, STEPS);
    assert_int_equal(st.late_pushes, 0);

    for (int r = 0; r < 2; r++) {
        ga_client_destroy(w[r].c);
        ga_free(w[r].w);
        ga_free(w[r].g);
    }
    ga_free(target);
    ga_free(curv);
    ga_server_destroy(server);
}

int main(void)
{
    snprintf(data_dir, sizeof data_dir, "/tmp/test_auto_e2e.XXXXXX");
    if (!mkdtemp(data_dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(auto_and_fixed_train),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    ga_test_remove_dir(data_dir);
    return failed;
}
