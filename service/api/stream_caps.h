/* Caps on the Push and InitTensors streams open at once (dispatch.c): per client host (the
 * peer address without its port: --max-streams-per-client) and per job (--max-streams-per-job;
 * with tokens on a token is one job's, so this is the cap per token). A stream takes a slot of
 * each when its first chunk arrives and gives both back when it ends or breaks. Any thread (one
 * mutex); at rest (no stream open) nothing is held. */
#ifndef GA_STREAM_CAPS_H
#define GA_STREAM_CAPS_H

#include <stddef.h>
#include <stdint.h>

#include "ga_status.h"

typedef struct ga_stream_caps ga_stream_caps;

/* Returns owned, or NULL without memory. */
ga_stream_caps *ga_stream_caps_create(uint32_t per_host, uint32_t per_job);
void ga_stream_caps_destroy(ga_stream_caps *c);

/* One more stream from host for job: GA_OK (both slots taken), or GA_E_BUSY naming the cap that
 * is full (nothing taken), or GA_E_NOMEM. */
ga_status ga_stream_caps_open(ga_stream_caps *c, const char *host, const char *job, char *why, size_t cap);
/* Gives back the slots of a stream that ga_stream_caps_open let in. */
void ga_stream_caps_close(ga_stream_caps *c, const char *host, const char *job);

#endif
