/* gradagg-server assembled: the control loop on its own thread, the core, health and the admin
 * HTTP server on it, the transport with dispatch's handlers, and the SIGTERM sequence that takes
 * it all down: health NOT_SERVING and /readyz 503 -> drain_delay_ms -> ga_core_drain -> watches
 * finished -> transport shutdown (calls still open after shutdown_grace_ms are cancelled) ->
 * transport, core, admin server and loop destroyed.
 *
 * server/ assembles the subsystems (server.c) and holds what only the process needs: main.c, the
 * settings (config.h: flags, environment, file, --help), TLS and token files (security.h) and the
 * file-descriptor limit (fdlimit.h).
 * May use: base, persist, metrics, transport, core, api, admin; kernels/, proto/, libuv. */
#ifndef GA_SERVER_H
#define GA_SERVER_H

#include "config.h"
#include "ga_status.h"

typedef struct ga_server ga_server;

/* Starts a server with cfg (borrowed; copied). Returns once it accepts calls on
 * ga_server_port(). With cfg->install_signals, SIGTERM and SIGINT run ga_server_drain (the
 * binary; in-process tests leave it off). Errors: GA_E_IO (cannot bind listen or admin_listen;
 * data_dir), GA_E_CONFIG, GA_E_NO_CUDA, GA_E_NO_DEVICE, GA_E_NOMEM; nothing is left running.
 * Returns owned (ga_server_destroy). Any thread. */
ga_status ga_server_start(const ga_config *cfg, ga_server **out);
/* The settings a start reads beyond ga_config_parse's checks (a relay's --relay-node and
 * --relay-codec), checked as the start checks them: GA_E_CONFIG with the flag named in
 * why[0..cap). For --print-config, which starts nothing. Any thread. */
ga_status ga_server_check_config(const ga_config *cfg, char *why, size_t cap);
/* The bound port (the real one when cfg->listen ends with :0). Any thread. */
int ga_server_port(const ga_server *s);
/* The admin HTTP port (/metrics, /healthz, /readyz; the real one when cfg->admin_listen ends
 * with :0), or 0 when cfg->admin_listen is "". /readyz answers 503 from the drain on; the admin
 * server closes last, after the core and the transport. Any thread. */
int ga_server_admin_port(const ga_server *s);
/* Begins the shutdown sequence above, as SIGTERM does; returns at once. Any thread; a second
 * call while draining is a no-op. */
void ga_server_drain(ga_server *s);
/* Blocks until the sequence has ended and the loop thread returned. Any one thread, once. */
void ga_server_wait(ga_server *s);
/* Drains and waits if that has not happened yet, then frees. NULL is a no-op. */
void ga_server_destroy(ga_server *s);

#endif
