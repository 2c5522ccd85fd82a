/* Shared between rpc.c (the server, its queues and threads) and rpc_call.c (one call's state
 * machine): the tags every completion carries and the per-call state. Not for other files. */
#ifndef GA_RPC_INTERNAL_H
#define GA_RPC_INTERNAL_H

#include <grpc/grpc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "ga_tsan.h"
#include "rpc.h"
#include "rpc_tls.h"

/* What a completion is about. A tag is embedded in its owner, so no completion allocates. */
typedef enum rpc_tag_kind {
    TAG_NEW,      /* a requested call arrived (or the request failed at shutdown) */
    TAG_RECV,     /* RECV_MESSAGE */
    TAG_SEND,     /* SEND_MESSAGE of a server stream */
    TAG_CLOSE,    /* RECV_CLOSE_ON_SERVER: the call is over for the client */
    TAG_STATUS,   /* SEND_STATUS_FROM_SERVER (with the response, if any) */
    TAG_KINDS,
    TAG_SHUTDOWN = TAG_KINDS, /* the server's shutdown_and_notify */
} rpc_tag_kind;

typedef struct rpc_tag {
    rpc_tag_kind kind;
    ga_call *call; /* NULL for TAG_SHUTDOWN */
} rpc_tag;

typedef struct rpc_queue {
    ga_rpc_server *srv;
    grpc_completion_queue *cq;
    pthread_t thread;
    bool running;
} rpc_queue;

struct ga_rpc_server {
    grpc_server *server;
    const ga_rpc_handlers *h;
    rpc_queue *queues;
    int nqueues;
    void *registered[GA_METHODS]; /* grpc_server_register_method handles */
    atomic_bool stopping;         /* shutdown began: requests are no longer re-posted */
    atomic_bool stopped;          /* the shutdown tag arrived: every call is released */
    void (*done)(void *arg);
    void *done_arg;
    rpc_tag shutdown_tag;
    ga_rpc_tls *tls; /* NULL: plaintext */
    ga_budget *budget;         /* NULL: receives take no room (ga_rpc_options.budget) */
    size_t max_message_bytes;
};

typedef struct rpc_out {
    struct rpc_out *next;
    grpc_byte_buffer *bb;
} rpc_out;

/* One call, pinned to one queue. The receive side (recv_bb, stream, cancelled) is touched only
 * by that queue's thread; the send side is under mu because ga_call_send and ga_call_finish
 * come from any thread. refs: 1 until RECV_CLOSE_ON_SERVER completes, +1 per batch in flight,
 * +1 while a handler holds the call (completions arrive after the close, trap 8). */
struct ga_call {
    ga_rpc_server *srv;
    rpc_queue *q;
    const ga_method *method; /* NULL: the generic call that answers unknown methods */
    ga_method_id id;
    atomic_int refs;
    rpc_tag tags[TAG_KINDS];

    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array request_md;
    grpc_call_details details; /* generic calls only */
    char *peer;                /* gpr_malloc'd */

    /* queue thread only */
    grpc_byte_buffer *recv_bb;
    void *stream; /* the handler's client-stream state */
    int cancelled;
    bool recv_room;    /* a posted read holds max_message_bytes of the budget */
    uint32_t messages; /* received so far, and their bytes: what a broken stream discarded */
    uint64_t bytes;

    pthread_mutex_t mu;
    rpc_out *out_head, *out_tail; /* queued server-stream messages */
    grpc_byte_buffer *in_flight;  /* the SEND_MESSAGE now in flight */
    grpc_byte_buffer *final_bb;   /* the response sent with the status */
    bool initial_md_sent;
    bool gone;          /* the client left or a send failed: nothing more is sent */
    bool handed_up;     /* a handler holds a reference until ga_call_finish */
    bool finished;      /* a finish was asked for: later sends and finishes are dropped */
    bool finish_queued; /* the status waits for the send queue to drain */
    ga_status queued_st;
    char *queued_msg; /* ga_malloc'd, or NULL for ga_strerror */
};

/* rpc_call.c: a new call state for a request on q (refs = 1, owned by the request). */
ga_call *rpc_call_new(ga_rpc_server *srv, rpc_queue *q, const ga_method *m);
void rpc_call_unref(ga_call *c);
/* A completion for a call's tag, on its queue's thread. */
void rpc_call_event(ga_call *c, rpc_tag_kind kind, bool ok);

/* rpc.c: posts a request for the same method on the same queue (a fresh call state). */
void rpc_server_repost(ga_rpc_server *srv, rpc_queue *q, const ga_method *m);

#endif
