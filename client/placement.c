/* Placement of tensors over shards: the split of large tensors into aligned ranges, the hash of
 * small ones, and the names pieces carry (placement.h). */
#include "placement.h"

#include <stdio.h>

#include "chunks.h"

uint64_t ga_placement_hash(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull; /* the FNV offset basis */
    for (const unsigned char *s = (const unsigned char *)name; *s; s++) h = (h ^ *s) * 1099511628211ull;
    return h;
}

ga_status ga_placement_unit(ga_codec_id codec, const ga_codec_params *params, size_t chunk_bytes, size_t *unit)
{
    if (ga_codec_fixed_size(codec)) {
        size_t bytes; /* still refuse an unknown codec */
        ga_status st = ga_codec_encoded_size(codec, params, GA_CHUNK_ALIGN, &bytes);
        if (st == GA_OK) *unit = GA_CHUNK_ALIGN;
        return st;
    }
    return ga_chunks_push_elems(codec, params, chunk_bytes, unit);
}

uint32_t ga_placement_plan(const char *name, size_t n, size_t unit, uint64_t split_elements, uint32_t nshards,
                           ga_placement_piece *out)
{
    if (nshards <= 1) {
        out[0] = (ga_placement_piece){0, 0, n};
        return 1;
    }
    uint32_t h = (uint32_t)(ga_placement_hash(name) % nshards);
    size_t units = unit ? n / unit + (n % unit != 0) : 1;
    if (split_elements == 0 || (uint64_t)n < split_elements || units < 2) {
        out[0] = (ga_placement_piece){h, 0, n};
        return 1;
    }
    uint32_t np = units < nshards ? (uint32_t)units : nshards;
    size_t off = 0;
    for (uint32_t j = 0; j < np; j++) {
        /* floor(units * (j + 1) / np), without the product. */
        size_t end_units = units / np * (j + 1) + units % np * (j + 1) / np;
        size_t end = j + 1 == np ? n : end_units * unit;
        out[j] = (ga_placement_piece){(h + j) % nshards, off, end - off};
        off = end;
    }
    return np;
}

int ga_placement_piece_name(const char *name, uint32_t j, uint32_t npieces, char *buf, size_t cap)
{
    if (npieces <= 1) return snprintf(buf, cap, "%s", name);
    return snprintf(buf, cap, "%s@%u/%u", name, j, npieces);
}
