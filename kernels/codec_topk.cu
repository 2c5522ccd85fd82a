/* DGC top-k on CUDA, mirroring codec_topk.c: kernels do the per-element work (finite check,
 * r += g with per-block counts, order-preserving compaction, histograms, payload values and
 * residual); the host makes the small decisions with the same topk_select.c functions over
 * copied-back keys and counts, so payload and residual are bit-identical to the CPU.
 * Semantics: topk_select.h.
 *
 * Blocks own PER_BLOCK contiguous elements; a block's selected indices go to an offset given
 * by an exclusive scan (on the host) of the per-block counts, in index order within the block
 * (warp ballots), so the candidate list is in ascending order without sorting. Counts use
 * integer atomics or __syncthreads_count only. Scratch (device: ga_cuda_scratch_alloc, host:
 * ga_malloc) is allocated before the residual changes and freed before return; a CUDA error
 * after that point returns GA_E_CUDA with the residual possibly updated. */
#include <cuda_runtime.h>

#include <string.h>

#include "codec_internal.h"
#include "codec_math.h"
#include "cuda_check.h"
#include "ga_alloc.h"
#include "topk_select.h"

#define THREADS 256
#define ITEMS 16
#define PER_BLOCK ((size_t)THREADS * ITEMS)
#define MAX_GRID 8192
#define NO_KEY 0xFFFFFFFFu /* keys are below 2^31: never equal */

static unsigned grid_for(size_t n)
{
    size_t g = (n + THREADS - 1) / THREADS;
    return (unsigned)(g < 1 ? 1 : (g > MAX_GRID ? MAX_GRID : g));
}

/* ---- kernels ---- */

/* Keys of r + g at the sample positions, before r changes (as the CPU does). */
__global__ static void sample_kernel(const float *g, const float *r, size_t start, size_t stride, size_t samples,
                                     uint32_t *keys)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < samples; j += (size_t)gridDim.x * blockDim.x) {
        size_t i = start + j * stride;
        keys[j] = ga_topk_key(r[i] + g[i]);
    }
}

/* Per block: how many keys are > gt_key and == eq_key; with update, r += g first. */
__global__ static void count_kernel(const float *g, float *r, size_t n, int update, uint32_t gt_key,
                                    uint32_t eq_key, uint32_t *gt_out, uint32_t *eq_out)
{
    size_t base = (size_t)blockIdx.x * PER_BLOCK;
    uint32_t gt = 0, eq = 0;
    for (int it = 0; it < ITEMS; it++) {
        size_t i = base + (size_t)it * THREADS + threadIdx.x;
        int pg = 0, pe = 0;
        if (i < n) {
            float v = r[i];
            if (update) {
                v = v + g[i];
                r[i] = v;
            }
            uint32_t key = ga_topk_key(v);
            pg = key > gt_key;
            pe = key == eq_key;
        }
        gt += (uint32_t)__syncthreads_count(pg);
        eq += (uint32_t)__syncthreads_count(pe);
    }
    if (threadIdx.x == 0) {
        gt_out[blockIdx.x] = gt;
        eq_out[blockIdx.x] = eq;
    }
}

/* Writes, in index order from offset[b], every index with key > gt_key and the first quota[b]
 * with key == eq_key; the same predicates as count_kernel. */
__global__ static void compact_kernel(const float *r, size_t n, uint32_t gt_key, uint32_t eq_key,
                                      const uint32_t *quota, const uint32_t *offset, uint32_t *idx_out,
                                      uint32_t *key_out)
{
    __shared__ uint32_t warp_gt[THREADS / 32], warp_eq[THREADS / 32];
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, lt = (1u << lane) - 1u;
    const size_t base = (size_t)blockIdx.x * PER_BLOCK;
    const uint32_t q = quota[blockIdx.x], off = offset[blockIdx.x];
    uint32_t done_gt = 0, done_eq = 0;
    for (int it = 0; it < ITEMS; it++) {
        size_t i = base + (size_t)it * THREADS + threadIdx.x;
        uint32_t key = i < n ? ga_topk_key(r[i]) : 0u;
        bool pg = i < n && key > gt_key, pe = i < n && key == eq_key;
        unsigned bg = __ballot_sync(0xFFFFFFFFu, pg), be = __ballot_sync(0xFFFFFFFFu, pe);
        if (lane == 0) {
            warp_gt[warp] = (uint32_t)__popc(bg);
            warp_eq[warp] = (uint32_t)__popc(be);
        }
        __syncthreads();
        uint32_t pre_gt = 0, pre_eq = 0, all_gt = 0, all_eq = 0;
        for (unsigned w = 0; w < THREADS / 32; w++) {
            if (w < warp) {
                pre_gt += warp_gt[w];
                pre_eq += warp_eq[w];
            }
            all_gt += warp_gt[w];
            all_eq += warp_eq[w];
        }
        uint32_t gt_before = done_gt + pre_gt + (uint32_t)__popc(bg & lt);
        uint32_t eq_before = done_eq + pre_eq + (uint32_t)__popc(be & lt);
        if (pg || (pe && eq_before < q)) {
            uint32_t pos = off + gt_before + (eq_before < q ? eq_before : q);
            idx_out[pos] = (uint32_t)i;
            if (key_out) key_out[pos] = key;
        }
        done_gt += all_gt;
        done_eq += all_eq;
        __syncthreads(); /* warp_gt/warp_eq are rewritten next round */
    }
}

/* Fallback histograms: high half of every key >= floor, or low half of those in bin hi_bin. */
__global__ static void hist_kernel(const float *r, size_t n, uint32_t floor, int low_half, uint32_t hi_bin,
                                   uint32_t *hist)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t key = ga_topk_key(r[i]);
        if (key < floor) continue;
        if (!low_half) atomicAdd(&hist[key >> 16], 1u);
        else if (key >> 16 == hi_bin) atomicAdd(&hist[key & 0xFFFFu], 1u);
    }
}

/* Wire values and residual of the sent elements; u32 indices bytewise (they may sit at a
 * 2-byte boundary after fp16 values). */
__global__ static void payload_kernel(const uint32_t *sel, size_t count, float *r, int fp16, uint8_t *values,
                                      uint8_t *indices)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < count; j += (size_t)gridDim.x * blockDim.x) {
        uint32_t i = sel[j];
        uint32_t bits = ga_topk_send(&r[i], fp16);
        if (fp16) ((uint16_t *)values)[j] = (uint16_t)bits;
        else ((uint32_t *)values)[j] = bits;
        if (indices)
            for (int b = 0; b < 4; b++) indices[4 * j + b] = (uint8_t)(i >> (8 * b));
    }
}

/* Indices are unique: no two threads touch one element. */
__global__ static void scatter_add_kernel(const uint32_t *idx, const float *val, size_t count, float *sum)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < count; j += (size_t)gridDim.x * blockDim.x)
        sum[idx[j]] = sum[idx[j]] + val[j];
}

/* ---- encode ---- */

typedef struct topk_gpu {
    cudaStream_t st;
    ga_topk_plan plan;
    const float *grad;
    float *r;
    uint8_t *out;
    size_t blocks;
    /* device */
    uint32_t *d_gt, *d_eq, *d_quota, *d_off, *d_samples, *d_idx, *d_keys, *d_hist;
    /* host */
    uint32_t *h_gt, *h_eq, *h_quota, *h_off, *h_samples, *h_idx, *h_keys, *h_hist;
    uint64_t *h_hist64;
    uint8_t *h_varint;
    uint32_t h_header;
} topk_gpu;

static size_t round_up(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

template <typename T> static T *carve(uint8_t **p, size_t count)
{
    T *q = (T *)*p;
    *p += round_up(count * sizeof(T));
    return q;
}

static ga_status wait_stream(topk_gpu *c)
{
    GA_CUDA_TRY(cudaStreamSynchronize(c->st));
    return GA_OK;
}

/* Per-block counts of key > gt_key and key == eq_key, on the host; returns the sum of gt. */
static ga_status count_blocks(topk_gpu *c, int update, uint32_t gt_key, uint32_t eq_key, size_t *total)
{
    count_kernel<<<(unsigned)c->blocks, THREADS, 0, c->st>>>(c->grad, c->r, c->plan.n, update, gt_key, eq_key,
                                                               c->d_gt, c->d_eq);
    GA_CUDA_TRY(cudaGetLastError());
    GA_CUDA_TRY(cudaMemcpyAsync(c->h_gt, c->d_gt, c->blocks * sizeof(uint32_t), cudaMemcpyDefault, c->st));
    GA_CUDA_TRY(cudaMemcpyAsync(c->h_eq, c->d_eq, c->blocks * sizeof(uint32_t), cudaMemcpyDefault, c->st));
    GA_CHECK(wait_stream(c));
    size_t sum = 0;
    for (size_t b = 0; b < c->blocks; b++) sum += c->h_gt[b];
    *total = sum;
    return GA_OK;
}

/* Compacts with the counts in h_gt/h_eq (from count_blocks with the same keys) into d_idx
 * (and d_keys when want_keys); returns how many were written. */
static ga_status compact(topk_gpu *c, uint32_t gt_key, uint32_t eq_key, size_t need_eq, int want_keys,
                         size_t *written)
{
    *written = ga_topk_quotas(c->h_gt, c->h_eq, c->blocks, need_eq, c->h_quota, c->h_off);
    GA_CUDA_TRY(cudaMemcpyAsync(c->d_quota, c->h_quota, c->blocks * sizeof(uint32_t), cudaMemcpyDefault, c->st));
    GA_CUDA_TRY(cudaMemcpyAsync(c->d_off, c->h_off, c->blocks * sizeof(uint32_t), cudaMemcpyDefault, c->st));
    compact_kernel<<<(unsigned)c->blocks, THREADS, 0, c->st>>>(c->r, c->plan.n, gt_key, eq_key, c->d_quota,
                                                                 c->d_off, c->d_idx, want_keys ? c->d_keys : NULL);
    GA_CUDA_TRY(cudaGetLastError());
    return GA_OK;
}

static ga_status histogram(topk_gpu *c, uint32_t floor, int low_half, uint32_t hi_bin)
{
    GA_CUDA_TRY(cudaMemsetAsync(c->d_hist, 0, GA_TOPK_HIST_BINS * sizeof(uint32_t), c->st));
    hist_kernel<<<grid_for(c->plan.n), THREADS, 0, c->st>>>(c->r, c->plan.n, floor, low_half, hi_bin, c->d_hist);
    GA_CUDA_TRY(cudaGetLastError());
    GA_CUDA_TRY(cudaMemcpyAsync(c->h_hist, c->d_hist, GA_TOPK_HIST_BINS * sizeof(uint32_t), cudaMemcpyDefault, c->st));
    GA_CHECK(wait_stream(c));
    for (size_t b = 0; b < GA_TOPK_HIST_BINS; b++) c->h_hist64[b] = c->h_hist[b];
    return GA_OK;
}

/* Selection into d_idx (and h_idx when the host needs the indices); *count = how many. */
static ga_status select_indices(topk_gpu *c, size_t *count)
{
    const ga_topk_plan *pl = &c->plan;
    uint32_t thr = 0;
    if (!pl->exact) {
        sample_kernel<<<grid_for(pl->samples), THREADS, 0, c->st>>>(c->grad, c->r, pl->start, pl->stride,
                                                                     pl->samples, c->d_samples);
        GA_CUDA_TRY(cudaGetLastError());
        GA_CUDA_TRY(cudaMemcpyAsync(c->h_samples, c->d_samples, pl->samples * sizeof(uint32_t), cudaMemcpyDefault,
                           c->st));
        GA_CHECK(wait_stream(c));
        size_t greater;
        thr = ga_topk_kth_largest(c->h_samples, pl->samples, pl->m, &greater);
    }
    size_t total;
    GA_CHECK(count_blocks(c, 1, ga_topk_floor(thr) - 1u, NO_KEY, &total));
    for (uint32_t round = 0; !pl->exact && round < pl->rounds && !ga_topk_enough(total, pl->k); round++) {
        uint32_t next = ga_topk_relax(thr);
        if (ga_topk_floor(next) == ga_topk_floor(thr)) break; /* fixed point, as on the CPU */
        thr = next;
        GA_CHECK(count_blocks(c, 0, ga_topk_floor(thr) - 1u, NO_KEY, &total));
    }

    if (total <= pl->cap) {
        size_t written;
        GA_CHECK(compact(c, ga_topk_floor(thr) - 1u, NO_KEY, 0, 1, &written));
        if (written <= pl->k) {
            *count = written;
            if (!pl->varint) return GA_OK;
            GA_CUDA_TRY(cudaMemcpyAsync(c->h_idx, c->d_idx, written * sizeof(uint32_t), cudaMemcpyDefault, c->st));
            return wait_stream(c);
        }
        GA_CUDA_TRY(cudaMemcpyAsync(c->h_idx, c->d_idx, written * sizeof(uint32_t), cudaMemcpyDefault, c->st));
        GA_CUDA_TRY(cudaMemcpyAsync(c->h_keys, c->d_keys, written * sizeof(uint32_t), cudaMemcpyDefault, c->st));
        GA_CHECK(wait_stream(c));
        *count = ga_topk_trim(c->h_idx, c->h_keys, written, pl->k);
        GA_CUDA_TRY(cudaMemcpyAsync(c->d_idx, c->h_idx, *count * sizeof(uint32_t), cudaMemcpyDefault, c->st));
        return GA_OK;
    }

    /* More than cap candidates: the exact k-th key T from two histograms, then a compaction
     * with per-block quotas of the keys equal to T. */
    uint32_t floor = ga_topk_floor(thr);
    size_t above, above_lo;
    GA_CHECK(histogram(c, floor, 0, 0));
    uint32_t hi_bin = ga_topk_hist_pick(c->h_hist64, GA_TOPK_HIST_BINS, pl->k, &above);
    GA_CHECK(histogram(c, floor, 1, hi_bin));
    uint32_t t = hi_bin << 16 | ga_topk_hist_pick(c->h_hist64, GA_TOPK_HIST_BINS, pl->k - above, &above_lo);
    GA_CHECK(count_blocks(c, 0, t, t, &total));
    GA_CHECK(compact(c, t, t, pl->k - above - above_lo, 0, count));
    if (!pl->varint) return GA_OK;
    GA_CUDA_TRY(cudaMemcpyAsync(c->h_idx, c->d_idx, *count * sizeof(uint32_t), cudaMemcpyDefault, c->st));
    return wait_stream(c);
}

static ga_status encode_body(topk_gpu *c, size_t *out_len)
{
    const ga_topk_plan *pl = &c->plan;
    size_t count;
    GA_CHECK(select_indices(c, &count));
    c->h_header = (uint32_t)count;
    GA_CUDA_TRY(cudaMemcpyAsync(c->out, &c->h_header, 4, cudaMemcpyDefault, c->st));
    uint8_t *indices = c->out + 4 + count * pl->value_bytes;
    if (count > 0) {
        payload_kernel<<<grid_for(count), THREADS, 0, c->st>>>(c->d_idx, count, c->r, pl->fp16, c->out + 4,
                                                               pl->varint ? NULL : indices);
        GA_CUDA_TRY(cudaGetLastError());
    }
    size_t len = (size_t)(indices - c->out);
    if (!pl->varint) {
        len += 4 * count;
    } else {
        size_t vlen = 0;
        for (size_t j = 0; j < count; j++)
            vlen += ga_topk_varint_put(c->h_varint + vlen, j == 0 ? c->h_idx[0] : c->h_idx[j] - c->h_idx[j - 1] - 1u);
        if (vlen > 0) GA_CUDA_TRY(cudaMemcpyAsync(indices, c->h_varint, vlen, cudaMemcpyDefault, c->st));
        len += vlen;
    }
    GA_CHECK(wait_stream(c));
    *out_len = len;
    return GA_OK;
}

ga_status ga_topk_encode_cuda(const ga_exec *ex, const ga_codec_params *p, const float *grad, float *residual,
                              size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
    (void)cap; /* the registry guarantees room for k pairs */
    topk_gpu c;
    memset(&c, 0, sizeof c);
    c.st = (cudaStream_t)ex->cuda_stream;
    c.grad = grad;
    c.r = residual;
    c.out = out;
    ga_topk_plan_init(p, n, &c.plan);
    const ga_topk_plan *pl = &c.plan;
    if (n == 0) {
        c.h_header = 0;
        GA_CUDA_TRY(cudaMemcpyAsync(out, &c.h_header, 4, cudaMemcpyDefault, c.st));
        GA_CUDA_TRY(cudaStreamSynchronize(c.st));
        *out_len = 4;
        return GA_OK;
    }
    c.blocks = (n + PER_BLOCK - 1) / PER_BLOCK;
    int fallback = pl->cap < n;
    size_t hist = fallback ? GA_TOPK_HIST_BINS : 0;

    size_t dev_bytes = 4 * round_up(c.blocks * 4) + round_up(pl->samples * 4) +
                       2 * round_up(pl->cap * 4) + round_up(hist * 4);
    size_t host_bytes = 4 * round_up(c.blocks * 4) + round_up(pl->samples * 4) + 2 * round_up(pl->cap * 4) +
                        round_up(hist * 4) + round_up(hist * 8) + round_up(pl->varint ? pl->k * 5 : 0);
    void *dev = NULL;
    GA_CHECK(ga_cuda_scratch_alloc(c.st, dev_bytes, &dev));
    uint8_t *host = (uint8_t *)ga_malloc(host_bytes);
    if (!host) {
        (void)ga_cuda_scratch_free(c.st, dev, dev_bytes);
        return GA_E_NOMEM;
    }
    uint8_t *d = (uint8_t *)dev, *h = host;
    c.d_gt = carve<uint32_t>(&d, c.blocks);
    c.d_eq = carve<uint32_t>(&d, c.blocks);
    c.d_quota = carve<uint32_t>(&d, c.blocks);
    c.d_off = carve<uint32_t>(&d, c.blocks);
    c.d_samples = carve<uint32_t>(&d, pl->samples);
    c.d_idx = carve<uint32_t>(&d, pl->cap);
    c.d_keys = carve<uint32_t>(&d, pl->cap);
    c.d_hist = carve<uint32_t>(&d, hist);
    c.h_gt = carve<uint32_t>(&h, c.blocks);
    c.h_eq = carve<uint32_t>(&h, c.blocks);
    c.h_quota = carve<uint32_t>(&h, c.blocks);
    c.h_off = carve<uint32_t>(&h, c.blocks);
    c.h_samples = carve<uint32_t>(&h, pl->samples);
    c.h_idx = carve<uint32_t>(&h, pl->cap);
    c.h_keys = carve<uint32_t>(&h, pl->cap);
    c.h_hist = carve<uint32_t>(&h, hist);
    c.h_hist64 = carve<uint64_t>(&h, hist);
    c.h_varint = carve<uint8_t>(&h, pl->varint ? pl->k * 5 : 0);

    ga_status rc = encode_body(&c, out_len);
    ga_status freed = ga_cuda_scratch_free(c.st, dev, dev_bytes);
    cudaStreamSynchronize(c.st); /* nothing may still use the host scratch (or the header) */
    ga_free(host);
    return rc != GA_OK ? rc : freed;
}

/* ---- decode_add: the payload is small; validate and unpack it on the host with the CPU's
 *      code, then scatter-add on the device ---- */

static ga_status decode_body(cudaStream_t st, const ga_codec_params *p, const uint8_t *payload, size_t len,
                             size_t n, float *sum, uint8_t *h_payload, void **dev, size_t *dev_bytes)
{
    GA_CUDA_TRY(cudaMemcpyAsync(h_payload, payload, len, cudaMemcpyDefault, st));
    GA_CUDA_TRY(cudaStreamSynchronize(st));
    size_t count;
    GA_CHECK(ga_topk_check(p, h_payload, len, n, &count));
    if (count == 0) return GA_OK;
    size_t bytes = round_up(count * sizeof(uint32_t)) + count * sizeof(float);
    uint8_t *h = (uint8_t *)ga_malloc(bytes);
    if (!h) return GA_E_NOMEM;
    uint32_t *h_idx = (uint32_t *)h;
    float *h_val = (float *)(h + round_up(count * sizeof(uint32_t)));
    ga_topk_unpack(p, h_payload, count, h_idx, h_val);
    ga_status rc = ga_cuda_scratch_alloc(st, bytes, dev);
    if (rc == GA_OK) {
        *dev_bytes = bytes;
        rc = GA_E_CUDA;
        uint8_t *d = (uint8_t *)*dev;
        if (cudaMemcpyAsync(d, h, bytes, cudaMemcpyDefault, st) == cudaSuccess) {
            scatter_add_kernel<<<grid_for(count), THREADS, 0, st>>>(
                (const uint32_t *)d, (const float *)(d + round_up(count * sizeof(uint32_t))), count, sum);
            if (cudaGetLastError() == cudaSuccess && cudaStreamSynchronize(st) == cudaSuccess) rc = GA_OK;
        }
        if (rc != GA_OK) (void)cudaGetLastError();
    }
    ga_free(h);
    return rc;
}

ga_status ga_topk_decode_add_cuda(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload, size_t len,
                                  size_t n, float *sum)
{
    cudaStream_t st = (cudaStream_t)ex->cuda_stream;
    uint8_t *h_payload = (uint8_t *)ga_malloc(len);
    if (!h_payload) return GA_E_NOMEM;
    void *dev = NULL;
    size_t dev_bytes = 0;
    ga_status rc = decode_body(st, p, payload, len, n, sum, h_payload, &dev, &dev_bytes);
    ga_status freed = ga_cuda_scratch_free(st, dev, dev_bytes);
    cudaStreamSynchronize(st);
    ga_free(h_payload);
    return rc != GA_OK ? rc : freed;
}
