/* Nothing acknowledged is lost across a killed or restarted server: 4 SDK workers (threads) with mixed codecs
 * train through the real gradagg-server binary on 127.0.0.1 with Adam and compressed pulls,
 * checkpointing every 5 versions and an lr that changes every step (ga_client_set_lr: the journal
 * replays each step's lr); the server is SIGKILLed twice mid-training and restarted on
 * the same port and data dir, and the workers go on by themselves (retries, rejoin). The final
 * parameters must equal, bit for bit, those of the same run without kills. The server is started
 * with posix_spawn: this process runs gRPC threads, and a fork would run gRPC's fork handlers. */
#define _GNU_SOURCE /* mkdtemp */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ga_alloc.h"
#include "gradagg.h"
#include "persist/fileio.h"
#include "server_proc.h"
#include "test_dirs.h"

#define W 4
#define STEPS 24
#define BIG 100000 /* several chunks at chunk_bytes 64 KiB */
#define SMALL 37
#define TIMEOUT_S 60.0

static char base_dir[64];

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- the server process ---- */

typedef ga_test_server server;

static const char *const server_args[] = {"--checkpoint-steps", "5", "--log-level", "info", "--member-lease-ms=100",
                                          NULL};
/* Only checkpoints hold steps: a killed server comes back at its newest one. */
static const char *const checkpoint_args[] = {"--checkpoint-steps", "5", "--log-level", "info",
                                              "--member-lease-ms=100", "--durability", "checkpoint", NULL};

static void server_start(server *s, int port, const char *const *args) { ga_test_server_start(s, port, args); }

static void server_kill(server *s, int sig) { ga_test_server_stop(s, sig); }

/* ---- the workers ---- */

typedef struct worker {
    pthread_t thread;
    uint32_t rank;
    int port;
    float big[BIG], small[SMALL];
    float gbig[BIG], gsmall[SMALL];
    ga_status st;
    char err[512];
    ga_client_stats stats;
    uint64_t version; /* the last one it pulled */
} worker;

static atomic_int steps_done[W];

static float grad_value(uint32_t rank, int step, size_t i)
{
    uint64_t x = (uint64_t)i * 2654435761u + (uint64_t)step * 40503u + rank * 97u;
    return (float)((int)(x % 2001) - 1000) * 1e-4f;
}

static const ga_codec_id codecs[W] = {GA_CODEC_NONE, GA_CODEC_FP16, GA_CODEC_2BIT, GA_CODEC_TOPK};

/* The job every worker joins: Adam on the server, 2-bit compressed pulls, and retries that ride
 * over a restart of a few seconds. address[0..cap) holds the server address the options name. */
static ga_client_options job_options(char *address, size_t cap, int port, uint32_t rank)
{
    snprintf(address, cap, "127.0.0.1:%d", port);
    ga_client_options o = GA_CLIENT_OPTIONS_INIT;
    o.server = address;
    o.job = "restart";
    o.rank = rank;
    o.world_size = W;
    o.mean = true;
    o.optimizer = GA_SERVER_OPTIM_ADAM;
    o.adam.lr = 0.01f;
    o.adam.beta1 = 0.9f;
    o.adam.beta2 = 0.999f;
    o.adam.eps = 1e-8f;
    o.pull_codec = GA_CODEC_2BIT;
    o.pull_params = ga_codec_params_default(GA_CODEC_2BIT);
    o.pull_params.threshold = 0.005f;
    o.chunk_bytes = 64 << 10;
    o.call_timeout_ms = 10000;
    o.step_timeout_ms = 30000;
    o.backoff_ms = 20;
    o.backoff_max_ms = 200;
    o.max_retries = 400;
    o.threads = 1;
    return o;
}

static void *worker_main(void *arg)
{
    worker *wk = arg;
    char address[64];
    ga_client_options o = job_options(address, sizeof address, wk->port, wk->rank);
    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    t.codec = codecs[wk->rank];
    if (t.codec == GA_CODEC_TOPK) {
        t.params = ga_codec_params_default(GA_CODEC_TOPK);
        t.params.ratio = 0.01f;
    }
    for (size_t i = 0; i < BIG; i++) wk->big[i] = (float)(i % 101) * 0.01f;
    for (size_t i = 0; i < SMALL; i++) wk->small[i] = 1.0f;
    ga_client *c = NULL;
    uint64_t sb[2] = {250, 400}, ss[1] = {SMALL};
    const float *grads[2] = {wk->gbig, wk->gsmall};
    wk->st = ga_client_create(&o, &c, wk->err, sizeof wk->err);
    if (wk->st != GA_OK) return NULL;
    if ((wk->st = ga_client_add_tensor(c, "big", sb, 2, wk->big, &t, NULL)) != GA_OK ||
        (wk->st = ga_client_add_tensor(c, "small", ss, 1, wk->small, &t, NULL)) != GA_OK ||
        (wk->st = ga_client_init(c)) != GA_OK)
        goto out;
    for (int step = 0; step < STEPS; step++) {
        /* Gradients depend on the parameters the worker holds: any divergence would grow. */
        for (size_t i = 0; i < BIG; i++) wk->gbig[i] = 0.01f * wk->big[i] + grad_value(wk->rank, step, i);
        for (size_t i = 0; i < SMALL; i++) wk->gsmall[i] = 0.01f * wk->small[i] + grad_value(wk->rank, step, i + BIG);
        /* The last rank is slow, so a kill soon after a step lands with the step's other
         * pushes acknowledged and this one still to come. */
        if (wk->rank == W - 1) sleep_ms(20);
        if ((wk->st = ga_client_set_lr(c, 0.01f / (float)(1 + step % 4))) != GA_OK ||
            (wk->st = ga_client_step(c, grads)) != GA_OK)
            goto out;
        atomic_store(&steps_done[wk->rank], step + 1);
    }
out:
    if (wk->st != GA_OK) snprintf(wk->err, sizeof wk->err, "%s", ga_client_error(c));
    ga_client_get_stats(c, &wk->stats);
    wk->version = ga_client_version(c);
    ga_client_destroy(c);
    return NULL;
}

/* The most steps any worker has finished: a kill then lands while the others still push. */
static int max_steps(void)
{
    int m = 0;
    for (int r = 0; r < W; r++) {
        int s = atomic_load(&steps_done[r]);
        if (s > m) m = s;
    }
    return m;
}

/* One training run; kill_at[k] > 0: SIGKILL the server once a worker finished that many steps,
 * and start it again on the same port and data dir. Returns the "restore: job" lines it logged. */
static int train_with(const int *kill_at, const uint32_t *kill_delay_ms, int nkill, worker *wk, server *s,
                      const char *const *args, int sig, uint32_t restart_after_ms)
{
    ga_test_fresh_dir(s->dir, sizeof s->dir, base_dir);
    server_start(s, 0, args);
    for (int r = 0; r < W; r++) {
        atomic_store(&steps_done[r], 0);
        memset(&wk[r], 0, sizeof wk[r]);
        wk[r].rank = (uint32_t)r;
        wk[r].port = s->port;
        assert_int_equal(pthread_create(&wk[r].thread, NULL, worker_main, &wk[r]), 0);
    }
    double end = ga_test_now_s() + TIMEOUT_S;
    for (int k = 0; k < nkill; k++) {
        while (max_steps() < kill_at[k] && ga_test_now_s() < end) sleep_ms(1);
        sleep_ms(kill_delay_ms[k]); /* 0: between steps; later: amid the next step's pushes */
        server_kill(s, sig);
        sleep_ms(restart_after_ms);
        server_start(s, s->port, args);
    }
    for (int r = 0; r < W; r++) pthread_join(wk[r].thread, NULL);
    server_kill(s, SIGTERM);
    int failed = 0;
    for (int r = 0; r < W; r++)
        if (wk[r].st != GA_OK) print_error("rank %d: %s: %s\n", r, ga_strerror(wk[r].st), wk[r].err), failed++;
    if (failed) fail_msg("%d ranks failed", failed);
    return ga_test_server_log_count(s, "restore: job 'restart'");
}

static int train(const int *kill_at, const uint32_t *kill_delay_ms, int nkill, worker *wk, server *s,
                 const char *const *args)
{
    return train_with(kill_at, kill_delay_ms, nkill, wk, s, args, SIGKILL, 0);
}

static worker plain[W], killed[W];

static void test_sigkill_loses_nothing(void **state)
{
    (void)state;
    server a = {0}, b = {0};
    int restores_a = train(NULL, NULL, 0, plain, &a, server_args);
    const int kills[] = {6, 13};
    const uint32_t delays[] = {0, 10};
    int restores_b = train(kills, delays, 2, killed, &b, server_args);

    /* Every worker of each run holds the same parameters ... */
    for (int r = 1; r < W; r++) {
        assert_memory_equal(plain[r].big, plain[0].big, sizeof plain[0].big);
        assert_memory_equal(killed[r].big, killed[0].big, sizeof killed[0].big);
        assert_memory_equal(killed[r].small, killed[0].small, sizeof killed[0].small);
    }
    /* ... and the killed run ends exactly where the uninterrupted one does. */
    assert_memory_equal(killed[0].big, plain[0].big, sizeof plain[0].big);
    assert_memory_equal(killed[0].small, plain[0].small, sizeof plain[0].small);
    /* The kills really happened mid-training: both restarts restored the job, and the workers
     * had to retry. */
    assert_int_equal(restores_a, 0);
    assert_true(restores_b >= 4); /* checkpoint + journal lines, for each of the 2 restarts */
    uint64_t retries = 0;
    for (int r = 0; r < W; r++) retries += killed[r].stats.retries;
    assert_true(retries > 0);
    assert_int_equal(killed[0].stats.steps, STEPS);

    /* A corrupt newest checkpoint: the server skips it, restores the one before and replays the
     * journal from there to the same version, and a worker pulls the same parameters. */
    char **names;
    size_t n;
    char why[256], job_dir[256], path[512];
    assert_int_equal(ga_file_list(a.dir, "job-restart-", "", &names, &n, why, sizeof why), GA_OK);
    assert_int_equal(n, 1);
    snprintf(job_dir, sizeof job_dir, "%s/%s", a.dir, names[0]);
    ga_file_names_free(names, n);
    snprintf(path, sizeof path, "%s/checkpoint-%020d.gack", job_dir, STEPS);
    FILE *f = fopen(path, "r+");
    assert_non_null(f);
    fseek(f, 5000, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, 5000, SEEK_SET);
    fputc(ch ^ 1, f);
    fclose(f);
    server_start(&a, 0, server_args);
    worker *w = &plain[0]; /* its params are the uninterrupted result; a fresh copy comes back */
    static float expect[BIG];
    memcpy(expect, w->big, sizeof expect);
    memset(w->big, 0, sizeof w->big);
    char address[64];
    ga_client_options o = job_options(address, sizeof address, a.port, 0);
    o.resume = true; /* the training finished: the restored job, not a fresh one */
    ga_client *c;
    char msg[512];
    sleep_ms(150); /* the restored ranks' leases (100 ms) lapse: a new incarnation may take one */
    assert_int_equal(ga_client_create(&o, &c, msg, sizeof msg), GA_OK);
    assert_int_equal(ga_client_version(c), STEPS);
    uint64_t sb[2] = {250, 400}, ss[1] = {SMALL};
    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    assert_int_equal(ga_client_add_tensor(c, "big", sb, 2, w->big, &t, NULL), GA_OK);
    assert_int_equal(ga_client_add_tensor(c, "small", ss, 1, w->small, &t, NULL), GA_OK);
    assert_int_equal(ga_client_init(c), GA_OK);
    assert_memory_equal(w->big, expect, sizeof expect);
    ga_client_destroy(c);
    server_kill(&a, SIGTERM);
    assert_int_equal(ga_test_server_log_count(&a, "restore: skipping"), 1);
}

/* Bytes of the job's journal segments in a server's data dir. */
static uint64_t journal_bytes(const char *dir)
{
    char **names, **segs, job_dir[256], path[512], why[256];
    size_t n, m;
    assert_int_equal(ga_file_list(dir, "job-restart-", "", &names, &n, why, sizeof why), GA_OK);
    assert_int_equal(n, 1);
    snprintf(job_dir, sizeof job_dir, "%s/%s", dir, names[0]);
    ga_file_names_free(names, n);
    assert_int_equal(ga_file_list(job_dir, "journal-", ".log", &segs, &m, why, sizeof why), GA_OK);
    uint64_t bytes = 0;
    for (size_t i = 0; i < m; i++) {
        snprintf(path, sizeof path, "%s/%s", job_dir, segs[i]);
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        fseek(f, 0, SEEK_END);
        bytes += (uint64_t)ftell(f);
        fclose(f);
    }
    ga_file_names_free(segs, m);
    return bytes;
}

static worker rolled[W];

/* A rolling update: SIGTERM mid-training (the drain: pushes refused as DRAINING, a final
 * checkpoint, calls still open cancelled), the new server started a second after the old one
 * exited. The workers go on by themselves and end bit-identical to the uninterrupted run
 * (test_sigkill_loses_nothing's), with either durability: with `checkpoint` the open step's
 * pushes are sent again by the workers. */
static void test_sigterm_rolling_restart_loses_nothing(void **state)
{
    (void)state;
    const char *const *args[] = {server_args, checkpoint_args};
    for (size_t a = 0; a < 2; a++) {
        server s = {0};
        const int kills[] = {7, 15};
        const uint32_t delays[] = {0, 10};
        int restores = train_with(kills, delays, 2, rolled, &s, args[a], SIGTERM, 1000);
        assert_true(restores >= 2);
        for (int r = 0; r < W; r++) {
            assert_memory_equal(rolled[r].big, plain[0].big, sizeof plain[0].big);
            assert_memory_equal(rolled[r].small, plain[0].small, sizeof plain[0].small);
            assert_int_equal(rolled[r].stats.versions_lost, 0);
            assert_int_equal(rolled[r].version, STEPS);
        }
    }
}

static worker moved[W];

/* --durability checkpoint: the journal holds no push, and a SIGKILLed server comes back at its
 * newest checkpoint. The workers move back to it by themselves (their pushes of later steps are
 * refused as from the future, or their pulls lose the connection and they push again) and train
 * on. Each ends at STEPS minus the versions it moved back over, which each restart bounds by the
 * checkpoint interval (5, plus one still being written). A worker caught between its push and
 * its pull moves back one version less than the others, so it stays one of its own steps behind
 * them and takes its last step alone after they left: the workers end at most one version
 * apart, and those at the same version hold the same parameters. */
static void test_checkpoint_durability_moves_back(void **state)
{
    (void)state;
    server s = {0};
    const int kills[] = {8, 17};
    const uint32_t delays[] = {0, 10};
    int restores = train(kills, delays, 2, moved, &s, checkpoint_args);
    assert_true(restores >= 2);
    uint64_t vmin = UINT64_MAX, vmax = 0;
    for (int r = 0; r < W; r++) {
        uint64_t lost = moved[r].stats.versions_lost;
        assert_true(lost > 0 && lost <= 2 * 10);
        assert_int_equal(moved[r].version, STEPS - lost);
        if (moved[r].version < vmin) vmin = moved[r].version;
        if (moved[r].version > vmax) vmax = moved[r].version;
        for (int q = 0; q < r; q++) {
            if (moved[q].version != moved[r].version) continue;
            assert_memory_equal(moved[r].big, moved[q].big, sizeof moved[q].big);
            assert_memory_equal(moved[r].small, moved[q].small, sizeof moved[q].small);
        }
    }
    assert_true(vmax - vmin <= 1);
    /* No push reached the journal: W pushes of ~120 KB a step would be megabytes. */
    uint64_t journal = journal_bytes(s.dir);
    assert_true(journal < 64 * 1024);
    print_message("checkpoint durability: rank 0 moved back %llu versions over 2 kills, versions %llu-%llu, "
                  "journal %llu bytes\n",
                  (unsigned long long)moved[0].stats.versions_lost, (unsigned long long)vmin,
                  (unsigned long long)vmax, (unsigned long long)journal);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    snprintf(base_dir, sizeof base_dir, "/tmp/ga_restart_XXXXXX");
    if (!mkdtemp(base_dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigkill_loses_nothing),
        cmocka_unit_test(test_sigterm_rolling_restart_loses_nothing),
        cmocka_unit_test(test_checkpoint_durability_moves_back),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (rc == 0 && !getenv("GA_KEEP")) ga_test_remove_dir(base_dir);
    else fprintf(stderr, "server data and logs kept in %s\n", base_dir);
    return rc;
}
