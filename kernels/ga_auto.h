/* Threshold selection for the 2bit codec (docs/auto-threshold.md), shared by the SDK's push
 * and the server's pulls: the density whose ternary-code entropy is a bit budget, a strided
 * sample, its (1 - density) quantile, the mean level of the selected values, the smoothing
 * across steps. Pure functions on host memory, any thread. */
#ifndef GA_AUTO_H
#define GA_AUTO_H

#include <stddef.h>
#include <stdint.h>

#define GA_LOG2_3 1.5849625007211562

/* Defaults of the zero fields of ga_auto_threshold (gradagg.h); the server's automatic pull
 * threshold samples GA_AUTO_DEFAULT_SAMPLE of each piece. */
#define GA_AUTO_DEFAULT_BITS 1.5f
#define GA_AUTO_DEFAULT_SMOOTHING 0.5f
#define GA_AUTO_DEFAULT_SAMPLE 0.01f
/* Never fewer sampled elements than this (or all of a smaller tensor). */
#define GA_AUTO_MIN_SAMPLE 4096u
/* The entropy in bits per element of a ternary code sending a fraction rho of the elements as
 * +-t with equally likely signs: -rho*log2(rho/2) - (1-rho)*log2(1-rho); 0 at rho = 0,
 * increasing on [0, 2/3] up to log2(3). */
double ga_auto_entropy(double rho);

/* The density rho in (0, 2/3] with ga_auto_entropy(rho) = bits (bisection, to 1e-12);
 * bits >= log2(3) gives 2/3. bits must be > 0. */
double ga_auto_density_for_bits(double bits);

/* The sample of a tensor of n > 0 elements: count elements start + k*stride, k < count, with
 * count = max(ceil(n * fraction), min(GA_AUTO_MIN_SAMPLE, n)) and the start picked by seed
 * within the first stride (vary it per step, so every element is sampled over time). */
typedef struct ga_auto_sample {
    size_t start, stride, count;
} ga_auto_sample;
ga_auto_sample ga_auto_sample_plan(size_t n, float fraction, uint64_t seed);

/* The threshold that sends a fraction rho of x[0..m) (absolute values, m > 0, reordered):
 * the (1 - rho) quantile, found by selection; when that is 0 the smallest nonzero value (a
 * sparse gradient sends what it has); 0 when every value is 0. */
float ga_auto_quantile(float *x, size_t m, double rho);

/* Smoothed threshold: the estimate on the first step (have_prev false), else
 * smoothing * estimate + (1 - smoothing) * prev. */
float ga_auto_smooth(float prev, int have_prev, float estimate, float smoothing);

/* The level of GA_AUTO_LEVEL_MEAN: the mean of the x[0..m) (absolute values) that are >= t,
 * summed in double in index order; t when none is. */
float ga_auto_level_mean(const float *x, size_t m, float t);

#endif
