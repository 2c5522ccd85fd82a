/* What the server and the SDK share about the wire besides the messages: the ga_status <->
 * gRPC status table, the accounted protobuf-c allocator, and packing/unpacking messages to and
 * from gRPC byte buffers (with a zero-copy path for the large `bytes` field of a chunk).
 * Thread-safe: any thread. */
#ifndef GA_WIRE_H
#define GA_WIRE_H

#include <grpc/byte_buffer.h>
#include <grpc/status.h>
#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ga_codec.h"
#include "ga_status.h"
#include "gradagg/v1/gradagg.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Trailing-metadata key of every error status the server sends: the value is the ga_status
 * name ("E_STEP_CLOSED"), so the SDK recovers the exact status, not only the gRPC code. */
#define GA_WIRE_STATUS_KEY "gradagg-status"

/* Bearer tokens (docs/protocol.md, "Security"): the request metadata key, its scheme, and the
 * longest token. A token is printable ASCII without a space (it goes into an HTTP/2 header). */
#define GA_WIRE_AUTH_KEY "authorization"
#define GA_WIRE_AUTH_SCHEME "Bearer"
#define GA_WIRE_TOKEN_MAX 4096u
/* The longest job name, in bytes (a longer one is refused wherever it arrives). */
#define GA_WIRE_JOB_MAX 255u
static inline bool ga_wire_token_byte(unsigned char ch) { return ch > 0x20 && ch < 0x7f; }
/* The token of an authorization value v[0..len): the scheme in any case (RFC 7235), one or more
 * spaces, then 1 to GA_WIRE_TOKEN_MAX token bytes; *tok points into v. False for anything else. */
bool ga_wire_bearer(const char *v, size_t len, const char **tok, size_t *tlen);

/* The field number of the large `bytes` field of InitChunk, PushChunk and PullChunk. It is the
 * highest field of each, so it may be appended after the other fields. */
#define GA_WIRE_PAYLOAD_FIELD 15u

/* The gRPC status code a ga_status is sent as (one table; GA_OK -> GRPC_STATUS_OK). */
grpc_status_code ga_wire_grpc_code(ga_status st);

/* The ga_status a client reports for a finished call: the status named by the trailing
 * metadata value `name` (len bytes) when it names one, else the generic status for `code`
 * (UNAVAILABLE -> GA_E_UNAVAILABLE, DEADLINE_EXCEEDED -> GA_E_DEADLINE, ...). */
ga_status ga_wire_status_from(grpc_status_code code, const char *name, size_t len);

/* protobuf-c allocator over ga_malloc/ga_free: every unpacked message is accounted. Free
 * unpacked messages with protobuf_c_message_free_unpacked(msg, &ga_wire_allocator). */
extern ProtobufCAllocator ga_wire_allocator;

/* Unpacks a message of type `desc` from a received byte buffer (any number of slices).
 * Returns owned (free as above). GA_E_PROTO when the bytes are not a valid message (field
 * number 0 included), GA_E_NOMEM. Fields the type does not have are ignored (proto3) and
 * dropped: the message comes back without unknown fields. The byte buffer is borrowed. */
ga_status ga_wire_unpack(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb, ProtobufCMessage **out);
/* Before unpacking: the most elements any top-level repeated scalar field of desc holds in bb
 * (packed or not), in *most, and that field's name in *field (NULL when none has any). Unpacking
 * turns each element, however short on the wire (1 byte), into 8 bytes or more, so a server
 * bounds this first. Reads the bytes without copying them; what does not parse counts as far as
 * it went (unpack then refuses it). */
void ga_wire_most_repeated(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb, size_t *most,
                           const char **field);

/* Packs `msg` into a new byte buffer. When payload != NULL, `len` bytes at payload are appended
 * as bytes field GA_WIRE_PAYLOAD_FIELD without a copy (msg's own field 15 must be empty); gRPC
 * calls release(ud) once it no longer needs them, on any thread, possibly before this returns
 * when packing fails. Returns owned (grpc_byte_buffer_destroy), or NULL when out of memory. */
grpc_byte_buffer *ga_wire_pack(const ProtobufCMessage *msg, const void *payload, size_t len,
                               void (*release)(void *), void *ud);

/* Writes a codec and its parameters into the wire message w (initialised here; no allocation). */
void ga_codec_to_wire(ga_codec_id id, const ga_codec_params *p, Gradagg__V1__Codec *w);
/* The parameters a wire codec carries (not checked: ga_codec_params_validate; select is 0, as it
 * never travels). topk_values and topk_indices are cut to 8 bits: check them on w first. */
ga_codec_params ga_codec_params_from_wire(const Gradagg__V1__Codec *w);

#ifdef __cplusplus
}
#endif
#endif
