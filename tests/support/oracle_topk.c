/* Slow scalar oracle of the top-k codec (see oracle_topk.h): the spec, literally. */
#include "oracle_topk.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t mag(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u & 0x7FFFFFFFu;
}

static size_t k_of(size_t n, float ratio)
{
    size_t k = (size_t)ceil((double)n * (double)ratio);
    return k > n ? n : k;
}

void oracle_topk_sample_plan(const ga_codec_params *p, size_t n, size_t *start, size_t *stride)
{
    double d = 1.0 / (double)p->sample_fraction;
    size_t s = d >= (double)n ? n : (size_t)d;
    if (s == 0) s = 1;
    uint64_t z = p->seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z = z ^ (z >> 31);
    *stride = s;
    *start = (size_t)(z % s);
}

/* fp16 by arithmetic in double (not the library's bit manipulation): the nearest multiple of
 * the half ulp at |x|'s binade, ties to even by rint(); exponent 31 means it overflowed. */
static uint16_t half_of(float x)
{
    double a = fabs((double)x);
    uint16_t sign = signbit(x) ? 0x8000u : 0;
    uint32_t bits;
    if (a < ldexp(1.0, -14)) {
        bits = (uint32_t)rint(a / ldexp(1.0, -24)); /* 1024 carries into the smallest normal */
    } else {
        int x2;
        frexp(a, &x2); /* a = f * 2^x2, f in [0.5, 1) */
        int e = x2 - 1;
        uint32_t q = (uint32_t)rint(a / ldexp(1.0, e - 10)); /* 1024..2048 */
        bits = (uint32_t)(e + 15) * 1024u + (q - 1024u);
    }
    if (bits >= 0x7C00u) bits = 0x7BFFu; /* would be Inf: saturate */
    return (uint16_t)(sign | bits);
}

static float float_of_half(uint16_t h)
{
    int e = (h >> 10) & 0x1F, m = h & 0x3FF;
    double v = e == 0 ? ldexp((double)m, -24) : ldexp((double)(1024 + m), e - 25);
    return (float)((h & 0x8000u) ? -v : v);
}

static int desc_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? 1 : (x > y ? -1 : 0);
}

typedef struct cand {
    uint32_t key;
    uint32_t idx;
} cand;

/* Larger key first; equal keys: lower index first. */
static int by_key_then_index(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? 1 : -1;
    return x->idx < y->idx ? -1 : (x->idx > y->idx ? 1 : 0);
}

static int by_index(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    return x->idx < y->idx ? -1 : (x->idx > y->idx ? 1 : 0);
}

static size_t count_at_least(const float *r, size_t n, uint32_t thr)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (mag(r[i]) >= thr && mag(r[i]) > 0) c++;
    return c;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int b = 0; b < 4; b++) p[b] = (uint8_t)(v >> (8 * b));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int oracle_topk_encode(const ga_codec_params *p, const float *grad, float *residual, size_t n, uint8_t *out,
                       size_t *out_len)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(grad[i])) return GA_E_NONFINITE;
    size_t k = k_of(n, p->ratio);
    for (size_t i = 0; i < n; i++) residual[i] = residual[i] + grad[i];

    uint32_t thr = 0;
    if (n > 65536) {
        size_t start, stride;
        oracle_topk_sample_plan(p, n, &start, &stride);
        size_t s = 0;
        uint32_t *samples = malloc(n * sizeof *samples);
        for (size_t i = start; i < n; i += stride) samples[s++] = mag(residual[i]);
        qsort(samples, s, sizeof *samples, desc_u32);
        double m = ceil((double)s * (double)p->ratio);
        size_t mi = m < 1 ? 1 : (m > (double)s ? s : (size_t)m);
        thr = samples[mi - 1];
        free(samples);
    }
    size_t count = count_at_least(residual, n, thr);
    if (n > 65536) {
        for (uint32_t round = 0; (double)count < 0.8 * (double)k && round < p->adapt_rounds; round++) {
            float f;
            memcpy(&f, &thr, 4);
            f = f * 0.8f;
            memcpy(&thr, &f, 4);
            count = count_at_least(residual, n, thr);
        }
    }
    cand *c = malloc((count + 1) * sizeof *c);
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        if (mag(residual[i]) >= thr && mag(residual[i]) > 0) c[w++] = (cand){mag(residual[i]), (uint32_t)i};
    if (count > k) {
        qsort(c, count, sizeof *c, by_key_then_index);
        count = k;
        qsort(c, count, sizeof *c, by_index);
    }

    int fp16 = p->topk_values == GA_TOPK_VALUES_FP16;
    put32(out, (uint32_t)count);
    size_t pos = 4;
    for (size_t j = 0; j < count; j++) {
        float r = residual[c[j].idx], sent;
        if (fp16) {
            uint16_t bits = half_of(r);
            sent = float_of_half(bits);
            out[pos++] = (uint8_t)bits;
            out[pos++] = (uint8_t)(bits >> 8);
        } else {
            uint32_t bits;
            memcpy(&bits, &r, 4);
            put32(out + pos, bits);
            pos += 4;
            sent = r;
        }
        residual[c[j].idx] = r - sent;
    }
    for (size_t j = 0; j < count; j++) {
        if (p->topk_indices == GA_TOPK_INDICES_INT32) {
            put32(out + pos, c[j].idx);
            pos += 4;
            continue;
        }
        uint32_t v = j == 0 ? c[0].idx : c[j].idx - c[j - 1].idx - 1;
        do {
            uint8_t byte = v & 0x7F;
            v >>= 7;
            out[pos++] = v ? (uint8_t)(byte | 0x80) : byte;
        } while (v);
    }
    free(c);
    *out_len = pos;
    return GA_OK;
}

int oracle_topk_decode_add(const ga_codec_params *p, const uint8_t *payload, size_t len, size_t n, float *sum)
{
    int fp16 = p->topk_values == GA_TOPK_VALUES_FP16;
    size_t vb = fp16 ? 2 : 4;
    if (len < 4) return GA_E_LENGTH;
    size_t c = get32(payload);
    if (c > k_of(n, p->ratio)) return GA_E_LENGTH;
    if (len < 4 + c * vb) return GA_E_LENGTH;
    uint64_t *idx = malloc((c + 1) * sizeof *idx);
    size_t pos = 4 + c * vb;
    if (p->topk_indices == GA_TOPK_INDICES_INT32) {
        if (len - pos != 4 * c) {
            free(idx);
            return GA_E_LENGTH;
        }
        for (size_t j = 0; j < c; j++) idx[j] = get32(payload + pos + 4 * j);
    } else {
        for (size_t j = 0; j < c; j++) {
            uint64_t v = 0;
            int nbytes = 0;
            for (;;) {
                if (pos >= len) {
                    free(idx);
                    return GA_E_LENGTH;
                }
                uint8_t b = payload[pos++];
                v |= (uint64_t)(b & 0x7F) << (7 * nbytes);
                nbytes++;
                int more = b & 0x80;
                if (nbytes == 5 && (more || v > 0xFFFFFFFFull)) {
                    free(idx);
                    return GA_E_VARINT;
                }
                if (!more) {
                    if (nbytes > 1 && b == 0) {
                        free(idx);
                        return GA_E_VARINT;
                    }
                    break;
                }
            }
            idx[j] = j == 0 ? v : idx[j - 1] + 1 + v;
        }
        if (pos != len) {
            free(idx);
            return GA_E_LENGTH;
        }
    }
    int rc = GA_OK;
    for (size_t j = 1; j < c && rc == GA_OK; j++)
        if (idx[j] <= idx[j - 1]) rc = GA_E_INDEX_ORDER;
    for (size_t j = 0; j < c && rc == GA_OK; j++)
        if (idx[j] >= n) rc = GA_E_INDEX_RANGE;
    for (size_t j = 0; j < c && rc == GA_OK; j++) {
        int bad = fp16 ? (payload[4 + 2 * j + 1] & 0x7C) == 0x7C
                       : (get32(payload + 4 + 4 * j) & 0x7F800000u) == 0x7F800000u;
        if (bad) rc = GA_E_NONFINITE;
    }
    if (rc == GA_OK) {
        for (size_t j = 0; j < c; j++) {
            float v;
            if (fp16) {
                v = float_of_half((uint16_t)(payload[4 + 2 * j] | payload[4 + 2 * j + 1] << 8));
            } else {
                uint32_t bits = get32(payload + 4 + 4 * j);
                memcpy(&v, &bits, 4);
            }
            sum[idx[j]] = sum[idx[j]] + v;
        }
    }
    free(idx);
    return rc;
}
