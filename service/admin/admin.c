/* The admin HTTP server (admin.h): a libuv listener, one http_parser per connection, and the
 * three routes. Everything runs on the loop thread; a scrape reads the core's state directly
 * through the collect callback. */
#include "admin.h"

#include <arpa/inet.h>
#include <http_parser.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "ga_alloc.h"

#define READ_BUF 4096
#define HEAD_CAP 512 /* status line and headers of an answer */

typedef struct conn conn;

struct ga_admin {
    uv_loop_t *loop;
    uv_tcp_t listener;
    ga_admin_options opt;
    http_parser_settings settings;
    bool ready;
    char reason[128];
    bool closing, listener_closed;
    conn *conns;   /* every connection until its handles' close callbacks ran */
    size_t nconns;
    size_t open;   /* of those, the ones not closing: what the limit counts */
    uint64_t refused_logged_ms; /* uv_now of the last "too many connections" line */
};

struct conn {
    ga_admin *a;
    conn *prev, *next;
    char ip[48];              /* the peer's address without its port: what the per-client cap counts */
    uint64_t waiting_since;   /* uv_now at accept or at the last answer: when its next request began to be due */
    uv_tcp_t tcp;
    uv_timer_t timer;   /* the request deadline */
    int open_handles;   /* tcp and timer, until their close callbacks ran */
    http_parser parser;
    size_t url_len, header_bytes, body_bytes;
    int refuse;         /* 413, 414 or 431, found by a parser callback */
    bool keep_alive;    /* the request in hand allows another after it */
    bool done;          /* the last answer is queued: read nothing more, close once it is written */
    unsigned writes;    /* writes in flight */
    size_t unsent;      /* their bytes */
    char in[READ_BUF];
    char url[];         /* max_url_bytes + 1 */
};

typedef struct answer {
    uv_write_t req;
    conn *c;
    size_t bytes;
    char *owned; /* a body to free once written (a scrape), or NULL */
    char head[HEAD_CAP];
} answer;

/* ---- lifetime ---- */

static void maybe_free(ga_admin *a)
{
    if (a->closing && a->listener_closed && a->nconns == 0) ga_free(a);
}

static void conn_closed(uv_handle_t *h)
{
    conn *c = h->data;
    if (--c->open_handles > 0) return;
    ga_admin *a = c->a;
    if (c->prev) c->prev->next = c->next;
    else a->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    a->nconns--;
    ga_free(c);
    maybe_free(a);
}

/* Pending writes are cancelled (their callbacks run before the close callbacks). */
static void conn_close(conn *c)
{
    if (uv_is_closing((uv_handle_t *)&c->tcp)) return;
    c->done = true;
    c->a->open--; /* its slot is free now, before the close callbacks */
    uv_close((uv_handle_t *)&c->tcp, conn_closed);
    uv_close((uv_handle_t *)&c->timer, conn_closed);
}

/* No more requests on this connection: it closes once its answers are written. */
static void conn_finish(conn *c)
{
    c->done = true;
    uv_read_stop((uv_stream_t *)&c->tcp);
    if (c->writes == 0) conn_close(c);
}

static void on_timeout(uv_timer_t *t)
{
    conn_close(t->data);
}

/* ---- answers ---- */

static const char *reason_phrase(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Error";
    }
}

static void on_written(uv_write_t *req, int status)
{
    answer *w = (answer *)req;
    conn *c = w->c;
    c->writes--;
    c->unsent -= w->bytes;
    ga_free(w->owned);
    ga_free(w);
    if (status < 0 || (c->done && c->writes == 0)) conn_close(c);
}

/* Queues one answer. body is copied unless `owned` (then it is taken, and freed even on
 * failure). HEAD answers carry the body's Content-Length and no body. The connection is closed
 * instead when memory is short or the client does not read its answers. */
static void send_answer(conn *c, int status, const char *extra, const char *type, const char *body, size_t len,
                        char *owned, bool head_only, bool close)
{
    size_t copy = owned || head_only ? 0 : len;
    answer *w = ga_malloc(sizeof *w + copy);
    if (!w) goto fail;
    int n = snprintf(w->head, HEAD_CAP,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n%s%s\r\n",
                     status, reason_phrase(status), type, len, extra ? extra : "", close ? "Connection: close\r\n" : "");
    if (n < 0 || n >= HEAD_CAP) goto fail_w;
    char *copied = (char *)(w + 1);
    if (copy) memcpy(copied, body, copy);
    uv_buf_t bufs[2] = {uv_buf_init(w->head, (unsigned)n), uv_buf_init(owned ? owned : copied, (unsigned)len)};
    unsigned nbufs = head_only || len == 0 ? 1 : 2;
    w->c = c;
    w->bytes = (size_t)n + (nbufs == 2 ? len : 0);
    w->owned = owned;
    if (c->unsent + w->bytes > c->a->opt.max_unsent_bytes) goto fail_w;
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, bufs, nbufs, on_written) != 0) goto fail_w;
    c->writes++;
    c->unsent += w->bytes;
    uv_timer_start(&c->timer, on_timeout, c->a->opt.request_timeout_ms, 0);
    c->waiting_since = uv_now(c->a->loop);
    if (close) conn_finish(c);
    return;
fail_w:
    ga_free(w);
fail:
    ga_free(owned);
    conn_close(c);
}

static void send_text(conn *c, int status, const char *text, bool head_only, bool close)
{
    send_answer(c, status, NULL, "text/plain; charset=utf-8", text, strlen(text), NULL, head_only, close);
}

static void send_metrics(conn *c, bool head_only, bool close)
{
    ga_admin *a = c->a;
    ga_metrics_text t = GA_METRICS_TEXT_INIT;
    ga_metrics_family(&t, "gradagg_ready", "gauge", "1 when /readyz answers 200 (restored, not draining).");
    ga_metrics_u64(&t, "gradagg_ready", NULL, 0, a->ready);
    if (a->opt.collect) a->opt.collect(a->opt.collect_arg, &t);
    if (t.failed) {
        ga_metrics_text_free(&t);
        send_text(c, 500, "out of memory writing the metrics\n", head_only, close);
        return;
    }
    send_answer(c, 200, NULL, "text/plain; version=0.0.4; charset=utf-8", t.data, t.len, t.data, head_only,
                       close);
}

typedef enum route { R_NONE, R_METRICS, R_HEALTHZ, R_READYZ } route;

static route find_route(const char *path, size_t len)
{
    static const struct { const char *path; route r; } routes[] = {
        {"/metrics", R_METRICS}, {"/healthz", R_HEALTHZ}, {"/readyz", R_READYZ}};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strlen(routes[i].path) == len && memcmp(routes[i].path, path, len) == 0) return routes[i].r;
    return R_NONE;
}

/* A complete request: route it (the query string is ignored). */
static void answer_request(conn *c)
{
    ga_admin *a = c->a;
    bool close = !c->keep_alive;
    struct http_parser_url u;
    http_parser_url_init(&u);
    if (http_parser_parse_url(c->url, c->url_len, 0, &u) != 0 || !(u.field_set & (1u << UF_PATH))) {
        send_text(c, 400, "bad request: unparsable URL\n", false, true);
        return;
    }
    route r = find_route(c->url + u.field_data[UF_PATH].off, u.field_data[UF_PATH].len);
    bool head = c->parser.method == HTTP_HEAD;
    if (r == R_NONE) {
        send_text(c, 404, "not found: try /metrics, /healthz or /readyz\n", head, close);
    } else if (c->parser.method != HTTP_GET && !head) {
        const char *msg = "method not allowed: GET or HEAD\n";
        send_answer(c, 405, "Allow: GET, HEAD\r\n", "text/plain; charset=utf-8", msg, strlen(msg), NULL, false, close);
    } else if (r == R_METRICS) {
        send_metrics(c, head, close);
    } else if (r == R_HEALTHZ) {
        send_text(c, 200, "ok\n", head, close);
    } else if (a->ready) {
        char body[160];
        snprintf(body, sizeof body, "%s\n", a->reason);
        send_text(c, 200, body, head, close);
    } else {
        char body[160];
        snprintf(body, sizeof body, "not ready: %s\n", a->reason);
        send_text(c, 503, body, head, close);
    }
}

/* ---- parser callbacks (a nonzero return stops the parser with an error) ---- */

static int on_message_begin(http_parser *p)
{
    conn *c = p->data;
    c->url_len = c->header_bytes = c->body_bytes = 0;
    c->refuse = 0;
    return 0;
}

static int count_header(conn *c, size_t len)
{
    c->header_bytes += len;
    if (c->header_bytes <= c->a->opt.max_header_bytes) return 0;
    c->refuse = 431;
    return -1;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
    conn *c = p->data;
    if (len > c->a->opt.max_url_bytes - c->url_len) {
        c->refuse = 414;
        return -1;
    }
    memcpy(c->url + c->url_len, at, len);
    c->url_len += len;
    return count_header(c, len);
}

static int on_header_part(http_parser *p, const char *at, size_t len)
{
    (void)at;
    return count_header(p->data, len);
}

static int on_headers_complete(http_parser *p)
{
    conn *c = p->data;
    c->keep_alive = http_should_keep_alive(p) != 0;
    if ((p->flags & F_CONTENTLENGTH) && p->content_length > c->a->opt.max_body_bytes) {
        c->refuse = 413;
        return -1;
    }
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
    (void)at;
    conn *c = p->data;
    c->body_bytes += len;
    if (c->body_bytes <= c->a->opt.max_body_bytes) return 0;
    c->refuse = 413;
    return -1;
}

static int on_message_complete(http_parser *p)
{
    conn *c = p->data;
    answer_request(c);
    /* The last answer of the connection: pausing stops http_parser_execute after this message. */
    if (c->done) http_parser_pause(p, 1);
    return 0;
}

/* ---- reading ---- */

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    (void)hint;
    conn *c = h->data;
    *buf = uv_buf_init(c->in, sizeof c->in);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    conn *c = s->data;
    if (nread == UV_EOF) { /* the client sent all it will: answer what it asked, then close */
        conn_finish(c);
        return;
    }
    if (nread < 0) {
        conn_close(c);
        return;
    }
    if (nread == 0 || c->done) return;
    http_parser_execute(&c->parser, &c->a->settings, buf->base, (size_t)nread);
    if (c->done) return; /* answered and closing */
    enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
    if (e != HPE_OK) {
        int status = c->refuse ? c->refuse : e == HPE_HEADER_OVERFLOW ? 431 : 400;
        char body[160];
        snprintf(body, sizeof body, "%s: %s\n", reason_phrase(status),
                 c->refuse ? "limit exceeded" : http_errno_description(e));
        send_text(c, status, body, false, true);
        return;
    }
    /* An Upgrade request was answered like any other; what follows it is not HTTP/1.1. */
    if (c->parser.upgrade) conn_finish(c);
}

static void free_handle(uv_handle_t *h) { ga_free(h); }

/* A connection waiting for its next request (nothing being answered, not closing): one that
 * may be closed to make room. */
static bool waiting(const conn *c)
{
    return !c->done && c->writes == 0 && !uv_is_closing((const uv_handle_t *)&c->tcp);
}

static size_t open_from(const ga_admin *a, const char *ip)
{
    size_t n = 0;
    for (const conn *c = a->conns; c; c = c->next)
        if (!uv_is_closing((const uv_handle_t *)&c->tcp) && strcmp(c->ip, ip) == 0) n++;
    return n;
}

/* The client with the most connections open (ties: the first found). */
static const char *busiest(const ga_admin *a)
{
    const char *ip = NULL;
    size_t most = 0;
    for (const conn *c = a->conns; c; c = c->next) {
        if (uv_is_closing((const uv_handle_t *)&c->tcp)) continue;
        size_t n = open_from(a, c->ip);
        if (n > most) most = n, ip = c->ip;
    }
    return ip;
}

/* Of ip's connections other than `fresh`, the one that has waited longest for its request. */
static conn *oldest_waiting(ga_admin *a, const char *ip, const conn *fresh)
{
    conn *old = NULL;
    for (conn *c = a->conns; c; c = c->next)
        if (c != fresh && waiting(c) && strcmp(c->ip, ip) == 0 && (!old || c->waiting_since < old->waiting_since))
            old = c;
    return old;
}

static void peer_ip(conn *c)
{
    struct sockaddr_storage ss;
    int len = sizeof ss;
    snprintf(c->ip, sizeof c->ip, "?");
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) != 0) return;
    if (ss.ss_family == AF_INET) uv_ip4_name((struct sockaddr_in *)&ss, c->ip, sizeof c->ip);
    else if (ss.ss_family == AF_INET6) uv_ip6_name((struct sockaddr_in6 *)&ss, c->ip, sizeof c->ip);
}

/* Over a limit (the client's own, or all connections): the connection that has waited longest
 * for its request, of this client or else of the client holding the most, makes room, so a new
 * probe is always served however many slow clients hold connections open. Without one to close,
 * the new connection is closed instead. One log line a second at most. */
static void make_room(ga_admin *a, conn *fresh)
{
    bool own = open_from(a, fresh->ip) > a->opt.max_connections_per_client;
    if (!own && a->open <= a->opt.max_connections) return;
    const char *who = own ? fresh->ip : busiest(a); /* never NULL: fresh is open */
    conn *victim = oldest_waiting(a, who, fresh);
    if (uv_now(a->loop) - a->refused_logged_ms >= 1000) {
        a->refused_logged_ms = uv_now(a->loop);
        ga_log(GA_LOG_WARN, "admin: %zu connections open, %zu from %s (limits %u, %u per client): closing %s", a->open,
               open_from(a, who), who, a->opt.max_connections, a->opt.max_connections_per_client,
               victim ? "its connection that waited longest for a request" : "the new one");
    }
    conn_close(victim ? victim : fresh);
}

static void on_connection(uv_stream_t *server, int status)
{
    ga_admin *a = server->data;
    if (status < 0) {
        ga_log(GA_LOG_WARN, "admin: accept: %s", uv_strerror(status));
        return;
    }
    conn *c = ga_calloc(1, sizeof *c + a->opt.max_url_bytes + 1);
    if (!c) {
        /* Accepted and closed at once: the backlog must not fill with what will never be read. */
        uv_tcp_t *t = ga_malloc(sizeof *t);
        if (!t) return;
        uv_tcp_init(a->loop, t);
        (void)uv_accept(server, (uv_stream_t *)t);
        uv_close((uv_handle_t *)t, free_handle);
        return;
    }
    c->a = a;
    uv_tcp_init(a->loop, &c->tcp);
    uv_timer_init(a->loop, &c->timer);
    c->tcp.data = c->timer.data = c;
    c->open_handles = 2;
    c->next = a->conns;
    if (a->conns) a->conns->prev = c;
    a->conns = c;
    a->nconns++;
    a->open++;
    c->waiting_since = uv_now(a->loop);
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
        conn_close(c);
        return;
    }
    peer_ip(c);
    make_room(a, c);
    if (uv_is_closing((uv_handle_t *)&c->tcp)) return;
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
        conn_close(c);
        return;
    }
    uv_timer_start(&c->timer, on_timeout, a->opt.request_timeout_ms, 0);
}

/* ---- start / close ---- */

/* host:port, [v6]:port, or name:port (resolved here, once, at start). */
static ga_status resolve(uv_loop_t *loop, const char *listen, struct sockaddr_storage *ss, char *why, size_t cap)
{
    const char *colon = listen ? strrchr(listen, ':') : NULL;
    char *end = NULL;
    unsigned long port = colon ? strtoul(colon + 1, &end, 10) : 0;
    if (!colon || colon[1] == '\0' || *end != '\0' || port > 65535)
        return ga_status_fail(GA_E_CONFIG, why, cap, "'%s' is not host:port", listen ? listen : "");
    char host[256];
    size_t hl = (size_t)(colon - listen);
    if (hl >= 2 && listen[0] == '[' && colon[-1] == ']') listen++, hl -= 2;
    if (hl >= sizeof host) return ga_status_fail(GA_E_CONFIG, why, cap, "host of '%s' too long", listen);
    memcpy(host, listen, hl);
    host[hl] = '\0';
    if (hl == 0) snprintf(host, sizeof host, "0.0.0.0");
    memset(ss, 0, sizeof *ss);
    if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)ss) == 0) return GA_OK;
    if (uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)ss) == 0) return GA_OK;
    char service[8];
    snprintf(service, sizeof service, "%lu", port);
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    uv_getaddrinfo_t req;
    int rc = uv_getaddrinfo(loop, &req, NULL, host, service, &hints); /* no callback: synchronous */
    if (rc != 0) return ga_status_fail(GA_E_IO, why, cap, "cannot resolve '%s': %s", host, uv_strerror(rc));
    memcpy(ss, req.addrinfo->ai_addr, req.addrinfo->ai_addrlen);
    uv_freeaddrinfo(req.addrinfo);
    return GA_OK;
}

static void listener_closed(uv_handle_t *h)
{
    ga_admin *a = h->data;
    a->listener_closed = true;
    maybe_free(a);
}

ga_status ga_admin_start(uv_loop_t *loop, const ga_admin_options *opt, ga_admin **out, int *port, char *why,
                         size_t cap)
{
    if (!loop || !opt || !out || !port || opt->version < sizeof(ga_admin_options) || opt->max_connections == 0 ||
        opt->max_connections_per_client == 0 ||
        opt->request_timeout_ms == 0 || opt->max_url_bytes == 0 || opt->max_header_bytes == 0)
        return ga_status_fail(GA_E_CONFIG, why, cap, "invalid admin server options");
    struct sockaddr_storage ss;
    GA_CHECK(resolve(loop, opt->listen, &ss, why, cap));
    ga_admin *a = ga_calloc(1, sizeof *a);
    if (!a) return ga_status_fail(GA_E_NOMEM, why, cap, "out of memory starting the admin server");
    a->loop = loop;
    a->opt = *opt;
    a->opt.listen = NULL; /* borrowed only until here */
    snprintf(a->reason, sizeof a->reason, "starting");
    a->settings = (http_parser_settings){
        .on_message_begin = on_message_begin,
        .on_url = on_url,
        .on_header_field = on_header_part,
        .on_header_value = on_header_part,
        .on_headers_complete = on_headers_complete,
        .on_body = on_body,
        .on_message_complete = on_message_complete,
    };
    uv_tcp_init(loop, &a->listener);
    a->listener.data = a;
    /* libuv may report a bind error only at listen. */
    int rc = uv_tcp_bind(&a->listener, (const struct sockaddr *)&ss, 0);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&a->listener, 128, on_connection);
    struct sockaddr_storage bound;
    int len = sizeof bound;
    if (rc == 0) rc = uv_tcp_getsockname(&a->listener, (struct sockaddr *)&bound, &len);
    if (rc != 0) {
        ga_status_fail(GA_E_IO, why, cap, "cannot listen on %s: %s", opt->listen, uv_strerror(rc));
        ga_admin_close(a);
        return GA_E_IO;
    }
    *port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                        : ntohs(((struct sockaddr_in *)&bound)->sin_port);
    *out = a;
    return GA_OK;
}

void ga_admin_set_ready(ga_admin *a, bool ready, const char *reason)
{
    a->ready = ready;
    snprintf(a->reason, sizeof a->reason, "%s", reason ? reason : "");
}

bool ga_admin_ready(const ga_admin *a)
{
    return a->ready;
}

void ga_admin_close(ga_admin *a)
{
    if (!a || a->closing) return;
    a->closing = true;
    for (conn *c = a->conns; c; c = c->next) conn_close(c);
    uv_close((uv_handle_t *)&a->listener, listener_closed);
}
