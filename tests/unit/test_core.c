/* The core (service/core*.c) over in-memory calls and a real libuv loop: sync steps with mixed
 * codecs against a reference built from the kernels (decode_add in rank order, then the
 * optimizer), every arrival order, duplicates, the straggler deadline and late pushes, async
 * jobs, waiting and compressed pulls, drain, membership, limits, and a table of bad inputs that
 * each leave the job exactly as it was. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "test_memory.h"

#include "core/core_internal.h"
#include "fake_call.h"
#include "ga_alloc.h"
#include "ga_codec.h"
#include "ga_optim.h"
#include "ga_reduce.h"
#include "ga_wire.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define WORLD 3
#define STEPS 4
#define NT 2

static const ga_exec cpu = {GA_BACKEND_CPU, 1, GA_SIMD_AUTO, NULL};

/* ---- harness: a loop, a core, calls ---- */

typedef struct harness {
    uv_loop_t loop;
    ga_core *core;
} harness;

static ga_core_options test_options(void)
{
    ga_core_options o = GA_CORE_OPTIONS_INIT;
    o.threads = 1;
    o.pull_chunk_bytes = 4 * GA_STORE_PIECE_ALIGN; /* 1024-element pieces */
    return o;
}

static void h_open(harness *h, const ga_core_options *o)
{
    assert_int_equal(uv_loop_init(&h->loop), 0);
    assert_int_equal(ga_core_create(o, &h->loop, &h->core), GA_OK);
}

static bool idle(const harness *h)
{
    for (size_t i = 0; i < h->core->njobs; i++)
        if (!ga_taskq_idle(&h->core->jobs[i]->tasks)) return false;
    return true;
}

/* Runs the loop until no math is queued (timers that have not fired stay armed). */
static void settle(harness *h)
{
    while (!idle(h)) uv_run(&h->loop, UV_RUN_ONCE);
}

/* Runs the loop until nothing is left: queued math and armed timers. */
static void run_all(harness *h)
{
    uv_run(&h->loop, UV_RUN_DEFAULT);
    settle(h);
}

static void h_close(harness *h)
{
    settle(h);
    ga_core_destroy(h->core);
    uv_run(&h->loop, UV_RUN_DEFAULT); /* the timers' close callbacks */
    assert_int_equal(uv_loop_close(&h->loop), 0);
}

static void expect(const ga_call *c, ga_status want)
{
    if (!c->finished) fail_msg("call not finished, want %s", ga_status_name(want));
    if (c->status != want)
        fail_msg("got %s (%s), want %s", ga_status_name(c->status), c->message, ga_status_name(want));
    assert_int_equal(c->misuse, 0);
}

static void done(ga_call *c, ga_status want)
{
    expect(c, want);
    fake_call_free(c);
}

/* ---- requests ---- */

typedef struct config {
    Gradagg__V1__JobConfig c;
    Gradagg__V1__Optimizer o;
    Gradagg__V1__Straggler s;
    Gradagg__V1__Codec p;
} config;

/* W ranks, sync, mean, SGD with momentum and weight decay, no straggler policy, fp32 pulls. */
static void config_init(config *k, uint32_t world)
{
    gradagg__v1__job_config__init(&k->c);
    gradagg__v1__optimizer__init(&k->o);
    gradagg__v1__straggler__init(&k->s);
    gradagg__v1__codec__init(&k->p);
    k->c.world_size = world;
    k->c.reduce = GRADAGG__V1__REDUCE__REDUCE_MEAN;
    k->o.kind = GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_SGD;
    k->o.lr = 0.05f;
    k->o.momentum = 0.9f;
    k->o.weight_decay = 0.001f;
    k->c.optimizer = &k->o;
    k->c.straggler = &k->s;
    k->c.pull_codec = &k->p;
}

static ga_call *join(harness *h, const char *job, uint32_t rank, uint64_t inc, const config *k)
{
    Gradagg__V1__JoinRequest r = GRADAGG__V1__JOIN_REQUEST__INIT;
    r.job = (char *)job;
    r.rank = rank;
    r.incarnation = inc;
    r.config = k ? (Gradagg__V1__JobConfig *)&k->c : NULL;
    ga_call *c = fake_call_new();
    ga_core_join(h->core, c, (Gradagg__V1__JoinRequest *)fake_wire_copy(&r.base));
    return c;
}

static ga_call *leave(harness *h, const char *job, uint32_t rank, uint64_t inc)
{
    Gradagg__V1__LeaveRequest r = GRADAGG__V1__LEAVE_REQUEST__INIT;
    r.job = (char *)job;
    r.rank = rank;
    r.incarnation = inc;
    ga_call *c = fake_call_new();
    ga_core_leave(h->core, c, (Gradagg__V1__LeaveRequest *)fake_wire_copy(&r.base));
    return c;
}

static ga_call *pull(harness *h, const char *job, uint32_t rank, uint64_t inc, uint64_t min_version, bool has,
                     uint64_t have)
{
    Gradagg__V1__PullRequest r = GRADAGG__V1__PULL_REQUEST__INIT;
    r.job = (char *)job;
    r.rank = rank;
    r.incarnation = inc;
    r.min_version = min_version;
    r.has_version = has;
    r.have_version = have;
    ga_call *c = fake_call_new();
    ga_core_pull(h->core, c, (Gradagg__V1__PullRequest *)fake_wire_copy(&r.base));
    return c;
}

static Gradagg__V1__StatusResponse *status(harness *h, const char *job)
{
    Gradagg__V1__StatusRequest r = GRADAGG__V1__STATUS_REQUEST__INIT;
    r.job = (char *)job;
    ga_call *c = fake_call_new();
    ga_core_status(h->core, c, (Gradagg__V1__StatusRequest *)fake_wire_copy(&r.base));
    expect(c, GA_OK);
    Gradagg__V1__StatusResponse *s =
        (Gradagg__V1__StatusResponse *)fake_call_response(c, &gradagg__v1__status_response__descriptor);
    assert_non_null(s);
    fake_call_free(c);
    return s;
}

static void status_free(Gradagg__V1__StatusResponse *s) { protobuf_c_message_free_unpacked(&s->base, NULL); }

typedef struct init_spec {
    const char *tensor;
    uint64_t shape[2];
    size_t ndim;
    uint64_t offset, count;
    const float *values; /* NULL: no values */
} init_spec;

static ga_call *init_stream(harness *h, const char *job, uint32_t rank, uint64_t inc, const init_spec *specs,
                            size_t n, bool await_values)
{
    ga_init *b = NULL;
    char why[256];
    for (size_t i = 0; i < n; i++) {
        Gradagg__V1__InitChunk c = GRADAGG__V1__INIT_CHUNK__INIT;
        uint64_t shape[2] = {specs[i].shape[0], specs[i].shape[1]};
        c.job = (char *)job;
        c.rank = rank;
        c.incarnation = inc;
        c.tensor = (char *)specs[i].tensor;
        c.n_shape = specs[i].ndim;
        c.shape = shape;
        c.offset = specs[i].offset;
        c.count = specs[i].count;
        c.await_values = await_values;
        if (specs[i].values) {
            c.values.data = (uint8_t *)(specs[i].values + specs[i].offset);
            c.values.len = 4 * specs[i].count;
        }
        ga_status rc = ga_init_add(&b, (Gradagg__V1__InitChunk *)fake_wire_copy(&c.base), SIZE_MAX, NULL, why, sizeof why);
        if (rc != GA_OK) fail_msg("init chunk %zu: %s %s", i, ga_status_name(rc), why);
    }
    ga_call *c = fake_call_new();
    ga_core_init(h->core, c, b);
    return c;
}

static ga_call *init(harness *h, const char *job, uint32_t rank, uint64_t inc, const init_spec *specs, size_t n)
{
    return init_stream(h, job, rank, inc, specs, n, false);
}

/* An init that names specs without values and waits for another rank's (await_values). */
static ga_call *await_init(harness *h, const char *job, uint32_t rank, uint64_t inc, const init_spec *specs, size_t n)
{
    return init_stream(h, job, rank, inc, specs, n, true);
}

/* Finishes an init call that must have succeeded; checks its counts. */
static void expect_init(ga_call *c, uint32_t created, uint32_t existing)
{
    expect(c, GA_OK);
    Gradagg__V1__InitResponse *r =
        (Gradagg__V1__InitResponse *)fake_call_response(c, &gradagg__v1__init_response__descriptor);
    assert_int_equal(r->created, created);
    assert_int_equal(r->existing, existing);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    fake_call_free(c);
}

typedef struct part {
    const char *tensor;
    uint64_t offset, count;
    ga_codec_id codec;
    ga_codec_params p;
    const uint8_t *payload;
    size_t len;
} part;

/* A push stream; has_lr: its chunks name lr for the step (PushChunk.has_lr / lr). */
static ga_call *push_lr(harness *h, const char *job, uint32_t rank, uint64_t inc, uint64_t step, const part *parts,
                        size_t n, bool has_lr, float lr)
{
    ga_push *b = NULL;
    char why[256];
    for (size_t i = 0; i < n; i++) {
        Gradagg__V1__PushChunk c = GRADAGG__V1__PUSH_CHUNK__INIT;
        Gradagg__V1__Codec codec;
        ga_codec_to_wire(parts[i].codec, &parts[i].p, &codec);
        c.job = (char *)job;
        c.rank = rank;
        c.incarnation = inc;
        c.step = step;
        c.has_lr = has_lr;
        c.lr = lr;
        c.tensor = (char *)parts[i].tensor;
        c.offset = parts[i].offset;
        c.count = parts[i].count;
        c.codec = &codec;
        c.payload.data = (uint8_t *)parts[i].payload;
        c.payload.len = parts[i].len;
        ga_status rc = ga_push_add(&b, (Gradagg__V1__PushChunk *)fake_wire_copy(&c.base), SIZE_MAX, NULL, why, sizeof why);
        if (rc != GA_OK) fail_msg("push chunk %zu: %s %s", i, ga_status_name(rc), why);
    }
    ga_call *c = fake_call_new();
    ga_core_push(h->core, c, b);
    return c;
}

static ga_call *push(harness *h, const char *job, uint32_t rank, uint64_t inc, uint64_t step, const part *parts,
                     size_t n)
{
    return push_lr(h, job, rank, inc, step, parts, n, false, 0.0f);
}

/* The acknowledgement of a finished push. */
static void expect_ack(ga_call *c, uint64_t step, bool duplicate, uint64_t version)
{
    expect(c, GA_OK);
    Gradagg__V1__PushResponse *r =
        (Gradagg__V1__PushResponse *)fake_call_response(c, &gradagg__v1__push_response__descriptor);
    assert_non_null(r);
    assert_int_equal(r->step, step);
    assert_int_equal(r->duplicate, duplicate);
    assert_int_equal(r->version, version);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    fake_call_free(c);
}

/* ---- the scenario: tensors, codecs per rank, gradients ---- */

static const char *const names[NT] = {"w", "b"};
static const uint64_t sizes[NT] = {2500, 300};

typedef struct plan {
    int tensor;
    uint64_t lo, hi;
    ga_codec_id codec;
} plan;

/* Every rank covers both tensors; rank 2 splits w across two codecs and sends b first. */
static const plan plans[WORLD][3] = {
    {{0, 0, 2500, GA_CODEC_NONE}, {1, 0, 300, GA_CODEC_TOPK}},
    {{0, 0, 2500, GA_CODEC_FP16}, {1, 0, 300, GA_CODEC_2BIT}},
    {{1, 0, 300, GA_CODEC_NONE}, {0, 1024, 2500, GA_CODEC_TOPK}, {0, 0, 1024, GA_CODEC_2BIT}},
};
static const size_t nplans[WORLD] = {2, 2, 3};

static ga_codec_params plan_params(ga_codec_id codec, int rank, int step)
{
    ga_codec_params p = ga_codec_params_default(codec);
    if (codec == GA_CODEC_2BIT) p.threshold = rank == 2 ? 0.02f : 0.03f;
    if (codec == GA_CODEC_TOPK) {
        p.ratio = 0.1f;
        p.sample_fraction = 1.0f;
        p.seed = (uint64_t)step;
        p.topk_values = rank == 2 ? GA_TOPK_VALUES_FP16 : GA_TOPK_VALUES_FP32;
        p.topk_indices = rank == 2 ? GA_TOPK_INDICES_VARINT : GA_TOPK_INDICES_INT32;
    }
    return p;
}

static float grad_value(int r, int s, int t, uint64_t i)
{
    uint32_t x = (uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 40503 + s * 9973 + t * 7919 + 1);
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    return ((float)(x % 20001u) - 10000.0f) * 1e-5f;
}

static float init_value(uint64_t i) { return (float)(i % 17) * 0.01f - 0.08f; }

typedef struct encoded {
    uint8_t *bytes;
    size_t len;
} encoded;

/* Every rank's payloads for every step, encoded once with error feedback, so any arrival order
 * pushes the same bytes. */
typedef struct workload {
    encoded e[STEPS][WORLD][3];
} workload;

static void workload_make(workload *wl)
{
    for (int r = 0; r < WORLD; r++)
        for (size_t k = 0; k < nplans[r]; k++) {
            const plan *pl = &plans[r][k];
            size_t n = (size_t)(pl->hi - pl->lo);
            float *grad = ga_malloc(n * sizeof *grad), *res = ga_calloc(n, sizeof *res);
            for (int s = 0; s < STEPS; s++) {
                ga_codec_params p = plan_params(pl->codec, r, s);
                for (size_t i = 0; i < n; i++) grad[i] = grad_value(r, s, pl->tensor, pl->lo + i);
                size_t cap = 0;
                assert_int_equal(ga_codec_encoded_size(pl->codec, &p, n, &cap), GA_OK);
                encoded *e = &wl->e[s][r][k];
                e->bytes = ga_malloc(cap);
                assert_int_equal(ga_codec_encode(&cpu, pl->codec, &p, grad,
                                                 ga_codec_has_residual(pl->codec) ? res : NULL, n, e->bytes, cap,
                                                 &e->len),
                                 GA_OK);
            }
            ga_free(grad), ga_free(res);
        }
}

static void workload_free(workload *wl)
{
    for (int s = 0; s < STEPS; s++)
        for (int r = 0; r < WORLD; r++)
            for (size_t k = 0; k < nplans[r]; k++) ga_free(wl->e[s][r][k].bytes);
}

static size_t parts_of(const workload *wl, int s, int r, part out[3])
{
    for (size_t k = 0; k < nplans[r]; k++) {
        const plan *pl = &plans[r][k];
        out[k] = (part){
            names[pl->tensor], pl->lo, pl->hi - pl->lo, pl->codec, plan_params(pl->codec, r, s), wl->e[s][r][k].bytes,
            wl->e[s][r][k].len};
    }
    return nplans[r];
}

static ga_call *push_step_lr(harness *h, const char *job, const workload *wl, int s, int r, uint64_t step,
                             bool has_lr, float lr)
{
    part parts[3];
    size_t n = parts_of(wl, s, r, parts);
    return push_lr(h, job, (uint32_t)r, 100 + (uint64_t)r, step, parts, n, has_lr, lr);
}

static ga_call *push_step(harness *h, const char *job, const workload *wl, int s, int r, uint64_t step)
{
    return push_step_lr(h, job, wl, s, r, step, false, 0.0f);
}

/* ---- the reference: the kernels called directly ---- */

typedef struct model {
    float *params[NT], *mom[NT];
    bool mean, async;
    ga_sgd_params sgd;
} model;

static void model_init(model *m, const config *k)
{
    for (int t = 0; t < NT; t++) {
        m->params[t] = ga_calloc(sizes[t], sizeof(float));
        m->mom[t] = ga_calloc(sizes[t], sizeof(float));
    }
    for (uint64_t i = 0; i < sizes[0]; i++) m->params[0][i] = init_value(i); /* b starts at zeros */
    m->mean = k->c.reduce == GRADAGG__V1__REDUCE__REDUCE_MEAN;
    m->async = false;
    m->sgd = (ga_sgd_params){k->o.lr, k->o.momentum, k->o.weight_decay, k->o.nesterov};
}

static void model_free(model *m)
{
    for (int t = 0; t < NT; t++) ga_free(m->params[t]), ga_free(m->mom[t]);
}

/* One closed step: contributors' payloads of workload step s decoded in rank order, mean, SGD. */
static void model_step(model *m, const workload *wl, int s, const bool contrib[WORLD])
{
    uint32_t count = 0;
    for (int r = 0; r < WORLD; r++) count += contrib[r];
    for (int t = 0; t < NT; t++) {
        float *sum = ga_calloc(sizes[t], sizeof *sum);
        for (int r = 0; r < WORLD; r++) {
            if (!contrib[r]) continue;
            for (size_t k = 0; k < nplans[r]; k++) {
                const plan *pl = &plans[r][k];
                if (pl->tensor != t) continue;
                ga_codec_params p = plan_params(pl->codec, r, s);
                const encoded *e = &wl->e[s][r][k];
                assert_int_equal(
                    ga_codec_decode_add(&cpu, pl->codec, &p, e->bytes, e->len, pl->hi - pl->lo, sum + pl->lo), GA_OK);
            }
        }
        if (m->mean && count > 1) assert_int_equal(ga_reduce_scale(&cpu, sum, sizes[t], (float)(1.0 / count)), GA_OK);
        assert_int_equal(ga_sgd_step(&cpu, &m->sgd, m->params[t], m->mom[t], sum, sizes[t]), GA_OK);
        ga_free(sum);
    }
}

/* ---- pulls as a worker applies them ---- */

typedef struct worker {
    float *held[NT];
    uint64_t version;
    size_t fulls, deltas;
} worker;

static void worker_init(worker *w)
{
    memset(w, 0, sizeof *w);
    for (int t = 0; t < NT; t++) w->held[t] = ga_calloc(sizes[t], sizeof(float));
}

static void worker_free(worker *w)
{
    for (int t = 0; t < NT; t++) ga_free(w->held[t]);
}

/* Applies a finished pull: FULL pieces replace, DELTA pieces are decoded and added. Every piece
 * of every tensor must come exactly once, 1024-element aligned. */
static void worker_apply(worker *w, ga_call *c)
{
    expect(c, GA_OK);
    assert_null(c->resp);
    size_t seen[NT] = {0};
    w->fulls = w->deltas = 0;
    for (size_t i = 0; i < c->nmsgs; i++) {
        Gradagg__V1__PullChunk *ch =
            (Gradagg__V1__PullChunk *)fake_call_message(c, i, &gradagg__v1__pull_chunk__descriptor);
        assert_non_null(ch);
        int t = strcmp(ch->tensor, "w") == 0 ? 0 : strcmp(ch->tensor, "b") == 0 ? 1 : -1;
        assert_true(t >= 0);
        assert_int_equal(ch->offset % GA_STORE_PIECE_ALIGN, 0);
        assert_int_equal(ch->offset, seen[t]);
        assert_true(ch->count > 0 && ch->offset + ch->count <= sizes[t]);
        seen[t] += ch->count;
        if (i > 0) assert_int_equal(ch->version, w->version);
        w->version = ch->version;
        if (ch->kind == GRADAGG__V1__PULL_KIND__PULL_FULL) {
            assert_int_equal(ch->payload.len, 4 * ch->count);
            memcpy(w->held[t] + ch->offset, ch->payload.data, ch->payload.len);
            w->fulls++;
        } else {
            assert_int_equal(ch->kind, GRADAGG__V1__PULL_KIND__PULL_DELTA);
            assert_int_equal(ch->base_version, ch->version - 1);
            ga_codec_id id;
            ga_codec_params p;
            char why[128];
            assert_int_equal(ga_codec_from_wire(ch->codec, "pull", &id, &p, why, sizeof why), GA_OK);
            /* the payload as the worker would receive it: 4-byte aligned */
            uint8_t *aligned = ga_malloc(ch->payload.len + 1);
            memcpy(aligned, ch->payload.data, ch->payload.len);
            assert_int_equal(
                ga_codec_decode_add(&cpu, id, &p, aligned, ch->payload.len, ch->count, w->held[t] + ch->offset), GA_OK);
            ga_free(aligned);
            w->deltas++;
        }
        protobuf_c_message_free_unpacked(&ch->base, NULL);
    }
    for (int t = 0; t < NT; t++) assert_int_equal(seen[t], sizes[t]);
    fake_call_free(c);
}

static void expect_model(const worker *w, const model *m)
{
    for (int t = 0; t < NT; t++)
        if (memcmp(w->held[t], m->params[t], sizes[t] * sizeof(float)) != 0)
            fail_msg("tensor %s differs from the reference at version %llu", names[t], (unsigned long long)w->version);
}

/* Pulls version >= v in full as rank `rank` and checks it against the model. */
static void expect_published(harness *h, const char *job, uint32_t rank, uint64_t v, const model *m)
{
    worker w;
    worker_init(&w);
    worker_apply(&w, pull(h, job, rank, 100 + rank, v, false, 0));
    assert_int_equal(w.version, v);
    expect_model(&w, m);
    worker_free(&w);
}

/* Creates job (config k), joins every rank (incarnation 100 + rank), creates w (values in two
 * chunks) and b (zeros) from rank 0; rank 1's init of the same tensors is a no-op. */
static void setup_job(harness *h, const char *job, const config *k, float *w_values)
{
    for (uint32_t r = 0; r < k->c.world_size; r++) {
        ga_call *c = join(h, job, r, 100 + r, k);
        expect(c, GA_OK);
        Gradagg__V1__JoinResponse *resp =
            (Gradagg__V1__JoinResponse *)fake_call_response(c, &gradagg__v1__join_response__descriptor);
        assert_int_equal(resp->world_size, k->c.world_size);
        assert_int_equal(resp->version, 0);
        assert_int_equal(resp->open_step, 0);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        fake_call_free(c);
    }
    for (uint64_t i = 0; i < sizes[0]; i++) w_values[i] = init_value(i);
    const init_spec specs[] = {
        {"w", {50, 50}, 2, 1500, 1000, w_values},
        {"b", {300, 0}, 1, 0, 0, NULL},
        {"w", {50, 50}, 2, 0, 1500, w_values},
    };
    ga_call *c = init(h, job, 0, 100, specs, COUNT(specs));
    assert_false(c->finished); /* created on the thread pool */
    settle(h);
    expect(c, GA_OK);
    Gradagg__V1__InitResponse *ir =
        (Gradagg__V1__InitResponse *)fake_call_response(c, &gradagg__v1__init_response__descriptor);
    assert_int_equal(ir->created, 2);
    assert_int_equal(ir->existing, 0);
    protobuf_c_message_free_unpacked(&ir->base, NULL);
    fake_call_free(c);
    if (k->c.world_size > 1) {
        float other[2500];
        for (size_t i = 0; i < 2500; i++) other[i] = 1.0f;
        const init_spec again[] = {{"b", {300, 0}, 1, 0, 300, other}, {"w", {50, 50}, 2, 0, 2500, other}};
        c = init(h, job, 1, 101, again, COUNT(again));
        settle(h);
        expect(c, GA_OK);
        ir = (Gradagg__V1__InitResponse *)fake_call_response(c, &gradagg__v1__init_response__descriptor);
        assert_int_equal(ir->created, 0);
        assert_int_equal(ir->existing, 2);
        protobuf_c_message_free_unpacked(&ir->base, NULL);
        fake_call_free(c);
    }
}

/* The common start: a core with test_options, job "j" of WORLD ranks set up (setup_job, its
 * w values in wv[2500]) and its model. */
static void open_job(harness *h, config *k, float *wv, model *m)
{
    ga_core_options o = test_options();
    h_open(h, &o);
    config_init(k, WORLD);
    setup_job(h, "j", k, wv);
    model_init(m, k);
}

/* ---- sync: mixed codecs, every arrival order ---- */

static const int perms[6][WORLD] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};

/* Runs STEPS steps with the ranks arriving in order perm (rotated each step); checks every
 * version against the model; returns the last published bytes of w in out. */
static void run_orders(const workload *wl, const int *perm, bool settle_between, float *out)
{
    harness h;
    config k;
    float wv[2500];
    model m;
    open_job(&h, &k, wv, &m);
    expect_published(&h, "j", 2, 0, &m);
    for (int s = 0; s < STEPS; s++) {
        for (int j = 0; j < WORLD; j++) {
            int r = perm[(j + s) % WORLD];
            expect_ack(push_step(&h, "j", wl, s, r, (uint64_t)s), (uint64_t)s, false, (uint64_t)s);
            if (settle_between) settle(&h); /* an early rank's bundle is accumulated before the next arrives */
        }
        settle(&h);
        bool all[WORLD] = {true, true, true};
        model_step(&m, wl, s, all);
        expect_published(&h, "j", (uint32_t)(s % WORLD), (uint64_t)s + 1, &m);
    }
    Gradagg__V1__StatusResponse *st = status(&h, "j");
    assert_string_equal(st->job, "j");
    assert_int_equal(st->version, STEPS);
    assert_int_equal(st->open_step, STEPS);
    assert_int_equal(st->steps, STEPS);
    assert_int_equal(st->committed, 0);
    assert_int_equal(st->late_pushes, 0);
    assert_int_equal(st->duplicate_pushes, 0);
    assert_int_equal(st->deadline_closes, 0);
    assert_true(st->accumulate_seconds > 0.0 && st->apply_seconds > 0.0);
    assert_int_equal(st->config->world_size, WORLD);
    assert_memory_equal(&st->config->optimizer->lr, &k.o.lr, 4);
    assert_int_equal(st->n_members, WORLD);
    for (uint32_t r = 0; r < WORLD; r++) {
        assert_int_equal(st->members[r]->rank, r);
        assert_int_equal(st->members[r]->incarnation, 100 + r);
        assert_true(st->members[r]->joined && st->members[r]->has_pushed);
        assert_int_equal(st->members[r]->last_step, STEPS - 1);
    }
    assert_int_equal(st->n_tensors, 2);
    assert_string_equal(st->tensors[0]->name, "w"); /* creation follows the stream's first mention */
    assert_int_equal(st->tensors[0]->elements, 2500);
    assert_int_equal(st->tensors[0]->n_shape, 2);
    assert_string_equal(st->tensors[1]->name, "b");
    status_free(st);
    memcpy(out, m.params[0], 2500 * sizeof(float));
    model_free(&m);
    h_close(&h);
}

static void test_sync_orders(void **state)
{
    (void)state;
    workload wl;
    workload_make(&wl);
    float first[2500], again[2500];
    run_orders(&wl, perms[0], false, first);
    for (int p = 0; p < 6; p++)
        for (int between = 0; between < 2; between++) {
            run_orders(&wl, perms[p], between, again);
            assert_memory_equal(first, again, sizeof first);
        }
    workload_free(&wl);
}

/* The same sums in another order would differ: the test can tell rank order from arrival order. */
static void test_order_matters(void **state)
{
    (void)state;
    workload wl;
    workload_make(&wl);
    float *a = ga_calloc(2500, sizeof(float)), *b = ga_calloc(2500, sizeof(float));
    for (int pass = 0; pass < 2; pass++) {
        float *sum = pass ? b : a;
        for (int j = 0; j < WORLD; j++) {
            int r = pass ? WORLD - 1 - j : j;
            for (size_t k = 0; k < nplans[r]; k++) {
                const plan *pl = &plans[r][k];
                if (pl->tensor != 0) continue;
                ga_codec_params p = plan_params(pl->codec, r, 0);
                assert_int_equal(ga_codec_decode_add(&cpu, pl->codec, &p, wl.e[0][r][k].bytes, wl.e[0][r][k].len,
                                                     pl->hi - pl->lo, sum + pl->lo),
                                 GA_OK);
            }
        }
    }
    assert_true(memcmp(a, b, 2500 * sizeof(float)) != 0);
    ga_free(a), ga_free(b);
    workload_free(&wl);
}

/* ---- duplicates ---- */

static void test_duplicates(void **state)
{
    (void)state;
    workload wl;
    workload_make(&wl);
    harness h;
    config k;
    float wv[2500];
    model m;
    open_job(&h, &k, wv, &m);
    expect_ack(push_step(&h, "j", &wl, 0, 0, 0), 0, false, 0);
    expect_ack(push_step(&h, "j", &wl, 0, 0, 0), 0, true, 0); /* a retry while the step is open */
    expect_ack(push_step(&h, "j", &wl, 0, 2, 0), 0, false, 0);
    expect_ack(push_step(&h, "j", &wl, 0, 2, 0), 0, true, 0); /* buffered behind rank 1, still once */
    expect_ack(push_step(&h, "j", &wl, 0, 1, 0), 0, false, 0);
    settle(&h);
    expect_ack(push_step(&h, "j", &wl, 0, 1, 0), 0, true, 1); /* a retry after the close */
    bool all[WORLD] = {true, true, true};
    model_step(&m, &wl, 0, all);
    expect_published(&h, "j", 0, 1, &m);
    Gradagg__V1__StatusResponse *st = status(&h, "j");
    assert_int_equal(st->duplicate_pushes, 3);
    assert_int_equal(st->steps, 1);
    assert_int_equal(st->late_pushes, 0);
    status_free(st);
    model_free(&m);
    h_close(&h);
    workload_free(&wl);
}

/* ---- straggler deadline, quorum, late pushes ---- */

static void test_deadline(void **state)
{
    (void)state;
    workload wl;
    workload_make(&wl);
    harness h;
    ga_core_options o = test_options();
    h_open(&h, &o);
    config k;
    config_init(&k, WORLD);
    k.s.deadline_ms = 30;
    k.s.quorum = 2;
    float wv[2500];
    setup_job(&h, "j", &k, wv);
    model m;
    model_init(&m, &k);

    /* Step 0: ranks 0 and 1 commit; the step waits for rank 2 until the deadline. The clock is
     * read before the first commit (which starts the timer), so a slow machine cannot make the
     * wait look shorter. */
    uint64_t t0 = uv_now(&h.loop);
    expect_ack(push_step(&h, "j", &wl, 0, 1, 0), 0, false, 0);
    expect_ack(push_step(&h, "j", &wl, 0, 0, 0), 0, false, 0);
    settle(&h);
    Gradagg__V1__StatusResponse *st = status(&h, "j");
    assert_int_equal(st->version, 0);
    assert_int_equal(st->committed, 2);
    status_free(st);
    run_all(&h);
    assert_true(uv_now(&h.loop) - t0 >= 30);
    bool s0[WORLD] = {true, true, false};
    model_step(&m, &wl, 0, s0);
    expect_published(&h, "j", 0, 1, &m);
    /* Rank 2's push for step 0 is late. */
    ga_call *c = push_step(&h, "j", &wl, 0, 2, 0);
    expect(c, GA_E_STEP_CLOSED);
    assert_non_null(strstr(c->message, "step 0"));
    fake_call_free(c);
    st = status(&h, "j");
    assert_int_equal(st->deadline_closes, 1);
    assert_int_equal(st->late_pushes, 1);
    assert_int_equal(st->version, 1);
    assert_int_equal(st->open_step, 1);
    status_free(st);

    /* Step 1: rank 2 alone at the deadline is below quorum: the step stays open; the next commit
     * closes it at once. */
    expect_ack(push_step(&h, "j", &wl, 1, 2, 1), 1, false, 1);
    run_all(&h);
    st = status(&h, "j");
    assert_int_equal(st->version, 1);
    assert_int_equal(st->committed, 1);
    status_free(st);
    expect_ack(push_step(&h, "j", &wl, 1, 0, 1), 1, false, 1);
    settle(&h);
    bool s1[WORLD] = {true, false, true};
    model_step(&m, &wl, 1, s1);
    expect_published(&h, "j", 2, 2, &m);
    done(push_step(&h, "j", &wl, 1, 1, 1), GA_E_STEP_CLOSED);
    expect_ack(push_step(&h, "j", &wl, 1, 0, 1), 1, true, 2); /* rank 0 did commit step 1 */

    /* Step 2: everyone in time; the deadline never fires. */
    for (int r = 0; r < WORLD; r++) expect_ack(push_step(&h, "j", &wl, 2, r, 2), 2, false, 2);
    t0 = uv_now(&h.loop);
    run_all(&h);
    bool s2[WORLD] = {true, true, true};
    model_step(&m, &wl, 2, s2);
    expect_published(&h, "j", 1, 3, &m);
    st = status(&h, "j");
    assert_int_equal(st->deadline_closes, 2);
    assert_int_equal(st->late_pushes, 2);
    assert_int_equal(st->duplicate_pushes, 1);
    assert_int_equal(st->steps, 3);
    status_free(st);
    model_free(&m);
    h_close(&h);
    workload_free(&wl);
}

/* A server default straggler policy applies when the job gives none. */
static void test_default_deadline(void **state)
{
    (void)state;
    harness h;
    ga_core_options o = test_options();
    o.default_deadline_ms = 25;
    o.default_quorum = 1;
    h_open(&h, &o);
    config k;
    config_init(&k, 2);
    done(join(&h, "j", 0, 1, &k), GA_OK);
    ga_job *job = ga_core_job(h.core, "j");
    assert_int_equal(job->deadline_ms, 25);
    assert_int_equal(job->quorum, 1);
    k.s.deadline_ms = 40; /* a config with its own policy keeps it (quorum 0 = world size) */
    done(join(&h, "k", 0, 1, &k), GA_OK);
    job = ga_core_job(h.core, "k");
    assert_int_equal(job->deadline_ms, 40);
    assert_int_equal(job->quorum, 2);
    h_close(&h);
}

/* ---- async ---- */

static void async_commit(model *m, const workload *wl, int s, int r)
{
    /* contributors 1, no mean: sum = decode(payload); optimizer none: params += sum */
    for (int t = 0; t < NT; t++) {
        float *sum = ga_calloc(sizes[t], sizeof *sum);
        for (size_t k = 0; k < nplans[r]; k++) {
            const plan *pl = &plans[r][k];
            if (pl->tensor != t) continue;
            ga_codec_params p = plan_params(pl->codec, r, s);
            assert_int_equal(ga_codec_decode_add(&cpu, pl->codec, &p, wl->e[s][r][k].bytes, wl->e[s][r][k].len,
                                                 pl->hi - pl->lo, sum + pl->lo),
                             GA_OK);
        }
        assert_int_equal(ga_reduce_add(&cpu, m->params[t], sum, sizes[t]), GA_OK);
        ga_free(sum);
    }
}

static void test_async(void **state)
{
    (void)state;
    workload wl;
    workload_make(&wl);
    harness h;
    ga_core_options o = test_options();
    h_open(&h, &o);
    config k;
    config_init(&k, 2);
    k.c.mode = GRADAGG__V1__MODE__MODE_ASYNC;
    k.c.reduce = GRADAGG__V1__REDUCE__REDUCE_SUM;
    k.o.kind = GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_NONE;
    k.o.lr = k.o.momentum = k.o.weight_decay = 0.0f;
    float wv[2500];
    setup_job(&h, "a", &k, wv);
    model m;
    model_init(&m, &k);

    ga_call *waiting = pull(&h, "a", 1, 101, 1, false, 0);
    assert_false(waiting->finished);
    expect_ack(push_step(&h, "a", &wl, 0, 0, 0), 0, false, 1); /* async acks name the version with the commit */
    settle(&h);
    async_commit(&m, &wl, 0, 0);
    worker w;
    worker_init(&w);
    worker_apply(&w, waiting); /* served by the commit */
    assert_int_equal(w.version, 1);
    expect_model(&w, &m);
    /* Each worker counts its own steps; a repeated step is a duplicate. */
    expect_ack(push_step(&h, "a", &wl, 1, 1, 0), 0, false, 2);
    settle(&h);
    async_commit(&m, &wl, 1, 1);
    expect_ack(push_step(&h, "a", &wl, 0, 0, 0), 0, true, 2);
    /* Back to back, without waiting for the math: applied in commit order. */
    expect_ack(push_step(&h, "a", &wl, 2, 0, 1), 1, false, 3);
    expect_ack(push_step(&h, "a", &wl, 2, 1, 1), 1, false, 4);
    expect_ack(push_step(&h, "a", &wl, 3, 1, 2), 2, false, 5);
    ga_call *p5 = pull(&h, "a", 0, 100, 5, false, 0); /* promised by the queued commits */
    done(pull(&h, "a", 0, 100, 7, false, 0), GA_E_VERSION);
    ga_call *p6 = pull(&h, "a", 0, 100, 6, false, 0); /* the next after them: waits */
    settle(&h);
    async_commit(&m, &wl, 2, 0);
    async_commit(&m, &wl, 2, 1);
    async_commit(&m, &wl, 3, 1);
    worker_apply(&w, p5);
    assert_int_equal(w.version, 5);
    expect_model(&w, &m);
    assert_false(p6->finished);
    expect_ack(push_step(&h, "a", &wl, 3, 0, 2), 2, false, 6);
    settle(&h);
    async_commit(&m, &wl, 3, 0);
    worker_apply(&w, p6);
    assert_int_equal(w.version, 6);
    expect_model(&w, &m);
    Gradagg__V1__StatusResponse *st = status(&h, "a");
    assert_int_equal(st->version, 6);
    assert_int_equal(st->open_step, 6);
    assert_int_equal(st->steps, 6);
    assert_int_equal(st->duplicate_pushes, 1);
    assert_int_equal(st->members[1]->last_step, 2);
    status_free(st);
    worker_free(&w);
    model_free(&m);
    h_close(&h);
    workload_free(&wl);
}

/* ---- the learning rate of a step ---- */

/* Refused with `want`, and the message says `says`. */
static void refused(ga_call *c, ga_status want, const char *says)
{
    expect(c, want);
    if (!strstr(c->message, says)) fail_msg("message '%s' does not say '%s'", c->message, says);
    fake_call_free(c);
}

/* Each step's pushes name its lr (an LR schedule) and the server's SGD applies it: every version
 * equals the model run with the same lrs, bit for bit. A push without one names the job's lr.
 * When the ranks name different lrs, the lowest contributing rank's applies, whatever the
 * arrival order (rank 0 names the schedule's here, the others another on odd steps); a job
 * whose optimizer takes no lr refuses one. */
static void test_step_lr(void **state)
{
    (void)state;
    workload wl;
    workload_make(&wl);
    harness h;
    config k;
    float wv[2500];
    model m;
    open_job(&h, &k, wv, &m);
    for (int s = 0; s < STEPS; s++) {
        float lr = s % 2 ? 0.05f / (float)(s + 1) : k.o.lr; /* even steps: rank 0 names none */
        for (int j = 0; j < WORLD; j++) {
            int r = perms[(s + 3) % 6][j];
            bool named = s % 2 == 1 || r != 0;
            float mine = r != 0 && s % 2 == 1 ? lr * 0.5f : lr;
            expect_ack(push_step_lr(&h, "j", &wl, s, r, (uint64_t)s, named, mine), (uint64_t)s, false, (uint64_t)s);
        }
        settle(&h);
        bool all[WORLD] = {true, true, true};
        m.sgd.lr = lr;
        model_step(&m, &wl, s, all);
        expect_published(&h, "j", 1, (uint64_t)s + 1, &m);
    }
    Gradagg__V1__StatusResponse *st = status(&h, "j");
    assert_int_equal(st->version, STEPS);
    assert_memory_equal(&st->config->optimizer->lr, &k.o.lr, 4); /* the job's own lr stays */
    status_free(st);
    model_free(&m);

    /* An optimizer without an lr (none; reduce likewise) takes none. */
    config none;
    config_init(&none, 1);
    none.o.kind = GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_NONE;
    none.o.lr = none.o.momentum = none.o.weight_decay = 0.0f;
    float nv[2500];
    setup_job(&h, "n", &none, nv);
    refused(push_step_lr(&h, "n", &wl, 0, 0, 0, true, 0.1f), GA_E_OPTIM, "which takes none");
    expect_ack(push_step(&h, "n", &wl, 0, 0, 0), 0, false, 0);
    h_close(&h);
    workload_free(&wl);
}

/* ---- waiting pulls, cancel, versions ---- */

static void test_waiting_pull(void **state)
{
    (void)state;
    workload wl;
    workload_make(&wl);
    harness h;
    config k;
    float wv[2500];
    model m;
    open_job(&h, &k, wv, &m);
    ga_call *p0 = pull(&h, "j", 0, 100, 1, false, 0), *p2 = pull(&h, "j", 2, 102, 1, false, 0);
    ga_call *gone = pull(&h, "j", 1, 101, 1, false, 0);
    done(pull(&h, "j", 1, 101, 2, false, 0), GA_E_VERSION);
    assert_false(p0->finished || p2->finished || gone->finished);
    ga_core_cancel(h.core, gone);
    expect(gone, GA_E_CANCELLED);
    fake_call_free(gone);
    ga_call *stranger = fake_call_new();
    ga_core_cancel(h.core, stranger); /* not a call of the core: ignored */
    assert_false(stranger->finished);
    fake_call_free(stranger);
    for (int r = 0; r < WORLD; r++) expect_ack(push_step(&h, "j", &wl, 0, r, 0), 0, false, 0);
    assert_false(p0->finished); /* answered when the version is published */
    settle(&h);
    bool all[WORLD] = {true, true, true};
    model_step(&m, &wl, 0, all);
    worker a, b;
    worker_init(&a), worker_init(&b);
    worker_apply(&a, p0);
    worker_apply(&b, p2);
    assert_int_equal(a.version, 1);
    expect_model(&a, &m);
    expect_model(&b, &m);
    /* An old version is answered at once with the current one. */
    worker_apply(&a, pull(&h, "j", 1, 101, 0, false, 0));
    assert_int_equal(a.version, 1);
    worker_free(&a), worker_free(&b);
    model_free(&m);
    h_close(&h);
    workload_free(&wl);
}

/* A pull that comes while an apply is queued waits for it, even for a version that exists: the
 * apply may rewrite the current blobs in place (store.h ga_store_apply_in_place). It gets the
 * new version. Async: it is answered by the first apply done, however many are queued. */
static void test_pull_during_apply(void **state)
{
    (void)state;
    workload wl;
    workload_make(&wl);
    harness h;
    config k;
    float wv[2500];
    model m;
    open_job(&h, &k, wv, &m);
    worker w;
    worker_init(&w);
    worker_apply(&w, pull(&h, "j", 0, 100, 0, false, 0)); /* nothing queued: at once */
    assert_int_equal(w.version, 0);
    for (int r = 0; r < WORLD; r++) expect_ack(push_step(&h, "j", &wl, 0, r, 0), 0, false, 0);
    ga_call *old = pull(&h, "j", 1, 101, 0, false, 0), *next = pull(&h, "j", 2, 102, 1, false, 0);
    assert_false(old->finished || next->finished);
    settle(&h);
    bool all[WORLD] = {true, true, true};
    model_step(&m, &wl, 0, all);
    worker_apply(&w, old);
    assert_int_equal(w.version, 1);
    expect_model(&w, &m);
    worker_apply(&w, next);
    assert_int_equal(w.version, 1);
    expect_model(&w, &m);
    model_free(&m);

    config a;
    config_init(&a, 2);
    a.c.mode = GRADAGG__V1__MODE__MODE_ASYNC;
    a.c.reduce = GRADAGG__V1__REDUCE__REDUCE_SUM;
    a.o.kind = GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_NONE;
    a.o.lr = a.o.momentum = a.o.weight_decay = 0.0f;
    setup_job(&h, "a", &a, wv);
    model_init(&m, &a);
    expect_ack(push_step(&h, "a", &wl, 0, 0, 0), 0, false, 1);
    ga_call *p1 = pull(&h, "a", 1, 101, 0, false, 0);
    expect_ack(push_step(&h, "a", &wl, 0, 1, 0), 0, false, 2);
    ga_call *p2 = pull(&h, "a", 0, 100, 0, false, 0);
    assert_false(p1->finished || p2->finished);
    async_commit(&m, &wl, 0, 0);
    /* Only the first apply's done: the second has not run yet. */
    while (!p1->finished) uv_run(&h.loop, UV_RUN_ONCE);
    assert_true(p2->finished);
    worker_apply(&w, p1);
    assert_int_equal(w.version, 1);
    expect_model(&w, &m);
    worker_apply(&w, p2);
    assert_int_equal(w.version, 1);
    settle(&h);
    async_commit(&m, &wl, 0, 1);
    worker_apply(&w, pull(&h, "a", 1, 101, 0, false, 0));
    assert_int_equal(w.version, 2);
    expect_model(&w, &m);
    worker_free(&w);
    model_free(&m);
    h_close(&h);
    workload_free(&wl);
}

/* ---- compressed pulls ---- */

static void test_compressed_pull(void **state)
{
    (void)state;
    workload wl;
    workload_make(&wl);
    harness h;
    ga_core_options o = test_options();
    h_open(&h, &o);
    config k;
    config_init(&k, WORLD);
    k.p.id = GRADAGG__V1__CODEC_ID__CODEC_2BIT;
    k.p.threshold = 0.002f;
    float wv[2500];
    setup_job(&h, "c", &k, wv);
    model m;
    model_init(&m, &k);
    worker delta, full;
    worker_init(&delta), worker_init(&full);
    worker_apply(&delta, pull(&h, "c", 0, 100, 0, false, 0));
    assert_int_equal(delta.fulls, 4); /* w in 3 pieces, b in 1 */
    bool lossy = false;
    for (int s = 0; s < STEPS; s++) {
        for (int r = WORLD - 1; r >= 0; r--)
            expect_ack(push_step(&h, "c", &wl, s, r, (uint64_t)s), (uint64_t)s, false, (uint64_t)s);
        settle(&h);
        bool all[WORLD] = {true, true, true};
        model_step(&m, &wl, s, all);
        uint64_t v = (uint64_t)s + 1;
        ga_call *dc = pull(&h, "c", 0, 100, v, true, v - 1);
        /* the first chunk carries the codec exactly as configured */
        Gradagg__V1__PullChunk *ch =
            (Gradagg__V1__PullChunk *)fake_call_message(dc, 0, &gradagg__v1__pull_chunk__descriptor);
        assert_int_equal(ch->kind, GRADAGG__V1__PULL_KIND__PULL_DELTA);
        assert_int_equal(ch->codec->id, GRADAGG__V1__CODEC_ID__CODEC_2BIT);
        assert_memory_equal(&ch->codec->threshold, &k.p.threshold, 4);
        assert_int_equal(ch->payload.len, 4 * ((ch->count + 15) / 16));
        protobuf_c_message_free_unpacked(&ch->base, NULL);
        worker_apply(&delta, dc);
        assert_int_equal(delta.deltas, 4);
        assert_int_equal(delta.fulls, 0);
        worker_apply(&full, pull(&h, "c", 1, 101, v, false, 0));
        assert_int_equal(full.fulls, 4);
        /* The worker that only ever added deltas holds the published copy bit for bit. */
        for (int t = 0; t < NT; t++) assert_memory_equal(delta.held[t], full.held[t], sizes[t] * sizeof(float));
        /* The published copy trails the parameters by what 2bit could not send yet. */
        for (int t = 0; t < NT; t++)
            for (uint64_t i = 0; i < sizes[t]; i++) lossy |= full.held[t][i] != m.params[t][i];
    }
    assert_true(lossy);
    /* A worker that missed a version gets fp32. */
    worker stale;
    worker_init(&stale);
    worker_apply(&stale, pull(&h, "c", 2, 102, 0, true, STEPS - 2));
    assert_int_equal(stale.fulls, 4);
    assert_int_equal(stale.deltas, 0);
    for (int t = 0; t < NT; t++) assert_memory_equal(stale.held[t], full.held[t], sizes[t] * sizeof(float));
    worker_free(&stale), worker_free(&delta), worker_free(&full);
    model_free(&m);
    h_close(&h);
    workload_free(&wl);
}

/* ---- drain ---- */

static void drained(void *arg) { ++*(int *)arg; }

static void test_drain(void **state)
{
    (void)state;
    workload wl;
    workload_make(&wl);
    harness h;
    ga_core_options o = test_options();
    h_open(&h, &o);
    config k;
    config_init(&k, WORLD);
    float wv[2500];
    setup_job(&h, "j", &k, wv);
    setup_job(&h, "idle", &k, wv);
    model m;
    model_init(&m, &k);
    expect_ack(push_step(&h, "j", &wl, 0, 0, 0), 0, false, 0);
    expect_ack(push_step(&h, "j", &wl, 0, 1, 0), 0, false, 0);
    ga_call *p2 = pull(&h, "j", 2, 102, 1, false, 0), *p0 = pull(&h, "j", 0, 100, 1, false, 0);
    ga_call *pidle = pull(&h, "idle", 0, 100, 1, false, 0);
    int calls = 0;
    ga_core_drain(h.core, drained, &calls);
    assert_int_equal(calls, 0); /* the partial step is being applied */
    /* Refused from now on. */
    done(push_step(&h, "j", &wl, 0, 2, 0), GA_E_DRAINING);
    done(join(&h, "j", 0, 100, &k), GA_E_DRAINING);
    done(join(&h, "new", 0, 1, &k), GA_E_DRAINING);
    const init_spec spec = {"x", {4, 0}, 1, 0, 0, NULL};
    done(init(&h, "j", 0, 100, &spec, 1), GA_E_DRAINING);
    settle(&h);
    assert_int_equal(calls, 1);
    bool some[WORLD] = {true, true, false};
    model_step(&m, &wl, 0, some);
    worker a;
    worker_init(&a);
    worker_apply(&a, p2);
    assert_int_equal(a.version, 1);
    expect_model(&a, &m);
    worker_apply(&a, p0);
    expect_model(&a, &m);
    expect(pidle, GA_E_DRAINING);
    fake_call_free(pidle);
    /* After the drain: what exists is served, nothing later. */
    worker_apply(&a, pull(&h, "j", 1, 101, 1, false, 0));
    done(pull(&h, "j", 1, 101, 2, false, 0), GA_E_DRAINING);
    Gradagg__V1__StatusResponse *st = status(&h, "j");
    assert_int_equal(st->version, 1);
    assert_int_equal(st->steps, 1);
    status_free(st);
    worker_free(&a);
    model_free(&m);
    h_close(&h);
    workload_free(&wl);
}

/* ---- awaiting inits ---- */

/* Ranks 1 and 2 ask for the tensors before rank 0 made them: parked (and active), answered once
 * rank 0's init created them, with rank 0's values published; a cancelled one leaves; a wrong
 * shape, a tensor that can no longer be created and a drain each end one with their status. */
static void test_await_init(void **state)
{
    (void)state;
    workload wl;
    workload_make(&wl);
    harness h;
    ga_core_options o = test_options();
    h_open(&h, &o);
    config k;
    config_init(&k, WORLD);
    for (uint32_t r = 0; r < WORLD; r++) done(join(&h, "j", r, 100 + r, &k), GA_OK);
    ga_job *job = ga_core_job(h.core, "j");
    const init_spec both[] = {{"w", {50, 50}, 2, 0, 0, NULL}, {"b", {300, 0}, 1, 0, 0, NULL}};
    ga_call *a1 = await_init(&h, "j", 1, 101, both, 2), *a2 = await_init(&h, "j", 2, 102, both, 1);
    ga_call *gone = await_init(&h, "j", 2, 102, both + 1, 1);
    settle(&h);
    assert_false(a1->finished);
    assert_false(a2->finished);
    assert_int_equal(job->ntensors, 0);
    assert_true(ga_member_waiting(&job->members[1]));
    ga_core_cancel(h.core, gone);
    done(gone, GA_E_CANCELLED);

    float wv[2500], bv[300];
    for (size_t i = 0; i < 2500; i++) wv[i] = init_value(i);
    for (size_t i = 0; i < 300; i++) bv[i] = init_value(i + 7);
    const init_spec values[] = {{"w", {50, 50}, 2, 0, 2500, wv}, {"b", {300, 0}, 1, 0, 300, bv}};
    ga_call *c0 = init(&h, "j", 0, 100, values, 2);
    assert_false(a1->finished); /* queued behind the creation */
    settle(&h);
    expect_init(c0, 2, 0);
    expect_init(a1, 0, 2);
    expect_init(a2, 0, 1);
    assert_false(ga_member_waiting(&job->members[1]));
    assert_false(ga_member_waiting(&job->members[2]));
    worker w;
    worker_init(&w);
    worker_apply(&w, pull(&h, "j", 1, 101, 0, false, 0));
    assert_memory_equal(w.held[0], wv, sizeof wv);
    assert_memory_equal(w.held[1], bv, sizeof bv);
    worker_free(&w);

    /* Existing tensors answer at once. */
    expect_init(await_init(&h, "j", 2, 102, both, 2), 0, 2);
    /* Once the job took a push no tensor can be added: an init awaiting a new one is refused at
     * once; one parked before that push waits on until the drain ends it. */
    const init_spec later = {"later", {8, 0}, 1, 0, 0, NULL};
    ga_call *parked = await_init(&h, "j", 1, 101, &later, 1);
    expect_ack(push_step(&h, "j", &wl, 0, 0, 0), 0, false, 0);
    done(await_init(&h, "j", 2, 102, &later, 1), GA_E_JOB_CONFIG);
    /* A wrong shape is refused (before the first push it would fail the job: test_sdk_server). */
    const init_spec flat = {"w", {2500, 0}, 1, 0, 0, NULL};
    done(await_init(&h, "j", 2, 102, &flat, 1), GA_E_SHAPE);
    assert_false(parked->finished);
    int drains = 0;
    ga_core_drain(h.core, drained, &drains);
    expect(parked, GA_E_DRAINING);
    assert_non_null(strstr(parked->message, "will not be created here"));
    fake_call_free(parked);
    assert_false(ga_member_waiting(&job->members[1]));
    h_close(&h);
    workload_free(&wl);
}

/* ---- membership ---- */

static void wait_ms(harness *h, unsigned ms)
{
    uv_sleep(ms);
    uv_update_time(&h->loop);
}

static void test_membership(void **state)
{
    (void)state;
    workload wl;
    workload_make(&wl);
    harness h;
    ga_core_options o = test_options();
    o.member_lease_ms = 20;
    h_open(&h, &o);
    config k;
    config_init(&k, WORLD);
    float wv[2500];
    setup_job(&h, "j", &k, wv); /* ranks as incarnations 100, 101, 102 */

    /* A retried join is a no-op; another live incarnation is refused; an idle one is replaced. */
    done(join(&h, "j", 0, 100, &k), GA_OK);
    ga_call *c = join(&h, "j", 0, 7, &k);
    expect(c, GA_E_RANK_HELD);
    assert_non_null(strstr(c->message, "incarnation 100"));
    fake_call_free(c);
    wait_ms(&h, 30);
    done(join(&h, "j", 0, 7, &k), GA_OK);
    c = push_step(&h, "j", &wl, 0, 0, 0); /* incarnation 100: replaced */
    expect(c, GA_E_STALE);
    assert_non_null(strstr(c->message, "replaced by incarnation 7"));
    fake_call_free(c);
    done(pull(&h, "j", 0, 100, 0, false, 0), GA_E_STALE);
    done(leave(&h, "j", 0, 100), GA_E_STALE);
    done(pull(&h, "j", 0, 55, 0, false, 0), GA_E_NOT_MEMBER); /* never held the rank */

    /* A worker blocked in a pull holds its rank past the lease. */
    ga_call *waiting = pull(&h, "j", 1, 101, 1, false, 0);
    wait_ms(&h, 30);
    done(join(&h, "j", 1, 11, &k), GA_E_RANK_HELD);
    ga_core_cancel(h.core, waiting);
    done(waiting, GA_E_CANCELLED);

    /* Leave: the step needs only the others. */
    done(leave(&h, "j", 2, 102), GA_OK);
    done(leave(&h, "j", 2, 102), GA_OK); /* said twice */
    done(push_step(&h, "j", &wl, 0, 2, 0), GA_E_NOT_MEMBER);
    part parts[3];
    size_t n = parts_of(&wl, 0, 0, parts);
    expect_ack(push(&h, "j", 0, 7, 0, parts, n), 0, false, 0);
    expect_ack(push_step(&h, "j", &wl, 0, 1, 0), 0, false, 0);
    settle(&h);
    Gradagg__V1__StatusResponse *st = status(&h, "j");
    assert_int_equal(st->version, 1);
    assert_false(st->members[2]->joined);
    assert_int_equal(st->members[0]->incarnation, 7);
    status_free(st);

    /* Rank 2 comes back: step 1 waits for it again. */
    done(join(&h, "j", 2, 102, &k), GA_OK);
    n = parts_of(&wl, 1, 0, parts);
    expect_ack(push(&h, "j", 0, 7, 1, parts, n), 1, false, 1);
    expect_ack(push_step(&h, "j", &wl, 1, 1, 1), 1, false, 1);
    settle(&h);
    st = status(&h, "j");
    assert_int_equal(st->version, 1);
    assert_int_equal(st->committed, 2);
    status_free(st);
    expect_ack(push_step(&h, "j", &wl, 1, 2, 1), 1, false, 1);
    settle(&h);

    /* Step 2: rank 1 leaves after rank 0 committed, then returns before anyone above it was
     * added: it is waited for again. */
    n = parts_of(&wl, 2, 0, parts);
    expect_ack(push(&h, "j", 0, 7, 2, parts, n), 2, false, 2);
    done(leave(&h, "j", 1, 101), GA_OK);
    done(join(&h, "j", 1, 101, &k), GA_OK);
    expect_ack(push_step(&h, "j", &wl, 2, 2, 2), 2, false, 2);
    settle(&h);
    st = status(&h, "j");
    assert_int_equal(st->version, 2);
    assert_int_equal(st->committed, 2);
    status_free(st);
    expect_ack(push_step(&h, "j", &wl, 2, 1, 2), 2, false, 2);
    settle(&h);

    /* Step 3: rank 1 leaves, rank 2 commits (added past rank 1), so rank 1 coming back
     * cannot rejoin this step: its push is closed out. */
    n = parts_of(&wl, 3, 0, parts);
    expect_ack(push(&h, "j", 0, 7, 3, parts, n), 3, false, 3);
    done(leave(&h, "j", 1, 101), GA_OK);
    expect_ack(push_step(&h, "j", &wl, 3, 2, 3), 3, false, 3); /* completes the step */
    settle(&h);
    done(join(&h, "j", 1, 101, &k), GA_OK);
    done(push_step(&h, "j", &wl, 3, 1, 3), GA_E_STEP_CLOSED);
    st = status(&h, "j");
    assert_int_equal(st->version, 4);
    assert_int_equal(st->steps, 4);
    status_free(st);
    h_close(&h);
    workload_free(&wl);
}

/* ---- limits ---- */

static void test_limits(void **state)
{
    (void)state;
    workload wl;
    workload_make(&wl);
    harness h;
    ga_core_options o = test_options();
    o.max_jobs = 1;
    o.max_tensors = 2;
    h_open(&h, &o);
    config k;
    config_init(&k, WORLD);
    float wv[2500];
    setup_job(&h, "j", &k, wv);
    ga_call *c = join(&h, "second", 0, 1, &k);
    expect(c, GA_E_LIMIT);
    assert_non_null(strstr(c->message, "max_jobs"));
    fake_call_free(c);
    assert_int_equal(h.core->njobs, 1);
    const init_spec third = {"third", {8, 0}, 1, 0, 0, NULL};
    c = init(&h, "j", 0, 100, &third, 1);
    expect(c, GA_E_LIMIT);
    assert_non_null(strstr(c->message, "max_tensors"));
    fake_call_free(c);

    /* Memory: a push that would pass the budget is refused and changes nothing. What it holds
     * is its payloads and its chunks' headers; the refusal at no room left says how much. */
    h.core->opt.max_memory_bytes = ga_core_bytes(h.core);
    c = push_step(&h, "j", &wl, 0, 0, 0);
    expect(c, GA_E_LIMIT);
    size_t held = 0;
    const char *says = strstr(c->message, "holding this push (");
    assert_non_null(says);
    assert_int_equal(sscanf(says, "holding this push (%zu bytes)", &held), 1);
    assert_true(held > wl.e[0][0][0].len + wl.e[0][0][1].len);
    fake_call_free(c);
    h.core->opt.max_memory_bytes = ga_core_bytes(h.core) + held - 1;
    c = push_step(&h, "j", &wl, 0, 0, 0);
    expect(c, GA_E_LIMIT);
    assert_non_null(strstr(c->message, "over its limit"));
    fake_call_free(c);
    assert_int_equal(ga_core_job(h.core, "j")->step.committed, 0);
    h.core->opt.max_memory_bytes += 1;
    expect_ack(push_step(&h, "j", &wl, 0, 0, 0), 0, false, 0);
    h.core->opt.max_memory_bytes = 16ull << 30;
    h_close(&h);

    /* Memory for new tensors. */
    o = test_options();
    o.max_memory_bytes = 4096;
    h_open(&h, &o);
    config_init(&k, 1);
    done(join(&h, "m", 0, 1, &k), GA_OK);
    const init_spec big = {"big", {1000, 0}, 1, 0, 0, NULL};
    c = init(&h, "m", 0, 1, &big, 1);
    expect(c, GA_E_LIMIT);
    fake_call_free(c);
    const init_spec small = {"small", {10, 0}, 1, 0, 0, NULL};
    c = init(&h, "m", 0, 1, &small, 1);
    settle(&h);
    expect(c, GA_OK);
    fake_call_free(c);
    h_close(&h);
    workload_free(&wl);
}

/* ---- bad inputs: each refused with its status, nothing changed ---- */

typedef struct snapshot {
    uint64_t version, open_step, committed, late, dup, deadline, steps;
    size_t njobs, tensors_t, tensors_fresh;
    uint64_t incarnation0;
    float w[2500], b[300];
} snapshot;

static void take(harness *h, snapshot *s)
{
    Gradagg__V1__StatusResponse *st = status(h, "t");
    s->version = st->version;
    s->open_step = st->open_step;
    s->committed = st->committed;
    s->late = st->late_pushes;
    s->dup = st->duplicate_pushes;
    s->deadline = st->deadline_closes;
    s->steps = st->steps;
    s->tensors_t = st->n_tensors;
    s->incarnation0 = st->members[0]->incarnation;
    status_free(st);
    st = status(h, "fresh");
    s->tensors_fresh = st->n_tensors;
    status_free(st);
    s->njobs = h->core->njobs;
    worker w;
    worker_init(&w);
    worker_apply(&w, pull(h, "t", 1, 101, 0, false, 0));
    memcpy(s->w, w.held[0], sizeof s->w);
    memcpy(s->b, w.held[1], sizeof s->b);
    worker_free(&w);
}

typedef struct bad_ctx {
    harness *h;
    const workload *wl;
    const config *k;
} bad_ctx;

typedef ga_call *(*bad_fn)(const bad_ctx *x);

/* Rank 1's step-0 parts, with one part changed. */
static ga_call *push_parts(const bad_ctx *x, const char *job, uint32_t rank, uint64_t inc, uint64_t step,
                           void (*edit)(part *parts, size_t *n))
{
    part parts[4];
    size_t n = parts_of(x->wl, 0, 1, parts);
    if (edit) edit(parts, &n);
    return push(x->h, job, rank, inc, step, parts, n);
}

static float zeros[2600];
static void e_unknown_tensor(part *p, size_t *n)
{
    p[1].tensor = "nope";
    (void)n;
}
static void e_missing_b(part *p, size_t *n) { (void)p, *n = 1; }
static void e_overlap(part *p, size_t *n)
{
    p[0] = (part){"w", 0, 1500, GA_CODEC_NONE, ga_codec_params_default(GA_CODEC_NONE), (const uint8_t *)zeros, 6000};
    p[2] = (part){"w", 1000, 1500, GA_CODEC_NONE, ga_codec_params_default(GA_CODEC_NONE), (const uint8_t *)zeros, 6000};
    *n = 3;
}
static void e_gap(part *p, size_t *n)
{
    p[0] = (part){"w", 0, 1000, GA_CODEC_NONE, ga_codec_params_default(GA_CODEC_NONE), (const uint8_t *)zeros, 4000};
    p[2] = (part){"w", 1024, 1476, GA_CODEC_NONE, ga_codec_params_default(GA_CODEC_NONE), (const uint8_t *)zeros, 5904};
    *n = 3;
}
static void e_outside(part *p, size_t *n)
{
    p[0] = (part){"w", 0, 2600, GA_CODEC_NONE, ga_codec_params_default(GA_CODEC_NONE), (const uint8_t *)zeros, 10400};
    (void)n;
}

static ga_call *b_push_unknown_job(const bad_ctx *x) { return push_parts(x, "nope", 1, 101, 0, NULL); }
static ga_call *b_push_rank(const bad_ctx *x) { return push_parts(x, "t", 7, 101, 0, NULL); }
static ga_call *b_push_never_joined(const bad_ctx *x) { return push_parts(x, "t", 2, 102, 0, NULL); }
static ga_call *b_push_wrong_inc(const bad_ctx *x) { return push_parts(x, "t", 1, 999, 0, NULL); }
static ga_call *b_push_future(const bad_ctx *x) { return push_parts(x, "t", 1, 101, 1, NULL); }
static ga_call *b_push_unknown_tensor(const bad_ctx *x) { return push_parts(x, "t", 1, 101, 0, e_unknown_tensor); }
static ga_call *b_push_missing(const bad_ctx *x) { return push_parts(x, "t", 1, 101, 0, e_missing_b); }
static ga_call *b_push_overlap(const bad_ctx *x) { return push_parts(x, "t", 1, 101, 0, e_overlap); }
static ga_call *b_push_gap(const bad_ctx *x) { return push_parts(x, "t", 1, 101, 0, e_gap); }
static ga_call *b_push_outside(const bad_ctx *x) { return push_parts(x, "t", 1, 101, 0, e_outside); }
static ga_call *b_push_empty(const bad_ctx *x)
{
    ga_call *c = fake_call_new();
    ga_core_push(x->h->core, c, NULL);
    return c;
}

static ga_call *join_with(const bad_ctx *x, const char *job, uint32_t rank, uint64_t inc, void (*edit)(config *k))
{
    config k = *x->k;
    k.c.optimizer = &k.o, k.c.straggler = &k.s, k.c.pull_codec = &k.p;
    if (edit) edit(&k);
    return join(x->h, job, rank, inc, &k);
}
static void c_lr(config *k) { k->o.lr = 0.0500001f; }
static void c_world4(config *k) { k->c.world_size = 4; }
static void c_world0(config *k) { k->c.world_size = 0; }
static void c_world_big(config *k) { k->c.world_size = 4097; }
static void c_quorum(config *k) { k->s.quorum = 4; }
static void c_momentum(config *k) { k->o.momentum = 1.5f; }
static void c_pull_threshold(config *k) { k->p.id = GRADAGG__V1__CODEC_ID__CODEC_2BIT, k->p.threshold = 0.0f; }
static void c_pull_codec(config *k) { k->p.id = 42; }
static void c_mode(config *k) { k->c.mode = 7; }
static void c_straggler(config *k) { k->s.deadline_ms = 5; }

static ga_call *b_join_lr(const bad_ctx *x) { return join_with(x, "t", 1, 101, c_lr); }
static ga_call *b_join_world(const bad_ctx *x) { return join_with(x, "t", 1, 101, c_world4); }
static ga_call *b_join_rank(const bad_ctx *x) { return join_with(x, "t", 3, 103, NULL); }
static ga_call *b_join_inc0(const bad_ctx *x) { return join_with(x, "t", 1, 0, NULL); }
static ga_call *b_join_held(const bad_ctx *x) { return join_with(x, "t", 0, 5, NULL); }
static ga_call *b_join_no_config(const bad_ctx *x) { return join(x->h, "t", 1, 101, NULL); }
static ga_call *b_join_empty_name(const bad_ctx *x) { return join_with(x, "", 1, 101, NULL); }
static ga_call *b_new_world0(const bad_ctx *x) { return join_with(x, "new", 0, 1, c_world0); }
static ga_call *b_new_world_big(const bad_ctx *x) { return join_with(x, "new", 0, 1, c_world_big); }
static ga_call *b_new_quorum(const bad_ctx *x) { return join_with(x, "new", 0, 1, c_quorum); }
static ga_call *b_new_momentum(const bad_ctx *x) { return join_with(x, "new", 0, 1, c_momentum); }
static ga_call *b_new_pull_threshold(const bad_ctx *x) { return join_with(x, "new", 0, 1, c_pull_threshold); }
static ga_call *b_new_pull_codec(const bad_ctx *x) { return join_with(x, "new", 0, 1, c_pull_codec); }
static ga_call *b_new_mode(const bad_ctx *x) { return join_with(x, "new", 0, 1, c_mode); }
static ga_call *b_new_rank(const bad_ctx *x) { return join_with(x, "new", 3, 1, NULL); }
static ga_call *b_new_no_config(const bad_ctx *x) { return join(x->h, "new", 0, 1, NULL); }
static ga_call *b_join_straggler(const bad_ctx *x) { return join_with(x, "t", 1, 101, c_straggler); }

static ga_call *b_init_shape(const bad_ctx *x)
{
    const init_spec s = {"w", {2500, 0}, 1, 0, 0, NULL};
    return init(x->h, "t", 0, 100, &s, 1);
}
static ga_call *b_init_after_commit(const bad_ctx *x)
{
    const init_spec s = {"c", {8, 0}, 1, 0, 0, NULL};
    return init(x->h, "t", 0, 100, &s, 1);
}
static ga_call *b_init_gap(const bad_ctx *x)
{
    const init_spec s[] = {{"c", {20, 0}, 1, 0, 10, zeros}};
    return init(x->h, "fresh", 0, 1, s, 1);
}
static ga_call *b_init_twice(const bad_ctx *x)
{
    const init_spec s[] = {{"c", {20, 0}, 1, 0, 12, zeros}, {"c", {20, 0}, 1, 10, 10, zeros}};
    return init(x->h, "fresh", 0, 1, s, 2);
}
static ga_call *b_init_one_bad(const bad_ctx *x)
{
    const init_spec s[] = {{"ok", {20, 0}, 1, 0, 20, zeros}, {"c", {20, 0}, 1, 5, 15, zeros}};
    return init(x->h, "fresh", 0, 1, s, 2);
}
static ga_call *b_init_not_member(const bad_ctx *x)
{
    const init_spec s = {"w", {50, 50}, 2, 0, 0, NULL};
    return init(x->h, "t", 2, 102, &s, 1);
}
static ga_call *b_init_unknown_job(const bad_ctx *x)
{
    const init_spec s = {"w", {50, 50}, 2, 0, 0, NULL};
    return init(x->h, "nope", 0, 1, &s, 1);
}
static ga_call *b_pull_version(const bad_ctx *x) { return pull(x->h, "t", 1, 101, 2, false, 0); }
static ga_call *b_pull_unknown_job(const bad_ctx *x) { return pull(x->h, "nope", 1, 101, 0, false, 0); }
static ga_call *b_pull_not_member(const bad_ctx *x) { return pull(x->h, "t", 2, 102, 0, false, 0); }
static ga_call *b_pull_rank(const bad_ctx *x) { return pull(x->h, "t", 3, 102, 0, false, 0); }
static ga_call *b_leave_wrong(const bad_ctx *x) { return leave(x->h, "t", 1, 999); }
static ga_call *b_leave_unknown_job(const bad_ctx *x) { return leave(x->h, "nope", 1, 101); }
static ga_call *b_status_unknown(const bad_ctx *x)
{
    Gradagg__V1__StatusRequest r = GRADAGG__V1__STATUS_REQUEST__INIT;
    r.job = "nope";
    ga_call *c = fake_call_new();
    ga_core_status(x->h->core, c, (Gradagg__V1__StatusRequest *)fake_wire_copy(&r.base));
    return c;
}

typedef struct bad_row {
    const char *what;
    bad_fn fn;
    ga_status want;
    const char *says; /* a piece of the message naming the value */
} bad_row;

static const bad_row bad_rows[] = {
    {"push: unknown job", b_push_unknown_job, GA_E_UNKNOWN_JOB, "job 'nope'"},
    {"push: rank >= W", b_push_rank, GA_E_RANK, "rank 7 outside [0, 3)"},
    {"push: rank never joined", b_push_never_joined, GA_E_NOT_MEMBER, "rank 2 has not joined"},
    {"push: unknown incarnation", b_push_wrong_inc, GA_E_NOT_MEMBER, "not 999"},
    {"push: future step", b_push_future, GA_E_STEP_FUTURE, "step 1"},
    {"push: unknown tensor", b_push_unknown_tensor, GA_E_UNKNOWN_TENSOR, "tensor 'nope'"},
    {"push: tensor missing", b_push_missing, GA_E_COVERAGE, "tensor 'b'"},
    {"push: overlap", b_push_overlap, GA_E_COVERAGE, "[1000, 1500) covered twice"},
    {"push: gap", b_push_gap, GA_E_COVERAGE, "[1000, 1024) missing"},
    {"push: outside", b_push_outside, GA_E_COVERAGE, "[0, 2600) outside its 2500"},
    {"push: empty stream", b_push_empty, GA_E_INVAL, "empty push"},
    {"join: other lr", b_join_lr, GA_E_JOB_CONFIG, "optimizer.lr"},
    {"join: other world", b_join_world, GA_E_JOB_CONFIG, "field world_size"},
    {"join: other straggler", b_join_straggler, GA_E_JOB_CONFIG, "straggler.deadline_ms"},
    {"join: no config", b_join_no_config, GA_E_JOB_CONFIG, "world_size"},
    {"join: rank >= W", b_join_rank, GA_E_RANK, "rank 3"},
    {"join: incarnation 0", b_join_inc0, GA_E_INVAL, "incarnation is 0"},
    {"join: empty job name", b_join_empty_name, GA_E_INVAL, "job name is empty"},
    {"join: rank held", b_join_held, GA_E_RANK_HELD, "held by incarnation 100"},
    {"new job: world 0", b_new_world0, GA_E_INVAL, "world_size 0 outside [1, 4096]"},
    {"new job: world 4097", b_new_world_big, GA_E_INVAL, "world_size 4097"},
    {"new job: quorum", b_new_quorum, GA_E_INVAL, "quorum 4 exceeds world_size 3"},
    {"new job: momentum", b_new_momentum, GA_E_OPTIM, "momentum 1.5"},
    {"new job: pull threshold", b_new_pull_threshold, GA_E_THRESHOLD, "config.pull_codec"},
    {"new job: pull codec", b_new_pull_codec, GA_E_CODEC, "codec id 42"},
    {"new job: mode", b_new_mode, GA_E_INVAL, "config.mode 7"},
    {"new job: rank", b_new_rank, GA_E_RANK, "rank 3 outside [0, 3)"},
    {"new job: no config", b_new_no_config, GA_E_INVAL, "config is missing"},
    {"init: other shape", b_init_shape, GA_E_SHAPE, "exists with shape [50, 50]; this init gives [2500]"},
    {"init: after the first commit", b_init_after_commit, GA_E_JOB_CONFIG, "took its first push"},
    {"init: values gap", b_init_gap, GA_E_COVERAGE, "[10, 20) have no values"},
    {"init: values twice", b_init_twice, GA_E_COVERAGE, "[10, 12) given values twice"},
    {"init: one bad tensor", b_init_one_bad, GA_E_COVERAGE, "[0, 5) have no values"},
    {"init: not a member", b_init_not_member, GA_E_NOT_MEMBER, "rank 2"},
    {"init: unknown job", b_init_unknown_job, GA_E_UNKNOWN_JOB, "'nope'"},
    {"pull: beyond next version", b_pull_version, GA_E_VERSION, "min_version 2"},
    {"pull: unknown job", b_pull_unknown_job, GA_E_UNKNOWN_JOB, "'nope'"},
    {"pull: not a member", b_pull_not_member, GA_E_NOT_MEMBER, "rank 2"},
    {"pull: rank >= W", b_pull_rank, GA_E_RANK, "rank 3"},
    {"leave: unknown incarnation", b_leave_wrong, GA_E_NOT_MEMBER, "not 999"},
    {"leave: unknown job", b_leave_unknown_job, GA_E_UNKNOWN_JOB, "'nope'"},
    {"status: unknown job", b_status_unknown, GA_E_UNKNOWN_JOB, "'nope'"},
};

static void test_bad_inputs(void **state)
{
    (void)state;
    workload wl;
    workload_make(&wl);
    harness h;
    ga_core_options o = test_options();
    h_open(&h, &o);
    config k;
    config_init(&k, WORLD);
    float wv[2500];
    /* Job t: ranks 0 and 1 joined (rank 2 never), w and b created, rank 0 committed step 0.
     * Job fresh: one rank, no tensors, no commit. */
    done(join(&h, "t", 0, 100, &k), GA_OK);
    done(join(&h, "t", 1, 101, &k), GA_OK);
    for (uint64_t i = 0; i < 2500; i++) wv[i] = init_value(i);
    const init_spec specs[] = {{"w", {50, 50}, 2, 0, 2500, wv}, {"b", {300, 0}, 1, 0, 0, NULL}};
    ga_call *c = init(&h, "t", 0, 100, specs, 2);
    settle(&h);
    done(c, GA_OK);
    expect_ack(push_step(&h, "t", &wl, 0, 0, 0), 0, false, 0);
    config one;
    config_init(&one, 1);
    done(join(&h, "fresh", 0, 1, &one), GA_OK);
    settle(&h);
    bad_ctx x = {&h, &wl, &k};
    snapshot *before = ga_malloc(sizeof *before), *after = ga_malloc(sizeof *after);
    for (size_t r = 0; r < COUNT(bad_rows); r++) {
        take(&h, before);
        c = bad_rows[r].fn(&x);
        settle(&h);
        if (!c->finished || c->status != bad_rows[r].want || !strstr(c->message, bad_rows[r].says))
            fail_msg("%s: got %s '%s', want %s with '%s'", bad_rows[r].what,
                     c->finished ? ga_status_name(c->status) : "(not finished)", c->message,
                     ga_status_name(bad_rows[r].want), bad_rows[r].says);
        assert_int_equal(c->misuse, 0);
        assert_null(c->resp);
        fake_call_free(c);
        take(&h, after);
        if (memcmp(before, after, sizeof *before) != 0) fail_msg("%s changed the job's state", bad_rows[r].what);
    }
    ga_free(before), ga_free(after);
    /* An absent straggler message equals an all-default one: the same config. */
    config same = k;
    same.c.optimizer = &same.o, same.c.pull_codec = &same.p, same.c.straggler = NULL;
    done(join(&h, "t", 1, 101, &same), GA_OK);
    /* The job still works: the step closes with every rank. */
    done(join(&h, "t", 2, 102, &k), GA_OK);
    expect_ack(push_step(&h, "t", &wl, 0, 2, 0), 0, false, 0);
    expect_ack(push_step(&h, "t", &wl, 0, 1, 0), 0, false, 0);
    settle(&h);
    model m;
    model_init(&m, &k);
    bool all[WORLD] = {true, true, true};
    model_step(&m, &wl, 0, all);
    expect_published(&h, "t", 1, 1, &m);
    model_free(&m);
    h_close(&h);
    workload_free(&wl);
}

/* ---- options ---- */

static void test_options_checked(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    ga_core *c = NULL;
    ga_core_options o = test_options();
    o.max_jobs = 0;
    assert_int_equal(ga_core_create(&o, &loop, &c), GA_E_CONFIG);
    o = test_options();
    o.pull_chunk_bytes = 100;
    assert_int_equal(ga_core_create(&o, &loop, &c), GA_E_CONFIG);
    o = test_options();
    o.backend = (ga_backend)9;
    assert_int_equal(ga_core_create(&o, &loop, &c), GA_E_CONFIG);
    o = test_options();
    o.version = 8;
    assert_int_equal(ga_core_create(&o, &loop, &c), GA_E_CONFIG);
    if (!ga_cuda_built()) {
        o = test_options();
        o.backend = GA_BACKEND_CUDA;
        assert_int_equal(ga_core_create(&o, &loop, &c), GA_E_NO_CUDA);
    }
    assert_null(c);
    /* An older, shorter options struct keeps the newer fields' defaults. */
    o = test_options();
    o.version = offsetof(ga_core_options, member_lease_ms);
    o.member_lease_ms = 0;
    assert_int_equal(ga_core_create(&o, &loop, &c), GA_OK);
    assert_int_equal(c->opt.member_lease_ms, 10000);
    ga_core_destroy(c);
    ga_core_destroy(NULL);
    uv_run(&loop, UV_RUN_NOWAIT); /* the close callbacks of the core's timers */
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    test_memory_baseline();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_options_checked), cmocka_unit_test(test_order_matters),
        cmocka_unit_test(test_sync_orders),     cmocka_unit_test(test_duplicates),
        cmocka_unit_test(test_deadline),        cmocka_unit_test(test_default_deadline),
        cmocka_unit_test(test_async),           cmocka_unit_test(test_step_lr),
        cmocka_unit_test(test_waiting_pull),
        cmocka_unit_test(test_pull_during_apply),
        cmocka_unit_test(test_compressed_pull), cmocka_unit_test(test_drain),
        cmocka_unit_test(test_membership),      cmocka_unit_test(test_limits),
        cmocka_unit_test(test_await_init),
        cmocka_unit_test(test_bad_inputs),      cmocka_unit_test(test_host_memory_returned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
