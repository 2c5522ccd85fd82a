/* libgradagg end to end: the SDK against the real server (in-process, gRPC on 127.0.0.1:0).
 * W workers in threads hold bit-identical parameters (fp32 and delta pulls, heterogeneous
 * codecs), a dense job matches a local rank-order oracle bit for bit, a straggler's push is
 * folded back into its residual and counted late, a resent push is acknowledged as a duplicate
 * and counted once, a Join before the server is up is retried until it is, and errors carry the
 * server's exact statuses and words. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_dirs.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client_internal.h"
#include "ga_alloc.h"
#include "ga_wire.h"
#include "gradagg.h"
#include "rpc_client.h"
#include "server/server.h"
#include "test_inproc_server.h"
#include "test_memory.h"

#define MAX_W 4
#define BIG 200000 /* several chunks at chunk_bytes 64 KiB */
#define SMALL 37

static char data_dir[64];
static ga_server *server;
static char address[64];

static int start_server(void **state)
{
    (void)state;
    ga_config cfg;
    ga_test_config_defaults(&cfg);
    cfg.admin_listen[0] = '\0'; /* no admin port: tests run in parallel */
    snprintf(cfg.listen, sizeof cfg.listen, "127.0.0.1:0");
    ga_test_fresh_dir(cfg.data_dir, sizeof cfg.data_dir, data_dir);
    cfg.log_level = GA_LOG_WARN;
    if (ga_server_start(&cfg, &server) != GA_OK) return -1;
    snprintf(address, sizeof address, "127.0.0.1:%d", ga_server_port(server));
    return 0;
}

static int stop_server(void **state)
{
    (void)state;
    ga_server_destroy(server);
    server = NULL;
    return 0;
}

static ga_client_options options(const char *job, uint32_t rank, uint32_t world)
{
    ga_client_options o = GA_CLIENT_OPTIONS_INIT;
    o.server = address;
    o.job = job;
    o.rank = rank;
    o.world_size = world;
    o.mean = true;
    o.optimizer = GA_SERVER_OPTIM_SGD;
    o.sgd.lr = 0.5f;
    o.chunk_bytes = 64 << 10;
    o.call_timeout_ms = 10000;
    o.step_timeout_ms = 20000;
    o.backoff_ms = 5;
    o.backoff_max_ms = 50;
    o.threads = 1;
    return o;
}

static float grad_value(uint32_t rank, int step, size_t i)
{
    uint64_t x = (uint64_t)i * 2654435761u + (uint64_t)step * 40503u + rank * 97u;
    return (float)((int)(x % 2001) - 1000) * 1e-4f;
}

typedef struct worker {
    ga_client *c;
    uint32_t rank;
    float *big, *small;   /* parameters */
    float *gbig, *gsmall; /* gradients */
    int first, steps;     /* run_worker's steps: [first, first + steps) */
    ga_status st;
} worker;

static void worker_open(worker *wk, const ga_client_options *o, const ga_tensor_options *t)
{
    memset(wk, 0, sizeof *wk);
    wk->rank = o->rank;
    wk->big = ga_malloc(BIG * sizeof(float));
    wk->gbig = ga_malloc(BIG * sizeof(float));
    wk->small = ga_malloc(SMALL * sizeof(float));
    wk->gsmall = ga_malloc(SMALL * sizeof(float));
    assert_true(wk->big && wk->gbig && wk->small && wk->gsmall);
    /* Every rank starts from different values: rank 0's init sets them, the pull overwrites. */
    for (size_t i = 0; i < BIG; i++) wk->big[i] = (float)(i % 101) * 0.01f + (float)o->rank;
    for (size_t i = 0; i < SMALL; i++) wk->small[i] = 1.0f + (float)o->rank;
    char msg[512];
    ga_status st = ga_client_create(o, &wk->c, msg, sizeof msg);
    if (st != GA_OK) fail_msg("create rank %u: %s", o->rank, msg);
    uint64_t sb[2] = {400, 500}, ss[1] = {SMALL};
    assert_int_equal(ga_client_add_tensor(wk->c, "big", sb, 2, wk->big, t, NULL), GA_OK);
    assert_int_equal(ga_client_add_tensor(wk->c, "small", ss, 1, wk->small, t, NULL), GA_OK);
}

static void worker_close(worker *wk)
{
    ga_client_destroy(wk->c);
    ga_free(wk->big);
    ga_free(wk->gbig);
    ga_free(wk->small);
    ga_free(wk->gsmall);
}

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void fill_grads(worker *wk, int step)
{
    for (size_t i = 0; i < BIG; i++) wk->gbig[i] = grad_value(wk->rank, step, i);
    for (size_t i = 0; i < SMALL; i++) wk->gsmall[i] = grad_value(wk->rank, step, i + 7);
}

static ga_status worker_step(worker *wk, int step)
{
    fill_grads(wk, step);
    const float *g[2] = {wk->gbig, wk->gsmall};
    return ga_client_step(wk->c, g);
}

static void *run_worker(void *arg)
{
    worker *wk = arg;
    wk->st = wk->c->inited ? GA_OK : ga_client_init(wk->c);
    for (int s = wk->first; s < wk->first + wk->steps && wk->st == GA_OK; s++) wk->st = worker_step(wk, s);
    if (wk->st != GA_OK) fprintf(stderr, "rank %u: %s\n", wk->rank, ga_client_error(wk->c));
    return NULL;
}

static void run_all(worker *w, uint32_t n, int first, int steps)
{
    pthread_t th[MAX_W];
    for (uint32_t r = 0; r < n; r++) {
        w[r].first = first;
        w[r].steps = steps;
        assert_int_equal(pthread_create(&th[r], NULL, run_worker, &w[r]), 0);
    }
    for (uint32_t r = 0; r < n; r++) pthread_join(th[r], NULL);
    for (uint32_t r = 0; r < n; r++) assert_int_equal(w[r].st, GA_OK);
}

static void expect_identical(worker *w, uint32_t n, uint64_t version)
{
    for (uint32_t r = 0; r < n; r++) {
        assert_int_equal(ga_client_version(w[r].c), version);
        assert_memory_equal(w[r].big, w[0].big, BIG * sizeof(float));
        assert_memory_equal(w[r].small, w[0].small, SMALL * sizeof(float));
    }
}

static Gradagg__V1__StatusResponse *job_status(const char *job)
{
    ga_channel *ch = NULL;
    assert_int_equal(ga_channel_create(address, 64u << 20, &ch), GA_OK);
    Gradagg__V1__StatusRequest req = GRADAGG__V1__STATUS_REQUEST__INIT;
    req.job = (char *)job;
    ProtobufCMessage *resp = NULL;
    char why[256];
    ga_status st = ga_call_unary(ch, GA_METHOD_STATUS, &req.base, 10000, &resp, why, sizeof why);
    if (st != GA_OK) fail_msg("status of %s: %s", job, why);
    ga_channel_destroy(ch);
    return (Gradagg__V1__StatusResponse *)resp;
}

/* ---- asynchronous steps ---- */

/* ga_client_step_start / _poll / _wait from one thread for two ranks (as a rank's buckets are
 * started from backward and waited in opt.step()): the same bits as ga_client_step with 2bit
 * pushes and delta pulls; a step in flight refuses every other call with a clear message; a
 * refused step's status comes from the wait. */
static void async_steps_match_sync(void **state)
{
    (void)state;
    enum { W = 2, STEPS = 4 };
    static worker sync[W], as[W];
    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    t.codec = GA_CODEC_2BIT;
    t.params.threshold = 0.05f;
    for (uint32_t r = 0; r < W; r++) {
        ga_client_options o = options("steps-sync", r, W);
        o.pull_codec = GA_CODEC_2BIT;
        o.pull_params.threshold = 0.02f;
        worker_open(&sync[r], &o, &t);
        o.job = "steps-async";
        worker_open(&as[r], &o, &t);
    }
    assert_int_equal(ga_client_init(sync[0].c), GA_OK);
    run_all(sync, W, 0, STEPS);
    assert_int_equal(ga_client_init(as[0].c), GA_OK);
    assert_int_equal(ga_client_init(as[1].c), GA_OK);
    bool done = true;
    assert_int_equal(ga_client_step_wait(as[0].c), GA_OK); /* none started yet */
    for (int s = 0; s < STEPS; s++) {
        const float *g[W][2];
        for (uint32_t r = 0; r < W; r++) {
            fill_grads(&as[r], s);
            g[r][0] = as[r].gbig;
            g[r][1] = as[r].gsmall;
        }
        assert_int_equal(ga_client_step_start(as[0].c, g[0]), GA_OK);
        /* Rank 1 has not pushed: rank 0's step cannot end. */
        assert_int_equal(ga_client_step_poll(as[0].c, &done), GA_OK);
        assert_false(done);
        assert_int_equal(ga_client_step_start(as[0].c, g[0]), GA_E_INVAL);
        assert_int_equal(ga_client_step(as[0].c, g[0]), GA_E_INVAL);
        assert_int_equal(ga_client_init(as[0].c), GA_E_INVAL);
        float thr;
        assert_int_equal(ga_client_tensor_threshold(as[0].c, 0, &thr, NULL), GA_E_INVAL);
        assert_non_null(strstr(ga_client_error(as[0].c), "a step is in flight"));
        assert_int_equal(ga_client_step_start(as[1].c, g[1]), GA_OK);
        assert_int_equal(ga_client_step_wait(as[1].c), GA_OK);
        assert_int_equal(ga_client_step_wait(as[0].c), GA_OK);
        assert_int_equal(ga_client_step_poll(as[0].c, &done), GA_OK);
        assert_true(done);
    }
    for (uint32_t r = 0; r < W; r++) {
        assert_int_equal(ga_client_version(as[r].c), STEPS);
        assert_memory_equal(as[r].big, sync[0].big, BIG * sizeof(float));
        assert_memory_equal(as[r].small, sync[0].small, SMALL * sizeof(float));
    }
    /* A NaN gradient: the start succeeds, the wait says why the step was refused, and says it
     * again; the client is usable afterwards. */
    fill_grads(&as[0], STEPS);
    as[0].gsmall[3] = NAN;
    const float *bad[2] = {as[0].gbig, as[0].gsmall};
    assert_int_equal(ga_client_step_start(as[0].c, bad), GA_OK);
    assert_int_equal(ga_client_step_wait(as[0].c), GA_E_NONFINITE);
    assert_int_equal(ga_client_step_wait(as[0].c), GA_E_NONFINITE);
    assert_non_null(strstr(ga_client_error(as[0].c), "gradient of tensor 'small' holds NaN or Inf"));
    assert_int_equal(ga_client_version(as[0].c), STEPS);
    assert_int_equal(ga_client_step_start(NULL, bad), GA_E_INVAL);
    assert_int_equal(ga_client_step_start(as[0].c, NULL), GA_E_INVAL);
    assert_int_equal(ga_client_step_poll(as[0].c, NULL), GA_E_INVAL);
    /* A client destroyed without a wait waits for its step in flight first. */
    fill_grads(&as[1], STEPS);
    const float *g1[2] = {as[1].gbig, as[1].gsmall};
    assert_int_equal(ga_client_step_start(as[1].c, g1), GA_OK);
    assert_int_equal(worker_step(&as[0], STEPS), GA_OK);
    for (uint32_t r = 0; r < W; r++) {
        worker_close(&as[r]); /* rank 1: waits for its step */
        worker_close(&sync[r]);
    }
}

/* ---- identical parameters ---- */

/* fp32 gradients, SGD on the mean: every worker ends on exactly what a local rank-order oracle
 * computes (W = 4 makes the mean an exact scaling). */
static void dense_matches_oracle(void **state)
{
    (void)state;
    enum { W = 4, STEPS = 4 };
    static worker w[W];
    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    for (uint32_t r = 0; r < W; r++) {
        ga_client_options o = options("dense", r, W);
        worker_open(&w[r], &o, &t);
    }
    /* Rank 0 inits first: its values are the job's. */
    float *want = ga_malloc(BIG * sizeof(float));
    memcpy(want, w[0].big, BIG * sizeof(float));
    assert_int_equal(ga_client_init(w[0].c), GA_OK);
    run_all(w, W, 0, STEPS);
    expect_identical(w, W, STEPS);
    for (int s = 0; s < STEPS; s++) {
        for (size_t i = 0; i < BIG; i++) {
            float sum = 0.0f;
            for (uint32_t r = 0; r < W; r++) sum = sum + grad_value(r, s, i);
            want[i] = want[i] - 0.5f * (sum / (float)W);
        }
    }
    assert_memory_equal(w[0].big, want, BIG * sizeof(float));
    ga_client_stats st;
    ga_client_get_stats(w[1].c, &st);
    assert_int_equal(st.steps, STEPS);
    assert_int_equal(st.bytes_pushed, (BIG + SMALL) * 4);
    ga_free(want);
    for (uint32_t r = 0; r < W; r++) worker_close(&w[r]);
}

/* Every rank with another codec (2bit, none, topk with DGC, 1bit_scaled), pulls as 2bit deltas
 * with server error feedback: all hold the same bits after every step. */
static void mixed_codecs_delta_pulls(void **state)
{
    (void)state;
    enum { W = 4, STEPS = 5 };
    static worker w[W];
    for (uint32_t r = 0; r < W; r++) {
        ga_client_options o = options("mixed", r, W);
        o.pull_codec = GA_CODEC_2BIT;
        o.pull_params.threshold = 0.01f;
        ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
        if (r == 0) {
            t.codec = GA_CODEC_2BIT;
            t.params.threshold = 0.05f;
        } else if (r == 2) {
            t.codec = GA_CODEC_TOPK;
            t.params = ga_codec_params_default(GA_CODEC_TOPK);
            t.params.ratio = 0.01f;
            t.dgc = (ga_dgc_options){true, 0.9f, false, true, 5.0f, 2};
        } else if (r == 3) {
            t.codec = GA_CODEC_1BIT_SCALED;
        }
        worker_open(&w[r], &o, &t);
    }
    run_all(w, W, 0, STEPS);
    expect_identical(w, W, STEPS);
    ga_client_stats s0, s1;
    ga_client_get_stats(w[0].c, &s0);
    ga_client_get_stats(w[1].c, &s1);
    assert_true(s0.bytes_pushed * 10 < s1.bytes_pushed); /* 2bit against fp32 */
    assert_true(s0.bytes_pulled * 10 < (BIG + SMALL) * 4); /* deltas, not fp32 */
    /* A late joiner (a fresh client for rank 1) gets the published copy as fp32. */
    worker_close(&w[1]);
    ga_client_options o = options("mixed", 1, W);
    o.pull_codec = GA_CODEC_2BIT;
    o.pull_params.threshold = 0.01f;
    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    worker_open(&w[1], &o, &t);
    assert_int_equal(ga_client_init(w[1].c), GA_OK);
    expect_identical(w, W, STEPS);
    for (uint32_t r = 0; r < W; r++) worker_close(&w[r]);
}

/* DGC on a dense codec is momentum on the worker: a rank pushing DGC(m = 0.9) momentum through
 * `none` to a server SGD with momentum 0 ends bit-identical to the same gradients pushed plainly
 * to a server SGD with momentum 0.9 (PyTorch's buf = m*buf + g; p -= lr*buf). One rank: with
 * more, m*(u0 + u1) and m*u0 + m*u1 round differently, equal only up to the last bits. */
static void dgc_dense_is_worker_momentum(void **state)
{
    (void)state;
    enum { W = 1, STEPS = 4 };
    static worker dgc[W], plain[W];
    for (uint32_t r = 0; r < W; r++) {
        ga_client_options o = options("dgc-dense", r, W);
        o.mean = false;
        ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
        t.dgc = (ga_dgc_options){true, 0.9f, false, true, 0.0f, 0}; /* masking asked for: not applied */
        worker_open(&dgc[r], &o, &t);
        o = options("momentum-server", r, W);
        o.mean = false;
        o.sgd.momentum = 0.9f;
        t = (ga_tensor_options)GA_TENSOR_OPTIONS_INIT;
        worker_open(&plain[r], &o, &t);
    }
    run_all(dgc, W, 0, STEPS);
    run_all(plain, W, 0, STEPS);
    expect_identical(dgc, W, STEPS);
    expect_identical(plain, W, STEPS);
    assert_memory_equal(dgc[0].big, plain[0].big, BIG * sizeof(float));
    assert_memory_equal(dgc[0].small, plain[0].small, SMALL * sizeof(float));
    for (uint32_t r = 0; r < W; r++) {
        worker_close(&dgc[r]);
        worker_close(&plain[r]);
    }
}

/* Async: every push is applied on its own; each worker pulls the version its ack named. */
static void async_commits(void **state)
{
    (void)state;
    enum { W = 2, STEPS = 5 };
    static worker w[W];
    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    t.codec = GA_CODEC_FP16;
    for (uint32_t r = 0; r < W; r++) {
        ga_client_options o = options("async", r, W);
        o.mode = GA_MODE_ASYNC;
        worker_open(&w[r], &o, &t);
    }
    run_all(w, W, 0, STEPS);
    /* Every commit is applied, once (the last applies may still be queued when the pulls end). */
    uint64_t steps = 0, version = 0, duplicates = 1;
    for (int i = 0; i < 500 && steps < W * STEPS; i++) {
        Gradagg__V1__StatusResponse *s = job_status("async");
        steps = s->steps;
        version = s->version;
        duplicates = s->duplicate_pushes;
        protobuf_c_message_free_unpacked(&s->base, &ga_wire_allocator);
        if (steps < W * STEPS) sleep_ms(10);
    }
    assert_int_equal(steps, W * STEPS);
    assert_int_equal(version, W * STEPS);
    assert_int_equal(duplicates, 0);
    /* Each step pulled at least the version its ack named (its own push may still have been
     * queued); a last pull brings everyone to the final version. */
    for (uint32_t r = 0; r < W; r++) {
        ga_client_stats st;
        ga_client_get_stats(w[r].c, &st);
        assert_int_equal(st.steps, STEPS);
        assert_true(ga_client_version(w[r].c) <= W * STEPS);
        assert_int_equal(ga_client_pull(w[r].c, W * STEPS), GA_OK);
    }
    expect_identical(w, W, W * STEPS);
    for (uint32_t r = 0; r < W; r++) worker_close(&w[r]);
}

/* ---- stragglers and retries ---- */

/* Rank 2 is late for step 1: the step closes at the deadline with ranks 0 and 1, rank 2's push
 * gets E_STEP_CLOSED, which the SDK turns into a late push folded into the residual. */
static void straggler_folded_back(void **state)
{
    (void)state;
    enum { W = 3, STEPS = 3 };
    static worker w[W];
    for (uint32_t r = 0; r < W; r++) {
        ga_client_options o = options("straggler", r, W);
        /* Room for the on-time steps under TSan or valgrind: a step 0 or 2 closed by the deadline
         * would be counted below. */
        o.deadline_ms = 1000;
        o.quorum = 2;
        ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
        t.codec = GA_CODEC_2BIT;
        t.params.threshold = 0.05f;
        worker_open(&w[r], &o, &t);
    }
    run_all(w, W, 0, 1);
    float *before = ga_malloc(BIG * sizeof(float));
    memcpy(before, w[2].c->tensors[0].residual, BIG * sizeof(float));
    /* Step 1: ranks 0 and 1 close it at the deadline; rank 2 pushes once it has closed. */
    pthread_t th[2];
    for (uint32_t r = 0; r < 2; r++) {
        w[r].first = 1;
        w[r].steps = 1;
        assert_int_equal(pthread_create(&th[r], NULL, run_worker, &w[r]), 0);
    }
    for (int i = 0; i < 1000; i++) {
        Gradagg__V1__StatusResponse *s = job_status("straggler");
        uint64_t v = s->version;
        protobuf_c_message_free_unpacked(&s->base, &ga_wire_allocator);
        if (v == 2) break;
        sleep_ms(10);
    }
    ga_status late = worker_step(&w[2], 1);
    for (uint32_t r = 0; r < 2; r++) pthread_join(th[r], NULL);
    assert_int_equal(late, GA_OK);
    for (uint32_t r = 0; r < 2; r++) assert_int_equal(w[r].st, GA_OK);
    ga_client_stats st;
    ga_client_get_stats(w[2].c, &st);
    assert_int_equal(st.late_pushes, 1);
    assert_int_equal(ga_client_version(w[2].c), 2);
    /* Folded back: the residual holds what it held plus this step's gradient. */
    const float *res = w[2].c->tensors[0].residual;
    for (size_t i = 0; i < BIG; i++) {
        float want = before[i] + grad_value(2, 1, i);
        if (fabsf(res[i] - want) > 1e-6f) fail_msg("residual %zu: %g, want %g", i, (double)res[i], (double)want);
    }
    Gradagg__V1__StatusResponse *s = job_status("straggler");
    assert_int_equal(s->late_pushes, 1);
    assert_int_equal(s->deadline_closes, 1);
    protobuf_c_message_free_unpacked(&s->base, &ga_wire_allocator);
    /* Then all three go on together, on the same parameters. */
    run_all(w, W, 2, 1);
    expect_identical(w, W, STEPS);
    ga_free(before);
    for (uint32_t r = 0; r < W; r++) worker_close(&w[r]);
}

/* The same push sent again (a retry whose first attempt was counted) is acknowledged as a
 * duplicate and changes nothing. */
static void resent_push_counted_once(void **state)
{
    (void)state;
    static worker wk;
    ga_client_options o = options("resend", 0, 1);
    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    t.codec = GA_CODEC_2BIT;
    t.params.threshold = 0.05f;
    worker_open(&wk, &o, &t);
    assert_int_equal(ga_client_init(wk.c), GA_OK);
    assert_int_equal(worker_step(&wk, 0), GA_OK);
    assert_int_equal(worker_step(&wk, 1), GA_OK);
    float *params = ga_malloc(BIG * sizeof(float));
    memcpy(params, wk.big, BIG * sizeof(float));
    /* The step-1 payloads are still in the client's buffers: resend them as step 1. */
    wk.c->shards[0].step = 1;
    uint64_t ack = 0;
    assert_int_equal(ga_client_push(wk.c, &ack), GA_OK);
    assert_int_equal(ack, 2);
    Gradagg__V1__StatusResponse *s = job_status("resend");
    assert_int_equal(s->duplicate_pushes, 1);
    assert_int_equal(s->version, 2);
    protobuf_c_message_free_unpacked(&s->base, &ga_wire_allocator);
    wk.c->shards[0].step = 2;
    assert_int_equal(ga_client_pull(wk.c, 2), GA_OK);
    assert_memory_equal(params, wk.big, BIG * sizeof(float));
    ga_free(params);
    worker_close(&wk);
}

/* A worker started before its server: Join is retried on UNAVAILABLE until the server is up. */
typedef struct early_join {
    ga_client_options o;
    ga_client *c;
    ga_status st;
    char msg[256];
} early_join;

static void *join_early(void *arg)
{
    early_join *e = arg;
    e->st = ga_client_create(&e->o, &e->c, e->msg, sizeof e->msg);
    return NULL;
}

static void join_waits_for_server(void **state)
{
    (void)state;
    /* A port that was free a moment ago. */
    ga_config cfg;
    ga_test_config_defaults(&cfg);
    cfg.admin_listen[0] = '\0'; /* no admin port: tests run in parallel */
    snprintf(cfg.listen, sizeof cfg.listen, "127.0.0.1:0");
    ga_test_fresh_dir(cfg.data_dir, sizeof cfg.data_dir, data_dir);
    cfg.log_level = GA_LOG_WARN;
    ga_server *late = NULL;
    assert_int_equal(ga_server_start(&cfg, &late), GA_OK);
    int port = ga_server_port(late);
    ga_server_destroy(late);

    early_join e = {.o = options("early", 0, 1)};
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    e.o.server = target;
    e.o.max_retries = 50;
    e.o.backoff_ms = 20;
    e.o.backoff_max_ms = 40;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, join_early, &e), 0);
    sleep_ms(300);
    snprintf(cfg.listen, sizeof cfg.listen, "%s", target);
    assert_int_equal(ga_server_start(&cfg, &late), GA_OK);
    pthread_join(th, NULL);
    if (e.st != GA_OK) fail_msg("early join: %s", e.msg);
    ga_client_stats st;
    ga_client_get_stats(e.c, &st);
    assert_true(st.retries >= 1);
    ga_client_destroy(e.c);
    ga_server_destroy(late);
}

/* ---- init ---- */

typedef struct initing {
    worker *wk;
    atomic_bool done;
} initing;

static void *init_only(void *arg)
{
    initing *x = arg;
    x->wk->st = ga_client_init(x->wk->c);
    atomic_store(&x->done, true);
    return NULL;
}

/* Ranks 1 and 2 init first and wait (their init awaits the values) until rank 0's init, 300 ms
 * later, made the tensors; every rank then holds rank 0's values, whatever it held before. */
static void others_await_rank0_values(void **state)
{
    (void)state;
    enum { N = 3 };
    worker w[N];
    for (uint32_t r = 0; r < N; r++) {
        ga_client_options o = options("await", r, N);
        worker_open(&w[r], &o, NULL);
    }
    float *big0 = ga_malloc(BIG * sizeof(float)), small0[SMALL];
    assert_non_null(big0);
    memcpy(big0, w[0].big, BIG * sizeof(float));
    memcpy(small0, w[0].small, sizeof small0);
    initing x[N];
    pthread_t th[N];
    for (uint32_t r = 1; r < N; r++) {
        x[r].wk = &w[r];
        atomic_init(&x[r].done, false);
        assert_int_equal(pthread_create(&th[r], NULL, init_only, &x[r]), 0);
    }
    sleep_ms(300);
    for (uint32_t r = 1; r < N; r++) assert_false(atomic_load(&x[r].done));
    assert_int_equal(ga_client_init(w[0].c), GA_OK);
    for (uint32_t r = 1; r < N; r++) {
        pthread_join(th[r], NULL);
        if (w[r].st != GA_OK) fail_msg("rank %u: %s", r, ga_client_error(w[r].c));
    }
    for (uint32_t r = 0; r < N; r++) {
        assert_memory_equal(w[r].big, big0, BIG * sizeof(float));
        assert_memory_equal(w[r].small, small0, sizeof small0);
    }
    run_all(w, N, 0, 2);
    expect_identical(w, N, 2);
    for (uint32_t r = 0; r < N; r++) worker_close(&w[r]);
    ga_free(big0);
}

/* ---- errors ---- */

/* A worker's step after another rank made the job fail: E_RANK_FAILED, with the rank and why. */
static void step_sees_failure(worker *wk, const char *why)
{
    memset(wk->gbig, 0, BIG * sizeof *wk->gbig);
    memset(wk->gsmall, 0, SMALL * sizeof *wk->gsmall);
    const float *g[2] = {wk->gbig, wk->gsmall};
    assert_int_equal(ga_client_step(wk->c, g), GA_E_RANK_FAILED);
    if (!strstr(ga_client_error(wk->c), why)) fail_msg("'%s' does not say '%s'", ga_client_error(wk->c), why);
}

static void errors_carry_exact_status(void **state)
{
    (void)state;
    char msg[512];
    static worker wk;
    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    ga_client *c = NULL;

    /* Another configuration for the same job, before it trained: the joiner gets E_JOB_CONFIG
     * with both values, and the job fails for its other ranks at once (a broken launch). */
    ga_client_options o = options("errors-config", 0, 2);
    worker_open(&wk, &o, &t);
    assert_int_equal(ga_client_init(wk.c), GA_OK);
    ga_client_options other = options("errors-config", 1, 3);
    assert_int_equal(ga_client_create(&other, &c, msg, sizeof msg), GA_E_JOB_CONFIG);
    assert_null(c);
    assert_non_null(strstr(msg, "join job 'errors-config' rank 1 at 127.0.0.1:"));
    assert_non_null(strstr(msg, ": E_JOB_CONFIG: "));
    assert_non_null(strstr(msg, "field world_size (2, not 3) differs"));
    step_sees_failure(&wk, "job 'errors-config' failed: rank 1 joined with another config: field world_size (2, "
                           "not 3) differs");
    worker_close(&wk);

    /* A tensor of another shape: E_SHAPE with both shapes, and the job fails for the others. */
    o = options("errors-shape", 0, 2);
    worker_open(&wk, &o, &t);
    assert_int_equal(ga_client_init(wk.c), GA_OK);
    ga_client_options r1 = options("errors-shape", 1, 2);
    assert_int_equal(ga_client_create(&r1, &c, msg, sizeof msg), GA_OK);
    float p[10] = {0};
    uint64_t shape[1] = {10};
    assert_int_equal(ga_client_add_tensor(c, "big", shape, 1, p, &t, NULL), GA_OK);
    assert_int_equal(ga_client_init(c), GA_E_SHAPE);
    assert_non_null(strstr(ga_client_error(c), "init of 1 tensors: E_SHAPE: "));
    assert_non_null(strstr(ga_client_error(c), "exists with shape [400, 500]; this init gives [10]"));
    ga_client_destroy(c);
    step_sees_failure(&wk, "rank 1 disagrees on the model: tensor 'big' exists with shape [400, 500]; this init "
                           "gives [10]");
    worker_close(&wk);

    o = options("errors", 0, 1);
    worker_open(&wk, &o, &t);
    assert_int_equal(ga_client_init(wk.c), GA_OK);
    /* Rank 0 claimed by a second process while the first is alive. */
    ga_client_options dup = options("errors", 0, 1);
    assert_int_equal(ga_client_create(&dup, &c, msg, sizeof msg), GA_E_RANK_HELD);
    assert_non_null(strstr(msg, ": E_RANK_HELD: "));
    /* A push for a step the server has not opened, as if it had come back at an older
     * checkpoint: this server journals every acknowledged push (a data directory, --durability
     * acked), so the worker stops with E_ROLLED_BACK naming both versions and moves nothing
     * (with --durability checkpoint it moves back: test_rollback.py). */
    wk.c->shards[0].step = 4;
    for (size_t i = 0; i < BIG; i++) wk.gbig[i] = 0.0f;
    for (size_t i = 0; i < SMALL; i++) wk.gsmall[i] = 0.0f;
    const float *g[2] = {wk.gbig, wk.gsmall};
    assert_int_equal(ga_client_step(wk.c, g), GA_E_ROLLED_BACK);
    assert_non_null(strstr(ga_client_error(wk.c), "came back at version 0, below version 4"));
    assert_non_null(strstr(ga_client_error(wk.c), "--durability acked"));
    ga_client_stats stats;
    ga_client_get_stats(wk.c, &stats);
    assert_int_equal(stats.versions_lost, 0);
    assert_int_equal(wk.c->shards[0].step, 4);
    /* An lr that is not finite and >= 0 is refused before anything is sent. */
    assert_int_equal(ga_client_set_lr(wk.c, NAN), GA_E_OPTIM);
    assert_non_null(strstr(ga_client_error(wk.c), "set_lr: lr nan"));
    assert_int_equal(ga_client_set_lr(wk.c, -1.0f), GA_E_OPTIM);
    assert_int_equal(ga_client_set_lr(NULL, 0.1f), GA_E_INVAL);
    assert_int_equal(ga_client_set_lr(wk.c, 0.0f), GA_OK);
    worker_close(&wk);

    /* Nobody listening: UNAVAILABLE after the retries. */
    ga_client_options dead = options("errors", 0, 2);
    dead.server = "127.0.0.1:1";
    dead.max_retries = 2;
    assert_int_equal(ga_client_create(&dead, &c, msg, sizeof msg), GA_E_UNAVAILABLE);
    assert_non_null(strstr(msg, "join job 'errors' rank 0 at 127.0.0.1:1: E_UNAVAILABLE"));
}

int main(void)
{
    snprintf(data_dir, sizeof data_dir, "/tmp/test_client.XXXXXX");
    if (!mkdtemp(data_dir)) return 1;
    test_memory_baseline();
    (void)test_host_memory_returned; /* checked after the group teardown stopped the server */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(dense_matches_oracle),
        cmocka_unit_test(mixed_codecs_delta_pulls),
        cmocka_unit_test(dgc_dense_is_worker_momentum),
        cmocka_unit_test(async_commits),
        cmocka_unit_test(async_steps_match_sync),
        cmocka_unit_test(straggler_folded_back),
        cmocka_unit_test(resent_push_counted_once),
        cmocka_unit_test(join_waits_for_server),
        cmocka_unit_test(others_await_rank0_values),
        cmocka_unit_test(errors_carry_exact_status),
    };
    int failed = cmocka_run_group_tests(tests, start_server, stop_server);
    /* The server is gone: everything it and the clients took is back. */
    if (ga_mem_in_use(GA_MEM_HOST) != test_memory_at_start) {
        fprintf(stderr, "host memory not returned: %llu bytes\n",
                (unsigned long long)(ga_mem_in_use(GA_MEM_HOST) - test_memory_at_start));
        failed++;
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", data_dir);
    if (system(cmd) != 0) failed++;
    return failed;
}
