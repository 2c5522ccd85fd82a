/* Writes the seed corpora of the service fuzz targets: DIR/push/ (fuzz_push) and DIR/message/
 * (fuzz_message), input layouts as documented in those files. Valid requests of every kind
 * (pushes in every codec, encoded by the kernels, sync and async, split tensors; every request
 * message with the right token), then edge cases each one change away from valid. Run by
 * make_corpus.sh with the build's binary; the output is committed.
 * Usage: fuzz_gen_corpus DIR */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_core.h"
#include "ga_codec.h"

#define TOKEN "fuzz-token-0123456789"
#define OPERATOR_TOKEN "operator-token-0123456" /* fuzz_message.c's "*" line */
#define OTHER "other-token-012345678"

static char dir[1024];
static int written;

/* ---- a growing byte string ---- */

typedef struct buf {
    uint8_t b[1 << 16];
    size_t n;
} buf;

static void put(buf *o, const void *p, size_t n)
{
    if (o->n + n > sizeof o->b) {
        fprintf(stderr, "seed too large\n");
        exit(1);
    }
    memcpy(o->b + o->n, p, n);
    o->n += n;
}

static void put_u8(buf *o, uint8_t v) { put(o, &v, 1); }

static void put_msg(buf *o, const ProtobufCMessage *m)
{
    uint8_t tmp[1 << 15];
    size_t n = protobuf_c_message_get_packed_size(m);
    if (n > sizeof tmp) exit(1);
    protobuf_c_message_pack(m, tmp);
    put(o, tmp, n);
}

/* A push record: u16 length, then the packed chunk (plus `extra` raw bytes appended). */
static void put_record(buf *o, const ProtobufCMessage *m, const void *extra, size_t extra_len)
{
    buf one = {.n = 0};
    put_msg(&one, m);
    if (extra_len) put(&one, extra, extra_len);
    uint8_t len[2] = {(uint8_t)one.n, (uint8_t)(one.n >> 8)};
    put(o, len, 2);
    put(o, one.b, one.n);
}

static void save(const char *sub, const char *name, const buf *o)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", dir, sub, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(o->b, 1, o->n, f) != o->n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    written++;
}

/* ---- pushes ---- */

static float grad(size_t i) { return (float)((int)((i * 37) % 23) - 11) * 0.0625f; }

typedef struct piece {
    int tensor;
    uint64_t lo, hi;
    ga_codec_id codec;
} piece;

static ga_codec_params params_for(ga_codec_id c)
{
    ga_codec_params p = ga_codec_params_default(c);
    if (c == GA_CODEC_2BIT) p.threshold = 0.25f;
    if (c == GA_CODEC_TOPK) {
        p.ratio = 0.25f;
        p.sample_fraction = 1.0f;
    }
    return p;
}

/* One chunk of a push with its payload encoded by the kernels. */
static void put_piece(buf *o, const piece *pc, uint64_t step, uint32_t rank, uint64_t inc, const char *job,
                      const ga_codec_params *p)
{
    static const ga_exec cpu = {GA_BACKEND_CPU, 1, GA_SIMD_AUTO, NULL};
    size_t n = (size_t)(pc->hi - pc->lo), cap = 0, len = 0;
    float g[1100], residual[1100] = {0};
    for (size_t i = 0; i < n; i++) g[i] = grad(fuzz_tensor_base[pc->tensor] + pc->lo + i);
    if (ga_codec_encoded_size(pc->codec, p, n, &cap) != GA_OK) exit(1);
    uint8_t *out = malloc(cap + 1);
    if (ga_codec_encode(&cpu, pc->codec, p, g, ga_codec_has_residual(pc->codec) ? residual : NULL, n, out, cap,
                        &len) != GA_OK) {
        fprintf(stderr, "encode %s failed\n", ga_codec_name(pc->codec));
        exit(1);
    }
    Gradagg__V1__Codec codec;
    ga_codec_to_wire(pc->codec, p, &codec);
    Gradagg__V1__PushChunk c = GRADAGG__V1__PUSH_CHUNK__INIT;
    c.job = (char *)job;
    c.rank = rank;
    c.incarnation = inc;
    c.step = step;
    c.tensor = (char *)fuzz_tensor_names[pc->tensor];
    c.offset = pc->lo;
    c.count = n;
    c.codec = &codec;
    c.payload.data = out;
    c.payload.len = len;
    put_record(o, &c.base, NULL, 0);
    free(out);
}

static void push_seed(const char *name, uint8_t mode, const piece *pcs, size_t n, uint64_t step)
{
    buf o = {.n = 0};
    put_u8(&o, mode);
    for (size_t i = 0; i < n; i++) {
        ga_codec_params p = params_for(pcs[i].codec);
        put_piece(&o, &pcs[i], step, 0, FUZZ_INC, FUZZ_JOB, &p);
    }
    save("push", name, &o);
}

/* The whole job in one codec: "w", "b", "e" in order. */
static void whole(piece *pcs, ga_codec_id c)
{
    for (int t = 0; t < FUZZ_TENSORS; t++) pcs[t] = (piece){t, 0, fuzz_tensor_elems[t], c};
}

static void push_seeds(void)
{
    piece pcs[8];
    char name[64];
    for (int c = 0; c < GA_CODEC_COUNT; c++) {
        whole(pcs, (ga_codec_id)c);
        snprintf(name, sizeof name, "sync_%s", ga_codec_name((ga_codec_id)c));
        push_seed(name, 0, pcs, 3, 0);
        snprintf(name, sizeof name, "async_%s", ga_codec_name((ga_codec_id)c));
        push_seed(name, 1, pcs, 3, 5);
    }
    /* Chunks out of order, "e" split at 1024 across two codecs, sliced byte buffers. */
    piece split[] = {{2, 1024, 1100, GA_CODEC_TOPK}, {1, 0, 3, GA_CODEC_FP16}, {0, 0, 40, GA_CODEC_1BIT_SCALED},
                     {2, 0, 1024, GA_CODEC_2BIT}};
    push_seed("split_mixed", 0 | 2 << 1 | 3 << 3, split, 4, 0);
    push_seed("split_mixed_async", 1 | 1 << 1 | 9 << 3, split, 4, 0);
    /* Refused: a tensor missing, covered twice, a future step. */
    whole(pcs, GA_CODEC_NONE);
    push_seed("missing_tensor", 0, pcs, 2, 0);
    pcs[3] = pcs[0];
    push_seed("covered_twice", 0, pcs, 4, 0);
    push_seed("future_step", 0, pcs, 3, 1);

    /* Raw edge cases of one chunk of "b" (3 values, codec none). */
    float three[3] = {1.0f, -2.0f, 0.5f};
    Gradagg__V1__PushChunk c = GRADAGG__V1__PUSH_CHUNK__INIT;
    c.job = FUZZ_JOB;
    c.incarnation = FUZZ_INC;
    c.tensor = "b";
    c.count = 3;
    c.payload.data = (uint8_t *)three;
    c.payload.len = sizeof three;
    buf o = {.n = 0};
    put_u8(&o, 0);
    put_record(&o, &c.base, NULL, 0);
    save("push", "one_chunk_b", &o);
    /* An unknown field (99, varint) after the payload. */
    static const uint8_t unknown[] = {0x98, 0x06, 0x2a};
    o.n = 0;
    put_u8(&o, 0);
    put_record(&o, &c.base, unknown, sizeof unknown);
    save("push", "unknown_field", &o);
    /* The payload's declared length 2^31 with 12 bytes behind it. */
    o.n = 0;
    put_u8(&o, 0);
    {
        Gradagg__V1__PushChunk h = c;
        h.payload.len = 0;
        h.payload.data = NULL;
        static const uint8_t huge[] = {0x7a, 0x80, 0x80, 0x80, 0x80, 0x08, 0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0, 0, 0, 0, 0x3f};
        put_record(&o, &h.base, huge, sizeof huge);
    }
    save("push", "huge_length", &o);
    /* NaN in the payload; wrong incarnation; rank 1; codec 9; another job mid-stream. */
    float nan3[3] = {1.0f, NAN, 0.0f};
    o.n = 0;
    put_u8(&o, 0);
    {
        Gradagg__V1__PushChunk h = c;
        h.payload.data = (uint8_t *)nan3;
        put_record(&o, &h.base, NULL, 0);
    }
    save("push", "nonfinite", &o);
    o.n = 0;
    put_u8(&o, 0);
    {
        Gradagg__V1__PushChunk h = c;
        h.incarnation = FUZZ_INC + 1;
        put_record(&o, &h.base, NULL, 0);
    }
    save("push", "wrong_incarnation", &o);
    o.n = 0;
    put_u8(&o, 0);
    {
        Gradagg__V1__PushChunk h = c;
        h.rank = 1;
        put_record(&o, &h.base, NULL, 0);
    }
    save("push", "wrong_rank", &o);
    o.n = 0;
    put_u8(&o, 0);
    {
        Gradagg__V1__Codec bad = GRADAGG__V1__CODEC__INIT;
        bad.id = (Gradagg__V1__CodecId)9;
        Gradagg__V1__PushChunk h = c;
        h.codec = &bad;
        put_record(&o, &h.base, NULL, 0);
    }
    save("push", "unknown_codec", &o);
    o.n = 0;
    put_u8(&o, 0);
    {
        put_record(&o, &c.base, NULL, 0);
        Gradagg__V1__PushChunk h = c;
        h.job = "other";
        put_record(&o, &h.base, NULL, 0);
    }
    save("push", "job_mixed", &o);
    /* A record cut inside its payload. */
    o.n = 0;
    put_u8(&o, 0);
    put_record(&o, &c.base, NULL, 0);
    o.n -= 5;
    save("push", "truncated", &o);
}

/* ---- messages ---- */

static void message_seed(const char *name, ga_method_id m, uint8_t slicing, const char *authz,
                         const ProtobufCMessage *msg)
{
    buf o = {.n = 0};
    put_u8(&o, (uint8_t)m);
    put_u8(&o, slicing);
    if (authz) {
        put_u8(&o, (uint8_t)strlen(authz));
        put(&o, authz, strlen(authz));
    } else {
        put_u8(&o, 0xFF);
    }
    if (msg) put_msg(&o, msg);
    save("message", name, &o);
}

static void message_seeds(void)
{
    const char *bearer = "Bearer " TOKEN, *other = "Bearer " OTHER;
    Gradagg__V1__Optimizer opt = GRADAGG__V1__OPTIMIZER__INIT;
    Gradagg__V1__Straggler str = GRADAGG__V1__STRAGGLER__INIT;
    Gradagg__V1__Codec none = GRADAGG__V1__CODEC__INIT;
    Gradagg__V1__JobConfig cfg = GRADAGG__V1__JOB_CONFIG__INIT;
    cfg.world_size = 1;
    cfg.optimizer = &opt;
    cfg.straggler = &str;
    cfg.pull_codec = &none;
    Gradagg__V1__JoinRequest join = GRADAGG__V1__JOIN_REQUEST__INIT;
    join.job = FUZZ_JOB;
    join.incarnation = FUZZ_INC;
    join.config = &cfg;
    message_seed("join_same", GA_METHOD_JOIN, 0, bearer, &join.base);
    join.incarnation = FUZZ_INC + 1;
    message_seed("join_rank_held", GA_METHOD_JOIN, 1 | 5 << 2, bearer, &join.base);
    /* A new job with Adam, a straggler policy and top-k pulls. */
    Gradagg__V1__Optimizer adam = GRADAGG__V1__OPTIMIZER__INIT;
    adam.kind = GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_ADAM;
    adam.lr = 0.001f;
    adam.beta1 = 0.9f;
    adam.beta2 = 0.999f;
    adam.eps = 1e-8f;
    adam.decoupled = 1;
    Gradagg__V1__Straggler late = GRADAGG__V1__STRAGGLER__INIT;
    late.deadline_ms = 100;
    late.quorum = 2;
    Gradagg__V1__Codec topk;
    ga_codec_params tp = params_for(GA_CODEC_TOPK);
    ga_codec_to_wire(GA_CODEC_TOPK, &tp, &topk);
    Gradagg__V1__JobConfig cfg2 = cfg;
    cfg2.world_size = 3;
    cfg2.mode = GRADAGG__V1__MODE__MODE_SYNC;
    cfg2.reduce = GRADAGG__V1__REDUCE__REDUCE_MEAN;
    cfg2.optimizer = &adam;
    cfg2.straggler = &late;
    cfg2.pull_codec = &topk;
    join.job = "other";
    join.incarnation = 1;
    join.config = &cfg2;
    message_seed("join_new_job", GA_METHOD_JOIN, 2 | 3 << 2, other, &join.base);
    join.job = FUZZ_JOB;
    message_seed("join_other_config", GA_METHOD_JOIN, 0, bearer, &join.base);

    Gradagg__V1__LeaveRequest leave = GRADAGG__V1__LEAVE_REQUEST__INIT;
    leave.job = FUZZ_JOB;
    leave.incarnation = FUZZ_INC;
    message_seed("leave", GA_METHOD_LEAVE, 0, bearer, &leave.base);
    leave.incarnation = 3;
    message_seed("leave_stranger", GA_METHOD_LEAVE, 0, other, &leave.base);
    leave.incarnation = FUZZ_INC;
    leave.failed = 1;
    leave.reason = "RuntimeError: boom\n\x01";
    message_seed("leave_failed", GA_METHOD_LEAVE, 0, bearer, &leave.base);

    Gradagg__V1__PullRequest pull = GRADAGG__V1__PULL_REQUEST__INIT;
    pull.job = FUZZ_JOB;
    pull.incarnation = FUZZ_INC;
    message_seed("pull_now", GA_METHOD_PULL, 0, bearer, &pull.base);
    pull.min_version = 1;
    pull.has_version = 1;
    message_seed("pull_waits", GA_METHOD_PULL, 3, bearer, &pull.base);
    pull.min_version = 9;
    message_seed("pull_far", GA_METHOD_PULL, 0, "bearer   " TOKEN, &pull.base);

    Gradagg__V1__StatusRequest status = GRADAGG__V1__STATUS_REQUEST__INIT;
    status.job = FUZZ_JOB;
    message_seed("status", GA_METHOD_STATUS, 0, bearer, &status.base);
    message_seed("status_no_token", GA_METHOD_STATUS, 0, NULL, &status.base);
    message_seed("status_malformed_token", GA_METHOD_STATUS, 0, "Basic " TOKEN, &status.base);
    status.job = "nope";
    message_seed("status_unknown_job", GA_METHOD_STATUS, 0, bearer, &status.base);

    Gradagg__V1__HeartbeatRequest beat = GRADAGG__V1__HEARTBEAT_REQUEST__INIT;
    beat.job = FUZZ_JOB;
    beat.incarnation = FUZZ_INC;
    message_seed("heartbeat", GA_METHOD_HEARTBEAT, 0, bearer, &beat.base);
    beat.incarnation = 3;
    message_seed("heartbeat_stranger", GA_METHOD_HEARTBEAT, 0, bearer, &beat.base);

    Gradagg__V1__DeleteJobRequest del = GRADAGG__V1__DELETE_JOB_REQUEST__INIT;
    del.job = FUZZ_JOB;
    message_seed("delete_live", GA_METHOD_DELETE_JOB, 0, bearer, &del.base);
    del.job = "nope";
    message_seed("delete_unknown", GA_METHOD_DELETE_JOB, 0, bearer, &del.base);

    Gradagg__V1__ListJobsRequest list = GRADAGG__V1__LIST_JOBS_REQUEST__INIT;
    message_seed("list_jobs_operator", GA_METHOD_LIST_JOBS, 0, "Bearer " OPERATOR_TOKEN, &list.base);
    message_seed("list_jobs_job_token", GA_METHOD_LIST_JOBS, 0, bearer, &list.base);
    message_seed("list_jobs_no_token", GA_METHOD_LIST_JOBS, 0, NULL, &list.base);
    status.job = FUZZ_JOB;
    message_seed("status_operator", GA_METHOD_STATUS, 0, "Bearer " OPERATOR_TOKEN, &status.base);

    Gradagg__V1__ShardInfoRequest shard = GRADAGG__V1__SHARD_INFO_REQUEST__INIT;
    message_seed("shard_info", GA_METHOD_SHARD_INFO, 0, NULL, &shard.base);

    Grpc__Health__V1__HealthCheckRequest hc = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    message_seed("health_all", GA_METHOD_HEALTH_CHECK, 0, NULL, &hc.base);
    hc.service = "gradagg.v1.Aggregator";
    message_seed("health_aggregator", GA_METHOD_HEALTH_CHECK, 0, NULL, &hc.base);
    message_seed("watch_aggregator", GA_METHOD_HEALTH_WATCH, 0, NULL, &hc.base);
    hc.service = "nope";
    message_seed("health_unknown", GA_METHOD_HEALTH_CHECK, 0, NULL, &hc.base);
    message_seed("watch_unknown", GA_METHOD_HEALTH_WATCH, 0, NULL, &hc.base);

    float vals[40];
    for (int i = 0; i < 40; i++) vals[i] = (float)i * 0.5f;
    uint64_t shape[2] = {4, 10};
    Gradagg__V1__InitChunk ic = GRADAGG__V1__INIT_CHUNK__INIT;
    ic.job = FUZZ_JOB;
    ic.incarnation = FUZZ_INC;
    ic.tensor = "w";
    ic.n_shape = 2;
    ic.shape = shape;
    ic.offset = 8;
    ic.count = 32;
    ic.values.data = (uint8_t *)(vals + 8);
    ic.values.len = 4 * 32;
    message_seed("init_chunk", GA_METHOD_INIT, 2 | 1 << 2, bearer, &ic.base);
    ic.values.len = 0;
    ic.values.data = NULL;
    message_seed("init_zeros", GA_METHOD_INIT, 0, other, &ic.base);

    for (int c = 0; c < GA_CODEC_COUNT; c++) {
        buf o = {.n = 0};
        piece pc = {2, 0, 1100, (ga_codec_id)c};
        ga_codec_params p = params_for(pc.codec);
        put_piece(&o, &pc, 0, 0, FUZZ_INC, FUZZ_JOB, &p);
        buf m = {.n = 0};
        put_u8(&m, GA_METHOD_PUSH);
        put_u8(&m, (uint8_t)(c & 3));
        put_u8(&m, (uint8_t)strlen(bearer));
        put(&m, bearer, strlen(bearer));
        put(&m, o.b + 2, o.n - 2); /* the chunk without its record length */
        char name[64];
        snprintf(name, sizeof name, "push_%s", ga_codec_name(pc.codec));
        save("message", name, &m);
    }
    /* Not protobuf at all, and an empty body. */
    buf o = {.n = 0};
    put_u8(&o, GA_METHOD_JOIN);
    put_u8(&o, 0);
    put_u8(&o, 0xFF);
    put(&o, "GET / HTTP/1.1\r\n", 16);
    save("message", "not_protobuf", &o);
    message_seed("empty_push", GA_METHOD_PUSH, 0, bearer, NULL);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    mkdir(dir, 0755);
    push_seeds();
    message_seeds();
    printf("wrote %d seeds under %s/push and %s/message\n", written, dir, dir);
    return 0;
}
