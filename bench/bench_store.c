/* The store's step on one backend (issue 6, item 4: W = 8 pushes of a 100M-element tensor on a
 * GPU): the decode of every push, their sum in rank order and the optimizer. Two rows per codec:
 *
 *   kernels  the apply's kernel sequence (service/store/store_publish.c) with every payload already
 *            where the backend computes (device memory on CUDA): per gradient block, zero the
 *            block, add each push's slice of it in rank order (ga_codec_decode_add_checked: the
 *            payloads were checked as they arrived; top-k sliced ahead of time), then the
 *            optimizer on it.
 *            Floor: the bytes that must cross memory (each payload read once, the parameters
 *            and optimizer state read and written once; the block stays in cache) divided by
 *            the memory bandwidth measured in the same run (CPU: a += b; CUDA: a device-to-
 *            device copy).
 *   store    what the store runs once the server has checked the pushes (bundle.h):
 *            W x ga_store_accumulate_lent from host payloads (pinned on
 *            CUDA unless --pageable), then ga_store_apply_in_place (which also publishes the
 *            fp32 values: in place on the CPU, copied to the host on CUDA). Floor: the larger
 *            of the memory floor and, on CUDA, the payloads' bytes at the measured host-to-
 *            device rate plus the publication's bytes at the measured device-to-host rate.
 *
 * Each row prints the median step time, GB/s of fp32 gradients aggregated (W x n x 4 bytes per
 * step), GB/s through memory, the memory rate measured before each step (median), and
 * floor / time (1.0 = at the limit). The parameters both rows
 * reach after the same steps are compared bit for bit: a difference exits 1, as does any error.
 *
 * Usage: bench_store [--backend cpu|cuda] [--world W] [--n N] [--codecs none,fp16,2bit,topk]
 *                    [--optim sgd|adam] [--block ELEMS] [--reps R] [--pageable] [--json FILE] */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ga_alloc.h"
#include "ga_codec.h"
#include "ga_optim.h"
#include "store/store.h"

#include "bench_util.h"

#define MAX_WORLD 64
#define MAX_REPS 64
#define MAX_CODECS 8

typedef struct options {
    ga_backend backend;
    int world, reps;
    size_t n, block;
    ga_optim_kind optim;
    bool pageable;
    ga_codec_id codecs[MAX_CODECS];
    int ncodecs;
    const char *json;
} options;

/* W encoded pushes of one codec, in host memory (pinned on CUDA unless pageable), and on CUDA a
 * device copy of each for the kernels row. */
typedef struct pushes {
    ga_codec_id codec;
    ga_codec_params params;
    void *host[MAX_WORLD];
    void *dev[MAX_WORLD];
    size_t len[MAX_WORLD], cap;
    bool pinned;
    /* Top-k over more than one block, for the kernels row: each rank's payload cut into its
     * blocks' slices ahead of time (ga_topk_slice, as the store cuts them in its apply), back to
     * back at 4-byte aligned offsets, where the backend computes; decoded with slice_params. */
    void *sliced[MAX_WORLD];
    size_t *slice_off[MAX_WORLD], *slice_len[MAX_WORLD];
    ga_codec_params slice_params;
} pushes;

/* The limits measured in this run, and the buffers the memory rate is measured on again before
 * every step (the machine drifts; the floors use the median of those runs). */
typedef struct limits {
    double h2d_bps, d2h_bps; /* CUDA: pinned host <-> device, bytes per second */
    void *a, *b, *pinned;    /* memory_elems floats each: host (CPU) or device (CUDA); pinned: CUDA */
    size_t memory_elems;
} limits;

static const ga_exec *exec_of(const options *o)
{
    static const ga_exec cpu = GA_EXEC_CPU_INIT, cuda = GA_EXEC_CUDA_INIT;
    return o->backend == GA_BACKEND_CUDA ? &cuda : &cpu;
}

static ga_status compute_alloc(const options *o, size_t bytes, void **out)
{
    if (o->backend == GA_BACKEND_CUDA) return ga_device_malloc(bytes, out);
    *out = ga_malloc(bytes);
    return *out ? GA_OK : GA_E_NOMEM;
}

static void compute_free(const options *o, void *p)
{
    if (o->backend == GA_BACKEND_CUDA) ga_device_free(p);
    else ga_free(p);
}

/* ---- limits ---- */

static double timed_copy(const ga_exec *ex, void *dst, const void *src, size_t bytes)
{
    double t0 = bench_now_s();
    if (ga_device_copy(ex, dst, src, bytes) != GA_OK || ga_exec_sync(ex) != GA_OK) return NAN;
    return bench_now_s() - t0;
}

/* One memory-rate run, in bytes per second through memory (reads and writes counted): a += b
 * on the CPU, a device-to-device copy on CUDA. NAN on a CUDA error. */
static double memory_run(const options *o, const limits *lim)
{
    size_t n = lim->memory_elems;
    if (o->backend == GA_BACKEND_CPU)
        return 12.0 * (double)n / bench_host_bandwidth_run(lim->a, lim->b, n, omp_get_max_threads());
    return 2.0 * (double)(n * sizeof(float)) / timed_copy(exec_of(o), lim->a, lim->b, n * sizeof(float));
}

static void limits_free(const options *o, limits *lim)
{
    compute_free(o, lim->a), compute_free(o, lim->b);
    ga_pinned_free(lim->pinned);
    memset(lim, 0, sizeof *lim);
}

/* The buffers (64M floats at most), and on CUDA the pinned host <-> device rates. */
static ga_status limits_make(const options *o, limits *lim)
{
    memset(lim, 0, sizeof *lim);
    lim->memory_elems = o->n < ((size_t)64 << 20) ? o->n : ((size_t)64 << 20);
    size_t bytes = lim->memory_elems * sizeof(float);
    float *host = ga_malloc(bytes);
    ga_status rc = host ? GA_OK : GA_E_NOMEM;
    if (rc == GA_OK) rc = compute_alloc(o, bytes, &lim->a);
    if (rc == GA_OK) rc = compute_alloc(o, bytes, &lim->b);
    for (unsigned k = 0; k < 2 && rc == GA_OK; k++) {
        bench_fill(host, lim->memory_elems, k + 1, 1.0f);
        rc = ga_device_copy(exec_of(o), k ? lim->b : lim->a, host, bytes);
    }
    ga_free(host);
    if (rc == GA_OK && o->backend == GA_BACKEND_CUDA) {
        rc = ga_pinned_malloc(bytes, &lim->pinned);
        if (rc == GA_OK) memset(lim->pinned, 0, bytes);
        double t[MAX_REPS], *rates[2] = {&lim->h2d_bps, &lim->d2h_bps};
        void *dst[2] = {lim->a, lim->pinned};
        const void *src[2] = {lim->pinned, lim->a};
        for (int k = 0; k < 2 && rc == GA_OK; k++) {
            timed_copy(exec_of(o), dst[k], src[k], bytes); /* warm-up */
            for (int r = 0; r < o->reps; r++) t[r] = timed_copy(exec_of(o), dst[k], src[k], bytes);
            double m = bench_median(t, o->reps);
            if (isnan(m)) rc = GA_E_CUDA;
            *rates[k] = (double)bytes / m;
        }
    }
    if (rc != GA_OK) limits_free(o, lim);
    return rc;
}

/* ---- the pushes ---- */

static void pushes_free(const options *o, pushes *p)
{
    for (int r = 0; r < o->world; r++) {
        if (p->pinned) ga_pinned_free(p->host[r]);
        else ga_free(p->host[r]);
        ga_device_free(p->dev[r]);
        compute_free(o, p->sliced[r]);
        ga_free(p->slice_off[r]), ga_free(p->slice_len[r]);
    }
    memset(p, 0, sizeof *p);
}

static size_t nblocks(const options *o)
{
    return (o->n + o->block - 1) / o->block;
}

/* Rank r's top-k payload in its blocks' slices (pushes.sliced). Every pair is in one slice and
 * no rebased index is longer than the gap it replaces, so the slices take at most the payload
 * plus a header and 3 bytes of alignment per block. */
static ga_status slices_make(const options *o, pushes *p, int r)
{
    size_t blocks = nblocks(o), cap = p->len[r] + 8 * blocks, pos = 0;
    uint8_t *host = ga_malloc(cap);
    p->slice_off[r] = ga_malloc(blocks * sizeof(size_t));
    p->slice_len[r] = ga_malloc(blocks * sizeof(size_t));
    ga_status rc = host && p->slice_off[r] && p->slice_len[r] ? GA_OK : GA_E_NOMEM;
    ga_topk_cursor cur = {0};
    for (size_t b = 0; b < blocks && rc == GA_OK; b++) {
        size_t lo = b * o->block, m = o->n - lo < o->block ? o->n - lo : o->block;
        pos = (pos + 3) & ~(size_t)3;
        rc = ga_topk_slice(&p->params, p->host[r], p->len[r], o->n, lo, m, &cur, host + pos, cap - pos,
                           &p->slice_len[r][b], &p->slice_params);
        p->slice_off[r][b] = pos;
        pos += p->slice_len[r][b];
    }
    if (rc == GA_OK) rc = compute_alloc(o, pos ? pos : 4, &p->sliced[r]);
    if (rc == GA_OK) rc = ga_device_copy(exec_of(o), p->sliced[r], host, pos);
    if (rc == GA_OK) rc = ga_exec_sync(exec_of(o));
    ga_free(host);
    return rc;
}

/* Rank r's gradients are a fixed pattern of seed r + 1, encoded on the CPU with a zero residual. */
static ga_status pushes_make(const options *o, ga_codec_id codec, pushes *p)
{
    memset(p, 0, sizeof *p);
    p->codec = codec;
    p->params = ga_codec_params_default(codec);
    p->pinned = o->backend == GA_BACKEND_CUDA && !o->pageable;
    GA_CHECK(ga_codec_encoded_size(codec, &p->params, o->n, &p->cap));
    float *grad = ga_malloc(o->n * sizeof(float)), *residual = ga_calloc(o->n, sizeof(float));
    ga_status rc = grad && residual ? GA_OK : GA_E_NOMEM;
    ga_exec cpu = GA_EXEC_CPU_INIT;
    for (int r = 0; r < o->world && rc == GA_OK; r++) {
        if (p->pinned) rc = ga_pinned_malloc(p->cap, &p->host[r]);
        else rc = (p->host[r] = ga_malloc(p->cap)) ? GA_OK : GA_E_NOMEM;
        if (rc != GA_OK) break;
        /* Scales off the fill's grid, so that sums in another order round differently. */
        bench_fill(grad, o->n, (unsigned)r + 1, 2.0f * (1.0f + (float)r / 7.0f));
        if (ga_codec_has_residual(codec)) memset(residual, 0, o->n * sizeof(float));
        rc = ga_codec_encode(&cpu, codec, &p->params, grad, ga_codec_has_residual(codec) ? residual : NULL, o->n,
                             p->host[r], p->cap, &p->len[r]);
        if (rc == GA_OK && o->backend == GA_BACKEND_CUDA) rc = ga_device_malloc(p->cap, &p->dev[r]);
        if (rc == GA_OK && o->backend == GA_BACKEND_CUDA)
            rc = ga_device_copy(exec_of(o), p->dev[r], p->host[r], p->len[r]);
        if (rc == GA_OK && codec == GA_CODEC_TOPK && o->block < o->n) rc = slices_make(o, p, r);
    }
    if (rc == GA_OK) rc = ga_exec_sync(exec_of(o));
    ga_free(grad), ga_free(residual);
    if (rc != GA_OK) pushes_free(o, p);
    return rc;
}

/* ---- the kernels row ---- */

typedef struct kernel_state {
    float *params, *state0, *state1, *grad, *zeros;
    size_t block;
    uint64_t adam_t;
} kernel_state;

static ga_sgd_params sgd_params(void)
{
    return (ga_sgd_params){.lr = 0.01f, .momentum = 0.9f, .weight_decay = 0.0f, .nesterov = false};
}

static ga_adam_params adam_params(void)
{
    return (ga_adam_params){.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
}

static ga_status kernel_step(const options *o, const pushes *p, kernel_state *k)
{
    const ga_exec *ex = exec_of(o);
    size_t block = k->block;
    ga_sgd_params sgd = sgd_params();
    ga_adam_params adam = adam_params();
    k->adam_t++;
    for (size_t at = 0; at < o->n; at += block) {
        size_t m = o->n - at < block ? o->n - at : block;
        GA_CHECK(ga_device_copy(ex, k->grad, k->zeros, m * sizeof(float)));
        for (int r = 0; r < o->world; r++) {
            size_t off = 0, len = p->len[r];
            const ga_codec_params *params = &p->params;
            const uint8_t *src = o->backend == GA_BACKEND_CUDA ? p->dev[r] : p->host[r];
            if (p->sliced[r]) {
                src = p->sliced[r], off = p->slice_off[r][at / block], len = p->slice_len[r][at / block];
                params = &p->slice_params;
            } else if (m < o->n) {
                GA_CHECK(ga_codec_payload_range(p->codec, params, o->n, at, m, &off, &len));
            }
            GA_CHECK(ga_codec_decode_add_checked(ex, p->codec, params, src + off, len, m, k->grad));
        }
        if (o->optim == GA_OPTIM_SGD) GA_CHECK(ga_sgd_step(ex, &sgd, k->params + at, k->state0 + at, k->grad, m));
        else
            GA_CHECK(ga_adam_step(ex, &adam, k->adam_t, k->params + at, k->state0 + at, k->state1 + at, k->grad, m));
    }
    return ga_exec_sync(ex);
}

static void kernel_state_free(const options *o, kernel_state *k)
{
    compute_free(o, k->params), compute_free(o, k->state0), compute_free(o, k->state1);
    compute_free(o, k->grad), compute_free(o, k->zeros);
    memset(k, 0, sizeof *k);
}

/* Parameters and state start at zero, as the store's do with no initial values. */
static ga_status kernel_state_make(const options *o, const pushes *p, kernel_state *k)
{
    memset(k, 0, sizeof *k);
    /* as the store: 1bit_scaled is decoded whole */
    k->block = ga_codec_in_order(p->codec) || p->codec == GA_CODEC_TOPK ? o->block : o->n;
    size_t bytes = o->n * sizeof(float), zb = k->block * sizeof(float);
    float *host_zeros = ga_calloc(o->n, sizeof(float));
    float **bufs[] = {&k->params, &k->state0, &k->state1, &k->grad, &k->zeros};
    size_t sizes[] = {bytes, bytes, o->optim == GA_OPTIM_ADAM ? bytes : 0, zb, zb};
    ga_status rc = host_zeros ? GA_OK : GA_E_NOMEM;
    for (size_t i = 0; i < 5 && rc == GA_OK; i++) {
        if (!sizes[i]) continue;
        void *q = NULL;
        rc = compute_alloc(o, sizes[i], &q);
        *bufs[i] = q;
        if (rc == GA_OK) rc = ga_device_copy(exec_of(o), q, host_zeros, sizes[i]);
    }
    if (rc == GA_OK) rc = ga_exec_sync(exec_of(o));
    ga_free(host_zeros);
    if (rc != GA_OK) kernel_state_free(o, k);
    return rc;
}

/* ---- the store row ---- */

/* The store, and the one reference to its tensor's latest publication that the caller of
 * ga_store_apply_in_place keeps (as the server's core does). */
typedef struct store_row {
    ga_store *s;
    ga_published latest;
} store_row;

static ga_status store_make(const options *o, store_row *sr)
{
    ga_store_config cfg = {.backend = o->backend, .optim = o->optim, .sgd = sgd_params(), .adam = adam_params(),
                           .pull_codec = GA_CODEC_NONE, .piece_elems = (size_t)1 << 22, .block_elems = o->block};
    memset(sr, 0, sizeof *sr);
    GA_CHECK(ga_store_create(&cfg, &sr->s));
    uint32_t index;
    ga_status rc = ga_store_add_tensor(sr->s, o->n, NULL, &index, &sr->latest);
    if (rc != GA_OK) ga_store_destroy(sr->s), sr->s = NULL;
    return rc;
}

static void store_free(store_row *sr)
{
    ga_published_clear(&sr->latest);
    ga_store_destroy(sr->s);
}

/* W pushes lent to the store, then the apply. Seconds of each phase in acc_s and apply_s. */
static ga_status store_step(const options *o, const pushes *p, store_row *sr, double *acc_s, double *apply_s)
{
    double t0 = bench_now_s();
    for (int r = 0; r < o->world; r++) {
        bool kept;
        GA_CHECK(ga_store_accumulate_lent(sr->s, 0, 0, o->n, p->codec, &p->params, p->host[r], p->len[r], &kept));
    }
    double t1 = bench_now_s();
    ga_published pub;
    GA_CHECK(ga_store_apply_in_place(sr->s, (uint32_t)o->world, &pub));
    *apply_s = bench_now_s() - t1;
    *acc_s = t1 - t0;
    ga_published_clear(&sr->latest);
    sr->latest = pub;
    return GA_OK;
}

/* ---- one codec ---- */

typedef struct row_result {
    double step_s, acc_s, apply_s, floor_s;
} row_result;

static double optim_bytes(const options *o)
{
    return (o->optim == GA_OPTIM_ADAM ? 24.0 : 16.0) * (double)o->n; /* params + state, read and written */
}

static void print_row(const options *o, const char *codec, const char *row, const row_result *r, double memory_bytes,
                      double memory_bps)
{
    double fp32 = 4.0 * (double)o->world * (double)o->n;
    printf("%-6s %-8s %10.3f %10.3f %10.3f %10.1f %10.1f %10.1f %10.3f\n", codec, row, 1e3 * r->step_s,
           1e3 * r->acc_s, 1e3 * r->apply_s, 1e-9 * fp32 / r->step_s, 1e-9 * memory_bytes / r->step_s,
           1e-9 * memory_bps, r->floor_s / r->step_s);
}

static void json_row(FILE *f, const char *codec, const char *row, const row_result *r, double memory_bytes,
                     double memory_bps, const options *o, bool *first)
{
    if (!f) return;
    fprintf(f, "%s    {\"codec\": \"%s\", \"row\": \"%s\", \"step_ms\": %.4f, \"accumulate_ms\": %.4f, "
               "\"apply_ms\": %.4f, \"fp32_gbps\": %.3f, \"memory_gbps\": %.3f, \"memory_limit_gbps\": %.3f, "
               "\"floor_fraction\": %.4f}",
            *first ? "" : ",\n", codec, row, 1e3 * r->step_s, 1e3 * r->acc_s, 1e3 * r->apply_s,
            4e-9 * (double)o->world * (double)o->n / r->step_s, 1e-9 * memory_bytes / r->step_s, 1e-9 * memory_bps,
            r->floor_s / r->step_s);
    *first = false;
}

static int run_codec(const options *o, ga_codec_id codec, const limits *lim, FILE *json, bool *first)
{
    pushes p;
    kernel_state k;
    store_row sr = {0};
    const char *name = ga_codec_name(codec);
    ga_status rc = pushes_make(o, codec, &p);
    if (rc != GA_OK) {
        fprintf(stderr, "%s: making the pushes: %s\n", name, ga_status_name(rc));
        return 1;
    }
    rc = kernel_state_make(o, &p, &k);
    if (rc == GA_OK) rc = store_make(o, &sr);
    double ks[MAX_REPS], ss[MAX_REPS], as[MAX_REPS], ps[MAX_REPS], bw[MAX_REPS];
    /* One warm-up step each, then the memory rate and both rows interleaved step by step. */
    for (int r = -1; r < o->reps && rc == GA_OK; r++) {
        double rate = memory_run(o, lim);
        if (isnan(rate)) {
            rc = GA_E_CUDA;
            break;
        }
        double t0 = bench_now_s(), acc = 0, apply = 0;
        rc = kernel_step(o, &p, &k);
        double t1 = bench_now_s();
        if (rc == GA_OK) rc = store_step(o, &p, &sr, &acc, &apply);
        if (r < 0) continue;
        ks[r] = t1 - t0, ss[r] = acc + apply, as[r] = acc, ps[r] = apply, bw[r] = rate;
    }
    int bad = rc != GA_OK;
    if (bad) fprintf(stderr, "%s: %s\n", name, ga_status_name(rc));

    /* Both rows ran the same steps: their parameters must be the same bits. */
    float *mine = ga_malloc(o->n * sizeof(float)), *theirs = ga_malloc(o->n * sizeof(float));
    if (!bad && (!mine || !theirs)) bad = 1, fprintf(stderr, "%s: out of memory comparing\n", name);
    if (!bad) {
        rc = ga_device_copy(exec_of(o), mine, k.params, o->n * sizeof(float));
        if (rc == GA_OK) rc = ga_exec_sync(exec_of(o));
        if (rc == GA_OK) rc = ga_store_read(sr.s, 0, GA_STORE_BUF_PARAMS, 0, o->n, theirs);
        if (rc != GA_OK) bad = 1, fprintf(stderr, "%s: reading the parameters: %s\n", name, ga_status_name(rc));
        else if (memcmp(mine, theirs, o->n * sizeof(float)) != 0)
            bad = 1, fprintf(stderr, "%s: the store's parameters differ from the kernel sequence's\n", name);
    }
    if (!bad) {
        double payload = 0;
        for (int r = 0; r < o->world; r++) payload += (double)p.len[r];
        double memory_bps = bench_median(bw, o->reps);
        double memory_bytes = payload + optim_bytes(o), memory_floor = memory_bytes / memory_bps;
        double kernels_s = bench_median(ks, o->reps);
        row_result kernels = {kernels_s, 0, kernels_s, memory_floor};
        row_result store = {bench_median(ss, o->reps), bench_median(as, o->reps), bench_median(ps, o->reps),
                            memory_floor};
        if (o->backend == GA_BACKEND_CUDA) {
            double link = payload / lim->h2d_bps + 4.0 * (double)o->n / lim->d2h_bps;
            store.floor_s = link > memory_floor ? link : memory_floor;
        }
        print_row(o, name, "kernels", &kernels, memory_bytes, memory_bps);
        print_row(o, name, "store", &store, memory_bytes, memory_bps);
        json_row(json, name, "kernels", &kernels, memory_bytes, memory_bps, o, first);
        json_row(json, name, "store", &store, memory_bytes, memory_bps, o, first);
    }
    ga_free(mine), ga_free(theirs);
    store_free(&sr);
    kernel_state_free(o, &k);
    pushes_free(o, &p);
    return bad;
}

static int usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--backend cpu|cuda] [--world W] [--n N] [--codecs none,fp16,2bit,topk] [--optim sgd|adam]\n"
            "          [--block ELEMS] [--reps R] [--pageable] [--json FILE]\n",
            argv0);
    return 2;
}

static bool parse_codecs(char *list, options *o)
{
    o->ncodecs = 0;
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (o->ncodecs == MAX_CODECS || ga_codec_from_name(tok, &o->codecs[o->ncodecs]) != GA_OK) return false;
        o->ncodecs++;
    }
    return o->ncodecs > 0;
}

int main(int argc, char **argv)
{
    options o = {.backend = GA_BACKEND_CPU, .world = 8, .reps = 5, .n = 100u * 1000u * 1000u,
                 .block = GA_STORE_BLOCK_ELEMS, .optim = GA_OPTIM_SGD};
    char default_codecs[] = "none,fp16,2bit,topk";
    char *codecs = default_codecs;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--pageable")) {
            o.pageable = true;
            continue;
        }
        if (!v) return usage(argv[0]);
        i++;
        if (!strcmp(a, "--backend") && (!strcmp(v, "cpu") || !strcmp(v, "cuda")))
            o.backend = !strcmp(v, "cuda") ? GA_BACKEND_CUDA : GA_BACKEND_CPU;
        else if (!strcmp(a, "--world")) o.world = atoi(v);
        else if (!strcmp(a, "--n")) o.n = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--codecs")) codecs = argv[i];
        else if (!strcmp(a, "--optim") && (!strcmp(v, "sgd") || !strcmp(v, "adam")))
            o.optim = !strcmp(v, "adam") ? GA_OPTIM_ADAM : GA_OPTIM_SGD;
        else if (!strcmp(a, "--block")) o.block = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--reps")) o.reps = atoi(v);
        else if (!strcmp(a, "--json")) o.json = v;
        else return usage(argv[0]);
    }
    if (o.world < 1 || o.world > MAX_WORLD || o.n == 0 || o.reps < 1 || o.reps > MAX_REPS || !parse_codecs(codecs, &o) ||
        o.block == 0 || o.block % GA_STORE_PIECE_ALIGN != 0)
        return usage(argv[0]);
    if (o.backend == GA_BACKEND_CUDA && ga_cuda_device_count() == 0) {
        printf("bench_store: %s: CUDA rows skipped\n", ga_cuda_built() ? "no device" : "built without CUDA");
        return 0;
    }

    limits lim;
    ga_status rc = limits_make(&o, &lim);
    if (rc != GA_OK) return fprintf(stderr, "measuring the limits: %s\n", ga_status_name(rc)), 1;
    printf("gradagg store step on %s: W = %d pushes of n = %zu elements, %s, block %zu, median of %d steps\n",
           o.backend == GA_BACKEND_CUDA ? "CUDA" : "the CPU", o.world, o.n, o.optim == GA_OPTIM_ADAM ? "Adam" : "SGD",
           o.block, o.reps);
    if (o.backend == GA_BACKEND_CUDA)
        printf("limits: memory = a device-to-device copy before each step; pinned host->device %.1f GB/s, "
               "device->host %.1f GB/s (%s payloads)\n",
               1e-9 * lim.h2d_bps, 1e-9 * lim.d2h_bps, o.pageable ? "pageable" : "pinned");
    else printf("limits: memory = a += b on %d threads before each step\n", omp_get_max_threads());
    printf("%-6s %-8s %10s %10s %10s %10s %10s %10s %10s\n", "codec", "row", "step ms", "push ms", "apply ms",
           "fp32 GB/s", "mem GB/s", "limit GB/s", "floor frac");

    FILE *json = NULL;
    if (o.json && !(json = fopen(o.json, "w"))) return perror(o.json), 1;
    if (json)
        fprintf(json, "{\n  \"backend\": \"%s\", \"world\": %d, \"n\": %zu, \"block\": %zu, \"optim\": \"%s\", "
                      "\"reps\": %d, \"pinned\": %s,\n  \"h2d_gbps\": %.2f, \"d2h_gbps\": %.2f,\n"
                      "  \"rows\": [\n",
                o.backend == GA_BACKEND_CUDA ? "cuda" : "cpu", o.world, o.n, o.block,
                o.optim == GA_OPTIM_ADAM ? "adam" : "sgd", o.reps,
                o.backend == GA_BACKEND_CUDA && !o.pageable ? "true" : "false", 1e-9 * lim.h2d_bps,
                1e-9 * lim.d2h_bps);
    int bad = 0;
    bool first = true;
    for (int c = 0; c < o.ncodecs; c++) bad |= run_codec(&o, o.codecs[c], &lim, json, &first);
    if (json) {
        fprintf(json, "\n  ]\n}\n");
        fclose(json);
    }
    limits_free(&o, &lim);
    return bad;
}
