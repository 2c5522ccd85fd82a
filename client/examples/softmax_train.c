/* softmax_train: multinomial logistic regression trained data-parallel through gradagg-server.
 *
 * The data set is generated from a fixed seed, identical on every rank: x ~ N(0, I) in D
 * dimensions, and a label drawn from softmax(W* x + b*) for a fixed random teacher (W*, b*), so
 * the teacher is the population optimum and its loss (printed at start) is what training should
 * approach. Each rank computes the gradient of the mean cross-entropy over its slice of the
 * samples (full batch, or --batch samples a step), pushes it with the chosen codec, and the
 * server averages the ranks and applies SGD. Rank 0 prints progress and, at the end,
 * `final loss <x> accuracy <y>` over the whole data set; every rank ends with
 * `stats rank <r> bytes_pushed <b> bytes_pulled <b> steps <n> retries <n> late_pushes <n>`.
 *
 *   softmax_train --server 127.0.0.1:7070 --job demo --rank 0 --world 4 --codec 2bit \
 *                 --threshold 0.05 --steps 200 --lr 1
 *
 * An elastic job (--min-world m, or GRADAGG_MIN_WORLD_SIZE): --world is the most ranks, --rank any
 * (GRADAGG_RANK=any) lets the server pick one, and --steps counts the job's steps, so a worker
 * that joins late stops with the others. */
#define _POSIX_C_SOURCE 200809L /* sigaction */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradagg.h"

typedef struct args {
    ga_client_options client; /* server, job, rank, world size, token and TLS */
    const char *codec;
    uint32_t steps, every, samples, features, classes, batch;
    float threshold, ratio, lr, momentum, teacher_scale;
    uint64_t seed;
} args;

static void usage(void)
{
    fprintf(stderr,
            "usage: softmax_train [--server host:port] [--job name] [--rank r|any] [--world w] [--min-world m]\n"
            "         [--codec none|fp16|bf16|2bit|1bit|1bit_scaled|topk] [--threshold t] [--ratio r]\n"
            "         [--steps n] [--lr x] [--momentum m] [--batch b (0 = full)] [--every k]\n"
            "         [--samples n] [--features d] [--classes c] [--seed s]\n");
}

/* An elastic job's worker asked to stop (SIGTERM: Kubernetes lowered the Job's parallelism, or
 * drains the node): it ends its step and leaves the job as stopped, which goes on without it. */
static volatile sig_atomic_t stop_requested;

static void on_sigterm(int sig)
{
    (void)sig;
    stop_requested = 1;
}

/* The options from the environment first (GRADAGG_SERVER, RANK, JOB_COMPLETION_INDEX, ...:
 * docs/launch.md), then the flags. */
static int parse_args(int argc, char **argv, args *a)
{
    *a = (args){GA_CLIENT_OPTIONS_INIT, "none", 200, 20, 16384, 64, 10, 0, 0.0f, 0.0f, 1.0f, 0.0f, 4.0f, 42};
    a->client.job = "softmax";
    char msg[256];
    if (ga_client_options_from_env(&a->client, msg, sizeof msg) != GA_OK) {
        fprintf(stderr, "softmax_train: %s\n", msg);
        return -1;
    }
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(k, "--help") == 0 || strcmp(k, "-h") == 0) {
            usage();
            exit(0);
        }
        if (!v) {
            fprintf(stderr, "softmax_train: %s needs a value\n", k);
            return -1;
        }
        i++;
        if (strcmp(k, "--server") == 0) a->client.server = v;
        else if (strcmp(k, "--job") == 0) a->client.job = v;
        else if (strcmp(k, "--codec") == 0) a->codec = v;
        else if (strcmp(k, "--rank") == 0)
            a->client.rank = strcmp(v, "any") == 0 ? GA_RANK_ANY : (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(k, "--min-world") == 0) a->client.min_world_size = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(k, "--world") == 0) a->client.world_size = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(k, "--steps") == 0) a->steps = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(k, "--every") == 0) a->every = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(k, "--samples") == 0) a->samples = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(k, "--features") == 0) a->features = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(k, "--classes") == 0) a->classes = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(k, "--batch") == 0) a->batch = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(k, "--threshold") == 0) a->threshold = strtof(v, NULL);
        else if (strcmp(k, "--ratio") == 0) a->ratio = strtof(v, NULL);
        else if (strcmp(k, "--lr") == 0) a->lr = strtof(v, NULL);
        else if (strcmp(k, "--momentum") == 0) a->momentum = strtof(v, NULL);
        else if (strcmp(k, "--seed") == 0) a->seed = strtoull(v, NULL, 10);
        else {
            fprintf(stderr, "softmax_train: unknown option %s\n", k);
            usage();
            return -1;
        }
    }
    uint32_t world = a->client.world_size;
    bool any = a->client.rank == GA_RANK_ANY;
    if (world == 0 || (a->client.rank >= world && !any) || (any && a->client.min_world_size == 0) ||
        a->samples < world || a->features == 0 || a->classes < 2 || a->every == 0) {
        fprintf(stderr, "softmax_train: need rank < world (or rank any with --min-world), samples >= world, "
                        "features > 0, classes >= 2\n");
        return -1;
    }
    return 0;
}

/* ---- the data set ---- */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_uniform(uint64_t *s) { return ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0; }

static double rng_normal(uint64_t *s)
{
    return sqrt(-2.0 * log(rng_uniform(s))) * cos(6.283185307179586 * rng_uniform(s));
}

typedef struct dataset {
    size_t n, d, c;
    float *x;   /* n x d */
    int *y;     /* n */
    float *tw;  /* teacher: c x d, then c biases */
} dataset;

/* logits[c] = w[c,:] . x + b[c] */
static void logits_of(const dataset *ds, const float *w, const float *b, const float *x, double *out)
{
    for (size_t k = 0; k < ds->c; k++) {
        double z = b[k];
        const float *wk = w + k * ds->d;
        for (size_t j = 0; j < ds->d; j++) z += (double)wk[j] * x[j];
        out[k] = z;
    }
}

/* Turns logits into probabilities in place; returns log-sum-exp. */
static double softmax(double *z, size_t c)
{
    double mx = z[0];
    for (size_t k = 1; k < c; k++) mx = z[k] > mx ? z[k] : mx;
    double sum = 0.0;
    for (size_t k = 0; k < c; k++) sum += exp(z[k] - mx);
    double lse = mx + log(sum);
    for (size_t k = 0; k < c; k++) z[k] = exp(z[k] - lse);
    return lse;
}

static int make_dataset(const args *a, dataset *ds)
{
    ds->n = a->samples;
    ds->d = a->features;
    ds->c = a->classes;
    ds->x = malloc(ds->n * ds->d * sizeof(float));
    ds->y = malloc(ds->n * sizeof(int));
    ds->tw = malloc(ds->c * (ds->d + 1) * sizeof(float));
    double *z = malloc(ds->c * sizeof(double));
    if (!ds->x || !ds->y || !ds->tw || !z) {
        free(z);
        return -1;
    }
    uint64_t s = a->seed;
    double scale = a->teacher_scale / sqrt((double)ds->d);
    for (size_t i = 0; i < ds->c * ds->d; i++) ds->tw[i] = (float)(scale * rng_normal(&s));
    for (size_t k = 0; k < ds->c; k++) ds->tw[ds->c * ds->d + k] = (float)(0.5 * rng_normal(&s));
    for (size_t i = 0; i < ds->n; i++) {
        float *x = ds->x + i * ds->d;
        for (size_t j = 0; j < ds->d; j++) x[j] = (float)rng_normal(&s);
        logits_of(ds, ds->tw, ds->tw + ds->c * ds->d, x, z);
        softmax(z, ds->c);
        double u = rng_uniform(&s), acc = 0.0;
        int label = (int)ds->c - 1;
        for (size_t k = 0; k < ds->c; k++) {
            acc += z[k];
            if (u < acc) {
                label = (int)k;
                break;
            }
        }
        ds->y[i] = label;
    }
    free(z);
    return 0;
}

static void free_dataset(dataset *ds)
{
    free(ds->x);
    free(ds->y);
    free(ds->tw);
}

/* Mean cross-entropy and accuracy of (w, b) over samples [lo, hi). */
static void evaluate(const dataset *ds, const float *w, const float *b, size_t lo, size_t hi, double *z,
                     double *loss, double *acc)
{
    double sum = 0.0;
    size_t right = 0;
    for (size_t i = lo; i < hi; i++) {
        logits_of(ds, w, b, ds->x + i * ds->d, z);
        size_t best = 0;
        for (size_t k = 1; k < ds->c; k++)
            if (z[k] > z[best]) best = k;
        right += (int)best == ds->y[i];
        double zy = z[ds->y[i]];
        sum += softmax(z, ds->c) - zy;
    }
    *loss = sum / (double)(hi - lo);
    *acc = (double)right / (double)(hi - lo);
}

/* Gradient of the mean cross-entropy over samples idx in [lo, hi) (wrapping inside the rank's
 * slice [slo, shi)) into gw (c x d) and gb (c). */
static void gradient(const dataset *ds, const float *w, const float *b, size_t slo, size_t shi, size_t lo,
                     size_t count, double *z, float *gw, float *gb)
{
    size_t c = ds->c, d = ds->d;
    memset(gw, 0, c * d * sizeof *gw);
    memset(gb, 0, c * sizeof *gb);
    float inv = 1.0f / (float)count;
    for (size_t t = 0; t < count; t++) {
        size_t i = slo + (lo - slo + t) % (shi - slo);
        const float *x = ds->x + i * d;
        logits_of(ds, w, b, x, z);
        softmax(z, c);
        z[ds->y[i]] -= 1.0;
        for (size_t k = 0; k < c; k++) {
            float e = (float)z[k] * inv;
            float *gk = gw + k * d;
            for (size_t j = 0; j < d; j++) gk[j] += e * x[j];
            gb[k] += e;
        }
    }
}

int main(int argc, char **argv)
{
    args a;
    if (parse_args(argc, argv, &a) != 0) return 2;
    ga_codec_id codec;
    if (ga_codec_from_name(a.codec, &codec) != GA_OK) {
        fprintf(stderr, "softmax_train: unknown codec '%s'\n", a.codec);
        return 2;
    }
    dataset ds = {0};
    size_t nw = (size_t)a.classes * a.features;
    float *w = calloc(nw, sizeof(float)), *b = calloc(a.classes, sizeof(float));
    float *gw = malloc(nw * sizeof(float)), *gb = malloc(a.classes * sizeof(float));
    double *z = malloc(a.classes * sizeof(double));
    if (!w || !b || !gw || !gb || !z || make_dataset(&a, &ds) != 0) {
        fprintf(stderr, "softmax_train: out of memory\n");
        return 1;
    }
    uint32_t rank = a.client.rank, world = a.client.world_size;
    bool elastic = a.client.min_world_size > 0;

    ga_client_options opt = a.client;
    opt.mean = true;
    opt.optimizer = GA_SERVER_OPTIM_SGD;
    opt.sgd.lr = a.lr;
    opt.sgd.momentum = a.momentum;
    opt.threads = 1; /* tiny tensors: no thread team to start */
    ga_client *cl = NULL;
    char msg[512];
    int rc = 1;
    ga_status st = ga_client_create(&opt, &cl, msg, sizeof msg);
    if (st != GA_OK) {
        fprintf(stderr, "softmax_train rank %u: %s\n", rank, msg);
        goto out;
    }
    rank = ga_client_rank(cl); /* the server's pick for --rank any */
    /* Each rank's slice of the data; an elastic job's absent ranks' slices wait for them. */
    size_t slo = (size_t)rank * ds.n / world, shi = (size_t)(rank + 1) * ds.n / world;
    size_t batch = a.batch && a.batch < shi - slo ? a.batch : shi - slo;
    ga_tensor_options topt = GA_TENSOR_OPTIONS_INIT;
    topt.codec = codec;
    topt.params = ga_codec_params_default(codec);
    if (a.threshold > 0.0f) topt.params.threshold = a.threshold;
    if (a.ratio > 0.0f) topt.params.ratio = a.ratio;
    uint64_t wshape[2] = {a.classes, a.features}, bshape[1] = {a.classes};
    if ((st = ga_client_add_tensor(cl, "softmax/w", wshape, 2, w, &topt, NULL)) != GA_OK ||
        (st = ga_client_add_tensor(cl, "softmax/b", bshape, 1, b, &topt, NULL)) != GA_OK ||
        (st = ga_client_init(cl)) != GA_OK) {
        fprintf(stderr, "softmax_train rank %u: %s\n", rank, ga_client_error(cl));
        goto out;
    }
    double loss, acc;
    if (rank == 0) {
        evaluate(&ds, ds.tw, ds.tw + nw, 0, ds.n, z, &loss, &acc);
        printf("softmax_train: %zu samples, %zu features, %zu classes, %u ranks, codec %s, lr %g; "
               "teacher loss %.4f accuracy %.4f\n",
               ds.n, ds.d, ds.c, world, a.codec, (double)a.lr, loss, acc);
        fflush(stdout);
    }
    uint64_t pushed = 0, pulled = 0;
    const float *grads[2] = {gw, gb};
    /* --steps: this worker's steps; of an elastic job, the job's (a worker that joins late or
     * comes back runs until the job's version reaches it). */
    if (elastic) {
        struct sigaction sa = {0};
        sa.sa_handler = on_sigterm;
        sigaction(SIGTERM, &sa, NULL);
    }
    for (uint32_t step = 0; elastic ? ga_client_version(cl) < a.steps && !stop_requested : step < a.steps; step++) {
        size_t lo = slo + (size_t)step * batch % (shi - slo);
        gradient(&ds, w, b, slo, shi, lo, batch, z, gw, gb);
        if ((st = ga_client_step(cl, grads)) != GA_OK) {
            fprintf(stderr, "softmax_train rank %u: step %u: %s\n", rank, step, ga_client_error(cl));
            goto out;
        }
        ga_client_stats s;
        ga_client_get_stats(cl, &s);
        pushed += s.bytes_pushed;
        pulled += s.bytes_pulled;
        if (rank == 0 && ((step + 1) % a.every == 0 || step == 0)) {
            evaluate(&ds, w, b, 0, ds.n, z, &loss, &acc);
            printf("step %4u  version %llu  loss %.4f  accuracy %.4f\n", step + 1,
                   (unsigned long long)ga_client_version(cl), loss, acc);
            fflush(stdout);
        }
    }
    if (stop_requested) {
        fprintf(stderr, "softmax_train rank %u: stopped by SIGTERM at version %llu\n", rank,
                (unsigned long long)ga_client_version(cl));
        ga_client_destroy_failed(cl, "stopped by SIGTERM");
        cl = NULL;
        rc = 128 + SIGTERM;
        goto out;
    }
    ga_client_stats s;
    ga_client_get_stats(cl, &s);
    if (rank == 0) {
        evaluate(&ds, w, b, 0, ds.n, z, &loss, &acc);
        printf("final loss %.6f accuracy %.6f\n", loss, acc);
    }
    printf("stats rank %u bytes_pushed %llu bytes_pulled %llu steps %llu retries %llu late_pushes %llu\n", rank,
           (unsigned long long)pushed, (unsigned long long)pulled, (unsigned long long)s.steps,
           (unsigned long long)s.retries, (unsigned long long)s.late_pushes);
    rc = 0;
out:
    ga_client_destroy(cl);
    free_dataset(&ds);
    free(w);
    free(b);
    free(gw);
    free(gb);
    free(z);
    return rc;
}
