/* libgradagg: the C client SDK of gradagg-server.
 *
 * One ga_client per worker (one rank of one job). The client joins the job, registers tensors
 * whose parameter buffers belong to the caller, and runs one call per training step: it encodes
 * every gradient with the tensor's codec (the error-feedback residual lives here, in the SDK),
 * streams the chunks to the server, waits for the new parameter version and writes it into the
 * caller's buffers. UNAVAILABLE (and a draining or stopping server's answers) is retried with
 * exponential backoff; a sync worker whose pull lost its connection pushes its step again
 * first (docs/reliability.md, "Durability is a setting"); a retried push is counted
 * once by the server. UNAUTHENTICATED and PERMISSION_DENIED (a missing or wrong token) are not
 * retried; a failed TLS handshake looks like UNAVAILABLE. Errors are ga_status values (ga_status.h) with a message from
 * ga_client_error.
 *
 * Sharding: with several server addresses the client joins every shard, cuts large tensors into
 * one range per shard and places small ones whole, pushes to and pulls from all shards at once
 * (one internal thread per shard after the first) and ends a step when every shard answered;
 * errors name the shard. Async jobs take one shard (GA_E_INVAL).
 *
 * Threads: a client is used by one thread at a time; different clients are independent. An
 * asynchronous step (ga_client_step_start) runs on the client's own thread; while it runs, any
 * thread may poll or wait for it. */
#ifndef GRADAGG_H
#define GRADAGG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ga_codec.h"
#include "ga_optim.h"
#include "ga_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ga_client ga_client;

typedef enum ga_job_mode { GA_MODE_SYNC = 0, GA_MODE_ASYNC = 1 } ga_job_mode;
/* What the server does with each step's reduced gradient g: NONE params += g, SGD / ADAM their
 * update, REDUCE params = g (a reduce-only job: each version pulled is the step's aggregate
 * gradient, which the caller's own optimizer applies: DDP's comm hook). */
typedef enum ga_server_optim {
    GA_SERVER_OPTIM_NONE = 0,
    GA_SERVER_OPTIM_SGD = 1,
    GA_SERVER_OPTIM_ADAM = 2,
    GA_SERVER_OPTIM_REDUCE = 3
} ga_server_optim;

/* The job a client joins. The first rank to join creates the job with these settings; the
 * others must pass the same (GA_E_JOB_CONFIG otherwise). */
typedef struct ga_client_options {
    uint32_t version;          /* sizeof(ga_client_options): set by GA_CLIENT_OPTIONS_INIT */
    const char *server;        /* "host:port", or the shards' "h1:p1,h2:p2,..." (borrowed, copied at
                                  create; see shard_split_elements) */
    const char *job;           /* job name (copied) */
    uint32_t rank;             /* in [0, world_size); GA_RANK_ANY (elastic jobs): the server picks one
                                  (ga_client_rank says which) */
    uint32_t world_size;       /* the job's ranks; of an elastic job (min_world_size > 0), the most */
    uint64_t incarnation;      /* 0: generated from the clock and the pid */
    ga_job_mode mode;
    bool mean;                 /* server divides the sum by the ranks that contributed */
    ga_server_optim optimizer; /* run on the server after each step */
    ga_sgd_params sgd;
    ga_adam_params adam;
    uint32_t deadline_ms;      /* straggler deadline after a step's first commit; 0 = none */
    uint32_t quorum;           /* ranks needed to close at the deadline; 0 = world_size */
    ga_codec_id pull_codec;    /* GA_CODEC_NONE: fp32 pulls; else compressed deltas */
    ga_codec_params pull_params;
    size_t chunk_bytes;        /* payload bytes per streamed chunk */
    uint32_t call_timeout_ms;  /* deadline of each RPC that does not wait for a step */
    uint32_t step_timeout_ms;  /* how long a pull waits for the next version */
    uint32_t max_retries;      /* retries of an UNAVAILABLE / DRAINING / CANCELLED call; 0 = none;
                                  GA_RETRIES_UNBOUNDED: retry_budget_ms alone bounds them */
    uint32_t backoff_ms;       /* first retry delay; doubles up to backoff_max_ms, which is also
                                  the longest wait between reconnection attempts of a channel */
    uint32_t backoff_max_ms;
    int threads;               /* encode/decode threads; 0 = all */
    /* Security (docs/sdk.md, "Security"). The PEM files are read and checked at create
     * (a missing or invalid one fails it with a message); the token is copied. */
    const char *tls_ca_file;     /* PEM roots the server's certificate must chain to; NULL = plaintext */
    const char *tls_cert_file;   /* client certificate chain (PEM) for mutual TLS; NULL = none */
    const char *tls_key_file;    /* its private key (PEM, unencrypted); with tls_cert_file */
    const char *tls_target_name; /* name checked against the server's certificate instead of the
                                    host of `server` (a certificate for "gradagg.internal" reached
                                    by address); NULL = that host */
    const char *auth_token;      /* the job's bearer token, sent as "authorization: Bearer <token>"
                                    with every call; NULL = none */
    /* Sharding (docs/sdk.md, "Sharding"): `server` may list several addresses,
     * "h1:p1,h2:p2,...", the shards (independent servers), in the same order on every rank. A
     * tensor of at least this many elements is cut into one range per shard; smaller ones go
     * whole to one shard. 0 = never cut. Every rank must pass the same value.
     * GA_CLIENT_OPTIONS_INIT: 1 << 20 (a 4 MiB fp32 tensor is worth pushing in parallel). */
    uint64_t shard_split_elements;
    /* Lanes (docs/sdk.md, "Lanes"): each address of `server` carries this many independent
     * jobs over one connection, "<job>" and "<job>/lane<k>" for k >= 1, which the SDK places
     * tensors on as it does on shards (a large tensor is cut into one range per lane). A step
     * pushes the lanes one after another and pulls each as soon as its push is in, so the pulls
     * of the first lanes overlap the pushes of the later ones on the link, and the server's work
     * on a lane overlaps both; a lane pushes once the lane max(2, ceil(lanes / 4)) before it has
     * pulled. Worth it for large tensors on slow links; sync jobs only. Every rank must pass the
     * same value. 0 or 1 = one lane; at most GA_LANE_MAX (16), and at most 64 lanes over all
     * addresses. GA_CLIENT_OPTIONS_INIT: 1. */
    uint32_t lanes;
    /* With the 2bit pull codec: > 0 lets the server pick each pull piece's threshold and level
     * at every version for this many bits per element, in (0, log2(3)] (docs/auto-threshold.md,
     * "Pulls"; pull_params.threshold is then not used); 0 = pull_params.threshold, fixed. Every
     * rank must pass the same value. GA_CLIENT_OPTIONS_INIT: 0. */
    float pull_auto_bits;
    /* How long a call that keeps failing with a retryable status (max_retries) is retried,
     * counted from its first failure: what a server's restart may take, a rescheduled pod
     * included (docs/sdk.md, "Retries"). 0 = max_retries alone bounds them.
     * GA_CLIENT_OPTIONS_INIT: GA_RETRY_BUDGET_MS. */
    uint32_t retry_budget_ms;
    /* A job of this name that finished (every rank left as finished) goes on from where it
     * ended; false: a Join to it starts a fresh job in its place, so rerunning a script trains
     * from scratch (docs/protocol.md, "A job's life"). A job that has not finished (a rank failed
     * or is restarting) is always joined as it is. GA_CLIENT_OPTIONS_INIT: false. */
    bool resume;
    /* Elastic membership (docs/protocol.md, "Elastic jobs"): > 0 lets ranks join and leave the
     * running job at will (world_size is then the most ranks), and a step closes only with at
     * least this many contributors; 0 = a fixed membership of world_size ranks. Every rank must
     * pass the same value. GA_CLIENT_OPTIONS_INIT: 0. */
    uint32_t min_world_size;
    /* Bounded staleness (sync jobs; docs/protocol.md, "Bounded staleness"): a rank may push up
     * to this many steps past the open one, each step then computed from a version at most this
     * many steps old; 0 = sync. Every rank must pass the same value. GA_CLIENT_OPTIONS_INIT: 0. */
    uint32_t staleness;
} ga_client_options;

/* ga_client_options.rank of a worker that lets an elastic job's server pick its rank. */
#define GA_RANK_ANY UINT32_MAX

/* max_retries without a count: retry_budget_ms bounds the retries. */
#define GA_RETRIES_UNBOUNDED UINT32_MAX
/* The default retry budget, 10 minutes: a node lost with the server's pod on it is noticed after
 * Kubernetes' node-monitor grace (40 s) and its pods are evicted after the default
 * not-ready/unreachable toleration (300 s); the new pod then starts and replays its journal. */
#define GA_RETRY_BUDGET_MS 600000u

#define GA_CLIENT_OPTIONS_INIT                                                                  \
    {sizeof(ga_client_options), "127.0.0.1:7070", "default", 0, 1, 0, GA_MODE_SYNC, false,      \
     GA_SERVER_OPTIM_NONE, {0.01f, 0.0f, 0.0f, false}, {0.001f, 0.9f, 0.999f, 1e-8f, 0.0f, false}, \
     0, 0, GA_CODEC_NONE, {0.0f, 0.0f, 0.0f, 0, 0, 0, 0, 0.0f}, 1u << 20, 30000, 300000,              \
     GA_RETRIES_UNBOUNDED, 50, 2000, 0, NULL, NULL, NULL, NULL, NULL, (uint64_t)1 << 20, 1, 0.0f,         \
     GA_RETRY_BUDGET_MS, false, 0, 0}

/* Deep Gradient Compression on top of a topk (or any) codec, per tensor (docs/sdk.md). With a
 * codec without a residual (none, fp16, bf16: every element is sent each step) it is momentum on
 * the worker: u is sent whole, factor masking does not apply, and a server SGD with momentum 0
 * then gives exactly what SGD with momentum m gives (DGC keeps such tensors dense). */
typedef struct ga_dgc_options {
    bool enabled;
    float momentum;         /* momentum correction: u = m*u + g; v += u (0 = off) */
    bool nesterov;          /* u = (u + g)*m; v += u + g */
    bool factor_masking;    /* after sending, zero u and v where values were sent */
    float clip_norm;        /* clip the local gradient to this L2 norm first; 0 = off */
    uint32_t warmup_epochs; /* keep ratio max(coeff^(e+1), ratio) for epochs e < warmup_epochs,
                               coeff = ratio^(1/(warmup_epochs+1)); 0 = no warm-up */
} ga_dgc_options;

/* The value an automatically thresholded 2bit element is sent as. */
typedef enum ga_auto_level {
    GA_AUTO_LEVEL_MEAN = 0,     /* +-the mean |x| of the sampled elements at or above t (default) */
    GA_AUTO_LEVEL_THRESHOLD = 1 /* +-t (MXNet's level) */
} ga_auto_level;

/* Automatic threshold of the 2bit codec (docs/auto-threshold.md). Before each push the SDK
 * estimates, from a strided sample of |residual + gradient|, the threshold t at which the
 * fraction of elements sent has an information content (entropy of the ternary code, signs
 * equally likely) of `bits` per element, and smooths it across steps:
 * t = smoothing * estimate + (1 - smoothing) * previous t (the first step takes the estimate).
 * Elements with |x| >= t are sent as +-the level (`level`), which the chunk carries as its
 * threshold. The codec params' threshold is the fallback while the sample is all zero. */
typedef struct ga_auto_threshold {
    bool enabled;          /* only with GA_CODEC_2BIT (GA_E_INVAL otherwise) */
    float bits;            /* budget in (0, log2(3)]; 0 = 1.5 bits per element */
    float smoothing;       /* weight of this step's estimate, in (0, 1]; 0 = 0.5 */
    float sample_fraction; /* fraction of elements sampled, in (0, 1]; 0 = 0.01 (never fewer than
                              4096 elements, or all of a smaller tensor) */
    ga_auto_level level;   /* GA_AUTO_LEVEL_MEAN (0) or GA_AUTO_LEVEL_THRESHOLD */
} ga_auto_threshold;

typedef struct ga_tensor_options {
    uint32_t version;       /* sizeof(ga_tensor_options) */
    ga_codec_id codec;      /* how gradients of this tensor are pushed */
    ga_codec_params params; /* ga_codec_params_default(codec) when left zero */
    ga_dgc_options dgc;
    ga_auto_threshold auto_threshold;
    /* params and every gradient of this tensor are CUDA device pointers: the gradient is encoded
     * on the device by the CUDA codec (residual kept on the device) and only the payload is
     * copied to the host; pulled parameters are decoded into a host mirror and copied to the
     * device. GA_E_NO_CUDA / GA_E_NO_DEVICE at add_tensor when the library or the machine has no
     * CUDA; GA_E_INVAL with DGC or the automatic threshold (host tensors only). The SDK works on
     * its own non-blocking stream, made on the calling thread's current device at the first
     * device add_tensor: whatever writes the gradients (or reads params) on another stream must
     * be finished before ga_client_init / ga_client_step (synchronise it); each call returns
     * with its own device work done. */
    bool device;
} ga_tensor_options;

#define GA_TENSOR_OPTIONS_INIT                                                     \
    {sizeof(ga_tensor_options), GA_CODEC_NONE, {0.0f, 0.0f, 0.0f, 0, 0, 0, 0, 0.0f}, \
     {false, 0.0f, false, false, 0.0f, 0}, {false, 0.0f, 0.0f, 0.0f, GA_AUTO_LEVEL_MEAN}, false}

/* Per-step figures of the last ga_client_step, and totals. */
typedef struct ga_client_stats {
    double encode_s, push_s, pull_s, decode_s; /* last step: encoding until the first push could
                                                  start (later lanes' encoding overlaps pushes:
                                                  in push_s), pushing until the last push ended,
                                                  then waiting and pulling, and applying pulls */
    uint64_t bytes_pushed, bytes_pulled;       /* last step, payload bytes */
    uint64_t steps, retries, late_pushes;      /* totals */
    uint64_t rejoins; /* joins again after the server came back without this membership */
    uint64_t versions_lost; /* versions a server lost (--durability checkpoint, killed) that
                               this worker moved back over, all shards together */
} ga_client_stats;

/* Fills the options that a launcher's environment gives, for the variables that are set and not
 * empty (docs/launch.md has the table): server GRADAGG_SERVER; job GRADAGG_JOB, else torchrun's
 * TORCHELASTIC_RUN_ID (not "none"); rank GRADAGG_RANK ("any": GA_RANK_ANY), else RANK (torchrun), else
 * JOB_COMPLETION_INDEX (a Kubernetes indexed Job); world_size GRADAGG_WORLD_SIZE, else WORLD_SIZE;
 * auth_token GRADAGG_AUTH_TOKEN; tls_ca_file, tls_cert_file, tls_key_file, tls_target_name
 * GRADAGG_TLS_CA_FILE, _CERT_FILE, _KEY_FILE, _TARGET_NAME; min_world_size GRADAGG_MIN_WORLD_SIZE
 * (an elastic job); resume true when TORCHELASTIC_RESTART_COUNT > 0 (torchrun restarted the
 * workers, after a failure or a change of membership: they go on with their job, also when every
 * rank had left it). Call it after GA_CLIENT_OPTIONS_INIT
 * and before the options set in code, which then win. Strings point into the environment
 * (borrowed; ga_client_create copies them). GA_E_INVAL (msg names the variable) when a rank,
 * world size, minimum or restart count is not a decimal integer in range; *opt is then unchanged. */
ga_status ga_client_options_from_env(ga_client_options *opt, char *msg, size_t msg_cap);

/* Connects and joins. Returns owned (ga_client_destroy). Errors: GA_E_INVAL / GA_E_CONFIG for
 * bad options (also a TLS file that is not valid PEM of its kind), GA_E_IO (a TLS file cannot be
 * read), GA_E_UNAUTHENTICATED / GA_E_PERMISSION_DENIED (the token), the server's statuses (GA_E_JOB_CONFIG, GA_E_RANK, GA_E_RANK_HELD, ...),
 * GA_E_UNAVAILABLE or GA_E_DEADLINE after the retries (a Join is idempotent, so one past its
 * call timeout is retried too). On error *out is NULL and, when msg != NULL, a message is
 * written to msg[0..msg_cap). */
ga_status ga_client_create(const ga_client_options *opt, ga_client **out, char *msg, size_t msg_cap);
/* Leaves the job and frees the client. NULL is a no-op. */
void ga_client_destroy(ga_client *c);
/* ga_client_destroy for a worker that failed (an error it cannot go on from, an exception): its
 * Leave tells the job so, with `reason` (a short text; the server keeps 200 printable bytes), and
 * the job fails for every other rank unless its straggler policy goes on without this one
 * (docs/protocol.md, "Failed ranks"). A worker that finished calls ga_client_destroy. */
void ga_client_destroy_failed(ga_client *c, const char *reason);
/* Frees the client without leaving: its rank stays a member (lost once its lease lapses, unless
 * a process joins again as the same incarnation). For a member that is restarted as itself, a
 * node relay's (docs/relay.md). NULL is a no-op. */
void ga_client_abandon(ga_client *c);

/* One compressed delta that a pull applied: tensor `tensor` (registration order), elements
 * [offset, offset + count), with the codec, its parameters and the payload as received, taking
 * the tensor from version base_version to version. Borrowed for the call. */
typedef struct ga_pull_delta {
    int tensor;
    uint64_t offset, count;
    ga_codec_id codec;
    ga_codec_params params;
    const void *payload;
    size_t len;
    uint64_t version, base_version;
} ga_pull_delta;
/* tap(arg, d) for every delta chunk of every pull that succeeded, once it was applied, on the
 * thread that ran the pull (one per shard, so calls may come from several threads at once),
 * before ga_client_init or the step returns. fp32 chunks call nothing. NULL: none. For a node
 * relay that serves the same bytes to its workers (docs/relay.md). Before init. */
void ga_client_set_pull_tap(ga_client *c, void (*tap)(void *arg, const ga_pull_delta *d), void *arg);
/* Deletes the job opt names on every shard (and lane) of opt.server: its parameters, journal,
 * checkpoints and metric series (the DeleteJob RPC; a token, with TLS, as opt gives). Refused
 * (GA_E_RANK_HELD, naming the rank) while a rank of it is live; GA_E_UNKNOWN_JOB when no shard
 * has it. A finished job is removed by the server by itself after --finished-job-retention-s. */
ga_status ga_job_delete(const ga_client_options *opt, char *msg, size_t msg_cap);

/* Registers a tensor of shape[0..ndim) (product = n elements). params (n floats) is borrowed
 * and must outlive the client: ga_client_init and ga_client_step write the pulled parameters
 * into it. Before ga_client_init only. Writes the tensor's index. */
ga_status ga_client_add_tensor(ga_client *c, const char *name, const uint64_t *shape, int ndim, float *params,
                               const ga_tensor_options *opt, int *index);
/* Rank 0 sends each tensor's current params as its initial value; every other rank names its
 * tensors without values and waits (up to step_timeout_ms) until rank 0's init made them, so a
 * shard receives one copy of the model. A later init of the same shapes is a no-op. Then pulls
 * the current version into every params: all ranks start from rank 0's values. */
ga_status ga_client_init(ga_client *c);

/* One training step: grads[i] (n_i floats, borrowed, read only) for each tensor i in
 * registration order. Encodes, pushes, waits for the next version, writes it into params. A
 * push that arrives after its step closed (straggler) is folded back into the residual and
 * reported as GA_OK with stats.late_pushes incremented; the pull still brings the new version.
 * The first error from the server or the transport is returned, with ga_client_error.
 *
 * Retries: UNAVAILABLE, E_DRAINING, CANCELLED (a stopping server cancels its open calls) and
 * E_BUSY (the server's memory or this host's streams full for now) are retried with backoff; a
 * retried push resends the
 * same bytes (the server counts it once), a retried pull asks for fp32 when a broken attempt
 * already wrote part of the buffers. Errors, by stage:
 *  - before encoding (bad arguments, a NaN/Inf gradient: GA_E_NONFINITE): nothing changed;
 *  - a push the server refused (any status but the ones below): the payloads are folded back
 *    into the residual (codecs without one keep them aside), so these gradients go with the
 *    next step: do not push them again;
 *  - a push whose fate is unknown (GA_E_UNAVAILABLE after the retries, GA_E_DEADLINE,
 *    GA_E_CANCELLED, GA_E_TRANSPORT): it may have been counted, so it is not folded back;
 *  - a push answered as a duplicate of an earlier call's push of the same step (that call's
 *    answer was lost): these payloads were not counted and are folded back as a straggler's;
 *    a duplicate of a step this client never pushed was its predecessor's (the rank's
 *    incarnation before it), counted once, and nothing is folded back (docs/protocol.md,
 *    "Pushing a step again");
 *  - a failed pull after an acknowledged push: the buffers keep the old version (fp32 pieces
 *    may have been written: they hold a mix) and the next ga_client_step pulls first;
 *  - GA_E_NONFINITE from the server: the step's sum or optimizer overflowed and the job failed;
 *    the buffers hold the last finite version (docs/reliability.md, "Overflow");
 *  - GA_E_ROLLED_BACK: the server came back with the job below the version it had acknowledged
 *    to this client although it journals every acknowledged push (--durability acked): its data
 *    lost acknowledged steps; nothing moved (docs/reliability.md, "Durability").
 * Sync mode pushes the job's open step; async mode pushes a per-worker counter and pulls the
 * version the push acknowledgement names. With several shards these rules hold per shard for its
 * pieces; when a step reached some shards and not others, the next call pulls the first and
 * pushes to the others alone (docs/sdk.md, "Sharding"). */
ga_status ga_client_step(ga_client *c, const float *const *grads);

/* Asynchronous steps: ga_client_step run on the client's own step thread (made at the first
 * start), so the caller goes on, e.g. with the backward pass that produces the gradients of
 * another client's tensors (client/python's DistributedOptimizer keeps one client per bucket).
 *  - ga_client_step_start: GA_OK when the step started; its own result comes from the wait.
 *    GA_E_INVAL, nothing started, for a NULL client or grads, before init, or while a step is
 *    in flight; GA_E_NOMEM when the thread cannot be made. The grads array is copied (the
 *    pointers, not the gradients): the gradients are borrowed and must not change until the
 *    wait returns; the params buffers are written by the step thread meanwhile.
 *  - ga_client_step_poll: *done = false while a step is in flight, true otherwise. Any thread.
 *  - ga_client_step_wait: waits until no step is in flight and returns the last asynchronous
 *    step's status (GA_OK when none was started), ga_client_error its message. Any thread.
 * While a step is in flight every other call on c that returns a status refuses with GA_E_INVAL
 * (ga_client_set_epoch is ignored) and ga_client_error says that a step is in flight;
 * ga_client_version and ga_client_get_stats must not be called. ga_client_destroy waits for the
 * step first. Everything ga_client_step promises (errors by stage, retries, fold-back) holds. */
ga_status ga_client_step_start(ga_client *c, const float *const *grads);
ga_status ga_client_step_poll(ga_client *c, bool *done);
ga_status ga_client_step_wait(ga_client *c);

/* The learning rate the following steps' pushes carry: an LR schedule's value for the job's
 * server-side SGD or Adam, which applies it to each step (the lowest contributing rank's lr;
 * docs/protocol.md, "Learning rate"). Until the first call the job's configured lr applies.
 * GA_E_OPTIM unless lr is finite and >= 0; GA_E_INVAL for NULL or while a step is in flight. */
ga_status ga_client_set_lr(ga_client *c, float lr);
/* The worker's own training state, for a training checkpoint: each tensor's error-feedback
 * residual, DGC momentum, late gradients still to send and threshold adaptation, and the epoch
 * (the parameters and the optimizer state are the server's, and a restarted worker pulls them
 * at init). A worker that saves after a step, and whose successor (same tensors, codecs and
 * DGC settings, registered in the same order) loads the bytes after ga_client_init, sends the
 * same pushes as if it had gone on.
 *  - ga_client_state_size: the bytes ga_client_state_save writes now.
 *  - ga_client_state_save: into buf[cap]; *len = the size. GA_E_CAPACITY (nothing written) when
 *    cap is too small; GA_E_INVAL for NULL or while a step is in flight.
 *  - ga_client_state_load: GA_E_INVAL (ga_client_error says why, nothing changes) before init,
 *    while a step is in flight, or for bytes that are not such a state or do not fit the
 *    client's tensors. The byte layout: client/state.c. */
size_t ga_client_state_size(const ga_client *c);
ga_status ga_client_state_save(ga_client *c, void *buf, size_t cap, size_t *len);
ga_status ga_client_state_load(ga_client *c, const void *buf, size_t len);
/* DGC warm-up epoch (0-based); call at each epoch start. */
void ga_client_set_epoch(ga_client *c, uint32_t epoch);
/* The pushes that follow carry the sum of `weight` workers' gradients (PushChunk.weight; a node
 * relay's, docs/relay.md): a mean job divides by the weights of a step's pushes, not by their
 * count. In [1, GA_PUSH_WEIGHT_MAX]; 1 until called. GA_E_INVAL otherwise (nothing changes). */
#define GA_PUSH_WEIGHT_MAX 65536u
ga_status ga_client_set_push_weight(ga_client *c, uint32_t weight);
/* The threshold tensor `index` was last pushed with (2bit, 1bit; with the automatic threshold the
 * adapted one, before the first step the starting one) into *threshold, and the fraction of
 * its elements the last push sent as nonzero codes (2bit; NaN for other codecs or before the
 * first step) into *density (may be NULL). GA_E_INVAL for a bad index or another codec. */
ga_status ga_client_tensor_threshold(const ga_client *c, int index, float *threshold, float *density);

/* Layout of the public structs, for bindings that mirror them (client/python checks its ctypes
 * structures against this at import): sizeof(type) when field is NULL, else offsetof(type,
 * field); (size_t)-1 for an unknown type or field. Types: "ga_client_options",
 * "ga_tensor_options", "ga_codec_params", "ga_sgd_params", "ga_adam_params",
 * "ga_dgc_options", "ga_auto_threshold", "ga_client_stats"; fields by their C names. */
size_t ga_client_abi_layout(const char *type, const char *field);

/* Parameter version held in the buffers. */
uint64_t ga_client_version(const ga_client *c);
/* The newest step this rank has committed, as the servers know it now (a Status of the job on
 * every shard this client uses; with several shards, the oldest of theirs): *any false when
 * some shard holds no push of it. For a member restarted as itself (a node relay's, docs/relay.md)
 * that must tell which of its steps were counted. Errors: the Status call's. */
ga_status ga_client_committed_step(ga_client *c, bool *any, uint64_t *step);
/* The rank this client joined as: options.rank, or the one the server picked for GA_RANK_ANY. */
uint32_t ga_client_rank(const ga_client *c);
/* The message of the last error ("" when none). Valid until the next call on c. */
const char *ga_client_error(const ga_client *c);
void ga_client_get_stats(const ga_client *c, ga_client_stats *out);

#ifdef __cplusplus
}
#endif
#endif
