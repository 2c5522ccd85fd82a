/* DGC on the worker: clipping, momentum correction, factor masking, warm-up ratio (dgc.h). */
#include "dgc.h"

#include <math.h>
#include <string.h>

float ga_dgc_ratio(float ratio, uint32_t warmup_epochs, uint32_t epoch)
{
    if (epoch >= warmup_epochs) return ratio;
    double coeff = pow((double)ratio, 1.0 / ((double)warmup_epochs + 1.0));
    double r = pow(coeff, (double)epoch + 1.0);
    if (r < ratio) r = ratio;
    if (r > 1.0) r = 1.0;
    return (float)r;
}

float ga_dgc_clip_coeff(const float *g, size_t n, float clip_norm)
{
    if (!(clip_norm > 0.0f)) return 1.0f;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += (double)g[i] * (double)g[i];
    double coeff = (double)clip_norm / (sqrt(sum) + 1e-6);
    return coeff < 1.0 ? (float)coeff : 1.0f;
}

const float *ga_dgc_correct(const ga_dgc_options *o, float *u, const float *g, float s, float *work, size_t n)
{
    const float m = o->momentum;
    if (m == 0.0f) {
        if (s == 1.0f) return g;
        for (size_t i = 0; i < n; i++) work[i] = s * g[i];
        return work;
    }
    if (o->nesterov) {
        for (size_t i = 0; i < n; i++) {
            float gi = s * g[i];
            u[i] = (u[i] + gi) * m;
            work[i] = u[i] + gi;
        }
        return work;
    }
    for (size_t i = 0; i < n; i++) u[i] = m * u[i] + s * g[i];
    return u;
}

float ga_dgc_corrected_at(const ga_dgc_options *o, const float *u, const float *g, float s, size_t i)
{
    const float m = o->momentum;
    if (m == 0.0f) return s == 1.0f ? g[i] : s * g[i];
    float gi = s * g[i];
    if (o->nesterov) return (u[i] + gi) * m + gi;
    return m * u[i] + gi;
}

ga_status ga_dgc_mask(const ga_exec *ex, ga_codec_id codec, const ga_codec_params *params, const void *payload,
                      size_t len, size_t n, float *u, float *scratch)
{
    memset(scratch, 0, n * sizeof *scratch);
    ga_status st = ga_codec_decode_add(ex, codec, params, payload, len, n, scratch);
    if (st != GA_OK) return st;
    for (size_t i = 0; i < n; i++)
        if (scratch[i] != 0.0f) u[i] = 0.0f;
    return GA_OK;
}
