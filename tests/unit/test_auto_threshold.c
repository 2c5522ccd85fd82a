/* The automatic 2bit threshold: the entropy budget -> density solve, the options check, the
 * strided sample and the selection quantile against a sort, the estimator's achieved density on
 * Gaussian and Laplace data, and the SDK against the in-process fake server (fake_server.h):
 * add_tensor's checks, the threshold following a x10 gradient scale change, conservation of
 * what was pushed (the per-step threshold travels in each chunk), DGC on top, and a NaN
 * gradient that changes nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "auto_threshold.h"
#include "client_internal.h"
#include "fake_server.h"
#include "ga_alloc.h"
#include "gradagg.h"
#include "test_memory.h"

#define LOG2_3 1.5849625007211562

/* ---- seeded data ---- */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t x = (*s += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Uniform in (0, 1). */
static double uniform(uint64_t *s) { return ((double)(splitmix(s) >> 11) + 0.5) / 9007199254740992.0; }

static double gaussian(uint64_t *s) { return sqrt(-2.0 * log(uniform(s))) * cos(6.283185307179586 * uniform(s)); }

static double laplace(uint64_t *s)
{
    double u = uniform(s) - 0.5;
    return u < 0 ? log(1.0 + 2.0 * u) : -log(1.0 - 2.0 * u);
}

static void fill(float *x, size_t n, int kind, double scale, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) x[i] = (float)(scale * (kind ? laplace(&seed) : gaussian(&seed)));
}

/* ---- the pure core ---- */

static void density_solves_entropy(void **state)
{
    (void)state;
    assert_true(fabs(ga_auto_entropy(2.0 / 3.0) - LOG2_3) < 1e-12);
    assert_true(fabs(ga_auto_entropy(0.5) - 1.5) < 1e-12); /* 0.5*log2(4) + 0.5*log2(2) */
    double prev = 0.0;
    for (int k = 1; k <= 158; k++) {
        double bits = 0.01 * k;
        double rho = ga_auto_density_for_bits(bits);
        assert_true(rho > prev && rho <= 2.0 / 3.0);
        if (fabs(ga_auto_entropy(rho) - bits) > 1e-5) fail_msg("bits %g: rho %g has entropy %g", bits, rho, ga_auto_entropy(rho));
        prev = rho;
    }
    assert_true(fabs(ga_auto_density_for_bits(1.0) - 0.2270922) < 1e-6);
    assert_true(fabs(ga_auto_density_for_bits(1.5) - 0.5) < 1e-9);
    assert_true(ga_auto_density_for_bits(LOG2_3) == 2.0 / 3.0);
    assert_true(ga_auto_density_for_bits((double)(float)LOG2_3) < 2.0 / 3.0 + 1e-12);
    assert_true(ga_auto_density_for_bits(1e-4) > 0.0);
}

static void resolve_checks(void **state)
{
    (void)state;
    ga_auto_threshold in = {true, 0.0f, 0.0f, 0.0f, GA_AUTO_LEVEL_MEAN}, out = {0};
    char why[160];
    assert_int_equal(ga_auto_resolve(&in, &out, why, sizeof why), GA_OK);
    assert_true(out.enabled && out.bits == 1.5f && out.smoothing == 0.5f && out.sample_fraction == 0.01f);
    in = (ga_auto_threshold){true, (float)LOG2_3, 1.0f, 1.0f, GA_AUTO_LEVEL_MEAN};
    assert_int_equal(ga_auto_resolve(&in, &out, why, sizeof why), GA_OK);
    assert_true(out.bits == (float)LOG2_3);

    const ga_auto_level mean = GA_AUTO_LEVEL_MEAN;
    const ga_auto_threshold bad[] = {
        {true, -1.0f, 0.5f, 0.1f, mean},  {true, 1.6f, 0.5f, 0.1f, mean},  {true, NAN, 0.5f, 0.1f, mean},
        {true, 1.0f, 1.5f, 0.1f, mean},   {true, 1.0f, -0.5f, 0.1f, mean}, {true, 1.0f, NAN, 0.1f, mean},
        {true, 1.0f, 0.5f, 2.0f, mean},   {true, 1.0f, 0.5f, -0.1f, mean}, {true, 1.0f, 0.5f, 0.1f, (ga_auto_level)7},
    };
    const char *words[] = {"bits -1",         "bits 1.6",        "bits nan",
                           "smoothing 1.5",   "smoothing -0.5",  "smoothing nan",
                           "sample_fraction 2", "sample_fraction -0.1", "level 7"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        out = (ga_auto_threshold){0};
        assert_int_equal(ga_auto_resolve(&bad[i], &out, why, sizeof why), GA_E_INVAL);
        if (!strstr(why, words[i])) fail_msg("case %zu: '%s' lacks '%s'", i, why, words[i]);
        assert_false(out.enabled); /* written only on success */
    }
}

static void sample_plan_covers(void **state)
{
    (void)state;
    ga_auto_sample s = ga_auto_sample_plan(1000, 0.01f, 12345);
    assert_true(s.count == 1000 && s.stride == 1 && s.start == 0); /* small: all of it */
    s = ga_auto_sample_plan(100000, 0.01f, 7);
    assert_int_equal(s.count, 4096); /* never fewer than 4096 */
    assert_int_equal(s.stride, 24);
    s = ga_auto_sample_plan(1000000, 0.01f, 7);
    assert_int_equal(s.count, 10000);
    assert_int_equal(s.stride, 100);
    s = ga_auto_sample_plan(1000000, 1.0f, 7);
    assert_true(s.count == 1000000 && s.stride == 1 && s.start == 0);
    /* Every start stays in range, and the starts move with the seed. */
    bool seen[97] = {false};
    int distinct = 0;
    for (uint64_t seed = 0; seed < 2000; seed++) {
        s = ga_auto_sample_plan(97 * 4096 + 50, 0.001f, seed * 0x9E3779B97F4A7C15ull);
        assert_int_equal(s.stride, 97);
        assert_true(s.start < s.stride);
        assert_true(s.start + (s.count - 1) * s.stride < 97 * 4096 + 50);
        if (!seen[s.start]) distinct++;
        seen[s.start] = true;
    }
    assert_true(distinct > 80);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void quantile_matches_sort(void **state)
{
    (void)state;
    enum { M = 5003 };
    static float x[M], sorted[M];
    uint64_t seed = 99;
    for (int round = 0; round < 40; round++) {
        for (size_t i = 0; i < M; i++) {
            /* Many ties in some rounds: the partition must still find the order statistic. */
            double v = fabs(gaussian(&seed));
            x[i] = round % 3 == 0 ? (float)floor(v * 4.0) : (float)v;
        }
        memcpy(sorted, x, sizeof x);
        qsort(sorted, M, sizeof(float), cmp_float);
        double rho = 0.01 + 0.6 * (double)round / 40.0;
        size_t k = (size_t)floor((1.0 - rho) * M);
        float want = sorted[k];
        if (want == 0.0f) {
            for (size_t i = k; i < M && want == 0.0f; i++) want = sorted[i];
        }
        float got = ga_auto_quantile(x, M, rho);
        if (got != want) fail_msg("round %d rho %g: %g, sorted %g", round, rho, (double)got, (double)want);
    }
    float zeros[10] = {0};
    assert_true(ga_auto_quantile(zeros, 10, 0.2) == 0.0f);
    float sparse[10] = {0, 0, 0, 0, 0, 0, 0, 0, 3.0f, 2.0f}; /* 80% zero, rho 0.5 */
    assert_true(ga_auto_quantile(sparse, 10, 0.5) == 2.0f);
    float one = 4.0f;
    assert_true(ga_auto_quantile(&one, 1, 0.3) == 4.0f);
    assert_true(ga_auto_smooth(2.0f, 0, 10.0f, 0.5f) == 10.0f);
    assert_true(ga_auto_smooth(2.0f, 1, 10.0f, 0.5f) == 6.0f);
    assert_true(ga_auto_smooth(2.0f, 1, 10.0f, 1.0f) == 10.0f);
}

static double achieved_density(const float *x, size_t n, float t)
{
    size_t sent = 0;
    for (size_t i = 0; i < n; i++) sent += fabsf(x[i]) >= t;
    return (double)sent / (double)n;
}

static void estimator_hits_density(void **state)
{
    (void)state;
    enum { N = 1 << 20 };
    float *g = ga_malloc(N * sizeof(float)), *res = ga_calloc(N, sizeof(float));
    float *scratch = ga_malloc(N * sizeof(float));
    assert_true(g && res && scratch);
    const double bits[] = {0.5, 1.0, 1.5};
    for (int kind = 0; kind < 2; kind++) {
        for (int step = 0; step < 3; step++) {
            fill(g, N, kind, 0.01, 1000u + (uint64_t)kind * 7u + (uint64_t)step);
            for (size_t b = 0; b < 3; b++) {
                double rho = ga_auto_density_for_bits(bits[b]);
                ga_auto_sample plan = ga_auto_sample_plan(N, 0.01f, (uint64_t)step * 31u + b);
                float t = ga_auto_estimate(res, g, N, plan, rho, scratch);
                double got = achieved_density(g, N, t);
                if (fabs(got - rho) > 0.1 * rho)
                    fail_msg("%s bits %g: t %g sends %g, target %g", kind ? "laplace" : "gaussian", bits[b], (double)t,
                             got, rho);
            }
        }
    }
    /* The residual counts: residual + g is what is encoded. */
    fill(g, N, 0, 1.0, 5);
    fill(res, N, 0, 1.0, 6);
    static float sum[N];
    for (size_t i = 0; i < N; i++) sum[i] = res[i] + g[i];
    double rho = ga_auto_density_for_bits(1.0);
    float t = ga_auto_estimate(res, g, N, ga_auto_sample_plan(N, 0.05f, 3), rho, scratch);
    assert_true(fabs(achieved_density(sum, N, t) - rho) < 0.1 * rho);
    assert_true(fabs(achieved_density(g, N, t) - rho) > 0.2 * rho); /* it did look at the residual */
    ga_free(g);
    ga_free(res);
    ga_free(scratch);
}

/* ---- the SDK against the fake server ---- */

#define N_A 20000
#define N_S 300

static ga_client_options base_options(void)
{
    ga_client_options o = GA_CLIENT_OPTIONS_INIT;
    o.server = "fake";
    o.job = "job";
    o.chunk_bytes = 4096; /* several chunks per tensor */
    o.backoff_ms = 1;
    o.backoff_max_ms = 4;
    o.step_timeout_ms = 5000;
    o.threads = 1;
    return o;
}

static int setup(void **state)
{
    (void)state;
    fake_server_reset(1000, GA_CODEC_COUNT);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fake_server_clear();
    return 0;
}

static ga_client *open_client(void)
{
    ga_client_options o = base_options();
    ga_client *c = NULL;
    char msg[256];
    assert_int_equal(ga_client_create(&o, &c, msg, sizeof msg), GA_OK);
    return c;
}

static void add_tensor_checks(void **state)
{
    (void)state;
    ga_client *c = open_client();
    static float p[N_A];
    uint64_t shape[1] = {N_A};
    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    int index = 77;
    t.auto_threshold.enabled = true;
    t.codec = GA_CODEC_TOPK;
    assert_int_equal(ga_client_add_tensor(c, "a", shape, 1, p, &t, &index), GA_E_INVAL);
    assert_string_equal(ga_client_error(c), "add_tensor 'a': auto_threshold needs the 2bit codec, not topk");
    t.codec = GA_CODEC_1BIT;
    assert_int_equal(ga_client_add_tensor(c, "a", shape, 1, p, &t, &index), GA_E_INVAL);
    t.codec = GA_CODEC_2BIT;
    t.auto_threshold.bits = 1.7f;
    assert_int_equal(ga_client_add_tensor(c, "a", shape, 1, p, &t, &index), GA_E_INVAL);
    assert_string_equal(ga_client_error(c), "add_tensor 'a': auto_threshold bits 1.7 outside (0, log2(3) = 1.585]");
    t.auto_threshold.bits = 1.0f;
    t.auto_threshold.smoothing = 2.0f;
    assert_int_equal(ga_client_add_tensor(c, "a", shape, 1, p, &t, &index), GA_E_INVAL);
    assert_non_null(strstr(ga_client_error(c), "smoothing 2 outside (0, 1]"));
    t.auto_threshold.smoothing = 0.0f;
    t.auto_threshold.sample_fraction = 1.5f;
    assert_int_equal(ga_client_add_tensor(c, "a", shape, 1, p, &t, &index), GA_E_INVAL);
    assert_non_null(strstr(ga_client_error(c), "sample_fraction 1.5 outside (0, 1]"));
    assert_int_equal(index, 77);
    assert_int_equal(c->ntensors, 0);
    /* Disabled: the other fields are not looked at. */
    t.auto_threshold = (ga_auto_threshold){false, -5.0f, 9.0f, 9.0f, GA_AUTO_LEVEL_MEAN};
    assert_int_equal(ga_client_add_tensor(c, "fixed", shape, 1, p, &t, &index), GA_OK);
    t.auto_threshold = (ga_auto_threshold){true, 0.0f, 0.0f, 0.0f, GA_AUTO_LEVEL_MEAN};
    t.params.threshold = 0.25f;
    assert_int_equal(ga_client_add_tensor(c, "auto", shape, 1, p, &t, &index), GA_OK);
    t = (ga_tensor_options)GA_TENSOR_OPTIONS_INIT;
    assert_int_equal(ga_client_add_tensor(c, "dense", shape, 1, p, &t, &index), GA_OK);

    /* Before the first step: the starting threshold, no density. */
    float thr = -1.0f, dens = 0.0f;
    assert_int_equal(ga_client_tensor_threshold(c, 0, &thr, &dens), GA_OK);
    assert_true(thr == 0.5f && isnan(dens)); /* the 2bit default */
    assert_int_equal(ga_client_tensor_threshold(c, 1, &thr, NULL), GA_OK);
    assert_true(thr == 0.25f);
    thr = -1.0f;
    assert_int_equal(ga_client_tensor_threshold(c, 2, &thr, &dens), GA_E_INVAL); /* codec none */
    assert_int_equal(ga_client_tensor_threshold(c, 3, &thr, &dens), GA_E_INVAL);
    assert_int_equal(ga_client_tensor_threshold(c, -1, &thr, &dens), GA_E_INVAL);
    assert_int_equal(ga_client_tensor_threshold(c, 0, NULL, &dens), GA_E_INVAL);
    assert_int_equal(ga_client_tensor_threshold(NULL, 0, &thr, &dens), GA_E_INVAL);
    assert_true(thr == -1.0f);
    ga_client_destroy(c);
}

typedef struct run {
    ga_client *c;
    float *a, *s, *ga, *gs;
    double *sum_a; /* every gradient of tensor a pushed so far */
} run;

static void run_open(run *r, const ga_tensor_options *t)
{
    memset(r, 0, sizeof *r);
    r->c = open_client();
    r->a = ga_calloc(N_A, sizeof(float));
    r->s = ga_calloc(N_S, sizeof(float));
    r->ga = ga_malloc(N_A * sizeof(float));
    r->gs = ga_malloc(N_S * sizeof(float));
    r->sum_a = ga_calloc(N_A, sizeof(double));
    assert_true(r->a && r->s && r->ga && r->gs && r->sum_a);
    uint64_t sa[1] = {N_A}, ss[1] = {N_S};
    assert_int_equal(ga_client_add_tensor(r->c, "a", sa, 1, r->a, t, NULL), GA_OK);
    assert_int_equal(ga_client_add_tensor(r->c, "s", ss, 1, r->s, t, NULL), GA_OK);
    assert_int_equal(ga_client_init(r->c), GA_OK);
}

static ga_status run_step(run *r, double scale, uint64_t seed)
{
    fill(r->ga, N_A, 1, scale, seed);
    fill(r->gs, N_S, 0, scale, seed + 1);
    const float *g[2] = {r->ga, r->gs};
    ga_status st = ga_client_step(r->c, g);
    if (st == GA_OK)
        for (size_t i = 0; i < N_A; i++) r->sum_a[i] += (double)r->ga[i];
    return st;
}

static void run_close(run *r)
{
    ga_client_destroy(r->c);
    ga_free(r->a);
    ga_free(r->s);
    ga_free(r->ga);
    ga_free(r->gs);
    ga_free(r->sum_a);
}

/* Pushed (decoded with each chunk's own threshold) + residual = every gradient. */
static void expect_conserved(const run *r)
{
    static float pushed[N_A];
    assert_true(fake_server_pushed_sum("a", pushed, N_A));
    const float *res = r->c->tensors[0].residual;
    for (size_t i = 0; i < N_A; i++) {
        double got = (double)pushed[i] + (double)res[i];
        if (fabs(got - r->sum_a[i]) > 1e-4 * (1.0 + fabs(r->sum_a[i])))
            fail_msg("element %zu: pushed + residual %g, gradients %g", i, got, r->sum_a[i]);
    }
}

/* The mean level: the mean of the values at or above t, summed in double; t when there is none. */
static void level_mean_of_selected(void **state)
{
    (void)state;
    float x[] = {0.1f, 0.5f, 0.2f, 0.9f, 0.4f, 0.7f};
    assert_true(ga_auto_level_mean(x, 6, 0.4f) == (float)((0.5 + 0.9 + 0.4 + 0.7) / 4.0));
    assert_true(ga_auto_level_mean(x, 6, 0.9f) == 0.9f);
    assert_true(ga_auto_level_mean(x, 6, 1.0f) == 1.0f);
    assert_true(ga_auto_level_mean(x, 0, 0.3f) == 0.3f);
}

/* One step with the whole tensor sampled and smoothing 1: the elements at or above the sample's
 * quantile t are sent, as +-the mean of their |g| (GA_AUTO_LEVEL_MEAN) or as +-t
 * (GA_AUTO_LEVEL_THRESHOLD), and the residual keeps g minus what was sent. */
static void level_sent(void **state)
{
    (void)state;
    for (int mode = 0; mode < 2; mode++) {
        ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
        t.codec = GA_CODEC_2BIT;
        t.auto_threshold = (ga_auto_threshold){true, 1.0f, 1.0f, 1.0f, (ga_auto_level)mode};
        static run r;
        run_open(&r, &t);
        assert_int_equal(run_step(&r, 0.01, 900u + (uint64_t)mode), GA_OK);
        float thr = 0.0f;
        assert_int_equal(ga_client_tensor_threshold(r.c, 0, &thr, NULL), GA_OK);
        static float sorted[N_A], pushed[N_A];
        for (size_t i = 0; i < N_A; i++) sorted[i] = fabsf(r.ga[i]);
        assert_true(thr == ga_auto_quantile(sorted, N_A, ga_auto_density_for_bits(1.0)));
        double sum = 0.0;
        size_t count = 0;
        for (size_t i = 0; i < N_A; i++)
            if (fabsf(r.ga[i]) >= thr) sum += (double)fabsf(r.ga[i]), count++;
        float level = mode == GA_AUTO_LEVEL_MEAN ? (float)(sum / (double)count) : thr;
        assert_true(level > thr || mode == GA_AUTO_LEVEL_THRESHOLD);
        assert_true(fake_server_pushed_sum("a", pushed, N_A));
        const float *res = r.c->tensors[0].residual;
        for (size_t i = 0; i < N_A; i++) {
            float want = fabsf(r.ga[i]) >= thr ? copysignf(level, r.ga[i]) : 0.0f;
            if (pushed[i] != want || res[i] != r.ga[i] - want)
                fail_msg("level %d, element %zu: g %g sent %g (want %g), residual %g", mode, i, (double)r.ga[i],
                         (double)pushed[i], (double)want, (double)res[i]);
        }
        run_close(&r);
        fake_server_reset(1000, GA_CODEC_COUNT);
    }
}

static void follows_scale_change(void **state)
{
    (void)state;
    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    t.codec = GA_CODEC_2BIT;
    t.auto_threshold = (ga_auto_threshold){true, 1.0f, 0.5f, 0.0f, GA_AUTO_LEVEL_MEAN};
    static run r;
    run_open(&r, &t);
    const double rho = ga_auto_density_for_bits(1.0);
    float thr = 0.0f, dens = 0.0f, before = 0.0f;
    for (int s = 0; s < 8; s++) {
        assert_int_equal(run_step(&r, 0.01, 100u + (uint64_t)s), GA_OK);
        assert_int_equal(ga_client_tensor_threshold(r.c, 0, &thr, &dens), GA_OK);
        assert_true(thr > 0.0f && thr != 0.5f);
        if (s >= 4 && fabs(dens - rho) > 0.15 * rho) fail_msg("step %d: density %g, target %g", s, (double)dens, rho);
    }
    before = thr;
    for (int s = 8; s < 16; s++) assert_int_equal(run_step(&r, 0.1, 100u + (uint64_t)s), GA_OK);
    assert_int_equal(ga_client_tensor_threshold(r.c, 0, &thr, &dens), GA_OK);
    double ratio = (double)thr / (double)before;
    if (ratio < 8.5 || ratio > 11.5) fail_msg("threshold %g -> %g after x10: ratio %g", (double)before, (double)thr, ratio);
    if (fabs(dens - rho) > 0.15 * rho) fail_msg("density %g after the change, target %g", (double)dens, rho);
    /* The small tensor (all of it sampled) adapts too. */
    float ts = 0.0f;
    assert_int_equal(ga_client_tensor_threshold(r.c, 1, &ts, NULL), GA_OK);
    assert_true(ts > 0.02f && ts < 0.5f);
    expect_conserved(&r);
    run_close(&r);
}

static void with_dgc(void **state)
{
    (void)state;
    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    t.codec = GA_CODEC_2BIT;
    t.auto_threshold = (ga_auto_threshold){true, 0.5f, 1.0f, 0.05f, GA_AUTO_LEVEL_MEAN};
    t.dgc = (ga_dgc_options){true, 0.9f, false, true, 0.0f, 0};
    static run r;
    run_open(&r, &t);
    const double rho = ga_auto_density_for_bits(0.5);
    float thr, dens = 0.0f;
    for (int s = 0; s < 6; s++) {
        assert_int_equal(run_step(&r, 0.01, 500u + (uint64_t)s), GA_OK);
        assert_int_equal(ga_client_tensor_threshold(r.c, 0, &thr, &dens), GA_OK);
        /* smoothing 1: this step's sample of |v + u| alone sets the threshold */
        if (fabs(dens - rho) > 0.15 * rho) fail_msg("step %d: density %g, target %g", s, (double)dens, rho);
    }
    run_close(&r);
}

static void nonfinite_changes_nothing(void **state)
{
    (void)state;
    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    t.codec = GA_CODEC_2BIT;
    t.auto_threshold.enabled = true;
    static run r;
    run_open(&r, &t);
    assert_int_equal(run_step(&r, 0.01, 1), GA_OK);
    assert_int_equal(run_step(&r, 0.01, 2), GA_OK);
    float thr0, dens0, thr1, dens1;
    assert_int_equal(ga_client_tensor_threshold(r.c, 0, &thr0, &dens0), GA_OK);
    static float res[N_A];
    memcpy(res, r.c->tensors[0].residual, sizeof res);
    fill(r.ga, N_A, 0, 100.0, 3); /* a very different sample, then a NaN in the second tensor */
    fill(r.gs, N_S, 0, 1.0, 4);
    r.gs[N_S - 1] = NAN;
    const float *g[2] = {r.ga, r.gs};
    assert_int_equal(ga_client_step(r.c, g), GA_E_NONFINITE);
    assert_int_equal(ga_client_tensor_threshold(r.c, 0, &thr1, &dens1), GA_OK);
    assert_true(thr0 == thr1 && dens0 == dens1);
    assert_memory_equal(res, r.c->tensors[0].residual, sizeof res);
    run_close(&r);

    /* All-zero gradients and residual: no estimate, the codec params' threshold stays. */

    fake_server_reset(1000, GA_CODEC_COUNT);
    t.params.threshold = 0.125f;
    run_open(&r, &t);
    memset(r.ga, 0, N_A * sizeof(float));
    memset(r.gs, 0, N_S * sizeof(float));
    const float *zero[2] = {r.ga, r.gs};
    assert_int_equal(ga_client_step(r.c, zero), GA_OK);
    assert_int_equal(ga_client_tensor_threshold(r.c, 0, &thr1, &dens1), GA_OK);
    assert_true(thr1 == 0.125f && dens1 == 0.0f);
    run_close(&r);
}

int main(void)
{
    test_memory_baseline();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(density_solves_entropy),
        cmocka_unit_test(resolve_checks),
        cmocka_unit_test(sample_plan_covers),
        cmocka_unit_test(quantile_matches_sort),
        cmocka_unit_test(estimator_hits_density),
        cmocka_unit_test_setup_teardown(add_tensor_checks, setup, teardown),
        cmocka_unit_test(level_mean_of_selected),
        cmocka_unit_test_setup_teardown(level_sent, setup, teardown),
        cmocka_unit_test_setup_teardown(follows_scale_change, setup, teardown),
        cmocka_unit_test_setup_teardown(with_dgc, setup, teardown),
        cmocka_unit_test_setup_teardown(nonfinite_changes_nothing, setup, teardown),
        cmocka_unit_test(test_host_memory_returned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
