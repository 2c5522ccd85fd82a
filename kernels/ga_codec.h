/* Gradient codecs: the public contract shared by the client SDK (encode) and the server
 * (decode_add). Byte layouts: docs/wire-format.md. One registry row per codec
 * (codec_registry.c); each codec has a CPU (OpenMP) and a CUDA implementation behind the same
 * signature, producing bit-identical bytes and sums.
 *
 * Pointers: on GA_BACKEND_CPU all buffers are host memory; on GA_BACKEND_CUDA grad, residual,
 * out, payload and sum are device memory (out_len stays a host pointer). All buffers are
 * borrowed for the duration of the call (on CUDA: until ga_exec_sync on the stream returns;
 * kernels are queued, not waited for, unless the call must read a result back). Every function is thread-safe for distinct buffers.
 * Payload buffers (out, payload) must be 4-byte aligned (GA_E_INVAL otherwise); float buffers
 * are naturally aligned.
 *
 * Failure: a call that returns an error leaves residual and sum exactly as they were, and
 * writes *out_len only on success. Nothing aborts on bad input. */
#ifndef GA_CODEC_H
#define GA_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ga_exec.h"
#include "ga_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Wire ids: stable, carried in every chunk. */
typedef enum ga_codec_id {
    GA_CODEC_NONE = 0,        /* fp32 little-endian */
    GA_CODEC_FP16 = 1,        /* IEEE binary16, round to nearest even */
    GA_CODEC_BF16 = 2,        /* bfloat16, round to nearest even */
    GA_CODEC_2BIT = 3,        /* MXNet 2-bit: {-t, 0, +t}, 16 values per 32-bit word */
    GA_CODEC_1BIT = 4,        /* MXNet-master 1-bit: +-1, 32 values per word */
    GA_CODEC_1BIT_SCALED = 5, /* sign bits + one fp32 scale (mean |x|) per block */
    GA_CODEC_TOPK = 6,        /* DGC top-k: (index, value) pairs */
    GA_CODEC_INT8 = 7,        /* per block: one fp32 scale (max |x| / 127) + a signed byte each */
    GA_CODEC_INT4 = 8,        /* per block: one fp32 scale (max |x| / 7) + a signed nibble each */
    GA_CODEC_COUNT = 9
} ga_codec_id;

typedef enum ga_topk_values { GA_TOPK_VALUES_FP32 = 0, GA_TOPK_VALUES_FP16 = 1 } ga_topk_values;
typedef enum ga_topk_indices { GA_TOPK_INDICES_INT32 = 0, GA_TOPK_INDICES_VARINT = 1 } ga_topk_indices;

/* Elements per scale of GA_CODEC_1BIT_SCALED. */
#define GA_1BIT_SCALED_BLOCK 1024u
/* Elements per scale of GA_CODEC_INT8 and GA_CODEC_INT4. */
#define GA_INT_BLOCK 64u
/* The largest scale int8 (2^120) and int4 (2^124) carry: any code of the type times it is at
 * most 2^127, finite. An encode whose block would need more (max |v| above 127 * 2^120, about
 * 1.69e38, or 7 * 2^124, about 1.49e38) fails with GA_E_RANGE; a decode refuses it with
 * GA_E_NONFINITE. */
#define GA_INT8_MAX_SCALE 0x1p120f
#define GA_INT4_MAX_SCALE 0x1p124f
/* Top-k selects exactly (no sampling) at or below this many elements. */
#define GA_TOPK_EXACT_MAX 65536u
/* Most threshold relaxations a top-k encode may be asked for. */
#define GA_TOPK_MAX_ROUNDS 64u
/* Top-k indices are 32-bit: the largest tensor it can carry. */
#define GA_TOPK_MAX_ELEMENTS 0xFFFFFFFFull

/* Codec parameters as carried on the wire (floats as exact IEEE bits, never as text).
 * A codec reads only its own fields; see ga_codec_params_default. */
typedef struct ga_codec_params {
    float threshold;         /* 2bit: t, the level sent (+-t), finite and > 0. 1bit: t, finite
                                (compared with >). */
    float ratio;             /* topk: keep ratio, in (0, 1]; k = ceil(n * ratio) */
    float sample_fraction;   /* topk: fraction sampled for the threshold, in (0, 1] */
    uint32_t adapt_rounds;   /* topk: most times the threshold is relaxed by 0.8 */
    uint64_t seed;           /* topk: picks the sample's start; vary it per step */
    uint8_t topk_values;     /* topk: ga_topk_values */
    uint8_t topk_indices;    /* topk: ga_topk_indices */
    float select;            /* 2bit encode only, never on the wire: elements with |x| >= select
                                are sent (as +-threshold); 0 = select at the threshold (MXNet),
                                else finite and > 0 */
} ga_codec_params;

/* Defaults: 2bit t = 0.5 (MXNet), 1bit t = 0 (MXNet), topk ratio 0.001, sample 0.01,
 * 10 rounds, seed 0, fp32 values, int32 indices (DGC). */
ga_codec_params ga_codec_params_default(ga_codec_id codec);

/* "none", "fp16", "bf16", "2bit", "1bit", "1bit_scaled", "topk", "int8", "int4"; NULL for an
 * unknown id. */
const char *ga_codec_name(ga_codec_id codec);
/* Looks a codec up by name. *out written on success; GA_E_CODEC otherwise. */
ga_status ga_codec_from_name(const char *name, ga_codec_id *out);
/* True for codecs that keep an error-feedback residual on the sender (2bit, 1bit,
 * 1bit_scaled, topk, int8, int4). Their encode requires a residual buffer; the others take NULL. */
bool ga_codec_has_residual(ga_codec_id codec);
/* True when the payload size depends only on n (every codec but topk). */
bool ga_codec_fixed_size(ga_codec_id codec);
/* True when a payload carries every element in order at a fixed size, so that a range of
 * elements is a range of bytes (ga_codec_payload_range): none, fp16, bf16, 2bit, 1bit, int8,
 * int4 (whose scales sit in their blocks). */
bool ga_codec_in_order(ga_codec_id codec);

/* Checks the fields the codec reads: GA_E_CODEC, GA_E_THRESHOLD, GA_E_RATIO or GA_E_INVAL. */
ga_status ga_codec_params_validate(ga_codec_id codec, const ga_codec_params *params);

/* Bytes of a payload of n elements: exact for fixed-size codecs, the most an encode can
 * produce for topk. GA_E_TOO_LARGE when n exceeds the codec's limit. */
ga_status ga_codec_encoded_size(ga_codec_id codec, const ga_codec_params *params, size_t n, size_t *bytes);

/* Where every range of ga_codec_payload_range starts: a multiple of every codec's block. */
#define GA_CODEC_RANGE_ALIGN 1024u

/* The bytes of a payload of n elements that carry elements [lo, lo + m): *off from the payload's
 * start, *len long; decoding them as a payload of m elements gives exactly those elements. For
 * the codecs that carry every element in order (ga_codec_in_order), with lo a multiple of
 * GA_CODEC_RANGE_ALIGN and lo + m <= n. Errors: parameter errors, GA_E_TOO_LARGE, and GA_E_INVAL
 * for the other codecs (1bit_scaled keeps its scales apart; a top-k pair goes where its index
 * says) or a range outside these rules. */
ga_status ga_codec_payload_range(ga_codec_id codec, const ga_codec_params *params, size_t n, size_t lo, size_t m,
                                 size_t *off, size_t *len);

/* Encodes n gradients into out (capacity `cap` bytes) and writes the payload length.
 * Codecs with a residual first add grad into residual (error feedback), encode the sum and
 * leave what was not sent in residual; grad is read only.
 * Errors: parameter errors as ga_codec_params_validate; GA_E_INVAL (NULL buffer, residual
 * given or missing against ga_codec_has_residual); GA_E_CAPACITY; GA_E_NONFINITE when grad
 * holds NaN or Inf (checked before residual changes); GA_E_RANGE when a dense fp16/bf16
 * value overflows the wire type or an int8/int4 block needs a scale above GA_INT8/4_MAX_SCALE
 * (checked before residual changes); GA_E_NO_CUDA / GA_E_NO_DEVICE / GA_E_CUDA. */
ga_status ga_codec_encode(const ga_exec *ex, ga_codec_id codec, const ga_codec_params *params,
                          const float *grad, float *residual, size_t n, void *out, size_t cap,
                          size_t *out_len);

/* GA_OK when every value of x[0..n) is finite, GA_E_NONFINITE when one is NaN or Inf. x lives
 * on ex's backend (host or device memory); the scan is vectorised and spread over ex's threads
 * on the CPU, and blocks until the answer is on the host on CUDA. Errors: GA_E_INVAL (x NULL
 * with n > 0); GA_E_NO_CUDA / GA_E_NO_DEVICE / GA_E_CUDA. */
ga_status ga_check_finite(const ga_exec *ex, const float *x, size_t n);

/* Decodes a payload of n elements and adds it into sum: sum[i] = sum[i] + decoded[i] for
 * every i (zeros included), with no dense temporary. Validates everything first; on any error
 * sum is untouched. Errors: parameter errors; GA_E_LENGTH; GA_E_INDEX_RANGE; GA_E_INDEX_ORDER;
 * GA_E_NONFINITE (a value, or a 1bit_scaled scale, that is NaN or Inf, or a negative scale; an
 * int8/int4 scale outside [0, GA_INT8/4_MAX_SCALE]);
 * GA_E_VARINT; GA_E_TOO_LARGE; GA_E_NO_CUDA / GA_E_NO_DEVICE / GA_E_CUDA. */
ga_status ga_codec_decode_add(const ga_exec *ex, ga_codec_id codec, const ga_codec_params *params,
                              const void *payload, size_t len, size_t n, float *sum);

/* ga_codec_decode_add for a payload already checked (ga_codec_check_payload, or a decode of the
 * same bytes): the checks of its values are not run again, so a dense payload (none, fp16,
 * bf16) is read once instead of twice, and on CUDA its add is queued on ex's stream without
 * waiting for the device. Every check that keeps memory safe still runs (lengths; top-k's
 * indices), so a payload that was not checked gives wrong sums, never a stray access. The
 * same sums, bit for bit, as ga_codec_decode_add; the same errors but GA_E_NONFINITE for the
 * dense codecs. */
ga_status ga_codec_decode_add_checked(const ga_exec *ex, ga_codec_id codec, const ga_codec_params *params,
                                      const void *payload, size_t len, size_t n, float *sum);

/* Checks a payload of n elements (host memory) exactly as ga_codec_decode_add would, without
 * adding it anywhere: the same errors, so a receiver can refuse a bad chunk before any state
 * changes. CPU only, any thread. */
ga_status ga_codec_check_payload(ga_codec_id codec, const ga_codec_params *params, const void *payload,
                                 size_t len, size_t n);

/* Where a walk over one top-k payload stands between ga_topk_slice calls. Zero it before the
 * first slice of a payload. */
typedef struct ga_topk_cursor {
    size_t pair;   /* the first pair not yet passed */
    size_t byte;   /* where that pair's index starts in the payload */
    uint64_t prev; /* the index of pair - 1 (varint indices count from it) */
    size_t from;   /* the lowest element the next slice may start at */
} ga_topk_cursor;

/* Cuts a top-k payload into ranges, so a long one can be decoded block by block: writes into
 * out a top-k payload of m elements holding the pairs of `payload` (n elements, host memory)
 * whose index lies in [lo, lo + m), each index less lo, in the same value and index formats.
 * Decoding it as m elements with *slice_params (params with ratio 1, since one range may hold
 * more than its share of the pairs) adds exactly those elements. The payload must have passed
 * ga_codec_check_payload; a slice is never longer than the payload, so out needs at most len
 * bytes (cap). Slices of one payload are taken in increasing, disjoint ranges, with *cur
 * carrying the position from one call to the next; a range before the cursor's is GA_E_INVAL.
 * Errors: GA_E_INVAL (NULL pointers, lo + m > n), GA_E_CAPACITY, and GA_E_LENGTH /
 * GA_E_VARINT for a payload that runs out (nothing past len is read). On an error *cur and out
 * are as they were. */
ga_status ga_topk_slice(const ga_codec_params *params, const void *payload, size_t len, size_t n, size_t lo,
                        size_t m, ga_topk_cursor *cur, void *out, size_t cap, size_t *out_len,
                        ga_codec_params *slice_params);

#ifdef __cplusplus
}
#endif
#endif
