/* Device tensors end to end (gpu): against the real in-process server, a job whose tensor lives
 * in device memory and a job with the same tensor on the host, fed the same gradients with the
 * same codec (2bit, topk, none), hold bit-identical parameters and residuals after every step,
 * through a refused push folded back on the device (late buffer for none) and a NaN gradient
 * refused before anything moves; device options that need the host are refused; the device
 * allocator balances. Exits 77 (skipped) without a CUDA device. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_inproc_server.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "ga_alloc.h"
#include "gradagg.h"

#define N 150037 /* odd: a partial last chunk, several chunks at chunk_bytes 16 KiB */
#define STEPS 5

static char data_dir[64];
static ga_server *server;
static char address[64];
static const ga_exec cuda = GA_EXEC_CUDA_INIT; /* the default stream: the test's own copies */

static int start_server(void **state)
{
    (void)state;
    return ga_test_server_start(data_dir, &server, address, sizeof address) == GA_OK ? 0 : -1;
}

static int stop_server(void **state)
{
    (void)state;
    ga_server_destroy(server);
    server = NULL;
    return 0;
}

static ga_client *open_client(const char *job)
{
    ga_client_options o = GA_CLIENT_OPTIONS_INIT;
    o.server = address;
    o.job = job;
    o.optimizer = GA_SERVER_OPTIM_SGD;
    o.sgd.lr = 0.1f;
    o.sgd.momentum = 0.9f;
    o.chunk_bytes = 16 << 10;
    o.call_timeout_ms = 10000;
    o.step_timeout_ms = 20000;
    o.threads = 2;
    ga_client *c = NULL;
    char msg[512];
    if (ga_client_create(&o, &c, msg, sizeof msg) != GA_OK) fail_msg("create %s: %s", job, msg);
    return c;
}

static void to_device(float *d, const float *h, size_t n)
{
    assert_int_equal(ga_device_copy(&cuda, d, h, n * sizeof(float)), GA_OK);
    assert_int_equal(ga_exec_sync(&cuda), GA_OK);
}

static void to_host(float *h, const float *d, size_t n)
{
    assert_int_equal(ga_device_copy(&cuda, h, d, n * sizeof(float)), GA_OK);
    assert_int_equal(ga_exec_sync(&cuda), GA_OK);
}

static void gradient(float *g, int step)
{
    for (size_t i = 0; i < N; i++) {
        uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull + (uint64_t)step * 0xC2B2AE3D27D4EB4Full;
        x = (x ^ (x >> 29)) * 0xBF58476D1CE4E5B9ull;
        g[i] = (float)((double)(x >> 40) / 16777216.0 - 0.5) * (i % 13 == 0 ? 2.0f : 0.1f);
    }
}

/* Device params and the residual (or late buffer) equal the host job's, bit for bit. */
static void expect_same(ga_client *dc, ga_client *hc, const float *dparams, const float *hparams, float *tmp,
                        const char *when)
{
    assert_int_equal(ga_client_version(dc), ga_client_version(hc));
    to_host(tmp, dparams, N);
    if (memcmp(tmp, hparams, N * sizeof(float)) != 0) fail_msg("%s: params differ", when);
    assert_memory_equal(dc->tensors[0].params, hparams, N * sizeof(float)); /* the mirror */
    const ga_tensor *dt = &dc->tensors[0], *ht = &hc->tensors[0];
    const float *dstate = dt->residual ? dt->residual : dt->late;
    const float *hstate = ht->residual ? ht->residual : ht->late;
    assert_true((dstate == NULL) == (hstate == NULL));
    if (dstate) {
        to_host(tmp, dstate, N);
        if (memcmp(tmp, hstate, N * sizeof(float)) != 0) fail_msg("%s: residual differs", when);
    }
}

static void device_matches_host(ga_codec_id codec)
{
    uint64_t dev_before = ga_mem_in_use(GA_MEM_DEVICE);
    char jd[32], jh[32];
    snprintf(jd, sizeof jd, "dev-%s", ga_codec_name(codec));
    snprintf(jh, sizeof jh, "host-%s", ga_codec_name(codec));
    ga_client *dc = open_client(jd), *hc = open_client(jh);
    float *hparams = malloc(N * sizeof(float)), *g = malloc(N * sizeof(float)), *tmp = malloc(N * sizeof(float));
    assert_true(hparams && g && tmp);
    float *dparams = NULL, *dg = NULL;
    assert_int_equal(ga_device_malloc(N * sizeof(float), (void **)&dparams), GA_OK);
    assert_int_equal(ga_device_malloc(N * sizeof(float), (void **)&dg), GA_OK);
    for (size_t i = 0; i < N; i++) hparams[i] = (float)(i % 97) * 0.01f - 0.5f;
    to_device(dparams, hparams, N);

    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    t.codec = codec;
    if (codec == GA_CODEC_2BIT) t.params.threshold = 0.05f;
    if (codec == GA_CODEC_TOPK) t.params = (ga_codec_params){0.0f, 0.01f, 0.01f, 10, 42, 0, 0, 0.0f};
    uint64_t shape[1] = {N};
    assert_int_equal(ga_client_add_tensor(hc, "w", shape, 1, hparams, &t, NULL), GA_OK);
    t.device = true;
    assert_int_equal(ga_client_add_tensor(dc, "w", shape, 1, dparams, &t, NULL), GA_OK);
    assert_int_equal(ga_client_init(dc), GA_OK);
    assert_int_equal(ga_client_init(hc), GA_OK);
    expect_same(dc, hc, dparams, hparams, tmp, "after init");

    char when[64];
    for (int s = 0; s < STEPS; s++) {
        gradient(g, s);
        to_device(dg, g, N);
        const float *gd[1] = {dg}, *gh[1] = {g};
        assert_int_equal(ga_client_step(dc, gd), GA_OK);
        assert_int_equal(ga_client_step(hc, gh), GA_OK);
        snprintf(when, sizeof when, "%s step %d", ga_codec_name(codec), s);
        expect_same(dc, hc, dparams, hparams, tmp, when);
        if (codec == GA_CODEC_2BIT) {
            float td, th, dd, dh;
            assert_int_equal(ga_client_tensor_threshold(dc, 0, &td, &dd), GA_OK);
            assert_int_equal(ga_client_tensor_threshold(hc, 0, &th, &dh), GA_OK);
            assert_true(td == th && dd == dh && dd > 0.0f);
        }
    }

    /* A refused push (a step the server has not opened): folded back on the device. */
    uint64_t open_d = dc->shards[0].step, open_h = hc->shards[0].step;
    dc->shards[0].step += 3;
    hc->shards[0].step += 3;
    gradient(g, 100);
    to_device(dg, g, N);
    const float *gd[1] = {dg}, *gh[1] = {g};
    assert_int_equal(ga_client_step(dc, gd), GA_E_STEP_FUTURE);
    assert_int_equal(ga_client_step(hc, gh), GA_E_STEP_FUTURE);
    dc->shards[0].step = open_d;
    hc->shards[0].step = open_h;
    expect_same(dc, hc, dparams, hparams, tmp, "after the fold-back");
    if (codec == GA_CODEC_NONE) assert_true(dc->tensors[0].late_pending);

    /* A NaN: refused before anything moves. */
    g[N / 2] = NAN;
    to_device(dg, g, N);
    assert_int_equal(ga_client_step(dc, gd), GA_E_NONFINITE);
    assert_non_null(strstr(ga_client_error(dc), "holds NaN or Inf"));
    g[N / 2] = 0.0f;
    expect_same(dc, hc, dparams, hparams, tmp, "after the NaN");

    for (int s = STEPS; s < STEPS + 3; s++) { /* the late gradients travel with these */
        gradient(g, s);
        to_device(dg, g, N);
        assert_int_equal(ga_client_step(dc, gd), GA_OK);
        assert_int_equal(ga_client_step(hc, gh), GA_OK);
        snprintf(when, sizeof when, "%s step %d after the fold-back", ga_codec_name(codec), s);
        expect_same(dc, hc, dparams, hparams, tmp, when);
    }
    if (codec == GA_CODEC_NONE) assert_false(dc->tensors[0].late_pending);

    ga_client_destroy(dc);
    ga_client_destroy(hc);
    ga_device_free(dparams);
    ga_device_free(dg);
    free(hparams);
    free(g);
    free(tmp);
    assert_int_equal(ga_mem_in_use(GA_MEM_DEVICE), dev_before);
}

static void device_2bit(void **state)
{
    (void)state;
    device_matches_host(GA_CODEC_2BIT);
}

static void device_topk(void **state)
{
    (void)state;
    device_matches_host(GA_CODEC_TOPK);
}

static void device_none(void **state)
{
    (void)state;
    device_matches_host(GA_CODEC_NONE);
}

static void device_options_refused(void **state)
{
    (void)state;
    ga_client *c = open_client("dev-options");
    float *d = NULL;
    assert_int_equal(ga_device_malloc(64 * sizeof(float), (void **)&d), GA_OK);
    uint64_t shape[1] = {64};
    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    t.device = true;
    t.codec = GA_CODEC_TOPK;
    t.dgc.enabled = true;
    assert_int_equal(ga_client_add_tensor(c, "a", shape, 1, d, &t, NULL), GA_E_INVAL);
    assert_string_equal(ga_client_error(c), "add_tensor 'a': DGC is for host tensors only, not device ones");
    t = (ga_tensor_options)GA_TENSOR_OPTIONS_INIT;
    t.device = true;
    t.codec = GA_CODEC_2BIT;
    t.auto_threshold.enabled = true;
    assert_int_equal(ga_client_add_tensor(c, "a", shape, 1, d, &t, NULL), GA_E_INVAL);
    assert_string_equal(ga_client_error(c), "add_tensor 'a': auto_threshold is for host tensors only, not device ones");
    assert_int_equal(c->ntensors, 0);
    ga_client_destroy(c);
    ga_device_free(d);
}

int main(void)
{
    if (ga_cuda_device_count() == 0) {
        fprintf(stderr, "test_sdk_cuda: no CUDA device, skipped\n");
        return 77;
    }
    snprintf(data_dir, sizeof data_dir, "/tmp/test_sdk_cuda.XXXXXX");
    if (!mkdtemp(data_dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(device_2bit),
        cmocka_unit_test(device_topk),
        cmocka_unit_test(device_none),
        cmocka_unit_test(device_options_refused),
    };
    int failed = cmocka_run_group_tests(tests, start_server, stop_server);
    ga_test_remove_dir(data_dir);
    return failed;
}
