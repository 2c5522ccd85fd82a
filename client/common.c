/* What every file of the client uses, and which uses none of them: errors, retries, time, the
 * step-in-flight flag and codec parameters (client_internal.h). It calls only rpc_client.h below
 * it; the one call back up, a retry's rejoin, goes through c->rejoin (join.c's ga_shard_rejoin,
 * set at create), so the files stand in layers: common.c, then join.c, the step's files and
 * client.c (client_internal.h has the order). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "client_internal.h"
#include "ga_wire.h"

/* ---- errors, retries, time ---- */

ga_status ga_client_fail(ga_client *c, ga_status st, const char *fmt, ...)
{
    if (st == GA_OK) {
        c->err[0] = '\0';
        return st;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return st;
}

/* "GA_E_STEP_CLOSED" -> "E_STEP_CLOSED": the name the server sends and the logs show. */
static const char *short_name(ga_status st)
{
    const char *name = ga_status_name(st);
    return strncmp(name, "GA_", 3) == 0 ? name + 3 : name;
}

ga_status ga_shard_fail_call(ga_shard *sh, ga_status st, const char *why, const char *what, ...)
{
    char head[256];
    va_list ap;
    va_start(ap, what);
    vsnprintf(head, sizeof head, what, ap);
    va_end(ap);
    snprintf(sh->err, sizeof sh->err, "%s: %s: %s", head, short_name(st), why && why[0] ? why : ga_strerror(st));
    return st;
}

double ga_client_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

bool ga_shard_retryable(ga_status st)
{
    /* A draining server answers E_DRAINING (gRPC UNAVAILABLE), and one that stops cancels the
     * calls still open (CANCELLED: the SDK never cancels a call of its own that it retries):
     * its replacement will take the call, as it would after a lost connection. A server whose
     * memory is full for now (E_BUSY) takes the call once other calls have ended. Every call
     * retried is idempotent (a push counted twice is answered duplicate). */
    return st == GA_E_UNAVAILABLE || st == GA_E_DRAINING || st == GA_E_CANCELLED || st == GA_E_BUSY;
}

bool ga_client_may_retry(const ga_client *c, uint32_t tries, double first_failure)
{
    if (tries >= c->opt.max_retries) return false;
    return c->opt.retry_budget_ms == 0 || ga_client_now() - first_failure < 1e-3 * c->opt.retry_budget_ms;
}

ga_status ga_shard_retry(ga_client *c, ga_shard *sh, ga_attempt_fn attempt, void *arg, char *why, size_t cap)
{
    uint32_t delay = c->opt.backoff_ms;
    double first_failure = 0.0;
    for (uint32_t tries = 0;; tries++) {
        why[0] = '\0';
        ga_status st = attempt(c, sh, arg, why, cap);
        if (st != GA_OK && tries == 0) first_failure = ga_client_now();
        bool may = ga_client_may_retry(c, tries, first_failure);
        if ((st == GA_E_NOT_MEMBER || st == GA_E_UNKNOWN_JOB) && c->joined && c->rejoin && may) {
            st = c->rejoin(c, sh, why, cap);
            if (st == GA_OK) continue;
        }
        if (!ga_shard_retryable(st) || !may) return st;
        sh->retries++;
        sleep_ms(delay);
        delay = delay > c->opt.backoff_max_ms / 2 ? c->opt.backoff_max_ms : delay * 2;
    }
}

void ga_shard_name_missing(ga_client *c, ga_shard *sh, char *why, size_t cap)
{
    Gradagg__V1__StatusRequest req = GRADAGG__V1__STATUS_REQUEST__INIT;
    req.job = sh->job;
    ProtobufCMessage *msg = NULL;
    char err[64];
    if (ga_call_unary(sh->ch, GA_METHOD_STATUS, &req.base, c->opt.call_timeout_ms, &msg, err, sizeof err) != GA_OK)
        return;
    const Gradagg__V1__StatusResponse *r = (const Gradagg__V1__StatusResponse *)msg;
    size_t n = strlen(why);
    int w = snprintf(why + n, cap > n ? cap - n : 0, "; step %llu has no push from rank%s",
                     (unsigned long long)r->open_step, r->n_members - r->committed == 1 ? "" : "s");
    bool first = true;
    for (size_t i = 0; i < r->n_members && w > 0; i++) {
        const Gradagg__V1__MemberStatus *m = r->members[i];
        if (m->has_pushed && m->last_step == r->open_step) continue;
        n = strlen(why);
        w = snprintf(why + n, cap > n ? cap - n : 0, "%s %u%s", first ? "" : ",", m->rank, m->joined ? "" : " (not joined)");
        first = false;
    }
    protobuf_c_message_free_unpacked(msg, &ga_wire_allocator);
}

bool ga_client_in_flight(const ga_client *c) { return __atomic_load_n(&c->in_flight, __ATOMIC_ACQUIRE); }

/* ---- codec parameters ---- */

static bool zero_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u == 0;
}

/* All bytes zero, field by field: a memcmp of the struct would read its padding, which a
 * caller's copy leaves undefined (ga_codec_params has 2 bytes of it after topk_indices). */
static bool params_all_zero(const ga_codec_params *p)
{
    return zero_bits(p->threshold) && zero_bits(p->ratio) && zero_bits(p->sample_fraction) &&
           p->adapt_rounds == 0 && p->seed == 0 && p->topk_values == 0 && p->topk_indices == 0 && zero_bits(p->select);
}

ga_codec_params ga_client_codec_params(ga_codec_id codec, const ga_codec_params *p)
{
    static const ga_codec_params zero;
    ga_codec_params in = p && !params_all_zero(p) ? *p : ga_codec_params_default(codec);
    ga_codec_params out = zero;
    switch (codec) {
    case GA_CODEC_2BIT:
        out.threshold = in.threshold;
        out.select = in.select;
        break;
    case GA_CODEC_1BIT:
        out.threshold = in.threshold;
        break;
    case GA_CODEC_TOPK:
        out.ratio = in.ratio;
        out.sample_fraction = in.sample_fraction;
        out.adapt_rounds = in.adapt_rounds;
        out.seed = in.seed;
        out.topk_values = in.topk_values;
        out.topk_indices = in.topk_indices;
        break;
    default:
        break;
    }
    return out;
}
