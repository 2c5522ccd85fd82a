/* The server's TLS material and bearer tokens, read from the settings (--tls-cert, --tls-key,
 * --tls-client-ca, --auth-tokens) before anything starts, so a bad file stops the start with a
 * message naming the flag and the file; a relay's upstream TLS files (--relay-tls-*) are checked
 * the same way. */
#ifndef GA_SECURITY_H
#define GA_SECURITY_H

#include "api/api.h"
#include "config.h"
#include "ga_status.h"

typedef struct ga_security {
    char *cert_pem;      /* NULL: plaintext */
    char *key_pem;       /* with cert_pem */
    char *client_ca_pem; /* NULL: no client certificate asked */
    ga_auth *auth;       /* NULL: no tokens */
} ga_security;

/* Fills *out from cfg: each PEM file is read and checked (ga_pem.h: certificates, an
 * unencrypted key that matches the certificate), the token file parsed (auth.h). Errors:
 * GA_E_IO (a file cannot be read), GA_E_CONFIG (a file does not hold what its flag needs),
 * GA_E_NOMEM; the message in why[0..cap) names the flag and the file; *out is left empty. */
ga_status ga_security_load(const ga_config *cfg, ga_security *out, char *why, size_t cap);
/* Frees the PEM text (the transport keeps its own copies once started); keeps auth. */
void ga_security_drop_pems(ga_security *s);
/* Frees everything. */
void ga_security_free(ga_security *s);

#endif
