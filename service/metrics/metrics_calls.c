/* The counters completion-queue threads bump as calls finish (metrics.h): fixed tables of C11
 * atomics indexed by method x gRPC code and by ga_status row, written at scrape time. */
#include <ctype.h>
#include <grpc/status.h>
#include <stdatomic.h>
#include <string.h>

#include "ga_wire.h"
#include "metrics.h"

#define CODES 17 /* GRPC_STATUS_OK .. GRPC_STATUS_UNAUTHENTICATED */

static const char *const code_names[CODES] = {
    "OK",        "CANCELLED",          "UNKNOWN",   "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
    "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
};

/* One row per ga_status, in table order: a status added to GA_STATUS_MAP is counted too. */
#define ROW_VALUE(name, value, msg) value,
static const int status_values[] = {GA_STATUS_MAP(ROW_VALUE)};
#undef ROW_VALUE
#define STATUSES (sizeof status_values / sizeof status_values[0])

static _Atomic uint64_t calls[GA_METHODS + 1][CODES];
static _Atomic uint64_t refused[STATUSES];
static _Atomic uint64_t broken[GA_METHODS + 1];

static size_t status_row(ga_status st)
{
    for (size_t i = 0; i < STATUSES; i++)
        if (status_values[i] == (int)st) return i;
    return STATUSES;
}

void ga_metrics_count_call(int method, ga_status st)
{
    size_t m = method >= 0 && method < GA_METHODS ? (size_t)method : GA_METHODS;
    unsigned code = (unsigned)ga_wire_grpc_code(st);
    if (code >= CODES) code = GRPC_STATUS_UNKNOWN;
    atomic_fetch_add_explicit(&calls[m][code], 1, memory_order_relaxed);
    if (st == GA_OK) return;
    size_t row = status_row(st);
    if (row < STATUSES) atomic_fetch_add_explicit(&refused[row], 1, memory_order_relaxed);
}

void ga_metrics_count_broken(int method)
{
    size_t m = method >= 0 && method < GA_METHODS ? (size_t)method : GA_METHODS;
    atomic_fetch_add_explicit(&broken[m], 1, memory_order_relaxed);
}

const char *ga_metrics_reason(ga_status st, char *buf, size_t cap)
{
    const char *name = ga_status_name(st);
    if (strncmp(name, "GA_", 3) == 0) name += 3;
    if (strncmp(name, "E_", 2) == 0) name += 2;
    size_t i = 0;
    for (; name[i] && i + 1 < cap; i++) buf[i] = (char)tolower((unsigned char)name[i]);
    if (cap) buf[i] = '\0';
    return buf;
}

void ga_metrics_write_calls(ga_metrics_text *t)
{
    ga_metrics_family(t, "gradagg_rpcs_total", "counter", "Finished RPCs by method and gRPC status code.");
    for (size_t m = 0; m <= GA_METHODS; m++) {
        for (size_t c = 0; c < CODES; c++) {
            uint64_t v = atomic_load_explicit(&calls[m][c], memory_order_relaxed);
            if (!v) continue;
            ga_label l[2] = {{"method", m < GA_METHODS ? ga_methods[m].name : "unknown"}, {"code", code_names[c]}};
            ga_metrics_u64(t, "gradagg_rpcs_total", l, 2, v);
        }
    }
    ga_metrics_family(t, "gradagg_rejected_requests_total", "counter",
                      "Requests refused, by reason (the gradagg status, lower case, without E_).");
    for (size_t i = 0; i < STATUSES; i++) {
        uint64_t v = atomic_load_explicit(&refused[i], memory_order_relaxed);
        if (!v) continue;
        char reason[64];
        ga_label l = {"reason", ga_metrics_reason((ga_status)status_values[i], reason, sizeof reason)};
        ga_metrics_u64(t, "gradagg_rejected_requests_total", &l, 1, v);
    }
}

void ga_metrics_write_broken(ga_metrics_text *t)
{
    ga_metrics_family(t, "gradagg_broken_streams_total", "counter",
                      "Client streams that broke before their end (client gone, cancelled or timed out): "
                      "discarded, nothing committed.");
    for (size_t m = 0; m <= GA_METHODS; m++) {
        uint64_t v = atomic_load_explicit(&broken[m], memory_order_relaxed);
        if (!v) continue;
        ga_label l = {"method", m < GA_METHODS ? ga_methods[m].name : "unknown"};
        ga_metrics_u64(t, "gradagg_broken_streams_total", &l, 1, v);
    }
}
