/* Weak stand-ins for test_sdk while their real definitions are not on this branch: the
 * accounted protobuf-c allocator (proto/ga_wire.c) and ga_codec_check_payload (kernels). A real
 * definition, when linked, takes precedence. */
#include <string.h>

#include "ga_alloc.h"
#include "ga_codec.h"
#include "ga_wire.h"

static void *wire_alloc(void *ud, size_t size)
{
    (void)ud;
    return ga_malloc(size);
}

static void wire_free(void *ud, void *p)
{
    (void)ud;
    ga_free(p);
}

__attribute__((weak)) ProtobufCAllocator ga_wire_allocator = {wire_alloc, wire_free, NULL};

__attribute__((weak)) ga_status ga_codec_check_payload(ga_codec_id codec, const ga_codec_params *params,
                                                       const void *payload, size_t len, size_t n)
{
    ga_exec ex = GA_EXEC_CPU_INIT;
    float *scratch = ga_calloc(n ? n : 1, sizeof(float));
    if (!scratch) return GA_E_NOMEM;
    ga_status st = ga_codec_decode_add(&ex, codec, params, payload, len, n, scratch);
    ga_free(scratch);
    return st;
}
