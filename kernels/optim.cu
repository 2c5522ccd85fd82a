/* PLACEHOLDER: replaced by the real implementation in this session. */
#include "ga_optim.h"

extern "C" ga_status ga_sgd_step_cuda_placeholder(const ga_exec *ex, const ga_sgd_params *hp, float *param, float *momentum_buf,
    const float *grad, size_t n)
{ (void)ex, (void)hp, (void)param, (void)momentum_buf, (void)grad, (void)n; return GA_E_NO_CUDA; }
extern "C" ga_status ga_adam_step_cuda_placeholder(const ga_exec *ex, const ga_adam_params *hp, uint64_t t, float *param, float *m, float *v,
    const float *grad, size_t n)
{ (void)ex, (void)hp, (void)t, (void)param, (void)m, (void)v, (void)grad, (void)n; return GA_E_NO_CUDA; }
