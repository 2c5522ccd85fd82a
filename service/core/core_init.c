/* InitTensors: checks an init bundle against the job as a whole (shapes, coverage of values,
 * limits, no new tensor after the first commit), registers the new tensors and creates them in
 * the store on the job's task queue; answered when the task is done. An awaiting init (no
 * values) is parked until another rank's init has registered every tensor it names. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_internal.h"
#include "ga_alloc.h"

typedef struct entry {
    const char *name;
    uint64_t lo, hi;
    bool values;
    size_t part;
} entry;

typedef struct new_tensor {
    uint64_t elements;
    size_t lo, hi; /* its chunks: entries [lo, hi) */
    bool values;
} new_tensor;

typedef struct init_task {
    ga_task t;
    ga_job *job;
    ga_call *call;
    ga_init *init;
    entry *e;
    new_tensor *nt;
    size_t first, count; /* tensors [first, first + count) are new */
    uint32_t existing;
    size_t missing; /* tensors an awaiting init names that are not registered yet */
    bool store_ahead; /* the store created a tensor whose values failed: the job must fail */
    ga_published *pubs;
    size_t created;
    ga_status rc;
} init_task;

static int entry_order(const void *x, const void *y)
{
    const entry *a = x, *b = y;
    int c = strcmp(a->name, b->name);
    if (c) return c;
    if (a->lo != b->lo) return a->lo < b->lo ? -1 : 1;
    return a->part < b->part ? -1 : a->part > b->part;
}

/* Writes the values of a tensor created with zeros chunk by chunk into its parameters (and its
 * published copy), so no assembled copy of the whole tensor exists beside the chunks and the
 * store; then takes its publication again (the CPU's is the same blob). */
static ga_status write_chunks(init_task *it, const new_tensor *nt, uint32_t index, ga_published *pub)
{
    ga_store *s = it->job->store;
    bool published = ga_store_has(s, index, GA_STORE_BUF_PUBLISHED);
    for (size_t i = nt->lo; i < nt->hi; i++) {
        const Gradagg__V1__InitChunk *c = it->init->parts[it->e[i].part].chunk;
        if (!c->values.len) continue;
        const float *v = (const float *)c->values.data;
        GA_CHECK(ga_store_write(s, index, GA_STORE_BUF_PARAMS, (size_t)c->offset, (size_t)c->count, v));
        if (published)
            GA_CHECK(ga_store_write(s, index, GA_STORE_BUF_PUBLISHED, (size_t)c->offset, (size_t)c->count, v));
    }
    ga_published_clear(pub);
    return ga_store_publication(s, index, pub);
}

static void init_work(ga_task *t)
{
    init_task *it = (init_task *)t;
    it->rc = GA_OK;
    for (size_t k = 0; k < it->count; k++) {
        const new_tensor *nt = &it->nt[k];
        size_t n = (size_t)nt->elements;
        const Gradagg__V1__InitChunk *first = it->init->parts[it->e[nt->lo].part].chunk;
        bool whole = nt->values && nt->hi - nt->lo == 1 && first->count == n; /* one chunk holds it all */
        uint32_t index = 0;
        it->rc = ga_store_add_tensor(it->job->store, n, whole ? (const float *)first->values.data : NULL, &index,
                                     &it->pubs[k]);
        if (it->rc != GA_OK) return;
        if (index != it->first + k) { /* the store and the table disagree: a bug, never silent */
            ga_published_clear(&it->pubs[k]);
            it->rc = GA_E_INVAL;
            return;
        }
        if (nt->values && !whole && (it->rc = write_chunks(it, nt, index, &it->pubs[k])) != GA_OK) {
            /* Only a device error gets here: the store holds a tensor the table will not. */
            ga_published_clear(&it->pubs[k]);
            it->store_ahead = true;
            return;
        }
        it->created = k + 1;
    }
}

static void answer(ga_call *call, uint64_t version, uint32_t created, uint32_t existing)
{
    Gradagg__V1__InitResponse resp = GRADAGG__V1__INIT_RESPONSE__INIT;
    resp.version = version;
    resp.created = created;
    resp.existing = existing;
    ga_call_finish(call, &resp.base, GA_OK, NULL);
}

static void init_done(ga_task *t)
{
    init_task *it = (init_task *)t;
    ga_job *job = it->job;
    for (size_t k = 0; k < it->created; k++) {
        job->tensors[it->first + k].pub = it->pubs[k];
        job->tensors[it->first + k].ready = true;
    }
    job->store_bytes = ga_store_bytes(job->store);
    job->core->held_bytes -= it->init->bytes.held_bytes;
    if (it->rc == GA_OK) {
        answer(it->call, job->version, (uint32_t)it->count, it->existing);
    } else {
        const char *name = job->tensors[it->first + it->created].name;
        ga_call_finish(it->call, NULL, it->rc, "job '%s': creating tensor '%.100s' (%zu of %zu created): %s", job->name,
                       name, it->created, it->count, ga_strerror(it->rc));
        if (job->ntensors == it->first + it->count && !it->store_ahead)
            ga_job_tensor_truncate(job, it->first + it->created);
        else
            ga_core_job_fault(job, it->rc, "creating tensor '%.100s': %s", name, ga_strerror(it->rc));
    }
    /* A model's values come once, in chunks the arenas would keep for pushes that reuse little
     * of them (base/heap.h): give them back now. */
    bool large = it->init->bytes.held_bytes >= GA_HEAP_MMAP_THRESHOLD;
    ga_init_free(it->init);
    ga_free(it->e), ga_free(it->nt), ga_free(it->pubs), ga_free(it);
    if (large) ga_heap_release();
}

/* The values of one new tensor, chunks e[lo, hi) sorted by offset: those that carry values
 * cover [0, n) exactly once, or none carries any. */
static ga_status check_values(const entry *e, size_t lo, size_t hi, uint64_t n, bool *has_values, char *why)
{
    uint64_t pos = 0;
    bool any = false;
    for (size_t i = lo; i < hi; i++) {
        if (!e[i].values) continue;
        any = true;
        if (e[i].lo < pos) {
            snprintf(why, GA_WHY_CAP, "tensor '%.100s': elements [%" PRIu64 ", %" PRIu64 ") given values twice",
                     e[i].name, e[i].lo, e[i].hi < pos ? e[i].hi : pos);
            return GA_E_COVERAGE;
        }
        if (e[i].lo > pos) {
            snprintf(why, GA_WHY_CAP, "tensor '%.100s': elements [%" PRIu64 ", %" PRIu64 ") have no values", e[i].name,
                     pos, e[i].lo);
            return GA_E_COVERAGE;
        }
        pos = e[i].hi;
    }
    if (any && pos < n) {
        snprintf(why, GA_WHY_CAP, "tensor '%.100s': elements [%" PRIu64 ", %" PRIu64 ") have no values", e[lo].name,
                 pos, n);
        return GA_E_COVERAGE;
    }
    *has_values = any;
    return GA_OK;
}

static uint64_t elements_of(const Gradagg__V1__InitChunk *c)
{
    uint64_t n = 1;
    for (size_t d = 0; d < c->n_shape; d++) n *= c->shape[d]; /* ga_init_add checked it fits */
    return n;
}

/* Checks the bundle against the job; fills the task's entries and new tensors (not yet
 * registered: nt[k].lo/hi/values, count). */
static ga_status check_init(ga_core *c, ga_job *job, init_task *it, bool *pending, char *why)
{
    ga_init *init = it->init;
    entry *e = it->e;
    for (size_t i = 0; i < init->count; i++) {
        const Gradagg__V1__InitChunk *ch = init->parts[i].chunk;
        e[i] = (entry){ch->tensor, ch->offset, ch->offset + ch->count, ch->values.len > 0, i};
    }
    qsort(e, init->count, sizeof *e, entry_order);
    uint64_t new_elements = 0;
    for (size_t lo = 0, hi; lo < init->count; lo = hi) {
        for (hi = lo + 1; hi < init->count && strcmp(e[hi].name, e[lo].name) == 0;) hi++;
        const Gradagg__V1__InitChunk *ch = init->parts[e[lo].part].chunk;
        long t = ga_job_tensor_find(job, ch->tensor);
        if (t >= 0) {
            const ga_tensor *ten = &job->tensors[t];
            if (ten->ndim != ch->n_shape || memcmp(ten->shape, ch->shape, ten->ndim * sizeof *ten->shape) != 0) {
                char have[128], got[128];
                snprintf(why, GA_WHY_CAP, "tensor '%.100s' exists with shape %s; this init gives %s", ch->tensor,
                         ga_shape_text(ten->shape, ten->ndim, have, sizeof have),
                         ga_shape_text(ch->shape, ch->n_shape, got, sizeof got));
                return GA_E_SHAPE;
            }
            it->existing++;
            if (!ten->ready) *pending = true;
            continue;
        }
        if (job->any_commit) {
            snprintf(why, GA_WHY_CAP,
                     "job '%s' took its first push (open step %" PRIu64 "): tensor '%.100s' cannot be added after "
                     "training started",
                     job->name, job->async ? job->version : job->step.step, ch->tensor);
            return GA_E_JOB_CONFIG;
        }
        if (init->await_values) { /* another rank's init will create it */
            it->missing++;
            continue;
        }
        uint64_t n = elements_of(ch);
        new_tensor *nt = &it->nt[it->count++];
        *nt = (new_tensor){.elements = n, .lo = lo, .hi = hi};
        GA_CHECK(check_values(e, lo, hi, n, &nt->values, why));
        new_elements += n;
    }
    if (it->count > c->opt.max_tensors || job->ntensors > c->opt.max_tensors - it->count) {
        snprintf(why, GA_WHY_CAP, "job '%s' would hold %zu tensors, over the limit of %u (max_tensors)", job->name,
                 job->ntensors + it->count, c->opt.max_tensors);
        return GA_E_LIMIT;
    }
    uint64_t held = 0;
    for (size_t t = 0; t < job->ntensors; t++) held += job->tensors[t].elements;
    if (new_elements > c->opt.max_elements || held > c->opt.max_elements - new_elements) {
        snprintf(why, GA_WHY_CAP,
                 "job '%s' would hold %" PRIu64 " elements (%" PRIu64 " now + %" PRIu64 " in %zu new tensors), over "
                 "the limit of %" PRIu64 " (max_elements)",
                 job->name, held + new_elements, held, new_elements, it->count, c->opt.max_elements);
        return GA_E_LIMIT;
    }
    uint64_t per = ga_job_bytes_per_element(job), now = ga_core_bytes(c), max = c->opt.max_memory_bytes;
    uint64_t need = new_elements > UINT64_MAX / per ? UINT64_MAX : new_elements * per;
    if (need > max || now > max - need) {
        snprintf(why, GA_WHY_CAP,
                 "creating %zu tensors of %" PRIu64 " elements needs about %" PRIu64 " bytes; the server holds %" PRIu64
                 " of its limit of %" PRIu64,
                 it->count, new_elements, need, now, max);
        return GA_E_LIMIT;
    }
    return GA_OK;
}

/* Registers the new tensors in the order the stream first named them; maps nt to them. */
static ga_status register_new(ga_job *job, init_task *it)
{
    new_tensor *sorted = ga_malloc((it->count + 1) * sizeof *sorted);
    if (!sorted) return GA_E_NOMEM;
    memcpy(sorted, it->nt, it->count * sizeof *sorted);
    it->first = job->ntensors;
    for (size_t i = 0; i < it->init->count; i++) {
        const Gradagg__V1__InitChunk *ch = it->init->parts[i].chunk;
        if (ga_job_tensor_find(job, ch->tensor) >= 0) continue;
        if (ga_job_tensor_add(job, ch->tensor, ch->shape, ch->n_shape, elements_of(ch)) < 0) {
            ga_job_tensor_truncate(job, it->first);
            ga_free(sorted);
            return GA_E_NOMEM;
        }
    }
    for (size_t k = 0; k < it->count; k++) {
        const char *name = it->e[sorted[k].lo].name;
        it->nt[ga_job_tensor_find(job, name) - (long)it->first] = sorted[k];
    }
    ga_free(sorted);
    return GA_OK;
}

/* ---- awaiting inits ---- */

void ga_core_init_park(ga_job *job, ga_call *call, ga_init *init)
{
    ga_init_wait *w = ga_calloc(1, sizeof *w);
    if (!w) {
        ga_call_finish(call, NULL, GA_E_NOMEM, "out of memory parking an init");
        ga_init_free(init);
        return;
    }
    *w = (ga_init_wait){call, init, NULL};
    ga_init_wait **tail = &job->init_waits;
    while (*tail) tail = &(*tail)->next;
    *tail = w;
    job->members[init->rank].inits_waiting++;
    job->core->held_bytes += init->bytes.held_bytes;
}

/* Unlinks *link (which it frees) and gives back its call and init. */
static ga_init *unpark(ga_job *job, ga_init_wait **link, ga_call **call)
{
    ga_init_wait *w = *link;
    ga_init *init = w->init;
    *link = w->next;
    *call = w->call;
    ga_member *m = &job->members[init->rank];
    if (m->inits_waiting) m->inits_waiting--;
    m->active_ms = uv_now(job->core->loop); /* a worker that waited was active until now */
    job->core->held_bytes -= init->bytes.held_bytes;
    ga_free(w);
    return init;
}

static bool all_registered(const ga_job *job, const ga_init *init)
{
    for (size_t i = 0; i < init->count; i++)
        if (ga_job_tensor_find(job, init->parts[i].chunk->tensor) < 0) return false;
    return true;
}

/* Runs again every parked init whose tensors are all registered now: each queues behind the
 * creating init's task, so it is answered once the tensors are ready. */
void ga_core_inits_wake(ga_core *c, ga_job *job)
{
    for (ga_init_wait **w = &job->init_waits; *w;) {
        if (!all_registered(job, (*w)->init)) {
            w = &(*w)->next;
            continue;
        }
        ga_call *call;
        ga_init *init = unpark(job, w, &call);
        ga_core_init(c, call, init); /* creates nothing, so wakes nothing: *w is still valid */
    }
}

void ga_core_inits_end(ga_job *job, ga_status st, const char *why)
{
    while (job->init_waits) {
        ga_call *call;
        ga_init_free(unpark(job, &job->init_waits, &call));
        ga_call_finish(call, NULL, st, "%s", why);
    }
}

bool ga_core_init_cancel(ga_core *c, ga_call *call)
{
    for (size_t i = 0; i < c->njobs; i++)
        for (ga_init_wait **w = &c->jobs[i]->init_waits; *w; w = &(*w)->next) {
            if ((*w)->call != call) continue;
            ga_call *gone;
            ga_init_free(unpark(c->jobs[i], w, &gone));
            ga_call_finish(gone, NULL, GA_E_CANCELLED, "the client went away while its init awaited the tensors");
            return true;
        }
    return false;
}

static void init_received(ga_core *c, ga_call *call, ga_init *init)
{
    char why[GA_WHY_CAP];
    ga_status st;
    init_task *it = NULL;
    if (!init) {
        ga_call_finish(call, NULL, GA_E_INVAL, "empty init stream: no chunk arrived");
        return;
    }
    ga_job *job = ga_core_job(c, init->job);
    if (!job) {
        st = GA_E_UNKNOWN_JOB;
        snprintf(why, sizeof why, "job '%s' does not exist (the first Join creates it)", init->job);
        goto refuse;
    }
    if (!c->replaying) GA_CHECK_GOTO(ga_job_member_check(job, init->rank, init->incarnation, why, sizeof why), st, refuse);
    ga_core_touch(c, job, init->rank);
    if (c->draining) {
        st = GA_E_DRAINING;
        snprintf(why, sizeof why, "the server is shutting down: init refused");
        goto refuse;
    }
    if (job->fault != GA_OK) {
        st = job->fault;
        snprintf(why, sizeof why, "%s", job->fault_why);
        goto refuse;
    }
    it = ga_calloc(1, sizeof *it);
    if (it) {
        it->e = ga_malloc(init->count * sizeof *it->e);
        it->nt = ga_malloc(init->count * sizeof *it->nt);
        it->pubs = ga_calloc(init->count, sizeof *it->pubs);
    }
    if (!it || !it->e || !it->nt || !it->pubs) {
        st = GA_E_NOMEM;
        snprintf(why, sizeof why, "out of memory checking an init");
        goto refuse;
    }
    it->init = init;
    bool pending = false;
    st = check_init(c, job, it, &pending, why);
    if (st == GA_E_SHAPE && !c->replaying && !job->any_commit) { /* a broken launch: every rank fails now */
        char what[GA_WHY_CAP + 32];
        snprintf(what, sizeof what, "disagrees on the model: %s", why);
        ga_core_rank_failed(job, init->rank, false, what);
    }
    if (st != GA_OK) goto refuse;
    if (job->uplink && !job->relay_ready) { /* a relay's: parked until it holds the upstream version */
        ga_core_relay_init(job, call, init);
        ga_free(it->e), ga_free(it->nt), ga_free(it->pubs), ga_free(it);
        return;
    }
    if (it->missing) {
        ga_core_init_park(job, call, init);
        ga_free(it->e), ga_free(it->nt), ga_free(it->pubs), ga_free(it);
        return;
    }
    if (it->count == 0 && !pending) { /* nothing to create or wait for */
        answer(call, job->version, 0, it->existing);
        goto free;
    }
    if (it->count) GA_CHECK_GOTO(ga_persist_init(job, init, why), st, refuse);
    if (it->count && register_new(job, it) != GA_OK) {
        st = GA_E_NOMEM;
        snprintf(why, sizeof why, "out of memory registering tensors");
        goto refuse;
    }
    it->t.work = init_work;
    it->t.done = init_done;
    it->job = job;
    it->call = call;
    c->held_bytes += init->bytes.held_bytes;
    bool created = it->count > 0;
    ga_taskq_push(&job->tasks, &it->t);
    if (created) ga_core_inits_wake(c, job);
    return;
refuse:
    ga_call_finish(call, NULL, st, "%s", why);
free:
    if (it) ga_free(it->e), ga_free(it->nt), ga_free(it->pubs), ga_free(it);
    ga_init_free(init);
}

void ga_core_init(ga_core *c, ga_call *call, ga_init *init)
{
    ga_core_adopt(c, ga_init_unbudget(init)); /* from here the core accounts the bundle itself */
    init_received(c, call, init);
    ga_core_publish_bytes(c);
}
