/* An in-memory ga_call for core tests: implements ga_call_send / ga_call_finish / ga_call_refuse /
 * ga_call_hold / ga_call_release / ga_call_peer / ga_call_metadata (service/transport/rpc.h) by recording every message packed to bytes (the zero-copy payload appended as
 * field 15, as the transport sends it; the call takes the blob reference it is given and drops
 * it once copied), the final status and message, and any misuse (a send after the finish, a
 * second finish, a payload range outside its blob). */
#ifndef GA_FAKE_CALL_H
#define GA_FAKE_CALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ga_methods.h"
#include "ga_status.h"
#include "transport/rpc.h"

typedef struct fake_msg {
    uint8_t *bytes;
    size_t len;
} fake_msg;

struct ga_call {
    fake_msg *msgs; /* ga_call_send, in order */
    size_t nmsgs, cap;
    bool finished;
    bool refused; /* finished by ga_call_refuse (a stream ended early) */
    bool cancelled; /* ga_call_cancel after the finish */
    ga_status cancel_status;
    char cancel_message[256];
    ga_status status;
    char message[512];
    uint8_t *resp; /* the finish's response, packed; NULL when none */
    size_t resp_len;
    int misuse; /* sends after the finish, finishes after the first */
    const char *authorization; /* the request's "authorization" metadata (borrowed); NULL = none */
};

ga_call *fake_call_new(void);
void fake_call_free(ga_call *c); /* NULL is a no-op */

/* The response of a finished call unpacked as `desc` (owned: protobuf_c_message_free_unpacked
 * with NULL), or NULL when it had none. */
ProtobufCMessage *fake_call_response(const ga_call *c, const ProtobufCMessageDescriptor *desc);
/* Message i unpacked (owned, as above). */
ProtobufCMessage *fake_call_message(const ga_call *c, size_t i, const ProtobufCMessageDescriptor *desc);

/* A copy of msg owned as the transport hands messages up (ga_wire_allocator). */
ProtobufCMessage *fake_wire_copy(const ProtobufCMessage *msg);

#endif
