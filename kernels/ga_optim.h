/* Optimizer steps applied on the server to the aggregated gradient, CPU (OpenMP) and CUDA
 * behind one signature, bit-identical on both and for any thread count (scalar coefficients
 * are computed once on the host; no FMA contraction), except for the bit pattern of a NaN
 * result (non-finite gradients are the caller's to reject). On GA_BACKEND_CUDA the vectors are
 * device memory and the step is queued on ex->cuda_stream (ga_exec_sync waits for it). Buffers
 * are borrowed; state buffers are owned by the caller, zero at start. Vectors must not overlap.
 * Checks, in order: ex or hp NULL, or a vector NULL with n > 0 -> GA_E_INVAL; hyper-parameters
 * -> GA_E_OPTIM; backend -> GA_E_BACKEND / GA_E_NO_CUDA / GA_E_NO_DEVICE. A failed call changes
 * nothing; n == 0 with valid arguments is a no-op. */
#ifndef GA_OPTIM_H
#define GA_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ga_exec.h"
#include "ga_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* SGD (PyTorch semantics, dampening 0). lr >= 0, momentum in [0, 1), weight_decay >= 0, all
 * finite; nesterov needs momentum > 0. Per element, with d = g:
 *   if (weight_decay != 0) d = d + weight_decay * p
 *   if (momentum != 0) { buf = momentum * buf + d; d = nesterov ? d + momentum * buf : buf; }
 *   p = p - lr * d                                                                        */
typedef struct ga_sgd_params {
    float lr;
    float momentum;
    float weight_decay;
    bool nesterov;
} ga_sgd_params;

/* momentum_buf: n floats when momentum != 0, else may be NULL. */
ga_status ga_sgd_step(const ga_exec *ex, const ga_sgd_params *hp, float *param, float *momentum_buf,
                      const float *grad, size_t n);

/* Adam (PyTorch semantics; AdamW when decoupled). lr >= 0, beta1 and beta2 in [0, 1),
 * eps > 0, weight_decay >= 0, all finite. Per element, for step t >= 1:
 *   if (weight_decay != 0) { decoupled ? p = p * (1 - lr * weight_decay) : g = g + weight_decay * p }
 *   m = beta1 * m + (1 - beta1) * g
 *   v = beta2 * v + (1 - beta2) * (g * g)
 *   p = p - (lr / (1 - beta1^t)) * (m / (sqrt(v) / sqrt(1 - beta2^t) + eps))
 * with the scalars computed once on the host from the float hyper-parameters, in double and
 * rounded to float once each:
 *   c1 = (float)(1 - beta1), c2 = (float)(1 - beta2), decay = (float)(1 - lr * wd),
 *   step_size = (float)(lr / (1 - pow(beta1, t))), sqrt_bc2 = (float)sqrt(1 - pow(beta2, t)),
 * and then per element exactly, in float:
 *   m = beta1 * m + c1 * g;  v = beta2 * v + c2 * (g * g);
 *   p = p - step_size * (m / (sqrtf(v) / sqrt_bc2 + eps)).
 * t >= 1 (t == 0 is GA_E_OPTIM), and so is a step whose step_size (or, for AdamW, decay) is
 * not a finite float. */
typedef struct ga_adam_params {
    float lr;
    float beta1;
    float beta2;
    float eps;
    float weight_decay;
    bool decoupled;
} ga_adam_params;

ga_status ga_adam_step(const ga_exec *ex, const ga_adam_params *hp, uint64_t t, float *param, float *m, float *v,
                       const float *grad, size_t n);

#ifdef __cplusplus
}
#endif
#endif
