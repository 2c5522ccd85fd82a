/* The real server started in the test's process for SDK tests: gRPC on 127.0.0.1:0, no admin
 * port (tests run in parallel), warnings only, a fresh data dir under base (test_dirs.h). And the
 * backend of every server a test starts: GRADAGG_BACKEND, as a gradagg-server process reads it
 * (scripts/gpu-session sets cuda to run the e2e tests against CUDA-backed servers), else cpu. */
#ifndef GA_TEST_INPROC_SERVER_H
#define GA_TEST_INPROC_SERVER_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/config.h"
#include "server/server.h"
#include "test_dirs.h"

/* GRADAGG_BACKEND's backend (unset: cpu); any other value ends the test run. */
static inline ga_backend ga_test_backend(void)
{
    const char *b = getenv("GRADAGG_BACKEND");
    if (!b || !strcmp(b, "cpu")) return GA_BACKEND_CPU;
    if (!strcmp(b, "cuda")) return GA_BACKEND_CUDA;
    fprintf(stderr, "GRADAGG_BACKEND=%s: expected cpu or cuda\n", b);
    abort();
}

/* ga_config_defaults on the test backend. */
static inline void ga_test_config_defaults(ga_config *cfg)
{
    ga_config_defaults(cfg);
    cfg->backend = ga_test_backend();
}

/* Starts a server; writes it to *out and its "127.0.0.1:<port>" to address[0..cap). */
static inline ga_status ga_test_server_start(const char *base, ga_server **out, char *address, size_t cap)
{
    ga_config cfg;
    ga_test_config_defaults(&cfg);
    cfg.admin_listen[0] = '\0';
    snprintf(cfg.listen, sizeof cfg.listen, "127.0.0.1:0");
    ga_test_fresh_dir(cfg.data_dir, sizeof cfg.data_dir, base);
    cfg.log_level = GA_LOG_WARN;
    ga_status st = ga_server_start(&cfg, out);
    if (st == GA_OK) snprintf(address, cap, "127.0.0.1:%d", ga_server_port(*out));
    return st;
}

#endif
