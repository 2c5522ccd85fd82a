/* The C library heap's policy for the server process (docs/reliability.md, "Memory"). glibc's
 * defaults cost a shard twice over: one arena per thread keeps what each gRPC and task thread
 * freed, and the dynamic mmap threshold climbs after the first large free, so tensor-sized buffers
 * come from an arena and stay resident after their free; while a block past a fixed threshold is a
 * mapping of its own, whose pages the kernel faults in and clears at each allocation. A push
 * arrives as chunks of about 1 MiB of payload (the SDK's chunk_bytes), each copied out of gRPC's
 * slices into a block of its own: as mappings, faulting their pages in and unmapping them took a
 * third of a shard's CPU for codec-none pushes.
 *
 * So: two arenas; blocks of GA_HEAP_MMAP_THRESHOLD and more (tensor-sized buffers) are mappings,
 * returned to the kernel when freed; the smaller ones (chunk payloads) come from the arenas, each
 * of which keeps up to a quarter of the memory budget that a step freed for the next one instead
 * of handing it back at every free; ga_heap_release hands it back once the server is idle, and
 * after a model's initial values (an init of GA_HEAP_MMAP_THRESHOLD bytes or more) went in. The
 * environment's MALLOC_ARENA_MAX / MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ win when set.
 * Without glibc each is a no-op. */
#ifndef GA_HEAP_H
#define GA_HEAP_H

#include <stddef.h>
#include <stdint.h>

/* Blocks this large and larger are mappings of their own: a 4 MiB chunk payload and its message
 * header stay below it. */
#define GA_HEAP_MMAP_THRESHOLD (((size_t)4 << 20) + ((size_t)64 << 10))

/* Sets the policy above for a server whose memory budget (--max-memory-mb) is budget_bytes: an
 * arena keeps up to budget_bytes / 4 freed (at most INT_MAX bytes, mallopt's range). Call before
 * any thread starts. */
void ga_heap_tune(uint64_t budget_bytes);

/* Hands the arenas' free memory back to the kernel (malloc_trim): the next allocations fault
 * their pages in again. */
void ga_heap_release(void);

#endif
