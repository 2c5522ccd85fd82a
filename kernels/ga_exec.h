/* Where a kernel runs: the backend (CPU with OpenMP, or CUDA), the CPU thread and SIMD caps,
 * and the CUDA stream. Every kernel entry point takes one; it is a plain value, borrowed. */
#ifndef GA_EXEC_H
#define GA_EXEC_H

#include <stdbool.h>

#include "ga_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ga_backend { GA_BACKEND_CPU = 0, GA_BACKEND_CUDA = 1, GA_BACKENDS = 2 } ga_backend;

/* CPU instruction-set levels. Every level produces bit-identical results; a lower cap exists
 * for tests and benchmarks. */
typedef enum ga_simd {
    GA_SIMD_AUTO = 0,   /* the best the CPU supports */
    GA_SIMD_SCALAR = 1, /* portable C only */
    GA_SIMD_AVX2 = 2,   /* AVX2 + F16C */
    GA_SIMD_AVX512 = 3  /* AVX-512 F/BW/VL */
} ga_simd;

typedef struct ga_exec {
    ga_backend backend;
    /* CPU: most OpenMP threads a kernel may use; 0 = omp_get_max_threads(). A kernel uses
     * fewer on small inputs (see ga_exec_threads) so small tensors pay no team start-up. */
    int max_threads;
    ga_simd simd;      /* CPU: SIMD cap; GA_SIMD_AUTO = best available */
    void *cuda_stream; /* CUDA: a cudaStream_t; NULL = the legacy default stream */
} ga_exec;

#define GA_EXEC_CPU_INIT {GA_BACKEND_CPU, 0, GA_SIMD_AUTO, NULL}
#define GA_EXEC_CUDA_INIT {GA_BACKEND_CUDA, 0, GA_SIMD_AUTO, NULL}

/* Threads a CPU kernel uses for a pass over `bytes` bytes: 1 below GA_PARALLEL_MIN_BYTES per
 * thread, never more than ex->max_threads (or the OpenMP maximum). */
#define GA_PARALLEL_MIN_BYTES (256u * 1024u)
int ga_exec_threads(const ga_exec *ex, double bytes);

/* The SIMD level a CPU kernel uses: min(ex->simd cap, what the CPU supports). */
ga_simd ga_exec_simd(const ga_exec *ex);
/* Best SIMD level of this CPU (detected once). */
ga_simd ga_cpu_simd(void);
const char *ga_simd_name(ga_simd simd);

/* GA_OK when ex names a backend this build and this machine can run; otherwise why not:
 * GA_E_INVAL (NULL), GA_E_BACKEND, GA_E_NO_CUDA, GA_E_NO_DEVICE. */
ga_status ga_exec_usable(const ga_exec *ex);

/* True when the library was built with CUDA. */
bool ga_cuda_built(void);
/* Number of usable CUDA devices: 0 without CUDA, without a driver or without a GPU. */
int ga_cuda_device_count(void);
/* Blocks until all work queued on ex->cuda_stream is done. GA_OK on the CPU backend.
 * CUDA kernels return once their work is queued: buffers passed to them must stay alive, and
 * results must not be read, until this returns. */
ga_status ga_exec_sync(const ga_exec *ex);

/* Creates a CUDA stream (returned owned in *out, free with ga_cuda_stream_destroy) or
 * destroys one (NULL is a no-op). GA_E_NO_CUDA / GA_E_NO_DEVICE / GA_E_CUDA. */
ga_status ga_cuda_stream_create(void **out);
void ga_cuda_stream_destroy(void *stream);

#ifdef __cplusplus
}
#endif
#endif
