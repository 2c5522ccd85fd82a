/* PLACEHOLDER: replaced by the real implementation in this session. */
#include "codec_internal.h"

ga_status ga_none_encode_cuda(const ga_exec *ex, const ga_codec_params *p, const float *g, float *r,
    size_t n, uint8_t *out, size_t cap, size_t *out_len)
{ (void)ex, (void)p, (void)g, (void)r, (void)n, (void)out, (void)cap, (void)out_len; return GA_E_NO_CUDA; }
ga_status ga_none_decode_add_cuda(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload,
    size_t len, size_t n, float *sum)
{ (void)ex, (void)p, (void)payload, (void)len, (void)n, (void)sum; return GA_E_NO_CUDA; }
ga_status ga_fp16_encode_cuda(const ga_exec *ex, const ga_codec_params *p, const float *g, float *r,
    size_t n, uint8_t *out, size_t cap, size_t *out_len)
{ (void)ex, (void)p, (void)g, (void)r, (void)n, (void)out, (void)cap, (void)out_len; return GA_E_NO_CUDA; }
ga_status ga_fp16_decode_add_cuda(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload,
    size_t len, size_t n, float *sum)
{ (void)ex, (void)p, (void)payload, (void)len, (void)n, (void)sum; return GA_E_NO_CUDA; }
ga_status ga_bf16_encode_cuda(const ga_exec *ex, const ga_codec_params *p, const float *g, float *r,
    size_t n, uint8_t *out, size_t cap, size_t *out_len)
{ (void)ex, (void)p, (void)g, (void)r, (void)n, (void)out, (void)cap, (void)out_len; return GA_E_NO_CUDA; }
ga_status ga_bf16_decode_add_cuda(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload,
    size_t len, size_t n, float *sum)
{ (void)ex, (void)p, (void)payload, (void)len, (void)n, (void)sum; return GA_E_NO_CUDA; }
