/* A worker's link cut and restored, end to end: gradagg-server in one network namespace, rank 0
 * (a fault_worker process) in another, joined by a veth pair with private 10.78.x addresses;
 * rank 1 runs beside the server. Nothing outside the two namespaces is touched, and they are
 * deleted at the end whatever happens. Needs root and `ip` (skipped otherwise, with a message);
 * the one-way cut also needs `iptables`.
 *  - a short cut (link down 3 s, under the call timeout): the calls in flight stall and go on,
 *    no call fails, every call is counted exactly once;
 *  - a long cut (link down 8 s, over the call timeout): calls fail with a status of unknown
 *    fate, the worker goes on, and after the link is back training completes: every
 *    acknowledged call counted exactly once, the failed ones at most once;
 *  - a one-way cut (the server's packets to the worker dropped 6 s): pushes reach the server
 *    and are counted, their answers are lost; the next call's push of that step is a duplicate
 *    whose gradients the SDK must hold back (test_sdk_faults.c), and the result is exact. */
#define _GNU_SOURCE /* mkdtemp */
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "fault_util.h"
#include "test_dirs.h"

#define W 2
#define UNTIL 30
#define CALLS 64

static char base_dir[64];
static char ns_srv[32], ns_wrk[32], veth_srv[16], veth_wrk[16], ip_srv[32], ip_wrk[32];
static bool net_up, have_iptables;

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    return rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void net_down(void)
{
    if (!net_up) return;
    sh("ip netns del %s 2>/dev/null", ns_wrk); /* the veth pair goes with it */
    sh("ip netns del %s 2>/dev/null", ns_srv);
    net_up = false;
}

/* Two namespaces joined by a veth pair; false (and nothing left) when any step fails. */
static bool net_make(void)
{
    unsigned id = (unsigned)getpid() % 100000u, subnet = 20u + (unsigned)getpid() % 200u;
    snprintf(ns_srv, sizeof ns_srv, "ga-fs-%u", id);
    snprintf(ns_wrk, sizeof ns_wrk, "ga-fw-%u", id);
    snprintf(veth_srv, sizeof veth_srv, "gfs%u", id);
    snprintf(veth_wrk, sizeof veth_wrk, "gfw%u", id);
    snprintf(ip_srv, sizeof ip_srv, "10.78.%u.1", subnet);
    snprintf(ip_wrk, sizeof ip_wrk, "10.78.%u.2", subnet);
    net_up = true;
    bool ok = sh("ip netns add %s", ns_srv) == 0 && sh("ip netns add %s", ns_wrk) == 0 &&
              sh("ip link add %s netns %s type veth peer name %s netns %s", veth_srv, ns_srv, veth_wrk, ns_wrk) ==
                  0 &&
              sh("ip -n %s addr add %s/24 dev %s", ns_srv, ip_srv, veth_srv) == 0 &&
              sh("ip -n %s addr add %s/24 dev %s", ns_wrk, ip_wrk, veth_wrk) == 0 &&
              sh("ip -n %s link set lo up && ip -n %s link set lo up", ns_srv, ns_wrk) == 0 &&
              sh("ip -n %s link set %s up && ip -n %s link set %s up", ns_srv, veth_srv, ns_wrk, veth_wrk) == 0;
    if (!ok) net_down();
    return ok;
}

static int group_setup(void **state)
{
    (void)state;
    if (geteuid() != 0 || sh("ip -V >/dev/null 2>&1") != 0) return 0;
    if (!net_make()) return 0;
    have_iptables = sh("ip netns exec %s iptables -S >/dev/null 2>&1", ns_wrk) == 0;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    fault_kill_all();
    net_down();
    return 0;
}

static int cleanup(void **state)
{
    (void)state;
    fault_kill_all();
    if (net_up) { /* the link comes back for the next test */
        sh("ip -n %s link set %s up", ns_wrk, veth_wrk);
        if (have_iptables) sh("ip netns exec %s iptables -F INPUT", ns_wrk);
    }
    return 0;
}

typedef enum cut_kind { CUT_SHORT, CUT_LONG, CUT_ONE_WAY } cut_kind;

/* The largest "ms" of a worker's call lines. */
static double longest_call_ms(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    double most = 0.0;
    while (f && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, " ms ");
        if (strncmp(line, "call ", 5) == 0 && p && strtod(p + 4, NULL) > most) most = strtod(p + 4, NULL);
    }
    if (f) fclose(f);
    return most;
}

static void cut_and_restore(cut_kind kind)
{
    if (!net_up) {
        print_message("skipped: needs root, `ip` and network namespaces (ip netns add)\n");
        skip();
    }
    if (kind == CUT_ONE_WAY && !have_iptables) {
        print_message("skipped: the one-way cut needs iptables in a network namespace\n");
        skip();
    }
    static const char *const names[] = {"cut-short", "cut-long", "cut-one-way"};
    const char *job = names[kind];
    ga_test_server s = {0};
    ga_test_fresh_dir(s.dir, sizeof s.dir, base_dir);
    /* A cut shorter than --rank-lost-ms is a stall, not a lost rank (test_failures.py: longer). */
    static const char *const sargs[] = {"--log-level=info", "--rank-lost-ms=30000", NULL};
    fault_server_start(&s, ns_srv, ip_srv, 0, sargs, NULL);
    char addr[64], until[16], calls[16];
    snprintf(addr, sizeof addr, "%s:%d", ip_srv, s.port);
    snprintf(until, sizeof until, "%d", UNTIL);
    snprintf(calls, sizeof calls, "%d", CALLS);
    /* The one-way cut uses a push small enough to leave without the server's TCP ACKs. */
    const char *elements = kind == CUT_ONE_WAY ? "1024" : "262144";
    const char *timeout = kind == CUT_SHORT ? "10000" : "2000";
    char out[W][160], params[W][160];
    pid_t pid[W];
    for (uint32_t r = 0; r < W; r++) {
        snprintf(out[r], sizeof out[r], "%s/%s-r%u.out", s.dir, job, r);
        snprintf(params[r], sizeof params[r], "%s/%s-r%u.bin", s.dir, job, r);
        char rank[8];
        snprintf(rank, sizeof rank, "%u", r);
        const char *argv[] = {GA_FAULT_WORKER_BIN, "--server", addr, "--job", job, "--rank", rank, "--world", "2",
                              "--until", until, "--max-calls", calls, "--elements", elements, "--pause-ms", r == 0 ? "200" : "50",
                              "--call-timeout-ms", timeout, "--step-timeout-ms", "60000", "--retries", "100",
                              "--keep-going", "--out", params[r], NULL};
        pid[r] = fault_spawn(argv, out[r], r == 0 ? ns_wrk : ns_srv);
    }
    /* Rank 0 pauses 200 ms before each call: the cut begins there, before its next push. */
    if (!fault_wait_lines(out[0], "call ", 5, 60.0)) fail_msg("rank 0 did not get through 5 calls: see %s", out[0]);
    double t0 = ga_test_now_s();
    if (kind == CUT_ONE_WAY) {
        assert_int_equal(sh("ip netns exec %s iptables -A INPUT -j DROP", ns_wrk), 0);
        fault_sleep_ms(6000);
        assert_int_equal(sh("ip netns exec %s iptables -F INPUT", ns_wrk), 0);
    } else {
        assert_int_equal(sh("ip -n %s link set %s down", ns_wrk, veth_wrk), 0);
        fault_sleep_ms(kind == CUT_SHORT ? 3000 : 8000);
        assert_int_equal(sh("ip -n %s link set %s up", ns_wrk, veth_wrk), 0);
    }
    double cut_s = ga_test_now_s() - t0;
    for (uint32_t r = 0; r < W; r++)
        if (fault_wait(pid[r], 120.0) != 0) fail_msg("rank %u did not finish: see %s", r, out[r]);
    fault_server_stop(&s, SIGTERM);

    static fault_call log[W][CALLS];
    memset(log, 0, sizeof log);
    fault_call *by_rank[W] = {log[0], log[1]};
    for (uint32_t r = 0; r < W; r++) assert_true(fault_read_calls(out[r], 0, log[r], CALLS));
    int failed = fault_count_lines(out[0], "error step ");
    uint64_t counted = fault_check_params(params[0], kind == CUT_ONE_WAY ? 1024 : 262144, W, CALLS, by_rank);
    assert_true(fault_same_file(params[0], params[1]));
    int unknown_counted = 0, stale = 0;
    for (int k = 0; k < CALLS; k++)
        if (log[0][k].seen && log[0][k].unknown) unknown_counted++;
    FILE *f = fopen(out[0], "r");
    char line[512];
    unsigned long long late = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "done version %*u calls %*u retries %*u rejoins %*u late %llu", &late) == 1) stale = (int)late;
    if (f) fclose(f);
    print_message("%s: cut %.1f s, rank 0's longest call %.0f ms, %d calls failed (fate unknown: %d), %d pushes "
                  "held back as duplicates, %llu calls counted, %d broken push streams on the server\n",
                  job, cut_s, longest_call_ms(out[0]), failed, unknown_counted, stale, (unsigned long long)counted,
                  ga_test_server_log_count(&s, "broke before its end"));
    if (kind == CUT_SHORT) {
        /* Stalled, not failed: every call went through, and one waited out the cut. */
        assert_int_equal(failed, 0);
        assert_int_equal(counted, (uint64_t)W * UNTIL);
        assert_true(longest_call_ms(out[0]) >= 2000.0);
    } else {
        assert_true(failed >= 1);
    }
}

static void test_link_cut_short(void **state)
{
    (void)state;
    cut_and_restore(CUT_SHORT);
}

static void test_link_cut_long(void **state)
{
    (void)state;
    cut_and_restore(CUT_LONG);
}

static void test_link_cut_one_way(void **state)
{
    (void)state;
    cut_and_restore(CUT_ONE_WAY);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    snprintf(base_dir, sizeof base_dir, "/tmp/ga_netfault_XXXXXX");
    if (!mkdtemp(base_dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_link_cut_short, cleanup),
        cmocka_unit_test_teardown(test_link_cut_long, cleanup),
        cmocka_unit_test_teardown(test_link_cut_one_way, cleanup),
    };
    int rc = cmocka_run_group_tests(tests, group_setup, group_teardown);
    net_down();
    if (rc == 0 && !getenv("GA_KEEP")) ga_test_remove_dir(base_dir);
    else fprintf(stderr, "server data and logs kept in %s\n", base_dir);
    return rc;
}
