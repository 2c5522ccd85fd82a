/* The one table of RPC methods: path, streaming kind and message types, shared by the server
 * and the SDK so no method path is ever retyped. tests/unit/test_methods.c checks every row against
 * the protobuf-c service descriptors and the streaming keywords in the .proto files. */
#ifndef GA_METHODS_H
#define GA_METHODS_H

#include <protobuf-c/protobuf-c.h>

#include "gradagg/v1/gradagg.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ga_method_id {
    GA_METHOD_JOIN = 0,
    GA_METHOD_LEAVE,
    GA_METHOD_INIT,
    GA_METHOD_PUSH,
    GA_METHOD_PULL,
    GA_METHOD_STATUS,
    GA_METHOD_HEARTBEAT,
    GA_METHOD_DELETE_JOB,
    GA_METHOD_LIST_JOBS,
    GA_METHOD_SHARD_INFO,
    GA_METHOD_HEALTH_CHECK,
    GA_METHOD_HEALTH_WATCH,
    GA_METHODS
} ga_method_id;

typedef enum ga_rpc_kind {
    GA_RPC_UNARY = 0,         /* one request, one response */
    GA_RPC_CLIENT_STREAM = 1, /* many requests, one response */
    GA_RPC_SERVER_STREAM = 2, /* one request, many responses */
} ga_rpc_kind;

typedef struct ga_method {
    const char *path;    /* "/gradagg.v1.Aggregator/Push": what gRPC routes on */
    const char *service; /* "gradagg.v1.Aggregator" */
    const char *name;    /* "Push" */
    ga_rpc_kind kind;
    const ProtobufCMessageDescriptor *request;
    const ProtobufCMessageDescriptor *response;
} ga_method;

extern const ga_method ga_methods[GA_METHODS];

/* A gRPC peer string's host: without the last ":port" ("ipv4:10.0.0.7:5123" -> "ipv4:10.0.0.7",
 * "ipv6:[::1]:80" -> "ipv6:[::1]"; one with a single ':' is kept whole). Into host[0..cap);
 * returns host. */
const char *ga_peer_host(const char *peer, char *host, size_t cap);

/* The row whose path is `path` (len bytes, not NUL-terminated), or NULL. */
const ga_method *ga_method_by_path(const char *path, size_t len);

#ifdef __cplusplus
}
#endif
#endif
