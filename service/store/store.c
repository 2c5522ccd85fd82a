/* The store's life cycle, its tensors and the step's sums (store.h): configuration checks,
 * buffers on the host or the device, version-0 publications, and accumulating pushed payloads.
 * Applying a step and publishing it is store_publish.c. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ga_alloc.h"
#include "ga_auto.h"
#include "ga_codec.h"
#include "ga_optim.h"
#include "store_internal.h"

/* Largest block of device zeros kept for clearing (4 MiB); larger clears take several copies. */
#define ZERO_MAX_ELEMS ((size_t)1 << 20)
/* Smallest incoming-payload buffer, so a run of tiny chunks does not regrow it every call. */
#define STAGE_MIN_BYTES ((size_t)64 << 10)
/* CUDA: the pieces a payload is staged in (8 MiB; the pinned buffer holds two). */
#define STAGE_PIECE_BYTES ((size_t)8 << 20)

/* ---- memory ---- */

ga_status ga_store_mem_get(ga_store *s, ga_store_mem where, size_t bytes, void **out)
{
    void *p = NULL;
    if (where == GA_STORE_MEM_HOST) {
        p = ga_malloc(bytes);
        if (!p) return GA_E_NOMEM;
    } else if (where == GA_STORE_MEM_PINNED) {
        GA_CHECK(ga_pinned_malloc(bytes, &p));
    } else {
        GA_CHECK(ga_device_malloc(bytes, &p));
    }
    s->bytes += bytes;
    *out = p;
    return GA_OK;
}

void ga_store_mem_put(ga_store *s, ga_store_mem where, void *p, size_t bytes)
{
    if (!p) return;
    ga_store_mem_free(where, p);
    s->bytes -= bytes;
}

void ga_store_mem_free(ga_store_mem where, void *p)
{
    if (where == GA_STORE_MEM_HOST) ga_free(p);
    else if (where == GA_STORE_MEM_PINNED) ga_pinned_free(p);
    else ga_device_free(p);
}

ga_status ga_store_zero(ga_store *s, float *dst, size_t n)
{
    if (s->compute == GA_STORE_MEM_HOST) {
        if (n) memset(dst, 0, n * sizeof *dst);
        return GA_OK;
    }
    /* Copies from the zero block: add_tensor sized it for the largest tensor (up to the cap)
     * before its first clear. Without it the copies would never advance. */
    if (n && s->zero_elems == 0) return GA_E_INVAL;
    for (size_t done = 0; done < n;) {
        size_t len = n - done < s->zero_elems ? n - done : s->zero_elems;
        GA_CHECK(ga_device_copy(&s->ex, dst + done, s->zeros, len * sizeof *dst));
        done += len;
    }
    return GA_OK;
}

size_t ga_store_npieces(const ga_store *s, size_t n)
{
    return (n + s->cfg.piece_elems - 1) / s->cfg.piece_elems;
}

/* A compute buffer of n floats, or *out = NULL when `wanted` is false. */
static ga_status floats_get(ga_store *s, bool wanted, size_t n, float **out)
{
    void *p = NULL;
    if (wanted) GA_CHECK(ga_store_mem_get(s, s->compute, n * sizeof(float), &p));
    *out = p;
    return GA_OK;
}

/* As floats_get, all +0. On the host it comes from ga_calloc, so its pages take no memory until
 * written: a fresh optimizer state costs nothing before the first step (the init's values are
 * gone by then). On the device the clear is queued on the store's stream. */
static ga_status zeroed_floats_get(ga_store *s, bool wanted, size_t n, float **out)
{
    *out = NULL;
    if (!wanted) return GA_OK;
    if (s->compute == GA_STORE_MEM_HOST) {
        float *p = ga_calloc(n, sizeof(float));
        if (!p) return GA_E_NOMEM;
        s->bytes += n * sizeof(float);
        *out = p;
        return GA_OK;
    }
    float *p;
    GA_CHECK(floats_get(s, true, n, &p));
    ga_status rc = ga_store_zero(s, p, n);
    if (rc != GA_OK) {
        ga_store_mem_put(s, s->compute, p, n * sizeof(float));
        return rc;
    }
    *out = p;
    return GA_OK;
}

static void tensor_free(ga_store *s, ga_store_tensor *t)
{
    size_t bytes = t->n * sizeof(float);
    if (t->pub) {
        /* the blob's buffer is not the store's to free */
        if (t->params == (float *)t->pub->data) t->params = NULL;
        if (t->published == (float *)t->pub->data) t->published = NULL;
        s->bytes -= ga_blob_footprint(t->pub->size);
        ga_blob_unref(t->pub);
    }
    if (t->mirror) {
        s->bytes -= ga_blob_footprint(t->mirror->size);
        ga_blob_unref(t->mirror);
    }
    ga_store_mem_put(s, s->compute, t->params, bytes);
    ga_store_mem_put(s, s->compute, t->sum, bytes);
    ga_store_mem_put(s, s->compute, t->state0, bytes);
    ga_store_mem_put(s, s->compute, t->state1, bytes);
    ga_store_mem_put(s, s->compute, t->published, bytes);
    ga_store_held_clear(s, t);
    ga_store_mem_put(s, GA_STORE_MEM_HOST, t->held, t->held_cap * sizeof *t->held);
    memset(t, 0, sizeof *t);
}

ga_status ga_store_regrow(ga_store *s, ga_store_mem where, void **buf, size_t *cap, size_t need)
{
    if (*buf && *cap >= need) return GA_OK;
    void *p;
    GA_CHECK(ga_store_mem_get(s, where, need, &p));
    ga_store_mem_put(s, where, *buf, *cap);
    *buf = p;
    *cap = need;
    return GA_OK;
}

/* ---- configuration ---- */

ga_status ga_store_check_optim(const ga_store_config *cfg)
{
    /* The kernels own the rules: a call with n = 0 checks the hyper-parameters and does nothing. */
    if (!cfg) return GA_E_INVAL;
    const ga_exec cpu = GA_EXEC_CPU_INIT;
    switch (cfg->optim) {
    case GA_OPTIM_NONE:
    case GA_OPTIM_REDUCE: return GA_OK;
    case GA_OPTIM_SGD: return ga_sgd_step(&cpu, &cfg->sgd, NULL, NULL, NULL, 0);
    case GA_OPTIM_ADAM: return ga_adam_step(&cpu, &cfg->adam, 1, NULL, NULL, NULL, NULL, 0);
    }
    return GA_E_OPTIM;
}

static ga_status check_config(const ga_store_config *cfg)
{
    GA_CHECK(ga_store_check_optim(cfg));
    GA_CHECK(ga_codec_params_validate(cfg->pull_codec, &cfg->pull_params));
    if (cfg->pull_auto_bits != 0.0f &&
        !(cfg->pull_codec == GA_CODEC_2BIT && cfg->pull_auto_bits > 0.0f && (double)cfg->pull_auto_bits <= GA_LOG2_3))
        return GA_E_CONFIG;
    if (cfg->threads < 0 || cfg->piece_elems == 0 || cfg->piece_elems % GA_STORE_PIECE_ALIGN != 0 ||
        cfg->block_elems % GA_STORE_PIECE_ALIGN != 0)
        return GA_E_CONFIG;
    size_t bytes;
    if (ga_codec_encoded_size(cfg->pull_codec, &cfg->pull_params, cfg->piece_elems, &bytes) != GA_OK)
        return GA_E_CONFIG; /* pieces larger than the pull codec can carry */
    ga_exec ex = {cfg->backend, cfg->threads, GA_SIMD_AUTO, NULL};
    return ga_exec_usable(&ex);
}

ga_status ga_store_create(const ga_store_config *cfg, ga_store **out)
{
    if (!cfg || !out) return GA_E_INVAL;
    GA_CHECK(check_config(cfg));
    ga_store *s = ga_calloc(1, sizeof *s);
    if (!s) return GA_E_NOMEM;
    s->cfg = *cfg;
    s->overflowed = UINT32_MAX;
    s->bytes = sizeof *s;
    s->ex = (ga_exec){cfg->backend, cfg->threads, GA_SIMD_AUTO, NULL};
    s->compute = cfg->backend == GA_BACKEND_CUDA ? GA_STORE_MEM_DEVICE : GA_STORE_MEM_HOST;
    s->staging = cfg->backend == GA_BACKEND_CUDA ? GA_STORE_MEM_PINNED : GA_STORE_MEM_HOST;
    if (cfg->backend == GA_BACKEND_CUDA) {
        ga_status rc = ga_cuda_stream_create(&s->ex.cuda_stream);
        if (rc != GA_OK) {
            ga_free(s);
            return rc;
        }
    }
    ga_store_scratch_enter();
    *out = s;
    return GA_OK;
}

void ga_store_destroy(ga_store *s)
{
    if (!s) return;
    (void)ga_exec_sync(&s->ex); /* nothing queued may outlive its buffers */
    for (uint32_t i = 0; i < s->count; i++) tensor_free(s, &s->tensors[i]);
    ga_store_mem_put(s, GA_STORE_MEM_HOST, s->tensors, s->cap * sizeof *s->tensors);
    ga_store_mem_put(s, s->compute, s->zeros, s->zero_elems * sizeof(float));
    ga_store_mem_put(s, s->staging, s->stage, s->stage_cap);
    ga_store_mem_put(s, GA_STORE_MEM_DEVICE, s->dev_in, s->dev_in_cap);
    ga_cuda_stream_destroy(s->ex.cuda_stream);
    ga_free(s);
    ga_store_scratch_leave();
}

ga_status ga_store_set_lr(ga_store *s, float lr)
{
    if (!s) return GA_E_INVAL;
    if (!(isfinite(lr) && lr >= 0.0f)) return GA_E_OPTIM;
    s->cfg.sgd.lr = lr;
    s->cfg.adam.lr = lr;
    return GA_OK;
}

uint64_t ga_store_bytes(const ga_store *s)
{
    return s ? s->bytes : 0;
}

/* ---- tensors ---- */

/* Room for one more tensor record. */
static ga_status reserve(ga_store *s)
{
    if (s->count < s->cap) return GA_OK;
    uint32_t cap = s->cap ? (s->cap > UINT32_MAX / 2 ? UINT32_MAX : 2 * s->cap) : 8;
    void *p;
    GA_CHECK(ga_store_mem_get(s, GA_STORE_MEM_HOST, (size_t)cap * sizeof *s->tensors, &p));
    if (s->count) memcpy(p, s->tensors, s->count * sizeof *s->tensors);
    ga_store_mem_put(s, GA_STORE_MEM_HOST, s->tensors, s->cap * sizeof *s->tensors);
    s->tensors = p;
    s->cap = cap;
    return GA_OK;
}

/* Device zeros are made once per size by a copy from zeroed host memory. */
static ga_status zeros_get(ga_store *s, size_t elems, float **out)
{
    void *dev;
    GA_CHECK(ga_store_mem_get(s, GA_STORE_MEM_DEVICE, elems * sizeof(float), &dev));
    float *host = ga_calloc(elems, sizeof *host);
    ga_status rc = host ? ga_device_copy(&s->ex, dev, host, elems * sizeof *host) : GA_E_NOMEM;
    ga_status synced = ga_exec_sync(&s->ex); /* before host goes */
    ga_free(host);
    if (rc == GA_OK) rc = synced;
    if (rc != GA_OK) {
        ga_store_mem_put(s, GA_STORE_MEM_DEVICE, dev, elems * sizeof(float));
        return rc;
    }
    *out = dev;
    return GA_OK;
}

/* CUDA: grows the device zeros for a tensor of n elements. */
static ga_status grow_zeros(ga_store *s, size_t n)
{
    size_t zero = s->compute == GA_STORE_MEM_DEVICE ? (n < ZERO_MAX_ELEMS ? n : ZERO_MAX_ELEMS) : 0;
    if (zero <= s->zero_elems) return GA_OK;
    float *zeros;
    GA_CHECK(zeros_get(s, zero, &zeros));
    ga_store_mem_put(s, GA_STORE_MEM_DEVICE, s->zeros, s->zero_elems * sizeof(float));
    s->zeros = zeros, s->zero_elems = zero;
    return GA_OK;
}

/* Fills a new tensor from its version-0 values (host, in full->data): params and the published
 * copy (the optimizer state was made zero; the sum is made by the first dense chunk). */
static ga_status tensor_init(ga_store *s, ga_store_tensor *t, const ga_blob *full)
{
    size_t bytes = t->n * sizeof(float);
    if (t->pub) { /* CPU: the values are in place; the other of params / published copies them */
        if (t->published) GA_CHECK(ga_device_copy(&s->ex, t->params, t->published, bytes));
        return GA_OK;
    }
    GA_CHECK(ga_device_copy(&s->ex, t->params, full->data, bytes));
    if (t->published) GA_CHECK(ga_device_copy(&s->ex, t->published, t->params, bytes));
    return GA_OK;
}

ga_status ga_store_add_tensor(ga_store *s, size_t n, const float *init, uint32_t *index, ga_published *out)
{
    if (!s || !index || !out) return GA_E_INVAL;
    if (n > SIZE_MAX / (2 * sizeof(float))) return GA_E_TOO_LARGE;
    if (s->count == UINT32_MAX) return GA_E_LIMIT;

    const ga_store_config *c = &s->cfg;
    bool sgd_buf = c->optim == GA_OPTIM_SGD && c->sgd.momentum != 0.0f, adam = c->optim == GA_OPTIM_ADAM;
    ga_store_tensor t = {.n = n};
    ga_status rc;
    ga_blob *full = ga_blob_create(n * sizeof(float));
    if (!full) return GA_E_NOMEM;
    if (init) memcpy(full->data, init, n * sizeof(float));
    else memset(full->data, 0, n * sizeof(float));

    bool deltas = c->pull_codec != GA_CODEC_NONE;
    if (s->compute == GA_STORE_MEM_HOST) {
        /* The version-0 blob is the store's published copy (or its params): store_internal.h. */
        t.pub = ga_blob_ref(full);
        s->bytes += ga_blob_footprint(full->size);
        if (deltas) t.published = (float *)full->data;
        else t.params = (float *)full->data;
    } else {
        t.mirror = ga_blob_ref(full); /* the latest publication's host copy (store_internal.h) */
        s->bytes += ga_blob_footprint(full->size);
    }
    /* A failure from here on may leave the device zeros or the record array larger (counted in
     * ga_store_bytes); no tensor, sum or publication changes. The zeros come first: the
     * optimizer state below is cleared from them. */
    GA_CHECK_GOTO(grow_zeros(s, n), rc, fail);
    if (!t.params) GA_CHECK_GOTO(floats_get(s, true, n, &t.params), rc, fail);
    GA_CHECK_GOTO(zeroed_floats_get(s, sgd_buf || adam, n, &t.state0), rc, fail);
    GA_CHECK_GOTO(zeroed_floats_get(s, adam, n, &t.state1), rc, fail);
    if (!t.published) GA_CHECK_GOTO(floats_get(s, deltas, n, &t.published), rc, fail);
    GA_CHECK_GOTO(reserve(s), rc, fail);
    rc = tensor_init(s, &t, full);
    ga_status synced = ga_exec_sync(&s->ex);
    if (rc == GA_OK) rc = synced;
    if (rc != GA_OK) goto fail;

    s->tensors[s->count] = t;
    *index = s->count++;
    memset(out, 0, sizeof *out);
    out->full = full;
    out->npieces = ga_store_npieces(s, n);
    return GA_OK;

fail:
    tensor_free(s, &t);
    ga_blob_unref(full);
    return rc;
}

/* ---- the step's sums ---- */

ga_status ga_store_upload(ga_store *s, void *dst, const void *payload, size_t len)
{
    if (len == 0) return GA_OK;
    /* The previous upload's last copy may still read either half, and queued work dst. */
    GA_CHECK(ga_exec_sync(&s->ex));
    size_t piece = len < STAGE_PIECE_BYTES ? len : STAGE_PIECE_BYTES;
    size_t stage = len <= STAGE_PIECE_BYTES ? len : 2 * STAGE_PIECE_BYTES;
    GA_CHECK(ga_store_regrow(s, s->staging, &s->stage, &s->stage_cap,
                             stage > STAGE_MIN_BYTES ? stage : STAGE_MIN_BYTES));
    size_t k = 0;
    for (size_t done = 0; done < len; done += piece, k++) {
        size_t n = len - done < piece ? len - done : piece;
        uint8_t *half = (uint8_t *)s->stage + (k % 2) * piece;
        ga_host_copy(&s->ex, half, (const uint8_t *)payload + done, n);
        if (k > 0) GA_CHECK(ga_exec_sync(&s->ex)); /* piece k - 1's copy, out of the other half */
        GA_CHECK(ga_device_copy(&s->ex, (uint8_t *)dst + done, half, n));
    }
    return GA_OK;
}

/* Both decodes into compute memory (store_internal.h); checked: the payload's values were
 * checked before (ga_codec_decode_add_checked). */
static ga_status decode_into(ga_store *s, ga_codec_id codec, const ga_codec_params *p, const void *payload,
                             size_t len, size_t count, float *dst, bool checked)
{
    ga_status (*decode)(const ga_exec *, ga_codec_id, const ga_codec_params *, const void *, size_t, size_t,
                        float *) = checked ? ga_codec_decode_add_checked : ga_codec_decode_add;
    if (s->compute == GA_STORE_MEM_HOST) {
        /* Codecs read payloads as 32-bit words; a protobuf buffer need not be aligned. */
        if ((uintptr_t)payload % 4 != 0) {
            GA_CHECK(ga_store_regrow(s, s->staging, &s->stage, &s->stage_cap,
                                     len > STAGE_MIN_BYTES ? len : STAGE_MIN_BYTES));
            ga_host_copy(&s->ex, s->stage, payload, len);
            payload = s->stage;
        }
        return decode(&s->ex, codec, p, payload, len, count, dst);
    }

    ga_status rc = ga_store_regrow(s, GA_STORE_MEM_DEVICE, &s->dev_in, &s->dev_in_cap,
                                   len > STAGE_MIN_BYTES ? len : STAGE_MIN_BYTES);
    if (rc == GA_OK) rc = ga_store_upload(s, s->dev_in, payload, len);
    if (rc == GA_OK) rc = decode(&s->ex, codec, p, s->dev_in, len, count, dst);
    ga_status synced = ga_exec_sync(&s->ex); /* the buffers are reused by the next call */
    return rc != GA_OK ? rc : synced;
}

ga_status ga_store_decode_add(ga_store *s, ga_codec_id codec, const ga_codec_params *p, const void *payload,
                              size_t len, size_t count, float *dst)
{
    return decode_into(s, codec, p, payload, len, count, dst, false);
}

ga_status ga_store_add_held(ga_store *s, ga_codec_id codec, const ga_codec_params *p, const void *payload,
                            size_t len, size_t count, float *dst)
{
    return decode_into(s, codec, p, payload, len, count, dst, true);
}

void ga_store_held_clear(ga_store *s, ga_store_tensor *t)
{
    for (size_t i = 0; i < t->nheld; i++)
        if (!t->held[i].lent) ga_store_mem_put(s, GA_STORE_MEM_HOST, t->held[i].data, t->held[i].len);
    t->nheld = 0;
}

static bool dense(ga_codec_id codec)
{
    return codec == GA_CODEC_NONE || codec == GA_CODEC_FP16 || codec == GA_CODEC_BF16;
}

/* Keeps a chunk for the apply: in place when it is lent and aligned for the codecs (*kept set),
 * else a copy. A chunk not lent is first checked exactly as the decode will check it; a lent
 * one was checked by the caller (store.h). */
static ga_status hold(ga_store *s, ga_store_tensor *t, size_t offset, size_t count, ga_codec_id codec,
                      const ga_codec_params *p, const void *payload, size_t len, bool lend, bool *kept)
{
    if (t->nheld == t->held_cap) {
        size_t cap = t->held_cap ? 2 * t->held_cap : 8;
        void *q;
        GA_CHECK(ga_store_mem_get(s, GA_STORE_MEM_HOST, cap * sizeof *t->held, &q));
        if (t->nheld) memcpy(q, t->held, t->nheld * sizeof *t->held);
        ga_store_mem_put(s, GA_STORE_MEM_HOST, t->held, t->held_cap * sizeof *t->held);
        t->held = q;
        t->held_cap = cap;
    }
    if (lend && (uintptr_t)payload % 4 == 0) {
        t->held[t->nheld++] = (ga_store_held){.offset = offset, .count = count, .codec = codec, .params = *p,
                                               .data = (void *)payload, .len = len, .lent = true};
        *kept = true;
        return GA_OK;
    }
    void *data;
    GA_CHECK(ga_store_mem_get(s, GA_STORE_MEM_HOST, len, &data)); /* ga_malloc: aligned for the codecs */
    if (len) memcpy(data, payload, len);
    ga_status rc = lend ? GA_OK : ga_codec_check_payload(codec, p, data, len, count);
    if (rc != GA_OK) {
        ga_store_mem_put(s, GA_STORE_MEM_HOST, data, len);
        return rc;
    }
    t->held[t->nheld++] = (ga_store_held){.offset = offset, .count = count, .codec = codec, .params = *p,
                                           .data = data, .len = len, .lent = false};
    return GA_OK;
}

/* Both accumulate calls (store.h); lend: the caller's promise of ga_store_accumulate_lent. */
static ga_status accumulate(ga_store *s, uint32_t t, size_t offset, size_t count, ga_codec_id codec,
                            const ga_codec_params *p, const void *payload, size_t len, bool lend, bool *kept)
{
    *kept = false;
    if (!s) return GA_E_INVAL;
    if (t >= s->count) return GA_E_UNKNOWN_TENSOR;
    ga_store_tensor *tensor = &s->tensors[t];
    if (offset > tensor->n || count > tensor->n - offset) return GA_E_LENGTH;
    /* The length is checked before any staging, so a bad chunk cannot make the buffers grow. */
    size_t most;
    GA_CHECK(ga_codec_encoded_size(codec, p, count, &most));
    /* Exact for fixed sizes, even for a lent chunk: the apply's slices are cut by element. */
    if (ga_codec_fixed_size(codec) ? len != most : len > most) return GA_E_LENGTH;
    if (len > 0 && !payload) return GA_E_INVAL;
    if (!p) return GA_E_INVAL;

    /* A lent dense chunk is held on the CPU only: there the apply sums held chunks block by
     * block at memory speed, while the CUDA store overlaps each push's copy to the device with
     * the arrival of the next. */
    bool hold_dense = lend && s->compute == GA_STORE_MEM_HOST;
    if (!tensor->summing && (tensor->nheld > 0 || !dense(codec) || hold_dense)) {
        if (count == 0) return ga_codec_check_payload(codec, p, payload, len, 0); /* adds nothing */
        return hold(s, tensor, offset, count, codec, p, payload, len, lend, kept);
    }
    if (!tensor->sum) {
        float *sum = NULL;
        GA_CHECK(zeroed_floats_get(s, true, tensor->n, &sum));
        ga_status rc = ga_exec_sync(&s->ex);
        if (rc != GA_OK) {
            ga_store_mem_put(s, s->compute, sum, tensor->n * sizeof(float));
            return rc;
        }
        tensor->sum = sum;
    }
    /* A lent payload's values were checked by the caller (store.h): not read twice. */
    ga_status rc = lend ? ga_store_add_held(s, codec, p, payload, len, count, tensor->sum + offset)
                        : ga_store_decode_add(s, codec, p, payload, len, count, tensor->sum + offset);
    if (rc == GA_OK) tensor->summing = true;
    return rc;
}

ga_status ga_store_accumulate(ga_store *s, uint32_t t, size_t offset, size_t count, ga_codec_id codec,
                              const ga_codec_params *p, const void *payload, size_t len)
{
    bool kept;
    return accumulate(s, t, offset, count, codec, p, payload, len, false, &kept);
}

ga_status ga_store_accumulate_lent(ga_store *s, uint32_t t, size_t offset, size_t count, ga_codec_id codec,
                                   const ga_codec_params *p, const void *payload, size_t len, bool *kept)
{
    bool ignored;
    return accumulate(s, t, offset, count, codec, p, payload, len, true, kept ? kept : &ignored);
}

ga_status ga_store_discard(ga_store *s)
{
    if (!s) return GA_E_INVAL;
    ga_status rc = GA_OK;
    for (uint32_t i = 0; i < s->count; i++) {
        ga_store_tensor *t = &s->tensors[i];
        ga_store_held_clear(s, t);
        if (t->summing && rc == GA_OK) rc = ga_store_zero(s, t->sum, t->n);
        t->summing = false;
    }
    ga_status synced = ga_exec_sync(&s->ex);
    return rc != GA_OK ? rc : synced;
}
