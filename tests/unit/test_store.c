/* service/store: every scenario (store_scenario.c) against an independent scalar model of the
 * store built from the oracles (oracle.c, oracle_topk.c, oracle_optim.c): published fp32 values,
 * delta payloads and offsets byte for byte, and a simulated worker that starts from version 0
 * and applies every delta holds exactly the published values after every step. Bad chunks
 * change nothing; configuration errors; non-finite parameters; memory accounting; the in-place
 * apply publishes the same bytes and never writes a blob a pull still holds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "test_memory.h"

#include "ga_alloc.h"
#include "ga_auto.h"
#include "oracle.h"
#include "oracle_optim.h"
#include "oracle_topk.h"
#include "store/store.h"
#include "store_scenario.h"

/* ---- the model: one plain loop per rule of store.h ---- */

typedef struct model_tensor {
    size_t n;
    float *params, *sum, *m0, *m1, *published;
    uint64_t t;
} model_tensor;

typedef struct model {
    ga_store_config cfg;
    model_tensor tensors[SCENARIO_MAX_TENSORS + 1];
    uint32_t count;
    uint64_t version;
} model;

/* What the model publishes for one tensor. */
typedef struct model_pub {
    float *full;
    uint8_t *delta; /* NULL: no delta this version */
    size_t *off;
    size_t npieces;
} model_pub;

static float *floats0(size_t n)
{
    float *x = ga_calloc(n ? n : 1, sizeof *x);
    assert_non_null(x);
    return x;
}

static void model_add(model *m, size_t n, const float *init)
{
    model_tensor *t = &m->tensors[m->count++];
    t->n = n;
    t->params = floats0(n), t->sum = floats0(n), t->m0 = floats0(n), t->m1 = floats0(n);
    t->published = floats0(n);
    if (init) memcpy(t->params, init, n * sizeof *init);
    memcpy(t->published, t->params, n * sizeof *init);
}

static void model_free(model *m)
{
    for (uint32_t i = 0; i < m->count; i++) {
        model_tensor *t = &m->tensors[i];
        ga_free(t->params), ga_free(t->sum), ga_free(t->m0), ga_free(t->m1), ga_free(t->published);
    }
}

static void model_accumulate(model *m, const chunk *c)
{
    model_tensor *t = &m->tensors[c->tensor];
    int rc = c->codec == GA_CODEC_TOPK
                 ? oracle_topk_decode_add(&c->params, c->payload, c->len, c->count, t->sum + c->offset)
                 : oracle_decode_add(c->codec, c->params.threshold, c->payload, c->len, c->count, t->sum + c->offset);
    assert_int_equal(rc, GA_OK);
}

/* Encodes one piece's delta as the pull codec must; GA_OK, GA_E_NONFINITE or GA_E_RANGE. */
static int model_encode(const model *m, const float *delta, size_t n, uint8_t *out, size_t *len)
{
    ga_codec_params p = m->cfg.pull_params;
    p.seed += m->version; /* store.h: the top-k seed of version v is pull_params.seed + v */
    float *r = floats0(n);
    int rc;
    if (m->cfg.pull_codec == GA_CODEC_TOPK) {
        rc = oracle_topk_encode(&p, delta, r, n, out, len);
    } else {
        rc = oracle_encode(m->cfg.pull_codec, p.threshold, delta, r, n, out);
        *len = oracle_encoded_size(m->cfg.pull_codec, n);
    }
    ga_free(r);
    return rc;
}

static void model_decode_add(const model *m, const uint8_t *payload, size_t len, size_t n, float *sum)
{
    ga_codec_params p = m->cfg.pull_params;
    int rc = m->cfg.pull_codec == GA_CODEC_TOPK
                 ? oracle_topk_decode_add(&p, payload, len, n, sum)
                 : oracle_decode_add(m->cfg.pull_codec, p.threshold, payload, len, n, sum);
    assert_int_equal(rc, GA_OK);
}

static void model_publish(model *m, model_tensor *t, model_pub *pub)
{
    size_t pe = m->cfg.piece_elems;
    pub->npieces = (t->n + pe - 1) / pe;
    pub->full = floats0(t->n);
    if (m->cfg.pull_codec == GA_CODEC_NONE) {
        memcpy(pub->full, t->params, t->n * sizeof(float));
        return;
    }
    if (m->cfg.optim == GA_OPTIM_REDUCE && m->version == 1) { /* the first reduced gradient: fp32 only */
        memcpy(t->published, t->params, t->n * sizeof(float));
        memcpy(pub->full, t->params, t->n * sizeof(float));
        return;
    }
    size_t most;
    assert_int_equal(ga_codec_encoded_size(m->cfg.pull_codec, &m->cfg.pull_params, pe, &most), GA_OK);
    pub->delta = ga_malloc(pub->npieces * most + 1);
    pub->off = ga_malloc((pub->npieces + 1) * sizeof *pub->off);
    float *delta = floats0(pe);
    pub->off[0] = 0;
    for (size_t i = 0; i < pub->npieces; i++) {
        size_t lo = i * pe, len = t->n - lo < pe ? t->n - lo : pe, plen;
        oracle_reduce_sub(delta, t->params + lo, t->published + lo, len);
        int rc = model_encode(m, delta, len, pub->delta + pub->off[i], &plen);
        if (rc == GA_E_NONFINITE || rc == GA_E_RANGE) { /* this version goes out as fp32 only */
            ga_free(pub->delta), ga_free(pub->off);
            pub->delta = NULL, pub->off = NULL;
            memcpy(t->published, t->params, t->n * sizeof(float));
            break;
        }
        assert_int_equal(rc, GA_OK);
        model_decode_add(m, pub->delta + pub->off[i], plen, len, t->published + lo);
        pub->off[i + 1] = pub->off[i] + plen;
    }
    ga_free(delta);
    memcpy(pub->full, t->published, t->n * sizeof(float));
}

static void model_apply(model *m, uint32_t contributors, model_pub *pubs)
{
    m->version++;
    for (uint32_t i = 0; i < m->count; i++) {
        model_tensor *t = &m->tensors[i];
        if (m->cfg.mean) oracle_reduce_scale(t->sum, t->n, (float)(1.0 / contributors));
        switch (m->cfg.optim) {
        case GA_OPTIM_NONE: oracle_reduce_add(t->params, t->sum, t->n); break;
        case GA_OPTIM_SGD: oracle_sgd_step(&m->cfg.sgd, t->params, t->m0, t->sum, t->n); break;
        case GA_OPTIM_ADAM: oracle_adam_step(&m->cfg.adam, ++t->t, t->params, t->m0, t->m1, t->sum, t->n); break;
        case GA_OPTIM_REDUCE: memcpy(t->params, t->sum, t->n * sizeof(float)); break;
        }
        memset(t->sum, 0, t->n * sizeof(float));
        model_publish(m, t, &pubs[i]);
    }
}

static void model_pub_free(model_pub *p)
{
    ga_free(p->full), ga_free(p->delta), ga_free(p->off);
    memset(p, 0, sizeof *p);
}

/* ---- the simulated worker ---- */

/* Applies one publication to a worker's copy: the delta piece by piece through the library's
 * decode (from an aligned copy: pieces start at any byte), or the full values. */
static void worker_apply(const ga_store_config *cfg, float *w, size_t n, const ga_published *pub)
{
    if (!pub->delta) {
        memcpy(w, pub->full->data, n * sizeof(float));
        return;
    }
    const ga_exec cpu = GA_EXEC_CPU_INIT;
    size_t pe = cfg->piece_elems;
    uint8_t *aligned = ga_malloc(pub->delta->size + 1);
    assert_non_null(aligned);
    assert_int_equal(pub->delta_off[0], 0);
    assert_true((pub->delta_level != NULL) == (cfg->pull_auto_bits > 0.0f));
    for (size_t i = 0; i < pub->npieces; i++) {
        size_t lo = i * pe, len = n - lo < pe ? n - lo : pe, plen = pub->delta_off[i + 1] - pub->delta_off[i];
        ga_codec_params p = cfg->pull_params;
        if (pub->delta_level) p.threshold = pub->delta_level[i]; /* what the piece's chunk carries */
        memcpy(aligned, pub->delta->data + pub->delta_off[i], plen);
        assert_int_equal(ga_codec_decode_add(&cpu, cfg->pull_codec, &p, aligned, plen, len, w + lo), GA_OK);
    }
    assert_int_equal(pub->delta_off[pub->npieces], pub->delta->size);
    ga_free(aligned);
}

/* ---- comparing ---- */

static void expect_floats(const void *got, const float *want, size_t n, const char *what, const char *name,
                          int step, uint32_t t)
{
    size_t i = oracle_first_mismatch(got, want, n);
    if (i < n) {
        float g;
        memcpy(&g, (const uint8_t *)got + i * sizeof g, sizeof g);
        fail_msg("%s: step %d tensor %u: %s element %zu of %zu is %a, want %a", name, step, t, what, i, n, g, want[i]);
    }
}

static void expect_pub(const ga_published *got, const model_pub *want, size_t n, const char *name, int step, uint32_t t)
{
    assert_non_null(got->full);
    assert_int_equal(got->full->size, n * sizeof(float));
    expect_floats(got->full->data, want->full, n, "full", name, step, t);
    assert_int_equal(got->npieces, want->npieces);
    if (!want->delta) {
        if (got->delta) fail_msg("%s: step %d tensor %u: a delta where none can be sent", name, step, t);
        assert_null(got->delta_off);
        return;
    }
    if (!got->delta) fail_msg("%s: step %d tensor %u: no delta", name, step, t);
    assert_memory_equal(got->delta_off, want->off, (want->npieces + 1) * sizeof *want->off);
    assert_int_equal(got->delta->size, want->off[want->npieces]);
    if (got->delta->size && memcmp(got->delta->data, want->delta, got->delta->size) != 0)
        fail_msg("%s: step %d tensor %u: delta bytes differ", name, step, t);
}

/* ---- scenarios ---- */

/* Chunks lent to a store (ga_store_accumulate_lent), kept until its apply returned. */
typedef struct lent_chunks {
    chunk *c[SCENARIO_WORKERS * SCENARIO_MAX_TENSORS];
    size_t count[SCENARIO_WORKERS * SCENARIO_MAX_TENSORS];
    size_t n, kept; /* arrays; payloads the store said it kept */
} lent_chunks;

/* After the apply: the payloads are scribbled over (NaN bytes) before they are freed, so a store
 * that still read one would publish NaN. */
static void lent_release(lent_chunks *l)
{
    for (size_t i = 0; i < l->n; i++) {
        for (size_t k = 0; k < l->count[i]; k++) memset(l->c[i][k].block, 0xff, l->c[i][k].len + 4);
        chunks_free(l->c[i], l->count[i]);
    }
    l->n = 0;
}

/* Every rank's chunks of one step, copied (lent NULL) or lent: on the CPU the store keeps every
 * aligned payload in place, and copies the unaligned ones (every third chunk). */
static void push_all_lent(ga_store *s, model *m, int step, uint32_t contributors, const scenario *sc,
                          lent_chunks *lent)
{
    for (uint32_t w = 0; w < contributors; w++) { /* rank order, as the core adds them */
        for (uint32_t t = 0; t < sc->ntensors; t++) {
            chunk *c;
            size_t count = scenario_chunks(step, (int)w, t, sc->sizes[t], &c);
            for (size_t k = 0; k < count; k++) {
                if (lent) {
                    bool kept = !((uintptr_t)c[k].payload % 4 == 0 && c[k].count > 0);
                    assert_int_equal(ga_store_accumulate_lent(s, t, c[k].offset, c[k].count, c[k].codec,
                                                              &c[k].params, c[k].payload, c[k].len, &kept),
                                     GA_OK);
                    assert_int_equal(kept, (uintptr_t)c[k].payload % 4 == 0 && c[k].count > 0);
                    lent->kept += kept;
                } else {
                    assert_int_equal(ga_store_accumulate(s, t, c[k].offset, c[k].count, c[k].codec, &c[k].params,
                                                         c[k].payload, c[k].len),
                                     GA_OK);
                }
                if (m) model_accumulate(m, &c[k]);
            }
            if (lent) {
                assert_true(lent->n < sizeof lent->c / sizeof lent->c[0]);
                lent->c[lent->n] = c, lent->count[lent->n++] = count;
            } else {
                chunks_free(c, count);
            }
        }
    }
}

static void push_all(ga_store *s, model *m, int step, uint32_t contributors, const scenario *sc)
{
    push_all_lent(s, m, step, contributors, sc, NULL);
}

/* lend: every step's chunks are lent (ga_store_accumulate_lent) rather than copied. */
static void run_scenario(const scenario *sc, bool lend)
{
    lent_chunks lent = {0};
    ga_store *s;
    model m = {.cfg = sc->cfg};
    float *workers[SCENARIO_MAX_TENSORS];
    assert_int_equal(ga_store_create(&sc->cfg, &s), GA_OK);
    for (uint32_t t = 0; t < sc->ntensors; t++) {
        size_t n = sc->sizes[t];
        float *init = floats0(n);
        scenario_init(t, n, init);
        uint32_t index = 99;
        ga_published pub;
        assert_int_equal(ga_store_add_tensor(s, n, scenario_init_is_null(t) ? NULL : init, &index, &pub), GA_OK);
        assert_int_equal(index, t);
        assert_null(pub.delta);
        model_add(&m, n, init);
        expect_floats(pub.full->data, init, n, "version 0", sc->name, 0, t);
        workers[t] = floats0(n);
        memcpy(workers[t], pub.full->data, n * sizeof(float));
        ga_published_clear(&pub);
        assert_null(pub.full);
        ga_free(init);
    }
    for (int step = 1; step <= SCENARIO_STEPS; step++) {
        uint32_t contributors = scenario_contributors(step);
        push_all_lent(s, &m, step, contributors, sc, lend ? &lent : NULL);
        ga_published pubs[SCENARIO_MAX_TENSORS];
        model_pub want[SCENARIO_MAX_TENSORS] = {0};
        assert_int_equal(ga_store_apply(s, contributors, pubs), GA_OK);
        lent_release(&lent);
        model_apply(&m, contributors, want);
        for (uint32_t t = 0; t < sc->ntensors; t++) {
            size_t n = sc->sizes[t];
            expect_pub(&pubs[t], &want[t], n, sc->name, step, t);
            worker_apply(&sc->cfg, workers[t], n, &pubs[t]);
            expect_floats(pubs[t].full->data, workers[t], n, "worker", sc->name, step, t);
            ga_published_clear(&pubs[t]);
            model_pub_free(&want[t]);
        }
    }
    for (uint32_t t = 0; t < sc->ntensors; t++) ga_free(workers[t]);
    ga_store_destroy(s);
    model_free(&m);
    if (lend && lent.kept == 0) fail_msg("%s: the store kept no lent payload in place", sc->name);
}

static void scenarios_match_model(void **state)
{
    (void)state;
    for (size_t i = 0; i < nscenarios; i++) run_scenario(&scenarios[i], false);
}

/* Lent payloads, held in place and summed at the apply (dense ones too, on the CPU), publish
 * the same bytes as copied ones, and nothing reads them once the apply returned. */
static void lent_scenarios_match_model(void **state)
{
    (void)state;
    for (size_t i = 0; i < nscenarios; i++) run_scenario(&scenarios[i], true);
}

/* The compressed pulls must really compress and really carry error feedback: the published
 * copy trails the parameters (so some delta was held back) yet the workers agree with it. */
static void compressed_pulls_hold_back(void **state)
{
    (void)state;
    const scenario *sc = &scenarios[3]; /* adamw, 2bit pulls */
    assert_int_equal(sc->cfg.pull_codec, GA_CODEC_2BIT);
    ga_store *s;
    model m = {.cfg = sc->cfg};
    assert_int_equal(ga_store_create(&sc->cfg, &s), GA_OK);
    size_t n = sc->sizes[2];
    float *init = floats0(n);
    scenario_init(2, n, init);
    uint32_t index;
    ga_published pub;
    assert_int_equal(ga_store_add_tensor(s, n, init, &index, &pub), GA_OK);
    ga_published_clear(&pub);
    model_add(&m, n, init);
    chunk *c;
    size_t count = scenario_chunks(1, 0, 2, n, &c);
    for (size_t k = 0; k < count; k++) {
        c[k].tensor = 0; /* the scenario's tensor 2 is this store's only tensor */
        assert_int_equal(ga_store_accumulate(s, 0, c[k].offset, c[k].count, c[k].codec, &c[k].params, c[k].payload,
                                             c[k].len),
                         GA_OK);
        model_accumulate(&m, &c[k]);
    }
    chunks_free(c, count);
    model_pub want = {0};
    assert_int_equal(ga_store_apply(s, 1, &pub), GA_OK);
    model_apply(&m, 1, &want);
    expect_pub(&pub, &want, n, "hold back", 1, 0);
    assert_int_equal(pub.delta->size, 4 * ((n + 15) / 16)); /* 2 bits per element */
    size_t held = 0;
    for (size_t i = 0; i < n; i++) held += m.tensors[0].params[i] != m.tensors[0].published[i];
    assert_true(held > n / 4);
    ga_published_clear(&pub);
    model_pub_free(&want);
    ga_free(init);
    ga_store_destroy(s);
    model_free(&m);
}

/* ---- bad input changes nothing ---- */

static ga_store_config plain_config(void)
{
    ga_store_config cfg = {.backend = GA_BACKEND_CPU, .optim = GA_OPTIM_NONE, .piece_elems = 1024};
    return cfg;
}

/* A store of cfg with one tensor of n zeros (index 0), its version-0 publication dropped. */
static ga_store *store_of_zeros(const ga_store_config *cfg, size_t n)
{
    ga_store *s;
    assert_int_equal(ga_store_create(cfg, &s), GA_OK);
    uint32_t index;
    ga_published pub;
    assert_int_equal(ga_store_add_tensor(s, n, NULL, &index, &pub), GA_OK);
    assert_int_equal(index, 0);
    ga_published_clear(&pub);
    return s;
}

static void bad_accumulate_changes_nothing(void **state)
{
    (void)state;
    enum { N = 3000 };
    ga_store_config cfg = plain_config();
    ga_store *s;
    assert_int_equal(ga_store_create(&cfg, &s), GA_OK);
    float init[N], want[N], good[N];
    scenario_fill(init, N, 7, 1.0f);
    scenario_fill(good, N, 8, 1.0f);
    uint32_t index;
    ga_published pub;
    assert_int_equal(ga_store_add_tensor(s, N, init, &index, &pub), GA_OK);
    ga_published_clear(&pub);
    const ga_codec_params none = ga_codec_params_default(GA_CODEC_NONE);
    ga_codec_params twobit = ga_codec_params_default(GA_CODEC_2BIT), topk = ga_codec_params_default(GA_CODEC_TOPK);
    topk.ratio = 0.5f;

    /* One good chunk over the whole tensor, then bad ones. */
    assert_int_equal(ga_store_accumulate(s, 0, 0, N, GA_CODEC_NONE, &none, good, sizeof good), GA_OK);
    uint32_t aligned_words[N + 1];
    float *buf = (float *)aligned_words;
    memcpy(buf, good, sizeof good);
    assert_int_equal(ga_store_accumulate(s, 0, 1, N, GA_CODEC_NONE, &none, buf, N * 4), GA_E_LENGTH);
    assert_int_equal(ga_store_accumulate(s, 0, N + 1, 0, GA_CODEC_NONE, &none, buf, 0), GA_E_LENGTH);
    assert_int_equal(ga_store_accumulate(s, 0, SIZE_MAX, 2, GA_CODEC_NONE, &none, buf, 8), GA_E_LENGTH);
    assert_int_equal(ga_store_accumulate(s, 0, 2, SIZE_MAX, GA_CODEC_NONE, &none, buf, 8), GA_E_LENGTH);
    assert_int_equal(ga_store_accumulate(s, 1, 0, 10, GA_CODEC_NONE, &none, buf, 40), GA_E_UNKNOWN_TENSOR);
    assert_int_equal(ga_store_accumulate(s, 0, 0, 10, GA_CODEC_NONE, &none, buf, 36), GA_E_LENGTH);
    assert_int_equal(ga_store_accumulate(s, 0, 0, 10, GA_CODEC_NONE, &none, buf, 1u << 30), GA_E_LENGTH);
    assert_int_equal(ga_store_accumulate(s, 0, 0, 10, GA_CODEC_NONE, &none, NULL, 40), GA_E_INVAL);
    assert_int_equal(ga_store_accumulate(s, 0, 0, 10, GA_CODEC_NONE, NULL, buf, 40), GA_E_INVAL);
    assert_int_equal(ga_store_accumulate(s, 0, 0, 10, (ga_codec_id)77, &none, buf, 40), GA_E_CODEC);
    twobit.threshold = 0.0f;
    assert_int_equal(ga_store_accumulate(s, 0, 0, 16, GA_CODEC_2BIT, &twobit, buf, 4), GA_E_THRESHOLD);
    /* A NaN at the end of a valid-looking payload: the decode refuses it before adding. */
    buf[99] = NAN;
    assert_int_equal(ga_store_accumulate(s, 0, 0, 100, GA_CODEC_NONE, &none, buf, 400), GA_E_NONFINITE);
    /* The same through the unaligned path. */
    uint8_t *odd = (uint8_t *)aligned_words + 1;
    memmove(odd, buf, 400);
    assert_int_equal(ga_store_accumulate(s, 0, 0, 100, GA_CODEC_NONE, &none, odd, 400), GA_E_NONFINITE);
    /* Top-k: an index past the chunk. */
    uint32_t tk[1 + 2 + 2] = {2};
    float v = 1.0f;
    memcpy(&tk[1], &v, 4), memcpy(&tk[2], &v, 4);
    tk[3] = 3, tk[4] = 10;
    assert_int_equal(ga_store_accumulate(s, 0, 0, 10, GA_CODEC_TOPK, &topk, tk, sizeof tk), GA_E_INDEX_RANGE);
    tk[3] = 5, tk[4] = 4;
    assert_int_equal(ga_store_accumulate(s, 0, 0, 10, GA_CODEC_TOPK, &topk, tk, sizeof tk), GA_E_INDEX_ORDER);
    /* A good one that lands near the end, through the unaligned path. */
    tk[3] = 0, tk[4] = 9;
    memmove(odd, tk, sizeof tk);
    assert_int_equal(ga_store_accumulate(s, 0, N - 10, 10, GA_CODEC_TOPK, &topk, odd, sizeof tk), GA_OK);

    float sum[N];
    memcpy(sum, good, sizeof good);
    sum[N - 10] += 1.0f, sum[N - 1] += 1.0f;
    memcpy(want, init, sizeof init);
    oracle_reduce_add(want, sum, N);
    assert_int_equal(ga_store_apply(s, 1, &pub), GA_OK);
    expect_floats(pub.full->data, want, N, "full", "bad input", 1, 0);
    ga_published_clear(&pub);
    ga_store_destroy(s);
}

/* Discard drops what was accumulated; the next step starts from zero sums. */
static void discard_drops_the_step(void **state)
{
    (void)state;
    enum { N = 2500 };
    ga_store_config cfg = plain_config();
    cfg.optim = GA_OPTIM_SGD;
    cfg.sgd = (ga_sgd_params){.lr = 0.5f, .momentum = 0.9f};
    ga_store *s;
    assert_int_equal(ga_store_create(&cfg, &s), GA_OK);
    float init[N], g1[N], g2[N], want[N], buf[N] = {0};
    scenario_fill(init, N, 1, 1.0f), scenario_fill(g1, N, 2, 1.0f), scenario_fill(g2, N, 3, 1.0f);
    uint32_t index;
    ga_published pub;
    assert_int_equal(ga_store_add_tensor(s, N, init, &index, &pub), GA_OK);
    ga_published_clear(&pub);
    const ga_codec_params none = ga_codec_params_default(GA_CODEC_NONE);
    assert_int_equal(ga_store_accumulate(s, 0, 0, N, GA_CODEC_NONE, &none, g1, sizeof g1), GA_OK);
    assert_int_equal(ga_store_discard(s), GA_OK);
    assert_int_equal(ga_store_accumulate(s, 0, 0, N, GA_CODEC_NONE, &none, g2, sizeof g2), GA_OK);
    assert_int_equal(ga_store_apply(s, 1, &pub), GA_OK);
    memcpy(want, init, sizeof init);
    oracle_sgd_step(&cfg.sgd, want, buf, g2, N);
    expect_floats(pub.full->data, want, N, "full", "discard", 1, 0);
    ga_published_clear(&pub);
    /* An apply with nothing pushed: the sum is zero, momentum still moves the parameters. */
    assert_int_equal(ga_store_apply(s, 1, &pub), GA_OK);
    memset(g1, 0, sizeof g1);
    oracle_sgd_step(&cfg.sgd, want, buf, g1, N);
    expect_floats(pub.full->data, want, N, "full", "discard", 2, 0);
    ga_published_clear(&pub);
    assert_int_equal(ga_store_apply(s, 0, &pub), GA_E_INVAL);
    assert_int_equal(ga_store_apply(NULL, 1, &pub), GA_E_INVAL);
    assert_int_equal(ga_store_apply(s, 1, NULL), GA_E_INVAL);
    assert_int_equal(ga_store_discard(NULL), GA_E_INVAL);
    ga_store_destroy(s);
}

/* ---- configuration ---- */

/* The automatic pull threshold: each piece's delta picks its own threshold and level (pieces of
 * gradients 100x apart get levels about 100x apart), sends about the budget's density as +-level,
 * and a worker applying the deltas with the levels the chunks carry holds the published copy bit
 * for bit, step after step; an all-zero delta sends nothing. */
static void automatic_pull_threshold(void **state)
{
    (void)state;
    enum { PE = 16384, N = 3 * PE + 5000, STEPS = 6 };
    ga_store_config cfg = plain_config();
    cfg.piece_elems = PE;
    cfg.pull_codec = GA_CODEC_2BIT;
    cfg.pull_params = ga_codec_params_default(GA_CODEC_2BIT);
    cfg.pull_auto_bits = 1.5f;
    const double rho = ga_auto_density_for_bits(1.5);
    ga_store *s = store_of_zeros(&cfg, N);
    float *worker = floats0(N), *grad = floats0(N);
    const float scales[4] = {1.0f, 0.01f, 100.0f, 1.0f};
    uint64_t rng = 7;
    for (int step = 0; step < STEPS; step++) {
        bool zero = step == 0; /* params == published: the delta is all zero */
        for (size_t i = 0; i < N; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            double u = ((double)(rng >> 11) + 0.5) * 0x1p-53 - 0.5;
            grad[i] = zero ? 0.0f : scales[i / PE] * (float)(u < 0 ? log(1.0 + 2.0 * u) : -log(1.0 - 2.0 * u));
        }
        assert_int_equal(ga_store_accumulate(s, 0, 0, N, GA_CODEC_NONE, &cfg.pull_params, grad, N * sizeof(float)),
                         GA_OK);
        ga_published pub;
        float *before = floats0(N);
        memcpy(before, worker, N * sizeof(float));
        assert_int_equal(ga_store_apply(s, 1, &pub), GA_OK);
        worker_apply(&cfg, worker, N, &pub);
        expect_floats(pub.full->data, worker, N, "published copy", "auto pull", step, 0);
        assert_int_equal(pub.npieces, 4);
        for (size_t k = 0; k < pub.npieces; k++) {
            size_t lo = k * PE, len = N - lo < PE ? N - lo : PE, sent = 0;
            float level = pub.delta_level[k];
            for (size_t i = lo; i < lo + len; i++) {
                float d = worker[i] - before[i];
                if (d == 0.0f) continue;
                sent++;
                if (fabsf(fabsf(d) - level) > 1e-5f * (fabsf(before[i]) + level))
                    fail_msg("step %d piece %zu: element %zu moved by %g, level %g", step, k, i, (double)d,
                             (double)level);
            }
            if (zero) {
                assert_true(level == FLT_MAX && sent == 0);
            } else if (step == 1 && fabs((double)sent / (double)len - rho) > 0.15 * rho) {
                fail_msg("piece %zu: density %g, budget's %g", k, (double)sent / (double)len, rho);
            }
        }
        if (step == 1) {
            double r01 = (double)pub.delta_level[0] / (double)pub.delta_level[1];
            double r20 = (double)pub.delta_level[2] / (double)pub.delta_level[0];
            assert_true(r01 > 70.0 && r01 < 140.0 && r20 > 70.0 && r20 < 140.0);
        }
        ga_free(before);
        ga_published_clear(&pub);
    }
    ga_free(worker), ga_free(grad);
    ga_store_destroy(s);

    /* Only with the 2bit pull codec, and a budget in (0, log2 3]. */
    ga_store_config bad = cfg;
    bad.pull_auto_bits = 1.6f;
    assert_int_equal(ga_store_create(&bad, &s), GA_E_CONFIG);
    bad.pull_auto_bits = NAN;
    assert_int_equal(ga_store_create(&bad, &s), GA_E_CONFIG);
    bad.pull_auto_bits = -1.0f;
    assert_int_equal(ga_store_create(&bad, &s), GA_E_CONFIG);
    bad = cfg;
    bad.pull_codec = GA_CODEC_FP16, bad.pull_params = ga_codec_params_default(GA_CODEC_FP16);
    assert_int_equal(ga_store_create(&bad, &s), GA_E_CONFIG);
}

static void config_errors(void **state)
{
    (void)state;
    ga_store *s = NULL;
    ga_store_config cfg = plain_config();
    assert_int_equal(ga_store_create(NULL, &s), GA_E_INVAL);
    assert_int_equal(ga_store_create(&cfg, NULL), GA_E_INVAL);

    ga_store_config bad = cfg;
    bad.optim = GA_OPTIM_SGD, bad.sgd = (ga_sgd_params){.lr = 0.1f, .momentum = 1.0f};
    assert_int_equal(ga_store_create(&bad, &s), GA_E_OPTIM);
    bad.sgd = (ga_sgd_params){.lr = 0.1f, .nesterov = true}; /* nesterov needs momentum */
    assert_int_equal(ga_store_create(&bad, &s), GA_E_OPTIM);
    bad.sgd = (ga_sgd_params){.lr = -1.0f};
    assert_int_equal(ga_store_create(&bad, &s), GA_E_OPTIM);
    bad = cfg;
    bad.optim = GA_OPTIM_ADAM, bad.adam = (ga_adam_params){.lr = 1e-3f, .beta1 = 1.0f, .beta2 = 0.999f, .eps = 1e-8f};
    assert_int_equal(ga_store_create(&bad, &s), GA_E_OPTIM);
    bad.adam.beta1 = 0.9f, bad.adam.eps = 0.0f;
    assert_int_equal(ga_store_create(&bad, &s), GA_E_OPTIM);
    bad.adam.eps = 1e-8f, bad.adam.lr = 3e38f; /* step_size overflows at t = 1 */
    assert_int_equal(ga_store_create(&bad, &s), GA_E_OPTIM);
    bad = cfg;
    bad.block_elems = 1000; /* not a multiple of every codec's block */
    assert_int_equal(ga_store_create(&bad, &s), GA_E_CONFIG);
    bad = cfg;
    bad.optim = (ga_optim_kind)9;
    assert_int_equal(ga_store_create(&bad, &s), GA_E_OPTIM);

    bad = cfg;
    bad.pull_codec = GA_CODEC_2BIT, bad.pull_params.threshold = 0.0f;
    assert_int_equal(ga_store_create(&bad, &s), GA_E_THRESHOLD);
    bad.pull_codec = GA_CODEC_TOPK, bad.pull_params = ga_codec_params_default(GA_CODEC_TOPK);
    bad.pull_params.ratio = 0.0f;
    assert_int_equal(ga_store_create(&bad, &s), GA_E_RATIO);
    bad.pull_codec = (ga_codec_id)42;
    assert_int_equal(ga_store_create(&bad, &s), GA_E_CODEC);

    bad = cfg;
    bad.piece_elems = 0;
    assert_int_equal(ga_store_create(&bad, &s), GA_E_CONFIG);
    bad.piece_elems = 1000;
    assert_int_equal(ga_store_create(&bad, &s), GA_E_CONFIG);
    bad.piece_elems = 1024, bad.threads = -1;
    assert_int_equal(ga_store_create(&bad, &s), GA_E_CONFIG);
    bad = cfg;
    bad.pull_codec = GA_CODEC_TOPK, bad.pull_params = ga_codec_params_default(GA_CODEC_TOPK);
    bad.piece_elems = (size_t)1 << 33; /* more than top-k's 32-bit indices */
    assert_int_equal(ga_store_create(&bad, &s), GA_E_CONFIG);

    bad = cfg;
    bad.backend = (ga_backend)5;
    assert_int_equal(ga_store_create(&bad, &s), GA_E_BACKEND);
    if (ga_cuda_device_count() == 0) {
        bad.backend = GA_BACKEND_CUDA;
        assert_int_equal(ga_store_create(&bad, &s), ga_cuda_built() ? GA_E_NO_DEVICE : GA_E_NO_CUDA);
    }
    assert_null(s);

    /* A good one, and the calls that take a store refuse NULL. */
    assert_int_equal(ga_store_create(&cfg, &s), GA_OK);
    uint32_t index;
    ga_published pub;
    assert_int_equal(ga_store_add_tensor(NULL, 4, NULL, &index, &pub), GA_E_INVAL);
    assert_int_equal(ga_store_add_tensor(s, 4, NULL, NULL, &pub), GA_E_INVAL);
    assert_int_equal(ga_store_add_tensor(s, 4, NULL, &index, NULL), GA_E_INVAL);
    assert_int_equal(ga_store_add_tensor(s, SIZE_MAX / 2, NULL, &index, &pub), GA_E_TOO_LARGE);
    assert_int_equal(ga_store_accumulate(NULL, 0, 0, 0, GA_CODEC_NONE, &cfg.pull_params, NULL, 0), GA_E_INVAL);
    ga_store_destroy(s);
    ga_store_destroy(NULL);
    ga_published_clear(NULL);
}

/* ---- edge cases ---- */

/* A step whose parameters overflow (two finite 3e38 pushes in the second tensor) is applied but
 * not published: both applies say GA_E_NONFINITE and name the tensor; every pull codec alike.
 * A finite step before it is published as ever. */
static void overflow_is_not_published(void **state)
{
    (void)state;
    enum { N = 2048 };
    const ga_codec_id pulls[] = {GA_CODEC_NONE, GA_CODEC_2BIT, GA_CODEC_FP16, GA_CODEC_TOPK};
    for (size_t c = 0; c < sizeof pulls / sizeof pulls[0]; c++) {
        for (int in_place = 0; in_place < 2; in_place++) {
            ga_store_config cfg = plain_config();
            cfg.pull_codec = pulls[c];
            cfg.pull_params = ga_codec_params_default(pulls[c]);
            ga_store *s;
            assert_int_equal(ga_store_create(&cfg, &s), GA_OK);
            float init[N] = {0}, small[N], big[N];
            for (size_t i = 0; i < N; i++) small[i] = 1.0f, big[i] = 3e38f;
            uint32_t index;
            ga_published pub[2];
            for (int t = 0; t < 2; t++) {
                assert_int_equal(ga_store_add_tensor(s, N, init, &index, &pub[t]), GA_OK);
                ga_published_clear(&pub[t]);
            }
            assert_int_equal(ga_store_overflowed(s), UINT32_MAX);
            const ga_codec_params none = ga_codec_params_default(GA_CODEC_NONE);
            ga_status (*apply)(ga_store *, uint32_t, ga_published *) =
                in_place ? ga_store_apply_in_place : ga_store_apply;
            for (int rank = 0; rank < 2; rank++)
                for (uint32_t t = 0; t < 2; t++)
                    assert_int_equal(ga_store_accumulate(s, t, 0, N, GA_CODEC_NONE, &none, small, sizeof small), GA_OK);
            assert_int_equal(apply(s, 2, pub), GA_OK);
            ga_published_clear(&pub[0]), ga_published_clear(&pub[1]);
            for (int rank = 0; rank < 2; rank++) {
                assert_int_equal(ga_store_accumulate(s, 0, 0, N, GA_CODEC_NONE, &none, small, sizeof small), GA_OK);
                assert_int_equal(ga_store_accumulate(s, 1, 0, N, GA_CODEC_NONE, &none, big, sizeof big), GA_OK);
            }
            memset(pub, 0, sizeof pub);
            assert_int_equal(apply(s, 1, pub), GA_E_NONFINITE); /* a sum, not a mean: 3e38 + 3e38 */
            assert_int_equal(ga_store_overflowed(s), 1);
            assert_null(pub[0].full);
            assert_null(pub[1].full);
            ga_store_destroy(s);
        }
    }
}

/* fp16 pulls: a delta beyond fp16's range falls back to fp32 for that version only. */
static void fp16_pull_range_falls_back(void **state)
{
    (void)state;
    enum { N = 1024 };
    ga_store_config cfg = plain_config();
    cfg.pull_codec = GA_CODEC_FP16;
    ga_store *s;
    assert_int_equal(ga_store_create(&cfg, &s), GA_OK);
    float zero[N] = {0}, g[N];
    uint32_t index;
    ga_published pub;
    assert_int_equal(ga_store_add_tensor(s, N, zero, &index, &pub), GA_OK);
    ga_published_clear(&pub);
    const ga_codec_params none = ga_codec_params_default(GA_CODEC_NONE);
    for (size_t i = 0; i < N; i++) g[i] = 1e5f; /* > 65504 */
    assert_int_equal(ga_store_accumulate(s, 0, 0, N, GA_CODEC_NONE, &none, g, sizeof g), GA_OK);
    assert_int_equal(ga_store_apply(s, 1, &pub), GA_OK);
    assert_null(pub.delta);
    assert_memory_equal(pub.full->data, g, sizeof g);
    ga_published_clear(&pub);
    for (size_t i = 0; i < N; i++) g[i] = 0.5f;
    assert_int_equal(ga_store_accumulate(s, 0, 0, N, GA_CODEC_NONE, &none, g, sizeof g), GA_OK);
    assert_int_equal(ga_store_apply(s, 1, &pub), GA_OK);
    assert_non_null(pub.delta);
    assert_int_equal(pub.delta->size, 2 * N);
    assert_true(((const float *)pub.full->data)[5] == 1e5f + 0.5f);
    ga_published_clear(&pub);
    ga_store_destroy(s);
}

/* Tensors of 0 and 1 element, and pieces that end exactly on the tensor's end. */
static void small_and_exact_tensors(void **state)
{
    (void)state;
    ga_store_config cfg = plain_config();
    cfg.pull_codec = GA_CODEC_2BIT;
    cfg.pull_params.threshold = 0.5f;
    ga_store *s;
    assert_int_equal(ga_store_create(&cfg, &s), GA_OK);
    const size_t sizes[] = {0, 1, 2048};
    for (uint32_t t = 0; t < 3; t++) {
        uint32_t index;
        ga_published pub;
        assert_int_equal(ga_store_add_tensor(s, sizes[t], NULL, &index, &pub), GA_OK);
        assert_int_equal(index, t);
        assert_int_equal(pub.full->size, sizes[t] * sizeof(float));
        assert_int_equal(pub.npieces, (sizes[t] + 1023) / 1024);
        ga_published_clear(&pub);
    }
    float one = 1.0f;
    const ga_codec_params none = ga_codec_params_default(GA_CODEC_NONE);
    assert_int_equal(ga_store_accumulate(s, 1, 0, 1, GA_CODEC_NONE, &none, &one, 4), GA_OK);
    assert_int_equal(ga_store_accumulate(s, 0, 0, 0, GA_CODEC_NONE, &none, NULL, 0), GA_OK);
    assert_int_equal(ga_store_accumulate(s, 0, 0, 1, GA_CODEC_NONE, &none, &one, 4), GA_E_LENGTH);
    ga_published pubs[3];
    assert_int_equal(ga_store_apply(s, 1, pubs), GA_OK);
    assert_int_equal(pubs[0].npieces, 0);
    assert_non_null(pubs[0].delta);
    assert_int_equal(pubs[0].delta->size, 0);
    assert_int_equal(pubs[0].delta_off[0], 0);
    /* 1.0 - 0 through 2bit with t = 0.5: +0.5 sent, 0.5 held back. */
    assert_true(((const float *)pubs[1].full->data)[0] == 0.5f);
    assert_int_equal(pubs[1].delta->size, 4);
    assert_int_equal(pubs[2].npieces, 2);
    assert_int_equal(pubs[2].delta_off[2], 2 * 256);
    for (int t = 0; t < 3; t++) ga_published_clear(&pubs[t]);
    ga_store_destroy(s);
}

/* ga_store_bytes is exactly what the store took from the accounted allocator, as it grows. */
static void memory_is_accounted(void **state)
{
    (void)state;
    assert_int_equal(ga_store_bytes(NULL), 0);
    for (size_t i = 0; i < nscenarios; i++) {
        const scenario *sc = &scenarios[i];
        uint64_t before = ga_mem_in_use(GA_MEM_HOST);
        ga_store *s;
        assert_int_equal(ga_store_create(&sc->cfg, &s), GA_OK);
        assert_int_equal(ga_store_bytes(s), ga_mem_in_use(GA_MEM_HOST) - before);
        uint64_t params = 0;
        for (uint32_t t = 0; t < sc->ntensors; t++) {
            uint32_t index;
            ga_published pub;
            assert_int_equal(ga_store_add_tensor(s, sc->sizes[t], NULL, &index, &pub), GA_OK);
            ga_published_clear(&pub);
            params += sc->sizes[t] * sizeof(float);
            assert_int_equal(ga_store_bytes(s), ga_mem_in_use(GA_MEM_HOST) - before);
        }
        /* params (+ published, optimizer state); the step's sum comes with the first dense chunk */
        size_t per_elem = 1 + (sc->cfg.pull_codec != GA_CODEC_NONE) + (sc->cfg.optim == GA_OPTIM_ADAM ? 2 : 0) +
                          (sc->cfg.optim == GA_OPTIM_SGD && sc->cfg.sgd.momentum != 0.0f);
        assert_true(ga_store_bytes(s) >= per_elem * params);
        push_all(s, NULL, 1, 2, sc); /* unaligned payloads grow the staging buffer */
        assert_int_equal(ga_store_bytes(s), ga_mem_in_use(GA_MEM_HOST) - before);
        ga_published pubs[SCENARIO_MAX_TENSORS];
        assert_int_equal(ga_store_apply(s, 2, pubs), GA_OK);
        for (uint32_t t = 0; t < sc->ntensors; t++) ga_published_clear(&pubs[t]);
        /* the apply's scratch went back to the pool: counted there, not in the store */
        assert_int_equal(ga_store_bytes(s) + ga_store_scratch_pooled(), ga_mem_in_use(GA_MEM_HOST) - before);
        ga_store_destroy(s); /* the last store: the pool is emptied */
        assert_int_equal(ga_store_scratch_pooled(), 0);
        assert_int_equal(ga_mem_in_use(GA_MEM_HOST), before);
    }
}

/* Publications outlive the store: the blobs are the caller's. */
static void publications_outlive_the_store(void **state)
{
    (void)state;
    ga_store_config cfg = plain_config();
    ga_store *s;
    assert_int_equal(ga_store_create(&cfg, &s), GA_OK);
    float init[10];
    scenario_fill(init, 10, 3, 1.0f);
    uint32_t index;
    ga_published pub;
    assert_int_equal(ga_store_add_tensor(s, 10, init, &index, &pub), GA_OK);
    ga_blob *extra = ga_blob_ref(pub.full);
    ga_store_destroy(s);
    ga_published_clear(&pub);
    assert_memory_equal(extra->data, init, sizeof init);
    ga_blob_unref(extra);
}

/* ---- in place (ga_store_apply_in_place) ---- */

/* The bytes of one publication equal another's: full values, delta payloads and offsets. */
static void expect_same_pub(const ga_published *got, const ga_published *want, size_t n, const char *name, int step)
{
    if (memcmp(got->full->data, want->full->data, n * sizeof(float)) != 0)
        fail_msg("%s step %d: the full values differ", name, step);
    assert_int_equal(got->npieces, want->npieces);
    assert_int_equal(got->delta == NULL, want->delta == NULL);
    if (!want->delta) return;
    assert_int_equal(got->delta->size, want->delta->size);
    assert_memory_equal(got->delta_off, want->delta_off, (want->npieces + 1) * sizeof *want->delta_off);
    if (want->delta->size) assert_memory_equal(got->delta->data, want->delta->data, want->delta->size);
}

/* One scenario on two stores stepped alike: `copy` by ga_store_apply, `inplace` by
 * ga_store_apply_in_place, the caller keeping each latest publication as the core does. At the
 * steps in `held` (bit s for step s) a pull is in flight on inplace's current full blobs: an
 * extra reference across the apply, whose bytes must not change; there a new blob is published,
 * and elsewhere the same blob is rewritten. Both stores publish the same bytes every step. */
static void run_in_place(const scenario *sc, unsigned held)
{
    ga_store *copy, *inplace;
    ga_published cur_c[SCENARIO_MAX_TENSORS], cur_i[SCENARIO_MAX_TENSORS];
    assert_int_equal(ga_store_create(&sc->cfg, &copy), GA_OK);
    assert_int_equal(ga_store_create(&sc->cfg, &inplace), GA_OK);
    for (uint32_t t = 0; t < sc->ntensors; t++) {
        size_t n = sc->sizes[t];
        float *init = floats0(n);
        scenario_init(t, n, init);
        uint32_t index;
        assert_int_equal(ga_store_add_tensor(copy, n, init, &index, &cur_c[t]), GA_OK);
        assert_int_equal(ga_store_add_tensor(inplace, n, init, &index, &cur_i[t]), GA_OK);
        ga_free(init);
    }
    for (int step = 1; step <= SCENARIO_STEPS; step++) {
        uint32_t contributors = scenario_contributors(step);
        push_all(copy, NULL, step, contributors, sc);
        push_all(inplace, NULL, step, contributors, sc);
        ga_blob *pulled[SCENARIO_MAX_TENSORS] = {0};
        float *before[SCENARIO_MAX_TENSORS] = {0};
        for (uint32_t t = 0; t < sc->ntensors && (held >> step & 1); t++) {
            pulled[t] = ga_blob_ref(cur_i[t].full);
            before[t] = floats0(sc->sizes[t]);
            memcpy(before[t], pulled[t]->data, sc->sizes[t] * sizeof(float));
        }
        ga_published pc[SCENARIO_MAX_TENSORS], pi[SCENARIO_MAX_TENSORS];
        assert_int_equal(ga_store_apply(copy, contributors, pc), GA_OK);
        assert_int_equal(ga_store_apply_in_place(inplace, contributors, pi), GA_OK);
        for (uint32_t t = 0; t < sc->ntensors; t++) {
            size_t n = sc->sizes[t];
            assert_ptr_not_equal(pc[t].full, cur_c[t].full);
            if (pulled[t]) {
                if (memcmp(pulled[t]->data, before[t], n * sizeof(float)) != 0)
                    fail_msg("%s step %d tensor %u: a blob still being pulled was rewritten", sc->name, step, t);
                assert_ptr_not_equal(pi[t].full, pulled[t]);
                ga_blob_unref(pulled[t]);
                ga_free(before[t]);
            } else {
                assert_ptr_equal(pi[t].full, cur_i[t].full); /* no second copy */
            }
            expect_same_pub(&pi[t], &pc[t], n, sc->name, step);
            ga_published_clear(&cur_c[t]);
            ga_published_clear(&cur_i[t]);
            cur_c[t] = pc[t];
            cur_i[t] = pi[t];
        }
        assert_int_equal(ga_store_bytes(inplace), ga_store_bytes(copy));
    }
    for (uint32_t t = 0; t < sc->ntensors; t++) {
        ga_published_clear(&cur_c[t]);
        ga_published_clear(&cur_i[t]);
    }
    ga_store_destroy(copy);
    ga_store_destroy(inplace);
}

static void in_place_matches_copying(void **state)
{
    (void)state;
    for (size_t i = 0; i < nscenarios; i++) run_in_place(&scenarios[i], 0);
}

/* A pull in flight (steps 2 and 3) forces a new blob and leaves the pulled bytes alone; once it
 * is gone (step 4) the apply rewrites in place again. */
static void pulled_blob_is_never_rewritten(void **state)
{
    (void)state;
    for (size_t i = 0; i < nscenarios; i++) run_in_place(&scenarios[i], 1u << 2 | 1u << 3);
}

/* ---- the apply's gradient block ---- */

/* A payload of n gradients (seeded) in `codec`, with the parameters it was encoded with; top-k
 * payloads of odd seeds carry fp16 values and varint indices. */
static uint8_t *encoded(ga_codec_id codec, size_t n, uint64_t seed, ga_codec_params *p, size_t *len)
{
    *p = ga_codec_params_default(codec);
    if (codec == GA_CODEC_2BIT) p->threshold = 0.25f;
    if (codec == GA_CODEC_TOPK) p->ratio = 0.05f;
    if (codec == GA_CODEC_TOPK && seed % 2 == 1)
        p->topk_values = GA_TOPK_VALUES_FP16, p->topk_indices = GA_TOPK_INDICES_VARINT;
    size_t cap;
    assert_int_equal(ga_codec_encoded_size(codec, p, n, &cap), GA_OK);
    float *g = floats0(n), *r = floats0(n);
    scenario_fill(g, n, seed, 1.0f);
    uint8_t *out = ga_malloc(cap);
    assert_non_null(out);
    const ga_exec cpu = GA_EXEC_CPU_INIT;
    float *res = ga_codec_has_residual(codec) ? r : NULL;
    assert_int_equal(ga_codec_encode(&cpu, codec, p, g, res, n, out, cap, len), GA_OK);
    ga_free(g), ga_free(r);
    return out;
}

/* Held chunks longer than the block are stepped block by block, each block decoding its slice of
 * every payload: the same bytes as one pass over each range (the default block holds them all),
 * for every codec that carries its elements in order and for top-k (in both its formats), next to
 * a range decoded whole (1bit_scaled) and a gap no chunk covers; with fp32 and with 2bit pulls. */
static void blocks_match_one_pass(void **state)
{
    (void)state;
    enum { N = 16000, W = 3, STEPS = 3 };
    static const struct {
        size_t lo, n;
        ga_codec_id codec[W];
    } ranges[] = {
        {0, 4500, {GA_CODEC_2BIT, GA_CODEC_FP16, GA_CODEC_1BIT}}, /* 4 blocks and a tail */
        {4500, 3000, {GA_CODEC_2BIT, GA_CODEC_NONE, GA_CODEC_BF16}},
        {7500, 2500, {GA_CODEC_2BIT, GA_CODEC_1BIT_SCALED, GA_CODEC_2BIT}},
        {10000, 1500, {GA_CODEC_TOPK, GA_CODEC_2BIT, GA_CODEC_TOPK}},
        {12288, 3712, {GA_CODEC_TOPK, GA_CODEC_TOPK, GA_CODEC_NONE}}, /* 3 blocks and a tail */
    }; /* [11500, 12288): no chunk */
    for (int pulls = 0; pulls < 2; pulls++) {
        ga_store_config cfg = plain_config();
        cfg.mean = true, cfg.optim = GA_OPTIM_SGD, cfg.sgd = (ga_sgd_params){.lr = 0.1f, .momentum = 0.9f};
        if (pulls) cfg.pull_codec = GA_CODEC_2BIT, cfg.pull_params.threshold = 0.004f;
        ga_store *blocks, *one_pass;
        cfg.block_elems = 1024;
        assert_int_equal(ga_store_create(&cfg, &blocks), GA_OK);
        cfg.block_elems = 0;
        assert_int_equal(ga_store_create(&cfg, &one_pass), GA_OK);
        float *init = floats0(N);
        scenario_fill(init, N, 11, 1.0f);
        uint32_t index;
        ga_published pb, po;
        assert_int_equal(ga_store_add_tensor(blocks, N, init, &index, &pb), GA_OK);
        assert_int_equal(ga_store_add_tensor(one_pass, N, init, &index, &po), GA_OK);
        ga_published_clear(&pb), ga_published_clear(&po), ga_free(init);
        for (int step = 1; step <= STEPS; step++) {
            for (uint32_t w = 0; w < W; w++)
                for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
                    ga_codec_params p;
                    size_t len;
                    uint8_t *payload = encoded(ranges[r].codec[w], ranges[r].n, (uint64_t)step << 8 | w << 4 | r, &p, &len);
                    assert_int_equal(ga_store_accumulate(blocks, 0, ranges[r].lo, ranges[r].n, ranges[r].codec[w], &p,
                                                         payload, len),
                                     GA_OK);
                    assert_int_equal(ga_store_accumulate(one_pass, 0, ranges[r].lo, ranges[r].n, ranges[r].codec[w],
                                                         &p, payload, len),
                                     GA_OK);
                    ga_free(payload);
                }
            assert_int_equal(ga_store_apply(blocks, W, &pb), GA_OK);
            assert_int_equal(ga_store_apply(one_pass, W, &po), GA_OK);
            expect_same_pub(&pb, &po, N, pulls ? "blocks, 2bit pulls" : "blocks, fp32 pulls", step);
            ga_published_clear(&pb), ga_published_clear(&po);
        }
        ga_store_destroy(blocks);
        ga_store_destroy(one_pass);
    }
}

/* The apply's scratch is one gradient block and one pull piece, whatever the length of the
 * chunks held (here chunks over a whole tensor of 64 blocks: 2bit, and top-k with one slice of
 * its payload besides), and a store between steps keeps none of it. */
static void scratch_is_one_block(ga_codec_id codec)
{
    enum { BLOCK = 1024, N = 64 * BLOCK };
    ga_store_config cfg = plain_config();
    cfg.optim = GA_OPTIM_SGD, cfg.sgd = (ga_sgd_params){.lr = 0.1f, .momentum = 0.9f};
    cfg.pull_codec = GA_CODEC_2BIT, cfg.pull_params.threshold = 0.004f;
    cfg.block_elems = BLOCK;
    ga_store *s = store_of_zeros(&cfg, N);
    ga_published pub;
    ga_codec_params p;
    size_t len, piece_payload, delta_payload;
    uint8_t *payload = encoded(codec, N, 7, &p, &len);
    assert_int_equal(ga_codec_encoded_size(GA_CODEC_2BIT, &cfg.pull_params, cfg.piece_elems, &piece_payload), GA_OK);
    assert_int_equal(ga_codec_encoded_size(GA_CODEC_2BIT, &cfg.pull_params, N, &delta_payload), GA_OK);
    /* The gradient block, the piece's delta and residual and its payload, the new delta blob, a
     * top-k slice; 4 KiB for the small arrays (the sorted chunks, the publications, the piece
     * offsets). */
    uint64_t scratch = BLOCK * sizeof(float) + 2 * cfg.piece_elems * sizeof(float) + piece_payload +
                       ga_blob_footprint(delta_payload) + (codec == GA_CODEC_TOPK ? len : 0) + 4096;
    uint64_t between = 0;
    for (int step = 0; step < 2; step++) {
        /* params, the published copy, momentum; 2 KiB and a little of records (the store, its
         * tensor array, the blob's header, the held-chunk array; 2056 bytes measured), the same
         * after every apply */
        uint64_t held = ga_store_bytes(s);
        assert_true(held <= 3 * N * sizeof(float) + 2048 + 64);
        if (step > 0) assert_int_equal(held, between);
        for (int rank = 0; rank < 2; rank++)
            assert_int_equal(ga_store_accumulate(s, 0, 0, N, codec, &p, payload, len), GA_OK);
        assert_true(ga_store_bytes(s) >= held + 2 * len); /* the two chunks are held */
        uint64_t before = ga_mem_in_use(GA_MEM_HOST);
        ga_mem_peak_reset(GA_MEM_HOST);
        assert_int_equal(ga_store_apply_in_place(s, 2, &pub), GA_OK);
        uint64_t peak = ga_mem_peak(GA_MEM_HOST) - before;
        if (peak > scratch)
            fail_msg("%s, step %d: the apply took %llu bytes at its peak, more than %llu", ga_codec_name(codec), step,
                     (unsigned long long)peak, (unsigned long long)scratch);
        assert_non_null(pub.delta);
        ga_published_clear(&pub);
        between = ga_store_bytes(s);
    }
    ga_free(payload);
    ga_store_destroy(s);
}

static void apply_scratch_is_one_block(void **state)
{
    (void)state;
    scratch_is_one_block(GA_CODEC_2BIT);
    scratch_is_one_block(GA_CODEC_TOPK);
}

/* Two held 2bit chunks applied on a store of N zeros (pull codec 2bit, gradient block BLOCK). */
static void two_chunk_step(ga_store *s, size_t n, const uint8_t *payload, size_t len, const ga_codec_params *p)
{
    ga_published pub;
    for (int rank = 0; rank < 2; rank++)
        assert_int_equal(ga_store_accumulate(s, 0, 0, n, GA_CODEC_2BIT, p, payload, len), GA_OK);
    assert_int_equal(ga_store_apply_in_place(s, 2, &pub), GA_OK);
    ga_published_clear(&pub);
}

/* The apply's scratch goes back to one pool that every store takes from: a second store's apply
 * of the same shape takes no new memory, the pool keeps to its limit, and the last store gone
 * empties it. */
static void scratch_pool_is_shared_and_bounded(void **state)
{
    (void)state;
    enum { BLOCK = 1024, N = 64 * BLOCK };
    ga_store_config cfg = plain_config();
    cfg.pull_codec = GA_CODEC_2BIT, cfg.pull_params.threshold = 0.004f;
    cfg.block_elems = BLOCK;
    ga_store *a = store_of_zeros(&cfg, N), *b = store_of_zeros(&cfg, N);
    ga_codec_params p;
    size_t len;
    uint8_t *payload = encoded(GA_CODEC_2BIT, N, 7, &p, &len);
    assert_int_equal(ga_store_scratch_pooled(), 0);
    two_chunk_step(b, N, payload, len, &p); /* b's held-chunk array and delta offsets exist now */
    uint64_t b_held = ga_store_bytes(b);

    two_chunk_step(a, N, payload, len, &p);
    /* the block, the piece's delta, residual and payload at least */
    uint64_t pooled = ga_store_scratch_pooled();
    assert_true(pooled >= BLOCK * sizeof(float) + 2 * cfg.piece_elems * sizeof(float));
    assert_true(pooled <= GA_STORE_SCRATCH_POOL_BYTES);
    uint64_t in_use = ga_mem_in_use(GA_MEM_HOST);
    two_chunk_step(b, N, payload, len, &p);
    assert_int_equal(ga_store_scratch_pooled(), pooled);  /* b took a's blocks and gave them back */
    assert_int_equal(ga_mem_in_use(GA_MEM_HOST), in_use); /* and made none of its own */
    assert_int_equal(ga_store_bytes(b), b_held);          /* a store keeps none between steps */

    ga_store_scratch_pool_limit(pooled - 1); /* the oldest block given back goes */
    two_chunk_step(a, N, payload, len, &p);
    assert_true(ga_store_scratch_pooled() > 0 && ga_store_scratch_pooled() <= pooled - 1);
    ga_store_scratch_pool_limit(0); /* nothing is kept */
    two_chunk_step(b, N, payload, len, &p);
    assert_int_equal(ga_store_scratch_pooled(), 0);
    ga_store_scratch_pool_limit(GA_STORE_SCRATCH_POOL_BYTES);

    two_chunk_step(a, N, payload, len, &p);
    ga_store_destroy(a);
    assert_int_equal(ga_store_scratch_pooled(), pooled); /* b is still there */
    ga_store_destroy(b);
    assert_int_equal(ga_store_scratch_pooled(), 0);
    ga_free(payload);
}

/* A step of lent fp32 pushes costs the CPU store no memory: no copy, no fp32 sum, between steps
 * or during them, while the same pushes copied make the store keep a whole-tensor sum. */
static void lent_fp32_steps_take_no_memory(void **state)
{
    (void)state;
    enum { BLOCK = 1024, N = 16 * BLOCK, W = 3 };
    ga_store_config cfg = plain_config();
    cfg.optim = GA_OPTIM_SGD, cfg.sgd = (ga_sgd_params){.lr = 0.1f, .momentum = 0.9f};
    cfg.block_elems = BLOCK;
    ga_store *lending, *copying;
    assert_int_equal(ga_store_create(&cfg, &lending), GA_OK);
    assert_int_equal(ga_store_create(&cfg, &copying), GA_OK);
    uint32_t index;
    ga_published pl, pc;
    assert_int_equal(ga_store_add_tensor(lending, N, NULL, &index, &pl), GA_OK);
    assert_int_equal(ga_store_add_tensor(copying, N, NULL, &index, &pc), GA_OK);
    ga_published_clear(&pl), ga_published_clear(&pc);
    const ga_codec_params none = ga_codec_params_default(GA_CODEC_NONE);
    float *g[W];
    for (int step = 1; step <= 2; step++) {
        uint64_t lending_before = ga_store_bytes(lending), copying_before = ga_store_bytes(copying);
        for (uint32_t w = 0; w < W; w++) {
            g[w] = floats0(N);
            scenario_fill(g[w], N, (uint64_t)step << 4 | w, 1.0f);
            bool kept = false;
            assert_int_equal(ga_store_accumulate_lent(lending, 0, 0, N, GA_CODEC_NONE, &none, g[w], N * sizeof(float),
                                                      &kept),
                             GA_OK);
            assert_true(kept);
            assert_int_equal(ga_store_accumulate(copying, 0, 0, N, GA_CODEC_NONE, &none, g[w], N * sizeof(float)),
                             GA_OK);
        }
        assert_true(ga_store_bytes(lending) <= lending_before + 1024); /* the held-chunk array at most */
        assert_true(ga_store_bytes(copying) >= copying_before + (step == 1 ? N * sizeof(float) : 0));
        assert_int_equal(ga_store_apply_in_place(lending, W, &pl), GA_OK);
        assert_int_equal(ga_store_apply_in_place(copying, W, &pc), GA_OK);
        expect_same_pub(&pl, &pc, N, "lent fp32", step);
        ga_published_clear(&pl), ga_published_clear(&pc);
        for (uint32_t w = 0; w < W; w++) ga_free(g[w]);
        assert_true(ga_store_bytes(lending) <= lending_before + 1024);
    }
    /* the copying store keeps its sum; the lending one a held-chunk array instead */
    assert_true(ga_store_bytes(copying) + 1024 >= ga_store_bytes(lending) + N * sizeof(float));
    ga_store_destroy(lending);
    ga_store_destroy(copying);
}

/* A lent payload's values are the caller's to check (store.h): the store takes a NaN one without
 * a scan of the payload and adds it; its length is still checked, before anything is held. */
static void lent_payload_values_are_the_lenders(void **state)
{
    (void)state;
    enum { N = 4096 };
    ga_store_config cfg = plain_config();
    ga_store *s = store_of_zeros(&cfg, N);
    ga_published pub;
    const ga_codec_params none = ga_codec_params_default(GA_CODEC_NONE);
    float *g = floats0(N);
    g[N / 2] = NAN;
    bool kept = false;
    assert_int_equal(ga_store_accumulate_lent(s, 0, 0, N, GA_CODEC_NONE, &none, g, N * sizeof(float) - 4, &kept),
                     GA_E_LENGTH);
    assert_false(kept);
    assert_int_equal(ga_store_accumulate_lent(s, 0, 0, N, GA_CODEC_NONE, &none, g, N * sizeof(float), &kept), GA_OK);
    assert_true(kept);
    /* ... and the NaN it added reaches the parameters, where the apply's scan finds it. */
    assert_int_equal(ga_store_apply_in_place(s, 1, &pub), GA_E_NONFINITE);
    assert_int_equal(ga_store_overflowed(s), 0);
    ga_free(g);
    ga_store_destroy(s);
}

int main(void)
{
    test_memory_baseline();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(scenarios_match_model),
        cmocka_unit_test(lent_scenarios_match_model),
        cmocka_unit_test(compressed_pulls_hold_back),
        cmocka_unit_test(automatic_pull_threshold),
        cmocka_unit_test(bad_accumulate_changes_nothing),
        cmocka_unit_test(discard_drops_the_step),
        cmocka_unit_test(config_errors),
        cmocka_unit_test(overflow_is_not_published),
        cmocka_unit_test(fp16_pull_range_falls_back),
        cmocka_unit_test(small_and_exact_tensors),
        cmocka_unit_test(memory_is_accounted),
        cmocka_unit_test(publications_outlive_the_store),
        cmocka_unit_test(in_place_matches_copying),
        cmocka_unit_test(pulled_blob_is_never_rewritten),
        cmocka_unit_test(blocks_match_one_pass),
        cmocka_unit_test(apply_scratch_is_one_block),
        cmocka_unit_test(scratch_pool_is_shared_and_bounded),
        cmocka_unit_test(lent_fp32_steps_take_no_memory),
        cmocka_unit_test(lent_payload_values_are_the_lenders),
        cmocka_unit_test(test_host_memory_returned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
