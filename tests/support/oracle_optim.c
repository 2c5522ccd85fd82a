/* Scalar oracle for reductions and optimizer steps (see oracle_optim.h). Built with the
 * project's flags, so no FMA contraction: each line rounds exactly as written. */
#include "oracle_optim.h"

#include <math.h>
#include <string.h>

static uint32_t mix(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x7FEB352Du;
    h ^= h >> 15;
    h *= 0x846CA68Bu;
    h ^= h >> 16;
    return h;
}

void oracle_fill(float *x, size_t n, uint32_t seed, float scale)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t h = mix((uint32_t)i * 0x9E3779B9u ^ mix(seed + 0x632BE5ABu) ^ (uint32_t)(i >> 32));
        float u = (float)(h >> 8) / 16777216.0f * 2.0f - 1.0f; /* [-1, 1), 24 random bits */
        switch (h & 31u) {
        case 0: x[i] = 0.0f; break;
        case 1: x[i] = -0.0f; break;
        case 2: x[i] = u * 1e-39f; break; /* subnormal */
        case 3: x[i] = u * 1e3f * scale; break;
        default: x[i] = u * scale; break;
        }
    }
}

void oracle_fill_nonneg(float *x, size_t n, uint32_t seed, float scale)
{
    oracle_fill(x, n, seed, scale);
    for (size_t i = 0; i < n; i++) x[i] = fabsf(x[i]);
}

size_t oracle_first_mismatch(const float *a, const float *b, size_t n)
{
    if (n == 0 || memcmp(a, b, n * sizeof *a) == 0) return n;
    size_t i = 0;
    while (memcmp(&a[i], &b[i], sizeof *a) == 0) i++;
    return i;
}

void oracle_reduce_sum(const float *const *inputs, int count, size_t n, float *out)
{
    for (size_t i = 0; i < n; i++) {
        float s = inputs[0][i];
        for (int k = 1; k < count; k++) s = s + inputs[k][i];
        out[i] = s;
    }
}

void oracle_reduce_add(float *acc, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) acc[i] = acc[i] + x[i];
}

void oracle_reduce_scale(float *x, size_t n, float s)
{
    for (size_t i = 0; i < n; i++) x[i] = x[i] * s;
}

void oracle_reduce_sub(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = a[i] - b[i];
}

void oracle_sgd_step(const ga_sgd_params *hp, float *param, float *momentum_buf, const float *grad, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float p = param[i];
        float d = grad[i];
        if (hp->weight_decay != 0.0f) d = d + hp->weight_decay * p;
        if (hp->momentum != 0.0f) {
            float buf = hp->momentum * momentum_buf[i] + d;
            momentum_buf[i] = buf;
            if (hp->nesterov) d = d + hp->momentum * buf;
            else d = buf;
        }
        param[i] = p - hp->lr * d;
    }
}

void oracle_adam_step(const ga_adam_params *hp, uint64_t t, float *param, float *m, float *v, const float *grad,
                      size_t n)
{
    /* The host coefficients exactly as ga_optim.h states them. */
    float one_minus_beta1 = 1.0f - hp->beta1; /* exact difference rounded once, as in double */
    float one_minus_beta2 = 1.0f - hp->beta2;
    float decay = (float)(1.0 - (double)hp->lr * (double)hp->weight_decay);
    double bias1 = 1.0 - pow((double)hp->beta1, (double)t);
    double bias2 = 1.0 - pow((double)hp->beta2, (double)t);
    float step_size = (float)((double)hp->lr / bias1);
    float sqrt_bias2 = (float)sqrt(bias2);
    for (size_t i = 0; i < n; i++) {
        float p = param[i];
        float g = grad[i];
        if (hp->weight_decay != 0.0f) {
            if (hp->decoupled) p = p * decay;
            else g = g + hp->weight_decay * p;
        }
        float mi = hp->beta1 * m[i] + one_minus_beta1 * g;
        float vi = hp->beta2 * v[i] + one_minus_beta2 * (g * g);
        float denom = sqrtf(vi) / sqrt_bias2 + hp->eps;
        param[i] = p - step_size * (mi / denom);
        m[i] = mi;
        v[i] = vi;
    }
}
