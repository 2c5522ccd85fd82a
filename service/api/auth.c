/* Bearer tokens per job (auth.h): the token file's parser and the per-call check. Tokens live
 * only as SHA-256 digests: comparing digests with CRYPTO_memcmp takes the same time whatever the
 * lengths and contents, and a memory dump shows no token. */
#include "auth.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "ga_alloc.h"
#include "ga_lane.h"

#define DIGEST 32u           /* SHA-256 */
#define MAX_FILE (16u << 20) /* a token file larger than this is a mistake */

typedef struct entry {
    char *job;
    unsigned char digest[DIGEST];
} entry;

struct ga_auth {
    entry *e;
    size_t n;
};

static bool digest_of(const char *s, size_t len, unsigned char out[DIGEST])
{
    unsigned int n = 0;
    return EVP_Digest(s, len, out, &n, EVP_sha256(), NULL) == 1 && n == DIGEST;
}

void ga_auth_destroy(ga_auth *a)
{
    if (!a) return;
    for (size_t i = 0; i < a->n; i++) ga_free(a->e[i].job);
    if (a->e) OPENSSL_cleanse(a->e, a->n * sizeof *a->e);
    ga_free(a->e);
    ga_free(a);
}

size_t ga_auth_jobs(const ga_auth *a) { return a ? a->n : 0; }

/* ---- the file ---- */

static bool blank(char ch) { return ch == ' ' || ch == '\t'; }
/* A job name is the core's: any bytes but control characters and the separators. */
static bool job_byte(unsigned char ch) { return ch > 0x20 && ch != 0x7f; }

/* The next field of [p, end): skips blanks; *f and *flen = the field (flen 0 at the end). */
static const char *next_field(const char *p, const char *end, const char **f, size_t *flen)
{
    while (p < end && blank(*p)) p++;
    const char *s = p;
    while (p < end && !blank(*p)) p++;
    *f = s;
    *flen = (size_t)(p - s);
    return p;
}

/* One non-blank, non-comment line [p, end) -> e (job copied, token digested). */
static ga_status parse_line(const char *p, const char *end, const char *src, size_t line, entry *e, char *why,
                            size_t cap)
{
    const char *job, *tok, *extra;
    size_t jlen, tlen, xlen;
    p = next_field(p, end, &job, &jlen);
    p = next_field(p, end, &tok, &tlen);
    next_field(p, end, &extra, &xlen);
    if (tlen == 0 || xlen != 0)
        return ga_status_fail(GA_E_CONFIG, why, cap, "%s:%zu: expected 'job token' (two fields), found %s", src, line,
                              tlen == 0 ? "one" : "more than two");
    if (jlen > GA_WIRE_JOB_MAX)
        return ga_status_fail(GA_E_CONFIG, why, cap, "%s:%zu: job name longer than %u bytes", src, line, GA_WIRE_JOB_MAX);
    for (size_t i = 0; i < jlen; i++)
        if (!job_byte((unsigned char)job[i]))
            return ga_status_fail(GA_E_CONFIG, why, cap, "%s:%zu: job name holds control byte 0x%02x", src, line,
                                  (unsigned char)job[i]);
    for (size_t i = 0; i < tlen; i++)
        if (!ga_wire_token_byte((unsigned char)tok[i]))
            return ga_status_fail(GA_E_CONFIG, why, cap,
                                  "%s:%zu: token of job '%.*s' holds byte 0x%02x (printable ASCII only)", src, line,
                                  (int)jlen, job, (unsigned char)tok[i]);
    if (tlen < GA_AUTH_TOKEN_MIN || tlen > GA_AUTH_TOKEN_MAX)
        return ga_status_fail(GA_E_CONFIG, why, cap, "%s:%zu: token of job '%.*s' has %zu characters, expected %u to %u",
                              src, line, (int)jlen, job, tlen, GA_AUTH_TOKEN_MIN, GA_AUTH_TOKEN_MAX);
    e->job = ga_malloc(jlen + 1);
    if (!e->job) return ga_status_fail(GA_E_NOMEM, why, cap, "%s:%zu: out of memory", src, line);
    memcpy(e->job, job, jlen);
    e->job[jlen] = '\0';
    if (!digest_of(tok, tlen, e->digest)) {
        ga_free(e->job);
        e->job = NULL;
        return ga_status_fail(GA_E_NOMEM, why, cap, "%s:%zu: cannot digest the token (libcrypto)", src, line);
    }
    return GA_OK;
}

static ga_status push_entry(ga_auth *a, size_t *cap_n, const entry *e)
{
    if (a->n == *cap_n) {
        size_t ncap = *cap_n ? 2 * *cap_n : 8;
        entry *grown = ga_calloc(ncap, sizeof *grown);
        if (!grown) return GA_E_NOMEM;
        if (a->n) {
            memcpy(grown, a->e, a->n * sizeof *grown);
            OPENSSL_cleanse(a->e, a->n * sizeof *a->e);
        }
        ga_free(a->e);
        a->e = grown;
        *cap_n = ncap;
    }
    a->e[a->n++] = *e;
    return GA_OK;
}

ga_status ga_auth_parse(const char *text, size_t len, const char *source, ga_auth **out, char *why, size_t cap)
{
    if (!out || (!text && len)) return GA_E_INVAL;
    if (!source) source = "tokens";
    ga_auth *a = ga_calloc(1, sizeof *a);
    if (!a) return ga_status_fail(GA_E_NOMEM, why, cap, "%s: out of memory", source);
    size_t cap_n = 0, line = 0;
    ga_status st = GA_OK;
    const char *p = text, *end = text + len;
    while (st == GA_OK && p < end) {
        line++;
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl : end;
        const char *next = nl ? nl + 1 : end;
        if (eol > p && eol[-1] == '\r') eol--;
        if (memchr(p, '\0', (size_t)(eol - p))) {
            st = ga_status_fail(GA_E_CONFIG, why, cap, "%s:%zu: NUL byte in the line", source, line);
            break;
        }
        const char *q = p;
        while (q < eol && blank(*q)) q++;
        if (q < eol && *q != '#') {
            entry e = {0};
            st = parse_line(q, eol, source, line, &e, why, cap);
            if (st == GA_OK && push_entry(a, &cap_n, &e) != GA_OK) {
                ga_free(e.job);
                st = ga_status_fail(GA_E_NOMEM, why, cap, "%s:%zu: out of memory", source, line);
            }
            OPENSSL_cleanse(&e, sizeof e);
        }
        p = next;
    }
    if (st == GA_OK && a->n == 0)
        st = ga_status_fail(GA_E_CONFIG, why, cap, "%s: no 'job token' line (every call would be refused)", source);
    if (st != GA_OK) {
        ga_auth_destroy(a);
        return st;
    }
    *out = a;
    return GA_OK;
}

ga_status ga_auth_load(const char *path, ga_auth **out, char *why, size_t cap)
{
    if (!path || !path[0] || !out) return ga_status_fail(GA_E_INVAL, why, cap, "--auth-tokens: no path given");
    char source[1100];
    snprintf(source, sizeof source, "--auth-tokens %s", path);
    FILE *f = fopen(path, "rb");
    if (!f) return ga_status_fail(GA_E_IO, why, cap, "%s: cannot open: %s", source, strerror(errno));
    ga_status st = GA_OK;
    size_t n = 0, bufcap = 4096;
    char *buf = ga_malloc(bufcap);
    while (buf) {
        if (n == bufcap) {
            if (bufcap >= MAX_FILE) {
                st = ga_status_fail(GA_E_CONFIG, why, cap, "%s: larger than %u bytes", source, MAX_FILE);
                break;
            }
            char *grown = ga_malloc(2 * bufcap);
            if (grown) memcpy(grown, buf, n);
            OPENSSL_cleanse(buf, n);
            ga_free(buf);
            buf = grown;
            bufcap *= 2;
            if (!buf) break;
        }
        size_t got = fread(buf + n, 1, bufcap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (!buf) st = ga_status_fail(GA_E_NOMEM, why, cap, "%s: out of memory", source);
    else if (st == GA_OK && ferror(f)) st = ga_status_fail(GA_E_IO, why, cap, "%s: cannot read: %s", source, strerror(errno));
    fclose(f);
    if (st == GA_OK) st = ga_auth_parse(buf, n, source, out, why, cap);
    if (buf) {
        OPENSSL_cleanse(buf, n);
        ga_free(buf);
    }
    return st;
}

/* ---- the check ---- */

/* The check of ga_auth_check (op false) and ga_auth_check_operator (op true). */
static ga_status check(const ga_auth *a, const char *job, bool op, const char *value, size_t len, size_t entries,
                       char *why, size_t cap)
{
    if (!a) return GA_OK;
    const char *named = job ? job : "(every job)";
    if (!value || entries == 0)
        return ga_status_fail(GA_E_UNAUTHENTICATED, why, cap,
                              "job '%.100s': no 'authorization: Bearer <token>' metadata (the server requires a "
                              "token per job)",
                              named);
    if (entries > 1)
        return ga_status_fail(GA_E_UNAUTHENTICATED, why, cap, "job '%.100s': %zu authorization entries, expected one",
                              named, entries);
    const char *tok;
    size_t tlen;
    if (!ga_wire_bearer(value, len, &tok, &tlen))
        return ga_status_fail(GA_E_UNAUTHENTICATED, why, cap,
                              "job '%.100s': malformed authorization metadata (expected 'Bearer <token>')", named);
    unsigned char d[DIGEST];
    if (!digest_of(tok, tlen, d)) return ga_status_fail(GA_E_NOMEM, why, cap, "cannot digest the token (libcrypto)");
    /* Every entry is compared (no early exit), so the time says nothing about which token
     * matched or whether the job exists. */
    /* A lane of a job (ga_lane.h) is granted by the job's token as well as by its own. An
     * operator entry (GA_AUTH_OPERATOR) never grants a job of that name. */
    size_t len_job = job ? strlen(job) : 0, len_base = job ? ga_lane_base_len(job, len_job) : 0;
    bool known = false, mine = false, operator_match = false;
    for (size_t i = 0; i < a->n; i++) {
        bool match = CRYPTO_memcmp(a->e[i].digest, d, DIGEST) == 0;
        bool is_operator = strcmp(a->e[i].job, GA_AUTH_OPERATOR) == 0;
        size_t len_entry = strlen(a->e[i].job);
        bool this_job = job && !is_operator && (len_entry == len_job || len_entry == len_base) &&
                        memcmp(a->e[i].job, job, len_entry) == 0;
        known |= match;
        mine |= match & this_job;
        operator_match |= match & is_operator;
    }
    OPENSSL_cleanse(d, sizeof d);
    if (mine || (op && operator_match)) return GA_OK;
    if (!known) return ga_status_fail(GA_E_UNAUTHENTICATED, why, cap, "job '%.100s': the bearer token is not valid", named);
    if (operator_match)
        return ga_status_fail(GA_E_PERMISSION_DENIED, why, cap,
                              "job '%.100s': an operator token grants Status, DeleteJob and ListJobs only", named);
    if (!job)
        return ga_status_fail(GA_E_PERMISSION_DENIED, why, cap,
                              "listing every job needs an operator token (a '%s' line of --auth-tokens)",
                              GA_AUTH_OPERATOR);
    return ga_status_fail(GA_E_PERMISSION_DENIED, why, cap, "job '%.100s': the bearer token does not grant this job",
                          named);
}

ga_status ga_auth_check(const ga_auth *a, const char *job, const char *value, size_t len, size_t entries, char *why,
                        size_t cap)
{
    return check(a, job ? job : "", false, value, len, entries, why, cap);
}

ga_status ga_auth_check_operator(const ga_auth *a, const char *job, const char *value, size_t len, size_t entries,
                                 char *why, size_t cap)
{
    return check(a, job, true, value, len, entries, why, cap);
}
