/* The push side of a step: DGC correction, the automatic 2bit threshold, encoding every chunk
 * once (device tensors on the device, payloads copied to the host) into buffers kept until the
 * push is acknowledged, each shard's Push stream of the chunks of its pieces with retries (a
 * retry resends the same bytes), and folding refused payloads back into the residual. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "auto_threshold.h"
#include "client_internal.h"
#include "dgc.h"
#include "ga_alloc.h"
#include "ga_reduce.h"
#include "ga_wire.h"

static size_t align4(size_t x) { return (x + 3) & ~(size_t)3; }

/* Grows *buf to at least want bytes; the old contents need not survive. */
static bool reserve(void **buf, size_t *cap, size_t want)
{
    if (*cap >= want) return true;
    void *p = ga_malloc(want);
    if (!p) return false;
    ga_free(*buf);
    *buf = p;
    *cap = want;
    return true;
}

/* The seed of chunk i of a step: the sampled start moves every step, as DGC's random start. */
static uint64_t chunk_seed(uint64_t base, uint64_t step, size_t i)
{
    uint64_t x = base ^ (step * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)i * 0xC2B2AE3D27D4EB4Full);
    x = (x ^ (x >> 31)) * 0xBF58476D1CE4E5B9ull;
    return x ^ (x >> 29);
}

static bool needs_work(const ga_tensor *t)
{
    if (t->dgc.enabled) return t->late_pending || t->dgc.nesterov || (t->dgc.momentum == 0.0f && t->clip_s != 1.0f);
    return t->late_pending;
}

/* This step's automatic threshold of t, from a sample of |residual + what the encode will add|
 * taken before anything moves; kept by encode_tensor once the residual moved with it. */
static ga_status plan_threshold(ga_client *c, ga_tensor *t, const float *g, uint64_t step, size_t index)
{
    ga_auto_sample plan = ga_auto_sample_plan(t->n, t->autot.sample_fraction, chunk_seed(index, step, SIZE_MAX));
    size_t bytes = c->sample_n * sizeof(float);
    if (!reserve((void **)&c->sample, &bytes, plan.count * sizeof(float))) return GA_E_NOMEM;
    c->sample_n = bytes / sizeof(float);
    float est;
    if (t->dgc.enabled) {
        for (size_t k = 0; k < plan.count; k++) {
            size_t i = plan.start + k * plan.stride;
            c->sample[k] = fabsf(t->residual[i] + ga_dgc_corrected_at(&t->dgc, t->u, g, t->clip_s, i));
        }
        est = ga_auto_quantile(c->sample, plan.count, t->auto_rho);
    } else {
        est = ga_auto_estimate(t->residual, g, t->n, plan, t->auto_rho, c->sample);
    }
    t->step_threshold = t->threshold;
    t->step_have = t->auto_have;
    /* An all-zero sample (or an overflowing sum) says nothing: keep the last threshold. */
    if (est > 0.0f && isfinite(est)) {
        float next = ga_auto_smooth(t->threshold, t->auto_have, est, t->autot.smoothing);
        if (next > 0.0f && isfinite(next)) {
            t->step_threshold = next;
            t->step_have = true;
        }
    }
    t->step_level = t->step_threshold;
    if (t->autot.level == GA_AUTO_LEVEL_MEAN) {
        float level = ga_auto_level_mean(c->sample, plan.count, t->step_threshold);
        if (isfinite(level)) t->step_level = level;
    }
    return GA_OK;
}

/* Plans t's chunks for this step and reserves every buffer the encode needs, so that nothing
 * can fail for lack of memory once residuals start to move. */
static ga_status plan_tensor(ga_client *c, ga_tensor *t, const float *g, uint64_t step, size_t index)
{
    ga_codec_params p = t->cp;
    if (t->codec == GA_CODEC_TOPK && t->dgc.enabled) p.ratio = ga_dgc_ratio(p.ratio, t->dgc.warmup_epochs, c->epoch);
    t->clip_s = t->dgc.enabled ? ga_dgc_clip_coeff(g, t->n, t->dgc.clip_norm) : 1.0f;
    if (t->autot.enabled) {
        if (plan_threshold(c, t, g, step, index) != GA_OK) goto nomem;
        p.select = t->step_threshold;
        p.threshold = t->step_level;
    }
    size_t elems;
    ga_status st = ga_chunks_push_elems(t->codec, &p, c->opt.chunk_bytes, &elems);
    if (st != GA_OK) return ga_client_fail(c, st, "push step %llu: tensor '%s': %s", (unsigned long long)step, t->name, ga_strerror(st));
    /* Each piece is chunked on its own. Its cuts are whole chunks (placement.h), so the chunks are
     * those of the whole tensor, numbered as in it (topk seeds), unless the DGC warm-up changed
     * the chunk length of a topk tensor. */
    size_t nparts = 0;
    for (uint32_t j = 0; j < t->npieces; j++) nparts += ga_chunks_count(t->pieces[j].count, elems);
    size_t parts_bytes = t->parts_cap * sizeof *t->parts;
    if (!reserve((void **)&t->parts, &parts_bytes, nparts * sizeof *t->parts)) goto nomem;
    t->parts_cap = parts_bytes / sizeof *t->parts;
    size_t pos = 0;
    for (size_t i = 0, j = 0, k = 0; i < nparts; i++, k++) {
        if (k == ga_chunks_count(t->pieces[j].count, elems)) {
            j++;
            k = 0;
        }
        ga_push_part *part = &t->parts[i];
        ga_chunks_range(t->pieces[j].count, elems, k, &part->off, &part->count);
        part->off += t->pieces[j].off;
        part->piece = (uint32_t)j;
        part->params = p;
        if (t->codec == GA_CODEC_TOPK) part->params.seed = chunk_seed(p.seed, step, i);
        size_t cap;
        if ((st = ga_codec_encoded_size(t->codec, &part->params, part->count, &cap)) != GA_OK)
            return ga_client_fail(c, st, "push step %llu: tensor '%s': %s", (unsigned long long)step, t->name,
                                  ga_strerror(st));
        part->pos = pos;
        part->len = cap; /* the capacity until encoded */
        pos = align4(pos + cap);
    }
    t->nparts = nparts;
    if (!reserve((void **)&t->buf, &t->buf_cap, pos ? pos : 4)) goto nomem;
    if (t->device) {
        if ((st = ga_client_device_reserve((void **)&t->dbuf, &t->dbuf_cap, pos ? pos : 4)) != GA_OK ||
            (needs_work(t) && !t->work && (st = ga_device_malloc(t->n * sizeof(float), (void **)&t->work)) != GA_OK)) {
            t->nparts = 0;
            return ga_client_fail(c, st, "push step %llu: tensor '%s': device buffers: %s", (unsigned long long)step,
                                  t->name, ga_strerror(st));
        }
        return GA_OK;
    }
    if (needs_work(t) && !t->work && !(t->work = ga_malloc(t->n * sizeof(float)))) goto nomem;
    if (t->dgc.enabled && t->dgc.factor_masking && t->u && t->residual) {
        size_t want = elems < t->n ? elems : t->n;
        size_t bytes = c->scratch_n * sizeof(float);
        if (!reserve((void **)&c->scratch, &bytes, want * sizeof(float))) goto nomem;
        c->scratch_n = bytes / sizeof(float);
    }
    return GA_OK;
nomem:
    t->nparts = 0;
    return ga_client_fail(c, GA_E_NOMEM, "push step %llu: tensor '%s': out of memory", (unsigned long long)step,
                          t->name);
}

/* The fraction of t's elements its encoded 2bit payloads send as +-t: codes 2 and 3 (the high
 * bit of each pair) counted word by word; padding codes are 0. */
static float density_2bit(const ga_tensor *t)
{
    uint64_t nonzero = 0;
    for (size_t k = 0; k < t->nparts; k++) {
        const ga_push_part *p = &t->parts[k];
        const uint32_t *w = (const uint32_t *)(t->buf + p->pos);
        for (size_t j = 0; j < p->len / 4; j++) nonzero += (uint64_t)__builtin_popcount(w[j] & 0xAAAAAAAAu);
    }
    return (float)((double)nonzero / (double)t->n);
}

/* Whether t's parts may be left to their shards' threads: a host tensor encoded straight from
 * the gradient by a codec that cannot refuse finite input. */
static bool deferrable(const ga_tensor *t)
{
    return !t->device && !t->dgc.enabled && !t->late_pending &&
           (t->codec == GA_CODEC_2BIT || t->codec == GA_CODEC_1BIT || t->codec == GA_CODEC_NONE);
}

/* Encodes t's chunks, but with defer (deferrable(t)) those of the active shards; the residual
 * (and DGC's u) move here. */
static ga_status encode_tensor(ga_client *c, ga_tensor *t, const float *g, uint64_t step, bool defer)
{
    bool deferred = false;
    const float *src = g;
    if (t->dgc.enabled) {
        src = ga_dgc_correct(&t->dgc, t->u, g, t->clip_s, t->work, t->n);
        /* A dense codec keeps a refused push in `late` (no residual): it goes with this step. */
        if (t->late_pending) {
            for (size_t i = 0; i < t->n; i++) t->work[i] = src[i] + t->late[i];
            src = t->work;
        }
    } else if (t->late_pending) {
        if (t->device) {
            /* The same float sums as the host loop (ga_reduce is bit-identical across backends). */
            const float *in[2] = {g, t->late};
            ga_status st = ga_reduce_sum(&c->dex, in, 2, t->n, t->work);
            if (st != GA_OK) {
                t->nparts = 0;
                return ga_client_fail(c, st, "push step %llu: tensor '%s': adding its late push: %s",
                                      (unsigned long long)step, t->name, ga_strerror(st));
            }
        } else {
            for (size_t i = 0; i < t->n; i++) t->work[i] = g[i] + t->late[i];
        }
        src = t->work;
    }
    const ga_exec *ex = t->device ? &c->dex : &c->ex;
    defer = defer && deferrable(t);
    t->step_grad = g;
    for (size_t i = 0; i < t->nparts; i++) {
        ga_push_part *p = &t->parts[i];
        p->deferred = defer && c->shards[t->pieces[p->piece].shard].active;
        if (p->deferred) {
            deferred = true;
            continue;
        }
        float *res = t->residual ? t->residual + p->off : NULL;
        size_t len;
        /* Device tensors encode into device staging, then copy the payload to the host buffer. */
        uint8_t *out = t->device ? t->dbuf + p->pos : t->buf + p->pos;
        ga_status st = ga_codec_encode(ex, t->codec, &p->params, src + p->off, res, p->count, out, p->len, &len);
        if (st == GA_OK && t->device) st = ga_device_copy(ex, t->buf + p->pos, out, len);
        /* Sent now: a fold-back of this chunk brings it back into late. */
        if (st == GA_OK && t->late_pending) {
            if (t->device) st = ga_client_device_zero(c, t->late + p->off, p->count * sizeof(float));
            else memset(t->late + p->off, 0, p->count * sizeof(float));
        }
        if (st == GA_OK && t->device && i + 1 == t->nparts) st = ga_exec_sync(ex);
        if (st != GA_OK) {
            t->nparts = i; /* what was encoded, for the fold-back */
            return ga_client_fail(c, st, "push step %llu: encode tensor '%s' [%zu, %zu) with %s: %s",
                                  (unsigned long long)step, t->name, p->off, p->off + p->count,
                                  ga_codec_name(t->codec), ga_strerror(st));
        }
        p->len = len;
        c->stats.bytes_pushed += len;
        /* Masking is for sparse sends: a dense codec sends every element, so masking would
         * zero the whole momentum each step. */
        if (t->dgc.enabled && t->dgc.factor_masking && t->u && t->residual) {
            st = ga_dgc_mask(&c->ex, t->codec, &p->params, t->buf + p->pos, len, p->count, t->u + p->off, c->scratch);
            if (st != GA_OK) /* our own payload: cannot fail short of a codec bug */
                return ga_client_fail(c, st, "push step %llu: DGC masking of tensor '%s': %s",
                                      (unsigned long long)step, t->name, ga_strerror(st));
        }
    }
    t->late_pending = false;
    if (t->autot.enabled) {
        t->threshold = t->step_threshold;
        t->auto_have = t->step_have;
    }
    if (t->codec == GA_CODEC_2BIT && !deferred) t->density = density_2bit(t);
    return GA_OK;
}

/* Encodes deferred part p of t. On an error (none is expected: deferrable) p stays deferred
 * and nothing moved: the fold-back skips it. */
static ga_status encode_deferred(ga_client *c, ga_tensor *t, ga_push_part *p)
{
    size_t len = 0;
    float *res = t->residual ? t->residual + p->off : NULL;
    ga_status st = ga_codec_encode(&c->ex, t->codec, &p->params, t->step_grad + p->off, res, p->count,
                                   t->buf + p->pos, p->len, &len);
    if (st != GA_OK) return st;
    p->len = len;
    p->deferred = false;
    return GA_OK;
}

ga_status ga_shard_encode(ga_client *c, ga_shard *sh)
{
    ga_status st = GA_OK;
    sh->bytes_pushed = 0;
    ga_shard_turn_wait(c, sh, GA_TURN_ENCODED);
    for (size_t i = 0; i < c->ntensors && st == GA_OK; i++) {
        ga_tensor *t = &c->tensors[i];
        const ga_piece *pc = sh->pieces[i];
        for (size_t k = 0; pc && k < t->nparts && st == GA_OK; k++) {
            ga_push_part *p = &t->parts[k];
            /* Other shards' parts are theirs to write: test the piece first. */
            if (&t->pieces[p->piece] != pc || !p->deferred) continue;
            if ((st = encode_deferred(c, t, p)) != GA_OK)
                ga_shard_fail_call(sh, st, "", "push step %llu: encode tensor '%s' [%zu, %zu) with %s",
                                   (unsigned long long)sh->step, t->name, p->off, p->off + p->count,
                                   ga_codec_name(t->codec));
            else
                sh->bytes_pushed += p->len;
        }
    }
    ga_shard_turn_pass(c, sh, GA_TURN_ENCODED); /* also after a failure: the next lane goes on */
    return st;
}

void ga_client_encode_finish(ga_client *c)
{
    for (size_t i = 0; i < c->ntensors; i++) {
        ga_tensor *t = &c->tensors[i];
        if (t->codec == GA_CODEC_2BIT && t->nparts) t->density = density_2bit(t);
    }
}

ga_status ga_client_encode(ga_client *c, const float *const *grads, uint64_t step, bool defer)
{
    /* Everything that can refuse the step comes before the first residual moves. */
    for (size_t i = 0; i < c->ntensors; i++) {
        ga_tensor *t = &c->tensors[i];
        t->nparts = 0;
        ga_status fin = ga_check_finite(t->device ? &c->dex : &c->ex, grads[i], t->n);
        if (fin == GA_E_NONFINITE)
            return ga_client_fail(c, GA_E_NONFINITE, "push step %llu: gradient of tensor '%s' holds NaN or Inf",
                                  (unsigned long long)step, t->name);
        if (fin != GA_OK)
            return ga_client_fail(c, fin, "push step %llu: checking the device gradient of tensor '%s': %s",
                                  (unsigned long long)step, t->name, ga_strerror(fin));
    }
    ga_status st;
    for (size_t i = 0; i < c->ntensors; i++)
        if ((st = plan_tensor(c, &c->tensors[i], grads[i], step, i)) != GA_OK) return st;
    for (size_t i = 0; i < c->ntensors; i++) {
        if ((st = encode_tensor(c, &c->tensors[i], grads[i], step, defer)) != GA_OK) {
            /* A wire-type overflow (fp16/bf16) after others moved: keep what they encoded. */
            char msg[sizeof c->err];
            memcpy(msg, c->err, sizeof msg);
            for (size_t j = i + 1; j < c->ntensors; j++) c->tensors[j].nparts = 0;
            for (size_t j = 0; j < i; j++) /* the deferred parts too, so they fold back */
                for (size_t k = 0; k < c->tensors[j].nparts; k++)
                    if (c->tensors[j].parts[k].deferred)
                        (void)encode_deferred(c, &c->tensors[j], &c->tensors[j].parts[k]);
            ga_client_fold_back(c, NULL);
            memcpy(c->err, msg, sizeof msg);
            return st;
        }
    }
    return GA_OK;
}

/* True when part p of t was encoded and belongs to a shard of mask (NULL = every shard). */
static bool in_mask(const ga_tensor *t, const ga_push_part *p, const bool *mask)
{
    return !p->deferred && (!mask || mask[t->pieces[p->piece].shard]);
}

ga_status ga_client_fold_back(ga_client *c, const bool *mask)
{
    ga_status rc = GA_OK;
    for (size_t i = 0; i < c->ntensors; i++) {
        ga_tensor *t = &c->tensors[i];
        bool any = false;
        for (size_t k = 0; k < t->nparts && !any; k++) any = in_mask(t, &t->parts[k], mask);
        if (!any) continue;
        float *into = t->residual;
        if (!into) {
            ga_status st = GA_OK;
            if (!t->late && t->device) {
                if ((st = ga_device_malloc(t->n * sizeof(float), (void **)&t->late)) == GA_OK &&
                    (st = ga_client_device_zero(c, t->late, t->n * sizeof(float))) != GA_OK) {
                    ga_device_free(t->late);
                    t->late = NULL;
                }
            } else if (!t->late && !(t->late = ga_calloc(t->n, sizeof(float)))) {
                st = GA_E_NOMEM;
            }
            if (st != GA_OK) {
                rc = ga_client_fail(c, st, "fold-back of tensor '%s': %s", t->name, ga_strerror(st));
                t->nparts = 0;
                continue;
            }
            into = t->late;
            t->late_pending = true;
        }
        if (t->device) {
            ga_status st = ga_client_device_fold_back(c, t, into, mask);
            if (st != GA_OK && rc == GA_OK)
                rc = ga_client_fail(c, st, "fold-back of tensor '%s': %s", t->name, ga_strerror(st));
            t->nparts = 0;
            continue;
        }
        for (size_t k = 0; k < t->nparts; k++) {
            ga_push_part *p = &t->parts[k];
            if (!in_mask(t, p, mask)) continue;
            ga_status st = ga_codec_decode_add(&c->ex, t->codec, &p->params, t->buf + p->pos, p->len, p->count,
                                               into + p->off);
            if (st != GA_OK && rc == GA_OK)
                rc = ga_client_fail(c, st, "fold-back of tensor '%s': %s", t->name, ga_strerror(st));
        }
        t->nparts = 0;
    }
    return rc;
}

typedef struct push_arg {
    uint64_t step;
    Gradagg__V1__PushResponse *resp;
    bool maybe_counted; /* an attempt failed in a way that may have left it counted */
} push_arg;

static ga_status push_attempt(ga_client *c, ga_shard *sh, void *arg, char *why, size_t cap)
{
    push_arg *a = arg;
    ga_stream *s = NULL;
    ga_status st = ga_stream_open(sh->ch, GA_METHOD_PUSH, c->opt.call_timeout_ms, &s);
    if (st != GA_OK) {
        snprintf(why, cap, "cannot open the stream: %s", ga_strerror(st));
        return st;
    }
    Gradagg__V1__PushChunk chunk = GRADAGG__V1__PUSH_CHUNK__INIT;
    Gradagg__V1__Codec codec = GRADAGG__V1__CODEC__INIT;
    chunk.job = sh->job;
    chunk.rank = c->opt.rank;
    chunk.incarnation = c->incarnation;
    chunk.step = a->step;
    chunk.has_lr = c->has_lr;
    chunk.lr = c->lr;
    chunk.weight = c->push_weight > 1 ? c->push_weight : 0; /* 0 on the wire = 1 */
    chunk.codec = &codec;
    for (size_t i = 0; i < c->ntensors && st == GA_OK; i++) {
        ga_tensor *t = &c->tensors[i];
        const ga_piece *pc = sh->pieces[i];
        if (!pc) continue;
        chunk.tensor = pc->name;
        for (size_t k = 0; k < t->nparts && st == GA_OK; k++) {
            ga_push_part *p = &t->parts[k];
            if (&t->pieces[p->piece] != pc) continue;
            chunk.offset = p->off - pc->off;
            chunk.count = p->count;
            ga_codec_to_wire(t->codec, &p->params, &codec);
            st = ga_stream_send(s, &chunk.base, t->buf + p->pos, p->len);
        }
    }
    if (st == GA_OK) st = ga_stream_close_send(s);
    /* The bytes are on their way: the next lane may start sending while this one's answer
     * comes back. */
    ga_shard_turn_pass(c, sh, GA_TURN_SENT);
    /* The response, then the final status; after a failed send the final status says why. */
    ga_status fin;
    for (;;) {
        ProtobufCMessage *m = NULL;
        fin = ga_stream_recv(s, &gradagg__v1__push_response__descriptor, &m, why, cap);
        if (fin != GA_OK || !m) break;
        if (!a->resp) a->resp = (Gradagg__V1__PushResponse *)m;
        else protobuf_c_message_free_unpacked(m, &ga_wire_allocator);
    }
    ga_stream_destroy(s);
    if (fin != GA_OK) st = fin;
    if (st == GA_OK && !a->resp) {
        snprintf(why, cap, "the stream ended without a response");
        st = GA_E_PROTO;
    }
    if (st != GA_OK && a->resp) {
        protobuf_c_message_free_unpacked(&a->resp->base, &ga_wire_allocator);
        a->resp = NULL;
    }
    if (st == GA_E_UNAVAILABLE || st == GA_E_DEADLINE || st == GA_E_CANCELLED || st == GA_E_TRANSPORT)
        a->maybe_counted = true;
    return st;
}

/* ga_shard_retry of the push of sh->step. Refused as a step the server has not opened
 * (GA_E_STEP_FUTURE) in a sync job whose server's open step is older than sh->step, the server
 * came back at an older checkpoint. With --durability checkpoint (docs/reliability.md,
 * "Durability") the shard moves back to that step (the versions after it are counted in
 * versions_lost, and its next pull is a full one) and the same payloads go as that step. A
 * server that journals every acknowledged push has lost steps it acknowledged (its data was
 * damaged or replaced): GA_E_ROLLED_BACK, naming both versions, and nothing moves. */
static ga_status push_send(ga_client *c, ga_shard *sh, push_arg *a, char *why, size_t cap)
{
    a->step = sh->step;
    ga_status st = ga_shard_retry(c, sh, push_attempt, a, why, cap);
    if (st != GA_E_STEP_FUTURE || c->opt.mode != GA_MODE_SYNC) return st;
    uint64_t open = 0;
    bool durable = false;
    char jwhy[256];
    if (ga_shard_open_step(c, sh, &open, &durable, jwhy, sizeof jwhy) != GA_OK || open >= sh->step) return st;
    if (durable)
        return ga_status_fail(GA_E_ROLLED_BACK, why, cap,
                              "job '%s' on %s came back at version %llu, below version %llu, which that server had "
                              "acknowledged to this worker, although it runs with --durability acked (every "
                              "acknowledged push journaled): its data directory lost acknowledged steps (a journal "
                              "segment removed, an older snapshot restored), and the worker stops rather than train "
                              "on from version %llu (docs/reliability.md, \"Durability\")",
                              sh->job, sh->addr, (unsigned long long)open, (unsigned long long)sh->step,
                              (unsigned long long)open);
    sh->versions_lost += sh->step - open;
    sh->step = open;
    sh->exact = false;
    a->step = open;
    return ga_shard_retry(c, sh, push_attempt, a, why, cap);
}

/* Notes the step a push call may have reached the server with (sh->sent_any, sh->sent_max). */
static void note_sent(ga_shard *sh, const push_arg *a, ga_status st)
{
    if (st != GA_OK && !a->maybe_counted) return;
    if (!sh->sent_any || a->step > sh->sent_max) sh->sent_max = a->step;
    sh->sent_any = true;
}

ga_status ga_shard_repush(ga_client *c, ga_shard *sh, char *why, size_t cap)
{
    push_arg a = {sh->step, NULL, false};
    ga_status st = push_send(c, sh, &a, why, cap);
    note_sent(sh, &a, st);
    if (a.resp) protobuf_c_message_free_unpacked(&a.resp->base, &ga_wire_allocator);
    return st;
}

ga_status ga_shard_push(ga_client *c, ga_shard *sh)
{
    push_arg a = {sh->step, NULL, false};
    char why[256];
    sh->stale_ack = false;
    ga_shard_turn_wait(c, sh, GA_TURN_SENT);
    ga_status st = push_send(c, sh, &a, why, sizeof why);
    ga_shard_turn_pass(c, sh, GA_TURN_SENT); /* also when no attempt got as far as sending */
    bool sent_before = sh->sent_any && a.step <= sh->sent_max; /* by an earlier call of this client's */
    note_sent(sh, &a, st);
    if (st != GA_OK) return ga_shard_fail_call(sh, st, why, "push step %llu", (unsigned long long)a.step);
    sh->ack = a.resp->version;
    /* A duplicate that none of this call's attempts can have caused, of a step an earlier call
     * of this client's pushed (its answer lost, or a server that came back older kept it): the
     * step was counted with that call's bytes, so these were not. A duplicate of a step this
     * client never pushed was counted with its predecessor's (the rank's incarnation before it,
     * which pushed this step before it failed): these bytes are that step's again, not new. */
    sh->stale_ack = a.resp->duplicate && !a.maybe_counted && sent_before;
    protobuf_c_message_free_unpacked(&a.resp->base, &ga_wire_allocator);
    return GA_OK;
}

uint64_t ga_client_push_step(const ga_client *c)
{
    uint64_t step = UINT64_MAX;
    for (uint32_t i = 0; i < c->nshards; i++)
        if (c->shards[i].used && c->shards[i].step < step) step = c->shards[i].step;
    return step;
}

ga_status ga_client_push(ga_client *c, uint64_t *ack_version)
{
    uint64_t step = ga_client_push_step(c);
    for (uint32_t i = 0; i < c->nshards; i++) c->shards[i].active = c->shards[i].used && c->shards[i].step == step;
    ga_shards_run(c, ga_shard_push);
    ga_status st = ga_shards_error(c);
    if (st != GA_OK) return st;
    uint64_t ack = UINT64_MAX;
    for (uint32_t i = 0; i < c->nshards; i++)
        if (c->shards[i].active && c->shards[i].ack < ack) ack = c->shards[i].ack;
    *ack_version = ack;
    return GA_OK;
}
