/* ga_optim.h: hyper-parameter checks and backend dispatch for SGD and Adam, and their CPU side:
 * loops over optim_math.h, specialised on the loop-invariant branches so each one vectorises. */
#include <math.h>

#include "ga_parallel.h"
#include "optim_internal.h"
#include "optim_math.h"

#if GA_X86
#include <immintrin.h>
#endif

#define GA_ALWAYS_INLINE inline __attribute__((always_inline))

/* Elements of one Adam block: its p, m, v and square roots (16 KB) stay in L1 between the
 * three passes. */
#define ADAM_BLOCK 1024

/* ---- validation and dispatch ---- */

static bool finite_nonneg(float x) { return isfinite(x) && x >= 0.0f; }
static bool unit_open(float x) { return isfinite(x) && x >= 0.0f && x < 1.0f; } /* [0, 1) */

static bool sgd_params_valid(const ga_sgd_params *hp)
{
    return finite_nonneg(hp->lr) && unit_open(hp->momentum) && finite_nonneg(hp->weight_decay) &&
           (!hp->nesterov || hp->momentum > 0.0f);
}

static bool adam_params_valid(const ga_adam_params *hp, uint64_t t)
{
    ga_adam_coefs c;
    return t >= 1 && finite_nonneg(hp->lr) && unit_open(hp->beta1) && unit_open(hp->beta2) && isfinite(hp->eps) &&
           hp->eps > 0.0f && finite_nonneg(hp->weight_decay) && ga_adam_coefs_of(hp, t, &c);
}

typedef struct optim_impl {
    ga_status (*sgd)(const ga_exec *, const ga_sgd_params *, float *, float *, const float *, size_t);
    ga_status (*adam)(const ga_exec *, const ga_adam_params *, uint64_t, float *, float *, float *, const float *,
                      size_t);
} optim_impl;

static const optim_impl impls[GA_BACKENDS] = {
    [GA_BACKEND_CPU] = {ga_sgd_step_cpu, ga_adam_step_cpu},
    [GA_BACKEND_CUDA] = {GA_CUDA_TWIN(ga_sgd_step), GA_CUDA_TWIN(ga_adam_step)},
};

/* The implementations for ex's backend, or NULL with *rc saying why there are none. */
static const optim_impl *impl_for(const ga_exec *ex, ga_status *rc)
{
    *rc = ga_exec_usable(ex);
    return *rc == GA_OK ? &impls[ex->backend] : NULL;
}

ga_status ga_sgd_step(const ga_exec *ex, const ga_sgd_params *hp, float *param, float *momentum_buf,
                      const float *grad, size_t n)
{
    if (!ex || !hp) return GA_E_INVAL;
    if (n > 0 && (!param || !grad || (hp->momentum != 0.0f && !momentum_buf))) return GA_E_INVAL;
    if (!sgd_params_valid(hp)) return GA_E_OPTIM;
    ga_status rc;
    const optim_impl *impl = impl_for(ex, &rc);
    if (!impl || n == 0) return rc;
    return impl->sgd(ex, hp, param, momentum_buf, grad, n);
}

ga_status ga_adam_step(const ga_exec *ex, const ga_adam_params *hp, uint64_t t, float *param, float *m, float *v,
                       const float *grad, size_t n)
{
    if (!ex || !hp) return GA_E_INVAL;
    if (n > 0 && (!param || !m || !v || !grad)) return GA_E_INVAL;
    if (!adam_params_valid(hp, t)) return GA_E_OPTIM;
    ga_status rc;
    const optim_impl *impl = impl_for(ex, &rc);
    if (!impl || n == 0) return rc;
    return impl->adam(ex, hp, t, param, m, v, grad, n);
}

/* ---- CPU: SGD ---- */

typedef struct sgd_ctx {
    ga_sgd_params hp;
    bool decay;
    int mode;
    float *p, *buf;
    const float *g;
} sgd_ctx;

/* decay and mode are literals at every call, so each instance is one branch-free loop. */
static GA_ALWAYS_INLINE void sgd_loop(ga_sgd_params hp, bool decay, int mode, float *p, float *buf, const float *g,
                                      size_t n)
{
    for (size_t i = 0; i < n; i++) {
        ga_sgd_elem_out o = ga_sgd_elem(hp, decay, mode, p[i], mode != GA_SGD_PLAIN ? buf[i] : 0.0f, g[i]);
        p[i] = o.p;
        if (mode != GA_SGD_PLAIN) buf[i] = o.buf;
    }
}

GA_CLONES static void sgd_span(ga_sgd_params hp, bool decay, int mode, float *p, float *buf, const float *g,
                               size_t n)
{
    switch (mode * 2 + decay) {
    case GA_SGD_PLAIN * 2: sgd_loop(hp, false, GA_SGD_PLAIN, p, buf, g, n); break;
    case GA_SGD_PLAIN * 2 + 1: sgd_loop(hp, true, GA_SGD_PLAIN, p, buf, g, n); break;
    case GA_SGD_MOMENTUM * 2: sgd_loop(hp, false, GA_SGD_MOMENTUM, p, buf, g, n); break;
    case GA_SGD_MOMENTUM * 2 + 1: sgd_loop(hp, true, GA_SGD_MOMENTUM, p, buf, g, n); break;
    case GA_SGD_NESTEROV * 2: sgd_loop(hp, false, GA_SGD_NESTEROV, p, buf, g, n); break;
    default: sgd_loop(hp, true, GA_SGD_NESTEROV, p, buf, g, n); break;
    }
}

static uint32_t sgd_tile(void *vctx, size_t lo, size_t hi)
{
    const sgd_ctx *c = vctx;
    sgd_span(c->hp, c->decay, c->mode, c->p + lo, c->buf ? c->buf + lo : NULL, c->g + lo, hi - lo);
    return 0;
}

ga_status ga_sgd_step_cpu(const ga_exec *ex, const ga_sgd_params *hp, float *param, float *momentum_buf,
                          const float *grad, size_t n)
{
    sgd_ctx c = {.hp = *hp, .decay = ga_sgd_decays(hp), .mode = ga_sgd_mode(hp), .p = param, .g = grad};
    if (c.mode != GA_SGD_PLAIN) c.buf = momentum_buf;
    ga_parallel_tiles(ex, n, c.mode != GA_SGD_PLAIN ? 20.0 : 12.0, sgd_tile, &c);
    return GA_OK;
}

/* ---- CPU: Adam ----
 * sqrtf may set errno, so without -fno-math-errno GCC will not vectorise a loop calling it.
 * Each block therefore runs in three passes: the moments (vectorised), the square roots
 * (explicit vector instructions; IEEE sqrt is exact, so every ISA gives the same bits), and
 * the parameter update (vectorised). */

typedef struct adam_ctx {
    const ga_exec *ex;
    ga_adam_coefs c;
    float *p, *m, *v;
    const float *g;
} adam_ctx;

static GA_ALWAYS_INLINE void adam_moments_loop(ga_adam_coefs c, int wd_mode, float *p, float *m, float *v,
                                               const float *g, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        ga_adam_elem_state s = ga_adam_moments(c, wd_mode, p[i], m[i], v[i], g[i]);
        if (wd_mode == GA_ADAM_WD_DECOUPLED) p[i] = s.p;
        m[i] = s.m;
        v[i] = s.v;
    }
}

GA_CLONES static void adam_moments_span(ga_adam_coefs c, float *p, float *m, float *v, const float *g, size_t n)
{
    switch (c.wd_mode) {
    case GA_ADAM_WD_NONE: adam_moments_loop(c, GA_ADAM_WD_NONE, p, m, v, g, n); break;
    case GA_ADAM_WD_L2: adam_moments_loop(c, GA_ADAM_WD_L2, p, m, v, g, n); break;
    default: adam_moments_loop(c, GA_ADAM_WD_DECOUPLED, p, m, v, g, n); break;
    }
}

GA_CLONES static void adam_update_span(ga_adam_coefs c, float *p, const float *m, const float *sqrt_v, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = ga_adam_update(c, p[i], m[i], sqrt_v[i]);
}

static void sqrt_scalar(float *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = sqrtf(src[i]);
}

#if GA_X86
GA_TARGET_AVX512 static void sqrt_avx512(float *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_sqrt_ps(_mm512_loadu_ps(src + i)));
    sqrt_scalar(dst + i, src + i, n - i);
}

GA_TARGET_AVX2 static void sqrt_avx2(float *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_sqrt_ps(_mm256_loadu_ps(src + i)));
    sqrt_scalar(dst + i, src + i, n - i);
}
#endif

static void sqrt_span(ga_simd simd, float *dst, const float *src, size_t n)
{
    switch (simd) {
#if GA_X86
    case GA_SIMD_AVX512: sqrt_avx512(dst, src, n); break;
    case GA_SIMD_AVX2: sqrt_avx2(dst, src, n); break;
#endif
    default: sqrt_scalar(dst, src, n); break;
    }
}

static uint32_t adam_tile(void *vctx, size_t lo, size_t hi)
{
    const adam_ctx *c = vctx;
    ga_simd simd = ga_exec_simd(c->ex);
    float sqrt_v[ADAM_BLOCK];
    for (size_t b = lo; b < hi; b += ADAM_BLOCK) {
        size_t len = hi - b < ADAM_BLOCK ? hi - b : ADAM_BLOCK;
        adam_moments_span(c->c, c->p + b, c->m + b, c->v + b, c->g + b, len);
        sqrt_span(simd, sqrt_v, c->v + b, len);
        adam_update_span(c->c, c->p + b, c->m + b, sqrt_v, len);
    }
    return 0;
}

ga_status ga_adam_step_cpu(const ga_exec *ex, const ga_adam_params *hp, uint64_t t, float *param, float *m,
                           float *v, const float *grad, size_t n)
{
    adam_ctx c = {.ex = ex, .p = param, .m = m, .v = v, .g = grad};
    if (!ga_adam_coefs_of(hp, t, &c.c)) return GA_E_OPTIM; /* checked by ga_adam_step already */
    ga_parallel_tiles(ex, n, 28.0, adam_tile, &c);
    return GA_OK;
}
