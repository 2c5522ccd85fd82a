/* fault_worker: one rank of the fault tests (test_faults.c, test_netfault.c), a process of its
 * own so a test can SIGKILL it, restart it, or run it in another network namespace. Not a
 * ctest of its own.
 *
 * It trains the job of fault_grad.h (tensors "dense" and "ind", SGD lr 1, sum of the ranks;
 * with --ballast also a large "ballast" of zero gradients) until the job's version reaches
 * --until (--pause-ms before each call), and reports every call of ga_client_step on stdout,
 * one line each, flushed at once (a killed worker's last line is the last call it finished):
 *   joined rank R version V
 *   call K from V0 status NAME version V1 late 0|1 ms DURATION retries R
 *   done version V calls N retries R rejoins J late L
 * and writes the parameters (dense, then ind, raw float32) to --out. --hold-before-call K: before
 * call K it reads a line from stdin (a test's gate: it lets the worker go on after an event). Exit 0 when done, 1 on an
 * error (after --keep-going: only when --max-calls is spent), 2 for bad arguments. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fault_grad.h"
#include "gradagg.h"

typedef struct args {
    const char *server, *job, *out, *codec, *pull_codec;
    uint32_t rank, world, deadline_ms, quorum, call_timeout_ms, step_timeout_ms, retries, backoff_ms,
        backoff_max_ms, held_wait_ms, pause_ms;
    uint64_t until, max_calls, first_call, elements, ballast, hold_before;
    float threshold, ratio;
    size_t chunk_kb;
    int keep_going;
} args;

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int parse(int argc, char **argv, args *a)
{
    static const struct option opts[] = {
        {"server", required_argument, NULL, 's'},       {"job", required_argument, NULL, 'j'},
        {"rank", required_argument, NULL, 'r'},         {"world", required_argument, NULL, 'w'},
        {"until", required_argument, NULL, 'u'},        {"max-calls", required_argument, NULL, 'm'},
        {"first-call", required_argument, NULL, 'f'},   {"elements", required_argument, NULL, 'n'},
        {"codec", required_argument, NULL, 'c'},        {"threshold", required_argument, NULL, 't'},
        {"ratio", required_argument, NULL, 'R'},        {"pull-codec", required_argument, NULL, 'P'},
        {"deadline-ms", required_argument, NULL, 'd'},  {"quorum", required_argument, NULL, 'q'},
        {"chunk-kb", required_argument, NULL, 'k'},     {"call-timeout-ms", required_argument, NULL, 'T'},
        {"step-timeout-ms", required_argument, NULL, 'S'}, {"retries", required_argument, NULL, 'y'},
        {"hold-before-call", required_argument, NULL, 'H'},
        {"backoff-ms", required_argument, NULL, 'b'},   {"backoff-max-ms", required_argument, NULL, 'B'},
        {"held-wait-ms", required_argument, NULL, 'h'}, {"keep-going", no_argument, NULL, 'K'},
        {"pause-ms", required_argument, NULL, 'p'},     {"ballast", required_argument, NULL, 'x'},
        {"out", required_argument, NULL, 'o'},          {NULL, 0, NULL, 0},
    };
    *a = (args){.job = "faults", .codec = "none", .pull_codec = "none", .world = 1, .until = 10, .max_calls = 1000,
                .elements = 4096, .threshold = 1.0f, .chunk_kb = 256, .call_timeout_ms = 10000,
                .step_timeout_ms = 60000, .retries = 100, .backoff_ms = 50, .backoff_max_ms = 500};
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 's': a->server = optarg; break;
        case 'j': a->job = optarg; break;
        case 'r': a->rank = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'w': a->world = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'u': a->until = strtoull(optarg, NULL, 10); break;
        case 'm': a->max_calls = strtoull(optarg, NULL, 10); break;
        case 'f': a->first_call = strtoull(optarg, NULL, 10); break;
        case 'n': a->elements = strtoull(optarg, NULL, 10); break;
        case 'c': a->codec = optarg; break;
        case 't': a->threshold = strtof(optarg, NULL); break;
        case 'R': a->ratio = strtof(optarg, NULL); break;
        case 'P': a->pull_codec = optarg; break;
        case 'd': a->deadline_ms = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'q': a->quorum = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'k': a->chunk_kb = strtoul(optarg, NULL, 10); break;
        case 'T': a->call_timeout_ms = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'S': a->step_timeout_ms = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'y': a->retries = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'b': a->backoff_ms = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'B': a->backoff_max_ms = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'h': a->held_wait_ms = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'K': a->keep_going = 1; break;
        case 'p': a->pause_ms = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'x': a->ballast = strtoull(optarg, NULL, 10); break;
        case 'H': a->hold_before = strtoull(optarg, NULL, 10); break;
        case 'o': a->out = optarg; break;
        default: return -1;
        }
    }
    if (!a->server || !a->out || a->world == 0 || a->rank >= a->world || a->elements == 0 || a->chunk_kb == 0 ||
        a->first_call >= a->max_calls)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    args a;
    if (parse(argc, argv, &a) != 0) {
        fprintf(stderr, "usage: fault_worker --server H:P --rank R --world W --out FILE [--job J] [--until V]\n"
                        "  [--max-calls M] [--first-call K] [--elements N] [--codec C] [--threshold T] [--ratio X]\n"
                        "  [--pull-codec C] [--deadline-ms D] [--quorum Q] [--chunk-kb K] [--call-timeout-ms T]\n"
                        "  [--step-timeout-ms T] [--retries N] [--backoff-ms B] [--backoff-max-ms B]\n"
                        "  [--held-wait-ms T] [--keep-going] [--pause-ms P] [--ballast N] [--hold-before-call K]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    ga_codec_id codec, pull_codec;
    if (ga_codec_from_name(a.codec, &codec) != GA_OK || ga_codec_from_name(a.pull_codec, &pull_codec) != GA_OK) {
        fprintf(stderr, "fault_worker: unknown codec %s or %s\n", a.codec, a.pull_codec);
        return 2;
    }
    ga_client_options o = GA_CLIENT_OPTIONS_INIT;
    o.server = a.server;
    o.job = a.job;
    o.rank = a.rank;
    o.world_size = a.world;
    o.optimizer = GA_SERVER_OPTIM_SGD;
    o.sgd.lr = 1.0f;
    o.sgd.momentum = 0.0f;
    o.deadline_ms = a.deadline_ms;
    o.quorum = a.quorum;
    o.pull_codec = pull_codec;
    if (pull_codec != GA_CODEC_NONE) o.pull_params = ga_codec_params_default(pull_codec);
    o.chunk_bytes = a.chunk_kb << 10;
    o.call_timeout_ms = a.call_timeout_ms;
    o.step_timeout_ms = a.step_timeout_ms;
    o.max_retries = a.retries;
    o.backoff_ms = a.backoff_ms;
    o.backoff_max_ms = a.backoff_max_ms;
    o.threads = 1;

    size_t nd = (size_t)a.elements, ni = (size_t)(a.max_calls * a.world), nb = (size_t)a.ballast;
    float *dense = calloc(nd, sizeof *dense), *ind = calloc(ni, sizeof *ind);
    float *gd = calloc(nd, sizeof *gd), *gi = calloc(ni, sizeof *gi);
    float *ballast = calloc(nb + 1, sizeof *ballast), *gb = calloc(nb + 1, sizeof *gb);
    if (!dense || !ind || !gd || !gi || !ballast || !gb) {
        fprintf(stderr, "fault_worker: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < nd; i++) dense[i] = ga_fault_dense_init(i);

    /* A restarted worker may find its rank still leased to the one it replaces. */
    char msg[512];
    ga_client *c = NULL;
    ga_status st;
    double held_end = now_s() + a.held_wait_ms * 1e-3;
    while ((st = ga_client_create(&o, &c, msg, sizeof msg)) == GA_E_RANK_HELD && now_s() < held_end) sleep_ms(50);
    if (st != GA_OK) {
        printf("error create status %s %s\n", ga_status_name(st), msg);
        return 1;
    }
    ga_tensor_options t = GA_TENSOR_OPTIONS_INIT;
    t.codec = codec;
    t.params = ga_codec_params_default(codec);
    if (codec == GA_CODEC_2BIT || codec == GA_CODEC_1BIT) t.params.threshold = a.threshold;
    if (a.ratio > 0.0f) t.params.ratio = a.ratio;
    /* The ballast: a large tensor whose gradient is always zero, pushed as top-k (a few bytes a
     * step), so checkpoints are large and the journal small; its values never change. */
    ga_tensor_options tb = GA_TENSOR_OPTIONS_INIT;
    tb.codec = GA_CODEC_TOPK;
    tb.params = ga_codec_params_default(GA_CODEC_TOPK);
    tb.params.ratio = 0.0001f;
    uint64_t shd[1] = {nd}, shi[1] = {ni}, shb[1] = {nb};
    int rc = 1;
    if ((st = ga_client_add_tensor(c, "dense", shd, 1, dense, &t, NULL)) != GA_OK ||
        (st = ga_client_add_tensor(c, "ind", shi, 1, ind, &t, NULL)) != GA_OK ||
        (nb && (st = ga_client_add_tensor(c, "ballast", shb, 1, ballast, &tb, NULL)) != GA_OK) ||
        (st = ga_client_init(c)) != GA_OK) {
        printf("error init status %s %s\n", ga_status_name(st), ga_client_error(c));
        goto out;
    }
    ga_client_stats stats;
    ga_client_get_stats(c, &stats);
    printf("joined rank %u version %llu\n", a.rank, (unsigned long long)ga_client_version(c));
    const float *grads[3] = {gd, gi, gb};
    uint64_t call = a.first_call;
    while (ga_client_version(c) < a.until) {
        if (call >= a.max_calls) {
            printf("error calls spent at version %llu\n", (unsigned long long)ga_client_version(c));
            goto out;
        }
        if (a.pause_ms) sleep_ms(a.pause_ms);
        if (a.hold_before && call == a.hold_before) {
            char line[16];
            if (!fgets(line, sizeof line, stdin)) printf("gate: stdin closed\n");
        }
        for (size_t i = 0; i < nd; i++) gd[i] = ga_fault_dense_grad(a.rank, call, i);
        memset(gi, 0, ni * sizeof *gi);
        gi[ga_fault_slot(a.rank, a.world, call)] = 1.0f;
        uint64_t before = ga_client_version(c), late = stats.late_pushes, retries = stats.retries;
        double t0 = now_s();
        st = ga_client_step(c, grads);
        ga_client_get_stats(c, &stats);
        printf("call %llu from %llu status %s version %llu late %d ms %.0f retries %llu\n", (unsigned long long)call,
               (unsigned long long)before, ga_status_name(st), (unsigned long long)ga_client_version(c),
               stats.late_pushes != late, (now_s() - t0) * 1e3, (unsigned long long)(stats.retries - retries));
        call++;
        if (st != GA_OK) {
            printf("error step %s\n", ga_client_error(c));
            if (!a.keep_going) goto out;
            sleep_ms(100);
        }
    }
    FILE *f = fopen(a.out, "wb");
    if (!f || fwrite(dense, sizeof *dense, nd, f) != nd || fwrite(ind, sizeof *ind, ni, f) != ni) {
        perror(a.out);
        if (f) fclose(f);
        goto out;
    }
    if (fclose(f) != 0) goto out;
    printf("done version %llu calls %llu retries %llu rejoins %llu late %llu\n",
           (unsigned long long)ga_client_version(c), (unsigned long long)(call - a.first_call),
           (unsigned long long)stats.retries, (unsigned long long)stats.rejoins, (unsigned long long)stats.late_pushes);
    rc = 0;
out:
    ga_client_destroy(c);
    free(dense), free(ind), free(gd), free(gi), free(ballast), free(gb);
    return rc;
}
