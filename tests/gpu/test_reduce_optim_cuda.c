/* ga_reduce.h and ga_optim.h on CUDA: every function gives the same bytes as on the CPU. Skips
 * without a device. Buffers are pinned host memory, which the device reads and writes directly
 * (unified addressing), so the test needs no CUDA header and no copies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ga_alloc.h"
#include "ga_optim.h"
#include "ga_reduce.h"
#include "oracle_optim.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const size_t lengths[] = {0, 1, 15, 16, 17, 33, 1000003};

static const ga_exec cpu = GA_EXEC_CPU_INIT;
static const ga_exec gpu = GA_EXEC_CUDA_INIT;

static void require_device(void)
{
    if (ga_cuda_device_count() == 0) skip();
}

static float *pinned(size_t n)
{
    void *p = NULL;
    assert_int_equal(ga_pinned_malloc((n ? n : 1) * sizeof(float), &p), GA_OK);
    return p;
}

static void expect_same(const float *gpu_out, const float *cpu_out, size_t n, const char *where)
{
    size_t i = oracle_first_mismatch(gpu_out, cpu_out, n);
    if (i < n) fail_msg("%s: element %zu of %zu is %a on CUDA, %a on the CPU", where, i, n, gpu_out[i], cpu_out[i]);
}

/* Runs on the device and waits for it. */
#define ON_GPU(call)                                      \
    do {                                                  \
        assert_int_equal((call), GA_OK);                  \
        assert_int_equal(ga_exec_sync(&gpu), GA_OK);      \
    } while (0)

static void reduce_sum(void **state)
{
    (void)state;
    require_device();
    enum { MAX_COUNT = 5 };
    for (size_t l = 0; l < COUNT(lengths); l++) {
        size_t n = lengths[l];
        float *in[MAX_COUNT], *gpu_in0 = pinned(n), *host_out = pinned(n), *dev_out = pinned(n);
        for (int k = 0; k < MAX_COUNT; k++) in[k] = pinned(n);
        for (int count = 1; count <= MAX_COUNT; count++) {
            char where[64];
            snprintf(where, sizeof where, "sum n=%zu count=%d", n, count);
            for (int k = 0; k < count; k++) oracle_fill(in[k], n, 10u * (uint32_t)count + (uint32_t)k, 1.0f);
            assert_int_equal(ga_reduce_sum(&cpu, (const float *const *)in, count, n, host_out), GA_OK);
            ON_GPU(ga_reduce_sum(&gpu, (const float *const *)in, count, n, dev_out));
            expect_same(dev_out, host_out, n, where);
            /* In place into inputs[0] (a copy of it, so the CPU's inputs stay intact). */
            const float *in_place[MAX_COUNT];
            memcpy(gpu_in0, in[0], n * sizeof(float));
            in_place[0] = gpu_in0;
            for (int k = 1; k < count; k++) in_place[k] = in[k];
            ON_GPU(ga_reduce_sum(&gpu, in_place, count, n, gpu_in0));
            expect_same(gpu_in0, host_out, n, where);
        }
        for (int k = 0; k < MAX_COUNT; k++) ga_pinned_free(in[k]);
        ga_pinned_free(gpu_in0), ga_pinned_free(host_out), ga_pinned_free(dev_out);
    }
}

static void reduce_sum_max_inputs(void **state)
{
    (void)state;
    require_device();
    enum { N = 4099 };
    float *data = pinned((size_t)GA_REDUCE_MAX_INPUTS * N), *host_out = pinned(N), *dev_out = pinned(N);
    const float *in[GA_REDUCE_MAX_INPUTS];
    oracle_fill(data, (size_t)GA_REDUCE_MAX_INPUTS * N, 77, 1.0f);
    for (int k = 0; k < GA_REDUCE_MAX_INPUTS; k++) in[k] = data + (size_t)k * N;
    assert_int_equal(ga_reduce_sum(&cpu, in, GA_REDUCE_MAX_INPUTS, N, host_out), GA_OK);
    ON_GPU(ga_reduce_sum(&gpu, in, GA_REDUCE_MAX_INPUTS, N, dev_out));
    expect_same(dev_out, host_out, N, "sum of 256 inputs");
    ga_pinned_free(data), ga_pinned_free(host_out), ga_pinned_free(dev_out);
}

static void reduce_add_scale(void **state)
{
    (void)state;
    require_device();
    for (size_t l = 0; l < COUNT(lengths); l++) {
        size_t n = lengths[l];
        float *x = pinned(n), *host_acc = pinned(n), *dev_acc = pinned(n);
        char where[64];
        oracle_fill(x, n, 1, 1.0f);
        oracle_fill(host_acc, n, 2, 1.0f);
        memcpy(dev_acc, host_acc, n * sizeof(float));
        snprintf(where, sizeof where, "add n=%zu", n);
        assert_int_equal(ga_reduce_add(&cpu, host_acc, x, n), GA_OK);
        ON_GPU(ga_reduce_add(&gpu, dev_acc, x, n));
        expect_same(dev_acc, host_acc, n, where);
        snprintf(where, sizeof where, "scale n=%zu", n);
        assert_int_equal(ga_reduce_scale(&cpu, host_acc, n, 1.0f / 3.0f), GA_OK);
        ON_GPU(ga_reduce_scale(&gpu, dev_acc, n, 1.0f / 3.0f));
        expect_same(dev_acc, host_acc, n, where);
        ga_pinned_free(x), ga_pinned_free(host_acc), ga_pinned_free(dev_acc);
    }
}

static void reduce_sub(void **state)
{
    (void)state;
    require_device();
    for (size_t l = 0; l < COUNT(lengths); l++) {
        size_t n = lengths[l];
        float *a = pinned(n), *b = pinned(n), *host_out = pinned(n), *dev_out = pinned(n), *dev_a = pinned(n);
        char where[64];
        oracle_fill(a, n, 5, 1.0f);
        oracle_fill(b, n, 6, 1.0f);
        for (size_t i = 0; i < n; i += 7) b[i] = a[i];
        snprintf(where, sizeof where, "sub n=%zu", n);
        assert_int_equal(ga_reduce_sub(&cpu, host_out, a, b, n), GA_OK);
        ON_GPU(ga_reduce_sub(&gpu, dev_out, a, b, n));
        expect_same(dev_out, host_out, n, where);
        memcpy(dev_a, a, n * sizeof(float)); /* in place into the first operand */
        ON_GPU(ga_reduce_sub(&gpu, dev_a, dev_a, b, n));
        expect_same(dev_a, host_out, n, where);
        ga_pinned_free(a), ga_pinned_free(b), ga_pinned_free(host_out), ga_pinned_free(dev_out);
        ga_pinned_free(dev_a);
    }
}

static void sgd(void **state)
{
    (void)state;
    require_device();
    const ga_sgd_params cases[] = {
        {.lr = 0.1f},
        {.lr = 0.1f, .weight_decay = 0.01f},
        {.lr = 0.05f, .momentum = 0.9f},
        {.lr = 0.01f, .momentum = 0.9f, .weight_decay = 5e-4f},
        {.lr = 0.05f, .momentum = 0.9f, .nesterov = true},
        {.lr = 0.3f, .momentum = 0.5f, .weight_decay = 0.1f, .nesterov = true},
    };
    for (size_t l = 0; l < COUNT(lengths); l++) {
        size_t n = lengths[l];
        float *g = pinned(n), *host_p = pinned(n), *host_buf = pinned(n), *dev_p = pinned(n), *dev_buf = pinned(n);
        for (size_t c = 0; c < COUNT(cases); c++) {
            oracle_fill(host_p, n, 3, 1.0f);
            memcpy(dev_p, host_p, n * sizeof(float));
            memset(host_buf, 0, n * sizeof(float)), memset(dev_buf, 0, n * sizeof(float));
            for (int step = 1; step <= 3; step++) {
                char where[64];
                snprintf(where, sizeof where, "sgd case %zu n=%zu step %d", c, n, step);
                oracle_fill(g, n, 100u + (uint32_t)step, 1.0f);
                assert_int_equal(ga_sgd_step(&cpu, &cases[c], host_p, host_buf, g, n), GA_OK);
                ON_GPU(ga_sgd_step(&gpu, &cases[c], dev_p, dev_buf, g, n));
                expect_same(dev_p, host_p, n, where);
                expect_same(dev_buf, host_buf, n, where);
            }
        }
        ga_pinned_free(g), ga_pinned_free(host_p), ga_pinned_free(host_buf);
        ga_pinned_free(dev_p), ga_pinned_free(dev_buf);
    }
}

static void adam(void **state)
{
    (void)state;
    require_device();
    const ga_adam_params cases[] = {
        {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f},
        {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f},
        {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f, .decoupled = true},
        {.lr = 0.5f, .beta1 = 0.0f, .beta2 = 0.5f, .eps = 1e-3f},
    };
    for (size_t l = 0; l < COUNT(lengths); l++) {
        size_t n = lengths[l];
        float *g = pinned(n), *h[3], *d[3];
        for (int k = 0; k < 3; k++) h[k] = pinned(n), d[k] = pinned(n);
        for (size_t c = 0; c < COUNT(cases); c++) {
            oracle_fill(h[0], n, 4, 1.0f);
            memset(h[1], 0, n * sizeof(float)), memset(h[2], 0, n * sizeof(float));
            for (int k = 0; k < 3; k++) memcpy(d[k], h[k], n * sizeof(float));
            for (uint64_t t = 1; t <= 5; t++) {
                char where[64];
                snprintf(where, sizeof where, "adam case %zu n=%zu t=%llu", c, n, (unsigned long long)t);
                oracle_fill(g, n, 200u + (uint32_t)t, 1.0f);
                assert_int_equal(ga_adam_step(&cpu, &cases[c], t, h[0], h[1], h[2], g, n), GA_OK);
                ON_GPU(ga_adam_step(&gpu, &cases[c], t, d[0], d[1], d[2], g, n));
                for (int k = 0; k < 3; k++) expect_same(d[k], h[k], n, where);
            }
        }
        ga_pinned_free(g);
        for (int k = 0; k < 3; k++) ga_pinned_free(h[k]), ga_pinned_free(d[k]);
    }
}

/* Validation happens before the backend runs: a bad call on CUDA changes nothing either. */
static void invalid_on_gpu(void **state)
{
    (void)state;
    require_device();
    enum { N = 33 };
    float *p = pinned(N), *m = pinned(N), *v = pinned(N), *g = pinned(N), saved[3][N];
    oracle_fill(p, N, 1, 1.0f), oracle_fill(m, N, 2, 1.0f), oracle_fill_nonneg(v, N, 3, 1.0f);
    oracle_fill(g, N, 4, 1.0f);
    memcpy(saved[0], p, sizeof saved[0]), memcpy(saved[1], m, sizeof saved[1]), memcpy(saved[2], v, sizeof saved[2]);
    const ga_adam_params bad = {.lr = 1e-3f, .beta1 = 1.0f, .beta2 = 0.999f, .eps = 1e-8f};
    const ga_sgd_params bad_sgd = {.lr = 0.1f, .momentum = 1.0f};
    assert_int_equal(ga_adam_step(&gpu, &bad, 1, p, m, v, g, N), GA_E_OPTIM);
    assert_int_equal(ga_sgd_step(&gpu, &bad_sgd, p, m, g, N), GA_E_OPTIM);
    assert_int_equal(ga_reduce_scale(&gpu, p, N, INFINITY), GA_E_NONFINITE);
    assert_int_equal(ga_exec_sync(&gpu), GA_OK);
    assert_memory_equal(p, saved[0], sizeof saved[0]);
    assert_memory_equal(m, saved[1], sizeof saved[1]);
    assert_memory_equal(v, saved[2], sizeof saved[2]);
    ga_pinned_free(p), ga_pinned_free(m), ga_pinned_free(v), ga_pinned_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reduce_sum),
        cmocka_unit_test(reduce_sum_max_inputs),
        cmocka_unit_test(reduce_add_scale),
        cmocka_unit_test(reduce_sub),
        cmocka_unit_test(sgd),
        cmocka_unit_test(adam),
        cmocka_unit_test(invalid_on_gpu),
    };
    if (ga_cuda_device_count() == 0) {
        printf("no CUDA device: skipped\n");
        return 77; /* ctest SKIP_RETURN_CODE */
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
