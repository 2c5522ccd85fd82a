/* CUDA side of ga_reduce.h: grid-stride kernels on ex->cuda_stream, one thread per element,
 * adding inputs in rank order exactly as reduce.c does. Launches are asynchronous. */
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "optim_internal.h"

/* The input pointers travel by value in the kernel's parameter space (2 KB at most). */
typedef struct sum_inputs {
    const float *p[GA_REDUCE_MAX_INPUTS];
} sum_inputs;

static __global__ void sum_kernel(const __grid_constant__ sum_inputs in, int count, size_t n, float *out)
{
    for (size_t i = ga_cuda_tid(); i < n; i += ga_cuda_nthreads()) {
        float s = in.p[0][i];
        for (int k = 1; k < count; k++) s = s + in.p[k][i];
        out[i] = s;
    }
}

static __global__ void add_kernel(float *acc, const float *x, size_t n)
{
    for (size_t i = ga_cuda_tid(); i < n; i += ga_cuda_nthreads())
        acc[i] = acc[i] + x[i];
}

static __global__ void sub_kernel(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = ga_cuda_tid(); i < n; i += ga_cuda_nthreads())
        out[i] = a[i] - b[i];
}

static __global__ void scale_kernel(float *x, size_t n, float s)
{
    for (size_t i = ga_cuda_tid(); i < n; i += ga_cuda_nthreads())
        x[i] = x[i] * s;
}

extern "C" ga_status ga_reduce_sum_cuda(const ga_exec *ex, const float *const *inputs, int count, size_t n,
                                        float *out)
{
    if (n == 0) return GA_OK;
    sum_inputs in = {};
    for (int k = 0; k < count; k++) in.p[k] = inputs[k];
    return ga_cuda_launch(ga_cuda_stream(ex), n, sum_kernel, in, count, n, out);
}

extern "C" ga_status ga_reduce_add_cuda(const ga_exec *ex, float *acc, const float *x, size_t n)
{
    if (n == 0) return GA_OK;
    return ga_cuda_launch(ga_cuda_stream(ex), n, add_kernel, acc, x, n);
}

extern "C" ga_status ga_reduce_scale_cuda(const ga_exec *ex, float *x, size_t n, float s)
{
    if (n == 0) return GA_OK;
    return ga_cuda_launch(ga_cuda_stream(ex), n, scale_kernel, x, n, s);
}

extern "C" ga_status ga_reduce_sub_cuda(const ga_exec *ex, float *out, const float *a, const float *b, size_t n)
{
    if (n == 0) return GA_OK;
    return ga_cuda_launch(ga_cuda_stream(ex), n, sub_kernel, out, a, b, n);
}
