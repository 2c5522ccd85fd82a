/* Deep Gradient Compression on the worker (docs/sdk.md): gradient clipping, momentum
 * correction, momentum factor masking and the warm-up schedule of the keep ratio. The
 * accumulation v is the codec's residual: an encode adds the corrected gradient into v, sends
 * the top of v and leaves v - decoded(v) (0 at the sent indices with fp32 values, as DGC's
 * v[sent] = 0; with fp16 values the rounding error stays as error feedback). Pure functions,
 * any thread. */
#ifndef GA_DGC_H
#define GA_DGC_H

#include <stdbool.h>
#include <stddef.h>

#include "ga_codec.h"
#include "gradagg.h"

/* Keep ratio in warm-up epoch `epoch` (0-based): max(coeff^(epoch+1), ratio) with
 * coeff = ratio^(1/(warmup_epochs+1)) while epoch < warmup_epochs, else ratio. */
float ga_dgc_ratio(float ratio, uint32_t warmup_epochs, uint32_t epoch);

/* The coefficient that brings g (n floats) to an L2 norm of at most clip_norm:
 * clip_norm / (norm + 1e-6) when that is below 1 (PyTorch clip_grad_norm_), else 1. The norm is
 * summed in double. */
float ga_dgc_clip_coeff(const float *g, size_t n, float clip_norm);

/* Momentum correction with coefficient s applied to g first (clipping; s = 1 for none).
 * Returns the increment to encode into v:
 *   plain:    u = m*u + s*g;           returns u
 *   nesterov: u = (u + s*g)*m;         work = u + s*g, returns work
 *   m == 0:   work = s*g (returns g itself when s == 1)
 * u and work are n floats (u unused when m == 0); work may be NULL when it is not needed. */
const float *ga_dgc_correct(const ga_dgc_options *o, float *u, const float *g, float s, float *work, size_t n);

/* Element i of what ga_dgc_correct would return, computed without writing u: the automatic
 * threshold samples the corrected gradient before anything moves. */
float ga_dgc_corrected_at(const ga_dgc_options *o, const float *u, const float *g, float s, size_t i);

/* Factor masking: decodes a payload of n elements into scratch (n floats, overwritten) and sets
 * u[i] = 0 wherever a nonzero value was sent. Errors as ga_codec_decode_add (nothing changes). */
ga_status ga_dgc_mask(const ga_exec *ex, ga_codec_id codec, const ga_codec_params *params, const void *payload,
                      size_t len, size_t n, float *u, float *scratch);

#endif
