/* Backend entry points behind ga_reduce.h and ga_optim.h. Internal to kernels/. The public
 * functions validate every argument and the backend first, so these may assume valid input. */
#ifndef GA_OPTIM_INTERNAL_H
#define GA_OPTIM_INTERNAL_H

#include "ga_optim.h"
#include "ga_reduce.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Declares the _cpu and _cuda twins of one public function; the _cuda one exists only in
 * builds with GA_HAVE_CUDA. */
#define GA_BACKEND_TWINS(name, params) \
    ga_status name##_cpu params;       \
    ga_status name##_cuda params;

GA_BACKEND_TWINS(ga_reduce_sum, (const ga_exec *ex, const float *const *inputs, int count, size_t n, float *out))
GA_BACKEND_TWINS(ga_reduce_add, (const ga_exec *ex, float *acc, const float *x, size_t n))
GA_BACKEND_TWINS(ga_reduce_scale, (const ga_exec *ex, float *x, size_t n, float s))
GA_BACKEND_TWINS(ga_sgd_step, (const ga_exec *ex, const ga_sgd_params *hp, float *param, float *momentum_buf,
                               const float *grad, size_t n))
GA_BACKEND_TWINS(ga_adam_step, (const ga_exec *ex, const ga_adam_params *hp, uint64_t t, float *param, float *m,
                                float *v, const float *grad, size_t n))

#undef GA_BACKEND_TWINS

/* Pointer to the _cuda twin in CUDA builds, NULL otherwise: for the dispatch tables. */
#ifdef GA_HAVE_CUDA
#define GA_CUDA_TWIN(name) name##_cuda
#else
#define GA_CUDA_TWIN(name) NULL
#endif

/* GA_OK when ex names a backend this build and machine can run, else why not. */
static inline ga_status ga_backend_usable(const ga_exec *ex)
{
    if (!ex) return GA_E_INVAL;
    if (ex->backend == GA_BACKEND_CPU) return GA_OK;
    if (ex->backend != GA_BACKEND_CUDA) return GA_E_BACKEND;
    if (!ga_cuda_built()) return GA_E_NO_CUDA;
    return ga_cuda_device_count() > 0 ? GA_OK : GA_E_NO_DEVICE;
}

/* Blocks for a grid-stride launch over n elements at 256 threads a block: enough to fill any
 * current GPU several times over, capped so huge n loops instead of overflowing the grid. */
#define GA_CUDA_BLOCK 256u
static inline unsigned ga_cuda_grid(size_t n)
{
    size_t blocks = (n + GA_CUDA_BLOCK - 1) / GA_CUDA_BLOCK;
    return blocks < 8192u ? (unsigned)blocks : 8192u;
}

#ifdef __cplusplus
}
#endif
#endif
