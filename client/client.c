/* The client's life: options, create (Join on every shard: join.c), tensors and their placement
 * over the shards, init, the step sequence, errors and stats, destroy (Leave). The work of a step
 * lives in push.c (encode, push, fold-back) and pull.c; shard.c runs it on every shard at once;
 * the helpers every file shares are in common.c. */
#define _POSIX_C_SOURCE 200809L
#include "client_internal.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "auto_threshold.h"
#include "discover.h"
#include "ga_lane.h"
#include "ga_alloc.h"
#include "ga_wire.h"

/* Most dimensions of a tensor's shape. */
#define GA_CLIENT_MAX_DIMS 16
/* Smallest chunk: one alignment block of fp32 values. */
#define GA_CLIENT_MIN_CHUNK ((size_t)GA_CHUNK_ALIGN * sizeof(float))
/* Largest chunk: well below any sane gRPC message limit. */
#define GA_CLIENT_MAX_CHUNK ((size_t)64 << 20)

static ga_status clear_error(ga_client *c);

ga_status ga_client_committed_step(ga_client *c, bool *any, uint64_t *step)
{
    if (!c || !any || !step || ga_client_in_flight(c)) return GA_E_INVAL;
    *any = true;
    *step = UINT64_MAX;
    for (uint32_t i = 0; i < c->nshards; i++) {
        ga_shard *sh = &c->shards[i];
        if (!sh->used) continue;
        Gradagg__V1__StatusRequest req = GRADAGG__V1__STATUS_REQUEST__INIT;
        req.job = sh->job;
        ProtobufCMessage *msg = NULL;
        char why[200];
        ga_status st =
            ga_call_unary(sh->ch, GA_METHOD_STATUS, &req.base, c->opt.call_timeout_ms, &msg, why, sizeof why);
        if (st != GA_OK)
            return ga_client_fail(c, st, "committed step: status of '%s' at %s: %s", sh->job, sh->addr, why);
        const Gradagg__V1__StatusResponse *r = (const Gradagg__V1__StatusResponse *)msg;
        bool found = false;
        for (size_t k = 0; k < r->n_members; k++) {
            const Gradagg__V1__MemberStatus *m = r->members[k];
            if (m->rank != c->opt.rank) continue;
            found = true;
            if (!m->has_pushed) *any = false;
            else if (m->last_step < *step) *step = m->last_step;
        }
        if (!found) *any = false;
        protobuf_c_message_free_unpacked(msg, &ga_wire_allocator);
    }
    if (!*any) *step = 0;
    return clear_error(c);
}

static ga_status clear_error(ga_client *c)
{
    c->err[0] = '\0';
    return GA_OK;
}

/* ---- create ---- */

static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Unique per process and per client: two clients created in the same nanosecond differ by the
 * counter. */
static uint64_t new_incarnation(void)
{
    static atomic_uint_fast64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = mix64((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec);
    x = mix64(x ^ ((uint64_t)getpid() << 20) ^ atomic_fetch_add(&counter, 1));
    return x ? x : 1;
}

static ga_status check_options(const ga_client_options *o, char *msg, size_t cap)
{
#define BAD(st, ...)                          \
    do {                                      \
        if (msg && cap) snprintf(msg, cap, __VA_ARGS__); \
        return (st);                          \
    } while (0)
    if (o->version != sizeof(ga_client_options))
        BAD(GA_E_INVAL, "options version %u, expected %zu (start from GA_CLIENT_OPTIONS_INIT)", o->version,
            sizeof(ga_client_options));
    if (!o->server || !o->server[0]) BAD(GA_E_INVAL, "options: server address is empty");
    if (!o->job || !o->job[0]) BAD(GA_E_INVAL, "options: job name is empty");
    if (o->world_size == 0) BAD(GA_E_CONFIG, "options: world_size must be at least 1");
    if (o->min_world_size > o->world_size)
        BAD(GA_E_CONFIG, "options: min_world_size %u exceeds world_size %u (the most ranks)", o->min_world_size,
            o->world_size);
    if (o->rank == GA_RANK_ANY && o->min_world_size == 0)
        BAD(GA_E_CONFIG, "options: rank GA_RANK_ANY needs an elastic job (min_world_size > 0)");
    if (o->rank >= o->world_size && o->rank != GA_RANK_ANY)
        BAD(GA_E_CONFIG, "options: rank %u outside [0, world_size %u)", o->rank, o->world_size);
    if (o->mode == GA_MODE_ASYNC && (o->min_world_size > 0 || o->staleness > 0))
        BAD(GA_E_CONFIG, "options: min_world_size and staleness need a sync job");
    if (o->mode != GA_MODE_SYNC && o->mode != GA_MODE_ASYNC) BAD(GA_E_CONFIG, "options: unknown mode %d", (int)o->mode);
    /* Async versions count each shard's own commits: they could not stay in step. */
    if (o->mode == GA_MODE_ASYNC && strchr(o->server, ','))
        BAD(GA_E_INVAL, "options: async jobs take one shard, server lists several ('%s')", o->server);
    if (o->lanes > GA_LANE_MAX) BAD(GA_E_CONFIG, "options: lanes %u, at most %u", o->lanes, GA_LANE_MAX);
    if (o->mode == GA_MODE_ASYNC && o->lanes > 1)
        BAD(GA_E_INVAL, "options: async jobs take one lane, lanes is %u", o->lanes);
    if (o->quorum > o->world_size)
        BAD(GA_E_CONFIG, "options: quorum %u exceeds world_size %u", o->quorum, o->world_size);
    ga_exec ex = GA_EXEC_CPU_INIT;
    ga_status st;
    switch (o->optimizer) {
    case GA_SERVER_OPTIM_NONE:
    case GA_SERVER_OPTIM_REDUCE:
        break;
    case GA_SERVER_OPTIM_SGD:
        /* n = 0: checks the hyper-parameters and does nothing. */
        if ((st = ga_sgd_step(&ex, &o->sgd, NULL, NULL, NULL, 0)) != GA_OK)
            BAD(GA_E_CONFIG, "options: sgd lr %g momentum %g weight_decay %g nesterov %d: %s", (double)o->sgd.lr,
                (double)o->sgd.momentum, (double)o->sgd.weight_decay, (int)o->sgd.nesterov, ga_strerror(st));
        break;
    case GA_SERVER_OPTIM_ADAM:
        if ((st = ga_adam_step(&ex, &o->adam, 1, NULL, NULL, NULL, NULL, 0)) != GA_OK)
            BAD(GA_E_CONFIG, "options: adam lr %g beta1 %g beta2 %g eps %g weight_decay %g: %s", (double)o->adam.lr,
                (double)o->adam.beta1, (double)o->adam.beta2, (double)o->adam.eps, (double)o->adam.weight_decay,
                ga_strerror(st));
        break;
    default:
        BAD(GA_E_CONFIG, "options: unknown optimizer %d", (int)o->optimizer);
    }
    if (!ga_codec_name(o->pull_codec)) BAD(GA_E_CONFIG, "options: unknown pull codec %d", (int)o->pull_codec);
    ga_codec_params pp = ga_client_codec_params(o->pull_codec, &o->pull_params);
    if ((st = ga_codec_params_validate(o->pull_codec, &pp)) != GA_OK)
        BAD(GA_E_CONFIG, "options: pull codec %s: %s", ga_codec_name(o->pull_codec), ga_strerror(st));
    if (o->pull_auto_bits != 0.0f && o->pull_codec != GA_CODEC_2BIT)
        BAD(GA_E_CONFIG, "options: pull_auto_bits %g needs the 2bit pull codec, not %s", (double)o->pull_auto_bits,
            ga_codec_name(o->pull_codec));
    if (o->pull_auto_bits != 0.0f && !(o->pull_auto_bits > 0.0f && (double)o->pull_auto_bits <= GA_LOG2_3))
        BAD(GA_E_CONFIG, "options: pull_auto_bits %g outside (0, log2(3) = 1.585]", (double)o->pull_auto_bits);
    if (o->chunk_bytes < GA_CLIENT_MIN_CHUNK || o->chunk_bytes > GA_CLIENT_MAX_CHUNK)
        BAD(GA_E_CONFIG, "options: chunk_bytes %zu outside [%zu, %zu]", o->chunk_bytes, GA_CLIENT_MIN_CHUNK,
            GA_CLIENT_MAX_CHUNK);
    if (o->call_timeout_ms == 0 || o->step_timeout_ms == 0)
        BAD(GA_E_CONFIG, "options: call_timeout_ms and step_timeout_ms must be > 0");
    if (o->backoff_max_ms < o->backoff_ms)
        BAD(GA_E_CONFIG, "options: backoff_max_ms %u below backoff_ms %u", o->backoff_max_ms, o->backoff_ms);
    if (o->threads < 0) BAD(GA_E_CONFIG, "options: threads %d < 0", o->threads);
    if (o->auth_token && o->auth_token[0]) {
        size_t n = strlen(o->auth_token);
        for (size_t i = 0; i < n; i++) {
            /* Never echo the token: say where the bad byte is. */
            unsigned char ch = (unsigned char)o->auth_token[i];
            if (ch <= 0x20 || ch >= 0x7f)
                BAD(GA_E_CONFIG, "options: auth_token byte %zu is 0x%02x; expected printable ASCII without spaces", i,
                    ch);
        }
    }
    return GA_OK;
#undef BAD
}

/* Receive limit: the server's pull chunks are sized by the server, not by chunk_bytes. */
static size_t message_limit(size_t chunk_bytes)
{
    size_t lim = chunk_bytes + ((size_t)1 << 20);
    return lim < ((size_t)64 << 20) ? (size_t)64 << 20 : lim;
}

/* A memset the compiler may not drop as a dead store. */
static void wipe(void *p, size_t n)
{
    volatile unsigned char *v = p;
    while (n--) *v++ = 0;
}

/* A channel per address, each with the same TLS settings and token: the paths are read now, so
 * the client keeps none of them. The lanes of an address share its lane 0's channel. */
static ga_status open_channels(ga_client *c, const ga_client_options *opt)
{
    char authz[16 + 4096];
    bool token = opt->auth_token && opt->auth_token[0];
    if (token && (size_t)snprintf(authz, sizeof authz, GA_WIRE_AUTH_SCHEME " %s", opt->auth_token) >= sizeof authz)
        return ga_client_fail(c, GA_E_CONFIG, "options: auth_token longer than %zu characters", sizeof authz - 8);
    ga_channel_security sec = {opt->tls_ca_file, opt->tls_cert_file, opt->tls_key_file, opt->tls_target_name,
                               token ? authz : NULL, opt->backoff_max_ms};
    char why[sizeof c->err - 64];
    ga_status st = GA_OK;
    for (uint32_t i = 0; i < c->nshards && st == GA_OK; i++) {
        ga_shard *sh = &c->shards[i];
        if (sh->lane > 0) {
            sh->ch = c->shards[i - sh->lane].ch;
            continue;
        }
        st = ga_channel_create_secure(sh->addr, message_limit(opt->chunk_bytes), &sec, &sh->ch, why, sizeof why);
        if (st != GA_OK) ga_client_fail(c, st, "channel to %s: %s", sh->addr, why);
    }
    if (token) wipe(authz, sizeof authz);
    return st;
}

/* A server option naming a shard set by one DNS name ("shards://NAME:PORT", discover.h) becomes
 * the list of its shards' addresses, asked of the servers behind NAME with the channels' TLS
 * settings and the retry budget. Any other server option is kept. */
static ga_status resolve_server(ga_client *c, const ga_client_options *opt)
{
    if (!ga_discover_named(c->server)) return GA_OK;
    ga_channel_security sec = {opt->tls_ca_file, opt->tls_cert_file, opt->tls_key_file, opt->tls_target_name, NULL,
                               opt->backoff_max_ms};
    char *list = NULL, why[sizeof c->err - 64];
    ga_status st = ga_discover_shards(c->server, &sec, opt->call_timeout_ms, opt->retry_budget_ms, opt->backoff_ms,
                                      opt->backoff_max_ms, &list, why, sizeof why);
    if (st != GA_OK) return ga_client_fail(c, st, "%s", why);
    ga_free(c->server);
    c->server = list;
    c->opt.server = list;
    return GA_OK;
}

/* A client that never trained (a failed create, ga_job_delete): its shards and names. NULL ok. */
static void client_shell_free(ga_client *c)
{
    if (!c) return;
    ga_shards_free(c);
    ga_free(c->server);
    ga_free(c->job);
    ga_free(c);
}

ga_status ga_client_create(const ga_client_options *opt, ga_client **out, char *msg, size_t msg_cap)
{
    if (out) *out = NULL;
    if (msg && msg_cap) msg[0] = '\0';
    if (!opt || !out) {
        if (msg && msg_cap) snprintf(msg, msg_cap, "create: %s is NULL", opt ? "out" : "options");
        return GA_E_INVAL;
    }
    ga_status st = check_options(opt, msg, msg_cap);
    if (st != GA_OK) return st;

    ga_client *c = ga_calloc(1, sizeof *c);
    if (!c) goto nomem;
    c->opt = *opt;
    c->rejoin = ga_shard_rejoin;
    c->server = ga_strdup(opt->server);
    c->job = ga_strdup(opt->job);
    if (!c->server || !c->job) goto nomem;
    c->opt.server = c->server;
    c->opt.job = c->job;
    c->ex = (ga_exec)GA_EXEC_CPU_INIT;
    c->ex.max_threads = opt->threads;
    c->incarnation = opt->incarnation ? opt->incarnation : new_incarnation();

    uint32_t lanes = opt->lanes ? opt->lanes : 1;
    if ((st = resolve_server(c, opt)) != GA_OK || (st = ga_shards_parse(c, c->server, lanes)) != GA_OK) goto fail;
    st = open_channels(c, opt);
    c->opt.tls_ca_file = c->opt.tls_cert_file = c->opt.tls_key_file = c->opt.tls_target_name = NULL;
    c->opt.auth_token = NULL; /* borrowed by create only; the channels hold their own copy */
    if (st != GA_OK || (st = ga_shards_start(c)) != GA_OK) goto fail;
    /* A rank the server picks: the first shard picks it, the others are joined with it. */
    bool pick = c->opt.rank == GA_RANK_ANY;
    for (uint32_t i = 0; i < c->nshards; i++) c->shards[i].active = !pick || i == 0;
    ga_shards_run(c, ga_shard_join_task);
    if (pick && ga_shards_error(c) == GA_OK) {
        for (uint32_t i = 0; i < c->nshards; i++) c->shards[i].active = i > 0;
        ga_shards_run(c, ga_shard_join_task);
        for (uint32_t i = 0; i < c->nshards; i++) c->shards[i].active = true;
    }
    if ((st = ga_shards_error(c)) != GA_OK) {
        /* The shards that did join should not hold the rank. */
        for (uint32_t i = 0; i < c->nshards; i++) c->shards[i].active = c->shards[i].st == GA_OK;
        char err[sizeof c->err];
        memcpy(err, c->err, sizeof err);
        ga_shards_run(c, ga_shard_leave_task);
        memcpy(c->err, err, sizeof err);
        goto fail;
    }
    c->version = ga_shards_version(c);
    c->joined = true;
    if ((st = ga_heartbeat_start(c)) != GA_OK) {
        ga_client_fail(c, st, "create: cannot start the heartbeat thread");
        ga_shards_run(c, ga_shard_leave_task);
        goto fail;
    }
    *out = c;
    return GA_OK;

nomem:
    st = GA_E_NOMEM;
    if (c) ga_client_fail(c, st, "create: out of memory");
fail:
    if (msg && msg_cap) snprintf(msg, msg_cap, "%s", c ? c->err : "create: out of memory");
    client_shell_free(c);
    return st;
}

/* ---- DeleteJob ---- */

static ga_status delete_attempt(ga_client *c, ga_shard *sh, void *arg, char *why, size_t cap)
{
    (void)arg;
    Gradagg__V1__DeleteJobRequest req = GRADAGG__V1__DELETE_JOB_REQUEST__INIT;
    req.job = sh->job;
    ProtobufCMessage *resp = NULL;
    ga_status st = ga_call_unary(sh->ch, GA_METHOD_DELETE_JOB, &req.base, c->opt.call_timeout_ms, &resp, why, cap);
    if (st == GA_OK) protobuf_c_message_free_unpacked(resp, &ga_wire_allocator);
    return st;
}

ga_status ga_job_delete(const ga_client_options *opt, char *msg, size_t msg_cap)
{
    if (msg && msg_cap) msg[0] = '\0';
    if (!opt) return GA_E_INVAL;
    ga_status st = check_options(opt, msg, msg_cap);
    if (st != GA_OK) return st;
    ga_client *c = ga_calloc(1, sizeof *c);
    if (!c || !(c->server = ga_strdup(opt->server)) || !(c->job = ga_strdup(opt->job))) {
        st = GA_E_NOMEM;
        if (c) ga_client_fail(c, st, "delete: out of memory");
        goto out;
    }
    c->opt = *opt;
    c->opt.server = c->server, c->opt.job = c->job;
    uint32_t lanes = opt->lanes ? opt->lanes : 1;
    if ((st = resolve_server(c, opt)) != GA_OK || (st = ga_shards_parse(c, c->server, lanes)) != GA_OK ||
        (st = open_channels(c, opt)) != GA_OK)
        goto out;
    uint32_t unknown = 0;
    for (uint32_t i = 0; i < c->nshards && st == GA_OK; i++) {
        ga_shard *sh = &c->shards[i];
        char why[256];
        ga_status one = ga_shard_retry(c, sh, delete_attempt, NULL, why, sizeof why);
        if (one == GA_E_UNKNOWN_JOB) unknown++;
        else if (one != GA_OK) st = ga_client_fail(c, one, "delete job '%s' at %s: %s", sh->job, sh->addr, why);
    }
    if (st == GA_OK && unknown == c->nshards)
        st = ga_client_fail(c, GA_E_UNKNOWN_JOB, "delete: job '%s' does not exist", c->job);
out:
    if (st != GA_OK && msg && msg_cap) snprintf(msg, msg_cap, "%s", c ? c->err : "delete: out of memory");
    client_shell_free(c);
    return st;
}

/* ---- destroy ---- */

static void tensor_free(ga_tensor *t)
{
    ga_free(t->name);
    for (uint32_t j = 0; t->pieces && j < t->npieces; j++) ga_free(t->pieces[j].name);
    ga_free(t->pieces);
    ga_free(t->shape);
    if (t->device) {
        ga_client_device_tensor_free(t);
    } else {
        ga_free(t->residual);
        ga_free(t->work);
        ga_free(t->late);
    }
    ga_free(t->u);
    ga_free(t->buf);
    ga_free(t->parts);
}

void ga_client_set_pull_tap(ga_client *c, void (*tap)(void *arg, const ga_pull_delta *d), void *arg)
{
    if (!c) return;
    c->pull_tap = tap;
    c->pull_tap_arg = arg;
}

void ga_client_abandon(ga_client *c)
{
    if (!c) return;
    c->abandoned = true;
    ga_client_destroy(c);
}

void ga_client_destroy_failed(ga_client *c, const char *reason)
{
    if (!c) return;
    c->failure = reason ? reason : "";
    ga_client_destroy(c);
}

void ga_client_destroy(ga_client *c)
{
    if (!c) return;
    ga_client_async_free(c);
    ga_heartbeat_stop(c);
    for (uint32_t i = 0; i < c->nshards; i++) c->shards[i].active = true;
    if (!c->abandoned) ga_shards_run(c, ga_shard_leave_task);
    ga_shards_free(c);
    for (size_t i = 0; i < c->ntensors; i++) tensor_free(&c->tensors[i]);
    ga_free(c->tensors);
    ga_free(c->scratch);
    ga_free(c->sample);
    ga_cuda_stream_destroy(c->stream);
    ga_free(c->server);
    ga_free(c->job);
    ga_free(c);
}

/* ---- tensors ---- */

static ga_status check_tensor(ga_client *c, const char *name, const uint64_t *shape, int ndim, float *params,
                              const ga_tensor_options *opt, size_t *n)
{
    if (c->inited) return ga_client_fail(c, GA_E_INVAL, "add_tensor '%s': after init", name ? name : "");
    if (!name || !name[0]) return ga_client_fail(c, GA_E_INVAL, "add_tensor: empty name");
    if (!shape || ndim < 1 || ndim > GA_CLIENT_MAX_DIMS)
        return ga_client_fail(c, GA_E_INVAL, "add_tensor '%s': ndim %d outside [1, %d]", name, ndim,
                              GA_CLIENT_MAX_DIMS);
    if (!params) return ga_client_fail(c, GA_E_INVAL, "add_tensor '%s': params is NULL", name);
    if (opt && opt->version != sizeof(ga_tensor_options))
        return ga_client_fail(c, GA_E_INVAL, "add_tensor '%s': options version %u, expected %zu", name,
                              opt->version, sizeof(ga_tensor_options));
    uint64_t prod = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 0) return ga_client_fail(c, GA_E_INVAL, "add_tensor '%s': dimension %d is 0", name, d);
        if (prod > (uint64_t)(SIZE_MAX / sizeof(float)) / shape[d])
            return ga_client_fail(c, GA_E_TOO_LARGE, "add_tensor '%s': too many elements", name);
        prod *= shape[d];
    }
    for (size_t i = 0; i < c->ntensors; i++)
        if (strcmp(c->tensors[i].name, name) == 0)
            return ga_client_fail(c, GA_E_INVAL, "add_tensor '%s': name already registered", name);
    if (c->nshards > 1 && strchr(name, '@'))
        return ga_client_fail(c, GA_E_INVAL, "add_tensor '%s': '@' is kept for the names of shard pieces", name);
    *n = (size_t)prod;
    return GA_OK;
}

static ga_status check_tensor_codec(ga_client *c, const char *name, const ga_tensor_options *o,
                                    ga_codec_params *cp)
{
    if (!ga_codec_name(o->codec)) return ga_client_fail(c, GA_E_CODEC, "add_tensor '%s': unknown codec %d", name, (int)o->codec);
    *cp = ga_client_codec_params(o->codec, &o->params);
    ga_status st = ga_codec_params_validate(o->codec, cp);
    if (st != GA_OK)
        return ga_client_fail(c, st, "add_tensor '%s': codec %s: %s", name, ga_codec_name(o->codec), ga_strerror(st));
    if (o->auto_threshold.enabled) {
        if (o->codec != GA_CODEC_2BIT)
            return ga_client_fail(c, GA_E_INVAL, "add_tensor '%s': auto_threshold needs the 2bit codec, not %s", name,
                                  ga_codec_name(o->codec));
        ga_auto_threshold a;
        char why[160];
        if ((st = ga_auto_resolve(&o->auto_threshold, &a, why, sizeof why)) != GA_OK)
            return ga_client_fail(c, st, "add_tensor '%s': %s", name, why);
    }
    if (o->device) {
        if (!ga_cuda_built())
            return ga_client_fail(c, GA_E_NO_CUDA, "add_tensor '%s': device tensor, but libgradagg was built without CUDA",
                                  name);
        if (ga_cuda_device_count() == 0)
            return ga_client_fail(c, GA_E_NO_DEVICE, "add_tensor '%s': device tensor, but no CUDA device is available",
                                  name);
        if (o->dgc.enabled || o->auto_threshold.enabled)
            return ga_client_fail(c, GA_E_INVAL, "add_tensor '%s': %s is for host tensors only, not device ones", name,
                                  o->dgc.enabled ? "DGC" : "auto_threshold");
    }
    const ga_dgc_options *d = &o->dgc;
    if (!d->enabled) return GA_OK;
    if (!(d->momentum >= 0.0f && d->momentum < 1.0f))
        return ga_client_fail(c, GA_E_CONFIG, "add_tensor '%s': DGC momentum %g outside [0, 1)", name,
                              (double)d->momentum);
    if (d->nesterov && d->momentum == 0.0f)
        return ga_client_fail(c, GA_E_CONFIG, "add_tensor '%s': DGC nesterov needs momentum > 0", name);
    if (!(d->clip_norm >= 0.0f) || isinf(d->clip_norm))
        return ga_client_fail(c, GA_E_CONFIG, "add_tensor '%s': DGC clip_norm %g must be finite and >= 0", name,
                              (double)d->clip_norm);
    return GA_OK;
}

/* t's pieces over the shards (placement.h): the same on every rank for the same options. */
static ga_status place_tensor(ga_client *c, ga_tensor *t)
{
    size_t unit;
    ga_status st = ga_placement_unit(t->codec, &t->cp, c->opt.chunk_bytes, &unit);
    if (st != GA_OK) return st;
    ga_placement_piece plan[GA_PLACEMENT_MAX_SHARDS];
    uint32_t np = ga_placement_plan(t->name, t->n, unit, c->opt.shard_split_elements, c->nshards, plan);
    if (!(t->pieces = ga_calloc(np, sizeof *t->pieces))) return GA_E_NOMEM;
    t->npieces = np;
    for (uint32_t j = 0; j < np; j++) {
        ga_piece *pc = &t->pieces[j];
        pc->shard = plan[j].shard;
        pc->off = plan[j].off;
        pc->count = plan[j].count;
        size_t len = (size_t)ga_placement_piece_name(t->name, j, np, NULL, 0) + 1;
        if (!(pc->name = ga_malloc(len))) return GA_E_NOMEM;
        ga_placement_piece_name(t->name, j, np, pc->name, len);
    }
    return GA_OK;
}

ga_status ga_client_add_tensor(ga_client *c, const char *name, const uint64_t *shape, int ndim, float *params,
                               const ga_tensor_options *opt, int *index)
{
    if (!c) return GA_E_INVAL;
    static const ga_tensor_options defaults = GA_TENSOR_OPTIONS_INIT;
    size_t n = 0;
    ga_status st = check_tensor(c, name, shape, ndim, params, opt, &n);
    if (st != GA_OK) return st;
    if (!opt) opt = &defaults;
    ga_codec_params cp;
    if ((st = check_tensor_codec(c, name, opt, &cp)) != GA_OK) return st;

    if (c->ntensors == c->tensors_cap) {
        size_t cap = c->tensors_cap ? 2 * c->tensors_cap : 8;
        ga_tensor *grown = ga_calloc(cap, sizeof *grown);
        if (!grown) return ga_client_fail(c, GA_E_NOMEM, "add_tensor '%s': out of memory", name);
        if (c->ntensors) memcpy(grown, c->tensors, c->ntensors * sizeof *grown);
        ga_free(c->tensors);
        c->tensors = grown;
        c->tensors_cap = cap;
    }
    ga_tensor t = {0};
    t.name = ga_strdup(name);
    t.shape = ga_malloc((size_t)ndim * sizeof *t.shape);
    bool ok = t.name && t.shape;
    t.ndim = ndim;
    t.n = n;
    t.params = params;
    t.device = opt->device;
    t.codec = opt->codec;
    t.cp = cp;
    t.dgc = opt->dgc;
    if (opt->auto_threshold.enabled) {
        ga_auto_resolve(&opt->auto_threshold, &t.autot, NULL, 0); /* checked above */
        t.auto_rho = ga_auto_density_for_bits((double)t.autot.bits);
    }
    t.threshold = cp.threshold;
    t.density = NAN;
    if (t.device) {
        t.dparams = params;
        t.params = NULL;
        if (ok && (st = ga_client_device_tensor(c, &t)) != GA_OK) {
            tensor_free(&t);
            return ga_client_fail(c, st, "add_tensor '%s': device buffers for %zu elements: %s", name, n,
                                  ga_strerror(st));
        }
    } else if (ok && ga_codec_has_residual(opt->codec)) {
        ok = (t.residual = ga_calloc(n, sizeof(float))) != NULL;
    }
    if (ok && t.dgc.enabled && t.dgc.momentum != 0.0f) ok = (t.u = ga_calloc(n, sizeof(float))) != NULL;
    if (ok && (st = place_tensor(c, &t)) != GA_OK) {
        tensor_free(&t);
        if (st == GA_E_NOMEM) return ga_client_fail(c, st, "add_tensor '%s': out of memory", name);
        return ga_client_fail(c, st, "add_tensor '%s': placing it over the shards: %s", name, ga_strerror(st));
    }
    if (!ok) {
        tensor_free(&t);
        return ga_client_fail(c, GA_E_NOMEM, "add_tensor '%s': out of memory for %zu elements", name, n);
    }
    memcpy(t.shape, shape, (size_t)ndim * sizeof *t.shape);
    c->tensors[c->ntensors] = t;
    if (index) *index = (int)c->ntensors;
    c->ntensors++;
    return clear_error(c);
}

/* ---- init and steps ---- */

/* Which piece of each tensor lives on each shard; a shard without any takes no part in steps. */
static ga_status map_pieces(ga_client *c)
{
    for (uint32_t i = 0; i < c->nshards; i++) {
        ga_shard *sh = &c->shards[i];
        ga_free(sh->pieces); /* a failed init may be followed by more tensors */
        if (!(sh->pieces = ga_calloc(c->ntensors, sizeof *sh->pieces))) return GA_E_NOMEM;
        sh->used = false;
    }
    for (size_t k = 0; k < c->ntensors; k++) {
        for (uint32_t j = 0; j < c->tensors[k].npieces; j++) {
            ga_piece *pc = &c->tensors[k].pieces[j];
            c->shards[pc->shard].pieces[k] = pc;
            c->shards[pc->shard].used = true;
        }
    }
    return GA_OK;
}

ga_status ga_client_init(ga_client *c)
{
    if (!c || ga_client_in_flight(c)) return GA_E_INVAL;
    if (c->inited) return ga_client_fail(c, GA_E_INVAL, "init: already done");
    if (c->ntensors == 0) return ga_client_fail(c, GA_E_INVAL, "init: no tensors registered");
    /* Device tensors send their device values: through the host mirror. */
    ga_status st = ga_client_device_load(c);
    if (st != GA_OK) return ga_client_fail(c, st, "init: copying device tensors to the host: %s", ga_strerror(st));
    if (map_pieces(c) != GA_OK) return ga_client_fail(c, GA_E_NOMEM, "init: out of memory");
    /* Safe to repeat after a failure: a second init of the same tensors is a no-op. Rank 0's
     * values are the initial ones; the other ranks await them rather than send W copies. */
    for (uint32_t i = 0; i < c->nshards; i++) c->shards[i].active = c->shards[i].used;
    ga_shards_run(c, c->opt.rank == 0 ? ga_shard_send_init : ga_shard_await_init);
    if ((st = ga_shards_error(c)) != GA_OK) return st;
    for (uint32_t i = 0; i < c->nshards; i++) c->shards[i].exact = false;
    /* The version each shard's first push starts from: its open step at the Join (one past the
     * published version for a rank an elastic job's open step could no longer take). */
    for (uint32_t i = 0; i < c->nshards; i++) {
        c->shards[i].active = c->shards[i].used;
        c->shards[i].want = c->opt.mode == GA_MODE_SYNC ? c->shards[i].step : 0;
    }
    if ((st = ga_client_pull_shards(c)) != GA_OK) return st;
    for (uint32_t i = 0; i < c->nshards; i++) c->shards[i].step = c->shards[i].version;
    c->inited = true;
    return clear_error(c);
}

ga_status ga_client_tensor_threshold(const ga_client *c, int index, float *threshold, float *density)
{
    if (!c || ga_client_in_flight(c) || !threshold || index < 0 || (size_t)index >= c->ntensors) return GA_E_INVAL;
    const ga_tensor *t = &c->tensors[index];
    if (t->codec != GA_CODEC_2BIT && t->codec != GA_CODEC_1BIT) return GA_E_INVAL;
    *threshold = t->threshold;
    if (density) *density = t->codec == GA_CODEC_2BIT ? t->density : NAN;
    return GA_OK;
}

ga_status ga_client_set_lr(ga_client *c, float lr)
{
    if (!c || ga_client_in_flight(c)) return GA_E_INVAL;
    if (!(isfinite(lr) && lr >= 0.0f)) return ga_client_fail(c, GA_E_OPTIM, "set_lr: lr %g (need a finite lr >= 0)", (double)lr);
    c->has_lr = true;
    c->lr = lr;
    return GA_OK;
}

ga_status ga_client_set_push_weight(ga_client *c, uint32_t weight)
{
    if (!c || ga_client_in_flight(c)) return GA_E_INVAL;
    if (weight < 1 || weight > GA_PUSH_WEIGHT_MAX)
        return ga_client_fail(c, GA_E_INVAL, "set_push_weight: %u outside [1, %u]", weight, GA_PUSH_WEIGHT_MAX);
    c->push_weight = weight;
    return GA_OK;
}

void ga_client_set_epoch(ga_client *c, uint32_t epoch)
{
    if (c && !ga_client_in_flight(c)) c->epoch = epoch;
}

uint64_t ga_client_version(const ga_client *c) { return c ? c->version : 0; }

uint32_t ga_client_rank(const ga_client *c) { return c ? c->opt.rank : 0; }

const char *ga_client_error(const ga_client *c)
{
    if (!c) return "client is NULL";
    if (ga_client_in_flight(c))
        return "a step is in flight (ga_client_step_start): only ga_client_step_poll and ga_client_step_wait "
               "may be called until it ends";
    return c->err;
}

void ga_client_get_stats(const ga_client *c, ga_client_stats *out)
{
    if (c && out) *out = c->stats;
}
