/* The C library heap's policy for the server process (docs/operations.md, "Memory"). glibc's
 * defaults cost a shard twice over: one arena per thread keeps what each gRPC and task thread
 * freed, and the dynamic mmap threshold climbs after the first large free, so tensor-sized buffers
 * come from an arena and stay resident after their free; while every block past the threshold is
 * a mapping of its own, whose pages the kernel faults in and clears at each allocation. A push
 * arrives as chunks of about 1 MiB of payload (the SDK's chunk_bytes), each copied out of gRPC's
 * slices into a block of its own: as mappings, a third of the CPU a shard spends on a codec-none
 * push went to faulting those pages in and unmapping them again.
 *
 * So: two arenas; blocks of GA_HEAP_MMAP_THRESHOLD and more (tensor-sized buffers) are mappings,
 * returned to the kernel when freed; the smaller ones (chunk payloads) come from the arenas, which
 * keep what a step freed for the next one (up to the memory budget) instead of handing it back
 * at every free; and ga_heap_release gives it back once the server is idle. The environment's
 * MALLOC_ARENA_MAX / MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ win when set. Without glibc
 * each is a no-op. */
#ifndef GA_HEAP_H
#define GA_HEAP_H

#include <stddef.h>
#include <stdint.h>

/* Blocks this large and larger are mappings of their own: a 4 MiB chunk payload and its message
 * header stay below it. */
#define GA_HEAP_MMAP_THRESHOLD (((size_t)4 << 20) + ((size_t)64 << 10))

/* Sets the policy above; keep_bytes (the memory budget) bounds what an arena keeps freed on top
 * for reuse (at most INT_MAX bytes, mallopt's range). Call before any thread starts. */
void ga_heap_tune(uint64_t keep_bytes);

/* Hands the arenas' free memory back to the kernel (malloc_trim). For an idle server: the next
 * allocations fault their pages in again. */
void ga_heap_release(void);

#endif
