/* Slow scalar oracle of the top-k (DGC) codec, written from the spec in docs/wire-format.md
 * without the library's helpers: full sorts, plain loops, its own fp16 and varints.
 * Tests compare the library's bytes against it with memcmp. */
#ifndef ORACLE_TOPK_H
#define ORACLE_TOPK_H

#include <stddef.h>
#include <stdint.h>

#include "ga_codec.h"

/* Encodes as the codec must: updates residual, writes the payload into out (room for
 * ga_codec_encoded_size bytes) and *out_len. Returns a ga_status (GA_OK or GA_E_NONFINITE). */
int oracle_topk_encode(const ga_codec_params *p, const float *grad, float *residual, size_t n, uint8_t *out,
                       size_t *out_len);

/* Validates and adds a payload into sum; returns the status the codec must return. sum is
 * changed only on GA_OK. */
int oracle_topk_decode_add(const ga_codec_params *p, const uint8_t *payload, size_t len, size_t n, float *sum);

/* The first sampled position and the stride for n elements (n > GA_TOPK_EXACT_MAX), so tests
 * can build data the sample sees or misses. */
void oracle_topk_sample_plan(const ga_codec_params *p, size_t n, size_t *start, size_t *stride);

#endif
