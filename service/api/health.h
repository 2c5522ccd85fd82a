/* grpc.health.v1 Check and Watch: the serving status of each known service name ("" for the
 * whole server, "gradagg.v1.Aggregator"), and the open Watch calls that follow it.
 * Loop thread only, like all call-owning state (docs/design.md, "Threads"). */
#ifndef GA_HEALTH_H
#define GA_HEALTH_H

#include <stdbool.h>

#include "ga_methods.h"
#include "ga_status.h"
#include "transport/transport.h"

typedef Grpc__Health__V1__HealthCheckResponse__ServingStatus ga_serving;
#define GA_SERVING GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
#define GA_NOT_SERVING GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
#define GA_SERVICE_UNKNOWN GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN


typedef struct ga_health ga_health;

/* Every known service starts NOT_SERVING. Returns owned (ga_health_destroy). */
ga_status ga_health_create(ga_health **out);
/* Sets one known service's status (unknown names are ignored) and tells its watchers. */
void ga_health_set(ga_health *h, const char *service, ga_serving st);
/* Sets every known service's status (drain: NOT_SERVING). */
void ga_health_set_all(ga_health *h, ga_serving st);

/* Check: finishes the call with the service's status, or GA_E_UNKNOWN_SERVICE. Takes req. */
void ga_health_check(ga_health *h, ga_call *call, Grpc__Health__V1__HealthCheckRequest *req);
/* Watch: sends the current status at once (SERVICE_UNKNOWN for an unknown name, and the call
 * stays open), then every change, until cancelled or closed. Takes req. */
void ga_health_watch(ga_health *h, ga_call *call, Grpc__Health__V1__HealthCheckRequest *req);
/* The client of `call` has gone: if it is a watch, finishes it and returns true; otherwise
 * false (not a health call, or already finished). */
bool ga_health_cancel(ga_health *h, ga_call *call);
/* Finishes every open watch with `st` (GA_E_DRAINING at shutdown: clients retry elsewhere); a
 * later Watch gets the current status and is finished at once the same way. */
void ga_health_close(ga_health *h, ga_status st);
/* Open watches, for the drain log and tests. */
unsigned ga_health_watches(const ga_health *h);
/* Finishes what is still open (as ga_health_close) and frees. NULL is a no-op. */
void ga_health_destroy(ga_health *h);

#endif
