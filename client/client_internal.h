/* The SDK's private state: the client, its tensors, and the helpers the SDK's files share
 * (errors, retries, timing). Not installed; only the client/ sources and tests include it.
 *
 * The SDK (gradagg.h) is one module in several files around this state, in layers, each file
 * calling only those below it: common.c (errors, retries, time, the in-flight flag, codec
 * parameters); shard.c (one thread per shard running a step's work), heartbeat.c (leases),
 * device.c (CUDA tensors), init.c (InitTensors); join.c (Join, rejoin, Leave); push.c, then
 * pull.c (a step's two sides: a pull may push again); step.c (a step), then step_async.c (on the
 * client's own thread); state.c (save and load); client.c (the client's life: options, tensors,
 * create, destroy). The one call
 * back up, a retry's rejoin, goes through c->rejoin. Below it, with contracts of their own and
 * no knowledge of this state:
 * rpc_client.h (synchronous calls), chunks.h, placement.h, discover.h, dgc.h, auto_threshold.h
 * (the last two take gradagg.h's public option structs, never this state). */
#ifndef GA_CLIENT_INTERNAL_H
#define GA_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chunks.h"
#include "gradagg.h"
#include "placement.h"
#include "rpc_client.h"

/* One encoded chunk of a push, kept until the push is acknowledged: a retry resends exactly
 * these bytes (re-encoding would move the residual twice). */
typedef struct ga_push_part {
    size_t off, count;       /* element range, in the whole tensor */
    uint32_t piece;          /* the tensor's piece (so the shard) it belongs to */
    size_t pos, len;         /* payload: buf[pos, pos + len) of the tensor's push buffer */
    ga_codec_params params;  /* as sent (topk: this step's ratio and seed) */
    bool deferred;           /* not encoded yet: its shard's thread encodes it (ga_shard_encode) */
} ga_push_part;

/* A tensor's piece on one shard (placement.h): the whole tensor, or a range of a split one. */
typedef struct ga_piece {
    uint32_t shard;
    size_t off, count;
    char *name;             /* the name it carries on its shard (owned) */
} ga_piece;

typedef struct ga_tensor {
    char *name;
    ga_piece *pieces;          /* in element order, each on a different shard */
    uint32_t npieces;
    uint64_t *shape;
    int ndim;
    size_t n;
    float *params;             /* borrowed from the caller; device tensors: the owned host mirror
                                  that init sends from and pulls write into */
    bool device;               /* ga_tensor_options.device: residual, late, work on the device */
    float *dparams;            /* device tensors: the caller's device buffer */
    uint8_t *dbuf;             /* device tensors: payload staging (encode, fold-back) */
    size_t dbuf_cap;
    ga_codec_id codec;
    ga_codec_params cp;        /* defaulted, only the codec's own fields set */
    ga_dgc_options dgc;
    ga_auto_threshold autot;   /* enabled: resolved (defaults applied) */
    double auto_rho;           /* the density its bit budget asks for */
    bool auto_have;            /* a sample gave an estimate: smoothing starts from `threshold` */
    float threshold;           /* 2bit/1bit: the threshold of the last push (the starting one before) */
    float density;             /* 2bit: nonzero codes / n of the last push; NaN before */
    float step_threshold;      /* planned for the open step; kept by encode_tensor */
    float step_level;          /* the level sent at step_threshold (the chunks' threshold) */
    bool step_have;
    float clip_s;              /* DGC: this step's clipping coefficient (plan_tensor) */
    float *residual;           /* n floats when the codec has one; DGC: the accumulation v
                                  (device memory for device tensors, as are work and late) */
    float *u;                  /* DGC momentum (momentum != 0) */
    float *work;               /* n floats: clipped / Nesterov-corrected / late-folded gradient */
    float *late;               /* codecs without a residual: late pushes, added to the next step */
    bool late_pending;
    const float *step_grad;    /* the step's gradient while parts are deferred (ga_shard_encode) */
    uint8_t *buf;              /* push payloads of the open step */
    size_t buf_cap;
    ga_push_part *parts;
    size_t nparts, parts_cap;
} ga_tensor;

typedef struct ga_shard ga_shard;
typedef struct ga_async ga_async; /* step_async.c */

/* The turns the lanes of one address take in order within a step (ga_shard_turn_wait): a lane
 * encodes (ENCODED) and sends its push (SENT) after the lane just before it, and pushes only
 * once the lane c->lane_window before it has pulled (PULLED). */
typedef enum ga_turn { GA_TURN_ENCODED, GA_TURN_SENT, GA_TURN_PULLED, GA_TURNS } ga_turn;

/* A task of ga_shards_run, on the shard's own thread: returns its status, a message in sh->err. */
typedef ga_status (*ga_shard_fn)(ga_client *c, ga_shard *sh);

/* One lane of one server of the job (an address of the list): shard index = address * lanes +
 * lane. Its thread runs the client's tasks that name it; everything else (and the fields,
 * between tasks) belongs to the client's thread. */
struct ga_shard {
    ga_client *client;
    uint32_t index;
    uint32_t lane;         /* ga_lane.h; 0 when the client has one lane */
    char *addr;            /* "host:port" (owned) */
    char *job;             /* the job name of this lane (owned) */
    ga_channel *ch;        /* owned by lane 0, borrowed by the address's other lanes */
    ga_piece **pieces;     /* per tensor: its piece here, or NULL (set by ga_client_init) */
    bool used;             /* holds a piece: takes part in init and steps */
    uint64_t version;      /* the version its pieces hold in the buffers */
    bool exact;            /* they hold it exactly, so a delta may apply */
    uint64_t step;         /* the step its next push carries (sync: the open step; async: a counter) */
    bool pull_pending;     /* a push was acknowledged but its pull failed: pull first */
    uint64_t pull_min;
    /* The current task: whether it runs here, its input and output, and its figures (added to
     * the client's stats when ga_shards_run returns). */
    bool active;
    uint64_t want;         /* pull: least version */
    uint64_t ack;          /* push: the version the acknowledgement names */
    bool stale_ack;        /* push: acknowledged as a duplicate although no attempt of this call
                              can have been counted: an earlier call's push of this step was */
    bool sent_any;         /* a push of this client's may have reached the server ... */
    uint64_t sent_max;     /* ... the newest step one did (a duplicate of a step past it, or
                              of any step before the first, was counted with a predecessor's) */
    ga_status st;
    char err[512];
    uint64_t retries, rejoins, versions_lost, bytes_pulled;
    double apply_s;
    uint32_t heartbeat_ms; /* how often the server wants a Heartbeat, from its Join answer (0: never) */
    pthread_t thread;      /* shards 1..n-1 when n > 1; shard 0's tasks run on the caller */
    bool has_thread;
    uint64_t seen;         /* the task generation it ran last */
    uint64_t turn[GA_TURNS]; /* the task generation in which it last passed each turn (under mu) */
    uint64_t bytes_pushed; /* ga_shard_encode: payload bytes it encoded */
    double encode_end;     /* the step's exchange: when its encode ended */
    double push_end;       /* ... when its push ended */
    bool pushed;           /* ... the push was acknowledged (or its step closed) */
    bool late;             /* ... but its bytes were not counted: fold back */
};

typedef struct ga_heartbeat ga_heartbeat;

struct ga_client {
    ga_client_options opt; /* server and job point at owned copies; the TLS paths and the
                              token are NULL (create reads them into the channels) */
    char *server, *job;
    /* A retry's rejoin of a shard that lost the membership (ga_shard_rejoin, set at create):
     * called through here so common.c's ga_shard_retry needs nothing above it. */
    ga_status (*rejoin)(ga_client *c, ga_shard *sh, char *why, size_t cap);
    ga_shard *shards;      /* one per address of opt.server, in its order */
    uint32_t nshards;
    uint32_t lane_window;  /* the lanes of one address between their push and their pull at once */
    /* The shard threads: a task generation, posted by ga_shards_run. */
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    pthread_cond_t turn;   /* a shard passed a turn: the next lane may go */
    bool pool;             /* mu and the conditions exist */
    uint64_t gen;
    uint32_t pending;
    bool quit;
    ga_shard_fn task;
    ga_exec ex;
    uint64_t incarnation;
    ga_tensor *tensors;
    size_t ntensors, tensors_cap;
    bool inited;
    bool joined; /* ga_client_create's join succeeded: a lost membership is joined again */
    uint64_t version;      /* the version the params buffers hold (sharded: the least of the shards') */
    uint32_t epoch;
    bool has_lr;           /* ga_client_set_lr was called: pushes carry lr */
    float lr;
    bool abandoned;        /* ga_client_abandon: destroy without a Leave */
    void (*pull_tap)(void *arg, const ga_pull_delta *d); /* ga_client_set_pull_tap */
    void *pull_tap_arg;
    uint32_t push_weight;  /* ga_client_set_push_weight: the workers each push sums; 0 = 1 */
    ga_client_stats stats;
    float *scratch;        /* DGC masking: one chunk of decoded values */
    size_t scratch_n;
    float *sample;         /* automatic threshold: one tensor's sample */
    size_t sample_n;
    ga_exec dex;           /* device tensors: CUDA on the client's own stream */
    void *stream;          /* owned (ga_cuda_stream_create), made by the first device tensor */
    bool device_stale;     /* a pull succeeded but its copy to the device buffers did not */
    ga_async *async;       /* the step thread of ga_client_step_start (made at its first call) */
    bool in_flight;        /* an asynchronous step runs (atomic: read by any thread) */
    ga_heartbeat *heartbeat; /* heartbeat.c; NULL: none runs */
    const char *failure;   /* ga_client_destroy_failed: the reason its Leaves carry; NULL: finished */
    char err[512];
};

/* The heartbeat (heartbeat.c, docs/protocol.md "Failed ranks"): a thread that renews the
 * client's member lease on every shard between calls, as often as the shards' Join answers ask
 * (heartbeat_ms), so a rank busy with its own work is not taken for lost. One thread per
 * address, so a server that is away does not hold up the others' heartbeats. Its calls' failures
 * are ignored: a server away or refusing is the next call's business. Start after the join
 * (no-op when no shard announced a lease); stop before the Leave (no-op when none runs). */
ga_status ga_heartbeat_start(ga_client *c);
void ga_heartbeat_stop(ga_client *c);

/* ---- common.c: errors, retries, time, the in-flight flag, codec parameters ---- */

/* Records and returns st with the message fmt (printf) in c->err. GA_OK clears it. */
ga_status ga_client_fail(ga_client *c, ga_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Records a failed call of shard sh: "<what>: E_NAME: <why>" (ga_strerror(st) when why is
 * empty) in sh->err. */
ga_status ga_shard_fail_call(ga_shard *sh, ga_status st, const char *why, const char *what, ...)
    __attribute__((format(printf, 4, 5)));

/* One attempt of a call to shard sh; writes the reason of a failure into why[0..cap). */
typedef ga_status (*ga_attempt_fn)(ga_client *c, ga_shard *sh, void *arg, char *why, size_t cap);
/* Runs attempt, again after a backoff while it returns GA_E_UNAVAILABLE, GA_E_DRAINING or
 * GA_E_CANCELLED (a stopping server cancels its open calls) and retries remain
 * (ga_client_may_retry; backoff_ms doubling up to backoff_max_ms; each counts in sh->retries);
 * a lost membership of a joined client is joined again first (sh->rejoins). Returns the last
 * attempt's status; why holds its reason. */
ga_status ga_shard_retry(ga_client *c, ga_shard *sh, ga_attempt_fn attempt, void *arg, char *why, size_t cap);
/* Whether a call that failed `tries` + 1 times, first at first_failure (ga_client_now), may be
 * tried again: fewer than max_retries retries so far, and retry_budget_ms (if not 0) not spent. */
bool ga_client_may_retry(const ga_client *c, uint32_t tries, double first_failure);
/* The statuses ga_shard_retry retries: the server was unreachable, draining or stopping. */
bool ga_shard_retryable(ga_status st);
/* After a pull ran out of time: appends to why[0..cap) which ranks the shard's open step still
 * lacks a push from ("; step 40 has no push from ranks 2, 3"), asked by one Status call (nothing
 * appended when that fails). */
void ga_shard_name_missing(ga_client *c, ga_shard *sh, char *why, size_t cap);
/* Whether an asynchronous step runs now: the public calls that touch the client's state refuse
 * (GA_E_INVAL, without writing c->err) until it ends. */
bool ga_client_in_flight(const ga_client *c);
/* Monotonic seconds. */
double ga_client_now(void);
/* Copies the fields `codec` reads (ga_codec_params_default when p is all zero); the rest 0. */
ga_codec_params ga_client_codec_params(ga_codec_id codec, const ga_codec_params *p);

/* ---- join.c: a rank's membership on one shard ---- */

/* One Join attempt as this incarnation with the client's config; arg is a
 * Gradagg__V1__JoinResponse ** that receives the answer (the caller frees it). */
ga_status ga_shard_join_attempt(ga_client *c, ga_shard *sh, void *arg, char *why, size_t cap);
/* Shard task of create: Join with retries (a Join past its call timeout is sent again within the
 * same bounds); takes the rank an elastic job picked, the shard's version, open step and lease. */
ga_status ga_shard_join_task(ga_client *c, ga_shard *sh);
/* Shard task: Leave, best effort (finished, or failed with c->failure). */
ga_status ga_shard_leave_task(ga_client *c, ga_shard *sh);
/* The shard came back without this worker's membership or without the job: Join again as the
 * same incarnation, and send the init again when the job came back empty. c->rejoin at create. */
ga_status ga_shard_rejoin(ga_client *c, ga_shard *sh, char *why, size_t cap);
/* The shard's open step for this job, from a Join as the same incarnation (one attempt), and
 * whether its server journals every acknowledged push (JoinResponse.acked_durable). */
ga_status ga_shard_open_step(ga_client *c, ga_shard *sh, uint64_t *open_step, bool *acked_durable, char *why,
                             size_t cap);

/* ---- a step's sides ---- */

/* Sends the push of sh->step again (push.c): after the connection broke while its pull waited,
 * the server may have come back without it (--durability checkpoint); counted once if it kept
 * it. Moves the shard back as ga_shard_push does. */
ga_status ga_shard_repush(ga_client *c, ga_shard *sh, char *why, size_t cap);
/* The pull of a sync step's result after the shard's own push (pull.c): as ga_shard_pull, and
 * after a broken connection it sends the push again first (ga_shard_repush). */
ga_status ga_shard_pull_after_push(ga_client *c, ga_shard *sh);
/* The least version a sync shard needs after its push of sh->step was answered: that step's
 * result, or with bounded staleness s the version its next step may be computed from (its step
 * + 1 - s). */
uint64_t ga_shard_needed_after_push(const ga_client *c, const ga_shard *sh);

/* Shards (shard.c). */
/* Splits opt.server into c->shards, `lanes` per address (owned addresses and lane job names;
 * GA_E_INVAL with a message in c->err for an empty entry or more than GA_PLACEMENT_MAX_SHARDS
 * shards in all). */
ga_status ga_shards_parse(ga_client *c, const char *list, uint32_t lanes);
/* Starts the threads of shards 1..n-1 (none for one shard). */
ga_status ga_shards_start(ga_client *c);
/* Runs fn for every shard with sh->active (shard 0 on the caller), concurrently, and returns
 * when all are done; sh->st holds each status. The shards' figures go into c->stats. */
void ga_shards_run(ga_client *c, ga_shard_fn fn);
/* Lanes encode, push and pull in turns: a shard waits until the lane before it on the same
 * address (for GA_TURN_PULLED, the lane c->lane_window before it) has passed turn `t` in the
 * current task generation (no wait when there is no such lane or it takes no part in it);
 * ga_shard_turn_pass says a shard passed it (done, or failed), once per generation. No-ops for
 * a client with one shard. */
void ga_shard_turn_wait(ga_client *c, ga_shard *sh, ga_turn t);
void ga_shard_turn_pass(ga_client *c, ga_shard *sh, ga_turn t);
/* The first failed active shard's status (GA_OK when none), its message in c->err, prefixed with
 * the shard's address when there are several. */
ga_status ga_shards_error(ga_client *c);
/* Stops and joins the threads, destroys the channels, frees the shards. */
void ga_shards_free(ga_client *c);
/* The least version the used shards' pieces hold (what the buffers hold as a whole). */
uint64_t ga_shards_version(const ga_client *c);

/* Asynchronous steps (step_async.c). */
/* The body of ga_client_step (c != NULL), on whichever thread runs the step. */
ga_status ga_client_step_run(ga_client *c, const float *const *grads);
/* Waits for a step in flight, ends the step thread and frees c->async (none: no-op). */
void ga_client_async_free(ga_client *c);

/* The steps of one training step, each in its own file. A mask of shards (bool per shard)
 * picks the parts whose piece lives on them; NULL = every shard. */
/* Encodes every tensor once into its parts (push.c); step seeds topk and the threshold sample.
 * With defer, the parts of host tensors whose encode cannot fail (2bit, 1bit, none; no DGC, no
 * late push to add) on shards marked active are left for ga_shard_encode. */
ga_status ga_client_encode(ga_client *c, const float *const *grads, uint64_t step, bool defer);
/* Shard task step: encodes sh's deferred parts (after the lane before it: GA_TURN_ENCODED),
 * counting their bytes in sh->bytes_pushed. A codec error (none is expected) leaves the rest
 * deferred, which the fold-back skips. */
ga_status ga_shard_encode(ga_client *c, ga_shard *sh);
/* After the shards encoded their deferred parts: the figures taken over whole tensors (2bit
 * density). */
void ga_client_encode_finish(ga_client *c);
/* The step the next push carries: the least sh->step of the used shards. */
uint64_t ga_client_push_step(const ga_client *c);                   /* push.c */
/* Pushes the encoded parts to every used shard at that step (all of them unless one fell
 * behind), concurrently: sh->active marks them, sh->st and sh->ack say how each went. Returns
 * the first failure (GA_E_STEP_CLOSED included) with its message in c->err, else GA_OK and the
 * least acknowledged version in *ack_version. */
ga_status ga_client_push(ga_client *c, uint64_t *ack_version);      /* push.c */
/* Folds the encoded parts of the masked shards back into the residual (or late). */
ga_status ga_client_fold_back(ga_client *c, const bool *mask);      /* push.c */
/* Pulls every active shard's pieces at version >= sh->want, concurrently, then copies device
 * tensors; the first error is returned (c->err), sh->st says how each went. */
ga_status ga_client_pull_shards(ga_client *c);                      /* pull.c */
/* ga_client_pull_shards of every used shard at version >= min_version. */
ga_status ga_client_pull(ga_client *c, uint64_t min_version);       /* pull.c */
/* Shard task: Push of sh's encoded parts at sh->step, after the lane before it (push.c);
 * sh->ack and sh->stale_ack say how it went. */
ga_status ga_shard_push(ga_client *c, ga_shard *sh);
/* Shard task: Pull of sh's pieces at version >= sh->want, applied into the buffers (pull.c);
 * sh->bytes_pulled and sh->apply_s its figures. */
ga_status ga_shard_pull(ga_client *c, ga_shard *sh);
/* Shard task: InitTensors of sh's pieces with their values. */
ga_status ga_shard_send_init(ga_client *c, ga_shard *sh);           /* init.c */
/* Shard task: InitTensors of sh's pieces awaiting another rank's values (await_values). */
ga_status ga_shard_await_init(ga_client *c, ga_shard *sh);          /* init.c */

/* Device tensors (device.c). */
/* Makes the client's CUDA stream (once) and t's mirror and zeroed device residual. */
ga_status ga_client_device_tensor(ga_client *c, ga_tensor *t);
void ga_client_device_tensor_free(ga_tensor *t);
/* Grows a device buffer to at least want bytes; the old contents need not survive. */
ga_status ga_client_device_reserve(void **buf, size_t *cap, size_t want);
/* Zeroes bytes of device memory at p (queued on c->dex). */
ga_status ga_client_device_zero(ga_client *c, void *p, size_t bytes);
/* Copies every device tensor's buffer into its mirror (before init sends it). */
ga_status ga_client_device_load(ga_client *c);
/* Copies every mirror to its device buffer (after a successful pull); device_stale until it
 * succeeds. */
ga_status ga_client_device_store(ga_client *c);
/* Adds t's encoded host payloads (t->parts of the masked shards) back into `into` (device memory). */
ga_status ga_client_device_fold_back(ga_client *c, ga_tensor *t, float *into, const bool *mask);

#endif
