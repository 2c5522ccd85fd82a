/* The server's settings: one table (config.c) where each row is a name, a flag (--listen), an
 * environment variable (GRADAGG_LISTEN), a type, a default, a help line and its validation.
 * Precedence: default < environment < flag. Parsed once at start-up; a ga_config is a plain
 * value afterwards (any thread may read it). */
#ifndef GA_CONFIG_H
#define GA_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/base.h"
#include "ga_exec.h"
#include "ga_status.h"
#include "persist/persist.h"

/* Where a setting's value came from. */
typedef enum ga_config_source { GA_CONFIG_DEFAULT = 0, GA_CONFIG_ENV = 1, GA_CONFIG_FLAG = 2 } ga_config_source;

/* One value per table row, in table order (config.c), plus settings that are not user-facing. */
typedef enum ga_config_key {
    GA_CFG_LISTEN,
    GA_CFG_BACKEND,
    GA_CFG_THREADS,
    GA_CFG_MATH_TASKS,
    GA_CFG_CQ_THREADS,
    GA_CFG_MAX_MESSAGE_MB,
    GA_CFG_MAX_STREAM_MB,
    GA_CFG_MAX_STREAMS_PER_CLIENT,
    GA_CFG_MAX_STREAMS_PER_JOB,
    GA_CFG_MAX_STREAMS_PER_TOKEN,
    GA_CFG_MAX_MEMORY_MB,
    GA_CFG_GRPC_MEMORY_MB,
    GA_CFG_MAX_JOBS,
    GA_CFG_MAX_TENSORS,
    GA_CFG_PULL_CHUNK_KB,
    GA_CFG_STREAM_WINDOW_KB,
    GA_CFG_DEADLINE_MS,
    GA_CFG_QUORUM,
    GA_CFG_MEMBER_LEASE_MS,
    GA_CFG_RANK_LOST_MS,
    GA_CFG_FINISHED_RETENTION_S,
    GA_CFG_FINISHED_JOBS,
    GA_CFG_UNUSED_JOB_EXPIRY_S,
    GA_CFG_MAX_UNUSED_JOBS_PER_CLIENT,
    GA_CFG_MAX_UNUSED_JOBS_PER_TOKEN,
    GA_CFG_TRUSTED_CLIENT_HOSTS,
    GA_CFG_DATA_DIR,
    GA_CFG_DRAIN_DELAY_MS,
    GA_CFG_SHUTDOWN_GRACE_MS,
    GA_CFG_LOG_LEVEL,
    GA_CFG_ADMIN_LISTEN,
    GA_CFG_CHECKPOINT_STEPS,
    GA_CFG_CHECKPOINT_SECONDS,
    GA_CFG_CHECKPOINT_KEEP,
    GA_CFG_JOURNAL_SYNC,
    GA_CFG_JOURNAL_COPIES,
    GA_CFG_DURABILITY,
    GA_CFG_TLS_CERT,
    GA_CFG_TLS_KEY,
    GA_CFG_TLS_CLIENT_CA,
    GA_CFG_AUTH_TOKENS,
    GA_CFG_MAX_ELEMENTS,
    GA_CFG_SHARD_COUNT,
    GA_CFG_SHARD_INDEX,
    GA_CFG_ADVERTISE_ADDRESS,
    GA_CFG_RELAY_TO,
    GA_CFG_RELAY_NODE,
    GA_CFG_RELAY_NODES,
    GA_CFG_RELAY_WORKERS,
    GA_CFG_RELAY_CODEC,
    GA_CFG_RELAY_TLS_CA,
    GA_CFG_RELAY_TLS_CERT,
    GA_CFG_RELAY_TLS_KEY,
    GA_CFG_RELAY_TLS_TARGET_NAME,
    GA_CFG_KEYS
} ga_config_key;

#define GA_CONFIG_LISTEN_MAX 256
#define GA_CONFIG_PATH_MAX 1024

/* --finished-jobs: a removed finished job's directory is deleted, or moved aside. */
typedef enum ga_finished_jobs { GA_FINISHED_DELETE = 0, GA_FINISHED_KEEP = 1 } ga_finished_jobs;

typedef struct ga_config {
    char listen[GA_CONFIG_LISTEN_MAX]; /* host:port, [v6]:port; port 0 = any free port */
    ga_backend backend;
    uint32_t threads;                  /* OpenMP threads for the math; 0 = all */
    uint32_t math_tasks;               /* jobs' math tasks at once: libuv's thread pool (main.c) */
    uint32_t cq_threads;               /* gRPC completion-queue threads */
    uint32_t max_message_mb;           /* per gRPC message, both directions */
    uint32_t max_stream_mb;            /* payload of one Push or InitTensors stream */
    uint32_t max_streams_per_client;   /* Push and InitTensors streams open at once from one host */
    uint32_t max_streams_per_job;      /* ... and of one job */
    uint32_t max_streams_per_token;    /* ... and under one bearer token (its job and lanes) */
    uint64_t max_memory_mb;            /* parameters, state and buffered payloads, all jobs */
    uint32_t grpc_memory_mb;           /* gRPC's own memory (resource quota); 0 = no quota */
    uint32_t max_jobs;
    uint32_t max_tensors;              /* per job */
    uint32_t pull_chunk_kb;            /* payload per PullChunk */
    uint32_t stream_window_kb;         /* HTTP/2 receive window per stream; 0 = gRPC sizes it (BDP) */
    uint32_t deadline_ms;              /* straggler deadline when a job sets none; 0 = none */
    uint32_t quorum;                   /* straggler quorum when a job sets none; 0 = world size */
    uint32_t member_lease_ms;          /* a silent member is dropped after this */
    uint32_t rank_lost_ms;             /* a silent member is lost after this: its job fails */
    uint32_t finished_retention_s;     /* a finished job is removed this long after it finished */
    uint32_t unused_job_expiry_s;      /* a job never pushed to, with no live rank, is removed this long after */
    uint32_t max_unused_jobs_per_client; /* jobs never pushed to that one client host may have created */
    uint32_t max_unused_jobs_per_token;  /* ... and Joins under one bearer token */
    char trusted_client_hosts[GA_CONFIG_PATH_MAX]; /* addresses / CIDR blocks not capped per host; "" = none */
    ga_finished_jobs finished_jobs;    /* what becomes of a finished job's directory */
    char data_dir[GA_CONFIG_PATH_MAX]; /* checkpoints; created if missing */
    uint32_t drain_delay_ms;           /* NOT_SERVING is visible this long before the drain */
    uint32_t shutdown_grace_ms;        /* then calls still open are cancelled */
    ga_log_level log_level;
    char admin_listen[GA_CONFIG_LISTEN_MAX]; /* admin HTTP (/metrics, /healthz, /readyz); "" = off */
    uint32_t checkpoint_steps;          /* checkpoint every this many versions; 0 = not by count */
    uint32_t checkpoint_seconds;        /* ... or when the last one is this old; 0 = not by time */
    uint32_t checkpoint_keep;           /* newest checkpoints kept per job */
    ga_journal_sync journal_sync;       /* when the push journal is flushed to the disk */
    uint32_t journal_copies;            /* files each journal segment is written to (1 or 2) */
    ga_durability durability;           /* what the journal holds: every acknowledged push, or not */
    char tls_cert[GA_CONFIG_PATH_MAX];  /* server certificate chain, PEM; "" = plaintext */
    char tls_key[GA_CONFIG_PATH_MAX];   /* its private key, PEM */
    char tls_client_ca[GA_CONFIG_PATH_MAX]; /* CA bundle clients must present a cert from; "" = no mTLS */
    char auth_tokens[GA_CONFIG_PATH_MAX];   /* file of "job token" lines; "" = no bearer tokens */
    uint64_t max_elements;              /* parameters per job, all tensors together */
    uint32_t shard_count;               /* shards in the set this server belongs to; 0 = none */
    uint32_t shard_index;               /* this server's index in it */
    char advertise_address[GA_CONFIG_LISTEN_MAX]; /* where clients reach it; "" = the listen address */
    char relay_to[GA_CONFIG_PATH_MAX];  /* a node relay's upstream shards; "" = a server (relay.h) */
    char relay_node[16];                /* "" = each job's first worker tells it */
    uint32_t relay_nodes, relay_workers;
    char relay_codec[64];               /* "name[:param]": the relay's push upstream */
    char relay_tls_ca[GA_CONFIG_PATH_MAX];   /* PEM roots of the upstream's certificate; "" = plaintext */
    char relay_tls_cert[GA_CONFIG_PATH_MAX]; /* the relay's client certificate upstream (mutual TLS) */
    char relay_tls_key[GA_CONFIG_PATH_MAX];  /* its private key */
    char relay_tls_target_name[256];         /* name checked in the upstream's certificate; "" = its host */
    ga_config_source source[GA_CFG_KEYS];
    /* Not a table row: whether the server catches SIGTERM/SIGINT (the binary does; in-process
     * tests do not). */
    bool install_signals;
} ga_config;

/* What the command line asked for besides the settings. */
typedef enum ga_config_action { GA_CONFIG_RUN = 0, GA_CONFIG_HELP = 1, GA_CONFIG_PRINT = 2 } ga_config_action;

/* Every setting at its default. */
void ga_config_defaults(ga_config *cfg);

/* Resolves every setting from its default, then `envp` (NULL-terminated "NAME=value" strings
 * like environ; NULL = none), then argv[1..argc) ("--name value" or "--name=value", plus
 * --help / -h and --print-config; with --help nothing else is parsed). install_signals comes
 * back false. Borrows everything. On error returns GA_E_CONFIG, writes a
 * message naming the flag or variable, the value and what is accepted to why[0..why_cap), and
 * leaves *cfg and *action untouched. */
ga_status ga_config_parse(ga_config *cfg, ga_config_action *action, int argc, char *const argv[],
                          char *const envp[], char *why, size_t why_cap);

/* The table for --help: every row with its flag, variable, default, accepted values, help. */
void ga_config_print_help(FILE *f);
/* The resolved values, one line per setting with where it came from. */
void ga_config_print(const ga_config *cfg, FILE *f);
/* The same lines through ga_log at info level (start-up). */
void ga_config_log(const ga_config *cfg);

/* "cpu" / "cuda". Static string. */
const char *ga_config_backend_name(ga_backend b);
/* The host part of cfg->listen ("127.0.0.1", "[::1]") into buf[0..cap). */
void ga_config_listen_host(const ga_config *cfg, char *buf, size_t cap);
/* Creates cfg->data_dir (and its parents) when missing. GA_E_IO with a message in why. */
ga_status ga_config_make_data_dir(const ga_config *cfg, char *why, size_t why_cap);

#endif
