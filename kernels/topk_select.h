/* Top-k (DGC): the selection decisions shared by the CPU encoder and the CUDA host code, the
 * per-element math both compilers share (GA_HD), and the payload validator both decoders use.
 * The normative statement of the codec (selection, seeds, payload) is docs/wire-format.md, "6
 * topk"; this comment restates the selection for the code here.
 *
 * Encode (residual r, gradient g, n elements, k = min(n, ceil(n * ratio)) in double math):
 *  1. Any non-finite g: GA_E_NONFINITE, nothing changed.
 *  2. r[i] = r[i] + g[i] for every i. key_i = bits(r_i) & 0x7FFFFFFF: the magnitude as an
 *     integer, ordered as |r_i|. Key 0 (r = +-0) is never sent.
 *  3. Threshold thr. n <= GA_TOPK_EXACT_MAX: thr = 0 and no relaxation (exact top-k of every
 *     nonzero element). Otherwise sample: stride = (size_t)(1 / (double)sample_fraction),
 *     clamped to [1, n]; start = ga_topk_splitmix64(seed) % stride; the samples are the keys
 *     of the updated r at start, start + stride, ... < n (s >= 1 of them); m = ceil(s * ratio)
 *     clamped to [1, s]; thr = the m-th largest sample key.
 *  4. Candidates: ascending i with key_i >= max(thr, 1); count of them. While
 *     count < 0.8 k (as doubles) and fewer than adapt_rounds relaxations were made:
 *     thr = bits((float)thr * 0.8f) (ga_topk_relax), recount.
 *  5. count > k: keep the k largest keys; ties at the k-th largest key T go to the lower
 *     indices (all keys > T, then keys == T in index order until k). Indices stay ascending.
 *  6. Each sent element: wire value v = r_i (fp32), or fp16 round-to-nearest-even saturated
 *     to +-65504 (ga_topk_f16); r_i = r_i - decoded(v). Unsent elements keep r_i.
 *  7. Payload: u32 count c; c values (4 or 2 bytes); c indices (u32 each, or LEB128 varints of
 *     idx[0], then idx[j] - idx[j-1] - 1). Little-endian, no padding.
 * Not detected: a residual that overflows to +-Inf (|r + g| > FLT_MAX) is sent as Inf in fp32
 * (which the decoder rejects) or as +-65504 in fp16.
 *
 * Decode_add validates the whole payload first (ga_topk_check), then sum[idx] += value. */
#ifndef GA_TOPK_SELECT_H
#define GA_TOPK_SELECT_H

#include <stddef.h>
#include <stdint.h>

#include "codec_math.h"
#include "ga_codec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Candidates an encode holds before it switches to the histogram fallback: at least this
 * many, and 4k (see ga_topk_plan.cap). */
#define GA_TOPK_CAND_MIN ((size_t)65536)
/* A 32-bit varint takes at most 5 bytes. */
#define GA_TOPK_VARINT_MAX 5u
/* Bins of the 16-bit histograms of the fallback (high half, then low half of the key). */
#define GA_TOPK_HIST_BINS 65536u

GA_HD uint64_t ga_topk_splitmix64(uint64_t seed)
{
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* |r| as an integer: for non-negative floats integer order is float order. */
GA_HD uint32_t ga_topk_key(float r) { return ga_f32_bits(r) & 0x7FFFFFFFu; }

/* One DGC relaxation of the threshold: a float multiply by 0.8f. */
GA_HD uint32_t ga_topk_relax(uint32_t thr) { return ga_f32_bits(ga_f32_from_bits(thr) * 0.8f); }

/* Candidates are key >= ga_topk_floor(thr): thr 0 selects every nonzero element. */
GA_HD uint32_t ga_topk_floor(uint32_t thr) { return thr ? thr : 1u; }

/* fp16 wire value: round to nearest even, never Inf (a finite r beyond the range is sent as
 * +-65504). */
GA_HD uint16_t ga_topk_f16(float r)
{
    uint16_t h = ga_f32_to_f16(r);
    return (h & 0x7FFFu) == 0x7C00u ? (uint16_t)((h & 0x8000u) | 0x7BFFu) : h;
}

/* The wire bits of a sent residual value, fp32 or fp16 (in the low 16 bits). */
GA_HD uint32_t ga_topk_value_bits(float r, int fp16) { return fp16 ? ga_topk_f16(r) : ga_f32_bits(r); }

/* A wire value back as fp32 (exact for both widths). */
GA_HD float ga_topk_value_f32(uint32_t bits, int fp16)
{
    return fp16 ? ga_f16_to_f32((uint16_t)bits) : ga_f32_from_bits(bits);
}

/* Sends r: returns the wire bits and leaves r - decoded(bits) in *r. */
GA_HD uint32_t ga_topk_send(float *r, int fp16)
{
    uint32_t bits = ga_topk_value_bits(*r, fp16);
    *r = *r - ga_topk_value_f32(bits, fp16);
    return bits;
}

/* Writes v as an unsigned LEB128 varint (1..5 bytes); returns the byte count. */
GA_HD uint32_t ga_topk_varint_put(uint8_t *dst, uint32_t v)
{
    uint32_t len = 0;
    while (v >= 0x80u) {
        dst[len++] = (uint8_t)(v | 0x80u);
        v >>= 7;
    }
    dst[len++] = (uint8_t)v;
    return len;
}

/* Everything an encode of n elements decides from the parameters alone. */
typedef struct ga_topk_plan {
    size_t n;
    size_t k;           /* min(n, ceil(n * ratio)) */
    size_t cap;         /* candidates held: min(n, max(4k, GA_TOPK_CAND_MIN)) */
    int exact;          /* n <= GA_TOPK_EXACT_MAX: thr = 0, no sampling, no relaxation */
    size_t start;       /* sampled path: sample j is element start + j * stride, j < samples */
    size_t stride;
    size_t samples;
    size_t m;           /* thr = the m-th largest sample key, 1 <= m <= samples */
    uint32_t rounds;    /* most relaxations (params.adapt_rounds) */
    int fp16;           /* values: 1 = fp16, 0 = fp32 */
    int varint;         /* indices: 1 = varint, 0 = u32 */
    size_t value_bytes; /* 2 or 4 */
} ga_topk_plan;

/* k = min(n, ceil(n * ratio)), as ga_codec_encoded_size computes it. */
size_t ga_topk_k(size_t n, float ratio);

/* Fills *plan for n elements; params valid (registry-checked). */
void ga_topk_plan_init(const ga_codec_params *p, size_t n, ga_topk_plan *plan);

/* True when count candidates are enough (no relaxation): !(count < 0.8 k). */
int ga_topk_enough(size_t count, size_t k);

/* In a histogram (bins counted upward by key), the bin holding the m-th largest key
 * (1 <= m <= total); *above = how many keys lie in higher bins. */
uint32_t ga_topk_hist_pick(const uint64_t *hist, size_t bins, size_t m, size_t *above);

/* The m-th largest of keys[0..count) (1 <= m <= count), by radix select; *greater = how many
 * keys are strictly larger. keys is read only. */
uint32_t ga_topk_kth_largest(const uint32_t *keys, size_t count, size_t m, size_t *greater);

/* Keeps the k largest of the candidates idx[0..count) (ascending, keys[j] the key of idx[j]),
 * ties at the k-th key to the lower index; compacts idx and keys in place, order kept.
 * Returns min(count, k). */
size_t ga_topk_trim(uint32_t *idx, uint32_t *keys, size_t count, size_t k);

/* Splits a selection over blocks taken in order: block b keeps its gt[b] keys above T and the
 * first quota[b] = min(eq[b], still needed) keys equal to T, need_eq in all; offset[b] = the
 * output position of its first kept index. Returns the total kept. */
size_t ga_topk_quotas(const uint32_t *gt, const uint32_t *eq, size_t blocks, size_t need_eq, uint32_t *quota,
                      uint32_t *offset);

/* Validates a payload for n elements, touching nothing. Checks, in this order of precedence:
 * GA_E_LENGTH (len < 4, c > k, values do not fit, u32 indices not exactly filling the rest,
 * varints running out or followed by extra bytes) and GA_E_VARINT (a varint over 5 bytes,
 * over 32 bits, or ending in a zero continuation byte), whichever comes first in the bytes;
 * then GA_E_INDEX_ORDER (u32 indices not strictly increasing); GA_E_INDEX_RANGE (an index
 * >= n); GA_E_NONFINITE (a value with an all-ones exponent). On GA_OK, *count = c. */
ga_status ga_topk_check(const ga_codec_params *p, const uint8_t *payload, size_t len, size_t n, size_t *count);

/* Unpacks a payload that passed ga_topk_check into c indices and fp32 values. */
void ga_topk_unpack(const ga_codec_params *p, const uint8_t *payload, size_t count, uint32_t *idx, float *val);

#ifdef __cplusplus
}
#endif
#endif
