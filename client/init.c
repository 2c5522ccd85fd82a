/* InitTensors: every registered tensor's current values as its initial value, streamed in
 * aligned fp32 chunks straight from the caller's buffers, with retries (the first init of a
 * tensor wins; a repeated one is a no-op, so a retry is harmless). */
#include <stdio.h>

#include "client_internal.h"
#include "ga_wire.h"

static ga_status init_attempt(ga_client *c, void *arg, char *why, size_t cap)
{
    (void)arg;
    ga_stream *s = NULL;
    ga_status st = ga_stream_open(c->ch, GA_METHOD_INIT, c->opt.call_timeout_ms, &s);
    if (st != GA_OK) {
        snprintf(why, cap, "cannot open the stream: %s", ga_strerror(st));
        return st;
    }
    size_t elems = ga_chunks_elems(GA_CHUNK_ALIGN * sizeof(float), c->opt.chunk_bytes);
    Gradagg__V1__InitChunk chunk = GRADAGG__V1__INIT_CHUNK__INIT;
    chunk.job = c->job;
    chunk.rank = c->opt.rank;
    chunk.incarnation = c->incarnation;
    for (size_t i = 0; i < c->ntensors && st == GA_OK; i++) {
        ga_tensor *t = &c->tensors[i];
        chunk.tensor = t->name;
        chunk.n_shape = (size_t)t->ndim;
        chunk.shape = t->shape;
        size_t nchunks = ga_chunks_count(t->n, elems);
        for (size_t k = 0; k < nchunks && st == GA_OK; k++) {
            size_t off, count;
            ga_chunks_range(t->n, elems, k, &off, &count);
            chunk.offset = off;
            chunk.count = count;
            st = ga_stream_send(s, &chunk.base, t->params + off, count * sizeof(float));
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

ga_status ga_client_send_init(ga_client *c)
{
    char why[256];
    ga_status st = ga_client_retry(c, init_attempt, NULL, why, sizeof why);
    if (st != GA_OK) return ga_client_fail_call(c, st, why, "init of %zu tensors", c->ntensors);
    return GA_OK;
}
