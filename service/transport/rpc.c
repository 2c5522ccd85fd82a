/* The gRPC server (rpc.h): one completion queue per thread, a request always posted on every
 * queue for every registered method and for unknown ones, and the shutdown sequence. The
 * per-call state machine is in rpc_call.c. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include "rpc.h"

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <limits.h>
#include <string.h>
#include <time.h>

#include "ga_alloc.h"
#include "rpc_internal.h"

static void post_request(ga_rpc_server *srv, rpc_queue *q, const ga_method *m)
{
    ga_call *c = rpc_call_new(srv, q, m);
    if (!c) return; /* out of memory: this queue takes no new calls of m until the next repost */
    grpc_call_error err;
    GA_TSAN_RELEASE(&c->tags[TAG_NEW]); /* acquired by queue_main */
    if (m) {
        /* GRPC_SRM_PAYLOAD_NONE: the request message is read with RECV_MESSAGE like any other. */
        err = grpc_server_request_registered_call(srv->server, srv->registered[m - ga_methods], &c->call,
                                                  &c->deadline, &c->request_md, NULL, q->cq, q->cq,
                                                  &c->tags[TAG_NEW]);
    } else {
        err = grpc_server_request_call(srv->server, &c->call, &c->details, &c->request_md, q->cq, q->cq,
                                       &c->tags[TAG_NEW]);
    }
    if (err != GRPC_CALL_OK) rpc_call_unref(c);
}

void rpc_server_repost(ga_rpc_server *srv, rpc_queue *q, const ga_method *m)
{
    /* After shutdown began gRPC would fail the request at once; skip the round trip. */
    if (!atomic_load(&srv->stopping)) post_request(srv, q, m);
}

static void *queue_main(void *arg)
{
    rpc_queue *q = arg;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(q->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
        if (ev.type != GRPC_OP_COMPLETE) continue;
        rpc_tag *t = ev.tag;
        GA_TSAN_ACQUIRE(t); /* every tag is released before it is given to gRPC */
        if (t->kind == TAG_SHUTDOWN) {
            ga_rpc_server *srv = q->srv;
            atomic_store(&srv->stopped, true);
            if (srv->done) srv->done(srv->done_arg);
            continue;
        }
        rpc_call_event(t->call, t->kind, ev.success != 0);
    }
    return NULL;
}

/* Stops the threads and frees the queues; the server must be destroyed (or never created). */
static void stop_queues(ga_rpc_server *s)
{
    for (int i = 0; i < s->nqueues; i++)
        if (s->queues[i].cq) grpc_completion_queue_shutdown(s->queues[i].cq);
    for (int i = 0; i < s->nqueues; i++) {
        rpc_queue *q = &s->queues[i];
        if (q->running) pthread_join(q->thread, NULL);
        if (q->cq) grpc_completion_queue_destroy(q->cq);
    }
    ga_free(s->queues);
    s->queues = NULL;
}

static int clamp_int(size_t v) { return v > INT_MAX ? INT_MAX : (int)v; }

/* Plaintext, TLS, or mutual TLS (the client's certificate must chain to the client CA: a
 * client without one, or with another CA's, fails the handshake before any call exists), the
 * TLS material read at every handshake (rpc_tls.h). */
static grpc_server_credentials *server_credentials(ga_rpc_server *s)
{
    return s->tls ? ga_rpc_tls_credentials(s->tls) : grpc_insecure_server_credentials_create();
}

ga_status ga_rpc_server_set_tls(ga_rpc_server *s, const char *cert_pem, const char *key_pem, const char *client_ca_pem)
{
    if (!s || !s->tls) return GA_E_CONFIG;
    return ga_rpc_tls_set(s->tls, cert_pem, key_pem, client_ca_pem);
}

ga_status ga_rpc_server_start(const ga_rpc_options *opt, const ga_rpc_handlers *handlers,
                              ga_rpc_server **out, int *port)
{
    if (!opt || !handlers || !out || !opt->listen || opt->threads < 1 || opt->max_message_bytes == 0)
        return GA_E_CONFIG;
    if (!opt->tls_cert_pem != !opt->tls_key_pem || (opt->tls_client_ca_pem && !opt->tls_cert_pem))
        return GA_E_CONFIG;
    if (!handlers->on_request || !handlers->on_stream_message || !handlers->on_stream_end ||
        !handlers->on_stream_abort)
        return GA_E_CONFIG;
    ga_rpc_server *s = ga_calloc(1, sizeof *s);
    if (!s) return GA_E_NOMEM;
    s->queues = ga_calloc((size_t)opt->threads, sizeof *s->queues);
    if (!s->queues) {
        ga_free(s);
        return GA_E_NOMEM;
    }
    s->nqueues = opt->threads;
    s->h = handlers;
    s->budget = opt->budget;
    s->max_message_bytes = opt->max_message_bytes;
    if (opt->tls_cert_pem && !(s->tls = ga_rpc_tls_create(opt->tls_cert_pem, opt->tls_key_pem, opt->tls_client_ca_pem))) {
        ga_free(s->queues);
        ga_free(s);
        return GA_E_NOMEM;
    }
    s->shutdown_tag.kind = TAG_SHUTDOWN;
    atomic_init(&s->stopping, false);
    atomic_init(&s->stopped, false);
    grpc_init();

    /* Reuseport off, or a second server on the same port starts without error (trap 4); the
     * message limits on both directions (trap 5); a fixed receive window when one is set (the
     * two after them, left out otherwise); gRPC's memory quota when one is set. */
    grpc_arg args[] = {
        {GRPC_ARG_INTEGER, GRPC_ARG_ALLOW_REUSEPORT, {.integer = 0}},
        {GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = clamp_int(opt->max_message_bytes)}},
        {GRPC_ARG_INTEGER, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, {.integer = clamp_int(opt->max_message_bytes)}},
        {GRPC_ARG_INTEGER, GRPC_ARG_HTTP2_BDP_PROBE, {.integer = 0}},
        {GRPC_ARG_INTEGER, GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, {.integer = clamp_int(opt->stream_window_bytes)}},
        {0}, /* the resource quota, when there is one */
    };
    size_t nargs = sizeof args / sizeof args[0] - 1 - (opt->stream_window_bytes ? 0 : 2);
    grpc_resource_quota *quota = NULL;
    if (opt->grpc_memory_bytes) {
        quota = grpc_resource_quota_create("gradagg");
        grpc_resource_quota_resize(quota, opt->grpc_memory_bytes);
        args[nargs++] = (grpc_arg){GRPC_ARG_POINTER, GRPC_ARG_RESOURCE_QUOTA,
                                   {.pointer = {quota, grpc_resource_quota_arg_vtable()}}};
    }
    grpc_channel_args chargs = {nargs, args};
    s->server = grpc_server_create(&chargs, NULL);
    if (quota) grpc_resource_quota_unref(quota); /* the server holds its own reference */
    ga_status rc = GA_OK;
    for (int i = 0; i < s->nqueues; i++) {
        s->queues[i].srv = s;
        s->queues[i].cq = grpc_completion_queue_create_for_next(NULL);
        grpc_server_register_completion_queue(s->server, s->queues[i].cq, NULL);
    }
    for (int m = 0; m < GA_METHODS; m++) {
        s->registered[m] =
            grpc_server_register_method(s->server, ga_methods[m].path, NULL, GRPC_SRM_PAYLOAD_NONE, 0);
        if (!s->registered[m]) rc = GA_E_CONFIG;
    }
    /* Threads first: then a failure below needs no started server to unwind. */
    for (int i = 0; i < s->nqueues && rc == GA_OK; i++) {
        if (pthread_create(&s->queues[i].thread, NULL, queue_main, &s->queues[i]) != 0) rc = GA_E_NOMEM;
        else s->queues[i].running = true;
    }
    int bound = 0;
    if (rc == GA_OK) {
        grpc_server_credentials *creds = server_credentials(s);
        bound = creds ? grpc_server_add_http2_port(s->server, opt->listen, creds) : 0;
        if (creds) grpc_server_credentials_release(creds);
        if (bound == 0) rc = GA_E_IO; /* cannot bind, or the port is taken */
    }
    if (rc != GA_OK) {
        /* Not started and no listener: the server may be destroyed without a shutdown. */
        grpc_server_destroy(s->server);
        stop_queues(s);
        grpc_shutdown();
        ga_rpc_tls_destroy(s->tls);
        ga_free(s);
        return rc;
    }
    grpc_server_start(s->server);
    for (int i = 0; i < s->nqueues; i++) {
        for (int m = 0; m < GA_METHODS; m++) post_request(s, &s->queues[i], &ga_methods[m]);
        post_request(s, &s->queues[i], NULL); /* unknown methods: answered UNIMPLEMENTED (trap 2) */
    }
    *out = s;
    if (port) *port = bound;
    return GA_OK;
}

void ga_rpc_server_shutdown(ga_rpc_server *s, void (*done)(void *arg), void *arg)
{
    if (!s || atomic_exchange(&s->stopping, true)) return;
    s->done = done;
    s->done_arg = arg;
    /* The tag arrives once every call has been released (trap 7: open streams hold it until
     * ga_rpc_server_cancel_all). Pending requests fail with ok=0 and free their state. */
    GA_TSAN_RELEASE(&s->shutdown_tag);
    grpc_server_shutdown_and_notify(s->server, s->queues[0].cq, &s->shutdown_tag);
}

void ga_rpc_server_cancel_all(ga_rpc_server *s)
{
    /* gRPC allows this only after shutdown began; before, there is nothing to hurry. */
    if (s && atomic_load(&s->stopping)) grpc_server_cancel_all_calls(s->server);
}

void ga_rpc_server_destroy(ga_rpc_server *s)
{
    if (!s) return;
    if (!atomic_load(&s->stopping)) {
        /* Misuse (destroy without shutdown): stop hard rather than leave gRPC half alive. */
        ga_rpc_server_shutdown(s, NULL, NULL);
        ga_rpc_server_cancel_all(s);
    }
    while (!atomic_load(&s->stopped)) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    grpc_server_destroy(s->server);
    stop_queues(s); /* drains each queue: late completions of released calls run here */
    grpc_shutdown();
    ga_rpc_tls_destroy(s->tls);
    ga_free(s);
}
