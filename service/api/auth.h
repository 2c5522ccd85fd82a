/* Per-job bearer tokens (--auth-tokens): the token file's parser and the check that every call
 * naming a job passes before anything is posted to the loop. Tokens are kept only as SHA-256
 * digests, compared in constant time, and never written to a message or a log.
 * Read-only once loaded: any thread. */
#ifndef GA_AUTH_H
#define GA_AUTH_H

#include <stddef.h>

#include "ga_status.h"
#include "ga_wire.h"

typedef struct ga_auth ga_auth;

/* Shortest and longest token accepted in the file. */
#define GA_AUTH_TOKEN_MIN 16u
#define GA_AUTH_TOKEN_MAX GA_WIRE_TOKEN_MAX
/* The job name of an operator's token in the file: it grants the operators' methods (Status,
 * DeleteJob, ListJobs) for every job, and no training method for any. */
#define GA_AUTH_OPERATOR "*"
/* The request metadata key, and the scheme its value starts with. */
#define GA_AUTH_METADATA_KEY GA_WIRE_AUTH_KEY

/* Parses text[0..len): lines "job token" separated by spaces or tabs; blank lines and lines
 * whose first non-blank character is '#' are skipped; "\r\n" endings are accepted. Refused, with
 * "<source>:<line>: ..." in why[0..cap): a line without exactly two fields, a NUL byte, a job
 * name with a control byte or over 255 bytes, a token with a byte outside printable ASCII or
 * shorter than GA_AUTH_TOKEN_MIN or longer than GA_AUTH_TOKEN_MAX, and a file with no token at
 * all (GA_E_CONFIG). A job may be named on several lines: each of its tokens grants it (a
 * rotation lists the new token beside the old one until every worker has it). The message never quotes a token. Returns owned
 * (ga_auth_destroy). */
ga_status ga_auth_parse(const char *text, size_t len, const char *source, ga_auth **out, char *why, size_t cap);
/* ga_auth_parse of the file at path (source = "--auth-tokens <path>"); GA_E_IO when it cannot be
 * read. */
ga_status ga_auth_load(const char *path, ga_auth **out, char *why, size_t cap);
/* Jobs with a token. */
size_t ga_auth_jobs(const ga_auth *a);

/* Checks one call: `value` (len bytes; NULL = absent) is its "authorization" metadata, `entries`
 * how many such entries it carried, `job` the job it names.
 *  - GA_E_UNAUTHENTICATED: absent, repeated, not "Bearer <token>", or a token no job has;
 *  - GA_E_PERMISSION_DENIED: a token of another job, an operator token (GA_AUTH_OPERATOR), or a
 *    job without a token (whether the job exists is not told);
 *  - GA_OK: the job's own token, or, for a lane of a job ("<job>/lane<k>", ga_lane.h), that
 *    job's token.
 * Every configured token is compared, in constant time, whatever the outcome. The message names
 * the job, never the token. */
ga_status ga_auth_check(const ga_auth *a, const char *job, const char *value, size_t len, size_t entries, char *why,
                        size_t cap);

/* ga_auth_check for an operator's method (Status, DeleteJob, ListJobs): also GA_OK for an
 * operator token (a GA_AUTH_OPERATOR line). job NULL: the call names every job (ListJobs), which
 * only an operator token grants. */
ga_status ga_auth_check_operator(const ga_auth *a, const char *job, const char *value, size_t len, size_t entries,
                                 char *why, size_t cap);

/* Wipes and frees. NULL is a no-op. */
void ga_auth_destroy(ga_auth *a);

#endif
