/* Top-k (DGC) host-side decisions shared by the CPU encoder and the CUDA host code: the plan,
 * radix select, exact trimming, block quotas, and the payload validator. Semantics:
 * topk_select.h. Every function here is serial and allocation-free. */
#include "topk_select.h"

#include <math.h>
#include <string.h>

size_t ga_topk_k(size_t n, float ratio)
{
    size_t k = (size_t)ceil((double)n * (double)ratio);
    return k > n ? n : k;
}

void ga_topk_plan_init(const ga_codec_params *p, size_t n, ga_topk_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    plan->n = n;
    plan->k = ga_topk_k(n, p->ratio);
    size_t cap = 4 * plan->k > GA_TOPK_CAND_MIN ? 4 * plan->k : GA_TOPK_CAND_MIN;
    plan->cap = cap < n ? cap : n;
    plan->exact = n <= GA_TOPK_EXACT_MAX;
    plan->rounds = p->adapt_rounds;
    plan->fp16 = p->topk_values == GA_TOPK_VALUES_FP16;
    plan->varint = p->topk_indices == GA_TOPK_INDICES_VARINT;
    plan->value_bytes = plan->fp16 ? 2 : 4;
    if (plan->exact) return;
    /* Clamped to n before the cast: a tiny fraction must neither overflow size_t nor leave
     * the sample empty. */
    double stride = 1.0 / (double)p->sample_fraction;
    plan->stride = stride >= (double)n ? n : (size_t)stride;
    if (plan->stride < 1) plan->stride = 1;
    plan->start = (size_t)(ga_topk_splitmix64(p->seed) % (uint64_t)plan->stride);
    plan->samples = (n - plan->start + plan->stride - 1) / plan->stride;
    double m = ceil((double)plan->samples * (double)p->ratio);
    plan->m = m < 1.0 ? 1 : (m > (double)plan->samples ? plan->samples : (size_t)m);
}

int ga_topk_enough(size_t count, size_t k) { return !((double)count < 0.8 * (double)k); }

uint32_t ga_topk_hist_pick(const uint64_t *hist, size_t bins, size_t m, size_t *above)
{
    size_t cum = 0;
    for (size_t b = bins; b-- > 0;) {
        if (cum + hist[b] >= m) {
            *above = cum;
            return (uint32_t)b;
        }
        cum += hist[b];
    }
    *above = cum; /* unreachable for 1 <= m <= total */
    return 0;
}

/* Three digits: key bits 31..21, 20..10, 9..0 (bit 31 is always 0 in a key). */
uint32_t ga_topk_kth_largest(const uint32_t *keys, size_t count, size_t m, size_t *greater)
{
    static const uint32_t shift[3] = {21, 10, 0}, width[3] = {11, 11, 10};
    uint64_t hist[2048];
    uint32_t prefix = 0, prefix_mask = 0;
    size_t above = 0;
    for (int d = 0; d < 3; d++) {
        uint32_t bins = 1u << width[d], mask = bins - 1u;
        memset(hist, 0, bins * sizeof hist[0]);
        for (size_t j = 0; j < count; j++)
            if ((keys[j] & prefix_mask) == prefix) hist[(keys[j] >> shift[d]) & mask]++;
        size_t a;
        uint32_t bin = ga_topk_hist_pick(hist, bins, m - above, &a);
        above += a;
        prefix |= bin << shift[d];
        prefix_mask |= mask << shift[d];
    }
    *greater = above;
    return prefix;
}

size_t ga_topk_trim(uint32_t *idx, uint32_t *keys, size_t count, size_t k)
{
    if (count <= k) return count;
    size_t greater;
    uint32_t t = ga_topk_kth_largest(keys, count, k, &greater);
    size_t eq_left = k - greater, w = 0;
    for (size_t j = 0; j < count; j++) {
        int keep = keys[j] > t;
        if (!keep && keys[j] == t && eq_left > 0) {
            keep = 1;
            eq_left--;
        }
        if (keep) {
            idx[w] = idx[j];
            keys[w] = keys[j];
            w++;
        }
    }
    return w;
}

size_t ga_topk_quotas(const uint32_t *gt, const uint32_t *eq, size_t blocks, size_t need_eq, uint32_t *quota,
                      uint32_t *offset)
{
    size_t total = 0;
    for (size_t b = 0; b < blocks; b++) {
        size_t q = eq[b] < need_eq ? eq[b] : need_eq;
        need_eq -= q;
        quota[b] = (uint32_t)q;
        offset[b] = (uint32_t)total;
        total += gt[b] + q;
    }
    return total;
}

static uint32_t load_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint16_t load_u16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* One varint at *pos (< end); advances *pos. GA_E_LENGTH when the bytes run out. */
static ga_status varint_get(const uint8_t *buf, size_t end, size_t *pos, uint32_t *out)
{
    uint32_t v = 0;
    for (uint32_t q = 0;; q++) {
        if (*pos >= end) return GA_E_LENGTH;
        uint8_t b = buf[(*pos)++];
        if (q == GA_TOPK_VARINT_MAX - 1 && (b & 0x80u || b > 0x0Fu)) return GA_E_VARINT; /* > 5 bytes or > 32 bits */
        v |= (uint32_t)(b & 0x7Fu) << (7 * q);
        if (!(b & 0x80u)) {
            if (q > 0 && b == 0) return GA_E_VARINT; /* non-canonical: a zero final group */
            *out = v;
            return GA_OK;
        }
    }
}

ga_status ga_topk_check(const ga_codec_params *p, const uint8_t *payload, size_t len, size_t n, size_t *count)
{
    if (len < 4) return GA_E_LENGTH;
    size_t c = load_u32(payload);
    if (c > ga_topk_k(n, p->ratio)) return GA_E_LENGTH;
    int fp16 = p->topk_values == GA_TOPK_VALUES_FP16;
    size_t vb = fp16 ? 2 : 4, ib = 4 + c * vb;
    if (ib > len) return GA_E_LENGTH;

    int order_bad = 0, range_bad = 0;
    if (p->topk_indices == GA_TOPK_INDICES_INT32) {
        if (len != ib + 4 * c) return GA_E_LENGTH;
        for (size_t j = 0; j < c; j++) {
            uint32_t i = load_u32(payload + ib + 4 * j);
            if (j > 0 && i <= load_u32(payload + ib + 4 * (j - 1))) order_bad = 1;
            if (i >= n) range_bad = 1;
        }
    } else {
        size_t pos = ib;
        uint64_t idx = 0;
        for (size_t j = 0; j < c; j++) {
            uint32_t d;
            GA_CHECK(varint_get(payload, len, &pos, &d));
            idx = j == 0 ? d : idx + 1 + d;
            if (idx >= n) range_bad = 1;
        }
        if (pos != len) return GA_E_LENGTH;
    }
    if (order_bad) return GA_E_INDEX_ORDER;
    if (range_bad) return GA_E_INDEX_RANGE;
    for (size_t j = 0; j < c; j++) {
        int finite = fp16 ? ga_f16_finite(load_u16(payload + 4 + 2 * j))
                          : ga_f32_bits_finite(load_u32(payload + 4 + 4 * j));
        if (!finite) return GA_E_NONFINITE;
    }
    *count = c;
    return GA_OK;
}

void ga_topk_unpack(const ga_codec_params *p, const uint8_t *payload, size_t count, uint32_t *idx, float *val)
{
    int fp16 = p->topk_values == GA_TOPK_VALUES_FP16;
    size_t vb = fp16 ? 2 : 4, ib = 4 + count * vb;
    for (size_t j = 0; j < count; j++)
        val[j] = ga_topk_value_f32(fp16 ? load_u16(payload + 4 + 2 * j) : load_u32(payload + 4 + 4 * j), fp16);
    if (p->topk_indices == GA_TOPK_INDICES_INT32) {
        for (size_t j = 0; j < count; j++) idx[j] = load_u32(payload + ib + 4 * j);
        return;
    }
    size_t pos = ib;
    for (size_t j = 0; j < count; j++) {
        uint32_t d = 0;
        varint_get(payload, SIZE_MAX, &pos, &d); /* already validated */
        idx[j] = j == 0 ? d : idx[j - 1] + 1 + d;
    }
}

/* ---- slices of a checked payload (ga_codec.h ga_topk_slice) ---- */

static size_t varint_len(uint32_t v)
{
    size_t bytes = 1;
    while (v >>= 7) bytes++;
    return bytes;
}

/* The index of pair at->pair, and where the next pair's index starts. */
static ga_status index_at(const ga_codec_params *p, const uint8_t *payload, size_t len, const ga_topk_cursor *at,
                          uint64_t *idx, size_t *next)
{
    if (p->topk_indices == GA_TOPK_INDICES_INT32) {
        if (len < 4 || at->byte > len - 4) return GA_E_LENGTH;
        *idx = load_u32(payload + at->byte);
        *next = at->byte + 4;
        return GA_OK;
    }
    size_t pos = at->byte;
    uint32_t d;
    GA_CHECK(varint_get(payload, len, &pos, &d));
    *idx = at->pair == 0 ? d : at->prev + 1 + d;
    *next = pos;
    return GA_OK;
}

ga_status ga_topk_slice(const ga_codec_params *params, const void *payload, size_t len, size_t n, size_t lo,
                        size_t m, ga_topk_cursor *cur, void *out, size_t cap, size_t *out_len,
                        ga_codec_params *slice_params)
{
    if (!params || !payload || !cur || !out || !out_len || !slice_params || lo > n || m > n - lo || lo < cur->from)
        return GA_E_INVAL;
    const uint8_t *in = payload;
    if (len < 4) return GA_E_LENGTH;
    size_t c = load_u32(in), vb = params->topk_values == GA_TOPK_VALUES_FP16 ? 2 : 4, ib = 4 + c * vb;
    if (ib > len) return GA_E_LENGTH;
    bool int32 = params->topk_indices == GA_TOPK_INDICES_INT32;

    ga_topk_cursor at = *cur;
    if (at.byte == 0) at.byte = ib; /* a fresh cursor: the first pair */
    uint64_t idx;
    size_t next;
    while (at.pair < c) { /* pairs before the range */
        GA_CHECK(index_at(params, in, len, &at, &idx, &next));
        if (idx >= lo) break;
        at.prev = idx, at.byte = next, at.pair++;
    }
    const ga_topk_cursor first = at;
    uint64_t first_idx = 0;
    size_t first_next = 0;
    while (at.pair < c) { /* pairs in it */
        GA_CHECK(index_at(params, in, len, &at, &idx, &next));
        if (idx >= (uint64_t)lo + m) break;
        if (at.pair == first.pair) first_idx = idx, first_next = next;
        at.prev = idx, at.byte = next, at.pair++;
    }

    /* Varint indices: the first is re-based on lo, the gaps after it are the same bytes. */
    size_t k = at.pair - first.pair;
    size_t index_bytes = int32 ? 4 * k : k ? varint_len((uint32_t)(first_idx - lo)) + (at.byte - first_next) : 0;
    size_t bytes = 4 + k * vb + index_bytes;
    if (bytes > cap) return GA_E_CAPACITY;
    uint8_t *o = out;
    uint32_t k32 = (uint32_t)k;
    memcpy(o, &k32, 4);
    memcpy(o + 4, in + 4 + first.pair * vb, k * vb);
    uint8_t *q = o + 4 + k * vb;
    if (int32) {
        for (size_t j = 0; j < k; j++) {
            uint32_t i = load_u32(in + first.byte + 4 * j) - (uint32_t)lo;
            memcpy(q + 4 * j, &i, 4);
        }
    } else if (k > 0) {
        q += ga_topk_varint_put(q, (uint32_t)(first_idx - lo));
        memcpy(q, in + first_next, at.byte - first_next);
    }
    *out_len = bytes;
    *slice_params = *params;
    slice_params->ratio = 1.0f;
    at.from = lo + m;
    *cur = at;
    return GA_OK;
}
