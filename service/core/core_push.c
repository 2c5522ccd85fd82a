/* Pushes: the checks that need job state, commits, sync steps (rank order, straggler deadline,
 * close) and async commits, and the two math tasks (accumulate a bundle, apply a step) that run
 * on the job's task queue. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "core_internal.h"
#include "ga_alloc.h"

/* ---- tasks ---- */

typedef struct accumulate_task {
    ga_task t;
    ga_job *job;
    ga_push *push;
    ga_status rc;
    size_t bad_part;
    bool lent; /* the store holds some of push's payloads in place: keep it until the apply */
    double seconds;
} accumulate_task;

typedef struct apply_task {
    ga_task t;
    ga_job *job;
    uint32_t contributors;
    uint64_t version; /* published when done */
    uint64_t step_start_ns; /* the sync step's first commit (uv_hrtime); 0 for async */
    float lr;               /* the step's learning rate */
    ga_published *out;
    size_t ntensors;
    ga_status rc;
    double seconds;
} apply_task;

static void accumulate_work(ga_task *t)
{
    accumulate_task *a = (accumulate_task *)t;
    uint64_t t0 = uv_hrtime();
    a->rc = GA_OK;
    for (size_t i = 0; i < a->push->count && a->rc == GA_OK; i++) {
        const ga_push_chunk *p = &a->push->parts[i];
        bool kept;
        a->rc = ga_store_accumulate_lent(a->job->store, p->tensor, (size_t)p->chunk->offset,
                                         (size_t)p->chunk->count, p->codec, &p->params, p->chunk->payload.data,
                                         p->chunk->payload.len, &kept);
        a->lent = a->lent || kept;
        a->bad_part = i;
    }
    a->seconds = (double)(uv_hrtime() - t0) * 1e-9;
}

static void accumulate_done(ga_task *t)
{
    accumulate_task *a = (accumulate_task *)t;
    ga_job *job = a->job;
    job->accumulate_seconds += a->seconds;
    job->store_bytes = ga_store_bytes(job->store); /* staging buffers may have grown */
    if (a->rc != GA_OK)
        ga_core_job_fault(job, a->rc, "accumulating rank %u step %" PRIu64 " chunk %zu: %s", a->push->rank,
                          a->push->step, a->bad_part, ga_strerror(a->rc));
    if (a->lent) {
        a->push->next = job->lent;
        job->lent = a->push;
    } else {
        job->held_bytes -= a->push->bytes.held_bytes;
        job->core->held_bytes -= a->push->bytes.held_bytes;
        ga_push_free(a->push);
    }
    ga_free(a);
}

/* After an apply returned GA_OK: the store holds no lent payload any more. */
static void lent_release(ga_job *job)
{
    while (job->lent) {
        ga_push *p = job->lent;
        job->lent = p->next;
        job->held_bytes -= p->bytes.held_bytes;
        job->core->held_bytes -= p->bytes.held_bytes;
        ga_push_free(p);
    }
}

static void apply_work(ga_task *t)
{
    apply_task *a = (apply_task *)t;
    uint64_t t0 = uv_hrtime();
    /* In place: the job keeps one reference to each latest publication, and no pull takes a
     * new one while this runs (core_pull.c parks them until apply_done). */
    a->rc = ga_store_set_lr(a->job->store, a->lr);
    if (a->rc == GA_OK) a->rc = ga_store_apply_in_place(a->job->store, a->contributors, a->out);
    a->seconds = (double)(uv_hrtime() - t0) * 1e-9;
}

/* The step that would publish `version` left a tensor with NaN or Inf (store.h): nothing was
 * published, so every worker holds version - 1, the last finite one; the job fails with the
 * reason, is never checkpointed, and a restart replays to the same refusal. */
static void overflowed(ga_job *job, uint64_t version)
{
    uint32_t t = ga_store_overflowed(job->store);
    const char *name = t < job->ntensors ? job->tensors[t].name : "?";
    job->core->overflows++;
    ga_log(GA_LOG_ERROR, "job '%s': step %" PRIu64 " overflowed: tensor '%s' would hold NaN or Inf; version %" PRIu64
           " stays the last, and the job is refused",
           job->name, version - 1, name, version - 1);
    ga_core_job_fault(job, GA_E_NONFINITE,
                      "step %" PRIu64 " overflowed: tensor '%.40s' would hold NaN or Inf, so version %" PRIu64
                      " is not published; the workers hold version %" PRIu64
                      ", the last finite one (docs/reliability.md, \"Overflow\")",
                      version - 1, name, version, version - 1);
}

static void apply_done(ga_task *t)
{
    apply_task *a = (apply_task *)t;
    ga_job *job = a->job;
    job->apply_seconds += a->seconds;
    if (a->rc == GA_OK) lent_release(job); /* a failed apply may still hold them: kept with the job */
    if (a->rc == GA_OK && job->fault == GA_OK && job->uplink) { /* a relay's sums go upstream first */
        ga_core_relay_step(job, a->version - 1, a->contributors, a->out, a->ntensors, a->step_start_ns);
        ga_free(a);
        return;
    }
    if (a->rc == GA_OK && job->fault == GA_OK) {
        for (size_t i = 0; i < a->ntensors; i++) {
            ga_published *old = &job->tensors[i].pub;
            /* What pulls still sending the old version hold counts until they let it go. */
            if (old->full != a->out[i].full) ga_blob_retire(old->full, &job->core->pinned);
            if (old->delta != a->out[i].delta) ga_blob_retire(old->delta, &job->core->pinned);
            ga_published_clear(old);
            job->tensors[i].pub = a->out[i];
        }
        job->version = a->version;
        job->steps++;
        if (a->step_start_ns)
            ga_histogram_observe(&job->step_seconds, (double)(uv_hrtime() - a->step_start_ns) * 1e-9);
        job->store_bytes = ga_store_bytes(job->store);
        ga_core_pulls_serve(job);
        ga_core_pulls_reclaim(job, false);
    } else {
        if (a->rc == GA_OK)
            for (size_t i = 0; i < a->ntensors; i++) ga_published_clear(&a->out[i]);
        else if (a->rc == GA_E_NONFINITE)
            overflowed(job, a->version);
        else
            ga_core_job_fault(job, a->rc, "applying version %" PRIu64 ": %s", a->version, ga_strerror(a->rc));
    }
    ga_free(a->out);
    ga_free(a);
}

/* Queues the accumulation of a bundle (takes push). */
static void queue_accumulate(ga_job *job, ga_push *push)
{
    accumulate_task *a = ga_calloc(1, sizeof *a);
    if (!a) {
        job->held_bytes -= push->bytes.held_bytes;
        job->core->held_bytes -= push->bytes.held_bytes;
        ga_push_free(push);
        ga_core_job_fault(job, GA_E_NOMEM, "out of memory queueing an accumulation");
        return;
    }
    a->t.work = accumulate_work;
    a->t.done = accumulate_done;
    a->job = job;
    a->push = push;
    ga_taskq_push(&job->tasks, &a->t);
}

static void queue_apply(ga_job *job, uint32_t contributors, uint64_t version, uint64_t step_start_ns, float lr)
{
    apply_task *a = ga_calloc(1, sizeof *a);
    ga_published *out = ga_calloc(job->ntensors + 1, sizeof *out);
    if (!a || !out) {
        ga_free(a), ga_free(out);
        ga_core_job_fault(job, GA_E_NOMEM, "out of memory queueing version %" PRIu64, version);
        return;
    }
    a->t.work = apply_work;
    a->t.done = apply_done;
    a->job = job;
    a->contributors = contributors;
    a->version = version;
    a->step_start_ns = step_start_ns;
    a->lr = lr;
    a->out = out;
    a->ntensors = job->ntensors;
    job->target = version;
    ga_taskq_push(&job->tasks, &a->t);
    ga_persist_applied(job, version);
}

/* ---- checks that need the job ---- */

typedef struct span {
    uint32_t tensor;
    uint64_t lo, hi;
    size_t part;
} span;

static int span_order(const void *x, const void *y)
{
    const span *a = x, *b = y;
    if (a->tensor != b->tensor) return a->tensor < b->tensor ? -1 : 1;
    if (a->lo != b->lo) return a->lo < b->lo ? -1 : 1;
    return a->part < b->part ? -1 : a->part > b->part;
}

/* Every part names a tensor of the job, lies inside it, and together they cover every tensor
 * of the job exactly once. Sets each part's tensor index. */
static ga_status check_cover(ga_job *job, ga_push *push, char *why)
{
    ga_status st = GA_OK;
    span *s = ga_malloc((push->count + 1) * sizeof *s);
    if (!s) {
        snprintf(why, GA_WHY_CAP, "out of memory checking a push");
        return GA_E_NOMEM;
    }
    for (size_t i = 0; i < push->count; i++) {
        const Gradagg__V1__PushChunk *c = push->parts[i].chunk;
        long t = ga_job_tensor_find(job, c->tensor);
        if (t < 0) {
            snprintf(why, GA_WHY_CAP, "push chunk %zu names tensor '%.100s', which job '%s' does not have", i,
                     c->tensor, job->name);
            st = GA_E_UNKNOWN_TENSOR;
            goto out;
        }
        uint64_t n = job->tensors[t].elements;
        if (c->offset > n || c->count > n - c->offset) {
            snprintf(why, GA_WHY_CAP,
                     "push chunk %zu: tensor '%.100s' range [%" PRIu64 ", %" PRIu64 ") outside its %" PRIu64
                     " elements",
                     i, c->tensor, c->offset, c->offset + c->count, n);
            st = GA_E_COVERAGE;
            goto out;
        }
        s[i] = (span){(uint32_t)t, c->offset, c->offset + c->count, i};
    }
    qsort(s, push->count, sizeof *s, span_order);
    size_t k = 0;
    for (uint32_t t = 0; t < job->ntensors; t++) {
        const ga_tensor *ten = &job->tensors[t];
        uint64_t pos = 0;
        if (k == push->count || s[k].tensor != t) {
            snprintf(why, GA_WHY_CAP, "tensor '%.100s' (%" PRIu64 " elements) has no chunk in this push", ten->name,
                     ten->elements);
            st = GA_E_COVERAGE;
            goto out;
        }
        for (; k < push->count && s[k].tensor == t; k++) {
            if (s[k].lo < pos) {
                snprintf(why, GA_WHY_CAP, "tensor '%.100s': elements [%" PRIu64 ", %" PRIu64 ") covered twice",
                         ten->name, s[k].lo, s[k].hi < pos ? s[k].hi : pos);
                st = GA_E_COVERAGE;
                goto out;
            }
            if (s[k].lo > pos) {
                snprintf(why, GA_WHY_CAP, "tensor '%.100s': elements [%" PRIu64 ", %" PRIu64 ") missing", ten->name,
                         pos, s[k].lo);
                st = GA_E_COVERAGE;
                goto out;
            }
            pos = s[k].hi;
        }
        if (pos < ten->elements) {
            snprintf(why, GA_WHY_CAP, "tensor '%.100s': elements [%" PRIu64 ", %" PRIu64 ") missing", ten->name, pos,
                     ten->elements);
            st = GA_E_COVERAGE;
            goto out;
        }
    }
    for (size_t i = 0; i < push->count; i++) push->parts[s[i].part].tensor = s[i].tensor;
out:
    ga_free(s);
    return st;
}

static ga_status check_memory(ga_core *c, const ga_push *push, char *why)
{
    uint64_t now = ga_core_bytes(c), max = c->opt.max_memory_bytes;
    if (push->bytes.held_bytes > max || now > max - push->bytes.held_bytes) {
        snprintf(why, GA_WHY_CAP,
                 "holding this push (%zu bytes) would bring the server to %" PRIu64
                 " bytes, over its limit of %" PRIu64,
                 push->bytes.held_bytes, now + push->bytes.held_bytes, max);
        return GA_E_LIMIT;
    }
    return GA_OK;
}

/* The learning rate a push names for its step: its own, else the job's configured one. A job
 * whose optimizer has no lr (none, reduce) takes none, and a push's lr passes the check the
 * Join's passed (finite, >= 0, and for Adam lr / (1 - beta1) within the float range), so no lr a
 * push names can make its step fail. */
static ga_status push_lr(const ga_job *job, const ga_push *push, float *lr, char *why)
{
    ga_optim_kind k = job->store_cfg.optim;
    if (k != GA_OPTIM_SGD && k != GA_OPTIM_ADAM) {
        if (!push->has_lr) return GA_OK;
        snprintf(why, GA_WHY_CAP, "push of step %" PRIu64 " names lr %.9g, but job '%s' has optimizer %s, which takes none",
                 push->step, (double)push->lr, job->name, k == GA_OPTIM_REDUCE ? "reduce" : "none");
        return GA_E_OPTIM;
    }
    *lr = push->has_lr ? push->lr : k == GA_OPTIM_SGD ? job->store_cfg.sgd.lr : job->store_cfg.adam.lr;
    if (!push->has_lr) return GA_OK; /* the job's own: checked at its Join */
    ga_store_config with = job->store_cfg;
    with.sgd.lr = with.adam.lr = *lr;
    if (ga_store_check_optim(&with) == GA_OK) return GA_OK;
    snprintf(why, GA_WHY_CAP,
             "push of step %" PRIu64 " names lr %.9g, which the Adam optimizer of job '%s' cannot take: "
             "lr / (1 - beta1) or, with AdamW, lr * weight_decay passes the float range",
             push->step, (double)*lr, job->name);
    return GA_E_OPTIM;
}

/* ---- commit bookkeeping ---- */

static void record_commit(ga_member *m, uint64_t step)
{
    if (!m->has_pushed) {
        m->commit_mask = 1;
    } else if (step > m->last_step) {
        uint64_t shift = step - m->last_step;
        m->commit_mask = shift >= 64 ? 1 : (m->commit_mask << shift) | 1;
    } else {
        uint64_t back = m->last_step - step;
        if (back < 64) m->commit_mask |= (uint64_t)1 << back;
        return;
    }
    m->has_pushed = true;
    m->last_step = step;
}

static bool committed_before(const ga_member *m, uint64_t step)
{
    if (!m->has_pushed || step > m->last_step) return false;
    uint64_t back = m->last_step - step;
    return back < 64 && (m->commit_mask >> back) & 1;
}

/* A push is committed: its bytes as received and as fp32, per codec (the compression ratio). */
static void count_received(ga_job *job, const ga_push *push)
{
    for (size_t i = 0; i < push->count; i++) {
        const ga_push_chunk *p = &push->parts[i];
        job->received_bytes[p->codec] += p->chunk->payload.len;
        job->received_fp32[p->codec] += 4 * p->chunk->count;
    }
}

static void ack(ga_call *call, uint64_t step, bool duplicate, uint64_t version)
{
    Gradagg__V1__PushResponse resp = GRADAGG__V1__PUSH_RESPONSE__INIT;
    resp.step = step;
    resp.duplicate = duplicate;
    resp.version = version;
    ga_call_finish(call, &resp.base, GA_OK, NULL);
}

/* ---- sync steps ---- */

static void deadline_fired(uv_timer_t *timer)
{
    ga_job *job = timer->data;
    job->step.deadline_fired = true;
    ga_core_step_try_close(job);
}

void ga_core_step_advance(ga_job *job)
{
    uint32_t rank;
    ga_push *p;
    while ((p = ga_step_next(&job->step, &rank))) queue_accumulate(job, p);
}

void ga_core_step_exclude_absent(ga_job *job)
{
    for (uint32_t r = 0; r < job->world; r++) {
        const ga_member *m = &job->members[r];
        if (m->left || (job->min_world > 0 && m->incarnation == 0)) ga_step_exclude(&job->step, r);
    }
}

/* The closed step's contributors into the job's ring of records (Status recent_steps). Out of
 * memory: the record holds no ranks. */
static void record_step(ga_job *job)
{
    const ga_step *s = &job->step;
    struct ga_step_record *r = &job->records[job->records_next];
    ga_free(r->ranks);
    r->step = s->step;
    r->nranks = 0;
    r->ranks = ga_malloc((s->committed + 1) * sizeof *r->ranks);
    for (uint32_t k = 0; r->ranks && k < s->world; k++)
        if (ga_step_has(s, k)) r->ranks[r->nranks++] = k;
    job->records_next = (job->records_next + 1) % GA_JOB_STEP_RECORDS;
    if (job->records_count < GA_JOB_STEP_RECORDS) job->records_count++;
}

static void commit_ahead(ga_job *job);

void ga_core_step_close(ga_job *job, bool by_deadline)
{
    ga_step *s = &job->step;
    uint64_t step = s->step;
    uint32_t contributors = s->weight; /* the workers whose gradients the sum holds */
    ga_persist_step_closed(job, step, s->committed == job->world);
    uint32_t missing = ga_step_exclude_missing(s);
    if (by_deadline) {
        job->deadline_closes++;
        job->stragglers += missing;
    }
    ga_core_step_advance(job);
    uv_timer_stop(job->timer);
    if (s->lr_mixed && !job->lr_mixed_logged) {
        job->lr_mixed_logged = true;
        ga_log(GA_LOG_WARN,
               "job '%s': the ranks of step %" PRIu64 " named different lrs; rank %u's, %.9g, applies (the "
               "lowest contributing rank's); logged once per job",
               job->name, step, s->lr_rank, (double)s->lr);
    }
    record_step(job);
    queue_apply(job, contributors, step + 1, job->step_start_ns, s->lr);
    /* The next step opens now: its pushes queue behind this step's apply. The pushes that came
     * ahead for it are its first commits, also those of ranks that left since. */
    ga_step_open(s, step + 1);
    commit_ahead(job);
    ga_core_step_exclude_absent(job);
    ga_core_step_advance(job);
    ga_core_step_try_close(job);
}

void ga_core_step_try_close(ga_job *job)
{
    ga_step *s = &job->step;
    if (s->committed == 0 || job->fault != GA_OK || job->core->drained) return;
    if (s->committed < job->min_world) return; /* an elastic job below its minimum waits */
    bool complete = ga_step_complete(s);
    if (!complete && !(s->deadline_fired && s->committed >= job->quorum)) return;
    ga_core_step_close(job, !complete);
}

/* A commit's lr: the step's becomes that of its lowest committed rank, whatever the arrival
 * order (ranks that moved back after a server restart may be an iteration apart in their own
 * schedules). */
static void step_lr(ga_step *s, uint32_t rank, float lr)
{
    bool same = s->committed > 0 && memcmp(&lr, &s->lr, sizeof lr) == 0;
    if (s->committed > 0 && !same) s->lr_mixed = true;
    if (s->committed == 0 || rank < s->lr_rank) {
        s->lr = lr;
        s->lr_rank = rank;
    }
}

/* A push (checked, journaled, counted) joins the open step, its own: lr, start time, deadline,
 * and the staleness of what it was computed from. Takes push. */
static void commit_to_step(ga_job *job, ga_push *push)
{
    ga_step *s = &job->step;
    if (s->committed == 0) job->step_start_ns = uv_hrtime();
    step_lr(s, push->rank, push->lr);
    if (push->has_base)
        ga_histogram_observe(&job->staleness_hist,
                             push->base_version < s->step ? (double)(s->step - push->base_version) : 0.0);
    ga_step_commit(s, push->rank, push);
    if (s->committed == 1 && job->deadline_ms > 0) uv_timer_start(job->timer, deadline_fired, job->deadline_ms, 0);
}

/* The step just opened: the pushes that came ahead for it are committed to it, in arrival order. */
static void commit_ahead(ga_job *job)
{
    for (ga_push **p = &job->ahead; *p;) {
        ga_push *push = *p;
        if (push->step != job->step.step) {
            p = &push->next;
            continue;
        }
        *p = push->next;
        push->next = NULL;
        commit_to_step(job, push);
    }
}

static void push_sync(ga_core *c, ga_job *job, ga_call *call, ga_push *push)
{
    char why[GA_WHY_CAP];
    ga_status st;
    ga_step *s = &job->step;
    ga_member *m = &job->members[push->rank];
    if (push->step < s->step) {
        if (committed_before(m, push->step) || ga_core_relay_counted(job, push->step)) {
            job->duplicate_pushes++;
            ack(call, push->step, true, job->version);
        } else {
            job->late_pushes++;
            ga_call_finish(call, NULL, GA_E_STEP_CLOSED,
                           "step %" PRIu64 " of job '%s' closed without rank %u; the open step is %" PRIu64, push->step,
                           job->name, push->rank, s->step);
        }
        goto free;
    }
    if (push->step > s->step && committed_before(m, push->step)) { /* a retried push ahead */
        job->duplicate_pushes++;
        ack(call, push->step, true, job->version);
        goto free;
    }
    if (push->step > s->step + job->staleness) {
        if (job->staleness)
            ga_call_finish(call, NULL, GA_E_STEP_FUTURE,
                           "step %" PRIu64 " of job '%s' is more than %u steps past the open step %" PRIu64
                           " (config.staleness): wait for step %" PRIu64 " to close",
                           push->step, job->name, job->staleness, s->step, push->step - job->staleness - 1);
        else
            ga_call_finish(call, NULL, GA_E_STEP_FUTURE,
                           "step %" PRIu64 " of job '%s' is not open yet; the open step is %" PRIu64, push->step,
                           job->name, s->step);
        goto free;
    }
    if (push->step == s->step && ga_step_has(s, push->rank)) {
        job->duplicate_pushes++;
        ack(call, push->step, true, job->version);
        goto free;
    }
    if (push->step == s->step && s->slot[push->rank] == GA_SLOT_EXCLUDED) {
        job->late_pushes++;
        ga_call_finish(call, NULL, GA_E_STEP_CLOSED,
                       "rank %u was excluded from step %" PRIu64 " of job '%s' when it left; push step %" PRIu64,
                       push->rank, s->step, job->name, s->step + 1);
        goto free;
    }
    float lr = 0.0f;
    GA_CHECK_GOTO(push_lr(job, push, &lr, why), st, refuse);
    GA_CHECK_GOTO(check_cover(job, push, why), st, refuse);
    GA_CHECK_GOTO(check_memory(c, push, why), st, refuse);
    GA_CHECK_GOTO(ga_persist_commit(job, push->step + 1, push, why), st, refuse);

    job->held_bytes += push->bytes.held_bytes;
    c->held_bytes += push->bytes.held_bytes;
    job->any_commit = true;
    record_commit(m, push->step);
    count_received(job, push);
    push->has_base = m->has_pulled;
    push->base_version = m->pulled_version;
    push->lr = lr;
    uint64_t step = push->step;
    if (step > s->step) { /* ahead: committed to its step when that opens */
        ga_push **tail = &job->ahead;
        while (*tail) tail = &(*tail)->next;
        push->next = NULL;
        *tail = push;
        ack(call, step, false, job->version);
        return;
    }
    commit_to_step(job, push);
    ack(call, step, false, job->version);
    ga_core_step_advance(job);
    ga_core_step_try_close(job);
    return;
refuse:
    ga_call_finish(call, NULL, st, "%s", why);
free:
    ga_push_free(push);
}

/* ---- async ---- */

static void push_async(ga_core *c, ga_job *job, ga_call *call, ga_push *push)
{
    char why[GA_WHY_CAP];
    ga_status st;
    ga_member *m = &job->members[push->rank];
    if (m->has_pushed && push->step <= m->last_step) {
        job->duplicate_pushes++;
        /* Commits are applied in order, so the queued target already includes this one. */
        ack(call, push->step, true, job->target);
        ga_push_free(push);
        return;
    }
    float lr = 0.0f;
    GA_CHECK_GOTO(push_lr(job, push, &lr, why), st, refuse);
    GA_CHECK_GOTO(check_cover(job, push, why), st, refuse);
    GA_CHECK_GOTO(check_memory(c, push, why), st, refuse);
    GA_CHECK_GOTO(ga_persist_commit(job, job->target + 1, push, why), st, refuse);
    job->held_bytes += push->bytes.held_bytes;
    c->held_bytes += push->bytes.held_bytes;
    job->any_commit = true;
    m->has_pushed = true;
    m->last_step = push->step;
    count_received(job, push);
    uint64_t step = push->step; /* queue_accumulate takes push */
    uint32_t weight = push->weight;
    queue_accumulate(job, push);
    queue_apply(job, weight, job->target + 1, 0, lr);
    /* Async acks name the version that will include this commit: a pull for it reads it. */
    ack(call, step, false, job->target);
    return;
refuse:
    ga_call_finish(call, NULL, st, "%s", why);
    ga_push_free(push);
}

static void push_received(ga_core *c, ga_call *call, ga_push *push)
{
    char why[GA_WHY_CAP];
    ga_status st;
    if (!push) {
        ga_call_finish(call, NULL, GA_E_INVAL, "empty push stream: no chunk arrived");
        return;
    }
    ga_job *job = ga_core_job(c, push->job);
    if (!job) {
        ga_call_finish(call, NULL, GA_E_UNKNOWN_JOB, "job '%s' does not exist (the first Join creates it)", push->job);
        goto free;
    }
    if (!c->replaying)
        GA_CHECK_GOTO(ga_job_member_check(job, push->rank, push->incarnation, why, sizeof why), st, refuse);
    ga_core_touch(c, job, push->rank);
    if (c->draining) {
        ga_call_finish(call, NULL, GA_E_DRAINING, "the server is shutting down: push of step %" PRIu64 " refused",
                       push->step);
        goto free;
    }
    if (job->fault != GA_OK) {
        ga_call_finish(call, NULL, job->fault, "%s", job->fault_why);
        goto free;
    }
    if (job->async)
        push_async(c, job, call, push);
    else
        push_sync(c, job, call, push);
    return;
refuse:
    ga_call_finish(call, NULL, st, "%s", why);
free:
    ga_push_free(push);
}

void ga_core_push(ga_core *c, ga_call *call, ga_push *push)
{
    ga_core_adopt(c, ga_push_unbudget(push)); /* from here the core accounts the bundle itself */
    push_received(c, call, push);
    ga_core_publish_bytes(c);
}
