/* PLACEHOLDER until the top-k implementation lands (same session). */
#include "codec_internal.h"

ga_status ga_topk_encode_cpu(const ga_exec *ex, const ga_codec_params *p, const float *grad, float *residual,
                             size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
    (void)ex, (void)p, (void)grad, (void)residual, (void)n, (void)out, (void)cap, (void)out_len;
    return GA_E_CODEC;
}

ga_status ga_topk_decode_add_cpu(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload, size_t len,
                                 size_t n, float *sum)
{
    (void)ex, (void)p, (void)payload, (void)len, (void)n, (void)sum;
    return GA_E_CODEC;
}
