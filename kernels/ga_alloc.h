/* The one accounted allocator for host and device memory. Every buffer of gradagg goes through
 * it, so the service can enforce a memory budget and tests can assert that usage returns to zero.
 * All functions are thread-safe. */
#ifndef GA_ALLOC_H
#define GA_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "ga_exec.h"
#include "ga_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Alignment of every host block: one cache line, and a full AVX-512 vector. */
#define GA_ALLOC_ALIGN 64

typedef enum ga_mem_domain {
    GA_MEM_HOST = 0,   /* pageable host memory */
    GA_MEM_PINNED = 1, /* page-locked host memory (CUDA builds only) */
    GA_MEM_DEVICE = 2, /* CUDA device memory */
    GA_MEM_DOMAINS = 3
} ga_mem_domain;

/* Returns owned, GA_ALLOC_ALIGN-aligned, uninitialised host memory (free with ga_free), or NULL.
 * A request of 0 bytes returns a valid unique block. */
void *ga_malloc(size_t bytes);
/* As ga_malloc, zero-filled; the pages of a large block stay unbacked until written. */
void *ga_calloc(size_t count, size_t size);
/* Frees a block from ga_malloc/ga_calloc. ga_free(NULL) is a no-op. */
void ga_free(void *p);
/* A ga_malloc'd copy of the NUL-terminated s (free with ga_free), or NULL when out of memory. */
char *ga_strdup(const char *s);

/* Device and pinned memory (implemented in ga_alloc_cuda.cu). Without CUDA, allocation fails
 * with GA_E_NO_CUDA. *out is written only on success. Freeing NULL is a no-op. */
ga_status ga_device_malloc(size_t bytes, void **out);
void ga_device_free(void *p);
ga_status ga_pinned_malloc(size_t bytes, void **out);
void ga_pinned_free(void *p);

/* Copies bytes between any two of host, pinned and device memory. On GA_BACKEND_CUDA it is
 * queued on ex->cuda_stream (wait with ga_exec_sync before reading dst or reusing src); on the
 * CPU backend both pointers must be host memory and it is a memcpy. */
ga_status ga_device_copy(const ga_exec *ex, void *dst, const void *src, size_t bytes);

/* A host-to-host memcpy of `bytes` on up to ex's CPU thread cap (ga_exec_threads; whatever
 * ex's backend): what fills a pinned staging buffer from a pageable payload at the host's
 * memory rate rather than one core's. The ranges must not overlap. */
void ga_host_copy(const ga_exec *ex, void *dst, const void *src, size_t bytes);

/* dst[k] = src[start + k * stride] for k < count: a strided sample of src (memory of ex's
 * backend) into host memory, and waits for it (on CUDA: one 2-D copy on ex's stream, then a
 * sync of that stream). stride >= 1. */
ga_status ga_device_gather(const ga_exec *ex, float *dst, const float *src, size_t start, size_t stride,
                           size_t count);

/* Bytes currently allocated, and the high-water mark, in one domain. */
uint64_t ga_mem_in_use(ga_mem_domain domain);
uint64_t ga_mem_peak(ga_mem_domain domain);
/* Restarts one domain's high-water mark at its current use, so that a test or a benchmark reads
 * the peak of one phase. */
void ga_mem_peak_reset(ga_mem_domain domain);

/* Accounting hooks for the CUDA allocator file; not for other callers. */
void ga_mem_account_add(ga_mem_domain domain, uint64_t bytes);
void ga_mem_account_sub(ga_mem_domain domain, uint64_t bytes);

#ifdef __cplusplus
}
#endif
#endif
