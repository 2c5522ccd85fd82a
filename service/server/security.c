/* Reading the server's TLS files and token file (security.h). */
#include "security.h"

#include <string.h>

#include "ga_pem.h"

/* A relay's upstream TLS files (--relay-tls-*), read and checked like the server's own; the
 * SDK reads them again at each upstream client's create. */
static ga_status check_relay_files(const ga_config *cfg, char *why, size_t cap)
{
    if (!cfg->relay_tls_ca[0]) return GA_OK;
    char *ca = NULL, *cert = NULL, *key = NULL;
    ga_status st = ga_pem_load(cfg->relay_tls_ca, GA_PEM_CERTS, "--relay-tls-ca", &ca, why, cap);
    if (st == GA_OK && cfg->relay_tls_cert[0]) {
        st = ga_pem_load(cfg->relay_tls_cert, GA_PEM_CERTS, "--relay-tls-cert", &cert, why, cap);
        if (st == GA_OK) st = ga_pem_load(cfg->relay_tls_key, GA_PEM_KEY, "--relay-tls-key", &key, why, cap);
        if (st == GA_OK)
            st = ga_pem_check_pair(cert, key, "--relay-tls-cert", cfg->relay_tls_cert, "--relay-tls-key",
                                   cfg->relay_tls_key, why, cap);
    }
    ga_pem_free(ca), ga_pem_free(cert), ga_pem_free(key);
    return st;
}

ga_status ga_security_load(const ga_config *cfg, ga_security *out, char *why, size_t cap)
{
    ga_security s;
    memset(&s, 0, sizeof s);
    ga_status st = GA_OK;
    if (cfg->tls_cert[0]) {
        GA_CHECK_GOTO(ga_pem_load(cfg->tls_cert, GA_PEM_CERTS, "--tls-cert", &s.cert_pem, why, cap), st, fail);
        GA_CHECK_GOTO(ga_pem_load(cfg->tls_key, GA_PEM_KEY, "--tls-key", &s.key_pem, why, cap), st, fail);
        GA_CHECK_GOTO(ga_pem_check_pair(s.cert_pem, s.key_pem, "--tls-cert", cfg->tls_cert, "--tls-key", cfg->tls_key,
                                        why, cap),
                      st, fail);
        if (cfg->tls_client_ca[0])
            GA_CHECK_GOTO(ga_pem_load(cfg->tls_client_ca, GA_PEM_CERTS, "--tls-client-ca", &s.client_ca_pem, why, cap),
                          st, fail);
    }
    if (cfg->auth_tokens[0]) GA_CHECK_GOTO(ga_auth_load(cfg->auth_tokens, &s.auth, why, cap), st, fail);
    GA_CHECK_GOTO(check_relay_files(cfg, why, cap), st, fail);
    *out = s;
    return GA_OK;
fail:
    ga_security_free(&s);
    return st;
}

void ga_security_drop_pems(ga_security *s)
{
    ga_pem_free(s->cert_pem);
    ga_pem_free(s->key_pem);
    ga_pem_free(s->client_ca_pem);
    s->cert_pem = s->key_pem = s->client_ca_pem = NULL;
}

void ga_security_free(ga_security *s)
{
    ga_security_drop_pems(s);
    ga_auth_destroy(s->auth);
    s->auth = NULL;
}
