/* Closing a step (store.h ga_store_apply): mean, optimizer, cleared sums, and the publication of
 * every tensor, as fp32 values or as a compressed delta with server-side error feedback.
 * One sequence of kernel calls for both backends, so the CPU and CUDA stores publish the same
 * bytes (each kernel is bit-identical across backends). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ga_alloc.h"
#include "ga_auto.h"
#include "ga_codec.h"
#include "ga_optim.h"
#include "ga_reduce.h"
#include "store_internal.h"

void ga_published_clear(ga_published *p)
{
    if (!p) return;
    ga_blob_unref(p->full);
    ga_blob_unref(p->delta);
    ga_free(p->delta_off);
    ga_free(p->delta_level);
    ga_free(p->piece_at);
    ga_free(p->delta_params);
    memset(p, 0, sizeof *p);
}

/* The blob an apply may rewrite in place: the CPU's publication, or the CUDA mirror. */
static ga_blob *host_blob(const ga_store_tensor *t)
{
    return t->pub ? t->pub : t->mirror;
}

/* Allocates the blobs of one tensor's next publication before any math runs, so a failure
 * to allocate changes nothing. The delta blob is sized for the largest payload of each piece
 * (exact for fixed-size codecs; top-k payloads are usually shorter, see publish_delta). In place
 * (CPU), the full publication is the store's own blob, rewritten by the step. */
static ga_status publication_alloc(const ga_store *s, ga_store_tensor *t, bool in_place, ga_published *pub)
{
    size_t npieces = ga_store_npieces(s, t->n), pe = s->cfg.piece_elems, most = 0;
    memset(pub, 0, sizeof *pub);
    pub->npieces = npieces;
    if (s->cfg.pull_codec != GA_CODEC_NONE) {
        for (size_t i = 0; i < npieces; i++) {
            size_t len = t->n - i * pe < pe ? t->n - i * pe : pe, bytes;
            GA_CHECK(ga_codec_encoded_size(s->cfg.pull_codec, &s->cfg.pull_params, len, &bytes));
            most += bytes;
        }
        pub->delta_off = ga_malloc((npieces + 1) * sizeof *pub->delta_off);
        pub->delta = ga_blob_create(most);
        if (!pub->delta_off || !pub->delta) goto nomem;
        if (s->cfg.pull_auto_bits > 0.0f && !(pub->delta_level = ga_malloc(npieces * sizeof *pub->delta_level)))
            goto nomem;
    }
    pub->full = in_place ? ga_blob_ref(host_blob(t)) : ga_blob_create(t->n * sizeof(float));
    if (!pub->full) goto nomem;
    return GA_OK;
nomem:
    ga_published_clear(pub);
    return GA_E_NOMEM;
}

/* grad (len elements, scratch) -> mean -> optimizer on elements [lo, lo + len) of tensor t.
 * Every kernel is element-wise, so a tensor stepped range by range gets the bits it would get
 * in one call. */
static ga_status step_range(ga_store *s, ga_store_tensor *t, size_t lo, size_t len, float *grad, float scale)
{
    const ga_store_config *c = &s->cfg;
    if (len == 0) return GA_OK;
    if (scale != 1.0f) GA_CHECK(ga_reduce_scale(&s->ex, grad, len, scale));
    float *p = t->params + lo, *s0 = t->state0 ? t->state0 + lo : NULL, *s1 = t->state1 ? t->state1 + lo : NULL;
    switch (c->optim) {
    case GA_OPTIM_NONE: return ga_reduce_add(&s->ex, p, grad, len);
    case GA_OPTIM_REDUCE: {
        const float *in[1] = {grad};
        return ga_reduce_sum(&s->ex, in, 1, len, p); /* a copy, on the store's backend */
    }
    case GA_OPTIM_SGD: return ga_sgd_step(&s->ex, &c->sgd, p, s0, grad, len);
    case GA_OPTIM_ADAM: return ga_adam_step(&s->ex, &c->adam, t->adam_t + 1, p, s0, s1, grad, len);
    }
    return GA_E_OPTIM;
}

/* What every tensor's step needs, taken before the first value changes, so that on the CPU
 * (where every kernel argument is checked) nothing can fail once the math started; given back to
 * the scratch pool when the apply ends (store.h), so a store between steps holds none of it and
 * the next apply of any store finds its pages warm. Compute memory but `by`. */
typedef struct apply_scratch {
    ga_store_held **by; /* room for the most held chunks of any tensor */
    float *grad;        /* the gradient of one block */
    size_t grad_elems;
    float *sum;         /* a whole-tensor sum, for partly overlapping ranges */
    size_t sum_elems;
    void *slice;        /* host memory: one block's slice of a top-k payload (ga_topk_slice) */
    size_t slice_cap;
    void *held_dev;     /* CUDA: one range's held payloads, uploaded once (range_upload_bytes) */
    size_t held_dev_cap;
    /* Pull codec only, for one piece: */
    float *delta;       /* params - published */
    float *residual;    /* the encoder's residual, zeroed for every piece (codecs with one) */
    size_t piece_elems;
    void *payload;      /* the encoded piece (4-byte aligned, as the codecs need) */
    size_t payload_cap;
    float *sample;      /* automatic pull threshold: host memory, one piece's sample */
    size_t sample_cap;  /* floats */
    double pull_rho;    /* the density pull_auto_bits asks for */
    ga_store_block taken[8]; /* each block above as the pool gave it, for scratch_put */
    size_t ntaken;
} apply_scratch;

/* A scratch block of at least `need` bytes in `where` (NULL when need is 0), recorded in x. */
static ga_status take(ga_store *s, apply_scratch *x, ga_store_mem where, size_t need, void **out)
{
    *out = NULL;
    if (need == 0) return GA_OK;
    size_t cap;
    GA_CHECK(ga_store_scratch_take(s, where, need, out, &cap));
    x->taken[x->ntaken++] = (ga_store_block){*out, cap, where};
    return GA_OK;
}

static size_t block_elems(const ga_store *s)
{
    return s->cfg.block_elems ? s->cfg.block_elems : GA_STORE_BLOCK_ELEMS;
}

/* Elements [lo, hi) with zero gradients, block by block. */
static ga_status step_gap(ga_store *s, ga_store_tensor *t, size_t lo, size_t hi, float scale, const apply_scratch *x)
{
    while (lo < hi) {
        size_t len = hi - lo < x->grad_elems ? hi - lo : x->grad_elems;
        GA_CHECK(ga_store_zero(s, x->grad, len));
        GA_CHECK(step_range(s, t, lo, len, x->grad, scale));
        lo += len;
    }
    return GA_OK;
}

static int held_order(const void *x, const void *y)
{
    const ga_store_held *a = *(ga_store_held *const *)x, *b = *(ga_store_held *const *)y;
    if (a->offset != b->offset) return a->offset < b->offset ? -1 : 1;
    return a < b ? -1 : a > b; /* arrival order within a range */
}

/* The held chunks sorted by range (arrival order within one); true when any two ranges are equal
 * or disjoint, so each range's gradient is the sum of whole chunks (by[i..range_end) for the
 * range starting at by[i]). */
static bool held_ranges(const ga_store_tensor *t, ga_store_held **by)
{
    for (size_t i = 0; i < t->nheld; i++) by[i] = &t->held[i];
    qsort(by, t->nheld, sizeof *by, held_order);
    for (size_t i = 1; i < t->nheld; i++) {
        const ga_store_held *a = by[i - 1], *b = by[i];
        bool same = a->offset == b->offset && a->count == b->count;
        if (!same && b->offset < a->offset + a->count) return false;
    }
    return true;
}

static size_t range_end(const ga_store_tensor *t, ga_store_held *const *by, size_t i)
{
    size_t end = i + 1;
    while (end < t->nheld && by[end]->offset == by[i]->offset) end++;
    return end;
}

/* Codecs a block can take its slice of: a range of bytes where every element is carried in
 * order (ga_codec_payload_range), the pairs in the block's range for top-k (ga_topk_slice). */
static bool sliceable(ga_codec_id codec)
{
    return ga_codec_in_order(codec) || codec == GA_CODEC_TOPK;
}

/* The block one range (by[i..end)) is stepped in: the store's block where every chunk's codec
 * can be sliced (each block decodes a slice of every payload), else the whole range
 * (1bit_scaled, whose scales cover the whole chunk). */
static size_t range_block(const ga_store *s, ga_store_held *const *by, size_t i, size_t end)
{
    size_t len = by[i]->count, block = block_elems(s);
    for (size_t k = i; k < end; k++)
        if (!sliceable(by[k]->codec)) return len;
    return len < block ? len : block;
}

/* CUDA: the device bytes that range by[i..end) takes when its payloads are uploaded once for
 * all its blocks (each at a 4-byte aligned offset), so that a block's decodes read device memory
 * and need no copy and no wait each. 0, and every block's slices are staged as they are added:
 * on the CPU; for a range of one block (each payload is added whole, once); for a codec a block
 * cannot take a byte range of (top-k: its slices are cut on the host); and for a range whose
 * payloads are larger than its fp32 values (so the device holds no more than a dense sum). */
static size_t range_upload_bytes(const ga_store *s, ga_store_held *const *by, size_t i, size_t end)
{
    if (s->compute != GA_STORE_MEM_DEVICE || by[i]->count <= block_elems(s)) return 0;
    size_t bytes = 0;
    for (size_t k = i; k < end; k++) {
        if (!ga_codec_in_order(by[k]->codec)) return 0;
        bytes += (by[k]->len + 3) / 4 * 4;
    }
    return bytes <= by[i]->count * sizeof(float) ? bytes : 0;
}

/* The gradient block a tensor's step needs (0: none), with its held chunks sorted into `by`;
 * *whole is set when the held ranges overlap partly and the step needs a whole-tensor sum. */
static size_t grad_need(const ga_store *s, const ga_store_tensor *t, ga_store_held **by, bool *whole)
{
    size_t gap = block_elems(s) < t->n ? block_elems(s) : t->n, most = gap;
    *whole = false;
    if (t->nheld == 0) return t->sum ? 0 : gap;
    if (!held_ranges(t, by)) {
        *whole = true;
        return 0;
    }
    for (size_t i = 0, end; i < t->nheld; i = end) {
        end = range_end(t, by, i);
        size_t need = range_block(s, by, i, end);
        most = need > most ? need : most;
    }
    return most;
}

/* The pull scratch for the largest piece of any tensor (pull codec only). */
static ga_status pull_scratch_get(ga_store *s, apply_scratch *x)
{
    ga_codec_id codec = s->cfg.pull_codec;
    size_t elems = 0;
    if (codec == GA_CODEC_NONE) return GA_OK;
    for (uint32_t i = 0; i < s->count; i++) elems = s->tensors[i].n > elems ? s->tensors[i].n : elems;
    elems = elems < s->cfg.piece_elems ? elems : s->cfg.piece_elems;
    if (elems == 0) return GA_OK;
    size_t cap;
    void *d, *r, *p;
    GA_CHECK(ga_codec_encoded_size(codec, &s->cfg.pull_params, elems, &cap));
    GA_CHECK(take(s, x, s->compute, elems * sizeof(float), &d));
    x->delta = d, x->piece_elems = elems;
    if (ga_codec_has_residual(codec)) {
        GA_CHECK(take(s, x, s->compute, elems * sizeof(float), &r));
        x->residual = r;
    }
    GA_CHECK(take(s, x, s->compute, cap, &p));
    x->payload = p, x->payload_cap = cap;
    if (s->cfg.pull_auto_bits > 0.0f) {
        void *sm;
        size_t count = ga_auto_sample_plan(elems, GA_AUTO_DEFAULT_SAMPLE, 0).count; /* the most of any piece */
        GA_CHECK(take(s, x, GA_STORE_MEM_HOST, count * sizeof(float), &sm));
        x->sample = sm, x->sample_cap = sm ? count : 0;
        x->pull_rho = ga_auto_density_for_bits((double)s->cfg.pull_auto_bits);
    }
    return GA_OK;
}

/* The slice buffer: as long as the longest top-k chunk held (no slice is longer than its
 * payload), or none when no top-k chunk spans more than one block. */
static size_t slice_need(const ga_store *s)
{
    size_t most = 0;
    for (uint32_t i = 0; i < s->count; i++)
        for (size_t k = 0; k < s->tensors[i].nheld; k++) {
            const ga_store_held *h = &s->tensors[i].held[k];
            if (h->codec == GA_CODEC_TOPK && h->count > block_elems(s) && h->len > most) most = h->len;
        }
    return most;
}

/* The largest range_upload_bytes of any tensor's held ranges (sorted into by). */
static size_t upload_need(const ga_store *s, ga_store_held **by)
{
    size_t most = 0;
    for (uint32_t t = 0; t < s->count; t++) {
        bool whole;
        const ga_store_tensor *tensor = &s->tensors[t];
        if (tensor->nheld == 0) continue;
        (void)grad_need(s, tensor, by, &whole);
        for (size_t i = 0, end; !whole && i < tensor->nheld; i = end) {
            end = range_end(tensor, by, i);
            size_t bytes = range_upload_bytes(s, by, i, end);
            most = bytes > most ? bytes : most;
        }
    }
    return most;
}

static ga_status scratch_get(ga_store *s, apply_scratch *x)
{
    size_t most_held = 0, grad = 0, sum = 0;
    for (uint32_t i = 0; i < s->count; i++)
        most_held = s->tensors[i].nheld > most_held ? s->tensors[i].nheld : most_held;
    memset(x, 0, sizeof *x);
    x->by = ga_malloc((most_held + 1) * sizeof *x->by);
    if (!x->by) return GA_E_NOMEM;
    for (uint32_t i = 0; i < s->count; i++) {
        bool whole;
        size_t need = grad_need(s, &s->tensors[i], x->by, &whole);
        grad = need > grad ? need : grad;
        if (whole && s->tensors[i].n > sum) sum = s->tensors[i].n;
    }
    void *g, *p;
    GA_CHECK(take(s, x, s->compute, grad * sizeof(float), &g));
    x->grad = g;
    x->grad_elems = g ? grad : 0;
    GA_CHECK(take(s, x, s->compute, sum * sizeof(float), &p));
    x->sum = p;
    x->sum_elems = p ? sum : 0;
    size_t slice = slice_need(s);
    GA_CHECK(take(s, x, GA_STORE_MEM_HOST, slice, &x->slice));
    x->slice_cap = x->slice ? slice : 0;
    size_t upload = upload_need(s, x->by);
    GA_CHECK(take(s, x, GA_STORE_MEM_DEVICE, upload, &x->held_dev));
    x->held_dev_cap = x->held_dev ? upload : 0;
    return pull_scratch_get(s, x); /* on an error the caller's scratch_put gives back what was taken */
}

/* After the last use (the stream synced on CUDA). */
static void scratch_put(ga_store *s, apply_scratch *x)
{
    ga_free(x->by);
    for (size_t i = 0; i < x->ntaken; i++) ga_store_scratch_give(s, x->taken[i].where, x->taken[i].p, x->taken[i].cap);
    memset(x, 0, sizeof *x);
}

/* Adds elements [at, at + m) of held chunk h into the gradient block: the whole payload when
 * that is all of it, else the block's slice (top-k: through the chunk's cursor, so blocks are
 * taken in order). */
static ga_status add_slice(ga_store *s, ga_store_held *h, size_t at, size_t m, const apply_scratch *x)
{
    if (m == h->count) return ga_store_add_held(s, h->codec, &h->params, h->data, h->len, m, x->grad);
    size_t off, bytes;
    if (h->codec == GA_CODEC_TOPK) {
        ga_codec_params sp;
        GA_CHECK(ga_topk_slice(&h->params, h->data, h->len, h->count, at, m, &h->cursor, x->slice, x->slice_cap,
                               &bytes, &sp));
        return ga_store_add_held(s, h->codec, &sp, x->slice, bytes, m, x->grad);
    }
    GA_CHECK(ga_codec_payload_range(h->codec, &h->params, h->count, at, m, &off, &bytes));
    if (h->dev) /* uploaded (step_chunks): the device reads its slice in place */
        return ga_codec_decode_add_checked(&s->ex, h->codec, &h->params, (const uint8_t *)h->dev + off, bytes, m,
                                           x->grad);
    return ga_store_add_held(s, h->codec, &h->params, (const uint8_t *)h->data + off, bytes, m, x->grad);
}

/* One range's chunks (by[0..count), equal ranges, in arrival order) block by block: each block's
 * slice of every payload added into the gradient block, then the optimizer on it. */
static ga_status step_chunks(ga_store *s, ga_store_tensor *t, ga_store_held *const *by, size_t count, size_t block,
                             float scale, const apply_scratch *x)
{
    size_t lo = by[0]->offset, len = by[0]->count, up = range_upload_bytes(s, by, 0, count);
    for (size_t k = 0, at = 0; k < count; k++) {
        by[k]->cursor = (ga_topk_cursor){0};
        by[k]->dev = NULL;
        if (up == 0) continue;
        if (up > x->held_dev_cap) return GA_E_INVAL; /* scratch_get sized it: a bug, never silent */
        by[k]->dev = (uint8_t *)x->held_dev + at;
        GA_CHECK(ga_store_upload(s, (uint8_t *)x->held_dev + at, by[k]->data, by[k]->len));
        at += (by[k]->len + 3) / 4 * 4;
    }
    for (size_t at = 0; at < len; at += block) {
        size_t m = len - at < block ? len - at : block;
        GA_CHECK(ga_store_zero(s, x->grad, m));
        for (size_t k = 0; k < count; k++) GA_CHECK(add_slice(s, by[k], at, m, x));
        GA_CHECK(step_range(s, t, lo + at, m, x->grad, scale));
    }
    return GA_OK;
}

/* Sum of the held chunks range by range (each into the block, in arrival order), then the
 * optimizer on that range; ranges no chunk covers step with zero gradients. Ranges that
 * overlap partly (chunks cut differently by different pushes) take a whole-tensor sum. */
static ga_status step_held(ga_store *s, ga_store_tensor *t, float scale, apply_scratch *x)
{
    ga_store_held **by = x->by;
    bool whole;
    size_t most = grad_need(s, t, by, &whole);
    if (whole) {
        float *sum = x->sum;
        ga_status rc = ga_store_zero(s, sum, t->n);
        for (size_t i = 0; i < t->nheld && rc == GA_OK; i++) {
            const ga_store_held *h = &t->held[i];
            rc = ga_store_add_held(s, h->codec, &h->params, h->data, h->len, h->count, sum + h->offset);
        }
        if (rc == GA_OK) rc = step_range(s, t, 0, t->n, sum, scale);
        return rc;
    }
    if (most > x->grad_elems) return GA_E_INVAL; /* scratch_get sized it: a bug, never silent */
    ga_status rc = GA_OK;
    size_t pos = 0;
    for (size_t i = 0, end; i < t->nheld && rc == GA_OK; i = end) {
        end = range_end(t, by, i);
        rc = step_gap(s, t, pos, by[i]->offset, scale, x);
        if (rc == GA_OK) rc = step_chunks(s, t, by + i, end - i, range_block(s, by, i, end), scale, x);
        pos = by[i]->offset + by[i]->count;
    }
    if (rc == GA_OK) rc = step_gap(s, t, pos, t->n, scale, x);
    return rc;
}

/* The step's gradient (held chunks, the dense sum, or zeros) -> mean -> optimizer -> params;
 * the sum is cleared and the held chunks freed for the next step. */
static ga_status step_tensor(ga_store *s, ga_store_tensor *t, float scale, apply_scratch *x)
{
    if (t->nheld > 0) {
        GA_CHECK(step_held(s, t, scale, x));
    } else if (t->sum) {
        GA_CHECK(step_range(s, t, 0, t->n, t->sum, scale));
        GA_CHECK(ga_store_zero(s, t->sum, t->n));
    } else {
        GA_CHECK(step_gap(s, t, 0, t->n, scale, x)); /* scratch_get sized the block for it */
    }
    if (s->cfg.optim == GA_OPTIM_ADAM) t->adam_t++;
    t->summing = false;
    GA_CHECK(ga_exec_sync(&s->ex)); /* the held payloads may be read by a queued decode */
    ga_store_held_clear(s, t);
    return GA_OK;
}

/* Why a delta cannot be sent: the parameters (or the published copy) are no longer finite, or a
 * value overflows the codec's wire type (fp16/bf16). Not an error: that version goes out as
 * fp32 only, and the published copy restarts from the parameters. */
static bool delta_unsendable(ga_status rc)
{
    return rc == GA_E_NONFINITE || rc == GA_E_RANGE;
}

/* This version goes out as fp32 only (no delta: every puller gets PULL_FULL) and the published
 * copy restarts from the parameters. Taken when a delta cannot be sent (delta_unsendable), and
 * for a reduce job's version 1: its first reduced gradient has nothing to do with version 0 (the
 * init values, e.g. rank 0's parameters), so a delta from there would be quantised at the
 * parameters' scale and the gradient lost in it (docs/protocol.md, "Pull"). */
static ga_status publish_full_only(ga_store *s, const ga_store_tensor *t, ga_published *pub)
{
    GA_CHECK(ga_exec_sync(&s->ex)); /* no copy into the blob may still be queued */
    ga_blob_unref(pub->delta);
    ga_free(pub->delta_off);
    ga_free(pub->delta_level);
    pub->delta = NULL, pub->delta_off = NULL, pub->delta_level = NULL;
    return ga_device_copy(&s->ex, t->published, t->params, t->n * sizeof(float));
}

/* The automatic pull threshold of one piece's delta (len elements in x->delta): a strided sample
 * of |delta| (its start moves with the version and the piece), its (1 - rho) quantile t selects
 * and the mean of the sampled |delta| >= t is the level sent (p->select, p->threshold). A sample
 * that is all zero sends nothing this version (both FLT_MAX); one that is not finite leaves p as
 * it is, and the encode refuses the delta (GA_E_NONFINITE: the version goes out as fp32). */
static ga_status pull_threshold(ga_store *s, const apply_scratch *x, size_t len, size_t piece, ga_codec_params *p)
{
    uint64_t seed = (s->version + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)piece * 0xC2B2AE3D27D4EB4Full;
    ga_auto_sample plan = ga_auto_sample_plan(len, GA_AUTO_DEFAULT_SAMPLE, seed ^ (seed >> 31));
    GA_CHECK(ga_device_gather(&s->ex, x->sample, x->delta, plan.start, plan.stride, plan.count));
    for (size_t k = 0; k < plan.count; k++) {
        if (!isfinite(x->sample[k])) return GA_OK;
        x->sample[k] = fabsf(x->sample[k]);
    }
    float t = ga_auto_quantile(x->sample, plan.count, x->pull_rho);
    if (t == 0.0f) {
        p->select = p->threshold = FLT_MAX;
        return GA_OK;
    }
    p->select = t;
    p->threshold = ga_auto_level_mean(x->sample, plan.count, t);
    return GA_OK;
}

/* Encodes params - published piece by piece into pub->delta and advances published by exactly
 * the decoded payload, which is what every worker adds. The residual starts at zero for each
 * piece, so a payload is quantize(params - published): what it leaves out stays in that
 * difference and is sent in a later version (server-side error feedback). Payloads are packed
 * back to back (top-k lengths vary, so a piece may start at any byte); each is encoded into the
 * aligned scratch, decoded from there, then copied into the blob. */
static ga_status publish_delta(ga_store *s, ga_store_tensor *t, ga_published *pub, const apply_scratch *x)
{
    if (s->cfg.optim == GA_OPTIM_REDUCE && s->version == 1) return publish_full_only(s, t, pub);
    ga_codec_id codec = s->cfg.pull_codec;
    ga_codec_params p = s->cfg.pull_params;
    /* A different top-k sample every version (DGC): version v encodes with pull_params.seed + v.
     * Decoding does not read the seed, so a chunk may carry the configured one. */
    p.seed = s->cfg.pull_params.seed + s->version;
    float *residual = x->residual;
    size_t pe = s->cfg.piece_elems, off = 0;
    pub->delta_off[0] = 0;
    for (size_t i = 0; i < pub->npieces; i++) {
        size_t lo = i * pe, len = t->n - lo < pe ? t->n - lo : pe, plen = 0;
        GA_CHECK(ga_reduce_sub(&s->ex, x->delta, t->params + lo, t->published + lo, len));
        if (residual) GA_CHECK(ga_store_zero(s, residual, len));
        if (pub->delta_level) {
            GA_CHECK(pull_threshold(s, x, len, i, &p));
            pub->delta_level[i] = p.threshold;
        }
        ga_status rc = ga_codec_encode(&s->ex, codec, &p, x->delta, residual, len, x->payload, x->payload_cap, &plen);
        if (delta_unsendable(rc)) return publish_full_only(s, t, pub);
        GA_CHECK(rc);
        GA_CHECK(ga_codec_decode_add(&s->ex, codec, &p, x->payload, plen, len, t->published + lo));
        GA_CHECK(ga_device_copy(&s->ex, pub->delta->data + off, x->payload, plen));
        off += plen;
        pub->delta_off[i + 1] = off;
    }
    /* The blob was sized for the longest payloads; it reports the bytes actually written. */
    pub->delta->size = off;
    return GA_OK;
}

/* CPU: moves the values the apply will change (params with fp32 pulls, the published copy with
 * a pull codec) into the new version's blob, which becomes the store's; the old blob stays as
 * it was for whoever still streams it. */
static void rebase(ga_store_tensor *t, ga_published *pub)
{
    float *old = (float *)t->pub->data, *next = (float *)pub->full->data;
    memcpy(next, old, t->n * sizeof(float));
    if (t->params == old) t->params = next;
    if (t->published == old) t->published = next;
    ga_blob_unref(t->pub);
    t->pub = ga_blob_ref(pub->full);
}

static ga_status publish_tensor(ga_store *s, ga_store_tensor *t, ga_published *pub, const apply_scratch *x)
{
    const float *src = t->params;
    if (s->cfg.pull_codec != GA_CODEC_NONE) {
        GA_CHECK(publish_delta(s, t, pub, x));
        src = t->published;
    }
    if (t->pub) return GA_OK; /* the values are already in pub->full (rebase, or in place) */
    return ga_device_copy(&s->ex, pub->full->data, src, t->n * sizeof(float));
}

/* A tensor's host blob (host_blob) may be rewritten when its only holders are the store and (at most) the
 * caller's latest publication: the caller promised that no new reference appears meanwhile. */
static bool rewritable(const ga_store_tensor *t, bool in_place)
{
    return in_place && host_blob(t) && ga_blob_refs(host_blob(t)) <= 2;
}

/* CUDA: the version's full blob becomes the mirror (the same size: s->bytes does not change). */
static void remirror(ga_store_tensor *t, ga_published *pub)
{
    if (!t->mirror || t->mirror == pub->full) return;
    ga_blob_unref(t->mirror);
    t->mirror = ga_blob_ref(pub->full);
}

/* The mean's scale is computed once as (float)(1.0 / contributors): the double quotient rounded
 * once to float, the same on both backends and the value a client can reproduce. The sum is
 * then multiplied by it (ga_reduce_scale), not divided, so the mean of 3 contributions is
 * sum * 0x1.555556p-2f. One contributor skips the scale (x * 1 = x). Parameters that become
 * Inf or NaN (an overflowing sum, a diverging run, a huge learning rate) are found by a scan at
 * the end and nothing is published (store.h). Every allocation (blobs, scratch) comes before the first value changes; after it
 * only a kernel can fail, and only on a device error (every argument was checked): that leaves
 * the step partly applied and publishes nothing. On the CPU nothing fails after it, which is
 * what lets a blob be rewritten in place (on CUDA, store.h ga_store_apply_in_place). */
static ga_status apply(ga_store *s, uint32_t contributors, ga_published *out, bool in_place)
{
    if (!s || contributors == 0 || (!out && s->count > 0)) return GA_E_INVAL;
    float scale = s->cfg.mean && contributors > 1 ? (float)(1.0 / contributors) : 1.0f;
    ga_published *pubs = ga_calloc(s->count ? s->count : 1, sizeof *pubs);
    if (!pubs) return GA_E_NOMEM;
    apply_scratch x = {0};
    ga_status rc = GA_OK;
    for (uint32_t i = 0; i < s->count && rc == GA_OK; i++) {
        ga_store_tensor *t = &s->tensors[i];
        rc = publication_alloc(s, t, rewritable(t, in_place), &pubs[i]);
    }
    if (rc == GA_OK) rc = scratch_get(s, &x);
    if (rc != GA_OK) goto done;

    s->version++; /* the version being published (the top-k seed reads it) */
    for (uint32_t i = 0; i < s->count && rc == GA_OK; i++) {
        ga_store_tensor *t = &s->tensors[i];
        if (t->pub && pubs[i].full != t->pub) rebase(t, &pubs[i]);
        rc = step_tensor(s, t, scale, &x);
        if (rc == GA_OK) rc = publish_tensor(s, t, &pubs[i], &x);
        if (rc == GA_OK) remirror(t, &pubs[i]);
    }
    ga_status synced = ga_exec_sync(&s->ex); /* the blobs are read by other threads once returned */
    if (rc == GA_OK) rc = synced;
    for (uint32_t i = 0; i < s->count && rc == GA_OK; i++) {
        rc = ga_check_finite(&s->ex, s->tensors[i].params, s->tensors[i].n);
        if (rc == GA_E_NONFINITE) s->overflowed = i;
    }
    if (rc == GA_OK && s->count) memcpy(out, pubs, s->count * sizeof *pubs);

done:
    scratch_put(s, &x);
    if (rc != GA_OK)
        for (uint32_t i = 0; i < s->count; i++) ga_published_clear(&pubs[i]);
    ga_free(pubs);
    return rc;
}

uint32_t ga_store_overflowed(const ga_store *s)
{
    return s ? s->overflowed : UINT32_MAX;
}

ga_status ga_store_apply(ga_store *s, uint32_t contributors, ga_published *out)
{
    return apply(s, contributors, out, false);
}

ga_status ga_store_apply_in_place(ga_store *s, uint32_t contributors, ga_published *out)
{
    return apply(s, contributors, out, true);
}
