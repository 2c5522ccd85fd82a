/* int8 and int4 on the CPU. A payload is a run of blocks of GA_INT_BLOCK elements (the last one
 * may be shorter), each an fp32 scale and then its codes padded to 4 bytes (codec_math.h).
 * The encode runs in two passes over tiles: pass 1 writes every block's scale and flags one
 * above GA_INT_MAX_SCALE without touching the residual, so a refused encode changes nothing;
 * pass 2 writes the codes and leaves v - code * scale in the residual. */
#include "codec_internal.h"
#include "codec_math.h"
#include "ga_parallel.h"

typedef struct int_ctx {
    const float *grad;
    float *residual;
    uint8_t *out;
    const uint8_t *in;
    float *sum;
    uint32_t bits;
} int_ctx;

static uint32_t scale_tile(void *vctx, size_t lo, size_t hi)
{
    const int_ctx *c = vctx;
    int32_t levels = ga_int_levels(c->bits);
    uint32_t bad = 0;
    for (size_t b = lo; b < hi; b += GA_INT_BLOCK) {
        size_t len = hi - b < GA_INT_BLOCK ? hi - b : GA_INT_BLOCK;
        float amax = 0.0f;
        for (size_t i = b; i < b + len; i++) {
            float v = c->residual[i] + c->grad[i];
            float a = v < 0.0f ? -v : v;
            amax = a > amax ? a : amax;
        }
        float scale = ga_int_scale(amax, levels);
        bad |= !ga_int_scale_ok(scale);
        ga_int_put_scale(c->out, c->bits, b / GA_INT_BLOCK, scale);
    }
    return bad;
}

static uint32_t code_tile(void *vctx, size_t lo, size_t hi)
{
    const int_ctx *c = vctx;
    int32_t levels = ga_int_levels(c->bits);
    for (size_t b = lo; b < hi; b += GA_INT_BLOCK) {
        size_t len = hi - b < GA_INT_BLOCK ? hi - b : GA_INT_BLOCK;
        size_t block = b / GA_INT_BLOCK;
        float scale = ga_int_get_scale(c->out, c->bits, block);
        uint8_t *codes = ga_int_codes(c->out, c->bits, block);
        for (size_t k = 0; k < len; k++) {
            float *r = &c->residual[b + k];
            float v = *r + c->grad[b + k];
            int32_t code = ga_int_code(v, scale, levels);
            *r = v - ga_int_value(code, scale);
            ga_int_put_code(codes, c->bits, (uint32_t)k, code);
        }
        ga_int_pad_codes(codes, c->bits, (uint32_t)len);
    }
    return 0;
}

static uint32_t check_tile(void *vctx, size_t lo, size_t hi)
{
    const int_ctx *c = vctx;
    uint32_t bad = 0;
    for (size_t b = lo; b < hi; b += GA_INT_BLOCK)
        bad |= !ga_int_scale_ok(ga_int_get_scale(c->in, c->bits, b / GA_INT_BLOCK));
    return bad;
}

static uint32_t decode_tile(void *vctx, size_t lo, size_t hi)
{
    const int_ctx *c = vctx;
    for (size_t b = lo; b < hi; b += GA_INT_BLOCK) {
        size_t len = hi - b < GA_INT_BLOCK ? hi - b : GA_INT_BLOCK;
        size_t block = b / GA_INT_BLOCK;
        float scale = ga_int_get_scale(c->in, c->bits, block);
        const uint8_t *codes = ga_int_codes((uint8_t *)c->in, c->bits, block); /* read only */
        for (size_t k = 0; k < len; k++)
            c->sum[b + k] = c->sum[b + k] + ga_int_value(ga_int_get_code(codes, c->bits, (uint32_t)k), scale);
    }
    return 0;
}

static ga_status encode(uint32_t bits, const ga_exec *ex, const float *grad, float *residual, size_t n,
                        uint8_t *out, size_t *out_len)
{
    int_ctx c = {.grad = grad, .residual = residual, .out = out, .bits = bits};
    if (ga_parallel_tiles(ex, n, 8.0, scale_tile, &c)) return GA_E_RANGE;
    ga_parallel_tiles(ex, n, 12.0 + bits / 8.0, code_tile, &c);
    *out_len = ga_int_payload_bytes(bits, n);
    return GA_OK;
}

bool ga_int_scales_ok_cpu(const ga_exec *ex, uint32_t bits, const uint8_t *payload, size_t n)
{
    int_ctx c = {.in = payload, .bits = bits};
    return ga_parallel_tiles(ex, n, 4.0 / GA_INT_BLOCK, check_tile, &c) == 0;
}

static ga_status decode_add(uint32_t bits, const ga_exec *ex, const uint8_t *payload, size_t n, float *sum)
{
    if (!ga_int_scales_ok_cpu(ex, bits, payload, n)) return GA_E_NONFINITE;
    int_ctx c = {.in = payload, .sum = sum, .bits = bits};
    ga_parallel_tiles(ex, n, 8.0 + bits / 8.0, decode_tile, &c);
    return GA_OK;
}

ga_status ga_int8_encode_cpu(const ga_exec *ex, const ga_codec_params *p, const float *grad, float *residual,
                             size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
    (void)p, (void)cap;
    return encode(8, ex, grad, residual, n, out, out_len);
}

ga_status ga_int4_encode_cpu(const ga_exec *ex, const ga_codec_params *p, const float *grad, float *residual,
                             size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
    (void)p, (void)cap;
    return encode(4, ex, grad, residual, n, out, out_len);
}

ga_status ga_int8_decode_add_cpu(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload, size_t len,
                                 size_t n, float *sum)
{
    (void)p, (void)len;
    return decode_add(8, ex, payload, n, sum);
}

ga_status ga_int4_decode_add_cpu(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload, size_t len,
                                 size_t n, float *sum)
{
    (void)p, (void)len;
    return decode_add(4, ex, payload, n, sum);
}
