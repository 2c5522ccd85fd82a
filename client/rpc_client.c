/* Synchronous client calls (rpc_client.h): one pluck completion queue per call, every operation
 * waited for in turn, the final status read from the GA_WIRE_STATUS_KEY trailing metadata, and
 * payloads lent to gRPC without a copy until ga_stream_destroy. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include "rpc_client.h"

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ga_alloc.h"
#include "ga_pem.h"
#include "ga_tsan.h"
#include "ga_wire.h"

struct ga_channel {
    grpc_channel *ch;
    bool has_auth;
    grpc_slice auth; /* the "authorization" value every call sends (gRPC refs it per call) */
};

struct ga_stream {
    const ga_method *m;
    grpc_call *call;
    grpc_completion_queue *cq;
    grpc_metadata_array initial_md;
    grpc_metadata_array trailing_md;
    grpc_status_code code;
    grpc_slice details;
    bool status_done; /* the status batch was plucked: code, details and trailing_md are set */
    grpc_metadata md; /* the authorization entry sent at open, when the channel has one */
    atomic_long lent; /* payloads gRPC has not released yet */
};

/* Distinct tags on a call's own queue: the status batch, started at open, and the one
 * operation waited for now. */
#define TAG_STATUS ((void *)1)
#define TAG_OP ((void *)2)

static int clamp_int(size_t v) { return v > INT_MAX ? INT_MAX : (int)v; }

/* A metadata value travels as an HTTP/2 header: printable ASCII only. */
static bool header_value(const char *v)
{
    for (; *v; v++)
        if ((unsigned char)*v < 0x20 || (unsigned char)*v > 0x7e) return false;
    return true;
}

/* PEM text of the roots and the optional client pair -> TLS credentials; NULL + why on error. */
static ga_status tls_credentials(const ga_channel_security *sec, grpc_channel_credentials **out, char *why, size_t cap)
{
    bool has_cert = sec->cert_file && sec->cert_file[0], has_key = sec->key_file && sec->key_file[0];
    if (has_cert != has_key)
        return ga_status_fail(GA_E_CONFIG, why, cap, "tls_cert_file and tls_key_file go together: set both or neither");
    char *ca = NULL, *cert = NULL, *key = NULL;
    ga_status st;
    GA_CHECK_GOTO(ga_pem_load(sec->ca_file, GA_PEM_CERTS, "tls_ca_file", &ca, why, cap), st, done);
    if (has_cert) {
        GA_CHECK_GOTO(ga_pem_load(sec->cert_file, GA_PEM_CERTS, "tls_cert_file", &cert, why, cap), st, done);
        GA_CHECK_GOTO(ga_pem_load(sec->key_file, GA_PEM_KEY, "tls_key_file", &key, why, cap), st, done);
        GA_CHECK_GOTO(ga_pem_check_pair(cert, key, "tls_cert_file", sec->cert_file, "tls_key_file", sec->key_file, why,
                                        cap),
                      st, done);
    }
    /* gRPC copies the PEM text. */
    grpc_ssl_pem_key_cert_pair pair = {key, cert};
    *out = grpc_ssl_credentials_create(ca, has_cert ? &pair : NULL, NULL, NULL);
    if (!*out) st = ga_status_fail(GA_E_CONFIG, why, cap, "gRPC refused the TLS settings");
done:
    ga_pem_free(ca);
    ga_pem_free(cert);
    ga_pem_free(key);
    return st;
}

ga_status ga_channel_create(const char *target, size_t max_message_bytes, ga_channel **out)
{
    return ga_channel_create_secure(target, max_message_bytes, NULL, out, NULL, 0);
}

ga_status ga_channel_create_secure(const char *target, size_t max_message_bytes, const ga_channel_security *sec,
                                   ga_channel **out, char *why, size_t cap)
{
    if (!target || !out || max_message_bytes == 0)
        return ga_status_fail(GA_E_INVAL, why, cap, "channel: no target, no output or a zero message limit");
    static const ga_channel_security plain = {NULL, NULL, NULL, NULL, NULL, 0};
    if (!sec) sec = &plain;
    bool tls = sec->ca_file && sec->ca_file[0];
    if (!tls && ((sec->cert_file && sec->cert_file[0]) || (sec->key_file && sec->key_file[0])))
        return ga_status_fail(GA_E_CONFIG, why, cap,
                              "tls_cert_file and tls_key_file need tls_ca_file: a client certificate is only sent "
                              "over TLS");
    bool has_auth = sec->authorization && sec->authorization[0];
    if (has_auth && !header_value(sec->authorization))
        return ga_status_fail(GA_E_CONFIG, why, cap, "the token holds a byte outside printable ASCII");
    grpc_init();
    grpc_channel_credentials *creds = NULL;
    ga_status st = GA_OK;
    if (tls) st = tls_credentials(sec, &creds, why, cap);
    else creds = grpc_insecure_credentials_create();
    if (st != GA_OK) {
        grpc_shutdown();
        return st;
    }
    ga_channel *c = ga_calloc(1, sizeof *c);
    if (!c) {
        grpc_channel_credentials_release(creds);
        grpc_shutdown();
        return ga_status_fail(GA_E_NOMEM, why, cap, "channel: out of memory");
    }
    /* The limits on both sides (trap 5); no transparent retries: they would hold lent payloads
     * and the SDK decides itself what to resend. */
    grpc_arg args[5] = {
        {GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = clamp_int(max_message_bytes)}},
        {GRPC_ARG_INTEGER, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, {.integer = clamp_int(max_message_bytes)}},
        {GRPC_ARG_INTEGER, GRPC_ARG_ENABLE_RETRIES, {.integer = 0}},
    };
    size_t nargs = 3;
    if (sec->reconnect_max_ms)
        args[nargs++] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
                                   {.integer = clamp_int(sec->reconnect_max_ms)}};
    if (tls && sec->target_name && sec->target_name[0])
        args[nargs++] = (grpc_arg){GRPC_ARG_STRING, GRPC_SSL_TARGET_NAME_OVERRIDE_ARG, {.string = (char *)sec->target_name}};
    grpc_channel_args chargs = {nargs, args};
    c->ch = grpc_channel_create(target, creds, &chargs);
    grpc_channel_credentials_release(creds);
    if (!c->ch) {
        grpc_shutdown();
        ga_free(c);
        return ga_status_fail(GA_E_INVAL, why, cap, "channel: gRPC refused target '%s'", target);
    }
    if (has_auth) {
        c->auth = grpc_slice_from_copied_string(sec->authorization);
        c->has_auth = true;
    }
    *out = c;
    return GA_OK;
}

void ga_channel_destroy(ga_channel *ch)
{
    if (!ch) return;
    grpc_channel_destroy(ch->ch);
    if (ch->has_auth) grpc_slice_unref(ch->auth);
    grpc_shutdown();
    ga_free(ch);
}

static bool wait_for(ga_stream *s, void *tag)
{
    /* The call's deadline bounds every wait: gRPC fails the operation when it passes. */
    grpc_event ev = grpc_completion_queue_pluck(s->cq, tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    return ev.type == GRPC_OP_COMPLETE && ev.success;
}

static bool run_op(ga_stream *s, const grpc_op *ops, size_t n)
{
    if (grpc_call_start_batch(s->call, ops, n, TAG_OP, NULL) != GRPC_CALL_OK) return false;
    return wait_for(s, TAG_OP);
}

static void copy_text(char *dst, size_t cap, const char *src, size_t len)
{
    if (!dst || cap == 0) return;
    if (len >= cap) len = cap - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

/* Waits for the status (once) and returns it as a ga_status, its message in why. */
static ga_status final_status(ga_stream *s, char *why, size_t cap)
{
    if (!s->status_done) {
        wait_for(s, TAG_STATUS);
        s->status_done = true;
    }
    const char *name = NULL;
    size_t name_len = 0;
    for (size_t i = 0; i < s->trailing_md.count; i++) {
        const grpc_metadata *md = &s->trailing_md.metadata[i];
        if (grpc_slice_str_cmp(md->key, GA_WIRE_STATUS_KEY) == 0) {
            name = (const char *)GRPC_SLICE_START_PTR(md->value);
            name_len = GRPC_SLICE_LENGTH(md->value);
        }
    }
    ga_status st = ga_wire_status_from(s->code, name, name_len);
    size_t n = GRPC_SLICE_LENGTH(s->details);
    if (n > 0) copy_text(why, cap, (const char *)GRPC_SLICE_START_PTR(s->details), n);
    else copy_text(why, cap, ga_strerror(st), strlen(ga_strerror(st)));
    return st;
}

/* A send that failed: the call is over, and its status says why. */
static ga_status send_failed(ga_stream *s)
{
    ga_status st = final_status(s, NULL, 0);
    return st == GA_OK ? GA_E_TRANSPORT : st;
}

static void payload_released(void *ud)
{
    ga_stream *s = ud;
    GA_TSAN_ACQUIRE(s); /* released by ga_wire_pack on the sending thread */
    atomic_fetch_sub_explicit(&s->lent, 1, memory_order_release);
}

ga_status ga_stream_open(ga_channel *ch, ga_method_id m, uint32_t timeout_ms, ga_stream **out)
{
    if (!ch || !out || (unsigned)m >= GA_METHODS) return GA_E_INVAL;
    ga_stream *s = ga_calloc(1, sizeof *s);
    if (!s) return GA_E_NOMEM;
    s->m = &ga_methods[m];
    atomic_init(&s->lent, 0);
    grpc_metadata_array_init(&s->initial_md);
    grpc_metadata_array_init(&s->trailing_md);
    s->details = grpc_empty_slice();
    s->cq = grpc_completion_queue_create_for_pluck(NULL);
    /* timeout_ms 0: no deadline (a watch that lasts until cancelled). */
    gpr_timespec deadline = timeout_ms ? gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                                      gpr_time_from_millis((int64_t)timeout_ms, GPR_TIMESPAN))
                                       : gpr_inf_future(GPR_CLOCK_MONOTONIC);
    grpc_slice path = grpc_slice_from_static_string(s->m->path);
    s->call = grpc_channel_create_call(ch->ch, NULL, GRPC_PROPAGATE_DEFAULTS, s->cq, path, NULL, deadline, NULL);
    /* Initial metadata is requested (trap 1), and the status with it: the batch completes at the
     * end of the call, whichever way it ends. */
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (ch->has_auth) {
        s->md.key = grpc_slice_from_static_string(GA_WIRE_AUTH_KEY);
        s->md.value = ch->auth;
        ops[0].data.send_initial_metadata.count = 1;
        ops[0].data.send_initial_metadata.metadata = &s->md;
    }
    ops[1].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[1].data.recv_initial_metadata.recv_initial_metadata = &s->initial_md;
    ops[2].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[2].data.recv_status_on_client.trailing_metadata = &s->trailing_md;
    ops[2].data.recv_status_on_client.status = &s->code;
    ops[2].data.recv_status_on_client.status_details = &s->details;
    if (!s->call || grpc_call_start_batch(s->call, ops, 3, TAG_STATUS, NULL) != GRPC_CALL_OK) {
        if (s->call) grpc_call_unref(s->call);
        grpc_completion_queue_shutdown(s->cq);
        grpc_completion_queue_destroy(s->cq);
        grpc_metadata_array_destroy(&s->initial_md);
        grpc_metadata_array_destroy(&s->trailing_md);
        ga_free(s);
        return GA_E_TRANSPORT;
    }
    *out = s;
    return GA_OK;
}

static ga_status send_bb(ga_stream *s, grpc_byte_buffer *bb)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_MESSAGE;
    op.data.send_message.send_message = bb;
    bool ok = run_op(s, &op, 1);
    grpc_byte_buffer_destroy(bb);
    return ok ? GA_OK : send_failed(s);
}

ga_status ga_stream_send(ga_stream *s, const ProtobufCMessage *msg, const void *payload, size_t len)
{
    if (!s || !msg) return GA_E_INVAL;
    if (s->status_done) return send_failed(s);
    if (payload) atomic_fetch_add_explicit(&s->lent, 1, memory_order_relaxed);
    grpc_byte_buffer *bb = ga_wire_pack(msg, payload, len, payload ? payload_released : NULL, s);
    if (!bb) return GA_E_NOMEM;
    return send_bb(s, bb);
}

ga_status ga_stream_send_raw(ga_stream *s, const void *bytes, size_t len)
{
    if (!s || (!bytes && len)) return GA_E_INVAL;
    if (s->status_done) return send_failed(s);
    grpc_slice slice = grpc_slice_from_copied_buffer(bytes, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return send_bb(s, bb);
}

ga_status ga_stream_close_send(ga_stream *s)
{
    if (!s) return GA_E_INVAL;
    if (s->status_done) return send_failed(s);
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    return run_op(s, &op, 1) ? GA_OK : send_failed(s);
}

ga_status ga_stream_recv(ga_stream *s, const ProtobufCMessageDescriptor *desc, ProtobufCMessage **msg,
                         char *why, size_t cap)
{
    if (!s || !desc || !msg) return GA_E_INVAL;
    *msg = NULL;
    if (!s->status_done) {
        grpc_byte_buffer *bb = NULL;
        grpc_op op;
        memset(&op, 0, sizeof op);
        op.op = GRPC_OP_RECV_MESSAGE;
        op.data.recv_message.recv_message = &bb;
        if (run_op(s, &op, 1) && bb) {
            ProtobufCMessage *m = NULL;
            ga_status rc = ga_wire_unpack(desc, bb, &m);
            grpc_byte_buffer_destroy(bb);
            if (rc == GA_OK) {
                *msg = m;
                return GA_OK;
            }
            /* The server sent what we cannot read: nothing after it can be trusted. */
            grpc_call_cancel(s->call, NULL);
            final_status(s, NULL, 0);
            char text[256];
            int n = snprintf(text, sizeof text, "malformed %s from the server", desc->name);
            copy_text(why, cap, text, n > 0 ? (size_t)n : 0);
            return rc;
        }
        if (bb) grpc_byte_buffer_destroy(bb);
    }
    return final_status(s, why, cap);
}

void ga_stream_cancel(ga_stream *s)
{
    if (s) grpc_call_cancel(s->call, NULL);
}

void ga_stream_destroy(ga_stream *s)
{
    if (!s) return;
    if (!s->status_done) {
        grpc_call_cancel(s->call, NULL);
        wait_for(s, TAG_STATUS);
    }
    grpc_call_unref(s->call);
    /* gRPC may release a payload slice after the call is gone, on its own thread. */
    while (atomic_load_explicit(&s->lent, memory_order_acquire) > 0) {
        struct timespec t = {0, 100000};
        nanosleep(&t, NULL);
    }
    grpc_completion_queue_shutdown(s->cq);
    grpc_completion_queue_destroy(s->cq);
    grpc_metadata_array_destroy(&s->initial_md);
    grpc_metadata_array_destroy(&s->trailing_md);
    grpc_slice_unref(s->details);
    ga_free(s);
}

ga_status ga_call_unary(ga_channel *ch, ga_method_id m, const ProtobufCMessage *req, uint32_t timeout_ms,
                        ProtobufCMessage **resp, char *msg, size_t cap)
{
    if (!ch || !req || !resp || (unsigned)m >= GA_METHODS) return GA_E_INVAL;
    ga_stream *s;
    ga_status rc = ga_stream_open(ch, m, timeout_ms, &s);
    if (rc != GA_OK) {
        copy_text(msg, cap, ga_strerror(rc), strlen(ga_strerror(rc)));
        return rc;
    }
    /* One batch for the request, the half-close and the response. */
    grpc_byte_buffer *out = ga_wire_pack(req, NULL, 0, NULL, NULL);
    grpc_byte_buffer *in = NULL;
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_MESSAGE;
    ops[0].data.send_message.send_message = out;
    ops[1].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[2].op = GRPC_OP_RECV_MESSAGE;
    ops[2].data.recv_message.recv_message = &in;
    rc = out ? GA_OK : GA_E_NOMEM;
    if (out) {
        run_op(s, ops, 3); /* a failure shows in the status */
        grpc_byte_buffer_destroy(out);
    } else {
        grpc_call_cancel(s->call, NULL); /* so the status below arrives now */
    }
    ga_status st = final_status(s, msg, cap);
    ProtobufCMessage *r = NULL;
    if (rc == GA_OK && st == GA_OK) {
        if (!in) {
            rc = GA_E_PROTO;
            copy_text(msg, cap, "no response message", strlen("no response message"));
        } else if ((rc = ga_wire_unpack(s->m->response, in, &r)) != GA_OK) {
            char text[256];
            int n = snprintf(text, sizeof text, "malformed %s from the server", s->m->response->name);
            copy_text(msg, cap, text, n > 0 ? (size_t)n : 0);
        }
    } else if (rc == GA_OK) {
        rc = st;
    }
    if (in) grpc_byte_buffer_destroy(in);
    ga_stream_destroy(s);
    if (rc == GA_OK) *resp = r;
    return rc;
}
