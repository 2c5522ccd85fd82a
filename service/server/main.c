/* gradagg-server: resolve the config (exit 2 when it is invalid), start, serve until SIGTERM or
 * SIGINT has drained the server, exit 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "config.h"
#include "server.h"

extern char **environ;

/* The jobs' math tasks (service/core/task.h: one at a time per job) run on libuv's thread pool, whose
 * size libuv reads from the environment once, at the first task of the process; set here, before
 * any thread starts. Each task already spreads over --threads OpenMP threads, so tasks beyond what
 * the cores can run side by side only oversubscribe them, and every running apply holds its own
 * scratch. */
static void math_tasks_set(uint32_t tasks)
{
    char value[16];
    snprintf(value, sizeof value, "%u", tasks);
    setenv("UV_THREADPOOL_SIZE", value, 1);
}

int main(int argc, char **argv)
{
    ga_config cfg;
    ga_config_action action;
    char why[512];
    if (ga_config_parse(&cfg, &action, argc, argv, environ, why, sizeof why) != GA_OK) {
        fprintf(stderr, "gradagg-server: %s\n", why);
        return 2;
    }
    if (action == GA_CONFIG_HELP) {
        ga_config_print_help(stdout);
        return 0;
    }
    if (action == GA_CONFIG_PRINT) {
        if (ga_server_check_config(&cfg, why, sizeof why) != GA_OK) {
            fprintf(stderr, "gradagg-server: %s\n", why);
            return 2;
        }
        ga_config_print(&cfg, stdout);
        return 0;
    }

    ga_heap_tune((uint64_t)cfg.max_memory_mb << 20); /* before any thread starts */
    math_tasks_set(cfg.math_tasks);
    ga_config_log(&cfg); /* always, whatever the level: the operator's record of this start */
    ga_log_set_level(cfg.log_level);
    cfg.install_signals = true;

    ga_server *server;
    ga_status st = ga_server_start(&cfg, &server);
    if (st != GA_OK) {
        ga_log(GA_LOG_ERROR, "cannot start on %s: %s (%s)", cfg.listen, ga_strerror(st), ga_status_name(st));
        return 1;
    }
    char host[GA_CONFIG_LISTEN_MAX];
    ga_config_listen_host(&cfg, host, sizeof host);
    int port = ga_server_port(server);
    ga_log(GA_LOG_INFO, "listening on %s:%d backend=%s", host, port, ga_config_backend_name(cfg.backend));
    /* The line tests and scripts read the port from (listen ...:0). */
    printf("gradagg-server: listening on %s:%d\n", host, port);
    if (cfg.admin_listen[0]) {
        /* The host part of admin_listen, as for listen above. */
        const char *colon = strrchr(cfg.admin_listen, ':');
        int n = (int)(colon ? (size_t)(colon - cfg.admin_listen) : strlen(cfg.admin_listen));
        int admin_port = ga_server_admin_port(server);
        ga_log(GA_LOG_INFO, "admin HTTP on %.*s:%d (/metrics, /healthz, /readyz)", n, cfg.admin_listen, admin_port);
        printf("gradagg-server: admin on %.*s:%d\n", n, cfg.admin_listen, admin_port);
    }
    fflush(stdout);

    ga_server_wait(server);
    ga_server_destroy(server);
    ga_log(GA_LOG_INFO, "exit 0");
    return 0;
}
