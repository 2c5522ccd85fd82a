/* Internal to the kernels/ .cu files (never included by C): CUDA errors as GA_E_CUDA, launch
 * geometry for grid-stride kernels, and the device validation flag that a check kernel raises
 * before any kernel that modifies caller state is launched. A CUDA entry point returns once its
 * last kernel is queued on ex->cuda_stream (validation itself waits for the flag); callers wait
 * for the results with ga_exec_sync, and keep the buffers alive until then. */
#ifndef GA_CUDA_CHECK_H
#define GA_CUDA_CHECK_H

#ifndef __CUDACC__
#error "cuda_check.h is for .cu files only"
#endif

#include <cuda_runtime.h>
#include <stddef.h>

#include <utility>

#include "ga_alloc.h"
#include "ga_exec.h"
#include "ga_status.h"

/* Threads per block of every kernel in kernels/ (a multiple of the 32-lane warp). */
#define GA_CUDA_THREADS 256u
/* Blocks per launch at most: several waves on any current GPU (an H100 holds 132 x 8 such
 * blocks at once); grid-stride loops cover larger inputs, so any cap gives the same result. */
#define GA_CUDA_MAX_BLOCKS 4096u

/* cudaSuccess -> GA_OK; anything else -> GA_E_CUDA, and the thread's "last error" is reset so
 * a failure here is not reported again by an unrelated later call. */
static inline ga_status ga_cuda_status(cudaError_t e)
{
    if (e == cudaSuccess) return GA_OK;
    (void)cudaGetLastError();
    return GA_E_CUDA;
}

/* Evaluate a CUDA runtime call; return GA_E_CUDA from the caller when it fails. */
#define GA_CUDA_TRY(expr) GA_CHECK(ga_cuda_status(expr))

/* The stream of a CUDA ga_exec (NULL = the legacy default stream). Work runs on the calling
 * thread's current device, which must be the stream's device. */
static inline cudaStream_t ga_cuda_stream(const ga_exec *ex) { return (cudaStream_t)ex->cuda_stream; }

/* Blocks for `items` threads of work (at least 1, at most GA_CUDA_MAX_BLOCKS). */
static inline unsigned ga_cuda_blocks(size_t items)
{
    size_t blocks = (items + GA_CUDA_THREADS - 1) / GA_CUDA_THREADS;
    if (blocks == 0) blocks = 1;
    return blocks < GA_CUDA_MAX_BLOCKS ? (unsigned)blocks : GA_CUDA_MAX_BLOCKS;
}

/* Grid-stride loop bounds: for (i = ga_cuda_tid(); i < n; i += ga_cuda_nthreads()). */
static __device__ __forceinline__ size_t ga_cuda_tid(void) { return (size_t)blockIdx.x * blockDim.x + threadIdx.x; }
static __device__ __forceinline__ size_t ga_cuda_nthreads(void) { return (size_t)gridDim.x * blockDim.x; }

/* Packing bit fields of consecutive elements into 32-bit words, one element per lane: a warp
 * takes 32 consecutive elements a pass (coalesced reads and writes), starting at a multiple of 32
 * (the loop is the same for every lane, so every lane reaches the shuffles). GA_CUDA_THREADS is a
 * multiple of 32. */
static __device__ __forceinline__ size_t ga_cuda_warp_first(void) { return ga_cuda_tid() & ~(size_t)31; }
static __device__ __forceinline__ size_t ga_cuda_warp_stride(void) { return ga_cuda_nthreads(); }

/* The OR of `bits` over each group of `lanes` lanes (2..32, a power of two) of the warp, in every
 * lane of the group: the word the group packs. */
static __device__ __forceinline__ uint32_t ga_cuda_group_or(uint32_t bits, unsigned lanes)
{
    for (unsigned off = lanes / 2; off > 0; off >>= 1) bits |= __shfl_xor_sync(0xFFFFFFFFu, bits, off);
    return bits;
}

/* Launches kernel<<<ga_cuda_blocks(items), GA_CUDA_THREADS, 0, s>>>(args...) and returns the
 * launch status itself (cudaLaunchKernelEx), not a "last error" another call may have left. */
template <typename... KArgs, typename... Args>
static inline ga_status ga_cuda_launch(cudaStream_t s, size_t items, void (*kernel)(KArgs...), Args &&...args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(ga_cuda_blocks(items));
    cfg.blockDim = dim3(GA_CUDA_THREADS);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = s;
    return ga_cuda_status(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

/* Device scratch for one call, stream-ordered (cudaMallocAsync: the driver's pool, no
 * device-wide synchronisation as cudaMalloc/cudaFree have), accounted as device memory. Free it
 * on the same stream with the same size; the bytes are reused only after the work queued before
 * the free. */
static inline ga_status ga_cuda_scratch_alloc(cudaStream_t s, size_t bytes, void **out)
{
    GA_CUDA_TRY(cudaMallocAsync(out, bytes ? bytes : 1, s));
    ga_mem_account_add(GA_MEM_DEVICE, bytes);
    return GA_OK;
}

static inline ga_status ga_cuda_scratch_free(cudaStream_t s, void *p, size_t bytes)
{
    if (!p) return GA_OK;
    ga_status rc = ga_cuda_status(cudaFreeAsync(p, s));
    ga_mem_account_sub(GA_MEM_DEVICE, bytes);
    return rc;
}

/* The validation flag: launches kernel(args..., flag) where flag is a zeroed device unsigned the
 * kernel ORs bits into (atomicOr: integer, so order does not matter), then copies it to *flags
 * and waits for the stream. The flag is allocated per call, stream-ordered (cudaMallocAsync),
 * so concurrent callers never share one and no device-wide synchronisation happens. Callers
 * launch a kernel that modifies residual or sum only after reading a clean *flags. */
template <typename... KArgs, typename... Args>
static inline ga_status ga_cuda_flags(cudaStream_t s, size_t items, unsigned *flags, void (*kernel)(KArgs...),
                                      Args &&...args)
{
    unsigned *dev = nullptr;
    unsigned host = 0;
    GA_CHECK(ga_cuda_scratch_alloc(s, sizeof *dev, (void **)&dev));
    ga_status rc = ga_cuda_status(cudaMemsetAsync(dev, 0, sizeof *dev, s));
    if (rc == GA_OK) rc = ga_cuda_launch(s, items, kernel, std::forward<Args>(args)..., dev);
    if (rc == GA_OK) rc = ga_cuda_status(cudaMemcpyAsync(&host, dev, sizeof host, cudaMemcpyDeviceToHost, s));
    ga_status freed = ga_cuda_scratch_free(s, dev, sizeof *dev);
    /* Always wait: the copy into `host` must land before this frame is gone. */
    ga_status synced = ga_cuda_status(cudaStreamSynchronize(s));
    if (rc == GA_OK) rc = freed;
    if (rc == GA_OK) rc = synced;
    if (rc == GA_OK) *flags = host;
    return rc;
}

#endif
