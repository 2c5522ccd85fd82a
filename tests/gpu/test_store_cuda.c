/* service/store on CUDA against the CPU store: every scenario (store_scenario.c) run on both
 * backends with the same pushes publishes the same bytes (full values, delta payloads and
 * offsets) after every step; bad chunks get the same status on both and change nothing; the
 * memory count covers host, pinned and device memory and returns to zero. Skips (exit 77)
 * without a device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "test_memory.h"

#include "ga_alloc.h"
#include "store/store.h"
#include "store_scenario.h"

static uint64_t all_memory(void)
{
    return ga_mem_in_use(GA_MEM_HOST) + ga_mem_in_use(GA_MEM_PINNED) + ga_mem_in_use(GA_MEM_DEVICE);
}

typedef struct pair {
    ga_store *cpu, *gpu;
    ga_store_config cfg;
    bool in_place;
    /* In place (ga_store_apply_in_place): the caller's latest full publication of each tensor,
     * one reference per store, as the server's core keeps it. */
    ga_blob *latest_cpu[SCENARIO_MAX_TENSORS + 1], *latest_gpu[SCENARIO_MAX_TENSORS + 1];
} pair;

static void pair_create(pair *p, const ga_store_config *cfg)
{
    memset(p, 0, sizeof *p);
    p->cfg = *cfg;
    p->cfg.backend = GA_BACKEND_CPU;
    assert_int_equal(ga_store_create(&p->cfg, &p->cpu), GA_OK);
    ga_store_config g = p->cfg;
    g.backend = GA_BACKEND_CUDA;
    assert_int_equal(ga_store_create(&g, &p->gpu), GA_OK);
}

static void pair_destroy(pair *p)
{
    for (size_t t = 0; t <= SCENARIO_MAX_TENSORS; t++) {
        ga_blob_unref(p->latest_cpu[t]);
        ga_blob_unref(p->latest_gpu[t]);
    }
    ga_store_destroy(p->cpu);
    ga_store_destroy(p->gpu);
}

static void same_pub(const ga_published *c, const ga_published *g, const char *name, int step, uint32_t t)
{
    assert_int_equal(g->npieces, c->npieces);
    assert_int_equal(g->full->size, c->full->size);
    if (c->full->size && memcmp(g->full->data, c->full->data, c->full->size) != 0) {
        size_t i = 0;
        while (g->full->data[i] == c->full->data[i]) i++;
        fail_msg("%s: step %d tensor %u: full values differ from byte %zu", name, step, t, i);
    }
    if (!c->delta) {
        assert_null(g->delta);
        assert_null(g->delta_off);
        return;
    }
    if (!g->delta) fail_msg("%s: step %d tensor %u: no delta on CUDA", name, step, t);
    assert_memory_equal(g->delta_off, c->delta_off, (c->npieces + 1) * sizeof *c->delta_off);
    assert_int_equal(g->delta->size, c->delta->size);
    if (c->delta->size && memcmp(g->delta->data, c->delta->data, c->delta->size) != 0)
        fail_msg("%s: step %d tensor %u: delta bytes differ", name, step, t);
}

static void add_tensor_both(pair *p, size_t n, const float *init)
{
    uint32_t ic, ig;
    ga_published pc, pg;
    assert_int_equal(ga_store_add_tensor(p->cpu, n, init, &ic, &pc), GA_OK);
    assert_int_equal(ga_store_add_tensor(p->gpu, n, init, &ig, &pg), GA_OK);
    assert_int_equal(ic, ig);
    same_pub(&pc, &pg, "version 0", 0, ic);
    if (p->in_place && ic <= SCENARIO_MAX_TENSORS) {
        p->latest_cpu[ic] = ga_blob_ref(pc.full);
        p->latest_gpu[ic] = ga_blob_ref(pg.full);
    }
    ga_published_clear(&pc);
    ga_published_clear(&pg);
}

static void apply_both(pair *p, uint32_t contributors, uint32_t ntensors, const char *name, int step)
{
    ga_published pc[SCENARIO_MAX_TENSORS + 1], pg[SCENARIO_MAX_TENSORS + 1];
    assert_int_equal(ga_store_apply(p->cpu, contributors, pc), GA_OK);
    assert_int_equal(ga_store_apply(p->gpu, contributors, pg), GA_OK);
    for (uint32_t t = 0; t < ntensors; t++) {
        same_pub(&pc[t], &pg[t], name, step, t);
        ga_published_clear(&pc[t]);
        ga_published_clear(&pg[t]);
    }
}

/* apply_both as the server's core applies (ga_store_apply_in_place, the latest full publication
 * kept): on the CUDA store a step rewrites its host copy in place and publishes the same blob;
 * on a step where `pulled` (a pull still streams the GPU's latest blob) that blob is never
 * written and the step publishes a new one. */
static void apply_both_in_place(pair *p, uint32_t contributors, uint32_t ntensors, const char *name, int step,
                                bool pulled)
{
    ga_published pc[SCENARIO_MAX_TENSORS + 1], pg[SCENARIO_MAX_TENSORS + 1];
    ga_blob *pull[SCENARIO_MAX_TENSORS + 1] = {0};
    uint8_t *seen[SCENARIO_MAX_TENSORS + 1] = {0};
    for (uint32_t t = 0; t < ntensors && pulled; t++) {
        pull[t] = ga_blob_ref(p->latest_gpu[t]);
        seen[t] = ga_malloc(pull[t]->size + 1);
        assert_non_null(seen[t]);
        memcpy(seen[t], pull[t]->data, pull[t]->size);
    }
    assert_int_equal(ga_store_apply_in_place(p->cpu, contributors, pc), GA_OK);
    assert_int_equal(ga_store_apply_in_place(p->gpu, contributors, pg), GA_OK);
    for (uint32_t t = 0; t < ntensors; t++) {
        same_pub(&pc[t], &pg[t], name, step, t);
        if (pulled) {
            if (pg[t].full == pull[t]) fail_msg("%s: step %d tensor %u: a pulled blob was rewritten", name, step, t);
            if (memcmp(seen[t], pull[t]->data, pull[t]->size) != 0)
                fail_msg("%s: step %d tensor %u: a pulled blob changed", name, step, t);
            ga_blob_unref(pull[t]);
            ga_free(seen[t]);
        } else if (pg[t].full != p->latest_gpu[t]) {
            fail_msg("%s: step %d tensor %u: the CUDA store did not rewrite its host copy in place", name, step, t);
        }
        ga_blob_unref(p->latest_cpu[t]);
        ga_blob_unref(p->latest_gpu[t]);
        p->latest_cpu[t] = ga_blob_ref(pc[t].full);
        p->latest_gpu[t] = ga_blob_ref(pg[t].full);
        ga_published_clear(&pc[t]);
        ga_published_clear(&pg[t]);
    }
}

/* How a pass over the scenarios drives both stores: the server's own path lends the payloads
 * (ga_store_accumulate_lent, kept until the apply); a gradient block smaller than the chunks
 * makes the apply slice every held chunk; pull_auto_bits makes the 2bit pulls pick each
 * piece's threshold from a strided sample (ga_device_gather on CUDA). */
typedef struct variant {
    const char *name;
    bool lend;
    size_t block_elems; /* 0: the scenario's */
    float pull_auto_bits; /* for 2bit pulls; 0: the scenario's */
    bool in_place;        /* ga_store_apply_in_place, a pull holding the GPU's blob every third step */
} variant;

static const variant variants[] = {
    {"copied", false, 0, 0.0f, false},
    {"lent, 1024-element blocks, automatic 2bit pulls, in place", true, 1024, 1.0f, true},
};

static void run_scenario(const scenario *sc, const variant *v)
{
    char name[160];
    snprintf(name, sizeof name, "%s (%s)", sc->name, v->name);
    ga_store_config cfg = sc->cfg;
    if (v->block_elems) cfg.block_elems = v->block_elems;
    if (v->pull_auto_bits > 0.0f && cfg.pull_codec == GA_CODEC_2BIT) cfg.pull_auto_bits = v->pull_auto_bits;
    uint64_t before = all_memory();
    pair p;
    pair_create(&p, &cfg);
    p.in_place = v->in_place;
    for (uint32_t t = 0; t < sc->ntensors; t++) {
        size_t n = sc->sizes[t];
        float *init = ga_malloc((n ? n : 1) * sizeof *init);
        assert_non_null(init);
        scenario_init(t, n, init);
        add_tensor_both(&p, n, scenario_init_is_null(t) ? NULL : init);
        ga_free(init);
    }
    for (int step = 1; step <= SCENARIO_STEPS; step++) {
        uint32_t contributors = scenario_contributors(step);
        /* Lent payloads live until the apply returned. */
        chunk *held[SCENARIO_WORKERS * SCENARIO_MAX_TENSORS];
        size_t counts[SCENARIO_WORKERS * SCENARIO_MAX_TENSORS], nheld = 0;
        uint64_t chunk_bytes = 0; /* the test's own payload blocks, alive until the apply */
        for (uint32_t w = 0; w < contributors; w++) {
            for (uint32_t t = 0; t < sc->ntensors; t++) {
                chunk *c;
                uint64_t m0 = all_memory();
                size_t count = scenario_chunks(step, (int)w, t, sc->sizes[t], &c);
                chunk_bytes += all_memory() - m0;
                for (size_t k = 0; k < count; k++) {
                    bool kept;
                    if (v->lend) {
                        assert_int_equal(ga_store_accumulate_lent(p.cpu, t, c[k].offset, c[k].count, c[k].codec,
                                                                  &c[k].params, c[k].payload, c[k].len, &kept),
                                         GA_OK);
                        assert_int_equal(ga_store_accumulate_lent(p.gpu, t, c[k].offset, c[k].count, c[k].codec,
                                                                  &c[k].params, c[k].payload, c[k].len, &kept),
                                         GA_OK);
                    } else {
                        assert_int_equal(ga_store_accumulate(p.cpu, t, c[k].offset, c[k].count, c[k].codec,
                                                             &c[k].params, c[k].payload, c[k].len),
                                         GA_OK);
                        assert_int_equal(ga_store_accumulate(p.gpu, t, c[k].offset, c[k].count, c[k].codec,
                                                             &c[k].params, c[k].payload, c[k].len),
                                         GA_OK);
                    }
                }
                held[nheld] = c;
                counts[nheld++] = count;
            }
        }
        /* The count is exactly what the CUDA store took, in every domain. */
        uint64_t cpu_bytes = ga_store_bytes(p.cpu);
        assert_int_equal(ga_store_bytes(p.gpu), all_memory() - before - cpu_bytes - chunk_bytes);
        if (v->in_place) apply_both_in_place(&p, contributors, sc->ntensors, name, step, step % 3 == 0);
        else apply_both(&p, contributors, sc->ntensors, name, step);
        for (size_t i = 0; i < nheld; i++) chunks_free(held[i], counts[i]);
    }
    pair_destroy(&p);
    assert_int_equal(all_memory(), before);
}

static void scenarios_match_cpu(void **state)
{
    (void)state;
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++)
        for (size_t i = 0; i < nscenarios; i++) run_scenario(&scenarios[i], &variants[v]);
}

/* Bad chunks: the same status on both backends; afterwards both publish the same values. */
static void bad_chunks_match_cpu(void **state)
{
    (void)state;
    enum { N = 3000 };
    ga_store_config cfg = {.backend = GA_BACKEND_CPU, .optim = GA_OPTIM_NONE, .piece_elems = 1024};
    pair p;
    pair_create(&p, &cfg);
    float init[N], good[N];
    scenario_fill(init, N, 7, 1.0f);
    scenario_fill(good, N, 8, 1.0f);
    add_tensor_both(&p, N, init);
    const ga_codec_params none = ga_codec_params_default(GA_CODEC_NONE);
    ga_codec_params topk = ga_codec_params_default(GA_CODEC_TOPK);
    topk.ratio = 0.5f;
    uint32_t tk[5] = {2, 0x3F800000u, 0x3F800000u, 3, 10}; /* index 10 of 10 */
    uint8_t halfs[1 + 200]; /* 100 fp16 ones (0x3C00), one byte past an aligned address */
    for (size_t i = 0; i < 100; i++) halfs[1 + 2 * i] = 0x00, halfs[2 + 2 * i] = 0x3C;
    float nan_chunk[100];
    memcpy(nan_chunk, good, sizeof nan_chunk);
    nan_chunk[99] = NAN;
    struct {
        uint32_t t;
        size_t offset, count;
        ga_codec_id codec;
        const ga_codec_params *params;
        const void *payload;
        size_t len;
        ga_status want;
    } cases[] = {
        {0, 0, N, GA_CODEC_NONE, &none, good, sizeof good, GA_OK},
        {0, 1, N, GA_CODEC_NONE, &none, good, sizeof good, GA_E_LENGTH},
        {1, 0, 10, GA_CODEC_NONE, &none, good, 40, GA_E_UNKNOWN_TENSOR},
        {0, 0, 10, GA_CODEC_NONE, &none, good, 36, GA_E_LENGTH},
        {0, 0, 100, GA_CODEC_NONE, &none, nan_chunk, sizeof nan_chunk, GA_E_NONFINITE},
        {0, 5, 10, GA_CODEC_TOPK, &topk, tk, sizeof tk, GA_E_INDEX_RANGE},
        {0, 7, 100, GA_CODEC_FP16, &none, halfs + 1, 200, GA_OK}, /* unaligned */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ga_status c = ga_store_accumulate(p.cpu, cases[i].t, cases[i].offset, cases[i].count, cases[i].codec,
                                          cases[i].params, cases[i].payload, cases[i].len);
        ga_status g = ga_store_accumulate(p.gpu, cases[i].t, cases[i].offset, cases[i].count, cases[i].codec,
                                          cases[i].params, cases[i].payload, cases[i].len);
        assert_int_equal(c, cases[i].want);
        assert_int_equal(g, cases[i].want);
    }
    apply_both(&p, 1, 1, "bad chunks", 1);
    /* Discard on both, then a step with nothing pushed. */
    assert_int_equal(ga_store_accumulate(p.gpu, 0, 0, N, GA_CODEC_NONE, &none, good, sizeof good), GA_OK);
    assert_int_equal(ga_store_discard(p.gpu), GA_OK);
    apply_both(&p, 1, 1, "after discard", 2);
    pair_destroy(&p);
}

/* Overflowing parameters: a finite step published alike, then the overflowing one refused alike
 * (GA_E_NONFINITE, the same tensor named, nothing published), copied and in place. */
static void nonfinite_matches_cpu(void **state)
{
    (void)state;
    enum { N = 2048 };
    ga_store_config cfg = {.backend = GA_BACKEND_CPU, .optim = GA_OPTIM_NONE, .piece_elems = 1024,
                           .pull_codec = GA_CODEC_2BIT};
    cfg.pull_params = ga_codec_params_default(GA_CODEC_2BIT);
    for (int in_place = 0; in_place < 2; in_place++) {
        pair p;
        pair_create(&p, &cfg);
        float init[N], g[N];
        for (size_t i = 0; i < N; i++) init[i] = 3e37f, g[i] = i >= 1024 ? 1e38f : 0.75f;
        add_tensor_both(&p, N, init);
        const ga_codec_params none = ga_codec_params_default(GA_CODEC_NONE);
        ga_store *both[2] = {p.cpu, p.gpu};
        for (int k = 0; k < 2; k++)
            assert_int_equal(ga_store_accumulate(both[k], 0, 0, N, GA_CODEC_NONE, &none, g, sizeof g), GA_OK);
        apply_both(&p, 1, 1, "finite", 1); /* 3e37 + 1e38: finite */
        for (int k = 0; k < 2; k++) {
            for (int rank = 0; rank < 3; rank++)
                assert_int_equal(ga_store_accumulate(both[k], 0, 0, N, GA_CODEC_NONE, &none, g, sizeof g), GA_OK);
            ga_published out[1] = {{0}};
            ga_status st = in_place ? ga_store_apply_in_place(both[k], 1, out) : ga_store_apply(both[k], 1, out);
            assert_int_equal(st, GA_E_NONFINITE); /* 1.3e38 + 3e38 */
            assert_int_equal(ga_store_overflowed(both[k]), 0);
            assert_null(out[0].full);
        }
        pair_destroy(&p);
    }
}

int main(void)
{
    test_memory_baseline();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(scenarios_match_cpu),
        cmocka_unit_test(bad_chunks_match_cpu),
        cmocka_unit_test(nonfinite_matches_cpu),
        cmocka_unit_test(test_host_memory_returned),
    };
    if (ga_cuda_device_count() == 0) {
        printf("no CUDA device: skipped\n");
        return 77; /* ctest SKIP_RETURN_CODE */
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
