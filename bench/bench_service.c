/* End-to-end service benchmark: W worker processes push a model of N floats through a real
 * gradagg-server on loopback, per gradient codec, and the same tensors are all-reduced with
 * torch.distributed gloo in the same run as the peer to beat. Prints per configuration the median
 * step time and its split (encode, push = transfer + server receive, server decode+sum, server
 * optimizer + publish, pull, client apply), the server's CPU seconds per step and the ratio of
 * gloo's step time to ours (> 1 = faster than gloo). Then a 1 KB tensor round trip p50/p99.
 * With --backends cpu,cuda every configuration runs on a CPU-backed and on a CUDA-backed server
 * (GRADAGG_BACKEND; other GRADAGG_* settings pass through too): the CUDA step over the CPU step
 * per codec, and whether both left rank 0 bit-identical parameters.
 *
 * Usage: bench_service --server BIN [--world 4] [--elements 25000000] [--steps 4]
 *                      [--backends cpu[,cuda]] [--gloo bench/gloo_allreduce.py|none]
 *                      [--python /usr/bin/python3] [--only LABEL] [--json FILE] */
#define _GNU_SOURCE
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ga_alloc.h"
#include "ga_methods.h"
#include "ga_wire.h"
#include "gradagg.h"
#include "rpc_client.h"

#define MAX_WORLD 64
#define MAX_BACKENDS 2
#define MAX_STEPS 64

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int count)
{
    double tmp[4096];
    memcpy(tmp, v, (size_t)count * sizeof *v);
    qsort(tmp, (size_t)count, sizeof *tmp, cmp_double);
    return count % 2 ? tmp[count / 2] : 0.5 * (tmp[count / 2 - 1] + tmp[count / 2]);
}

static double quantile(const double *v, int count, double q)
{
    double tmp[4096];
    memcpy(tmp, v, (size_t)count * sizeof *v);
    qsort(tmp, (size_t)count, sizeof *tmp, cmp_double);
    int i = (int)ceil(q * count) - 1;
    return tmp[i < 0 ? 0 : i];
}

/* ---- the server process ---- */

typedef struct server_proc {
    pid_t pid;
    int port;
    char dir[64]; /* its --data-dir, removed by server_stop (a run journals gigabytes) */
} server_proc;

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

static int server_start(const char *bin, const char *backend, server_proc *out)
{
    int fds[2];
    if (pipe(fds) != 0) return -1;
    static int servers;
    snprintf(out->dir, sizeof out->dir, "/tmp/gradagg-bench-%d-%d", (int)getpid(), servers++); /* nothing to restore */
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        /* GRADAGG_LOG_LEVEL (default warn here) and other GRADAGG_* settings pass through. */
        setenv("GRADAGG_LOG_LEVEL", getenv("GRADAGG_LOG_LEVEL") ? getenv("GRADAGG_LOG_LEVEL") : "warn", 1);
        if (backend) setenv("GRADAGG_BACKEND", backend, 1);
        execl(bin, bin, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--data-dir", out->dir,
              (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    char line[512];
    int port = 0;
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "listening on 127.0.0.1:");
        if (p) {
            port = atoi(p + strlen("listening on 127.0.0.1:"));
            break;
        }
    }
    /* The rest of stdout is not read: the server writes nothing more there after start-up. */
    if (port <= 0) {
        fclose(f);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        (void)nftw(out->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        return -1;
    }
    out->pid = pid;
    out->port = port;
    return 0;
}

static int server_stop(server_proc *s)
{
    int st = 0;
    kill(s->pid, SIGTERM);
    waitpid(s->pid, &st, 0);
    if (nftw(s->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "bench_service: removing %s: %s\n", s->dir, strerror(errno));
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* utime + stime of a process in seconds (/proc/PID/stat fields 14 and 15). */
static double proc_cpu_s(pid_t pid)
{
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return NAN;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = 0;
    const char *p = strrchr(buf, ')');
    if (!p) return NAN;
    unsigned long long ut = 0, st = 0;
    /* after ") " come fields 3..: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2) return NAN;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Server-side totals of a job from the Status RPC. */
static int status_rpc(int port, const char *job, double *accumulate_s, double *apply_s)
{
    char target[64], msg[256];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    ga_channel *ch = NULL;
    if (ga_channel_create(target, 64u << 20, &ch) != GA_OK) return -1;
    Gradagg__V1__StatusRequest req = GRADAGG__V1__STATUS_REQUEST__INIT;
    req.job = (char *)job;
    ProtobufCMessage *resp = NULL;
    ga_status rc = ga_call_unary(ch, GA_METHOD_STATUS, &req.base, 10000, &resp, msg, sizeof msg);
    if (rc == GA_OK) {
        Gradagg__V1__StatusResponse *r = (Gradagg__V1__StatusResponse *)resp;
        *accumulate_s = r->accumulate_seconds;
        *apply_s = r->apply_seconds;
        protobuf_c_message_free_unpacked(resp, &ga_wire_allocator);
    } else {
        fprintf(stderr, "bench_service: Status %s: %s\n", ga_status_name(rc), msg);
    }
    ga_channel_destroy(ch);
    return rc == GA_OK ? 0 : -1;
}

/* status_rpc in a child process: this process forks the workers of every configuration, and a
 * process that has started gRPC must not fork (the children's gRPC would hang). */
static int job_server_times(int port, const char *job, double *accumulate_s, double *apply_s)
{
    int fds[2];
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        double t[2];
        int rc = status_rpc(port, job, &t[0], &t[1]);
        _exit(rc == 0 && write(fds[1], t, sizeof t) == (ssize_t)sizeof t ? 0 : 1);
    }
    close(fds[1]);
    double t[2];
    ssize_t got = read(fds[0], t, sizeof t);
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    if (got != (ssize_t)sizeof t || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return -1;
    *accumulate_s = t[0];
    *apply_s = t[1];
    return 0;
}

/* ---- one configuration ---- */

typedef struct bench_config {
    const char *label;
    ga_codec_id codec;
    float threshold; /* 2bit */
    float ratio;     /* topk */
    ga_codec_id pull_codec;
    float pull_threshold;
} bench_config;

typedef struct worker_report {
    int ok;
    int steps;
    double step_s[MAX_STEPS], encode_s[MAX_STEPS], push_s[MAX_STEPS], pull_s[MAX_STEPS], decode_s[MAX_STEPS];
    uint64_t bytes_pushed, bytes_pulled;
    uint64_t params_hash; /* FNV-1a of the parameters after the last step */
    char error[256];
} worker_report;

typedef struct bench_args {
    const char *server_bin, *gloo, *python, *json;
    int world, steps;
    size_t elements;
} bench_args;

static uint64_t fnv1a(const void *data, size_t len)
{
    const uint8_t *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static ga_codec_params codec_params(ga_codec_id codec, float threshold, float ratio)
{
    ga_codec_params p = ga_codec_params_default(codec);
    if (codec == GA_CODEC_2BIT || codec == GA_CODEC_1BIT) p.threshold = threshold;
    if (codec == GA_CODEC_TOPK) p.ratio = ratio;
    return p;
}

/* A worker process: joins, runs one warm-up step, waits for the go byte, runs the steps,
 * writes its report to `out` and exits. */
static void worker_main(const bench_args *a, const bench_config *c, const char *job, int port, int rank, int go_fd,
                        int out_fd)
{
    worker_report rep = {0};
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    ga_client_options o = GA_CLIENT_OPTIONS_INIT;
    o.server = target;
    o.job = job;
    o.rank = (uint32_t)rank;
    o.world_size = (uint32_t)a->world;
    o.mean = true;
    o.optimizer = GA_SERVER_OPTIM_SGD;
    o.sgd.lr = 0.1f;
    o.sgd.momentum = 0.9f;
    o.pull_codec = c->pull_codec;
    o.pull_params = codec_params(c->pull_codec, c->pull_threshold, 0.0f);
    o.threads = 1;
    ga_client *cl = NULL;
    float *params = ga_calloc(a->elements, sizeof(float));
    float *grad = ga_malloc(a->elements * sizeof(float));
    uint64_t state = 0x9E3779B97F4A7C15ull * (uint64_t)(rank + 1);
    for (size_t i = 0; i < a->elements; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        grad[i] = ((float)(state >> 40) / (float)(1u << 24) - 0.5f) * 0.01f;
    }
    ga_status rc = ga_client_create(&o, &cl, rep.error, sizeof rep.error);
    if (rc == GA_OK) {
        ga_tensor_options to = GA_TENSOR_OPTIONS_INIT;
        to.codec = c->codec;
        to.params = codec_params(c->codec, c->threshold, c->ratio);
        uint64_t shape[1] = {a->elements};
        int index;
        rc = ga_client_add_tensor(cl, "model", shape, 1, params, &to, &index);
        if (rc == GA_OK) rc = ga_client_init(cl);
        const float *grads[1] = {grad};
        if (rc == GA_OK) rc = ga_client_step(cl, grads); /* warm-up */
        char go;
        if (rc == GA_OK && write(out_fd, "w", 1) == 1 && read(go_fd, &go, 1) == 1) {
            for (int s = 0; s < a->steps && rc == GA_OK; s++) {
                double t0 = now_s();
                rc = ga_client_step(cl, grads);
                rep.step_s[s] = now_s() - t0;
                ga_client_stats st;
                ga_client_get_stats(cl, &st);
                rep.encode_s[s] = st.encode_s;
                rep.push_s[s] = st.push_s;
                rep.pull_s[s] = st.pull_s;
                rep.decode_s[s] = st.decode_s;
                rep.bytes_pushed = st.bytes_pushed;
                rep.bytes_pulled = st.bytes_pulled;
                rep.steps = s + 1;
            }
            if (rc == GA_OK) rep.params_hash = fnv1a(params, a->elements * sizeof(float));
        }
        if (rc != GA_OK) snprintf(rep.error, sizeof rep.error, "%s: %s", ga_status_name(rc), ga_client_error(cl));
    }
    /* Said here too: the parent waits for every rank's warm-up first, and the others wait for
     * this one's push until their timeout. */
    if (rc != GA_OK) fprintf(stderr, "bench_service: %s rank %d failed: %s\n", c->label, rank, rep.error);
    rep.ok = rc == GA_OK;
    ga_client_destroy(cl);
    ga_free(params);
    ga_free(grad);
    if (write(out_fd, "r", 1) != 1 || write(out_fd, &rep, sizeof rep) != (ssize_t)sizeof rep) _exit(3);
    _exit(rep.ok ? 0 : 2);
}

static int read_full(int fd, void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len) {
        ssize_t r = read(fd, p, len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

typedef struct config_result {
    bool ran;
    double step, encode, push, accumulate, apply, pull, decode, server_cpu;
    uint64_t bytes_pushed, bytes_pulled, params_hash;
} config_result;

static int run_config(const bench_args *a, const bench_config *c, const char *backend, int index, config_result *res)
{
    server_proc srv;
    if (server_start(a->server_bin, backend, &srv) != 0) {
        fprintf(stderr, "bench_service: cannot start %s\n", a->server_bin);
        return -1;
    }
    char job[64];
    snprintf(job, sizeof job, "bench-%d", index);
    int go[2], out[MAX_WORLD][2];
    pid_t pids[MAX_WORLD];
    if (pipe(go) != 0) return -1;
    for (int r = 0; r < a->world; r++) {
        if (pipe(out[r]) != 0) return -1;
        pids[r] = fork();
        if (pids[r] == 0) worker_main(a, c, job, srv.port, r, go[0], out[r][1]);
        close(out[r][1]);
    }
    close(go[0]);
    int failed = 0;
    for (int r = 0; r < a->world; r++) {
        char ch;
        if (read_full(out[r][0], &ch, 1) != 0 || ch != 'w') failed = 1;
    }
    double acc0 = 0, app0 = 0, acc1 = 0, app1 = 0, cpu0 = proc_cpu_s(srv.pid);
    if (!failed) job_server_times(srv.port, job, &acc0, &app0);
    cpu0 = proc_cpu_s(srv.pid);
    for (int r = 0; r < a->world; r++)
        if (write(go[1], "g", 1) != 1) failed = 1;
    close(go[1]);
    static worker_report reps[MAX_WORLD];
    for (int r = 0; r < a->world; r++) {
        char ch;
        if (read_full(out[r][0], &ch, 1) != 0 || ch != 'r' || read_full(out[r][0], &reps[r], sizeof reps[r]) != 0) {
            failed = 1;
            continue;
        }
        if (!reps[r].ok) {
            fprintf(stderr, "bench_service: %s rank %d: %s\n", c->label, r, reps[r].error);
            failed = 1;
        }
        close(out[r][0]);
    }
    double cpu1 = proc_cpu_s(srv.pid);
    if (!failed) job_server_times(srv.port, job, &acc1, &app1);
    for (int r = 0; r < a->world; r++) waitpid(pids[r], NULL, 0);
    if (server_stop(&srv) != 0) {
        fprintf(stderr, "bench_service: server did not exit 0 after SIGTERM\n");
        failed = 1;
    }
    if (failed) return -1;
    /* Per step: the slowest rank's figures (the step is as slow as its slowest worker). */
    double step[MAX_STEPS], enc[MAX_STEPS], push[MAX_STEPS], pull[MAX_STEPS], dec[MAX_STEPS];
    for (int s = 0; s < a->steps; s++) {
        step[s] = enc[s] = push[s] = pull[s] = dec[s] = 0;
        for (int r = 0; r < a->world; r++) {
            step[s] = fmax(step[s], reps[r].step_s[s]);
            enc[s] = fmax(enc[s], reps[r].encode_s[s]);
            push[s] = fmax(push[s], reps[r].push_s[s]);
            pull[s] = fmax(pull[s], reps[r].pull_s[s]);
            dec[s] = fmax(dec[s], reps[r].decode_s[s]);
        }
    }
    res->step = median(step, a->steps);
    res->encode = median(enc, a->steps);
    res->push = median(push, a->steps);
    res->pull = median(pull, a->steps);
    res->decode = median(dec, a->steps);
    res->accumulate = (acc1 - acc0) / a->steps;
    res->apply = (app1 - app0) / a->steps;
    res->server_cpu = (cpu1 - cpu0) / a->steps;
    res->bytes_pushed = reps[0].bytes_pushed;
    res->bytes_pulled = reps[0].bytes_pulled;
    res->params_hash = reps[0].params_hash;
    res->ran = true;
    return 0;
}

/* ---- the peer ---- */

static double gloo_median(const bench_args *a)
{
    char cmd[1024];
    if (!strcmp(a->gloo, "none")) return NAN;
    snprintf(cmd, sizeof cmd, "%s %s --world %d --elements %zu --steps %d", a->python, a->gloo, a->world,
             a->elements, a->steps);
    FILE *p = popen(cmd, "r");
    if (!p) return NAN;
    char line[4096];
    double med = NAN;
    while (fgets(line, sizeof line, p)) {
        const char *m = strstr(line, "\"median_s\": ");
        if (m) med = atof(m + strlen("\"median_s\": "));
    }
    if (pclose(p) != 0) return NAN;
    return med;
}

/* ---- 1 KB round trip ---- */

static int small_round_trip(const bench_args *a, double *p50, double *p99)
{
    server_proc srv;
    if (server_start(a->server_bin, NULL, &srv) != 0) return -1;
    char target[64], err[256];
    snprintf(target, sizeof target, "127.0.0.1:%d", srv.port);
    int rc = -1;
    pid_t pid = fork();
    if (pid == 0) {
        ga_client_options o = GA_CLIENT_OPTIONS_INIT;
        o.server = target;
        o.job = "small";
        ga_client *cl = NULL;
        float params[256] = {0}, grad[256];
        for (int i = 0; i < 256; i++) grad[i] = 0.001f * (float)i;
        enum { WARM = 50, N = 1000 };
        double t[N];
        ga_status st = ga_client_create(&o, &cl, err, sizeof err);
        uint64_t shape[1] = {256};
        int index;
        ga_tensor_options to = GA_TENSOR_OPTIONS_INIT;
        if (st == GA_OK) st = ga_client_add_tensor(cl, "w", shape, 1, params, &to, &index);
        if (st == GA_OK) st = ga_client_init(cl);
        const float *grads[1] = {grad};
        for (int i = 0; i < WARM + N && st == GA_OK; i++) {
            double t0 = now_s();
            st = ga_client_step(cl, grads);
            if (i >= WARM) t[i - WARM] = now_s() - t0;
        }
        if (st != GA_OK) fprintf(stderr, "bench_service: small: %s %s\n", ga_status_name(st), cl ? ga_client_error(cl) : err);
        ga_client_destroy(cl);
        double q[2] = {quantile(t, N, 0.5), quantile(t, N, 0.99)};
        FILE *f = fopen("/tmp/gradagg-bench-small", "wb");
        if (st == GA_OK && f && fwrite(q, sizeof q, 1, f) == 1) rc = 0;
        if (f) fclose(f);
        _exit(rc == 0 ? 0 : 1);
    }
    int wst = 0;
    waitpid(pid, &wst, 0);
    if (server_stop(&srv) != 0) return -1;
    if (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0) return -1;
    double q[2];
    FILE *f = fopen("/tmp/gradagg-bench-small", "rb");
    if (!f || fread(q, sizeof q, 1, f) != 1) {
        if (f) fclose(f);
        return -1;
    }
    fclose(f);
    *p50 = q[0];
    *p99 = q[1];
    return 0;
}

/* A JSON number, or null for NaN (no peer measured). */
static void json_number(FILE *f, const char *key, double v)
{
    if (isnan(v)) fprintf(f, "\"%s\": null", key);
    else fprintf(f, "\"%s\": %.6f", key, v);
}

int main(int argc, char **argv)
{
    bench_args a = {NULL, "bench/gloo_allreduce.py", "/usr/bin/python3", NULL, 4, 4, 25000000};
    const char *only = NULL; /* run only the configurations whose label starts with this */
    const char *backend_list = "cpu";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--server") && i + 1 < argc) a.server_bin = argv[++i];
        else if (!strcmp(argv[i], "--gloo") && i + 1 < argc) a.gloo = argv[++i];
        else if (!strcmp(argv[i], "--python") && i + 1 < argc) a.python = argv[++i];
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) a.json = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--backends") && i + 1 < argc) backend_list = argv[++i];
        else if (!strcmp(argv[i], "--world") && i + 1 < argc) a.world = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) a.steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--elements") && i + 1 < argc) a.elements = (size_t)strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: bench_service --server BIN [--world W] [--elements N] [--steps S] "
                            "[--backends cpu[,cuda]] [--gloo PY|none] [--python PY] [--only LABEL] [--json FILE]\n");
            return 2;
        }
    }
    if (!a.server_bin || a.world < 1 || a.world > MAX_WORLD || a.steps < 1 || a.steps > MAX_STEPS || !a.elements) {
        fprintf(stderr, "bench_service: need --server, 1 <= world <= %d, 1 <= steps <= %d\n", MAX_WORLD, MAX_STEPS);
        return 2;
    }
    const char *backends[MAX_BACKENDS];
    int nback = 0;
    if (!strcmp(backend_list, "cpu") || !strcmp(backend_list, "cuda")) backends[nback++] = backend_list;
    else if (!strcmp(backend_list, "cpu,cuda")) backends[0] = "cpu", backends[1] = "cuda", nback = 2;
    else {
        fprintf(stderr, "bench_service: --backends %s: expected cpu, cuda or cpu,cuda\n", backend_list);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress shows up line by line in a log */
    const bench_config configs[] = {
        {"none", GA_CODEC_NONE, 0, 0, GA_CODEC_NONE, 0},
        {"fp16", GA_CODEC_FP16, 0, 0, GA_CODEC_NONE, 0},
        {"2bit, fp32 pull", GA_CODEC_2BIT, 0.001f, 0, GA_CODEC_NONE, 0},
        {"2bit, 2bit pull", GA_CODEC_2BIT, 0.001f, 0, GA_CODEC_2BIT, 0.0001f},
        {"topk 0.001", GA_CODEC_TOPK, 0, 0.001f, GA_CODEC_NONE, 0},
    };
    enum { NCONF = sizeof configs / sizeof configs[0] };
    static config_result res[MAX_BACKENDS][NCONF];
    printf("bench_service: W=%d workers x %zu floats (%.0f MB), %d steps each, loopback, server threads %s\n",
           a.world, a.elements, a.elements * 4.0 / 1e6, a.steps,
           getenv("GRADAGG_THREADS") ? getenv("GRADAGG_THREADS") : "(its default)");
    double gloo = gloo_median(&a);
    printf("gloo all_reduce fp32 (torch.distributed, same W and tensor): median %.3f s\n", gloo);
    printf("%-5s %-16s %8s %7s %7s %8s %7s %7s %7s %9s %10s %10s %9s\n", "back", "codec", "step s", "encode", "push",
           "dec+sum", "optim", "pull", "apply", "srv cpu", "push MB", "pull MB", "gloo/ours");
    int failed = 0;
    for (int i = 0; i < NCONF; i++) {
        if (only && strncmp(configs[i].label, only, strlen(only)) != 0) continue;
        for (int b = 0; b < nback; b++) {
            config_result *r = &res[b][i];
            if (run_config(&a, &configs[i], backends[b], b * NCONF + i, r) != 0) {
                printf("%-5s %-16s failed\n", backends[b], configs[i].label);
                failed = 1;
                continue;
            }
            printf("%-5s %-16s %8.3f %7.3f %7.3f %8.3f %7.3f %7.3f %7.3f %9.3f %10.2f %10.2f %9.2f\n", backends[b],
                   configs[i].label, r->step, r->encode, r->push, r->accumulate, r->apply, r->pull, r->decode,
                   r->server_cpu, r->bytes_pushed / 1e6, r->bytes_pulled / 1e6, gloo / r->step);
        }
    }
    /* The CUDA backend against the CPU backend, same run: the step's ratio (target <= 0.5 at
     * W = 16 x 100M, docs/benchmarks.md) and the promise that both give the same parameters. */
    if (nback == 2) {
        printf("%-16s %9s %10s\n", "codec", "cuda/cpu", "same bits");
        for (int i = 0; i < NCONF; i++) {
            const config_result *c = &res[0][i], *g = &res[1][i];
            if (!c->ran || !g->ran) continue;
            bool same = c->params_hash == g->params_hash;
            printf("%-16s %9.2f %10s\n", configs[i].label, g->step / c->step, same ? "yes" : "NO");
            if (!same) failed = 1;
        }
    }
    double p50 = NAN, p99 = NAN;
    if (small_round_trip(&a, &p50, &p99) == 0)
        printf("1 KB tensor round trip (push + pull, W=1): p50 %.1f us, p99 %.1f us\n", p50 * 1e6, p99 * 1e6);
    else {
        printf("1 KB round trip failed\n");
        failed = 1;
    }
    if (a.json) {
        FILE *f = fopen(a.json, "w");
        if (f) {
            fprintf(f, "{\"world\": %d, \"elements\": %zu, \"steps\": %d, ", a.world, a.elements, a.steps);
            json_number(f, "gloo_median_s", gloo);
            fprintf(f, ",\n \"configs\": [");
            const char *sep = "\n";
            for (int i = 0; i < NCONF; i++)
                for (int b = 0; b < nback; b++) {
                    const config_result *r = &res[b][i];
                    if (!r->ran) continue;
                    fprintf(f,
                            "%s  {\"backend\": \"%s\", \"codec\": \"%s\", \"step_s\": %.6f, \"encode_s\": %.6f, "
                            "\"push_s\": %.6f, \"decode_sum_s\": %.6f, \"optimizer_s\": %.6f, \"pull_s\": %.6f, "
                            "\"apply_s\": %.6f, \"server_cpu_s\": %.6f, \"bytes_pushed\": %llu, "
                            "\"bytes_pulled\": %llu, \"params_hash\": \"%016llx\"}",
                            sep, backends[b], configs[i].label, r->step, r->encode, r->push, r->accumulate, r->apply,
                            r->pull, r->decode, r->server_cpu, (unsigned long long)r->bytes_pushed,
                            (unsigned long long)r->bytes_pulled, (unsigned long long)r->params_hash);
                    sep = ",\n";
                }
            fprintf(f, "\n ],\n ");
            json_number(f, "small_p50_s", p50);
            fprintf(f, ", ");
            json_number(f, "small_p99_s", p99);
            fprintf(f, "}\n");
            fclose(f);
        }
    }
    return failed ? 1 : 0;
}
