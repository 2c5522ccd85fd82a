/* PEM loading and checks (ga_pem.h) through OpenSSL's libcrypto, the library gRPC's TLS runs on:
 * what parses here is what gRPC will accept. */
#include "ga_pem.h"

#include <errno.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "ga_alloc.h"

/* OpenSSL's last error as text, and the error queue emptied (it is per thread and would
 * otherwise leak into the next, unrelated failure). */
static void ssl_error(char *buf, size_t cap)
{
    unsigned long e = ERR_peek_last_error();
    if (e) ERR_error_string_n(e, buf, cap);
    else snprintf(buf, cap, "no PEM block found");
    ERR_clear_error();
}

/* An encrypted key would make OpenSSL prompt on the terminal: refuse instead. */
static int no_password(char *buf, int size, int rwflag, void *u)
{
    (void)buf, (void)size, (void)rwflag, (void)u;
    return -1;
}

static ga_status read_file(const char *path, const char *what, char **out, size_t *len, char *why, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) return ga_status_fail(GA_E_IO, why, cap, "%s: cannot open %s: %s", what, path, strerror(errno));
    char *buf = ga_malloc(GA_PEM_MAX + 1);
    if (!buf) {
        fclose(f);
        return ga_status_fail(GA_E_NOMEM, why, cap, "%s: out of memory reading %s", what, path);
    }
    size_t n = fread(buf, 1, GA_PEM_MAX + 1, f);
    int err = ferror(f) ? errno : 0;
    fclose(f);
    ga_status st = GA_OK;
    if (err) st = ga_status_fail(GA_E_IO, why, cap, "%s: cannot read %s: %s", what, path, strerror(err));
    else if (n == 0) st = ga_status_fail(GA_E_CONFIG, why, cap, "%s: %s is empty", what, path);
    else if (n > GA_PEM_MAX)
        st = ga_status_fail(GA_E_CONFIG, why, cap, "%s: %s is larger than %zu bytes", what, path, GA_PEM_MAX);
    else if (memchr(buf, '\0', n))
        st = ga_status_fail(GA_E_CONFIG, why, cap, "%s: %s is not PEM text (it holds a NUL byte)", what, path);
    if (st != GA_OK) {
        OPENSSL_cleanse(buf, n < GA_PEM_MAX + 1 ? n : GA_PEM_MAX + 1);
        ga_free(buf);
        return st;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return GA_OK;
}

static ga_status check_certs(const char *pem, size_t len, const char *what, const char *path, char *why,
                             size_t cap)
{
    BIO *bio = BIO_new_mem_buf(pem, (int)len);
    if (!bio) return ga_status_fail(GA_E_NOMEM, why, cap, "%s: out of memory checking %s", what, path);
    int count = 0;
    X509 *x;
    while ((x = PEM_read_bio_X509(bio, NULL, NULL, NULL)) != NULL) {
        X509_free(x);
        count++;
    }
    BIO_free(bio);
    /* The loop ends with "no start line" after the last certificate; anything else is a broken
     * block. */
    unsigned long e = ERR_peek_last_error();
    bool clean_end = count > 0 && ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE;
    if (clean_end || (count > 0 && e == 0)) {
        ERR_clear_error();
        return GA_OK;
    }
    char detail[256];
    ssl_error(detail, sizeof detail);
    if (count == 0)
        return ga_status_fail(GA_E_CONFIG, why, cap, "%s: %s holds no PEM certificate (%s)", what, path, detail);
    return ga_status_fail(GA_E_CONFIG, why, cap, "%s: %s: certificate %d is not valid PEM (%s)", what, path, count + 1,
                          detail);
}

static EVP_PKEY *parse_key(const char *pem, size_t len)
{
    BIO *bio = BIO_new_mem_buf(pem, (int)len);
    if (!bio) return NULL;
    EVP_PKEY *k = PEM_read_bio_PrivateKey(bio, NULL, no_password, NULL);
    BIO_free(bio);
    return k;
}

static ga_status check_key(const char *pem, size_t len, const char *what, const char *path, char *why, size_t cap)
{
    EVP_PKEY *k = parse_key(pem, len);
    if (k) {
        EVP_PKEY_free(k);
        ERR_clear_error();
        return GA_OK;
    }
    char detail[256];
    ssl_error(detail, sizeof detail);
    bool encrypted = strstr(pem, "ENCRYPTED") != NULL;
    return ga_status_fail(GA_E_CONFIG, why, cap, "%s: %s holds no %sPEM private key (%s)", what, path,
                          encrypted ? "unencrypted " : "", detail);
}

ga_status ga_pem_load(const char *path, ga_pem_kind kind, const char *what, char **out, char *why, size_t cap)
{
    if (!what) what = "PEM file";
    if (!out || !path || !path[0]) return ga_status_fail(GA_E_INVAL, why, cap, "%s: no path given", what);
    char *pem = NULL;
    size_t len = 0;
    GA_CHECK(read_file(path, what, &pem, &len, why, cap));
    ga_status st = kind == GA_PEM_KEY ? check_key(pem, len, what, path, why, cap)
                                      : check_certs(pem, len, what, path, why, cap);
    if (st != GA_OK) {
        ga_pem_free(pem);
        return st;
    }
    *out = pem;
    return GA_OK;
}

ga_status ga_pem_check_pair(const char *chain, const char *key, const char *what_cert, const char *cert_path,
                            const char *what_key, const char *key_path, char *why, size_t cap)
{
    if (!chain || !key) return GA_E_INVAL;
    BIO *bio = BIO_new_mem_buf(chain, -1);
    X509 *x = bio ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    EVP_PKEY *k = parse_key(key, strlen(key));
    ga_status st = GA_OK;
    if (!x || !k) {
        st = ga_status_fail(GA_E_CONFIG, why, cap, "%s %s or %s %s cannot be parsed", what_cert, cert_path, what_key,
                            key_path);
    } else if (X509_check_private_key(x, k) != 1) {
        st = ga_status_fail(GA_E_CONFIG, why, cap, "%s %s is not the private key of %s %s", what_key, key_path,
                            what_cert, cert_path);
    }
    ERR_clear_error();
    X509_free(x);
    EVP_PKEY_free(k);
    return st;
}

void ga_pem_free(char *pem)
{
    if (!pem) return;
    OPENSSL_cleanse(pem, strlen(pem));
    ga_free(pem);
}
