/* Caps on the Push and InitTensors streams open at once (dispatch.c): per client host (the
 * peer address without its port: --max-streams-per-client; hosts in --trusted-client-hosts are
 * not capped per host), per job (--max-streams-per-job) and, with bearer tokens on, per token
 * (--max-streams-per-token: a token's scope is its job and the job's lanes, which count
 * together). A stream takes a slot of each when its first chunk arrives and gives them back when
 * it ends or breaks. Any thread (one mutex); at rest (no stream open) nothing is held. */
#ifndef GA_STREAM_CAPS_H
#define GA_STREAM_CAPS_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "ga_status.h"

typedef struct ga_stream_caps ga_stream_caps;

typedef struct {
    uint32_t per_host, per_job, per_token;
    const ga_host_set *trusted; /* borrowed, outlives the caps; NULL: none */
} ga_stream_limits;

/* Returns owned, or NULL without memory. */
ga_stream_caps *ga_stream_caps_create(const ga_stream_limits *limits);
void ga_stream_caps_destroy(ga_stream_caps *c);

/* One more stream from host for job under token scope `token` (the job a bearer token belongs
 * to; NULL with tokens off): GA_OK (every slot taken), or GA_E_BUSY naming the cap that is full
 * (nothing taken), or GA_E_NOMEM. */
ga_status ga_stream_caps_open(ga_stream_caps *c, const char *host, const char *job, const char *token, char *why,
                              size_t cap);
/* Gives back the slots of a stream that ga_stream_caps_open let in (the same arguments). */
void ga_stream_caps_close(ga_stream_caps *c, const char *host, const char *job, const char *token);

#endif
