/* Sharding end to end: three real gradagg-server processes (posix_spawn, fresh data dirs, ports
 * from their stdout) and W SDK workers (threads) training a mix of tensors (a large 2bit one, a
 * large topk one and a large one with a different fixed-size codec per rank, all cut over the
 * shards, and small ones placed whole by name) with mean + SGD momentum and 2bit compressed
 * pulls. With 2 and 3 shards the final parameters are bit-identical to one shard; each shard
 * holds exactly its pieces (pulled back from it alone); a shard SIGKILLed mid-training and
 * restarted on its port and data dir is retried alone and changes nothing; a step that reached
 * one shard and not the other is made good by the next; bad shard lists, async with several
 * shards and an unreachable shard are refused with the shard named. */
#define _GNU_SOURCE /* mkdtemp */
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chunks.h"
#include "ga_alloc.h"
#include "ga_lane.h"
#include "gradagg.h"
#include "ga_methods.h"
#include "ga_wire.h"
#include "placement.h"
#include "rpc_client.h"
#include "server_proc.h"
#include "test_dirs.h"
#include "test_memory.h"

#define W 3
#define STEPS 12
#define NSERVERS 3
#define SPLIT 50000        /* shard_split_elements: the three large tensors are cut */
#define CHUNK_BYTES 8192   /* topk: chunks of 95232 elements (sampled: above GA_TOPK_EXACT_MAX), 4 of them */
#define TIMEOUT_S 90.0

static char base_dir[64];
static ga_test_server servers[NSERVERS];
/* Math tasks at once (--math-tasks) by server: one, where no task may wait on another job's (lanes
 * are jobs), 17, and the default (2). */
#define FEW_TASKS 1
#define MANY_TASKS 17
static const char *const server_args[NSERVERS][7] = {
    {"--checkpoint-steps", "5", "--log-level", "info", "--member-lease-ms=100", "--math-tasks=1", NULL},
    {"--checkpoint-steps", "5", "--log-level", "info", "--member-lease-ms=100", "--math-tasks=17", NULL},
    {"--checkpoint-steps", "5", "--log-level", "info", "--member-lease-ms=100", NULL},
};

/* ---- the model ---- */

typedef struct tensor_def {
    const char *name;
    uint64_t shape[2];
    int ndim;
    ga_codec_id codec[W]; /* per rank: fixed-size codecs may differ, topk must not (its cuts are
                             whole topk chunks) */
    float threshold;
    float ratio;
} tensor_def;

static const tensor_def tensors[] = {
    {"big2", {400, 500}, 2, {GA_CODEC_2BIT, GA_CODEC_2BIT, GA_CODEC_2BIT}, 0.01f, 0.0f},
    {"topk", {300000}, 1, {GA_CODEC_TOPK, GA_CODEC_TOPK, GA_CODEC_TOPK}, 0.0f, 0.01f},
    {"dense", {70, 1000}, 2, {GA_CODEC_NONE, GA_CODEC_FP16, GA_CODEC_2BIT}, 0.02f, 0.0f},
    {"b1", {37}, 1, {GA_CODEC_2BIT, GA_CODEC_2BIT, GA_CODEC_2BIT}, 0.01f, 0.0f},
    {"b2", {10, 10}, 2, {GA_CODEC_NONE, GA_CODEC_NONE, GA_CODEC_NONE}, 0.0f, 0.0f},
    {"b3", {1000}, 1, {GA_CODEC_TOPK, GA_CODEC_TOPK, GA_CODEC_TOPK}, 0.0f, 0.05f},
    {"b4", {5}, 1, {GA_CODEC_FP16, GA_CODEC_NONE, GA_CODEC_FP16}, 0.0f, 0.0f},
    {"b5", {3000}, 1, {GA_CODEC_1BIT, GA_CODEC_1BIT, GA_CODEC_1BIT}, 0.0f, 0.0f},
};
#define NT (sizeof tensors / sizeof tensors[0])

static size_t numel(const tensor_def *d) { return (size_t)d->shape[0] * (d->ndim == 2 ? (size_t)d->shape[1] : 1); }

static ga_tensor_options tensor_options(const tensor_def *d, uint32_t rank)
{
    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    t.codec = d->codec[rank];
    t.params = ga_codec_params_default(t.codec);
    if (t.codec == GA_CODEC_2BIT) t.params.threshold = d->threshold;
    if (t.codec == GA_CODEC_TOPK) t.params.ratio = d->ratio;
    return t;
}

static float grad_value(uint32_t rank, int step, size_t t, size_t i)
{
    uint64_t x = (uint64_t)i * 2654435761u + (uint64_t)step * 40503u + rank * 97u + t * 7919u;
    x ^= x >> 13;
    return (float)((int)(x % 2001) - 1000) * 1e-4f;
}

/* ---- the workers ---- */

typedef struct worker {
    pthread_t thread;
    uint32_t rank;
    const char *servers; /* the shard list */
    uint32_t lanes;
    const char *job;
    float *params[NT], *grads[NT];
    ga_status st;
    char err[512];
    ga_client_stats stats;
    uint64_t version;
} worker;

static atomic_int steps_done[W];

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static ga_client_options job_options(const char *servers, const char *job, uint32_t rank)
{
    ga_client_options o = GA_CLIENT_OPTIONS_INIT;
    o.server = servers;
    o.lanes = 1;
    o.job = job;
    o.rank = rank;
    o.world_size = W;
    o.mean = true;
    o.optimizer = GA_SERVER_OPTIM_SGD;
    o.sgd.lr = 0.1f;
    o.sgd.momentum = 0.9f;
    o.pull_codec = GA_CODEC_2BIT;
    o.pull_params = ga_codec_params_default(GA_CODEC_2BIT);
    o.pull_params.threshold = 0.005f;
    o.chunk_bytes = CHUNK_BYTES;
    o.shard_split_elements = SPLIT;
    o.call_timeout_ms = 10000;
    o.step_timeout_ms = 30000;
    o.backoff_ms = 20;
    o.backoff_max_ms = 200;
    o.max_retries = 400; /* rides over a shard restart of a few seconds */
    o.threads = 1;
    return o;
}

static void *worker_main(void *arg)
{
    worker *wk = arg;
    ga_client_options o = job_options(wk->servers, wk->job, wk->rank);
    o.lanes = wk->lanes;
    ga_client *c = NULL;
    wk->st = ga_client_create(&o, &c, wk->err, sizeof wk->err);
    if (wk->st != GA_OK) return NULL;
    for (size_t t = 0; t < NT && wk->st == GA_OK; t++) {
        ga_tensor_options to = tensor_options(&tensors[t], wk->rank);
        wk->st = ga_client_add_tensor(c, tensors[t].name, tensors[t].shape, tensors[t].ndim, wk->params[t], &to, NULL);
    }
    if (wk->st == GA_OK) wk->st = ga_client_init(c);
    for (int step = 0; step < STEPS && wk->st == GA_OK; step++) {
        /* Gradients depend on the parameters the worker holds: any divergence would grow. */
        for (size_t t = 0; t < NT; t++)
            for (size_t i = 0; i < numel(&tensors[t]); i++)
                wk->grads[t][i] = 0.01f * wk->params[t][i] + grad_value(wk->rank, step, t, i);
        wk->st = ga_client_step(c, (const float *const *)wk->grads);
        if (wk->st == GA_OK) atomic_store(&steps_done[wk->rank], step + 1);
    }
    if (wk->st != GA_OK) snprintf(wk->err, sizeof wk->err, "%s", ga_client_error(c));
    ga_client_get_stats(c, &wk->stats);
    wk->version = ga_client_version(c);
    ga_client_destroy(c);
    return NULL;
}

/* "127.0.0.1:<port>,..." of the first n servers. */
static void shard_list(char *buf, size_t cap, uint32_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (uint32_t s = 0; s < n; s++)
        len += (size_t)snprintf(buf + len, cap - len, "%s127.0.0.1:%d", s ? "," : "", servers[s].port);
}

static void workers_free(worker *wk)
{
    for (int r = 0; r < W; r++)
        for (size_t t = 0; t < NT; t++) {
            free(wk[r].params[t]);
            free(wk[r].grads[t]);
        }
}

/* Trains job over the first nservers servers with `lanes` lanes each; kill_shard >= 0: SIGKILL
 * that server once rank 0 finished kill_after steps and start it again on its port and data dir. */
static void train(worker *wk, uint32_t nservers, uint32_t lanes, const char *job, int kill_shard, int kill_after)
{
    static char list[256];
    shard_list(list, sizeof list, nservers);
    for (int r = 0; r < W; r++) {
        atomic_store(&steps_done[r], 0);
        memset(&wk[r], 0, sizeof wk[r]);
        wk[r].rank = (uint32_t)r;
        wk[r].servers = list;
        wk[r].lanes = lanes;
        wk[r].job = job;
        for (size_t t = 0; t < NT; t++) {
            size_t n = numel(&tensors[t]);
            assert_non_null(wk[r].params[t] = malloc(n * sizeof(float)));
            assert_non_null(wk[r].grads[t] = malloc(n * sizeof(float)));
            for (size_t i = 0; i < n; i++) wk[r].params[t][i] = (float)((i + t) % 101) * 0.01f - 0.5f;
        }
    }
    for (int r = 0; r < W; r++) assert_int_equal(pthread_create(&wk[r].thread, NULL, worker_main, &wk[r]), 0);
    if (kill_shard >= 0) {
        double end = ga_test_now_s() + TIMEOUT_S;
        while (atomic_load(&steps_done[0]) < kill_after && ga_test_now_s() < end) sleep_ms(1);
        ga_test_server_stop(&servers[kill_shard], SIGKILL);
        ga_test_server_start(&servers[kill_shard], servers[kill_shard].port, server_args[kill_shard]);
    }
    for (int r = 0; r < W; r++) pthread_join(wk[r].thread, NULL);
    for (int r = 0; r < W; r++)
        if (wk[r].st != GA_OK) fail_msg("%s rank %d: %s: %s", job, r, ga_strerror(wk[r].st), wk[r].err);
}

/* Every worker of wk holds, bit for bit, the parameters of every worker of ref. */
static void expect_identical(const worker *wk, const worker *ref, const char *what)
{
    for (int r = 0; r < W; r++) {
        assert_int_equal(wk[r].version, STEPS);
        assert_int_equal(wk[r].stats.steps, STEPS);
        for (size_t t = 0; t < NT; t++)
            if (memcmp(wk[r].params[t], ref[0].params[t], numel(&tensors[t]) * sizeof(float)) != 0)
                fail_msg("%s: rank %d tensor '%s' differs from one shard", what, r, tensors[t].name);
    }
}

/* Each shard (a lane of a server: the job of that lane on it), on its own, holds exactly its
 * pieces of the final parameters: a client of that job alone registers the pieces under their
 * names and shapes (a wrong shape would be GA_E_SHAPE) and pulls them. Returns how many pieces
 * the shards held in all. */
static size_t expect_pieces(uint32_t nservers, uint32_t lanes, const char *job, const worker *ref)
{
    size_t total = 0, split = 0;
    uint32_t nshards = nservers * lanes;
    for (uint32_t s = 0; s < nshards; s++) {
        char addr[64], msg[512], lane_job[128];
        snprintf(addr, sizeof addr, "127.0.0.1:%d", servers[s / lanes].port);
        ga_lane_job_name(job, s % lanes, lane_job, sizeof lane_job);
        ga_client_options o = job_options(addr, lane_job, 0);
        o.resume = true; /* the training finished: look at what it left, not at a fresh job */
        ga_client *c = NULL;
        assert_int_equal(ga_client_create(&o, &c, msg, sizeof msg), GA_OK);
        float *bufs[NT] = {NULL};
        const float *want[NT] = {NULL};
        size_t counts[NT] = {0}, held = 0;
        for (size_t t = 0; t < NT; t++) {
            const tensor_def *d = &tensors[t];
            ga_tensor_options to = tensor_options(d, 0);
            size_t unit;
            assert_int_equal(ga_placement_unit(to.codec, &to.params, CHUNK_BYTES, &unit), GA_OK);
            ga_placement_piece p[GA_PLACEMENT_MAX_SHARDS];
            uint32_t np = ga_placement_plan(d->name, numel(d), unit, SPLIT, nshards, p);
            if (numel(d) >= SPLIT) assert_int_equal(np, nshards); /* the large ones are cut */
            for (uint32_t j = 0; j < np; j++) {
                if (p[j].shard != s) continue;
                char name[64];
                ga_placement_piece_name(d->name, j, np, name, sizeof name);
                uint64_t range[1] = {p[j].count};
                assert_non_null(bufs[t] = calloc(p[j].count, sizeof(float)));
                assert_int_equal(ga_client_add_tensor(c, name, np == 1 ? d->shape : range, np == 1 ? d->ndim : 1,
                                                      bufs[t], &to, NULL),
                                 GA_OK);
                want[t] = ref[0].params[t] + p[j].off;
                counts[t] = p[j].count;
                held++;
                split += np > 1;
            }
        }
        assert_true(held > 0); /* every shard got data */
        if (ga_client_init(c) != GA_OK) fail_msg("shard %u: %s", s, ga_client_error(c));
        assert_int_equal(ga_client_version(c), STEPS);
        for (size_t t = 0; t < NT; t++) {
            if (bufs[t] && memcmp(bufs[t], want[t], counts[t] * sizeof(float)) != 0)
                fail_msg("shard %u: its piece of '%s' is not the workers' range", s, tensors[t].name);
            free(bufs[t]);
        }
        ga_client_destroy(c);
        total += held;
    }
    assert_int_equal(split, 3 * nshards); /* big2, topk and dense: one piece on every shard */
    return total;
}

/* ---- tests ---- */

static worker one[W]; /* the one-shard reference */

static int start_servers(void **state)
{
    (void)state;
    for (int s = 0; s < NSERVERS; s++) {
        ga_test_fresh_dir(servers[s].dir, sizeof servers[s].dir, base_dir);
        ga_test_server_start(&servers[s], 0, server_args[s]);
    }
    return 0;
}

static int stop_servers(void **state)
{
    (void)state;
    workers_free(one);
    for (int s = 0; s < NSERVERS; s++) ga_test_server_stop(&servers[s], SIGTERM);
    return 0;
}

static void shards_match_one_shard(void **state)
{
    (void)state;
    static worker two[W], three[W];
    train(one, 1, 1, "one", -1, 0);
    expect_identical(one, one, "one shard"); /* every rank holds rank 0's parameters */
    train(two, 2, 1, "two", -1, 0);
    expect_identical(two, one, "two shards");
    train(three, 3, 1, "three", -1, 0);
    expect_identical(three, one, "three shards");
    /* The same chunks were encoded whatever the shards (topk's cuts are whole chunks). */
    for (int r = 0; r < W; r++) {
        assert_int_equal(two[r].stats.bytes_pushed, one[r].stats.bytes_pushed);
        assert_int_equal(three[r].stats.bytes_pushed, one[r].stats.bytes_pushed);
        assert_true(three[r].stats.bytes_pulled > 0);
    }
    /* 3 split tensors on every shard, and the 5 small ones once somewhere. */
    assert_int_equal(expect_pieces(2, 1, "two", two), 3 * 2 + 5);
    assert_int_equal(expect_pieces(3, 1, "three", three), 3 * 3 + 5);
    workers_free(two);
    workers_free(three);
}

/* Threads of a process (its /proc/PID/task entries). */
static int threads_of(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* --math-tasks sizes the thread pool the jobs' tasks run on (libuv starts all of its threads at
 * the first task): after the same training, the server with 17 runs 16 threads more than the one
 * with 1, give or take the few that gRPC and OpenMP add by load. */
static void math_tasks_size_the_pool(void **state)
{
    (void)state;
    int few = threads_of(servers[0].pid), many = threads_of(servers[1].pid);
    if (many - few < (MANY_TASKS - FEW_TASKS) * 3 / 4)
        fail_msg("--math-tasks %d: %d threads, --math-tasks %d: %d threads", MANY_TASKS, many, FEW_TASKS, few);
}

static void a_restarted_shard_goes_on_alone(void **state)
{
    (void)state;
    static worker killed[W];
    int before = ga_test_server_log_count(&servers[1], "restore: job 'killed'");
    train(killed, 3, 1, "killed", 1, 5);
    expect_identical(killed, one, "three shards, shard 1 restarted");
    assert_true(ga_test_server_log_count(&servers[1], "restore: job 'killed'") > before);
    uint64_t retries = 0;
    for (int r = 0; r < W; r++) retries += killed[r].stats.retries;
    assert_true(retries > 0);
    /* Only shard 1 restarted: the others never restored the job. */
    assert_int_equal(ga_test_server_log_count(&servers[0], "restore: job 'killed'"), 0);
    assert_int_equal(ga_test_server_log_count(&servers[2], "restore: job 'killed'"), 0);
    workers_free(killed);
}

/* Lanes are shards on one server: 3 lanes of one server, and 2 lanes of each of 2 servers, give
 * the one-shard parameters bit for bit, with each lane's job holding exactly its pieces; and a
 * server with 3 lanes killed and restarted mid-run changes nothing (every lane's job is
 * restored). */
static void lanes_match_one_shard(void **state)
{
    (void)state;
    static worker lanes3[W], lanes2x2[W], killed[W];
    train(lanes3, 1, 3, "lanes3", -1, 0);
    expect_identical(lanes3, one, "one server, three lanes");
    assert_int_equal(expect_pieces(1, 3, "lanes3", lanes3), 3 * 3 + 5);
    train(lanes2x2, 2, 2, "lanes2x2", -1, 0);
    expect_identical(lanes2x2, one, "two servers, two lanes each");
    assert_int_equal(expect_pieces(2, 2, "lanes2x2", lanes2x2), 3 * 4 + 5);
    for (int r = 0; r < W; r++) assert_int_equal(lanes3[r].stats.bytes_pushed, one[r].stats.bytes_pushed);

    train(killed, 3, 3, "lkill", 2, 5);
    expect_identical(killed, one, "three servers of three lanes, server 2 restarted");
    assert_true(ga_test_server_log_count(&servers[2], "restore: job 'lkill'") > 0);
    assert_true(ga_test_server_log_count(&servers[2], "restore: job 'lkill/lane1'") > 0);
    assert_true(ga_test_server_log_count(&servers[2], "restore: job 'lkill/lane2'") > 0);
    assert_int_equal(ga_test_server_log_count(&servers[1], "restore: job 'lkill"), 0);
    workers_free(lanes3);
    workers_free(lanes2x2);
    workers_free(killed);
}

/* ---- the lanes' window ---- */

#define WIN_LANES 8 /* a window of 2 (shard.c: a quarter of the lanes, at least 2) */
#define WIN_N (WIN_LANES * SPLIT)

typedef struct win_rank {
    pthread_t thread;
    uint32_t rank;
    atomic_int inited, go;
    ga_status st;
    char err[512];
    float params[WIN_N], grad[WIN_N];
} win_rank;

/* Joins job "window" of servers[2] (world 2, WIN_LANES lanes), inits, waits for go, steps once. */
static void *win_rank_main(void *arg)
{
    win_rank *wr = arg;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", servers[2].port);
    ga_client_options o = job_options(addr, "window", wr->rank);
    o.world_size = 2;
    o.lanes = WIN_LANES;
    ga_client *c = NULL;
    if ((wr->st = ga_client_create(&o, &c, wr->err, sizeof wr->err)) != GA_OK) {
        atomic_store(&wr->inited, 1);
        return NULL;
    }
    uint64_t shape[1] = {WIN_N};
    ga_tensor_options to = GA_TENSOR_OPTIONS_INIT;
    to.codec = GA_CODEC_2BIT;
    to.params = ga_codec_params_default(GA_CODEC_2BIT);
    to.params.threshold = 0.2f; /* below most of the gradients: the step moves the parameters */
    wr->st = ga_client_add_tensor(c, "w", shape, 1, wr->params, &to, NULL);
    if (wr->st == GA_OK) wr->st = ga_client_init(c);
    atomic_store(&wr->inited, 1);
    while (wr->st == GA_OK && !atomic_load(&wr->go)) sleep_ms(1);
    if (wr->st == GA_OK) wr->st = ga_client_step(c, (const float *const[]){wr->grad});
    if (wr->st != GA_OK) snprintf(wr->err, sizeof wr->err, "%s", ga_client_error(c));
    ga_client_destroy(c);
    return NULL;
}

/* Ranks committed to the open step of lane `lane`'s job "window" (the Status call). */
static uint32_t win_committed(ga_channel *ch, uint32_t lane)
{
    char job[64], msg[256];
    ga_lane_job_name("window", lane, job, sizeof job);
    Gradagg__V1__StatusRequest req = GRADAGG__V1__STATUS_REQUEST__INIT;
    req.job = job;
    ProtobufCMessage *resp = NULL;
    ga_status st = ga_call_unary(ch, GA_METHOD_STATUS, &req.base, 10000, &resp, msg, sizeof msg);
    if (st != GA_OK) fail_msg("status of '%s': %s: %s", job, ga_status_name(st), msg);
    uint32_t committed = ((Gradagg__V1__StatusResponse *)resp)->committed;
    protobuf_c_message_free_unpacked(resp, &ga_wire_allocator);
    return committed;
}

/* A lane pushes only once the lane the window before it has pulled, so a rank that runs ahead
 * keeps off the shard's link what the others' pushes need: with rank 1 held back, rank 0's step
 * pushes lanes 0 and 1 and waits, and the jobs of lanes 2..7 see no push of the open step until
 * rank 1 steps too. Then both end the step holding the same parameters. */
static void lanes_push_within_a_window(void **state)
{
    (void)state;
    static win_rank ranks[2];
    for (uint32_t r = 0; r < 2; r++) {
        memset(&ranks[r], 0, sizeof ranks[r]);
        ranks[r].rank = r;
        for (size_t i = 0; i < WIN_N; i++) {
            ranks[r].params[i] = (float)(i % 97) * 0.01f;
            ranks[r].grad[i] = (float)((i * 7 + r) % 13) * 0.1f - 0.6f;
        }
        assert_int_equal(pthread_create(&ranks[r].thread, NULL, win_rank_main, &ranks[r]), 0);
    }
    double end = ga_test_now_s() + TIMEOUT_S;
    while (!(atomic_load(&ranks[0].inited) && atomic_load(&ranks[1].inited)) && ga_test_now_s() < end) sleep_ms(1);
    for (uint32_t r = 0; r < 2; r++)
        if (ranks[r].st != GA_OK) fail_msg("rank %u: %s: %s", r, ga_strerror(ranks[r].st), ranks[r].err);

    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", servers[2].port);
    ga_channel *ch = NULL;
    assert_int_equal(ga_channel_create(addr, 1u << 20, &ch), GA_OK);
    atomic_store(&ranks[0].go, 1);
    while ((win_committed(ch, 0) < 1 || win_committed(ch, 1) < 1) && ga_test_now_s() < end) sleep_ms(2);
    assert_int_equal(win_committed(ch, 0), 1);
    assert_int_equal(win_committed(ch, 1), 1);
    sleep_ms(300); /* time enough for the later lanes' pushes, were they sent */
    for (uint32_t lane = 2; lane < WIN_LANES; lane++)
        if (win_committed(ch, lane) != 0) fail_msg("lane %u took rank 0's push before lane %u pulled", lane, lane - 2);
    ga_channel_destroy(ch);

    atomic_store(&ranks[1].go, 1);
    for (uint32_t r = 0; r < 2; r++) {
        pthread_join(ranks[r].thread, NULL);
        if (ranks[r].st != GA_OK) fail_msg("rank %u: %s: %s", r, ga_strerror(ranks[r].st), ranks[r].err);
    }
    assert_memory_equal(ranks[0].params, ranks[1].params, sizeof ranks[0].params);
    size_t moved = 0;
    for (size_t i = 0; i < WIN_N; i++) moved += ranks[0].params[i] != (float)(i % 97) * 0.01f;
    assert_true(moved > WIN_N / 2);
}

/* One rank, two shards, optimizer none, fp32 everywhere, so every parameter is an exact sum:
 * shard 1 is stopped (SIGSTOP) so that the push of step 3 reaches shard 0 but runs into its
 * deadline on shard 1; after SIGCONT the next step pulls shard 0 and pushes to shard 1 alone
 * (shard 0's part of that gradient waits on the worker), and the one after finds both shards at
 * one version again. */
static void a_failed_shard_catches_up(void **state)
{
    (void)state;
    enum { N = 4096 };
    char list[256], msg[512];
    shard_list(list, sizeof list, 2);
    ga_client_options o = job_options(list, "catchup", 0);
    o.world_size = 1;
    o.mean = false;
    o.optimizer = GA_SERVER_OPTIM_NONE;
    o.pull_codec = GA_CODEC_NONE;
    o.shard_split_elements = 2048;
    o.call_timeout_ms = 2000; /* the stopped shard costs one whole timeout */
    static float params[N], g[6][N];
    for (size_t i = 0; i < N; i++) params[i] = (float)i * 1e-3f;
    for (int k = 0; k < 6; k++)
        for (size_t i = 0; i < N; i++) g[k][i] = grad_value(0, k, 9, i);
    ga_placement_piece p[GA_PLACEMENT_MAX_SHARDS];
    assert_int_equal(ga_placement_plan("w", N, GA_CHUNK_ALIGN, 2048, 2, p), 2);
    float base[N];
    for (size_t i = 0; i < N; i++) base[i] = params[i] + g[0][i] + g[1][i] + g[2][i];

    ga_client *c = NULL;
    assert_int_equal(ga_client_create(&o, &c, msg, sizeof msg), GA_OK);
    uint64_t shape[1] = {N};
    assert_int_equal(ga_client_add_tensor(c, "w", shape, 1, params, NULL, NULL), GA_OK);
    assert_int_equal(ga_client_init(c), GA_OK);
    for (int k = 0; k < 3; k++) {
        const float *gk[1] = {g[k]};
        assert_int_equal(ga_client_step(c, gk), GA_OK);
    }
    ga_test_server_freeze(&servers[1]);
    const float *g3[1] = {g[3]};
    ga_status st = ga_client_step(c, g3);
    ga_test_server_thaw(&servers[1]);
    assert_int_equal(st, GA_E_DEADLINE);
    snprintf(msg, sizeof msg, "shard 1 (127.0.0.1:%d): push step 3: E_DEADLINE", servers[1].port);
    if (strncmp(ga_client_error(c), msg, strlen(msg)) != 0) fail_msg("error: %s", ga_client_error(c));
    assert_int_equal(ga_client_version(c), 3);
    const float *g4[1] = {g[4]};
    assert_int_equal(ga_client_step(c, g4), GA_OK);
    assert_int_equal(ga_client_version(c), 4);
    const float *g5[1] = {g[5]};
    assert_int_equal(ga_client_step(c, g5), GA_OK);
    assert_int_equal(ga_client_version(c), 5);
    ga_client_destroy(c);
    /* Shard 0 got g3 with step 3, and g4 added to g5 on the worker with step 5. Shard 1 got the
     * step-3 push whose fate was unknown (not folded back: it may have counted) and then, its
     * resend of step 3 being a duplicate, g4 held back and added to g5 on the worker; or, if it
     * had not counted it, g4 as step 3, then g5. */
    int shard1_had_g3 = -1;
    for (uint32_t j = 0; j < 2; j++) {
        for (size_t i = p[j].off; i < p[j].off + p[j].count; i++) {
            float want;
            if (p[j].shard == 0) {
                want = (base[i] + g[3][i]) + (g[5][i] + g[4][i]);
            } else {
                if (shard1_had_g3 < 0) shard1_had_g3 = params[i] == (base[i] + g[3][i]) + (g[5][i] + g[4][i]);
                want = shard1_had_g3 ? (base[i] + g[3][i]) + (g[5][i] + g[4][i]) : (base[i] + g[4][i]) + g[5][i];
            }
            if (params[i] != want) fail_msg("w[%zu] (shard %u): %.9g, expected %.9g", i, p[j].shard, params[i], want);
        }
    }
}

static void bad_shard_lists(void **state)
{
    (void)state;
    char list[256], msg[512];
    ga_client *c = (ga_client *)1;
    shard_list(list, sizeof list, 2);
    ga_client_options o = job_options(list, "bad", 0);
    o.mode = GA_MODE_ASYNC;
    assert_int_equal(ga_client_create(&o, &c, msg, sizeof msg), GA_E_INVAL);
    assert_null(c);
    assert_non_null(strstr(msg, "async jobs take one shard"));
    shard_list(list, sizeof list, 1);
    o = job_options(list, "bad", 0);
    o.mode = GA_MODE_ASYNC;
    o.lanes = 2;
    assert_int_equal(ga_client_create(&o, &c, msg, sizeof msg), GA_E_INVAL);
    assert_string_equal(msg, "options: async jobs take one lane, lanes is 2");
    o.mode = GA_MODE_SYNC;
    o.lanes = GA_LANE_MAX + 1;
    assert_int_equal(ga_client_create(&o, &c, msg, sizeof msg), GA_E_CONFIG);
    assert_string_equal(msg, "options: lanes 17, at most 16");
    shard_list(list, sizeof list, 3);
    o = job_options(list, "bad", 0);
    o.lanes = 16; /* 48 shards: fine; 5 addresses would be 80 */
    snprintf(list + strlen(list), sizeof list - strlen(list), ",127.0.0.1:1,127.0.0.1:2");
    assert_int_equal(ga_client_create(&o, &c, msg, sizeof msg), GA_E_INVAL);
    assert_string_equal(msg, "options: 5 server addresses x 16 lanes, at most 64 in all");
    shard_list(list, sizeof list, 2);

    o = job_options("127.0.0.1:1,,127.0.0.1:2", "bad", 0);
    assert_int_equal(ga_client_create(&o, &c, msg, sizeof msg), GA_E_INVAL);
    assert_string_equal(msg, "options: server address 1 of '127.0.0.1:1,,127.0.0.1:2' is empty");
    o = job_options("127.0.0.1:1,", "bad", 0);
    assert_int_equal(ga_client_create(&o, &c, msg, sizeof msg), GA_E_INVAL);

    /* An unreachable shard fails the create, named. */
    snprintf(list, sizeof list, "127.0.0.1:%d,127.0.0.1:1", servers[0].port);
    o = job_options(list, "bad", 0);
    o.max_retries = 1;
    o.backoff_ms = o.backoff_max_ms = 1;
    o.call_timeout_ms = 2000;
    assert_int_equal(ga_client_create(&o, &c, msg, sizeof msg), GA_E_UNAVAILABLE);
    assert_non_null(strstr(msg, "shard 1 (127.0.0.1:1): join job 'bad' rank 0 at 127.0.0.1:1: E_UNAVAILABLE"));

    /* '@' names pieces: not a tensor name once there are shards. */
    shard_list(list, sizeof list, 2);
    o = job_options(list, "bad", 0);
    assert_int_equal(ga_client_create(&o, &c, msg, sizeof msg), GA_OK);
    float p[4] = {0};
    uint64_t shape[1] = {4};
    assert_int_equal(ga_client_add_tensor(c, "w@0/2", shape, 1, p, NULL, NULL), GA_E_INVAL);
    assert_non_null(strstr(ga_client_error(c), "'@' is kept for the names of shard pieces"));
    assert_int_equal(ga_client_add_tensor(c, "w", shape, 1, p, NULL, NULL), GA_OK);
    assert_int_equal(ga_client_init(c), GA_OK);
    ga_client_destroy(c);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    snprintf(base_dir, sizeof base_dir, "/tmp/ga_shards_XXXXXX");
    if (!mkdtemp(base_dir)) return 1;
    test_memory_baseline();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shards_match_one_shard),
        cmocka_unit_test(math_tasks_size_the_pool),
        cmocka_unit_test(a_restarted_shard_goes_on_alone),
        cmocka_unit_test(a_failed_shard_catches_up),
        cmocka_unit_test(lanes_match_one_shard),
        cmocka_unit_test(lanes_push_within_a_window),
        cmocka_unit_test(bad_shard_lists),
        cmocka_unit_test(test_host_memory_returned),
    };
    int rc = cmocka_run_group_tests(tests, start_servers, stop_servers);
    if (rc == 0 && !getenv("GA_KEEP")) ga_test_remove_dir(base_dir);
    else fprintf(stderr, "server data and logs kept in %s\n", base_dir);
    return rc;
}
