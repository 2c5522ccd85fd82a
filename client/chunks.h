/* How the SDK cuts a tensor into streamed chunks: contiguous element ranges aligned to
 * GA_CHUNK_ALIGN elements (a whole number of blocks of every codec, so a chunked encode equals
 * a whole-tensor encode), each carrying about chunk_bytes of payload. Pure functions. */
#ifndef GA_CHUNKS_H
#define GA_CHUNKS_H

#include <stddef.h>

#include "ga_codec.h"

/* Elements per alignment block: a multiple of every codec's block (2bit 16, 1bit 32,
 * 1bit_scaled 1024). */
#define GA_CHUNK_ALIGN 1024u

/* Elements per chunk when GA_CHUNK_ALIGN elements take block_bytes of payload: the most whole
 * blocks that fit chunk_bytes, at least one. */
size_t ga_chunks_elems(size_t block_bytes, size_t chunk_bytes);

/* Elements per chunk for a codec: ga_chunks_elems of the payload size of one block (for topk,
 * the most a block can take). Errors as ga_codec_encoded_size. */
ga_status ga_chunks_for_codec(ga_codec_id codec, const ga_codec_params *params, size_t chunk_bytes,
                              size_t *elems);

/* Most elements per pushed chunk whatever the codec: bounds the DGC masking scratch and the work
 * a single encode call does (topk payloads are tiny, so chunk_bytes alone would allow hundreds of
 * millions of elements). */
#define GA_CHUNK_MAX_ELEMS ((size_t)4 << 20)

/* Elements per pushed chunk: ga_chunks_for_codec, at most GA_CHUNK_MAX_ELEMS. */
ga_status ga_chunks_push_elems(ga_codec_id codec, const ga_codec_params *params, size_t chunk_bytes,
                               size_t *elems);

/* Number of chunks of a tensor of n elements, elems per chunk (elems > 0). */
size_t ga_chunks_count(size_t n, size_t elems);

/* Chunk i: elements [*off, *off + *count); the last chunk takes the remainder. */
void ga_chunks_range(size_t n, size_t elems, size_t i, size_t *off, size_t *count);

#endif
