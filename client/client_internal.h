/* The SDK's private state: the client, its tensors, and the helpers the SDK's files share
 * (errors, retries, timing). Not installed; only the client/ sources and tests include it. */
#ifndef GA_CLIENT_INTERNAL_H
#define GA_CLIENT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chunks.h"
#include "gradagg.h"
#include "rpc_client.h"

/* One encoded chunk of a push, kept until the push is acknowledged: a retry resends exactly
 * these bytes (re-encoding would move the residual twice). */
typedef struct ga_push_part {
    size_t off, count;       /* element range */
    size_t pos, len;         /* payload: buf[pos, pos + len) of the tensor's push buffer */
    ga_codec_params params;  /* as sent (topk: this step's ratio and seed) */
} ga_push_part;

typedef struct ga_tensor {
    char *name;
    uint64_t *shape;
    int ndim;
    size_t n;
    float *params;             /* borrowed from the caller */
    ga_codec_id codec;
    ga_codec_params cp;        /* defaulted, only the codec's own fields set */
    ga_dgc_options dgc;
    ga_auto_threshold autot;   /* enabled: resolved (defaults applied) */
    double auto_rho;           /* the density its bit budget asks for */
    bool auto_have;            /* a sample gave an estimate: smoothing starts from `threshold` */
    float threshold;           /* 2bit/1bit: the threshold of the last push (the starting one before) */
    float density;             /* 2bit: nonzero codes / n of the last push; NaN before */
    float step_threshold;      /* planned for the open step; kept by encode_tensor */
    bool step_have;
    float clip_s;              /* DGC: this step's clipping coefficient (plan_tensor) */
    float *residual;           /* n floats when the codec has one; DGC: the accumulation v */
    float *u;                  /* DGC momentum (momentum != 0) */
    float *work;               /* n floats: clipped / Nesterov-corrected / late-folded gradient */
    float *late;               /* codecs without a residual: late pushes, added to the next step */
    bool late_pending;
    uint8_t *buf;              /* push payloads of the open step */
    size_t buf_cap;
    ga_push_part *parts;
    size_t nparts, parts_cap;
} ga_tensor;

struct ga_client {
    ga_client_options opt; /* server and job point at owned copies; the TLS paths and the
                              token are NULL (create reads them into the channel) */
    char *server, *job;
    ga_channel *ch;
    ga_exec ex;
    uint64_t incarnation;
    ga_tensor *tensors;
    size_t ntensors, tensors_cap;
    bool inited;
    bool joined; /* ga_client_create's join succeeded: a lost membership is joined again */
    uint64_t version;      /* the version the params buffers hold */
    bool params_exact;     /* the buffers hold `version` exactly, so a delta may apply */
    uint64_t step;         /* the step the next push carries (sync: the open step; async: a counter) */
    bool pull_pending;     /* a push was acknowledged but its pull failed: pull first */
    uint64_t pull_min;
    uint32_t epoch;
    ga_client_stats stats;
    float *scratch;        /* DGC masking: one chunk of decoded values */
    size_t scratch_n;
    float *sample;         /* automatic threshold: one tensor's sample */
    size_t sample_n;
    char err[512];
};

/* Records and returns st with the message fmt (printf) in c->err. GA_OK clears it. */
ga_status ga_client_fail(ga_client *c, ga_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Records a failed call: "<what>: E_NAME: <why>" (ga_strerror(st) when why is empty). */
ga_status ga_client_fail_call(ga_client *c, ga_status st, const char *why, const char *what, ...)
    __attribute__((format(printf, 4, 5)));

/* One attempt of a call; writes the reason of a failure into why[0..cap). */
typedef ga_status (*ga_attempt_fn)(ga_client *c, void *arg, char *why, size_t cap);
/* Runs attempt, again after a backoff while it returns GA_E_UNAVAILABLE and retries remain
 * (backoff_ms doubling up to backoff_max_ms, at most max_retries more times; each counts in
 * stats.retries). Returns the last attempt's status; why holds its reason. */
ga_status ga_client_retry(ga_client *c, ga_attempt_fn attempt, void *arg, char *why, size_t cap);

/* Monotonic seconds. */
double ga_client_now(void);

/* Copies the fields `codec` reads (ga_codec_params_default when p is all zero); the rest 0. */
ga_codec_params ga_client_codec_params(ga_codec_id codec, const ga_codec_params *p);

/* The steps of one training step, each in its own file. */
ga_status ga_client_encode(ga_client *c, const float *const *grads); /* push.c */
ga_status ga_client_push(ga_client *c, uint64_t *ack_version);      /* push.c */
ga_status ga_client_fold_back(ga_client *c);                        /* push.c */
ga_status ga_client_pull(ga_client *c, uint64_t min_version);       /* pull.c */
ga_status ga_client_send_init(ga_client *c);                        /* init.c */

#endif
