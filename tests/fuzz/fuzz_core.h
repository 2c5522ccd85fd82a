/* A fresh in-process core for each fuzz input (the core on a libuv loop run by the fuzzing
 * thread, calls in memory: tests/support/fake_call.c), holding one job FUZZ_JOB of world 1 with rank 0
 * joined as FUZZ_INC and three tensors set to known values; and a snapshot of everything a
 * refused request must leave as it was. Header-only, for the targets that drive the core. */
#ifndef GA_FUZZ_CORE_H
#define GA_FUZZ_CORE_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/core_internal.h"
#include "fake_call.h"
#include "fuzz_util.h"
#include "ga_alloc.h"
#include "ga_wire.h"

#define FUZZ_JOB "fuzz-job"
#define FUZZ_INC 7u
#define FUZZ_TENSORS 3
#define FUZZ_ELEMS 1143u /* 40 + 3 + 1100 */
#define FUZZ_STREAM_BYTES (1u << 20)

/* "w" [4, 10], "b" [3], "e" [1100]: a 2-D tensor, one shorter than every codec's word, and one
 * longer than a 1bit_scaled block (1024). */
static const char *const fuzz_tensor_names[FUZZ_TENSORS] = {"w", "b", "e"};
static const uint64_t fuzz_tensor_shape[FUZZ_TENSORS][2] = {{4, 10}, {3, 0}, {1100, 0}};
static const size_t fuzz_tensor_ndim[FUZZ_TENSORS] = {2, 1, 1};
static const uint64_t fuzz_tensor_elems[FUZZ_TENSORS] = {40, 3, 1100};
static const size_t fuzz_tensor_base[FUZZ_TENSORS] = {0, 40, 43};

typedef struct fuzz_core {
    uv_loop_t loop;
    ga_core *core;
    ga_job *job;
} fuzz_core;

/* Everything about the job a refused request must not change. */
typedef struct fuzz_snap {
    uint64_t version, target, steps, late, duplicates, open_step, last_step, incarnation, held, core_held;
    uint32_t committed;
    bool has_pushed, left, any_commit;
    ga_status fault;
    size_t ntensors, pulls;
    float params[FUZZ_ELEMS];    /* the store's parameters */
    float published[FUZZ_ELEMS]; /* what a pull streams */
} fuzz_snap;

static inline float fuzz_init_value(size_t t, size_t i) { return (float)((i * 7 + t * 3) % 13) * 0.125f - 0.75f; }

static inline void fuzz_settle(fuzz_core *h)
{
    while (h->job && !ga_taskq_idle(&h->job->tasks)) uv_run(&h->loop, UV_RUN_ONCE);
}

/* A request handed to the core as the transport would: a copy owned by ga_wire_allocator. */
static inline ProtobufCMessage *fuzz_copy(const ProtobufCMessage *m) { return fake_wire_copy(m); }

static inline void fuzz_expect(ga_call *c, ga_status want, const char *what)
{
    FUZZ_CHECK(c->finished && c->misuse == 0, "%s: finished %d misuse %d", what, c->finished, c->misuse);
    FUZZ_CHECK(c->status == want, "%s: %s (%s), want %s", what, ga_status_name(c->status), c->message,
               ga_status_name(want));
}

static inline void fuzz_core_open(fuzz_core *h, bool async)
{
    memset(h, 0, sizeof *h);
    FUZZ_CHECK(uv_loop_init(&h->loop) == 0, "uv_loop_init");
    ga_core_options o = GA_CORE_OPTIONS_INIT;
    o.threads = 1;
    o.max_memory_bytes = 64u << 20;
    o.pull_chunk_bytes = 4 * GA_STORE_PIECE_ALIGN;
    FUZZ_CHECK(ga_core_create(&o, &h->loop, &h->core) == GA_OK, "ga_core_create");

    Gradagg__V1__Optimizer opt = GRADAGG__V1__OPTIMIZER__INIT; /* none: params += sum */
    Gradagg__V1__Straggler str = GRADAGG__V1__STRAGGLER__INIT;
    Gradagg__V1__Codec pull = GRADAGG__V1__CODEC__INIT;
    Gradagg__V1__JobConfig cfg = GRADAGG__V1__JOB_CONFIG__INIT;
    cfg.world_size = 1;
    cfg.mode = async ? GRADAGG__V1__MODE__MODE_ASYNC : GRADAGG__V1__MODE__MODE_SYNC;
    cfg.optimizer = &opt;
    cfg.straggler = &str;
    cfg.pull_codec = &pull;
    Gradagg__V1__JoinRequest join = GRADAGG__V1__JOIN_REQUEST__INIT;
    join.job = FUZZ_JOB;
    join.incarnation = FUZZ_INC;
    join.config = &cfg;
    ga_call *c = fake_call_new();
    ga_core_join(h->core, c, (Gradagg__V1__JoinRequest *)fuzz_copy(&join.base));
    fuzz_expect(c, GA_OK, "join");
    fake_call_free(c);
    h->job = ga_core_job(h->core, FUZZ_JOB);

    ga_init *b = NULL;
    char why[256];
    float values[1100];
    for (size_t t = 0; t < FUZZ_TENSORS; t++) {
        for (size_t i = 0; i < fuzz_tensor_elems[t]; i++) values[i] = fuzz_init_value(t, i);
        Gradagg__V1__InitChunk ch = GRADAGG__V1__INIT_CHUNK__INIT;
        ch.job = FUZZ_JOB;
        ch.incarnation = FUZZ_INC;
        ch.tensor = (char *)fuzz_tensor_names[t];
        ch.n_shape = fuzz_tensor_ndim[t];
        ch.shape = (uint64_t *)fuzz_tensor_shape[t];
        ch.count = fuzz_tensor_elems[t];
        ch.values.data = (uint8_t *)values;
        ch.values.len = 4 * fuzz_tensor_elems[t];
        ga_status st = ga_init_add(&b, (Gradagg__V1__InitChunk *)fuzz_copy(&ch.base), FUZZ_STREAM_BYTES, NULL, why, sizeof why);
        FUZZ_CHECK(st == GA_OK, "init chunk: %s", why);
    }
    c = fake_call_new();
    ga_core_init(h->core, c, b);
    fuzz_settle(h);
    fuzz_expect(c, GA_OK, "init");
    fake_call_free(c);
}

static inline void fuzz_core_close(fuzz_core *h)
{
    fuzz_settle(h);
    ga_core_destroy(h->core);
    uv_run(&h->loop, UV_RUN_DEFAULT); /* the timers' close callbacks */
    FUZZ_CHECK(uv_loop_close(&h->loop) == 0, "uv_loop_close");
}

static inline void fuzz_snap_take(fuzz_core *h, fuzz_snap *s)
{
    fuzz_settle(h);
    const ga_job *j = h->job;
    memset(s, 0, sizeof *s);
    s->version = j->version;
    s->target = j->target;
    s->steps = j->steps;
    s->late = j->late_pushes;
    s->duplicates = j->duplicate_pushes;
    s->open_step = j->step.step;
    s->committed = j->step.committed;
    s->last_step = j->members[0].last_step;
    s->incarnation = j->members[0].incarnation;
    s->has_pushed = j->members[0].has_pushed;
    s->left = j->members[0].left;
    s->any_commit = j->any_commit;
    s->held = j->held_bytes;
    s->core_held = h->core->held_bytes;
    s->fault = j->fault;
    s->ntensors = j->ntensors;
    for (const ga_pull_wait *w = j->pulls; w; w = w->next) s->pulls++;
    FUZZ_CHECK(j->ntensors == FUZZ_TENSORS, "%zu tensors", j->ntensors);
    for (uint32_t t = 0; t < FUZZ_TENSORS; t++) {
        size_t n = (size_t)fuzz_tensor_elems[t];
        float *p = s->params + fuzz_tensor_base[t];
        FUZZ_CHECK(ga_store_read(j->store, t, GA_STORE_BUF_PARAMS, 0, n, p) == GA_OK, "read params");
        const ga_blob *full = j->tensors[t].pub.full;
        FUZZ_CHECK(full && full->size == 4 * n, "tensor %u publication", t);
        memcpy(s->published + fuzz_tensor_base[t], full->data, 4 * n);
    }
}

/* The first field where two snapshots differ, or NULL. */
static inline const char *fuzz_snap_diff(const fuzz_snap *a, const fuzz_snap *b)
{
#define FUZZ_FIELD(f) \
    if (a->f != b->f) return #f;
    FUZZ_FIELD(version) FUZZ_FIELD(target) FUZZ_FIELD(steps) FUZZ_FIELD(late) FUZZ_FIELD(duplicates)
    FUZZ_FIELD(open_step) FUZZ_FIELD(last_step) FUZZ_FIELD(incarnation) FUZZ_FIELD(held) FUZZ_FIELD(core_held)
    FUZZ_FIELD(committed) FUZZ_FIELD(has_pushed) FUZZ_FIELD(left) FUZZ_FIELD(any_commit) FUZZ_FIELD(fault)
    FUZZ_FIELD(ntensors) FUZZ_FIELD(pulls)
#undef FUZZ_FIELD
    if (memcmp(a->params, b->params, sizeof a->params) != 0) return "params";
    if (memcmp(a->published, b->published, sizeof a->published) != 0) return "published";
    return NULL;
}

/* Refusals a request from a worker may get: its own fault (INVALID_ARGUMENT, NOT_FOUND,
 * ALREADY_EXISTS, FAILED_PRECONDITION, ABORTED, OUT_OF_RANGE) or a limit; never the server's own
 * failure. */
static inline bool fuzz_client_fault(ga_status st)
{
    if (st == GA_E_NOMEM) return false;
    switch (ga_wire_grpc_code(st)) {
    case GRPC_STATUS_INVALID_ARGUMENT:
    case GRPC_STATUS_NOT_FOUND:
    case GRPC_STATUS_ALREADY_EXISTS:
    case GRPC_STATUS_FAILED_PRECONDITION:
    case GRPC_STATUS_ABORTED:
    case GRPC_STATUS_OUT_OF_RANGE:
    case GRPC_STATUS_RESOURCE_EXHAUSTED: return true;
    default: return false;
    }
}

/* A valid push of step `step` with gradient g (codec none, one chunk per tensor): after it the
 * job must publish params + g exactly, as one more version. Proves a refused input left no
 * fault, no half-added sum and no stale bookkeeping behind. */
static inline float fuzz_probe_grad(size_t i) { return (float)((int)(i % 5) - 2) * 0.25f; }

static inline void fuzz_probe(fuzz_core *h, uint64_t step)
{
    fuzz_snap before, after;
    fuzz_snap_take(h, &before);
    ga_push *b = NULL;
    char why[256];
    float g[1100];
    for (size_t t = 0; t < FUZZ_TENSORS; t++) {
        for (size_t i = 0; i < fuzz_tensor_elems[t]; i++) g[i] = fuzz_probe_grad(fuzz_tensor_base[t] + i);
        Gradagg__V1__PushChunk ch = GRADAGG__V1__PUSH_CHUNK__INIT;
        ch.job = FUZZ_JOB;
        ch.incarnation = FUZZ_INC;
        ch.step = step;
        ch.tensor = (char *)fuzz_tensor_names[t];
        ch.count = fuzz_tensor_elems[t];
        ch.payload.data = (uint8_t *)g;
        ch.payload.len = 4 * fuzz_tensor_elems[t];
        ga_status st = ga_push_add(&b, (Gradagg__V1__PushChunk *)fuzz_copy(&ch.base), FUZZ_STREAM_BYTES, NULL, why, sizeof why);
        FUZZ_CHECK(st == GA_OK, "probe chunk: %s", why);
    }
    ga_call *c = fake_call_new();
    ga_core_push(h->core, c, b);
    fuzz_settle(h);
    fuzz_expect(c, GA_OK, "probe push");
    fake_call_free(c);
    fuzz_snap_take(h, &after);
    FUZZ_CHECK(after.version == before.version + 1 && after.fault == GA_OK, "probe: version %llu -> %llu, fault %s",
               (unsigned long long)before.version, (unsigned long long)after.version, ga_status_name(after.fault));
    for (size_t i = 0; i < FUZZ_ELEMS; i++) {
        float want = before.params[i] + fuzz_probe_grad(i);
        FUZZ_CHECK(memcmp(&after.params[i], &want, 4) == 0 && memcmp(&after.published[i], &want, 4) == 0,
                   "probe: element %zu is %a (published %a), want %a", i, (double)after.params[i],
                   (double)after.published[i], (double)want);
    }
}

#endif
