/* End to end through the real server on 127.0.0.1:0 (gRPC C core, loop, core, store): the SDK
 * with mixed codecs against a reference built here from the kernels; arrival order does not
 * change a bit; a broken stream commits nothing and its retry counts once; the straggler
 * deadline; async mode; compressed pulls keep workers bit-identical; and one table of bad
 * inputs, each refused with its exact status while the job's state stays as it was. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_dirs.h"

#include "ga_alloc.h"
#include "ga_codec.h"
#include "ga_exec.h"
#include "ga_optim.h"
#include "ga_wire.h"
#include "gradagg.h"
#include "rpc_client.h"
#include "server/config.h"
#include "server/server.h"
#include "test_inproc_server.h"

#define TIMEOUT_MS 10000

/* ---- server and raw calls ---- */

static char data_dir[64]; /* this process's servers' data, under /tmp */

typedef struct e2e {
    ga_server *server;
    char target[64];
    ga_channel *ch;
} e2e;

static void e2e_start_on(e2e *t, uint32_t max_message_mb, ga_backend backend)
{
    ga_config cfg;
    ga_test_config_defaults(&cfg);
    cfg.admin_listen[0] = '\0'; /* no admin port: tests run in parallel */
    cfg.backend = backend;
    snprintf(cfg.listen, sizeof cfg.listen, "127.0.0.1:0");
    ga_test_fresh_dir(cfg.data_dir, sizeof cfg.data_dir, data_dir);
    cfg.log_level = GA_LOG_WARN;
    if (max_message_mb) cfg.max_message_mb = max_message_mb;
    assert_int_equal(ga_server_start(&cfg, &t->server), GA_OK);
    snprintf(t->target, sizeof t->target, "127.0.0.1:%d", ga_server_port(t->server));
    assert_int_equal(ga_channel_create(t->target, 64u << 20, &t->ch), GA_OK);
}

static void e2e_start(e2e *t, uint32_t max_message_mb)
{
    e2e_start_on(t, max_message_mb, ga_test_backend());
}

static void e2e_stop(e2e *t)
{
    ga_channel_destroy(t->ch);
    ga_server_destroy(t->server);
}

typedef struct job_spec {
    const char *name;
    uint32_t world;
    Gradagg__V1__Mode mode;
    Gradagg__V1__Reduce reduce;
    Gradagg__V1__OptimizerKind optim;
    float lr, momentum;
    uint32_t deadline_ms, quorum;
} job_spec;

static void fill_config(const job_spec *j, Gradagg__V1__JobConfig *cfg, Gradagg__V1__Optimizer *opt,
                        Gradagg__V1__Straggler *str, Gradagg__V1__Codec *pull)
{
    gradagg__v1__job_config__init(cfg);
    gradagg__v1__optimizer__init(opt);
    gradagg__v1__straggler__init(str);
    gradagg__v1__codec__init(pull);
    cfg->world_size = j->world;
    cfg->mode = j->mode;
    cfg->reduce = j->reduce;
    opt->kind = j->optim;
    opt->lr = j->lr;
    opt->momentum = j->momentum;
    str->deadline_ms = j->deadline_ms;
    str->quorum = j->quorum;
    cfg->optimizer = opt;
    cfg->straggler = str;
    cfg->pull_codec = pull;
}

static ga_status raw_join(e2e *t, const job_spec *j, uint32_t rank, uint64_t inc)
{
    Gradagg__V1__JobConfig cfg;
    Gradagg__V1__Optimizer opt;
    Gradagg__V1__Straggler str;
    Gradagg__V1__Codec pull;
    fill_config(j, &cfg, &opt, &str, &pull);
    Gradagg__V1__JoinRequest req = GRADAGG__V1__JOIN_REQUEST__INIT;
    req.job = (char *)j->name;
    req.rank = rank;
    req.incarnation = inc;
    req.config = &cfg;
    ProtobufCMessage *resp = NULL;
    char msg[256];
    ga_status rc = ga_call_unary(t->ch, GA_METHOD_JOIN, &req.base, TIMEOUT_MS, &resp, msg, sizeof msg);
    if (resp) protobuf_c_message_free_unpacked(resp, &ga_wire_allocator);
    return rc;
}

static ga_status raw_leave(e2e *t, const char *job, uint32_t rank, uint64_t inc)
{
    Gradagg__V1__LeaveRequest req = GRADAGG__V1__LEAVE_REQUEST__INIT;
    req.job = (char *)job;
    req.rank = rank;
    req.incarnation = inc;
    ProtobufCMessage *resp = NULL;
    char msg[256];
    ga_status rc = ga_call_unary(t->ch, GA_METHOD_LEAVE, &req.base, TIMEOUT_MS, &resp, msg, sizeof msg);
    if (resp) protobuf_c_message_free_unpacked(resp, &ga_wire_allocator);
    return rc;
}

/* One tensor of n elements, initial values init (n floats). */
static ga_status raw_init(e2e *t, const char *job, uint32_t rank, uint64_t inc, const char *tensor, size_t n,
                          const float *init)
{
    ga_stream *s = NULL;
    ga_status rc = ga_stream_open(t->ch, GA_METHOD_INIT, TIMEOUT_MS, &s);
    if (rc != GA_OK) return rc;
    uint64_t shape[1] = {n};
    Gradagg__V1__InitChunk c = GRADAGG__V1__INIT_CHUNK__INIT;
    c.job = (char *)job;
    c.rank = rank;
    c.incarnation = inc;
    c.tensor = (char *)tensor;
    c.n_shape = 1;
    c.shape = shape;
    c.offset = 0;
    c.count = n;
    rc = ga_stream_send(s, &c.base, init, n * sizeof(float));
    if (rc == GA_OK) rc = ga_stream_close_send(s);
    ProtobufCMessage *resp = NULL;
    char why[256];
    if (rc == GA_OK) rc = ga_stream_recv(s, &gradagg__v1__init_response__descriptor, &resp, why, sizeof why);
    if (resp) {
        protobuf_c_message_free_unpacked(resp, &ga_wire_allocator);
        ProtobufCMessage *end = NULL;
        rc = ga_stream_recv(s, &gradagg__v1__init_response__descriptor, &end, why, sizeof why);
    }
    ga_stream_destroy(s);
    return rc;
}

/* A chunk to push: tensor range and an encoded payload. */
typedef struct push_part {
    const char *tensor;
    uint64_t offset, count;
    ga_codec_id codec;
    ga_codec_params params;
    const void *payload;
    size_t len;
} push_part;

typedef struct push_result {
    ga_status status;
    bool duplicate;
    uint64_t version;
    char why[256];
} push_result;

/* Pushes parts[0..count); when cancel_after >= 0 the stream is cancelled after that many parts. */
static push_result raw_push(e2e *t, const char *job, uint32_t rank, uint64_t inc, uint64_t step, const push_part *parts,
                            int count, int cancel_after)
{
    push_result r = {GA_OK, false, 0, ""};
    ga_stream *s = NULL;
    r.status = ga_stream_open(t->ch, GA_METHOD_PUSH, TIMEOUT_MS, &s);
    if (r.status != GA_OK) return r;
    for (int i = 0; i < count && r.status == GA_OK; i++) {
        if (i == cancel_after) break;
        Gradagg__V1__Codec codec = GRADAGG__V1__CODEC__INIT;
        codec.id = (Gradagg__V1__CodecId)parts[i].codec;
        codec.threshold = parts[i].params.threshold;
        codec.ratio = parts[i].params.ratio;
        codec.sample_fraction = parts[i].params.sample_fraction;
        codec.adapt_rounds = parts[i].params.adapt_rounds;
        codec.seed = parts[i].params.seed;
        codec.topk_values = parts[i].params.topk_values;
        codec.topk_indices = parts[i].params.topk_indices;
        Gradagg__V1__PushChunk c = GRADAGG__V1__PUSH_CHUNK__INIT;
        c.job = (char *)job;
        c.rank = rank;
        c.incarnation = inc;
        c.step = step;
        c.tensor = (char *)parts[i].tensor;
        c.offset = parts[i].offset;
        c.count = parts[i].count;
        c.codec = &codec;
        r.status = ga_stream_send(s, &c.base, parts[i].payload, parts[i].len);
    }
    if (cancel_after >= 0) {
        ga_stream_cancel(s);
        ga_stream_destroy(s);
        r.status = GA_E_CANCELLED;
        return r;
    }
    if (r.status == GA_OK) r.status = ga_stream_close_send(s);
    ProtobufCMessage *resp = NULL;
    if (r.status == GA_OK) {
        r.status = ga_stream_recv(s, &gradagg__v1__push_response__descriptor, &resp, r.why, sizeof r.why);
        if (resp) {
            Gradagg__V1__PushResponse *pr = (Gradagg__V1__PushResponse *)resp;
            r.duplicate = pr->duplicate;
            r.version = pr->version;
            protobuf_c_message_free_unpacked(resp, &ga_wire_allocator);
            ProtobufCMessage *end = NULL;
            r.status = ga_stream_recv(s, &gradagg__v1__push_response__descriptor, &end, r.why, sizeof r.why);
        }
    }
    ga_stream_destroy(s);
    return r;
}

/* Pulls min_version as fp32 and writes the first tensor's values (n floats) into out. */
static ga_status raw_pull(e2e *t, const char *job, uint32_t rank, uint64_t inc, uint64_t min_version, float *out,
                          size_t n, uint64_t *version)
{
    Gradagg__V1__PullRequest req = GRADAGG__V1__PULL_REQUEST__INIT;
    req.job = (char *)job;
    req.rank = rank;
    req.incarnation = inc;
    req.min_version = min_version;
    ga_stream *s = NULL;
    ga_status rc = ga_stream_open(t->ch, GA_METHOD_PULL, TIMEOUT_MS, &s);
    if (rc == GA_OK) rc = ga_stream_send(s, &req.base, NULL, 0);
    if (rc == GA_OK) rc = ga_stream_close_send(s);
    char why[256];
    size_t filled = 0;
    while (rc == GA_OK) {
        ProtobufCMessage *m = NULL;
        rc = ga_stream_recv(s, &gradagg__v1__pull_chunk__descriptor, &m, why, sizeof why);
        if (!m) break;
        Gradagg__V1__PullChunk *c = (Gradagg__V1__PullChunk *)m;
        if (c->kind == GRADAGG__V1__PULL_KIND__PULL_FULL && c->offset + c->count <= n &&
            c->payload.len == c->count * sizeof(float)) {
            memcpy(out + c->offset, c->payload.data, c->payload.len);
            filled += c->count;
        }
        if (version) *version = c->version;
        protobuf_c_message_free_unpacked(m, &ga_wire_allocator);
    }
    ga_stream_destroy(s);
    if (rc == GA_OK && filled != n) return GA_E_COVERAGE;
    return rc;
}

typedef struct job_state {
    uint64_t version, open_step, late, duplicates, deadline_closes, steps;
    uint32_t committed;
} job_state;

static ga_status raw_status(e2e *t, const char *job, job_state *st)
{
    Gradagg__V1__StatusRequest req = GRADAGG__V1__STATUS_REQUEST__INIT;
    req.job = (char *)job;
    ProtobufCMessage *resp = NULL;
    char msg[256];
    ga_status rc = ga_call_unary(t->ch, GA_METHOD_STATUS, &req.base, TIMEOUT_MS, &resp, msg, sizeof msg);
    if (rc != GA_OK) return rc;
    Gradagg__V1__StatusResponse *r = (Gradagg__V1__StatusResponse *)resp;
    st->version = r->version;
    st->open_step = r->open_step;
    st->late = r->late_pushes;
    st->duplicates = r->duplicate_pushes;
    st->deadline_closes = r->deadline_closes;
    st->steps = r->steps;
    st->committed = r->committed;
    protobuf_c_message_free_unpacked(resp, &ga_wire_allocator);
    return GA_OK;
}

/* ---- deterministic data and the reference ---- */

static float grad_value(int rank, int step, size_t i)
{
    uint32_t h = (uint32_t)(rank * 7919 + step * 104729) ^ (uint32_t)(i * 2654435761u);
    h ^= h >> 15;
    h *= 0x2c1b3c6dU;
    h ^= h >> 12;
    return ((float)(h & 0xFFFF) / 65536.0f - 0.5f) * 0.1f;
}

static void make_grad(int rank, int step, float *g, size_t n)
{
    for (size_t i = 0; i < n; i++) g[i] = grad_value(rank, step, i);
}

/* Encodes g with codec (residual updated) into a fresh buffer; returns owned, length in *len. */
static void *encode(ga_codec_id codec, const ga_codec_params *p, const float *g, float *residual, size_t n, size_t *len)
{
    ga_exec ex = GA_EXEC_CPU_INIT;
    size_t cap;
    assert_int_equal(ga_codec_encoded_size(codec, p, n, &cap), GA_OK);
    void *buf = ga_malloc(cap ? cap : 4);
    assert_non_null(buf);
    assert_int_equal(ga_codec_encode(&ex, codec, p, g, ga_codec_has_residual(codec) ? residual : NULL, n, buf, cap, len),
                     GA_OK);
    return buf;
}

/* ---- 1. the SDK with mixed codecs gives exactly the reference parameters ---- */

#define MIX_W 4
#define MIX_N 3000
#define MIX_STEPS 4

static const ga_codec_id mix_codec[MIX_W] = {GA_CODEC_NONE, GA_CODEC_FP16, GA_CODEC_2BIT, GA_CODEC_TOPK};

static ga_codec_params mix_params(ga_codec_id codec)
{
    ga_codec_params p = ga_codec_params_default(codec);
    if (codec == GA_CODEC_2BIT) p.threshold = 0.02f;
    if (codec == GA_CODEC_TOPK) p.ratio = 0.05f; /* n <= GA_TOPK_EXACT_MAX: exact, seed-free */
    return p;
}

typedef struct mix_worker {
    const char *target;
    int rank;
    float params[MIX_N];
    ga_status rc;
    char error[256];
} mix_worker;

static void *mix_worker_main(void *arg)
{
    mix_worker *w = arg;
    ga_client_options o = GA_CLIENT_OPTIONS_INIT;
    o.server = w->target;
    o.job = "mixed";
    o.rank = (uint32_t)w->rank;
    o.world_size = MIX_W;
    o.mean = true;
    o.optimizer = GA_SERVER_OPTIM_SGD;
    o.sgd.lr = 0.5f;
    o.sgd.momentum = 0.9f;
    o.threads = 1;
    ga_client *c = NULL;
    for (size_t i = 0; i < MIX_N; i++) w->params[i] = 0.01f * (float)(i % 17);
    w->rc = ga_client_create(&o, &c, w->error, sizeof w->error);
    if (w->rc != GA_OK) return NULL;
    ga_tensor_options to = GA_TENSOR_OPTIONS_INIT;
    to.codec = mix_codec[w->rank];
    to.params = mix_params(to.codec);
    uint64_t shape[2] = {30, 100};
    int index;
    w->rc = ga_client_add_tensor(c, "w", shape, 2, w->params, &to, &index);
    if (w->rc == GA_OK) w->rc = ga_client_init(c);
    static _Thread_local float g[MIX_N];
    for (int s = 0; s < MIX_STEPS && w->rc == GA_OK; s++) {
        make_grad(w->rank, s, g, MIX_N);
        const float *grads[1] = {g};
        w->rc = ga_client_step(c, grads);
    }
    if (w->rc != GA_OK) snprintf(w->error, sizeof w->error, "%s", ga_client_error(c));
    ga_client_destroy(c);
    return NULL;
}

static void test_sdk_mixed_codecs_match_reference(void **state)
{
    (void)state;
    e2e t;
    e2e_start(&t, 0);
    static mix_worker w[MIX_W];
    pthread_t th[MIX_W];
    for (int r = 0; r < MIX_W; r++) {
        w[r].target = t.target;
        w[r].rank = r;
        assert_int_equal(pthread_create(&th[r], NULL, mix_worker_main, &w[r]), 0);
    }
    for (int r = 0; r < MIX_W; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < MIX_W; r++)
        if (w[r].rc != GA_OK) fail_msg("rank %d: %s: %s", r, ga_status_name(w[r].rc), w[r].error);

    /* Reference: each rank's residual codec state, decode_add in rank order, mean, SGD. */
    static float param[MIX_N], mom[MIX_N], sum[MIX_N], res[MIX_W][MIX_N], g[MIX_N];
    for (size_t i = 0; i < MIX_N; i++) param[i] = 0.01f * (float)(i % 17);
    memset(mom, 0, sizeof mom);
    memset(res, 0, sizeof res);
    ga_exec ex = GA_EXEC_CPU_INIT;
    ga_sgd_params sgd = {0.5f, 0.9f, 0.0f, false};
    for (int s = 0; s < MIX_STEPS; s++) {
        memset(sum, 0, sizeof sum);
        for (int r = 0; r < MIX_W; r++) {
            make_grad(r, s, g, MIX_N);
            ga_codec_params p = mix_params(mix_codec[r]);
            size_t len;
            void *payload = encode(mix_codec[r], &p, g, res[r], MIX_N, &len);
            assert_int_equal(ga_codec_decode_add(&ex, mix_codec[r], &p, payload, len, MIX_N, sum), GA_OK);
            ga_free(payload);
        }
        const float scale = (float)(1.0 / MIX_W);
        for (size_t i = 0; i < MIX_N; i++) sum[i] = sum[i] * scale;
        assert_int_equal(ga_sgd_step(&ex, &sgd, param, mom, sum, MIX_N), GA_OK);
    }
    for (int r = 0; r < MIX_W; r++)
        if (memcmp(w[r].params, param, sizeof param) != 0) fail_msg("rank %d parameters differ from the reference", r);
    job_state st;
    assert_int_equal(raw_status(&t, "mixed", &st), GA_OK);
    assert_int_equal(st.version, MIX_STEPS);
    e2e_stop(&t);
}

/* ---- 2. arrival order changes no bit; 3. a broken stream commits nothing ---- */

#define ORD_W 3
#define ORD_N 5000

static const ga_codec_id ord_codec[ORD_W] = {GA_CODEC_NONE, GA_CODEC_2BIT, GA_CODEC_FP16};

static void push_in_order(e2e *t, const char *job, const int *order, float *out)
{
    job_spec j = {job, ORD_W, GRADAGG__V1__MODE__MODE_SYNC, GRADAGG__V1__REDUCE__REDUCE_SUM,
                  GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_NONE, 0, 0, 0, 0};
    for (int r = 0; r < ORD_W; r++) assert_int_equal(raw_join(t, &j, (uint32_t)r, 100 + r), GA_OK);
    static float init[ORD_N], g[ORD_N], res[ORD_N];
    for (size_t i = 0; i < ORD_N; i++) init[i] = 1.0f + 1e-3f * (float)i;
    assert_int_equal(raw_init(t, job, 0, 100, "w", ORD_N, init), GA_OK);
    for (int k = 0; k < ORD_W; k++) {
        int r = order[k];
        make_grad(r, 0, g, ORD_N);
        memset(res, 0, sizeof res);
        ga_codec_params p = mix_params(ord_codec[r]);
        size_t len;
        void *payload = encode(ord_codec[r], &p, g, res, ORD_N, &len);
        push_part part = {"w", 0, ORD_N, ord_codec[r], p, payload, len};
        push_result pr = raw_push(t, job, (uint32_t)r, 100 + r, 0, &part, 1, -1);
        ga_free(payload);
        if (pr.status != GA_OK) fail_msg("%s rank %d: %s %s", job, r, ga_status_name(pr.status), pr.why);
    }
    uint64_t v = 0;
    assert_int_equal(raw_pull(t, job, 0, 100, 1, out, ORD_N, &v), GA_OK);
    assert_int_equal(v, 1);
}

static void test_arrival_order_is_bit_identical(void **state)
{
    (void)state;
    e2e t;
    e2e_start(&t, 0);
    static const int orders[6][ORD_W] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    static float first[ORD_N], other[ORD_N];
    push_in_order(&t, "order-0", orders[0], first);
    for (int o = 1; o < 6; o++) {
        char job[32];
        snprintf(job, sizeof job, "order-%d", o);
        push_in_order(&t, job, orders[o], other);
        if (memcmp(first, other, sizeof first) != 0) fail_msg("arrival order %d changed the parameters", o);
    }
    /* The sum is not trivially order-free: adding in another order gives other bits. */
    static float a[ORD_N], b[ORD_N], g[ORD_N], res[ORD_N];
    ga_exec ex = GA_EXEC_CPU_INIT;
    for (size_t i = 0; i < ORD_N; i++) a[i] = b[i] = 1.0f + 1e-3f * (float)i;
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < ORD_W; k++) {
            int r = orders[pass ? 5 : 0][k];
            make_grad(r, 0, g, ORD_N);
            memset(res, 0, sizeof res);
            ga_codec_params p = mix_params(ord_codec[r]);
            size_t len;
            void *payload = encode(ord_codec[r], &p, g, res, ORD_N, &len);
            assert_int_equal(ga_codec_decode_add(&ex, ord_codec[r], &p, payload, len, ORD_N, pass ? b : a), GA_OK);
            ga_free(payload);
        }
    assert_true(memcmp(a, b, sizeof a) != 0);
    e2e_stop(&t);
}

/* The CUDA backend gives the CPU backend's bytes (skipped without a device). */
static void test_cuda_backend_bit_identical(void **state)
{
    (void)state;
    if (!ga_cuda_built() || ga_cuda_device_count() < 1) skip();
    static const int order[ORD_W] = {2, 0, 1};
    static float cpu[ORD_N], gpu[ORD_N];
    e2e t;
    e2e_start_on(&t, 0, GA_BACKEND_CPU);
    push_in_order(&t, "backend", order, cpu);
    e2e_stop(&t);
    e2e_start_on(&t, 0, GA_BACKEND_CUDA);
    push_in_order(&t, "backend", order, gpu);
    e2e_stop(&t);
    assert_memory_equal(cpu, gpu, sizeof cpu);
}

static void test_broken_stream_commits_nothing_and_retry_counts_once(void **state)
{
    (void)state;
    e2e t;
    e2e_start(&t, 0);
    job_spec j = {"broken", 2, GRADAGG__V1__MODE__MODE_SYNC, GRADAGG__V1__REDUCE__REDUCE_SUM,
                  GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_NONE, 0, 0, 0, 0};
    assert_int_equal(raw_join(&t, &j, 0, 7), GA_OK);
    assert_int_equal(raw_join(&t, &j, 1, 8), GA_OK);
    static float init[2048] = {0}, g[2048];
    assert_int_equal(raw_init(&t, "broken", 0, 7, "w", 2048, init), GA_OK);
    for (size_t i = 0; i < 2048; i++) g[i] = (float)i;
    push_part parts[2] = {{"w", 0, 1024, GA_CODEC_NONE, ga_codec_params_default(GA_CODEC_NONE), g, 4096},
                          {"w", 1024, 1024, GA_CODEC_NONE, ga_codec_params_default(GA_CODEC_NONE), g + 1024, 4096}};
    push_result pr = raw_push(&t, "broken", 0, 7, 0, parts, 2, 1); /* cancelled after one chunk */
    assert_int_equal(pr.status, GA_E_CANCELLED);
    job_state st;
    /* The server learns of the cancel asynchronously: poll briefly, it must never commit. */
    for (int i = 0; i < 20; i++) {
        assert_int_equal(raw_status(&t, "broken", &st), GA_OK);
        assert_int_equal(st.committed, 0);
        usleep(5000);
    }
    pr = raw_push(&t, "broken", 0, 7, 0, parts, 2, -1);
    assert_int_equal(pr.status, GA_OK);
    assert_false(pr.duplicate);
    pr = raw_push(&t, "broken", 0, 7, 0, parts, 2, -1); /* the client's retry */
    assert_int_equal(pr.status, GA_OK);
    assert_true(pr.duplicate);
    assert_int_equal(raw_status(&t, "broken", &st), GA_OK);
    assert_int_equal(st.committed, 1);
    assert_int_equal(st.duplicates, 1);
    assert_int_equal(st.version, 0);
    pr = raw_push(&t, "broken", 1, 8, 0, parts, 2, -1);
    assert_int_equal(pr.status, GA_OK);
    static float out[2048];
    uint64_t v;
    assert_int_equal(raw_pull(&t, "broken", 0, 7, 1, out, 2048, &v), GA_OK);
    for (size_t i = 0; i < 2048; i++) assert_true(out[i] == 2.0f * (float)i); /* counted once per rank */
    e2e_stop(&t);
}

/* ---- 4. straggler deadline and quorum; 5. async ---- */

static void test_straggler_deadline_closes_with_quorum(void **state)
{
    (void)state;
    e2e t;
    e2e_start(&t, 0);
    job_spec j = {"strag", 3, GRADAGG__V1__MODE__MODE_SYNC, GRADAGG__V1__REDUCE__REDUCE_MEAN,
                  GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_NONE, 0, 0, 150, 2};
    for (uint32_t r = 0; r < 3; r++) assert_int_equal(raw_join(&t, &j, r, 10 + r), GA_OK);
    static float init[1024] = {0}, g[1024], out[1024];
    assert_int_equal(raw_init(&t, "strag", 0, 10, "w", 1024, init), GA_OK);
    for (uint32_t r = 0; r < 2; r++) {
        for (size_t i = 0; i < 1024; i++) g[i] = (float)(r + 1);
        push_part part = {"w", 0, 1024, GA_CODEC_NONE, ga_codec_params_default(GA_CODEC_NONE), g, 4096};
        assert_int_equal(raw_push(&t, "strag", r, 10 + r, 0, &part, 1, -1).status, GA_OK);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t v;
    assert_int_equal(raw_pull(&t, "strag", 0, 10, 1, out, 1024, &v), GA_OK); /* waits for the deadline */
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double waited = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    assert_true(waited < 5.0);
    for (size_t i = 0; i < 1024; i++) assert_true(out[i] == 1.5f); /* mean of the two that came */
    job_state st;
    assert_int_equal(raw_status(&t, "strag", &st), GA_OK);
    assert_int_equal(st.deadline_closes, 1);
    for (size_t i = 0; i < 1024; i++) g[i] = 3.0f;
    push_part part = {"w", 0, 1024, GA_CODEC_NONE, ga_codec_params_default(GA_CODEC_NONE), g, 4096};
    push_result pr = raw_push(&t, "strag", 2, 12, 0, &part, 1, -1);
    assert_int_equal(pr.status, GA_E_STEP_CLOSED);
    assert_non_null(strstr(pr.why, "0")); /* the message names the step */
    assert_int_equal(raw_status(&t, "strag", &st), GA_OK);
    assert_int_equal(st.late, 1);
    assert_int_equal(st.version, 1);
    e2e_stop(&t);
}

static void test_async_applies_each_commit(void **state)
{
    (void)state;
    e2e t;
    e2e_start(&t, 0);
    job_spec j = {"async", 2, GRADAGG__V1__MODE__MODE_ASYNC, GRADAGG__V1__REDUCE__REDUCE_SUM,
                  GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_NONE, 0, 0, 0, 0};
    assert_int_equal(raw_join(&t, &j, 0, 1), GA_OK);
    assert_int_equal(raw_join(&t, &j, 1, 2), GA_OK);
    static float init[1024], g[1024], out[1024];
    for (size_t i = 0; i < 1024; i++) init[i] = 1.0f;
    assert_int_equal(raw_init(&t, "async", 0, 1, "w", 1024, init), GA_OK);
    for (size_t i = 0; i < 1024; i++) g[i] = 0.25f;
    push_part part = {"w", 0, 1024, GA_CODEC_NONE, ga_codec_params_default(GA_CODEC_NONE), g, 4096};
    push_result pr = raw_push(&t, "async", 0, 1, 0, &part, 1, -1);
    assert_int_equal(pr.status, GA_OK);
    uint64_t v;
    assert_int_equal(raw_pull(&t, "async", 0, 1, pr.version, out, 1024, &v), GA_OK);
    assert_int_equal(v, 1);
    for (size_t i = 0; i < 1024; i++) assert_true(out[i] == 1.25f);
    pr = raw_push(&t, "async", 1, 2, 0, &part, 1, -1);
    assert_int_equal(pr.status, GA_OK);
    assert_int_equal(pr.version, 2);
    pr = raw_push(&t, "async", 1, 2, 0, &part, 1, -1); /* retry: counted once */
    assert_true(pr.duplicate);
    assert_int_equal(raw_pull(&t, "async", 1, 2, 2, out, 1024, &v), GA_OK);
    assert_int_equal(v, 2);
    for (size_t i = 0; i < 1024; i++) assert_true(out[i] == 1.5f);
    e2e_stop(&t);
}

/* ---- 6. compressed pulls keep every worker on the published copy ---- */

#define CP_N 4096

typedef struct cp_worker {
    const char *target;
    int rank;
    float params[CP_N];
    ga_status rc;
    char error[256];
} cp_worker;

static void *cp_worker_main(void *arg)
{
    cp_worker *w = arg;
    ga_client_options o = GA_CLIENT_OPTIONS_INIT;
    o.server = w->target;
    o.job = "cpull";
    o.rank = (uint32_t)w->rank;
    o.world_size = 2;
    o.optimizer = GA_SERVER_OPTIM_SGD;
    o.sgd.lr = 0.1f;
    o.pull_codec = GA_CODEC_2BIT;
    o.pull_params = ga_codec_params_default(GA_CODEC_2BIT);
    o.pull_params.threshold = 0.001f;
    o.threads = 1;
    ga_client *c = NULL;
    memset(w->params, 0, sizeof w->params);
    w->rc = ga_client_create(&o, &c, w->error, sizeof w->error);
    if (w->rc != GA_OK) return NULL;
    ga_tensor_options to = GA_TENSOR_OPTIONS_INIT;
    to.codec = GA_CODEC_2BIT;
    to.params = mix_params(GA_CODEC_2BIT);
    uint64_t shape[1] = {CP_N};
    int index;
    w->rc = ga_client_add_tensor(c, "w", shape, 1, w->params, &to, &index);
    if (w->rc == GA_OK) w->rc = ga_client_init(c);
    static _Thread_local float g[CP_N];
    for (int s = 0; s < 5 && w->rc == GA_OK; s++) {
        make_grad(w->rank, s, g, CP_N);
        const float *grads[1] = {g};
        w->rc = ga_client_step(c, grads);
    }
    if (w->rc != GA_OK) snprintf(w->error, sizeof w->error, "%s", ga_client_error(c));
    ga_client_stats st;
    ga_client_get_stats(c, &st);
    if (w->rc == GA_OK && st.bytes_pulled >= CP_N * sizeof(float)) {
        w->rc = GA_E_INVAL;
        snprintf(w->error, sizeof w->error, "last pull was %llu bytes: not compressed", (unsigned long long)st.bytes_pulled);
    }
    ga_client_destroy(c);
    return NULL;
}

static void test_compressed_pull_keeps_workers_identical(void **state)
{
    (void)state;
    e2e t;
    e2e_start(&t, 0);
    static cp_worker w[2];
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        w[r].target = t.target;
        w[r].rank = r;
        assert_int_equal(pthread_create(&th[r], NULL, cp_worker_main, &w[r]), 0);
    }
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < 2; r++)
        if (w[r].rc != GA_OK) fail_msg("rank %d: %s: %s", r, ga_status_name(w[r].rc), w[r].error);
    assert_memory_equal(w[0].params, w[1].params, sizeof w[0].params);
    job_state st;
    assert_int_equal(raw_status(&t, "cpull", &st), GA_OK);
    assert_int_equal(st.version, 5);
    e2e_stop(&t);
}

/* ---- 7. bad input: every row refused with its status, nothing changes ---- */

typedef struct bad_ctx {
    e2e *t;
    float *g;         /* 64 good gradient values */
    uint8_t *scratch; /* payload scratch */
} bad_ctx;

static push_part good_part(bad_ctx *b)
{
    push_part p = {"w", 0, 64, GA_CODEC_NONE, ga_codec_params_default(GA_CODEC_NONE), b->g, 256};
    return p;
}

static ga_status row_malformed(bad_ctx *b)
{
    ga_stream *s = NULL;
    ga_status rc = ga_stream_open(b->t->ch, GA_METHOD_JOIN, TIMEOUT_MS, &s);
    static const uint8_t junk[] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01};
    if (rc == GA_OK) rc = ga_stream_send_raw(s, junk, sizeof junk);
    if (rc == GA_OK) rc = ga_stream_close_send(s);
    ProtobufCMessage *m = NULL;
    char why[256];
    while (rc == GA_OK) {
        rc = ga_stream_recv(s, &gradagg__v1__join_response__descriptor, &m, why, sizeof why);
        if (!m) break;
        protobuf_c_message_free_unpacked(m, &ga_wire_allocator);
        m = NULL;
    }
    ga_stream_destroy(s);
    return rc;
}

static ga_status row_unknown_job(bad_ctx *b)
{
    push_part p = good_part(b);
    return raw_push(b->t, "no-such-job", 0, 1, 1, &p, 1, -1).status;
}

static ga_status row_unknown_tensor(bad_ctx *b)
{
    push_part p = good_part(b);
    p.tensor = "nope";
    return raw_push(b->t, "bad", 0, 1, 1, &p, 1, -1).status;
}

static ga_status row_rank_out_of_range(bad_ctx *b)
{
    job_spec j = {"bad", 2, GRADAGG__V1__MODE__MODE_SYNC, GRADAGG__V1__REDUCE__REDUCE_SUM,
                  GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_NONE, 0, 0, 0, 0};
    return raw_join(b->t, &j, 5, 99);
}

static ga_status row_rank_held(bad_ctx *b)
{
    job_spec j = {"bad", 2, GRADAGG__V1__MODE__MODE_SYNC, GRADAGG__V1__REDUCE__REDUCE_SUM,
                  GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_NONE, 0, 0, 0, 0};
    return raw_join(b->t, &j, 0, 99);
}

static ga_status row_job_config(bad_ctx *b)
{
    job_spec j = {"bad", 3, GRADAGG__V1__MODE__MODE_SYNC, GRADAGG__V1__REDUCE__REDUCE_SUM,
                  GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_NONE, 0, 0, 0, 0};
    return raw_join(b->t, &j, 1, 99);
}

static ga_status row_range_mismatch(bad_ctx *b)
{
    push_part p = good_part(b);
    p.offset = 60;
    return raw_push(b->t, "bad", 0, 1, 1, &p, 1, -1).status;
}

static ga_status row_partial_cover(bad_ctx *b)
{
    push_part p = good_part(b);
    p.count = 32;
    p.len = 128;
    return raw_push(b->t, "bad", 0, 1, 1, &p, 1, -1).status;
}

static ga_status row_payload_length(bad_ctx *b)
{
    push_part p = good_part(b);
    p.len = 200;
    return raw_push(b->t, "bad", 0, 1, 1, &p, 1, -1).status;
}

static ga_status row_index_out_of_range(bad_ctx *b)
{
    /* topk, fp32 values, int32 indices: u32 count, values, indices. Index 70 >= 64. */
    uint32_t words[1 + 2 + 2] = {2};
    float v[2] = {1.0f, 2.0f};
    uint32_t idx[2] = {3, 70};
    memcpy(words + 1, v, sizeof v);
    memcpy(words + 3, idx, sizeof idx);
    memcpy(b->scratch, words, sizeof words);
    push_part p = good_part(b);
    p.codec = GA_CODEC_TOPK;
    p.params = ga_codec_params_default(GA_CODEC_TOPK);
    p.params.ratio = 0.5f; /* k = 32: two pairs are allowed */
    p.payload = b->scratch;
    p.len = sizeof words;
    return raw_push(b->t, "bad", 0, 1, 1, &p, 1, -1).status;
}

static ga_status row_nonfinite(bad_ctx *b)
{
    float *v = (float *)b->scratch;
    memcpy(v, b->g, 256);
    v[10] = NAN;
    push_part p = good_part(b);
    p.payload = v;
    return raw_push(b->t, "bad", 0, 1, 1, &p, 1, -1).status;
}

static ga_status row_bad_threshold(bad_ctx *b)
{
    push_part p = good_part(b);
    p.codec = GA_CODEC_2BIT;
    p.params = ga_codec_params_default(GA_CODEC_2BIT);
    p.params.threshold = -1.0f;
    p.len = 16;
    return raw_push(b->t, "bad", 0, 1, 1, &p, 1, -1).status;
}

static ga_status row_mixed_stream(bad_ctx *b)
{
    push_part p[2] = {good_part(b), good_part(b)};
    p[0].count = 32;
    p[0].len = 128;
    p[1].offset = 32;
    p[1].count = 32;
    p[1].len = 128;
    /* The second chunk claims another step: raw_push sends one step, so send by hand. */
    ga_stream *s = NULL;
    ga_status rc = ga_stream_open(b->t->ch, GA_METHOD_PUSH, TIMEOUT_MS, &s);
    for (int i = 0; i < 2 && rc == GA_OK; i++) {
        Gradagg__V1__Codec codec = GRADAGG__V1__CODEC__INIT;
        Gradagg__V1__PushChunk c = GRADAGG__V1__PUSH_CHUNK__INIT;
        c.job = "bad";
        c.rank = 0;
        c.incarnation = 1;
        c.step = (uint64_t)(1 + i);
        c.tensor = "w";
        c.offset = p[i].offset;
        c.count = p[i].count;
        c.codec = &codec;
        rc = ga_stream_send(s, &c.base, (const float *)p[i].payload + p[i].offset, p[i].len);
    }
    if (rc == GA_OK) rc = ga_stream_close_send(s);
    char why[256];
    ProtobufCMessage *m = NULL;
    while (rc == GA_OK) {
        rc = ga_stream_recv(s, &gradagg__v1__push_response__descriptor, &m, why, sizeof why);
        if (!m) break;
        protobuf_c_message_free_unpacked(m, &ga_wire_allocator);
        m = NULL;
    }
    ga_stream_destroy(s);
    return rc;
}

static ga_status row_oversize(bad_ctx *b)
{
    /* The server's limit is 1 MiB here: a 2 MiB chunk is refused by the transport. */
    size_t n = 512 * 1024;
    float *big = ga_calloc(n, sizeof(float));
    push_part p = good_part(b);
    p.count = n;
    p.payload = big;
    p.len = n * sizeof(float);
    ga_status rc = raw_push(b->t, "bad", 0, 1, 1, &p, 1, -1).status;
    ga_free(big);
    return rc;
}

static ga_status row_step_closed(bad_ctx *b)
{
    push_part p = good_part(b);
    return raw_push(b->t, "bad", 1, 3, 0, &p, 1, -1).status; /* rank 1 left before step 0 closed */
}

static ga_status row_step_future(bad_ctx *b)
{
    push_part p = good_part(b);
    return raw_push(b->t, "bad", 0, 1, 5, &p, 1, -1).status;
}

static ga_status row_version_never(bad_ctx *b)
{
    static float out[64];
    return raw_pull(b->t, "bad", 0, 1, 9, out, 64, NULL);
}

static ga_status row_stale_incarnation(bad_ctx *b)
{
    push_part p = good_part(b);
    return raw_push(b->t, "bad", 1, 2, 1, &p, 1, -1).status; /* rank 1's first incarnation, replaced */
}

static ga_status row_not_member(bad_ctx *b)
{
    static float out[64];
    return raw_pull(b->t, "bad2", 1, 5, 0, out, 64, NULL);
}

typedef struct bad_row {
    const char *what;
    ga_status (*send)(bad_ctx *b);
    ga_status want;
} bad_row;

static void test_bad_input_table(void **state)
{
    (void)state;
    e2e t;
    e2e_start(&t, 1); /* 1 MiB message limit for the oversize row */
    job_spec j = {"bad", 2, GRADAGG__V1__MODE__MODE_SYNC, GRADAGG__V1__REDUCE__REDUCE_SUM,
                  GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_NONE, 0, 0, 0, 0};
    assert_int_equal(raw_join(&t, &j, 0, 1), GA_OK);
    assert_int_equal(raw_join(&t, &j, 1, 2), GA_OK);
    static float init[64], g[64];
    static uint8_t scratch[1024];
    for (int i = 0; i < 64; i++) init[i] = (float)i, g[i] = 0.5f;
    assert_int_equal(raw_init(&t, "bad", 0, 1, "w", 64, init), GA_OK);
    /* Rank 1 leaves; rank 0 alone closes step 0; rank 1 comes back as a new incarnation. */
    assert_int_equal(raw_leave(&t, "bad", 1, 2), GA_OK);
    bad_ctx b = {&t, g, scratch};
    push_part p = good_part(&b);
    assert_int_equal(raw_push(&t, "bad", 0, 1, 0, &p, 1, -1).status, GA_OK);
    static float before[64], after[64];
    uint64_t v;
    assert_int_equal(raw_pull(&t, "bad", 0, 1, 1, before, 64, &v), GA_OK);
    assert_int_equal(raw_join(&t, &j, 1, 3), GA_OK);
    job_spec j2 = {"bad2", 2, GRADAGG__V1__MODE__MODE_SYNC, GRADAGG__V1__REDUCE__REDUCE_SUM,
                   GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_NONE, 0, 0, 0, 0};
    assert_int_equal(raw_join(&t, &j2, 0, 1), GA_OK);

    static const bad_row rows[] = {
        {"malformed protobuf", row_malformed, GA_E_PROTO},
        {"unknown job", row_unknown_job, GA_E_UNKNOWN_JOB},
        {"unknown tensor", row_unknown_tensor, GA_E_UNKNOWN_TENSOR},
        {"rank out of range", row_rank_out_of_range, GA_E_RANK},
        {"rank held by another incarnation", row_rank_held, GA_E_RANK_HELD},
        {"join with another config", row_job_config, GA_E_JOB_CONFIG},
        {"element range past the tensor", row_range_mismatch, GA_E_COVERAGE},
        {"push that does not cover the tensor", row_partial_cover, GA_E_COVERAGE},
        {"payload length", row_payload_length, GA_E_LENGTH},
        {"index out of range", row_index_out_of_range, GA_E_INDEX_RANGE},
        {"non-finite value", row_nonfinite, GA_E_NONFINITE},
        {"bad codec threshold", row_bad_threshold, GA_E_THRESHOLD},
        {"chunks disagree on the step", row_mixed_stream, GA_E_STREAM_MIXED},
        {"oversize message", row_oversize, GA_E_LIMIT},
        {"push for a closed step", row_step_closed, GA_E_STEP_CLOSED},
        {"push for a future step", row_step_future, GA_E_STEP_FUTURE},
        {"pull of a version that cannot come", row_version_never, GA_E_VERSION},
        {"replaced incarnation", row_stale_incarnation, GA_E_STALE},
        {"pull by a rank that never joined", row_not_member, GA_E_NOT_MEMBER},
    };
    job_state st0 = {0}, st1 = {0};
    assert_int_equal(raw_status(&t, "bad", &st0), GA_OK);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        ga_status got = rows[i].send(&b);
        if (got != rows[i].want)
            fail_msg("%s: got %s, want %s", rows[i].what, ga_status_name(got), ga_status_name(rows[i].want));
        assert_int_equal(raw_status(&t, "bad", &st1), GA_OK);
        if (st1.version != st0.version || st1.open_step != st0.open_step || st1.committed != st0.committed ||
            st1.steps != st0.steps || st1.duplicates != st0.duplicates)
            fail_msg("%s changed the job's state", rows[i].what);
        assert_int_equal(raw_pull(&t, "bad", 0, 1, 1, after, 64, &v), GA_OK);
        if (memcmp(before, after, sizeof before) != 0) fail_msg("%s changed the parameters", rows[i].what);
    }
    /* The server still works after all of it: a good push commits. */
    assert_int_equal(raw_push(&t, "bad", 0, 1, 1, &p, 1, -1).status, GA_OK);
    e2e_stop(&t);
}

int main(void)
{
    snprintf(data_dir, sizeof data_dir, "/tmp/gradagg-e2e-XXXXXX");
    if (!mkdtemp(data_dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sdk_mixed_codecs_match_reference),
        cmocka_unit_test(test_arrival_order_is_bit_identical),
        cmocka_unit_test(test_cuda_backend_bit_identical),
        cmocka_unit_test(test_broken_stream_commits_nothing_and_retry_counts_once),
        cmocka_unit_test(test_straggler_deadline_closes_with_quorum),
        cmocka_unit_test(test_async_applies_each_commit),
        cmocka_unit_test(test_compressed_pull_keeps_workers_identical),
        cmocka_unit_test(test_bad_input_table),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ga_test_remove_dir(data_dir);
    return rc;
}
