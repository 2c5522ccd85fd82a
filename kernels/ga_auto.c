/* Threshold selection for the 2bit codec: entropy budget -> density, strided sample, quantile
 * by selection, mean level, smoothing (ga_auto.h). */
#include "ga_auto.h"

#include <math.h>

#define RHO_MAX (2.0 / 3.0)

double ga_auto_entropy(double rho)
{
    if (rho <= 0.0) return 0.0;
    double h = -rho * log2(rho / 2.0);
    if (rho < 1.0) h -= (1.0 - rho) * log2(1.0 - rho);
    return h;
}

double ga_auto_density_for_bits(double bits)
{
    if (!(bits > 0.0)) return 0.0;
    if (bits >= GA_LOG2_3) return RHO_MAX;
    double lo = 0.0, hi = RHO_MAX;
    while (hi - lo > 1e-12) {
        double mid = 0.5 * (lo + hi);
        if (ga_auto_entropy(mid) < bits) lo = mid;
        else hi = mid;
    }
    return 0.5 * (lo + hi);
}

ga_auto_sample ga_auto_sample_plan(size_t n, float fraction, uint64_t seed)
{
    ga_auto_sample s = {0, 1, n};
    double want = ceil((double)n * (double)fraction);
    size_t count = want >= (double)n ? n : (size_t)want;
    size_t floor_count = n < GA_AUTO_MIN_SAMPLE ? n : GA_AUTO_MIN_SAMPLE;
    if (count < floor_count) count = floor_count;
    if (count == 0) return s;
    s.count = count;
    s.stride = n / count; /* start + (count-1)*stride <= count*stride - 1 < n */
    s.start = (size_t)(seed % s.stride);
    return s;
}

static void swap(float *a, float *b)
{
    float t = *a;
    *a = *b;
    *b = t;
}

/* x[k] becomes the value a sort would put there, smaller ones before, larger after
 * (quickselect with a median of three; the values are finite or +inf, never NaN). */
static void select_nth(float *x, size_t m, size_t k)
{
    size_t lo = 0, hi = m - 1;
    while (hi > lo) {
        size_t mid = lo + (hi - lo) / 2;
        if (x[mid] < x[lo]) swap(&x[mid], &x[lo]);
        if (x[hi] < x[lo]) swap(&x[hi], &x[lo]);
        if (x[hi] < x[mid]) swap(&x[hi], &x[mid]);
        float pivot = x[mid];
        /* Hoare partition: [lo, j] <= pivot <= [j+1, hi]. */
        size_t i = lo - 1, j = hi + 1;
        for (;;) {
            do i++; while (x[i] < pivot);
            do j--; while (x[j] > pivot);
            if (i >= j) break;
            swap(&x[i], &x[j]);
        }
        if (k <= j) hi = j;
        else lo = j + 1;
    }
}

float ga_auto_quantile(float *x, size_t m, double rho)
{
    if (m == 0) return 0.0f;
    double pos = floor((1.0 - rho) * (double)m);
    size_t k = pos >= (double)(m - 1) ? m - 1 : (size_t)pos;
    select_nth(x, m, k);
    if (x[k] > 0.0f) return x[k];
    float least = 0.0f;
    for (size_t i = k + 1; i < m; i++)
        if (x[i] > 0.0f && (least == 0.0f || x[i] < least)) least = x[i];
    return least;
}

float ga_auto_smooth(float prev, int have_prev, float estimate, float smoothing)
{
    if (!have_prev) return estimate;
    return smoothing * estimate + (1.0f - smoothing) * prev;
}

float ga_auto_level_mean(const float *x, size_t m, float t)
{
    double sum = 0.0;
    size_t count = 0;
    for (size_t i = 0; i < m; i++)
        if (x[i] >= t) {
            sum += (double)x[i];
            count++;
        }
    return count ? (float)(sum / (double)count) : t;
}
