/* Per-element optimizer math shared by optim.c and optim.cu (one body, two launchers), and the
 * host-side Adam coefficients. Plain IEEE float operations in the order ga_optim.h gives, with
 * no FMA contraction, so every loop over them yields the same bits on any thread or device. */
#ifndef GA_OPTIM_MATH_H
#define GA_OPTIM_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "ga_hd.h"
#include "ga_optim.h"

/* ---- SGD ---- */

/* Which branches of the SGD update run; loop-invariant, so the CPU passes them as constants
 * and each variant compiles to a straight vector loop. */
enum { GA_SGD_PLAIN = 0, GA_SGD_MOMENTUM = 1, GA_SGD_NESTEROV = 2 };

static inline int ga_sgd_mode(const ga_sgd_params *hp)
{
    if (hp->momentum == 0.0f) return GA_SGD_PLAIN;
    return hp->nesterov ? GA_SGD_NESTEROV : GA_SGD_MOMENTUM;
}

static inline bool ga_sgd_decays(const ga_sgd_params *hp) { return hp->weight_decay != 0.0f; }

typedef struct ga_sgd_elem_out {
    float p, buf; /* buf is meaningful only when mode != GA_SGD_PLAIN */
} ga_sgd_elem_out;

/* One element of ga_sgd_step. buf is not read in GA_SGD_PLAIN mode. */
GA_HD ga_sgd_elem_out ga_sgd_elem(ga_sgd_params hp, bool decay, int mode, float p, float buf, float g)
{
    float d = g;
    if (decay) d = d + hp.weight_decay * p;
    if (mode != GA_SGD_PLAIN) {
        buf = hp.momentum * buf + d;
        d = mode == GA_SGD_NESTEROV ? d + hp.momentum * buf : buf;
    }
    ga_sgd_elem_out out = {p - hp.lr * d, buf};
    return out;
}

/* ---- Adam / AdamW ---- */

enum { GA_ADAM_WD_NONE = 0, GA_ADAM_WD_L2 = 1, GA_ADAM_WD_DECOUPLED = 2 };

/* Scalars of one Adam step, computed once on the host by ga_adam_coefs_of. */
typedef struct ga_adam_coefs {
    float beta1, beta2, eps, weight_decay;
    float c1;        /* 1 - beta1 */
    float c2;        /* 1 - beta2 */
    float decay;     /* 1 - lr * weight_decay (AdamW) */
    float step_size; /* lr / (1 - beta1^t) */
    float sqrt_bc2;  /* sqrt(1 - beta2^t) */
    int wd_mode;     /* GA_ADAM_WD_* */
} ga_adam_coefs;

/* Fills *c for step t (hyper-parameters already range-checked, t >= 1). Every coefficient is
 * computed in double from the float hyper-parameters and rounded to float once; 1 - beta and
 * lr * wd are exact in double, so only the final rounding (and pow/sqrt) is inexact. Returns
 * false when a coefficient the step uses is not a finite float (a huge lr overflows step_size,
 * or decay in AdamW). */
static inline bool ga_adam_coefs_of(const ga_adam_params *hp, uint64_t t, ga_adam_coefs *c)
{
    double lr = hp->lr, b1 = hp->beta1, b2 = hp->beta2, wd = hp->weight_decay;
    c->beta1 = hp->beta1;
    c->beta2 = hp->beta2;
    c->eps = hp->eps;
    c->weight_decay = hp->weight_decay;
    c->c1 = (float)(1.0 - b1);
    c->c2 = (float)(1.0 - b2);
    c->decay = (float)(1.0 - lr * wd);
    c->step_size = (float)(lr / (1.0 - pow(b1, (double)t)));
    c->sqrt_bc2 = (float)sqrt(1.0 - pow(b2, (double)t));
    c->wd_mode = hp->weight_decay == 0.0f ? GA_ADAM_WD_NONE : (hp->decoupled ? GA_ADAM_WD_DECOUPLED : GA_ADAM_WD_L2);
    bool decay_ok = c->wd_mode != GA_ADAM_WD_DECOUPLED || isfinite(c->decay);
    return decay_ok && isfinite(c->step_size) && isfinite(c->sqrt_bc2) && c->sqrt_bc2 > 0.0f;
}

typedef struct ga_adam_elem_state {
    float p, m, v;
} ga_adam_elem_state;

/* First half of one Adam element: weight decay and the two moments. The CPU runs the square
 * root between the halves as a separate vector pass (see optim.c); the CUDA kernel calls
 * ga_adam_elem. */
GA_HD ga_adam_elem_state ga_adam_moments(ga_adam_coefs c, int wd_mode, float p, float m, float v, float g)
{
    if (wd_mode == GA_ADAM_WD_L2) g = g + c.weight_decay * p;
    if (wd_mode == GA_ADAM_WD_DECOUPLED) p = p * c.decay;
    ga_adam_elem_state s = {p, c.beta1 * m + c.c1 * g, c.beta2 * v + c.c2 * (g * g)};
    return s;
}

/* Second half: the parameter update from the new m and sqrtf(new v). */
GA_HD float ga_adam_update(ga_adam_coefs c, float p, float m, float sqrt_v)
{
    float denom = sqrt_v / c.sqrt_bc2 + c.eps;
    return p - c.step_size * (m / denom);
}

/* One whole element of ga_adam_step. */
GA_HD ga_adam_elem_state ga_adam_elem(ga_adam_coefs c, int wd_mode, float p, float m, float v, float g)
{
    ga_adam_elem_state s = ga_adam_moments(c, wd_mode, p, m, v, g);
    s.p = ga_adam_update(c, s.p, s.m, sqrtf(s.v));
    return s;
}

#endif
