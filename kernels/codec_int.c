/* int8 and int4 on the CPU. A payload is a run of blocks of GA_INT_BLOCK elements (the last one
 * may be shorter), each an fp32 scale and then its codes padded to 4 bytes (codec_math.h).
 * The encode runs in two passes over tiles: pass 1 writes every block's scale and flags one
 * above its maximum without touching the residual, so a refused encode changes nothing;
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
        /* max |v| as the largest magnitude's bits: for floats >= 0 (Inf included) the integer
         * order of the bits is the float order, and the integer max has no branch. */
        uint32_t top = 0;
        for (size_t i = b; i < b + len; i++) {
            uint32_t u = ga_f32_bits(c->residual[i] + c->grad[i]) & 0x7FFFFFFFu;
            top = u > top ? u : top;
        }
        float scale = ga_int_scale(ga_f32_from_bits(top), levels);
        bad |= !ga_int_scale_ok(scale, c->bits);
        ga_int_put_scale(c->out, c->bits, b / GA_INT_BLOCK, scale);
    }
    return bad;
}

/* The loops over a block's elements have no branches, so the compiler can vectorise them. */
static void code_block(float *r, const float *g, size_t len, float scale, int32_t levels, int8_t *code)
{
    if (scale == 0.0f) { /* every v is 0: codes 0, r = v */
        for (size_t k = 0; k < len; k++) r[k] = r[k] + g[k], code[k] = 0;
        return;
    }
    const float top = (float)levels;
    for (size_t k = 0; k < len; k++) {
        float v = r[k] + g[k], q = ga_int_quantize(v, scale, top); /* scale > 0: ga_int_code */
        r[k] = v - q * scale;                                       /* = v - ga_int_value(code, scale) */
        code[k] = (int8_t)(int32_t)q;
    }
}

static uint32_t code_tile(void *vctx, size_t lo, size_t hi)
{
    const int_ctx *c = vctx;
    int32_t levels = ga_int_levels(c->bits);
    for (size_t b = lo; b < hi; b += GA_INT_BLOCK) {
        size_t len = hi - b < GA_INT_BLOCK ? hi - b : GA_INT_BLOCK;
        size_t block = b / GA_INT_BLOCK;
        int8_t code[GA_INT_BLOCK];
        code_block(c->residual + b, c->grad + b, len, ga_int_get_scale(c->out, c->bits, block), levels, code);
        ga_int_pack_codes(ga_int_codes(c->out, c->bits, block), c->bits, code, (uint32_t)len);
    }
    return 0;
}

static uint32_t check_tile(void *vctx, size_t lo, size_t hi)
{
    const int_ctx *c = vctx;
    uint32_t bad = 0;
    for (size_t b = lo; b < hi; b += GA_INT_BLOCK)
        bad |= !ga_int_scale_ok(ga_int_get_scale(c->in, c->bits, b / GA_INT_BLOCK), c->bits);
    return bad;
}

static uint32_t decode_tile(void *vctx, size_t lo, size_t hi)
{
    const int_ctx *c = vctx;
    for (size_t b = lo; b < hi; b += GA_INT_BLOCK) {
        size_t len = hi - b < GA_INT_BLOCK ? hi - b : GA_INT_BLOCK;
        size_t block = b / GA_INT_BLOCK;
        float scale = ga_int_get_scale(c->in, c->bits, block);
        int8_t code[GA_INT_BLOCK];
        ga_int_unpack_codes(ga_int_codes((uint8_t *)c->in, c->bits, block), c->bits, code, (uint32_t)len);
        float *sum = c->sum + b;
        for (size_t k = 0; k < len; k++) sum[k] = sum[k] + ga_int_value(code[k], scale);
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
