/* Reductions over fp32 vectors, CPU (OpenMP) and CUDA behind one signature, bit-identical on
 * both and for any thread count. On GA_BACKEND_CUDA every float pointer is device memory;
 * the `inputs` array itself is host memory. Buffers are borrowed. */
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
 * but no other input. count in [1, GA_REDUCE_MAX_INPUTS], else GA_E_INVAL. */
ga_status ga_reduce_sum(const ga_exec *ex, const float *const *inputs, int count, size_t n, float *out);

/* acc[i] = acc[i] + x[i]. */
ga_status ga_reduce_add(const ga_exec *ex, float *acc, const float *x, size_t n);

/* x[i] = x[i] * s (s finite, else GA_E_NONFINITE). Used for the mean: s = 1/W as a float. */
ga_status ga_reduce_scale(const ga_exec *ex, float *x, size_t n, float s);

#ifdef __cplusplus
}
#endif
#endif
