/* CPU side of ga_exec: thread count by size and SIMD detection. */
#include "ga_exec.h"

#include <omp.h>
#include <stdatomic.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

int ga_exec_threads(const ga_exec *ex, double bytes)
{
    int max = ex && ex->max_threads > 0 ? ex->max_threads : omp_get_max_threads();
    double want = bytes / (double)GA_PARALLEL_MIN_BYTES;
    if (want < 1.0) return 1;
    return want < (double)max ? (int)want : max;
}

ga_simd ga_cpu_simd(void)
{
    /* Atomic (relaxed): threads may race to detect, and every one computes the same value. */
    static atomic_int detected = GA_SIMD_AUTO;
    ga_simd seen = (ga_simd)atomic_load_explicit(&detected, memory_order_relaxed);
    if (seen != GA_SIMD_AUTO) return seen;
    ga_simd level = GA_SIMD_SCALAR;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    /* F16C from CPUID leaf 1 (ecx bit 29): clang 14 has no "f16c" for __builtin_cpu_supports. */
    unsigned eax, ebx, ecx = 0, edx;
    int f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2") && f16c) level = GA_SIMD_AVX2;
    if (level == GA_SIMD_AVX2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        level = GA_SIMD_AVX512;
#endif
    atomic_store_explicit(&detected, (int)level, memory_order_relaxed);
    return level;
}

ga_simd ga_exec_simd(const ga_exec *ex)
{
    ga_simd best = ga_cpu_simd();
    if (!ex || ex->simd == GA_SIMD_AUTO || ex->simd > best) return best;
    return ex->simd;
}

const char *ga_simd_name(ga_simd simd)
{
    switch (simd) {
    case GA_SIMD_AUTO: return "auto";
    case GA_SIMD_SCALAR: return "scalar";
    case GA_SIMD_AVX2: return "avx2";
    case GA_SIMD_AVX512: return "avx512";
    }
    return "unknown";
}

ga_status ga_exec_usable(const ga_exec *ex)
{
    if (!ex) return GA_E_INVAL;
    if (ex->backend == GA_BACKEND_CPU) return GA_OK;
    if (ex->backend != GA_BACKEND_CUDA) return GA_E_BACKEND;
    if (!ga_cuda_built()) return GA_E_NO_CUDA;
    return ga_cuda_device_count() > 0 ? GA_OK : GA_E_NO_DEVICE;
}
