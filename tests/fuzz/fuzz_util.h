/* What the service-level fuzz targets share: little-endian reads, the byte buffer a received
 * message arrives as (cut into slices as gRPC may deliver it), and a check that aborts with a
 * message (libFuzzer then saves the input). Header-only: each target is one translation unit. */
#ifndef GA_FUZZ_UTIL_H
#define GA_FUZZ_UTIL_H

#include <grpc/byte_buffer.h>
#include <grpc/slice.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* A property of the code under test failed: report and abort (a libFuzzer finding). */
#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static inline uint16_t fuzz_rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* A byte buffer holding data[0..len) as gRPC hands a received message up: `cut` picks the
 * slicing (0: one slice; 1: two slices split at `at` % (len + 1); 2: slices of 1 + at % 7 bytes;
 * 3: an empty slice, then the rest), so the unpacker's many-slice path is fuzzed too. Owned
 * (grpc_byte_buffer_destroy). */
static inline grpc_byte_buffer *fuzz_byte_buffer(const uint8_t *data, size_t len, unsigned cut, unsigned at)
{
    enum { MAX_SLICES = 64 };
    grpc_slice s[MAX_SLICES];
    size_t n = 0;
    cut &= 3;
    if (cut == 1) {
        size_t k = at % (len + 1);
        s[n++] = grpc_slice_from_copied_buffer((const char *)data, k);
        s[n++] = grpc_slice_from_copied_buffer((const char *)data + k, len - k);
    } else if (cut == 2) {
        size_t step = 1 + at % 7, pos = 0;
        while (pos < len) {
            size_t k = len - pos;
            if (k > step && n < MAX_SLICES - 1) k = step;
            s[n++] = grpc_slice_from_copied_buffer((const char *)data + pos, k);
            pos += k;
        }
        if (n == 0) s[n++] = grpc_empty_slice();
    } else if (cut == 3) {
        s[n++] = grpc_empty_slice();
        s[n++] = grpc_slice_from_copied_buffer((const char *)data, len);
    } else {
        s[n++] = grpc_slice_from_copied_buffer((const char *)data, len);
    }
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(s, n);
    for (size_t i = 0; i < n; i++) grpc_slice_unref(s[i]);
    return bb;
}

#endif
