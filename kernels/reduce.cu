/* CUDA side of ga_reduce.h: grid-stride kernels on ex->cuda_stream, one thread per element,
 * adding inputs in rank order exactly as reduce.c does. Launches are asynchronous. */
#include <cuda_runtime.h>

#include "optim_internal.h"

/* The input pointers travel by value in the kernel's parameter space (2 KB at most). */
typedef struct sum_inputs {
    const float *p[GA_REDUCE_MAX_INPUTS];
} sum_inputs;

static __global__ void sum_kernel(const __grid_constant__ sum_inputs in, int count, size_t n, float *out)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float s = in.p[0][i];
        for (int k = 1; k < count; k++) s = s + in.p[k][i];
        out[i] = s;
    }
}

static __global__ void add_kernel(float *acc, const float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        acc[i] = acc[i] + x[i];
}

static __global__ void scale_kernel(float *x, size_t n, float s)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = x[i] * s;
}

static cudaStream_t stream_of(const ga_exec *ex) { return (cudaStream_t)ex->cuda_stream; }

static ga_status launched(void) { return cudaGetLastError() == cudaSuccess ? GA_OK : GA_E_CUDA; }

extern "C" ga_status ga_reduce_sum_cuda(const ga_exec *ex, const float *const *inputs, int count, size_t n,
                                        float *out)
{
    if (n == 0) return GA_OK;
    sum_inputs in = {};
    for (int k = 0; k < count; k++) in.p[k] = inputs[k];
    sum_kernel<<<ga_cuda_grid(n), GA_CUDA_BLOCK, 0, stream_of(ex)>>>(in, count, n, out);
    return launched();
}

extern "C" ga_status ga_reduce_add_cuda(const ga_exec *ex, float *acc, const float *x, size_t n)
{
    if (n == 0) return GA_OK;
    add_kernel<<<ga_cuda_grid(n), GA_CUDA_BLOCK, 0, stream_of(ex)>>>(acc, x, n);
    return launched();
}

extern "C" ga_status ga_reduce_scale_cuda(const ga_exec *ex, float *x, size_t n, float s)
{
    if (n == 0) return GA_OK;
    scale_kernel<<<ga_cuda_grid(n), GA_CUDA_BLOCK, 0, stream_of(ex)>>>(x, n, s);
    return launched();
}
