/* transport/: the gRPC C core server (rpc.h), its completion-queue threads and every call, with
 * TLS (rpc_tls.h, private), and the control loop those threads hand their work to (loop.h).
 * Handlers above it see ga_call handles and unpacked protobuf-c messages, never a gRPC type, and
 * the loop thread owns all job state: nothing else crosses from a queue thread to the loop but
 * ga_loop_post. rpc.c (the server, its threads and shutdown) and rpc_call.c (one call's reads,
 * sends and finish) are one module in two files sharing rpc_internal.h.
 * Outside transport/, include this header, not its parts.
 * May use: base, metrics (per-call counters); proto/, kernels/ (statuses), gRPC, libuv. */
#ifndef GA_TRANSPORT_H
#define GA_TRANSPORT_H

#include "loop.h"
#include "rpc.h"

#endif
