/* InitTensors: every registered tensor's current values as its initial value, each shard getting
 * its pieces (a split tensor's range as a 1-D tensor of its own), streamed in aligned fp32 chunks
 * straight from the caller's buffers, with retries (the first init of a tensor wins; a repeated
 * one is a no-op, so a retry is harmless). An awaiting init names the pieces without values and
 * is answered once another rank's init made them: a shard then receives one copy of the model,
 * not one per rank. */
#include <stdio.h>

#include "client_internal.h"
#include "ga_wire.h"

static ga_status init_attempt(ga_client *c, ga_shard *sh, void *arg, char *why, size_t cap)
{
    bool await = *(const bool *)arg;
    ga_stream *s = NULL;
    /* An awaiting init waits for another rank, as a pull waits for a step. */
    uint32_t timeout_ms = await && c->opt.step_timeout_ms > c->opt.call_timeout_ms ? c->opt.step_timeout_ms
                                                                                   : c->opt.call_timeout_ms;
    ga_status st = ga_stream_open(sh->ch, GA_METHOD_INIT, timeout_ms, &s);
    if (st != GA_OK) {
        snprintf(why, cap, "cannot open the stream: %s", ga_strerror(st));
        return st;
    }
    size_t elems = ga_chunks_elems(GA_CHUNK_ALIGN * sizeof(float), c->opt.chunk_bytes);
    Gradagg__V1__InitChunk chunk = GRADAGG__V1__INIT_CHUNK__INIT;
    chunk.job = sh->job;
    chunk.rank = c->opt.rank;
    chunk.incarnation = c->incarnation;
    chunk.await_values = await;
    for (size_t i = 0; i < c->ntensors && st == GA_OK; i++) {
        ga_tensor *t = &c->tensors[i];
        const ga_piece *pc = sh->pieces[i];
        if (!pc) continue;
        uint64_t range_shape = pc->count;
        chunk.tensor = pc->name;
        chunk.n_shape = t->npieces == 1 ? (size_t)t->ndim : 1;
        chunk.shape = t->npieces == 1 ? t->shape : &range_shape;
        if (await) { /* its name and shape only */
            st = ga_stream_send(s, &chunk.base, NULL, 0);
            continue;
        }
        size_t nchunks = ga_chunks_count(pc->count, elems);
        for (size_t k = 0; k < nchunks && st == GA_OK; k++) {
            size_t off, count;
            ga_chunks_range(pc->count, elems, k, &off, &count);
            chunk.offset = off;
            chunk.count = count;
            st = ga_stream_send(s, &chunk.base, t->params + pc->off + off, count * sizeof(float));
        }
    }
    if (st == GA_OK) st = ga_stream_close_send(s);
    ga_status fin;
    bool answered = false;
    for (;;) {
        ProtobufCMessage *m = NULL;
        fin = ga_stream_recv(s, &gradagg__v1__init_response__descriptor, &m, why, cap);
        if (fin != GA_OK || !m) break;
        answered = true;
        protobuf_c_message_free_unpacked(m, &ga_wire_allocator);
    }
    ga_stream_destroy(s);
    if (fin != GA_OK) st = fin;
    if (st == GA_OK && !answered) {
        snprintf(why, cap, "the stream ended without a response");
        st = GA_E_PROTO;
    }
    return st;
}

static ga_status send_init(ga_client *c, ga_shard *sh, bool await)
{
    size_t n = 0;
    for (size_t i = 0; i < c->ntensors; i++) n += sh->pieces[i] != NULL;
    char why[256];
    ga_status st = ga_shard_retry(c, sh, init_attempt, &await, why, sizeof why);
    if (st != GA_OK) return ga_shard_fail_call(sh, st, why, "%s of %zu tensors", await ? "awaiting init" : "init", n);
    return GA_OK;
}

ga_status ga_shard_send_init(ga_client *c, ga_shard *sh) { return send_init(c, sh, false); }

ga_status ga_shard_await_init(ga_client *c, ga_shard *sh) { return send_init(c, sh, true); }
