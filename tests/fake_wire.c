/* A weak stand-in for test_sdk while the real ga_codec_check_payload (kernels, from the core
 * branch) is not on this branch: the real definition, when linked, takes precedence. Delete
 * this file once it is. */
#include <string.h>

#include "ga_alloc.h"
#include "ga_codec.h"

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
