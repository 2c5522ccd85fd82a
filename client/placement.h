/* Where a tensor lives when a job is spread over several shards (independent gradagg-servers):
 * a large tensor is cut into contiguous aligned ranges, one per shard, a small one goes whole to
 * the shard its name hashes to. Pure functions: every rank computes the same placement from the
 * same inputs (docs/sdk.md, "Sharding"). */
#ifndef GA_PLACEMENT_H
#define GA_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

#include "ga_codec.h"

/* Most shards a client takes (each has a connection and a thread). */
#define GA_PLACEMENT_MAX_SHARDS 64u

/* One piece of a tensor: elements [off, off + count) on shard `shard`. */
typedef struct ga_placement_piece {
    uint32_t shard;
    size_t off, count;
} ga_placement_piece;

/* FNV-1a (64 bit) of a NUL-terminated name. */
uint64_t ga_placement_hash(const char *name);

/* Elements every cut of a split tensor is a multiple of. Fixed-size codecs encode block by block,
 * so any GA_CHUNK_ALIGN cut gives the bytes of one shard: GA_CHUNK_ALIGN. topk selects per pushed
 * chunk: its push chunk length (ga_chunks_push_elems), so the ranges are whole chunks and the
 * chunking is that of one shard. Errors as ga_codec_encoded_size. */
ga_status ga_placement_unit(ga_codec_id codec, const ga_codec_params *params, size_t chunk_bytes, size_t *unit);

/* The pieces of tensor `name` of n > 0 elements over nshards in [1, GA_PLACEMENT_MAX_SHARDS]
 * into out[0..nshards), in element order, covering [0, n) exactly once; returns their number P.
 * One shard: one piece on shard 0. Otherwise a tensor of at least split_elements elements
 * (0 = never split) with at least two units is cut into P = min(nshards, units) ranges of whole
 * units (unit > 0; the last range takes the partial unit), as even as whole units allow; piece j
 * goes to shard (h + j) mod nshards, h = ga_placement_hash(name) mod nshards. Anything else is
 * one piece on shard h. */
uint32_t ga_placement_plan(const char *name, size_t n, size_t unit, uint64_t split_elements, uint32_t nshards,
                           ga_placement_piece *out);

/* The name piece j of P carries on its shard: name itself when P == 1, else "<name>@<j>/<P>".
 * Writes at most cap bytes (NUL included) and returns the length snprintf would (>= cap: cut). */
int ga_placement_piece_name(const char *name, uint32_t j, uint32_t npieces, char *buf, size_t cap);

#endif
