/* Top-k (DGC) on CUDA against the CPU: payload, residual and decode_add sum byte-identical on
 * the exact, sampled, relaxed, trimmed and histogram-fallback paths over several steps; bad
 * input gives the CPU's status and leaves the device sum alone; device scratch is freed.
 * Skips without a device (exit code 77, reported as skipped). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ga_alloc.h"
#include "ga_codec.h"
#include "ga_exec.h"
#include "oracle_topk.h"

#ifdef GA_HAVE_CUDA
/* The cudart calls the test needs to move data, declared rather than included so no CUDA
 * header leaves kernels/. cudaError_t and cudaMemcpyKind are int-sized enums. */
int cudaMemcpy(void *dst, const void *src, size_t count, int kind);
int cudaStreamCreate(void **stream);
int cudaStreamDestroy(void *stream);
#else
static int cudaMemcpy(void *dst, const void *src, size_t count, int kind)
{
    (void)dst, (void)src, (void)count, (void)kind;
    return 1;
}
static int cudaStreamCreate(void **stream)
{
    (void)stream;
    return 1;
}
static int cudaStreamDestroy(void *stream)
{
    (void)stream;
    return 1;
}
#endif
#define COPY_DEFAULT 4 /* cudaMemcpyDefault */

static uint64_t rng_state = 0xC0FFEEu;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static float unit(void) { return (float)((double)(rnd() >> 11) / 9007199254740992.0); }

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}

static void *dev_alloc(size_t bytes)
{
    void *d = NULL;
    assert_int_equal(ga_device_malloc(bytes ? bytes : 1, &d), GA_OK);
    return d;
}

static void to_dev(void *dev, const void *host, size_t bytes)
{
    if (bytes) assert_int_equal(cudaMemcpy(dev, host, bytes, COPY_DEFAULT), 0);
}

static void to_host(void *host, const void *dev, size_t bytes)
{
    if (bytes) assert_int_equal(cudaMemcpy(host, dev, bytes, COPY_DEFAULT), 0);
}

static void expect_dev_equals(const void *dev, const void *host, size_t bytes, const char *what)
{
    uint8_t *back = xmalloc(bytes);
    to_host(back, dev, bytes);
    const uint8_t *h = host;
    for (size_t i = 0; i < bytes; i++) {
        if (back[i] != h[i]) {
            print_error("%s differs at byte %zu of %zu: gpu 0x%02x, cpu 0x%02x\n", what, i, bytes, back[i], h[i]);
            fail();
        }
    }
    free(back);
}

static ga_codec_params topk_params(float ratio, float sample, uint64_t seed, int fmt)
{
    ga_codec_params p = ga_codec_params_default(GA_CODEC_TOPK);
    p.ratio = ratio;
    p.sample_fraction = sample;
    p.seed = seed;
    p.topk_values = (uint8_t)(fmt & 1 ? GA_TOPK_VALUES_FP16 : GA_TOPK_VALUES_FP32);
    p.topk_indices = (uint8_t)(fmt & 2 ? GA_TOPK_INDICES_VARINT : GA_TOPK_INDICES_INT32);
    return p;
}

enum { DATA_GAUSS, DATA_TIES, DATA_SAMPLE_ZERO, DATA_SAMPLE_HIGH, DATA_KINDS };

static void fill(float *g, size_t n, int kind, const ga_codec_params *p)
{
    for (size_t i = 0; i < n; i++) {
        if (kind == DATA_TIES) g[i] = (float)((int)(rnd() % 17) - 8) * 0.5f;
        else g[i] = rnd() % 50 == 0 ? 0.0f : (unit() + unit() + unit() - 1.5f) * 3000.0f;
    }
    if (n <= GA_TOPK_EXACT_MAX || kind < DATA_SAMPLE_ZERO) return;
    size_t start, stride, j = 0;
    oracle_topk_sample_plan(p, n, &start, &stride);
    for (size_t i = start; i < n; i += stride, j++) g[i] = kind == DATA_SAMPLE_ZERO ? 0.0f : (j < 20 ? 1e4f : 1.0f);
}

/* STEPS encodes on both backends from the same residual; payload and residual must match
 * after every step, and both decoders must leave the same sum. */
#define STEPS 3
static void parity_one(size_t n, int fmt, int kind, float ratio, void *stream)
{
    ga_exec cpu = GA_EXEC_CPU_INIT, gpu = GA_EXEC_CUDA_INIT;
    gpu.cuda_stream = stream;
    ga_codec_params p = topk_params(ratio, 0.01f, 5, fmt);
    size_t cap;
    assert_int_equal(ga_codec_encoded_size(GA_CODEC_TOPK, &p, n, &cap), GA_OK);
    float *g = xmalloc(4 * n), *r = xmalloc(4 * n), *sum = xmalloc(4 * n);
    uint8_t *out = xmalloc(cap);
    memset(r, 0, 4 * n);
    for (size_t i = 0; i < n; i++) sum[i] = unit() - 0.5f;
    float *d_g = dev_alloc(4 * n), *d_r = dev_alloc(4 * n), *d_sum = dev_alloc(4 * n);
    uint8_t *d_out = dev_alloc(cap), *d_payload = dev_alloc(cap);
    to_dev(d_r, r, 4 * n);
    to_dev(d_sum, sum, 4 * n);
    for (int step = 0; step < STEPS; step++) {
        p.seed = (uint64_t)step * 31u + (uint64_t)kind;
        fill(g, n, kind, &p);
        to_dev(d_g, g, 4 * n);
        size_t len_cpu = 0, len_gpu = 0;
        assert_int_equal(ga_codec_encode(&cpu, GA_CODEC_TOPK, &p, g, r, n, out, cap, &len_cpu), GA_OK);
        assert_int_equal(ga_codec_encode(&gpu, GA_CODEC_TOPK, &p, d_g, d_r, n, d_out, cap, &len_gpu), GA_OK);
        assert_int_equal(ga_exec_sync(&gpu), GA_OK);
        if (len_gpu != len_cpu) print_error("n=%zu fmt=%d kind=%d step=%d\n", n, fmt, kind, step);
        assert_int_equal(len_gpu, len_cpu);
        expect_dev_equals(d_out, out, len_cpu, "payload");
        expect_dev_equals(d_r, r, 4 * n, "residual");
        to_dev(d_payload, out, len_cpu);
        assert_int_equal(ga_codec_decode_add(&cpu, GA_CODEC_TOPK, &p, out, len_cpu, n, sum), GA_OK);
        assert_int_equal(ga_codec_decode_add(&gpu, GA_CODEC_TOPK, &p, d_payload, len_cpu, n, d_sum), GA_OK);
        expect_dev_equals(d_sum, sum, 4 * n, "sum");
    }
    ga_device_free(d_g);
    ga_device_free(d_r);
    ga_device_free(d_sum);
    ga_device_free(d_out);
    ga_device_free(d_payload);
    free(g);
    free(r);
    free(sum);
    free(out);
}

static void test_parity(void **state)
{
    (void)state;
    if (ga_cuda_device_count() == 0) skip();
    static const size_t sizes[] = {0, 1, 17, 1000, 65536, 65537, 1000003};
    uint64_t base = ga_mem_in_use(GA_MEM_DEVICE);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int fmt = 0; fmt < 4; fmt++)
            for (int kind = 0; kind < DATA_KINDS; kind++)
                parity_one(sizes[s], fmt, kind, sizes[s] < 100 ? 0.3f : 0.002f, NULL);
    /* A large ratio, and a stream of its own. */
    void *stream = NULL;
    assert_int_equal(cudaStreamCreate(&stream), 0);
    parity_one(300007, 3, DATA_GAUSS, 0.25f, stream);
    parity_one(300007, 0, DATA_TIES, 1.0f, stream);
    assert_int_equal(cudaStreamDestroy(stream), 0);
    assert_int_equal(ga_mem_in_use(GA_MEM_DEVICE), base);
}

/* Bad payloads: the CPU's status, and the device sum untouched. */
static void test_decode_errors(void **state)
{
    (void)state;
    if (ga_cuda_device_count() == 0) skip();
    ga_exec cpu = GA_EXEC_CPU_INIT, gpu = GA_EXEC_CUDA_INIT;
    static const struct {
        int fmt;
        uint8_t bytes[16];
        size_t len;
    } cases[] = {
        {0, {2, 0, 0, 0, 0, 0, 0x80, 0x3F, 0, 0, 0, 0x40, 7, 0, 0, 0}, 16},          /* index missing */
        {2, {2, 0, 0, 0, 0, 0, 0x80, 0x3F, 0, 0, 0, 0x40, 3, 0x83, 0x00}, 15},       /* non-canonical */
        {2, {2, 0, 0, 0, 0, 0, 0x80, 0x3F, 0, 0, 0, 0x40, 3, 0x06}, 14},             /* range */
        {2, {2, 0, 0, 0, 0, 0, 0x80, 0x7F, 0, 0, 0, 0x40, 3, 0x02}, 14},             /* inf */
        {1, {1, 0, 0, 0, 0x00, 0x7C, 3, 0, 0, 0}, 10},                                /* fp16 inf */
        {2, {0, 0, 0, 0}, 3},                                                         /* short */
    };
    float sum[10], back[10];
    for (int i = 0; i < 10; i++) sum[i] = (float)i;
    float *d_sum = dev_alloc(sizeof sum);
    uint8_t *d_payload = dev_alloc(64);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ga_codec_params p = topk_params(0.5f, 0.01f, 0, cases[c].fmt);
        uint32_t aligned[4];
        memcpy(aligned, cases[c].bytes, sizeof aligned);
        memcpy(back, sum, sizeof sum);
        int want = ga_codec_decode_add(&cpu, GA_CODEC_TOPK, &p, aligned, cases[c].len, 10, back);
        assert_int_not_equal(want, GA_OK);
        to_dev(d_sum, sum, sizeof sum);
        to_dev(d_payload, aligned, sizeof aligned);
        assert_int_equal(ga_codec_decode_add(&gpu, GA_CODEC_TOPK, &p, d_payload, cases[c].len, 10, d_sum), want);
        expect_dev_equals(d_sum, sum, sizeof sum, "sum after a rejected payload");
    }
    ga_device_free(d_sum);
    ga_device_free(d_payload);
}

/* A non-finite gradient: GA_E_NONFINITE, device residual unchanged. */
static void test_nonfinite(void **state)
{
    (void)state;
    if (ga_cuda_device_count() == 0) skip();
    ga_exec gpu = GA_EXEC_CUDA_INIT;
    size_t n = 100003, cap;
    ga_codec_params p = topk_params(0.01f, 0.01f, 0, 0);
    assert_int_equal(ga_codec_encoded_size(GA_CODEC_TOPK, &p, n, &cap), GA_OK);
    float *g = xmalloc(4 * n), *r = xmalloc(4 * n);
    for (size_t i = 0; i < n; i++) {
        g[i] = unit();
        r[i] = unit();
    }
    g[n - 1] = NAN;
    float *d_g = dev_alloc(4 * n), *d_r = dev_alloc(4 * n);
    uint8_t *d_out = dev_alloc(cap);
    to_dev(d_g, g, 4 * n);
    to_dev(d_r, r, 4 * n);
    size_t len = 777;
    assert_int_equal(ga_codec_encode(&gpu, GA_CODEC_TOPK, &p, d_g, d_r, n, d_out, cap, &len), GA_E_NONFINITE);
    assert_int_equal(len, 777);
    expect_dev_equals(d_r, r, 4 * n, "residual after a rejected encode");
    ga_device_free(d_g);
    ga_device_free(d_r);
    ga_device_free(d_out);
    free(g);
    free(r);
}

/* Without a device the CUDA backend says so and touches nothing. */
static void test_no_device(void **state)
{
    (void)state;
    if (ga_cuda_device_count() > 0) skip();
    ga_exec gpu = GA_EXEC_CUDA_INIT;
    ga_codec_params p = topk_params(0.5f, 0.01f, 0, 0);
    float g[4] = {1, 2, 3, 4}, r[4] = {0};
    uint32_t out[16];
    size_t len = 5;
    int want = ga_cuda_built() ? GA_E_NO_DEVICE : GA_E_NO_CUDA;
    assert_int_equal(ga_codec_encode(&gpu, GA_CODEC_TOPK, &p, g, r, 4, out, sizeof out, &len), want);
    assert_int_equal(len, 5);
    assert_int_equal(ga_codec_decode_add(&gpu, GA_CODEC_TOPK, &p, out, 4, 4, r), want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_device),
        cmocka_unit_test(test_parity),
        cmocka_unit_test(test_decode_errors),
        cmocka_unit_test(test_nonfinite),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    return failed ? failed : (ga_cuda_device_count() == 0 ? 77 : 0);
}
