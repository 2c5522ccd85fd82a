/* A rank's membership on one shard: Join (with its retries), a rejoin after the shard lost the
 * membership or the job, the open step a Join answers, and Leave (client_internal.h). */
#define _POSIX_C_SOURCE 200809L /* strnlen */
#include <string.h>

#include "client_internal.h"
#include "ga_wire.h"

ga_status ga_shard_join_attempt(ga_client *c, ga_shard *sh, void *arg, char *why, size_t cap)
{
    Gradagg__V1__JoinResponse **out = arg;
    const ga_client_options *o = &c->opt;
    Gradagg__V1__Optimizer optim = GRADAGG__V1__OPTIMIZER__INIT;
    /* Only the chosen optimizer's fields: every rank then sends the same config whatever it left
     * in the others. */
    if (o->optimizer == GA_SERVER_OPTIM_SGD) {
        optim.kind = GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_SGD;
        optim.lr = o->sgd.lr;
        optim.momentum = o->sgd.momentum;
        optim.weight_decay = o->sgd.weight_decay;
        optim.nesterov = o->sgd.nesterov;
    } else if (o->optimizer == GA_SERVER_OPTIM_ADAM) {
        optim.kind = GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_ADAM;
        optim.lr = o->adam.lr;
        optim.beta1 = o->adam.beta1;
        optim.beta2 = o->adam.beta2;
        optim.eps = o->adam.eps;
        optim.weight_decay = o->adam.weight_decay;
        optim.decoupled = o->adam.decoupled;
    } else if (o->optimizer == GA_SERVER_OPTIM_REDUCE) {
        optim.kind = GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_REDUCE;
    }
    Gradagg__V1__Straggler strag = GRADAGG__V1__STRAGGLER__INIT;
    strag.deadline_ms = o->deadline_ms;
    strag.quorum = o->quorum;
    Gradagg__V1__Codec pull = GRADAGG__V1__CODEC__INIT;
    ga_codec_params pp = ga_client_codec_params(o->pull_codec, &o->pull_params);
    ga_codec_to_wire(o->pull_codec, &pp, &pull);
    Gradagg__V1__JobConfig cfg = GRADAGG__V1__JOB_CONFIG__INIT;
    cfg.world_size = o->world_size;
    cfg.mode = o->mode == GA_MODE_ASYNC ? GRADAGG__V1__MODE__MODE_ASYNC : GRADAGG__V1__MODE__MODE_SYNC;
    cfg.reduce = o->mean ? GRADAGG__V1__REDUCE__REDUCE_MEAN : GRADAGG__V1__REDUCE__REDUCE_SUM;
    cfg.optimizer = &optim;
    cfg.straggler = &strag;
    cfg.pull_codec = &pull;
    cfg.pull_auto_bits = o->pull_auto_bits;
    cfg.min_world_size = o->min_world_size;
    cfg.staleness = o->staleness;
    Gradagg__V1__JoinRequest req = GRADAGG__V1__JOIN_REQUEST__INIT;
    req.job = sh->job;
    req.rank = o->rank == GA_RANK_ANY ? 0 : o->rank;
    req.any_rank = o->rank == GA_RANK_ANY;
    req.incarnation = c->incarnation;
    req.config = &cfg;
    req.resume = o->resume;
    ProtobufCMessage *resp = NULL;
    ga_status st = ga_call_unary(sh->ch, GA_METHOD_JOIN, &req.base, o->call_timeout_ms, &resp, why, cap);
    if (st == GA_OK) *out = (Gradagg__V1__JoinResponse *)resp;
    return st;
}

/* A Join is idempotent (the same rank and incarnation joining again is a no-op), so one that ran
 * past its call timeout (a server slow to take its first calls) is sent again, as after
 * UNAVAILABLE, within the same retry bounds. */
ga_status ga_shard_join_task(ga_client *c, ga_shard *sh)
{
    Gradagg__V1__JoinResponse *resp = NULL;
    char why[256];
    ga_status st;
    double first_failure = ga_client_now();
    for (uint32_t tries = 0;; tries++) {
        st = ga_shard_retry(c, sh, ga_shard_join_attempt, &resp, why, sizeof why);
        if (st != GA_E_DEADLINE || !ga_client_may_retry(c, tries, first_failure)) break;
        sh->retries++;
    }
    if (st != GA_OK)
        return ga_shard_fail_call(sh, st, why, "join job '%s' rank %u at %s", sh->job, c->opt.rank, sh->addr);
    if (c->opt.rank == GA_RANK_ANY) c->opt.rank = resp->rank; /* the first shard's pick: the others get it */
    sh->version = resp->version;
    sh->step = resp->open_step;
    sh->heartbeat_ms = resp->heartbeat_ms;
    protobuf_c_message_free_unpacked(&resp->base, &ga_wire_allocator);
    return GA_OK;
}

/* Best effort: a worker that goes away should not hold its rank; one that failed says why. */
ga_status ga_shard_leave_task(ga_client *c, ga_shard *sh)
{
    Gradagg__V1__LeaveRequest req = GRADAGG__V1__LEAVE_REQUEST__INIT;
    req.job = sh->job;
    req.rank = c->opt.rank;
    req.incarnation = c->incarnation;
    req.failed = c->failure != NULL;
    req.reason = (char *)(c->failure ? c->failure : "");
    ProtobufCMessage *resp = NULL;
    char why[128];
    if (ga_call_unary(sh->ch, GA_METHOD_LEAVE, &req.base, c->opt.call_timeout_ms, &resp, why, sizeof why) == GA_OK)
        protobuf_c_message_free_unpacked(resp, &ga_wire_allocator);
    return GA_OK;
}

/* The shard came back without this worker's membership (restored from a checkpoint older than
 * the join) or without the job (its data was lost): join again as the same incarnation, and
 * re-create the shard's pieces from the parameters this worker holds when the job came back
 * empty. Only this shard: the others never lost anything. */
ga_status ga_shard_rejoin(ga_client *c, ga_shard *sh, char *why, size_t cap)
{
    Gradagg__V1__JoinResponse *resp = NULL;
    ga_status st = ga_shard_join_attempt(c, sh, &resp, why, cap);
    if (st != GA_OK) return st;
    bool empty = resp->n_tensors == 0;
    protobuf_c_message_free_unpacked(&resp->base, &ga_wire_allocator);
    sh->rejoins++;
    if (!empty || !c->inited || !sh->used) return GA_OK;
    /* Its message would name the init; the caller's names what was interrupted. */
    st = ga_shard_send_init(c, sh);
    if (st != GA_OK && cap > 0) { /* sh->err may be longer than why: cut */
        size_t n = strnlen(sh->err, cap - 1);
        memcpy(why, sh->err, n);
        why[n] = '\0';
    }
    return st;
}

ga_status ga_shard_open_step(ga_client *c, ga_shard *sh, uint64_t *open_step, bool *acked_durable, char *why,
                             size_t cap)
{
    Gradagg__V1__JoinResponse *resp = NULL;
    ga_status st = ga_shard_join_attempt(c, sh, &resp, why, cap);
    if (st != GA_OK) return st;
    *open_step = resp->open_step;
    *acked_durable = resp->acked_durable;
    protobuf_c_message_free_unpacked(&resp->base, &ga_wire_allocator);
    return GA_OK;
}
