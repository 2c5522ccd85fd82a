/* A real gradagg-server process for end-to-end tests: the binary of the build (GA_SERVER_BIN),
 * started with posix_spawn (the test process runs gRPC threads, and a fork would run gRPC's fork
 * handlers) on 127.0.0.1 with a data dir of the caller's, no admin listener and stderr in a log
 * file there; its port is read from its stdout. Include after cmocka.h. */
#ifndef GA_TEST_SERVER_PROC_H
#define GA_TEST_SERVER_PROC_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef GA_SERVER_BIN
#error "GA_SERVER_BIN (the gradagg-server binary) must be defined by the build"
#endif

extern char **environ;

typedef struct ga_test_server {
    pid_t pid;
    int out; /* its stdout */
    int port;
    char dir[96];  /* its data dir: the caller's, fresh for a new server */
    char log[128]; /* its stderr: dir/server.log, appended across restarts */
} ga_test_server;

static inline double ga_test_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Reads one line (up to '\n', or cap - 1 bytes) from fd into line, waiting at most timeout_s;
 * line holds what came (possibly "") and is always terminated. */
static inline void ga_test_read_line(int fd, char *line, size_t cap, double timeout_s)
{
    size_t n = 0;
    double end = ga_test_now_s() + timeout_s;
    while (ga_test_now_s() < end && n + 1 < cap) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        if (read(fd, line + n, 1) <= 0) break;
        if (line[n++] == '\n') break;
    }
    line[n] = '\0';
}

/* Spawns argv (argv[0] looked up in PATH, NULL-terminated) with its stdout into a pipe whose
 * read end goes to *out and its stderr appended to log; returns its pid. */
static inline pid_t ga_test_spawn(const char *const *argv, const char *log, int *out)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, log, O_WRONLY | O_CREAT | O_APPEND, 0640);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    pid_t pid;
    assert_int_equal(posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    *out = fds[0];
    return pid;
}

/* Starts the server on port (0 = any) with the extra arguments args (NULL-terminated; NULL =
 * none) and waits for its "listening on" line; s->port is the port it took. */
static inline void ga_test_server_start(ga_test_server *s, int port, const char *const *args)
{
    char listen[64];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    snprintf(s->log, sizeof s->log, "%s/server.log", s->dir);
    const char *argv[32] = {GA_SERVER_BIN, "--listen", listen, "--data-dir", s->dir, "--admin-listen="};
    int argc = 6;
    for (int i = 0; args && args[i] && argc < 31; i++) argv[argc++] = args[i];
    argv[argc] = NULL;
    s->pid = ga_test_spawn(argv, s->log, &s->out);
    char line[256];
    ga_test_read_line(s->out, line, sizeof line, 20.0);
    if (sscanf(line, "gradagg-server: listening on 127.0.0.1:%d", &s->port) != 1)
        fail_msg("server did not start: '%s' (log %s)", line, s->log);
}

/* Stops the server (SIGSTOP) and returns once every thread of it has stopped. kill() alone
 * returns before that: a loaded machine lets the other threads answer calls for a while. */
static inline void ga_test_server_freeze(ga_test_server *s)
{
    assert_int_equal(kill(s->pid, SIGSTOP), 0);
    int status = 0;
    pid_t got;
    while ((got = waitpid(s->pid, &status, WUNTRACED)) < 0 && errno == EINTR) {
    }
    assert_int_equal(got, s->pid);
    assert_true(WIFSTOPPED(status));
}

/* Lets a frozen server go on (SIGCONT). */
static inline void ga_test_server_thaw(ga_test_server *s) { assert_int_equal(kill(s->pid, SIGCONT), 0); }

/* Sends sig and reaps the server; after SIGTERM it must have exited 0 (a clean drain). */
static inline void ga_test_server_stop(ga_test_server *s, int sig)
{
    kill(s->pid, sig);
    int status = 0;
    pid_t got;
    while ((got = waitpid(s->pid, &status, 0)) < 0 && errno == EINTR) {
    }
    close(s->out);
    if (got != s->pid) fail_msg("waitpid(%d): %s", (int)s->pid, strerror(errno));
    if (sig == SIGTERM && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
        fail_msg("the server did not exit 0 after SIGTERM: %s %d (log %s)", WIFEXITED(status) ? "exit status" : "signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? WTERMSIG(status) : -1, s->log);
}

/* Lines of the server's log that contain needle (0 without a log). */
static inline int ga_test_server_log_count(const ga_test_server *s, const char *needle)
{
    FILE *f = fopen(s->log, "r");
    if (!f) return 0;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, needle)) n++;
    fclose(f);
    return n;
}

#endif
