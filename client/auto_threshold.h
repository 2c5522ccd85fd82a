/* The SDK's automatic threshold of the 2bit codec (docs/auto-threshold.md): its options and one
 * step's estimate from a sample of |residual + gradient|; the arithmetic is kernels/ga_auto.h.
 * Pure functions, any thread; push.c fills the sample and keeps the state. */
#ifndef GA_AUTO_THRESHOLD_H
#define GA_AUTO_THRESHOLD_H

#include <stddef.h>
#include <stdint.h>

#include "ga_auto.h"
#include "ga_status.h"
#include "gradagg.h"

/* Checks the options of an enabled automatic threshold and writes them with the defaults
 * applied into *out: GA_E_INVAL (with the reason in why) for bits outside (0, log2 3],
 * smoothing or sample_fraction outside (0, 1] (0 selects the default). */
ga_status ga_auto_resolve(const ga_auto_threshold *in, ga_auto_threshold *out, char *why, size_t cap);

/* One step's estimate for a plain gradient: the sample of |residual[i] + g[i]| into scratch
 * (plan.count floats) and its quantile; 0 when the sample is all zero (keep the previous
 * threshold then). */
float ga_auto_estimate(const float *residual, const float *g, size_t n, ga_auto_sample plan, double rho,
                       float *scratch);

#endif
