/* libFuzzer target for one codec's decoder through the public ga_codec_decode_add; built once
 * per codec with -DFUZZ_CODEC=<ga_codec_id>. Checks: no crash or sanitizer report; on error
 * the sum is byte-identical to what it was; on success a fixed-size payload had exactly the
 * codec's length, was 4-byte aligned, every sum is finite, and (for the codecs the oracle
 * knows) the library accepts exactly what the oracle accepts and adds exactly what it adds.
 * Top-k also cuts the same bytes into block slices (ga_topk_slice), valid or not: no read past
 * the payload, and for a payload the decode accepted the slices add exactly what it added.
 *
 * Input layout (little-endian), HEADER_BYTES then the payload:
 *   [0,4)   n, reduced modulo MAX_N + 1
 *   [4]     flags: bit 0 trims the payload to the codec's size for n (when it is at least
 *           that long), bits 1-2 the SIMD cap (ga_simd 0-3), bit 3 two threads instead of one,
 *           bit 4 misaligns the payload by 1 + (bits 5-6 mod 3) bytes
 *   [5,9)   threshold, fp32 bits
 *   [9,13)  ratio, fp32 bits
 *   [13,17) sample_fraction, fp32 bits
 *   [17]    topk_values  [18] topk_indices  [19] adapt_rounds
 * Seeds: tests/fuzz/corpus/<codec>/, written by tests/fuzz/make_corpus.sh. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ga_codec.h"
#include "oracle.h"

#ifndef FUZZ_CODEC
#error "build with -DFUZZ_CODEC=<ga_codec_id>"
#endif

#define HEADER_BYTES 20u
#define MAX_N (1u << 16)

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static float rdf32(const uint8_t *p)
{
    uint32_t u = rd32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Small finite values (|x| <= 4), a -0 and a subnormal: adding any finite float to one of them
 * cannot overflow (that needs a sum beyond FLT_MAX + half an ulp of it), so a finite payload
 * gives a finite sum and the check below is exact. */
static float pattern(size_t i)
{
    if (i % 17 == 3) return -0.0f;
    if (i % 17 == 5) return 0x1p-140f;
    return (float)(i % 9) - 4.0f;
}

#if FUZZ_CODEC == 6 /* GA_CODEC_TOPK */
/* Slices of 1024 << (0..3) elements, taken in order; want: the whole decode's sum, or NULL when
 * the decode refused the payload (the slices may then fail anywhere, but read nothing past it). */
static void check_slices(const ga_exec *ex, const ga_codec_params *p, const uint8_t *payload, size_t len, size_t n,
                         const float *want, uint8_t flags)
{
    size_t block = (size_t)1024 << ((flags >> 5) & 3);
    uint8_t *out = malloc(len + 1);
    float *got = malloc(n * sizeof(float) + 1);
    if (!out || !got) abort();
    for (size_t i = 0; i < n; i++) got[i] = pattern(i);
    ga_topk_cursor cur = {0};
    for (size_t lo = 0; lo < n; lo += block) {
        size_t m = n - lo < block ? n - lo : block, olen = 0;
        ga_codec_params sp;
        ga_status st = ga_topk_slice(p, payload, len, n, lo, m, &cur, out, len, &olen, &sp);
        if (st == GA_OK && olen > len) abort(); /* a slice is never longer than its payload */
        if (st == GA_OK) st = ga_codec_decode_add(ex, GA_CODEC_TOPK, &sp, out, olen, m, got + lo);
        if (st != GA_OK && want) abort(); /* a payload the decode took must slice and decode */
        if (st != GA_OK) break;
    }
    if (want && n && memcmp(got, want, n * sizeof(float)) != 0) abort();
    free(out), free(got);
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const ga_codec_id codec = (ga_codec_id)FUZZ_CODEC;
    if (size < HEADER_BYTES) return 0;
    size_t n = rd32(data) % (MAX_N + 1);
    uint8_t flags = data[4];
    ga_codec_params p = ga_codec_params_default(codec);
    p.threshold = rdf32(data + 5);
    p.ratio = rdf32(data + 9);
    p.sample_fraction = rdf32(data + 13);
    p.topk_values = data[17];
    p.topk_indices = data[18];
    p.adapt_rounds = data[19];
    ga_exec ex = {GA_BACKEND_CPU, (flags & 8) ? 2 : 1, (ga_simd)((flags >> 1) & 3), NULL};

    const uint8_t *body = data + HEADER_BYTES;
    size_t len = size - HEADER_BYTES, want = 0;
    int size_ok = ga_codec_encoded_size(codec, &p, n, &want) == GA_OK;
    if ((flags & 1) && size_ok && ga_codec_fixed_size(codec) && want <= len) len = want;
    size_t shift = (flags & 16) ? 1 + ((flags >> 5) & 3) % 3 : 0;

    /* A fresh buffer of exactly the bytes given, so ASan sees any read past the payload. */
    uint8_t *block = malloc(shift + len + 1);
    float *sum = malloc(n * sizeof(float) + 1), *before = malloc(n * sizeof(float) + 1);
    if (!block || !sum || !before) abort();
    uint8_t *payload = block + shift; /* malloc is 16-aligned: shift 0 is aligned */
    if (len) memcpy(payload, body, len);
    for (size_t i = 0; i < n; i++) sum[i] = before[i] = pattern(i);

    ga_status rc = ga_codec_decode_add(&ex, codec, &p, payload, len, n, sum);
    if (rc != GA_OK) {
        if (n && memcmp(sum, before, n * sizeof(float)) != 0) abort(); /* an error changed the sum */
    } else {
        if (shift) abort(); /* a misaligned payload must be refused */
        if (!size_ok) abort();
        if (ga_codec_fixed_size(codec) && len != want) abort();
        for (size_t i = 0; i < n; i++)
            if (!isfinite(sum[i])) abort();
    }
#if FUZZ_CODEC == 6
    if (ga_codec_params_validate(codec, &p) == GA_OK) check_slices(&ex, &p, payload, len, n, rc == GA_OK ? sum : NULL, flags);
#else /* top-k is not in the oracle */
    if (!shift) {
        ga_status orc = oracle_decode_add(codec, p.threshold, payload, len, n, before);
        if ((orc == GA_OK) != (rc == GA_OK)) abort(); /* library and oracle disagree on validity */
        if (rc == GA_OK && n && memcmp(sum, before, n * sizeof(float)) != 0) abort();
    }
#endif
    free(block), free(sum), free(before);
    return 0;
}
