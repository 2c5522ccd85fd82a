/* GA_HD marks the per-element math that CPU (.c) and CUDA (.cu) files share: one body,
 * compiled by both compilers. Headers using it compile as C11 and as CUDA C++. */
#ifndef GA_HD_H
#define GA_HD_H

#ifdef __CUDACC__
#define GA_HD static __host__ __device__ __forceinline__
#else
#define GA_HD static inline
#endif

#endif
