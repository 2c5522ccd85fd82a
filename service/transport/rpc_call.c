/* One server call from arrival to release (rpc.h, rpc_internal.h): read the request or the
 * client stream one message at a time, hand it to the handlers, send a server stream's messages
 * in order, finish with a status, and tell a cancelled client from a clean end. */
#include <grpc/byte_buffer.h>
#include <grpc/support/alloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "ga_alloc.h"
#include "ga_wire.h"
#include "metrics/metrics.h"
#include "rpc_internal.h"

ga_call *rpc_call_new(ga_rpc_server *srv, rpc_queue *q, const ga_method *m)
{
    ga_call *c = ga_calloc(1, sizeof *c);
    if (!c) return NULL;
    c->srv = srv;
    c->q = q;
    c->method = m;
    c->id = m ? (ga_method_id)(m - ga_methods) : GA_METHODS;
    atomic_init(&c->refs, 1);
    for (int k = 0; k < TAG_KINDS; k++) c->tags[k] = (rpc_tag){(rpc_tag_kind)k, c};
    grpc_metadata_array_init(&c->request_md);
    grpc_call_details_init(&c->details);
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

static void drop_outs(rpc_out *o)
{
    while (o) {
        rpc_out *next = o->next;
        grpc_byte_buffer_destroy(o->bb); /* releases a blob payload */
        ga_free(o);
        o = next;
    }
}

static void call_ref(ga_call *c) { atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed); }

void rpc_call_unref(ga_call *c)
{
    if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1) return;
    drop_outs(c->out_head);
    if (c->in_flight) grpc_byte_buffer_destroy(c->in_flight);
    if (c->final_bb) grpc_byte_buffer_destroy(c->final_bb);
    if (c->recv_bb) grpc_byte_buffer_destroy(c->recv_bb);
    ga_free(c->queued_msg);
    grpc_metadata_array_destroy(&c->request_md);
    grpc_call_details_destroy(&c->details);
    if (c->peer) gpr_free(c->peer);
    if (c->call) grpc_call_unref(c->call);
    pthread_mutex_destroy(&c->mu);
    ga_free(c);
}

/* Every start_batch below runs while the caller holds a reference, so a refused batch only
 * gives its reference back (the count cannot reach zero here, under mu). */
static bool start(ga_call *c, const grpc_op *ops, size_t n, rpc_tag_kind kind)
{
    call_ref(c);
    GA_TSAN_RELEASE(&c->tags[kind]);
    if (grpc_call_start_batch(c->call, ops, n, &c->tags[kind], NULL) == GRPC_CALL_OK) return true;
    atomic_fetch_sub_explicit(&c->refs, 1, memory_order_relaxed);
    return false;
}

static size_t initial_md_op(ga_call *c, grpc_op *op)
{
    if (c->initial_md_sent) return 0;
    c->initial_md_sent = true;
    memset(op, 0, sizeof *op);
    op->op = GRPC_OP_SEND_INITIAL_METADATA;
    return 1;
}

/* Under mu, nothing in flight. */
static void start_send_locked(ga_call *c, grpc_byte_buffer *bb)
{
    grpc_op ops[2];
    size_t n = initial_md_op(c, &ops[0]);
    memset(&ops[n], 0, sizeof ops[n]);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n].data.send_message.send_message = bb;
    c->in_flight = bb; /* alive until the op completes */
    if (!start(c, ops, n + 1, TAG_SEND)) {
        c->in_flight = NULL;
        grpc_byte_buffer_destroy(bb);
        c->gone = true;
    }
}

/* Under mu, nothing in flight. Takes resp. */
static void start_status_locked(ga_call *c, grpc_byte_buffer *resp, ga_status st, const char *msg)
{
    grpc_op ops[3];
    size_t n = initial_md_op(c, &ops[0]);
    if (resp) {
        memset(&ops[n], 0, sizeof ops[n]);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = resp;
        c->final_bb = resp;
        n++;
    }
    grpc_metadata md = {grpc_slice_from_static_string(GA_WIRE_STATUS_KEY),
                        grpc_slice_from_static_string(ga_status_name(st)), {{NULL, NULL, NULL, NULL}}};
    grpc_slice details = grpc_slice_from_copied_string(msg ? msg : ga_strerror(st));
    memset(&ops[n], 0, sizeof ops[n]);
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = ga_wire_grpc_code(st);
    ops[n].data.send_status_from_server.status_details = &details;
    ops[n].data.send_status_from_server.trailing_metadata_count = st == GA_OK ? 0 : 1;
    ops[n].data.send_status_from_server.trailing_metadata = &md;
    if (!start(c, ops, n + 1, TAG_STATUS)) {
        c->final_bb = NULL;
        if (resp) grpc_byte_buffer_destroy(resp);
        c->gone = true;
    }
    grpc_slice_unref(details); /* not retained past start_batch */
}

typedef enum finisher {
    BY_TRANSPORT, /* the transport itself (a malformed message, an unknown method) */
    BY_HANDLER,   /* ga_call_finish: only a call that was handed up */
    BY_REFUSAL,   /* ga_call_refuse: only a stream that was not */
} finisher;

/* Sends the status after every queued message. Takes resp. Returns false (and sends nothing)
 * when the call was already finished (a second finish is the handler's bug, not fatal), or
 * `by` may not finish it now. */
static bool finish(ga_call *c, grpc_byte_buffer *resp, ga_status st, const char *msg, finisher by)
{
    pthread_mutex_lock(&c->mu);
    if (c->finished || (by == BY_HANDLER && !c->handed_up) || (by == BY_REFUSAL && c->handed_up)) {
        pthread_mutex_unlock(&c->mu);
        if (resp) grpc_byte_buffer_destroy(resp);
        return false;
    }
    c->finished = true;
    /* Every status a call ends with passes here once: the transport's own refusals and the
     * handlers' (dispatch, core, health) alike. */
    ga_metrics_count_call((int)c->id, st);
    if (c->gone) {
        if (resp) grpc_byte_buffer_destroy(resp);
    } else if (c->in_flight || c->out_head) {
        c->finish_queued = true;
        c->final_bb = resp;
        c->queued_st = st;
        if (msg) {
            size_t n = strlen(msg) + 1;
            c->queued_msg = ga_malloc(n);
            if (c->queued_msg) memcpy(c->queued_msg, msg, n);
        }
    } else {
        start_status_locked(c, resp, st, msg);
    }
    pthread_mutex_unlock(&c->mu);
    return true;
}

static void finishf(ga_call *c, ga_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void finishf(ga_call *c, ga_status st, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    finish(c, NULL, st, msg, BY_TRANSPORT);
}

/* A client stream that ends without its end of stream: whatever came is dropped, and an
 * operator sees it (a killed worker, a cut link, a client deadline). */
static void stream_broken(ga_call *c)
{
    ga_metrics_count_broken((int)c->id);
    ga_log(GA_LOG_WARN, "%s stream from %s broke before its end: %u messages (%llu bytes) discarded, nothing committed",
           c->method->name, c->peer ? c->peer : "?", c->messages, (unsigned long long)c->bytes);
    c->srv->h->on_stream_abort(c->srv->h->ctx, c, c->id, c->stream);
    c->stream = NULL;
}

static void drop_stream(ga_call *c);

static void give_recv_room(ga_call *c)
{
    if (!c->recv_room) return;
    ga_budget_give(c->srv->budget, c->srv->max_message_bytes);
    c->recv_room = false;
}

/* Reads the next message, once the budget has room for it (ga_rpc_options.budget). Health
 * probes take none: a full server still answers its probes. */
static void post_recv(ga_call *c)
{
    ga_rpc_server *srv = c->srv;
    bool stream = c->method->kind == GA_RPC_CLIENT_STREAM;
    bool probe = c->id == GA_METHOD_HEALTH_CHECK || c->id == GA_METHOD_HEALTH_WATCH;
    if (srv->budget && !probe) {
        char why[320];
        if (ga_budget_take(srv->budget, srv->max_message_bytes, "room for the next message (--max-message-mb)", why,
                           sizeof why) != GA_OK) {
            finishf(c, GA_E_BUSY, "%s", why);
            if (stream) drop_stream(c);
            return;
        }
        c->recv_room = true;
    }
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->recv_bb;
    /* A refusal means the call is already broken; RECV_CLOSE_ON_SERVER still ends it. */
    if (!start(c, &op, 1, TAG_RECV)) {
        give_recv_room(c);
        if (stream) stream_broken(c);
    }
}

/* Returns false, handing nothing up, when the call was refused (ga_call_refuse) first. */
static bool hand_up(ga_call *c)
{
    pthread_mutex_lock(&c->mu);
    bool refused = c->finished;
    if (!refused) {
        call_ref(c); /* the handler's hold, given back by ga_call_finish */
        c->handed_up = true;
    }
    pthread_mutex_unlock(&c->mu);
    return !refused;
}

static bool is_finished(ga_call *c)
{
    pthread_mutex_lock(&c->mu);
    bool f = c->finished;
    pthread_mutex_unlock(&c->mu);
    return f;
}

/* A refused stream (ga_call_refuse): its state goes, and nothing more is read. */
static void drop_stream(ga_call *c)
{
    c->srv->h->on_stream_abort(c->srv->h->ctx, c, c->id, c->stream);
    c->stream = NULL;
}

static void on_new(ga_call *c, bool ok)
{
    if (!ok) { /* the request failed: the server is shutting down */
        rpc_call_unref(c);
        return;
    }
    rpc_server_repost(c->srv, c->q, c->method);
    c->peer = grpc_call_get_peer(c->call);
    /* The reference the request held now lasts until RECV_CLOSE_ON_SERVER completes. */
    grpc_op close;
    memset(&close, 0, sizeof close);
    close.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    close.data.recv_close_on_server.cancelled = &c->cancelled;
    GA_TSAN_RELEASE(&c->tags[TAG_CLOSE]);
    if (grpc_call_start_batch(c->call, &close, 1, &c->tags[TAG_CLOSE], NULL) != GRPC_CALL_OK) {
        rpc_call_unref(c);
        return;
    }
    if (!c->method) {
        const grpc_slice *m = &c->details.method;
        finishf(c, GA_E_UNIMPLEMENTED, "unknown method %.*s", (int)GRPC_SLICE_LENGTH(*m),
                (const char *)GRPC_SLICE_START_PTR(*m));
        return;
    }
    post_recv(c);
}

static void on_message(ga_call *c, grpc_byte_buffer *bb)
{
    const ga_rpc_handlers *h = c->srv->h;
    ProtobufCMessage *msg = NULL;
    bool stream = c->method->kind == GA_RPC_CLIENT_STREAM;
    if (stream && is_finished(c)) { /* refused while this message was on its way */
        grpc_byte_buffer_destroy(bb);
        drop_stream(c);
        return;
    }
    c->messages++;
    c->bytes += grpc_byte_buffer_length(bb);
    /* A repeated number costs 1 byte on the wire and 8 unpacked: counted before the unpack. */
    size_t most;
    const char *field;
    ga_wire_most_repeated(c->method->request, bb, &most, &field);
    if (most > GA_RPC_MAX_REPEATED) {
        finishf(c, GA_E_INVAL, "%s field '%s' holds %zu elements: a request's list holds at most %d (a shape at most 32 "
                "dimensions)", c->method->request->name, field, most, GA_RPC_MAX_REPEATED);
        grpc_byte_buffer_destroy(bb);
        if (stream) drop_stream(c);
        return;
    }
    ga_status rc = ga_wire_unpack(c->method->request, bb, &msg);
    grpc_byte_buffer_destroy(bb);
    if (rc != GA_OK) {
        if (rc == GA_E_PROTO) finishf(c, rc, "malformed %s", c->method->request->name);
        else finishf(c, rc, "%s", ga_strerror(rc));
        if (stream) drop_stream(c);
        return;
    }
    if (!stream) {
        (void)hand_up(c); /* nothing refuses a unary call before it is handed up */
        h->on_request(h->ctx, c, c->id, msg);
        return;
    }
    char why[256] = "";
    rc = h->on_stream_message(h->ctx, c, c->id, msg, &c->stream, why, sizeof why);
    if (rc == GA_OK) {
        if (is_finished(c)) drop_stream(c); /* refused meanwhile */
        else post_recv(c); /* only now: flow control is the backpressure */
        return;
    }
    why[sizeof why - 1] = '\0';
    finishf(c, rc, "%s", why[0] ? why : ga_strerror(rc));
    drop_stream(c);
}

static void on_end_of_input(ga_call *c, bool ok)
{
    const ga_rpc_handlers *h = c->srv->h;
    /* A cancelled or timed-out client also ends with no message; only this tells them apart
     * (trap 3). */
    bool failed = !ok || grpc_call_failed_before_recv_message(c->call);
    if (c->method->kind != GA_RPC_CLIENT_STREAM) {
        if (!failed) finishf(c, GA_E_PROTO, "no %s before the end of the stream", c->method->request->name);
        return; /* failed: the client has gone, nothing to answer */
    }
    if (failed && !is_finished(c)) {
        stream_broken(c);
        return;
    }
    if (failed || !hand_up(c)) { /* refused (ga_call_refuse): the refusal was the answer */
        drop_stream(c);
        return;
    }
    h->on_stream_end(h->ctx, c, c->id, c->stream);
    c->stream = NULL;
}

static void on_sent(ga_call *c, bool ok)
{
    pthread_mutex_lock(&c->mu);
    grpc_byte_buffer_destroy(c->in_flight);
    c->in_flight = NULL;
    if (!ok) c->gone = true;
    if (c->gone) {
        drop_outs(c->out_head);
        c->out_head = c->out_tail = NULL;
    }
    if (c->out_head) {
        rpc_out *o = c->out_head;
        c->out_head = o->next;
        if (!c->out_head) c->out_tail = NULL;
        start_send_locked(c, o->bb);
        ga_free(o);
    } else if (c->finish_queued) {
        c->finish_queued = false;
        grpc_byte_buffer *resp = c->final_bb;
        c->final_bb = NULL;
        if (c->gone) {
            if (resp) grpc_byte_buffer_destroy(resp);
        } else {
            start_status_locked(c, resp, c->queued_st, c->queued_msg);
        }
        ga_free(c->queued_msg);
        c->queued_msg = NULL;
    }
    pthread_mutex_unlock(&c->mu);
}

static void on_closed(ga_call *c)
{
    pthread_mutex_lock(&c->mu);
    bool tell = false;
    if (c->cancelled) {
        c->gone = true;
        drop_outs(c->out_head);
        c->out_head = c->out_tail = NULL;
        tell = c->handed_up && !c->finished;
    }
    pthread_mutex_unlock(&c->mu);
    const ga_rpc_handlers *h = c->srv->h;
    if (tell && h->on_cancel) h->on_cancel(h->ctx, c);
}

void rpc_call_event(ga_call *c, rpc_tag_kind kind, bool ok)
{
    switch (kind) {
    case TAG_NEW:
        on_new(c, ok);
        return; /* on_new keeps or drops the request's reference itself */
    case TAG_RECV: {
        grpc_byte_buffer *bb = c->recv_bb;
        c->recv_bb = NULL;
        give_recv_room(c); /* the message is here: what it holds from now on is taken apart */
        if (ok && bb) on_message(c, bb);
        else {
            if (bb) grpc_byte_buffer_destroy(bb);
            on_end_of_input(c, ok);
        }
        break;
    }
    case TAG_SEND: on_sent(c, ok); break;
    case TAG_CLOSE: on_closed(c); break;
    case TAG_STATUS:
        pthread_mutex_lock(&c->mu);
        if (c->final_bb) grpc_byte_buffer_destroy(c->final_bb);
        c->final_bb = NULL;
        pthread_mutex_unlock(&c->mu);
        break;
    case TAG_SHUTDOWN: break; /* handled by the queue thread */
    }
    rpc_call_unref(c);
}

/* ---- rpc.h: handler side, any thread ---- */

void ga_call_send(ga_call *c, const ProtobufCMessage *msg, void *payload_blob, size_t off, size_t len)
{
    ga_blob *b = payload_blob;
    if (!c || !msg || (b && (off > b->size || len > b->size - off))) {
        ga_blob_unref(b); /* a range outside the blob is the caller's bug: send nothing */
        return;
    }
    grpc_byte_buffer *bb = b ? ga_wire_pack(msg, b->data + off, len, ga_blob_release, b)
                             : ga_wire_pack(msg, NULL, 0, NULL, NULL);
    if (!bb) return; /* the pack released the blob */
    rpc_out *o = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->gone || c->finished) {
        /* no-op once the client has gone */
    } else if (!c->in_flight && !c->out_head) {
        start_send_locked(c, bb);
        bb = NULL;
    } else if ((o = ga_malloc(sizeof *o)) != NULL) {
        o->next = NULL;
        o->bb = bb;
        if (c->out_tail) c->out_tail->next = o;
        else c->out_head = o;
        c->out_tail = o;
        bb = NULL;
    } else {
        /* A lost message would corrupt the stream: end it instead. */
        grpc_call_cancel_with_status(c->call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory", NULL);
        c->gone = true;
    }
    pthread_mutex_unlock(&c->mu);
    if (bb) grpc_byte_buffer_destroy(bb);
}

void ga_call_finish(ga_call *c, const ProtobufCMessage *resp, ga_status st, const char *fmt, ...)
{
    if (!c) return;
    char msg[1024];
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
    }
    grpc_byte_buffer *bb = resp && st == GA_OK ? ga_wire_pack(resp, NULL, 0, NULL, NULL) : NULL;
    if (finish(c, bb, st, fmt ? msg : NULL, BY_HANDLER)) rpc_call_unref(c); /* the handler's hold */
}

void ga_call_refuse(ga_call *c, ga_status st, const char *fmt, ...)
{
    if (!c) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* The stream's state stays with the call's queue thread, which drops it at its next event:
     * the message in flight, or the end of input once the status is out. */
    (void)finish(c, NULL, st, msg, BY_REFUSAL);
}

bool ga_call_sending(ga_call *c)
{
    if (!c) return false;
    pthread_mutex_lock(&c->mu);
    bool sending = !c->gone && (c->in_flight || c->out_head);
    pthread_mutex_unlock(&c->mu);
    return sending;
}

void ga_call_cancel(ga_call *c, ga_status st, const char *msg)
{
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    bool over = c->gone;
    c->gone = true; /* nothing more is sent; the queue goes now, the message in flight when it completes */
    drop_outs(c->out_head);
    c->out_head = c->out_tail = NULL;
    pthread_mutex_unlock(&c->mu);
    if (!over)
        grpc_call_cancel_with_status(c->call, (grpc_status_code)ga_wire_grpc_code(st), msg ? msg : ga_strerror(st),
                                     NULL);
}

void ga_call_hold(ga_call *c)
{
    if (c) call_ref(c);
}

void ga_call_release(ga_call *c)
{
    if (c) rpc_call_unref(c);
}

const char *ga_call_peer(const ga_call *c)
{
    return c && c->peer ? c->peer : "";
}

const char *ga_call_peer_host(const ga_call *c, char *host, size_t cap)
{
    return ga_peer_host(ga_call_peer(c), host, cap);
}

size_t ga_call_metadata(const ga_call *c, const char *key, const char **value, size_t *len)
{
    *value = NULL;
    *len = 0;
    if (!c || !key) return 0;
    size_t n = 0;
    for (size_t i = 0; i < c->request_md.count; i++) {
        const grpc_metadata *md = &c->request_md.metadata[i];
        if (grpc_slice_str_cmp(md->key, key) != 0) continue;
        if (n++ == 0) {
            *value = (const char *)GRPC_SLICE_START_PTR(md->value);
            *len = GRPC_SLICE_LENGTH(md->value);
        }
    }
    return n;
}
