/* The SDK's automatic 2bit threshold: its options and one step's estimate (auto_threshold.h);
 * the arithmetic is kernels/ga_auto.c. */
#include "auto_threshold.h"

#include <math.h>
#include <stdio.h>

ga_status ga_auto_resolve(const ga_auto_threshold *in, ga_auto_threshold *out, char *why, size_t cap)
{
    ga_auto_threshold a = *in;
    if (a.bits == 0.0f) a.bits = GA_AUTO_DEFAULT_BITS;
    if (a.smoothing == 0.0f) a.smoothing = GA_AUTO_DEFAULT_SMOOTHING;
    if (a.sample_fraction == 0.0f) a.sample_fraction = GA_AUTO_DEFAULT_SAMPLE;
    /* The float nearest log2(3) lies below it, so a caller's (float)log2(3) passes. */
    if (!(a.bits > 0.0f && (double)a.bits <= GA_LOG2_3))
        return ga_status_fail(GA_E_INVAL, why, cap, "auto_threshold bits %g outside (0, log2(3) = 1.585]",
                              (double)in->bits);
    if (!(a.smoothing > 0.0f && a.smoothing <= 1.0f))
        return ga_status_fail(GA_E_INVAL, why, cap, "auto_threshold smoothing %g outside (0, 1]",
                              (double)in->smoothing);
    if (!(a.sample_fraction > 0.0f && a.sample_fraction <= 1.0f))
        return ga_status_fail(GA_E_INVAL, why, cap, "auto_threshold sample_fraction %g outside (0, 1]",
                              (double)in->sample_fraction);
    if (a.level != GA_AUTO_LEVEL_MEAN && a.level != GA_AUTO_LEVEL_THRESHOLD)
        return ga_status_fail(GA_E_INVAL, why, cap, "auto_threshold level %d: expected GA_AUTO_LEVEL_MEAN (0) or "
                              "GA_AUTO_LEVEL_THRESHOLD (1)", (int)in->level);
    *out = a;
    return GA_OK;
}

float ga_auto_estimate(const float *residual, const float *g, size_t n, ga_auto_sample plan, double rho,
                       float *scratch)
{
    (void)n;
    for (size_t k = 0; k < plan.count; k++) {
        size_t i = plan.start + k * plan.stride;
        scratch[k] = fabsf(residual[i] + g[i]);
    }
    return ga_auto_quantile(scratch, plan.count, rho);
}
