/* ga_blob: a reference-counted byte block, immutable while shared. A published parameter
 * snapshot or an encoded pull delta is one blob, shared by every pull that streams it and
 * released by the last one (on whatever thread gRPC finishes the send). */
#ifndef GA_BLOB_H
#define GA_BLOB_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ga_blob {
    uint8_t *data; /* 64-byte aligned, `size` bytes; written only while no one else holds it */
    size_t size;
} ga_blob; /* the reference count is private to blob.c */

/* A new blob of `size` bytes with one reference, contents undefined; NULL when out of memory.
 * Memory comes from ga_malloc (accounted). */
ga_blob *ga_blob_create(size_t size);
/* What a blob of `size` bytes takes from the accounted allocator (ga_mem_in_use). */
size_t ga_blob_footprint(size_t size);
/* Adds a reference; returns b. Any thread. */
ga_blob *ga_blob_ref(ga_blob *b);
/* Drops a reference and frees the blob with the last one. NULL is a no-op. Any thread. */
void ga_blob_unref(ga_blob *b);
/* The references held now. Exact only where the caller knows no thread can take a new one
 * meanwhile (store.h ga_store_apply_in_place); then a count that shows only the caller's own
 * references also means every other holder has released its reference, and (acquire) whatever
 * it read of the blob happened before the caller's next write to it. */
int ga_blob_refs(const ga_blob *b);
/* Its owner (the core, publishing a newer version) is done with b, which other holders (pulls
 * still sending it) may keep: from now until the last reference goes, b's footprint counts in
 * *pinned (any thread; the memory budget reads it). The caller holds a reference. Once. */
void ga_blob_retire(ga_blob *b, _Atomic uint64_t *pinned);
/* ga_blob_unref with a void * argument: the release callback for ga_wire_pack. */
void ga_blob_release(void *b);

#endif
