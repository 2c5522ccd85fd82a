/* One training step (ga_client_step): catch up the shards whose last pull failed, encode, then
 * on every shard at once push and, as soon as that shard's push is in, pull; then fold back what
 * was not counted. With lanes the pushes go out lane after lane (ga_shard_turn_wait), so the
 * pulls of the first lanes overlap the pushes of the later ones, and a lane pushes only once the
 * lane c->lane_window before it has pulled. */
#include <string.h>

#include "client_internal.h"

/* Statuses after which the server may have counted the push (an answer got lost): folding it
 * back could count it twice, so it stays out of the residual. Every other error is a refusal
 * of the whole stream. */
static bool push_maybe_counted(ga_status st)
{
    return st == GA_E_UNAVAILABLE || st == GA_E_DEADLINE || st == GA_E_CANCELLED || st == GA_E_TRANSPORT;
}

/* The step a sync shard pushes next, once it pulled after pushing sh->step: the open step it
 * pulled (version), or with bounded staleness its own next step, which may run ahead of it. */
static uint64_t next_step(const ga_client *c, const ga_shard *sh)
{
    if (c->opt.staleness == 0 || sh->step + 1 < sh->version) return sh->version;
    return sh->step + 1;
}

/* Bounded staleness: the least version sh must hold before it pushes its next step (that step
 * minus the staleness), and a newer one if the push's answer named one. 0: no pull is needed. */
static uint64_t stale_want(const ga_client *c, const ga_shard *sh)
{
    uint64_t want = ga_shard_needed_after_push(c, sh);
    if (sh->ack > sh->version && sh->version + 1 > want) want = sh->version + 1;
    return want > sh->version ? want : 0;
}

/* The shards whose last pull failed fetch the parameters their acknowledged push made, before
 * new gradients go anywhere. */
static ga_status catch_up(ga_client *c)
{
    bool any = false;
    for (uint32_t i = 0; i < c->nshards; i++) {
        ga_shard *sh = &c->shards[i];
        sh->active = sh->used && sh->pull_pending;
        sh->want = sh->pull_min;
        any |= sh->active;
    }
    if (!any) return GA_OK;
    ga_status st = ga_client_pull_shards(c);
    for (uint32_t i = 0; i < c->nshards; i++) {
        ga_shard *sh = &c->shards[i];
        if (!sh->active || sh->st != GA_OK) continue;
        sh->pull_pending = false;
        if (c->opt.mode == GA_MODE_SYNC) sh->step = next_step(c, sh);
    }
    return st;
}

/* Encodes sh's deferred parts, pushes the step's parts, then pulls the version the push asked
 * for. A push refused as late (its step closed without it) still pulls the step that closed;
 * its bytes are marked for the fold-back (sh->late). sh->pushed says whether the push went
 * through; the return is the encode's or the push's failure, or the pull's. */
static ga_status push_then_pull(ga_client *c, ga_shard *sh)
{
    sh->pushed = sh->late = false;
    sh->bytes_pulled = 0;
    sh->apply_s = 0.0;
    ga_status st = ga_shard_encode(c, sh);
    sh->encode_end = ga_client_now();
    if (st != GA_OK) {
        ga_shard_turn_pass(c, sh, GA_TURN_SENT); /* the next lane does not wait for this one */
        sh->push_end = sh->encode_end;
        return st;
    }
    ga_shard_turn_wait(c, sh, GA_TURN_PULLED);
    st = ga_shard_push(c, sh);
    sh->push_end = ga_client_now();
    if (st == GA_E_STEP_CLOSED) {
        /* A straggler: nothing is lost, the payloads travel with the next step. */
        sh->late = true;
        sh->want = sh->step + 1;
        sh->err[0] = '\0';
    } else if (st == GA_OK) {
        sh->want = c->opt.mode == GA_MODE_ASYNC ? sh->ack : sh->step + 1;
        if (c->opt.mode == GA_MODE_ASYNC) sh->step++; /* the worker's own push counter */
        /* The server had this step already, from an earlier call of this client's whose answer
         * was lost: these gradients were not counted, so they travel with the next step, as a
         * straggler's do (ga_shard_push). */
        sh->late = sh->stale_ack;
        if (c->opt.mode == GA_MODE_SYNC && c->opt.staleness > 0 && !sh->late) {
            sh->want = stale_want(c, sh);
            if (sh->want == 0) { /* it holds a version recent enough, and no newer one exists */
                sh->pushed = true;
                return GA_OK;
            }
        }
    } else {
        return st;
    }
    sh->pushed = true;
    return ga_shard_pull_after_push(c, sh);
}

/* Shard task: push_then_pull, then the lanes that wait for this one's pull may push. */
static ga_status exchange(ga_client *c, ga_shard *sh)
{
    ga_status st = push_then_pull(c, sh);
    ga_shard_turn_pass(c, sh, GA_TURN_PULLED); /* also after a failure */
    return st;
}

ga_status ga_client_step(ga_client *c, const float *const *grads)
{
    if (!c) return GA_E_INVAL;
    if (ga_client_in_flight(c)) return GA_E_INVAL; /* ga_client_error says why */
    return ga_client_step_run(c, grads);
}

ga_status ga_client_step_run(ga_client *c, const float *const *grads)
{
    if (!c->inited) return ga_client_fail(c, GA_E_INVAL, "step: before init");
    if (!grads) return ga_client_fail(c, GA_E_INVAL, "step: grads is NULL");
    for (size_t i = 0; i < c->ntensors; i++)
        if (!grads[i]) return ga_client_fail(c, GA_E_INVAL, "step: grads[%zu] ('%s') is NULL", i, c->tensors[i].name);
    c->stats.encode_s = c->stats.push_s = c->stats.pull_s = c->stats.decode_s = 0.0;
    c->stats.bytes_pushed = c->stats.bytes_pulled = 0;
    ga_status st;
    if (c->device_stale && (st = ga_client_device_store(c)) != GA_OK)
        return ga_client_fail(c, st, "step: copying version %llu to the device tensors: %s",
                              (unsigned long long)c->version, ga_strerror(st));
    if ((st = catch_up(c)) != GA_OK) return st;

    /* Sync: every shard pushes the same step. A shard that fell behind (its push failed while
     * the others' went through) catches up alone; the others' parts wait in the residual. */
    uint64_t step = ga_client_push_step(c);
    bool fold[GA_PLACEMENT_MAX_SHARDS] = {false}, folding = false;
    for (uint32_t i = 0; i < c->nshards; i++) {
        ga_shard *sh = &c->shards[i];
        fold[i] = sh->used && sh->step != step;
        folding |= fold[i];
        sh->active = sh->used && sh->step == step;
    }

    double t0 = ga_client_now();
    st = ga_client_encode(c, grads, step, true);
    double t1 = ga_client_now();
    if (st != GA_OK) {
        c->stats.encode_s = t1 - t0;
        return st;
    }

    ga_shards_run(c, exchange);
    ga_client_encode_finish(c);
    double t2 = ga_client_now(), push_start = t2, push_end = t1, apply = 0.0;
    for (uint32_t i = 0; i < c->nshards; i++) {
        ga_shard *sh = &c->shards[i];
        if (!sh->active) continue;
        if (sh->encode_end < push_start) push_start = sh->encode_end;
        if (sh->push_end > push_end) push_end = sh->push_end;
        c->stats.bytes_pushed += sh->bytes_pushed;
        /* The shards applied at the same time: the slowest one's apply is the step's. */
        if (sh->apply_s > apply) apply = sh->apply_s;
        c->stats.bytes_pulled += sh->bytes_pulled;
        if (sh->late) {
            fold[i] = folding = true;
            c->stats.late_pushes++;
        }
        if (!sh->pushed) {
            if (!push_maybe_counted(sh->st)) fold[i] = folding = true;
        } else if (sh->st != GA_OK) {
            /* The push went through but its pull did not: the next call pulls first. */
            sh->pull_pending = true;
            sh->pull_min = sh->want;
        } else if (c->opt.mode == GA_MODE_SYNC) {
            sh->step = next_step(c, sh);
        }
    }
    /* Encoding until the first push could start; the lanes encoded later overlap pushes. */
    c->stats.encode_s = push_start - t0;
    c->stats.push_s = push_end - push_start;
    c->stats.decode_s = apply;
    c->stats.pull_s = t2 - push_end - apply;
    c->version = ga_shards_version(c);

    ga_status fold_st = folding ? ga_client_fold_back(c, fold) : GA_OK;
    char fold_err[sizeof c->err];
    memcpy(fold_err, c->err, sizeof fold_err);
    st = ga_shards_error(c);
    if (st == GA_OK && fold_st != GA_OK) {
        st = fold_st;
        memcpy(c->err, fold_err, sizeof fold_err);
    }
    if (st != GA_OK) return st;
    /* Device tensors: the mirror now holds the version; the caller's device buffers get it. */
    if ((st = ga_client_device_store(c)) != GA_OK)
        return ga_client_fail(c, st, "pull version %llu: copying it to the device tensors: %s",
                              (unsigned long long)c->version, ga_strerror(st));
    c->stats.steps++;
    c->err[0] = '\0';
    return GA_OK;
}
