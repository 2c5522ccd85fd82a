/* The transport: the gRPC C core server, its completion-queue threads and every call. Handlers
 * above it see ga_call handles and unpacked protobuf-c messages, never a gRPC type.
 *
 * Threads: each completion-queue thread owns the calls pinned to its queue; callbacks in
 * ga_rpc_handlers run on those threads and must not touch loop-owned state (they post to the
 * loop). ga_call_send and ga_call_finish may be called from any thread.
 *
 * Call lifetime: a call handed up (on_request, or on_stream_end) belongs to its handler until
 * the handler calls ga_call_finish on it, exactly once, even when the client has gone (then the
 * finish is a no-op that releases the call). on_cancel tells the handler early that the client
 * has gone, so a long wait (a pull) can end. */
#ifndef GA_RPC_H
#define GA_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "ga_methods.h"
#include "ga_status.h"

/* The most elements a repeated field of any request may hold, counted on the wire before the
 * message is unpacked (GA_E_INVAL past it). */
#define GA_RPC_MAX_REPEATED 64

typedef struct ga_rpc_server ga_rpc_server;
typedef struct ga_call ga_call;

typedef struct ga_rpc_handlers {
    void *ctx;
    /* A unary or server-streaming request. Takes msg (free with protobuf_c_message_free_unpacked
     * and ga_wire_allocator). Must finish the call eventually. */
    void (*on_request)(void *ctx, ga_call *call, ga_method_id method, ProtobufCMessage *msg);
    /* One message of a client stream. *stream is the handler's per-call state (NULL before the
     * first message). Takes msg. Returns GA_OK to read on, or an error: the transport then
     * finishes the call with that status and `why` (a NUL-terminated message the handler wrote
     * into why[0..why_cap)), then calls on_stream_abort. The next message is read only after
     * this returns (flow control is the backpressure). */
    ga_status (*on_stream_message)(void *ctx, ga_call *call, ga_method_id method, ProtobufCMessage *msg,
                                   void **stream, char *why, size_t why_cap);
    /* The client half-closed a client stream cleanly. Takes stream. Must finish the call. */
    void (*on_stream_end)(void *ctx, ga_call *call, ga_method_id method, void *stream);
    /* The stream failed (client cancelled, deadline, broken connection, bad message, server
     * shutdown, ga_call_refuse) before its end: nothing of it may take effect. Frees stream (may
     * be NULL). The call is not the handler's: only ga_call_peer may be read from it. */
    void (*on_stream_abort)(void *ctx, ga_call *call, ga_method_id method, void *stream);
    /* The client of a call that was handed up and not yet finished has gone. */
    void (*on_cancel)(void *ctx, ga_call *call);
} ga_rpc_handlers;

typedef struct ga_rpc_options {
    const char *listen;          /* "127.0.0.1:0", "0.0.0.0:7070" */
    int threads;                 /* completion-queue threads, >= 1 */
    size_t max_message_bytes;    /* receive and send limit per message */
    /* NULL, or the memory budget (budget.h) every receive takes its room from: while gRPC may
     * be receiving a call's next message (a read is posted), max_message_bytes are taken, and
     * given back when it arrives. A call that finds no room is finished with GA_E_BUSY. So the
     * messages gRPC assembles before the server sees them are inside --max-memory-mb too.
     * Health probes take none. */
    ga_budget *budget;
    /* HTTP/2 receive window per stream, bytes: the most gRPC buffers of a call the server has
     * not read yet (a Push streams faster than the loop commits it). 0 = gRPC grows windows
     * from its bandwidth-delay probe: fastest, and on a fast link a whole push may sit in
     * gRPC's buffers. Set = the probe off and this fixed window, at some CPU in gRPC's threads
     * (measured in docs/operations.md). */
    size_t stream_window_bytes;
    /* gRPC's own memory (its resource quota): connections' buffers and state, reads not yet
     * handed to the server. Past it gRPC reclaims: shrinks buffers, closes idle connections,
     * then resets streams (RESOURCE_EXHAUSTED). 0 = no quota. */
    size_t grpc_memory_bytes;
    /* TLS: PEM text (not paths; borrowed until ga_rpc_server_start returns, gRPC keeps copies).
     * tls_cert_pem NULL = plaintext; with it tls_key_pem is required. tls_client_ca_pem set =
     * mutual TLS: a client must present a certificate that chains to it, else the handshake
     * fails and no call arrives. */
    const char *tls_cert_pem;
    const char *tls_key_pem;
    const char *tls_client_ca_pem;
} ga_rpc_options;
#define GA_RPC_OPTIONS_INIT {"127.0.0.1:0", 2, 64u << 20, NULL, 0, 0, NULL, NULL, NULL}

/* Binds, starts the threads and begins accepting. *port = the bound port. Borrows handlers
 * (must outlive the server). Errors: GA_E_IO (cannot bind, or the port is in use: reuseport is
 * off; with TLS, also a certificate or key gRPC refuses), GA_E_CONFIG, GA_E_NOMEM. */
ga_status ga_rpc_server_start(const ga_rpc_options *opt, const ga_rpc_handlers *handlers,
                              ga_rpc_server **out, int *port);
/* Stops accepting new calls and lets calls in flight finish: `done(arg)` runs on a
 * completion-queue thread once every call has been released. Calls that are still open after
 * ga_rpc_server_cancel_all are cancelled. Any thread, once. */
void ga_rpc_server_shutdown(ga_rpc_server *s, void (*done)(void *arg), void *arg);
/* Cancels every call still open (they finish with CANCELLED on the client). Any thread. */
void ga_rpc_server_cancel_all(ga_rpc_server *s);
/* Replaces the TLS certificate chain, key and client CA for the connections that follow (those
 * open keep theirs). GA_E_CONFIG on a plaintext server, or when client_ca's presence differs
 * from the start's (mutual TLS stays as started); nothing changes then. Any thread. */
ga_status ga_rpc_server_set_tls(ga_rpc_server *s, const char *cert_pem, const char *key_pem, const char *client_ca_pem);
/* Joins the threads and frees the server; after the shutdown's done ran. NULL is a no-op. */
void ga_rpc_server_destroy(ga_rpc_server *s);

/* Server streams: queues one message; when payload_blob != NULL its bytes [off, off+len) are
 * appended as the message's payload field without a copy (the call takes one reference to the
 * blob, a ga_blob *). Messages go out in order, one at a time. Borrows msg (packed before
 * return). No-op once the client has gone. Any thread. */
void ga_call_send(ga_call *call, const ProtobufCMessage *msg, void *payload_blob, size_t off, size_t len);
/* Ends the call: sends `resp` (may be NULL; unary and client-stream calls send it when st is
 * GA_OK), then the status `st` with a message (printf format; NULL = ga_strerror(st)) and, for
 * errors, the trailing metadata GA_WIRE_STATUS_KEY = ga_status_name(st). Queued after every
 * message sent before. Releases the caller's hold on the call. Any thread. */
void ga_call_finish(ga_call *call, const ProtobufCMessage *resp, ga_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Refuses a client stream whose messages are still arriving, at once: finishes the call with st
 * and the message (as ga_call_finish), reads no more of it and hands its state to
 * on_stream_abort. A no-op when the stream has already ended and been handed up (its handler
 * then finishes the call) or the call is finished. For a check that runs away from the call's
 * thread (the loop) between ga_call_hold and ga_call_release. Any thread. */
void ga_call_refuse(ga_call *call, ga_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Keeps the call's memory alive for a holder that is not its handler (a check posted to the
 * loop), until the matching ga_call_release. Any thread. */
void ga_call_hold(ga_call *call);
void ga_call_release(ga_call *call);
/* Whether messages of the call are still queued or being sent (a client that does not read its
 * answer keeps them, and the blobs they reference). Any thread. */
bool ga_call_sending(ga_call *call);
/* Ends the call now with st and msg, dropping what is still queued for it (and the blob
 * references those messages hold): for a call whose answer was queued and finished, but which
 * holds memory the server needs. Any thread; a no-op once the call is over. */
void ga_call_cancel(ga_call *call, ga_status st, const char *msg);
/* The peer address ("ipv4:127.0.0.1:5432"), for logs; valid until the call is finished. */
const char *ga_call_peer(const ga_call *call);
/* The peer's host: its address without the port ("ipv4:127.0.0.1", "ipv6:[::1]"), what limits
 * per client count; into host[0..cap). Returns host. */
const char *ga_call_peer_host(const ga_call *call, char *host, size_t cap);
/* The request's metadata entries named `key` (lower case): returns how many there are, and
 * the first one's value in *value (not NUL-terminated) and *len (NULL and 0 when none). Valid
 * until the call is finished. The call's completion-queue thread, or its handler. */
size_t ga_call_metadata(const ga_call *call, const char *key, const char **value, size_t *len);

#endif
