/* Accounted host allocator: a 64-byte header in front of each block records its size and where
 * the C library's allocation starts. */
#include "ga_alloc.h"

#include <omp.h>

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct block_header {
    uint64_t bytes;
    uint64_t magic;
    void *base; /* what free() takes */
    unsigned char pad[GA_ALLOC_ALIGN - 2 * sizeof(uint64_t) - sizeof(void *)];
} block_header;

_Static_assert(sizeof(block_header) == GA_ALLOC_ALIGN, "header keeps the block aligned");

#define BLOCK_MAGIC 0x6761616c6c6f6321ull /* "gaalloc!" */

static _Atomic uint64_t mem_in_use[GA_MEM_DOMAINS];
static _Atomic uint64_t mem_peak[GA_MEM_DOMAINS];

void ga_mem_account_add(ga_mem_domain domain, uint64_t bytes)
{
    uint64_t now = atomic_fetch_add(&mem_in_use[domain], bytes) + bytes;
    uint64_t peak = atomic_load(&mem_peak[domain]);
    while (now > peak && !atomic_compare_exchange_weak(&mem_peak[domain], &peak, now)) {
    }
}

void ga_mem_account_sub(ga_mem_domain domain, uint64_t bytes)
{
    atomic_fetch_sub(&mem_in_use[domain], bytes);
}

uint64_t ga_mem_in_use(ga_mem_domain domain)
{
    return domain < GA_MEM_DOMAINS ? atomic_load(&mem_in_use[domain]) : 0;
}

uint64_t ga_mem_peak(ga_mem_domain domain)
{
    return domain < GA_MEM_DOMAINS ? atomic_load(&mem_peak[domain]) : 0;
}

void ga_mem_peak_reset(ga_mem_domain domain)
{
    if (domain < GA_MEM_DOMAINS) atomic_store(&mem_peak[domain], atomic_load(&mem_in_use[domain]));
}

void *ga_malloc(size_t bytes)
{
    if (bytes > SIZE_MAX - 2 * GA_ALLOC_ALIGN) return NULL;
    /* Round up so aligned_alloc's size-multiple rule holds. */
    size_t total = sizeof(block_header) + ((bytes + GA_ALLOC_ALIGN - 1) & ~(size_t)(GA_ALLOC_ALIGN - 1));
    block_header *h = aligned_alloc(GA_ALLOC_ALIGN, total);
    if (!h) return NULL;
    h->bytes = bytes;
    h->magic = BLOCK_MAGIC;
    h->base = h;
    ga_mem_account_add(GA_MEM_HOST, bytes);
    return h + 1;
}

/* calloc, not malloc + memset: a large block comes from fresh mapped pages that the C library
 * knows are zero, so its pages count in the resident set only once they are written (a zeroed
 * optimizer state costs no memory until the first step). The block is aligned by hand inside
 * an allocation one alignment longer. */
void *ga_calloc(size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size) return NULL;
    size_t bytes = count * size;
    if (bytes > SIZE_MAX - 3 * GA_ALLOC_ALIGN) return NULL;
    void *base = calloc(1, sizeof(block_header) + bytes + GA_ALLOC_ALIGN);
    if (!base) return NULL;
    block_header *h = (block_header *)(((uintptr_t)base + GA_ALLOC_ALIGN - 1) & ~(uintptr_t)(GA_ALLOC_ALIGN - 1));
    h->bytes = bytes;
    h->magic = BLOCK_MAGIC;
    h->base = base;
    ga_mem_account_add(GA_MEM_HOST, bytes);
    return h + 1;
}

void ga_free(void *p)
{
    if (!p) return;
    block_header *h = (block_header *)p - 1;
    ga_mem_account_sub(GA_MEM_HOST, h->bytes);
    h->magic = 0;
    free(h->base);
}

char *ga_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = ga_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void ga_host_copy(const ga_exec *ex, void *dst, const void *src, size_t bytes)
{
    /* Pieces of whole cache lines: each thread writes lines no other thread touches. */
    const size_t line = 64;
    int threads = ga_exec_threads(ex, (double)bytes);
    size_t per = (bytes + (size_t)threads - 1) / (size_t)threads, piece = (per + line - 1) / line * line;
    if (threads <= 1 || piece == 0) {
        if (bytes) memcpy(dst, src, bytes);
        return;
    }
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int t = 0; t < threads; t++) {
        size_t lo = (size_t)t * piece, hi = lo + piece < bytes ? lo + piece : bytes;
        if (lo < hi) memcpy((char *)dst + lo, (const char *)src + lo, hi - lo);
    }
}
