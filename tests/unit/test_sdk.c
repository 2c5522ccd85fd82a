/* The SDK against an in-process fake server (fake_server.h) with injected faults: option and
 * tensor validation with exact statuses and messages, join retries, pushes counted once across
 * retries and lost acknowledgements, late pushes folded into the residual (nothing lost),
 * refused pushes, broken pulls (fp32 and delta), delta pulls bit-exact, W workers in threads
 * holding identical parameters. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "client_internal.h"
#include "fake_server.h"
#include "ga_alloc.h"
#include "gradagg.h"
#include "test_memory.h"

#define N_W 3000 /* crosses chunks of 1024 elements */
#define N_B 10

static ga_client_options base_options(uint32_t rank, uint32_t world)
{
    ga_client_options o = GA_CLIENT_OPTIONS_INIT;
    o.server = "fake";
    o.job = "job";
    o.rank = rank;
    o.world_size = world;
    o.chunk_bytes = 4096;
    o.backoff_ms = 1;
    o.backoff_max_ms = 4;
    o.max_retries = 3;
    o.step_timeout_ms = 5000;
    o.threads = 1;
    return o;
}

static float grad_value(uint32_t rank, int step, size_t i)
{
    return (float)((int)((i * 7 + (size_t)step * 13 + rank * 5) % 23) - 11) * 0.037f;
}

/* A worker: two tensors, W (N_W) and b (N_B), starting from given values. */
typedef struct worker {
    ga_client *c;
    float w[N_W], b[N_B];
    float gw[N_W], gb[N_B];
    uint32_t rank;
} worker;

static void worker_open(worker *wk, const ga_client_options *o, ga_codec_id codec, float threshold)
{
    memset(wk, 0, sizeof *wk);
    wk->rank = o->rank;
    for (size_t i = 0; i < N_W; i++) wk->w[i] = (float)i * 0.001f;
    for (size_t i = 0; i < N_B; i++) wk->b[i] = 1.0f;
    char msg[256];
    assert_int_equal(ga_client_create(o, &wk->c, msg, sizeof msg), GA_OK);
    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    t.codec = codec;
    if (threshold > 0.0f) t.params.threshold = threshold;
    uint64_t sw[2] = {30, 100}, sb[1] = {N_B};
    int index = -1;
    assert_int_equal(ga_client_add_tensor(wk->c, "w", sw, 2, wk->w, &t, &index), GA_OK);
    assert_int_equal(index, 0);
    assert_int_equal(ga_client_add_tensor(wk->c, "b", sb, 1, wk->b, &t, &index), GA_OK);
    assert_int_equal(index, 1);
    assert_int_equal(ga_client_init(wk->c), GA_OK);
}

static ga_status worker_step(worker *wk, int step)
{
    for (size_t i = 0; i < N_W; i++) wk->gw[i] = grad_value(wk->rank, step, i);
    for (size_t i = 0; i < N_B; i++) wk->gb[i] = grad_value(wk->rank, step, i + 5);
    const float *g[2] = {wk->gw, wk->gb};
    return ga_client_step(wk->c, g);
}

static void expect_server_params(const worker *wk)
{
    static float s[N_W];
    assert_true(fake_server_params("w", s, N_W));
    assert_memory_equal(s, wk->w, sizeof wk->w);
    assert_true(fake_server_params("b", s, N_B));
    assert_memory_equal(s, wk->b, sizeof wk->b);
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

/* ---- options and tensors ---- */

static void expect_create_fails(const ga_client_options *o, ga_status want, const char *text)
{
    ga_client *c = (ga_client *)(uintptr_t)1;
    char msg[256];
    assert_int_equal(ga_client_create(o, &c, msg, sizeof msg), want);
    assert_null(c);
    if (!strstr(msg, text)) fail_msg("message '%s' lacks '%s'", msg, text);
}

static void options_rejected(void **state)
{
    (void)state;
    ga_client_options o = base_options(0, 4);
    o.version = 3;
    expect_create_fails(&o, GA_E_INVAL, "GA_CLIENT_OPTIONS_INIT");
    o = base_options(0, 4);
    o.server = "";
    expect_create_fails(&o, GA_E_INVAL, "server");
    o = base_options(4, 4);
    expect_create_fails(&o, GA_E_CONFIG, "rank 4 outside [0, world_size 4)");
    o = base_options(0, 0);
    expect_create_fails(&o, GA_E_CONFIG, "world_size");
    o = base_options(0, 4);
    o.optimizer = GA_SERVER_OPTIM_SGD;
    o.sgd.lr = -1.0f;
    expect_create_fails(&o, GA_E_CONFIG, "sgd lr -1");
    o = base_options(0, 4);
    o.optimizer = GA_SERVER_OPTIM_ADAM;
    o.adam.beta1 = 1.0f;
    expect_create_fails(&o, GA_E_CONFIG, "adam");
    o = base_options(0, 4);
    o.chunk_bytes = 100;
    expect_create_fails(&o, GA_E_CONFIG, "chunk_bytes 100");
    o = base_options(0, 4);
    o.pull_codec = GA_CODEC_2BIT;
    o.pull_params.threshold = -1.0f;
    expect_create_fails(&o, GA_E_CONFIG, "pull codec 2bit");
    o = base_options(0, 4);
    o.backoff_ms = 100;
    o.backoff_max_ms = 10;
    expect_create_fails(&o, GA_E_CONFIG, "backoff_max_ms 10");
    o = base_options(0, 4);
    o.quorum = 5;
    expect_create_fails(&o, GA_E_CONFIG, "quorum 5");
    assert_int_equal(ga_client_create(NULL, NULL, NULL, 0), GA_E_INVAL);
    ga_client_destroy(NULL);
}

/* Two joins answered with the fault `*count` names are sent again (2 retries counted); ten
 * exhaust max_retries 2 and create fails with `want` and the server's words. */
static void join_retried(fake_faults *f, int *count, ga_status want, const char *words)
{
    ga_client_options o = base_options(0, 1);
    ga_client *c = NULL;
    char msg[256];
    *count = 2;
    fake_server_set_faults(f);
    assert_int_equal(ga_client_create(&o, &c, msg, sizeof msg), GA_OK);
    ga_client_stats s;
    ga_client_get_stats(c, &s);
    assert_int_equal(s.retries, 2);
    ga_client_destroy(c);
    *count = 10;
    fake_server_set_faults(f);
    o.max_retries = 2;
    assert_int_equal(ga_client_create(&o, &c, msg, sizeof msg), want);
    assert_null(c);
    assert_string_equal(msg, words);
    *count = 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* With max_retries unbounded (the default), the retry budget alone ends the retries: a server
 * that never answers fails the create once retry_budget_ms passed, not before, and not much
 * later (one backoff). */
static void retries_end_with_the_budget(void **state)
{
    (void)state;
    fake_faults f = {.late_rank = -1, .join_unavailable = 1 << 30};
    fake_server_set_faults(&f);
    ga_client_options o = base_options(0, 1);
    o.max_retries = GA_RETRIES_UNBOUNDED;
    o.backoff_ms = 5, o.backoff_max_ms = 20, o.retry_budget_ms = 400;
    ga_client *c = NULL;
    char msg[256];
    double t0 = now_s();
    assert_int_equal(ga_client_create(&o, &c, msg, sizeof msg), GA_E_UNAVAILABLE);
    double took = now_s() - t0;
    assert_null(c);
    assert_string_equal(msg, "join job 'job' rank 0 at fake: E_UNAVAILABLE: fake: join refused");
    if (took < 0.4 || took > 5.0) fail_msg("create failed after %.3f s with a 0.4 s retry budget", took);
    /* The budget counts from the first failure: a server that comes back within it is used. */
    f.join_unavailable = 30; /* 30 refusals at most 20 ms apart: < 0.6 s, within a 5 s budget */
    fake_server_set_faults(&f);
    o.retry_budget_ms = 5000;
    assert_int_equal(ga_client_create(&o, &c, msg, sizeof msg), GA_OK);
    ga_client_stats st;
    ga_client_get_stats(c, &st);
    assert_int_equal(st.retries, 30);
    ga_client_destroy(c);
    f.join_unavailable = 0;
    fake_server_set_faults(&f);
}

static void join_retries_unavailable_and_deadline(void **state)
{
    (void)state;
    fake_faults f = {.late_rank = -1};
    join_retried(&f, &f.join_unavailable, GA_E_UNAVAILABLE,
                 "join job 'job' rank 0 at fake: E_UNAVAILABLE: fake: join refused");
    /* A Join past its call timeout is sent again (it is idempotent), within max_retries. */
    join_retried(&f, &f.join_deadline, GA_E_DEADLINE, "join job 'job' rank 0 at fake: E_DEADLINE: fake: join timed out");

    /* A second rank with another configuration: the server's status and words. */
    f = (fake_faults){.late_rank = -1};
    fake_server_set_faults(&f);
    ga_client_options o = base_options(0, 1);
    ga_client *c = NULL;
    char msg[256];
    assert_int_equal(ga_client_create(&o, &c, msg, sizeof msg), GA_OK);
    ga_client_options other = base_options(1, 2);
    ga_client *c2 = NULL;
    assert_int_equal(ga_client_create(&other, &c2, msg, sizeof msg), GA_E_JOB_CONFIG);
    assert_string_equal(msg, "join job 'job' rank 1 at fake: E_JOB_CONFIG: job 'job' exists with world_size 1");
    ga_client_destroy(c);
}

static void tensors_rejected(void **state)
{
    (void)state;
    ga_client_options o = base_options(0, 1);
    ga_client *c = NULL;
    char msg[256];
    assert_int_equal(ga_client_create(&o, &c, msg, sizeof msg), GA_OK);
    float p[64] = {0};
    uint64_t shape[2] = {8, 8}, zero[2] = {8, 0};
    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    int index = 77;
    assert_int_equal(ga_client_init(c), GA_E_INVAL); /* no tensors */
    assert_int_equal(ga_client_add_tensor(c, "", shape, 2, p, &t, &index), GA_E_INVAL);
    assert_int_equal(ga_client_add_tensor(c, "p", zero, 2, p, &t, &index), GA_E_INVAL);
    assert_string_equal(ga_client_error(c), "add_tensor 'p': dimension 1 is 0");
    assert_int_equal(ga_client_add_tensor(c, "p", shape, 2, NULL, &t, &index), GA_E_INVAL);
    t.codec = GA_CODEC_2BIT;
    t.params.threshold = -1.0f;
    assert_int_equal(ga_client_add_tensor(c, "p", shape, 2, p, &t, &index), GA_E_THRESHOLD);
    t = (ga_tensor_options)GA_TENSOR_OPTIONS_INIT;
    t.dgc.enabled = true;
    t.codec = GA_CODEC_TOPK;
    t.dgc.momentum = 1.0f;
    assert_int_equal(ga_client_add_tensor(c, "p", shape, 2, p, &t, &index), GA_E_CONFIG);
    assert_int_equal(index, 77); /* out-parameter untouched on error */
    t.dgc.momentum = 0.9f;
    assert_int_equal(ga_client_add_tensor(c, "p", shape, 2, p, &t, &index), GA_OK);
    assert_int_equal(index, 0);
    assert_int_equal(ga_client_add_tensor(c, "p", shape, 2, p, &t, &index), GA_E_INVAL);
    assert_int_equal(ga_client_step(c, (const float *const[]){p}), GA_E_INVAL); /* before init */
    assert_int_equal(ga_client_init(c), GA_OK);
    assert_int_equal(ga_client_add_tensor(c, "q", shape, 2, p, &t, &index), GA_E_INVAL);
    assert_int_equal(ga_client_init(c), GA_E_INVAL);
    assert_int_equal(ga_client_step(c, (const float *const[]){NULL}), GA_E_INVAL);
    ga_client_destroy(c);
}

/* ---- steps ---- */

/* none, sum, no optimizer: params = init + grads, exactly; two tensors, several chunks. */
static void step_dense_exact(void **state)
{
    (void)state;
    ga_client_options o = base_options(0, 1);
    static worker wk;
    worker_open(&wk, &o, GA_CODEC_NONE, 0.0f);
    float want[N_W];
    memcpy(want, wk.w, sizeof want);
    for (int s = 0; s < 3; s++) {
        assert_int_equal(worker_step(&wk, s), GA_OK);
        for (size_t i = 0; i < N_W; i++) want[i] = want[i] + grad_value(0, s, i);
        assert_memory_equal(wk.w, want, sizeof want);
        assert_int_equal(ga_client_version(wk.c), (uint64_t)s + 1);
    }
    ga_client_stats st;
    ga_client_get_stats(wk.c, &st);
    assert_int_equal(st.bytes_pushed, (N_W + N_B) * 4);
    assert_int_equal(st.bytes_pulled, (N_W + N_B) * 4);
    assert_int_equal(st.steps, 3);
    assert_string_equal(ga_client_error(wk.c), "");
    expect_server_params(&wk);
    ga_client_destroy(wk.c);
}

/* 2bit: what the server received plus the residual is every gradient pushed. */
static void expect_conserved(const worker *wk, int steps)
{
    static float pushed[N_W];
    assert_true(fake_server_pushed_sum("w", pushed, N_W));
    const float *res = wk->c->tensors[0].residual ? wk->c->tensors[0].residual : wk->c->tensors[0].late;
    for (size_t i = 0; i < N_W; i++) {
        double want = 0.0;
        for (int s = 0; s < steps; s++) want += grad_value(wk->rank, s, i);
        double got = (double)pushed[i] + (res ? (double)res[i] : 0.0);
        if (fabs(got - want) > 1e-5) fail_msg("element %zu: pushed + residual %g, gradients %g", i, got, want);
    }
}

static void step_2bit_conserves(void **state)
{
    (void)state;
    ga_client_options o = base_options(0, 1);
    static worker wk;
    worker_open(&wk, &o, GA_CODEC_2BIT, 0.1f);
    for (int s = 0; s < 5; s++) assert_int_equal(worker_step(&wk, s), GA_OK);
    expect_conserved(&wk, 5);
    ga_client_stats st;
    ga_client_get_stats(wk.c, &st);
    assert_int_equal(st.bytes_pushed, 4 * (64 * 2 + 60 + 1)); /* ceil(1024/16)*4 bytes a full chunk */
    expect_server_params(&wk);
    ga_client_destroy(wk.c);
}

static void push_retried_counted_once(void **state)
{
    (void)state;
    ga_client_options o = base_options(0, 1);
    static worker wk;
    worker_open(&wk, &o, GA_CODEC_2BIT, 0.1f);
    fake_faults f = {.push_unavailable = 2, .late_rank = -1};
    fake_server_set_faults(&f);
    assert_int_equal(worker_step(&wk, 0), GA_OK);
    f = (fake_faults){.push_ack_lost = 1, .late_rank = -1};
    fake_server_set_faults(&f);
    assert_int_equal(worker_step(&wk, 1), GA_OK);
    fake_counters k = fake_server_counters();
    assert_int_equal(k.commits, 2);
    assert_int_equal(k.duplicates, 1); /* the retry after the lost ack */
    ga_client_stats st;
    ga_client_get_stats(wk.c, &st);
    assert_int_equal(st.retries, 3);
    expect_conserved(&wk, 2); /* nothing counted twice, nothing lost */
    expect_server_params(&wk);
    ga_client_destroy(wk.c);
}

static void push_retries_exhausted(void **state)
{
    (void)state;
    ga_client_options o = base_options(0, 1);
    o.max_retries = 1;
    static worker wk;
    worker_open(&wk, &o, GA_CODEC_2BIT, 0.1f);
    fake_faults f = {.push_unavailable = 5, .late_rank = -1};
    fake_server_set_faults(&f);
    assert_int_equal(worker_step(&wk, 0), GA_E_UNAVAILABLE);
    assert_string_equal(ga_client_error(wk.c), "push step 0: E_UNAVAILABLE: fake: push refused");
    ga_client_destroy(wk.c);
}

/* A straggler's push: GA_OK, counted as late, folded back, delivered with the next step. */
static void late_push_folded(ga_codec_id codec)
{
    fake_server_reset(1000, GA_CODEC_COUNT);
    ga_client_options o = base_options(0, 1);
    static worker wk;
    worker_open(&wk, &o, codec, 0.1f);
    assert_int_equal(worker_step(&wk, 0), GA_OK);
    fake_faults f = {.late_rank = 0};
    fake_server_set_faults(&f);
    assert_int_equal(worker_step(&wk, 1), GA_OK);
    ga_client_stats st;
    ga_client_get_stats(wk.c, &st);
    assert_int_equal(st.late_pushes, 1);
    assert_int_equal(ga_client_version(wk.c), 2); /* the pull still brought the new version */
    expect_conserved(&wk, 2);
    f.late_rank = -1;
    fake_server_set_faults(&f);
    assert_int_equal(worker_step(&wk, 2), GA_OK);
    expect_conserved(&wk, 3);
    assert_int_equal(fake_server_counters().late, 1);
    expect_server_params(&wk);
    ga_client_destroy(wk.c);
}

static void late_push_2bit(void **state)
{
    (void)state;
    late_push_folded(GA_CODEC_2BIT);
}

static void late_push_dense(void **state)
{
    (void)state;
    late_push_folded(GA_CODEC_NONE);
}

/* A push of a step the server has not opened (it came back at an older checkpoint): the worker
 * moves back to the server's open step, pushes the same payloads there, pulls in full, and
 * counts the versions it moved back over; every gradient is still pushed or in the residual. */
static void server_behind_moves_back(void **state)
{
    (void)state;
    ga_client_options o = base_options(0, 1);
    static worker wk;
    worker_open(&wk, &o, GA_CODEC_2BIT, 0.1f);
    assert_int_equal(worker_step(&wk, 0), GA_OK);
    wk.c->shards[0].step = 4; /* as if the server had lost steps */
    assert_int_equal(worker_step(&wk, 1), GA_OK);
    ga_client_stats st;
    ga_client_get_stats(wk.c, &st);
    assert_int_equal(st.versions_lost, 3);
    assert_int_equal(ga_client_version(wk.c), 2);
    expect_conserved(&wk, 2);
    expect_server_params(&wk);
    ga_client_destroy(wk.c);
}

static void nonfinite_refused_first(void **state)
{
    (void)state;
    ga_client_options o = base_options(0, 1);
    static worker wk;
    worker_open(&wk, &o, GA_CODEC_2BIT, 0.1f);
    assert_int_equal(worker_step(&wk, 0), GA_OK);
    static float before[N_W];
    memcpy(before, wk.c->tensors[0].residual, sizeof before);
    for (size_t i = 0; i < N_W; i++) wk.gw[i] = 0.5f;
    wk.gb[3] = NAN; /* the second tensor: the first must not have moved */
    const float *g[2] = {wk.gw, wk.gb};
    assert_int_equal(ga_client_step(wk.c, g), GA_E_NONFINITE);
    assert_string_equal(ga_client_error(wk.c), "push step 1: gradient of tensor 'b' holds NaN or Inf");
    assert_memory_equal(before, wk.c->tensors[0].residual, sizeof before);
    assert_int_equal(fake_server_counters().commits, 1);
    ga_client_destroy(wk.c);
}

/* fp32 pull broken after a chunk was written: the retry may not ask for a delta. */
static void pull_broken_full(void **state)
{
    (void)state;
    ga_client_options o = base_options(0, 1);
    static worker wk;
    worker_open(&wk, &o, GA_CODEC_NONE, 0.0f);
    fake_counters k0 = fake_server_counters();
    fake_faults f = {.pull_break = 1, .late_rank = -1};
    fake_server_set_faults(&f);
    assert_int_equal(worker_step(&wk, 0), GA_OK);
    fake_counters k = fake_server_counters();
    assert_int_equal(k.pulls - k0.pulls, 2);
    assert_int_equal(k.pulls_with_version - k0.pulls_with_version, 1); /* the first ask only */
    expect_server_params(&wk);
    ga_client_destroy(wk.c);
}

/* Delta pulls: workers hold the server's published copy bit for bit; a broken delta pull
 * applies nothing and the retry still takes a delta. */
static void pull_deltas(void **state)
{
    (void)state;
    fake_server_reset(1000, GA_CODEC_2BIT);
    ga_client_options o = base_options(0, 1);
    static worker wk;
    worker_open(&wk, &o, GA_CODEC_NONE, 0.0f);
    for (int s = 0; s < 3; s++) {
        if (s == 2) {
            fake_faults f = {.pull_break = 1, .late_rank = -1};
            fake_server_set_faults(&f);
        }
        assert_int_equal(worker_step(&wk, s), GA_OK);
        expect_server_params(&wk);
    }
    fake_counters k = fake_server_counters();
    assert_true(k.delta_chunks >= 3 * 4);
    assert_int_equal(k.pulls_with_version, 4); /* every pull after init, the retry too */
    ga_client_destroy(wk.c);
}

/* ---- W workers in threads ---- */

#define W 3
static worker workers[W];
static ga_status thread_status[W];

static void *run_worker(void *arg)
{
    worker *wk = arg;
    thread_status[wk->rank] = GA_OK;
    for (int s = 0; s < 6 && thread_status[wk->rank] == GA_OK; s++) thread_status[wk->rank] = worker_step(wk, s);
    return NULL;
}

static void threads_identical(ga_codec_id pull_codec)
{
    fake_server_reset(700, pull_codec);
    for (uint32_t r = 0; r < W; r++) {
        ga_client_options o = base_options(r, W);
        o.mean = true;
        o.optimizer = GA_SERVER_OPTIM_SGD;
        o.sgd.lr = 0.5f;
        worker_open(&workers[r], &o, GA_CODEC_2BIT, 0.05f);
    }
    pthread_t th[W];
    for (int r = 0; r < W; r++) assert_int_equal(pthread_create(&th[r], NULL, run_worker, &workers[r]), 0);
    for (int r = 0; r < W; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < W; r++) {
        assert_int_equal(thread_status[r], GA_OK);
        assert_int_equal(ga_client_version(workers[r].c), 6);
        assert_memory_equal(workers[r].w, workers[0].w, sizeof workers[0].w);
        assert_memory_equal(workers[r].b, workers[0].b, sizeof workers[0].b);
    }
    expect_server_params(&workers[0]);
    for (int r = 0; r < W; r++) ga_client_destroy(workers[r].c);
}

static void threads_fp32(void **state)
{
    (void)state;
    threads_identical(GA_CODEC_COUNT);
}

static void threads_delta(void **state)
{
    (void)state;
    threads_identical(GA_CODEC_FP16);
}

int main(void)
{
    test_memory_baseline();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(options_rejected, setup, teardown),
        cmocka_unit_test_setup_teardown(join_retries_unavailable_and_deadline, setup, teardown),
        cmocka_unit_test_setup_teardown(retries_end_with_the_budget, setup, teardown),
        cmocka_unit_test_setup_teardown(tensors_rejected, setup, teardown),
        cmocka_unit_test_setup_teardown(step_dense_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(step_2bit_conserves, setup, teardown),
        cmocka_unit_test_setup_teardown(push_retried_counted_once, setup, teardown),
        cmocka_unit_test_setup_teardown(push_retries_exhausted, setup, teardown),
        cmocka_unit_test_setup_teardown(late_push_2bit, setup, teardown),
        cmocka_unit_test_setup_teardown(late_push_dense, setup, teardown),
        cmocka_unit_test_setup_teardown(server_behind_moves_back, setup, teardown),
        cmocka_unit_test_setup_teardown(nonfinite_refused_first, setup, teardown),
        cmocka_unit_test_setup_teardown(pull_broken_full, setup, teardown),
        cmocka_unit_test_setup_teardown(pull_deltas, setup, teardown),
        cmocka_unit_test_setup_teardown(threads_fp32, setup, teardown),
        cmocka_unit_test_setup_teardown(threads_delta, setup, teardown),
        cmocka_unit_test(test_host_memory_returned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
