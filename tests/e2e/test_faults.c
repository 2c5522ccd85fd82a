/* Faults end to end, with the real gradagg-server and fault_worker processes (fault_grad.h:
 * gradients whose sums are exact, one indicator slot per (rank, call), so a lost or
 * double-counted step shows in the final parameters):
 *  - a worker SIGKILLed while its push stream is open (a relay stalls the stream half-way):
 *    the server discards the partial push (gradagg_broken_streams_total, a log line); with a
 *    straggler deadline and quorum the step closes without it, without one the job waits; the
 *    worker restarted with a new incarnation takes its rank again and training ends with
 *    exactly what was acknowledged;
 *  - a full data directory (a small tmpfs; root only, skipped otherwise): a checkpoint that
 *    does not fit fails (gradagg_checkpoint_failures_total, a log line), the previous one stays
 *    valid, pushes and pulls go on, and the next checkpoint succeeds once space is back; then a
 *    journal that cannot take a push refuses it (GA_E_IO, never acknowledged), the server is
 *    SIGKILLed while the disk is full and restarted once space is back, and nothing
 *    acknowledged is lost.
 * The server restarted mid-step from its checkpoint is test_kill_restart's. */
#define _GNU_SOURCE /* mkdtemp, accept4, pipe2 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "fault_util.h"
#include "persist/checkpoint.h"
#include "persist/fileio.h"
#include "test_dirs.h"

static char base_dir[64];

/* ---- a worker killed mid-push ---- */

#define KW 3
#define KN (1u << 20) /* dense elements: a 4 MiB push (codec none) */
#define KUNTIL 10
#define KCALLS 32
#define KCHUNK_KB 256

typedef struct worker_proc {
    pid_t pid;
    char out[2][160]; /* stdout of its first and its restarted process */
    char params[160];
} worker_proc;

static pid_t start_worker(worker_proc *w, int proc, const char *server, const char *job, uint32_t rank,
                          uint32_t world, const char *const *extra)
{
    char r[16], wd[16];
    snprintf(r, sizeof r, "%u", rank);
    snprintf(wd, sizeof wd, "%u", world);
    const char *argv[48] = {GA_FAULT_WORKER_BIN, "--server", server, "--job", job, "--rank", r, "--world", wd,
                            "--out", w->params};
    int n = 11;
    for (int i = 0; extra && extra[i] && n < 47; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    return fault_spawn(argv, w->out[proc], NULL);
}

/* The messages of the last "Push stream ... broke" line in the log, or -1 without one. */
static long broken_messages_logged(const ga_test_server *s)
{
    FILE *f = fopen(s->log, "r");
    if (!f) return -1;
    char line[1024];
    long n = -1;
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "Push stream from ");
        const char *q = p ? strstr(p, "broke before its end: ") : NULL;
        if (q) n = strtol(q + strlen("broke before its end: "), NULL, 10);
    }
    fclose(f);
    return n;
}

/* The messages discarded by the last broken Push stream the server logged; waits up to 10 s for
 * the line (the server counts the stream in its metrics before it writes the line). -1: none. */
static long broken_messages(const ga_test_server *s)
{
    double end = ga_test_now_s() + 10.0;
    long n;
    while ((n = broken_messages_logged(s)) < 0 && ga_test_now_s() < end) fault_sleep_ms(20);
    return n;
}

static fault_proxy proxy;
static bool proxy_running;

/* After a failed test: no process or relay of it lives on into the next. */
static int cleanup(void **state)
{
    (void)state;
    fault_kill_all();
    if (proxy_running) fault_proxy_stop(&proxy);
    proxy_running = false;
    return 0;
}

static void killed_mid_push(bool with_deadline)
{
    ga_test_server s = {0};
    int admin;
    ga_test_fresh_dir(s.dir, sizeof s.dir, base_dir);
    /* The killed rank's replacement comes back before it could be lost (test_failures.py: a
     * rank that does not), even under valgrind. */
    static const char *const sargs[] = {"--member-lease-ms=300", "--rank-lost-ms=120000", "--log-level=info", NULL};
    fault_server_start(&s, NULL, "127.0.0.1", 0, sargs, &admin);
    fault_proxy_start(&proxy, s.port);
    proxy_running = true;

    const char *job = with_deadline ? "kill-deadline" : "kill-wait";
    char direct[64], relayed[64], until[16], calls[16], elems[16], chunk[16];
    snprintf(direct, sizeof direct, "127.0.0.1:%d", s.port);
    snprintf(relayed, sizeof relayed, "127.0.0.1:%d", proxy.port);
    snprintf(until, sizeof until, "%d", KUNTIL);
    snprintf(calls, sizeof calls, "%d", KCALLS);
    snprintf(elems, sizeof elems, "%u", KN);
    snprintf(chunk, sizeof chunk, "%d", KCHUNK_KB);
    /* Rank 0 pauses before each call, so the relay's byte count can be read between pushes. */
    const char *common[] = {"--until", until, "--max-calls", calls, "--elements", elems, "--chunk-kb", chunk,
                            "--deadline-ms", with_deadline ? "2000" : "0", "--quorum", with_deadline ? "2" : "0",
                            "--held-wait-ms", "10000", NULL, NULL, NULL, NULL, NULL};
    const size_t ncommon = 14;
    worker_proc w[KW];
    memset(w, 0, sizeof w);
    for (uint32_t r = 0; r < KW; r++) {
        snprintf(w[r].out[0], sizeof w[r].out[0], "%s/%s-r%u-0.out", s.dir, job, r);
        snprintf(w[r].out[1], sizeof w[r].out[1], "%s/%s-r%u-1.out", s.dir, job, r);
        snprintf(w[r].params, sizeof w[r].params, "%s/%s-r%u.bin", s.dir, job, r);
    }
    common[ncommon] = "--pause-ms", common[ncommon + 1] = "500";
    w[0].pid = start_worker(&w[0], 0, relayed, job, 0, KW, common);
    common[ncommon] = NULL;
    for (uint32_t r = 1; r < KW; r++) w[r].pid = start_worker(&w[r], 0, direct, job, r, KW, common);

    /* After rank 0's third call, stall its relay half-way through the next push. */
    if (!fault_wait_lines(w[0].out[0], "call ", 3, 60.0)) fail_msg("rank 0 did not get through 3 calls");
    atomic_store(&proxy.hold_at, atomic_load(&proxy.c2s) + (uint64_t)KN * 2u);
    double end = ga_test_now_s() + 30.0;
    while (!atomic_load(&proxy.held) && ga_test_now_s() < end) fault_sleep_ms(5);
    assert_true(atomic_load(&proxy.held));
    fault_sleep_ms(300); /* the server reads what the relay passed on */
    int killed = fault_count_lines(w[0].out[0], "call "); /* the call in flight */
    assert_true(killed >= 3);
    kill(w[0].pid, SIGKILL);
    assert_int_equal(fault_wait(w[0].pid, 10.0), -1);
    fault_proxy_cut(&proxy); /* its connection goes with it */

    /* The partial push was discarded: one broken Push stream that had brought chunks. */
    assert_true(fault_wait_metric(admin, "gradagg_broken_streams_total{method=\"Push\"}", 1, 10.0) == 1.0);
    assert_true(broken_messages(&s) > 0);
    char series[160];
    snprintf(series, sizeof series, "gradagg_version{ga_job=\"%s\"}", job);
    if (with_deadline) {
        /* The step closes at the deadline with the 2 ranks left. */
        snprintf(series, sizeof series, "gradagg_deadline_closes_total{ga_job=\"%s\"}", job);
        assert_true(fault_wait_metric(admin, series, 1, 20.0) >= 1.0);
        snprintf(series, sizeof series, "gradagg_version{ga_job=\"%s\"}", job);
        assert_true(fault_wait_metric(admin, series, killed + 1, 10.0) >= killed + 1);
    } else {
        /* Without a deadline the job waits for rank 0: the version stays, the others wait. */
        fault_sleep_ms(1500);
        assert_true(fault_metric(admin, series) == (double)killed);
        for (uint32_t r = 1; r < KW; r++) assert_int_equal(fault_count_lines(w[r].out[0], "call "), killed);
        snprintf(series, sizeof series, "gradagg_deadline_closes_total{ga_job=\"%s\"}", job);
        assert_true(fault_metric(admin, series) <= 0.0);
    }

    /* Rank 0 comes back as a new process (a new incarnation), straight to the server. */
    char first[16];
    snprintf(first, sizeof first, "%d", killed + 1);
    common[ncommon] = "--first-call", common[ncommon + 1] = first;
    w[0].pid = start_worker(&w[0], 1, direct, job, 0, KW, common);
    for (uint32_t r = 0; r < KW; r++)
        if (fault_wait(w[r].pid, 120.0) != 0) fail_msg("rank %u did not finish: see %s", r, w[r].out[r == 0]);
    fault_proxy_stop(&proxy);
    proxy_running = false;
    assert_int_equal(ga_test_server_log_count(&s, "rank 0 taken by incarnation"), 1);
    assert_true(fault_metric(admin, "gradagg_broken_streams_total{method=\"Push\"}") == 1.0);
    snprintf(series, sizeof series, "gradagg_version{ga_job=\"%s\"}", job);
    assert_true(fault_metric(admin, series) == KUNTIL);
    snprintf(series, sizeof series, "gradagg_deadline_closes_total{ga_job=\"%s\"}", job);
    double closes = fault_metric(admin, series);
    fault_server_stop(&s, SIGTERM);

    /* Exactly what was acknowledged: every call counted once, the killed one never. */
    static fault_call log[KW][KCALLS];
    memset(log, 0, sizeof log);
    fault_call *by_rank[KW];
    for (uint32_t r = 0; r < KW; r++) {
        by_rank[r] = log[r];
        assert_true(fault_read_calls(w[r].out[0], 0, log[r], KCALLS) == (r != 0));
    }
    assert_true(fault_read_calls(w[0].out[1], 1, log[0], KCALLS));
    assert_false(log[0][killed].seen);
    uint64_t counted = fault_check_params(w[0].params, KN, KW, KCALLS, by_rank);
    for (uint32_t r = 1; r < KW; r++) assert_true(fault_same_file(w[0].params, w[r].params));
    print_message("%s: rank 0 killed in call %d (%ld chunks discarded), %llu calls counted, %g deadline closes\n",
                  job, killed, broken_messages(&s), (unsigned long long)counted, closes);
    if (!with_deadline) assert_int_equal(counted, (uint64_t)KW * KUNTIL);
}

static void test_worker_killed_mid_push_deadline(void **state)
{
    (void)state;
    killed_mid_push(true);
}

static void test_worker_killed_mid_push_waits(void **state)
{
    (void)state;
    killed_mid_push(false);
}

/* ---- a full data directory ---- */

#define DW 2
#define DN (1u << 16)      /* dense: a 256 KiB push */
#define DBALLAST (2u << 20) /* 8 MiB of parameters that never change: checkpoints are large */
#define DUNTIL 40
#define DCALLS 120

static char mnt[80];
static bool mounted;

static int unmount_disk(void **state)
{
    cleanup(state);
    if (mounted && umount2(mnt, MNT_DETACH) != 0) fprintf(stderr, "umount %s: %s\n", mnt, strerror(errno));
    mounted = false;
    return 0;
}

static uint64_t free_bytes(const char *path)
{
    struct statvfs v;
    assert_int_equal(statvfs(path, &v), 0);
    return (uint64_t)v.f_bavail * v.f_frsize;
}

/* The filler file takes all free space but `leave` bytes (0: all of it). The server writes while
 * this runs, so an allocation that loses the race for the last bytes (ENOSPC) reads the free
 * space again and retries. */
static void fill(const char *path, uint64_t leave)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    int rc = ENOSPC;
    for (int attempt = 0; attempt < 100 && rc == ENOSPC; attempt++) {
        struct stat sb;
        assert_int_equal(fstat(fd, &sb), 0);
        uint64_t avail = free_bytes(mnt);
        rc = avail > leave ? posix_fallocate(fd, 0, sb.st_size + (off_t)(avail - leave)) : 0;
    }
    assert_int_equal(rc, 0);
    /* tmpfs may keep a page or two: take whatever is left, a page at a time. */
    if (leave == 0) {
        static char page[4096];
        while (write(fd, page, sizeof page) > 0) {
        }
    }
    close(fd);
}

typedef struct ckpt_count {
    uint64_t version;
    size_t buffers;
    ga_ckpt_meta *meta; /* kept until the load returns: its buffers are read against it */
} ckpt_count;

static ga_status count_begin(void *arg, ga_ckpt_meta *m, char *why, size_t cap)
{
    (void)why, (void)cap;
    ((ckpt_count *)arg)->version = m->version;
    ((ckpt_count *)arg)->meta = m;
    return GA_OK;
}

static ga_status count_buffer(void *arg, uint32_t t, ga_store_buf b, const float *v, char *why, size_t cap)
{
    (void)t, (void)b, (void)v, (void)why, (void)cap;
    ((ckpt_count *)arg)->buffers++;
    return GA_OK;
}

/* The job directory's checkpoints, newest first: their count, and the newest's version after
 * it loaded whole (checksum and all). No temp file is left behind. */
static size_t newest_checkpoint(const char *data_dir, uint64_t *version)
{
    char **names, why[256], dir[256], path[512];
    size_t n;
    assert_int_equal(ga_file_list(data_dir, "job-disk-", "", &names, &n, why, sizeof why), GA_OK);
    assert_int_equal(n, 1);
    snprintf(dir, sizeof dir, "%s/%s", data_dir, names[0]);
    ga_file_names_free(names, n);
    assert_int_equal(ga_file_list(dir, ".checkpoint-", "", &names, &n, why, sizeof why), GA_OK);
    if (n) fail_msg("a checkpoint temp file was left: %s", names[0]);
    ga_file_names_free(names, n);
    assert_int_equal(ga_ckpt_list(dir, &names, &n, why, sizeof why), GA_OK);
    if (n) {
        snprintf(path, sizeof path, "%s/%s", dir, names[0]);
        ckpt_count c = {0, 0, NULL};
        ga_ckpt_loader l = {count_begin, count_buffer, &c};
        ga_status st = ga_ckpt_load(path, &l, why, sizeof why);
        ga_ckpt_meta_free(c.meta);
        if (st != GA_OK) fail_msg("%s does not load: %s", path, why);
        assert_true(c.buffers >= 3);
        *version = c.version;
    }
    ga_file_names_free(names, n);
    return n;
}

static void test_data_dir_full(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        print_message("skipped: a full data directory needs a tmpfs mount (root)\n");
        skip();
    }
    snprintf(mnt, sizeof mnt, "%s/disk", base_dir);
    assert_int_equal(mkdir(mnt, 0750), 0);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=64m") != 0) {
        print_message("skipped: cannot mount a tmpfs on %s: %s\n", mnt, strerror(errno));
        skip();
    }
    mounted = true;
    ga_test_server s = {0};
    snprintf(s.dir, sizeof s.dir, "%s/data", mnt);
    assert_int_equal(mkdir(s.dir, 0750), 0);
    char filler[128];
    snprintf(filler, sizeof filler, "%s/filler", mnt);
    /* The log stays off the small disk: a full disk hits only checkpoints and the journal. */
    snprintf(s.log, sizeof s.log, "%s/disk-server.log", base_dir);
    int admin;
    static const char *const sargs[] = {"--checkpoint-steps=2", "--checkpoint-keep=1", "--journal-sync=step",
                                        "--member-lease-ms=500", "--log-level=info", NULL};
    fault_server_start(&s, NULL, "127.0.0.1", 0, sargs, &admin);
    char addr[64], until[16], calls[16], elems[16], ballast[16];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", s.port);
    snprintf(until, sizeof until, "%d", DUNTIL);
    snprintf(calls, sizeof calls, "%d", DCALLS);
    snprintf(elems, sizeof elems, "%u", DN);
    snprintf(ballast, sizeof ballast, "%u", DBALLAST);
    const char *extra[] = {"--until", until, "--max-calls", calls, "--elements", elems, "--ballast", ballast,
                           "--pause-ms", "150", "--keep-going", "--retries", "1000", "--backoff-max-ms", "200",
                           "--held-wait-ms", "10000", NULL};
    worker_proc w[DW];
    memset(w, 0, sizeof w);
    for (uint32_t r = 0; r < DW; r++) {
        snprintf(w[r].out[0], sizeof w[r].out[0], "%s/disk-r%u.out", base_dir, r);
        snprintf(w[r].params, sizeof w[r].params, "%s/disk-r%u.bin", base_dir, r);
        w[r].pid = start_worker(&w[r], 0, addr, "disk", r, DW, extra);
    }
    const char *ck_ok = "gradagg_checkpoints_total{ga_job=\"disk\"}";
    const char *ck_fail = "gradagg_checkpoint_failures_total{ga_job=\"disk\"}";
    const char *version = "gradagg_version{ga_job=\"disk\"}";
    assert_true(fault_wait_metric(admin, ck_ok, 2, 60.0) >= 2);

    /* 1. Room for the journal, not for a checkpoint (8 MiB of ballast alone). */
    fill(filler, 4u << 20);
    assert_true(fault_wait_metric(admin, ck_fail, 1, 30.0) >= 1);
    assert_true(ga_test_server_log_count(&s, "failed, the previous one is kept") >= 1);
    double ok_before = fault_metric(admin, ck_ok), v_fail = fault_metric(admin, version);
    uint64_t kept;
    assert_int_equal(newest_checkpoint(s.dir, &kept), 1);
    assert_true(kept < (uint64_t)v_fail);
    /* Pushes and pulls go on while checkpoints fail. */
    assert_true(fault_wait_metric(admin, version, v_fail + 2, 30.0) >= v_fail + 2);
    assert_true(fault_metric(admin, ck_ok) == ok_before);
    print_message("disk full: checkpoint failures %g, kept version %llu, training went on to version %g\n",
                  fault_metric(admin, ck_fail), (unsigned long long)kept, fault_metric(admin, version));

    /* 2. Space comes back: the next checkpoint is written. */
    assert_int_equal(unlink(filler), 0);
    assert_true(fault_wait_metric(admin, ck_ok, ok_before + 1, 30.0) >= ok_before + 1);
    uint64_t newest;
    assert_int_equal(newest_checkpoint(s.dir, &newest), 1);
    assert_true(newest > kept);

    /* 3. Not even a journal record fits: pushes are refused (GA_E_IO), never acknowledged. */
    fill(filler, 0);
    assert_true(fault_wait_metric(admin, "gradagg_rejected_requests_total{reason=\"io\"}", 2, 30.0) >= 2);
    double v_full = fault_metric(admin, version);
    fault_sleep_ms(1000);
    assert_true(fault_metric(admin, version) <= v_full + 1);
    /* The server dies while the disk is full, and starts again once there is room. */
    fault_server_stop(&s, SIGKILL);
    assert_int_equal(unlink(filler), 0);
    fault_server_start(&s, NULL, "127.0.0.1", s.port, sargs, &admin);
    for (uint32_t r = 0; r < DW; r++)
        if (fault_wait(w[r].pid, 180.0) != 0) fail_msg("rank %u did not finish: see %s", r, w[r].out[0]);
    assert_true(fault_metric(admin, version) == DUNTIL);
    fault_server_stop(&s, SIGTERM);
    assert_true(ga_test_server_log_count(&s, "restore: job 'disk'") >= 1);

    static fault_call log[DW][DCALLS];
    memset(log, 0, sizeof log);
    fault_call *by_rank[DW];
    int refused = 0;
    for (uint32_t r = 0; r < DW; r++) {
        by_rank[r] = log[r];
        assert_true(fault_read_calls(w[r].out[0], 0, log[r], DCALLS));
        refused += fault_count_lines(w[r].out[0], "error step ");
    }
    assert_true(refused >= 1);
    assert_true(fault_count_lines(w[0].out[0], "call ") + fault_count_lines(w[1].out[0], "call ") > 0);
    uint64_t counted = fault_check_params(w[0].params, DN, DW, DCALLS, by_rank);
    assert_true(fault_same_file(w[0].params, w[1].params));
    print_message("disk full: %d refused steps, %llu calls counted, all exactly\n", refused,
                  (unsigned long long)counted);
    unmount_disk(NULL);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    snprintf(base_dir, sizeof base_dir, "/tmp/ga_faults_XXXXXX");
    if (!mkdtemp(base_dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_worker_killed_mid_push_deadline, cleanup),
        cmocka_unit_test_teardown(test_worker_killed_mid_push_waits, cleanup),
        cmocka_unit_test_teardown(test_data_dir_full, unmount_disk),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (rc == 0 && !getenv("GA_KEEP")) ga_test_remove_dir(base_dir);
    else fprintf(stderr, "server data and logs kept in %s\n", base_dir);
    return rc;
}
