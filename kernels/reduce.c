/* ga_reduce.h: argument checks and backend dispatch for the reductions, and their CPU
 * side. The sum runs over cache-sized blocks of the output, adding the inputs in rank order a
 * few at a time, so each input is streamed once and the block stays in L1 between passes. */
#include <math.h>
#include <string.h>

#include "ga_parallel.h"
#include "optim_internal.h"

/* Elements of the output a sum block covers: 4 KB, well inside L1 next to the input stream. */
#define SUM_BLOCK 1024

/* ---- dispatch ---- */

typedef struct reduce_impl {
    ga_status (*sum)(const ga_exec *, const float *const *, int, size_t, float *);
    ga_status (*add)(const ga_exec *, float *, const float *, size_t);
    ga_status (*scale)(const ga_exec *, float *, size_t, float);
    ga_status (*sub)(const ga_exec *, float *, const float *, const float *, size_t);
} reduce_impl;

static const reduce_impl impls[GA_BACKENDS] = {
    [GA_BACKEND_CPU] = {ga_reduce_sum_cpu, ga_reduce_add_cpu, ga_reduce_scale_cpu, ga_reduce_sub_cpu},
    [GA_BACKEND_CUDA] = {GA_CUDA_TWIN(ga_reduce_sum), GA_CUDA_TWIN(ga_reduce_add), GA_CUDA_TWIN(ga_reduce_scale),
                         GA_CUDA_TWIN(ga_reduce_sub)},
};

/* The implementations for ex's backend, or NULL with *rc saying why there are none. */
static const reduce_impl *impl_for(const ga_exec *ex, ga_status *rc)
{
    *rc = ga_exec_usable(ex);
    return *rc == GA_OK ? &impls[ex->backend] : NULL;
}

ga_status ga_reduce_sum(const ga_exec *ex, const float *const *inputs, int count, size_t n, float *out)
{
    if (!ex || count < 1 || count > GA_REDUCE_MAX_INPUTS) return GA_E_INVAL;
    if (n > 0) {
        if (!inputs || !out) return GA_E_INVAL;
        for (int k = 0; k < count; k++)
            if (!inputs[k] || (k > 0 && inputs[k] == out)) return GA_E_INVAL;
    }
    ga_status rc;
    const reduce_impl *impl = impl_for(ex, &rc);
    if (!impl || n == 0) return rc;
    return impl->sum(ex, inputs, count, n, out);
}

ga_status ga_reduce_add(const ga_exec *ex, float *acc, const float *x, size_t n)
{
    if (!ex || (n > 0 && (!acc || !x))) return GA_E_INVAL;
    ga_status rc;
    const reduce_impl *impl = impl_for(ex, &rc);
    if (!impl || n == 0) return rc;
    return impl->add(ex, acc, x, n);
}

ga_status ga_reduce_scale(const ga_exec *ex, float *x, size_t n, float s)
{
    if (!ex || (n > 0 && !x)) return GA_E_INVAL;
    if (!isfinite(s)) return GA_E_NONFINITE;
    ga_status rc;
    const reduce_impl *impl = impl_for(ex, &rc);
    if (!impl || n == 0) return rc;
    return impl->scale(ex, x, n, s);
}

ga_status ga_reduce_sub(const ga_exec *ex, float *out, const float *a, const float *b, size_t n)
{
    if (!ex || (n > 0 && (!out || !a || !b))) return GA_E_INVAL;
    ga_status rc;
    const reduce_impl *impl = impl_for(ex, &rc);
    if (!impl || n == 0) return rc;
    return impl->sub(ex, out, a, b, n);
}

/* ---- CPU ---- */

typedef struct reduce_ctx {
    const float *const *inputs;
    int count;
    float *out;
    const float *x;
    const float *y;
    float s;
} reduce_ctx;

/* sum_span adds up to four vectors, ((a + b) + c) + d, in one pass. out may equal a (the
 * running sum, or inputs[0]): the vectoriser's overlap check lets identical pointers through. */
GA_CLONES static void add2_span(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

GA_CLONES static void add3_span(float *out, const float *a, const float *b, const float *c, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = (a[i] + b[i]) + c[i];
}

GA_CLONES static void add4_span(float *out, const float *a, const float *b, const float *c, const float *d, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = ((a[i] + b[i]) + c[i]) + d[i];
}

/* out = ((x[0] + x[1]) + ...) + x[k-1] for k in [1, 4]. */
static void sum_span(float *out, const float *const *x, int k, size_t n)
{
    switch (k) {
    case 1:
        if (out != x[0]) memcpy(out, x[0], n * sizeof *out);
        break;
    case 2: add2_span(out, x[0], x[1], n); break;
    case 3: add3_span(out, x[0], x[1], x[2], n); break;
    default: add4_span(out, x[0], x[1], x[2], x[3], n); break;
    }
}

GA_CLONES static void sub_span(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = a[i] - b[i];
}

GA_CLONES static void scale_span(float *x, float s, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = x[i] * s;
}

/* Blocks of the output take the first four inputs in one pass, then three more per pass with
 * the running sum as the first operand: rank order throughout. */
static uint32_t sum_tile(void *vctx, size_t lo, size_t hi)
{
    const reduce_ctx *c = vctx;
    for (size_t b = lo; b < hi; b += SUM_BLOCK) {
        size_t len = hi - b < SUM_BLOCK ? hi - b : SUM_BLOCK;
        float *out = c->out + b;
        const float *x[4] = {NULL, NULL, NULL, NULL}; /* count >= 1 fills x[0] */
        int done = c->count < 4 ? c->count : 4;
        for (int j = 0; j < done; j++) x[j] = c->inputs[j] + b;
        sum_span(out, x, done, len);
        while (done < c->count) {
            int more = c->count - done < 3 ? c->count - done : 3;
            x[0] = out;
            for (int j = 0; j < more; j++) x[1 + j] = c->inputs[done + j] + b;
            sum_span(out, x, 1 + more, len);
            done += more;
        }
    }
    return 0;
}

static uint32_t add_tile(void *vctx, size_t lo, size_t hi)
{
    const reduce_ctx *c = vctx;
    add2_span(c->out + lo, c->out + lo, c->x + lo, hi - lo);
    return 0;
}

static uint32_t scale_tile(void *vctx, size_t lo, size_t hi)
{
    const reduce_ctx *c = vctx;
    scale_span(c->out + lo, c->s, hi - lo);
    return 0;
}

static uint32_t sub_tile(void *vctx, size_t lo, size_t hi)
{
    const reduce_ctx *c = vctx;
    sub_span(c->out + lo, c->x + lo, c->y + lo, hi - lo);
    return 0;
}

ga_status ga_reduce_sum_cpu(const ga_exec *ex, const float *const *inputs, int count, size_t n, float *out)
{
    reduce_ctx c = {.inputs = inputs, .count = count, .out = out};
    ga_parallel_tiles(ex, n, 4.0 * (count + 1), sum_tile, &c);
    return GA_OK;
}

ga_status ga_reduce_add_cpu(const ga_exec *ex, float *acc, const float *x, size_t n)
{
    reduce_ctx c = {.out = acc, .x = x};
    ga_parallel_tiles(ex, n, 12.0, add_tile, &c);
    return GA_OK;
}

ga_status ga_reduce_scale_cpu(const ga_exec *ex, float *x, size_t n, float s)
{
    reduce_ctx c = {.out = x, .s = s};
    ga_parallel_tiles(ex, n, 8.0, scale_tile, &c);
    return GA_OK;
}

ga_status ga_reduce_sub_cpu(const ga_exec *ex, float *out, const float *a, const float *b, size_t n)
{
    reduce_ctx c = {.out = out, .x = a, .y = b};
    ga_parallel_tiles(ex, n, 12.0, sub_tile, &c);
    return GA_OK;
}
