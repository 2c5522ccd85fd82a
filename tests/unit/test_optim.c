/* ga_optim.h: SGD and Adam steps match the scalar oracle byte for byte over several steps, for
 * every length, thread cap, SIMD cap and alignment tried; bad calls return their status and
 * change nothing. */
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
#include "oracle_optim.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define STEPS 5

static const size_t lengths[] = {0, 1, 15, 16, 17, 33, 1000003};

/* offset: floats added to every vector's address, so the vector loops meet unaligned heads. */
typedef struct exec_case {
    int threads;
    ga_simd simd;
    size_t offset;
} exec_case;

static const exec_case execs[] = {
    {1, GA_SIMD_AUTO, 0}, {1, GA_SIMD_SCALAR, 1}, {1, GA_SIMD_AVX2, 0}, {2, GA_SIMD_AUTO, 1}, {2, GA_SIMD_SCALAR, 0},
};

/* n floats at offset `offset` into a fresh block; free with free_floats(x, offset). */
static float *alloc_floats(size_t n, size_t offset)
{
    float *x = ga_malloc((n + offset) * sizeof *x);
    assert_non_null(x);
    return x + offset;
}

static void free_floats(float *x, size_t offset) { ga_free(x - offset); }

static void expect_same(const float *got, const float *want, size_t n, const char *what, const char *where)
{
    size_t i = oracle_first_mismatch(got, want, n);
    if (i < n) fail_msg("%s (%s): element %zu of %zu is %a, oracle %a", what, where, i, n, got[i], want[i]);
}

static ga_exec cpu_exec(const exec_case *e)
{
    ga_exec ex = GA_EXEC_CPU_INIT;
    ex.max_threads = e->threads;
    ex.simd = e->simd;
    return ex;
}

/* ---- SGD ---- */

static void check_sgd(ga_sgd_params hp)
{
    for (size_t l = 0; l < COUNT(lengths); l++) {
        size_t n = lengths[l];
        for (size_t e = 0; e < COUNT(execs); e++) {
            size_t off = execs[e].offset;
            float *p = alloc_floats(n, off), *buf = alloc_floats(n, off), *g = alloc_floats(n, off);
            float *want_p = alloc_floats(n, 0), *want_buf = alloc_floats(n, 0);
            oracle_fill(p, n, 1, 1.0f);
            memcpy(want_p, p, n * sizeof *p);
            memset(buf, 0, n * sizeof *buf);
            memset(want_buf, 0, n * sizeof *buf);
            ga_exec ex = cpu_exec(&execs[e]);
            for (int step = 1; step <= STEPS; step++) {
                char where[96];
                snprintf(where, sizeof where, "n=%zu threads=%d simd=%d offset=%zu step=%d", n, execs[e].threads,
                         (int)execs[e].simd, off, step);
                oracle_fill(g, n, 100u + (uint32_t)step, 1.0f);
                /* Plain SGD takes no state: pass none. */
                assert_int_equal(ga_sgd_step(&ex, &hp, p, hp.momentum != 0.0f ? buf : NULL, g, n), GA_OK);
                oracle_sgd_step(&hp, want_p, want_buf, g, n);
                expect_same(p, want_p, n, "param", where);
                expect_same(buf, want_buf, n, "momentum_buf", where);
            }
            free_floats(p, off), free_floats(buf, off), free_floats(g, off);
            free_floats(want_p, 0), free_floats(want_buf, 0);
        }
    }
}

static void sgd_plain(void **state)
{
    (void)state;
    check_sgd((ga_sgd_params){.lr = 0.1f});
}

static void sgd_momentum(void **state)
{
    (void)state;
    check_sgd((ga_sgd_params){.lr = 0.05f, .momentum = 0.9f});
}

static void sgd_nesterov(void **state)
{
    (void)state;
    check_sgd((ga_sgd_params){.lr = 0.05f, .momentum = 0.9f, .nesterov = true});
}

static void sgd_weight_decay(void **state)
{
    (void)state;
    check_sgd((ga_sgd_params){.lr = 0.1f, .weight_decay = 0.01f});
}

static void sgd_momentum_weight_decay(void **state)
{
    (void)state;
    check_sgd((ga_sgd_params){.lr = 0.01f, .momentum = 0.9f, .weight_decay = 5e-4f});
}

static void sgd_nesterov_weight_decay(void **state)
{
    (void)state;
    check_sgd((ga_sgd_params){.lr = 0.3f, .momentum = 0.5f, .weight_decay = 0.1f, .nesterov = true});
}

/* ---- Adam ---- */

static void check_adam(ga_adam_params hp, uint64_t first_t)
{
    for (size_t l = 0; l < COUNT(lengths); l++) {
        size_t n = lengths[l];
        for (size_t e = 0; e < COUNT(execs); e++) {
            size_t off = execs[e].offset;
            float *p = alloc_floats(n, off), *m = alloc_floats(n, off), *v = alloc_floats(n, off);
            float *g = alloc_floats(n, off);
            float *want_p = alloc_floats(n, 0), *want_m = alloc_floats(n, 0), *want_v = alloc_floats(n, 0);
            oracle_fill(p, n, 2, 1.0f);
            memcpy(want_p, p, n * sizeof *p);
            memset(m, 0, n * sizeof *m), memset(want_m, 0, n * sizeof *m);
            memset(v, 0, n * sizeof *v), memset(want_v, 0, n * sizeof *v);
            ga_exec ex = cpu_exec(&execs[e]);
            for (uint64_t t = first_t; t < first_t + STEPS; t++) {
                char where[112];
                snprintf(where, sizeof where, "n=%zu threads=%d simd=%d offset=%zu t=%llu", n, execs[e].threads,
                         (int)execs[e].simd, off, (unsigned long long)t);
                oracle_fill(g, n, 200u + (uint32_t)t, 1.0f);
                assert_int_equal(ga_adam_step(&ex, &hp, t, p, m, v, g, n), GA_OK);
                oracle_adam_step(&hp, t, want_p, want_m, want_v, g, n);
                expect_same(p, want_p, n, "param", where);
                expect_same(m, want_m, n, "m", where);
                expect_same(v, want_v, n, "v", where);
            }
            free_floats(p, off), free_floats(m, off), free_floats(v, off), free_floats(g, off);
            free_floats(want_p, 0), free_floats(want_m, 0), free_floats(want_v, 0);
        }
    }
}

static void adam_plain(void **state)
{
    (void)state;
    check_adam((ga_adam_params){.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f}, 1);
}

static void adam_l2(void **state)
{
    (void)state;
    check_adam((ga_adam_params){.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f}, 1);
}

static void adamw(void **state)
{
    (void)state;
    check_adam((ga_adam_params){.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f,
                                .decoupled = true},
               1);
}

/* beta1 = 0 and a small beta2 make the moments follow g closely; a large eps and lr. */
static void adam_unusual_betas(void **state)
{
    (void)state;
    check_adam((ga_adam_params){.lr = 0.5f, .beta1 = 0.0f, .beta2 = 0.5f, .eps = 1e-3f}, 1);
}

/* Late steps: the bias corrections are ~1. */
static void adamw_late_steps(void **state)
{
    (void)state;
    check_adam((ga_adam_params){.lr = 3e-4f, .beta1 = 0.95f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 0.05f,
                                .decoupled = true},
               1000000);
}

/* ---- errors change nothing ---- */

#define SMALL 33

typedef struct snapshot {
    float p[SMALL], s1[SMALL], s2[SMALL], g[SMALL];
} snapshot;

static void make_state(snapshot *live, snapshot *saved)
{
    oracle_fill(live->p, SMALL, 7, 1.0f);
    oracle_fill(live->s1, SMALL, 8, 1.0f);
    oracle_fill_nonneg(live->s2, SMALL, 9, 1.0f);
    oracle_fill(live->g, SMALL, 10, 1.0f);
    memcpy(saved, live, sizeof *live);
}

static void expect_unchanged(const snapshot *live, const snapshot *saved, const char *what)
{
    if (memcmp(live, saved, sizeof *live) != 0) fail_msg("%s: a failed call changed the vectors", what);
}

static void sgd_invalid_hyper_parameters(void **state)
{
    (void)state;
    static const struct {
        const char *what;
        ga_sgd_params hp;
    } bad[] = {
        {"lr < 0", {.lr = -0.1f}},
        {"lr NaN", {.lr = NAN}},
        {"lr inf", {.lr = INFINITY}},
        {"momentum 1", {.lr = 0.1f, .momentum = 1.0f}},
        {"momentum < 0", {.lr = 0.1f, .momentum = -0.5f}},
        {"momentum NaN", {.lr = 0.1f, .momentum = NAN}},
        {"momentum inf", {.lr = 0.1f, .momentum = INFINITY}},
        {"weight_decay < 0", {.lr = 0.1f, .weight_decay = -1e-4f}},
        {"weight_decay NaN", {.lr = 0.1f, .weight_decay = NAN}},
        {"weight_decay inf", {.lr = 0.1f, .momentum = 0.9f, .weight_decay = INFINITY}},
        {"nesterov without momentum", {.lr = 0.1f, .nesterov = true}},
    };
    for (int threads = 1; threads <= 2; threads++) {
        ga_exec ex = GA_EXEC_CPU_INIT;
        ex.max_threads = threads;
        for (size_t i = 0; i < COUNT(bad); i++) {
            snapshot live, saved;
            make_state(&live, &saved);
            ga_status rc = ga_sgd_step(&ex, &bad[i].hp, live.p, live.s1, live.g, SMALL);
            if (rc != GA_E_OPTIM) fail_msg("%s: got %s, want GA_E_OPTIM", bad[i].what, ga_status_name(rc));
            expect_unchanged(&live, &saved, bad[i].what);
        }
    }
}

static void adam_invalid_hyper_parameters(void **state)
{
    (void)state;
    const ga_adam_params ok = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    ga_adam_params bad[20];
    const char *what[20];
    uint64_t t[20];
    int count = 0;
#define BAD(label, field, value, step)  \
    do {                                \
        bad[count] = ok;                \
        bad[count].field = (value);     \
        what[count] = (label);          \
        t[count++] = (step);            \
    } while (0)
    BAD("lr < 0", lr, -1e-3f, 1);
    BAD("lr NaN", lr, NAN, 1);
    BAD("lr inf", lr, INFINITY, 1);
    BAD("beta1 1", beta1, 1.0f, 1);
    BAD("beta1 < 0", beta1, -0.1f, 1);
    BAD("beta1 NaN", beta1, NAN, 1);
    BAD("beta2 1", beta2, 1.0f, 1);
    BAD("beta2 > 1", beta2, 1.5f, 1);
    BAD("beta2 NaN", beta2, NAN, 1);
    BAD("eps 0", eps, 0.0f, 1);
    BAD("eps < 0", eps, -1e-8f, 1);
    BAD("eps inf", eps, INFINITY, 1);
    BAD("eps NaN", eps, NAN, 1);
    BAD("weight_decay < 0", weight_decay, -0.01f, 1);
    BAD("weight_decay NaN", weight_decay, NAN, 1);
    BAD("t 0", lr, 1e-3f, 0);
    BAD("step_size overflows", lr, 3e38f, 1); /* lr / (1 - 0.9) > FLT_MAX */
#undef BAD
    bad[count] = ok, bad[count].lr = 1e30f, bad[count].weight_decay = 1e30f, bad[count].decoupled = true;
    what[count] = "AdamW decay overflows", t[count++] = 1;
    for (int threads = 1; threads <= 2; threads++) {
        ga_exec ex = GA_EXEC_CPU_INIT;
        ex.max_threads = threads;
        for (int i = 0; i < count; i++) {
            snapshot live, saved;
            make_state(&live, &saved);
            ga_status rc = ga_adam_step(&ex, &bad[i], t[i], live.p, live.s1, live.s2, live.g, SMALL);
            if (rc != GA_E_OPTIM) fail_msg("%s: got %s, want GA_E_OPTIM", what[i], ga_status_name(rc));
            expect_unchanged(&live, &saved, what[i]);
        }
    }
}

static void invalid_arguments(void **state)
{
    (void)state;
    ga_exec ex = GA_EXEC_CPU_INIT;
    const ga_sgd_params sgd = {.lr = 0.1f, .momentum = 0.9f};
    const ga_adam_params adam = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    snapshot live, saved;
    make_state(&live, &saved);
    assert_int_equal(ga_sgd_step(NULL, &sgd, live.p, live.s1, live.g, SMALL), GA_E_INVAL);
    assert_int_equal(ga_sgd_step(&ex, NULL, live.p, live.s1, live.g, SMALL), GA_E_INVAL);
    assert_int_equal(ga_sgd_step(&ex, &sgd, NULL, live.s1, live.g, SMALL), GA_E_INVAL);
    assert_int_equal(ga_sgd_step(&ex, &sgd, live.p, NULL, live.g, SMALL), GA_E_INVAL);
    assert_int_equal(ga_sgd_step(&ex, &sgd, live.p, live.s1, NULL, SMALL), GA_E_INVAL);
    assert_int_equal(ga_adam_step(NULL, &adam, 1, live.p, live.s1, live.s2, live.g, SMALL), GA_E_INVAL);
    assert_int_equal(ga_adam_step(&ex, NULL, 1, live.p, live.s1, live.s2, live.g, SMALL), GA_E_INVAL);
    assert_int_equal(ga_adam_step(&ex, &adam, 1, NULL, live.s1, live.s2, live.g, SMALL), GA_E_INVAL);
    assert_int_equal(ga_adam_step(&ex, &adam, 1, live.p, NULL, live.s2, live.g, SMALL), GA_E_INVAL);
    assert_int_equal(ga_adam_step(&ex, &adam, 1, live.p, live.s1, NULL, live.g, SMALL), GA_E_INVAL);
    assert_int_equal(ga_adam_step(&ex, &adam, 1, live.p, live.s1, live.s2, NULL, SMALL), GA_E_INVAL);
    expect_unchanged(&live, &saved, "NULL arguments");
    /* Nothing to do: no vectors needed. */
    assert_int_equal(ga_sgd_step(&ex, &sgd, NULL, NULL, NULL, 0), GA_OK);
    assert_int_equal(ga_adam_step(&ex, &adam, 1, NULL, NULL, NULL, NULL, 0), GA_OK);
    /* n == 0 still checks the hyper-parameters. */
    const ga_sgd_params bad_sgd = {.lr = -1.0f};
    assert_int_equal(ga_sgd_step(&ex, &bad_sgd, NULL, NULL, NULL, 0), GA_E_OPTIM);
    assert_int_equal(ga_adam_step(&ex, &adam, 0, NULL, NULL, NULL, NULL, 0), GA_E_OPTIM);
}

static void backends(void **state)
{
    (void)state;
    const ga_sgd_params sgd = {.lr = 0.1f, .momentum = 0.9f};
    const ga_adam_params adam = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    snapshot live, saved;
    make_state(&live, &saved);
    ga_exec unknown = GA_EXEC_CPU_INIT;
    unknown.backend = (ga_backend)7;
    assert_int_equal(ga_sgd_step(&unknown, &sgd, live.p, live.s1, live.g, SMALL), GA_E_BACKEND);
    assert_int_equal(ga_adam_step(&unknown, &adam, 1, live.p, live.s1, live.s2, live.g, SMALL), GA_E_BACKEND);
    ga_status want = !ga_cuda_built() ? GA_E_NO_CUDA : GA_E_NO_DEVICE;
    if (ga_cuda_device_count() == 0) {
        ga_exec cuda = GA_EXEC_CUDA_INIT;
        assert_int_equal(ga_sgd_step(&cuda, &sgd, live.p, live.s1, live.g, SMALL), want);
        assert_int_equal(ga_adam_step(&cuda, &adam, 1, live.p, live.s1, live.s2, live.g, SMALL), want);
    }
    expect_unchanged(&live, &saved, "unusable backend");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sgd_plain),
        cmocka_unit_test(sgd_momentum),
        cmocka_unit_test(sgd_nesterov),
        cmocka_unit_test(sgd_weight_decay),
        cmocka_unit_test(sgd_momentum_weight_decay),
        cmocka_unit_test(sgd_nesterov_weight_decay),
        cmocka_unit_test(adam_plain),
        cmocka_unit_test(adam_l2),
        cmocka_unit_test(adamw),
        cmocka_unit_test(adam_unusual_betas),
        cmocka_unit_test(adamw_late_steps),
        cmocka_unit_test(sgd_invalid_hyper_parameters),
        cmocka_unit_test(adam_invalid_hyper_parameters),
        cmocka_unit_test(invalid_arguments),
        cmocka_unit_test(backends),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
