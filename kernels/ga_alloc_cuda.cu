/* Device (cudaMalloc) and pinned host (cudaMallocHost) memory, accounted in GA_MEM_DEVICE and
 * GA_MEM_PINNED. A device block cannot carry a size header, so each domain keeps a
 * mutex-protected open-addressing table pointer -> size (linear probing, backward-shift delete). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>

#include "cuda_check.h"
#include "ga_alloc.h"
#include "ga_exec.h"

namespace {

struct slot {
    void *ptr; /* NULL = empty */
    size_t bytes;
};

/* Live blocks of one domain. The slot array is the table's own bookkeeping: plain calloc, not
 * accounted, so a domain's in-use figure is exactly the bytes callers asked for. */
struct size_table {
    std::mutex lock;
    slot *slots;
    size_t cap; /* power of two, or 0 before the first insert */
    size_t count;
};

size_table device_table{};
size_table pinned_table{};

} // namespace

static size_t home_of(const void *ptr, size_t mask)
{
    /* Blocks are 256-byte (device) or page aligned: mix the high bits down (murmur3 finaliser). */
    uint64_t x = (uint64_t)(uintptr_t)ptr;
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    return (size_t)x & mask;
}

static void place(slot *slots, size_t mask, void *ptr, size_t bytes)
{
    size_t i = home_of(ptr, mask);
    while (slots[i].ptr) i = (i + 1) & mask;
    slots[i].ptr = ptr;
    slots[i].bytes = bytes;
}

/* Keeps the load at most 1/2. Caller holds t->lock. */
static bool table_put(size_table *t, void *ptr, size_t bytes)
{
    if (2 * (t->count + 1) > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        slot *slots = (slot *)calloc(cap, sizeof *slots);
        if (!slots) return false;
        for (size_t i = 0; i < t->cap; i++)
            if (t->slots[i].ptr) place(slots, cap - 1, t->slots[i].ptr, t->slots[i].bytes);
        free(t->slots);
        t->slots = slots;
        t->cap = cap;
    }
    place(t->slots, t->cap - 1, ptr, bytes);
    t->count++;
    return true;
}

/* Removes ptr and returns its size; false when ptr is not in the table. Caller holds t->lock. */
static bool table_take(size_table *t, void *ptr, size_t *bytes)
{
    if (t->cap == 0) return false;
    size_t mask = t->cap - 1, i = home_of(ptr, mask);
    while (t->slots[i].ptr != ptr) {
        if (!t->slots[i].ptr) return false;
        i = (i + 1) & mask;
    }
    *bytes = t->slots[i].bytes;
    /* Backward shift: an entry after the hole moves into it when its probe from its home slot
     * would otherwise stop at the hole, i.e. when the hole lies in [home, j) cyclically. */
    for (size_t j = (i + 1) & mask; t->slots[j].ptr; j = (j + 1) & mask) {
        size_t home = home_of(t->slots[j].ptr, mask);
        if (((i - home) & mask) < ((j - home) & mask)) {
            t->slots[i] = t->slots[j];
            i = j;
        }
    }
    t->slots[i].ptr = nullptr;
    t->slots[i].bytes = 0;
    t->count--;
    return true;
}

static ga_status alloc_status(cudaError_t e)
{
    ga_status rc = ga_cuda_status(e);
    return e == cudaErrorMemoryAllocation ? GA_E_NOMEM : rc;
}

/* A 0-byte request still gets a unique block (as ga_malloc); 0 bytes are accounted. */
ga_status ga_device_malloc(size_t bytes, void **out)
{
    if (!out) return GA_E_INVAL;
    if (ga_cuda_device_count() == 0) return GA_E_NO_DEVICE;
    void *ptr = nullptr;
    GA_CHECK(alloc_status(cudaMalloc(&ptr, bytes ? bytes : 1)));
    {
        std::lock_guard<std::mutex> hold(device_table.lock);
        if (!table_put(&device_table, ptr, bytes)) {
            (void)ga_cuda_status(cudaFree(ptr));
            return GA_E_NOMEM;
        }
    }
    ga_mem_account_add(GA_MEM_DEVICE, bytes);
    *out = ptr;
    return GA_OK;
}

/* A pointer this allocator did not hand out (or already freed) is left alone. */
void ga_device_free(void *p)
{
    if (!p) return;
    size_t bytes = 0;
    {
        std::lock_guard<std::mutex> hold(device_table.lock);
        if (!table_take(&device_table, p, &bytes)) return;
    }
    (void)ga_cuda_status(cudaFree(p));
    ga_mem_account_sub(GA_MEM_DEVICE, bytes);
}

ga_status ga_pinned_malloc(size_t bytes, void **out)
{
    if (!out) return GA_E_INVAL;
    if (ga_cuda_device_count() == 0) return GA_E_NO_DEVICE;
    void *ptr = nullptr;
    GA_CHECK(alloc_status(cudaMallocHost(&ptr, bytes ? bytes : 1)));
    {
        std::lock_guard<std::mutex> hold(pinned_table.lock);
        if (!table_put(&pinned_table, ptr, bytes)) {
            (void)ga_cuda_status(cudaFreeHost(ptr));
            return GA_E_NOMEM;
        }
    }
    ga_mem_account_add(GA_MEM_PINNED, bytes);
    *out = ptr;
    return GA_OK;
}

void ga_pinned_free(void *p)
{
    if (!p) return;
    size_t bytes = 0;
    {
        std::lock_guard<std::mutex> hold(pinned_table.lock);
        if (!table_take(&pinned_table, p, &bytes)) return;
    }
    (void)ga_cuda_status(cudaFreeHost(p));
    ga_mem_account_sub(GA_MEM_PINNED, bytes);
}

ga_status ga_device_gather(const ga_exec *ex, float *dst, const float *src, size_t start, size_t stride,
                           size_t count)
{
    if (!ex || stride == 0 || (count && (!dst || !src))) return GA_E_INVAL;
    if (ex->backend == GA_BACKEND_CPU) {
        for (size_t k = 0; k < count; k++) dst[k] = src[start + k * stride];
        return GA_OK;
    }
    if (ex->backend != GA_BACKEND_CUDA) return GA_E_BACKEND;
    if (ga_cuda_device_count() == 0) return GA_E_NO_DEVICE;
    if (count == 0) return GA_OK;
    cudaStream_t stream = ga_cuda_stream(ex);
    ga_status st = ga_cuda_status(cudaMemcpy2DAsync(dst, sizeof(float), src + start, stride * sizeof(float),
                                                    sizeof(float), count, cudaMemcpyDefault, stream));
    return st != GA_OK ? st : ga_cuda_status(cudaStreamSynchronize(stream));
}

ga_status ga_device_copy(const ga_exec *ex, void *dst, const void *src, size_t bytes)
{
    if (!ex || (bytes && (!dst || !src))) return GA_E_INVAL;
    if (ex->backend == GA_BACKEND_CPU) {
        if (bytes) memcpy(dst, src, bytes);
        return GA_OK;
    }
    if (ex->backend != GA_BACKEND_CUDA) return GA_E_BACKEND;
    if (ga_cuda_device_count() == 0) return GA_E_NO_DEVICE;
    if (bytes == 0) return GA_OK;
    return ga_cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ga_cuda_stream(ex)));
}
