/* The settings table and its parser: defaults, GRADAGG_* variables, flags (see config.h).
 * Adding a setting is one row here plus its field and key in config.h. */
#define _POSIX_C_SOURCE 200809L /* mkdir, strnlen */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>

#include "persist/persist.h"

typedef enum row_type {
    T_ADDR, /* host:port */
    T_PATH, /* a non-empty path */
    T_OPT_ADDR, /* host:port, or "" = off */
    T_OPT_PATH, /* a path, or "" = off */
    T_OPT_TEXT, /* any text (checked where it is used), or "" = off */
    T_U32,  /* decimal integer in [min, max] */
    T_U64,
    T_ENUM, /* one of choices; stored as its index (an enum) */
} row_type;

typedef struct row {
    const char *name;
    const char *flag;
    const char *env;
    row_type type;
    const char *def; /* parsed like any other value, so a default is valid by construction */
    const char *help;
    size_t offset;   /* of the field in ga_config */
    size_t cap;      /* strings: the field's size */
    uint64_t min, max;
    const char *const *choices; /* NULL-terminated */
} row;

static const char *const backend_choices[] = {"cpu", "cuda", NULL};
static const char *const level_choices[] = {"error", "warn", "info", "debug", NULL};
static const char *const journal_sync_choices[] = {"none", "step", "push", NULL};
static const char *const durability_choices[] = {"acked", "checkpoint", NULL};
static const char *const finished_choices[] = {"delete", "keep", NULL};

#define FIELD(f) offsetof(ga_config, f)
#define ROW_ADDR(n, e, f, d, h) {n, "--" n, e, T_ADDR, d, h, FIELD(f), sizeof(((ga_config *)0)->f), 0, 0, NULL}
#define ROW_PATH(n, e, f, d, h) {n, "--" n, e, T_PATH, d, h, FIELD(f), sizeof(((ga_config *)0)->f), 0, 0, NULL}
#define ROW_OPT_ADDR(n, e, f, d, h) {n, "--" n, e, T_OPT_ADDR, d, h, FIELD(f), sizeof(((ga_config *)0)->f), 0, 0, NULL}
#define ROW_OPT_PATH(n, e, f, d, h) {n, "--" n, e, T_OPT_PATH, d, h, FIELD(f), sizeof(((ga_config *)0)->f), 0, 0, NULL}
#define ROW_OPT_TEXT(n, e, f, d, h) {n, "--" n, e, T_OPT_TEXT, d, h, FIELD(f), sizeof(((ga_config *)0)->f), 0, 0, NULL}
#define ROW_U32(n, e, f, d, lo, hi, h) {n, "--" n, e, T_U32, d, h, FIELD(f), 0, lo, hi, NULL}
#define ROW_U64(n, e, f, d, lo, hi, h) {n, "--" n, e, T_U64, d, h, FIELD(f), 0, lo, hi, NULL}
#define ROW_ENUM(n, e, f, d, c, h) {n, "--" n, e, T_ENUM, d, h, FIELD(f), 0, 0, 0, c}

/* Flags spell words with '-', variables with '_'; rows follow ga_config_key. */
static const row rows[GA_CFG_KEYS] = {
    [GA_CFG_LISTEN] = ROW_ADDR("listen", "GRADAGG_LISTEN", listen, "127.0.0.1:7070",
                               "gRPC address, host:port ([v6]:port); port 0 picks a free one"),
    [GA_CFG_BACKEND] = ROW_ENUM("backend", "GRADAGG_BACKEND", backend, "cpu", backend_choices,
                                "where parameters, sums and optimizer state live"),
    [GA_CFG_THREADS] = ROW_U32("threads", "GRADAGG_THREADS", threads, "0", 0, 4096,
                               "OpenMP threads for the math; 0 = all cores"),
    [GA_CFG_MATH_TASKS] = ROW_U32("math-tasks", "GRADAGG_MATH_TASKS", math_tasks, "2", 1, 1024,
                                  "jobs whose math (decode, sum, optimizer) runs at once, each on --threads "
                                  "threads: the size of libuv's thread pool, for the whole process"),
    [GA_CFG_CQ_THREADS] = ROW_U32("cq-threads", "GRADAGG_CQ_THREADS", cq_threads, "2", 1, 64,
                                  "gRPC completion-queue threads"),
    [GA_CFG_MAX_MESSAGE_MB] = ROW_U32("max-message-mb", "GRADAGG_MAX_MESSAGE_MB", max_message_mb, "8", 1, 1024,
                                      "largest gRPC message received or sent, MiB"),
    [GA_CFG_MAX_STREAM_MB] = ROW_U32("max-stream-mb", "GRADAGG_MAX_STREAM_MB", max_stream_mb, "4096", 1, 1u << 24,
                                     "what one Push or InitTensors stream may hold (payloads and chunk headers), MiB"),
    [GA_CFG_MAX_STREAMS_PER_CLIENT] = ROW_U32("max-streams-per-client", "GRADAGG_MAX_STREAMS_PER_CLIENT",
                                              max_streams_per_client, "256", 1, 1u << 20,
                                              "Push and InitTensors streams open at once from one client host (its "
                                              "address without the port)"),
    [GA_CFG_MAX_STREAMS_PER_JOB] = ROW_U32("max-streams-per-job", "GRADAGG_MAX_STREAMS_PER_JOB", max_streams_per_job,
                                           "1024", 1, 1u << 20,
                                           "Push and InitTensors streams open at once for one job, from every host"),
    [GA_CFG_MAX_STREAMS_PER_TOKEN] = ROW_U32("max-streams-per-token", "GRADAGG_MAX_STREAMS_PER_TOKEN",
                                             max_streams_per_token, "1024", 1, 1u << 20,
                                             "with --auth-tokens: Push and InitTensors streams open at once under one "
                                             "job's token (the job and its lanes together), from every host"),
    [GA_CFG_MAX_MEMORY_MB] = ROW_U64("max-memory-mb", "GRADAGG_MAX_MEMORY_MB", max_memory_mb, "16384", 16, 1ull << 24,
                                     "memory for parameters, state and buffered payloads, all jobs, MiB"),
    [GA_CFG_GRPC_MEMORY_MB] = ROW_U32("grpc-memory-mb", "GRADAGG_GRPC_MEMORY_MB", grpc_memory_mb, "1024", 0, 1u << 24,
                                      "gRPC's own memory (connections, reads not yet handed over), MiB: past it "
                                      "gRPC closes idle connections, then resets streams; 0 = no limit"),
    [GA_CFG_MAX_JOBS] = ROW_U32("max-jobs", "GRADAGG_MAX_JOBS", max_jobs, "64", 1, 1000000, "jobs at once"),
    [GA_CFG_MAX_TENSORS] = ROW_U32("max-tensors", "GRADAGG_MAX_TENSORS", max_tensors, "4096", 1, 1000000,
                                   "tensors per job"),
    [GA_CFG_PULL_CHUNK_KB] = ROW_U32("pull-chunk-kb", "GRADAGG_PULL_CHUNK_KB", pull_chunk_kb, "1024", 4, 1u << 20,
                                     "payload per PullChunk message, KiB"),
    [GA_CFG_STREAM_WINDOW_KB] = ROW_U32("stream-window-kb", "GRADAGG_STREAM_WINDOW_KB", stream_window_kb, "0", 0,
                                        1u << 20,
                                        "receive window of each call, KiB: what gRPC may buffer of a stream that "
                                        "the server has not read yet; 0 = sized by gRPC's bandwidth-delay probe "
                                        "(fastest; bounded only by --grpc-memory-mb); a fixed window such as 4096 "
                                        "keeps a shard nearer its accounted bytes (docs/benchmarks.md, \"Shard "
                                        "memory\")"),
    [GA_CFG_DEADLINE_MS] = ROW_U32("deadline-ms", "GRADAGG_DEADLINE_MS", deadline_ms, "0", 0, 86400000,
                                   "straggler deadline after a step's first commit when a job sets none; 0 = wait "
                                   "for every rank"),
    [GA_CFG_QUORUM] = ROW_U32("quorum", "GRADAGG_QUORUM", quorum, "0", 0, 1000000,
                              "ranks that close a step at the deadline when a job sets none; 0 = world size"),
    [GA_CFG_MEMBER_LEASE_MS] = ROW_U32("member-lease-ms", "GRADAGG_MEMBER_LEASE_MS", member_lease_ms, "10000", 100,
                                       86400000, "a member silent this long may be taken over by a new incarnation of its rank"),
    [GA_CFG_RANK_LOST_MS] = ROW_U32("rank-lost-ms", "GRADAGG_RANK_LOST_MS", rank_lost_ms, "10000", 100, 86400000,
                                    "a joined rank with no call, wait or heartbeat this long is lost: its job fails "
                                    "(or goes on without it, by its straggler policy)"),
    [GA_CFG_FINISHED_RETENTION_S] = ROW_U32("finished-job-retention-s", "GRADAGG_FINISHED_JOB_RETENTION_S",
                                            finished_retention_s, "3600", 0, 31536000,
                                            "a job whose ranks all left as finished is removed this long after; "
                                            "0 = at once"),
    [GA_CFG_UNUSED_JOB_EXPIRY_S] = ROW_U32("unused-job-expiry-s", "GRADAGG_UNUSED_JOB_EXPIRY_S", unused_job_expiry_s,
                                           "60", 1, 31536000,
                                           "a job that never got a push and has no live rank is removed this long "
                                           "after its last rank went"),
    [GA_CFG_MAX_UNUSED_JOBS_PER_CLIENT] = ROW_U32("max-unused-jobs-per-client", "GRADAGG_MAX_UNUSED_JOBS_PER_CLIENT",
                                                  max_unused_jobs_per_client, "16", 1, 1000000,
                                                  "jobs that never got a push one client host (its address without "
                                                  "the port) may have created; its Join creating one more is refused"),
    [GA_CFG_MAX_UNUSED_JOBS_PER_TOKEN] = ROW_U32("max-unused-jobs-per-token", "GRADAGG_MAX_UNUSED_JOBS_PER_TOKEN",
                                                 max_unused_jobs_per_token, "16", 1, 16,
                                                 "with --auth-tokens: jobs that never got a push that Joins under one "
                                                 "job's token (the job and its lanes) may have created"),
    [GA_CFG_TRUSTED_CLIENT_HOSTS] = ROW_OPT_TEXT("trusted-client-hosts", "GRADAGG_TRUSTED_CLIENT_HOSTS",
                                                 trusted_client_hosts, "",
                                                 "client hosts the per-host caps (--max-streams-per-client, "
                                                 "--max-unused-jobs-per-client) do not apply to: IP addresses and "
                                                 "CIDR blocks, comma-separated (a relay, a NAT)"),
    [GA_CFG_FINISHED_JOBS] = ROW_ENUM("finished-jobs", "GRADAGG_FINISHED_JOBS", finished_jobs, "delete",
                                      finished_choices,
                                      "a removed finished job's directory: delete, or keep (moved aside as "
                                      "<dir>.finished-<ms>, not restored)"),
    [GA_CFG_DATA_DIR] = ROW_PATH("data-dir", "GRADAGG_DATA_DIR", data_dir, "./gradagg-data",
                                 "checkpoint directory; created if missing"),
    [GA_CFG_DRAIN_DELAY_MS] = ROW_U32("drain-delay-ms", "GRADAGG_DRAIN_DELAY_MS", drain_delay_ms, "0", 0, 600000,
                                      "on SIGTERM, NOT_SERVING is visible this long before the drain (2000 suits "
                                      "Kubernetes)"),
    [GA_CFG_SHUTDOWN_GRACE_MS] = ROW_U32("shutdown-grace-ms", "GRADAGG_SHUTDOWN_GRACE_MS", shutdown_grace_ms, "5000",
                                         0, 600000, "calls still open this long after the drain are cancelled"),
    [GA_CFG_LOG_LEVEL] = ROW_ENUM("log-level", "GRADAGG_LOG_LEVEL", log_level, "info", level_choices,
                                  "log lines up to this level"),
    [GA_CFG_ADMIN_LISTEN] = ROW_OPT_ADDR("admin-listen", "GRADAGG_ADMIN_LISTEN", admin_listen, "127.0.0.1:7071",
                                         "admin HTTP address for /metrics, /healthz and /readyz; empty = off"),
    [GA_CFG_CHECKPOINT_STEPS] = ROW_U32("checkpoint-steps", "GRADAGG_CHECKPOINT_STEPS", checkpoint_steps, "100", 0,
                                        1000000000, "checkpoint a job every this many versions; 0 = not by count"),
    [GA_CFG_CHECKPOINT_SECONDS] = ROW_U32("checkpoint-seconds", "GRADAGG_CHECKPOINT_SECONDS", checkpoint_seconds,
                                          "300", 0, 604800,
                                          "checkpoint a job at the next version once its last checkpoint is this "
                                          "old; 0 = not by time"),
    [GA_CFG_CHECKPOINT_KEEP] = ROW_U32("checkpoint-keep", "GRADAGG_CHECKPOINT_KEEP", checkpoint_keep, "3", 1, 1000,
                                       "newest checkpoints kept per job"),
    [GA_CFG_JOURNAL_SYNC] = ROW_ENUM("journal-sync", "GRADAGG_JOURNAL_SYNC", journal_sync, "step",
                                     journal_sync_choices,
                                     "when the push journal is fsynced: none, at every step's close, or before "
                                     "every push's ack"),
    [GA_CFG_JOURNAL_COPIES] = ROW_U32("journal-copies", "GRADAGG_JOURNAL_COPIES", journal_copies, "1", 1, 2,
                                      "files each journal segment is written to: 2 keeps a second copy, so a "
                                      "damaged sector in one loses nothing"),
    [GA_CFG_DURABILITY] = ROW_ENUM("durability", "GRADAGG_DURABILITY", durability, "acked", durability_choices,
                                   "acked: every acknowledged push is journaled, nothing acknowledged is lost; "
                                   "checkpoint: only checkpoints hold steps, a killed server comes back at its "
                                   "newest one and the workers move back to it"),
    [GA_CFG_TLS_CERT] = ROW_OPT_PATH("tls-cert", "GRADAGG_TLS_CERT", tls_cert, "",
                                     "server certificate chain (PEM); empty = plaintext"),
    [GA_CFG_TLS_KEY] = ROW_OPT_PATH("tls-key", "GRADAGG_TLS_KEY", tls_key, "", "private key of --tls-cert (PEM)"),
    [GA_CFG_TLS_CLIENT_CA] = ROW_OPT_PATH("tls-client-ca", "GRADAGG_TLS_CLIENT_CA", tls_client_ca, "",
                                          "CA bundle (PEM) that client certificates must chain to; set = mutual "
                                          "TLS, empty = no client certificate asked"),
    [GA_CFG_AUTH_TOKENS] = ROW_OPT_PATH("auth-tokens", "GRADAGG_AUTH_TOKENS", auth_tokens, "",
                                        "file of 'job token' lines; set = every call carries its job's bearer "
                                        "token, empty = no tokens"),
    [GA_CFG_MAX_ELEMENTS] = ROW_U64("max-elements", "GRADAGG_MAX_ELEMENTS", max_elements, "4294967296", 1024,
                                    1ull << 40, "parameters per job, all its tensors together"),
    [GA_CFG_SHARD_COUNT] = ROW_U32("shard-count", "GRADAGG_SHARD_COUNT", shard_count, "0", 0, 4096,
                                   "shards in the set this server belongs to, which clients find from one DNS "
                                   "name (shards://name:port); 0 = no set"),
    [GA_CFG_SHARD_INDEX] = ROW_U32("shard-index", "GRADAGG_SHARD_INDEX", shard_index, "0", 0, 4095,
                                   "this server's index in its shard set, below --shard-count"),
    [GA_CFG_ADVERTISE_ADDRESS] = ROW_OPT_ADDR("advertise-address", "GRADAGG_ADVERTISE_ADDRESS", advertise_address, "",
                                              "where clients reach this shard, host:port; empty = the --listen "
                                              "address (with its port once bound)"),
    [GA_CFG_RELAY_TO] = ROW_OPT_TEXT("relay-to", "GRADAGG_RELAY_TO", relay_to, "",
                                     "the upstream shards (h:p[,h:p...] or shards://name:port): set = this server "
                                     "is its node's relay, whose workers' pushes it sums and sends upstream as one "
                                     "(docs/relay.md); empty = a server"),
    [GA_CFG_RELAY_NODE] = ROW_OPT_TEXT("relay-node", "GRADAGG_RELAY_NODE", relay_node, "",
                                       "a relay's node index n: it serves the job's ranks [n * workers, (n + 1) * "
                                       "workers); empty = each job's first worker tells it (its rank / workers)"),
    [GA_CFG_RELAY_NODES] = ROW_U32("relay-nodes", "GRADAGG_RELAY_NODES", relay_nodes, "0", 0, 4096,
                                   "relays (nodes) in a relayed job, the upstream job's world size; 0 = each job's "
                                   "world size / workers"),
    [GA_CFG_RELAY_WORKERS] = ROW_U32("relay-workers", "GRADAGG_RELAY_WORKERS", relay_workers, "1", 1, 4096,
                                     "workers on each node (one per GPU): a relayed job's world size is a multiple"),
    [GA_CFG_RELAY_CODEC] = ROW_OPT_TEXT("relay-codec", "GRADAGG_RELAY_CODEC", relay_codec, "none",
                                        "how a relay pushes its node's sum upstream: none, fp16, bf16, 1bit, "
                                        "2bit[:threshold | :auto] or topk[:ratio], with error feedback"),
    [GA_CFG_RELAY_TLS_CA] = ROW_OPT_PATH("relay-tls-ca", "GRADAGG_RELAY_TLS_CA", relay_tls_ca, "",
                                         "a relay's TLS upstream: PEM roots the upstream's certificate must chain "
                                         "to; empty = plaintext upstream"),
    [GA_CFG_RELAY_TLS_CERT] = ROW_OPT_PATH("relay-tls-cert", "GRADAGG_RELAY_TLS_CERT", relay_tls_cert, "",
                                           "a relay's client certificate chain (PEM) for an upstream with mutual "
                                           "TLS; empty = none"),
    [GA_CFG_RELAY_TLS_KEY] = ROW_OPT_PATH("relay-tls-key", "GRADAGG_RELAY_TLS_KEY", relay_tls_key, "",
                                          "private key of --relay-tls-cert (PEM)"),
    [GA_CFG_RELAY_TLS_TARGET_NAME] = ROW_OPT_TEXT("relay-tls-target-name", "GRADAGG_RELAY_TLS_TARGET_NAME",
                                                  relay_tls_target_name, "",
                                                  "the name the upstream's certificate must carry; empty = the "
                                                  "host of each upstream address"),
};

/* T_ENUM rows store the choice's index through an int. */
_Static_assert(sizeof(ga_backend) == sizeof(int) && sizeof(ga_log_level) == sizeof(int) &&
                   sizeof(ga_journal_sync) == sizeof(int) && sizeof(ga_durability) == sizeof(int),
               "enum fields are ints");

static const char *const source_names[] = {"default", "env", "flag"};

/* Framing a PullChunk adds to its payload, kept free below the message limit. */
#define PULL_FRAMING_KB 64u

static void say(char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *why, size_t cap, const char *fmt, ...)
{
    if (!why || cap == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
}

/* "host:port with the port in [0, 65535]", "an integer in [1, 64]", "one of cpu|cuda". */
static void describe(const row *r, char *buf, size_t cap)
{
    switch (r->type) {
    case T_ADDR: snprintf(buf, cap, "host:port with the port in [0, 65535]"); break;
    case T_PATH: snprintf(buf, cap, "a non-empty path below %zu bytes", r->cap); break;
    case T_OPT_ADDR: snprintf(buf, cap, "host:port with the port in [0, 65535], or empty for off"); break;
    case T_OPT_PATH: snprintf(buf, cap, "a path below %zu bytes, or empty for off", r->cap); break;
    case T_OPT_TEXT: snprintf(buf, cap, "text below %zu bytes, or empty for off", r->cap); break;
    case T_U32:
    case T_U64: snprintf(buf, cap, "an integer in [%" PRIu64 ", %" PRIu64 "]", r->min, r->max); break;
    case T_ENUM: {
        size_t n = 0;
        buf[0] = '\0';
        for (const char *const *c = r->choices; *c && n < cap; c++)
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", c == r->choices ? "one of " : "|", *c);
        break;
    }
    }
}

static bool parse_u64(const char *s, uint64_t *out)
{
    if (!*s) return false;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return false;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

static bool valid_addr(const char *s, size_t cap)
{
    size_t len = strnlen(s, cap);
    if (len == 0 || len >= cap) return false;
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s) return false;
    for (const char *p = s; p < colon; p++)
        if (*p == ' ' || *p == '\t' || *p == '/') return false;
    if (s[0] == '[' && colon[-1] != ']') return false; /* [v6]:port */
    if (s[0] == '[' && colon - s < 3) return false;
    if (s[0] != '[' && memchr(s, ':', (size_t)(colon - s))) return false; /* bare v6 needs [] */
    uint64_t port;
    return parse_u64(colon + 1, &port) && port <= 65535;
}

/* Parses `text` for row r and stores it in cfg; false (nothing stored) when it is not valid. */
static bool set_value(ga_config *cfg, const row *r, const char *text)
{
    char *field = (char *)cfg + r->offset;
    uint64_t v;
    switch (r->type) {
    case T_ADDR:
        if (!valid_addr(text, r->cap)) return false;
        memcpy(field, text, strlen(text) + 1);
        return true;
    case T_OPT_ADDR:
        if (*text && !valid_addr(text, r->cap)) return false;
        memcpy(field, text, strlen(text) + 1);
        return true;
    case T_PATH:
    case T_OPT_PATH:
    case T_OPT_TEXT: {
        size_t len = strnlen(text, r->cap);
        if ((len == 0 && r->type == T_PATH) || len >= r->cap) return false;
        memcpy(field, text, len + 1);
        return true;
    }
    case T_U32:
        if (!parse_u64(text, &v) || v < r->min || v > r->max) return false;
        *(uint32_t *)(void *)field = (uint32_t)v;
        return true;
    case T_U64:
        if (!parse_u64(text, &v) || v < r->min || v > r->max) return false;
        *(uint64_t *)(void *)field = v;
        return true;
    case T_ENUM:
        for (int i = 0; r->choices[i]; i++) {
            if (strcmp(text, r->choices[i]) == 0) {
                /* Both enum fields (ga_backend, ga_log_level) are int-sized enums. */
                *(int *)(void *)field = i;
                return true;
            }
        }
        return false;
    }
    return false;
}

static void format_value(const ga_config *cfg, const row *r, char *buf, size_t cap)
{
    const char *field = (const char *)cfg + r->offset;
    switch (r->type) {
    case T_ADDR:
    case T_PATH:
    case T_OPT_ADDR:
    case T_OPT_PATH:
    case T_OPT_TEXT: snprintf(buf, cap, "%s", field); break;
    case T_U32: snprintf(buf, cap, "%" PRIu32, *(const uint32_t *)(const void *)field); break;
    case T_U64: snprintf(buf, cap, "%" PRIu64, *(const uint64_t *)(const void *)field); break;
    case T_ENUM: {
        int i = *(const int *)(const void *)field;
        snprintf(buf, cap, "%s", r->choices[i]);
        break;
    }
    }
}

void ga_config_defaults(ga_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    for (int k = 0; k < GA_CFG_KEYS; k++) {
        bool ok = set_value(cfg, &rows[k], rows[k].def);
        (void)ok; /* tests/unit/test_config.c checks every default parses */
        cfg->source[k] = GA_CONFIG_DEFAULT;
    }
}

static const char *env_lookup(char *const envp[], const char *name)
{
    if (!envp) return NULL;
    size_t n = strlen(name);
    for (char *const *e = envp; *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
    return NULL;
}

static ga_status refuse(const row *r, ga_config_source src, const char *text, char *why, size_t cap)
{
    char accepted[160];
    describe(r, accepted, sizeof accepted);
    if (src == GA_CONFIG_ENV)
        say(why, cap, "invalid %s='%s' (flag %s): expected %s", r->env, text, r->flag, accepted);
    else
        say(why, cap, "invalid %s '%s' (variable %s): expected %s", r->flag, text, r->env, accepted);
    return GA_E_CONFIG;
}

/* Settings that are valid alone but not together. */
static bool check_combined(const ga_config *c, char *why, size_t cap)
{
    if ((uint64_t)c->pull_chunk_kb + PULL_FRAMING_KB > (uint64_t)c->max_message_mb * 1024u) {
        say(why, cap,
            "invalid --pull-chunk-kb %" PRIu32 " (variable GRADAGG_PULL_CHUNK_KB): expected at most "
            "--max-message-mb * 1024 - %u = %" PRIu64 " KiB",
            c->pull_chunk_kb, PULL_FRAMING_KB, (uint64_t)c->max_message_mb * 1024u - PULL_FRAMING_KB);
        return false;
    }
    if (c->max_stream_mb > c->max_memory_mb) {
        say(why, cap,
            "invalid --max-stream-mb %" PRIu32 " (variable GRADAGG_MAX_STREAM_MB): expected at most "
            "--max-memory-mb = %" PRIu64,
            c->max_stream_mb, c->max_memory_mb);
        return false;
    }
    if (!*c->tls_cert != !*c->tls_key) {
        say(why, cap, "--tls-cert and --tls-key (GRADAGG_TLS_CERT, GRADAGG_TLS_KEY) go together: set both or neither");
        return false;
    }
    if (*c->tls_client_ca && !*c->tls_cert) {
        say(why, cap, "--tls-client-ca (GRADAGG_TLS_CLIENT_CA) needs --tls-cert and --tls-key: mutual TLS is TLS");
        return false;
    }
    if (!*c->relay_tls_cert != !*c->relay_tls_key) {
        say(why, cap, "--relay-tls-cert and --relay-tls-key (GRADAGG_RELAY_TLS_CERT, GRADAGG_RELAY_TLS_KEY) go "
                      "together: set both or neither");
        return false;
    }
    if ((*c->relay_tls_cert || *c->relay_tls_target_name) && !*c->relay_tls_ca) {
        say(why, cap, "--relay-tls-cert and --relay-tls-target-name need --relay-tls-ca (GRADAGG_RELAY_TLS_CA): "
                      "they belong to a TLS upstream");
        return false;
    }
    if (*c->relay_tls_ca && !*c->relay_to) {
        say(why, cap, "--relay-tls-ca (GRADAGG_RELAY_TLS_CA) needs --relay-to: only a relay calls upstream");
        return false;
    }
    if (c->backend == GA_BACKEND_CUDA && !ga_cuda_built()) {
        say(why, cap, "invalid --backend cuda (variable GRADAGG_BACKEND): this build has no CUDA; expected cpu");
        return false;
    }
    return true;
}

static const row *row_by_flag(const char *arg, size_t len)
{
    for (int k = 0; k < GA_CFG_KEYS; k++)
        if (strlen(rows[k].flag) == len && strncmp(rows[k].flag, arg, len) == 0) return &rows[k];
    return NULL;
}

ga_status ga_config_parse(ga_config *cfg, ga_config_action *action, int argc, char *const argv[],
                          char *const envp[], char *why, size_t why_cap)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            *action = GA_CONFIG_HELP; /* help wins over everything else on the line */
            return GA_OK;
        }
    }

    ga_config c;
    ga_config_defaults(&c);
    ga_config_action act = GA_CONFIG_RUN;

    for (int k = 0; k < GA_CFG_KEYS; k++) {
        const char *v = env_lookup(envp, rows[k].env);
        if (!v) continue;
        if (!set_value(&c, &rows[k], v)) return refuse(&rows[k], GA_CONFIG_ENV, v, why, why_cap);
        c.source[k] = GA_CONFIG_ENV;
    }

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--print-config") == 0) {
            act = GA_CONFIG_PRINT;
            continue;
        }
        if (strncmp(arg, "--", 2) != 0) {
            say(why, why_cap, "unexpected argument '%s' (settings are --name value; see --help)", arg);
            return GA_E_CONFIG;
        }
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const row *r = row_by_flag(arg, name_len);
        if (!r) {
            say(why, why_cap, "unknown option '%.*s' (see --help)", (int)name_len, arg);
            return GA_E_CONFIG;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v) {
            if (i + 1 >= argc) {
                say(why, why_cap, "option %s needs a value", r->flag);
                return GA_E_CONFIG;
            }
            v = argv[++i];
        }
        if (!set_value(&c, r, v)) return refuse(r, GA_CONFIG_FLAG, v, why, why_cap);
        c.source[r - rows] = GA_CONFIG_FLAG;
    }

    if (!check_combined(&c, why, why_cap)) return GA_E_CONFIG;
    *cfg = c;
    *action = act;
    return GA_OK;
}

void ga_config_print_help(FILE *f)
{
    fprintf(f,
            "Usage: gradagg-server [--name value | --name=value]... [--print-config] [--help]\n"
            "Every setting is a flag and a GRADAGG_* environment variable: a flag wins over the\n"
            "variable, which wins over the default. --print-config prints the resolved values and exits.\n\n");
    for (int k = 0; k < GA_CFG_KEYS; k++) {
        const row *r = &rows[k];
        char accepted[160];
        describe(r, accepted, sizeof accepted);
        fprintf(f, "  %-22s %-27s default %s\n      %s\n      accepts %s\n", r->flag, r->env, r->def, r->help,
                accepted);
    }
}

void ga_config_print(const ga_config *cfg, FILE *f)
{
    for (int k = 0; k < GA_CFG_KEYS; k++) {
        char v[GA_CONFIG_PATH_MAX];
        format_value(cfg, &rows[k], v, sizeof v);
        fprintf(f, "%-18s %-24s (%s)\n", rows[k].name, v, source_names[cfg->source[k]]);
    }
}

void ga_config_log(const ga_config *cfg)
{
    for (int k = 0; k < GA_CFG_KEYS; k++) {
        char v[GA_CONFIG_PATH_MAX];
        format_value(cfg, &rows[k], v, sizeof v);
        ga_log(GA_LOG_INFO, "config %-18s %-24s (%s)", rows[k].name, v, source_names[cfg->source[k]]);
    }
}

const char *ga_config_backend_name(ga_backend b)
{
    return (unsigned)b < GA_BACKENDS ? backend_choices[b] : "?";
}

void ga_config_listen_host(const ga_config *cfg, char *buf, size_t cap)
{
    const char *colon = strrchr(cfg->listen, ':');
    size_t n = colon ? (size_t)(colon - cfg->listen) : strlen(cfg->listen);
    snprintf(buf, cap, "%.*s", (int)n, cfg->listen);
}

ga_status ga_config_make_data_dir(const ga_config *cfg, char *why, size_t why_cap)
{
    char inner[GA_CONFIG_PATH_MAX + 128];
    if (ga_file_mkdirs(cfg->data_dir, inner, sizeof inner) != GA_OK) {
        say(why, why_cap, "cannot create --data-dir: %s", inner);
        return GA_E_IO;
    }
    struct stat st;
    if (stat(cfg->data_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        say(why, why_cap, "--data-dir %s is not a directory", cfg->data_dir);
        return GA_E_IO;
    }
    return GA_OK;
}
