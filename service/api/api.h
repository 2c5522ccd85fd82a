/* api/: the gradagg.v1 Aggregator and grpc.health.v1 Health services, as the transport's
 * handlers (docs/protocol.md). On the completion-queue thread that read it, a call is admitted
 * (auth.h: the job's bearer token; stream_caps.h, private: open streams per client host and per
 * job) and a stream's chunks are assembled into a bundle; then it is posted to the loop, where
 * the core (core/core.h) or health (health.h) takes it (dispatch.h). Nothing here touches core
 * or health state off the loop thread.
 * Outside api/, include this header, not its parts.
 * May use: base, bundle, transport, core; proto/, kernels/. */
#ifndef GA_API_H
#define GA_API_H

#include "auth.h"
#include "dispatch.h"
#include "health.h"

#endif
