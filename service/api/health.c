/* grpc.health.v1 on the loop thread (see health.h): a status per known service and a list of
 * open Watch calls, each remembering the last status it was sent. */
#include "health.h"

#include <string.h>

#include "ga_alloc.h"
#include "ga_wire.h"

static const char *const known_services[] = {"", "gradagg.v1.Aggregator"};
#define KNOWN_SERVICES (sizeof known_services / sizeof known_services[0])

typedef struct watch {
    struct watch *prev, *next;
    ga_call *call;
    int service;     /* index into known_services; -1 = unknown (stays SERVICE_UNKNOWN) */
    ga_serving sent; /* last status sent, so a set to the same value sends nothing */
} watch;

struct ga_health {
    ga_serving status[KNOWN_SERVICES];
    watch *watches; /* doubly linked: a cancel unlinks in O(1) */
    unsigned nwatches;
    bool closed;
    ga_status close_status;
};

static int service_index(const char *name)
{
    for (size_t i = 0; i < KNOWN_SERVICES; i++)
        if (strcmp(name, known_services[i]) == 0) return (int)i;
    return -1;
}

static void free_req(Grpc__Health__V1__HealthCheckRequest *req)
{
    if (req) protobuf_c_message_free_unpacked(&req->base, &ga_wire_allocator);
}

static void send_status(ga_call *call, ga_serving st)
{
    Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    resp.status = st;
    ga_call_send(call, &resp.base, NULL, 0, 0);
}

static void unlink_watch(ga_health *h, watch *w)
{
    if (w->prev) w->prev->next = w->next;
    else h->watches = w->next;
    if (w->next) w->next->prev = w->prev;
    h->nwatches--;
}

ga_status ga_health_create(ga_health **out)
{
    ga_health *h = ga_calloc(1, sizeof *h);
    if (!h) return GA_E_NOMEM;
    for (size_t i = 0; i < KNOWN_SERVICES; i++) h->status[i] = GA_NOT_SERVING;
    *out = h;
    return GA_OK;
}

static void notify(ga_health *h, int service)
{
    for (watch *w = h->watches; w; w = w->next) {
        if (w->service != service || w->sent == h->status[service]) continue;
        w->sent = h->status[service];
        send_status(w->call, w->sent);
    }
}

void ga_health_set(ga_health *h, const char *service, ga_serving st)
{
    int i = service_index(service);
    if (i < 0) return;
    h->status[i] = st;
    notify(h, i);
}

void ga_health_set_all(ga_health *h, ga_serving st)
{
    for (size_t i = 0; i < KNOWN_SERVICES; i++) {
        h->status[i] = st;
        notify(h, (int)i);
    }
}

void ga_health_check(ga_health *h, ga_call *call, Grpc__Health__V1__HealthCheckRequest *req)
{
    const char *name = req && req->service ? req->service : "";
    int i = service_index(name);
    if (i < 0) {
        ga_call_finish(call, NULL, GA_E_UNKNOWN_SERVICE, "unknown service '%s'", name);
    } else {
        Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
        resp.status = h->status[i];
        ga_call_finish(call, &resp.base, GA_OK, NULL);
    }
    free_req(req);
}

void ga_health_watch(ga_health *h, ga_call *call, Grpc__Health__V1__HealthCheckRequest *req)
{
    int i = service_index(req && req->service ? req->service : "");
    free_req(req);
    ga_serving now = i < 0 ? GA_SERVICE_UNKNOWN : h->status[i];
    send_status(call, now);
    if (h->closed) {
        ga_call_finish(call, NULL, h->close_status, NULL);
        return;
    }
    watch *w = ga_malloc(sizeof *w);
    if (!w) {
        ga_call_finish(call, NULL, GA_E_NOMEM, NULL);
        return;
    }
    w->prev = NULL;
    w->next = h->watches;
    if (h->watches) h->watches->prev = w;
    h->watches = w;
    h->nwatches++;
    w->call = call;
    w->service = i;
    w->sent = now;
}

bool ga_health_cancel(ga_health *h, ga_call *call)
{
    for (watch *w = h->watches; w; w = w->next) {
        if (w->call != call) continue;
        unlink_watch(h, w);
        ga_call_finish(call, NULL, GA_E_CANCELLED, NULL);
        ga_free(w);
        return true;
    }
    return false;
}

void ga_health_close(ga_health *h, ga_status st)
{
    h->closed = true;
    h->close_status = st;
    while (h->watches) {
        watch *w = h->watches;
        unlink_watch(h, w);
        ga_call_finish(w->call, NULL, st, NULL);
        ga_free(w);
    }
}

unsigned ga_health_watches(const ga_health *h)
{
    return h->nwatches;
}

void ga_health_destroy(ga_health *h)
{
    if (!h) return;
    ga_health_close(h, GA_E_DRAINING);
    ga_free(h);
}
