/* The in-process fake of rpc_client.h (fake_server.h): packed messages in, packed messages out,
 * one job, sync steps, mean or sum, SGD or plain addition, fp32 or delta pulls, injected faults. */
#define _POSIX_C_SOURCE 200809L
#include "fake_server.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ga_alloc.h"
#include "ga_optim.h"
#include "ga_wire.h"
#include "rpc_client.h"

#define MAX_RANKS 16
#define MAX_TENSORS 8

typedef struct ftensor {
    char name[64];
    size_t n;
    float *params, *sum, *pushed, *published, *pull_residual;
    uint8_t *dbuf;   /* delta payloads of the last version, chunk after chunk */
    size_t *dpos, *dlen;
    size_t nchunks;
} ftensor;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool has_job;
    char job[64];
    uint32_t world;
    bool mean;
    int optim;
    float lr;
    uint64_t inc[MAX_RANKS];
    ftensor t[MAX_TENSORS];
    size_t nt;
    uint64_t version;
    uint32_t ncommitted;
    bool committed[MAX_RANKS];
    bool has_last[MAX_RANKS];
    uint64_t last_step[MAX_RANKS];
    fake_faults f;
    fake_counters k;
    size_t pull_chunk;
    ga_codec_id pull_codec;
    bool delta_valid;
} S = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

struct ga_channel {
    int unused;
};

typedef struct buf {
    uint8_t *p;
    size_t len;
} buf;

struct ga_stream {
    ga_method_id m;
    struct timespec deadline;
    buf *req;
    size_t nreq, reqcap;
    buf *resp;
    size_t nresp, respcap, next;
    bool done;
    ga_status final;
    char why[256];
};

/* ---- packing ---- */

static buf pack(const ProtobufCMessage *msg, const void *payload, size_t len)
{
    size_t head = protobuf_c_message_get_packed_size(msg);
    buf b = {ga_malloc(head + 16 + len), 0};
    b.len = protobuf_c_message_pack(msg, b.p);
    if (payload) {
        b.p[b.len++] = (uint8_t)((GA_WIRE_PAYLOAD_FIELD << 3) | 2);
        size_t v = len;
        do {
            uint8_t byte = v & 0x7F;
            v >>= 7;
            b.p[b.len++] = (uint8_t)(byte | (v ? 0x80 : 0));
        } while (v);
        memcpy(b.p + b.len, payload, len);
        b.len += len;
    }
    return b;
}

static void push_buf(buf **arr, size_t *n, size_t *cap, buf b)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        buf *g = ga_malloc(nc * sizeof *g);
        if (*n) memcpy(g, *arr, *n * sizeof *g);
        ga_free(*arr);
        *arr = g;
        *cap = nc;
    }
    (*arr)[(*n)++] = b;
}

static void reply(ga_stream *s, const ProtobufCMessage *msg, const void *payload, size_t len)
{
    push_buf(&s->resp, &s->nresp, &s->respcap, pack(msg, payload, len));
}

static ga_status finish(ga_stream *s, ga_status st, const char *fmt, ...)
{
    s->final = st;
    s->why[0] = '\0';
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->why, sizeof s->why, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* ---- state ---- */

static ftensor *find(const char *name)
{
    for (size_t i = 0; i < S.nt; i++)
        if (strcmp(S.t[i].name, name) == 0) return &S.t[i];
    return NULL;
}

static void free_tensor(ftensor *t)
{
    ga_free(t->params);
    ga_free(t->sum);
    ga_free(t->pushed);
    ga_free(t->published);
    ga_free(t->pull_residual);
    ga_free(t->dbuf);
    ga_free(t->dpos);
    ga_free(t->dlen);
    memset(t, 0, sizeof *t);
}

void fake_server_clear(void)
{
    pthread_mutex_lock(&S.mu);
    for (size_t i = 0; i < S.nt; i++) free_tensor(&S.t[i]);
    S.nt = 0;
    S.has_job = false;
    pthread_mutex_unlock(&S.mu);
}

void fake_server_reset(size_t pull_chunk, ga_codec_id pull_codec)
{
    fake_server_clear();
    pthread_mutex_lock(&S.mu);
    S.version = 0;
    S.ncommitted = 0;
    memset(S.committed, 0, sizeof S.committed);
    memset(S.has_last, 0, sizeof S.has_last);
    memset(S.inc, 0, sizeof S.inc);
    memset(&S.k, 0, sizeof S.k);
    memset(&S.f, 0, sizeof S.f);
    S.f.late_rank = -1;
    S.pull_chunk = pull_chunk;
    S.pull_codec = pull_codec;
    S.delta_valid = false;
    pthread_mutex_unlock(&S.mu);
}

void fake_server_set_faults(const fake_faults *f)
{
    pthread_mutex_lock(&S.mu);
    S.f = *f;
    pthread_mutex_unlock(&S.mu);
}

fake_counters fake_server_counters(void)
{
    pthread_mutex_lock(&S.mu);
    fake_counters k = S.k;
    k.version = S.version;
    pthread_mutex_unlock(&S.mu);
    return k;
}

static bool copy_out(const char *tensor, float *out, size_t n, bool pushed)
{
    pthread_mutex_lock(&S.mu);
    ftensor *t = find(tensor);
    bool ok = t && t->n == n;
    if (ok) memcpy(out, pushed ? t->pushed : t->published, n * sizeof(float));
    pthread_mutex_unlock(&S.mu);
    return ok;
}

bool fake_server_params(const char *tensor, float *out, size_t n) { return copy_out(tensor, out, n, false); }
bool fake_server_pushed_sum(const char *tensor, float *out, size_t n) { return copy_out(tensor, out, n, true); }

/* Publishes params: fp32, or a delta from the copy every worker holds (server error feedback). */
static void publish(void)
{
    ga_exec ex = GA_EXEC_CPU_INIT;
    for (size_t i = 0; i < S.nt; i++) {
        ftensor *t = &S.t[i];
        if (S.pull_codec == GA_CODEC_COUNT || S.version == 0) {
            memcpy(t->published, t->params, t->n * sizeof(float));
            continue;
        }
        ga_codec_params p = ga_codec_params_default(S.pull_codec);
        size_t nch = (t->n + S.pull_chunk - 1) / S.pull_chunk, total = 0;
        ga_free(t->dpos);
        ga_free(t->dlen);
        t->dpos = ga_malloc(nch * sizeof(size_t));
        t->dlen = ga_malloc(nch * sizeof(size_t));
        for (size_t c = 0; c < nch; c++) {
            size_t cnt = t->n - c * S.pull_chunk < S.pull_chunk ? t->n - c * S.pull_chunk : S.pull_chunk, sz;
            ga_codec_encoded_size(S.pull_codec, &p, cnt, &sz);
            t->dpos[c] = total;
            total += (sz + 3) & ~(size_t)3;
        }
        ga_free(t->dbuf);
        t->dbuf = ga_malloc(total ? total : 4);
        float *diff = ga_malloc(S.pull_chunk * sizeof(float));
        for (size_t c = 0; c < nch; c++) {
            size_t off = c * S.pull_chunk, cnt = t->n - off < S.pull_chunk ? t->n - off : S.pull_chunk, sz;
            for (size_t j = 0; j < cnt; j++) diff[j] = t->params[off + j] - t->published[off + j];
            ga_codec_encoded_size(S.pull_codec, &p, cnt, &sz);
            float *res = ga_codec_has_residual(S.pull_codec) ? t->pull_residual + off : NULL;
            ga_codec_encode(&ex, S.pull_codec, &p, diff, res, cnt, t->dbuf + t->dpos[c], sz, &t->dlen[c]);
            ga_codec_decode_add(&ex, S.pull_codec, &p, t->dbuf + t->dpos[c], t->dlen[c], cnt, t->published + off);
        }
        ga_free(diff);
        t->nchunks = nch;
    }
    S.delta_valid = S.pull_codec != GA_CODEC_COUNT && S.version > 0;
}

static void close_step(void)
{
    ga_exec ex = GA_EXEC_CPU_INIT;
    for (size_t i = 0; i < S.nt; i++) {
        ftensor *t = &S.t[i];
        if (S.mean && S.ncommitted > 1)
            for (size_t j = 0; j < t->n; j++) t->sum[j] = t->sum[j] / (float)S.ncommitted;
        if (S.optim == 1) {
            ga_sgd_params hp = {S.lr, 0.0f, 0.0f, false};
            ga_sgd_step(&ex, &hp, t->params, NULL, t->sum, t->n);
        } else {
            for (size_t j = 0; j < t->n; j++) t->params[j] = t->params[j] + t->sum[j];
        }
        memset(t->sum, 0, t->n * sizeof(float));
    }
    S.version++;
    S.ncommitted = 0;
    memset(S.committed, 0, sizeof S.committed);
    publish();
    pthread_cond_broadcast(&S.cv);
}

static uint32_t needed(void) { return S.world - (S.f.late_rank >= 0 ? 1u : 0u); }

/* ---- handlers ---- */

static ga_status do_join(const Gradagg__V1__JoinRequest *r, ProtobufCMessage **out, char *why, size_t cap)
{
    if (S.f.join_unavailable > 0) {
        S.f.join_unavailable--;
        snprintf(why, cap, "fake: join refused");
        return GA_E_UNAVAILABLE;
    }
    if (S.f.join_deadline > 0) {
        S.f.join_deadline--;
        snprintf(why, cap, "fake: join timed out");
        return GA_E_DEADLINE;
    }
    const Gradagg__V1__JobConfig *c = r->config;
    if (!c || !c->optimizer) return GA_E_PROTO;
    int optim = (int)c->optimizer->kind;
    bool mean = c->reduce == GRADAGG__V1__REDUCE__REDUCE_MEAN;
    if (!S.has_job) {
        S.has_job = true;
        snprintf(S.job, sizeof S.job, "%s", r->job);
        S.world = c->world_size;
        S.mean = mean;
        S.optim = optim;
        S.lr = c->optimizer->lr;
    } else if (strcmp(S.job, r->job) != 0) {
        snprintf(why, cap, "fake: one job only");
        return GA_E_LIMIT;
    } else if (S.world != c->world_size || S.mean != mean || S.optim != optim || S.lr != c->optimizer->lr) {
        snprintf(why, cap, "job '%s' exists with world_size %u", S.job, S.world);
        return GA_E_JOB_CONFIG;
    }
    if (r->rank >= S.world || r->rank >= MAX_RANKS) {
        snprintf(why, cap, "rank %u outside [0, %u)", r->rank, S.world);
        return GA_E_RANK;
    }
    if (r->incarnation == 0) return GA_E_PROTO;
    S.inc[r->rank] = r->incarnation;
    Gradagg__V1__JoinResponse resp = GRADAGG__V1__JOIN_RESPONSE__INIT;
    resp.version = S.version;
    resp.open_step = S.version;
    resp.world_size = S.world;
    buf b = pack(&resp.base, NULL, 0);
    *out = protobuf_c_message_unpack(&gradagg__v1__join_response__descriptor, &ga_wire_allocator, b.len, b.p);
    ga_free(b.p);
    return GA_OK;
}

static ga_status check_member(const char *job, uint32_t rank, uint64_t inc, char *why, size_t cap)
{
    if (!S.has_job || strcmp(job, S.job) != 0) {
        snprintf(why, cap, "no job '%s'", job);
        return GA_E_UNKNOWN_JOB;
    }
    if (rank >= S.world || S.inc[rank] != inc) {
        snprintf(why, cap, "rank %u has not joined with incarnation %llu", rank, (unsigned long long)inc);
        return GA_E_NOT_MEMBER;
    }
    return GA_OK;
}

static void do_init(ga_stream *s)
{
    Gradagg__V1__InitChunk **ch = ga_calloc(s->nreq + 1, sizeof *ch);
    ga_status st = GA_OK;
    for (size_t i = 0; i < s->nreq && st == GA_OK; i++) {
        ch[i] = (Gradagg__V1__InitChunk *)protobuf_c_message_unpack(&gradagg__v1__init_chunk__descriptor,
                                                                   &ga_wire_allocator, s->req[i].len, s->req[i].p);
        if (!ch[i]) st = finish(s, GA_E_PROTO, "bad init chunk");
        else st = check_member(ch[i]->job, ch[i]->rank, ch[i]->incarnation, s->why, sizeof s->why);
        if (st != GA_OK) s->final = st;
    }
    uint32_t created = 0, existing = 0;
    for (size_t i = 0; i < s->nreq && st == GA_OK; i++) {
        Gradagg__V1__InitChunk *c = ch[i];
        size_t n = 1;
        for (size_t d = 0; d < c->n_shape; d++) n *= c->shape[d];
        ftensor *t = find(c->tensor);
        if (!t) {
            t = &S.t[S.nt++];
            snprintf(t->name, sizeof t->name, "%s", c->tensor);
            t->n = n;
            t->params = ga_calloc(n, sizeof(float));
            t->sum = ga_calloc(n, sizeof(float));
            t->pushed = ga_calloc(n, sizeof(float));
            t->published = ga_calloc(n, sizeof(float));
            t->pull_residual = ga_calloc(n, sizeof(float));
            created++;
            /* Values only on the creating stream: a later init is a no-op. */
            t->nchunks = (size_t)-1;
        } else if (t->nchunks != (size_t)-1) {
            existing++;
            continue;
        }
        if (t->n != n) {
            finish(s, GA_E_SHAPE, "tensor '%s' has %zu elements", t->name, t->n);
            st = GA_E_SHAPE;
            break;
        }
        if (c->values.len) {
            memcpy(t->params + c->offset, c->values.data, c->values.len);
            memcpy(t->published + c->offset, c->values.data, c->values.len);
        }
    }
    for (size_t i = 0; i < S.nt; i++)
        if (S.t[i].nchunks == (size_t)-1) S.t[i].nchunks = 0;
    for (size_t i = 0; i < s->nreq; i++)
        if (ch[i]) protobuf_c_message_free_unpacked(&ch[i]->base, &ga_wire_allocator);
    ga_free(ch);
    if (st != GA_OK) return;
    Gradagg__V1__InitResponse r = GRADAGG__V1__INIT_RESPONSE__INIT;
    r.version = S.version;
    r.created = created;
    r.existing = existing;
    reply(s, &r.base, NULL, 0);
    finish(s, GA_OK, NULL);
}

static void do_push(ga_stream *s)
{
    if (S.f.push_unavailable > 0) {
        S.f.push_unavailable--;
        finish(s, GA_E_UNAVAILABLE, "fake: push refused");
        return;
    }
    ga_exec ex = GA_EXEC_CPU_INIT;
    Gradagg__V1__PushChunk **ch = ga_calloc(s->nreq + 1, sizeof *ch);
    ga_status st = GA_OK;
    for (size_t i = 0; i < s->nreq; i++) {
        ch[i] = (Gradagg__V1__PushChunk *)protobuf_c_message_unpack(&gradagg__v1__push_chunk__descriptor,
                                                                   &ga_wire_allocator, s->req[i].len, s->req[i].p);
        if (!ch[i]) st = finish(s, GA_E_PROTO, "bad push chunk");
    }
    if (st == GA_OK && s->nreq == 0) st = finish(s, GA_E_COVERAGE, "empty push");
    Gradagg__V1__PushChunk *h = st == GA_OK ? ch[0] : NULL;
    if (st == GA_OK) st = check_member(h->job, h->rank, h->incarnation, s->why, sizeof s->why), s->final = st;
    for (size_t i = 0; i < s->nreq && st == GA_OK; i++) {
        Gradagg__V1__PushChunk *c = ch[i];
        ftensor *t = find(c->tensor);
        if (c->step != h->step || c->rank != h->rank) st = finish(s, GA_E_STREAM_MIXED, "mixed stream");
        else if (!t || c->offset + c->count > t->n) st = finish(s, GA_E_UNKNOWN_TENSOR, "tensor '%s'", c->tensor);
        else {
            ga_codec_params p = ga_codec_params_from_wire(c->codec);
            ga_status cs = ga_codec_check_payload((ga_codec_id)c->codec->id, &p, c->payload.data, c->payload.len,
                                                  c->count);
            if (cs != GA_OK) st = finish(s, cs, "chunk %zu: %s", i, ga_strerror(cs));
        }
    }
    uint32_t r = h ? h->rank : 0;
    if (st != GA_OK) {
    } else if (S.has_last[r] && S.last_step[r] == h->step) {
        S.k.duplicates++;
        Gradagg__V1__PushResponse resp = GRADAGG__V1__PUSH_RESPONSE__INIT;
        resp.step = h->step;
        resp.duplicate = true;
        resp.version = S.version;
        reply(s, &resp.base, NULL, 0);
        finish(s, GA_OK, NULL);
    } else if ((int)r == S.f.late_rank || h->step < S.version) {
        S.k.late++;
        if ((int)r == S.f.late_rank && h->step == S.version && S.ncommitted >= needed()) close_step();
        finish(s, GA_E_STEP_CLOSED, "step %llu already closed (open step %llu)", (unsigned long long)h->step,
               (unsigned long long)S.version);
    } else if (h->step > S.version) {
        finish(s, GA_E_STEP_FUTURE, "step %llu not open yet (open step %llu)", (unsigned long long)h->step,
               (unsigned long long)S.version);
    } else {
        for (size_t i = 0; i < s->nreq; i++) {
            Gradagg__V1__PushChunk *c = ch[i];
            ftensor *t = find(c->tensor);
            ga_codec_params p = ga_codec_params_from_wire(c->codec);
            /* Payloads are 4-byte aligned: ga_malloc'ed by the unpacking allocator. */
            ga_codec_decode_add(&ex, (ga_codec_id)c->codec->id, &p, c->payload.data, c->payload.len, c->count,
                                t->sum + c->offset);
            ga_codec_decode_add(&ex, (ga_codec_id)c->codec->id, &p, c->payload.data, c->payload.len, c->count,
                                t->pushed + c->offset);
        }
        S.k.commits++;
        S.has_last[r] = true;
        S.last_step[r] = h->step;
        S.committed[r] = true;
        S.ncommitted++;
        Gradagg__V1__PushResponse resp = GRADAGG__V1__PUSH_RESPONSE__INIT;
        resp.step = h->step;
        resp.version = S.version;
        if (S.ncommitted >= needed()) close_step();
        if (S.f.push_ack_lost > 0) {
            S.f.push_ack_lost--;
            finish(s, GA_E_UNAVAILABLE, "fake: connection lost after the commit");
        } else {
            reply(s, &resp.base, NULL, 0);
            finish(s, GA_OK, NULL);
        }
    }
    for (size_t i = 0; i < s->nreq; i++)
        if (ch[i]) protobuf_c_message_free_unpacked(&ch[i]->base, &ga_wire_allocator);
    ga_free(ch);
}

static void do_pull(ga_stream *s)
{
    Gradagg__V1__PullRequest *r = NULL;
    if (s->nreq != 1 || !(r = (Gradagg__V1__PullRequest *)protobuf_c_message_unpack(
                              &gradagg__v1__pull_request__descriptor, &ga_wire_allocator, s->req[0].len, s->req[0].p))) {
        finish(s, GA_E_PROTO, "one pull request expected");
        return;
    }
    if (check_member(r->job, r->rank, r->incarnation, s->why, sizeof s->why) != GA_OK) {
        s->final = GA_E_NOT_MEMBER;
        goto out;
    }
    S.k.pulls++;
    if (r->has_version) S.k.pulls_with_version++;
    while (S.version < r->min_version) {
        if (pthread_cond_timedwait(&S.cv, &S.mu, &s->deadline) != 0) {
            finish(s, GA_E_DEADLINE, "fake: version %llu not published in time", (unsigned long long)r->min_version);
            goto out;
        }
    }
    bool delta = r->has_version && S.delta_valid && r->have_version + 1 == S.version;
    int breaking = S.f.pull_break > 0;
    if (breaking) S.f.pull_break--;
    for (size_t i = 0; i < S.nt; i++) {
        ftensor *t = &S.t[i];
        size_t nch = (t->n + S.pull_chunk - 1) / S.pull_chunk;
        for (size_t c = 0; c < nch; c++) {
            Gradagg__V1__PullChunk m = GRADAGG__V1__PULL_CHUNK__INIT;
            Gradagg__V1__Codec codec = GRADAGG__V1__CODEC__INIT;
            m.version = S.version;
            m.tensor = t->name;
            m.offset = c * S.pull_chunk;
            m.count = t->n - m.offset < S.pull_chunk ? t->n - m.offset : S.pull_chunk;
            if (delta) {
                ga_codec_params p = ga_codec_params_default(S.pull_codec);
                m.kind = GRADAGG__V1__PULL_KIND__PULL_DELTA;
                m.base_version = S.version - 1;
                codec.id = (Gradagg__V1__CodecId)S.pull_codec;
                codec.threshold = p.threshold;
                m.codec = &codec;
                reply(s, &m.base, t->dbuf + t->dpos[c], t->dlen[c]);
                S.k.delta_chunks++;
            } else {
                reply(s, &m.base, t->published + m.offset, m.count * sizeof(float));
                S.k.full_chunks++;
            }
            if (breaking) {
                finish(s, GA_E_UNAVAILABLE, "fake: pull broken");
                goto out;
            }
        }
    }
    finish(s, GA_OK, NULL);
out:
    protobuf_c_message_free_unpacked(&r->base, &ga_wire_allocator);
}

/* ---- rpc_client.h ---- */

ga_status ga_channel_create(const char *target, size_t max_message_bytes, ga_channel **out)
{
    (void)target;
    (void)max_message_bytes;
    *out = ga_calloc(1, sizeof **out);
    return *out ? GA_OK : GA_E_NOMEM;
}

ga_status ga_channel_create_secure(const char *target, size_t max_message_bytes, const ga_channel_security *sec,
                                   ga_channel **out, char *why, size_t cap)
{
    (void)sec; /* no TLS and no tokens in memory: tests/e2e/test_security.c covers them */
    (void)why;
    (void)cap;
    return ga_channel_create(target, max_message_bytes, out);
}

void ga_channel_destroy(ga_channel *ch) { ga_free(ch); }

ga_status ga_call_unary(ga_channel *ch, ga_method_id m, const ProtobufCMessage *req, uint32_t timeout_ms,
                        ProtobufCMessage **resp, char *msg, size_t cap)
{
    (void)ch;
    (void)timeout_ms;
    buf b = pack(req, NULL, 0);
    ga_status st = GA_E_UNIMPLEMENTED;
    msg[0] = '\0';
    pthread_mutex_lock(&S.mu);
    if (m == GA_METHOD_JOIN) {
        Gradagg__V1__JoinRequest *r = (Gradagg__V1__JoinRequest *)protobuf_c_message_unpack(
            &gradagg__v1__join_request__descriptor, &ga_wire_allocator, b.len, b.p);
        st = r ? do_join(r, resp, msg, cap) : GA_E_PROTO;
        if (r) protobuf_c_message_free_unpacked(&r->base, &ga_wire_allocator);
    } else if (m == GA_METHOD_LEAVE) {
        Gradagg__V1__LeaveResponse lr = GRADAGG__V1__LEAVE_RESPONSE__INIT;
        buf o = pack(&lr.base, NULL, 0);
        *resp = protobuf_c_message_unpack(&gradagg__v1__leave_response__descriptor, &ga_wire_allocator, o.len, o.p);
        ga_free(o.p);
        st = GA_OK;
    }
    pthread_mutex_unlock(&S.mu);
    ga_free(b.p);
    return st;
}

ga_status ga_stream_open(ga_channel *ch, ga_method_id m, uint32_t timeout_ms, ga_stream **out)
{
    (void)ch;
    ga_stream *s = ga_calloc(1, sizeof *s);
    if (!s) return GA_E_NOMEM;
    s->m = m;
    clock_gettime(CLOCK_REALTIME, &s->deadline);
    s->deadline.tv_sec += timeout_ms / 1000;
    s->deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (s->deadline.tv_nsec >= 1000000000L) {
        s->deadline.tv_sec++;
        s->deadline.tv_nsec -= 1000000000L;
    }
    *out = s;
    return GA_OK;
}

ga_status ga_stream_send(ga_stream *s, const ProtobufCMessage *msg, const void *payload, size_t len)
{
    if (s->done) return GA_E_TRANSPORT;
    push_buf(&s->req, &s->nreq, &s->reqcap, pack(msg, payload, len));
    return GA_OK;
}

ga_status ga_stream_send_raw(ga_stream *s, const void *bytes, size_t len)
{
    buf b = {ga_malloc(len ? len : 1), len};
    memcpy(b.p, bytes, len);
    push_buf(&s->req, &s->nreq, &s->reqcap, b);
    return GA_OK;
}

ga_status ga_stream_close_send(ga_stream *s)
{
    pthread_mutex_lock(&S.mu);
    if (s->m == GA_METHOD_INIT) do_init(s);
    else if (s->m == GA_METHOD_PUSH) do_push(s);
    else if (s->m == GA_METHOD_PULL) do_pull(s);
    else finish(s, GA_E_UNIMPLEMENTED, "fake: method %d", (int)s->m);
    pthread_mutex_unlock(&S.mu);
    s->done = true;
    return GA_OK;
}

ga_status ga_stream_recv(ga_stream *s, const ProtobufCMessageDescriptor *desc, ProtobufCMessage **msg, char *why,
                         size_t cap)
{
    *msg = NULL;
    if (!s->done) return GA_E_INVAL;
    if (s->next < s->nresp) {
        buf *b = &s->resp[s->next++];
        *msg = protobuf_c_message_unpack(desc, &ga_wire_allocator, b->len, b->p);
        return *msg ? GA_OK : GA_E_PROTO;
    }
    snprintf(why, cap, "%s", s->why);
    return s->final;
}

void ga_stream_cancel(ga_stream *s) { s->next = s->nresp; }

void ga_stream_destroy(ga_stream *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->nreq; i++) ga_free(s->req[i].p);
    for (size_t i = 0; i < s->nresp; i++) ga_free(s->resp[i].p);
    ga_free(s->req);
    ga_free(s->resp);
    ga_free(s);
}
