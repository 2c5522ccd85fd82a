/* The relay's upstream member: a thread running one SDK command at a time (uplink.h). */
#include "uplink.h"

#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bundle/bundle.h"
#include "ga_alloc.h"
#include "gradagg.h"
#include "job.h"

typedef enum command { CMD_NONE, CMD_INIT, CMD_STEP, CMD_EXIT } command;

typedef struct done_handle {
    uv_async_t async;
    struct ga_uplink *u; /* NULL once the uplink was destroyed */
} done_handle;

struct ga_uplink {
    ga_client_options opt;
    char *server, *job;
    char *token; /* the calls' bearer token (wiped when freed); NULL: none */
    ga_codec_id codec;
    ga_codec_params params;
    bool auto_threshold;
    ga_client *client;
    float **values; /* per tensor: the parameters the SDK pulls into */
    size_t ntensors;
    /* The deltas the running command's pulls applied, per tensor (the pull tap; shard threads). */
    pthread_mutex_t tap_mu;
    ga_pull_delta **deltas;
    size_t *ndeltas, *deltas_cap;
    ga_uplink_tensor *tensors; /* the init's, copied */
    uint64_t **shapes;

    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    command cmd;  /* the next command (CMD_NONE: none) */
    command last; /* the command the result is of */
    bool busy;    /* a command was handed and its result not yet taken by the loop */
    bool orphan;  /* destroyed while busy: the thread frees everything when its command returns */
    bool running; /* the thread runs a command or the leave */
    bool leave;   /* a leave is asked for: the thread runs it before any later command */
    bool leave_failed;
    bool rejoin;  /* the init is a rejoin (ga_uplink_rejoin): waits out the upstream's failure */
    bool departed; /* left (or leaving) and not joined again: steps are refused */
    char leave_reason[200];
    uint64_t step;
    uint32_t weight;
    const float *const *sums;

    ga_status st; /* the result */
    char why[512];
    uint64_t version;
    bool counted;
    uint64_t counted_step;
    uint64_t bytes_pushed, bytes_pulled;

    done_handle *done_h;
    ga_uplink_done done;
    void *arg;
};

/* ---- on the uplink's thread (and, for the tap, the SDK's shard threads) ---- */

static void deltas_clear(ga_uplink *u)
{
    for (size_t i = 0; u->deltas && i < u->ntensors; i++) {
        for (size_t k = 0; k < u->ndeltas[i]; k++) ga_free((void *)u->deltas[i][k].payload);
        u->ndeltas[i] = 0;
    }
}

/* The SDK's pull tap: a copy of each delta it applied. Out of memory: the tensor's list is
 * marked incomplete (deltas_cap SIZE_MAX), and the relay serves fp32 for it. */
static void tap(void *arg, const ga_pull_delta *d)
{
    ga_uplink *u = arg;
    size_t i = (size_t)d->tensor;
    pthread_mutex_lock(&u->tap_mu);
    if (u->deltas_cap[i] != SIZE_MAX && u->ndeltas[i] == u->deltas_cap[i]) {
        size_t ncap = u->deltas_cap[i] ? 2 * u->deltas_cap[i] : 8;
        ga_pull_delta *grown = ga_malloc(ncap * sizeof *grown);
        if (grown) {
            if (u->ndeltas[i]) memcpy(grown, u->deltas[i], u->ndeltas[i] * sizeof *grown);
            ga_free(u->deltas[i]);
            u->deltas[i] = grown;
        }
        u->deltas_cap[i] = grown ? ncap : SIZE_MAX;
    }
    void *copy = u->deltas_cap[i] != SIZE_MAX ? ga_malloc(d->len ? d->len : 1) : NULL;
    if (copy) {
        memcpy(copy, d->payload, d->len);
        u->deltas[i][u->ndeltas[i]] = *d;
        u->deltas[i][u->ndeltas[i]++].payload = copy;
    } else {
        u->deltas_cap[i] = SIZE_MAX;
    }
    pthread_mutex_unlock(&u->tap_mu);
}

static ga_status fail(ga_uplink *u, ga_status st, const char *what)
{
    snprintf(u->why, sizeof u->why, "upstream %s: %s", what,
             u->client ? ga_client_error(u->client) : "");
    return st;
}

static ga_status join_and_init(ga_uplink *u)
{
    char msg[256];
    ga_client_abandon(u->client); /* an earlier init's that failed: no Leave, the same member */
    u->client = NULL;
    ga_status st = ga_client_create(&u->opt, &u->client, msg, sizeof msg);
    if (st != GA_OK) {
        snprintf(u->why, sizeof u->why, "upstream join of '%s' at %s: %s", u->job, u->server, msg);
        return st;
    }
    ga_client_set_pull_tap(u->client, tap, u);
    for (size_t i = 0; i < u->ntensors; i++) {
        ga_tensor_options to = GA_TENSOR_OPTIONS_INIT;
        to.codec = u->codec;
        to.params = u->params;
        to.auto_threshold.enabled = u->auto_threshold;
        int index;
        st = ga_client_add_tensor(u->client, u->tensors[i].name, u->tensors[i].shape, (int)u->tensors[i].ndim,
                                  u->values[i], &to, &index);
        if (st != GA_OK) return fail(u, st, "add_tensor");
    }
    /* A relay restarted in place pushes its node's sum of a step again: answered as a duplicate
     * of its predecessor's push, counted once upstream (a new client never folds it back). */
    if ((st = ga_client_init(u->client)) != GA_OK) return fail(u, st, "init");
    u->version = ga_client_version(u->client);
    if ((st = ga_client_committed_step(u->client, &u->counted, &u->counted_step)) != GA_OK)
        return fail(u, st, "status");
    return GA_OK;
}

static bool orphaned(ga_uplink *u)
{
    pthread_mutex_lock(&u->mu);
    bool o = u->orphan;
    pthread_mutex_unlock(&u->mu);
    return o;
}

/* An init, or a rejoin after the upstream job failed: while the upstream still holds that
 * failure (another node's member has not left yet), GA_E_RANK_FAILED, tried again for up to
 * REJOIN_WAIT_MS. */
#define REJOIN_WAIT_MS 120000u
static ga_status run_init(ga_uplink *u)
{
    ga_status st = join_and_init(u);
    for (uint32_t waited = 0, ms = 50; u->rejoin && st == GA_E_RANK_FAILED && waited < REJOIN_WAIT_MS && !orphaned(u);
         waited += ms, ms = ms < 2000 ? 2 * ms : 2000) {
        struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        st = join_and_init(u);
    }
    return st;
}

static ga_status run_step(ga_uplink *u)
{
    deltas_clear(u);
    for (size_t i = 0; i < u->ntensors; i++)
        if (u->deltas_cap[i] == SIZE_MAX) u->deltas_cap[i] = 0; /* marked incomplete last time */
    ga_status st = ga_client_set_push_weight(u->client, u->weight);
    if (st == GA_OK) st = ga_client_step(u->client, (const float *const *)u->sums);
    if (st != GA_OK) return fail(u, st, "step");
    ga_client_stats stats;
    ga_client_get_stats(u->client, &stats);
    u->bytes_pushed = stats.bytes_pushed;
    u->bytes_pulled = stats.bytes_pulled;
    u->version = ga_client_version(u->client);
    if (u->version != u->step + 1) {
        snprintf(u->why, sizeof u->why,
                 "upstream step %llu gave version %llu, not %llu: the node and the upstream job disagree on the step",
                 (unsigned long long)u->step, (unsigned long long)u->version, (unsigned long long)u->step + 1);
        return GA_E_VERSION;
    }
    return GA_OK;
}

/* The client leaves (failed or finished) and is freed. */
static void run_leave(ga_uplink *u)
{
    if (!u->client) return;
    if (u->leave_failed)
        ga_client_destroy_failed(u->client, u->leave_reason);
    else
        ga_client_destroy(u->client);
    u->client = NULL;
}

static void token_free(ga_uplink *u)
{
    if (u->token) OPENSSL_cleanse(u->token, strlen(u->token));
    ga_free(u->token);
    u->token = NULL;
}

static void uplink_free(ga_uplink *u)
{
    ga_client_abandon(u->client);
    deltas_clear(u);
    for (size_t i = 0; u->deltas && i < u->ntensors; i++) ga_free(u->deltas[i]);
    ga_free(u->deltas), ga_free(u->ndeltas), ga_free(u->deltas_cap);
    pthread_mutex_destroy(&u->tap_mu);
    for (size_t i = 0; i < u->ntensors; i++) {
        ga_free(u->values[i]);
        ga_free(u->shapes[i]);
        ga_free((char *)u->tensors[i].name);
    }
    ga_free(u->values), ga_free(u->shapes), ga_free(u->tensors);
    ga_free(u->server), ga_free(u->job);
    token_free(u);
    pthread_mutex_destroy(&u->mu);
    pthread_cond_destroy(&u->cv);
    ga_free(u);
}

static void *uplink_thread(void *arg)
{
    ga_uplink *u = arg;
    pthread_mutex_lock(&u->mu);
    for (;;) {
        while (u->cmd == CMD_NONE && !u->leave) pthread_cond_wait(&u->cv, &u->mu);
        command cmd = u->leave && u->cmd != CMD_EXIT ? CMD_NONE : u->cmd; /* a leave goes first */
        if (cmd == CMD_EXIT) break;
        u->running = true;
        pthread_mutex_unlock(&u->mu);
        ga_status st = GA_OK;
        if (cmd == CMD_NONE) { /* the leave, once no command runs */
            run_leave(u);
        } else {
            u->why[0] = '\0';
            st = cmd == CMD_INIT ? run_init(u) : run_step(u);
        }
        pthread_mutex_lock(&u->mu);
        u->running = false;
        if (cmd == CMD_NONE) {
            u->leave = false;
        } else {
            u->st = st;
            u->last = cmd;
            u->cmd = CMD_NONE;
        }
        if (u->orphan) break;
        if (cmd != CMD_NONE) uv_async_send(&u->done_h->async);
    }
    bool orphan = u->orphan;
    pthread_mutex_unlock(&u->mu);
    if (orphan) {
        pthread_detach(u->thread);
        uplink_free(u);
    }
    return NULL;
}

/* ---- on the loop thread ---- */

static void on_done(uv_async_t *a)
{
    done_handle *h = a->data;
    ga_uplink *u = h->u;
    if (!u) return;
    pthread_mutex_lock(&u->mu);
    bool ready = u->busy && u->cmd == CMD_NONE;
    pthread_mutex_unlock(&u->mu);
    if (!ready) return;
    /* The tap's lists are complete (SIZE_MAX: a copy failed, pass none on). */
    for (size_t i = 0; i < u->ntensors; i++)
        if (u->deltas_cap[i] == SIZE_MAX) u->ndeltas[i] = 0;
    ga_uplink_result res = {.step = u->last == CMD_STEP, .st = u->st, .why = u->why, .version = u->version,
                            .counted = u->counted, .counted_step = u->counted_step,
                            .bytes_pushed = u->bytes_pushed, .bytes_pulled = u->bytes_pulled, .params = u->values,
                            .deltas = (const ga_pull_delta *const *)u->deltas, .ndeltas = u->ndeltas};
    u->busy = false;
    u->done(u->arg, &res);
}

static void handle_closed(uv_handle_t *h) { ga_free(h->data); }

/* A stable incarnation: the job's and the node's (never 0). */
static uint64_t incarnation_of(const char *job, uint32_t node)
{
    char text[300];
    snprintf(text, sizeof text, "gradagg-relay/%s/%u", job, node);
    uint64_t h = ga_job_name_hash(text);
    return h ? h : 1;
}

static void options_from(ga_uplink *u, const ga_relay_options *r, const ga_relay_place *p,
                         const Gradagg__V1__JobConfig *cfg, bool resume)
{
    static const Gradagg__V1__Optimizer no_optim = GRADAGG__V1__OPTIMIZER__INIT;
    static const Gradagg__V1__Straggler no_straggler = GRADAGG__V1__STRAGGLER__INIT;
    const Gradagg__V1__Optimizer *o = cfg->optimizer ? cfg->optimizer : &no_optim;
    const Gradagg__V1__Straggler *s = cfg->straggler ? cfg->straggler : &no_straggler;
    ga_client_options opt = GA_CLIENT_OPTIONS_INIT;
    opt.server = u->server;
    opt.job = u->job;
    opt.rank = p->node;
    opt.world_size = p->nodes;
    opt.incarnation = incarnation_of(u->job, p->node);
    opt.mode = GA_MODE_SYNC;
    opt.mean = cfg->reduce == GRADAGG__V1__REDUCE__REDUCE_MEAN;
    switch (o->kind) {
    case GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_SGD: opt.optimizer = GA_SERVER_OPTIM_SGD; break;
    case GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_ADAM: opt.optimizer = GA_SERVER_OPTIM_ADAM; break;
    case GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_REDUCE: opt.optimizer = GA_SERVER_OPTIM_REDUCE; break;
    default: opt.optimizer = GA_SERVER_OPTIM_NONE; break;
    }
    opt.sgd = (ga_sgd_params){o->lr, o->momentum, o->weight_decay, o->nesterov != 0};
    opt.adam = (ga_adam_params){o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, o->decoupled != 0};
    opt.deadline_ms = s->deadline_ms;
    opt.quorum = s->deadline_ms ? ga_relay_upstream_quorum(p, s->quorum ? s->quorum : cfg->world_size) : 0;
    char why[128];
    if (cfg->pull_codec && ga_codec_from_wire(cfg->pull_codec, "pull_codec", &opt.pull_codec, &opt.pull_params, why,
                                              sizeof why) != GA_OK)
        opt.pull_codec = GA_CODEC_NONE; /* the local job's create checked it already */
    opt.pull_auto_bits = cfg->pull_auto_bits;
    opt.resume = resume;
    opt.auth_token = u->token;
    opt.tls_ca_file = r->tls_ca_file;
    opt.tls_cert_file = r->tls_cert_file;
    opt.tls_key_file = r->tls_key_file;
    opt.tls_target_name = r->tls_target_name;
    u->opt = opt;
}

ga_status ga_uplink_create(const ga_relay_options *r, const ga_relay_place *place, const char *job,
                           const Gradagg__V1__JobConfig *cfg, bool resume, const char *token, size_t token_len,
                           uv_loop_t *loop, ga_uplink_done done, void *arg, ga_uplink **out, char *why, size_t cap)
{
    ga_uplink *u = ga_calloc(1, sizeof *u);
    done_handle *h = ga_calloc(1, sizeof *h);
    if (!u || !h || !(u->server = ga_strdup(r->upstream)) || !(u->job = ga_strdup(job)) ||
        (token && !(u->token = ga_malloc(token_len + 1)))) {
        if (u) ga_free(u->server), ga_free(u->job), token_free(u);
        ga_free(u), ga_free(h);
        return ga_status_fail(GA_E_NOMEM, why, cap, "out of memory creating the uplink of job '%s'", job);
    }
    if (token) {
        memcpy(u->token, token, token_len);
        u->token[token_len] = '\0';
    }
    options_from(u, r, place, cfg, resume);
    u->codec = r->codec;
    u->params = r->params;
    u->auto_threshold = r->auto_threshold;
    u->done = done;
    u->arg = arg;
    pthread_mutex_init(&u->mu, NULL);
    pthread_cond_init(&u->cv, NULL);
    pthread_mutex_init(&u->tap_mu, NULL);
    uv_async_init(loop, &h->async, on_done);
    h->async.data = h;
    h->u = u;
    u->done_h = h;
    if (pthread_create(&u->thread, NULL, uplink_thread, u) != 0) {
        h->u = NULL;
        uv_close((uv_handle_t *)&h->async, handle_closed);
        u->done_h = NULL;
        ga_free(u->server), ga_free(u->job), token_free(u);
        pthread_mutex_destroy(&u->mu);
        pthread_cond_destroy(&u->cv);
        pthread_mutex_destroy(&u->tap_mu);
        ga_free(u);
        return ga_status_fail(GA_E_NOMEM, why, cap, "cannot start the uplink thread of job '%s'", job);
    }
    *out = u;
    return GA_OK;
}

static ga_status hand(ga_uplink *u, command cmd)
{
    pthread_mutex_lock(&u->mu);
    bool refused = u->busy || (cmd == CMD_STEP && u->departed);
    if (!refused) {
        if (cmd == CMD_INIT) u->departed = false;
        u->busy = true;
        u->cmd = cmd;
        pthread_cond_signal(&u->cv);
    }
    pthread_mutex_unlock(&u->mu);
    return refused ? GA_E_INVAL : GA_OK;
}

ga_status ga_uplink_init(ga_uplink *u, const ga_uplink_tensor *t, size_t n, const float *const *values)
{
    if (u->busy || u->tensors) return GA_E_INVAL;
    u->tensors = ga_calloc(n + 1, sizeof *u->tensors);
    u->values = ga_calloc(n + 1, sizeof *u->values);
    u->shapes = ga_calloc(n + 1, sizeof *u->shapes);
    u->deltas = ga_calloc(n + 1, sizeof *u->deltas);
    u->ndeltas = ga_calloc(n + 1, sizeof *u->ndeltas);
    u->deltas_cap = ga_calloc(n + 1, sizeof *u->deltas_cap);
    if (!u->tensors || !u->values || !u->shapes || !u->deltas || !u->ndeltas || !u->deltas_cap) return GA_E_NOMEM;
    for (size_t i = 0; i < n; i++) {
        u->ntensors = i + 1;
        u->tensors[i] = t[i];
        u->tensors[i].name = ga_strdup(t[i].name);
        u->shapes[i] = ga_malloc(t[i].ndim * sizeof *u->shapes[i]);
        u->values[i] = ga_calloc(t[i].elements ? t[i].elements : 1, sizeof(float));
        if (!u->tensors[i].name || !u->shapes[i] || !u->values[i]) return GA_E_NOMEM;
        memcpy(u->shapes[i], t[i].shape, t[i].ndim * sizeof *u->shapes[i]);
        u->tensors[i].shape = u->shapes[i];
        if (values) memcpy(u->values[i], values[i], t[i].elements * sizeof(float));
    }
    /* Only the upstream's rank 0 sends values (the SDK): node 0, which holds the job's rank 0. */
    return hand(u, CMD_INIT);
}

ga_status ga_uplink_step(ga_uplink *u, uint64_t step, uint32_t weight, const float *const *sums)
{
    if (u->busy) return GA_E_INVAL;
    u->step = step;
    u->weight = weight;
    u->sums = sums;
    return hand(u, CMD_STEP);
}

void ga_uplink_leave(ga_uplink *u, bool failed, const char *reason)
{
    pthread_mutex_lock(&u->mu);
    if (!u->departed) {
        u->departed = true;
        u->leave = true;
        u->leave_failed = failed;
        snprintf(u->leave_reason, sizeof u->leave_reason, "%s", reason ? reason : "");
        pthread_cond_signal(&u->cv);
    }
    pthread_mutex_unlock(&u->mu);
}

bool ga_uplink_departed(const ga_uplink *u) { return u->departed; }

ga_status ga_uplink_rejoin(ga_uplink *u, const float *const *values)
{
    if (u->busy || !u->tensors || !u->departed) return GA_E_INVAL;
    for (size_t i = 0; values && i < u->ntensors; i++)
        memcpy(u->values[i], values[i], u->tensors[i].elements * sizeof(float));
    u->rejoin = true;
    return hand(u, CMD_INIT);
}

void ga_uplink_destroy(ga_uplink *u)
{
    if (!u) return;
    done_handle *h = u->done_h;
    h->u = NULL;
    pthread_mutex_lock(&u->mu);
    bool running = u->running || u->cmd != CMD_NONE || u->leave;
    if (running) {
        u->orphan = true; /* checked under the lock before every send: none follows the close */
    } else {
        u->cmd = CMD_EXIT;
        pthread_cond_signal(&u->cv);
    }
    pthread_mutex_unlock(&u->mu);
    uv_close((uv_handle_t *)&h->async, handle_closed);
    if (running) return; /* the thread frees u when its command returns */
    pthread_join(u->thread, NULL);
    uplink_free(u);
}
