/* The store's test scenarios, shared by test_store.c (against the scalar oracle) and
 * test_store_cuda.c (CPU against CUDA): store configurations, tensor sizes and initial values,
 * and the pushes of every step as chunks of mixed codecs (none, fp16, 2bit, topk), encoded by
 * the library on the CPU. Deterministic: the same scenario gives the same bytes every run. */
#ifndef GA_TEST_STORE_SCENARIO_H
#define GA_TEST_STORE_SCENARIO_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

#define SCENARIO_MAX_TENSORS 4
#define SCENARIO_WORKERS 3
#define SCENARIO_STEPS 4

typedef struct scenario {
    const char *name;
    ga_store_config cfg; /* backend CPU; a test may change it */
    size_t sizes[SCENARIO_MAX_TENSORS];
    uint32_t ntensors;
} scenario;

extern const scenario scenarios[];
extern const size_t nscenarios;

/* One pushed chunk. payload may be unaligned (every third chunk is, on purpose). */
typedef struct chunk {
    uint32_t tensor;
    size_t offset, count;
    ga_codec_id codec;
    ga_codec_params params;
    const uint8_t *payload;
    size_t len;
    uint8_t *block; /* owns the payload (ga_malloc) */
} chunk;

/* Initial values of tensor t (n floats), or NULL-init when t is odd (zeros). Writes n floats. */
void scenario_init(uint32_t t, size_t n, float *out);
/* Whether tensor t is added with NULL (zeros) rather than scenario_init values. */
int scenario_init_is_null(uint32_t t);
/* Ranks that push at step s (1-based): 0 .. contributors-1, in rank order. */
uint32_t scenario_contributors(int step);
/* The chunks rank w pushes for tensor t (n elements) at step s; returns the count, *out owned
 * (free with chunks_free). */
size_t scenario_chunks(int step, int w, uint32_t t, size_t n, chunk **out);
void chunks_free(chunk *c, size_t count);

/* Deterministic floats in [-scale, scale) with some exact zeros. */
void scenario_fill(float *x, size_t n, uint64_t seed, float scale);

#endif
