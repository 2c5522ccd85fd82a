/* Jobs: config checks and comparison, creation, the tensor table and member checks (job.h). */
#include "job.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ga_alloc.h"
#include "ga_auto.h"
#include "ga_wire.h"


/* ---- settings ---- */

/* Elements per pull piece: the chunk size in fp32, a multiple of the codecs' block. */
static size_t piece_elems(size_t chunk_bytes)
{
    size_t n = chunk_bytes / 4 / GA_STORE_PIECE_ALIGN * GA_STORE_PIECE_ALIGN;
    return n ? n : GA_STORE_PIECE_ALIGN;
}

ga_status ga_job_settings_from(const Gradagg__V1__JobConfig *cfg, const ga_core_options *opt, ga_job_settings *out,
                               char *why, size_t cap)
{
    static const Gradagg__V1__Optimizer no_optim = GRADAGG__V1__OPTIMIZER__INIT;
    static const Gradagg__V1__Straggler no_straggler = GRADAGG__V1__STRAGGLER__INIT;
    if (!cfg) return ga_status_fail(GA_E_INVAL, why, cap, "config is missing: the first Join of a job creates it");
    if (cfg->world_size < 1 || cfg->world_size > GA_JOB_MAX_WORLD)
        return ga_status_fail(GA_E_INVAL, why, cap, "config.world_size %u outside [1, %u]", cfg->world_size, GA_JOB_MAX_WORLD);
    if (cfg->mode != GRADAGG__V1__MODE__MODE_SYNC && cfg->mode != GRADAGG__V1__MODE__MODE_ASYNC)
        return ga_status_fail(GA_E_INVAL, why, cap, "config.mode %d is neither 0 (sync) nor 1 (async)", (int)cfg->mode);
    if (cfg->reduce != GRADAGG__V1__REDUCE__REDUCE_SUM && cfg->reduce != GRADAGG__V1__REDUCE__REDUCE_MEAN)
        return ga_status_fail(GA_E_INVAL, why, cap, "config.reduce %d is neither 0 (sum) nor 1 (mean)", (int)cfg->reduce);
    const Gradagg__V1__Optimizer *o = cfg->optimizer ? cfg->optimizer : &no_optim;
    const Gradagg__V1__Straggler *st = cfg->straggler ? cfg->straggler : &no_straggler;
    ga_job_settings s = {.world = cfg->world_size, .async = cfg->mode == GRADAGG__V1__MODE__MODE_ASYNC};
    switch (o->kind) {
    case GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_NONE: s.store.optim = GA_OPTIM_NONE; break;
    case GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_SGD: s.store.optim = GA_OPTIM_SGD; break;
    case GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_ADAM: s.store.optim = GA_OPTIM_ADAM; break;
    case GRADAGG__V1__OPTIMIZER_KIND__OPTIMIZER_REDUCE: s.store.optim = GA_OPTIM_REDUCE; break;
    default:
        return ga_status_fail(GA_E_INVAL, why, cap,
                              "config.optimizer.kind %d is not 0 (none), 1 (sgd), 2 (adam) or 3 (reduce)",
                    (int)o->kind);
    }
    s.store.sgd = (ga_sgd_params){o->lr, o->momentum, o->weight_decay, o->nesterov != 0};
    s.store.adam = (ga_adam_params){o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, o->decoupled != 0};
    if (st->quorum > cfg->world_size)
        return ga_status_fail(GA_E_INVAL, why, cap, "config.straggler.quorum %u exceeds world_size %u", st->quorum,
                    cfg->world_size);
    s.deadline_ms = st->deadline_ms;
    s.quorum = st->quorum;
    if (s.deadline_ms == 0 && opt->default_deadline_ms > 0) {
        s.deadline_ms = opt->default_deadline_ms;
        if (s.quorum == 0) s.quorum = opt->default_quorum < cfg->world_size ? opt->default_quorum : cfg->world_size;
    }
    if (s.quorum == 0) s.quorum = cfg->world_size;
    if (cfg->min_world_size > cfg->world_size)
        return ga_status_fail(GA_E_INVAL, why, cap, "config.min_world_size %u exceeds world_size %u (the most ranks)",
                              cfg->min_world_size, cfg->world_size);
    if (cfg->min_world_size > 0 && s.async)
        return ga_status_fail(GA_E_INVAL, why, cap,
                              "config.min_world_size %u needs sync mode (async jobs apply every push alone)",
                              cfg->min_world_size);
    if (cfg->staleness > GA_JOB_MAX_STALENESS)
        return ga_status_fail(GA_E_INVAL, why, cap, "config.staleness %u outside [0, %u]", cfg->staleness,
                              GA_JOB_MAX_STALENESS);
    if (cfg->staleness > 0 && s.async)
        return ga_status_fail(GA_E_INVAL, why, cap, "config.staleness %u needs sync mode (async has no bound)",
                              cfg->staleness);
    s.min_world = cfg->min_world_size;
    s.staleness = cfg->staleness;
    GA_CHECK(
        ga_codec_from_wire(cfg->pull_codec, "config.pull_codec", &s.store.pull_codec, &s.store.pull_params, why, cap));
    if (cfg->pull_auto_bits != 0.0f) {
        if (s.store.pull_codec != GA_CODEC_2BIT)
            return ga_status_fail(GA_E_INVAL, why, cap, "config.pull_auto_bits %g needs the 2bit pull codec, not %s",
                                  (double)cfg->pull_auto_bits, ga_codec_name(s.store.pull_codec));
        if (!(cfg->pull_auto_bits > 0.0f && (double)cfg->pull_auto_bits <= GA_LOG2_3))
            return ga_status_fail(GA_E_INVAL, why, cap, "config.pull_auto_bits %g outside (0, log2(3) = 1.585]",
                                  (double)cfg->pull_auto_bits);
    }
    s.store.pull_auto_bits = cfg->pull_auto_bits;
    s.store.backend = opt->backend;
    s.store.threads = opt->threads;
    s.store.mean = cfg->reduce == GRADAGG__V1__REDUCE__REDUCE_MEAN;
    s.store.piece_elems = piece_elems(opt->pull_chunk_bytes);
    *out = s;
    return GA_OK;
}

/* ---- config comparison, generic over the message descriptors ---- */

static const void *field_at(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f)
{
    return m ? (const char *)m + f->offset : NULL;
}

/* Compares one field of a and b (either message may be NULL: all defaults). */
static bool field_same(const ProtobufCFieldDescriptor *f, const ProtobufCMessage *a, const ProtobufCMessage *b,
                       char *path, size_t cap, size_t used);
static bool field_same_value(const ProtobufCFieldDescriptor *f, const ProtobufCMessage *a, const ProtobufCMessage *b,
                             char *path, size_t cap, size_t used);

static const char *diff_message(const ProtobufCMessageDescriptor *d, const ProtobufCMessage *a,
                                const ProtobufCMessage *b, char *path, size_t cap, size_t used)
{
    for (unsigned i = 0; i < d->n_fields; i++)
        if (!field_same(&d->fields[i], a, b, path, cap, used)) return path;
    return NULL;
}

/* A scalar field's value as text (p NULL: its default, zero). */
static void value_text(const ProtobufCFieldDescriptor *f, const void *p, char *buf, size_t cap)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_STRING: {
        const char *v = p ? *(char *const *)p : NULL;
        snprintf(buf, cap, "'%.40s'", v ? v : "");
        return;
    }
    case PROTOBUF_C_TYPE_BOOL: snprintf(buf, cap, "%s", p && *(const protobuf_c_boolean *)p ? "true" : "false"); return;
    case PROTOBUF_C_TYPE_FLOAT: snprintf(buf, cap, "%.9g", p ? (double)*(const float *)p : 0.0); return;
    case PROTOBUF_C_TYPE_DOUBLE: snprintf(buf, cap, "%.17g", p ? *(const double *)p : 0.0); return;
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_ENUM: snprintf(buf, cap, "%d", p ? *(const int32_t *)p : 0); return;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32: snprintf(buf, cap, "%u", p ? *(const uint32_t *)p : 0u); return;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64: snprintf(buf, cap, "%lld", p ? (long long)*(const int64_t *)p : 0LL); return;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        snprintf(buf, cap, "%llu", p ? (unsigned long long)*(const uint64_t *)p : 0ULL);
        return;
    default: snprintf(buf, cap, "(%zu bytes)", p ? ((const ProtobufCBinaryData *)p)->len : (size_t)0); return;
    }
}

/* Compares one field, and on a difference appends both values to the path. */
static bool field_same(const ProtobufCFieldDescriptor *f, const ProtobufCMessage *a, const ProtobufCMessage *b,
                       char *path, size_t cap, size_t used)
{
    bool same = field_same_value(f, a, b, path, cap, used);
    if (!same && f->type != PROTOBUF_C_TYPE_MESSAGE) {
        char va[64], vb[64];
        value_text(f, field_at(a, f), va, sizeof va);
        value_text(f, field_at(b, f), vb, sizeof vb);
        size_t n = strlen(path);
        snprintf(path + n, cap > n ? cap - n : 0, " (%s, not %s)", va, vb);
    }
    return same;
}

static bool field_same_value(const ProtobufCFieldDescriptor *f, const ProtobufCMessage *a, const ProtobufCMessage *b,
                             char *path, size_t cap, size_t used)
{
    int w = snprintf(path + used, cap > used ? cap - used : 0, "%s%s", used ? "." : "", f->name);
    size_t here = used + (w > 0 ? (size_t)w : 0);
    if (here >= cap) here = cap - 1;
    const void *pa = field_at(a, f), *pb = field_at(b, f);
    if (f->label == PROTOBUF_C_LABEL_REPEATED) return true; /* JobConfig has none */
    switch (f->type) {
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *ma = pa ? *(ProtobufCMessage *const *)pa : NULL;
        const ProtobufCMessage *mb = pb ? *(ProtobufCMessage *const *)pb : NULL;
        return diff_message(f->descriptor, ma, mb, path, cap, here) == NULL;
    }
    case PROTOBUF_C_TYPE_STRING: {
        const char *sa = pa ? *(char *const *)pa : NULL, *sb = pb ? *(char *const *)pb : NULL;
        return strcmp(sa ? sa : "", sb ? sb : "") == 0;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        static const ProtobufCBinaryData none = {0, NULL};
        const ProtobufCBinaryData *ba = pa ? pa : &none, *bb = pb ? pb : &none;
        return ba->len == bb->len && (ba->len == 0 || memcmp(ba->data, bb->data, ba->len) == 0);
    }
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE: {
        uint64_t va = 0, vb = 0;
        if (pa) memcpy(&va, pa, 8);
        if (pb) memcpy(&vb, pb, 8);
        return va == vb;
    }
    default: { /* 32-bit scalars, enums, bools (protobuf_c_boolean is an int) and floats, by bits */
        uint32_t va = 0, vb = 0;
        if (pa) memcpy(&va, pa, 4);
        if (pb) memcpy(&vb, pb, 4);
        return va == vb;
    }
    }
}

const char *ga_job_config_diff(const Gradagg__V1__JobConfig *a, const Gradagg__V1__JobConfig *b, char *path, size_t cap)
{
    if (cap == 0) return NULL;
    path[0] = 0;
    return diff_message(&gradagg__v1__job_config__descriptor, a ? &a->base : NULL, b ? &b->base : NULL, path, cap, 0);
}

/* The request's config, owned: packed and unpacked with the accounted allocator. */
static Gradagg__V1__JobConfig *copy_config(const Gradagg__V1__JobConfig *cfg)
{
    size_t n = protobuf_c_message_get_packed_size(&cfg->base);
    uint8_t *buf = ga_malloc(n ? n : 1);
    if (!buf) return NULL;
    protobuf_c_message_pack(&cfg->base, buf);
    Gradagg__V1__JobConfig *copy = gradagg__v1__job_config__unpack(&ga_wire_allocator, n, buf);
    ga_free(buf);
    return copy;
}

/* ---- create / destroy ---- */

static void optim_text(const ga_store_config *c, char *buf, size_t cap)
{
    if (c->optim == GA_OPTIM_SGD)
        snprintf(buf, cap,
                 "sgd lr %g momentum %g weight_decay %g nesterov %d (need lr >= 0, momentum in [0, 1), "
                 "weight_decay >= 0, all finite; nesterov needs momentum > 0)",
                 (double)c->sgd.lr, (double)c->sgd.momentum, (double)c->sgd.weight_decay, c->sgd.nesterov);
    else if (c->optim == GA_OPTIM_ADAM)
        snprintf(buf, cap,
                 "adam lr %g beta1 %g beta2 %g eps %g weight_decay %g (need lr >= 0, betas in [0, 1), eps > 0, "
                 "weight_decay >= 0, all finite)",
                 (double)c->adam.lr, (double)c->adam.beta1, (double)c->adam.beta2, (double)c->adam.eps,
                 (double)c->adam.weight_decay);
    else
        snprintf(buf, cap, c->optim == GA_OPTIM_REDUCE ? "reduce" : "none");
}

static void job_free_fields(ga_job *job)
{
    for (size_t i = 0; i < job->ntensors; i++) {
        ga_free(job->tensors[i].name);
        ga_free(job->tensors[i].shape);
        ga_published_clear(&job->tensors[i].pub);
    }
    ga_free(job->tensors);
    ga_free(job->index);
    ga_step_free(&job->step);
    ga_store_destroy(job->store);
    while (job->lent) { /* after the store, which may still hold their payloads */
        ga_push *p = job->lent;
        job->lent = p->next;
        ga_push_free(p);
    }
    while (job->ahead) {
        ga_push *p = job->ahead;
        job->ahead = p->next;
        ga_push_free(p);
    }
    for (uint32_t i = 0; job->records && i < GA_JOB_STEP_RECORDS; i++) ga_free(job->records[i].ranks);
    ga_free(job->records);
    ga_free(job->members);
    ga_free(job->failed_incarnations);
    if (job->config) protobuf_c_message_free_unpacked(&job->config->base, &ga_wire_allocator);
    ga_free(job->name);
    ga_journal_close(&job->journal);
    ga_free(job->dir);
}

ga_status ga_job_create(struct ga_core *core, uv_loop_t *loop, const char *name, const Gradagg__V1__JobConfig *cfg,
                        const ga_job_settings *set, ga_job **out, char *why, size_t cap)
{
    ga_status rc = GA_E_NOMEM;
    ga_job *job = ga_calloc(1, sizeof *job);
    if (!job) return ga_status_fail(GA_E_NOMEM, why, cap, "out of memory creating job '%s'", name);
    job->core = core;
    job->journal = GA_JOURNAL_CLOSED;
    job->world = set->world;
    job->async = set->async;
    job->deadline_ms = set->deadline_ms;
    job->quorum = set->quorum;
    job->min_world = set->min_world;
    job->staleness = set->staleness;
    job->store_cfg = set->store;
    ga_histogram_init(&job->step_seconds, ga_metrics_step_bounds, ga_metrics_step_nbounds);
    ga_histogram_init(&job->staleness_hist, ga_metrics_staleness_bounds, ga_metrics_staleness_nbounds);
    ga_histogram_init(&job->relay_upstream_seconds, ga_metrics_step_bounds, ga_metrics_step_nbounds);
    if (!(job->name = ga_strdup(name)) || !(job->config = copy_config(cfg)) ||
        !(job->records = ga_calloc(GA_JOB_STEP_RECORDS, sizeof *job->records)) ||
        !(job->members = ga_calloc(set->world, sizeof *job->members)) ||
        !(job->timer = ga_calloc(1, sizeof *job->timer)))
        goto fail;
    GA_CHECK_GOTO(ga_step_init(&job->step, set->world), rc, fail);
    job->step.hold_below = set->min_world;
    rc = ga_store_create(&job->store_cfg, &job->store);
    if (rc != GA_OK) {
        char text[256];
        optim_text(&job->store_cfg, text, sizeof text);
        if (rc == GA_E_OPTIM)
            ga_status_fail(rc, why, cap, "config.optimizer: %s", text);
        else
            ga_status_fail(rc, why, cap, "job '%s': parameter store: %s", name, ga_strerror(rc));
        goto fail_quiet;
    }
    job->store_bytes = ga_store_bytes(job->store);
    uv_timer_init(loop, job->timer);
    job->timer->data = job;
    ga_taskq_init(&job->tasks, loop, NULL, NULL);
    *out = job;
    return GA_OK;
fail:
    ga_status_fail(rc, why, cap, "job '%s': %s", name, ga_strerror(rc));
fail_quiet:
    ga_free(job->timer);
    job_free_fields(job);
    ga_free(job);
    return rc;
}

static void timer_closed(uv_handle_t *h) { ga_free(h); }

void ga_job_destroy(ga_job *job)
{
    if (!job) return;
    for (size_t i = 0; i < job->nsending; i++) ga_call_release(job->sending[i].call);
    ga_free(job->sending);
    job_free_fields(job);
    uv_close((uv_handle_t *)job->timer, timer_closed);
    ga_free(job);
}

/* ---- tensors ---- */

uint64_t ga_job_name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

long ga_job_tensor_find(const ga_job *job, const char *name)
{
    if (!job->index_cap) return -1;
    size_t mask = job->index_cap - 1;
    for (size_t i = ga_job_name_hash(name) & mask;; i = (i + 1) & mask) {
        uint32_t v = job->index[i];
        if (!v) return -1;
        if (strcmp(job->tensors[v - 1].name, name) == 0) return (long)(v - 1);
    }
}

static void index_put(uint32_t *index, size_t cap, const char *name, uint32_t value)
{
    size_t mask = cap - 1;
    size_t i = ga_job_name_hash(name) & mask;
    while (index[i]) i = (i + 1) & mask;
    index[i] = value;
}

/* Rebuilds the index for `count` tensors at a capacity keeping it at most half full. */
static ga_status reindex(ga_job *job, size_t count)
{
    size_t cap = 16;
    while (cap < 2 * count) cap *= 2;
    uint32_t *index = ga_calloc(cap, sizeof *index);
    if (!index) return GA_E_NOMEM;
    for (size_t t = 0; t < count; t++) index_put(index, cap, job->tensors[t].name, (uint32_t)t + 1);
    ga_free(job->index);
    job->index = index;
    job->index_cap = cap;
    return GA_OK;
}

long ga_job_tensor_add(ga_job *job, const char *name, const uint64_t *shape, size_t ndim, uint64_t elements)
{
    if (job->ntensors == job->tensors_cap) {
        size_t ncap = job->tensors_cap ? 2 * job->tensors_cap : 8;
        ga_tensor *t = ga_calloc(ncap, sizeof *t);
        if (!t) return -1;
        if (job->ntensors) memcpy(t, job->tensors, job->ntensors * sizeof *t);
        ga_free(job->tensors);
        job->tensors = t;
        job->tensors_cap = ncap;
    }
    ga_tensor *t = &job->tensors[job->ntensors];
    *t = (ga_tensor){.ndim = ndim, .elements = elements};
    t->name = ga_strdup(name);
    t->shape = ga_malloc(ndim * sizeof *shape);
    if (!t->name || !t->shape) goto fail;
    memcpy(t->shape, shape, ndim * sizeof *shape);
    if (2 * (job->ntensors + 1) > job->index_cap) {
        job->ntensors++; /* reindex covers the new one */
        if (reindex(job, job->ntensors) != GA_OK) {
            job->ntensors--;
            goto fail;
        }
    } else {
        index_put(job->index, job->index_cap, name, (uint32_t)job->ntensors + 1);
        job->ntensors++;
    }
    return (long)job->ntensors - 1;
fail:
    ga_free(t->name);
    ga_free(t->shape);
    *t = (ga_tensor){0};
    return -1;
}

void ga_job_tensor_truncate(ga_job *job, size_t from)
{
    for (size_t i = from; i < job->ntensors; i++) {
        ga_free(job->tensors[i].name);
        ga_free(job->tensors[i].shape);
        ga_published_clear(&job->tensors[i].pub);
    }
    job->ntensors = from;
    /* Rebuilding at the same capacity cannot fail for lack of room; only allocation can. */
    memset(job->index, 0, job->index_cap * sizeof *job->index);
    for (size_t t = 0; t < from; t++) index_put(job->index, job->index_cap, job->tensors[t].name, (uint32_t)t + 1);
}

/* ---- members ---- */

ga_status ga_job_member_check(const ga_job *job, uint32_t rank, uint64_t incarnation, char *why, size_t cap)
{
    if (rank >= job->world)
        return ga_status_fail(GA_E_RANK, why, cap, "rank %u outside [0, %u) of job '%s'", rank, job->world, job->name);
    const ga_member *m = &job->members[rank];
    if (job->failed_incarnations && job->failed_incarnations[rank] == incarnation && incarnation != 0)
        return ga_status_fail(GA_E_RANK_FAILED, why, cap, "%s", job->rank_failure);
    if (m->incarnation == incarnation && incarnation != 0) {
        if (m->left)
            return ga_status_fail(GA_E_NOT_MEMBER, why, cap, "rank %u (incarnation %" PRIu64 ") left job '%s'", rank, incarnation,
                        job->name);
        return GA_OK;
    }
    for (unsigned i = 0; i < GA_JOB_REPLACED; i++)
        if (m->replaced[i] == incarnation && incarnation != 0)
            return ga_status_fail(GA_E_STALE, why, cap,
                        "rank %u incarnation %" PRIu64 " of job '%s' was replaced by incarnation %" PRIu64, rank,
                        incarnation, job->name, m->incarnation);
    if (m->incarnation == 0) return ga_status_fail(GA_E_NOT_MEMBER, why, cap, "rank %u has not joined job '%s'", rank, job->name);
    return ga_status_fail(GA_E_NOT_MEMBER, why, cap,
                "rank %u of job '%s' is held by incarnation %" PRIu64 ", not %" PRIu64 " (join first)", rank, job->name,
                m->incarnation, incarnation);
}

const char *ga_job_failure_cause(const char *text)
{
    const char *cause = text;
    for (const char *at = strstr(text, "job '"); at; at = strstr(at + 1, "job '")) {
        const char *end = strstr(at, "' failed: ");
        if (end) cause = end + strlen("' failed: ");
    }
    return cause;
}

uint64_t ga_job_bytes_per_element(const ga_job *job)
{
    uint64_t floats = 3; /* parameters, sum, published full copy */
    if (job->store_cfg.optim == GA_OPTIM_SGD && job->store_cfg.sgd.momentum != 0.0f) floats += 1;
    if (job->store_cfg.optim == GA_OPTIM_ADAM) floats += 2;
    if (job->store_cfg.pull_codec != GA_CODEC_NONE) floats += 2; /* published copy, delta */
    if (job->uplink) floats += 4; /* a relay's: the upstream copy it serves, and its upstream member's
                                   * parameters, residual and encode scratch (uplink.c, the SDK) */
    return 4 * floats;
}
