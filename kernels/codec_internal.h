/* The codec registry row and the per-codec, per-backend entry points it points to. Internal to
 * kernels/. The registry validates parameters, buffer sizes and the backend before calling a
 * row, so implementations may assume: params valid for the codec, out has room for
 * ga_codec_encoded_size bytes, fixed-size payloads have exactly the right length, residual is
 * present exactly when the codec has one, n fits the codec's limit, and (codecs with a
 * residual) grad is finite. */
#ifndef GA_CODEC_INTERNAL_H
#define GA_CODEC_INTERNAL_H

#include "ga_codec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where a 2bit encode selects: params->select, or the threshold when it is 0 (MXNet). */
static inline float ga_2bit_select(const ga_codec_params *p) { return p->select > 0.0f ? p->select : p->threshold; }

typedef ga_status (*ga_encode_fn)(const ga_exec *ex, const ga_codec_params *p, const float *grad,
                                  float *residual, size_t n, uint8_t *out, size_t cap, size_t *out_len);
typedef ga_status (*ga_decode_add_fn)(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload,
                                      size_t len, size_t n, float *sum);

/* One codec = one row of this shape plus its .c and .cu files. add_checked is decode_add less
 * the checks of values (ga_codec_decode_add_checked): its own function for the dense codecs,
 * whose decode otherwise scans every value, and decode_add itself for the others. */
typedef struct ga_codec_row {
    const char *name;
    bool has_residual;
    bool fixed_size;
    bool in_order; /* elements in order at a fixed size each (ga_codec_payload_range) */
    uint64_t max_elements;
    ga_status (*validate)(const ga_codec_params *p);
    size_t (*encoded_size)(const ga_codec_params *p, size_t n);
    ga_encode_fn encode[GA_BACKENDS];
    ga_decode_add_fn decode_add[GA_BACKENDS];
    ga_decode_add_fn add_checked[GA_BACKENDS];
} ga_codec_row;

#define GA_CODEC_ENTRY_POINTS(codec)                                                              \
    ga_status ga_##codec##_encode_cpu(const ga_exec *, const ga_codec_params *, const float *,    \
                                      float *, size_t, uint8_t *, size_t, size_t *);               \
    ga_status ga_##codec##_encode_cuda(const ga_exec *, const ga_codec_params *, const float *,   \
                                       float *, size_t, uint8_t *, size_t, size_t *);              \
    ga_status ga_##codec##_decode_add_cpu(const ga_exec *, const ga_codec_params *, const uint8_t *, \
                                          size_t, size_t, float *);                                \
    ga_status ga_##codec##_decode_add_cuda(const ga_exec *, const ga_codec_params *,              \
                                           const uint8_t *, size_t, size_t, float *);

GA_CODEC_ENTRY_POINTS(none)
GA_CODEC_ENTRY_POINTS(fp16)
GA_CODEC_ENTRY_POINTS(bf16)
GA_CODEC_ENTRY_POINTS(q2bit)
GA_CODEC_ENTRY_POINTS(q1bit)
GA_CODEC_ENTRY_POINTS(q1bit_scaled)
GA_CODEC_ENTRY_POINTS(topk)
GA_CODEC_ENTRY_POINTS(int8)
GA_CODEC_ENTRY_POINTS(int4)

#define GA_CODEC_ADD_CHECKED(codec)                                                                \
    ga_status ga_##codec##_add_checked_cpu(const ga_exec *, const ga_codec_params *, const uint8_t *, \
                                           size_t, size_t, float *);                               \
    ga_status ga_##codec##_add_checked_cuda(const ga_exec *, const ga_codec_params *,              \
                                            const uint8_t *, size_t, size_t, float *);

GA_CODEC_ADD_CHECKED(none)
GA_CODEC_ADD_CHECKED(fp16)
GA_CODEC_ADD_CHECKED(bf16)

/* True when every block scale of an int8 (bits 8) or int4 (bits 4) payload of n elements is one
 * a decoder accepts (ga_int_scale_ok); host memory. */
bool ga_int_scales_ok_cpu(const ga_exec *ex, uint32_t bits, const uint8_t *payload, size_t n);

/* True when every value of x[0..n) is finite (CPU, OpenMP/SIMD by ex). */
bool ga_all_finite_cpu(const ga_exec *ex, const float *x, size_t n);
/* The CUDA twin (codec_dense.cu): sets *finite, blocking until the answer is on the host. */
ga_status ga_all_finite_cuda(const ga_exec *ex, const float *x, size_t n, bool *finite);

#ifdef __cplusplus
}
#endif
#endif
