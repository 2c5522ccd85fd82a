/* Chunk planning: aligned element ranges of about chunk_bytes of payload (chunks.h). */
#include "chunks.h"

size_t ga_chunks_elems(size_t block_bytes, size_t chunk_bytes)
{
    size_t blocks = block_bytes ? chunk_bytes / block_bytes : 1;
    if (blocks == 0) blocks = 1;
    return blocks * GA_CHUNK_ALIGN;
}

ga_status ga_chunks_for_codec(ga_codec_id codec, const ga_codec_params *params, size_t chunk_bytes,
                              size_t *elems)
{
    size_t block_bytes;
    ga_status st = ga_codec_encoded_size(codec, params, GA_CHUNK_ALIGN, &block_bytes);
    if (st != GA_OK) return st;
    if (!ga_codec_fixed_size(codec) && block_bytes > 4) {
        /* topk: a 4-byte count heads each payload; per block only the pairs grow with n. */
        size_t e = ga_chunks_elems(block_bytes - 4, chunk_bytes > 4 ? chunk_bytes - 4 : 0);
        /* Indices are 32-bit per chunk. */
        size_t most = (size_t)(GA_TOPK_MAX_ELEMENTS / GA_CHUNK_ALIGN) * GA_CHUNK_ALIGN;
        *elems = e < most ? e : most;
        return GA_OK;
    }
    *elems = ga_chunks_elems(block_bytes, chunk_bytes);
    return GA_OK;
}

ga_status ga_chunks_push_elems(ga_codec_id codec, const ga_codec_params *params, size_t chunk_bytes,
                               size_t *elems)
{
    size_t e;
    ga_status st = ga_chunks_for_codec(codec, params, chunk_bytes, &e);
    if (st != GA_OK) return st;
    *elems = e < GA_CHUNK_MAX_ELEMS ? e : GA_CHUNK_MAX_ELEMS;
    return GA_OK;
}

size_t ga_chunks_count(size_t n, size_t elems) { return n / elems + (n % elems != 0); }

void ga_chunks_range(size_t n, size_t elems, size_t i, size_t *off, size_t *count)
{
    size_t o = i * elems;
    *off = o;
    *count = n - o < elems ? n - o : elems;
}
