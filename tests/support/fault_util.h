/* Helpers of the end-to-end fault tests (test_faults.c, test_netfault.c): the server and the
 * fault_worker processes started with posix_spawn (optionally inside a network namespace, by
 * `ip netns exec`), their output read back, a /metrics scrape, a TCP relay that can stall a
 * stream mid-way, and the exact check of a job's final parameters (fault_grad.h).
 * Include after cmocka.h; needs GA_SERVER_BIN and GA_FAULT_WORKER_BIN. */
#ifndef GA_FAULT_UTIL_H
#define GA_FAULT_UTIL_H

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "fault_grad.h"
#include "server_proc.h"

#ifndef GA_FAULT_WORKER_BIN
#error "GA_FAULT_WORKER_BIN (the fault_worker binary) must be defined by the build"
#endif

static inline void fault_sleep_ms(uint32_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- processes ---- */

/* The processes a test started and has not reaped: fault_kill_all ends them when a test fails
 * half-way (fail_msg leaves the test at once). */
static pid_t fault_live[32];

static inline void fault_track(pid_t pid)
{
    for (int i = 0; i < 32; i++)
        if (fault_live[i] == 0) {
            fault_live[i] = pid;
            return;
        }
}

static inline void fault_untrack(pid_t pid)
{
    for (int i = 0; i < 32; i++)
        if (fault_live[i] == pid) fault_live[i] = 0;
}

static inline void fault_kill_all(void)
{
    for (int i = 0; i < 32; i++) {
        if (fault_live[i] <= 0) continue;
        kill(fault_live[i], SIGKILL);
        while (waitpid(fault_live[i], NULL, 0) < 0 && errno == EINTR) {
        }
        fault_live[i] = 0;
    }
}

/* argv (NULL-terminated) started with stdout and stderr appended to out_path, inside network
 * namespace netns when it is not NULL. Returns the pid (of the program itself: ip netns exec
 * execs it). */
static inline pid_t fault_spawn(const char *const *argv, const char *out_path, const char *netns)
{
    const char *full[48];
    int n = 0;
    if (netns) {
        full[n++] = "ip", full[n++] = "netns", full[n++] = "exec", full[n++] = netns;
    }
    for (int i = 0; argv[i] && n < 47; i++) full[n++] = argv[i];
    full[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, out_path, O_WRONLY | O_CREAT | O_APPEND, 0640);
    posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
    pid_t pid;
    int rc = posix_spawnp(&pid, full[0], &fa, NULL, (char *const *)full, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) fail_msg("cannot start %s: %s", full[0], strerror(rc));
    fault_track(pid);
    return pid;
}

/* Waits up to timeout_s for pid; its exit code, or -1 after a timeout (it is SIGKILLed then)
 * or a signal. */
static inline int fault_wait(pid_t pid, double timeout_s)
{
    double end = ga_test_now_s() + timeout_s;
    int status;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) {
            fault_untrack(pid);
            return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        }
        if (r < 0 && errno != EINTR) return -1;
        if (ga_test_now_s() > end) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            fault_untrack(pid);
            return -1;
        }
        fault_sleep_ms(10);
    }
}

/* Lines of path that start with prefix. */
static inline int fault_count_lines(const char *path, const char *prefix)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, prefix, strlen(prefix)) == 0) n++;
    fclose(f);
    return n;
}

/* Waits up to timeout_s until path has at least n lines starting with prefix. */
static inline bool fault_wait_lines(const char *path, const char *prefix, int n, double timeout_s)
{
    double end = ga_test_now_s() + timeout_s;
    while (fault_count_lines(path, prefix) < n)
        if (ga_test_now_s() > end) return false;
        else fault_sleep_ms(5);
    return true;
}

/* The server on host:port (inside netns when not NULL), its data dir s->dir, stderr appended
 * to s->log (s->dir/server.log when empty); with admin_port != NULL also the admin listener on 127.0.0.1:0 and its
 * port. The extra args come after the defaults, so they win. */
static inline void fault_server_start(ga_test_server *s, const char *netns, const char *host, int port,
                                      const char *const *args, int *admin_port)
{
    char listen[64];
    snprintf(listen, sizeof listen, "%s:%d", host, port);
    if (!s->log[0]) snprintf(s->log, sizeof s->log, "%s/server.log", s->dir);
    const char *argv[48] = {"ip", "netns", "exec", netns ? netns : ""};
    int argc = netns ? 4 : 0;
    argv[argc++] = GA_SERVER_BIN, argv[argc++] = "--listen", argv[argc++] = listen;
    argv[argc++] = "--data-dir", argv[argc++] = s->dir;
    argv[argc++] = admin_port ? "--admin-listen=127.0.0.1:0" : "--admin-listen=";
    for (int i = 0; args && args[i] && argc < 47; i++) argv[argc++] = args[i];
    argv[argc] = NULL;
    s->pid = ga_test_spawn(argv, s->log, &s->out);
    fault_track(s->pid);
    for (int want = admin_port ? 2 : 1, got = 0; got < want; got++) {
        char line[256];
        ga_test_read_line(s->out, line, sizeof line, 20.0);
        const char *colon = strrchr(line, ':');
        int *into = got == 0 ? &s->port : admin_port;
        if (!colon || !strstr(line, got == 0 ? "listening on" : "admin on") || sscanf(colon + 1, "%d", into) != 1)
            fail_msg("server did not start: '%s' (log %s)", line, s->log);
    }
}

/* Stops a server of fault_server_start (ga_test_server_stop: after SIGTERM it must exit 0). */
static inline void fault_server_stop(ga_test_server *s, int sig)
{
    fault_untrack(s->pid);
    ga_test_server_stop(s, sig);
}

/* ---- metrics ---- */

/* The value of one series of the server's /metrics ("name" or "name{labels}", exactly as
 * written), or -1 when the scrape lacks it. */
static inline double fault_metric(int admin_port, const char *series)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)admin_port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) fail_msg("cannot reach the admin port");
    static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert_int_equal(write(fd, req, sizeof req - 1), (ssize_t)(sizeof req - 1));
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap + 1);
    assert_non_null(buf);
    ssize_t r;
    while (n < cap && (r = read(fd, buf + n, cap - n)) > 0) n += (size_t)r;
    close(fd);
    buf[n] = '\0';
    double v = -1.0;
    size_t len = strlen(series);
    for (char *p = buf; (p = strstr(p, series)) != NULL; p += len) {
        if ((p == buf || p[-1] == '\n') && p[len] == ' ') {
            v = strtod(p + len + 1, NULL);
            break;
        }
    }
    free(buf);
    return v;
}

/* fault_metric once it reaches at_least, or its last value after timeout_s. */
static inline double fault_wait_metric(int admin_port, const char *series, double at_least, double timeout_s)
{
    double end = ga_test_now_s() + timeout_s, v;
    while ((v = fault_metric(admin_port, series)) < at_least && ga_test_now_s() < end) fault_sleep_ms(20);
    return v;
}

/* ---- a TCP relay that can stall the client's direction ---- */

#define FAULT_PROXY_PAIRS 8

typedef struct fault_proxy {
    int lfd, wake[2], port, upstream_port;
    pthread_t thread;
    int pairs[FAULT_PROXY_PAIRS][2]; /* client, server; -1 when unused */
    _Atomic uint64_t c2s;            /* bytes relayed from clients to the server */
    _Atomic uint64_t hold_at;        /* stall the client direction once c2s reaches it; 0 = never */
    atomic_int held, cut, stop;
} fault_proxy;

static inline bool fault_write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w, n -= (size_t)w;
    }
    return true;
}

static inline void fault_proxy_close_pair(fault_proxy *x, int i)
{
    close(x->pairs[i][0]), close(x->pairs[i][1]);
    x->pairs[i][0] = x->pairs[i][1] = -1;
}

static inline void *fault_proxy_main(void *arg)
{
    fault_proxy *x = arg;
    char *buf = malloc(1 << 16); /* one per relay: a test may run two */
    assert_non_null(buf);
    while (!atomic_load(&x->stop)) {
        if (atomic_exchange(&x->cut, 0))
            for (int i = 0; i < FAULT_PROXY_PAIRS; i++)
                if (x->pairs[i][0] >= 0) fault_proxy_close_pair(x, i);
        struct pollfd p[2 + 2 * FAULT_PROXY_PAIRS];
        int np = 0;
        p[np++] = (struct pollfd){x->lfd, POLLIN, 0};
        p[np++] = (struct pollfd){x->wake[0], POLLIN, 0};
        bool holding = atomic_load(&x->held);
        for (int i = 0; i < FAULT_PROXY_PAIRS; i++) {
            p[np++] = (struct pollfd){x->pairs[i][0], (short)(holding ? 0 : POLLIN), 0};
            p[np++] = (struct pollfd){x->pairs[i][1], POLLIN, 0};
        }
        if (poll(p, (nfds_t)np, 100) <= 0) continue;
        if (p[1].revents) {
            char c[16];
            if (read(x->wake[0], c, sizeof c) < 0) {
            }
        }
        if (p[0].revents & POLLIN) {
            int cfd = accept4(x->lfd, NULL, NULL, SOCK_CLOEXEC);
            int sfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)x->upstream_port)};
            sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            int slot = -1;
            for (int i = 0; i < FAULT_PROXY_PAIRS && slot < 0; i++)
                if (x->pairs[i][0] < 0) slot = i;
            if (cfd >= 0 && sfd >= 0 && slot >= 0 && connect(sfd, (struct sockaddr *)&sa, sizeof sa) == 0) {
                x->pairs[slot][0] = cfd, x->pairs[slot][1] = sfd;
            } else {
                if (cfd >= 0) close(cfd);
                if (sfd >= 0) close(sfd);
            }
            continue; /* the pair table changed under p[] */
        }
        for (int i = 0; i < FAULT_PROXY_PAIRS; i++) {
            struct pollfd *pc = &p[2 + 2 * i], *ps = &p[3 + 2 * i];
            if (x->pairs[i][0] < 0) continue;
            if (holding && (pc->revents & (POLLHUP | POLLERR))) {
                fault_proxy_close_pair(x, i); /* the stalled client went away */
                continue;
            }
            if (pc->revents & (POLLIN | POLLHUP | POLLERR)) {
                size_t want = 1 << 16;
                uint64_t hold = atomic_load(&x->hold_at), done = atomic_load(&x->c2s);
                if (hold && hold - done < want) want = (size_t)(hold - done);
                ssize_t r = want ? read(x->pairs[i][0], buf, want) : 0;
                if (want && (r <= 0 || !fault_write_all(x->pairs[i][1], buf, (size_t)r))) {
                    fault_proxy_close_pair(x, i);
                    continue;
                }
                if (r > 0) atomic_fetch_add(&x->c2s, (uint64_t)r);
                if (hold && atomic_load(&x->c2s) >= hold) atomic_store(&x->held, 1);
            }
            if (ps->revents & (POLLIN | POLLHUP | POLLERR)) {
                ssize_t r = read(x->pairs[i][1], buf, 1 << 16);
                if (r <= 0 || !fault_write_all(x->pairs[i][0], buf, (size_t)r)) fault_proxy_close_pair(x, i);
            }
        }
    }
    for (int i = 0; i < FAULT_PROXY_PAIRS; i++)
        if (x->pairs[i][0] >= 0) fault_proxy_close_pair(x, i);
    free(buf);
    return NULL;
}

/* A relay on 127.0.0.1:x->port to 127.0.0.1:upstream_port, on a thread of its own. */
static inline void fault_proxy_start(fault_proxy *x, int upstream_port)
{
    memset(x, 0, sizeof *x);
    for (int i = 0; i < FAULT_PROXY_PAIRS; i++) x->pairs[i][0] = x->pairs[i][1] = -1;
    x->upstream_port = upstream_port;
    x->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    assert_int_equal(bind(x->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(x->lfd, 8), 0);
    assert_int_equal(getsockname(x->lfd, (struct sockaddr *)&sa, &len), 0);
    x->port = ntohs(sa.sin_port);
    assert_int_equal(pipe2(x->wake, O_CLOEXEC), 0);
    assert_int_equal(pthread_create(&x->thread, NULL, fault_proxy_main, x), 0);
}

static inline void fault_proxy_poke(fault_proxy *x)
{
    if (write(x->wake[1], "x", 1) < 0) {
    }
}

/* Closes every relayed connection: to the server, the client's machine went away. */
static inline void fault_proxy_cut(fault_proxy *x)
{
    atomic_store(&x->cut, 1);
    fault_proxy_poke(x);
    while (atomic_load(&x->cut)) fault_sleep_ms(1);
}

static inline void fault_proxy_stop(fault_proxy *x)
{
    atomic_store(&x->stop, 1);
    fault_proxy_poke(x);
    pthread_join(x->thread, NULL);
    close(x->lfd), close(x->wake[0]), close(x->wake[1]);
}

/* ---- the exact check ---- */

/* What one process of one rank reported of each of its calls (fault_worker's "call" lines). */
typedef struct fault_call {
    bool seen, ok, late, unknown; /* unknown: the push may or may not have been counted */
    int proc;                     /* which process of the rank made it (0, 1, ...) */
} fault_call;

/* Reads the "call" lines of one worker process's output into calls[0..max_calls). Returns
 * whether it printed "done". */
static inline bool fault_read_calls(const char *path, int proc, fault_call *calls, size_t max_calls)
{
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("no output %s", path);
    char line[1024], status[64];
    bool done = false;
    unsigned long long k, from, version;
    int late;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "done ", 5) == 0) done = true;
        if (sscanf(line, "call %llu from %llu status %63s version %llu late %d", &k, &from, status, &version,
                   &late) != 5)
            continue;
        if (k >= max_calls) fail_msg("%s: call %llu beyond %zu", path, k, max_calls);
        fault_call *c = &calls[k];
        if (c->seen) fail_msg("%s: call %llu reported twice", path, k);
        c->seen = true;
        c->proc = proc;
        c->ok = strcmp(status, "GA_OK") == 0;
        c->late = late != 0;
        c->unknown = strcmp(status, "GA_E_UNAVAILABLE") == 0 || strcmp(status, "GA_E_DEADLINE") == 0 ||
                     strcmp(status, "GA_E_CANCELLED") == 0 || strcmp(status, "GA_E_TRANSPORT") == 0;
    }
    fclose(f);
    return done;
}

/* How many times call k of a rank must have been counted: 1 when its push was committed, or
 * when it was kept back (a late push folded into the residual, a refused push) and a later call
 * of the same process committed; 0 when the worker died with it or never made it; -1 when
 * either (a push whose fate the worker could not know). */
static inline int fault_expected_count(const fault_call *calls, size_t max_calls, size_t k)
{
    const fault_call *c = &calls[k];
    if (!c->seen) return 0;
    if (c->unknown) return -1;
    if (c->ok && !c->late) return 1;
    for (size_t j = k + 1; j < max_calls; j++)
        if (calls[j].seen && calls[j].proc == c->proc && calls[j].ok && !calls[j].late) return 1;
    return 0;
}

/* Checks a job's final parameters (fault_worker's --out file: dense[n], then ind[world *
 * max_calls]) against calls[r][k]: every slot of ind holds minus the count its call must have,
 * and dense equals its start minus the gradients of every counted call, exactly. Returns the
 * number of calls counted. */
static inline uint64_t fault_check_params(const char *path, size_t n, uint32_t world, size_t max_calls,
                                          fault_call *const *calls)
{
    size_t ni = (size_t)world * max_calls;
    float *p = malloc((n + ni) * sizeof *p);
    double *expect = malloc(n * sizeof *expect);
    assert_true(p && expect);
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("no parameters in %s", path);
    assert_int_equal(fread(p, sizeof *p, n + ni, f), n + ni);
    fclose(f);
    const float *ind = p + n;
    for (size_t i = 0; i < n; i++) expect[i] = ga_fault_dense_init(i);
    uint64_t counted = 0;
    for (uint32_t r = 0; r < world; r++) {
        for (size_t k = 0; k < max_calls; k++) {
            float got = 0.0f - ind[ga_fault_slot(r, world, k)];
            int want = fault_expected_count(calls[r], max_calls, k);
            if (want < 0 ? !(got == 0.0f || got == 1.0f) : got != (float)want)
                fail_msg("rank %u call %zu counted %g times, expected %d (seen %d ok %d late %d unknown %d)", r, k,
                         (double)got, want, calls[r][k].seen, calls[r][k].ok, calls[r][k].late, calls[r][k].unknown);
            if (got == 0.0f) continue;
            counted++;
            for (size_t i = 0; i < n; i++) expect[i] -= ga_fault_dense_grad(r, k, i);
        }
    }
    for (size_t i = 0; i < n; i++)
        if ((double)p[i] != expect[i]) fail_msg("dense[%zu] = %.9g, expected %.9g", i, (double)p[i], expect[i]);
    free(p), free(expect);
    return counted;
}

/* Whether two files hold the same bytes. */
static inline bool fault_same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y) same = false;
        if (x == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

#endif
