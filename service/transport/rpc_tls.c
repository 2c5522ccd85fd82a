/* The server's replaceable TLS material (rpc_tls.h). */
#include "rpc_tls.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ga_alloc.h"

struct ga_rpc_tls {
    pthread_mutex_t mu;
    char *cert, *key, *ca; /* ca NULL: no client certificate asked */
    uint64_t generation;   /* of the material held */
    uint64_t handed;       /* the generation gRPC was last given */
};

static void pems_free(char *cert, char *key, char *ca)
{
    ga_free(cert), ga_free(key), ga_free(ca);
}

ga_rpc_tls *ga_rpc_tls_create(const char *cert_pem, const char *key_pem, const char *client_ca_pem)
{
    if (!cert_pem || !key_pem) return NULL;
    ga_rpc_tls *t = ga_calloc(1, sizeof *t);
    if (!t) return NULL;
    t->cert = ga_strdup(cert_pem), t->key = ga_strdup(key_pem);
    t->ca = client_ca_pem ? ga_strdup(client_ca_pem) : NULL;
    if (!t->cert || !t->key || (client_ca_pem && !t->ca) || pthread_mutex_init(&t->mu, NULL) != 0) {
        pems_free(t->cert, t->key, t->ca);
        ga_free(t);
        return NULL;
    }
    t->generation = 1; /* the first fetch hands it over */
    return t;
}

/* gRPC's fetcher: a new config when the material changed since it was last handed over. */
static grpc_ssl_certificate_config_reload_status fetch(void *arg, grpc_ssl_server_certificate_config **config)
{
    ga_rpc_tls *t = arg;
    pthread_mutex_lock(&t->mu);
    grpc_ssl_certificate_config_reload_status st = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
    if (t->handed != t->generation) {
        grpc_ssl_pem_key_cert_pair pair = {t->key, t->cert};
        /* gRPC requires root certificates in a fetched config even when no client certificate is
         * asked for; then they are never used, and the server's own chain stands in. */
        *config = grpc_ssl_server_certificate_config_create(t->ca ? t->ca : t->cert, &pair, 1); /* copies */
        st = *config ? GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_NEW : GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_FAIL;
        if (*config) t->handed = t->generation;
    }
    pthread_mutex_unlock(&t->mu);
    return st;
}

grpc_server_credentials *ga_rpc_tls_credentials(ga_rpc_tls *t)
{
    grpc_ssl_client_certificate_request_type req =
        t->ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
    grpc_ssl_server_credentials_options *o =
        grpc_ssl_server_credentials_create_options_using_config_fetcher(req, fetch, t);
    return o ? grpc_ssl_server_credentials_create_with_options(o) : NULL; /* takes o */
}

ga_status ga_rpc_tls_set(ga_rpc_tls *t, const char *cert_pem, const char *key_pem, const char *client_ca_pem)
{
    if (!t || !cert_pem || !key_pem) return GA_E_INVAL;
    char *cert = ga_strdup(cert_pem), *key = ga_strdup(key_pem), *ca = client_ca_pem ? ga_strdup(client_ca_pem) : NULL;
    if (!cert || !key || (client_ca_pem && !ca)) {
        pems_free(cert, key, ca);
        return GA_E_NOMEM;
    }
    pthread_mutex_lock(&t->mu);
    ga_status st = GA_OK;
    if (!t->ca != !ca) {
        st = GA_E_CONFIG;
    } else {
        char *oc = t->cert, *ok = t->key, *oa = t->ca;
        t->cert = cert, t->key = key, t->ca = ca;
        cert = oc, key = ok, ca = oa; /* the old ones, freed below */
        t->generation++;
    }
    pthread_mutex_unlock(&t->mu);
    pems_free(cert, key, ca);
    return st;
}

void ga_rpc_tls_destroy(ga_rpc_tls *t)
{
    if (!t) return;
    pthread_mutex_destroy(&t->mu);
    pems_free(t->cert, t->key, t->ca);
    ga_free(t);
}
