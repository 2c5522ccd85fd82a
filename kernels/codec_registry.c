/* The codec table and the two public entry points that dispatch through it. All argument,
 * parameter, size and backend checks live here, once, before any codec runs. */
#include <math.h>
#include <string.h>

#include "codec_internal.h"
#include "codec_math.h"
#include "topk_select.h"

static int finite_positive(float x) { return isfinite(x) && x > 0.0f; }
static int unit_interval(float x) { return isfinite(x) && x > 0.0f && x <= 1.0f; }

static ga_status validate_nothing(const ga_codec_params *p)
{
    (void)p;
    return GA_OK;
}

static ga_status validate_2bit(const ga_codec_params *p)
{
    return finite_positive(p->threshold) && (p->select == 0.0f || finite_positive(p->select)) ? GA_OK
                                                                                                : GA_E_THRESHOLD;
}

static ga_status validate_1bit(const ga_codec_params *p)
{
    return isfinite(p->threshold) ? GA_OK : GA_E_THRESHOLD;
}

static ga_status validate_topk(const ga_codec_params *p)
{
    if (!unit_interval(p->ratio) || !unit_interval(p->sample_fraction)) return GA_E_RATIO;
    if (p->adapt_rounds > GA_TOPK_MAX_ROUNDS) return GA_E_INVAL;
    if (p->topk_values != GA_TOPK_VALUES_FP32 && p->topk_values != GA_TOPK_VALUES_FP16) return GA_E_INVAL;
    if (p->topk_indices != GA_TOPK_INDICES_INT32 && p->topk_indices != GA_TOPK_INDICES_VARINT) return GA_E_INVAL;
    return GA_OK;
}

static size_t words_of(size_t n, size_t per_word) { return (n + per_word - 1) / per_word; }

static size_t size_none(const ga_codec_params *p, size_t n) { (void)p; return 4 * n; }
static size_t size_half(const ga_codec_params *p, size_t n) { (void)p; return 2 * n; }
static size_t size_2bit(const ga_codec_params *p, size_t n) { (void)p; return 4 * words_of(n, 16); }
static size_t size_1bit(const ga_codec_params *p, size_t n) { (void)p; return 4 * words_of(n, 32); }

static size_t size_1bit_scaled(const ga_codec_params *p, size_t n)
{
    return 4 * words_of(n, GA_1BIT_SCALED_BLOCK) + size_1bit(p, n);
}

static size_t size_int8(const ga_codec_params *p, size_t n) { (void)p; return ga_int_payload_bytes(8, n); }
static size_t size_int4(const ga_codec_params *p, size_t n) { (void)p; return ga_int_payload_bytes(4, n); }

/* Header (u32 count) + count values + count indices (a varint takes at most 5 bytes). */
static size_t size_topk(const ga_codec_params *p, size_t n)
{
    size_t k = (size_t)ceil((double)n * (double)p->ratio);
    if (k > n) k = n;
    size_t value_bytes = p->topk_values == GA_TOPK_VALUES_FP16 ? 2 : 4;
    size_t index_bytes = p->topk_indices == GA_TOPK_INDICES_VARINT ? 5 : 4;
    return 4 + k * (value_bytes + index_bytes);
}

#ifdef GA_HAVE_CUDA
#define GA_BOTH(codec, op) {ga_##codec##_##op##_cpu, ga_##codec##_##op##_cuda}
#else
#define GA_BOTH(codec, op) {ga_##codec##_##op##_cpu, NULL}
#endif

/* checked: the op of the add_checked column, add_checked (dense codecs) or decode_add. */
#define GA_ROW(label, codec, residual, fixed, in_order, max, validate, size, checked)                           \
    {label, residual, fixed, in_order, max, validate, size, GA_BOTH(codec, encode), GA_BOTH(codec, decode_add), \
     GA_BOTH(codec, checked)}

static const ga_codec_row codec_table[GA_CODEC_COUNT] = {
    [GA_CODEC_NONE] = GA_ROW("none", none, false, true, true, UINT64_MAX, validate_nothing, size_none, add_checked),
    [GA_CODEC_FP16] = GA_ROW("fp16", fp16, false, true, true, UINT64_MAX, validate_nothing, size_half, add_checked),
    [GA_CODEC_BF16] = GA_ROW("bf16", bf16, false, true, true, UINT64_MAX, validate_nothing, size_half, add_checked),
    [GA_CODEC_2BIT] = GA_ROW("2bit", q2bit, true, true, true, UINT64_MAX, validate_2bit, size_2bit, decode_add),
    [GA_CODEC_1BIT] = GA_ROW("1bit", q1bit, true, true, true, UINT64_MAX, validate_1bit, size_1bit, decode_add),
    /* The scales come before the sign words: a range of elements is not one range of bytes. */
    [GA_CODEC_1BIT_SCALED] = GA_ROW("1bit_scaled", q1bit_scaled, true, true, false, UINT64_MAX, validate_nothing,
                                    size_1bit_scaled, decode_add),
    [GA_CODEC_TOPK] =
        GA_ROW("topk", topk, true, false, false, GA_TOPK_MAX_ELEMENTS, validate_topk, size_topk, decode_add),
    /* Each scale sits in its block: a range of whole blocks is a range of bytes. */
    [GA_CODEC_INT8] = GA_ROW("int8", int8, true, true, true, UINT64_MAX, validate_nothing, size_int8, decode_add),
    [GA_CODEC_INT4] = GA_ROW("int4", int4, true, true, true, UINT64_MAX, validate_nothing, size_int4, decode_add),
};

static const ga_codec_row *row_of(ga_codec_id codec)
{
    return (unsigned)codec < GA_CODEC_COUNT ? &codec_table[codec] : NULL;
}

ga_codec_params ga_codec_params_default(ga_codec_id codec)
{
    ga_codec_params p = {
        .threshold = codec == GA_CODEC_1BIT ? 0.0f : 0.5f,
        .ratio = 0.001f,
        .sample_fraction = 0.01f,
        .adapt_rounds = 10,
        .seed = 0,
        .topk_values = GA_TOPK_VALUES_FP32,
        .topk_indices = GA_TOPK_INDICES_INT32,
    };
    return p;
}

const char *ga_codec_name(ga_codec_id codec)
{
    const ga_codec_row *row = row_of(codec);
    return row ? row->name : NULL;
}

ga_status ga_codec_from_name(const char *name, ga_codec_id *out)
{
    if (!name || !out) return GA_E_INVAL;
    for (int c = 0; c < GA_CODEC_COUNT; c++) {
        if (strcmp(codec_table[c].name, name) == 0) {
            *out = (ga_codec_id)c;
            return GA_OK;
        }
    }
    return GA_E_CODEC;
}

bool ga_codec_has_residual(ga_codec_id codec)
{
    const ga_codec_row *row = row_of(codec);
    return row && row->has_residual;
}

bool ga_codec_fixed_size(ga_codec_id codec)
{
    const ga_codec_row *row = row_of(codec);
    return row && row->fixed_size;
}

bool ga_codec_in_order(ga_codec_id codec)
{
    const ga_codec_row *row = row_of(codec);
    return row && row->in_order;
}

ga_status ga_codec_params_validate(ga_codec_id codec, const ga_codec_params *params)
{
    const ga_codec_row *row = row_of(codec);
    if (!row) return GA_E_CODEC;
    if (!params) return GA_E_INVAL;
    return row->validate(params);
}

ga_status ga_codec_encoded_size(ga_codec_id codec, const ga_codec_params *params, size_t n, size_t *bytes)
{
    GA_CHECK(ga_codec_params_validate(codec, params));
    const ga_codec_row *row = row_of(codec);
    /* The 4n of fp32 is the largest fixed size; it must not overflow size_t either. */
    if ((uint64_t)n > row->max_elements || n > SIZE_MAX / 8) return GA_E_TOO_LARGE;
    if (!bytes) return GA_E_INVAL;
    *bytes = row->encoded_size(params, n);
    return GA_OK;
}

ga_status ga_codec_payload_range(ga_codec_id codec, const ga_codec_params *params, size_t n, size_t lo, size_t m,
                                 size_t *off, size_t *len)
{
    size_t total; /* the call checks the parameters and n */
    GA_CHECK(ga_codec_encoded_size(codec, params, n, &total));
    const ga_codec_row *row = row_of(codec);
    if (!row->in_order || !off || !len) return GA_E_INVAL;
    if (lo % GA_CODEC_RANGE_ALIGN != 0 || lo > n || m > n - lo) return GA_E_INVAL;
    *off = row->encoded_size(params, lo);
    *len = row->encoded_size(params, m);
    return GA_OK;
}

ga_status ga_check_finite(const ga_exec *ex, const float *x, size_t n)
{
    GA_CHECK(ga_exec_usable(ex));
    if (n == 0) return GA_OK;
    if (!x) return GA_E_INVAL;
    bool finite = true;
    if (ex->backend == GA_BACKEND_CPU) finite = ga_all_finite_cpu(ex, x, n);
#ifdef GA_HAVE_CUDA
    else GA_CHECK(ga_all_finite_cuda(ex, x, n, &finite));
#endif
    return finite ? GA_OK : GA_E_NONFINITE;
}

ga_status ga_codec_encode(const ga_exec *ex, ga_codec_id codec, const ga_codec_params *params,
                          const float *grad, float *residual, size_t n, void *out, size_t cap,
                          size_t *out_len)
{
    size_t need;
    GA_CHECK(ga_codec_encoded_size(codec, params, n, &need));
    GA_CHECK(ga_exec_usable(ex));
    const ga_codec_row *row = row_of(codec);
    if (!out_len || (n > 0 && !grad) || (need > 0 && !out)) return GA_E_INVAL;
    if (row->has_residual != (residual != NULL) && n > 0) return GA_E_INVAL;
    if ((uintptr_t)out % 4 != 0) return GA_E_INVAL;
    if (cap < need) return GA_E_CAPACITY;
    /* Codecs with a residual refuse a NaN or Inf gradient before the residual changes. */
    if (row->has_residual) GA_CHECK(ga_check_finite(ex, grad, n));
    return row->encode[ex->backend](ex, params, grad, residual, n, (uint8_t *)out, cap, out_len);
}

/* What both decodes check before a codec runs: parameters, backend, buffers, the length. */
static ga_status decode_args(const ga_exec *ex, ga_codec_id codec, const ga_codec_params *params,
                             const void *payload, size_t len, size_t n, const float *sum)
{
    size_t expect;
    GA_CHECK(ga_codec_encoded_size(codec, params, n, &expect));
    GA_CHECK(ga_exec_usable(ex));
    const ga_codec_row *row = row_of(codec);
    if ((n > 0 && !sum) || (len > 0 && !payload) || (uintptr_t)payload % 4 != 0) return GA_E_INVAL;
    if (row->fixed_size ? len != expect : len > expect) return GA_E_LENGTH;
    return GA_OK;
}

ga_status ga_codec_decode_add(const ga_exec *ex, ga_codec_id codec, const ga_codec_params *params,
                              const void *payload, size_t len, size_t n, float *sum)
{
    GA_CHECK(decode_args(ex, codec, params, payload, len, n, sum));
    return row_of(codec)->decode_add[ex->backend](ex, params, (const uint8_t *)payload, len, n, sum);
}

ga_status ga_codec_decode_add_checked(const ga_exec *ex, ga_codec_id codec, const ga_codec_params *params,
                                      const void *payload, size_t len, size_t n, float *sum)
{
    GA_CHECK(decode_args(ex, codec, params, payload, len, n, sum));
    return row_of(codec)->add_checked[ex->backend](ex, params, (const uint8_t *)payload, len, n, sum);
}

/* ---- payload checks without a sum: the content checks each CPU decoder runs first ---- */

typedef ga_status (*payload_check_fn)(const ga_codec_params *p, const uint8_t *payload, size_t len, size_t n);

/* One thread: the caller is a transport thread checking one chunk among many. */
static ga_status check_f32(const ga_codec_params *p, const uint8_t *payload, size_t len, size_t n)
{
    (void)p, (void)len;
    const ga_exec ex = {GA_BACKEND_CPU, 1, GA_SIMD_AUTO, NULL};
    return ga_all_finite_cpu(&ex, (const float *)payload, n) ? GA_OK : GA_E_NONFINITE;
}

static ga_status halves_finite(const uint8_t *payload, size_t n, uint16_t exp_mask)
{
    const uint16_t *h = (const uint16_t *)payload;
    unsigned bad = 0;
    for (size_t i = 0; i < n; i++) bad |= (h[i] & exp_mask) == exp_mask;
    return bad ? GA_E_NONFINITE : GA_OK;
}

static ga_status check_fp16(const ga_codec_params *p, const uint8_t *payload, size_t len, size_t n)
{
    (void)p, (void)len;
    return halves_finite(payload, n, 0x7C00u);
}

static ga_status check_bf16(const ga_codec_params *p, const uint8_t *payload, size_t len, size_t n)
{
    (void)p, (void)len;
    return halves_finite(payload, n, 0x7F80u);
}

/* 2bit and 1bit: every bit pattern decodes; the length was checked by the caller. */
static ga_status check_length_only(const ga_codec_params *p, const uint8_t *payload, size_t len, size_t n)
{
    (void)p, (void)payload, (void)len, (void)n;
    return GA_OK;
}

static ga_status check_1bit_scaled(const ga_codec_params *p, const uint8_t *payload, size_t len, size_t n)
{
    (void)p, (void)len;
    size_t blocks = (n + GA_1BIT_SCALED_BLOCK - 1) / GA_1BIT_SCALED_BLOCK;
    for (size_t b = 0; b < blocks; b++) {
        float s;
        memcpy(&s, payload + 4 * b, 4);
        if (!ga_f32_bits_finite(ga_f32_bits(s)) || !(s >= 0.0f)) return GA_E_NONFINITE;
    }
    return GA_OK;
}

static ga_status check_int(uint32_t bits, const uint8_t *payload, size_t n)
{
    const ga_exec ex = {GA_BACKEND_CPU, 1, GA_SIMD_AUTO, NULL};
    return ga_int_scales_ok_cpu(&ex, bits, payload, n) ? GA_OK : GA_E_NONFINITE;
}

static ga_status check_int8(const ga_codec_params *p, const uint8_t *payload, size_t len, size_t n)
{
    (void)p, (void)len;
    return check_int(8, payload, n);
}

static ga_status check_int4(const ga_codec_params *p, const uint8_t *payload, size_t len, size_t n)
{
    (void)p, (void)len;
    return check_int(4, payload, n);
}

static ga_status check_topk(const ga_codec_params *p, const uint8_t *payload, size_t len, size_t n)
{
    size_t count;
    return ga_topk_check(p, payload, len, n, &count);
}

/* Parallel to codec_table: one row per codec. */
static const payload_check_fn payload_checks[GA_CODEC_COUNT] = {
    [GA_CODEC_NONE] = check_f32,
    [GA_CODEC_FP16] = check_fp16,
    [GA_CODEC_BF16] = check_bf16,
    [GA_CODEC_2BIT] = check_length_only,
    [GA_CODEC_1BIT] = check_length_only,
    [GA_CODEC_1BIT_SCALED] = check_1bit_scaled,
    [GA_CODEC_TOPK] = check_topk,
    [GA_CODEC_INT8] = check_int8,
    [GA_CODEC_INT4] = check_int4,
};

ga_status ga_codec_check_payload(ga_codec_id codec, const ga_codec_params *params, const void *payload,
                                 size_t len, size_t n)
{
    size_t expect;
    GA_CHECK(ga_codec_encoded_size(codec, params, n, &expect));
    const ga_codec_row *row = row_of(codec);
    if ((len > 0 && !payload) || (uintptr_t)payload % 4 != 0) return GA_E_INVAL;
    if (row->fixed_size ? len != expect : len > expect) return GA_E_LENGTH;
    return payload_checks[codec](params, (const uint8_t *)payload, len, n);
}
