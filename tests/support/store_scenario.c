/* Store test scenarios (store_scenario.h): configurations, initial values and pushes. */
#include "store_scenario.h"

#include <setjmp.h>
#include <stdarg.h>
#include <string.h>

#include <cmocka.h>

#include "ga_alloc.h"
#include "ga_codec.h"

#define CHUNK_ELEMS 1000 /* not a multiple of any block: chunks start anywhere */

/* Pull codec parameters as plain initializers (the fields each codec reads). */
#define TOPK(r, sample, values, indices) \
    {.ratio = (r), .sample_fraction = (sample), .adapt_rounds = 10, .seed = 12345, .topk_values = (values), \
     .topk_indices = (indices)}
#define CFG(...) {.backend = GA_BACKEND_CPU, .threads = 2, __VA_ARGS__}
#define ADAM(...) {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, __VA_ARGS__}

const scenario scenarios[] = {
    {"sum, none, fp32 pulls", CFG(.optim = GA_OPTIM_NONE, .piece_elems = 1024), {1, 1500, 5000, 2048}, 4},
    {"mean, sgd nesterov wd, fp32 pulls",
     CFG(.mean = true, .optim = GA_OPTIM_SGD,
         .sgd = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-2f, .nesterov = true}, .piece_elems = 2048),
     {1, 1500, 5000, 2048}, 4},
    {"mean, adam l2, fp32 pulls",
     CFG(.mean = true, .optim = GA_OPTIM_ADAM, .adam = ADAM(.weight_decay = 0.01f), .piece_elems = 1024),
     {1, 1500, 5000, 2048}, 4},
    {"mean, adamw, 2bit pulls",
     CFG(.mean = true, .optim = GA_OPTIM_ADAM, .adam = ADAM(.weight_decay = 0.1f, .decoupled = true),
         .pull_codec = GA_CODEC_2BIT, .pull_params = {.threshold = 0.004f}, .piece_elems = 1024),
     {1, 1500, 5000, 2048}, 4},
    {"sum, sgd momentum, topk fp16 varint pulls (sampled)",
     CFG(.optim = GA_OPTIM_SGD, .sgd = {.lr = 0.05f, .momentum = 0.5f}, .pull_codec = GA_CODEC_TOPK,
         .pull_params = TOPK(0.05f, 0.01f, GA_TOPK_VALUES_FP16, GA_TOPK_INDICES_VARINT), .piece_elems = 66560),
     {70000, 10, 3000}, 3},
    {"mean, sgd wd, topk fp32 int32 pulls",
     CFG(.mean = true, .optim = GA_OPTIM_SGD, .sgd = {.lr = 0.1f, .weight_decay = 0.05f}, .pull_codec = GA_CODEC_TOPK,
         .pull_params = TOPK(0.2f, 1.0f, GA_TOPK_VALUES_FP32, GA_TOPK_INDICES_INT32), .piece_elems = 2048),
     {1, 1500, 5000}, 3},
    {"sum, none, fp16 pulls", CFG(.optim = GA_OPTIM_NONE, .pull_codec = GA_CODEC_FP16, .piece_elems = 1024),
     {1, 1500, 5000, 2048}, 4},
    {"mean, reduce, fp32 pulls", CFG(.mean = true, .optim = GA_OPTIM_REDUCE, .piece_elems = 1024),
     {1, 1500, 5000, 2048}, 4},
    {"mean, reduce, 2bit pulls",
     CFG(.mean = true, .optim = GA_OPTIM_REDUCE, .pull_codec = GA_CODEC_2BIT, .pull_params = {.threshold = 0.004f},
         .piece_elems = 1024),
     {1, 1500, 5000, 2048}, 4},
};
const size_t nscenarios = sizeof scenarios / sizeof scenarios[0];

static uint64_t mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void scenario_fill(float *x, size_t n, uint64_t seed, float scale)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t h = mix(seed * 0x100000001B3ull + i);
        x[i] = (h & 0xF) == 0 ? 0.0f : (float)((int32_t)(uint32_t)(h >> 32)) * 0x1p-31f * scale;
    }
}

int scenario_init_is_null(uint32_t t) { return t % 2 == 1; }

void scenario_init(uint32_t t, size_t n, float *out)
{
    if (scenario_init_is_null(t)) memset(out, 0, n * sizeof *out);
    else scenario_fill(out, n, 1000u + t, 1.0f);
}

uint32_t scenario_contributors(int step) { return step % 2 == 1 ? SCENARIO_WORKERS : SCENARIO_WORKERS - 1; }

static const ga_codec_id push_codecs[] = {GA_CODEC_NONE, GA_CODEC_FP16, GA_CODEC_2BIT, GA_CODEC_TOPK};

size_t scenario_chunks(int step, int w, uint32_t t, size_t n, chunk **out)
{
    size_t count = (n + CHUNK_ELEMS - 1) / CHUNK_ELEMS;
    chunk *c = ga_calloc(count ? count : 1, sizeof *c);
    float *g = ga_malloc((n ? n : 1) * sizeof *g), *r = ga_malloc(CHUNK_ELEMS * sizeof *r);
    assert_non_null(c), assert_non_null(g), assert_non_null(r);
    scenario_fill(g, n, ((uint64_t)step << 40) ^ ((uint64_t)w << 20) ^ t, 1.0f);
    for (size_t k = 0; k < count; k++) {
        chunk *ck = &c[k];
        ck->tensor = t;
        ck->offset = k * CHUNK_ELEMS;
        ck->count = n - ck->offset < CHUNK_ELEMS ? n - ck->offset : CHUNK_ELEMS;
        ck->codec = push_codecs[((size_t)step + (size_t)w + t + k) % 4];
        ck->params = ga_codec_params_default(ck->codec);
        if (ck->codec == GA_CODEC_2BIT) ck->params.threshold = 0.25f;
        if (ck->codec == GA_CODEC_TOPK) ck->params.ratio = 0.1f;
        size_t cap;
        assert_int_equal(ga_codec_encoded_size(ck->codec, &ck->params, ck->count, &cap), GA_OK);
        ck->block = ga_malloc(cap + 4);
        assert_non_null(ck->block);
        size_t shift = k % 3 == 2 ? 1 : 0; /* an unaligned payload, as a protobuf buffer may be */
        uint8_t *aligned = ck->block + 4;
        float *res = ga_codec_has_residual(ck->codec) ? r : NULL;
        if (res) memset(res, 0, ck->count * sizeof *res);
        const ga_exec cpu = GA_EXEC_CPU_INIT;
        assert_int_equal(ga_codec_encode(&cpu, ck->codec, &ck->params, g + ck->offset, res, ck->count, aligned, cap,
                                         &ck->len),
                         GA_OK);
        if (shift) memmove(ck->block + 1, aligned, ck->len);
        ck->payload = shift ? ck->block + 1 : aligned;
    }
    ga_free(g), ga_free(r);
    *out = c;
    return count;
}

void chunks_free(chunk *c, size_t count)
{
    for (size_t k = 0; k < count; k++) ga_free(c[k].block);
    ga_free(c);
}
