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
GA_BACKEND_TWINS(ga_reduce_sub, (const ga_exec *ex, float *out, const float *a, const float *b, size_t n))
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

#ifdef __cplusplus
}
#endif
#endif
