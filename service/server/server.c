/* gradagg-server assembled (see server.h). After start, everything but the start handshake and
 * the loop thread's join lives on the loop thread: the core, health, the admin HTTP server, the
 * timers, the signals and every step of the shutdown sequence. */
#include "server.h"

#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <uv.h>

#include "admin/admin.h"
#include "api/api.h"
#include "base/base.h"
#include "core/core.h"
#include "fdlimit.h"
#include "ga_alloc.h"
#include "metrics/metrics.h"
#include "security.h"
#include "transport/transport.h"

typedef enum phase {
    P_RUNNING,
    P_DELAY,        /* NOT_SERVING visible; waiting drain_delay_ms */
    P_CORE_DRAIN,   /* the core closes open steps and answers pulls */
    P_RPC_SHUTDOWN, /* the transport lets calls in flight finish, then the grace cancels them */
    P_STOPPED,      /* the transport is gone; the rest is being freed */
} phase;

struct ga_server {
    ga_config cfg;
    ga_relay_options relay; /* with cfg.relay_to: what the core and the dispatch relay (relay.h) */
    ga_security sec; /* read before the loop starts; the PEMs dropped once the transport has them */
    ga_host_set *trusted; /* --trusted-client-hosts (NULL: none), borrowed by the core and the dispatch */
    ga_loop *loop;
    uv_thread_t thread;
    bool joined;

    /* Start handshake: setup runs on the loop thread, ga_server_start waits for its result. */
    uv_mutex_t mu;
    uv_cond_t cv;
    bool setup_done;
    ga_status setup_status;
    int port;       /* written by setup before setup_done */
    int admin_port; /* 0 when the admin server is off */

    /* Loop thread only. */
    ga_core *core;
    ga_health *health;
    ga_dispatch *dispatch;
    ga_rpc_server *rpc;
    ga_admin *admin; /* NULL when cfg.admin_listen is "" */
    uv_timer_t delay_timer, grace_timer;
    uv_signal_t sigterm, sigint, sighup;
    bool timers_open, signals_open;
    phase phase;
    /* Token tables replaced by a reload: a check on a completion-queue thread may still read
     * one, so they are freed with the server, after the transport. */
    ga_auth **retired;
    size_t nretired;
};

/* ---- teardown (loop thread) ---- */

static void close_handle(uv_handle_t *h)
{
    if (!uv_is_closing(h)) uv_close(h, NULL); /* the memory is the server's, freed after the join */
}

/* The second half of teardown, posted behind anything the transport posted while it was being
 * destroyed (a late cancel must find dispatch, core and health still there; it finds its call
 * unknown and does nothing). */
static void teardown_rest(void *arg)
{
    ga_server *s = arg;
    ga_core_destroy(s->core);
    s->core = NULL;
    ga_health_destroy(s->health);
    s->health = NULL;
    ga_dispatch_destroy(s->dispatch);
    s->dispatch = NULL;
    /* Last: /healthz answered through the whole drain. */
    ga_admin_close(s->admin);
    s->admin = NULL;
    if (s->timers_open) {
        close_handle((uv_handle_t *)&s->delay_timer);
        close_handle((uv_handle_t *)&s->grace_timer);
    }
    if (s->signals_open) {
        close_handle((uv_handle_t *)&s->sigterm);
        close_handle((uv_handle_t *)&s->sigint);
        close_handle((uv_handle_t *)&s->sighup);
    }
    s->phase = P_STOPPED;
    ga_loop_stop(s->loop);
}

/* Frees what exists, in the reverse order of setup, and stops the loop. The transport goes
 * first (or was never started), so no new call can reach the core. */
static void teardown(ga_server *s)
{
    s->phase = P_STOPPED;
    ga_rpc_server_destroy(s->rpc);
    s->rpc = NULL;
    if (ga_loop_post(s->loop, teardown_rest, s) != GA_OK) teardown_rest(s);
}

/* ---- the shutdown sequence (loop thread) ---- */

static void on_rpc_done(void *arg)
{
    ga_server *s = arg;
    uv_timer_stop(&s->grace_timer);
    teardown(s);
    ga_log(GA_LOG_INFO, "shutdown: transport stopped; freeing the core and stopping the loop");
}

/* Completion-queue thread: every call has been released. */
static void on_rpc_done_cq(void *arg)
{
    ga_server *s = arg;
    /* The loop must learn this or the server never stops: a post fails only when memory is
     * short, which passes. */
    while (ga_loop_post(s->loop, on_rpc_done, s) == GA_E_NOMEM) uv_sleep(10);
}

static void on_grace(uv_timer_t *t)
{
    ga_server *s = t->data;
    ga_log(GA_LOG_WARN, "shutdown: calls still open after the grace of %u ms: cancelling them",
           s->cfg.shutdown_grace_ms);
    ga_rpc_server_cancel_all(s->rpc);
}

static void on_core_drained(void *arg)
{
    ga_server *s = arg;
    ga_log(GA_LOG_INFO, "shutdown: core drained; finishing %u health watches; stopping the transport (grace %u ms)",
           ga_health_watches(s->health), s->cfg.shutdown_grace_ms);
    /* Watches never end by themselves: they would hold the transport's shutdown for the whole
     * grace. Clients see UNAVAILABLE-class status and retry elsewhere. */
    ga_health_close(s->health, GA_E_DRAINING);
    s->phase = P_RPC_SHUTDOWN;
    uv_timer_start(&s->grace_timer, on_grace, s->cfg.shutdown_grace_ms, 0);
    ga_rpc_server_shutdown(s->rpc, on_rpc_done_cq, s);
}

static void on_delay(uv_timer_t *t)
{
    ga_server *s = t->data;
    s->phase = P_CORE_DRAIN;
    ga_log(GA_LOG_INFO, "shutdown: draining the core (refusing joins, inits and pushes; closing open steps)");
    ga_core_drain(s->core, on_core_drained, s);
}

/* Signals escalate: a second SIGTERM skips what is left of the drain delay or the grace. A
 * second ga_server_drain does nothing. */
static void begin_drain(ga_server *s, const char *why, bool escalate)
{
    if (s->phase != P_RUNNING && !escalate) return;
    switch (s->phase) {
    case P_RUNNING:
        ga_log(GA_LOG_INFO, "shutdown: %s: health NOT_SERVING; draining in %u ms", why, s->cfg.drain_delay_ms);
        ga_health_set_all(s->health, GA_NOT_SERVING);
        if (s->admin) ga_admin_set_ready(s->admin, false, "draining");
        s->phase = P_DELAY;
        uv_timer_start(&s->delay_timer, on_delay, s->cfg.drain_delay_ms, 0);
        break;
    case P_DELAY:
        ga_log(GA_LOG_INFO, "shutdown: %s again: skipping the rest of the drain delay", why);
        uv_timer_stop(&s->delay_timer);
        on_delay(&s->delay_timer);
        break;
    case P_RPC_SHUTDOWN:
        ga_log(GA_LOG_WARN, "shutdown: %s again: cancelling open calls now", why);
        uv_timer_stop(&s->grace_timer);
        ga_rpc_server_cancel_all(s->rpc);
        break;
    case P_CORE_DRAIN:
    case P_STOPPED: break;
    }
}

static void on_drain_posted(void *arg)
{
    begin_drain(arg, "drain requested", false);
}

static void on_signal(uv_signal_t *h, int signum)
{
    begin_drain(h->data, signum == SIGTERM ? "SIGTERM" : "SIGINT", true);
}

/* SIGHUP: the TLS files and the token file are read again, checked as at start, and take effect
 * for the handshakes and calls that follow (connections and calls under way keep what they
 * had). Anything wrong, and nothing changes: the error is logged and the material in use stays.
 * TLS and tokens cannot be turned on or off, nor mutual TLS, while the server runs. */
static void reload(ga_server *s)
{
    if (s->phase != P_RUNNING) return;
    ga_security fresh = {0}; /* left as it is by a failed load */
    char why[512];
    ga_status st = ga_security_load(&s->cfg, &fresh, why, sizeof why);
    if (st == GA_OK && !fresh.cert_pem != !s->cfg.tls_cert[0]) st = GA_E_CONFIG; /* cannot happen: same flags */
    if (st == GA_OK && fresh.cert_pem &&
        (st = ga_rpc_server_set_tls(s->rpc, fresh.cert_pem, fresh.key_pem, fresh.client_ca_pem)) != GA_OK)
        snprintf(why, sizeof why, "mutual TLS cannot be turned on or off while the server runs");
    ga_auth **grown = NULL;
    if (st == GA_OK && fresh.auth && !(grown = ga_malloc((s->nretired + 1) * sizeof *grown))) {
        st = GA_E_NOMEM;
        snprintf(why, sizeof why, "out of memory");
    }
    if (st != GA_OK) {
        ga_log(GA_LOG_ERROR, "SIGHUP: not reloaded (%s); the TLS files and tokens in use stay", why);
        ga_security_free(&fresh);
        return;
    }
    if (fresh.auth) {
        if (s->nretired) memcpy(grown, s->retired, s->nretired * sizeof *grown);
        grown[s->nretired++] = s->sec.auth;
        ga_free(s->retired);
        s->retired = grown;
        s->sec.auth = fresh.auth;
        ga_dispatch_set_auth(s->dispatch, fresh.auth);
        fresh.auth = NULL;
    }
    ga_log(GA_LOG_INFO, "SIGHUP: reloaded %s",
           fresh.cert_pem && s->sec.auth ? "the TLS files and the tokens"
           : fresh.cert_pem              ? "the TLS files"
           : s->sec.auth                 ? "the tokens"
                                         : "nothing (the server runs without TLS and tokens)");
    ga_security_free(&fresh);
}

static void on_reload(uv_signal_t *h, int signum)
{
    (void)signum;
    reload(h->data);
}

/* ---- start (loop thread) ---- */

/* A scrape (admin.h): the process, the core's jobs, and the transport's counters. */
static void collect_metrics(void *arg, ga_metrics_text *t)
{
    ga_server *s = arg;
    ga_metrics_write_process(t, ga_config_backend_name(s->cfg.backend));
    if (s->core) ga_core_metrics(s->core, t);
    ga_metrics_write_calls(t);
    ga_metrics_write_broken(t);
}

static ga_status start_admin(ga_server *s, int *port)
{
    if (!s->cfg.admin_listen[0]) return GA_OK;
    ga_admin_options ao = GA_ADMIN_OPTIONS_INIT;
    ao.listen = s->cfg.admin_listen;
    ao.collect = collect_metrics;
    ao.collect_arg = s;
    char why[GA_CONFIG_LISTEN_MAX + 128];
    ga_status st = ga_admin_start(ga_loop_uv(s->loop), &ao, &s->admin, port, why, sizeof why);
    if (st != GA_OK) {
        ga_log(GA_LOG_ERROR, "--admin-listen %s: %s", s->cfg.admin_listen, why);
        return st == GA_E_NOMEM ? st : GA_E_IO;
    }
    return GA_OK;
}

static ga_status open_handles(ga_server *s)
{
    uv_loop_t *uv = ga_loop_uv(s->loop);
    uv_timer_init(uv, &s->delay_timer);
    uv_timer_init(uv, &s->grace_timer);
    s->delay_timer.data = s->grace_timer.data = s;
    s->timers_open = true;
    if (!s->cfg.install_signals) return GA_OK;
    uv_signal_init(uv, &s->sigterm);
    uv_signal_init(uv, &s->sigint);
    uv_signal_init(uv, &s->sighup);
    s->sigterm.data = s->sigint.data = s->sighup.data = s;
    s->signals_open = true;
    if (uv_signal_start(&s->sigterm, on_signal, SIGTERM) != 0 || uv_signal_start(&s->sigint, on_signal, SIGINT) != 0 ||
        uv_signal_start(&s->sighup, on_reload, SIGHUP) != 0)
        return GA_E_IO;
    return GA_OK;
}

/* Raises the descriptor limit and says what it allows (fdlimit.h): the journals' share. */
static uint64_t fd_budget(const ga_config *c)
{
    ga_fd_budget b = ga_fd_budget_take();
    uint64_t need = (uint64_t)c->max_jobs * c->journal_copies;
    ga_log(GA_LOG_INFO,
           "file descriptors: RLIMIT_NOFILE %" PRIu64 "%s, %" PRIu64 " kept for connections and checkpoints, %" PRIu64
           " for journals (--max-jobs %u x %u journal file(s) need %" PRIu64 ")",
           b.limit, b.limit > b.before ? " (raised to the hard limit)" : "", b.reserve, b.journals, c->max_jobs,
           c->journal_copies, need);
    if (need > b.journals)
        ga_log(GA_LOG_WARN,
               "file descriptors: RLIMIT_NOFILE %" PRIu64 " leaves %" PRIu64 " for journals, so at most %" PRIu64
               " jobs, not --max-jobs %u: raise the limit (docs/operations.md, \"File descriptors\")",
               b.limit, b.journals, b.journals / c->journal_copies, c->max_jobs);
    /* 0 would mean no limit to the core: a limit under the reserve allows one journal file. */
    return b.journals ? b.journals : 1;
}

/* Whether the host of a listen address is a wildcard ("0.0.0.0", "[::]", "" or "*"), which
 * clients cannot connect to. */
static bool wildcard_host(const char *addr, size_t host_len)
{
    static const char *const any[] = {"0.0.0.0", "[::]", "", "*", "[::0]"};
    for (size_t i = 0; i < sizeof any / sizeof any[0]; i++)
        if (strlen(any[i]) == host_len && strncmp(addr, any[i], host_len) == 0) return true;
    return false;
}

/* ShardInfo's answer (--shard-count, --shard-index, --advertise-address), once the gRPC port
 * is bound (port): the advertised address, else the listen host with the bound port. */
static ga_status set_shard(ga_server *s, int port)
{
    const ga_config *c = &s->cfg;
    if (c->shard_count == 0) return GA_OK;
    if (c->shard_index >= c->shard_count) {
        ga_log(GA_LOG_ERROR, "--shard-index %u is not below --shard-count %u (GRADAGG_SHARD_INDEX, "
               "GRADAGG_SHARD_COUNT)", c->shard_index, c->shard_count);
        return GA_E_CONFIG;
    }
    char addr[GA_DISPATCH_ADDRESS_MAX];
    if (c->advertise_address[0]) {
        snprintf(addr, sizeof addr, "%s", c->advertise_address);
    } else {
        const char *colon = strrchr(c->listen, ':');
        size_t host_len = colon ? (size_t)(colon - c->listen) : 0;
        if (wildcard_host(c->listen, host_len)) {
            ga_log(GA_LOG_ERROR, "--shard-count %u needs --advertise-address (GRADAGG_ADVERTISE_ADDRESS): clients "
                   "cannot connect to the listen address %s", c->shard_count, c->listen);
            return GA_E_CONFIG;
        }
        snprintf(addr, sizeof addr, "%.*s:%d", (int)host_len, c->listen, port);
    }
    ga_dispatch_set_shard(s->dispatch, c->shard_index, c->shard_count, addr);
    ga_log(GA_LOG_INFO, "shard %u of a set of %u, advertised as %s", c->shard_index, c->shard_count, addr);
    return GA_OK;
}

/* --relay-*: the relay's options, borrowing cfg's strings. */
static ga_status relay_options(const ga_config *cfg, ga_relay_options *r, char *why, size_t cap)
{
    *r = (ga_relay_options){.upstream = cfg->relay_to, .nodes = cfg->relay_nodes, .workers = cfg->relay_workers};
    r->tls_ca_file = cfg->relay_tls_ca[0] ? cfg->relay_tls_ca : NULL;
    r->tls_cert_file = cfg->relay_tls_cert[0] ? cfg->relay_tls_cert : NULL;
    r->tls_key_file = cfg->relay_tls_key[0] ? cfg->relay_tls_key : NULL;
    r->tls_target_name = cfg->relay_tls_target_name[0] ? cfg->relay_tls_target_name : NULL;
    if (cfg->relay_node[0]) {
        char *end;
        unsigned long n = strtoul(cfg->relay_node, &end, 10);
        if (*end || end == cfg->relay_node || n >= 4096) /* --relay-nodes at most */
            return ga_status_fail(GA_E_CONFIG, why, cap, "--relay-node '%s': an index below %u, or empty for the "
                                  "index each job's first worker gives (its rank / --relay-workers)", cfg->relay_node,
                                  4096u);
        r->node_given = true;
        r->node = (uint32_t)n;
    }
    GA_CHECK(ga_relay_parse_codec(cfg->relay_codec, r, why, cap));
    return ga_relay_check(r, why, cap);
}

ga_status ga_server_check_config(const ga_config *cfg, char *why, size_t cap)
{
    ga_relay_options r;
    ga_host_set *trusted;
    GA_CHECK(ga_host_set_parse(cfg->trusted_client_hosts, &trusted, why, cap));
    ga_host_set_destroy(trusted);
    return cfg->relay_to[0] ? relay_options(cfg, &r, why, cap) : GA_OK;
}

static void setup(void *arg)
{
    ga_server *s = arg;
    const ga_config *c = &s->cfg;
    ga_status st;
    int port = 0, admin_port = 0;

    ga_core_options co = GA_CORE_OPTIONS_INIT;
    co.backend = c->backend;
    co.threads = (int)c->threads;
    co.max_jobs = c->max_jobs;
    co.max_tensors = c->max_tensors;
    co.max_memory_bytes = c->max_memory_mb << 20;
    co.pull_chunk_bytes = (size_t)c->pull_chunk_kb << 10;
    co.default_deadline_ms = c->deadline_ms;
    co.default_quorum = c->quorum;
    co.member_lease_ms = c->member_lease_ms;
    co.rank_lost_ms = c->rank_lost_ms;
    co.finished_retention_s = c->finished_retention_s;
    co.keep_finished = c->finished_jobs == GA_FINISHED_KEEP;
    co.unused_job_expiry_s = c->unused_job_expiry_s;
    co.max_unused_jobs_per_client = c->max_unused_jobs_per_client;
    co.tokens = s->sec.auth != NULL;
    co.max_unused_jobs_per_token = c->max_unused_jobs_per_token;
    co.trusted_hosts = s->trusted;
    co.max_elements = c->max_elements;
    co.data_dir = c->data_dir;
    co.checkpoint_steps = c->checkpoint_steps;
    co.checkpoint_seconds = c->checkpoint_seconds;
    co.checkpoint_keep = c->checkpoint_keep;
    co.journal_sync = c->journal_sync;
    co.journal_copies = c->journal_copies;
    co.durability = c->durability;
    co.math_tasks = c->math_tasks;
    co.journal_fds = fd_budget(c);
    if (c->relay_to[0]) { /* a relay keeps no journal: its workers push again (docs/relay.md) */
        co.relay = &s->relay;
        co.data_dir = NULL;
    }
    GA_CHECK_GOTO(ga_core_create(&co, ga_loop_uv(s->loop), &s->core), st, fail);
    char why[320];
    st = ga_core_restore(s->core, why, sizeof why);
    if (st != GA_OK) {
        ga_log(GA_LOG_ERROR, "restore from --data-dir %s failed: %s", c->data_dir, why);
        goto fail;
    }
    GA_CHECK_GOTO(ga_health_create(&s->health), st, fail);
    ga_stream_limits lim = {c->max_streams_per_client, c->max_streams_per_job, c->max_streams_per_token, s->trusted};
    GA_CHECK_GOTO(ga_dispatch_create(s->loop, s->core, s->health, (size_t)c->max_stream_mb << 20, &lim,
                                     &s->dispatch), st, fail);
    ga_dispatch_set_auth(s->dispatch, s->sec.auth);
    if (c->relay_to[0]) ga_dispatch_set_relay(s->dispatch);
    GA_CHECK_GOTO(open_handles(s), st, fail);
    GA_CHECK_GOTO(start_admin(s, &admin_port), st, fail);

    ga_rpc_options ro = GA_RPC_OPTIONS_INIT;
    ro.listen = c->listen;
    ro.threads = (int)c->cq_threads;
    ro.max_message_bytes = (size_t)c->max_message_mb << 20;
    ro.budget = ga_core_budget(s->core);
    ro.stream_window_bytes = (size_t)c->stream_window_kb << 10;
    ro.grpc_memory_bytes = (size_t)c->grpc_memory_mb << 20;
    ro.tls_cert_pem = s->sec.cert_pem;
    ro.tls_key_pem = s->sec.key_pem;
    ro.tls_client_ca_pem = s->sec.client_ca_pem;
    GA_CHECK_GOTO(ga_rpc_server_start(&ro, ga_dispatch_handlers(s->dispatch), &s->rpc, &port), st, fail);
    GA_CHECK_GOTO(set_shard(s, port), st, fail);
    /* Calls that arrived already wait behind this function in the loop's queue. */
    ga_health_set_all(s->health, GA_SERVING);
    /* Ready once everything above (checkpoint restore included) is done. */
    if (s->admin) {
        char note[128] = "ready";
        uint64_t damaged = ga_core_damaged_journals(s->core);
        if (damaged)
            snprintf(note, sizeof note, "ready; %" PRIu64 " job(s) refused: a damaged journal (see the log)", damaged);
        ga_admin_set_ready(s->admin, true, note);
    }
    s->phase = P_RUNNING;
    goto done;

fail:
    teardown(s);
done:
    uv_mutex_lock(&s->mu);
    s->port = port;
    s->admin_port = admin_port;
    s->setup_status = st;
    s->setup_done = true;
    uv_cond_signal(&s->cv);
    uv_mutex_unlock(&s->mu);
}

static void loop_main(void *arg)
{
    ga_server *s = arg;
    ga_loop_run(s->loop);
}

/* ---- public (any thread) ---- */

ga_status ga_server_start(const ga_config *cfg, ga_server **out)
{
    char why[2 * GA_CONFIG_PATH_MAX + 256]; /* a message may name two files */
    ga_status st = ga_config_make_data_dir(cfg, why, sizeof why);
    if (st != GA_OK) {
        ga_log(GA_LOG_ERROR, "%s", why);
        return st;
    }
    ga_metrics_process_started();
    ga_server *s = ga_calloc(1, sizeof *s);
    if (!s) return GA_E_NOMEM;
    s->cfg = *cfg;
    if (cfg->relay_to[0] && (st = relay_options(&s->cfg, &s->relay, why, sizeof why)) != GA_OK) {
        ga_log(GA_LOG_ERROR, "%s", why);
        ga_free(s);
        return st;
    }
    st = ga_host_set_parse(cfg->trusted_client_hosts, &s->trusted, why, sizeof why);
    if (st != GA_OK) {
        ga_log(GA_LOG_ERROR, "%s", why);
        ga_free(s);
        return st;
    }
    st = ga_security_load(cfg, &s->sec, why, sizeof why);
    if (st != GA_OK) {
        ga_log(GA_LOG_ERROR, "%s", why);
        ga_host_set_destroy(s->trusted);
        ga_free(s);
        return st;
    }
    if (s->trusted)
        ga_log(GA_LOG_INFO, "caps: %zu trusted client hosts (addresses or blocks) are not capped per host",
               ga_host_set_size(s->trusted));
    if (s->sec.cert_pem)
        ga_log(GA_LOG_INFO, "security: TLS%s on %s", s->sec.client_ca_pem ? " with client certificates (mutual)" : "",
               cfg->listen);
    if (s->sec.auth)
        ga_log(GA_LOG_INFO, "security: bearer tokens for %zu jobs; calls without their job's token are refused",
               ga_auth_jobs(s->sec.auth));
    if (uv_mutex_init(&s->mu) != 0) goto fail_free;
    if (uv_cond_init(&s->cv) != 0) goto fail_mutex;
    st = ga_loop_create(&s->loop);
    if (st != GA_OK) goto fail_cond;
    /* Posted before the thread starts: the first thing the loop runs. */
    st = ga_loop_post(s->loop, setup, s);
    if (st != GA_OK) goto fail_loop;
    if (uv_thread_create(&s->thread, loop_main, s) != 0) {
        st = GA_E_NOMEM;
        goto fail_loop; /* destroying the never-run loop drops the posted setup unrun */
    }

    uv_mutex_lock(&s->mu);
    while (!s->setup_done) uv_cond_wait(&s->cv, &s->mu);
    uv_mutex_unlock(&s->mu);
    ga_security_drop_pems(&s->sec);
    st = s->setup_status;
    if (st != GA_OK) {
        ga_log(GA_LOG_ERROR, "start: %s (%s)", ga_strerror(st), ga_status_name(st));
        uv_thread_join(&s->thread); /* setup's teardown stopped the loop */
        goto fail_loop;
    }
    *out = s;
    return GA_OK;

fail_loop:
    ga_loop_destroy(s->loop);
fail_cond:
    uv_cond_destroy(&s->cv);
fail_mutex:
    uv_mutex_destroy(&s->mu);
fail_free:
    ga_security_free(&s->sec);
    ga_host_set_destroy(s->trusted);
    ga_free(s);
    return st != GA_OK ? st : GA_E_NOMEM;
}

int ga_server_port(const ga_server *s)
{
    return s->port;
}

int ga_server_admin_port(const ga_server *s)
{
    return s->admin_port;
}

void ga_server_drain(ga_server *s)
{
    /* Refused once the loop has stopped: then there is nothing left to drain. */
    (void)ga_loop_post(s->loop, on_drain_posted, s);
}

void ga_server_wait(ga_server *s)
{
    if (s->joined) return;
    uv_thread_join(&s->thread);
    s->joined = true;
}

void ga_server_destroy(ga_server *s)
{
    if (!s) return;
    if (!s->joined) {
        ga_server_drain(s);
        ga_server_wait(s);
    }
    ga_loop_destroy(s->loop);
    uv_cond_destroy(&s->cv);
    uv_mutex_destroy(&s->mu);
    ga_security_free(&s->sec); /* after the transport and dispatch that borrowed auth */
    for (size_t i = 0; i < s->nretired; i++) ga_auth_destroy(s->retired[i]);
    ga_free(s->retired);
    ga_host_set_destroy(s->trusted); /* after the core and dispatch that borrowed it */
    ga_free(s);
}
