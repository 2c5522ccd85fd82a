/* CUDA side of ga_optim.h: grid-stride kernels on ex->cuda_stream over the same optim_math.h
 * element functions as optim.c, with the Adam coefficients computed on the host. Launches are
 * asynchronous. */
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "optim_internal.h"
#include "optim_math.h"

static __global__ void sgd_kernel(ga_sgd_params hp, bool decay, int mode, float *p, float *buf, const float *g,
                                  size_t n)
{
    for (size_t i = ga_cuda_tid(); i < n; i += ga_cuda_nthreads()) {
        ga_sgd_elem_out o = ga_sgd_elem(hp, decay, mode, p[i], mode != GA_SGD_PLAIN ? buf[i] : 0.0f, g[i]);
        p[i] = o.p;
        if (mode != GA_SGD_PLAIN) buf[i] = o.buf;
    }
}

static __global__ void adam_kernel(ga_adam_coefs c, float *p, float *m, float *v, const float *g, size_t n)
{
    for (size_t i = ga_cuda_tid(); i < n; i += ga_cuda_nthreads()) {
        ga_adam_elem_state s = ga_adam_elem(c, c.wd_mode, p[i], m[i], v[i], g[i]);
        p[i] = s.p;
        m[i] = s.m;
        v[i] = s.v;
    }
}

extern "C" ga_status ga_sgd_step_cuda(const ga_exec *ex, const ga_sgd_params *hp, float *param,
                                      float *momentum_buf, const float *grad, size_t n)
{
    if (n == 0) return GA_OK;
    int mode = ga_sgd_mode(hp);
    float *buf = mode != GA_SGD_PLAIN ? momentum_buf : NULL;
    return ga_cuda_launch(ga_cuda_stream(ex), n, sgd_kernel, *hp, ga_sgd_decays(hp), mode, param, buf, grad, n);
}

extern "C" ga_status ga_adam_step_cuda(const ga_exec *ex, const ga_adam_params *hp, uint64_t t, float *param,
                                       float *m, float *v, const float *grad, size_t n)
{
    ga_adam_coefs c;
    if (!ga_adam_coefs_of(hp, t, &c)) return GA_E_OPTIM; /* checked by ga_adam_step already */
    if (n == 0) return GA_OK;
    return ga_cuda_launch(ga_cuda_stream(ex), n, adam_kernel, c, param, m, v, grad, n);
}
