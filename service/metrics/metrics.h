/* Metrics: the Prometheus text exposition writer (format 0.0.4), fixed-bucket histograms, the
 * process-wide counters that completion-queue threads bump (RPCs by method and code, refused
 * requests by status), and the process families. Names and labels: docs/metrics.md.
 *
 * Most values are not kept here: the admin server scrapes on the loop thread and reads them
 * straight from the core's state (ga_core_metrics in core.h). Only what happens off the loop
 * lives here, in C11 atomics, so no lock is taken on a call's path.
 *
 * metrics/ is this header's two files: metrics.c (the writer, histograms, process families) and
 * metrics_calls.c (the per-call counters).
 * May use: proto/ (method and status tables), kernels/ (statuses), gRPC (status codes). */
#ifndef GA_METRICS_H
#define GA_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ga_methods.h"
#include "ga_status.h"

/* ---- the text writer (one thread at a time) ---- */

/* A growing text buffer (ga_malloc'd). Once an allocation fails, `failed` is set and every
 * later write is dropped: the caller answers 500 instead of a partial scrape. */
typedef struct ga_metrics_text {
    char *data; /* NUL-terminated while len > 0 */
    size_t len, cap;
    bool failed;
} ga_metrics_text;
#define GA_METRICS_TEXT_INIT {NULL, 0, 0, false}

typedef struct ga_label {
    const char *name;  /* a valid label name (not checked) */
    const char *value; /* any bytes: escaped (\\ \" \n), invalid UTF-8 replaced by U+FFFD */
} ga_label;

/* "# HELP name help" and "# TYPE name type" (type: "counter", "gauge", "histogram"). Every
 * family is written once, with all its samples right after it. Borrows everything. */
void ga_metrics_family(ga_metrics_text *t, const char *name, const char *type, const char *help);
/* One sample line: name{labels} value. nlabels may be 0 (labels NULL). */
void ga_metrics_u64(ga_metrics_text *t, const char *name, const ga_label *labels, size_t nlabels, uint64_t v);
void ga_metrics_double(ga_metrics_text *t, const char *name, const ga_label *labels, size_t nlabels, double v);
/* Frees the buffer; the struct may be reused after GA_METRICS_TEXT_INIT. */
void ga_metrics_text_free(ga_metrics_text *t);

/* ---- histograms ---- */

#define GA_HISTOGRAM_MAX_BOUNDS 20

/* Upper bounds, ascending, borrowed (static tables); counts[i] = observations in
 * (bounds[i-1], bounds[i]], counts[nbounds] = above the last bound. Plain data: the owner's
 * thread only. */
typedef struct ga_histogram {
    const double *bounds;
    size_t nbounds; /* <= GA_HISTOGRAM_MAX_BOUNDS */
    uint64_t counts[GA_HISTOGRAM_MAX_BOUNDS + 1];
    double sum;
    uint64_t count;
} ga_histogram;

/* Step latency: 1 ms .. 60 s. */
extern const double ga_metrics_step_bounds[];
extern const size_t ga_metrics_step_nbounds;
/* Disk writes: 100 us .. 10 s. */
extern const double ga_metrics_io_bounds[];
extern const size_t ga_metrics_io_nbounds;
/* Staleness of applied pushes, in versions (0 to GA_JOB_MAX_STALENESS). */
extern const double ga_metrics_staleness_bounds[];
extern const size_t ga_metrics_staleness_nbounds;

void ga_histogram_init(ga_histogram *h, const double *bounds, size_t nbounds);
void ga_histogram_observe(ga_histogram *h, double v);
/* The samples of one histogram series: name_bucket{labels,le} (cumulative, le="+Inf" last),
 * name_sum{labels}, name_count{labels}. The family line is the caller's (type "histogram"). */
void ga_metrics_histogram(ga_metrics_text *t, const char *name, const ga_label *labels, size_t nlabels,
                          const ga_histogram *h);

/* ---- process-wide counters (any thread) ---- */

/* A call finished with st (the transport's one finish point, rpc_call.c): counts
 * gradagg_rpcs_total{method, code} and, for an error, gradagg_rejected_requests_total{reason}.
 * method is a ga_method_id, or GA_METHODS for a method the server does not know. */
void ga_metrics_count_call(int method, ga_status st);
/* A client stream (Push, InitTensors) broke before its end (the client was killed, cancelled
 * or timed out, or its connection dropped): what it carried was discarded. Counts
 * gradagg_broken_streams_total{method}. Any thread. */
void ga_metrics_count_broken(int method);
/* Writes both families (series that are still zero are left out). Any thread. */
void ga_metrics_write_calls(ga_metrics_text *t);
/* Writes gradagg_broken_streams_total (series still zero left out). Any thread. */
void ga_metrics_write_broken(ga_metrics_text *t);
/* "step_closed" for GA_E_STEP_CLOSED: ga_status_name without GA_E_, lower case, into
 * buf[0..cap). Returns buf. */
const char *ga_metrics_reason(ga_status st, char *buf, size_t cap);

/* ---- process families ---- */

/* Marks the process start (the first call wins; ga_server_start calls it). Any thread. */
void ga_metrics_process_started(void);
/* gradagg_build_info{version, backend}, gradagg_memory_bytes{device}, and
 * process_start_time_seconds. backend: "cpu" / "cuda". */
void ga_metrics_write_process(ga_metrics_text *t, const char *backend);

#endif
