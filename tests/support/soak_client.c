/* soak_client: the load of scripts/soak. 8 jobs of 8 ranks each (64 SDK clients, one thread
 * each, one process) train against a running gradagg-server for a bounded time, while the
 * server's resident memory (/proc/PID/status) and accounted memory (/metrics) are sampled.
 * Not a ctest of its own.
 *
 *   soak_client --server H:P --admin-port P --server-pid PID --seconds S --json FILE
 *               [--sample-seconds 2] [--server-env TEXT (recorded in FILE)]
 *
 * Jobs 0-4 are exact (fault_grad.h gradients in {-1, 0, 1}, SGD lr 1, sum, fp32 pulls) with
 * codecs none, fp16, bf16, 2bit (threshold 1) and a per-rank mix of the four: their final
 * parameters must equal the start minus every rank's gradient of every step, and a per-rank
 * counter tensor must read minus the number of steps, so a lost or double-counted step shows.
 * Jobs 5-7 are compressed (topk, 2bit pulls, a per-rank mix with momentum): all ranks must hold
 * the same bytes. Every job's version must equal the calls each of its ranks made, every call
 * must return GA_OK, the server must have refused nothing, and its memory must be flat (after the
 * warm-up, the median RSS of the last quarter of the samples within 16 MB + 1% of the first
 * quarter's; the least accounted memory that is not buffered pushes within 1 MB). A job stops 2
 * versions after its
 * first rank sees the time is up (sync ranks are never more than one version apart). Prints a
 * summary, writes FILE, exits 0 when everything held. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fault_grad.h"
#include "gradagg.h"

#define JOBS 8
#define RANKS 8

typedef struct job_spec {
    const char *name;
    ga_codec_id codec[RANKS];
    ga_codec_id pull;
    bool exact;
    size_t n;
} job_spec;

#define ALL(c) {c, c, c, c, c, c, c, c}
static const job_spec specs[JOBS] = {
    {"soak-none", ALL(GA_CODEC_NONE), GA_CODEC_NONE, true, 1u << 18},
    {"soak-fp16", ALL(GA_CODEC_FP16), GA_CODEC_NONE, true, 1u << 16},
    {"soak-bf16", ALL(GA_CODEC_BF16), GA_CODEC_NONE, true, 1u << 16},
    {"soak-2bit", ALL(GA_CODEC_2BIT), GA_CODEC_NONE, true, 1u << 18},
    {"soak-mixed",
     {GA_CODEC_NONE, GA_CODEC_FP16, GA_CODEC_BF16, GA_CODEC_2BIT, GA_CODEC_NONE, GA_CODEC_FP16, GA_CODEC_BF16,
      GA_CODEC_2BIT},
     GA_CODEC_NONE, true, 1u << 16},
    {"soak-topk", ALL(GA_CODEC_TOPK), GA_CODEC_NONE, false, 1u << 18},
    {"soak-2bit-pull", ALL(GA_CODEC_2BIT), GA_CODEC_2BIT, false, 1u << 16},
    {"soak-hetero",
     {GA_CODEC_TOPK, GA_CODEC_2BIT, GA_CODEC_NONE, GA_CODEC_FP16, GA_CODEC_TOPK, GA_CODEC_2BIT, GA_CODEC_1BIT,
      GA_CODEC_BF16},
     GA_CODEC_2BIT, false, 1u << 16},
};

typedef struct worker {
    pthread_t thread;
    int job;
    uint32_t rank;
    float *dense, *count;
    uint64_t version, calls;
    ga_status st;
    char err[512];
    ga_client_stats stats;
} worker;

static const char *server;
static double end_s;
static _Atomic uint64_t stop_at[JOBS];
static atomic_int failures;
static worker workers[JOBS][RANKS];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    const job_spec *j = &specs[w->job];
    ga_client_options o = GA_CLIENT_OPTIONS_INIT;
    o.server = server;
    o.job = j->name;
    o.rank = w->rank;
    o.world_size = RANKS;
    o.optimizer = GA_SERVER_OPTIM_SGD;
    if (j->exact) {
        o.sgd.lr = 1.0f;
        o.sgd.momentum = 0.0f;
    } else {
        o.mean = true;
        o.sgd.lr = 0.05f;
        o.sgd.momentum = 0.9f;
    }
    o.pull_codec = j->pull;
    if (j->pull != GA_CODEC_NONE) {
        o.pull_params = ga_codec_params_default(j->pull);
        o.pull_params.threshold = 0.5f;
    }
    o.chunk_bytes = 256 << 10;
    o.call_timeout_ms = 60000;
    o.step_timeout_ms = 120000;
    o.threads = 1;
    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    t.codec = j->codec[w->rank];
    t.params = ga_codec_params_default(t.codec);
    if (t.codec == GA_CODEC_2BIT || t.codec == GA_CODEC_1BIT) t.params.threshold = 1.0f;
    if (t.codec == GA_CODEC_TOPK) t.params.ratio = 0.01f;
    float *gd = malloc(j->n * sizeof *gd), gc[RANKS];
    w->dense = malloc(j->n * sizeof *w->dense);
    w->count = calloc(RANKS, sizeof *w->count);
    ga_client *c = NULL;
    if (!gd || !w->dense || !w->count) {
        w->st = GA_E_NOMEM;
        snprintf(w->err, sizeof w->err, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < j->n; i++) w->dense[i] = ga_fault_dense_init(i);
    uint64_t shd[1] = {j->n}, shc[1] = {RANKS};
    if ((w->st = ga_client_create(&o, &c, w->err, sizeof w->err)) != GA_OK) goto out;
    if ((w->st = ga_client_add_tensor(c, "dense", shd, 1, w->dense, &t, NULL)) != GA_OK ||
        (w->st = ga_client_add_tensor(c, "count", shc, 1, w->count, &t, NULL)) != GA_OK ||
        (w->st = ga_client_init(c)) != GA_OK)
        goto fail;
    const float *grads[2] = {gd, gc};
    while (ga_client_version(c) < atomic_load(&stop_at[w->job])) {
        uint64_t k = w->calls;
        for (size_t i = 0; i < j->n; i++) gd[i] = ga_fault_dense_grad(w->rank, k, i);
        for (uint32_t r = 0; r < RANKS; r++) gc[r] = r == w->rank ? 1.0f : 0.0f;
        if ((w->st = ga_client_step(c, grads)) != GA_OK) goto fail;
        w->calls++;
        if (now_s() >= end_s) {
            uint64_t want = ga_client_version(c) + 2, cur = atomic_load(&stop_at[w->job]);
            while (want < cur && !atomic_compare_exchange_weak(&stop_at[w->job], &cur, want)) {
            }
        }
    }
    w->version = ga_client_version(c);
    ga_client_get_stats(c, &w->stats);
    goto out;
fail:
    snprintf(w->err, sizeof w->err, "%s", ga_client_error(c));
out:
    if (w->st != GA_OK) {
        atomic_fetch_add(&failures, 1);
        fprintf(stderr, "soak: job %s rank %u: %s: %s\n", j->name, w->rank, ga_status_name(w->st), w->err);
        /* The other ranks stop as soon as they can; their pulls time out if the step never closes. */
        atomic_store(&stop_at[w->job], 0);
    }
    ga_client_destroy(c);
    free(gd);
    return NULL;
}

/* ---- the server's memory ---- */

static long rss_kb(int pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}

/* The body of GET /metrics (malloc'd), or NULL. */
static char *scrape(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (fd >= 0) close(fd);
        return NULL;
    }
    static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    if (write(fd, req, sizeof req - 1) != (ssize_t)(sizeof req - 1)) {
        close(fd);
        return NULL;
    }
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap + 1);
    ssize_t r;
    while (buf && n < cap && (r = read(fd, buf + n, cap - n)) > 0) n += (size_t)r;
    close(fd);
    if (buf) buf[n] = '\0';
    return buf;
}

/* Sum of every series of family `name` whose labels contain `labels` ("" = all). */
static double metric_sum(const char *text, const char *name, const char *labels)
{
    double sum = 0.0;
    size_t len = strlen(name);
    for (const char *p = text; p && (p = strstr(p, name)) != NULL; p += len) {
        if ((p != text && p[-1] != '\n') || (p[len] != '{' && p[len] != ' ')) continue;
        const char *eol = strchr(p, '\n'), *sp = strchr(p, ' ');
        if (!sp || (eol && sp > eol)) continue;
        if (labels[0]) {
            const char *l = strstr(p, labels);
            if (!l || l > sp) continue;
        }
        sum += strtod(sp + 1, NULL);
    }
    return sum;
}

#define MAX_SAMPLES 4096

typedef struct sample {
    double t;
    long rss_kb;
    double accounted, held; /* accounted host memory, and the push payloads it buffers */
} sample;

static sample samples[MAX_SAMPLES];
static int nsamples;
static atomic_int sampling;

typedef struct sampler_arg {
    int pid, admin;
    double start, every;
} sampler_arg;

static void *sampler_main(void *arg)
{
    sampler_arg *a = arg;
    double next = a->start;
    while (atomic_load(&sampling)) {
        if (now_s() >= next && nsamples < MAX_SAMPLES) {
            char *m = scrape(a->admin);
            samples[nsamples++] = (sample){now_s() - a->start, rss_kb(a->pid),
                                           m ? metric_sum(m, "gradagg_memory_bytes", "device=\"host\"") : -1.0,
                                           m ? metric_sum(m, "gradagg_held_bytes", "") : -1.0};
            free(m);
            next += a->every;
        }
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median RSS (kB) of samples[from, from + n). */
static double median_rss(int from, int n)
{
    double v[MAX_SAMPLES];
    if (n <= 0 || from < 0 || from + n > nsamples) return -1.0;
    for (int i = 0; i < n; i++) v[i] = (double)samples[from + i].rss_kb;
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

/* The least accounted memory that is not buffered pushes over samples[from, from + n): the
 * state a leak would grow (parameters, optimizer state, staging), below the passing peaks of
 * applies and checkpoints in flight. */
static double least_state(int from, int n)
{
    double least = -1.0;
    for (int i = from; i < from + n && i < nsamples; i++) {
        double v = samples[i].accounted - samples[i].held;
        if (least < 0 || v < least) least = v;
    }
    return least;
}

/* ---- checks ---- */

typedef struct job_result {
    uint64_t version;
    bool versions_ok, exact_ok, identical_ok;
    double worst;
} job_result;

static job_result check_job(int jb)
{
    const job_spec *j = &specs[jb];
    job_result res = {workers[jb][0].version, true, true, true, 0.0};
    for (uint32_t r = 0; r < RANKS; r++) {
        const worker *w = &workers[jb][r];
        if (w->st != GA_OK || w->version != res.version || w->calls != res.version || w->stats.late_pushes ||
            w->stats.retries)
            res.versions_ok = false;
        if (w->st == GA_OK && r > 0 &&
            (memcmp(w->dense, workers[jb][0].dense, j->n * sizeof(float)) != 0 ||
             memcmp(w->count, workers[jb][0].count, RANKS * sizeof(float)) != 0))
            res.identical_ok = false;
    }
    if (!j->exact || !res.versions_ok) {
        res.exact_ok = j->exact ? false : true;
        return res;
    }
    const worker *w = &workers[jb][0];
    for (uint32_t r = 0; r < RANKS; r++)
        if (w->count[r] != -(float)res.version) res.exact_ok = false;
    for (size_t i = 0; i < j->n; i++) {
        double want = ga_fault_dense_init(i);
        /* The gradient of (rank, call) repeats every 3 calls. */
        for (uint32_t r = 0; r < RANKS; r++) {
            double period = 0.0;
            for (uint64_t k = 0; k < 3; k++) period += ga_fault_dense_grad(r, k, i);
            want -= period * (double)(res.version / 3);
            for (uint64_t k = res.version / 3 * 3; k < res.version; k++) want -= ga_fault_dense_grad(r, k, i);
        }
        if ((double)w->dense[i] != want) {
            if (res.exact_ok) fprintf(stderr, "soak: %s dense[%zu] = %.9g, expected %.9g\n", j->name, i, w->dense[i], want);
            res.exact_ok = false;
            if (fabs(w->dense[i] - want) > res.worst) res.worst = fabs(w->dense[i] - want);
        }
    }
    return res;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"server", required_argument, NULL, 's'},
                                         {"admin-port", required_argument, NULL, 'a'},
                                         {"server-pid", required_argument, NULL, 'p'},
                                         {"seconds", required_argument, NULL, 't'},
                                         {"sample-seconds", required_argument, NULL, 'e'},
                                         {"json", required_argument, NULL, 'j'},
                                         {"server-env", required_argument, NULL, 'v'},
                                         {NULL, 0, NULL, 0}};
    int admin = 0, pid = 0, ch;
    double seconds = 600, every = 2.0;
    const char *json = NULL, *server_env = "";
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 's': server = optarg; break;
        case 'a': admin = atoi(optarg); break;
        case 'p': pid = atoi(optarg); break;
        case 't': seconds = atof(optarg); break;
        case 'e': every = atof(optarg); break;
        case 'j': json = optarg; break;
        case 'v': server_env = optarg; break;
        default: return 2;
        }
    }
    if (!server || admin <= 0 || pid <= 0 || !json || seconds <= 0) {
        fprintf(stderr, "usage: soak_client --server H:P --admin-port P --server-pid PID --seconds S --json FILE\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    double start = now_s();
    end_s = start + seconds;
    sampler_arg sa = {pid, admin, start, every};
    atomic_store(&sampling, 1);
    pthread_t sampler;
    pthread_create(&sampler, NULL, sampler_main, &sa);
    for (int jb = 0; jb < JOBS; jb++) {
        atomic_store(&stop_at[jb], UINT64_MAX);
        for (uint32_t r = 0; r < RANKS; r++) {
            worker *w = &workers[jb][r];
            w->job = jb, w->rank = r;
            pthread_create(&w->thread, NULL, worker_main, w);
        }
    }
    for (int jb = 0; jb < JOBS; jb++)
        for (uint32_t r = 0; r < RANKS; r++) pthread_join(workers[jb][r].thread, NULL);
    double elapsed = now_s() - start;
    atomic_store(&sampling, 0);
    pthread_join(sampler, NULL);
    char *m = scrape(admin);
    double refused = m ? metric_sum(m, "gradagg_rejected_requests_total", "") : -1;
    double broken = m ? metric_sum(m, "gradagg_broken_streams_total", "") : -1;
    double late = m ? metric_sum(m, "gradagg_late_pushes_total", "") : -1;
    double dups = m ? metric_sum(m, "gradagg_duplicate_pushes_total", "") : -1;
    double ckpts = m ? metric_sum(m, "gradagg_checkpoints_total", "") : -1;
    double ckpt_fail = m ? metric_sum(m, "gradagg_checkpoint_failures_total", "") : -1;
    free(m);

    /* Memory: after the warm-up (the first fifth, at least 10 s), the median of the last quarter
     * of the samples against the median of the first quarter: a trend, not the noise of
     * buffers that come and go. */
    double warm_s = seconds / 5 > 10 ? seconds / 5 : 10;
    int base = 0;
    while (base < nsamples && samples[base].t < warm_s) base++;
    int after = nsamples - base, q = after / 4 > 0 ? after / 4 : 1;
    long rss_max = 0, rss_end = nsamples ? samples[nsamples - 1].rss_kb : -1;
    double acc_max = 0;
    for (int i = base; i < nsamples; i++) {
        if (samples[i].rss_kb > rss_max) rss_max = samples[i].rss_kb;
        if (samples[i].accounted > acc_max) acc_max = samples[i].accounted;
    }
    double rss_first = median_rss(base, q) / 1024.0, rss_last = median_rss(nsamples - q, q) / 1024.0;
    double acc_first = least_state(base, q) / 1048576.0, acc_last = least_state(nsamples - q, q) / 1048576.0;
    double growth_mb = rss_last - rss_first, acc_growth_mb = acc_last - acc_first;
    double bound_mb = 16.0 + 0.01 * rss_first;
    /* The server's own allocations are exact: their state may not grow by more than 1 MB. */
    bool memory_ok = after >= 4 && growth_mb <= bound_mb && acc_growth_mb <= 1.0;

    bool ok = atomic_load(&failures) == 0 && refused == 0 && broken == 0 && late == 0 && ckpt_fail == 0 && memory_ok;
    uint64_t steps = 0;
    job_result res[JOBS];
    for (int jb = 0; jb < JOBS; jb++) {
        res[jb] = check_job(jb);
        steps += res[jb].version;
        ok = ok && res[jb].versions_ok && res[jb].exact_ok && res[jb].identical_ok;
    }
    printf("soak: %d clients, %d jobs, %.0f s (asked %.0f s): %llu steps (%.1f a second), %s\n", JOBS * RANKS, JOBS,
           elapsed, seconds, (unsigned long long)steps, (double)steps / elapsed, ok ? "PASS" : "FAIL");
    for (int jb = 0; jb < JOBS; jb++)
        printf("  %-15s version %6llu  calls=version %s  %s  ranks identical %s\n", specs[jb].name,
               (unsigned long long)res[jb].version, res[jb].versions_ok ? "yes" : "NO",
               specs[jb].exact ? (res[jb].exact_ok ? "exact yes" : "exact NO ") : "exact n/a",
               res[jb].identical_ok ? "yes" : "NO");
    printf("  errors: client %d, refused %g, broken streams %g, late %g, duplicates %g, checkpoints %g (failed %g)\n",
           atomic_load(&failures), refused, broken, late, dups, ckpts, ckpt_fail);
    printf("  server RSS (median of the first and last quarter after a %.0f s warm-up): %.1f -> %.1f MB, growth "
           "%.1f MB (bound %.1f MB), max %.1f MB, end %.1f MB; accounted state (least) %.3f -> %.3f MB (bound +1 MB), "
           "accounted with buffered pushes max %.1f MB; %d samples: "
           "%s\n",
           warm_s, rss_first, rss_last, growth_mb, bound_mb, rss_max / 1024.0, rss_end / 1024.0, acc_first, acc_last,
           acc_max / 1048576.0, nsamples, memory_ok ? "flat" : "GROWING");

    FILE *f = fopen(json, "w");
    if (!f) {
        perror(json);
        return 1;
    }
    fprintf(f, "{\n  \"pass\": %s,\n  \"seconds_asked\": %.0f,\n  \"seconds\": %.1f,\n  \"clients\": %d,\n  \"jobs\": %d,\n",
            ok ? "true" : "false", seconds, elapsed, JOBS * RANKS, JOBS);
    fprintf(f, "  \"server_env\": \"%s\",\n", server_env);
    fprintf(f, "  \"steps\": %llu,\n  \"steps_per_second\": %.2f,\n", (unsigned long long)steps, (double)steps / elapsed);
    fprintf(f, "  \"errors\": {\"client\": %d, \"refused\": %g, \"broken_streams\": %g, \"late\": %g, \"duplicates\": %g, "
               "\"checkpoint_failures\": %g},\n  \"checkpoints\": %g,\n",
            atomic_load(&failures), refused, broken, late, dups, ckpt_fail, ckpts);
    fprintf(f, "  \"memory\": {\"warmup_seconds\": %.0f, \"rss_mb_first_quarter\": %.1f, \"rss_mb_last_quarter\": %.1f, "
               "\"growth_mb\": %.1f, \"bound_mb\": %.1f, \"rss_mb_max\": %.1f, \"rss_mb_end\": %.1f, "
               "\"accounted_state_mb_first_quarter\": %.3f, \"accounted_state_mb_last_quarter\": %.3f, \"accounted_mb_max\": %.1f, "
               "\"samples\": %d, \"flat\": %s},\n",
            warm_s, rss_first, rss_last, growth_mb, bound_mb, rss_max / 1024.0, rss_end / 1024.0, acc_first, acc_last,
            acc_max / 1048576.0, nsamples, memory_ok ? "true" : "false");
    fprintf(f, "  \"job_results\": [\n");
    for (int jb = 0; jb < JOBS; jb++) {
        char codecs[160] = "";
        for (uint32_t r = 0; r < RANKS; r++) {
            strcat(codecs, ga_codec_name(specs[jb].codec[r]));
            if (r + 1 < RANKS) strcat(codecs, ",");
        }
        fprintf(f,
                "    {\"job\": \"%s\", \"codecs\": \"%s\", \"pull\": \"%s\", \"elements\": %zu, \"version\": %llu, "
                "\"calls_equal_version\": %s, \"exact\": %s, \"ranks_identical\": %s}%s\n",
                specs[jb].name, codecs, ga_codec_name(specs[jb].pull), specs[jb].n,
                (unsigned long long)res[jb].version, res[jb].versions_ok ? "true" : "false",
                specs[jb].exact ? (res[jb].exact_ok ? "true" : "false") : "null",
                res[jb].identical_ok ? "true" : "false", jb + 1 < JOBS ? "," : "");
    }
    fprintf(f, "  ],\n  \"rss_samples_mb\": [");
    for (int i = 0; i < nsamples; i++)
        fprintf(f, "%s[%.1f, %.1f]", i ? ", " : "", samples[i].t, samples[i].rss_kb / 1024.0);
    fprintf(f, "]\n}\n");
    fclose(f);
    for (int jb = 0; jb < JOBS; jb++)
        for (uint32_t r = 0; r < RANKS; r++) free(workers[jb][r].dense), free(workers[jb][r].count);
    return ok ? 0 : 1;
}
