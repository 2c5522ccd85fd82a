/* The C library heap's policy (heap.h). */
#include "heap.h"

#include <limits.h>
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

void ga_heap_tune(uint64_t budget_bytes)
{
#ifdef __GLIBC__
    uint64_t keep = budget_bytes / 4;
    if (!getenv("MALLOC_ARENA_MAX")) mallopt(M_ARENA_MAX, 2);
    if (!getenv("MALLOC_MMAP_THRESHOLD_")) mallopt(M_MMAP_THRESHOLD, (int)GA_HEAP_MMAP_THRESHOLD);
    if (!getenv("MALLOC_TRIM_THRESHOLD_")) mallopt(M_TRIM_THRESHOLD, keep > INT_MAX ? INT_MAX : (int)keep);
#else
    (void)budget_bytes;
#endif
}

void ga_heap_release(void)
{
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}
