/* The Prometheus text writer, histograms and the process families (metrics.h). */
#include "metrics.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ga_alloc.h"
#include "ga_text.h"

#ifndef GA_VERSION
#define GA_VERSION "unknown"
#endif

/* ---- buffer ---- */

static bool reserve(ga_metrics_text *t, size_t more)
{
    if (t->failed) return false;
    if (t->len + more + 1 <= t->cap) return true;
    size_t cap = t->cap ? t->cap : 4096;
    while (cap < t->len + more + 1) cap *= 2;
    char *d = ga_malloc(cap);
    if (!d) {
        t->failed = true;
        return false;
    }
    if (t->len) memcpy(d, t->data, t->len);
    ga_free(t->data);
    t->data = d;
    t->cap = cap;
    return true;
}

static void put(ga_metrics_text *t, const char *s, size_t n)
{
    if (!reserve(t, n)) return;
    memcpy(t->data + t->len, s, n);
    t->len += n;
    t->data[t->len] = '\0';
}

static void puts_(ga_metrics_text *t, const char *s) { put(t, s, strlen(s)); }

static void putf(ga_metrics_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(ga_metrics_text *t, const char *fmt, ...)
{
    char buf[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0) put(t, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

void ga_metrics_text_free(ga_metrics_text *t)
{
    ga_free(t->data);
    *t = (ga_metrics_text)GA_METRICS_TEXT_INIT;
}

/* ---- escaping ---- */

/* Label values escape \ " and newline; HELP text escapes \ and newline. Bytes that are not
 * UTF-8 (a job name is whatever a client sent) become U+FFFD, so a scrape always parses. */
static void put_escaped(ga_metrics_text *t, const char *s, bool quote)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    while (n) {
        size_t k = ga_utf8_len(p, n);
        if (k == 0) {
            puts_(t, "\xEF\xBF\xBD");
            k = 1;
        } else if (*p == '\\') {
            puts_(t, "\\\\");
        } else if (*p == '\n') {
            puts_(t, "\\n");
        } else if (*p == '"' && quote) {
            puts_(t, "\\\"");
        } else {
            put(t, (const char *)p, k);
        }
        p += k, n -= k;
    }
}

/* The shortest of %.15g .. %.17g that reads back as v; Prometheus spellings of the specials. */
static void put_double(ga_metrics_text *t, double v)
{
    char buf[40];
    if (isnan(v) || isinf(v)) {
        puts_(t, isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf");
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    puts_(t, buf);
}

/* ---- families and samples ---- */

void ga_metrics_family(ga_metrics_text *t, const char *name, const char *type, const char *help)
{
    puts_(t, "# HELP ");
    puts_(t, name);
    puts_(t, " ");
    put_escaped(t, help, false);
    puts_(t, "\n# TYPE ");
    puts_(t, name);
    puts_(t, " ");
    puts_(t, type);
    puts_(t, "\n");
}

/* name{a="x",b="y"[,le="..."]} with the `le` label of a bucket when le_set. */
static void put_series(ga_metrics_text *t, const char *name, const char *suffix, const ga_label *labels,
                       size_t nlabels, bool le_set, double le)
{
    puts_(t, name);
    if (suffix) puts_(t, suffix);
    if (nlabels == 0 && !le_set) {
        puts_(t, " ");
        return;
    }
    puts_(t, "{");
    for (size_t i = 0; i < nlabels; i++) {
        if (i) puts_(t, ",");
        puts_(t, labels[i].name);
        puts_(t, "=\"");
        put_escaped(t, labels[i].value ? labels[i].value : "", true);
        puts_(t, "\"");
    }
    if (le_set) {
        puts_(t, nlabels ? ",le=\"" : "le=\"");
        put_double(t, le);
        puts_(t, "\"");
    }
    puts_(t, "} ");
}

void ga_metrics_u64(ga_metrics_text *t, const char *name, const ga_label *labels, size_t nlabels, uint64_t v)
{
    put_series(t, name, NULL, labels, nlabels, false, 0);
    putf(t, "%" PRIu64 "\n", v);
}

void ga_metrics_double(ga_metrics_text *t, const char *name, const ga_label *labels, size_t nlabels, double v)
{
    put_series(t, name, NULL, labels, nlabels, false, 0);
    put_double(t, v);
    puts_(t, "\n");
}

/* ---- histograms ---- */

const double ga_metrics_step_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                         0.5,   1,      2.5,   5,    10,    20,   30,  60};
const size_t ga_metrics_step_nbounds = sizeof ga_metrics_step_bounds / sizeof ga_metrics_step_bounds[0];
const double ga_metrics_io_bounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                       0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
const size_t ga_metrics_io_nbounds = sizeof ga_metrics_io_bounds / sizeof ga_metrics_io_bounds[0];
const double ga_metrics_staleness_bounds[] = {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32};
const size_t ga_metrics_staleness_nbounds =
    sizeof ga_metrics_staleness_bounds / sizeof ga_metrics_staleness_bounds[0];

void ga_histogram_init(ga_histogram *h, const double *bounds, size_t nbounds)
{
    memset(h, 0, sizeof *h);
    h->bounds = bounds;
    h->nbounds = nbounds < GA_HISTOGRAM_MAX_BOUNDS ? nbounds : GA_HISTOGRAM_MAX_BOUNDS;
}

void ga_histogram_observe(ga_histogram *h, double v)
{
    size_t i = 0;
    while (i < h->nbounds && v > h->bounds[i]) i++; /* le: a value equal to a bound is inside it */
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

void ga_metrics_histogram(ga_metrics_text *t, const char *name, const ga_label *labels, size_t nlabels,
                          const ga_histogram *h)
{
    uint64_t cum = 0;
    for (size_t i = 0; i <= h->nbounds; i++) {
        cum += h->counts[i];
        put_series(t, name, "_bucket", labels, nlabels, true, i < h->nbounds ? h->bounds[i] : INFINITY);
        putf(t, "%" PRIu64 "\n", cum);
    }
    put_series(t, name, "_sum", labels, nlabels, false, 0);
    put_double(t, h->sum);
    puts_(t, "\n");
    put_series(t, name, "_count", labels, nlabels, false, 0);
    putf(t, "%" PRIu64 "\n", h->count);
}

/* ---- process ---- */

static _Atomic uint64_t start_unix_ms;

static uint64_t unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void ga_metrics_process_started(void)
{
    uint64_t zero = 0;
    atomic_compare_exchange_strong(&start_unix_ms, &zero, unix_ms());
}

void ga_metrics_write_process(ga_metrics_text *t, const char *backend)
{
    ga_metrics_family(t, "gradagg_build_info", "gauge", "Build and backend of this server (always 1).");
    ga_label b[2] = {{"version", GA_VERSION}, {"backend", backend}};
    ga_metrics_u64(t, "gradagg_build_info", b, 2, 1);

    ga_metrics_family(t, "gradagg_memory_bytes", "gauge",
                      "Memory in use through the accounted allocator, by device (host includes pinned).");
    ga_label host = {"device", "host"}, cuda = {"device", "cuda"};
    ga_metrics_u64(t, "gradagg_memory_bytes", &host, 1, ga_mem_in_use(GA_MEM_HOST) + ga_mem_in_use(GA_MEM_PINNED));
    ga_metrics_u64(t, "gradagg_memory_bytes", &cuda, 1, ga_mem_in_use(GA_MEM_DEVICE));
    ga_metrics_family(t, "gradagg_memory_peak_bytes", "gauge",
                      "Most memory in use through the accounted allocator since start, by device (host: the peaks "
                      "of host and pinned memory added).");
    ga_metrics_u64(t, "gradagg_memory_peak_bytes", &host, 1, ga_mem_peak(GA_MEM_HOST) + ga_mem_peak(GA_MEM_PINNED));
    ga_metrics_u64(t, "gradagg_memory_peak_bytes", &cuda, 1, ga_mem_peak(GA_MEM_DEVICE));

    uint64_t start = atomic_load(&start_unix_ms);
    if (start) {
        ga_metrics_family(t, "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.");
        ga_metrics_double(t, "process_start_time_seconds", NULL, 0, (double)start / 1000.0);
    }
}
