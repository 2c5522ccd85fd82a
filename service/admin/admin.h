/* The admin HTTP/1.1 server on the loop thread (docs/design.md, "Threads", "Operations"): GET
 * and HEAD of /metrics (Prometheus text 0.0.4), /healthz (200 "ok" while the loop runs) and
 * /readyz (200 "ready", or 503 with the reason). Requests are parsed by Debian's libhttp-parser.
 * Keep-alive and pipelining are supported; connections are bounded (all, and per client
 * address), each must complete its next request within a deadline, and a new connection past a
 * bound takes the slot of the one that has waited longest for its request: slow or silent
 * clients never hold the loop, and never keep a probe out.
 * Answers: 404 unknown path, 405 other methods, 400 a malformed request, 414 / 431 an oversize
 * URL / header block, 413 an oversize body (those four close the connection).
 *
 * Loop thread only: every function here, and the collect callback.
 *
 * May use: base, metrics; kernels/ (statuses), libuv, libhttp-parser. */
#ifndef GA_ADMIN_H
#define GA_ADMIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "ga_status.h"
#include "metrics/metrics.h"

typedef struct ga_admin ga_admin;

/* Writes the families of a scrape besides gradagg_ready (which the admin server writes). */
typedef void (*ga_admin_collect_fn)(void *arg, ga_metrics_text *t);

typedef struct ga_admin_options {
    uint32_t version;              /* sizeof(ga_admin_options) */
    const char *listen;            /* "127.0.0.1:0", "0.0.0.0:7071", "[::1]:7071", "localhost:7071" */
    ga_admin_collect_fn collect;   /* may be NULL */
    void *collect_arg;
    uint32_t max_connections;      /* open at once; past it, see max_connections_per_client */
    /* Open at once from one client address. A connection past either limit makes room: the
     * connection that has waited longest for its request (of the same client, or else of the
     * client holding the most) is closed, so slow or idle clients cannot starve a probe; when
     * none is waiting (all are being answered), the new connection is closed instead. */
    uint32_t max_connections_per_client;
    uint32_t request_timeout_ms;   /* from accept or the last answer to the end of the next request */
    size_t max_header_bytes;       /* request line and headers: more = 431 */
    size_t max_url_bytes;          /* more = 414 */
    size_t max_body_bytes;         /* more = 413 (a GET has none; small ones are read and ignored) */
    size_t max_unsent_bytes;       /* answers a client has not read yet: more = the connection is closed */
} ga_admin_options;
#define GA_ADMIN_OPTIONS_INIT \
    {sizeof(ga_admin_options), "127.0.0.1:0", NULL, NULL, 64, 16, 10000, 8192, 2048, 4096, 8u << 20}

/* Binds opt->listen on loop and begins accepting; *port = the bound port (the real one for :0).
 * Readiness starts false ("starting"). Borrows loop (must outlive the server), copies the rest.
 * Errors: GA_E_CONFIG (unparsable address), GA_E_IO (cannot resolve or bind; the port is in
 * use), GA_E_NOMEM; the message, naming the address, in why[0..cap). Nothing is left open on
 * error. Returns owned (ga_admin_close). */
ga_status ga_admin_start(uv_loop_t *loop, const ga_admin_options *opt, ga_admin **out, int *port, char *why,
                         size_t cap);
/* What /readyz and gradagg_ready say from now on; reason (copied, cut at 127 bytes) is the body:
 * of the 503 when not ready, of the 200 when ready ("ready", or what an operator should know). */
void ga_admin_set_ready(ga_admin *a, bool ready, const char *reason);
bool ga_admin_ready(const ga_admin *a);
/* Stops accepting and closes every connection (answers not yet written are dropped). The memory
 * is freed by libuv close callbacks: run the loop once more. NULL is a no-op. */
void ga_admin_close(ga_admin *a);

#endif
