/* DGC top-k on the CPU: a sampled threshold, then one fused pass (error feedback, candidate
 * collection, count), relaxation rescans, exact trimming or a histogram fallback, and the
 * payload; decode_add validates the payload, then scatter-adds. Semantics: topk_select.h.
 *
 * Memory: every scratch buffer is allocated (ga_malloc) before the residual changes, so
 * GA_E_NOMEM leaves it intact, and freed before return. Candidates are held up to
 * plan.cap = min(n, max(4k, 65536)); beyond that the exact k-th key is found by two 16-bit
 * histogram passes over the residual and the selection is written tile by tile, so scratch
 * stays O(cap + k + samples + threads * 256 KiB) whatever the data. */
#include <string.h>

#include "codec_internal.h"
#include "codec_math.h"
#include "ga_alloc.h"
#include "ga_parallel.h"
#include "topk_select.h"

#if GA_X86
#include <immintrin.h>
#endif

/* Slack after each slice's candidate area: a vector store of 16 indices may start at the
 * last held position. */
#define SLACK 16

typedef struct topk_cpu {
    const ga_exec *ex;
    ga_simd simd;
    ga_topk_plan plan;
    const float *grad;
    float *r;
    int slices;          /* contiguous, tile-aligned parts of [0, n), in order */
    size_t *slice_lo;    /* slices + 1 bounds */
    size_t *slice_off;   /* start of each slice's area in cand */
    size_t *slice_cap;   /* candidates each slice holds */
    size_t *slice_count; /* candidates each slice found (may exceed its cap) */
    uint32_t *cand;
    uint32_t *keys;        /* plan.cap: keys of the merged candidates */
    uint32_t *sample_keys; /* plan.samples */
    /* Fallback (plan.cap < n only). */
    uint32_t *sel;       /* plan.k */
    uint32_t *hist32;    /* slices * GA_TOPK_HIST_BINS */
    uint64_t *hist;      /* GA_TOPK_HIST_BINS */
    uint32_t *tile_gt, *tile_eq, *tile_quota, *tile_off;
    void *block;
    /* The current pass. */
    int update;      /* fused pass: r += g first */
    uint32_t floor;  /* candidates: key >= floor */
    int low_half;    /* fallback histogram: 0 = high half of every key, 1 = low half of bin hi_bin */
    uint32_t hi_bin;
    uint32_t t;      /* fallback: the k-th largest key */
} topk_cpu;

/* ---- the scan: r += g (fused pass only), then every key >= floor is counted and, while the
 *      slice has room, its index stored. All paths store the same indices in the same order.
 *      Returns where the vector loop stopped; the scalar loop finishes. ---- */

static size_t scan_scalar(const float *g, float *r, size_t i, size_t hi, uint32_t floor, uint32_t *dst, size_t cap,
                          size_t cnt)
{
    /* Branch-free: the exact path selects most elements. dst[cap] is slack. */
    if (g) {
        for (; i < hi; i++) {
            float v = r[i] + g[i];
            r[i] = v;
            dst[cnt < cap ? cnt : cap] = (uint32_t)i;
            cnt += ga_topk_key(v) >= floor;
        }
    } else {
        for (; i < hi; i++) {
            dst[cnt < cap ? cnt : cap] = (uint32_t)i;
            cnt += ga_topk_key(r[i]) >= floor;
        }
    }
    return cnt;
}

#if GA_X86
static inline size_t emit_bits(uint32_t *dst, size_t cap, size_t cnt, uint32_t m, size_t base)
{
    for (; m; m &= m - 1, cnt++)
        if (cnt < cap) dst[cnt] = (uint32_t)(base + (size_t)__builtin_ctz(m));
    return cnt;
}

/* Compress in a register, then one plain store: the memory form of vpcompressd is microcoded
 * and slow on AMD Zen 4. */
GA_TARGET_AVX512 static size_t scan_avx512(const float *g, float *r, size_t lo, size_t hi, uint32_t floor,
                                           uint32_t *dst, size_t cap, size_t *count)
{
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), vfloor = _mm512_set1_epi32((int)floor);
    const __m512i step = _mm512_set1_epi32(16);
    __m512i idx = _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)lo),
                                   _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    size_t cnt = *count, i = lo;
    if (g) {
        for (; i + 16 <= hi; i += 16) {
            __m512 v = _mm512_add_ps(_mm512_loadu_ps(r + i), _mm512_loadu_ps(g + i));
            _mm512_storeu_ps(r + i, v);
            __mmask16 m = _mm512_cmpge_epu32_mask(_mm512_and_si512(_mm512_castps_si512(v), abs_mask), vfloor);
            if (m) {
                if (cnt <= cap) _mm512_storeu_si512(dst + cnt, _mm512_maskz_compress_epi32(m, idx));
                cnt += (size_t)__builtin_popcount(m);
            }
            idx = _mm512_add_epi32(idx, step);
        }
    } else {
        for (; i + 16 <= hi; i += 16) {
            __m512i key = _mm512_and_si512(_mm512_loadu_si512(r + i), abs_mask);
            __mmask16 m = _mm512_cmpge_epu32_mask(key, vfloor);
            if (m) {
                if (cnt <= cap) _mm512_storeu_si512(dst + cnt, _mm512_maskz_compress_epi32(m, idx));
                cnt += (size_t)__builtin_popcount(m);
            }
            idx = _mm512_add_epi32(idx, step);
        }
    }
    *count = cnt;
    return i;
}

/* Keys are below 2^31, so the signed compare key > floor - 1 is key >= floor. */
GA_TARGET_AVX2 static size_t scan_avx2(const float *g, float *r, size_t lo, size_t hi, uint32_t floor,
                                       uint32_t *dst, size_t cap, size_t *count)
{
    const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF), below = _mm256_set1_epi32((int)(floor - 1u));
    size_t cnt = *count, i = lo;
    if (g) {
        for (; i + 8 <= hi; i += 8) {
            __m256 v = _mm256_add_ps(_mm256_loadu_ps(r + i), _mm256_loadu_ps(g + i));
            _mm256_storeu_ps(r + i, v);
            __m256i key = _mm256_and_si256(_mm256_castps_si256(v), abs_mask);
            uint32_t m = (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(key, below)));
            if (m) cnt = emit_bits(dst, cap, cnt, m, i);
        }
    } else {
        for (; i + 8 <= hi; i += 8) {
            __m256i key = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(r + i)), abs_mask);
            uint32_t m = (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(key, below)));
            if (m) cnt = emit_bits(dst, cap, cnt, m, i);
        }
    }
    *count = cnt;
    return i;
}
#endif

static void scan_slice(topk_cpu *c, int s)
{
    size_t lo = c->slice_lo[s], hi = c->slice_lo[s + 1], cap = c->slice_cap[s], cnt = 0;
    uint32_t *dst = c->cand + c->slice_off[s];
    const float *g = c->update ? c->grad : NULL;
    switch (c->simd) {
#if GA_X86
    case GA_SIMD_AVX512: lo = scan_avx512(g, c->r, lo, hi, c->floor, dst, cap, &cnt); break;
    case GA_SIMD_AVX2: lo = scan_avx2(g, c->r, lo, hi, c->floor, dst, cap, &cnt); break;
#endif
    default: break;
    }
    c->slice_count[s] = scan_scalar(g, c->r, lo, hi, c->floor, dst, cap, cnt);
}

typedef void (*slice_fn)(topk_cpu *c, int s);

/* One OpenMP iteration per slice: results land per slice, so the thread count the runtime
 * actually grants changes nothing. */
static void for_slices(topk_cpu *c, slice_fn fn)
{
    if (c->slices == 1) {
        fn(c, 0);
        return;
    }
#pragma omp parallel for schedule(static, 1) num_threads(c->slices)
    for (int s = 0; s < c->slices; s++) fn(c, s);
}

static size_t scan_all(topk_cpu *c, int update, uint32_t floor)
{
    c->update = update;
    c->floor = floor;
    for_slices(c, scan_slice);
    size_t total = 0;
    for (int s = 0; s < c->slices; s++) total += c->slice_count[s];
    return total;
}

/* Packs the slices' candidates together, in slice order; every slice held all of its own. */
static size_t merge_slices(topk_cpu *c)
{
    size_t w = 0;
    for (int s = 0; s < c->slices; s++) {
        memmove(c->cand + w, c->cand + c->slice_off[s], c->slice_count[s] * sizeof *c->cand);
        w += c->slice_count[s];
    }
    return w;
}

/* ---- threshold from the sample of r + g, taken before the fused pass ---- */

static uint32_t sample_threshold(topk_cpu *c)
{
    const ga_topk_plan *pl = &c->plan;
    const float *g = c->grad, *r = c->r;
    uint32_t *keys = c->sample_keys;
    /* Each sample touches its own cache lines of r and g. */
    int threads = ga_exec_threads(c->ex, (double)pl->samples * 128.0);
    if (threads > 1) {
#pragma omp parallel for schedule(static) num_threads(threads)
        for (size_t j = 0; j < pl->samples; j++) {
            size_t i = pl->start + j * pl->stride;
            keys[j] = ga_topk_key(r[i] + g[i]);
        }
    } else {
        for (size_t j = 0; j < pl->samples; j++) {
            size_t i = pl->start + j * pl->stride;
            keys[j] = ga_topk_key(r[i] + g[i]);
        }
    }
    size_t greater;
    return ga_topk_kth_largest(keys, pl->samples, pl->m, &greater);
}

/* ---- fallback: more than plan.cap candidates. Find the k-th largest key T exactly with two
 *      16-bit histograms (high half, then low half inside the chosen bin), then per tile keep
 *      the keys > T and a quota of the keys == T, the quotas given out in tile order. ---- */

static void hist_slice(topk_cpu *c, int s)
{
    uint32_t *h = c->hist32 + (size_t)s * GA_TOPK_HIST_BINS;
    memset(h, 0, GA_TOPK_HIST_BINS * sizeof *h);
    const float *r = c->r;
    for (size_t i = c->slice_lo[s]; i < c->slice_lo[s + 1]; i++) {
        uint32_t key = ga_topk_key(r[i]);
        if (key < c->floor) continue;
        if (!c->low_half) h[key >> 16]++;
        else if (key >> 16 == c->hi_bin) h[key & 0xFFFFu]++;
    }
}

static void hist_all(topk_cpu *c, int low_half)
{
    c->low_half = low_half;
    for_slices(c, hist_slice);
    memset(c->hist, 0, GA_TOPK_HIST_BINS * sizeof *c->hist);
    for (int s = 0; s < c->slices; s++)
        for (size_t b = 0; b < GA_TOPK_HIST_BINS; b++) c->hist[b] += c->hist32[(size_t)s * GA_TOPK_HIST_BINS + b];
}

static uint32_t tile_count(void *vctx, size_t lo, size_t hi)
{
    topk_cpu *c = vctx;
    for (size_t t = lo / GA_TILE; t * GA_TILE < hi; t++) {
        size_t end = (t + 1) * GA_TILE < hi ? (t + 1) * GA_TILE : hi;
        uint32_t gt = 0, eq = 0;
        for (size_t i = t * GA_TILE; i < end; i++) {
            uint32_t key = ga_topk_key(c->r[i]);
            gt += key > c->t;
            eq += key == c->t;
        }
        c->tile_gt[t] = gt;
        c->tile_eq[t] = eq;
    }
    return 0;
}

static uint32_t tile_select(void *vctx, size_t lo, size_t hi)
{
    topk_cpu *c = vctx;
    for (size_t t = lo / GA_TILE; t * GA_TILE < hi; t++) {
        size_t end = (t + 1) * GA_TILE < hi ? (t + 1) * GA_TILE : hi;
        uint32_t *dst = c->sel + c->tile_off[t], quota = c->tile_quota[t];
        for (size_t i = t * GA_TILE; i < end; i++) {
            uint32_t key = ga_topk_key(c->r[i]);
            if (key > c->t) {
                *dst++ = (uint32_t)i;
            } else if (key == c->t && quota > 0) {
                *dst++ = (uint32_t)i;
                quota--;
            }
        }
    }
    return 0;
}

static size_t select_fallback(topk_cpu *c, uint32_t floor)
{
    size_t k = c->plan.k, above, above_lo;
    c->floor = floor;
    hist_all(c, 0);
    c->hi_bin = ga_topk_hist_pick(c->hist, GA_TOPK_HIST_BINS, k, &above);
    hist_all(c, 1);
    uint32_t lo_bin = ga_topk_hist_pick(c->hist, GA_TOPK_HIST_BINS, k - above, &above_lo);
    c->t = c->hi_bin << 16 | lo_bin;
    size_t n = c->plan.n, tiles = (n + GA_TILE - 1) / GA_TILE;
    ga_parallel_tiles(c->ex, n, 4.0, tile_count, c);
    size_t total = ga_topk_quotas(c->tile_gt, c->tile_eq, tiles, k - above - above_lo, c->tile_quota, c->tile_off);
    ga_parallel_tiles(c->ex, n, 4.0, tile_select, c);
    return total; /* == k */
}

/* ---- payload ---- */

typedef struct write_ctx {
    const uint32_t *sel;
    float *r;
    uint8_t *values, *indices; /* indices NULL: varints, written serially afterwards */
    int fp16;
} write_ctx;

static uint32_t write_tile(void *vctx, size_t lo, size_t hi)
{
    const write_ctx *w = vctx;
    for (size_t j = lo; j < hi; j++) {
        uint32_t bits = ga_topk_send(&w->r[w->sel[j]], w->fp16);
        if (w->fp16) {
            uint16_t h = (uint16_t)bits;
            memcpy(w->values + 2 * j, &h, 2);
        } else {
            memcpy(w->values + 4 * j, &bits, 4);
        }
        if (w->indices) memcpy(w->indices + 4 * j, &w->sel[j], 4);
    }
    return 0;
}

static size_t write_payload(const topk_cpu *c, const uint32_t *sel, size_t count, uint8_t *out)
{
    uint32_t c32 = (uint32_t)count;
    memcpy(out, &c32, 4);
    uint8_t *indices = out + 4 + count * c->plan.value_bytes;
    write_ctx w = {.sel = sel, .r = c->r, .values = out + 4, .indices = c->plan.varint ? NULL : indices,
                   .fp16 = c->plan.fp16};
    ga_parallel_tiles(c->ex, count, 16.0, write_tile, &w);
    if (!c->plan.varint) return (size_t)(indices - out) + 4 * count;
    size_t len = (size_t)(indices - out);
    for (size_t j = 0; j < count; j++) len += ga_topk_varint_put(out + len, j == 0 ? sel[0] : sel[j] - sel[j - 1] - 1u);
    return len;
}

/* ---- scratch: one block, carved ---- */

static void *carve(uint8_t **p, size_t bytes)
{
    void *q = *p;
    *p += (bytes + GA_ALLOC_ALIGN - 1) & ~(size_t)(GA_ALLOC_ALIGN - 1);
    return q;
}

/* Start of slice s of [0, n): whole tiles, split evenly. */
static size_t slice_start(size_t n, size_t slices, size_t s)
{
    size_t tiles = (n + GA_TILE - 1) / GA_TILE, lo = tiles * s / slices * GA_TILE;
    return lo < n ? lo : n;
}

/* A slice holds at most cap candidates (more means the fallback anyway). */
static size_t slice_room(const ga_topk_plan *pl, size_t slices, size_t s)
{
    size_t len = slice_start(pl->n, slices, s + 1) - slice_start(pl->n, slices, s);
    return len < pl->cap ? len : pl->cap;
}

static ga_status scratch_init(topk_cpu *c)
{
    const ga_topk_plan *pl = &c->plan;
    size_t n = pl->n, tiles = (n + GA_TILE - 1) / GA_TILE;
    int slices = ga_exec_threads(c->ex, (double)n * 12.0);
    if ((size_t)slices > tiles) slices = (int)tiles;
    c->slices = slices;
    size_t cand = 0;
    for (int s = 0; s < slices; s++) cand += slice_room(pl, (size_t)slices, (size_t)s) + SLACK;
    int fallback = pl->cap < n;
    size_t sizes[] = {
        (size_t)(slices + 1) * sizeof(size_t),
        (size_t)slices * sizeof(size_t),
        (size_t)slices * sizeof(size_t),
        (size_t)slices * sizeof(size_t),
        cand * sizeof(uint32_t),
        pl->cap * sizeof(uint32_t),
        pl->samples * sizeof(uint32_t),
        fallback ? pl->k * sizeof(uint32_t) : 0,
        fallback ? (size_t)slices * GA_TOPK_HIST_BINS * sizeof(uint32_t) : 0,
        fallback ? GA_TOPK_HIST_BINS * sizeof(uint64_t) : 0,
        fallback ? 4 * tiles * sizeof(uint32_t) : 0,
    };
    size_t total = 0;
    for (size_t j = 0; j < sizeof sizes / sizeof sizes[0]; j++) total += sizes[j] + GA_ALLOC_ALIGN;
    uint8_t *p = ga_malloc(total);
    if (!p) return GA_E_NOMEM;
    c->block = p;
    c->slice_lo = carve(&p, sizes[0]);
    c->slice_off = carve(&p, sizes[1]);
    c->slice_cap = carve(&p, sizes[2]);
    c->slice_count = carve(&p, sizes[3]);
    c->cand = carve(&p, sizes[4]);
    c->keys = carve(&p, sizes[5]);
    c->sample_keys = carve(&p, sizes[6]);
    c->sel = carve(&p, sizes[7]);
    c->hist32 = carve(&p, sizes[8]);
    c->hist = carve(&p, sizes[9]);
    c->tile_gt = carve(&p, sizes[10]);
    c->tile_eq = c->tile_gt + tiles;
    c->tile_quota = c->tile_eq + tiles;
    c->tile_off = c->tile_quota + tiles;
    size_t off = 0;
    for (int s = 0; s <= slices; s++) c->slice_lo[s] = slice_start(n, (size_t)slices, (size_t)s);
    for (int s = 0; s < slices; s++) {
        c->slice_off[s] = off;
        c->slice_cap[s] = slice_room(pl, (size_t)slices, (size_t)s);
        off += c->slice_cap[s] + SLACK;
    }
    return GA_OK;
}

ga_status ga_topk_encode_cpu(const ga_exec *ex, const ga_codec_params *p, const float *grad, float *residual,
                             size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
    (void)cap; /* the registry guarantees room for k pairs */
    topk_cpu c = {.ex = ex, .simd = ga_exec_simd(ex), .grad = grad, .r = residual};
    ga_topk_plan_init(p, n, &c.plan);
    if (n == 0) {
        memset(out, 0, 4);
        *out_len = 4;
        return GA_OK;
    }
    GA_CHECK(scratch_init(&c));
    const ga_topk_plan *pl = &c.plan;

    uint32_t thr = pl->exact ? 0 : sample_threshold(&c);
    size_t count = scan_all(&c, 1, ga_topk_floor(thr));
    for (uint32_t round = 0; !pl->exact && round < pl->rounds && !ga_topk_enough(count, pl->k); round++) {
        uint32_t next = ga_topk_relax(thr);
        /* A fixed point (thr 0, 1 or 2): no later round can change the count. */
        if (ga_topk_floor(next) == ga_topk_floor(thr)) break;
        thr = next;
        count = scan_all(&c, 0, ga_topk_floor(thr));
    }

    const uint32_t *sel = c.cand;
    if (count <= pl->cap) {
        count = merge_slices(&c);
        if (count > pl->k) {
            for (size_t j = 0; j < count; j++) c.keys[j] = ga_topk_key(residual[c.cand[j]]);
            count = ga_topk_trim(c.cand, c.keys, count, pl->k);
        }
    } else {
        count = select_fallback(&c, ga_topk_floor(thr));
        sel = c.sel;
    }
    *out_len = write_payload(&c, sel, count, out);
    ga_free(c.block);
    return GA_OK;
}

/* ---- decode_add ---- */

typedef struct add_ctx {
    const uint8_t *payload;
    size_t count;
    int fp16;
    float *sum;
} add_ctx;

static float value_at(const uint8_t *payload, size_t j, int fp16)
{
    if (fp16) {
        uint16_t h;
        memcpy(&h, payload + 4 + 2 * j, 2);
        return ga_f16_to_f32(h);
    }
    float v;
    memcpy(&v, payload + 4 + 4 * j, 4);
    return v;
}

static uint32_t add_tile_u32(void *vctx, size_t lo, size_t hi)
{
    const add_ctx *a = vctx;
    const uint8_t *indices = a->payload + 4 + a->count * (a->fp16 ? 2 : 4);
    for (size_t j = lo; j < hi; j++) {
        uint32_t i;
        memcpy(&i, indices + 4 * j, 4);
        a->sum[i] = a->sum[i] + value_at(a->payload, j, a->fp16);
    }
    return 0;
}

ga_status ga_topk_decode_add_cpu(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload, size_t len,
                                 size_t n, float *sum)
{
    size_t count;
    GA_CHECK(ga_topk_check(p, payload, len, n, &count));
    add_ctx a = {.payload = payload, .count = count, .fp16 = p->topk_values == GA_TOPK_VALUES_FP16, .sum = sum};
    if (p->topk_indices == GA_TOPK_INDICES_INT32) {
        /* Indices are unique, so tiles of pairs never touch the same element. */
        ga_parallel_tiles(ex, count, 16.0, add_tile_u32, &a);
        return GA_OK;
    }
    const uint8_t *q = payload + 4 + count * (a.fp16 ? 2 : 4);
    uint32_t i = 0;
    for (size_t j = 0; j < count; j++) {
        uint32_t d = 0;
        for (uint32_t shift = 0;; shift += 7) {
            uint8_t b = *q++;
            d |= (uint32_t)(b & 0x7Fu) << shift;
            if (!(b & 0x80u)) break;
        }
        i = j == 0 ? d : i + 1u + d;
        sum[i] = sum[i] + value_at(payload, j, a.fp16);
    }
    return GA_OK;
}
