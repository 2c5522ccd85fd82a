/* The server's TLS material, replaceable while it runs: gRPC asks for it at every new handshake
 * (a certificate config fetcher), so a new certificate, key or client CA takes effect for the
 * next connection, and connections already open keep theirs. Any thread. */
#ifndef GA_RPC_TLS_H
#define GA_RPC_TLS_H

#include <grpc/grpc_security.h>

#include "ga_status.h"

typedef struct ga_rpc_tls ga_rpc_tls;

/* Copies the PEMs (cert and key required; client_ca NULL = no client certificate asked, which
 * stays so for the server's life). NULL when out of memory. */
ga_rpc_tls *ga_rpc_tls_create(const char *cert_pem, const char *key_pem, const char *client_ca_pem);
/* Server credentials that read t at every handshake; t must outlive the server. */
grpc_server_credentials *ga_rpc_tls_credentials(ga_rpc_tls *t);
/* Replaces the material for the handshakes that follow. GA_E_CONFIG when client_ca's presence
 * differs from the one at create (mutual TLS cannot be turned on or off while running);
 * GA_E_NOMEM. Nothing changes on an error. */
ga_status ga_rpc_tls_set(ga_rpc_tls *t, const char *cert_pem, const char *key_pem, const char *client_ca_pem);
/* After the server is destroyed. NULL is a no-op. */
void ga_rpc_tls_destroy(ga_rpc_tls *t);

#endif
