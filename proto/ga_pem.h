/* PEM files for TLS, shared by the server and the SDK: read a file, check that it holds what its
 * role needs (certificates; an unencrypted private key; a key that matches its certificate) so a
 * bad file is refused at start with a message naming it, not at the first handshake.
 * Thread-safe: any thread. */
#ifndef GA_PEM_H
#define GA_PEM_H

#include <stddef.h>

#include "ga_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest PEM file read (a full public CA bundle is ~200 KiB). */
#define GA_PEM_MAX ((size_t)4 << 20)

typedef enum ga_pem_kind {
    GA_PEM_CERTS = 0, /* one or more X.509 certificates (a chain, or a CA bundle) */
    GA_PEM_KEY = 1,   /* one private key, not encrypted */
} ga_pem_kind;

/* Reads `path` into a NUL-terminated string (*out, owned: ga_pem_free) and checks that it parses
 * as `kind`. `what` names the setting in messages ("--tls-cert", "tls_ca_file"). Errors, with a
 * message naming `what` and `path` in why[0..cap): GA_E_IO (cannot open or read), GA_E_CONFIG
 * (empty, over GA_PEM_MAX, not PEM of that kind, an encrypted key), GA_E_NOMEM, GA_E_INVAL (NULL
 * or empty path). */
ga_status ga_pem_load(const char *path, ga_pem_kind kind, const char *what, char **out, char *why, size_t cap);

/* Checks that key (PEM text) is the private key of chain's first certificate (PEM text).
 * GA_E_CONFIG with a message naming both settings and files when it is not. */
ga_status ga_pem_check_pair(const char *chain, const char *key, const char *what_cert, const char *cert_path,
                            const char *what_key, const char *key_path, char *why, size_t cap);

/* Wipes (a key is a secret) and frees a loaded PEM. NULL is a no-op. */
void ga_pem_free(char *pem);

#ifdef __cplusplus
}
#endif
#endif
