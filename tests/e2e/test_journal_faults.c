/* The journal against a real gradagg-server, with disk faults injected by fault_io_shim
 * (LD_PRELOAD; trigger files switch them on and off mid-run), SDK clients in this process, and
 * the server SIGKILLed and restarted from its journal alone (no checkpoint):
 *  - a step closed short at its straggler deadline while the journal takes no write: its CLOSE
 *    record is written before anything else once the disk is back (pushes are refused until
 *    then), so the restarted server replays the step as closed and serves the same version;
 *  - --journal-sync=push with fdatasync failing: the push is refused and its record cut, so the
 *    replay holds exactly the acknowledged pushes;
 *  - a rank that left, came back as a new worker, and was taken over by another: each change is
 *    replayed, so the restarted server neither waits for the rank that left nor holds the rank
 *    for a worker that is gone.
 * Gradients are small integers and the server runs SGD with lr 1 on zeros: every sum is exact,
 * so each expected parameter is known. */
#define _GNU_SOURCE /* mkdtemp */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "fault_util.h"
#include "gradagg.h"
#include "test_dirs.h"

#define N 4096
#define DEADLINE_MS 2500

static char base_dir[64], trigger_dir[96];

static void trigger(const char *name, bool on)
{
    char path[160];
    snprintf(path, sizeof path, "%s/%s", trigger_dir, name);
    if (on) {
        int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        close(fd);
    } else {
        assert_int_equal(unlink(path), 0);
    }
}

/* The server with the shim preloaded (ASan would refuse a library loaded before its runtime). */
static void start_server(ga_test_server *s, int port, const char *const *args, int *admin)
{
    const char *asan = getenv("ASAN_OPTIONS");
    char *asan_saved = asan ? strdup(asan) : NULL, asan_new[512];
    snprintf(asan_new, sizeof asan_new, "%s%sverify_asan_link_order=0", asan ? asan : "", asan ? ":" : "");
    setenv("ASAN_OPTIONS", asan_new, 1);
    setenv("LD_PRELOAD", GA_FAULT_IO_SHIM, 1);
    setenv("GA_FAULT_IO_DIR", trigger_dir, 1);
    fault_server_start(s, NULL, "127.0.0.1", port, args, admin);
    unsetenv("LD_PRELOAD");
    unsetenv("GA_FAULT_IO_DIR");
    if (asan_saved) setenv("ASAN_OPTIONS", asan_saved, 1);
    else unsetenv("ASAN_OPTIONS");
    free(asan_saved);
}

static ga_client *join(int port, const char *job, uint32_t rank, uint32_t world, uint32_t deadline_ms, float *params)
{
    char addr[32], msg[512];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    ga_client_options o = GA_CLIENT_OPTIONS_INIT;
    o.server = addr, o.job = job, o.rank = rank, o.world_size = world;
    o.optimizer = GA_SERVER_OPTIM_SGD, o.sgd.lr = 1.0f;
    o.deadline_ms = deadline_ms, o.quorum = 1;
    o.call_timeout_ms = 10000, o.step_timeout_ms = 30000;
    o.max_retries = 400, o.backoff_ms = 20, o.backoff_max_ms = 250;
    ga_client *c = NULL;
    if (ga_client_create(&o, &c, msg, sizeof msg) != GA_OK) fail_msg("join %s rank %u: %s", job, rank, msg);
    uint64_t shape[1] = {N};
    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    int index;
    memset(params, 0, N * sizeof *params);
    assert_int_equal(ga_client_add_tensor(c, "w", shape, 1, params, &t, &index), GA_OK);
    return c;
}

/* Gradient k of a rank: small integers, exact in every sum the test makes. */
static void grad(float *g, uint32_t rank, int k)
{
    for (size_t i = 0; i < N; i++) g[i] = (float)((k + 1) * (int)(1 + i % 5) + (int)rank * 100);
}

/* The parameters after SGD (lr 1) from zeros with these gradients summed in. */
static void check_params(const float *params, const float *sum, const char *what)
{
    for (size_t i = 0; i < N; i++)
        if (params[i] != -sum[i]) fail_msg("%s: element %zu is %g, not %g", what, i, params[i], -sum[i]);
}

static void add_grad(float *sum, uint32_t rank, int k)
{
    float g[N];
    grad(g, rank, k);
    for (size_t i = 0; i < N; i++) sum[i] += g[i];
}

typedef struct step_call {
    pthread_t thread;
    ga_client *c;
    float g[N];
    ga_status st;
} step_call;

static void *step_main(void *arg)
{
    step_call *s = arg;
    const float *grads[1] = {s->g};
    s->st = ga_client_step(s->c, grads);
    return NULL;
}

static void step_start(step_call *s, ga_client *c, uint32_t rank, int k)
{
    s->c = c;
    grad(s->g, rank, k);
    assert_int_equal(pthread_create(&s->thread, NULL, step_main, s), 0);
}

static ga_status step_join(step_call *s)
{
    assert_int_equal(pthread_join(s->thread, NULL), 0);
    return s->st;
}

static ga_status step_now(ga_client *c, uint32_t rank, int k)
{
    step_call s;
    step_start(&s, c, rank, k);
    return step_join(&s);
}

/* Rank 0's gradient k0 and rank 1's k1 in one step (rank 0 on a thread: a step returns once
 * both pushed). */
static void step_both(ga_client *c0, ga_client *c1, int k0, int k1)
{
    step_call a;
    step_start(&a, c0, 0, k0);
    assert_int_equal(step_now(c1, 1, k1), GA_OK);
    assert_int_equal(step_join(&a), GA_OK);
}

/* A server on a fresh data dir with no checkpoints (only the journal restores it). */
static void fresh_server(ga_test_server *s, const char *const *args, int *admin)
{
    *s = (ga_test_server){0};
    ga_test_fresh_dir(s->dir, sizeof s->dir, base_dir);
    start_server(s, 0, args, admin);
}

/* SIGKILL, and a start on the same port and data dir. */
static void kill_restart(ga_test_server *s, const char *const *args, int *admin)
{
    fault_server_stop(s, SIGKILL);
    start_server(s, s->port, args, admin);
}

static void test_short_close_unwritable(void **state)
{
    (void)state;
    ga_test_server s;
    static const char *const args[] = {"--journal-sync=step", "--checkpoint-steps=0", "--checkpoint-seconds=0",
                                       "--log-level=info", NULL};
    int admin;
    fresh_server(&s, args, &admin);
    static float p0[N], p1[N], sum[N];
    ga_client *c0 = join(s.port, "short", 0, 2, DEADLINE_MS, p0), *c1 = join(s.port, "short", 1, 2, DEADLINE_MS, p1);
    assert_int_equal(ga_client_init(c0), GA_OK);
    assert_int_equal(ga_client_init(c1), GA_OK);

    /* Step 0: both ranks. */
    step_call a;
    step_both(c0, c1, 0, 0);
    add_grad(sum, 0, 0), add_grad(sum, 1, 0);
    check_params(p0, sum, "version 1");

    /* Step 1: rank 0 alone; the journal fails before the deadline closes the step short. */
    const char *received = "gradagg_received_bytes_total{ga_job=\"short\",codec=\"none\"}";
    step_start(&a, c0, 0, 1);
    assert_true(fault_wait_metric(admin, received, 3.0 * N * 4, 30.0) >= 3.0 * N * 4);
    trigger("fail-write", true);
    assert_int_equal(step_join(&a), GA_OK);
    add_grad(sum, 0, 1);
    check_params(p0, sum, "version 2 (closed short)");
    assert_true(fault_metric(admin, "gradagg_deadline_closes_total{ga_job=\"short\"}") == 1.0);
    assert_true(ga_test_server_log_count(&s, "the close of step 1 is not journaled yet") >= 1);

    /* Until the CLOSE record is written, nothing is acknowledged. */
    assert_int_equal(step_now(c0, 0, 2), GA_E_IO);
    if (!strstr(ga_client_error(c0), "the close of step 1 is not journaled yet"))
        fail_msg("unexpected error: %s", ga_client_error(c0));
    assert_true(fault_metric(admin, "gradagg_version{ga_job=\"short\"}") == 2.0);

    /* The disk is back: the CLOSE record goes first, then the push (the refused gradient went
     * aside and comes with this one), and the deadline closes step 2 short too. */
    trigger("fail-write", false);
    assert_int_equal(step_now(c0, 0, 3), GA_OK);
    add_grad(sum, 0, 2), add_grad(sum, 0, 3);
    check_params(p0, sum, "version 3");
    assert_true(ga_test_server_log_count(&s, "the close of step 1 is journaled now") == 1);

    /* Killed and restarted from the journal alone: the same version 3. Without the CLOSE record
     * the replay would leave step 1 open, and rank 1's late push would be summed into it. */
    kill_restart(&s, args, &admin);
    assert_true(fault_metric(admin, "gradagg_version{ga_job=\"short\"}") == 3.0);
    assert_int_equal(step_now(c1, 1, 1), GA_OK); /* step 1 closed long ago: late */
    ga_client_stats st;
    ga_client_get_stats(c1, &st);
    assert_int_equal(st.late_pushes, 1);
    check_params(p1, sum, "version 3 pulled by rank 1 after the restart");

    /* Training goes on with both ranks (rank 1's late gradient went into its next push). */
    step_both(c0, c1, 4, 4);
    add_grad(sum, 0, 4), add_grad(sum, 1, 1), add_grad(sum, 1, 4);
    check_params(p0, sum, "version 4, rank 0");
    check_params(p1, sum, "version 4, rank 1");
    ga_client_destroy(c0);
    ga_client_destroy(c1);
    fault_server_stop(&s, SIGTERM);
}

static void test_sync_failure_cuts_record(void **state)
{
    (void)state;
    ga_test_server s;
    static const char *const args[] = {"--journal-sync=push", "--checkpoint-steps=0", "--checkpoint-seconds=0",
                                       NULL};
    int admin;
    fresh_server(&s, args, &admin);
    static float p[N], sum[N];
    ga_client *c = join(s.port, "sync", 0, 1, 0, p);
    assert_int_equal(ga_client_init(c), GA_OK);
    assert_int_equal(step_now(c, 0, 0), GA_OK);
    add_grad(sum, 0, 0);

    /* The record is written but cannot be synced: refused, and cut from the journal. */
    trigger("fail-sync", true);
    assert_int_equal(step_now(c, 0, 1), GA_E_IO);
    if (!strstr(ga_client_error(c), "syncing")) fail_msg("unexpected error: %s", ga_client_error(c));
    trigger("fail-sync", false);
    /* The refused gradient went aside and comes with the next push. */
    assert_int_equal(step_now(c, 0, 2), GA_OK);
    add_grad(sum, 0, 1), add_grad(sum, 0, 2);
    check_params(p, sum, "version 2");

    /* Replayed, a kept record of the refused push would make version 2 hold gradient 1 alone
     * (the acknowledged push of the same step would be a duplicate). */
    kill_restart(&s, args, &admin);
    assert_true(fault_metric(admin, "gradagg_version{ga_job=\"sync\"}") == 2.0);
    assert_int_equal(step_now(c, 0, 3), GA_OK);
    add_grad(sum, 0, 3);
    check_params(p, sum, "version 3 after the restart");
    ga_client_destroy(c);
    fault_server_stop(&s, SIGTERM);
}

static void test_membership_replayed(void **state)
{
    (void)state;
    ga_test_server s;
    static const char *const args[] = {"--checkpoint-steps=0", "--checkpoint-seconds=0", "--member-lease-ms=300",
                                       NULL};
    int admin;
    fresh_server(&s, args, &admin);
    static float p0[N], p1[N], p1b[N], sum[N];
    ga_client *c0 = join(s.port, "members", 0, 2, 0, p0), *c1 = join(s.port, "members", 1, 2, 0, p1);
    assert_int_equal(ga_client_init(c0), GA_OK);
    assert_int_equal(ga_client_init(c1), GA_OK);
    step_both(c0, c1, 0, 0);
    add_grad(sum, 0, 0), add_grad(sum, 1, 0);

    /* Rank 1 leaves; rank 0 trains alone. */
    ga_client_destroy(c1);
    assert_int_equal(step_now(c0, 0, 1), GA_OK);
    add_grad(sum, 0, 1);

    /* Restarted, the server still knows rank 1 left: rank 0's step closes without waiting for it
     * (without the record it would wait out step_timeout_ms and fail). */
    kill_restart(&s, args, &admin);
    assert_true(fault_metric(admin, "gradagg_version{ga_job=\"members\"}") == 2.0);
    assert_int_equal(step_now(c0, 0, 2), GA_OK);
    add_grad(sum, 0, 2);
    check_params(p0, sum, "version 3, rank 0 alone after the restart");

    /* A new worker takes rank 1 back; both train. */
    c1 = join(s.port, "members", 1, 2, 0, p1);
    assert_int_equal(ga_client_init(c1), GA_OK);
    check_params(p1, sum, "version 3, pulled by the new rank 1");
    step_both(c0, c1, 3, 3);
    add_grad(sum, 0, 3), add_grad(sum, 1, 3);

    /* Restarted again, rank 1 is back in: the next step sums both ranks. */
    kill_restart(&s, args, &admin);
    assert_true(fault_metric(admin, "gradagg_version{ga_job=\"members\"}") == 4.0);
    step_both(c0, c1, 4, 4);
    add_grad(sum, 0, 4), add_grad(sum, 1, 4);
    check_params(p0, sum, "version 5, rank 0");
    check_params(p1, sum, "version 5, rank 1");

    /* Rank 1's worker goes silent (abandoned: no Leave, and no heartbeat any more, which every
     * rank_lost_ms / 4 could land inside the lease) and a new one takes the rank once the lease
     * has run out. Restarted, the server holds the rank for the new worker, not the old. */
    ga_client_abandon(c1);
    fault_sleep_ms(600);
    ga_client *c1b = join(s.port, "members", 1, 2, 0, p1b);
    assert_int_equal(ga_client_init(c1b), GA_OK);
    check_params(p1b, sum, "version 5, pulled by the rank's third worker");
    kill_restart(&s, args, &admin);
    step_both(c0, c1b, 5, 5);
    add_grad(sum, 0, 5), add_grad(sum, 1, 5);
    check_params(p0, sum, "version 6, rank 0");
    check_params(p1b, sum, "version 6, rank 1's third worker");
    ga_client_destroy(c0);
    ga_client_destroy(c1b);
    fault_server_stop(&s, SIGTERM);
}

/* After a failed test: no server lives on, and no fault stays switched on. */
static int cleanup(void **state)
{
    (void)state;
    fault_kill_all();
    char path[160];
    snprintf(path, sizeof path, "%s/fail-write", trigger_dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/fail-sync", trigger_dir);
    unlink(path);
    return 0;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    snprintf(base_dir, sizeof base_dir, "/tmp/ga-journal-faults-XXXXXX");
    if (!mkdtemp(base_dir)) return 1;
    snprintf(trigger_dir, sizeof trigger_dir, "%s/triggers", base_dir);
    if (mkdir(trigger_dir, 0700) != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_short_close_unwritable, cleanup),
        cmocka_unit_test_teardown(test_sync_failure_cuts_record, cleanup),
        cmocka_unit_test_teardown(test_membership_replayed, cleanup),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (rc == 0) ga_test_remove_dir(base_dir);
    return rc;
}
