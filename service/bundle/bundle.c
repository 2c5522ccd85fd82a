/* Push and init bundles: the checks a chunk can pass or fail without job state, on the
 * completion-queue thread that received it (bundle.h). */
#include "bundle.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "ga_alloc.h"
#include "ga_wire.h"

#define MAX_TENSOR_NAME 1024u
#define MAX_DIMS 32u
/* Allocator overhead per block a chunk holds (protobuf-c allocates the message and each string
 * or array apart). */
#define ALLOC_SLACK 16u

/* What a chunk holds in memory besides its payload: the unpacked message, its strings and
 * arrays, and its part entry. The stream limit counts it with the payload, so a stream of many
 * tiny chunks holds no more than the limit says. */
static size_t push_header_bytes(const Gradagg__V1__PushChunk *c)
{
    size_t n = sizeof *c + sizeof(ga_push_chunk) + 4 * ALLOC_SLACK;
    n += (c->job ? strlen(c->job) + 1 : 0) + (c->tensor ? strlen(c->tensor) + 1 : 0);
    return n + (c->codec ? sizeof *c->codec : 0);
}

static size_t init_header_bytes(const Gradagg__V1__InitChunk *c)
{
    size_t n = sizeof *c + sizeof(ga_init_part) + 5 * ALLOC_SLACK;
    n += (c->job ? strlen(c->job) + 1 : 0) + (c->tensor ? strlen(c->tensor) + 1 : 0);
    return n + c->n_shape * sizeof *c->shape;
}

/* The limit check of both bundles: held + this chunk's bytes within max_bytes. */
static bool within(size_t held, size_t add, size_t max_bytes) { return add <= max_bytes && held <= max_bytes - add; }


/* Grows parts (elem bytes each) to hold one more. */
static ga_status reserve(void **parts, size_t *cap, size_t count, size_t elem)
{
    if (count < *cap) return GA_OK;
    size_t ncap = *cap ? 2 * *cap : 8;
    void *n = ga_malloc(ncap * elem);
    if (!n) return GA_E_NOMEM;
    if (count) memcpy(n, *parts, count * elem);
    ga_free(*parts);
    *parts = n;
    *cap = ncap;
    return GA_OK;
}

ga_status ga_codec_from_wire(const Gradagg__V1__Codec *w, const char *what, ga_codec_id *id, ga_codec_params *p,
                             char *why, size_t cap)
{
    static const Gradagg__V1__Codec none = GRADAGG__V1__CODEC__INIT;
    if (!w) w = &none; /* proto3: an absent message reads as its defaults, codec none */
    if ((unsigned)w->id >= GA_CODEC_COUNT)
        return ga_status_fail(GA_E_CODEC, why, cap, "%s: codec id %d is not one of 0..%d", what, (int)w->id, GA_CODEC_COUNT - 1);
    if (w->topk_values > GA_TOPK_VALUES_FP16)
        return ga_status_fail(GA_E_INVAL, why, cap, "%s: topk_values %u is neither 0 (fp32) nor 1 (fp16)", what, w->topk_values);
    if (w->topk_indices > GA_TOPK_INDICES_VARINT)
        return ga_status_fail(GA_E_INVAL, why, cap, "%s: topk_indices %u is neither 0 (int32) nor 1 (varint)", what,
                    w->topk_indices);
    ga_codec_params q = ga_codec_params_from_wire(w);
    ga_codec_id c = (ga_codec_id)w->id;
    ga_status st = ga_codec_params_validate(c, &q);
    if (st == GA_E_THRESHOLD)
        return ga_status_fail(st, why, cap, "%s: codec %s threshold %g must be finite%s", what, ga_codec_name(c),
                    (double)q.threshold, c == GA_CODEC_2BIT ? " and > 0" : "");
    if (st == GA_E_RATIO)
        return ga_status_fail(st, why, cap, "%s: codec topk ratio %g and sample_fraction %g must lie in (0, 1]", what,
                    (double)q.ratio, (double)q.sample_fraction);
    if (st == GA_E_INVAL)
        return ga_status_fail(st, why, cap, "%s: codec topk adapt_rounds %u exceeds %u", what, q.adapt_rounds,
                    GA_TOPK_MAX_ROUNDS);
    if (st != GA_OK) return ga_status_fail(st, why, cap, "%s: codec %s parameters: %s", what, ga_codec_name(c), ga_strerror(st));
    *id = c;
    *p = q;
    return GA_OK;
}

/* ---- what a bundle holds (both kinds) ---- */

/* Counts a chunk of `payload` bytes and `header` more into b, taking them from its budget (the
 * first chunk's) when it has one: GA_E_BUSY when the server's memory is full, nothing counted. */
static ga_status bytes_take(ga_bundle_bytes *b, size_t payload, size_t header, char *why, size_t cap)
{
    size_t add = payload + header;
    if (b->budget) GA_CHECK(ga_budget_take(b->budget, add, "this chunk", why, cap));
    b->payload_bytes += payload;
    b->held_bytes += add;
    if (b->budget) b->budgeted += add;
    return GA_OK;
}

/* Hands b's budget reservation to the caller: returns it and leaves b with none. */
static size_t bytes_unbudget(ga_bundle_bytes *b)
{
    size_t n = b->budgeted;
    b->budgeted = 0;
    return n;
}

/* Gives back what b still has taken from its budget. */
static void bytes_release(ga_bundle_bytes *b)
{
    if (b->budget && b->budgeted) ga_budget_give(b->budget, b->budgeted);
    b->budgeted = 0;
}

/* ---- push ---- */

static void free_push_chunk(Gradagg__V1__PushChunk *c)
{
    if (c) protobuf_c_message_free_unpacked(&c->base, &ga_wire_allocator);
}

/* "lr 0.05" or "no lr" into buf[32]. */
static const char *lr_text(bool has, float lr, char *buf)
{
    if (!has) return "no lr";
    snprintf(buf, 32, "lr %.9g", (double)lr);
    return buf;
}

static ga_status check_push_chunk(const ga_push *b, const Gradagg__V1__PushChunk *c, size_t max_bytes,
                                  ga_push_chunk *part, char *why, size_t cap)
{
    size_t k = b ? b->count : 0;
    if (!c->job || !c->job[0]) return ga_status_fail(GA_E_INVAL, why, cap, "push chunk %zu: job name is empty", k);
    if (strlen(c->job) > GA_WIRE_JOB_MAX)
        return ga_status_fail(GA_E_INVAL, why, cap, "push chunk %zu: job name longer than %u bytes", k, GA_WIRE_JOB_MAX);
    if (c->incarnation == 0) return ga_status_fail(GA_E_INVAL, why, cap, "push chunk %zu: incarnation is 0 (must be nonzero)", k);
    if (c->has_lr && !(isfinite(c->lr) && c->lr >= 0.0f))
        return ga_status_fail(GA_E_OPTIM, why, cap, "push chunk %zu: lr %g (need a finite lr >= 0)", k, (double)c->lr);
    if (c->weight > GA_PUSH_MAX_WEIGHT)
        return ga_status_fail(GA_E_INVAL, why, cap, "push chunk %zu: weight %u over %u", k, c->weight,
                              GA_PUSH_MAX_WEIGHT);
    if (b) {
        if (strcmp(b->job, c->job) != 0)
            return ga_status_fail(GA_E_STREAM_MIXED, why, cap, "push chunk %zu names job '%s', the stream began with job '%s'", k,
                        c->job, b->job);
        if (c->rank != b->rank)
            return ga_status_fail(GA_E_STREAM_MIXED, why, cap, "push chunk %zu has rank %u, the stream began with rank %u", k,
                        c->rank, b->rank);
        if (c->incarnation != b->incarnation)
            return ga_status_fail(GA_E_STREAM_MIXED, why, cap,
                        "push chunk %zu has incarnation %llu, the stream began with incarnation %llu", k,
                        (unsigned long long)c->incarnation, (unsigned long long)b->incarnation);
        if (c->step != b->step)
            return ga_status_fail(GA_E_STREAM_MIXED, why, cap, "push chunk %zu has step %llu, the stream began with step %llu", k,
                        (unsigned long long)c->step, (unsigned long long)b->step);
        if ((c->weight ? c->weight : 1) != b->weight)
            return ga_status_fail(GA_E_STREAM_MIXED, why, cap, "push chunk %zu has weight %u, the stream began with %u",
                                  k, c->weight ? c->weight : 1, b->weight);
        if ((bool)c->has_lr != b->has_lr || (c->has_lr && memcmp(&c->lr, &b->lr, sizeof c->lr) != 0))
            return ga_status_fail(GA_E_STREAM_MIXED, why, cap, "push chunk %zu has %s, the stream began with %s", k,
                                  lr_text(c->has_lr, c->lr, (char[32]){0}), lr_text(b->has_lr, b->lr, (char[32]){0}));
    }
    if (!c->tensor || !c->tensor[0]) return ga_status_fail(GA_E_INVAL, why, cap, "push chunk %zu: tensor name is empty", k);
    /* No tensor has a longer name (init refuses it), and the stream limit counts payloads only:
     * without this one chunk could hold a message-sized name in the bundle until the stream ends. */
    if (strlen(c->tensor) > MAX_TENSOR_NAME)
        return ga_status_fail(GA_E_INVAL, why, cap, "push chunk %zu: tensor name longer than %u bytes", k, MAX_TENSOR_NAME);
    if (c->count == 0) return ga_status_fail(GA_E_INVAL, why, cap, "push chunk %zu (tensor '%s'): count is 0", k, c->tensor);
    if (c->offset > UINT64_MAX - c->count || c->count > SIZE_MAX)
        return ga_status_fail(GA_E_INVAL, why, cap, "push chunk %zu (tensor '%s'): offset %llu + count %llu overflows", k,
                    c->tensor, (unsigned long long)c->offset, (unsigned long long)c->count);
    char what[96];
    snprintf(what, sizeof what, "push chunk %zu (tensor '%.40s')", k, c->tensor);
    GA_CHECK(ga_codec_from_wire(c->codec, what, &part->codec, &part->params, why, cap));
    size_t len = c->payload.len, n = (size_t)c->count;
    ga_status st = ga_codec_check_payload(part->codec, &part->params, c->payload.data, len, n);
    if (st == GA_E_LENGTH) {
        size_t need = 0;
        ga_codec_encoded_size(part->codec, &part->params, n, &need);
        return ga_status_fail(st, why, cap, "%s: payload of %zu bytes, codec %s takes %s%zu bytes for %zu elements", what, len,
                    ga_codec_name(part->codec), ga_codec_fixed_size(part->codec) ? "" : "at most ", need, n);
    }
    if (st == GA_E_INVAL)
        return ga_status_fail(st, why, cap, "%s: payload at %p is not 4-byte aligned", what, (void *)c->payload.data);
    if (st != GA_OK)
        return ga_status_fail(st, why, cap, "%s: codec %s payload of %zu elements: %s", what, ga_codec_name(part->codec), n,
                    ga_strerror(st));
    size_t held = b ? b->bytes.held_bytes : 0, add = len + push_header_bytes(c);
    if (!within(held, add, max_bytes))
        return ga_status_fail(GA_E_LIMIT, why, cap,
                    "%s: the stream would hold %zu bytes (payloads and chunk headers), over the limit of %zu", what,
                    held + add, max_bytes);
    return GA_OK;
}

ga_status ga_push_add(ga_push **push, Gradagg__V1__PushChunk *chunk, size_t max_bytes, ga_budget *budget, char *why,
                      size_t why_cap)
{
    ga_status rc;
    ga_push *b = *push, *fresh = NULL;
    ga_push_chunk part = {0};
    if (!chunk) {
        rc = ga_status_fail(GA_E_INVAL, why, why_cap, "no chunk");
        goto fail;
    }
    GA_CHECK_GOTO(check_push_chunk(b, chunk, max_bytes, &part, why, why_cap), rc, fail);
    if (!b) {
        fresh = ga_calloc(1, sizeof *fresh);
        if (!fresh || !(fresh->job = ga_strdup(chunk->job))) {
            rc = ga_status_fail(GA_E_NOMEM, why, why_cap, "out of memory");
            goto fail;
        }
        fresh->rank = chunk->rank;
        fresh->incarnation = chunk->incarnation;
        fresh->step = chunk->step;
        fresh->has_lr = chunk->has_lr;
        fresh->lr = chunk->lr;
        fresh->weight = chunk->weight ? chunk->weight : 1;
        fresh->bytes.budget = budget;
        b = fresh;
    }
    if (reserve((void **)&b->parts, &b->cap, b->count, sizeof *b->parts) != GA_OK) {
        rc = ga_status_fail(GA_E_NOMEM, why, why_cap, "out of memory");
        goto fail;
    }
    GA_CHECK_GOTO(bytes_take(&b->bytes, chunk->payload.len, push_header_bytes(chunk), why, why_cap), rc, fail);
    part.chunk = chunk;
    b->parts[b->count++] = part;
    *push = b;
    return GA_OK;
fail:
    ga_push_free(fresh);
    free_push_chunk(chunk);
    return rc;
}

size_t ga_push_unbudget(ga_push *push)
{
    return push ? bytes_unbudget(&push->bytes) : 0;
}

void ga_push_free(ga_push *push)
{
    if (!push) return;
    bytes_release(&push->bytes);
    for (size_t i = 0; i < push->count; i++) free_push_chunk(push->parts[i].chunk);
    ga_free(push->parts);
    ga_free(push->job);
    ga_free(push);
}

/* ---- init ---- */

static void free_init_chunk(Gradagg__V1__InitChunk *c)
{
    if (c) protobuf_c_message_free_unpacked(&c->base, &ga_wire_allocator);
}

static bool same_shape(const Gradagg__V1__InitChunk *a, const Gradagg__V1__InitChunk *b)
{
    return a->n_shape == b->n_shape && memcmp(a->shape, b->shape, a->n_shape * sizeof *a->shape) == 0;
}

/* "[3, 4]" into buf. */
const char *ga_shape_text(const uint64_t *shape, size_t n, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = 0;
    used += (size_t)snprintf(buf, cap, "[");
    for (size_t i = 0; i < n && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, i ? ", %llu" : "%llu", (unsigned long long)shape[i]);
    if (used < cap) snprintf(buf + used, cap - used, "]");
    return buf;
}

static ga_status check_init_chunk(const ga_init *b, const Gradagg__V1__InitChunk *c, size_t max_bytes, char *why,
                                  size_t cap)
{
    size_t k = b ? b->count : 0;
    char text[128];
    if (!c->job || !c->job[0]) return ga_status_fail(GA_E_INVAL, why, cap, "init chunk %zu: job name is empty", k);
    if (strlen(c->job) > GA_WIRE_JOB_MAX)
        return ga_status_fail(GA_E_INVAL, why, cap, "init chunk %zu: job name longer than %u bytes", k, GA_WIRE_JOB_MAX);
    if (c->incarnation == 0) return ga_status_fail(GA_E_INVAL, why, cap, "init chunk %zu: incarnation is 0 (must be nonzero)", k);
    if (b) {
        if (strcmp(b->job, c->job) != 0)
            return ga_status_fail(GA_E_STREAM_MIXED, why, cap, "init chunk %zu names job '%s', the stream began with job '%s'", k,
                        c->job, b->job);
        if (c->rank != b->rank)
            return ga_status_fail(GA_E_STREAM_MIXED, why, cap, "init chunk %zu has rank %u, the stream began with rank %u", k,
                        c->rank, b->rank);
        if (c->incarnation != b->incarnation)
            return ga_status_fail(GA_E_STREAM_MIXED, why, cap,
                        "init chunk %zu has incarnation %llu, the stream began with incarnation %llu", k,
                        (unsigned long long)c->incarnation, (unsigned long long)b->incarnation);
    }
    if (!c->tensor || !c->tensor[0]) return ga_status_fail(GA_E_INVAL, why, cap, "init chunk %zu: tensor name is empty", k);
    if (strlen(c->tensor) > MAX_TENSOR_NAME)
        return ga_status_fail(GA_E_INVAL, why, cap, "init chunk %zu: tensor name longer than %u bytes", k, MAX_TENSOR_NAME);
    if (c->n_shape == 0 || c->n_shape > MAX_DIMS)
        return ga_status_fail(GA_E_INVAL, why, cap, "init chunk %zu (tensor '%s'): shape has %zu dimensions, not 1..%u", k,
                    c->tensor, c->n_shape, MAX_DIMS);
    uint64_t elems = 1;
    for (size_t d = 0; d < c->n_shape; d++) {
        if (c->shape[d] == 0)
            return ga_status_fail(GA_E_INVAL, why, cap, "init chunk %zu (tensor '%s'): shape %s has a zero dimension", k,
                        c->tensor, ga_shape_text(c->shape, c->n_shape, text, sizeof text));
        if (elems > (SIZE_MAX / 8) / c->shape[d])
            return ga_status_fail(GA_E_INVAL, why, cap, "init chunk %zu (tensor '%s'): shape %s has too many elements", k,
                        c->tensor, ga_shape_text(c->shape, c->n_shape, text, sizeof text));
        elems *= c->shape[d];
    }
    if (b) {
        /* Searching back to the latest chunk of this tensor is enough: it matched all before it. */
        for (size_t i = b->count; i-- > 0;) {
            const Gradagg__V1__InitChunk *e = b->parts[i].chunk;
            if (strcmp(e->tensor, c->tensor) != 0) continue;
            if (!same_shape(e, c)) {
                char other[128];
                return ga_status_fail(GA_E_SHAPE, why, cap, "init chunk %zu gives tensor '%s' shape %s, chunk %zu gave %s", k,
                            c->tensor, ga_shape_text(c->shape, c->n_shape, text, sizeof text), i,
                            ga_shape_text(e->shape, e->n_shape, other, sizeof other));
            }
            break;
        }
    }
    if (c->offset > elems || c->count > elems - c->offset)
        return ga_status_fail(GA_E_COVERAGE, why, cap,
                    "init chunk %zu (tensor '%s'): elements [%llu, %llu + %llu) outside its %llu elements", k,
                    c->tensor, (unsigned long long)c->offset, (unsigned long long)c->offset,
                    (unsigned long long)c->count, (unsigned long long)elems);
    size_t len = c->values.len;
    if (b && c->await_values != b->await_values)
        return ga_status_fail(GA_E_INVAL, why, cap, "init chunk %zu (tensor '%s'): await_values %s, chunk 0 had %s", k,
                              c->tensor, c->await_values ? "true" : "false", b->await_values ? "true" : "false");
    if (c->await_values && len > 0)
        return ga_status_fail(GA_E_INVAL, why, cap,
                              "init chunk %zu (tensor '%s'): await_values with %zu bytes of values (an awaiting init "
                              "carries none)",
                              k, c->tensor, len);
    if (len > 0) {
        if (c->count == 0 || len != 4 * c->count)
            return ga_status_fail(GA_E_LENGTH, why, cap,
                        "init chunk %zu (tensor '%s'): %zu bytes of values for count %llu (need %llu)", k, c->tensor,
                        len, (unsigned long long)c->count, (unsigned long long)(4 * c->count));
        ga_codec_params none = ga_codec_params_default(GA_CODEC_NONE);
        ga_status st = ga_codec_check_payload(GA_CODEC_NONE, &none, c->values.data, len, (size_t)c->count);
        if (st == GA_E_NONFINITE)
            return ga_status_fail(st, why, cap, "init chunk %zu (tensor '%s'): values hold NaN or Inf", k, c->tensor);
        if (st != GA_OK)
            return ga_status_fail(st, why, cap, "init chunk %zu (tensor '%s'): values: %s", k, c->tensor, ga_strerror(st));
    }
    size_t held = b ? b->bytes.held_bytes : 0, add = len + init_header_bytes(c);
    if (!within(held, add, max_bytes))
        return ga_status_fail(GA_E_LIMIT, why, cap,
                    "init chunk %zu: the stream would hold %zu bytes (values and chunk headers), over the limit of %zu",
                    k, held + add, max_bytes);
    return GA_OK;
}

ga_status ga_init_add(ga_init **init, Gradagg__V1__InitChunk *chunk, size_t max_bytes, ga_budget *budget, char *why,
                      size_t why_cap)
{
    ga_status rc;
    ga_init *b = *init, *fresh = NULL;
    if (!chunk) {
        rc = ga_status_fail(GA_E_INVAL, why, why_cap, "no chunk");
        goto fail;
    }
    GA_CHECK_GOTO(check_init_chunk(b, chunk, max_bytes, why, why_cap), rc, fail);
    if (!b) {
        fresh = ga_calloc(1, sizeof *fresh);
        if (!fresh || !(fresh->job = ga_strdup(chunk->job))) {
            rc = ga_status_fail(GA_E_NOMEM, why, why_cap, "out of memory");
            goto fail;
        }
        fresh->rank = chunk->rank;
        fresh->incarnation = chunk->incarnation;
        fresh->await_values = chunk->await_values;
        fresh->bytes.budget = budget;
        b = fresh;
    }
    if (reserve((void **)&b->parts, &b->cap, b->count, sizeof *b->parts) != GA_OK) {
        rc = ga_status_fail(GA_E_NOMEM, why, why_cap, "out of memory");
        goto fail;
    }
    GA_CHECK_GOTO(bytes_take(&b->bytes, chunk->values.len, init_header_bytes(chunk), why, why_cap), rc, fail);
    b->parts[b->count++].chunk = chunk;
    *init = b;
    return GA_OK;
fail:
    ga_init_free(fresh);
    free_init_chunk(chunk);
    return rc;
}

size_t ga_init_unbudget(ga_init *init)
{
    return init ? bytes_unbudget(&init->bytes) : 0;
}

void ga_init_free(ga_init *init)
{
    if (!init) return;
    bytes_release(&init->bytes);
    for (size_t i = 0; i < init->count; i++) free_init_chunk(init->parts[i].chunk);
    ga_free(init->parts);
    ga_free(init->job);
    ga_free(init);
}
