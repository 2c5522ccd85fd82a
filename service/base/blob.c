/* ga_blob: immutable reference-counted bytes (see blob.h). */
#include "blob.h"

#include <stdatomic.h>

#include "ga_alloc.h"
#include "ga_tsan.h"

typedef struct blob_impl {
    ga_blob pub;
    atomic_int refs;
    _Atomic uint64_t *_Atomic pinned; /* ga_blob_retire's counter, or NULL */
} blob_impl;

ga_blob *ga_blob_create(size_t size)
{
    blob_impl *b = ga_malloc(sizeof *b);
    if (!b) return NULL;
    b->pub.data = ga_malloc(size ? size : 1);
    if (!b->pub.data) {
        ga_free(b);
        return NULL;
    }
    b->pub.size = size;
    atomic_init(&b->refs, 1);
    atomic_init(&b->pinned, NULL);
    return &b->pub;
}

size_t ga_blob_footprint(size_t size)
{
    return sizeof(blob_impl) + (size ? size : 1);
}

ga_blob *ga_blob_ref(ga_blob *b)
{
    atomic_fetch_add_explicit(&((blob_impl *)b)->refs, 1, memory_order_relaxed);
    return b;
}

int ga_blob_refs(const ga_blob *b)
{
    return atomic_load_explicit(&((const blob_impl *)b)->refs, memory_order_acquire);
}

void ga_blob_unref(ga_blob *b)
{
    if (!b) return;
    blob_impl *impl = (blob_impl *)b;
    /* acq_rel: every writer's stores happen before the free on the last reference. */
    if (atomic_fetch_sub_explicit(&impl->refs, 1, memory_order_acq_rel) != 1) return;
    _Atomic uint64_t *pinned = atomic_load_explicit(&impl->pinned, memory_order_acquire);
    if (pinned) atomic_fetch_sub_explicit(pinned, ga_blob_footprint(b->size), memory_order_relaxed);
    ga_free(b->data);
    ga_free(impl);
}

void ga_blob_retire(ga_blob *b, _Atomic uint64_t *pinned)
{
    if (!b || !pinned) return;
    /* Counted before the pointer is seen: the last unref (after the caller's) subtracts it. */
    atomic_fetch_add_explicit(pinned, ga_blob_footprint(b->size), memory_order_relaxed);
    atomic_store_explicit(&((blob_impl *)b)->pinned, pinned, memory_order_release);
}

void ga_blob_release(void *b)
{
    GA_TSAN_ACQUIRE(b); /* released by ga_wire_pack on the sending thread */
    ga_blob_unref(b);
}
