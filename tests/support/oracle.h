/* Slow scalar oracle for the CPU codecs none, fp16, bf16, 2bit, 1bit, 1bit_scaled, int8 and int4,
 * written from the wire-format spec (ga_codec.h, docs/wire-format.md) without the library's own
 * math helpers: byte-by-byte packing, fp16/bf16 rounding computed in double precision. Tests
 * compare the library against it with memcmp. Not for top-k. */
#ifndef GA_TEST_ORACLE_H
#define GA_TEST_ORACLE_H

#include <stddef.h>
#include <stdint.h>

#include "ga_codec.h"

/* Payload bytes of n elements. */
size_t oracle_encoded_size(ga_codec_id codec, size_t n);

/* Encodes n values as the spec says. Returns GA_E_NONFINITE when grad holds NaN/Inf (residual
 * untouched), GA_E_RANGE when a fp16/bf16 value overflows the wire type or an int8/int4 block
 * needs a scale above 2^120 / 2^124 (residual untouched), else GA_OK. Writes
 * oracle_encoded_size(codec, n) bytes to out on GA_OK. `threshold` is read by 2bit and 1bit;
 * residual by 2bit, 1bit, 1bit_scaled, int8 and int4. Parameters are assumed valid. */
ga_status oracle_encode(ga_codec_id codec, float threshold, const float *grad, float *residual, size_t n,
                        uint8_t *out);

/* 2bit with a selection apart from the level: v = r + g is sent as +t when v >= select, -t when
 * v <= -select, and r keeps v minus what was sent (ga_codec_params.select). Grad finite. */
void oracle_encode_2bit(float select, float t, const float *grad, float *residual, size_t n, uint8_t *out);

/* The status a decoder must return for this payload (parameter, length and value checks, in no
 * particular order): GA_OK or an error. Does not check pointer alignment. */
ga_status oracle_decode_check(ga_codec_id codec, float threshold, const uint8_t *payload, size_t len, size_t n);

/* sum[i] = sum[i] + decoded[i] for a payload that oracle_decode_check accepts; on any other
 * payload returns that check's status and leaves sum alone. */
ga_status oracle_decode_add(ga_codec_id codec, float threshold, const uint8_t *payload, size_t len, size_t n,
                            float *sum);

/* Conversions, each derived independently of the library (see oracle.c). */
uint16_t oracle_f32_to_f16(float f); /* round to nearest even; |f| >= 65520 gives Inf */
float oracle_f16_to_f32(uint16_t h);
uint16_t oracle_f32_to_bf16(float f); /* finite f; round to nearest even; may give Inf */
float oracle_bf16_to_f32(uint16_t b);

uint32_t oracle_f32_bits(float f);
float oracle_f32_from_bits(uint32_t u);

#endif
