/* What the C benchmarks share: a monotonic clock, medians, deterministic fill, and the host
 * memory bandwidth they measure their floors against. Header-only (static functions). */
#ifndef GA_BENCH_UTIL_H
#define GA_BENCH_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static inline double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v[0..count) and returns its median. */
static inline double bench_median(double *v, int count)
{
    qsort(v, (size_t)count, sizeof *v, bench_cmp_double);
    return count % 2 ? v[count / 2] : 0.5 * (v[count / 2 - 1] + v[count / 2]);
}

/* x[i] = scale * (a hash of i and seed, uniform in [-0.5, 0.5)): the same values on every run. */
static inline void bench_fill(float *x, size_t n, unsigned seed, float scale)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed * 40503u;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        x[i] = scale * ((float)(h & 0xFFFFFF) / 16777216.0f - 0.5f);
    }
}

/* a[i] += b[i] with `threads` OpenMP threads: 12 bytes per element. Returns seconds. */
static inline double bench_host_bandwidth_run(float *a, const float *b, size_t n, int threads)
{
    double t0 = bench_now_s();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t i = 0; i < n; i++) a[i] += b[i];
    return bench_now_s() - t0;
}

#endif
