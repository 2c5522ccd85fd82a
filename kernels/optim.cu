/* CUDA side of ga_optim.h: grid-stride kernels on ex->cuda_stream over the same optim_math.h
 * element functions as optim.c, with the Adam coefficients computed on the host. Launches are
 * asynchronous. */
#include <cuda_runtime.h>

#include "optim_internal.h"
#include "optim_math.h"

static __global__ void sgd_kernel(ga_sgd_params hp, bool decay, int mode, float *p, float *buf, const float *g,
                                  size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        ga_sgd_elem_out o = ga_sgd_elem(hp, decay, mode, p[i], mode != GA_SGD_PLAIN ? buf[i] : 0.0f, g[i]);
        p[i] = o.p;
        if (mode != GA_SGD_PLAIN) buf[i] = o.buf;
    }
}

static __global__ void adam_kernel(ga_adam_coefs c, float *p, float *m, float *v, const float *g, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        ga_adam_elem_state s = ga_adam_elem(c, c.wd_mode, p[i], m[i], v[i], g[i]);
        p[i] = s.p;
        m[i] = s.m;
        v[i] = s.v;
    }
}

static cudaStream_t stream_of(const ga_exec *ex) { return (cudaStream_t)ex->cuda_stream; }

static ga_status launched(void) { return cudaGetLastError() == cudaSuccess ? GA_OK : GA_E_CUDA; }

extern "C" ga_status ga_sgd_step_cuda(const ga_exec *ex, const ga_sgd_params *hp, float *param,
                                      float *momentum_buf, const float *grad, size_t n)
{
    if (n == 0) return GA_OK;
    int mode = ga_sgd_mode(hp);
    sgd_kernel<<<ga_cuda_grid(n), GA_CUDA_BLOCK, 0, stream_of(ex)>>>(
        *hp, ga_sgd_decays(hp), mode, param, mode != GA_SGD_PLAIN ? momentum_buf : NULL, grad, n);
    return launched();
}

extern "C" ga_status ga_adam_step_cuda(const ga_exec *ex, const ga_adam_params *hp, uint64_t t, float *param,
                                       float *m, float *v, const float *grad, size_t n)
{
    ga_adam_coefs c;
    if (!ga_adam_coefs_of(hp, t, &c)) return GA_E_OPTIM; /* checked by ga_adam_step already */
    if (n == 0) return GA_OK;
    adam_kernel<<<ga_cuda_grid(n), GA_CUDA_BLOCK, 0, stream_of(ex)>>>(c, param, m, v, grad, n);
    return launched();
}
