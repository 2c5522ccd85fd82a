/* In-memory ga_call for the core's tests (fake_call.h). */
#include "fake_call.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/blob.h"
#include "ga_alloc.h"
#include "ga_wire.h"

/* The transport's allocator, for a test binary linked without it (weak: the real one wins). */
static void *wire_alloc(void *d, size_t n)
{
    (void)d;
    return ga_malloc(n);
}
static void wire_free(void *d, void *p)
{
    (void)d;
    ga_free(p);
}
__attribute__((weak)) ProtobufCAllocator ga_wire_allocator = {wire_alloc, wire_free, NULL};

ga_call *fake_call_new(void) { return ga_calloc(1, sizeof(ga_call)); }

void fake_call_free(ga_call *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->nmsgs; i++) ga_free(c->msgs[i].bytes);
    ga_free(c->msgs);
    ga_free(c->resp);
    ga_free(c);
}

static size_t varint(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    do {
        out[n++] = (uint8_t)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

static uint8_t *pack(const ProtobufCMessage *msg, const uint8_t *payload, size_t len, bool with_payload,
                     size_t *out_len)
{
    size_t head = protobuf_c_message_get_packed_size(msg);
    uint8_t *b = ga_malloc(head + 11 + len + 1);
    protobuf_c_message_pack(msg, b);
    size_t n = head;
    if (with_payload) {
        b[n++] = (uint8_t)((15u << 3) | 2u); /* field 15, length-delimited */
        n += varint(b + n, len);
        if (len) memcpy(b + n, payload, len);
        n += len;
    }
    *out_len = n;
    return b;
}

void ga_call_send(ga_call *call, const ProtobufCMessage *msg, void *payload_blob, size_t off, size_t len)
{
    ga_blob *blob = payload_blob; /* the call takes this reference, as the transport does */
    if (call->finished) {
        call->misuse++;
        ga_blob_unref(blob);
        return;
    }
    if (call->nmsgs == call->cap) {
        size_t ncap = call->cap ? 2 * call->cap : 16;
        fake_msg *m = ga_malloc(ncap * sizeof *m);
        if (call->nmsgs) memcpy(m, call->msgs, call->nmsgs * sizeof *m);
        ga_free(call->msgs);
        call->msgs = m;
        call->cap = ncap;
    }
    fake_msg *m = &call->msgs[call->nmsgs++];
    if (blob && off + len > blob->size) call->misuse++; /* a range outside the blob */
    m->bytes =
        pack(msg, blob ? blob->data + off : NULL, blob && off + len <= blob->size ? len : 0, blob != NULL, &m->len);
    ga_blob_unref(blob);
}

void ga_call_finish(ga_call *call, const ProtobufCMessage *resp, ga_status st, const char *fmt, ...)
{
    if (!call) return; /* journal replay: no caller */
    if (call->finished) {
        call->misuse++;
        return;
    }
    call->finished = true;
    call->status = st;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(call->message, sizeof call->message, fmt, ap);
        va_end(ap);
    } else {
        snprintf(call->message, sizeof call->message, "%s", ga_strerror(st));
    }
    if (resp && st == GA_OK) call->resp = pack(resp, NULL, 0, false, &call->resp_len);
}

void ga_call_refuse(ga_call *call, ga_status st, const char *fmt, ...)
{
    if (call->finished) return; /* as the transport: a no-op once finished */
    call->finished = true;
    call->refused = true;
    call->status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(call->message, sizeof call->message, fmt, ap);
    va_end(ap);
}

bool ga_call_sending(ga_call *call)
{
    (void)call;
    return false; /* a fake call's messages are recorded at once */
}

void ga_call_cancel(ga_call *call, ga_status st, const char *msg)
{
    call->cancelled = true;
    call->cancel_status = st;
    snprintf(call->cancel_message, sizeof call->cancel_message, "%s", msg ? msg : "");
}

/* The tests free their calls after the loop has run everything posted before: nothing to keep. */
void ga_call_hold(ga_call *call) { (void)call; }
void ga_call_release(ga_call *call) { (void)call; }

const char *ga_call_peer_host(const ga_call *call, char *host, size_t cap)
{
    return ga_peer_host(ga_call_peer(call), host, cap);
}

const char *ga_call_peer(const ga_call *call)
{
    (void)call;
    return "fake:0";
}

size_t ga_call_metadata(const ga_call *call, const char *key, const char **value, size_t *len)
{
    *value = NULL;
    *len = 0;
    if (!call->authorization || strcmp(key, "authorization") != 0) return 0;
    *value = call->authorization;
    *len = strlen(call->authorization);
    return 1;
}

ProtobufCMessage *fake_call_response(const ga_call *c, const ProtobufCMessageDescriptor *desc)
{
    if (!c->resp) return NULL;
    return protobuf_c_message_unpack(desc, NULL, c->resp_len, c->resp);
}

ProtobufCMessage *fake_call_message(const ga_call *c, size_t i, const ProtobufCMessageDescriptor *desc)
{
    if (i >= c->nmsgs) return NULL;
    return protobuf_c_message_unpack(desc, NULL, c->msgs[i].len, c->msgs[i].bytes);
}

ProtobufCMessage *fake_wire_copy(const ProtobufCMessage *msg)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *b = ga_malloc(n + 1);
    protobuf_c_message_pack(msg, b);
    ProtobufCMessage *copy = protobuf_c_message_unpack(msg->descriptor, &ga_wire_allocator, n, b);
    ga_free(b);
    return copy;
}
