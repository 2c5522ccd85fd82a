/* The pull side of a step: on every shard at once, a Pull stream for a version >= min_version
 * of its pieces, fp32 chunks written into the caller's buffers (a device tensor's host mirror)
 * as they come, compressed deltas held until the stream ended OK and then added (a broken pull
 * never leaves half a delta applied), with retries; then device tensors get the new version
 * copied to the device. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "client_internal.h"
#include "ga_alloc.h"
#include "ga_wire.h"

/* A delta chunk held until the end of the stream. */
typedef struct held_delta {
    Gradagg__V1__PullChunk *msg;
    ga_tensor *t;
    size_t off;          /* in the whole tensor */
    ga_codec_id codec;
    ga_codec_params params;
    const void *payload; /* msg's payload, or an aligned copy */
    void *copy;
} held_delta;

typedef struct pull_state {
    ga_shard *sh;
    uint64_t min_version;
    bool asked_delta;
    bool have_version;
    uint64_t version;
    size_t *covered; /* elements received per tensor (of its piece on the shard) */
    held_delta *held;
    size_t nheld, held_cap;
    size_t cursor;   /* the tensor the next chunk most likely names */
    uint64_t bytes;
    double apply_s;
    bool repush; /* the pull of the shard's own sync push (ga_shard_pull_after_push) */
    bool lost;   /* the last attempt lost the connection or the membership */
} pull_state;

/* The tensor whose piece on the shard carries name, and that piece. */
static ga_tensor *find_tensor(ga_client *c, pull_state *ps, const char *name, const ga_piece **piece)
{
    for (size_t k = 0; k < c->ntensors; k++) {
        size_t i = (ps->cursor + k) % c->ntensors;
        const ga_piece *pc = ps->sh->pieces[i];
        if (pc && strcmp(pc->name, name) == 0) {
            ps->cursor = i;
            *piece = pc;
            return &c->tensors[i];
        }
    }
    return NULL;
}

static void release_held(pull_state *ps)
{
    for (size_t i = 0; i < ps->nheld; i++) {
        protobuf_c_message_free_unpacked(&ps->held[i].msg->base, &ga_wire_allocator);
        ga_free(ps->held[i].copy);
    }
    ps->nheld = 0;
}

/* Checks one chunk and writes (fp32) or holds (delta) it. Takes m on GA_OK only. */
static ga_status take_chunk(ga_client *c, pull_state *ps, Gradagg__V1__PullChunk *m, char *why, size_t cap)
{
    if (!ps->have_version) {
        ps->version = m->version;
        ps->have_version = true;
    }
    if (m->version != ps->version || m->version < ps->min_version) {
        snprintf(why, cap, "chunk of version %llu in a pull of version %llu (asked >= %llu)",
                 (unsigned long long)m->version, (unsigned long long)ps->version,
                 (unsigned long long)ps->min_version);
        return GA_E_PROTO;
    }
    const char *name = m->tensor ? m->tensor : "";
    const ga_piece *pc = NULL;
    ga_tensor *t = find_tensor(c, ps, name, &pc);
    ps->bytes += m->payload.len;
    if (!t) { /* a tensor another rank registered: not ours to hold */
        protobuf_c_message_free_unpacked(&m->base, &ga_wire_allocator);
        return GA_OK;
    }
    if (m->count == 0 || m->offset > pc->count || m->count > pc->count - m->offset) {
        snprintf(why, cap, "tensor '%s': range [%llu, +%llu) outside its %zu elements", name,
                 (unsigned long long)m->offset, (unsigned long long)m->count, pc->count);
        return GA_E_PROTO;
    }
    size_t off = (size_t)m->offset, count = (size_t)m->count;
    float *dst = t->params + pc->off + off;
    if (m->kind == GRADAGG__V1__PULL_KIND__PULL_FULL) {
        if (m->payload.len != count * sizeof(float)) {
            snprintf(why, cap, "tensor '%s' [%zu, +%zu): fp32 payload of %zu bytes", name, off, count,
                     m->payload.len);
            return GA_E_PROTO;
        }
        double t0 = ga_client_now();
        ps->sh->exact = false; /* mixed until the stream ends well */
        memcpy(dst, m->payload.data, m->payload.len);
        ps->apply_s += ga_client_now() - t0;
        ps->covered[t - c->tensors] += count;
        protobuf_c_message_free_unpacked(&m->base, &ga_wire_allocator);
        return GA_OK;
    }
    if (m->kind != GRADAGG__V1__PULL_KIND__PULL_DELTA) {
        snprintf(why, cap, "tensor '%s': unknown pull kind %d", name, (int)m->kind);
        return GA_E_PROTO;
    }
    if (!ps->asked_delta || m->base_version != ps->sh->version) {
        snprintf(why, cap, "tensor '%s': delta against version %llu, the buffers hold %s %llu", name,
                 (unsigned long long)m->base_version, ps->asked_delta ? "version" : "no exact version",
                 (unsigned long long)ps->sh->version);
        return GA_E_PROTO;
    }
    held_delta h = {.msg = m, .t = t, .off = pc->off + off, .codec = GA_CODEC_NONE, .payload = m->payload.data};
    if (!m->codec || !ga_codec_name((ga_codec_id)m->codec->id)) {
        snprintf(why, cap, "tensor '%s': delta with an unknown codec", name);
        return GA_E_PROTO;
    }
    h.codec = (ga_codec_id)m->codec->id;
    h.params = ga_codec_params_from_wire(m->codec);
    if (ps->nheld == ps->held_cap) {
        size_t ncap = ps->held_cap ? 2 * ps->held_cap : 16;
        held_delta *grown = ga_malloc(ncap * sizeof *grown);
        if (!grown) return GA_E_NOMEM;
        if (ps->nheld) memcpy(grown, ps->held, ps->nheld * sizeof *grown);
        ga_free(ps->held);
        ps->held = grown;
        ps->held_cap = ncap;
    }
    if (((uintptr_t)h.payload & 3) != 0) { /* decoders read 32-bit words */
        if (!(h.copy = ga_malloc(m->payload.len))) return GA_E_NOMEM;
        memcpy(h.copy, m->payload.data, m->payload.len);
        h.payload = h.copy;
    }
    ga_status st = ga_codec_check_payload(h.codec, &h.params, h.payload, m->payload.len, count);
    if (st != GA_OK) {
        ga_free(h.copy);
        snprintf(why, cap, "tensor '%s' [%zu, +%zu): bad %s delta: %s", name, off, count, ga_codec_name(h.codec),
                 ga_strerror(st));
        return st;
    }
    ps->held[ps->nheld++] = h;
    ps->covered[t - c->tensors] += count;
    return GA_OK;
}

/* One Pull call into the shard's pieces. */
static ga_status pull_once(ga_client *c, ga_shard *sh, pull_state *ps, char *why, size_t cap)
{
    ps->asked_delta = sh->exact;
    ps->have_version = false;
    memset(ps->covered, 0, c->ntensors * sizeof *ps->covered);
    Gradagg__V1__PullRequest req = GRADAGG__V1__PULL_REQUEST__INIT;
    req.job = sh->job;
    req.rank = c->opt.rank;
    req.incarnation = c->incarnation;
    req.min_version = ps->min_version;
    req.has_version = ps->asked_delta;
    req.have_version = ps->asked_delta ? sh->version : 0;

    ga_stream *s = NULL;
    ga_status st = ga_stream_open(sh->ch, GA_METHOD_PULL, c->opt.step_timeout_ms, &s);
    if (st != GA_OK) {
        snprintf(why, cap, "cannot open the stream: %s", ga_strerror(st));
        return st;
    }
    st = ga_stream_send(s, &req.base, NULL, 0);
    if (st == GA_OK) st = ga_stream_close_send(s);
    for (;;) {
        ProtobufCMessage *m = NULL;
        ga_status rst = ga_stream_recv(s, &gradagg__v1__pull_chunk__descriptor, &m, why, cap);
        if (rst != GA_OK || !m) {
            if (rst != GA_OK) st = rst;
            break;
        }
        if (st != GA_OK) {
            protobuf_c_message_free_unpacked(m, &ga_wire_allocator);
            continue;
        }
        st = take_chunk(c, ps, (Gradagg__V1__PullChunk *)m, why, cap);
        if (st != GA_OK) {
            protobuf_c_message_free_unpacked(m, &ga_wire_allocator);
            if (st == GA_E_NOMEM) snprintf(why, cap, "out of memory");
            ga_stream_cancel(s);
            break;
        }
    }
    ga_stream_destroy(s);
    if (st == GA_OK) {
        for (size_t i = 0; i < c->ntensors; i++) {
            const ga_piece *pc = sh->pieces[i];
            if (pc && ps->covered[i] != pc->count) {
                snprintf(why, cap, "tensor '%s': %zu of %zu elements received", pc->name, ps->covered[i],
                         pc->count);
                st = GA_E_COVERAGE;
                break;
            }
        }
    }
    if (st == GA_OK) {
        double t0 = ga_client_now();
        for (size_t i = 0; i < ps->nheld && st == GA_OK; i++) {
            held_delta *h = &ps->held[i];
            st = ga_codec_decode_add(&c->ex, h->codec, &h->params, h->payload, h->msg->payload.len,
                                     (size_t)h->msg->count, h->t->params + h->off);
            if (st != GA_OK) {
                /* Checked on arrival: cannot fail short of a codec bug, but say so if it does. */
                sh->exact = false;
                snprintf(why, cap, "applying the delta of tensor '%s': %s", h->t->name, ga_strerror(st));
            }
        }
        ps->apply_s += ga_client_now() - t0;
        for (size_t i = 0; i < ps->nheld && st == GA_OK && c->pull_tap; i++) {
            const held_delta *h = &ps->held[i];
            ga_pull_delta d = {(int)(h->t - c->tensors), h->off, h->msg->count, h->codec, h->params, h->payload,
                               h->msg->payload.len, h->msg->version, h->msg->base_version};
            c->pull_tap(c->pull_tap_arg, &d);
        }
    }
    release_held(ps);
    if (st == GA_OK) {
        /* Async: a server that came back at an older checkpoint answers an older version (sync
         * shards count it when they move back: push_send). */
        if (c->opt.mode == GA_MODE_ASYNC && ps->version < sh->version) sh->versions_lost += sh->version - ps->version;
        sh->version = ps->version;
        sh->exact = true;
    }
    return st;
}

/* After a lost connection: the push again (ga_shard_repush); a push of a step that closed
 * without it (the server came back and closed it short) is folded back as a straggler's. */
static ga_status repush(ga_client *c, ga_shard *sh, pull_state *ps, char *why, size_t cap)
{
    ps->lost = false;
    ga_status st = ga_shard_repush(c, sh, why, cap);
    if (st == GA_E_STEP_CLOSED) {
        sh->late = true;
        st = GA_OK;
    }
    if (st == GA_OK) ps->min_version = ga_shard_needed_after_push(c, sh); /* the shard may have moved back */
    return st;
}

uint64_t ga_shard_needed_after_push(const ga_client *c, const ga_shard *sh)
{
    uint64_t next = sh->step + 1;
    return next > c->opt.staleness ? next - c->opt.staleness : 0;
}

static ga_status pull_attempt(ga_client *c, ga_shard *sh, void *arg, char *why, size_t cap)
{
    pull_state *ps = arg;
    if (ps->lost) {
        ga_status st = repush(c, sh, ps, why, cap);
        if (st != GA_OK) {
            ps->lost = ga_shard_retryable(st);
            return st;
        }
    }
    ga_status st = pull_once(c, sh, ps, why, cap);
    ps->lost = ps->repush && (ga_shard_retryable(st) || st == GA_E_NOT_MEMBER || st == GA_E_UNKNOWN_JOB);
    return st;
}

static ga_status pull_run(ga_client *c, ga_shard *sh, bool repush_after_loss)
{
    pull_state ps = {0};
    ps.sh = sh;
    ps.repush = repush_after_loss;
    ps.min_version = sh->want;
    ps.covered = ga_calloc(c->ntensors ? c->ntensors : 1, sizeof *ps.covered);
    if (!ps.covered)
        return ga_shard_fail_call(sh, GA_E_NOMEM, "out of memory", "pull version >= %llu",
                                  (unsigned long long)ps.min_version);
    char why[256];
    ga_status st = ga_shard_retry(c, sh, pull_attempt, &ps, why, sizeof why);
    if (st == GA_E_VERSION && ps.repush) {
        /* The server is older than the version this push asked for: it came back at an older
         * checkpoint between the push's answer and this pull. Push again (it moves back), pull. */
        ps.lost = true;
        st = ga_shard_retry(c, sh, pull_attempt, &ps, why, sizeof why);
    }
    ga_free(ps.covered);
    ga_free(ps.held);
    sh->bytes_pulled = ps.bytes;
    sh->apply_s = ps.apply_s;
    if (st == GA_E_DEADLINE) ga_shard_name_missing(c, sh, why, sizeof why);
    if (st != GA_OK) return ga_shard_fail_call(sh, st, why, "pull version >= %llu", (unsigned long long)ps.min_version);
    return GA_OK;
}

ga_status ga_shard_pull(ga_client *c, ga_shard *sh) { return pull_run(c, sh, false); }

ga_status ga_shard_pull_after_push(ga_client *c, ga_shard *sh)
{
    return pull_run(c, sh, c->opt.mode == GA_MODE_SYNC);
}

ga_status ga_client_pull_shards(ga_client *c)
{
    double t0 = ga_client_now();
    for (uint32_t i = 0; i < c->nshards; i++) {
        c->shards[i].bytes_pulled = 0;
        c->shards[i].apply_s = 0.0;
    }
    ga_shards_run(c, ga_shard_pull);
    /* The shards applied at the same time: the slowest one's apply is the step's. */
    double apply = 0.0;
    for (uint32_t i = 0; i < c->nshards; i++) {
        c->stats.bytes_pulled += c->shards[i].bytes_pulled;
        if (c->shards[i].apply_s > apply) apply = c->shards[i].apply_s;
    }
    c->stats.decode_s += apply;
    c->stats.pull_s += ga_client_now() - t0 - apply;
    c->version = ga_shards_version(c);
    ga_status st = ga_shards_error(c);
    if (st != GA_OK) return st;
    /* Device tensors: the mirror now holds the version; the caller's device buffers get it. */
    if ((st = ga_client_device_store(c)) != GA_OK)
        return ga_client_fail(c, st, "pull version %llu: copying it to the device tensors: %s",
                              (unsigned long long)c->version, ga_strerror(st));
    return GA_OK;
}

ga_status ga_client_pull(ga_client *c, uint64_t min_version)
{
    for (uint32_t i = 0; i < c->nshards; i++) {
        c->shards[i].active = c->shards[i].used;
        c->shards[i].want = min_version;
    }
    return ga_client_pull_shards(c);
}
