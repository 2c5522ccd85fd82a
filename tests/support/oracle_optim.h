/* Slow scalar oracle for ga_reduce.h and ga_optim.h, written from the header contracts alone:
 * one element at a time, in the order the headers give, coefficients computed from scratch.
 * Plus the deterministic test vectors and the byte comparison the reduce/optim tests share. */
#ifndef GA_TEST_ORACLE_OPTIM_H
#define GA_TEST_ORACLE_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "ga_optim.h"

/* out[i] = rank-order sum of inputs[0..count)[i]; out may be inputs[0]. */
void oracle_reduce_sum(const float *const *inputs, int count, size_t n, float *out);
void oracle_reduce_add(float *acc, const float *x, size_t n);
void oracle_reduce_scale(float *x, size_t n, float s);
/* out[i] = a[i] - b[i]; out may be a or b. */
void oracle_reduce_sub(float *out, const float *a, const float *b, size_t n);

/* Valid hyper-parameters only. */
void oracle_sgd_step(const ga_sgd_params *hp, float *param, float *momentum_buf, const float *grad, size_t n);
void oracle_adam_step(const ga_adam_params *hp, uint64_t t, float *param, float *m, float *v, const float *grad,
                      size_t n);

/* Deterministic values for seed: mostly uniform in [-scale, scale), with exact +0 and -0,
 * subnormals and large magnitudes (up to 1e3 * scale) mixed in. */
void oracle_fill(float *x, size_t n, uint32_t seed, float scale);
/* |oracle_fill| values: for Adam's v, which must not be negative. */
void oracle_fill_nonneg(float *x, size_t n, uint32_t seed, float scale);
/* Index of the first element whose bytes differ, or n when a and b are byte-identical. */
size_t oracle_first_mismatch(const float *a, const float *b, size_t n);

#endif
