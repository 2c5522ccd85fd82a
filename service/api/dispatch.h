/* The transport's handlers (rpc.h's ga_rpc_handlers) for gradagg: requests and finished
 * streams are posted to the loop, where the core or health takes them; stream chunks are
 * assembled into bundles on the completion-queue thread that read them (bundle.h), which needs
 * no loop state. Nothing here touches core or health state off the loop thread. */
#ifndef GA_DISPATCH_H
#define GA_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "core/core.h"
#include "health.h"
#include "stream_caps.h"
#include "transport/transport.h"

typedef struct ga_dispatch ga_dispatch;

/* Borrows loop, core and health (all must outlive the transport that uses the handlers).
 * max_stream_bytes bounds the payload of one Push or InitTensors stream. Returns owned. core
 * NULL (tests that only assemble streams): no budget and no first-chunk check.
 *
 * Push and InitTensors streams, as they arrive: the first chunk is refused (GA_E_BUSY) when
 * its client host (the peer address without its port; not a trusted one), its job or, with
 * tokens on, its token has as many streams open as `limits` allow (stream_caps.h; copied, its
 * host set borrowed); every chunk's bytes are taken from the core's memory budget before it is kept (budget.h;
 * GA_E_BUSY when the server is full); and the first chunk is checked on the loop against the
 * job and its members (ga_core_stream_check), which ends the stream at once when it fails. */
ga_status ga_dispatch_create(ga_loop *loop, ga_core *core, ga_health *health, size_t max_stream_bytes,
                             const ga_stream_limits *limits, ga_dispatch **out);
/* Every call that names a job (Join, Leave, InitTensors, Push, Pull, Status) must then carry
 * that job's bearer token (auth.h), checked here on the completion-queue thread before anything
 * reaches the loop (streams: at their first chunk; later chunks must name the same job). A
 * refused call is finished with GA_E_UNAUTHENTICATED or GA_E_PERMISSION_DENIED and changes
 * nothing. Health needs none. auth is borrowed; NULL = no tokens. Called again while the
 * transport runs (a reload), the calls checked from then on use the new table, and the old one
 * must stay alive until the transport stopped (a check may still be reading it). Any thread. */
void ga_dispatch_set_auth(ga_dispatch *d, const ga_auth *auth);
/* A node relay's dispatch (relay.h): every request's global rank becomes its job's local one
 * (ga_core_relay_map) before the core's handler gets it; a refused one is finished with the
 * status and message. On the loop thread, before the transport starts. */
void ga_dispatch_set_relay(ga_dispatch *d);
/* This server's place in its shard set, which ShardInfo answers (docs/protocol.md, "Shard
 * discovery"): index in [0, count), the address clients reach it at (copied; at most
 * GA_DISPATCH_ADDRESS_MAX - 1 bytes). count 0 (the default): in no set. On the loop thread, before
 * the loop runs the calls the transport posts (ShardInfo is answered on the loop). */
#define GA_DISPATCH_ADDRESS_MAX 256
void ga_dispatch_set_shard(ga_dispatch *d, uint32_t index, uint32_t count, const char *address);
/* The handler table to give ga_rpc_server_start; valid while d lives. */
const ga_rpc_handlers *ga_dispatch_handlers(const ga_dispatch *d);
/* After the transport that used it is destroyed. NULL is a no-op. */
void ga_dispatch_destroy(ga_dispatch *d);

#endif
