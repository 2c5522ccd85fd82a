/* Synchronous client calls over a gRPC channel: the transport of the SDK, also used by tests to
 * speak to a real server (including malformed bytes). Each call has its own completion queue
 * and deadline; a stream is used by one thread at a time. Errors carry the server's exact
 * ga_status (from the GA_WIRE_STATUS_KEY trailing metadata) and its message. */
#ifndef GA_RPC_CLIENT_H
#define GA_RPC_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "ga_methods.h"
#include "ga_status.h"

typedef struct ga_channel ga_channel;
typedef struct ga_stream ga_stream;

/* An insecure channel to target ("127.0.0.1:7070") with send/receive limits of
 * max_message_bytes. Returns owned (ga_channel_destroy). */
ga_status ga_channel_create(const char *target, size_t max_message_bytes, ga_channel **out);

/* How a channel authenticates, and how soon it reconnects. Paths and strings are borrowed for
 * the create call only. */
typedef struct ga_channel_security {
    const char *ca_file;       /* PEM roots the server's certificate must chain to; NULL/"" = plaintext */
    const char *cert_file;     /* client certificate chain (PEM) for mutual TLS; NULL = none */
    const char *key_file;      /* its private key (PEM); with cert_file */
    const char *target_name;   /* name checked against the server's certificate instead of the
                                  target's host; NULL = the host */
    const char *authorization; /* value of the "authorization" metadata sent with every call
                                  ("Bearer <token>"; tests send malformed ones); NULL = none */
    uint32_t reconnect_max_ms; /* longest wait between two connection attempts after the server
                                  went away; 0 = gRPC's (120 s, which would leave a restarted
                                  server unused for up to two minutes) */
} ga_channel_security;

/* ga_channel_create with TLS (ca_file set) and/or an authorization value. The PEM files are read
 * and checked here (ga_pem.h). Errors, with a message in why[0..cap): GA_E_IO (a file cannot be
 * read), GA_E_CONFIG (not PEM of its kind; a key that is not the certificate's; cert_file
 * without key_file or either without ca_file; an authorization value with a byte outside
 * printable ASCII), GA_E_INVAL, GA_E_NOMEM. */
ga_status ga_channel_create_secure(const char *target, size_t max_message_bytes, const ga_channel_security *sec,
                                   ga_channel **out, char *why, size_t cap);
void ga_channel_destroy(ga_channel *ch); /* NULL is a no-op; after every stream is destroyed */

/* A unary call. On GA_OK *resp is owned (protobuf_c_message_free_unpacked with
 * ga_wire_allocator). On error msg[0..cap) gets the server's or the transport's message. */
ga_status ga_call_unary(ga_channel *ch, ga_method_id m, const ProtobufCMessage *req, uint32_t timeout_ms,
                        ProtobufCMessage **resp, char *msg, size_t cap);

/* Opens a call of method m (any kind) with a deadline of timeout_ms from now. */
ga_status ga_stream_open(ga_channel *ch, ga_method_id m, uint32_t timeout_ms, ga_stream **out);
/* Sends one message; when payload != NULL its len bytes are appended as the payload field
 * (GA_WIRE_PAYLOAD_FIELD) without a copy: payload is borrowed until ga_stream_destroy returns.
 * Returns GA_E_TRANSPORT (or the final status, once known) when the call has already failed. */
ga_status ga_stream_send(ga_stream *s, const ProtobufCMessage *msg, const void *payload, size_t len);
/* Sends len raw bytes as one message (tests: malformed input). */
ga_status ga_stream_send_raw(ga_stream *s, const void *bytes, size_t len);
/* Half-closes the sending side (server streams: after the one request). */
ga_status ga_stream_close_send(ga_stream *s);
/* Receives the next message into *msg (owned, as above). At the end of the stream *msg = NULL
 * and the call's final status is returned (GA_OK for a clean end), with its message in
 * why[0..cap). */
ga_status ga_stream_recv(ga_stream *s, const ProtobufCMessageDescriptor *desc, ProtobufCMessage **msg,
                         char *why, size_t cap);
/* Cancels the call (the server sees a failed stream). */
void ga_stream_cancel(ga_stream *s);
/* Frees the stream, waiting until gRPC holds no borrowed payload. NULL is a no-op. */
void ga_stream_destroy(ga_stream *s);

#endif
