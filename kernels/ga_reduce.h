/* Reductions and element-wise arithmetic over fp32 vectors, CPU (OpenMP) and CUDA behind one
 * signature, bit-identical on both and for any thread count (a NaN result is NaN on both, but its bit pattern may differ:
 * x86 propagates an input's payload, CUDA returns its canonical NaN). On GA_BACKEND_CUDA every
 * float pointer is device memory; the `inputs` array itself is host memory, and the work is
 * queued on ex->cuda_stream (ga_exec_sync waits for it). Buffers are borrowed. Checks: ex NULL,
 * a vector NULL with n > 0, or a count out of range -> GA_E_INVAL; a non-finite scale ->
 * GA_E_NONFINITE; then the backend (GA_E_BACKEND / GA_E_NO_CUDA / GA_E_NO_DEVICE). A failed
 * call changes nothing; n == 0 with valid arguments is a no-op. */
#ifndef GA_REDUCE_H
#define GA_REDUCE_H

#include <stddef.h>

#include "ga_exec.h"
#include "ga_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most inputs one ga_reduce_sum takes (the CUDA kernel gets the pointers by value). */
#define GA_REDUCE_MAX_INPUTS 256

/* out[i] = (((inputs[0][i] + inputs[1][i]) + inputs[2][i]) + ...) + inputs[count-1][i]:
 * added in rank order, so the result does not depend on arrival order. out may be inputs[0]
 * but must not overlap any other input (out == inputs[k], k > 0, is GA_E_INVAL). count in
 * [1, GA_REDUCE_MAX_INPUTS], else GA_E_INVAL. */
ga_status ga_reduce_sum(const ga_exec *ex, const float *const *inputs, int count, size_t n, float *out);

/* acc[i] = acc[i] + x[i]. acc may be x; no other overlap. */
ga_status ga_reduce_add(const ga_exec *ex, float *acc, const float *x, size_t n);

/* x[i] = x[i] * s (s finite, else GA_E_NONFINITE). Used for the mean: s = 1/W as a float. */
ga_status ga_reduce_scale(const ga_exec *ex, float *x, size_t n, float s);

/* out[i] = a[i] - b[i]. out may be a or b; no other overlap. (The store's pull delta:
 * parameters minus the published copy.) */
ga_status ga_reduce_sub(const ga_exec *ex, float *out, const float *a, const float *b, size_t n);

#ifdef __cplusplus
}
#endif
#endif
