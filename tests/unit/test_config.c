/* The settings table: defaults, environment over default, flag over environment, every kind of
 * invalid value refused with a message naming the flag or variable, --help and --print-config. */
#define _POSIX_C_SOURCE 200809L /* fmemopen, mkdtemp */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/config.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Parses argv (NULL-terminated, without the program name) against envp. */
static ga_status parse(ga_config *cfg, ga_config_action *act, char *const envp[], const char *const *args, char *why,
                       size_t cap)
{
    char *argv[32] = {"gradagg-server"};
    int argc = 1;
    for (; args && args[argc - 1]; argc++) argv[argc] = (char *)args[argc - 1];
    return ga_config_parse(cfg, act, argc, argv, envp, why, cap);
}

/* Output of a print function as a string (caller frees). */
static char *capture(void (*fn)(const void *, FILE *), const void *arg)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    fn(arg, f);
    fclose(f);
    return buf;
}

static void help_to(const void *arg, FILE *f)
{
    (void)arg;
    ga_config_print_help(f);
}

static void print_to(const void *arg, FILE *f)
{
    ga_config_print(arg, f);
}

static void test_defaults(void **state)
{
    (void)state;
    ga_config cfg;
    ga_config_action act = GA_CONFIG_PRINT;
    char why[256] = "";
    assert_int_equal(parse(&cfg, &act, NULL, NULL, why, sizeof why), GA_OK);
    assert_int_equal(act, GA_CONFIG_RUN);
    assert_string_equal(cfg.listen, "127.0.0.1:7070");
    assert_int_equal(cfg.backend, GA_BACKEND_CPU);
    assert_int_equal(cfg.threads, 0);
    assert_int_equal(cfg.math_tasks, 2);
    assert_int_equal(cfg.cq_threads, 2);
    assert_int_equal(cfg.max_message_mb, 8);
    assert_int_equal(cfg.max_memory_mb, 16384);
    assert_int_equal(cfg.max_jobs, 64);
    assert_int_equal(cfg.max_tensors, 4096);
    assert_int_equal(cfg.pull_chunk_kb, 1024);
    assert_int_equal(cfg.stream_window_kb, 0);
    assert_int_equal(cfg.deadline_ms, 0);
    assert_int_equal(cfg.quorum, 0);
    assert_int_equal(cfg.member_lease_ms, 10000);
    assert_string_equal(cfg.data_dir, "./gradagg-data");
    assert_int_equal(cfg.drain_delay_ms, 0);
    assert_int_equal(cfg.shutdown_grace_ms, 5000);
    assert_int_equal(cfg.log_level, GA_LOG_INFO);
    assert_false(cfg.install_signals);
    for (int k = 0; k < GA_CFG_KEYS; k++) assert_int_equal(cfg.source[k], GA_CONFIG_DEFAULT);

    /* ga_config_defaults gives the same values as a parse of nothing. */
    ga_config d;
    ga_config_defaults(&d);
    assert_memory_equal(&d, &cfg, sizeof d);
}

static void test_env_overrides_default(void **state)
{
    (void)state;
    char *const envp[] = {"PATH=/bin", "GRADAGG_LISTEN=0.0.0.0:9000", "GRADAGG_BACKEND=cpu", "GRADAGG_THREADS=3",
                          "GRADAGG_MAX_MEMORY_MB=8192", "GRADAGG_LOG_LEVEL=debug", "GRADAGG_DATA_DIR=/var/lib/ga",
                          "GRADAGG_DRAIN_DELAY_MS=2000", "GRADAGG_LISTENX=1.2.3.4:1", NULL};
    ga_config cfg;
    ga_config_action act;
    char why[256];
    assert_int_equal(parse(&cfg, &act, envp, NULL, why, sizeof why), GA_OK);
    assert_string_equal(cfg.listen, "0.0.0.0:9000");
    assert_int_equal(cfg.source[GA_CFG_LISTEN], GA_CONFIG_ENV);
    assert_int_equal(cfg.threads, 3);
    assert_int_equal(cfg.max_memory_mb, 8192);
    assert_int_equal(cfg.log_level, GA_LOG_DEBUG);
    assert_string_equal(cfg.data_dir, "/var/lib/ga");
    assert_int_equal(cfg.drain_delay_ms, 2000);
    assert_int_equal(cfg.source[GA_CFG_DRAIN_DELAY_MS], GA_CONFIG_ENV);
    assert_int_equal(cfg.cq_threads, 2);
    assert_int_equal(cfg.source[GA_CFG_CQ_THREADS], GA_CONFIG_DEFAULT);
}

static void test_flag_overrides_env(void **state)
{
    (void)state;
    char *const envp[] = {"GRADAGG_LISTEN=0.0.0.0:9000", "GRADAGG_THREADS=3", "GRADAGG_QUORUM=2", NULL};
    const char *args[] = {"--listen", "127.0.0.1:0", "--threads=5", "--log-level", "warn", "--cq-threads=4",
                          "--listen=[::1]:7071", NULL};
    ga_config cfg;
    ga_config_action act;
    char why[256];
    assert_int_equal(parse(&cfg, &act, envp, args, why, sizeof why), GA_OK);
    assert_int_equal(act, GA_CONFIG_RUN);
    assert_string_equal(cfg.listen, "[::1]:7071"); /* the last flag wins */
    assert_int_equal(cfg.source[GA_CFG_LISTEN], GA_CONFIG_FLAG);
    assert_int_equal(cfg.threads, 5);
    assert_int_equal(cfg.source[GA_CFG_THREADS], GA_CONFIG_FLAG);
    assert_int_equal(cfg.quorum, 2);
    assert_int_equal(cfg.source[GA_CFG_QUORUM], GA_CONFIG_ENV);
    assert_int_equal(cfg.log_level, GA_LOG_WARN);
    assert_int_equal(cfg.cq_threads, 4);

    char host[64];
    ga_config_listen_host(&cfg, host, sizeof host);
    assert_string_equal(host, "[::1]");

    const char *print[] = {"--print-config", "--max-jobs", "7", NULL};
    assert_int_equal(parse(&cfg, &act, NULL, print, why, sizeof why), GA_OK);
    assert_int_equal(act, GA_CONFIG_PRINT);
    assert_int_equal(cfg.max_jobs, 7);
    char *out = capture(print_to, &cfg);
    assert_non_null(strstr(out, "max-jobs"));
    assert_non_null(strstr(out, "(flag)"));
    assert_non_null(strstr(out, "(default)"));
    /* one line per setting */
    int lines = 0;
    for (const char *p = out; *p; p++) lines += *p == '\n';
    assert_int_equal(lines, GA_CFG_KEYS);
    free(out);
}

typedef struct bad_case {
    const char *env;  /* "GRADAGG_X=v" or NULL */
    const char *arg0; /* flag form, or NULL */
    const char *arg1;
    const char *expect[3]; /* substrings of the message */
} bad_case;

static void test_invalid_values_refused(void **state)
{
    (void)state;
    static const bad_case cases[] = {
        /* integers: not a number, sign, junk, empty, overflow, below and above the range */
        {NULL, "--threads", "abc", {"--threads", "GRADAGG_THREADS", "[0, 4096]"}},
        {NULL, "--threads=-1", NULL, {"--threads", "'-1'", "[0, 4096]"}},
        {NULL, "--threads=4097", NULL, {"--threads", "'4097'", "[0, 4096]"}},
        {NULL, "--cq-threads=0", NULL, {"--cq-threads", "[1, 64]", NULL}},
        {NULL, "--max-jobs=12x", NULL, {"--max-jobs", "integer", NULL}},
        {NULL, "--max-memory-mb=99999999999999999999999", NULL, {"--max-memory-mb", "integer in", NULL}},
        {NULL, "--deadline-ms=", NULL, {"--deadline-ms", "''", NULL}},
        {"GRADAGG_CQ_THREADS=65", NULL, NULL, {"GRADAGG_CQ_THREADS='65'", "--cq-threads", "[1, 64]"}},
        {"GRADAGG_MAX_MESSAGE_MB= 64", NULL, NULL, {"GRADAGG_MAX_MESSAGE_MB", "[1, 1024]", NULL}},
        {"GRADAGG_MEMBER_LEASE_MS=99", NULL, NULL, {"GRADAGG_MEMBER_LEASE_MS", "[100, 86400000]", NULL}},
        /* enums */
        {NULL, "--backend", "tpu", {"--backend", "one of cpu|cuda", NULL}},
        {"GRADAGG_LOG_LEVEL=verbose", NULL, NULL, {"GRADAGG_LOG_LEVEL", "one of error|warn|info|debug", NULL}},
        {NULL, "--log-level=INFO", NULL, {"--log-level", "error|warn|info|debug", NULL}},
        /* addresses */
        {NULL, "--listen", "localhost", {"--listen", "host:port", NULL}},
        {NULL, "--listen", "127.0.0.1:65536", {"--listen", "[0, 65535]", NULL}},
        {NULL, "--listen", ":7070", {"--listen", "host:port", NULL}},
        {NULL, "--listen", "::1:7070", {"--listen", "host:port", NULL}},
        {NULL, "--listen", "127.0.0.1:", {"--listen", "host:port", NULL}},
        {"GRADAGG_LISTEN=", NULL, NULL, {"GRADAGG_LISTEN", "host:port", NULL}},
        /* paths */
        {NULL, "--data-dir=", NULL, {"--data-dir", "non-empty path", NULL}},
        /* settings that do not fit together */
        {NULL, "--max-message-mb=1", NULL, {"--pull-chunk-kb", "--max-message-mb", "960"}},
        {NULL, "--max-memory-mb=1024", NULL, {"--max-stream-mb", "--max-memory-mb", NULL}},
        {NULL, "--tls-cert=/x.pem", NULL, {"--tls-cert", "--tls-key", "both or neither"}},
        {NULL, "--tls-client-ca=/ca.pem", NULL, {"--tls-client-ca", "needs --tls-cert", NULL}},
        {NULL, "--relay-tls-cert=/c.pem", NULL, {"--relay-tls-cert", "--relay-tls-key", "both or neither"}},
        {NULL, "--relay-tls-target-name=x", NULL, {"--relay-tls-target-name", "need --relay-tls-ca", NULL}},
        {NULL, "--relay-tls-ca=/ca.pem", NULL, {"--relay-tls-ca", "needs --relay-to", NULL}},
        /* optional settings: empty is off, anything else must be valid */
        {NULL, "--admin-listen=nowhere", NULL, {"--admin-listen", "or empty for off", NULL}},
        {NULL, "--journal-sync=always", NULL, {"--journal-sync", "one of none|step|push", NULL}},
        {NULL, "--checkpoint-keep=0", NULL, {"--checkpoint-keep", "[1, 1000]", NULL}},
        /* the command line itself */
        {NULL, "--no-such-flag", NULL, {"unknown option", "--no-such-flag", "--help"}},
        {NULL, "--no-such=1", NULL, {"unknown option", "'--no-such'", NULL}},
        {NULL, "positional", NULL, {"unexpected argument", "positional", NULL}},
        {NULL, "--listen", NULL, {"--listen", "needs a value", NULL}},
    };
    for (size_t i = 0; i < COUNT(cases); i++) {
        const bad_case *c = &cases[i];
        char *const envp[] = {(char *)c->env, NULL};
        const char *args[] = {c->arg0, c->arg1, NULL};
        ga_config cfg;
        memset(&cfg, 0xA5, sizeof cfg);
        ga_config before = cfg;
        ga_config_action act = (ga_config_action)42;
        char why[512] = "";
        ga_status st = parse(&cfg, &act, envp, c->arg0 ? args : NULL, why, sizeof why);
        if (st != GA_E_CONFIG)
            fail_msg("case %zu (%s %s) was accepted", i, c->env ? c->env : "", c->arg0 ? c->arg0 : "");
        for (int k = 0; k < 3 && c->expect[k]; k++)
            if (!strstr(why, c->expect[k])) fail_msg("case %zu: '%s' not in message: %s", i, c->expect[k], why);
        assert_memory_equal(&cfg, &before, sizeof cfg); /* a refused parse changes nothing */
        assert_int_equal(act, 42);
    }
}

/* Optional settings take "" for off; TLS files go in pairs. */
static void test_optional_settings(void **state)
{
    (void)state;
    const char *args[] = {"--admin-listen=", "--tls-cert=/s.pem", "--tls-key=/s.key", "--tls-client-ca=/ca.pem",
                          "--journal-sync=push", "--journal-copies=2", NULL};
    ga_config cfg;
    ga_config_action act;
    char why[256] = "";
    assert_int_equal(parse(&cfg, &act, NULL, args, why, sizeof why), GA_OK);
    assert_string_equal(cfg.admin_listen, "");
    assert_string_equal(cfg.tls_cert, "/s.pem");
    assert_string_equal(cfg.tls_key, "/s.key");
    assert_string_equal(cfg.tls_client_ca, "/ca.pem");
    assert_string_equal(cfg.auth_tokens, "");
    assert_int_equal(cfg.journal_sync, GA_JOURNAL_SYNC_PUSH);
    assert_int_equal(cfg.journal_copies, 2);
    assert_int_equal(cfg.source[GA_CFG_ADMIN_LISTEN], GA_CONFIG_FLAG);
}

static void test_cuda_backend_needs_cuda_build(void **state)
{
    (void)state;
    const char *args[] = {"--backend", "cuda", NULL};
    ga_config cfg;
    ga_config_action act;
    char why[256] = "";
    ga_status st = parse(&cfg, &act, NULL, args, why, sizeof why);
    if (ga_cuda_built()) {
        assert_int_equal(st, GA_OK);
        assert_int_equal(cfg.backend, GA_BACKEND_CUDA);
    } else {
        assert_int_equal(st, GA_E_CONFIG);
        assert_non_null(strstr(why, "--backend"));
        assert_non_null(strstr(why, "no CUDA"));
    }
}

static void test_help_lists_every_row(void **state)
{
    (void)state;
    /* --help wins even over a bad value elsewhere on the line. */
    const char *args[] = {"--threads=bad", "--help", NULL};
    ga_config cfg;
    ga_config_action act;
    char why[256];
    assert_int_equal(parse(&cfg, &act, NULL, args, why, sizeof why), GA_OK);
    assert_int_equal(act, GA_CONFIG_HELP);
    const char *short_args[] = {"-h", NULL};
    assert_int_equal(parse(&cfg, &act, NULL, short_args, why, sizeof why), GA_OK);
    assert_int_equal(act, GA_CONFIG_HELP);

    static const char *const expect[][3] = {
        {"--listen", "GRADAGG_LISTEN", "127.0.0.1:7070"},
        {"--backend", "GRADAGG_BACKEND", "cpu|cuda"},
        {"--threads", "GRADAGG_THREADS", NULL},
        {"--math-tasks", "GRADAGG_MATH_TASKS", NULL},
        {"--cq-threads", "GRADAGG_CQ_THREADS", NULL},
        {"--max-message-mb", "GRADAGG_MAX_MESSAGE_MB", NULL},
        {"--max-stream-mb", "GRADAGG_MAX_STREAM_MB", NULL},
        {"--max-streams-per-client", "GRADAGG_MAX_STREAMS_PER_CLIENT", NULL},
        {"--max-streams-per-job", "GRADAGG_MAX_STREAMS_PER_JOB", NULL},
        {"--max-streams-per-token", "GRADAGG_MAX_STREAMS_PER_TOKEN", NULL},
        {"--max-memory-mb", "GRADAGG_MAX_MEMORY_MB", NULL},
        {"--grpc-memory-mb", "GRADAGG_GRPC_MEMORY_MB", NULL},
        {"--max-jobs", "GRADAGG_MAX_JOBS", NULL},
        {"--max-tensors", "GRADAGG_MAX_TENSORS", NULL},
        {"--pull-chunk-kb", "GRADAGG_PULL_CHUNK_KB", NULL},
        {"--stream-window-kb", "GRADAGG_STREAM_WINDOW_KB", NULL},
        {"--deadline-ms", "GRADAGG_DEADLINE_MS", NULL},
        {"--quorum", "GRADAGG_QUORUM", NULL},
        {"--member-lease-ms", "GRADAGG_MEMBER_LEASE_MS", NULL},
        {"--rank-lost-ms", "GRADAGG_RANK_LOST_MS", NULL},
        {"--finished-job-retention-s", "GRADAGG_FINISHED_JOB_RETENTION_S", NULL},
        {"--unused-job-expiry-s", "GRADAGG_UNUSED_JOB_EXPIRY_S", NULL},
        {"--max-unused-jobs-per-client", "GRADAGG_MAX_UNUSED_JOBS_PER_CLIENT", NULL},
        {"--max-unused-jobs-per-token", "GRADAGG_MAX_UNUSED_JOBS_PER_TOKEN", NULL},
        {"--trusted-client-hosts", "GRADAGG_TRUSTED_CLIENT_HOSTS", NULL},
        {"--finished-jobs", "GRADAGG_FINISHED_JOBS", NULL},
        {"--data-dir", "GRADAGG_DATA_DIR", "./gradagg-data"},
        {"--drain-delay-ms", "GRADAGG_DRAIN_DELAY_MS", NULL},
        {"--shutdown-grace-ms", "GRADAGG_SHUTDOWN_GRACE_MS", NULL},
        {"--log-level", "GRADAGG_LOG_LEVEL", "error|warn|info|debug"},
        {"--admin-listen", "GRADAGG_ADMIN_LISTEN", "127.0.0.1:7071"},
        {"--checkpoint-steps", "GRADAGG_CHECKPOINT_STEPS", NULL},
        {"--checkpoint-seconds", "GRADAGG_CHECKPOINT_SECONDS", NULL},
        {"--checkpoint-keep", "GRADAGG_CHECKPOINT_KEEP", NULL},
        {"--journal-sync", "GRADAGG_JOURNAL_SYNC", "none|step|push"},
        {"--journal-copies", "GRADAGG_JOURNAL_COPIES", NULL},
        {"--durability", "GRADAGG_DURABILITY", "acked|checkpoint"},
        {"--tls-cert", "GRADAGG_TLS_CERT", NULL},
        {"--tls-key", "GRADAGG_TLS_KEY", NULL},
        {"--tls-client-ca", "GRADAGG_TLS_CLIENT_CA", NULL},
        {"--auth-tokens", "GRADAGG_AUTH_TOKENS", NULL},
        {"--max-elements", "GRADAGG_MAX_ELEMENTS", NULL},
        {"--shard-count", "GRADAGG_SHARD_COUNT", NULL},
        {"--shard-index", "GRADAGG_SHARD_INDEX", NULL},
        {"--advertise-address", "GRADAGG_ADVERTISE_ADDRESS", NULL},
        {"--relay-to", "GRADAGG_RELAY_TO", NULL},
        {"--relay-node", "GRADAGG_RELAY_NODE", NULL},
        {"--relay-nodes", "GRADAGG_RELAY_NODES", NULL},
        {"--relay-workers", "GRADAGG_RELAY_WORKERS", NULL},
        {"--relay-codec", "GRADAGG_RELAY_CODEC", "2bit[:threshold | :auto]"},
        {"--relay-tls-ca", "GRADAGG_RELAY_TLS_CA", NULL},
        {"--relay-tls-cert", "GRADAGG_RELAY_TLS_CERT", NULL},
        {"--relay-tls-key", "GRADAGG_RELAY_TLS_KEY", NULL},
        {"--relay-tls-target-name", "GRADAGG_RELAY_TLS_TARGET_NAME", NULL},
    };
    assert_int_equal(COUNT(expect), GA_CFG_KEYS);
    char *out = capture(help_to, NULL);
    for (size_t i = 0; i < COUNT(expect); i++)
        for (int k = 0; k < 3 && expect[i][k]; k++)
            if (!strstr(out, expect[i][k])) fail_msg("--help lacks %s", expect[i][k]);
    free(out);
}

static void test_data_dir_created(void **state)
{
    (void)state;
    char base[] = "/tmp/ga_config_XXXXXX";
    assert_non_null(mkdtemp(base));
    ga_config cfg;
    ga_config_defaults(&cfg);
    snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s/a/b/c", base);
    char why[256] = "";
    assert_int_equal(ga_config_make_data_dir(&cfg, why, sizeof why), GA_OK);
    struct stat st;
    assert_int_equal(stat(cfg.data_dir, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(ga_config_make_data_dir(&cfg, why, sizeof why), GA_OK); /* exists: fine */

    /* A file in the way is refused with a message naming the flag. */
    char file[300];
    snprintf(file, sizeof file, "%s/file", base);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s/file/sub", base);
    assert_int_equal(ga_config_make_data_dir(&cfg, why, sizeof why), GA_E_IO);
    assert_non_null(strstr(why, "--data-dir"));
    snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", file);
    assert_int_equal(ga_config_make_data_dir(&cfg, why, sizeof why), GA_E_IO);

    unlink(file);
    char p[300];
    snprintf(p, sizeof p, "%s/a/b/c", base);
    rmdir(p);
    snprintf(p, sizeof p, "%s/a/b", base);
    rmdir(p);
    snprintf(p, sizeof p, "%s/a", base);
    rmdir(p);
    assert_int_equal(rmdir(base), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_env_overrides_default),
        cmocka_unit_test(test_flag_overrides_env),
        cmocka_unit_test(test_invalid_values_refused),
        cmocka_unit_test(test_optional_settings),
        cmocka_unit_test(test_cuda_backend_needs_cuda_build),
        cmocka_unit_test(test_help_lists_every_row),
        cmocka_unit_test(test_data_dir_created),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
